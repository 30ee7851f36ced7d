#!/usr/bin/env python3
"""Renders bench/results/e2e.json as SVG (Python stdlib only):

  throughput_vs_concurrency.svg  per-GPU output tok/s vs concurrency (log2 x), one line per
                                 (model, input length)
  pareto.svg                     per-GPU output tok/s vs tokens/s per user (1000 / median
                                 TPOT); each series' points labelled with their concurrency,
                                 its Pareto frontier (points no other point beats on both
                                 axes) drawn as a line; optional baseline points (--baseline,
                                 hf_baseline.py JSON files: decode_tok_s vs 1000 / step_ms)

  python3 bench/plot_e2e.py bench/results/e2e.json --out-dir bench/results [--baseline f.json ...]
"""
import argparse
import json
import math
import os
import sys

W, H = 760, 500
ML, MR, MT, MB = 80, 230, 50, 60  # margins (legend on the right)
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def nice_ticks(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    return ticks


def fmt(v):
    if v >= 1000:
        return "%.0f" % v
    if v >= 10:
        return "%.0f" % v
    if v >= 1:
        return "%.1f" % v
    return "%.2g" % v


class Chart:
    def __init__(self, title, xlabel, ylabel, xs, ys, xlog2=False):
        self.title, self.xlabel, self.ylabel, self.xlog2 = title, xlabel, ylabel, xlog2
        self.parts = []
        if xlog2:
            lo = math.floor(math.log2(max(min(xs), 1e-9)))
            hi = math.ceil(math.log2(max(xs)))
            self.xticks = [2 ** k for k in range(lo, max(hi, lo + 1) + 1)]
            self.x0, self.x1 = math.log2(self.xticks[0]), math.log2(self.xticks[-1])
        else:
            self.xticks = nice_ticks(0, max(xs) * 1.05)
            self.x0, self.x1 = 0, self.xticks[-1]
        self.yticks = nice_ticks(0, max(ys) * 1.05)
        self.y0, self.y1 = 0, self.yticks[-1]

    def px(self, x):
        v = math.log2(x) if self.xlog2 else x
        return ML + (v - self.x0) / ((self.x1 - self.x0) or 1) * (W - ML - MR)

    def py(self, y):
        return H - MB - (y - self.y0) / ((self.y1 - self.y0) or 1) * (H - MT - MB)

    def axes(self):
        p = self.parts
        p.append('<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>' % (ML, esc(self.title)))
        for t in self.xticks:
            x = self.px(t)
            p.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, MT, x, H - MB))
            p.append('<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>' % (x, H - MB + 16, fmt(t)))
        for t in self.yticks:
            y = self.py(t)
            p.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (ML, y, W - MR, y))
            p.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>' % (ML - 6, y + 4, fmt(t)))
        p.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>' % (ML, MT, W - ML - MR, H - MT - MB))
        p.append('<text x="%d" y="%d" font-size="13" text-anchor="middle">%s</text>' % ((ML + W - MR) / 2, H - 18, esc(self.xlabel)))
        p.append('<text x="18" y="%d" font-size="13" text-anchor="middle" transform="rotate(-90 18 %d)">%s</text>'
                 % ((MT + H - MB) / 2, (MT + H - MB) / 2, esc(self.ylabel)))

    def line(self, pts, color, dashed=False):
        if len(pts) < 2:
            return
        d = " ".join("%.1f,%.1f" % (self.px(x), self.py(y)) for x, y in pts)
        self.parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>'
                          % (d, color, ' stroke-dasharray="6,4"' if dashed else ""))

    def points(self, pts, color, labels=None, shape="circle"):
        for i, (x, y) in enumerate(pts):
            cx, cy = self.px(x), self.py(y)
            if shape == "square":
                self.parts.append('<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s"/>' % (cx - 4, cy - 4, color))
            else:
                self.parts.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>' % (cx, cy, color))
            if labels:
                self.parts.append('<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>' % (cx + 5, cy - 5, color, esc(labels[i])))

    def legend(self, entries):
        for i, (name, color, dashed) in enumerate(entries):
            y = MT + 10 + 18 * i
            x = W - MR + 14
            self.parts.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                              % (x, y, x + 22, y, color, ' stroke-dasharray="6,4"' if dashed else ""))
            self.parts.append('<text x="%d" y="%d" font-size="11">%s</text>' % (x + 28, y + 4, esc(name)))

    def svg(self):
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
                'font-family="sans-serif">\n<rect width="100%%" height="100%%" fill="white"/>\n%s\n</svg>\n'
                % (W, H, W, H, "\n".join(self.parts)))


def pareto_frontier(pts):
    """Points not dominated (another point >= on both axes and > on one), sorted by x."""
    front = [p for p in pts if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in pts)]
    return sorted(front)


def series_of(records):
    out = {}
    for r in records:
        if r.get("output_tok_s_per_gpu") is None:
            continue
        key = "%s %s L=%s in=%d" % (r["model"], r.get("dtype") or "", r.get("layers"), r["input_len"])
        out.setdefault(key, []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r["concurrency"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("e2e_json")
    p.add_argument("--out-dir", default="")
    p.add_argument("--baseline", nargs="*", default=[], help="hf_baseline.py result JSON files")
    a = p.parse_args()
    with open(a.e2e_json) as f:
        records = json.load(f)
    out_dir = a.out_dir or os.path.dirname(os.path.abspath(a.e2e_json))
    os.makedirs(out_dir, exist_ok=True)
    series = series_of(records)
    if not series:
        print("plot_e2e: no records with throughput", file=sys.stderr)
        return 1
    gpus = sorted({r.get("gpu") or "?" for r in records})

    # 1. Throughput vs concurrency.
    xs = [r["concurrency"] for s in series.values() for r in s]
    ys = [r["output_tok_s_per_gpu"] for s in series.values() for r in s]
    c = Chart("Output throughput per GPU vs concurrency (%s)" % ", ".join(gpus), "concurrency (requests in flight)",
              "output tok/s per GPU", xs, ys, xlog2=True)
    c.axes()
    legend = []
    for i, (name, rs) in enumerate(sorted(series.items())):
        col = COLORS[i % len(COLORS)]
        pts = [(r["concurrency"], r["output_tok_s_per_gpu"]) for r in rs]
        c.line(pts, col)
        c.points(pts, col)
        legend.append((name, col, False))
    c.legend(legend)
    with open(os.path.join(out_dir, "throughput_vs_concurrency.svg"), "w") as f:
        f.write(c.svg())

    # 2. Pareto: per-GPU throughput vs per-user speed.
    base = []
    for path in a.baseline:
        try:
            with open(path) as f:
                b = json.load(f)
            if b.get("step_ms"):
                base.append(("HF b=%s in=%s" % (b["batch_size"], b["input_len"]), 1000.0 / b["step_ms"], b["decode_tok_s"]))
        except (OSError, ValueError, KeyError):
            print("plot_e2e: skipping baseline %s" % path, file=sys.stderr)
    pts_all = [(1000.0 / r["tpot_ms_median"], r["output_tok_s_per_gpu"]) for s in series.values() for r in s
               if r.get("tpot_ms_median")]
    pts_all += [(x, y) for _, x, y in base]
    if pts_all:
        c = Chart("Per-GPU throughput vs per-user speed (%s)" % ", ".join(gpus),
                  "tokens/s per user (1000 / median TPOT ms)", "output tok/s per GPU",
                  [x for x, _ in pts_all], [y for _, y in pts_all])
        c.axes()
        legend = []
        for i, (name, rs) in enumerate(sorted(series.items())):
            col = COLORS[i % len(COLORS)]
            rs = [r for r in rs if r.get("tpot_ms_median")]
            pts = [(1000.0 / r["tpot_ms_median"], r["output_tok_s_per_gpu"]) for r in rs]
            c.points(pts, col, labels=["c%d" % r["concurrency"] for r in rs])
            c.line(pareto_frontier(pts), col, dashed=True)
            legend.append((name, col, True))
        for name, x, y in base:
            c.points([(x, y)], "#555", labels=[name], shape="square")
        if base:
            legend.append(("transformers generate (squares)", "#555", False))
        c.legend(legend)
        with open(os.path.join(out_dir, "pareto.svg"), "w") as f:
            f.write(c.svg())
    print("plot_e2e: wrote %s/{throughput_vs_concurrency,pareto}.svg" % out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
