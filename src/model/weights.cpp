// LoadTensorF32: checkpoint tensor -> fp32 host vector (see weights.h).
#include "model/weights.h"

#include <cstring>
#include <sstream>

#include "common/dtype.h"

namespace ds {
namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

template <typename T>
T ReadAt(const uint8_t* base, size_t i) {  // unaligned-safe element read
  T v;
  std::memcpy(&v, base + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

StatusOr<std::vector<float>> LoadTensorF32(const Checkpoint& ckpt, const std::string& name,
                                           const std::vector<int64_t>& expected_shape,
                                           std::array<int, 2> block) {
  const TensorView* t = ckpt.Find(name);
  if (t == nullptr) return NotFound("tensor '" + name + "' is missing from the checkpoint");
  if (t->shape != expected_shape)
    return InvalidArgument("tensor '" + name + "' has shape " + ShapeStr(t->shape) + ", expected " +
                           ShapeStr(expected_shape));
  const size_t n = static_cast<size_t>(t->numel());
  if (t->nbytes != n * DTypeSize(t->dtype))
    return DataLoss("tensor '" + name + "': byte size does not match its shape and dtype");
  std::vector<float> out(n);
  const uint8_t* d = t->data;
  switch (t->dtype) {
    case DType::kF32:
      std::memcpy(out.data(), d, n * sizeof(float));
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = Bf16ToF32(ReadAt<uint16_t>(d, i));
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) out[i] = F16ToF32(ReadAt<uint16_t>(d, i));
      break;
    case DType::kF8E4M3: {
      // Block dequantisation with weight_scale_inv (DeepSeek-V3 inference/kernel.py
      // weight_dequant): w[i][j] = fp8(q[i][j]) * scale_inv[i / b0][j / b1].
      if (t->shape.size() != 2)
        return InvalidArgument("FP8 tensor '" + name + "' must be 2-D, has shape " + ShapeStr(t->shape));
      if (block[0] <= 0 || block[1] <= 0)
        return InvalidArgument("FP8 tensor '" + name + "': weight_block_size must be positive");
      const int64_t rows = t->shape[0], cols = t->shape[1];
      const int64_t br = (rows + block[0] - 1) / block[0], bc = (cols + block[1] - 1) / block[1];
      const std::string sname = name + "_scale_inv";
      const TensorView* s = ckpt.Find(sname);
      if (s == nullptr)
        return NotFound("FP8 tensor '" + name + "' has no scale tensor '" + sname + "'");
      if (s->shape != std::vector<int64_t>{br, bc})
        return InvalidArgument("tensor '" + sname + "' has shape " + ShapeStr(s->shape) +
                               ", expected " + ShapeStr({br, bc}) + " (ceil of " +
                               ShapeStr(t->shape) + " / weight_block_size)");
      std::vector<float> scale(static_cast<size_t>(br * bc));
      for (size_t i = 0; i < scale.size(); ++i) {
        if (s->dtype == DType::kF32) scale[i] = ReadAt<float>(s->data, i);
        else if (s->dtype == DType::kBF16) scale[i] = Bf16ToF32(ReadAt<uint16_t>(s->data, i));
        else return InvalidArgument("tensor '" + sname + "' must be F32 or BF16, is " + DTypeName(s->dtype));
      }
      // Decode table for the 256 e4m3 codes.
      float lut[256];
      for (int c = 0; c < 256; ++c) lut[c] = Fp8E4M3ToF32(static_cast<uint8_t>(c));
#pragma omp parallel for if (rows * cols > (1 << 20))
      for (int64_t i = 0; i < rows; ++i) {
        const float* srow = scale.data() + (i / block[0]) * bc;
        for (int64_t j = 0; j < cols; ++j)
          out[i * cols + j] = lut[d[i * cols + j]] * srow[j / block[1]];
      }
      break;
    }
    default:
      return Unimplemented("tensor '" + name + "' has dtype " + DTypeName(t->dtype) +
                           ", which cannot be loaded as fp32 weights");
  }
  return out;
}

}  // namespace ds
