// F32ToF16 (written out for clang 14, which lacks _Float16 on x86): exact on every half value,
// round-to-nearest-even at ties, overflow to inf, subnormals. (It was also compared bit for bit
// with GCC's _Float16 conversion over all 2^32 floats when written.)
#include <gtest/gtest.h>

#include <cmath>

#include "common/dtype.h"

namespace ds {
namespace {

TEST(DTypeF16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = F16ToF32(static_cast<uint16_t>(h));
    uint16_t back = F32ToF16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(back))) << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << h;
    } else {
      EXPECT_EQ(back, h) << h;
    }
  }
}

TEST(DTypeF16, RoundingAndRanges) {
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even (1.0)
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);  // above tie
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(F32ToF16(-1e10f), 0xfc00);
  EXPECT_EQ(F32ToF16(INFINITY), 0x7c00);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);      // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);      // tie -> even (0)
  EXPECT_EQ(F32ToF16(3 * std::ldexp(1.0f, -26)), 0x0001);  // above tie
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);   // tie rounds up into the normals
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);      // smallest normal
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
}

}  // namespace
}  // namespace ds
