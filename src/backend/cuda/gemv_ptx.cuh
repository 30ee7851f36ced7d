// PTX wrappers shared by the decode-size GEMV / GEMM kernels (skinny_gemm.cu, moe_persistent.cu).
// Include only from .cu files.
#pragma once

#include <cstdint>

namespace ds::cuda::ptx {

// Weight stream: 16 bytes through the read-only path, not kept in L1 (each weight is read once;
// the kernels never write them).
__device__ __forceinline__ uint4 LdStream(const void* ptr) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(ptr));
  return r;
}

// D += A (16 x 16, row) * B (16 x 8, col) on the tensor cores: bf16 in, fp32 accumulate
// (mma.sync.aligned.m16n8k16; PTX ISA, "Matrix Fragments for mma.m16n8k16" for the layouts).
__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace ds::cuda::ptx
