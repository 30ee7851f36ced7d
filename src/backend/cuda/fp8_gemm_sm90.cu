// FP8 block-scaled GEMM at prefill sizes through CUTLASS's sm90 blockwise-scaled kernels
// (fp8_gemm_sm90.h). Our own configuration of the library API, in GemmFp8's orientation:
//   A = the activations [Mp, K] row-major (K-major), scales 1x128, MN-major (x_scales as GemmFp8
//       takes them, group-major [K/128][Mp]);
//   B = the weights [N, K] row-major = K x N column-major (K-major), scales 128x128, MN-major
//       (w_scales_mn [K/128][N/128]);
//   D = y [Mp, N] row-major, leading dimension ldy.
#include "backend/cuda/device_props.h"
#include "backend/cuda/fp8_gemm_sm90.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

#include "backend/cuda/cutlass_fp8_blockwise.cuh"

namespace ds::cuda {

#ifdef DS_HAVE_CUTLASS
namespace {

using namespace cute;

constexpr size_t kAlign = 256;

int CurrentDevice() {
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

using LayoutA = cutlass::layout::RowMajor;     // activations [Mp, K]
using LayoutB = cutlass::layout::ColumnMajor;  // weights [N, K] row-major
using LayoutD = cutlass::layout::RowMajor;     // y [Mp, N]
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// kConfig: Fp8GemmSm90Config.
template <int kConfig>
struct Dense : cutlass_fp8::BlockwiseGemm<std::conditional_t<kConfig == 2, Shape<_64, _128, _128>, Shape<_128, _128, _128>>,
                                          std::conditional_t<kConfig == 1, Shape<_2, _1, _1>, Shape<_1, _1, _1>>,
                                          kConfig == 2, LayoutA, LayoutSFA, LayoutB, LayoutSFB, LayoutD,
                                          cutlass::bfloat16_t> {
  static constexpr bool kPingpong = kConfig == 2;
  static constexpr bool kStreamK = kConfig == 0 || kConfig == 1;  // (else data-parallel tiles)
};

template <int kConfig>
typename Dense<kConfig>::Gemm::Arguments MakeArgs(const Fp8GemmSm90Params& p, int dev) {
  using S = Dense<kConfig>;
  using Element = typename S::Element;
  const GemmFp8Params& g = p.g;
  const int Mp = static_cast<int>(Fp8PaddedM(g.M));
  const auto shape = cute::make_shape(Mp, static_cast<int>(g.N), static_cast<int>(g.K), 1);
  typename S::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = shape;
  typename S::Kernel::StrideA sa{};
  typename S::Kernel::StrideB sb{};
  typename S::Kernel::StrideD sd{};
  cute::get<0>(sa) = g.ldx;
  cute::get<0>(sb) = g.ldw;
  cute::get<0>(sd) = g.ldy;
  args.mainloop.ptr_A = reinterpret_cast<const Element*>(g.xq);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = reinterpret_cast<const Element*>(g.wq);
  args.mainloop.dB = sb;
  args.mainloop.ptr_SFA = g.x_scales;
  args.mainloop.layout_SFA = ScaleConfig::tile_atom_to_shape_SFA(shape);
  args.mainloop.ptr_SFB = p.w_scales_mn;
  args.mainloop.layout_SFB = ScaleConfig::tile_atom_to_shape_SFB(shape);
  cutlass_fp8::SetOutputAndDevice(args, static_cast<typename S::ElementD*>(g.y), sd, dev);
  if constexpr (!S::kPingpong) {
    using Mode = typename S::Scheduler::DecompositionMode;
    args.scheduler.decomposition_mode = S::kStreamK ? Mode::Heuristic : Mode::DataParallel;
    args.scheduler.reduction_mode = S::Scheduler::ReductionMode::Deterministic;
  }
  return args;
}

template <int kConfig>
size_t WorkspaceT(const Fp8GemmSm90Params& p, int dev) {
  return Dense<kConfig>::Gemm::get_workspace_size(MakeArgs<kConfig>(p, dev));
}

template <int kConfig>
void Run(const Fp8GemmSm90Params& p, int dev) {
  cutlass_fp8::Launch<typename Dense<kConfig>::Gemm>(MakeArgs<kConfig>(p, dev), p.workspace, p.workspace_bytes,
                                                     p.g.stream, "Fp8GemmSm90");
}

template <class F>
auto Dispatch(const Fp8GemmSm90Params& p, F&& f) {
  switch (p.config) {
    case Fp8GemmSm90Config::kCoop128Cluster2: return f(std::integral_constant<int, 1>{});
    case Fp8GemmSm90Config::kPingpong64: return f(std::integral_constant<int, 2>{});
    case Fp8GemmSm90Config::kCoop128DataParallel: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

}  // namespace
#endif  // DS_HAVE_CUTLASS

bool Fp8GemmSm90Available() {
#ifdef DS_HAVE_CUTLASS
  return CurrentDeviceProps().sm90;
#else
  return false;
#endif
}

std::string Fp8GemmSm90Unsupported(const Fp8GemmSm90Params& p) {
#ifndef DS_HAVE_CUTLASS
  (void)p;
  return "built without CUTLASS (scripts/get_cutlass.sh)";
#else
  const GemmFp8Params& g = p.g;
  std::ostringstream why;
  if (!CurrentDeviceProps().sm90) why << "device is not sm_90; ";
  if (g.M < 1 || g.N <= 0 || g.K <= 0 || Fp8PaddedM(g.M) > INT32_MAX || g.N > INT32_MAX || g.K > INT32_MAX)
    why << "M, N, K outside [1, 2^31); ";
  why << Fp8GemmOperandsUnsupported(g, p.w_scales_mn, /*f32_out_ok=*/false);
  const int c = static_cast<int>(p.config);
  if (c < 0 || c > 3) why << "config " << c << "; ";
  return why.str();
#endif
}

size_t Fp8GemmSm90WorkspaceBytes(int64_t M, int64_t N, int64_t K, Fp8GemmSm90Config config) {
#ifndef DS_HAVE_CUTLASS
  (void)M; (void)N; (void)K; (void)config;
  return 0;
#else
  DS_CHECK(M >= 1 && N > 0 && K > 0 && Fp8PaddedM(M) <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX)
      << "Fp8GemmSm90WorkspaceBytes: bad sizes M=" << M << " N=" << N << " K=" << K;
  Fp8GemmSm90Params p{};
  p.g.M = M; p.g.N = N; p.g.K = K; p.g.ldx = K; p.g.ldw = K; p.g.ldy = N;
  p.config = config;
  const int dev = CurrentDevice();
  const size_t b = Dispatch(p, [&](auto c) { return WorkspaceT<decltype(c)::value>(p, dev); });
  return (b + kAlign - 1) / kAlign * kAlign;
#endif
}

void Fp8GemmSm90(const Fp8GemmSm90Params& p) {
#ifndef DS_HAVE_CUTLASS
  (void)p;
  DS_CHECK(false) << "Fp8GemmSm90: built without CUTLASS (scripts/get_cutlass.sh)";
#else
  const std::string why = Fp8GemmSm90Unsupported(p);
  DS_CHECK(why.empty()) << "Fp8GemmSm90: unsupported: " << why;
  const int dev = CurrentDevice();
  Dispatch(p, [&](auto c) { Run<decltype(c)::value>(p, dev); });
#endif
}

}  // namespace ds::cuda
