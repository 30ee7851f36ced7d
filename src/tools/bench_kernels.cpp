// `dsinfer bench kernels`: times the hot CUDA kernels at real DeepSeek-V3 shapes and writes
// bench/results/kernels.json (a list of {"kernel", "shape", "metric", "value", "ceiling",
// "ratio", "gpu", "commit", "date"}) and a markdown table beside it (kernels.md).
//
// Method (device/METHOD.md): inputs filled on the device with random data (never zeros);
// warm-up launches first; then `per_graph` launches rotating over enough input sets to exceed
// twice the L2 (60 MB on the H200) are captured in one CUDA graph, the graph is replayed many
// times with a CUDA event pair around each replay, and the figure is the median replay time /
// per_graph (launch gaps excluded). Ceilings are measured in the same run: device-to-device
// copy (bytes read + written), cuBLASLt bf16 GEMM 8192^3 and cuBLASLt block-scaled fp8 GEMM
// 8192^3 (1x128 activation / 128x128 weight scales).
//
// Conventions: MLA decode FLOPs = 2 x heads x q_len x total_kv x (576 + 512), bytes = latent
// cache read + q + out (bf16 sizes, as FlashMLA's table in shared/docs/ANCHORS.md); MLA prefill
// (naive form, causal: only the unmasked half) FLOPs = 2 x heads x T(T+1)/2 x (192 + 128),
// old CUDA-core kernel, mma.sync tensor-core kernel and sm_90a kernel (MlaPrefillCompare,
// MlaPrefillLong: chunks after a cached prefix count every visible key); GEMMs 2 M N K, bytes =
// weights + activations + output; MoE bytes count only the experts a batch touches.
//
// usage: dsinfer bench kernels [--quick] [--budget-s S] [--out DIR] [--commit C]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tools/command.h"
#include "tools/bench_kernels.h"

#ifdef DS_WITH_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fill_random.h"
#include "backend/cuda/device_props.h"
#include "backend/cuda/fp8_gemm_wgmma_sm90.h"
#include "backend/cuda/wgmma_probe.h"
#include "backend/cuda/fp8_gemm_sm90.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "backend/cuda/host_plans.h"
#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/fp8_gemv_grouped.h"
#include "backend/cuda/fp8_quant.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/grouped_gemm.h"
#include "backend/cuda/grouped_gemm_sm90.h"
#include "backend/cuda/grouped_gemm_sm90_mixed.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/skinny_gemm.h"
#endif

namespace {

#ifdef DS_WITH_CUDA
using namespace ds::cuda;

using namespace ds::bench_kernels;


// ---------------------------------------------------------------- ceilings
void Ceilings(Bench& b) {
  // DS_BENCH_MLA_ANCHOR_METHOD=1 (session 41): the copy and the bf16 GEMM also timed as ANCHORS.md's
  // FlashMLA run timed them (its same-run ceilings: copy 4.22 TB/s, bf16 GEMM 766 TFLOP/s), so that the
  // anchor-method MLA figures have ceilings of the same method. Records only; the ceilings stay.
  const char* am_env = std::getenv("DS_BENCH_MLA_ANCHOR_METHOD");
  const bool am = am_env != nullptr && std::string(am_env) == "1";
  double am_copy_us = 0, am_copy_mhz = 0, am_gemm_us = 0, am_gemm_mhz = 0;
  {
    const size_t bytes = size_t{1} << 31;  // 2 GiB each way
    Buf src(bytes), dst(bytes);
    FillE4M3(src.as<uint8_t>(), static_cast<int64_t>(bytes), b.NextSeed(), b.st());
    // Run 1 (2026-11-29) measured 2.72 TB/s through a graph-captured cudaMemcpyAsync while
    // kernels reached 3.1-3.3 TB/s: time an SM copy kernel too and take the faster.
    const double us_memcpy = b.TimeUs([&](int) {
      DS_CUDA_CHECK(cudaMemcpyAsync(dst.as<void>(), src.as<void>(), bytes, cudaMemcpyDeviceToDevice, b.st()));
    }, 1, 10);
    const auto copy = [&](int) { CopyDeviceBytes(dst.as<void>(), src.as<void>(), static_cast<int64_t>(bytes), b.st()); };
    const double us_kernel = b.TimeUs(copy, 1, 10);
    if (am) am_copy_us = AnchorMethodUs(b, copy, &am_copy_mhz);
    b.copy_memcpy_tbs = 2.0 * bytes / us_memcpy * 1e-6;
    b.copy_kernel_tbs = 2.0 * bytes / us_kernel * 1e-6;
    b.copy_tbs = std::max(b.copy_memcpy_tbs, b.copy_kernel_tbs);
  }
  const int64_t n = 8192;
  {
    Buf x(n * n * 2), w(n * n * 2), y(n * n * 2);
    FillUniformBf16(x.as<__nv_bfloat16>(), n * n, b.NextSeed(), -1, 1, b.st());
    FillUniformBf16(w.as<__nv_bfloat16>(), n * n, b.NextSeed(), -1, 1, b.st());
    GemmBf16Params p{};
    p.x = x.as<__nv_bfloat16>(); p.ldx = n; p.w = w.as<__nv_bfloat16>(); p.ldw = n; p.y = y.as<void>(); p.ldy = n;
    p.y_type = DTypeOut::kBF16; p.M = p.N = p.K = n; p.stream = b.st();
    const double us = b.TimeUs([&](int) { GemmBf16(p); }, 1, 10);
    b.bf16_tflops = 2.0 * n * n * n / us * 1e-6;
    if (am) am_gemm_us = AnchorMethodUs(b, [&](int) { GemmBf16(p); }, &am_gemm_mhz);
  }
  {
    const int64_t kb = n / 128;
    Buf xq(n * n), wq(n * n), xs(kb * n * 4), ws(kb * Fp8WeightScaleLd(n) * 4), y(n * n * 2);
    FillE4M3(xq.as<uint8_t>(), n * n, b.NextSeed(), b.st());
    FillE4M3(wq.as<uint8_t>(), n * n, b.NextSeed(), b.st());
    FillUniformF32(xs.as<float>(), kb * n, b.NextSeed(), 1e-3f, 2e-3f, b.st());
    FillUniformF32(ws.as<float>(), kb * Fp8WeightScaleLd(n), b.NextSeed(), 1e-3f, 2e-3f, b.st());
    GemmFp8Params p{};
    p.xq = xq.as<uint8_t>(); p.ldx = n; p.x_scales = xs.as<float>(); p.wq = wq.as<uint8_t>(); p.ldw = n;
    p.w_scales = ws.as<float>(); p.w_scale_ld = Fp8WeightScaleLd(n); p.y = y.as<void>(); p.ldy = n;
    p.y_type = DTypeOut::kBF16; p.M = p.N = p.K = n; p.stream = b.st();
    const double us = b.TimeUs([&](int) { GemmFp8(p); }, 1, 10);
    b.fp8_tflops = 2.0 * n * n * n / us * 1e-6;
  }
  std::printf("copy: cudaMemcpyAsync %.2f TB/s, SM kernel %.2f TB/s\n", b.copy_memcpy_tbs, b.copy_kernel_tbs);
  std::printf("ceilings: copy %.2f TB/s, bf16 GEMM 8192^3 %.0f TFLOP/s, fp8 block-scaled GEMM 8192^3 %.0f TFLOP/s\n",
              b.copy_tbs, b.bf16_tflops, b.fp8_tflops);
  b.recs.push_back({"ceiling/copy_d2d", "2 GiB", "TB/s", b.copy_tbs, b.copy_tbs, 1.0, 0,
                    "bytes read + written; the faster of cudaMemcpyAsync and an SM copy kernel"});
  b.recs.push_back({"copy_d2d/cudaMemcpyAsync", "2 GiB", "TB/s", b.copy_memcpy_tbs, b.copy_tbs, b.copy_memcpy_tbs / b.copy_tbs, 0, ""});
  b.recs.push_back({"copy_d2d/sm_kernel", "2 GiB", "TB/s", b.copy_kernel_tbs, b.copy_tbs, b.copy_kernel_tbs / b.copy_tbs, 0, ""});
  b.recs.push_back({"ceiling/gemm_bf16", "8192^3", "TFLOP/s", b.bf16_tflops, b.bf16_tflops, 1.0, 0, "cuBLASLt"});
  b.recs.push_back({"ceiling/gemm_fp8", "8192^3", "TFLOP/s", b.fp8_tflops, b.fp8_tflops, 1.0, 0,
                    "cuBLASLt, 1x128 activation / 128x128 weight scales"});
  if (am) {
    const size_t bytes = size_t{1} << 31;
    const double tbs = 2.0 * bytes / am_copy_us * 1e-6, tf = 2.0 * n * n * n / am_gemm_us * 1e-6;
    char note[160];
    std::snprintf(note, sizeof note, "SM copy kernel; 1 s idle, median of 50 single launches (ANCHORS.md's method), SM %.0f MHz mean",
                  am_copy_mhz);
    b.recs.push_back({"ceiling/copy_d2d[anchor-method]", "2 GiB", "TB/s", tbs, b.copy_tbs, tbs / b.copy_tbs, am_copy_us, note});
    std::snprintf(note, sizeof note, "cuBLASLt; 1 s idle, median of 50 single launches (ANCHORS.md's method), SM %.0f MHz mean",
                  am_gemm_mhz);
    b.recs.push_back({"ceiling/gemm_bf16[anchor-method]", "8192^3", "TFLOP/s", tf, b.bf16_tflops, tf / b.bf16_tflops, am_gemm_us, note});
    std::printf("ceilings (ANCHORS.md's method): copy %.2f TB/s, bf16 GEMM 8192^3 %.0f TFLOP/s\n", tbs, tf);
  }
}

// ---------------------------------------------------------------- FP8 dense GEMM
void Fp8GemmCase(Bench& b, const Proj& pr, int64_t M) {
  const int64_t N = pr.N, K = pr.K, Mp = Fp8PaddedM(M), kb = (K + 127) / 128, ld = Fp8WeightScaleLd(K);
  const std::string shape = std::string(pr.name) + " M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K);
  if (!GemmFp8Supported(M, N, K, K, K, N, DTypeOut::kBF16)) {
    std::printf("%-28s %-44s cuBLASLt has no block-scaled kernel\n", "fp8_gemm_cublaslt", shape.c_str());
    b.skipped.push_back("fp8_gemm " + shape + " (no cuBLASLt kernel)");
    return;
  }
  const double wbytes = double(N) * K + double((N + 127) / 128) * ld * 4;
  const int nsets = SetsFor(wbytes + double(Mp) * K, 16);
  std::vector<std::unique_ptr<Buf>> xq, xs, wq, wsc;
  for (int i = 0; i < nsets; ++i) {
    xq.push_back(std::make_unique<Buf>(Mp * K));
    xs.push_back(std::make_unique<Buf>(kb * Mp * 4));
    wq.push_back(std::make_unique<Buf>(N * K));
    wsc.push_back(std::make_unique<Buf>((N + 127) / 128 * ld * 4));
    FillE4M3(xq.back()->as<uint8_t>(), Mp * K, b.NextSeed(), b.st());
    FillE4M3(wq.back()->as<uint8_t>(), N * K, b.NextSeed(), b.st());
    FillUniformF32(xs.back()->as<float>(), kb * Mp, b.NextSeed(), 1e-3f, 2e-3f, b.st());
    FillUniformF32(wsc.back()->as<float>(), (N + 127) / 128 * ld, b.NextSeed(), 1e-3f, 2e-3f, b.st());
  }
  Buf y(Mp * N * 2);
  const double us = b.TimeUs([&](int i) {
    GemmFp8Params p{};
    p.xq = xq[i]->as<uint8_t>(); p.ldx = K; p.x_scales = xs[i]->as<float>(); p.wq = wq[i]->as<uint8_t>(); p.ldw = K;
    p.w_scales = wsc[i]->as<float>(); p.w_scale_ld = ld; p.y = y.as<void>(); p.ldy = N; p.y_type = DTypeOut::kBF16;
    p.M = M; p.N = N; p.K = K; p.stream = b.st();
    GemmFp8(p);
  }, nsets);
  b.Add("fp8_gemm_cublaslt", shape, us, wbytes + double(M) * K + double(M) * N * 2, 2.0 * M * N * K, true,
        M <= 64 ? "TB/s on weight+act+out bytes" : "");
}

void Fp8Gemms(Bench& b, const std::vector<int64_t>& Ms) {
  for (int64_t M : Ms)
    for (const auto& pr : kProjs) {
      if (b.OutOfTime()) { b.skipped.push_back(std::string("fp8_gemm ") + pr.name + " M" + std::to_string(M)); continue; }
      Fp8GemmCase(b, pr, M);
    }
}

// ---------------------------------------------------------------- FP8 GEMM operand sets
// Rotating input sets for one FP8 projection (GemmFp8's layouts): e4m3 activations [Mp, K] with
// group-major scales, e4m3 weights [N, K] with 128x128 block scales and their MN-major transposes
// (128- and 64-row, Fp8TransposeWeightScales), and one bf16 output [Mp, N].
struct Fp8GemmSets {
  int64_t M, N, K, Mp, kb, nb, ld;
  int n = 1;
  std::vector<std::unique_ptr<Buf>> xq, xs, wq, wsc, wmn, wmn64;
  std::unique_ptr<Buf> y;
  Fp8GemmSets(Bench& b, int64_t M_, int64_t N_, int64_t K_, int max_sets)
      : M(M_), N(N_), K(K_), Mp(Fp8PaddedM(M_)), kb((K_ + 127) / 128), nb((N_ + 127) / 128), ld(Fp8WeightScaleLd(K_)) {
    n = SetsFor(double(N) * K + double(Mp) * K, max_sets);
    for (int i = 0; i < n; ++i) {
      xq.push_back(std::make_unique<Buf>(Mp * K));
      xs.push_back(std::make_unique<Buf>(kb * Mp * 4));
      wq.push_back(std::make_unique<Buf>(N * K));
      wsc.push_back(std::make_unique<Buf>(nb * ld * 4));
      wmn.push_back(std::make_unique<Buf>(nb * kb * 4));
      wmn64.push_back(std::make_unique<Buf>((N + 63) / 64 * kb * 4));
      FillE4M3(xq.back()->as<uint8_t>(), Mp * K, b.NextSeed(), b.st());
      FillE4M3(wq.back()->as<uint8_t>(), N * K, b.NextSeed(), b.st());
      FillUniformF32(xs.back()->as<float>(), kb * Mp, b.NextSeed(), 1e-3f, 2e-3f, b.st());
      FillUniformF32(wsc.back()->as<float>(), nb * ld, b.NextSeed(), 1e-3f, 2e-3f, b.st());
      Fp8TransposeWeightScales(wsc.back()->as<float>(), ld, N, K, wmn.back()->as<float>(), b.st());
      Fp8TransposeWeightScales(wsc.back()->as<float>(), ld, N, K, wmn64.back()->as<float>(), b.st(), 64);
    }
    y = std::make_unique<Buf>(Mp * N * 2);
  }
  GemmFp8Params Params(int i, cudaStream_t st) const {
    GemmFp8Params p{};
    p.xq = xq[i]->as<uint8_t>(); p.ldx = K; p.x_scales = xs[i]->as<float>(); p.wq = wq[i]->as<uint8_t>(); p.ldw = K;
    p.w_scales = wsc[i]->as<float>(); p.w_scale_ld = ld; p.y = y->as<void>(); p.ldy = N; p.y_type = DTypeOut::kBF16;
    p.M = M; p.N = N; p.K = K; p.stream = st;
    return p;
  }
};

// ---------------------------------------------------------------- FP8 GEMM at M <= 64 (swap AB)
// Issue 5's "FP8 dense GEMM at M <= 64": the V3 projections at M = 1..64, cuBLASLt's GemmFp8 and
// the swap-AB CUTLASS kernel (fp8_gemm_skinny_sm90.h) in each stream-K decomposition, on the same
// buffers. TB/s counted on weight + scale bytes (the acceptance's "weight bytes"; the
// fp8_gemm_cublaslt records of Fp8Gemms count activations and output too). Each timed call is
// the whole call as a graph replays it: the cooperative stream-K forms' workspace zeroing
// launch and the K split's reduce launch included (CUTLASS's host-side setup is not).
void Fp8SkinnyCase(Bench& b, const Proj& pr, int64_t M) {
  const int64_t N = pr.N, K = pr.K, kb = (K + 127) / 128, nb = (N + 127) / 128;
  const std::string shape = std::string(pr.name) + " fp8 M" + std::to_string(M) + " N" + std::to_string(N) + " K" +
                            std::to_string(K);
  const double wbytes = double(N) * K + double(nb) * kb * 4;
  const Fp8GemmSets sets(b, M, N, K, 16);
  const int nsets = sets.n;
  const auto params = [&](int i) { return sets.Params(i, b.st()); };
  const auto& wmn = sets.wmn;
  const auto& wmn64 = sets.wmn64;
  double us_cublas = 0;
  if (GemmFp8Supported(M, N, K, K, K, N, DTypeOut::kBF16)) {
    us_cublas = b.TimeUs([&](int i) { GemmFp8(params(i)); }, nsets);
    b.Add("fp8_skinny/cublaslt", shape, us_cublas, wbytes, 0, true, "weight + scale bytes; GemmFp8 (cuBLASLt)");
  }
  struct Mode { SkinnyDecomposition d; int splits; bool pingpong; int scale_rows; int ksplit; const char* name; };
  const Mode modes[] = {{SkinnyDecomposition::kHeuristic, 1, false, 128, 1, "heuristic"},
                        {SkinnyDecomposition::kDataParallel, 1, false, 128, 1, "data_parallel"},
                        {SkinnyDecomposition::kSplitK, 2, false, 128, 1, "split_k2"},
                        {SkinnyDecomposition::kDataParallel, 1, true, 128, 1, "pp_data_parallel"},
                        {SkinnyDecomposition::kDataParallel, 1, true, 64, 1, "pp64_data_parallel"},
                        {SkinnyDecomposition::kDataParallel, 1, true, 64, 2, "pp64_ksplit2"},
                        {SkinnyDecomposition::kDataParallel, 1, true, 64, 4, "pp64_ksplit4"},
                        {SkinnyDecomposition::kDataParallel, 1, true, 64, 8, "pp64_ksplit8"},
                        {SkinnyDecomposition::kDataParallel, 1, true, 64, 14, "pp64_ksplit14"},
                        {SkinnyDecomposition::kDataParallel, 1, true, 64, Fp8SkinnyAutoKsplit(M, N, K), "auto"}};
  for (const Mode& m : modes) {
    if (m.ksplit > 1 && K % (128 * m.ksplit) != 0) continue;
    Fp8SkinnyGemmParams sp{};
    sp.g = params(0);
    sp.w_scales_mn = (m.scale_rows == 64 ? wmn64 : wmn)[0]->as<float>();
    sp.scale_rows = m.scale_rows;
    sp.ksplit = m.ksplit;
    sp.decomposition = m.d;
    sp.splits = m.splits;
    sp.pingpong = m.pingpong;
    const std::string why = Fp8SkinnyGemmSm90Unsupported(sp);
    if (!why.empty()) {
      b.skipped.push_back("fp8_skinny " + shape + " " + m.name + " (" + why + ")");
      continue;
    }
    const size_t bytes = Fp8SkinnyGemmSm90WorkspaceBytes(M, N, K, m.d, m.splits, m.pingpong, m.scale_rows, m.ksplit);
    Buf ws(std::max<size_t>(bytes, 256));
    const double us = b.TimeUs([&](int i) {
      Fp8SkinnyGemmParams q = sp;
      q.g = params(i);
      q.w_scales_mn = (m.scale_rows == 64 ? wmn64 : wmn)[i]->as<float>();
      q.workspace = ws.as<void>();
      q.workspace_bytes = bytes;
      Fp8SkinnyGemmSm90(q);
    }, nsets);
    char note[160];
    std::snprintf(note, sizeof note, "weight + scale bytes; swap-AB CUTLASS, %s, %s, workspace %zu B",
                  m.pingpong ? (m.scale_rows == 64 ? "ping-pong, 64-row tiles" : "ping-pong") : "cooperative", m.name,
                  bytes);
    char vs[48] = "";
    if (us_cublas > 0) std::snprintf(vs, sizeof vs, "; %.2fx cuBLASLt", us_cublas / us);
    b.Add(std::string("fp8_skinny/sm90_") + m.name, shape, us, wbytes, 0, true, std::string(note) + vs);
  }
}

void Fp8SkinnyFamily(Bench& b) {
  for (int64_t M : {1, 4, 8, 16, 32, 64})
    for (const auto& pr : kProjs) {
      if (b.OutOfTime()) { b.skipped.push_back(std::string("fp8_skinny ") + pr.name + " M" + std::to_string(M)); continue; }
      Fp8SkinnyCase(b, pr, M);
    }
}

// ---------------------------------------------------------------- FP8 GEMM at M >= 4096 (CUTLASS)
// Issue 5's "FP8 dense GEMM at M >= 4096 >= 85% of the fp8 ceiling": every V3 projection at
// M = 4096 and 16384, cuBLASLt's GemmFp8, Fp8GemmSm90's configurations and our wgmma forms on the same buffers
// (TFLOP/s over the ceiling measured in the same run).
void Fp8LargeCase(Bench& b, const Proj& pr, int64_t M) {
  const int64_t N = pr.N, K = pr.K;
  const std::string shape = std::string(pr.name) + " M" + std::to_string(M) + " N" + std::to_string(N) + " K" +
                            std::to_string(K);
  const Fp8GemmSets sets(b, M, N, K, 4);
  const int nsets = sets.n;
  const auto params = [&](int i) { return sets.Params(i, b.st()); };
  const auto& wmn = sets.wmn;
  const double flops = 2.0 * M * N * K;
  double us_cublas = 0;
  if (GemmFp8Supported(M, N, K, K, K, N, DTypeOut::kBF16)) {
    us_cublas = b.TimeUs([&](int i) { GemmFp8(params(i)); }, nsets);
    b.Add("fp8_large/cublaslt", shape, us_cublas, 0, flops, true, "GemmFp8 (cuBLASLt)");
  }
  const std::pair<Fp8GemmSm90Config, const char*> configs[] = {
      {Fp8GemmSm90Config::kCoop128StreamK, "coop128_streamk"},
      {Fp8GemmSm90Config::kCoop128Cluster2, "coop128_cluster2"},
      {Fp8GemmSm90Config::kPingpong64, "pingpong64"},
      {Fp8GemmSm90Config::kCoop128DataParallel, "coop128_dp"}};
  for (const auto& [c, name] : configs) {
    Fp8GemmSm90Params sp{};
    sp.g = params(0);
    sp.w_scales_mn = wmn[0]->as<float>();
    sp.config = c;
    const std::string why = Fp8GemmSm90Unsupported(sp);
    if (!why.empty()) { b.skipped.push_back("fp8_large " + shape + " " + name + " (" + why + ")"); continue; }
    const size_t wsb = Fp8GemmSm90WorkspaceBytes(M, N, K, c);
    Buf ws(std::max<size_t>(wsb, 256));
    const double us = b.TimeUs([&](int i) {
      Fp8GemmSm90Params q = sp;
      q.g = params(i);
      q.w_scales_mn = wmn[i]->as<float>();
      q.workspace = ws.as<void>();
      q.workspace_bytes = wsb;
      Fp8GemmSm90(q);
    }, nsets);
    char note[96] = "CUTLASS";
    if (us_cublas > 0) std::snprintf(note, sizeof note, "CUTLASS; %.2fx cuBLASLt", us_cublas / us);
    b.Add(std::string("fp8_large/sm90_") + name, shape, us, 0, flops, true, note);
  }
  // Our wgmma kernels (fp8_gemm_wgmma_sm90.h): the panel form where K <= 512 (kv_b), the 128 x 144
  // tile form where N % 144 == 0 (kv_a).
  const std::pair<Fp8GemmWgmmaForm, const char*> forms[] = {{Fp8GemmWgmmaForm::kPanel, "panel"},
                                                           {Fp8GemmWgmmaForm::kTile144, "tile144"}};
  struct Variant {
    Fp8GemmWgmmaSchedule sched; int multicast; bool overlap; const char* name; bool deep = false, ds = false;
  };
  const Variant variants[] = {{Fp8GemmWgmmaSchedule::kWhole, 0, false, ""},
                              {Fp8GemmWgmmaSchedule::kSplitHalves, 0, false, "_split"},
                              {Fp8GemmWgmmaSchedule::kPingPong, 0, false, "_pingpong"},
                              {Fp8GemmWgmmaSchedule::kWhole, 0, true, "_overlap"},
                              {Fp8GemmWgmmaSchedule::kPingPong, 0, true, "_pingpong_overlap"},
                              {Fp8GemmWgmmaSchedule::kDoubleAcc, 0, false, "_doubleacc"},
                              {Fp8GemmWgmmaSchedule::kDoubleAcc, 0, true, "_doubleacc_overlap"},
                              {Fp8GemmWgmmaSchedule::kRegisterA, 0, false, "_rega"},
                              {Fp8GemmWgmmaSchedule::kRegisterA, 0, true, "_rega_overlap"},
                              {Fp8GemmWgmmaSchedule::kRegisterA, 0, false, "_rega_deep", true},
                              {Fp8GemmWgmmaSchedule::kRegisterA, 0, true, "_rega_overlap_deep", true},
                              {Fp8GemmWgmmaSchedule::kRegisterA, 0, true, "_rega_overlap_deep_ds", true, true},
                              {Fp8GemmWgmmaSchedule::kWhole, 2, false, "_multicast2"},
                              {Fp8GemmWgmmaSchedule::kPingPong, 2, false, "_pingpong_multicast2"},
                              {Fp8GemmWgmmaSchedule::kDoubleAcc, 2, false, "_doubleacc_multicast2"}};
  for (const auto& [form, form_name] : forms)
    for (const auto& [sched, multicast, overlap, sched_name, deep, ds] : variants) {
    if (multicast && form != Fp8GemmWgmmaForm::kTile144) continue;  // (the panel form has none)
    if (sched == Fp8GemmWgmmaSchedule::kRegisterA && form != Fp8GemmWgmmaForm::kPanel) continue;
    const std::string name = std::string(form_name) + sched_name;
    Fp8GemmWgmmaSm90Params pp{};
    pp.g = params(0);
    pp.w_scales_mn = wmn[0]->as<float>();
    pp.form = form;
    pp.schedule = sched;
    pp.multicast = multicast;
    pp.overlap_epilogue = overlap;
    pp.deep_ring = deep;
    // (The deep ring applies where the panels sweep in step, panels <= SMs; elsewhere the launcher
    // runs the 8-stage ring, so the label would be wrong: skip.)
    if (deep && Fp8PaddedM(M) / 128 > CurrentDeviceProps().sms) continue;
    pp.double_staging = ds;
    if (!Fp8GemmWgmmaSm90Unsupported(pp).empty()) continue;  // (each form covers its own shapes)
    const double us = b.TimeUs([&](int i) {
      Fp8GemmWgmmaSm90Params q = pp;
      q.g = params(i);
      q.w_scales_mn = wmn[i]->as<float>();
      Fp8GemmWgmmaSm90(q);
    }, nsets);
    char note[128] = "ours (wgmma)";
    const int resident = multicast ? Fp8GemmWgmmaSm90ActiveClusters(pp) : 0;
    if (us_cublas > 0) std::snprintf(note, sizeof note, "ours (wgmma); %.2fx cuBLASLt", us_cublas / us);
    if (resident > 0)
      std::snprintf(note + std::strlen(note), sizeof note - std::strlen(note), "; %d clusters of %d resident", resident,
                    multicast);
    else if (multicast)
      std::snprintf(note + std::strlen(note), sizeof note - std::strlen(note), "; no clusters (N / 144 or grid odd)");
    b.Add("fp8_large/wgmma_" + name, shape, us, 0, flops, true, note);
    }
}

// The tensor pipe alone (wgmma_probe.h): each wgmma form at 1-3 warpgroups a SM, operands in
// shared memory, nothing else running. The ceiling for the GEMM and attention kernels built on
// that form, beside the cuBLASLt ceilings of the same run.
void WgmmaProbeFamily(Bench& b) {
  Buf sink(256);
  for (bool fp8 : {true, false})
    for (int n : {64, 128, 256})
      for (bool rs : {false, true}) {
        if (rs && n == 64) continue;
        for (int wgs : {1, 2, 3}) {
          if (b.OutOfTime()) { b.skipped.push_back("wgmma_probe"); return; }
          WgmmaProbeParams p{};
          p.fp8 = fp8;
          p.n = n;
          p.a_in_registers = rs;
          p.warpgroups = wgs;
          p.groups = 8192 * 128 / n;
          p.sink = sink.as<float>();
          p.clock_out = reinterpret_cast<unsigned long long*>(sink.as<uint8_t>() + 64);
          p.stream = b.st();
          const double us = b.TimeUs([&](int) { WgmmaProbe(p); }, 1, 10);
          unsigned long long clk[2] = {0, 0};
          DS_CUDA_CHECK(cudaMemcpy(clk, p.clock_out, sizeof clk, cudaMemcpyDeviceToHost));
          char note[96];
          std::snprintf(note, sizeof note, "tensor pipe alone; SM clock %.0f MHz (CTA 0)", clk[1] > 0 ? 1e3 * clk[0] / clk[1] : 0.0);
          char kernel[96], shape[96];
          std::snprintf(kernel, sizeof kernel, "wgmma_probe/%s_%s_n%d_wg%d", fp8 ? "e4m3" : "bf16", rs ? "rs" : "ss", n, wgs);
          std::snprintf(shape, sizeof shape, "m64n%dk%d x 4 x %lld groups", n, fp8 ? 32 : 16, static_cast<long long>(p.groups));
          b.Add(kernel, shape, us, 0, WgmmaProbeFlops(p), fp8, note);
        }
      }
}

void Fp8LargeFamily(Bench& b) {
  // DS_BENCH_FP8_LARGE_PROJS: a comma list of projection names to time (default: all nine).
  const char* only = std::getenv("DS_BENCH_FP8_LARGE_PROJS");
  const std::string filter = only ? std::string(",") + only + "," : "";
  for (int64_t M : {4096, 16384})
    for (const auto& pr : kProjs) {
      if (!filter.empty() && filter.find(std::string(",") + pr.name + ",") == std::string::npos) continue;
      if (b.OutOfTime()) { b.skipped.push_back(std::string("fp8_large ") + pr.name + " M" + std::to_string(M)); continue; }
      Fp8LargeCase(b, pr, M);
    }
}

// ---------------------------------------------------------------- MoE grouped GEMM
// One expert GEMM of a MoE layer with uniform routing: `tokens` x top_k token-expert pairs over
// the E experts of one rank, each expert's segment padded to kGroupedGemmRowAlign rows (as
// moe_permute does). FLOPs count the real rows only (2 x rows x N x K), not the padding.
// Both kernels run on the same buffers: the mma.sync kernel (what GroupedGemm picks) and the
// WMMA kernel it replaced (force_wmma), kernel name suffix "_wmma".
struct MoeModel { const char* name; int64_t experts, top_k, hidden, inter; bool fp8; };
const MoeModel kMoeV3{"V3", 256, 8, 7168, 2048, true};
const MoeModel kMoeV2Lite{"V2-Lite", 64, 6, 2048, 1408, false};

void MoeCase(Bench& b, const MoeModel& m, int ranks, int64_t tokens, bool gate_up) {
  const int64_t E = m.experts / ranks, top_k = m.top_k;
  const int64_t N = gate_up ? 2 * m.inter : m.hidden, K = gate_up ? m.hidden : m.inter;
  const int64_t rows = tokens * top_k;  // token-expert pairs this rank receives (uniform routing)
  std::vector<int32_t> off{0};
  int64_t touched = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = rows / E + (e < rows % E ? 1 : 0);
    touched += c > 0;
    off.push_back(off.back() + static_cast<int32_t>((c + kGroupedGemmRowAlign - 1) / kGroupedGemmRowAlign * kGroupedGemmRowAlign));
  }
  const int64_t max_rows = off.back();
  const int64_t kbn = (N + 127) / 128, kbk = (K + 127) / 128, wsize = m.fp8 ? 1 : 2;
  Buf a(max_rows * K * 2), w(E * N * K * wsize), ws(m.fp8 ? E * kbn * kbk * 4 : 16), out(max_rows * N * 2);
  FillUniformBf16(a.as<__nv_bfloat16>(), max_rows * K, b.NextSeed(), -1, 1, b.st());
  if (m.fp8) {
    FillE4M3(w.as<uint8_t>(), E * N * K, b.NextSeed(), b.st());
    FillUniformF32(ws.as<float>(), E * kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
  } else {
    FillUniformBf16(w.as<__nv_bfloat16>(), E * N * K, b.NextSeed(), -0.05f, 0.05f, b.st());
  }
  auto doff = Upload(off);
  const double wbytes = double(touched) * N * K * wsize + (m.fp8 ? double(touched) * kbn * kbk * 4 : 0.0);
  const std::string shape = std::string(m.name) + " " + (gate_up ? "gate_up" : "down") + " EP" + std::to_string(ranks) +
                            " E" + std::to_string(E) + " tok" + std::to_string(tokens) + " rows" + std::to_string(rows);
  const std::string kname = m.fp8 ? "moe_grouped_gemm_fp8w" : "moe_grouped_gemm_bf16";
  for (bool old : {false, true}) {
    GroupedGemmParams p{};
    p.a = a.as<__nv_bfloat16>(); p.lda = K; p.offsets = doff->as<int32_t>(); p.max_rows = max_rows;
    p.w = w.as<void>(); p.w_fp8 = m.fp8; p.w_scales = m.fp8 ? ws.as<float>() : nullptr; p.num_experts = E; p.N = N; p.K = K;
    p.out = out.as<void>(); p.out_type = DTypeOut::kBF16; p.ldo = N; p.stream = b.st(); p.force_wmma = old;
    const double us = b.TimeUs([&](int) { GroupedGemm(p); }, 1, 10);
    b.Add(kname + (old ? "_wmma" : ""), shape, us, wbytes + double(rows) * (K + N) * 2, 2.0 * rows * N * K, m.fp8,
          old ? "old WMMA 64x64 kernel" : (m.fp8 ? "mma.sync 128x128, e4m3 -> bf16 in registers, bf16 activations"
                                                 : "mma.sync 128x128"));
  }
}

// One V3 dense FP8 projection as the runner's in-kernel path runs it (`fp8_gemm = kernel`):
// GroupedGemm with one group of M rows padded to 64, bf16 activations, e4m3 weights with
// 128x128 fp32 block scales, fp32 output; random inputs filled on the bench stream.
struct DenseFp8Inputs {
  int64_t M, N, K, Mr, kbn, kbk;
  Buf a, w, ws, out;
  std::unique_ptr<Buf> doff;
  std::string shape;
  DenseFp8Inputs(Bench& b, const Proj& pr, int64_t rows)
      : M(rows), N(pr.N), K(pr.K),
        Mr((rows + kGroupedGemmRowAlign - 1) / kGroupedGemmRowAlign * kGroupedGemmRowAlign),
        kbn((N + 127) / 128), kbk((K + 127) / 128),
        a(Mr * K * 2), w(N * K), ws(kbn * kbk * 4), out(Mr * N * 4),
        doff(Upload(std::vector<int32_t>{0, static_cast<int32_t>(Mr)})),
        shape(std::string(pr.name) + " M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K)) {
    FillUniformBf16(a.as<__nv_bfloat16>(), Mr * K, b.NextSeed(), -1, 1, b.st());
    FillE4M3(w.as<uint8_t>(), N * K, b.NextSeed(), b.st());
    FillUniformF32(ws.as<float>(), kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
  }
  GroupedGemmParams Params(cudaStream_t st) {
    GroupedGemmParams p{};
    p.a = a.as<__nv_bfloat16>(); p.lda = K; p.offsets = doff->as<int32_t>(); p.max_rows = Mr;
    p.w = w.as<void>(); p.w_fp8 = true; p.w_scales = ws.as<float>(); p.num_experts = 1; p.N = N; p.K = K;
    p.out = out.as<void>(); p.out_type = DTypeOut::kF32; p.ldo = N; p.stream = st;
    return p;
  }
};

// The runner's default FP8 dense projection path (`fp8_gemm = kernel`): GroupedGemm with one
// group of M rows padded to 64. Old vs new kernel at decode (M 64) and prefill (M 4096) sizes.
void DenseFp8InKernelCase(Bench& b, const Proj& pr, int64_t M) {
  DenseFp8Inputs in(b, pr, M);
  const int64_t N = in.N, K = in.K, kbn = in.kbn, kbk = in.kbk;
  const std::string& shape = in.shape;
  for (bool old : {false, true}) {
    GroupedGemmParams p = in.Params(b.st());
    p.force_wmma = old;
    const double us = b.TimeUs([&](int) { GroupedGemm(p); }, 1, 10);
    b.Add(std::string("dense_fp8_inkernel") + (old ? "_wmma" : ""), shape, us,
          double(N) * K + double(kbn) * kbk * 4 + double(M) * K * 2 + double(M) * N * 4, 2.0 * M * N * K, true,
          old ? "old WMMA 64x64 kernel" : "mma.sync 128x128");
  }
}

void Moe(Bench& b) {
  struct Sweep { const MoeModel* m; int ranks; std::vector<int64_t> toks; };
  const std::vector<Sweep> sweeps =
      b.quick() ? std::vector<Sweep>{{&kMoeV3, 8, {32, 512}}, {&kMoeV2Lite, 1, {1024}}}
                : std::vector<Sweep>{{&kMoeV3, 8, {32, 512, 2048, 8192}},
                                     {&kMoeV2Lite, 1, {32, 1024, 4096, 8192}},
                                     {&kMoeV3, 1, {32, 512, 2048, 8192}},
                                     {&kMoeV3, 32, {32, 512, 2048}}};
  for (const auto& sw : sweeps)
    for (int64_t t : sw.toks)
      for (bool gu : {true, false}) {
        if (b.OutOfTime()) {
          b.skipped.push_back(std::string("moe ") + sw.m->name + " EP" + std::to_string(sw.ranks) + " tok" + std::to_string(t));
          continue;
        }
        MoeCase(b, *sw.m, sw.ranks, t, gu);
      }
  for (int64_t M : {64, 4096})
    for (const auto& pr : kProjs) {
      if (std::string(pr.name) != "q_b_proj" && std::string(pr.name) != "o_proj" && std::string(pr.name) != "kv_a_proj_with_mqa") continue;
      if (b.OutOfTime()) { b.skipped.push_back(std::string("dense_fp8_inkernel ") + pr.name); continue; }
      DenseFp8InKernelCase(b, pr, M);
    }
}

// ---------------------------------------------------------------- MoE grouped GEMM, prefill sizes
// The sm_90a mixed-input kernel (grouped_gemm_sm90_mixed.h) on given inputs, both tiles (128 /
// 256 tokens; "auto's choice" marks the one GroupedGemm would take), each rated against the bf16
// ceiling (its MMAs are bf16), then the faster one against the fp8 ceiling ("_best_vs_fp8": what
// the e4m3 x e4m3 path could reach). Skipped (with the reason) where it does not apply.
void MixedCase(Bench& b, const std::string& kernel, const std::string& shape, const void* a, int64_t lda,
               const int32_t* offsets, int64_t max_rows, const void* w8, const float* wscales, int64_t E, int64_t N,
               int64_t K, void* out, DTypeOut ot, double flops) {
  GroupedGemmParams p{};
  p.a = static_cast<const __nv_bfloat16*>(a); p.lda = lda; p.offsets = offsets; p.max_rows = max_rows;
  p.w = w8; p.w_fp8 = true; p.w_scales = wscales; p.num_experts = E; p.N = N; p.K = K;
  p.out = out; p.out_type = ot; p.ldo = N; p.stream = b.st();
  const std::string why = GroupedGemmSm90MixedUnsupported(p);
  if (!why.empty() || std::getenv("DS_BENCH_SKIP_SM90_MIXED")) {
    b.skipped.push_back(kernel + " " + shape + " (" + (why.empty() ? "DS_BENCH_SKIP_SM90_MIXED" : why) + ")");
    return;
  }
  const size_t wsb = GroupedGemmSm90MixedWorkspaceBytes(E, N, K);
  Buf ws(wsb);
  p.workspace = ws.as<void>(); p.workspace_bytes = wsb;
  double best = 0;
  for (Sm90MixedTile tile : {Sm90MixedTile::k128, Sm90MixedTile::k256}) {
    const bool wide = tile == Sm90MixedTile::k256;
    const double us = b.TimeUs([&](int) { GroupedGemmSm90Mixed(p, tile); }, 1, 10);
    b.Add(kernel + (wide ? "_t256" : "_t128"), shape, us, 0, flops, false,
          std::string("CUTLASS RS wgmma 128x") + (wide ? "256" : "128") +
              "x64 cooperative, e4m3 -> fp32 x scale -> bf16 in registers" +
              (GroupedGemmSm90MixedWideTile(p, Sm90MixedTile::kAuto) == wide ? " (auto's choice)" : ""));
    best = best == 0 ? us : std::min(best, us);
  }
  b.Add(kernel + "_best_vs_fp8", shape, best, 0, flops, true, "the faster tile, rated against the fp8 ceiling");
}

// One V3 dense FP8 projection at M rows (the runner's in-kernel path: one group of M rows padded
// to 64): the mma.sync kernel vs the sm_90a mixed-input kernel.
void DenseMixedCase(Bench& b, const Proj& pr, int64_t M) {
  DenseFp8Inputs in(b, pr, M);
  const double flops = 2.0 * M * in.N * in.K;
  GroupedGemmParams p = in.Params(b.st());
  b.Add("dense_prefill_mma_fp8w", in.shape, b.TimeUs([&](int) { GroupedGemm(p); }, 1, 10), 0, flops, false,
        "mma.sync 128x128, e4m3 weights -> bf16, bf16 activations");
  MixedCase(b, "dense_prefill_sm90_mixed", in.shape, in.a.as<void>(), in.K, in.doff->as<int32_t>(), in.Mr,
            in.w.as<void>(), in.ws.as<float>(), 1, in.N, in.K, in.out.as<void>(), DTypeOut::kF32, flops);
}

// The expert GEMMs at prefill token counts on every kernel the runner can pick, on the same
// routing (uniform, segments padded to 64 rows as moe_permute writes them; FLOPs count the
// real rows only): the mma.sync kernel with bf16 weights and with FP8 weights (bf16
// activations), and the sm_90a CUTLASS kernels (grouped_gemm_sm90.h) with bf16 x bf16 and
// e4m3 x e4m3 block-scaled inputs. "+quant" adds the 1x128 activation quantisation the runner
// runs before the FP8 gate_up GEMM. "sm90_mixed" is the sm_90a mixed-input kernel
// (grouped_gemm_sm90_mixed.h: bf16 activations x e4m3 weights, the default numerics of
// mma_fp8w; its time includes the per-call block-scale expansion). bf16-activation records are
// rated against the bf16 ceiling (the MMAs are bf16), e4m3 x e4m3 ones against the fp8 ceiling;
// mma_fp8w keeps its fp8 rating (as before) and sm90_mixed gets both. Family "moe_prefill"; it
// also times the V3 dense FP8 projections at M = 4096 (one group: mma.sync vs sm90_mixed).
void MoePrefillCase(Bench& b, const MoeModel& m, int ranks, int64_t tokens, bool gate_up) {
  const int64_t E = m.experts / ranks, top_k = m.top_k;
  const int64_t N = gate_up ? 2 * m.inter : m.hidden, K = gate_up ? m.hidden : m.inter;
  const int64_t rows = tokens * top_k;
  std::vector<int32_t> off{0};
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = rows / E + (e < rows % E ? 1 : 0);
    off.push_back(off.back() + static_cast<int32_t>((c + kGroupedGemmRowAlign - 1) / kGroupedGemmRowAlign * kGroupedGemmRowAlign));
  }
  const int64_t max_rows = off.back(), kbn = (N + 127) / 128, kbk = (K + 127) / 128;
  const DTypeOut ot = gate_up ? DTypeOut::kF32 : DTypeOut::kBF16;  // as the runner: w13 fp32, w2 bf16
  Buf a(max_rows * K * 2), a8(max_rows * K), asc(max_rows * kbk * 4), wb(E * N * K * 2), w8(E * N * K),
      ws(E * kbn * kbk * 4), out(max_rows * N * 4);
  FillUniformBf16(a.as<__nv_bfloat16>(), max_rows * K, b.NextSeed(), -1, 1, b.st());
  FillE4M3(a8.as<uint8_t>(), max_rows * K, b.NextSeed(), b.st());
  FillUniformF32(asc.as<float>(), max_rows * kbk, b.NextSeed(), 1e-3f, 2e-3f, b.st());
  FillUniformBf16(wb.as<__nv_bfloat16>(), E * N * K, b.NextSeed(), -0.05f, 0.05f, b.st());
  FillE4M3(w8.as<uint8_t>(), E * N * K, b.NextSeed(), b.st());
  FillUniformF32(ws.as<float>(), E * kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
  auto doff = Upload(off);
  const size_t wsb = std::max(GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kBf16, E, max_rows, N, K),
                              GroupedGemmSm90WorkspaceBytes(Sm90GemmInput::kFp8, E, max_rows, N, K));
  Buf gws(wsb);
  const std::string shape = std::string(m.name) + " " + (gate_up ? "gate_up" : "down") + " EP" + std::to_string(ranks) +
                            " E" + std::to_string(E) + " tok" + std::to_string(tokens) + " rows" + std::to_string(rows);
  const double flops = 2.0 * rows * N * K;
  GroupedGemmParams p{};
  p.a = a.as<__nv_bfloat16>(); p.lda = K; p.offsets = doff->as<int32_t>(); p.max_rows = max_rows;
  p.num_experts = E; p.N = N; p.K = K; p.out = out.as<void>(); p.out_type = ot; p.ldo = N; p.stream = b.st();
  p.sm90 = false;
  {
    GroupedGemmParams q = p;
    q.w = wb.as<void>();
    b.Add("moe_prefill_mma_bf16", shape, b.TimeUs([&](int) { GroupedGemm(q); }, 1, 10), 0, flops, false, "mma.sync 128x128");
    q.w = w8.as<void>(); q.w_fp8 = true; q.w_scales = ws.as<float>();
    b.Add("moe_prefill_mma_fp8w", shape, b.TimeUs([&](int) { GroupedGemm(q); }, 1, 10), 0, flops, true,
          "mma.sync 128x128, e4m3 weights -> bf16, bf16 activations");
  }
  MixedCase(b, "moe_prefill_sm90_mixed", shape, a.as<void>(), K, doff->as<int32_t>(), max_rows, w8.as<void>(),
            ws.as<float>(), E, N, K, out.as<void>(), ot, flops);
  if (!GroupedGemmSm90Available()) {
    b.skipped.push_back("moe_prefill sm90 (no CUTLASS / not sm_90): " + shape);
    return;
  }
  GroupedGemmSm90Params s{};
  s.a = a.as<void>(); s.lda = K; s.offsets = doff->as<int32_t>(); s.max_rows = max_rows; s.w = wb.as<void>();
  s.num_experts = E; s.N = N; s.K = K; s.out = out.as<void>(); s.out_type = ot; s.ldo = N;
  s.workspace = gws.as<void>(); s.workspace_bytes = wsb; s.stream = b.st();
  b.Add("moe_prefill_sm90_bf16", shape, b.TimeUs([&](int) { GroupedGemmSm90(s); }, 1, 10), 0, flops, false,
        "CUTLASS wgmma 128x256x64 cooperative");
  GroupedGemmSm90Params f = s;
  f.input = Sm90GemmInput::kFp8; f.a = a8.as<void>(); f.a_scales = asc.as<float>(); f.w = w8.as<void>(); f.w_scales = ws.as<float>();
  b.Add("moe_prefill_sm90_fp8", shape, b.TimeUs([&](int) { GroupedGemmSm90(f); }, 1, 10), 0, flops, true,
        "CUTLASS wgmma e4m3 128x128x128 cooperative, 1x128 / 128x128 block scales");
  if (gate_up) {
    const auto quant_and_gemm = [&](int) {
      Fp8QuantParams qp{a.as<void>(), true, K, max_rows, K, 128, a8.as<uint8_t>(), K, asc.as<float>(), ScaleLayout::kTokenMajor, b.st()};
      Fp8QuantizePerTokenGroup(qp);
      GroupedGemmSm90(f);
    };
    b.Add("moe_prefill_sm90_fp8+quant", shape, b.TimeUs(quant_and_gemm, 1, 10), 0, flops, true,
          "activation quantisation (bf16 -> e4m3, 1x128) + the FP8 GEMM");
  }
}

void MoePrefill(Bench& b) {
  // The V3 dense FP8 projections at prefill size, mma.sync vs the sm_90a mixed-input kernel.
  for (const auto& pr : kProjs) {
    if (b.OutOfTime()) { b.skipped.push_back(std::string("moe_prefill dense ") + pr.name); continue; }
    DenseMixedCase(b, pr, 4096);
  }
  struct Sweep { const MoeModel* m; int ranks; std::vector<int64_t> toks; };
  const std::vector<Sweep> sweeps =
      b.quick() ? std::vector<Sweep>{{&kMoeV3, 8, {4096}}, {&kMoeV2Lite, 1, {8192}}}
                : std::vector<Sweep>{{&kMoeV3, 1, {2048, 8192}}, {&kMoeV3, 8, {2048, 8192}}, {&kMoeV3, 32, {2048, 8192}},
                                     {&kMoeV2Lite, 1, {8192}}};
  for (const auto& sw : sweeps)
    for (int64_t t : sw.toks)
      for (bool gu : {true, false}) {
        if (b.OutOfTime()) {
          b.skipped.push_back(std::string("moe_prefill ") + sw.m->name + " EP" + std::to_string(sw.ranks) + " tok" + std::to_string(t));
          continue;
        }
        MoePrefillCase(b, *sw.m, sw.ranks, t, gu);
      }
}

// ---------------------------------------------------------------- skinny (decode-size) GEMMs
// Decode-size GEMMs, old path vs the skinny kernel (skinny_gemm.h); TB/s counts weight bytes
// only (+ fp8 scales), the quantity a decode step must stream. MoE: `active` experts with `r`
// rows each out of E (as r tokens that all pick the same experts; the runner's bounds
// max_group_rows = r, max_active_groups = min(E, r * top_k)); old = GroupedGemm (WMMA, segments
// padded to 64 rows). Dense: one group of M rows; old = the runner's path before this kernel
// (GroupedGemm with M padded to 64 for FP8, cuBLASLt for bf16). Launches rotate over disjoint
// expert sets / weight copies so the weights come from HBM.
void SkinnyMoeCase(Bench& b, const char* model, bool fp8, int64_t E, int64_t active, int64_t top_k, const char* which,
                   int64_t N, int64_t K, int64_t r, bool all_variants = true) {
  const int64_t es = fp8 ? 1 : 2, kbn = (N + 127) / 128, kbk = (K + 127) / 128;
  const double wbytes = double(active) * (N * K * es + (fp8 ? kbn * kbk * 4 : 0));
  const int nsets = static_cast<int>(std::min<int64_t>(SetsFor(wbytes, 16), E / active));
  const int64_t E_alloc = active * nsets;
  Buf w(E_alloc * N * K * es), ws(fp8 ? E_alloc * kbn * kbk * 4 : 16);
  if (fp8) {
    FillE4M3(w.as<uint8_t>(), E_alloc * N * K, b.NextSeed(), b.st());
    FillUniformF32(ws.as<float>(), E_alloc * kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
  } else {
    FillUniformBf16(w.as<__nv_bfloat16>(), E_alloc * N * K, b.NextSeed(), -0.05f, 0.05f, b.st());
  }
  const int64_t rows_new = active * r, rows_old = active * kGroupedGemmRowAlign;
  Buf a(rows_old * K * 2), out(rows_old * N * 2);
  FillUniformBf16(a.as<__nv_bfloat16>(), rows_old * K, b.NextSeed(), -1, 1, b.st());
  std::vector<std::unique_ptr<Buf>> off_old, off_new;
  for (int i = 0; i < nsets; ++i) {
    std::vector<int32_t> oo{0}, on{0};
    for (int64_t e = 0; e < E; ++e) {
      const bool on_e = e >= i * active && e < (i + 1) * active;
      oo.push_back(oo.back() + (on_e ? static_cast<int32_t>(kGroupedGemmRowAlign) : 0));
      on.push_back(on.back() + (on_e ? static_cast<int32_t>(r) : 0));
    }
    off_old.push_back(Upload(oo));
    off_new.push_back(Upload(on));
  }
  GroupedGemmParams p{};
  p.a = a.as<__nv_bfloat16>(); p.lda = K; p.w = w.as<void>(); p.w_fp8 = fp8; p.w_scales = fp8 ? ws.as<float>() : nullptr;
  p.num_experts = E; p.N = N; p.K = K; p.out = out.as<void>(); p.out_type = DTypeOut::kBF16; p.ldo = N; p.stream = b.st();
  char shape[160];
  std::snprintf(shape, sizeof shape, "%s %s %s E%lld act%lld rows%lld N%lld K%lld", model, which, fp8 ? "fp8" : "bf16",
                (long long)E, (long long)active, (long long)r, (long long)N, (long long)K);
  if (!all_variants) {  // the variant the runner gets (SkinnyAutoVariant) only
    const double us = b.TimeUs([&](int i) {
      GroupedGemmParams q = p;
      q.offsets = off_new[i]->as<int32_t>(); q.max_rows = rows_new;
      SkinnyGemm({q, r, std::min(E, r * top_k)});
    }, nsets, 5, 40);
    b.Add("skinny/new_auto", shape, us, wbytes, 0, fp8, "weight bytes");
    return;
  }
  const double us_old = b.TimeUs([&](int i) {
    GroupedGemmParams q = p;
    q.offsets = off_old[i]->as<int32_t>(); q.max_rows = rows_old;
    GroupedGemm(q);
  }, nsets, 5, 60);
  b.Add("skinny/old_grouped_wmma", shape, us_old, wbytes, 0, fp8, "weight bytes; segments padded to 64 rows");
  for (int v = 0; v < kSkinnyVariants; ++v) {
    const double us_new = b.TimeUs([&](int i) {
      GroupedGemmParams q = p;
      q.offsets = off_new[i]->as<int32_t>(); q.max_rows = rows_new;
      SkinnyGemm({q, r, std::min(E, r * top_k), v});
    }, nsets, 5, 60);
    b.Add("skinny/new_v" + std::to_string(v), shape, us_new, wbytes, 0, fp8, "weight bytes");
  }
}

// Uniform routing: T tokens x top_k pairs spread evenly over all E experts (every expert gets
// T * top_k / E rows, +1 for the first remainder), the worst case for weight bytes at a given T.
void SkinnyMoeUniformCase(Bench& b, const char* model, bool fp8, int64_t E, int64_t top_k, const char* which, int64_t N,
                          int64_t K, int64_t T) {
  const int64_t es = fp8 ? 1 : 2, kbn = (N + 127) / 128, kbk = (K + 127) / 128, pairs = T * top_k;
  std::vector<int32_t> oo{0}, on{0};
  int64_t touched = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = pairs / E + (e < pairs % E ? 1 : 0);
    touched += c > 0;
    oo.push_back(oo.back() + static_cast<int32_t>((c + kGroupedGemmRowAlign - 1) / kGroupedGemmRowAlign * kGroupedGemmRowAlign));
    on.push_back(on.back() + static_cast<int32_t>(c));
  }
  const double wbytes = double(touched) * (N * K * es + (fp8 ? kbn * kbk * 4 : 0));
  Buf w(E * N * K * es), ws(fp8 ? E * kbn * kbk * 4 : 16);
  if (fp8) {
    FillE4M3(w.as<uint8_t>(), E * N * K, b.NextSeed(), b.st());
    FillUniformF32(ws.as<float>(), E * kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
  } else {
    FillUniformBf16(w.as<__nv_bfloat16>(), E * N * K, b.NextSeed(), -0.05f, 0.05f, b.st());
  }
  const int64_t rows_old = oo.back();
  Buf a(rows_old * K * 2), out(rows_old * N * 2);
  FillUniformBf16(a.as<__nv_bfloat16>(), rows_old * K, b.NextSeed(), -1, 1, b.st());
  auto doo = Upload(oo), don = Upload(on);
  GroupedGemmParams p{};
  p.a = a.as<__nv_bfloat16>(); p.lda = K; p.w = w.as<void>(); p.w_fp8 = fp8; p.w_scales = fp8 ? ws.as<float>() : nullptr;
  p.num_experts = E; p.N = N; p.K = K; p.out = out.as<void>(); p.out_type = DTypeOut::kBF16; p.ldo = N; p.stream = b.st();
  char shape[160];
  std::snprintf(shape, sizeof shape, "%s %s %s E%lld uniform T%lld pairs%lld N%lld K%lld", model, which, fp8 ? "fp8" : "bf16",
                (long long)E, (long long)T, (long long)pairs, (long long)N, (long long)K);
  const double us_old = b.TimeUs([&](int) {
    GroupedGemmParams q = p;
    q.offsets = doo->as<int32_t>(); q.max_rows = rows_old;
    GroupedGemm(q);
  }, 1, 5, 60);
  b.Add("skinny/old_grouped_wmma", shape, us_old, wbytes, 0, fp8, "weight bytes of touched experts; padded to 64 rows");
  const double us_new = b.TimeUs([&](int) {
    GroupedGemmParams q = p;
    q.offsets = don->as<int32_t>(); q.max_rows = pairs;
    SkinnyGemm({q, T, std::min(E, pairs)});
  }, 1, 5, 60);
  b.Add("skinny/new_auto", shape, us_new, wbytes, 0, fp8, "weight bytes of touched experts");
}

void SkinnyDenseCase(Bench& b, const char* model, bool fp8, const char* name, int64_t N, int64_t K, int64_t M) {
  const int64_t es = fp8 ? 1 : 2, kbn = (N + 127) / 128, kbk = (K + 127) / 128, Mr = (M + 63) / 64 * 64;
  const double wbytes = double(N) * K * es + (fp8 ? double(kbn) * kbk * 4 : 0);
  const int nsets = SetsFor(wbytes, 16);
  std::vector<std::unique_ptr<Buf>> w, ws;
  for (int i = 0; i < nsets; ++i) {
    w.push_back(std::make_unique<Buf>(N * K * es));
    ws.push_back(std::make_unique<Buf>(fp8 ? kbn * kbk * 4 : 16));
    if (fp8) {
      FillE4M3(w.back()->as<uint8_t>(), N * K, b.NextSeed(), b.st());
      FillUniformF32(ws.back()->as<float>(), kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
    } else {
      FillUniformBf16(w.back()->as<__nv_bfloat16>(), N * K, b.NextSeed(), -0.05f, 0.05f, b.st());
    }
  }
  Buf a(Mr * K * 2), out(Mr * N * 4);
  FillUniformBf16(a.as<__nv_bfloat16>(), Mr * K, b.NextSeed(), -1, 1, b.st());
  auto off = Upload(std::vector<int32_t>{0, static_cast<int32_t>(Mr)});
  GroupedGemmParams p{};
  p.a = a.as<__nv_bfloat16>(); p.lda = K; p.w_fp8 = fp8; p.num_experts = 1; p.N = N; p.K = K;
  p.out = out.as<void>(); p.out_type = DTypeOut::kF32; p.ldo = N; p.stream = b.st();
  char shape[160];
  std::snprintf(shape, sizeof shape, "%s %s %s M%lld N%lld K%lld", model, name, fp8 ? "fp8" : "bf16", (long long)M,
                (long long)N, (long long)K);
  const double us_old = b.TimeUs([&](int i) {
    if (fp8) {
      GroupedGemmParams q = p;
      q.w = w[i]->as<void>(); q.w_scales = ws[i]->as<float>(); q.offsets = off->as<int32_t>(); q.max_rows = Mr;
      GroupedGemm(q);
    } else {
      GemmBf16({a.as<__nv_bfloat16>(), K, w[i]->as<__nv_bfloat16>(), K, out.as<void>(), N, DTypeOut::kF32, M, N, K,
                false, b.st()});
    }
  }, nsets, 5, 60);
  b.Add(fp8 ? "skinny/old_grouped_wmma" : "skinny/old_cublaslt_bf16", shape, us_old, wbytes, 0, fp8,
        fp8 ? "weight bytes; M padded to 64" : "weight bytes");
  for (int v = 0; v < kSkinnyVariants; ++v) {
    const double us_new = b.TimeUs([&](int i) {
      GroupedGemmParams q = p;
      q.w = w[i]->as<void>(); q.w_scales = fp8 ? ws[i]->as<float>() : nullptr; q.offsets = nullptr; q.max_rows = M;
      SkinnyGemm({q, M, 1, v});
    }, nsets, 5, 60);
    b.Add("skinny/new_v" + std::to_string(v), shape, us_new, wbytes, 0, fp8, "weight bytes");
  }
}

// Split-K workspace for sp's plan (counters zeroed), attached to sp.
struct SkinnyWs {
  SkinnyPlan plan;
  std::unique_ptr<Buf> ws, cnt;
  void Attach(SkinnyGemmParams* sp, cudaStream_t st) {
    plan = SkinnyPlanFor(*sp);
    if (plan.splits <= 1) return;
    ws = std::make_unique<Buf>(plan.ws_floats * 4);
    cnt = std::make_unique<Buf>(plan.counters * 4);
    DS_CUDA_CHECK(cudaMemsetAsync(cnt->as<void>(), 0, cnt->bytes(), st));
    sp->splitk_ws = ws->as<float>(); sp->splitk_ws_floats = static_cast<int64_t>(ws->bytes() / 4);
    sp->splitk_counters = cnt->as<uint32_t>(); sp->splitk_counter_count = static_cast<int64_t>(cnt->bytes() / 4);
  }
};

// Copies of one random FP8 weight [N, K] (e4m3) and its 128 x 128 block scales, enough of them
// (SetsFor, at most max_sets) that rotating over them reads from HBM, not L2. bytes: weight +
// scale bytes of one copy.

// A V3 FP8 dense projection at M rows on the runner's decode path: the skinny kernel as
// SkinnyPlanFor picks it ("skinny_dense/auto": THE figure per projection), unsplit
// ("skinny_dense/unsplit", the kernel before split-K), forced split counts (`sweep`), and the
// big-tile in-kernel-dequant GroupedGemm with M padded to 64 (`grouped`: the runner's path
// above kSkinnyDenseMaxRows). TB/s counts weight + scale bytes; weight copies rotate over
// more than L2.
void SkinnyFp8DenseCase(Bench& b, const char* name, int64_t N, int64_t K, int64_t M, bool grouped,
                        const std::vector<int>& sweep) {
  const int64_t Mr = (M + 63) / 64 * 64;
  Fp8WeightSets fw(b, N, K, 16);
  const double wbytes = fw.bytes;
  const int nsets = fw.sets();
  auto& w = fw.w;
  auto& ws = fw.s;
  Buf a(Mr * K * 2), out(Mr * N * 4);
  FillUniformBf16(a.as<__nv_bfloat16>(), Mr * K, b.NextSeed(), -1, 1, b.st());
  char shape[160];
  std::snprintf(shape, sizeof shape, "V3 %s fp8 M%lld N%lld K%lld", name, (long long)M, (long long)N, (long long)K);
  SkinnyGemmParams base{};
  GroupedGemmParams& p = base.g;
  p.a = a.as<__nv_bfloat16>(); p.lda = K; p.offsets = nullptr; p.max_rows = M; p.w_fp8 = true; p.num_experts = 1;
  p.N = N; p.K = K; p.out = out.as<void>(); p.out_type = DTypeOut::kF32; p.ldo = N; p.stream = b.st();
  base.max_group_rows = M;
  const auto run = [&](const std::string& kernel, int splits) {
    SkinnyGemmParams sp = base;
    sp.splits = splits;
    SkinnyWs wsp;
    wsp.Attach(&sp, b.st());
    const double us = b.TimeUs([&](int i) {
      SkinnyGemmParams q = sp;
      q.g.w = w[i]->as<void>(); q.g.w_scales = ws[i]->as<float>();
      SkinnyGemm(q);
    }, nsets, 5, 40);
    char note[96];
    std::snprintf(note, sizeof note, "weight bytes; variant %d, %d split(s)", wsp.plan.variant, wsp.plan.splits);
    b.Add(kernel, shape, us, wbytes, 0, true, note);
    return us;
  };
  run("skinny_dense/auto", 0);
  run("skinny_dense/unsplit", 1);
  for (int s : sweep) run("skinny_dense/split" + std::to_string(s), s);
  if (grouped) {
    auto off = Upload(std::vector<int32_t>{0, static_cast<int32_t>(Mr)});
    const double us = b.TimeUs([&](int i) {
      GroupedGemmParams q = p;
      q.w = w[i]->as<void>(); q.w_scales = ws[i]->as<float>(); q.offsets = off->as<int32_t>(); q.max_rows = Mr;
      GroupedGemm(q);
    }, nsets, 5, 40);
    b.Add("skinny_dense/grouped_gemm", shape, us, wbytes, 0, true, "weight bytes; big-tile kernel, M padded to 64");
  }
}

// Absorbed-MLA per-head GEMMs of V3 decode (128 heads, bf16 weights, fp32 out), `rows` decode
// tokens: q_lat[t, h, :512] = q_nope[t, h, :128] W_UK_t[h]^T (a row stride 128 x 192, out 128 x
// 576) and o[t, h, :128] = o_lat[t, h, :512] W_UV[h]^T (W_UV inside kv_b, head stride 256 x 512).
// cuBLAS strided-batched (the runner's HeadGemm before) vs the skinny kernel, heads as groups.
void SkinnyHeadsCase(Bench& b, bool uk, int64_t rows) {
  const int64_t H = 128, N = uk ? 512 : 128, K = uk ? 128 : 512;
  const int64_t stride_w = uk ? N * K : 2 * 128 * 512, woff = uk ? 0 : 128 * 512;
  const int64_t lda = uk ? H * 192 : H * 512, ga = uk ? 192 : 512, ldo = uk ? H * 576 : H * 128, go = uk ? 576 : 128;
  const double wbytes = double(H) * N * K * 2;
  const int nsets = SetsFor(wbytes, 16);
  std::vector<std::unique_ptr<Buf>> w;
  for (int i = 0; i < nsets; ++i) {
    w.push_back(std::make_unique<Buf>(H * stride_w * 2));
    FillUniformBf16(w.back()->as<__nv_bfloat16>(), H * stride_w, b.NextSeed(), -0.05f, 0.05f, b.st());
  }
  Buf a(rows * lda * 2), out(rows * ldo * 4);
  FillUniformBf16(a.as<__nv_bfloat16>(), rows * lda, b.NextSeed(), -1, 1, b.st());
  char shape[160];
  std::snprintf(shape, sizeof shape, "V3 %s h128 N%lld K%lld tokens%lld", uk ? "q_nope@W_UK" : "o_lat@W_UV^T",
                (long long)N, (long long)K, (long long)rows);
  const double us_cublas = b.TimeUs([&](int i) {
    GemmBf16Params g{a.as<__nv_bfloat16>(), lda, w[i]->as<__nv_bfloat16>() + woff, K, out.as<void>(), ldo,
                     DTypeOut::kF32, rows, N, K, false, b.st()};
    g.batch = H; g.stride_x = ga; g.stride_w = stride_w; g.stride_y = go;
    GemmBf16(g);
  }, nsets, 5, 40);
  b.Add("mla_heads/cublas_batched", shape, us_cublas, wbytes, 0, false, "weight bytes");
  const double us_skinny = b.TimeUs([&](int i) {
    SkinnyGemmParams sp{};
    sp.g.a = a.as<__nv_bfloat16>(); sp.g.lda = lda; sp.g.offsets = nullptr; sp.g.max_rows = rows;
    sp.g.w = w[i]->as<__nv_bfloat16>() + woff; sp.g.num_experts = H; sp.g.N = N; sp.g.K = K; sp.g.out = out.as<void>();
    sp.g.out_type = DTypeOut::kF32; sp.g.ldo = ldo; sp.g.stream = b.st();
    sp.max_group_rows = rows; sp.group_stride_a = ga; sp.group_stride_w = stride_w; sp.group_stride_out = go;
    SkinnyGemm(sp);
  }, nsets, 5, 40);
  b.Add("mla_heads/skinny", shape, us_skinny, wbytes, 0, false, "weight bytes");
}

// Issue 5's decode-size FP8 dense projections (M <= 64, plus 128 for the dispatch threshold),
// the split sweep of the narrow ones, the per-head MLA GEMMs, and the V3 expert shapes as a
// non-regression check of the grouped (MoE) form.
void SkinnyDense(Bench& b) {
  for (int64_t r : {1, 4, 16}) {
    if (b.OutOfTime()) { b.skipped.push_back("skinny_dense moe rows" + std::to_string(r)); continue; }
    SkinnyMoeCase(b, "V3", true, 256, 8, 8, "gate_up", 4096, 7168, r, false);
    SkinnyMoeCase(b, "V3", true, 256, 8, 8, "down", 7168, 2048, r, false);
  }
  const std::set<std::string> narrow = {"q_a_proj", "kv_a_proj_with_mqa", "o_proj", "dense_down", "shared_gate_up",
                                        "shared_down"};
  for (int64_t M : {1, 4, 16, 32, 64, 128})
    for (const auto& pr : kProjs) {
      if (b.OutOfTime()) { b.skipped.push_back(std::string("skinny_dense ") + pr.name + " M" + std::to_string(M)); continue; }
      const bool sw = narrow.count(pr.name) > 0 && (M == 1 || M == 64);
      SkinnyFp8DenseCase(b, pr.name, pr.N, pr.K, M, M >= 16, sw ? std::vector<int>{2, 4, 8, 16} : std::vector<int>{});
    }
  for (int64_t rows : {1, 4, 16, 32, 64, 128})
    for (bool uk : {true, false}) {
      if (b.OutOfTime()) { b.skipped.push_back("mla_heads tokens" + std::to_string(rows)); continue; }
      SkinnyHeadsCase(b, uk, rows);
    }
}

// `--only fp8_gemv` (only when named; first run in session 6 run 10): the V3 FP8
// dense projections at decode sizes M = 1, 2, 4, 8, Fp8Gemv (fp8_gemv.h; "fp8_gemv/auto": its
// own CTA count) beside SkinnyGemm as SkinnyPlanFor plans it ("fp8_gemv/skinny_planned": the
// runner's default path), on the same weight copies rotating over > 256 MB (reads from HBM).
// TB/s counts weight + scale bytes; the ratio is to this run's copy ceiling. At M = 1 the
// "fp8_gemv/runner": the CTA count the runner launches with (Fp8GemvRunnerCtas) where it is not
// auto. At M = 1 every projection also runs forced CTA counts (SMs / 4, SMs / 2, SMs,
// 1.5 x SMs, 2 x SMs) for tuning.
void Fp8GemvCase(Bench& b, const Proj& pr, int64_t M, const std::vector<int>& cta_sweep) {
  const int64_t N = pr.N, K = pr.K;
  Fp8WeightSets fw(b, N, K, 64);
  const double wbytes = fw.bytes;
  const int nsets = fw.sets();
  auto& w = fw.w;
  auto& ws = fw.s;
  Buf a(8 * K * 2), out(8 * N * 4);
  FillUniformBf16(a.as<__nv_bfloat16>(), 8 * K, b.NextSeed(), -1, 1, b.st());
  char shape[160], note[160];
  std::snprintf(shape, sizeof shape, "V3 %s fp8 M%lld N%lld K%lld", pr.name, (long long)M, (long long)N, (long long)K);
  SkinnyGemmParams sp{};
  sp.g.a = a.as<__nv_bfloat16>(); sp.g.lda = K; sp.g.offsets = nullptr; sp.g.max_rows = M; sp.g.w_fp8 = true;
  sp.g.num_experts = 1; sp.g.N = N; sp.g.K = K; sp.g.out = out.as<void>(); sp.g.out_type = DTypeOut::kF32;
  sp.g.ldo = N; sp.g.stream = b.st(); sp.max_group_rows = M;
  SkinnyWs wsp;
  wsp.Attach(&sp, b.st());
  const double us_sk = b.TimeUs([&](int i) {
    SkinnyGemmParams q = sp;
    q.g.w = w[i]->as<void>(); q.g.w_scales = ws[i]->as<float>();
    SkinnyGemm(q);
  }, nsets, 5, 40);
  std::snprintf(note, sizeof note, "weight + scale bytes; SkinnyGemm variant %d, %d split(s)", wsp.plan.variant,
                wsp.plan.splits);
  b.Add("fp8_gemv/skinny_planned", shape, us_sk, wbytes, 0, true, note);
  const auto gemv = [&](const std::string& kernel, int ctas) {
    Fp8GemvParams p;
    p.a = a.as<__nv_bfloat16>(); p.lda = K; p.w = w[0]->as<uint8_t>(); p.w_scales = ws[0]->as<float>();
    p.out = out.as<void>(); p.ldo = N; p.M = M; p.N = N; p.K = K; p.stream = b.st(); p.ctas = ctas;
    const Fp8GemvPlan plan = Fp8GemvPlanFor(p);
    Buf gws(plan.workspace_bytes);
    DS_CUDA_CHECK(cudaMemsetAsync(gws.as<void>(), 0, gws.bytes(), b.st()));
    p.workspace = gws.as<void>(); p.workspace_bytes = gws.bytes();
    const double us = b.TimeUs([&](int i) {
      Fp8GemvParams q = p;
      q.w = w[i]->as<uint8_t>(); q.w_scales = ws[i]->as<float>();
      Fp8Gemv(q);
    }, nsets, 5, 40);
    std::snprintf(note, sizeof note, "weight + scale bytes; %s path, %lld CTAs over %lld units; %.2fx SkinnyGemm",
                  plan.tma ? "TMA" : "generic", (long long)plan.ctas, (long long)plan.units, us_sk / us);
    b.Add(kernel, shape, us, wbytes, 0, true, note);
  };
  gemv("fp8_gemv/auto", 0);
  // The runner's CTA count (Fp8GemvRunnerCtas; differs from auto for K >= 16384)
  int sms = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (const int rc = Fp8GemvRunnerCtas(K, sms); rc > 0) gemv("fp8_gemv/runner", rc);
  for (int c : cta_sweep) gemv("fp8_gemv/ctas" + std::to_string(c), c);
}

void Fp8GemvFamily(Bench& b) {
  int sms = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // CTA sweeps at M = 1, every projection (session 7 run 1: one CTA per SM beat the automatic
  // two for o_proj and dense down; dense gate_up was not swept then).
  for (int64_t M : {1, 2, 4, 8})
    for (const auto& pr : kProjs) {
      if (std::string(pr.name) == "kv_b_proj") continue;  // bf16 in the runner
      if (b.OutOfTime()) { b.skipped.push_back(std::string("fp8_gemv ") + pr.name + " M" + std::to_string(M)); continue; }
      const bool sweep = M == 1;
      Fp8GemvCase(b, pr, M, sweep ? std::vector<int>{sms / 4, sms / 2, sms, 3 * sms / 2, 2 * sms} : std::vector<int>{});
    }
}

// The model and weight type of a grouped-GEMV experts family: the family's kernel-name prefix,
// the model's routed experts (E, top-k) and whether they are bf16 (else e4m3 with 128 x 128
// block scales).
struct GemvExpertsModel {
  const char* family;
  const char* model;
  bool bf16;
  int64_t E, top_k;
};

// `--only fp8_gemv_experts` (only when named; first run in session 7 run 11): V3's routed
// experts at decode sizes; `--only gemv_experts_bf16` (only when named; first run in session 8
// run 3): V2-Lite's bf16 routed experts. Fp8GemvGrouped (fp8_gemv_grouped.h, w_bf16
// for bf16 experts; "grouped_auto": its own CTA count, "grouped_ctas<SMs>": one per SM) beside
// SkinnyGemm's grouped form as the runner calls it ("skinny": unsplit, max_group_rows = tokens,
// max_active_groups = min(E, tokens x top_k)), on the same inputs: `active` of E experts with
// `r` rows each (the experts a batch of `tokens` tokens touches), outputs as in the runner.
// Expert sets rotate over > 256 MB (at most E / active sets; only the sets' experts are
// allocated: the others are empty and never read). TB/s counts the touched experts' weight (+
// scale) bytes; the ratio is to this run's copy ceiling.
void GemvExpertsCase(Bench& b, const GemvExpertsModel& m, const char* which, int64_t N, int64_t K, bool out_bf16,
                     int64_t active, int64_t r, int64_t tokens) {
  const int64_t E = m.E, kbn = (N + 127) / 128, kbk = (K + 127) / 128;
  const int64_t el = m.bf16 ? 2 : 1, sbytes = m.bf16 ? 0 : kbn * kbk * 4;  // per expert: weight element, scales
  const double wbytes = double(active) * (double(N) * K * el + double(sbytes));
  const int nsets = static_cast<int>(std::min<int64_t>(SetsFor(wbytes, 16), E / active));
  const int64_t E_alloc = active * nsets, rows = active * r, bound = std::min<int64_t>(E, tokens * m.top_k);
  Buf w(E_alloc * N * K * el), ws(E_alloc * sbytes);  // (Buf: >= 16 bytes)
  if (m.bf16) {
    FillUniformBf16(w.as<__nv_bfloat16>(), E_alloc * N * K, b.NextSeed(), -0.05f, 0.05f, b.st());
  } else {
    FillE4M3(w.as<uint8_t>(), E_alloc * N * K, b.NextSeed(), b.st());
    FillUniformF32(ws.as<float>(), E_alloc * kbn * kbk, b.NextSeed(), 1e-4f, 2e-4f, b.st());
  }
  const float* scales = m.bf16 ? nullptr : ws.as<float>();
  Buf a(rows * K * 2), out(rows * N * 4);
  FillUniformBf16(a.as<__nv_bfloat16>(), rows * K, b.NextSeed(), -1, 1, b.st());
  std::vector<std::unique_ptr<Buf>> offs;  // set i: experts [i * active, (i + 1) * active), r rows each
  for (int i = 0; i < nsets; ++i) {
    std::vector<int32_t> o{0};
    for (int64_t e = 0; e < E; ++e)
      o.push_back(o.back() + (e >= i * active && e < (i + 1) * active ? static_cast<int32_t>(r) : 0));
    offs.push_back(Upload(o));
  }
  char shape[160], note[200];
  std::snprintf(shape, sizeof shape, "%s %s %s E%lld act%lld rows%lld N%lld K%lld", m.model, which,
                m.bf16 ? "bf16" : "fp8", (long long)E, (long long)active, (long long)r, (long long)N, (long long)K);
  const std::string fam = m.family, what = m.bf16 ? "weight" : "weight + scale";
  GroupedGemmParams p{};
  p.a = a.as<__nv_bfloat16>(); p.lda = K; p.max_rows = rows; p.w = w.as<void>(); p.w_fp8 = !m.bf16;
  p.w_scales = scales; p.num_experts = E; p.N = N; p.K = K; p.out = out.as<void>();
  p.out_type = out_bf16 ? DTypeOut::kBF16 : DTypeOut::kF32; p.ldo = N; p.stream = b.st();
  const double us_sk = b.TimeUs([&](int i) {
    GroupedGemmParams q = p;
    q.offsets = offs[i]->as<int32_t>();
    SkinnyGemm({q, tokens, bound});
  }, nsets, 5, 40);
  std::snprintf(note, sizeof note, "touched experts' %s bytes; SkinnyGemm as the runner calls it, %d set(s)",
                what.c_str(), nsets);
  b.Add(fam + "/skinny", shape, us_sk, wbytes, 0, !m.bf16, note);
  const auto grouped = [&](const std::string& kernel, int ctas) {
    Fp8GemvGroupedParams g;
    g.a = a.as<__nv_bfloat16>(); g.lda = K; g.max_rows = rows; g.offsets = offs[0]->as<int32_t>();
    g.w = w.as<void>(); g.w_bf16 = m.bf16; g.w_scales = scales; g.out = out.as<void>(); g.out_bf16 = out_bf16;
    g.ldo = N; g.num_experts = E; g.N = N; g.K = K; g.max_active_groups = bound; g.max_group_rows = tokens;
    g.stream = b.st(); g.ctas = ctas;
    const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(g);
    Buf gws(plan.workspace_bytes);
    DS_CUDA_CHECK(cudaMemsetAsync(gws.as<void>(), 0, gws.bytes(), b.st()));
    g.workspace = gws.as<void>(); g.workspace_bytes = gws.bytes();
    const double us = b.TimeUs([&](int i) {
      Fp8GemvGroupedParams q = g;
      q.offsets = offs[i]->as<int32_t>();
      Fp8GemvGrouped(q);
    }, nsets, 5, 40);
    const int64_t unit_k = m.bf16 ? 64 : 128;
    std::snprintf(note, sizeof note, "touched experts' %s bytes; %s path, %lld CTAs, %lld units planned "
                  "(%lld used); %.2fx SkinnyGemm", what.c_str(), plan.tma ? "TMA" : "generic", (long long)plan.ctas,
                  (long long)plan.units, (long long)(active * plan.tiles * ((K + unit_k - 1) / unit_k)), us_sk / us);
    b.Add(kernel, shape, us, wbytes, 0, !m.bf16, note);
  };
  grouped(fam + "/grouped_auto", 0);
  int sms = 0;
  DS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  grouped(fam + "/grouped_ctas" + std::to_string(sms), sms);
}

struct GemvExpertsShape { const char* which; int64_t N, K; bool out_bf16; };
struct GemvExpertsLoad { int64_t active, rows, tokens; };

void GemvExpertsFamily(Bench& b, const GemvExpertsModel& m, std::initializer_list<GemvExpertsShape> shapes,
                       std::initializer_list<GemvExpertsLoad> loads) {
  for (const GemvExpertsShape& sh : shapes)
    for (const GemvExpertsLoad& l : loads) {
      if (b.OutOfTime()) {
        b.skipped.push_back(std::string(m.family) + " " + sh.which + " act" + std::to_string(l.active));
        continue;
      }
      GemvExpertsCase(b, m, sh.which, sh.N, sh.K, sh.out_bf16, l.active, l.rows, l.tokens);
    }
}

// V3: gate_up fp32 out, down bf16 out (the runner's, unstacked shared expert); 8 experts x 1 row
// (1 token) and 64 x 1 (8 tokens).
void Fp8GemvExpertsFamily(Bench& b) {
  GemvExpertsFamily(b, {"fp8_gemv_experts", "V3", false, 256, 8},
                    {{"gate_up", 4096, 7168, false}, {"down", 7168, 2048, true}}, {{8, 1, 1}, {64, 1, 8}});
}

// V2-Lite (64 bf16 experts, top-6, 2 shared experts: both outputs fp32 in the runner): 6 experts
// x 1 row (1 token) and 48 x 1 (8 tokens x 6).
void GemvExpertsBf16Family(Bench& b) {
  GemvExpertsFamily(b, {"gemv_experts_bf16", "V2-Lite", true, 64, 6},
                    {{"gate_up", 2816, 2048, false}, {"down", 2048, 1408, false}}, {{6, 1, 1}, {48, 1, 8}});
}

void Skinny(Bench& b) {
  const std::vector<int64_t> rs = b.quick() ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 4, 16};
  for (int64_t r : rs) {
    if (b.OutOfTime()) { b.skipped.push_back("skinny moe rows" + std::to_string(r)); continue; }
    SkinnyMoeCase(b, "V3", true, 256, 8, 8, "gate_up", 4096, 7168, r);
    SkinnyMoeCase(b, "V3", true, 256, 8, 8, "down", 7168, 2048, r);
    SkinnyMoeCase(b, "V2-Lite", false, 64, 6, 6, "gate_up", 2816, 2048, r);
    SkinnyMoeCase(b, "V2-Lite", false, 64, 6, 6, "down", 2048, 1408, r);
  }
  for (int64_t t : {32, 128, 256}) {
    if (b.OutOfTime()) { b.skipped.push_back("skinny moe uniform T" + std::to_string(t)); continue; }
    SkinnyMoeUniformCase(b, "V3", true, 256, 8, "gate_up", 4096, 7168, t);
    SkinnyMoeUniformCase(b, "V3", true, 256, 8, "down", 7168, 2048, t);
  }
  for (int64_t t : {16, 42, 85}) {
    if (b.OutOfTime()) { b.skipped.push_back("skinny moe uniform T" + std::to_string(t)); continue; }
    SkinnyMoeUniformCase(b, "V2-Lite", false, 64, 6, "gate_up", 2816, 2048, t);
    SkinnyMoeUniformCase(b, "V2-Lite", false, 64, 6, "down", 2048, 1408, t);
  }
  struct D { const char* model; bool fp8; const char* name; int64_t N, K; };
  const D ds[] = {{"V3", true, "q_a_proj", 1536, 7168},        {"V3", true, "kv_a_proj", 576, 7168},
                  {"V3", true, "q_b_proj", 24576, 1536},       {"V3", true, "o_proj", 7168, 16384},
                  {"V3", true, "shared_gate_up", 4096, 7168},  {"V3", true, "shared_down", 7168, 2048},
                  {"V2-Lite", false, "q_proj", 3072, 2048},    {"V2-Lite", false, "kv_a_proj", 576, 2048},
                  {"V2-Lite", false, "o_proj", 2048, 2048},    {"V2-Lite", false, "shared_gate_up", 5632, 2048},
                  {"V2-Lite", false, "shared_down", 2048, 2816}, {"V2-Lite", false, "dense_gate_up", 21888, 2048},
                  {"V2-Lite", false, "dense_down", 2048, 10944}, {"V2-Lite", false, "lm_head", 102400, 2048}};
  for (int64_t M : b.quick() ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 16, 64})
    for (const auto& d : ds) {
      if (b.OutOfTime()) { b.skipped.push_back(std::string("skinny ") + d.name + " M" + std::to_string(M)); continue; }
      if (!d.fp8 && M > kSkinnyBf16MaxRows) continue;
      SkinnyDenseCase(b, d.model, d.fp8, d.name, d.N, d.K, M);
    }
}

// ---------------------------------------------------------------- small kernels
void SmallKernels(Bench& b, int64_t n) {
  const std::string sn = "n" + std::to_string(n);
  {  // RMSNorm with fused residual add, d = 7168, fp32
    const int64_t d = 7168;
    const double set_bytes = double(n) * d * 4 * 3;
    const int nsets = SetsFor(set_bytes);
    std::vector<std::unique_ptr<Buf>> x, r, o;
    for (int i = 0; i < nsets; ++i) {
      x.push_back(std::make_unique<Buf>(n * d * 4)); r.push_back(std::make_unique<Buf>(n * d * 4)); o.push_back(std::make_unique<Buf>(n * d * 4));
      FillUniformF32(x.back()->as<float>(), n * d, b.NextSeed(), -1, 1, b.st());
      FillUniformF32(r.back()->as<float>(), n * d, b.NextSeed(), -1, 1, b.st());
    }
    Buf wt(d * 4);
    FillUniformF32(wt.as<float>(), d, b.NextSeed(), 0.5f, 1.5f, b.st());
    const double us = b.TimeUs([&](int i) {
      RmsNormParams p{};
      p.x = x[i]->as<float>(); p.ldx = d; p.residual = r[i]->as<float>(); p.ldres = d; p.weight = wt.as<float>();
      p.out = o[i]->as<void>(); p.ldout = d; p.out_type = DTypeOut::kF32; p.n = n; p.d = d; p.eps = 1e-6f; p.stream = b.st();
      RmsNorm(p);
    }, nsets);
    b.Add("rmsnorm_residual", sn + " d7168 fp32", us, double(n) * d * 4 * 4, 0, false);
  }
  {  // RoPE on q_pe: [n, 128 heads, 192] fp32, 64 rope channels at offset 128
    const int64_t H = 128, hd = 192, rd = 64, max_pos = 4096;
    const int nsets = SetsFor(double(n) * H * hd * 4);
    std::vector<std::unique_ptr<Buf>> x;
    for (int i = 0; i < nsets; ++i) {
      x.push_back(std::make_unique<Buf>(n * H * hd * 4));
      FillUniformF32(x.back()->as<float>(), n * H * hd, b.NextSeed(), -1, 1, b.st());
    }
    Buf cs(max_pos * rd / 2 * 4), sn_(max_pos * rd / 2 * 4);
    FillUniformF32(cs.as<float>(), max_pos * rd / 2, b.NextSeed(), -1, 1, b.st());
    FillUniformF32(sn_.as<float>(), max_pos * rd / 2, b.NextSeed(), -1, 1, b.st());
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i % max_pos);
    auto dpos = Upload(pos);
    const double us = b.TimeUs([&](int i) {
      RopeParams p{};
      p.x = x[i]->as<float>(); p.n = n; p.heads = H; p.token_stride = H * hd; p.head_stride = hd; p.offset = 128;
      p.rope_dim = rd; p.positions = dpos->as<int32_t>(); p.cos = cs.as<float>(); p.sin = sn_.as<float>();
      p.max_pos = max_pos; p.interleave = true; p.stream = b.st();
      ApplyRope(p);
    }, nsets);
    b.Add("rope_q_pe", sn + " h128 rope64 fp32", us, 2.0 * n * H * rd * 4, 0, false);
  }
  {  // FP8 1x128 activation quantisation, bf16 in, group-major scales (the cuBLASLt layout)
    const int64_t k = 7168, Mp = Fp8PaddedM(n);
    const int nsets = SetsFor(double(n) * k * 3);
    std::vector<std::unique_ptr<Buf>> x, qo, sc;
    for (int i = 0; i < nsets; ++i) {
      x.push_back(std::make_unique<Buf>(n * k * 2)); qo.push_back(std::make_unique<Buf>(Mp * k));
      sc.push_back(std::make_unique<Buf>(Mp * (k / 128) * 4));
      FillUniformBf16(x.back()->as<__nv_bfloat16>(), n * k, b.NextSeed(), -4, 4, b.st());
    }
    const double us = b.TimeUs([&](int i) {
      Fp8QuantParams p{};
      p.x = x[i]->as<void>(); p.x_bf16 = true; p.ldx = k; p.n = n; p.k = k; p.group = 128;
      p.q = qo[i]->as<uint8_t>(); p.ldq = k; p.scales = sc[i]->as<float>(); p.layout = ScaleLayout::kGroupMajor;
      p.scale_ld = Mp; p.stream = b.st();
      Fp8QuantizePerTokenGroup(p);
    }, nsets);
    b.Add("fp8_quant_1x128", sn + " k7168 bf16->e4m3", us, double(n) * k * 3 + double(n) * k / 128 * 4, 0, false);
  }
  {  // MoE routing: 256 experts, sigmoid, noaux_tc (8 groups, top-4 groups), top-8
    const int64_t E = 256;
    const int nsets = SetsFor(double(n) * E * 4, 8);
    std::vector<std::unique_ptr<Buf>> lg;
    for (int i = 0; i < nsets; ++i) {
      lg.push_back(std::make_unique<Buf>(n * E * 4));
      FillUniformF32(lg.back()->as<float>(), n * E, b.NextSeed(), -3, 3, b.st());
    }
    Buf bias(E * 4), ids(n * 8 * 4), wts(n * 8 * 4);
    FillUniformF32(bias.as<float>(), E, b.NextSeed(), -0.1f, 0.1f, b.st());
    const double us = b.TimeUs([&](int i) {
      MoeRoutingParams p{};
      p.logits = lg[i]->as<float>(); p.bias = bias.as<float>(); p.n = n; p.num_experts = E; p.top_k = 8; p.n_group = 8;
      p.topk_group = 4; p.scoring = 1; p.topk_method = 2; p.norm_topk_prob = true; p.routed_scaling_factor = 2.5f;
      p.topk_ids = ids.as<int32_t>(); p.topk_weights = wts.as<float>(); p.stream = b.st();
      MoeRouting(p);
    }, nsets);
    b.Add("moe_routing_noaux_tc", sn + " E256 top8", us, double(n) * E * 4 + double(n) * 8 * 8, 0, false);
  }
}

std::string Json(const Bench& b, const std::string& gpu, const std::string& commit, const std::string& date) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : b.recs) {
    nlohmann::json j = {{"kernel", r.kernel}, {"shape", r.shape}, {"metric", r.metric}, {"value", r.value},
                        {"ceiling", r.ceiling}, {"ratio", r.ratio}, {"gpu", gpu}, {"commit", commit}, {"date", date}};
    if (r.time_us > 0) j["time_us"] = r.time_us;
    if (!r.note.empty()) j["note"] = r.note;
    arr.push_back(j);
  }
  return arr.dump(1);
}

std::string Markdown(const Bench& b, const std::string& gpu, const std::string& commit, const std::string& date,
                     const std::string& cmd) {
  std::string s;
  char buf[512];
  s += "# dsinfer bench kernels\n\nGPU: " + gpu + "; commit " + commit + "; " + date + "\n\nCommand: `" + cmd + "`\n\n";
  std::snprintf(buf, sizeof buf, "Ceilings (same run): copy %.2f TB/s; bf16 GEMM 8192^3 %.0f TFLOP/s; fp8 block-scaled GEMM 8192^3 %.0f TFLOP/s.\n\n",
                b.copy_tbs, b.bf16_tflops, b.fp8_tflops);
  s += buf;
  if (!MlaResults().anchors.empty()) {
    s += "## MLA decode vs FlashMLA (ANCHORS.md, same kind of H200)\n\n| case | FlashMLA us | ours us | FlashMLA time / ours (need >= 0.95) | before (run-1 config) us |\n|---|---:|---:|---:|---:|\n";
    for (const auto& a : MlaResults().anchors) {
      std::snprintf(buf, sizeof buf, "| %s | %.1f | %.1f | %.2f | %.1f |\n", a.name.c_str(), a.flashmla_us, a.ours_us,
                    a.flashmla_us / a.ours_us, a.before_us);
      s += buf;
    }
    s += "\n";
  }
  if (!MlaResults().sm90.empty()) {
    // One column pair per (run set, variant) timed in any row (MlaDecodeParams::sm90_variant; "-" =
    // not timed), column v = run set * kSm90Variants + variant (Sm90RunSet).
    std::vector<int> cols;
    for (int v = 0; v < kSm90RunSets * kSm90Variants; ++v)
      for (const auto& a : MlaResults().sm90) {
        const std::vector<double>& t = a.us[v / kSm90Variants];
        const int i = v % kSm90Variants;
        if (i < static_cast<int>(t.size()) && t[i] > 0) {
          cols.push_back(v);
          break;
        }
      }
    s += "## MLA decode, sm_90a wgmma kernel (mla_decode_sm90) vs FlashMLA\n\nFlashMLA time / ours: need >= 0.95. "
         "Variants (MlaDecodeParams::sm90_variant): 0 default, 1 / 2 seesaw, 4 three warpgroups, "
         "8 = 4 + fast softmax, 9 = 0 + fast softmax, 10 = 8 + per-box barriers, 11 tile pairs, 12 = 10 + a three-stage "
         "ring with Q's latent part in registers, 13 = 12 with one barrier a stage, 15 = 13 with the lean softmax "
         "(tree maxima, P by stmatrix, unit rescales skipped), 16 = 15 with each K tile multicast to the two "
         "row blocks of a token (a cluster of two; 3 and 5-7, measured in session 16, and 14 were "
         "removed); vNb = variant N with the balanced work list (split-KV by work: "
         "PlanMlaDecodeSm90WorkList); vNq / vNbq = the same with a bf16 q (MlaDecodeParams::q_bf16, FlashMLA's input form).\n\n| case | FlashMLA us |";
    std::string sep = "|---|---:|";
    for (int v : cols) {
      const std::string tag = "v" + std::to_string(v % kSm90Variants) + kSm90RunSetTags[v / kSm90Variants];
      s += " " + tag + " us | FlashMLA / " + tag + " |";
      sep += "---:|---:|";
    }
    s += " default tc us |\n" + sep + "---:|\n";
    for (const auto& a : MlaResults().sm90) {
      std::snprintf(buf, sizeof buf, "| %s | %.1f |", a.name.c_str(), a.flashmla_us);
      s += buf;
      for (int v : cols) {
        const std::vector<double>& t = a.us[v / kSm90Variants];
        const int i = v % kSm90Variants;
        const double us = i < static_cast<int>(t.size()) ? t[i] : -1.0;
        if (us > 0) std::snprintf(buf, sizeof buf, " %.1f | %.2f |", us, a.flashmla_us / us);
        else std::snprintf(buf, sizeof buf, " - | - |");
        s += buf;
      }
      std::snprintf(buf, sizeof buf, " %.1f |\n", a.tc_us);
      s += buf;
    }
    s += "\n";
  }
  if (!MlaResults().anchor_method.empty()) {
    s += "## MLA decode, sm_90a kernels timed as ANCHORS.md timed FlashMLA (DS_BENCH_MLA_ANCHOR_METHOD=1)\n\n"
         "1 s idle, 3 warm-up launches, 50 launches each between two CUDA events, the median; the NVML SM clock "
         "sampled every 2 ms meanwhile. Beside it the same case's figure from the table above (median of ~150 ms of "
         "back-to-back graphs).\n\n| case | kernel | FlashMLA us | anchor-method us | FlashMLA / ours | SM MHz | burst-timing us |\n"
         "|---|---|---:|---:|---:|---:|---:|\n";
    for (const auto& m : MlaResults().anchor_method) {
      double fm = 0;
      for (const auto& a : MlaResults().sm90)
        if (m.name == a.name) fm = a.flashmla_us;
      for (const auto& a : MlaResults().anchors)
        if (fm == 0 && m.name == a.name) fm = a.flashmla_us;
      std::snprintf(buf, sizeof buf, "| %s | %s | %.1f | %.1f | %.2f | %.0f | %.1f |\n", m.name.c_str(), m.kernel.c_str(), fm,
                    m.us, fm > 0 ? fm / m.us : 0.0, m.mhz, m.burst_us);
      s += buf;
    }
    s += "\n";
  }
  for (const auto& m : MlaResults().mixed_checks) s += "Mixed-length check: " + m + "\n\n";
  s += "## All figures\n\n| kernel | shape | time us | metric | value | ceiling | ratio | note |\n|---|---|---:|---|---:|---:|---:|---|\n";
  for (const auto& r : b.recs) {
    std::snprintf(buf, sizeof buf, "| %s | %s | %.1f | %s | %.3f | %.3f | %.2f | %s |\n", r.kernel.c_str(), r.shape.c_str(),
                  r.time_us, r.metric.c_str(), r.value, r.ceiling, r.ratio, r.note.c_str());
    s += buf;
  }
  if (!b.skipped.empty()) {
    s += "\nSkipped (time budget or no kernel):\n";
    for (const auto& k : b.skipped) s += "- " + k + "\n";
  }
  return s;
}
#endif  // DS_WITH_CUDA

int RunBenchKernels(int argc, char** argv) {
  CLI::App app{"Time the hot CUDA kernels at DeepSeek-V3 shapes; write kernels.json + kernels.md"};
  bool quick = false;
  double budget_s = 0;
  std::string out_dir = "bench/results", commit = "unknown";
  std::vector<std::string> only;
  app.add_flag("--quick", quick, "one or two shapes per kernel family (smoke test)");
  app.add_option("--budget-s", budget_s, "stop starting new cases after this many seconds (0 = no limit)");
  app.add_option("--out", out_dir, "directory for kernels.json and kernels.md");
  app.add_option("--commit", commit, "commit id recorded in every record");
  app.add_option("--only", only, "families to run: ceilings is always run; mla_anchors mla_sm90 (only when named) mla_tune mla_sweep mla_prefill fp8_gemm moe moe_prefill skinny skinny_dense small fp8_gemv fp8_gemv_pdl fp8_gemv_experts gemv_experts_bf16 fp8_skinny fp8_large wgmma_probe (the last seven only when named)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
#ifndef DS_WITH_CUDA
  (void)quick; (void)budget_s;
  std::fprintf(stderr, "dsinfer bench kernels needs a CUDA build (cmake -DDS_CUDA=ON)\n");
  return 1;
#else
  std::string cmd = "dsinfer";
  for (int i = 0; i < argc; ++i) cmd += std::string(" ") + argv[i];
  const auto want = [&](const char* f) { return only.empty() || std::find(only.begin(), only.end(), f) != only.end(); };
  try {
    cudaDeviceProp prop{};
    DS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const std::string gpu = prop.name;
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    std::printf("GPU %s, %d SMs, L2 %d MB; commit %s; %s\n", gpu.c_str(), prop.multiProcessorCount, prop.l2CacheSize >> 20,
                commit.c_str(), date);
    // The output folder is created if missing; a file that cannot be written is an error (it was
    // silently skipped before session 19).
    {
      std::error_code ec;
      std::filesystem::create_directories(out_dir, ec);
      if (ec) {
        std::fprintf(stderr, "dsinfer bench kernels: cannot create --out %s: %s\n", out_dir.c_str(), ec.message().c_str());
        return 1;
      }
    }
    Bench b(quick, budget_s);
    // Rewritten after every family, so a run stopped by a time limit keeps what it measured.
    const auto save = [&] {
      for (const char* name : {"kernels.json", "kernels.md"}) {
        std::ofstream f(out_dir + "/" + name);
        if (std::string(name) == "kernels.json") f << Json(b, gpu, commit, date) << "\n";
        else f << Markdown(b, gpu, commit, date, cmd);
        DS_CHECK(f.good()) << "dsinfer bench kernels: cannot write " << out_dir << "/" << name;
      }
    };
    const auto prefill = [&](const std::vector<int64_t>& Ts) {
      for (int64_t T : Ts) {
        if (b.OutOfTime()) { b.skipped.push_back("mla_prefill T" + std::to_string(T)); continue; }
        MlaPrefillCase(b, T);
      }
    };
    Ceilings(b);
    save();
    if (want("mla_anchors")) { MlaDecodeAnchors(b); save(); }
    // Only when named (not part of the default run until the kernel is verified on the GPU).
    if (!only.empty() && want("mla_sm90")) { MlaDecodeSm90Anchors(b); save(); }
    if (want("mla_tune")) { MlaDecodeTune(b); save(); }
    if (want("fp8_gemm")) { Fp8Gemms(b, quick ? std::vector<int64_t>{16, 4096} : std::vector<int64_t>{16, 4096, 64, 1, 16384}); save(); }
    if (want("moe")) { Moe(b); save(); }
    if (want("moe_prefill")) { MoePrefill(b); save(); }
    if (want("skinny")) { Skinny(b); save(); }
    if (want("skinny_dense")) { SkinnyDense(b); save(); }
    if (!only.empty() && want("fp8_gemv")) { Fp8GemvFamily(b); save(); }
    if (!only.empty() && want("fp8_gemv_pdl")) { Fp8GemvPdlFamily(b); save(); }
    if (!only.empty() && want("fp8_skinny")) { Fp8SkinnyFamily(b); save(); }
    if (!only.empty() && want("fp8_large")) { Fp8LargeFamily(b); save(); }
    if (!only.empty() && want("wgmma_probe")) { WgmmaProbeFamily(b); save(); }
    if (!only.empty() && want("fp8_gemv_experts")) { Fp8GemvExpertsFamily(b); save(); }
    if (!only.empty() && want("gemv_experts_bf16")) { GemvExpertsBf16Family(b); save(); }
    if (want("small")) {
      for (int64_t n : {64, 4096}) {
        if (b.OutOfTime()) { b.skipped.push_back("small kernels n" + std::to_string(n)); continue; }
        SmallKernels(b, n);
      }
      save();
    }
    if (want("mla_prefill")) { MlaPrefillCompare(b); save(); }
    if (want("mla_prefill")) { MlaPrefillLong(b); save(); }
    if (want("mla_prefill")) { prefill(quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{4096, 8192}); save(); }
    if (want("mla_sweep")) { MlaDecodeSweep(b); save(); }
    if (want("fp8_gemm") && !quick) { Fp8Gemms(b, {128, 512, 2048}); save(); }
    if (want("mla_prefill") && !quick) prefill({16384, 32768});
    save();
    std::printf("\n%s", Markdown(b, gpu, commit, date, cmd).c_str());
    std::printf("wrote %s/kernels.json and kernels.md (%zu records, %.0f s)\n", out_dir.c_str(), b.recs.size(), b.Elapsed());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench kernels: %s\n", e.what());
    return 1;
  }
  return 0;
#endif
}

}  // namespace

DS_REGISTER_COMMAND_NAMED(bench_kernels, "bench kernels", "time the hot CUDA kernels at DeepSeek-V3 shapes (CUDA builds)", RunBenchKernels);
