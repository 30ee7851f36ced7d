// `dsinfer bench kernels`: the MLA decode and prefill families (conventions in bench_kernels.cpp's
// file comment: FLOPs and bytes as FlashMLA's table counts them).
#ifdef DS_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fill_random.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/mla_decode.h"
#include "backend/cuda/mla_prefill.h"
#include "backend/cuda/runner_kernels.h"
#include "common/check.h"
#include "tools/bench_kernels.h"
#include "tools/nvml_sampler.h"

#include <chrono>
#include <thread>

namespace ds::bench_kernels {

using namespace ds::cuda;

MlaTables& MlaResults() {
  static MlaTables t;
  return t;
}

// ---------------------------------------------------------------- MLA decode
// The NVML sampler of the current CUDA device (the bench runs on one device; made once).
tools::NvmlSampler& DeviceNvml() {
  static tools::NvmlSampler nvml([] {
    int dev = 0;
    DS_CUDA_CHECK(cudaGetDevice(&dev));
    char pci[32] = {};
    DS_CUDA_CHECK(cudaDeviceGetPCIBusId(pci, sizeof pci, dev));
    return std::string(pci);
  }());
  return nvml;
}

// A comma-separated list of integers from environment variable `name` (empty tokens skipped; none
// set or none parsed: empty).
std::vector<int> EnvIntList(const char* name) {
  std::vector<int> out;
  const char* e = std::getenv(name);
  if (e == nullptr) return out;
  std::istringstream ss(e);
  for (std::string tok; std::getline(ss, tok, ',');)
    if (!tok.empty()) out.push_back(std::atoi(tok.c_str()));
  return out;
}

double AnchorMethodUs(Bench& b, const std::function<void(int)>& launch, double* mhz) {
  DS_CUDA_CHECK(cudaStreamSynchronize(b.st()));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  tools::NvmlSampler& nvml = DeviceNvml();
  for (int i = 0; i < 3; ++i) launch(i);
  constexpr int kReps = 50;
  std::vector<cudaEvent_t> ev(2 * kReps);
  for (auto& x : ev) DS_CUDA_CHECK(cudaEventCreate(&x));
  nvml.Start(2);
  for (int r = 0; r < kReps; ++r) {
    DS_CUDA_CHECK(cudaEventRecord(ev[2 * r], b.st()));
    launch(r);
    DS_CUDA_CHECK(cudaEventRecord(ev[2 * r + 1], b.st()));
  }
  DS_CUDA_CHECK(cudaStreamSynchronize(b.st()));
  const auto smp = nvml.Stop();
  std::vector<double> t(kReps);
  for (int r = 0; r < kReps; ++r) {
    float ms = 0;
    DS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
    t[r] = ms * 1e3;
  }
  for (auto& x : ev) DS_CUDA_CHECK(cudaEventDestroy(x));
  std::nth_element(t.begin(), t.begin() + kReps / 2, t.end());
  double m = 0;
  for (const auto& x : smp) m += x.sm_mhz;
  if (mhz != nullptr) *mhz = smp.empty() ? 0.0 : m / static_cast<double>(smp.size());
  return t[kReps / 2];
}

// DS_BENCH_MLA_SOAK=<comma-separated sm90 variants> (a measurement, session 41): at the sm90 case of
// the list's first variant, each listed variant runs this case back to back for DS_BENCH_MLA_SOAK_MS
// (default 1500) ms, DS_BENCH_MLA_SOAK_ROUNDS (default 3) rounds, the order reversed every other round,
// while NvmlSampler reads the energy counter, SM clock and power every 10 ms. Prints a line a (variant,
// round): us a launch (events over the loop), watts from the energy counter's slope over the middle
// 80% of the samples, mJ a launch (that power x the time), the mean SM clock and the mean power
// reading. Why: under the H200's 700 W cap a short timing burst reads the clock the bursts before it
// left; a sustained loop settles at the clock the kernel's own energy per launch allows.
void SoakAB(const MlaDecodeParams& p, const std::vector<std::unique_ptr<Buf>>& tables, double est_us,
            const std::string& label, int variant, cudaStream_t st) {
  const std::vector<int> list = EnvIntList("DS_BENCH_MLA_SOAK");
  if (list.empty() || list[0] != variant) return;
  const auto env_num = [](const char* name, double dflt) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::atof(v) : dflt;
  };
  const double ms = env_num("DS_BENCH_MLA_SOAK_MS", 1500), rounds = env_num("DS_BENCH_MLA_SOAK_ROUNDS", 3);
  tools::NvmlSampler& nvml = DeviceNvml();
  if (!nvml.ok()) std::printf("soak %s: NVML unavailable (times only)\n", label.c_str());
  const int nsets = static_cast<int>(tables.size());
  const int k = static_cast<int>(std::clamp(std::ceil(2000.0 / est_us), 1.0, 64.0));  // launches a graph
  const int64_t graphs = std::max<int64_t>(1, static_cast<int64_t>(ms * 1e3 / (est_us * k)));
  cudaEvent_t ea, eb;
  DS_CUDA_CHECK(cudaEventCreate(&ea));
  DS_CUDA_CHECK(cudaEventCreate(&eb));
  for (int r = 0; r < static_cast<int>(rounds); ++r) {
    std::vector<int> order = list;
    if (r % 2 == 1) std::reverse(order.begin(), order.end());
    for (const int v : order) {
      MlaDecodeParams pv = p;
      pv.sm90_variant = v;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      DS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < k; ++i) {
        MlaDecodeParams pi = pv;
        pi.block_table = tables[i % nsets]->as<int32_t>();
        MlaDecodeAttention(pi);
      }
      DS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
      DS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int64_t g = 0; g < std::max<int64_t>(1, graphs / 8); ++g) DS_CUDA_CHECK(cudaGraphLaunch(exec, st));  // warm-up
      DS_CUDA_CHECK(cudaStreamSynchronize(st));
      nvml.Start(10);
      DS_CUDA_CHECK(cudaEventRecord(ea, st));
      for (int64_t g = 0; g < graphs; ++g) DS_CUDA_CHECK(cudaGraphLaunch(exec, st));
      DS_CUDA_CHECK(cudaEventRecord(eb, st));
      DS_CUDA_CHECK(cudaEventSynchronize(eb));
      const std::vector<tools::NvmlSampler::Sample> smp = nvml.Stop();
      float el = 0;
      DS_CUDA_CHECK(cudaEventElapsedTime(&el, ea, eb));
      const double us = el * 1e3 / (static_cast<double>(graphs) * k);
      double watts = 0, mhz = 0, pw = 0;
      int n = 0;
      if (smp.size() >= 10) {
        const size_t i0 = smp.size() / 10, i1 = smp.size() - 1 - smp.size() / 10;
        const double dt = smp[i1].t_s - smp[i0].t_s;
        if (dt > 0) watts = static_cast<double>(smp[i1].mj - smp[i0].mj) / 1e3 / dt;
        for (size_t i = i0; i <= i1; ++i, ++n) {
          mhz += smp[i].sm_mhz;
          pw += smp[i].power_mw / 1e3;
        }
        mhz /= n;
        pw /= n;
      }
      std::printf("soak %s v%d round %d: %lld launches, %.2f us a launch, %.1f W (energy counter), %.3f mJ a launch, "
                  "SM %.0f MHz mean, %.1f W mean reading (%d samples)\n",
                  label.c_str(), v, r, static_cast<long long>(graphs) * k, us, watts, watts * us * 1e-3, mhz, pw, n);
      std::fflush(stdout);
      DS_CUDA_CHECK(cudaGraphExecDestroy(exec));
      DS_CUDA_CHECK(cudaGraphDestroy(graph));
    }
  }
  DS_CUDA_CHECK(cudaEventDestroy(ea));
  DS_CUDA_CHECK(cudaEventDestroy(eb));
}

// One more launch of `p` (variant 10, 12, 13, 15 or 16) with every CTA's entry / after-Q / after-stores clocks
// (MlaDecodeParams::sm90_cta_times; max_ctas >= the grid), printed per wave (a CTA's position among
// the CTAs its SM ran): CTAs, tiles, cycles (mean / min / max), the Q prologue, cycles per tile,
// the gap between an SM's consecutive CTAs, and the kernel's span.
// DS_BENCH_MLA_TIMELINE=1 (a measurement; sessions 19 and 39): one launch of a kernel's timeline
// instantiation (MlaDecodeParams::sm90_timeline; CTA 0's first thread of each of its `wgs`
// warpgroups stamps (event, clock64) pairs, warpgroup w's events numbered from 20 w, its first event
// opening an iteration: mla_decode_sm90_pair.cu kTl, mla_decode_sm90_ring3.cu kTl*). Prints, per
// warpgroup, the mean SM cycles between consecutive events over iterations 2 .. n-2, then
// iterations 8-10 (or what the CTA has) with all warpgroups' events in time order, relative to the first.
void PrintTimeline(Bench& b, MlaDecodeParams p, const int32_t* table, const std::string& label, int wgs) {
  constexpr int kMax = 1024;
  Buf tl(wgs * 2 * kMax * sizeof(long long));
  DS_CUDA_CHECK(cudaMemsetAsync(tl.as<void>(), 0xff, tl.bytes(), b.st()));
  p.block_table = table;
  p.sm90_timeline = tl.as<long long>();
  MlaDecodeAttention(p);
  const int sched = p.sm90_variant == 12 ? 13 : p.sm90_variant;  // the schedule the timeline instantiation ran
  std::vector<long long> h(wgs * 2 * kMax);
  DS_CUDA_CHECK(cudaMemcpyAsync(h.data(), tl.as<void>(), tl.bytes(), cudaMemcpyDeviceToHost, b.st()));
  DS_CUDA_CHECK(cudaStreamSynchronize(b.st()));
  struct Ev { long long t; int wg, tile, ev; };
  std::vector<Ev> all;
  for (int wgi = 0; wgi < wgs; ++wgi) {
    const long long* r = h.data() + wgi * 2 * kMax;
    int n = 0;
    while (n < kMax && r[2 * n] >= 0) ++n;
    const long long top = 20 * wgi;
    int tiles = 0;
    for (int i = 0; i < n; ++i) tiles += r[2 * i] == top;
    std::map<std::pair<long long, long long>, std::pair<double, int>> gap;
    int tile = -1;
    for (int i = 0; i < n; ++i) {
      if (r[2 * i] == top) ++tile;
      all.push_back({r[2 * i + 1], wgi, tile, static_cast<int>(r[2 * i])});
      if (i == 0 || tile < 2 || tile >= tiles - 1) continue;
      auto& g = gap[{r[2 * i - 2], r[2 * i]}];
      g.first += static_cast<double>(r[2 * i + 1] - r[2 * i - 1]);
      ++g.second;
    }
    std::printf("timeline %s v%d wg%d: %d events, %d iterations; mean SM cycles between events (iterations 2..%d):", label.c_str(),
                sched, wgi, n, tiles, tiles - 2);
    for (const auto& [k, v] : gap) std::printf(" %lld->%lld %.0f (x%d);", k.first, k.second, v.first / v.second, v.second);
    std::printf("\n");
  }
  std::sort(all.begin(), all.end(), [](const Ev& x, const Ev& y) { return x.t < y.t; });
  int max_tile = 0;
  for (const Ev& e : all) max_tile = std::max(max_tile, e.tile);
  // The first 40 events; all of them for a CTA of <= 10 iterations (e.g. batch 1 x 32K: 8 tiles a CTA).
  const size_t nstart = max_tile < 10 ? all.size() : 40;
  std::printf("timeline %s v%d start (cycles from the first event; wg:it:event):", label.c_str(), sched);
  for (size_t i = 0; i < all.size() && i < nstart; ++i)
    std::printf(" %lld=%d:%d:%d", all[i].t - all[0].t, all[i].wg, all[i].tile, all[i].ev);
  std::printf("\n");
  const int t0 = std::min(8, std::max(0, max_tile - 3)), t1 = t0 + 2;
  long long base = -1;
  std::printf("timeline %s v%d window iterations %d-%d (cycles from the window's first event, any warpgroup; wg:it:event):",
              label.c_str(), sched, t0, t1);
  for (const Ev& e : all) {
    if (e.tile < t0 || e.tile > t1) continue;
    if (base < 0) base = e.t;
    std::printf(" %lld=%d:%d:%d", e.t - base, e.wg, e.tile, e.ev);
  }
  std::printf("\n");
}

void PrintCtaTimes(Bench& b, MlaDecodeParams p, int64_t max_ctas, const std::string& label) {
  Buf ct(static_cast<size_t>(8 * max_ctas) * sizeof(long long));
  DS_CUDA_CHECK(cudaMemsetAsync(ct.as<void>(), 0xff, ct.bytes(), b.st()));
  p.sm90_cta_times = ct.as<long long>();
  MlaDecodeAttention(p);
  std::vector<long long> h(static_cast<size_t>(8 * max_ctas));
  DS_CUDA_CHECK(cudaMemcpyAsync(h.data(), ct.as<void>(), ct.bytes(), cudaMemcpyDeviceToHost, b.st()));
  DS_CUDA_CHECK(cudaStreamSynchronize(b.st()));
  struct Cta { long long sm, c0, c1, c2, g0, g1, tiles, cq; };  // cq: Q tile in shared memory (slot 7; -1 if not stamped)
  std::map<long long, std::vector<Cta>> by_sm;
  long long gmin = -1, gmax = -1;
  for (int64_t i = 0; i < max_ctas; ++i) {
    const long long* r = h.data() + 8 * i;
    if (r[1] == -1 || r[3] == -1) continue;
    by_sm[r[0]].push_back({r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]});
    gmin = gmin < 0 ? r[4] : std::min(gmin, r[4]);
    gmax = std::max(gmax, r[5]);
  }
  struct Acc { int n = 0; double dur = 0, dmin = 1e18, dmax = 0, pro = 0, tiles = 0, gap = 0; int ngap = 0; double cyc_per_ns = 0;
               double qload = 0; int nq = 0; };
  std::vector<Acc> waves;
  for (auto& [sm, v] : by_sm) {
    std::sort(v.begin(), v.end(), [](const Cta& x, const Cta& y) { return x.c0 < y.c0; });
    for (size_t k = 0; k < v.size(); ++k) {
      if (waves.size() <= k) waves.resize(k + 1);
      Acc& a = waves[k];
      const double d = double(v[k].c2 - v[k].c0);
      ++a.n; a.dur += d; a.dmin = std::min(a.dmin, d); a.dmax = std::max(a.dmax, d);
      a.pro += double(v[k].c1 - v[k].c0); a.tiles += double(v[k].tiles);
      if (v[k].cq != -1) { a.qload += double(v[k].cq - v[k].c0); ++a.nq; }
      if (v[k].g1 > v[k].g0) a.cyc_per_ns += d / double(v[k].g1 - v[k].g0);
      if (k > 0) { a.gap += double(v[k].c0 - v[k - 1].c2); ++a.ngap; }
    }
  }
  std::printf("cta-times %s v%d: %zu SMs, kernel span %.1f us (globaltimer)\n", label.c_str(), p.sm90_variant,
              by_sm.size(), (gmax - gmin) / 1e3);
  for (size_t k = 0; k < waves.size(); ++k) {
    const Acc& a = waves[k];
    std::printf("cta-times %s v%d wave %zu: %d CTAs, %.1f tiles, cycles mean %.0f min %.0f max %.0f, Q prologue %.0f, "
                "%.0f cycles/tile, gap before %.0f, %.2f GHz, Q in shared memory %.0f\n",
                label.c_str(), p.sm90_variant, k, a.n, a.tiles / a.n, a.dur / a.n, a.dmin, a.dmax, a.pro / a.n,
                a.dur / std::max(1.0, a.tiles), a.ngap ? a.gap / a.ngap : 0.0, a.cyc_per_ns / a.n,
                a.nq ? a.qload / a.nq : -1.0);
  }
}

// Times MLA decode at `ctx` (one entry per sequence) with q_len query tokens per sequence.
double MlaDecodeCase(Bench& b, int64_t H, const std::vector<int32_t>& ctx, int qlen, bool tc, const std::string& label,
                     const std::string& note = "", int tc_stages = 0, int tc_blocks_per_sm = 0, int tc_rows_per_warp = 0,
                     int tc_fast_io = 0, int tc_kernel = 0, int tc_cluster_merge = 0, bool sm90 = false,
                     int sm90_variant = 0, int tc_fused_combine = 0, int64_t sm90_min_rows = 0,
                     bool sm90_balanced = false, int sm90_kv_l2_hint = 0, int sm90_combine_groups = 0,
                     bool pdl = false, bool q_bf16 = false) {
  const int64_t S = static_cast<int64_t>(ctx.size()), bs = 64, L = 576, kvl = 512;
  int64_t pages = 0, max_blocks = 0, max_ctx = 0, total = 0;
  for (auto c : ctx) {
    pages += (c + bs - 1) / bs;
    max_blocks = std::max<int64_t>(max_blocks, (c + bs - 1) / bs);
    max_ctx = std::max<int64_t>(max_ctx, c);
    total += c;
  }
  const double cache_bytes = double(pages) * bs * L * 2;
  const int nsets = SetsFor(cache_bytes, 8);
  Buf cache(static_cast<size_t>(pages * nsets * bs * L * 2));
  FillUniformBf16(cache.as<__nv_bfloat16>(), pages * nsets * bs * L, b.NextSeed(), -1, 1, b.st());
  std::mt19937 rng(static_cast<uint32_t>(b.NextSeed()));
  std::vector<std::unique_ptr<Buf>> tables;
  for (int set = 0; set < nsets; ++set) {
    std::vector<int32_t> perm(pages);
    std::iota(perm.begin(), perm.end(), static_cast<int32_t>(set * pages));
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> t(S * max_blocks, -1);
    int64_t used = 0;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < (ctx[s] + bs - 1) / bs; ++k) t[s * max_blocks + k] = perm[used++];
    tables.push_back(Upload(t));
  }
  std::vector<int32_t> qs{0};
  for (int64_t s = 0; s < S; ++s) qs.push_back(qs.back() + qlen);
  const int64_t T = qs.back();
  auto dqs = Upload(qs);
  auto dctx = Upload(ctx);
  Buf q(T * H * L * 4), out(T * H * kvl * 2);
  FillUniformF32(q.as<float>(), T * H * L, b.NextSeed(), -0.5f, 0.5f, b.st());
  // q_bf16 (MlaDecodeParams::q_bf16): the sm90 kernels read a bf16 copy of q (made here, untimed),
  // as FlashMLA takes its q; the same bits.
  std::unique_ptr<Buf> qb;
  if (q_bf16) {
    qb = std::make_unique<Buf>(static_cast<size_t>(T * H * L * 2));
    F32ToBf16(q.as<float>(), L, qb->as<__nv_bfloat16>(), L, T * H, L, b.st());
  }
  Buf ws(static_cast<size_t>(MlaDecodeWorkspaceFloats(T, H, kvl, max_ctx, 256) * 4));
  Buf split_cnt(static_cast<size_t>(S) * sizeof(uint32_t));  // tc_fused_combine: zeroed once, self-resetting
  DS_CUDA_CHECK(cudaMemsetAsync(split_cnt.as<void>(), 0, split_cnt.bytes(), b.st()));
  MlaDecodeParams p{};
  p.q = q.as<float>(); p.q_tok_stride = H * L; p.q_head_stride = L;
  p.cache = cache.as<__nv_bfloat16>(); p.num_tokens = T; p.num_seqs = S; p.heads = H; p.kv_lora = kvl; p.rope_dim = 64;
  p.block_size = bs; p.query_start = dqs->as<int32_t>(); p.context_lens = dctx->as<int32_t>();
  p.max_blocks = max_blocks; p.max_context = max_ctx; p.kv_chunk = 256; p.softmax_scale = 0.1352f;
  p.workspace = ws.as<float>(); p.out = out.as<void>(); p.o_tok_stride = H * kvl; p.o_head_stride = kvl;
  p.out_type = DTypeOut::kBF16; p.stream = b.st(); p.tensor_cores = tc; p.total_context = total; p.max_q_len = qlen;
  p.tc_stages = tc_stages; p.tc_blocks_per_sm = tc_blocks_per_sm; p.tc_rows_per_warp = tc_rows_per_warp;
  p.tc_fast_io = tc_fast_io; p.tc_kernel = tc_kernel; p.tc_cluster_merge = tc_cluster_merge;
  p.sm90 = sm90; p.cache_rows = pages * nsets * bs; p.sm90_variant = sm90_variant; p.sm90_min_rows = sm90_min_rows;
  p.tc_fused_combine = tc_fused_combine; p.split_counters = split_cnt.as<uint32_t>(); p.split_counter_count = S;
  p.sm90_kv_l2_hint = sm90_kv_l2_hint; p.sm90_combine_groups = sm90_combine_groups; p.pdl = pdl;
  if (qb) p.q_bf16 = qb->as<__nv_bfloat16>();
  if (sm90) {
    DS_CHECK(MlaDecodeSm90Selected(p)) << "bench: the sm90 MLA decode kernel does not apply to " << label;
  }
  // sm90_balanced: the work list of PlanMlaDecodeSm90WorkList (host_plans.h) on these contexts.
  std::unique_ptr<Buf> work, splits;
  std::string plan_note;
  if (sm90_balanced) {
    int sms = 0;
    DS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int64_t nrb = std::max<int64_t>(1, (qlen * H + 63) / 64);
    const MlaDecodeSm90WorkList wl = PlanMlaDecodeSm90WorkList(ctx, nrb, sms, (max_ctx + p.kv_chunk - 1) / p.kv_chunk);
    work = Upload(wl.items);
    splits = Upload(wl.splits);
    p.sm90_work = work->as<void>(); p.sm90_work_items = static_cast<int64_t>(wl.items.size());
    p.sm90_splits = splits->as<int32_t>(); p.sm90_work_max_splits = wl.max_splits;
    plan_note = ", balanced work list: " + std::to_string(wl.items.size() * nrb) + " CTAs, up to " +
                std::to_string(wl.max_splits) + " splits";
  }
  const double us = b.TimeUs([&](int i) {
    MlaDecodeParams pi = p;
    pi.block_table = tables[i]->as<int32_t>();
    MlaDecodeAttention(pi);
  }, nsets, tc ? 20 : 3, tc ? 400 : 150);
  // The label with the run set's tags, for the measurement hooks' printed lines.
  const std::string tagged = label + (sm90_balanced ? " [balanced]" : "") + (q_bf16 ? " [q:bf16]" : "");
  if (sm90) SoakAB(p, tables, us, tagged, sm90_variant, b.st());
  const double flops = 2.0 * H * qlen * double(total) * (576 + 512);
  const double bytes = double(total) * L * 2 + double(T) * H * (L + kvl) * 2;
  std::string kernel = sm90 ? "mla_decode_sm90" : tc ? "mla_decode_tc" : "mla_decode_cudacore";
  if (sm90 && H * qlen < 64) kernel += "[partial-tile]";
  if (sm90 && sm90_variant > 0 && sm90_variant < kSm90Variants) kernel += kSm90VariantTags[sm90_variant];
  if (sm90_balanced) kernel += "[balanced]";
  if (q_bf16) kernel += "[q:bf16]";
  static const char* const kL2Tags[] = {"", "[l2:evict_first]", "[l2:evict_last]", "[l2:evict_normal]"};
  if (sm90 && sm90_kv_l2_hint > 0 && sm90_kv_l2_hint < 4) kernel += kL2Tags[sm90_kv_l2_hint];
  if (sm90 && sm90_combine_groups == 4) kernel += "[combine4]";
  if (sm90 && sm90_combine_groups == 1) kernel += "[combine1]";  // (0, untagged: by shape)
  if (pdl) kernel += "[pdl]";
  if (tc && !sm90 &&
      (tc_stages || tc_blocks_per_sm || tc_rows_per_warp || tc_fast_io || tc_kernel || tc_cluster_merge || tc_fused_combine))
    kernel += std::string("[") + (tc_kernel == 1 ? "rowtile," : "") + (tc_cluster_merge ? "cluster," : "") +
              (tc_fused_combine ? "fused-combine," : "") + "stages" +
              std::to_string(tc_stages ? tc_stages : 3) +
              ",bpsm" + (tc_blocks_per_sm ? std::to_string(tc_blocks_per_sm) : std::string("default")) + ",rows" +
              std::to_string(tc_rows_per_warp ? tc_rows_per_warp : 16) + (tc_fast_io >= 0 ? ",fastio" : "") + "]";
  b.Add(kernel, label, us, bytes, flops, false, note + plan_note);
  // DS_BENCH_MLA_ANCHOR_METHOD=1 (a measurement, session 41): ANCHORS.md's FlashMLA figures are "CUDA
  // events, median of 50", from a machine whose same-run ceilings were copy 4.22 TB/s and bf16 GEMM
  // 766 TFLOP/s (ours: ~3.9 and ~680). 50 launches take ~7-35 ms at these shapes, short of where the
  // 700 W cap settles, while TimeUs above times ~150 ms of back-to-back graphs (session 41 run 2:
  // sustained loops hold 1.5-1.6 GHz at 128 heads). So the sm90 cases are also timed that way: 1 s
  // idle, 3 warm-up launches, then 50 launches each between its own two events; the median, and the
  // NVML SM clock sampled every 2 ms meanwhile. A separate record ("[anchor-method]") and table.
  if (const char* e = std::getenv("DS_BENCH_MLA_ANCHOR_METHOD");
      sm90 && e != nullptr && std::string(e) == "1" && label.rfind("warm-up", 0) != 0) {
    double mhz = 0;
    const double am = AnchorMethodUs(b, [&](int i) {
      MlaDecodeParams pi = p;
      pi.block_table = tables[i % nsets]->as<int32_t>();
      MlaDecodeAttention(pi);
    }, &mhz);
    char extra[160];
    std::snprintf(extra, sizeof extra, "; 1 s idle, median of 50 single launches (ANCHORS.md's method), SM %.0f MHz mean (NVML)",
                  mhz);
    b.Add(kernel + "[anchor-method]", label, am, bytes, flops, false, note + plan_note + extra);
    MlaResults().anchor_method.push_back({label, kernel, am, us, mhz});
  }
  // DS_BENCH_MLA_CTA_TIMES=1 (variants 10, 12, 13, 15, 16; a measurement, session 37): PrintCtaTimes.
  if (const char* e = std::getenv("DS_BENCH_MLA_CTA_TIMES");
      sm90 && (sm90_variant == 10 || sm90_variant >= 12) && e && std::string(e) == "1") {
    MlaDecodeParams pt = p;
    pt.block_table = tables[0]->as<int32_t>();
    // The grid: row blocks x (work items or sequences x splits), splits of >= 64 keys either way.
    PrintCtaTimes(b, pt, (qlen * H + 63) / 64 * S * std::max<int64_t>(1, (max_ctx + 63) / 64), tagged);
  }
  // DS_BENCH_MLA_TIMELINE=1 (a measurement): PrintTimeline, variant 11 (two warpgroups, a tile pair
  // an iteration) or 12, 13, 15, 16 (three; the ring's timeline instantiation runs 16's schedule for
  // 16, 15's for 15, 13's otherwise).
  if (const char* e = std::getenv("DS_BENCH_MLA_TIMELINE");
      sm90 && (sm90_variant == 11 || sm90_variant >= 12) && e && std::string(e) == "1") {
    PrintTimeline(b, p, tables[0]->as<int32_t>(), tagged, sm90_variant == 11 ? 2 : 3);
  }
  return us;
}

std::vector<int32_t> Uniform(int batch, int ctx) { return std::vector<int32_t>(batch, ctx); }
std::vector<int32_t> HalfLongHalfShort(int batch, int lo, int hi) {
  std::vector<int32_t> v(batch);
  for (int i = 0; i < batch; ++i) v[i] = i % 2 ? lo : hi;
  return v;
}

struct Anchor { int H, batch, ctx, qlen; bool mixed; double flashmla_us; const char* name; };
// FlashMLA on the project's H200 (shared/docs/ANCHORS.md, 2026-11-29).
const Anchor kAnchors[] = {
    {128, 128, 4096, 1, false, 244.8, "h128 b128 4K"},     {128, 64, 4096, 1, false, 134.9, "h128 b64 4K"},
    {128, 128, 4096, 2, false, 453.9, "h128 b128 4K q2"},  {16, 64, 4096, 1, false, 106.1, "h16 b64 4K"},
    {16, 128, 8192, 1, false, 295.0, "h16 b128 8K"},       {128, 64, 0, 1, true, 464.5, "h128 b64 half32K+half512"},
    {16, 64, 0, 1, true, 313.2, "h16 b64 half32K+half512"}, {128, 1, 32768, 1, false, 65.2, "h128 b1 32K"},
};


void MlaDecodeAnchors(Bench& b) {
  for (const auto& a : kAnchors) {
    if (b.OutOfTime()) { b.skipped.push_back(std::string("mla_decode_tc ") + a.name); continue; }
    const auto ctx = a.mixed ? HalfLongHalfShort(a.batch, 512, 32768) : Uniform(a.batch, a.ctx);
    const double us = MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name,
                                    "FlashMLA " + std::to_string(a.flashmla_us).substr(0, 5) + " us");
    // Before: the row-tile kernel in run 1's configuration (the default until this change).
    const double before = MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "run-1 configuration (before)", 3, 2, 16, -1, 1);
    MlaResults().anchors.push_back({a.name, a.flashmla_us, us, before});
    if (a.H * a.qlen <= 16) {  // the alternatives for 16 rows: row-tile kernel at its best run-2 knobs, ws chunk sizing
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "row-tile, best of run 2", 2, 2, 16, 1, 1);
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "warp-split, chunks for 2 blocks/SM", 0, 2, 0, 0, 0);
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "warp-split, chunks for 4 blocks/SM", 0, 4, 0, 0, 0);
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "warp-split, 3 pairs x 3 stages, 1 block/SM", 3, 0, 0, 0, 0);
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "warp-split, cluster merge (2-8 splits)", 0, 0, 0, 0, 0, 1);
      // tc_fused_combine (opt-in): the last block of each sequence merges its splits, no combine launch.
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "warp-split, fused combine", 0, 0, 0, 0, 0, 0, false, 0, 1);
    } else {  // 128 heads: the chunk sizing of run 1 (2 blocks/SM) with the new default fast io
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "bpsm 2 (run-2 tune winner was bpsm 1)", 3, 2, 16, 1, 0);
    }
    if (a.mixed) {
      // Prediction from the total context: a uniform batch of the same size and total.
      const double uni = MlaDecodeCase(b, a.H, Uniform(a.batch, (512 + 32768) / 2), 1, true,
                                       std::string("h") + std::to_string(a.H) + " b64 16640 (uniform, same total)");
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s: mixed %.1f us vs uniform same-total %.1f us -> %.3fx (need <= 1.1x)", a.name,
                    us, uni, us / uni);
      MlaResults().mixed_checks.push_back(buf);
      std::printf("mixed check: %s\n", buf);
    }
  }
  // The CUDA-core kernel (the reference/fallback) at two anchor shapes, for the record.
  if (!b.OutOfTime()) MlaDecodeCase(b, 128, Uniform(64, 4096), 1, false, "h128 b64 4K", "old kernel");
  if (!b.OutOfTime()) MlaDecodeCase(b, 16, Uniform(64, 4096), 1, false, "h16 b64 4K", "old kernel");
}

// The tensor-core kernel's tuning knobs at the anchor shapes (the defaults are measured above).
// The sm_90a wgmma kernel (mla_decode_sm90.cu, the runner's default since session 4) and its A/B
// variants (MlaDecodeParams::sm90_variant) at the anchors they apply to (>= 64 query rows per
// sequence: 128 heads), beside the default tensor-core path timed in the same family.
// DS_BENCH_SM90_VARIANTS=<comma-separated numbers> (set by the caller, e.g. around
// scripts/gpu_e2e.sh E2E_KERNELS=1) picks the variants timed; default "0,10,11,12,13,15". Variants not
// timed are "-" in the table.
void MlaDecodeSm90Anchors(Bench& b) {
  const char* env = std::getenv("DS_BENCH_SM90_VARIANTS");
  const std::string pick = "," + std::string(env != nullptr && *env != '\0' ? env : "0,10,11,12,13,15") + ",";
  // The first timed case of a run reads ~5-10% slow (session 16 runs 1-5: clocks ramping); one
  // warm-up case first, labelled as such.
  if (!b.OutOfTime())
    MlaDecodeCase(b, 128, Uniform(128, 4096), 1, true, "warm-up h128 b128 4K", "warm-up (discard)", 0, 0, 0, 0, 0, 0,
                  true, 0);
  {  // a pick that names no live variant (e.g. the old digit form "0489") times only the 16-head
     // rows: say so
    bool any = false;
    for (int v = 0; v < kSm90Variants; ++v)
      any = any || (pick.find("," + std::to_string(v) + ",") != std::string::npos &&
                    std::string(kSm90VariantTags[v]) != "[removed]");
    if (!any)
      std::fprintf(stderr, "bench kernels: DS_BENCH_SM90_VARIANTS=%s names no live variant (comma-separated numbers: "
                   "0,1,2,4,8,9,10,11,12,13,15,16)\n", env ? env : "");
  }
  // DS_BENCH_SM90_BALANCED=<comma-separated variants> (default "10,13,15"; "none"): those variants
  // again with the balanced work list (MlaDecodeParams::sm90_work), after the plain runs (before
  // them with DS_BENCH_SM90_BALANCED_FIRST=1, an order check), as kernel "...[balanced]".
  const char* be = std::getenv("DS_BENCH_SM90_BALANCED");
  const std::string bal = "," + std::string(be != nullptr && *be != '\0' ? be : "10,13,15") + ",";
  const char* bf = std::getenv("DS_BENCH_SM90_BALANCED_FIRST");
  const bool balanced_first = bf != nullptr && std::string(bf) == "1";
  // DS_BENCH_MLA_ANCHOR=<text>: only the anchors whose name contains it (e.g. "b1 32K", for a
  // profiler run of one shape).
  const char* only_anchor = std::getenv("DS_BENCH_MLA_ANCHOR");
  // DS_BENCH_SM90_QBF16=<comma-separated variants> (default "15"; "none"): those variants again with
  // a bf16 q (MlaDecodeParams::q_bf16, FlashMLA's input form; the same bits), plain and, for those
  // also in the balanced list, balanced: kernel "...[q:bf16]", table columns vNq / vNbq.
  const char* qe = std::getenv("DS_BENCH_SM90_QBF16");
  const std::string qbf = "," + std::string(qe != nullptr && *qe != '\0' ? qe : "15") + ",";
  // A/B lists (session 37), each comma-separated, the first value the table's:
  // DS_BENCH_SM90_L2HINTS (MlaDecodeParams::sm90_kv_l2_hint, default "0"),
  // DS_BENCH_SM90_COMBINE_GROUPS (sm90_combine_groups, default "0"), DS_BENCH_MLA_PDL ("0" / "1"
  // / "0,1": the decode and its combine launched with programmatic dependent launch).
  const auto int_list = [](const char* name, int dflt) {
    std::vector<int> out = EnvIntList(name);
    if (out.empty()) out.push_back(dflt);
    return out;
  };
  const std::vector<int> l2_hints = int_list("DS_BENCH_SM90_L2HINTS", 0);
  const std::vector<int> combine_groups = int_list("DS_BENCH_SM90_COMBINE_GROUPS", 0);
  const std::vector<int> pdls = int_list("DS_BENCH_MLA_PDL", 0);
  for (const auto& a : kAnchors) {
    if (only_anchor != nullptr && *only_anchor != '\0' && std::string(a.name).find(only_anchor) == std::string::npos) continue;
    if (b.OutOfTime()) { b.skipped.push_back(std::string("mla_decode_sm90 ") + a.name); continue; }
    const auto ctx = a.mixed ? HalfLongHalfShort(a.batch, 512, 32768) : Uniform(a.batch, a.ctx);
    const std::string note = "FlashMLA " + std::to_string(a.flashmla_us).substr(0, 5) + " us";
    Sm90Result r;
    r.name = a.name;
    r.flashmla_us = a.flashmla_us;
    for (auto& set : r.us) set.assign(kSm90Variants, -1.0);
    // 16 heads: the sm_90a kernels with a partial 64-row tile (MlaDecodeParams::sm90_min_rows),
    // beside the default tensor-core path, timed in the same family.
    const bool partial = a.H * a.qlen < 64;
    // The variants a comma list names, each into us[v]; balanced: with the work list.
    // Each variant once per (L2 hint, combine groups, PDL) of the A/B lists, interleaved; the
    // table keeps the first setting's time (the others are kernels.json records with their tags).
    const auto run_variants = [&](const std::string& list, bool balanced, std::vector<double>& us, bool q16 = false) {
      for (int v = 0; v < kSm90Variants; ++v) {
        if (list.find("," + std::to_string(v) + ",") == std::string::npos || std::string(kSm90VariantTags[v]) == "[removed]")
          continue;
        bool first = true;
        for (const int pdl : pdls)
          for (const int hint : l2_hints)
            for (const int groups : combine_groups) {
              const double t = MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name,
                                             (v == 0 ? note : note + ", variant " + std::to_string(v)) +
                                                 (partial ? ", partial 64-row tile" : ""),
                                             0, 0, 0, 0, 0, 0, true, v, 0, partial ? a.H * a.qlen : 0, balanced, hint,
                                             groups, pdl != 0, q16);
              if (first) us[v] = t;
              first = false;
            }
      }
    };
    if (balanced_first) run_variants(bal, true, r.us[kSm90Balanced]);
    run_variants(pick, false, r.us[kSm90Plain]);
    if (!balanced_first) run_variants(bal, true, r.us[kSm90Balanced]);
    run_variants(qbf, false, r.us[kSm90QBf16], true);
    {  // the bf16-q variants also in the balanced list
      std::string both = ",";
      for (int v = 0; v < kSm90Variants; ++v) {
        std::string t = ",";
        t += std::to_string(v);
        t += ',';
        if (qbf.find(t) != std::string::npos && bal.find(t) != std::string::npos) both += std::to_string(v) + ",";
      }
      run_variants(both, true, r.us[kSm90BalancedQBf16], true);
    }
    r.tc_us = MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "default tc path (same run as sm90)");
    MlaResults().sm90.push_back(r);
  }
}

void MlaDecodeTune(Bench& b) {
  // {stages, blocks per SM, rows per warp, fast io}; rows 32 only changes 64-row blocks (128 heads).
  const int knobs[][4] = {{3, 2, 16, 1}, {3, 2, 32, 1}, {2, 2, 32, 1}, {2, 2, 16, 1}, {2, 4, 16, 1},
                          {3, 4, 16, 1}, {3, 1, 16, 1}, {3, 2, 32, 0}, {2, 4, 16, 0}};
  for (const auto& a : kAnchors)
    for (const auto& k : knobs) {
      if (k[2] == 32 && a.H * a.qlen <= 32) continue;
      const std::string name = std::string(a.name) + " stages" + std::to_string(k[0]) + " bpsm" + std::to_string(k[1]) +
                               " rows" + std::to_string(k[2]) + (k[3] ? " fastio" : "");
      if (b.OutOfTime()) { b.skipped.push_back("mla_decode_tc " + name); continue; }
      const auto ctx = a.mixed ? HalfLongHalfShort(a.batch, 512, 32768) : Uniform(a.batch, a.ctx);
      MlaDecodeCase(b, a.H, ctx, a.qlen, true, a.name, "", k[0], k[1], k[2], k[3] ? 1 : -1, 1);
    }
}

void MlaDecodeSweep(Bench& b) {
  const std::vector<int> batches = b.quick() ? std::vector<int>{1, 64} : std::vector<int>{1, 8, 32, 64, 128, 256};
  const std::vector<int> ctxs = b.quick() ? std::vector<int>{4096} : std::vector<int>{1024, 4096, 16384, 32768};
  for (int H : {16, 128})
    for (int bt : batches)
      for (int c : ctxs) {
        const std::string name = "h" + std::to_string(H) + " b" + std::to_string(bt) + " ctx" + std::to_string(c);
        if (b.OutOfTime()) { b.skipped.push_back("mla_decode_tc " + name); continue; }
        MlaDecodeCase(b, H, Uniform(bt, c), 1, true, name);
      }
}

// ---------------------------------------------------------------- MLA prefill
void MlaPrefillCase(Bench& b, int64_t T) {
  const int64_t H = 128, dn = 128, dr = 64, dv = 128;
  Buf q(T * H * (dn + dr) * 4), kn(T * H * dn * 4), kr(T * dr * 4), v(T * H * dv * 4), out(T * H * dv * 2);
  FillUniformF32(q.as<float>(), T * H * (dn + dr), b.NextSeed(), -1, 1, b.st());
  FillUniformF32(kn.as<float>(), T * H * dn, b.NextSeed(), -1, 1, b.st());
  FillUniformF32(kr.as<float>(), T * dr, b.NextSeed(), -1, 1, b.st());
  FillUniformF32(v.as<float>(), T * H * dv, b.NextSeed(), -1, 1, b.st());
  auto qs = Upload(std::vector<int32_t>{0, static_cast<int32_t>(T)});
  auto pos0 = Upload(std::vector<int32_t>{0});
  MlaPrefillParams p{};
  p.q = q.as<float>(); p.q_tok_stride = H * (dn + dr); p.q_head_stride = dn + dr;
  p.k_nope = kn.as<float>(); p.kn_tok_stride = H * dn; p.kn_head_stride = dn;
  p.k_rope = kr.as<float>(); p.kr_tok_stride = dr; p.kr_head_stride = 0;
  p.v = v.as<float>(); p.v_tok_stride = H * dv; p.v_head_stride = dv;
  p.out = out.as<void>(); p.o_tok_stride = H * dv; p.o_head_stride = dv; p.out_type = DTypeOut::kBF16;
  p.num_seqs = 1; p.heads = H; p.d_nope = dn; p.d_rope = dr; p.dv = dv;
  p.q_start = qs->as<int32_t>(); p.k_start = qs->as<int32_t>(); p.q_pos0 = pos0->as<int32_t>();
  p.max_q_len = T; p.softmax_scale = 0.0722f; p.stream = b.st();
  const double us = b.TimeUs([&](int) { MlaPrefillAttention(p); }, 1, 3, 300);
  const double flops = 2.0 * H * (double(T) * (T + 1) / 2) * (dn + dr + dv);
  const double bytes = double(T) * H * (dn + dr + dn + dv) * 4 + double(T) * dr * 4 + double(T) * H * dv * 2;
  b.Add("mla_prefill_fp32cuda", "h128 T" + std::to_string(T) + " causal", us, bytes, flops, false,
        "CUDA-core fp32 tiles (the fallback kernel; tensor cores: mla_prefill_tc)");
}

constexpr int kPrefillSm90 = 90;          // MlaPrefillTcCase's variant for the sm_90a kernel
constexpr int kPrefillSm90PingPong = 91;  // the same with sm90_pingpong
void MlaPrefillTcCase(Bench& b, int64_t H, int64_t nseq, int64_t nq, int64_t nk, int variant);

// MLA prefill over `nseq` fresh prompts of `len` tokens each (one launch, the runner's
// layouts: kv_b_proj output [T, H, 128 nope | 128 v], k_rope inside the [T, 576] latent rows),
// fp32 CUDA-core kernel (block_q 0) or a tensor-core kernel (block_q 64 / 128: mma.sync,
// kPrefillSm90 / kPrefillSm90PingPong: sm_90a; MlaPrefillTcCase). FLOPs count only the
// unmasked (causal) half: 2 x H x sum_s len(len+1)/2 x (192 + 128).
void MlaPrefillBatchCase(Bench& b, int64_t H, int64_t nseq, int64_t len, int block_q) {
  if (block_q != 0) {
    MlaPrefillTcCase(b, H, nseq, len, len, block_q);
    return;
  }
  const int64_t dn = 128, dr = 64, dv = 128, T = nseq * len;
  std::vector<int32_t> qs{0}, pos0(nseq, 0);
  for (int64_t s = 0; s < nseq; ++s) qs.push_back(static_cast<int32_t>((s + 1) * len));
  auto dqs = Upload(qs);
  auto dpos0 = Upload(pos0);
  Buf q(T * H * (dn + dr) * 4), out(T * H * dv * 4);
  FillUniformF32(q.as<float>(), T * H * (dn + dr), b.NextSeed(), -1, 1, b.st());
  const std::string shape = "h" + std::to_string(H) + " " + std::to_string(nseq) + "x" + std::to_string(len) + " causal";
  const double flops = 2.0 * H * (double(nseq) * len * (len + 1) / 2) * (dn + dr + dv);
  {
    Buf kv(T * H * (dn + dv) * 4), kr(T * dr * 4);
    FillUniformF32(kv.as<float>(), T * H * (dn + dv), b.NextSeed(), -1, 1, b.st());
    FillUniformF32(kr.as<float>(), T * dr, b.NextSeed(), -1, 1, b.st());
    MlaPrefillParams p{};
    p.q = q.as<float>(); p.q_tok_stride = H * (dn + dr); p.q_head_stride = dn + dr;
    p.k_nope = kv.as<float>(); p.kn_tok_stride = H * (dn + dv); p.kn_head_stride = dn + dv;
    p.k_rope = kr.as<float>(); p.kr_tok_stride = dr; p.kr_head_stride = 0;
    p.v = kv.as<float>() + dn; p.v_tok_stride = H * (dn + dv); p.v_head_stride = dn + dv;
    p.out = out.as<void>(); p.o_tok_stride = H * dv; p.o_head_stride = dv; p.out_type = DTypeOut::kF32;
    p.num_seqs = nseq; p.heads = H; p.d_nope = dn; p.d_rope = dr; p.dv = dv;
    p.q_start = dqs->as<int32_t>(); p.k_start = dqs->as<int32_t>(); p.q_pos0 = dpos0->as<int32_t>();
    p.max_q_len = len; p.softmax_scale = 0.0722f; p.stream = b.st();
    const double us = b.TimeUs([&](int) { MlaPrefillAttention(p); }, 1, 3, 300);
    b.Add("mla_prefill_fp32cuda", shape, us, 0, flops, false, "old kernel: CUDA-core fp32, fp32 K/V");
  }
}

// Tensor-core MLA prefill over `nseq` sequences of `nq` new tokens each after nk - nq cached
// ones (nk == nq: fresh prompts), one launch, the runner's layouts (kv_b_proj output [Tk, H,
// 128 nope | 128 v] bf16, k_rope inside the [Tk, 576] bf16 latent rows, q [Tq, H, 192] fp32,
// fp32 out): the mma.sync kernel (variant 64 / 128 = block_q) or the sm_90a kernel (variant
// kPrefillSm90, or kPrefillSm90PingPong for its ping-pong variant). FLOPs count only the
// visible keys: 2 x H x nseq x (nq (nk - nq) + nq (nq + 1) / 2) x (192 + 128).
void MlaPrefillTcCase(Bench& b, int64_t H, int64_t nseq, int64_t nq, int64_t nk, int variant) {
  const int64_t dn = 128, dr = 64, dv = 128, L = 576, Tq = nseq * nq, Tk = nseq * nk;
  std::vector<int32_t> qs{0}, ks{0}, pos0(nseq, static_cast<int32_t>(nk - nq));
  for (int64_t s = 0; s < nseq; ++s) {
    qs.push_back(static_cast<int32_t>((s + 1) * nq));
    ks.push_back(static_cast<int32_t>((s + 1) * nk));
  }
  std::string shape = "h" + std::to_string(H) + " " + std::to_string(nseq) + "x" + std::to_string(nq);
  if (nk != nq) shape += " after " + std::to_string(nk - nq);
  shape += " causal";
  const double visible = double(nseq) * (double(nq) * (nk - nq) + double(nq) * (nq + 1) / 2);
  const double flops = 2.0 * H * visible * (dn + dr + dv);
  auto dqs = Upload(qs);
  auto dks = Upload(ks);
  auto dpos0 = Upload(pos0);
  Buf q(Tq * H * (dn + dr) * 4), out(Tq * H * dv * 4), kv(Tk * H * (dn + dv) * 2), lat(Tk * L * 2);
  FillUniformF32(q.as<float>(), Tq * H * (dn + dr), b.NextSeed(), -1, 1, b.st());
  FillUniformBf16(kv.as<__nv_bfloat16>(), Tk * H * (dn + dv), b.NextSeed(), -1, 1, b.st());
  FillUniformBf16(lat.as<__nv_bfloat16>(), Tk * L, b.NextSeed(), -1, 1, b.st());
  MlaPrefillTcParams p{};
  p.q = q.as<float>(); p.q_tok_stride = H * (dn + dr); p.q_head_stride = dn + dr;
  p.k_nope = kv.as<__nv_bfloat16>(); p.kn_tok_stride = H * (dn + dv); p.kn_head_stride = dn + dv;
  p.k_rope = lat.as<__nv_bfloat16>() + 512; p.kr_tok_stride = L; p.kr_head_stride = 0;
  p.v = kv.as<__nv_bfloat16>() + dn; p.v_tok_stride = H * (dn + dv); p.v_head_stride = dn + dv;
  p.out = out.as<void>(); p.o_tok_stride = H * dv; p.o_head_stride = dv; p.out_type = DTypeOut::kF32;
  p.num_seqs = nseq; p.heads = H; p.d_nope = dn; p.d_rope = dr; p.dv = dv;
  p.q_start = dqs->as<int32_t>(); p.k_start = dks->as<int32_t>(); p.q_pos0 = dpos0->as<int32_t>();
  p.max_q_len = nq; p.softmax_scale = 0.0722f; p.stream = b.st(); p.total_k = Tk;
  if (variant == kPrefillSm90 || variant == kPrefillSm90PingPong) {
    const bool pingpong = variant == kPrefillSm90PingPong;
    const std::string kernel = pingpong ? "mla_prefill_sm90[pingpong]" : "mla_prefill_sm90";
    p.sm90_pingpong = pingpong;
    // DS_BENCH_SKIP_SM90_PREFILL=1 (set by the caller, e.g. around scripts/gpu_e2e.sh
    // E2E_KERNELS=1, when the kernel's op tests failed): skip it, so a crashing kernel cannot take
    // the rest of the bench down.
    const char* skip = std::getenv("DS_BENCH_SKIP_SM90_PREFILL");
    if (skip && std::string(skip) == "1") {
      b.skipped.push_back(kernel + " " + shape + " (DS_BENCH_SKIP_SM90_PREFILL)");
      return;
    }
    if (!MlaPrefillSm90Supported(p)) {
      std::printf("%-28s %-44s not supported here (needs an sm_90 device)\n", kernel.c_str(), shape.c_str());
      b.skipped.push_back(kernel + " " + shape + " (unsupported)");
      return;
    }
    const double us = b.TimeUs([&](int) { MlaPrefillAttentionSm90(p); }, 1, 5, 300);
    b.Add(kernel, shape, us, 0, flops, false,
          std::string("sm_90a: TMA + wgmma, producer/consumer warpgroups") + (pingpong ? ", ping-pong" : "") +
              "; bf16 q/k/v/P, fp32 accumulate, fp32 out");
    return;
  }
  p.block_q = variant;
  const double us = b.TimeUs([&](int) { MlaPrefillAttentionTc(p); }, 1, 5, 300);
  b.Add("mla_prefill_tc[bq" + std::to_string(variant) + "]", shape, us, 0, flops, false,
        "tensor cores: bf16 q/k/v/P, fp32 accumulate, fp32 out");
}

// Old vs tensor-core (mma.sync bq64 / bq128) vs sm_90a prefill kernel at 1 x 4K, 4 x 1K and
// 16 x 4K tokens, 16 (V2-Lite) and 128 (V3) heads. The old kernel is skipped at 128 heads x
// 16 x 4K (~1.5 s a launch). Variant 0 = old, 64 / 128 = mma.sync block_q, kPrefillSm90 (90),
// kPrefillSm90PingPong (91).
void MlaPrefillCompare(Bench& b) {
  struct Shape { int64_t nseq, len; };
  for (int64_t H : {16, 128})
    for (Shape sh : {Shape{1, 4096}, Shape{4, 1024}, Shape{16, 4096}})
      for (int bq : {0, 64, 128, kPrefillSm90, kPrefillSm90PingPong}) {
        const std::string name = "mla_prefill h" + std::to_string(H) + " " + std::to_string(sh.nseq) + "x" +
                                 std::to_string(sh.len) + " variant " + std::to_string(bq);
        if (b.OutOfTime() || (bq == 0 && H == 128 && sh.nseq == 16)) { b.skipped.push_back(name); continue; }
        MlaPrefillBatchCase(b, H, sh.nseq, sh.len, bq);
      }
}

// Long prefills on the tensor-core kernels (mma.sync bq128 vs sm_90a, plain and ping-pong): 128 heads x one 8K /
// 16K / 32K-token prompt, and issue 7's trace case at 16 heads: an 8192-token chunk after
// 57344 cached tokens (8K queries x 64K keys). --quick: the 8K prompt and the trace case.
void MlaPrefillLong(Bench& b) {
  struct Shape { int64_t H, nq, nk; };
  std::vector<Shape> shapes{{128, 8192, 8192}, {16, 8192, 65536}};
  if (!b.quick()) {
    shapes.push_back({128, 16384, 16384});
    shapes.push_back({128, 32768, 32768});
  }
  for (const Shape& sh : shapes)
    for (int v : {128, kPrefillSm90, kPrefillSm90PingPong}) {
      if (b.OutOfTime()) {
        b.skipped.push_back("mla_prefill long h" + std::to_string(sh.H) + " " + std::to_string(sh.nq) + "x" +
                            std::to_string(sh.nk) + " variant " + std::to_string(v));
        continue;
      }
      MlaPrefillTcCase(b, sh.H, 1, sh.nq, sh.nk, v);
    }
}

}  // namespace ds::bench_kernels
#endif  // DS_WITH_CUDA
