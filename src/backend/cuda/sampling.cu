#include "backend/cuda/sampling.h"

#include <cub/cub.cuh>

#include <algorithm>

#include "backend/cuda/allocator.h"
#include "backend/cuda/argmax_reduce.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void IotaKernel(int32_t* v, int64_t rows, int64_t vocab, int32_t* offsets) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * vocab) v[i] = static_cast<int32_t>(i % vocab);
  if (i <= rows) offsets[i] = static_cast<int32_t>(i * vocab);
}

__global__ void CopyRowsKernel(const float* src, int64_t ld, float* dst, int64_t rows, int64_t vocab) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * vocab) dst[i] = src[(i / vocab) * ld + i % vocab];
}

// A temperature <= 0 row inside a sampled batch: the argmax of the row (lg [V]) by a block of
// kThreads, written to *out by thread 0, with cpu::GreedyArgmax's rule (ArgmaxKernel's): the
// larger value, then the lower id; NaN never wins; a row of only NaN gives 0. fv / fi: kThreads /
// 32 entries of shared memory.
__device__ void BlockRowArgmax(const float* lg, int64_t V, float* fv, int* fi, int32_t* out) {
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < V; i += kThreads)
    if (lg[i] > bv || (lg[i] == bv && static_cast<int>(i) < bi)) { bv = lg[i]; bi = static_cast<int>(i); }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
  }
  if ((threadIdx.x & 31) == 0) { fv[threadIdx.x >> 5] = bv; fi[threadIdx.x >> 5] = bi; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w)
      if (fv[w] > bv || (fv[w] == bv && fi[w] < bi)) { bv = fv[w]; bi = fi[w]; }
    *out = bi == 0x7fffffff ? 0 : bi;
  }
}

using BlockScanD = cub::BlockScan<double, kThreads>;
using BlockReduceD = cub::BlockReduce<double, kThreads>;

// First k in [0, n) whose inclusive prefix sum of prob(order[k]) satisfies cum >= thr
// (or_equal) / cum > thr; returns n if none. Also returns the prefix sum through k.
template <typename ProbFn>
__device__ int64_t FindPrefix(int64_t n, double thr, bool or_equal, ProbFn prob, double* cum_out,
                              typename BlockScanD::TempStorage& scan, int64_t* found, double* found_cum) {
  double base = 0.0;
  for (int64_t c0 = 0; c0 < n; c0 += kThreads) {
    const int64_t k = c0 + threadIdx.x;
    const double v = k < n ? prob(k) : 0.0;
    double incl, total;
    BlockScanD(scan).InclusiveSum(v, incl, total);
    incl += base;
    if (threadIdx.x == 0) *found = -1;
    __syncthreads();
    const bool hit = k < n && (or_equal ? incl >= thr : incl > thr);
    if (hit) atomicMin(reinterpret_cast<unsigned long long*>(found), static_cast<unsigned long long>(k));
    __syncthreads();
    // found == -1 reads as ULLONG_MAX for atomicMin; convert back.
    const int64_t f = *found;
    if (f >= 0 && f < n && static_cast<uint64_t>(f) != ~0ull) {
      if (k == f) *found_cum = incl;
      __syncthreads();
      *cum_out = *found_cum;
      __syncthreads();
      return f;
    }
    base += total;
    __syncthreads();
  }
  *cum_out = base;
  return n;
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SampleParams p, const float* sorted_logits,
                                                         const int32_t* order) {
  __shared__ typename BlockScanD::TempStorage scan;
  __shared__ typename BlockReduceD::TempStorage red;
  __shared__ int64_t found;
  __shared__ double found_cum, bcast;
  __shared__ float fv[32];
  __shared__ int fi[32];
  const int64_t row = blockIdx.x, V = p.vocab;
  const float T = p.temperature[row];
  const float* lg = p.logits + row * p.ld;
  if (T <= 0.f) {
    BlockRowArgmax(lg, V, fv, fi, p.out_ids + row);
    return;
  }
  const float* sl = sorted_logits + row * V;
  const int32_t* ord = order + row * V;
  const double Td = T;
  const double mx = static_cast<double>(sl[0]) / Td;
  double part = 0.0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) part += exp(static_cast<double>(sl[i]) / Td - mx);
  double sum = BlockReduceD(red).Sum(part);
  if (threadIdx.x == 0) bcast = sum;
  __syncthreads();
  sum = bcast;
  auto prob = [&](int64_t k) { return exp(static_cast<double>(sl[k]) / Td - mx) / sum; };
  int64_t keep = V;
  const int tk = p.top_k[row];
  if (tk > 0 && tk < keep) keep = tk;
  double kept = 0.0;
  for (int64_t i = threadIdx.x; i < keep; i += kThreads) kept += prob(i);
  __syncthreads();
  kept = BlockReduceD(red).Sum(kept);
  if (threadIdx.x == 0) bcast = kept;
  __syncthreads();
  kept = bcast;
  const float tp = p.top_p[row];
  if (tp > 0.f && tp < 1.f) {
    double cum = 0.0;
    const int64_t k = FindPrefix(keep, static_cast<double>(tp) * kept, true, prob, &cum, scan, &found, &found_cum);
    if (k < keep) { keep = k + 1; kept = cum; }
    else { kept = cum; }
  }
  const double u = static_cast<double>(SplitMix64(p.seed[row] ^ SplitMix64(p.step[row])) >> 11) * 0x1.0p-53;
  double cum = 0.0;
  const int64_t k = FindPrefix(keep, u * kept, false, prob, &cum, scan, &found, &found_cum);
  if (threadIdx.x == 0) p.out_ids[row] = ord[k < keep ? k : keep - 1];
}

// ---- The device-wide sort path (SampleParams::device_sort) ----
// One radix sort over every row at once: a 64-bit key per logit, the row in the high bits and
// the logit's descending-order bits in the low 32 (CUB's float twiddle, inverted; -0.0 taken as
// +0.0, so equal probabilities sort by id as on the CPU), stable, so ties keep ascending ids.
// (The segmented sort sorts a row per block: ~1 ms a step for one row of 102,400.)
__device__ __forceinline__ uint32_t DescKey(float x) {
  uint32_t b = __float_as_uint(x);
  if (b == 0x80000000u) b = 0u;
  b ^= (b & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u;
  return ~b;
}
__device__ __forceinline__ float KeyValue(uint64_t key) {
  uint32_t b = ~static_cast<uint32_t>(key);
  b ^= (b & 0x80000000u) ? 0x80000000u : 0xFFFFFFFFu;
  return __uint_as_float(b);
}

__global__ void SortKeysKernel(const float* logits, int64_t ld, int64_t rows, int64_t vocab, uint64_t* keys,
                               int32_t* ids) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * vocab) return;
  const int64_t r = i / vocab, c = i % vocab;
  keys[i] = (static_cast<uint64_t>(r) << 32) | DescKey(logits[r * ld + c]);
  ids[i] = static_cast<int32_t>(c);
}

// The sorted rows' prefix sums, by segments of kSegItems entries over many blocks (a block a
// row was ~0.3 ms at 102,400 entries: one SM's latency chain). SortedScanKernel: block (segment,
// row) computes p_k = exp(l_k / T - l_0 / T) in double for its entries and their inclusive
// prefix sums within the segment (cum), and the segment's total (seg_total: its last entry's
// prefix sum, so a segment's end equals its last entry). SortedDrawKernel then adds the
// segments' offsets and runs SampleKernel's top_k, top_p and draw as searches of the
// non-decreasing prefix sums, in unnormalised mass (the same ratios).
constexpr int kSegThreads = kThreads, kSegPerThread = 16, kSegItems = kSegThreads * kSegPerThread;
constexpr int kMaxSegments = 1024;  // vocab <= 4M
using BlockScanSeg = cub::BlockScan<double, kSegThreads>;

__global__ void __launch_bounds__(kSegThreads) SortedScanKernel(SampleParams p, const uint64_t* sorted_keys,
                                                                double* cum_all, double* seg_total, int nseg) {
  __shared__ typename BlockScanSeg::TempStorage scan;
  const int64_t row = blockIdx.y, V = p.vocab, base = static_cast<int64_t>(blockIdx.x) * kSegItems;
  const float T = p.temperature[row];
  if (T <= 0.f) return;  // an argmax row (SortedDrawKernel)
  const uint64_t* sk = sorted_keys + row * V;
  double* cum = cum_all + row * V;
  const double Td = T;
  const double mx = static_cast<double>(KeyValue(sk[0])) / Td;
  const int64_t k0 = base + static_cast<int64_t>(threadIdx.x) * kSegPerThread;
  uint64_t key[kSegPerThread];
#pragma unroll
  for (int j = 0; j < kSegPerThread; ++j) key[j] = k0 + j < V ? sk[k0 + j] : 0;
  double x[kSegPerThread];
#pragma unroll
  for (int j = 0; j < kSegPerThread; ++j) x[j] = k0 + j < V ? exp(static_cast<double>(KeyValue(key[j])) / Td - mx) : 0.0;
  BlockScanSeg(scan).InclusiveSum(x, x);
  const int64_t last = min(V, base + kSegItems) - 1;
#pragma unroll
  for (int j = 0; j < kSegPerThread; ++j) {
    if (k0 + j < V) cum[k0 + j] = x[j];
    if (k0 + j == last) seg_total[row * nseg + blockIdx.x] = x[j];
  }
}

// First k in [0, n) whose prefix sum value(k) = cum[k] + off[k / kSegItems] passes (>= thr when
// ge, else > thr), else n: the first segment whose end passes, then the first entry of it that
// passes (minimums: right even where rounding leaves the sums a hair off monotone). Block-wide.
__device__ int64_t FindFirstSegmented(const double* cum, const double* off, int64_t n, double thr, bool ge,
                                      unsigned long long* s_min) {
  const auto pass = [&](double v) { return ge ? v >= thr : v > thr; };
  const auto value = [&](int64_t k) { return cum[k] + off[k / kSegItems]; };
  if (threadIdx.x == 0) *s_min = ~0ull;
  __syncthreads();
  const int last = static_cast<int>((n - 1) / kSegItems);
  for (int sg = threadIdx.x; sg <= last; sg += blockDim.x) {
    const int64_t end = sg < last ? static_cast<int64_t>(sg + 1) * kSegItems - 1 : n - 1;
    if (pass(value(end))) atomicMin(s_min, static_cast<unsigned long long>(sg));
  }
  __syncthreads();
  const unsigned long long sg = *s_min;
  __syncthreads();
  if (sg == ~0ull) return n;
  if (threadIdx.x == 0) *s_min = ~0ull;
  __syncthreads();
  const int64_t b0 = static_cast<int64_t>(sg) * kSegItems, b1 = min(n, b0 + kSegItems);
  for (int64_t k = b0 + threadIdx.x; k < b1; k += blockDim.x)
    if (pass(value(k))) atomicMin(s_min, static_cast<unsigned long long>(k));
  __syncthreads();
  const unsigned long long k = *s_min;
  __syncthreads();
  return k == ~0ull ? n : static_cast<int64_t>(k);
}

__global__ void __launch_bounds__(kSegThreads) SortedDrawKernel(SampleParams p, const int32_t* order,
                                                                const double* cum_all, const double* seg_total,
                                                                int nseg) {
  __shared__ double off[kMaxSegments];
  __shared__ unsigned long long s_min;
  __shared__ float fv[kSegThreads / 32];
  __shared__ int fi[kSegThreads / 32];
  const int64_t row = blockIdx.x, V = p.vocab;
  const float T = p.temperature[row];
  if (T <= 0.f) {  // SampleKernel's argmax of the unsorted row
    BlockRowArgmax(p.logits + row * p.ld, V, fv, fi, p.out_ids + row);
    return;
  }
  if (threadIdx.x == 0) {  // the segments' offsets (exclusive sums of their totals), in order
    double acc = 0.0;
    for (int sg = 0; sg < nseg; ++sg) {
      off[sg] = acc;
      acc += seg_total[row * nseg + sg];
    }
  }
  __syncthreads();
  const double* cum = cum_all + row * V;
  const auto value = [&](int64_t k) { return cum[k] + off[k / kSegItems]; };
  int64_t keep = V;
  const int tk = p.top_k[row];
  if (tk > 0 && tk < keep) keep = tk;
  double kept = value(keep - 1);
  const float tp = p.top_p[row];
  if (tp > 0.f && tp < 1.f) {
    const int64_t k = FindFirstSegmented(cum, off, keep, static_cast<double>(tp) * kept, true, &s_min);
    if (k < keep) { keep = k + 1; kept = value(k); }
  }
  const double u = static_cast<double>(SplitMix64(p.seed[row] ^ SplitMix64(p.step[row])) >> 11) * 0x1.0p-53;
  const int64_t k = FindFirstSegmented(cum, off, keep, u * kept, false, &s_min);
  if (threadIdx.x == 0) p.out_ids[row] = order[row * V + (k < keep ? k : keep - 1)];
}

// Argmax of each row (lowest id on ties, as cpu::Sample; NaN never wins, a row of only NaN
// gives token 0); one block of kArgmaxThreads per row. Each thread walks its ids in
// increasing order with 16-byte loads (when the row is 16-byte aligned) and keeps the first
// maximum; the block then reduces (value, id) pairs. At batch 1 this is one block reading the
// whole vocabulary, so it is written for memory-level parallelism: 1024 threads, 4 independent
// 16-byte loads in flight each (ncu, session 5 run 3: 25 us at vocab 102,400 with 256 threads
// and scalar loads).
constexpr int kArgmaxThreads = 1024;

using dev::ArgmaxTake;

__global__ void __launch_bounds__(kArgmaxThreads) ArgmaxKernel(const float* logits, int64_t ld, int64_t vocab, int32_t* out) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  int64_t scalar_from = 0;
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const int64_t nvec = vocab / 4;
    const float4* row4 = reinterpret_cast<const float4*>(row);
    // 16 float4 loads per thread in flight (V3's 129,280 logits: 32 per thread, two rounds;
    // was 4 per round, 8 rounds: 9.2 us under ncu). The winner does not depend on the visiting
    // order (ArgmaxTake: larger value, then smaller index), so the result is the same.
    constexpr int kUnroll = 16;
    int64_t v = threadIdx.x;
    for (; v + (kUnroll - 1) * kArgmaxThreads < nvec; v += kUnroll * kArgmaxThreads) {
      float4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = row4[v + u * kArgmaxThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t i0 = static_cast<int32_t>(4 * (v + u * kArgmaxThreads));
        ArgmaxTake(x[u].x, i0, bv, bi);
        ArgmaxTake(x[u].y, i0 + 1, bv, bi);
        ArgmaxTake(x[u].z, i0 + 2, bv, bi);
        ArgmaxTake(x[u].w, i0 + 3, bv, bi);
      }
    }
    for (; v < nvec; v += kArgmaxThreads) {
      const float4 x = row4[v];
      const int32_t i0 = static_cast<int32_t>(4 * v);
      ArgmaxTake(x.x, i0, bv, bi);
      ArgmaxTake(x.y, i0 + 1, bv, bi);
      ArgmaxTake(x.z, i0 + 2, bv, bi);
      ArgmaxTake(x.w, i0 + 3, bv, bi);
    }
    scalar_from = 4 * nvec;
  }
  for (int64_t v = scalar_from + threadIdx.x; v < vocab; v += kArgmaxThreads) ArgmaxTake(row[v], static_cast<int32_t>(v), bv, bi);
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
    ArgmaxTake(ov, oi, bv, bi);
  }
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int32_t si[kArgmaxThreads / 32];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { sv[w] = bv; si[w] = bi; }
  __syncthreads();
  if (w == 0) {
    bv = sv[lane];
    bi = si[lane];
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
      ArgmaxTake(ov, oi, bv, bi);
    }
    if (lane == 0) out[blockIdx.x] = bi == INT32_MAX ? 0 : bi;  // all NaN / -inf: token 0
  }
}

// The split argmax (all_greedy with a workspace): grid (splits, rows), a block takes
// kArgmaxSplitVec float4s of its row (split 0 also the scalar tail past 4 * (vocab / 4)), writes
// its (value, id) to part_v / part_i [rows, splits], and counts itself in cnt[row] (release:
// __threadfence then atomicAdd); the row's last block reduces the partials and resets cnt[row].
// Requires 16-byte aligned rows.
constexpr int kArgmaxSplitThreads = 256, kArgmaxSplitUnroll = 4;
constexpr int64_t kArgmaxSplitVec = int64_t{kArgmaxSplitThreads} * kArgmaxSplitUnroll;

using dev::ArgmaxBlockReduce;

__global__ void __launch_bounds__(kArgmaxSplitThreads) ArgmaxSplitKernel(const float* logits, int64_t ld, int64_t vocab,
                                                                          int32_t* out, float* part_v, int32_t* part_i,
                                                                          uint32_t* cnt) {
  dev::PdlWaitThenRelease();  // first: before any global-memory access (launch.cuh)
  const int64_t r = blockIdx.y;
  const int s = static_cast<int>(blockIdx.x), splits = static_cast<int>(gridDim.x);
  const float* row = logits + r * ld;
  const float4* row4 = reinterpret_cast<const float4*>(row);
  const int64_t nvec = vocab / 4, v0 = s * kArgmaxSplitVec + threadIdx.x;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;
  float4 x[kArgmaxSplitUnroll];
#pragma unroll
  for (int u = 0; u < kArgmaxSplitUnroll; ++u)
    if (v0 + u * kArgmaxSplitThreads < nvec) x[u] = row4[v0 + u * kArgmaxSplitThreads];
#pragma unroll
  for (int u = 0; u < kArgmaxSplitUnroll; ++u) {
    const int64_t v = v0 + u * kArgmaxSplitThreads;
    if (v >= nvec) continue;
    const int32_t i0 = static_cast<int32_t>(4 * v);
    ArgmaxTake(x[u].x, i0, bv, bi);
    ArgmaxTake(x[u].y, i0 + 1, bv, bi);
    ArgmaxTake(x[u].z, i0 + 2, bv, bi);
    ArgmaxTake(x[u].w, i0 + 3, bv, bi);
  }
  if (s == 0)
    for (int64_t v = 4 * nvec + threadIdx.x; v < vocab; v += kArgmaxSplitThreads) ArgmaxTake(row[v], static_cast<int32_t>(v), bv, bi);
  __shared__ float sv[kArgmaxSplitThreads / 32];
  __shared__ int32_t si[kArgmaxSplitThreads / 32];
  ArgmaxBlockReduce(bv, bi, sv, si);
  dev::ArgmaxFinishAcrossBlocks(bv, bi, s, splits, part_v + r * splits, part_i + r * splits, &cnt[r], &out[r], sv, si);
}

// Grows w's key buffers (in and out) to `keys` bytes, value buffers to `vals`, offsets to `offs`.
// With the caller's workspace (p.ws), first waits for the stream when one must grow: its old
// block goes back to the device's pool, which other streams share.
void ReserveScratch(const SampleParams& p, SampleWorkspace& w, size_t keys, size_t vals, size_t offs) {
  if (p.ws && (w.keys_in.size() < keys || w.keys_out.size() < keys || w.vals_in.size() < vals ||
               w.vals_out.size() < vals || w.offsets.size() < offs))
    DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));
  w.keys_in.Reserve(keys);
  w.keys_out.Reserve(keys);
  w.vals_in.Reserve(vals);
  w.vals_out.Reserve(vals);
  w.offsets.Reserve(offs);
}

}  // namespace

void Sample(const SampleParams& p) {
  DS_CHECK(p.vocab > 0 && p.vocab < (1ll << 31)) << "Sample: bad vocab " << p.vocab;
  if (p.rows == 0) return;
  if (p.all_greedy) {
    const bool aligned = reinterpret_cast<uintptr_t>(p.logits) % 16 == 0 && p.ld % 4 == 0;
    if (p.ws && p.argmax_split && aligned && p.rows <= kArgmaxSplitMaxRows) {
      const int64_t splits = std::max<int64_t>(1, (p.vocab / 4 + kArgmaxSplitVec - 1) / kArgmaxSplitVec);
      SampleWorkspace& w = *p.ws;
      const size_t part = static_cast<size_t>(kArgmaxSplitMaxRows * splits) * 8, cnt = kArgmaxSplitMaxRows * 4;
      if (w.argmax_part.size() < part || w.argmax_cnt.size() < cnt) {
        DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));  // an old block back to the pool only when idle
        w.argmax_part.Reserve(part);
        if (w.argmax_cnt.size() < cnt) {
          w.argmax_cnt.Reserve(cnt);
          DS_CUDA_CHECK(cudaMemsetAsync(w.argmax_cnt.get(), 0, cnt, p.stream));
        }
      }
      float* pv = w.argmax_part.as<float>();
      int32_t* pi = reinterpret_cast<int32_t*>(pv + kArgmaxSplitMaxRows * splits);
      LaunchKernel(ArgmaxSplitKernel, dim3(static_cast<unsigned>(splits), static_cast<unsigned>(p.rows)),
                   kArgmaxSplitThreads, 0, p.stream, p.pdl, p.logits, p.ld, p.vocab, p.out_ids, pv, pi,
                   w.argmax_cnt.as<uint32_t>());
      DS_CUDA_CHECK_LAUNCH("ArgmaxSplitKernel");
      return;
    }
    LaunchKernel(ArgmaxKernel, p.rows, kArgmaxThreads, 0, p.stream, p.pdl, p.logits, p.ld, p.vocab, p.out_ids);
    DS_CUDA_CHECK_LAUNCH("ArgmaxKernel");
    return;
  }
  const int64_t n = p.rows * p.vocab;
  SampleWorkspace local;
  SampleWorkspace& w = p.ws ? *p.ws : local;
  if (p.device_sort) {
    // keys_in: the 64-bit keys, then (after the sort) the prefix sums; keys_out: sorted keys.
    DS_CHECK(p.vocab <= int64_t{kMaxSegments} * kSegItems) << "Sample: vocab " << p.vocab << " above the sorted path's limit";
    // keys: 64-bit; offsets: the segments' totals [rows, segments] (double).
    ReserveScratch(p, w, n * sizeof(uint64_t), n * sizeof(int32_t),
                   p.rows * ((p.vocab + kSegItems - 1) / kSegItems) * sizeof(double));
    cudaEvent_t ev[4] = {nullptr, nullptr, nullptr, nullptr};
    const auto mark = [&](int i) {
      if (!p.stage_ms) return;
      if (!ev[i]) DS_CUDA_CHECK(cudaEventCreate(&ev[i]));
      DS_CUDA_CHECK(cudaEventRecord(ev[i], p.stream));
    };
    mark(0);
    SortKeysKernel<<<dev::CeilDiv(n, 256), 256, 0, p.stream>>>(p.logits, p.ld, p.rows, p.vocab, w.keys_in.as<uint64_t>(),
                                                               w.vals_in.as<int32_t>());
    DS_CUDA_CHECK_LAUNCH("SortKeysKernel");
    mark(1);
    int row_bits = 0;
    while ((int64_t{1} << row_bits) < p.rows) ++row_bits;
    size_t temp_bytes = 0;
    DS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, w.keys_in.as<uint64_t>(), w.keys_out.as<uint64_t>(),
                                                  w.vals_in.as<int32_t>(), w.vals_out.as<int32_t>(), n, 0, 32 + row_bits,
                                                  p.stream));
    if (p.ws && w.temp.size() < temp_bytes) DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));
    w.temp.Reserve(std::max<size_t>(temp_bytes, 1));
    DS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.temp.get(), temp_bytes, w.keys_in.as<uint64_t>(),
                                                  w.keys_out.as<uint64_t>(), w.vals_in.as<int32_t>(),
                                                  w.vals_out.as<int32_t>(), n, 0, 32 + row_bits, p.stream));
    mark(2);
    const int nseg = static_cast<int>((p.vocab + kSegItems - 1) / kSegItems);
    SortedScanKernel<<<dim3(nseg, static_cast<unsigned>(p.rows)), kSegThreads, 0, p.stream>>>(
        p, w.keys_out.as<uint64_t>(), w.keys_in.as<double>(), w.offsets.as<double>(), nseg);
    DS_CUDA_CHECK_LAUNCH("SortedScanKernel");
    SortedDrawKernel<<<p.rows, kSegThreads, 0, p.stream>>>(p, w.vals_out.as<int32_t>(), w.keys_in.as<double>(),
                                                           w.offsets.as<double>(), nseg);
    DS_CUDA_CHECK_LAUNCH("SortedDrawKernel");
    mark(3);
    if (p.stage_ms) {
      DS_CUDA_CHECK(cudaEventSynchronize(ev[3]));
      for (int i = 0; i < 3; ++i) DS_CUDA_CHECK(cudaEventElapsedTime(&p.stage_ms[i], ev[i], ev[i + 1]));
      for (cudaEvent_t e : ev) cudaEventDestroy(e);
    }
    if (!p.ws) DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));
    return;
  }
  ReserveScratch(p, w, n * sizeof(float), n * sizeof(int32_t), (p.rows + 1) * sizeof(int32_t));
  DeviceBuffer& keys_in = w.keys_in;
  DeviceBuffer& keys_out = w.keys_out;
  DeviceBuffer& vals_in = w.vals_in;
  DeviceBuffer& vals_out = w.vals_out;
  DeviceBuffer& offsets = w.offsets;
  CopyRowsKernel<<<dev::CeilDiv(n, 256), 256, 0, p.stream>>>(p.logits, p.ld, keys_in.as<float>(), p.rows, p.vocab);
  IotaKernel<<<dev::CeilDiv(std::max<int64_t>(n, p.rows + 1), 256), 256, 0, p.stream>>>(vals_in.as<int32_t>(), p.rows,
                                                                                        p.vocab, offsets.as<int32_t>());
  DS_CUDA_CHECK_LAUNCH("Sample prep");
  size_t temp_bytes = 0;
  DS_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, temp_bytes, keys_in.as<float>(), keys_out.as<float>(), vals_in.as<int32_t>(), vals_out.as<int32_t>(),
      n, p.rows, offsets.as<int32_t>(), offsets.as<int32_t>() + 1, 0, 32, p.stream));
  if (p.ws && w.temp.size() < temp_bytes) DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));
  w.temp.Reserve(std::max<size_t>(temp_bytes, 1));
  DeviceBuffer& temp = w.temp;
  DS_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      temp.get(), temp_bytes, keys_in.as<float>(), keys_out.as<float>(), vals_in.as<int32_t>(), vals_out.as<int32_t>(),
      n, p.rows, offsets.as<int32_t>(), offsets.as<int32_t>() + 1, 0, 32, p.stream));
  SampleKernel<<<p.rows, kThreads, 0, p.stream>>>(p, keys_out.as<float>(), vals_out.as<int32_t>());
  DS_CUDA_CHECK_LAUNCH("SampleKernel");
  // Pooled scratch (no ws) returns to the device's pool when `local` goes out of scope, and the
  // pool may hand it to work on another stream: wait for this call's kernels first.
  if (!p.ws) DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));
}

}  // namespace ds::cuda
