#include <gtest/gtest.h>

#include <cmath>

#include "common/check.h"
#include "common/dtype.h"
#include "common/status.h"

namespace ds {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}
Status UseHalf(int x, int* out) {
  DS_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = NotFound("tensor 'a'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "NOT_FOUND: tensor 'a'");
  int v = 0;
  EXPECT_TRUE(UseHalf(4, &v).ok());
  EXPECT_EQ(v, 2);
  EXPECT_EQ(UseHalf(3, &v).code(), StatusCode::kInvalidArgument);
}

TEST(Check, ThrowsWithMessage) {
  EXPECT_THROW({ DS_CHECK(1 == 2) << "boom " << 3; }, CheckError);
  try {
    DS_CHECK_EQ(1, 2);
  } catch (const CheckError& e) {
    EXPECT_NE(std::string(e.what()).find("check failed"), std::string::npos);
  }
  EXPECT_NO_THROW({ DS_CHECK(true) << "never"; });
}

TEST(DType, Bf16RoundTrip) {
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f)), 1.0f);
  EXPECT_EQ(RoundBf16(1.00390625f), 1.0f);  // tie rounds to even
  EXPECT_EQ(RoundBf16(1.01171875f), 1.015625f);
}

TEST(DType, Fp8E4M3) {
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    float f = Fp8E4M3ToF32(static_cast<uint8_t>(c));
    uint8_t back = F32ToFp8E4M3(f);
    if (f == 0.0f) continue;  // +-0
    EXPECT_EQ(back, c) << "code " << c;
  }
  EXPECT_EQ(F32ToFp8E4M3(1000.0f), 0x7e);
  EXPECT_EQ(F32ToFp8E4M3(-1000.0f), 0xfe);
}

}  // namespace
}  // namespace ds
