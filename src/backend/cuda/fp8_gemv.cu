// FP8 GEMV for decode: see fp8_gemv.h for the math, the design and its numbers.
// PTX sources: PTX ISA 8.x, "cp.async.bulk.tensor", "mbarrier" (expect_tx, try_wait.parity,
// complete_tx), "cp.async.mbarrier.arrive" (.noinc), "createpolicy", "mma" (m16n8k16 .bf16
// fragment layouts); the tensor-map fields: CUDA driver API, cuTensorMapEncodeTiled.
#include "backend/cuda/fp8_gemv.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

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
using sm90::BarInit;
using sm90::FenceProxyAsync;
using sm90::SmemAddr;

// ---- geometry of the TMA path (the ring's: fp8_gemv_common.cuh)
constexpr int kBarBytes = 2 * kStages * 8 + kStages * 4;  // full / empty mbarriers, scales
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kBarBytes;  // + alignment slack

struct KArgs {
  const float* scales;  // [tiles, kb] (tiles = ceil(N / 128) = the scale blocks along N)
  void* out;
  int64_t ldo;
  int M, N, kb;         // kb = ceil(K / 128): units per tile
  int64_t units, ctas;
  uint32_t* counters;   // [tiles, 8]
  float4* partials;     // [ctas, 2, 8 warps, 32 lanes]
  bool out_bf16;
  bool prefetch_weights;  // Fp8GemvParams::prefetch_weights: the first ring's weights before the PDL wait
};

// The TMA path (see fp8_gemv.h). Shared memory: kStages x [weights 128 x 128 B | activations
// 2 x (8 x 128 B)], every box 128-byte swizzled (16-byte chunk c of row r at chunk c ^ (r % 8)).
//
// Lane (g = lane / 4, q = lane % 4) of consumer warp w holds weight rows r = 16 w + g and r + 8
// of the tile (the mma A fragment's rows) and activation row g (the B fragment's column). Its k
// within a unit are [32 q, 32 q + 32): weight chunks 2q (h = 0) and 2q + 1 (h = 1), read at
// chunk (2q + h) ^ g: in each LDS the 8 lanes of rows g, g + 1 hit 8 distinct 16-byte chunks
// (one parity each), so weight reads are conflict-free; activation reads (16 bytes from box
// q / 2) are 2-way conflicted (4 of 12 LDS.128 per lane and stage). mma step (h, s), s = 0..3:
// word s of each weight chunk (k0 = 32 q + 16 h + 4 s, 4 bytes) gives a0 / a2 = (k0, k0 + 2) /
// (k0 + 1, k0 + 3) of row r, a1 / a3 the same of row r + 8; b0 / b1 = the activations of row g
// at the same (k0, k0 + 2) / (k0 + 1, k0 + 3) (two PRMTs). The mma sums over its 16 k in any
// order, so A and B only need the same permutation, which they have.
__global__ void __launch_bounds__(kThreads, 2)
    Fp8GemvTmaKernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap amap, const KArgs p) {
  // First, before any global-memory access (launch.cuh), but with prefetch_weights: then only the
  // producer's weight and scale loads of the first ring come before it (read-only data that no
  // kernel in flight writes: Fp8GemvParams::prefetch_weights), and every other access after.
  if (!p.prefetch_weights) dev::PdlWaitThenRelease();
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = SmemAddr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* sm = smem_raw + (base - raw);
  const uint32_t bar_full = base + kStages * kStageBytes, bar_empty = bar_full + kStages * 8;
  const uint32_t s_scale = bar_empty + kStages * 8;
  const float* scale_sm = reinterpret_cast<const float*>(sm + kStages * kStageBytes + 2 * kStages * 8);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t cta = blockIdx.x, U = p.units, C = p.ctas;
  const int64_t u_begin = cta * U / C, u_end = (cta + 1) * U / C;
  const int n_units = static_cast<int>(u_end - u_begin);
  const int KB = p.kb;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      BarInit(bar_full + s * 8, 1);                 // the scale's cp.async arrival (+ the TMA bytes)
      BarInit(bar_empty + s * 8, kConsumerWarps);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // producer: one thread issues every load of this CTA's units
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&wmap)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&amap)) : "memory");
      const uint64_t pol_w = EvictFirstPolicy(), pol_a = EvictLastPolicy();
      // Weights + scale of unit u_begin + i into stage st; the stage's "full" barrier expects the
      // activation boxes' bytes too, so it cannot complete before they land.
      const auto load_weights = [&](int i, int st) {
        const int64_t u = u_begin + i;
        const uint32_t full = bar_full + st * 8, dst = base + st * kStageBytes;
        BarExpectTxOnly(full, kStageBytes);
        TmaLoad2d(dst, &wmap, static_cast<int>(u % KB) * kUnitK, static_cast<int>(u / KB) * kTileRows, full, pol_w);
        CpAsync4(s_scale + st * 4, p.scales + u);  // scales [tile, kb] = unit order
        CpAsyncArriveNoinc(full);
      };
      const auto load_activations = [&](int i, int st) {
        const int kb = static_cast<int>((u_begin + i) % KB);
        const uint32_t full = bar_full + st * 8, dst = base + st * kStageBytes;
        TmaLoad2d(dst + kWBytes, &amap, kb * kUnitK, 0, full, pol_a);
        TmaLoad2d(dst + kWBytes + kABoxBytes, &amap, kb * kUnitK + 64, 0, full, pol_a);
      };
      const int n_pre = p.prefetch_weights ? min(n_units, kStages) : 0;
      for (int i = 0; i < n_pre; ++i) load_weights(i, i);
      if (p.prefetch_weights) dev::PdlWaitThenRelease();  // the activations are the predecessor's output
      for (int i = 0; i < n_pre; ++i) load_activations(i, i);
      int st = n_pre % kStages;
      uint32_t phase = n_pre == kStages ? 1u : 0u;
      for (int i = n_pre; i < n_units; ++i) {
        if (i >= kStages) MbarWait(bar_empty + st * 8, phase ^ 1u);
        load_weights(i, st);
        load_activations(i, st);
        if (++st == kStages) { st = 0; phase ^= 1u; }
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
    return;
  }

  // ---- consumers
  if (p.prefetch_weights) dev::PdlWaitThenRelease();  // before the workspace and output accesses
  const int g = lane >> 2, q = lane & 3;
  const int r = 16 * warp + g;  // weight row in the tile (and r + 8)
  const uint32_t w_off0 = r * 128 + (((2 * q) ^ g) << 4), w_off1 = r * 128 + (((2 * q + 1) ^ g) << 4);
  const uint32_t a_off = kWBytes + (q >> 1) * kABoxBytes + g * 128;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int64_t seg_begin = u_begin;
  int st = 0, t = static_cast<int>(u_begin / KB), kb = static_cast<int>(u_begin % KB);  // unit u_begin + i
  uint32_t phase = 0;
  for (int i = 0; i < n_units; ++i) {
    MbarWait(bar_full + st * 8, phase);
    const uint8_t* stage = sm + st * kStageBytes;
    StageFrags f;  // the lane's fragments of the stage, then the tensor-core math (fp8_gemv_common.cuh)
    f.wa0 = *reinterpret_cast<const uint4*>(stage + w_off0);
    f.wa1 = *reinterpret_cast<const uint4*>(stage + w_off1);
    f.wb0 = *reinterpret_cast<const uint4*>(stage + w_off0 + 8 * 128);  // row r + 8: same swizzle
    f.wb1 = *reinterpret_cast<const uint4*>(stage + w_off1 + 8 * 128);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      f.av[e] = *reinterpret_cast<const uint4*>(stage + a_off + (((4 * (q & 1) + e) ^ g) << 4));
    const float sc = scale_sm[st];
    __syncwarp();
    if (lane == 0) BarArrive(bar_empty + st * 8);  // the stage is in registers: release it
    if (++st == kStages) { st = 0; phase ^= 1u; }

    float part[4] = {0.f, 0.f, 0.f, 0.f};
    StageMma(f, part);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] = fmaf(sc, part[j], acc[j]);

    const int64_t u = u_begin + i;
    if (kb != KB - 1 && i != n_units - 1) {
      ++kb;
      continue;
    }
    // ---- end of this CTA's segment of tile t: units [seg_begin, u]
    const int64_t tile_u0 = int64_t{t} * KB;
    float v[4] = {acc[0], acc[1], acc[2], acc[3]};
    bool write = true;
    if (seg_begin != tile_u0 || u != tile_u0 + KB - 1)  // split tile: partials + last-arriver sum
      write = SplitTileSum(p.partials, p.counters + static_cast<int64_t>(t) * kConsumerWarps + warp, tile_u0, KB, U, C, cta,
                           seg_begin == u_begin ? 0 : 1, warp, lane, acc, v);
    if (write) {
      // C fragment: v[0], v[1] = weight row r, activation rows 2q, 2q + 1; v[2], v[3] = row r + 8.
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = t * kTileRows + r + (j >> 1) * 8, row = 2 * q + (j & 1);
        if (n < p.N && row < p.M) {
          if (p.out_bf16)
            static_cast<__nv_bfloat16*>(p.out)[row * p.ldo + n] = __float2bfloat16_rn(v[j]);
          else
            static_cast<float*>(p.out)[row * p.ldo + n] = v[j];
        }
      }
    }
    acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
    seg_begin = u + 1;
    kb = 0;
    ++t;
  }
}

// The generic path: one warp per weight row, lane l takes k = l, l + 32, ... of each 128-k
// block; per-block partials times the scale, fp32 FMAs, a butterfly warp sum (fixed order).
struct GArgs {
  const __nv_bfloat16* a;
  int64_t lda;
  const uint8_t* w;
  const float* scales;
  void* out;
  int64_t ldo;
  int M;
  int64_t N, K;
  bool out_bf16;
};

__global__ void __launch_bounds__(256) Fp8GemvGenericKernel(const GArgs p) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (n >= p.N) return;
  const int64_t KB = (p.K + 127) / 128;
  const uint8_t* wr = p.w + n * p.K;
  const float* srow = p.scales + (n / 128) * KB;
  float acc[kFp8GemvMaxRows] = {};
  for (int64_t kb = 0; kb < KB; ++kb) {
    float part[kFp8GemvMaxRows] = {};
    const int64_t kend = std::min(p.K, kb * 128 + 128);
    for (int64_t k = kb * 128 + lane; k < kend; k += 32) {
      const float wv = dev::E4M3ToF32(wr[k]);
#pragma unroll
      for (int row = 0; row < kFp8GemvMaxRows; ++row)
        if (row < p.M) part[row] = fmaf(__bfloat162float(p.a[row * p.lda + k]), wv, part[row]);
    }
    const float sc = srow[kb];
#pragma unroll
    for (int row = 0; row < kFp8GemvMaxRows; ++row) acc[row] = fmaf(sc, part[row], acc[row]);
  }
#pragma unroll
  for (int row = 0; row < kFp8GemvMaxRows; ++row) {
    const float v = dev::WarpSum(acc[row]);
    if (lane == 0 && row < p.M) {
      if (p.out_bf16) static_cast<__nv_bfloat16*>(p.out)[row * p.ldo + n] = __float2bfloat16_rn(v);
      else static_cast<float*>(p.out)[row * p.ldo + n] = v;
    }
  }
}

// ---- host side

// Resident TMA-path CTAs per SM on the current device, cached per device.
int CtasPerSm() { return ResidentCtasPerSm(Fp8GemvTmaKernel, kThreads, static_cast<int>(kSmemBytes)); }

void CheckShape(const Fp8GemvParams& p) {
  DS_CHECK(p.M >= 0 && p.M <= kFp8GemvMaxRows) << "Fp8Gemv: M = " << p.M << " (0.." << kFp8GemvMaxRows << ")";
  DS_CHECK(p.N >= 1 && p.K >= 1) << "Fp8Gemv: bad shape N=" << p.N << " K=" << p.K;
  DS_CHECK(p.N < (int64_t{1} << 31) && p.K < (int64_t{1} << 31)) << "Fp8Gemv: N=" << p.N << " K=" << p.K << " too large";
  DS_CHECK(p.M == 0 || (p.lda >= p.K && p.ldo >= p.N))
      << "Fp8Gemv: lda " << p.lda << " < K " << p.K << " or ldo " << p.ldo << " < N " << p.N;
}

int64_t AutoCtas(int64_t units, int ctas) {
  if (ctas > 0) return std::min<int64_t>(ctas, units);
  const int64_t slots = int64_t{std::max(1, CurrentDeviceProps().sms)} * CtasPerSm();
  return std::max<int64_t>(1, std::min(slots, units / kMinUnitsPerCta));
}

}  // namespace

Fp8GemvPlan Fp8GemvPlanFor(const Fp8GemvParams& p) {
  CheckShape(p);
  Fp8GemvPlan plan;
  plan.tma = CurrentDeviceProps().sm90 && p.K % 16 == 0 && p.lda % 8 == 0 && Aligned16(p.a) && Aligned16(p.w);
  plan.tiles = (p.N + kTileRows - 1) / kTileRows;
  plan.units = plan.tiles * ((p.K + kUnitK - 1) / kUnitK);
  if (plan.tma) {
    plan.ctas = AutoCtas(plan.units, p.ctas);
    plan.workspace_bytes = CounterBytes(plan.tiles) + static_cast<size_t>(plan.ctas) * kPartialBytesPerCta;
  }
  return plan;
}

size_t Fp8GemvWorkspaceBytes(int64_t N, int64_t K, int ctas) {
  DS_CHECK(N >= 1 && K >= 1) << "Fp8GemvWorkspaceBytes: bad shape N=" << N << " K=" << K;
  const int64_t tiles = (N + kTileRows - 1) / kTileRows, units = tiles * ((K + kUnitK - 1) / kUnitK);
  return CounterBytes(tiles) + static_cast<size_t>(AutoCtas(units, ctas)) * kPartialBytesPerCta;
}

void Fp8Gemv(const Fp8GemvParams& p) {
  CheckShape(p);
  if (p.M == 0) return;
  DS_CHECK(p.a && p.w && p.w_scales && p.out) << "Fp8Gemv: null pointer (a, w, w_scales or out)";
  const Fp8GemvPlan plan = Fp8GemvPlanFor(p);
  if (!plan.tma) {
    const GArgs g{p.a, p.lda, p.w, p.w_scales, p.out, p.ldo, static_cast<int>(p.M), p.N, p.K, p.out_bf16};
    LaunchKernel(Fp8GemvGenericKernel, static_cast<unsigned>(dev::CeilDiv(p.N, 8)), 256, 0, p.stream, p.pdl, g);
    DS_CUDA_CHECK_LAUNCH("Fp8GemvGenericKernel");
    return;
  }
  DS_CHECK(p.workspace != nullptr && p.workspace_bytes >= plan.workspace_bytes && Aligned16(p.workspace))
      << "Fp8Gemv: the TMA path needs " << plan.workspace_bytes << " bytes of 16-byte aligned workspace (have "
      << p.workspace_bytes << ")";
  DS_CHECK(plan.ctas < (int64_t{1} << 31)) << "Fp8Gemv: grid too large";
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(Fp8GemvTmaKernel), kSmemBytes);
  const CUtensorMap wmap = MakeMap(CU_TENSOR_MAP_DATA_TYPE_UINT8, p.w, p.K, p.N, p.K, kUnitK, kTileRows);
  const CUtensorMap amap = MakeMap(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, p.a, p.K, p.M, p.lda * 2, 64, 8);
  KArgs k{};
  k.scales = p.w_scales;
  k.out = p.out;
  k.ldo = p.ldo;
  k.M = static_cast<int>(p.M);
  k.N = static_cast<int>(p.N);
  k.kb = static_cast<int>((p.K + kUnitK - 1) / kUnitK);
  k.units = plan.units;
  k.ctas = plan.ctas;
  k.counters = static_cast<uint32_t*>(p.workspace);
  k.partials = reinterpret_cast<float4*>(static_cast<uint8_t*>(p.workspace) + CounterBytes(plan.tiles));
  k.out_bf16 = p.out_bf16;
  k.prefetch_weights = p.prefetch_weights;
  LaunchKernel(Fp8GemvTmaKernel, static_cast<unsigned>(plan.ctas), kThreads, kSmemBytes, p.stream, p.pdl, wmap, amap,
               k);
  DS_CUDA_CHECK_LAUNCH("Fp8GemvTmaKernel");
}

}  // namespace ds::cuda
