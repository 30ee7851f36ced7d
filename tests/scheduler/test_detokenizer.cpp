#include <gtest/gtest.h>

#include "byte_decoder.h"
#include "scheduler/detokenizer.h"

namespace ds {
namespace {

using test::ByteDecoder;

TEST(StopStrings, HoldbackComputesLongestStopPrefixSuffix) {
  EXPECT_EQ(StopPrefixHoldback("hello wor", {"world"}), 3u);
  EXPECT_EQ(StopPrefixHoldback("hello", {"world"}), 0u);
  EXPECT_EQ(StopPrefixHoldback("abc", {"c", "bcd"}), 2u);
  EXPECT_EQ(StopPrefixHoldback("x", {}), 0u);
}

TEST(StopStrings, MatchSpanningDeltasIsExcludedAndNothingLeaks) {
  StopStringMatcher m({"STOP"});
  std::string emitted;
  for (const char* d : {"ab", "cS", "T", "O", "Pxyz"}) {
    auto r = m.Append(d);
    emitted += r.emit;
    if (r.stop) {
      EXPECT_EQ(*r.stop, "STOP");
      break;
    }
    EXPECT_EQ(emitted.find('S'), std::string::npos);  // the partial match was held back
  }
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(emitted, "abc");
}

TEST(StopStrings, FalseStartIsReleased) {
  StopStringMatcher m({"STOP"});
  std::string emitted;
  emitted += m.Append("aST").emit;
  EXPECT_EQ(emitted, "a");
  emitted += m.Append("x").emit;
  EXPECT_EQ(emitted, "aSTx");
  emitted += m.Append("S").emit;
  emitted += m.Flush();
  EXPECT_EQ(emitted, "aSTxS");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, EarliestOfSeveral) {
  StopStringMatcher m({"cd", "b"});
  auto r = m.Append("abcd");
  EXPECT_EQ(r.emit, "a");
  EXPECT_EQ(*r.stop, "b");
}

TEST(Utf8, SanitizeReplacesInvalid) {
  EXPECT_EQ(Utf8Lossy("abc"), "abc");
  EXPECT_EQ(Utf8Lossy("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(Utf8Lossy("a\xFFz"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(Utf8Lossy("\xE2\x82"), "\xEF\xBF\xBD");            // truncated 3-byte
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST(DeltaDetokenizer, HoldsIncompleteCharactersAndFlushesInvalid) {
  ByteDecoder dec;
  DeltaDetokenizer d(&dec, true);
  EXPECT_EQ(d.Add('h'), "h");
  EXPECT_EQ(d.Add(0xE2), "");  // first byte of the euro sign: held back
  EXPECT_EQ(d.Add(0x82), "");
  EXPECT_EQ(d.Add(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(d.Add(0xFF), "\xEF\xBF\xBD");  // can never become valid: U+FFFD at once
  EXPECT_EQ(d.Add('x'), "x");
  EXPECT_EQ(d.Add(0xF0), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");     // never-completed character at the end
}

}  // namespace
}  // namespace ds

#include "backend/cpu/ops.h"
#include "scheduler/sampler.h"

namespace ds {
namespace {
TEST(Sampler, FastSampleMatchesCpuSample) {
  // Peaked and flat distributions, with and without top-k / top-p.
  for (int dist = 0; dist < 3; ++dist) {
    const int V = 5000;
    std::vector<float> logits(V);
    uint64_t x = 12345 + dist;
    for (int i = 0; i < V; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      logits[i] = static_cast<float>((x >> 40) % 1000) / (dist == 0 ? 100.0f : 1000.0f);
    }
    if (dist == 2) logits[77] += 25.0f;
    for (float t : {0.0f, 0.5f, 1.0f, 1.7f})
      for (float tp : {1.0f, 0.9f, 0.3f})
        for (int tk : {0, 1, 5, 300})
          for (uint64_t step = 0; step < 20; ++step) {
            cpu::SampleParams p{logits.data(), V, t, tp, tk, 99, step};
            ASSERT_EQ(FastSample(logits.data(), V, t, tp, tk, 99, step), cpu::Sample(p))
                << "dist " << dist << " T " << t << " top_p " << tp << " top_k " << tk << " step " << step;
          }
  }
}
}  // namespace
}  // namespace ds

namespace ds {
namespace {
TEST(Sampler, FastSampleMatchesCpuSampleOnFlatFullVocabulary) {
  const int V = 129280;  // DeepSeek-V3 vocabulary, near-uniform logits (a random model)
  std::vector<float> logits(V);
  uint64_t x = 777;
  for (int i = 0; i < V; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    logits[i] = static_cast<float>((x >> 40) % 100000) / 50000.0f;
  }
  for (float tp : {1.0f, 0.95f, 0.5f})
    for (int tk : {0, 1000})
      for (uint64_t step = 0; step < 4; ++step) {
        cpu::SampleParams p{logits.data(), V, 1.0f, tp, tk, 3, step};
        ASSERT_EQ(FastSample(logits.data(), V, 1.0f, tp, tk, 3, step), cpu::Sample(p))
            << "top_p " << tp << " top_k " << tk << " step " << step;
      }
}
}  // namespace
}  // namespace ds
