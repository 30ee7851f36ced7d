// MlaAttnPersistent (mla_attn_persistent.h, the runner's attn_persistent) against a double CPU
// reference of the absorbed-MLA attention of one decode token (mla_attn_persistent.h's math,
// with the kernel's bf16 roundings of the cache row, q_lat, the Q tile's q_pe, o_lat and o):
// the written cache row (the token's slot), o (o_proj's bf16 input) and the fp32 output. The
// cache holds random bf16 rows for the earlier tokens in shuffled pages; every other row,
// including the new token's before the launch, is NaN, so a read past the context or before the
// write shows as a non-finite output. Bounds: relative L2 5e-3 on the cache row (the norm's fp32
// sum against double), 2e-2 on o and the output (the kernel rounds the probabilities to bf16 for
// the P V mma, as the decode kernels do). Shapes: V2-Lite (16 heads, hidden 2048) and a small one
// (4 heads, hidden 512 and 4096); contexts 1, 33, 64, 100, 1000 and 4500 keys (1-141 splits, a
// split at a page boundary, blocks taking two splits or two o_proj tiles); interleaved and
// rotate-half RoPE; a negative slot (no row written); direct launches and graph replays (the
// barrier words and the in-place q_pe RoPE across replays; the scratch and the token's row
// re-poisoned before the last launch); the o_proj tile's copies issued at each wo_stage_point.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/device_props.h"
#include "backend/cuda/mla_attn_persistent.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr int64_t kNope = 128, kRope = 64, kDqk = 192, kVd = 128, kLat = 512, kD = 576, kBs = 64;

float Bf(float x) { return RoundBf16(x); }

// RotateHead's rotation (rope.cuh) in double: out[i] = a c - b s, out[i + half] = b c + a s.
void Rope(const float* v, double* out, int pos, const std::vector<float>& cos, const std::vector<float>& sin,
          bool interleave) {
  const int half = kRope / 2;
  for (int i = 0; i < half; ++i) {
    const double a = interleave ? v[2 * i] : v[i], b = interleave ? v[2 * i + 1] : v[i + half];
    const double c = cos[static_cast<size_t>(pos) * half + i], s = sin[static_cast<size_t>(pos) * half + i];
    out[i] = a * c - b * s;
    out[i + half] = b * c + a * s;
  }
}

// no_slot: the token's slot is -1 (no cache row written; its row holds earlier random values,
// which the decode then reads, as the unfused path would).
// in_norm: the input comes as a residual row and the input norm's weight
// (MlaAttnPersistentParams::in_residual); the reference's x is their norm rounded to bf16.
// overlap: absorb_overlap (MlaAttnPersistentParams::nope_ready); then also bit-for-bit the
// outputs of a launch without it on the same inputs, and the counter back at zero.
void RunCase(int64_t H, int64_t Hd, int ctx, bool interleave, bool graph, bool no_slot = false, int wo_point = 2,
             bool in_norm = false, bool overlap = false, bool split = false, int l2_fetch = 0, int merge_cols = 0) {
  const std::string label = "H" + std::to_string(H) + "_hidden" + std::to_string(Hd) + "_ctx" + std::to_string(ctx) +
                            (interleave ? "_interleave" : "_halves") + (no_slot ? "_noslot" : "") +
                            (wo_point != 2 ? "_wo" + std::to_string(wo_point) : "") +
                            (in_norm ? "_in_norm" : "") + (overlap ? "_overlap" : "") + (split ? "_split_counter" : "") +
                            (l2_fetch != 0 ? "_l2fetch" + std::to_string(l2_fetch) : "") +
                            (merge_cols != 0 ? "_merge_cols" + std::to_string(merge_cols) : "") + (graph ? " graph" : " direct");
  const int64_t max_pos = std::max(4096, ctx + 1), pages = (ctx + kBs - 1) / kBs, spare = 2, num_pages = pages + spare;
  const int pos = ctx - 1;
  // Weights and input.
  const std::vector<float> in_res = RandomNormal(Hd, 3.f), in_w = RandomF(Hd, 0.5f, 1.5f);
  std::vector<float> x = RoundBf16Vec(RandomNormal(Hd, 1.f));
  if (in_norm) {
    double ss = 0;
    for (int64_t i = 0; i < Hd; ++i) ss += double(in_res[i]) * in_res[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / Hd + 1e-6));
    for (int64_t i = 0; i < Hd; ++i) x[i] = Bf(in_res[i] * inv * in_w[i]);
  }
  const float aw = 1.f / std::sqrt(static_cast<float>(Hd));
  const std::vector<float> wq = RoundBf16Vec(RandomNormal(H * kDqk * Hd, aw)), wkva = RoundBf16Vec(RandomNormal(kD * Hd, aw));
  const std::vector<float> wuk = RoundBf16Vec(RandomNormal(H * kLat * kNope, 1.f / std::sqrt(float(kNope))));
  const std::vector<float> kvb = RoundBf16Vec(RandomNormal(H * (kNope + kVd) * kLat, 1.f / std::sqrt(float(kLat))));
  const std::vector<float> wo = RoundBf16Vec(RandomNormal(Hd * H * kVd, 1.f / std::sqrt(float(H * kVd))));
  const std::vector<float> norm_w = RandomF(kLat, 0.5f, 1.5f);
  std::vector<float> cos(max_pos * kRope / 2), sin(cos.size());
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < kRope / 2; ++i) {
      const double th = p * std::pow(10000.0, -2.0 * i / kRope);
      cos[p * kRope / 2 + i] = static_cast<float>(std::cos(th));
      sin[p * kRope / 2 + i] = static_cast<float>(std::sin(th));
    }
  // Pages in shuffled order; the earlier tokens' rows random, every other row NaN.
  std::vector<int32_t> table(num_pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), Rng());
  std::vector<float> cache(num_pages * kBs * kD, std::nanf(""));
  const auto row_of = [&](int j) { return static_cast<int64_t>(table[j / kBs]) * kBs + j % kBs; };
  for (int j = 0; j + (no_slot ? 0 : 1) < ctx; ++j) {
    const std::vector<float> r = RoundBf16Vec(RandomNormal(kD, 1.f));
    std::copy(r.begin(), r.end(), cache.begin() + row_of(j) * kD);
  }
  const int64_t slot = row_of(pos);

  // Reference (double, the kernel's bf16 roundings).
  std::vector<double> q(H * kDqk), kva(kD);
  for (int64_t r = 0; r < H * kDqk; ++r) {
    double s = 0;
    for (int64_t k = 0; k < Hd; ++k) s += double(x[k]) * wq[r * Hd + k];
    q[r] = s;
  }
  for (int64_t r = 0; r < kD; ++r) {
    double s = 0;
    for (int64_t k = 0; k < Hd; ++k) s += double(x[k]) * wkva[r * Hd + k];
    kva[r] = s;
  }
  std::vector<float> ref_row(kD), ref_kva(kD);  // ref_kva: kva32 after the kernel (c_kv normalised, k_pe raw)
  {
    double ss = 0;
    for (int64_t i = 0; i < kLat; ++i) ss += kva[i] * kva[i];
    const double inv = 1.0 / std::sqrt(ss / kLat + 1e-6);
    for (int64_t i = 0; i < kLat; ++i) {
      ref_kva[i] = static_cast<float>(kva[i] * inv * norm_w[i]);
      ref_row[i] = Bf(ref_kva[i]);
    }
    for (int64_t i = kLat; i < kD; ++i) ref_kva[i] = static_cast<float>(kva[i]);
    float kpe[kRope];
    for (int i = 0; i < kRope; ++i) kpe[i] = static_cast<float>(kva[kLat + i]);
    double rot[kRope];
    Rope(kpe, rot, pos, cos, sin, interleave);
    for (int i = 0; i < kRope; ++i) ref_row[kLat + i] = Bf(static_cast<float>(rot[i]));
  }
  std::vector<float> ctx_cache = cache;  // the cache the decode reads: the new row in place
  if (!no_slot) std::copy(ref_row.begin(), ref_row.end(), ctx_cache.begin() + slot * kD);
  const double scale = 1.0 / std::sqrt(double(kDqk));
  std::vector<float> ref_o(H * kVd), ref_out(Hd);
  std::vector<float> ref_q32(H * kDqk), ref_qlat(H * kLat);  // q32 (q_pe unrotated: phase 3 rotates it into its Q tile), q_lat (bf16)
  std::vector<float> ref_olat(H * kLat);  // the merged latent output (bf16 values): merge_cols leaves it in split 0's partial
  for (int64_t h = 0; h < H; ++h) {
    std::vector<float> Q(kD);
    for (int64_t c = 0; c < kLat; ++c) {
      double s = 0;
      for (int64_t d = 0; d < kNope; ++d) s += double(Bf(static_cast<float>(q[h * kDqk + d]))) * wuk[(h * kLat + c) * kNope + d];
      Q[c] = Bf(static_cast<float>(s));
    }
    float qpe[kRope];
    for (int i = 0; i < kRope; ++i) qpe[i] = static_cast<float>(q[h * kDqk + kNope + i]);
    double rot[kRope];
    Rope(qpe, rot, pos, cos, sin, interleave);
    for (int i = 0; i < kRope; ++i) Q[kLat + i] = Bf(static_cast<float>(rot[i]));
    for (int64_t d = 0; d < kNope; ++d) ref_q32[h * kDqk + d] = static_cast<float>(q[h * kDqk + d]);
    for (int i = 0; i < kRope; ++i) ref_q32[h * kDqk + kNope + i] = static_cast<float>(q[h * kDqk + kNope + i]);
    std::copy(Q.begin(), Q.begin() + kLat, ref_qlat.begin() + h * kLat);
    std::vector<double> sc(ctx);
    double mx = -INFINITY;
    for (int j = 0; j < ctx; ++j) {
      double s = 0;
      const float* kr = ctx_cache.data() + row_of(j) * kD;
      for (int64_t i = 0; i < kD; ++i) s += double(Q[i]) * kr[i];
      sc[j] = s * scale;
      mx = std::max(mx, sc[j]);
    }
    double sum = 0;
    for (int j = 0; j < ctx; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
    std::vector<float> olat(kLat);
    for (int64_t c = 0; c < kLat; ++c) {
      double s = 0;
      for (int j = 0; j < ctx; ++j) s += sc[j] * ctx_cache[row_of(j) * kD + c];
      olat[c] = Bf(static_cast<float>(s / sum));
      ref_olat[h * kLat + c] = olat[c];
    }
    for (int64_t v = 0; v < kVd; ++v) {
      double s = 0;
      for (int64_t c = 0; c < kLat; ++c) s += double(olat[c]) * kvb[(h * (kNope + kVd) + kNope + v) * kLat + c];
      ref_o[h * kVd + v] = Bf(static_cast<float>(s));
    }
  }
  for (int64_t n = 0; n < Hd; ++n) {
    double s = 0;
    for (int64_t k = 0; k < H * kVd; ++k) s += double(ref_o[k]) * wo[n * H * kVd + k];
    ref_out[n] = static_cast<float>(s);
  }

  // Device.
  Dev<__nv_bfloat16> d_x(ToBf16(x)), d_wq(ToBf16(wq)), d_wkva(ToBf16(wkva)), d_wuk(ToBf16(wuk)), d_kvb(ToBf16(kvb)),
      d_wo(ToBf16(wo)), d_cache(ToBf16(cache)), d_qlat(H * kLat), d_o16(H * kVd);
  Dev<float> d_norm_w(norm_w), d_cos(cos), d_sin(sin), d_q32(H * kDqk), d_kva(kD), d_out(Hd), d_in_res(in_res),
      d_in_w(in_w);
  const int64_t max_context = num_pages * kBs;
  Dev<float> d_ws(MlaAttnPersistentWorkspaceFloats(H, max_context));
  Dev<int32_t> d_pos(std::vector<int32_t>{pos}), d_table(table), d_ctx(std::vector<int32_t>{ctx});
  Dev<int64_t> d_slot(std::vector<int64_t>{no_slot ? -1 : slot});
  Dev<uint32_t> d_sync(2), d_nope(2), d_heads(16);
  DS_CUDA_CHECK(cudaMemset(d_sync.get(), 0, 2 * sizeof(uint32_t)));
  DS_CUDA_CHECK(cudaMemset(d_nope.get(), 0, 2 * sizeof(uint32_t)));
  DS_CUDA_CHECK(cudaMemset(d_heads.get(), 0, 16 * sizeof(uint32_t)));
  MlaAttnPersistentParams p{};
  p.x16 = d_x.get(); p.hidden = Hd; p.heads = H;
  p.wq = d_wq.get(); p.wkva = d_wkva.get(); p.kva_norm_w = d_norm_w.get(); p.eps = 1e-6f;
  p.w_uk_t = d_wuk.get(); p.kv_b = d_kvb.get(); p.wo = d_wo.get();
  p.position = d_pos.get(); p.cos = d_cos.get(); p.sin = d_sin.get(); p.max_pos = max_pos; p.interleave = interleave;
  p.cache = d_cache.get(); p.slot = d_slot.get(); p.block_table = d_table.get(); p.context_len = d_ctx.get();
  p.block_size = kBs; p.softmax_scale = static_cast<float>(scale); p.max_context = max_context;
  p.q32 = d_q32.get(); p.kva32 = d_kva.get(); p.qlat16 = d_qlat.get(); p.workspace = d_ws.get();
  p.o16 = d_o16.get(); p.out = d_out.get(); p.sync = d_sync.get(); p.wo_stage_point = wo_point;
  if (in_norm) { p.x16 = nullptr; p.in_residual = d_in_res.get(); p.in_norm_w = d_in_w.get(); p.in_eps = 1e-6f; }
  if (overlap) p.nope_ready = d_nope.get();
  if (split) p.split_ready = d_nope.get() + 1;
  p.l2_fetch = l2_fetch;
  if (merge_cols > 0) {
    p.head_ready = d_heads.get();
    p.merge_cols_min_splits = merge_cols;
  }
  std::printf("[fixture] %s: specialized instantiation %d\n", label.c_str(), MlaAttnPersistentSpecialized(p) ? 1 : 0);
  // The runner's form (since session 35 with the column-split merge at every context) launches the
  // specialised instantiation; any other form the generic one.
  EXPECT_EQ(MlaAttnPersistentSpecialized(p), l2_fetch == 1 && wo_point == 3 && in_norm && overlap && split && merge_cols == 1)
      << label;
  ASSERT_EQ(MlaAttnPersistentUnsupported(p), "") << label;
  constexpr int kLaunches = 3;
  LaunchRepeated(
      graph, kLaunches, [&](cudaStream_t st) { MlaAttnPersistentParams r = p; r.stream = st; MlaAttnPersistent(r); },
      [&] {
        // Every scratch and output the last launch must write, and the token's cache row (unless
        // no_slot: then it must stay as uploaded).
        d_out.Poison(); d_o16.Poison(); d_qlat.Poison(); d_ws.Poison(); d_q32.Poison(); d_kva.Poison();
        if (!no_slot) {
          const std::vector<__nv_bfloat16> nan_row = ToBf16(std::vector<float>(kD, std::nanf("")));
          DS_CUDA_CHECK(cudaMemcpy(d_cache.get() + slot * kD, nan_row.data(), kD * sizeof(__nv_bfloat16),
                                   cudaMemcpyHostToDevice));
        }
      });
  const std::vector<float> out = d_out.Download(), o16 = FromBf16(d_o16.Download()), got_cache = FromBf16(d_cache.Download());
  // The phases' intermediates, so that a failure names its phase: q32 (phase 1), kv_a (phase 1, c_kv normalised in phase 2), q_lat (phase 2).
  const std::vector<float> got_q32 = d_q32.Download(), got_kva = d_kva.Download(), got_qlat = FromBf16(d_qlat.Download());
  // (in_norm: the kernel's own sum of squares may round a few elements of x to the neighbouring
  // bf16 value: ~1e-4 of q each.)
  ExpectClose("mla_attn_persistent_q32", label, got_q32, ref_q32, in_norm ? 1e-3 : 1e-5);
  ExpectClose("mla_attn_persistent_kva", label, got_kva, ref_kva, in_norm ? 1e-3 : 1e-5);
  ExpectClose("mla_attn_persistent_qlat", label, got_qlat, ref_qlat, 5e-3);
  const std::vector<uint32_t> sync = d_sync.Download();
  const std::vector<float> got_row(got_cache.begin() + slot * kD, got_cache.begin() + (slot + 1) * kD);
  int64_t other_rows_changed = 0;  // rows other than the slot: bit-for-bit as uploaded (NaN stays NaN)
  const std::vector<float> up = FromBf16(ToBf16(cache));
  for (int64_t i = 0; i < static_cast<int64_t>(up.size()); ++i) {
    if (!no_slot && i / kD == slot) continue;
    const bool same = (std::isnan(up[i]) && std::isnan(got_cache[i])) || up[i] == got_cache[i];
    other_rows_changed += !same;
  }
  if (!no_slot) ExpectClose("mla_attn_persistent_cache_row", label, got_row, ref_row, 5e-3);
  ExpectClose("mla_attn_persistent_o", label, o16, ref_o, 2e-2);
  ExpectClose("mla_attn_persistent_out", label, out, ref_out, 2e-2);
  EXPECT_EQ(other_rows_changed, 0) << label << ": cache rows other than the token's slot changed";
  // grid_barrier.cuh's 64-bit counter: each launch pads it to the next multiple of kGridEpoch (2^20).
  EXPECT_EQ((uint64_t{sync[1]} << 32) | sync[0], uint64_t{kLaunches} << 20) << label;
  if (merge_cols > 0) {
    const std::vector<uint32_t> heads = d_heads.Download();
    for (int64_t h = 0; h < 16; ++h) EXPECT_EQ(heads[h], 0u) << label << ": merge_cols' head word " << h << " not back at zero";
    // Where it ran (>= merge_cols splits, more than one), each head's merged row is in split 0's
    // partial (the workspace was poisoned before the last launch): the merge itself, checked.
    const int64_t splits = (ctx + 31) / 32, smax = (max_context + 31) / 32;
    if (splits >= merge_cols && splits > 1) {
      const std::vector<float> ws = d_ws.Download();
      std::vector<float> got_olat(H * kLat);
      for (int64_t h = 0; h < H; ++h)
        std::copy(ws.begin() + h * smax * kLat, ws.begin() + (h * smax + 1) * kLat, got_olat.begin() + h * kLat);
      ExpectClose("mla_attn_persistent_merged_olat", label, got_olat, ref_olat, 5e-3);
    }
  }
  if (overlap) {
    const std::vector<uint32_t> words = d_nope.Download();
    EXPECT_EQ(words[0], 0u) << label << ": absorb_overlap's counter not back at zero";
    EXPECT_EQ(words[1], 0u) << label << ": split_counter's counter not back at zero";
    // The same inputs without absorb_overlap: the same rows by the same warps' sums, so the same bits.
    MlaAttnPersistentParams r = p;
    r.nope_ready = nullptr;
    r.split_ready = nullptr;
    d_out.Poison(); d_o16.Poison(); d_qlat.Poison(); d_q32.Poison();
    MlaAttnPersistent(r);
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(BitMismatches(d_out.Download(), out), 0) << label << ": out differs from the launch without absorb_overlap";
    EXPECT_EQ(BitMismatches(FromBf16(d_o16.Download()), o16), 0) << label << ": o differs";
    EXPECT_EQ(BitMismatches(FromBf16(d_qlat.Download()), got_qlat), 0) << label << ": q_lat differs";
    EXPECT_EQ(BitMismatches(d_q32.Download(), got_q32), 0) << label << ": q32 differs";
  }
}

TEST(CudaMlaAttnPersistent, MatchesCpuReference) {
  for (int ctx : {1, 33, 64, 100, 1000}) RunCase(16, 2048, ctx, true, false);
  RunCase(16, 2048, 1000, true, true);
  RunCase(16, 2048, 4500, true, false);  // 141 splits: blocks take two (the decode loop's second pass)
  RunCase(4, 4096, 300, true, false);    // 256 o_proj tiles: blocks take two
  RunCase(4, 512, 100, false, false);
  RunCase(4, 512, 65, false, true);
  RunCase(16, 2048, 100, true, true, /*no_slot=*/true);
  RunCase(16, 2048, 1000, true, true, false, /*wo_point=*/0);  // where the o_proj tile's copies start
  RunCase(16, 2048, 1000, true, false, false, /*wo_point=*/1);
}

// The input norm inside the kernel (MlaAttnPersistentParams::in_residual, norm_in_attn).
TEST(CudaMlaAttnPersistent, InputNormMatchesCpuReference) {
  RunCase(16, 2048, 1000, true, true, false, 2, /*in_norm=*/true);
  RunCase(16, 2048, 33, true, false, false, 2, true);
  RunCase(4, 8192, 100, true, false, false, 2, true);
  RunCase(4, 512, 65, false, true, false, 2, true);
}

// absorb_overlap (MlaAttnPersistentParams::nope_ready): V2-Lite's shape (228 phase-1 tiles on
// the SMs: blocks with one and with two), the in-kernel norm, graph replays (the counter's reset
// across launches), the small shapes (blocks without a phase-1 tile absorb).
TEST(CudaMlaAttnPersistent, AbsorbOverlapMatchesCpuReference) {
  RunCase(16, 2048, 1000, true, true, false, 2, true, /*overlap=*/true);
  RunCase(16, 2048, 1, true, false, false, 2, false, true);
  RunCase(16, 2048, 4500, true, true, false, 2, false, true);
  RunCase(4, 8192, 100, true, false, false, 2, true, true);
  RunCase(4, 512, 65, false, true, false, 2, true, true);
  RunCase(2, 4096, 300, true, true, false, 2, false, true);
  // 8 heads x hidden 2048: 132 phase-1 tiles, so on a 132-SM device every block has one and every
  // block absorbs (uk_lo = 0).
  RunCase(8, 2048, 300, true, true, false, 2, false, true);
}

// split_counter (MlaAttnPersistentParams::split_ready, with absorb_overlap): no barrier 2; the
// decode blocks wait on a counter. The same shapes as above.
TEST(CudaMlaAttnPersistent, SplitCounterMatchesCpuReference) {
  RunCase(16, 2048, 1000, true, true, false, 2, true, true, /*split=*/true);
  RunCase(16, 2048, 1, true, false, false, 2, false, true, true);
  RunCase(16, 2048, 4500, true, true, false, 2, false, true, true);
  RunCase(4, 8192, 100, true, false, false, 2, true, true, true);
  RunCase(4, 512, 65, false, true, false, 2, true, true, true);
  RunCase(2, 4096, 300, true, true, false, 2, false, true, true);
  RunCase(16, 2048, 100, true, true, /*no_slot=*/true, 2, false, true, true);
}

// wo_stage_point 3 to 6 (the o_proj tile staged in phase 3; 3 is the runner's default since
// session 22; 5 / 6 spread a split block's copies over its warps, at 3's point or after its decode) with absorb_overlap and split_counter (in_norm for two of the cases), and point 3
// without the counters; 1 key: one split; 4,500 keys: blocks with two splits; hidden 8192: every
// block stages a tile.
TEST(CudaMlaAttnPersistent, WoStageInPhase3MatchesCpuReference) {
  for (const int point : {3, 4, 5, 6}) {
    RunCase(16, 2048, 1000, true, true, false, point, true, true, true);
    RunCase(16, 2048, 4500, true, false, false, point, false, true, true);
    RunCase(4, 8192, 100, true, true, false, point, true, true, true);
    RunCase(16, 2048, 1, true, true, false, point, false, true, true);
  }
  RunCase(16, 2048, 1000, true, true, false, 3);
}

// The runner's form (wo_stage_point 3, in_norm, absorb_overlap, split_counter, the 128-byte L2
// fetch; since session 35 the column-split merge at every context) takes the specialised
// instantiation (session 28; RunCase checks that it does): against the CPU reference as the
// generic one is; 1,000 / 4,500 / 1 keys (16 heads x hidden 2048: the instantiation with those
// fixed too), hidden 8192 at 4 heads (the form's alone).
TEST(CudaMlaAttnPersistent, SpecializedMatchesCpuReference) {
  RunCase(16, 2048, 1000, true, true, false, 3, true, true, true, 1, /*merge_cols=*/1);
  RunCase(16, 2048, 4500, true, false, false, 3, true, true, true, 1, 1);
  RunCase(4, 8192, 100, true, true, false, 3, true, true, true, 1, 1);
  RunCase(16, 2048, 1, true, true, false, 3, true, true, true, 1, 1);
}

// merge_cols (MlaAttnPersistentParams::head_ready): each (head, part) unit merges a 64-column
// slice, then W_UV once its head's slices are in. At or above the threshold (1 key: one split;
// 1,000: 32 splits; 4,500: 141, blocks with two splits), below it (the one-loop merge on the same
// params), the generic and the specialised instantiations, 16 / 4 / 2 heads, graph replays (the
// words' reset between launches).
TEST(CudaMlaAttnPersistent, MergeColsMatchesCpuReference) {
  RunCase(16, 2048, 1000, true, true, false, 2, false, false, false, 0, /*merge_cols=*/1);
  RunCase(16, 2048, 4500, true, true, false, 2, false, false, false, 0, 1);
  RunCase(16, 2048, 1, true, false, false, 2, false, false, false, 0, 1);
  RunCase(16, 2048, 1000, true, true, false, 2, false, false, false, 0, 64);   // 32 splits: the one-loop merge
  RunCase(16, 2048, 4500, true, true, false, 3, true, true, true, 1, 64);      // the runner's form but 64: generic
  RunCase(16, 2048, 1000, true, false, false, 3, true, true, true, 1, 1);
  RunCase(4, 8192, 100, true, true, false, 3, true, true, true, 1, 1);
  RunCase(2, 4096, 300, true, true, false, 2, false, true, false, 0, 1);
  // Session 35: 129 and 250 splits (a group's 9 and 16 splits), the runner's form (specialised).
  RunCase(16, 2048, 4100, true, true, false, 3, true, true, true, 1, 1);
  RunCase(16, 2048, 8000, true, false, false, 3, true, true, true, 1, 1);
}

TEST(CudaMlaAttnPersistent, RejectsUnsupported) {
  MlaAttnPersistentParams p{};
  p.heads = 17; p.hidden = 1000; p.block_size = 16;
  const std::string why = MlaAttnPersistentUnsupported(p);
  for (const char* part : {"heads 17", "hidden 1000", "block_size 16", "max_context 0", "null pointer"})
    EXPECT_NE(why.find(part), std::string::npos) << "missing '" << part << "' in: " << why;
  p.heads = 3;
  EXPECT_NE(MlaAttnPersistentUnsupported(p).find("heads 3"), std::string::npos);
  p.wo_stage_point = 7;
  p.l2_fetch = 3;
  p.specialize = 3;
  p.max_context = kMlaAttnPersistentMaxContext + 1;
  const std::string why2 = MlaAttnPersistentUnsupported(p);
  MlaAttnPersistentParams q{};
  uint32_t word = 0;
  q.split_ready = &word;
  EXPECT_NE(MlaAttnPersistentUnsupported(q).find("split_ready needs nope_ready"), std::string::npos);
  q.split_ready = nullptr;
  q.merge_cols_min_splits = 64;
  EXPECT_NE(MlaAttnPersistentUnsupported(q).find("merge_cols_min_splits needs head_ready"), std::string::npos);
  q.merge_cols_min_splits = -1;
  EXPECT_NE(MlaAttnPersistentUnsupported(q).find("merge_cols_min_splits -1"), std::string::npos);
  for (const char* part : {"wo_stage_point 7", "l2_fetch 3", "specialize 3", "max_context 8193"})
    EXPECT_NE(why2.find(part), std::string::npos) << "missing '" << part << "' in: " << why2;
}


// Information (disabled; run with --gtest_also_run_disabled_tests): the kernel at V2-Lite's shape
// (16 heads, hidden 2048) in a graph of kSets launches, each with its own copy of the weights
// (8 x 28 MB, past L2, so each launch streams its weights from DRAM as in the model), and the
// phase timeline from the phase_ns stamps: per segment the mean and the max over blocks, and
// the last block's arrival at each stamp after the first block's start (cumulative). Variants
// (session 14): x given, and x normalised from a residual row (in_residual, norm_in_attn's form).
TEST(CudaMlaAttnPersistent, DISABLED_TimingReport) {
  constexpr int64_t H = 16, Hd = 2048;
  constexpr int kSets = 8, kReplays = 20, kStampReplays = 5, kS = kMlaAttnPersistentStamps;
  const int grid = CurrentDeviceProps().sms;
  const auto rnd = [](int64_t n, float sd) { return ToBf16(RoundBf16Vec(RandomNormal(n, sd))); };
  const std::vector<__nv_bfloat16> hx = rnd(Hd, 1.f), hwq = rnd(H * kDqk * Hd, 0.02f), hwkva = rnd(kD * Hd, 0.02f),
                                   hwuk = rnd(H * kLat * kNope, 0.05f), hkvb = rnd(H * (kNope + kVd) * kLat, 0.05f),
                                   hwo = rnd(Hd * H * kVd, 0.02f);
  const double weight_bytes = 2.0 * (hwq.size() + hwkva.size() + hwuk.size() + H * kVd * kLat + hwo.size());
  struct Set {
    Dev<__nv_bfloat16> wq, wkva, wuk, kvb, wo;
    Dev<uint64_t> stamps;
  };
  std::vector<std::unique_ptr<Set>> sets;
  for (int i = 0; i < kSets; ++i)
    sets.push_back(std::unique_ptr<Set>(new Set{Dev<__nv_bfloat16>(hwq), Dev<__nv_bfloat16>(hwkva), Dev<__nv_bfloat16>(hwuk),
                                                Dev<__nv_bfloat16>(hkvb), Dev<__nv_bfloat16>(hwo),
                                                Dev<uint64_t>(static_cast<size_t>(grid) * kS)}));
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // DS_ATTN_TIMING_CTXS / DS_ATTN_TIMING_VARIANTS (comma lists) narrow the report to those contexts
  // and variants (default: 1,024 and 4,096 keys, variants 3-12).
  const auto env_list = [](const char* name, std::vector<int> dflt) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return dflt;
    std::vector<int> out;
    for (const char* c = v; *c != '\0';) {
      out.push_back(std::atoi(c));
      while (*c != '\0' && *c != ',') ++c;
      if (*c == ',') ++c;
    }
    return out;
  };
  const std::vector<int> ctxs = env_list("DS_ATTN_TIMING_CTXS", {1024, 4096});
  const std::vector<int> variants = env_list("DS_ATTN_TIMING_VARIANTS", {3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  for (const int c : ctxs)  // (the report's workspace holds the context's pages plus one)
    ASSERT_TRUE(c >= 1 && c <= kMlaAttnPersistentMaxContext - 2 * kBs)
        << "DS_ATTN_TIMING_CTXS: 1-" << kMlaAttnPersistentMaxContext - 2 * kBs;
  for (int ctx : ctxs) {
    const int64_t pages = (ctx + kBs - 1) / kBs + 1, max_pos = ctx + 1;
    std::vector<int32_t> table(pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), Rng());
    std::vector<float> cos(max_pos * kRope / 2, 1.f), sin(cos.size(), 0.f);
    Dev<__nv_bfloat16> d_x(hx), d_cache(rnd(pages * kBs * kD, 1.f)), d_qlat(H * kLat), d_o16(H * kVd);
    Dev<float> d_norm_w(std::vector<float>(kLat, 1.f)), d_cos(cos), d_sin(sin), d_q32(H * kDqk), d_kva(kD), d_out(Hd);
    Dev<float> d_ws(MlaAttnPersistentWorkspaceFloats(H, pages * kBs));
    Dev<int32_t> d_pos(std::vector<int32_t>{ctx - 1}), d_table(table), d_ctx(std::vector<int32_t>{ctx});
    Dev<int64_t> d_slot(std::vector<int64_t>{static_cast<int64_t>(table[(ctx - 1) / kBs]) * kBs + (ctx - 1) % kBs});
    Dev<uint32_t> d_sync(2), d_nope(2);
    DS_CUDA_CHECK(cudaMemset(d_sync.get(), 0, 2 * sizeof(uint32_t)));
    DS_CUDA_CHECK(cudaMemset(d_nope.get(), 0, 2 * sizeof(uint32_t)));
    Dev<float> d_in_res(RandomNormal(Hd, 1.f)), d_in_w(std::vector<float>(Hd, 1.f));
    // (Session 13's wo_stage_point 0 / 1 variants and the L2 prefetches of sessions 13-14:
    // bench/results/session13_*, session14_2026-11-30_run{1,6}.)
    // Variant 2 (session 20): in_norm with absorb_overlap (nope_ready); 3: and split_counter (the
    // runner's form until session 22; variants 0-2: session21_2026-12-01_run8). Session 22: 4,
    // variant 3 with wo_stage_point 3 (the runner's default since session 22); 4 (every block at
    // phase 3's start) and plain launches: session22_2026-12-01_run1; the merge's first partials
    // loaded before its LSEs: run 5; the MoE's first gate_up tiles in this kernel: run 7.
    // Session 25: 5, variant 4 with the 128-byte L2 fetch size (the runner's form); 6, variant 5
    // with every block stopping after phase 1 (debug_stop_after_p1; the barrier and counter words
    // reset before each launch). (Its phase-1 variants: bench/results/session25_2026-12-01_run*.)
    // Session 28: 7 / 8, variant 5 with wo_stage_point 5 / 6 (a split block's o_proj copies over
    // its warps, at point 3's place / after its decode).
    // 9: variant 5 on the generic instantiation (specialize 0; 5 unstamped is the runner-form one
    // with 16 heads x hidden 2048 fixed, specialize 2); 10: specialize 1 (the form alone).
    // Session 29: 11 / 12, variants 9 / 5 with phase 4's column-split merge (head_ready,
    // merge_cols_min_splits 1: the runner's default since session 29). Since session 35 the
    // specialised instantiations require the column-split merge: variants 5, 7, 8 and 10 run the
    // generic kernel (as 9 does), and 12 unstamped is the runner's kernel (the printed
    // "specialized=" says which ran).
    Dev<uint32_t> d_heads(16);
    DS_CUDA_CHECK(cudaMemset(d_heads.get(), 0, 16 * sizeof(uint32_t)));
    for (int variant : variants) {
      ASSERT_TRUE(variant >= 3 && variant < 13) << "DS_ATTN_TIMING_VARIANTS: 3-12";
      const bool merge_cols = variant >= 11;
      const int wo_point = variant >= 9 ? 3 : variant >= 7 ? variant - 2 : variant >= 4 ? 3 : 2;
      const int l2_fetch = variant >= 5 ? 1 : 0;
      const bool stop_p1 = variant == 6;
      const bool split = variant >= 3;
      const bool in_norm = variant >= 1, overlap = variant >= 2;
      for (bool stamped : {false, true}) {
        const auto params = [&](int i) {
          MlaAttnPersistentParams p{};
          p.x16 = d_x.get(); p.hidden = Hd; p.heads = H;
          p.wq = sets[i]->wq.get(); p.wkva = sets[i]->wkva.get(); p.kva_norm_w = d_norm_w.get();
          p.w_uk_t = sets[i]->wuk.get(); p.kv_b = sets[i]->kvb.get(); p.wo = sets[i]->wo.get();
          p.position = d_pos.get(); p.cos = d_cos.get(); p.sin = d_sin.get(); p.max_pos = max_pos;
          p.cache = d_cache.get(); p.slot = d_slot.get(); p.block_table = d_table.get(); p.context_len = d_ctx.get();
          p.block_size = kBs; p.softmax_scale = 0.07f; p.max_context = pages * kBs;
          p.q32 = d_q32.get(); p.kva32 = d_kva.get(); p.qlat16 = d_qlat.get(); p.workspace = d_ws.get();
          p.o16 = d_o16.get(); p.out = d_out.get(); p.sync = d_sync.get();
          p.phase_ns = stamped ? sets[i]->stamps.get() : nullptr;
          p.wo_stage_point = wo_point;
          p.l2_fetch = l2_fetch;
          p.specialize = variant == 9 || variant == 11 ? 0 : variant == 10 ? 1 : 2;
          if (merge_cols) {
            p.head_ready = d_heads.get();
            p.merge_cols_min_splits = 1;
          }
          p.debug_stop_after_p1 = stop_p1;
          if (in_norm) { p.x16 = nullptr; p.in_residual = d_in_res.get(); p.in_norm_w = d_in_w.get(); }
          if (overlap) p.nope_ready = d_nope.get();
          if (split) p.split_ready = d_nope.get() + 1;
          p.stream = st;
          return p;
        };
        ASSERT_EQ(MlaAttnPersistentUnsupported(params(0)), "");
        const CapturedGraph g(st, [&] {
          for (int i = 0; i < kSets; ++i) {
            if (stop_p1) {
              DS_CUDA_CHECK(cudaMemsetAsync(d_sync.get(), 0, 2 * sizeof(uint32_t), st));
              DS_CUDA_CHECK(cudaMemsetAsync(d_nope.get(), 0, 2 * sizeof(uint32_t), st));
            }
            MlaAttnPersistent(params(i));
          }
        });
        const double us = ReplayUs(g, st, kReplays, kSets);
        // (stop_p1: phase 1's weights only, and the launch time includes the two memset nodes.)
        const double bytes = stop_p1 ? 2.0 * (hwq.size() + hwkva.size()) : weight_bytes;
        std::printf("[metric] op=mla_attn_persistent_timing ctx=%d wo_point=%d in_norm=%d overlap=%d split=%d l2_fetch=%d "
                    "stop_p1=%d merge_cols=%d specialized=%d stamps=%d: %.2f us a launch%s (graph of %d, %d weight sets; "
                    "%.1f MB of weights a launch: %.0f GB/s)\n",
                    ctx, wo_point, in_norm, overlap, split, l2_fetch, stop_p1, merge_cols ? 1 : 0,
                    MlaAttnPersistentSpecialized(params(0)) ? params(0).specialize : 0, stamped, us,
                    stop_p1 ? " with two memsets" : "", kSets, kSets, bytes / 1e6, bytes / (us * 1e3));
        if (!stamped) continue;
        // Stamps 0-15: seg[k] = stamp k - stamp k-1 per block (mean, max over blocks), cum[k] = the last
        // block at k. Stamps 16-18 (inside phase 1): stamp k - the block's own start (mean, max).
        // Stamps 19-21 (inside a split block's first decode, session 28): from stamp 5 to 19, 19 to
        // 20, 20 to 21, 21 to 6, over the blocks with a split.
        static_assert(kS == 22, "16 phase stamps, 3 inside phase 1, 3 inside the decode, named below");
        constexpr int kPhases = 16, kDec = 19;
        std::vector<double> seg_mean(kS, 0.0), seg_max(kS, 0.0), cum(kS, 0.0), dec_mean(4, 0.0), dec_max(4, 0.0);
        int n = 0;
        for (int r = 0; r < kStampReplays; ++r) {
          g.Replay();
          for (int i = 0; i < kSets; ++i, ++n) {
            const std::vector<uint64_t> t = sets[i]->stamps.Download();
            uint64_t t0 = UINT64_MAX;
            for (int b = 0; b < grid; ++b) t0 = std::min(t0, t[b * kS]);
            // The decode's sub-steps (19-21, then 6), over the blocks with a split (stamp 19 set).
            for (int k = kDec; k < kS + 1; ++k) {
              const int at = k == kS ? 6 : k, from = k == kDec ? 5 : k - 1;
              double mx_seg = 0, sum_seg = 0;
              int blocks = 0;
              for (int b = 0; b < grid; ++b) {
                if (t[b * kS + kDec] == 0) continue;
                const double sgm = 1e-3 * static_cast<double>(t[b * kS + at] - t[b * kS + from]);
                mx_seg = std::max(mx_seg, sgm);
                sum_seg += sgm;
                ++blocks;
              }
              dec_mean[k - kDec] += blocks > 0 ? sum_seg / blocks : 0.0;
              dec_max[k - kDec] += mx_seg;
            }
            for (int k = 0; k < kDec; ++k) {
              double mx_seg = 0, sum_seg = 0, mx_cum = 0;
              for (int b = 0; b < grid; ++b) {
                const double c = 1e-3 * static_cast<double>(t[b * kS + k] - t0);
                const int from = k == 0 || k >= kPhases ? 0 : k - 1;
                const double sgm = k == 0 ? c : 1e-3 * static_cast<double>(t[b * kS + k] - t[b * kS + from]);
                mx_seg = std::max(mx_seg, sgm);
                sum_seg += sgm;
                mx_cum = std::max(mx_cum, c);
              }
              seg_mean[k] += sum_seg / grid;
              seg_max[k] += mx_seg;
              cum[k] += mx_cum;
            }
          }
        }
        const char* names[kDec] = {"start skew",    "p1 q/kv_a",           "barrier 1",         "p2 norm/rope/absorb",
                                 "barrier 2",     "p3 Q/K tiles",        "p3 decode",         "barrier 3",
                                 "p4 LSEs",       "p4 weights",          "p4 partials",       "p4 merged",
                                 "p4 W_UV",       "p4 W_o issue",        "barrier 4",         "p5 o_proj",
                                 "position read", "x ready (norm done)", "first tile written"};
        for (int k = 0; k < (stop_p1 ? 2 : kPhases); ++k)
          std::printf("[metric] op=mla_attn_persistent_phase ctx=%d wo_point=%d l2_fetch=%d stop_p1=%d segment=\"%s\": "
                      "mean %.2f us, max %.2f us over blocks; last block done at %.2f us\n",
                      ctx, wo_point, l2_fetch, stop_p1, names[k], seg_mean[k] / n, seg_max[k] / n, cum[k] / n);
        for (int k = kPhases; k < kDec; ++k)
          std::printf("[metric] op=mla_attn_persistent_p1 ctx=%d wo_point=%d l2_fetch=%d stop_p1=%d \"%s\" after the "
                      "block's start: mean %.2f us, max %.2f us over blocks\n",
                      ctx, wo_point, l2_fetch, stop_p1, names[k], seg_mean[k] / n, seg_max[k] / n);
        const char* dec_names[4] = {"scores summed", "softmax + P V", "partials written", "W_UV loads issued"};
        for (int k = 0; k < 4 && !stop_p1; ++k)
          std::printf("[metric] op=mla_attn_persistent_p3 ctx=%d wo_point=%d l2_fetch=%d \"%s\": mean %.2f us, max "
                      "%.2f us over the split blocks\n",
                      ctx, wo_point, l2_fetch, dec_names[k], dec_mean[k] / n, dec_max[k] / n);
      }
    }
  }
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace ds::cuda::test
