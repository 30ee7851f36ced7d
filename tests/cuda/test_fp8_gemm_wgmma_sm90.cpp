// Fp8GemmWgmmaSm90 (our FP8 block-scaled wgmma GEMMs, GemmFp8's orientation: the panel form for
// K <= 512 and the 128 x 144 tile form) vs the CPU GEMM on dequantised operands, and vs cuBLASLt's
// GemmFp8 on the same codes at DeepSeek-V3's kv_b_proj and kv_a_proj_with_mqa shapes (M = 4096).
#include "backend/cuda/fp8_gemm_wgmma_sm90.h"

#include <algorithm>
#include <utility>

#include "fp8_gemm_test_util.h"

namespace ds::cuda::test {
namespace {

using fp8::Operands;
using fp8::Shape;

const std::pair<Fp8GemmWgmmaSchedule, const char*> kSchedules[] = {
    {Fp8GemmWgmmaSchedule::kWhole, ""}, {Fp8GemmWgmmaSchedule::kSplitHalves, "_split"},
    {Fp8GemmWgmmaSchedule::kPingPong, "_pingpong"}, {Fp8GemmWgmmaSchedule::kDoubleAcc, "_doubleacc"},
    {Fp8GemmWgmmaSchedule::kRegisterA, "_rega"}};  // (kRegisterA: the panel form only)

// The options of Fp8GemmWgmmaSm90Params a case sets besides the form and schedule.
struct Opts {
  int multicast = 0;
  bool overlap = false, deep = false, ds = false;
};

std::vector<float> RunForm(const Operands& o, Fp8GemmWgmmaForm form, Fp8GemmWgmmaSchedule sched, Opts opt = {}) {
  const auto [multicast, overlap, deep, ds] = opt;
  Dev<__nv_bfloat16> dy(o.Mp * o.ldn);
  Fp8GemmWgmmaSm90Params p{};
  p.g = o.G(dy.get());
  p.w_scales_mn = o.dws_mn->get();
  p.form = form;
  p.schedule = sched;
  p.multicast = multicast;
  p.overlap_epilogue = overlap;
  p.deep_ring = deep;
  p.double_staging = ds;
  const std::string why = Fp8GemmWgmmaSm90Unsupported(p);
  EXPECT_TRUE(why.empty()) << o.s.name << ": " << why;
  Fp8GemmWgmmaSm90(p);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  return fp8::RowsOf(o, FromBf16(dy.Download()));
}

// K of 1-4 blocks; M not a multiple of the 128-row panel (and Mp = M rounded to 16); padded
// leading dimensions holding NaN codes; M 1000 x N 4096 (8 panels in 16 column parts each); and
// more panels than SMs (M 17000: 133 panels), where CTAs take contiguous tile ranges and the
// range that crosses a panel reloads it.
TEST(CudaFp8GemmWgmmaSm90, PanelMatchesCpu) {
  if (!Fp8GemmWgmmaSm90Available()) GTEST_SKIP() << "needs an sm_90 device";
  const Shape shapes[] = {{256, 2048, 512, "kv_b_like_M256"}, {130, 256, 512, "M130_two_panels"},
                          {64, 384, 128, "K128"},            {200, 512, 384, "K384"},
                          {100, 256, 256, "padded_ld_M100", 32}, {1000, 4096, 512, "M1000_N4096_parts"},
                          {1, 128, 512, "M1"}, {17000, 128, 128, "M17000_panel_reloads"},
                          {51000, 128, 128, "M51000_panel_reloads_x3"}, {17000, 256, 384, "M17000_K384_ring_wraps"}};
  for (const auto& s : shapes) {
    Operands o(s);
    const auto ref = o.Reference();
    std::vector<float> y_whole;
    for (const auto& [sched, tag] : kSchedules) {
      const auto y = RunForm(o, Fp8GemmWgmmaForm::kPanel, sched);
      ExpectClose("fp8_gemm_wgmma_sm90_panel", std::string(s.name) + tag, y, ref, 5e-3);
      // Every schedule promotes each output's K blocks in the same order: bit-equal to kWhole.
      if (sched == Fp8GemmWgmmaSchedule::kWhole) y_whole = y;
      else EXPECT_TRUE(y == y_whole) << s.name << tag << ": not bit-equal to the whole-tile schedule";
      if (sched == Fp8GemmWgmmaSchedule::kSplitHalves) continue;
      // The overlapped epilogue changes only when the stores run: bit-equal.
      const auto yo = RunForm(o, Fp8GemmWgmmaForm::kPanel, sched, {.overlap = true});
      ExpectClose("fp8_gemm_wgmma_sm90_panel", std::string(s.name) + tag + "_overlap", yo, ref, 5e-3);
      EXPECT_TRUE(yo == y) << s.name << tag << ": the overlapped epilogue is not bit-equal";
      if (sched == Fp8GemmWgmmaSchedule::kRegisterA) {
        // The deep ring where the panels sweep in step (these shapes give a CTA at most 8 weight
        // loads, so it stays in the ring's boxes: DeepRingWrapsMatchesRegisterA covers the panel's
        // boxes; M17000 / M51000 reload panels and run the 8-stage ring): bit-equal too.
        for (bool ov : {false, true})
          EXPECT_TRUE(RunForm(o, Fp8GemmWgmmaForm::kPanel, sched, {.overlap = ov, .deep = true}) == y)
              << s.name << tag << (ov ? "_overlap" : "") << ": the deep ring is not bit-equal";
        EXPECT_TRUE(RunForm(o, Fp8GemmWgmmaForm::kPanel, sched, {.overlap = true, .deep = true, .ds = true}) == y)
            << s.name << tag << ": two staging sets on the deep ring are not bit-equal";
      }
    }
  }
}

// The deep ring (12 stages, 4 in the panel's shared memory) and two staging sets on it (10 stages)
// where they wrap: M 4096 x N 4096 x K 512 is 32 panels in 4 parts, so a CTA loads 8 tiles x 4 K
// blocks = 32 weight stages, through the panel's boxes more than twice. Bit-equal to kRegisterA's
// 8-stage ring (itself checked against the CPU above and cuBLASLt below).
TEST(CudaFp8GemmWgmmaSm90, DeepRingWrapsMatchesRegisterA) {
  if (!Fp8GemmWgmmaSm90Available()) GTEST_SKIP() << "needs an sm_90 device";
  Operands o(Shape{4096, 4096, 512, "M4096_N4096_K512_deep"});
  const auto y = RunForm(o, Fp8GemmWgmmaForm::kPanel, Fp8GemmWgmmaSchedule::kRegisterA);
  for (int v = 0; v < 3; ++v) {  // deep; deep + overlap; deep + overlap + two staging sets
    const auto yd = RunForm(o, Fp8GemmWgmmaForm::kPanel, Fp8GemmWgmmaSchedule::kRegisterA,
                             {.overlap = v >= 1, .deep = true, .ds = v == 2});
    EXPECT_TRUE(yd == y) << "variant " << v << " not bit-equal to the 8-stage ring";
  }
}

// 144-column tiles: kv_a's N (576, tiles straddling the 128-column scale blocks, the last tile
// ending on block 4's half); one tile (N 144: two blocks); M not a multiple of 128; padded
// leading dimensions; more tiles than SMs (M 2000 x N 1440: 16 x 10), so CTAs loop; with and
// without the A multicast to pairs of CTAs (where N / 144 is even: N 576, 288 and 1440, and M 5000,
// where the pairs loop over 160 tiles on a grid of 132).
TEST(CudaFp8GemmWgmmaSm90, Tile144MatchesCpu) {
  if (!Fp8GemmWgmmaSm90Available()) GTEST_SKIP() << "needs an sm_90 device";
  const Shape shapes[] = {{200, 576, 7168, "kv_a_M200"}, {130, 288, 1024, "N288_M130"}, {64, 144, 256, "N144"},
                          {100, 432, 512, "padded_ld_M100", 32}, {2000, 1440, 256, "M2000_N1440_loops"},
                          {1, 576, 1024, "M1"}, {5000, 576, 256, "M5000_N576_cluster_loops"},
                          {300, 576, 1280, "K1280_chunk_plus_two"}};
  for (const auto& s : shapes) {
    Operands o(s);
    const auto ref = o.Reference();
    std::vector<float> y_whole;
    for (const auto& [sched, tag] : kSchedules)
      for (int mc : {0, 2}) {
        if (sched == Fp8GemmWgmmaSchedule::kRegisterA) continue;
        const std::string name = std::string(s.name) + tag + (mc ? "_multicast" + std::to_string(mc) : "");
        const auto y = RunForm(o, Fp8GemmWgmmaForm::kTile144, sched, {.multicast = mc});
        ExpectClose("fp8_gemm_wgmma_sm90_tile144", name, y, ref, 5e-3);
        // The same promotion order in every schedule: bit-equal to kWhole without the multicast.
        if (y_whole.empty()) y_whole = y;
        else EXPECT_TRUE(y == y_whole) << name << ": not bit-equal to the whole-tile schedule";
      }
  }
}

// At the bench's sizes: against cuBLASLt on the same codes (no CPU reference at 4096 x 32768 x 512
// or 4096 x 576 x 7168). Both promote each K block's sums in the same order, and the runs so far
// were bit-equal; the bound (1e-4 rel L2) leaves room only for a different rounding of a few.
TEST(CudaFp8GemmWgmmaSm90, MatchesCublasLtAtPrefillSizes) {
  if (!Fp8GemmWgmmaSm90Available()) GTEST_SKIP() << "needs an sm_90 device";
  // kv_a at M 16384: 512 tiles on 132 CTAs, so the stage ring wraps inside and between tiles at
  // the real K (56 blocks, seven chunks of 8 in the split form).
  const std::pair<Shape, Fp8GemmWgmmaForm> cases[] = {{Shape{4096, 32768, 512, "kv_b_M4096"}, Fp8GemmWgmmaForm::kPanel},
                                                      {Shape{4096, 576, 7168, "kv_a_M4096"}, Fp8GemmWgmmaForm::kTile144},
                                                      {Shape{16384, 576, 7168, "kv_a_M16384"}, Fp8GemmWgmmaForm::kTile144}};
  int compared = 0;
  for (const auto& [s, form] : cases) {
    if (!GemmFp8Supported(s.M, s.N, s.K, s.K, s.K, s.N, DTypeOut::kBF16)) {
      std::printf("skip %s: no cuBLASLt block-scaled GEMM for it\n", s.name);
      continue;
    }
    ++compared;
    Operands o(s);
    Dev<__nv_bfloat16> dy(o.Mp * s.N);
    GemmFp8(o.G(dy.get()));
    auto cub = FromBf16(dy.Download());
    cub.resize(s.M * s.N);
    for (const auto& [sched, tag] : kSchedules)
      for (int mc : {0, 2, -1}) {  // -1: the panel form's overlapped epilogue
        if (sched == Fp8GemmWgmmaSchedule::kRegisterA && form != Fp8GemmWgmmaForm::kPanel) continue;
        if (mc > 0 && form != Fp8GemmWgmmaForm::kTile144) continue;  // (the multicast is the tile-144 form's)
        if (mc < 0 && (form != Fp8GemmWgmmaForm::kPanel || sched == Fp8GemmWgmmaSchedule::kSplitHalves)) continue;
        const std::string v = mc > 0 ? "_multicast" + std::to_string(mc) : mc < 0 ? "_overlap" : "";
        ExpectClose("fp8_gemm_wgmma_sm90_vs_cublaslt", std::string(s.name) + tag + v,
                    RunForm(o, form, sched, {.multicast = std::max(mc, 0), .overlap = mc < 0}), cub, 1e-4);
        if (sched == Fp8GemmWgmmaSchedule::kRegisterA && mc <= 0)  // the deep ring, with and without the overlap
          ExpectClose("fp8_gemm_wgmma_sm90_vs_cublaslt", std::string(s.name) + tag + v + "_deep",
                      RunForm(o, form, sched, {.overlap = mc < 0, .deep = true}), cub, 1e-4);
        if (sched == Fp8GemmWgmmaSchedule::kRegisterA && mc < 0)
          ExpectClose("fp8_gemm_wgmma_sm90_vs_cublaslt", std::string(s.name) + tag + v + "_deep_ds",
                      RunForm(o, form, sched, {.overlap = true, .deep = true, .ds = true}), cub, 1e-4);
      }
  }
  if (compared == 0) GTEST_SKIP() << "no cuBLASLt block-scaled GEMM for any of the shapes";
}

TEST(CudaFp8GemmWgmmaSm90, RejectsUnsupported) {
  Fp8GemmWgmmaSm90Params p{};
  p.g.M = 16; p.g.N = 256; p.g.K = 640; p.g.ldx = p.g.ldw = 640; p.g.ldy = 256;  // K > 512
  std::string why = Fp8GemmWgmmaSm90Unsupported(p);
  EXPECT_NE(why.find("K > 512"), std::string::npos) << why;
  EXPECT_THROW(Fp8GemmWgmmaSm90(p), CheckError);
  p.g.K = 512; p.g.ldx = p.g.ldw = 512; p.g.N = 200; p.g.ldy = 200;  // N % 128
  why = Fp8GemmWgmmaSm90Unsupported(p);
  EXPECT_NE(why.find("N % 128"), std::string::npos) << why;
  EXPECT_THROW(Fp8GemmWgmmaSm90(p), CheckError);
  p.form = Fp8GemmWgmmaForm::kTile144;  // N % 144 and K > 16384
  p.g.K = 16512; p.g.ldx = p.g.ldw = 16512;
  why = Fp8GemmWgmmaSm90Unsupported(p);
  EXPECT_NE(why.find("N % 144"), std::string::npos) << why;
  EXPECT_NE(why.find("K > 16384"), std::string::npos) << why;
  EXPECT_THROW(Fp8GemmWgmmaSm90(p), CheckError);
  p.form = Fp8GemmWgmmaForm::kPanel;  // the multicast is the tile-144 form's
  p.g.K = 512; p.g.ldx = p.g.ldw = 512; p.g.N = 256; p.g.ldy = 256;
  p.multicast = 2;
  why = Fp8GemmWgmmaSm90Unsupported(p);
  EXPECT_NE(why.find("kTile144 only"), std::string::npos) << why;
  // The schedule / option rejections, each named in the reasons, and the launcher throws. (The
  // operands here are null, so "null operand" is among the reasons too.)
  p.multicast = 0;
  const auto rejects = [&](const char* reason) {
    why = Fp8GemmWgmmaSm90Unsupported(p);
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    EXPECT_THROW(Fp8GemmWgmmaSm90(p), CheckError);
  };
  p.overlap_epilogue = true;  // the overlapped epilogue: the panel form's, not on split halves
  p.schedule = Fp8GemmWgmmaSchedule::kSplitHalves;
  rejects("overlap_epilogue");
  p.schedule = Fp8GemmWgmmaSchedule::kWhole;
  p.form = Fp8GemmWgmmaForm::kTile144;
  p.g.N = 576; p.g.ldy = 576;
  rejects("overlap_epilogue");
  p.overlap_epilogue = false;
  p.schedule = static_cast<Fp8GemmWgmmaSchedule>(5);  // past the last schedule
  rejects("schedule 5");
  p.schedule = Fp8GemmWgmmaSchedule::kRegisterA;  // the panel form's
  rejects("kRegisterA is for kPanel");
  p.schedule = Fp8GemmWgmmaSchedule::kWhole;  // the deep ring is kRegisterA's
  p.deep_ring = true;
  rejects("deep_ring");
  p.deep_ring = false;  // two staging sets need the deep ring
  p.double_staging = true;
  rejects("double_staging");
}

}  // namespace
}  // namespace ds::cuda::test
