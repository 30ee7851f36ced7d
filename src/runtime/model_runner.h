// The interface between the engine (scheduler, KV block manager, server) and a backend's
// model execution. One Forward() call runs one step over a flat batch of new tokens from
// several sequences (prefill chunks and decode tokens mixed), reading and writing the
// paged latent KV cache that the runner owns.
//
// Paged latent cache (DeepSeek-V2 paper section 2.1; SYSTEM.md section 1): per layer,
// [num_blocks, kBlockSize, kv_lora_rank + qk_rope_head_dim] values; a sequence's token at
// position p lives in block block_table[p / kBlockSize], slot p % kBlockSize. Block ids are
// handed out by the engine's block manager; the runner never allocates blocks itself.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace ds {

inline constexpr int kBlockSize = 64;  // tokens per KV block (page)

// How the runner samples one logits row: the semantics and counter-based RNG of cpu::Sample
// (backend/cpu/ops.h) and FastSample (scheduler/sampler.h): temperature <= 0 is argmax, else
// softmax(logits / temperature), top_k (0 = all), top_p, and u = SplitMix64(seed ^
// SplitMix64(step)) as the draw. Penalties and logprobs need the logits: the engine samples
// such rows itself.
struct RowSampling {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  uint64_t step = 0;  // index of the token being generated (0 = first output token)
};

// One step's work. T = total new tokens, S = sequences.
struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [T] new tokens, sequences concatenated
  std::vector<int32_t> positions;     // [T] absolute position of each new token
  std::vector<int32_t> query_start;   // [S + 1] offsets into token_ids
  std::vector<int32_t> context_lens;  // [S] tokens in cache after this step (cached + new)
  std::vector<int32_t> block_tables;  // [S, max_blocks] row-major, unused entries -1
  int32_t max_blocks = 0;
  // Token indices (into token_ids) whose logits are returned, in this order; usually the
  // last new token of each sequence that samples this step.
  std::vector<int32_t> logits_indices;
  // Sampling in the runner (only when ModelRunner::CanSample()): empty, or one entry per
  // logits row; then the runner samples those rows next to the logits and returns token ids
  // (ForwardOutput::token_ids) instead of the [rows, vocab] fp32 logits, so a decode step of
  // B sequences moves B ids to the host instead of B x vocab x 4 bytes.
  std::vector<RowSampling> sampling;
  // Overlap scheduling (SGLang's overlap scheduler; only with ModelRunner::Launch): empty, or
  // one entry per new token: -1 (token_ids[t] is the id) or r >= 0, the id is row r of the
  // sampled ids (ForwardOutput::token_ids) of the step launched just before this one. A runner
  // that samples on the device reads it there, so this step can be queued before the previous
  // step's ids reach the host; token_ids[t] is then ignored (any id in the vocabulary).
  std::vector<int32_t> prev_sample_rows;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_lens.size()); }
  // Checks shapes and ranges against a cache of `num_blocks` blocks; clear error on misuse.
  Status Validate(int num_blocks) const;
};

struct ForwardOutput {
  std::vector<float> logits;      // [logits_indices.size(), vocab_size], fp32 on the host
                                  // (empty when the batch asked for runner sampling)
  std::vector<int32_t> token_ids; // [logits_indices.size()] when batch.sampling was given
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  // Number of KV blocks in the cache pool (fixed at construction).
  virtual int num_kv_blocks() const = 0;
  // Runs one step. Writes the new tokens' latent vectors into the cache.
  virtual Status Forward(const ForwardBatch& batch, ForwardOutput* out) = 0;
  // Whether Forward() honours ForwardBatch::sampling (else it must be empty).
  virtual bool CanSample() const { return false; }
  // Device time per phase ("prefill/attn_core", "decode/moe_experts", ...) accumulated since
  // the last call, in ms, when the runner was created with profiling on; empty otherwise.
  // Clears the accumulators.
  virtual std::map<std::string, double> TakeProfile() { return {}; }

  // Asynchronous steps (overlap scheduling). Launch(b) queues step b and may return before it
  // has run; Finish(out) waits for the oldest launched, unfinished step and gives its output
  // (what Forward would have). Steps run in launch order, so a step launched after another sees
  // its KV writes; b.prev_sample_rows may name rows of the step launched just before b (that step
  // must sample: b.sampling set). Errors: Launch returns the step's own errors (bad batch, a
  // failed pass), InvalidArgument for prev_sample_rows without a sampled previous step or a
  // row out of its range; Finish returns InvalidArgument with nothing launched. The default
  // runs Forward inside Launch (prev_sample_rows resolved on the host); a runner that overlaps
  // (CanOverlap) keeps up to two steps in flight, so the host prepares step n + 1 while the
  // device runs step n.
  virtual Status Launch(const ForwardBatch& batch);
  virtual Status Finish(ForwardOutput* out);
  // Whether Launch returns before the step has run (decode steps this runner samples).
  virtual bool CanOverlap() const { return false; }
  // Launched steps whose outputs Finish has not returned yet (failed ones included).
  virtual size_t NumLaunched() const { return done_.size(); }

 protected:
  // InvalidArgument where b.prev_sample_rows names a row the previous step lacks (prev_sampled:
  // it sampled ids, prev_rows of them). *uses_prev (optional): whether any entry names a row.
  static Status CheckPrevSampleRows(const ForwardBatch& b, bool prev_sampled, int64_t prev_rows,
                                    bool* uses_prev = nullptr);
  // b.prev_sample_rows resolved into b.token_ids from `prev_ids` (the previous step's sampled
  // ids; null when it did not sample), then cleared. InvalidArgument on a bad row.
  static Status ResolvePrevSampleRows(const std::vector<int32_t>* prev_ids, ForwardBatch* b);

 private:
  // The default Launch / Finish: finished outputs in launch order, and the last launched
  // step's sampled ids (for the next step's prev_sample_rows).
  std::deque<ForwardOutput> done_;
  std::vector<int32_t> last_ids_;
  bool last_sampled_ = false;
};

}  // namespace ds
