#!/usr/bin/env python3
"""GPU work of a trace replay: how many seconds one GPU needs to serve the first D seconds of
a Mooncake-style trace (JSONL: timestamp ms, input_length, output_length, hash_ids of 512-token
blocks), with an ideal prefix cache, chunked prefill and naive-MLA prefill attention.

Work counted (bf16 model, dims from config.json):
  - weight GEMMs: 2 x activated parameters per prefilled (uncached) token and per output token;
  - prefill attention (naive MLA, causal): per new token at position p, p + 1 key positions, each
    costing 2 x heads x (qk_nope + qk_rope + v_head) FLOPs per layer;
  - K/V decompression (kv_b_proj) of the whole context once per prefill chunk.
Rates are the measured ones (bench/results): pass --gemm-tflops / --attn-tflops / --kvb-tflops.
Decode steps also read the weights and KV; they ride on the prefill chunks in mixed steps, so
they are reported separately as a lower bound of extra time, not added.

Usage: trace_work.py --trace FILE --config config.json --activated-params N [--duration-s 600]
"""
import argparse
import json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--activated-params", type=float, required=True, help="dsinfer inspect: activated_per_token")
    p.add_argument("--duration-s", type=float, default=600)
    p.add_argument("--chunk", type=int, default=8192, help="prefill tokens per step (--max-num-batched-tokens)")
    p.add_argument("--block", type=int, default=512)
    p.add_argument("--gemm-tflops", type=float, default=190.0)
    p.add_argument("--attn-tflops", type=float, default=236.0)
    p.add_argument("--kvb-tflops", type=float, default=500.0)
    a = p.parse_args()
    c = json.load(open(a.config))
    L, H = c["num_hidden_layers"], c["num_attention_heads"]
    dqk, dv, kvl = c["qk_nope_head_dim"] + c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    reqs = [json.loads(x) for x in open(a.trace)]
    reqs = [r for r in reqs if r["timestamp"] < a.duration_s * 1000]
    seen, prompt, new, out, pairs, decomp = set(), 0, 0, 0, 0.0, 0.0
    for r in reqs:
        n_in, hashes = r["input_length"], r.get("hash_ids", [])
        cached = 0
        for i, h in enumerate(hashes):  # leading run of blocks already seen
            if h not in seen or cached != a.block * i:
                break
            cached = min(n_in, a.block * (i + 1))
        seen.update(hashes)
        n_new = n_in - cached
        prompt += n_in
        new += n_new
        out += r["output_length"]
        pairs += n_new * (cached + (n_new + 1) / 2)
        pos = cached
        while pos < n_in:  # each chunk decompresses its whole context
            pos = min(n_in, pos + a.chunk)
            decomp += pos
    gemm = 2 * a.activated_params * new
    attn = pairs * L * H * 2 * (dqk + dv)
    kvb = decomp * L * 2 * kvl * H * (c["qk_nope_head_dim"] + dv)
    t = {"gemm": gemm / a.gemm_tflops / 1e12, "attention": attn / a.attn_tflops / 1e12, "kv_b": kvb / a.kvb_tflops / 1e12}
    print(f"first {a.duration_s:.0f} s: {len(reqs)} requests, {prompt / 1e6:.2f}M prompt tokens "
          f"({new / 1e6:.2f}M after the prefix cache, hit rate {1 - new / max(prompt, 1):.1%}), {out / 1e6:.3f}M output tokens")
    print(f"prefill FLOPs: weight GEMMs {gemm / 1e15:.1f} PFLOP, attention {attn / 1e15:.1f} PFLOP, kv_b {kvb / 1e15:.1f} PFLOP")
    print("GPU seconds at the given rates: " + ", ".join(f"{k} {v:.0f} s" for k, v in t.items()) +
          f"; total {sum(t.values()):.0f} s for {a.duration_s:.0f} s of arrivals "
          f"(time scale needed to keep up >= {sum(t.values()) / a.duration_s:.2f})")


if __name__ == "__main__":
    main()
