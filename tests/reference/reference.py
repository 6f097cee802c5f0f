#!/usr/bin/python3
r"""PyTorch float32 reference forward passes for fathom's tests.

Families (config.json "model_type"): llama, qwen2, qwen3 (dense), lckv-llama (LCKV), ouro (looped,
learned exit gate), huginn_raven (prelude / recurrent core / coda).  Everything is
computed in float32 on the CPU; checkpoint weights (F32 / BF16 / F16) are upcast.

    /usr/bin/python3 tests/reference/reference.py --model DIR --ids 1,2,3 \
        [--loops R] [--exit-thresholds 0.2,0.5,0.9] [--init-state zero | --init-state-file F] \
        [--incremental | --chunk N] [--budget B] --out-dir OUT
        [--decode-ids 5,6,7 [--exit-depths 4,1,2] [--layout NAME] [--shared-after S]]
    /usr/bin/python3 tests/reference/reference.py --model DIR --ids 1,2,3,... --perplexity --out-dir OUT \
        [--context N] [--loops R | --exit-threshold Q [--budget B] [--exit-criterion C]] [--layout NAME]

A dense checkpoint with an `l2a` block in config.json is an L2A gate checkpoint
(docs/L2A_FORMAT.md): LoRA merged at load (load_model / l2a_prepare), per-layer routers
gating attention / MLP / heads; --budget B (default 1) is the b every token runs under, in
every mode, and l2a_router_logits.f32 / l2a_decisions.f32 [n_layers, n_tokens, G] are written.

--decode-ids adds a teacher-forced decode under a KV layout with scripted exit depths
(prefill_logits.f32, decode_logits.f32, decode_signals.f32; see run_layout / LayoutKV).
--perplexity scores the ids teacher-forced in windows, each token at its own exit depth, as
`fathom eval` does (nll.f32, nll_depths.f32, perplexity.json; see perplexity_windows).
See README.md next to this file for the files written and the upstream sources.
Shapes in comments: S = tokens in this call, E = hidden size, H = query heads,
Hkv = key/value heads, D = head dim, V = vocab size, R = loop steps.
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

torch.set_grad_enabled(False)

# ----------------------------------------------------------------------------------------
# Checkpoint reading: a minimal safetensors reader (no `safetensors` package here).
# File layout: u64 little-endian header length N, N bytes of JSON
#   {name: {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}
# then the raw little-endian tensor bytes; offsets are relative to the end of the header.
# ----------------------------------------------------------------------------------------

_ST_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    """Return {name: float32 tensor} for one .safetensors file."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = info["dtype"]
            if dtype not in _ST_DTYPES:
                raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
            begin, end = info["data_offsets"]
            f.seek(base + begin)
            raw = bytearray(f.read(end - begin))
            if len(raw) == 0:
                t = torch.empty(0, dtype=_ST_DTYPES[dtype])
            elif dtype == "BF16":
                # bf16 bytes viewed as int16, then reinterpreted as bfloat16
                t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
            else:
                t = torch.frombuffer(raw, dtype=_ST_DTYPES[dtype])
            out[name] = t.reshape(info["shape"]).to(torch.float32).clone()
    return out


def load_checkpoint(model_dir):
    """Read model.safetensors, or the shards listed in model.safetensors.index.json."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        weights = {}
        for shard in sorted(set(weight_map.values())):
            weights.update(read_safetensors(os.path.join(model_dir, shard)))
        missing = [k for k in weight_map if k not in weights]
        if missing:
            raise ValueError(f"index lists tensors absent from the shards: {missing[:5]}")
        return weights
    raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {model_dir}")


# ----------------------------------------------------------------------------------------
# Building blocks (all float32).
# ----------------------------------------------------------------------------------------


def rms_norm(x, weight, eps):
    """RMSNorm as in HF Llama/Qwen/Ouro and Huginn: x * rsqrt(mean(x^2) + eps) * weight.
    (plain `weight`, not `1 + weight`)"""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def linear(x, weight, bias=None):
    y = x @ weight.t()
    return y if bias is None else y + bias


def inv_frequencies(head_dim, theta, scaling=None):
    """inv_freq[i] = 1 / theta^(2i/D), i = 0 .. D/2-1, computed in float32 (HF and Huginn).
    scaling: a llama3 rope_scaling dict (rope_scaling_of), applied as transformers'
    _compute_llama3_parameters does: wavelengths 2 pi / inv_freq below L / high_freq_factor
    kept, above L / low_freq_factor divided by factor, blended between (L: the original
    max_position_embeddings)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    if scaling is None:
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) * ~(wavelen > old_len / low)
    return torch.where(medium, blended, scaled)


def rope_scaling_of(cfg):
    """config.json's llama3 RoPE scaling (rope_scaling, or transformers 5's rope_parameters),
    or None (check_plain_rope refuses every other kind)."""
    for key in ("rope_scaling", "rope_parameters"):
        spec = cfg.get(key)
        if spec and spec.get("rope_type", spec.get("type", "default")) == "llama3":
            return spec
    return None


def rope_neox(x, positions, theta, scaling=None):
    """HF `rotate_half` RoPE: dimension i pairs with i + D/2.   x: [S, heads, D]
    scaling: rope_scaling_of(cfg) for the Llama-style families."""
    d = x.shape[-1]
    freqs = positions.to(torch.float32)[:, None] * inv_frequencies(d, theta, scaling)[None, :]  # [S, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [S, D]
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


def rope_interleaved(x, positions, theta):
    """Huginn `apply_rotary_emb_complex_like`: adjacent pairs (2i, 2i+1) rotated by angle
    pos * inv_freq[i].   x: [S, heads, D]"""
    d = x.shape[-1]
    freqs = positions.to(torch.float32)[:, None] * inv_frequencies(d, theta)[None, :]  # [S, D/2]
    cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
    pairs = x.unflatten(-1, (-1, 2))  # [S, heads, D/2, 2]
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)


def kv_store(cache, slot, k, v, start):
    """Write this call's keys/values for positions [start, start+S) into cache[slot]
    (appending, or overwriting an earlier write at the same positions) and return
    the keys/values of positions [0, start+S).   k, v: [S, Hkv, D]"""
    if slot in cache:
        K, V = cache[slot]
        if K.shape[0] < start:
            raise ValueError(f"KV slot {slot}: positions {K.shape[0]}..{start} were never written")
        K = torch.cat([K[:start], k, K[start + k.shape[0] :]], dim=0)
        V = torch.cat([V[:start], v, V[start + v.shape[0] :]], dim=0)
    else:
        if start != 0:
            raise ValueError(f"KV slot {slot}: first write starts at position {start}")
        K, V = k, v
    cache[slot] = (K, V)
    end = start + k.shape[0]
    return K[:end], V[:end]


def causal_attention(q, k, v, start, visible=None):
    """Softmax(q k^T / sqrt(D)) v over keys 0 .. start+i for query i (causal), GQA by
    repeating each KV head H/Hkv times (HF repeat_kv order).
    q: [S, H, D], k/v: [T, Hkv, D] with T = start + S.  Returns [S, H*D].
    visible: optional [T] bool; keys where it is False are masked (left out of the softmax,
    never read; L2A `mask`); a query with no visible key gets a zero output."""
    S, H, D = q.shape
    T, Hkv, _ = k.shape
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scores = torch.einsum("shd,thd->hst", q, k) / math.sqrt(D)  # [H, S, T]
    qpos = torch.arange(S)[:, None] + start
    kpos = torch.arange(T)[None, :]
    if visible is None:
        scores = scores.masked_fill(kpos > qpos, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return torch.einsum("hst,thd->shd", probs, v).reshape(S, H * D)
    allowed = (kpos <= qpos) & visible[None, :]  # [S, T]
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.where(allowed.any(-1)[None, :, None], probs, torch.zeros_like(probs))  # no key: zero, not NaN
    v = torch.where(visible[:, None, None], v, torch.zeros_like(v))  # masked rows never reach the output
    return torch.einsum("hst,thd->shd", probs, v).reshape(S, H * D)


# ----------------------------------------------------------------------------------------
# KV layouts with scripted exits (--decode-ids mode; DESIGN.md section 3).
# ----------------------------------------------------------------------------------------

LAYOUTS = ("depth-indexed", "last-exited", "shared", "first-then-shared", "hybrid")


class LayoutKV:
    """Explicit KV store for one sequence under a KV layout, with per-token exit depths.

    store[physical slot][position] = (k [Hkv, D], v [Hkv, D]); a position absent from a slot
    was never written there and is masked (excluded from the softmax), never read.

    The forwards pass a LOGICAL slot: ("prelude", i), ("coda", i) or ("core", j, r) for
    core layer j at 0-based loop step r (Ouro: every layer is a core layer).  The KV of
    position t for a logical slot lives in physical(logical, phase of t), phase being
    "prompt" (t < n_prompt) or "decode".  Core slots by layout:
      depth-indexed      ("core", j, r)
      last-exited        ("core", j, r); exit(t, e < R) copies step e-1 into steps e..R-1
      shared             ("core", j, 0)
      first-then-shared  ("core", j, min(r, S-1))
      hybrid             prompt positions ("core", j, r); decode positions ("core", j, "decode");
                         a prompt position prefilled at e < R steps (run_layout's prompt_depth)
                         copies step e-1 into steps e..R-1, as last-exited does
    Prelude and coda slots are the logical slot itself (one per layer)."""

    def __init__(self, layout, loops, n_core, n_prompt, shared_after=1):
        if layout not in LAYOUTS:
            raise ValueError(f"unknown KV layout {layout!r} (one of {', '.join(LAYOUTS)})")
        if not 1 <= shared_after <= loops:
            raise ValueError(f"shared_after {shared_after} outside [1, {loops}]")
        self.layout, self.loops, self.n_core = layout, loops, n_core
        self.n_prompt, self.shared_after = n_prompt, shared_after
        self.store = {}

    def phase_of(self, pos):
        return "prompt" if pos < self.n_prompt else "decode"

    def physical(self, logical, phase):
        if logical[0] != "core":
            return logical
        _, j, r = logical
        if self.layout in ("depth-indexed", "last-exited"):
            return ("core", j, r)
        if self.layout == "shared":
            return ("core", j, 0)
        if self.layout == "first-then-shared":
            return ("core", j, min(r, self.shared_after - 1))
        return ("core", j, r) if phase == "prompt" else ("core", j, "decode")  # hybrid

    def attend(self, logical, q, k, v, positions):
        """Write this call's k/v (all tokens of the call, before anyone attends), then
        softmax attention of each query over the written keys at positions <= its own.
        q: [S, H, D], k/v: [S, Hkv, D], positions: [S].  Returns [S, H*D]."""
        pos = positions.tolist()
        for s, t in enumerate(pos):
            self.store.setdefault(self.physical(logical, self.phase_of(t)), {})[t] = (k[s], v[s])
        T = max(pos) + 1
        Ks, Vs, written = [], [], []
        for t in range(T):
            entry = self.store.get(self.physical(logical, self.phase_of(t)), {}).get(t)
            written.append(entry is not None)
            Ks.append(entry[0] if entry is not None else torch.zeros_like(k[0]))  # masked below
            Vs.append(entry[1] if entry is not None else torch.zeros_like(v[0]))
        K, V = torch.stack(Ks), torch.stack(Vs)  # [T, Hkv, D]
        S, H, D = q.shape
        K = K.repeat_interleave(H // K.shape[1], dim=1)
        V = V.repeat_interleave(H // V.shape[1], dim=1)
        scores = torch.einsum("shd,thd->hst", q, K) / math.sqrt(D)  # [H, S, T]
        allowed = torch.tensor(written)[None, :] & (torch.arange(T)[None, :] <= positions[:, None])  # [S, T]
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return torch.einsum("hst,thd->shd", probs, V).reshape(S, H * D)

    def exit(self, pos, steps):
        """Token at `pos` left the loop after `steps` steps.  last-exited (and hybrid's
        prompt positions): copy its step steps-1 core KV into the deeper depth slots it
        skipped; the other layouts leave them unwritten (masked)."""
        copies = self.layout == "last-exited" or (self.layout == "hybrid" and self.phase_of(pos) == "prompt")
        if not copies or steps >= self.loops:
            return
        for j in range(self.n_core):
            last = self.store[("core", j, steps - 1)][pos]
            for r in range(steps, self.loops):
                self.store.setdefault(("core", j, r), {})[pos] = last


# ----------------------------------------------------------------------------------------
# Configs.
# ----------------------------------------------------------------------------------------


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def rope_theta_of(cfg, default=10000.0):
    if "rope_theta" in cfg:
        return float(cfg["rope_theta"])
    params = cfg.get("rope_parameters") or {}
    return float(params.get("rope_theta", default))


def check_plain_rope(cfg):
    for key in ("rope_scaling", "rope_parameters"):
        spec = cfg.get(key)
        if spec:
            kind = spec.get("rope_type", spec.get("type", "default"))
            if kind not in ("default", "llama3"):
                raise NotImplementedError(f"RoPE scaling {kind!r} is not implemented in the reference")
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise NotImplementedError("partial_rotary_factor != 1 is not implemented")
    if cfg.get("use_sliding_window", False):
        raise NotImplementedError("sliding-window attention is not implemented")
    if cfg.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {cfg['hidden_act']!r}")


def dense_dims(cfg):
    E = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or E // H
    return E, H, Hkv, D


def lm_head_weight(W, head_name, embed_name):
    """Tied embeddings: lm_head = embedding matrix when lm_head.weight is absent."""
    return W[head_name] if head_name in W else W[embed_name]


# ----------------------------------------------------------------------------------------
# Dense decoder layer (Llama / Qwen2 / Qwen3) and the Ouro variant (extra output norms).
# ----------------------------------------------------------------------------------------


def dense_attention(W, cfg, p, x, positions, cache, slot, start):
    """Pre-normed input x: [S, E] -> attention output [S, E] (before residual).
    Qwen2: q/k/v bias.  Qwen3: q_norm / k_norm = RMSNorm over D per head, before RoPE."""
    E, H, Hkv, D = dense_dims(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = rope_theta_of(cfg)
    q = linear(x, W[p + "self_attn.q_proj.weight"], W.get(p + "self_attn.q_proj.bias")).view(-1, H, D)
    k = linear(x, W[p + "self_attn.k_proj.weight"], W.get(p + "self_attn.k_proj.bias")).view(-1, Hkv, D)
    v = linear(x, W[p + "self_attn.v_proj.weight"], W.get(p + "self_attn.v_proj.bias")).view(-1, Hkv, D)
    if p + "self_attn.q_norm.weight" in W:  # Qwen3
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
    q = rope_neox(q, positions, theta, rope_scaling_of(cfg))
    k = rope_neox(k, positions, theta, rope_scaling_of(cfg))
    if isinstance(cache, LayoutKV):  # --decode-ids mode: explicit per-(layer, slot) KV
        y = cache.attend(slot, q, k, v, positions)
    else:
        K, V = kv_store(cache, slot, k, v, start)
        y = causal_attention(q, K, V, start)  # [S, H*D]
    return linear(y, W[p + "self_attn.o_proj.weight"], W.get(p + "self_attn.o_proj.bias"))


def dense_mlp(W, p, x):
    """SwiGLU: down(silu(gate(x)) * up(x)); biases only if the checkpoint has them (Llama mlp_bias)."""
    gate = linear(x, W[p + "mlp.gate_proj.weight"], W.get(p + "mlp.gate_proj.bias"))
    up = linear(x, W[p + "mlp.up_proj.weight"], W.get(p + "mlp.up_proj.bias"))
    return linear(torch.nn.functional.silu(gate) * up, W[p + "mlp.down_proj.weight"], W.get(p + "mlp.down_proj.bias"))


def dense_layer(W, cfg, i, x, positions, cache, slot, start):
    """Pre-norm block:  x = x + attn(norm_in(x));  x = x + mlp(norm_post(x))."""
    p, eps = f"model.layers.{i}.", cfg.get("rms_norm_eps", 1e-6)
    x = x + dense_attention(W, cfg, p, rms_norm(x, W[p + "input_layernorm.weight"], eps), positions, cache, slot, start)
    x = x + dense_mlp(W, p, rms_norm(x, W[p + "post_attention_layernorm.weight"], eps))
    return x


def ouro_layer(W, cfg, i, x, positions, cache, slot, start):
    """Ouro block (sandwich on the branch outputs):
    x = x + norm_in2(attn(norm_in(x)));  x = x + norm_post2(mlp(norm_post(x)))."""
    p, eps = f"model.layers.{i}.", cfg.get("rms_norm_eps", 1e-6)
    a = dense_attention(W, cfg, p, rms_norm(x, W[p + "input_layernorm.weight"], eps), positions, cache, slot, start)
    x = x + rms_norm(a, W[p + "input_layernorm_2.weight"], eps)
    m = dense_mlp(W, p, rms_norm(x, W[p + "post_attention_layernorm.weight"], eps))
    x = x + rms_norm(m, W[p + "post_attention_layernorm_2.weight"], eps)
    return x


# ----------------------------------------------------------------------------------------
# L2A gate checkpoints (docs/L2A_FORMAT.md): a dense llama / qwen2 / qwen3 checkpoint plus
# an `l2a` block in config.json, one router per layer (run/skip logits for the attention and
# MLP sub-layers, keep logits per query head, from the layer's normed input and the budget
# embedding phi(b)), and optional LoRA merged into the base weights at load.
# ----------------------------------------------------------------------------------------

L2A_GATES = ("attention", "mlp", "heads")  # also the fixed order of the router outputs
L2A_KV = ("compute", "mask")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
L2A_FAMILIES = ("llama", "qwen2", "qwen3")
_L2A_FIELDS = ("version", "gates", "router_hidden", "budget_features", "skipped_attention_kv", "lora")


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def l2a_config(cfg):
    """The checked `l2a` block of a config (a dict with "outputs" added: the names of the
    router outputs in their fixed order), or None when the config has none."""
    spec = cfg.get("l2a")
    if spec is None:
        return None
    if cfg.get("model_type") not in L2A_FAMILIES:
        raise ValueError(f"config.json: an l2a block needs model_type llama, qwen2 or qwen3, "
                         f"not {cfg.get('model_type')!r}")
    if not isinstance(spec, dict):
        raise ValueError("config.json: l2a must be an object")
    unknown = [k for k in spec if k not in _L2A_FIELDS]
    if unknown:
        raise ValueError(f"config.json: unknown l2a field {unknown[0]!r}")
    if spec.get("version") != 1 or not _is_int(spec.get("version")):
        raise ValueError(f"config.json: l2a.version must be 1, found {spec.get('version')!r}")
    gates = spec.get("gates")
    if (not isinstance(gates, list) or not gates or any(g not in L2A_GATES for g in gates)
            or len(set(gates)) != len(gates)):
        raise ValueError(f"config.json: l2a.gates must be a non-empty list of distinct names from "
                         f"{', '.join(L2A_GATES)}, found {gates!r}")
    R, K = spec.get("router_hidden"), spec.get("budget_features")
    if not _is_int(R) or R < 0:
        raise ValueError(f"config.json: l2a.router_hidden must be an int >= 0, found {R!r}")
    if not _is_int(K) or not 0 <= K <= 64:
        raise ValueError(f"config.json: l2a.budget_features must be an int in [0, 64], found {K!r}")
    kv = spec.get("skipped_attention_kv")
    if "attention" in gates or kv is not None:
        if kv not in L2A_KV:
            raise ValueError(f"config.json: l2a.skipped_attention_kv must be \"compute\" or \"mask\""
                             f"{' (required when attention is gated)' if 'attention' in gates else ''}, found {kv!r}")
    lora = spec.get("lora")
    if lora is not None:
        if not isinstance(lora, dict) or any(k not in ("rank", "alpha", "targets", "budget_ramp") for k in lora):
            raise ValueError(f"config.json: l2a.lora must be an object with rank, alpha, targets "
                             f"(and optionally budget_ramp), found {lora!r}")
        ramp = lora.get("budget_ramp")
        if ramp is not None and not (
                isinstance(ramp, list) and len(ramp) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in ramp)
                and 0 <= ramp[0] < ramp[1] <= 1):
            raise ValueError(f"config.json: l2a.lora.budget_ramp must be [b_full, b_off] with "
                             f"0 <= b_full < b_off <= 1, found {ramp!r}")
        r, alpha, targets = lora.get("rank"), lora.get("alpha"), lora.get("targets")
        if not _is_int(r) or r < 1:
            raise ValueError(f"config.json: l2a.lora.rank must be an int >= 1, found {r!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0 or math.isinf(alpha):
            raise ValueError(f"config.json: l2a.lora.alpha must be a number > 0, found {alpha!r}")
        if (not isinstance(targets, list) or not targets or any(t not in LORA_TARGETS for t in targets)
                or len(set(targets)) != len(targets)):
            raise ValueError(f"config.json: l2a.lora.targets must be a non-empty list of distinct names from "
                             f"{' '.join(LORA_TARGETS)}, found {targets!r}")
    H = cfg["num_attention_heads"]
    outputs = [g for g in ("attention", "mlp") if g in gates] + ([f"head.{h}" for h in range(H)] if "heads" in gates else [])
    return dict(spec, outputs=outputs)


def l2a_phi(b, K):
    """phi(b) = [b, sin(pi*1*b), cos(pi*1*b), ..., sin(pi*K*b), cos(pi*K*b)] (F = 2K+1),
    computed in double precision (angle (pi*k)*b) and rounded to f32.  Returns [F] float32."""
    vals = [float(b)]
    for k in range(1, K + 1):
        vals += [math.sin(math.pi * k * b), math.cos(math.pi * k * b)]
    return torch.tensor(vals, dtype=torch.float64).to(torch.float32)


def _lora_prefix(target):
    return "self_attn." if target in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp."


def l2a_expected_tensors(W, cfg, spec):
    """{name: shape} of every L2A tensor the checkpoint must hold (routers, LoRA A/B)."""
    E, H, Hkv, D = dense_dims(cfg)
    F = 2 * spec["budget_features"] + 1
    G = len(spec["outputs"])
    R = spec["router_hidden"]
    out = {}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if R > 0:
            out.update({p + "l2a_router.fc1.weight": [R, E + F], p + "l2a_router.fc1.bias": [R],
                        p + "l2a_router.fc2.weight": [G, R], p + "l2a_router.fc2.bias": [G]})
        else:
            out.update({p + "l2a_router.fc.weight": [G, E + F], p + "l2a_router.fc.bias": [G]})
        lora = spec.get("lora")
        for t in (lora["targets"] if lora else []):
            base = p + _lora_prefix(t) + t
            if base + ".weight" not in W:
                raise ValueError(f"LoRA target {base}.weight: the base tensor is missing")
            o, n = W[base + ".weight"].shape
            out[base + ".lora_A.weight"] = [lora["rank"], n]
            out[base + ".lora_B.weight"] = [o, lora["rank"]]
    return out


def l2a_lora_share(spec, b):
    """The share of the LoRA a token at budget b runs with: 1 without lora.budget_ramp; with
    [b_full, b_off], 1 at b <= b_full, 0 at b >= b_off, linear between (float64)."""
    ramp = (spec.get("lora") or {}).get("budget_ramp")
    if ramp is None or b <= ramp[0]:
        return 1.0
    if b >= ramp[1]:
        return 0.0
    return (ramp[1] - b) / (ramp[1] - ramp[0])


def l2a_merge_lora(W, want, scale):
    """W with every LoRA of `want` (names) merged, W' = W + scale * (B @ A) in f32, and the
    lora_A / lora_B tensors dropped."""
    out = {n: t for n, t in W.items() if ".lora_A." not in n and ".lora_B." not in n}
    for name in want:
        if name.endswith(".lora_A.weight"):
            base = name[: -len(".lora_A.weight")]
            A, B = W[name], W[base + ".lora_B.weight"]
            out[base + ".weight"] = W[base + ".weight"] + scale * (B @ A)
    return out


def l2a_prepare(W, cfg):
    """Check the L2A tensors of a loaded checkpoint and merge its LoRA:
    W' = W + (alpha / r) * (B @ A) in f32 for every target of every layer.  Returns a new
    dict without the lora_A / lora_B tensors (router tensors kept).  With lora.budget_ramp the
    LoRA depends on b and is kept (dense_forward merges it at the call's budget).  A missing, extra or
    misshapen router / LoRA tensor is an error naming it and both shapes.  A checkpoint
    without an l2a block must hold no such tensors; it is returned unchanged."""
    spec = l2a_config(cfg)
    stray = sorted(n for n in W if ".l2a_router." in n or ".lora_A." in n or ".lora_B." in n)
    if spec is None:
        if stray:
            raise ValueError(f"tensor {stray[0]}: an L2A tensor, but config.json has no l2a block")
        return W
    want = l2a_expected_tensors(W, cfg, spec)
    for name, shape in want.items():
        if name not in W:
            raise ValueError(f"missing tensor {name} (expected shape {shape})")
        if list(W[name].shape) != shape:
            raise ValueError(f"tensor {name}: expected shape {shape}, found {list(W[name].shape)}")
    extra = [n for n in stray if n not in want]
    if extra:
        raise ValueError(f"unexpected tensor {extra[0]} (shape {list(W[extra[0]].shape)}) for this l2a block")
    lora = spec.get("lora")
    if lora and lora.get("budget_ramp") is not None:
        return dict(W)
    return l2a_merge_lora(W, want, float(lora["alpha"]) / lora["rank"] if lora else 0.0)


def load_model(model_dir):
    """(weights, config) ready for run(): load_checkpoint, then l2a_prepare (LoRA merged)."""
    cfg = load_config(model_dir)
    family_of(cfg)
    return l2a_prepare(load_checkpoint(model_dir), cfg), cfg


def l2a_router(W, spec, i, h, phi):
    """Router logits z [S, G] (float64) of layer i: u = [h ; phi(b)], h the layer's normed
    input [S, E] (f32), phi [F] (f32); the math in float64 from the f32 values.
    R > 0: z = fc2(silu(fc1(u)));  R = 0: z = fc(u)."""
    p = f"model.layers.{i}.l2a_router."
    u = torch.cat([h.to(torch.float64), phi.to(torch.float64)[None, :].expand(h.shape[0], -1)], dim=-1)
    if spec["router_hidden"] > 0:
        a = linear(u, W[p + "fc1.weight"].to(torch.float64), W[p + "fc1.bias"].to(torch.float64))
        return linear(torch.nn.functional.silu(a), W[p + "fc2.weight"].to(torch.float64),
                      W[p + "fc2.bias"].to(torch.float64))
    return linear(u, W[p + "fc.weight"].to(torch.float64), W[p + "fc.bias"].to(torch.float64))


def l2a_decisions(spec, z, H):
    """Hard decisions from the logits z [S, G]: (attn_on [S], mlp_on [S], head_keep [S, H]);
    ungated sub-layers always run (all True).  A gate is on iff z > 0."""
    on = z > 0
    S, col = z.shape[0], 0
    attn_on = mlp_on = torch.ones(S, dtype=torch.bool)
    keep = torch.ones(S, H, dtype=torch.bool)
    if "attention" in spec["gates"]:
        attn_on, col = on[:, col], col + 1
    if "mlp" in spec["gates"]:
        mlp_on, col = on[:, col], col + 1
    if "heads" in spec["gates"]:
        keep = on[:, col : col + H]
    return attn_on, mlp_on, keep


def visibility_store(cache, key, ran, start):
    """kv_store for the per-layer visibility list of `mask` (bool per position)."""
    if key in cache:
        old = cache[key]
        if old.shape[0] < start:
            raise ValueError(f"visibility {key}: positions {old.shape[0]}..{start} were never written")
        cache[key] = torch.cat([old[:start], ran, old[start + ran.shape[0] :]])
    else:
        if start != 0:
            raise ValueError(f"visibility {key}: first write starts at position {start}")
        cache[key] = ran
    return cache[key][: start + ran.shape[0]]


def l2a_attention(W, cfg, spec, p, x, positions, cache, slot, start, attn_on, keep):
    """Gated attention of layer prefix p on the normed input x [S, E].  Returns (out [S, E],
    adds [S] bool): out is o_proj of the attention with pruned heads zeroed (their o_proj
    columns contribute nothing); adds is False where the residual must pass unchanged
    (attention gate off, or every head pruned).  K/V of every token are written:
      compute: as usual (k/v projections, k_norm, RoPE) and visible to later tokens;
      mask:    a skipped token's K/V are zero in the cache and its position is invisible at
               this layer to every query (this call's too): visibility list ("l2a_ran", layer)."""
    E, H, Hkv, D = dense_dims(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = rope_theta_of(cfg)
    S = x.shape[0]
    q = linear(x, W[p + "self_attn.q_proj.weight"], W.get(p + "self_attn.q_proj.bias")).view(-1, H, D)
    k = linear(x, W[p + "self_attn.k_proj.weight"], W.get(p + "self_attn.k_proj.bias")).view(-1, Hkv, D)
    v = linear(x, W[p + "self_attn.v_proj.weight"], W.get(p + "self_attn.v_proj.bias")).view(-1, Hkv, D)
    if p + "self_attn.q_norm.weight" in W:  # Qwen3
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
    q = rope_neox(q, positions, theta, rope_scaling_of(cfg))
    k = rope_neox(k, positions, theta, rope_scaling_of(cfg))
    mask = "attention" in spec["gates"] and spec["skipped_attention_kv"] == "mask"
    if mask:  # not computed: zeros in the cache, never read (masked)
        k = torch.where(attn_on[:, None, None], k, torch.zeros_like(k))
        v = torch.where(attn_on[:, None, None], v, torch.zeros_like(v))
    K, V = kv_store(cache, slot, k, v, start)
    visible = visibility_store(cache, ("l2a_ran",) + tuple(slot[1:]), attn_on, start) if mask else \
        torch.ones(K.shape[0], dtype=torch.bool)
    y = causal_attention(q, K, V, start, visible).view(S, H, D)
    y = torch.where(keep[:, :, None], y, torch.zeros_like(y)).reshape(S, H * D)
    out = linear(y, W[p + "self_attn.o_proj.weight"], W.get(p + "self_attn.o_proj.bias"))
    return out, attn_on & keep.any(-1)


def l2a_dense_layer(W, cfg, spec, i, x, positions, cache, slot, start, phi):
    """One gated pre-norm block:
        h = input_layernorm(x);  z = router_i([h ; phi(b)]);  decisions z > 0
        x = x + [attn on] * o_proj(attention(q, k, v) * head_keep)
        x = x + [mlp on]  * mlp(post_attention_layernorm(x))
    ("x passes unchanged" exactly: torch.where, not a multiplication).  Returns (x, z [S, G])."""
    p, eps = f"model.layers.{i}.", cfg.get("rms_norm_eps", 1e-6)
    H = cfg["num_attention_heads"]
    h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
    z = l2a_router(W, spec, i, h, phi)
    attn_on, mlp_on, keep = l2a_decisions(spec, z, H)
    a, adds = l2a_attention(W, cfg, spec, p, h, positions, cache, slot, start, attn_on, keep)
    x = torch.where(adds[:, None], x + a, x)
    m = dense_mlp(W, p, rms_norm(x, W[p + "post_attention_layernorm.weight"], eps))
    x = torch.where(mlp_on[:, None], x + m, x)
    return x, z


def check_budget(cfg, budget):
    """The b an L2A checkpoint runs under (default 1), checked to lie in [0, 1]."""
    if budget is None:
        return 1.0
    b = float(budget)
    if not 0.0 <= b <= 1.0:
        raise ValueError(f"budget {budget} outside [0, 1]")
    return b


# ----------------------------------------------------------------------------------------
# Family forwards.  Each takes the tokens of one call (ids: [S] long), the position of the
# first one (start) and a KV cache dict {slot: (K, V)} shared between calls, so a full
# prompt is one call with start=0 and token-by-token decoding is S calls with S=1.
# ----------------------------------------------------------------------------------------


def dense_forward(W, cfg, ids, start, cache, budget=None):
    """Llama / Qwen2 / Qwen3.  Returns {"logits": [S, V]}.  An L2A gate checkpoint (an l2a
    block; W from l2a_prepare) runs every token of the call under budget b (default 1) and
    also returns l2a_router_logits [L, S, G] (f32 of the float64 logits) and l2a_decisions
    [L, S, G] (1.0 on, 0.0 off), outputs in the fixed order attention, mlp, head 0..H-1."""
    check_plain_rope(cfg)
    spec = l2a_config(cfg)
    if spec is None and budget is not None:
        raise ValueError("a budget applies only to an L2A gate checkpoint (config.json has no l2a block)")
    positions = torch.arange(start, start + ids.shape[0])
    h = W["model.embed_tokens.weight"][ids]  # [S, E]
    if spec is None:
        for i in range(cfg["num_hidden_layers"]):
            h = dense_layer(W, cfg, i, h, positions, cache, ("layer", i), start)
        out = {}
    else:
        b = check_budget(cfg, budget)
        lora = spec.get("lora")
        if lora and lora.get("budget_ramp") is not None:  # this call's share of the LoRA, merged
            W = l2a_merge_lora(W, [n for n in W if n.endswith(".lora_A.weight")],
                               l2a_lora_share(spec, b) * float(lora["alpha"]) / lora["rank"])
        if any(".lora_A." in n for n in W):
            raise ValueError("LoRA tensors not merged: load with load_model / l2a_prepare")
        phi = l2a_phi(b, spec["budget_features"])
        zs = []
        for i in range(cfg["num_hidden_layers"]):
            h, z = l2a_dense_layer(W, cfg, spec, i, h, positions, cache, ("layer", i), start, phi)
            zs.append(z)
        z = torch.stack(zs)  # [L, S, G] float64
        out = {"l2a_router_logits": z.to(torch.float32), "l2a_decisions": (z > 0).to(torch.float32)}
    h = rms_norm(h, W["model.norm.weight"], cfg.get("rms_norm_eps", 1e-6))
    return dict(out, logits=linear(h, lm_head_weight(W, "lm_head.weight", "model.embed_tokens.weight")))


def ouro_forward(W, cfg, ids, start, cache, loops):
    """Ouro (LoopLM).  h_0 = embed(ids) (no scaling); for t = 1..R:
         h_t = norm(layers(h_{t-1}))                       (all L layers, KV slot (t, layer))
         lambda_t = sigmoid(early_exit_gate(h_t))          gate reads the normed state
         p_t = lambda_t * prod_{j<t}(1 - lambda_j)  for t < R,  p_R = prod_{j<R}(1 - lambda_j)
         step_logits_t = lm_head(h_t)
    The normed state h_t is the input of the next loop step.  logits = step_logits_R.
    Returns logits [S, V], lambda [R, S], pdf [R, S], step_logits [R, S, V]."""
    check_plain_rope(cfg)
    if any(t == "sliding_attention" for t in cfg.get("layer_types") or []):
        raise NotImplementedError("sliding-window layers")
    eps = cfg.get("rms_norm_eps", 1e-6)
    positions = torch.arange(start, start + ids.shape[0])
    head = lm_head_weight(W, "lm_head.weight", "model.embed_tokens.weight")
    h = W["model.embed_tokens.weight"][ids]  # [S, E]
    lambdas, step_logits = [], []
    for t in range(loops):
        for i in range(cfg["num_hidden_layers"]):
            h = ouro_layer(W, cfg, i, h, positions, cache, ("ut", t, i), start)
        h = rms_norm(h, W["model.norm.weight"], eps)
        gate = linear(h, W["model.early_exit_gate.weight"], W.get("model.early_exit_gate.bias"))  # [S, 1]
        lambdas.append(torch.sigmoid(gate[:, 0]))
        step_logits.append(linear(h, head))
    lam = torch.stack(lambdas)  # [R, S]
    return {"logits": step_logits[-1], "lambda": lam, "pdf": ouro_exit_pdf(lam),
            "step_logits": torch.stack(step_logits)}


def ouro_exit_pdf(lam):
    """Exit distribution from the per-step gates, exactly as upstream OuroForCausalLM:
    remaining = 1; p_t = lambda_t * remaining; remaining *= 1 - lambda_t; last p = remaining."""
    pdf, remaining = [], torch.ones_like(lam[0])
    for t in range(lam.shape[0]):
        if t < lam.shape[0] - 1:
            pdf.append(lam[t] * remaining)
            remaining = remaining * (1.0 - lam[t])
        else:
            pdf.append(remaining)
    return torch.stack(pdf)  # [R, S]


def ouro_exit_steps(pdf, thresholds):
    """1-based exit step per token: first t with cumsum_{j<=t} p_j >= q, else the last step.
    pdf: [R, S] -> [len(q), S] float."""
    cum = torch.cumsum(pdf, dim=0)
    rows = []
    for q in thresholds:
        hit = cum >= q  # [R, S]
        step = torch.argmax(hit.to(torch.float32), dim=0)
        step[~hit.any(dim=0)] = pdf.shape[0] - 1
        rows.append(step.to(torch.float32) + 1.0)
    return torch.stack(rows)


# ---- Huginn -------------------------------------------------------------------------------


def huginn_dims(cfg):
    """Field names of upstream RavenConfig (HF aliases accepted)."""
    E = cfg.get("n_embd", cfg.get("hidden_size"))
    H = cfg.get("n_heads", cfg.get("num_attention_heads"))
    Hkv = cfg.get("num_key_value_heads", H)
    if Hkv != H:
        raise NotImplementedError("Huginn: upstream attention (qk_bias [2,1,H,D], SDPA) needs n_kv_heads == n_heads")
    D = E // H  # upstream: head_dim = n_embd // n_heads
    if cfg.get("head_dim", D) != D:
        raise ValueError(f"Huginn config head_dim {cfg['head_dim']} != n_embd // n_heads = {D}")
    return E, H, D


def huginn_attention(W, cfg, p, x, positions, cache, slot, start):
    """Wqkv: [3E, E] split into q, k, v (in that order); q += qk_bias[0], k += qk_bias[1]
    (qk_bias: [2, 1, H, D], broadcast over positions) BEFORE the interleaved RoPE (fp32)."""
    E, H, D = huginn_dims(cfg)
    qkv = linear(x, W[p + "attn.Wqkv.weight"])  # [S, 3E]
    q, k, v = qkv.split([E, E, E], dim=-1)
    q, k, v = q.view(-1, H, D), k.view(-1, H, D), v.view(-1, H, D)
    if p + "attn.qk_bias" in W:
        q = q + W[p + "attn.qk_bias"][0]
        k = k + W[p + "attn.qk_bias"][1]
    theta = float(cfg.get("rope_base", 50000.0))
    q = rope_interleaved(q, positions, theta)
    k = rope_interleaved(k, positions, theta)
    if isinstance(cache, LayoutKV):  # --decode-ids mode: explicit per-(layer, slot) KV
        return linear(cache.attend(slot, q, k, v, positions), W[p + "attn.proj.weight"])
    K, V = kv_store(cache, slot, k, v, start)
    return linear(causal_attention(q, K, V, start), W[p + "attn.proj.weight"])


def huginn_block(W, cfg, p, x, positions, cache, slot, start):
    """SandwichBlock (post-norm sandwich):
    x = norm_2(attn(norm_1(x)) + x);  x = norm_4(mlp(norm_3(x)) + x);
    mlp(x) = proj(silu(a) * b), [a | b] = fc(x) (first half gated)."""
    eps = cfg.get("norm_eps", 1e-6)
    a = huginn_attention(W, cfg, p, rms_norm(x, W[p + "norm_1.weight"], eps), positions, cache, slot, start)
    x = rms_norm(a + x, W[p + "norm_2.weight"], eps)
    gate, up = linear(rms_norm(x, W[p + "norm_3.weight"], eps), W[p + "mlp.fc.weight"]).chunk(2, dim=-1)
    m = linear(torch.nn.functional.silu(gate) * up, W[p + "mlp.proj.weight"])
    return rms_norm(m + x, W[p + "norm_4.weight"], eps)


def huginn_forward(W, cfg, ids, start, cache, loops, x0):
    """Huginn-0125 (RavenForCausalLM), num_steps = R, no test-time noise:
         e   = prelude(wte(ids) * sqrt(n_embd))            KV slots 0 .. P-1
         x_0 = initial state (zero for tests)              [S, E]
         x_r = core(adapter(cat[x_{r-1}, e]))  r = 1..R    KV slot P + (r-1)*C + layer
         logits_r = lm_head(ln_f(coda(ln_f(x_r))))         coda KV slots -1, -2, ... (overwritten)
    logits = logits_R.  Per step also:
         latent_diff_r = ||x_r - x_{r-1}|| / ||x_r||       (raw states, upstream LatentDiffExitEvaluator)
         kl_r = KL(p_{r-1} || p_r) = sum p_{r-1} (log p_{r-1} - log p_r), p_0 = uniform(1/V)
                                                           (upstream KLExitEvaluator)
    Returns logits [S, V], latent_diff [R, S], kl [R, S]."""
    E, H, D = huginn_dims(cfg)
    if cfg.get("test_time_noise", 0) not in (0, None):
        raise NotImplementedError("test_time_noise")
    if cfg.get("injection_type", "linear") != "linear":
        raise NotImplementedError(f"injection_type {cfg['injection_type']!r}")
    P = cfg.get("n_layers_in_prelude", 2)
    C = cfg.get("n_layers_in_recurrent_block", 4)
    K = cfg.get("n_layers_in_coda", 2)
    eps = cfg.get("norm_eps", 1e-6)
    positions = torch.arange(start, start + ids.shape[0])
    if start + ids.shape[0] > cfg.get("block_size", 4096):
        raise ValueError("sequence longer than block_size (upstream freqs_cis has block_size rows)")
    head = lm_head_weight(W, "lm_head.weight", "transformer.wte.weight")

    e = W["transformer.wte.weight"][ids] * math.sqrt(E)  # emb_scale = sqrt(n_embd)
    for i in range(P):
        e = huginn_block(W, cfg, f"transformer.prelude.{i}.", e, positions, cache, i, start)

    def coda_logits(x):
        y = rms_norm(x, W["transformer.ln_f.weight"], eps)
        for i in range(K):
            y = huginn_block(W, cfg, f"transformer.coda.{i}.", y, positions, cache, -(i + 1), start)
        return linear(rms_norm(y, W["transformer.ln_f.weight"], eps), head)

    x = x0
    V = head.shape[0]
    prev_logp = torch.full((ids.shape[0], V), math.log(1.0 / V))
    diffs, kls = [], []
    for r in range(loops):
        x_prev = x
        x = linear(torch.cat([x_prev, e], dim=-1), W["transformer.adapter.weight"], W.get("transformer.adapter.bias"))
        for i in range(C):
            x = huginn_block(W, cfg, f"transformer.core_block.{i}.", x, positions, cache, P + r * C + i, start)
        diffs.append((x - x_prev).norm(dim=-1) / x.norm(dim=-1))
        logits = coda_logits(x)
        logp = torch.log_softmax(logits, dim=-1)
        kls.append((prev_logp.exp() * (prev_logp - logp)).sum(-1))
        prev_logp = logp
    return {"logits": logits, "latent_diff": torch.stack(diffs), "kl": torch.stack(kls)}


# ----------------------------------------------------------------------------------------
# Teacher-forced decode under a KV layout with scripted exit depths (--decode-ids mode).
# ----------------------------------------------------------------------------------------


def ouro_layout_call(W, cfg, ids, start, kv, steps):
    """Ouro tokens ids ([S], positions start..start+S-1) running exactly `steps` loop steps
    through the LayoutKV kv (logical core slot ("core", layer, t)).
    Returns logits lm_head(h_steps) [S, V] and lambda [steps, S]."""
    check_plain_rope(cfg)
    if any(t == "sliding_attention" for t in cfg.get("layer_types") or []):
        raise NotImplementedError("sliding-window layers")
    eps = cfg.get("rms_norm_eps", 1e-6)
    positions = torch.arange(start, start + ids.shape[0])
    h = W["model.embed_tokens.weight"][ids]
    lambdas = []
    for t in range(steps):
        for i in range(cfg["num_hidden_layers"]):
            h = ouro_layer(W, cfg, i, h, positions, kv, ("core", i, t), start)
        h = rms_norm(h, W["model.norm.weight"], eps)
        gate = linear(h, W["model.early_exit_gate.weight"], W.get("model.early_exit_gate.bias"))
        lambdas.append(torch.sigmoid(gate[:, 0]))
    return linear(h, lm_head_weight(W, "lm_head.weight", "model.embed_tokens.weight")), torch.stack(lambdas)


def huginn_layout_call(W, cfg, ids, start, kv, steps):
    """Huginn tokens ids running exactly `steps` core steps from a zero state through the
    LayoutKV kv: prelude (logical slots ("prelude", i)), `steps` x [adapter, core blocks
    ("core", j, r)], then ONCE ln_f, coda (("coda", i), written once per token), ln_f, head.
    Returns logits [S, V], latent_diff [steps, S] (||x_r - x_{r-1}|| / ||x_r||) and kl
    [steps, S]: upstream's KL exit signal in decode, KL(p_{r-1} || p_r) with p_0 uniform 1/V,
    p_r the prediction ln_f, coda, ln_f, head of x_r, its coda attending to the earlier
    tokens' coda K/V (their final states) and to its own step-r K/V (overwritten by the next
    step's and finally by the exit state's)."""
    E, H, D = huginn_dims(cfg)
    if cfg.get("test_time_noise", 0) not in (0, None):
        raise NotImplementedError("test_time_noise")
    if cfg.get("injection_type", "linear") != "linear":
        raise NotImplementedError(f"injection_type {cfg['injection_type']!r}")
    P = cfg.get("n_layers_in_prelude", 2)
    C = cfg.get("n_layers_in_recurrent_block", 4)
    K = cfg.get("n_layers_in_coda", 2)
    eps = cfg.get("norm_eps", 1e-6)
    positions = torch.arange(start, start + ids.shape[0])
    if start + ids.shape[0] > cfg.get("block_size", 4096):
        raise ValueError("sequence longer than block_size (upstream freqs_cis has block_size rows)")
    e = W["transformer.wte.weight"][ids] * math.sqrt(E)
    for i in range(P):
        e = huginn_block(W, cfg, f"transformer.prelude.{i}.", e, positions, kv, ("prelude", i), start)
    head = lm_head_weight(W, "lm_head.weight", "transformer.wte.weight")

    def predict(x):
        y = rms_norm(x, W["transformer.ln_f.weight"], eps)
        for i in range(K):
            y = huginn_block(W, cfg, f"transformer.coda.{i}.", y, positions, kv, ("coda", i), start)
        return linear(rms_norm(y, W["transformer.ln_f.weight"], eps), head)

    x = torch.zeros(ids.shape[0], E)  # --init-state zero
    prev_logp = torch.full((ids.shape[0], head.shape[0]), math.log(1.0 / head.shape[0]))
    diffs, kls = [], []
    for r in range(steps):
        x_prev = x
        x = linear(torch.cat([x_prev, e], dim=-1), W["transformer.adapter.weight"], W.get("transformer.adapter.bias"))
        for j in range(C):
            x = huginn_block(W, cfg, f"transformer.core_block.{j}.", x, positions, kv, ("core", j, r), start)
        diffs.append((x - x_prev).norm(dim=-1) / x.norm(dim=-1))
        logp = torch.log_softmax(predict(x), dim=-1)
        kls.append((prev_logp.exp() * (prev_logp - logp)).sum(-1))
        prev_logp = logp
    logits = predict(x)  # the exit state's coda K/V is the one later tokens read
    return logits, torch.stack(diffs), torch.stack(kls)


def run_layout(W, cfg, prompt_ids, decode_ids, exit_depths=None, loops=None, layout="depth-indexed",
               shared_after=1, budget=None, prompt_depth=None):
    """Prefill prompt_ids ([n_prompt] long) as ONE chunk, every token running prompt_depth
    loop steps (default all R; fewer: fathom's prompts that follow the budget, each prompt
    position then exits as a decode token does), then feed decode_ids ([n_decode] long, teacher forcing) one token per call, decode
    token i running exactly exit_depths[i] steps (default R), all under KV layout `layout`.
    Returns prefill_logits [n_prompt, V], decode_logits [n_decode, V] and, for looped
    families, decode_signals [n_decode, R] (Ouro lambda / Huginn latent diff of each step
    the token ran; zeros beyond its exit depth).  Dense families ignore layout and depths
    (plain KV cache) and return no signals; an L2A gate checkpoint runs every prompt and
    decode token under `budget` (default 1)."""
    fam = family_of(cfg)
    n_prompt, n_decode = int(prompt_ids.numel()), int(decode_ids.numel())
    if fam == "dense":
        cache = {}
        pre = dense_forward(W, cfg, prompt_ids, 0, cache, budget)["logits"]
        dec = [dense_forward(W, cfg, decode_ids[i : i + 1], n_prompt + i, cache, budget)["logits"]
               for i in range(n_decode)]
        return {"prefill_logits": pre, "decode_logits": torch.cat(dec, 0) if dec else pre[:0]}
    R = default_loops(cfg) if loops is None else loops
    depths = [R] * n_decode if exit_depths is None else [int(e) for e in exit_depths]
    if len(depths) != n_decode:
        raise ValueError(f"{len(depths)} exit depths for {n_decode} decode tokens")
    for e in depths:
        if not 1 <= e <= R:
            raise ValueError(f"exit depth {e} outside [1, {R}]")
    if fam == "ouro":
        n_core, call = cfg["num_hidden_layers"], ouro_layout_call
    else:
        n_core, call = cfg.get("n_layers_in_recurrent_block", 4), huginn_layout_call
    P = R if prompt_depth is None else int(prompt_depth)
    if not 1 <= P <= R:
        raise ValueError(f"prompt depth {P} outside [1, {R}]")
    kv = LayoutKV(layout, R, n_core, n_prompt, shared_after)
    pre = call(W, cfg, prompt_ids, 0, kv, P)[0]
    for pos in range(n_prompt):
        kv.exit(pos, P)
    logits, signals, kls = [], torch.zeros(n_decode, R), torch.zeros(n_decode, R)
    for i, e in enumerate(depths):
        lg, sig, *kl = call(W, cfg, decode_ids[i : i + 1], n_prompt + i, kv, e)
        kv.exit(n_prompt + i, e)
        logits.append(lg)
        signals[i, :e] = sig[:, 0]
        if kl:
            kls[i, :e] = kl[0][:, 0]
    out = {"prefill_logits": pre, "decode_logits": torch.cat(logits, 0) if logits else pre[:0],
           "decode_signals": signals}
    if fam == "huginn":
        out["decode_kl"] = kls
    return out


# ----------------------------------------------------------------------------------------
# Driver.
# ----------------------------------------------------------------------------------------

FAMILIES = {"llama": "dense", "qwen2": "dense", "qwen3": "dense", "lckv-llama": "lckv", "ouro": "ouro",
            "huginn_raven": "huginn"}


# ----------------------------------------------------------------------------------------
# LCKV (Layer-Condensed KV; whyNLP/LCKV models/modeling_lckv.py, models/utils.py).
# Llama blocks; layer i attends to the KV of layer layer_types[i] (possibly a later one).
# A query at p sees keys j <= p of that layer (j < p with force_nodiag, or when the source
# is a later layer), and j > p - sliding_window for `s` layers; a query with no visible key
# gets a zero attention output (upstream's flash path). Written from upstream's code:
#   - prompts of more than m + b tokens run upstream's iteration plan: each cyclic group
#     m + b times from the same input, the sources read from above starting at zero KV for
#     the chunk and replaced by every pass, the last pass kept (LayerTypeParser.iteration_plan,
#     LayerCache.initialize, IndexedCache._update);
#   - shorter prompts (and use_sequential) go token by token. The paper's meaning is used
#     for a token whose layer reads a later layer: it sees that layer's KV of the earlier
#     positions (upstream's decode path prepends a zero key and masks the last real one,
#     which reads as off by one against its own parallel path; see docs/ARCHITECTURE.md).
# ----------------------------------------------------------------------------------------


def lckv_layer_types(cfg):
    """[(source layer, sliding)] per layer, from layer_types ("0_1_16s_...")."""
    L = cfg["num_hidden_layers"]
    text = cfg.get("layer_types") or "_".join(str(i) for i in range(L))
    out = []
    for tok in text.split("_"):
        sliding = tok.endswith("s")
        out.append((int(tok[:-1] if sliding else tok), sliding))
    if len(out) != L or any(not 0 <= src < L for src, _ in out):
        raise ValueError(f"bad layer_types {text!r} for {L} layers")
    return out


def lckv_plan(types, m, b):
    """Upstream's iteration plan as [(first, end, passes)]: cyclic groups get m + b passes
    (m without gradient, b - 1 with, one kept), other runs of layers one."""
    L = len(types)
    if not any(src > i for i, (src, _) in enumerate(types)):
        return [(0, L, 1)]
    plan, i = [], 0
    while i < L:
        if types[i][0] > i:
            top = types[i][0]
            while top < max(t[0] for t in types[i : top + 1]):
                top = max(t[0] for t in types[i : top + 1])
            plan.append((i, top + 1, m + max(b - 1, 0) + 1))
            i = top + 1
        else:
            top = i + 1
            while top < L and not types[top][0] > top:
                top += 1
            plan.append((i, top, 1))
            i = top
    return plan


def lckv_attention(W, cfg, i, x, positions, start, cache, chunk, types):
    """x [S, E] normed input -> [S, E].  cache: {layer: (K, V)} of positions [0, start);
    chunk: {layer: (k, v)} of this call's positions, replaced when layer i produces KV."""
    E, H, Hkv, D = dense_dims(cfg)
    p, theta = f"model.layers.{i}.", rope_theta_of(cfg)
    scaling = rope_scaling_of(cfg)
    q = rope_neox(linear(x, W[p + "self_attn.q_proj.weight"]).view(-1, H, D), positions, theta, scaling)
    if p + "self_attn.k_proj.weight" in W:  # this layer's KV is read by some layer
        k = rope_neox(linear(x, W[p + "self_attn.k_proj.weight"]).view(-1, Hkv, D), positions, theta, scaling)
        v = linear(x, W[p + "self_attn.v_proj.weight"]).view(-1, Hkv, D)
        chunk[i] = (k, v)
    src, sliding = types[i]
    k_now, v_now = chunk[src]
    if src in cache:
        K, V = torch.cat([cache[src][0], k_now]), torch.cat([cache[src][1], v_now])
    else:
        K, V = k_now, v_now
    no_diag = bool(cfg.get("force_nodiag", False)) or src > i
    S, T = q.shape[0], K.shape[0]
    K = K.repeat_interleave(H // Hkv, dim=1)
    V = V.repeat_interleave(H // Hkv, dim=1)
    scores = torch.einsum("shd,thd->hst", q, K) / math.sqrt(D)  # [H, S, T]
    qpos = (torch.arange(S) + start)[:, None]
    kpos = torch.arange(T)[None, :]
    visible = kpos < qpos if no_diag else kpos <= qpos
    if sliding:
        visible = visible & (kpos > qpos - int(cfg.get("sliding_window", 4096)))
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.where(visible.any(-1)[None, :, None], probs, torch.zeros_like(probs))  # no key: zero
    y = torch.einsum("hst,thd->shd", probs, V).reshape(S, H * D)
    return linear(y, W[p + "self_attn.o_proj.weight"])


def lckv_forward(W, cfg, ids, start, cache):
    """One call of S tokens at positions [start, start + S), cache {layer: (K, V)} of the
    earlier positions (committed at the end).  Returns {"logits": [S, V]}."""
    check_plain_rope(cfg)
    types = lckv_layer_types(cfg)
    m, b = int(cfg.get("forward_passes", 7)), int(cfg.get("backward_passes", 2))
    cyclic = any(src > i for i, (src, _) in enumerate(types))
    S = ids.shape[0]
    if S > 1 and cyclic and (cfg.get("use_sequential", False) or S <= m + b):
        parts = [lckv_forward(W, cfg, ids[t : t + 1], start + t, cache)["logits"] for t in range(S)]
        return {"logits": torch.cat(parts)}
    E, H, Hkv, D = dense_dims(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)
    positions = torch.arange(start, start + S)
    # Sources read from below start at zero for this call's positions (LayerCache.initialize).
    chunk = {src: (torch.zeros(S, Hkv, D), torch.zeros(S, Hkv, D)) for i, (src, _) in enumerate(types) if src > i}
    h = W["model.embed_tokens.weight"][ids]
    for first, end, passes in (lckv_plan(types, m, b) if S > 1 else [(0, len(types), 1)]):
        for _ in range(passes):
            x = h
            for i in range(first, end):
                p = f"model.layers.{i}."
                a = lckv_attention(W, cfg, i, rms_norm(x, W[p + "input_layernorm.weight"], eps),
                                   positions, start, cache, chunk, types)
                x = x + a
                x = x + dense_mlp(W, p, rms_norm(x, W[p + "post_attention_layernorm.weight"], eps))
        h = x
    for layer, (k, v) in chunk.items():
        if layer in cache:
            cache[layer] = (torch.cat([cache[layer][0], k]), torch.cat([cache[layer][1], v]))
        else:
            cache[layer] = (k, v)
    h = rms_norm(h, W["model.norm.weight"], eps)
    return {"logits": linear(h, lm_head_weight(W, "lm_head.weight", "model.embed_tokens.weight"))}


LOOPED = ("ouro", "huginn")


def family_of(cfg):
    mt = cfg.get("model_type")
    if mt not in FAMILIES:
        raise ValueError(f"unsupported model_type {mt!r}")
    return FAMILIES[mt]


def default_loops(cfg):
    fam = family_of(cfg)
    if fam == "ouro":
        return int(cfg.get("total_ut_steps", 4))
    if fam == "huginn":
        return int(cfg.get("mean_recurrence", 32))
    return 1


def run(W, cfg, ids, loops=None, init_state=None, incremental=False, chunk=0, budget=None):
    """Forward of the whole prompt `ids` ([S] long).  Returns a dict of float32 tensors.
    incremental=True feeds one token per call through a shared KV cache; chunk > 0 feeds
    chunks of that many tokens (the last one shorter).  budget: the b every token of an L2A
    gate checkpoint runs under (default 1; W from load_model / l2a_prepare)."""
    fam = family_of(cfg)
    if l2a_config(cfg) is None and budget is not None:
        raise ValueError("a budget applies only to an L2A gate checkpoint (config.json has no l2a block)")
    loops = default_loops(cfg) if loops is None else loops
    if fam == "huginn" and init_state is None:
        E = huginn_dims(cfg)[0]
        init_state = torch.zeros(ids.shape[0], E)

    def call(chunk, start, cache):
        if fam == "dense":
            return dense_forward(W, cfg, chunk, start, cache, budget)
        if fam == "lckv":
            return lckv_forward(W, cfg, chunk, start, cache)
        if fam == "ouro":
            return ouro_forward(W, cfg, chunk, start, cache, loops)
        return huginn_forward(W, cfg, chunk, start, cache, loops, init_state[start : start + chunk.shape[0]])

    step = 1 if incremental else chunk
    if step <= 0:
        return call(ids, 0, {})
    cache, parts = {}, []
    for s in range(0, ids.shape[0], step):
        parts.append(call(ids[s : s + step], s, cache))
    # concatenate along the token axis (last-but-one for [R, S, V] and [L, S, G], last for [R, S],
    # first for [S, V])
    out = {}
    for name in parts[0]:
        dim = 0 if name == "logits" else 1
        out[name] = torch.cat([p[name] for p in parts], dim=dim)
    return out


def write_f32(out_dir, name, tensor, meta):
    arr = tensor.detach().to(torch.float32).contiguous().numpy().astype("<f4")
    arr.tofile(os.path.join(out_dir, name))
    meta["files"][name] = list(tensor.shape)



# ----------------------------------------------------------------------------------------
# Teacher-forced perplexity as served (--perplexity mode; what `fathom eval` computes).
# ----------------------------------------------------------------------------------------


def exit_depth(fam, sig, kl, R, threshold, criterion):
    """1-based exit depth of one token from its signals over all R steps (sig, kl: [R]).
    A step's signal depends only on the steps up to it, so reading all R and taking the
    first step that meets the rule is the same decision as stopping there.
      Ouro (hazard):   first t with cumsum(p)_t >= q, p from the gates as upstream's pdf
                       (ouro_exit_pdf / ouro_exit_steps), else R.
      Huginn:          first r with latent_diff_r < t (or kl_r < t with criterion kl), else R."""
    if fam == "ouro" and criterion in ("auto", "hazard"):
        pdf = ouro_exit_pdf(sig[:, None])  # [R, 1]
        return int(ouro_exit_steps(pdf, [threshold])[0, 0].item())
    values = kl if criterion == "kl" else sig
    for r in range(R):
        if values[r].item() < threshold:
            return r + 1
    return R


def perplexity_windows(W, cfg, ids, context, loops=None, layout="depth-indexed", shared_after=1,
                       threshold=None, budget=None, criterion="auto"):
    """Per-prediction NLL (natural log, float64) and depth of `ids` ([N] long), teacher-forced:
    non-overlapping windows of `context` tokens, each with an empty KV cache; in a window,
    token 0 is a one-token prompt (every loop step) predicting token 1, each later token but
    the last is a decode token fed alone through the KV layout (run_layout's semantics:
    LayoutKV, exit copies) running its own exit depth, whose logits predict the next token.
    Looped families: depth R without a threshold; with one, each decode token's depth is
    its exit rule on its own signals (exit_depth), the threshold scaled by the budget b as
    the serving path does (Ouro q*b; Huginn t/b, b = 0: the first step). Dense and LCKV:
    every token through the plain KV cache one at a time (depth 0).
    An L2A gate checkpoint runs every token under the budget b (default 1) instead.
    Returns (nll [n_pred] float64, depths [n_pred] long)."""
    fam = family_of(cfg)
    R = default_loops(cfg) if loops is None else loops
    gate_budget = None
    if l2a_config(cfg) is not None:
        gate_budget, budget = check_budget(cfg, budget), None
    if threshold is not None and budget is not None:
        if fam == "ouro" and criterion in ("auto", "hazard"):
            threshold = threshold * budget
        else:
            threshold = threshold / budget if budget > 0 else math.inf
    nlls, depths = [], []

    def score(logits, target, depth):
        nlls.append(-torch.log_softmax(logits.to(torch.float64), dim=-1)[target].item())
        depths.append(depth)

    for b in range(0, ids.numel() - 1, context):
        win = ids[b : b + context]
        n = win.numel()
        if fam in ("dense", "lckv"):
            logits = run(W, cfg, win, incremental=True, budget=gate_budget)["logits"]
            for i in range(n - 1):
                score(logits[i], win[i + 1], 0)
            continue
        n_core, call = ((cfg["num_hidden_layers"], ouro_layout_call) if fam == "ouro" else
                        (cfg.get("n_layers_in_recurrent_block", 4), huginn_layout_call))
        kv = LayoutKV(layout, R, n_core, 1, shared_after)
        score(call(W, cfg, win[:1], 0, kv, R)[0][0], win[1], R)
        for i in range(1, n - 1):
            e = R
            if threshold is not None:
                probe = LayoutKV(layout, R, n_core, 1, shared_after)
                probe.store = {slot: dict(rows) for slot, rows in kv.store.items()}
                _, sig, *kl = call(W, cfg, win[i : i + 1], i, probe, R)
                e = exit_depth(fam, sig[:, 0], kl[0][:, 0] if kl else None, R, threshold, criterion)
            logits = call(W, cfg, win[i : i + 1], i, kv, e)[0]
            kv.exit(i, e)
            score(logits[0], win[i + 1], e)
    return torch.tensor(nlls, dtype=torch.float64), torch.tensor(depths, dtype=torch.long)


def write_perplexity(args, W, cfg, ids):
    """--perplexity: nll.f32 [n_pred], nll_depths.f32 [n_pred], perplexity.json."""
    fam = family_of(cfg)
    spec = l2a_config(cfg)
    if args.exit_threshold is not None and fam not in LOOPED:
        raise SystemExit("--exit-threshold: the model is not looped")
    if spec is not None:
        args.budget = cli_budget(cfg, args.budget)
    elif args.budget is not None and fam not in LOOPED:
        raise SystemExit(NO_L2A_BUDGET)
    elif args.budget is not None and args.exit_threshold is None:
        raise SystemExit("--budget scales --exit-threshold; give one")
    if ids.numel() < 2:
        raise SystemExit("--perplexity needs at least 2 ids")
    loops = default_loops(cfg) if args.loops is None else args.loops
    nll, depths = perplexity_windows(
        W, cfg, ids, args.context, loops=loops if fam in LOOPED else None, layout=args.layout or "depth-indexed",
        shared_after=1 if args.shared_after is None else args.shared_after, threshold=args.exit_threshold,
        budget=args.budget, criterion=args.exit_criterion)
    os.makedirs(args.out_dir, exist_ok=True)
    meta = {"model_type": cfg["model_type"], "family": fam, "n_tokens": int(ids.numel()), "context": args.context,
            "loops": loops if fam in LOOPED else None, "layout": args.layout or "depth-indexed",
            "exit_threshold": args.exit_threshold, "budget": args.budget, "exit_criterion": args.exit_criterion,
            "predictions": int(nll.numel()), "mean_nll": nll.mean().item(), "perplexity": math.exp(nll.mean().item()),
            "mean_depth": depths.to(torch.float64).mean().item(), "files": {}}
    if spec is not None:
        meta.update(l2a_meta(spec))
    write_f32(args.out_dir, "nll.f32", nll, meta)
    write_f32(args.out_dir, "nll_depths.f32", depths, meta)
    with open(os.path.join(args.out_dir, "perplexity.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return 0


NO_L2A_BUDGET = ("--budget: config.json has no l2a block (--budget is the L2A gate budget b of an L2A gate "
                 "checkpoint; for a looped model it scales --exit-threshold in --perplexity mode)")


def cli_budget(cfg, budget):
    """--budget of an L2A gate checkpoint: b in [0, 1], default 1."""
    try:
        return check_budget(cfg, budget)
    except ValueError as e:
        raise SystemExit(f"--budget: {e}")


def l2a_meta(spec):
    """meta.json / perplexity.json fields of an L2A gate checkpoint."""
    return {"l2a": {k: v for k, v in spec.items() if k != "outputs"}, "l2a_gates": [g for g in L2A_GATES if g in spec["gates"]],
            "l2a_outputs": spec["outputs"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + safetensors)")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--loops", type=int, default=None,
                    help="loop steps R (Ouro: default total_ut_steps; Huginn: default mean_recurrence)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--exit-thresholds", default=None, help="Ouro: comma-separated q values for ouro_exit_step.f32")
    ap.add_argument("--init-state", default="zero", choices=["zero"], help="Huginn initial state")
    ap.add_argument("--init-state-file", default=None, help="Huginn: f32 [n_tokens, n_embd] initial state")
    ap.add_argument("--incremental", action="store_true",
                    help="token-by-token forward through the KV cache instead of one full-prompt forward")
    ap.add_argument("--chunk", type=int, default=0,
                    help="feed the prompt in chunks of this many tokens through the KV cache")
    ap.add_argument("--decode-ids", default=None,
                    help="comma-separated ids fed one at a time after a one-chunk prefill of --ids "
                         "(teacher forcing); writes prefill_logits.f32, decode_logits.f32, decode_signals.f32")
    ap.add_argument("--exit-depths", default=None,
                    help="with --decode-ids: loop steps each decode token runs, 1..R (default all R)")
    ap.add_argument("--layout", default=None, choices=list(LAYOUTS),
                    help="with --decode-ids: KV layout (default depth-indexed)")
    ap.add_argument("--prompt-depth", type=int, default=None,
                    help="with --decode-ids: loop steps the prompt's tokens run, 1..R (default R)")
    ap.add_argument("--shared-after", type=int, default=None,
                    help="with --layout first-then-shared: S, core slot min(r, S-1) (default 1)")
    ap.add_argument("--perplexity", action="store_true",
                    help="score --ids teacher-forced as `fathom eval` does (perplexity_windows): writes nll.f32, "
                         "nll_depths.f32 and perplexity.json; takes --context, --loops, --exit-threshold, --budget, "
                         "--exit-criterion, --layout, --shared-after")
    ap.add_argument("--context", type=int, default=1024, help="--perplexity: window length (default 1024)")
    ap.add_argument("--exit-threshold", type=float, default=None,
                    help="--perplexity: each decode token exits by its own signal at this threshold")
    ap.add_argument("--budget", type=float, default=None,
                    help="L2A gate checkpoint (an l2a block in config.json): the budget b in [0, 1] every token "
                         "runs under, in every mode (default 1); looped models: --perplexity only, b scaling "
                         "--exit-threshold")
    ap.add_argument("--exit-criterion", default="auto", choices=["auto", "hazard", "latent-diff", "kl"],
                    help="--perplexity: auto = Ouro hazard, Huginn latent-diff")
    args = ap.parse_args(argv)
    if args.perplexity:
        if args.decode_ids is not None or args.exit_depths is not None or args.incremental or args.chunk:
            raise SystemExit("--perplexity does not take --decode-ids, --exit-depths, --incremental or --chunk")
        if args.shared_after is not None and args.layout != "first-then-shared":
            raise SystemExit("--shared-after applies only to --layout first-then-shared")
        if args.context < 2:
            raise SystemExit("--context must be >= 2")
        W, cfg = load_model(args.model)
        ids = torch.tensor([int(t) for t in args.ids.split(",") if t.strip() != ""], dtype=torch.long)
        return write_perplexity(args, W, cfg, ids)
    cfg = load_config(args.model)
    fam = family_of(cfg)
    spec = l2a_config(cfg)
    if spec is not None:
        args.budget = cli_budget(cfg, args.budget)
    elif args.budget is not None and fam not in LOOPED:
        raise SystemExit(NO_L2A_BUDGET)
    if args.exit_threshold is not None or (args.budget is not None and spec is None):
        raise SystemExit("--exit-threshold and --budget need --perplexity")
    if args.decode_ids is None and (args.exit_depths is not None or args.layout is not None
                                    or args.shared_after is not None or args.prompt_depth is not None):
        raise SystemExit("--exit-depths, --layout, --shared-after and --prompt-depth need --decode-ids")
    if args.shared_after is not None and args.layout != "first-then-shared":
        raise SystemExit("--shared-after applies only to --layout first-then-shared")

    W = l2a_prepare(load_checkpoint(args.model), cfg)
    ids = torch.tensor([int(t) for t in args.ids.split(",") if t.strip() != ""], dtype=torch.long)
    if ids.numel() == 0:
        raise SystemExit("--ids is empty")
    loops = default_loops(cfg) if args.loops is None else args.loops
    if fam in LOOPED and loops < 1:
        raise SystemExit("--loops must be >= 1")

    init_state = None
    if fam == "huginn" and args.init_state_file:
        E = huginn_dims(cfg)[0]
        raw = torch.from_numpy(__import__("numpy").fromfile(args.init_state_file, dtype="<f4").copy())
        if raw.numel() != ids.numel() * E:
            raise SystemExit(f"--init-state-file has {raw.numel()} floats, expected {ids.numel()}x{E}")
        init_state = raw.view(ids.numel(), E)

    decode = None
    if args.decode_ids is not None and fam == "lckv":
        raise SystemExit("--decode-ids: not for lckv-llama (use --incremental or --chunk)")
    if args.decode_ids is not None:
        dec_ids = torch.tensor([int(t) for t in args.decode_ids.split(",") if t.strip() != ""], dtype=torch.long)
        if dec_ids.numel() == 0:
            raise SystemExit("--decode-ids is empty")
        if args.init_state_file:
            raise SystemExit("--decode-ids supports only --init-state zero (not --init-state-file)")
        depths = None
        if args.exit_depths is not None:
            depths = [int(t) for t in args.exit_depths.split(",") if t.strip() != ""]
            if len(depths) != dec_ids.numel():
                raise SystemExit(f"--exit-depths has {len(depths)} values for {dec_ids.numel()} decode ids")
            if fam in LOOPED and any(not 1 <= e <= loops for e in depths):
                raise SystemExit(f"--exit-depths values must be in [1, {loops}]")
        if args.prompt_depth is not None and (fam not in LOOPED or not 1 <= args.prompt_depth <= loops):
            raise SystemExit(f"--prompt-depth must be in [1, {loops}] (looped families only)")
        layout = args.layout or "depth-indexed"
        shared_after = 1 if args.shared_after is None else args.shared_after
        if fam in LOOPED and layout == "first-then-shared" and not 1 <= shared_after <= loops:
            raise SystemExit(f"--shared-after must be in [1, {loops}]")
        decode = run_layout(W, cfg, ids, dec_ids, exit_depths=depths if fam in LOOPED else None,
                            loops=loops if fam in LOOPED else None, layout=layout, shared_after=shared_after,
                            budget=args.budget, prompt_depth=args.prompt_depth)

    res = run(W, cfg, ids, loops=loops if fam in LOOPED else None, init_state=init_state,
              incremental=args.incremental, chunk=args.chunk, budget=args.budget)

    os.makedirs(args.out_dir, exist_ok=True)
    meta = {"model_type": cfg["model_type"], "family": fam, "n_tokens": int(ids.numel()),
            "vocab_size": int(res["logits"].shape[-1]), "ids": ids.tolist(),
            "loops": loops if fam in LOOPED else None, "incremental": bool(args.incremental), "files": {}}
    write_f32(args.out_dir, "logits.f32", res["logits"], meta)
    if spec is not None:
        meta.update(l2a_meta(spec), budget=args.budget, chunk=args.chunk)
        write_f32(args.out_dir, "l2a_router_logits.f32", res["l2a_router_logits"], meta)
        write_f32(args.out_dir, "l2a_decisions.f32", res["l2a_decisions"], meta)
    if fam == "ouro":
        write_f32(args.out_dir, "ouro_lambda.f32", res["lambda"], meta)
        write_f32(args.out_dir, "ouro_pdf.f32", res["pdf"], meta)
        write_f32(args.out_dir, "ouro_step_logits.f32", res["step_logits"], meta)
        if args.exit_thresholds:
            qs = [float(q) for q in args.exit_thresholds.split(",")]
            meta["exit_thresholds"] = qs
            write_f32(args.out_dir, "ouro_exit_step.f32", ouro_exit_steps(res["pdf"], qs), meta)
    if fam == "huginn":
        meta["init_state"] = "file:" + args.init_state_file if args.init_state_file else args.init_state
        write_f32(args.out_dir, "huginn_latent_diff.f32", res["latent_diff"], meta)
        write_f32(args.out_dir, "huginn_kl.f32", res["kl"], meta)
    if decode is not None:
        meta.update({"decode_ids": dec_ids.tolist(), "n_decode": int(dec_ids.numel()),
                     "exit_depths": depths if depths is not None else ([loops] * int(dec_ids.numel())
                                                                       if fam in LOOPED else None),
                     "layout": layout, "shared_after": shared_after if layout == "first-then-shared" else None,
                     "prefill": "one chunk", "depths_ignored": fam not in LOOPED,
                     "prompt_depth": args.prompt_depth if args.prompt_depth is not None else
                                     (loops if fam in LOOPED else None)})
        write_f32(args.out_dir, "prefill_logits.f32", decode["prefill_logits"], meta)
        write_f32(args.out_dir, "decode_logits.f32", decode["decode_logits"], meta)
        if "decode_signals" in decode:
            write_f32(args.out_dir, "decode_signals.f32", decode["decode_signals"], meta)
        if "decode_kl" in decode:
            write_f32(args.out_dir, "decode_kl.f32", decode["decode_kl"], meta)
    with open(os.path.join(args.out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
