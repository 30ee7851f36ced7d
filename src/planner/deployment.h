// Deployment and workload descriptions for the planner (JSON format: docs/design/planner.md).
//
// A deployment is a prefill/decode (PD) split: up to two instance roles, each with its own
// parallel layout. Inside an instance of `devices` devices with pipeline depth `pp`, each
// stage has devices/pp devices; attention runs with tensor parallelism `attention_tp` and
// data parallelism dp = devices/pp/attention_tp; routed experts are expert-parallel over the
// stage's devices minus `shared_expert_devices` (ranks dedicated to shared experts, as in the
// CloudMatrix-384 decode: 128 routed-expert + 16 shared-expert cards).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "planner/model_size.h"

namespace ds::planner {

enum class MoeComm { kAllToAll, kAllGatherReduceScatter };
const char* MoeCommName(MoeComm c);  // "all_to_all" | "allgather_reducescatter"

enum class Role { kPrefill, kDecode };
const char* RoleName(Role r);

struct InstanceLayout {
  Role role = Role::kDecode;
  int devices = 8;
  int attention_tp = 1;
  int pp = 1;
  int shared_expert_devices = 0;  // 0: shared experts computed locally on every rank (DP)
  int redundant_experts = 0;      // extra expert replicas (EPLB), spread over the EP ranks
  MoeComm moe_comm = MoeComm::kAllToAll;
  bool micro_batch_overlap = true;  // two-batch overlap of compute and communication
  int dense_tp = 0;                 // dense FFN TP degree (0: decode -> devices per node, prefill -> 1)
  int lm_head_tp = 0;               // embedding / LM head TP degree (0: devices per node)
  // Decode: requests per device (0 = the most that meets the TPOT SLO and fits the KV cache).
  // Prefill: prompts per batch for the whole instance (0 = the most that meets the TTFT SLO).
  double batch = 0;
  // Max/mean expert load across EP ranks after placement; 0 = model default (see perf_model.h).
  double expert_imbalance = 0;

  int stage_devices() const { return devices / pp; }
  int dp() const { return devices / pp / attention_tp; }
  int ep() const { return devices / pp - shared_expert_devices; }
  std::string Summary() const;  // "32 dev: DP32 attn, EP32 MoE (AG+RS), MBO off"
};

struct Deployment {
  std::string name;
  WType weight_dtype = WType::kFP8;  // all linear layers (experts, attention, dense); embedding/head stay bf16
  WType kv_dtype = WType::kBF16;     // latent cache
  int mtp_layers = 0;                // draft tokens per step from the MTP module (0 = off)
  double mtp_acceptance = 0.0;       // probability each draft token is accepted
  std::optional<InstanceLayout> prefill, decode;
  int prefill_instances = 1, decode_instances = 1;
};

struct Workload {
  int input_len = 2048;
  int output_len = 2048;
  double prefix_hit_rate = 0.0;  // fraction of input tokens served from the prefix cache
  double concurrency = 0;        // total concurrent requests to serve (0 = unspecified)
  double input_len_cv = 0.0;     // coefficient of variation of input lengths (0 = fixed, like benchmarks)
  double output_len_cv = 0.0;    // same for outputs
};

struct Slo {
  double tpot_ms = 0;  // 0 = none
  double ttft_ms = 0;
};

// Parses a deployment file's JSON; `default_weight` fills an absent weight_dtype.
StatusOr<Deployment> ParseDeployment(const nlohmann::json& j, WType default_weight);
StatusOr<Deployment> LoadDeployment(const std::string& path, WType default_weight);
nlohmann::json LayoutToJson(const InstanceLayout& l);
nlohmann::json DeploymentToJson(const Deployment& d);

}  // namespace ds::planner
