#!/usr/bin/env python3
"""Free-running greedy generation through the CLI against the fixtures' golden greedy ids.

For each fixture directory (config.json, model.safetensors, golden.json from
scripts/make_fixtures.py), runs `dsinfer generate --prompt-ids <golden prompt> --max-tokens N
--temperature 0 --ignore-eos --output json` once per backend setting and compares `token_ids`
with golden's `greedy_ids`. Prints one line per fixture and setting: the ids generated, how many
lead golden's, and at the first divergence golden's top-2 margin there. Exit status 1 if a
setting listed in --must-match diverges where golden's margin at that step is above --margin.

Usage: greedy_cli_check.py --dsinfer BIN --data DIR [--settings cpu,cuda,cuda-precise]
"""
import argparse
import json
import os
import subprocess
import sys

SETTINGS = {
    "cpu": ["--device", "cpu"],
    "cuda": ["--device", "cuda"],
    "cuda-precise": ["--device", "cuda", "--precise-activations"],
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsinfer", required=True)
    p.add_argument("--data", required=True, help="directory holding the fixture directories")
    p.add_argument("--settings", default="cpu,cuda,cuda-precise")
    p.add_argument("--must-match", default="cpu,cuda-precise")
    p.add_argument("--margin", type=float, default=0.05)
    a = p.parse_args()
    must = set(a.must_match.split(",")) if a.must_match else set()
    bad = 0
    for name in sorted(os.listdir(a.data)):
        d = os.path.join(a.data, name)
        gpath = os.path.join(d, "golden.json")
        if not os.path.isfile(gpath) or not os.path.isfile(os.path.join(d, "model.safetensors")):
            continue
        g = json.load(open(gpath))
        want, margins = g["greedy_ids"], g["greedy_margins"]
        prompt = ",".join(str(t) for t in g["prompt_ids"])
        for s in a.settings.split(","):
            cmd = [a.dsinfer, "generate", "--model", d, "--prompt-ids", prompt, "--max-tokens", str(len(want)),
                   "--temperature", "0", "--ignore-eos", "--output", "json"] + SETTINGS[s]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"[greedy] {name} {s}: ERROR rc={r.returncode} {r.stderr.strip()[-300:]}")
                bad += s in must
                continue
            got = json.loads(r.stdout.strip().splitlines()[-1])["token_ids"]
            lead = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            if lead == len(want):
                print(f"[greedy] {name} {s}: {lead}/{len(want)} ids equal golden")
                continue
            m = margins[lead]
            print(f"[greedy] {name} {s}: first {lead}/{len(want)} ids equal golden; step {lead}: got {got[lead]} "
                  f"golden {want[lead]} (golden top-2 margin {m:.4g})")
            if s in must and m > a.margin:
                bad += 1
    print(f"[greedy] {'FAIL' if bad else 'PASS'}: {bad} required setting(s) diverged above margin {a.margin}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
