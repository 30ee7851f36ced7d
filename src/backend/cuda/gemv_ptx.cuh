// PTX wrappers shared by the decode-size GEMV / GEMM kernels (skinny_gemm.cu, moe_persistent.cu,
// mla_q_absorb.cu, mla_attn_persistent.cu) and the mma.sync MLA decode (mla_decode_tc.cu).
// Include only from .cu files.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace ds::cuda::ptx {

// Weight stream: 16 bytes through the read-only path, not kept in L1 (each weight is read once;
// the kernels never write them).
// (DS_LDG_STREAM: the one load these wrappers issue, `VOLATILE` asm or not, with the L2 fetch
// size qualifier `L2Q` ("" or ".L2::128B" / ".L2::256B").)
#define DS_LDG_STREAM(VOLATILE, L2Q, r, ptr)                                         \
  asm VOLATILE("ld.global.nc.L1::no_allocate" L2Q ".v4.u32 {%0,%1,%2,%3}, [%4];" \
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)                      \
               : "l"(ptr))

// LdStream with an L2 fetch size (kPf: 0 none, LdStream itself; 1 ".L2::128B"; 2 ".L2::256B"):
// a miss fetches that aligned block into L2 (PTX ISA, "ld", .level::prefetch_size), so the
// neighbouring 64-byte pieces a warp reads next hit it (session 21; 128 bytes is the persistent
// kernels' default: MlaAttnPersistentParams / MoePersistentParams::l2_fetch).
template <int kPf>
__device__ __forceinline__ uint4 LdStreamPf(const void* ptr) {
  uint4 r;
  if constexpr (kPf == 2) DS_LDG_STREAM(, ".L2::256B", r, ptr);
  else if constexpr (kPf == 1) DS_LDG_STREAM(, ".L2::128B", r, ptr);
  else DS_LDG_STREAM(, "", r, ptr);
  return r;
}
__device__ __forceinline__ uint4 LdStream(const void* ptr) { return LdStreamPf<0>(ptr); }

// D += A (16 x 16, row) * B (16 x 8, col) on the tensor cores: bf16 in, fp32 accumulate
// (mma.sync.aligned.m16n8k16; PTX ISA, "Matrix Fragments for mma.m16n8k16" for the layouts).
__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ldmatrix .x4 from shared memory (`addr` a shared-state-space address): four 8x8 b16 matrices,
// as the mma A / B fragments take them; Ldsm4T transposes each (PTX ISA 8.x, "ldmatrix").
__device__ __forceinline__ void Ldsm4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void Ldsm4T(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// 16 bytes global -> shared (dst: a shared-state-space address), through L2 only (cp.async.cg);
// !valid reads no source byte and zero-fills the 16 destination bytes (PTX ISA 8.x, "cp.async").
// Used by grouped_gemm.cu and mla_attn_persistent.cu.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// Steps (32 k each) WarpTile16 loads before it multiplies: 16 loads of 16 bytes a lane in flight.
inline constexpr int kTileBurst = 8;

// One warp: the dot products of 16 weight rows with activations over `steps` * 32 elements, on
// the tensor cores (mma m16n8k16, the weights as the 16-row operand; "swap AB" as in
// skinny_gemm.cu). Lane l = 4 g + q streams 16 bytes of its rows ra (row g of the tile) and rb
// (row g + 8) at k = 32 s + 8 q per step s, and the same 8 elements of B's column g, xg (this
// lane's own column: shared memory): within an mma the virtual k index 2q + {0, 1} holds actual
// k 8q + {0, 1} (then 8q + {2, 3} at 2q + 8 + {0, 1}; the second mma takes 8q + 4..7), the same
// permutation for every row and column, so each output is the full dot product. d[j] is row
// g . column 2q + j, d[2 + j] row g + 8 . column 2q + j (the C fragment). Used by mla_q_absorb.cu
// (the columns are tokens).
template <int kPf = 0>
__device__ __forceinline__ void WarpTile16Cols(const __nv_bfloat16* ra, const __nv_bfloat16* rb,
                                               const __nv_bfloat16* xg, int steps, float (&d)[4]) {
  const int q = threadIdx.x & 3;
  const uint4* a4 = reinterpret_cast<const uint4*>(ra) + q;
  const uint4* b4 = reinterpret_cast<const uint4*>(rb) + q;
  const uint4* x4 = reinterpret_cast<const uint4*>(xg) + q;
  // Every burst's loads are unconditional (a step past the end reloads the last one, unused; an
  // L2 hit, e.g. 4 of 48 loads a lane in V2-Lite's 22-step down units):
  // with each load guarded by its step's bound, the compiler merged each guarded load into its
  // guarded mma (one step's loads in flight at a time; session 21's SASS of the MoE kernel).
  for (int s0 = 0; s0 < steps; s0 += kTileBurst) {
    uint4 va[kTileBurst], vb[kTileBurst];
#pragma unroll
    for (int u = 0; u < kTileBurst; ++u) {
      const int su = min(s0 + u, steps - 1);
      va[u] = LdStreamPf<kPf>(a4 + 4 * su);
      vb[u] = LdStreamPf<kPf>(b4 + 4 * su);
    }
#pragma unroll
    for (int u = 0; u < kTileBurst; ++u) {
      if (s0 + u < steps) {
        const uint4 xv = x4[4 * (s0 + u)];
        Mma(d, va[u].x, vb[u].x, va[u].y, vb[u].y, xv.x, xv.y);
        Mma(d, va[u].z, vb[u].z, va[u].w, vb[u].w, xv.z, xv.w);
      }
    }
  }
}

// WarpTile16Cols with two activation vectors: B's column 1 holds xb (lanes g == 1), every other
// column xa, so d[0] is row g . xa, d[3] row g + 8 . xb (d[2] = row g + 8 . xa). Used by
// moe_persistent.cu and mla_attn_persistent.cu.
template <int kPf = 0>
__device__ __forceinline__ void WarpTile16(const __nv_bfloat16* ra, const __nv_bfloat16* rb, const __nv_bfloat16* xa,
                                           const __nv_bfloat16* xb, int steps, float (&d)[4]) {
  WarpTile16Cols<kPf>(ra, rb, ((threadIdx.x & 31) >> 2) == 1 ? xb : xa, steps, d);
}

// Weight loads issued where they are written (asm volatile: not sunk past a grid barrier to their
// use), 16 bytes through the read-only path, not kept in L1 (as ptx::LdStream).
template <int kPf = 0>
__device__ __forceinline__ uint4 LdStreamNow(const void* ptr) {
  uint4 r;
  if constexpr (kPf == 2) DS_LDG_STREAM(volatile, ".L2::256B", r, ptr);
  else if constexpr (kPf == 1) DS_LDG_STREAM(volatile, ".L2::128B", r, ptr);
  else DS_LDG_STREAM(volatile, "", r, ptr);
  return r;
}
// A warp's slice of one 16-row weight tile (at most kTileBurst 32-element steps), loaded ahead
// of its activations (before a grid barrier, or a block's wait for them): WarpTile16Cols's loads,
// lane l = 4 g + q holding rows g and g + 8 at k = 32 s + 8 q.
struct WarpSlice {
  uint4 a[kTileBurst], b[kTileBurst];
};
template <int kPf = 0>
__device__ __forceinline__ void LoadSlice(const __nv_bfloat16* ra, const __nv_bfloat16* rb, int steps, WarpSlice& w) {
  const int q = threadIdx.x & 3;
#pragma unroll
  for (int u = 0; u < kTileBurst; ++u) {
    if (u < steps) {
      w.a[u] = LdStreamNow<kPf>(reinterpret_cast<const uint4*>(ra) + q + 4 * u);
      w.b[u] = LdStreamNow<kPf>(reinterpret_cast<const uint4*>(rb) + q + 4 * u);
    }
  }
}
// WarpTile16Cols's mma sequence on a loaded slice (x: this lane's column of the activations in
// shared memory, at the slice's first k: WarpTile16Cols's xg). Used by mla_attn_persistent.cu;
// WarpTile16 over the rest of a row after it continues the same mma order.
__device__ __forceinline__ void MmaSlice(const WarpSlice& w, const __nv_bfloat16* x, int steps, float (&d)[4]) {
  const uint4* x4 = reinterpret_cast<const uint4*>(x) + (threadIdx.x & 3);
#pragma unroll
  for (int u = 0; u < kTileBurst; ++u) {
    if (u < steps) {
      const uint4 xv = x4[4 * u];
      Mma(d, w.a[u].x, w.b[u].x, w.a[u].y, w.b[u].y, xv.x, xv.y);
      Mma(d, w.a[u].z, w.b[u].z, w.a[u].w, w.b[u].w, xv.z, xv.w);
    }
  }
}

}  // namespace ds::cuda::ptx
