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
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_props.h"
#include "common/check.h"

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

// The arguments every configuration sets alike: D = alpha 1 x the accumulators (no C operand)
// at ptr_d with stride dd, and the device's id and SM count (the persistent schedulers' grid).
template <class Args, class ElementD, class StrideD>
void SetOutputAndDevice(Args& args, ElementD* ptr_d, const StrideD& dd, int dev) {
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = dd;
  args.epilogue.ptr_D = ptr_d;
  args.epilogue.dD = dd;
  args.hw_info.device_id = dev;
  args.hw_info.sm_count = CurrentDeviceProps().sms;
}

// can_implement, the workspace check (enough bytes at a 256-byte aligned address), initialize
// and run on `stream`; `what` names the caller in errors (CheckError).
template <class Gemm>
void Launch(const typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes, cudaStream_t stream,
            const char* what) {
  const auto check = [&](cutlass::Status s, const char* step) {
    DS_CHECK(s == cutlass::Status::kSuccess) << what << ": " << step << ": " << cutlassGetStatusString(s);
  };
  Gemm gemm;
  check(gemm.can_implement(args), "can_implement");
  const size_t need = Gemm::get_workspace_size(args);
  DS_CHECK(need <= workspace_bytes && (need == 0 || workspace != nullptr))
      << what << ": workspace " << workspace_bytes << " bytes, need " << need;
  DS_CHECK(reinterpret_cast<uintptr_t>(workspace) % 256 == 0) << what << ": workspace not 256-byte aligned";
  check(gemm.initialize(args, workspace, stream), "initialize");
  check(gemm.run(stream), "run");
  DS_CUDA_CHECK_LAUNCH(what);
}

}  // namespace ds::cuda::cutlass_fp8
#endif  // DS_HAVE_CUTLASS
