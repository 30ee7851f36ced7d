// bench/e2e_records.py, bench/plot_e2e.py, bench/analyze_e2e.py, bench/c1_table.py and
// bench/ob_steps.py (Python stdlib) on synthetic sweep and one-batch outputs.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

fs::path RepoRoot() { return fs::path(DS_TEST_DATA_DIR).parent_path().parent_path(); }

int Sh(const std::string& cmd, std::string* out) {
  FILE* p = popen(("timeout 60 " + cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, k);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void WriteJson(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(); }

TEST(BenchScripts, RecordsAndPlots) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  fs::path dir = fs::temp_directory_path() / ("dsinfer_scripts_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "raw");
  // Two concurrency points for one model; one-batch only for c=1.
  for (int c : {1, 8}) {
    WriteJson(dir / "raw" / ("serve_m_in1024_c" + std::to_string(c) + ".json"),
              {{"model_name", "m"}, {"layers", 27}, {"dtype", "bf16"}, {"output_len", 256},
               {"output_throughput_per_gpu", 100.0 * c}, {"median_ttft_ms", 50.0 + c},
               {"median_tpot_ms", 10.0 + c}, {"date", "2026-01-01T00:00:00Z"}, {"failed", 0}});
    WriteJson(dir / "raw" / ("roofline_m_in1024_b" + std::to_string(c) + ".json"), {{"roofline_step_ms", 5.0 + c}});
  }
  WriteJson(dir / "raw" / "onebatch_m_in1024_b1.json", {{"step_ms", 7.5}});
  WriteJson(dir / "hf.json", {{"batch_size", 1}, {"input_len", 1024}, {"step_ms", 40.0}, {"decode_tok_s", 25.0}});
  std::string out;
  fs::path root = RepoRoot();
  ASSERT_EQ(Sh("python3 " + (root / "bench/e2e_records.py").string() + " --raw " + (dir / "raw").string() +
                   " --out " + (dir / "e2e.json").string() + " --gpu H200 --commit abc",
               &out),
            0)
      << out;
  std::ifstream f(dir / "e2e.json");
  auto recs = nlohmann::json::parse(f);
  ASSERT_EQ(recs.size(), 2u);
  const std::vector<std::string> keys = {"model", "layers", "dtype", "concurrency", "input_len", "output_len",
                                         "output_tok_s_per_gpu", "ttft_ms_median", "tpot_ms_median", "step_ms",
                                         "roofline_step_ms", "gpu", "commit", "date"};
  for (const auto& r : recs) {
    EXPECT_EQ(r.size(), keys.size());
    for (const auto& k : keys) EXPECT_TRUE(r.contains(k)) << k;
  }
  EXPECT_EQ(recs[0]["concurrency"], 1);
  EXPECT_EQ(recs[0]["step_ms"], 7.5);
  EXPECT_EQ(recs[0]["roofline_step_ms"], 6.0);
  EXPECT_EQ(recs[0]["gpu"], "H200");
  EXPECT_TRUE(recs[1]["step_ms"].is_null());  // no one-batch run at c=8
  EXPECT_EQ(recs[1]["output_tok_s_per_gpu"], 800.0);

  out.clear();
  ASSERT_EQ(Sh("python3 " + (root / "bench/plot_e2e.py").string() + " " + (dir / "e2e.json").string() +
                   " --baseline " + (dir / "hf.json").string(),
               &out),
            0)
      << out;
  for (const char* svg : {"throughput_vs_concurrency.svg", "pareto.svg"}) {
    ASSERT_TRUE(fs::exists(dir / svg)) << svg;
    out.clear();
    // Well-formed XML with data points drawn.
    EXPECT_EQ(Sh("python3 -c \"import sys,xml.etree.ElementTree as E; t=E.parse(sys.argv[1]); "
                 "n=sum(1 for e in t.iter() if e.tag.endswith('circle')); sys.exit(0 if n>=2 else 3)\" " +
                     (dir / svg).string(),
                 &out),
              0)
        << svg << " " << out;
  }
  // The summary: c=1 step/roofline = 7.5 / 6 = 1.25x (met); highest c with TPOT <= 50 ms is 8.
  WriteJson(dir / "raw" / "roofline_m_in1024_b8.json",
            {{"roofline_step_ms", 13.0},
             {"decode_parts", {{"attention", {{"ms", 3.0}}}, {"moe", {{"ms", 8.0}}}, {"dense", {{"ms", 1.0}}},
                               {"other", {{"ms", 1.0}}}}}});
  out.clear();
  ASSERT_EQ(Sh("python3 " + (root / "bench/analyze_e2e.py").string() + " " + (dir / "e2e.json").string() + " --out " +
                   (dir / "summary.md").string(),
               &out),
            0)
      << out;
  EXPECT_NE(out.find("**1.25x** (bound: 1.5x, met)"), std::string::npos) << out;
  EXPECT_NE(out.find("median TPOT <= 50 ms: **8** -> 800.0 output tok/s per GPU"), std::string::npos) << out;
  // Roofline throughput at c=8: 8 / 13 ms = 615.4 tok/s; measured 800 -> ratio 1.30.
  EXPECT_NE(out.find("roofline 615.4 tok/s"), std::string::npos) << out;
  EXPECT_NE(out.find("moe 8.00 (62%)"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir / "summary.md"));
  // The Pareto frontier helper.
  out.clear();
  EXPECT_EQ(Sh("python3 -c \"import sys; sys.path.insert(0, sys.argv[1]); import plot_e2e as p; "
               "f=p.pareto_frontier([(1,10),(2,8),(1.5,5),(3,1),(0.5,9)]); "
               "sys.exit(0 if f==[(1,10),(2,8),(3,1)] else 4)\" " + (root / "bench").string(),
               &out),
            0)
      << out;
  fs::remove_all(dir);
}

// bench/c1_table.py: a one-batch step against its roofline rescaled to the call's read and copy
// rates (a 1.257 ms roofline at 3,931 GB/s is 1.158 ms at 4,267: 1.826 ms is 1.577x there, 1.534x at 4,150).
TEST(BenchScripts, C1Table) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  fs::path dir = fs::temp_directory_path() / ("dsinfer_c1_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  WriteJson(dir / "gpu_rates.json", {{"gpu", "H200"}, {"mem_bw_gbps", 4267.0}, {"copy_bw_gbps", 4150.0}});
  WriteJson(dir / "ob_v2_1024_1.json", {{"model", "/x/deepseek-v2-lite"}, {"layers", 27}, {"batch_size", 1},
                                         {"input_len", 1024}, {"step_ms", 1.826}, {"roofline_step_ms", 1.257},
                                         {"mem_bw_gbps", 3931.0}});
  WriteJson(dir / "ob_broken.json", {{"model", "m"}});  // no step: skipped
  std::string out;
  ASSERT_EQ(Sh("python3 " + (RepoRoot() / "bench/c1_table.py").string() + " " + dir.string() + " --out " +
                   (dir / "t.md").string(),
               &out),
            0)
      << out;
  EXPECT_NE(out.find("| v2_1024_1 | deepseek-v2-lite | 27 | 1 x 1024 | 1.826 | 1.453x (3931 GB/s) | 1.534x | **1.577x** |"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("broken"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir / "t.md"));
  out.clear();
  fs::remove(dir / "gpu_rates.json");
  EXPECT_NE(Sh("python3 " + (RepoRoot() / "bench/c1_table.py").string() + " " + dir.string(), &out), 0) << out;
  fs::remove_all(dir);
}

// bench/ob_steps.py: the median step by 32-key split count (the first step left out): contexts
// 4,096 (128 splits), 4,097-4,098 (129) and 4,129 (130).
TEST(BenchScripts, ObSteps) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  fs::path dir = fs::temp_directory_path() / ("dsinfer_obsteps_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json steps = nlohmann::json::array();
  const std::pair<int, double> rows[] = {{4095, 9.0}, {4096, 1.70}, {4097, 1.80}, {4098, 1.90}, {4129, 1.75}};
  for (const auto& [ctx, ms] : rows) steps.push_back({{"context", ctx}, {"ms", ms}, {"roofline_ms", 1.2}});
  WriteJson(dir / "ob_x.json", {{"step_ms", 1.8}, {"steps", steps}});
  std::string out;
  ASSERT_EQ(Sh("python3 " + (RepoRoot() / "bench/ob_steps.py").string() + " " + (dir / "ob_x.json").string(), &out), 0)
      << out;
  EXPECT_NE(out.find("ob_x.json median 1.8000 S128:1.700 S129:1.850 S130:1.750"), std::string::npos) << out;
  fs::remove_all(dir);
}

}  // namespace
