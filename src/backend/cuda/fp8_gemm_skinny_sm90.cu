// FP8 block-scaled GEMM for M <= 64 as its transpose ("swap AB") through CUTLASS's sm90
// blockwise-scaled kernels (cooperative or ping-pong) with the stream-K scheduler
// (fp8_gemm_skinny_sm90.h).
// Our own configuration of the library API: CUTLASS's problem (M', N', K) = (our N, our Mp, K),
//   A' = the weights [N, K] row-major (K-major), scales 128x128, MN-major (w_scales_mn);
//   B' = the activations [Mp, K] row-major (K-major), scales 1x128, MN-major (x_scales as
//        GemmFp8 takes them, group-major [K/128][Mp]);
//   D' = y^T: element (n, m) at y[m * ldy + n], column-major with leading dimension ldy.
#include "backend/cuda/device_props.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

#include "backend/cuda/cutlass_fp8_blockwise.cuh"

namespace ds::cuda {
namespace {

constexpr size_t kAlign = 256;
constexpr int64_t kMaxRows = 64;

int CurrentDevice() {
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

// out[kb * nbo + j] = in[(j / rep) * ld + kb]: block scales transposed to MN-major, each of the
// checkpoint's 128-row blocks repeated rep times (rep = 128 / scale rows).
__global__ void TransposeScalesKernel(const float* __restrict__ in, int64_t ld, int64_t nbo, int64_t kb, int rep,
                                      float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over out, kb-major
  if (i >= nbo * kb) return;
  const int64_t k = i / nbo, j = i % nbo;
  out[i] = in[(j / rep) * ld + k];
}

}  // namespace

#ifdef DS_HAVE_CUTLASS
namespace {

using namespace cute;

using LayoutA = cutlass::layout::RowMajor;     // weights [N, K]: K-major A'
using LayoutB = cutlass::layout::ColumnMajor;  // activations [Mp, K]: K-major B'
using LayoutD = cutlass::layout::ColumnMajor;  // y^T
// A' (weights) scales per kScaleRows x 128 block (128: the checkpoint's blocks; 64: each block's
// scale twice, so that 64-row tiles exist), B' (activations) per 1 x 128 group, both MN-major (the
// only majorness the sm90 mainloop reads).
template <int kScaleRows>
using ScaleConfigT = cutlass::detail::Sm90BlockwiseScaleConfig<kScaleRows, 1, 128>;

// kSchedule: 0 cooperative on 128-row tiles (both consumer warpgroups on one tile, 64 rows
// each); 1 ping-pong on 128-row tiles (a tile per warpgroup, alternating, so one's wgmma wait and
// block-scale promotion overlap the other's); 2 ping-pong on 64-row tiles (twice the tiles, half
// the wgmmas per K block in each warpgroup's chain; weight scales at 64-row granularity).
// kPartials: fp32 output (the K splits' partial sums, Fp8SkinnyGemmParams::ksplit), else bf16.
template <int kTileN, int kSchedule, bool kPartials = false>
struct Skinny : cutlass_fp8::BlockwiseGemm<Shape<Int<kSchedule == 2 ? 64 : 128>, Int<kTileN>, _128>, Shape<_1, _1, _1>,
                                           kSchedule != 0, LayoutA,
                                           decltype(ScaleConfigT<kSchedule == 2 ? 64 : 128>::deduce_layoutSFA()), LayoutB,
                                           decltype(ScaleConfigT<kSchedule == 2 ? 64 : 128>::deduce_layoutSFB()), LayoutD,
                                           std::conditional_t<kPartials, float, cutlass::bfloat16_t>> {
  static constexpr bool kPingpong = kSchedule != 0;
  static constexpr int kTileM = kSchedule == 2 ? 64 : 128;
  using ScaleConfig = ScaleConfigT<kTileM>;
};

// kPartials: the K splits as CUTLASS's batch mode L = ksplit, batch l the K range
// [l K / ksplit, (l + 1) K / ksplit): A' and B' advance K / ksplit elements a batch, and the MN-major
// scales' batches are their consecutive blocks of K / 128 / ksplit rows (the layouts'
// own batch strides); D' = partials [ksplit][Mp][N] fp32.
template <int kTileN, int kSchedule, bool kPartials>
typename Skinny<kTileN, kSchedule, kPartials>::Gemm::Arguments MakeArgs(const Fp8SkinnyGemmParams& p, int dev,
                                                                       float* partials) {
  using S = Skinny<kTileN, kSchedule, kPartials>;
  using Element = typename S::Element;
  const GemmFp8Params& g = p.g;
  const int Mp = static_cast<int>(Fp8PaddedM(g.M));
  const int splits = kPartials ? std::max(1, p.ksplit) : 1;
  const int64_t Ks = g.K / splits;
  const auto shape = cute::make_shape(static_cast<int>(g.N), Mp, static_cast<int>(Ks), splits);
  typename S::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = shape;
  typename S::Kernel::StrideA sa{};
  typename S::Kernel::StrideB sb{};
  typename S::Kernel::StrideD sd{};
  cute::get<0>(sa) = g.ldw;
  cute::get<0>(sb) = g.ldx;
  if (kPartials && splits > 1) {
    cute::get<2>(sa) = Ks;
    cute::get<2>(sb) = Ks;
    cute::get<1>(sd) = g.N;
    cute::get<2>(sd) = g.N * Mp;
  } else {  // y^T itself (bf16, or fp32 through the fp32 instantiation)
    cute::get<1>(sd) = g.ldy;
  }
  args.mainloop.ptr_A = reinterpret_cast<const Element*>(g.wq);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = reinterpret_cast<const Element*>(g.xq);
  args.mainloop.dB = sb;
  args.mainloop.ptr_SFA = p.w_scales_mn;
  args.mainloop.layout_SFA = S::ScaleConfig::tile_atom_to_shape_SFA(shape);
  args.mainloop.ptr_SFB = g.x_scales;
  args.mainloop.layout_SFB = S::ScaleConfig::tile_atom_to_shape_SFB(shape);
  if (kPartials && splits > 1)
    cutlass_fp8::SetOutputAndDevice(args, reinterpret_cast<typename S::ElementD*>(partials), sd, dev);
  else
    cutlass_fp8::SetOutputAndDevice(args, static_cast<typename S::ElementD*>(g.y), sd, dev);
  if constexpr (!S::kPingpong) {
    using Mode = typename S::Scheduler::DecompositionMode;
    switch (p.decomposition) {
      case SkinnyDecomposition::kHeuristic: args.scheduler.decomposition_mode = Mode::Heuristic; break;
      case SkinnyDecomposition::kDataParallel: args.scheduler.decomposition_mode = Mode::DataParallel; break;
      case SkinnyDecomposition::kSplitK:
        args.scheduler.decomposition_mode = Mode::SplitK;
        args.scheduler.splits = std::max(1, p.splits);
        break;
      case SkinnyDecomposition::kStreamK: args.scheduler.decomposition_mode = Mode::StreamK; break;
    }
    args.scheduler.reduction_mode = S::Scheduler::ReductionMode::Deterministic;
  }
  return args;
}

int TileNFor(int64_t M) {
  const int64_t mp = Fp8PaddedM(M);
  return mp <= 16 ? 16 : mp <= 32 ? 32 : 64;
}

template <int kTileN, int kSchedule, bool kPartials>
size_t WorkspaceT(const Fp8SkinnyGemmParams& p, int dev) {
  return Skinny<kTileN, kSchedule, kPartials>::Gemm::get_workspace_size(
      MakeArgs<kTileN, kSchedule, kPartials>(p, dev, nullptr));
}

// The K splits' partials [ksplit][Mp][N] fp32 added in split order into y (bf16 or fp32), rows < M.
template <typename TOut>
__global__ void ReduceSplitsKernel(const float4* __restrict__ part, int splits, int64_t M, int64_t Mp, int64_t N,
                                   TOut* __restrict__ y, int64_t ldy) {
  const int64_t n4 = N / 4;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < M * n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / n4, c = i % n4;
    float4 acc = part[m * n4 + c];
    for (int l = 1; l < splits; ++l) {
      const float4 v = part[(l * Mp + m) * n4 + c];
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    if constexpr (std::is_same_v<TOut, float>) {
      *reinterpret_cast<float4*>(y + m * ldy + 4 * c) = acc;
    } else {
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(y + m * ldy + 4 * c);
      out[0] = __floats2bfloat162_rn(acc.x, acc.y);
      out[1] = __floats2bfloat162_rn(acc.z, acc.w);
    }
  }
}

size_t PartialsBytes(const Fp8SkinnyGemmParams& p) {
  if (p.ksplit <= 1) return 0;
  return (static_cast<size_t>(p.ksplit) * Fp8PaddedM(p.g.M) * p.g.N * sizeof(float) + kAlign - 1) / kAlign * kAlign;
}

template <int kTileN, int kSchedule, bool kPartials>
void Run(const Fp8SkinnyGemmParams& p, int dev) {
  using S = Skinny<kTileN, kSchedule, kPartials>;
  // Workspace: [partials (ksplit > 1) | CUTLASS's].
  const size_t pb = PartialsBytes(p);
  float* partials = kPartials ? static_cast<float*>(p.workspace) : nullptr;
  DS_CHECK(pb <= p.workspace_bytes && (pb == 0 || p.workspace != nullptr))
      << "Fp8SkinnyGemmSm90: workspace " << p.workspace_bytes << " bytes, the partials need " << pb;
  auto args = MakeArgs<kTileN, kSchedule, kPartials>(p, dev, partials);
  cutlass_fp8::Launch<typename S::Gemm>(args, static_cast<char*>(p.workspace) + pb, p.workspace_bytes - pb, p.g.stream,
                                        "Fp8SkinnyGemmSm90");
  if (kPartials && p.ksplit > 1) {
    const int64_t n = p.g.M * (p.g.N / 4);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4 * CurrentDeviceProps().sms));
    const auto* part = reinterpret_cast<const float4*>(partials);
    if (p.g.y_type == DTypeOut::kF32)
      ReduceSplitsKernel<<<blocks, 256, 0, p.g.stream>>>(part, p.ksplit, p.g.M, Fp8PaddedM(p.g.M), p.g.N,
                                                         static_cast<float*>(p.g.y), p.g.ldy);
    else
      ReduceSplitsKernel<<<blocks, 256, 0, p.g.stream>>>(part, p.ksplit, p.g.M, Fp8PaddedM(p.g.M), p.g.N,
                                                         static_cast<__nv_bfloat16*>(p.g.y), p.g.ldy);
    DS_CUDA_CHECK_LAUNCH("Fp8SkinnyGemmSm90 split reduce");
  }
}

// The instantiation for p: the tile width from M, the schedule from p.pingpong and p.scale_rows.
template <int kSchedule, bool kPartials, class F>
auto DispatchN(const Fp8SkinnyGemmParams& p, F&& f) {
  using Sc = std::integral_constant<int, kSchedule>;
  using Pa = std::bool_constant<kPartials>;
  const int tn = TileNFor(p.g.M);
  if (tn == 16) return f(std::integral_constant<int, 16>{}, Sc{}, Pa{});
  if (tn == 32) return f(std::integral_constant<int, 32>{}, Sc{}, Pa{});
  return f(std::integral_constant<int, 64>{}, Sc{}, Pa{});
}
template <class F>
auto Dispatch(const Fp8SkinnyGemmParams& p, F&& f) {
  // (The fp32-output instantiation serves the K split's partials and fp32 outputs alike.)
  if (p.scale_rows == 64)
    return p.ksplit > 1 || p.g.y_type == DTypeOut::kF32 ? DispatchN<2, true>(p, f) : DispatchN<2, false>(p, f);
  if (p.pingpong) return DispatchN<1, false>(p, f);
  return DispatchN<0, false>(p, f);
}

size_t Workspace(const Fp8SkinnyGemmParams& p, int dev) {
  return PartialsBytes(p) + Dispatch(p, [&](auto tn, auto sc, auto pa) {
           return WorkspaceT<decltype(tn)::value, decltype(sc)::value, decltype(pa)::value>(p, dev);
         });
}

}  // namespace
#endif  // DS_HAVE_CUTLASS

std::string Fp8GemmOperandsUnsupported(const GemmFp8Params& g, const float* w_scales_mn, bool f32_out_ok) {
  std::ostringstream why;
  if (g.K % 128 != 0) why << "K % 128 != 0; ";
  if (g.N % 16 != 0) why << "N % 16 != 0; ";
  if (g.ldx < g.K || g.ldw < g.K || g.ldy < g.N) why << "ldx, ldw < K or ldy < N; ";
  if (g.ldx % 16 != 0 || g.ldw % 16 != 0 || g.ldy % 8 != 0) why << "ldx, ldw % 16 or ldy % 8; ";
  const auto aligned16 = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  // (The scales too: CUTLASS loads the activation scales by TMA once a tile has >= 32 rows of them.)
  if (!aligned16(g.xq) || !aligned16(g.wq) || !aligned16(g.y) || !aligned16(g.x_scales) || !aligned16(w_scales_mn))
    why << "pointer not 16-byte aligned; ";
  if (!g.x_scales || !w_scales_mn) why << "x_scales and w_scales_mn needed; ";
  if (g.y_type != DTypeOut::kBF16 && !(f32_out_ok && g.y_type == DTypeOut::kF32)) why << "bf16 output only; ";
  return why.str();
}

bool Fp8SkinnyGemmSm90Available() {
#ifdef DS_HAVE_CUTLASS
  return CurrentDeviceProps().sm90;
#else
  return false;
#endif
}

std::string Fp8SkinnyGemmSm90Unsupported(const Fp8SkinnyGemmParams& p) {
#ifndef DS_HAVE_CUTLASS
  (void)p;
  return "built without CUTLASS (scripts/get_cutlass.sh)";
#else
  const GemmFp8Params& g = p.g;
  std::ostringstream why;
  if (!CurrentDeviceProps().sm90) why << "device is not sm_90; ";
  if (g.M < 1 || g.M > kMaxRows) why << "M " << g.M << " outside [1, " << kMaxRows << "]; ";
  if (g.N <= 0 || g.K <= 0 || g.N > INT32_MAX || g.K > INT32_MAX) why << "N, K outside [1, 2^31); ";
  // fp32 output: the 64-row ping-pong form only (its fp32 instantiation).
  why << Fp8GemmOperandsUnsupported(g, p.w_scales_mn, /*f32_out_ok=*/p.scale_rows == 64 && p.pingpong);
  if (p.decomposition == SkinnyDecomposition::kSplitK && p.splits < 1) why << "splits < 1; ";
  if (p.pingpong && p.decomposition != SkinnyDecomposition::kDataParallel)
    why << "ping-pong takes data-parallel tiles only; ";
  if (p.scale_rows != 128 && p.scale_rows != 64) why << "scale_rows " << p.scale_rows << " (128 or 64); ";
  if (p.scale_rows == 64 && !p.pingpong) why << "64-row tiles (scale_rows 64) are ping-pong only; ";
  if (p.ksplit < 1 || (p.ksplit > 1 && (p.scale_rows != 64 || g.K % (128 * int64_t{p.ksplit}) != 0)))
    why << "ksplit " << p.ksplit << " (> 1 only with 64-row tiles and K a multiple of 128 x ksplit); ";
  return why.str();
#endif
}

size_t Fp8SkinnyGemmSm90WorkspaceBytes(int64_t M, int64_t N, int64_t K, SkinnyDecomposition d, int splits,
                                       bool pingpong, int scale_rows, int ksplit) {
#ifndef DS_HAVE_CUTLASS
  (void)M; (void)N; (void)K; (void)d; (void)splits; (void)pingpong; (void)scale_rows; (void)ksplit;
  return 0;
#else
  DS_CHECK(M >= 1 && M <= kMaxRows && N > 0 && K > 0 && N <= INT32_MAX && K <= INT32_MAX)
      << "Fp8SkinnyGemmSm90WorkspaceBytes: bad sizes M=" << M << " N=" << N << " K=" << K;
  Fp8SkinnyGemmParams p{};
  p.g.M = M; p.g.N = N; p.g.K = K; p.g.ldx = K; p.g.ldw = K; p.g.ldy = N;
  p.decomposition = d;
  p.splits = splits;
  p.pingpong = pingpong;
  p.scale_rows = scale_rows == 64 ? 64 : 128;
  p.ksplit = std::max(1, ksplit);
  return (Workspace(p, CurrentDevice()) + kAlign - 1) / kAlign * kAlign;
#endif
}

void Fp8SkinnyGemmSm90(const Fp8SkinnyGemmParams& p) {
#ifndef DS_HAVE_CUTLASS
  (void)p;
  DS_CHECK(false) << "Fp8SkinnyGemmSm90: built without CUTLASS (scripts/get_cutlass.sh)";
#else
  const std::string why = Fp8SkinnyGemmSm90Unsupported(p);
  DS_CHECK(why.empty()) << "Fp8SkinnyGemmSm90: unsupported: " << why;
  const int dev = CurrentDevice();
  Dispatch(p, [&](auto tn, auto sc, auto pa) { Run<decltype(tn)::value, decltype(sc)::value, decltype(pa)::value>(p, dev); });
#endif
}

void Fp8TransposeWeightScales(const float* w_scales, int64_t w_scale_ld, int64_t N, int64_t K, float* out,
                              cudaStream_t stream, int scale_rows) {
  DS_CHECK(scale_rows == 128 || scale_rows == 64) << "Fp8TransposeWeightScales: scale_rows " << scale_rows;
  const int64_t nbo = (N + scale_rows - 1) / scale_rows, kb = (K + 127) / 128;
  DS_CHECK(w_scales && out && N > 0 && K > 0 && w_scale_ld >= kb)
      << "Fp8TransposeWeightScales: bad arguments N=" << N << " K=" << K << " ld=" << w_scale_ld;
  const int64_t n = nbo * kb;
  TransposeScalesKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(w_scales, w_scale_ld, nbo, kb,
                                                                                    128 / scale_rows, out);
  DS_CUDA_CHECK_LAUNCH("Fp8TransposeWeightScales");
}

}  // namespace ds::cuda
