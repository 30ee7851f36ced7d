#include "runtime/engine.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <unordered_set>

#include "common/check.h"
#include "common/logging.h"

namespace ds {

const char* SeqStatusName(SeqStatus s) {
  switch (s) {
    case SeqStatus::kWaiting: return "waiting";
    case SeqStatus::kRunning: return "running";
    case SeqStatus::kPreempted: return "preempted";
    case SeqStatus::kFinished: return "finished";
    case SeqStatus::kAborted: return "aborted";
  }
  return "?";
}

namespace {
double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

// A sequence = one engine request (one OpenAI choice). Owned by Engine::seqs_.
struct Engine::Sequence {
  Sequence(EngineRequest r, const TokenDecoder* dec)
      : req(std::move(r)),
        detok(dec, req.params.skip_special_tokens),
        stopper(req.params.stop) {}
  EngineRequest req;
  std::vector<int32_t> tokens;  // prompt + generated
  int num_prompt = 0;
  int num_computed = 0;         // tokens whose KV is in `blocks`
  int num_cached_prompt = -1;   // prefix-cache hit at first admission (-1: not yet admitted)
  SeqBlocks blocks;
  SeqStatus status = SeqStatus::kWaiting;
  uint64_t seed = 0;
  bool ever_scheduled = false;
  std::unordered_map<int32_t, int> counts;
  DeltaDetokenizer detok;
  StopStringMatcher stopper;
  std::chrono::steady_clock::time_point arrival, first_scheduled, first_token, last_token;
  int num_output() const { return static_cast<int>(tokens.size()) - num_prompt; }
};

// The policy's read-only view of the cache.
class Engine::View : public CacheView {
 public:
  explicit View(const Engine* e) : e_(e) {}
  int block_size() const override { return kBlockSize; }
  int num_free_blocks() const override { return e_->blocks_.num_free_blocks(); }
  PrefixHit LookupPrefix(int64_t seq_id) const override {
    auto it = e_->seqs_.find(static_cast<uint64_t>(seq_id));
    if (it == e_->seqs_.end()) return {};
    const Sequence& s = *it->second;
    PrefixMatch m = e_->blocks_.Match(s.tokens, static_cast<int>(s.tokens.size()) - 1);
    return {m.num_tokens(), static_cast<int>(m.block_ids.size()), m.num_free};
  }

 private:
  const Engine* e_;
};

Engine::Engine(ModelRunner* runner, const TokenDecoder* decoder, EngineOptions options,
               std::unique_ptr<SchedulerPolicy> policy)
    : runner_(runner),
      decoder_(decoder),
      opts_(std::move(options)),
      policy_(std::move(policy)),
      vocab_size_(runner->config().vocab_size),
      num_blocks_(runner->num_kv_blocks()),
      blocks_(runner->num_kv_blocks(), opts_.enable_prefix_caching),
      seed_state_(std::random_device{}()),
      ttft_(LatencyBuckets()),
      tpot_(LatencyBuckets()),
      itl_(LatencyBuckets()),
      e2e_(LatencyBuckets()),
      queue_(LatencyBuckets()) {
  DS_CHECK(opts_.max_num_batched_tokens > 0) << "max_num_batched_tokens must be positive";
  DS_CHECK(opts_.max_running_requests > 0) << "max_running_requests must be positive";
  max_model_len_ = opts_.max_model_len > 0 ? opts_.max_model_len
                                           : runner->config().max_position_embeddings;
  if (max_model_len_ <= 0) max_model_len_ = 4096;
  if (!policy_)
    policy_ = std::make_unique<FcfsPolicy>(
        SchedulerLimits{opts_.max_num_batched_tokens, opts_.max_running_requests, opts_.decode_reserve_ratio});
  stats_.num_blocks_total = num_blocks_;
  last_log_ = Clock::now();
}

Engine::~Engine() { Stop(); }

Status Engine::Add(EngineRequest req) {
  if (stop_admission_.load()) return ResourceExhausted("server is shutting down");
  if (req.prompt.empty()) return InvalidArgument("the prompt is empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= vocab_size_)
      return InvalidArgument("prompt token id " + std::to_string(t) +
                             " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + req.params.max_tokens;
  if (total > max_model_len_)
    return InvalidArgument("this model's maximum context length is " +
                           std::to_string(max_model_len_) + " tokens; the request has " +
                           std::to_string(req.prompt.size()) + " prompt tokens + " +
                           std::to_string(req.params.max_tokens) + " max_tokens");
  if ((total + kBlockSize - 1) / kBlockSize > num_blocks_)
    return InvalidArgument("prompt + max_tokens (" + std::to_string(total) +
                           " tokens) exceeds the KV cache capacity (" +
                           std::to_string(static_cast<int64_t>(num_blocks_) * kBlockSize) + " tokens)");
  if (req.params.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (queued_.fetch_add(1) >= opts_.max_queued_requests) {
    queued_.fetch_sub(1);
    return ResourceExhausted("the request queue is full (" +
                             std::to_string(opts_.max_queued_requests) + " waiting)");
  }
  in_flight_.fetch_add(1);
  context_tokens_.fetch_add(static_cast<int64_t>(req.prompt.size()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_adds_.push_back(std::move(req));
  }
  cv_.notify_one();
  return Status::Ok();
}

void Engine::Abort(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_aborts_.push_back(request_id);
  }
  cv_.notify_one();
}

void Engine::StopAdmission() { stop_admission_.store(true); }

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Engine::Start() {
  DS_CHECK(!thread_.joinable()) << "engine already started";
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_thread_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  // A launched step is finished first (the runner keeps its output until then).
  if (inflight_) {
    try {
      FinishInflight();
    } catch (const std::exception& e) {
      DS_LOG(ERROR) << "engine: finishing the last step failed: " << e.what();
      DropLaunched();
    }
  }
  // Abort whatever is left (callers waiting on outputs get a final "abort").
  DrainInbox();
  std::vector<Sequence*> all;
  for (auto& [id, s] : seqs_) all.push_back(s.get());
  for (Sequence* s : all) AbortSeq(s, "abort", "");
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(1), [&] {
        return stop_thread_ || !pending_adds_.empty() || !pending_aborts_.empty() ||
               !running_.empty() || !waiting_.empty() || inflight_.has_value();
      });
      if (stop_thread_) return;
    }
    try {
      // No progress with work queued (cannot happen with a consistent policy; defensive):
      // back off instead of spinning.
      if (!Step() && (!running_.empty() || !waiting_.empty()))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } catch (const std::exception& e) {
      DS_LOG(ERROR) << "engine step failed: " << e.what() << "; aborting running requests";
      DropLaunched();
      std::vector<Sequence*> victims(running_.begin(), running_.end());
      for (Sequence* s : victims) AbortSeq(s, "error", e.what());
    }
    MaybeLogStats();
  }
}

void Engine::DrainInbox() {
  std::vector<EngineRequest> adds;
  std::vector<uint64_t> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds.swap(pending_adds_);
    aborts.swap(pending_aborts_);
  }
  const auto now = Clock::now();
  for (EngineRequest& r : adds) {
    const uint64_t id = r.id;
    if (seqs_.count(id)) {
      // Duplicate id: refuse the second one (the caller owns ids; this is a caller bug).
      EngineOutput out;
      out.request_id = id;
      out.finished = true;
      out.finish_reason = "error";
      out.error = "duplicate request id";
      queued_.fetch_sub(1);
      in_flight_.fetch_sub(1);
      context_tokens_.fetch_sub(static_cast<int64_t>(r.prompt.size()));
      if (r.on_output) r.on_output(std::move(out));
      continue;
    }
    auto s = std::make_unique<Sequence>(std::move(r), decoder_);
    s->tokens = s->req.prompt;
    s->num_prompt = static_cast<int>(s->tokens.size());
    s->arrival = now;
    s->seed = s->req.params.seed ? *s->req.params.seed : (seed_state_ = seed_state_ * 6364136223846793005ull + 1442695040888963407ull);
    waiting_.push_back(s.get());
    seqs_[id] = std::move(s);
  }
  for (uint64_t id : aborts) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) AbortSeq(it->second.get(), "abort", "");
  }
}

void Engine::RemoveFromQueues(Sequence* s) {
  auto rit = std::find(running_.begin(), running_.end(), s);
  if (rit != running_.end()) running_.erase(rit);
  auto wit = std::find(waiting_.begin(), waiting_.end(), s);
  if (wit != waiting_.end()) waiting_.erase(wit);
}

void Engine::AbortSeq(Sequence* s, const std::string& reason, const std::string& error) {
  if (!s->ever_scheduled) queued_.fetch_sub(1);
  RemoveFromQueues(s);
  blocks_.Free(&s->blocks);
  s->status = SeqStatus::kAborted;
  EngineOutput out;
  out.request_id = s->req.id;
  out.finished = true;
  out.finish_reason = reason;
  out.error = error;
  out.num_prompt_tokens = s->num_prompt;
  out.num_output_tokens = s->num_output();
  out.num_cached_tokens = std::max(0, s->num_cached_prompt);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.requests_finished_abort;
  }
  OutputCallback cb = std::move(s->req.on_output);
  const uint64_t id = s->req.id;
  context_tokens_.fetch_sub(static_cast<int64_t>(s->tokens.size()));
  seqs_.erase(id);  // destroys s
  in_flight_.fetch_sub(1);
  if (cb) cb(std::move(out));
}

void Engine::Preempt(Sequence* s) {
  blocks_.Free(&s->blocks);
  s->num_computed = 0;
  s->status = SeqStatus::kPreempted;
  auto rit = std::find(running_.begin(), running_.end(), s);
  if (rit != running_.end()) running_.erase(rit);
  waiting_.push_front(s);
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.num_preemptions;
}

void Engine::FinishSeq(Sequence* s, const std::string& reason, EngineOutput* out) {
  // Flush any held-back text (incomplete UTF-8 becomes U+FFFD; stop-prefix holdback).
  if (reason != "stop" || !s->stopper.stopped()) {
    std::string tail = s->detok.Flush();
    if (!tail.empty()) {
      auto r = s->stopper.Append(tail);
      out->text += r.emit;
      if (r.stop) out->stop_str = r.stop;
    }
    if (!out->stop_str) out->text += s->stopper.Flush();
  }
  out->finished = true;
  out->finish_reason = reason;
  s->status = SeqStatus::kFinished;
  const auto now = Clock::now();
  e2e_.Observe(Seconds(now - s->arrival));
  if (s->num_output() > 1) tpot_.Observe(Seconds(s->last_token - s->first_token) / (s->num_output() - 1));
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (reason == "stop") ++stats_.requests_finished_stop;
    else ++stats_.requests_finished_length;
  }
}

void Engine::ProcessSample(Sequence* s, const float* logits_row, int32_t runner_token, EngineOutput* out) {
  const SamplingParams& p = s->req.params;
  const int step = s->num_output();
  SampleResult r;
  if (logits_row) {
    std::vector<float> logits(logits_row, logits_row + vocab_size_);
    r = SampleToken(logits.data(), vocab_size_, p, s->counts, s->seed, step);
  } else {
    r.token = runner_token;  // sampled by the runner (RowSampling: same semantics and RNG)
  }
  const auto now = Clock::now();
  if (step == 0) {
    s->first_token = now;
    ttft_.Observe(Seconds(now - s->arrival));
  } else {
    itl_.Observe(Seconds(now - s->last_token));
  }
  s->last_token = now;
  s->tokens.push_back(r.token);
  context_tokens_.fetch_add(1);
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) ++s->counts[r.token];
  out->token_ids.push_back(r.token);
  if (r.has_logprobs) out->logprobs.push_back(std::move(r.logprobs));
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.generation_tokens_total;
  }
  ++log_gen_tokens_;

  const int n_out = s->num_output();
  bool is_eos = !p.ignore_eos &&
                std::find(opts_.eos_token_ids.begin(), opts_.eos_token_ids.end(), r.token) !=
                    opts_.eos_token_ids.end();
  bool is_stop_tok = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), r.token) !=
                     p.stop_token_ids.end();
  if ((is_eos || is_stop_tok) && n_out > p.min_tokens) {
    out->stop_token = r.token;
    FinishSeq(s, "stop", out);
    return;
  }
  std::string delta = s->detok.Add(r.token);
  if (!delta.empty()) {
    auto sr = s->stopper.Append(delta);
    out->text += sr.emit;
    if (sr.stop) {
      out->stop_str = sr.stop;
      FinishSeq(s, "stop", out);
      return;
    }
  }
  if (n_out >= p.max_tokens || static_cast<int>(s->tokens.size()) >= max_model_len_) {
    FinishSeq(s, "length", out);
  }
}

bool Engine::Step() {
  DrainInbox();
  if (inflight_) {
    // Overlap scheduling: the next decode step goes in before this one's outputs are applied.
    std::optional<InFlight> next = LaunchLookahead(*inflight_);
    FinishInflight();
    if (next) {
      inflight_ = std::move(next);
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.num_overlapped_steps;
      return true;
    }
  }
  if (running_.empty() && waiting_.empty()) {
    PublishGauges();
    return false;
  }
  const auto t0 = Clock::now();
  std::vector<SchedSeq> run_view, wait_view;
  run_view.reserve(running_.size());
  for (Sequence* s : running_)
    run_view.push_back(RunningView(s));
  for (Sequence* s : waiting_)
    wait_view.push_back(WaitingView(s));
  View view(this);
  SchedulerDecision d = policy_->Schedule(run_view, wait_view, view);

  for (int64_t id : d.preempted) Preempt(seqs_.at(static_cast<uint64_t>(id)).get());

  // Apply: take prefix blocks / grow, and build the batch.
  struct Item { Sequence* s; int start; int num_new; };
  std::vector<Item> items;
  items.reserve(d.scheduled.size());
  for (const ScheduledSeq& sc : d.scheduled) {
    Sequence* s = seqs_.at(static_cast<uint64_t>(sc.id)).get();
    if (sc.from_waiting) {
      const int n = static_cast<int>(s->tokens.size());
      PrefixMatch m = blocks_.Match(s->tokens, n - 1);
      // The policy's assumed hit may have shrunk if this step's earlier allocations evicted
      // blocks; keep the token count, not the end position.
      const int cached = m.num_tokens();
      const int num_new = std::min(sc.num_new_tokens, n - cached);
      const int need = (cached + num_new + kBlockSize - 1) / kBlockSize -
                       static_cast<int>(m.block_ids.size());
      if (need > blocks_.num_free_blocks() - m.num_free) continue;  // stays waiting
      blocks_.TakePrefix(&s->blocks, m, n - 1);
      DS_CHECK(blocks_.Grow(&s->blocks, cached + num_new));
      s->num_computed = cached;
      if (!s->ever_scheduled) {
        s->ever_scheduled = true;
        s->first_scheduled = t0;
        s->num_cached_prompt = cached;
        queued_.fetch_sub(1);
        queue_.Observe(Seconds(t0 - s->arrival));
      }
      auto wit = std::find(waiting_.begin(), waiting_.end(), s);
      DS_CHECK(wit != waiting_.end());
      waiting_.erase(wit);
      running_.push_back(s);
      s->status = SeqStatus::kRunning;
      items.push_back({s, cached, num_new});
    } else {
      DS_CHECK(blocks_.Grow(&s->blocks, s->num_computed + sc.num_new_tokens))
          << "policy over-committed KV blocks";
      items.push_back({s, s->num_computed, sc.num_new_tokens});
    }
  }
  if (items.empty()) {
    PublishGauges();
    return !d.preempted.empty();
  }

  ForwardBatch batch;
  {
    std::vector<const Sequence*> seqs;
    for (const Item& it : items) seqs.push_back(it.s);
    StartBatch(seqs, &batch);
  }
  std::vector<Sequence*> samplers;
  int num_prefill_tokens = 0, num_decode = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    for (int k = 0; k < it.num_new; ++k) {
      batch.token_ids.push_back(it.s->tokens[it.start + k]);
      batch.positions.push_back(it.start + k);
    }
    batch.query_start.push_back(batch.num_tokens());
    batch.context_lens.push_back(it.start + it.num_new);
    if (it.start + it.num_new == static_cast<int>(it.s->tokens.size())) {
      batch.logits_indices.push_back(batch.num_tokens() - 1);
      samplers.push_back(it.s);
    }
    if (it.start >= it.s->num_prompt) ++num_decode;
    else num_prefill_tokens += it.num_new;
  }
  // Runner-side sampling (the CUDA runner samples on the device and returns ids, not logits)
  // when the runner can and no sampled row needs the logits on the host (penalties, logprobs).
  if (runner_->CanSample() && !samplers.empty()) {
    bool all = true;
    for (const Sequence* s : samplers) {
      const SamplingParams& p = s->req.params;
      if (p.logprobs >= 0 || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) { all = false; break; }
    }
    if (all)
      for (const Sequence* s : samplers) batch.sampling.push_back(SamplingRow(s, 0));
  }
  Status st = runner_->Launch(batch);
  if (!st.ok()) {
    DS_LOG(ERROR) << "forward failed: " << st.ToString();
    for (const Item& it : items) AbortSeq(it.s, "error", st.ToString());
    PublishGauges();
    return true;
  }
  InFlight f;
  f.t0 = t0;
  f.runner_sampled = !batch.sampling.empty();
  f.all_decode = f.runner_sampled && num_prefill_tokens == 0 && samplers.size() == items.size();
  for (const Item& it : items) {
    f.items.push_back({it.s->req.id, it.start, it.num_new});
    f.all_decode = f.all_decode && it.num_new == 1;
  }
  for (const Sequence* s : samplers) f.samplers.push_back(s->req.id);
  f.num_prefill_tokens = num_prefill_tokens;
  f.num_decode = num_decode;
  f.num_tokens = batch.num_tokens();
  f.num_preempted = static_cast<int>(d.preempted.size());
  inflight_ = std::move(f);
  if (!opts_.overlap_schedule || !runner_->CanOverlap()) FinishInflight();
  return true;
}

SchedSeq Engine::RunningView(const Sequence* s) {
  return {static_cast<int64_t>(s->req.id), static_cast<int>(s->tokens.size()), s->num_computed,
          static_cast<int>(s->blocks.ids.size()), std::max(0, s->req.params.max_tokens - s->num_output())};
}

SchedSeq Engine::WaitingView(const Sequence* s) {
  return {static_cast<int64_t>(s->req.id), static_cast<int>(s->tokens.size()), 0, 0,
          std::max(0, s->req.params.max_tokens - s->num_output())};
}

RowSampling Engine::SamplingRow(const Sequence* s, int ahead) {
  const SamplingParams& p = s->req.params;
  return {p.temperature, p.top_p, p.top_k, s->seed, static_cast<uint64_t>(s->num_output() + ahead)};
}

void Engine::StartBatch(const std::vector<const Sequence*>& seqs, ForwardBatch* batch) {
  int max_blocks = 0;
  for (const Sequence* s : seqs) max_blocks = std::max(max_blocks, static_cast<int>(s->blocks.ids.size()));
  batch->max_blocks = max_blocks;
  batch->query_start.assign(1, 0);
  batch->block_tables.assign(seqs.size() * max_blocks, -1);
  for (size_t i = 0; i < seqs.size(); ++i)
    std::copy(seqs[i]->blocks.ids.begin(), seqs[i]->blocks.ids.end(), batch->block_tables.begin() + i * max_blocks);
}

void Engine::DropLaunched() {
  inflight_.reset();
  for (ForwardOutput drop; runner_->NumLaunched() > 0;) (void)runner_->Finish(&drop);
}

bool Engine::PolicySchedulesJust(const InFlight& f, const std::vector<Sequence*>& seqs) {
  std::unordered_set<uint64_t> in_step(f.samplers.begin(), f.samplers.end()), going_on;
  for (const Sequence* s : seqs) going_on.insert(s->req.id);
  std::vector<SchedSeq> run_view, wait_view;
  for (Sequence* s : running_) {
    SchedSeq v = RunningView(s);
    if (in_step.count(s->req.id)) {
      if (!going_on.count(s->req.id)) continue;  // it ends by length at the step in flight
      // The step in flight done: one token more, computed through the old count.
      v.num_computed = v.num_tokens++;
      v.remaining_output = std::max(0, v.remaining_output - 1);
    }
    run_view.push_back(v);
  }
  for (Sequence* s : waiting_) wait_view.push_back(WaitingView(s));
  View view(this);
  const SchedulerDecision d = policy_->Schedule(run_view, wait_view, view);
  if (!d.preempted.empty() || d.scheduled.size() != seqs.size()) return false;
  for (const ScheduledSeq& sc : d.scheduled)
    if (sc.from_waiting || sc.num_new_tokens != 1 || !going_on.count(static_cast<uint64_t>(sc.id))) return false;
  return true;
}

std::optional<Engine::InFlight> Engine::LaunchLookahead(const InFlight& f) {
  if (!opts_.overlap_schedule || !runner_->CanOverlap() || !f.all_decode) return std::nullopt;
  // The sequences that go on: not aborted since the launch, and not ending by length at the
  // step in flight; each with its row in that step.
  std::vector<Sequence*> seqs;
  std::vector<int32_t> rows;
  int need_blocks = 0;
  for (size_t r = 0; r < f.samplers.size(); ++r) {
    auto it = seqs_.find(f.samplers[r]);
    if (it == seqs_.end() || it->second->status != SeqStatus::kRunning) continue;  // aborted meanwhile
    Sequence* s = it->second.get();
    const SamplingParams& p = s->req.params;
    // n tokens known on the host; the step in flight samples token n, this step token n + 1.
    const int n = static_cast<int>(s->tokens.size());
    if (s->num_output() + 1 >= p.max_tokens || n + 2 > max_model_len_) continue;  // ends by length
    need_blocks += std::max(0, (n + 1 + kBlockSize - 1) / kBlockSize - static_cast<int>(s->blocks.ids.size()));
    seqs.push_back(s);
    rows.push_back(static_cast<int32_t>(r));
  }
  if (seqs.empty() || need_blocks > blocks_.num_free_blocks()) return std::nullopt;
  // With requests waiting, only where the policy, asked now with the step in flight counted as
  // done, would schedule just these decodes (no admission, no preemption): then the lookahead is
  // the step it would run (an admission that the step in flight's stops make possible waits a step).
  if (!waiting_.empty() && !PolicySchedulesJust(f, seqs)) return std::nullopt;
  for (Sequence* s : seqs)
    DS_CHECK(blocks_.Grow(&s->blocks, static_cast<int>(s->tokens.size()) + 1)) << "lookahead: KV blocks";
  ForwardBatch batch;
  StartBatch({seqs.begin(), seqs.end()}, &batch);
  InFlight next;
  next.t0 = Clock::now();
  next.runner_sampled = true;
  next.all_decode = true;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence* s = seqs[i];
    const int n = static_cast<int>(s->tokens.size());
    batch.token_ids.push_back(0);  // read on the device from the step in flight's row rows[i]
    batch.prev_sample_rows.push_back(rows[i]);
    batch.positions.push_back(n);
    batch.query_start.push_back(batch.num_tokens());
    batch.context_lens.push_back(n + 1);
    batch.logits_indices.push_back(static_cast<int32_t>(i));
    batch.sampling.push_back(SamplingRow(s, 1));
    next.items.push_back({s->req.id, n, 1});
    next.samplers.push_back(s->req.id);
  }
  next.num_decode = static_cast<int>(seqs.size());
  next.num_tokens = batch.num_tokens();
  const Status st = runner_->Launch(batch);
  if (!st.ok()) {
    // Nothing was queued: the step in flight is finished as usual, then these sequences are
    // scheduled again without overlap (their blocks stay grown; the next schedule uses them).
    DS_LOG(WARNING) << "engine: overlapped decode step not launched: " << st.ToString();
    return std::nullopt;
  }
  return next;
}

void Engine::FinishInflight() {
  InFlight f = std::move(*inflight_);
  inflight_.reset();
  ForwardOutput fout;
  const Status st = runner_->Finish(&fout);
  if (!st.ok()) {
    DS_LOG(ERROR) << "forward failed: " << st.ToString();
    for (const InFlight::Item& it : f.items) {
      auto sit = seqs_.find(it.id);
      if (sit != seqs_.end()) AbortSeq(sit->second.get(), "error", st.ToString());
    }
    PublishGauges();
    return;
  }
  if (f.runner_sampled) DS_CHECK_EQ(fout.token_ids.size(), f.samplers.size());
  else DS_CHECK_EQ(fout.logits.size(), f.samplers.size() * static_cast<size_t>(vocab_size_));
  // A sequence aborted (or stopped at the step before) since the launch is skipped: its blocks
  // are free already, and its row's token is dropped.
  auto live = [this](uint64_t id) -> Sequence* {
    auto it = seqs_.find(id);
    return it == seqs_.end() || it->second->status != SeqStatus::kRunning ? nullptr : it->second.get();
  };
  int64_t prompt_tokens_step = 0;
  for (const InFlight::Item& it : f.items) {
    Sequence* s = live(it.id);
    if (!s) continue;
    // Prompt tokens computed for the first time count towards prompt throughput.
    if (it.start < s->num_prompt) prompt_tokens_step += std::min(it.start + it.num_new, s->num_prompt) - it.start;
    s->num_computed = it.start + it.num_new;
    blocks_.CommitFullBlocks(&s->blocks, s->tokens, s->num_computed);
  }
  std::vector<Sequence*> finished;
  for (size_t i = 0; i < f.samplers.size(); ++i) {
    Sequence* s = live(f.samplers[i]);
    if (!s) continue;
    EngineOutput out;
    out.request_id = s->req.id;
    if (f.runner_sampled) ProcessSample(s, nullptr, fout.token_ids[i], &out);
    else ProcessSample(s, fout.logits.data() + i * vocab_size_, -1, &out);
    out.num_prompt_tokens = s->num_prompt;
    out.num_output_tokens = s->num_output();
    out.num_cached_tokens = std::max(0, s->num_cached_prompt);
    if (out.finished) finished.push_back(s);
    if (s->req.on_output) s->req.on_output(std::move(out));
  }
  for (Sequence* s : finished) {
    RemoveFromQueues(s);
    blocks_.Free(&s->blocks);
    context_tokens_.fetch_sub(static_cast<int64_t>(s->tokens.size()));
    seqs_.erase(s->req.id);
    in_flight_.fetch_sub(1);
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.prompt_tokens_total += prompt_tokens_step;
    ++stats_.num_steps;
  }
  log_prompt_tokens_ += prompt_tokens_step;
  PublishGauges();
  DS_LOG(DEBUG) << "step: seqs=" << f.items.size() << " tokens=" << f.num_tokens
                << " prefill_tokens=" << f.num_prefill_tokens << " decode_seqs=" << f.num_decode
                << " sampled=" << f.samplers.size() << " preempted=" << f.num_preempted
                << " running=" << running_.size() << " waiting=" << waiting_.size()
                << " kv_used=" << blocks_.num_used_blocks() << "/" << blocks_.num_blocks()
                << " time_ms=" << Seconds(Clock::now() - f.t0) * 1e3;
}

void Engine::PublishGauges() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.num_running = static_cast<int>(running_.size());
  stats_.num_waiting = static_cast<int>(waiting_.size());
  stats_.num_blocks_used = blocks_.num_used_blocks();
  stats_.num_blocks_cached = blocks_.num_cached_blocks();
  stats_.prefix_query_tokens = blocks_.prefix_query_tokens();
  stats_.prefix_hit_tokens = blocks_.prefix_hit_tokens();
}

void Engine::MaybeLogStats() {
  if (opts_.stats_interval_s <= 0) return;
  const auto now = Clock::now();
  const double dt = Seconds(now - last_log_);
  if (dt < opts_.stats_interval_s) return;
  if (log_prompt_tokens_ || log_gen_tokens_ || !running_.empty() || !waiting_.empty()) {
    EngineStats st = Stats();
    const double hit = st.prefix_query_tokens
                           ? 100.0 * st.prefix_hit_tokens / st.prefix_query_tokens : 0.0;
    char buf[384];
    std::snprintf(buf, sizeof(buf),
                  "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                  "Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, "
                  "Prefix cache hit rate: %.1f%%, Preemptions: %lld",
                  log_prompt_tokens_ / dt, log_gen_tokens_ / dt, st.num_running, st.num_waiting,
                  100.0 * st.num_blocks_used / std::max(1, st.num_blocks_total), hit,
                  static_cast<long long>(st.num_preemptions));
    DS_LOG(INFO) << buf;
  }
  log_prompt_tokens_ = log_gen_tokens_ = 0;
  last_log_ = now;
}

void Engine::CheckInvariants() const {
  blocks_.CheckInvariants();
  int held = 0;
  for (const auto& [id, s] : seqs_) {
    const int cap = static_cast<int>(s->blocks.ids.size()) * kBlockSize;
    DS_CHECK(s->num_computed <= cap) << "sequence " << id << " computed beyond its blocks";
    if (s->status == SeqStatus::kWaiting || s->status == SeqStatus::kPreempted) {
      DS_CHECK(s->blocks.ids.empty()) << "waiting sequence " << id << " holds blocks";
    }
    held += static_cast<int>(s->blocks.ids.size());
  }
  DS_CHECK(held >= blocks_.num_used_blocks()) << "leaked KV blocks";
}

}  // namespace ds
