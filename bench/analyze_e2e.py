#!/usr/bin/env python3
"""Summarises a sweep (bench/results/e2e.json + raw one-batch / roofline JSONs) as Markdown,
computing the issue-7 acceptance figures:

- per (model, input length): concurrency, output tok/s per GPU, median TTFT / TPOT, measured
  decode step (one-batch), roofline step, and their ratio;
- decode at concurrency 1: step / roofline (the acceptance bound is 1.5x);
- the highest concurrency whose median TPOT <= --tpot-slo-ms (50): its per-GPU output tok/s
  and the ratio to the roofline throughput there (concurrency / roofline step);
- the roofline split of that decode step by part (attention, MoE, dense MLP, embedding +
  lm_head), from the roofline JSON: a model of where the time should go, to set beside
  measured per-layer timings;
- trace replays (trace_*.json in the results dir): TTFT/TPOT percentiles, prefix-cache hit rate.

  python3 bench/analyze_e2e.py bench/results/e2e.json [--raw bench/results/raw] [--out summary.md]
"""
import argparse
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def f(v, fmt="%.1f"):
    return "-" if v is None else fmt % v


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("e2e_json")
    p.add_argument("--raw", default="")
    p.add_argument("--tpot-slo-ms", type=float, default=50.0)
    p.add_argument("--out", default="")
    a = p.parse_args()
    recs = load(a.e2e_json) or []
    res_dir = os.path.dirname(os.path.abspath(a.e2e_json))
    raw = a.raw or os.path.join(res_dir, "raw")
    lines = ["# End-to-end sweep summary", ""]
    groups = {}
    for r in recs:
        groups.setdefault((r["model"], r.get("layers"), r.get("dtype"), r["input_len"]), []).append(r)
    for (model, layers, dtype, L), rs in sorted(groups.items(), key=lambda kv: [str(x) for x in kv[0]]):
        rs.sort(key=lambda r: r["concurrency"])
        lines += ["## %s, %s layers, %s, input %d, output %s (%s)" % (model, layers, dtype, L, rs[0].get("output_len"),
                                                                        rs[0].get("gpu", "")), ""]
        lines += ["| concurrency | output tok/s/GPU | TTFT p50 ms | TPOT p50 ms | step ms | roofline step ms | step/roofline |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rs:
            ratio = r["step_ms"] / r["roofline_step_ms"] if r.get("step_ms") and r.get("roofline_step_ms") else None
            lines.append("| %d | %s | %s | %s | %s | %s | %s |" % (
                r["concurrency"], f(r.get("output_tok_s_per_gpu")), f(r.get("ttft_ms_median")),
                f(r.get("tpot_ms_median"), "%.2f"), f(r.get("step_ms"), "%.2f"), f(r.get("roofline_step_ms"), "%.2f"),
                f(ratio, "%.2fx")))
        lines.append("")
        c1 = next((r for r in rs if r["concurrency"] == 1), None)
        if c1 and c1.get("step_ms") and c1.get("roofline_step_ms"):
            ratio = c1["step_ms"] / c1["roofline_step_ms"]
            lines.append("- Concurrency 1: decode step %.2f ms vs roofline %.2f ms = **%.2fx** (bound: 1.5x, %s)." % (
                c1["step_ms"], c1["roofline_step_ms"], ratio, "met" if ratio <= 1.5 else "NOT met"))
        ok = [r for r in rs if r.get("tpot_ms_median") is not None and r["tpot_ms_median"] <= a.tpot_slo_ms]
        if ok:
            best = max(ok, key=lambda r: r["concurrency"])
            rl = best.get("roofline_step_ms")
            rl_tput = best["concurrency"] / (rl / 1e3) if rl else None
            lines.append("- Highest concurrency with median TPOT <= %g ms: **%d** -> %.1f output tok/s per GPU%s." % (
                a.tpot_slo_ms, best["concurrency"], best["output_tok_s_per_gpu"],
                "; roofline %.1f tok/s (batch / roofline step), ratio **%.2f**" % (
                    rl_tput, best["output_tok_s_per_gpu"] / rl_tput) if rl_tput else ""))
            rj = load(os.path.join(raw, "roofline_%s_in%d_b%d.json" % (model, L, best["concurrency"])))
            if rj and "decode_parts" in rj:
                parts = rj["decode_parts"]
                total = sum(v["ms"] for v in parts.values()) or 1
                lines.append("- Roofline of that decode step by part (ms, share): " + ", ".join(
                    "%s %.2f (%.0f%%)" % (k, v["ms"], 100 * v["ms"] / total) for k, v in parts.items()) + ".")
        else:
            lines.append("- No concurrency met median TPOT <= %g ms." % a.tpot_slo_ms)
        lines.append("")
    # Measured device time by part (one-batch --profile: CUDA events between phases of eager
    # passes; graphs off, so each step carries some launch overhead the graph path does not).
    profs = sorted(glob.glob(os.path.join(raw, "profile_*.json")))
    if profs:
        lines += ["## Where the time goes (measured, one-batch --profile)", "",
                  "| model | batch x input | pass | attention ms (per layer) | MoE ms (per MoE layer) | "
                  "dense MLP ms (per dense layer) | other ms | total ms |",
                  "|---|---|---|---|---|---|---|---|"]
        for path in profs:
            pj = load(path)
            if not pj:
                continue
            name = os.path.basename(path)[len("profile_"):-len(".json")]
            for which, key in (("prefill", "prefill_profile"), ("decode step", "decode_profile")):
                pr = pj.get(key)
                if not pr:
                    continue
                parts, per = pr["parts_ms"], pr["per_layer_ms"]
                tot = pr["total_ms"] or 1

                def cell(k, per_k=None):
                    v = parts[k]
                    t = "%.3f (%.0f%%)" % (v, 100 * v / tot)
                    return t + ("; %.4f" % per[per_k] if per_k else "")
                lines.append("| %s | %d x %d | %s | %s | %s | %s | %s | %.3f |" % (
                    name.rsplit("_in", 1)[0], pj.get("batch_size", 0), pj.get("input_len", 0), which,
                    cell("attention", "attention"), cell("moe", "moe"), cell("dense", "dense"), cell("other"), tot))
        lines.append("")
    for path in sorted(glob.glob(os.path.join(res_dir, "trace_*.json"))):
        t = load(path)
        if not t:
            continue
        lines += ["## Trace replay: %s" % os.path.basename(path), "",
                  "- %s requests (%s failed) over %.1f s, time scale %s, first %s s of %s" % (
                      t.get("completed"), t.get("failed"), t.get("duration", 0), t.get("trace_time_scale"),
                      t.get("trace_duration_s"), os.path.basename(t.get("dataset_path", ""))),
                  "- TTFT ms: median %s, p90 %s, p99 %s; TPOT ms: median %s, p90 %s, p99 %s" % (
                      f(t.get("median_ttft_ms")), f(t.get("p90_ttft_ms")), f(t.get("p99_ttft_ms")),
                      f(t.get("median_tpot_ms"), "%.2f"), f(t.get("p90_tpot_ms"), "%.2f"), f(t.get("p99_tpot_ms"), "%.2f")),
                  "- prefix-cache hit rate (server-reported): %s; ideal for this replay: %s" % (
                      f(100 * t["prefix_cache_hit_rate"], "%.1f%%") if "prefix_cache_hit_rate" in t else "not reported",
                      f(100 * t["trace_ideal_prefix_hit_rate"], "%.1f%%") if "trace_ideal_prefix_hit_rate" in t else "-"),
                  ""]
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as fo:
            fo.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
