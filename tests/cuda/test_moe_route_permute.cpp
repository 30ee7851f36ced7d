// Fused decode routing + permutation (moe_route_permute.h) vs the unfused sequence on the GPU
// (MoeRouting, then MoePermute with row_align 1) and vs ds::cpu::MoeRouting, for the three
// selection methods at V3 / V2 / V2-Lite shapes, T = 1..16 tokens, with and without shared-expert
// groups: ids and weights bit-identical to MoeRouting, offsets identical to MoePermute's, every
// pair in its expert's segment in pair order, every permuted row bit-identical to its token's
// row, nothing left unwritten (outputs start as NaN / -1 bytes), and the same results from
// repeated launches and from CUDA-graph replays (the device counter is left at zero).
#include <cstring>

#include "backend/cpu/ops.h"
#include "backend/cuda/moe_permute.h"
#include "backend/cuda/moe_route_permute.h"
#include "backend/cuda/moe_routing.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Case { const char* name; int64_t E; int top_k, n_group, topk_group, scoring, method; bool norm, bias; float scale; int64_t d; };

uint16_t Bits(__nv_bfloat16 v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}

// ties: every logit of a token equal (selection by lowest index), or pairs of equal logits.
void RunCase(const Case& c, int64_t n, int S, int ties, bool graph) {
  const std::string cas = std::string(c.name) + "_T" + std::to_string(n) + "_S" + std::to_string(S) +
                          (ties == 1 ? "_alltied" : ties == 2 ? "_pairties" : "") + (graph ? "_graph" : "");
  auto logits = RandomNormal(n * c.E, 2.f);
  if (ties == 1) std::fill(logits.begin(), logits.end(), 0.25f);
  if (ties == 2)
    for (int64_t i = 1; i < n * c.E; i += 2) logits[i] = logits[i - 1];
  auto bias = RandomF(c.E, -0.1f, 0.1f);
  const int64_t K = c.top_k, m = n * K, rows = m + S * n, d = c.d, ldx = d + 8;
  auto x = RoundBf16Vec(RandomNormal(n * ldx));
  const auto xb = ToBf16(x);
  // CPU routing.
  std::vector<int32_t> ids_cpu(m);
  std::vector<float> w_cpu(m);
  cpu::MoeRouting({logits.data(), c.bias ? bias.data() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group, c.scoring,
                   c.method, c.norm, c.scale, ids_cpu.data(), w_cpu.data()});
  Dev<float> dl(logits), db(bias);
  Dev<__nv_bfloat16> dx(xb);
  // Unfused: MoeRouting + MoePermute (row_align 1).
  Dev<int32_t> rid(m), roff(c.E + 1), rpos(m), rsrc(m), rws(2 * c.E);
  Dev<float> rw(m);
  Dev<__nv_bfloat16> rxp(m * d);
  MoeRoutingParams rp{dl.get(), c.bias ? db.get() : nullptr, n, c.E, c.top_k, c.n_group, c.topk_group, c.scoring,
                      c.method, c.norm, c.scale, rid.get(), rw.get(), nullptr};
  MoeRouting(rp);
  MoePermute({rid.get(), n, K, c.E, 1, dx.get(), ldx, d, roff.get(), rpos.get(), rsrc.get(), rxp.get(), rws.get(), nullptr});
  // Fused.
  Dev<int32_t> fid(m), foff(c.E + S + 1), fpos(m), fsrc(rows);
  Dev<float> fw(m);
  Dev<__nv_bfloat16> fxp(rows * d);
  Dev<uint32_t> sync(std::vector<uint32_t>{0u});
  MoeRoutingParams fp = rp;
  fp.topk_ids = fid.get();
  fp.topk_weights = fw.get();
  MoeRoutePermuteParams p{fp, dx.get(), ldx, d, S, foff.get(), fpos.get(), fsrc.get(), fxp.get(), sync.get(), nullptr};
  LaunchRepeated(
      graph, 3,
      [&](cudaStream_t st) {
        p.stream = st;
        MoeRoutePermute(p);
      },
      [&] { fid.Poison(); fw.Poison(); foff.Poison(); fpos.Poison(); fsrc.Poison(); fxp.Poison(); });
  const auto ids = fid.Download(), ids_ref = rid.Download();
  const auto w = fw.Download(), w_ref = rw.Download();
  const auto off = foff.Download(), off_ref = roff.Download();
  const auto pos = fpos.Download(), src = fsrc.Download();
  const auto xp = fxp.Download(), xp_ref = rxp.Download();
  const auto pos_ref = rpos.Download();
  const uint32_t counter = sync.Download()[0];
  const int64_t id_bits = BitMismatches(ids, ids_ref), w_bits = BitMismatches(w, w_ref);
  int64_t id_cpu = 0;
  for (int64_t i = 0; i < m; ++i) id_cpu += ids[i] != ids_cpu[i];
  const int64_t off_bad = BitMismatches(std::vector<int32_t>(off.begin(), off.begin() + c.E + 1), off_ref);
  // Placement: each pair in its expert's segment, segments in pair order, rows = tokens' rows.
  int64_t place_bad = 0, row_bad = 0, order_bad = 0, ref_row_bad = 0;
  std::vector<int> used(rows, 0);
  for (int64_t i = 0; i < m; ++i) {
    const int32_t e = ids[i], r = pos[i];
    if (e < 0 || e >= c.E || r < off[e] || r >= off[e + 1] || r < 0 || r >= m) { ++place_bad; continue; }
    ++used[r];
    if (src[r] != i / K) ++place_bad;
    for (int64_t i2 = 0; i2 < i; ++i2) order_bad += ids[i2] == e && pos[i2] >= r;
    for (int64_t k = 0; k < d; ++k) {
      row_bad += Bits(xp[r * d + k]) != Bits(xb[(i / K) * ldx + k]);
      ref_row_bad += Bits(xp[r * d + k]) != Bits(xp_ref[int64_t{pos_ref[i]} * d + k]);
    }
  }
  int64_t shared_bad = 0;
  for (int s = 0; s < S; ++s) {
    shared_bad += off[c.E + s] != m + s * n;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t r = m + s * n + t;
      ++used[r];
      shared_bad += src[r] != t;
      for (int64_t k = 0; k < d; ++k) shared_bad += Bits(xp[r * d + k]) != Bits(xb[t * ldx + k]);
    }
  }
  shared_bad += off[c.E + S] != rows;
  int64_t unused = 0;
  for (int64_t r = 0; r < rows; ++r) unused += used[r] != 1;
  std::printf("[metric] op=moe_route_permute case=%s ids_vs_routing_bits=%lld weights_vs_routing_bits=%lld "
              "ids_vs_cpu=%lld offsets_vs_permute=%lld placement=%lld order=%lld rows_vs_x=%lld rows_vs_permute=%lld "
              "shared=%lld rows_not_once=%lld counter=%u%s\n",
              cas.c_str(), (long long)id_bits, (long long)w_bits, (long long)id_cpu, (long long)off_bad,
              (long long)place_bad, (long long)order_bad, (long long)row_bad, (long long)ref_row_bad,
              (long long)shared_bad, (long long)unused, counter,
              id_bits == 0 && w_bits == 0 && id_cpu == 0 && off_bad == 0 && place_bad == 0 && order_bad == 0 &&
                      row_bad == 0 && ref_row_bad == 0 && shared_bad == 0 && unused == 0 && counter == 0
                  ? " PASS" : " FAIL");
  EXPECT_EQ(id_bits, 0) << cas;
  EXPECT_EQ(w_bits, 0) << cas;
  EXPECT_EQ(id_cpu, 0) << cas;
  EXPECT_EQ(off_bad, 0) << cas;
  EXPECT_EQ(place_bad, 0) << cas;
  EXPECT_EQ(order_bad, 0) << cas;
  EXPECT_EQ(row_bad, 0) << cas;
  EXPECT_EQ(ref_row_bad, 0) << cas;
  EXPECT_EQ(shared_bad, 0) << cas;
  EXPECT_EQ(unused, 0) << cas;
  EXPECT_EQ(counter, 0u) << cas;
  ExpectClose("moe_route_permute_weights_vs_cpu", cas, w, w_cpu, 1e-6);
}

const Case kCases[] = {
    {"V3_noaux_tc", 256, 8, 8, 4, 1, 2, true, true, 2.5f, 7168},
    {"V2_group_limited_greedy", 160, 6, 8, 3, 0, 1, false, false, 16.0f, 5120},
    {"V2Lite_greedy", 64, 6, 1, 1, 0, 0, false, false, 1.0f, 2048},
    {"odd_greedy_sigmoid_norm_d33", 10, 3, 1, 1, 1, 0, true, false, 1.0f, 33},
};

TEST(CudaMoeRoutePermute, MatchesUnfusedAndCpu) {
  for (const auto& c : kCases)
    for (int64_t n = 1; n <= kMoeRoutePermuteMaxTokens; ++n) RunCase(c, n, 0, 0, false);
}

TEST(CudaMoeRoutePermute, SharedGroups) {
  for (const auto& c : kCases)
    for (int64_t n : {1, 3, 16}) {
      RunCase(c, n, 1, 0, false);
      RunCase(c, n, 2, 0, false);
    }
}

TEST(CudaMoeRoutePermute, TiesAndGraphReplays) {
  for (const auto& c : kCases)
    for (int64_t n : {1, 7, 16}) {
      RunCase(c, n, 0, 1, false);
      RunCase(c, n, 0, 2, false);
      RunCase(c, n, c.E == 64 ? 2 : 1, 0, true);
    }
}

TEST(CudaMoeRoutePermute, RejectsTooManyTokens) {
  Dev<uint32_t> sync(1);
  MoeRoutePermuteParams p{};
  p.routing.n = kMoeRoutePermuteMaxTokens + 1;
  p.routing.num_experts = 64; p.routing.top_k = 6; p.routing.n_group = 1; p.routing.topk_group = 1;
  p.d = 16; p.ldx = 16; p.sync = sync.get();
  EXPECT_THROW(MoeRoutePermute(p), CheckError);
}

}  // namespace
}  // namespace ds::cuda::test
