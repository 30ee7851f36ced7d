// MlaPrefillAttentionSm90 (the FlashAttention-3-style sm_90a MLA prefill kernel,
// mla_prefill_sm90.cu) vs the CPU reference and vs the mma.sync tensor-core kernel
// (MlaPrefillAttentionTc), called explicitly (not through the runner's dispatch). Skips on a
// device that is not compute capability 9.0.
//
// Shapes: V3 (128 heads) and V2-Lite (16 heads); several sequences per launch with lengths that
// are not multiples of the 128-query / 128-key tiles; fresh prompts (q_pos0 = 0), chunks
// extending a cached prefix (q_pos0 > 0), 1-token chunks and a 1-token prompt; up to 4K tokens;
// fp32 and bf16 output; the shared rope key (head stride 0, as the runner) and a per-head one;
// both variants (plain and ping-pong, MlaPrefillTcParams::sm90_pingpong).
// Device layouts as the runner's: k_nope and v interleaved per head in one [Tk, H, 256] bf16
// buffer, k_rope [Tk, 64] (or [Tk, H, 64]), q [Tq, H, 192] fp32. Outputs start as NaN (Dev
// poisons), so a row the kernel fails to write fails the non-finite check.
//
// Bounds (derivation in test_mla_prefill.cpp, tensor-core kernel section; the numerics are the
// same: bf16 q / k / v / P, fp32 accumulation and online softmax):
//   vs the CPU on bf16-rounded inputs: rel_l2 <= 6e-3, max_abs <= 0.03;
//   vs the CPU on fp32 inputs: rel_l2 <= 1.5e-2;
//   vs the mma.sync kernel: both are within u max|v| = 0.0135 (P rounding) of the rounded
//     reference per output (+ u |o| each for bf16 output), so |sm90 - tc| <= 0.027 (0.054 with
//     bf16 output); the P roundings of the two kernels differ (64- vs 128-key tiles, so other
//     running maxima) and are independent: rel_l2 ~ sqrt(2) x 2e-3; bound rel_l2 <= 6e-3,
//     max_abs <= 0.03 (0.06 bf16 output).
#include <cuda_runtime.h>

#include "backend/cpu/ops.h"
#include "backend/cuda/mla_prefill.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Seq { int64_t nq, nk; };

bool HaveSm90() {
  int n = 0, dev = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return false;
  return prop.major == 9 && prop.minor == 0;
}
#define SKIP_WITHOUT_SM90() \
  if (!HaveSm90()) GTEST_SKIP() << "MlaPrefillAttentionSm90 needs a compute capability 9.0 (Hopper) device"

// kCpu: both CPU references + the mma.sync kernel; kCpuRounded: the bf16-input CPU reference
// (the costly long cases) + the mma.sync kernel; kTcOnly: the mma.sync kernel only.
enum class Ref { kCpu, kCpuRounded, kTcOnly };

struct Case {
  std::vector<Seq> seqs;
  int64_t H = 128;
  bool bf16_out = false;
  bool per_head_rope = false;
  Ref ref = Ref::kCpu;
  const char* name = "";
};

struct Inputs {
  int64_t Tq = 0, Tk = 0, max_q = 0;
  std::vector<int32_t> qs{0}, ks{0}, pos0;
  std::vector<float> q, kv, k_rope;
};

Inputs MakeInputs(const Case& c) {
  constexpr int64_t nope = 128, rope = 64, dv = 128, dqk = nope + rope;
  Inputs in;
  for (auto& s : c.seqs) {
    in.Tq += s.nq; in.Tk += s.nk; in.max_q = std::max(in.max_q, s.nq);
    in.qs.push_back(static_cast<int32_t>(in.Tq)); in.ks.push_back(static_cast<int32_t>(in.Tk));
    in.pos0.push_back(static_cast<int32_t>(s.nk - s.nq));
  }
  in.q = RandomNormal(in.Tq * c.H * dqk);
  in.kv = RandomNormal(in.Tk * c.H * (nope + dv));
  in.k_rope = RandomNormal(in.Tk * (c.per_head_rope ? c.H : 1) * rope);
  return in;
}

// CPU reference (cpu::MlaPrefillAttention per sequence), on bf16-rounded or fp32 inputs.
std::vector<float> CpuReference(const Case& c, const Inputs& in, float scale, bool rounded) {
  constexpr int64_t nope = 128, rope = 64, dv = 128, dqk = nope + rope;
  const int64_t H = c.H;
  const auto R = [&](float x) { return rounded ? RoundBf16(x) : x; };
  std::vector<float> ref(in.Tq * H * dv), qr(in.q.size());
  for (size_t i = 0; i < in.q.size(); ++i) qr[i] = R(in.q[i]);
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int64_t nk = c.seqs[s].nk;
    std::vector<float> k(nk * H * dqk), v(nk * H * dv);
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t tok = in.ks[s] + j;
        const float* src = in.kv.data() + (tok * H + h) * (nope + dv);
        const float* kr = in.k_rope.data() + (c.per_head_rope ? (tok * H + h) * rope : tok * rope);
        for (int64_t d = 0; d < nope; ++d) k[(j * H + h) * dqk + d] = R(src[d]);
        for (int64_t d = 0; d < rope; ++d) k[(j * H + h) * dqk + nope + d] = R(kr[d]);
        for (int64_t d = 0; d < dv; ++d) v[(j * H + h) * dv + d] = R(src[nope + d]);
      }
    cpu::MlaPrefillAttention({qr.data() + in.qs[s] * H * dqk, k.data(), v.data(), ref.data() + in.qs[s] * H * dv,
                              c.seqs[s].nq, nk, H, dqk, dv, in.pos0[s], scale});
  }
  return ref;
}

// Device buffers + params for one case.
struct DeviceCase {
  Dev<float> q;
  Dev<__nv_bfloat16> kv, kr;
  Dev<int32_t> qs, ks, pos0;
  MlaPrefillTcParams p{};
  DeviceCase(const Case& c, const Inputs& in, float scale)
      : q(in.q), kv(ToBf16(in.kv)), kr(ToBf16(in.k_rope)), qs(in.qs), ks(in.ks), pos0(in.pos0) {
    constexpr int64_t nope = 128, rope = 64, dv = 128, dqk = nope + rope;
    const int64_t H = c.H;
    p.q = q.get(); p.q_tok_stride = H * dqk; p.q_head_stride = dqk;
    p.k_nope = kv.get(); p.kn_tok_stride = H * (nope + dv); p.kn_head_stride = nope + dv;
    p.k_rope = kr.get();
    p.kr_tok_stride = c.per_head_rope ? H * rope : rope; p.kr_head_stride = c.per_head_rope ? rope : 0;
    p.v = kv.get() + nope; p.v_tok_stride = H * (nope + dv); p.v_head_stride = nope + dv;
    p.o_tok_stride = H * dv; p.o_head_stride = dv;
    p.num_seqs = static_cast<int64_t>(c.seqs.size()); p.heads = H; p.d_nope = nope; p.d_rope = rope; p.dv = dv;
    p.q_start = qs.get(); p.k_start = ks.get(); p.q_pos0 = pos0.get(); p.max_q_len = in.max_q;
    p.softmax_scale = scale; p.total_k = in.Tk;
  }
};

// Runs `fn(params)` into a fresh (NaN-poisoned) output, returns it as fp32.
template <typename Fn>
std::vector<float> RunInto(MlaPrefillTcParams p, int64_t n_out, bool bf16_out, Fn fn) {
  if (bf16_out) {
    Dev<__nv_bfloat16> out(n_out);
    p.out = out.get(); p.out_type = DTypeOut::kBF16;
    fn(p);
    return FromBf16(out.Download());
  }
  Dev<float> out(n_out);
  p.out = out.get(); p.out_type = DTypeOut::kF32;
  fn(p);
  return out.Download();
}

void RunCase(const Case& c) {
  const float scale = 1.0f / std::sqrt(192.f) * 1.3f;
  const Inputs in = MakeInputs(c);
  DeviceCase d(c, in, scale);
  const int64_t n_out = in.Tq * c.H * 128;
  ASSERT_TRUE(MlaPrefillSm90Supported(d.p)) << c.name;
  const auto tc = RunInto(d.p, n_out, c.bf16_out, [](MlaPrefillTcParams p) {
    p.sm90 = false;  // the mma.sync kernel
    p.block_q = 64;
    MlaPrefillAttentionTc(p);
  });
  std::vector<float> ref_rounded, ref_fp32;
  if (c.ref != Ref::kTcOnly) ref_rounded = CpuReference(c, in, scale, true);
  if (c.ref == Ref::kCpu) ref_fp32 = CpuReference(c, in, scale, false);
  // Both variants of the kernel: plain and ping-pong (the consumer warpgroups taking turns).
  for (bool pingpong : {false, true}) {
    MlaPrefillTcParams p = d.p;
    p.sm90_pingpong = pingpong;
    const auto got = RunInto(p, n_out, c.bf16_out, [](const MlaPrefillTcParams& q) { MlaPrefillAttentionSm90(q); });
    EXPECT_FALSE(MlaPrefillSm90WatchdogFired()) << c.name << ": a pipeline barrier wait gave up (deadlock)";
    const std::string cas = std::string(c.name) + (pingpong ? "_pingpong" : "") + (c.bf16_out ? "_bf16" : "_f32");
    ExpectClose("mla_prefill_sm90_vs_tc", cas, got, tc, 6e-3, c.bf16_out ? 0.06 : 0.03);
    if (!ref_rounded.empty()) ExpectClose("mla_prefill_sm90_vs_bf16_inputs", cas, got, ref_rounded, 6e-3, 0.03);
    if (!ref_fp32.empty()) ExpectClose("mla_prefill_sm90_vs_fp32", cas, got, ref_fp32, 1.5e-2);
  }
}

TEST(CudaMlaPrefillSm90, MatchesCpuV3Mixed) {
  SKIP_WITHOUT_SM90();
  // 128 heads: fresh prompts of 200 / 130 / 64 / 1 tokens, a 77-token chunk after a 256-token
  // prefix, a 1-token chunk after 64 cached tokens; fp32 and bf16 output.
  const std::vector<Seq> seqs{{200, 200}, {77, 333}, {1, 65}, {130, 130}, {64, 64}, {1, 1}};
  RunCase({seqs, 128, false, false, Ref::kCpu, "V3_mixed"});
  RunCase({seqs, 128, true, false, Ref::kCpu, "V3_mixed"});
}

TEST(CudaMlaPrefillSm90, MatchesCpuV3Chunked) {
  SKIP_WITHOUT_SM90();
  // A 100-token chunk after a 1000-token prefix (most key tiles unmasked), and a 512-token chunk
  // after 1536 cached tokens (4 query tiles, 16 key tiles), bf16 / fp32 output.
  RunCase({{{100, 1100}}, 128, true, false, Ref::kCpu, "V3_chunk100_prefix1000"});
  RunCase({{{512, 2048}}, 128, false, false, Ref::kCpuRounded, "V3_chunk512_prefix1536"});
}

TEST(CudaMlaPrefillSm90, MatchesCpuV2Lite) {
  SKIP_WITHOUT_SM90();
  // 16 heads: a 1000-token prompt, a 300-token chunk after 600 cached, a 3-token prompt, a
  // 129-token chunk after 371 cached.
  const std::vector<Seq> seqs{{1000, 1000}, {300, 900}, {3, 3}, {129, 500}};
  RunCase({seqs, 16, false, false, Ref::kCpu, "V2Lite_mixed"});
  RunCase({seqs, 16, true, false, Ref::kCpu, "V2Lite_mixed"});
}

TEST(CudaMlaPrefillSm90, MatchesCpuLong) {
  SKIP_WITHOUT_SM90();
  // 16 heads, a 4096-token prompt and a 1-token prompt in one launch (the CPU reference is
  // ~90 GFLOP); lengths one off the tile sizes: 127, 129, 255, 257, 383.
  RunCase({{{4096, 4096}, {1, 1}}, 16, false, false, Ref::kCpuRounded, "V2Lite_4096"});
  RunCase({{{127, 127}, {129, 129}, {255, 255}, {257, 385}, {383, 383}}, 16, false, false, Ref::kCpu,
           "V2Lite_odd_lengths"});
}

TEST(CudaMlaPrefillSm90, MatchesTcV3Long) {
  SKIP_WITHOUT_SM90();
  // 128 heads x 4096 tokens (fresh prompt) and a 1000-token chunk after 3000 cached, vs the
  // mma.sync kernel only (the CPU reference would be ~0.7 TFLOP).
  RunCase({{{4096, 4096}, {1000, 4000}}, 128, false, false, Ref::kTcOnly, "V3_4096_and_chunk1000"});
}

TEST(CudaMlaPrefillSm90, SingleToken) {
  SKIP_WITHOUT_SM90();
  RunCase({{{1, 1}}, 16, false, false, Ref::kCpu, "V2Lite_single_token"});
  RunCase({{{1, 1}}, 128, true, false, Ref::kCpu, "V3_single_token"});
}

TEST(CudaMlaPrefillSm90, PerHeadRopeKey) {
  SKIP_WITHOUT_SM90();
  // k_rope given per head ([Tk, H, 64], head stride 64): the TMA map's head dimension is used.
  RunCase({{{150, 150}, {40, 300}}, 16, false, true, Ref::kCpu, "V2Lite_per_head_rope"});
}

TEST(CudaMlaPrefillSm90, DispatchFromTc) {
  SKIP_WITHOUT_SM90();
  // MlaPrefillAttentionTc with sm90 = true runs the sm_90a kernel (bit-identical output); with
  // total_k = 0 (unknown) it stays on the mma.sync kernel.
  const Case c{{{300, 700}, {5, 5}}, 16, false, false, Ref::kTcOnly, "dispatch"};
  const float scale = 0.09f;
  const Inputs in = MakeInputs(c);
  DeviceCase d(c, in, scale);
  const int64_t n_out = in.Tq * c.H * 128;
  const auto direct = RunInto(d.p, n_out, false, [](const MlaPrefillTcParams& p) { MlaPrefillAttentionSm90(p); });
  const auto via_tc = RunInto(d.p, n_out, false, [](MlaPrefillTcParams p) {
    p.sm90 = true;
    MlaPrefillAttentionTc(p);
  });
  const auto tc = RunInto(d.p, n_out, false, [](MlaPrefillTcParams p) {
    p.sm90 = false;
    MlaPrefillAttentionTc(p);
  });
  const auto fallback = RunInto(d.p, n_out, false, [](MlaPrefillTcParams p) {
    p.sm90 = true;
    p.total_k = 0;
    MlaPrefillAttentionTc(p);
  });
  const auto pingpong = RunInto(d.p, n_out, false, [](MlaPrefillTcParams p) {
    p.sm90_pingpong = true;
    MlaPrefillAttentionSm90(p);
  });
  EXPECT_EQ(direct, via_tc);
  EXPECT_EQ(tc, fallback);
  EXPECT_EQ(direct, pingpong);  // same arithmetic per row, only the issue order of the warpgroups differs
  EXPECT_NE(direct, tc);  // different kernels (tile sizes, accumulation order) differ in the last bits
}

TEST(CudaMlaPrefillSm90, RejectsUnsupported) {
  MlaPrefillTcParams p{};
  p.d_nope = 8; p.d_rope = 4; p.dv = 12; p.total_k = 16;
  EXPECT_FALSE(MlaPrefillSm90Supported(p));
  EXPECT_THROW(MlaPrefillAttentionSm90(p), CheckError);
  p.d_nope = 128; p.d_rope = 64; p.dv = 128; p.total_k = 0;  // total_k unknown
  EXPECT_FALSE(MlaPrefillSm90Supported(p));
  EXPECT_THROW(MlaPrefillAttentionSm90(p), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
