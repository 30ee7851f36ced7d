"""CPU experiment (issue 4, fp8fix): how far do DeepSeek-style 1x128 FP8 activation
quantisation and bf16 activation rounding move a fixture's logits from its fp32 golden?

Loads tests/data/<fixture> into transformers (weights as stored: fp8 dequantised / bf16), then
runs the prompt with forward pre-hooks on the Linear layers that the CUDA runner sends through
a given path:
  --mode fp8   inputs of the projections the runner's cuBLASLt FP8 path handles (FP8-stored
               weights, not fused gate_up / experts when I % 128 != 0, not kv_b) are quantised per
               token and 128-channel group to e4m3 (scale = amax / 448), exactly like
               Fp8QuantizePerTokenGroup; other Linear inputs are rounded to bf16.
  --mode bf16  every Linear input (and the MLA absorbed products are not modelled) rounded to bf16.
Prints min/mean cosine vs golden per position and, with --routing, every MoE layer's top-k
expert selection scores and the margin between the k-th and (k+1)-th score per token.
Run: /opt/refenv/bin/python scripts/fp8_act_quant_experiment.py --fixture v3_fp8_tiny --mode fp8
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
import make_fixtures as mf  # noqa: E402


def act_quant_e4m3(x, group=128):
    shp = x.shape
    x = x.reshape(-1, shp[-1]).float()
    out = torch.empty_like(x)
    for g0 in range(0, shp[-1], group):
        blk = x[:, g0:g0 + group]
        amax = blk.abs().amax(dim=1, keepdim=True).clamp_min(1e-10)
        scale = amax / 448.0
        q = (blk / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float()
        out[:, g0:g0 + group] = q * scale
    return out.reshape(shp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", default="v3_fp8_tiny")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    ap.add_argument("--mode", choices=["fp8", "bf16", "none"], default="fp8")
    ap.add_argument("--routing", action="store_true")
    ap.add_argument("--perturb", type=float, default=0.0,
                    help="relative N(0,1) noise on every FP8 projection output (accumulation-order model)")
    ap.add_argument("--dump", default="", help="write the prompt logits of this mode to a JSON file")
    ap.add_argument("--decode-steps", type=int, default=0, help="greedy steps after the prompt (routing report)")
    a = ap.parse_args()
    d = os.path.join(a.data, a.fixture)
    cj = json.load(open(os.path.join(d, "config.json")))
    g = json.load(open(os.path.join(d, "golden.json")))
    fx = {"model_type": cj["model_type"]}
    cfg = mf.hf_config(fx, cj)
    cls = mf.DeepseekV3ForCausalLM if cj["model_type"] == "deepseek_v3" else mf.DeepseekV2ForCausalLM
    model = cls(cfg).float().eval()
    st = load_file(os.path.join(d, "model.safetensors"))
    off = {}
    for k, v in st.items():
        if k.endswith("_scale_inv"):
            continue
        if v.dtype == torch.float8_e4m3fn:
            s = st[k + "_scale_inv"]
            w = v.float()
            rep = s.repeat_interleave(128, 0)[: w.shape[0]].repeat_interleave(128, 1)[:, : w.shape[1]]
            off[k] = w * rep
        else:
            off[k] = v.float()
    sd = model.state_dict()
    model.load_state_dict(mf.from_official(off, sd, cfg), strict=True)
    fp8_names = {k[: -len(".weight")] for k, v in st.items() if v.dtype == torch.float8_e4m3fn}
    I = cj.get("intermediate_size", 0)
    Ie = cj.get("moe_intermediate_size", 0)
    hooks = []
    gen = torch.Generator().manual_seed(7)
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        if name.endswith("mlp.gate") or name == "lm_head":
            if a.mode == "bf16" and name == "lm_head":
                pass
            else:
                continue
        # fused gate_up is fp8 in the runner only when I % 128 == 0 (and experts likewise)
        is_fp8 = name in fp8_names
        if (".gate_proj" in name or ".up_proj" in name):
            inter = Ie if "shared_experts" in name or ".experts." in name else I
            if inter % 128 != 0:
                is_fp8 = False
        def pre(m, args, q=(a.mode == "fp8" and is_fp8)):
            x = args[0]
            if a.mode == "none":
                return None
            return (act_quant_e4m3(x) if q else x.to(torch.bfloat16).float(),) + tuple(args[1:])
        hooks.append(mod.register_forward_pre_hook(pre))
        if a.perturb > 0 and a.mode == "fp8" and is_fp8:
            def post(m, args, out):
                return out * (1 + a.perturb * torch.randn(out.shape, generator=gen))
            hooks.append(mod.register_forward_hook(post))
    routes = []
    if a.routing:
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate"):
                def fh(m, args, out, name=name):
                    h = args[0].reshape(-1, args[0].shape[-1]).float()
                    logits = torch.nn.functional.linear(h, m.weight.float())
                    sc = logits.sigmoid() + m.e_score_correction_bias.float()
                    routes.append((name, sc))
                mod.register_forward_hook(fh)
    prompt = g["prompt_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float()
        gold = torch.tensor(g["prompt_logits"])
        cos = torch.nn.functional.cosine_similarity(logits, gold, dim=-1)
        print(f"{a.fixture} mode={a.mode}: prefill min_cosine={cos.min():.6f} mean={cos.mean():.6f} "
              f"argmax_mismatch={(logits.argmax(-1) != gold.argmax(-1)).sum().item()}/{len(prompt)}")
        if a.dump:
            with open(a.dump, "w") as f:
                json.dump({"source": f"scripts/fp8_act_quant_experiment.py --fixture {a.fixture} --mode {a.mode}",
                           "prompt_ids": prompt,
                           "prompt_logits": [[float(f"{x:.7g}") for x in r] for r in logits.tolist()]}, f)
        cur = list(prompt)
        for step in range(a.decode_steps):
            routes.clear()
            last = model(torch.tensor([cur])).logits[0, -1]
            nxt = int(last.argmax())
            top2 = last.topk(2).values
            print(f"step {step}: id={nxt} golden={g['greedy_ids'][step]} logit_margin={float(top2[0]-top2[1]):.4f}")
            if a.routing:
                k = cj["num_experts_per_tok"]
                ng, tg = cj.get("n_group", 1), cj.get("topk_group", 1)
                for name, sc in routes:
                    s = sc[-1]  # the decode token: sigmoid(logit) + e_score_correction_bias
                    E = s.numel()
                    gs = s.view(ng, E // ng).topk(min(2, E // ng), dim=-1).values.sum(-1)  # noaux_tc group score
                    gv, gi = gs.sort(descending=True)
                    gmargin = float(gv[tg - 1] - gv[tg]) if tg < ng else float("inf")
                    mask = torch.zeros(ng, dtype=torch.bool)
                    mask[gi[:tg]] = True
                    allowed = s.masked_fill(~mask.repeat_interleave(E // ng), float("-inf"))
                    v, idx = allowed.sort(descending=True)
                    print(f"  {name}: groups={sorted(gi[:tg].tolist())} group_margin={gmargin:.3e} "
                          f"top{k}={sorted(idx[:k].tolist())} scores={[round(float(x), 5) for x in v[:k+1]]} "
                          f"expert_margin_k_k+1={float(v[k-1]-v[k]):.3e}")
            cur.append(int(g["greedy_ids"][step]))  # teacher-force golden ids


if __name__ == "__main__":
    main()
