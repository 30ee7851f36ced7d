// Hardware profiles for the deployment planner: one accelerator kind and its fabric, read
// from data/hardware/<NAME>.json (format in docs/design/planner.md).
//
// Units: TFLOP/s (dense peak, no sparsity) per dtype, GB = 1e9 bytes, GB/s = 1e9 B/s per
// device and per direction, latencies in microseconds. Efficiency factors are explicit inputs,
// one set per profile, each with its source in the file's "efficiency_source".
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "planner/model_size.h"

namespace ds::planner {

struct Efficiency {
  double gemm_mfu = 0.6;          // achieved / peak FLOP/s of compute-bound GEMMs (dense and grouped MoE)
  double mla_attention = 0.8;     // attention kernel FLOP/s relative to a GEMM (x gemm_mfu x peak bf16)
  double bandwidth = 0.8;         // achieved / peak HBM bandwidth of memory-bound kernels
  double comm = 0.8;              // achieved / peak link bandwidth of dispatch/combine and collectives
  double overlap = 0.9;           // fraction of the shorter of compute/communication hidden by micro-batch overlap
  double layer_overhead_us = 20;  // per layer per step: launches, norms, RoPE, quantisation, syncs
  double step_overhead_us = 1000; // per step: sampling, scheduling, MTP bookkeeping
};

struct HardwareProfile {
  std::string name;
  std::string description;
  int devices_per_node = 8;
  int scale_up_devices = 8;  // devices joined by the intra-node (scale-up) fabric; 384 for CloudMatrix-384
  double hbm_gb = 0;
  double hbm_bw_gbs = 0;
  double tflops_bf16 = 0, tflops_fp8 = 0, tflops_int8 = 0;  // 0 = not supported
  double intra_bw_gbs = 0, intra_latency_us = 0;  // scale-up fabric, per device, one direction
  double inter_bw_gbs = 0, inter_latency_us = 0;  // scale-out NICs, per device, one direction
  double reserved_gb = 8;  // runtime, activations, workspaces, graphs: not usable for weights or KV
  WType default_weight_dtype = WType::kFP8;
  Efficiency eff;
  std::string efficiency_source;

  // Peak TFLOP/s for GEMMs whose weights are stored in `t` (FP8 weights -> FP8 tensor cores,
  // INT8 -> INT8 W8A8, bf16 -> bf16). Falls back to bf16 when the dtype is unsupported.
  double PeakTflops(WType t) const;
  bool Supports(WType t) const;
};

StatusOr<HardwareProfile> ParseHardwareProfile(const nlohmann::json& j);
nlohmann::json HardwareProfileToJson(const HardwareProfile& h);

// Data directory holding hardware/ and deployments/: $DSINFER_DATA_DIR, then ../data and
// ../../data relative to the running executable, then the source tree's data/ (compile
// definition DS_SOURCE_DIR). Empty when none exists.
std::string FindDataDir();
// `name_or_path`: a file path (contains '/' or ends in .json) or a profile name looked up
// case-insensitively as <data>/hardware/<name>.json.
StatusOr<HardwareProfile> LoadHardwareProfile(const std::string& name_or_path);
// Names of the shipped profiles (file stems under <data>/hardware).
std::vector<std::string> ListHardwareProfiles();

}  // namespace ds::planner
