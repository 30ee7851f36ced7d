// CPU reference ops (fp32 compute). These are the semantics every CUDA op must match
// (tests/cuda op-equivalence). Each op takes a plain params struct of pointers, sizes and
// strides; no engine types. All tensors are row-major; a "[a, b]" comment gives the shape.
// One op per .cpp file in src/backend/cpu/.
#pragma once

#include <cstdint>

namespace ds::cpu {

// ---- GEMM -------------------------------------------------------------------------------
// y[M, N] = x[M, K] @ w[N, K]^T (torch Linear layout: weight is [out, in]); y may be
// accumulated into when `accumulate` (y += ...). Through BLAS (OpenBLAS sgemm).
struct GemmParams {
  const float* x; int64_t ldx;  // [M, K]
  const float* w; int64_t ldw;  // [N, K]
  float* y; int64_t ldy;        // [M, N]
  int64_t M, N, K;
  bool accumulate = false;
};
void Gemm(const GemmParams& p);

// ---- RMSNorm ----------------------------------------------------------------------------
// If residual != nullptr: residual[i] += x[i] first (in place), then out = norm(residual).
// out = x / sqrt(mean(x^2) + eps) * weight. out may alias x.
struct RmsNormParams {
  const float* x; int64_t ldx;        // [n, d]
  float* residual; int64_t ldres;     // [n, d] or nullptr
  const float* weight;                // [d]
  float* out; int64_t ldout;          // [n, d]
  int64_t n, d;
  float eps;
};
void RmsNorm(const RmsNormParams& p);

// ---- RoPE -------------------------------------------------------------------------------
// Rotates the `rope_dim` channels starting at x + offset of each head, in place.
// cos/sin tables: [max_pos, rope_dim / 2] (already multiplied by YaRN's attention factor).
// interleave=true: the checkpoint stores pairs interleaved (x0,x1),(x2,x3)...; as
// transformers' apply_rotary_pos_emb_interleave the output is written de-interleaved
// (first half = rotated evens, second half = rotated odds). interleave=false: rotate_half
// (pairs (i, i + rope_dim/2)).
struct RopeParams {
  float* x;                 // [n, heads, ...]
  int64_t n, heads;
  int64_t token_stride;     // elements between tokens
  int64_t head_stride;      // elements between heads
  int64_t offset;           // first rope channel within a head
  int64_t rope_dim;
  const int32_t* positions; // [n]
  const float* cos; const float* sin;  // [max_pos, rope_dim/2]
  int64_t max_pos;
  bool interleave;
};
void ApplyRope(const RopeParams& p);

// YaRN / default RoPE tables, exactly as transformers' _compute_yarn_parameters and the
// DeepSeek-V3 reference: inv_freq blended between interpolation and extrapolation with a
// linear ramp over [low, high] from beta_fast/beta_slow; cos/sin scaled by attention_factor
// (= get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)).
struct RopeTableParams {
  int64_t rope_dim;
  int64_t max_pos;
  double theta;
  bool yarn;
  double factor, beta_fast, beta_slow, mscale, mscale_all_dim;
  int64_t original_max_pos;
  bool truncate;
  float* cos; float* sin;  // out: [max_pos, rope_dim / 2]
};
void ComputeRopeTables(const RopeTableParams& p);

// ---- Activations ------------------------------------------------------------------------
// out[n, I] = silu(gate_up[:, :I]) * gate_up[:, I:2I]
struct SiluAndMulParams {
  const float* gate_up; int64_t ld_in;  // [n, 2I]
  float* out; int64_t ld_out;           // [n, I]
  int64_t n, inter;
};
void SiluAndMul(const SiluAndMulParams& p);

// ---- Embedding --------------------------------------------------------------------------
struct EmbeddingParams {
  const int32_t* ids; int64_t n;  // [n]
  const float* table; int64_t vocab, d;  // [vocab, d]
  float* out;  // [n, d]
};
void Embedding(const EmbeddingParams& p);

// ---- MoE routing ------------------------------------------------------------------------
// scores = softmax(logits) or sigmoid(logits). Selection uses scores + bias (bias may be
// nullptr; noaux_tc's e_score_correction_bias); weights are the *unbiased* scores of the
// selected experts, renormalised when norm_topk_prob, then times routed_scaling_factor.
// topk_method: 0 greedy, 1 group_limited_greedy (group score = max), 2 noaux_tc (group
// score = sum of top-2 biased scores). Source: transformers DeepseekV2Moe / DeepseekV3TopkRouter.
struct MoeRoutingParams {
  const float* logits;  // [n, E]
  const float* bias;    // [E] or nullptr
  int64_t n, num_experts;
  int top_k, n_group, topk_group;
  int scoring;          // 0 softmax, 1 sigmoid
  int topk_method;      // 0 greedy, 1 group_limited_greedy, 2 noaux_tc
  bool norm_topk_prob;
  float routed_scaling_factor;
  int32_t* topk_ids;    // out [n, top_k]
  float* topk_weights;  // out [n, top_k]
};
void MoeRouting(const MoeRoutingParams& p);

// ---- MLA attention ----------------------------------------------------------------------
// Naive (prefill) form over decompressed K/V for one sequence:
// q [nq, H, dqk], k [nk, H, dqk], v [nk, H, dv]; query i sits at position q_pos0 + i and
// attends keys 0..q_pos0+i (causal, keys start at position 0). out [nq, H, dv].
struct MlaPrefillParams {
  const float* q; const float* k; const float* v;
  float* out;
  int64_t nq, nk, heads, dqk, dv;
  int64_t q_pos0;
  float softmax_scale;
};
void MlaPrefillAttention(const MlaPrefillParams& p);

// Absorbed (decode) form straight over the paged latent cache, for a batch of sequences:
// q [T, H, kv_lora + rope] (q_nope already multiplied by W_UK), cache
// [num_blocks, block_size, kv_lora + rope] (one layer); keys are the whole latent row,
// values its first kv_lora channels. Sequence s has query tokens query_start[s]..
// query_start[s+1]-1, the last of which sits at position context_lens[s]-1 (causal inside
// the query block: MTP verification). out [T, H, kv_lora].
struct MlaDecodeParams {
  const float* q;
  const float* cache;
  float* out;
  int64_t num_seqs, heads, kv_lora, rope_dim, block_size;
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_table;   // [num_seqs, max_blocks]
  int64_t max_blocks;
  float softmax_scale;
};
void MlaDecodeAttention(const MlaDecodeParams& p);

// ---- FP8 --------------------------------------------------------------------------------
// Per-token-group (1 x group) dynamic quantisation, as DeepSeek-V3's act_quant:
// scale = max|x| / 448 over each group (a zero group gets scale 1e-10 / 448 guard -> codes 0),
// q = e4m3(x / scale).
struct Fp8QuantParams {
  const float* x; int64_t n, k;  // [n, k]
  int64_t group;                 // 128
  uint8_t* q;                    // out [n, k]
  float* scales;                 // out [n, ceil(k / group)]
};
void Fp8QuantizePerTokenGroup(const Fp8QuantParams& p);

// ---- Sampling ---------------------------------------------------------------------------
// temperature 0 -> argmax (lowest index on ties). Else softmax(logits / T), keep top_k
// (0 = all), keep the smallest prefix of the sorted distribution whose mass >= top_p,
// renormalise and draw with a counter-based RNG from (seed, step): the same seed and step
// give the same token on every backend. RNG: u = (SplitMix64(seed ^ SplitMix64(step)) >> 11)
// * 2^-53 (ds::SampleUniform in common/rng.h); the token is the first in descending-probability
// order (ties: lower id first) whose cumulative kept mass exceeds u * kept_mass.
struct SampleParams {
  const float* logits; int64_t vocab;
  float temperature; float top_p; int top_k;
  uint64_t seed; uint64_t step;
};
int32_t Sample(const SampleParams& p);
// The greedy choice of Sample (temperature <= 0): the argmax of logits [vocab], lowest id on
// ties; NaN never wins; a row of only NaN gives 0 (the CUDA argmax applies the same rule).
int32_t GreedyArgmax(const float* logits, int64_t vocab);

}  // namespace ds::cpu
