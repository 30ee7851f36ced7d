// `dsinfer generate`: one prompt through a ModelRunner: the whole prompt in one prefill forward,
// then one token per decode step through the paged latent cache; sampling with cpu::Sample
// (temperature 0 = greedy).
#include <chrono>
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

int RunGenerate(int argc, char** argv) {
  CLI::App app{"Generate tokens for one prompt"};
  std::string model_dir, prompt, prompt_ids_str, device = "cpu", output = "text", mla = "auto";
  int max_tokens = 16, top_k = 0;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  app.add_option("--model", model_dir, "model directory (config.json + safetensors)")->required();
  auto* p_text = app.add_option("--prompt", prompt, "prompt text (needs the tokenizer)");
  auto* p_ids = app.add_option("--prompt-ids", prompt_ids_str, "prompt token ids, comma-separated");
  p_text->excludes(p_ids);
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  app.add_option("--temperature", temperature, "sampling temperature (0 = greedy)")->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-p", top_p, "nucleus sampling mass in (0, 1]")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "sampling seed");
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at an EOS token");
  app.add_option("--device", device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--output", output, "text | json")->check(CLI::IsMember({"text", "json"}));
  app.add_option("--mla", mla, "MLA form: auto (naive prefill, absorbed decode) | naive | absorbed")
      ->check(CLI::IsMember({"auto", "naive", "absorbed"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (top_p <= 0.0f) return Fail(2, "--top-p must be in (0, 1]");

  std::vector<int32_t> prompt_ids;
  if (!prompt.empty() || p_text->count() > 0) {
    return Fail(2, "--prompt: tokenizer not available yet; pass --prompt-ids");
  }
  if (p_ids->count() == 0) return Fail(2, "one of --prompt or --prompt-ids is required");
  if (!ParseIds(prompt_ids_str, &prompt_ids))
    return Fail(2, "--prompt-ids: expected a comma-separated list of non-negative integers");

  if (device == "cuda") {
#ifdef DS_WITH_CUDA
    return Fail(1, "--device cuda: the CUDA model runner is not available in this build yet");
#else
    return Fail(1, "--device cuda: this build has no CUDA backend (configure with -DDS_CUDA=ON)");
#endif
  }

  ds::MlaMode mode = ds::MlaMode::kAuto;
  ds::ParseMlaMode(mla, &mode);
  const auto t_load0 = Clock::now();
  auto cfg = ds::LoadModelConfig(model_dir);
  if (!cfg.ok()) return Fail(1, cfg.status().ToString());
  for (int32_t id : prompt_ids)
    if (id >= cfg->vocab_size)
      return Fail(2, "--prompt-ids: token " + std::to_string(id) + " is outside the vocabulary (" +
                         std::to_string(cfg->vocab_size) + ")");
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + max_tokens;
  ds::CpuRunnerOptions opts;
  opts.num_kv_blocks = static_cast<int>((total + ds::kBlockSize - 1) / ds::kBlockSize);
  opts.mla_mode = mode;
  auto runner_or = ds::CpuModelRunner::Create(model_dir, opts);
  if (!runner_or.ok()) return Fail(1, runner_or.status().ToString());
  auto runner = std::move(runner_or).value();
  const auto t_load1 = Clock::now();

  // One sequence owning blocks 0..n-1.
  ds::ForwardBatch b;
  b.max_blocks = opts.num_kv_blocks;
  for (int i = 0; i < opts.num_kv_blocks; ++i) b.block_tables.push_back(i);
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
    j["text"] = "";  // the tokenizer is not available yet
    j["finish_reason"] = finish;
    j["prompt_tokens"] = prompt_ids.size();
    j["completion_tokens"] = generated.size();
    j["mla"] = ds::MlaModeName(mode);
    j["device"] = device;
    j["timing"] = {{"load_ms", Ms(t_load0, t_load1)}, {"ttft_ms", ttft}, {"decode_ms", decode},
                   {"tpot_ms", tpot}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? " " : "", generated[i]);
    std::printf("\n");
    std::fprintf(stderr, "finish_reason=%s prompt_tokens=%zu completion_tokens=%zu ttft=%.1fms tpot=%.2fms\n",
                 finish.c_str(), prompt_ids.size(), generated.size(), ttft, tpot);
  }
  return 0;
}

}  // namespace

DS_REGISTER_COMMAND(generate, "generate tokens for one prompt (CPU backend)", RunGenerate);
