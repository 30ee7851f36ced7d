// MLA decode's bf16 output (MlaDecodeParams::out_type kBF16), the contract the runner's
// fused_olat relies on: on every decode path, the bf16 output is exactly the round-to-nearest-
// even of the fp32 output of the same launch parameters (bit for bit), i.e. what SplitBf16 makes
// of the fp32 output. Paths: the CUDA-core kernel + combine, the emulation of the tc rounding
// (CUDA-core), the tensor-core row-tile kernel + combine (fast io on / off), the warp-split
// kernel with several splits (combine), with one split (written by the kernel itself), its
// 3-pair configuration, its fused combine and its cluster merge, and the sm_90a kernel (all
// three variants; several splits + combine, one split written directly; on sm_90 devices only).
// Inputs, workspace and outputs as test_mla_decode.cpp (NaN in unreadable cache rows, poisoned
// outputs and workspaces). Not yet run on the GPU (written without a device).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/mla_decode.h"
#include "common/dtype.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

struct Path {
  const char* name;
  bool tc = false;
  int tc_kernel = 0, tc_fast_io = 0, tc_stages = 0, fused_combine = 0, cluster_merge = 0, emulate = 0;
  bool sm90 = false;
  int sm90_variant = 0;
};

const Path kPaths[] = {
    {"cudacore"},
    {"emulate_tc", false, 0, 0, 0, 0, 0, 3},
    {"tc_default", true},
    {"tc_rowtile", true, 1},
    {"tc_rowtile_fastio_off", true, 1, -1},
    {"tc_ws_stages3", true, 0, 0, 3},
    {"tc_ws_fused_combine", true, 0, 0, 0, 1},
    {"tc_ws_cluster_merge", true, 0, 0, 0, 0, 1},
    {"sm90_v0", true, 0, 0, 0, 0, 0, 0, true, 0},
    {"sm90_v1", true, 0, 0, 0, 0, 0, 0, true, 1},
    {"sm90_v2", true, 0, 0, 0, 0, 0, 0, true, 2},
};

void RunCase(const std::vector<int32_t>& ctx, const std::vector<int32_t>& qlen, int64_t H, int64_t kvl, int64_t rope,
             int64_t chunk, const std::string& name) {
  const int64_t L = kvl + rope, bs = 64;
  const PagedDecodeCase pc = MakePagedDecodeCase(ctx, qlen, bs, L);
  const int64_t S = pc.S, T = pc.T, n = T * H * kvl;
  const auto q = RandomNormal(T * H * L, 0.3f);
  Dev<float> dq(q);
  Dev<__nv_bfloat16> dc(ToBf16(pc.cache));
  Dev<int32_t> dqs(pc.qs), dctx(ctx), dtab(pc.table);
  Dev<uint32_t> cnt(S);
  DS_CUDA_CHECK(cudaMemset(cnt.get(), 0, S * sizeof(uint32_t)));  // fused combine: zeroed once
  for (const Path& path : kPaths) {
    MlaDecodeParams p{};
    p.q = dq.get(); p.q_tok_stride = H * L; p.q_head_stride = L;
    p.cache = dc.get(); p.num_tokens = T; p.num_seqs = S; p.heads = H; p.kv_lora = kvl; p.rope_dim = rope;
    p.block_size = bs; p.query_start = dqs.get(); p.context_lens = dctx.get(); p.block_table = dtab.get();
    p.max_blocks = pc.max_blocks; p.max_context = pc.max_ctx; p.kv_chunk = chunk; p.softmax_scale = 0.1352f;
    p.o_tok_stride = H * kvl; p.o_head_stride = kvl;
    p.total_context = pc.total_ctx; p.max_q_len = pc.max_q;  // the runner's hints
    p.tensor_cores = path.tc; p.tc_kernel = path.tc_kernel; p.tc_fast_io = path.tc_fast_io;
    p.tc_stages = path.tc_stages; p.tc_cluster_merge = path.cluster_merge; p.emulate_tc_rounding = path.emulate;
    p.tc_fused_combine = path.fused_combine; p.split_counters = cnt.get(); p.split_counter_count = S;
    p.sm90 = path.sm90; p.sm90_variant = path.sm90_variant; p.cache_rows = pc.num_blocks * bs;
    const bool tc_ok = MlaDecodeTcSupported(kvl, rope, bs);
    if (path.tc && !tc_ok) continue;  // the CUDA-core kernel, as "cudacore"
    if (path.sm90 && !MlaDecodeSm90Selected(p)) {
      std::printf("[info] case=%s path=%s skipped: the sm_90a kernel is not selected here (device or < 64 rows)\n",
                  name.c_str(), path.name);
      continue;
    }
    const int64_t ws_floats = MlaDecodeWorkspaceFloats(T, H, kvl, pc.max_ctx, chunk);
    Dev<float> ws32(ws_floats), out32(n);  // poisoned (NaN)
    p.workspace = ws32.get(); p.out = out32.get(); p.out_type = DTypeOut::kF32;
    MlaDecodeAttention(p);
    DS_CUDA_CHECK(cudaGetLastError());
    const std::vector<float> f32 = out32.Download();
    Dev<float> ws16(ws_floats);  // poisoned (NaN)
    Dev<__nv_bfloat16> out16(n);
    p.workspace = ws16.get(); p.out = out16.get(); p.out_type = DTypeOut::kBF16;
    MlaDecodeAttention(p);
    DS_CUDA_CHECK(cudaGetLastError());
    const std::vector<__nv_bfloat16> b16 = out16.Download();
    int64_t mismatches = 0, nonfinite = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t got;
      std::memcpy(&got, static_cast<const void*>(&b16[i]), 2);
      nonfinite += !std::isfinite(f32[i]);
      mismatches += got != F32ToBf16(f32[i]);  // round-to-nearest-even (common/dtype.h)
    }
    const bool pass = mismatches == 0 && nonfinite == 0;
    std::printf("[metric] op=mla_decode_bf16_out path=%s case=%s n=%lld mismatches_vs_rn_of_f32=%lld nonfinite=%lld "
                "bound=bitwise%s\n",
                path.name, name.c_str(), (long long)n, (long long)mismatches, (long long)nonfinite,
                pass ? " PASS" : " FAIL");
    EXPECT_EQ(nonfinite, 0) << path.name << " " << name;
    EXPECT_EQ(mismatches, 0) << path.name << " " << name << ": bf16 output is not RN(fp32 output)";
  }
  const auto c = cnt.Download();
  for (uint32_t v : c) EXPECT_EQ(v, 0u) << name << ": fused-combine counters not reset";
}

TEST(CudaMlaDecodeBf16Out, IsRoundToNearestOfF32) {
  // 16 heads (V2-Lite, TP8): warp-split with many splits, one split (direct), 8 splits (cluster
  // merge), MTP rows; the small-batch 64-key chunk.
  RunCase({20000}, {1}, 16, 512, 64, 256, "h16_batch1_20K");
  RunCase({1, 5, 64, 65, 200, 333, 3}, {1, 1, 1, 1, 1, 1, 1}, 16, 512, 64, 256, "h16_one_split_direct");
  RunCase({4096, 100, 3000, 4000}, {1, 1, 1, 1}, 16, 512, 64, 256, "h16_8splits_mixed");
  RunCase({1024}, {1}, 16, 512, 64, 64, "h16_batch1_1K_chunk64");
  RunCase({700, 64, 3, 129}, {2, 2, 2, 2}, 8, 512, 64, 256, "h8_mtp_qlen2");
  // 128 heads (V3): the sm_90a kernel with splits + combine, one split (direct), MTP; 3 heads
  // (v3_mla512_tiny); small dims (the CUDA-core kernel only).
  RunCase({1, 63, 64, 65, 1000, 5000}, {1, 1, 1, 1, 1, 1}, 128, 512, 64, 256, "h128_mixed_ctx");
  RunCase({100}, {1}, 128, 512, 64, 256, "h128_one_split");
  RunCase({2, 130, 4097}, {2, 2, 2}, 128, 512, 64, 256, "h128_mtp_qlen2");
  RunCase({300, 20, 9}, {1, 1, 9}, 3, 512, 64, 64, "h3_mla512");
  RunCase({5, 40, 230}, {1, 2, 1}, 4, 48, 16, 64, "h4_kvl48_cudacore");
}

}  // namespace
}  // namespace ds::cuda::test
