// MoE routing vs ds::cpu::MoeRouting for the three selection methods (V3 noaux_tc with the
// correction bias, V2 group_limited_greedy, V2-Lite greedy).
#include "backend/cpu/ops.h"
#include "backend/cuda/moe_routing.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Case { const char* name; int64_t E; int top_k, n_group, topk_group, scoring, method; bool norm, bias; float scale; };

void RunCase(const Case& c, int64_t n) {
  auto logits = RandomNormal(n * c.E, 2.f);
  auto bias = RandomF(c.E, -0.1f, 0.1f);
  std::vector<int32_t> ids_ref(n * c.top_k);
  std::vector<float> w_ref(n * c.top_k);
  cpu::MoeRoutingParams cp{logits.data(), c.bias ? bias.data() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group,
                           c.scoring, c.method, c.norm, c.scale, ids_ref.data(), w_ref.data()};
  cpu::MoeRouting(cp);
  Dev<float> dl(logits), db(bias);
  Dev<int32_t> dids(n * c.top_k);
  Dev<float> dw(n * c.top_k);
  MoeRouting({dl.get(), c.bias ? db.get() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group, c.scoring, c.method, c.norm,
              c.scale, dids.get(), dw.get(), nullptr});
  auto ids = dids.Download();
  auto w = dw.Download();
  int64_t id_mismatch = 0;
  for (int64_t i = 0; i < n * c.top_k; ++i) id_mismatch += ids[i] != ids_ref[i];
  std::string cas = std::string(c.name) + "_n" + std::to_string(n);
  std::printf("[metric] op=moe_routing_ids case=%s id_mismatches=%lld of %lld\n", cas.c_str(), (long long)id_mismatch,
              (long long)(n * c.top_k));
  EXPECT_EQ(id_mismatch, 0) << cas;
  ExpectClose("moe_routing_weights", cas, w, w_ref, 1e-6);
}

TEST(CudaMoeRouting, MatchesCpu) {
  const Case cases[] = {
      {"V3_noaux_tc", 256, 8, 8, 4, 1, 2, true, true, 2.5f},
      {"V2_group_limited_greedy", 160, 6, 8, 3, 0, 1, false, false, 16.0f},
      {"V2Lite_greedy", 64, 6, 1, 1, 0, 0, false, false, 1.0f},
      {"odd_greedy_sigmoid_norm", 10, 3, 1, 1, 1, 0, true, false, 1.0f},
  };
  for (const auto& c : cases) {
    RunCase(c, 1);
    RunCase(c, 257);
  }
}

}  // namespace
}  // namespace ds::cuda::test
