#include "bench/serve_bench.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "bench/arrival.h"

namespace ds::bench {
namespace {

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

StatusOr<std::string> DiscoverModel(const ServeBenchOptions& opt) {
  auto res = HttpGet(opt.target, "/v1/models", 30.0, opt.api_key);
  if (!res.ok())
    return NotFound("cannot list models at " + opt.target.host + ":" + opt.target.port + ": " +
                    res.status().message() + " (pass --model to skip discovery)");
  if (res->status != 200)
    return NotFound("GET /v1/models returned HTTP " + std::to_string(res->status));
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    return NotFound("GET /v1/models: no model listed (pass --model)");
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace

StatusOr<nlohmann::json> RunServeBench(const ServeBenchOptions& opt) {
  DS_ASSIGN_OR_RETURN(Backend backend, ParseBackend(opt.backend));
  std::string endpoint = opt.endpoint;
  if (endpoint.empty()) endpoint = backend == Backend::kChat ? "/v1/chat/completions" : "/v1/completions";
  if (endpoint.find("chat") != std::string::npos) backend = Backend::kChat;
  if (endpoint.empty() || endpoint[0] != '/') endpoint = "/" + endpoint;
  if (opt.num_prompts < 1 && opt.dataset_name != "trace") return InvalidArgument("--num-prompts must be >= 1");
  if (opt.num_gpus < 1) return InvalidArgument("--num-gpus must be >= 1");

  std::unique_ptr<TextCodec> codec;
  if (!opt.tokenizer_dir.empty()) {
    DS_ASSIGN_OR_RETURN(codec, LoadTextCodec(opt.tokenizer_dir));
  }
  if (opt.prompt_format != "auto" && opt.prompt_format != "ids" && opt.prompt_format != "text")
    return InvalidArgument("--prompt-format must be auto, ids or text");
  if (opt.prompt_format == "text" && !codec) return InvalidArgument("--prompt-format text needs --tokenizer DIR");
  const bool text_prompts = opt.prompt_format == "text" ||
                            (opt.prompt_format == "auto" && codec && opt.dataset_name == "random");
  int vocab = opt.vocab_size > 0 ? opt.vocab_size : (codec ? codec->vocab_size() : 32000);
  TokenRange range = DefaultTokenRange(vocab);

  // Dataset.
  std::vector<BenchRequest> reqs;
  TraceStats trace_stats;
  if (opt.dataset_name == "random") {
    reqs = MakeRandomRequests(opt.num_prompts, opt.random_input_len, opt.random_output_len,
                              opt.random_range_ratio, range, opt.seed);
    if (codec && (backend == Backend::kChat || text_prompts)) {
      // Text prompts: decode, and count what the server will see.
      for (auto& r : reqs) {
        r.prompt_text = FitTextPrompt(*codec, std::move(r.prompt_ids), r.input_len, &r.input_len);
        r.prompt_ids.clear();
      }
    }
  } else if (opt.dataset_name == "sharegpt") {
    if (opt.dataset_path.empty()) return InvalidArgument("--dataset-name sharegpt needs --dataset-path");
    ShareGptOptions so;
    so.num_requests = opt.num_prompts;
    so.fixed_output_len = opt.sharegpt_output_len;
    so.seed = opt.seed;
    so.codec = codec.get();
    DS_ASSIGN_OR_RETURN(reqs, LoadShareGpt(opt.dataset_path, so));
  } else if (opt.dataset_name == "trace") {
    if (opt.dataset_path.empty()) return InvalidArgument("--dataset-name trace needs --dataset-path");
    TraceOptions to;
    to.time_scale = opt.trace_time_scale;
    to.duration_s = opt.trace_duration_s;
    to.max_requests = opt.num_prompts_set ? opt.num_prompts : 0;
    DS_ASSIGN_OR_RETURN(reqs, LoadTrace(opt.dataset_path, to, &trace_stats));
    std::fprintf(stderr,
                 "trace: %d requests over %.1f s (replay time), %lld input tokens, ideal prefix "
                 "hit rate %.1f%%\n",
                 trace_stats.requests, reqs.back().arrival_s, trace_stats.input_tokens,
                 100 * trace_stats.ideal_prefix_hit_rate());
  } else {
    return InvalidArgument("unknown --dataset-name '" + opt.dataset_name + "' (random | sharegpt | trace)");
  }
  if (backend == Backend::kChat && !codec)
    for (const auto& r : reqs)
      if (r.prompt_text.empty())
        return InvalidArgument("the chat endpoint needs text prompts: pass --tokenizer DIR (or byte) for the " +
                               opt.dataset_name + " dataset, or use --endpoint /v1/completions");

  std::string model = opt.model;
  if (model.empty()) {
    DS_ASSIGN_OR_RETURN(model, DiscoverModel(opt));
  }

  RequestBodyOptions bo;
  bo.backend = backend;
  bo.model = model;
  bo.ignore_eos = opt.ignore_eos;
  bo.temperature = opt.temperature;
  bo.text_prompts = text_prompts;
  bo.codec = codec.get();
  bo.range = range;
  bo.seed = opt.seed;
  bo.extra_body = opt.extra_body;

  StreamRunOptions ro;
  ro.path = endpoint;
  ro.max_concurrency = opt.max_concurrency;
  ro.num_threads = opt.num_threads;
  ro.timeout_s = opt.timeout_s;
  ro.api_key = opt.api_key;
  ro.progress = !opt.disable_tqdm;

  // Warm-up, not measured: prompts of the first requests' lengths but fresh random tokens (own
  // seed), so they share no prefix with the measured requests and leave nothing in the
  // server's prefix cache that the measurement could hit.
  if (opt.warmup_requests > 0) {
    size_t w = static_cast<size_t>(opt.warmup_requests);
    std::vector<double> arr(w, 0.0);
    std::vector<int> fb(w);
    std::vector<BenchRequest> wreqs;
    for (size_t i = 0; i < w; ++i) {
      const BenchRequest& src = reqs[i % reqs.size()];
      auto one = MakeRandomRequests(1, std::max(1, src.input_len), std::max(1, src.output_len), 0.0, range,
                                    opt.seed * 0x9E3779B97F4A7C15ull + 0x5741524D55505EEDull + i);
      wreqs.push_back(std::move(one[0]));
      fb[i] = wreqs.back().input_len;
    }
    BodyFn wbody = [&](size_t i) { return BuildRequestBody(bo, wreqs[i], reqs.size() + i); };
    ro.progress_label = "warmup";
    auto wr = RunStreamingRequests(opt.target, ro, arr, wbody, fb);
    int wfail = 0;
    for (const auto& o : wr.outcomes) wfail += !o.success;
    std::fprintf(stderr, "warmup: %zu requests, %d failed, %.2f s\n", w, wfail, wr.duration_s);
    if (wfail == static_cast<int>(w))
      std::fprintf(stderr, "warmup: every request failed: %s\n", wr.outcomes[0].error.c_str());
  }

  // Schedule.
  std::vector<double> arrivals;
  if (opt.dataset_name == "trace") {
    for (const auto& r : reqs) arrivals.push_back(r.arrival_s);
  } else {
    arrivals = GammaArrivals(static_cast<int>(reqs.size()), opt.request_rate, opt.burstiness, opt.seed);
  }
  std::vector<int> fallback;
  for (const auto& r : reqs) fallback.push_back(r.input_len);
  BodyFn body = [&](size_t i) { return BuildRequestBody(bo, reqs[i], i); };
  ro.progress_label = "bench";
  ro.stop_on_signal = true;  // SIGINT / SIGTERM: report what was measured so far
  std::fprintf(stderr, "bench: %zu requests to http://%s:%s%s%s, model '%s', max concurrency %s\n",
               reqs.size(), opt.target.host.c_str(), opt.target.port.c_str(),
               opt.target.path_prefix.c_str(), endpoint.c_str(), model.c_str(),
               opt.max_concurrency > 0 ? std::to_string(opt.max_concurrency).c_str() : "unbounded");
  auto run = RunStreamingRequests(opt.target, ro, arrivals, body, fallback);

  BenchMetrics m = ComputeMetrics(run.outcomes, run.duration_s, opt.num_gpus, opt.slo);
  double shown_rate = opt.dataset_name == "trace" ? reqs.size() / std::max(1e-9, reqs.back().arrival_s)
                                                  : opt.request_rate;
  if (run.interrupted)
    std::printf("Run stopped by a signal after %.1f s: %d request(s) cut off in flight, %d not sent; the "
                "figures below cover the requests that ended before it.\n",
                run.duration_s, run.num_interrupted, run.num_not_sent);
  std::fputs(FormatReport(m, opt.max_concurrency, shown_rate).c_str(), stdout);
  std::fflush(stdout);

  nlohmann::json j = MetricsToJson(m);
  j["interrupted"] = run.interrupted;
  if (run.interrupted) {
    j["num_interrupted_in_flight"] = run.num_interrupted;
    j["num_not_sent"] = run.num_not_sent;
  }
  j["date"] = UtcNow();
  j["backend"] = opt.backend;
  j["endpoint"] = endpoint;
  j["base_url"] = "http://" + opt.target.host + ":" + opt.target.port + opt.target.path_prefix;
  j["model_id"] = model;
  j["dataset_name"] = opt.dataset_name;
  if (!opt.dataset_path.empty()) j["dataset_path"] = opt.dataset_path;
  j["num_prompts"] = reqs.size();
  j["request_rate"] = std::isinf(opt.request_rate) ? nlohmann::json("inf") : nlohmann::json(opt.request_rate);
  j["burstiness"] = opt.burstiness;
  j["max_concurrency"] = opt.max_concurrency > 0 ? nlohmann::json(opt.max_concurrency) : nlohmann::json(nullptr);
  j["ignore_eos"] = opt.ignore_eos;
  j["prompt_format"] = backend == Backend::kChat || text_prompts || opt.dataset_name == "sharegpt" ? "text" : "ids";
  j["seed"] = opt.seed;
  if (opt.dataset_name == "random") {
    j["random_input_len"] = opt.random_input_len;
    j["random_output_len"] = opt.random_output_len;
    j["random_range_ratio"] = opt.random_range_ratio;
  }
  if (opt.dataset_name == "trace") {
    j["trace_time_scale"] = opt.trace_time_scale;
    j["trace_duration_s"] = opt.trace_duration_s;
    j["trace_ideal_prefix_hit_rate"] = trace_stats.ideal_prefix_hit_rate();
  }
  for (auto it = opt.metadata.begin(); it != opt.metadata.end(); ++it) j[it.key()] = it.value();
  if (opt.save_detailed) {
    nlohmann::json in_lens = nlohmann::json::array(), out_lens = nlohmann::json::array(),
                   ttfts = nlohmann::json::array(), e2es = nlohmann::json::array(),
                   starts = nlohmann::json::array(), errors = nlohmann::json::array(),
                   itls = nlohmann::json::array();
    for (const auto& o : run.outcomes) {
      in_lens.push_back(o.prompt_tokens);
      out_lens.push_back(o.output_tokens);
      ttfts.push_back(o.ttft_s);
      e2es.push_back(o.e2e_s);
      starts.push_back(o.start_s);
      errors.push_back(o.error);
      itls.push_back(o.itl_s);
    }
    j["input_lens"] = in_lens;
    j["output_lens"] = out_lens;
    j["ttfts"] = ttfts;
    j["e2els"] = e2es;
    j["start_times"] = starts;
    j["itls"] = itls;
    j["request_errors"] = errors;
  }
  if (!opt.output_file.empty()) {
    std::ofstream f(opt.output_file);
    if (!f) return NotFound("cannot write --output-file '" + opt.output_file + "'");
    f << j.dump(2) << "\n";
    std::fprintf(stderr, "bench: wrote %s\n", opt.output_file.c_str());
  }
  return j;
}

}  // namespace ds::bench
