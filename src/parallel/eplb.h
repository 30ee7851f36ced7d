// EPLB: the expert-parallel load balancer. From measured per-layer per-expert loads it computes
// a physical-to-logical expert map with redundant replicas (parallel/expert_map.h) so that the
// per-GPU load of every MoE layer is as even as possible.
//
// Source of the math: DeepSeek's public EPLB description and reference (github.com/deepseek-ai/
// EPLB, "Expert Parallelism Load Balancer"); this is our own implementation of the same three
// steps, with deterministic tie-breaking:
//   hierarchical (num_groups % num_nodes == 0; keeps every expert group on one node, so the
//   group-limited routing of DeepSeek-V3 sends a token to few nodes):
//     1. pack the expert groups onto the nodes, groups_per_node each, balancing group load;
//     2. inside each node, add the node's redundant slots one at a time to the expert with the
//        largest load per replica (load / replicas);
//     3. pack the node's physical replicas (load / replicas each) onto the node's GPUs,
//        slots_per_gpu each, balancing GPU load.
//   global (any num_groups): the same with one group and one node: replicate the heaviest
//   experts over all GPUs, then pack all replicas onto all GPUs.
// Balanced packing is greedy: items in descending load, each to the lightest pack that still
// has room (ties: lowest pack index; equal loads keep ascending item order).
//
// Slot s lives on GPU s / (num_physical / num_gpus); GPU g on node g / (num_gpus / num_nodes).
// A replica of expert e gets load[e] / replicas(e) (static dispatch spreads tokens evenly).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ds {

enum class EplbPolicy { kAuto, kHierarchical, kGlobal };
const char* EplbPolicyName(EplbPolicy p);
StatusOr<EplbPolicy> ParseEplbPolicy(const std::string& s);  // "auto" | "hierarchical" | "global"

struct EplbOptions {
  int num_physical = 0;  // physical expert slots per layer (>= logical; multiple of num_gpus)
  int num_gpus = 1;      // EP size (multiple of num_nodes)
  int num_nodes = 1;
  int num_groups = 1;    // expert groups (the config's n_group); must divide the logical count
                         // for the hierarchical policy
  // kAuto: hierarchical when num_groups % num_nodes == 0, else global (as DeepSeek's EPLB).
  EplbPolicy policy = EplbPolicy::kAuto;
};

struct EplbResult {
  EplbPolicy policy = EplbPolicy::kGlobal;              // the one used (never kAuto)
  std::vector<std::vector<int32_t>> physical_to_logical;  // [layers][num_physical]
  std::vector<std::vector<int32_t>> replica_count;        // [layers][num_logical], >= 1 each
};

// load: [layers][num_logical] tokens per logical expert (>= 0, finite). Errors (InvalidArgument)
// name the offending option or layer/expert. Deterministic: the same input gives the same map.
StatusOr<EplbResult> RebalanceExperts(const std::vector<std::vector<double>>& load, const EplbOptions& opts);

// Per-GPU load of one layer under a placement: every logical expert's load split evenly over
// its replicas. load: [num_logical]; physical_to_logical: [num_physical] (a valid row).
// Returns [num_gpus]. num_physical must be a multiple of num_gpus (DS_CHECK).
std::vector<double> GpuLoads(const std::vector<double>& load, const std::vector<int32_t>& physical_to_logical,
                             int num_gpus);

// Parses an expert load file: {"logical_count": X} (ExpertLoadSnapshot::ToJson, SGLang's
// expert-distribution dump) or a bare X, where X is [layers][num_logical] or
// [steps][layers][num_logical] (summed over steps). Counts must be finite and >= 0.
StatusOr<std::vector<std::vector<double>>> ParseExpertLoadJson(const std::string& text);

// mean / max of per-GPU loads, in (0, 1]; 1 = perfectly balanced. 1 when all loads are zero.
double Balancedness(const std::vector<double>& gpu_loads);

}  // namespace ds
