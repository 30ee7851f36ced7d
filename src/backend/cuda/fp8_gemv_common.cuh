// Shared by the TMA-streaming FP8 GEMV kernels (fp8_gemv.cu: Fp8Gemv; fp8_gemv_grouped.cu:
// Fp8GemvGrouped, also with bf16 weights): the unit / ring geometry, the PTX wrappers of the
// producer (TMA boxes, the scale's cp.async and its mbarrier arrival, L2 cache policies), the
// consumers' stage reads and tensor-core math (e4m3 -> bf16 widening, m16n8k16 bf16 MMA; bf16
// weights straight into the MMA), and the host's tensor-map encoding. Moved out of fp8_gemv.cu
// without changing Fp8Gemv's generated code (nvcc 13.0, -arch=sm_90a: its PTX and cubin compared
// identical before and after the move). Not a public header: include only from .cu files.
// PTX sources: PTX ISA 8.x, "cp.async.bulk.tensor", "mbarrier" (expect_tx, try_wait.parity,
// complete_tx), "cp.async.mbarrier.arrive" (.noinc), "createpolicy", "mma" (m16n8k16 .bf16
// fragment layouts); the tensor-map fields: CUDA driver API, cuTensorMapEncodeTiled.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/tensor_map.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/sm90_ptx.cuh"
#include "common/check.h"

namespace ds::cuda::fp8gemv {

// ---- geometry of the TMA path
constexpr int kTileRows = 128;                      // weight rows per unit (one scale block)
constexpr int kUnitK = 128;                         // k per unit (one scale block)
constexpr int kConsumerWarps = kTileRows / 16;      // 16 weight rows (one mma tile) each
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
constexpr int kStages = 6;
constexpr int kWBytes = kTileRows * kUnitK;         // weights of one unit: 128 rows x 128 bytes
constexpr int kABoxBytes = 8 * 64 * 2;              // activations: 8 rows x 64 k bf16 (one TMA box)
constexpr int kStageBytes = kWBytes + 2 * kABoxBytes;  // 18 KB, a multiple of 1024 (swizzle atoms)
constexpr int kMinUnitsPerCta = 2;
constexpr size_t kPartialBytesPerCta = size_t{2} * kConsumerWarps * 32 * 16;  // 2 slots x 8 warps x 32 lanes x float4

static_assert(kStageBytes % 1024 == 0, "stages must keep the 1024-byte alignment of the 128-byte swizzle");

// A unit by weight type (Fp8GemvGrouped's w_bf16): 128 weight rows x 128 bytes of k either way,
// i.e. 128 k of e4m3 (one scale block; two 8-row x 64-k activation boxes, the geometry above) or
// 64 k of bf16 (one activation box: a 17 KB stage).
template <bool kBf16W>
struct UnitGeom {
  static constexpr int kK = kBf16W ? 64 : kUnitK;         // k per unit
  static constexpr int kABoxes = kBf16W ? 1 : 2;          // 8 x 64-k activation boxes per unit
  static constexpr int kStageBytes = kWBytes + kABoxes * kABoxBytes;
  static_assert(kStageBytes % 1024 == 0, "stages must keep the 1024-byte alignment of the 128-byte swizzle");
};
static_assert(UnitGeom<false>::kStageBytes == kStageBytes, "the e4m3 unit is the geometry above");

// ---- device helpers
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  while (!sm90::BarTryWait(bar, parity)) {
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

// ---- consumers: one ring stage in a lane's registers and its tensor-core products. Lane
// (g = lane / 4, q = lane % 4) of consumer warp w holds weight rows r = 16 w + g and r + 8 of
// the unit (the mma A fragment's rows) and activation row g (the B fragment's column); its k
// within the unit are [32 q, 32 q + 32): weight chunks 2q and 2q + 1 of its rows and 64
// activation bytes from box q / 2 (fp8_gemv.cu's kernel comment has the swizzled addresses, the
// bank analysis and the fragment permutation; each kernel reads a stage with the same inline
// loads: through a helper, Fp8Gemv's PTX changed its operand order).
struct StageFrags {
  uint4 wa0, wa1, wb0, wb1;  // weight row r: chunks 2q, 2q + 1; row r + 8: the same
  uint4 av[4];               // activation row g, k [32 q, 32 q + 32)
};
// part += this lane's share of the stage's 16-row x 8-column product over the unit's 128 k.
__device__ __forceinline__ void StageMma(const StageFrags& f, float (&part)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4& xa = h == 0 ? f.wa0 : f.wa1;
    const uint4& xb = h == 0 ? f.wb0 : f.wb1;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t a0, a1, a2, a3;
      E4m3x4ToBf16(Word(xa, s), a0, a2);
      E4m3x4ToBf16(Word(xb, s), a1, a3);
      const uint4& act = f.av[2 * h + (s >> 1)];
      const uint32_t u0 = Word(act, 2 * (s & 1)), u1 = Word(act, 2 * (s & 1) + 1);  // (k0, k0+1), (k0+2, k0+3)
      Mma(part, a0, a1, a2, a3, Prmt(u0, u1, 0x5410u), Prmt(u0, u1, 0x7632u));
    }
  }
}

// The same for a unit of bf16 weights (UnitGeom<true>: 128 rows x 64 k; no widening, no scale):
// acc += this lane's share of the stage's 16-row x 8-column product over the unit's 64 k.
// Lane (g = lane / 4, q = lane % 4) of consumer warp w holds the k [16 q, 16 q + 16) of the
// unit: wa0 / wa1 = 16-byte chunks 2q / 2q + 1 (k 16q .. 16q + 7 / 16q + 8 .. 16q + 15) of
// weight row r = 16 w + g, wb0 / wb1 the same of row r + 8, x0 / x1 the same chunks of
// activation row g. The kernel reads chunk c of row r (128-byte swizzle, r % 8 = g for every
// row the lane touches) at byte r * 128 + ((c ^ g) << 4) of the stage's box; the 8 lanes of a
// quarter warp (rows g, g + 1 of one parity, q = 0..3) hit 8 distinct 16-byte bank groups, for
// the weights and the activations alike (conflict-free). mma step s = 0..3 takes word s of each
// chunk (a 32-bit word = 2 consecutive bf16 of k, the lower k in the low half, as the fragment
// wants): a0 = row r, k 16q + 2s, +1 (chunk 2q); a2 = row r, k 16q + 8 + 2s, +1 (chunk 2q + 1);
// a1 / a3 = row r + 8 likewise; b0 / b1 = activation row g at the same k as a0 / a2. PTX ISA
// "mma.m16n8k16 .bf16" fragments: a0 = (row g, mma k 2q, 2q + 1), a1 = (row g + 8, k 2q, 2q +
// 1), a2 = (row g, k 2q + 8, 2q + 9), a3 = (row g + 8, k 2q + 8, 2q + 9); b0 = (k 2q, 2q + 1,
// column g), b1 = (k 2q + 8, 2q + 9, column g). So mma k 2q + i <-> unit k 16q + 2s + i and mma
// k 2q + 8 + i <-> unit k 16q + 8 + 2s + i, the same map for A and B (the mma sums over its 16
// k in any order); over q = 0..3 and s = 0..3 it covers the unit's 64 k once each.
__device__ __forceinline__ void StageMmaBf16(const uint4& wa0, const uint4& wa1, const uint4& wb0,
                                             const uint4& wb1, const uint4& x0, const uint4& x1, float (&acc)[4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s)
    Mma(acc, Word(wa0, s), Word(wb0, s), Word(wa1, s), Word(wb1, s), Word(x0, s), Word(x1, s));
}

// The CTA whose unit range holds unit u: the largest c with c * U / C <= u.
__device__ __forceinline__ int64_t CtaOf(int64_t u, int64_t U, int64_t C) { return ((u + 1) * C - 1) / U; }

// End of a CTA's segment of a split tile (its units span several CTAs): this warp stores its
// 16 x 8 fp32 partial (acc, lane-distributed) in the CTA's first or last slot (own_slot) of
// `partials` and bumps the tile's per-warp counter; the last of the tile's contributors (CTAs
// c_lo .. c_hi) sums the partials in CTA order (= k order, independent of scheduling) into v,
// resets the counter to 0 for the next launch / graph replay and returns true (it writes the
// tile); the others return false. tile_u0: the tile's first unit, KB units per tile, U units over
// C CTAs. Deterministic; nothing waits across CTAs.
__device__ __forceinline__ bool SplitTileSum(float4* partials, uint32_t* counter, int64_t tile_u0, int KB, int64_t U,
                                             int64_t C, int64_t cta, int own_slot, int warp, int lane,
                                             const float acc[4], float v[4]) {
  const int64_t c_lo = CtaOf(tile_u0, U, C), c_hi = CtaOf(tile_u0 + KB - 1, U, C);
  float4* slots = partials + static_cast<int64_t>(warp) * 32 + lane;
  __stcg(slots + (cta * 2 + own_slot) * (kConsumerWarps * 32), make_float4(acc[0], acc[1], acc[2], acc[3]));
  __threadfence();
  __syncwarp();
  uint32_t last = 0;
  if (lane == 0) last = atomicAdd(counter, 1u) == static_cast<uint32_t>(c_hi - c_lo);
  last = __shfl_sync(0xffffffffu, last, 0);
  if (!last) return false;
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
  return true;
}

// ---- host helpers
inline bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Bytes of the per-(tile, consumer warp) split-K counters of `tiles` 128-row tiles (256-byte
// multiple: the partials that follow them stay aligned).
inline size_t CounterBytes(int64_t tiles) { return (static_cast<size_t>(tiles) * kConsumerWarps * 4 + 255) / 256 * 256; }

inline PFN_cuTensorMapEncodeTiled_v12000 EncodeFn() { return TensorMapEncodeFn(); }  // (tensor_map.h)

// Resident CTAs per SM of a TMA-path kernel (threads per CTA, dynamic shared memory bytes) on
// the current device, by the occupancy calculator; cached per (device, kernel): the instances
// of one kernel template share a signature, so the kernel's address is part of the key.
template <typename Kernel>
int ResidentCtasPerSm(Kernel* kernel, int threads, int smem_bytes) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> cache;
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  const std::pair<int, const void*> key{dev, reinterpret_cast<const void*>(kernel)};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  EnsureMaxDynamicSmem(reinterpret_cast<const void*>(kernel), smem_bytes);
  int n = 0;
  DS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem_bytes));
  n = std::max(n, 1);
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = n;
  return n;
}

// A 2-D [rows, cols] tensor (row stride row_bytes) for TMA: boxes of box_rows x box_cols, 128-byte
// swizzle, zeros outside the tensor.
inline CUtensorMap MakeMap(CUtensorMapDataType type, const void* ptr, int64_t cols, int64_t rows, int64_t row_bytes,
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

}  // namespace ds::cuda::fp8gemv
