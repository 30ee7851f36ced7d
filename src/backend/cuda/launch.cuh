// Programmatic Dependent Launch (PDL) for the decode-path kernels: the host-side launcher and
// the device-side wait. Not a public header: include only from .cu files.
//
// Mechanism (CUDA programming guide, "Programmatic Dependent Launch and Synchronization",
// https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/programmatic-dependent-launch.html;
// PTX ISA, "griddepcontrol"): a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization
// = 1 may be scheduled before the previous kernel in its stream has finished -- once every block
// of that kernel has executed griddepcontrol.launch_dependents (cudaTriggerProgrammaticLaunchCompletion)
// or exited. griddepcontrol.wait (cudaGridDependencySynchronize) then blocks the dependent until
// the prerequisite grids have COMPLETED and their memory operations are visible to it (not merely
// triggered: "launch_dependents ... does not imply that the producer has completed or that its
// memory writes are visible", cuTile's grid_dependency_control_launch_dependents; "[wait]
// waits for all instructions in a prior kernel to complete ... the new values will be visible",
// Triton's gdc_wait). Both instructions are documented as safe when the kernel was not launched
// as a programmatic dependent (Triton gdc_wait / gdc_launch_dependents: "This instruction is
// also safe to execute when programmatic dependent launch is disabled"): the wait returns at
// once because stream order already guarantees the predecessor finished, and the trigger has no
// dependent to release. So the default (non-PDL) path runs the same kernels with the same
// results.
//
// The rule every kernel here follows: PdlWaitThenRelease() is its FIRST statement, before any
// global-memory read or write (of activations, caches, counters, outputs; weights included, for
// simplicity). One exception, opt-in: Fp8Gemv with prefetch_weights (fp8_gemv.h) requests its
// first ring of weights and block scales before the wait, data no kernel in flight writes. With that,
//  - correctness does not depend on where a predecessor triggered: the wait is for completion;
//  - the chain is transitive: kernel k+1 cannot complete before kernel k completed (it waited),
//    so kernel k+2's wait on k+1 covers k as well;
//  - a PDL launch after a kernel we do not own (cuBLAS/cuBLASLt/CUTLASS, launched without the
//    attribute by their libraries) is still correct: our kernel waits for it to complete; such
//    a kernel after ours is launched normally and waits for ours to complete as stream order
//    says (their kernels are not changed);
//  - a memcpy/memset/event between two kernels keeps the plain stream dependency (the attribute
//    only relaxes kernel -> kernel edges).
// Early release: each kernel executes launch_dependents right after its wait, so the next
// kernel's blocks can be scheduled (and sit in their own wait) while this one runs: that hides
// the launch latency and the tail between two dependent kernels, which is what PDL saves here.
// Safe by the rule above (every dependent waits for full completion before touching memory);
// it cannot starve this kernel: the release happens only after EVERY block of this kernel has
// executed it, i.e. all of them are resident already (so grid-wide counters such as
// MoeRoutePermute's, which need all blocks co-resident, are unaffected).
//
// CUDA graphs: stream capture records a PDL launch as a programmatic dependency edge
// (cudaGraphDependencyTypeProgrammatic, from port cudaGraphKernelNodePortProgrammatic; CUDA >=
// 12.3); the runner's graphs are instantiated with flags 0 as before (no flag is documented as
// needed for programmatic edges). Unverified on the GPU: CudaRunnerPdl.* and CudaPdl.* tests.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "common/logging.h"

namespace ds::cuda {

namespace dev {
// First statement of every PDL-capable kernel (see the rule above). No-op on the default path.
// The wait is exactly cudaGridDependencySynchronize() (CUDA 13's cuda_device_runtime_api.h:
// asm volatile("griddepcontrol.wait;":::"memory")), the release cudaTriggerProgrammaticLaunchCompletion().
__device__ __forceinline__ void PdlWaitThenRelease() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
}  // namespace dev

// Fills the PDL attribute into attrs[n] when pdl (for launch sites that build their own
// cudaLaunchConfig_t, e.g. with a cluster dimension); returns the new attribute count.
inline unsigned AddPdlAttribute(cudaLaunchAttribute* attrs, unsigned n, bool pdl) {
  if (!pdl) return n;
  attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[n].val.programmaticStreamSerializationAllowed = 1;
  return n + 1;
}

// kernel<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx with n launch
// attributes; returns its error (unchecked).
template <typename... KArgs, typename... Args>
cudaError_t LaunchWithAttrs(cudaLaunchAttribute* attrs, unsigned n, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                            size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx with one launch
// attribute (checked).
template <typename... KArgs, typename... Args>
void LaunchKernelWith(const cudaLaunchAttribute& attr, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attrs[1] = {attr};
  DS_CUDA_CHECK(LaunchWithAttrs(attrs, 1, kernel, grid, block, smem, stream, std::forward<Args>(args)...));
}

// Launches kernel<<<grid, block, smem, stream>>>(args...); with pdl, through cudaLaunchKernelEx
// with cudaLaunchAttributeProgrammaticStreamSerialization = 1 (the kernel must start with
// dev::PdlWaitThenRelease()). Without pdl it is the plain triple-chevron launch the callers used
// before (the default path is unchanged); launch errors are left to DS_CUDA_CHECK_LAUNCH there.
template <typename... KArgs, typename... Args>
void LaunchKernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                  Args&&... args) {
  if (!pdl) {
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchAttribute attr{};
  AddPdlAttribute(&attr, 0, true);
  LaunchKernelWith(attr, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// The launch attribute for clusters of x CTAs (along x).
inline cudaLaunchAttribute ClusterDimAttribute(unsigned x) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = x;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// cudaOccupancyMaxActiveClusters: how many clusters of `cluster` CTAs (along x) of `kernel`, each of
// `threads` threads and `smem` bytes of dynamic shared memory, can be resident at once for a grid of
// `grid` CTAs (0: none can; the caller falls back or refuses). The kernel's max dynamic shared memory
// must already allow `smem`.
template <typename... KArgs>
int MaxActiveClusters(void (*kernel)(KArgs...), unsigned grid, unsigned threads, size_t smem, unsigned cluster) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr = ClusterDimAttribute(cluster);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  DS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  return n;
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a cooperative launch
// (cudaLaunchAttributeCooperative): every block is resident at once, as grid-wide barriers need;
// the grid must fit the device at once (the caller checks its occupancy).
template <typename... KArgs, typename... Args>
void LaunchCooperative(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  LaunchKernelWith(attr, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// The persistent decode kernels' launch (CudaRunnerOptions::persistent_pdl): with pdl, as a
// programmatic dependent launch with the cooperative attribute too (pdl_kernel must start with
// dev::PdlWaitThenRelease()); where the device or driver refuses that pair (a configuration
// error), the process falls back to plain cooperative launches of plain_kernel from then on,
// after one warning naming `who`; any other error is checked. Returns whether it went out with
// PDL. Written in session 14 without a GPU: whether CUDA 13 takes the two attributes together,
// and what it saves, are not yet measured.
inline std::atomic<bool>& CooperativePdlRefused() {  // set once a launch with the pair was refused
  static std::atomic<bool> refused{false};
  return refused;
}
template <typename... KArgs, typename... Args>
bool LaunchCooperativeOrPdl(const char* who, bool pdl, void (*pdl_kernel)(KArgs...), void (*plain_kernel)(KArgs...),
                            dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const Args&... args) {
  if (pdl && !CooperativePdlRefused().load()) {
    cudaLaunchAttribute attrs[2] = {};
    attrs[0].id = cudaLaunchAttributeCooperative;
    attrs[0].val.cooperative = 1;
    AddPdlAttribute(attrs, 1, true);
    const cudaError_t e = LaunchWithAttrs(attrs, 2, pdl_kernel, grid, block, smem, stream, args...);
    if (e == cudaSuccess) return true;
    const bool refusal = e == cudaErrorNotSupported || e == cudaErrorInvalidValue ||
                         e == cudaErrorInvalidConfiguration || e == cudaErrorCooperativeLaunchTooLarge;
    if (!refusal) DS_CUDA_CHECK(e);
    (void)cudaGetLastError();
    CooperativePdlRefused().store(true);
    DS_LOG(WARNING) << who << ": a cooperative launch with PDL was refused (" << cudaGetErrorString(e)
                    << "); persistent kernels launch without PDL from now on";
  }
  LaunchCooperative(plain_kernel, grid, block, smem, stream, args...);
  return false;
}

}  // namespace ds::cuda
