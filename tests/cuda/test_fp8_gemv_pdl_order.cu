// Fp8Gemv with prefetch_weights as a programmatic dependent (session 36): a deterministic check
// that the activations are read only after the predecessor completed. The predecessor releases
// its dependents at once (griddepcontrol.launch_dependents), spins ~200 us, then writes the
// activations; the GEMV's CTAs are therefore resident and request their weights long before the
// activations exist. Read before the wait, the activations would still be the poison (NaN) the
// stream wrote before the predecessor, and the outputs NaN; read after it, the outputs equal a
// plain launch's bit for bit. CTA counts: auto and 8 (the ring refills after the prefetched
// stages). Skipped without an sm_90 device (the TMA path and PDL need one).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/fp8_gemv.h"
#include "backend/cuda/launch.cuh"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

// Releases its dependents first, waits ~spin_cycles SM cycles, then copies src into dst.
__global__ void SlowWriter(const __nv_bfloat16* src, __nv_bfloat16* dst, int64_t n, long long spin_cycles) {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const long long t0 = clock64();
  while (clock64() - t0 < spin_cycles) {
  }
  for (int64_t i = threadIdx.x + static_cast<int64_t>(blockIdx.x) * blockDim.x; i < n; i += blockDim.x * gridDim.x)
    dst[i] = src[i];
}

bool Sm90() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  DS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.major == 9;
}

TEST(CudaFp8GemvPdlOrder, PrefetchedGemvWaitsForItsActivations) {
  if (!Sm90()) GTEST_SKIP() << "needs an sm_90 device (TMA path and PDL)";
  const int64_t N = 7168, K = 2048, M = 4;  // V3's shared-expert down projection
  const std::vector<uint8_t> wq = RandomE4M3(N * K);
  std::vector<float> ws = RandomF(((N + 127) / 128) * ((K + 127) / 128), 0.5f, 2.0f);
  for (auto& v : ws) v *= std::ldexp(1.f, -9);
  const std::vector<float> a = RoundBf16Vec(RandomNormal(8 * K));
  Dev<uint8_t> dw(wq);
  Dev<float> dsc(ws);
  Dev<__nv_bfloat16> src(ToBf16(a)), act(8 * K);
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int ctas : {0, 8}) {
    Dev<uint8_t> work(Fp8GemvWorkspaceBytes(N, K, ctas));
    DS_CUDA_CHECK(cudaMemset(work.get(), 0, work.size()));
    Dev<float> out(8 * N);
    Fp8GemvParams p;
    p.a = act.get(); p.lda = K; p.w = dw.get(); p.w_scales = dsc.get(); p.out = out.get(); p.ldo = N;
    p.M = M; p.N = N; p.K = K; p.workspace = work.get(); p.workspace_bytes = work.size(); p.stream = st; p.ctas = ctas;
    // Plain: the activations written, then the GEMV.
    DS_CUDA_CHECK(cudaMemcpyAsync(act.get(), src.get(), 8 * K * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice, st));
    Fp8Gemv(p);
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    const std::vector<float> plain = out.Download();
    // The chain: poison, the slow writer (plain launch), the GEMV as its programmatic dependent.
    out.Poison();
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    DS_CUDA_CHECK(cudaMemsetAsync(act.get(), 0xFF, 8 * K * sizeof(__nv_bfloat16), st));
    SlowWriter<<<8, 256, 0, st>>>(src.get(), act.get(), 8 * K, 400000);  // ~200 us at ~2 GHz
    DS_CUDA_CHECK(cudaGetLastError());
    p.pdl = true;
    p.prefetch_weights = true;
    Fp8Gemv(p);
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    const std::vector<float> got = out.Download();
    int64_t nonfinite = 0, differ = 0;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = r * N + n;
        nonfinite += !std::isfinite(got[i]);
        differ += std::memcmp(&got[i], &plain[i], sizeof(float)) != 0;
      }
    std::printf("[metric] op=fp8_gemv_pdl_order case=ctas%d nonfinite=%lld differ=%lld%s\n", ctas,
                static_cast<long long>(nonfinite), static_cast<long long>(differ),
                nonfinite == 0 && differ == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(nonfinite, 0) << "ctas " << ctas << ": activations read before the predecessor completed";
    EXPECT_EQ(differ, 0) << "ctas " << ctas;
  }
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace ds::cuda::test
