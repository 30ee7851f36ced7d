// FP8 GEMV for decode: see fp8_gemv.h for the math, the design and its numbers.
// PTX sources: PTX ISA 8.x, "cp.async.bulk.tensor", "mbarrier" (expect_tx, try_wait.parity,
// complete_tx), "cp.async.mbarrier.arrive" (.noinc), "createpolicy", "mma" (m16n8k16 .bf16
// fragment layouts); the tensor-map fields: CUDA driver API, cuTensorMapEncodeTiled.
#include "backend/cuda/fp8_gemv.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/sm90_ptx.cuh"
#include "common/check.h"

namespace ds::cuda {
namespace {

using sm90::BarArrive;
using sm90::BarInit;
using sm90::BarTryWait;
using sm90::FenceProxyAsync;
using sm90::SmemAddr;

// ---- geometry of the TMA path
constexpr int kTileRows = 128;                      // weight rows per unit (one scale block)
constexpr int kUnitK = 128;                         // k per unit (one scale block)
constexpr int kConsumerWarps = kTileRows / 16;      // 16 weight rows (one mma tile) each
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
constexpr int kStages = 6;
constexpr int kWBytes = kTileRows * kUnitK;         // weights of one unit: 128 rows x 128 bytes
constexpr int kABoxBytes = 8 * 64 * 2;              // activations: 8 rows x 64 k bf16 (one TMA box)
constexpr int kStageBytes = kWBytes + 2 * kABoxBytes;  // 18 KB, a multiple of 1024 (swizzle atoms)
constexpr int kBarBytes = 2 * kStages * 8 + kStages * 4;  // full / empty mbarriers, scales
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kBarBytes;  // + alignment slack
constexpr int kMinUnitsPerCta = 2;
constexpr size_t kPartialBytesPerCta = size_t{2} * kConsumerWarps * 32 * 16;  // 2 slots x 8 warps x 32 lanes x float4

static_assert(kStageBytes % 1024 == 0, "stages must keep the 1024-byte alignment of the 128-byte swizzle");

// ---- device helpers
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  while (!BarTryWait(bar, parity)) {
  }
}
// Adds `bytes` to the transaction count of the barrier's current phase, without an arrival.
__device__ __forceinline__ void BarExpectTxOnly(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ uint64_t EvictFirstPolicy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__device__ __forceinline__ uint64_t EvictLastPolicy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// One 2-D box of `map` at coordinates (x = innermost, y) into shared memory at dst, completing
// its bytes on the mbarrier, with an L2 cache-policy hint.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "l"(policy)
      : "memory");
}
// 4 bytes global -> shared (cp.async), and an arrival on `bar` once this thread's cp.asyncs land.
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void CpAsyncArriveNoinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ uint32_t Bf16x2Mul2p120(uint32_t t) {
  __nv_bfloat162 v;
  __builtin_memcpy(&v, &t, 4);
  v = __hmul2(v, __nv_bfloat162(__float2bfloat16_rn(0x1p120f), __float2bfloat16_rn(0x1p120f)));
  __builtin_memcpy(&t, &v, 4);
  return t;
}
// Four e4m3 bytes x = [b3 b2 b1 b0] to two bf16x2, exactly: even = (b0, b2), odd = (b1, b3)
// (low half first). An e4m3 byte's sign moves to bf16 bit 15 and its 7 exponent/mantissa bits
// to bf16 bits 4..10, which is the value times 2^-120 for normal and subnormal e4m3 alike (bf16
// has 8 exponent bits: e4m3's exponent field lands in its low 4, its 3 mantissa bits on top of
// bf16's 7); one bf16 multiply by 2^120 (exact) restores it. The odd bytes already sit in the
// high byte of each 16-bit half (sign in place, magnitude >> 4); the even ones are shifted up 8
// first. The caller pairs (b0, b2) and (b1, b3) with the same activation permutation.
__device__ __forceinline__ void E4m3x4ToBf16(uint32_t x, uint32_t& even, uint32_t& odd) {
  odd = Bf16x2Mul2p120(((x >> 4) & 0x07F007F0u) | (x & 0x80008000u));
  even = Bf16x2Mul2p120(((x << 4) & 0x07F007F0u) | ((x << 8) & 0x80008000u));
}

// D += A(16x16, row) * B(16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

struct KArgs {
  const float* scales;  // [tiles, kb] (tiles = ceil(N / 128) = the scale blocks along N)
  void* out;
  int64_t ldo;
  int M, N, kb;         // kb = ceil(K / 128): units per tile
  int64_t units, ctas;
  uint32_t* counters;   // [tiles, 8]
  float4* partials;     // [ctas, 2, 8 warps, 32 lanes]
  bool out_bf16;
};

// The CTA whose unit range holds unit u: the largest c with c * U / C <= u.
__device__ __forceinline__ int64_t CtaOf(int64_t u, int64_t U, int64_t C) { return ((u + 1) * C - 1) / U; }

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
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
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
      int st = 0, t = static_cast<int>(u_begin / KB), kb = static_cast<int>(u_begin % KB);
      uint32_t phase = 0;
      for (int i = 0; i < n_units; ++i) {
        if (i >= kStages) MbarWait(bar_empty + st * 8, phase ^ 1u);
        const int64_t u = u_begin + i;
        const uint32_t full = bar_full + st * 8, dst = base + st * kStageBytes;
        BarExpectTxOnly(full, kStageBytes);
        TmaLoad2d(dst, &wmap, kb * kUnitK, t * kTileRows, full, pol_w);
        TmaLoad2d(dst + kWBytes, &amap, kb * kUnitK, 0, full, pol_a);
        TmaLoad2d(dst + kWBytes + kABoxBytes, &amap, kb * kUnitK + 64, 0, full, pol_a);
        CpAsync4(s_scale + st * 4, p.scales + u);  // scales [tile, kb] = unit order
        CpAsyncArriveNoinc(full);
        if (++st == kStages) { st = 0; phase ^= 1u; }
        if (++kb == KB) { kb = 0; ++t; }
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
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
  int st = 0, t = static_cast<int>(u_begin / KB), kb = static_cast<int>(u_begin % KB);  // unit u_begin + i
  uint32_t phase = 0;
  for (int i = 0; i < n_units; ++i) {
    MbarWait(bar_full + st * 8, phase);
    const uint8_t* stage = sm + st * kStageBytes;
    const uint4 wa0 = *reinterpret_cast<const uint4*>(stage + w_off0);
    const uint4 wa1 = *reinterpret_cast<const uint4*>(stage + w_off1);
    const uint4 wb0 = *reinterpret_cast<const uint4*>(stage + w_off0 + 8 * 128);  // row r + 8: same swizzle
    const uint4 wb1 = *reinterpret_cast<const uint4*>(stage + w_off1 + 8 * 128);
    uint4 av[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      av[e] = *reinterpret_cast<const uint4*>(stage + a_off + (((4 * (q & 1) + e) ^ g) << 4));
    const float sc = scale_sm[st];
    __syncwarp();
    if (lane == 0) BarArrive(bar_empty + st * 8);  // the stage is in registers: release it
    if (++st == kStages) { st = 0; phase ^= 1u; }

    float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4& xa = h == 0 ? wa0 : wa1;
      const uint4& xb = h == 0 ? wb0 : wb1;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        uint32_t a0, a1, a2, a3;
        E4m3x4ToBf16(Word(xa, s), a0, a2);
        E4m3x4ToBf16(Word(xb, s), a1, a3);
        const uint4& act = av[2 * h + (s >> 1)];
        const uint32_t u0 = Word(act, 2 * (s & 1)), u1 = Word(act, 2 * (s & 1) + 1);  // (k0, k0+1), (k0+2, k0+3)
        Mma(part, a0, a1, a2, a3, Prmt(u0, u1, 0x5410u), Prmt(u0, u1, 0x7632u));
      }
    }
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
    if (seg_begin != tile_u0 || u != tile_u0 + KB - 1) {  // split tile: partials + last-arriver sum
      const int64_t c_lo = CtaOf(tile_u0, U, C), c_hi = CtaOf(tile_u0 + KB - 1, U, C);
      const int own_slot = seg_begin == u_begin ? 0 : 1;  // this CTA's first or last segment
      float4* slots = p.partials + static_cast<int64_t>(warp) * 32 + lane;
      __stcg(slots + (cta * 2 + own_slot) * (kConsumerWarps * 32), make_float4(acc[0], acc[1], acc[2], acc[3]));
      __threadfence();
      __syncwarp();
      uint32_t* counter = p.counters + static_cast<int64_t>(t) * kConsumerWarps + warp;
      uint32_t last = 0;
      if (lane == 0) last = atomicAdd(counter, 1u) == static_cast<uint32_t>(c_hi - c_lo);
      last = __shfl_sync(0xffffffffu, last, 0);
      if (last) {
        __threadfence();
        // Sum in CTA order (= k order). CTA c's segment of this tile is its first (slot 0) when
        // its range starts inside the tile (every c > c_lo; c_lo if it starts at the tile's
        // first unit), else its last (slot 1).
        const int lo_slot = c_lo * U / C == tile_u0 ? 0 : 1;
#pragma unroll 8  // independent L2 loads in flight (small shapes: tens of contributors per tile)
        for (int64_t c = c_lo; c <= c_hi; ++c) {
          float4 pv;
          if (c == cta) {
            pv = make_float4(acc[0], acc[1], acc[2], acc[3]);
          } else {
            pv = __ldcg(slots + (c * 2 + (c == c_lo ? lo_slot : 0)) * (kConsumerWarps * 32));
          }
          if (c == c_lo) {
            v[0] = pv.x; v[1] = pv.y; v[2] = pv.z; v[3] = pv.w;
          } else {
            v[0] += pv.x; v[1] += pv.y; v[2] += pv.z; v[3] += pv.w;
          }
        }
        if (lane == 0) *counter = 0u;  // every contributor has arrived: ready for the next launch
      } else {
        write = false;
      }
    }
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
bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Resident TMA-path CTAs per SM on the current device (the occupancy calculator with the
// kernel's shared memory), cached per device.
int CtasPerSm() {
  static std::mutex mu;
  static std::map<int, int> cache;
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(dev);
    if (it != cache.end()) return it->second;
  }
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(Fp8GemvTmaKernel), kSmemBytes);
  int n = 0;
  DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Fp8GemvTmaKernel, kThreads, kSmemBytes));
  n = std::max(n, 1);
  std::lock_guard<std::mutex> lock(mu);
  cache[dev] = n;
  return n;
}

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

size_t CounterBytes(int64_t tiles) { return (static_cast<size_t>(tiles) * kConsumerWarps * 4 + 255) / 256 * 256; }

PFN_cuTensorMapEncodeTiled_v12000 EncodeFn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q));
    DS_CHECK(q == cudaDriverEntryPointSuccess && ptr != nullptr) << "Fp8Gemv: cuTensorMapEncodeTiled not in the driver";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// A 2-D [rows, cols] tensor (row stride row_bytes) for TMA: boxes of box_rows x box_cols, 128-byte
// swizzle, zeros outside the tensor.
CUtensorMap MakeMap(CUtensorMapDataType type, const void* ptr, int64_t cols, int64_t rows, int64_t row_bytes,
                    uint32_t box_cols, uint32_t box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = EncodeFn()(&m, type, 2, const_cast<void*>(ptr), dims, strides, box, estr,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DS_CHECK(r == CUDA_SUCCESS) << "Fp8Gemv: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for "
                              << rows << " x " << cols << ", row bytes " << row_bytes;
  return m;
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
  LaunchKernel(Fp8GemvTmaKernel, static_cast<unsigned>(plan.ctas), kThreads, kSmemBytes, p.stream, p.pdl, wmap, amap,
               k);
  DS_CUDA_CHECK_LAUNCH("Fp8GemvTmaKernel");
}

}  // namespace ds::cuda
