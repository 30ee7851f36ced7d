#!/usr/bin/env python3
"""Summarise Nsight Compute's CSV (ncu --csv --metrics gpu__time_duration.sum) of one run.

Input: the CSV ncu prints on stdout (the program's own lines mixed in are skipped). Output: the
total device time, a table by kernel (count, total us, mean us, share), and the kernels in
launch order with grid, block and time (us), so one decode step's kernels can be read off the
end of the list. Times are ncu's: each kernel replayed alone with caches flushed, so launch
gaps are not in them.
"""
import csv
import re
import sys
from collections import OrderedDict


def short(name: str) -> str:
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = re.sub(r"\(.*", "", name)          # drop the argument list
    name = re.sub(r"<.*>", "<..>", name)        # and template arguments
    return name.replace("void ", "").strip()[:70]


def main(path: str) -> int:
    rows = []
    with open(path, errors="replace") as f:
        lines = [l for l in f if l.startswith('"')]
    if not lines:
        print("no ncu CSV rows in", path)
        return 1
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            ns = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        unit = r.get("Metric Unit", "ns")
        us = ns / 1000.0 if unit in ("ns", "nsecond") else ns * (1e-3 if unit == "ps" else 1.0)
        rows.append((int(r["ID"]), short(r["Kernel Name"]), r.get("Grid Size", ""), r.get("Block Size", ""), us))
    rows.sort()
    total = sum(r[4] for r in rows)
    print(f"kernels: {len(rows)}, device time {total:.1f} us")
    agg = OrderedDict()
    for _, n, _, _, us in rows:
        c, t = agg.get(n, (0, 0.0))
        agg[n] = (c + 1, t + us)
    print(f"{'kernel':70s} {'count':>6s} {'total us':>10s} {'mean us':>9s} {'share':>6s}")
    for n, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:70s} {c:6d} {t:10.1f} {t / c:9.2f} {t / total:6.1%}")
    print("\nin launch order: id, kernel, grid, block, us")
    for i, n, g, b, us in rows:
        print(f"{i:5d} {n:70s} {g:>16s} {b:>14s} {us:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin"))
