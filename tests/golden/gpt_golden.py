"""Tiny GPT-2 and LLaMA checkpoints with Hugging Face's names and their logits, computed in float64 by NumPy from
the models' published equations (independent of kiln), for tests/core/test_gpt.cpp and test_llama.cpp.

Run as `python3 gpt_golden.py OUTDIR`; writes into OUTDIR/gpt/ and finally OUTDIR/gpt_golden.stamp:
  gpt2_tiny.safetensors: GPT-2 (vocab 61, n_positions 16, n_embd 16, n_layer 2, n_head 4) named as the Hub's
    model.safetensors (GPT2Model's names: no "transformer." prefix, no lm_head, with the attn.bias and
    attn.masked_bias buffers of older transformers), float64;
  gpt2_tokens.npy (2, 7) int64 and gpt2_logits.npy (2, 7, 61): its logits;
  llama_tiny.safetensors: LlamaForCausalLM (vocab 53, hidden 16, intermediate 24, 2 layers, 4 heads, 2 key-value
    heads, rms_norm_eps 1e-6, rope_theta 10000, untied), float64; llama_tokens.npy (2, 6), llama_logits.npy.
GPT-2: x = wte[t] + wpe[p]; per block x += c_proj(attn(ln_1(x))), x += c_proj(gelu_new(c_fc(ln_2(x)))) with
Conv1D y = x W + b; logits = ln_f(x) wte^T. LLaMA: per layer x += o_proj(attn(rope(q), rope(k), v)) on
input_layernorm(x), x += down(silu(gate(h)) * up(h)) on post_attention_layernorm(x); logits = lm_head(norm(x)).
The rotary angles are float32, as transformers computes them (inv_freq, positions and cos/sin in float32).
"""

import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

OUT = os.path.join(sys.argv[1], "gpt")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20261127)


def normal(*shape, scale=0.3):
    return rng.normal(0.0, scale, size=shape)


def causal_attention(q, k, v):
    """q (B, H, T, D), k and v (B, H, T, D): softmax(q k^T / sqrt(D) + causal mask) v."""
    t = q.shape[2]
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


# ---------------------------------------------------------------- GPT-2
V, P, C, L, H = 61, 16, 16, 2, 4
g = {"wte.weight": normal(V, C), "wpe.weight": normal(P, C)}
for i in range(L):
    p = f"h.{i}."
    g[p + "ln_1.weight"] = 1 + normal(C, scale=0.1)
    g[p + "ln_1.bias"] = normal(C, scale=0.1)
    g[p + "attn.c_attn.weight"] = normal(C, 3 * C)
    g[p + "attn.c_attn.bias"] = normal(3 * C, scale=0.1)
    g[p + "attn.c_proj.weight"] = normal(C, C)
    g[p + "attn.c_proj.bias"] = normal(C, scale=0.1)
    g[p + "ln_2.weight"] = 1 + normal(C, scale=0.1)
    g[p + "ln_2.bias"] = normal(C, scale=0.1)
    g[p + "mlp.c_fc.weight"] = normal(C, 4 * C)
    g[p + "mlp.c_fc.bias"] = normal(4 * C, scale=0.1)
    g[p + "mlp.c_proj.weight"] = normal(4 * C, C)
    g[p + "mlp.c_proj.bias"] = normal(C, scale=0.1)
g["ln_f.weight"] = 1 + normal(C, scale=0.1)
g["ln_f.bias"] = normal(C, scale=0.1)


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def gpt2_logits(w, tokens):
    b, t = tokens.shape
    x = w["wte.weight"][tokens] + w["wpe.weight"][np.arange(t)]
    heads = lambda y: y.reshape(b, t, H, C // H).transpose(0, 2, 1, 3)
    for i in range(L):
        p = f"h.{i}."
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (heads(qkv[..., j * C:(j + 1) * C]) for j in range(3))
        y = causal_attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, t, C)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].T


tokens = rng.integers(0, V, size=(2, 7)).astype(np.int64)
np.save(os.path.join(OUT, "gpt2_tokens.npy"), tokens)
np.save(os.path.join(OUT, "gpt2_logits.npy"), gpt2_logits(g, tokens))
hub = dict(g)
for i in range(L):  # the buffers older transformers saved beside the parameters
    hub[f"h.{i}.attn.bias"] = np.tril(np.ones((P, P))).reshape(1, 1, P, P).astype(np.float64)
    hub[f"h.{i}.attn.masked_bias"] = np.array(-1e4)
save_file(hub, os.path.join(OUT, "gpt2_tiny.safetensors"), metadata={"format": "pt"})

# ---------------------------------------------------------------- LLaMA
V, HID, INTER, L, H, KV, EPS, THETA = 53, 16, 24, 2, 4, 2, 1e-6, 10000.0
D = HID // H
m = {"model.embed_tokens.weight": normal(V, HID)}
for i in range(L):
    p = f"model.layers.{i}."
    m[p + "self_attn.q_proj.weight"] = normal(HID, HID)
    m[p + "self_attn.k_proj.weight"] = normal(KV * D, HID)
    m[p + "self_attn.v_proj.weight"] = normal(KV * D, HID)
    m[p + "self_attn.o_proj.weight"] = normal(HID, HID)
    m[p + "mlp.gate_proj.weight"] = normal(INTER, HID)
    m[p + "mlp.up_proj.weight"] = normal(INTER, HID)
    m[p + "mlp.down_proj.weight"] = normal(HID, INTER)
    m[p + "input_layernorm.weight"] = 1 + normal(HID, scale=0.1)
    m[p + "post_attention_layernorm.weight"] = 1 + normal(HID, scale=0.1)
m["model.norm.weight"] = 1 + normal(HID, scale=0.1)
m["lm_head.weight"] = normal(V, HID)


def rms_norm(x, w):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + EPS) * w


def rope(x):
    """HF's apply_rotary_pos_emb: x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1)."""
    t = x.shape[2]
    inv_freq = (1.0 / (np.float32(THETA) ** (np.arange(0, D, 2, dtype=np.float32) / np.float32(D)))).astype(np.float32)
    freqs = np.outer(np.arange(t, dtype=np.float32), inv_freq).astype(np.float32)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb).astype(np.float64), np.sin(emb).astype(np.float64)
    rotated = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rotated * sin


def llama_logits(w, tokens):
    b, t = tokens.shape
    x = w["model.embed_tokens.weight"][tokens]
    heads = lambda y, n: y.reshape(b, t, n, D).transpose(0, 2, 1, 3)
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"])
        q = rope(heads(h @ w[p + "self_attn.q_proj.weight"].T, H))
        k = rope(heads(h @ w[p + "self_attn.k_proj.weight"].T, KV))
        v = heads(h @ w[p + "self_attn.v_proj.weight"].T, KV)
        k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)  # HF's repeat_kv
        y = causal_attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, t, HID)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return rms_norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


tokens = rng.integers(0, V, size=(2, 6)).astype(np.int64)
np.save(os.path.join(OUT, "llama_tokens.npy"), tokens)
np.save(os.path.join(OUT, "llama_logits.npy"), llama_logits(m, tokens))
save_file(m, os.path.join(OUT, "llama_tiny.safetensors"), metadata={"format": "pt"})

# The same model as Hugging Face's snapshot folder of a sharded model: config.json (as transformers writes it,
# with keys models::Llama ignores), two shards and model.safetensors.index.json.
hub = os.path.join(OUT, "llama_hub")
os.makedirs(hub, exist_ok=True)
with open(os.path.join(hub, "config.json"), "w") as f:
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": HID,
               "intermediate_size": INTER, "num_hidden_layers": L, "num_attention_heads": H,
               "num_key_value_heads": KV, "rms_norm_eps": EPS, "rope_theta": THETA, "max_position_embeddings": 64,
               "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "rope_scaling": None,
               "torch_dtype": "float64", "bos_token_id": 1, "eos_token_id": 2}, f, indent=2)
names = sorted(m)
shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
          "model-00002-of-00002.safetensors": names[len(names) // 2:]}
for file, part in shards.items():
    save_file({k: m[k] for k in part}, os.path.join(hub, file), metadata={"format": "pt"})
with open(os.path.join(hub, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": sum(v.nbytes for v in m.values())},
               "weight_map": {k: file for file, part in shards.items() for k in part}}, f, indent=2)

open(os.path.join(sys.argv[1], "gpt_golden.stamp"), "w").close()
