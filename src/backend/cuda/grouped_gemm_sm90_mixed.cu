// bf16 activations x e4m3 block-scaled weights on Hopper through the CUTLASS library API
// (grouped_gemm_sm90_mixed.h). Our own configuration of CUTLASS's sm90 ptr-array mixed-input
// collective (the builder picks the RS wgmma mainloop for a tuple<narrow type, scale type>
// operand); our setup kernel turns the device-side expert offsets into CUTLASS's per-group
// problem-shape / pointer / stride arrays, our expansion kernel lays the 128x128 block scales
// out per weight row as the collective reads them.
#include "backend/cuda/device_props.h"
#include "backend/cuda/grouped_gemm_sm90_mixed.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

#ifdef DS_HAVE_CUTLASS
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#endif

namespace ds::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t AlignUp(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
constexpr int64_t kScaleBlock = 128;  // DeepSeek-V3 weight block (both N and K)

}  // namespace

#ifdef DS_HAVE_CUTLASS
namespace {

using namespace cute;

// Per group the transposed GEMM: M' = N (weight rows), N' = rows_e (tokens), K.
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
using LayoutW = cutlass::layout::RowMajor;     // CUTLASS A: weights [N, K] row-major (K-major)
using LayoutX = cutlass::layout::ColumnMajor;  // CUTLASS B: K x rows column-major = a [rows, K] row-major
using LayoutD = cutlass::layout::ColumnMajor;  // D^T: N x rows column-major = out [rows, N] row-major
using ElementW = cutlass::float_e4m3_t;
using ElementX = cutlass::bfloat16_t;
// fp32 scales: the collective converts e4m3 -> fp32, multiplies by the scale in fp32 and rounds
// once to bf16 (mixed_input_utils.hpp, ConvertAndScale with a scale type other than the MMA
// type); a bf16 scale type would round the scale itself first.
using ElementScale = float;

template <class ElementD, bool kWide>
struct MixedGemm {
  static constexpr int kAlignW = 16;  // elements: 16-byte TMA rows
  static constexpr int kAlignX = 8;
  static constexpr int kAlignD = 16 / static_cast<int>(sizeof(ElementD));
  // (weight rows, tokens, K): 128 or 256 tokens per tile (kWide: half the conversions and
  // weight-tile reads per MAC, for groups of >= 256 rows).
  using TileShape = std::conditional_t<kWide, Shape<_128, _256, _64>, Shape<_128, _128, _64>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  // D = acc (alpha 1, no C operand).
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<ElementW, ElementScale>, LayoutW*, kAlignW,
      ElementX, LayoutX*, kAlignX, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideW = typename Kernel::InternalStrideA;
  using StrideX = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using StrideS = typename Mainloop::StrideScale;
};

// The per-group stride types (the same for both output types): K-major W and X rows, a
// column-major D^T, scales N-contiguous with a stride per 128-wide K block.
using StrideKMajor = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;  // (ld, 1, 0)
using StrideColD = cute::Stride<cute::Int<1>, int64_t, cute::Int<0>>;    // (1, ld, 0)
using StrideScale = cute::Stride<cute::Int<1>, int64_t, int64_t>;        // (1, N, N * K/128)
static_assert(std::is_same_v<MixedGemm<float, false>::StrideW, StrideKMajor>);
static_assert(std::is_same_v<MixedGemm<float, false>::StrideX, StrideKMajor>);
static_assert(std::is_same_v<MixedGemm<float, false>::StrideD, StrideColD>);
static_assert(std::is_same_v<MixedGemm<float, false>::StrideS, StrideScale>);
static_assert(std::is_same_v<MixedGemm<cutlass::bfloat16_t, true>::StrideD, StrideColD>);
static_assert(std::is_same_v<MixedGemm<cutlass::bfloat16_t, true>::StrideS, StrideScale>);
using GroupShape = ProblemShape::UnderlyingProblemShape;

// Workspace layout (each piece 256-byte aligned), E groups.
struct Layout {
  size_t shapes, ptr_w, ptr_x, ptr_d, ptr_s, stride_w, stride_x, stride_d, stride_s;
  size_t scales;  // [E][K/128][N] fp32: the block scales expanded per weight row
  size_t cutlass_ws, total;
};

Layout MakeLayout(int64_t E, int64_t N, int64_t K, size_t cutlass_bytes) {
  Layout l{};
  size_t at = 0;
  const auto take = [&](size_t bytes) { const size_t o = at; at += AlignUp(bytes); return o; };
  l.shapes = take(E * sizeof(GroupShape));
  l.ptr_w = take(E * sizeof(void*));
  l.ptr_x = take(E * sizeof(void*));
  l.ptr_d = take(E * sizeof(void*));
  l.ptr_s = take(E * sizeof(void*));
  l.stride_w = take(E * sizeof(StrideKMajor));
  l.stride_x = take(E * sizeof(StrideKMajor));
  l.stride_d = take(E * sizeof(StrideColD));
  l.stride_s = take(E * sizeof(StrideScale));
  l.scales = take(static_cast<size_t>(E) * N * ((K + kScaleBlock - 1) / kScaleBlock) * sizeof(float));
  l.cutlass_ws = take(cutlass_bytes);
  l.total = at;
  return l;
}

template <class T>
__host__ __device__ T* At(void* base, size_t off) { return reinterpret_cast<T*>(static_cast<char*>(base) + off); }

struct SetupParams {
  const __nv_bfloat16* a; int64_t lda;
  const int32_t* offsets;
  const uint8_t* w;
  int64_t E, N, K;
  char* out; int64_t ldo, out_elem;
  void* ws;
  Layout l;
};

// One thread per group: the group's problem shape (N, rows_e, K), pointers and strides.
__global__ void SetupKernel(SetupParams p) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= p.E) return;
  const int64_t row0 = p.offsets[e], m = p.offsets[e + 1] - row0;
  const int64_t kb = (p.K + kScaleBlock - 1) / kScaleBlock;
  At<GroupShape>(p.ws, p.l.shapes)[e] = GroupShape{static_cast<int>(p.N), static_cast<int>(m), static_cast<int>(p.K)};
  At<const void*>(p.ws, p.l.ptr_w)[e] = p.w + e * p.N * p.K;
  At<const void*>(p.ws, p.l.ptr_x)[e] = p.a + row0 * p.lda;
  At<void*>(p.ws, p.l.ptr_d)[e] = p.out + row0 * p.ldo * p.out_elem;
  At<const void*>(p.ws, p.l.ptr_s)[e] = At<float>(p.ws, p.l.scales) + e * kb * p.N;
  StrideKMajor sw{}, sx{};
  StrideColD sd{};
  StrideScale ss{};
  cute::get<0>(sw) = p.K;
  cute::get<0>(sx) = p.lda;
  cute::get<1>(sd) = p.ldo;
  cute::get<1>(ss) = p.N;
  cute::get<2>(ss) = p.N * kb;
  At<StrideKMajor>(p.ws, p.l.stride_w)[e] = sw;
  At<StrideKMajor>(p.ws, p.l.stride_x)[e] = sx;
  At<StrideColD>(p.ws, p.l.stride_d)[e] = sd;
  At<StrideScale>(p.ws, p.l.stride_s)[e] = ss;
}

// scales[e][kb][n] = w_scales[e][n / 128][kb] for the non-empty groups (an empty group's
// scales are never read); grid (ceil(kb * N / 256), E), coalesced writes.
__global__ void ExpandScalesKernel(const float* __restrict__ w_scales, const int32_t* __restrict__ offsets, int64_t N,
                                   int64_t K, float* __restrict__ out) {
  const int64_t e = blockIdx.y;
  if (offsets[e + 1] == offsets[e]) return;
  const int64_t kb_count = (K + kScaleBlock - 1) / kScaleBlock, nb_count = (N + kScaleBlock - 1) / kScaleBlock;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= kb_count * N) return;
  const int64_t kb = i / N, n = i % N;
  out[e * kb_count * N + i] = w_scales[(e * nb_count + n / kScaleBlock) * kb_count + kb];
}

void CheckStatus(cutlass::Status s, const char* what) {
  DS_CHECK(s == cutlass::Status::kSuccess) << "GroupedGemmSm90Mixed: " << what << ": " << cutlassGetStatusString(s);
}

template <class ElementD, bool kWide>
typename MixedGemm<ElementD, kWide>::Gemm::Arguments MakeArgs(int64_t E, void* ws, const Layout& l, int dev) {
  using G = MixedGemm<ElementD, kWide>;
  typename G::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {static_cast<int>(E), At<GroupShape>(ws, l.shapes), nullptr};  // shapes on the device only
  args.mainloop.ptr_A = At<const ElementW*>(ws, l.ptr_w);
  args.mainloop.dA = At<typename G::StrideW>(ws, l.stride_w);
  args.mainloop.ptr_B = At<const ElementX*>(ws, l.ptr_x);
  args.mainloop.dB = At<typename G::StrideX>(ws, l.stride_x);
  args.mainloop.ptr_S = At<const ElementScale*>(ws, l.ptr_s);
  args.mainloop.dS = At<typename G::StrideS>(ws, l.stride_s);
  args.mainloop.chunk_size = static_cast<int>(kScaleBlock);  // one scale per 128 K values
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = At<typename G::StrideD>(ws, l.stride_d);
  args.epilogue.ptr_D = At<ElementD*>(ws, l.ptr_d);
  args.epilogue.dD = At<typename G::StrideD>(ws, l.stride_d);
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = CurrentDeviceProps().sms;
  return args;
}

template <class ElementD, bool kWide>
size_t CutlassWorkspace(int64_t E, int dev) {
  Layout l{};
  return MixedGemm<ElementD, kWide>::Gemm::get_workspace_size(MakeArgs<ElementD, kWide>(E, nullptr, l, dev));
}

// The largest CUTLASS workspace over the four instantiations (per-SM tensor maps; the same
// for all today), so one workspace size serves every output type and tile.
size_t CutlassWorkspaceAll(int64_t E, int dev) {
  return std::max({CutlassWorkspace<float, false>(E, dev), CutlassWorkspace<float, true>(E, dev),
                   CutlassWorkspace<cutlass::bfloat16_t, false>(E, dev),
                   CutlassWorkspace<cutlass::bfloat16_t, true>(E, dev)});
}

template <class ElementD, bool kWide>
void Run(const GroupedGemmParams& p, const Layout& l, int dev) {
  using G = MixedGemm<ElementD, kWide>;
  auto args = MakeArgs<ElementD, kWide>(p.num_experts, p.workspace, l, dev);
  typename G::Gemm gemm;
  CheckStatus(gemm.can_implement(args), "can_implement");
  DS_CHECK(G::Gemm::get_workspace_size(args) <= l.total - l.cutlass_ws) << "GroupedGemmSm90Mixed: CUTLASS workspace grew";
  CheckStatus(gemm.initialize(args, At<void>(p.workspace, l.cutlass_ws), p.stream), "initialize");
  CheckStatus(gemm.run(p.stream), "run");
  DS_CUDA_CHECK_LAUNCH("GroupedGemmSm90Mixed");
}

int CurrentDevice() {
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

}  // namespace
#endif  // DS_HAVE_CUTLASS

bool GroupedGemmSm90MixedAvailable() {
#ifdef DS_HAVE_CUTLASS
  return CurrentDeviceProps().sm90;
#else
  return false;
#endif
}

std::string GroupedGemmSm90MixedUnsupported(const GroupedGemmParams& p) {
#ifndef DS_HAVE_CUTLASS
  (void)p;
  return "built without CUTLASS (scripts/get_cutlass.sh)";
#else
  if (!CurrentDeviceProps().sm90) return "device is not sm_90";
  const int64_t ob = p.out_type == DTypeOut::kF32 ? 4 : 2;
  const auto aligned16 = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  std::ostringstream why;
  if (!p.w_fp8 || !p.w_scales) why << "needs e4m3 weights with block scales; ";
  if (p.num_experts <= 0 || p.N <= 0 || p.K <= 0) why << "empty shape; ";
  if (p.num_experts > 65535) why << "more than 65535 groups; ";  // the scale expansion's grid y
  if (p.N > INT32_MAX || p.K > INT32_MAX || p.max_rows > INT32_MAX) why << "dimension over 2^31; ";
  if (p.K % kScaleBlock != 0) why << "K % 128 (whole scale blocks along K); ";
  if (p.N % 8 != 0) why << "N % 8; ";  // 16-byte TMA rows of D^T (bf16) and of the expanded scales
  if ((p.lda * 2) % 16 != 0) why << "lda*2 % 16; ";
  if ((p.ldo * ob) % 16 != 0) why << "ldo*elem % 16; ";
  if (!aligned16(p.a) || !aligned16(p.w) || !aligned16(p.out)) why << "pointer not 16-byte aligned; ";
  return why.str();
#endif
}

size_t GroupedGemmSm90MixedWorkspaceBytes(int64_t num_experts, int64_t N, int64_t K) {
#ifndef DS_HAVE_CUTLASS
  (void)num_experts; (void)N; (void)K;
  return 0;
#else
  return MakeLayout(num_experts, N, K, CutlassWorkspaceAll(num_experts, CurrentDevice())).total;
#endif
}

bool GroupedGemmSm90MixedWideTile(const GroupedGemmParams& p, Sm90MixedTile tile) {
  if (tile != Sm90MixedTile::kAuto) return tile == Sm90MixedTile::k256;
  return p.max_rows >= 256 * p.num_experts;  // >= 256 rows per group on average (rows allocated)
}

void GroupedGemmSm90Mixed(const GroupedGemmParams& p, Sm90MixedTile tile) {
#ifndef DS_HAVE_CUTLASS
  (void)p; (void)tile;
  DS_CHECK(false) << "GroupedGemmSm90Mixed: built without CUTLASS (scripts/get_cutlass.sh)";
#else
  const std::string why = GroupedGemmSm90MixedUnsupported(p);
  DS_CHECK(why.empty()) << "GroupedGemmSm90Mixed: unsupported: " << why;
  if (p.max_rows == 0) return;
  const int dev = CurrentDevice();
  const Layout l = MakeLayout(p.num_experts, p.N, p.K, CutlassWorkspaceAll(p.num_experts, dev));
  DS_CHECK(p.workspace && p.workspace_bytes >= l.total && (reinterpret_cast<uintptr_t>(p.workspace) % kAlign) == 0)
      << "GroupedGemmSm90Mixed: workspace " << p.workspace_bytes << " bytes, need " << l.total << " (256-byte aligned)";
  SetupParams sp{};
  sp.a = p.a; sp.lda = p.lda; sp.offsets = p.offsets; sp.w = static_cast<const uint8_t*>(p.w);
  sp.E = p.num_experts; sp.N = p.N; sp.K = p.K;
  sp.out = static_cast<char*>(p.out); sp.ldo = p.ldo; sp.out_elem = p.out_type == DTypeOut::kF32 ? 4 : 2;
  sp.ws = p.workspace; sp.l = l;
  SetupKernel<<<static_cast<unsigned>((p.num_experts + 127) / 128), 128, 0, p.stream>>>(sp);
  DS_CUDA_CHECK_LAUNCH("GroupedGemmSm90Mixed setup");
  const int64_t per_expert = (p.K / kScaleBlock) * p.N;
  const dim3 grid(static_cast<unsigned>((per_expert + 255) / 256), static_cast<unsigned>(p.num_experts));
  ExpandScalesKernel<<<grid, 256, 0, p.stream>>>(p.w_scales, p.offsets, p.N, p.K, At<float>(p.workspace, l.scales));
  DS_CUDA_CHECK_LAUNCH("GroupedGemmSm90Mixed scales");
  const bool wide = GroupedGemmSm90MixedWideTile(p, tile);
  if (p.out_type == DTypeOut::kF32) {
    if (wide) Run<float, true>(p, l, dev);
    else Run<float, false>(p, l, dev);
  } else {
    if (wide) Run<cutlass::bfloat16_t, true>(p, l, dev);
    else Run<cutlass::bfloat16_t, false>(p, l, dev);
  }
#endif
}

}  // namespace ds::cuda
