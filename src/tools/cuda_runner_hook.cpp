// Registers the CUDA model runner with CreateModelRunner (runtime/runner_factory.h) in CUDA
// builds. Lives in src/tools (linked into the executable) because dsinfer_core is linked
// before the CUDA library and cannot reference it.
#if defined(DS_WITH_CUDA) && __has_include("backend/cuda/cuda_runner.h")
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/fused_decode_flags.h"
#include "common/logging.h"
#include "runtime/runner_factory.h"

namespace {
ds::StatusOr<std::unique_ptr<ds::ModelRunner>> CreateCuda(const ds::RunnerOptions& o) {
  ds::cuda::CudaRunnerOptions c;
  c.model_dir = o.model_dir;
  c.load_format = o.load_format;
  c.num_layers = o.num_layers;
  c.num_kv_blocks = o.num_kv_blocks;
  c.max_kv_tokens = o.max_kv_tokens;
  c.mem_fraction = o.mem_fraction_static;
  c.seed = o.seed;
  c.cuda_graphs = o.cuda_graphs;
  c.device = o.gpu_id;
  // Environment switches of the CUDA runner, read here at the edge (the runner takes options);
  // docs/design/cuda_backend.md lists them. An on/off switch takes "1" or "0"; anything else,
  // or unset, keeps the runner's default.
  const auto env_is = [](const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string(v) == value;
  };
  const auto env_switch = [&](const char* name, bool* field) {
    if (env_is(name, "1")) *field = true;
    if (env_is(name, "0")) *field = false;
  };
  // A number in [lo, hi], a multiple of `step` (strtol), else a warning and the default.
  const auto env_int = [](const char* name, long lo, long hi, long step, int* field) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n >= lo && n <= hi && n % step == 0) *field = static_cast<int>(n);
    else DS_LOG(WARNING) << name << "=" << v << " ignored (" << lo << ".." << hi << (step > 1 ? ", a multiple of " : "")
                         << (step > 1 ? std::to_string(step) : std::string()) << ")";
  };
  // One of the listed words (exactly), else a warning and the default.
  const auto env_choice = [](const char* name, std::initializer_list<std::pair<const char*, int>> choices,
                             int* field) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return;
    std::string known;
    for (const auto& [word, value] : choices) {
      if (std::string(v) == word) {
        *field = value;
        return;
      }
      known += known.empty() ? word : std::string(", ") + word;
    }
    DS_LOG(WARNING) << name << "=" << v << " ignored (" << known << ")";
  };
  // DS_CUDA_PROFILE=1 profiles and logs the per-phase totals.
  c.profile_log = env_is("DS_CUDA_PROFILE", "1");
  c.profile = o.profile || c.profile_log;
  c.step_timeline = env_is("DS_STEP_TIMELINE", "1");  // events around each decode graph step (logged at exit)
  env_switch("DS_GRAPH_IO", &c.graph_io);  // the decode graph's input copy, id gather, argmax and ids' copy (on since session 26)
  env_switch("DS_LM_HEAD_ARGMAX", &c.lm_head_argmax);  // one-row LM head (+ the graph's argmax) in one launch (on since session 26)
  env_switch("DS_LM_HEAD_NORM", &c.lm_head_norm);  // the final norm in LmHeadArgmax, the last MoE kernel without it (session 31)
  env_switch("DS_ARGMAX_SPLIT", &c.argmax_split);  // greedy argmax split over blocks (opt-in: level in the step, session 26)
  env_switch("DS_SAMPLE_DEVICE_SORT", &c.sample_device_sort);  // temperature rows: one device-wide sort (on since session 23)
  env_switch("DS_SKINNY_GEMM", &c.skinny_gemm);                  // decode-size skinny GEMMs
  env_switch("DS_MOE_ROUTE_WARP", &c.moe_route_warp);            // routing by one warp (on)
  env_switch("DS_ROUTER_ROUTE_FAST", &c.router_route_fast);  // its one-token routing in registers (on since session 30)
  env_switch("DS_ROUTER_ROUTE", &c.fused_router_route);          // router + routing in one launch, gathered rows (on)
  env_switch("DS_DOWN_COMBINE", &c.fused_down_combine);          // combine + norm in the down GEMM's last block (off: verified, slower)
  env_switch("DS_GATE_UP_SILU", &c.fused_gate_up_silu);          // SiLU-and-mul in the routed gate_up's epilogue (on since session 11)
  env_switch("DS_PERSISTENT_MOE", &c.persistent_moe);            // the batch-1 MoE layer in one cooperative launch (on since session 11)
  env_switch("DS_OPROJ_NORM", &c.fused_oproj_norm);              // residual + norm in o_proj's last block (off: verified, slower)
  env_int("DS_PERSISTENT_MOE_BPS", 1, 2, 1, &c.persistent_moe_blocks_per_sm);
  env_int("DS_PERSISTENT_MOE_GU_KSPLIT", 1, 8, 1, &c.persistent_moe_gu_ksplit);
  env_switch("DS_PERSISTENT_MOE_SHARED_FIRST", &c.persistent_moe_shared_first);  // shared experts' tiles first, no barrier 1 (on since session 20)
  env_switch("DS_MOE_ROUTER_TAGGED", &c.moe_router_tagged);  // tagged router logits polled by the routing warp (on since session 31)
  env_switch("DS_MOE_RING", &c.moe_ring);                       // the batch-1 MoE layer on a TMA ring (session 32)
  env_int("DS_MOE_RING_STAGES", 2, 6, 1, &c.moe_ring_stages);
  env_choice("DS_MOE_RING_PRODUCERS", {{"1", 1}, {"2", 2}, {"4", 4}}, &c.moe_ring_producers);
  env_int("DS_MOE_RING_EARLY", 0, 5, 1, &c.moe_ring_early_stages);
  env_switch("DS_MOE_RING_WARM", &c.moe_ring_warm_route);
  env_switch("DS_MOE_RING_EVICT_FIRST", &c.moe_ring_evict_first);
  env_switch("DS_MOE_RING_ACT_TAGGED", &c.moe_ring_act_tagged);
  env_switch("DS_MOE_RING_ACT_LOOKAHEAD", &c.moe_ring_act_lookahead);
  env_switch("DS_MOE_RING_DENSE", &c.moe_ring_dense);
  env_int("DS_MOE_RING_GRID", 0, 1024, 1, &c.moe_ring_grid);
  env_switch("DS_PERSISTENT_PDL", &c.persistent_pdl);            // persistent kernels as PDL launches (opt-in)
  env_int("DS_ATTN_L2_FETCH", 0, 2, 1, &c.attn_l2_fetch);          // weight loads' L2 fetch size (session 21)
  env_int("DS_MOE_L2_FETCH", 0, 2, 1, &c.moe_l2_fetch);
  env_switch("DS_FP8_SKINNY_SM90", &c.fp8_skinny_sm90);          // W8A8 projections <= 64 rows on the CUTLASS swap-AB GEMM (opt-in)
  env_switch("DS_PERSISTENT_DENSE", &c.persistent_dense_mlp);    // dense layers' MLP in the persistent kernel (on since session 14)
  env_switch("DS_NORM_IN_ATTN", &c.norm_in_attn);              // the next input norm in the attention kernel (on since session 14)
  env_switch("DS_Q_ABSORB", &c.fused_q_absorb);                  // MLA q absorption in one launch (opt-in)
  env_switch("DS_ATTN_PERSISTENT", &c.attn_persistent);          // the b1 MLA attention in one cooperative launch (on since session 13)
  env_switch("DS_ATTN_ABSORB_OVERLAP", &c.attn_absorb_overlap);  // its absorption overlapping phase 1's tail (on since session 20)
  env_switch("DS_ATTN_SPLIT_COUNTER", &c.attn_split_counter);    // its decode blocks start on a counter, no barrier 2 (on since session 20)
  env_int("DS_ATTN_SPECIALIZE", 0, 2, 1, &c.attn_specialize);    // its runner-form instantiation (session 28)
  env_int("DS_MOE_SPECIALIZE", 0, 2, 1, &c.moe_specialize);      // the MoE kernel's (session 28)
  env_int("DS_ATTN_WO_STAGE", 0, 6, 1, &c.attn_wo_stage_point);  // where its o_proj tile is staged (3 since session 22)
  env_int("DS_ATTN_MERGE_COLS", 0, 256, 1, &c.attn_merge_cols_min_splits);  // its column-split merge from N splits (session 29)
  env_int("DS_COMBINE_NORM_SPLIT", 0, 32, 1, &c.combine_norm_split);  // MoeCombineNorm over G blocks a token (8 since session 29)
  env_int("DS_COMBINE_NORM_SPLIT_MIN_HIDDEN", 0, 1 << 20, 1, &c.combine_norm_split_min_hidden);  // ... for hidden sizes from N
  env_switch("DS_MLA_UV_PRELOAD", &c.mla_uv_preload);  // the W_UV merge kernel's first rows before its merge (on since session 29)
  env_int("DS_PERSISTENT_CARVEOUT", -1, 100, 1, &c.persistent_carveout);  // both persistent kernels' smem carveout (percent; 72 since session 25, -1 the driver's)
  env_int("DS_MOE_CARVEOUT", -2, 100, 1, &c.moe_carveout);  // the MoE kernel's own (58 since session 27; -2 follows DS_PERSISTENT_CARVEOUT)
  {
    int mw = 0;  // SkinnyGemm's bf16 dense limit in millions of weights (0: the default)
    env_int("DS_SKINNY_BF16_MAX_MWEIGHTS", 1, 1024, 1, &mw);
    if (mw > 0) c.skinny_bf16_max_weights = int64_t{mw} << 20;
  }
  env_switch("DS_SM90_GROUPED_GEMM", &c.sm90_grouped_gemm);      // sm_90a expert GEMMs
  env_switch("DS_MLA_DECODE_SM90", &c.mla_decode_sm90);          // sm_90a (wgmma + TMA) MLA decode
  env_switch("DS_MLA_DECODE_Q_BF16", &c.mla_decode_q_bf16);   // the sm_90a decode reads a bf16 q_lat (session 40)
  env_switch("DS_SM90_MIXED_GEMM", &c.sm90_mixed_gemm);          // sm_90a bf16 x e4m3 GEMM
  env_switch("DS_MLA_DECODE_FUSED_COMBINE", &c.mla_decode_fused_combine);  // verified, slower: off
  env_switch("DS_MLA_DECODE_CLUSTER_MERGE", &c.mla_decode_cluster_merge);  // warp-split splits merged in a cluster (off)
  env_switch("DS_MLA_PREFILL_SM90", &c.mla_prefill_sm90);        // sm_90a prefill attention
  c.mla_prefill_sm90_pingpong = env_is("DS_MLA_PREFILL_SM90", "pingpong");  // its ping-pong variant
  env_switch("DS_DECODE_STREAMS", &c.decode_streams);            // side branches in decode graphs (on)
  env_switch("DS_DECODE_PRIORITY", &c.decode_stream_priority);    // main stream above the side stream (on)
  env_switch("DS_MLA_DECODE_CAPACITY_PLAN", &c.mla_decode_capacity_plan);  // sm_90a split plan over the capacity's range (off)
  env_switch("DS_ROUTER_GEMV", &c.router_gemv);                  // decode-size router logits in one launch (on)
  env_switch("DS_FP8_GEMV", &c.fp8_gemv);                        // TMA-streaming FP8 GEMV for weights >= 96M (on)
  env_switch("DS_FP8_GEMV_EXPERTS", &c.fp8_gemv_experts);        // grouped FP8 GEMV for decode experts (on, >= 2 tokens)
  env_switch("DS_GEMV_EXPERTS_BF16", &c.gemv_experts_bf16);      // the same for bf16 experts (on, >= 8 tokens)
  // The sm_90a decode kernel variant (0 default, 1 / 2 seesaw: verified, 3-8% slower; 4 three
  // warpgroups, 8 / 9 = 4 / 0 with the shorter softmax, 10 = 8 with per-box barriers, 11 tile
  // pairs, 12 / 13 / 15 the three-stage ring, 16 = 15 with the K multicast in clusters of two;
  // MlaDecodeParams::sm90_variant).
  env_choice("DS_MLA_DECODE_SM90_VARIANT", {{"0", 0}, {"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}, {"9", 9}, {"10", 10}, {"11", 11}, {"12", 12}, {"13", 13}, {"15", 15}, {"16", 16}}, &c.mla_decode_sm90_variant);
  env_choice("DS_MLA_DECODE_SM90_SMALL_VARIANT", {{"-1", -1}, {"0", 0}, {"4", 4}, {"8", 8}, {"9", 9}, {"10", 10}, {"11", 11}},
             &c.mla_decode_sm90_small_variant);
  // CudaRunnerOptions::mla_decode_tc_kernel (A/B).
  env_switch("DS_GEMV_EXPERTS_BF16_DOWN", &c.gemv_experts_bf16_down);
  if (const char* v = std::getenv("DS_GEMV_EXPERTS_BF16_CTAS"); v != nullptr && std::string(v) == "sm")
    c.gemv_experts_bf16_ctas = -1;
  else if (v != nullptr && std::string(v) == "auto")
    c.gemv_experts_bf16_ctas = 0;
  else if (v != nullptr && std::string(v) == "tile")
    c.gemv_experts_bf16_ctas = -2;
  else
    env_int("DS_GEMV_EXPERTS_BF16_CTAS", 1, 1 << 20, 1, &c.gemv_experts_bf16_ctas);
  env_choice("DS_FP8_GEMV_EXPERTS_MIN_TOKENS", {{"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}}, &c.fp8_gemv_experts_min_tokens);
  env_choice("DS_GEMV_EXPERTS_BF16_MIN_TOKENS", {{"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}},
             &c.gemv_experts_bf16_min_tokens);
  env_choice("DS_MLA_DECODE_TC_KERNEL", {{"auto", -1}, {"shape", 0}, {"rowtile", 1}}, &c.mla_decode_tc_kernel);
  env_int("DS_MLA_DECODE_SM90_MIN_ROWS", 0, 64, 1, &c.mla_decode_sm90_min_rows);
  // CudaRunnerOptions::mla_decode_small_batch_chunk (default 64) / mla_decode_sm90_small_batch_chunk
  // (default 128) (A/B; a multiple of 64, 0 off).
  env_int("DS_MLA_DECODE_SMALL_CHUNK", 0, 65536, 64, &c.mla_decode_small_batch_chunk);
  env_choice("DS_MLA_DECODE_TC_STAGES", {{"0", 0}, {"2", 2}, {"3", 3}}, &c.mla_decode_tc_stages);
  env_int("DS_MLA_DECODE_SM90_SMALL_CHUNK", 0, 65536, 64, &c.mla_decode_sm90_small_batch_chunk);
  // DS_FUSED_DECODE picks the small-batch decode fusions (CudaRunnerOptions::fused_*; unset:
  // the defaults, all but shared): 0 none, 1 all eight, or a comma list of route,
  // shared, norm, qpe, olat, silu16, kvrope, uv (ParseFusedDecodeFlags, fused_decode_flags.h).
  if (const char* f = std::getenv("DS_FUSED_DECODE")) {
    const ds::cuda::FusedDecodeFlags fl = ds::cuda::ParseFusedDecodeFlags(f);
    if (!fl.unknown.empty()) {
      DS_LOG(WARNING) << "DS_FUSED_DECODE: ignored " << fl.unknown
                      << " (known: route, shared, norm, qpe, olat, silu16, kvrope, uv)";
    }
    c.fused_moe_route = fl.route;
    c.fused_moe_shared = fl.shared;
    c.fused_norm = fl.norm;
    c.fused_qpe = fl.qpe;
    c.fused_olat = fl.olat;
    c.fused_silu16 = fl.silu16;
    c.fused_kvrope = fl.kvrope;
    c.fused_uv = fl.uv;
  }
  // DS_PDL=1: CudaRunnerOptions::pdl (programmatic dependent launch of the runner's kernels; A/B,
  // verified, no faster; ParsePdlFlag, backend/cuda/fused_decode_flags.h).
  if (const char* v = std::getenv("DS_PDL"); v != nullptr) {
    const int on = ds::cuda::ParsePdlFlag(v);
    if (on >= 0) c.pdl = on == 1;
    else DS_LOG(WARNING) << "DS_PDL=" << v << " ignored (1 / on or 0 / off)";
  }
  c.mla_decode_tensor_cores = o.mla_decode_tensor_cores;
  c.fp8_gemm = o.fp8_gemm;
  c.mla_mode = o.mla_mode;
  c.max_tokens_per_pass = o.max_tokens_per_pass;
  c.precise_activations = o.precise_activations;
  return ds::cuda::CreateCudaModelRunner(c);
}
const bool kRegistered = [] {
  ds::RegisterCudaRunnerFactory(&CreateCuda);
  return true;
}();
}  // namespace
#endif
