// `dsinfer bench dp-balance`: the DP placement simulation on a synthetic skewed trace.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_cmd.h"

namespace ds {
namespace {

using ds::test::RunCmd;

TEST(BenchDpBalance, MinimumTokensBalancesASkewedTrace) {
  // Every 8th request has a 50K-token context, the rest 500: round robin piles the long ones
  // onto the same rank; minimum_tokens spreads them.
  const std::string trace = ::testing::TempDir() + "/dp_balance_trace.jsonl";
  {
    std::ofstream f(trace);
    for (int i = 0; i < 400; ++i)
      f << "{\"timestamp\": " << i * 50 << ", \"input_length\": " << (i % 8 == 0 ? 50000 : 500)
        << ", \"output_length\": 300}\n";
  }
  const std::string json = ::testing::TempDir() + "/dp_balance.json";
  auto [rc, out] = RunCmd(std::string(DS_BINARY) + " bench dp-balance --trace " + trace +
                          " --dp-size 8 --trace-duration-s 0 --output-file " + json);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("minimum_tokens"), std::string::npos) << out;
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j.size(), 3u);
  double rr = 0, mt = 0, rr_tput = 0, mt_tput = 0;
  for (const auto& r : j) {
    EXPECT_EQ(r["tokens"], 400 * 300) << r.dump();  // every request generates its output
    EXPECT_GE(r["imbalance"].get<double>(), 1.0);
    if (r["method"] == "round_robin") { rr = r["imbalance"]; rr_tput = r["output_tok_s"]; }
    if (r["method"] == "minimum_tokens") { mt = r["imbalance"]; mt_tput = r["output_tok_s"]; }
  }
  std::printf("round_robin imbalance %.3f (%.0f tok/s), minimum_tokens %.3f (%.0f tok/s)\n", rr, rr_tput, mt, mt_tput);
  EXPECT_LT(mt, rr);
  EXPECT_LT(mt, rr / 2);  // measured 1.70 vs 7.33
  EXPECT_GT(rr, 3.0);  // round robin sends every long request to rank 0
}

TEST(BenchDpBalance, Errors) {
  auto [rc, out] = RunCmd(std::string(DS_BINARY) + " bench dp-balance --trace /nonexistent.jsonl");
  EXPECT_EQ(rc, 1) << out;
  auto [rc2, out2] = RunCmd(std::string(DS_BINARY) + " bench dp-balance");
  EXPECT_EQ(rc2, 2) << out2;
  auto [rc3, out3] = RunCmd(std::string(DS_BINARY) + " bench dp-balance --trace x --load-balance-methods best");
  EXPECT_EQ(rc3, 2) << out3;
}

}  // namespace
}  // namespace ds
