// Token embedding lookup: out[i] = table[ids[i]].
#include <cstring>

#include "backend/cpu/ops.h"
#include "common/check.h"

namespace ds::cpu {

void Embedding(const EmbeddingParams& p) {
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t id = p.ids[i];
    DS_CHECK(id >= 0 && id < p.vocab) << "token id " << id << " outside the vocabulary (" << p.vocab << ")";
    std::memcpy(p.out + i * p.d, p.table + id * p.d, sizeof(float) * p.d);
  }
}

}  // namespace ds::cpu
