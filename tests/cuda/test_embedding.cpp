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

TEST(CudaEmbedding, MatchesCpu) {
  RunCase(129280, 7168, 64, "V3_vocab_M64");
  RunCase(129280, 7168, 1, "V3_vocab_M1");
  RunCase(11, 33, 5, "odd");
}

}  // namespace
}  // namespace ds::cuda::test
