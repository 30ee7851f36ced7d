// Text rendering of planner results: tables, the per-module breakdown (--explain) and the
// reasons for a recommended layout.
#pragma once

#include <string>
#include <vector>

#include "planner/perf_model.h"
#include "planner/search.h"

namespace ds::planner {

// One line per result: layout, batch, TPOT/TTFT, tok/s per user, per-device tok/s, memory.
std::string FormatRoleTable(const std::vector<RoleResult>& rows, Role role);
// Memory by module, per-layer time by module, step composition and the bottleneck.
std::string ExplainRole(const PlanContext& ctx, const Deployment& dep, const RoleResult& r);
// Why `best` wins: the best candidate for each alternative value of every layout dimension
// (instance size, attention TP, MoE communication, micro-batch overlap, redundant experts).
std::string ExplainChoice(const std::vector<RoleResult>& all, const RoleResult& best);

}  // namespace ds::planner
