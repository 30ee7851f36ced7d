#!/usr/bin/env python3
"""Top instructions by warp-stall samples from `ncu --page source --csv --print-source sass`.

usage: ncu_source_top.py SOURCE.csv [N]
Prints the N instructions with the most samples (all stall reasons), each with its address,
SASS, its top stall reasons and the share of all samples; then the totals per stall reason.
Column names are matched loosely (ncu versions differ): a "Warp Stall Sampling (All Samples)"
column and per-reason "stall_*" / "Stall *" columns, where present.
"""
import csv
import sys


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    # Skip ncu's preamble lines until the CSV header (the first line with "Address" or "Source").
    start = next((i for i, l in enumerate(lines) if l.startswith('"') and ("Address" in l or "Source" in l)), 0)
    rows = list(csv.DictReader(lines[start:]))
    if not rows:
        print("no rows; first lines:\n" + "\n".join(lines[:20]))
        return
    cols = list(rows[0].keys())
    total_col = next((c for c in cols if "Warp Stall Sampling (All" in c), None)
    reason_cols = [c for c in cols if ("stall" in c.lower() or "Stall" in c) and c != total_col
                   and "Not-issued" not in c and "Not Issued" not in c]
    src_col = next((c for c in cols if c.strip() in ("Source", "# Source")), None)
    addr_col = next((c for c in cols if "Address" in c), None)

    def num(v):
        try:
            return float(str(v).replace(",", ""))
        except ValueError:
            return 0.0

    print("columns:", ", ".join(cols))
    if total_col is None:
        print("no 'Warp Stall Sampling (All Samples)' column")
        return
    total = sum(num(r[total_col]) for r in rows) or 1.0
    rows.sort(key=lambda r: -num(r[total_col]))
    print(f"\nall samples: {total:.0f}\n")
    for r in rows[:n]:
        reasons = sorted(((num(r[c]), c) for c in reason_cols), reverse=True)[:3]
        rs = "; ".join(f"{c.strip()} {v:.0f}" for v, c in reasons if v > 0)
        print(f"{num(r[total_col]) / total * 100:5.1f}%  {r.get(addr_col, '')}  {r.get(src_col, '')[:70]}  [{rs}]")
    print("\ntotals per column:")
    for c in reason_cols:
        s = sum(num(r[c]) for r in rows)
        if s > 0:
            print(f"  {c.strip()}: {s:.0f} ({s / total * 100:.1f}%)")


if __name__ == "__main__":
    main()
