#!/usr/bin/python3
"""Independent float64 numpy reference forward passes for ember's per-family tests.

What it is: a small, self-contained float64 implementation of the causal-LM forward pass of
several transformer families, written from the published Hugging Face transformers model
definitions (the semantics of modeling_gpt2.py, modeling_llama.py, modeling_mistral.py,
modeling_qwen3.py, modeling_phi3.py, modeling_gemma2.py, modeling_gemma3.py and the RoPE
initialisers in modeling_rope_utils.py: default, dynamic, yarn, longrope). No code is taken
from any project; everything below is re-derived from the math.

For every case it builds deterministic float32 weights (FNV-1a seed + splitmix64 stream, see
README.md: the C++ test regenerates them bit for bit), runs 40 token ids through the model in
float64 and writes tests/reference/families/<case>.json with the config, the tensor list, the
ids and the logits of a few rows. It also toggles each family-specific feature off and prints
how much the recorded logits move (max |delta| / max |logit|), to show each feature is tested.

Regenerate everything (from the repository root):

    /usr/bin/python3 tests/reference/families.py
"""

import json
import math
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "families")

VOCAB = 256
HIDDEN = 64
INTER = 128
IDS = [(3 + 101 * i) % VOCAB for i in range(40)]  # 40 distinct ids spread over the vocab
POSITIONS = [0, 5, 11, 19, 27, 35, 39]             # rows whose logits are recorded


# ----------------------------------------------------------------------------------------------
# Deterministic weights: FNV-1a 64 seed of the tensor name, splitmix64 stream, u in [-1, 1)
# ----------------------------------------------------------------------------------------------

MASK64 = (1 << 64) - 1


def fnv1a64(name):
    h = 1469598103934665603
    for c in name.encode("utf-8"):
        h = ((h ^ c) * 1099511628211) & MASK64
    return h


def splitmix_uniform(seed, n):
    """The first n draws of splitmix64(state=seed), mapped to doubles in [-1, 1)."""
    k = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + k * np.uint64(0x9E3779B97F4A7C15)  # state after the k-th next()
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -52 - 1.0


def make_tensor(name, shape, offset, scale):
    """float32(offset + scale * u_k), returned as float64 with the HF (row-major) shape."""
    n = int(np.prod(shape))
    u = splitmix_uniform(fnv1a64(name), n)
    return (offset + scale * u).astype(np.float32).astype(np.float64).reshape(shape)


def lin_scale(fan_in):
    # rounded so that the JSON decimal is the exact value used on both sides
    return round(1.5 / math.sqrt(fan_in), 4)


# ----------------------------------------------------------------------------------------------
# Building blocks (T = sequence length, H = query heads, KV = kv heads, D = head_dim)
# ----------------------------------------------------------------------------------------------

def linear(x, w, b=None):
    """HF nn.Linear: x [T, in], w [out, in] -> [T, out]."""
    y = x @ w.T
    return y if b is None else y + b


def conv1d(x, w, b):
    """GPT-2 Conv1D: x [T, in], w [in, out] (stored transposed vs nn.Linear) -> [T, out]."""
    return x @ w + b


def rms_norm(x, w, eps, gemma=False):
    """x [..., n] / sqrt(mean(x^2) + eps) * w  (Gemma: * (1 + w))."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * (1.0 + w) if gemma else y * w


def layer_norm(x, w, b, eps):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """gelu_new / gelu_pytorch_tanh."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def default_inv_freq(dim, base):
    """[D/2]: base^(-2i/D)."""
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def dynamic_ntk_inv_freq(dim, base, factor, max_pos, seq_len):
    """HF 'dynamic' for one forward over seq_len tokens (seq_len = max(position_ids) + 1)."""
    seq_len = max(seq_len, max_pos)
    base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return default_inv_freq(dim, base)


def yarn_inv_freq(dim, base, factor, orig_max, beta_fast=32.0, beta_slow=1.0):
    """HF 'yarn': returns (inv_freq [D/2], attention_factor, (low, high))."""
    def corr_dim(rot):
        return dim * math.log(orig_max / (rot * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrap = 1.0 - ramp                                   # 1: keep the original frequency
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    inv = (1.0 / (factor * pos_freqs)) * (1.0 - extrap) + (1.0 / pos_freqs) * extrap
    attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv, attention_factor, (low, high)


def longrope_inv_freq(dim, base, long_factor, short_factor, max_pos, orig_max, seq_len):
    """HF 'longrope' (Phi-3): returns (inv_freq [D/2], attention_factor)."""
    factor = max_pos / orig_max
    attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig_max))
    ext = np.asarray(long_factor if seq_len > orig_max else short_factor, dtype=np.float64)
    inv = 1.0 / (ext * base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    return inv, attention_factor


def rope_cos_sin(inv_freq, positions, attention_factor=1.0):
    """cos, sin [T, D]: freqs = pos * inv_freq, duplicated over both halves (rotate_half layout)."""
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)  # [T, D/2]
    emb = np.concatenate([freqs, freqs], axis=-1)                         # [T, D]
    return np.cos(emb) * attention_factor, np.sin(emb) * attention_factor


def apply_rope(x, cos, sin):
    """x [T, heads, D]; element i pairs with element i + D/2 (HF rotate_half)."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def attention(q, k, v, scale, window=None, softcap=None):
    """Causal GQA attention.
    q [T, H, D], k/v [T, KV, D] -> [T, H*D]. Query i sees key j iff 0 <= i - j (< window)."""
    T, H, D = q.shape
    group = H // k.shape[1]
    kh = np.repeat(k, group, axis=1)  # query head h uses kv head h // group
    vh = np.repeat(v, group, axis=1)
    s = np.einsum("ihd,jhd->hij", q, kh) * scale  # [H, T, T]
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    allowed = (i - j) >= 0
    if window is not None:
        allowed &= (i - j) < window
    s = np.where(allowed[None], s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("hij,jhd->ihd", p, vh)  # [T, H, D]
    return o.reshape(T, H * D)


# ----------------------------------------------------------------------------------------------
# Llama-style decoders: llama, mistral, qwen3, phi3
# ----------------------------------------------------------------------------------------------

def llama_tensors(cfg, fused=False, qk_norm=False, embed_scale=1.0):
    """(name, shape, offset, scale) for the llama/mistral/qwen3/phi3 checkpoint layouts."""
    d, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or d // H
    t = [("model.embed_tokens.weight", [V, d], 0.0, embed_scale)]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t.append((p + "input_layernorm.weight", [d], 1.0, 0.2))
        if fused:
            t.append((p + "self_attn.qkv_proj.weight", [H * D + 2 * KV * D, d], 0.0, lin_scale(d)))
        else:
            t.append((p + "self_attn.q_proj.weight", [H * D, d], 0.0, lin_scale(d)))
            t.append((p + "self_attn.k_proj.weight", [KV * D, d], 0.0, lin_scale(d)))
            t.append((p + "self_attn.v_proj.weight", [KV * D, d], 0.0, lin_scale(d)))
        t.append((p + "self_attn.o_proj.weight", [d, H * D], 0.0, lin_scale(H * D)))
        if qk_norm:
            t.append((p + "self_attn.q_norm.weight", [D], 1.0, 0.2))
            t.append((p + "self_attn.k_norm.weight", [D], 1.0, 0.2))
        t.append((p + "post_attention_layernorm.weight", [d], 1.0, 0.2))
        if fused:
            t.append((p + "mlp.gate_up_proj.weight", [2 * I, d], 0.0, lin_scale(d)))
        else:
            t.append((p + "mlp.gate_proj.weight", [I, d], 0.0, lin_scale(d)))
            t.append((p + "mlp.up_proj.weight", [I, d], 0.0, lin_scale(d)))
        t.append((p + "mlp.down_proj.weight", [d, I], 0.0, lin_scale(I)))
    t.append(("model.norm.weight", [d], 1.0, 0.2))
    if not cfg["tie_word_embeddings"]:
        t.append(("lm_head.weight", [V, d], 0.0, lin_scale(d)))
    return t


def llama_rope(cfg, T, opt):
    """cos, sin [T, D] for the llama-style families, from cfg['rope_scaling']."""
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    D = cfg.get("head_dim") or d // H
    base = cfg["rope_theta"]
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if opt.get("plain_rope"):
        kind = "default"
    af = 1.0
    if kind == "default":
        inv = default_inv_freq(D, base)
    elif kind == "dynamic":
        inv = dynamic_ntk_inv_freq(D, base, rs["factor"], cfg["max_position_embeddings"], T)
    elif kind == "yarn":
        inv, af, _ = yarn_inv_freq(D, base, rs["factor"], rs["original_max_position_embeddings"])
    elif kind == "longrope":
        long_f = rs["short_factor"] if opt.get("longrope_short") else rs["long_factor"]
        inv, af = longrope_inv_freq(D, base, long_f, rs["short_factor"],
                                    cfg["max_position_embeddings"],
                                    cfg["original_max_position_embeddings"], T)
    else:
        raise ValueError(kind)
    if opt.get("no_attention_factor"):
        af = 1.0
    return rope_cos_sin(inv, range(T), af)


def llama_forward(cfg, W, ids, opt):
    """Pre-norm decoder: x += attn(rms(x)); x += mlp(rms(x)); logits = lm_head(rms(x)). [T, V]"""
    d, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or d // H
    I = cfg["intermediate_size"]
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    window = cfg.get("sliding_window") if opt.get("window", True) else None
    if window is not None:
        window += opt.get("window_delta", 0)
    if cfg["model_type"] == "qwen3" and not cfg.get("use_sliding_window"):
        window = None
    cos, sin = llama_rope(cfg, T, opt)
    x = W["model.embed_tokens.weight"][ids]  # [T, d]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        if p + "self_attn.qkv_proj.weight" in W:  # phi3: rows q, then k, then v
            qkv = linear(h, W[p + "self_attn.qkv_proj.weight"])
            q, k, v = np.split(qkv, [H * D, H * D + KV * D], axis=-1)
        else:
            q = linear(h, W[p + "self_attn.q_proj.weight"])
            k = linear(h, W[p + "self_attn.k_proj.weight"])
            v = linear(h, W[p + "self_attn.v_proj.weight"])
        q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
        qk_norm = p + "self_attn.q_norm.weight" in W and opt.get("qk_norm", True)
        if qk_norm and not opt.get("qk_norm_after_rope"):  # qwen3: per-head RMSNorm before RoPE
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if qk_norm and opt.get("qk_norm_after_rope"):
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        a = attention(q, k, v, D ** -0.5, window=window)
        x = x + linear(a, W[p + "self_attn.o_proj.weight"])
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        if p + "mlp.gate_up_proj.weight" in W:  # phi3: rows gate, then up
            gu = linear(h, W[p + "mlp.gate_up_proj.weight"])
            gate, up = gu[:, :I], gu[:, I:]
            if opt.get("swap_gate_up"):
                gate, up = up, gate
        else:
            gate = linear(h, W[p + "mlp.gate_proj.weight"])
            up = linear(h, W[p + "mlp.up_proj.weight"])
        x = x + linear(silu(gate) * up, W[p + "mlp.down_proj.weight"])
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return linear(x, head)


# ----------------------------------------------------------------------------------------------
# Gemma 2 / Gemma 3 (text)
# ----------------------------------------------------------------------------------------------

def gemma_tensors(cfg):
    d, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    gemma3 = cfg["model_type"] == "gemma3_text"
    t = [("model.embed_tokens.weight", [V, d], 0.0, 0.5)]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t.append((p + "input_layernorm.weight", [d], 0.0, 0.2))
        t.append((p + "self_attn.q_proj.weight", [H * D, d], 0.0, lin_scale(d)))
        t.append((p + "self_attn.k_proj.weight", [KV * D, d], 0.0, lin_scale(d)))
        t.append((p + "self_attn.v_proj.weight", [KV * D, d], 0.0, lin_scale(d)))
        t.append((p + "self_attn.o_proj.weight", [d, H * D], 0.0, lin_scale(H * D)))
        if gemma3:
            t.append((p + "self_attn.q_norm.weight", [D], 0.0, 0.2))
            t.append((p + "self_attn.k_norm.weight", [D], 0.0, 0.2))
        t.append((p + "post_attention_layernorm.weight", [d], 0.0, 0.2))
        t.append((p + "pre_feedforward_layernorm.weight", [d], 0.0, 0.2))
        t.append((p + "mlp.gate_proj.weight", [I, d], 0.0, lin_scale(d)))
        t.append((p + "mlp.up_proj.weight", [I, d], 0.0, lin_scale(d)))
        t.append((p + "mlp.down_proj.weight", [d, I], 0.0, lin_scale(I)))
        t.append((p + "post_feedforward_layernorm.weight", [d], 0.0, 0.2))
    t.append(("model.norm.weight", [d], 0.0, 0.2))
    return t


def gemma_layer_is_sliding(cfg, l):
    if cfg["model_type"] == "gemma3_text":
        return (l + 1) % cfg["sliding_window_pattern"] != 0
    return l % 2 == 0  # gemma2: even layers slide


def gemma_forward(cfg, W, ids, opt):
    """Gemma 2/3: sandwich norms around attention and MLP, (1 + w) RMSNorm, GeGLU. [T, V]"""
    d, H, KV, D = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                   cfg["head_dim"])
    eps = cfg["rms_norm_eps"]
    gemma3 = cfg["model_type"] == "gemma3_text"
    T = len(ids)
    g = not opt.get("plain_norm_weight")  # (1 + w) vs w
    norm = lambda x, w: rms_norm(x, w, eps, gemma=g)
    scale = (cfg["query_pre_attn_scalar"] if opt.get("qpas", True) else D) ** -0.5
    softcap = cfg.get("attn_logit_softcapping") if opt.get("attn_softcap", True) else None
    global_base = cfg["rope_theta"]
    if opt.get("global_uses_local_base"):
        global_base = cfg["rope_local_base_freq"]
    cos_g, sin_g = rope_cos_sin(default_inv_freq(D, global_base), range(T))
    local_base = cfg.get("rope_local_base_freq", cfg["rope_theta"])
    if not opt.get("local_base", True):
        local_base = cfg["rope_theta"]
    cos_l, sin_l = rope_cos_sin(default_inv_freq(D, local_base), range(T))
    normalizer = float(np.float32(math.sqrt(d))) if opt.get("embed_scale", True) else 1.0
    x = W["model.embed_tokens.weight"][ids] * normalizer  # [T, d]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        sliding = gemma_layer_is_sliding(cfg, l) or opt.get("all_sliding", False)
        window = cfg["sliding_window"] if sliding and opt.get("window", True) else None
        cos, sin = (cos_l, sin_l) if (gemma3 and sliding) else (cos_g, sin_g)
        h = norm(x, W[p + "input_layernorm.weight"])
        q = linear(h, W[p + "self_attn.q_proj.weight"]).reshape(T, H, D)
        k = linear(h, W[p + "self_attn.k_proj.weight"]).reshape(T, KV, D)
        v = linear(h, W[p + "self_attn.v_proj.weight"]).reshape(T, KV, D)
        if gemma3 and opt.get("qk_norm", True):  # per-head, before RoPE
            q = norm(q, W[p + "self_attn.q_norm.weight"])
            k = norm(k, W[p + "self_attn.k_norm.weight"])
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = linear(attention(q, k, v, scale, window=window, softcap=softcap),
                   W[p + "self_attn.o_proj.weight"])
        if opt.get("post_attn_norm", True):
            a = norm(a, W[p + "post_attention_layernorm.weight"])
        x = x + a
        h = norm(x, W[p + "pre_feedforward_layernorm.weight"])
        act = gelu_erf if opt.get("erf_gelu") else gelu_tanh
        m = linear(act(linear(h, W[p + "mlp.gate_proj.weight"])) * linear(h, W[p + "mlp.up_proj.weight"]),
                   W[p + "mlp.down_proj.weight"])
        if opt.get("post_ff_norm", True):
            m = norm(m, W[p + "post_feedforward_layernorm.weight"])
        x = x + m
    x = norm(x, W["model.norm.weight"])
    logits = linear(x, W["model.embed_tokens.weight"])
    cap = cfg.get("final_logit_softcapping") if opt.get("final_softcap", True) else None
    if cap is not None:
        logits = cap * np.tanh(logits / cap)
    return logits


# ----------------------------------------------------------------------------------------------
# GPT-2
# ----------------------------------------------------------------------------------------------

def gpt2_tensors(cfg):
    d, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    t = [("wte.weight", [V, d], 0.0, 0.5), ("wpe.weight", [P, d], 0.0, 0.5)]
    for l in range(L):
        p = f"h.{l}."
        t += [(p + "ln_1.weight", [d], 1.0, 0.2), (p + "ln_1.bias", [d], 0.0, 0.1),
              (p + "attn.c_attn.weight", [d, 3 * d], 0.0, lin_scale(d)),
              (p + "attn.c_attn.bias", [3 * d], 0.0, 0.1),
              (p + "attn.c_proj.weight", [d, d], 0.0, lin_scale(d)),
              (p + "attn.c_proj.bias", [d], 0.0, 0.1),
              (p + "ln_2.weight", [d], 1.0, 0.2), (p + "ln_2.bias", [d], 0.0, 0.1),
              (p + "mlp.c_fc.weight", [d, 4 * d], 0.0, lin_scale(d)),
              (p + "mlp.c_fc.bias", [4 * d], 0.0, 0.1),
              (p + "mlp.c_proj.weight", [4 * d, d], 0.0, lin_scale(4 * d)),
              (p + "mlp.c_proj.bias", [d], 0.0, 0.1)]
    t += [("ln_f.weight", [d], 1.0, 0.2), ("ln_f.bias", [d], 0.0, 0.1)]
    return t


def gpt2_forward(cfg, W, ids, opt):
    d, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    D, T = d // H, len(ids)
    act = gelu_erf if opt.get("erf_gelu") else gelu_tanh
    x = W["wte.weight"][ids]
    if opt.get("wpe", True):
        x = x + W["wpe.weight"][:T]
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        h = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = conv1d(h, W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"])  # [T, 3d]: q|k|v
        q, k, v = (m.reshape(T, H, D) for m in np.split(qkv, 3, axis=-1))
        a = attention(q, k, v, D ** -0.5 if opt.get("attn_scale", True) else 1.0)
        x = x + conv1d(a, W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"])
        h = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        h = act(conv1d(h, W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"]))
        x = x + conv1d(h, W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"])
    x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return linear(x, W["wte.weight"])  # lm_head tied to wte


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------

COMMON = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}


def llama_cfg(arch, model_type, **kw):
    cfg = {"architectures": [arch], "model_type": model_type, **COMMON, "pad_token_id": 0,
           "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
           "attention_dropout": 0.0, "initializer_range": 0.02, "tie_word_embeddings": False,
           "use_cache": True}
    cfg.update(kw)
    return cfg


def case_qwen3():
    cfg = llama_cfg("Qwen3ForCausalLM", "qwen3", head_dim=32, rms_norm_eps=1e-6,
                    rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                    sliding_window=None, max_window_layers=2)
    feats = {"q_norm/k_norm": {"qk_norm": False},
             "q/k norm after RoPE instead of before": {"qk_norm_after_rope": True}}
    # tied head: smaller embeddings keep the logits (and each token's self-logit) a few units
    return cfg, llama_tensors(cfg, qk_norm=True, embed_scale=0.3), llama_forward, feats


def case_mistral_window():
    cfg = llama_cfg("MistralForCausalLM", "mistral", sliding_window=8)
    feats = {"sliding_window 8": {"window": False},
             "window off by one (i - j <= 8)": {"window_delta": 1}}
    return cfg, llama_tensors(cfg), llama_forward, feats


def case_llama_rope_yarn():
    cfg = llama_cfg("LlamaForCausalLM", "llama", rope_theta=10.0, mlp_bias=False, pretraining_tp=1,
                    rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": 16})
    feats = {"yarn (vs plain RoPE)": {"plain_rope": True},
             "yarn attention_factor": {"no_attention_factor": True}}
    return cfg, llama_tensors(cfg), llama_forward, feats


def case_llama_rope_dynamic():
    # max_pos 20 x factor 2 = the 40-token prompt: HF's whole-prompt base (seq_len 40) equals the
    # static base an engine with a KV cache uses for the scaled context (vLLM's choice, ember's).
    cfg = llama_cfg("LlamaForCausalLM", "llama", max_position_embeddings=20, mlp_bias=False,
                    pretraining_tp=1, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    return cfg, llama_tensors(cfg), llama_forward, {"dynamic NTK (vs plain RoPE)": {"plain_rope": True}}


def phi3_cfg(**kw):
    cfg = llama_cfg("Phi3ForCausalLM", "phi3", original_max_position_embeddings=64,
                    partial_rotary_factor=1.0, sliding_window=12, resid_pdrop=0.0,
                    embd_pdrop=0.0)
    del cfg["head_dim"], cfg["attention_bias"]
    cfg.update(kw)
    return cfg


def case_phi3():
    cfg = phi3_cfg()
    feats = {"sliding_window 12": {"window": False},
             "window off by one (i - j <= 12)": {"window_delta": 1},
             "gate_up row order (gate first)": {"swap_gate_up": True}}
    return cfg, llama_tensors(cfg, fused=True), llama_forward, feats


def case_phi3_longrope():
    cfg = phi3_cfg(max_position_embeddings=128, original_max_position_embeddings=16,
                   sliding_window=None,
                   rope_scaling={"type": "longrope",
                                 "long_factor": [1.0, 1.3, 1.7, 2.2, 2.9, 3.8, 5.1, 6.9],
                                 "short_factor": [1.0, 1.05, 1.15, 1.3, 1.5, 1.8, 2.2, 2.7]})
    feats = {"long factors (vs short)": {"longrope_short": True},
             "longrope scaling_factor sqrt(1+ln8/ln16)": {"no_attention_factor": True}}
    return cfg, llama_tensors(cfg, fused=True), llama_forward, feats


def gemma_common(arch, model_type, layers, **kw):
    cfg = {"architectures": [arch], "model_type": model_type, **COMMON, "pad_token_id": 0,
           "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": layers,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
           "hidden_activation": "gelu_pytorch_tanh", "hidden_act": "gelu_pytorch_tanh",
           "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_scaling": None,
           "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
           "query_pre_attn_scalar": 24, "sliding_window": 8, "tie_word_embeddings": True,
           "use_cache": True}
    cfg.update(kw)
    return cfg


def case_gemma2():
    cfg = gemma_common("Gemma2ForCausalLM", "gemma2", 4, rope_theta=10000.0,
                       attn_logit_softcapping=3.0, final_logit_softcapping=8.0,
                       cache_implementation="hybrid")
    cfg["layer_types"] = ["sliding_attention" if gemma_layer_is_sliding(cfg, l) else
                          "full_attention" for l in range(4)]
    feats = {"sliding window on even layers": {"window": False},
             "odd layers global (vs all sliding)": {"all_sliding": True},
             "attn_logit_softcapping 3": {"attn_softcap": False},
             "final_logit_softcapping 8": {"final_softcap": False},
             "query_pre_attn_scalar 24 (vs head_dim 32)": {"qpas": False},
             "embedding * sqrt(hidden)": {"embed_scale": False},
             "(1 + w) norm weights": {"plain_norm_weight": True},
             "post_attention_layernorm": {"post_attn_norm": False},
             "post_feedforward_layernorm": {"post_ff_norm": False},
             "tanh GELU (vs erf)": {"erf_gelu": True}}
    return cfg, gemma_tensors(cfg), gemma_forward, feats


def case_gemma3():
    cfg = gemma_common("Gemma3ForCausalLM", "gemma3_text", 6, rope_theta=1000000.0,
                       rope_local_base_freq=10000.0, sliding_window_pattern=3,
                       attn_logit_softcapping=None, final_logit_softcapping=None)
    cfg["layer_types"] = ["sliding_attention" if gemma_layer_is_sliding(cfg, l) else
                          "full_attention" for l in range(6)]
    feats = {"sliding window (on 4 of 6 layers)": {"window": False},
             "layers 2 and 5 global (vs all sliding)": {"all_sliding": True},
             "rope_local_base_freq on sliding layers": {"local_base": False},
             "rope_theta 1e6 on global layers": {"global_uses_local_base": True},
             "query_pre_attn_scalar 24 (vs head_dim 32)": {"qpas": False},
             "q_norm/k_norm": {"qk_norm": False},
             "embedding * sqrt(hidden)": {"embed_scale": False},
             "(1 + w) norm weights": {"plain_norm_weight": True},
             "post_attention_layernorm": {"post_attn_norm": False},
             "post_feedforward_layernorm": {"post_ff_norm": False},
             "tanh GELU (vs erf)": {"erf_gelu": True}}
    return cfg, gemma_tensors(cfg), gemma_forward, feats


def case_gpt2():
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", **COMMON,
           "n_embd": HIDDEN, "n_layer": 2, "n_head": 2, "n_positions": 64, "n_ctx": 64,
           "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
           "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.02,
           "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
           "reorder_and_upcast_attn": False, "tie_word_embeddings": True, "use_cache": True}
    feats = {"position embeddings wpe": {"wpe": False},
             "gelu_new (vs erf GELU)": {"erf_gelu": True},
             "attention scale 1/sqrt(head_dim)": {"attn_scale": False}}
    return cfg, gpt2_tensors(cfg), gpt2_forward, feats


CASES = {
    "qwen3": case_qwen3,
    "mistral_window": case_mistral_window,
    "gemma3": case_gemma3,
    "gemma2": case_gemma2,
    "phi3": case_phi3,
    "phi3_longrope": case_phi3_longrope,
    "gpt2": case_gpt2,
    "llama_rope_yarn": case_llama_rope_yarn,
    "llama_rope_dynamic": case_llama_rope_dynamic,
}


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------

def sig7(x):
    return float(f"{x:.7g}")


def write_case(path, case, cfg, tensors, logits):
    """JSON with one tensor / one logits row per line (compact but diffable)."""
    lines = ["{",
             f' "case": {json.dumps(case)},',
             f' "architecture": {json.dumps(cfg["architectures"][0])},',
             ' "config": ' + json.dumps(cfg, indent=2).replace("\n", "\n ") + ",",
             ' "tensors": [']
    rows = [json.dumps({"name": n, "shape": s, "offset": a, "scale": b}) for n, s, a, b in tensors]
    lines.append(",\n".join("  " + r for r in rows))
    lines += [" ],", f' "ids": {json.dumps(IDS)},', f' "positions": {json.dumps(POSITIONS)},',
              ' "logits": [']
    rows = [json.dumps([sig7(v) for v in row]) for row in logits]
    lines.append(",\n".join("  " + r for r in rows))
    lines += [" ]", "}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for case, build in CASES.items():
        cfg, tensors, forward, feats = build()
        W = {n: make_tensor(n, s, a, b) for n, s, a, b in tensors}
        logits = forward(cfg, W, IDS, {})[POSITIONS]  # [len(POSITIONS), V]
        assert np.all(np.isfinite(logits))
        peak = np.max(np.abs(logits))
        path = os.path.join(OUT_DIR, case + ".json")
        write_case(path, case, cfg, tensors, logits)
        print(f"{case}: max|logit| {peak:.3f}, std {logits.std():.3f}, "
              f"{os.path.getsize(path) // 1024} KiB")
        for feat, opt in feats.items():
            alt = forward(cfg, W, IDS, opt)[POSITIONS]
            print(f"    toggle off {feat}: max rel change {np.max(np.abs(alt - logits)) / peak:.3g}")
    emb = make_tensor("model.embed_tokens.weight", [VOCAB, HIDDEN], 0.0, 1.0).ravel()
    print("model.embed_tokens.weight (offset 0, scale 1) first 3:",
          ", ".join(repr(float(np.float32(v))) for v in emb[:3]))
    _, _, (lo, hi) = yarn_inv_freq(16, 10.0, 4.0, 16)
    print(f"yarn correction range for the llama_rope_yarn case: low {lo}, high {hi}")


if __name__ == "__main__":
    main()
