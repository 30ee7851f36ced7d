#!/usr/bin/env python3
"""Measures the roofline rates of a GPU with torch: memory read bandwidth and dense GEMM
throughput (bf16, and fp8 e4m3 via torch._scaled_mm when supported). Prints one JSON object:
  {"gpu", "mem_bw_gbps", "copy_bw_gbps", "bf16_tflops", "fp8_tflops"}   (fp8_tflops null if unsupported)
Bandwidth: the best of several passes of a sum over a 4 GiB bf16 tensor (bytes read / time):
mem_bw_gbps, the rate the sweep's rooflines use (a decode step reads its weights). copy_bw_gbps:
the best of several device-to-device copies of 2 GiB (bytes read + written / time), the
ceiling ../shared/docs/ANCHORS.md names, for the reports beside it.
GEMM: the best of several 8192^3 matmuls (2 n^3 / time). CUDA events time each.

  python bench/gpu_rates.py [--output-file rates.json] [--device cuda]
"""
import argparse
import json
import sys


def timed(torch, fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # warm-up
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-file", default="")
    p.add_argument("--gib", type=float, default=4.0, help="bandwidth buffer size")
    p.add_argument("--n", type=int, default=8192, help="GEMM size")
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("gpu_rates: no CUDA device", file=sys.stderr)
        return 1
    dev = "cuda"
    n_el = int(a.gib * (1 << 30) / 2)
    x = torch.ones(n_el, dtype=torch.bfloat16, device=dev)
    t = timed(torch, lambda: x.sum(dtype=torch.float32), a.reps)
    bw = n_el * 2 / t / 1e9
    del x
    half = n_el // 2
    src = torch.ones(half, dtype=torch.bfloat16, device=dev)
    dst = torch.empty_like(src)
    t = timed(torch, lambda: dst.copy_(src), a.reps)
    copy_bw = 2 * half * 2 / t / 1e9
    del src, dst
    n = a.n
    A = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
    B = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
    t = timed(torch, lambda: A @ B, a.reps)
    bf16 = 2 * n ** 3 / t / 1e12
    fp8 = None
    try:
        A8 = A.to(torch.float8_e4m3fn)
        B8 = B.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.ones((), dtype=torch.float32, device=dev)
        t = timed(torch, lambda: torch._scaled_mm(A8, B8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), a.reps)
        fp8 = 2 * n ** 3 / t / 1e12
    except Exception as e:  # older torch / GPU without FP8
        print("gpu_rates: fp8 GEMM not measured: %s" % e, file=sys.stderr)
    res = {"gpu": torch.cuda.get_device_name(0), "mem_bw_gbps": bw, "copy_bw_gbps": copy_bw, "bf16_tflops": bf16,
           "fp8_tflops": fp8}
    print(json.dumps(res))
    if a.output_file:
        with open(a.output_file, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
