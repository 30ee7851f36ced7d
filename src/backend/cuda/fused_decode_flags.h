// DS_FUSED_DECODE, the CLI's switch for the small-batch decode fusions
// (CudaRunnerOptions::fused_*; docs/design/decode_small_batch.md, "Launch fusions"), parsed
// here so that the CPU build's tests check it (tests/backend/cuda_host/test_fused_decode_flags.cpp);
// src/tools/cuda_runner_hook.cpp applies the result. Free of CUDA headers. Also DS_PDL's
// parser (ParsePdlFlag, below).
//   unset: the runner's defaults (route, norm, qpe, olat, silu16, kvrope, uv; shared off;
//   the caller does not call this);
//   "0": none; "1": all (route, shared, norm, qpe, olat, silu16, kvrope, uv);
//   else a comma list of route, shared (implies route), norm, qpe, olat, silu16, kvrope, uv.
#pragma once

#include <algorithm>
#include <string>

namespace ds::cuda {

struct FusedDecodeFlags {
  bool route = false, shared = false, norm = false, qpe = false, olat = false, silu16 = false;
  bool kvrope = false, uv = false;
  std::string unknown;  // comma list of the names not recognised (ignored), "" if none
};

inline FusedDecodeFlags ParseFusedDecodeFlags(const std::string& value) {
  FusedDecodeFlags f;
  if (value == "1") {
    f.route = f.shared = f.norm = f.qpe = f.olat = f.silu16 = f.kvrope = f.uv = true;
    return f;
  }
  if (value == "0") return f;
  size_t pos = 0;
  while (pos <= value.size()) {
    const size_t end = std::min(value.find(',', pos), value.size());
    const std::string name = value.substr(pos, end - pos);
    if (name == "route") f.route = true;
    else if (name == "shared") f.route = f.shared = true;
    else if (name == "norm") f.norm = true;
    else if (name == "qpe") f.qpe = true;
    else if (name == "olat") f.olat = true;
    else if (name == "silu16") f.silu16 = true;
    else if (name == "kvrope") f.kvrope = true;
    else if (name == "uv") f.uv = true;
    else if (!name.empty()) f.unknown += (f.unknown.empty() ? "" : ",") + name;
    pos = end + 1;
  }
  return f;
}

// DS_PDL, the CLI's switch for CudaRunnerOptions::pdl (programmatic dependent launch of the
// runner's kernels; launch.cuh): "1" / "on" -> 1 (on), "0" / "off" -> 0 (off), anything else
// (e.g. "yes", "") -> -1: not recognised, the caller keeps the default and warns.
inline int ParsePdlFlag(const std::string& value) {
  if (value == "1" || value == "on") return 1;
  if (value == "0" || value == "off") return 0;
  return -1;
}

}  // namespace ds::cuda
