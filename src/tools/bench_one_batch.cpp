// `dsinfer bench one-batch`: a fixed batch (B sequences x L prompt tokens x O output tokens)
// straight through a ModelRunner, no server: one prefill forward over all B*L tokens, then
// O-1 decode steps of B tokens (greedy). Prints prefill latency and each decode step's time
// beside its roofline time (bench/roofline.h). `dsinfer bench roofline` prints the roofline
// alone (no model run).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/dataset.h"
#include "bench/hw_measure.h"
#include "bench/metrics.h"
#include "bench/roofline.h"
#include "model/config.h"
#include "model/mla.h"
#include "runtime/cpu_runner.h"
#include "runtime/runner_factory.h"
#include "tools/cli_checks.h"
#include "tools/cuda_cli.h"
#include "tools/command.h"


namespace ds::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

int Fail(const char* who, int code, const std::string& msg) {
  std::fprintf(stderr, "dsinfer bench %s: %s\n", who, msg.c_str());
  return code;
}

StatusOr<nlohmann::json> ReadConfigJson(const std::string& model) {
  fs::path p = fs::is_directory(model) ? fs::path(model) / "config.json" : fs::path(model);
  std::ifstream f(p);
  if (!f) return NotFound("cannot open " + p.string());
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(p.string() + ": not a JSON object");
  return j;
}

std::string HumanBytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof(buf), "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof(buf), "%.2f MB", b / 1e6);
  else std::snprintf(buf, sizeof(buf), "%.1f KB", b / 1e3);
  return buf;
}

struct HwFlags {
  double mem_bw_gbps = 0, flops_tflops = 0;
};

// Fills missing rates: measured on the CPU; on CUDA they must be given (for now).
Status ResolveHardware(const std::string& device, HwFlags* hw, std::string* source) {
  *source = "given";
  if (device == "cpu") {
    if (hw->mem_bw_gbps <= 0) {
      hw->mem_bw_gbps = bench::MeasureCpuReadBandwidthGBps();
      *source = "measured";
    }
    if (hw->flops_tflops <= 0) {
      hw->flops_tflops = bench::MeasureCpuSgemmTflops();
      *source = "measured";
    }
    return Status::Ok();
  }
  if (hw->mem_bw_gbps <= 0 || hw->flops_tflops <= 0)
    return InvalidArgument("--device cuda: pass --mem-bw-gbps and --flops-tflops (measured rates of the GPU)");
  return Status::Ok();
}

void AddRooflineFlags(CLI::App& app, HwFlags* hw) {
  app.add_option("--mem-bw-gbps", hw->mem_bw_gbps, "memory bandwidth for the roofline, GB/s (cpu default: measured)");
  app.add_option("--flops-tflops", hw->flops_tflops, "GEMM rate for the roofline, TFLOP/s (cpu default: measured)");
}

void PrintCostLine(const char* what, const bench::StepCost& c, const bench::RooflineTime& t, const bench::Hardware& hw) {
  std::printf("  %-8s weights %s, KV %s, %.4g GFLOP -> roofline %.3f ms (memory %.3f, compute %.3f; %s-bound)\n",
              what, HumanBytes(c.weight_bytes()).c_str(), HumanBytes(c.kv_bytes()).c_str(), c.total_flops() / 1e9,
              t.ms(), t.memory_ms, t.compute_ms, t.bound());
  auto p = bench::RooflinePartsOf(c, hw);
  std::printf("           by part (ms, each max(memory, compute)): attention %.3f, MoE %.3f, dense MLP %.3f, "
              "embedding+lm_head %.3f\n",
              p.attention.ms(), p.moe.ms(), p.dense.ms(), p.other.ms());
}

nlohmann::json PartsToJson(const bench::StepCost& c, const bench::Hardware& hw) {
  auto p = bench::RooflinePartsOf(c, hw);
  auto one = [](const bench::RooflineTime& t) {
    return nlohmann::json{{"ms", t.ms()}, {"memory_ms", t.memory_ms}, {"compute_ms", t.compute_ms}};
  };
  return {{"attention", one(p.attention)}, {"moe", one(p.moe)}, {"dense", one(p.dense)}, {"other", one(p.other)}};
}

// Device time by part from a runner profile (phase -> ms; ModelRunner::TakeProfile), the phases
// of one prefix ("prefill/" or "decode/"), divided by `div` (e.g. the number of decode steps).
struct PartTimes {
  double attention = 0, moe = 0, dense = 0, other = 0;
  double total() const { return attention + moe + dense + other; }
};
PartTimes PartsOfProfile(const std::map<std::string, double>& prof, const std::string& prefix, double div) {
  PartTimes t;
  for (const auto& [name, ms] : prof) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string ph = name.substr(prefix.size());
    if (ph.rfind("#", 0) == 0) continue;  // counters, not phases
    const double v = ms / div;
    if (ph.rfind("attn_", 0) == 0) t.attention += v;
    else if (ph.rfind("moe_", 0) == 0) t.moe += v;
    else if (ph == "dense_mlp") t.dense += v;
    else t.other += v;
  }
  return t;
}

// Passes the profile covers for `prefix` (the runner's "#passes" counter), else `fallback`.
double ProfiledPasses(const std::map<std::string, double>& prof, const std::string& prefix, double fallback) {
  auto it = prof.find(prefix + "#passes");
  return it != prof.end() && it->second > 0 ? it->second : fallback;
}

nlohmann::json ProfileJson(const std::map<std::string, double>& prof, const std::string& prefix, double div,
                           const ModelConfig& cfg) {
  nlohmann::json phases = nlohmann::json::object();
  for (const auto& [name, ms] : prof)
    if (name.rfind(prefix, 0) == 0 && name.compare(prefix.size(), 1, "#") != 0)
      phases[name.substr(prefix.size())] = ms / div;
  const PartTimes t = PartsOfProfile(prof, prefix, div);
  const int layers = cfg.num_hidden_layers;
  int moe_layers = 0;
  for (int l = 0; l < layers; ++l) moe_layers += cfg.is_moe_layer(l) ? 1 : 0;
  const int dense_layers = layers - moe_layers;
  return {{"phases_ms", phases},
          {"parts_ms", {{"attention", t.attention}, {"moe", t.moe}, {"dense", t.dense}, {"other", t.other}}},
          {"per_layer_ms",
           {{"attention", layers ? t.attention / layers : 0.0},
            {"moe", moe_layers ? t.moe / moe_layers : 0.0},
            {"dense", dense_layers ? t.dense / dense_layers : 0.0}}},
          {"layers", layers}, {"moe_layers", moe_layers}, {"dense_layers", dense_layers}, {"total_ms", t.total()},
          {"passes_averaged", div}};
}

void PrintProfile(const char* what, const std::map<std::string, double>& prof, const std::string& prefix, double div,
                  const ModelConfig& cfg) {
  const nlohmann::json j = ProfileJson(prof, prefix, div, cfg);
  const double tot = j["total_ms"].get<double>();
  if (tot <= 0) return;
  auto pct = [&](const char* k) { return 100.0 * j["parts_ms"][k].get<double>() / tot; };
  std::printf("  %s device time by part (profiled pass%s): attention %.3f ms (%.0f%%; %.4f per layer), "
              "MoE %.3f (%.0f%%; %.4f per MoE layer), dense MLP %.3f (%.0f%%; %.4f per dense layer), other %.3f (%.0f%%)\n",
              what, div > 1 ? "es, per step" : "", j["parts_ms"]["attention"].get<double>(), pct("attention"),
              j["per_layer_ms"]["attention"].get<double>(), j["parts_ms"]["moe"].get<double>(), pct("moe"),
              j["per_layer_ms"]["moe"].get<double>(), j["parts_ms"]["dense"].get<double>(), pct("dense"),
              j["per_layer_ms"]["dense"].get<double>(), j["parts_ms"]["other"].get<double>(), pct("other"));
  std::printf("    phases:");
  for (const auto& [k, v] : j["phases_ms"].items()) std::printf(" %s=%.3f", k.c_str(), v.get<double>());
  std::printf("\n");
}

int RunOneBatch(int argc, char** argv) {
  CLI::App app{"Time prefill and decode steps of a fixed batch through a ModelRunner, beside the roofline",
               "dsinfer bench one-batch"};
  std::string model, load_format = "auto", device = "cpu", mla = "auto", output_file;
  int num_layers = 0, batch = 1, input_len = 128, output_len = 16, print_steps = 16;
  uint64_t seed = 0;
  bool profile = false, warmup = true;
  ds::tools::CudaFlags cuda_flags;
  HwFlags hw;
  app.add_option("--model", model, "model dir (config.json [+ safetensors])")->required();
  app.add_option("--load-format", load_format, "auto (checkpoint) | dummy (random weights from the config)")
      ->check(CLI::IsMember({"auto", "dummy"}))->capture_default_str();
  app.add_option("--num-layers", num_layers, "truncate to the first N layers (0 = all)")->check(ds::tools::kNonNegative);
  app.add_option("--batch-size", batch, "sequences")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--input-len", input_len, "prompt tokens per sequence")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--output-len", output_len, "output tokens per sequence (1 from prefill + O-1 decode steps)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--device", device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--mla", mla, "auto | naive | absorbed")->check(CLI::IsMember({"auto", "naive", "absorbed"}));
  app.add_option("--seed", seed, "prompt tokens / dummy weights seed");
  app.add_option("--print-steps", print_steps, "decode steps printed (evenly spaced; all if O-1 <= this)");
  app.add_option("--output-file", output_file, "write results as JSON");
  cuda_flags.AddTo(app);
  bool no_warmup = false, disable_overlap = false;
  float temperature = 0.0f;
  app.add_option("--temperature", temperature,
                 "sampling temperature of every row (runner sampling only: the CUDA runner; 0 = greedy argmax)")
      ->check(CLI::Range(0.0f, 100.0f))->capture_default_str();
  app.add_flag("--disable-overlap-schedule", disable_overlap,
               "run each decode step to its end before preparing the next (default: a runner that samples on the "
               "device, the CUDA runner, has the next step queued while this one runs; SGLang's overlap scheduler)");
  app.add_flag("--no-warmup", no_warmup, "skip the untimed warm-up pass (<= 8,192 prompt tokens) before the prefill");
  app.add_flag("--profile", profile,
               "cuda: device time per phase (attention / MoE / dense / other, per layer), CUDA events "
               "(graph decode steps through event-record nodes)");
  AddRooflineFlags(app, &hw);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  warmup = !no_warmup;
  const char* who = "one-batch";
  const bool cuda = device == "cuda";
  if (profile && !cuda)
    std::fprintf(stderr, "one-batch: --profile: the CPU runner records no per-phase times; only --device cuda is "
                         "profiled (the roofline's per-part split is printed either way)\n");
  std::string hw_source;
  Status hs = ResolveHardware(device, &hw, &hw_source);
  if (!hs.ok()) return Fail(who, 2, hs.ToString());
  auto cj = ReadConfigJson(model);
  if (!cj.ok()) return Fail(who, 1, cj.status().ToString());

  // The model's shape: its config, truncated like the runner truncates it.
  if (num_layers > 0 && num_layers < cj->value("num_hidden_layers", 0)) (*cj)["num_hidden_layers"] = num_layers;
  auto cfg_or = ParseModelConfig(*cj);
  if (!cfg_or.ok()) return Fail(who, 1, cfg_or.status().ToString());
  const ModelConfig cfg = *cfg_or;

  const int total_len = input_len + output_len;
  const int blocks_per_seq = (total_len + kBlockSize - 1) / kBlockSize;
  MlaMode mla_mode = MlaMode::kAuto;
  ParseMlaMode(mla, &mla_mode);
  if (cuda && mla_mode != MlaMode::kAuto) return Fail(who, 2, "--mla: only auto with --device cuda");
  // The engine's runner factory: CPU (fp32; dummy weights / truncation through a scratch
  // checkpoint) or CUDA (its own dummy weights on the device).
  RunnerOptions ro;
  ro.model_dir = model;
  ro.device = device;
  ro.load_format = load_format;
  ro.num_layers = num_layers;
  ro.num_kv_blocks = blocks_per_seq * batch;
  ro.seed = seed;
  cuda_flags.ApplyTo(&ro);
  ro.mla_mode = mla_mode;
  ro.profile = profile;
  auto t_load = Clock::now();
  auto runner_or = CreateModelRunner(ro);
  if (!runner_or.ok()) return Fail(who, 1, runner_or.status().ToString());
  std::unique_ptr<ModelRunner> runner = std::move(runner_or).value();
  if (runner->config().num_hidden_layers != cfg.num_hidden_layers)
    return Fail(who, 1, "runner has " + std::to_string(runner->config().num_hidden_layers) + " layers, expected " +
                            std::to_string(cfg.num_hidden_layers));
  std::fprintf(stderr, "one-batch: loaded %d layers in %.1f s\n", cfg.num_hidden_layers, Ms(t_load, Clock::now()) / 1e3);

  const bench::Hardware hwr{hw.mem_bw_gbps, hw.flops_tflops};
  const bench::RooflineDtypes dt = bench::DtypesFor(cfg, cuda);

  // Batch layout: sequence s owns blocks [s * blocks_per_seq, (s+1) * blocks_per_seq).
  ForwardBatch b;
  b.max_blocks = blocks_per_seq;
  for (int s = 0; s < batch; ++s)
    for (int k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(s * blocks_per_seq + k);
  bench::TokenRange range = bench::DefaultTokenRange(cfg.vocab_size);
  std::mt19937_64 rng(seed);
  b.query_start.push_back(0);
  for (int s = 0; s < batch; ++s) {
    for (int i = 0; i < input_len; ++i) {
      b.token_ids.push_back(range.lo + static_cast<int32_t>(rng() % (range.hi - range.lo)));
      b.positions.push_back(i);
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(input_len);
    b.logits_indices.push_back(b.num_tokens() - 1);
  }
  const int64_t V = cfg.vocab_size;
  // Greedy next tokens: sampled by the runner where it can (the CUDA runner: on the device, B
  // ids to the host per step, as the engine does), else argmax over the host logits.
  const bool runner_samples = runner->CanSample();
  if (!runner_samples && temperature > 0.0f)
    return Fail(who, 2, "--temperature needs a runner that samples (--device cuda)");
  // Greedy (temperature 0) or sampled rows, each its own seed; the step index is set per step.
  const auto row_sampling = [&](int s, int step) {
    RowSampling r;
    r.temperature = temperature;
    r.seed = seed * 1000003ull + static_cast<uint64_t>(s);
    r.step = static_cast<uint64_t>(step);
    return r;
  };
  if (runner_samples)
    for (int s = 0; s < batch; ++s) b.sampling.push_back(row_sampling(s, 0));
  auto argmax_rows = [&](const ForwardOutput& out, std::vector<int32_t>* next) {
    if (runner_samples) {
      *next = out.token_ids;
      return;
    }
    next->resize(batch);
    for (int s = 0; s < batch; ++s) {
      const float* row = out.logits.data() + static_cast<int64_t>(s) * V;
      (*next)[s] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  };

  ForwardOutput out;
  // Warm-up (untimed): one pass over the first sequences' prompts, at most one runner pass of
  // tokens (8,192), so first-use costs (buffer growth, GEMM plans, offsets) stay out of the
  // timed prefill. It writes the same KV the timed prefill writes again.
  if (warmup) {
    ForwardBatch w;
    w.max_blocks = b.max_blocks;
    w.query_start.push_back(0);
    for (int s = 0; s < batch && w.num_tokens() + input_len <= std::max(8192, input_len); ++s) {
      w.token_ids.insert(w.token_ids.end(), b.token_ids.begin() + b.query_start[s], b.token_ids.begin() + b.query_start[s + 1]);
      w.positions.insert(w.positions.end(), b.positions.begin() + b.query_start[s], b.positions.begin() + b.query_start[s + 1]);
      w.query_start.push_back(w.num_tokens());
      w.context_lens.push_back(input_len);
      w.block_tables.insert(w.block_tables.end(), b.block_tables.begin() + s * b.max_blocks,
                            b.block_tables.begin() + (s + 1) * b.max_blocks);
      w.logits_indices.push_back(w.num_tokens() - 1);
    }
    if (runner_samples) w.sampling.assign(w.logits_indices.size(), RowSampling{});
    ForwardOutput wout;
    Status ws = runner->Forward(w, &wout);
    if (!ws.ok()) return Fail(who, 1, "warm-up: " + ws.ToString());
    runner->TakeProfile();
  }
  auto t0 = Clock::now();
  Status st = runner->Forward(b, &out);
  double prefill_ms = Ms(t0, Clock::now());
  if (!st.ok()) return Fail(who, 1, "prefill: " + st.ToString());
  std::vector<int32_t> next;
  argmax_rows(out, &next);
  const std::map<std::string, double> prefill_prof = runner->TakeProfile();
  auto prefill_cost = bench::EstimateStep(cfg, bench::PrefillShape(batch, input_len), dt);
  auto prefill_rl = bench::RooflineTimeOf(prefill_cost, hwr);

  // Decode steps.
  std::vector<double> step_ms, step_rl_ms;
  std::vector<int> step_ctx;
  b.query_start.resize(batch + 1);
  b.logits_indices.resize(batch);
  // Overlap scheduling: step k + 1 is launched (its ids are step k's sampled rows, read on the
  // device) before step k is finished, so the host's share of a step (inputs, graph launch, the
  // ids' copy back) runs while the device works. A step's time is then the interval between two
  // finished steps, as a client sees tokens arrive.
  const bool overlap = runner_samples && runner->CanOverlap() && !disable_overlap && output_len > 2;
  // Decode step `step`'s batch (its ids the host's `next`, or, from_prev, the previous launched
  // step's sampled rows); returns the context after it.
  auto set_step = [&](int step, bool from_prev) {
    const int ctx = input_len + step;  // tokens in cache after this step
    if (from_prev) {
      b.token_ids.assign(batch, 0);
      b.prev_sample_rows.resize(batch);
      std::iota(b.prev_sample_rows.begin(), b.prev_sample_rows.end(), 0);
    } else {
      b.token_ids = next;
      b.prev_sample_rows.clear();
    }
    b.positions.assign(batch, ctx - 1);
    for (int s = 0; s <= batch; ++s) b.query_start[s] = s;
    b.context_lens.assign(batch, ctx);
    for (int s = 0; s < batch; ++s) b.logits_indices[s] = s;
    if (runner_samples)
      for (int s = 0; s < batch; ++s) b.sampling[s] = row_sampling(s, step);
    return ctx;
  };
  auto record = [&](int ctx, double ms) {
    step_ms.push_back(ms);
    step_rl_ms.push_back(bench::RooflineTimeOf(bench::EstimateStep(cfg, bench::DecodeShape(batch, ctx), dt), hwr).ms());
    step_ctx.push_back(ctx);
  };
  if (overlap) {
    auto t_prev = Clock::now();
    int ctx_prev = set_step(1, false);
    st = runner->Launch(b);
    if (!st.ok()) return Fail(who, 1, "decode step 1: " + st.ToString());
    for (int step = 2; step <= output_len; ++step) {
      int ctx = 0;
      if (step < output_len) {
        ctx = set_step(step, true);
        st = runner->Launch(b);
        if (!st.ok()) return Fail(who, 1, "decode step " + std::to_string(step) + ": " + st.ToString());
      }
      st = runner->Finish(&out);
      if (!st.ok()) return Fail(who, 1, "decode step " + std::to_string(step - 1) + ": " + st.ToString());
      const auto now = Clock::now();
      record(ctx_prev, Ms(t_prev, now));
      t_prev = now;
      ctx_prev = ctx;
      argmax_rows(out, &next);
    }
  }
  for (int step = 1; !overlap && step < output_len; ++step) {
    const int ctx = set_step(step, false);
    auto ts = Clock::now();
    st = runner->Forward(b, &out);
    double ms = Ms(ts, Clock::now());
    if (!st.ok()) return Fail(who, 1, "decode step " + std::to_string(step) + ": " + st.ToString());
    argmax_rows(out, &next);
    record(ctx, ms);
  }

  const std::map<std::string, double> decode_prof = runner->TakeProfile();
  // Per decode step: divided by the passes the runner profiled (graph shapes' eager warm-up
  // steps are not profiled).
  const double nsteps_d = ProfiledPasses(decode_prof, "decode/", std::max<double>(1.0, static_cast<double>(step_ms.size())));
  // Report.
  std::printf("================ One-batch benchmark ================\n");
  std::printf("model %s (%s), %d layers, device %s, weights %s, MLA %s\n", model.c_str(), cfg.model_type.c_str(),
              cfg.num_hidden_layers, device.c_str(), load_format.c_str(), mla.c_str());
  std::printf("batch %d x input %d x output %d\n", batch, input_len, output_len);
  std::printf("roofline rates (%s): memory %.1f GB/s, GEMM %.3f TFLOP/s; bytes/elem: linear %.0f, other %.0f, KV %.0f\n",
              hw_source.c_str(), hw.mem_bw_gbps, hw.flops_tflops, dt.linear_bytes, dt.other_bytes, dt.kv_bytes);
  std::printf("prefill: %.3f ms (%.1f tok/s), roofline %.3f ms, ratio %.2fx\n", prefill_ms,
              batch * input_len / (prefill_ms / 1e3), prefill_rl.ms(), prefill_ms / std::max(1e-12, prefill_rl.ms()));
  PrintCostLine("prefill", prefill_cost, prefill_rl, hwr);
  PrintProfile("prefill", prefill_prof, "prefill/", 1.0, cfg);
  const int nsteps = static_cast<int>(step_ms.size());
  double med = 0, rl_med = 0;
  if (nsteps > 0) {
    auto mid_cost = bench::EstimateStep(cfg, bench::DecodeShape(batch, step_ctx[nsteps / 2]), dt);
    PrintCostLine("decode", mid_cost, bench::RooflineTimeOf(mid_cost, hwr), hwr);
    std::printf("  (decode at context %d; %.1f experts touched per MoE layer)\n", step_ctx[nsteps / 2],
                mid_cost.experts_touched_per_moe_layer);
    std::printf("%8s %8s %12s %14s %8s\n", "step", "context", "time_ms", "roofline_ms", "ratio");
    int every = std::max(1, (nsteps + print_steps - 1) / std::max(1, print_steps));
    for (int i = 0; i < nsteps; ++i) {
      if (i % every != 0 && i != nsteps - 1) continue;
      std::printf("%8d %8d %12.3f %14.3f %8.2f\n", i + 1, step_ctx[i], step_ms[i], step_rl_ms[i],
                  step_ms[i] / std::max(1e-12, step_rl_ms[i]));
    }
    if (overlap)
      std::printf("  (overlap scheduling: a step's time is the interval between two finished steps, the next one "
                  "queued while this one runs; %s sampling on the device, %d ids to the host; "
                  "--disable-overlap-schedule times each step alone)\n",
                  temperature > 0.0f ? "temperature" : "greedy", batch);
    else if (runner_samples)
      std::printf("  (each timed step includes %s sampling on the device and copying %d ids to the host)\n",
                  temperature > 0.0f ? "temperature" : "greedy", batch);
    else
      std::printf("  (each timed step includes copying %s of fp32 logits [%d x %d] to the host)\n",
                  HumanBytes(4.0 * batch * cfg.vocab_size).c_str(), batch, cfg.vocab_size);
    med = bench::Percentile(step_ms, 50);
    rl_med = bench::Percentile(step_rl_ms, 50);
    std::printf("decode: median step %.3f ms (mean %.3f, p90 %.3f), roofline %.3f ms, ratio %.2fx; %.1f output tok/s\n",
                med, bench::Summarize(step_ms).mean, bench::Percentile(step_ms, 90), rl_med,
                med / std::max(1e-12, rl_med), batch / (med / 1e3));
    PrintProfile("decode", decode_prof, "decode/", nsteps_d, cfg);
  }
  std::printf("=====================================================\n");
  if (!output_file.empty()) {
    nlohmann::json j;
    j["model"] = model;
    j["model_type"] = cfg.model_type;
    j["layers"] = cfg.num_hidden_layers;
    j["dtype"] = cuda ? (cfg.quant.fp8 ? "fp8" : "bf16") : "fp32";
    j["device"] = device;
    j["load_format"] = load_format;
    j["batch_size"] = batch;
    j["input_len"] = input_len;
    j["output_len"] = output_len;
    j["overlap_schedule"] = overlap;
    j["temperature"] = temperature;
    j["mem_bw_gbps"] = hw.mem_bw_gbps;
    j["flops_tflops"] = hw.flops_tflops;
    j["rates_source"] = hw_source;
    j["prefill_ms"] = prefill_ms;
    j["prefill_roofline_ms"] = prefill_rl.ms();
    j["prefill_cost"] = bench::StepCostToJson(prefill_cost, prefill_rl);
    j["prefill_parts"] = PartsToJson(prefill_cost, hwr);
    if (nsteps > 0) {
      auto mid_cost = bench::EstimateStep(cfg, bench::DecodeShape(batch, step_ctx[nsteps / 2]), dt);
      j["decode_cost"] = bench::StepCostToJson(mid_cost, bench::RooflineTimeOf(mid_cost, hwr));
      j["decode_parts"] = PartsToJson(mid_cost, hwr);
    }
    j["step_ms"] = med;
    j["roofline_step_ms"] = rl_med;
    j["decode_step_ms_mean"] = bench::Summarize(step_ms).mean;
    j["logits_bytes_per_step"] = runner_samples ? 4.0 * batch : 4.0 * batch * cfg.vocab_size;
    j["device_sampling"] = runner_samples;
    j["cuda_graphs"] = cuda && ro.cuda_graphs;
    j["warmup"] = warmup;
    if (!prefill_prof.empty()) j["prefill_profile"] = ProfileJson(prefill_prof, "prefill/", 1.0, cfg);
    if (!decode_prof.empty()) j["decode_profile"] = ProfileJson(decode_prof, "decode/", nsteps_d, cfg);
    j["steps"] = nlohmann::json::array();
    for (int i = 0; i < nsteps; ++i)
      j["steps"].push_back({{"context", step_ctx[i]}, {"ms", step_ms[i]}, {"roofline_ms", step_rl_ms[i]}});
    std::ofstream f(output_file);
    if (!f) return Fail(who, 1, "cannot write " + output_file);
    f << j.dump(2) << "\n";
  }
  return 0;
}

// `dsinfer bench roofline`: the roofline of a prefill and of decode steps, from the config only.
int RunRoofline(int argc, char** argv) {
  CLI::App app{"Roofline time of prefill and decode steps, from a model config (no model run)",
               "dsinfer bench roofline"};
  std::string model, device = "cuda", output_file;
  int num_layers = 0, batch = 1, input_len = 1024, output_len = 256;
  HwFlags hw;
  app.add_option("--model", model, "model dir or config.json")->required();
  app.add_option("--num-layers", num_layers, "truncate to the first N layers (0 = all)")->check(ds::tools::kNonNegative);
  app.add_option("--batch-size", batch, "sequences")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--input-len", input_len, "prompt tokens")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--output-len", output_len, "output tokens")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--device", device, "dtypes: cuda (bf16/fp8 per config) | cpu (fp32)")
      ->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--output-file", output_file, "write results as JSON");
  AddRooflineFlags(app, &hw);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto cj = ReadConfigJson(model);
  if (!cj.ok()) return Fail("roofline", 1, cj.status().ToString());
  if (num_layers > 0) (*cj)["num_hidden_layers"] = num_layers;
  auto cfg = ParseModelConfig(*cj);
  if (!cfg.ok()) return Fail("roofline", 1, cfg.status().ToString());
  std::string source;
  Status hs = ResolveHardware(device, &hw, &source);
  if (!hs.ok()) return Fail("roofline", 2, hs.ToString());
  const bench::Hardware hwr{hw.mem_bw_gbps, hw.flops_tflops};
  auto dt = bench::DtypesFor(*cfg, device == "cuda");
  auto pc = bench::EstimateStep(*cfg, bench::PrefillShape(batch, input_len), dt);
  auto pt = bench::RooflineTimeOf(pc, hwr);
  // Decode at the mean context over the output (input + O/2): the mean step of the run.
  int mid = input_len + std::max(1, output_len / 2);
  auto dc = bench::EstimateStep(*cfg, bench::DecodeShape(batch, mid), dt);
  auto dtm = bench::RooflineTimeOf(dc, hwr);
  std::printf("roofline: %s, %d layers, batch %d, input %d, output %d (rates %s: %.1f GB/s, %.1f TFLOP/s)\n",
              model.c_str(), cfg->num_hidden_layers, batch, input_len, output_len, source.c_str(), hw.mem_bw_gbps,
              hw.flops_tflops);
  PrintCostLine("prefill", pc, pt, hwr);
  PrintCostLine("decode", dc, dtm, hwr);
  std::printf("  decode at context %d: %.1f experts touched per MoE layer; %.1f output tok/s at the roofline\n", mid,
              dc.experts_touched_per_moe_layer, batch / (dtm.ms() / 1e3));
  if (!output_file.empty()) {
    nlohmann::json j = {{"model", model}, {"layers", cfg->num_hidden_layers}, {"batch_size", batch},
                        {"input_len", input_len}, {"output_len", output_len}, {"decode_context", mid},
                        {"mem_bw_gbps", hw.mem_bw_gbps}, {"flops_tflops", hw.flops_tflops},
                        {"prefill", bench::StepCostToJson(pc, pt)}, {"decode", bench::StepCostToJson(dc, dtm)},
                        {"prefill_parts", PartsToJson(pc, hwr)}, {"decode_parts", PartsToJson(dc, hwr)},
                        {"roofline_step_ms", dtm.ms()}, {"prefill_roofline_ms", pt.ms()}};
    std::ofstream f(output_file);
    if (!f) return Fail("roofline", 1, "cannot write " + output_file);
    f << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace ds::tools

DS_REGISTER_COMMAND_NAMED(bench_one_batch, "bench one-batch",
                          "time prefill and decode steps of a fixed batch through a ModelRunner, beside the roofline",
                          ds::tools::RunOneBatch);
DS_REGISTER_COMMAND_NAMED(bench_roofline, "bench roofline",
                          "roofline time of prefill / decode steps from a model config (no model run)",
                          ds::tools::RunRoofline);
