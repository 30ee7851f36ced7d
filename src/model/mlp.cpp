#include "model/mlp.h"

#include <algorithm>

#include "backend/cpu/ops.h"
#include "model/weights.h"

namespace ds {

Status LoadMlp(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
               int64_t inter, MlpWeights* w) {
  const int64_t H = cfg.hidden_size;
  const auto block = cfg.quant.weight_block_size;
  w->hidden = H;
  w->inter = inter;
  DS_ASSIGN_OR_RETURN(auto gate, LoadTensorF32(ckpt, prefix + ".gate_proj.weight", {inter, H}, block));
  DS_ASSIGN_OR_RETURN(auto up, LoadTensorF32(ckpt, prefix + ".up_proj.weight", {inter, H}, block));
  DS_ASSIGN_OR_RETURN(w->down, LoadTensorF32(ckpt, prefix + ".down_proj.weight", {H, inter}, block));
  w->gate_up.resize(2 * inter * H);
  std::copy(gate.begin(), gate.end(), w->gate_up.begin());
  std::copy(up.begin(), up.end(), w->gate_up.begin() + inter * H);
  return Status::Ok();
}

void MlpForward(const MlpWeights& w, const float* x, int64_t n, float* out, bool accumulate,
                const float* row_scale) {
  if (n == 0) return;
  const int64_t H = w.hidden, I = w.inter;
  // gate_up: [n, 2I]; act: [n, I]; y: [n, H]
  std::vector<float> gate_up(n * 2 * I), act(n * I);
  cpu::Gemm({x, H, w.gate_up.data(), H, gate_up.data(), 2 * I, n, 2 * I, H, false});
  cpu::SiluAndMul({gate_up.data(), 2 * I, act.data(), I, n, I});
  if (row_scale == nullptr) {
    cpu::Gemm({act.data(), I, w.down.data(), I, out, H, n, H, I, accumulate});
    return;
  }
  std::vector<float> y(n * H);
  cpu::Gemm({act.data(), I, w.down.data(), I, y.data(), H, n, H, I, false});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < H; ++j) {
      const float v = y[i * H + j] * row_scale[i];
      out[i * H + j] = accumulate ? out[i * H + j] + v : v;
    }
}

}  // namespace ds
