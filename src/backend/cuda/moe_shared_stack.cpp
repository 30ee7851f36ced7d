#include "backend/cuda/moe_shared_stack.h"

#include "backend/cuda/cuda_check.h"

namespace ds::cuda {

void StackSharedExperts(const SharedExpertStackParams& p) {
  const int64_t E = p.E, S = p.S, I = p.I, H = p.H, Is = S * I;
  DS_CHECK(S > 0 && I > 0 && H > 0 && E >= 0) << "StackSharedExperts: bad shape";
  DS_CHECK(!p.fp8 || (I % 128 == 0 && p.gate_up_scales && p.down_scales && p.w13_scales && p.w2_scales))
      << "StackSharedExperts: FP8 needs I % 128 == 0 and block scales";
  const size_t el = p.fp8 ? 1 : 2;
  const char* gu = static_cast<const char*>(p.gate_up);
  const char* dn = static_cast<const char*>(p.down);
  const int64_t nb13 = (2 * I + 127) / 128, kb13 = (H + 127) / 128, nb2 = (H + 127) / 128, kb2 = (I + 127) / 128;
  for (int64_t s = 0; s < S; ++s) {
    char* w13 = static_cast<char*>(p.w13) + (E + s) * 2 * I * H * el;
    DS_CUDA_CHECK(cudaMemcpyAsync(w13, gu + s * I * H * el, I * H * el, cudaMemcpyDeviceToDevice, p.stream));
    DS_CUDA_CHECK(cudaMemcpyAsync(w13 + I * H * el, gu + (Is + s * I) * H * el, I * H * el, cudaMemcpyDeviceToDevice,
                                  p.stream));
    char* w2 = static_cast<char*>(p.w2) + (E + s) * H * I * el;
    DS_CUDA_CHECK(cudaMemcpy2DAsync(w2, I * el, dn + s * I * el, Is * el, I * el, H, cudaMemcpyDeviceToDevice, p.stream));
    if (p.fp8) {  // the same row / column slices, in 128-blocks
      const int64_t ib = I / 128, isb = Is / 128;
      float* s13 = p.w13_scales + (E + s) * nb13 * kb13;
      DS_CUDA_CHECK(cudaMemcpyAsync(s13, p.gate_up_scales + s * ib * kb13, ib * kb13 * 4, cudaMemcpyDeviceToDevice,
                                    p.stream));
      DS_CUDA_CHECK(cudaMemcpyAsync(s13 + ib * kb13, p.gate_up_scales + (isb + s * ib) * kb13, ib * kb13 * 4,
                                    cudaMemcpyDeviceToDevice, p.stream));
      DS_CUDA_CHECK(cudaMemcpy2DAsync(p.w2_scales + (E + s) * nb2 * kb2, kb2 * 4, p.down_scales + s * ib, isb * 4,
                                      kb2 * 4, nb2, cudaMemcpyDeviceToDevice, p.stream));
    }
  }
}

}  // namespace ds::cuda
