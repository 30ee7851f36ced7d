// The CUDA model runner's weights: checkpoint tensors (bf16 or FP8 with block scales) or seeded
// dummy values, per layer (LoadLayer), in the layouts the kernels take (cuda_runner_impl.h's LayerW).
// Split from cuda_runner.cpp (session 27) to keep each file small.
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/cuda_runner_impl.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_gemm_skinny_sm90.h"
#include "backend/cuda/fp8_quant.h"
#include "backend/cuda/moe_shared_stack.h"
#include "backend/cuda/runner_kernels.h"
#include "common/dtype.h"
#include "common/logging.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace ds::cuda {
namespace runner_impl {
namespace {

constexpr float kDummyStd = 0.02f;

std::vector<uint16_t> ToBf16Bits(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = ::ds::F32ToBf16(v[i]);
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Weights

void CudaModelRunner::FinishLinear(Linear* L, const std::vector<float>* raw_scales) {
  if (!L->fp8) return;
  const int64_t nb = (L->N + 127) / 128, kb = (L->K + 127) / 128, ld = Fp8WeightScaleLd(L->K);
  std::vector<float> raw;
  if (raw_scales) {
    raw = *raw_scales;
  } else {  // dummy: dequantised values uniform in +-kDummyStd * sqrt(3)
    raw.assign(nb * kb, kDummyStd * std::sqrt(3.f) / 448.f);
  }
  std::vector<float> blk(nb * ld, 0.f);
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = 0; j < kb; ++j) blk[i * ld + j] = raw[i * kb + j];
  Upload(&L->s_raw, raw);
  Upload(&L->s_blk, blk);
  if (opts_.fp8_skinny_sm90 && use_cublas_fp8_ && Fp8SkinnyGemmSm90Available()) {
    // The same transposition the kernel's op tests check (Fp8TransposeWeightScales, 64-row form).
    L->s_mn64.Reset(kb * ((L->N + 63) / 64) * sizeof(float));
    Fp8TransposeWeightScales(L->s_raw.as<float>(), kb, L->N, L->K, L->s_mn64.as<float>(), s_, 64);
  }
  if (opts_.fp8_emulate_act_quant) {
    L->w_hi.Reset(L->N * L->K * sizeof(bf16));
    L->w_lo.Reset(L->N * L->K * sizeof(bf16));
    DequantFp8BlocksToBf16Split(L->wq.as<uint8_t>(), L->s_raw.as<float>(), L->N, L->K, L->w_hi.get(), L->w_lo.get(), s_);
  }
}

Status CudaModelRunner::LoadLinear(const std::string& name, int64_t N, int64_t K, Linear* L) {
  L->N = N;
  L->K = K;
  if (dummy_) {
    L->fp8 = cfg_.quant.fp8;
    if (L->fp8) {
      L->wq.Reset(N * K);
      RandomFp8(L->wq.as<uint8_t>(), N * K, NextSeed(), s_);
      FinishLinear(L, nullptr);
    } else {
      L->w.Reset(N * K * sizeof(bf16));
      RandomUniformBf16(L->w.as<bf16>(), N * K, kDummyStd * std::sqrt(3.f), NextSeed(), s_);
    }
    return Status::Ok();
  }
  const TensorView* t = ckpt_->Find(name);
  if (!t) return NotFound("tensor '" + name + "' not found in the checkpoint");
  if (t->dtype == DType::kF8E4M3) {
    if (t->shape != std::vector<int64_t>{N, K})
      return InvalidArgument("tensor '" + name + "' has an unexpected shape");
    L->fp8 = true;
    L->wq.Reset(N * K);
    DS_CUDA_CHECK(cudaMemcpy(L->wq.get(), t->data, N * K, cudaMemcpyHostToDevice));
    const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128;
    DS_ASSIGN_OR_RETURN(std::vector<float> sc, LoadTensorF32(*ckpt_, name + "_scale_inv", {nb, kb}));
    FinishLinear(L, &sc);
    return Status::Ok();
  }
  DS_ASSIGN_OR_RETURN(std::vector<float> w, LoadTensorF32(*ckpt_, name, {N, K}, cfg_.quant.weight_block_size));
  Upload(&L->w, ToBf16Bits(w));
  return Status::Ok();
}

Status CudaModelRunner::LoadBf16(const std::string& name, int64_t N, int64_t K, DeviceBuffer* b) {
  if (dummy_) {
    b->Reset(N * K * sizeof(bf16));
    RandomUniformBf16(b->as<bf16>(), N * K, kDummyStd * std::sqrt(3.f), NextSeed(), s_);
    return Status::Ok();
  }
  DS_ASSIGN_OR_RETURN(std::vector<float> w, LoadTensorF32(*ckpt_, name, {N, K}, cfg_.quant.weight_block_size));
  Upload(b, ToBf16Bits(w));
  return Status::Ok();
}

Status CudaModelRunner::LoadVec(const std::string& name, int64_t n, float dummy_value, DeviceBuffer* b) {
  if (dummy_) {
    b->Reset(n * sizeof(float));
    FillF32(b->as<float>(), n, dummy_value, s_);
    return Status::Ok();
  }
  DS_ASSIGN_OR_RETURN(std::vector<float> v, LoadTensorF32(*ckpt_, name, {n}, cfg_.quant.weight_block_size));
  Upload(b, v);
  return Status::Ok();
}

Status CudaModelRunner::LoadLayer(int l, LayerW* L) {
  const int64_t Hd = cfg_.hidden_size, H = cfg_.num_attention_heads, nope = cfg_.qk_nope_head_dim;
  const int64_t rd = cfg_.qk_rope_head_dim, dqk = nope + rd, vd = cfg_.v_head_dim, kvl = cfg_.kv_lora_rank;
  const int64_t ql = cfg_.q_lora_rank;
  const std::string p = "model.layers." + std::to_string(l);
  DS_RETURN_IF_ERROR(LoadVec(p + ".input_layernorm.weight", Hd, 1.f, &L->in_norm));
  DS_RETURN_IF_ERROR(LoadVec(p + ".post_attention_layernorm.weight", Hd, 1.f, &L->post_norm));
  const std::string a = p + ".self_attn";
  MlaW& m = L->attn;
  if (ql > 0) {
    DS_RETURN_IF_ERROR(LoadLinear(a + ".q_a_proj.weight", ql, Hd, &m.q_a));
    DS_RETURN_IF_ERROR(LoadVec(a + ".q_a_layernorm.weight", ql, 1.f, &m.q_a_norm));
    DS_RETURN_IF_ERROR(LoadLinear(a + ".q_b_proj.weight", H * dqk, ql, &m.q_b));
  } else {
    DS_RETURN_IF_ERROR(LoadLinear(a + ".q_proj.weight", H * dqk, Hd, &m.q));
  }
  DS_RETURN_IF_ERROR(LoadLinear(a + ".kv_a_proj_with_mqa.weight", kvl + rd, Hd, &m.kv_a));
  DS_RETURN_IF_ERROR(LoadVec(a + ".kv_a_layernorm.weight", kvl, 1.f, &m.kv_a_norm));
  DS_RETURN_IF_ERROR(LoadBf16(a + ".kv_b_proj.weight", H * (nope + vd), kvl, &m.kv_b));
  DS_RETURN_IF_ERROR(LoadLinear(a + ".o_proj.weight", Hd, H * vd, &m.o));
  {  // W_UK^T per head: w_uk_t[h][c][d] = kv_b[h * (nope + v) + d][c]
    std::vector<uint16_t> kvb(H * (nope + vd) * kvl), t(H * kvl * nope);
    DS_CUDA_CHECK(cudaStreamSynchronize(s_));
    DS_CUDA_CHECK(cudaMemcpy(kvb.data(), m.kv_b.get(), kvb.size() * 2, cudaMemcpyDeviceToHost));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < nope; ++d)
        for (int64_t c = 0; c < kvl; ++c) t[(h * kvl + c) * nope + d] = kvb[(h * (nope + vd) + d) * kvl + c];
    Upload(&m.w_uk_t, t);
  }
  L->moe = cfg_.is_moe_layer(l);
  const std::string mp = p + ".mlp";
  if (!L->moe) {
    DS_RETURN_IF_ERROR(LoadGateUp(mp, cfg_.intermediate_size, &L->gate_up));
    DS_RETURN_IF_ERROR(LoadLinear(mp + ".down_proj.weight", Hd, cfg_.intermediate_size, &L->down));
    L->has_mlp = true;
    return Status::Ok();
  }
  // MoE layer.
  const int64_t E = cfg_.n_routed_experts, I = cfg_.moe_intermediate_size;
  if (dummy_) {
    L->router.Reset(E * Hd * sizeof(float));
    RandomUniformF32(L->router.as<float>(), E * Hd, kDummyStd * std::sqrt(3.f), NextSeed(), s_);
    if (cfg_.topk_method == TopkMethod::kNoauxTc) {
      L->bias.Reset(E * sizeof(float));
      FillF32(L->bias.as<float>(), E, 0.f, s_);
    }
  } else {
    DS_ASSIGN_OR_RETURN(std::vector<float> r, LoadTensorF32(*ckpt_, mp + ".gate.weight", {E, Hd}));
    Upload(&L->router, r);
    const std::string bn = mp + ".gate.e_score_correction_bias";
    if (ckpt_->Find(bn)) {
      DS_ASSIGN_OR_RETURN(std::vector<float> bv, LoadTensorF32(*ckpt_, bn, {E}));
      Upload(&L->bias, bv);
    } else if (cfg_.topk_method == TopkMethod::kNoauxTc) {
      return NotFound("tensor '" + bn + "' is required by topk_method noaux_tc");
    }
  }
  // Routed experts, stacked.
  const bool fp8 = cfg_.quant.fp8 && (I % 128 == 0);
  L->experts_fp8 = fp8;
  const int64_t nb13 = (2 * I + 127) / 128, kb13 = (Hd + 127) / 128, nb2 = (Hd + 127) / 128, kb2 = (I + 127) / 128;
  const size_t el = fp8 ? 1 : 2;
  const int64_t Es = E + (opts_.fused_moe_shared ? cfg_.n_shared_experts : 0);  // room for stacked shared experts
  L->w13.Reset(Es * 2 * I * Hd * el);
  L->w2.Reset(Es * Hd * I * el);
  if (fp8) {
    L->w13_s.Reset(Es * nb13 * kb13 * sizeof(float));
    L->w2_s.Reset(Es * nb2 * kb2 * sizeof(float));
  }
  if (dummy_) {
    if (fp8) {
      RandomFp8(L->w13.as<uint8_t>(), E * 2 * I * Hd, NextSeed(), s_);
      RandomFp8(L->w2.as<uint8_t>(), E * Hd * I, NextSeed(), s_);
      FillF32(L->w13_s.as<float>(), E * nb13 * kb13, kDummyStd * std::sqrt(3.f) / 448.f, s_);
      FillF32(L->w2_s.as<float>(), E * nb2 * kb2, kDummyStd * std::sqrt(3.f) / 448.f, s_);
    } else {
      RandomUniformBf16(L->w13.as<bf16>(), E * 2 * I * Hd, kDummyStd * std::sqrt(3.f), NextSeed(), s_);
      RandomUniformBf16(L->w2.as<bf16>(), E * Hd * I, kDummyStd * std::sqrt(3.f), NextSeed(), s_);
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = mp + ".experts." + std::to_string(e);
      Linear g, u, d;
      DS_RETURN_IF_ERROR(LoadLinear(ep + ".gate_proj.weight", I, Hd, &g));
      DS_RETURN_IF_ERROR(LoadLinear(ep + ".up_proj.weight", I, Hd, &u));
      DS_RETURN_IF_ERROR(LoadLinear(ep + ".down_proj.weight", Hd, I, &d));
      auto as_bf16 = [&](Linear& x, int64_t N, int64_t K) {
        if (x.fp8) {
          x.w.Reset(N * K * 2);
          DequantFp8ToBf16(x.wq.as<uint8_t>(), x.s_raw.as<float>(), N, K, x.w.as<bf16>(), s_);
        }
      };
      if (fp8) {
        uint8_t* w13 = L->w13.as<uint8_t>() + e * 2 * I * Hd;
        DS_CUDA_CHECK(cudaMemcpyAsync(w13, g.wq.get(), I * Hd, cudaMemcpyDeviceToDevice, s_));
        DS_CUDA_CHECK(cudaMemcpyAsync(w13 + I * Hd, u.wq.get(), I * Hd, cudaMemcpyDeviceToDevice, s_));
        DS_CUDA_CHECK(cudaMemcpyAsync(L->w2.as<uint8_t>() + e * Hd * I, d.wq.get(), Hd * I, cudaMemcpyDeviceToDevice, s_));
        const int64_t half = (I / 128) * kb13;
        float* s13 = L->w13_s.as<float>() + e * nb13 * kb13;
        DS_CUDA_CHECK(cudaMemcpyAsync(s13, g.s_raw.get(), half * 4, cudaMemcpyDeviceToDevice, s_));
        DS_CUDA_CHECK(cudaMemcpyAsync(s13 + half, u.s_raw.get(), half * 4, cudaMemcpyDeviceToDevice, s_));
        DS_CUDA_CHECK(cudaMemcpyAsync(L->w2_s.as<float>() + e * nb2 * kb2, d.s_raw.get(), nb2 * kb2 * 4,
                                      cudaMemcpyDeviceToDevice, s_));
      } else {
        as_bf16(g, I, Hd);
        as_bf16(u, I, Hd);
        as_bf16(d, Hd, I);
        bf16* w13 = L->w13.as<bf16>() + e * 2 * I * Hd;
        DS_CUDA_CHECK(cudaMemcpyAsync(w13, g.w.get(), I * Hd * 2, cudaMemcpyDeviceToDevice, s_));
        DS_CUDA_CHECK(cudaMemcpyAsync(w13 + I * Hd, u.w.get(), I * Hd * 2, cudaMemcpyDeviceToDevice, s_));
        DS_CUDA_CHECK(cudaMemcpyAsync(L->w2.as<bf16>() + e * Hd * I, d.w.get(), Hd * I * 2, cudaMemcpyDeviceToDevice, s_));
      }
      DS_CUDA_CHECK(cudaStreamSynchronize(s_));  // before the temporaries go
    }
  }
  if (cfg_.n_shared_experts > 0) {
    const int64_t Is = I * cfg_.n_shared_experts;
    const std::string sp = mp + ".shared_experts";
    DS_RETURN_IF_ERROR(LoadGateUp(sp, Is, &L->gate_up));
    DS_RETURN_IF_ERROR(LoadLinear(sp + ".down_proj.weight", Hd, Is, &L->down));
    L->has_mlp = true;
    if (opts_.fused_moe_shared) StackSharedExperts(L);
  }
  return Status::Ok();
}

void CudaModelRunner::StackSharedExperts(LayerW* L) {
  const int64_t Is = cfg_.n_shared_experts * cfg_.moe_intermediate_size;
  const bool fp8 = L->experts_fp8;
  if (L->gate_up.fp8 != fp8 || L->down.fp8 != fp8 || L->gate_up.N != 2 * Is || L->down.K != Is) {
    DS_LOG(WARNING) << "cuda runner: shared experts not stacked with the routed ones (dtype or shape differs); "
                    << "fused_moe_shared is off for this layer";
    return;
  }
  ds::cuda::StackSharedExperts({cfg_.n_routed_experts, cfg_.n_shared_experts, cfg_.moe_intermediate_size, cfg_.hidden_size, fp8,
                                fp8 ? L->gate_up.wq.get() : L->gate_up.w.get(),
                                fp8 ? L->gate_up.s_raw.as<float>() : nullptr,
                                fp8 ? L->down.wq.get() : L->down.w.get(), fp8 ? L->down.s_raw.as<float>() : nullptr,
                                L->w13.get(), fp8 ? L->w13_s.as<float>() : nullptr, L->w2.get(),
                                fp8 ? L->w2_s.as<float>() : nullptr, s_});
  L->shared_groups = static_cast<int>(cfg_.n_shared_experts);
}

Status CudaModelRunner::LoadGateUp(const std::string& prefix, int64_t I, Linear* gu) {
  const int64_t Hd = cfg_.hidden_size;
  Linear g, u;
  DS_RETURN_IF_ERROR(LoadLinear(prefix + ".gate_proj.weight", I, Hd, &g));
  DS_RETURN_IF_ERROR(LoadLinear(prefix + ".up_proj.weight", I, Hd, &u));
  gu->N = 2 * I;
  gu->K = Hd;
  gu->fp8 = g.fp8 && (I % 128 == 0);
  if (g.fp8 && !gu->fp8) {  // the block grid would straddle gate/up: keep bf16
    g.w.Reset(I * Hd * sizeof(bf16));
    u.w.Reset(I * Hd * sizeof(bf16));
    DequantFp8ToBf16(g.wq.as<uint8_t>(), g.s_raw.as<float>(), I, Hd, g.w.as<bf16>(), s_);
    DequantFp8ToBf16(u.wq.as<uint8_t>(), u.s_raw.as<float>(), I, Hd, u.w.as<bf16>(), s_);
  }
  if (gu->fp8) {
    gu->wq.Reset(2 * I * Hd);
    DS_CUDA_CHECK(cudaMemcpyAsync(gu->wq.get(), g.wq.get(), I * Hd, cudaMemcpyDeviceToDevice, s_));
    DS_CUDA_CHECK(cudaMemcpyAsync(gu->wq.as<uint8_t>() + I * Hd, u.wq.get(), I * Hd, cudaMemcpyDeviceToDevice, s_));
    const int64_t nb = I / 128, kb = (Hd + 127) / 128;
    std::vector<float> sg(nb * kb), su(nb * kb);
    DS_CUDA_CHECK(cudaStreamSynchronize(s_));
    DS_CUDA_CHECK(cudaMemcpy(sg.data(), g.s_raw.get(), sg.size() * 4, cudaMemcpyDeviceToHost));
    DS_CUDA_CHECK(cudaMemcpy(su.data(), u.s_raw.get(), su.size() * 4, cudaMemcpyDeviceToHost));
    sg.insert(sg.end(), su.begin(), su.end());
    FinishLinear(gu, &sg);
  } else {
    gu->w.Reset(2 * I * Hd * sizeof(bf16));
    DS_CUDA_CHECK(cudaMemcpyAsync(gu->w.get(), g.w.get(), I * Hd * 2, cudaMemcpyDeviceToDevice, s_));
    DS_CUDA_CHECK(cudaMemcpyAsync(gu->w.as<bf16>() + I * Hd, u.w.get(), I * Hd * 2, cudaMemcpyDeviceToDevice, s_));
  }
  DS_CUDA_CHECK(cudaStreamSynchronize(s_));  // before the temporaries go
  return Status::Ok();
}

}  // namespace runner_impl
}  // namespace ds::cuda
