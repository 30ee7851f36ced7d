// Shared by the grouped GEMV op tests (test_fp8_gemv_grouped.cpp: e4m3 experts;
// test_gemv_grouped_bf16.cpp: bf16 experts, Fp8GemvGroupedParams::w_bf16): a zeroed workspace,
// one routing layout with NaN-poisoned outputs and its reference (GroupedCase), the launch-twice
// check (RunGroupedCase), one launch with given params (LaunchInto), a CTA-count sweep
// (CheckCtaSweep), the workspace checks of bad input (CheckWorkspaceRequired), SkinnyGemm's
// grouped form on the same inputs (RunSkinnyGrouped), the CUDA-graph replay check
// (CheckGraphReplay) and the empty-groups / bounds check (CheckEmptyGroupsAndBounds).
//
// The experts type X provides: int64_t E, N, K; Set(Fp8GemvGroupedParams*) (w, w_scales,
// w_bf16); SetSkinny(GroupedGemmParams*) (w, w_fp8, w_scales); Reference(a, lda, offsets,
// max_groups) -> [offsets[E], N] in double precision (rows of empty groups and of non-empty
// groups past the first max_groups (>= 0) NaN).
//
// Every launch writes into a NaN-poisoned output: rows outside the groups and columns past N
// must stay NaN. The activation rows past the last group (read by the last group's 8-row TMA
// box) and the row padding past K are NaN: each MMA output column depends on its own activation
// row only, so a NaN there that reached a written output would be a bug.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/device_props.h"
#include "backend/cuda/fp8_gemv_grouped.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/check.h"
#include "test_util.h"

namespace ds::cuda::test {

inline constexpr float kGroupedNaN = std::numeric_limits<float>::quiet_NaN();

// The op's name in the [metric] lines and its bounds (relative L2 vs the reference) for fp32
// and bf16 outputs.
struct GroupedOp {
  const char* name;
  double bound_f32, bound_bf16;
};

inline std::vector<int32_t> OffsetsOf(const std::vector<int32_t>& rows) {
  std::vector<int32_t> off{0};
  for (int32_t r : rows) off.push_back(off.back() + r);
  return off;
}

// A zeroed workspace for Fp8GemvGrouped, grown (and zeroed again) on demand: one per expert
// weight shape, reused across launches of any slot count (its layout depends on (E, N, K) and
// the weight type).
struct Workspace {
  void Fit(size_t bytes) {
    if (buf && buf->size() >= bytes) return;
    buf = std::make_unique<Dev<uint8_t>>(bytes);
    DS_CUDA_CHECK(cudaMemset(buf->get(), 0, bytes));
    DS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  bool CountersZero(int64_t E, int64_t N) const {
    std::vector<uint32_t> c(E * ((N + 127) / 128) * 8);
    DS_CUDA_CHECK(cudaMemcpy(c.data(), buf->get(), c.size() * 4, cudaMemcpyDeviceToHost));
    return std::all_of(c.begin(), c.end(), [](uint32_t v) { return v == 0; });
  }
  std::unique_ptr<Dev<uint8_t>> buf;
};

// One routing layout over the experts: group sizes rows[e], activations [max_rows, lda] (the
// groups' rows bf16 normals; `spare` rows past the last group and the columns past K NaN),
// outputs [max_rows, ldo] fp32 and bf16, the reference.
template <class X>
struct GroupedCase {
  GroupedCase(const X& x_, const std::vector<int32_t>& rows, int64_t pad_a, int64_t pad_o, int64_t spare = 3)
      : x(x_), off(OffsetsOf(rows)), R(off.back()), max_rows(off.back() + spare), lda(x_.K + pad_a),
        ldo(x_.N + pad_o), doff(off), o32(max_rows * ldo), o16(max_rows * ldo) {
    DS_CHECK(static_cast<int64_t>(rows.size()) == x.E);
    for (int32_t r : rows) {
      active += r > 0;
      max_group_rows = std::max<int64_t>(max_group_rows, r);
    }
    a.assign(max_rows * lda, kGroupedNaN);
    const std::vector<float> v = RoundBf16Vec(RandomNormal(R * x.K));
    for (int64_t r = 0; r < R; ++r) std::copy(v.begin() + r * x.K, v.begin() + (r + 1) * x.K, a.begin() + r * lda);
    da = std::make_unique<Dev<__nv_bfloat16>>(ToBf16(a));
    ref = x.Reference(a, lda, off, -1);
  }
  Fp8GemvGroupedParams Params(int64_t max_active, bool bf16_out, int ctas, const Workspace& ws) const {
    Fp8GemvGroupedParams p;
    p.a = da->get(); p.lda = lda; p.max_rows = max_rows; p.offsets = doff.get();
    x.Set(&p);
    p.out = bf16_out ? static_cast<void*>(o16.get()) : o32.get(); p.out_bf16 = bf16_out; p.ldo = ldo;
    p.num_experts = x.E; p.N = x.N; p.K = x.K;
    p.max_active_groups = max_active; p.max_group_rows = std::max<int64_t>(1, max_group_rows);
    if (ws.buf) { p.workspace = ws.buf->get(); p.workspace_bytes = ws.buf->size(); }
    p.ctas = ctas;
    return p;
  }
  // Rows 0 .. R-1, columns 0 .. N-1 (downloaded); counts written elements outside them.
  std::vector<float> Got(bool bf16_out, int64_t* extra) const {
    const std::vector<float> full = bf16_out ? FromBf16(o16.Download()) : o32.Download();
    std::vector<float> got(R * x.N);
    for (int64_t r = 0; r < max_rows; ++r)
      for (int64_t n = 0; n < ldo; ++n) {
        const float v = full[r * ldo + n];
        if (r < R && n < x.N) got[r * x.N + n] = v;
        else *extra += !std::isnan(v);
      }
    return got;
  }
  void Poison() {
    o32.Poison();
    o16.Poison();
  }
  // Replaces the activations of the groups' rows (new bf16 normals; same NaN padding) and
  // returns the new a (host); the caller recomputes its reference.
  std::vector<float> NewActivations() {
    std::vector<float> a2(a.size(), kGroupedNaN);
    const std::vector<float> v = RoundBf16Vec(RandomNormal(R * x.K));
    for (int64_t r = 0; r < R; ++r) std::copy(v.begin() + r * x.K, v.begin() + (r + 1) * x.K, a2.begin() + r * lda);
    da->Upload(ToBf16(a2));
    return a2;
  }
  const X& x;
  std::vector<int32_t> off;
  int64_t R, max_rows, lda, ldo, active = 0, max_group_rows = 0;
  std::vector<float> a, ref;
  Dev<int32_t> doff;
  std::unique_ptr<Dev<__nv_bfloat16>> da;
  Dev<float> o32;
  Dev<__nv_bfloat16> o16;
};

// Launches twice into poisoned outputs: checks the reference, bitwise equality of the two
// launches, untouched rows / columns and zeroed counters. Returns the output [R, N].
template <class X>
std::vector<float> RunGroupedCase(const GroupedOp& op, const std::string& name, GroupedCase<X>& c, Workspace& ws,
                                  int64_t max_active, bool bf16_out, int ctas, bool expect_tma) {
  Fp8GemvGroupedParams p = c.Params(max_active, bf16_out, ctas, ws);
  const Fp8GemvGroupedPlan plan0 = Fp8GemvGroupedPlanFor(p);
  if (plan0.tma) {
    ws.Fit(plan0.workspace_bytes);
    p = c.Params(max_active, bf16_out, ctas, ws);
  }
  const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(p);
  EXPECT_EQ(plan.tma, expect_tma) << name;
  const std::string cas = name + "_act" + std::to_string(c.active) + "_slots" + std::to_string(plan.slots) +
                          (bf16_out ? "_bf16" : "_f32") +
                          (plan.tma ? "_tma_ctas" + std::to_string(plan.ctas) : std::string("_generic"));
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    c.Poison();
    Fp8GemvGrouped(p);
    DS_CUDA_CHECK(cudaDeviceSynchronize());
    int64_t extra = 0;
    std::vector<float> got = c.Got(bf16_out, &extra);
    EXPECT_EQ(extra, 0) << cas << ": wrote outside the groups' rows or past N";
    if (rep == 0) {
      ExpectClose(op.name, cas, got, c.ref, bf16_out ? op.bound_bf16 : op.bound_f32);
      first = std::move(got);
    } else {
      EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * sizeof(float)), 0) << cas << ": not deterministic";
    }
    if (plan.tma) { EXPECT_TRUE(ws.CountersZero(c.x.E, c.x.N)) << cas << ": split-K counters not reset"; }
  }
  return first;
}

// One launch of p (c's params, possibly changed) into c's poisoned outputs: checks nothing was
// written outside the groups' rows and N; returns the output [R, N].
template <class X>
std::vector<float> LaunchInto(GroupedCase<X>& c, const Fp8GemvGroupedParams& p) {
  c.Poison();
  Fp8GemvGrouped(p);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  int64_t extra = 0;
  std::vector<float> got = c.Got(p.out_bf16, &extra);
  EXPECT_EQ(extra, 0) << "wrote outside the groups' rows or past N";
  return got;
}

// Forced CTA counts on c at max_active_groups `bound`: one CTA (every unit, whole tiles only),
// 7 (tiles cut mid-way, CTAs spanning slots), one and two per SM, more than the host's units
// (capped), more than that again. Each matches the reference (RunGroupedCase) and the automatic
// CTA count's output within bound_vs_auto (the sums differ in order only); the plan has `units`
// units (the slots of the host's bound x tiles x units per tile) and min(ctas, units) CTAs.
template <class X>
void CheckCtaSweep(const GroupedOp& op, const std::string& name, GroupedCase<X>& c, Workspace& ws, int64_t bound,
                   int64_t units, double bound_vs_auto) {
  const int sms = std::max(1, CurrentDeviceProps().sms);
  const std::vector<float> auto_out = RunGroupedCase(op, name, c, ws, bound, false, 0, true);
  for (int ctas : {1, 7, sms, 2 * sms, 1000, 20000}) {
    const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(c.Params(bound, false, ctas, ws));
    EXPECT_EQ(plan.units, units);
    EXPECT_EQ(plan.ctas, std::min<int64_t>(ctas, plan.units));
    const std::vector<float> got = RunGroupedCase(op, name, c, ws, bound, false, ctas, true);
    ExpectClose(std::string(op.name) + "_ctas_vs_auto", name + "_ctas" + std::to_string(ctas), got, auto_out,
                bound_vs_auto);
  }
}

// A TMA-path launch on c without workspace, then with 16 bytes too few: both CheckError.
template <class X>
void CheckWorkspaceRequired(GroupedCase<X>& c, int64_t bound) {
  Workspace ws;
  Fp8GemvGroupedParams q = c.Params(bound, false, 0, ws);
  const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(q);
  if (!plan.tma) return;
  EXPECT_THROW(Fp8GemvGrouped(q), CheckError);  // no workspace
  ws.Fit(plan.workspace_bytes);
  q = c.Params(bound, false, 0, ws);
  q.workspace_bytes = plan.workspace_bytes - 16;
  EXPECT_THROW(Fp8GemvGrouped(q), CheckError);
}

// SkinnyGemm's grouped form (unsplit, as the runner calls it) on the same inputs, fp32 out.
template <class X>
std::vector<float> RunSkinnyGrouped(GroupedCase<X>& c, int64_t max_active) {
  SkinnyGemmParams sp{};
  GroupedGemmParams& g = sp.g;
  g.a = c.da->get(); g.lda = c.lda; g.offsets = c.doff.get(); g.max_rows = c.max_rows;
  c.x.SetSkinny(&g);
  g.num_experts = c.x.E; g.N = c.x.N; g.K = c.x.K;
  g.out = c.o32.get(); g.out_type = DTypeOut::kF32; g.ldo = c.ldo;
  sp.max_group_rows = std::max<int64_t>(1, c.max_group_rows);
  sp.max_active_groups = max_active;
  c.Poison();
  SkinnyGemm(sp);
  DS_CUDA_CHECK(cudaDeviceSynchronize());
  int64_t extra = 0;
  std::vector<float> got = c.Got(false, &extra);
  EXPECT_EQ(extra, 0);
  return got;
}

// More slots than the TMA path's slot table (x: 1100 experts; 3 non-empty groups): the generic
// path at bound 0 (every expert a slot), then the same launch at bound 4, within the table: TMA.
template <class X>
void CheckSlotsBeyondTheTable(const GroupedOp& op, const X& x, Workspace& ws) {
  std::vector<int32_t> rows(1100, 0);
  rows[3] = 2; rows[700] = 8; rows[1099] = 1;
  GroupedCase<X> c(x, rows, 0, 0);
  RunGroupedCase(op, "E1100_slots1100_generic", c, ws, 0, false, 0, /*expect_tma=*/false);
  RunGroupedCase(op, "E1100_slots4", c, ws, 4, false, 0, /*expect_tma=*/true);
}

// One non-empty group of 8 slots (x: 8 experts, N 256, K of 2 units): 4 units (2 tiles x 2
// units); the host plans 32 units for 7 CTAs and the kernel runs 4 of them, one unit each (every
// tile split), fp32 and bf16 out.
template <class X>
void CheckOneGroupSevenCtas(const GroupedOp& op, const std::string& name, const X& x) {
  Workspace ws;
  GroupedCase<X> c(x, {0, 0, 0, 5, 0, 0, 0, 0}, 0, 0);
  const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(c.Params(8, false, 7, ws));
  EXPECT_EQ(plan.units, 32);
  EXPECT_EQ(plan.ctas, 7);
  RunGroupedCase(op, name, c, ws, 8, false, 7, true);
  RunGroupedCase(op, name, c, ws, 8, true, 7, true);
}

// The workspace's size and layout do not depend on max_active_groups: on the routing `rows` over
// x's E experts (N x K weights), every bound of plan_bounds plans exactly
// Fp8GemvGroupedWorkspaceBytes(E, N, K, 0, w_bf16) bytes on the TMA path, and launches of the
// bounds run_bounds, in turn through one workspace of that size, each match the reference
// (RunGroupedCase: its counters stay valid between them); the workspace never grows.
template <class X>
void CheckWorkspaceIndependentOfTheBound(const GroupedOp& op, const std::string& name, const X& x,
                                         const std::vector<int32_t>& rows, bool w_bf16,
                                         std::initializer_list<int64_t> plan_bounds,
                                         std::initializer_list<int64_t> run_bounds) {
  const size_t want = Fp8GemvGroupedWorkspaceBytes(x.E, x.N, x.K, 0, w_bf16);
  Workspace ws;
  ws.Fit(want);
  GroupedCase<X> c(x, rows, 0, 0);
  for (int64_t bound : plan_bounds) {
    const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(c.Params(bound, false, 0, ws));
    if (!plan.tma) continue;
    EXPECT_EQ(plan.workspace_bytes, want) << bound;
  }
  for (int64_t bound : run_bounds) RunGroupedCase(op, name, c, ws, bound, false, 0, true);
  EXPECT_EQ(ws.buf->size(), want);
}

// Gathered rows (Fp8GemvGroupedParams::a_rows, one-row groups: a decode step of one token after
// MoeRouterRoute): `rows` (0 or 1 per group) over x's experts; permuted row r reads source row
// map[r] of a src_rows-row source (several groups may read one row, as every expert of a token
// reads the token's row). The gathered launch must give the bits of the launch on the permuted
// copy (same plan, same sums), the reference, and nothing outside the groups' rows; groups of
// more than one row are rejected with a_rows.
template <class X>
void CheckGatheredRows(const GroupedOp& op, const std::string& name, const X& x, const std::vector<int32_t>& rows,
                       int64_t src_rows) {
  Workspace ws;
  GroupedCase<X> c(x, rows, 8, 3);
  ASSERT_EQ(c.max_group_rows, 1) << name;
  std::vector<int32_t> map(c.R);
  for (int64_t r = 0; r < c.R; ++r) map[r] = static_cast<int32_t>((r * 7 + 1) % src_rows);
  std::vector<float> src(src_rows * c.lda, kGroupedNaN);
  const std::vector<float> v = RoundBf16Vec(RandomNormal(src_rows * x.K));
  for (int64_t t = 0; t < src_rows; ++t) std::copy(v.begin() + t * x.K, v.begin() + (t + 1) * x.K, src.begin() + t * c.lda);
  std::vector<float> a(c.max_rows * c.lda, kGroupedNaN);  // the permuted copy
  for (int64_t r = 0; r < c.R; ++r)
    std::copy(src.begin() + map[r] * c.lda, src.begin() + (map[r] + 1) * c.lda, a.begin() + r * c.lda);
  c.da->Upload(ToBf16(a));
  const std::vector<float> ref = x.Reference(a, c.lda, c.off, -1);
  Dev<__nv_bfloat16> dsrc(ToBf16(src));
  Dev<int32_t> dmap(map);
  for (bool bf16_out : {false, true}) {
    Fp8GemvGroupedParams p = c.Params(c.active, bf16_out, 0, ws);
    const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(p);
    if (plan.tma) {
      ws.Fit(plan.workspace_bytes);
      p = c.Params(c.active, bf16_out, 0, ws);
    }
    p.max_group_rows = 1;
    const std::vector<float> copy_out = LaunchInto(c, p);
    Fp8GemvGroupedParams pg = p;
    pg.a = dsrc.get();
    pg.a_rows = dmap.get();
    pg.a_src_rows = src_rows;
    const std::vector<float> got = LaunchInto(c, pg);
    const std::string cas = name + "_src" + std::to_string(src_rows) + (bf16_out ? "_bf16" : "_f32") +
                            (plan.tma ? "_tma" : "_generic");
    const int64_t differ = BitMismatches(got, copy_out);
    std::printf("[metric] op=%s_gathered_rows case=%s rows=%lld differing_vs_copy=%lld%s\n", op.name, cas.c_str(),
                (long long)c.R, (long long)differ, differ == 0 ? " PASS" : " FAIL");
    EXPECT_EQ(differ, 0) << cas << ": gathered rows must give the permuted copy's bits";
    ExpectClose(op.name, cas, got, ref, bf16_out ? op.bound_bf16 : op.bound_f32);
    pg.max_group_rows = 2;
    EXPECT_THROW(Fp8GemvGrouped(pg), CheckError) << cas << ": a_rows with groups of two rows";
  }
}

// Captured once in a CUDA graph (layout rows_a, max_active_groups `bound`, max_group_rows 8):
// two replays equal the eager launch bit for bit; then new device offsets (rows_b: other
// experts, other row counts within the capture's bounds, the same total) and new activations:
// the replay equals a new eager launch bit for bit and matches the reference (the op reads the
// offsets at replay time; its counters reset themselves).
template <class X>
void CheckGraphReplay(const GroupedOp& op, const X& x, const std::vector<int32_t>& rows_a,
                      const std::vector<int32_t>& rows_b, int64_t bound) {
  const std::string gop = std::string(op.name) + "_graph";
  GroupedCase<X> c(x, rows_a, 0, 0);
  Workspace ws;  // sized by Fp8GemvGroupedWorkspaceBytes, as a runner would before a capture
  ws.Fit(Fp8GemvGroupedWorkspaceBytes(x.E, x.N, x.K, 0, c.Params(bound, false, 0, ws).w_bf16));
  cudaStream_t st;
  DS_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  Fp8GemvGroupedParams p = c.Params(bound, false, 0, ws);
  p.max_group_rows = 8;
  p.stream = st;
  ASSERT_TRUE(Fp8GemvGroupedPlanFor(p).tma);
  const auto launch_and_get = [&](bool graph, cudaGraphExec_t exec) {
    c.Poison();
    DS_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy-stream memsets before the launch on st
    if (graph) DS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    else Fp8GemvGrouped(p);
    DS_CUDA_CHECK(cudaStreamSynchronize(st));
    int64_t extra = 0;
    std::vector<float> got = c.Got(false, &extra);
    EXPECT_EQ(extra, 0);
    EXPECT_TRUE(ws.CountersZero(x.E, x.N));
    return got;
  };
  const std::vector<float> eager = launch_and_get(false, nullptr);
  ExpectClose(gop, "eager", eager, c.ref, op.bound_f32);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  Fp8GemvGrouped(p);
  DS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  DS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) {
    const std::vector<float> got = launch_and_get(true, exec);
    const bool same = std::memcmp(got.data(), eager.data(), got.size() * sizeof(float)) == 0;
    std::printf("[metric] op=%s case=replay%d bitwise_equal_to_eager=%d%s\n", gop.c_str(), i, same ? 1 : 0,
                same ? " PASS" : " FAIL");
    EXPECT_TRUE(same) << "replay " << i;
  }
  // New offsets (same total rows: the capture's max_rows) and new activations.
  const std::vector<int32_t> off_b = OffsetsOf(rows_b);
  ASSERT_EQ(off_b.back(), c.R);
  c.doff.Upload(off_b);
  const std::vector<float> a2 = c.NewActivations();
  const std::vector<float> ref_b = x.Reference(a2, c.lda, off_b, -1);
  const std::vector<float> replay = launch_and_get(true, exec);
  ExpectClose(gop, "replay_new_offsets_and_activations", replay, ref_b, op.bound_f32);
  const std::vector<float> eager_b = launch_and_get(false, nullptr);
  EXPECT_EQ(std::memcmp(replay.data(), eager_b.data(), replay.size() * sizeof(float)), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// No non-empty group (no CTA has a unit) and empty launches, on x (the TMA path) and xg (the
// generic path), both of 12 experts; then on x a host bound below the non-empty groups (only
// the first `bound` non-empty groups are computed, as SkinnyGemm's slots; the others' rows stay
// untouched).
template <class X>
void CheckEmptyGroupsAndBounds(const GroupedOp& op, const X& x, const X& xg) {
  Workspace ws;
  for (const X* xx : {&x, &xg}) {
    GroupedCase<X> c(*xx, std::vector<int32_t>(12, 0), 0, 0, /*spare=*/4);
    for (int64_t bound : {0, 3}) {
      Fp8GemvGroupedParams p = c.Params(bound, false, 0, ws);
      const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(p);
      EXPECT_EQ(plan.tma, xx == &x);
      if (plan.tma) {
        ws.Fit(plan.workspace_bytes);
        p = c.Params(bound, false, 0, ws);
      }
      SCOPED_TRACE("no group is non-empty: nothing may be written (K " + std::to_string(xx->K) + ")");
      LaunchInto(c, p);
    }
    Fp8GemvGroupedParams p = c.Params(0, false, 0, ws);
    p.max_group_rows = 0;  // nothing to do
    EXPECT_NO_THROW(Fp8GemvGrouped(p));
    p = c.Params(0, false, 0, ws);
    p.max_rows = 0;
    EXPECT_NO_THROW(Fp8GemvGrouped(p));
  }
  GroupedCase<X> c(x, {0, 2, 0, 5, 0, 1, 0, 0, 3, 0, 0, 8}, 0, 0);  // 5 non-empty groups
  const std::vector<float> ref2 = x.Reference(c.a, c.lda, c.off, /*max_groups=*/2);
  Fp8GemvGroupedParams p = c.Params(2, false, 0, ws);
  const Fp8GemvGroupedPlan plan = Fp8GemvGroupedPlanFor(p);
  ASSERT_TRUE(plan.tma);
  ws.Fit(plan.workspace_bytes);
  const std::vector<float> got = LaunchInto(c, c.Params(2, false, 0, ws));
  // Rows of groups 1 and 3 (the first two non-empty): computed; the others: still NaN.
  std::vector<float> g_rows, r_rows;
  int64_t untouched = 0, expect_untouched = 0;
  for (int64_t r = 0; r < c.R; ++r)
    for (int64_t n = 0; n < x.N; ++n) {
      if (r < c.off[4]) {
        g_rows.push_back(got[r * x.N + n]);
        r_rows.push_back(ref2[r * x.N + n]);
      } else {
        ++expect_untouched;
        untouched += std::isnan(got[r * x.N + n]);
      }
    }
  ExpectClose(op.name, "E12_bound2_of5_first_two", g_rows, r_rows, op.bound_f32);
  EXPECT_EQ(untouched, expect_untouched) << "groups past the bound were written";
}

}  // namespace ds::cuda::test
