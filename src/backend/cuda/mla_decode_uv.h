// The W_UV epilogue of absorbed-MLA decode (MlaDecodeParams::uv_w; math and contract in
// mla_decode.h): the final merge of the split partials fused with the per-head value
// up-projection. Internal to the decode paths (mla_decode.cu, mla_decode_tc.cu,
// mla_decode_sm90.cu), which launch it in place of their combine kernel.
#pragma once

#include "backend/cuda/mla_decode.h"

namespace ds::cuda {

// DS_CHECKs the uv fields of p (kv_lora 512, uv_n >= 1, uv_ld >= 512 and a multiple of 8, uv_w
// 16-byte aligned, uv_out set, uv_tok_stride >= heads * uv_n, a 16-byte aligned workspace).
void CheckMlaDecodeUv(const MlaDecodeParams& p);

// Merges the max_splits partials of every (token, head) in p.workspace (the combine kernels'
// layout: fp32 partials [T, H, max_splits, 512], then LSE [T, H, max_splits], empty splits with
// LSE -inf skipped), rounds the merged latent output to bf16 and writes o_h to p.uv_out. Grid
// (T, H, parts): each of a head's 1, 2 or 4 parts merges the head (the combine's arithmetic in
// its order) and projects uv_n / parts rows of W_UV_h. divide: finish the merge as the CUDA-core
// path's combine does (acc / sum of weights) instead of the tensor-core paths' acc * (1 / sum), so
// o_lat is the bf16 value the replaced combine would have stored. Does not synchronise.
void MlaDecodeCombineUv(const MlaDecodeParams& p, int max_splits, bool divide = false);

}  // namespace ds::cuda
