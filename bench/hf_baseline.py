#!/usr/bin/env python3
"""Baseline: the fixed-batch workload of `dsinfer bench one-batch` through transformers'
`generate` (random weights from the config, num_hidden_layers truncated).

B sequences x L random prompt tokens, exactly O new tokens each (greedy, EOS ignored via
min_new_tokens = max_new_tokens = O). Timed after a warm-up: prefill = generate(max_new_tokens=1) (median of 3);
full = generate(max_new_tokens=O); decode step = (full - prefill) / (O - 1).
FP8 configs are run in the baseline dtype (quantization_config dropped: transformers' FP8
path needs real quantised weights). Writes one JSON object (--output-file, and stdout).

  python bench/hf_baseline.py --model ../shared/models/deepseek-v2-lite --num-layers 27 \
      --batch-size 8 --input-len 1024 --output-len 256 --device cuda --dtype bfloat16
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="dir with config.json (or the file)")
    p.add_argument("--num-layers", type=int, default=0, help="truncate num_hidden_layers (0 = config's)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=16)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on cuda, float32 on cpu) | bfloat16 | float16 | float32")
    p.add_argument("--attn-implementation", default="sdpa", help="eager | sdpa | ... (transformers attn_implementation)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=2, help="rounds of untimed generate() (2 tokens, then 1) first")
    p.add_argument("--output-file", default="")
    a = p.parse_args()

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    dev = a.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype_name = a.dtype if a.dtype != "auto" else ("bfloat16" if dev == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)

    cfg_path = a.model if os.path.isfile(a.model) else os.path.join(a.model, "config.json")
    with open(cfg_path) as f:
        raw = json.load(f)
    fp8 = bool(raw.get("quantization_config"))
    raw.pop("quantization_config", None)
    if a.num_layers > 0:
        raw["num_hidden_layers"] = a.num_layers
    raw["num_nextn_predict_layers"] = 0
    model_type = raw["model_type"]
    if model_type == "kimi_k2":
        model_type = raw["model_type"] = "deepseek_v3"
    cfg = AutoConfig.for_model(model_type, **{k: v for k, v in raw.items() if k != "model_type"})
    cfg._attn_implementation = a.attn_implementation

    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.eval()
    load_s = time.perf_counter() - t0
    vocab = cfg.vocab_size
    lo, hi = (100, vocab - 2000) if vocab >= 4000 else (0, vocab)
    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(lo, hi, (a.batch_size, a.input_len), generator=g).to(dev)
    mask = torch.ones_like(ids)

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def gen(n, inp=ids, m=mask):
        sync()
        t = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=inp, attention_mask=m, max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=True)
        sync()
        return time.perf_counter() - t, out

    for _ in range(a.warmup):  # same shapes as the timed runs (allocator, kernels, caches)
        gen(2)
        gen(1)
    prefill_s = sorted(gen(1)[0] for _ in range(3))[1]  # median of 3
    full_s, out = gen(a.output_len)
    new_tokens = out.shape[1] - a.input_len
    assert new_tokens == a.output_len, (new_tokens, a.output_len)
    step_s = (full_s - prefill_s) / max(1, a.output_len - 1)
    gpu = torch.cuda.get_device_name(0) if dev == "cuda" else platform.processor() or "cpu"
    commit = os.environ.get("COMMIT", "")  # the sweep passes the commit of the binaries it runs
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            commit = ""
    res = {
        "engine": "transformers.generate",
        "model": a.model,
        "model_type": model_type,
        "layers": cfg.num_hidden_layers,
        "dtype": dtype_name,
        "config_fp8": fp8,
        "device": dev,
        "gpu": gpu,
        "batch_size": a.batch_size,
        "input_len": a.input_len,
        "output_len": a.output_len,
        "attn_implementation": a.attn_implementation,
        "load_s": load_s,
        "prefill_ms": prefill_s * 1e3,
        "total_ms": full_s * 1e3,
        "step_ms": step_s * 1e3,
        "output_tok_s": a.batch_size * a.output_len / full_s,
        "decode_tok_s": a.batch_size / step_s if step_s > 0 else 0.0,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "commit": commit,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    text = json.dumps(res, indent=2)
    print(text)
    if a.output_file:
        with open(a.output_file, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
