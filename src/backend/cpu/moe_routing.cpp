// MoE gate: scoring (softmax | sigmoid), expert selection (greedy | group_limited_greedy |
// noaux_tc) with the correction bias for selection only, weight normalisation and scaling.
// Source: transformers DeepseekV2TopkRouter / DeepseekV3TopkRouter; DeepSeek-V3 report 2.1.2.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/ops.h"
#include "common/check.h"

namespace ds::cpu {

void MoeRouting(const MoeRoutingParams& p) {
  const int64_t E = p.num_experts;
  DS_CHECK(p.top_k > 0 && p.top_k <= E) << "top_k " << p.top_k << " vs " << E << " experts";
  const bool grouped = p.topk_method != 0 && p.n_group > 1;
  if (grouped) {
    DS_CHECK(E % p.n_group == 0) << "n_group must divide num_experts";
    DS_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group) << "bad topk_group";
  }
  const int64_t per_group = grouped ? E / p.n_group : E;
  const float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for if (p.n > 16)
  for (int64_t t = 0; t < p.n; ++t) {
    const float* logits = p.logits + t * E;
    std::vector<float> scores(E), choice(E);
    if (p.scoring == 0) {
      float mx = kNegInf;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, logits[e]);
      double sum = 0.0;
      for (int64_t e = 0; e < E; ++e) {
        scores[e] = std::exp(logits[e] - mx);
        sum += scores[e];
      }
      for (int64_t e = 0; e < E; ++e) scores[e] = static_cast<float>(scores[e] / sum);
    } else {
      for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    }
    for (int64_t e = 0; e < E; ++e) choice[e] = scores[e] + (p.bias ? p.bias[e] : 0.0f);

    if (grouped) {
      // Group score: max (group_limited_greedy) or sum of the top-2 (noaux_tc).
      std::vector<float> gscore(p.n_group);
      for (int g = 0; g < p.n_group; ++g) {
        const float* c = choice.data() + g * per_group;
        if (p.topk_method == 1) {
          gscore[g] = *std::max_element(c, c + per_group);
        } else {
          float a = kNegInf, b = kNegInf;  // a >= b
          for (int64_t j = 0; j < per_group; ++j) {
            if (c[j] > a) { b = a; a = c[j]; }
            else if (c[j] > b) b = c[j];
          }
          gscore[g] = per_group >= 2 ? a + b : a;
        }
      }
      std::vector<int> gidx(p.n_group);
      std::iota(gidx.begin(), gidx.end(), 0);
      std::stable_sort(gidx.begin(), gidx.end(),
                       [&](int a, int b) { return gscore[a] > gscore[b]; });
      std::vector<char> keep(p.n_group, 0);
      for (int i = 0; i < p.topk_group; ++i) keep[gidx[i]] = 1;
      for (int g = 0; g < p.n_group; ++g)
        if (!keep[g])
          for (int64_t j = 0; j < per_group; ++j) choice[g * per_group + j] = kNegInf;
    }
    std::vector<int32_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + p.top_k, order.end(), [&](int32_t a, int32_t b) {
      return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
    });
    int32_t* ids = p.topk_ids + t * p.top_k;
    float* w = p.topk_weights + t * p.top_k;
    double sum = 0.0;
    for (int k = 0; k < p.top_k; ++k) {
      ids[k] = order[k];
      w[k] = scores[order[k]];
      sum += w[k];
    }
    const float denom = p.norm_topk_prob ? static_cast<float>(sum) + 1e-20f : 1.0f;
    for (int k = 0; k < p.top_k; ++k) w[k] = w[k] / denom * p.routed_scaling_factor;
  }
}

}  // namespace ds::cpu
