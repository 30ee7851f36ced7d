// LmHeadArgmax (lm_head_argmax.h) against a double-precision CPU GEMV of the same bf16 inputs
// (error per logit over max(1, |logit|)), and its id against the argmax of the logits it wrote (exact: the
// largest, the lowest index on ties, NaN never chosen): V2-Lite's and V3's LM head shapes, a tie
// between two identical weight rows in different blocks' tiles, NaN rows, and a second call on the
// same workspace (the arrival counter left zero); and the final norm computed in the kernel from an
// fp32 residual row (in_residual, lm_head_norm).
#include <cmath>
#include <cstdio>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/lm_head_argmax.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// tie: two identical rows in different blocks' tiles (on the H200's grid); nan_rows: two rows with
// NaN weights; all_nan: every weight NaN (every logit NaN: id 0, every block's partial empty).
// norm: x is the final norm of an fp32 residual row computed in the kernel (in_residual), the
// reference's x = bf16(v * inv * w) with inv from a double sum; an element near a bf16 rounding
// boundary may round the other way in the kernel's fp32 sum order (one bf16 step, ~|w| / 128 on
// a logit), so that case is bounded at 2e-3 instead of 1e-4.
void RunCase(int64_t N, int64_t K, const char* name, bool tie, bool nan_rows, bool all_nan = false, bool norm = false) {
  ASSERT_EQ(LmHeadArgmaxSupported(N, K), "") << name;
  auto w = RoundBf16Vec(RandomNormal(N * K, 0.05f));
  auto x = RoundBf16Vec(RandomNormal(K, 1.f));
  std::vector<float> residual, norm_w;
  const float eps = 1e-6f;
  if (norm) {
    residual = RandomNormal(K, 3.f);
    norm_w = RandomNormal(K, 0.2f);
    for (float& v : norm_w) v += 1.f;
    double ss = 0;
    for (float v : residual) ss += double(v) * v;
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / K + eps));
    for (int64_t k = 0; k < K; ++k) x[k] = RoundBf16(residual[k] * inv * norm_w[k]);
  }
  if (tie) {  // rows 5 and N - 3 identical and the largest: 5 wins
    for (int64_t k = 0; k < K; ++k) w[5 * K + k] = w[(N - 3) * K + k] = x[k] > 0 ? 0.25f : -0.25f;
  }
  if (nan_rows)
    for (int64_t k = 0; k < K; k += 97) w[7 * K + k] = w[(N / 2) * K + k] = NAN;
  if (all_nan)
    for (float& v : w) v = NAN;
  std::vector<double> ref(N);
  ParallelFor(N, [&](int64_t n) {
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += double(w[n * K + k]) * x[k];
    ref[n] = s;
  });
  Dev<__nv_bfloat16> dw(ToBf16(w)), dx(ToBf16(x));
  Dev<float> dres(norm ? residual : std::vector<float>(4)), dnw(norm ? norm_w : std::vector<float>(4));
  Dev<float> dl(N);
  Dev<int32_t> did(1);
  Dev<uint8_t> dws(LmHeadArgmaxWorkspaceBytes());
  Dev<uint32_t> dcnt(std::vector<uint32_t>{0});
  LmHeadArgmaxParams p;
  p.x = norm ? nullptr : dx.get();
  if (norm) {
    p.in_residual = dres.get();
    p.norm_w = dnw.get();
    p.eps = eps;
  }
  p.w = dw.get();
  p.n = N;
  p.k = K;
  p.logits = dl.get();
  p.out_id = did.get();
  p.ws = dws.get();
  p.counter = dcnt.get();
  for (int rep = 0; rep < 2; ++rep) {
    LmHeadArgmax(p);
    const auto got = dl.Download();
    const int32_t id = did.Download()[0];
    double max_rel = 0;
    int64_t nonfinite = 0, nan_ok = 0;
    for (int64_t n = 0; n < N; ++n) {
      if (std::isnan(ref[n])) {
        nan_ok += std::isnan(got[n]);
        continue;
      }
      if (!std::isfinite(got[n])) { ++nonfinite; continue; }
      // Error over max(1, |logit|): the logits are O(1) (x ~ N(0, 1), w ~ N(0, 0.05^2)).
      max_rel = std::max(max_rel, std::abs(got[n] - ref[n]) / std::max(1.0, std::abs(ref[n])));
    }
    const int32_t host_id = cpu::GreedyArgmax(got.data(), static_cast<int64_t>(got.size()));  // cpu::Sample's greedy rule
    std::printf("[metric] op=lm_head_argmax case=%s rep=%d N=%lld K=%lld max_rel=%.3e nonfinite=%lld id=%d host_id=%d "
                "counter=%u\n",
                name, rep, (long long)N, (long long)K, max_rel, (long long)nonfinite, id, host_id, dcnt.Download()[0]);
    EXPECT_LE(max_rel, norm ? 2e-3 : 1e-4) << name;
    EXPECT_EQ(nonfinite, 0) << name;
    EXPECT_EQ(id, host_id) << name << " rep " << rep;
    EXPECT_EQ(dcnt.Download()[0], 0u) << name << ": the counter is left zero";
    if (tie) { EXPECT_EQ(id, 5) << name; }
    if (nan_rows) {
      EXPECT_EQ(nan_ok, 2) << name << ": NaN rows give NaN logits";
      EXPECT_NE(id, 7) << name;
    }
    if (all_nan) { EXPECT_EQ(id, 0) << name; }
  }
}

TEST(CudaLmHeadArgmax, MatchesCpu) {
  RunCase(102400, 2048, "v2lite_lm_head", false, false);
  RunCase(129280, 7168, "v3_lm_head", false, false);
  RunCase(102400, 2048, "v2lite_tie", true, false);
  RunCase(4096, 2048, "nan_rows", false, true);
  RunCase(4096, 2048, "all_nan", false, false, true);
  RunCase(2048, 16384, "k16384", false, false);  // 32 KB of x in shared memory
  // The final norm in the kernel (lm_head_norm): V2-Lite's and V3's shapes, and K = 8,192 (its
  // limit: 8 float4s a thread).
  RunCase(102400, 2048, "v2lite_norm", false, false, false, true);
  RunCase(129280, 7168, "v3_norm", false, false, false, true);
  RunCase(2048, 8192, "k8192_norm", false, false, false, true);
  RunCase(2048, 2304, "k2304_norm", false, false, false, true);  // threads with 3 and 2 float4s
}

TEST(CudaLmHeadArgmax, RejectsShapes) {
  EXPECT_NE(LmHeadArgmaxSupported(102400, 2000), "");  // K not a multiple of 256
  EXPECT_NE(LmHeadArgmaxSupported(102401, 2048), "");  // N not a multiple of 16
  EXPECT_NE(LmHeadArgmaxSupported(int64_t{16} << 20, 2048), "");  // too many tiles a block
  LmHeadArgmaxParams p;
  p.n = 100;
  p.k = 2048;
  EXPECT_THROW(LmHeadArgmax(p), CheckError);
  // in_residual without norm_w, and a misaligned residual: clear errors, no launch.
  Dev<float> res(2048 + 4), nw(2048);
  Dev<__nv_bfloat16> w(16 * 2048);
  Dev<float> logits(16);
  Dev<int32_t> id(1);
  Dev<uint8_t> ws(LmHeadArgmaxWorkspaceBytes());
  Dev<uint32_t> cnt(std::vector<uint32_t>{0});
  LmHeadArgmaxParams q;
  q.n = 16;
  q.k = 2048;
  q.w = w.get();
  q.logits = logits.get();
  q.out_id = id.get();
  q.ws = ws.get();
  q.counter = cnt.get();
  q.in_residual = res.get();
  EXPECT_THROW(LmHeadArgmax(q), CheckError);  // no norm_w
  q.norm_w = nw.get();
  q.in_residual = res.get() + 1;
  EXPECT_THROW(LmHeadArgmax(q), CheckError);  // not 16-byte aligned
  EXPECT_TRUE(LmHeadArgmaxNormSupported(8192));
  EXPECT_FALSE(LmHeadArgmaxNormSupported(16384));  // the norm form's row limit
  Dev<float> res_big(16384), nw_big(16384);
  Dev<__nv_bfloat16> w_big(16 * 16384);
  q.k = 16384;
  q.w = w_big.get();
  q.in_residual = res_big.get();
  q.norm_w = nw_big.get();
  EXPECT_EQ(LmHeadArgmaxSupported(16, 16384), "");
  EXPECT_THROW(LmHeadArgmax(q), CheckError);  // the plain form takes K 16,384, the norm form not
}

}  // namespace
}  // namespace ds::cuda::test
