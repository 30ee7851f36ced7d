// The CUDA model runner's MLA attention layer (CudaModelRunner::Mla; the class is in
// cuda_runner_impl.h, the rest of it in cuda_runner.cpp): q / kv projections, the latent norm,
// RoPE and paged cache write, naive (prefill) or absorbed (decode) attention, o_proj.
#include <cuda_bf16.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_runner_impl.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/mla_attn_persistent.h"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/mla_kv_rope_fused.h"
#include "backend/cuda/mla_prefill.h"
#include "backend/cuda/mla_q_absorb.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/runner_kernels.h"
#include "common/check.h"
#include "common/logging.h"

namespace ds::cuda::runner_impl {

// mla_decode_sm90_small_variant: decode passes of up to this many sequences.
constexpr int64_t kMlaSm90SmallVariantSeqs = 8;

// Absorbed-MLA decode: the tensor-core warp-split kernel only above this many keys of total
// context in the batch (see Mla).
constexpr int64_t kWarpSplitMinTotalContext = 32 * 1024;
// CudaRunnerOptions::mla_decode_small_batch_chunk applies to passes of at most this many
// absorbed tokens, while the split workspace it needs stays within this many bytes (the graph
// buckets 1-8 are graph-stable: eager and graph passes of a batch decide alike).
constexpr int64_t kMlaSmallBatchTokens = 8;
constexpr int64_t kMlaSmallBatchWorkspaceBytes = int64_t{256} << 20;

bool CudaModelRunner::AttnPersistentPassOk(const ForwardBatch& b, int64_t T) const {
  const int64_t H = cfg_.num_attention_heads;
  // (The decode debug modes, tensor cores off or their emulation, keep the unfused path.)
  if (!opts_.attn_persistent || T != 1 || b.num_seqs() != 1 || b.query_start[1] - b.query_start[0] != 1 ||
      !FusedDecode(T) || !opts_.fused_norm || opts_.precise_activations || opts_.mla_mode == MlaMode::kNaive ||
      !opts_.mla_decode_tensor_cores || opts_.mla_decode_emulate_tc != 0)
    return false;
  if (cfg_.q_lora_rank > 0 || cfg_.qk_nope_head_dim != 128 || cfg_.qk_rope_head_dim != 64 || cfg_.v_head_dim != 128 ||
      cfg_.kv_lora_rank != 512 || kBlockSize != 64 || H < 2 || H > 16 || H % 2 != 0 || cfg_.hidden_size % 256 != 0 ||
      cfg_.hidden_size > 8192)
    return false;
  return AttnPersistentMaxContext(b) <= kMlaAttnPersistentMaxContext;
}

int64_t CudaModelRunner::AttnPersistentMaxContext(const ForwardBatch& b) const {
  // The keys the workspace must hold: the graph's block-table capacity, or this sequence's pages.
  return gin_ ? int64_t{gin_->cap_blocks} * kBlockSize
              : (int64_t{b.context_lens[0]} + kBlockSize - 1) / kBlockSize * kBlockSize;
}

bool CudaModelRunner::AttnPersistentLayerOk(int l, bool in_residual) const {
  const MlaW& w = layers_[l].attn;
  if (w.q.fp8 || w.kv_a.fp8 || w.o.fp8 || !w.q.w.get() || !w.kv_a.w.get() || !w.o.w.get()) return false;
  return attn_ok_[in_residual ? 1 : 0] != 0;
}

bool CudaModelRunner::AttnPersistent(int l, const ForwardBatch& b, int64_t T) {
  const MlaW& w = layers_[l].attn;
  const int64_t H = cfg_.num_attention_heads;
  // (attn_pass_ok_: RunPass asked AttnPersistentPassOk for this pass.)
  if (!attn_pass_ok_ || !AttnPersistentLayerOk(l, attn_norm_pending_)) return false;
  const int64_t max_ctx = AttnPersistentMaxContext(b);
  const int64_t Tr = RoundUp(T, 64) + 64;
  // The sequence's block table and context (device): the graph's inputs, or uploaded here.
  const int32_t *d_bt = nullptr, *d_ctx = nullptr;
  if (gin_) {
    d_bt = gin_->bt.as<int32_t>();
    d_ctx = gin_->ctx.as<int32_t>();
  } else {
    const int64_t pages = max_ctx / kBlockSize;
    DS_CHECK(pages <= b.max_blocks) << "attn_persistent: " << pages << " pages past the block table's " << b.max_blocks;
    dec_ctx_.Reserve(4);
    dec_bt_.Reserve(pages * 4);
    DS_CUDA_CHECK(cudaMemcpyAsync(dec_ctx_.get(), b.context_lens.data(), 4, cudaMemcpyHostToDevice, s_));
    DS_CUDA_CHECK(cudaMemcpyAsync(dec_bt_.get(), b.block_tables.data(), pages * 4, cudaMemcpyHostToDevice, s_));
    d_bt = dec_bt_.as<int32_t>();
    d_ctx = dec_ctx_.as<int32_t>();
  }
  q32_.Reserve(Tr * H * 192 * sizeof(float));
  lat32_.Reserve(Tr * 576 * sizeof(float));
  attn_qlat16_.Reserve(H * 512 * sizeof(bf16));
  dec_ws_.Reserve(MlaAttnPersistentWorkspaceFloats(H, max_ctx) * sizeof(float));
  ov16_.Reserve(Tr * H * 128 * sizeof(bf16));
  MlaAttnPersistentParams ap{};
  ap.x16 = h16_.as<bf16>(); ap.hidden = cfg_.hidden_size; ap.heads = H;
  if (attn_norm_pending_) {  // norm_in_attn: the previous MoE kernel left this layer's input norm to this one
    ap.x16 = nullptr;
    ap.in_residual = residual_.as<float>();
    ap.in_norm_w = layers_[l].in_norm.as<float>();
    ap.in_eps = static_cast<float>(cfg_.rms_norm_eps);
  }
  ap.wq = w.q.w.as<bf16>(); ap.wkva = w.kv_a.w.as<bf16>(); ap.kva_norm_w = w.kv_a_norm.as<float>(); ap.eps = kLatentNormEps;
  ap.w_uk_t = w.w_uk_t.as<bf16>(); ap.kv_b = w.kv_b.as<bf16>(); ap.wo = w.o.w.as<bf16>();
  ap.position = d_pos_; ap.cos = d_cos_.as<float>(); ap.sin = d_sin_.as<float>(); ap.max_pos = rope_.max_pos;
  ap.interleave = cfg_.model_type == "deepseek_v2" ? true : cfg_.rope_interleave;
  ap.cache = cache_[l].as<bf16>(); ap.slot = d_slots_; ap.block_table = d_bt; ap.context_len = d_ctx;
  ap.block_size = kBlockSize; ap.softmax_scale = static_cast<float>(cfg_.softmax_scale()); ap.max_context = max_ctx;
  ap.q32 = q32_.as<float>(); ap.kva32 = lat32_.as<float>(); ap.qlat16 = attn_qlat16_.as<bf16>();
  ap.workspace = dec_ws_.as<float>(); ap.o16 = ov16_.as<bf16>(); ap.out = o32_.as<float>();
  ap.sync = attn_sync_.as<uint32_t>(); ap.stream = s_;
  if (opts_.attn_absorb_overlap) ap.nope_ready = attn_sync_.as<uint32_t>() + 2;
  if (opts_.attn_absorb_overlap && opts_.attn_split_counter) ap.split_ready = attn_sync_.as<uint32_t>() + 3;
  if (opts_.attn_merge_cols_min_splits > 0) {
    ap.head_ready = attn_sync_.as<uint32_t>() + 4;
    ap.merge_cols_min_splits = static_cast<int>(opts_.attn_merge_cols_min_splits);
  }
  ap.pdl = opts_.persistent_pdl;
  ap.l2_fetch = opts_.attn_l2_fetch;
  ap.wo_stage_point = opts_.attn_wo_stage_point;
  ap.specialize = opts_.attn_specialize;
  ap.carveout = opts_.persistent_carveout;
  // The kernel's verdict on these shapes does not change between passes (the dims above pass its
  // shape checks; what is left is the device's fit): asked once.
  int8_t& ok = attn_ok_[attn_norm_pending_ ? 1 : 0];
  if (ok < 0) ok = MlaAttnPersistentUnsupported(ap).empty() ? 1 : 0;
  if (ok == 0) return false;
  const bool went_pdl = MlaAttnPersistent(ap);
  if (attn_norm_pending_) ++graph_stats_.norm_in_attn_layers;
  if (went_pdl) ++graph_stats_.persistent_pdl_launches;
  ++graph_stats_.fused_launches;
  ++graph_stats_.attn_persistent_layers;
  if (ap.nope_ready != nullptr) ++graph_stats_.attn_absorb_overlap_layers;
  if (ap.split_ready != nullptr) ++graph_stats_.attn_split_counter_layers;
  if (ap.head_ready != nullptr) ++graph_stats_.attn_merge_cols_layers;
  if (ap.l2_fetch > 0 && !went_pdl) ++graph_stats_.attn_l2_fetch_layers;
  if (ap.wo_stage_point >= 3) ++graph_stats_.attn_wo_stage_early_layers;
  if (!went_pdl && MlaAttnPersistentSpecialized(ap)) ++graph_stats_.attn_specialized_layers;
  if (ap.carveout >= 0) ++graph_stats_.persistent_carveout_launches;
  post_norm_fused_ = false;  // o32_ holds o_proj's output; the post-attention norm is still to do
  Mark("attn_o_proj");
  return true;
}

void CudaModelRunner::Mla(int l, const ForwardBatch& b, int64_t T) {
  if (AttnPersistent(l, b, T)) return;
  const LayerW& LW = layers_[l];
  const MlaW& w = LW.attn;
  const int64_t H = cfg_.num_attention_heads, nope = cfg_.qk_nope_head_dim, rd = cfg_.qk_rope_head_dim;
  const int64_t dqk = nope + rd, vd = cfg_.v_head_dim, kvl = cfg_.kv_lora_rank, L = kvl + rd, ql = cfg_.q_lora_rank;
  const int64_t Tr = RoundUp(T, 64) + 64, S = b.num_seqs();
  const float scale = static_cast<float>(cfg_.softmax_scale());
  const bool interleave = cfg_.model_type == "deepseek_v2" ? true : cfg_.rope_interleave;
  const float* hn = h32_.as<float>();  // input_layernorm output [T, hidden] fp32
  // fused_norm: its bf16 copy [T, hidden], written by the norm itself
  const bf16* hn16 = opts_.fused_norm && FusedDecode(T) ? h16_.as<bf16>() : nullptr;
  // q: [T, H, dqk] fp32; latent: [T, kv_lora + rope] = [c_kv | k_pe] fp32 (c_kv normalised in
  // place below)
  q32_.Reserve(Tr * H * dqk * sizeof(float));
  if (ql > 0) cq32_.Reserve(Tr * ql * sizeof(float));
  lat32_.Reserve(Tr * L * sizeof(float));
  float* lat = lat32_.as<float>();
  // decode_streams: the q projection (reads hn / hn16, writes c_q and q) as a side branch beside
  // kv_a (reads the same, writes lat), joined before the RoPE reads both.
  const bool side_q = opts_.decode_streams && FusedDecode(T);
  if (side_q) BeginSide();
  if (ql > 0) {
    float* cq = cq32_.as<float>();  // c_q: [T, q_lora]
    LinearFwd(w.q_a, hn, cfg_.hidden_size, T, cq, ql, hn16);
    // fused_norm: the q_a norm also writes c_q's bf16 copy (cq16: [T, q_lora]), the rounding
    // LinearFwd's SplitBf16 would apply, so q_b reads it directly (one launch fewer: V3's
    // SplitKernel of 1,536, ~1.8 us on the q branch; session 29). Bit-identical (CudaRunnerFused).
    const bool cq_bf16 = hn16 != nullptr && LinearInputFor(w.q_b, T, H * dqk) == LinearInput::kBf16;
    RmsNormParams qn{cq, ql, nullptr, 0, w.q_a_norm.as<float>(), cq, ql, DTypeOut::kF32, T, ql, kLatentNormEps, s_,
                     opts_.pdl};
    if (cq_bf16) {
      cq16_.Reserve(Tr * ql * sizeof(bf16));
      qn.out_bf16 = cq16_.get();
      qn.ld_out_bf16 = ql;
      ++graph_stats_.fused_launches;
    }
    RmsNorm(qn);
    LinearFwd(w.q_b, cq, ql, T, q32_.as<float>(), H * dqk, cq_bf16 ? cq16_.as<bf16>() : nullptr);
  } else {
    LinearFwd(w.q, hn, cfg_.hidden_size, T, q32_.as<float>(), H * dqk, hn16);
  }
  if (side_q) EndSide();
  LinearFwd(w.kv_a, hn, cfg_.hidden_size, T, lat, L, hn16);
  if (side_q) JoinSide();
  float* q = q32_.as<float>();
  // fused_qpe, decode-only pass (every row absorbed): RoPE writes q_pe into q_lat's tail too.
  bool qpe_done = opts_.fused_qpe && FusedDecode(T) && opts_.mla_mode != MlaMode::kNaive;
  for (int64_t s = 0; s < S && qpe_done; ++s)
    qpe_done = opts_.mla_mode == MlaMode::kAbsorbed || b.query_start[s + 1] - b.query_start[s] <= 1;
  RopeParams rq{q, T, H, H * dqk, dqk, nope, rd, d_pos_, d_cos_.as<float>(), d_sin_.as<float>(), rope_.max_pos, interleave, s_,
                opts_.pdl};
  if (qpe_done) {
    qlat32_.Reserve((RoundUp(T, 64) + 64) * H * L * sizeof(float));  // as the absorbed branch reserves it
    rq.out2 = qlat32_.as<float>() + kvl; rq.out2_token_stride = H * L; rq.out2_head_stride = L;
    ++graph_stats_.fused_launches;
  }
  bf16* cache = cache_[l].as<bf16>();  // this layer's paged latent cache [slots, kv_lora + rope] bf16
  // decode_streams, decode-only pass (qpe_done: every row absorbed, so the absorbed rows are q's):
  // the q absorption below (reads q's nope columns, writes q_lat's latent columns) as a side
  // branch beside the kv-latent norm, RoPE and cache write (rotate q's rope columns in place,
  // write q_pe into q_lat's rope columns and the cache): disjoint bytes; joined before the
  // decode attention reads q_lat.
  const bool side_absorb = side_q && qpe_done;
  // q_lat[:, h, :kv_lora] = q_nope_h @ W_UK_h (batched over heads) for `rows` rows of qsrc
  // [rows, H * dqk]: the SplitBf16 + HeadGemm pair, or (fused_q_absorb, <= 8 rows, not precise)
  // one MlaQAbsorb launch (mla_q_absorb.h).
  const auto absorb = [&](const float* qsrc, int64_t rows) {
    MlaQAbsorbParams ap{};
    ap.q = qsrc; ap.q_tok_stride = H * dqk; ap.q_head_stride = dqk;
    ap.w_uk_t = w.w_uk_t.as<bf16>(); ap.tokens = rows; ap.heads = H; ap.nope = nope; ap.kv_lora = kvl;
    ap.out = qlat32_.as<float>(); ap.out_tok_stride = H * L; ap.out_head_stride = L;
    ap.stream = s_; ap.pdl = opts_.pdl;
    if (opts_.fused_q_absorb && !opts_.precise_activations && MlaQAbsorbUnsupported(ap).empty()) {
      MlaQAbsorb(ap);
      ++graph_stats_.fused_launches;
      ++graph_stats_.q_absorb_layers;
      return;
    }
    HeadGemm(qsrc, H * dqk, dqk, rows, nope, w.w_uk_t.as<bf16>(), nope, kvl * nope, kvl, qlat32_.as<float>(), H * L, L, H);
  };
  if (side_absorb) {
    BeginSide();
    absorb(q, T);  // as in the absorbed branch below
    EndSide();
  }
  if (opts_.fused_kvrope && FusedDecode(T)) {
    // fused_kvrope (decode-size pass): the three launches below in one kernel
    // (mla_kv_rope_fused.h): the same device routines, RmsNorm's block size for kv_lora (its
    // reduction order), the same lat, q (q_lat's q_pe with fused_qpe) and cache bits.
    MlaKvRopeParams kp{};
    kp.lat = lat; kp.ld_lat = L; kp.norm_weight = w.kv_a_norm.as<float>(); kp.eps = kLatentNormEps;
    kp.n = T; kp.kv_lora = kvl; kp.rope_dim = rd;
    kp.q = q; kp.heads = H; kp.q_token_stride = rq.token_stride; kp.q_head_stride = rq.head_stride;
    kp.q_offset = rq.offset;
    kp.q_out2 = rq.out2; kp.q_out2_token_stride = rq.out2_token_stride; kp.q_out2_head_stride = rq.out2_head_stride;
    kp.positions = d_pos_; kp.slots = d_slots_; kp.cos = d_cos_.as<float>(); kp.sin = d_sin_.as<float>();
    kp.max_pos = rope_.max_pos; kp.interleave = interleave; kp.cache = cache; kp.stream = s_; kp.pdl = opts_.pdl;
    MlaKvRope(kp);
    ++graph_stats_.fused_launches;
    ++graph_stats_.fused_kvrope_layers;
  } else {
    // c_kv (lat[:, :kvl]) normalised in place; q's rope channels rotated in place (and q_pe
    // into q_lat with fused_qpe); [c_kv | rope(k_pe)] written to the cache as bf16.
    RmsNorm({lat, L, nullptr, 0, w.kv_a_norm.as<float>(), lat, L, DTypeOut::kF32, T, kvl, kLatentNormEps, s_, opts_.pdl});
    ApplyRope(rq);
    RopeAndWriteKvCache({lat, L, lat + kvl, L, d_pos_, d_slots_, d_cos_.as<float>(),
                         d_sin_.as<float>(), rope_.max_pos, T, kvl, rd, interleave, cache, s_, opts_.pdl});
  }
  if (side_absorb) JoinSide();

  attn32_.Reserve(Tr * H * vd * sizeof(float));
  float* attn = attn32_.as<float>();  // attn: [T, H, v] per-head attention outputs
  bf16* attn16 = nullptr;             // fused_uv: the same as bf16 [T, H, v] (ov16_)
  Mark("attn_proj_rope_cache");
  // Split the sequences: naive (prefill chunks) and absorbed (decode).
  std::vector<char> naive(S);
  for (int64_t s = 0; s < S; ++s) {
    const int32_t n_new = b.query_start[s + 1] - b.query_start[s];
    naive[s] = opts_.mla_mode == MlaMode::kNaive || (opts_.mla_mode == MlaMode::kAuto && n_new > 1);
  }
  // Naive groups: runs of consecutive naive sequences, context total <= budget.
  for (int64_t s0 = 0; s0 < S;) {
    if (!naive[s0] || b.query_start[s0 + 1] == b.query_start[s0]) { ++s0; continue; }
    int64_t s1 = s0, ctx_total = 0;
    while (s1 < S && naive[s1] &&
           (s1 == s0 || ctx_total + b.context_lens[s1] <= opts_.naive_ctx_budget)) {
      ctx_total += b.context_lens[s1];
      ++s1;
    }
    std::vector<int64_t> slots;
    std::vector<int32_t> qs, ks{0}, pos0;
    int64_t max_q = 0;
    slots.reserve(ctx_total);
    for (int64_t s = s0; s < s1; ++s) {
      qs.push_back(b.query_start[s]);
      const int32_t ctx = b.context_lens[s], n_new = b.query_start[s + 1] - b.query_start[s];
      for (int32_t p = 0; p < ctx; ++p)
        slots.push_back(static_cast<int64_t>(b.block_tables[s * b.max_blocks + p / kBlockSize]) * kBlockSize +
                        p % kBlockSize);
      ks.push_back(ks.back() + ctx);
      pos0.push_back(ctx - n_new);
      max_q = std::max<int64_t>(max_q, n_new);
    }
    qs.push_back(b.query_start[s1]);
    ctx_slots_.Reserve(slots.size() * sizeof(int64_t));
    DS_CUDA_CHECK(cudaMemcpyAsync(ctx_slots_.get(), slots.data(), slots.size() * sizeof(int64_t),
                                  cudaMemcpyHostToDevice, s_));
    grp_qs_.Reserve(qs.size() * 4);
    grp_ks_.Reserve(ks.size() * 4);
    grp_pos0_.Reserve(pos0.size() * 4);
    DS_CUDA_CHECK(cudaMemcpyAsync(grp_qs_.get(), qs.data(), qs.size() * 4, cudaMemcpyHostToDevice, s_));
    DS_CUDA_CHECK(cudaMemcpyAsync(grp_ks_.get(), ks.data(), ks.size() * 4, cudaMemcpyHostToDevice, s_));
    DS_CUDA_CHECK(cudaMemcpyAsync(grp_pos0_.get(), pos0.data(), pos0.size() * 4, cudaMemcpyHostToDevice, s_));
    lat16_.Reserve(ctx_total * L * sizeof(bf16));
    rope32_.Reserve(ctx_total * rd * sizeof(float));
    GatherLatentRows(cache, ctx_slots_.as<int64_t>(), ctx_total, L, rd, lat16_.as<bf16>(), rope32_.as<float>(), s_,
                     opts_.pdl);
    const bool tc = opts_.mla_prefill_tensor_cores && MlaPrefillTcSupported(nope, rd, vd);
    // kv: [ctx, H, nope + v] = c_kv W_UKV^T (bf16 for the tensor-core kernel, else fp32; kv32_
    // holds either)
    kv32_.Reserve(ctx_total * H * (nope + vd) * (tc ? sizeof(bf16) : sizeof(float)));
    GemmBf16({lat16_.as<bf16>(), L, w.kv_b.as<bf16>(), kvl, kv32_.get(), H * (nope + vd),
              tc ? DTypeOut::kBF16 : DTypeOut::kF32, ctx_total, H * (nope + vd), kvl, false, s_});
    if (tc) {
      // k_rope: the bf16 rope part of the gathered latent rows [ctx, L], shared by all heads.
      const bf16* kv16 = kv32_.as<bf16>();
      MlaPrefillTcParams tp{};
      tp.q = q; tp.q_tok_stride = H * dqk; tp.q_head_stride = dqk;
      tp.k_nope = kv16; tp.kn_tok_stride = H * (nope + vd); tp.kn_head_stride = nope + vd;
      tp.k_rope = lat16_.as<bf16>() + kvl; tp.kr_tok_stride = L; tp.kr_head_stride = 0;
      tp.v = kv16 + nope; tp.v_tok_stride = H * (nope + vd); tp.v_head_stride = nope + vd;
      tp.out = attn; tp.o_tok_stride = H * vd; tp.o_head_stride = vd; tp.out_type = DTypeOut::kF32;
      tp.num_seqs = s1 - s0; tp.heads = H; tp.d_nope = nope; tp.d_rope = rd; tp.dv = vd;
      tp.q_start = grp_qs_.as<int32_t>(); tp.k_start = grp_ks_.as<int32_t>(); tp.q_pos0 = grp_pos0_.as<int32_t>();
      tp.max_q_len = max_q; tp.softmax_scale = scale; tp.stream = s_;
      tp.total_k = ctx_total; tp.sm90 = opts_.mla_prefill_sm90;
      tp.sm90_pingpong = opts_.mla_prefill_sm90_pingpong;
      MlaPrefillAttentionTc(tp);
    } else {
      MlaPrefillParams pp{};
      pp.q = q; pp.q_tok_stride = H * dqk; pp.q_head_stride = dqk;
      pp.k_nope = kv32_.as<float>(); pp.kn_tok_stride = H * (nope + vd); pp.kn_head_stride = nope + vd;
      pp.k_rope = rope32_.as<float>(); pp.kr_tok_stride = rd; pp.kr_head_stride = 0;
      pp.v = kv32_.as<float>() + nope; pp.v_tok_stride = H * (nope + vd); pp.v_head_stride = nope + vd;
      pp.out = attn; pp.o_tok_stride = H * vd; pp.o_head_stride = vd; pp.out_type = DTypeOut::kF32;
      pp.num_seqs = s1 - s0; pp.heads = H; pp.d_nope = nope; pp.d_rope = rd; pp.dv = vd;
      pp.q_start = grp_qs_.as<int32_t>(); pp.k_start = grp_ks_.as<int32_t>(); pp.q_pos0 = grp_pos0_.as<int32_t>();
      pp.max_q_len = max_q; pp.softmax_scale = scale; pp.stream = s_;
      MlaPrefillAttention(pp);
    }
    DS_CUDA_CHECK(cudaStreamSynchronize(s_));  // host vectors above go out of scope
    s0 = s1;
  }
  // Absorbed sequences.
  std::vector<int32_t> tok, qs{0}, ctxs, table;
  int64_t max_ctx = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (naive[s] || b.query_start[s + 1] == b.query_start[s]) continue;
    for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t) tok.push_back(t);
    qs.push_back(static_cast<int32_t>(tok.size()));
    ctxs.push_back(b.context_lens[s]);
    max_ctx = std::max<int64_t>(max_ctx, b.context_lens[s]);
    table.insert(table.end(), b.block_tables.begin() + s * b.max_blocks, b.block_tables.begin() + (s + 1) * b.max_blocks);
  }
  const int64_t Ta = static_cast<int64_t>(tok.size()), Sa = static_cast<int64_t>(ctxs.size());
  if (Ta > 0) {
    const bool all = Ta == T;
    const int64_t Tar = RoundUp(Ta, 64) + 64;
    const float* qa = q;
    if (!all) {
      tok_idx_.Reserve(Ta * 4);
      DS_CUDA_CHECK(cudaMemcpyAsync(tok_idx_.get(), tok.data(), Ta * 4, cudaMemcpyHostToDevice, s_));
      qa32_.Reserve(Tar * H * dqk * sizeof(float));
      GatherRows(q, H * dqk * 4, tok_idx_.as<int32_t>(), Ta, H * dqk * 4, qa32_.get(), H * dqk * 4, s_, opts_.pdl);
      qa = qa32_.as<float>();
    }
    qlat32_.Reserve(Tar * H * L * sizeof(float));
    // q_lat[:, h, :kv_lora] = q_nope_h @ W_UK_h (batched over heads; done above with
    // side_absorb); q_lat[:, h, kv_lora:] = q_pe_h
    DS_CHECK(!side_absorb || all) << "side-branch absorption in a pass with naive rows";
    if (!side_absorb) absorb(qa, Ta);
    if (!qpe_done) Copy2D(qa + nope, dqk, qlat32_.as<float>() + kvl, L, Ta * H, rd, s_, opts_.pdl);
    const int32_t *d_qs = nullptr, *d_ctx = nullptr, *d_bt = nullptr;
    // The sm_90a decode kernel, or the CUDA-core emulation of its plan (mla_decode_emulate_tc);
    // the cuda-core backend asked for (tensor cores off, no emulation) keeps it off.
    const bool sm90_decode =
        opts_.mla_decode_sm90 && (opts_.mla_decode_tensor_cores || opts_.mla_decode_emulate_tc != 0);
    // CudaRunnerOptions::mla_decode_small_batch_chunk applies to this pass (size; workspace below)
    const bool small_batch_plan = opts_.mla_decode_small_batch_chunk > 0 && Ta <= kMlaSmallBatchTokens;
    bool graph_hints = gin_ != nullptr;
    int64_t hint_seqs = Sa;  // sequences the host hints count (graph_hints)
    if (gin_) {
      // Graph mode: inputs staged before the replay; the launch configuration depends only on
      // the bucket and the captured block-table width (the kernels read the real lengths).
      DS_CHECK(all && Sa == gin_->bucket) << "graph decode pass: every row must be a decode row";
      d_qs = gin_->qs.as<int32_t>();
      d_ctx = gin_->ctx.as<int32_t>();
      d_bt = gin_->bt.as<int32_t>();
      max_ctx = int64_t{gin_->cap_blocks} * kBlockSize;
    } else {
      dec_qs_.Reserve(qs.size() * 4);
      dec_ctx_.Reserve(ctxs.size() * 4);
      dec_bt_.Reserve(table.size() * 4);
      DS_CUDA_CHECK(cudaMemcpyAsync(dec_qs_.get(), qs.data(), qs.size() * 4, cudaMemcpyHostToDevice, s_));
      DS_CUDA_CHECK(cudaMemcpyAsync(dec_ctx_.get(), ctxs.data(), ctxs.size() * 4, cudaMemcpyHostToDevice, s_));
      DS_CUDA_CHECK(cudaMemcpyAsync(dec_bt_.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice, s_));
      d_qs = dec_qs_.as<int32_t>();
      d_ctx = dec_ctx_.as<int32_t>();
      d_bt = dec_bt_.as<int32_t>();
      // With the sm_90a decode kernel (whose split plan follows these hints), and with the
      // small-batch split minimum (where the tensor-core kernels size 64-key-minimum splits by
      // these hints), a decode-only batch uses the hints a graph replay of it would: the
      // capacity of its graph's block table, every sequence counted at that length. Graph and
      // eager passes of the same batch then run the same plan and round the same
      // (CudaRunner.GraphDecodeMatchesEager*). For the small-batch minimum this is by
      // construction; it did not change the checks' figures (session 5 runs 4-6: their
      // remaining eager-vs-graph differences come from padded steps of > 8 sequences).
      // The tensor-core kernels size their splits from the total context, which a graph replay
      // counts over the whole padded bucket: an eager pass counts its sequences as that bucket
      // too, so its real rows split (and round) exactly as the padded replay's.
      if ((sm90_decode || small_batch_plan) && Ta == Sa) {
        int need = 1;
        for (int32_t c : ctxs) need = std::max(need, static_cast<int>((c + kBlockSize - 1) / kBlockSize));
        max_ctx = int64_t{GraphCapBlocks(need)} * kBlockSize;
        graph_hints = true;
        if (!sm90_decode && GraphBucket(static_cast<int>(Sa)) > 0) hint_seqs = GraphBucket(static_cast<int>(Sa));
      }
    }
    int64_t chunk = 256;
    if (const int64_t small = opts_.mla_decode_small_batch_chunk;
        small_batch_plan &&
        MlaDecodeWorkspaceFloats(Ta, H, kvl, max_ctx, small) * int64_t{sizeof(float)} <= kMlaSmallBatchWorkspaceBytes)
      chunk = small;
    dec_ws_.Reserve(MlaDecodeWorkspaceFloats(Ta, H, kvl, max_ctx, chunk) * sizeof(float));
    // fused_olat (decode-size pass, not precise): o_lat written as bf16 [Ta, H, kv_lora] by the
    // decode attention's final writer (combine, or the kernel itself with one split), each
    // rounding the fp32 value it would have stored with __float2bfloat16_rn, as SplitBf16 does:
    // the W_UV GEMM below reads it directly (no SplitBf16 launch), bit-identical.
    const bool olat16 = opts_.fused_olat && !opts_.precise_activations && FusedDecode(T);
    if (olat16) olat16_.Reserve(Tar * H * kvl * sizeof(bf16));  // o_lat bf16 [Ta, H, kv_lora]
    else olat32_.Reserve(Tar * H * kvl * sizeof(float));        // o_lat fp32 [Ta, H, kv_lora]
    MlaDecodeParams dp{};
    dp.q = qlat32_.as<float>(); dp.q_tok_stride = H * L; dp.q_head_stride = L;
    dp.cache = cache; dp.num_tokens = Ta; dp.num_seqs = Sa; dp.heads = H; dp.kv_lora = kvl; dp.rope_dim = rd;
    dp.block_size = kBlockSize; dp.query_start = d_qs; dp.context_lens = d_ctx;
    dp.block_table = d_bt; dp.max_blocks = gin_ ? gin_->cap_blocks : b.max_blocks; dp.max_context = max_ctx;
    dp.kv_chunk = chunk; dp.softmax_scale = scale; dp.workspace = dec_ws_.as<float>();
    dp.out = olat16 ? olat16_.get() : olat32_.get(); dp.o_tok_stride = H * kvl; dp.o_head_stride = kvl;
    dp.out_type = olat16 ? DTypeOut::kBF16 : DTypeOut::kF32;
    dp.stream = s_;
    dp.pdl = opts_.pdl;
    dp.tensor_cores = opts_.mla_decode_tensor_cores;
    dp.tc_stages = opts_.mla_decode_tc_stages;
    dp.emulate_tc_rounding = opts_.mla_decode_emulate_tc;  // debug: forces the CUDA-core kernel
    dp.sm90 = sm90_decode;
    dp.sm90_variant = opts_.mla_decode_sm90_variant;
    if (dp.sm90_variant == 0 && opts_.mla_decode_sm90_small_variant >= 0 && Sa <= kMlaSm90SmallVariantSeqs)
      dp.sm90_variant = opts_.mla_decode_sm90_small_variant;
    dp.sm90_min_rows = opts_.mla_decode_sm90_min_rows;
    dp.cache_rows = static_cast<int64_t>(num_blocks_ + 1) * kBlockSize;
    if (graph_hints) {  // host hints from the bucket only (the tensor-core path sizes its chunks with them)
      dp.total_context = hint_seqs * max_ctx;
      dp.max_q_len = 1;
      dp.capacity_hints = opts_.mla_decode_capacity_plan;  // max_ctx is the graph's capacity
    } else {
      dp.total_context = std::accumulate(ctxs.begin(), ctxs.end(), int64_t{0});
      for (size_t i = 0; i + 1 < qs.size(); ++i) dp.max_q_len = std::max<int64_t>(dp.max_q_len, qs[i + 1] - qs[i]);
    }
    // Sequences of <= 16 query rows (16 heads x 1 token): the warp-split kernel wins from more
    // than 32K keys of total context, the row-tile kernel below that (bench/results/kernels.json,
    // 16 heads, batch 1-256 x 1K-32K, session 3 run 2 vs session 2's row-tile figures: b1 x
    // 1K-16K, b8 x 1K-4K and b32 x 1K are 13-38% faster on the row-tile kernel).
    if (opts_.mla_decode_tc_kernel >= 0) dp.tc_kernel = opts_.mla_decode_tc_kernel;
    else if (dp.total_context <= kWarpSplitMinTotalContext) dp.tc_kernel = 1;
    dp.tc_cluster_merge = opts_.mla_decode_cluster_merge ? 1 : 0;
    if (opts_.mla_decode_fused_combine) {
      DS_CHECK(Sa <= kMlaSplitCounters) << "MLA decode fused combine: " << Sa << " sequences in one pass";
      dp.tc_fused_combine = 1;
      dp.split_counters = mla_split_cnt_.as<uint32_t>();
      dp.split_counter_count = kMlaSplitCounters;
    }
    // The sm_90a kernel's own minimum for small batches (its plan takes kv_chunk as the least
    // keys per split; the workspace above, sized for the smaller chunk, is enough).
    if (small_batch_plan && chunk == opts_.mla_decode_small_batch_chunk && MlaDecodeSm90Selected(dp))
      dp.kv_chunk = std::max<int64_t>(chunk, opts_.mla_decode_sm90_small_batch_chunk);
    // fused_uv (decode-only pass, not precise, kv_lora 512, o_proj reading bf16 activations):
    // the decode's final merge also applies W_UV per head and writes o_proj's bf16 input
    // (MlaDecodeParams::uv_w; no W_UV GEMM, no SplitBf16 launch).
    const bool uv = opts_.fused_uv && all && !opts_.precise_activations && FusedDecode(T) && kvl == 512 &&
                    LinearInputFor(w.o, T, cfg_.hidden_size) == LinearInput::kBf16;
    if (uv) {
      ov16_.Reserve(Tr * H * vd * sizeof(bf16));  // o_h bf16 [T, H, v]
      attn16 = ov16_.as<bf16>();
      dp.uv_w = w.kv_b.as<bf16>() + nope * kvl;  // W_UV_h: rows nope .. nope + v - 1 of head h's kv_b_proj
      dp.uv_head_stride = (nope + vd) * kvl;
      dp.uv_ld = kvl;
      dp.uv_n = vd;
      dp.uv_out = attn16;
      dp.uv_tok_stride = H * vd;
      dp.uv_out_bf16 = true;
      dp.uv_preload = opts_.mla_uv_preload;
      if (dp.uv_preload) ++graph_stats_.mla_uv_preload_layers;
      ++graph_stats_.fused_launches;
      ++graph_stats_.fused_uv_layers;
    }
    // mla_decode_q_bf16 (session 40, opt-in): the sm_90a kernel reads q_lat as bf16 (one F32ToBf16
    // launch here, RN as the kernel's own conversion: the same bits) instead of converting the fp32
    // q_lat in every CTA's prologue.
    if (opts_.mla_decode_q_bf16 && MlaDecodeTakesSm90(dp)) {
      qlat16_.Reserve(Ta * H * L * sizeof(bf16));
      F32ToBf16(qlat32_.as<float>(), L, qlat16_.as<bf16>(), L, Ta * H, L, s_, opts_.pdl);
      dp.q_bf16 = qlat16_.as<bf16>();
      ++graph_stats_.mla_q_bf16_layers;
    }
    MlaDecodeAttention(dp);
    // (With uv the bf16 o_lat stays inside the merge kernel; the layer still counts as fused_olat:
    // o_lat is rounded to bf16 there exactly as the olat path stores it.)
    if (olat16) {
      ++graph_stats_.fused_launches;
      ++graph_stats_.fused_olat_layers;
    }
    // o_h = o_lat_h W_UV_h^T (batched over heads) -> [Ta, H * v] (with uv: done in the merge)
    float* ov = attn;
    if (!all) {
      ova32_.Reserve(Tar * H * vd * sizeof(float));
      ov = ova32_.as<float>();
    }
    if (!uv)
      HeadGemm(olat16 ? nullptr : olat32_.as<float>(), H * kvl, kvl, Ta, kvl, w.kv_b.as<bf16>() + nope * kvl, kvl,
               (nope + vd) * kvl, vd, ov, H * vd, vd, H, olat16 ? olat16_.as<bf16>() : nullptr);
    if (!all) ScatterRows(ov, H * vd * 4, tok_idx_.as<int32_t>(), Ta, H * vd * 4, attn, H * vd * 4, s_, opts_.pdl);
    if (!gin_) DS_CUDA_CHECK(cudaStreamSynchronize(s_));
  }
  Mark("attn_core");
  // o_proj -> o32 [T, hidden] (fused_uv: from the merge's bf16 o_h). fused_oproj_norm: at <= 2
  // decode tokens, SkinnyGemm's last block also adds o32 into the residual and applies the
  // post-attention norm (h32, h16), as RunPass's RmsNorm would (the norm-only combine epilogue).
  SkinnyCombineEpilogue epi{};
  const bool want_norm = opts_.fused_oproj_norm && opts_.fused_norm && FusedDecode(T) && T <= kOprojNormMaxTokens;
  if (want_norm) {
    const int64_t Hd = cfg_.hidden_size;
    MoeCombineNormParams& cn = epi.cn;
    cn.y = o32_.get(); cn.y_bf16 = false; cn.ldy = Hd; cn.n = T; cn.top_k = 0; cn.d = Hd;
    cn.base = o32_.as<float>(); cn.ld_base = Hd;
    cn.residual = residual_.as<float>(); cn.ldres = Hd;
    cn.norm_weight = layers_[l].post_norm.as<float>(); cn.eps = static_cast<float>(cfg_.rms_norm_eps);
    cn.out = h32_.as<float>(); cn.ldout = Hd;
    cn.out_bf16 = h16_.as<bf16>(); cn.ldout_bf16 = Hd;
    cn.stream = s_;
    epi.counter = oproj_norm_sync_.as<uint32_t>();
  }
  post_norm_fused_ = LinearFwd(w.o, attn16 ? nullptr : attn, H * vd, T, o32_.as<float>(), cfg_.hidden_size, attn16,
                               want_norm ? &epi : nullptr);
  if (post_norm_fused_) {
    ++graph_stats_.fused_launches;
    ++graph_stats_.oproj_norm_layers;
  }
  Mark("attn_o_proj");
}

}  // namespace ds::cuda::runner_impl
