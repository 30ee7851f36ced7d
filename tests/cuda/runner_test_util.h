// Shared by the CUDA runner tests: where the fixtures and the carried DeepSeek-V3 config live,
// and the runner options of a DeepSeek-V3-config model with dummy weights.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"

namespace ds::cuda::test {

// DS_TEST_DATA_DIR from the environment (the GPU machine's carried data), else the build's.
inline std::string DataDir() {
  const char* e = std::getenv("DS_TEST_DATA_DIR");
  return e ? e : DS_TEST_DATA_DIR;
}

// The config directory `name` (deepseek-v3, deepseek-v2-lite): the carried test data, else the
// shared models folder; "" when neither has it.
inline std::string ConfigDir(const std::string& name) {
  for (const std::string& d : {DataDir() + "/" + name, std::string(DS_SHARED_DIR) + "/models/" + name})
    if (std::filesystem::exists(d + "/config.json")) return d;
  return "";
}

// The config in `dir`, dummy weights from `seed`, its first `layers` layers; every other
// option at its default (num_kv_blocks 0: the runner sizes the pool).
inline CudaRunnerOptions DummyOptions(const std::string& dir, int layers, uint64_t seed) {
  CudaRunnerOptions o;
  o.model_dir = dir;
  o.load_format = "dummy";
  o.num_layers = layers;
  o.seed = seed;
  return o;
}

// DeepSeek-V3's config (DataDir()/deepseek-v3) through DummyOptions, with a KV pool of
// `kv_blocks` blocks.
inline CudaRunnerOptions DummyV3Options(int layers, int kv_blocks, uint64_t seed) {
  CudaRunnerOptions o = DummyOptions(DataDir() + "/deepseek-v3", layers, seed);
  o.num_kv_blocks = kv_blocks;
  return o;
}

// A prefill of sequences 0 .. ctx.size() - 1: sequence s has tokens token(s, 0 .. ctx[s] - 1)
// and owns block-table row s (blocks s * max_blocks ..); with `last_logits`, the logits of each
// sequence's last token.
template <class TokenFn>
ForwardBatch PrefillBatch(const std::vector<int>& ctx, int max_blocks, TokenFn token, bool last_logits = true) {
  ForwardBatch b;
  b.max_blocks = max_blocks;
  b.query_start = {0};
  for (int s = 0; s < static_cast<int>(ctx.size()); ++s) {
    for (int p = 0; p < ctx[s]; ++p) { b.token_ids.push_back(token(s, p)); b.positions.push_back(p); }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(ctx[s]);
    if (last_logits) b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size()) - 1);
    for (int k = 0; k < max_blocks; ++k) b.block_tables.push_back(s * max_blocks + k);
  }
  return b;
}

// One decode token for each sequence in `seqs`, token(s, ctx[s]) at position ctx[s] (context
// ctx[s] + 1), in the block-table layout of PrefillBatch; the logits of every row, in order.
template <class TokenFn>
ForwardBatch DecodeBatch(const std::vector<int>& seqs, const std::vector<int>& ctx, int max_blocks, TokenFn token) {
  ForwardBatch b;
  b.max_blocks = max_blocks;
  b.query_start = {0};
  for (int s : seqs) {
    b.token_ids.push_back(token(s, ctx[s]));
    b.positions.push_back(ctx[s]);
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(ctx[s] + 1);
    b.logits_indices.push_back(static_cast<int32_t>(b.logits_indices.size()));
    for (int k = 0; k < max_blocks; ++k) b.block_tables.push_back(s * max_blocks + k);
  }
  return b;
}

}  // namespace ds::cuda::test
