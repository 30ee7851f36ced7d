#include "runtime/fake_model_runner.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "common/rng.h"
#include "scheduler/sampler.h"

namespace ds {

FakeModelRunner::FakeModelRunner(ModelConfig config, int num_kv_blocks, FakeEcho echo)
    : config_(std::move(config)),
      num_blocks_(num_kv_blocks),
      echo_(echo),
      cache_(static_cast<size_t>(num_kv_blocks) * kBlockSize, 0),
      tokens_cache_(static_cast<size_t>(num_kv_blocks) * kBlockSize, -1) {}

uint64_t FakeModelRunner::SlotValue(int32_t token, int32_t pos) {
  return SplitMix64((static_cast<uint64_t>(static_cast<uint32_t>(token)) << 32) ^ static_cast<uint32_t>(pos));
}

void FakeModelRunner::LogitsFromState(uint64_t state, int vocab, float* out) {
  // Pseudo-random logits in [-4, 4) with a clear maximum: peaked enough that greedy and
  // low-temperature sampling are stable, spread enough that top-k/top-p matter.
  for (int v = 0; v < vocab; ++v) {
    uint64_t h = SplitMix64(state ^ (static_cast<uint64_t>(v) * 0xD1B54A32D192ED03ull));
    out[v] = static_cast<float>(static_cast<double>(h >> 11) * (8.0 / 9007199254740992.0) - 4.0);
  }
}

void FakeModelRunner::ReferenceLogits(const std::vector<int32_t>& tokens, int vocab, float* out) {
  uint64_t state = 0x1234567ull;
  for (size_t p = 0; p < tokens.size(); ++p)
    state = SplitMix64(state ^ SlotValue(tokens[p], static_cast<int32_t>(p)));
  LogitsFromState(state, vocab, out);
}

Status FakeModelRunner::Forward(const ForwardBatch& batch, ForwardOutput* out) {
  DS_RETURN_IF_ERROR(batch.Validate(num_blocks_));
  if (!batch.sampling.empty() && !CanSample())
    return InvalidArgument("FakeModelRunner: runner sampling requested but not enabled");
  ++calls_;
  if (echo_.step_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(echo_.step_delay_us));
  tokens_ += batch.num_tokens();
  const int S = batch.num_seqs();
  // Write the new tokens' "KV".
  for (int s = 0; s < S; ++s) {
    const int32_t* table = batch.block_tables.data() + static_cast<size_t>(s) * batch.max_blocks;
    for (int t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
      const int32_t pos = batch.positions[t];
      const size_t slot = static_cast<size_t>(table[pos / kBlockSize]) * kBlockSize + pos % kBlockSize;
      cache_[slot] = SlotValue(batch.token_ids[t], pos);
      tokens_cache_[slot] = batch.token_ids[t];
    }
  }
  // Logits for the requested tokens: read the whole context back through the block table.
  const int V = config_.vocab_size;
  out->logits.assign(batch.logits_indices.size() * static_cast<size_t>(V), 0.0f);
  for (size_t i = 0; i < batch.logits_indices.size(); ++i) {
    const int32_t t = batch.logits_indices[i];
    int s = 0;
    while (batch.query_start[s + 1] <= t) ++s;
    const int32_t* table = batch.block_tables.data() + static_cast<size_t>(s) * batch.max_blocks;
    const int32_t ctx = batch.positions[t] + 1;
    uint64_t state = 0x1234567ull;
    for (int32_t p = 0; p < ctx; ++p)
      state = SplitMix64(state ^ cache_[static_cast<size_t>(table[p / kBlockSize]) * kBlockSize + p % kBlockSize]);
    float* row = out->logits.data() + i * V;
    LogitsFromState(state, V, row);
    if (echo_.enabled()) {
      std::vector<int32_t> ctx_tokens(ctx);
      for (int32_t p = 0; p < ctx; ++p)
        ctx_tokens[p] = tokens_cache_[static_cast<size_t>(table[p / kBlockSize]) * kBlockSize + p % kBlockSize];
      int32_t u = -1, a = -1;
      for (int32_t p = ctx - 1; p >= 0; --p)
        if (ctx_tokens[p] == echo_.begin) { u = p; break; }
      if (u >= 0)
        for (int32_t p = u + 1; p < ctx; ++p)
          if (ctx_tokens[p] == echo_.end) { a = p; break; }
      if (a >= 0) {
        const int32_t src = u + 1 + (ctx - 1 - a);
        const int32_t next = src < a ? ctx_tokens[src] : echo_.eos;
        if (next >= 0 && next < V) row[next] += 30.0f;
      }
    }
  }
  if (!batch.sampling.empty()) {
    out->token_ids.resize(batch.sampling.size());
    for (size_t i = 0; i < batch.sampling.size(); ++i) {
      const RowSampling& r = batch.sampling[i];
      out->token_ids[i] = FastSample(out->logits.data() + i * V, V, r.temperature, r.top_p, r.top_k, r.seed, r.step);
    }
    out->logits.clear();
  }
  return Status::Ok();
}

}  // namespace ds
