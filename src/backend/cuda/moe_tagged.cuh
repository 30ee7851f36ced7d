// Device helpers shared by the batch-1 MoE kernels (moe_persistent.cu, moe_ring.cu): the gate_up
// output's SiLU-and-mul rounding, and the router_tagged words (MoePersistentParams::router_tagged,
// session 31). Device code: include only from .cu files.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

namespace ds::cuda::moe_dev {

// bf16(silu(g) * u): the gate_up tiles' output (MoePersistent, MoeRing).
__device__ __forceinline__ __nv_bfloat16 SiluMul(float g, float u) { return __float2bfloat16_rn(g / (1.0f + expf(-g)) * u); }

// router_tagged (MoePersistentParams): a router logit and its launch's tag in one 64-bit word
// (tag << 32 | the fp32 bits), stored and loaded whole (single-copy atomic: a reader sees the value
// with its own tag), relaxed (no other data rides on it).
__device__ __forceinline__ void StTagged(uint64_t* w, uint32_t tag, float v) {
  const uint64_t word = (uint64_t{tag} << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(w), "l"(word) : "memory");
}
// The same for 32 bits of any payload (MoeRing's act_tagged: a pair of bf16 act values).
__device__ __forceinline__ void StTaggedBits(uint64_t* w, uint32_t tag, uint32_t bits) {
  const uint64_t word = (uint64_t{tag} << 32) | bits;
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(w), "l"(word) : "memory");
}
__device__ __forceinline__ uint64_t LdTaggedWord(const uint64_t* w) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(w) : "memory");
  return v;
}
// Warp: lane's words for experts lane and lane + 32 (E <= 64; past E: left as they are).
__device__ __forceinline__ void LdTagged(const uint64_t* w, int E, uint64_t& w0, uint64_t& w1) {
  const int lane = threadIdx.x & 31;
  if (lane < E) w0 = LdTaggedWord(w + lane);
  if (lane + 32 < E) w1 = LdTaggedWord(w + lane + 32);
}
// Warp: polls until every expert's word carries `tag` (words loaded earlier are checked first),
// then x = the logits (-inf past E), as RouteTokenInWarp<2> loads them.
__device__ __forceinline__ void PollTagged(const uint64_t* w, int E, uint32_t tag, uint64_t& w0, uint64_t& w1,
                                           float (&x)[2]) {
  const int lane = threadIdx.x & 31;
  const auto ok = [&](uint64_t v, int e) { return e >= E || static_cast<uint32_t>(v >> 32) == tag; };
  while (!__all_sync(0xffffffffu, ok(w0, lane) && ok(w1, lane + 32))) {
    if (!ok(w0, lane)) w0 = LdTaggedWord(w + lane);
    if (!ok(w1, lane + 32)) w1 = LdTaggedWord(w + lane + 32);
  }
  x[0] = lane < E ? __uint_as_float(static_cast<uint32_t>(w0)) : -INFINITY;
  x[1] = lane + 32 < E ? __uint_as_float(static_cast<uint32_t>(w1)) : -INFINITY;
}

}  // namespace ds::cuda::moe_dev
