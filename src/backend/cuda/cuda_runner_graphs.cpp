// The CUDA model runner's decode graphs (CudaModelRunner members; the class is in
// cuda_runner_impl.h, the rest of it in cuda_runner.cpp): which steps replay a graph, the padded
// batch of a bucket, capture and replay.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_runner_impl.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/moe_persistent.h"
#include "backend/cuda/runner_kernels.h"
#include "common/check.h"
#include "common/logging.h"

namespace ds::cuda::runner_impl {

bool CudaModelRunner::GraphEligible(const ForwardBatch& b) const {
  const int64_t S = b.num_seqs();
  if (!opts_.cuda_graphs || opts_.mla_mode == MlaMode::kNaive || S == 0) return false;
  if (S > std::min(opts_.cuda_graph_max_batch, kMaxGraphBucket)) return false;
  if (S > opts_.max_tokens_per_pass || b.num_tokens() != S) return false;
  for (int64_t s = 0; s < S; ++s)
    if (b.query_start[s + 1] - b.query_start[s] != 1) return false;
  return true;
}

std::vector<void*> CudaModelRunner::ActivationPtrs() const {
  std::vector<void*> v;
  for (const DeviceBuffer* b :
       {&ids_, &pos_, &slots_, &residual_, &h32_, &h16_, &o32_, &mlp32_, &q32_, &cq32_, &cq16_, &lat32_, &attn32_,
        &gu32_, &act32_, &act16_, &offs1_, &ctx_slots_, &lat16_, &rope32_,
        &kv32_, &grp_qs_, &grp_ks_, &grp_pos0_, &tok_idx_, &qa32_, &qlat32_, &qlat16_, &olat32_, &olat16_, &ova32_, &ov16_, &dec_qs_,
        &dec_ctx_, &dec_bt_, &dec_ws_, &rlogits_, &topk_ids_, &topk_w_, &moe_offs_, &moe_pos_, &moe_src_, &moe_ws_,
        &xp16_, &egu32_, &eact16_, &ey16_, &sel32_, &logits_, &moe_gg_ws_, &eq8_, &es_, &dense_gg_ws_, &persist_act_, &attn_qlat16_,
        &graph_ids_, &graph_argmax_ws_.argmax_part, &graph_argmax_ws_.argmax_cnt, &lm_argmax_ws_, &lm_argmax_cnt_,
        &combine_split_ss_})
    v.push_back(b->get());
  for (const GemmScratch& sc : scratch_) {
    for (const DeviceBuffer* b : {&sc.xhi, &sc.xlo, &sc.hhi, &sc.hlo, &sc.xq, &sc.xs, &sc.skinny_ws, &sc.skinny_cnt,
                                  &sc.lt_ws, &sc.fp8_skinny_ws})
      v.push_back(b->get());
    for (const auto& [shape, b] : sc.gemv_ws) v.push_back(b.get());
    for (const auto& [shape, b] : sc.gemv_experts_ws) v.push_back(b.get());
  }
  return v;
}

std::pair<int, int> CudaModelRunner::GraphKey(const ForwardBatch& b) {
  const int S = b.num_seqs();
  int need = 1;
  for (int s = 0; s < S; ++s) need = std::max(need, (b.context_lens[s] + kBlockSize - 1) / kBlockSize);
  return {GraphBucket(S), GraphCapBlocks(need)};
}

bool CudaModelRunner::GraphReady(const ForwardBatch& b) const {
  const auto it = graphs_.find(GraphKey(b));
  return it != graphs_.end() && it->second && it->second->exec[0] && (!opts_.graph_io || it->second->exec[1]) &&
         ActivationPtrs() == graph_ptrs_;
}

void CudaModelRunner::ForwardDecodeGraph(const ForwardBatch& b, ForwardOutput* out, int async_slot) {
  const int S = b.num_seqs();
  const auto [bucket, cap] = GraphKey(b);
  DS_CHECK(bucket >= S) << "graph decode: " << S << " sequences, above the largest bucket";
  // The padded batch: real rows first, then dummy rows (token 0 at position 0 of the scratch
  // block, context 1); every block-table entry past a row's own blocks is the scratch block.
  ForwardBatch pb;
  pb.max_blocks = cap;
  pb.token_ids.assign(bucket, 0);
  pb.positions.assign(bucket, 0);
  pb.context_lens.assign(bucket, 1);
  pb.block_tables.assign(static_cast<size_t>(bucket) * cap, scratch_block_);
  pb.query_start.resize(bucket + 1);
  for (int i = 0; i <= bucket; ++i) pb.query_start[i] = i;
  std::vector<int64_t> slots(bucket, int64_t{scratch_block_} * kBlockSize);
  for (int s = 0; s < S; ++s) {
    pb.token_ids[s] = b.token_ids[s];
    pb.positions[s] = b.positions[s];
    pb.context_lens[s] = b.context_lens[s];
    const int own = (b.context_lens[s] + kBlockSize - 1) / kBlockSize;
    for (int k = 0; k < own; ++k) pb.block_tables[static_cast<size_t>(s) * cap + k] = b.block_tables[s * b.max_blocks + k];
    const int32_t p = b.positions[s];
    slots[s] = int64_t{b.block_tables[s * b.max_blocks + p / kBlockSize]} * kBlockSize + p % kBlockSize;
  }
  auto& slot = graphs_[{bucket, cap}];
  if (!slot) {
    slot = std::make_unique<DecodeGraph>();
    DecodeGraph* n = slot.get();
    n->bucket = bucket;
    n->cap_blocks = cap;
    size_t at = 0;
    const auto take = [&at](size_t bytes) {
      const size_t off = at;
      at += (bytes + 15) / 16 * 16;
      return off;
    };
    n->off_slots = take(bucket * 8);
    n->off_ids = take(bucket * 4);
    n->off_pos = take(bucket * 4);
    n->off_qs = take((bucket + 1) * 4);
    n->off_ctx = take(bucket * 4);
    n->off_bt = take(static_cast<size_t>(bucket) * cap * 4);
    n->off_prev = take(bucket * 4);
    n->in_bytes = at;
    n->in[0].Reset(at);
    if (opts_.graph_io) n->in[1].Reset(at);
    n->host[0].Reserve(at);
    n->host[1].Reserve(at);
    n->SetInputs(0);
  }
  DecodeGraph* g = slot.get();
  // graph_io: this step's parity q (its input buffer, its graph, its id buffer).
  const bool gio = opts_.graph_io;
  const int q = gio ? gpar_ : 0;
  if (gio) {
    if (graph_ids_.size() == 0) {  // once: the graphs hold its address
      graph_ids_.Reserve(2 * int64_t{kMaxGraphBucket} * 4);
      DS_CUDA_CHECK(cudaMemsetAsync(graph_ids_.get(), 0, graph_ids_.size(), s_));
    }
    for (int i = 0; i < 2; ++i)
      for (cudaEvent_t* e : {&in_ev_[i], &done_ev_[i]})
        if (!*e) DS_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    g->SetInputs(q);
  }
  // Stage the inputs into the graph's persistent buffer (stream-ordered before the replay): one
  // pinned host buffer, one copy. The two host buffers take turns: a buffer is rewritten two
  // steps later, after that step's synchronisation (SampleRows / the logits copy below, or, with
  // overlap scheduling, Launch's wait for the older of two steps in flight).
  bool gather_prev = false;
  {
    // graph_io: host[q] (rewritten two graph steps later, as in[q]: by then the step that used
    // it is complete, Launch's wait).
    char* h = static_cast<char*>(g->host[gio ? q : g->flip].get());
    g->flip ^= 1;
    int32_t* prev = reinterpret_cast<int32_t*>(h + g->off_prev);  // -1 past the given rows
    std::fill(prev, prev + bucket, -1);
    for (size_t t = 0; t < b.prev_sample_rows.size(); ++t) {
      prev[t] = b.prev_sample_rows[t];
      gather_prev = gather_prev || prev[t] >= 0;
    }
    std::memcpy(h + g->off_slots, slots.data(), bucket * 8);
    std::memcpy(h + g->off_ids, pb.token_ids.data(), bucket * 4);
    std::memcpy(h + g->off_pos, pb.positions.data(), bucket * 4);
    std::memcpy(h + g->off_qs, pb.query_start.data(), (bucket + 1) * 4);
    std::memcpy(h + g->off_ctx, pb.context_lens.data(), bucket * 4);
    std::memcpy(h + g->off_bt, pb.block_tables.data(), pb.block_tables.size() * 4);
    StepMark(0);
    if (gio) {  // on the copy stream, while the previous step runs; the main stream waits for it
      DS_CUDA_CHECK(cudaMemcpyAsync(g->in[q].get(), h, g->in_bytes, cudaMemcpyHostToDevice, in_stream_.get()));
      DS_CUDA_CHECK(cudaEventRecord(in_ev_[q], in_stream_.get()));
      DS_CUDA_CHECK(cudaStreamWaitEvent(s_, in_ev_[q], 0));
    } else {
      DS_CUDA_CHECK(cudaMemcpyAsync(g->in[0].get(), h, g->in_bytes, cudaMemcpyHostToDevice, s_));
    }
  }
  // Overlap scheduling: token ids from the previous step's sampled ids, still on the device
  // (graph_io: gathered by the graph's embedding kernel from GraphIds(q ^ 1), which the previous
  // graph step wrote: Launch gathers on the device only after a queued step, and every graph step
  // toggles the parity).
  DS_CHECK(!gather_prev || !gio || gio_ids_q_ == (q ^ 1))
      << "graph_io: the previous step's ids are not in GraphIds(" << (q ^ 1) << ")";
  if (gather_prev && !gio) ResolvePrevIds(g->ids.as<int32_t>(), g->prev.as<int32_t>(), samp_ids_.as<int32_t>(), S, s_);
  // A graph holds the activation buffers' addresses: any buffer grown since the capture
  // (a larger eager pass) invalidates every graph.
  if (ActivationPtrs() != graph_ptrs_) DropGraphs();
  gin_ = g;
  gio_q_ = gio ? q : -1;
  const DecodeGraph* replayed = nullptr;  // set when this step replays g (profiled below)
  if (g->exec[q]) {
    StepMark(1);
    DS_CUDA_CHECK(cudaGraphLaunch(g->exec[q], s_));
    StepMark(2);
    ++graph_stats_.replayed;
    replayed = g;
  } else {
    StepDrop();
    ++graph_stats_.eager_padded;
    RunPass(pb, nullptr);  // eager run of this step: warms the buffers, cuBLASLt plans and offsets
    if (!g->failed) CaptureGraph(pb, g);
    if (gio) g->SetInputs(q);
  }
  gin_ = nullptr;
  gio_q_ = -1;
  const int64_t V = cfg_.vocab_size;
  const int64_t R = static_cast<int64_t>(b.logits_indices.size());
  if (gio) {
    gpar_ ^= 1;  // every graph_io step, whatever follows
    gio_ids_q_ = b.sampling.empty() ? -1 : q;
    if (!b.sampling.empty()) {
      // The graph's argmax gave every row's greedy id in GraphIds(q); other rows are sampled here
      // into the same buffer (the next step's gather reads it).
      bool greedy = true;
      for (int64_t r = 0; r < R; ++r) greedy = greedy && b.sampling[r].temperature <= 0.0f;
      if (greedy && IdentityRows(b)) {
        ++graph_stats_.graph_argmax;
      } else {
        SampleRowsToDevice(RowsToSample(b), V, R, b.sampling, GraphIds(q));
      }
      if (replayed) StepMark(3);
      // The ids back on the second copy stream, off the main stream.
      DS_CUDA_CHECK(cudaEventRecord(done_ev_[q], s_));
      cudaStream_t os = out_stream_.get();
      DS_CUDA_CHECK(cudaStreamWaitEvent(os, done_ev_[q], 0));
      if (async_slot >= 0) {
        DS_CUDA_CHECK(cudaMemcpyAsync(samp_ring_[async_slot].get(), GraphIds(q), R * 4, cudaMemcpyDeviceToHost, os));
        DS_CUDA_CHECK(cudaEventRecord(ring_ev_[async_slot], os));
        return;
      }
      samp_host_ids_.Reserve(R * 4);
      DS_CUDA_CHECK(cudaMemcpyAsync(samp_host_ids_.get(), GraphIds(q), R * 4, cudaMemcpyDeviceToHost, os));
      DS_CUDA_CHECK(cudaStreamSynchronize(os));  // after done_ev_[q]: the marks below are complete too
      std::memcpy(out->token_ids.data(), samp_host_ids_.get(), R * 4);
      if (prof_on_ && replayed) CollectGraphMarks(*replayed);
      return;
    }
  }
  if (!b.sampling.empty()) {
    // Sample the requested rows on the device: the decode step returns R ids, not R x V logits.
    const float* rows = RowsToSample(b);
    if (async_slot >= 0) {  // overlap scheduling: no wait here; Finish reads the ring slot
      SampleRowsEnqueue(rows, V, R, b.sampling, samp_ring_[async_slot].get());
      if (replayed) StepMark(3);
      DS_CUDA_CHECK(cudaEventRecord(ring_ev_[async_slot], s_));
      return;
    }
    tl_post_pending_ = replayed != nullptr;
    SampleRows(rows, V, R, b.sampling, out->token_ids.data());
    if (prof_on_ && replayed) CollectGraphMarks(*replayed);
    return;
  }
  for (size_t r = 0; r < b.logits_indices.size(); ++r)
    DS_CUDA_CHECK(cudaMemcpyAsync(out->logits.data() + r * V, logits_.as<float>() + int64_t{b.logits_indices[r]} * V,
                                  V * sizeof(float), cudaMemcpyDeviceToHost, s_));
  DS_CUDA_CHECK(cudaStreamSynchronize(s_));
  if (prof_on_ && replayed) CollectGraphMarks(*replayed);
}

bool CudaModelRunner::IdentityRows(const ForwardBatch& b) {
  const int64_t R = static_cast<int64_t>(b.logits_indices.size());
  bool identity = true;
  for (int64_t r = 0; identity && r < R; ++r) identity = b.logits_indices[r] == r;
  return identity;
}

const float* CudaModelRunner::RowsToSample(const ForwardBatch& b) {
  if (IdentityRows(b)) return logits_.as<float>();
  const int64_t R = static_cast<int64_t>(b.logits_indices.size()), V = cfg_.vocab_size;
  samp_idx_.Reserve(R * 4);  // own buffers: growing a graph's buffers would drop the graphs
  samp_rows_.Reserve(R * V * sizeof(float));
  DS_CUDA_CHECK(cudaMemcpyAsync(samp_idx_.get(), b.logits_indices.data(), R * 4, cudaMemcpyHostToDevice, s_));
  GatherRows(logits_.get(), V * 4, samp_idx_.as<int32_t>(), R, V * 4, samp_rows_.get(), V * 4, s_, opts_.pdl);
  return samp_rows_.as<float>();
}

void CudaModelRunner::CaptureGraph(const ForwardBatch& padded, DecodeGraph* g) {
  // persistent_pdl: a PDL launch refused only under capture (the eager warm-up took it) fails
  // this capture and sets PersistentPdlRefused(); the launches are plain from then on, so
  // capture once more.
  const int graphs = opts_.graph_io ? 2 : 1;
  for (int q = 0; q < graphs && !g->failed; ++q) {
    // graph_io: graph q over input buffer q, ids into GraphIds(q) (RunPass reads gio_q_).
    if (opts_.graph_io) {
      g->SetInputs(q);
      gio_q_ = q;
    }
    const bool pdl_refused_before = PersistentPdlRefused();
    CaptureGraphOnce(padded, g, q);
    if (g->failed && opts_.persistent_pdl && !pdl_refused_before && PersistentPdlRefused()) {
      g->failed = false;
      DS_LOG(WARNING) << "cuda runner: capturing the decode graph again without PDL";
      if (q == 1) {  // graph 0 has PDL launches: capture it again too
        g->SetInputs(0);
        gio_q_ = 0;
        if (g->exec[0]) { cudaGraphExecDestroy(g->exec[0]); g->exec[0] = nullptr; }
        CaptureGraphOnce(padded, g, 0);
        g->SetInputs(1);
        gio_q_ = 1;
      }
      if (!g->failed) CaptureGraphOnce(padded, g, q);
    }
  }
  if (g->failed)  // both graphs or neither
    for (cudaGraphExec_t& e : g->exec)
      if (e) { cudaGraphExecDestroy(e); e = nullptr; }
}

void CudaModelRunner::CaptureGraphOnce(const ForwardBatch& padded, DecodeGraph* g, int q) {
  DS_CUDA_CHECK(cudaStreamSynchronize(s_));
  const std::vector<void*> before = ActivationPtrs();
  if (before != graph_ptrs_) {
    DropGraphs();
    graph_ptrs_ = before;
  }
  cudaGraph_t graph = nullptr;
  DS_CUDA_CHECK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  std::string error;
  for (auto& m : cap_marks_) cudaEventDestroy(m.second);
  cap_marks_.clear();
  try {
    RunPass(padded, nullptr);
  } catch (const CheckError& e) {
    error = e.what();
  }
  // An error inside a side branch leaves s_ on the side stream (and the branch unjoined: the
  // capture then fails to end, reported below).
  ResetSide();
  capturing_ = false;
  const cudaError_t end = cudaStreamEndCapture(s_, &graph);
  if (error.empty() && end != cudaSuccess) error = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  if (error.empty() && ActivationPtrs() != before) error = "an activation buffer was reallocated during capture";
  if (error.empty()) {
    // decode_stream_priority: the kernel nodes keep the priorities of the streams they were
    // captured on (the main chain's above the side branch's).
    const unsigned long long flags = opts_.decode_stream_priority ? cudaGraphInstantiateFlagUseNodePriority : 0;
    const cudaError_t inst = cudaGraphInstantiateWithFlags(&g->exec[q], graph, flags);
    if (inst != cudaSuccess) {
      error = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
      g->exec[q] = nullptr;
    }
  }
  if (graph) cudaGraphDestroy(graph);
  if (!error.empty()) {
    (void)cudaGetLastError();
    g->failed = true;
    DS_LOG(WARNING) << "cuda runner: decode graph for " << g->bucket << " sequences x " << g->cap_blocks
                    << " blocks not captured (" << error << "); this shape runs eagerly";
    return;
  }
  ++graph_stats_.captured;
  for (auto& m : g->marks[q]) cudaEventDestroy(m.second);
  g->marks[q].clear();
  g->marks[q].swap(cap_marks_);
  DS_LOG(INFO) << "cuda runner: captured decode graph for " << g->bucket << " sequences x " << g->cap_blocks
               << " KV blocks";
}

}  // namespace ds::cuda::runner_impl
