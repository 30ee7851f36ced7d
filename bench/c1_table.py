#!/usr/bin/env python3
"""Issue 7's concurrency-1 point from one-batch runs: a Markdown table of each run's median decode
step against its roofline at the rates measured in the same call.

Inputs: a folder with `bench/gpu_rates.py`'s gpu_rates.json (mem_bw_gbps: the read rate, what the
sweep's e2e.json uses; copy_bw_gbps: ANCHORS.md's device-to-device copy, when present) and
`dsinfer bench one-batch --output-file` JSONs (ob_<name>.json, any --mem-bw-gbps: the roofline
scales as bytes / bandwidth, so it is rescaled to each rate; the decode steps are memory-bound).
Output: one row a run: name, model, layers, batch x input, step ms, and step / roofline at the
run's own rate, at the copy rate and at the read rate (the acceptance: <= 1.5x at the read rate).

  python bench/c1_table.py DIR [--out DIR/c1_table.md]
"""
import argparse
import glob
import json
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir")
    p.add_argument("--out", default="")
    a = p.parse_args()
    try:
        with open(os.path.join(a.dir, "gpu_rates.json")) as f:
            rates = json.load(f)
    except (OSError, ValueError) as e:
        print("c1_table: no gpu_rates.json in %s (%s)" % (a.dir, e), file=sys.stderr)
        return 1
    read, copy = rates.get("mem_bw_gbps"), rates.get("copy_bw_gbps")
    lines = ["| run | model | layers | batch x input | step ms | ratio @run's %s | ratio @copy %s | ratio @read %s |" % (
        "rate", "%.0f GB/s" % copy if copy else "(not measured)", "%.0f GB/s" % read),
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for path in sorted(glob.glob(os.path.join(a.dir, "ob_*.json"))):
        try:
            with open(path) as f:
                j = json.load(f)
        except (OSError, ValueError):
            continue
        step, rl, bw = j.get("step_ms"), j.get("roofline_step_ms"), j.get("mem_bw_gbps")
        if not step or not rl or not bw:
            continue
        at = lambda rate: "%.3fx" % (step / (rl * bw / rate)) if rate else "-"
        name = os.path.basename(path)[3:-5]
        lines.append("| %s | %s | %s | %s x %s | %.3f | %.3fx (%.0f GB/s) | %s | **%s** |" % (
            name, os.path.basename(str(j.get("model", "")).rstrip("/")), j.get("layers"), j.get("batch_size"),
            j.get("input_len"), step, step / rl, bw, at(copy), at(read)))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
