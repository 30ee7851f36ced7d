// The CUDA model runner's weights and class (CreateCudaModelRunner in cuda_runner.h is the
// public entry): private to the runner's source files, which define the members
// (cuda_runner.cpp; cuda_runner_weights.cpp: loading; cuda_runner_mla.cpp: MLA attention;
// cuda_runner_graphs.cpp: decode graphs); a
// header only so that those files stay short. Not for other code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/moe_combine_norm.h"
#include "backend/cuda/moe_ring.h"
#include "backend/cuda/moe_route_permute.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/skinny_gemm.h"
#include "backend/cuda/stream.h"
#include "common/logging.h"
#include "model/mla.h"
#include "model/safetensors.h"
#include "runtime/model_runner.h"

namespace ds::cuda::runner_impl {

using bf16 = __nv_bfloat16;

// Shared by the runner's source files (cuda_runner.cpp, cuda_runner_mla.cpp).
constexpr float kLatentNormEps = 1e-6f;  // q_a_layernorm / kv_a_layernorm (as the CPU model)
// CudaRunnerOptions::mla_decode_fused_combine: counters (one per sequence of a pass) allocated
// once at start-up (256 KiB).
constexpr int64_t kMlaSplitCounters = int64_t{1} << 16;
inline int64_t RoundUp(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
// b = a device copy of h (at least 1 byte).
template <typename T>
void Upload(DeviceBuffer* b, const std::vector<T>& h) {
  b->Reset(std::max<size_t>(1, h.size() * sizeof(T)));
  if (!h.empty()) DS_CUDA_CHECK(cudaMemcpy(b->get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// y = x @ W^T; W bf16 [N, K], or e4m3 [N, K] with block scales.
struct Linear {
  int64_t N = 0, K = 0;
  bool fp8 = false;
  DeviceBuffer w;      // bf16 [N, K]
  DeviceBuffer wq;     // e4m3 [N, K]
  DeviceBuffer s_blk;  // [ceil(N/128), Fp8WeightScaleLd(K)] (cuBLASLt layout)
  DeviceBuffer s_raw;  // [ceil(N/128), ceil(K/128)] (checkpoint layout, in-kernel path)
  DeviceBuffer s_mn64; // [ceil(K/128), ceil(N/64)]: s_raw transposed, each block per 64-row half (fp8_skinny_sm90)
  DeviceBuffer w_hi, w_lo;  // debug (fp8_emulate_act_quant): dequantised weights, bf16 hi + lo [N, K]
};

struct MlaW {
  Linear q_a, q_b, q, kv_a, o;
  DeviceBuffer q_a_norm, kv_a_norm;  // fp32
  DeviceBuffer kv_b;                 // bf16 [H * (nope + v), kv_lora]
  DeviceBuffer w_uk_t;               // bf16 [H, kv_lora, nope]
};

struct LayerW {
  DeviceBuffer in_norm, post_norm;  // fp32 [hidden]
  MlaW attn;
  bool moe = false;
  Linear gate_up, down;             // dense MLP, or the shared experts of a MoE layer
  bool has_mlp = false;
  DeviceBuffer router;              // fp32 [E, hidden]
  DeviceBuffer bias;                // fp32 [E] (empty: none)
  bool experts_fp8 = false;
  DeviceBuffer w13, w13_s, w2, w2_s;  // [E (+S), 2I, H], [E (+S), H, I] (+ block scales [E (+S), nb, kb])
  // fused_moe_shared: the S = n_shared_experts shared experts stacked as groups E .. E + S - 1
  // of w13 / w2 (shared expert s = its gate/up rows [s I, (s + 1) I) and down columns likewise);
  // 0 = not stacked.
  int shared_groups = 0;
};

// fused_oproj_norm: the largest pass whose post-attention norm runs in o_proj's last block.
inline constexpr int64_t kOprojNormMaxTokens = 2;

class CudaModelRunner : public ModelRunner {
 public:
  // decode_stream_priority: the main stream at the device's highest priority, the side stream at
  // the default (lowest) one; otherwise both at the default.
  static int StreamPriority(const CudaRunnerOptions& o, bool side) {
    if (!o.decode_stream_priority || side) return 0;
    int least = 0, greatest = 0;
    DS_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    return greatest;
  }
  CudaModelRunner(const ModelConfig& cfg, const CudaRunnerOptions& o)
      : cfg_(cfg), opts_(o), stream_(StreamPriority(o, false)), side_stream_(StreamPriority(o, true)) {
    prof_on_ = o.profile;
    prof_log_ = o.profile_log;
    step_tl_ = o.step_timeline;
    skinny_on_ = o.skinny_gemm;
    sm90_gg_on_ = o.sm90_grouped_gemm;
  }
  std::map<std::string, double> TakeProfile() override {
    std::map<std::string, double> p;
    p.swap(prof_ms_);
    return p;
  }
  ~CudaModelRunner() override {
    // The members (graphs, buffers, stream) belong to opts_.device, which need not be current
    // on the destroying thread (serve destroys every DP rank's runner on the main thread).
    (void)cudaSetDevice(opts_.device);
    DropGraphs();
    if (!launched_.empty()) (void)cudaStreamSynchronize(s_);  // async steps still write the ring
    ReportStepTimeline();
    if (!launched_.empty()) (void)cudaStreamSynchronize(out_stream_.get());  // graph_io: the ids' copies
    for (cudaEvent_t e : {fork_ev_, join_ev_, ring_ev_[0], ring_ev_[1], in_ev_[0], in_ev_[1], done_ev_[0], done_ev_[1]})
      if (e) cudaEventDestroy(e);
    if (!prof_log_ || prof_ms_.empty()) return;
    double total = 0;
    for (const auto& [k, v] : prof_ms_) total += v;
    std::string line = "cuda runner profile (device ms, all passes):";
    for (const auto& [k, v] : prof_ms_) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " %s=%.1f (%.1f%%)", k.c_str(), v, 100.0 * v / total);
      line += buf;
    }
    DS_LOG(INFO) << line;
  }
  const ModelConfig& config() const override { return cfg_; }
  int num_kv_blocks() const override { return num_blocks_; }
  Status Forward(const ForwardBatch& batch, ForwardOutput* out) override;
  bool CanSample() const override { return true; }
  // Overlap scheduling: a sampled decode step that replays a captured graph is queued and Launch
  // returns; its ids come back through a pinned ring slot and an event (Finish). Every other
  // step (prefill, mixed, logits, a shape's first eager pass + capture, profiling on) runs
  // inside Launch as Forward does, after the steps in flight are finished.
  Status Launch(const ForwardBatch& batch) override;
  Status Finish(ForwardOutput* out) override;
  bool CanOverlap() const override { return opts_.cuda_graphs && !prof_on_; }
  size_t NumLaunched() const override { return launched_.size(); }

  Status Init(const Checkpoint* ckpt);

 private:
  // ---- weights ----
  Status LoadLinear(const std::string& name, int64_t N, int64_t K, Linear* L);
  Status LoadVec(const std::string& name, int64_t n, float dummy_value, DeviceBuffer* b);
  Status LoadBf16(const std::string& name, int64_t N, int64_t K, DeviceBuffer* b);  // dequantised if FP8
  Status LoadLayer(int l, LayerW* L);
  // gate_up = [gate rows; up rows] of one MLP (`prefix` + .gate_proj / .up_proj, [I, hidden]
  // each) as one Linear: FP8 when the 128-row weight blocks do not straddle gate/up
  // (I % 128 == 0), else bf16 (dequantised).
  Status LoadGateUp(const std::string& prefix, int64_t I, Linear* gu);
  uint64_t NextSeed() { return opts_.seed * 0x9E3779B97F4A7C15ull + (++tensor_counter_) * 0xD1B54A32D192ED03ull; }
  void FinishLinear(Linear* L, const std::vector<float>* raw_scales);

  // ---- compute ----
  // What LinearFwd(L, x, ldx, M, y, ldy, x16) feeds L's GEMM (one decision, shared by
  // LinearFwd and the producers that make x16 only where it is read):
  //  kFp8Emulated: fp8_emulate_act_quant (EmulateFp8Linear; reads x fp32);
  //  kFp8Quant: cuBLASLt's FP8 GEMM, x fp32 quantised to e4m3 per 1x128 group (fp8_gemm
  //    "cublas" / "cublas-all");
  //  kBf16Split: bf16 weights with precise_activations: bf16 hi + lo of x (reads x fp32);
  //  kBf16: bf16(x) = the SplitBf16 hi of x, or x16 when given (bf16 weights, or FP8 weights
  //    dequantised in the kernel: skinny, mma.sync or sm_90a mixed-input GEMM).
  enum class LinearInput { kFp8Emulated, kFp8Quant, kBf16Split, kBf16 };
  LinearInput LinearInputFor(const Linear& L, int64_t M, int64_t ldy) const;
  // x16 (optional, ld = L.K): bf16(x) already made by the producer (fused_norm: the norms'
  // bf16 copies; fused_silu16: SiLU-and-mul's bf16 output); used instead of this call's
  // SplitBf16 where the GEMM takes bf16 activations (LinearInput::kBf16; x may then be null).
  // epi (optional): the norm-only SkinnyCombineEpilogue (skinny_gemm.h) of y, applied when the
  // projection runs on SkinnyGemm's plain kernel (SkinnyCombineFits); returns whether it was.
  bool LinearFwd(const Linear& L, const float* x, int64_t ldx, int64_t M, float* y, int64_t ldy,
                 const bf16* x16 = nullptr, const SkinnyCombineEpilogue* epi = nullptr);
  // cuBLASLt bf16 GEMM g on this branch's workspace (LtWorkspace); with x_lo (the lo half of a
  // bf16 hi + lo split of the activations, same layout as g.x) a second GEMM adds x_lo's product.
  void RunGemmBf16(GemmBf16Params g, const bf16* x_lo);
  // Debug (fp8_emulate_act_quant): y = dequant(quant(x)) @ dequant(W)^T, x quantised to e4m3
  // per 1x128 group exactly as the cuBLASLt path does (Fp8QuantizePerTokenGroup), both
  // dequantised operands carried as bf16 hi + lo (~16-bit): three bf16 GEMMs, fp32 accumulation.
  // fp8_skinny_sm90: g on Fp8SkinnyGemmSm90 where it applies (true), else false (cuBLASLt then).
  bool RunFp8SkinnySm90(const Linear& L, const GemmFp8Params& g);
  void EmulateFp8Linear(const Linear& L, const float* x, int64_t ldx, int64_t M, float* y, int64_t ldy);
  // Batched per-head bf16 GEMM on fp32 activations (split hi/lo when precise): cuBLAS
  // strided-batched; rows <= kSkinnyHeadMaxRows (not precise) would take the skinny kernel's
  // batched form, heads as groups (kSkinnyHeadMaxRows = 0: cuBLAS measured faster).
  // x16 (optional, not with precise_activations; [rows, ldx] bf16, x32 then unused and may be
  // null): bf16(x) made by the producer (fused_olat: the MLA decode attention), read instead
  // of this call's SplitBf16 output; same GEMM, same layout, so the same result.
  void HeadGemm(const float* x32, int64_t ldx, int64_t stride_x, int64_t rows, int64_t K, const bf16* w, int64_t ldw,
                int64_t stride_w, int64_t N, float* y, int64_t ldy, int64_t stride_y, int64_t batch,
                const bf16* x16 = nullptr);
  // One model pass. Logits rows go to logits_out (host), or, when b.sampling is set, are
  // sampled on the device and only the ids go to ids_out (host).
  void RunPass(const ForwardBatch& b, float* logits_out, int32_t* ids_out = nullptr);
  // Samples R rows of d_logits ([R, ld] device fp32) with `rs` (RowSampling semantics) and
  // copies the ids to host_ids; synchronises the stream.
  void SampleRows(const float* d_logits, int64_t ld, int64_t R, const std::vector<RowSampling>& rs, int32_t* host_ids);
  DeviceBuffer samp_cfg_, samp_ids_, samp_idx_, samp_rows_;  // settings (SampleRowsEnqueue's layout), ids
  PinnedHostBuffer samp_cfg_host_[2];  // the settings' host side, used in turn
  int samp_cfg_flip_ = 0;
  SampleWorkspace samp_ws_;  // Sample's sorting scratch, reused step after step (no host wait)
  PinnedHostBuffer samp_host_ids_;  // the sampled ids' host side (SampleRows)
  // Enqueues SampleRows' work without the host side: the ids stay in samp_ids_ ([R] i32, row
  // order; the next step's prev_sample_rows gather reads them there) and are copied to `host`.
  void SampleRowsEnqueue(const float* d_logits, int64_t ld, int64_t R, const std::vector<RowSampling>& rs,
                         void* host);
  // SampleRowsEnqueue's device work only: the ids into dev_ids ([R] i32, device), no copy back.
  void SampleRowsToDevice(const float* d_logits, int64_t ld, int64_t R, const std::vector<RowSampling>& rs,
                          int32_t* dev_ids);
  // A decode graph step that threw: its input / id state dropped, the copy streams drained (the
  // catch blocks of Forward and Launch).
  void AbandonGraphStep();
  // Checks a batch as Forward does (shape, ids in the vocabulary, positions in the pool).
  Status CheckBatch(const ForwardBatch& batch) const;
  // ---- overlap scheduling (Launch / Finish) ----
  struct LaunchedStep {
    bool async = false;  // queued on s_: ids land in samp_ring_[slot] when ring_ev_[slot] fires
    int slot = 0;
    ForwardOutput out;   // a sync step's output; an async step's token_ids sized R
    Status status;       // an async step that failed on the device: Finish returns this
  };
  std::deque<LaunchedStep> launched_;
  PinnedHostBuffer samp_ring_[2];  // async steps' sampled ids (kMaxGraphBucket each)
  cudaEvent_t ring_ev_[2] = {nullptr, nullptr};
  int next_slot_ = 0;
  // The last launched step: whether it sampled, its row count, whether it was async (its ids
  // then still in samp_ids_ on the device) and, for a sync one, its ids on the host.
  bool last_sampled_ = false, last_async_ = false;
  int64_t last_rows_ = 0;
  std::vector<int32_t> last_ids_;
  // Waits for the oldest launched step and fills its output (async: from its ring slot).
  Status CompleteOldest();
  // True while an async step is unfinished.
  int NumAsyncInFlight() const {
    int n = 0;
    for (const LaunchedStep& l : launched_) n += l.async;
    return n;
  }
  // cudaSetDevice(opts_.device) as a Status: the current device is per host thread, and an
  // engine calls Launch / Forward from its own thread (serve: DP rank r's engine thread).
  Status UseDevice() const;
  // ---- CUDA graphs for decode steps ----
  // A typed view of a part of a graph's input buffer.
  struct InputView {
    void* ptr = nullptr;
    void* get() const { return ptr; }
    template <typename T> T* as() const { return static_cast<T*>(ptr); }
  };
  // One captured decode forward: a bucket of `bucket` sequences with block tables of
  // `cap_blocks` entries. Its inputs live in these persistent device buffers, written before
  // every replay.
  struct DecodeGraph {
    int bucket = 0, cap_blocks = 0;
    // The step's inputs, staged by ONE host-to-device copy from `host` (pinned, same layout)
    // before each replay: views into `in[cur]` at 16-byte aligned offsets. graph_io: two input
    // buffers and two graphs (exec[q] reads in[q]; the runner's parity gpar_ picks q); otherwise
    // in[0] and exec[0] only.
    DeviceBuffer in[2];
    // Two pinned copies used in turn: with overlap scheduling the next step's inputs are written
    // while this step's copy may still wait in the stream.
    PinnedHostBuffer host[2];
    int flip = 0;
    size_t in_bytes = 0;
    size_t off_ids = 0, off_pos = 0, off_slots = 0, off_qs = 0, off_ctx = 0, off_bt = 0, off_prev = 0;
    // [B] i32, [B] i32, [B] i64, [B+1], [B], [B, cap], [B] i32 (prev_sample_rows, -1 = none)
    InputView ids, pos, slots, qs, ctx, bt, prev;
    int cur = 0;  // the input buffer the views point into (SetInputs)
    cudaGraphExec_t exec[2] = {nullptr, nullptr};
    bool failed = false;  // capture failed once: this key runs the padded pass eagerly
    // Profiling (prof_on_): event-record nodes captured at the phase marks (per graph); every
    // replay records them, so the phases of graph decode steps are timed on the device.
    std::vector<std::pair<std::string, cudaEvent_t>> marks[2];
    // Points the views into in[q].
    void SetInputs(int q) {
      cur = q;
      char* base = static_cast<char*>(in[q].get());
      ids.ptr = base + off_ids;
      pos.ptr = base + off_pos;
      slots.ptr = base + off_slots;
      qs.ptr = base + off_qs;
      ctx.ptr = base + off_ctx;
      bt.ptr = base + off_bt;
      prev.ptr = base + off_prev;
    }
  };
  // True when `b` is a decode-only step this runner replays through a graph.
  bool GraphEligible(const ForwardBatch& b) const;
  // async_slot >= 0: overlap scheduling; b.prev_sample_rows gathered on the device (graph_io:
  // by the graph's embedding kernel from GraphIds(q ^ 1); else from samp_ids_), the ids sampled into samp_ring_[async_slot] with ring_ev_[async_slot] recorded, no
  // synchronisation (out->token_ids keeps its size only).
  void ForwardDecodeGraph(const ForwardBatch& b, ForwardOutput* out, int async_slot = -1);
  // Whether b's logits rows are 0..R-1 in order (logits_indices[r] == r for every r < R).
  static bool IdentityRows(const ForwardBatch& b);
  // The graph pass's logits rows to sample, in logits_indices order: logits_ itself for identity
  // rows, else gathered into samp_rows_ (stream-ordered on s_).
  const float* RowsToSample(const ForwardBatch& b);
  // The (bucket, block-table width) key of b's graph.
  static std::pair<int, int> GraphKey(const ForwardBatch& b);
  // Whether b's graph is captured and valid (the activation buffers unchanged since).
  bool GraphReady(const ForwardBatch& b) const;
  // Captures g's graph (graph_io: both, exec[0] over in[0] and exec[1] over in[1]).
  void CaptureGraph(const ForwardBatch& padded, DecodeGraph* g);
  void CaptureGraphOnce(const ForwardBatch& padded, DecodeGraph* g, int q);
  // ---- graph_io ----
  // The graphs' sampled ids: two buffers of kMaxGraphBucket i32 used in turn (graph_ids_ [2,
  // kMaxGraphBucket]); a graph of parity q writes GraphIds(q) and gathers the previous step's ids
  // from GraphIds(q ^ 1). Allocated once (graphs hold its address).
  DeviceBuffer graph_ids_;
  int32_t* GraphIds(int q) { return graph_ids_.as<int32_t>() + q * int64_t{kMaxGraphBucket}; }
  SampleWorkspace graph_argmax_ws_;  // the graphs' split argmax scratch (sized once; graphs hold it)
  DeviceBuffer lm_argmax_ws_, lm_argmax_cnt_;  // lm_head_argmax's partials and counter (allocated once)
  DeviceBuffer lm_argmax_id_;  // the eager passes' id from LmHeadArgmax (unused: they sample the logits)
  // lm_head_argmax applies to a pass of R logits rows (fuse_norm: the final norm wrote h16_).
  bool LmHeadArgmaxOk(int64_t R, bool fuse_norm) const;
  mutable int lm_argmax_shape_ok_ = -1;  // LmHeadArgmaxOk's shape / input verdict (-1: not yet)
  // LmHeadArgmax of the bf16 row x into logits_ (row 0) and *out_id; x == nullptr: of the final
  // norm of residual_'s row 0, computed in the kernel (lm_head_norm).
  void RunLmHeadArgmax(const bf16* x, int32_t* out_id);
  // lm_head_norm for the current pass (RunPass): the last MoE kernel may leave the final norm to
  // LmHeadArgmax (lm_norm_pass_), and did (lm_norm_pending_: h32 / h16 stale, residual_ final).
  bool lm_norm_pass_ = false, lm_norm_pending_ = false;
  int gpar_ = 0;      // parity of the next graph step (toggled by each one)
  int gio_q_ = -1;    // the parity RunPass builds (graph_io graph mode), else -1
  int gio_ids_q_ = -1;  // the parity whose GraphIds hold the last graph_io step's ids (-1: none)
  Stream in_stream_;  // graph_io: the steps' input copies
  Stream out_stream_; // graph_io: the sampled ids' copies back
  cudaEvent_t in_ev_[2] = {nullptr, nullptr}, done_ev_[2] = {nullptr, nullptr};
  // Device pointers of every activation buffer; a graph is valid only while they are unchanged.
  std::vector<void*> ActivationPtrs() const;
  void DropGraphs() {
    for (auto& [k, g] : graphs_) {
      for (int q = 0; q < 2; ++q) {
        if (g->exec[q]) { cudaGraphExecDestroy(g->exec[q]); g->exec[q] = nullptr; }
        for (auto& m : g->marks[q]) cudaEventDestroy(m.second);
        g->marks[q].clear();
      }
    }
  }
  // ---- side branches (CudaRunnerOptions::decode_streams) ----
  // The GEMM helpers' scratch (LinearFwd, EmulateFp8Linear, HeadGemm, RunSkinny, RunFp8Gemv): [0] for the
  // main chain, [1] for side branches, so the two never share a buffer, split-K counter, FP8
  // GEMV workspace or cuBLASLt workspace while they overlap in a graph replay.
  struct GemmScratch {
    DeviceBuffer xhi, xlo, xq, xs;         // bf16 hi / lo splits; e4m3 activations and their scales
    DeviceBuffer hhi, hlo;                 // HeadGemm's bf16 hi / lo splits
    DeviceBuffer skinny_ws, skinny_cnt;    // split-K partials (fp32) and per-tile counters (u32)
    // Fp8Gemv's workspaces, one per weight shape (N, K): counters + split-K partials, zeroed when
    // (re)allocated; the kernel leaves its counters zero.
    std::map<std::pair<int64_t, int64_t>, DeviceBuffer> gemv_ws;
    // Fp8GemvGrouped's workspaces (fp8_gemv_experts, gemv_experts_bf16), one per expert weight
    // shape and type (E, N, K, bf16 weights): its layout depends on those only; zeroed when
    // (re)allocated, the kernel leaves its counters zero.
    std::map<std::tuple<int64_t, int64_t, int64_t, bool>, DeviceBuffer> gemv_experts_ws;
    DeviceBuffer lt_ws;                    // [1] only: own cuBLASLt workspace (kGemmWorkspaceBytes)
    DeviceBuffer fp8_skinny_ws;            // Fp8SkinnyGemmSm90's workspace (fp8_skinny_sm90; K-split partials)
  };
  GemmScratch scratch_[2];
  GemmScratch& Sc() { return scratch_[side_ ? 1 : 0]; }
  // cuBLASLt workspace for this branch's GemmBf16 / GemmFp8 (nullptr: the device's shared one).
  void* LtWorkspace();
  // Work enqueued between BeginSide() and EndSide() is a side branch: it must not touch what the
  // main chain enqueues until JoinSide(), and JoinSide() comes before anything reads its
  // results. During a graph capture with decode_streams it goes onto side_stream_ (forked from
  // s_ by fork_ev_, joined back by join_ev_); otherwise it runs in order on s_. Either way it
  // uses scratch_[1]. ResetSide() restores the main stream (after an error mid-branch).
  void BeginSide();
  void EndSide();
  void JoinSide();
  void ResetSide() {
    side_ = side_forked_ = false;
    s_ = stream_.get();
  }
  bool side_ = false, side_forked_ = false;
  cudaEvent_t fork_ev_ = nullptr, join_ev_ = nullptr;
  // SkinnyGemm with the runner's split-K workspace attached (grown outside graph capture: the
  // eager pass of a shape precedes its capture; the counters are zeroed once).
  void RunSkinny(SkinnyGemmParams sp);
  // fp8_gemv: y[M, N] (row stride ldy) = xa[M, L.K] (bf16) @ L^T on Fp8Gemv (fp8_gemv.h), its
  // workspace grown (and zeroed) outside graph capture: the eager pass of a shape precedes its
  // capture.
  void RunFp8Gemv(const Linear& L, const bf16* xa, int64_t M, float* y, int64_t ldy);
  // Grows ws to >= bytes and zeroes it (split-K counters start at zero; the GEMV kernels leave
  // them zero), only outside a graph capture (DS_CHECK names `what`): the eager pass of a shape
  // precedes its capture.
  void GrowZeroed(DeviceBuffer& ws, size_t bytes, const char* what);
  // fp8_gemv_experts / gemv_experts_bf16: the skinny expert GEMM `g` (FP8 or BF16 experts,
  // device offsets, <= 8 rows per group) on Fp8GemvGrouped (fp8_gemv_grouped.h; w_bf16 for BF16
  // experts), its workspace grown (and zeroed) outside graph capture: the eager pass of a shape
  // precedes its capture.
  void RunGemvExperts(const GroupedGemmParams& g, int64_t max_group_rows, int64_t max_active_groups);
  // Device copy of {0, rows} (the one-group offsets of the in-kernel FP8 linear), made once.
  const int32_t* OneGroupOffsets(int64_t rows);
  std::map<std::pair<int, int>, std::unique_ptr<DecodeGraph>> graphs_;
 public:
  CudaGraphStats graph_stats_;
 private:
  std::vector<void*> graph_ptrs_;
  const DecodeGraph* gin_ = nullptr;  // graph-mode inputs of the current pass (nullptr: eager)
  bool capturing_ = false;
  bool skinny_on_ = true;  // decode-size GEMMs on the skinny kernel (skinny_gemm.h)
  bool sm90_gg_on_ = true;  // prefill-size expert GEMMs on the sm_90a kernel (grouped_gemm_sm90.h)
  int scratch_block_ = 0;             // KV block reserved for padded rows (not the engine's)
  std::map<int64_t, DeviceBuffer> offs_by_rows_;
  const int32_t* d_pos_ = nullptr;    // this pass's positions [T] and cache slots [T] (device)
  const int64_t* d_slots_ = nullptr;
  void Mla(int l, const ForwardBatch& b, int64_t T);
  // attn_persistent: the whole attention layer of a one-token, one-sequence decode pass as one
  // MlaAttnPersistent launch (mla_attn_persistent.h), writing o32_; false (nothing done) where it
  // does not apply.
  bool AttnPersistent(int l, const ForwardBatch& b, int64_t T);
  // AttnPersistent's conditions without its side effects: the pass's (set by RunPass into
  // attn_pass_ok_) and layer l's (its weights, and the kernel's verdict once asked).
  bool AttnPersistentPassOk(const ForwardBatch& b, int64_t T) const;
  int64_t AttnPersistentMaxContext(const ForwardBatch& b) const;  // keys its workspace must hold
  // in_residual: the form that normalises the residual itself (norm_in_attn).
  bool AttnPersistentLayerOk(int l, bool in_residual) const;
  // Returns true when it also applied the residual add and the next RMSNorm (fused_norm): h32
  // then holds the next layer's normalised input (or the final norm's output).
  bool Mlp(int l, int64_t T);
  // The routing parameters of layer LW for a pass of T tokens (logits in rlogits_, ids and
  // weights into topk_ids_ / topk_w_).
  MoeRoutingParams RoutingParams(const LayerW& LW, int64_t T);
  // persistent_moe: whether MoE layer l of a pass of T tokens runs as MoePersistent (the option
  // on, one token, bf16 experts, the kernel supports the shapes); with launch, runs it (residual
  // += the layer's output; h32 / h16 = the next norm). fold_post_norm: the kernel also applies
  // the post-attention norm to residual + o32 (RunPass then skips its RmsNorm launch).
  bool PersistentMoe(int l, int64_t T, bool fold_post_norm, bool launch);
  // moe_ring: layer l's tensor maps where MoeRing takes p with `form` (the verdict asked once a
  // layer, the reason logged where it does not), else nullptr; checks that the weights did not move.
  const MoeRingMaps* RingMapsFor(int l, const MoePersistentParams& p, const MoeRingForm& form);
  // fused_moe_shared: copies the shared experts (L->gate_up, L->down) into groups E .. E + S - 1
  // of L->w13 / L->w2 (allocated with room for them) when their dtypes match.
  void StackSharedExperts(LayerW* L);
  // combine_norm_split applies to this pass (T tokens) of this model (cuda_runner.cpp).
  bool CombineNormSplitOn(int64_t T) const;
  // Its fields of a MoeCombineNorm launch (G, the barrier words, the warp-sum scratch).
  void SetCombineNormSplit(MoeCombineNormParams* cn);
  bool FusedDecode(int64_t T) const {
    return T <= std::min<int64_t>(opts_.fused_decode_max_tokens, kMoeRoutePermuteMaxTokens);
  }
  // Profiling (opts_.profile): events between phases; Mark(name) ends phase `name`.
  void Mark(const char* name) {
    if (!prof_on_) return;
    if (capturing_) {  // an event-record node in the graph being captured
      cudaEvent_t e;
      DS_CUDA_CHECK(cudaEventCreate(&e));
      DS_CUDA_CHECK(cudaEventRecordWithFlags(e, s_, cudaEventRecordExternal));
      cap_marks_.push_back({prof_prefix_ + name, e});
      return;
    }
    if (gin_) return;  // the eager warm-up run of a graph shape is not profiled
    cudaEvent_t e;
    DS_CUDA_CHECK(cudaEventCreate(&e));
    DS_CUDA_CHECK(cudaEventRecord(e, s_));
    marks_.push_back({prof_prefix_ + name, e});
  }
  void CollectMarks() {
    if (!prof_on_ || capturing_ || marks_.empty()) return;
    DS_CUDA_CHECK(cudaEventSynchronize(marks_.back().second));
    AddMarkIntervals(marks_);
    prof_ms_[prof_prefix_ + "#passes"] += 1;
    for (auto& m : marks_) cudaEventDestroy(m.second);
    marks_.clear();
  }
  bool prof_on_ = false, prof_log_ = false;
  // CudaRunnerOptions::step_timeline: per replayed graph step, events at the input copy's start,
  // the graph's start and end, and after the ids' copy back (mark 3: tl_post_pending_).
  bool step_tl_ = false;
  struct StepEvents {
    cudaEvent_t e[4] = {nullptr, nullptr, nullptr, nullptr};
    int marks = 0;  // bit i: e[i] recorded
  };
  std::vector<StepEvents> step_tl_ev_;
  bool tl_post_pending_ = false;  // SampleRows records mark 3 after its copy
  // Records mark i (0..3) of the current step's events (a new step at 0; at most 4,096 steps).
  void StepMark(int i) {
    if (!step_tl_ || capturing_) return;
    if (i == 0) {
      tl_active_ = step_tl_ev_.size() < 4096;
      if (!tl_active_) return;
      StepEvents se;
      for (cudaEvent_t& e : se.e) DS_CUDA_CHECK(cudaEventCreate(&e));
      step_tl_ev_.push_back(se);
    }
    if (!tl_active_) return;  // this step's mark 0 was not recorded
    DS_CUDA_CHECK(cudaEventRecord(step_tl_ev_.back().e[i], s_));
    step_tl_ev_.back().marks |= 1 << i;
  }
  // Drops the current step's events (a step that did not replay its graph).
  void StepDrop() {
    if (!step_tl_ || !tl_active_) return;
    for (cudaEvent_t e : step_tl_ev_.back().e) cudaEventDestroy(e);
    step_tl_ev_.pop_back();
    tl_active_ = false;
  }
  bool tl_active_ = false;  // the current step's events are step_tl_ev_.back()
  void ReportStepTimeline();
  std::vector<std::pair<std::string, cudaEvent_t>> cap_marks_;  // marks of the graph being captured
  // After a replay of g (stream synchronised): adds its phases' device times to prof_ms_.
  void CollectGraphMarks(const DecodeGraph& g) {
    AddMarkIntervals(g.marks[g.cur]);
    if (!g.marks[g.cur].empty()) prof_ms_["decode/#passes"] += 1;
  }
  // Adds the device time between consecutive marks to their phases (events complete).
  void AddMarkIntervals(const std::vector<std::pair<std::string, cudaEvent_t>>& marks) {
    for (size_t i = 1; i < marks.size(); ++i) {
      float ms = 0;
      DS_CUDA_CHECK(cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second));
      prof_ms_[marks[i].first] += ms;
    }
  }
  std::string prof_prefix_;
  std::vector<std::pair<std::string, cudaEvent_t>> marks_;
  std::map<std::string, double> prof_ms_;

  ModelConfig cfg_;
  CudaRunnerOptions opts_;
  const Checkpoint* ckpt_ = nullptr;
  bool dummy_ = false;
  uint64_t tensor_counter_ = 0;
  Stream stream_;
  Stream side_stream_;        // side branches of decode graphs (decode_streams)
  cudaStream_t s_ = nullptr;  // the stream ops are enqueued on: stream_, or side_stream_ inside a forked branch
  int num_blocks_ = 0;
  RopeTables rope_;
  DeviceBuffer d_cos_, d_sin_;
  DeviceBuffer embed_, final_norm_, lm_head_;
  Linear lm_head_lin_;
  std::vector<LayerW> layers_;
  std::vector<DeviceBuffer> cache_;  // per layer bf16 [num_blocks * 64, L]
  bool use_cublas_fp8_ = true;

  // ---- activations (grown on demand) ----
  DeviceBuffer ids_, pos_, slots_, residual_, h32_, h16_, o32_, mlp32_, q32_, cq32_, cq16_, lat32_;
  DeviceBuffer attn32_, gu32_, act32_, act16_, offs1_;
  DeviceBuffer ctx_slots_, lat16_, rope32_, kv32_, grp_qs_, grp_ks_, grp_pos0_;
  DeviceBuffer tok_idx_, qa32_, qlat32_, qlat16_, olat32_, olat16_, ova32_, ov16_, dec_qs_, dec_ctx_, dec_bt_, dec_ws_;
  DeviceBuffer rlogits_, topk_ids_, topk_w_, moe_offs_, moe_pos_, moe_src_, moe_ws_, xp16_, egu32_, eact16_, ey16_;
  DeviceBuffer sel32_, logits_;
  // sm_90a expert GEMMs: workspace (grouped_gemm_sm90.h); FP8 x FP8 experts: e4m3 activations
  // [cap, max(H, I)] and their token-major 1x128 scales.
  DeviceBuffer moe_gg_ws_, eq8_, es_;
  DeviceBuffer dense_gg_ws_;  // sm_90a mixed-input dense projections (sm90_mixed_gemm): workspace
  DeviceBuffer route_sync_;  // MoeRoutePermute's counter (u32, zeroed once)
  DeviceBuffer persist_sync_;      // MoePersistent's grid barrier words, then router_ready (4 x u32, zeroed once)
  DeviceBuffer persist_router_tagged_;  // MoePersistent's tagged router logits ([E] u64, zeroed once; moe_router_tagged)
  DeviceBuffer persist_act_tagged_;     // MoeRing's tagged act ([kMoeRingActWords] u64, zeroed once; moe_ring_act_tagged)
  DeviceBuffer persist_partials_;  // MoePersistent's per-block sums of squares
  DeviceBuffer persist_act_;       // MoePersistent's act [top_k * I + shared I] bf16
  DeviceBuffer attn_sync_;         // MlaAttnPersistent's grid barrier words, nope_ready, split_ready, head_ready[16] (20 x u32, zeroed once)
  DeviceBuffer attn_qlat16_;       // MlaAttnPersistent's q_lat [H, kv_lora] bf16
  // MlaAttnPersistent's verdict on this model per input form ([0] x16, [1] in_residual: the
  // norm in the kernel; -1: not asked).
  int8_t attn_ok_[2] = {-1, -1};
  bool attn_pass_ok_ = false;      // AttnPersistentPassOk for the current pass (RunPass)
  // norm_in_attn: the last MoE kernel left the next layer's input norm to that layer's attention
  // kernel (residual_ holds the stream; h32 / h16 are stale until it runs).
  bool attn_norm_pending_ = false;
  std::vector<int8_t> persist_ok_;  // MoePersistent's verdict per (layer, fold form, norm form): -1 not asked, 0 / 1
  // moe_ring: MoeRing's verdict per layer (-1 not asked, 0 / 1) and the layer's tensor maps (built
  // with the verdict) with the weight pointers they were made from (checked at each launch).
  std::vector<int8_t> ring_ok_;
  std::vector<std::pair<MoeRingMaps, std::array<const void*, 4>>> ring_maps_;
  DeviceBuffer down_combine_sync_;  // the down GEMM's combine epilogue counter (u32, zeroed once)
  DeviceBuffer combine_split_sync_;  // MoeCombineNorm's split_blocks barrier counter (2 x u32, zeroed once)
  DeviceBuffer combine_split_ss_;    // its [T, 32] warp sums of squares
  DeviceBuffer oproj_norm_sync_;    // o_proj's norm epilogue counter (u32, zeroed once)
  bool post_norm_fused_ = false;    // the last Mla's o_proj applied the post-attention norm (fused_oproj_norm)
  DeviceBuffer mla_split_cnt_;  // MLA decode fused combine: per-sequence counters (u32, zeroed once)
};

}  // namespace ds::cuda::runner_impl
