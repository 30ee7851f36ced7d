// The CUTLASS 3.x/4.x types of one sm90 FP8 blockwise-scaled GEMM (e4m3 x e4m3, fp32
// accumulation, each 128-wide K block's wgmma sums promoted with both operands' scales), shared by
// our configurations in fp8_gemm_skinny_sm90.cu and fp8_gemm_sm90.cu. Include only from .cu files
// compiled with DS_HAVE_CUTLASS (the headers from scripts/get_cutlass.sh).
//
// TileShape / ClusterShape: cute shapes; kPingpong: CUTLASS's ping-pong kernel (a tile per
// consumer warpgroup; it takes no stream-K scheduler, so data-parallel tiles) instead of the
// cooperative one (two warpgroups on one tile, with the stream-K scheduler); LayoutA / LayoutB:
// the operands' CUTLASS layout tags, LayoutSFA / LayoutSFB their scale layouts
// (Sm90BlockwiseScaleConfig); LayoutD / ElementD: the output (no C operand, alpha 1).
#pragma once

#ifdef DS_HAVE_CUTLASS
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace ds::cuda::cutlass_fp8 {

template <class TileShape, class ClusterShape, bool kPingpong, class LayoutA, class LayoutSFA, class LayoutB,
          class LayoutSFB, class LayoutD, class ElementD_>
struct BlockwiseGemm {
  using Element = cutlass::float_e4m3_t;
  using ElementD = ElementD_;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using KernelSchedule = std::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>;
  using EpilogueSchedule = std::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, ElementD, LayoutD, kAlignD,
      EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cute::tuple<LayoutA, LayoutSFA>, kAlignAB, Element,
      cute::tuple<LayoutB, LayoutSFB>, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue,
      std::conditional_t<kPingpong, cutlass::gemm::PersistentScheduler, cutlass::gemm::StreamKScheduler>>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Scheduler = typename Kernel::TileScheduler;
};

}  // namespace ds::cuda::cutlass_fp8
#endif  // DS_HAVE_CUTLASS
