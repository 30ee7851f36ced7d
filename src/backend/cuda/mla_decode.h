// MLA decode attention in the weight-absorbed form, straight over the paged latent cache (MQA
// with kv_lora + rope_dim = 576-dim keys and kv_lora = 512-dim values for V3; DeepSeek-V2
// paper section 2.1.3), the CUDA counterpart of ds::cpu::MlaDecodeAttention.
// Sequence s has query tokens query_start[s]..query_start[s+1]-1; its last query sits at
// position context_lens[s]-1 and query i of q_len at context_lens[s]-q_len+i (causal inside
// the query block: MTP verification). Key position k of sequence s is cache row
// block_table[s, k / block_size] * block_size + k % block_size.
//
// Split-KV always (flash-decoding): every (token, 8-head group) is split into chunks of
// kv_chunk keys, one block per chunk, then a combine kernel merges the chunks with their
// log-sum-exp. The work per block is the same for any mix of context lengths (SYSTEM.md
// section 4), so a batch of 50K and 2K contexts stays on the same path.
// Limits: kv_lora + rope_dim <= 640, kv_lora <= 512, both multiples of 2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm.h"

namespace ds::cuda {

struct MlaDecodeParams {
  const float* q; int64_t q_tok_stride, q_head_stride;  // [T, H, kv_lora + rope] (q_nope absorbed)
  const __nv_bfloat16* cache;                           // [num_blocks * block_size, kv_lora + rope]
  int64_t num_tokens, num_seqs, heads, kv_lora, rope_dim, block_size;
  const int32_t* query_start;   // [S + 1] device
  const int32_t* context_lens;  // [S] device
  const int32_t* block_table;   // [S, max_blocks] device
  int64_t max_blocks;
  int64_t max_context;          // >= every context_lens[s] (bounds the number of splits)
  int64_t kv_chunk = 256;       // keys per split
  float softmax_scale;
  float* workspace;             // MlaDecodeWorkspaceFloats(...) floats
  void* out; int64_t o_tok_stride, o_head_stride;  // [T, H, kv_lora]
  DTypeOut out_type = DTypeOut::kF32;
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way.
  bool pdl = false;
  // Tensor-core path (mla_decode_tc.cu; V3 dims only: kv_lora 512, rope 64, block_size a
  // multiple of 32; other dims fall back to the CUDA-core kernel): mma.sync m16n8k16 with
  // bf16 q (q * softmax_scale is not pre-applied: q is rounded to bf16 as is), bf16
  // probabilities and fp32 accumulation (FlashMLA's numerics). The heads (x query tokens) of
  // one sequence form the M dimension (16/32/64-row tiles). Split-KV by work: one KV chunk
  // size for the whole batch, chosen from the total work (>= kv_chunk, so the workspace of
  // MlaDecodeWorkspaceFloats(..., kv_chunk) suffices), then the LSE combine.
  bool tensor_cores = false;
  int64_t total_context = 0;  // host hint: sum of context_lens (0 = assume num_seqs * max_context)
  int64_t max_q_len = 0;      // host hint: max query tokens per sequence (0 = derive a bound)
  // Tuning knobs of the tensor-core path (0 = defaults, the configuration verified in run 1):
  int tc_stages = 0;          // 0 = 3-stage pipeline; 2 = 2 stages (16-row tiles: 2 blocks per SM)
  int tc_blocks_per_sm = 0;   // chunk sizing: key rows split over this many blocks per SM (0 = 2)
  int tc_rows_per_warp = 0;   // 0/16 = one 16-row M tile per warp; 32 = two (64-row blocks only)
  // 16-byte Q loads overlapped with the first K stages and a pipelined combine: 0 = default (on;
  // faster at every anchor shape in run 2), 1 = on, -1 = off (run 1's loads).
  int tc_fast_io = 0;
  // Which tensor-core kernel: 0 = by shape (the warp-split kernel when a sequence has <= 16 query
  // rows, i.e. 16 heads x 1 token; else the row-tile kernel), 1 = always the row-tile kernel.
  // Warp-split kernel: each warp pair owns a slice of the block's keys (split-KV inside the
  // block, merged once at the end), both warps of a pair compute the 16 x 16 scores of a stage
  // and each keeps half the value columns; keys per block chosen by a wave cost model over the
  // total work (tc_blocks_per_sm > 0 overrides it); a batch of one split per sequence writes
  // the output directly (no combine). tc_stages = 3 gives it 3 warp pairs with 3-stage rings
  // (1 block per SM) instead of 2 pairs with 2-stage rings (2 per SM); tc_rows_per_warp and
  // tc_fast_io do not apply to it.
  int tc_kernel = 0;
  // Warp-split kernel, opt-in (not yet measured on the GPU): with 2-8 splits per sequence, the
  // splits of a sequence run as one thread-block cluster and merge through distributed shared
  // memory, writing the output directly (no partials in global memory, no combine launch).
  // Same numerics (the LSE merge of the combine, in another fp32 order).
  int tc_cluster_merge = 0;
  // Debug, CUDA-core kernel only (ignored by the tensor-core path): emulate the tensor-core
  // path's rounding. Bit 1: q rounded to bf16 as is (the softmax scale applied to the fp32
  // scores); bit 2: probabilities rounded to bf16 in P V (the softmax denominator sums the
  // unrounded fp32 ones, as the tc kernel does). Any bit also takes the tc path's base-2 online
  // softmax and its split plan (MlaDecodeTcChunk), so the running maxima, and hence the rounded
  // probabilities, are the tc kernel's: with both bits the result differs from the tc path
  // only by fp32 summation order. 0 = the fp32 reference kernel.
  int emulate_tc_rounding = 0;
  // sm_90a wgmma + TMA kernel (mla_decode_sm90.cu; verified on the H200, the runner's default,
  // see CudaRunnerOptions::mla_decode_sm90): taken by MlaDecodeAttention when this is set and
  // MlaDecodeSm90Selected (an sm_90
  // device, V3 dims, block_size % 64 == 0, >= 64 query rows per sequence: 128 heads, or heads x
  // q_len >= 64), else the paths above. 64 query rows x one KV split per CTA, 64-key tiles
  // (one page) through a TMA ring, S and O = P V on wgmma; the same numerics as the tensor-core
  // path (bf16 q and P, fp32 softmax and accumulation) with its own split plan and 64 keys per
  // online-softmax update, which the emulation (emulate_tc_rounding with sm90 set) follows.
  bool sm90 = false;
  // Which sm90 kernel (A/B; the same split plan and the same numerics, so the emulation above
  // covers all): 0 = the kernel verified in session 3 (WG0 computes every S tile, WG1 half of
  // P V); 1 / 2 = "seesaw" (verified on the H200 in session 4, not yet timed): the 64-key tiles alternate between
  // the warpgroups (even tiles WG0, odd tiles WG1), each computes S and the online softmax of
  // its own tiles, publishes P (in the tile's rope box), the rescale and the running max through
  // shared memory, and both accumulate their 256 value columns of P V for every tile in order;
  // per-box TMA barriers let S start on the first 64 columns of a tile. 1 releases a ring stage
  // before issuing the next S (earlier TMA, a short tensor-pipe drain), 2 after it (session 5:
  // 3-8% slower than 0). 4 = three warpgroups: WG0 computes S and the softmax and writes P into
  // the tile's own stage, WG1 / WG2 each accumulate half of O (bit-equal to 0). 8 / 9 = 4 / 0
  // with a shorter softmax (exponent as one FMA, ex2.approx.ftz, the key mask only on tiles
  // that need it; not bit-equal: within the emulation's bound). 10 = 8 with one "full"
  // mbarrier per 64-column box (S starts on the first box). Numbers 3 and 5-7 (multicast K
  // tiles in a cluster of the two row blocks of a token; L2 prefetch ahead of the TMA loads)
  // were measured slower or no faster in session 16 and removed; they are rejected. 11 = the
  // tile-pair schedule (mla_decode_sm90_pair.cu: warpgroups alternate S and softmax per tile, one
  // max update a pair, each stage half re-armed by its last reader; within the emulation's bound).
  // 12 = 10 with a three-stage ring (mla_decode_sm90_ring3.cu, session 38: Q's latent k16 steps
  // 0-30 held in warpgroup 0's registers as RS wgmma fragments to make room; the same bits as 10).
  // 13 = 12 with one "full" mbarrier a ring stage instead of one a box (fewer mbarrier round trips
  // for warpgroup 0; the same bits): the fastest at 128 heads (session 38 run 6). 15 = 13 with
  // tree row maxima, P stored by stmatrix and the rescale by exactly 1 skipped (session 39; the
  // same bits; ~2% fewer cycles a tile). 16 = 15 with the two row blocks of a token as a cluster
  // of two, each K tile multicast into both (session 41; the same bits as 15; heads % 128 == 0,
  // 15 runs otherwise; sm90_kv_l2_hint is not applied to its loads).
  int sm90_variant = 0;
  // Rows of the cache allocation (num_blocks * block_size), bounds the TMA tensor map; 0 = not
  // given (unbounded: the block table must only name allocated pages, as always).
  int64_t cache_rows = 0;
  // Variants 11-13 and 15 only, a measurement hook: when set, CTA 0 records (event, clock64) pairs of its
  // loop into [warpgroups][2 x 1024] long longs: variant 11 two warpgroups (mla_decode_sm90_pair.cu,
  // kTl events), variants 12, 13, 15 three (mla_decode_sm90_ring3.cu, kTl* events; it runs 15's
  // schedule for 15, 13's otherwise).
  long long* sm90_timeline = nullptr;
  // The three-warpgroup kernels only (variants 4, 8, 10, 12, 13, 15), a measurement hook (session 37): when set,
  // every CTA's thread 0 / 128 records
  // [smid, clock64 at entry, clock64 after the Q tile, clock64 after WG1's output stores,
  // globaltimer at entry, globaltimer after the stores, its tile count, clock64 once the Q tile is in
  // shared memory (variants 12, 13, 15; the caller's fill value elsewhere)] into
  // sm90_cta_times[8 * blockIdx.x ..] (long longs; `bench kernels` with DS_BENCH_MLA_CTA_TIMES=1).
  long long* sm90_cta_times = nullptr;
  // Tensor-core warp-split kernel (tc_kernel above), opt-in (not yet verified on the GPU): fused
  // combine (kept last in the struct, so the fields above keep their kernel-parameter offsets).
  // With > 1 split in the batch, each block writes its partial and LSE to the workspace as for
  // the combine kernel, then (release fence, atomicAdd) arrives at its sequence's counter; the
  // last of the sequence's
  // non-empty splits to arrive merges them (the combine kernel's arithmetic and split order, so
  // the output equals the unfused path's) while the partials are still in L2, writes the output
  // and resets the counter to 0. No combine launch; a sequence with one split writes directly.
  // Ignored by the row-tile and sm90 kernels; tc_cluster_merge takes precedence where it
  // applies (2-8 splits); more than (ws shared memory / 64 B) - 1 (~1450) splits fall back to
  // the combine. The workspace is needed as without it.
  int tc_fused_combine = 0;
  // Counters of tc_fused_combine: >= num_seqs uint32 (one per sequence: a warp-split block holds
  // every query row of its sequence), DS_CHECKed when the knob is on and the warp-split kernel
  // runs. The caller zeroes them once (at allocation, outside any graph capture); every launch
  // leaves them 0 again, so CUDA-graph replays need no memset. One launch at a time per buffer
  // (launches sharing it must be stream-ordered).
  uint32_t* split_counters = nullptr;
  int64_t split_counter_count = 0;
  // With sm90: the least query rows per sequence (heads x max query tokens) for which
  // MlaDecodeSm90Selected takes the sm_90a kernel; 0 = one full wgmma tile (64: 128 heads, or
  // heads x q_len >= 64). Lower (e.g. 16: 16 heads x 1 token) runs the kernel with a partial
  // 64-row tile (rows past heads x q_len masked: no scores, no outputs), wasting the tile's
  // other rows' tensor work but keeping its TMA pipeline (A/B, `bench kernels --only mla_sm90`).
  int64_t sm90_min_rows = 0;
  // With sm90: max_context is a decode graph's block-table capacity (the runner's graph hints,
  // eager decode passes included), so the longest real context lies in (max_context / 2,
  // max_context]: the split plan is chosen for that range (PlanMlaDecodeSm90's capacity_hints).
  bool capacity_hints = false;
  // With sm90 (session 36; opt-in, bench and op tests): a balanced work list in place of the
  // uniform-chunk split plan. sm90_work: [sm90_work_items] device MlaDecodeSm90WorkItem
  // (host_plans.h: sequence, split slot, keys [kbeg, kend), kbeg a multiple of 64), e.g. from
  // PlanMlaDecodeSm90WorkList on the host-known contexts (which must equal context_lens); one
  // CTA per item and 64-row block, in list order; sm90_splits: [num_seqs] device split counts
  // (each >= 1, <= sm90_work_max_splits, the workspace's split stride, which must be at most
  // MlaDecodeWorkspaceFloats' splits for kv_chunk: ceil(max_context / kv_chunk)). A sequence of
  // one split writes its output directly; the others' splits write partials and LSEs and the
  // combine merges each such sequence's own count (no combine when none is split). sm90_splits
  // without sm90_work is rejected. Not with uv_w. Variants 0-2, 4, 8-11 alike.
  const void* sm90_work = nullptr;
  int64_t sm90_work_items = 0;
  const int32_t* sm90_splits = nullptr;
  int64_t sm90_work_max_splits = 0;
  // With sm90 (session 37; A/B, bench only): an L2 cache policy on the latent-cache TMA loads
  // (`.L2::cache_hint` with a createpolicy.fractional policy of fraction 1): 0 = none (the
  // plain load), 1 = evict_first (FlashMLA's choice for its K tiles, deep-dive of 2025-04-22),
  // 2 = evict_last, 3 = evict_normal. The same values; only where lines sit in L2 changes.
  int sm90_kv_l2_hint = 0;
  // With sm90 (session 37): the combine's thread groups a (token, head): 1 = one group of 128
  // threads over every split (MergeSplits' order); 4 = four groups, each over a contiguous quarter
  // of the splits, summed in group order (4x the loads in flight; fp32 order differs); 0 (the
  // default) = by shape (MlaDecodeSm90CombineGroups): four when >= 16 splits and the tokens x heads
  // blocks of 512 threads fit the SMs at three blocks each (one wave, e.g. 128 heads x batch 1 at
  // long contexts), else one.
  int sm90_combine_groups = 0;
  // W_UV epilogue (opt-in; CudaRunnerOptions::fused_uv), kept last in the struct. With uv_w set,
  // the decode's final merge (every path: the combine of the split partials; a one-split pass
  // writes its partial too) also applies absorbed MLA's value up-projection per head and writes
  // o_h instead of o_lat (`out` is not written):
  //   o_lat[t, h, k] = bf16(the merged latent output, k < kv_lora)   (the rounding out_type kBF16
  //                                                                  would store)
  //   uv_out[t * uv_tok_stride + h * uv_n + n] = sum_k o_lat[t, h, k] * uv_w[h * uv_head_stride
  //                                              + n * uv_ld + k],   n < uv_n
  // fp32 sums (per lane over 16 k, then a butterfly over the warp's 32 lanes), stored as bf16
  // (RN) with uv_out_bf16, else fp32. uv_w: bf16 (DeepSeek's kv_b_proj rows nope .. nope + v - 1
  // of each head: W_UV_h [v_head_dim, kv_lora], DeepSeek-V2 paper section 2.1.3). Needs
  // kv_lora == 512 (the tensor-core dims), uv_ld >= 512 and 16-byte aligned rows (uv_w, uv_ld % 8).
  const __nv_bfloat16* uv_w = nullptr;
  int64_t uv_head_stride = 0, uv_ld = 0, uv_n = 0;
  void* uv_out = nullptr;
  int64_t uv_tok_stride = 0;
  bool uv_out_bf16 = true;
  // With uv_w (session 29; CudaRunnerOptions::mla_uv_preload, on by default): the W_UV
  // merge kernel loads each warp's first W_UV rows before the merge instead of after it (its own
  // instantiation, 96 registers against 62). The same values and arithmetic: the same bits.
  bool uv_preload = false;
  // With sm90 (session 40): the query already rounded to bf16 (round to nearest even), in q's layout
  // with q's strides (elements). The sm_90a kernels read it instead of q: half the bytes of each
  // CTA's Q tile and no conversion in the prologue (FlashMLA's kernel takes a bf16 q the same way).
  // They round the fp32 q to bf16 the same way themselves, so with q_bf16 = bf16(q) the results are
  // the same bits (CudaMlaDecodeSm90.*: q_bf16 vs q, every variant). q is still read by every other
  // path (tensor-core, CUDA-core), so give both. Needs 16-byte alignment, strides % 8 == 0.
  const __nv_bfloat16* q_bf16 = nullptr;
};
// Keys of one independent online softmax (split) of the tensor-core path for these params
// (the sm90 kernel's plan, MlaDecodeSm90Chunk, when MlaDecodeSm90Selected)
// (a multiple of 32, >= kv_chunk): the row-tile kernel's chunk per block, or the warp-split
// kernel's sub-chunk per warp pair (its block merges its pairs' splits). *tile (if given): keys
// per online-softmax update (32 row-tile, 16 warp-split). The emulation follows both.
int64_t MlaDecodeTcChunk(const MlaDecodeParams& p, int* tile = nullptr);
// True if the tensor-core path handles these dims.
bool MlaDecodeTcSupported(int64_t kv_lora, int64_t rope_dim, int64_t block_size);
void MlaDecodeAttentionTc(const MlaDecodeParams& p);
// sm_90a kernel (mla_decode_sm90.cu). Supported: an sm_90 device, kv_lora 512, rope 64,
// block_size % 64 == 0. Selected: p.sm90, supported, and >= 64 query rows per sequence
// (max_q_len hint, else derived, x heads). MlaDecodeTakesSm90: the condition MlaDecodeAttention
// dispatches on (selected, and no CUDA-core emulation asked for).
bool MlaDecodeSm90Supported(const MlaDecodeParams& p);
bool MlaDecodeSm90Selected(const MlaDecodeParams& p);
inline bool MlaDecodeTakesSm90(const MlaDecodeParams& p) {
  return p.emulate_tc_rounding == 0 && MlaDecodeSm90Selected(p);
}
// Keys per split of the sm90 plan (a multiple of 64, >= kv_chunk); *tile = 64 (keys per
// online-softmax update).
int64_t MlaDecodeSm90Chunk(const MlaDecodeParams& p, int* tile = nullptr);
// The sm90 combine's thread groups a (token, head) for these params and `max_splits` (the
// plan's, or the work list's stride): p.sm90_combine_groups when 1 or 4, else by shape (4 when
// >= 16 splits and the (tokens x heads) blocks of 512 threads fit the SMs at three blocks each,
// i.e. one wave: 128 heads x batch 1 at long contexts; 1 elsewhere).
int MlaDecodeSm90CombineGroups(const MlaDecodeParams& p, int64_t max_splits);
// Runs the sm90 kernel whatever p.sm90 says (tests call it directly); DS_CHECKs support and
// alignment (q 16-byte aligned, strides % 4; q_bf16, when given, 16-byte aligned, strides % 8;
// output 8-byte aligned, strides % 4). Workspace as
// MlaDecodeWorkspaceFloats(..., kv_chunk).
void MlaDecodeAttentionSm90(const MlaDecodeParams& p);
int64_t MlaDecodeWorkspaceFloats(int64_t num_tokens, int64_t heads, int64_t kv_lora, int64_t max_context,
                                 int64_t kv_chunk);
void MlaDecodeAttention(const MlaDecodeParams& p);

}  // namespace ds::cuda
