// CudaModelRunner: the whole DeepSeek-V2/V3 model on one Hopper GPU behind the ModelRunner
// interface (runtime/model_runner.h), computing what the CPU backend computes
// (model/model.h, mla.h, moe.h, mlp.h), op for op, with the CUDA ops of src/backend/cuda.
//
// Weights stay in the checkpoint's precision on the device: BF16 tensors as bf16, FP8 e4m3
// tensors as e4m3 with their 128x128 block scales (dense projections through cuBLASLt's
// block-scaled FP8 GEMM with 1x128 activation quantisation, or in-kernel dequantisation where
// cuBLASLt has no kernel; routed experts through the grouped GEMM with in-kernel
// dequantisation). kv_b_proj is kept in bf16 (it feeds both MLA forms). Norm weights and the
// MoE router are fp32. The residual stream and attention math are fp32; GEMM inputs bf16.
// The paged latent cache is bf16, one [num_kv_blocks * 64, kv_lora + rope] array per layer.
//
// load_format "dummy": random weights made on the device from the config and `seed` (uniform,
// std 0.02; FP8 with block scales when the config has quantization_config), no checkpoint
// read. num_layers > 0 truncates the model to its first N layers.
//
// A Forward() batch larger than max_tokens_per_pass tokens is run as several passes (chunked
// prefill through the cache). MLA: sequences with more than one new token use the naive
// form (decompressed K/V) in MlaMode::kAuto, single-token ones the absorbed form over the
// paged cache (split-KV), like the CPU runner.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "model/mla.h"
#include "runtime/model_runner.h"

namespace ds::cuda {

struct CudaRunnerOptions {
  std::string model_dir;               // config.json (+ *.safetensors unless dummy)
  std::string load_format = "auto";    // auto | dummy
  int num_layers = 0;                  // > 0: first N layers only
  int num_kv_blocks = 0;               // 0: from max_kv_tokens, else from free memory
  int64_t max_kv_tokens = 0;
  double mem_fraction = 0.9;           // of free device memory after weights, for the KV pool
  uint64_t seed = 0;                   // dummy weights
  int max_tokens_per_pass = 8192;      // tokens per model pass
  int64_t naive_ctx_budget = 16384;    // context tokens decompressed at once (naive MLA)
  MlaMode mla_mode = MlaMode::kAuto;
  // Split each fp32 activation into bf16 hi + lo for the bf16 GEMMs (2x their cost, ~16-bit
  // activations): a reference-precision mode for small models; off = production numerics.
  bool precise_activations = false;
  // FP8 dense projections: "kernel" (default) = in-kernel weight dequantisation with bf16
  // activations (verified on the H200 against golden); "cublas" = cuBLASLt's block-scaled FP8
  // GEMM with 1x128 activation quantisation where K is a multiple of 128 (every DeepSeek-V3
  // projection), in-kernel elsewhere; "cublas-all" = cuBLASLt wherever it has a kernel.
  // "kernel" is the default because bf16 activations stay closer to the fp32 reference: the
  // e4m3 activations of "cublas" cost ~2.6% relative per GEMM output (FP8 fixture cosine 0.80
  // vs golden, matching a CPU emulation; run 6: at V3 shapes the path sits at the chained-
  // rounding floor of its emulation, fp8_emulate_act_quant; docs/design/cuda_backend.md).
  std::string fp8_gemm = "kernel";
  // Debug: the in-kernel FP8 path quantises its activations exactly as the cuBLASLt path
  // (Fp8QuantizePerTokenGroup: 1x128 groups, e4m3, same scales) and dequantises them to bf16
  // before its GEMM, on the projections fp8_gemm "cublas" sends to cuBLASLt. The reference the
  // cuBLASLt path is tested against (docs/design/cuda_backend.md, "Numerics").
  bool fp8_emulate_act_quant = false;
  // Absorbed-MLA decode on tensor cores (mla_decode_tc.cu: bf16 q and probabilities, fp32
  // accumulation, FlashMLA's numerics; V3 dims kv_lora 512 / rope 64 only, other dims keep the
  // CUDA-core kernel mla_decode.cu). Default on: verified against golden on the
  // v3_mla512_tiny fixture and against a CUDA-core emulation of its rounding at V3 shapes
  // (docs/design/cuda_backend.md, "Numerics"). `--decode-attention-backend cuda-core` turns
  // it off.
  bool mla_decode_tensor_cores = true;
  // Debug: MlaDecodeParams::emulate_tc_rounding for the CUDA-core decode kernel (bit 1: bf16
  // q, bit 2: bf16 probabilities; tc softmax/split plan). Non-zero forces the CUDA-core kernel.
  int mla_decode_emulate_tc = 0;
  // Absorbed-MLA decode on the sm_90a wgmma + TMA kernel (mla_decode_sm90.cu) where it applies
  // (sm_90 device, V3 dims, >= 64 query rows per sequence: 128 heads); the default (the CLI's
  // DS_MLA_DECODE_SM90=0 turns it off). On the H200 its op tests pass against the CPU op and the
  // emulation of its rounding and split plan (session 3 runs 3-4), the whole dummy-V3 model
  // matches that emulation (cosine >= 0.99998), a CUDA-graph replay matches the eager pass
  // (3 dense layers: cosine 0.99996, as the mma.sync kernel; session 4 run 3), and it is
  // 2.0-2.3x the mma.sync kernel at 128 heads (0.57-0.74 of FlashMLA's time; about FlashMLA's
  // time at batch 1 x 32K). Eager decode-only passes take the split plan that a graph replay
  // of the batch would (bucket capacity hints), so the two run the same plan.
  bool mla_decode_sm90 = true;
  // Which sm90 decode kernel (MlaDecodeParams::sm90_variant; A/B, the CLI reads
  // DS_MLA_DECODE_SM90_VARIANT=N): 0 = the verified kernel, 1 / 2 = the "seesaw" kernel with an
  // early / late ring-stage release (verified on the H200; 3-8% slower at batch >= 64, session 5
  // run 1), 4 = three warpgroups (S + softmax, two halves of O), 8 / 9 = 4 / 0 with the shorter
  // softmax, 10 = 8 with per-box barriers (session 16), 11 = the tile-pair schedule (session 19),
  // 12 / 13 = 10 with a three-stage ring (session 38; the same bits as 10), 15 = 13 with the lean
  // softmax (session 39; the same bits), 16 = 15 with the K tiles multicast to the two row blocks
  // of a token (session 41; the same bits).
  // Only with mla_decode_sm90.
  int mla_decode_sm90_variant = 0;
  // Session 40 (opt-in; the CLI reads DS_MLA_DECODE_Q_BF16=1): the sm_90a decode reads a bf16 copy
  // of q_lat (MlaDecodeParams::q_bf16; one F32ToBf16 launch a layer) instead of converting the fp32
  // q_lat in each CTA's prologue. The same bits (CudaRunner.DummyV3DecodeSm90QBf16BitEqual).
  // Only with mla_decode_sm90.
  bool mla_decode_q_bf16 = false;
  // With mla_decode_sm90_variant 0: the variant decode passes of <= 8 sequences take instead (-1:
  // none). 4 by default since session 29: bit-equal to 0 (CudaRunner.DummyV3DecodeSm90VariantsBitEqual),
  // V3 8 layers b1 1K 2.323 ms against 2.347 and 4K 2.385 against 2.392 (bench/results/
  // session29_2026-12-01_run7; runs 3 and 6: -10 to -12 us), b8 5.229 against 5.225 (run 7). Not at
  // larger batches: kernel-level 333 against 323 us at b128 x 4K (mla_decode_sm90.md, "Session 16").
  // The CLI reads DS_MLA_DECODE_SM90_SMALL_VARIANT=-1|0|4|8|9|10|11.
  int mla_decode_sm90_small_variant = 4;
  // MlaDecodeParams::sm90_min_rows (A/B; the CLI reads DS_MLA_DECODE_SM90_MIN_ROWS=N): 0 = the
  // sm90 kernel only for >= 64 query rows per sequence (128 heads); 16 also takes it for 16
  // heads x 1 token (V2-Lite) with a partial 64-row tile. Only with mla_decode_sm90. The kernel
  // beats the default 16-head kernels at every 16-head anchor of bench kernels (session 7 run 5:
  // b64 x 4K 92.4 vs 106.5 us, 0.84 of copy), but in the whole model only at some batches
  // (V2-Lite step, runs 5-7: b8 -1.8%, b32 -1.9%, b1 +1.4-2.3%, b64 x 1K +1.7%, b64 x 4K +4.4%,
  // level with mla_decode_capacity_plan), so it stays off by default.
  int mla_decode_sm90_min_rows = 0;
  // The sm_90a decode's split plan in decode-only passes (graph hints: max_context = the graph's
  // block-table capacity, 1-2x the longest context) chosen for the whole range of contexts that
  // capacity covers (MlaDecodeParams::capacity_hints) instead of for the capacity itself. Off by
  // default: measured on the H200 (session 7 run 7, the CudaMlaDecodeSm90* and CudaRunner* tests
  // pass with it on), it fixes the 16-head partial-tile kernel at b64 x 4K (14.49 vs 15.18 ms per
  // V2-Lite step) but changes nothing measurable for V3's 128 heads (b1 the same plan, b8 5.92
  // vs 5.88 ms, b64 x 4K 24.97 vs 24.94). The CLI reads DS_MLA_DECODE_CAPACITY_PLAN=1.
  bool mla_decode_capacity_plan = false;
  // Absorbed-MLA decode split size for small batches: > 0 (a multiple of 64) is the minimum
  // keys per KV split (MlaDecodeParams::kv_chunk) for passes of <= kMlaSmallBatchTokens tokens
  // whose split workspace stays within kMlaSmallBatchWorkspaceBytes; 0 keeps 256 everywhere.
  // Why: at batch 1 the decode kernels run a handful of CTAs of >= 256 keys each (V2-Lite 1 x
  // 1K: 4), so the step waits on a few SMs' load latency. A 64-key minimum gives such a batch
  // 4x the CTAs. Measured on the H200 (session 5 run 1): V2-Lite batch 1 x 1K decode step
  // 3.78 ms vs 4.08 ms with 256 (attention core 0.90 vs 1.19 ms per step); the sm_90a kernel
  // (128 heads) plans its own splits, so V3 is unchanged (3.58 vs 3.57 ms). The default; the
  // CLI reads DS_MLA_DECODE_SMALL_CHUNK=0 to turn it off.
  int mla_decode_small_batch_chunk = 64;
  // The same minimum where the sm_90a kernel runs (128 heads; a multiple of 64, 0 = as
  // mla_decode_small_batch_chunk): its plan (host_plans.h, PlanMlaDecodeSm90) counts a per-CTA
  // cost but not the split-KV combine, whose partials are 128 heads x 512 fp32 (256 KB) per
  // split and sequence. V3 8 layers, batch 1 x 1K decode step (session 7 run 1): minimum 64
  // 2.667 / 2.674 ms, 128 2.641, 256 2.643, 512 2.715. The CLI reads
  // DS_MLA_DECODE_SM90_SMALL_CHUNK=N.
  int mla_decode_sm90_small_batch_chunk = 128;
  // MlaDecodeParams::tc_stages for the mma.sync decode kernels (A/B; the CLI reads
  // DS_MLA_DECODE_TC_STAGES=2|3): 0 = each kernel's default. The row-tile kernel: 3-stage ring
  // (a 16-row tile's block takes 147 KB of shared memory), 2 = 2 stages (109 KB). The warp-split
  // kernel: 2 warp pairs with 2-stage rings by default (2 changes nothing), 3 = 3 pairs with
  // 3-stage rings. V2-Lite b1 x 1K and x 4K (row-tile): 2 stages no different (session 12 run 12).
  int mla_decode_tc_stages = 0;
  // Absorbed-MLA decode, tensor-core warp-split kernel (<= 16 query rows per sequence: 16 heads,
  // V2-Lite / TP8): merge the KV splits in the kernel (MlaDecodeParams::tc_fused_combine: the
  // last block of each sequence merges them, no combine launch) with a persistent zeroed
  // counter buffer (self-resetting, so graph replays need no memset). Same output as the
  // combine kernel by construction; verified on the H200 but slower (session 5 run 1: 115.3 vs
  // 103.6 us at 16 heads, batch 64 x 4K), so off by default (the CLI reads
  // DS_MLA_DECODE_FUSED_COMBINE=1 for the A/B).
  bool mla_decode_fused_combine = false;
  // Which tensor-core decode kernel (MlaDecodeParams::tc_kernel; A/B, the CLI reads
  // DS_MLA_DECODE_TC_KERNEL=auto|shape|rowtile): -1 = auto (the row-tile kernel up to 32K keys
  // of total context in the pass, else by shape: the warp-split kernel for sequences of <= 16
  // query rows), 0 = by shape at any context, 1 = always the row-tile kernel.
  int mla_decode_tc_kernel = -1;
  // MlaDecodeParams::tc_cluster_merge (A/B; the CLI reads DS_MLA_DECODE_CLUSTER_MERGE=1): the
  // warp-split kernel's 2-8 splits of a sequence merged in a thread-block cluster through
  // distributed shared memory (no combine launch). Slower at 16 heads b64 x 4K (178.5 vs 103.6
  // us, session 3); not yet timed at batch 1, where the combine launch is a larger share
  // (e.g. with DS_MLA_DECODE_TC_KERNEL=shape DS_MLA_DECODE_SMALL_CHUNK=256: 4 splits at 1K).
  bool mla_decode_cluster_merge = false;
  // Naive-MLA prefill attention on tensor cores (mla_prefill_tc.cu: flash-attention-2 style,
  // bf16 q / k / v / probabilities, fp32 accumulation and softmax; the kv_b_proj GEMM then
  // writes bf16 K/V). Head dims nope 128 / rope 64 / v 128 only (V2, V2-Lite, V3); other dims
  // keep the fp32 CUDA-core kernel. On the H200 (2026-11-29, bench/results/
  // mla_prefill_tc_2026-11-29_prefill_summary.md): 236-240 TFLOP/s at 128 heads x 4K tokens vs
  // 6.7 for the CUDA-core kernel, op tests within their bf16 bounds, every previously passing
  // fixture/runner test still passes; whole-model dummy-V3 logits vs the CUDA-core kernel: mean
  // cosine 0.9995, min 0.990 (see CudaRunner.DummyV3PrefillTensorCoresMatchesCudaCore).
  bool mla_prefill_tensor_cores = true;
  // With mla_prefill_tensor_cores: run the prefill attention on the FlashAttention-3-style
  // sm_90a kernel (mla_prefill_sm90.cu: TMA, wgmma, producer/consumer warpgroups) where it
  // applies (sm_90 device, same dims), else the mma.sync kernel. Default on: on the H200
  // (session 3 run 3) its op tests pass against the CPU and the mma.sync kernel, the dummy-V3
  // model matches the mma.sync kernel (mean cosine 0.99965; the min 0.9929 is MoE routing
  // near-ties), and it runs at 431-506 TFLOP/s at 4K-32K tokens, 1.8-1.9x the mma.sync kernel
  // (run 4's bench kernels, session3_2026-11-29_run4/kernels). The CLI reads
  // DS_MLA_PREFILL_SM90=0 to turn it off (=pingpong: also mla_prefill_sm90_pingpong).
  bool mla_prefill_sm90 = true;
  // With mla_prefill_sm90: its ping-pong variant (MlaPrefillTcParams::sm90_pingpong).
  bool mla_prefill_sm90_pingpong = false;
  // Decode steps (every sequence has exactly one new token, at most cuda_graph_max_batch
  // sequences) run as CUDA graphs: the batch is padded to a bucket (1, 2, 4, 8, 16, 24, 32, 48,
  // 64, 96, 128, ..., 256 sequences; padded rows attend to a reserved scratch KV block and
  // their logits are dropped) and the whole forward is replayed from a graph captured once per
  // (bucket, block-table width). Same kernels as the eager path. `--disable-cuda-graph` /
  // `--enforce-eager` turn it off.
  bool cuda_graphs = true;
  int cuda_graph_max_batch = 256;
  // Per-phase device time with CUDA events (ModelRunner::TakeProfile): eager passes record
  // events between phases; decode graphs are captured with event-record nodes at the same
  // marks, so graph replays are timed on the device too (the eager warm-up run of each graph
  // shape is not counted). profile_log: also log the totals when the runner is destroyed (the
  // CLI sets both from DS_CUDA_PROFILE=1, src/tools/cuda_runner_hook.cpp).
  bool profile = false;
  bool profile_log = false;
  // Diagnostic (the CLI's DS_STEP_TIMELINE=1): CUDA events around each replayed decode graph (its
  // input copy, the graph, the sampling and the ids' copy back), logged as medians when the
  // runner is destroyed, with the gap between one step's end and the next step's start. The
  // events are on the main stream: with graph_io the input copy and the ids' copy run on their
  // copy streams, so "input copy" is the main stream's wait for the copy and "sampling + ids copy"
  // is the sampling after the graph (none for greedy rows) and the event that the copy waits for.
  bool step_timeline = false;
  // The decode graph's own inputs and outputs (the CLI's DS_GRAPH_IO=0 turns it off): each graph shape
  // is captured twice, over two input buffers used in turn, so that a step's input copy goes out
  // on a copy stream while the previous step runs; the previous step's sampled ids are gathered by
  // the graph's embedding kernel (EmbeddingParams::prev_rows) instead of a launch before it; the
  // greedy argmax of every row is the graph's last kernel (the same ArgmaxKernel as Sample's, into
  // one of two id buffers used in turn), and the ids go back to the host on a second copy stream,
  // off the main stream. A step with any row at temperature > 0, or rows not in order, samples all
  // its rows after the graph as without it (into the same id buffer). The same ids (CudaRunner.OverlapLaunchGraphIo*).
  bool graph_io = true;
  // Greedy rows' argmax split over blocks of 4,096 logits a row (SampleParams::argmax_split; at
  // most kArgmaxSplitMaxRows rows) instead of one block a row. The same ids. Opt-in (the CLI's
  // DS_ARGMAX_SPLIT=1): with graph_io its in-graph phase was 6 against 8 us but the V2-Lite b1
  // step level (session 26 run 3; 3-9 us slower in run 2; docs/design/decode_small_batch.md,
  // "Session 26"), so the simpler kernel stays the default.
  bool argmax_split = false;
  // With graph_io, a one-row decode graph's LM head and greedy argmax as one launch
  // (lm_head_argmax.h: a K-split tensor-core GEMV whose blocks reduce (value, id) pairs, the last
  // block the id) instead of cuBLASLt's GEMM and the argmax kernel. Its own fp32 summation order,
  // so the logits move by rounding against cuBLASLt's (CudaRunnerLmHeadArgmax.*). Eager passes of
  // one logits row take the same kernel (the same logits as a graph's; their id unused). Needs
  // graph_io, fused_norm (the bf16 copy of the final norm), bf16 activations (not
  // precise_activations), hidden % 256 == 0 and <= 16,384, vocab % 16 == 0 and at most 40 tiles of 16 rows a
  // block (V3's vocab needs >= 101 SMs; fewer: cuBLASLt, silently). On by default since session 26 (the CLI's
  // DS_LM_HEAD_ARGMAX=0 turns it off).
  bool lm_head_argmax = true;
  // With lm_head_argmax on a one-token pass whose last layer runs MoePersistent (persistent_moe),
  // that kernel stops after its down phase (no grid barrier and norm phase for the final norm) and
  // LmHeadArgmax computes the final norm from the residual stream in every block
  // (LmHeadArgmaxParams::in_residual), as norm_in_attn does for the layers' input norms. The sum of
  // squares in the block's order: the logits move by rounding (CudaRunnerLmHeadArgmax.*). The last
  // MoE layer then takes the specialised instantiation (moe_specialize). Session 31 (the CLI's
  // DS_LM_HEAD_NORM=0 turns it off); docs/design/decode_small_batch.md, "Session 31".
  bool lm_head_norm = true;
  // Sampling rows at temperature > 0: one device-wide radix sort of every row (SampleParams::
  // device_sort; session 23) instead of CUB's segmented sort, a block a row (the CLI's
  // DS_SAMPLE_DEVICE_SORT=0). The same tokens either way.
  bool sample_device_sort = true;
  // Decode-size GEMMs on the weight-streaming skinny kernel (skinny_gemm.h); off keeps them on
  // the big-tile kernels (A/B benchmarks: the CLI reads DS_SKINNY_GEMM=0).
  bool skinny_gemm = true;
  // MoE routing of a token by one warp instead of its block (MoeRoutingParams::warp_route; <= 256
  // experts; every pass, fused route + permute included). On by default since session 9 (run 1:
  // the whole suite passes; V2-Lite 27 layers 1 x 1K decode step 2.745 vs 2.770 / 2.774 ms, V3
  // level). With softmax scoring (V2-Lite) the weights move by fp32 rounding against the block
  // form; V3's sigmoid routing is bit-identical. The CLI reads DS_MOE_ROUTE_WARP=0 to turn it off.
  bool moe_route_warp = true;
  // The router GEMV, the routing (warp form) and the permutation's offsets / pos / src_row in one
  // launch (moe_router_route.h), with the routed gate_up GEMM gathering the token rows by src_row
  // (GroupedGemmParams::a_rows) instead of MoeRoutePermute's row copies. Decode passes with
  // fused_moe_route (not stacked shared experts), <= 16 tokens, <= 256 experts and gate_up on
  // SkinnyGemm (not the grouped GEMV: V3 at 2-8 tokens keeps the permute). Bit-identical to
  // RouterGemv + MoeRoutePermute with the warp form (CudaRunnerRouterRoute.*). On by default since
  // session 9 (run 4, with decode_stream_priority: V2-Lite 27 layers 1 x 1K decode step 2.559 vs
  // 2.697-2.705 ms with priorities alone; without priorities it was 5% slower, as the routed
  // gate_up then starts early into the side branch's shared-expert GEMMs). The CLI reads
  // DS_ROUTER_ROUTE=0 to turn it off.
  bool fused_router_route = true;
  // The MoE combine + residual + next RMSNorm (MoeCombineNorm) in the last block of the routed
  // experts' down GEMM (SkinnyGemm's plain kernel; skinny_gemm.h, SkinnyCombineEpilogue), for
  // decode passes of <= kDownCombineMaxTokens tokens with fused_norm, not with stacked shared
  // experts or the down GEMM on the grouped GEMV: one launch fewer per MoE layer, the same bits
  // (CudaRunnerDownCombine.*). The side branch (shared experts) joins before the down GEMM.
  // Off: verified on the H200 but slower (session 10 runs 1-7: V2-Lite 27 layers b1 2.951 ms
  // against 2.563 with the compact row form; the fused down 30.5 us against 12.9 + 6.2 us
  // for the two launches). The CLI reads DS_DOWN_COMBINE=1.
  bool fused_down_combine = false;
  // The MoE combine + residual + next RMSNorm launch (MoeCombineNorm, fused_norm) with each
  // token's row over this many blocks of one cooperative launch (MoeCombineNormParams::
  // split_blocks: every routed slot's loads in flight at once, a grid barrier for the sum of
  // squares; the same bits, CudaMoeCombineNorm.SplitBlocksMatchUnfusedBitwise), for passes of <= 16
  // tokens; 0 / 1: one block a token. For V3's one-block launch (15.5 us alone at batch 1, its 8
  // slots one round trip each: session 29 run 2). The residual-form RmsNorms of such passes (the
  // post-attention norm, a dense layer's next norm) go the same way, as MoeCombineNorm with no
  // experts: RmsNorm's bits (the S = 0 identity of moe_combine_norm.h). Applied to models of
  // hidden_size >= combine_norm_split_min_hidden (where the one-block kernel takes more than 4
  // elements a thread and batches one slot a round trip: V3's 7,168, not V2-Lite's 2,048, where b8
  // with it forced took 6.163 ms against 6.130, session 29 run 5). 8 by default since session 29: V3 8 layers b1 1K 2.353 ms against
  // 2.371-2.382, 4K 2.403 against 2.432-2.436 (bench/results/session29_2026-12-01_run4). The CLI
  // reads DS_COMBINE_NORM_SPLIT=G (0 off; 4..32 at rows of >= 1,024, G dividing the block's warps)
  // and DS_COMBINE_NORM_SPLIT_MIN_HIDDEN=N.
  int combine_norm_split = 8;
  int combine_norm_split_min_hidden = 4096;
  // MlaDecodeParams::uv_preload (with fused_uv): the decode's W_UV merge kernel loads each warp's
  // first W_UV rows before the merge (V3's MlaDecodeCombineUvKernel, 9.7-13 us alone at batch 1,
  // session 29 run 2). The same bits. On by default since session 29: V3 8 layers b1 4K 2.392-2.396
  // ms against 2.402 (run 6, two rounds), 2.392 against 2.403 (run 4, with combine_norm_split on
  // both sides); 1K 2.344-2.346 against 2.348-2.349 (run 6). The CLI reads DS_MLA_UV_PRELOAD=0/1.
  bool mla_uv_preload = true;
  // The residual add + post-attention RMSNorm in the last block of o_proj (SkinnyGemm's plain
  // kernel: V2-Lite's bf16 o_proj; the norm-only SkinnyCombineEpilogue), for decode passes of <= 2
  // tokens with fused_norm: one launch fewer per layer, the bits of RmsNorm
  // (CudaRunnerOprojNorm.*). Off: verified on the H200 but slower (session 10 runs 1-7: V2-Lite
  // b1 2.848 ms against 2.563; the fused o_proj 17.5-19 us against 6 + 3.6 us). The CLI reads
  // DS_OPROJ_NORM=1.
  bool fused_oproj_norm = false;
  // The routed experts' SiLU-and-mul in the gate_up GEMM's epilogue (SkinnyGemmParams::silu_pair:
  // each block takes a gate tile and its up tile and writes bf16 act), for decode passes of <= 8
  // tokens whose gate_up runs on SkinnyGemm's plain kernel (not the grouped GEMV, no stacked
  // shared experts): one launch fewer per MoE layer (2.3 us under ncu at V2-Lite batch 1) and no
  // fp32 gate_up round trip, the same bits (CudaRunnerGateUpSilu.*, passing on the H200 since
  // session 11 run 1). On by default since session 11: V2-Lite b1 2.529 against 2.552 ms, 2.534
  // against 2.576-2.584 (runs 1-2), V3 b1 2.404 against 2.408. The CLI reads DS_GATE_UP_SILU=0/1.
  bool fused_gate_up_silu = true;
  // The whole MoE layer of a one-token decode pass in one cooperative launch (moe_persistent.h:
  // router, routing, routed + shared experts, combine, residual and the next norm, phases split by
  // grid barriers; the post-attention norm too where no other kernel applied it), for bf16 experts
  // with fused_norm. Changes fp32 summation orders (bounded: CudaRunnerPersistentMoe.*). On by
  // default since session 11: V2-Lite b1 2.496-2.510 ms against 2.537-2.557 (runs 5-6; the kernel
  // ~53 us against ~54 us of launches it replaces). The CLI reads DS_PERSISTENT_MOE=0/1.
  bool persistent_moe = true;
  int persistent_moe_blocks_per_sm = 2;  // its blocks per SM (1 or 2). The CLI reads DS_PERSISTENT_MOE_BPS.
  // Its phase-2 split (MoePersistentParams::gu_ksplit: 1, 2, 4 or 8 warps a gate_up tile). 8 by
  // default since session 14: V2-Lite 27 layers b1 2.352-2.373 ms against 2.366-2.389 with 1, and
  // 2.304-2.310 against 2.317-2.333 with norm_in_attn (run 3; run 2: 2.340 against 2.370-2.373;
  // 2 was slower, 2.397). The CLI reads DS_PERSISTENT_MOE_GU_KSPLIT.
  int persistent_moe_gu_ksplit = 8;
  // Its phase 2 with the shared experts' tiles first and no barrier 1: a block waits for the
  // router's logits only before its first routed tile (MoePersistentParams::router_ready; layers
  // whose split is 8). The same bits. On by default since session 20: with attn_absorb_overlap,
  // V2-Lite 27 layers b1 2.266-2.271 against 2.387-2.405 ms with neither (run 2). The CLI reads
  // DS_PERSISTENT_MOE_SHARED_FIRST=0/1.
  bool persistent_moe_shared_first = true;
  // The persistent MoE kernel's router logits as tagged 64-bit words (MoePersistentParams::
  // router_tagged): where the specialised kernel runs with <= 64 experts (V2-Lite), the routing
  // warp polls the logits themselves, first loaded beside the block's last shared-expert tile,
  // instead of a count and then the logits. The same bits. On by default since session 31 (V2-Lite
  // b1 1K -20 to -25 us a step; the CLI's DS_MOE_ROUTER_TAGGED=0 turns it off;
  // docs/design/decode_small_batch.md, "Session 31").
  bool moe_router_tagged = true;
  // The MoE layer of a one-token pass on a TMA ring (moe_ring.h, session 32): where the
  // specialised kernel would run its tagged form (MoePersistentTagged) on DeepSeek-V2-Lite's
  // shapes (MoeRingUnsupported), MoeRing instead: one block a SM whose producer warps stream the
  // expert weights into a shared-memory ring of moe_ring_stages x 32 KB by tensor-map copies,
  // across the rounds, the routing and the grid barrier. The same bits as MoePersistent. On by
  // default since session 32 (V2-Lite b1 1K -55 to -74 us a step, 4K -67: run 12; the L2
  // evict_first policy of its copies is most of that: without it the attention kernel after it
  // ran ~1.9 us slower, run 10). The CLI reads DS_MOE_RING=0/1, DS_MOE_RING_STAGES (2..6),
  // DS_MOE_RING_PRODUCERS (1, 2, 4).
  bool moe_ring = true;
  int moe_ring_stages = 5;
  int moe_ring_producers = 2;
  int moe_ring_early_stages = 0;  // MoeRingForm::early_stages (DS_MOE_RING_EARLY, 0..5)
  bool moe_ring_warm_route = true;  // MoeRingForm::warm_route (DS_MOE_RING_WARM=0/1)
  bool moe_ring_evict_first = true;  // MoeRingForm::evict_first (DS_MOE_RING_EVICT_FIRST=0/1)
  // MoeRingForm::act_tagged (DS_MOE_RING_ACT_TAGGED=0/1): act handed over by tagged words, no grid
  // barrier (session 33; on by default since its run 4: the kernel ~0.9 us faster; the step
  // 1K 9-17 us, 4K 5-11 us faster in same-call pairs).
  bool moe_ring_act_tagged = true;
  bool moe_ring_act_lookahead = true;  // MoeRingForm::act_lookahead (DS_MOE_RING_ACT_LOOKAHEAD=0/1)
  // The dense layer (first_k_dense) on MoeRing's dense form too (DS_MOE_RING_DENSE=0/1; session 34;
  // moe_ring.h), where persistent_dense_mlp runs it and the act_tagged form is on. Its own fp32 order
  // (bounded against MoePersistent's dense form). On by default since session 34 (run 6: V2-Lite b1
  // 1K -2 to -8 us, 4K -11 to +3 us a step in interleaved pairs; the kernel ~6 us under MoePersistent's).
  bool moe_ring_dense = true;
  // MoeRingForm::grid (DS_MOE_RING_GRID=0 or 88..the SMs): the launch's blocks; 0, one a SM. At 128
  // every block has 11 gate_up tiles and one down tile (132: 10 or 11, and 4 blocks without one).
  int moe_ring_grid = 0;
  // With persistent_moe: the dense (first_k_dense_replace) layers' MLP of a one-token pass through
  // the same kernel's dense form (MoePersistentParams with no routed experts: post-attention norm,
  // gate_up + SiLU, down, residual and the next norm in one launch instead of five or six). Changes
  // fp32 summation orders (bounded: CudaRunnerPersistentMoe.DenseWithinBounds). On by default
  // since session 14: V2-Lite 27 layers b1 2.298-2.302 ms against 2.304-2.319 (run 10). The CLI
  // reads DS_PERSISTENT_DENSE=0/1.
  bool persistent_dense_mlp = true;
  // The persistent attention and MoE kernels launched as programmatic dependents (PDL) of the
  // kernel before them, with the cooperative attribute (MoePersistentParams::pdl,
  // MlaAttnPersistentParams::pdl): the next kernel's blocks are scheduled as the previous one's
  // exit and wait for its completion on the device, instead of the launch starting after it.
  // Where the device refuses the pair of attributes, the launch falls back to plain (once, with a
  // warning). Results are bit-identical (CudaRunnerPersistentMoe.PdlBitIdentical). Written in
  // session 14; bit-identical and no faster (session 15 run 1: V2-Lite b1 2.320-2.324 ms against
  // 2.297-2.323; session 20 run 6: 2.267-2.275 against 2.189-2.220, and 2.50-2.52 with each
  // kernel's first weights loaded before its wait, code at 3c021e3): opt-in. The CLI reads
  // DS_PERSISTENT_PDL=0/1.
  bool persistent_pdl = false;
  // The persistent kernels' weight loads with an L2 fetch size (MlaAttnPersistentParams::l2_fetch,
  // MoePersistentParams::l2_fetch: 0 none, 1 128 bytes, 2 256 bytes; the same bits; not with
  // persistent_pdl, whose instantiations load without). 128 bytes by default since session 21:
  // V2-Lite 27 layers b1 2.534-2.540 ms against 2.639-2.656 with none, 256 bytes no faster
  // (bench/results/session21_2026-12-01_run2), all of it the MoE kernel's (run 3); after the
  // batched burst loads 2.286-2.311 against 2.332-2.334 (run 8). The attention kernel's loads
  // measured no faster or slower with it (runs 3, 9). The CLI reads DS_ATTN_L2_FETCH and
  // DS_MOE_L2_FETCH (0, 1, 2). (An L2 evict_first policy on top: no faster, session 28 run 6.)
  int attn_l2_fetch = 1;
  int moe_l2_fetch = 1;
  // fp8_gemm "cublas" / "cublas-all" (W8A8: e4m3 activations with 1x128 scales): projections of
  // <= 64 rows on Fp8SkinnyGemmSm90 (fp8_gemm_skinny_sm90.h: y^T = w x^T through CUTLASS, 64-row
  // ping-pong tiles, Fp8SkinnyAutoKsplit's K split) instead of cuBLASLt, where it takes the
  // shapes. The same math in another fp32 order (bounded in W8A8's looser bounds:
  // CudaRunnerFp8Skinny.*). Kernel (bf16-output form, bench kernels): 0.85-1.01 of copy against
  // cuBLASLt's 0.70-0.82 on V3's large projections; dummy V3 8 layers W8A8: decode 2.2-3.1% faster
  // at batch 1, 1.8% at 32
  // (session 15 run 12). Opt-in, as is the W8A8 mode itself. The CLI reads
  // DS_FP8_SKINNY_SM90=0/1.
  bool fp8_skinny_sm90 = false;
  // With attn_persistent, where a layer's attention runs the persistent kernel, that kernel
  // normalises the residual itself in every block (MlaAttnPersistentParams::in_residual) instead
  // of reading the input norm's output: at layer 0 (no RmsNorm launch on the embeddings), and
  // after a persistent MoE kernel (persistent_moe), which then skips the next norm (its third
  // grid barrier and fourth phase). The last layer's MoE keeps the final norm. Changes fp32
  // summation orders (bounded like the kernels it changes). On by default since session 14:
  // V2-Lite 27 layers b1 2.317-2.333 ms against 2.366-2.389 (run 3, gu_ksplit 1, MoE layers only);
  // with layer 0 too, 2.342-2.351 against 2.395-2.398 (run 7). The CLI reads DS_NORM_IN_ATTN=0/1.
  bool norm_in_attn = true;
  // MLA's query absorption (q_nope W_UK per head) in passes of <= 8 absorbed rows as one
  // MlaQAbsorb launch (mla_q_absorb.h) reading the fp32 q directly, instead of SplitBf16 + a
  // batched cuBLASLt GEMM (1.8 + 4.1 us under ncu at V2-Lite batch 1, on the q side branch that
  // is the longer one). Changes the fp32 summation order (bounded: CudaRunnerQAbsorb.*).
  // Opt-in until measured. The CLI reads DS_Q_ABSORB=0/1.
  bool fused_q_absorb = false;
  // The whole MLA attention layer of a one-token, one-sequence decode pass (batch 1) as one
  // cooperative launch (mla_attn_persistent.h: q / kv_a, kv norm + RoPE + cache write, the q
  // absorption, split-KV decode, merge + W_UV and o_proj, phases split by grid barriers), for
  // bf16 projections without q_lora (V2-Lite), <= 16 heads, block tables of <= 8192 keys (a
  // graph's capacity). Changes fp32 summation orders and rounds the probabilities to bf16 per
  // 32-key split (bounded: CudaRunnerAttnPersistent.*). On by default since session 13: V2-Lite
  // 27 layers b1 decode step 2.466-2.471 ms against 2.535-2.540 at 1K, 2.597 against 2.757 at
  // 4K, 2.840 against 2.867 at 8K (bench/results/session13_2026-11-30_run9; run 10: 2.436-2.442
  // against 2.507-2.511 at 1K with the whole suite passing). The CLI reads
  // DS_ATTN_PERSISTENT=0/1.
  bool attn_persistent = true;
  // With attn_persistent: the absorption overlaps phase 1's q_pe / kv_a tiles, started by a
  // counter of the q_nope tiles instead of a grid barrier (MlaAttnPersistentParams::nope_ready;
  // the same math and bits). On by default since session 20: the kernel 24.4 against 26.6 us at
  // 1K (timing report), V2-Lite 27 layers b1 2.277-2.348 against 2.323-2.405 ms
  // (bench/results/session20_2026-12-01_run{1,2}). The CLI reads DS_ATTN_ABSORB_OVERLAP=0/1.
  bool attn_absorb_overlap = true;
  // With attn_absorb_overlap: the decode blocks start on a counter of the q_pe / kv_a tiles and
  // the absorbing blocks instead of barrier 2 (MlaAttnPersistentParams::split_ready; the same
  // bits). On by default since session 20: the kernel 27.51 against 28.67 us at 1K, V2-Lite 27
  // layers b1 2.697-2.710 against 2.738-2.757 ms on a slow machine (run 8). The CLI reads
  // DS_ATTN_SPLIT_COUNTER=0/1.
  bool attn_split_counter = true;
  // With attn_persistent: where the kernel stages each block's o_proj tile in shared memory
  // (MlaAttnPersistentParams::wo_stage_point: 2, phase 4 after the partials' loads, the default
  // from session 13; 3, phase 3: blocks without a split at its start, split blocks once their
  // Q / K tiles are in; 4, every block at phase 3's start). The same bits
  // (CudaRunnerAttnPersistent.WoStageBitIdentical). 0 and 1: phase 4 at its start / after the
  // first unit's LSE loads (session 13). 3 by default since session 22: V2-Lite 27 layers b1
  // faster in 9 of 9 same-call pairs at 1K, by 0.1-1.4%, and at 4K by 1.3%
  // (bench/results/session22_2026-12-01_run{1,2,3,8}); the kernel 25.90-26.57 against
  // 26.91-27.31 us at 4K (runs 1, 7), within noise at 1K. 4 was no faster. The CLI reads
  // DS_ATTN_WO_STAGE=0..6 (5 / 6: session 28, a split block's copies spread over its warps).
  int attn_wo_stage_point = 3;
  // With attn_persistent: phase 4's column-split merge (MlaAttnPersistentParams::head_ready /
  // merge_cols_min_splits, session 29) at contexts of >= this many 32-key splits; 0 never. Each
  // (head, part) unit merges a 64-column slice of its head's partials, then W_UV once its head's
  // 8 slices are in: 1 / 8 of the one-loop merge's L2 reads for one more wait. Its own fp32
  // summation order (bounded: CudaRunnerAttnPersistent.MergeColsWithinBounds). 1 (every
  // context) by default: V2-Lite 27 layers b1 4K 1.897-1.902 ms against 1.951-1.953 with the
  // one-loop merge, 2K 1.852 against 1.861, 1K 1.845-1.849 against 1.847-1.853; 64 (from 2K) the
  // same as 1 at 4K (bench/results/session29_2026-12-01_run3). Any value but 1 takes the
  // generic attention kernel (the specialised one fixes 1 since session 35). The CLI reads
  // DS_ATTN_MERGE_COLS=N.
  int attn_merge_cols_min_splits = 1;
  // MlaAttnPersistentParams::specialize (session 28): the attention kernel's runner-form
  // instantiation where the layer's params match it (MlaAttnPersistentSpecialized): 1 the form, 2
  // the form and 16 heads x hidden 2048 (V2-Lite, Moonlight; other shapes get 1); 0 the generic
  // kernel. The same bits. 1 against 0: V2-Lite b1 1K 1.928-1.950 ms against 1.982-1.997
  // (bench/results/session28_2026-12-01_run{7,8}), 4K 2.045-2.054 against 2.098-2.108. The kernel
  // runs each phase's code once a launch, so its code is fetched cold; the generic kernel's jumps
  // over the other forms' code were where its warps waited (ncu). 2 by default: against 1 within
  // noise at 1K (runs 8, 10), 4K 1.920 against 1.937 ms with moe_specialize 2 (run 10). The CLI
  // reads DS_ATTN_SPECIALIZE=0..2.
  int attn_specialize = 2;
  // MoePersistentParams::specialize (session 28): the MoE kernel's runner-form instantiation where
  // a layer's params match it (MoePersistentSpecialized): 1 the form, 2 the form and V2-Lite's
  // shapes; 0 the generic kernel. The same bits. 2 by default (other shapes get 1): V2-Lite b1 1K
  // 1.826-1.833 ms against 1.879-1.893 at 1 and 1.924-1.928 at 0, 4K 1.937 against 2.003
  // (bench/results/session28_2026-12-01_run10; 1 against 0 first in run 9). The CLI reads
  // DS_MOE_SPECIALIZE=0..2.
  int moe_specialize = 2;
  // The persistent attention and MoE kernels' preferred shared-memory carveout, percent of the
  // maximum (cudaFuncAttributePreferredSharedMemoryCarveout); -1 the driver's choice. 72 by default
  // since session 25: 164 KB for both kernels (the attention kernel's own choice; the MoE kernel's
  // two blocks of ~43 KB would get a smaller one; since session 27 moe_carveout, below, gives the MoE
  // kernel 132 KB instead), so the SMs keep one L1 / shared-memory split between
  // them; V2-Lite 27 layers b1 faster in 15 of 17 same-call pairs and equal in two, by 0-1.2%
  // (bench/results/session25_2026-12-01_run{9,10,12,14,15}). Never near
  // 100: the 228 KB carveout leaves 28 KB of L1 and streams 23% slower
  // (CudaStreamPattern.DISABLED_SmemReport: 3.26 against 4.25 TB/s, run 5); 86 and 100 made the
  // step 18% slower (run 9). The CLI reads DS_PERSISTENT_CARVEOUT=-1..100.
  int persistent_carveout = 72;
  // The MoE kernel's own carveout (percent; -1 the driver's; -2 persistent_carveout's), applied while
  // persistent_carveout >= 0 (at -1 both kernels take the driver's). 58 by default since session 27:
  // 132 KB of shared memory for its two blocks of ~43 KB (the attention kernel keeps 164 KB); V2-Lite
  // 27 layers b1 1.985-1.999 against 2.010-2.019 ms in 11 same-call pairs, 4K 2.109-2.112 against
  // 2.118-2.128 (bench/results/session27_2026-12-01_run{14,15,16}); 44 and the driver's: no gain (30
  // and 16 do not fit two blocks); both kernels at 86 or 100: +19%. A launch attribute: the same
  // bits. The CLI reads DS_MOE_CARVEOUT=-2..100.
  int moe_carveout = 58;
  // bf16 dense projections of <= kSkinnyBf16MaxRows rows take SkinnyGemm up to this many weights
  // (N * K), cuBLASLt above (default kSkinnyBf16MaxWeights, 4 Mi: V2-Lite's kv_a and o_proj;
  // 12 Mi also takes q and the shared experts, 1-2% faster at batches 1-8 but not yet the
  // default: skinny_gemm.h has the A/B and the open test question). The CLI reads
  // DS_SKINNY_BF16_MAX_MWEIGHTS=<Mi weights> (2^20).
  int64_t skinny_bf16_max_weights = int64_t{2048} * 2048;
  // FP8 dense projections of at most kFp8GemvMaxRows = 8 rows (decode steps of <= 8 sequences:
  // the graph buckets 1, 2, 4, 8 and the eager passes they pad) and at least
  // kFp8GemvMinWeights weights (V3's o_proj, dense down and dense gate_up; the GEMV measured
  // slower on the smaller projections; fp8_gemv.h has the figures) on the TMA-streaming FP8 GEMV
  // (fp8_gemv.h, Fp8GemvRunnerCtas CTAs) instead of the skinny kernel; only with the default
  // FP8 numerics (fp8_gemm "kernel": bf16 activations, in-kernel dequantisation). Same math,
  // other fp32 summation order (128-k blocks, split-K partials in k order), so logits move
  // within fp32 rounding (CudaRunnerFp8Gemv.*). Its plan ignores M and each output row reads
  // only its own activation row, so a padded graph step and the eager pass give the same rows.
  // On by default since session 7: the whole dsinfer_cuda_tests suite passes with it on (145
  // tests, session 7 run 1, with gate_up only); V3 8 layers batch 1 x 1K decode step 2.667 /
  // 2.674 ms vs 2.710 off. The CLI reads DS_FP8_GEMV=0 to turn it off.
  bool fp8_gemv = true;
  // The MoE routed experts of passes of at most kFp8GemvGroupedMaxRows = 8 tokens (decode steps
  // of <= 8 sequences: graph buckets 1, 2, 4, 8 and their eager passes), FP8 experts on the
  // skinny path, on the grouped TMA-streaming FP8 GEMV (fp8_gemv_grouped.h: Fp8Gemv's ring over
  // the active experts' weights, auto CTAs) instead of SkinnyGemm's grouped form. Same math,
  // other fp32 summation order (CudaRunnerFp8GemvExperts.*). First H200 run (session 7 run 11):
  // the whole-model test passes; gate_up at 8 experts x 1 row 72.8 vs 92.7 us (1.27x), down 38.0
  // vs 40.2 us. On by default since session 8 for passes of >= fp8_gemv_experts_min_tokens
  // tokens (below: step A/B); the CLI reads DS_FP8_GEMV_EXPERTS=0 to turn it off.
  bool fp8_gemv_experts = true;
  // The same for BF16 routed experts (DeepSeek-V2-Lite's; the skinny MoE path, passes of at most
  // kFp8GemvGroupedMaxRows = 8 tokens, gate_up and down): the grouped TMA-streaming GEMV with bf16
  // weights (fp8_gemv_grouped.h, w_bf16) instead of SkinnyGemm's grouped form (0.64-0.77 of copy
  // bandwidth on V2-Lite's experts, session 7). Same math (exact bf16 products, fp32 sums), other
  // summation order (CudaRunnerGemvExpertsBf16.*, passes on the H200, session 8 run 3). On by
  // default since session 9 for passes of >= gemv_experts_bf16_min_tokens = 8 tokens, with the
  // tile CTA plan. V2-Lite 27 layers x 1K decode step against SkinnyGemm with the fused router +
  // routing's gathered rows (session 9 run 6): batch 8 6.180 vs 6.234 ms, batch 4 4.462 vs 4.382,
  // batch 2 3.361 vs 3.327; batch 1 keeps SkinnyGemm (the gathered rows). The CLI reads
  // DS_GEMV_EXPERTS_BF16=0 to turn it off, DS_GEMV_EXPERTS_BF16_MIN_TOKENS for the bound.
  bool gemv_experts_bf16 = true;
  int gemv_experts_bf16_min_tokens = 8;  // 1, 2, 4 or 8 (as fp8_gemv_experts_min_tokens)
  // fp8_gemv_experts applies only to passes of at least this many tokens (1, 2, 4 or 8: a power
  // of two, so a graph bucket and its eager passes agree). V3 8 layers, 1K context, decode step
  // with the GEMV vs SkinnyGemm (session 8 runs 2 and 3): batch 1 2.514 vs 2.488 ms (1% slower),
  // batch 2 2.945 vs 3.076, batch 4 3.767 vs 4.042, batch 8 5.152 vs 5.736 (4-10% faster). The
  // CLI reads DS_FP8_GEMV_EXPERTS_MIN_TOKENS.
  int fp8_gemv_experts_min_tokens = 2;
  // MoeRouterRoute's one-token routing with its intermediates in registers
  // (MoeRouterRouteParams::fast_route): the same bits. On by default since session 30: the
  // launch's last block routed V3's token in ~10 us (RouteTokenInWarp: one lane's group scans,
  // shared-memory round trips; warm or cold alike), 7.5 us for the whole tail now; V3 8 layers b1
  // 1K 2.320-2.322 ms against 2.360-2.363, 4K 2.372-2.378 against 2.414-2.421
  // (bench/results/session30_2026-12-01_run5). The CLI reads DS_ROUTER_ROUTE_FAST=0|1.
  bool router_route_fast = true;
  // BF16 experts on the grouped GEMV (gemv_experts_bf16): its CTAs (0: auto, 2 per SM; -1: one
  // per SM; -2: tile-aligned, one CTA per 128-row tile of the host's slot bound while that is <= 2
  // per SM, so no tile is split across CTAs (bench kernels, session 8: V2-Lite's batch-1 gate_up,
  // 132 tiles, ran whole tiles at one CTA per SM and reached 0.89; its down, 96 tiles over 132
  // CTAs, 0.61);
  // > 0: that many) and whether the down GEMM takes it too (else SkinnyGemm). bench
  // kernels, session 8 run 3, V2-Lite 6 experts x 1 row: gate_up 19.9 us with one CTA per SM,
  // 22.4 auto, 23.7 SkinnyGemm; down 14.5 / 15.8 against SkinnyGemm's 11.6. The CLI reads
  // DS_GEMV_EXPERTS_BF16_CTAS=auto|sm|tile|N and DS_GEMV_EXPERTS_BF16_DOWN=0|1.
  // Default -2 (tile) since session 9 (run 1: batch 8 6.287 vs 6.429 ms with auto).
  int gemv_experts_bf16_ctas = -2;
  bool gemv_experts_bf16_down = true;
  // Prefill-size MoE expert GEMMs on the sm_90a CUTLASS kernel (grouped_gemm_sm90.h) where it
  // applies (built with CUTLASS, sm_90, aligned dims); off keeps them on the mma.sync kernel
  // (A/B benchmarks: the CLI reads DS_SM90_GROUPED_GEMM=0).
  bool sm90_grouped_gemm = true;
  // Small-batch decode fusions (docs/design/decode_small_batch.md, "Launch fusions"): fewer
  // launches per layer for passes of at most fused_decode_max_tokens tokens (and at most
  // kMoeRoutePermuteMaxTokens = 16) on the skinny MoE path. route, norm and qpe are on by
  // default: bit-identical to the unfused path on the H200 (every fixture, dummy V2-Lite and V3,
  // graphs on and off; session 4 run 3); so are olat, silu16 and kvrope (session 6 run 1; with
  // them V2-Lite's 1 x 1K decode step 3.38 vs 3.60 ms), also on by default. shared is off: on
  // V2-Lite dims it moved logits by 1.8e-2 relative L2 (min cosine 0.99985), above its
  // fp32-rounding bound. The CLI reads DS_FUSED_DECODE=0 (none),
  // =1 (all seven) or a comma list of route,shared,norm,qpe,olat,silu16,kvrope
  // (fused_decode_flags.h).
  //  - fused_moe_route: routing + permutation in one kernel (moe_route_permute.h) instead of
  //    MoeRouting + MoePermute's six launches; bit-identical ids, weights and logits.
  //  - fused_moe_shared (with fused_moe_route): the shared experts as extra groups of the
  //    routed experts' skinny GEMMs and SiLU launch (their weights stacked after the routed
  //    experts': a second copy of the shared-expert weights per layer), the expert down-proj
  //    output fp32 (routed rows rounded to bf16 in the combine, as stored unfused); equal to
  //    the unfused path within fp32 rounding (other GEMM summation order; with several shared
  //    experts their down-proj halves are summed in the combine).
  //  - fused_norm: the MoE combine, the residual add and the next RMSNorm (the next layer's
  //    input_layernorm or the final norm) in one kernel (moe_combine_norm.h), and every norm
  //    writes the bf16 copy of its output that the next projections read (no F32ToBf16 /
  //    SplitBf16 launches for q / q_a, kv_a, dense gate_up, graph-mode lm_head; since session 29
  //    also the q_a norm's copy for q_b); bit-identical.
  //  - fused_qpe: in decode-only passes the q RoPE also writes the rotated q_pe into absorbed
  //    MLA's q_lat (RopeParams::out2), no Copy2D launch; bit-identical.
  //  - fused_olat (not with precise_activations): absorbed-MLA decode writes o_lat as bf16
  //    (MlaDecodeParams::out_type kBF16: every decode path's final writer, the combine or the
  //    one-split kernel, rounds the fp32 value it would have stored with __float2bfloat16_rn,
  //    as SplitBf16 does) and the W_UV per-head GEMM reads it directly: no SplitBf16 launch
  //    per layer. Bit-identical by construction and on the H200 (session 6 run 1).
  //    (The W_UV GEMM's output for o_proj stays fp32: it runs on cuBLASLt at these shapes,
  //    whose bf16-output algorithm choice and rounding are not documented to match.)
  //  - fused_silu16 (not with precise_activations): the dense MLP (first_k_dense layers) and
  //    the unstacked shared experts (MoE layers without fused_moe_shared) run SiLU-and-mul
  //    with bf16 output (SiluAndMulParams::out_type kBF16: the same fp32 value, stored as its
  //    __float2bfloat16_rn, the rounding SplitBf16 applies) and the down projection reads it
  //    as LinearFwd's x16: no SplitBf16 launch per MLP. Only where the down projection takes
  //    bf16 activations (bf16 weights; FP8 weights with in-kernel dequantisation), not where
  //    it quantises its fp32 input to e4m3 (fp8_gemm "cublas" on cuBLASLt, or
  //    fp8_emulate_act_quant). Bit-identical by construction and on the H200 (session 6 run 1).
  //  - fused_kvrope: MLA's RMSNorm of the kv latent c_kv, the q RoPE (with fused_qpe's q_pe
  //    copy into q_lat) and the k_pe RoPE + paged latent cache write in one kernel
  //    (mla_kv_rope_fused.h) instead of three launches per layer, in every pass of <= 16 tokens
  //    (prefill chunks too: the three ops do not depend on the MLA mode). The same device
  //    routines as RmsNorm / ApplyRope / RopeAndWriteKvCache (rmsnorm.cuh, rope.cuh), the norm
  //    at RmsNorm's block size (its reduction order): bit-identical by construction, also with
  //    precise_activations (which changes none of these ops' inputs or arithmetic); bit-identical
  //    on the H200 too (session 6 run 1).
  bool fused_moe_route = true;
  bool fused_moe_shared = false;
  bool fused_norm = true;
  bool fused_qpe = true;
  bool fused_olat = true;
  bool fused_silu16 = true;
  bool fused_kvrope = true;
  //  - fused_uv (decode-only passes with kv_lora 512, not precise, o_proj reading bf16; on by
  //    default since session 8: V2-Lite 27 layers 1 x 1K decode step 2.786 / 2.788 vs 2.859 /
  //    2.899 ms, V3 8 layers 2.499 vs 2.520 ms, run 5):
  //    the MLA decode's final merge applies W_UV per head and writes o_proj's bf16 input
  //    (MlaDecodeParams::uv_w, mla_decode_uv.h): the W_UV GEMM and the SplitBf16 before o_proj
  //    are gone. Same bf16 o_lat, W_UV's products summed in another fp32 order than cuBLASLt's
  //    (CudaRunnerFusedUv.* bounds the logits). (Session 8 also measured the W_UV GEMM writing
  //    bf16 itself, bit-identical but 2.837 ms; removed in favour of this.)
  bool fused_uv = true;
  int fused_decode_max_tokens = 16;
  // FP8 GEMMs of the default numerics (fp8_gemm "kernel": bf16 activations, e4m3 weights with
  // 128x128 block scales) at prefill sizes -- the expert GEMMs and the dense projections that do
  // not take the skinny kernel -- on the sm_90a wgmma mixed-input grouped GEMM
  // (grouped_gemm_sm90_mixed.h) where it applies (built with CUTLASS, sm_90, K % 128 == 0,
  // N % 8 == 0), else the mma.sync kernel. Its weights are dequantised to bf16 with the block
  // scale before the MMA (scale-then-round, <= 2^-9 relative per weight vs the mma.sync kernel's
  // per-K-block fp32 scaling; docs/design/cuda_backend.md). The default: on the H200 its op
  // tests pass against the exact scale-then-round emulation and the dummy-V3 model matches the
  // mma.sync kernel (3 layers: min cosine 0.99982), and V3's 64 x 1K prefill (8 layers) runs at
  // 45.1K tok/s against 17.2K (session 4 run 3). The CLI's DS_SM90_MIXED_GEMM=0 turns it off.
  bool sm90_mixed_gemm = true;
  // Programmatic Dependent Launch (launch.cuh; docs/design/decode_small_batch.md, "Programmatic
  // dependent launch"): the runner's own kernels (norms, RoPE / cache write, conversions and
  // copies, skinny GEMMs, SiLU-and-mul, fused routing / combine, MLA decode and its combine,
  // embedding, greedy sampling, gathers) are launched with
  // cudaLaunchAttributeProgrammaticStreamSerialization, so each may be scheduled while the
  // previous kernel in the stream finishes; every one of them waits (griddepcontrol.wait) for
  // its predecessor's completion before touching global memory, so results are bit-identical
  // by construction. Eager passes and captured decode graphs alike (capture records
  // programmatic edges). cuBLAS / cuBLASLt / CUTLASS kernels are launched as before. Aims at
  // the launch latency and tails between the ~20 small dependent kernels of a batch-1 decode
  // layer. Verified bit-identical on the H200 (session 6 run 1) but no faster there: V2-Lite
  // 1 x 1K decode step 3.59 vs 3.60 ms, V3 8 layers 2.98 vs 2.90 ms (graphs on), so off by
  // default (the CLI reads DS_PDL=1).
  bool pdl = false;
  // Two branches in captured decode graphs (passes of at most fused_decode_max_tokens tokens):
  // work independent of the main chain runs on a second stream, forked from the main stream by
  // an event and joined back before its result is read, so the graph holds two parallel
  // branches (as SGLang overlaps DeepSeek's shared experts on an alternate stream in decode
  // graphs). The side branches: the MoE layers' shared experts (their dense MLP, with the
  // router, routing and routed experts on the main stream; not with fused_moe_shared), the
  // MLA q projection (q_a, its norm and q_b, or q; kv_a on the main stream) and, in decode-only
  // passes, absorbed MLA's q absorption (q_nope x W_UK per head; the kv-latent norm, RoPE and
  // cache write on the main stream). A batch-1 step is a chain of small latency-bound
  // launches; two chains side by side hide part of it. Measured (session 7 run 2, graphs on,
  // shared experts and q projection only): V3 8 layers batch 1 x 1K decode step 2.495 / 2.506
  // ms vs 2.591 off; V2-Lite 27 layers 3.015 / 3.011 vs 3.269; bit-identical
  // (CudaRunnerDecodeStreams.*). Each
  // branch has its own GEMM scratch (bf16 splits, split-K workspace and counters, FP8 GEMV
  // workspaces, cuBLASLt workspace), so no buffer is shared while they overlap. Eager passes
  // run the same side work in order on the one stream (with the side scratch): same kernels,
  // same buffers, so graph replays and eager passes give the same bits, as without it.
  // The CLI reads DS_DECODE_STREAMS=0 to turn it off.
  bool decode_streams = true;
  // With decode_streams: the main stream at the device's highest stream priority and the side
  // stream at the default (lowest), and decode graphs instantiated with
  // cudaGraphInstantiateFlagUseNodePriority (kernel nodes keep their capture stream's priority),
  // so that the block scheduler dispatches the main chain's pending blocks (the critical path:
  // router, routing, routed experts) before the side branch's (shared experts). Scheduling only:
  // same kernels, same bits (CudaRunnerStreamPriority.*). On by default since session 9 (run 4:
  // decode step -1.7% V2-Lite batch 1, -1.2% V3 batch 1, -1.4% V2-Lite batch 8, level at V3 batch
  // 8). The CLI reads DS_DECODE_PRIORITY=0 to turn it off.
  bool decode_stream_priority = true;
  // MoE router logits of passes of at most kRouterGemvMaxRows = 16 tokens on RouterGemv
  // (router_gemv.h: one launch, fp32) instead of cuBLASLt's fp32 GEMM (a dot kernel and a
  // reduction at M = 1). Other fp32 summation order: logits move by ~1e-7 relative. Eager passes
  // and graph buckets agree on the path (buckets 1-16 <= 16 < 24). The CLI reads DS_ROUTER_GEMV=0
  // to turn it off.
  bool router_gemv = true;
  int device = 0;
};

StatusOr<std::unique_ptr<ModelRunner>> CreateCudaModelRunner(const CudaRunnerOptions& options);

// Decode-graph counters of a runner made by CreateCudaModelRunner (all zero for another runner):
// graphs captured, decode steps replayed from a graph, and padded decode steps run eagerly
// (the first step of each shape, or a shape whose capture failed).
// fused_launches: host-side launches of the small-batch decode fusions (fused_* options; one
// per fused kernel or fused copy issued in an eager pass or a capture, not per replay);
// fused_shared_layers: of those, MoE layers run with the shared experts as extra groups;
// fused_olat_layers: of those, absorbed-MLA layers whose decode attention wrote bf16 o_lat
// (fused_olat; each also counts one fused launch); fused_silu16_mlps: of those, dense MLPs
// and unstacked shared experts whose SiLU-and-mul wrote the down projection's bf16 input
// (fused_silu16; each also counts one fused launch); fused_kvrope_layers: of those, MLA
// layers whose kv-latent norm, q RoPE and k_pe RoPE + cache write ran as one kernel
// (fused_kvrope; each also counts one fused launch).
struct CudaGraphStats {
  int64_t captured = 0, replayed = 0, eager_padded = 0;
  int64_t queued = 0;  // of the replays, steps queued by Launch without waiting (overlap scheduling)
  int64_t lm_head_argmax = 0;  // LmHeadArgmax launches (lm_head_argmax; host-side: eager passes and captures)
  int64_t lm_head_norm = 0;  // of those, launches that computed the final norm (lm_head_norm)
  int64_t graph_argmax = 0;  // graph steps (replays, and a shape's eager first pass) whose ids came from the graph's argmax (graph_io)
  int64_t fused_launches = 0, fused_shared_layers = 0, fused_olat_layers = 0, fused_silu16_mlps = 0;
  int64_t fused_kvrope_layers = 0;
  int64_t fused_uv_layers = 0;    // MLA layers whose decode merge applied W_UV (fused_uv)
  int64_t q_absorb_layers = 0;    // MLA absorptions run as one MlaQAbsorb launch (fused_q_absorb; also a fused launch)
  int64_t attn_persistent_layers = 0;  // MLA layers run as one MlaAttnPersistent launch (attn_persistent; likewise)
  int64_t attn_absorb_overlap_layers = 0;  // of those, with attn_absorb_overlap (host-side launches)
  int64_t attn_split_counter_layers = 0;   // of those, with attn_split_counter (likewise)
  int64_t attn_merge_cols_layers = 0;      // of those, with head_ready set (attn_merge_cols_min_splits > 0)
  int64_t attn_l2_fetch_layers = 0;        // attention launches with an L2 fetch size (attn_l2_fetch, not PDL; likewise)
  int64_t moe_l2_fetch_layers = 0;         // MoE launches with an L2 fetch size (moe_l2_fetch, not PDL; likewise)
  int64_t moe_shared_first_layers = 0;     // persistent MoE / dense layers with persistent_moe_shared_first (likewise)
  int64_t moe_specialized_layers = 0;      // persistent MoE launches on its specialised instantiation, or MoeRing (likewise)
  int64_t moe_router_tagged_layers = 0;    // of those, with the tagged router logits (moe_router_tagged; MoeRing too)
  int64_t moe_ring_layers = 0;             // MoE layers run by MoeRing instead (moe_ring; likewise)
  int64_t moe_ring_act_tagged_layers = 0;  // of those, with act by tagged words (moe_ring_act_tagged)
  int64_t moe_ring_dense_layers = 0;       // dense layers run by MoeRing's dense form (moe_ring_dense)
  int64_t attn_specialized_layers = 0;     // persistent attention launches on its specialised instantiation (likewise)
  int64_t attn_wo_stage_early_layers = 0;  // persistent attention launches with attn_wo_stage_point 3 to 6 (likewise)
  int64_t fp8_gemv_launches = 0;  // host-side Fp8Gemv launches (fp8_gemv; eager passes and captures)
  int64_t fp8_skinny_sm90_launches = 0;  // W8A8 projections on Fp8SkinnyGemmSm90 (fp8_skinny_sm90)
  int64_t fp8_gemv_expert_launches = 0;  // host-side Fp8GemvGrouped launches (fp8_gemv_experts; likewise)
  int64_t bf16_gemv_expert_launches = 0;  // the same with bf16 weights (gemv_experts_bf16; likewise)
  int64_t side_branches = 0;      // side branches forked onto the second stream in captures (decode_streams)
  int64_t router_route_layers = 0;  // MoE layers routed by MoeRouterRoute (fused_router_route; also a fused launch)
  int64_t router_route_fast_layers = 0;  // of those, routed by its fast one-token form (router_route_fast)
  int64_t oproj_norm_layers = 0;    // MLA layers whose o_proj ran the post-attention norm (fused_oproj_norm; likewise)
  int64_t down_combine_layers = 0;  // MoE layers whose down GEMM ran the combine + norm (fused_down_combine; likewise)
  int64_t combine_norm_split_layers = 0;  // MoE layers whose MoeCombineNorm ran split over blocks (combine_norm_split)
  int64_t norm_split_launches = 0;  // residual-form RmsNorms run as split MoeCombineNorm launches (combine_norm_split)
  int64_t mla_uv_preload_layers = 0;  // fused_uv layers whose W_UV merge kernel preloaded its rows (mla_uv_preload)
  int64_t mla_q_bf16_layers = 0;  // MLA decode layers whose sm_90a kernel read a bf16 q_lat (mla_decode_q_bf16)
  int64_t gate_up_silu_layers = 0;  // MoE layers whose gate_up GEMM ran SiLU-and-mul (fused_gate_up_silu; likewise)
  int64_t persistent_moe_layers = 0;  // MoE layers run by the persistent kernel (persistent_moe; likewise)
  int64_t moe_gu_ksplit_layers = 0;    // persistent MoE layers with gu_ksplit > 1 (likewise)
  int64_t persistent_carveout_launches = 0;  // persistent kernels launched with a carveout preference (persistent_carveout >= 0)
  int64_t persistent_pdl_launches = 0;  // persistent kernels launched with PDL (persistent_pdl; the device took it)
  int64_t persistent_dense_layers = 0;  // dense layers run by the persistent kernel (persistent_dense_mlp)
  int64_t moe_norm_skipped_layers = 0;  // MoE kernels that left the next norm to the attention (norm_in_attn)
  int64_t norm_in_attn_layers = 0;  // attention kernels that applied their input norm (norm_in_attn)
};
CudaGraphStats GetCudaGraphStats(const ModelRunner& runner);

}  // namespace ds::cuda
