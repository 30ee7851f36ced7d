// MLA decode (absorbed, paged bf16 latent cache, split-KV + combine) vs
// ds::cpu::MlaDecodeAttention: V3 dims (576-dim keys, 512-dim values, 128 and 16 heads), a mix
// of context lengths (1 .. 5000, around block edges; half long + half short) in one batch, and
// 2-3-token queries (MTP). Cache rows that no sequence may read (past each context, unused
// pages) hold NaN, so a kernel that reads or mixes them in fails the NaN check; outputs and
// workspace start poisoned (NaN), so an unwritten output fails too.
//
// Both kernels run on every case (the tensor-core one in several configurations, see RunCase:
// the default path, which for <= 16 query rows per sequence is the warp-split kernel, its
// knobs, the row-tile kernel forced, and bf16 output): the CUDA-core kernel (fp32 q and probabilities) at the
// original bound 2e-5, and the tensor-core kernel (tensor_cores = true: bf16 q and bf16
// probabilities, fp32 accumulation, FlashMLA's numerics) at 5e-3 against the CPU op fed the
// same bf16-rounded q (its remaining error is the bf16 rounding of the probabilities), plus
// 1e-2 against the fp32-q reference. A last variant runs the CUDA-core kernel emulating the
// tensor-core rounding (emulate_tc_rounding = 3: bf16 q, bf16 probabilities, the tc split plan
// and base-2 softmax, same hints as the default tc run): it must equal the default tc output
// to 2e-4 relative L2, >= 2x below the roundings it emulates (the tc kernel is 4e-4 - 1.2e-3
// from the bf16-q CPU reference here), which pins the tc kernel's error to exactly FlashMLA's
// roundings. What is left is fp32 summation order, which moves a score by ~1e-7 relative and
// so, now and then, a probability across a bf16 rounding boundary (one 2^-8 step of one
// probability): run 6 measured 9e-8 - 2.6e-5 (longest contexts largest); the inputs are drawn
// afresh each run (test_util.h's Rng), and session 22 run 8 drew 1.15e-4 on the half-32K mixed
// case, past the first bound of 1e-4.
#include <cmath>
#include <limits>

#include "backend/cpu/ops.h"
#include "backend/cuda/mla_decode.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void RunCase(const std::vector<int32_t>& ctx, const std::vector<int32_t>& qlen, int64_t H, int64_t kvl, int64_t rope,
             int64_t chunk, const char* name) {
  const int64_t L = kvl + rope, bs = 64;
  PagedDecodeCase pc = MakePagedDecodeCase(ctx, qlen, bs, L);
  const int64_t S = pc.S, T = pc.T, max_blocks = pc.max_blocks, max_ctx = pc.max_ctx, total_ctx = pc.total_ctx,
                max_q = pc.max_q;
  const std::vector<int32_t>& table = pc.table;
  const std::vector<int32_t>& qs = pc.qs;
  const std::vector<float>& cache = pc.cache;
  auto q = RandomNormal(T * H * L, 0.3f);
  const float scale = 0.1352f;
  std::vector<float> ref(T * H * kvl), ref_bf16q(T * H * kvl);
  cpu::MlaDecodeAttention({q.data(), cache.data(), ref.data(), S, H, kvl, rope, bs, qs.data(), ctx.data(), table.data(),
                           max_blocks, scale});
  const auto q_bf16 = RoundBf16Vec(q);
  cpu::MlaDecodeAttention({q_bf16.data(), cache.data(), ref_bf16q.data(), S, H, kvl, rope, bs, qs.data(), ctx.data(),
                           table.data(), max_blocks, scale});
  Dev<float> dq(q);
  Dev<__nv_bfloat16> dc(ToBf16(cache));
  Dev<int32_t> dqs(qs), dctx(ctx), dtab(table);
  // variant 0: CUDA-core; 1: tensor cores, defaults (<= 16 rows per sequence: the warp-split
  // kernel); 2: tensor cores, 2-stage pipeline (two 16-row blocks per SM) and a 4-blocks-per-SM
  // chunk target (warp-split: smaller chunks); 3: two 16-row M tiles per warp (64-row blocks);
  // 4: both; 5: fast Q load + pipelined combine; 6: every knob at once; 7: the row-tile kernel
  // in run 1's configuration (fast io off), whatever the rows; 8: the row-tile kernel with
  // fast io (the pre-warp-split path for 16 rows); 9: tc_stages = 3 (warp-split: 3 pairs x
  // 3-stage rings; row-tile: its default 3 stages); 10: tc_cluster_merge (warp-split with 2-8
  // splits per sequence: the splits merge in a thread-block cluster). Last: the CUDA-core kernel emulating the
  // default tc path (its split plan included).
  const char* kVariant[] = {"mla_decode",          "mla_decode_tc",         "mla_decode_tc_2stage",
                            "mla_decode_tc_rows32", "mla_decode_tc_rows32_2stage", "mla_decode_tc_fastio",
                            "mla_decode_tc_all_knobs", "mla_decode_tc_rowtile_run1", "mla_decode_tc_rowtile_fastio",
                            "mla_decode_tc_stages3", "mla_decode_tc_cluster_merge", "mla_decode_emulating_tc"};
  constexpr int kEmuVariant = 11;
  std::vector<float> tc_default;
  for (int variant = 0; variant <= kEmuVariant; ++variant) {
    const bool emu = variant == kEmuVariant;
    const bool tc = variant > 0 && !emu;
    Dev<float> ws(MlaDecodeWorkspaceFloats(T, H, kvl, max_ctx, chunk));  // poisoned (NaN)
    Dev<float> out(T * H * kvl);                                         // poisoned (NaN)
    MlaDecodeParams p{};
    p.q = dq.get(); p.q_tok_stride = H * L; p.q_head_stride = L;
    p.cache = dc.get(); p.num_tokens = T; p.num_seqs = S; p.heads = H; p.kv_lora = kvl; p.rope_dim = rope; p.block_size = bs;
    p.query_start = dqs.get(); p.context_lens = dctx.get(); p.block_table = dtab.get(); p.max_blocks = max_blocks;
    p.max_context = max_ctx; p.kv_chunk = chunk; p.softmax_scale = scale; p.workspace = ws.get();
    p.out = out.get(); p.o_tok_stride = H * kvl; p.o_head_stride = kvl; p.out_type = DTypeOut::kF32;
    p.tensor_cores = tc;
    if (variant == 2 || variant == 4 || variant == 6) { p.tc_stages = 2; p.tc_blocks_per_sm = 4; }
    if (variant == 3 || variant == 4 || variant == 6) p.tc_rows_per_warp = 32;
    if (variant == 5 || variant == 6 || variant == 8) p.tc_fast_io = 1;
    if (variant == 7) p.tc_fast_io = -1;
    if (variant == 7 || variant == 8) p.tc_kernel = 1;
    if (variant == 9) p.tc_stages = 3;
    if (variant == 10) p.tc_cluster_merge = 1;
    // Hints as the runner would pass them; the first tensor-core run of each case uses none.
    if ((tc || emu) && (S % 2 == 0)) { p.total_context = total_ctx; p.max_q_len = max_q; }
    if (emu) p.emulate_tc_rounding = 3;
    MlaDecodeAttention(p);
    DS_CUDA_CHECK(cudaGetLastError());
    const auto got = out.Download();
    if (variant == 1) tc_default = got;
    if (emu) {
      if (MlaDecodeTcSupported(kvl, rope, bs)) {
        ExpectClose(kVariant[variant], std::string(name) + "_vs_tc", got, tc_default, 2e-4);
        ExpectClose(kVariant[variant], std::string(name) + "_vs_bf16q_ref", got, ref_bf16q, 5e-3);
      }
    } else if (!tc) {
      ExpectClose("mla_decode", name, got, ref, 2e-5);
    } else if (MlaDecodeTcSupported(kvl, rope, bs)) {
      const std::string op = kVariant[variant];
      ExpectClose(op, std::string(name) + "_vs_bf16q_ref", got, ref_bf16q, 5e-3);
      ExpectClose(op, std::string(name) + "_vs_fp32q_ref", got, ref, 1e-2);
    } else {  // unsupported dims: the flag falls back to the CUDA-core kernel
      ExpectClose(std::string(kVariant[variant]) + "_fallback", name, got, ref, 2e-5);
    }
  }
  if (!MlaDecodeTcSupported(kvl, rope, bs)) return;
  // The default tensor-core path with bf16 output (the bench's; the warp-split kernel may write
  // it directly): equal to the fp32 output up to its bf16 rounding.
  Dev<float> ws(MlaDecodeWorkspaceFloats(T, H, kvl, max_ctx, chunk));
  Dev<__nv_bfloat16> out16(T * H * kvl);
  MlaDecodeParams p{};
  p.q = dq.get(); p.q_tok_stride = H * L; p.q_head_stride = L;
  p.cache = dc.get(); p.num_tokens = T; p.num_seqs = S; p.heads = H; p.kv_lora = kvl; p.rope_dim = rope; p.block_size = bs;
  p.query_start = dqs.get(); p.context_lens = dctx.get(); p.block_table = dtab.get(); p.max_blocks = max_blocks;
  p.max_context = max_ctx; p.kv_chunk = chunk; p.softmax_scale = scale; p.workspace = ws.get();
  p.out = out16.get(); p.o_tok_stride = H * kvl; p.o_head_stride = kvl; p.out_type = DTypeOut::kBF16;
  p.tensor_cores = true;
  if (S % 2 == 0) { p.total_context = total_ctx; p.max_q_len = max_q; }
  MlaDecodeAttention(p);
  DS_CUDA_CHECK(cudaGetLastError());
  ExpectClose("mla_decode_tc_bf16_out", std::string(name) + "_vs_tc_f32", FromBf16(out16.Download()), tc_default, 5e-3);
}

TEST(CudaMlaDecode, MatchesCpu) {
  RunCase({1, 63, 64, 65, 1000, 5000}, {1, 1, 1, 1, 1, 1}, 128, 512, 64, 256, "V3_mixed_ctx_decode");
  RunCase({2, 130, 4097}, {2, 2, 2}, 128, 512, 64, 256, "V3_mtp_qlen2");
  RunCase({300, 17}, {3, 1}, 16, 512, 64, 64, "TP8_heads16_chunk64");
  RunCase({5, 40}, {1, 2}, 3, 32, 16, 32, "odd_dims");
}

// The warp-split kernel (<= 16 query rows per sequence) on its own shapes: one long request
// (split-KV inside the block and across blocks), a batch whose every context fits one split
// (the output written directly, no combine, fp32 and bf16 outputs alike), 8 heads x 2 query
// tokens (16 rows with causal masking inside the query block), and one long 128-head request.
TEST(CudaMlaDecode, TensorCoresWarpSplit) {
  RunCase({20000}, {1}, 16, 512, 64, 256, "V3_h16_batch1_20K");
  RunCase({1, 5, 64, 65, 200, 333, 3}, {1, 1, 1, 1, 1, 1, 1}, 16, 512, 64, 256, "V3_h16_one_split_direct");
  RunCase({700, 64, 3, 129}, {2, 2, 2, 2}, 8, 512, 64, 256, "V3_h8_mtp_qlen2_ws");
  RunCase({5000, 1, 700, 64}, {2, 1, 2, 2}, 8, 512, 64, 64, "V3_h8_mtp_mixed_chunk64");
  RunCase({8192}, {1}, 128, 512, 64, 256, "V3_h128_batch1_8K");
  // 8 splits of 512 keys for the longest (a cluster of 8 with tc_cluster_merge), empty splits
  // for the shorter ones.
  RunCase({4096, 100, 3000, 4000}, {1, 1, 1, 1}, 16, 512, 64, 256, "V3_h16_8splits_mixed");
}

TEST(CudaMlaDecode, TensorCoresMixedLengths) {
  // Half long + half short (the mixed batch), both head counts.
  RunCase({8192, 512, 8192, 512}, {1, 1, 1, 1}, 128, 512, 64, 256, "V3_h128_half8K_half512");
  RunCase({32768, 512, 32768, 512}, {1, 1, 1, 1}, 16, 512, 64, 256, "V3_h16_half32K_half512");
  RunCase({1, 2, 31, 32, 33, 95, 96, 97, 2049}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 16, 512, 64, 256, "V3_h16_edges");
  RunCase({700, 64, 3, 129}, {2, 2, 2, 2}, 16, 512, 64, 256, "V3_h16_mtp_qlen2");
  RunCase({1, 1500}, {1, 1}, 128, 512, 64, 256, "V3_h128_batch2");
}

// Whole prompts through the decode kernel (MlaMode::kAbsorbed prefill, as the runner's
// DummyV3DecodeTensorCoresMatchEmulation does): query blocks of 40-300 tokens, causal inside
// the block, so one sequence spans many 64-row tiles.
TEST(CudaMlaDecode, TensorCoresLongQueryBlocks) {
  RunCase({300, 70}, {300, 70}, 16, 512, 64, 256, "V3_h16_prefill_qlen300_70");
  RunCase({100, 40}, {100, 40}, 128, 512, 64, 256, "V3_h128_prefill_qlen100_40");
}

}  // namespace
}  // namespace ds::cuda::test
