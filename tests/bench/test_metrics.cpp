#include <gtest/gtest.h>

#include <cmath>

#include "bench/metrics.h"

namespace ds::bench {
namespace {

TEST(BenchPercentile, MatchesNumpyLinear) {
  // Expected values from numpy.percentile (default "linear" method).
  EXPECT_NEAR(Percentile({1, 2, 3, 4}, 90), 3.7, 1e-12);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(Percentile(hundred, 99), 99.01, 1e-9);
  EXPECT_NEAR(Percentile({50, 15, 40, 20, 35}, 40), 29.0, 1e-12);  // unsorted input
  EXPECT_EQ(Percentile({5.0}, 99), 5.0);
  EXPECT_EQ(Percentile({}, 50), 0.0);
  EXPECT_EQ(Percentile({3, 1, 2}, 0), 1.0);
  EXPECT_EQ(Percentile({3, 1, 2}, 100), 3.0);
}

TEST(BenchSummary, MeanStdMedianP90P99) {
  Summary s = Summarize({0.3, 1.7, 2.2, 9.1, 4.4, 0.05, 7.7});
  EXPECT_EQ(s.count, 7u);
  EXPECT_NEAR(s.mean, 3.635714285714286, 1e-12);
  EXPECT_NEAR(s.std, 3.3113133222888087, 1e-12);  // population std (numpy default)
  EXPECT_NEAR(s.median, 2.2, 1e-12);
  EXPECT_NEAR(s.p90, 8.26, 1e-12);
  EXPECT_NEAR(s.p99, 9.016, 1e-12);
  EXPECT_EQ(s.min, 0.05);
  EXPECT_EQ(s.max, 9.1);
}

// The value printed after `label` on its report line ("" when absent).
std::string ReportValue(const std::string& report, const std::string& label) {
  size_t at = report.find(label);
  if (at == std::string::npos) return "";
  size_t eol = report.find('\n', at);
  std::string rest = report.substr(at + label.size(), eol - at - label.size());
  size_t b = rest.find_first_not_of(' ');
  return b == std::string::npos ? "" : rest.substr(b);
}

RequestOutcome Ok(double ttft, double e2e, int out_tokens, int prompt_tokens,
                  std::vector<double> itl = {}) {
  RequestOutcome r;
  r.success = true;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.output_tokens = out_tokens;
  r.prompt_tokens = prompt_tokens;
  r.itl_s = std::move(itl);
  return r;
}

TEST(BenchMetrics, ThroughputLatencyAndSlo) {
  std::vector<RequestOutcome> rs;
  // TPOT = (1.0 - 0.1) / 9 = 0.1 s
  rs.push_back(Ok(0.1, 1.0, 10, 100, {0.1, 0.1}));
  // TPOT = (2.2 - 0.2) / 4 = 0.5 s
  rs.push_back(Ok(0.2, 2.2, 5, 50, {0.5}));
  // One output token: no TPOT sample.
  rs.push_back(Ok(0.3, 0.3, 1, 20));
  RequestOutcome bad;
  bad.error = "HTTP 500: boom";
  rs.push_back(bad);
  SloConfig slo{/*ttft_ms=*/250, /*tpot_ms=*/200};
  BenchMetrics m = ComputeMetrics(rs, /*duration_s=*/4.0, /*num_gpus=*/2, slo);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input_tokens, 170);
  EXPECT_EQ(m.total_output_tokens, 16);
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.75);
  EXPECT_DOUBLE_EQ(m.output_throughput, 4.0);
  EXPECT_DOUBLE_EQ(m.output_throughput_per_gpu, 2.0);
  EXPECT_DOUBLE_EQ(m.input_throughput, 42.5);
  EXPECT_DOUBLE_EQ(m.total_throughput, 46.5);
  EXPECT_NEAR(m.mean_concurrency, 3.5 / 4.0, 1e-12);
  EXPECT_EQ(m.tpot_ms.count, 2u);
  EXPECT_NEAR(m.tpot_ms.mean, 300.0, 1e-9);
  EXPECT_NEAR(m.ttft_ms.median, 200.0, 1e-9);
  EXPECT_EQ(m.itl_ms.count, 3u);
  EXPECT_NEAR(m.itl_ms.mean, 700.0 / 3, 1e-9);
  EXPECT_NEAR(m.e2e_ms.max, 2200.0, 1e-9);
  // SLO: request 1 meets both; request 2 misses TPOT (500 > 200); request 3 misses TTFT
  // (300 > 250); the failed one misses.
  EXPECT_EQ(m.slo_met, 1);
  EXPECT_DOUBLE_EQ(m.slo_attainment, 0.25);
  EXPECT_DOUBLE_EQ(m.goodput, 0.25);
  ASSERT_EQ(m.first_errors.size(), 1u);
  EXPECT_EQ(m.first_errors[0], "HTTP 500: boom");
  EXPECT_LT(m.cached_token_fraction, 0);  // not reported

  auto j = MetricsToJson(m);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_NEAR(j["median_ttft_ms"].get<double>(), 200.0, 1e-9);
  EXPECT_NEAR(j["mean_tpot_ms"].get<double>(), 300.0, 1e-9);
  EXPECT_DOUBLE_EQ(j["output_throughput_per_gpu"].get<double>(), 2.0);
  std::string report = FormatReport(m, 8, 1.5);
  EXPECT_EQ(ReportValue(report, "Successful requests:"), "3") << report;
  EXPECT_EQ(ReportValue(report, "Failed requests:"), "1") << report;
  EXPECT_EQ(ReportValue(report, "Median TTFT (ms):"), "200.00") << report;
  EXPECT_EQ(ReportValue(report, "SLO attainment (%):"), "25.00") << report;
  EXPECT_EQ(ReportValue(report, "Output tok/s per GPU (2 GPUs):"), "2.00") << report;
}

TEST(BenchMetrics, VocabularyErrorsGetAHint) {
  RequestOutcome bad;
  bad.error = "HTTP 500: boom";
  BenchMetrics m = ComputeMetrics({bad}, 1.0, 1, SloConfig{});
  EXPECT_EQ(FormatReport(m, 0, 1.0).find("--vocab-size"), std::string::npos);
  bad.error = "HTTP 400: token id 13475 is outside the vocabulary [0, 512)";
  m = ComputeMetrics({bad}, 1.0, 1, SloConfig{});
  EXPECT_NE(FormatReport(m, 0, 1.0).find("pass --vocab-size N"), std::string::npos);
}

// Several tokens per streamed chunk (a server holding back incomplete UTF-8): the report says
// that TTFT and ITL time chunks, and how to stream every token; one chunk per token: no note.
TEST(BenchMetrics, PackedChunksGetANote) {
  std::vector<RequestOutcome> packed = {Ok(0.9, 1.0, 8, 10, {0.1}), Ok(0.9, 1.0, 8, 10, {0.1})};  // 16 tokens, 4 chunks
  BenchMetrics m = ComputeMetrics(packed, 1.0, 1, {});
  EXPECT_EQ(m.streamed_chunks, 4);
  const std::string rep = FormatReport(m, 0, 1.0);
  EXPECT_NE(rep.find("16 tokens arrived in 4 streamed chunks"), std::string::npos) << rep;
  EXPECT_NE(rep.find("return_token_ids"), std::string::npos);
  std::vector<RequestOutcome> per_token = {Ok(0.1, 1.0, 4, 10, {0.3, 0.3, 0.3})};
  m = ComputeMetrics(per_token, 1.0, 1, {});
  EXPECT_EQ(m.streamed_chunks, 4);
  EXPECT_EQ(FormatReport(m, 0, 1.0).find("streamed chunks"), std::string::npos);
}

TEST(BenchMetrics, NoSloMeansEverySuccessCounts) {
  std::vector<RequestOutcome> rs = {Ok(5, 50, 3, 1), Ok(5, 50, 3, 1)};
  RequestOutcome bad;
  bad.error = "x";
  rs.push_back(bad);
  BenchMetrics m = ComputeMetrics(rs, 10, 1, SloConfig{});
  EXPECT_EQ(m.slo_met, 2);
  EXPECT_NEAR(m.slo_attainment, 2.0 / 3, 1e-12);
}

TEST(BenchMetrics, CachedTokenFraction) {
  auto a = Ok(0.1, 1, 2, 1000);
  a.cached_tokens = 512;
  auto b = Ok(0.1, 1, 2, 1000);
  b.cached_tokens = 0;
  BenchMetrics m = ComputeMetrics({a, b}, 1, 1, SloConfig{});
  EXPECT_NEAR(m.cached_token_fraction, 512.0 / 2000, 1e-12);
}

TEST(BenchMetrics, EmptyRunIsAllZero) {
  BenchMetrics m = ComputeMetrics({}, 0, 1, SloConfig{});
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.request_throughput, 0);
  EXPECT_EQ(m.ttft_ms.count, 0u);
}

}  // namespace
}  // namespace ds::bench
