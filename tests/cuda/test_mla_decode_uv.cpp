// MLA decode with the W_UV epilogue (MlaDecodeParams::uv_w, opt-in; the runner's fused_uv): the
// decode's final merge rounds the merged latent output o_lat to bf16 (what out_type kBF16 would
// store) and writes o_h[t, h, n] = sum_k o_lat[t, h, k] * W_UV_h[n, k] (fp32 sums) to uv_out
// instead of o_lat to `out`.
//
// Per case and decode path, the same inputs run twice:
//  (a) without the epilogue, out_type kBF16 (o_lat as the runner's fused_olat path stores it);
//  (b) with uv_w: a random bf16 weight laid out as DeepSeek's kv_b_proj (per head nope + v rows
//      of kv_lora; W_UK = rows 0 .. nope - 1, filled with NaN here so a read of a wrong row
//      fails the non-finite check; W_UV = rows nope .. nope + v - 1, the epilogue's uv_w =
//      base + nope * kv_lora, uv_head_stride (nope + v) * kv_lora, uv_ld kv_lora, uv_n v), fp32
//      and bf16 uv_out, token stride H * v + 40 (40 poisoned padding elements per token).
// Checks of (b) against the host reference o_ref[t, h, n] = sum_k double(o_lat_a[t, h, k]) *
// double(W_UV_h[n, k]) (the epilogue's o_lat is documented to equal (a)'s bf16 output):
//  - relative L2 <= 2e-6 with fp32 uv_out (fp32 sums of 512 products), <= 5e-3 with bf16;
//  - no non-finite values; bf16 uv_out equal to the RN rounding of the fp32 uv_out (bitwise:
//    the same fp32 sums, "stored as bf16 (RN)");
//  - `out` (poisoned with 0xFF bytes, NaN) is not written, nor the padding of uv_out's rows;
//  - with uv_preload (session 29) the same bits as without it.
// Paths: the tensor-core row-tile kernel (tc_kernel 1), the warp-split kernel (tc_kernel 0 with
// 16 query rows; several splits + combine, and one split written directly), the CUDA-core
// kernel (tensor_cores off), 16 heads x 2 query tokens (MTP: the row-tile kernel by shape) and
// the sm_90a kernel (128 heads, sm90 on). CudaMlaDecodeUv.GraphReplayEqualsEager captures a uv
// launch in a CUDA graph on a non-blocking stream: two replays bitwise equal to the eager run.
// Skipped without an sm_90 device (the build targets sm_90a only). Not yet run on the GPU
// (written without a device).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/mla_decode.h"
#include "common/dtype.h"
#include "test_util.h"

namespace ds::cuda::test {
namespace {

constexpr int64_t kKvl = 512, kRope = 64, kL = kKvl + kRope, kBs = 64;
constexpr int64_t kNope = 128, kV = 128, kPad = 40;  // uv_out row padding (elements per token)
constexpr float kScale = 0.1352f;

struct Path {
  const char* name;
  bool tc = true;
  int tc_kernel = 0;
  bool sm90 = false;
};

// kv_b_proj's weight [H, nope + v, kv_lora], bf16-rounded normals; the W_UK rows (0 .. nope - 1
// of each head) NaN: the epilogue must read only W_UV.
std::vector<float> MakeKvB(int64_t H) {
  std::vector<float> w = RoundBf16Vec(RandomNormal(H * (kNope + kV) * kKvl, 0.05f));
  for (int64_t h = 0; h < H; ++h)
    std::fill(w.begin() + h * (kNope + kV) * kKvl, w.begin() + (h * (kNope + kV) + kNope) * kKvl,
              std::numeric_limits<float>::quiet_NaN());
  return w;
}

// One case's inputs on the host and the device: the paged cache, q, and kv_b_proj's weight.
struct UvCase {
  PagedDecodeCase pc;
  std::vector<int32_t> ctx;
  int64_t H = 0;
  std::vector<float> q, w;
  Dev<float> dq;
  Dev<__nv_bfloat16> dc, dw;
  Dev<int32_t> dqs, dctx, dtab;
  UvCase(const std::vector<int32_t>& c, const std::vector<int32_t>& qlen, int64_t heads)
      : pc(MakePagedDecodeCase(c, qlen, kBs, kL)), ctx(c), H(heads), q(RandomNormal(pc.T * heads * kL, 0.3f)),
        w(MakeKvB(heads)), dq(q), dc(ToBf16(pc.cache)), dw(ToBf16(w)), dqs(pc.qs), dctx(ctx), dtab(pc.table) {}
  const __nv_bfloat16* UvW() const { return dw.get() + kNope * kKvl; }
  int64_t TokStride() const { return H * kV + kPad; }
};

MlaDecodeParams BaseParams(const UvCase& c, const Path& path) {
  MlaDecodeParams p{};
  p.q = c.dq.get(); p.q_tok_stride = c.H * kL; p.q_head_stride = kL;
  p.cache = c.dc.get(); p.num_tokens = c.pc.T; p.num_seqs = c.pc.S; p.heads = c.H; p.kv_lora = kKvl;
  p.rope_dim = kRope; p.block_size = kBs; p.query_start = c.dqs.get(); p.context_lens = c.dctx.get();
  p.block_table = c.dtab.get(); p.max_blocks = c.pc.max_blocks; p.max_context = c.pc.max_ctx; p.kv_chunk = 256;
  p.softmax_scale = kScale; p.o_tok_stride = c.H * kKvl; p.o_head_stride = kKvl; p.out_type = DTypeOut::kBF16;
  p.total_context = c.pc.total_ctx; p.max_q_len = c.pc.max_q;  // the runner's hints
  p.tensor_cores = path.tc; p.tc_kernel = path.tc_kernel; p.sm90 = path.sm90;
  p.cache_rows = c.pc.num_blocks * kBs;
  return p;
}
void SetUv(const UvCase& c, bool bf16, void* uv_out, MlaDecodeParams* p) {
  p->uv_w = c.UvW(); p->uv_head_stride = (kNope + kV) * kKvl; p->uv_ld = kKvl; p->uv_n = kV;
  p->uv_out = uv_out; p->uv_tok_stride = c.TokStride(); p->uv_out_bf16 = bf16;
}

// Elements of v[begin, end) whose bytes are not all 0xFF (the Dev poison): written.
template <class T>
int64_t Written(const std::vector<T>& v, size_t begin, size_t end) {
  int64_t n = 0;
  for (size_t i = begin; i < end; ++i) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&v[i]);
    bool poison = true;
    for (size_t j = 0; j < sizeof(T); ++j) poison = poison && b[j] == 0xFF;
    n += !poison;
  }
  return n;
}
float ToF(float x) { return x; }
float ToF(__nv_bfloat16 x) {
  uint16_t b;
  std::memcpy(&b, static_cast<const void*>(&x), 2);
  return Bf16ToF32(b);
}

// uv_out rows [T, tok_stride] -> the [T, H, v] values; counts written padding elements.
template <class T>
std::vector<float> Unpad(const std::vector<T>& raw, int64_t Tn, int64_t H, int64_t tok_stride, int64_t* pad_written) {
  std::vector<float> o(Tn * H * kV);
  *pad_written = 0;
  for (int64_t t = 0; t < Tn; ++t) {
    for (int64_t i = 0; i < H * kV; ++i) o[t * H * kV + i] = ToF(raw[t * tok_stride + i]);
    *pad_written += Written(raw, t * tok_stride + H * kV, (t + 1) * tok_stride);
  }
  return o;
}

// Host reference from (a)'s bf16 o_lat, double sums.
std::vector<float> UvRef(const UvCase& c, const std::vector<float>& olat) {
  const int64_t Tn = c.pc.T, H = c.H;
  std::vector<float> ref(Tn * H * kV);
  ParallelFor(Tn * H, [&](int64_t th) {
    const int64_t h = th % H;
    const float* o = olat.data() + th * kKvl;
    for (int64_t n = 0; n < kV; ++n) {
      const float* wr = c.w.data() + (h * (kNope + kV) + kNope + n) * kKvl;
      double s = 0;
      for (int64_t k = 0; k < kKvl; ++k) s += double(o[k]) * double(wr[k]);
      ref[th * kV + n] = static_cast<float>(s);
    }
  });
  return ref;
}

// Runs (b) with the given uv_out type; returns [T, H, v] as floats (checks `out` / padding).
template <class T>
std::vector<float> RunUv(const UvCase& c, MlaDecodeParams p, const std::string& cas) {
  const int64_t Tn = c.pc.T, H = c.H;
  Dev<float> ws(MlaDecodeWorkspaceFloats(Tn, H, kKvl, c.pc.max_ctx, p.kv_chunk));  // poisoned
  Dev<__nv_bfloat16> out(Tn * H * kKvl);                                          // poisoned
  Dev<T> uv(Tn * c.TokStride());                                                  // poisoned
  p.workspace = ws.get(); p.out = out.get();
  SetUv(c, sizeof(T) == 2, uv.get(), &p);
  MlaDecodeAttention(p);
  DS_CUDA_CHECK(cudaGetLastError());
  const auto o = out.Download();
  const int64_t out_written = Written(o, 0, o.size());
  int64_t pad_written = 0;
  const auto got = Unpad(uv.Download(), Tn, H, c.TokStride(), &pad_written);
  const bool pass = out_written == 0 && pad_written == 0;
  std::printf("[metric] op=mla_decode_uv case=%s_untouched out_written=%lld pad_written=%lld bound=0%s\n", cas.c_str(),
              (long long)out_written, (long long)pad_written, pass ? " PASS" : " FAIL");
  EXPECT_EQ(out_written, 0) << cas << ": `out` (o_lat) written with uv_w set";
  EXPECT_EQ(pad_written, 0) << cas << ": uv_out written past [T, H, uv_n]";
  return got;
}

void RunCase(const std::vector<int32_t>& ctx, const std::vector<int32_t>& qlen, int64_t H, const std::string& name,
             const std::vector<Path>& paths, bool one_split = false) {
  const UvCase c(ctx, qlen, H);
  const int64_t Tn = c.pc.T;
  for (const Path& path : paths) {
    const std::string cas = name + "_" + path.name;
    MlaDecodeParams p = BaseParams(c, path);
    if (path.sm90) { ASSERT_TRUE(MlaDecodeSm90Selected(p)) << cas << ": the sm_90a kernel is not selected"; }
    if (path.tc && !path.sm90) {
      int tile = 0;
      const int64_t chunk = MlaDecodeTcChunk(p, &tile);
      const bool ws = tile == 16;  // warp-split (16-key tiles); row-tile 32
      const int64_t splits = (c.pc.max_ctx + chunk * (ws ? 2 : 1) - 1) / (chunk * (ws ? 2 : 1));
      std::printf("[plan] case=%s kernel=%s chunk=%lld splits=%lld\n", cas.c_str(), ws ? "warp-split" : "row-tile",
                  (long long)chunk, (long long)splits);
      if (path.tc_kernel == 1) { EXPECT_FALSE(ws) << cas << ": tc_kernel 1 must take the row-tile kernel"; }
      if (one_split) { EXPECT_EQ(splits, 1) << cas << ": expected one split (the direct write)"; }
    }
    // (a) o_lat, bf16, no epilogue.
    std::vector<float> olat;
    {
      Dev<float> ws(MlaDecodeWorkspaceFloats(Tn, H, kKvl, c.pc.max_ctx, p.kv_chunk));
      Dev<__nv_bfloat16> out(Tn * H * kKvl);
      MlaDecodeParams pa = p;
      pa.workspace = ws.get(); pa.out = out.get();
      MlaDecodeAttention(pa);
      DS_CUDA_CHECK(cudaGetLastError());
      olat = FromBf16(out.Download());
    }
    int64_t olat_bad = 0;
    for (float x : olat) olat_bad += !std::isfinite(x);
    ASSERT_EQ(olat_bad, 0) << cas << ": (a) o_lat has non-finite values";
    const auto ref = UvRef(c, olat);
    // (b) with the epilogue: fp32 and bf16 uv_out.
    const auto got32 = RunUv<float>(c, p, cas + "_f32");
    const auto got16 = RunUv<__nv_bfloat16>(c, p, cas + "_bf16");
    ExpectClose("mla_decode_uv", cas + "_f32", got32, ref, 2e-6);
    ExpectClose("mla_decode_uv", cas + "_bf16", got16, ref, 5e-3);
    int64_t mism = 0;
    for (size_t i = 0; i < got16.size(); ++i) mism += RoundBf16(got32[i]) != got16[i] || !std::isfinite(got16[i]);
    std::printf("[metric] op=mla_decode_uv case=%s_bf16_vs_rn_f32 n=%zu mismatches=%lld bound=bitwise%s\n",
                cas.c_str(), got16.size(), (long long)mism, mism == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(mism, 0) << cas << ": bf16 uv_out is not RN(fp32 uv_out)";
    // uv_preload (session 29): the merge kernel's first W_UV rows loaded before its merge: the same bits.
    MlaDecodeParams pp = p;
    pp.uv_preload = true;
    const int64_t pre32 = BitMismatches(RunUv<float>(c, pp, cas + "_f32_preload"), got32);
    const int64_t pre16 = BitMismatches(RunUv<__nv_bfloat16>(c, pp, cas + "_bf16_preload"), got16);
    std::printf("[metric] op=mla_decode_uv case=%s_preload f32_bits=%lld bf16_bits=%lld bound=0%s\n", cas.c_str(),
                (long long)pre32, (long long)pre16, pre32 == 0 && pre16 == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(pre32, 0) << cas << ": uv_preload changed the fp32 uv_out";
    EXPECT_EQ(pre16, 0) << cas << ": uv_preload changed the bf16 uv_out";
  }
}

const Path kRowTile{"rowtile", true, 1};
const Path kByShape{"tc_by_shape", true, 0};
const Path kCudaCore{"cudacore", false, 0};

TEST(CudaMlaDecodeUv, V2LiteRowTile) {
  DS_SKIP_WITHOUT_SM90();
  RunCase({1000}, {1}, 16, "h16_b1_1000", {kRowTile});
}

TEST(CudaMlaDecodeUv, V2LiteBatch3WarpSplitAndRowTile) {
  DS_SKIP_WITHOUT_SM90();
  RunCase({37, 700, 2100}, {1, 1, 1}, 16, "h16_b3_37_700_2100", {kByShape, kRowTile});
}

TEST(CudaMlaDecodeUv, OneSplitDirect) {
  DS_SKIP_WITHOUT_SM90();
  // One split per sequence: the warp-split kernel writes the output itself (no combine).
  RunCase({40}, {1}, 16, "h16_b1_40_one_split", {kByShape, kRowTile, kCudaCore}, /*one_split=*/true);
}

TEST(CudaMlaDecodeUv, V3Sm90) {
  DS_SKIP_WITHOUT_SM90();
  MlaDecodeParams probe{};
  probe.kv_lora = kKvl; probe.rope_dim = kRope; probe.block_size = kBs; probe.heads = 128;
  probe.sm90 = true; probe.tensor_cores = true;
  if (!MlaDecodeSm90Supported(probe)) GTEST_SKIP() << "the sm_90a MLA decode kernel is not supported here";
  RunCase({1024, 333}, {1, 1}, 128, "h128_b2_1024_333", {{"sm90", true, 0, true}});
  // Batch 1 at 4,100 keys (session 35): many splits, the merge's loads in several rounds of 16.
  RunCase({4100}, {1}, 128, "h128_b1_4100", {{"sm90", true, 0, true}});
}

TEST(CudaMlaDecodeUv, V2LiteCudaCore) {
  DS_SKIP_WITHOUT_SM90();
  RunCase({300, 1500}, {1, 1}, 16, "h16_b2_300_1500", {kCudaCore});
}

TEST(CudaMlaDecodeUv, MtpQlen2) {
  DS_SKIP_WITHOUT_SM90();
  // 2 sequences x 2 query tokens (query_start {0, 2, 4}; causal inside the query block).
  RunCase({500, 90}, {2, 2}, 16, "h16_mtp_q2_500_90", {kByShape, kCudaCore});
}

// The V2-Lite batch-1 case captured in a CUDA graph on a non-blocking stream (after one eager
// warm-up launch, as the runner does): two replays, each bitwise equal to the eager uv_out, with
// `out` and the padding untouched. Row-tile and by-shape (warp-split) kernels, fp32 and bf16.
TEST(CudaMlaDecodeUv, GraphReplayEqualsEager) {
  DS_SKIP_WITHOUT_SM90();
  const UvCase c({1000}, {1}, 16);
  const int64_t Tn = c.pc.T, H = c.H;
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (const Path& path : {kRowTile, kByShape})
    for (bool bf16 : {false, true}) {
      const std::string cas = std::string("h16_b1_1000_") + path.name + (bf16 ? "_bf16" : "_f32") + "_graph";
      const size_t esz = bf16 ? 2 : 4, n = Tn * c.TokStride();
      Dev<float> ws(MlaDecodeWorkspaceFloats(Tn, H, kKvl, c.pc.max_ctx, 256));
      Dev<__nv_bfloat16> out(Tn * H * kKvl);
      Dev<float> uv32(bf16 ? 1 : n);
      Dev<__nv_bfloat16> uv16(bf16 ? n : 1);
      void* uv = bf16 ? static_cast<void*>(uv16.get()) : static_cast<void*>(uv32.get());
      MlaDecodeParams p = BaseParams(c, path);
      p.workspace = ws.get(); p.out = out.get(); p.stream = st;
      SetUv(c, bf16, uv, &p);
      DS_CUDA_CHECK(cudaDeviceSynchronize());  // the poison (legacy stream) before the non-blocking stream
      MlaDecodeAttention(p);  // eager (also the warm-up: kernel attributes set outside the capture)
      DS_CUDA_CHECK(cudaGetLastError());
      DS_CUDA_CHECK(cudaStreamSynchronize(st));
      std::vector<unsigned char> eager(n * esz), got(n * esz);
      DS_CUDA_CHECK(cudaMemcpy(eager.data(), uv, n * esz, cudaMemcpyDeviceToHost));
      const CapturedGraph graph(st, [&] { MlaDecodeAttention(p); });
      for (int r = 0; r < 2; ++r) {
        DS_CUDA_CHECK(cudaMemset(uv, 0xFF, n * esz));  // poison again (legacy stream), then replay
        ws.Poison();
        DS_CUDA_CHECK(cudaDeviceSynchronize());
        graph.Replay();
        DS_CUDA_CHECK(cudaMemcpy(got.data(), uv, n * esz, cudaMemcpyDeviceToHost));
        int64_t diff = 0;
        for (size_t i = 0; i < n; ++i) diff += std::memcmp(&got[i * esz], &eager[i * esz], esz) != 0;
        const int64_t out_written = Written(out.Download(), 0, out.size());
        const bool pass = diff == 0 && out_written == 0;
        std::printf("[metric] op=mla_decode_uv_graph case=%s_replay%d n=%zu mismatches_vs_eager=%lld out_written=%lld "
                    "bound=bitwise%s\n",
                    cas.c_str(), r, n, (long long)diff, (long long)out_written, pass ? " PASS" : " FAIL");
        EXPECT_EQ(diff, 0) << cas << " replay " << r << ": differs from the eager launch";
        EXPECT_EQ(out_written, 0) << cas << " replay " << r << ": `out` written";
      }
      // The eager result itself against the reference is covered by V2LiteRowTile / the by-shape
      // cases; here only check it is finite and the padding untouched.
      int64_t pad_written = 0, bad = 0;
      std::vector<float> vals;
      if (bf16) {
        std::vector<__nv_bfloat16> h(n);
        std::memcpy(static_cast<void*>(h.data()), eager.data(), n * esz);
        vals = Unpad(h, Tn, H, c.TokStride(), &pad_written);
      } else {
        std::vector<float> h(n);
        std::memcpy(h.data(), eager.data(), n * esz);
        vals = Unpad(h, Tn, H, c.TokStride(), &pad_written);
      }
      for (float x : vals) bad += !std::isfinite(x);
      EXPECT_EQ(bad, 0) << cas << ": non-finite uv_out";
      EXPECT_EQ(pad_written, 0) << cas << ": padding written";
    }
  DS_CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace
}  // namespace ds::cuda::test
