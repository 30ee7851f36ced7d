// `dsinfer bench serve`: load-tests an OpenAI-compatible server. Flags follow vLLM's
// `vllm bench serve` where they exist. See docs/bench.md.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/serve_bench.h"
#include "tools/command.h"

namespace ds::tools {
namespace {

int RunBenchServe(int argc, char** argv) {
  bench::ServeBenchOptions o;
  CLI::App app{"Load-test an OpenAI-compatible server with streamed requests", "dsinfer bench serve"};
  std::string base_url, host = "127.0.0.1", request_rate = "inf", extra_body, metadata;
  int port = 8000;
  app.add_option("--base-url", base_url, "server URL, e.g. http://127.0.0.1:8000 (overrides --host/--port)");
  app.add_option("--host", host, "server host")->capture_default_str();
  app.add_option("--port", port, "server port")->capture_default_str();
  app.add_option("--endpoint", o.endpoint, "API path: /v1/completions (default) or /v1/chat/completions");
  app.add_option("--backend", o.backend, "openai (completions) | openai-chat")->capture_default_str();
  app.add_option("--model", o.model, "model name in requests (default: first of GET /v1/models)");
  app.add_option("--api-key", o.api_key, "sent as Authorization: Bearer KEY");
  app.add_option("--dataset-name", o.dataset_name, "random | sharegpt | trace")->capture_default_str();
  app.add_option("--dataset-path", o.dataset_path, "ShareGPT JSON/JSONL or trace JSONL");
  auto* np = app.add_option("--num-prompts", o.num_prompts, "requests to send (trace: cap, default all)")
                 ->capture_default_str();
  app.add_option("--random-input-len", o.random_input_len, "random: prompt tokens")->capture_default_str();
  app.add_option("--random-output-len", o.random_output_len, "random: output tokens")->capture_default_str();
  app.add_option("--random-range-ratio", o.random_range_ratio,
                 "random: lengths uniform in [L*(1-r), L*(1+r)]")->capture_default_str();
  app.add_option("--sharegpt-output-len", o.sharegpt_output_len, "sharegpt: fixed output length (0: the reply's)");
  app.add_option("--trace-time-scale", o.trace_time_scale,
                 "trace: multiply timestamps by this (2 = half the request rate)")->capture_default_str();
  app.add_option("--trace-duration-s", o.trace_duration_s, "trace: replay only the first N seconds of the trace (0 = all)");
  app.add_option("--tokenizer", o.tokenizer_dir,
                 "tokenizer dir (text prompts / exact ShareGPT token counts), or 'byte' for a server run with "
                 "--tokenizer byte");
  app.add_option("--vocab-size", o.vocab_size, "vocabulary for synthetic token ids (default: tokenizer's, else 32000)");
  app.add_option("--prompt-format", o.prompt_format,
                 "synthetic prompts on /v1/completions: auto (random: text if --tokenizer, else ids; trace: ids) | ids | text")
      ->capture_default_str();
  app.add_option("--max-concurrency", o.max_concurrency, "max requests in flight (0 = unbounded)");
  app.add_option("--request-rate", request_rate, "mean request rate (req/s), Poisson; inf = all at once")
      ->capture_default_str();
  app.add_option("--burstiness", o.burstiness, "gamma shape of inter-arrival gaps (1 = Poisson)")->capture_default_str();
  app.add_option("--warmup-requests", o.warmup_requests, "unmeasured requests sent first")->capture_default_str();
  app.add_option("--seed", o.seed, "random seed (dataset, arrivals)")->capture_default_str();
  app.add_flag("--ignore-eos", o.ignore_eos, "send ignore_eos + min_tokens so every request gets its full output");
  app.add_option("--temperature", o.temperature, "sampling temperature")->capture_default_str();
  app.add_option("--extra-body", extra_body, "JSON object merged into every request body");
  app.add_option("--slo-ttft-ms", o.slo.ttft_ms, "TTFT objective for SLO attainment / goodput");
  app.add_option("--slo-tpot-ms", o.slo.tpot_ms, "TPOT objective for SLO attainment / goodput");
  app.add_option("--num-gpus", o.num_gpus, "GPUs behind the server (per-GPU throughput)")->capture_default_str();
  app.add_option("--output-file", o.output_file, "write the results as JSON");
  app.add_flag("--save-detailed", o.save_detailed, "include per-request arrays in the JSON");
  app.add_option("--metadata", metadata, "JSON object copied into the result JSON");
  app.add_flag("--disable-tqdm", o.disable_tqdm, "no progress bar");
  app.add_option("--num-threads", o.num_threads, "client I/O threads")->capture_default_str();
  app.add_option("--request-timeout-s", o.timeout_s, "per-operation inactivity timeout")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  o.num_prompts_set = np->count() > 0;
  if (!base_url.empty()) {
    auto t = bench::ParseBaseUrl(base_url);
    if (!t.ok()) {
      std::fprintf(stderr, "dsinfer bench serve: %s\n", t.status().ToString().c_str());
      return 2;
    }
    o.target = *t;
  } else {
    o.target.host = host;
    o.target.port = std::to_string(port);
  }
  if (request_rate == "inf" || request_rate == "infinity") {
    o.request_rate = std::numeric_limits<double>::infinity();
  } else {
    try {
      o.request_rate = std::stod(request_rate);
    } catch (...) {
      std::fprintf(stderr, "dsinfer bench serve: bad --request-rate '%s'\n", request_rate.c_str());
      return 2;
    }
    if (!(o.request_rate > 0)) o.request_rate = std::numeric_limits<double>::infinity();
  }
  auto parse_obj = [](const std::string& s, const char* flag, nlohmann::json* out) {
    if (s.empty()) return true;
    *out = nlohmann::json::parse(s, nullptr, false);
    if (out->is_discarded() || !out->is_object()) {
      std::fprintf(stderr, "dsinfer bench serve: %s must be a JSON object\n", flag);
      return false;
    }
    return true;
  };
  if (!parse_obj(extra_body, "--extra-body", &o.extra_body) || !parse_obj(metadata, "--metadata", &o.metadata))
    return 2;
  auto res = bench::RunServeBench(o);
  if (!res.ok()) {
    std::fprintf(stderr, "dsinfer bench serve: %s\n", res.status().ToString().c_str());
    return res.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  // Exit 1 when no request succeeded (the report and JSON are still written).
  return (*res)["completed"].get<int>() > 0 ? 0 : 1;
}

}  // namespace
}  // namespace ds::tools

DS_REGISTER_COMMAND_NAMED(bench_serve, "bench serve",
                          "load-test an OpenAI-compatible server (dsinfer, vLLM, SGLang) with streamed requests",
                          ds::tools::RunBenchServe);
