#!/usr/bin/python3
r"""Tiny random checkpoints with the exact upstream tensor names, plus the reference's self-test.

    /usr/bin/python3 tests/reference/make_tiny.py --family {llama,qwen2,qwen3,ouro,huginn,lckv} \
        --out DIR [--dtype f32|bf16|f16] [--seed N] [--tied] [--shards N]
    /usr/bin/python3 tests/reference/make_tiny.py --family {llama,qwen2,qwen3} --out DIR ... \
        --l2a-gates attention,mlp,heads [--l2a-router-hidden R] [--l2a-budget-features K] \
        [--l2a-kv compute|mask] [--l2a-lora-rank r [--l2a-lora-alpha A] [--l2a-lora-targets q_proj,...]] \
        [--l2a-force on|off|none]
    /usr/bin/python3 tests/reference/make_tiny.py --selftest [--work DIR]
    /usr/bin/python3 tests/reference/make_tiny.py --selftest-layouts [--work DIR]
    /usr/bin/python3 tests/reference/make_tiny.py --selftest-l2a [--work DIR]

--l2a-gates makes an L2A gate checkpoint (docs/L2A_FORMAT.md; add_l2a): routers calibrated
on the tiny model so that decisions vary across tokens, layers and budgets, optional LoRA.

--selftest makes checkpoints for every family and checks reference.py against an
independent float64 numpy formulation (per-head, per-position loops, complex-number RoPE
for Huginn), incremental (KV cache, one token per call) against full-prompt forwards,
Ouro's pdf sums, the CLI and the on-disk formats, the L2A gate checkpoints (selftest_l2a,
against np_l2a_dense; --selftest-l2a runs only these); it ends with the layout checks.
--selftest-layouts runs only those: reference.run_layout / --decode-ids (teacher-forced
decode under a KV layout with scripted exit depths) against NpLayoutDecode, an independent
float64 formulation, plus relations between layouts and the full forward.
"""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as ref  # noqa: E402

# ----------------------------------------------------------------------------------------
# safetensors writer
# ----------------------------------------------------------------------------------------

_DT = {"f32": ("F32", torch.float32), "bf16": ("BF16", torch.bfloat16), "f16": ("F16", torch.float16)}


def tensor_bytes(t, dtype):
    t = t.to(_DT[dtype][1]).contiguous()
    if dtype == "bf16":
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype("<f4" if dtype == "f32" else "<f2").tobytes()


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = tensor_bytes(t, dtype)
        header[name] = {"dtype": _DT[dtype][0], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def save_checkpoint(out, cfg, tensors, dtype, shards=1):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if shards <= 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
        return
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(out, fname), {n: tensors[n] for n in part}, dtype)
        weight_map.update({n: fname for n in part})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)


# ----------------------------------------------------------------------------------------
# random tiny models
# ----------------------------------------------------------------------------------------


def make_model(family, seed=0, tied=False):
    """Return (config dict, {name: float32 tensor}) with upstream names and shapes."""
    g = torch.Generator().manual_seed(seed)

    def lin(o, i):
        return torch.randn(o, i, generator=g) / math.sqrt(i)

    def norm(n):  # far from 1 so that `weight` vs `1 + weight` mistakes show
        return 1.0 + 0.3 * torch.randn(n, generator=g)

    def vec(n, s=0.3):
        return s * torch.randn(n, generator=g)

    V = 256
    T = {}
    if family in ("llama", "qwen2", "qwen3", "ouro", "lckv"):
        E, H, Hkv, I, L = 64, 4, 2, 96, 2 if family != "lckv" else 4
        D = 32 if family == "qwen3" else E // H  # qwen3: head_dim != hidden / heads
        cfg = {"model_type": family, "hidden_size": E, "intermediate_size": I, "num_hidden_layers": L,
               "num_attention_heads": H, "num_key_value_heads": Hkv, "head_dim": D, "rms_norm_eps": 1e-6,
               "rope_theta": 10000.0 if family != "ouro" else 1000000.0, "vocab_size": V,
               "tie_word_embeddings": bool(tied), "hidden_act": "silu", "max_position_embeddings": 4096}
        cfg["architectures"] = {"llama": ["LlamaForCausalLM"], "qwen2": ["Qwen2ForCausalLM"],
                                "qwen3": ["Qwen3ForCausalLM"], "ouro": ["OuroForCausalLM"],
                                "lckv": ["LCKVLlamaForCausalLM"]}[family]
        if family == "lckv":  # configuration_lckv.py: layer 1 reads layer 2's KV, nobody reads layer 1's
            cfg.update({"model_type": "lckv-llama", "layer_types": "0_2_2_3", "forward_passes": 7,
                        "backward_passes": 2, "sliding_window": 4096, "use_sequential": False,
                        "force_nodiag": True, "attention_bias": False})
        kv_read = {int(t.rstrip("s")) for t in cfg["layer_types"].split("_")} if family == "lckv" else range(L)
        if family == "llama":
            cfg["attention_bias"] = False
        if family == "qwen3":
            cfg["attention_bias"] = False
        if family == "ouro":
            cfg.update({"total_ut_steps": 4, "early_exit_threshold": 1.0, "use_sliding_window": False})
        T["model.embed_tokens.weight"] = torch.randn(V, E, generator=g)
        for i in range(L):
            p = f"model.layers.{i}."
            T[p + "input_layernorm.weight"] = norm(E)
            T[p + "self_attn.q_proj.weight"] = lin(H * D, E)
            if i in kv_read:  # LCKV drops k_proj / v_proj of layers whose KV nobody reads
                T[p + "self_attn.k_proj.weight"] = lin(Hkv * D, E)
                T[p + "self_attn.v_proj.weight"] = lin(Hkv * D, E)
            T[p + "self_attn.o_proj.weight"] = lin(E, H * D)
            if family == "qwen2":
                T[p + "self_attn.q_proj.bias"] = vec(H * D)
                T[p + "self_attn.k_proj.bias"] = vec(Hkv * D)
                T[p + "self_attn.v_proj.bias"] = vec(Hkv * D)
            if family == "qwen3":
                T[p + "self_attn.q_norm.weight"] = norm(D)
                T[p + "self_attn.k_norm.weight"] = norm(D)
            T[p + "post_attention_layernorm.weight"] = norm(E)
            T[p + "mlp.gate_proj.weight"] = lin(I, E)
            T[p + "mlp.up_proj.weight"] = lin(I, E)
            T[p + "mlp.down_proj.weight"] = lin(E, I)
            if family == "ouro":
                T[p + "input_layernorm_2.weight"] = norm(E)
                T[p + "post_attention_layernorm_2.weight"] = norm(E)
        T["model.norm.weight"] = norm(E)
        if family == "ouro":
            T["model.early_exit_gate.weight"] = lin(1, E)
            T["model.early_exit_gate.bias"] = vec(1, 0.5)
        if not tied:
            T["lm_head.weight"] = lin(V, E)
        return cfg, T

    if family == "huginn":
        E, H, I, P, C, K = 64, 4, 96, 2, 3, 2
        D = E // H
        cfg = {"model_type": "huginn_raven", "architectures": ["RavenForCausalLM"],
               "n_embd": E, "n_heads": H, "num_key_value_heads": H, "head_dim": D,
               "n_layers": P + C + K, "n_layers_in_prelude": P, "n_layers_in_recurrent_block": C,
               "n_layers_in_coda": K, "mean_recurrence": 8, "mean_backprop_depth": 8,
               "intermediate_size": I, "vocab_size": V, "padded_vocab_size": V, "padding_multiple": 4096,
               "block_size": 4096, "norm_eps": 1e-6, "rope_base": 50000.0, "qk_bias": True, "bias": False,
               "tie_embeddings": bool(tied), "state_init": "like-init", "injection_type": "linear",
               "block_class_name": "SandwichBlock", "norm_class_name": "RMSNorm_llama",
               "mlp_class_name": "GatedMLP", "nonlin_name": "SiLU", "test_time_noise": 0}
        T["transformer.wte.weight"] = 0.3 * torch.randn(V, E, generator=g)

        def block(p):
            for n in range(1, 5):
                T[p + f"norm_{n}.weight"] = norm(E)
            T[p + "attn.Wqkv.weight"] = lin(3 * E, E)
            T[p + "attn.qk_bias"] = 0.3 * torch.randn(2, 1, H, D, generator=g)
            T[p + "attn.proj.weight"] = lin(E, E)
            T[p + "mlp.fc.weight"] = lin(2 * I, E)
            T[p + "mlp.proj.weight"] = lin(E, I)

        for i in range(P):
            block(f"transformer.prelude.{i}.")
        T["transformer.adapter.weight"] = lin(E, 2 * E)
        for i in range(C):
            block(f"transformer.core_block.{i}.")
        for i in range(K):
            block(f"transformer.coda.{i}.")
        T["transformer.ln_f.weight"] = norm(E)
        if not tied:
            T["lm_head.weight"] = lin(V, E)
        return cfg, T
    raise ValueError(family)


def make(family, out, dtype="f32", seed=0, tied=False, shards=1, l2a=None):
    """l2a: None, or add_l2a's keyword options (an L2A gate checkpoint on a dense family)."""
    cfg, T = make_model(family, seed, tied)
    if l2a is not None:
        add_l2a(cfg, T, seed=seed, **l2a)
    save_checkpoint(out, cfg, T, dtype, shards)
    return cfg, T


# ----------------------------------------------------------------------------------------
# L2A gate checkpoints (docs/L2A_FORMAT.md): routers and LoRA on a dense tiny model
# ----------------------------------------------------------------------------------------

L2A_DENSE = ("llama", "qwen2", "qwen3")
CALIB_BUDGETS = (0.2, 0.5, 1.0)


def add_l2a(cfg, T, gates, router_hidden=16, budget_features=2, kv="compute", lora_rank=0, lora_alpha=None,
            lora_targets=("q_proj", "v_proj"), force="none", seed=0, lora_ramp=None):
    """Add the `l2a` block to cfg and the router (and LoRA) tensors to T, in place.  The base
    tensors are left unchanged (a separate generator), so the same seed without L2A gives
    the base model.

    Random routers are calibrated on the model itself: a random 64-token sequence runs
    through the gated model at b = 0.5 (reference.l2a_dense_layer, LoRA merged), and for
    each layer in turn, on that layer's real normed inputs, each router output is scaled
    so that its token-dependent part has std 1.5 and given the final bias that puts its
    median at 0 (half the gates on at b = 0.5; the bias lies halfway between the two middle
    logits, so no calibration token sits on the threshold).  The budget moves the logits by about
    as much: the phi(b) columns carry much larger weights than the h columns, with a
    monotone part (more gates on at larger b): +1.5 on the b column of a linear router; a
    hidden unit silu(1.5 b) with weight +1 into every output of an MLP router.
    force "on" / "off": final bias +30 / -30, every gate on / off.
    lora_ramp (b_full, b_off): the LoRA's lora.budget_ramp (calibration merges its share at 0.5)."""
    if cfg["model_type"] not in L2A_DENSE:
        raise ValueError(f"L2A gates: only {', '.join(L2A_DENSE)} (not {cfg['model_type']})")
    gates = list(gates)
    if not gates or any(x not in ref.L2A_GATES for x in gates) or len(set(gates)) != len(gates):
        raise ValueError(f"--l2a-gates: a non-empty subset of {','.join(ref.L2A_GATES)}, got {','.join(gates)}")
    if router_hidden < 0 or not 0 <= budget_features <= 64:
        raise ValueError("--l2a-router-hidden must be >= 0 and --l2a-budget-features in [0, 64]")
    if kv not in ref.L2A_KV or force not in ("on", "off", "none"):
        raise ValueError(f"--l2a-kv {kv!r} / --l2a-force {force!r}")
    block = {"version": 1, "gates": gates, "router_hidden": router_hidden, "budget_features": budget_features}
    if "attention" in gates:
        block["skipped_attention_kv"] = kv
    if lora_rank:
        targets = list(lora_targets)
        if lora_rank < 1 or not targets or any(t not in ref.LORA_TARGETS for t in targets) \
                or len(set(targets)) != len(targets):
            raise ValueError(f"--l2a-lora-rank >= 1 and --l2a-lora-targets from {','.join(ref.LORA_TARGETS)}")
        alpha = float(2 * lora_rank if lora_alpha is None else lora_alpha)
        if not alpha > 0:
            raise ValueError("--l2a-lora-alpha must be > 0")
        block["lora"] = {"rank": lora_rank, "alpha": alpha, "targets": targets}
        if lora_ramp is not None:
            block["lora"]["budget_ramp"] = [float(v) for v in lora_ramp]
    elif lora_ramp is not None:
        raise ValueError("--l2a-lora-budget-ramp needs --l2a-lora-rank")
    cfg["l2a"] = block
    spec = ref.l2a_config(cfg)
    g = torch.Generator().manual_seed(1_000_003 + 7919 * seed)
    E = cfg["hidden_size"]
    K, R, G = budget_features, router_hidden, len(spec["outputs"])
    F = 2 * K + 1
    L = cfg["num_hidden_layers"]
    if lora_rank:
        scale = alpha / lora_rank
        for i in range(L):
            for t in block["lora"]["targets"]:
                base = f"model.layers.{i}." + ref._lora_prefix(t) + t
                o, n = T[base + ".weight"].shape
                # random non-zero B (PEFT initialises it to zero); the merged delta is ~0.3 of W
                T[base + ".lora_A.weight"] = torch.randn(lora_rank, n, generator=g) / math.sqrt(n)
                T[base + ".lora_B.weight"] = torch.randn(o, lora_rank, generator=g) * (0.3 / (scale * math.sqrt(lora_rank)))
    # the model the routers are calibrated on: LoRA merged (reference.l2a_prepare's formula)
    Wc = {n: t for n, t in T.items() if ".lora_" not in n}
    for n in T:
        if n.endswith(".lora_A.weight"):
            base = n[: -len(".lora_A.weight")]
            share = ref.l2a_lora_share(spec, 0.5)
            Wc[base + ".weight"] = T[base + ".weight"] + share * scale * (T[base + ".lora_B.weight"] @ T[n])
    cal = torch.randperm(cfg["vocab_size"], generator=g)[:64]  # distinct ids: distinct layer-0 logits
    x = Wc["model.embed_tokens.weight"][cal]
    phis = {b: ref.l2a_phi(b, K) for b in CALIB_BUDGETS}
    cache, positions, eps = {}, torch.arange(cal.shape[0]), cfg["rms_norm_eps"]
    for i in range(L):
        p = f"model.layers.{i}."
        rp = p + "l2a_router."
        h = ref.rms_norm(x, Wc[p + "input_layernorm.weight"], eps)
        if R > 0:
            w1 = torch.cat([torch.randn(R, E, generator=g) / math.sqrt(E), 0.3 * torch.randn(R, F, generator=g)], 1)
            b1 = 0.3 * torch.randn(R, generator=g)
            w1[0], b1[0] = 0.0, 0.0
            w1[0, E] = 1.5  # hidden unit 0 reads the budget alone: silu(1.5 b), increasing on [0, 1]
            w2 = torch.randn(G, R, generator=g) / math.sqrt(R)
            w2[:, 0] = 0.0
            Wc.update({rp + "fc1.weight": w1, rp + "fc1.bias": b1, rp + "fc2.weight": w2, rp + "fc2.bias": torch.zeros(G)})
            z = ref.l2a_router(Wc, spec, i, h, phis[0.5])
            w2 *= (1.5 / z.std(0).clamp_min(1e-3)).to(torch.float32)[:, None]
            w2[:, 0] = 1.0
            bname = rp + "fc2.bias"
        else:
            w = torch.cat([torch.randn(G, E, generator=g) / math.sqrt(E), 0.5 * torch.randn(G, F, generator=g)], 1)
            Wc.update({rp + "fc.weight": w, rp + "fc.bias": torch.zeros(G)})
            z = ref.l2a_router(Wc, spec, i, h, phis[0.5])
            w[:, :E] *= (1.5 / z.std(0).clamp_min(1e-3)).to(torch.float32)[:, None]
            w[:, E] += 1.5  # the b column: more gates on at larger b
            bname = rp + "fc.bias"
        zs = ref.l2a_router(Wc, spec, i, h, phis[0.5]).sort(0).values  # [64, G]
        Wc[bname] = -(0.5 * (zs[31] + zs[32])).to(torch.float32)  # between the middle two: no logit exactly 0
        x, _ = ref.l2a_dense_layer(Wc, cfg, spec, i, x, positions, cache, ("layer", i), 0, phis[0.5])
        if force != "none":
            Wc[bname] = torch.zeros(G)
            rest = max(float(ref.l2a_router(Wc, spec, i, h, phi).abs().max()) for phi in phis.values())
            if rest > 15.0:
                raise AssertionError(f"router logits reach {rest:.1f}: a +-30 bias may not force them")
            Wc[bname] = torch.full((G,), 30.0 if force == "on" else -30.0)
        T.update({n: t for n, t in Wc.items() if n.startswith(rp)})
    return cfg, T


# ----------------------------------------------------------------------------------------
# Independent float64 numpy formulation (loops over heads and positions).
# ----------------------------------------------------------------------------------------


def np_rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def np_silu(x):
    return x / (1.0 + np.exp(-x))


def np_rope_half(vec, pos, theta):
    """rotate_half RoPE on one head vector: pair (i, i + D/2) rotated by pos * theta^(-2i/D)."""
    D = vec.shape[0]
    out = vec.copy()
    for i in range(D // 2):
        ang = pos * theta ** (-2.0 * i / D)
        a, b = vec[i], vec[i + D // 2]
        out[i] = a * math.cos(ang) - b * math.sin(ang)
        out[i + D // 2] = b * math.cos(ang) + a * math.sin(ang)
    return out


def np_rope_complex(vec, pos, theta):
    """Interleaved RoPE: treat (2i, 2i+1) as a complex number and multiply by e^{i pos w_i}."""
    D = vec.shape[0]
    z = vec[0::2] + 1j * vec[1::2]
    w = theta ** (-np.arange(0, D, 2) / D)
    z = z * np.exp(1j * pos * w)
    out = np.empty(D)
    out[0::2], out[1::2] = z.real, z.imag
    return out


def np_attention(qs, ks, vs):
    """qs: [S][H] of D-vectors, ks/vs: [S][Hkv]; causal; loops over heads and positions."""
    S, H, Hkv = len(qs), len(qs[0]), len(ks[0])
    D = qs[0][0].shape[0]
    out = np.zeros((S, H * D))
    for s in range(S):
        for h in range(H):
            kh = h // (H // Hkv)
            scores = np.array([qs[s][h] @ ks[t][kh] / math.sqrt(D) for t in range(s + 1)])
            pr = np.exp(scores - scores.max())
            pr /= pr.sum()
            out[s, h * D:(h + 1) * D] = sum(pr[t] * vs[t][kh] for t in range(s + 1))
    return out


def np_dense_attn(W, cfg, p, x):
    E, H, Hkv, D = ref.dense_dims(cfg)
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    g = lambda n: W.get(p + n)  # noqa: E731
    q = x @ W[p + "self_attn.q_proj.weight"].T + (g("self_attn.q_proj.bias") if g("self_attn.q_proj.bias") is not None else 0)
    k = x @ W[p + "self_attn.k_proj.weight"].T + (g("self_attn.k_proj.bias") if g("self_attn.k_proj.bias") is not None else 0)
    v = x @ W[p + "self_attn.v_proj.weight"].T + (g("self_attn.v_proj.bias") if g("self_attn.v_proj.bias") is not None else 0)
    qs, ks, vs = [], [], []
    for s in range(x.shape[0]):
        qh, kh = [], []
        for h in range(H):
            vec = q[s, h * D:(h + 1) * D]
            if g("self_attn.q_norm.weight") is not None:
                vec = np_rms(vec, g("self_attn.q_norm.weight"), eps)
            qh.append(np_rope_half(vec, s, theta))
        for h in range(Hkv):
            vec = k[s, h * D:(h + 1) * D]
            if g("self_attn.k_norm.weight") is not None:
                vec = np_rms(vec, g("self_attn.k_norm.weight"), eps)
            kh.append(np_rope_half(vec, s, theta))
        qs.append(qh)
        ks.append(kh)
        vs.append([v[s, h * D:(h + 1) * D] for h in range(Hkv)])
    return np_attention(qs, ks, vs) @ W[p + "self_attn.o_proj.weight"].T


def np_dense_mlp(W, p, x):
    return (np_silu(x @ W[p + "mlp.gate_proj.weight"].T) * (x @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T


def np_head(W, x, embed):
    return x @ (W["lm_head.weight"] if "lm_head.weight" in W else W[embed]).T


def np_dense(W, cfg, ids):
    eps = cfg["rms_norm_eps"]
    x = W["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + np_dense_attn(W, cfg, p, np_rms(x, W[p + "input_layernorm.weight"], eps))
        x = x + np_dense_mlp(W, p, np_rms(x, W[p + "post_attention_layernorm.weight"], eps))
    return np_head(W, np_rms(x, W["model.norm.weight"], eps), "model.embed_tokens.weight")


def np_ouro(W, cfg, ids, R):
    eps = cfg["rms_norm_eps"]
    x = W["model.embed_tokens.weight"][ids]
    lam, steps = [], []
    for _ in range(R):
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            x = x + np_rms(np_dense_attn(W, cfg, p, np_rms(x, W[p + "input_layernorm.weight"], eps)),
                           W[p + "input_layernorm_2.weight"], eps)
            x = x + np_rms(np_dense_mlp(W, p, np_rms(x, W[p + "post_attention_layernorm.weight"], eps)),
                           W[p + "post_attention_layernorm_2.weight"], eps)
        x = np_rms(x, W["model.norm.weight"], eps)
        z = x @ W["model.early_exit_gate.weight"][0] + W["model.early_exit_gate.bias"][0]
        lam.append(1.0 / (1.0 + np.exp(-z)))
        steps.append(np_head(W, x, "model.embed_tokens.weight"))
    lam = np.array(lam)
    # pdf written the paper's way: p_t = lambda_t prod_{j<t} (1 - lambda_j); p_R = 1 - sum_{t<R} p_t
    pdf = np.zeros_like(lam)
    for t in range(R - 1):
        pdf[t] = lam[t] * np.prod(1.0 - lam[:t], axis=0)
    pdf[R - 1] = 1.0 - pdf[: R - 1].sum(0)
    return steps[-1], lam, pdf, np.array(steps)


def np_huginn_block(W, cfg, p, x):
    E, H, D = ref.huginn_dims(cfg)
    eps, theta = cfg["norm_eps"], cfg["rope_base"]
    hn = np_rms(x, W[p + "norm_1.weight"], eps)
    Wqkv = W[p + "attn.Wqkv.weight"]
    q, k, v = hn @ Wqkv[:E].T, hn @ Wqkv[E:2 * E].T, hn @ Wqkv[2 * E:].T
    bias = W[p + "attn.qk_bias"]
    qs = [[np_rope_complex(q[s, h * D:(h + 1) * D] + bias[0, 0, h], s, theta) for h in range(H)] for s in range(x.shape[0])]
    ks = [[np_rope_complex(k[s, h * D:(h + 1) * D] + bias[1, 0, h], s, theta) for h in range(H)] for s in range(x.shape[0])]
    vs = [[v[s, h * D:(h + 1) * D] for h in range(H)] for s in range(x.shape[0])]
    x = np_rms(np_attention(qs, ks, vs) @ W[p + "attn.proj.weight"].T + x, W[p + "norm_2.weight"], eps)
    fc = np_rms(x, W[p + "norm_3.weight"], eps) @ W[p + "mlp.fc.weight"].T
    I = fc.shape[-1] // 2
    m = (np_silu(fc[:, :I]) * fc[:, I:]) @ W[p + "mlp.proj.weight"].T
    return np_rms(m + x, W[p + "norm_4.weight"], eps)


def np_huginn(W, cfg, ids, R, x0):
    E = cfg["n_embd"]
    eps = cfg["norm_eps"]
    e = W["transformer.wte.weight"][ids] * math.sqrt(E)
    for i in range(cfg["n_layers_in_prelude"]):
        e = np_huginn_block(W, cfg, f"transformer.prelude.{i}.", e)
    x = x0.copy()
    V = W["transformer.wte.weight"].shape[0]
    prev = np.full((len(ids), V), 1.0 / V)
    diffs, kls = [], []
    for _ in range(R):
        xn = np.concatenate([x, e], -1) @ W["transformer.adapter.weight"].T
        for i in range(cfg["n_layers_in_recurrent_block"]):
            xn = np_huginn_block(W, cfg, f"transformer.core_block.{i}.", xn)
        diffs.append(np.linalg.norm(xn - x, axis=-1) / np.linalg.norm(xn, axis=-1))
        x = xn
        y = np_rms(x, W["transformer.ln_f.weight"], eps)
        for i in range(cfg["n_layers_in_coda"]):
            y = np_huginn_block(W, cfg, f"transformer.coda.{i}.", y)
        logits = np_head(W, np_rms(y, W["transformer.ln_f.weight"], eps), "transformer.wte.weight")
        pr = np.exp(logits - logits.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        kls.append((prev * (np.log(prev) - np.log(pr))).sum(-1))
        prev = pr
    return logits, np.array(diffs), np.array(kls)


# ----------------------------------------------------------------------------------------
# Independent float64 formulation of an L2A gate checkpoint's forward.
# ----------------------------------------------------------------------------------------

_ATTN_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def np_l2a_merge(Wn, cfg):
    """LoRA merged in float64: W + (alpha / r) B A; lora tensors dropped."""
    lora = cfg["l2a"].get("lora")
    W = {n: t for n, t in Wn.items() if ".lora_" not in n}
    if lora:
        s = lora["alpha"] / lora["rank"]
        for i in range(cfg["num_hidden_layers"]):
            for t in lora["targets"]:
                base = f"model.layers.{i}." + ("self_attn." if t in _ATTN_TARGETS else "mlp.") + t
                W[base + ".weight"] = Wn[base + ".weight"] + s * (Wn[base + ".lora_B.weight"] @ Wn[base + ".lora_A.weight"])
    return W


def np_phi(b, K):
    v = [b]
    for k in range(1, K + 1):
        v += [math.sin(k * math.pi * b), math.cos(k * math.pi * b)]
    return np.array(v, dtype=np.float64).astype(np.float32).astype(np.float64)


def np_l2a_dense(Wn, cfg, ids, b):
    """Gated forward, token by token and head by head.  Wn: the checkpoint's tensors
    (float64, LoRA unmerged).  Returns (logits [S, V], z [L, S, G], decisions [L, S, G])."""
    spec = cfg["l2a"]
    gates = spec["gates"]
    E, H, Hkv, D = ref.dense_dims(cfg)
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    W = np_l2a_merge(Wn, cfg)
    phi = np_phi(b, spec["budget_features"])
    c_attn = 0 if "attention" in gates else None
    c_mlp = int("attention" in gates) if "mlp" in gates else None
    c_head = int("attention" in gates) + int("mlp" in gates) if "heads" in gates else None
    mask = "attention" in gates and spec["skipped_attention_kv"] == "mask"
    x = W["model.embed_tokens.weight"][ids]
    S = len(ids)
    Z = []
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        r = p + "l2a_router."
        hn = np_rms(x, W[p + "input_layernorm.weight"], eps)
        z = []
        for s in range(S):
            u = np.concatenate([hn[s], phi])
            if spec["router_hidden"] > 0:
                z.append(W[r + "fc2.weight"] @ np_silu(W[r + "fc1.weight"] @ u + W[r + "fc1.bias"]) + W[r + "fc2.bias"])
            else:
                z.append(W[r + "fc.weight"] @ u + W[r + "fc.bias"])
        z = np.array(z)
        Z.append(z)
        attn = [c_attn is None or z[s, c_attn] > 0 for s in range(S)]
        mlp = [c_mlp is None or z[s, c_mlp] > 0 for s in range(S)]
        keep = [[c_head is None or z[s, c_head + h] > 0 for h in range(H)] for s in range(S)]
        bias = lambda n: W.get(p + n, 0.0)  # noqa: E731
        q = hn @ W[p + "self_attn.q_proj.weight"].T + bias("self_attn.q_proj.bias")
        k = hn @ W[p + "self_attn.k_proj.weight"].T + bias("self_attn.k_proj.bias")
        v = hn @ W[p + "self_attn.v_proj.weight"].T + bias("self_attn.v_proj.bias")

        def head_vec(m, s, h, norm):
            vec = m[s, h * D:(h + 1) * D]
            if p + norm in W:
                vec = np_rms(vec, W[p + norm], eps)
            return np_rope_half(vec, s, theta)

        Wo = W[p + "self_attn.o_proj.weight"]
        xa = x.copy()
        for s in range(S):
            if not attn[s] or not any(keep[s]):
                continue  # the residual passes unchanged
            keys = [t for t in range(s + 1) if not mask or attn[t]]  # mask: skipped positions invisible
            o = np.array(bias("self_attn.o_proj.bias"), dtype=np.float64) + np.zeros(E)
            for h in range(H):
                if not keep[s][h]:
                    continue  # pruned: its o_proj columns are not applied
                g = h // (H // Hkv)
                qv = head_vec(q, s, h, "self_attn.q_norm.weight")
                sc = np.array([qv @ head_vec(k, t, g, "self_attn.k_norm.weight") for t in keys]) / math.sqrt(D)
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                yh = sum(pr[n] * v[t, g * D:(g + 1) * D] for n, t in enumerate(keys))
                o = o + Wo[:, h * D:(h + 1) * D] @ yh
            xa[s] = x[s] + o
        x = xa.copy()
        for s in range(S):
            if mlp[s]:
                x[s] = xa[s] + np_dense_mlp(W, p, np_rms(xa[s:s + 1], W[p + "post_attention_layernorm.weight"], eps))[0]
    logits = np_head(W, np_rms(x, W["model.norm.weight"], eps), "model.embed_tokens.weight")
    Z = np.array(Z)
    return logits, Z, (Z > 0).astype(np.float64)


# ----------------------------------------------------------------------------------------
# self-test
# ----------------------------------------------------------------------------------------


class Checker:
    def __init__(self):
        self.failures, self.count = [], 0

    def close(self, name, got, want, tol):
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        ok = got.shape == want.shape and np.all(np.isfinite(got))
        err = float(np.max(np.abs(got - want) / (1.0 + np.abs(want)))) if ok else float("inf")
        ok = ok and err <= tol
        self.count += 1
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: max rel err {err:.2e} (tol {tol:.0e}) shape {got.shape}")
        if not ok:
            self.failures.append(name)

    def true(self, name, cond, detail=""):
        self.count += 1
        print(f"  [{'ok' if cond else 'FAIL'}] {name} {detail}")
        if not cond:
            self.failures.append(name)


def read_f32(path, shape):
    a = np.fromfile(path, dtype="<f4")
    return a.reshape(shape)


# Token-by-token and full-prompt runs are both f32, each within the tolerance of the float64
# formulation (2e-5 dense / Ouro, 5e-5 Huginn), so they agree within twice that. Their
# difference is summation order, which depends on the BLAS: with OpenBLAS, which
# python3-torch pulls in on a fresh Debian machine, it reached 2.8e-5 (Ouro, 3 loops); with
# the reference BLAS it stayed under 1e-5.
INC_TOL = 2


def selftest(work):
    ck = Checker()
    ids_list = [3, 17, 200, 5, 99, 42, 7]
    ids = torch.tensor(ids_list)
    S = len(ids_list)
    py = sys.executable
    refpy = os.path.join(HERE, "reference.py")

    for family in ["llama", "qwen2", "qwen3", "ouro", "huginn"]:
        for tied in (False, True):
            tag = f"{family}{'-tied' if tied else ''}"
            print(f"== {tag}")
            d = os.path.join(work, tag)
            cfg, T = make(family, d, "f32", seed=1 + len(tag), tied=tied, shards=2 if tied else 1)
            W = ref.load_checkpoint(d)
            ck.true(f"{tag} load names/values", set(W) == set(T) and all(torch.equal(W[n], T[n]) for n in T))
            Wn = {n: t.double().numpy() for n, t in T.items()}
            cfg = ref.load_config(d)
            if family in ("llama", "qwen2", "qwen3"):
                out = ref.run(W, cfg, ids)
                ck.close(f"{tag} logits vs numpy f64", out["logits"], np_dense(Wn, cfg, ids_list), 2e-5)
                inc = ref.run(W, cfg, ids, incremental=True)
                ck.close(f"{tag} incremental == full", inc["logits"], out["logits"], INC_TOL * 2e-5)
            elif family == "ouro":
                for R in (1, 2, 3, 4):
                    out = ref.run(W, cfg, ids, loops=R)
                    lg, lam, pdf, steps = np_ouro(Wn, cfg, ids_list, R)
                    ck.close(f"{tag} R={R} logits", out["logits"], lg, 2e-5)
                    ck.close(f"{tag} R={R} lambda", out["lambda"], lam, 2e-5)
                    ck.close(f"{tag} R={R} pdf", out["pdf"], pdf, 2e-5)
                    ck.close(f"{tag} R={R} step_logits", out["step_logits"], steps, 2e-5)
                    ck.close(f"{tag} R={R} pdf sums to 1", out["pdf"].sum(0), np.ones(S), 1e-6)
                    inc = ref.run(W, cfg, ids, loops=R, incremental=True)
                    for k in out:
                        ck.close(f"{tag} R={R} incremental == full: {k}", inc[k], out[k], INC_TOL * 2e-5)
                    if R > 1:  # step t's logits do not depend on the total R
                        ck.close(f"{tag} R={R} step logits prefix == R-1 run", out["step_logits"][:-1],
                                 prev["step_logits"], 1e-6)
                    prev = out
                lam = out["lambda"]
                print(f"     lambda range {lam.min():.3f}..{lam.max():.3f}")
            else:
                E = cfg["n_embd"]
                for R in (1, 2, 5, 8):
                    x0 = torch.zeros(S, E)
                    out = ref.run(W, cfg, ids, loops=R)
                    lg, diff, kl = np_huginn(Wn, cfg, ids_list, R, x0.double().numpy())
                    ck.close(f"{tag} R={R} logits", out["logits"], lg, 5e-5)
                    ck.close(f"{tag} R={R} latent_diff", out["latent_diff"], diff, 5e-5)
                    ck.close(f"{tag} R={R} kl", out["kl"], kl, 5e-5)
                    ck.true(f"{tag} R={R} latent_diff[0] == 1 (zero init)",
                            bool(torch.allclose(out["latent_diff"][0], torch.ones(S), atol=1e-6)))
                    inc = ref.run(W, cfg, ids, loops=R, incremental=True)
                    ck.close(f"{tag} R={R} incremental == full: logits", inc["logits"], out["logits"], INC_TOL * 5e-5)
                    ck.close(f"{tag} R={R} incremental == full: latent_diff", inc["latent_diff"],
                             out["latent_diff"], INC_TOL * 5e-5)
                    if R > 1:  # step r's values do not depend on the total R
                        n = prev["kl"].shape[0]
                        ck.close(f"{tag} R={R} kl prefix == R={n} run", out["kl"][:n], prev["kl"], 1e-5)
                        ck.close(f"{tag} R={R} latent_diff prefix == R={n} run", out["latent_diff"][:n],
                                 prev["latent_diff"], 1e-5)
                    prev = out
                print(f"     latent_diff at R=8: {out['latent_diff'][:, -1].numpy().round(3).tolist()}")
                # random initial state through the file interface
                g = torch.Generator().manual_seed(7)
                x0 = torch.randn(S, E, generator=g)
                out = ref.run(W, cfg, ids, loops=3, init_state=x0)
                lg, diff, kl = np_huginn(Wn, cfg, ids_list, 3, x0.double().numpy())
                ck.close(f"{tag} random init logits", out["logits"], lg, 5e-5)
                ck.close(f"{tag} random init latent_diff", out["latent_diff"], diff, 5e-5)

    # CLI and on-disk formats; bf16 / f16 checkpoints
    print("== CLI")
    for dtype in ("bf16", "f16"):
        d = os.path.join(work, f"ouro-{dtype}")
        cfg, T = make("ouro", d, dtype, seed=5)
        W = ref.load_checkpoint(d)
        want = {n: t.to(_DT[dtype][1]).float() for n, t in T.items()}
        ck.true(f"{dtype} read == rounded", all(torch.equal(W[n], want[n]) for n in T))
    d = os.path.join(work, "ouro-bf16")
    od = os.path.join(work, "out-ouro")
    subprocess.run([py, refpy, "--model", d, "--ids", ",".join(map(str, ids_list)), "--loops", "3",
                    "--exit-thresholds", "0.2,0.5,0.9,1.0", "--out-dir", od], check=True)
    meta = json.load(open(os.path.join(od, "meta.json")))
    W = ref.load_checkpoint(d)
    cfg = ref.load_config(d)
    out = ref.run(W, cfg, ids, loops=3)
    V = cfg["vocab_size"]
    ck.true("ouro meta shapes", meta["files"] == {"logits.f32": [S, V], "ouro_lambda.f32": [3, S],
                                                  "ouro_pdf.f32": [3, S], "ouro_step_logits.f32": [3, S, V],
                                                  "ouro_exit_step.f32": [4, S]}, str(meta["files"]))
    ck.close("ouro cli logits", read_f32(os.path.join(od, "logits.f32"), (S, V)), out["logits"], 0)
    ck.close("ouro cli pdf", read_f32(os.path.join(od, "ouro_pdf.f32"), (3, S)), out["pdf"], 0)
    steps = read_f32(os.path.join(od, "ouro_exit_step.f32"), (4, S))
    cum = np.cumsum(out["pdf"].double().numpy(), 0)
    want = []
    for q in (0.2, 0.5, 0.9, 1.0):
        row = []
        for s in range(S):
            hit = [t for t in range(3) if cum[t, s] >= q - 1e-7]
            row.append(hit[0] + 1 if hit and q < 1.0 else 3)
        want.append(row)
    ck.close("ouro exit steps", steps, np.array(want, dtype=np.float64), 0)
    print(f"     exit steps:\n{steps}")
    ck.true("exit steps non-decreasing in q", bool(np.all(np.diff(steps, axis=0) >= 0)))

    d = os.path.join(work, "huginn")
    hd = os.path.join(work, "out-huginn")
    subprocess.run([py, refpy, "--model", d, "--ids", ",".join(map(str, ids_list)), "--loops", "5",
                    "--init-state", "zero", "--out-dir", hd], check=True)
    meta = json.load(open(os.path.join(hd, "meta.json")))
    ck.true("huginn meta shapes", meta["files"] == {"logits.f32": [S, 256], "huginn_latent_diff.f32": [5, S],
                                                    "huginn_kl.f32": [5, S]}, str(meta["files"]))
    W, cfg = ref.load_checkpoint(d), ref.load_config(d)
    out = ref.run(W, cfg, ids, loops=5)
    ck.close("huginn cli kl", read_f32(os.path.join(hd, "huginn_kl.f32"), (5, S)), out["kl"], 0)
    x0 = torch.randn(S, cfg["n_embd"], generator=torch.Generator().manual_seed(3))
    x0.numpy().astype("<f4").tofile(os.path.join(work, "x0.f32"))
    hd2 = os.path.join(work, "out-huginn-file")
    subprocess.run([py, refpy, "--model", d, "--ids", ",".join(map(str, ids_list)), "--loops", "2",
                    "--init-state-file", os.path.join(work, "x0.f32"), "--out-dir", hd2], check=True)
    out = ref.run(W, cfg, ids, loops=2, init_state=x0)
    ck.close("huginn cli init-state-file", read_f32(os.path.join(hd2, "logits.f32"), (S, 256)), out["logits"], 0)
    dd = os.path.join(work, "out-qwen3")
    subprocess.run([py, refpy, "--model", os.path.join(work, "qwen3-tied"), "--ids", "1,2,3", "--out-dir", dd,
                    "--incremental"], check=True)
    ck.true("dense meta", json.load(open(os.path.join(dd, "meta.json")))["files"] == {"logits.f32": [3, 256]})

    selftest_l2a(work, ck)

    print(f"\n{ck.count - len(ck.failures)}/{ck.count} checks passed")
    if ck.failures:
        print("FAILED:", ck.failures)
        return 1
    return 0


# ----------------------------------------------------------------------------------------
# L2A self-test (part of --selftest; alone: --selftest-l2a)
# ----------------------------------------------------------------------------------------

L2A_CASES = [  # (tag, family, dtype, tied, add_l2a options)
    ("qwen3-all-mlp-compute-lora", "qwen3", "f32", False,
     dict(gates=["attention", "mlp", "heads"], router_hidden=16, budget_features=2, kv="compute", lora_rank=4,
          lora_alpha=8.0, lora_targets=list(ref.LORA_TARGETS))),
    ("llama-all-linear-mask-lora-bf16", "llama", "bf16", False,
     dict(gates=["heads", "mlp", "attention"], router_hidden=0, budget_features=3, kv="mask", lora_rank=2,
          lora_alpha=3.0, lora_targets=["q_proj", "v_proj", "down_proj"])),
    ("qwen2-attn-mlp-mask-tied", "qwen2", "f32", True,
     dict(gates=["attention", "mlp"], router_hidden=8, budget_features=0, kv="mask")),
    ("qwen3-attn-linear-compute-f16", "qwen3", "f16", False,
     dict(gates=["attention"], router_hidden=0, budget_features=2, kv="compute")),
    ("llama-heads", "llama", "f32", False, dict(gates=["heads"], router_hidden=16, budget_features=1)),
]
L2A_IDS = [3, 17, 200, 5, 99, 42, 7, 128, 61]


def strip_l2a(W, cfg):
    """The base model of a prepared L2A checkpoint: no l2a block, no router tensors."""
    return ({n: t for n, t in W.items() if ".l2a_router." not in n}, {k: v for k, v in cfg.items() if k != "l2a"})


def expect_error(ck, name, fn, needle=""):
    try:
        fn()
    except (SystemExit, ValueError) as e:
        msg = str(e)
        ok = (not isinstance(e, SystemExit) or e.code not in (0, None)) and needle.lower() in msg.lower()
        ck.true(f"rejects {name}", ok, msg[:110])
        return
    ck.true(f"rejects {name}", False, "(no error)")


def selftest_l2a(work, ck):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        l2a_checks(work, ck)
    finally:
        torch.set_num_threads(threads)


def l2a_checks(work, ck):
    """L2A gate checkpoints: reference.py against np_l2a_dense, forced routers against the
    base model and the embedding-only model, incremental / chunked against full, the CLI."""
    ids = torch.tensor(L2A_IDS)
    S, budgets = len(L2A_IDS), (0.0, 0.2, 0.5, 1.0)
    for n, (tag, family, dtype, tied, opts) in enumerate(L2A_CASES):
        print(f"== l2a {tag}")
        d = os.path.join(work, "l2a-" + tag)
        make(family, d, dtype, seed=40 + n, tied=tied, l2a=opts)
        W, cfg = ref.load_model(d)
        Wn = {k: t.double().numpy() for k, t in ref.load_checkpoint(d).items()}
        dec, fr = {}, []
        for b in budgets:
            out = ref.run(W, cfg, ids, budget=b)
            lg, z, ds = np_l2a_dense(Wn, cfg, L2A_IDS, b)
            ck.close(f"{tag} b={b} logits vs numpy f64", out["logits"], lg, 1e-4)
            ck.close(f"{tag} b={b} router logits vs numpy f64", out["l2a_router_logits"], z, 1e-5)
            ck.close(f"{tag} b={b} decisions vs numpy f64", out["l2a_decisions"], ds, 0)
            margin = float(np.abs(z).min())
            inc = ref.run(W, cfg, ids, budget=b, incremental=True)
            ch = ref.run(W, cfg, ids, budget=b, chunk=4)
            for mode, o in (("incremental", inc), ("chunk 4", ch)):
                ck.close(f"{tag} b={b} {mode} == full: logits", o["logits"], out["logits"], 1e-4)
                ck.true(f"{tag} b={b} {mode} == full: decisions",
                        torch.equal(o["l2a_decisions"], out["l2a_decisions"]))
            dec[b] = out["l2a_decisions"]
            fr.append(float(dec[b].mean()))
            print(f"     b={b}: {100 * fr[-1]:.0f}% on, min |z| {margin:.1e}")
        x = dec[0.2]
        ck.true(f"{tag}: decisions differ between b=0.2 and b=1.0", not torch.equal(dec[0.2], dec[1.0]),
                f"{int((dec[0.2] != dec[1.0]).sum())} of {dec[0.2].numel()} differ")
        ck.true(f"{tag}: decisions vary across tokens and layers",
                bool(((x.amax(1) - x.amin(1)) > 0).any()) and not torch.equal(x[0], x[1]))
        ck.true(f"{tag}: 20-80% of gates on over b in 0.2, 0.5, 1.0", 0.2 <= sum(fr[1:]) / 3 <= 0.8,
                f"{100 * sum(fr[1:]) / 3:.0f}%")
        if opts.get("kv") and "attention" in opts["gates"]:  # the KV rule matters on these inputs
            other = dict(cfg, l2a=dict(cfg["l2a"], skipped_attention_kv="compute" if opts["kv"] == "mask" else "mask"))
            gap = float((ref.run(W, other, ids, budget=0.5)["logits"] - ref.run(W, cfg, ids, budget=0.5)["logits"]).abs().max())
            ck.true(f"{tag}: mask and compute differ", gap > 1e-2, f"max |diff| {gap:.2f}")
        if opts.get("lora_rank"):
            lora_free = dict(cfg, l2a={k: v for k, v in cfg["l2a"].items() if k != "lora"})
            raw = {k: t for k, t in ref.load_checkpoint(d).items() if ".lora_" not in k}
            gap = float((ref.run(raw, lora_free, ids)["logits"] - ref.run(W, cfg, ids)["logits"]).abs().max())
            ck.true(f"{tag}: the LoRA merge changes the logits", gap > 1e-2, f"max |diff| {gap:.2f}")
        if n == 0:
            first = (d, W, cfg)
    print("   decisions of layer 0, b = 0.2 / 1.0 (rows tokens, columns attention mlp heads 0-3):")
    d, W, cfg = first
    lo, hi = ref.run(W, cfg, ids, budget=0.2)["l2a_decisions"][0], ref.run(W, cfg, ids, budget=1.0)["l2a_decisions"][0]
    for s in range(S):
        print("     ", "".join(str(int(v)) for v in lo[s].tolist()), " ", "".join(str(int(v)) for v in hi[s].tolist()))

    print("== l2a forced on / off")
    for n, (tag, family, dtype, opts) in enumerate([
            ("qwen3-compute-lora", "qwen3", "f32", dict(L2A_CASES[0][4])),
            ("llama-mask-linear-lora", "llama", "bf16", dict(L2A_CASES[1][4])),
            ("qwen2-mask-all", "qwen2", "f32", dict(gates=["mlp", "attention", "heads"], router_hidden=8,
                                                     budget_features=2, kv="mask"))]):
        for force in ("on", "off"):
            d = os.path.join(work, f"l2a-force-{force}-{tag}")
            make(family, d, dtype, seed=60 + n, l2a=dict(opts, force=force))
            W, cfg = ref.load_model(d)
            for b in (0.0, 1.0):
                out = ref.run(W, cfg, ids, budget=b)
                ck.true(f"{tag} force {force} b={b}: every decision {force}",
                        bool((out["l2a_decisions"] == (1.0 if force == "on" else 0.0)).all()))
                if force == "on":
                    Wb, cb = strip_l2a(W, cfg)
                    ck.close(f"{tag} force on b={b} == base model (LoRA merged)", out["logits"],
                             ref.run(Wb, cb, ids)["logits"], 1e-6)
                else:
                    eps = cfg["rms_norm_eps"]
                    want = ref.linear(ref.rms_norm(W["model.embed_tokens.weight"][ids], W["model.norm.weight"], eps),
                                      ref.lm_head_weight(W, "lm_head.weight", "model.embed_tokens.weight"))
                    ck.close(f"{tag} force off b={b} == lm_head(norm(embed(ids)))", out["logits"], want, 1e-6)
            inc = ref.run(W, cfg, ids, budget=0.5, incremental=True)
            ck.close(f"{tag} force {force}: incremental == full", inc["logits"], ref.run(W, cfg, ids, budget=0.5)["logits"],
                     1e-4)
    d = os.path.join(work, "l2a-force-off-heads")  # every head pruned: attention adds nothing, K/V still written
    make("qwen3", d, "f32", seed=70, l2a=dict(gates=["heads"], force="off"))
    W, cfg = ref.load_model(d)
    Wn = {k: t.double().numpy() for k, t in ref.load_checkpoint(d).items()}
    ck.close("heads forced off vs numpy f64", ref.run(W, cfg, ids)["logits"], np_l2a_dense(Wn, cfg, L2A_IDS, 1.0)[0], 1e-4)

    print("== l2a CLI and errors")
    d = os.path.join(work, "l2a-" + L2A_CASES[1][0])  # llama, mask, linear router, LoRA, bf16
    W, cfg = ref.load_model(d)
    L, G, V = cfg["num_hidden_layers"], len(ref.l2a_config(cfg)["outputs"]), cfg["vocab_size"]
    od = os.path.join(work, "out-l2a")
    py, refpy = sys.executable, os.path.join(HERE, "reference.py")
    subprocess.run([py, refpy, "--model", d, "--ids", ",".join(map(str, L2A_IDS)), "--budget", "0.5",
                    "--out-dir", od], check=True)
    meta = json.load(open(os.path.join(od, "meta.json")))
    want = ref.run(W, cfg, ids, budget=0.5)
    ck.true("l2a cli meta", meta["files"] == {"logits.f32": [S, V], "l2a_router_logits.f32": [L, S, G],
                                              "l2a_decisions.f32": [L, S, G]} and meta["budget"] == 0.5
            and meta["l2a_gates"] == ["attention", "mlp", "heads"]
            and meta["l2a_outputs"] == ["attention", "mlp", "head.0", "head.1", "head.2", "head.3"]
            and meta["l2a"]["skipped_attention_kv"] == "mask", str(meta["files"]))
    for name, key, shape in (("logits.f32", "logits", (S, V)), ("l2a_router_logits.f32", "l2a_router_logits", (L, S, G)),
                             ("l2a_decisions.f32", "l2a_decisions", (L, S, G))):
        ck.close(f"l2a cli {name}", read_f32(os.path.join(od, name), shape), want[key], 0)
    for mode in (["--incremental"], ["--chunk", "4"]):
        od2 = os.path.join(work, "out-l2a" + mode[0])
        ref.main(["--model", d, "--ids", ",".join(map(str, L2A_IDS)), "--budget", "0.5", "--out-dir", od2] + mode)
        ck.close(f"l2a cli {mode[0]} logits", read_f32(os.path.join(od2, "logits.f32"), (S, V)), want["logits"], 1e-4)
        ck.close(f"l2a cli {mode[0]} decisions", read_f32(os.path.join(od2, "l2a_decisions.f32"), (L, S, G)),
                 want["l2a_decisions"], 0)
    od3 = os.path.join(work, "out-l2a-default")
    ref.main(["--model", d, "--ids", "1,2,3", "--out-dir", od3])
    ck.true("l2a cli default budget 1", json.load(open(os.path.join(od3, "meta.json")))["budget"] == 1.0)
    od4 = os.path.join(work, "out-l2a-ppl")
    ref.main(["--model", d, "--ids", ",".join(map(str, L2A_IDS)), "--perplexity", "--budget", "0.2",
              "--context", "16", "--out-dir", od4])
    full = torch.log_softmax(ref.run(W, cfg, ids, budget=0.2)["logits"].double(), -1)
    nll = np.array([-full[i, L2A_IDS[i + 1]].item() for i in range(S - 1)])
    pj = json.load(open(os.path.join(od4, "perplexity.json")))
    ck.close("l2a --perplexity --budget 0.2 nll == full forward's", read_f32(os.path.join(od4, "nll.f32"), (S - 1,)),
             nll, 1e-4)
    ck.true("l2a perplexity.json budget / l2a", pj["budget"] == 0.2 and pj["l2a_gates"] == ["attention", "mlp", "heads"])
    ids_arg = ["--ids", "1,2,3", "--out-dir", os.path.join(work, "bad")]
    expect_error(ck, "--budget 1.5", lambda: ref.main(["--model", d, "--budget", "1.5"] + ids_arg), "outside [0, 1]")
    expect_error(ck, "--budget -0.1 (--perplexity)",
                 lambda: ref.main(["--model", d, "--budget", "-0.1", "--perplexity"] + ids_arg), "outside [0, 1]")
    plain = os.path.join(work, "l2a-none-qwen2")
    make("qwen2", plain, "f32", seed=9)
    expect_error(ck, "--budget on a checkpoint without l2a", lambda: ref.main(["--model", plain, "--budget", "0.5"] + ids_arg),
                 "no l2a block")
    expect_error(ck, "--budget on a checkpoint without l2a (--perplexity)",
                 lambda: ref.main(["--model", plain, "--budget", "0.5", "--perplexity"] + ids_arg), "no l2a block")
    expect_error(ck, "make_tiny --l2a-gates for ouro",
                 lambda: main(["--family", "ouro", "--out", os.path.join(work, "bad-ouro"), "--l2a-gates", "mlp"]),
                 "llama, qwen2, qwen3")
    expect_error(ck, "make_tiny --l2a-* without --l2a-gates",
                 lambda: main(["--family", "llama", "--out", os.path.join(work, "bad-l"), "--l2a-kv", "mask"]),
                 "--l2a-gates")
    expect_error(ck, "make_tiny --l2a-gates with a bad name",
                 lambda: main(["--family", "llama", "--out", os.path.join(work, "bad-l"), "--l2a-gates", "attention,ffn"]),
                 "subset")
    cfg_o, T_o = make_model("ouro", 3)
    save_checkpoint(os.path.join(work, "bad-ouro-l2a"), dict(cfg_o, l2a=cfg["l2a"]), T_o, "f32")
    expect_error(ck, "an l2a block on ouro", lambda: ref.main(["--model", os.path.join(work, "bad-ouro-l2a")] + ids_arg),
                 "model_type")
    raw = ref.load_checkpoint(d)
    bad_cfgs = (("gates []", dict(cfg["l2a"], gates=[])), ("version 2", dict(cfg["l2a"], version=2)),
                ("gates with duplicates", dict(cfg["l2a"], gates=["mlp", "mlp"])),
                ("attention gated without skipped_attention_kv",
                 {k: v for k, v in cfg["l2a"].items() if k != "skipped_attention_kv"}),
                ("budget_features 65", dict(cfg["l2a"], budget_features=65)),
                ("lora rank 0", dict(cfg["l2a"], lora=dict(cfg["l2a"]["lora"], rank=0))),
                ("lora target qkv_proj", dict(cfg["l2a"], lora=dict(cfg["l2a"]["lora"], targets=["qkv_proj"]))))
    for why, block in bad_cfgs:
        expect_error(ck, f"config {why}", lambda: ref.l2a_prepare(raw, dict(cfg, l2a=block)))
    p0 = "model.layers.0."
    bad_tensors = (("a missing router tensor", "missing tensor model.layers.1.l2a_router.fc.bias",
                    {k: t for k, t in raw.items() if k != "model.layers.1.l2a_router.fc.bias"}),
                   ("a misshapen lora_B", "expected shape [64, 2], found [64, 3]",
                    dict(raw, **{p0 + "self_attn.q_proj.lora_B.weight": torch.zeros(64, 3)})),
                   ("a misshapen router", "expected shape [6, 71], found [6, 70]",
                    dict(raw, **{p0 + "l2a_router.fc.weight": torch.zeros(6, 70)})),
                   ("an extra LoRA target", "unexpected tensor",
                    dict(raw, **{p0 + "self_attn.k_proj.lora_A.weight": torch.zeros(2, 64)})),
                   ("fc1 tensors for a linear router", "unexpected tensor",
                    dict(raw, **{p0 + "l2a_router.fc1.weight": torch.zeros(4, 71)})))
    for why, needle, Wbad in bad_tensors:
        expect_error(ck, why, lambda: ref.l2a_prepare(Wbad, cfg), needle)
    expect_error(ck, "router tensors without an l2a block",
                 lambda: ref.l2a_prepare(raw, {k: v for k, v in cfg.items() if k != "l2a"}), "no l2a block")
    d2 = os.path.join(work, "l2a-cli-made")
    main(["--family", "qwen2", "--out", d2, "--dtype", "bf16", "--l2a-gates", "heads,attention", "--l2a-router-hidden",
          "0", "--l2a-kv", "mask", "--l2a-lora-rank", "3", "--l2a-lora-targets", "o_proj,up_proj", "--l2a-force", "on"])
    cfg2 = ref.load_config(d2)
    T2 = ref.load_checkpoint(d2)
    ck.true("make_tiny CLI: l2a block", cfg2["l2a"] == {
        "version": 1, "gates": ["heads", "attention"], "router_hidden": 0, "budget_features": 2,
        "skipped_attention_kv": "mask", "lora": {"rank": 3, "alpha": 6.0, "targets": ["o_proj", "up_proj"]}},
        json.dumps(cfg2["l2a"]))
    ck.true("make_tiny CLI: tensor names and shapes",
            T2[p0 + "l2a_router.fc.weight"].shape == (5, 69) and T2[p0 + "l2a_router.fc.bias"].shape == (5,)
            and T2[p0 + "self_attn.o_proj.lora_A.weight"].shape == (3, 64)
            and T2[p0 + "mlp.up_proj.lora_B.weight"].shape == (96, 3)
            and bool((T2[p0 + "mlp.up_proj.lora_B.weight"] != 0).all()) and bool((T2[p0 + "l2a_router.fc.bias"] == 30).all()))
    base_T = make_model("qwen2", 0)[1]
    ck.true("make_tiny CLI: base tensors unchanged by --l2a-*",
            all(torch.equal(T2[k], base_T[k].to(torch.bfloat16).float()) for k in base_T))


# ----------------------------------------------------------------------------------------
# Layout self-test (--selftest-layouts): teacher-forced decode under KV layouts with
# scripted exit depths (reference.run_layout / --decode-ids).
# ----------------------------------------------------------------------------------------


class NpLayoutDecode:
    """Independent float64 formulation of reference.run_layout.  Instead of slots it keeps
    every K/V a token ever produced, kv[(layer, t, step)], and states the layout rules as
    WHICH STEP of an earlier, finished token t (exit depth e_t; prompt tokens e_t = R) a core
    query at step r reads (None = masked):
        depth-indexed       r if e_t > r else None
        last-exited         min(r, e_t - 1)
        shared              e_t - 1                      (its last state)
        first-then-shared   r < S-1: as depth-indexed;  r >= S-1: e_t - 1 if e_t >= S else None
        hybrid              prompt t: r;  decode t: e_t - 1
    Tokens of the current call (the one-chunk prefill, or the decode token itself) are read
    at step r under every layout.  Prelude / coda K/V: one per token, read causally."""

    def __init__(self, Wn, cfg, family, R, layout, shared_after, n_prompt):
        self.W, self.cfg, self.family, self.R = Wn, cfg, family, R
        self.layout, self.S, self.n_prompt = layout, shared_after, n_prompt
        self.kv, self.exit = {}, {}

    def step_read(self, t, r):
        e, S, lay = self.exit[t], self.S, self.layout
        if lay == "depth-indexed":
            return r if e > r else None
        if lay == "last-exited":
            return min(r, e - 1)
        if lay == "shared":
            return e - 1
        if lay == "first-then-shared":
            if r < S - 1:
                return r if e > r else None
            return e - 1 if e >= S else None
        return r if t < self.n_prompt else e - 1  # hybrid

    def attention(self, layer, qs, ks, vs, positions, r):
        """qs[s][h], ks[s][g], vs[s][g]: per-token per-head vectors of this call.
        r: core step, or None for prelude / coda layers."""
        for s, t in enumerate(positions):
            self.kv[(layer, t, r)] = (ks[s], vs[s])
        H, Hkv, D = len(qs[0]), len(ks[0]), qs[0][0].shape[0]
        out = np.zeros((len(positions), H * D))
        for s, pos in enumerate(positions):
            keys = []
            for t in range(pos + 1):
                if t in positions or r is None:
                    step = r
                else:
                    step = self.step_read(t, r)
                    if step is None:
                        continue
                keys.append(self.kv[(layer, t, step)])
            for h in range(H):
                g = h // (H // Hkv)
                sc = np.array([q @ k[g] for q, k in [(qs[s][h], kk) for kk, _ in keys]]) / math.sqrt(D)
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                out[s, h * D:(h + 1) * D] = sum(pr[n] * keys[n][1][g] for n in range(len(keys)))
        return out

    # ---- Ouro
    def ouro_attn(self, p, xn, positions, r):
        W, cfg = self.W, self.cfg
        E, H, Hkv, D = ref.dense_dims(cfg)
        q, k, v = (xn @ W[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        qs = [[np_rope_half(q[s, h * D:(h + 1) * D], t, cfg["rope_theta"]) for h in range(H)]
              for s, t in enumerate(positions)]
        ks = [[np_rope_half(k[s, h * D:(h + 1) * D], t, cfg["rope_theta"]) for h in range(Hkv)]
              for s, t in enumerate(positions)]
        vs = [[v[s, h * D:(h + 1) * D] for h in range(Hkv)] for s in range(len(positions))]
        return self.attention(p, qs, ks, vs, positions, r) @ W[p + "self_attn.o_proj.weight"].T

    def ouro_call(self, ids, positions, steps):
        W, eps = self.W, self.cfg["rms_norm_eps"]
        x = W["model.embed_tokens.weight"][ids]
        lam = []
        for r in range(steps):
            for i in range(self.cfg["num_hidden_layers"]):
                p = f"model.layers.{i}."
                x = x + np_rms(self.ouro_attn(p, np_rms(x, W[p + "input_layernorm.weight"], eps), positions, r),
                               W[p + "input_layernorm_2.weight"], eps)
                x = x + np_rms(np_dense_mlp(W, p, np_rms(x, W[p + "post_attention_layernorm.weight"], eps)),
                               W[p + "post_attention_layernorm_2.weight"], eps)
            x = np_rms(x, W["model.norm.weight"], eps)
            z = x @ W["model.early_exit_gate.weight"][0] + W["model.early_exit_gate.bias"][0]
            lam.append(1.0 / (1.0 + np.exp(-z)))
        return np_head(W, x, "model.embed_tokens.weight"), np.array(lam)

    # ---- Huginn
    def huginn_block(self, p, x, positions, r):
        W, cfg = self.W, self.cfg
        E, H, D = ref.huginn_dims(cfg)
        eps, theta = cfg["norm_eps"], cfg["rope_base"]
        hn = np_rms(x, W[p + "norm_1.weight"], eps)
        Wqkv, bias = W[p + "attn.Wqkv.weight"], W[p + "attn.qk_bias"]
        q, k, v = hn @ Wqkv[:E].T, hn @ Wqkv[E:2 * E].T, hn @ Wqkv[2 * E:].T
        qs = [[np_rope_complex(q[s, h * D:(h + 1) * D] + bias[0, 0, h], t, theta) for h in range(H)]
              for s, t in enumerate(positions)]
        ks = [[np_rope_complex(k[s, h * D:(h + 1) * D] + bias[1, 0, h], t, theta) for h in range(H)]
              for s, t in enumerate(positions)]
        vs = [[v[s, h * D:(h + 1) * D] for h in range(H)] for s in range(len(positions))]
        a = self.attention(p, qs, ks, vs, positions, r) @ W[p + "attn.proj.weight"].T
        x = np_rms(a + x, W[p + "norm_2.weight"], eps)
        fc = np_rms(x, W[p + "norm_3.weight"], eps) @ W[p + "mlp.fc.weight"].T
        I = fc.shape[-1] // 2
        return np_rms((np_silu(fc[:, :I]) * fc[:, I:]) @ W[p + "mlp.proj.weight"].T + x, W[p + "norm_4.weight"], eps)

    def huginn_call(self, ids, positions, steps):
        W, cfg = self.W, self.cfg
        E, eps = cfg["n_embd"], cfg["norm_eps"]
        e = W["transformer.wte.weight"][ids] * math.sqrt(E)
        for i in range(cfg["n_layers_in_prelude"]):
            e = self.huginn_block(f"transformer.prelude.{i}.", e, positions, None)
        x = np.zeros((len(ids), E))
        diffs = []
        for r in range(steps):
            xn = np.concatenate([x, e], -1) @ W["transformer.adapter.weight"].T
            for j in range(cfg["n_layers_in_recurrent_block"]):
                xn = self.huginn_block(f"transformer.core_block.{j}.", xn, positions, r)
            diffs.append(np.linalg.norm(xn - x, axis=-1) / np.linalg.norm(xn, axis=-1))
            x = xn
        y = np_rms(x, W["transformer.ln_f.weight"], eps)
        for i in range(cfg["n_layers_in_coda"]):
            y = self.huginn_block(f"transformer.coda.{i}.", y, positions, None)
        return np_head(W, np_rms(y, W["transformer.ln_f.weight"], eps), "transformer.wte.weight"), np.array(diffs)

    def run(self, prompt, decode, depths):
        call = self.ouro_call if self.family == "ouro" else self.huginn_call
        n = len(prompt)
        pre, _ = call(np.array(prompt), list(range(n)), self.R)
        for t in range(n):
            self.exit[t] = self.R
        dec, sig = [], np.zeros((len(decode), self.R))
        for i, (tok, e) in enumerate(zip(decode, depths)):
            lg, s = call(np.array([tok]), [n + i], e)
            self.exit[n + i] = e
            dec.append(lg[0])
            sig[i, :e] = s[:, 0]
        return pre, np.array(dec), sig


def selftest_layouts(work):
    """Checks of reference.run_layout and the --decode-ids CLI on tiny Ouro and Huginn models."""
    ck = Checker()
    py, refpy = sys.executable, os.path.join(HERE, "reference.py")
    prompt, decode = [3, 17, 200, 5, 99], [42, 7, 11, 250, 64]
    n_p, n_d = len(prompt), len(decode)
    P, D = torch.tensor(prompt), torch.tensor(decode)
    for family, R, early in (("ouro", 4, [4, 1, 3, 2, 4]), ("huginn", 5, [5, 2, 1, 4, 3])):
        print(f"== layouts: {family} R={R}")
        d = os.path.join(work, f"layouts-{family}")
        cfg, T = make(family, d, "f32", seed=11)
        W, cfg = ref.load_checkpoint(d), ref.load_config(d)
        Wn = {n: t.double().numpy() for n, t in T.items()}
        sig_name = "lambda" if family == "ouro" else "latent_diff"
        full = ref.run(W, cfg, torch.cat([P, D]), loops=R)  # plain full forward over prompt + decode
        plain = ref.run(W, cfg, P, loops=R)  # what logits.f32 holds for --ids prompt
        all_r, all_1, ones_then_r = [R] * n_d, [1] * n_d, [1] * (n_d - 1) + [R]

        def lay(layout, depths, S=1):
            return ref.run_layout(W, cfg, P, D, depths, loops=R, layout=layout, shared_after=S)

        # 1. every layout against the independent float64 formulation
        cases = [(l, 1) for l in ref.LAYOUTS if l != "first-then-shared"] + \
                [("first-then-shared", S) for S in sorted({1, 2, R - 1, R})]
        for layout, S in cases:
            for name, depths in (("all e=R", all_r), (f"e={early}", early), ("all e=1", all_1)):
                got = lay(layout, depths, S)
                npm = NpLayoutDecode(Wn, cfg, family, R, layout, S, n_p)
                pre, dec, sig = npm.run(prompt, decode, depths)
                tag = f"{family} {layout}{' S=%d' % S if layout == 'first-then-shared' else ''} {name}"
                ck.close(f"{tag}: decode logits vs numpy f64", got["decode_logits"], dec, 5e-5)
                ck.close(f"{tag}: decode signals vs numpy f64", got["decode_signals"], sig, 5e-5)
                ck.close(f"{tag}: prefill logits vs numpy f64", got["prefill_logits"], pre, 5e-5)
                ck.true(f"{tag}: prefill logits == plain logits.f32 (bitwise)",
                        torch.equal(got["prefill_logits"], plain["logits"]))

        # 2. relations between layouts and the full forward
        for layout in ("depth-indexed", "last-exited"):
            got = lay(layout, all_r)
            ck.close(f"{family} {layout} all e=R: decode logits == full forward rows", got["decode_logits"],
                     full["logits"][n_p:], 1e-5)
            ck.close(f"{family} {layout} all e=R: prefill logits == full forward rows", got["prefill_logits"],
                     full["logits"][:n_p], 1e-5)
            ck.close(f"{family} {layout} all e=R: decode signals == full forward per-step {sig_name}",
                     got["decode_signals"], full[sig_name][:, n_p:].t(), 1e-5)
        hy = lay("hybrid", all_r)
        ck.close(f"{family} hybrid all e=R: first decode token == full forward", hy["decode_logits"][:1],
                 full["logits"][n_p:n_p + 1], 1e-5)
        gap = float((hy["decode_logits"][1:] - full["logits"][n_p + 1:]).abs().amax(-1).min())
        ck.true(f"{family} hybrid all e=R: later decode tokens differ from full forward (read earlier "
                f"decode tokens' last state)", gap > 1e-3, f"min max-abs diff {gap:.3f}")
        for name, depths in (("all e=R", all_r), (f"e={early}", early)):
            di, ft = lay("depth-indexed", depths), lay("first-then-shared", depths, R)
            ck.close(f"{family} first-then-shared S=R == depth-indexed, {name}", ft["decode_logits"],
                     di["decode_logits"], 1e-6)
            ck.close(f"{family} first-then-shared S=R == depth-indexed signals, {name}", ft["decode_signals"],
                     di["decode_signals"], 1e-6)
            sh, f1 = lay("shared", depths), lay("first-then-shared", depths, 1)
            ck.close(f"{family} first-then-shared S=1 == shared, {name}", f1["decode_logits"], sh["decode_logits"], 1e-6)
        di, le = lay("depth-indexed", early), lay("last-exited", early)
        diff = (di["decode_logits"] - le["decode_logits"]).abs().amax(-1)
        ck.true(f"{family} e={early}: last-exited differs from depth-indexed", float(diff.max()) > 1e-3,
                f"per-token max-abs diff {diff.numpy().round(3).tolist()}")
        ck.close(f"{family} e={early}: first decode token same in both", le["decode_logits"][0],
                 di["decode_logits"][0], 1e-6)
        ck.true(f"{family} e={early}: decode signals zero beyond exit depth",
                all(float(di["decode_signals"][i, e:].abs().sum()) == 0 for i, e in enumerate(early)))
        ck.true(f"{family} e={early}: decode signals nonzero up to exit depth",
                all(bool((di["decode_signals"][i, :e] != 0).all()) for i, e in enumerate(early)))
        sh = lay("shared", all_r)
        gap = float((sh["decode_logits"] - full["logits"][n_p:]).abs().amax(-1).min())
        ck.true(f"{family} shared all e=R differs from full forward (decode reads prompt's last state)",
                gap > 1e-3, f"min max-abs diff {gap:.3f}")
        base = lay("depth-indexed", all_1)
        for layout in ("last-exited", "hybrid"):
            ck.close(f"{family} all e=1: {layout} == depth-indexed", lay(layout, all_1)["decode_logits"],
                     base["decode_logits"], 1e-6)
        ck.close(f"{family} e={ones_then_r}: hybrid == last-exited",
                 lay("hybrid", ones_then_r)["decode_logits"], lay("last-exited", ones_then_r)["decode_logits"], 1e-6)
        if family == "ouro":  # a token exiting at k whose predecessors all reached k = full forward's step k
            k = 2
            got = lay("depth-indexed", all_r[:-1] + [k])
            ck.close(f"ouro depth-indexed: last token exiting at {k} == full step_logits[{k - 1}]",
                     got["decode_logits"][-1], full["step_logits"][k - 1, -1], 1e-5)
        ps = [lay(l, early, 2)["prefill_logits"] for l in ref.LAYOUTS]
        ck.true(f"{family} prefill logits identical under every layout (one-chunk prefill)",
                all(torch.equal(x, ps[0]) for x in ps))

        # 3. the CLI
        V = cfg["vocab_size"]
        for layout, S in (("last-exited", None), ("first-then-shared", 2), ("depth-indexed", None)):
            od = os.path.join(work, f"out-layout-{family}-{layout}")
            cmd = [py, refpy, "--model", d, "--ids", ",".join(map(str, prompt)), "--loops", str(R),
                   "--decode-ids", ",".join(map(str, decode)), "--exit-depths", ",".join(map(str, early)),
                   "--layout", layout, "--out-dir", od]
            if S is not None:
                cmd += ["--shared-after", str(S)]
            subprocess.run(cmd, check=True)
            meta = json.load(open(os.path.join(od, "meta.json")))
            files = meta["files"]
            ck.true(f"{family} cli {layout}: meta shapes",
                    files["prefill_logits.f32"] == [n_p, V] and files["decode_logits.f32"] == [n_d, V]
                    and files["decode_signals.f32"] == [n_d, R] and files["logits.f32"] == [n_p, V]
                    and meta["layout"] == layout and meta["exit_depths"] == early
                    and meta["decode_ids"] == decode and meta["shared_after"] == S, str(files))
            want = lay(layout, early, S or 1)
            ck.close(f"{family} cli {layout}: decode_logits.f32", read_f32(os.path.join(od, "decode_logits.f32"),
                                                                          (n_d, V)), want["decode_logits"], 0)
            ck.close(f"{family} cli {layout}: decode_signals.f32", read_f32(os.path.join(od, "decode_signals.f32"),
                                                                           (n_d, R)), want["decode_signals"], 0)
            ck.close(f"{family} cli {layout}: logits.f32 unchanged", read_f32(os.path.join(od, "logits.f32"),
                                                                             (n_p, V)), plain["logits"], 0)
            ck.close(f"{family} cli {layout}: prefill_logits.f32 == logits.f32",
                     read_f32(os.path.join(od, "prefill_logits.f32"), (n_p, V)), plain["logits"], 0)
        base = [py, refpy, "--model", d, "--ids", "1,2", "--loops", str(R), "--out-dir", os.path.join(work, "bad")]
        for bad, why in ((["--decode-ids", "3,4", "--exit-depths", "1,0"], "exit depth 0"),
                         (["--decode-ids", "3,4", "--exit-depths", f"1,{R + 1}"], "exit depth > R"),
                         (["--decode-ids", "3,4", "--exit-depths", "1"], "count mismatch"),
                         (["--layout", "shared"], "--layout without --decode-ids"),
                         (["--decode-ids", "3", "--layout", "shared", "--shared-after", "2"], "--shared-after not FTS"),
                         (["--decode-ids", "3", "--layout", "first-then-shared", "--shared-after", str(R + 1)],
                          "--shared-after > R")):
            r = subprocess.run(base + bad, capture_output=True, text=True)
            ck.true(f"{family} cli rejects {why}", r.returncode != 0, r.stderr.strip().splitlines()[-1][:90]
                    if r.stderr.strip() else "")
        if family == "huginn":
            np.zeros((2, cfg["n_embd"]), dtype="<f4").tofile(os.path.join(work, "x0-2.f32"))
            r = subprocess.run(base + ["--decode-ids", "3", "--init-state-file", os.path.join(work, "x0-2.f32")],
                               capture_output=True, text=True)
            ck.true("huginn cli rejects --init-state-file with --decode-ids", r.returncode != 0)

    print("== layouts: dense (layout and depths ignored)")
    d = os.path.join(work, "layouts-qwen2")
    make("qwen2", d, "f32", seed=12)
    W, cfg = ref.load_checkpoint(d), ref.load_config(d)
    od = os.path.join(work, "out-layout-qwen2")
    subprocess.run([py, refpy, "--model", d, "--ids", ",".join(map(str, prompt)), "--decode-ids",
                    ",".join(map(str, decode)), "--exit-depths", "1,1,1,1,1", "--layout", "shared", "--out-dir", od],
                   check=True)
    meta = json.load(open(os.path.join(od, "meta.json")))
    ck.true("dense cli meta", set(meta["files"]) == {"logits.f32", "prefill_logits.f32", "decode_logits.f32"},
            str(meta["files"]))
    full = ref.run(W, cfg, torch.cat([P, D]))
    ck.close("dense decode_logits == full forward rows", read_f32(os.path.join(od, "decode_logits.f32"), (n_d, 256)),
             full["logits"][n_p:], 1e-5)

    print(f"\n{ck.count - len(ck.failures)}/{ck.count} layout checks passed")
    if ck.failures:
        print("FAILED:", ck.failures)
        return 1
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=["llama", "qwen2", "qwen3", "ouro", "huginn", "lckv"])
    ap.add_argument("--out")
    ap.add_argument("--dtype", default="f32", choices=list(_DT))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tied", action="store_true", help="tied embeddings: no lm_head.weight tensor")
    ap.add_argument("--shards", type=int, default=1, help="write N shards + model.safetensors.index.json")
    l2a = ap.add_argument_group("L2A gate checkpoint (docs/L2A_FORMAT.md; llama, qwen2, qwen3)")
    l2a.add_argument("--l2a-gates", default=None,
                     help="comma-separated non-empty subset of attention,mlp,heads: makes an L2A gate checkpoint")
    l2a.add_argument("--l2a-router-hidden", type=int, default=None, help="router hidden width R (default 16; 0: linear)")
    l2a.add_argument("--l2a-budget-features", type=int, default=None, help="K, phi(b) has 2K+1 entries (default 2)")
    l2a.add_argument("--l2a-kv", default=None, choices=list(ref.L2A_KV),
                     help="skipped_attention_kv (default compute; written only when attention is gated)")
    l2a.add_argument("--l2a-lora-rank", type=int, default=None, help="LoRA rank r (default: no LoRA)")
    l2a.add_argument("--l2a-lora-alpha", type=float, default=None, help="LoRA alpha (default 2r)")
    l2a.add_argument("--l2a-lora-targets", default=None, help="comma-separated LoRA targets (default q_proj,v_proj)")
    l2a.add_argument("--l2a-lora-budget-ramp", default=None, metavar="B_FULL,B_OFF",
                     help="lora.budget_ramp: the LoRA's share falls from 1 at B_FULL to 0 at B_OFF")
    l2a.add_argument("--l2a-force", default=None, choices=["on", "off", "none"],
                     help="on / off: router final bias +30 / -30, every gate on / off; none (default): random")
    ap.add_argument("--selftest", action="store_true", help="all checks (ends with the layout checks)")
    ap.add_argument("--selftest-layouts", action="store_true",
                    help="only the KV-layout / scripted-exit decode checks (--decode-ids)")
    ap.add_argument("--selftest-l2a", action="store_true", help="only the L2A gate checkpoint checks")
    ap.add_argument("--work", default=None, help="selftest scratch directory (default: a temp dir, removed)")
    a = ap.parse_args(argv)
    if a.selftest or a.selftest_layouts or a.selftest_l2a:
        work = a.work or tempfile.mkdtemp(prefix="fathom-ref-")
        try:
            if a.selftest_l2a and not a.selftest:
                ck = Checker()
                selftest_l2a(work, ck)
                print(f"\n{ck.count - len(ck.failures)}/{ck.count} l2a checks passed")
                if ck.failures:
                    print("FAILED:", ck.failures)
                return 1 if ck.failures else 0
            rc = selftest(work) if a.selftest else 0
            return selftest_layouts(work) or rc
        finally:
            if a.work is None:
                shutil.rmtree(work, ignore_errors=True)
    if not a.family or not a.out:
        ap.error("--family and --out are required (or --selftest)")
    opts = None
    given = [f"--l2a-{n.replace('_', '-')}" for n in ("router_hidden", "budget_features", "kv", "lora_rank", "lora_alpha",
                                                     "lora_targets", "lora_budget_ramp", "force") if getattr(a, "l2a_" + n) is not None]
    if a.l2a_gates is None:
        if given:
            raise SystemExit(f"make_tiny.py: {given[0]} needs --l2a-gates")
    else:
        if a.family not in L2A_DENSE:
            raise SystemExit(f"make_tiny.py: --l2a-gates: L2A gate checkpoints are llama, qwen2, qwen3 only, "
                             f"not {a.family}")
        if a.l2a_lora_rank is None and (a.l2a_lora_alpha is not None or a.l2a_lora_targets is not None
                                        or a.l2a_lora_budget_ramp is not None):
            raise SystemExit("make_tiny.py: --l2a-lora-alpha / --l2a-lora-targets / --l2a-lora-budget-ramp need "
                             "--l2a-lora-rank")
        if a.l2a_lora_rank is not None and a.l2a_lora_rank < 1:
            raise SystemExit("make_tiny.py: --l2a-lora-rank must be >= 1")
        split = lambda v: [x.strip() for x in v.split(",") if x.strip()]  # noqa: E731
        opts = dict(gates=split(a.l2a_gates),
                    router_hidden=16 if a.l2a_router_hidden is None else a.l2a_router_hidden,
                    budget_features=2 if a.l2a_budget_features is None else a.l2a_budget_features,
                    kv=a.l2a_kv or "compute", lora_rank=a.l2a_lora_rank or 0, lora_alpha=a.l2a_lora_alpha,
                    lora_targets=split(a.l2a_lora_targets or "q_proj,v_proj"), force=a.l2a_force or "none",
                    lora_ramp=[float(v) for v in split(a.l2a_lora_budget_ramp)] if a.l2a_lora_budget_ramp else None)
    make(a.family, a.out, a.dtype, a.seed, a.tied, a.shards, l2a=opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
