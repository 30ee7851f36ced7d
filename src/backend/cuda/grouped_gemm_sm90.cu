// Hopper grouped expert GEMM through the CUTLASS library API (grouped_gemm_sm90.h). Our own
// configuration of CUTLASS's sm90 "ptr-array grouped" kernels: the collective builders pick
// the wgmma / TMA mainloop and epilogue for the element types, tile and schedule chosen here;
// a setup kernel of ours turns the device-side expert offsets into CUTLASS's per-group
// problem-shape / pointer / stride arrays.
#include "backend/cuda/device_props.h"
#include "backend/cuda/grouped_gemm_sm90.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "backend/cuda/cuda_check.h"
#include "common/check.h"

#ifdef DS_HAVE_CUTLASS
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
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

int CurrentDevice() {
  int dev = 0;
  DS_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

constexpr size_t kAlign = 256;
size_t AlignUp(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace

#ifdef DS_HAVE_CUTLASS
namespace {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per group
using LayoutA = cutlass::layout::RowMajor;     // activations [rows, K]
using LayoutB = cutlass::layout::ColumnMajor;  // weights [N, K] row-major = K x N column-major
using LayoutD = cutlass::layout::RowMajor;     // out [rows, N]
// DeepSeek-V3 block scales: activations 1 x 128 (per token and 128-wide K block), weights
// 128 x 128. CUTLASS's default (M-major / N-major) scale layouts; the setup kernel re-lays our
// token-major / checkpoint-layout scales out that way per group.
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

template <bool kFp8, class ElementD>
struct Sm90Gemm {
  using ElementAB = std::conditional_t<kFp8, cutlass::float_e4m3_t, cutlass::bfloat16_t>;
  static constexpr int kAlignAB = 16 / sizeof(ElementAB);
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using TileShape = std::conditional_t<kFp8, Shape<_128, _128, _128>, Shape<_128, _256, _64>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = std::conditional_t<kFp8, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
                                            cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  // D = acc (alpha 1, no C operand).
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using GmemA = std::conditional_t<kFp8, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using GmemB = std::conditional_t<kFp8, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, GmemA, kAlignAB, ElementAB, GmemB, kAlignAB, float,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

// The per-group arrays (same types for every instantiation: strides are (ld, 1, 0)).
using StrideRow = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;
static_assert(std::is_same_v<Sm90Gemm<false, float>::StrideA, StrideRow>);
static_assert(std::is_same_v<Sm90Gemm<false, float>::StrideB, StrideRow>);
static_assert(std::is_same_v<Sm90Gemm<false, float>::StrideD, StrideRow>);
static_assert(std::is_same_v<Sm90Gemm<true, cutlass::bfloat16_t>::StrideA, StrideRow>);
static_assert(std::is_same_v<Sm90Gemm<true, cutlass::bfloat16_t>::StrideD, StrideRow>);
using GroupShape = ProblemShape::UnderlyingProblemShape;

// Workspace layout (each piece 256-byte aligned), E groups.
struct Layout {
  size_t shapes, ptr_a, ptr_b, ptr_d, stride_a, stride_b, stride_d;  // every input
  size_t ptr_sfa, ptr_sfb, layout_sfa, layout_sfb, sfa, sfb;         // kFp8
  size_t cutlass_ws, total;
};

Layout MakeLayout(bool fp8, int64_t E, int64_t max_rows, int64_t N, int64_t K, size_t cutlass_bytes) {
  Layout l{};
  size_t at = 0;
  const auto take = [&](size_t bytes) { const size_t o = at; at += AlignUp(bytes); return o; };
  l.shapes = take(E * sizeof(GroupShape));
  l.ptr_a = take(E * sizeof(void*));
  l.ptr_b = take(E * sizeof(void*));
  l.ptr_d = take(E * sizeof(void*));
  l.stride_a = take(E * sizeof(StrideRow));
  l.stride_b = take(E * sizeof(StrideRow));
  l.stride_d = take(E * sizeof(StrideRow));
  if (fp8) {
    const int64_t kb = (K + 127) / 128, nb = (N + 127) / 128;
    l.ptr_sfa = take(E * sizeof(void*));
    l.ptr_sfb = take(E * sizeof(void*));
    l.layout_sfa = take(E * sizeof(LayoutSFA));
    l.layout_sfb = take(E * sizeof(LayoutSFB));
    l.sfa = take(static_cast<size_t>(max_rows) * kb * sizeof(float));
    l.sfb = take(static_cast<size_t>(E) * nb * kb * sizeof(float));
  }
  l.cutlass_ws = take(cutlass_bytes);
  l.total = at;
  return l;
}

template <class T>
__host__ __device__ T* At(void* base, size_t off) { return reinterpret_cast<T*>(static_cast<char*>(base) + off); }

struct SetupParams {
  bool fp8;
  const char* a; int64_t lda, a_elem;   // bytes per element
  const float* a_scales;
  const int32_t* offsets;
  const char* w; int64_t w_elem;
  const float* w_scales;
  int64_t E, N, K;
  char* out; int64_t ldo, out_elem;
  void* ws;
  Layout l;
};

// One CTA per group: the group's problem shape, pointers and strides; for kFp8 also the
// group's activation scales re-laid out M-major (sfa[base_e + kb * M_e + i], base_e =
// offsets[e] * kb_count: groups packed in row order) and its weight scales N-major
// (sfb[e][kb][nb]).
__global__ void SetupKernel(SetupParams p) {
  const int64_t e = blockIdx.x;
  const int64_t row0 = p.offsets[e], m = p.offsets[e + 1] - row0;
  const int64_t kb_count = (p.K + 127) / 128, nb_count = (p.N + 127) / 128;
  if (threadIdx.x == 0) {
    At<GroupShape>(p.ws, p.l.shapes)[e] = GroupShape{static_cast<int>(m), static_cast<int>(p.N), static_cast<int>(p.K)};
    At<const void*>(p.ws, p.l.ptr_a)[e] = p.a + row0 * p.lda * p.a_elem;
    At<const void*>(p.ws, p.l.ptr_b)[e] = p.w + e * p.N * p.K * p.w_elem;
    At<void*>(p.ws, p.l.ptr_d)[e] = p.out + row0 * p.ldo * p.out_elem;
    StrideRow sa{}, sb{}, sd{};
    cute::get<0>(sa) = p.lda;
    cute::get<0>(sb) = p.K;
    cute::get<0>(sd) = p.ldo;
    At<StrideRow>(p.ws, p.l.stride_a)[e] = sa;
    At<StrideRow>(p.ws, p.l.stride_b)[e] = sb;
    At<StrideRow>(p.ws, p.l.stride_d)[e] = sd;
    if (p.fp8) {
      const auto shape = cute::make_shape(static_cast<int>(m), static_cast<int>(p.N), static_cast<int>(p.K), 1);
      At<const float*>(p.ws, p.l.ptr_sfa)[e] = At<float>(p.ws, p.l.sfa) + row0 * kb_count;
      At<const float*>(p.ws, p.l.ptr_sfb)[e] = At<float>(p.ws, p.l.sfb) + e * nb_count * kb_count;
      At<LayoutSFA>(p.ws, p.l.layout_sfa)[e] = ScaleConfig::tile_atom_to_shape_SFA(shape);
      At<LayoutSFB>(p.ws, p.l.layout_sfb)[e] = ScaleConfig::tile_atom_to_shape_SFB(shape);
    }
  }
  if (!p.fp8) return;
  float* sfa = At<float>(p.ws, p.l.sfa) + row0 * kb_count;
  for (int64_t i = threadIdx.x; i < m * kb_count; i += blockDim.x) {
    const int64_t r = i / kb_count, kb = i % kb_count;  // coalesced reads
    sfa[kb * m + r] = p.a_scales[(row0 + r) * kb_count + kb];
  }
  float* sfb = At<float>(p.ws, p.l.sfb) + e * nb_count * kb_count;
  const float* wsrc = p.w_scales + e * nb_count * kb_count;
  for (int64_t i = threadIdx.x; i < nb_count * kb_count; i += blockDim.x) {
    const int64_t nb = i / kb_count, kb = i % kb_count;
    sfb[kb * nb_count + nb] = wsrc[i];
  }
}

void CheckStatus(cutlass::Status s, const char* what) {
  DS_CHECK(s == cutlass::Status::kSuccess) << "GroupedGemmSm90: " << what << ": " << cutlassGetStatusString(s);
}

template <bool kFp8, class ElementD>
typename Sm90Gemm<kFp8, ElementD>::Gemm::Arguments MakeArgs(int64_t E, void* ws, const Layout& l, int dev) {
  using G = Sm90Gemm<kFp8, ElementD>;
  using ElementAB = typename G::ElementAB;
  typename G::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {static_cast<int>(E), At<GroupShape>(ws, l.shapes), nullptr};  // shapes on the device only
  args.mainloop.ptr_A = At<const ElementAB*>(ws, l.ptr_a);
  args.mainloop.dA = At<typename G::StrideA>(ws, l.stride_a);
  args.mainloop.ptr_B = At<const ElementAB*>(ws, l.ptr_b);
  args.mainloop.dB = At<typename G::StrideB>(ws, l.stride_b);
  if constexpr (kFp8) {
    args.mainloop.ptr_SFA = At<const float*>(ws, l.ptr_sfa);
    args.mainloop.layout_SFA = At<LayoutSFA>(ws, l.layout_sfa);
    args.mainloop.ptr_SFB = At<const float*>(ws, l.ptr_sfb);
    args.mainloop.layout_SFB = At<LayoutSFB>(ws, l.layout_sfb);
  }
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

template <bool kFp8, class ElementD>
size_t CutlassWorkspace(int64_t E, int dev) {
  using G = Sm90Gemm<kFp8, ElementD>;
  Layout l{};
  return G::Gemm::get_workspace_size(MakeArgs<kFp8, ElementD>(E, nullptr, l, dev));
}

size_t CutlassWorkspaceFor(bool fp8, DTypeOut out, int64_t E, int dev) {
  if (fp8) return out == DTypeOut::kF32 ? CutlassWorkspace<true, float>(E, dev) : CutlassWorkspace<true, cutlass::bfloat16_t>(E, dev);
  return out == DTypeOut::kF32 ? CutlassWorkspace<false, float>(E, dev) : CutlassWorkspace<false, cutlass::bfloat16_t>(E, dev);
}

template <bool kFp8, class ElementD>
void Run(const GroupedGemmSm90Params& p, const Layout& l, int dev) {
  using G = Sm90Gemm<kFp8, ElementD>;
  auto args = MakeArgs<kFp8, ElementD>(p.num_experts, p.workspace, l, dev);
  typename G::Gemm gemm;
  CheckStatus(gemm.can_implement(args), "can_implement");
  DS_CHECK(G::Gemm::get_workspace_size(args) <= l.total - l.cutlass_ws) << "GroupedGemmSm90: CUTLASS workspace grew";
  CheckStatus(gemm.initialize(args, At<void>(p.workspace, l.cutlass_ws), p.stream), "initialize");
  CheckStatus(gemm.run(p.stream), "run");
  DS_CUDA_CHECK_LAUNCH("GroupedGemmSm90");
}

}  // namespace
#endif  // DS_HAVE_CUTLASS

bool GroupedGemmSm90Available() {
#ifdef DS_HAVE_CUTLASS
  return CurrentDeviceProps().sm90;
#else
  return false;
#endif
}

std::string GroupedGemmSm90Unsupported(const GroupedGemmSm90Params& p) {
#ifndef DS_HAVE_CUTLASS
  return "built without CUTLASS (scripts/get_cutlass.sh)";
#else
  if (!CurrentDeviceProps().sm90) return "device is not sm_90";
  const bool fp8 = p.input == Sm90GemmInput::kFp8;
  const int64_t ab = fp8 ? 1 : 2, ob = p.out_type == DTypeOut::kF32 ? 4 : 2;
  const auto aligned16 = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  std::ostringstream why;
  if (p.num_experts <= 0 || p.N <= 0 || p.K <= 0) why << "empty shape; ";
  if (p.max_rows < 0) why << "max_rows < 0; ";
  // CUTLASS's group count and per-group (M, N, K) are int; one setup block per group.
  if (p.N > INT32_MAX || p.K > INT32_MAX || p.max_rows > INT32_MAX || p.num_experts > INT32_MAX)
    why << "dimension over 2^31; ";
  if (p.lda < p.K || p.ldo < p.N) why << "lda < K or ldo < N; ";
  if (p.offsets == nullptr) why << "offsets is null; ";
  // TMA: 16-byte aligned bases and row pitches.
  if ((p.K * ab) % 16 != 0) why << "K*elem % 16; ";
  if ((p.lda * ab) % 16 != 0) why << "lda*elem % 16; ";
  if ((p.ldo * ob) % 16 != 0) why << "ldo*elem % 16; ";
  if ((p.N * ob) % 16 != 0) why << "N*elem % 16; ";
  if (!aligned16(p.a) || !aligned16(p.w) || !aligned16(p.out)) why << "pointer not 16-byte aligned; ";
  if (fp8 && (p.K % 128 != 0 || p.N % 128 != 0)) why << "fp8 needs whole 128x128 scale blocks; ";
  if (fp8 && (!p.a_scales || !p.w_scales)) why << "fp8 needs a_scales and w_scales; ";
  return why.str();
#endif
}

size_t GroupedGemmSm90WorkspaceBytes(Sm90GemmInput input, int64_t num_experts, int64_t max_rows, int64_t N,
                                     int64_t K) {
#ifndef DS_HAVE_CUTLASS
  return 0;
#else
  DS_CHECK(num_experts > 0 && num_experts <= INT32_MAX && max_rows >= 0 && N > 0 && K > 0)
      << "GroupedGemmSm90WorkspaceBytes: bad sizes E=" << num_experts << " max_rows=" << max_rows << " N=" << N
      << " K=" << K;
  const bool fp8 = input == Sm90GemmInput::kFp8;
  const int dev = CurrentDevice();
  const size_t cw = std::max(CutlassWorkspaceFor(fp8, DTypeOut::kF32, num_experts, dev),
                             CutlassWorkspaceFor(fp8, DTypeOut::kBF16, num_experts, dev));
  return MakeLayout(fp8, num_experts, max_rows, N, K, cw).total;
#endif
}

void GroupedGemmSm90(const GroupedGemmSm90Params& p) {
#ifndef DS_HAVE_CUTLASS
  DS_CHECK(false) << "GroupedGemmSm90: built without CUTLASS (scripts/get_cutlass.sh)";
#else
  const std::string why = GroupedGemmSm90Unsupported(p);
  DS_CHECK(why.empty()) << "GroupedGemmSm90: unsupported: " << why;
  if (p.max_rows == 0) return;
  const bool fp8 = p.input == Sm90GemmInput::kFp8;
  const int dev = CurrentDevice();
  const Layout l = MakeLayout(fp8, p.num_experts, p.max_rows, p.N, p.K, CutlassWorkspaceFor(fp8, p.out_type, p.num_experts, dev));
  DS_CHECK(p.workspace && p.workspace_bytes >= l.total && (reinterpret_cast<uintptr_t>(p.workspace) % kAlign) == 0)
      << "GroupedGemmSm90: workspace " << p.workspace_bytes << " bytes, need " << l.total << " (256-byte aligned)";
  SetupParams sp{};
  sp.fp8 = fp8;
  sp.a = static_cast<const char*>(p.a); sp.lda = p.lda; sp.a_elem = fp8 ? 1 : 2; sp.a_scales = p.a_scales;
  sp.offsets = p.offsets;
  sp.w = static_cast<const char*>(p.w); sp.w_elem = fp8 ? 1 : 2; sp.w_scales = p.w_scales;
  sp.E = p.num_experts; sp.N = p.N; sp.K = p.K;
  sp.out = static_cast<char*>(p.out); sp.ldo = p.ldo; sp.out_elem = p.out_type == DTypeOut::kF32 ? 4 : 2;
  sp.ws = p.workspace; sp.l = l;
  SetupKernel<<<static_cast<unsigned>(p.num_experts), 256, 0, p.stream>>>(sp);
  DS_CUDA_CHECK_LAUNCH("GroupedGemmSm90 setup");
  if (fp8) {
    if (p.out_type == DTypeOut::kF32) Run<true, float>(p, l, dev);
    else Run<true, cutlass::bfloat16_t>(p, l, dev);
  } else {
    if (p.out_type == DTypeOut::kF32) Run<false, float>(p, l, dev);
    else Run<false, cutlass::bfloat16_t>(p, l, dev);
  }
#endif
}

}  // namespace ds::cuda
