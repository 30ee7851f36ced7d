// `dsinfer generate`: one prompt through a ModelRunner: the whole prompt in one prefill forward,
// then one token per decode step through the paged latent cache; sampling with cpu::Sample
// (temperature 0 = greedy).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/cpu/ops.h"
#include "common/logging.h"
#include "model/config.h"
#include "runtime/cpu_runner.h"
#include "server/tokenizer.h"
#include "runtime/runner_factory.h"
#include "tools/cli_checks.h"
#include "tools/cuda_cli.h"
#include "tools/command.h"

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// "1,2, 3" -> ids. False on a malformed list.
bool ParseIds(const std::string& s, std::vector<int32_t>* out) {
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) return false;
    item = item.substr(b, e - b + 1);
    size_t used = 0;
    long long v;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      return false;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX) return false;
    out->push_back(static_cast<int32_t>(v));
  }
  return !out->empty();
}

int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "dsinfer generate: %s\n", msg.c_str());
  return code;
}

// The CPU runner (checkpoint weights, fp32) or the CUDA runner (--device cuda), through the
// engine's factory (as serve and bench one-batch: dummy weights / a layer-truncated view, the
// CUDA flags and environment switches).
ds::StatusOr<std::unique_ptr<ds::ModelRunner>> MakeRunner(const std::string& model_dir, const std::string& device,
                                                          const std::string& load_format, int num_layers, int blocks,
                                                          int max_tokens_per_pass, ds::MlaMode mode, uint64_t seed,
                                                          const ds::tools::CudaFlags& cf = {}) {
  ds::RunnerOptions ro;
  ro.model_dir = model_dir;
  ro.device = device;
  ro.load_format = load_format;
  ro.num_layers = num_layers;
  ro.num_kv_blocks = blocks;
  ro.seed = seed;
  ro.mla_mode = mode;
  ro.max_tokens_per_pass = max_tokens_per_pass;
  cf.ApplyTo(&ro);
  return ds::CreateModelRunner(ro);
}

// --bench-batch B --bench-prompt-len P: B random prompts of P tokens, prefilled in one
// Forward (the runner chunks it), then max_tokens - 1 decode steps of B tokens each.
// Prints the prefill time and the decode step time (median, mean, p90).
int RunBench(const ds::ModelConfig& cfg, const std::string& model_dir, const std::string& device,
             const std::string& load_format, int num_layers, int num_kv_blocks, int max_tokens_per_pass,
             ds::MlaMode mode, int B, int P, int max_tokens, float temperature, float top_p, int top_k, uint64_t seed,
             const ds::tools::CudaFlags& cf) {
  const int per_seq = (P + max_tokens + ds::kBlockSize - 1) / ds::kBlockSize;
  const int blocks = num_kv_blocks > 0 ? num_kv_blocks : B * per_seq;
  if (blocks < B * per_seq) return Fail(2, "--num-kv-blocks too small for the benchmark");
  const auto t_load0 = Clock::now();
  auto runner_or =
      MakeRunner(model_dir, device, load_format, num_layers, blocks, max_tokens_per_pass, mode, seed, cf);
  if (!runner_or.ok()) return Fail(1, runner_or.status().ToString());
  auto runner = std::move(runner_or).value();
  const double load_ms = Ms(t_load0, Clock::now());
  const int64_t V = cfg.vocab_size;
  ds::ForwardBatch b;
  b.max_blocks = per_seq;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
  b.query_start.push_back(0);
  for (int s = 0; s < B; ++s) {
    for (int i = 0; i < P; ++i) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      b.token_ids.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(V)));
      b.positions.push_back(i);
    }
    b.query_start.push_back((s + 1) * P);
    b.context_lens.push_back(P);
    for (int k = 0; k < per_seq; ++k) b.block_tables.push_back(s * per_seq + k);
    b.logits_indices.push_back((s + 1) * P - 1);
  }
  std::vector<std::vector<int32_t>> gen(B);
  int64_t nonfinite = 0;
  auto sample_all = [&](const ds::ForwardOutput& out, int step) {
    for (int s = 0; s < B; ++s) {
      const float* lg = out.logits.data() + static_cast<int64_t>(s) * V;
      for (int64_t i = 0; i < V; ++i) nonfinite += !std::isfinite(lg[i]);
      gen[s].push_back(ds::cpu::Sample({lg, V, temperature, top_p, top_k, seed + s, static_cast<uint64_t>(step)}));
    }
  };
  ds::ForwardOutput out;
  const auto tp0 = Clock::now();
  ds::Status st = runner->Forward(b, &out);
  if (!st.ok()) return Fail(1, "prefill: " + st.ToString());
  const double prefill_ms = Ms(tp0, Clock::now());
  std::fprintf(stderr, "bench: prefill of %d x %d tokens done in %.1f ms\n", B, P, prefill_ms);
  sample_all(out, 0);
  std::vector<double> step_ms;
  for (int step = 1; step < max_tokens; ++step) {
    ds::ForwardBatch d;
    d.max_blocks = per_seq;
    d.block_tables = b.block_tables;
    d.query_start.push_back(0);
    for (int s = 0; s < B; ++s) {
      d.token_ids.push_back(gen[s].back());
      d.positions.push_back(P + step - 1);
      d.query_start.push_back(s + 1);
      d.context_lens.push_back(P + step);
      d.logits_indices.push_back(s);
    }
    const auto t0 = Clock::now();
    st = runner->Forward(d, &out);
    if (!st.ok()) return Fail(1, "decode step " + std::to_string(step) + ": " + st.ToString());
    step_ms.push_back(Ms(t0, Clock::now()));
    if (step % 32 == 0) std::fprintf(stderr, "bench: decode step %d: %.2f ms\n", step, step_ms.back());
    sample_all(out, step);
  }
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double v : step_ms) mean += v;
  mean = step_ms.empty() ? 0 : mean / step_ms.size();
  const double med = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  const double p90 = sorted.empty() ? 0 : sorted[sorted.size() * 9 / 10];
  const bool on_cuda = device == "cuda";
  std::printf("bench: device=%s model=%s layers=%d load=%s fp8_gemm=%s cuda_graphs=%s decode_attention=%s "
              "precise_activations=%s batch=%d prompt_len=%d generated=%d per sequence\n",
              device.c_str(), cfg.model_type.c_str(), cfg.num_hidden_layers, load_format.c_str(), cf.fp8_gemm.c_str(),
              on_cuda && !cf.disable_graphs ? "on" : "off", on_cuda ? cf.decode_attn.c_str() : "cpu",
              on_cuda && cf.precise_activations ? "on" : "off", B, P,
              static_cast<int>(gen[0].size()));
  std::printf("load_ms=%.0f\n", load_ms);
  std::printf("prefill_ms=%.1f (%d tokens, %.0f tok/s)\n", prefill_ms, B * P, B * P / (prefill_ms / 1000.0));
  std::printf("decode_step_ms median=%.2f mean=%.2f p90=%.2f over %zu steps (%.0f output tok/s)\n", med, mean, p90,
              step_ms.size(), mean > 0 ? B / (mean / 1000.0) : 0.0);
  std::printf("nonfinite_logits=%lld\nseq0_tokens:", static_cast<long long>(nonfinite));
  for (size_t i = 0; i < std::min<size_t>(16, gen[0].size()); ++i) std::printf(" %d", gen[0][i]);
  std::printf("\n");
  return nonfinite == 0 ? 0 : 1;
}

int RunGenerate(int argc, char** argv) {
  CLI::App app{"Generate tokens for one prompt"};
  std::string model_dir, tokenizer_dir, prompt, prompt_ids_str, device = "cpu", output = "text", mla = "auto";
  int max_tokens = 16, top_k = 0;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string load_format = "auto";
  int num_layers = 0, num_kv_blocks = 0, max_tokens_per_pass = 8192, bench_batch = 0, bench_prompt_len = 0;
  app.add_option("--model", model_dir, "model directory (config.json + safetensors)")->required();
  app.add_option("--load-format", load_format, "auto (safetensors) | dummy (seeded random weights from config.json; --seed)")
      ->check(CLI::IsMember({"auto", "dummy"}))->capture_default_str();
  app.add_option("--num-layers", num_layers, "run only the first N decoder layers (0 = all)")->check(ds::tools::kNonNegative);
  app.add_option("--num-kv-blocks", num_kv_blocks, "KV pool size in 64-token blocks (0 = what the run needs)")
      ->check(ds::tools::kNonNegative);
  app.add_option("--max-tokens-per-pass", max_tokens_per_pass, "CUDA: tokens per model pass (longer prefills are chunked)")
      ->check(CLI::Range(1, 1 << 20));
  ds::tools::CudaFlags cuda_flags;
  cuda_flags.AddTo(app);
  app.add_option("--bench-batch", bench_batch, "benchmark: this many random prompts (ignores --prompt-ids)")
      ->check(ds::tools::kNonNegative);
  app.add_option("--bench-prompt-len", bench_prompt_len, "benchmark: tokens per random prompt")->check(ds::tools::kNonNegative);
  app.add_option("--tokenizer", tokenizer_dir, "tokenizer directory (tokenizer.json); default: --model");
  auto* p_text = app.add_option("--prompt", prompt, "prompt text, encoded with the tokenizer (BOS per tokenizer_config.json)");
  auto* p_ids = app.add_option("--prompt-ids", prompt_ids_str, "prompt token ids, comma-separated");
  p_text->excludes(p_ids);
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature (0 = greedy)")->check(CLI::Range(0.0f, 100.0f))->capture_default_str();
  app.add_option("--top-p", top_p, "nucleus sampling mass in (0, 1]")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = all)")->check(ds::tools::kNonNegative);
  app.add_option("--seed", seed, "sampling seed");
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at an EOS token");
  app.add_option("--device", device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--output", output, "text | json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  app.add_option("--mla", mla, "MLA form: auto (naive prefill, absorbed decode) | naive | absorbed")
      ->check(CLI::IsMember({"auto", "naive", "absorbed"}))->capture_default_str();
  std::string expert_map_file, dump_expert_load;
  app.add_option("--expert-map", expert_map_file, "CPU: logical->physical expert map JSON (dsinfer eplb --output)");
  app.add_option("--dump-expert-load", dump_expert_load,
                 "CPU: write the per-layer expert token counts of the run (input of dsinfer eplb --load)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (top_p <= 0.0f) return Fail(2, "--top-p must be in (0, 1]");

  std::vector<int32_t> prompt_ids;
  const bool bench = bench_batch > 0;
  if (bench && bench_prompt_len <= 0) return Fail(2, "--bench-batch needs --bench-prompt-len > 0");
  if (!bench) {
    if (p_text->count() == 0 && p_ids->count() == 0) return Fail(2, "one of --prompt or --prompt-ids is required");
    if (p_ids->count() > 0 && !ParseIds(prompt_ids_str, &prompt_ids))
      return Fail(2, "--prompt-ids: expected a comma-separated list of non-negative integers");
  }
  // The tokenizer: required for --prompt; otherwise used for the output text when present.
  std::unique_ptr<ds::Tokenizer> tokenizer;
  {
    const std::string dir = tokenizer_dir.empty() ? model_dir : tokenizer_dir;
    const bool have = std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json");
    if (have) {
      auto tok = ds::Tokenizer::Load(dir);
      if (!tok.ok()) return Fail(1, "--tokenizer: " + tok.status().ToString());
      tokenizer = std::move(tok).value();
    } else if (p_text->count() > 0 || !tokenizer_dir.empty()) {
      return Fail(2, "--tokenizer: no tokenizer.json in " + dir +
                         " (pass --tokenizer DIR or --prompt-ids; the byte-level test tokenizer, 'byte', is for "
                         "serve and bench serve only)");
    }
    if (!bench && p_text->count() > 0) prompt_ids = tokenizer->Encode(prompt, /*add_special_tokens=*/true);
    if (!bench && prompt_ids.empty()) return Fail(2, "the prompt is empty");
  }
  if (device == "cuda") {
#ifndef DS_WITH_CUDA
    return Fail(1, "--device cuda: this build has no CUDA backend (configure with -DDS_CUDA=ON)");
#endif
  }

  ds::MlaMode mode = ds::MlaMode::kAuto;
  ds::ParseMlaMode(mla, &mode);
  const auto t_load0 = Clock::now();
  auto cfg = ds::LoadModelConfig(model_dir);
  if (!cfg.ok()) return Fail(1, cfg.status().ToString());
  if (num_layers > 0 && num_layers < cfg->num_hidden_layers) cfg->num_hidden_layers = num_layers;
  if (bench && (!expert_map_file.empty() || !dump_expert_load.empty()))
    return Fail(2, "--expert-map / --dump-expert-load: not with --bench-batch");
  if (bench) return RunBench(*cfg, model_dir, device, load_format, num_layers, num_kv_blocks, max_tokens_per_pass,
                             mode, bench_batch, bench_prompt_len, max_tokens, temperature, top_p, top_k, seed, cuda_flags);
  for (int32_t id : prompt_ids)
    if (id >= cfg->vocab_size)
      return Fail(2, "prompt token " + std::to_string(id) + " is outside the model's vocabulary (" +
                         std::to_string(cfg->vocab_size) + ")" +
                         (p_text->count() > 0 ? "; the tokenizer does not fit this model (--tokenizer)" : ""));
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + max_tokens;
  const int blocks = num_kv_blocks > 0 ? num_kv_blocks : static_cast<int>((total + ds::kBlockSize - 1) / ds::kBlockSize);
  auto runner_or = MakeRunner(model_dir, device, load_format, num_layers, blocks, max_tokens_per_pass, mode, seed, cuda_flags);
  if (!runner_or.ok()) return Fail(1, runner_or.status().ToString());
  auto runner = std::move(runner_or).value();
  auto* cpu_runner = dynamic_cast<ds::CpuModelRunner*>(runner.get());
  if ((!expert_map_file.empty() || !dump_expert_load.empty()) && cpu_runner == nullptr)
    return Fail(2, "--expert-map / --dump-expert-load: only with --device cpu in this build");
  if (!expert_map_file.empty()) {
    auto m = ds::ExpertMap::LoadFile(expert_map_file, cfg->n_routed_experts);
    if (!m.ok()) return Fail(2, m.status().ToString());
    ds::Status st = cpu_runner->SetExpertMap(std::move(m).value());
    if (!st.ok()) return Fail(2, st.ToString());
  }
  const auto t_load1 = Clock::now();

  // One sequence owning blocks 0..n-1.
  ds::ForwardBatch b;
  b.max_blocks = blocks;
  for (int i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  b.query_start = {0, 0};
  b.context_lens = {0};
  const int64_t V = cfg->vocab_size;
  std::vector<int32_t> generated;
  std::string finish = "length";
  std::vector<int32_t> next = prompt_ids;
  int32_t ctx = 0;
  const auto t0 = Clock::now();
  Clock::time_point t_first = t0;
  for (int step = 0; step < max_tokens; ++step) {
    b.token_ids = next;
    b.positions.clear();
    for (size_t i = 0; i < next.size(); ++i) b.positions.push_back(ctx + static_cast<int32_t>(i));
    ctx += static_cast<int32_t>(next.size());
    b.query_start[1] = static_cast<int32_t>(next.size());
    b.context_lens[0] = ctx;
    b.logits_indices = {static_cast<int32_t>(next.size()) - 1};
    ds::ForwardOutput out;
    ds::Status st = runner->Forward(b, &out);
    if (!st.ok()) return Fail(1, st.ToString());
    const int32_t tok = ds::cpu::Sample({out.logits.data(), V, temperature, top_p, top_k, seed,
                                         static_cast<uint64_t>(step)});
    if (step == 0) t_first = Clock::now();
    generated.push_back(tok);
    bool eos = false;
    for (int e : cfg->eos_token_ids) eos |= (tok == e);
    if (eos && !ignore_eos) {
      finish = "stop";
      break;
    }
    next = {tok};
  }
  const auto t1 = Clock::now();
  const double ttft = Ms(t0, t_first), decode = Ms(t_first, t1);
  const double tpot = generated.size() > 1 ? decode / static_cast<double>(generated.size() - 1) : 0.0;

  if (output == "json") {
    nlohmann::json j;
    j["token_ids"] = generated;
    j["text"] = tokenizer ? tokenizer->Decode(generated, /*skip_special=*/true) : "";
    j["finish_reason"] = finish;
    j["prompt_tokens"] = prompt_ids.size();
    j["completion_tokens"] = generated.size();
    j["mla"] = ds::MlaModeName(mode);
    j["device"] = device;
    j["timing"] = {{"load_ms", Ms(t_load0, t_load1)}, {"ttft_ms", ttft}, {"decode_ms", decode},
                   {"tpot_ms", tpot}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (tokenizer) {
      std::printf("%s\n", tokenizer->Decode(generated, /*skip_special=*/true).c_str());
    } else {
      for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? " " : "", generated[i]);
      std::printf("\n");
    }
    std::fprintf(stderr, "finish_reason=%s prompt_tokens=%zu completion_tokens=%zu ttft=%.1fms tpot=%.2fms\n",
                 finish.c_str(), prompt_ids.size(), generated.size(), ttft, tpot);
  }
  if (!dump_expert_load.empty()) {
    std::ofstream f(dump_expert_load);
    f << cpu_runner->expert_load().Snapshot().ToJson();
    if (!f) return Fail(1, "cannot write " + dump_expert_load);
  }
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND(generate, "generate tokens for one prompt (CPU or CUDA backend)", RunGenerate);
