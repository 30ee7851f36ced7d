#include "model/mla.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/ops.h"
#include "common/check.h"
#include "model/weights.h"

namespace ds {

const char* MlaModeName(MlaMode m) {
  switch (m) {
    case MlaMode::kAuto: return "auto";
    case MlaMode::kNaive: return "naive";
    case MlaMode::kAbsorbed: return "absorbed";
  }
  return "?";
}

bool ParseMlaMode(const std::string& s, MlaMode* out) {
  if (s == "auto") *out = MlaMode::kAuto;
  else if (s == "naive") *out = MlaMode::kNaive;
  else if (s == "absorbed") *out = MlaMode::kAbsorbed;
  else return false;
  return true;
}

RopeTables BuildRopeTables(const ModelConfig& cfg, int64_t max_pos) {
  RopeTables t;
  t.max_pos = max_pos;
  t.rope_dim = cfg.qk_rope_head_dim;
  t.cos.resize(max_pos * t.rope_dim / 2);
  t.sin.resize(max_pos * t.rope_dim / 2);
  cpu::RopeTableParams p{};
  p.rope_dim = t.rope_dim;
  p.max_pos = max_pos;
  p.theta = cfg.rope.theta;
  p.yarn = cfg.rope.type == "yarn";
  p.factor = cfg.rope.factor;
  p.beta_fast = cfg.rope.beta_fast;
  p.beta_slow = cfg.rope.beta_slow;
  p.mscale = cfg.rope.mscale;
  p.mscale_all_dim = cfg.rope.mscale_all_dim;
  p.original_max_pos = cfg.rope.original_max_position_embeddings;
  p.truncate = cfg.rope.truncate;
  p.cos = t.cos.data();
  p.sin = t.sin.data();
  cpu::ComputeRopeTables(p);
  return t;
}

Status LoadMla(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& prefix,
               MlaWeights* w) {
  const int64_t Hd = cfg.hidden_size, H = cfg.num_attention_heads, dqk = cfg.qk_head_dim();
  const int64_t nope = cfg.qk_nope_head_dim, vd = cfg.v_head_dim, kvl = cfg.kv_lora_rank;
  const int64_t rope = cfg.qk_rope_head_dim, ql = cfg.q_lora_rank;
  const auto b = cfg.quant.weight_block_size;
  if (ql > 0) {
    DS_ASSIGN_OR_RETURN(w->q_a_proj, LoadTensorF32(ckpt, prefix + ".q_a_proj.weight", {ql, Hd}, b));
    DS_ASSIGN_OR_RETURN(w->q_a_norm, LoadTensorF32(ckpt, prefix + ".q_a_layernorm.weight", {ql}, b));
    DS_ASSIGN_OR_RETURN(w->q_b_proj, LoadTensorF32(ckpt, prefix + ".q_b_proj.weight", {H * dqk, ql}, b));
  } else {
    DS_ASSIGN_OR_RETURN(w->q_proj, LoadTensorF32(ckpt, prefix + ".q_proj.weight", {H * dqk, Hd}, b));
  }
  DS_ASSIGN_OR_RETURN(w->kv_a_proj,
                      LoadTensorF32(ckpt, prefix + ".kv_a_proj_with_mqa.weight", {kvl + rope, Hd}, b));
  DS_ASSIGN_OR_RETURN(w->kv_a_norm, LoadTensorF32(ckpt, prefix + ".kv_a_layernorm.weight", {kvl}, b));
  DS_ASSIGN_OR_RETURN(w->kv_b_proj,
                      LoadTensorF32(ckpt, prefix + ".kv_b_proj.weight", {H * (nope + vd), kvl}, b));
  DS_ASSIGN_OR_RETURN(w->o_proj, LoadTensorF32(ckpt, prefix + ".o_proj.weight", {Hd, H * vd}, b));
  // W_UK_h^T: w_uk_t[h][c][d] = kv_b_proj[h * (nope + v) + d][c]
  w->w_uk_t.resize(H * kvl * nope);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < nope; ++d)
      for (int64_t c = 0; c < kvl; ++c)
        w->w_uk_t[(h * kvl + c) * nope + d] = w->kv_b_proj[(h * (nope + vd) + d) * kvl + c];
  return Status::Ok();
}

namespace {

constexpr float kLatentNormEps = 1e-6f;  // q_a_layernorm / kv_a_layernorm: transformers default eps

// Cache row of (sequence s, position pos).
float* CacheRow(float* cache, const ForwardBatch& b, int64_t s, int64_t pos, int64_t L) {
  const int32_t block = b.block_tables[s * b.max_blocks + pos / kBlockSize];
  return cache + (static_cast<int64_t>(block) * kBlockSize + pos % kBlockSize) * L;
}

}  // namespace

void MlaForward(const ModelConfig& cfg, const MlaWeights& w, const RopeTables& rope,
                const ForwardBatch& b, MlaMode mode, float* cache, const float* x, float* out) {
  const int64_t T = b.num_tokens(), S = b.num_seqs();
  const int64_t Hd = cfg.hidden_size, H = cfg.num_attention_heads;
  const int64_t nope = cfg.qk_nope_head_dim, rd = cfg.qk_rope_head_dim, dqk = nope + rd;
  const int64_t vd = cfg.v_head_dim, kvl = cfg.kv_lora_rank, L = kvl + rd, ql = cfg.q_lora_rank;
  const float scale = static_cast<float>(cfg.softmax_scale());
  if (T == 0) return;

  // q: [T, H, dqk] = [T, H * (nope + rope)]
  std::vector<float> q(T * H * dqk);
  if (ql > 0) {
    std::vector<float> c_q(T * ql);  // c_q: [T, q_lora]
    cpu::Gemm({x, Hd, w.q_a_proj.data(), Hd, c_q.data(), ql, T, ql, Hd, false});
    cpu::RmsNorm({c_q.data(), ql, nullptr, 0, w.q_a_norm.data(), c_q.data(), ql, T, ql, kLatentNormEps});
    cpu::Gemm({c_q.data(), ql, w.q_b_proj.data(), ql, q.data(), H * dqk, T, H * dqk, ql, false});
  } else {
    cpu::Gemm({x, Hd, w.q_proj.data(), Hd, q.data(), H * dqk, T, H * dqk, Hd, false});
  }
  // latent: [T, kv_lora + rope] = [c_kv | k_pe]
  std::vector<float> latent(T * L);
  cpu::Gemm({x, Hd, w.kv_a_proj.data(), Hd, latent.data(), L, T, L, Hd, false});
  cpu::RmsNorm({latent.data(), L, nullptr, 0, w.kv_a_norm.data(), latent.data(), L, T, kvl, kLatentNormEps});

  // RoPE on q_pe (every head) and k_pe (one shared head). DeepSeek checkpoints store the rope
  // channels as interleaved pairs (V3 rope_interleave; V2's complex rotation is the same
  // pairing), so both rotate pairs (2i, 2i+1); the output layout is de-interleaved for both
  // q and k, which leaves every q.k dot product unchanged.
  const bool interleave = cfg.model_type == "deepseek_v2" ? true : cfg.rope_interleave;
  cpu::ApplyRope({q.data(), T, H, H * dqk, dqk, nope, rd, b.positions.data(), rope.cos.data(),
                  rope.sin.data(), rope.max_pos, interleave});
  cpu::ApplyRope({latent.data(), T, 1, L, L, kvl, rd, b.positions.data(), rope.cos.data(),
                  rope.sin.data(), rope.max_pos, interleave});

  // Write the new latent rows into the paged cache.
  for (int64_t s = 0; s < S; ++s)
    for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t)
      std::memcpy(CacheRow(cache, b, s, b.positions[t], L), latent.data() + t * L, sizeof(float) * L);

  // attn: [T, H, v] per-head attention outputs (before o_proj)
  std::vector<float> attn(T * H * vd);
  std::vector<int64_t> absorbed_seqs;
  for (int64_t s = 0; s < S; ++s) {
    const int32_t q0 = b.query_start[s], n_new = b.query_start[s + 1] - q0;
    if (n_new == 0) continue;
    const bool naive = mode == MlaMode::kNaive || (mode == MlaMode::kAuto && n_new > 1);
    if (!naive) {
      absorbed_seqs.push_back(s);
      continue;
    }
    // Naive: decompress every cached latent row of this sequence.
    const int64_t ctx = b.context_lens[s];
    std::vector<float> lat(ctx * L);  // lat: [ctx, kv_lora + rope]
    for (int64_t j = 0; j < ctx; ++j)
      std::memcpy(lat.data() + j * L, CacheRow(cache, b, s, j, L), sizeof(float) * L);
    std::vector<float> kv(ctx * H * (nope + vd));  // kv: [ctx, H, nope + v] = c_kv W_UKV^T
    cpu::Gemm({lat.data(), L, w.kv_b_proj.data(), kvl, kv.data(), H * (nope + vd), ctx, H * (nope + vd),
               kvl, false});
    std::vector<float> k(ctx * H * dqk), v(ctx * H * vd);  // k: [ctx, H, dqk], v: [ctx, H, v]
    for (int64_t j = 0; j < ctx; ++j)
      for (int64_t h = 0; h < H; ++h) {
        const float* src = kv.data() + (j * H + h) * (nope + vd);
        float* kd = k.data() + (j * H + h) * dqk;
        std::copy(src, src + nope, kd);
        std::copy(lat.data() + j * L + kvl, lat.data() + (j + 1) * L, kd + nope);
        std::copy(src + nope, src + nope + vd, v.data() + (j * H + h) * vd);
      }
    cpu::MlaPrefillAttention({q.data() + q0 * H * dqk, k.data(), v.data(), attn.data() + q0 * H * vd,
                              n_new, ctx, H, dqk, vd, ctx - n_new, scale});
  }

  if (!absorbed_seqs.empty()) {
    // Sub-batch of the absorbed sequences, tokens gathered contiguously.
    const int64_t Sa = static_cast<int64_t>(absorbed_seqs.size());
    std::vector<int32_t> qs(Sa + 1, 0), ctx(Sa), table(Sa * b.max_blocks), tok;
    for (int64_t i = 0; i < Sa; ++i) {
      const int64_t s = absorbed_seqs[i];
      for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t) tok.push_back(t);
      qs[i + 1] = static_cast<int32_t>(tok.size());
      ctx[i] = b.context_lens[s];
      std::copy(b.block_tables.begin() + s * b.max_blocks, b.block_tables.begin() + (s + 1) * b.max_blocks,
                table.begin() + i * b.max_blocks);
    }
    const int64_t Ta = static_cast<int64_t>(tok.size());
    std::vector<float> qa(Ta * H * dqk);  // qa: [Ta, H, dqk] gathered queries
    for (int64_t i = 0; i < Ta; ++i)
      std::copy(q.begin() + tok[i] * H * dqk, q.begin() + (tok[i] + 1) * H * dqk, qa.begin() + i * H * dqk);
    // q_lat: [Ta, H, kv_lora + rope] = [q_nope W_UK_h^T | q_pe]
    std::vector<float> q_lat(Ta * H * L);
    for (int64_t h = 0; h < H; ++h) {
      cpu::Gemm({qa.data() + h * dqk, H * dqk, w.w_uk_t.data() + h * kvl * nope, nope,
                 q_lat.data() + h * L, H * L, Ta, kvl, nope, false});
      for (int64_t i = 0; i < Ta; ++i)
        std::copy(qa.begin() + (i * H + h) * dqk + nope, qa.begin() + (i * H + h + 1) * dqk,
                  q_lat.begin() + (i * H + h) * L + kvl);
    }
    std::vector<float> o_lat(Ta * H * kvl);  // o_lat: [Ta, H, kv_lora]
    cpu::MlaDecodeAttention({q_lat.data(), cache, o_lat.data(), Sa, H, kvl, rd, kBlockSize, qs.data(),
                             ctx.data(), table.data(), b.max_blocks, scale});
    // o_h = o_lat_h W_UV_h^T: ov [Ta, H, v]
    std::vector<float> ov(Ta * H * vd);
    for (int64_t h = 0; h < H; ++h)
      cpu::Gemm({o_lat.data() + h * kvl, H * kvl, w.kv_b_proj.data() + (h * (nope + vd) + nope) * kvl, kvl,
                 ov.data() + h * vd, H * vd, Ta, vd, kvl, false});
    for (int64_t i = 0; i < Ta; ++i)
      std::copy(ov.begin() + i * H * vd, ov.begin() + (i + 1) * H * vd, attn.begin() + tok[i] * H * vd);
  }

  cpu::Gemm({attn.data(), H * vd, w.o_proj.data(), H * vd, out, Hd, T, Hd, H * vd, false});
}

}  // namespace ds
