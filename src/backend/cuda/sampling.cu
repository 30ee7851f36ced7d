#include "backend/cuda/sampling.h"

#include <cub/cub.cuh>

#include <algorithm>

#include "backend/cuda/allocator.h"
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
    float bv = -INFINITY; int bi = 0x7fffffff;
    for (int64_t i = threadIdx.x; i < V; i += kThreads)
      if (bi == 0x7fffffff || lg[i] > bv) { bv = lg[i]; bi = static_cast<int>(i); }
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
      // NaN logits never compare greater: fall back to lane 0's pick (as the CPU's loop).
      p.out_ids[row] = bi == 0x7fffffff ? 0 : bi;
    }
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

constexpr int kSortedThreads = 1024;
using BlockScanS = cub::BlockScan<double, kSortedThreads>;

// First k in [0, n) with cum[k] >= thr (ge) / cum[k] > thr, else n. cum is non-decreasing: each
// thread tests its chunk's last entry against the one before its chunk, and the thread whose
// chunk holds the crossing scans it. Block-wide; every thread gets the answer.
__device__ int64_t FindFirstSorted(const double* cum, int64_t n, int64_t chunk, double thr, bool ge,
                                   unsigned long long* s_found) {
  const auto pass = [&](double v) { return ge ? v >= thr : v > thr; };
  if (threadIdx.x == 0) *s_found = ~0ull;
  __syncthreads();
  const int64_t c0 = threadIdx.x * chunk, c1 = min(n, c0 + chunk);
  if (c0 < c1 && pass(cum[c1 - 1]) && (c0 == 0 || !pass(cum[c0 - 1]))) {
    int64_t k = c0;
    while (k < c1 && !pass(cum[k])) ++k;
    atomicMin(s_found, static_cast<unsigned long long>(k));
  }
  __syncthreads();
  const unsigned long long f = *s_found;
  __syncthreads();
  return f == ~0ull ? n : static_cast<int64_t>(f);
}

// One block a row over the sorted row: p_k = exp(l_k / T - l_0 / T) in double, their inclusive
// prefix sums in `cum` (thread chunks, then a block scan of the chunk totals), then SampleKernel's
// top_k, top_p and draw as searches of the prefix sums, in unnormalised mass (the same ratios).
// Rows at temperature <= 0: the argmax of the unsorted row, as SampleKernel.
__global__ void __launch_bounds__(kSortedThreads) SampleSortedKernel(SampleParams p, const uint64_t* sorted_keys,
                                                                      const int32_t* order, double* cum_all) {
  __shared__ typename BlockScanS::TempStorage scan;
  __shared__ unsigned long long s_found;
  __shared__ float fv[kSortedThreads / 32];
  __shared__ int fi[kSortedThreads / 32];
  const int64_t row = blockIdx.x, V = p.vocab;
  const float T = p.temperature[row];
  if (T <= 0.f) {
    const float* lg = p.logits + row * p.ld;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int64_t i = threadIdx.x; i < V; i += kSortedThreads)  // SampleKernel's argmax, NaN rule included
      if (bi == 0x7fffffff || lg[i] > bv) { bv = lg[i]; bi = static_cast<int>(i); }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if ((threadIdx.x & 31) == 0) { fv[threadIdx.x >> 5] = bv; fi[threadIdx.x >> 5] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kSortedThreads / 32; ++w)
        if (fv[w] > bv || (fv[w] == bv && fi[w] < bi)) { bv = fv[w]; bi = fi[w]; }
      p.out_ids[row] = bi == 0x7fffffff ? 0 : bi;
    }
    return;
  }
  const uint64_t* sk = sorted_keys + row * V;
  const int32_t* ord = order + row * V;
  double* cum = cum_all + row * V;
  const double Td = T;
  const double mx = static_cast<double>(KeyValue(sk[0])) / Td;
  const int64_t chunk = (V + kSortedThreads - 1) / kSortedThreads;
  const int64_t c0 = threadIdx.x * chunk, c1 = min(V, c0 + chunk);
  double local = 0.0;
  for (int64_t i = c0; i < c1; ++i) {
    local += exp(static_cast<double>(KeyValue(sk[i])) / Td - mx);
    cum[i] = local;
  }
  double off;
  BlockScanS(scan).ExclusiveSum(local, off);
  for (int64_t i = c0; i < c1; ++i) cum[i] += off;
  __syncthreads();  // every thread's prefix sums visible to the block
  int64_t keep = V;
  const int tk = p.top_k[row];
  if (tk > 0 && tk < keep) keep = tk;
  double kept = cum[keep - 1];
  const float tp = p.top_p[row];
  if (tp > 0.f && tp < 1.f) {
    const int64_t k = FindFirstSorted(cum, keep, chunk, static_cast<double>(tp) * kept, true, &s_found);
    if (k < keep) { keep = k + 1; kept = cum[k]; }
  }
  const double u = static_cast<double>(SplitMix64(p.seed[row] ^ SplitMix64(p.step[row])) >> 11) * 0x1.0p-53;
  const int64_t k = FindFirstSorted(cum, keep, chunk, u * kept, false, &s_found);
  if (threadIdx.x == 0) p.out_ids[row] = ord[k < keep ? k : keep - 1];
}

// Argmax of each row (lowest id on ties, as cpu::Sample; NaN never wins, a row of only NaN
// gives token 0); one block of kArgmaxThreads per row. Each thread walks its ids in
// increasing order with 16-byte loads (when the row is 16-byte aligned) and keeps the first
// maximum; the block then reduces (value, id) pairs. At batch 1 this is one block reading the
// whole vocabulary, so it is written for memory-level parallelism: 1024 threads, 4 independent
// 16-byte loads in flight each (ncu, session 5 run 3: 25 us at vocab 102,400 with 256 threads
// and scalar loads).
constexpr int kArgmaxThreads = 1024;

__device__ __forceinline__ void ArgmaxTake(float x, int32_t i, float& bv, int32_t& bi) {
  if (x > bv || (x == bv && i < bi)) { bv = x; bi = i; }
}

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

}  // namespace

void Sample(const SampleParams& p) {
  DS_CHECK(p.vocab > 0 && p.vocab < (1ll << 31)) << "Sample: bad vocab " << p.vocab;
  if (p.rows == 0) return;
  if (p.all_greedy) {
    LaunchKernel(ArgmaxKernel, p.rows, kArgmaxThreads, 0, p.stream, p.pdl, p.logits, p.ld, p.vocab, p.out_ids);
    DS_CUDA_CHECK_LAUNCH("ArgmaxKernel");
    return;
  }
  const int64_t n = p.rows * p.vocab;
  SampleWorkspace local;
  SampleWorkspace& w = p.ws ? *p.ws : local;
  if (p.device_sort) {
    // keys_in: the 64-bit keys, then (after the sort) the prefix sums; keys_out: sorted keys.
    const size_t need8 = n * sizeof(uint64_t), need4 = n * sizeof(int32_t);
    if (p.ws && (w.keys_in.size() < need8 || w.keys_out.size() < need8 || w.vals_in.size() < need4 ||
                 w.vals_out.size() < need4))
      DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));  // growing: the old blocks go back to the shared pool
    w.keys_in.Reserve(need8);
    w.keys_out.Reserve(need8);
    w.vals_in.Reserve(need4);
    w.vals_out.Reserve(need4);
    SortKeysKernel<<<dev::CeilDiv(n, 256), 256, 0, p.stream>>>(p.logits, p.ld, p.rows, p.vocab, w.keys_in.as<uint64_t>(),
                                                               w.vals_in.as<int32_t>());
    DS_CUDA_CHECK_LAUNCH("SortKeysKernel");
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
    SampleSortedKernel<<<p.rows, kSortedThreads, 0, p.stream>>>(p, w.keys_out.as<uint64_t>(), w.vals_out.as<int32_t>(),
                                                               w.keys_in.as<double>());
    DS_CUDA_CHECK_LAUNCH("SampleSortedKernel");
    if (!p.ws) DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));
    return;
  }
  const size_t need_keys = n * sizeof(float), need_vals = n * sizeof(int32_t), need_offs = (p.rows + 1) * sizeof(int32_t);
  if (p.ws && (w.keys_in.size() < need_keys || w.vals_in.size() < need_vals || w.offsets.size() < need_offs))
    DS_CUDA_CHECK(cudaStreamSynchronize(p.stream));  // growing: the old blocks go back to the shared pool
  w.keys_in.Reserve(need_keys);
  w.keys_out.Reserve(need_keys);
  w.vals_in.Reserve(need_vals);
  w.vals_out.Reserve(need_vals);
  w.offsets.Reserve(need_offs);
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
