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
  if (!prev_sample_rows.empty() && prev_sample_rows.size() != token_ids.size())
    return InvalidArgument("ForwardBatch: prev_sample_rows must be empty or have one entry per token");
  for (int32_t r : prev_sample_rows)
    if (r < -1) return InvalidArgument("ForwardBatch: prev_sample_rows entries must be -1 or a row index");
  for (const RowSampling& r : sampling)
    if (!(r.top_p > 0.0f && r.top_p <= 1.0f) || r.top_k < 0 || !(r.temperature == r.temperature))
      return InvalidArgument("ForwardBatch: bad sampling settings (top_p in (0, 1], top_k >= 0)");
  return Status::Ok();
}

Status ModelRunner::CheckPrevSampleRows(const ForwardBatch& b, bool prev_sampled, int64_t prev_rows, bool* uses_prev) {
  if (uses_prev) *uses_prev = false;
  for (int32_t r : b.prev_sample_rows) {
    if (r < 0) continue;
    if (uses_prev) *uses_prev = true;
    if (!prev_sampled)
      return InvalidArgument("ForwardBatch: prev_sample_rows given, but the previous step did not sample ids");
    if (r >= prev_rows)
      return InvalidArgument("ForwardBatch: prev_sample_rows entry " + std::to_string(r) + " beyond the previous step's " +
                             std::to_string(prev_rows) + " sampled rows");
  }
  return Status::Ok();
}

Status ModelRunner::ResolvePrevSampleRows(const std::vector<int32_t>* prev_ids, ForwardBatch* b) {
  if (b->prev_sample_rows.empty()) return Status::Ok();
  if (b->prev_sample_rows.size() != b->token_ids.size())
    return InvalidArgument("ForwardBatch: prev_sample_rows must be empty or have one entry per token");
  DS_RETURN_IF_ERROR(
      CheckPrevSampleRows(*b, prev_ids != nullptr, prev_ids ? static_cast<int64_t>(prev_ids->size()) : 0));
  for (size_t t = 0; t < b->prev_sample_rows.size(); ++t)
    if (b->prev_sample_rows[t] >= 0) b->token_ids[t] = (*prev_ids)[b->prev_sample_rows[t]];
  b->prev_sample_rows.clear();
  return Status::Ok();
}

Status ModelRunner::Launch(const ForwardBatch& batch) {
  ForwardBatch b = batch;
  DS_RETURN_IF_ERROR(ResolvePrevSampleRows(last_sampled_ ? &last_ids_ : nullptr, &b));
  ForwardOutput out;
  DS_RETURN_IF_ERROR(Forward(b, &out));
  last_sampled_ = !b.sampling.empty();
  last_ids_ = out.token_ids;
  done_.push_back(std::move(out));
  return Status::Ok();
}

Status ModelRunner::Finish(ForwardOutput* out) {
  if (done_.empty()) return InvalidArgument("ModelRunner::Finish: no launched step to finish");
  *out = std::move(done_.front());
  done_.pop_front();
  return Status::Ok();
}

}  // namespace ds
