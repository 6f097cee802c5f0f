"""PyTorch training models for fathom's recipes, with the upstream HF tensor names.

The math is tests/reference/reference.py's, batched ([B, T] instead of [S]) and without a KV
cache; tests/train/recipes_test.py checks every family here against reference.py on the
exported checkpoints.  Nothing here imports from tests/.

  RMSNorm:  x * rsqrt(mean(x^2) + eps) * weight           (plain weight, init 1)
  RoPE:     NeoX rotate_half, inv_freq = 1/theta^(2i/D) in f32
  attention: causal softmax(q k^T / sqrt(D)) v, GQA by repeat_interleave (HF repeat_kv)
  MLP:      down(silu(gate(x)) * up(x))
  dense (llama):  x += attn(in_norm(x)); x += mlp(post_norm(x)); logits = head(norm(x))
  ouro:     h_0 = embed(ids); for t = 1..R: every layer
              x += in_norm2(attn(in_norm(x))); x += post_norm2(mlp(post_norm(x)))
            h_t = norm(x) (next step's input and the gate's input), lambda_t = sigmoid(gate(h_t)),
            step_logits_t = head(h_t)
  lckv-llama: see LCKV below (layer_types, force_nodiag, iterative training m / b passes).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import fastmm


class Linear(nn.Linear):
    """nn.Linear whose product runs through fastmm (oneDNN sgemm; torch's BLAS here is netlib's)."""

    def forward(self, x):
        return fastmm.linear(x, self.weight, self.bias)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_tables(T, D, theta, device=None):
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]  # [T, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [T, D]
    return emb.cos(), emb.sin()


def rope_neox(x, cos, sin):
    """x: [B, heads, T, D]; cos/sin: [T, D]."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, cfg, has_kv=True):
        super().__init__()
        E, H, Hkv, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.H, self.Hkv, self.D = H, Hkv, D
        self.q_proj = Linear(E, H * D, bias=False)
        if has_kv:
            self.k_proj = Linear(E, Hkv * D, bias=False)
            self.v_proj = Linear(E, Hkv * D, bias=False)
        self.o_proj = Linear(H * D, E, bias=False)

    def kv(self, x, cos, sin):
        B, T, _ = x.shape
        k = self.k_proj(x).view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.Hkv, self.D).transpose(1, 2)
        return rope_neox(k, cos, sin), v

    def forward(self, x, cos, sin, kv=None, mask=None):
        """x: [B, T, E] normed.  kv: (k, v) [B, Hkv, T, D] to attend to instead of our own.
        mask: [T, T] bool of visible keys (default causal, diagonal included)."""
        B, T, _ = x.shape
        q = rope_neox(self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2), cos, sin)
        k, v = kv if kv is not None else self.kv(x, cos, sin)
        rep = self.H // self.Hkv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scores = fastmm.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.D)  # [B, H, T, T]
        if mask is None:
            mask = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        probs = torch.where(mask.any(-1)[:, None], probs, torch.zeros_like(probs))  # rows with no key: 0
        y = fastmm.matmul(probs, v).transpose(1, 2).reshape(B, T, self.H * self.D)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        E, I = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = Linear(E, I, bias=False)
        self.up_proj = Linear(E, I, bias=False)
        self.down_proj = Linear(I, E, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg, sandwich=False, has_kv=True):
        super().__init__()
        E, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(E, eps)
        self.self_attn = Attention(cfg, has_kv)
        self.post_attention_layernorm = RMSNorm(E, eps)
        self.mlp = MLP(cfg)
        self.sandwich = sandwich
        if sandwich:  # Ouro: norms on the branch outputs
            self.input_layernorm_2 = RMSNorm(E, eps)
            self.post_attention_layernorm_2 = RMSNorm(E, eps)

    def forward(self, x, cos, sin, kv=None, mask=None):
        a = self.self_attn(self.input_layernorm(x), cos, sin, kv, mask)
        x = x + (self.input_layernorm_2(a) if self.sandwich else a)
        m = self.mlp(self.post_attention_layernorm(x))
        return x + (self.post_attention_layernorm_2(m) if self.sandwich else m)


class Backbone(nn.Module):
    """Holds `model.*` so that state_dict names are the HF ones."""

    def __init__(self, cfg, sandwich=False, kv_layers=None):
        super().__init__()
        L = cfg["num_hidden_layers"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(
            Layer(cfg, sandwich, has_kv=(kv_layers is None or i in kv_layers)) for i in range(L))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


def init_weights(module, std=0.02):
    for name, p in module.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name:
            nn.init.ones_(p)
        elif name.endswith(".bias"):
            nn.init.zeros_(p)
        else:
            nn.init.normal_(p, 0.0, std)
    # scale the residual-branch outputs down with depth (GPT-2)
    n_branch = 2 * module.config["num_hidden_layers"] * module.config.get("total_ut_steps", 1)
    for name, p in module.named_parameters():
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            nn.init.normal_(p, 0.0, std / math.sqrt(n_branch))


class Dense(nn.Module):
    """Llama (model_type "llama")."""

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        init_weights(self)

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = rope_tables(T, self.config["head_dim"], self.config["rope_theta"])
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return {"logits": self.lm_head(self.model.norm(x))}


class Ouro(nn.Module):
    """Ouro LoopLM (model_type "ouro")."""

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg, sandwich=True)
        self.model.early_exit_gate = Linear(cfg["hidden_size"], 1, bias=True)
        self.lm_head = Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        init_weights(self)

    def states(self, ids, loops=None):
        """[h_1 .. h_R], each [B, T, E] (normed)."""
        R = loops or self.config["total_ut_steps"]
        T = ids.shape[1]
        cos, sin = rope_tables(T, self.config["head_dim"], self.config["rope_theta"])
        h = self.model.embed_tokens(ids)
        hs = []
        for _ in range(R):
            for layer in self.model.layers:
                h = layer(h, cos, sin)
            h = self.model.norm(h)
            hs.append(h)
        return hs

    def gate(self, h):
        return torch.sigmoid(self.model.early_exit_gate(h)[..., 0])

    def forward(self, ids, loops=None):
        hs = self.states(ids, loops)
        lam = torch.stack([self.gate(h) for h in hs])  # [R, B, T]
        step_logits = torch.stack([self.lm_head(h) for h in hs])  # [R, B, T, V]
        return {"logits": step_logits[-1], "lambda": lam, "pdf": exit_pdf(lam), "step_logits": step_logits}


def exit_pdf(lam):
    """p_t = lambda_t prod_{j<t}(1 - lambda_j) for t < R; p_R = prod_{j<R}(1 - lambda_j).  lam: [R, ...]"""
    pdf, remaining = [], torch.ones_like(lam[0])
    R = lam.shape[0]
    for t in range(R):
        if t < R - 1:
            pdf.append(lam[t] * remaining)
            remaining = remaining * (1.0 - lam[t])
        else:
            pdf.append(remaining)
    return torch.stack(pdf)


# ---- LCKV ----------------------------------------------------------------------------------


def lckv_types(cfg):
    L = cfg["num_hidden_layers"]
    toks = (cfg.get("layer_types") or "_".join(map(str, range(L)))).split("_")
    types = [(int(t.rstrip("s")), t.endswith("s")) for t in toks]
    if len(types) != L or any(not 0 <= s < L for s, _ in types):
        raise ValueError(f"config.json layer_types {cfg.get('layer_types')!r}: bad for {L} layers")
    if any(sl for _, sl in types):
        raise NotImplementedError("config.json layer_types: sliding-window layers are not trained here")
    return types


class LCKV(nn.Module):
    """LCKV Llama (model_type "lckv-llama"): layer i attends to the KV of layer types[i]; with
    force_nodiag (or a later source) to strictly earlier positions, token 0 getting zero.
    Training (the paper's iterative scheme): for each cyclic group of layers (a run reading a
    later layer's KV, up to that target), m passes without gradient then b with, each pass
    reading the KV the previous pass produced (the first starting from zeros), the loss on
    the last.  Layers whose KV nobody reads have no k_proj / v_proj."""

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.types = lckv_types(cfg)
        kv_layers = {s for s, _ in self.types}
        self.model = Backbone(cfg, kv_layers=kv_layers)
        self.lm_head = Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        init_weights(self)

    def plan(self):
        """[(first, end, cyclic)] runs of layers, as reference.py's lckv_plan."""
        types, L = self.types, len(self.types)
        plan, i = [], 0
        while i < L:
            if types[i][0] > i:
                top = types[i][0]
                while top < max(t[0] for t in types[i : top + 1]):
                    top = max(t[0] for t in types[i : top + 1])
                plan.append((i, top + 1, True))
                i = top + 1
            else:
                top = i + 1
                while top < L and not types[top][0] > top:
                    top += 1
                plan.append((i, top, False))
                i = top
        return plan

    def _run(self, h, first, end, kv, cos, sin, masks):
        x = h
        for i in range(first, end):
            layer = self.model.layers[i]
            xn = layer.input_layernorm(x)
            if hasattr(layer.self_attn, "k_proj"):
                kv[i] = layer.self_attn.kv(xn, cos, sin)
            src = self.types[i][0]
            no_diag = bool(self.config.get("force_nodiag", False)) or src > i
            a = layer.self_attn(xn, cos, sin, kv[src], masks[no_diag])
            x = x + a
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return x

    def forward(self, ids, passes=None):
        """passes: (m, b); default the config's forward_passes / backward_passes."""
        cfg = self.config
        m, b = passes or (int(cfg.get("forward_passes", 7)), int(cfg.get("backward_passes", 2)))
        B, T = ids.shape
        cos, sin = rope_tables(T, cfg["head_dim"], cfg["rope_theta"])
        tri = torch.ones(T, T, dtype=torch.bool).tril()
        masks = {False: tri, True: tri & ~torch.eye(T, dtype=torch.bool)}
        Hkv, D = cfg["num_key_value_heads"], cfg["head_dim"]
        kv = {}
        for i, (src, _) in enumerate(self.types):
            if src > i:
                z = ids.new_zeros((), dtype=torch.float32).expand(B, Hkv, T, D)
                kv[src] = (z, z)
        h = self.model.embed_tokens(ids)
        for first, end, cyclic in self.plan():
            if not cyclic:
                h = self._run(h, first, end, kv, cos, sin, masks)
                continue
            with torch.no_grad():
                for _ in range(m):
                    self._run(h, first, end, kv, cos, sin, masks)
                kv_ng = {k: (a.detach(), c.detach()) for k, (a, c) in kv.items()}
            kv = kv_ng
            for _ in range(max(b - 1, 0)):
                self._run(h, first, end, kv, cos, sin, masks)
            h = self._run(h, first, end, kv, cos, sin, masks)
        return {"logits": self.lm_head(self.model.norm(h))}


FAMILIES = {"llama": Dense, "ouro": Ouro, "lckv-llama": LCKV}


def build(cfg):
    if cfg["model_type"] not in FAMILIES:
        raise ValueError(f"config model_type {cfg['model_type']!r}: not one of {sorted(FAMILIES)}")
    return FAMILIES[cfg["model_type"]](cfg)
