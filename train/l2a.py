#!/usr/bin/python3
"""L2A gates (issue 18, part 3): budget-conditioned per-token layer and head gates + LoRA on a
frozen dense llama, trained on CPU; writes the gate checkpoint format of docs/L2A_FORMAT.md.

    /usr/bin/python3 train/l2a.py --base /tmp/fathom-train/dense4x-brown/hf \
        --run-dir /tmp/fathom-train/l2a-dense4x [--steps N] [--stop-after-minutes M]
    /usr/bin/python3 train/l2a.py --base BASE --run-dir RUN --eval [--plot-out docs/img/quality_l2a.png]
    /usr/bin/python3 train/l2a.py --base BASE --run-dir RUN --text-file F --steps 3 ...   # CI (test_recipes.py)

Model (the format's semantics exactly, so fathom and tests/reference/reference.py run the export
identically).  Per layer i, with x the residual stream entering it and h = RMSNorm(x,
input_layernorm):
    u = [h ; phi(b)],  phi(b) = [b, sin(pi k b), cos(pi k b) for k = 1..K]  (K = --budget-features)
    z = fc2(silu(fc1(u)))  (router_hidden R > 0; R = 0: z = fc(u));  z = [z_attn, z_mlp, z_head[0..H-1]]
    gate on  <=>  z > 0
    x += [attn on] * o_proj(attention(q, k, v) (x) head_keep)      K/V of every token (policy "compute")
    x += [mlp on]  * mlp(RMSNorm(x, post_attention_layernorm))
LoRA (rank r, alpha; --lora-targets, default q_proj v_proj o_proj down_proj) adds
(alpha / r) B A x to those base projections of every layer; exported as separate
lora_A / lora_B tensors (fathom merges them at load).  The base tensors are never changed.
--lora-budget-ramp B_FULL,B_OFF scales a row's LoRA by s(b) (1 at b <= B_FULL, 0 at b >= B_OFF,
linear between; lora.budget_ramp in the export), so that at b = 1 the model is the dense base
with every gate it keeps on; fathom then keeps the LoRA apart and adds each token's share.

Gates in training: hard in the forward (the decisions above, exactly), straight-through in the
backward: g = 1[z > 0] + (s - s.detach()), s = sigmoid(z), so the forward value is exactly 0 or 1
and the gradient is that of sigmoid(z).

Compute C (per token, a fraction of the layers' flops; the LM head and embedding are not
counted): per layer, attention = q/k/v projections 2E(H+2Hkv)D + scores and values 4 H D t
(t = the mean context of a training window, (T+1)/2) + o_proj 2 H D E; MLP = 6 E I.  A token
pays, per layer, [attn on] (qkv + (scores + o_proj) * heads kept / H) + [mlp on] MLP.
C(b) is the mean over a sequence's tokens, divided by L (attention + MLP).  B(b) = b.
(`C_kv` in the eval also charges q/k/v for tokens that skip attention, as the "compute" KV
policy runs them in fathom; `router` is the routers' own cost, 2R(E+F) + 2GR per layer.)

Loss (the paper's L(b) = CE + gamma KD + lambda (C(b) - B(b)) + lambda_T R_tok):
    CE of the gated model + gamma * KL(p_teacher || p_student) (teacher: the frozen dense base,
    every gate on, no LoRA) + lambda * mean over rows |C_row - b_row| (an exact L1 penalty:
    two-sided, so compute tracks the budget from below and above, and with lambda above the
    marginal CE value of compute the optimum is C = B; --penalty l2 or hinge for the others).
    lambda_T = 0: R_tok is the paper's reasoning-token length term, which has no meaning for
    LM training on text.
b is sampled per row (each of a batch's sequences its own b, b_min + (1 - b_min) u^P with u
uniform and P = --b-power, 1 by default; seeded by the step, so a resumed run sees the same b's).
--anchor mu adds mu times a logistic loss pulling every attention / MLP gate toward the static
path's decision at the row's b (the warm start's): the routers then leave the static order only
where CE + KD gain more than the anchor costs (a trust region around static pruning; the paper has
no such term).

Run directory: state.pt (resumable: routers, LoRA, optimizer, step; every --ckpt-minutes and at
the end; SIGTERM checkpoints and exits; re-run the same command to resume), hf/ (the gate
checkpoint, --export-dtype, with the base's tokenizer files), log.csv, eval.csv (held-out CE at
b = 0.3, 0.6, 1 at every checkpoint), curve.png, train_ids.npy.

--eval: held-out perplexity (the Brown held-out text, encoded whole as docs/QUALITY.md does;
its first --eval-tokens tokens in windows of 256) of RUN/hf at b = 0.1 .. 1.0, with the compute
actually run per token (attention, MLP, heads), beside static pruning (the same sub-layers
dropped for every token, chosen greedily on held-out loss of the --select-tokens tokens after
the eval prefix) at the same compute, and the dense base: RUN/eval/l2a_eval.json, .md, .png.
"""
import argparse
import csv
import json
import math
import os
import shutil
import signal
import sys
import time

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import checkpoint  # noqa: E402
import fastmm  # noqa: E402
import models  # noqa: E402
import train  # noqa: E402

ATTN_T = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_T = ("gate_proj", "up_proj", "down_proj")
GATE_ORDER = ("attention", "mlp", "heads")


def phi(b, K):
    """b: [N] -> [N, 2K+1] f32, computed in double and rounded (the format's φ)."""
    b = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    cols = [b]
    for k in range(1, K + 1):
        cols += [torch.sin(math.pi * k * b), torch.cos(math.pi * k * b)]
    return torch.stack(cols, -1).to(torch.float32)


class Router(nn.Module):
    def __init__(self, n_in, n_out, hidden):
        super().__init__()
        self.hidden = hidden
        if hidden > 0:
            self.fc1 = models.Linear(n_in, hidden, bias=True)
            self.fc2 = models.Linear(hidden, n_out, bias=True)
        else:
            self.fc = models.Linear(n_in, n_out, bias=True)

    def forward(self, u, exact=False):
        """exact: in double from the f32 values, as fathom (decisions identical batched or alone)."""
        if exact:
            u = u.double()
            if self.hidden > 0:
                z = F.linear(F.silu(F.linear(u, self.fc1.weight.double(), self.fc1.bias.double())),
                             self.fc2.weight.double(), self.fc2.bias.double())
            else:
                z = F.linear(u, self.fc.weight.double(), self.fc.bias.double())
            return z
        if self.hidden > 0:
            return self.fc2(F.silu(self.fc1(u)))
        return self.fc(u)


def lora_budget_scale(b, ramp):
    """s(b), the share of the LoRA a row at budget b runs with (docs/L2A_FORMAT.md): 1 without a
    ramp; with lora.budget_ramp = [b_full, b_off], 1 at b <= b_full, 0 at b >= b_off, linear
    between.  b: tensor [B]."""
    if ramp is None:
        return torch.ones_like(b)
    lo, hi = ramp
    return ((hi - b) / (hi - lo)).clamp(0.0, 1.0)


def layer_flops(cfg, T):
    """{qkv, core, o, mlp} flops per token of one layer; core at the mean context (T+1)/2."""
    E, H, Hkv, I = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    D = cfg.get("head_dim", E // H)
    t = (T + 1) / 2.0
    return {"qkv": 2.0 * E * (H + 2 * Hkv) * D, "core": 4.0 * H * D * t, "o": 2.0 * H * D * E, "mlp": 6.0 * E * I}


class L2A(nn.Module):
    """The frozen dense base (train/models.Dense, HF names) + routers + LoRA."""

    def __init__(self, cfg, l2a):
        super().__init__()
        self.config = {k: v for k, v in cfg.items() if k != "l2a"}
        self.l2a = l2a
        self.base = models.Dense(self.config)
        for p in self.base.parameters():
            p.requires_grad_(False)
        E, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
        self.H, self.L = H, L
        self.D = cfg.get("head_dim", E // H)
        self.gates = set(l2a["gates"])
        self.K = int(l2a["budget_features"])
        G = ("attention" in self.gates) + ("mlp" in self.gates) + (H if "heads" in self.gates else 0)
        self.G = G
        self.routers = nn.ModuleList(Router(E + 2 * self.K + 1, G, int(l2a["router_hidden"])) for _ in range(L))
        lora = l2a.get("lora")
        self.lora = nn.ParameterDict()
        self.lora_scale = 0.0
        self.lora_ramp = None  # (b_full, b_off): the LoRA's share falls from 1 to 0 between them
        if lora:
            self.lora_scale = float(lora["alpha"]) / int(lora["rank"])
            if lora.get("budget_ramp") is not None:
                self.lora_ramp = tuple(float(v) for v in lora["budget_ramp"])
            for i, layer in enumerate(self.base.model.layers):
                for t in lora["targets"]:
                    lin = getattr(layer.self_attn if t in ATTN_T else layer.mlp, t)
                    out_f, in_f = lin.weight.shape
                    self.lora[f"{i}_{t}_A"] = nn.Parameter(torch.zeros(int(lora["rank"]), in_f))
                    self.lora[f"{i}_{t}_B"] = nn.Parameter(torch.zeros(out_f, int(lora["rank"])))

    def init_static_order(self, taus, slope=10.0):
        """Warm start from static pruning: hidden unit 0 of every router reads only b
        (silu(slope * b), increasing), and the attention / MLP gate of layer i is on iff b > taus[(kind, i)]
        (z = silu(slope b) - silu(slope tau)); head gates start on.  So at step 0 the gated model is
        the static-pruning path (the sub-layers greedy pruning drops first are the first to go)."""
        E = self.config["hidden_size"]
        for i, r in enumerate(self.routers):
            if r.hidden < 1:
                raise ValueError("--init-from-static needs --router-hidden >= 1")
            r.fc1.weight.data[0].zero_()
            r.fc1.weight.data[0, E] = slope  # phi(b)[0] = b
            r.fc1.bias.data[0] = 0.0
            r.fc2.weight.data[:, 0] = 0.0
            k = 0
            for kind in ("attention", "mlp"):
                if kind in self.gates:
                    t = taus.get((kind, i), -1.0)
                    r.fc2.weight.data[k, 0] = 1.0
                    r.fc2.bias.data[k] = -float(F.silu(torch.tensor(slope * t, dtype=torch.float64)))
                    k += 1
            r.fc2.bias.data[k:] = 2.0

    def init_trainable(self, seed, bias=2.0, phi_std=1.0, taus=None):
        g = torch.Generator().manual_seed(seed)
        E = self.config["hidden_size"]
        for r in self.routers:
            lins = [r.fc1, r.fc2] if r.hidden > 0 else [r.fc]
            for lin in lins:
                fan_in = lin.weight.shape[1]
                lin.weight.data.copy_(torch.randn(lin.weight.shape, generator=g) / math.sqrt(fan_in))
                lin.bias.data.zero_()
            if r.hidden > 0 and phi_std is not None:  # the budget columns of fc1: a strong b signal from the start
                r.fc1.weight.data[:, E:] = torch.randn(r.fc1.weight.shape[0], r.fc1.weight.shape[1] - E, generator=g) * phi_std
            lins[-1].weight.data.mul_(0.1)
            lins[-1].bias.data.fill_(bias)  # every gate on at the start
        if taus is not None:
            self.init_static_order(taus)
        for k, p in self.lora.items():
            if k.endswith("_A"):  # PEFT: A random, B zero
                p.data.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                p.data.zero_()

    def trainable(self):
        return list(self.routers.parameters()) + list(self.lora.values())

    def proj(self, i, mod, name, x, lora_s):
        """The base projection plus, where lora_s is given ([B, 1, 1]: each row's s(b)), its LoRA."""
        y = getattr(mod, name)(x)
        key = f"{i}_{name}_A"
        if lora_s is not None and key in self.lora:
            d = fastmm.linear(fastmm.linear(x, self.lora[key]), self.lora[f"{i}_{name}_B"])
            y = y + self.lora_scale * (d if self.lora_ramp is None else lora_s * d)
        return y

    def forward(self, ids, b=None, teacher=False, exact=False, drop=frozenset(), need_gates=False, anchor_taus=None):
        """ids [B, T]; b: float or [B] (per row).  teacher: every gate on, no LoRA (the dense base);
        drop: {("attention", i), ("mlp", i)} sub-layers skipped for every token (static pruning,
        with teacher=True).  Returns logits, per-token compute c [B, T] (a fraction of the
        layers' flops, straight-through), and the gate decisions when need_gates.
        anchor_taus {(kind, i): tau}: also "anchor", the mean logistic loss softplus(-s z) of every
        attention / MLP gate against the static path's decision at the row's b (s = +1 if b > tau,
        else -1; a sub-layer the static path never drops has s = +1)."""
        cfg = self.config
        Bn, T = ids.shape
        cos, sin = models.rope_tables(T, self.D, cfg["rope_theta"])
        x = self.base.model.embed_tokens(ids)
        fl = layer_flops(cfg, T)
        tot = self.L * (fl["qkv"] + fl["core"] + fl["o"] + fl["mlp"])
        c = x.new_zeros(Bn, T)
        decisions = []
        anchor, n_anchor = x.new_zeros(()), 0
        lora_s = None  # each row's LoRA share s(b) [B, 1, 1]; None: no LoRA (the teacher)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        if not teacher:
            bt = torch.full((Bn,), float(b)) if not torch.is_tensor(b) else b.reshape(-1).float()
            if bt.numel() == 1:
                bt = bt.expand(Bn)
            ph = phi(bt, self.K)[:, None, :].expand(Bn, T, -1)
            lora_s = lora_budget_scale(bt, self.lora_ramp)[:, None, None]
        for i, layer in enumerate(self.base.model.layers):
            att = layer.self_attn
            h = layer.input_layernorm(x)
            g_attn = g_mlp = g_heads = None
            if not teacher:
                z = self.routers[i](torch.cat([h, ph], -1), exact=exact)
                hard = (z > 0).to(torch.float32)
                s = torch.sigmoid(z.float())
                g = hard + (s - s.detach())
                k = 0
                if "attention" in self.gates:
                    g_attn, k = g[..., k], k + 1
                if "mlp" in self.gates:
                    g_mlp, k = g[..., k], k + 1
                if "heads" in self.gates:
                    g_heads = g[..., k : k + self.H]
                if anchor_taus is not None:
                    k2 = 0
                    for kind in ("attention", "mlp"):
                        if kind in self.gates:
                            sign = (bt > anchor_taus.get((kind, i), -1.0)).float() * 2 - 1  # [B]
                            anchor = anchor + F.softplus(-sign[:, None] * z[..., k2].float()).mean()
                            n_anchor, k2 = n_anchor + 1, k2 + 1
                if need_gates:
                    decisions.append(hard.detach())
            if ("attention", i) in drop:
                g_attn = x.new_zeros(Bn, T)
            if ("mlp", i) in drop:
                g_mlp = x.new_zeros(Bn, T)
            # attention (K/V of every token: policy "compute")
            keep = g_heads.mean(-1) if g_heads is not None else 1.0
            a_on = g_attn if g_attn is not None else 1.0
            m_on = g_mlp if g_mlp is not None else 1.0
            c = c + (a_on * (fl["qkv"] + (fl["core"] + fl["o"]) * keep) + m_on * fl["mlp"]) / tot
            if not (("attention", i) in drop):
                q = models.rope_neox(self.proj(i, att, "q_proj", h, lora_s).view(Bn, T, self.H, self.D).transpose(1, 2), cos, sin)
                kk = models.rope_neox(self.proj(i, att, "k_proj", h, lora_s).view(Bn, T, att.Hkv, self.D).transpose(1, 2), cos, sin)
                v = self.proj(i, att, "v_proj", h, lora_s).view(Bn, T, att.Hkv, self.D).transpose(1, 2)
                rep = self.H // att.Hkv
                if rep > 1:
                    kk, v = kk.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
                scores = fastmm.matmul(q, kk.transpose(-1, -2)) / math.sqrt(self.D)
                probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
                y = fastmm.matmul(probs, v)  # [B, H, T, D]
                if g_heads is not None:
                    y = y * g_heads.transpose(1, 2)[..., None]
                y = y.transpose(1, 2).reshape(Bn, T, self.H * self.D)
                a = self.proj(i, att, "o_proj", y, lora_s)
                x = x + (a * g_attn[..., None] if g_attn is not None else a)
            if not (("mlp", i) in drop):
                h2 = layer.post_attention_layernorm(x)
                m = self.proj(i, layer.mlp, "down_proj", F.silu(self.proj(i, layer.mlp, "gate_proj", h2, lora_s))
                              * self.proj(i, layer.mlp, "up_proj", h2, lora_s), lora_s)
                x = x + (m * g_mlp[..., None] if g_mlp is not None else m)
        out = {"logits": self.base.lm_head(self.base.model.norm(x)), "compute": c}
        if anchor_taus is not None:
            out["anchor"] = anchor / max(n_anchor, 1)
        if need_gates and decisions:
            out["decisions"] = torch.stack(decisions, 2)  # [B, T, L, G]
        return out

    # ---- the checkpoint format -----------------------------------------------------------

    def tensors(self):
        out = dict(self.base.state_dict())
        for i, r in enumerate(self.routers):
            for n, p in r.state_dict().items():
                out[f"model.layers.{i}.l2a_router.{n}"] = p
        for k, p in self.lora.items():
            i, rest = k.split("_", 1)
            t, ab = rest.rsplit("_", 1)
            sub = "self_attn" if t in ATTN_T else "mlp"
            out[f"model.layers.{i}.{sub}.{t}.lora_{ab}.weight"] = p
        return out

    def export(self, out_dir, dtype, tok_src):
        os.makedirs(out_dir, exist_ok=True)
        cfg = dict(self.config)
        cfg["torch_dtype"] = {"bf16": "bfloat16", "f32": "float32"}[dtype]
        cfg["l2a"] = self.l2a
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        checkpoint.write_safetensors(os.path.join(out_dir, "model.safetensors"), self.tensors(), dtype)
        for n in ("tokenizer.json", "tokenizer_config.json"):
            if tok_src and os.path.exists(os.path.join(tok_src, n)) and os.path.abspath(tok_src) != os.path.abspath(out_dir):
                shutil.copy(os.path.join(tok_src, n), os.path.join(out_dir, n))


def l2a_block(a):
    blk = {"version": 1, "gates": list(a.gates), "router_hidden": a.router_hidden, "budget_features": a.budget_features}
    if "attention" in a.gates:
        blk["skipped_attention_kv"] = "compute"
    if a.lora_rank > 0:
        blk["lora"] = {"rank": a.lora_rank, "alpha": a.lora_alpha, "targets": list(a.lora_targets)}
        if a.lora_budget_ramp:
            blk["lora"]["budget_ramp"] = list(a.lora_budget_ramp)
    return blk


def load(model_dir):
    """(L2A model, config) from a gate checkpoint; checks every tensor's presence and shape."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if "l2a" not in cfg:
        raise ValueError(f"{model_dir}/config.json: no l2a block")
    model = L2A(cfg, cfg["l2a"])
    W = checkpoint.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    want = model.tensors()
    missing, extra = sorted(set(want) - set(W)), sorted(set(W) - set(want))
    if missing or extra:
        raise ValueError(f"{model_dir}/model.safetensors: missing {missing[:5]}, unexpected {extra[:5]}")
    for k, t in want.items():
        if tuple(W[k].shape) != tuple(t.shape):
            raise ValueError(f"{model_dir}/model.safetensors: {k} has shape {list(W[k].shape)}, expected {list(t.shape)}")
        with torch.no_grad():
            t.copy_(W[k])
    return model, cfg


def load_base(base_dir, l2a):
    """A fresh L2A model on the dense base checkpoint (its tensors loaded, routers / LoRA uninitialised)."""
    base, cfg = checkpoint.load(base_dir)
    if cfg["model_type"] != "llama":
        raise ValueError(f"{base_dir}/config.json: model_type {cfg['model_type']!r}; train/l2a.py trains on llama")
    model = L2A(cfg, l2a)
    model.base.load_state_dict(base.state_dict())
    return model, cfg

# ---- data ---------------------------------------------------------------------------------------


def heldout_text(text_file):
    if text_file:
        return "\n\n".join(train.load_docs(text_file)[1]) + "\n"
    import data
    return "\n\n".join(data.split()[1]) + "\n"


def windows(ids, T, start, n_tokens):
    seg = ids[start : start + n_tokens]
    return [seg[s : s + T] for s in range(0, len(seg) - 1, T) if len(seg[s : s + T]) >= 2]


@torch.no_grad()
def nll(model, wins, batch=8, **kw):
    """(sum NLL, predictions, stats) over windows (each its own sequence; token 0 only context)."""
    tot, n = 0.0, 0
    st = {"compute": 0.0, "tokens": 0, "dec": None}
    for s in range(0, len(wins), batch):
        x = torch.tensor(wins[s : s + batch], dtype=torch.long)
        out = model(x[:, :-1], **kw)
        lg = out["logits"]
        tot += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
        n += x[:, 1:].numel()
        st["compute"] += out["compute"].sum().item()
        st["tokens"] += out["compute"].numel()
        if "decisions" in out:
            d = out["decisions"].reshape(-1, *out["decisions"].shape[2:]).double().sum(0)  # [L, G]
            st["dec"] = d if st["dec"] is None else st["dec"] + d
            # heads kept among attention-running tokens
            if "attention" in model.gates and "heads" in model.gates:
                D = out["decisions"]
                h0 = 1 + ("mlp" in model.gates)
                hk = (D[..., h0:] * D[..., :1]).sum().item()
                st["heads_on_attn"] = st.get("heads_on_attn", 0.0) + hk
    return tot, n, st

# ---- training -----------------------------------------------------------------------------------


def lr_at(step, total, lr, warmup, min_frac=0.1):
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


append_csv = train.append_csv


def plot_curve(run_dir):
    got = train.plot_rows(os.path.join(run_dir, "log.csv"))
    if got is None:
        return
    plt, rows = got
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    st = [int(r["step"]) for r in rows]
    for k in ("ce", "kd", "loss"):
        a1.plot(st, [float(r[k]) for r in rows], label=f"train {k}", linewidth=0.8)
    ep = os.path.join(run_dir, "eval.csv")
    if os.path.exists(ep):
        with open(ep) as f:
            ev = list(csv.DictReader(f))
        for k in [k for k in (ev[0] if ev else {}) if k.startswith("heldout_ce")]:
            a1.plot([int(r["step"]) for r in ev], [float(r[k]) for r in ev], "o-", label=k, markersize=3)
    a1.set_xlabel("step")
    a1.set_ylabel("nats/token")
    a1.grid(alpha=0.3)
    a1.legend(fontsize=7)
    a2.plot(st, [float(r["abs_c_minus_b"]) for r in rows], label="mean |C - b| (per row)", linewidth=0.8)
    a2.plot(st, [float(r["compute"]) for r in rows], label="C (batch mean)", linewidth=0.8)
    a2.plot(st, [float(r["b_mean"]) for r in rows], label="b (batch mean)", linewidth=0.8)
    a2.set_xlabel("step")
    a2.grid(alpha=0.3)
    a2.legend(fontsize=7)
    fig.suptitle(f"L2A gates: {os.path.basename(os.path.normpath(run_dir))}")
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "curve.png"), dpi=110)
    plt.close(fig)


def penalty(kind, c_row, b_row):
    d = c_row - b_row
    if kind == "l1":
        return d.abs().mean()
    if kind == "l2":
        return (d * d).mean()
    if kind == "hinge":
        return d.clamp_min(0).mean()
    raise ValueError(kind)


def static_taus(static_json):
    """{(kind, layer): tau} from `--eval`'s static.json: the sub-layer that greedy static pruning
    drops at step k is off below the middle of (c_k, c_{k-1}) (the compute levels around it)."""
    with open(static_json) as f:
        path = json.load(f)["static"]
    taus = {}
    for k in range(1, len(path)):
        kind, i = path[k]["drop"][-1].split()
        taus[(kind, int(i))] = 0.5 * (path[k - 1]["compute"] + path[k]["compute"])
    return taus


def train_main(a):
    torch.manual_seed(a.seed)
    blk = l2a_block(a)
    model, cfg = load_base(a.base, blk)
    taus = static_taus(a.init_from_static) if a.init_from_static else None
    if a.anchor > 0 and taus is None:
        raise ValueError("--anchor needs --init-from-static (the static path it anchors to)")
    model.init_trainable(a.seed, a.router_bias, a.phi_std, taus)
    os.makedirs(a.run_dir, exist_ok=True)
    t_start = time.time()
    T = a.seq_len or int(cfg.get("max_position_embeddings", 256))
    trainmod = train
    ids_path = os.path.join(a.run_dir, "train_ids.npy")
    enc = bpe.Encoder(a.base)
    eot = enc.specials["<|endoftext|>"]
    if os.path.exists(ids_path):
        train_ids = np.load(ids_path)
    else:
        train_ids = trainmod.encode_docs(enc, trainmod.load_docs(a.text_file)[0], eot)
        np.save(ids_path, train_ids)
    held_ids = enc.encode(heldout_text(a.text_file))
    ev_wins = windows(held_ids, T, 0, a.eval_windows * T)
    batches = trainmod.Batches(train_ids, T, a.batch, a.seed)
    opt = torch.optim.AdamW([{"params": list(model.routers.parameters()), "lr_mult": a.router_lr / a.lr},
                             {"params": list(model.lora.values()), "lr_mult": 1.0}],
                            lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    state = {"step": 0, "tokens": 0, "elapsed": 0.0}
    sp = os.path.join(a.run_dir, "state.pt")
    settings = {"l2a": blk, "base": os.path.abspath(a.base), "lambda": a.lam, "gamma": a.gamma, "penalty": a.penalty,
                "b_min": a.b_min, "lr": a.lr, "router_lr": a.router_lr, "router_bias": a.router_bias,
                "phi_std": a.phi_std, "lam_ramp": a.lam_ramp, "anchor": a.anchor, "b_power": a.b_power, "init_from_static": a.init_from_static, "batch": a.batch, "seq_len": T, "seed": a.seed}
    if os.path.exists(sp):
        saved = torch.load(sp)
        if saved["settings"] != settings:
            raise ValueError(f"{sp}: written with other settings ({saved['settings']}); use a fresh --run-dir")
        for n, p in zip(saved["names"], saved["params"]):
            dict(model.named_parameters())[n].data.copy_(p)
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"resumed {sp}: step {state['step']}, {state['tokens']} tokens", flush=True)
    n_tr = sum(p.numel() for p in model.trainable())
    with open(os.path.join(a.run_dir, "run.json"), "w") as f:
        json.dump({"argv": sys.argv, "settings": settings, "steps": a.steps, "trainable_params": n_tr,
                   "train_tokens": int(len(train_ids))}, f, indent=1)
    print(f"l2a on {a.base}: {cfg['num_hidden_layers']} layers, {n_tr} trainable params (routers + LoRA "
          f"{blk.get('lora', {}).get('targets')}), {a.steps} steps x {a.batch}x{T}", flush=True)
    fl = layer_flops(cfg, T)
    print("layer flops/token: " + ", ".join(f"{k} {v / 1e3:.0f}k" for k, v in fl.items()), flush=True)
    session_t0, base_elapsed, last_ckpt = time.time(), state["elapsed"], time.time()
    win = {"tok": 0, "t0": time.time()}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    log_path, eval_path = os.path.join(a.run_dir, "log.csv"), os.path.join(a.run_dir, "eval.csv")
    tty = sys.stdout.isatty()

    def save(final=False):
        state["elapsed"] = base_elapsed + time.time() - session_t0
        row = {"step": state["step"], "tokens": state["tokens"], "elapsed_s": round(state["elapsed"], 1)}
        model.eval()
        for bb in (0.3, 0.6, 1.0):
            tot, n, st = nll(model, ev_wins, b=bb)
            row[f"heldout_ce_b{bb}"] = round(tot / max(n, 1), 5)
            row[f"compute_b{bb}"] = round(st["compute"] / max(st["tokens"], 1), 4)
        model.train()
        append_csv(eval_path, row)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        params = [dict(model.named_parameters())[n].detach().clone() for n in names]
        torch.save({"names": names, "params": params, "opt": opt.state_dict(), "state": state,
                    "settings": settings}, sp + ".tmp")
        os.replace(sp + ".tmp", sp)
        model.export(os.path.join(a.run_dir, "hf"), a.export_dtype, a.base)
        if final and a.export:
            model.export(a.export, a.export_dtype, a.base)
        plot_curve(a.run_dir)
        print(("\n" if tty else "") + f"checkpoint: step {state['step']}: held-out " +
              " ".join(f"b={bb}: ce {row[f'heldout_ce_b{bb}']:.4f} C {row[f'compute_b{bb}']:.3f}" for bb in (0.3, 0.6, 1.0)),
              flush=True)

    model.train()
    while state["step"] < a.steps:
        k = state["step"]
        x, y = batches.get(k)
        gb = torch.Generator().manual_seed(a.seed * 7919 + k)
        b = a.b_min + (1.0 - a.b_min) * torch.rand(a.batch, generator=gb) ** a.b_power
        lr = lr_at(k, a.steps, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr * g["lr_mult"]
        with torch.no_grad():
            t_logp = F.log_softmax(model(x, teacher=True)["logits"], -1) if a.gamma > 0 else None
        out = model(x, b=b, anchor_taus=taus if a.anchor > 0 else None)
        logp = F.log_softmax(out["logits"], -1)
        ce = F.nll_loss(logp.reshape(-1, logp.shape[-1]), y.reshape(-1))
        kd = (t_logp.exp() * (t_logp - logp)).sum(-1).mean() if t_logp is not None else ce.new_zeros(())
        c_row = out["compute"].mean(1)
        pen = penalty(a.penalty, c_row, b)
        lam = a.lam * min(1.0, (k + 1) / a.lam_ramp) if a.lam_ramp > 0 else a.lam
        anc = out["anchor"] if "anchor" in out else ce.new_zeros(())
        loss = ce + a.gamma * kd + lam * pen + a.anchor * anc  # + lambda_T * R_tok with lambda_T = 0
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.trainable(), 1.0)
        opt.step()
        state["step"] += 1
        state["tokens"] += y.numel()
        win["tok"] += y.numel()
        if state["step"] % a.log_every == 0 or state["step"] == a.steps:
            dt = time.time() - win["t0"]
            tps = win["tok"] / dt if dt > 0 else 0.0
            el = base_elapsed + time.time() - session_t0
            row = {"step": state["step"], "tokens": state["tokens"], "elapsed_s": round(el, 1), "loss": round(loss.item(), 5),
                   "ce": round(ce.item(), 5), "kd": round(kd.item(), 5), "penalty": round(pen.item(), 5), "anchor": round(anc.item(), 5),
                   "compute": round(c_row.mean().item(), 4), "b_mean": round(b.mean().item(), 4),
                   "abs_c_minus_b": round((c_row - b).abs().mean().item(), 4), "lr": lr, "tok_s": round(tps, 1)}
            append_csv(log_path, row)
            frac = state["step"] / a.steps
            bar = "#" * int(24 * frac) + "." * (24 - int(24 * frac))
            eta = (a.steps - state["step"]) * a.batch * T / max(tps, 1e-9)
            line = (f"[{bar}] {state['step']}/{a.steps} loss {row['loss']:.4f} ce {row['ce']:.4f} kd {row['kd']:.4f} "
                    f"C {row['compute']:.3f} (b {row['b_mean']:.3f}, |C-b| {row['abs_c_minus_b']:.3f}) | "
                    f"{tps:.0f} tok/s, eta {eta / 60:.1f} min")
            print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
            win["tok"], win["t0"] = 0, time.time()
        if time.time() - last_ckpt > 60 * a.ckpt_minutes:
            save()
            last_ckpt = time.time()
        if stop or (a.stop_after_minutes is not None and time.time() - t_start > 60 * a.stop_after_minutes) \
                or (a.stop_at_step is not None and state["step"] >= a.stop_at_step):
            save()
            print("stopped (--stop-after-minutes or SIGTERM); re-run the same command to resume", flush=True)
            return 0
    save(final=True)
    print(f"done: {state['step']} steps, {state['tokens']} tokens, {state['elapsed'] / 60:.1f} min", flush=True)
    return 0

# ---- evaluation ---------------------------------------------------------------------------------


def static_compute(cfg, T, drop):
    fl = layer_flops(cfg, T)
    att = fl["qkv"] + fl["core"] + fl["o"]
    L = cfg["num_hidden_layers"]
    run = sum((0 if ("attention", i) in drop else att) + (0 if ("mlp", i) in drop else fl["mlp"]) for i in range(L))
    return run / (L * (att + fl["mlp"]))


def greedy_static(model, cfg, sel_wins, T, log=print):
    """Drop sub-layers one at a time, each time the one whose removal raises the selection
    loss least; [(drop set, compute, selection NLL)] from nothing dropped to everything."""
    L = cfg["num_hidden_layers"]
    cand = [("attention", i) for i in range(L)] + [("mlp", i) for i in range(L)]
    drop = []
    tot, n, _ = nll(model, sel_wins, teacher=True)
    path = [([], 1.0, tot / n)]
    while cand:
        best = None
        for s in cand:
            tot, n, _ = nll(model, sel_wins, teacher=True, drop=frozenset(drop + [s]))
            if best is None or tot / n < best[1]:
                best = (s, tot / n)
        drop.append(best[0])
        cand.remove(best[0])
        path.append((list(drop), static_compute(cfg, T, set(drop)), best[1]))
        log(f"static: drop {best[0][0]} {best[0][1]} -> compute {path[-1][1]:.3f}, selection NLL {best[1]:.4f}")
    return path


def interp_static(static_pts, c):
    """log-perplexity linear in compute between the two greedy points around c."""
    pts = sorted((p["compute"], p["mean_nll"]) for p in static_pts)
    for (c0, n0), (c1, n1) in zip(pts, pts[1:]):
        if c0 <= c <= c1:
            w = (c - c0) / (c1 - c0) if c1 > c0 else 0.0
            return n0 + w * (n1 - n0)
    return pts[0][1] if c < pts[0][0] else pts[-1][1]


def static_part(a, model, cfg, ev, sel, T):
    """The greedy static-pruning path on the base, cached in RUN/eval/static.json (it depends only
    on the base, the eval prefix and the selection set; --static-only computes it before the gates exist)."""
    path_json = os.path.join(a.run_dir, "eval", "static.json")
    key = {"base": os.path.abspath(a.base), "text_file": a.text_file, "eval_tokens": a.eval_tokens, "select_tokens": a.select_tokens, "context": T}
    if os.path.exists(path_json):
        with open(path_json) as f:
            cached = json.load(f)
        if cached.get("key") == key:
            print(f"static pruning: cached {path_json}", flush=True)
            return cached["static"]
    path = greedy_static(model, cfg, sel, T, log=lambda s: print(s, flush=True))
    static = []
    for drop, c, seln in path:
        tot, n, _ = nll(model, ev, teacher=True, drop=frozenset(map(tuple, drop)))
        static.append({"drop": [f"{k} {i}" for k, i in drop], "compute": c, "selection_nll": seln,
                       "mean_nll": tot / n, "perplexity": math.exp(tot / n)})
        print(f"static {len(drop)} dropped: C {c:.3f} ppl {math.exp(tot / n):.3f}", flush=True)
    with open(path_json, "w") as f:
        json.dump({"key": key, "static": static}, f, indent=1)
    return static


def eval_main(a):
    t0 = time.time()
    T = a.context
    out_dir = os.path.join(a.run_dir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    if a.static_only:
        model, cfg = load_base(a.base, {"version": 1, "gates": list(GATE_ORDER), "router_hidden": 0, "budget_features": 0})
        hf = a.base
    else:
        hf = a.model or os.path.join(a.run_dir, "hf")
        model, cfg = load(hf)
    model.eval()
    held = bpe.Encoder(hf).encode(heldout_text(a.text_file))
    ev = windows(held, T, 0, a.eval_tokens)
    sel = windows(held, T, a.eval_tokens, a.select_tokens)
    if a.static_only:
        static_part(a, model, cfg, ev, sel, T)
        return 0
    H = cfg["num_attention_heads"]
    fl = layer_flops(cfg, T)
    per_layer = fl["qkv"] + fl["core"] + fl["o"] + fl["mlp"]
    E, R = cfg["hidden_size"], int(cfg["l2a"]["router_hidden"])
    Fn = 2 * int(cfg["l2a"]["budget_features"]) + 1
    G = model.G
    router_fl = (2 * R * (E + Fn) + 2 * G * R) if R > 0 else 2 * G * (E + Fn)
    tot, n, _ = nll(model, ev, teacher=True)
    res = {"model": hf, "base": a.base, "eval_tokens": a.eval_tokens, "select_tokens": a.select_tokens, "context": T,
           "predictions": n, "dense": {"mean_nll": tot / n, "perplexity": math.exp(tot / n)},
           "layer_flops": fl, "router_flops_per_layer": router_fl, "gated": [], "static": []}
    print(f"dense base: ppl {math.exp(tot / n):.3f} ({n} predictions)", flush=True)
    budgets = [round(0.1 * k, 1) for k in range(1, 11)] if not a.budgets else [float(v) for v in a.budgets.split(",")]
    for bb in budgets:
        tot, n, st = nll(model, ev, b=bb, exact=True, need_gates=True)
        dec = st["dec"] / st["tokens"]  # [L, G] fraction on
        row = {"b": bb, "mean_nll": tot / n, "perplexity": math.exp(tot / n), "compute": st["compute"] / st["tokens"]}
        k = 0
        att_on = None
        if "attention" in model.gates:
            att_on, k = dec[:, k], k + 1
            row["attention_run"] = att_on.mean().item()
            row["attention_layers_per_token"] = att_on.sum().item()
        if "mlp" in model.gates:
            row["mlp_run"] = dec[:, k].mean().item()
            row["mlp_layers_per_token"] = dec[:, k].sum().item()
            k += 1
        if "heads" in model.gates:
            row["heads_gate_on"] = dec[:, k:].mean().item()
            if "heads_on_attn" in st:
                row["heads_run_per_token"] = st["heads_on_attn"] / st["tokens"]  # summed over layers
                row["heads_kept"] = st["heads_on_attn"] / max(1.0, att_on.sum().item() * st["tokens"] * H)
            else:
                row["heads_kept"] = row["heads_gate_on"]
        if att_on is not None:  # the "compute" KV policy also runs q/k/v for skipping tokens
            row["compute_kv"] = row["compute"] + (1 - att_on.mean().item()) * fl["qkv"] / per_layer
        row["router_overhead"] = router_fl / per_layer
        row["per_layer"] = dec.tolist()
        res["gated"].append(row)
        print(f"b={bb}: ppl {row['perplexity']:.3f} C {row['compute']:.3f} attn {row.get('attention_run', 1):.3f} "
              f"mlp {row.get('mlp_run', 1):.3f} heads kept {row.get('heads_kept', 1):.3f}", flush=True)
    if not a.no_static:
        res["static"] = static_part(a, model, cfg, ev, sel, T)
        for row in res["gated"]:
            sn = interp_static(res["static"], row["compute"])
            row["static_mean_nll"] = sn
            row["static_perplexity"] = math.exp(sn)
    res["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(out_dir, "l2a_eval.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = table_md(res)
    with open(os.path.join(out_dir, "l2a_eval.md"), "w") as f:
        f.write(md)
    print(md, flush=True)
    plot_eval(res, os.path.join(out_dir, "l2a_eval.png"))
    if a.plot_out:
        plot_eval(res, a.plot_out)
    return 0


def table_md(res):
    d = res["dense"]["perplexity"]
    lines = ["| b | compute C | C_kv | attention run | MLP run | heads kept (where attention runs) | L2A ppl | static ppl at C | dense ppl | L2A vs dense |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["gated"]:
        sp = f"{r['static_perplexity']:.2f}" if "static_perplexity" in r else "-"
        lines.append(f"| {r['b']:.1f} | {r['compute']:.3f} | {r.get('compute_kv', r['compute']):.3f} | "
                     f"{r.get('attention_run', 1):.3f} | {r.get('mlp_run', 1):.3f} | "
                     f"{(format(r.get('heads_kept', 1), '.3f') if r.get('attention_run', 1) > 0 else '-')} | "
                     f"{r['perplexity']:.2f} | {sp} | {d:.2f} | {100 * (r['perplexity'] / d - 1):+.1f}% |")
    if res["static"]:
        lines += ["", "| static: sub-layers dropped (greedy order) | compute | ppl |", "|---|---|---|"]
        for s in res["static"]:
            lines.append(f"| {len(s['drop'])}: {', '.join(s['drop'][-1:]) or 'none'} | {s['compute']:.3f} | {s['perplexity']:.2f} |")
    return "\n".join(lines) + "\n"


def plot_eval(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7.5, 5))
    g = res["gated"]
    ax.plot([r["compute"] for r in g], [r["perplexity"] for r in g], "o-", label="L2A gates (one checkpoint, b = 0.1 .. 1)")
    for r in g:
        ax.annotate(f"b={r['b']:.1f}", (r["compute"], r["perplexity"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    if res["static"]:
        s = sorted(res["static"], key=lambda s: s["compute"])
        ax.plot([p["compute"] for p in s], [p["perplexity"] for p in s], "s--", label="static pruning (greedy on held-out loss)")
    ax.axhline(res["dense"]["perplexity"], color="k", linewidth=0.8, label=f"dense base ({res['dense']['perplexity']:.1f})")
    ax.axhline(res["dense"]["perplexity"] * 1.03, color="k", linewidth=0.5, linestyle=":", label="dense + 3%")
    ax.axvline(0.7, color="gray", linewidth=0.5, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("compute fraction run (attention + MLP flops per token, of the dense layers')")
    ax.set_ylabel("held-out perplexity")
    ax.set_title(f"L2A gates vs static pruning ({res['predictions']} held-out predictions)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_runs(spec, path):
    """One plot of several --eval results (LABEL=l2a_eval.json;...): each run's gated curve, the
    static path and the dense line of the first; right panel: the region near dense."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = []
    for item in spec.split(";"):
        label, f = item.split("=", 1)
        with open(f) as fh:
            runs.append((label, json.load(fh)))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    res = runs[0][1]
    d = res["dense"]["perplexity"]
    s = sorted(res["static"], key=lambda s: s["compute"])
    for ax, zoom in zip(axes, (False, True)):
        for label, r0 in runs:
            g = r0["gated"]
            ax.plot([r["compute"] for r in g], [r["perplexity"] for r in g], "o-", markersize=4, label=label)
            for r in g:
                ax.annotate(f"{r['b']:.1f}", (r["compute"], r["perplexity"]), fontsize=6, xytext=(2, 2),
                            textcoords="offset points")
        ax.plot([p["compute"] for p in s], [p["perplexity"] for p in s], "ks--", markersize=4,
                label="static pruning (greedy on held-out loss)")
        ax.axhline(d, color="k", linewidth=0.8, label=f"dense base ({d:.1f})")
        ax.axhline(d * 1.03, color="k", linewidth=0.5, linestyle=":", label="dense + 3%")
        ax.axvline(0.7, color="gray", linewidth=0.5, linestyle=":")
        ax.grid(alpha=0.3, which="both")
        ax.set_xlabel("compute fraction run (attention + MLP flops per token); labels: b")
        if zoom:
            ax.set_xlim(0.45, 1.02)
            ax.set_ylim(d * 0.99, d * 1.12)
            ax.set_title("near dense (linear)")
        else:
            ax.set_yscale("log")
            ax.set_ylim(d * 0.97, d * 4)
            ax.set_ylabel("held-out perplexity (prefix, 20,400 predictions)")
            ax.set_title("L2A gates on dense4x-brown vs static pruning")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the trained dense llama HF checkpoint (frozen)")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--text-file", help="documents split by blank lines instead of Brown (last 5%% held out)")
    ap.add_argument("--eval", action="store_true", help="evaluate RUN/hf (or --model) instead of training")
    ap.add_argument("--model", help="--eval: this gate checkpoint instead of RUN/hf")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, help="default: the base's max_position_embeddings")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--router-lr", type=float, default=1e-2)
    ap.add_argument("--init-from-static", metavar="STATIC_JSON",
                    help="warm-start the routers from the greedy static-pruning order (RUN/eval/static.json of --eval --static-only)")
    ap.add_argument("--phi-std", type=float, default=1.0, help="init std of fc1's budget columns")
    ap.add_argument("--lam-ramp", type=int, default=50, help="lambda grows linearly over this many steps")
    ap.add_argument("--router-bias", type=float, default=1.0, help="initial router output bias (> 0: gates on)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--gamma", type=float, default=1.0, help="KD weight")
    ap.add_argument("--lam", type=float, default=4.0, help="compute penalty weight lambda")
    ap.add_argument("--penalty", default="l1", choices=["l1", "l2", "hinge"])
    ap.add_argument("--b-min", type=float, default=0.1)
    ap.add_argument("--b-power", type=float, default=1.0,
                    help="b = b_min + (1 - b_min) u^P, u uniform: P > 1 puts more rows at low b")
    ap.add_argument("--anchor", type=float, default=0.0,
                    help="weight of the logistic loss pulling each attention / MLP gate toward the static path's "
                         "decision at the row's b (needs --init-from-static; 0: none)")
    ap.add_argument("--gates", default="attention,mlp,heads")
    ap.add_argument("--router-hidden", type=int, default=32)
    ap.add_argument("--budget-features", type=int, default=4)
    ap.add_argument("--lora-rank", type=int, default=8, help="0: no LoRA")
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--lora-targets", default="q_proj,v_proj,o_proj,down_proj")
    ap.add_argument("--lora-budget-ramp", default="",
                    help="B_FULL,B_OFF: the LoRA runs in full at b <= B_FULL, not at all at b >= B_OFF, linearly "
                         "between (lora.budget_ramp; fathom then keeps it apart from the base weights)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-minutes", type=float, default=10.0)
    ap.add_argument("--eval-windows", type=int, default=8, help="held-out windows at each checkpoint")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--export", help="also write the final gate checkpoint here")
    ap.add_argument("--export-dtype", default="f32", choices=["bf16", "f32"])
    ap.add_argument("--stop-after-minutes", type=float)
    ap.add_argument("--stop-at-step", type=int, help="checkpoint and exit at this step (the schedule stays --steps')")
    ap.add_argument("--context", type=int, default=256, help="--eval: window length")
    ap.add_argument("--eval-tokens", type=int, default=20480, help="--eval: the held-out prefix scored")
    ap.add_argument("--select-tokens", type=int, default=4096, help="--eval: static pruning's selection set")
    ap.add_argument("--budgets", help="--eval: comma-separated b's (default 0.1..1.0)")
    ap.add_argument("--no-static", action="store_true")
    ap.add_argument("--static-only", action="store_true", help="--eval: only the static-pruning path on --base (cached)")
    ap.add_argument("--plot-out", help="--eval: also write the plot here")
    ap.add_argument("--plot-runs", metavar="LABEL=JSON;...", help="only plot these --eval results (LABEL=JSON;LABEL=JSON...) together into --plot-out")
    a = ap.parse_args(argv)
    a.gates = [g for g in GATE_ORDER if g in a.gates.split(",")]
    a.lora_targets = [t for t in a.lora_targets.split(",") if t]
    if a.lora_budget_ramp:
        try:
            a.lora_budget_ramp = [float(v) for v in a.lora_budget_ramp.split(",")]
        except ValueError:
            ap.error(f"--lora-budget-ramp: expected B_FULL,B_OFF, found {a.lora_budget_ramp!r}")
        if len(a.lora_budget_ramp) != 2 or not 0 <= a.lora_budget_ramp[0] < a.lora_budget_ramp[1] <= 1:
            ap.error(f"--lora-budget-ramp: expected 0 <= B_FULL < B_OFF <= 1, found {a.lora_budget_ramp}")
    torch.set_num_threads(a.threads)
    if a.plot_runs:
        plot_runs(a.plot_runs, a.plot_out)
        return 0
    return eval_main(a) if a.eval else train_main(a)


if __name__ == "__main__":
    sys.exit(main())
