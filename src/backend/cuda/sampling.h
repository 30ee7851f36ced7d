// Batched token sampling, the CUDA counterpart of ds::cpu::Sample with the same semantics and
// the same counter-based RNG, so a (seed, step) pair picks the same token on both backends:
// temperature <= 0: argmax (lowest id on ties). Else p = softmax(logits / T) in double, tokens
// ordered by descending probability (ties: lower id first; a stable CUB radix sort), keep
// top_k (0 = all), then the smallest prefix whose mass >= top_p * kept mass, and draw the
// first token whose cumulative kept mass exceeds u * kept_mass, with
// u = (SplitMix64(seed ^ SplitMix64(step)) >> 11) * 2^-53.
// (Sums run in a different order than the CPU's sequential loop: a token can differ only when
// u lands within ~1e-15 of a cumulative boundary.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/allocator.h"

namespace ds::cuda {

// Scratch of the sorting path, owned by the caller and reused by every call on one stream
// (SampleParams::ws): no per-call pool round trip, so no host synchronisation.
struct SampleWorkspace {
  DeviceBuffer keys_in, keys_out, vals_in, vals_out, offsets, temp;
  // The greedy path's split argmax (all_greedy with a workspace): per-(row, split) partial maxima
  // and ids, and per-row arrival counters (zero between calls: the last block of a row resets its
  // counter). Sized once for kArgmaxSplitMaxRows rows.
  DeviceBuffer argmax_part, argmax_cnt;
};

// Rows at most this many take the split argmax (see SampleParams::all_greedy).
inline constexpr int64_t kArgmaxSplitMaxRows = 256;

struct SampleParams {
  const float* logits; int64_t ld;  // [rows, vocab] device
  int64_t rows, vocab;
  // Per-row settings, device arrays [rows].
  const float* temperature; const float* top_p; const int32_t* top_k;
  const uint64_t* seed; const uint64_t* step;
  int32_t* out_ids;                 // [rows] device
  cudaStream_t stream = nullptr;
  // Launch as a programmatic dependent of the previous kernel in the stream (PDL, launch.cuh;
  // CudaRunnerOptions::pdl). Same results either way. Honoured by the argmax (all_greedy) path.
  bool pdl = false;
  // Host hint: every row's temperature is <= 0, so every row is an argmax (one pass over the
  // logits, no sort, no host synchronisation). With argmax_split and a workspace (ws), at most
  // kArgmaxSplitMaxRows rows and 16-byte aligned rows (logits and ld), each row is split over
  // blocks of 4,096 logits
  // whose partial maxima the row's last block reduces (one launch; the same ids: the (larger value,
  // lower id) order does not depend on the visiting order); otherwise one block a row.
  bool all_greedy = false;
  // The split argmax above (with ws); off: one block a row (CudaRunnerOptions::argmax_split).
  bool argmax_split = false;
  // The sorting path's scratch (rows with temperature > 0): caller-owned and reused in stream
  // order, so the call does not wait for the device (it synchronises the stream only when a
  // buffer has to grow: the old block goes back to the device's pool, which other streams
  // share). Null: scratch from the pool for this call, then a stream synchronisation before it
  // is returned.
  SampleWorkspace* ws = nullptr;
  // The sorting path's sort: every row in one device-wide radix sort (64-bit keys: row, then the
  // logit's descending order), the prefix sums by 4,096-entry segments over many blocks, and a
  // block a row for the searches (true), or CUB's segmented sort (a block a row) and a 256-thread
  // block a row that scans the sorted row 256 entries at a time (false; the path before session
  // 23: 0.89 ms a step at one row of 102,400). The same tokens either way (both are tested
  // against cpu::Sample). vocab <= 4M on the device-wide path.
  bool device_sort = true;
  // Diagnostic (tests): when set, the device-sort path times its stages with CUDA events and
  // synchronises: [0] the keys, [1] the radix sort, [2] the per-row kernel, in ms.
  float* stage_ms = nullptr;
};
// Stream-ordered. The argmax path (all_greedy) never waits for the device; the sorting path
// waits as SampleParams::ws says.
void Sample(const SampleParams& p);

}  // namespace ds::cuda
