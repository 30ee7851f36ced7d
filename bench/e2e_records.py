#!/usr/bin/env python3
"""Assembles bench/results/e2e.json from the raw outputs of bench/sweep_e2e.sh.

Inputs in --raw DIR (file names written by the sweep):
  serve_<model>_in<L>_c<C>.json     `dsinfer bench serve --output-file` (its --metadata carries
                                    model, layers, dtype, concurrency, input_len, output_len)
  onebatch_<model>_in<L>_b<C>.json  `dsinfer bench one-batch --output-file` (step_ms)
  roofline_<model>_in<L>_b<C>.json  `dsinfer bench roofline --output-file` (roofline_step_ms)

One record per serve run, with exactly the keys of issue 7:
  model, layers, dtype, concurrency, input_len, output_len, output_tok_s_per_gpu,
  ttft_ms_median, tpot_ms_median, step_ms, roofline_step_ms, gpu, commit, date
step_ms is the median decode step of one-batch at batch = concurrency and the same input
length (null when that one-batch run was not made or failed); roofline_step_ms is the roofline
at that batch and the mean decode context (input + output/2).
"""
import argparse
import glob
import json
import os
import re
import sys

KEYS = ["model", "layers", "dtype", "concurrency", "input_len", "output_len", "output_tok_s_per_gpu",
        "ttft_ms_median", "tpot_ms_median", "step_ms", "roofline_step_ms", "gpu", "commit", "date"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--gpu", default="")
    p.add_argument("--commit", default="")
    p.add_argument("--append", action="store_true", help="keep records of other models already in --out")
    a = p.parse_args()

    records = []
    pat = re.compile(r"serve_(?P<model>.+)_in(?P<L>\d+)_c(?P<C>\d+)\.json$")
    for path in sorted(glob.glob(os.path.join(a.raw, "serve_*.json"))):
        m = pat.search(os.path.basename(path))
        s = load(path)
        if not m or not s:
            print("e2e_records: skipping %s" % path, file=sys.stderr)
            continue
        name, L, C = m.group("model"), int(m.group("L")), int(m.group("C"))
        ob = load(os.path.join(a.raw, "onebatch_%s_in%d_b%d.json" % (name, L, C)))
        rl = load(os.path.join(a.raw, "roofline_%s_in%d_b%d.json" % (name, L, C)))
        rec = {
            "model": s.get("model_name", name),
            "layers": s.get("layers"),
            "dtype": s.get("dtype"),
            "concurrency": C,
            "input_len": L,
            "output_len": s.get("output_len", s.get("random_output_len")),
            "output_tok_s_per_gpu": s.get("output_throughput_per_gpu"),
            "ttft_ms_median": s.get("median_ttft_ms"),
            "tpot_ms_median": s.get("median_tpot_ms"),
            "step_ms": ob.get("step_ms") if ob else None,
            "roofline_step_ms": rl.get("roofline_step_ms") if rl else None,
            "gpu": a.gpu or s.get("gpu", ""),
            "commit": a.commit or s.get("commit", ""),
            "date": s.get("date", ""),
        }
        if s.get("failed", 0):
            print("e2e_records: %s had %d failed requests" % (path, s["failed"]), file=sys.stderr)
        records.append({k: rec[k] for k in KEYS})

    if a.append and os.path.exists(a.out):
        old = load(a.out) or []
        new_models = {r["model"] for r in records}
        records = [r for r in old if r.get("model") not in new_models] + records
    records.sort(key=lambda r: (str(r["model"]), r["input_len"], r["concurrency"]))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    print("e2e_records: %d records -> %s" % (len(records), a.out))
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
