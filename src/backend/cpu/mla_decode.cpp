// Absorbed-form MLA attention straight over the paged latent cache (DeepSeek-V2 paper 2.1.3:
// W_UK absorbed into q, W_UV applied after). Keys are whole latent rows [c_kv | k_pe],
// values their first kv_lora channels.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "common/check.h"

namespace ds::cpu {

void MlaDecodeAttention(const MlaDecodeParams& p) {
  const int64_t H = p.heads, L = p.kv_lora + p.rope_dim;
  const int64_t T = p.num_seqs > 0 ? p.query_start[p.num_seqs] : 0;
  // token -> sequence map, and each token's position.
  std::vector<int32_t> seq_of(T), pos_of(T);
  for (int64_t s = 0; s < p.num_seqs; ++s) {
    const int32_t q0 = p.query_start[s], q1 = p.query_start[s + 1];
    for (int32_t t = q0; t < q1; ++t) {
      seq_of[t] = static_cast<int32_t>(s);
      pos_of[t] = p.context_lens[s] - (q1 - t);
      DS_CHECK(pos_of[t] >= 0) << "context_len shorter than the query block";
    }
    DS_CHECK((p.context_lens[s] + p.block_size - 1) / p.block_size <= p.max_blocks)
        << "block table too short";
  }
  int64_t work = 0;
  for (int64_t t = 0; t < T; ++t) work += (pos_of[t] + 1) * H * (L + p.kv_lora);
#pragma omp parallel if (work > (1 << 18))
  {
    std::vector<float> s;
    std::vector<double> acc(p.kv_lora);
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const float* q = p.q + (t * H + h) * L;
        const int32_t* table = p.block_table + static_cast<int64_t>(seq_of[t]) * p.max_blocks;
        const int64_t nkeys = static_cast<int64_t>(pos_of[t]) + 1;
        s.resize(nkeys);
        float mx = -INFINITY;
        for (int64_t j = 0; j < nkeys; ++j) {
          const float* k = p.cache + (static_cast<int64_t>(table[j / p.block_size]) * p.block_size +
                                      j % p.block_size) * L;
          float dot = 0.0f;
          for (int64_t c = 0; c < L; ++c) dot += q[c] * k[c];
          s[j] = dot * p.softmax_scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < nkeys; ++j) {
          s[j] = std::exp(s[j] - mx);
          sum += s[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < nkeys; ++j) {
          const float* v = p.cache + (static_cast<int64_t>(table[j / p.block_size]) * p.block_size +
                                      j % p.block_size) * L;
          const double w = s[j];
          for (int64_t c = 0; c < p.kv_lora; ++c) acc[c] += w * v[c];
        }
        float* out = p.out + (t * H + h) * p.kv_lora;
        for (int64_t c = 0; c < p.kv_lora; ++c) out[c] = static_cast<float>(acc[c] / sum);
      }
    }
  }
}

}  // namespace ds::cpu
