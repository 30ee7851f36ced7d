// Programmatic dependent launch (launch.cuh) at the op level: a chain of dependent decode-path
// kernels -- Copy2D -> RmsNorm (+ residual, bf16 copy) -> SiluAndMul -> SplitBf16 -> F32ToBf16
// -> RmsNorm, repeated so that each round reads the previous round's output and overwrites
// buffers the previous round read (read-after-write and write-after-read hazards between
// consecutive kernels) -- launched with pdl off and on, eagerly and captured into a CUDA graph
// (replayed several times). PDL changes no arithmetic: every output must be bit-identical to
// the eager pdl-off run. The captured pdl-on graph must contain programmatic edges (stream
// capture turns a PDL launch after a kernel into a cudaGraphDependencyTypeProgrammatic edge),
// the pdl-off graph none. Not yet run on the GPU (written without a device).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"  // first: its helpers call ds::F32ToBf16, which runner_kernels.h's op would hide
#include "backend/cuda/rmsnorm.h"
#include "backend/cuda/runner_kernels.h"
#include "backend/cuda/silu_and_mul.h"

namespace ds::cuda::test {
namespace {

constexpr int kRounds = 6;

struct Chain {
  int64_t n, d;  // rows, width (d even: SiluAndMul's gate_up, I = d / 2)
  Dev<float> x0, res0, w;                 // inputs (restored before every run)
  Dev<float> x, res, a, b, act, o;        // fp32 work buffers
  Dev<__nv_bfloat16> b16, hi, lo, c16;    // bf16 outputs
  Chain(int64_t n_, int64_t d_)
      : n(n_), d(d_), x0(RandomNormal(n_ * d_, 2.f)), res0(RandomNormal(n_ * d_)), w(RandomF(d_, 0.5f, 1.5f)),
        x(n_ * d_), res(n_ * d_), a(n_ * d_), b(n_ * d_), act(n_ * d_ / 2), o(n_ * d_), b16(n_ * d_),
        hi(n_ * d_ / 2), lo(n_ * d_ / 2), c16(n_ * d_) {}

  // Restores the inputs (stream-ordered; not part of a capture).
  void Reset(cudaStream_t s) {
    DS_CUDA_CHECK(cudaMemcpyAsync(x.get(), x0.get(), n * d * 4, cudaMemcpyDeviceToDevice, s));
    DS_CUDA_CHECK(cudaMemcpyAsync(res.get(), res0.get(), n * d * 4, cudaMemcpyDeviceToDevice, s));
  }
  // The chain of kernels (capturable: no allocation, no synchronisation).
  void Launch(cudaStream_t s, bool pdl) {
    const int64_t I = d / 2;
    for (int r = 0; r < kRounds; ++r) {
      Copy2D(x.get(), d, a.get(), d, n, d, s, pdl);
      RmsNormParams np{a.get(), d, res.get(), d, w.get(), b.get(), d, DTypeOut::kF32, n, d, 1e-6f, s, pdl};
      np.out_bf16 = b16.get(); np.ld_out_bf16 = d;
      RmsNorm(np);
      SiluAndMul({b.get(), d, act.get(), I, DTypeOut::kF32, nullptr, 0, nullptr, ScaleLayout::kGroupMajor, n, I, s, pdl});
      SplitBf16(act.get(), I, n, I, hi.get(), lo.get(), I, s, pdl);
      F32ToBf16(b.get(), d, c16.get(), d, n, d, s, pdl);
      // x = norm(b): the next round's input (x was read by this round's Copy2D: a
      // write-after-read hazard on the PDL edge chain).
      RmsNorm({b.get(), d, nullptr, 0, w.get(), x.get(), d, DTypeOut::kF32, n, d, 1e-6f, s, pdl});
    }
    Copy2D(x.get(), d, o.get(), d, n, d, s, pdl);
  }
  // Every output, as raw bytes.
  std::vector<uint8_t> Snapshot() const {
    std::vector<uint8_t> out;
    auto add = [&](const auto& buf) {
      auto h = buf.Download();
      const auto* p = reinterpret_cast<const uint8_t*>(h.data());
      out.insert(out.end(), p, p + h.size() * sizeof(h[0]));
    };
    add(o); add(res); add(a); add(b); add(act); add(b16); add(hi); add(lo); add(c16);
    return out;
  }
};

// Programmatic edges in a captured graph (cudaGraphGetEdges with edge data).
int64_t ProgrammaticEdges(cudaGraph_t g) {
  size_t n = 0;
  DS_CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  if (n == 0) return 0;
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  DS_CUDA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  int64_t prog = 0;
  for (size_t i = 0; i < n; ++i) prog += data[i].type == cudaGraphDependencyTypeProgrammatic;
  return prog;
}

void RunCase(int64_t n, int64_t d) {
  Chain c(n, d);
  cudaStream_t s;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  c.Reset(s);
  c.Launch(s, false);
  DS_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<uint8_t> ref = c.Snapshot();

  auto check = [&](const std::string& what) {
    DS_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<uint8_t> got = c.Snapshot();
    int64_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) differ += got[i] != ref[i];
    std::printf("[metric] pdl_chain n=%lld d=%lld %s: differing bytes %lld of %lld (bit-identical expected)%s\n",
                (long long)n, (long long)d, what.c_str(), (long long)differ, (long long)ref.size(),
                differ == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(differ, 0) << what;
  };

  c.Reset(s);
  c.Launch(s, true);
  check("eager pdl=1");

  for (bool pdl : {false, true}) {
    c.Reset(s);
    DS_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g = nullptr;
    DS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    c.Launch(s, pdl);
    DS_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    const int64_t prog = ProgrammaticEdges(g);
    std::printf("[metric] pdl_chain n=%lld d=%lld graph pdl=%d: programmatic edges %lld (%s)\n", (long long)n,
                (long long)d, pdl ? 1 : 0, (long long)prog, pdl ? "expected > 0" : "expected 0");
    if (pdl) { EXPECT_GT(prog, 0); } else { EXPECT_EQ(prog, 0); }
    cudaGraphExec_t exec = nullptr;
    DS_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int rep = 0; rep < 3; ++rep) {
      c.Reset(s);
      DS_CUDA_CHECK(cudaGraphLaunch(exec, s));
      check("graph pdl=" + std::to_string(pdl ? 1 : 0) + " replay " + std::to_string(rep));
    }
    // Back-to-back replays without a reset in between: the second starts from the first's
    // outputs, as the eager chain run twice does.
    c.Reset(s);
    DS_CUDA_CHECK(cudaGraphLaunch(exec, s));
    DS_CUDA_CHECK(cudaGraphLaunch(exec, s));
    DS_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<uint8_t> twice = c.Snapshot();
    c.Reset(s);
    c.Launch(s, false);
    c.Launch(s, false);
    DS_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<uint8_t> twice_ref = c.Snapshot();
    EXPECT_TRUE(twice == twice_ref) << "two back-to-back replays, pdl=" << pdl;
    DS_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DS_CUDA_CHECK(cudaGraphDestroy(g));
  }
  DS_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(CudaPdl, ChainMatchesWithoutPdlEagerAndInGraphs) {
  RunCase(1, 2048);     // batch-1 decode: one block per row-kernel, tiny grids
  RunCase(16, 7168);    // V3 hidden at the fusions' largest decode size
  RunCase(200, 4096);   // several waves of the row kernels
}

}  // namespace
}  // namespace ds::cuda::test
