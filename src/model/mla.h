// Multi-head Latent Attention (DeepSeek-V2 paper section 2.1), in both forms:
//
//   c_q   = RMSNorm(x W_DQ)            (q_lora_rank > 0; else q = x W_Q)     [T, q_lora]
//   q     = c_q W_UQ  -> per head [q_nope (nope) | q_pe (rope)]               [T, H, dqk]
//   [c_kv | k_pe] = x W_DKV;  c_kv = RMSNorm(c_kv)                             [T, kv_lora + rope]
//   RoPE on q_pe (per head) and on k_pe (shared by all heads)
//   latent cache row = [c_kv | k_pe]                                           [kv_lora + rope]
//
// Naive form (prefill): decompress every cached latent row with kv_b_proj (W_UKV):
//   k_nope_h = c_kv W_UK_h, v_h = c_kv W_UV_h, k_h = [k_nope_h | k_pe];
//   o_h = softmax(scale * q_h k_h^T) v_h.
// Absorbed form (decode): fold W_UK into the query, attend over the latent rows directly:
//   q_lat_h = [q_nope_h W_UK_h^T | q_pe_h]   (kv_lora + rope)
//   s_hj = scale * q_lat_h . [c_kv_j | k_pe_j]  (= scale * q_h . k_hj exactly)
//   o_h = (sum_j softmax(s)_hj c_kv_j) W_UV_h^T.
// Both forms read the keys/values of every position from the paged latent cache, so a prefill
// chunk that extends a cached prefix (chunked prefill) works in either form.
// softmax scale = qk_head_dim^-0.5 * mscale_all_dim^2 (ModelConfig::softmax_scale, transformers
// yarn_apply_mscale); RoPE cos/sin carry YaRN's attention factor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "runtime/model_runner.h"

namespace ds {

// kAuto: naive for sequences with more than one new token (prefill chunks), absorbed for
// single-token decode steps. kNaive / kAbsorbed force one form for every sequence.
enum class MlaMode { kAuto, kNaive, kAbsorbed };
const char* MlaModeName(MlaMode m);
bool ParseMlaMode(const std::string& s, MlaMode* out);

// cos/sin tables [max_pos, rope_dim / 2] (YaRN attention factor folded in).
struct RopeTables {
  int64_t max_pos = 0, rope_dim = 0;
  std::vector<float> cos, sin;
};
RopeTables BuildRopeTables(const ModelConfig& cfg, int64_t max_pos);

struct MlaWeights {
  std::vector<float> q_a_proj;   // [q_lora, hidden]           (q_lora_rank > 0)
  std::vector<float> q_a_norm;   // [q_lora]
  std::vector<float> q_b_proj;   // [H * dqk, q_lora]
  std::vector<float> q_proj;     // [H * dqk, hidden]          (q_lora_rank == 0)
  std::vector<float> kv_a_proj;  // [kv_lora + rope, hidden]   (kv_a_proj_with_mqa)
  std::vector<float> kv_a_norm;  // [kv_lora]
  std::vector<float> kv_b_proj;  // [H * (nope + v), kv_lora]  per head: W_UK_h rows, W_UV_h rows
  std::vector<float> o_proj;     // [hidden, H * v]
  std::vector<float> w_uk_t;     // [H, kv_lora, nope]: W_UK_h^T, for the absorbed query
};

// Loads <prefix>.{q_a_proj,q_a_layernorm,q_b_proj | q_proj, kv_a_proj_with_mqa,
// kv_a_layernorm, kv_b_proj, o_proj}.weight.
Status LoadMla(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
               MlaWeights* w);

// One MLA layer over a flat batch. x: [T, hidden] (already input_layernorm'ed); writes the
// new tokens' latent rows into `cache` ([num_blocks, kBlockSize, kv_lora + rope] of this layer)
// and out: [T, hidden] (o_proj output, overwritten).
void MlaForward(const ModelConfig& cfg, const MlaWeights& w, const RopeTables& rope,
                const ForwardBatch& batch, MlaMode mode, float* cache, const float* x, float* out);

}  // namespace ds
