// MoE routing vs ds::cpu::MoeRouting for the three selection methods (V3 noaux_tc with the
// correction bias, V2 group_limited_greedy, V2-Lite greedy).
#include <cmath>
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cuda/moe_routing.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Case { const char* name; int64_t E; int top_k, n_group, topk_group, scoring, method; bool norm, bias; float scale; };

// warp: MoeRoutingParams::warp_route (the warp form for <= 256 experts; the block form above).
// Both against the CPU reference (ids exact, weights within 1e-6), and the warp form against the
// block form: the same ids; the same weights bit for bit with sigmoid scoring, within 1e-6 with
// softmax (its sum runs in another fp32 order).
// ties: logits on a coarse grid (many equal values, so ties to the lower expert decide) with
// every 7th -0.0f and every 11th +0.0f (equal values of different bits).
void RunCase(const Case& c, int64_t n, bool warp = false, bool ties = false) {
  auto logits = RandomNormal(n * c.E, 2.f);
  if (ties)
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = std::round(logits[i] * 2.f) / 2.f;
      if (i % 7 == 0) logits[i] = -0.0f;
      if (i % 11 == 0) logits[i] = 0.0f;
    }
  auto bias = RandomF(c.E, -0.1f, 0.1f);
  std::vector<int32_t> ids_ref(n * c.top_k);
  std::vector<float> w_ref(n * c.top_k);
  cpu::MoeRoutingParams cp{logits.data(), c.bias ? bias.data() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group,
                           c.scoring, c.method, c.norm, c.scale, ids_ref.data(), w_ref.data()};
  cpu::MoeRouting(cp);
  Dev<float> dl(logits), db(bias);
  Dev<int32_t> dids(n * c.top_k);
  Dev<float> dw(n * c.top_k);
  MoeRoutingParams p{dl.get(), c.bias ? db.get() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group, c.scoring,
                     c.method, c.norm, c.scale, dids.get(), dw.get(), nullptr};
  MoeRouting(p);
  auto ids = dids.Download();
  auto w = dw.Download();
  std::string cas = std::string(c.name) + "_n" + std::to_string(n) + (ties ? "_ties" : "");
  if (warp) {  // the warp form against the block form just run
    Dev<int32_t> wids(n * c.top_k);
    Dev<float> ww(n * c.top_k);
    p.warp_route = true;
    p.topk_ids = wids.get();
    p.topk_weights = ww.get();
    MoeRouting(p);
    const auto ids2 = wids.Download();
    const auto w2 = ww.Download();
    int64_t id_diff = 0, w_bits = 0;
    for (int64_t i = 0; i < n * c.top_k; ++i) {
      id_diff += ids2[i] != ids[i];
      w_bits += std::memcmp(&w2[i], &w[i], 4) != 0;
    }
    std::printf("[metric] op=moe_routing_warp case=%s id_diff_vs_block=%lld weight_bits_diff_vs_block=%lld\n", cas.c_str(),
                (long long)id_diff, (long long)w_bits);
    EXPECT_EQ(id_diff, 0) << cas;
    if (c.scoring == 1) { EXPECT_EQ(w_bits, 0) << cas << ": sigmoid scoring must match the block form bit for bit"; }
    ExpectClose("moe_routing_warp_weights_vs_block", cas, w2, w, 1e-6);
    ids = ids2;
    w = w2;
    cas += "_warp";
  }
  int64_t id_mismatch = 0;
  for (int64_t i = 0; i < n * c.top_k; ++i) id_mismatch += ids[i] != ids_ref[i];
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

TEST(CudaMoeRouting, WarpFormMatchesBlockFormAndCpu) {
  const Case cases[] = {
      {"V3_noaux_tc", 256, 8, 8, 4, 1, 2, true, true, 2.5f},
      {"V2_group_limited_greedy", 160, 6, 8, 3, 0, 1, false, false, 16.0f},
      {"V2Lite_greedy", 64, 6, 1, 1, 0, 0, false, false, 1.0f},
      {"odd_greedy_sigmoid_norm", 10, 3, 1, 1, 1, 0, true, false, 1.0f},
      {"E200_greedy_softmax_k32", 200, 32, 1, 1, 0, 0, true, false, 1.0f},
  };
  for (const auto& c : cases) {
    RunCase(c, 1, true);
    RunCase(c, 257, true);
  }
}

// Ties and signed zeros (session 24: the warp form's max and argmax are warp reductions of
// order-preserving keys, -0 and +0 one key): the same ids as the block form and the CPU reference
// (ties to the lower expert), including E in 33..64, where the persistent MoE kernel holds two
// experts a lane (its own cases: test_moe_persistent.cpp's E64 cases).
TEST(CudaMoeRouting, WarpFormTiesAndSignedZeros) {
  const Case cases[] = {
      {"V3_noaux_tc", 256, 8, 8, 4, 1, 2, true, true, 2.5f},
      {"V2Lite_greedy", 64, 6, 1, 1, 0, 0, false, false, 1.0f},
      {"E48_greedy_sigmoid_norm", 48, 6, 1, 1, 1, 0, true, false, 1.0f},
      {"odd_greedy_sigmoid_norm", 10, 3, 1, 1, 1, 0, true, false, 1.0f},
  };
  for (const auto& c : cases) RunCase(c, 257, true, true);
}

}  // namespace
}  // namespace ds::cuda::test
