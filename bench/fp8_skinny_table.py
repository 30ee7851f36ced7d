#!/usr/bin/env python3
"""Summarises `dsinfer bench kernels --only fp8_skinny` records (kernels.json) as a markdown
table: per V3 projection and M, cuBLASLt's ratio to the copy ceiling and the best swap-AB
CUTLASS mode's, both on weight + scale bytes (issue 5's "FP8 dense GEMM at M <= 64 >= 70% of
copy"). usage: fp8_skinny_table.py kernels.json"""
import collections
import json
import re
import sys


def main(path):
    data = json.load(open(path))
    recs = data["records"] if isinstance(data, dict) else data
    table = collections.OrderedDict()
    for r in recs:
        if not r["kernel"].startswith("fp8_skinny/") or r["metric"] != "TB/s":
            continue
        m = re.match(r"(\S+) fp8 M(\d+) N(\d+) K(\d+)", r["shape"])
        if not m:
            continue
        key = (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)))
        table.setdefault(key, {})[r["kernel"].split("/", 1)[1]] = (r["ratio"], r.get("time_us", 0.0))
    has_auto = any("sm90_auto" in modes for modes in table.values())
    print("| projection | M | N x K | weight MB | cuBLASLt | best swap-AB mode | its ratio | us |"
          + (" auto (Fp8SkinnyAutoKsplit) |" if has_auto else ""))
    print("|---|---:|---|---:|---:|---|---:|---:|" + ("---:|" if has_auto else ""))
    for (name, M, N, K), modes in table.items():
        ours = {k: v for k, v in modes.items() if k != "cublaslt"}
        if not ours:
            continue
        best = max(ours, key=lambda k: ours[k][0])
        cub = modes.get("cublaslt")
        auto = modes.get("sm90_auto")
        line = (f"| {name} | {M} | {N} x {K} | {N * K / 1e6:.1f} | {cub[0]:.2f} |" if cub else
                f"| {name} | {M} | {N} x {K} | {N * K / 1e6:.1f} | - |")
        line += f" {best} | **{ours[best][0]:.2f}** | {ours[best][1]:.1f} |"
        if has_auto:
            line += f" {auto[0]:.2f} |" if auto else " - |"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
