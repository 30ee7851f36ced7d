// `dsinfer bench kernels --only fp8_gemv_pdl` (only when named; session 36): the FP8 GEMV for
// decode (fp8_gemv.h) in a chain of launches, as a decode step issues its projections, with and
// without programmatic dependent launch (PDL, launch.cuh) and with the weights of each CTA's
// first ring stages requested before the grid-dependency wait (Fp8GemvParams::prefetch_weights).
//
// What is timed: Bench::TimeUs's CUDA graph of back-to-back launches of one projection, each
// launch on the next weight copy (copies rotate over more than L2, so every launch streams its
// weights from HBM), the same activations and output. Variants, in interleaved rounds:
//   off       plain launches (each kernel starts after the previous one ended);
//   pdl       PDL launches (programmatic edges in the graph), every global access after the wait;
//   prefetch  PDL launches with prefetch_weights: the weight stream starts during the previous
//             kernel's tail.
// TB/s counts weight + scale bytes (as `--only fp8_gemv`); the ratio is to this run's copy
// ceiling. The first launch of each graph replay has no predecessor to overlap: 1 in
// Bench::TimeUs's per-graph launches, at least min(weight copies, 16) (4-9 for the big weights:
// dense gate_up, dense down, o_proj), so the PDL variants' gains there are understated.
#ifdef DS_WITH_CUDA
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fill_random.h"
#include "backend/cuda/fp8_gemv.h"
#include "tools/bench_kernels.h"

namespace ds::bench_kernels {

using namespace ds::cuda;

namespace {

struct PdlVariant {
  const char* name;
  bool pdl, prefetch;
};
constexpr PdlVariant kPdlVariants[] = {{"off", false, false}, {"pdl", true, false}, {"prefetch", true, true}};
constexpr int kRounds = 2;

void Fp8GemvPdlCase(Bench& b, const Proj& pr, int64_t M, int sms) {
  const int64_t N = pr.N, K = pr.K;
  Fp8WeightSets fw(b, N, K, 64);
  const int nsets = fw.sets();
  Buf a(8 * K * 2), out(8 * N * 4);
  FillUniformBf16(a.as<__nv_bfloat16>(), 8 * K, b.NextSeed(), -1, 1, b.st());
  Fp8GemvParams p;
  p.a = a.as<__nv_bfloat16>(); p.lda = K; p.w = fw.w[0]->as<uint8_t>(); p.w_scales = fw.s[0]->as<float>();
  p.out = out.as<void>(); p.ldo = N; p.M = M; p.N = N; p.K = K; p.stream = b.st();
  p.ctas = Fp8GemvRunnerCtas(K, sms);  // the runner's CTA count (auto below K = 16384)
  const Fp8GemvPlan plan = Fp8GemvPlanFor(p);
  Buf gws(plan.workspace_bytes);
  DS_CUDA_CHECK(cudaMemsetAsync(gws.as<void>(), 0, gws.bytes(), b.st()));
  p.workspace = gws.as<void>(); p.workspace_bytes = gws.bytes();
  char shape[160];
  std::snprintf(shape, sizeof shape, "V3 %s fp8 M%lld N%lld K%lld", pr.name, (long long)M, (long long)N, (long long)K);
  constexpr int kV = static_cast<int>(sizeof kPdlVariants / sizeof kPdlVariants[0]);
  std::vector<double> us[kV];
  for (int round = 0; round < kRounds; ++round)
    for (int v = 0; v < kV; ++v)
      us[v].push_back(b.TimeUs([&](int i) {
        Fp8GemvParams q = p;
        q.w = fw.w[i]->as<uint8_t>(); q.w_scales = fw.s[i]->as<float>();
        q.pdl = kPdlVariants[v].pdl; q.prefetch_weights = kPdlVariants[v].prefetch;
        Fp8Gemv(q);
      }, nsets, 5, 40));
  double sum_off = 0;
  for (double x : us[0]) sum_off += x;
  for (int v = 0; v < kV; ++v) {
    double sum = 0;
    std::string rounds;
    for (double x : us[v]) {
      sum += x;
      rounds += (rounds.empty() ? "" : " / ") + std::to_string(x).substr(0, 6);
    }
    char note[256];
    std::snprintf(note, sizeof note, "weight + scale bytes; chained launches, %s; %lld CTAs; mean of %d interleaved "
                  "rounds (%s us); off / this %.3f", kPdlVariants[v].name, (long long)plan.ctas, kRounds,
                  rounds.c_str(), sum_off / sum);
    b.Add(std::string("fp8_gemv_pdl/") + kPdlVariants[v].name, shape, sum / kRounds, fw.bytes, 0, true, note);
  }
}

}  // namespace

void Fp8GemvPdlFamily(Bench& b) {
  int sms = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int64_t M : {1, 8})
    for (const auto& pr : kProjs) {
      if (b.OutOfTime()) {
        b.skipped.push_back(std::string("fp8_gemv_pdl ") + pr.name + " M" + std::to_string(M));
        continue;
      }
      Fp8GemvPdlCase(b, pr, M, sms);
    }
}

}  // namespace ds::bench_kernels
#endif  // DS_WITH_CUDA
