// `dsinfer bench serve`: the serving benchmark driver (dataset -> schedule -> streamed
// requests -> metrics report / JSON). See docs/bench.md.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/client.h"
#include "bench/dataset.h"
#include "bench/metrics.h"
#include "bench/request.h"

namespace ds::bench {

struct ServeBenchOptions {
  HttpTarget target;
  std::string endpoint;            // empty: from the backend
  std::string backend = "openai";  // openai | openai-chat
  std::string model;               // empty: first of GET /v1/models
  std::string api_key;
  // Dataset.
  std::string dataset_name = "random";  // random | sharegpt | trace
  std::string dataset_path;
  int num_prompts = 1000;
  bool num_prompts_set = false;    // trace: cap only when given explicitly
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int sharegpt_output_len = 0;
  double trace_time_scale = 1.0;
  double trace_duration_s = 0.0;
  std::string tokenizer_dir;       // text prompts / ShareGPT token counts
  int vocab_size = 0;              // token-id range for synthetic prompts (0: tokenizer's, else 32000)
  // Synthetic prompts (random, trace) on the completions endpoint: "ids" (token id list),
  // "text" (decoded with --tokenizer), "auto" (random: text when a tokenizer is given, else
  // ids; trace: ids, so shared prefixes stay token-exact). The chat endpoint always sends text.
  std::string prompt_format = "auto";
  // Load.
  int max_concurrency = 0;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int warmup_requests = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  double temperature = 0.0;
  nlohmann::json extra_body = nlohmann::json::object();
  // Report.
  SloConfig slo;
  int num_gpus = 1;
  std::string output_file;
  bool save_detailed = false;      // per-request arrays in the JSON
  nlohmann::json metadata = nlohmann::json::object();  // copied into the JSON
  bool disable_tqdm = false;
  int num_threads = 2;
  double timeout_s = 3600;
};

// Loads the tokenizer at `dir` as a TextCodec (dsinfer's tokenizer; text_codec.cpp).
StatusOr<std::unique_ptr<TextCodec>> LoadTextCodec(const std::string& dir);

// Runs the benchmark, prints the report to stdout, writes the JSON if asked. Returns the
// result JSON (also on partial failure of requests); a non-OK Status only for bad options or
// an unreachable server when the model name had to be discovered.
StatusOr<nlohmann::json> RunServeBench(const ServeBenchOptions& opt);

}  // namespace ds::bench
