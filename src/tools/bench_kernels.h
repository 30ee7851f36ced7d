// Shared by the `dsinfer bench kernels` sources (bench_kernels.cpp: the command, ceilings, GEMM /
// MoE / skinny / small-kernel families, the JSON and markdown writers; bench_kernels_mla.cpp:
// the MLA decode and prefill families): the device buffer, the timing harness (Bench: warm-up,
// CUDA-graph replays of launches rotating over more than L2, median replay time, the records)
// and the MLA families' entry points and comparison tables. CUDA builds only.
#pragma once

#ifdef DS_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fill_random.h"

namespace ds::bench_kernels {

// Plain device allocation (cudaMalloc), freed on scope exit.
class Buf {
 public:
  explicit Buf(size_t bytes) : bytes_(std::max<size_t>(bytes, 16)) { DS_CUDA_CHECK(cudaMalloc(&p_, bytes_)); }
  ~Buf() { cudaFree(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

template <typename T>
std::unique_ptr<Buf> Upload(const std::vector<T>& h) {
  auto b = std::make_unique<Buf>(h.size() * sizeof(T));
  DS_CUDA_CHECK(cudaMemcpy(b->template as<void>(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

inline constexpr double kRotateBytes = 256.0 * 1024 * 1024;  // > 4x the H200's 60 MB L2
inline int SetsFor(double bytes_per_set, int cap = 16) {
  return static_cast<int>(std::clamp(std::ceil(kRotateBytes / std::max(1.0, bytes_per_set)), 1.0, double(cap)));
}

struct Record {
  std::string kernel, shape, metric;
  double value = 0, ceiling = 0, ratio = 0, time_us = 0;
  std::string note;
};

class Bench {
 public:
  Bench(bool quick, double budget_s) : quick_(quick), budget_s_(budget_s), t0_(std::chrono::steady_clock::now()) {
    DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    DS_CUDA_CHECK(cudaEventCreate(&ea_));
    DS_CUDA_CHECK(cudaEventCreate(&eb_));
  }
  ~Bench() {
    cudaEventDestroy(ea_);
    cudaEventDestroy(eb_);
    cudaStreamDestroy(st_);
  }
  cudaStream_t st() const { return st_; }
  bool quick() const { return quick_; }
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  bool OutOfTime() const { return budget_s_ > 0 && Elapsed() > budget_s_; }
  uint64_t NextSeed() { return ++seed_ * 0x9E3779B97F4A7C15ull; }

  // Median device time of one launch in microseconds (see the file comment).
  double TimeUs(const std::function<void(int)>& launch, int nsets, int min_reps = 20, double max_ms = 400) {
    for (int i = 0; i < std::max(2, nsets); ++i) launch(i % nsets);
    DS_CUDA_CHECK(cudaStreamSynchronize(st_));
    DS_CUDA_CHECK(cudaEventRecord(ea_, st_));
    launch(0);
    DS_CUDA_CHECK(cudaEventRecord(eb_, st_));
    DS_CUDA_CHECK(cudaEventSynchronize(eb_));
    float est_ms = 0;
    DS_CUDA_CHECK(cudaEventElapsedTime(&est_ms, ea_, eb_));
    const double est_us = std::max(1.0, est_ms * 1e3);
    const int per_graph = static_cast<int>(std::clamp(std::ceil(300.0 / est_us), double(std::min(nsets, 16)), 64.0));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    const bool slow = est_us > 20000;  // launch gaps don't matter: time launches one by one
    bool graph_ok = !slow && cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (graph_ok) {
      try {
        for (int k = 0; k < per_graph; ++k) launch(k % nsets);
      } catch (const std::exception&) {
        graph_ok = false;
      }
      graph_ok = cudaStreamEndCapture(st_, &graph) == cudaSuccess && graph_ok;
      graph_ok = graph_ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    }
    (void)cudaGetLastError();  // clear a failed capture's error
    const int n_launch = graph_ok ? per_graph : 1;
    const int reps = static_cast<int>(std::clamp(max_ms * 1e3 / (est_us * n_launch), double(min_reps), 300.0));
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto& e : ev) DS_CUDA_CHECK(cudaEventCreate(&e));
    for (int w = 0; w < (slow ? 0 : 2); ++w) {
      if (graph_ok) DS_CUDA_CHECK(cudaGraphLaunch(exec, st_));
      else launch(w % nsets);
    }
    for (int r = 0; r < reps; ++r) {
      DS_CUDA_CHECK(cudaEventRecord(ev[2 * r], st_));
      if (graph_ok) DS_CUDA_CHECK(cudaGraphLaunch(exec, st_));
      else launch(r % nsets);
      DS_CUDA_CHECK(cudaEventRecord(ev[2 * r + 1], st_));
    }
    DS_CUDA_CHECK(cudaStreamSynchronize(st_));
    std::vector<double> t(reps);
    for (int r = 0; r < reps; ++r) {
      float ms = 0;
      DS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
      t[r] = ms * 1e3 / n_launch;
    }
    for (auto& e : ev) cudaEventDestroy(e);
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    return t[reps / 2];
  }

  // Adds a TB/s record (bytes > 0) and a TFLOP/s record (flops > 0).
  void Add(const std::string& kernel, const std::string& shape, double us, double bytes, double flops,
           bool fp8_ceiling, const std::string& note = "") {
    if (bytes > 0) recs.push_back({kernel, shape, "TB/s", bytes / us * 1e-6, copy_tbs, bytes / us * 1e-6 / copy_tbs, us, note});
    if (flops > 0) {
      const double c = fp8_ceiling ? fp8_tflops : bf16_tflops;
      recs.push_back({kernel, shape, "TFLOP/s", flops / us * 1e-6, c, flops / us * 1e-6 / c, us, note});
    }
    std::printf("%-28s %-44s %10.1f us", kernel.c_str(), shape.c_str(), us);
    if (bytes > 0) std::printf("  %6.2f TB/s (%.2f)", bytes / us * 1e-6, bytes / us * 1e-6 / copy_tbs);
    if (flops > 0) std::printf("  %7.1f TFLOP/s (%.2f)", flops / us * 1e-6, flops / us * 1e-6 / (fp8_ceiling ? fp8_tflops : bf16_tflops));
    std::printf("%s%s\n", note.empty() ? "" : "  ", note.c_str());
    std::fflush(stdout);
  }

  std::vector<Record> recs;
  std::vector<std::string> skipped;
  double copy_tbs = 0, bf16_tflops = 0, fp8_tflops = 0;
  double copy_memcpy_tbs = 0, copy_kernel_tbs = 0;

 private:
  bool quick_;
  double budget_s_;
  std::chrono::steady_clock::time_point t0_;
  cudaStream_t st_ = nullptr;
  cudaEvent_t ea_ = nullptr, eb_ = nullptr;
  uint64_t seed_ = 1;
};

// ---- FP8 weights shared by the GEMM / GEMV families
// DeepSeek-V3's dense projections (N = output features, K = input features).
struct Proj { const char* name; int64_t N, K; };
inline constexpr Proj kProjs[] = {
    {"q_a_proj", 1536, 7168},       {"q_b_proj", 24576, 1536},     {"kv_a_proj_with_mqa", 576, 7168},
    {"kv_b_proj", 32768, 512},      {"o_proj", 7168, 16384},       {"dense_gate_up", 36864, 7168},
    {"dense_down", 7168, 18432},    {"shared_gate_up", 4096, 7168}, {"shared_down", 7168, 2048},
};

// Copies of an e4m3 [N, K] weight with its 128 x 128 fp32 block scales, rotating over more than L2
// (SetsFor, at most max_sets); bytes = one copy's weight + scale bytes.
struct Fp8WeightSets {
  Fp8WeightSets(Bench& b, int64_t N, int64_t K, int max_sets)
      : kbn((N + 127) / 128), kbk((K + 127) / 128), bytes(double(N) * K + double(kbn) * kbk * 4) {
    for (int i = 0, n = SetsFor(bytes, max_sets); i < n; ++i) {
      w.push_back(std::make_unique<Buf>(N * K));
      s.push_back(std::make_unique<Buf>(kbn * kbk * 4));
      cuda::FillE4M3(w.back()->as<uint8_t>(), N * K, b.NextSeed(), b.st());
      cuda::FillUniformF32(s.back()->as<float>(), kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
    }
  }
  int sets() const { return static_cast<int>(w.size()); }
  int64_t kbn, kbk;
  double bytes;
  std::vector<std::unique_ptr<Buf>> w, s;
};

void Fp8GemvPdlFamily(Bench& b);  // --only fp8_gemv_pdl (bench_kernels_gemv.cpp)

// ---- MLA families (bench_kernels_mla.cpp)
// FlashMLA comparison rows of the markdown (mla_anchors, mla_sm90) and the mixed-length checks.
struct AnchorResult { std::string name; double flashmla_us, ours_us, before_us; };
// MlaDecodeParams::sm90_variant 0..16 and their kernel-name tags in the tables ("[removed]": rejected).
inline constexpr int kSm90Variants = 17;
inline constexpr const char* kSm90VariantTags[kSm90Variants] = {
    "", "[seesaw]", "[seesaw,late-release]", "[removed]", "[3wg]", "[removed]", "[removed]",
    "[removed]", "[3wg,fast-softmax]", "[fast-softmax]", "[3wg,fast-softmax,box-barriers]", "[tile-pairs]",
    "[3wg,ring3,q-in-registers]", "[3wg,ring3,q-in-registers,stage-barriers]", "[removed]",
    "[3wg,ring3,q-in-registers,stage-barriers,lean-softmax]",
    "[3wg,ring3,q-in-registers,stage-barriers,lean-softmax,k-multicast]"};
// The run sets of an sm90 anchor: the uniform split plan or the balanced work list
// (MlaDecodeParams::sm90_work), each with the fp32 q or a bf16 q (MlaDecodeParams::q_bf16); the
// table's column tags vN, vNb, vNq, vNbq.
enum Sm90RunSet : int { kSm90Plain = 0, kSm90Balanced, kSm90QBf16, kSm90BalancedQBf16, kSm90RunSets };
inline constexpr const char* kSm90RunSetTags[kSm90RunSets] = {"", "b", "q", "bq"};
struct Sm90Result {
  std::string name;
  double flashmla_us = 0;
  std::vector<double> us[kSm90RunSets];  // [run set][variant] us; -1 = not timed
  double tc_us = 0;
};
struct MlaTables {
  std::vector<AnchorResult> anchors;
  std::vector<Sm90Result> sm90;
  std::vector<std::string> mixed_checks;
  // DS_BENCH_MLA_ANCHOR_METHOD=1: the sm90 anchor cases timed as ANCHORS.md timed FlashMLA (1 s idle,
  // median of 50 single launches), with the mean NVML SM clock meanwhile (0: no NVML).
  struct AnchorMethod { std::string name, kernel; double us, burst_us, mhz; };
  std::vector<AnchorMethod> anchor_method;
};
MlaTables& MlaResults();  // one per process (the command runs once)
// ANCHORS.md's method for timing FlashMLA (DS_BENCH_MLA_ANCHOR_METHOD=1): the stream drained, 1 s
// idle, 3 warm-up launches, then 50 launches each between its own two CUDA events; returns the
// median in us and, in *mhz, the mean NVML SM clock sampled every 2 ms meanwhile (0 without NVML).
double AnchorMethodUs(Bench& b, const std::function<void(int)>& launch, double* mhz);
void MlaDecodeAnchors(Bench& b);      // --only mla_anchors
void MlaDecodeSm90Anchors(Bench& b);  // --only mla_sm90
void MlaDecodeTune(Bench& b);         // --only mla_tune
void MlaDecodeSweep(Bench& b);        // --only mla_sweep
void MlaPrefillCase(Bench& b, int64_t T);  // --only mla_prefill: 128 heads x T tokens, one sequence
void MlaPrefillCompare(Bench& b);
void MlaPrefillLong(Bench& b);

}  // namespace ds::bench_kernels
#endif  // DS_WITH_CUDA
