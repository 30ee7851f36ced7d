#include "common/dtype.h"

#include <cmath>

namespace ds {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kI8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
    case DType::kF64: return 8;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI8: return "I8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kF64: return "F64";
  }
  return "?";
}

bool ParseDType(std::string_view n, DType* out) {
  static const struct { const char* name; DType t; } kTable[] = {
      {"F32", DType::kF32},  {"F16", DType::kF16},         {"BF16", DType::kBF16},
      {"F8_E4M3", DType::kF8E4M3}, {"I8", DType::kI8},     {"I32", DType::kI32},
      {"I64", DType::kI64},  {"U8", DType::kU8},           {"BOOL", DType::kBool},
      {"F64", DType::kF64},
  };
  for (const auto& e : kTable)
    if (n == e.name) { *out = e.t; return true; }
  return false;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  // Round-to-nearest-even, written out (clang 14 has no _Float16 on x86, and the fuzz build
  // uses clang). Checked bit-exact against GCC's _Float16 conversion for all 2^32 inputs
  // (NaNs: stay quiet NaNs with the sign and top payload bits).
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((ax >> 13) & 0x3ffu);
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                        // below 2^-14: subnormal half (unit 2^-24)
    float fa;
    std::memcpy(&fa, &ax, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(fa * 16777216.0f));  // exact scaling
  }
  uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);  // rebias 127 -> 15
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent
  return sign | static_cast<uint16_t>(h);
}

float Fp8E4M3ToF32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  if (exp == 0xf && mant == 0x7) return NAN;
  float r;
  if (exp == 0) r = std::ldexp(static_cast<float>(mant), -9);  // subnormal: m/8 * 2^-6
  else r = std::ldexp(static_cast<float>(8 + mant), static_cast<int>(exp) - 10);
  return sign ? -r : r;
}

uint8_t F32ToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Search is simple and exact: candidates are the 127 non-negative finite codes.
  // Binary search over monotone codes 0..0x7e.
  int lo = 0, hi = 0x7e;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (Fp8E4M3ToF32(static_cast<uint8_t>(mid)) <= a) lo = mid; else hi = mid;
  }
  float vl = Fp8E4M3ToF32(static_cast<uint8_t>(lo)), vh = Fp8E4M3ToF32(static_cast<uint8_t>(hi));
  int code;
  if (a - vl < vh - a) code = lo;
  else if (a - vl > vh - a) code = hi;
  else code = (lo % 2 == 0) ? lo : hi;  // tie: even mantissa
  if (a < vl) code = lo;                // a == 0 edge
  return sign | static_cast<uint8_t>(code);
}

}  // namespace ds
