// Embedding lookup vs ds::cpu::Embedding (bf16 table on the device, bf16-valued fp32 on the CPU).
#include "backend/cpu/ops.h"
#include "backend/cuda/embedding.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

void RunCase(int64_t vocab, int64_t d, int64_t n, const char* name) {
  auto table = RoundBf16Vec(RandomNormal(vocab * d));
  std::uniform_int_distribution<int32_t> di(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = di(Rng());
  ids[0] = static_cast<int32_t>(vocab - 1);
  std::vector<float> ref(n * d);
  cpu::Embedding({ids.data(), n, table.data(), vocab, d, ref.data()});
  Dev<__nv_bfloat16> dt(ToBf16(table));
  Dev<int32_t> did(ids);
  Dev<float> dout(n * d);
  Embedding({did.get(), n, dt.get(), true, vocab, d, dout.get(), nullptr});
  ExpectClose("embedding", name, dout.Download(), ref, 0.0);
}

// prev_rows / prev_ids (the decode graph's gather of the previous step's ids, graph_io): rows with
// prev_rows >= 0 take prev_ids[prev_rows[t]], the others ids[t]; the CPU reference looks up the
// resolved ids.
TEST(CudaEmbedding, PrevRowsGatherMatchesCpu) {
  const int64_t vocab = 1000, d = 96, n = 7;
  auto table = RoundBf16Vec(RandomNormal(vocab * d));
  const std::vector<int32_t> ids = {5, 17, 999, 0, 3, 42, 7};
  const std::vector<int32_t> rows = {-1, 2, 0, -1, 4, 4, -1};
  const std::vector<int32_t> prev = {123, 456, 789, 1, 998};
  std::vector<int32_t> resolved(n);
  for (int64_t t = 0; t < n; ++t) resolved[t] = rows[t] >= 0 ? prev[rows[t]] : ids[t];
  std::vector<float> ref(n * d);
  cpu::Embedding({resolved.data(), n, table.data(), vocab, d, ref.data()});
  Dev<__nv_bfloat16> dt(ToBf16(table));
  Dev<int32_t> did(ids), drows(rows), dprev(prev);
  Dev<float> dout(n * d);
  EmbeddingParams p{did.get(), n, dt.get(), true, vocab, d, dout.get(), nullptr};
  p.prev_rows = drows.get();
  p.prev_ids = dprev.get();
  Embedding(p);
  ExpectClose("embedding", "prev_rows", dout.Download(), ref, 0.0);
}

TEST(CudaEmbedding, MatchesCpu) {
  RunCase(129280, 7168, 64, "V3_vocab_M64");
  RunCase(129280, 7168, 1, "V3_vocab_M1");
  RunCase(11, 33, 5, "odd");
}

}  // namespace
}  // namespace ds::cuda::test
