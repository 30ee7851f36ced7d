// `dsinfer bench serve|one-batch`: dispatches to the benchmark modes.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/bench_commands.h"
#include "tools/command.h"

namespace {
void Usage(FILE* out) {
  std::fprintf(out,
               "usage: dsinfer bench <mode> [flags]   (dsinfer bench <mode> --help)\n\n"
               "modes:\n"
               "  serve       load-test an OpenAI-compatible server (dsinfer, vLLM, SGLang)\n"
               "  one-batch   time prefill and decode steps of a fixed batch, beside the roofline\n"
               "  roofline    roofline time of prefill / decode steps from a config (no model run)\n");
}

int RunBench(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    Usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string mode = argv[1];
  std::string name = std::string("dsinfer bench ") + mode;
  std::vector<char*> sub;
  sub.push_back(name.data());
  for (int i = 2; i < argc; ++i) sub.push_back(argv[i]);
  int sub_argc = static_cast<int>(sub.size());
  if (mode == "serve") return ds::tools::RunBenchServe(sub_argc, sub.data());
  if (mode == "one-batch") return ds::tools::RunBenchOneBatch(sub_argc, sub.data());
  if (mode == "roofline") return ds::tools::RunBenchRoofline(sub_argc, sub.data());
  std::fprintf(stderr, "dsinfer bench: unknown mode '%s'\n\n", mode.c_str());
  Usage(stderr);
  return 2;
}
}  // namespace

DS_REGISTER_COMMAND(bench, "benchmarks: serve (HTTP load test), one-batch (step times vs roofline), roofline", RunBench);
