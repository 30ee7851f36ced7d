#!/usr/bin/env python3
"""Builds the tiny random-weight DeepSeek-V2/V3 fixtures and their golden outputs.

For each fixture under tests/data/<name>/:
  config.json        Hugging Face config (official rope_scaling spelling or transformers 5's
                     rope_parameters, as the fixture says)
  model.safetensors  weights in the official checkpoint layout (per-expert
                     mlp.experts.<e>.{gate,up,down}_proj.weight), BF16 (FP8 E4M3 +
                     weight_scale_inv F32 per 128x128 block for the fp8 fixture;
                     e_score_correction_bias F32)
  golden.json        prompt ids, fp32 per-position logits of the prompt, greedy continuation ids,
                     top-2 margins, the logits of every greedy step (fixtures made since
                     v3_mla512_tiny): computed by transformers' DeepseekV3ForCausalLM /
                     DeepseekV2ForCausalLM in fp32 (eager attention, eager experts) on exactly the
                     weights stored in the file (bf16-rounded / fp8-dequantised).

Run: /opt/refenv/bin/python scripts/make_fixtures.py [--out tests/data] [--only NAME]
Works with transformers 5.x (fused gate_up_proj experts or per-expert modules).
"""
import argparse
import json
import math
import os
import sys

import torch
from safetensors.torch import save_file

import transformers
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config,
                          DeepseekV3ForCausalLM)

N_GEN = 20  # greedy continuation length (the test checks >= 12)


def yarn(factor, orig, mscale, mscale_all_dim, beta_fast=32, beta_slow=1):
    return {"factor": factor, "original_max_position_embeddings": orig, "mscale": mscale,
            "mscale_all_dim": mscale_all_dim, "beta_fast": beta_fast, "beta_slow": beta_slow}


# Each fixture: model_type, config fields, rope spelling, fp8, prompt length, seed.
FIXTURES = {
    # V3 style: sigmoid, noaux_tc, n_group > 1, q_lora; official rope spelling (YaRN x40 as the
    # real checkpoint, so mscale_all_dim scales the softmax).
    "v3_tiny": dict(
        model_type="deepseek_v3", seed=1, prompt_len=24, spelling="official", fp8=False,
        rope=dict(theta=10000.0, scaling=dict(type="yarn", **yarn(40, 4096, 1.0, 1.0))),
        cfg=dict(vocab_size=512, hidden_size=96, intermediate_size=192, moe_intermediate_size=48,
                 num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                 q_lora_rank=64, kv_lora_rank=48, qk_nope_head_dim=24, qk_rope_head_dim=16,
                 v_head_dim=24, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4,
                 n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                 first_k_dense_replace=1, max_position_embeddings=163840,
                 scoring_func="sigmoid", topk_method="noaux_tc", num_nextn_predict_layers=0)),
    # V2-Lite style: softmax, greedy, no q_lora, 2 shared experts, norm_topk_prob false.
    "v2_lite_tiny": dict(
        model_type="deepseek_v2", seed=2, prompt_len=20, spelling="rope_parameters", fp8=False,
        rope=dict(theta=10000.0, scaling=None),
        cfg=dict(vocab_size=600, hidden_size=64, intermediate_size=160, moe_intermediate_size=32,
                 num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                 q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                 v_head_dim=16, n_routed_experts=16, n_shared_experts=2, num_experts_per_tok=4,
                 n_group=1, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.0,
                 first_k_dense_replace=1, max_position_embeddings=2048,
                 scoring_func="softmax", topk_method="greedy")),
    # V2 style group_limited_greedy, q_lora set, YaRN (V2's mscale 0.707) via rope_parameters.
    "v2_glg_tiny": dict(
        model_type="deepseek_v2", seed=3, prompt_len=20, spelling="rope_parameters", fp8=False,
        rope=dict(theta=10000.0, scaling=dict(rope_type="yarn", **yarn(40, 4096, 0.707, 0.707))),
        cfg=dict(vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                 q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                 v_head_dim=16, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=3,
                 n_group=4, topk_group=2, norm_topk_prob=False, routed_scaling_factor=16.0,
                 first_k_dense_replace=1, max_position_embeddings=163840,
                 scoring_func="softmax", topk_method="group_limited_greedy")),
    # FP8 block-quantised V3 in the official layout; dims > 128 and not multiples of 128.
    "v3_fp8_tiny": dict(
        model_type="deepseek_v3", seed=4, prompt_len=16, spelling="official", fp8=True,
        rope=dict(theta=10000.0, scaling=dict(type="yarn", **yarn(40, 4096, 1.0, 1.0))),
        cfg=dict(vocab_size=512, hidden_size=160, intermediate_size=320, moe_intermediate_size=80,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                 q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                 v_head_dim=40, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                 n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                 first_k_dense_replace=1, max_position_embeddings=163840,
                 scoring_func="sigmoid", topk_method="noaux_tc", num_nextn_predict_layers=0)),
    # A prompt longer than original_max_position_embeddings (32, factor 4): YaRN active; also
    # spans two 64-token KV blocks. transformers 5 rope_parameters spelling.
    "v3_yarn_long": dict(
        model_type="deepseek_v3", seed=5, prompt_len=80, spelling="rope_parameters", fp8=False,
        rope=dict(theta=10000.0, scaling=dict(rope_type="yarn", **yarn(4, 32, 1.0, 0.8))),
        cfg=dict(vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                 q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                 v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                 n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                 first_k_dense_replace=1, max_position_embeddings=128,
                 scoring_func="sigmoid", topk_method="noaux_tc", num_nextn_predict_layers=0)),
    # rope_interleave false (transformers' rotate_half RoPE), plain RoPE, no q_lora.
    "v3_rotate_half_tiny": dict(
        model_type="deepseek_v3", seed=6, prompt_len=16, spelling="rope_parameters", fp8=False,
        rope=dict(theta=50000.0, scaling=None),
        cfg=dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                 q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                 v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                 n_group=1, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.0,
                 first_k_dense_replace=1, max_position_embeddings=4096, rope_interleave=False,
                 scoring_func="sigmoid", topk_method="noaux_tc", num_nextn_predict_layers=0)),
    # DeepSeek-V3's MLA dims (kv_lora_rank 512, rope 64, nope 128, v 128): the only dims the
    # tensor-core MLA decode kernel (src/backend/cuda/mla_decode_tc.cu) takes, so the one fixture
    # that runs it; 3 heads (kv_b_proj is H x 256 x 512, the size budget), a dense layer and a
    # MoE layer; a 50-token prompt + 20 greedy steps cross the 64-token KV page.
    "v3_mla512_tiny": dict(
        model_type="deepseek_v3", seed=7, prompt_len=50, spelling="official", fp8=False,
        rope=dict(theta=10000.0, scaling=dict(type="yarn", **yarn(40, 4096, 1.0, 1.0))),
        cfg=dict(vocab_size=256, hidden_size=128, intermediate_size=128, moe_intermediate_size=32,
                 num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3,
                 q_lora_rank=32, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                 v_head_dim=128, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                 n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                 first_k_dense_replace=1, max_position_embeddings=163840,
                 scoring_func="sigmoid", topk_method="noaux_tc", num_nextn_predict_layers=0)),
}


def config_json(fx):
    c = dict(fx["cfg"])
    arch = "DeepseekV3ForCausalLM" if fx["model_type"] == "deepseek_v3" else "DeepseekV2ForCausalLM"
    out = {"architectures": [arch], "model_type": fx["model_type"], "hidden_act": "silu",
           "attention_bias": False, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
           "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16", "moe_layer_freq": 1}
    out.update(c)
    rope = fx["rope"]
    if fx["spelling"] == "official":
        out["rope_theta"] = rope["theta"]
        out["rope_scaling"] = rope["scaling"]
    else:
        rp = {"rope_type": "default", "rope_theta": rope["theta"]}
        if rope["scaling"]:
            rp.update(rope["scaling"])
        out["rope_parameters"] = rp
    if fx["fp8"]:
        out["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
    return out


def hf_config(fx, cj):
    kw = {k: v for k, v in cj.items() if k not in ("architectures", "quantization_config",
                                                      "model_type", "torch_dtype")}
    cls = DeepseekV3Config if fx["model_type"] == "deepseek_v3" else DeepseekV2Config
    cfg = cls(**kw)
    cfg._attn_implementation = "eager"
    if hasattr(cfg, "_experts_implementation"):
        cfg._experts_implementation = "eager"
    return cfg


# ---- official <-> transformers state-dict layout --------------------------------------------
def to_official(sd, cfg):
    """transformers state dict -> official checkpoint names (per-expert weights)."""
    out = {}
    inter = cfg.moe_intermediate_size
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :inter].clone()
                out[f"{pre}{e}.up_proj.weight"] = v[e, inter:].clone()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].clone()
        else:
            out[k] = v.clone()
    return out


def from_official(off, sd_template, cfg):
    """Inverse of to_official, shaped like the model's own state dict."""
    new = {}
    for k, v in sd_template.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            new[k] = torch.stack([torch.cat([off[f"{pre}{e}.gate_proj.weight"],
                                             off[f"{pre}{e}.up_proj.weight"]], 0)
                                  for e in range(v.shape[0])])
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            new[k] = torch.stack([off[f"{pre}{e}.down_proj.weight"] for e in range(v.shape[0])])
        else:
            new[k] = off[k]
    return new


def is_quantised_linear(name):
    """Official FP8 checkpoints quantise every Linear inside the layers except the router."""
    if ".layers." not in name or not name.endswith(".weight"):
        return False
    if "layernorm" in name or name.endswith("mlp.gate.weight"):
        return False
    return "_proj" in name


def fp8_quantise(w, block=128):
    """Block-wise e4m3: scale = amax / 448 per 128x128 block (partial at the edges)."""
    out_f, in_f = w.shape
    nb_o, nb_i = math.ceil(out_f / block), math.ceil(in_f / block)
    scale = torch.zeros(nb_o, nb_i, dtype=torch.float32)
    q = torch.zeros(out_f, in_f, dtype=torch.float8_e4m3fn)
    deq = torch.zeros(out_f, in_f, dtype=torch.float32)
    for bo in range(nb_o):
        for bi in range(nb_i):
            blk = w[bo * block:(bo + 1) * block, bi * block:(bi + 1) * block]
            s = max(blk.abs().max().item(), 1e-12) / 448.0
            s = torch.tensor(s, dtype=torch.float32)
            qb = (blk / s).to(torch.float8_e4m3fn)
            scale[bo, bi] = s
            q[bo * block:(bo + 1) * block, bi * block:(bi + 1) * block] = qb
            deq[bo * block:(bo + 1) * block, bi * block:(bi + 1) * block] = qb.to(torch.float32) * s
    return q, scale, deq


def randomise(off, cfg, gen):
    """Weights with enough spread that routing and attention are not degenerate."""
    for k, v in off.items():
        if k.endswith("e_score_correction_bias"):
            off[k] = (torch.rand(v.shape, generator=gen) - 0.5) * 0.2
        elif "norm" in k:
            off[k] = 1.0 + 0.2 * (torch.rand(v.shape, generator=gen) - 0.5)
        elif k.endswith("embed_tokens.weight"):
            off[k] = torch.randn(v.shape, generator=gen)
        elif k.endswith("mlp.gate.weight"):
            off[k] = torch.randn(v.shape, generator=gen) * (2.0 / math.sqrt(v.shape[1]))
        else:  # Linear [out, in]
            gain = 1.5 if ("q_" in k or "kv_" in k) else 1.0
            off[k] = torch.randn(v.shape, generator=gen) * (gain / math.sqrt(v.shape[1]))
    return off


def margins(logits):
    top = torch.topk(logits, 2, dim=-1).values
    return (top[..., 0] - top[..., 1]).tolist()


def build(name, fx, out_dir):
    torch.manual_seed(fx["seed"])
    gen = torch.Generator().manual_seed(1000 + fx["seed"])
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    cj = config_json(fx)
    cfg = hf_config(fx, cj)
    cls = DeepseekV3ForCausalLM if fx["model_type"] == "deepseek_v3" else DeepseekV2ForCausalLM
    model = cls(cfg).float().eval()
    sd = {k: v for k, v in model.state_dict().items()}
    off = randomise(to_official(sd, cfg), cfg, gen)

    # Storage rounding: bf16 everywhere (bias F32); fp8 block quantisation for the fp8 fixture.
    tensors = {}
    for k, v in off.items():
        if k.endswith("e_score_correction_bias"):
            tensors[k] = v.float().contiguous()
            off[k] = v.float()
        elif fx["fp8"] and is_quantised_linear(k):
            q, s, deq = fp8_quantise(v.float())
            tensors[k] = q.contiguous()
            tensors[k + "_scale_inv"] = s.contiguous()
            off[k] = deq
        else:
            b = v.to(torch.bfloat16)
            tensors[k] = b.contiguous()
            off[k] = b.float()
    model.load_state_dict(from_official(off, sd, cfg), strict=True)

    # Golden outputs in fp32.
    g = torch.Generator().manual_seed(2000 + fx["seed"])
    prompt = torch.randint(2, cfg.vocab_size, (fx["prompt_len"],), generator=g).tolist()
    with torch.no_grad():
        ids = torch.tensor([prompt])
        logits = model(ids).logits[0].float()
        gen_ids, gen_margins, gen_logits = [], [], []
        cur = list(prompt)
        for _ in range(N_GEN):  # plain greedy loop, full recompute each step (no cache)
            last = model(torch.tensor([cur])).logits[0, -1].float()
            nxt = int(torch.argmax(last).item())
            gen_margins.append(margins(last))
            gen_logits.append(last)
            gen_ids.append(nxt)
            cur.append(nxt)
        # Cross-check against transformers' own generate (with its cache).
        hf = model.generate(ids, max_new_tokens=N_GEN, do_sample=False, min_new_tokens=N_GEN,
                            eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    if hf != gen_ids:
        print(f"  note: generate() differs from the plain loop: {hf} vs {gen_ids}")
    pm = margins(logits)
    small = sum(1 for m in pm + gen_margins if m < 1e-3)
    total = len(pm) + len(gen_margins)
    print(f"{name}: prompt {len(prompt)}, max|logit| {logits.abs().max():.3f}, "
          f"logit std {logits.std():.3f}, margins < 1e-3: {small}/{total}, "
          f"min greedy margin {min(gen_margins):.2e}")
    assert small <= total // 10, f"{name}: too many tiny top-2 margins"

    cj_out = dict(cj)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj_out, f, indent=2)
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    golden = {
        "source": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                  f"{cls.__name__}, fp32 eager on the stored weights",
        "prompt_ids": prompt,
        "prompt_logits": [[float(f"{x:.7g}") for x in row] for row in logits.tolist()],
        "prompt_margins": pm,
        "greedy_ids": gen_ids,
        "greedy_margins": gen_margins,
        # Logits of each greedy step (= teacher-forced decode over greedy_ids: step i sees the
        # prompt + greedy_ids[:i]).
        "greedy_logits": [[float(f"{x:.7g}") for x in row.tolist()] for row in gen_logits],
        "max_abs_logit": float(logits.abs().max()),
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"  wrote {d} ({size / 1e6:.2f} MB)")
    assert size < 3e6, f"{name} fixture too large"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name, fx in FIXTURES.items():
        if a.only and name != a.only:
            continue
        build(name, fx, a.out)


if __name__ == "__main__":
    sys.exit(main())
