#!/usr/bin/python3
"""Independent float64 numpy reference forward passes for ember's mixture-of-experts families.

The same kind of reference as families.py (whose weight generator, building blocks and JSON
writer it reuses), for the four mixture families ember runs, each written from the published
Hugging Face transformers model definition:

  - Mixtral (modeling_mixtral.py, MixtralSparseMoeBlock): router `block_sparse_moe.gate`, softmax
    over all experts, top-k, the k weights renormalized to sum to 1 (always), experts
    `block_sparse_moe.experts.E.{w1,w3,w2}` = gate, up, down of a SwiGLU MLP.
  - Qwen2-MoE (modeling_qwen2_moe.py, Qwen2MoeSparseMoeBlock): QKV biases; router `mlp.gate`,
    softmax, top-k, renormalized only with norm_topk_prob; experts `mlp.experts.E.*_proj` of
    moe_intermediate_size; plus a shared expert (shared_expert_intermediate_size) on every token,
    scaled by sigmoid(mlp.shared_expert_gate . x).
  - Qwen3-MoE (modeling_qwen3_moe.py): Qwen3's attention (per-head q_norm / k_norm before RoPE,
    head_dim of its own) with Qwen2-MoE's routed experts and norm_topk_prob, no shared expert.
  - OLMoE (modeling_olmoe.py): q_norm / k_norm RMSNorm over the whole Q (K) projection before
    RoPE; routed experts of intermediate_size, norm_topk_prob false.

No code is taken from any project. Every case has 8 experts, 2 per token, 2 layers; over the 40
ids the routers pick every expert of every layer (checked here and in the C++ test).

Regenerate (from the repository root): /usr/bin/python3 tests/reference/moe.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families as f  # noqa: E402  (the shared generator, blocks and writer)

N_EXPERTS = 8
TOP_K = 2
EXPERT_FFN = 32
SHARED_FFN = 48


def moe_cfg(arch, model_type, **kw):
    cfg = f.llama_cfg(arch, model_type, **kw)
    cfg.pop("use_cache", None)
    return cfg


# ----------------------------------------------------------------------------------------------
# Tensors
# ----------------------------------------------------------------------------------------------

def attention_tensors(cfg, p, t):
    d, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg["head_dim"]
    for name, rows in (("q", H * D), ("k", KV * D), ("v", KV * D)):
        t.append((p + f"self_attn.{name}_proj.weight", [rows, d], 0.0, f.lin_scale(d)))
        if cfg.get("attention_bias"):
            t.append((p + f"self_attn.{name}_proj.bias", [rows], 0.0, 0.1))
    t.append((p + "self_attn.o_proj.weight", [d, H * D], 0.0, f.lin_scale(H * D)))
    if cfg["model_type"] == "qwen3_moe":
        t.append((p + "self_attn.q_norm.weight", [D], 1.0, 0.2))
        t.append((p + "self_attn.k_norm.weight", [D], 1.0, 0.2))
    if cfg["model_type"] == "olmoe":
        t.append((p + "self_attn.q_norm.weight", [H * D], 1.0, 0.2))
        t.append((p + "self_attn.k_norm.weight", [KV * D], 1.0, 0.2))


def expert_names(cfg, p, e):
    """HF names of expert e's gate, up and down projections."""
    if cfg["model_type"] == "mixtral":
        q = p + f"block_sparse_moe.experts.{e}."
        return q + "w1.weight", q + "w3.weight", q + "w2.weight"
    q = p + f"mlp.experts.{e}."
    return q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight"


def router_name(cfg, p):
    return p + ("block_sparse_moe.gate.weight" if cfg["model_type"] == "mixtral"
                else "mlp.gate.weight")


def expert_ffn(cfg):
    return cfg.get("moe_intermediate_size") or cfg["intermediate_size"]


def moe_tensors(cfg):
    d, V = cfg["hidden_size"], cfg["vocab_size"]
    F = expert_ffn(cfg)
    E = cfg.get("num_local_experts") or cfg["num_experts"]
    t = [("model.embed_tokens.weight", [V, d], 0.0, 1.0)]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t.append((p + "input_layernorm.weight", [d], 1.0, 0.2))
        attention_tensors(cfg, p, t)
        t.append((p + "post_attention_layernorm.weight", [d], 1.0, 0.2))
        t.append((router_name(cfg, p), [E, d], 0.0, f.lin_scale(d)))
        for e in range(E):
            gate, up, down = expert_names(cfg, p, e)
            t.append((gate, [F, d], 0.0, f.lin_scale(d)))
            t.append((up, [F, d], 0.0, f.lin_scale(d)))
            t.append((down, [d, F], 0.0, f.lin_scale(F)))
        S = cfg.get("shared_expert_intermediate_size") or 0
        if S > 0:
            q = p + "mlp.shared_expert."
            t.append((q + "gate_proj.weight", [S, d], 0.0, f.lin_scale(d)))
            t.append((q + "up_proj.weight", [S, d], 0.0, f.lin_scale(d)))
            t.append((q + "down_proj.weight", [d, S], 0.0, f.lin_scale(S)))
            t.append((p + "mlp.shared_expert_gate.weight", [1, d], 0.0, f.lin_scale(d)))
    t.append(("model.norm.weight", [d], 1.0, 0.2))
    t.append(("lm_head.weight", [V, d], 0.0, f.lin_scale(d)))
    return t


# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------

def route(logits, top_k, renormalize, opt):
    """softmax over all experts, then the top k (HF order); [T, E] -> (experts [T, k], weights)."""
    if opt.get("topk_then_softmax"):  # the wrong order, for the sensitivity print
        experts = np.argsort(-logits, axis=-1, kind="stable")[:, :top_k]
        z = np.take_along_axis(logits, experts, axis=-1)
        w = np.exp(z - z.max(axis=-1, keepdims=True))
        return experts, w / w.sum(axis=-1, keepdims=True)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    experts = np.argsort(-p, axis=-1, kind="stable")[:, :top_k]
    w = np.take_along_axis(p, experts, axis=-1)
    if renormalize != bool(opt.get("flip_renormalize")):
        w = w / w.sum(axis=-1, keepdims=True)
    return experts, w


def moe_mlp(cfg, W, p, h, opt, load):
    """The sparse block: sum over each token's k experts of weight x SwiGLU expert, + shared."""
    T = h.shape[0]
    E = cfg.get("num_local_experts") or cfg["num_experts"]
    renormalize = cfg["model_type"] == "mixtral" or cfg.get("norm_topk_prob", False)
    experts, weights = route(f.linear(h, W[router_name(cfg, p)]), cfg["num_experts_per_tok"],
                             renormalize, opt)
    out = np.zeros_like(h)
    for e in range(E):
        rows, slot = np.nonzero(experts == e)
        if rows.size == 0:
            continue
        load[e] += rows.size
        gate, up, down = (W[n] for n in expert_names(cfg, p, e))
        x = h[rows]
        y = f.linear(f.silu(f.linear(x, gate)) * f.linear(x, up), down)
        out[rows] += weights[rows, slot][:, None] * y
    if (cfg.get("shared_expert_intermediate_size") or 0) > 0 and not opt.get("no_shared"):
        q = p + "mlp.shared_expert."
        s = f.linear(f.silu(f.linear(h, W[q + "gate_proj.weight"])) *
                     f.linear(h, W[q + "up_proj.weight"]), W[q + "down_proj.weight"])
        g = f.linear(h, W[p + "mlp.shared_expert_gate.weight"])  # [T, 1]
        out += (1.0 if opt.get("no_shared_gate") else 1.0 / (1.0 + np.exp(-g))) * s
    assert out.shape == (T, cfg["hidden_size"])
    return out


def moe_forward(cfg, W, ids, opt, loads=None):
    d, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    cos, sin = f.rope_cos_sin(f.default_inv_freq(D, cfg["rope_theta"]), range(T))
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = f.rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q, k, v = (f.linear(h, W[p + f"self_attn.{n}_proj.weight"],
                            W.get(p + f"self_attn.{n}_proj.bias")) for n in "qkv")
        norms = p + "self_attn.q_norm.weight" in W and not opt.get("no_qk_norm")
        if norms and cfg["model_type"] == "olmoe":  # over the whole projection
            q = f.rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = f.rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
        if norms and cfg["model_type"] == "qwen3_moe":  # per head
            q = f.rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = f.rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = f.apply_rope(q, cos, sin), f.apply_rope(k, cos, sin)
        x = x + f.linear(f.attention(q, k, v, D ** -0.5), W[p + "self_attn.o_proj.weight"])
        h = f.rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        load = np.zeros(N_EXPERTS, dtype=np.int64)
        x = x + moe_mlp(cfg, W, p, h, opt, load)
        if loads is not None:
            loads.append(load)
    x = f.rms_norm(x, W["model.norm.weight"], eps)
    return f.linear(x, W["lm_head.weight"])


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------

ROUTING = {"top-k before the softmax": {"topk_then_softmax": True},
           "renormalization of the top k flipped": {"flip_renormalize": True}}


def case_mixtral():
    cfg = moe_cfg("MixtralForCausalLM", "mixtral", intermediate_size=EXPERT_FFN,
                  num_local_experts=N_EXPERTS, num_experts_per_tok=TOP_K, sliding_window=None,
                  router_aux_loss_coef=0.02, output_router_logits=False)
    return cfg, moe_tensors(cfg), ROUTING


def case_qwen2_moe():
    cfg = moe_cfg("Qwen2MoeForCausalLM", "qwen2_moe", num_experts=N_EXPERTS,
                  num_experts_per_tok=TOP_K, moe_intermediate_size=EXPERT_FFN,
                  shared_expert_intermediate_size=SHARED_FFN, norm_topk_prob=False,
                  decoder_sparse_step=1, mlp_only_layers=[], attention_bias=True,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False)
    feats = dict(ROUTING, **{"shared expert": {"no_shared": True},
                             "shared expert's sigmoid gate": {"no_shared_gate": True}})
    return cfg, moe_tensors(cfg), feats


def case_qwen3_moe():
    cfg = moe_cfg("Qwen3MoeForCausalLM", "qwen3_moe", num_experts=N_EXPERTS,
                  num_experts_per_tok=TOP_K, moe_intermediate_size=EXPERT_FFN,
                  norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], head_dim=32,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False)
    feats = dict(ROUTING, **{"per-head q_norm/k_norm": {"no_qk_norm": True}})
    return cfg, moe_tensors(cfg), feats


def case_olmoe():
    cfg = moe_cfg("OlmoeForCausalLM", "olmoe", intermediate_size=EXPERT_FFN,
                  num_experts=N_EXPERTS, num_experts_per_tok=TOP_K, norm_topk_prob=False,
                  clip_qkv=None)
    feats = dict(ROUTING, **{"whole-projection q_norm/k_norm": {"no_qk_norm": True}})
    return cfg, moe_tensors(cfg), feats


CASES = {"mixtral": case_mixtral, "qwen2_moe": case_qwen2_moe, "qwen3_moe": case_qwen3_moe,
         "olmoe": case_olmoe}


def main():
    os.makedirs(f.OUT_DIR, exist_ok=True)
    for case, build in CASES.items():
        cfg, tensors, feats = build()
        W = {n: f.make_tensor(n, s, a, b) for n, s, a, b in tensors}
        loads = []
        logits = moe_forward(cfg, W, f.IDS, {}, loads)[f.POSITIONS]
        assert np.all(np.isfinite(logits))
        for l, load in enumerate(loads):
            assert np.all(load > 0), f"{case}: layer {l} leaves an expert unrouted: {load}"
        peak = np.max(np.abs(logits))
        path = os.path.join(f.OUT_DIR, case + ".json")
        f.write_case(path, case, cfg, tensors, logits)
        print(f"{case}: max|logit| {peak:.3f}, std {logits.std():.3f}, "
              f"{os.path.getsize(path) // 1024} KiB, tokens per expert "
              + " / ".join(",".join(str(int(n)) for n in load) for load in loads))
        for feat, opt in feats.items():
            alt = moe_forward(cfg, W, f.IDS, opt)[f.POSITIONS]
            print(f"    toggle off {feat}: max rel change {np.max(np.abs(alt - logits)) / peak:.3g}")


if __name__ == "__main__":
    main()
