#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/cuda_runner_impl.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/embedding.h"
#include "backend/cuda/fp8_quant.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/grouped_gemm.h"
#include "backend/cuda/grouped_gemm_sm90.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/lm_head_argmax.h"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/mla_kv_rope_fused.h"
#include "backend/cuda/mla_prefill.h"
#include "backend/cuda/moe_combine_norm.h"
#include "backend/cuda/moe_permute.h"
#include "backend/cuda/moe_route_permute.h"
#include "backend/cuda/moe_router_route.h"
#include "backend/cuda/moe_persistent.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/router_gemv.h"
#include "backend/cuda/runner_kernels.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/silu_and_mul.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/fp8_gemv_grouped.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/stream.h"
#include "common/logging.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace ds::cuda {

// Decode graph buckets and block-table widths: kGraphBuckets, GraphBucket, GraphCapBlocks
// (host_plans.h).
namespace runner_impl {

// fused_down_combine: the largest pass whose combine + norm runs in the down GEMM's last block
// (one block does every token's row in turn).
constexpr int64_t kDownCombineMaxTokens = 2;
// combine_norm_split: passes of up to this many tokens (x G blocks in one cooperative launch).
constexpr int64_t kCombineNormSplitMaxTokens = 16;

bool CudaModelRunner::CombineNormSplitOn(int64_t T) const {
  return opts_.combine_norm_split > 1 && T <= kCombineNormSplitMaxTokens &&
         cfg_.hidden_size >= opts_.combine_norm_split_min_hidden;
}

void CudaModelRunner::SetCombineNormSplit(MoeCombineNormParams* cn) {
  cn->split_blocks = opts_.combine_norm_split;
  cn->split_sync = combine_split_sync_.as<uint32_t>();
  cn->split_ss = combine_split_ss_.as<float>();
}

Status CudaModelRunner::Init(const Checkpoint* ckpt) {
  ckpt_ = ckpt;
  dummy_ = ckpt == nullptr;
  use_cublas_fp8_ = opts_.fp8_gemm != "kernel";  // "cublas" | "cublas-all"
  s_ = stream_.get();
  const int64_t V = cfg_.vocab_size, Hd = cfg_.hidden_size;
  DS_RETURN_IF_ERROR(LoadBf16("model.embed_tokens.weight", V, Hd, &embed_));
  DS_RETURN_IF_ERROR(LoadVec("model.norm.weight", Hd, 1.f, &final_norm_));
  if (!dummy_ && ckpt_->Find("lm_head.weight") == nullptr && cfg_.tie_word_embeddings) {
    lm_head_lin_.N = V;
    lm_head_lin_.K = Hd;
    lm_head_lin_.w.Reset(V * Hd * 2);
    DS_CUDA_CHECK(cudaMemcpy(lm_head_lin_.w.get(), embed_.get(), V * Hd * 2, cudaMemcpyDeviceToDevice));
  } else {
    lm_head_lin_.N = V;
    lm_head_lin_.K = Hd;
    DS_RETURN_IF_ERROR(LoadBf16("lm_head.weight", V, Hd, &lm_head_lin_.w));
  }
  layers_.resize(cfg_.num_hidden_layers);
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    DS_RETURN_IF_ERROR(LoadLayer(l, &layers_[l]));
    DS_CUDA_CHECK(cudaStreamSynchronize(s_));
  }
  // KV pool.
  const int64_t L = cfg_.latent_dim();
  const int64_t block_bytes = int64_t{kBlockSize} * L * 2 * cfg_.num_hidden_layers;
  if (opts_.num_kv_blocks > 0) {
    num_blocks_ = opts_.num_kv_blocks;
  } else if (opts_.max_kv_tokens > 0) {
    num_blocks_ = static_cast<int>((opts_.max_kv_tokens + kBlockSize - 1) / kBlockSize);
  } else {
    size_t fr = 0, tot = 0;
    DS_CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    const double reserve = 24.0 * (1 << 30);  // activations at max_tokens_per_pass
    const double avail = std::max(0.0, double(fr) * opts_.mem_fraction - reserve);
    num_blocks_ = static_cast<int>(std::max<int64_t>(16, static_cast<int64_t>(avail / block_bytes)));
  }
  // One extra block past the engine's pool: the scratch block of padded graph rows.
  scratch_block_ = num_blocks_;
  cache_.resize(cfg_.num_hidden_layers);
  for (auto& c : cache_) {
    c.Reset(static_cast<size_t>(num_blocks_ + 1) * kBlockSize * L * 2);
    DS_CUDA_CHECK(cudaMemsetAsync(c.get(), 0, c.size(), s_));
  }
  if (opts_.fused_moe_route || opts_.fused_moe_shared) {
    route_sync_.Reset(sizeof(uint32_t));
    DS_CUDA_CHECK(cudaMemsetAsync(route_sync_.get(), 0, sizeof(uint32_t), s_));
  }
  if (opts_.attn_persistent) {
    // The grid barrier's 64-bit counter, absorb_overlap's and split_counter's words, merge_cols'
    // 16 head words.
    attn_sync_.Reset(20 * sizeof(uint32_t));
    DS_CUDA_CHECK(cudaMemsetAsync(attn_sync_.get(), 0, 20 * sizeof(uint32_t), s_));
  }
  if (opts_.persistent_moe) {
    persist_sync_.Reset(4 * sizeof(uint32_t));  // the grid barrier's 64-bit counter, then shared_first's word
    DS_CUDA_CHECK(cudaMemsetAsync(persist_sync_.get(), 0, 4 * sizeof(uint32_t), s_));
    persist_partials_.Reset(static_cast<size_t>(MoePersistentGridBlocks(2)) * sizeof(float));
    // moe_router_tagged: the tagged router logits (64-bit words, zero before the first launch).
    const size_t tagged = static_cast<size_t>(std::max<int64_t>(cfg_.n_routed_experts, 1)) * sizeof(uint64_t);
    persist_router_tagged_.Reset(tagged);
    DS_CUDA_CHECK(cudaMemsetAsync(persist_router_tagged_.get(), 0, tagged, s_));
    if (opts_.moe_ring && opts_.moe_ring_act_tagged) {  // MoeRing's act words (zero, with the counter)
      persist_act_tagged_.Reset(kMoeRingActWords * sizeof(uint64_t));
      DS_CUDA_CHECK(cudaMemsetAsync(persist_act_tagged_.get(), 0, kMoeRingActWords * sizeof(uint64_t), s_));
    }
  }
  if (opts_.fused_down_combine) {
    down_combine_sync_.Reset(sizeof(uint32_t));
    DS_CUDA_CHECK(cudaMemsetAsync(down_combine_sync_.get(), 0, sizeof(uint32_t), s_));
  }
  if (opts_.combine_norm_split > 1) {  // the split MoeCombineNorm's barrier counter and [16, 32] warp sums
    combine_split_sync_.Reset(2 * sizeof(uint32_t));
    DS_CUDA_CHECK(cudaMemsetAsync(combine_split_sync_.get(), 0, 2 * sizeof(uint32_t), s_));
    combine_split_ss_.Reserve(kCombineNormSplitMaxTokens * 32 * sizeof(float));
  }
  if (opts_.fused_oproj_norm) {
    oproj_norm_sync_.Reset(sizeof(uint32_t));
    DS_CUDA_CHECK(cudaMemsetAsync(oproj_norm_sync_.get(), 0, sizeof(uint32_t), s_));
  }
  if (opts_.mla_decode_fused_combine) {  // allocated and zeroed here, outside any graph capture
    mla_split_cnt_.Reset(kMlaSplitCounters * sizeof(uint32_t));
    DS_CUDA_CHECK(cudaMemsetAsync(mla_split_cnt_.get(), 0, kMlaSplitCounters * sizeof(uint32_t), s_));
  }
  rope_ = BuildRopeTables(cfg_, static_cast<int64_t>(num_blocks_) * kBlockSize);
  Upload(&d_cos_, rope_.cos);
  Upload(&d_sin_, rope_.sin);
  DS_CUDA_CHECK(cudaStreamSynchronize(s_));
  DS_LOG(INFO) << "cuda runner: " << DescribeDevice(opts_.device) << "; " << cfg_.model_type << ", "
               << cfg_.num_hidden_layers << " layers, " << (dummy_ ? "dummy" : "checkpoint") << " weights"
               << (cfg_.quant.fp8 ? " (fp8)" : "") << ", " << num_blocks_ << " KV blocks ("
               << (static_cast<double>(num_blocks_) * block_bytes / (1 << 30)) << " GiB), device memory in use "
               << DeviceAllocator::Get().bytes_in_use() / double(1 << 30) << " GiB";
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Compute

CudaModelRunner::LinearInput CudaModelRunner::LinearInputFor(const Linear& L, int64_t M, int64_t ldy) const {
  if (L.fp8 && opts_.fp8_emulate_act_quant && L.K % 128 == 0 &&
      GemmFp8Supported(M, L.N, L.K, L.K, L.K, ldy, DTypeOut::kF32))
    return LinearInput::kFp8Emulated;  // debug: where fp8_gemm "cublas" takes cuBLASLt
  // fp8_gemm "cublas": cuBLASLt's block-scaled FP8 GEMM for whole 128-wide K blocks (every
  // DeepSeek-V3 projection), activations quantised per 1x128 group straight from fp32;
  // otherwise the weights are dequantised in the kernel.
  if (L.fp8 && use_cublas_fp8_ && (L.K % 128 == 0 || opts_.fp8_gemm == "cublas-all") &&
      GemmFp8Supported(M, L.N, L.K, L.K, L.K, ldy, DTypeOut::kF32))
    return LinearInput::kFp8Quant;
  return opts_.precise_activations && !L.fp8 ? LinearInput::kBf16Split : LinearInput::kBf16;
}

static_assert(CudaRunnerOptions{}.skinny_bf16_max_weights == kSkinnyBf16MaxWeights, "the option's default");

bool CudaModelRunner::LinearFwd(const Linear& L, const float* x, int64_t ldx, int64_t M, float* y, int64_t ldy,
                                const bf16* x16, const SkinnyCombineEpilogue* epi) {
  if (M == 0) return false;
  const LinearInput in = LinearInputFor(L, M, ldy);
  DS_CHECK(x != nullptr || (in == LinearInput::kBf16 && x16 != nullptr))
      << "LinearFwd: no fp32 input for a GEMM that reads it (N=" << L.N << " K=" << L.K << " M=" << M << ")";
  if (in == LinearInput::kFp8Emulated) {
    EmulateFp8Linear(L, x, ldx, M, y, ldy);
    return false;
  }
  if (in == LinearInput::kFp8Quant) {
    const int64_t Mp = Fp8PaddedM(M), kb = (L.K + 127) / 128;
    GemmScratch& sc = Sc();
    sc.xq.Reserve(Mp * L.K);
    sc.xs.Reserve(kb * Mp * sizeof(float));
    Fp8QuantParams qp{x, false, ldx, M, L.K, 128, sc.xq.as<uint8_t>(), L.K, sc.xs.as<float>(), ScaleLayout::kGroupMajor, s_};
    qp.scale_ld = Mp;
    Fp8QuantizePerTokenGroup(qp);
    const GemmFp8Params gp{sc.xq.as<uint8_t>(), L.K, sc.xs.as<float>(), L.wq.as<uint8_t>(), L.K, L.s_blk.as<float>(),
                           Fp8WeightScaleLd(L.K), y, ldy, DTypeOut::kF32, M, L.N, L.K, s_, LtWorkspace()};
    if (RunFp8SkinnySm90(L, gp)) return false;
    GemmFp8(gp);
    return false;
  }
  const int64_t Mr = RoundUp(M, kGroupedGemmRowAlign);
  const bool split = in == LinearInput::kBf16Split;
  const bf16* xa = split ? nullptr : x16;  // bf16 activations [M, L.K]
  GemmScratch& sc = Sc();
  if (xa == nullptr) {
    sc.xhi.Reserve(Mr * L.K * sizeof(bf16));
    if (split) sc.xlo.Reserve(Mr * L.K * sizeof(bf16));
    SplitBf16(x, ldx, M, L.K, sc.xhi.as<bf16>(), split ? sc.xlo.as<bf16>() : nullptr, L.K, s_, opts_.pdl);
    xa = sc.xhi.as<bf16>();
  }
  // fp8_gemv: FP8 projections of <= 8 rows and >= kFp8GemvMinWeights weights (where it
  // measured faster: V3's o_proj, dense down and dense gate_up). The condition depends on M
  // only through M <= 8, which the graph buckets 1, 2, 4, 8 never cross, so a padded graph step
  // and its eager pass take the same kernel (and get the same rows).
  if (opts_.fp8_gemv && L.fp8 && M <= kFp8GemvMaxRows && L.N * L.K >= kFp8GemvMinWeights) {
    RunFp8Gemv(L, xa, M, y, ldy);
    return false;
  }
  // Decode sizes: the weight-streaming skinny kernel (one group of M rows, no padding).
  if (skinny_on_ && (L.fp8 ? SkinnyDenseFp8(M, L.N)
                           : (!split && M <= kSkinnyBf16MaxRows && L.N * L.K <= opts_.skinny_bf16_max_weights))) {
    SkinnyGemmParams sp{};
    sp.g.a = xa; sp.g.lda = L.K; sp.g.offsets = nullptr; sp.g.max_rows = M;
    sp.g.w = L.fp8 ? L.wq.get() : L.w.get(); sp.g.w_fp8 = L.fp8; sp.g.w_scales = L.fp8 ? L.s_raw.as<float>() : nullptr;
    sp.g.num_experts = 1; sp.g.N = L.N; sp.g.K = L.K; sp.g.out = y; sp.g.out_type = DTypeOut::kF32; sp.g.ldo = ldy;
    sp.g.stream = s_; sp.max_group_rows = M;
    const bool fused = epi != nullptr && SkinnyCombineFits(sp, epi->cn.d, 0);
    if (fused) sp.combine = epi;
    RunSkinny(sp);
    return fused;
  }
  if (!L.fp8) {
    RunGemmBf16({xa, L.K, L.w.as<bf16>(), L.K, y, ldy, DTypeOut::kF32, M, L.N, L.K, false, s_},
                split ? sc.xlo.as<bf16>() : nullptr);
    return false;
  }
  // In-kernel dequantisation: the grouped GEMM with one group of Mr rows (with sm90_mixed_gemm
  // on the sm_90a mixed-input kernel where it applies; its workspace holds the expanded scales).
  GroupedGemmParams gp{};
  gp.a = xa; gp.lda = L.K; gp.offsets = OneGroupOffsets(Mr); gp.max_rows = Mr;
  gp.w = L.wq.get(); gp.w_fp8 = true; gp.w_scales = L.s_raw.as<float>();
  gp.num_experts = 1; gp.N = L.N; gp.K = L.K; gp.out = y; gp.out_type = DTypeOut::kF32; gp.ldo = ldy; gp.stream = s_;
  gp.sm90_mixed = opts_.sm90_mixed_gemm;
  if (gp.sm90_mixed) {
    const size_t wsb = GroupedGemmWorkspaceBytes(gp);
    // Grown only outside a graph capture: the eager warm-up pass of each decode-graph shape
    // (buckets above the skinny sizes) grows it first; a capture that still finds it too small
    // keeps the mma.sync kernel.
    if (wsb > 0 && !capturing_) dense_gg_ws_.Reserve(wsb);
    if (wsb > 0 && dense_gg_ws_.size() >= wsb) { gp.workspace = dense_gg_ws_.get(); gp.workspace_bytes = dense_gg_ws_.size(); }
  }
  GroupedGemm(gp);
  return false;
}

// fp8_skinny_sm90: a W8A8 projection of <= 64 rows on Fp8SkinnyGemmSm90 (64-row ping-pong tiles,
// Fp8SkinnyAutoKsplit), where it takes the shape; false: the caller runs cuBLASLt. The K split
// depends on M only through M <= 32 / > 32 (the graph buckets never cross it with their
// eager passes), so a padded graph step and its eager pass take the same form. The workspace is
// grown only outside a capture (each bucket's eager warm-up pass grows it first).
bool CudaModelRunner::RunFp8SkinnySm90(const Linear& L, const GemmFp8Params& g) {
  if (!opts_.fp8_skinny_sm90 || g.M > 64 || L.s_mn64.get() == nullptr) return false;
  Fp8SkinnyGemmParams sp{};
  sp.g = g;
  sp.w_scales_mn = L.s_mn64.as<float>();
  sp.scale_rows = 64;
  sp.pingpong = true;
  sp.decomposition = SkinnyDecomposition::kDataParallel;
  sp.ksplit = Fp8SkinnyAutoKsplit(g.M, g.N, g.K);
  if (!Fp8SkinnyGemmSm90Unsupported(sp).empty()) return false;
  const size_t wsb = Fp8SkinnyGemmSm90WorkspaceBytes(g.M, g.N, g.K, sp.decomposition, 1, true, 64, sp.ksplit);
  GemmScratch& sc = Sc();
  if (!capturing_) sc.fp8_skinny_ws.Reserve(std::max<size_t>(wsb, 256));
  if (sc.fp8_skinny_ws.size() < wsb) return false;
  sp.workspace = sc.fp8_skinny_ws.get();
  sp.workspace_bytes = sc.fp8_skinny_ws.size();
  Fp8SkinnyGemmSm90(sp);
  ++graph_stats_.fp8_skinny_sm90_launches;
  return true;
}

void CudaModelRunner::EmulateFp8Linear(const Linear& L, const float* x, int64_t ldx, int64_t M, float* y,
                                       int64_t ldy) {
  const int64_t K = L.K, kb = (K + 127) / 128, Mr = RoundUp(M, 64);
  GemmScratch& sc = Sc();
  sc.xq.Reserve(Mr * K);
  sc.xs.Reserve(Mr * kb * sizeof(float));
  sc.xhi.Reserve(Mr * K * sizeof(bf16));
  sc.xlo.Reserve(Mr * K * sizeof(bf16));
  Fp8QuantParams qp{x, false, ldx, M, K, 128, sc.xq.as<uint8_t>(), K, sc.xs.as<float>(), ScaleLayout::kTokenMajor, s_};
  Fp8QuantizePerTokenGroup(qp);
  Fp8DequantizePerTokenGroupToBf16(qp, sc.xhi.get(), sc.xlo.get(), K);
  // y = (x_hi + x_lo) (w_hi + w_lo)^T without the lo x lo term (~2^-16 relative)
  GemmBf16Params g{sc.xhi.as<bf16>(), K, L.w_hi.as<bf16>(), K, y, ldy, DTypeOut::kF32, M, L.N, K, false, s_};
  g.workspace = LtWorkspace();
  GemmBf16(g);
  g.accumulate = true;
  g.w = L.w_lo.as<bf16>();
  GemmBf16(g);
  g.x = sc.xlo.as<bf16>();
  g.w = L.w_hi.as<bf16>();
  GemmBf16(g);
}

void CudaModelRunner::RunSkinny(SkinnyGemmParams sp) {
  constexpr int64_t kCounters = 1 << 16;
  const SkinnyPlan plan = SkinnyPlanFor(sp);
  if (plan.splits > 1 && plan.counters <= kCounters) {
    GemmScratch& sc = Sc();
    if (sc.skinny_cnt.get() == nullptr) {
      DS_CHECK(!capturing_) << "split-K counters first needed inside a graph capture";
      sc.skinny_cnt.Reset(kCounters * sizeof(uint32_t));
      DS_CUDA_CHECK(cudaMemsetAsync(sc.skinny_cnt.get(), 0, kCounters * sizeof(uint32_t), s_));
    }
    DS_CHECK(!capturing_ || sc.skinny_ws.size() >= plan.ws_floats * sizeof(float))
        << "split-K workspace grown inside a graph capture";
    sc.skinny_ws.Reserve(plan.ws_floats * sizeof(float));
    sp.splitk_ws = sc.skinny_ws.as<float>();
    sp.splitk_ws_floats = static_cast<int64_t>(sc.skinny_ws.size() / sizeof(float));
    sp.splitk_counters = sc.skinny_cnt.as<uint32_t>();
    sp.splitk_counter_count = kCounters;
  }
  sp.g.pdl = opts_.pdl;
  SkinnyGemm(sp);
}

void CudaModelRunner::GrowZeroed(DeviceBuffer& ws, size_t bytes, const char* what) {
  if (bytes <= ws.size()) return;
  DS_CHECK(!capturing_) << what << " workspace first needed inside a graph capture";
  ws.Reset(bytes);
  DS_CUDA_CHECK(cudaMemsetAsync(ws.get(), 0, ws.size(), s_));  // counters start at zero
}

void CudaModelRunner::RunFp8Gemv(const Linear& L, const bf16* xa, int64_t M, float* y, int64_t ldy) {
  Fp8GemvParams p;
  p.a = xa; p.lda = L.K; p.w = L.wq.as<uint8_t>(); p.w_scales = L.s_raw.as<float>();
  p.out = y; p.ldo = ldy; p.M = M; p.N = L.N; p.K = L.K; p.stream = s_; p.pdl = opts_.pdl;
  p.prefetch_weights = opts_.pdl;  // dense weights: written at load only (fp8_gemv.h)
  p.ctas = Fp8GemvRunnerCtas(L.K, CurrentDeviceProps().sms);
  const Fp8GemvPlan plan = Fp8GemvPlanFor(p);
  // One workspace per weight shape: the layout (counters, then partials) depends on the shape,
  // so one shared buffer let a launch with fewer tiles write partials over another shape's
  // counters (session 6 run 10: whole-model logits wrong with the flag on, op tests fine).
  DeviceBuffer& ws = Sc().gemv_ws[{L.N, L.K}];
  GrowZeroed(ws, plan.workspace_bytes, "Fp8Gemv");
  p.workspace = ws.get();
  p.workspace_bytes = ws.size();
  Fp8Gemv(p);
  ++graph_stats_.fp8_gemv_launches;
}

void CudaModelRunner::RunGemvExperts(const GroupedGemmParams& g, int64_t max_group_rows,
                                     int64_t max_active_groups) {
  DS_CHECK(g.offsets != nullptr) << "RunGemvExperts: device offsets only";
  DS_CHECK(g.a_rows == nullptr) << "RunGemvExperts: gathered rows (a_rows) are not taken here";
  Fp8GemvGroupedParams p;
  p.a = g.a; p.lda = g.lda; p.max_rows = g.max_rows; p.offsets = g.offsets;
  p.w = g.w; p.w_bf16 = !g.w_fp8; p.w_scales = g.w_fp8 ? g.w_scales : nullptr;  // not fp8: bf16 experts
  p.out = g.out; p.out_bf16 = g.out_type == DTypeOut::kBF16; p.ldo = g.ldo;
  p.num_experts = g.num_experts; p.N = g.N; p.K = g.K;
  p.max_group_rows = max_group_rows; p.max_active_groups = max_active_groups;
  p.stream = s_; p.pdl = opts_.pdl;
  if (p.w_bf16 && opts_.gemv_experts_bf16_ctas != 0) {
    const int sms = std::max(1, CurrentDeviceProps().sms);
    if (opts_.gemv_experts_bf16_ctas > 0) {
      p.ctas = opts_.gemv_experts_bf16_ctas;
    } else if (opts_.gemv_experts_bf16_ctas == -1) {  // one CTA per SM
      p.ctas = sms;
    } else {  // -2, tile-aligned: one CTA per 128-row tile of the bound's slots while they fit 2 per SM
      const Fp8GemvGroupedPlan auto_plan = Fp8GemvGroupedPlanFor(p);
      const int64_t tiles = auto_plan.slots * auto_plan.tiles;
      p.ctas = tiles <= 2 * int64_t{sms} ? static_cast<int>(tiles) : 0;
    }
  }
  const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(p);
  // One workspace per expert weight shape and type: the layout (counters for E slots, then
  // partials) depends on (E, N, K, w_bf16); its size does not depend on the pass
  // (max_active_groups), so the first eager pass sizes it for every later capture.
  DeviceBuffer& ws = Sc().gemv_experts_ws[{g.num_experts, g.N, g.K, p.w_bf16}];
  GrowZeroed(ws, plan.workspace_bytes, "Fp8GemvGrouped");
  p.workspace = ws.get();
  p.workspace_bytes = ws.size();
  Fp8GemvGrouped(p);
  ++(p.w_bf16 ? graph_stats_.bf16_gemv_expert_launches : graph_stats_.fp8_gemv_expert_launches);
}

void* CudaModelRunner::LtWorkspace() {
  if (!side_) return nullptr;  // the device's shared workspace
  GemmScratch& sc = scratch_[1];
  if (sc.lt_ws.get() == nullptr) {
    DS_CHECK(!capturing_) << "side-branch cuBLASLt workspace first needed inside a graph capture";
    sc.lt_ws.Reset(kGemmWorkspaceBytes);
  }
  return sc.lt_ws.get();
}

void CudaModelRunner::BeginSide() {
  DS_CHECK(!side_ && !side_forked_) << "BeginSide: a side branch is already open or not joined";
  side_ = true;
  if (!(capturing_ && opts_.decode_streams)) return;
  if (fork_ev_ == nullptr) {
    DS_CUDA_CHECK(cudaEventCreateWithFlags(&fork_ev_, cudaEventDisableTiming));
    DS_CUDA_CHECK(cudaEventCreateWithFlags(&join_ev_, cudaEventDisableTiming));
  }
  DS_CUDA_CHECK(cudaEventRecord(fork_ev_, s_));
  DS_CUDA_CHECK(cudaStreamWaitEvent(side_stream_.get(), fork_ev_, 0));
  s_ = side_stream_.get();
  side_forked_ = true;
}

void CudaModelRunner::EndSide() {
  DS_CHECK(side_) << "EndSide without BeginSide";
  side_ = false;
  s_ = stream_.get();
}

void CudaModelRunner::JoinSide() {
  DS_CHECK(!side_) << "JoinSide inside a side branch";
  if (!side_forked_) return;
  DS_CUDA_CHECK(cudaEventRecord(join_ev_, side_stream_.get()));
  DS_CUDA_CHECK(cudaStreamWaitEvent(s_, join_ev_, 0));
  side_forked_ = false;
  ++graph_stats_.side_branches;
}

const int32_t* CudaModelRunner::OneGroupOffsets(int64_t rows) {
  auto it = offs_by_rows_.find(rows);
  if (it == offs_by_rows_.end()) {
    DS_CHECK(!capturing_) << "one-group offsets for " << rows << " rows first needed inside a graph capture";
    const int32_t offs[2] = {0, static_cast<int32_t>(rows)};
    DeviceBuffer b(sizeof offs);
    DS_CUDA_CHECK(cudaMemcpy(b.get(), offs, sizeof offs, cudaMemcpyHostToDevice));
    it = offs_by_rows_.emplace(rows, std::move(b)).first;
  }
  return it->second.as<int32_t>();
}

void CudaModelRunner::HeadGemm(const float* x32, int64_t ldx, int64_t stride_x, int64_t rows, int64_t K, const bf16* w,
                               int64_t ldw, int64_t stride_w, int64_t N, float* y, int64_t ldy, int64_t stride_y,
                               int64_t batch, const bf16* x16) {
  // x32 viewed as [rows, ldx]; only the first `batch` strided K-wide slices are used, but the
  // whole row is split (simple, and the rows are short).
  const bool split = opts_.precise_activations;
  DS_CHECK(x16 == nullptr || !split) << "HeadGemm: a pre-made bf16 input with precise_activations";
  const bf16* xa = x16;  // bf16 activations [rows, ldx]
  GemmScratch& sc = Sc();
  if (xa == nullptr) {
    const int64_t Rr = RoundUp(rows, 64);
    sc.hhi.Reserve(Rr * ldx * sizeof(bf16));
    if (split) sc.hlo.Reserve(Rr * ldx * sizeof(bf16));
    SplitBf16(x32, ldx, rows, ldx, sc.hhi.as<bf16>(), split ? sc.hlo.as<bf16>() : nullptr, ldx, s_, opts_.pdl);
    xa = sc.hhi.as<bf16>();
  }
  if (skinny_on_ && !split && rows <= kSkinnyHeadMaxRows && ldw == K) {
    // Heads as groups: group h reads x[t, h * stride_x ...], streams w + h * stride_w ([N, K]
    // rows) and writes y[t, h * stride_y ...]; no copies.
    SkinnyGemmParams sp{};
    sp.g.a = xa; sp.g.lda = ldx; sp.g.offsets = nullptr; sp.g.max_rows = rows;
    sp.g.w = w; sp.g.w_fp8 = false; sp.g.w_scales = nullptr; sp.g.num_experts = batch; sp.g.N = N; sp.g.K = K;
    sp.g.out = y; sp.g.out_type = DTypeOut::kF32; sp.g.ldo = ldy; sp.g.stream = s_;
    sp.max_group_rows = rows;
    sp.group_stride_a = stride_x; sp.group_stride_w = stride_w; sp.group_stride_out = stride_y;
    RunSkinny(sp);
    return;
  }
  GemmBf16Params g{xa, ldx, w, ldw, y, ldy, DTypeOut::kF32, rows, N, K, false, s_};
  g.batch = batch; g.stride_x = stride_x; g.stride_w = stride_w; g.stride_y = stride_y;
  RunGemmBf16(g, split ? sc.hlo.as<bf16>() : nullptr);
}

void CudaModelRunner::RunGemmBf16(GemmBf16Params g, const bf16* x_lo) {
  g.workspace = LtWorkspace();
  GemmBf16(g);
  if (x_lo == nullptr) return;
  g.x = x_lo;
  g.accumulate = true;
  GemmBf16(g);
}

MoeRoutingParams CudaModelRunner::RoutingParams(const LayerW& LW, int64_t T) {
  MoeRoutingParams rp{};
  rp.logits = rlogits_.as<float>(); rp.bias = LW.bias.get() ? LW.bias.as<float>() : nullptr; rp.n = T;
  rp.num_experts = cfg_.n_routed_experts; rp.top_k = static_cast<int>(cfg_.num_experts_per_tok);
  rp.n_group = cfg_.n_group; rp.topk_group = cfg_.topk_group;
  rp.scoring = cfg_.scoring_func == ScoringFunc::kSoftmax ? 0 : 1;
  rp.topk_method = cfg_.topk_method == TopkMethod::kGreedy ? 0 : cfg_.topk_method == TopkMethod::kGroupLimitedGreedy ? 1 : 2;
  rp.norm_topk_prob = cfg_.norm_topk_prob; rp.routed_scaling_factor = static_cast<float>(cfg_.routed_scaling_factor);
  rp.topk_ids = topk_ids_.as<int32_t>(); rp.topk_weights = topk_w_.as<float>(); rp.stream = s_;
  rp.warp_route = opts_.moe_route_warp;
  return rp;
}

bool CudaModelRunner::PersistentMoe(int l, int64_t T, bool fold_post_norm, bool launch) {
  const LayerW& LW = layers_[l];
  // (moe_route_warp: the kernel routes with the warp form, as the unfused path does by default.)
  if (!opts_.persistent_moe || T != 1 || !FusedDecode(T) || !opts_.fused_norm || opts_.precise_activations ||
      !opts_.moe_route_warp)
    return false;
  // persistent_dense_mlp: a dense layer's MLP through the kernel's dense form (no routed experts,
  // the MLP as its "shared" weights, in 2-4 chunks of I for the down phase's segment pairs).
  const bool dense = !LW.moe;
  if (dense && !opts_.persistent_dense_mlp) return false;
  if (!dense && (LW.experts_fp8 || LW.shared_groups > 0)) return false;
  if (LW.has_mlp && (LW.gate_up.fp8 || LW.down.fp8 || !LW.gate_up.w.get() || !LW.down.w.get())) return false;
  const int64_t Hd = cfg_.hidden_size;
  const int64_t E = dense ? 0 : cfg_.n_routed_experts, K = dense ? 0 : cfg_.num_experts_per_tok;
  const int64_t Is = LW.has_mlp ? LW.gate_up.N / 2 : 0;
  int64_t I = cfg_.moe_intermediate_size;
  if (dense) {
    I = 0;
    for (int64_t c : {2, 4, 3, 1})
      if (I == 0 && Is % c == 0 && (Is / c) % 32 == 0) I = Is / c;
    if (I == 0) return false;
  }
  const bool last = l + 1 == cfg_.num_hidden_layers;
  rlogits_.Reserve(RoundUp(E, 64) * sizeof(float));
  topk_ids_.Reserve(64 * K * 4);
  topk_w_.Reserve(64 * K * 4);
  persist_act_.Reserve((K * I + Is) * sizeof(bf16));
  MoePersistentParams p{};
  if (fold_post_norm) {
    p.attn_out = o32_.as<float>(); p.post_norm_weight = LW.post_norm.as<float>();
  } else {
    p.x32 = h32_.as<float>(); p.x16 = h16_.as<bf16>();
  }
  if (!dense) {
    p.router_w = LW.router.as<float>();
    p.routing = RoutingParams(LW, 1);
  }
  if (!dense) { p.w13 = LW.w13.as<bf16>(); p.w2 = LW.w2.as<bf16>(); }
  if (Is > 0) { p.shared_gu = LW.gate_up.w.as<bf16>(); p.shared_down = LW.down.w.as<bf16>(); }
  p.hidden = Hd; p.num_experts = E; p.top_k = K; p.inter = I; p.shared_inter = Is;
  p.logits = rlogits_.as<float>(); p.topk_ids = topk_ids_.as<int32_t>(); p.topk_weights = topk_w_.as<float>();
  p.act = persist_act_.as<bf16>();
  p.residual = residual_.as<float>();
  // norm_in_attn: the next layer's persistent attention kernel applies its input norm.
  const bool norm_in_attn = opts_.norm_in_attn && !last && attn_pass_ok_ && AttnPersistentLayerOk(l + 1, true);
  // lm_head_norm: the LM head kernel applies the final norm itself.
  const bool norm_in_lm = last && lm_norm_pass_;
  const bool no_norm = norm_in_attn || norm_in_lm;
  p.norm_weight = no_norm ? nullptr : last ? final_norm_.as<float>() : layers_[l + 1].in_norm.as<float>();
  p.eps = static_cast<float>(cfg_.rms_norm_eps);
  if (!no_norm) { p.out32 = h32_.as<float>(); p.out16 = h16_.as<bf16>(); }
  p.sync = persist_sync_.as<uint32_t>(); p.partials = persist_partials_.as<float>();
  p.stream = s_;
  p.blocks_per_sm = opts_.persistent_moe_blocks_per_sm;
  p.gu_ksplit = MoePersistentGuKsplitFor(p, opts_.persistent_moe_gu_ksplit);  // (smaller where the shapes need it)
  if (opts_.persistent_moe_shared_first && p.gu_ksplit == 8) p.router_ready = persist_sync_.as<uint32_t>() + 2;
  if (opts_.moe_router_tagged && !dense) p.router_tagged = persist_router_tagged_.as<uint64_t>();
  p.pdl = opts_.persistent_pdl;
  p.l2_fetch = opts_.moe_l2_fetch;
  p.specialize = opts_.moe_specialize;
  p.carveout = opts_.persistent_carveout < 0 ? -1 : opts_.moe_carveout >= -1 ? opts_.moe_carveout : opts_.persistent_carveout;
  // The kernel's verdict on this layer's shapes and buffers does not change between passes: asked
  // once per (layer, fold form, next-norm form).
  if (persist_ok_.empty()) persist_ok_.assign(4 * cfg_.num_hidden_layers, -1);
  int8_t& ok = persist_ok_[4 * l + (fold_post_norm ? 1 : 0) + (no_norm ? 2 : 0)];
  if (ok < 0) ok = MoePersistentUnsupported(p).empty() ? 1 : 0;
  if (ok == 0) return false;
  if (!launch) return true;
  // moe_ring: the same layer (the same bits) on the TMA ring where it takes this form and shape.
  const MoeRingForm ring_form{opts_.moe_ring_stages, opts_.moe_ring_producers, opts_.moe_ring_early_stages,
                              opts_.moe_ring_warm_route, opts_.moe_ring_evict_first, opts_.moe_ring_grid, opts_.moe_ring_act_tagged,
                              opts_.moe_ring_act_lookahead};
  // (The pass's form here, as MoePersistentTagged for MoE layers: RingMapsFor caches a layer's verdict on
  // its shapes and device, while attn_out / norm_weight may differ from pass to pass.)
  const bool ring_ok = dense ? opts_.moe_ring_dense && opts_.moe_ring_act_tagged && p.attn_out != nullptr && p.norm_weight == nullptr
                             : MoePersistentTagged(p);
  const MoeRingMaps* ring = opts_.moe_ring && ring_ok ? RingMapsFor(l, p, ring_form) : nullptr;
  bool went_pdl = false;
  if (ring != nullptr) MoeRing(p, *ring, ring_form, persist_act_tagged_.as<uint64_t>());
  else went_pdl = MoePersistent(p);
  attn_norm_pending_ = norm_in_attn;
  lm_norm_pending_ = norm_in_lm;
  if (norm_in_attn) ++graph_stats_.moe_norm_skipped_layers;
  // (MoeRing counts as the form it computes, MoePersistentTagged's: gu_ksplit 8, shared experts
  // first, the specialised form, the tagged logits; not l2_fetch: its copies are tensor-map copies.
  // Its dense form counts as none of those.)
  const bool ring_moe = ring != nullptr && !dense, ring_dense = ring != nullptr && dense;
  if (ring_moe) ++graph_stats_.moe_ring_layers;
  if (ring_moe && ring_form.act_tagged) ++graph_stats_.moe_ring_act_tagged_layers;
  if (ring_dense) ++graph_stats_.moe_ring_dense_layers;
  if (p.gu_ksplit > 1 && !ring_dense) ++graph_stats_.moe_gu_ksplit_layers;
  if (p.router_ready != nullptr && !ring_dense) ++graph_stats_.moe_shared_first_layers;
  if (p.l2_fetch > 0 && !went_pdl && ring == nullptr) ++graph_stats_.moe_l2_fetch_layers;
  if (!went_pdl && !ring_dense && MoePersistentSpecialized(p)) ++graph_stats_.moe_specialized_layers;
  if (!went_pdl && MoePersistentTagged(p)) ++graph_stats_.moe_router_tagged_layers;
  if (p.carveout >= 0) ++graph_stats_.persistent_carveout_launches;
  if (went_pdl) ++graph_stats_.persistent_pdl_launches;
  ++graph_stats_.fused_launches;
  // (persistent_moe_layers counts MoE layers; dense layers count on their own.)
  ++(dense ? graph_stats_.persistent_dense_layers : graph_stats_.persistent_moe_layers);
  Mark(dense ? "dense_mlp" : "moe_experts");
  return true;
}

const MoeRingMaps* CudaModelRunner::RingMapsFor(int l, const MoePersistentParams& p, const MoeRingForm& form) {
  if (ring_ok_.empty()) {
    ring_ok_.assign(cfg_.num_hidden_layers, -1);
    ring_maps_.resize(cfg_.num_hidden_layers);
  }
  if (ring_ok_[l] < 0) {
    const std::string why = MoeRingUnsupported(p, form);
    ring_ok_[l] = why.empty() ? 1 : 0;
    if (ring_ok_[l] == 1) {
      ring_maps_[l] = {MoeRingMakeMaps(p), {p.w13, p.w2, p.shared_gu, p.shared_down}};
    } else if (l == 0 || ring_ok_[l - 1] != 0) {
      DS_LOG(INFO) << "moe_ring: layer " << l << " on MoePersistent: " << why;
    }
  }
  if (ring_ok_[l] != 1) return nullptr;
  const auto& [maps, weights] = ring_maps_[l];
  DS_CHECK(weights[0] == p.w13 && weights[1] == p.w2 && weights[2] == p.shared_gu && weights[3] == p.shared_down)
      << "moe_ring: layer " << l << "'s weights moved after its tensor maps were made";
  return &maps;
}

bool CudaModelRunner::Mlp(int l, int64_t T) {
  const LayerW& LW = layers_[l];
  const int64_t Hd = cfg_.hidden_size, Tr = RoundUp(T, 64) + 64;
  float* out = mlp32_.as<float>();
  bf16* h16 = h16_.as<bf16>();
  const float* hn = h32_.as<float>();  // post_attention_layernorm output [T, hidden]
  auto dense = [&](const Linear& gu, const Linear& down) {
    const int64_t I = gu.N / 2;
    gu32_.Reserve(Tr * 2 * I * sizeof(float));
    // fused_silu16 (decode-size pass, not precise, a down projection that reads bf16(act):
    // LinearInput::kBf16): SiLU-and-mul writes act as bf16 [T, I] -- the same fp32 value
    // a / (1 + exp(-a)) * b in either instantiation of its kernel, stored as
    // __float2bfloat16_rn of it, the rounding SplitBf16 applies -- and the down projection
    // reads it as x16 (same GEMM, same layout: no SplitBf16 launch), bit-identical. Not where
    // the down projection quantises fp32 act to e4m3 (cuBLASLt FP8) or splits it hi + lo.
    const bool silu16 = opts_.fused_silu16 && !opts_.precise_activations && FusedDecode(T) &&
                        LinearInputFor(down, T, Hd) == LinearInput::kBf16;
    // Tr rows: >= the RoundUp(T, 64) rows the in-kernel FP8 GEMM reads (LinearFwd's Mr).
    if (silu16) act16_.Reserve(Tr * I * sizeof(bf16));  // act bf16 [T, I]
    else act32_.Reserve(Tr * I * sizeof(float));        // act fp32 [T, I]
    // fused_norm: h16 (the post-attention norm's bf16 copy) instead of another split of hn
    LinearFwd(gu, hn, Hd, T, gu32_.as<float>(), 2 * I, opts_.fused_norm && FusedDecode(T) ? h16 : nullptr);
    SiluAndMul({gu32_.as<float>(), 2 * I, silu16 ? act16_.get() : act32_.get(), I,
                silu16 ? DTypeOut::kBF16 : DTypeOut::kF32, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, T, I, s_, opts_.pdl});
    if (silu16) {
      ++graph_stats_.fused_launches;
      ++graph_stats_.fused_silu16_mlps;
      LinearFwd(down, nullptr, I, T, out, Hd, act16_.as<bf16>());
    } else {
      LinearFwd(down, act32_.as<float>(), I, T, out, Hd);
    }
  };
  if (!LW.moe) {
    dense(LW.gate_up, LW.down);
    Mark("dense_mlp");
    return false;
  }
  const int64_t E = cfg_.n_routed_experts, K = cfg_.num_experts_per_tok, I = cfg_.moe_intermediate_size;
  const bool skinny = skinny_on_ && T * K <= kSkinnyMoeMaxAvgRows * E;
  // persistent_moe: the whole layer (and the next norm) in one cooperative launch for one token
  // (RunPass folds the post-attention norm in too where it can; this is the form after a norm
  // already applied, e.g. by o_proj's epilogue).
  if (PersistentMoe(l, T, false, true)) return true;
  // Small-batch fusions (CudaRunnerOptions::fused_*): routing + permute in one kernel; the S
  // stacked shared experts as groups E .. E + S - 1 (T rows each, after the T * K routed rows)
  // of the same GEMM / SiLU launches, whose down-proj output is then fp32.
  const bool fuse_route = (opts_.fused_moe_route || opts_.fused_moe_shared) && skinny && FusedDecode(T);
  const int64_t S = fuse_route && opts_.fused_moe_shared ? LW.shared_groups : 0;
  // Shared experts (unless stacked): out = their MLP of hn. decode_streams: a side branch (reads
  // h32 / h16, writes gu32, act and out) beside the router, routing and routed experts (read
  // h32 / h16, write their own buffers), joined before the combine reads out.
  const bool shared_mlp = LW.has_mlp && S == 0;
  const bool side_shared = shared_mlp && opts_.decode_streams && FusedDecode(T);
  if (side_shared) {
    BeginSide();
    dense(LW.gate_up, LW.down);
    EndSide();
  }
  // fp8_gemv_experts / gemv_experts_bf16: FP8 / BF16 experts of a pass of <= 8 tokens (the
  // skinny path: unpadded segments, <= T rows per group) on the grouped GEMV. The condition
  // depends on T only through T <= 8, which the graph buckets 1, 2, 4, 8 never cross: a padded
  // graph step and its eager warm-up pass take the same kernel.
  // fp8_gemv_experts_min_tokens is a power of two, so T >= it holds for a bucket exactly when it
  // holds for the passes padded to that bucket.
  const bool gemv_experts =
      (LW.experts_fp8 ? opts_.fp8_gemv_experts && T >= opts_.fp8_gemv_experts_min_tokens
                      : opts_.gemv_experts_bf16 && T >= opts_.gemv_experts_bf16_min_tokens) &&
      skinny && T <= kFp8GemvGroupedMaxRows;
  // fused_router_route: the router GEMV, the routing and the permutation's offsets / pos /
  // src_row in one launch (moe_router_route.h), and the routed gate_up GEMM (SkinnyGemm only:
  // not with the grouped GEMV) gathers the token rows of h16 by src_row instead of a permuted
  // copy. Like fuse_route, it depends on T only through the graph buckets' bounds.
  const bool router_route = opts_.fused_router_route && fuse_route && S == 0 && !gemv_experts &&
                            opts_.router_gemv && Hd % 4 == 0 && MoeRouterRouteSupported(T, E, K);
  // Router (fp32, as the CPU and transformers), routing.
  rlogits_.Reserve(Tr * E * sizeof(float));
  topk_ids_.Reserve(Tr * K * 4);
  topk_w_.Reserve(Tr * K * 4);
  // router_logits: [T, E] fp32 = hn @ router^T (decode sizes: one RouterGemv launch)
  if (router_route) {
    // launched below, with the routing
  } else if (opts_.router_gemv && T <= kRouterGemvMaxRows && Hd % 4 == 0) {
    RouterGemv({h32_.as<float>(), Hd, LW.router.as<float>(), Hd, rlogits_.as<float>(), E, T, E, Hd, s_, opts_.pdl});
  } else {
    GemmF32({h32_.as<float>(), Hd, LW.router.as<float>(), Hd, rlogits_.as<float>(), E, T, E, Hd, s_});
  }
  const MoeRoutingParams rp = RoutingParams(LW, T);
  // Permute, expert GEMMs, activation. Decode sizes use the skinny kernel, which needs no
  // padded segments (row_align 1: the permute, SiLU and GEMMs touch only the T * K rows).
  const int64_t align = skinny ? 1 : kGroupedGemmRowAlign;
  const int64_t cap = PermuteCapacity(T, K, E, align) + S * T;
  moe_offs_.Reserve((E + S + 1) * 4);
  moe_pos_.Reserve(Tr * K * 4);
  moe_src_.Reserve(cap * 4);
  moe_ws_.Reserve(2 * E * 4);
  xp16_.Reserve(cap * Hd * sizeof(bf16));
  egu32_.Reserve(cap * 2 * I * sizeof(float));
  eact16_.Reserve(cap * I * sizeof(bf16));
  ey16_.Reserve(cap * Hd * (S > 0 ? sizeof(float) : sizeof(bf16)));  // bf16, or fp32 with stacked shared experts
  if (router_route) {
    MoeRouterRoute({{h32_.as<float>(), Hd, LW.router.as<float>(), Hd, rlogits_.as<float>(), E, T, E, Hd, s_, false}, rp,
                    moe_offs_.as<int32_t>(), moe_pos_.as<int32_t>(), moe_src_.as<int32_t>(),
                    route_sync_.as<uint32_t>(), s_, opts_.pdl, opts_.router_route_fast});
    ++graph_stats_.fused_launches;
    ++graph_stats_.router_route_layers;
    if (opts_.router_route_fast && MoeRouterRouteFastApplies(T, E, rp.topk_method, rp.n_group))
      ++graph_stats_.router_route_fast_layers;
  } else if (fuse_route) {
    MoeRoutePermute({rp, h16, Hd, Hd, static_cast<int>(S), moe_offs_.as<int32_t>(), moe_pos_.as<int32_t>(),
                     moe_src_.as<int32_t>(), xp16_.as<bf16>(), route_sync_.as<uint32_t>(), s_, opts_.pdl});
    ++graph_stats_.fused_launches;
    graph_stats_.fused_shared_layers += S > 0;
  } else {
    MoeRouting(rp);
    MoePermute({topk_ids_.as<int32_t>(), T, K, E, align, h16, Hd, Hd, moe_offs_.as<int32_t>(),
                moe_pos_.as<int32_t>(), moe_src_.as<int32_t>(), xp16_.as<bf16>(), moe_ws_.as<int32_t>(), s_});
  }
  GroupedGemmParams g{};
  g.a = xp16_.as<bf16>(); g.lda = Hd; g.offsets = moe_offs_.as<int32_t>(); g.max_rows = cap;
  if (router_route) { g.a = h16; g.a_rows = moe_src_.as<int32_t>(); }  // the token rows, gathered
  g.w = LW.w13.get(); g.w_fp8 = LW.experts_fp8; g.w_scales = LW.experts_fp8 ? LW.w13_s.as<float>() : nullptr;
  g.num_experts = E + S; g.N = 2 * I; g.K = Hd; g.out = egu32_.get(); g.out_type = DTypeOut::kF32; g.ldo = 2 * I;
  g.stream = s_;
  g.pdl = opts_.pdl;  // honoured by the skinny kernel only
  Mark("moe_route_permute");
  // A token picks an expert at most once: at most T rows per group, min(E, T * K) groups used.
  GroupedGemmParams g2 = g;
  g2.a = eact16_.as<bf16>(); g2.a_rows = nullptr; g2.lda = I; g2.w = LW.w2.get(); g2.w_scales = LW.experts_fp8 ? LW.w2_s.as<float>() : nullptr;
  g2.N = Hd; g2.K = I; g2.out = ey16_.get(); g2.out_type = S > 0 ? DTypeOut::kF32 : DTypeOut::kBF16; g2.ldo = Hd;
  // FP8 experts with DeepSeek's FP8-activation numerics (fp8_gemm "cublas" / "cublas-all"):
  // e4m3 x e4m3 block-scaled grouped GEMMs on the sm_90a kernel, the activations quantised per
  // 1x128 group (w13 input from the permuted bf16 rows, w2 input by SiLU-and-mul straight
  // from fp32). Elsewhere FP8 experts keep bf16 activations (in-kernel weight dequantisation).
  GroupedGemmSm90Params f1{}, f2{};
  bool fp8x8 = false;
  if (!skinny && sm90_gg_on_ && LW.experts_fp8 && use_cublas_fp8_ && GroupedGemmSm90Available()) {
    const int64_t kmax = std::max(Hd, I);
    eq8_.Reserve(cap * kmax);
    es_.Reserve(cap * ((kmax + 127) / 128) * sizeof(float));
    f1.input = Sm90GemmInput::kFp8;
    f1.a = eq8_.get(); f1.lda = Hd; f1.a_scales = es_.as<float>(); f1.offsets = moe_offs_.as<int32_t>(); f1.max_rows = cap;
    f1.w = LW.w13.get(); f1.w_scales = LW.w13_s.as<float>(); f1.num_experts = E; f1.N = 2 * I; f1.K = Hd;
    f1.out = egu32_.get(); f1.out_type = DTypeOut::kF32; f1.ldo = 2 * I; f1.stream = s_;
    f2 = f1;
    f2.lda = I; f2.w = LW.w2.get(); f2.w_scales = LW.w2_s.as<float>(); f2.N = Hd; f2.K = I;
    f2.out = ey16_.get(); f2.out_type = DTypeOut::kBF16; f2.ldo = Hd;
    fp8x8 = GroupedGemmSm90Unsupported(f1).empty() && GroupedGemmSm90Unsupported(f2).empty();
  }
  // sm_90a workspace, reserved before the GEMMs (sized by E, cap and the dims only).
  size_t ws = 0;
  if (fp8x8) {
    ws = std::max(GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kFp8, E, cap, 2 * I, Hd),
                  GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kFp8, E, cap, Hd, I));
  } else if (!skinny) {
    g.sm90 = g2.sm90 = sm90_gg_on_;
    g.sm90_mixed = g2.sm90_mixed = opts_.sm90_mixed_gemm;  // FP8 experts, bf16 activations
    ws = std::max(GroupedGemmWorkspaceBytes(g), GroupedGemmWorkspaceBytes(g2));
  }
  if (ws > 0) moe_gg_ws_.Reserve(ws);
  for (GroupedGemmParams* gp : {&g, &g2}) { gp->workspace = moe_gg_ws_.get(); gp->workspace_bytes = moe_gg_ws_.size(); }
  for (GroupedGemmSm90Params* fp : {&f1, &f2}) { fp->workspace = moe_gg_ws_.get(); fp->workspace_bytes = moe_gg_ws_.size(); }
  // BF16 experts: the down GEMM may stay on SkinnyGemm (gemv_experts_bf16_down).
  // The combine (+ residual + next norm): MoeCombineNorm after the experts, or with
  // fused_down_combine the down GEMM's epilogue (skinny_gemm.h, SkinnyCombineEpilogue) for
  // passes of <= kDownCombineMaxTokens tokens whose down GEMM is SkinnyGemm's plain kernel: one
  // launch fewer, the same bits. The shared experts' output (the combine's base) must then be
  // ready before the down GEMM: the side branch joins there instead of before the combine.
  const bool fuse_norm = opts_.fused_norm && FusedDecode(T);
  const bool last = l + 1 == cfg_.num_hidden_layers;
  const auto combine_params = [&]() {
    // out (+)= shared + sum_j w_j y_j, and with fuse_norm: residual += that, h32 = the next norm.
    MoeCombineNormParams cp{};
    cp.y = ey16_.get(); cp.y_bf16 = S == 0; cp.ldy = Hd; cp.round_y_bf16 = S > 0;
    cp.pos = moe_pos_.as<int32_t>(); cp.weights = topk_w_.as<float>(); cp.n = T; cp.top_k = K; cp.d = Hd;
    if (LW.has_mlp && S == 0) { cp.base = out; cp.ld_base = Hd; }
    cp.num_shared = static_cast<int>(S); cp.shared_row0 = T * K;
    cp.stream = s_;
    cp.pdl = opts_.pdl;
    if (!fuse_norm) {
      cp.moe_out = out; cp.ld_moe_out = Hd;
      return cp;
    }
    cp.residual = residual_.as<float>(); cp.ldres = Hd;
    cp.norm_weight = last ? final_norm_.as<float>() : layers_[l + 1].in_norm.as<float>();
    cp.eps = static_cast<float>(cfg_.rms_norm_eps);
    cp.out = h32_.as<float>(); cp.ldout = Hd;
    cp.out_bf16 = h16_.as<bf16>(); cp.ldout_bf16 = Hd;  // the next projections' bf16 input
    return cp;
  };
  const bool down_on_gemv = gemv_experts && (LW.experts_fp8 || opts_.gemv_experts_bf16_down);
  SkinnyGemmParams down_sp{g2, T, std::min(E, T * K) + S};
  SkinnyCombineEpilogue down_epi{};
  const bool down_combine = opts_.fused_down_combine && fuse_norm && S == 0 && skinny && !fp8x8 && !down_on_gemv &&
                            T <= kDownCombineMaxTokens && SkinnyCombineFits(down_sp, Hd, K);
  if (down_combine) {
    down_epi.cn = combine_params();
    down_epi.counter = down_combine_sync_.as<uint32_t>();
    down_sp.combine = &down_epi;
  }
  const auto expert_gemm = [&](const GroupedGemmParams& gp, bool down) {
    if (gemv_experts && (LW.experts_fp8 || !down || opts_.gemv_experts_bf16_down))
      RunGemvExperts(gp, T, std::min(E, T * K) + S);
    else if (skinny) SkinnyGemm({gp, T, std::min(E, T * K) + S});
    else GroupedGemm(gp);
  };
  if (fp8x8) {
    Fp8QuantParams qp{xp16_.get(), true, Hd, cap, Hd, 128, eq8_.as<uint8_t>(), Hd, es_.as<float>(), ScaleLayout::kTokenMajor, s_};
    Fp8QuantizePerTokenGroup(qp);
    GroupedGemmSm90(f1);
    SiluAndMul({egu32_.as<float>(), 2 * I, nullptr, I, DTypeOut::kBF16, eq8_.as<uint8_t>(), I, es_.as<float>(),
                ScaleLayout::kTokenMajor, cap, I, s_, opts_.pdl});
    GroupedGemmSm90(f2);
  } else {
    // fused_gate_up_silu: gate_up on SkinnyGemm writes act = silu(gate) * up (bf16) itself.
    SkinnyGemmParams gu_sp{g, T, std::min(E, T * K) + S};
    gu_sp.g.out = eact16_.get(); gu_sp.g.out_type = DTypeOut::kBF16; gu_sp.g.ldo = I;
    gu_sp.silu_pair = true;
    const bool gu_silu =
        opts_.fused_gate_up_silu && skinny && !gemv_experts && S == 0 && FusedDecode(T) && SkinnySiluFits(gu_sp);
    if (gu_silu) {
      SkinnyGemm(gu_sp);
      ++graph_stats_.fused_launches;
      ++graph_stats_.gate_up_silu_layers;
    } else {
      expert_gemm(g, false);
      SiluAndMul({egu32_.as<float>(), 2 * I, eact16_.get(), I, DTypeOut::kBF16, nullptr, 0, nullptr,
                  ScaleLayout::kGroupMajor, cap, I, s_, opts_.pdl});
    }
    if (down_combine) {
      if (side_shared) JoinSide();
      else if (shared_mlp) dense(LW.gate_up, LW.down);
      SkinnyGemm(down_sp);  // with the combine + norm in its last block
      ++graph_stats_.fused_launches;
      ++graph_stats_.down_combine_layers;
    } else {
      expert_gemm(g2, true);
    }
  }
  // Shared experts write `out` (unless stacked), the routed experts are added with their weights.
  Mark("moe_experts");
  if (down_combine) {
    Mark("moe_shared");
    return true;
  }
  if (side_shared) JoinSide();  // with the side branch, moe_shared is the wait for it
  else if (shared_mlp) dense(LW.gate_up, LW.down);
  Mark("moe_shared");
  if (!fuse_norm && S == 0) {
    MoeCombine({ey16_.get(), true, Hd, moe_pos_.as<int32_t>(), topk_w_.as<float>(), T, K, Hd, out, Hd, LW.has_mlp, s_});
    return false;
  }
  MoeCombineNormParams cn = combine_params();
  if (fuse_norm && CombineNormSplitOn(T)) {
    SetCombineNormSplit(&cn);
    ++graph_stats_.combine_norm_split_layers;
  }
  MoeCombineNorm(cn);
  if (!fuse_norm) return false;
  ++graph_stats_.fused_launches;
  return true;
}

bool CudaModelRunner::LmHeadArgmaxOk(int64_t R, bool fuse_norm) const {
  // One row, its bf16 copy written by the final norm (fused_norm), with graph_io (its graphs take
  // the kernel: without it they keep cuBLASLt, so eager passes must too), the plain bf16 GEMM's
  // input (not precise_activations), a shape the kernel takes on this device (fixed per runner:
  // decided once).
  if (!opts_.lm_head_argmax || !opts_.graph_io || R != 1 || !fuse_norm) return false;
  if (lm_argmax_shape_ok_ < 0)
    lm_argmax_shape_ok_ = LinearInputFor(lm_head_lin_, 1, cfg_.vocab_size) == LinearInput::kBf16 &&
                          LmHeadArgmaxSupported(cfg_.vocab_size, cfg_.hidden_size).empty();
  return lm_argmax_shape_ok_ == 1;
}

void CudaModelRunner::RunLmHeadArgmax(const bf16* x, int32_t* out_id) {
  DS_CHECK((x == nullptr) == lm_norm_pending_) << "RunLmHeadArgmax: x " << (x == nullptr ? "null" : "given")
                                               << " but lm_norm_pending_ " << lm_norm_pending_;
  if (lm_argmax_cnt_.size() == 0) {  // once, outside any capture (a graph's eager pass comes first)
    lm_argmax_ws_.Reserve(LmHeadArgmaxWorkspaceBytes());
    lm_argmax_cnt_.Reserve(4);
    DS_CUDA_CHECK(cudaMemsetAsync(lm_argmax_cnt_.get(), 0, 4, s_));
  }
  LmHeadArgmaxParams lp;
  lp.x = x;
  if (x == nullptr) {  // lm_head_norm: the final norm of the residual stream in the kernel
    lp.in_residual = residual_.as<float>();
    lp.norm_w = final_norm_.as<float>();
    lp.eps = static_cast<float>(cfg_.rms_norm_eps);
    ++graph_stats_.lm_head_norm;
  }
  lp.w = lm_head_lin_.w.as<bf16>();
  lp.n = cfg_.vocab_size;
  lp.k = cfg_.hidden_size;
  lp.logits = logits_.as<float>();
  lp.out_id = out_id;
  lp.ws = lm_argmax_ws_.get();
  lp.counter = lm_argmax_cnt_.as<uint32_t>();
  lp.stream = s_;
  LmHeadArgmax(lp);
  ++graph_stats_.lm_head_argmax;
}

void CudaModelRunner::SampleRows(const float* d_logits, int64_t ld, int64_t R, const std::vector<RowSampling>& rs,
                                 int32_t* host_ids) {
  samp_host_ids_.Reserve(R * 4);
  SampleRowsEnqueue(d_logits, ld, R, rs, samp_host_ids_.get());
  if (tl_post_pending_) {
    StepMark(3);
    tl_post_pending_ = false;
  }
  DS_CUDA_CHECK(cudaStreamSynchronize(s_));
  std::memcpy(host_ids, samp_host_ids_.get(), R * 4);
}

void CudaModelRunner::SampleRowsEnqueue(const float* d_logits, int64_t ld, int64_t R, const std::vector<RowSampling>& rs,
                                        void* host) {
  // Never below a graph bucket's rows: a reallocation would lose the ids a queued step's
  // prev_sample_rows gather still reads (overlap scheduling).
  samp_ids_.Reserve(std::max<int64_t>(R, kMaxGraphBucket) * 4);
  SampleRowsToDevice(d_logits, ld, R, rs, samp_ids_.as<int32_t>());
  // Through pinned memory: one DMA, no staging copy.
  DS_CUDA_CHECK(cudaMemcpyAsync(host, samp_ids_.get(), R * 4, cudaMemcpyDeviceToHost, s_));
}

void CudaModelRunner::SampleRowsToDevice(const float* d_logits, int64_t ld, int64_t R, const std::vector<RowSampling>& rs,
                                         int32_t* dev_ids) {
  DS_CHECK(static_cast<int64_t>(rs.size()) == R) << "SampleRows: " << rs.size() << " settings for " << R << " rows";
  bool greedy = true;
  for (int64_t r = 0; r < R; ++r) greedy = greedy && rs[r].temperature <= 0.0f;
  // The settings, [seed R u64 | step R u64 | temperature R f32 | top_p R f32 | top_k R i32], in
  // one copy from one of two pinned buffers used in turn (a pageable copy would wait for the
  // stream, i.e. for the step: no overlap for sampled rows). A buffer is rewritten two sampled
  // steps later, when the older one is done (Launch keeps at most two in flight).
  const int64_t cap = std::max<int64_t>(R, kMaxGraphBucket);
  samp_cfg_.Reserve(cap * 28);
  char* dcfg = static_cast<char*>(samp_cfg_.get());
  if (!greedy) {  // the greedy argmax reads none of the settings: no copy in the step's tail
    PinnedHostBuffer& h = samp_cfg_host_[samp_cfg_flip_];
    samp_cfg_flip_ ^= 1;
    if (h.size() < static_cast<size_t>(cap * 28)) {
      DS_CUDA_CHECK(cudaStreamSynchronize(s_));  // a queued copy may still read the old buffer
      h.Reserve(cap * 28);
    }
    char* hc = static_cast<char*>(h.get());
    for (int64_t r = 0; r < R; ++r) {
      reinterpret_cast<uint64_t*>(hc)[r] = rs[r].seed;
      reinterpret_cast<uint64_t*>(hc + 8 * R)[r] = rs[r].step;
      reinterpret_cast<float*>(hc + 16 * R)[r] = rs[r].temperature;
      reinterpret_cast<float*>(hc + 20 * R)[r] = rs[r].top_p;
      reinterpret_cast<int32_t*>(hc + 24 * R)[r] = rs[r].top_k;
    }
    DS_CUDA_CHECK(cudaMemcpyAsync(dcfg, hc, R * 28, cudaMemcpyHostToDevice, s_));
  }
  SampleParams sp{d_logits, ld, R, cfg_.vocab_size, reinterpret_cast<const float*>(dcfg + 16 * R),
                  reinterpret_cast<const float*>(dcfg + 20 * R), reinterpret_cast<const int32_t*>(dcfg + 24 * R),
                  reinterpret_cast<const uint64_t*>(dcfg), reinterpret_cast<const uint64_t*>(dcfg + 8 * R),
                  dev_ids, s_, opts_.pdl};
  sp.all_greedy = greedy;
  sp.ws = &samp_ws_;  // reused in stream order: a sampled (temperature > 0) step does not wait either
  sp.device_sort = opts_.sample_device_sort;
  sp.argmax_split = opts_.argmax_split;
  Sample(sp);
}

void CudaModelRunner::RunPass(const ForwardBatch& b, float* logits_out, int32_t* ids_out) {
  const int64_t T = b.num_tokens(), Hd = cfg_.hidden_size, V = cfg_.vocab_size, Tr = RoundUp(T, 64) + 64;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  ResetSide();  // the main stream, whatever an earlier pass's error left
  const int32_t* d_ids = nullptr;
  if (gin_) {  // graph mode: inputs already staged in the graph's buffers
    d_ids = gin_->ids.as<int32_t>();
    d_pos_ = gin_->pos.as<int32_t>();
    d_slots_ = gin_->slots.as<int64_t>();
  } else {
    std::vector<int64_t> slots(T);
    for (int64_t s = 0; s < b.num_seqs(); ++s)
      for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t) {
        const int32_t p = b.positions[t];
        slots[t] = static_cast<int64_t>(b.block_tables[s * b.max_blocks + p / kBlockSize]) * kBlockSize + p % kBlockSize;
      }
    ids_.Reserve(Tr * 4);
    pos_.Reserve(Tr * 4);
    slots_.Reserve(Tr * 8);
    DS_CUDA_CHECK(cudaMemcpyAsync(ids_.get(), b.token_ids.data(), T * 4, cudaMemcpyHostToDevice, s_));
    DS_CUDA_CHECK(cudaMemcpyAsync(pos_.get(), b.positions.data(), T * 4, cudaMemcpyHostToDevice, s_));
    DS_CUDA_CHECK(cudaMemcpyAsync(slots_.get(), slots.data(), T * 8, cudaMemcpyHostToDevice, s_));
    d_ids = ids_.as<int32_t>();
    d_pos_ = pos_.as<int32_t>();
    d_slots_ = slots_.as<int64_t>();
  }
  for (DeviceBuffer* buf : {&residual_, &h32_, &o32_, &mlp32_}) buf->Reserve(Tr * Hd * sizeof(float));
  h16_.Reserve(Tr * Hd * sizeof(bf16));
  float* residual = residual_.as<float>();
  prof_prefix_ = T > b.num_seqs() ? "prefill/" : "decode/";
  Mark("start");
  EmbeddingParams ep{d_ids, T, embed_.get(), true, V, Hd, residual, s_, opts_.pdl};
  if (gin_ && gio_q_ >= 0) {  // graph_io: the previous step's sampled ids gathered here
    ep.prev_rows = gin_->prev.as<int32_t>();
    ep.prev_ids = GraphIds(gio_q_ ^ 1);
  }
  Embedding(ep);
  // fused_norm: every norm also writes its bf16 copy h16 (the next projections' input; no
  // F32ToBf16 / SplitBf16 launches), and an MoE layer's combine applies the next norm (normed).
  const bool fuse_norm = opts_.fused_norm && FusedDecode(T);
  const auto norm = [&](const float* x, float* res, const DeviceBuffer& w) {
    if (res != nullptr && fuse_norm && CombineNormSplitOn(T)) {
      // combine_norm_split: the residual form as MoeCombineNorm with no experts (acc = x, then
      // RmsNorm's x + residual; the header's S = 0 identity: RmsNorm's bits), split over blocks.
      MoeCombineNormParams cn{};
      cn.y = x; cn.ldy = Hd; cn.n = T; cn.top_k = 0; cn.d = Hd;
      cn.base = x; cn.ld_base = Hd;
      cn.residual = res; cn.ldres = Hd; cn.norm_weight = w.as<float>(); cn.eps = eps;
      cn.out = h32_.as<float>(); cn.ldout = Hd;
      cn.out_bf16 = h16_.as<bf16>(); cn.ldout_bf16 = Hd;
      cn.stream = s_;
      SetCombineNormSplit(&cn);
      MoeCombineNorm(cn);
      ++graph_stats_.fused_launches;
      ++graph_stats_.norm_split_launches;
      return;
    }
    RmsNormParams np{x, Hd, res, res ? Hd : 0, w.as<float>(), h32_.get(), Hd, DTypeOut::kF32, T, Hd, eps, s_, opts_.pdl};
    if (fuse_norm) { np.out_bf16 = h16_.get(); np.ld_out_bf16 = Hd; ++graph_stats_.fused_launches; }
    RmsNorm(np);
  };
  bool normed = false;  // h32 (+ h16) already hold this layer's input norm (the previous MoE combine's)
  attn_pass_ok_ = AttnPersistentPassOk(b, T);
  attn_norm_pending_ = false;
  // The LM head's rows, and whether it runs as LmHeadArgmax (graphs: with graph_io's ids); decided
  // here once, so that lm_head_norm (only with T == 1: MoePersistent) follows the same verdict.
  const int64_t R = gin_ ? T : static_cast<int64_t>(b.logits_indices.size());
  const bool lm_argmax = (!gin_ || gio_q_ >= 0) && LmHeadArgmaxOk(R, fuse_norm);
  lm_norm_pass_ = opts_.lm_head_norm && T == 1 && lm_argmax && LmHeadArgmaxNormSupported(cfg_.hidden_size);
  lm_norm_pending_ = false;
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerW& LW = layers_[l];
    // h = input_layernorm(residual (+= previous MLP output)). norm_in_attn: layer 0's persistent
    // attention kernel normalises the embeddings itself, as later layers' do after an MoE kernel.
    if (l == 0 && opts_.norm_in_attn && attn_pass_ok_ && AttnPersistentLayerOk(0, true)) attn_norm_pending_ = true;
    else if (l == 0) norm(residual, nullptr, LW.in_norm);
    else if (!normed) norm(mlp32_.as<float>(), residual, LW.in_norm);
    Mark("norms_embed_combine");
    // (norm_in_attn: the attention kernel normalises the residual itself; where it does not run
    // after all, the norm runs here first.)
    if (attn_norm_pending_ && !AttnPersistent(l, b, T)) {
      attn_norm_pending_ = false;
      norm(residual, nullptr, LW.in_norm);
      Mla(l, b, T);
    } else if (!attn_norm_pending_) {
      Mla(l, b, T);
    }
    attn_norm_pending_ = false;
    // residual += attn; h = post_attention_layernorm(residual) (fp32 h32 and its bf16 copy h16;
    // fused_oproj_norm: o_proj's last block did it)
    // persistent_moe: the MoE kernel applies this norm itself (every block), one launch fewer.
    const bool moe_fold = !post_norm_fused_ && PersistentMoe(l, T, true, false);
    if (!post_norm_fused_ && !moe_fold) {
      norm(o32_.as<float>(), residual, LW.post_norm);
      if (!fuse_norm) F32ToBf16(h32_.as<float>(), Hd, h16_.as<bf16>(), Hd, T, Hd, s_, opts_.pdl);
    }
    Mark("norms_embed_combine");
    normed = moe_fold ? PersistentMoe(l, T, true, true) : Mlp(l, T);
  }
  // Final norm (with the last residual add) and the LM head on the requested rows.
  if (cfg_.num_hidden_layers > 0 && !normed) norm(mlp32_.as<float>(), residual, final_norm_);
  else if (cfg_.num_hidden_layers == 0) norm(residual, nullptr, final_norm_);  // (normed: the last MoE combine's)
  if (R == 0) {
    DS_CUDA_CHECK(cudaStreamSynchronize(s_));
    Mark("final_norm_lm_head");
    CollectMarks();
    return;
  }
  const int64_t Rr = RoundUp(R, 64) + 64;
  if (gin_) {
    // Graph mode: logits of every row (padded ones included) stay in logits_; the caller
    // copies the rows it needs after the replay.
    logits_.Reserve(Rr * V * sizeof(float));
    // lm_head_argmax: one row's LM head and greedy id in one launch (graph_io's id buffer).
    if (lm_argmax) {
      RunLmHeadArgmax(lm_norm_pending_ ? nullptr : h16_.as<bf16>(), GraphIds(gio_q_));
      Mark("final_norm_lm_head");
      return;
    }
    DS_CHECK(!lm_norm_pending_) << "lm_head_norm without LmHeadArgmax";
    LinearFwd(lm_head_lin_, h32_.as<float>(), Hd, R, logits_.as<float>(), V, fuse_norm ? h16_.as<bf16>() : nullptr);
    Mark("final_norm_lm_head");
    if (gio_q_ >= 0) {  // graph_io: every row's greedy id (Sample's argmax kernel) into GraphIds(q)
      SampleParams sp{};
      sp.logits = logits_.as<float>();
      sp.ld = V;
      sp.rows = R;
      sp.vocab = V;
      sp.out_ids = GraphIds(gio_q_);
      sp.stream = s_;
      sp.pdl = opts_.pdl;
      sp.all_greedy = true;
      sp.ws = &graph_argmax_ws_;  // the split argmax (its buffers sized by the eager warm-up, before capture)
      sp.argmax_split = opts_.argmax_split;
      Sample(sp);
      Mark("sample");
    }
    return;
  }
  logits_.Reserve(Rr * V * sizeof(float));
  if (lm_argmax) {
    // The same kernel as a one-row graph's (the same logits), on the row's bf16 copy; the id goes
    // to a scratch word (the sampling below reads the logits).
    lm_argmax_id_.Reserve(4);
    // (lm_head_norm: T == 1, so the row is residual_'s row 0.)
    DS_CHECK(!lm_norm_pending_ || b.logits_indices[0] == 0) << "lm_head_norm: logits row " << b.logits_indices[0];
    RunLmHeadArgmax(lm_norm_pending_ ? nullptr : h16_.as<bf16>() + int64_t{b.logits_indices[0]} * Hd,
                    lm_argmax_id_.as<int32_t>());
  } else {
    DS_CHECK(!lm_norm_pending_) << "lm_head_norm without LmHeadArgmax";
    tok_idx_.Reserve(R * 4);
    DS_CUDA_CHECK(cudaMemcpyAsync(tok_idx_.get(), b.logits_indices.data(), R * 4, cudaMemcpyHostToDevice, s_));
    sel32_.Reserve(Rr * Hd * sizeof(float));
    GatherRows(h32_.get(), Hd * 4, tok_idx_.as<int32_t>(), R, Hd * 4, sel32_.get(), Hd * 4, s_, opts_.pdl);
    LinearFwd(lm_head_lin_, sel32_.as<float>(), Hd, R, logits_.as<float>(), V);
  }
  Mark("final_norm_lm_head");
  if (!b.sampling.empty()) {
    SampleRows(logits_.as<float>(), V, R, b.sampling, ids_out);
    Mark("sample");
  } else {
    DS_CUDA_CHECK(cudaMemcpyAsync(logits_out, logits_.get(), R * V * sizeof(float), cudaMemcpyDeviceToHost, s_));
    DS_CUDA_CHECK(cudaStreamSynchronize(s_));
    Mark("logits_to_host");
  }
  CollectMarks();
}

void CudaModelRunner::ReportStepTimeline() {
  if (step_tl_ev_.empty()) return;
  (void)cudaStreamSynchronize(s_);
  std::vector<float> pre, graph, post, gap, step;
  const StepEvents* last = nullptr;
  for (const StepEvents& se : step_tl_ev_) {
    if (se.marks == 15) {
      float t[3] = {0, 0, 0};
      bool ok = true;
      for (int i = 0; i < 3; ++i) ok = ok && cudaEventElapsedTime(&t[i], se.e[i], se.e[i + 1]) == cudaSuccess;
      float gp = 0, st = 0;
      if (ok && last && cudaEventElapsedTime(&gp, last->e[3], se.e[0]) == cudaSuccess &&
          cudaEventElapsedTime(&st, last->e[0], se.e[0]) == cudaSuccess && gp >= 0) {
        gap.push_back(gp);
        step.push_back(st);
      }
      if (ok) {
        pre.push_back(t[0]);
        graph.push_back(t[1]);
        post.push_back(t[2]);
      }
      last = ok ? &se : nullptr;
    } else {
      last = nullptr;
    }
  }
  for (const StepEvents& se : step_tl_ev_)  // after the loop: the next step reads the last one's events
    for (cudaEvent_t e : se.e) cudaEventDestroy(e);
  (void)cudaGetLastError();
  step_tl_ev_.clear();
  const auto med = [](std::vector<float> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return 1e3 * v[v.size() / 2];
  };
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "cuda runner step timeline (%zu graph steps, medians in us): input copy + id gather %.1f, graph %.1f, "
                "sampling + ids copy %.1f, gap to the next step's input copy %.1f (%zu consecutive), step start to "
                "start %.1f",
                graph.size(), med(pre), med(graph), med(post), med(gap), gap.size(), med(step));
  DS_LOG(INFO) << buf;
}

void CudaModelRunner::AbandonGraphStep() {
  gin_ = nullptr;
  gio_q_ = -1;
  gio_ids_q_ = -1;  // GraphIds hold no step's ids now: the next step resolves on the host
  capturing_ = false;
  // The step's input copy may still be in flight from the graph's pinned host buffer, which the
  // next step rewrites, and its ids' copy back: let them finish (errors are the thrown one's).
  (void)cudaStreamSynchronize(s_);
  (void)cudaStreamSynchronize(in_stream_.get());
  (void)cudaStreamSynchronize(out_stream_.get());
  (void)cudaGetLastError();
}

Status CudaModelRunner::CheckBatch(const ForwardBatch& batch) const {
  DS_RETURN_IF_ERROR(batch.Validate(num_blocks_));
  const int vocab = cfg_.vocab_size;
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= vocab)
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                             std::to_string(vocab) + ")");
  for (int32_t p : batch.positions)
    if (p >= rope_.max_pos) return InvalidArgument("position " + std::to_string(p) + " beyond the KV pool");
  return Status::Ok();
}

Status CudaModelRunner::CompleteOldest() {
  for (LaunchedStep& l : launched_) {
    if (!l.async) continue;
    const cudaError_t e = cudaEventSynchronize(ring_ev_[l.slot]);
    l.async = false;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      // Kept in launched_ with its error, so Finish reports it for this step (the ids are not
      // valid); the caller of this wait gets it too.
      l.status = Internal(std::string("cuda runner: overlapped decode step: ") + cudaGetErrorString(e));
      return l.status;
    }
    std::memcpy(l.out.token_ids.data(), samp_ring_[l.slot].get(), l.out.token_ids.size() * 4);
    if (&l == &launched_.back()) last_ids_ = l.out.token_ids;  // the next step's prev_sample_rows
    return Status::Ok();
  }
  return Status::Ok();
}

Status CudaModelRunner::UseDevice() const {
  if (const cudaError_t e = cudaSetDevice(opts_.device); e != cudaSuccess) {
    (void)cudaGetLastError();
    return Internal("cuda runner: cudaSetDevice(" + std::to_string(opts_.device) + "): " + cudaGetErrorString(e));
  }
  return Status::Ok();
}

Status CudaModelRunner::Launch(const ForwardBatch& batch) {
  DS_RETURN_IF_ERROR(UseDevice());
  DS_RETURN_IF_ERROR(CheckBatch(batch));
  bool uses_prev = false;
  DS_RETURN_IF_ERROR(CheckPrevSampleRows(batch, last_sampled_, last_rows_, &uses_prev));
  const int64_t R = static_cast<int64_t>(batch.logits_indices.size());
  // Queued without waiting: a sampled decode step whose graph is captured. Its previous-row ids
  // are gathered on the device when the previous step was queued too (its ids still on the
  // device: graph_io's GraphIds, else samp_ids_); after a step run inside Launch they are on the
  // host already and resolved here.
  // Rows sampled in order (the identity logits_indices, as the engine's and one-batch's decode
  // steps): R <= the bucket, so the ids fit a ring slot, and no row gather buffer grows.
  const bool identity_rows = R == batch.num_seqs() && IdentityRows(batch);
  const bool async =
      CanOverlap() && !batch.sampling.empty() && identity_rows && GraphEligible(batch) && GraphReady(batch);
  ForwardBatch b = batch;
  if (uses_prev && !(async && last_async_)) {
    if (!async)
      while (NumAsyncInFlight() > 0) DS_RETURN_IF_ERROR(CompleteOldest());
    // The previous step is the last one launched; its ids are final now (a queued one was just
    // completed above).
    const std::vector<int32_t>* prev = launched_.empty() ? &last_ids_ : &launched_.back().out.token_ids;
    DS_RETURN_IF_ERROR(ResolvePrevSampleRows(prev, &b));
  }
  if (!async) {  // Forward completes the queued steps first
    LaunchedStep l;
    DS_RETURN_IF_ERROR(Forward(b, &l.out));
    last_sampled_ = !b.sampling.empty();
    last_async_ = false;
    last_rows_ = R;
    last_ids_ = l.out.token_ids;
    launched_.push_back(std::move(l));
    return Status::Ok();
  }
  // At most two async steps in flight: a ring slot (and a graph's pinned input copy) is reused
  // two steps later, so the older of two must be done first.
  while (NumAsyncInFlight() >= 2) DS_RETURN_IF_ERROR(CompleteOldest());
  for (int i = 0; i < 2; ++i) {
    if (!ring_ev_[i])
      if (const cudaError_t e = cudaEventCreateWithFlags(&ring_ev_[i], cudaEventDisableTiming); e != cudaSuccess) {
        (void)cudaGetLastError();
        return Internal(std::string("cuda runner: cudaEventCreate: ") + cudaGetErrorString(e));
      }
    samp_ring_[i].Reserve(kMaxGraphBucket * 4);
  }
  LaunchedStep l;
  l.async = true;
  l.slot = next_slot_;
  next_slot_ ^= 1;
  l.out.token_ids.assign(R, 0);
  try {
    ForwardDecodeGraph(b, &l.out, l.slot);
    ++graph_stats_.queued;
  } catch (const CheckError& e) {
    AbandonGraphStep();
    last_async_ = false;
    return Internal(std::string("cuda runner (overlapped graph decode): ") + e.what());
  }
  last_sampled_ = true;
  last_async_ = true;
  last_rows_ = R;
  last_ids_.clear();
  launched_.push_back(std::move(l));
  return Status::Ok();
}

Status CudaModelRunner::Finish(ForwardOutput* out) {
  if (launched_.empty()) return InvalidArgument("cuda runner: Finish with no launched step");
  if (launched_.front().async) (void)CompleteOldest();  // its error, if any, lands in its status
  const Status st = launched_.front().status;
  if (!st.ok()) {
    launched_.pop_front();
    return st;
  }
  *out = std::move(launched_.front().out);
  launched_.pop_front();
  return Status::Ok();
}

Status CudaModelRunner::Forward(const ForwardBatch& batch, ForwardOutput* out) {
  DS_RETURN_IF_ERROR(UseDevice());
  DS_RETURN_IF_ERROR(CheckBatch(batch));
  // Steps queued by Launch come first (their outputs wait in launched_ for Finish): this step's
  // host-side buffers (SampleRows' pinned ids) are then free of them. This step is no launch: a
  // later Launch's prev_sample_rows still name the last launched step, whose ids are on the host
  // now (last_ids_), not in samp_ids_, which this step's sampling overwrites.
  while (NumAsyncInFlight() > 0) DS_RETURN_IF_ERROR(CompleteOldest());
  last_async_ = false;
  if (!batch.prev_sample_rows.empty())
    for (int32_t r : batch.prev_sample_rows)
      if (r >= 0) return InvalidArgument("cuda runner: prev_sample_rows needs Launch, not Forward");
  const int vocab = cfg_.vocab_size;
  const int64_t R = static_cast<int64_t>(batch.logits_indices.size());
  const bool sample = !batch.sampling.empty();
  out->logits.clear();
  out->token_ids.clear();
  if (sample) out->token_ids.assign(R, 0);
  else out->logits.assign(R * vocab, 0.f);
  if (GraphEligible(batch)) {
    try {
      ForwardDecodeGraph(batch, out);
    } catch (const CheckError& e) {
      AbandonGraphStep();
      return Internal(std::string("cuda runner (graph decode): ") + e.what());
    }
    return Status::Ok();
  }
  // Pieces of at most max_tokens_per_pass tokens, packed in order into passes.
  struct Piece { int64_t s; int32_t t0, t1; };
  const int64_t budget = std::max(1, opts_.max_tokens_per_pass);
  std::vector<std::vector<Piece>> passes(1);
  int64_t cur = 0;
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    for (int32_t t0 = batch.query_start[s]; t0 < batch.query_start[s + 1];) {
      if (cur == budget) { passes.emplace_back(); cur = 0; }
      const int32_t t1 = static_cast<int32_t>(std::min<int64_t>(batch.query_start[s + 1], t0 + (budget - cur)));
      passes.back().push_back({s, t0, t1});
      cur += t1 - t0;
      t0 = t1;
    }
  }
  try {
    for (const auto& pass : passes) {
      if (pass.empty()) continue;
      ForwardBatch sub;
      sub.max_blocks = batch.max_blocks;
      sub.query_start.push_back(0);
      std::vector<int64_t> out_rows;
      for (const Piece& pc : pass) {
        const int32_t q1 = batch.query_start[pc.s + 1];
        for (int32_t t = pc.t0; t < pc.t1; ++t) {
          sub.token_ids.push_back(batch.token_ids[t]);
          sub.positions.push_back(batch.positions[t]);
          for (int64_t r = 0; r < R; ++r)
            if (batch.logits_indices[r] == t) {
              sub.logits_indices.push_back(static_cast<int32_t>(sub.token_ids.size() - 1));
              if (sample) sub.sampling.push_back(batch.sampling[r]);
              out_rows.push_back(r);
            }
        }
        sub.query_start.push_back(static_cast<int32_t>(sub.token_ids.size()));
        sub.context_lens.push_back(batch.context_lens[pc.s] - (q1 - pc.t1));
        sub.block_tables.insert(sub.block_tables.end(), batch.block_tables.begin() + pc.s * batch.max_blocks,
                                batch.block_tables.begin() + (pc.s + 1) * batch.max_blocks);
      }
      if (sample) {
        std::vector<int32_t> ids(sub.logits_indices.size());
        RunPass(sub, nullptr, ids.data());
        for (size_t i = 0; i < out_rows.size(); ++i) out->token_ids[out_rows[i]] = ids[i];
        continue;
      }
      std::vector<float> logits(sub.logits_indices.size() * vocab);
      RunPass(sub, logits.data());
      for (size_t i = 0; i < out_rows.size(); ++i)
        std::copy(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab, out->logits.begin() + out_rows[i] * vocab);
    }
  } catch (const CheckError& e) {
    return Internal(std::string("cuda runner: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace runner_impl

using runner_impl::CudaModelRunner;

CudaGraphStats GetCudaGraphStats(const ModelRunner& runner) {
  const auto* r = dynamic_cast<const CudaModelRunner*>(&runner);
  return r ? r->graph_stats_ : CudaGraphStats{};
}

StatusOr<std::unique_ptr<ModelRunner>> CreateCudaModelRunner(const CudaRunnerOptions& o) {
  if (o.fp8_gemm != "kernel" && o.fp8_gemm != "cublas" && o.fp8_gemm != "cublas-all")
    return InvalidArgument("fp8 GEMM must be kernel, cublas or cublas-all, got '" + o.fp8_gemm + "'");
  if (o.load_format != "auto" && o.load_format != "dummy")
    return InvalidArgument("--load-format must be auto or dummy for the CUDA runner, got '" + o.load_format + "'");
  DS_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(o.model_dir));
  if (o.num_layers > 0 && o.num_layers < cfg.num_hidden_layers) cfg.num_hidden_layers = o.num_layers;
  if (o.device < 0) return InvalidArgument("CUDA device ordinal must be >= 0, got " + std::to_string(o.device));
  if (o.fp8_gemv_experts_min_tokens != 1 && o.fp8_gemv_experts_min_tokens != 2 && o.fp8_gemv_experts_min_tokens != 4 &&
      o.fp8_gemv_experts_min_tokens != 8)
    return InvalidArgument("fp8_gemv_experts_min_tokens must be 1, 2, 4 or 8, got " +
                           std::to_string(o.fp8_gemv_experts_min_tokens));
  if (o.gemv_experts_bf16_min_tokens != 1 && o.gemv_experts_bf16_min_tokens != 2 &&
      o.gemv_experts_bf16_min_tokens != 4 && o.gemv_experts_bf16_min_tokens != 8)
    return InvalidArgument("gemv_experts_bf16_min_tokens must be 1, 2, 4 or 8, got " +
                           std::to_string(o.gemv_experts_bf16_min_tokens));
  if (o.gemv_experts_bf16_ctas < -2)
    return InvalidArgument("gemv_experts_bf16_ctas must be -2 (tile-aligned), -1 (one per SM), 0 (auto) or a count, got " +
                           std::to_string(o.gemv_experts_bf16_ctas));
  if (o.mla_decode_tc_kernel < -1 || o.mla_decode_tc_kernel > 1)
    return InvalidArgument("MLA decode tensor-core kernel must be -1 (auto), 0 (by shape) or 1 (row-tile), got " +
                           std::to_string(o.mla_decode_tc_kernel));
  for (int c : {o.mla_decode_small_batch_chunk, o.mla_decode_sm90_small_batch_chunk})
    if (c < 0 || c % 64 != 0)
      return InvalidArgument("MLA decode small-batch chunk must be 0 or a positive multiple of 64, got " +
                             std::to_string(c));
  if (o.mla_decode_tc_stages != 0 && o.mla_decode_tc_stages != 2 && o.mla_decode_tc_stages != 3)
    return InvalidArgument("MLA decode tensor-core stages must be 0 (default), 2 or 3, got " +
                           std::to_string(o.mla_decode_tc_stages));
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    (void)cudaGetLastError();
    return Unimplemented("--device cuda: no CUDA device available");
  }
  if (o.device >= ndev)
    return InvalidArgument("CUDA device " + std::to_string(o.device) + " requested, " + std::to_string(ndev) +
                           " present (data-parallel rank r runs on GPU r: --dp-size at most the GPU count)");
  try {
    DS_CUDA_CHECK(cudaSetDevice(o.device));
    std::unique_ptr<Checkpoint> ckpt;
    if (o.load_format == "auto") {
      DS_ASSIGN_OR_RETURN(ckpt, Checkpoint::Open(o.model_dir));
    }
    auto r = std::make_unique<CudaModelRunner>(cfg, o);
    DS_RETURN_IF_ERROR(r->Init(ckpt.get()));
    return std::unique_ptr<ModelRunner>(std::move(r));
  } catch (const CheckError& e) {
    return Internal(std::string("cuda runner: ") + e.what());
  }
}

}  // namespace ds::cuda
