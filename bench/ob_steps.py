#!/usr/bin/env python3
"""Median decode step by attention split count, per `dsinfer bench one-batch --output-file` JSON.

Usage: python3 bench/ob_steps.py [--split-keys 32] FILE.json [FILE.json ...]

One line a file: its name, the run's median step (ms) and, for each count of 32-key splits of the
decode context (ceil(context / split_keys), the batch-1 attention kernel's splits), the median of
those steps (the first decode step, which includes graph capture, left out). Session 35 found the
V2-Lite 4K step ~30 us slower at odd split counts past 128 this way.
"""
import argparse
import json
import os
import statistics


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--split-keys", type=int, default=32)
    a = p.parse_args()
    for f in a.files:
        with open(f) as fh:
            d = json.load(fh)
        by = {}
        for s in (d.get("steps") or [])[1:]:
            if "context" in s and "ms" in s:
                by.setdefault((s["context"] + a.split_keys - 1) // a.split_keys, []).append(s["ms"])
        parts = " ".join(f"S{k}:{statistics.median(v):.3f}" for k, v in sorted(by.items()))
        name = os.path.basename(f)
        print(f"{name} median {d.get('step_ms', float('nan')):.4f} {parts}")


if __name__ == "__main__":
    main()
