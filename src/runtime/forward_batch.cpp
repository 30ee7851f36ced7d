#include "runtime/model_runner.h"

#include <string>

namespace ds {

Status ForwardBatch::Validate(int num_blocks) const {
  const int64_t T = num_tokens(), S = num_seqs();
  if (positions.size() != token_ids.size())
    return InvalidArgument("ForwardBatch: positions has " + std::to_string(positions.size()) +
                           " entries, token_ids " + std::to_string(T));
  if (static_cast<int64_t>(query_start.size()) != S + 1)
    return InvalidArgument("ForwardBatch: query_start must have num_seqs + 1 entries");
  if (S > 0 && (query_start[0] != 0 || query_start[S] != T))
    return InvalidArgument("ForwardBatch: query_start must start at 0 and end at num_tokens");
  if (max_blocks < 0 || static_cast<int64_t>(block_tables.size()) != S * max_blocks)
    return InvalidArgument("ForwardBatch: block_tables must be [num_seqs, max_blocks]");
  for (int64_t s = 0; s < S; ++s) {
    const int32_t q0 = query_start[s], q1 = query_start[s + 1];
    if (q1 < q0) return InvalidArgument("ForwardBatch: query_start is not monotone");
    const int32_t ctx = context_lens[s];
    if (ctx < q1 - q0) return InvalidArgument("ForwardBatch: context_len shorter than its new tokens");
    const int64_t need_blocks = (static_cast<int64_t>(ctx) + kBlockSize - 1) / kBlockSize;
    if (need_blocks > max_blocks)
      return InvalidArgument("ForwardBatch: sequence " + std::to_string(s) + " needs " +
                             std::to_string(need_blocks) + " blocks, table has " +
                             std::to_string(max_blocks));
    for (int64_t b = 0; b < need_blocks; ++b) {
      int32_t id = block_tables[s * max_blocks + b];
      if (id < 0 || id >= num_blocks)
        return InvalidArgument("ForwardBatch: block id " + std::to_string(id) + " out of range");
    }
    for (int32_t t = q0; t < q1; ++t) {
      if (positions[t] != ctx - (q1 - t))
        return InvalidArgument("ForwardBatch: positions of sequence " + std::to_string(s) +
                               " must be the last new tokens of its context");
    }
  }
  for (int32_t i : logits_indices)
    if (i < 0 || i >= T) return InvalidArgument("ForwardBatch: logits index out of range");
  if (!sampling.empty() && sampling.size() != logits_indices.size())
    return InvalidArgument("ForwardBatch: sampling must be empty or have one entry per logits index");
  for (const RowSampling& r : sampling)
    if (!(r.top_p > 0.0f && r.top_p <= 1.0f) || r.top_k < 0 || !(r.temperature == r.temperature))
      return InvalidArgument("ForwardBatch: bad sampling settings (top_p in (0, 1], top_k >= 0)");
  return Status::Ok();
}

}  // namespace ds
