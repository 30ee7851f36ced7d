// CPU reference ops against straightforward scalar formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "backend/cpu/ops.h"
#include "common/check.h"
#include "common/dtype.h"

namespace ds::cpu {
namespace {

std::vector<float> Rand(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(CpuOps, GemmMatchesScalarWithStridesAndAccumulate) {
  const int64_t M = 7, N = 5, K = 9, ldx = 11, ldw = 10, ldy = 8;
  auto x = Rand(M * ldx, 1), w = Rand(N * ldw, 2), y = Rand(M * ldy, 3);
  auto y0 = y;
  Gemm({x.data(), ldx, w.data(), ldw, y.data(), ldy, M, N, K, /*accumulate=*/true});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldy; ++j) {
      if (j >= N) { EXPECT_EQ(y[i * ldy + j], y0[i * ldy + j]); continue; }
      double ref = y0[i * ldy + j];
      for (int64_t k = 0; k < K; ++k) ref += double(x[i * ldx + k]) * w[j * ldw + k];
      EXPECT_NEAR(y[i * ldy + j], ref, 1e-5);
    }
  Gemm({x.data(), ldx, w.data(), ldw, y.data(), ldy, M, N, K, /*accumulate=*/false});
  double ref = 0;
  for (int64_t k = 0; k < K; ++k) ref += double(x[2 * ldx + k]) * w[3 * ldw + k];
  EXPECT_NEAR(y[2 * ldy + 3], ref, 1e-5);
}

TEST(CpuOps, RmsNormWithAndWithoutResidual) {
  const int64_t n = 3, d = 17;
  auto x = Rand(n * d, 4), res = Rand(n * d, 5), w = Rand(d, 6, 0.5f, 1.5f);
  auto res0 = res;
  std::vector<float> out(n * d);
  RmsNorm({x.data(), d, res.data(), d, w.data(), out.data(), d, n, d, 1e-6f});
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double r = double(res0[i * d + j]) + x[i * d + j];
      EXPECT_NEAR(res[i * d + j], r, 1e-6);
      ss += r * r;
    }
    const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
    for (int64_t j = 0; j < d; ++j) EXPECT_NEAR(out[i * d + j], res[i * d + j] * inv * w[j], 1e-5);
  }
  // In place, no residual.
  auto y = x;
  RmsNorm({y.data(), d, nullptr, 0, w.data(), y.data(), d, n, d, 1e-6f});
  double ss = 0;
  for (int64_t j = 0; j < d; ++j) ss += double(x[j]) * x[j];
  EXPECT_NEAR(y[4], x[4] / std::sqrt(ss / d + 1e-6) * w[4], 1e-5);
}

// Default RoPE tables: cos/sin(pos * theta^(-2i/d)).
TEST(CpuOps, RopeTablesDefault) {
  const int64_t dim = 16, max_pos = 50;
  std::vector<float> c(max_pos * dim / 2), s(max_pos * dim / 2);
  RopeTableParams p{dim, max_pos, 10000.0, false, 1, 32, 1, 1, 0, 0, true, c.data(), s.data()};
  ComputeRopeTables(p);
  for (int64_t pos : {0, 1, 7, 49})
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double ang = pos * std::pow(10000.0, -2.0 * i / dim);
      EXPECT_NEAR(c[pos * dim / 2 + i], std::cos(ang), 2e-5);
      EXPECT_NEAR(s[pos * dim / 2 + i], std::sin(ang), 2e-5);
    }
}

// YaRN tables against transformers 5.24 _compute_yarn_parameters (rope dim 16, theta 1e4,
// factor 4, original_max_position_embeddings 32, beta 32/1, mscale 1, mscale_all_dim 0.8):
// inv_freq and attention_factor printed by Python.
TEST(CpuOps, RopeTablesYarnMatchTransformers) {
  const double kInvFreq[8] = {1.000000000e+00, 1.976423562e-01, 2.500000037e-02, 7.905694656e-03,
                              2.499999944e-03, 7.905694656e-04, 2.500000119e-04, 7.905694656e-05};
  const double kAttentionFactor = 1.0249579607969668;
  const int64_t dim = 16, max_pos = 200;
  std::vector<float> c(max_pos * 8), s(max_pos * 8);
  RopeTableParams p{dim, max_pos, 10000.0, true, 4.0, 32, 1, 1.0, 0.8, 32, true, c.data(), s.data()};
  ComputeRopeTables(p);
  for (int64_t pos : {1, 33, 150, 199})
    for (int i = 0; i < 8; ++i) {
      const double ang = double(float(pos) * float(kInvFreq[i]));
      EXPECT_NEAR(c[pos * 8 + i], std::cos(ang) * kAttentionFactor, 3e-6) << pos << " " << i;
      EXPECT_NEAR(s[pos * 8 + i], std::sin(ang) * kAttentionFactor, 3e-6) << pos << " " << i;
    }
}

TEST(CpuOps, RopeInterleavedAndRotateHalfMatchExplicitRotation) {
  const int64_t n = 4, heads = 3, head_dim = 24, offset = 8, rd = 16, half = 8, max_pos = 64;
  std::vector<float> c(max_pos * half), s(max_pos * half);
  ComputeRopeTables({rd, max_pos, 10000.0, false, 1, 32, 1, 1, 0, 0, true, c.data(), s.data()});
  std::vector<int32_t> pos = {0, 5, 17, 63};
  for (bool inter : {true, false}) {
    auto x = Rand(n * heads * head_dim, 7);
    auto y = x;
    ApplyRope({y.data(), n, heads, heads * head_dim, head_dim, offset, rd, pos.data(), c.data(),
               s.data(), max_pos, inter});
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const float* xi = x.data() + (t * heads + h) * head_dim;
        const float* yo = y.data() + (t * heads + h) * head_dim;
        for (int64_t j = 0; j < offset; ++j) EXPECT_EQ(yo[j], xi[j]);  // nope part untouched
        for (int64_t i = 0; i < half; ++i) {
          const double ang = pos[t] * std::pow(10000.0, -2.0 * i / rd);
          const double a = inter ? xi[offset + 2 * i] : xi[offset + i];
          const double b = inter ? xi[offset + 2 * i + 1] : xi[offset + i + half];
          // (a + ib) * e^{i ang}
          EXPECT_NEAR(yo[offset + i], a * std::cos(ang) - b * std::sin(ang), 1e-4);
          EXPECT_NEAR(yo[offset + i + half], b * std::cos(ang) + a * std::sin(ang), 1e-4);
        }
      }
  }
}

TEST(CpuOps, RopeRejectsPositionOutsideTable) {
  std::vector<float> c(4 * 2), s(4 * 2), x(4);
  int32_t pos = 4;
  EXPECT_THROW(ApplyRope({x.data(), 1, 1, 4, 4, 0, 4, &pos, c.data(), s.data(), 4, true}), CheckError);
}

TEST(CpuOps, SiluAndMulAndEmbedding) {
  auto gu = Rand(2 * 10, 8);
  std::vector<float> out(2 * 5);
  SiluAndMul({gu.data(), 10, out.data(), 5, 2, 5});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j) {
      const double g = gu[i * 10 + j], u = gu[i * 10 + 5 + j];
      EXPECT_NEAR(out[i * 5 + j], g / (1 + std::exp(-g)) * u, 1e-6);
    }
  auto table = Rand(6 * 3, 9);
  std::vector<int32_t> ids = {5, 0, 5};
  std::vector<float> e(9);
  Embedding({ids.data(), 3, table.data(), 6, 3, e.data()});
  EXPECT_EQ(e[0], table[15]);
  EXPECT_EQ(e[4], table[1]);
  ids[1] = 6;
  EXPECT_THROW(Embedding({ids.data(), 3, table.data(), 6, 3, e.data()}), CheckError);
}

// Brute force: enumerate every allowed set of groups, take the best one by group score, then
// the top_k experts inside by choice score.
void BruteRouting(const std::vector<float>& logits, const std::vector<float>* bias, int E, int top_k,
                  int n_group, int topk_group, int scoring, int method, bool norm, float rsf,
                  std::vector<int>* ids, std::vector<double>* w) {
  std::vector<double> sc(E), ch(E);
  double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
  for (int e = 0; e < E; ++e) z += std::exp(double(logits[e]) - mx);
  for (int e = 0; e < E; ++e) {
    sc[e] = scoring == 0 ? std::exp(double(logits[e]) - mx) / z : 1 / (1 + std::exp(-double(logits[e])));
    ch[e] = sc[e] + (bias ? (*bias)[e] : 0.0);
  }
  std::set<int> allowed;
  if (method == 0 || n_group == 1) {
    for (int e = 0; e < E; ++e) allowed.insert(e);
  } else {
    const int per = E / n_group;
    std::vector<double> gs(n_group);
    for (int g = 0; g < n_group; ++g) {
      std::vector<double> v(ch.begin() + g * per, ch.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      gs[g] = method == 1 ? v[0] : v[0] + v[1];
    }
    double best = -1e30;
    std::vector<int> best_set;
    for (int mask = 0; mask < (1 << n_group); ++mask) {
      if (__builtin_popcount(mask) != topk_group) continue;
      double tot = 0;
      std::vector<int> set;
      for (int g = 0; g < n_group; ++g)
        if (mask >> g & 1) { tot += gs[g]; set.push_back(g); }
      if (tot > best) { best = tot; best_set = set; }
    }
    for (int g : best_set)
      for (int j = 0; j < per; ++j) allowed.insert(g * per + j);
  }
  std::vector<int> cand(allowed.begin(), allowed.end());
  std::sort(cand.begin(), cand.end(), [&](int a, int b) { return ch[a] > ch[b]; });
  ids->assign(cand.begin(), cand.begin() + top_k);
  w->clear();
  double s = 0;
  for (int e : *ids) s += sc[e];
  for (int e : *ids) w->push_back((norm ? sc[e] / s : sc[e]) * rsf);
}

TEST(CpuOps, MoeRoutingMatchesBruteForce) {
  struct Case { int E, top_k, n_group, topk_group, scoring, method; bool norm, bias; float rsf; };
  const Case cases[] = {
      {16, 4, 1, 1, 0, 0, false, false, 1.0f},   // V2-Lite greedy softmax
      {16, 3, 4, 2, 0, 1, false, false, 16.0f},  // V2 group_limited_greedy
      {16, 4, 4, 2, 1, 2, true, true, 2.5f},     // V3 noaux_tc
      {32, 8, 8, 4, 1, 2, true, true, 2.5f},
      {12, 2, 1, 1, 1, 2, false, true, 1.5f},    // noaux_tc, one group
  };
  std::mt19937 g(11);
  for (const auto& c : cases) {
    const int n = 20;
    auto logits = Rand(n * c.E, g(), -3, 3);
    auto bias = Rand(c.E, g(), -0.3f, 0.3f);
    std::vector<int32_t> ids(n * c.top_k);
    std::vector<float> w(n * c.top_k);
    MoeRouting({logits.data(), c.bias ? bias.data() : nullptr, n, c.E, c.top_k, c.n_group,
                c.topk_group, c.scoring, c.method, c.norm, c.rsf, ids.data(), w.data()});
    for (int t = 0; t < n; ++t) {
      std::vector<float> row(logits.begin() + t * c.E, logits.begin() + (t + 1) * c.E);
      std::vector<int> rid;
      std::vector<double> rw;
      BruteRouting(row, c.bias ? &bias : nullptr, c.E, c.top_k, c.n_group, c.topk_group, c.scoring,
                   c.method, c.norm, c.rsf, &rid, &rw);
      std::map<int, double> got, want;
      for (int k = 0; k < c.top_k; ++k) {
        got[ids[t * c.top_k + k]] = w[t * c.top_k + k];
        want[rid[k]] = rw[k];
      }
      ASSERT_EQ(got.size(), want.size());
      for (auto [e, v] : want) {
        ASSERT_TRUE(got.count(e)) << "case E=" << c.E << " method=" << c.method << " token " << t;
        EXPECT_NEAR(got[e], v, 1e-5);
      }
    }
  }
}

// Bias changes selection but not the weights: weights are unbiased scores.
TEST(CpuOps, MoeRoutingBiasOnlyForSelection) {
  std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<float> bias = {10.0f, 0.0f, 0.0f, 0.0f};
  int32_t ids[2];
  float w[2];
  MoeRouting({logits.data(), bias.data(), 1, 4, 2, 1, 1, 1, 2, false, 1.0f, ids, w});
  std::set<int> s(ids, ids + 2);
  EXPECT_TRUE(s.count(0) && s.count(3));
  for (int k = 0; k < 2; ++k) EXPECT_NEAR(w[k], 1 / (1 + std::exp(-logits[ids[k]])), 1e-6);
}

TEST(CpuOps, MlaPrefillMatchesScalarCausalAttention) {
  const int64_t nq = 5, nk = 8, H = 2, dqk = 6, dv = 4, q_pos0 = 3;
  auto q = Rand(nq * H * dqk, 12), k = Rand(nk * H * dqk, 13), v = Rand(nk * H * dv, 14);
  std::vector<float> out(nq * H * dv);
  MlaPrefillAttention({q.data(), k.data(), v.data(), out.data(), nq, nk, H, dqk, dv, q_pos0, 0.7f});
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> p;
      double z = 0;
      for (int64_t j = 0; j <= q_pos0 + i; ++j) {
        double d = 0;
        for (int64_t c = 0; c < dqk; ++c) d += double(q[(i * H + h) * dqk + c]) * k[(j * H + h) * dqk + c];
        p.push_back(std::exp(0.7 * d));
        z += p.back();
      }
      for (int64_t c = 0; c < dv; ++c) {
        double o = 0;
        for (size_t j = 0; j < p.size(); ++j) o += p[j] / z * v[(j * H + h) * dv + c];
        EXPECT_NEAR(out[(i * H + h) * dv + c], o, 1e-5);
      }
    }
}

// Absorbed attention over a scattered paged cache == naive attention with K = latent row
// (broadcast to every head) and V = its first kv_lora channels.
TEST(CpuOps, MlaDecodeMatchesPrefillOverGatheredCache) {
  const int64_t H = 3, kv_lora = 8, rope = 4, L = kv_lora + rope, bs = 4, num_blocks = 10;
  auto cache = Rand(num_blocks * bs * L, 15);
  // Two sequences: seq0 has 7 tokens, 1 query; seq1 has 10 tokens, 3 queries (MTP-style).
  std::vector<int32_t> qs = {0, 1, 4}, ctx = {7, 10};
  const int64_t max_blocks = 3;
  std::vector<int32_t> table = {9, 2, -1, 5, 0, 7};
  const int64_t T = 4;
  auto q = Rand(T * H * L, 16);
  std::vector<float> out(T * H * kv_lora);
  MlaDecodeAttention({q.data(), cache.data(), out.data(), 2, H, kv_lora, rope, bs, qs.data(),
                      ctx.data(), table.data(), max_blocks, 0.3f});
  for (int s = 0; s < 2; ++s) {
    const int64_t nk = ctx[s], nq = qs[s + 1] - qs[s];
    std::vector<float> k(nk * H * L), v(nk * H * kv_lora);
    for (int64_t j = 0; j < nk; ++j) {
      const float* row = cache.data() + (table[s * max_blocks + j / bs] * bs + j % bs) * L;
      for (int64_t h = 0; h < H; ++h) {
        std::copy(row, row + L, k.begin() + (j * H + h) * L);
        std::copy(row, row + kv_lora, v.begin() + (j * H + h) * kv_lora);
      }
    }
    std::vector<float> ref(nq * H * kv_lora);
    MlaPrefillAttention({q.data() + qs[s] * H * L, k.data(), v.data(), ref.data(), nq, nk, H, L,
                         kv_lora, nk - nq, 0.3f});
    for (int64_t i = 0; i < nq * H * kv_lora; ++i)
      EXPECT_NEAR(out[qs[s] * H * kv_lora + i], ref[i], 1e-5);
  }
}

TEST(CpuOps, Fp8QuantizePerTokenGroup) {
  const int64_t n = 2, k = 200, group = 128;
  auto x = Rand(n * k, 17, -5, 5);
  for (int64_t c = 128; c < 200; ++c) x[k + c] = 0.0f;  // a zero group
  std::vector<uint8_t> q(n * k);
  std::vector<float> sc(n * 2);
  Fp8QuantizePerTokenGroup({x.data(), n, k, group, q.data(), sc.data()});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < 2; ++g) {
      float amax = 0;
      for (int64_t c = g * 128; c < std::min<int64_t>(k, (g + 1) * 128); ++c)
        amax = std::max(amax, std::fabs(x[i * k + c]));
      if (amax == 0) {
        for (int64_t c = g * 128; c < k; ++c) EXPECT_EQ(Fp8E4M3ToF32(q[i * k + c]), 0.0f);
        continue;
      }
      EXPECT_NEAR(sc[i * 2 + g], amax / 448.0f, 1e-9);
      for (int64_t c = g * 128; c < std::min<int64_t>(k, (g + 1) * 128); ++c) {
        const float deq = Fp8E4M3ToF32(q[i * k + c]) * sc[i * 2 + g];
        EXPECT_LE(std::fabs(deq - x[i * k + c]), std::fabs(x[i * k + c]) / 16 + 1e-3 * amax);
      }
    }
}

TEST(CpuOps, SampleGreedyAndDeterministic) {
  std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f};
  SampleParams p{logits.data(), 4, 0.0f, 1.0f, 0, 1, 0};
  EXPECT_EQ(Sample(p), 1);  // lowest index on ties
  p.temperature = 1.0f;
  p.top_k = 1;
  EXPECT_EQ(Sample(p), 1);
  p.top_k = 0;
  p.top_p = 0.01f;
  EXPECT_EQ(Sample(p), 1);
  p.top_p = 1.0f;
  for (uint64_t step = 0; step < 20; ++step) {
    p.step = step;
    EXPECT_EQ(Sample(p), Sample(p));
  }
}

// Greedy with NaN logits: NaN never wins, also at id 0; a row of only NaN gives 0; -inf rows
// give the lowest id (as the CUDA argmax, tests/cuda/test_sampling.cpp).
TEST(CpuOps, SampleGreedyNaNNeverWins) {
  const float nan = std::nanf("");
  std::vector<float> a = {nan, 1.0f, 3.0f, 3.0f};
  EXPECT_EQ(Sample({a.data(), 4, 0.0f, 1.0f, 0, 1, 0}), 2);
  std::vector<float> b = {1.0f, nan, 0.5f};
  EXPECT_EQ(Sample({b.data(), 3, 0.0f, 1.0f, 0, 1, 0}), 0);
  std::vector<float> c = {nan, nan};
  EXPECT_EQ(Sample({c.data(), 2, 0.0f, 1.0f, 0, 1, 0}), 0);
  std::vector<float> d = {nan, -INFINITY, -INFINITY};
  EXPECT_EQ(Sample({d.data(), 3, 0.0f, 1.0f, 0, 1, 0}), 1);
  EXPECT_EQ(GreedyArgmax(a.data(), 4), 2);
}

TEST(CpuOps, SampleFollowsDistribution) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  int counts[3] = {0, 0, 0};
  const int N = 20000;
  for (int i = 0; i < N; ++i) counts[Sample({logits.data(), 3, 1.0f, 1.0f, 0, 42, uint64_t(i)})]++;
  EXPECT_NEAR(counts[0] / double(N), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(N), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(N), 0.2, 0.02);
  // top_k 2: renormalised over {0, 1}: 0.625 / 0.375.
  int c2[3] = {0, 0, 0};
  for (int i = 0; i < N; ++i) c2[Sample({logits.data(), 3, 1.0f, 1.0f, 2, 7, uint64_t(i)})]++;
  EXPECT_EQ(c2[2], 0);
  EXPECT_NEAR(c2[0] / double(N), 0.625, 0.02);
  // top_p 0.6: smallest prefix with mass >= 0.6 is {0, 1}.
  int c3[3] = {0, 0, 0};
  for (int i = 0; i < N; ++i) c3[Sample({logits.data(), 3, 1.0f, 0.6f, 0, 9, uint64_t(i)})]++;
  EXPECT_EQ(c3[2], 0);
  EXPECT_NEAR(c3[1] / double(N), 0.375, 0.02);
}

}  // namespace
}  // namespace ds::cpu
