// MLA decode, tensor-core warp-split kernel with the fused combine (MlaDecodeParams::
// tc_fused_combine, opt-in; mla_decode_tc.cu): the last block of each sequence to arrive at its
// counter merges the sequence's splits instead of a separate combine launch. V2-Lite / TP8
// shapes (16 heads x 1 query token; 8 heads x 2 tokens for MTP, both 16 query rows, the
// warp-split kernel's limit), batch 1 / 4 / 64, contexts 1, 63, 65, 1000, 4096 and mixed
// lengths up to 32K, fp32 and bf16 outputs, both warp-split configurations (2 pairs; 3 pairs
// with tc_stages = 3).
//
// Checks per case (outputs and workspace start poisoned with NaN, and cache rows no sequence
// may read hold NaN, so unwritten outputs and over-reads fail the non-finite check):
//  - the plan takes the warp-split kernel (MlaDecodeTcChunk reports 16-key tiles) and, where
//    the case says so, > 1 split (so the fused merge runs, not only the one-split direct write);
//  - fused vs unfused (same params, knob off: the separate combine kernel) BITWISE equal, fp32
//    and bf16 outputs: the merge repeats MlaDecodeTcCombineFast's arithmetic in its split order
//    (same weights, same sum of weights, the same fused multiply-adds per element; the splits
//    past a sequence's last, which the combine reads as LSE -inf, add exact zeros there), and a
//    sequence with one split writes the value the combine would (weight exactly 1);
//  - fused vs the CPU op (ds::cpu::MlaDecodeAttention) at the tensor-core tests' bounds: 5e-3
//    relative L2 against the CPU op fed the same bf16-rounded q, 1e-2 against fp32 q; bf16
//    output vs the fused fp32 output at 5e-3;
//  - the launch run twice in a row (the counters must be back at 0 after each launch: read back
//    and checked, and the second run must equal the first bitwise);
//  - 16 heads x 2 tokens (32 rows: the row-tile kernel) ignores the knob (bitwise equal to off).
// CudaMlaDecodeFusedCombine.GraphReplay captures one fused launch in a CUDA graph and replays
// it 3 times with different context lengths staged in the same device buffers (no counter
// memset between replays), each replay bitwise equal to an eager unfused run of those lengths.
// Skipped without an sm_90 device (the build targets sm_90a only).
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/mla_decode.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr int64_t kKvl = 512, kRope = 64, kL = kKvl + kRope, kBs = 64;
constexpr float kScale = 0.1352f;

// Count of elements whose float values differ (NaN counts as a difference).
int64_t Mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += !(a[i] == b[i]);
  return n;
}
void ExpectBitwise(const std::string& op, const std::string& cas, const std::vector<float>& got,
                   const std::vector<float>& ref) {
  const int64_t bad = Mismatches(got, ref);
  std::printf("[metric] op=%s case=%s n=%zu mismatches=%lld bound=bitwise%s\n", op.c_str(), cas.c_str(), got.size(),
              (long long)bad, bad == 0 ? " PASS" : " FAIL");
  EXPECT_EQ(bad, 0) << op << " " << cas << ": fused combine differs from the combine kernel";
  ExpectClose(op, cas + "_l2", got, ref, 1e-6);  // also the non-finite check and the rel L2 on the log
}

struct Inputs {
  int64_t S = 0, T = 0, H = 0, max_blocks = 0, max_ctx = 0, total_ctx = 0, max_q = 0;
  std::vector<int32_t> ctx, qs, table;
  std::vector<float> q, cache;
};

Inputs MakeInputs(const std::vector<int32_t>& ctx, const std::vector<int32_t>& qlen, int64_t H) {
  PagedDecodeCase pc = MakePagedDecodeCase(ctx, qlen, kBs, kL);
  Inputs in;
  in.S = pc.S; in.T = pc.T; in.H = H; in.max_blocks = pc.max_blocks; in.max_ctx = pc.max_ctx;
  in.total_ctx = pc.total_ctx; in.max_q = pc.max_q;
  in.ctx = ctx; in.qs = pc.qs; in.table = pc.table; in.cache = std::move(pc.cache);
  in.q = RandomNormal(in.T * H * kL, 0.3f);
  return in;
}

std::vector<float> CpuRef(const Inputs& in, const std::vector<int32_t>& ctx, bool bf16_q) {
  std::vector<float> out(in.T * in.H * kKvl);
  const std::vector<float> q = bf16_q ? RoundBf16Vec(in.q) : in.q;
  cpu::MlaDecodeAttention({q.data(), in.cache.data(), out.data(), in.S, in.H, kKvl, kRope, kBs, in.qs.data(), ctx.data(),
                           in.table.data(), in.max_blocks, kScale});
  return out;
}

MlaDecodeParams BaseParams(const Inputs& in, const float* q, const __nv_bfloat16* cache, const int32_t* qs,
                           const int32_t* ctx, const int32_t* table, float* ws, int64_t kv_chunk) {
  MlaDecodeParams p{};
  p.q = q; p.q_tok_stride = in.H * kL; p.q_head_stride = kL;
  p.cache = cache; p.num_tokens = in.T; p.num_seqs = in.S; p.heads = in.H; p.kv_lora = kKvl; p.rope_dim = kRope;
  p.block_size = kBs; p.query_start = qs; p.context_lens = ctx; p.block_table = table; p.max_blocks = in.max_blocks;
  p.max_context = in.max_ctx; p.kv_chunk = kv_chunk; p.softmax_scale = kScale; p.workspace = ws;
  p.o_tok_stride = in.H * kKvl; p.o_head_stride = kKvl;
  p.tensor_cores = true;
  p.total_context = in.total_ctx; p.max_q_len = in.max_q;  // the runner's hints
  return p;
}

// Splits of the batch's plan (ceil(max_context / keys per block)) if the warp-split kernel is
// taken, else 0.
int64_t WsSplits(const MlaDecodeParams& p) {
  int tile = 0;
  const int64_t sub = MlaDecodeTcChunk(p, &tile);
  if (tile != 16) return 0;  // the row-tile kernel (32-key tiles)
  const int64_t chunk = sub * (p.tc_stages == 3 ? 3 : 2);
  return std::max<int64_t>(1, (p.max_context + chunk - 1) / chunk);
}

// Runs the tc path with the knob `fused` and output type `ot`; returns the output as floats.
std::vector<float> RunTc(MlaDecodeParams p, bool fused, DTypeOut ot, Dev<uint32_t>& cnt) {
  const int64_t n = p.num_tokens * p.heads * kKvl;
  Dev<float> out32(ot == DTypeOut::kF32 ? n : 1);            // poisoned (NaN)
  Dev<__nv_bfloat16> out16(ot == DTypeOut::kBF16 ? n : 1);  // poisoned (NaN)
  Dev<float> ws(MlaDecodeWorkspaceFloats(p.num_tokens, p.heads, kKvl, p.max_context, p.kv_chunk));  // poisoned
  p.workspace = ws.get();
  p.out_type = ot;
  p.out = ot == DTypeOut::kF32 ? static_cast<void*>(out32.get()) : static_cast<void*>(out16.get());
  p.tc_fused_combine = fused ? 1 : 0;
  p.split_counters = cnt.get();
  p.split_counter_count = static_cast<int64_t>(cnt.size());
  MlaDecodeAttention(p);
  DS_CUDA_CHECK(cudaGetLastError());
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  return ot == DTypeOut::kF32 ? out32.Download() : FromBf16(out16.Download());
}

void ExpectCountersZero(const Dev<uint32_t>& cnt, const std::string& cas) {
  const auto c = cnt.Download();
  int64_t nz = 0;
  for (auto v : c) nz += v != 0;
  EXPECT_EQ(nz, 0) << cas << ": split counters not reset to 0 after the launch";
}

struct CaseOpts {
  int64_t kv_chunk = 256;
  int tc_stages = 0;         // 3: the 3-pair warp-split configuration
  bool expect_split = true;  // the plan must have > 1 split (the fused merge runs)
  bool expect_ws = true;     // false: rows > 16, the row-tile kernel (knob ignored)
};

void RunCase(const std::vector<int32_t>& ctx, const std::vector<int32_t>& qlen, int64_t H, const std::string& name,
             CaseOpts o = {}) {
  const Inputs in = MakeInputs(ctx, qlen, H);
  const auto ref = CpuRef(in, in.ctx, false), ref_bf16q = CpuRef(in, in.ctx, true);
  Dev<float> dq(in.q);
  Dev<__nv_bfloat16> dc(ToBf16(in.cache));
  Dev<int32_t> dqs(in.qs), dctx(in.ctx), dtab(in.table);
  Dev<uint32_t> cnt(in.S);
  DS_CUDA_CHECK(cudaMemset(cnt.get(), 0, in.S * sizeof(uint32_t)));  // zeroed once, as the runner would
  MlaDecodeParams p = BaseParams(in, dq.get(), dc.get(), dqs.get(), dctx.get(), dtab.get(), nullptr, o.kv_chunk);
  p.tc_stages = o.tc_stages;
  const int64_t splits = WsSplits(p);
  std::printf("[plan] case=%s S=%lld H=%lld max_ctx=%lld ws=%d splits=%lld\n", name.c_str(), (long long)in.S,
              (long long)H, (long long)in.max_ctx, splits > 0 ? 1 : 0, (long long)splits);
  if (o.expect_ws) {
    ASSERT_GT(splits, 0) << name << ": the plan does not take the warp-split kernel";
    if (o.expect_split) {
      ASSERT_GT(splits, 1) << name << ": one split (the fused merge would not run)";
    }
  } else {
    ASSERT_EQ(splits, 0) << name << ": expected the row-tile kernel";
  }
  const std::string op = std::string("mla_decode_tc_fused_combine") + (o.tc_stages == 3 ? "_stages3" : "");
  const auto base32 = RunTc(p, false, DTypeOut::kF32, cnt);
  const auto base16 = RunTc(p, false, DTypeOut::kBF16, cnt);
  const auto f32a = RunTc(p, true, DTypeOut::kF32, cnt);
  ExpectCountersZero(cnt, name);
  const auto f32b = RunTc(p, true, DTypeOut::kF32, cnt);  // counters reused: must have been reset
  ExpectCountersZero(cnt, name + "_rerun");
  const auto f16 = RunTc(p, true, DTypeOut::kBF16, cnt);
  ExpectCountersZero(cnt, name + "_bf16");
  ExpectBitwise(op, name + "_vs_unfused_f32", f32a, base32);
  ExpectBitwise(op, name + "_rerun_vs_first", f32b, f32a);
  ExpectBitwise(op + "_bf16_out", name + "_vs_unfused_bf16", f16, base16);
  ExpectClose(op, name + "_vs_bf16q_ref", f32a, ref_bf16q, 5e-3);
  ExpectClose(op, name + "_vs_fp32q_ref", f32a, ref, 1e-2);
  ExpectClose(op + "_bf16_out", name + "_vs_fused_f32", f16, f32a, 5e-3);
}

TEST(CudaMlaDecodeFusedCombine, Batch1) {
  DS_SKIP_WITHOUT_SM90();
  RunCase({4096}, {1}, 16, "h16_b1_4K");
  RunCase({1000}, {1}, 16, "h16_b1_1000");
  RunCase({1000}, {1}, 16, "h16_b1_1000_chunk64", {.kv_chunk = 64});
  RunCase({32768}, {1}, 16, "h16_b1_32K");
  // One split: the knob changes nothing (the direct write), still equal.
  RunCase({1}, {1}, 16, "h16_b1_ctx1", {.expect_split = false});
  RunCase({63}, {1}, 16, "h16_b1_ctx63", {.expect_split = false});
  RunCase({65}, {1}, 16, "h16_b1_ctx65", {.expect_split = false});
}

TEST(CudaMlaDecodeFusedCombine, Batch4Mixed) {
  DS_SKIP_WITHOUT_SM90();
  // Short sequences beside a long one: 1 split each (written directly), the long one merged.
  RunCase({1, 63, 65, 1000}, {1, 1, 1, 1}, 16, "h16_b4_1_63_65_1000_chunk64", {.kv_chunk = 64});
  RunCase({4096, 65, 1000, 63}, {1, 1, 1, 1}, 16, "h16_b4_4K_mixed");
  RunCase({32768, 1, 4096, 1000}, {1, 1, 1, 1}, 16, "h16_b4_32K_mixed");
  RunCase({4096, 4096, 4096, 4096}, {1, 1, 1, 1}, 16, "h16_b4_4K");
  // 3 warp pairs x 3 stages (192 threads: a partial last merge item per thread).
  RunCase({4096, 65, 1000, 63}, {1, 1, 1, 1}, 16, "h16_b4_4K_mixed", {.tc_stages = 3});
  RunCase({32768, 1, 4096, 1000}, {1, 1, 1, 1}, 16, "h16_b4_32K_mixed", {.tc_stages = 3});
}

TEST(CudaMlaDecodeFusedCombine, MtpQlen2) {
  DS_SKIP_WITHOUT_SM90();
  // 8 heads x 2 tokens = 16 rows (causal inside the query block: a row may have no key in the
  // last split, LSE -inf there).
  RunCase({4096, 700, 65, 2}, {2, 2, 2, 2}, 8, "h8_q2_b4_mixed");
  RunCase({1000, 129}, {2, 2}, 8, "h8_q2_b2_chunk64", {.kv_chunk = 64});
  RunCase({4096, 700, 65, 2}, {2, 2, 2, 2}, 8, "h8_q2_b4_mixed", {.tc_stages = 3});
  // 16 heads x 2 tokens = 32 rows: the row-tile kernel, the knob is ignored.
  RunCase({4096, 1000}, {2, 2}, 16, "h16_q2_b2_rowtile", {.expect_ws = false});
}

TEST(CudaMlaDecodeFusedCombine, Batch64) {
  DS_SKIP_WITHOUT_SM90();
  // The shape (V2-Lite 16 heads, batch 64 x 4K: 4 splits of 1024).
  RunCase(std::vector<int32_t>(64, 4096), std::vector<int32_t>(64, 1), 16, "h16_b64_4K");
  // Mixed lengths: two 32K sequences among 4K / 1000 / 65 / 63 / 1 / 2049 / 130.
  std::vector<int32_t> mixed(64);
  const int32_t cyc[] = {4096, 1000, 65, 63, 1, 2049, 130, 4096};
  for (int i = 0; i < 64; ++i) mixed[i] = cyc[i % 8];
  mixed[5] = 32768;
  mixed[40] = 32768;
  RunCase(mixed, std::vector<int32_t>(64, 1), 16, "h16_b64_mixed_32K");
  // MTP: 8 heads x 2 tokens, batch 64 x 1000.
  RunCase(std::vector<int32_t>(64, 1000), std::vector<int32_t>(64, 2), 8, "h8_q2_b64_1000");
}

// One fused launch captured in a CUDA graph and replayed with different context lengths staged
// in the same device buffer (max_context and the plan fixed at capture, as in the runner's
// graph buckets): every replay must equal an eager unfused run of its lengths, with no counter
// memset between replays.
TEST(CudaMlaDecodeFusedCombine, GraphReplay) {
  DS_SKIP_WITHOUT_SM90();
  const int64_t H = 16;
  const std::vector<int32_t> cap(4, 4096);  // pages for the longest staged lengths
  const Inputs in = MakeInputs(cap, {1, 1, 1, 1}, H);
  Dev<float> dq(in.q);
  Dev<__nv_bfloat16> dc(ToBf16(in.cache));
  Dev<int32_t> dqs(in.qs), dctx(in.ctx), dtab(in.table);
  Dev<uint32_t> cnt(in.S);
  DS_CUDA_CHECK(cudaMemset(cnt.get(), 0, in.S * sizeof(uint32_t)));
  Dev<float> ws(MlaDecodeWorkspaceFloats(in.T, H, kKvl, in.max_ctx, 256));
  Dev<float> out(in.T * H * kKvl);
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  MlaDecodeParams p = BaseParams(in, dq.get(), dc.get(), dqs.get(), dctx.get(), dtab.get(), ws.get(), 256);
  p.total_context = 0;  // a graph bucket's plan: num_seqs x max_context
  p.out = out.get(); p.out_type = DTypeOut::kF32; p.stream = st;
  p.tc_fused_combine = 1; p.split_counters = cnt.get(); p.split_counter_count = in.S;
  ASSERT_GT(WsSplits(p), 1);
  // One eager launch first (kernel attributes set outside the capture, as the runner's warm-up).
  MlaDecodeAttention(p);
  DS_CUDA_CHECK(cudaStreamSynchronize(st));
  ExpectCountersZero(cnt, "graph_warmup");
  auto graph = std::make_unique<CapturedGraph>(st, [&] { MlaDecodeAttention(p); });
  const std::vector<std::vector<int32_t>> staged = {{4096, 4096, 4096, 4096}, {1000, 4096, 1, 65}, {2049, 63, 3000, 512}};
  for (size_t r = 0; r < staged.size(); ++r) {
    const std::string name = "graph_replay" + std::to_string(r);
    DS_CUDA_CHECK(cudaMemcpyAsync(dctx.get(), staged[r].data(), staged[r].size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, st));
    out.Poison();
    ws.Poison();
    DS_CUDA_CHECK(cudaDeviceSynchronize());  // the poison (legacy stream) before the non-blocking stream's replay
    graph->Replay();
    const auto got = out.Download();
    ExpectCountersZero(cnt, name);
    // Eager unfused run of the same lengths and plan (same max_context, total hint 0).
    MlaDecodeParams pe = p;
    pe.stream = nullptr;
    const auto base = RunTc(pe, false, DTypeOut::kF32, cnt);
    ExpectBitwise("mla_decode_tc_fused_combine_graph", name + "_vs_unfused", got, base);
    ExpectClose("mla_decode_tc_fused_combine_graph", name + "_vs_bf16q_ref", got, CpuRef(in, staged[r], true), 5e-3);
  }
  graph.reset();  // before its stream
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace ds::cuda::test
