// Host-only launch-planning rules of the CUDA backend, free of CUDA headers so that the CPU
// build's tests check them (tests/backend/cuda_host/test_host_plans.cpp): the decode-graph
// buckets and block-table widths, the FP8 dense dispatch and split-K rule of the skinny GEMM,
// and the split-KV plan of the sm_90a MLA decode kernel. The launchers call these; the
// measurements behind each rule are cited where the launcher uses it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <vector>

namespace ds::cuda {

// ---- decode CUDA graphs (cuda_runner.cpp)
// Sequence-count buckets a decode step is padded to.
inline constexpr int kGraphBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256};
inline constexpr int kMaxGraphBucket = kGraphBuckets[std::size(kGraphBuckets) - 1];
// The bucket of a step with `seqs` sequences (1..kMaxGraphBucket); 0 above the largest.
inline int GraphBucket(int seqs) {
  for (int c : kGraphBuckets)
    if (c >= seqs) return c;
  return 0;
}
inline constexpr int kMinGraphBlocks = 4;  // smallest captured block-table width (256 keys)
// The block-table width of the decode graph that serves a batch whose longest sequence needs
// `need` blocks (1 <= need <= 2^29): the smallest power-of-two multiple of kMinGraphBlocks
// that holds it.
inline int GraphCapBlocks(int need) {
  int cap = kMinGraphBlocks;
  while (cap < need) cap *= 2;
  return cap;
}

// ---- skinny GEMM (skinny_gemm.h / skinny_gemm.cu)
// FP8 dense: the skinny kernel re-reads the weights once per 16 rows (mostly from L2), the
// big-tile GroupedGemm streams them once per 64 rows but with few tiles. Measured crossover
// (V3 projections, splitk_2026-11-29.md): skinny faster for every projection at M <= 32; at
// M = 64 for N <= 8192 (q_a, kv_a, o_proj, dense down, shared gate_up/down) but not for q_b
// (66.7 vs 60.9 us), kv_b (33.3 vs 22.9) and dense gate_up (519 vs 413); at M = 128 only for
// N <= 4096 (q_a, kv_a, shared gate_up). Thresholds at powers of 2, as the graph buckets.
inline constexpr int64_t kSkinnyDenseMaxRows = 32;
inline constexpr int64_t kSkinnyDenseMidRows = 64, kSkinnyDenseMidMaxN = 8192;
inline constexpr int64_t kSkinnyDenseWideRows = 128, kSkinnyDenseWideMaxN = 4096;
inline bool SkinnyDenseFp8(int64_t M, int64_t N) {
  return M <= kSkinnyDenseMaxRows || (M <= kSkinnyDenseMidRows && N <= kSkinnyDenseMidMaxN) ||
         (M <= kSkinnyDenseWideRows && N <= kSkinnyDenseWideMaxN);
}

// Whether the skinny GEMM splits K on its own (SkinnyGemmParams::splits == 0), from the H200
// sweep (bench/results/splitk_2026-11-29.md; FP8 dense only: bf16 and the batched form were not
// measured split-vs-unsplit, so they split only when asked). The rows enter through their
// power-of-2 class, as the graph buckets do (a decode batch and its padded bucket get the same
// plan, so a row's sum order is the same in a graph and eagerly). Splitting wins at <= 8 rows
// whenever the 32-row tiles are fewer than 4 per SM and K >= 4096 (q_a, kv_a, o_proj, dense
// down, shared gate_up; shared down, K = 2048: 8.7 us split vs 8.2 unsplit); with more rows the
// partial traffic and the last block's reduction cost more, and it still wins only for
// K >= 16384 (o_proj, dense down; <= 128 rows), N <= 1024 (kv_a; <= 64 rows) and N <= 2048 at
// <= 16 rows (q_a).
inline bool SkinnySplitKWins(bool fp8, bool dense, int64_t N, int64_t K, int64_t rows, int64_t tiles32,
                             int64_t sms) {
  if (!fp8 || !dense || tiles32 >= 4 * sms || K < 4096) return false;
  int64_t rc = 1;
  while (rc < rows) rc *= 2;
  if (rc <= 8) return true;
  if (rc <= 16 && N <= 2048) return true;
  if (rc <= 64 && N <= 1024) return true;
  return rc <= 128 && K >= 16384;
}

// ---- FP8 GEMM at M <= 64, swap AB (fp8_gemm_skinny_sm90.h)
// The measured-best form per shape (session 15 runs 4 and 7, `bench kernels --only fp8_skinny`,
// the nine V3 projections at M = 1..64): 64-row ping-pong tiles everywhere (data-parallel), with K
// split over the 64-row tiles' warpgroups where there are too few tiles for the SMs:
// - <= 16 tiles (kv_a: 9): ksplit 8 (0.16 of copy against 0.09 unsplit);
// - <= 32 tiles (q_a: 24): ksplit 4 (0.35 against 0.25);
// - <= 64 tiles at more than 32 rows (shared gate_up at M = 64): ksplit 2 (0.55 against 0.47);
//   at <= 32 rows unsplit is better (0.65 against 0.60).
// Only for K >= 4096, and only where K / 128 divides by the split (else the next smaller power
// of two that does).
inline int Fp8SkinnyAutoKsplit(int64_t M, int64_t N, int64_t K) {
  const int64_t tiles = (N + 63) / 64, kb = K / 128;
  int want = 1;
  if (K >= 4096) {
    if (tiles <= 16) want = 8;
    else if (tiles <= 32) want = 4;
    else if (tiles <= 64 && M > 32) want = 2;
  }
  while (want > 1 && (kb % want != 0 || K % 128 != 0)) want /= 2;
  return want;
}

// ---- sm_90a MLA decode (mla_decode_sm90.cu)
inline constexpr int64_t kMlaDecodeSm90RowsPerCta = 64;    // query rows per CTA (one wgmma M tile)
inline constexpr int64_t kMlaDecodeSm90KeysPerTile = 64;   // keys per tile (one 64-token page)
inline constexpr int64_t kMlaDecodeSm90CtaOverhead = 192;  // per-CTA cost in key-equivalents (Q load, partial out)
struct MlaDecodeSm90Plan {
  int64_t nrb = 1;         // 64-row blocks per sequence
  int64_t chunk = 0;       // keys per split (a multiple of 64, >= kv_chunk)
  int64_t max_splits = 1;  // splits of the longest sequence: ceil(max_context / chunk)
};
// Split-KV by work: the chunk (a multiple of 64, >= kv_chunk) minimising the estimated time,
// ceil(CTAs / SMs) waves (one CTA per SM) of (chunk + overhead) key-equivalents. CTAs: exact
// for a uniform batch (total = S x max, as in a graph bucket), else each sequence's last split
// counted half full on average (as the tc path's warp-split plan). Inputs are the host hints
// (max_q: query rows per sequence, max_context, total_context <= 0: S x max_context) and the
// SM count; max_splits <= max(1, ceil(max_context / kv_chunk)), the splits
// MlaDecodeWorkspaceFloats sizes for.
//
// capacity_hints (a decode graph's hints: max_context is the capacity of its block table,
// GraphCapBlocks x 64 keys, the next power of two of blocks above the longest sequence, so that
// sequence's real context lies in (max/2, max]; a uniform batch assumed): the chunk is chosen
// for that whole range instead of for max alone. For each candidate and each of the contexts
// max/2 + 64, 3 max / 4 and max, the time is estimated as max(longest CTA, all CTAs' work / SMs)
// (a split's work: its keys + the per-CTA overhead; empty splits do not exist at the real
// context), and the chunk whose worst ratio to the best chunk of each context is least wins.
// Why (session 7 run 6): for 64 sequences of 4.1K keys the capacity is 8K, the plan for 8K took
// 4K-key chunks, and at the real 4.1K half of the CTAs got 64 keys: the 16-head sm_90a decode ran
// slower in the model than in its benchmark (exact hints).
inline double MlaDecodeSm90RangeTime(int64_t c, int64_t ctx, int64_t rows, int64_t sms) {
  const int64_t splits = (ctx + c - 1) / c;
  const double work = static_cast<double>(rows) * static_cast<double>(ctx + splits * kMlaDecodeSm90CtaOverhead);
  const double longest = static_cast<double>(std::min(c, ctx) + kMlaDecodeSm90CtaOverhead);
  return std::max(longest, work / static_cast<double>(std::max<int64_t>(1, sms)));
}
inline MlaDecodeSm90Plan PlanMlaDecodeSm90(int64_t max_q, int64_t heads, int64_t num_seqs, int64_t max_context,
                                           int64_t total_context, int64_t kv_chunk, int64_t sms,
                                           bool capacity_hints = false) {
  constexpr int64_t kBM = kMlaDecodeSm90RowsPerCta, kBN = kMlaDecodeSm90KeysPerTile;
  MlaDecodeSm90Plan pl;
  pl.nrb = std::max<int64_t>(1, (max_q * heads + kBM - 1) / kBM);
  const int64_t max_ctx = std::max<int64_t>(1, max_context);
  const int64_t total = total_context > 0 ? total_context : num_seqs * max_ctx;
  const bool uniform = total >= num_seqs * max_ctx;
  const int64_t slots = std::max<int64_t>(1, sms);
  const int64_t c_min = (std::max<int64_t>(kv_chunk, kBN) + kBN - 1) / kBN * kBN;
  const int64_t c_max = std::max(c_min, (max_ctx + kBN - 1) / kBN * kBN);
  int64_t best = c_min;
  if (capacity_hints && uniform && max_ctx > 2 * kBN) {
    const int64_t rows = pl.nrb * num_seqs;  // CTAs per split column
    const int64_t ctxs[3] = {max_ctx / 2 + kBN, (3 * max_ctx) / 4, max_ctx};
    const int64_t step = kBN * std::max<int64_t>(1, (c_max - c_min) / (kBN * 256));  // <= ~256 candidates
    double best_of[3];
    for (int i = 0; i < 3; ++i) {
      best_of[i] = 0;
      for (int64_t c = c_min; c <= c_max; c += step) {
        const double t = MlaDecodeSm90RangeTime(c, ctxs[i], rows, slots);
        if (c == c_min || t < best_of[i]) best_of[i] = t;
      }
    }
    double best_regret = 0;
    for (int64_t c = c_min; c <= c_max; c += step) {
      double regret = 0;
      for (int i = 0; i < 3; ++i) regret = std::max(regret, MlaDecodeSm90RangeTime(c, ctxs[i], rows, slots) / best_of[i]);
      if (c == c_min || regret < best_regret) {
        best_regret = regret;
        best = c;
      }
    }
  } else {
    double best_cost = 0;
    for (int64_t c = c_min; c <= c_max; c += kBN) {
      const int64_t per_row_block = uniform ? num_seqs * ((max_ctx + c - 1) / c) : (total + c - 1) / c + num_seqs / 2;
      const int64_t ctas = pl.nrb * per_row_block;
      const double cost =
          static_cast<double>((ctas + slots - 1) / slots) * static_cast<double>(c + kMlaDecodeSm90CtaOverhead);
      if (c == c_min || cost < best_cost) {
        best_cost = cost;
        best = c;
      }
    }
  }
  pl.chunk = best;
  pl.max_splits = std::max<int64_t>(1, (max_context + pl.chunk - 1) / pl.chunk);
  return pl;
}


// ---- sm_90a MLA decode: a balanced work list (session 36; MlaDecodeParams::sm90_work)
// One CTA's work of a work-list launch: sequence s, split slot `split` (its partial's index in
// the workspace, < the sequence's split count) and keys [kbeg, kend).
struct MlaDecodeSm90WorkItem {
  int32_t s = 0, split = 0, kbeg = 0, kend = 0;
};
struct MlaDecodeSm90WorkList {
  std::vector<MlaDecodeSm90WorkItem> items;  // grid order: blockIdx.x / nrb (row blocks adjacent)
  std::vector<int32_t> splits;               // [num_seqs] split count of each sequence (>= 1)
  int64_t max_splits = 1;                    // the workspace's split stride
  double est_time = 0;                       // the chosen plan's simulated makespan, key-equivalents
};
// Makespan of CTAs of the given costs dispatched in order onto `slots` SMs, each CTA to the
// first free SM (the block scheduler's behaviour with one CTA per SM).
inline double MlaDecodeSm90Makespan(const std::vector<double>& costs, int64_t slots) {
  std::vector<double> free_at(static_cast<size_t>(std::max<int64_t>(1, slots)), 0.0);
  std::make_heap(free_at.begin(), free_at.end(), std::greater<double>());
  for (double c : costs) {
    std::pop_heap(free_at.begin(), free_at.end(), std::greater<double>());
    free_at.back() += c;
    std::push_heap(free_at.begin(), free_at.end(), std::greater<double>());
  }
  return *std::max_element(free_at.begin(), free_at.end());
}
// The extra cost of a split of a sequence cut in several (its fp32 partial written, then read by
// the combine kernel), in key-equivalents: session 36 run 2, 128 heads x 64 x 4K, two 2K splits a
// sequence took 185.5 us against 163.8 for one split writing directly (a 4,288 key-equivalent CTA),
// ~2,000 key-equivalents more for two CTAs a row block, about half per split.
inline constexpr int64_t kMlaDecodeSm90SplitCost = 1024;
// Split-KV by work when the host knows every sequence's context (`ctx`, num_seqs entries, each
// >= 0): the uniform-chunk plan above gives every sequence the same chunk, so a batch of mixed
// lengths leaves SMs idle at the end (half 32K + half 512: its simulated makespan 1.18x this
// plan's at 16 heads). Here each sequence gets its own split count, n = ceil(ctx / T) splits of
// equal 64-key multiples, for a target T = total keys / (SMs x waves / nrb) over waves = 1..12,
// T = the longest context (one split each) or T = the longest context / k, k = 2..16; the CTAs go out longest first (LPT) and the plan
// with the least simulated makespan (CTA cost: keys + kMlaDecodeSm90CtaOverhead, plus
// kMlaDecodeSm90SplitCost for a split of a sequence cut in several) wins. A one-split sequence's
// CTAs write its output directly and the combine skips it. (FlashMLA's get_mla_metadata balances by work too,
// with persistent CTAs that cross sequences; these CTAs stay one (sequence, split) each.)
// A sequence of 0 keys gets one empty split. Errors: none (empty ctx: an empty list).
// max_splits_cap (> 0): plans whose largest split count exceeds it are skipped (the caller's
// workspace: MlaDecodeWorkspaceFloats' splits for its kv_chunk, ceil(max_context / kv_chunk)); the
// one-split plan always fits.
inline MlaDecodeSm90WorkList PlanMlaDecodeSm90WorkList(const std::vector<int32_t>& ctx, int64_t nrb, int64_t sms,
                                                       int64_t max_splits_cap = 0) {
  constexpr int64_t kBN = kMlaDecodeSm90KeysPerTile;
  MlaDecodeSm90WorkList best;
  int64_t total = 0;
  for (int32_t c : ctx) total += std::max<int32_t>(c, 0);
  if (ctx.empty()) return best;
  const int64_t slots = std::max<int64_t>(1, sms);
  bool have = false;
  int64_t max_ctx = 0;
  for (int32_t c : ctx) max_ctx = std::max<int64_t>(max_ctx, c);
  // The split-length targets: total keys / (SMs x waves / nrb) for waves 1..12, the longest context (one
  // split each), and (session 41) the longest context in k = 2..16 equal parts, which the waves' targets
  // can miss: on the 128-head mixed anchor (32 x 32K + 32 x 512) the waves give 8 splits of 4K a long
  // sequence (4 CTAs an SM), while 2 splits of 16K (one CTA an SM, the short sequences on the other 4
  // SMs) fill the same keys an SM with a quarter of the CTAs (their Q prologues) and of the partials
  // the combine reads.
  std::vector<int64_t> targets;
  for (int64_t waves = 0; waves <= 12; ++waves) {  // waves 0: one split a sequence
    const double per = static_cast<double>(slots) * static_cast<double>(std::max<int64_t>(1, waves)) /
                       static_cast<double>(std::max<int64_t>(1, nrb));
    targets.push_back(waves == 0 ? std::max<int64_t>(kBN, max_ctx)
                                 : std::max<int64_t>(kBN, (static_cast<int64_t>(std::ceil(static_cast<double>(total) / per)) +
                                                           kBN - 1) / kBN * kBN));
  }
  for (int64_t k = 2; k <= 16; ++k) targets.push_back(std::max<int64_t>(kBN, ((max_ctx + k - 1) / k + kBN - 1) / kBN * kBN));
  for (const int64_t target : targets) {
    MlaDecodeSm90WorkList wl;
    wl.splits.resize(ctx.size());
    for (size_t s = 0; s < ctx.size(); ++s) {
      const int64_t c = std::max<int32_t>(ctx[s], 0);
      const int64_t n = std::max<int64_t>(1, (c + target - 1) / target);
      const int64_t len = std::max<int64_t>(kBN, ((c + n - 1) / n + kBN - 1) / kBN * kBN);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t kb = std::min(c, i * len), ke = std::min(c, kb + len);
        wl.items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(i), static_cast<int32_t>(kb), static_cast<int32_t>(ke)});
      }
      wl.splits[s] = static_cast<int32_t>(n);
      wl.max_splits = std::max(wl.max_splits, n);
    }
    if (max_splits_cap > 0 && wl.max_splits > max_splits_cap) continue;
    std::stable_sort(wl.items.begin(), wl.items.end(), [](const MlaDecodeSm90WorkItem& a, const MlaDecodeSm90WorkItem& b) {
      return a.kend - a.kbeg > b.kend - b.kbeg;
    });
    std::vector<double> costs;
    costs.reserve(wl.items.size() * static_cast<size_t>(std::max<int64_t>(1, nrb)));
    for (const auto& it : wl.items)
      for (int64_t r = 0; r < std::max<int64_t>(1, nrb); ++r)
        costs.push_back(static_cast<double>(it.kend - it.kbeg + kMlaDecodeSm90CtaOverhead +
                                            (wl.splits[it.s] > 1 ? kMlaDecodeSm90SplitCost : 0)));
    wl.est_time = MlaDecodeSm90Makespan(costs, slots);
    if (!have || wl.est_time < best.est_time) {
      best = std::move(wl);
      have = true;
    }
  }
  return best;
}

}  // namespace ds::cuda
