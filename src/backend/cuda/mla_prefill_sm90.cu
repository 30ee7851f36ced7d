// MLA prefill attention on Hopper (sm_90a): see mla_prefill.h, MlaPrefillAttentionSm90.
// Verified on the H200 in session 3 (tests/cuda/test_mla_prefill_sm90.cpp, now run by
// scripts/gpu_e2e.sh with E2E_TESTS=1; scripts/emulate_mla_prefill_sm90.py replays its index math on
// the CPU). The runner uses it by default (CudaRunnerOptions::mla_prefill_sm90).
//
// FlashAttention-3 forward (Shah et al. 2024, "FlashAttention-3", sections 3.1-3.2) for MLA's
// naive form: qk head dim 192 = 128 nope (per head) + 64 rope (one key shared by all heads), v
// head dim 128. One block = 128 queries of one (sequence, head), 3 warpgroups:
//   - warpgroup 0, the producer (setmaxnreg down to 24 registers): one thread streams the K and
//     V tiles of 128 keys with TMA (cp.async.bulk.tensor, 128-byte swizzle) into a two-stage
//     ring: per stage a K barrier (3 boxes: nope 0-63, nope 64-127, rope), a V barrier (2 boxes)
//     and an "empty" barrier the consumers arrive on when done with the stage.
//   - warpgroups 1 and 2, the consumers (setmaxnreg up to 240), 64 query rows each: Q from
//     global fp32, rounded to bf16 and written into shared memory in the same swizzled layout;
//     S = Q K^T as 12 wgmma m64n128k16 (both operands in shared memory, K-major); online
//     softmax in fp32 on the accumulators (exp2, scale folded in, masking only on tiles that
//     need it); P rounded to bf16 in registers (the wgmma accumulator layout of two 8-column
//     chunks is the register-A layout of one k-step) and O += P V as 8 wgmma m64n128k16 with V
//     MN-major (transposed B) in shared memory.
//   - intra-warpgroup overlap: the S GEMM of tile j and the P V GEMM of tile j-1 are issued
//     back to back; the softmax of tile j runs while P V of tile j-1 is still on the tensor
//     cores.
//   - across the two consumer warpgroups: by default nothing is forced (the warp schedulers
//     interleave them); the ping-pong variant (MlaPrefillTcParams::sm90_pingpong) makes them
//     take turns issuing their GEMMs, so one's softmax runs under the other's GEMMs.
// Shared memory layout (each "panel" is 128 rows x 64 bf16 = 128 B rows, 16 KB, 1024-aligned,
// 128-byte swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8)): Q 3 panels, K 2 stages
// x 3 panels, V 2 stages x 2 panels, barriers: 208 KB + 1 KB alignment slack.
// Blocks are ordered as in the mma.sync kernel: head-major, a sequence's last query tiles first.
#include <cuda.h>
#include <cudaTypedefs.h>


#include "backend/cuda/device_props.h"
#include "backend/cuda/sm90_ptx.cuh"
#include "backend/cuda/wgmma_ops.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/mla_prefill.h"

namespace ds::cuda {
namespace {

using namespace sm90;  // PTX wrappers (sm90_ptx.cuh)
using sm90::FenceRegs;  // the fp32 form; this file adds the [N][M] uint32_t one

using bf16 = __nv_bfloat16;

constexpr int kDn = 128, kDr = 64, kDqk = kDn + kDr, kDv = 128;
constexpr int kBQ = 128;     // queries per block (2 consumer warpgroups x 64 rows)
constexpr int kBK = 128;     // keys per tile
constexpr int kStages = 2;   // K/V ring depth
constexpr int kThreads = 384;
constexpr int kPanel = 128 * 128;  // bytes: 128 rows x 128 B
constexpr int kQBytes = 3 * kPanel, kKBytes = 3 * kPanel, kVBytes = 2 * kPanel;
constexpr int kOffQ = 0, kOffK = kOffQ + kQBytes, kOffV = kOffK + kStages * kKBytes;
constexpr int kOffBar = kOffV + kStages * kVBytes;
constexpr int kNumBars = 3 * kStages;  // full_k[s], full_v[s], empty[s]
constexpr size_t kSmemBytes = kOffBar + kNumBars * 8 + 1024;  // + slack to align the base to 1024
static_assert(kBQ == 128 && kBK == 128, "the panel size assumes 128-row Q and K/V tiles");
static_assert(kSmemBytes <= 227 * 1024, "shared memory");

// Kernel argument: the parameters plus the three TMA descriptors (64-byte aligned, in param
// space: the kernel takes it as __grid_constant__).
struct Sm90Args {
  CUtensorMap tm_kn;  // k_nope: dims {128, H, total_k}, box {64, 1, 128}
  CUtensorMap tm_kr;  // k_rope: dims {64, H or 1, total_k}, box {64, 1, 128}
  CUtensorMap tm_v;   // v:      dims {128, H, total_k}, box {64, 1, 128}
  MlaPrefillTcParams p;
  int kr_shared;  // k_rope head stride 0: coordinate 0 for every head
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DS_MLA_SM90_DEVICE 1
#endif

__device__ int g_watchdog = 0;  // set when a barrier wait gave up (see BarWait)

// ------------------------------------------------------------------ PTX wrappers (sm_90a)
#ifdef DS_MLA_SM90_DEVICE
// Waits until the phase of the given parity has completed. A watchdog turns a pipeline
// deadlock (a bug) into wrong output plus a flag (MlaPrefillSm90WatchdogFired) instead of a
// hung process: each try_wait suspends for up to a hardware time limit, so 2^26 failed tries
// are far beyond any legitimate wait (the longest is one K/V tile's compute). (Not __trap():
// a trap path makes ptxas keep the consumer code within the launch's 168 registers, spilling.)
__device__ __forceinline__ void BarWait(uint32_t bar, uint32_t parity) {
  uint32_t tries = 0;
  while (!BarTryWait(bar, parity)) {
    if (++tries == (1u << 26)) {
      g_watchdog = 1;
      return;
    }
  }
}
using sm90::TmaLoad3d;  // 3-d TMA tile load into shared memory, completion counted on `bar` (bytes)
__device__ __forceinline__ void PrefetchTmap(const CUtensorMap* tm) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tm)) : "memory");
}
template <int N, int M>
__device__ __forceinline__ void FenceRegs(uint32_t (&d)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(d[i][j])::"memory");
}

// The accumulator operand macros (DS_WGMMA_D64_REGS / DS_WGMMA_D64_OUT) are wgmma_ops.cuh's.
// d[64x128] (+)= A[64x16] B[16x128]: A and B from shared memory, both K-major. d is the
// per-thread accumulator fragment (row 16 w + lane/4 + 8 (i%4 >= 2), column 8 (i/4) +
// 2 (lane%4) + i%2 for register i of warp w). scale_d 0 overwrites d.
__device__ __forceinline__ void WgmmaSS(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  sm90::WgmmaBf16(d, desc_a, desc_b, scale_d);  // (wgmma_ops.cuh)
}
// d[64x128] += A[64x16] B[16x128]: A from registers (the mma.sync m16n8k16 A layout per warp,
// bf16x2), B from shared memory MN-major (transposed).
__device__ __forceinline__ void WgmmaRS(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " DS_WGMMA_D64_REGS
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : DS_WGMMA_D64_OUT
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ void Store2(float* o, float a, float b) { *reinterpret_cast<float2*>(o) = make_float2(a, b); }
__device__ __forceinline__ void Store2(bf16* o, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(a, b);
}
#endif  // DS_MLA_SM90_DEVICE

// kPingPong: the consumer warpgroups take turns issuing their GEMMs (named barriers 3 and 4,
// FlashAttention-3's inter-warpgroup "ping-pong"), so one's softmax overlaps the other's GEMMs.
template <typename TOut, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1) MlaPrefillSm90Kernel(const __grid_constant__ Sm90Args args) {
#ifdef DS_MLA_SM90_DEVICE
  const MlaPrefillTcParams& p = args.p;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t smem_base_raw = SmemAddr(smem_raw);
  const uint32_t base = (smem_base_raw + 1023u) & ~1023u;  // swizzle atoms need 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - smem_base_raw);
  const uint32_t sQ = base + kOffQ, sK = base + kOffK, sV = base + kOffV, sBar = base + kOffBar;
  const auto full_k = [&](int st) { return sBar + 8u * st; };
  const auto full_v = [&](int st) { return sBar + 8u * (kStages + st); };
  const auto empty = [&](int st) { return sBar + 8u * (2 * kStages + st); };

  const int s = blockIdx.z, h = blockIdx.y;
  const int q0 = p.q_start[s], nq = p.q_start[s + 1] - q0;
  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);  // last tiles first
  const int qt0 = qt * kBQ;
  if (qt0 >= nq) return;  // uniform over the block: before any barrier
  const int k0 = p.k_start[s], nk = p.k_start[s + 1] - k0, pos0 = p.q_pos0[s];
  const int last_q = min(nq, qt0 + kBQ) - 1;
  const int kend = max(0, min(nk, pos0 + last_q + 1));  // keys visible to the block's last query
  const int n_kt = (kend + kBK - 1) / kBK;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      BarInit(full_k(st), 1);
      BarInit(full_v(st), 1);
      BarInit(empty(st), 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warp < 4) {
    // ---------------------------------------------------------------- producer warpgroup
    RegDealloc<24>();
    if (tid == 0 && n_kt > 0) {
      PrefetchTmap(&args.tm_kn);
      PrefetchTmap(&args.tm_kr);
      PrefetchTmap(&args.tm_v);
      const int hr = args.kr_shared ? 0 : h;
      for (int kt = 0; kt < n_kt; ++kt) {
        const int st = kt % kStages;
        if (kt >= kStages) BarWait(empty(st), ((kt / kStages) - 1) & 1);
        const int row = k0 + kt * kBK;
        const uint32_t kdst = sK + st * kKBytes, vdst = sV + st * kVBytes;
        BarExpectTx(full_k(st), kKBytes);
        TmaLoad3d(kdst, &args.tm_kn, 0, h, row, full_k(st));
        TmaLoad3d(kdst + kPanel, &args.tm_kn, 64, h, row, full_k(st));
        TmaLoad3d(kdst + 2 * kPanel, &args.tm_kr, 0, hr, row, full_k(st));
        BarExpectTx(full_v(st), kVBytes);
        TmaLoad3d(vdst, &args.tm_v, 0, h, row, full_v(st));
        TmaLoad3d(vdst + kPanel, &args.tm_v, 64, h, row, full_v(st));
      }
    }
    return;
  }

  // ------------------------------------------------------------------ consumer warpgroups
  RegAlloc<240>();
  const int wg = warp / 4 - 1;              // 0 or 1: query rows wg*64 .. wg*64+63 of the block
  const int ctid = tid - 128 * (wg + 1);    // thread within the warpgroup
  const int w = ctid >> 5, g = lane >> 2, t4 = lane & 3;

  // Q: fp32 [64 rows, 192] -> bf16 into the swizzled Q panels (rows wg*64..), zero past nq.
  // 24 float4 per thread, in two batches of 12 loads issued before any is used (one memory
  // latency per batch, not one per load).
  {
    constexpr int kPerThread = 64 * (kDqk / 4) / 128, kBatch = kPerThread / 2;
    const float* const q_head = p.q + static_cast<int64_t>(h) * p.q_head_stride;
#pragma unroll
    for (int b0 = 0; b0 < kPerThread; b0 += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int c = ctid + (b0 + i) * 128, r = c / (kDqk / 4), col = (c % (kDqk / 4)) * 4;
        const int qrow = qt0 + wg * 64 + r;
        v[i] = qrow < nq ? __ldg(reinterpret_cast<const float4*>(q_head + static_cast<int64_t>(q0 + qrow) * p.q_tok_stride + col))
                         : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int c = ctid + (b0 + i) * 128, r = c / (kDqk / 4), col = (c % (kDqk / 4)) * 4;
        const int prow = wg * 64 + r, pc = col & 63;
        const int off = (col >> 6) * kPanel + prow * 128 + (((pc >> 3) ^ (prow & 7)) << 4) + (pc & 7) * 2;
        uint2 u;
        u.x = PackBf16(v[i].x, v[i].y);
        u.y = PackBf16(v[i].z, v[i].w);
        *reinterpret_cast<uint2*>(smem + kOffQ + off) = u;
      }
    }
  }
  FenceProxyAsync();  // generic-proxy stores -> visible to wgmma (async proxy)
  NamedBarSync(1 + wg, 128);

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 (log2 units)
  const float sl2 = p.softmax_scale * 1.4426950408889634f;
  const int row_lo = qt0 + wg * 64 + w * 16 + g;              // query index within the sequence
  const int qpos[2] = {pos0 + row_lo, pos0 + row_lo + 8};      // keys <= qpos are visible
  const int wg_first_pos = pos0 + qt0 + wg * 64;              // the warpgroup's first query position
  const uint32_t q_wg = sQ + wg * 64 * 128;                    // this warpgroup's 64 rows of each panel

  float sc[64];
  uint32_t pa[kBK / 16][4];

  // S = Q K_st^T (issued, not waited).
  const auto issue_s = [&](int st) {
    const uint32_t kb = sK + st * kKBytes;
    WgFence();
#pragma unroll
    for (int ks = 0; ks < kDqk / 16; ++ks) {
      const uint32_t off = (ks >> 2) * kPanel + (ks & 3) * 32;
      WgmmaSS(sc, Desc(q_wg + off, 16, 1024), Desc(kb + off, 16, 1024), ks > 0 ? 1 : 0);
    }
    WgCommit();
  };
  // O += P V_st (issued, not waited).
  const auto issue_pv = [&](int st) {
    const uint32_t vb = sV + st * kVBytes;
    WgFence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) WgmmaRS(o, pa[kk], Desc(vb + kk * 16 * 128, kPanel, 1024));
    WgCommit();
  };
  // Mask + online softmax of tile kt on sc (exp values left in sc); returns the O rescale factors.
  const auto softmax = [&](int kt, float* alpha) {
    const int kbase = kt * kBK;
    if (kbase + kBK > nk || kbase + kBK - 1 > wg_first_pos) {
#pragma unroll
      for (int j = 0; j < kBK / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kbase + j * 8 + 2 * t4 + (e & 1);
          if (key >= nk || key > qpos[e >> 1]) sc[j * 4 + e] = -INFINITY;
        }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kBK / 8; ++j) {
      mx[0] = fmaxf(mx[0], fmaxf(sc[j * 4 + 0], sc[j * 4 + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(sc[j * 4 + 2], sc[j * 4 + 3]));
    }
    float mu[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r] * sl2);
      mu[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet stays at 0
      alpha[r] = Exp2(m[r] - mu[r]);            // 0 when m was -inf
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < kBK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pv = Exp2(fmaf(sc[j * 4 + e], sl2, -mu[e >> 1]));
        sc[j * 4 + e] = pv;
        l[e >> 1] += pv;
      }
    }
  };
  const auto to_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      pa[kk][0] = PackBf16(sc[(2 * kk) * 4 + 0], sc[(2 * kk) * 4 + 1]);
      pa[kk][1] = PackBf16(sc[(2 * kk) * 4 + 2], sc[(2 * kk) * 4 + 3]);
      pa[kk][2] = PackBf16(sc[(2 * kk + 1) * 4 + 0], sc[(2 * kk + 1) * 4 + 1]);
      pa[kk][3] = PackBf16(sc[(2 * kk + 1) * 4 + 2], sc[(2 * kk + 1) * 4 + 3]);
    }
  };
  const auto release = [&](int st) {
    if (lane == 0) BarArrive(empty(st));
  };
  // Ping-pong turns: warpgroup wg issues its GEMMs after sync on barrier 3 + wg and then hands
  // the turn to the other (arrive on 3 + (wg ^ 1)). Warpgroup 1 hands warpgroup 0 the first
  // turn; warpgroup 0 consumes warpgroup 1's last hand-over at the end, so every barrier phase
  // completes before the block exits.
  const auto turn_begin = [&]() {
    if constexpr (kPingPong) NamedBarSync(3 + wg, 256);
  };
  const auto turn_end = [&]() {
    if constexpr (kPingPong) NamedBarArrive(3 + (wg ^ 1), 256);
  };
  if constexpr (kPingPong) {
    if (wg == 1) NamedBarArrive(3, 256);
  }

  if (n_kt > 0) {
    // Tile 0: S, softmax, P.
    BarWait(full_k(0), 0);
    turn_begin();
    issue_s(0);
    turn_end();
    WgWait<0>();
    FenceRegs(sc);
    {
      float alpha[2];
      softmax(0, alpha);  // O is still 0: alpha needs no application
    }
    to_p();
    for (int kt = 1; kt < n_kt; ++kt) {
      const int st = kt % kStages, pst = (kt - 1) % kStages;
      BarWait(full_k(st), (kt / kStages) & 1);
      if constexpr (kPingPong) BarWait(full_v(pst), ((kt - 1) / kStages) & 1);  // hold the turn only to issue
      turn_begin();
      FenceRegs(sc);
      issue_s(st);
      if constexpr (!kPingPong) BarWait(full_v(pst), ((kt - 1) / kStages) & 1);
      FenceRegs(o);
      FenceRegs(pa);
      issue_pv(pst);
      turn_end();
      WgWait<1>();  // S of tile kt done; P V of tile kt-1 may still run
      FenceRegs(sc);
      float alpha[2];
      softmax(kt, alpha);
      WgWait<0>();  // P V of tile kt-1 done: its stage is free, o and pa may be touched
      FenceRegs(o);
      FenceRegs(pa);
      release(pst);
#pragma unroll
      for (int j = 0; j < kDv / 8; ++j) {
        o[j * 4 + 0] *= alpha[0];
        o[j * 4 + 1] *= alpha[0];
        o[j * 4 + 2] *= alpha[1];
        o[j * 4 + 3] *= alpha[1];
      }
      to_p();
    }
    const int lst = (n_kt - 1) % kStages;
    BarWait(full_v(lst), ((n_kt - 1) / kStages) & 1);
    turn_begin();
    FenceRegs(o);
    FenceRegs(pa);
    issue_pv(lst);
    turn_end();
    WgWait<0>();
    FenceRegs(o);
    release(lst);
  }
  if constexpr (kPingPong) {
    if (wg == 0) NamedBarSync(3, 256);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const float inv[2] = {l[0] > 0.f ? 1.f / l[0] : 0.f, l[1] > 0.f ? 1.f / l[1] : 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + 8 * r;
    if (row >= nq) continue;
    TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(q0 + row) * p.o_tok_stride +
                static_cast<int64_t>(h) * p.o_head_stride;
#pragma unroll
    for (int j = 0; j < kDv / 8; ++j)
      Store2(out + j * 8 + 2 * t4, o[j * 4 + 2 * r] * inv[r], o[j * 4 + 2 * r + 1] * inv[r]);
  }
#endif  // DS_MLA_SM90_DEVICE
}

// ------------------------------------------------------------------ host side
PFN_cuTensorMapEncodeTiled_v12000 EncodeFn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q));
    DS_CHECK(q == cudaDriverEntryPointSuccess && ptr != nullptr)
        << "MlaPrefillAttentionSm90: cuTensorMapEncodeTiled not found in the driver";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

// [total_k, heads, cols] bf16 with the given element strides -> a 3-d map, box {64, 1, 128},
// 128-byte swizzle; rows past total_k are zero-filled by the TMA unit.
CUtensorMap MakeMap(const bf16* ptr, int64_t cols, int64_t heads, int64_t total_k, int64_t head_stride,
                    int64_t tok_stride) {
  CUtensorMap m;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(total_k)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_stride) * 2, static_cast<cuuint64_t>(tok_stride) * 2};
  const cuuint32_t box[3] = {64, 1, kBK};
  const cuuint32_t estr[3] = {1, 1, 1};
  const CUresult r = EncodeFn()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16*>(ptr), dims, strides, box,
                                estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DS_CHECK(r == CUDA_SUCCESS) << "MlaPrefillAttentionSm90: cuTensorMapEncodeTiled failed (" << static_cast<int>(r)
                              << ") for cols " << cols << ", heads " << heads << ", rows " << total_k
                              << ", strides " << head_stride << "/" << tok_stride;
  return m;
}

bool Aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

bool DeviceIsSm90() { return CurrentDeviceProps().sm90; }

const char* Unsupported(const MlaPrefillTcParams& p) {
  if (!MlaPrefillTcSupported(p.d_nope, p.d_rope, p.dv)) return "head dims must be nope 128, rope 64, v 128";
  if (p.total_k <= 0 || p.total_k >= (int64_t{1} << 31)) return "total_k must be in [1, 2^31)";
  if (!(Aligned(p.q, 16) && p.q_tok_stride % 4 == 0 && p.q_head_stride % 4 == 0))
    return "q must be 16-byte aligned with strides a multiple of 4";
  if (!(Aligned(p.k_nope, 16) && Aligned(p.k_rope, 16) && Aligned(p.v, 16) && p.kn_tok_stride % 8 == 0 &&
        p.kn_head_stride % 8 == 0 && p.kr_tok_stride % 8 == 0 && p.kr_head_stride % 8 == 0 &&
        p.v_tok_stride % 8 == 0 && p.v_head_stride % 8 == 0 && p.kn_tok_stride > 0 && p.kn_head_stride > 0 &&
        p.kr_tok_stride > 0 && p.kr_head_stride >= 0 && p.v_tok_stride > 0 && p.v_head_stride > 0))
    return "k/v must be 16-byte aligned with positive strides a multiple of 8 (k_rope head stride may be 0)";
  if (!(Aligned(p.out, 8) && p.o_tok_stride % 2 == 0 && p.o_head_stride % 2 == 0)) return "out strides must be even";
  if (p.num_seqs >= 65536 || p.heads >= 65536) return "grid too large";
  return nullptr;
}

template <typename TOut, bool kPingPong>
void Launch(const Sm90Args& a) {
  const MlaPrefillTcParams& p = a.p;
  const dim3 grid(dev::CeilDiv(p.max_q_len, kBQ), static_cast<unsigned>(p.heads), static_cast<unsigned>(p.num_seqs));
  DS_CUDA_CHECK(cudaFuncSetAttribute(MlaPrefillSm90Kernel<TOut, kPingPong>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
  MlaPrefillSm90Kernel<TOut, kPingPong><<<grid, kThreads, kSmemBytes, p.stream>>>(a);
  DS_CUDA_CHECK_LAUNCH("MlaPrefillSm90Kernel");
}

}  // namespace

bool MlaPrefillSm90WatchdogFired() {
  int fired = 0;
  DS_CUDA_CHECK(cudaMemcpyFromSymbol(&fired, g_watchdog, sizeof(int)));
  if (fired != 0) {
    const int zero = 0;
    DS_CUDA_CHECK(cudaMemcpyToSymbol(g_watchdog, &zero, sizeof(int)));
  }
  return fired != 0;
}

bool MlaPrefillSm90Supported(const MlaPrefillTcParams& p) {
  return Unsupported(p) == nullptr && DeviceIsSm90();
}

void MlaPrefillAttentionSm90(const MlaPrefillTcParams& p) {
  const char* why = Unsupported(p);
  DS_CHECK(why == nullptr) << "MlaPrefillAttentionSm90: " << (why ? why : "");
  DS_CHECK(DeviceIsSm90()) << "MlaPrefillAttentionSm90: needs a compute capability 9.0 device";
  if (p.num_seqs == 0 || p.max_q_len == 0 || p.heads == 0) return;
  Sm90Args a{};
  a.p = p;
  a.kr_shared = p.kr_head_stride == 0 ? 1 : 0;
  a.tm_kn = MakeMap(p.k_nope, kDn, p.heads, p.total_k, p.kn_head_stride, p.kn_tok_stride);
  // A shared rope key: one "head" (its stride is then irrelevant; any valid value).
  a.tm_kr = a.kr_shared ? MakeMap(p.k_rope, kDr, 1, p.total_k, kDr, p.kr_tok_stride)
                        : MakeMap(p.k_rope, kDr, p.heads, p.total_k, p.kr_head_stride, p.kr_tok_stride);
  a.tm_v = MakeMap(p.v, kDv, p.heads, p.total_k, p.v_head_stride, p.v_tok_stride);
  const bool f32 = p.out_type == DTypeOut::kF32;
  if (p.sm90_pingpong) {
    f32 ? Launch<float, true>(a) : Launch<bf16, true>(a);
  } else {
    f32 ? Launch<float, false>(a) : Launch<bf16, false>(a);
  }
}

}  // namespace ds::cuda
