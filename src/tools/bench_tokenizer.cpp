// `dsinfer bench tokenizer --tokenizer DIR --corpus
// FILE`: single-thread encode throughput (MB/s of UTF-8 input) over the documents of a corpus
// (.jsonl of {"text": ...}, else one document per line), add_special_tokens=false, timing
// only the Encode calls. Prints one JSON record.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/tokenizer.h"
#include "tools/cli_checks.h"
#include "tools/command.h"

namespace {

using json = nlohmann::json;

int BenchTokenizer(int argc, char** argv) {
  CLI::App app{"Single-thread tokenizer encode throughput"};
  std::string dir, corpus;
  int repeat = 1;
  app.add_option("--tokenizer", dir, "directory with tokenizer.json")->required();
  app.add_option("--corpus", corpus, ".jsonl of {\"text\"} documents, or a text file (one document per line)")->required();
  app.add_option("--repeat", repeat, "passes over the corpus (the best pass is reported)")->check(ds::tools::kPositive);
  CLI11_PARSE(app, argc, argv);
  auto tok = ds::Tokenizer::Load(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "dsinfer bench tokenizer: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  std::ifstream f(corpus, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "dsinfer bench tokenizer: cannot open %s\n", corpus.c_str());
    return 1;
  }
  bool jsonl = corpus.size() >= 6 && corpus.substr(corpus.size() - 6) == ".jsonl";
  std::vector<std::string> docs;
  std::string line;
  size_t bytes = 0;
  while (std::getline(f, line)) {
    if (jsonl) {
      try {
        docs.push_back(json::parse(line).at("text").get<std::string>());
      } catch (const json::exception& e) {
        std::fprintf(stderr, "dsinfer bench tokenizer: bad line %zu: %s\n", docs.size() + 1, e.what());
        return 1;
      }
    } else {
      docs.push_back(line + "\n");
    }
    bytes += docs.back().size();
  }
  double best = 1e30, first = 0;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    size_t n = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (const auto& d : docs) n += (*tok)->Encode(d, false).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) first = s;
    best = std::min(best, s);
    tokens = n;
  }
  json rec = {{"impl", "dsinfer"}, {"documents", docs.size()}, {"bytes", bytes}, {"tokens", tokens},
              {"seconds", best}, {"first_pass_seconds", first}, {"mb_per_s", bytes / 1e6 / best},
              {"threads", 1}};
  std::printf("%s\n", rec.dump().c_str());
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND_NAMED(bench_tokenizer, "bench tokenizer", "single-thread tokenizer encode throughput (MB/s)",
                          BenchTokenizer);
