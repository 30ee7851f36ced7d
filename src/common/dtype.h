// Element types used by checkpoints and the engine, and scalar conversions.
// FP8 is OCP e4m3fn (the "F8_E4M3" of safetensors / torch.float8_e4m3fn): 1 sign, 4 exponent
// (bias 7), 3 mantissa bits, no infinities, 0x7f/0xff = NaN, max finite 448.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ds {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kI8, kI32, kI64, kU8, kBool, kF64 };

// Size in bytes of one element.
size_t DTypeSize(DType t);
// safetensors spelling: "F32", "BF16", "F8_E4M3", ...
const char* DTypeName(DType t);
// Parses a safetensors dtype name; false if unknown.
bool ParseDType(std::string_view name, DType* out);

inline float Bf16ToF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved (as torch does).
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// e4m3fn -> f32, exact.
float Fp8E4M3ToF32(uint8_t v);
// f32 -> e4m3fn, round-to-nearest-even, saturating to +-448 (as torch's .to(float8_e4m3fn)
// for finite in-range values; out-of-range values saturate here), NaN -> 0x7f.
uint8_t F32ToFp8E4M3(float f);

// Rounds f to the nearest bf16 value and back (to model bf16 storage in fp32 compute).
inline float RoundBf16(float f) { return Bf16ToF32(F32ToBf16(f)); }

}  // namespace ds
