// FakeModelRunner: a test double for the engine and server (no weights, no math). It keeps a
// real paged "cache" (one 64-bit value per block slot, written from the token and position
// like a KV write) and computes each returned logit row from the values it *reads back
// through the block table* for the whole context. So a wrong block table, a bad prefix-cache
// hit or a lost KV write changes the output, while the expected output stays a pure function
// of the token sequence (ReferenceLogits). Used by tests/runtime and tests/scheduler, and by
// `dsinfer serve --load-format fake` for server tests that must not depend on a model.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model_runner.h"

namespace ds {

// Optional "echo" behaviour (deterministic readable outputs for server tests): if the context
// contains echo_begin and, after its last occurrence, echo_end, the runner repeats the tokens
// between them one by one after echo_end, then emits echo_eos. Its logit for the echoed token
// is +30 above the pseudo-random rest, so sampling at moderate temperatures repeats it too.
struct FakeEcho {
  int32_t begin = -1;  // e.g. <｜User｜>
  int32_t end = -1;    // e.g. <｜Assistant｜>
  int32_t eos = -1;    // e.g. <｜end▁of▁sentence｜>
  bool enabled() const { return begin >= 0 && end >= 0 && eos >= 0; }
  int step_delay_us = 0;  // sleep per Forward call (makes "slow" requests for fault tests)
  bool runner_sampling = false;  // CanSample(): samples like the CUDA runner (tests the engine path)
  // CanOverlap() (with runner_sampling): the engine's overlap scheduling runs over the default,
  // synchronous Launch / Finish (prev_sample_rows resolved on the host).
  bool overlap = false;
};

class FakeModelRunner : public ModelRunner {
 public:
  FakeModelRunner(ModelConfig config, int num_kv_blocks, FakeEcho echo = {});
  const ModelConfig& config() const override { return config_; }
  int num_kv_blocks() const override { return num_blocks_; }
  Status Forward(const ForwardBatch& batch, ForwardOutput* out) override;
  bool CanSample() const override { return echo_.runner_sampling; }
  bool CanOverlap() const override { return echo_.runner_sampling && echo_.overlap; }

  // The logits row the runner returns after the context `tokens` (positions 0..n-1).
  // (Without echo; with echo the echoed token additionally gets +30.)
  static void ReferenceLogits(const std::vector<int32_t>& tokens, int vocab, float* out);
  // Number of Forward calls and tokens processed (for tests).
  int64_t num_forward_calls() const { return calls_; }
  int64_t num_tokens_processed() const { return tokens_; }

 private:
  static uint64_t SlotValue(int32_t token, int32_t pos);
  static void LogitsFromState(uint64_t state, int vocab, float* out);
  ModelConfig config_;
  int num_blocks_;
  FakeEcho echo_;
  std::vector<uint64_t> cache_;   // [num_blocks, kBlockSize]
  std::vector<int32_t> tokens_cache_;  // [num_blocks, kBlockSize] token written in each slot
  int64_t calls_ = 0, tokens_ = 0;
};

}  // namespace ds
