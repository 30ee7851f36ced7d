// wgmma.mma_async wrappers (PTX ISA 8.x, "wgmma.mma_async") for the shapes our sm_90a kernels and
// the probe use, one overload per accumulator size: d[64 x N] fp32, a thread holding N / 2 of it
// (thread t of the warpgroup: d[4 i + {0, 1}] at row (t / 32) x 16 + (t % 32) / 4, columns
// 8 i + 2 (t % 4) + {0, 1}; d[4 i + {2, 3}] 8 rows below). Shared-memory operands by descriptor
// (sm90::Desc), both K-major (no transpose). RS forms: A from registers in the mma.m16n8k32 (8-bit)
// or m16n8k16 (bf16) fragment of warp w's 16 rows: a[0] = row r, k 4 (lane % 4) + {0..3} (8-bit;
// bf16: 2 (lane % 4) + {0, 1}); a[1] = row r + 8; a[2], a[3] = the same rows at k + 16 (bf16: + 8);
// r = 16 w + lane / 4. The caller fences (wgmma.fence), commits and waits (sm90_ptx.cuh).
#pragma once

#include <cstdint>

// The accumulator operands of an asm statement: DS_WGMMA_D<R>_REGS, the PTX vector "{%0, ..., %R-1}";
// DS_WGMMA_D<R>_OUT, the matching "+f"(d[i]) outputs (R = N / 2 registers a thread).
#define DS_WGMMA_D32_REGS \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" "}"
#define DS_WGMMA_D32_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define DS_WGMMA_D36_REGS \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35" "}"
#define DS_WGMMA_D36_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
#define DS_WGMMA_D64_REGS \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" "}"
#define DS_WGMMA_D64_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define DS_WGMMA_D72_REGS \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
  "%64, %65, %66, %67, %68, %69, %70, %71" "}"
#define DS_WGMMA_D72_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define DS_WGMMA_D128_REGS \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" "}"
#define DS_WGMMA_D128_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

namespace ds::cuda::sm90 {

// d[64 x 64] (+)= A[64 x 32] (smem, K-major) * B[32 x 64] (smem, K-major), e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaE4m3(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " DS_WGMMA_D32_REGS ", %32, %33, p, 1, 1;\n}\n"
               : DS_WGMMA_D32_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 72] (+)= A[64 x 32] (smem, K-major) * B[32 x 72] (smem, K-major), e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaE4m3(float (&d)[36], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 " DS_WGMMA_D36_REGS ", %36, %37, p, 1, 1;\n}\n"
               : DS_WGMMA_D36_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 128] (+)= A[64 x 32] (smem, K-major) * B[32 x 128] (smem, K-major), e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaE4m3(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DS_WGMMA_D64_REGS ", %64, %65, p, 1, 1;\n}\n"
               : DS_WGMMA_D64_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 144] (+)= A[64 x 32] (smem, K-major) * B[32 x 144] (smem, K-major), e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaE4m3(float (&d)[72], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n144k32.f32.e4m3.e4m3 " DS_WGMMA_D72_REGS ", %72, %73, p, 1, 1;\n}\n"
               : DS_WGMMA_D72_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 256] (+)= A[64 x 32] (smem, K-major) * B[32 x 256] (smem, K-major), e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaE4m3(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " DS_WGMMA_D128_REGS ", %128, %129, p, 1, 1;\n}\n"
               : DS_WGMMA_D128_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 128] (+)= A[64 x 32] (registers) * B[32 x 128] (smem, K-major), e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaE4m3Rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DS_WGMMA_D64_REGS ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
               : DS_WGMMA_D64_OUT
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// d[64 x 256] (+)= A[64 x 32] (registers) * B[32 x 256] (smem, K-major), e4m3 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaE4m3Rs(float (&d)[128], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " DS_WGMMA_D128_REGS ", {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
               : DS_WGMMA_D128_OUT
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// d[64 x 64] (+)= A[64 x 16] (smem, K-major) * B[16 x 64] (smem, K-major), bf16 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaBf16(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " DS_WGMMA_D32_REGS ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : DS_WGMMA_D32_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 128] (+)= A[64 x 16] (smem, K-major) * B[16 x 128] (smem, K-major), bf16 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaBf16(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DS_WGMMA_D64_REGS ", %64, %65, p, 1, 1, 0, 0;\n}\n"
               : DS_WGMMA_D64_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 256] (+)= A[64 x 16] (smem, K-major) * B[16 x 256] (smem, K-major), bf16 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaBf16(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " DS_WGMMA_D128_REGS ", %128, %129, p, 1, 1, 0, 0;\n}\n"
               : DS_WGMMA_D128_OUT
               : "l"(da), "l"(db), "r"(scale_d));
}

// d[64 x 64] (+)= A[64 x 16] (registers) * B[16 x 64] (smem, K-major), bf16 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaBf16Rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " DS_WGMMA_D32_REGS ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : DS_WGMMA_D32_OUT
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// d[64 x 128] (+)= A[64 x 16] (registers) * B[16 x 128] (smem, K-major), bf16 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaBf16Rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DS_WGMMA_D64_REGS ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
               : DS_WGMMA_D64_OUT
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

// d[64 x 256] (+)= A[64 x 16] (registers) * B[16 x 256] (smem, K-major), bf16 in, fp32 out; scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaBf16Rs(float (&d)[128], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " DS_WGMMA_D128_REGS ", {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
               : DS_WGMMA_D128_OUT
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

}  // namespace ds::cuda::sm90
