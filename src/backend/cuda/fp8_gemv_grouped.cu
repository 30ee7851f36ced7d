// Grouped FP8 (and BF16-weight) GEMV for the MoE experts at decode sizes: see fp8_gemv_grouped.h
// for the math, the design and the contract; fp8_gemv.h / fp8_gemv.cu for the TMA ring it shares
// with Fp8Gemv (the helpers in fp8_gemv_common.cuh). Both kernels are templates on the weight
// type (kBf16W: Fp8GemvGroupedParams::w_bf16); the e4m3 instances are the FP8 kernels as before
// (PTX identical). PTX sources: PTX ISA 8.x, "mbarrier" (arrive.expect_tx, default .release.cta
// semantics; try_wait.parity, default .acquire.cta), "cp.async.bulk.tensor",
// "cp.async.mbarrier.arrive" (.noinc).
#include "backend/cuda/fp8_gemv_grouped.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/fp8_gemv_common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using namespace fp8gemv;  // fp8_gemv_common.cuh: ring geometry, PTX wrappers, stage MMA, split-tile sum
using sm90::BarArrive;
using sm90::BarExpectTx;
using sm90::BarInit;
using sm90::FenceProxyAsync;
using sm90::SmemAddr;

constexpr int kWarps = kThreads / 32;  // 8 consumer warps + the producer
constexpr int kMaxSlots = static_cast<int>(kFp8GemvGroupedMaxSlots);
// After the ring: full / empty mbarriers, each stage's block scale (unused with bf16 weights)
// and its unit's (first row, rows) of the group (int2).
constexpr int kBarBytes = 2 * kStages * 8 + kStages * 4 + kStages * 8;
template <bool kBf16W>  // + alignment slack
constexpr int kSmemBytes = 1024 + kStages * UnitGeom<kBf16W>::kStageBytes + kBarBytes;
constexpr int kGenThreads = 256;

static_assert((2 * kStages * 8 + kStages * 4) % 8 == 0, "the per-stage int2 must stay 8-byte aligned");

struct KArgs {
  const int32_t* offsets;  // [E + 1]
  const int32_t* a_rows;   // gathered rows (one-row groups) or nullptr
  const float* scales;     // [E, tiles, kb] (e4m3 weights; unused with bf16)
  void* out;
  int64_t ldo;
  int E, slots;            // groups; the host's bound on non-empty groups (<= kMaxSlots)
  int N, tiles, kb;        // kb = ceil(K / unit k): units per tile (unit k 128 e4m3, 64 bf16)
  int64_t ctas;
  uint32_t* counters;      // [E slots, tiles, 8 warps]
  float4* partials;        // [ctas, 2, 8 warps, 32 lanes]
  bool out_bf16;
};

// Block-wide (every thread of the block calls it): visits the non-empty groups of offsets[0 ..
// E] in group order, visit(e, rank) in the thread that tests group e (rank: how many non-empty
// groups precede it), in rounds of the block's threads until at least `stop` non-empty groups
// were seen. Returns how many were seen (>= stop, or all), the same in every thread. s_cnt: kNw
// ints of shared memory. Ends with a __syncthreads (what the visits wrote is visible).
template <int kNw, class Visit>
__device__ __forceinline__ int ScanGroups(const int32_t* offsets, int E, int stop, int* s_cnt, Visit visit) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int seen = 0;
  for (int b = 0; b < E; b += kNw * 32) {  // uniform: seen is the same in every thread
    const int e = b + tid;
    const bool f = e < E && offsets[e + 1] > offsets[e];
    const unsigned m = __ballot_sync(0xffffffffu, f);
    if (lane == 0) s_cnt[warp] = __popc(m);
    __syncthreads();
    int before = seen, total = 0;
#pragma unroll
    for (int w = 0; w < kNw; ++w) {
      const int c = s_cnt[w];
      if (w < warp) before += c;
      total += c;
    }
    if (f) visit(e, before + __popc(m & ((1u << lane) - 1u)));
    seen += total;
    __syncthreads();  // s_cnt is rewritten by the next round; the visits' writes are visible
    if (seen >= stop) break;
  }
  return seen;
}

// The TMA path (see fp8_gemv_grouped.h). Shared memory: Fp8Gemv's ring (kStages x [weights
// 128 x 128 B | activations 2 x (8 x 128 B)], 128-byte swizzle; bf16 weights: one activation
// box), its barriers and scales, the per-stage (first row, rows) and the slot -> group table.
// The consumers' lane mapping and math are Fp8Gemv's (fp8_gemv.cu; StageMma in
// fp8_gemv_common.cuh), for bf16 weights StageMmaBf16's (the same rows and chunks per lane).
//
// Protocol per stage: full barrier, 2 arrivals + transaction bytes (bf16 weights: 1, no
// scale): the producer stores the unit's (first row, rows), then arrives with expect_tx
// (release: the consumers' acquiring wait sees the store), issues the weight box and the
// activation box(es) (complete_tx) and the scale's cp.async, whose completion is the second
// arrival (.noinc). Empty barrier: one arrival per consumer warp once the stage is in its
// registers; the producer waits on it before reusing the stage (from the (kStages + 1)-th unit
// on). Both sides walk the same unit list (from the same table and the same offsets), so every
// wait has its arrivals.
template <bool kBf16W>
__global__ void __launch_bounds__(kThreads, 2)
    Fp8GemvGroupedTmaKernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap amap,
                            const KArgs p) {
  using G = UnitGeom<kBf16W>;
  constexpr int kStageBytes = G::kStageBytes;  // shadows the e4m3 stage of fp8_gemv_common.cuh
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint16_t s_group[kMaxSlots];  // slot j -> the j-th non-empty group
  __shared__ int s_cnt[kWarps];
  const uint32_t raw = SmemAddr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* sm = smem_raw + (base - raw);
  const uint32_t bar_full = base + kStages * kStageBytes, bar_empty = bar_full + kStages * 8;
  const uint32_t s_scale = bar_empty + kStages * 8;
  const float* scale_sm = reinterpret_cast<const float*>(sm + kStages * kStageBytes + 2 * kStages * 8);
  int2* info_sm = reinterpret_cast<int2*>(sm + kStages * kStageBytes + 2 * kStages * 8 + kStages * 4);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      BarInit(bar_full + s * 8, kBf16W ? 1 : 2);   // the producer's expect_tx arrival (+ the scale's cp.async)
      BarInit(bar_empty + s * 8, kConsumerWarps);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();
  // s_group[j] = the j-th non-empty group, j < slots
  const int cap = p.slots;
  const int n_act = min(ScanGroups<kWarps>(p.offsets, p.E, cap, s_cnt, [&](int e, int rank) {
                          if (rank < cap) s_group[rank] = static_cast<uint16_t>(e);
                        }),
                        cap);

  // The units of the non-empty groups only: slot-major, then tile, then k block.
  const int KB = p.kb, tiles = p.tiles;
  const int64_t U = int64_t{n_act} * tiles * KB;
  const int64_t C = std::min<int64_t>(p.ctas, U);  // every CTA below C gets >= 1 unit
  const int64_t cta = blockIdx.x;
  if (cta >= C) return;  // the whole CTA (also when no group is non-empty)
  const int64_t u_begin = cta * U / C, u_end = (cta + 1) * U / C;
  const int n_units = static_cast<int>(u_end - u_begin);

  if (warp == kConsumerWarps) {  // producer: one thread issues every load of this CTA's units
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
      const uint64_t pol_w = EvictFirstPolicy(), pol_a = EvictLastPolicy();
      const int64_t gt0 = u_begin / KB;  // first global tile (slot-major)
      int st = 0, kb = static_cast<int>(u_begin % KB);
      int j = static_cast<int>(gt0 / tiles), t = static_cast<int>(gt0 % tiles);
      int e = s_group[j];
      int row0 = p.offsets[e], rows = p.offsets[e + 1] - row0;
      // The activation rows' TMA coordinate: the group's first row, or its gathered source row.
      int arow = p.a_rows != nullptr ? p.a_rows[row0] : row0;
      uint32_t phase = 0;
      for (int i = 0; i < n_units; ++i) {
        if (i >= kStages) MbarWait(bar_empty + st * 8, phase ^ 1u);
        const uint32_t full = bar_full + st * 8, dst = base + st * kStageBytes;
        info_sm[st] = make_int2(row0, rows);
        BarExpectTx(full, kStageBytes);  // arrival 1 (of 2; bf16: of 1), releases the store above; + box bytes
        TmaLoad2d(dst, &wmap, kb * G::kK, e * p.N + t * kTileRows, full, pol_w);
        TmaLoad2d(dst + kWBytes, &amap, kb * G::kK, arow, full, pol_a);
        if constexpr (!kBf16W) {
          TmaLoad2d(dst + kWBytes + kABoxBytes, &amap, kb * kUnitK + 64, arow, full, pol_a);
          CpAsync4(s_scale + st * 4, p.scales + (int64_t{e} * tiles + t) * KB + kb);  // scales [e, tile, kb]
          CpAsyncArriveNoinc(full);  // arrival 2 of 2, once the scale has landed
        }
        if (++st == kStages) { st = 0; phase ^= 1u; }
        if (++kb == KB) {
          kb = 0;
          if (++t == tiles && i + 1 < n_units) {  // next slot: its group
            t = 0;
            e = s_group[++j];
            row0 = p.offsets[e];
            rows = p.offsets[e + 1] - row0;
            arow = p.a_rows != nullptr ? p.a_rows[row0] : row0;
          }
        }
      }
      if constexpr (!kBf16W) asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
    return;
  }

  // ---- consumers
  const int g = lane >> 2, q = lane & 3;
  const int r = 16 * warp + g;  // weight row in the tile (and r + 8)
  const uint32_t w_off0 = r * 128 + (((2 * q) ^ g) << 4), w_off1 = r * 128 + (((2 * q + 1) ^ g) << 4);
  const uint32_t a_off = kWBytes + (q >> 1) * kABoxBytes + g * 128;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int64_t seg_begin = u_begin;
  int64_t gt = u_begin / KB;  // global tile (slot-major) of unit u_begin + i
  int t = static_cast<int>(gt % tiles), kb = static_cast<int>(u_begin % KB);
  int st = 0;
  uint32_t phase = 0;
  for (int i = 0; i < n_units; ++i) {
    MbarWait(bar_full + st * 8, phase);
    const uint8_t* stage = sm + st * kStageBytes;
    StageFrags f;
    f.wa0 = *reinterpret_cast<const uint4*>(stage + w_off0);
    f.wa1 = *reinterpret_cast<const uint4*>(stage + w_off1);
    f.wb0 = *reinterpret_cast<const uint4*>(stage + w_off0 + 8 * 128);  // row r + 8: same swizzle
    f.wb1 = *reinterpret_cast<const uint4*>(stage + w_off1 + 8 * 128);
    [[maybe_unused]] float sc = 1.f;
    if constexpr (kBf16W) {  // activation row g: chunks 2q, 2q + 1 (k 16q .. 16q + 15), as the weights
      f.av[0] = *reinterpret_cast<const uint4*>(stage + kWBytes + g * 128 + (((2 * q) ^ g) << 4));
      f.av[1] = *reinterpret_cast<const uint4*>(stage + kWBytes + g * 128 + (((2 * q + 1) ^ g) << 4));
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f.av[e] = *reinterpret_cast<const uint4*>(stage + a_off + (((4 * (q & 1) + e) ^ g) << 4));
      sc = scale_sm[st];
    }
    const int2 info = info_sm[st];  // (first row, rows) of this unit's group
    __syncwarp();
    if (lane == 0) BarArrive(bar_empty + st * 8);  // the stage is in registers: release it
    if (++st == kStages) { st = 0; phase ^= 1u; }

    if constexpr (kBf16W) {
      StageMmaBf16(f.wa0, f.wa1, f.wb0, f.wb1, f.av[0], f.av[1], acc);  // fp32 sums straight into acc
    } else {
      float part[4] = {0.f, 0.f, 0.f, 0.f};
      StageMma(f, part);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) acc[jj] = fmaf(sc, part[jj], acc[jj]);
    }

    const int64_t u = u_begin + i;
    if (kb != KB - 1 && i != n_units - 1) {
      ++kb;
      continue;
    }
    // ---- end of this CTA's segment of global tile gt: units [seg_begin, u]
    const int64_t tile_u0 = gt * KB;
    float v[4] = {acc[0], acc[1], acc[2], acc[3]};
    bool write = true;
    if (seg_begin != tile_u0 || u != tile_u0 + KB - 1)  // split tile: partials + last-arriver sum
      write = SplitTileSum(p.partials, p.counters + gt * kConsumerWarps + warp, tile_u0, KB, U, C, cta,
                           seg_begin == u_begin ? 0 : 1, warp, lane, acc, v);
    if (write) {
      // C fragment: v[0], v[1] = weight row r, activation rows 2q, 2q + 1 of the group; v[2],
      // v[3] = row r + 8. Rows past the group's end (other groups' rows, or past max_rows) are
      // dropped.
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int n = t * kTileRows + r + (jj >> 1) * 8, row = 2 * q + (jj & 1);
        if (n < p.N && row < info.y) {
          const int64_t o = static_cast<int64_t>(info.x + row) * p.ldo + n;
          if (p.out_bf16)
            static_cast<__nv_bfloat16*>(p.out)[o] = __float2bfloat16_rn(v[jj]);
          else
            static_cast<float*>(p.out)[o] = v[jj];
        }
      }
    }
    acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    seg_begin = u + 1;
    kb = 0;
    ++gt;
    if (++t == tiles) t = 0;
  }
}

// The generic path: block (blockIdx.x = 8 weight rows, blockIdx.y = slot j) finds the j-th
// non-empty group (a block scan of offsets) and runs Fp8Gemv's generic math for that group's
// rows (at most kFp8GemvGroupedMaxRows): one warp per weight row, lane l takes k = l, l + 32,
// ... of each 128-k block; per-block partials times the scale (bf16 weights: no scale, the
// partials added), fp32 FMAs, a butterfly warp sum.
struct GArgs {
  const __nv_bfloat16* a;
  int64_t lda;
  const int32_t* a_rows;   // gathered rows (one-row groups) or nullptr
  const int32_t* offsets;
  const void* w;           // [E, N, K] e4m3 or bf16
  const float* scales;     // e4m3 only
  void* out;
  int64_t ldo;
  int E;
  int64_t N, K;
  bool out_bf16;
};

template <bool kBf16W>
__global__ void __launch_bounds__(kGenThreads) Fp8GemvGroupedGenericKernel(const GArgs p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  constexpr int kNw = kGenThreads / 32;
  constexpr int kRows = static_cast<int>(kFp8GemvGroupedMaxRows);
  __shared__ int s_group;
  __shared__ int s_cnt[kNw];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int j = static_cast<int>(blockIdx.y);
  if (tid == 0) s_group = -1;  // before the scan's first barrier, which precedes every visit
  ScanGroups<kNw>(p.offsets, p.E, j + 1, s_cnt, [&](int ee, int rank) {
    if (rank == j) s_group = ee;
  });
  const int e = s_group;
  if (e < 0) return;  // fewer non-empty groups than slots
  const int64_t row0 = p.offsets[e];
  const int R = static_cast<int>(std::min<int64_t>(p.offsets[e + 1] - row0, kRows));
  const int64_t n = static_cast<int64_t>(blockIdx.x) * 8 + warp;
  if (n >= p.N) return;
  const int64_t KB = (p.K + 127) / 128, NB = (p.N + 127) / 128;
  const int64_t w0 = (e * p.N + n) * p.K;  // row n of expert e
  const uint8_t* wr = static_cast<const uint8_t*>(p.w) + w0;
  const __nv_bfloat16* wr16 = static_cast<const __nv_bfloat16*>(p.w) + w0;
  const float* srow = p.scales + (e * NB + n / 128) * KB;  // e4m3 only
  const __nv_bfloat16* a = p.a + (p.a_rows != nullptr ? int64_t{p.a_rows[row0]} : row0) * p.lda;
  float acc[kRows] = {};
  for (int64_t kb = 0; kb < KB; ++kb) {
    float part[kRows] = {};
    const int64_t kend = std::min(p.K, kb * 128 + 128);
    for (int64_t k = kb * 128 + lane; k < kend; k += 32) {
      const float wv = kBf16W ? __bfloat162float(wr16[k]) : dev::E4M3ToF32(wr[k]);
#pragma unroll
      for (int row = 0; row < kRows; ++row)
        if (row < R) part[row] = fmaf(__bfloat162float(a[row * p.lda + k]), wv, part[row]);
    }
    if constexpr (kBf16W) {
#pragma unroll
      for (int row = 0; row < kRows; ++row) acc[row] += part[row];
    } else {
      const float sc = srow[kb];
#pragma unroll
      for (int row = 0; row < kRows; ++row) acc[row] = fmaf(sc, part[row], acc[row]);
    }
  }
#pragma unroll
  for (int row = 0; row < kRows; ++row) {
    const float v = dev::WarpSum(acc[row]);
    if (lane == 0 && row < R) {
      const int64_t o = (row0 + row) * p.ldo + n;
      if (p.out_bf16) static_cast<__nv_bfloat16*>(p.out)[o] = __float2bfloat16_rn(v);
      else static_cast<float*>(p.out)[o] = v;
    }
  }
}

// ---- host side

// Resident TMA-path CTAs per SM on the current device, cached per (device, weight type).
int CtasPerSm(bool bf16w) {
  return bf16w ? ResidentCtasPerSm(Fp8GemvGroupedTmaKernel<true>, kThreads, kSmemBytes<true>)
               : ResidentCtasPerSm(Fp8GemvGroupedTmaKernel<false>, kThreads, kSmemBytes<false>);
}

// k per unit of the TMA path (UnitGeom): 128 for e4m3 weights, 64 for bf16.
int64_t UnitK(bool bf16w) { return bf16w ? UnitGeom<true>::kK : UnitGeom<false>::kK; }

const char* Name(bool bf16w) { return bf16w ? "Fp8GemvGrouped (bf16 weights)" : "Fp8GemvGrouped"; }

void CheckShape(const Fp8GemvGroupedParams& p) {
  const char* name = Name(p.w_bf16);
  DS_CHECK(p.num_experts >= 1 && p.N >= 1 && p.K >= 1)
      << name << ": bad shape E=" << p.num_experts << " N=" << p.N << " K=" << p.K;
  DS_CHECK(p.num_experts < (int64_t{1} << 31) && p.N < (int64_t{1} << 31) && p.K < (int64_t{1} << 31))
      << name << ": E=" << p.num_experts << " N=" << p.N << " K=" << p.K << " too large";
  DS_CHECK(p.max_rows >= 0 && p.max_rows < (int64_t{1} << 31)) << name << ": max_rows = " << p.max_rows;
  DS_CHECK(p.max_active_groups >= 0) << name << ": max_active_groups = " << p.max_active_groups;
  DS_CHECK(p.max_group_rows >= 0 && p.max_group_rows <= kFp8GemvGroupedMaxRows)
      << name << ": max_group_rows = " << p.max_group_rows << " (0.." << kFp8GemvGroupedMaxRows << ")";
  DS_CHECK(p.max_rows == 0 || (p.lda >= p.K && p.ldo >= p.N))
      << name << ": lda " << p.lda << " < K " << p.K << " or ldo " << p.ldo << " < N " << p.N;
  DS_CHECK(p.a_rows == nullptr || (p.max_group_rows <= 1 && p.a_src_rows >= 1 && p.a_src_rows < (int64_t{1} << 31)))
      << name << ": gathered rows (a_rows) need groups of one row (max_group_rows " << p.max_group_rows
      << ") and the source's rows (a_src_rows " << p.a_src_rows << ")";
}

int64_t Slots(const Fp8GemvGroupedParams& p) {
  return p.max_active_groups > 0 ? std::min(p.max_active_groups, p.num_experts) : p.num_experts;
}

int64_t AutoCtas(int64_t units, int ctas, bool bf16w) {
  if (ctas > 0) return std::min<int64_t>(ctas, units);
  const int64_t slots = int64_t{std::max(1, CurrentDeviceProps().sms)} * CtasPerSm(bf16w);
  return std::max<int64_t>(1, std::min(slots, units / kMinUnitsPerCta));
}

// Counters for E slots (the layout depends on (E, N, K) and the weight type only), partials for
// the CTAs of `ctas` at E slots (AutoCtas grows with the units: the most any launch of these
// dims uses).
size_t WorkspaceBytes(int64_t E, int64_t tiles, int64_t kb, int ctas, bool bf16w) {
  return CounterBytes(E * tiles) + static_cast<size_t>(AutoCtas(E * tiles * kb, ctas, bf16w)) * kPartialBytesPerCta;
}

template <bool kBf16W>
void LaunchTma(const Fp8GemvGroupedParams& p, const Fp8GemvGroupedPlan& plan) {
  using G = UnitGeom<kBf16W>;
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(Fp8GemvGroupedTmaKernel<kBf16W>), kSmemBytes<kBf16W>);
  // Weights [E * N, K]: boxes of 128 rows x 128 bytes (128 e4m3 or 64 bf16 of k).
  const CUtensorMap wmap =
      kBf16W ? MakeMap(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.w, p.K, p.num_experts * p.N, p.K * 2, G::kK, kTileRows)
             : MakeMap(CU_TENSOR_MAP_DATA_TYPE_UINT8, p.w, p.K, p.num_experts * p.N, p.K, G::kK, kTileRows);
  // Activations [rows, K]: the permuted rows, or with a_rows the source's a_src_rows rows (a box
  // past the extent is zero-filled; only its first row is used for a one-row group).
  const CUtensorMap amap = MakeMap(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.a, p.K, p.a_rows ? p.a_src_rows : p.max_rows,
                                   p.lda * 2, 64, 8);
  KArgs k{};
  k.offsets = p.offsets;
  k.a_rows = p.a_rows;
  k.scales = kBf16W ? nullptr : p.w_scales;
  k.out = p.out;
  k.ldo = p.ldo;
  k.E = static_cast<int>(p.num_experts);
  k.slots = static_cast<int>(plan.slots);
  k.N = static_cast<int>(p.N);
  k.tiles = static_cast<int>(plan.tiles);
  k.kb = static_cast<int>((p.K + G::kK - 1) / G::kK);
  k.ctas = plan.ctas;
  k.counters = static_cast<uint32_t*>(p.workspace);
  k.partials = reinterpret_cast<float4*>(static_cast<uint8_t*>(p.workspace) + CounterBytes(p.num_experts * plan.tiles));
  k.out_bf16 = p.out_bf16;
  LaunchKernel(Fp8GemvGroupedTmaKernel<kBf16W>, static_cast<unsigned>(plan.ctas), kThreads, kSmemBytes<kBf16W>,
               p.stream, p.pdl, wmap, amap, k);
  DS_CUDA_CHECK_LAUNCH(kBf16W ? "Fp8GemvGroupedTmaKernel<bf16>" : "Fp8GemvGroupedTmaKernel");
}

}  // namespace

Fp8GemvGroupedPlan Fp8GemvGroupedPlanFor(const Fp8GemvGroupedParams& p) {
  CheckShape(p);
  Fp8GemvGroupedPlan plan;
  plan.slots = Slots(p);
  plan.tiles = (p.N + kTileRows - 1) / kTileRows;
  const int64_t kb = (p.K + UnitK(p.w_bf16) - 1) / UnitK(p.w_bf16);
  plan.units = plan.slots * plan.tiles * kb;
  // The weights' row pitch a multiple of 16 bytes (TMA): K % 16 e4m3, K % 8 bf16.
  plan.tma = CurrentDeviceProps().sm90 && p.K % (p.w_bf16 ? 8 : 16) == 0 && p.lda % 8 == 0 && Aligned16(p.a) &&
             Aligned16(p.w) && p.num_experts * p.N < (int64_t{1} << 31) && p.num_experts <= 65536 &&
             plan.slots <= kMaxSlots;
  if (plan.tma) {
    plan.ctas = AutoCtas(plan.units, p.ctas, p.w_bf16);
    plan.workspace_bytes = WorkspaceBytes(p.num_experts, plan.tiles, kb, p.ctas, p.w_bf16);
  }
  return plan;
}

size_t Fp8GemvGroupedWorkspaceBytes(int64_t E, int64_t N, int64_t K, int ctas, bool w_bf16) {
  DS_CHECK(E >= 1 && N >= 1 && K >= 1) << "Fp8GemvGroupedWorkspaceBytes: bad shape E=" << E << " N=" << N << " K=" << K;
  return WorkspaceBytes(E, (N + kTileRows - 1) / kTileRows, (K + UnitK(w_bf16) - 1) / UnitK(w_bf16), ctas, w_bf16);
}

void Fp8GemvGrouped(const Fp8GemvGroupedParams& p) {
  CheckShape(p);
  if (p.max_rows == 0 || p.max_group_rows == 0) return;
  const char* name = Name(p.w_bf16);
  DS_CHECK(p.a && p.offsets && p.w && (p.w_bf16 || p.w_scales) && p.out)
      << name << ": null pointer (a, offsets, w, " << (p.w_bf16 ? "" : "w_scales ") << "or out)";
  const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(p);
  if (!plan.tma) {
    DS_CHECK(plan.slots < 65536) << name << ": too many slots for the generic path: " << plan.slots;
    const GArgs g{p.a, p.lda, p.a_rows, p.offsets, p.w, p.w_bf16 ? nullptr : p.w_scales, p.out, p.ldo,
                  static_cast<int>(p.num_experts), p.N, p.K, p.out_bf16};
    const dim3 grid(static_cast<unsigned>(dev::CeilDiv(p.N, 8)), static_cast<unsigned>(plan.slots));
    if (p.w_bf16) LaunchKernel(Fp8GemvGroupedGenericKernel<true>, grid, kGenThreads, 0, p.stream, p.pdl, g);
    else LaunchKernel(Fp8GemvGroupedGenericKernel<false>, grid, kGenThreads, 0, p.stream, p.pdl, g);
    DS_CUDA_CHECK_LAUNCH(p.w_bf16 ? "Fp8GemvGroupedGenericKernel<bf16>" : "Fp8GemvGroupedGenericKernel");
    return;
  }
  DS_CHECK(p.workspace != nullptr && p.workspace_bytes >= plan.workspace_bytes && Aligned16(p.workspace))
      << name << ": the TMA path needs " << plan.workspace_bytes << " bytes of 16-byte aligned workspace (have "
      << p.workspace_bytes << ")";
  DS_CHECK(plan.ctas < (int64_t{1} << 31)) << name << ": grid too large";
  if (p.w_bf16) LaunchTma<true>(p, plan);
  else LaunchTma<false>(p, plan);
}

}  // namespace ds::cuda
