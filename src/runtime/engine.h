// Engine: continuous batching over one ModelRunner. One engine thread runs steps; other
// threads (the HTTP server) talk to it only through Add()/Abort()/StopAdmission() (a locked
// inbox) and the per-request on_output callback (called on the engine thread).
//
// Ownership (docs/design/engine.md): the engine owns every Sequence and, through its
// BlockManager, every KV block id; the runner owns the KV memory; the caller owns nothing
// after Add() except its callback's captured state.
//
// Per step: drain the inbox (adds, then aborts) -> SchedulerPolicy decides (chunked prefill +
// decode under the token budget; preemption by recompute when blocks run out) -> blocks are
// taken (prefix cache) / grown -> one ForwardBatch -> sampling for sequences whose whole
// context is computed -> detokenize, stop checks, outputs -> finished sequences free blocks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "kv_cache/block_manager.h"
#include "runtime/metrics.h"
#include "runtime/model_runner.h"
#include "scheduler/detokenizer.h"
#include "scheduler/sampler.h"
#include "scheduler/sampling_params.h"
#include "scheduler/scheduler_policy.h"

namespace ds {

struct EngineOptions {
  int max_num_batched_tokens = 2048;
  int max_running_requests = 64;
  double decode_reserve_ratio = 0.0;  // SchedulerLimits::decode_reserve_ratio (0: vLLM v1 admission)
  int max_queued_requests = 4096;   // waiting (not yet admitted) requests; more -> rejected
  int max_model_len = 0;            // 0: the model's max_position_embeddings
  bool enable_prefix_caching = true;
  std::vector<int32_t> eos_token_ids;  // EOS tokens (stop unless ignore_eos)
  double stats_interval_s = 10.0;   // periodic INFO line; 0 = off
  // Overlap scheduling (SGLang's overlap scheduler; off: --disable-overlap-schedule). When the
  // step in flight is all decode and sampled by the runner (and, with requests waiting, the policy
  // would schedule just those decodes next), the next decode step of the same sequences is launched (its token ids are the step in flight's sampled rows,
  // ModelRunner::Launch's prev_sample_rows) before that step's outputs are processed, so the
  // host's share of a step runs while the device works. Only with a runner that overlaps
  // (ModelRunner::CanOverlap). A sequence that stops at the step in flight has its extra step's
  // token dropped.
  bool overlap_schedule = true;
};

// One increment of a request's output.
struct EngineOutput {
  uint64_t request_id = 0;
  std::vector<int32_t> token_ids;        // newly generated tokens (EOS/stop tokens included)
  std::string text;                      // newly releasable text (stop strings held back)
  std::vector<TokenLogprob> logprobs;    // one per token in token_ids when requested
  bool finished = false;
  std::string finish_reason;             // "stop" | "length" | "abort" | "error"
  std::optional<std::string> stop_str;   // the stop string that matched
  std::optional<int32_t> stop_token;     // the stop token / EOS that ended generation
  std::string error;                     // finish_reason == "error"
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;
  int num_cached_tokens = 0;             // prompt tokens served from the prefix cache
};

using OutputCallback = std::function<void(EngineOutput&&)>;

struct EngineRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  OutputCallback on_output;  // engine thread; keep it short and never block on the engine
};

enum class SeqStatus { kWaiting, kRunning, kPreempted, kFinished, kAborted };
const char* SeqStatusName(SeqStatus s);

class Engine {
 public:
  // `runner` and `decoder` must outlive the engine.
  Engine(ModelRunner* runner, const TokenDecoder* decoder, EngineOptions options,
         std::unique_ptr<SchedulerPolicy> policy = nullptr);
  ~Engine();

  // Thread-safe API ------------------------------------------------------------------------
  // Validates and queues a request. INVALID_ARGUMENT: empty prompt, token id outside the
  // vocabulary, prompt + max_tokens over max_model_len or the KV pool; RESOURCE_EXHAUSTED:
  // the waiting queue is full or admission is stopped.
  Status Add(EngineRequest req);
  // Aborts a request (no-op if unknown or finished): at the next step its blocks are freed
  // and a final output with finish_reason "abort" is sent.
  void Abort(uint64_t request_id);
  void StopAdmission();
  bool admission_stopped() const { return stop_admission_.load(); }
  // Requests queued or running (including ones still in the inbox).
  int num_in_flight() const { return in_flight_.load(); }
  // Context tokens (prompt + generated) of the requests in flight: the attention cost a new
  // request adds to this engine's steps (the DP balance signal, scheduler/dp_policy.h).
  int64_t context_tokens_in_flight() const { return context_tokens_.load(); }
  EngineStats Stats() const;
  const Histogram& ttft() const { return ttft_; }
  const Histogram& tpot() const { return tpot_; }
  const Histogram& itl() const { return itl_; }
  const Histogram& e2e() const { return e2e_; }
  const Histogram& queue_time() const { return queue_; }
  int max_model_len() const { return max_model_len_; }
  int vocab_size() const { return vocab_size_; }
  int num_kv_blocks() const { return num_blocks_; }

  // Thread control ---------------------------------------------------------------------------
  void Start();  // spawns the engine thread
  void Stop();   // aborts everything still in flight and joins the thread

  // For tests without the thread: one step (drains the inbox first). Returns false when there
  // was nothing to run.
  bool Step();
  // Test/debug: checks block-manager invariants and that running sequences' blocks cover
  // their computed tokens (engine thread or stopped engine only).
  void CheckInvariants() const;

 private:
  struct Sequence;
  class View;
  using Clock = std::chrono::steady_clock;

  void Loop();
  void DrainInbox();
  void FinishSeq(Sequence* s, const std::string& reason, EngineOutput* out);
  void AbortSeq(Sequence* s, const std::string& reason, const std::string& error);
  void Preempt(Sequence* s);
  void RemoveFromQueues(Sequence* s);
  // logits: the row to sample on the host, or nullptr when the runner sampled `runner_token`.
  void ProcessSample(Sequence* s, const float* logits, int32_t runner_token, EngineOutput* out);
  void MaybeLogStats();
  void PublishGauges();
  // The launched, not yet processed step (Step launches; the next Step, or Stop, finishes it).
  struct InFlight {
    struct Item {
      uint64_t id;
      int start, num_new;
    };
    std::vector<Item> items;
    std::vector<uint64_t> samplers;  // request ids whose rows are sampled, in row order
    bool runner_sampled = false;
    bool all_decode = false;         // every item one decode token, every item sampled
    int num_prefill_tokens = 0, num_decode = 0, num_tokens = 0, num_preempted = 0;
    Clock::time_point t0;
  };
  std::optional<InFlight> inflight_;
  // Finishes inflight_ on the runner and applies its outputs (tokens, stops, frees).
  void FinishInflight();
  // Overlap scheduling: launches the next decode step of inflight_'s sequences (ids from its
  // sampled rows) when it may; returns the new step, or nullopt (nothing launched).
  std::optional<InFlight> LaunchLookahead(const InFlight& f);
  // With requests waiting: whether the policy, given the running sequences with the step in
  // flight counted as done (its sequences one token longer; those ending by length there left
  // out), schedules exactly one decode token for each of `seqs` and nothing else.
  bool PolicySchedulesJust(const InFlight& f, const std::vector<Sequence*>& seqs);
  // The policy's view of a running / waiting sequence.
  static SchedSeq RunningView(const Sequence* s);
  static SchedSeq WaitingView(const Sequence* s);
  // A batch's runner-side sampling row for s's token num_output() + ahead.
  static RowSampling SamplingRow(const Sequence* s, int ahead);
  // batch->max_blocks, block_tables (row i: seqs[i]'s KV blocks, -1 padded) and query_start's 0.
  static void StartBatch(const std::vector<const Sequence*>& seqs, ForwardBatch* batch);
  // Forgets inflight_ and finishes every step the runner still holds, dropping the outputs
  // (error paths, Stop).
  void DropLaunched();

  ModelRunner* runner_;
  const TokenDecoder* decoder_;
  EngineOptions opts_;
  std::unique_ptr<SchedulerPolicy> policy_;
  int vocab_size_ = 0;
  int max_model_len_ = 0;
  int num_blocks_ = 0;

  // Engine-thread state.
  BlockManager blocks_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // priority order (admission order)
  std::deque<Sequence*> waiting_;   // preempted first, then FCFS
  uint64_t seed_state_;

  // Inbox.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EngineRequest> pending_adds_;
  std::vector<uint64_t> pending_aborts_;
  bool stop_thread_ = false;
  std::thread thread_;

  std::atomic<bool> stop_admission_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> context_tokens_{0};
  std::atomic<int> queued_{0};  // inbox + waiting (never yet scheduled)

  // Stats (written by the engine thread, read under stats_mu_).
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  Histogram ttft_, tpot_, itl_, e2e_, queue_;
  Clock::time_point last_log_;
  int64_t log_prompt_tokens_ = 0, log_gen_tokens_ = 0;
};

}  // namespace ds
