#!/usr/bin/python3
"""fathom's training recipes (CPU, Debian python3-torch): dense Llama, Ouro LoopLM, LCKV.

    /usr/bin/python3 train/train.py --recipe ouro-brown --run-dir /tmp/fathom-train/ouro-brown
    /usr/bin/python3 train/train.py --recipe tiny-ouro --text-file F --run-dir D --export OUT   # CI

A run directory holds everything (never in the repository): tokenizer/ (trained by
train/bpe.py on the training text unless --tokenizer is given), train_ids.npy, state.pt (the
resumable state: model, optimizer, step, stage; written every --ckpt-minutes and at the end),
hf/ (the latest checkpoint as bf16 HF files + the tokenizer, loadable by fathom and
tests/reference/reference.py; --export DIR also writes the final one to DIR in
--export-dtype), log.csv (every --log-every steps), log_gate.csv (stage 2), eval.csv (held-out
CE at every checkpoint) and curve.png.  Re-running the same command resumes from state.pt;
SIGTERM writes a checkpoint and exits.

Recipes (sizes picked from a measured ~165-290 tokens/s of one shared core for the Ouro
shape; RECIPES lists them): ouro-brown (hidden 256, 2 layers x 4 loop steps, 4 heads, MHA,
intermediate 688, vocab 4096, context 256, 3.68M params), dense-brown (the same layers, no
loop: the same parameters), dense4x-brown (8 layers: the same compute per token), lckv-w2-brown
and lckv-half-brown (the 8-layer shape, w = 2 and w = 4 warmup layers); tiny-* are 32-wide
versions for the CI check (train/test_recipes.py).

Data: the Brown training split (train/data.py) unless --text-file; documents are encoded
separately and joined with <|endoftext|>; the stream is cut into windows of seq_len + 1
tokens, shuffled per epoch with a seeded generator (batch k is a function of seed and k, so
a resumed run sees the same batches).  Held-out: the Brown held-out split (or the last 5% of
--text-file's documents), evaluated at every checkpoint.

Objectives
  llama, lckv-llama: next-token cross-entropy.  LCKV trains with the paper's iterative scheme
    (m = forward_passes without gradient, then b = backward_passes with; models.LCKV).
  ouro, stage 1 (Ouro paper): L = sum_t p_t CE_t - beta H(p), p_t = lambda_t prod_{j<t}(1-lambda_j)
    (the last step takes the rest), per token, averaged; gradients reach the LM and the gate.
    beta = 0.5: with 0.05 the exit mass collapsed onto step 1 within 100 steps (mean depth
    1.35, CE 6.47 at step 1 vs 7.14 at step 4), so the later steps stopped learning.
  ouro, stage 2 (--gate-steps): the LM is frozen, the gate alone learns, per token and step
    t < R, the target "exit" = 1 - sigmoid(k (I_t - gamma)) with I_t = CE_t - CE_{t+1} (the
    loss one more step would save), binary cross-entropy on lambda_t (k = 50, gamma = 0.005).
"""
import argparse
import csv
import os
import sys

if __name__ == "__main__":  # one OpenMP thread for torch and oneDNN unless --threads says otherwise
    _t = [sys.argv[i + 1] for i, v in enumerate(sys.argv[:-1]) if v == "--threads"]
    os.environ.setdefault("OMP_NUM_THREADS", _t[-1] if _t else "1")

import json
import math
import signal
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import checkpoint  # noqa: E402
import models  # noqa: E402

# ---- recipes --------------------------------------------------------------------------------

BASE = {"rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
        "mlp_bias": False, "initializer_range": 0.02}


def config_for(family, E, L, H, Hkv, I, V, ctx, loops=4):
    cfg = dict(BASE, hidden_size=E, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=Hkv,
               head_dim=E // H, intermediate_size=I, vocab_size=V, max_position_embeddings=ctx)
    if family == "ouro":
        cfg.update(model_type="ouro", architectures=["OuroForCausalLM"], rope_theta=1000000.0,
                   total_ut_steps=loops, early_exit_threshold=1.0, use_sliding_window=False,
                   sliding_window=None, max_window_layers=L)
    elif family == "llama":
        cfg.update(model_type="llama", architectures=["LlamaForCausalLM"], rope_theta=10000.0,
                   pretraining_tp=1, rope_scaling=None)
    elif family == "lckv-llama":
        cfg.update(model_type="lckv-llama", architectures=["LCKVLlamaForCausalLM"], rope_theta=10000.0,
                   forward_passes=7, backward_passes=2, sliding_window=4096, use_sequential=False,
                   force_nodiag=True, rope_scaling=None)
    else:
        raise ValueError(family)
    return cfg


def lckv_layout(L, w):
    """The paper's layout with w warmup layers: the bottom w/2 and top w/2 layers keep their own
    KV, every layer between reads the KV of the top non-warmup layer L-1-w/2 (MODELS.md: w=10
    on 22 layers is 0_1_2_3_4_16 (x12)_17_18_19_20_21)."""
    half = w // 2
    target = L - 1 - half
    if w < 2 or w % 2 or target <= half:
        raise ValueError(f"LCKV layout: w={w} does not fit {L} layers")
    types = list(range(half)) + [target] * (L - 2 * half) + list(range(L - half, L))
    return "_".join(map(str, types))


def recipe(name, V):
    """(family, config, training settings) for a named recipe."""
    ctx = 256
    train = {"seq_len": ctx, "batch": 4, "lr": 2e-3, "min_lr_frac": 0.1, "warmup": 50, "weight_decay": 0.1,
             "beta": 0.5, "gate_steps": 0, "gate_lr": 1e-3, "steps": 700, "embed_std": 0.02}
    tiny = name.startswith("tiny-")
    if tiny:
        E, L, H, Hkv, I = 32, 2, 2, 1, 48
        ctx = 32
        train.update(seq_len=ctx, batch=2, steps=3, warmup=1, gate_steps=2)
    else:
        E, L, H, Hkv, I = 256, 2, 4, 4, 688  # sized by the measured ~165 tokens/s of one loaded core
    kind = name[5:] if tiny else name.rsplit("-brown", 1)[0]
    if kind == "ouro":
        cfg = config_for("ouro", E, L, H, Hkv, I, V, ctx)
        # Embeddings at std 1: every branch of Ouro's sandwich norm adds a unit-RMS vector to
        # the residual stream, which drowns std-0.02 embeddings (docs/QUALITY.md).
        train.update(embed_std=1.0)
        if not tiny:
            train.update(gate_steps=100)
    elif kind == "dense":  # the looped model's parameter count
        cfg = config_for("llama", E, L, H, Hkv, I, V, ctx)
    elif kind == "dense4x":  # the looped model's compute: 4x the layers
        cfg = config_for("llama", E, 4 * L, H, Hkv, I, V, ctx)
    elif kind in ("lckv-w2", "lckv-half"):
        Ll = 8 if tiny else 4 * L  # the dense4x shape: LCKV needs layers to share
        cfg = config_for("lckv-llama", E, Ll, H, Hkv, I, V, ctx)
        cfg["layer_types"] = lckv_layout(Ll, 2 if kind.endswith("w2") else Ll // 2)
        if tiny:
            cfg.update(forward_passes=2, backward_passes=2)
    else:
        raise ValueError(f"--recipe {name!r}: unknown")
    return cfg["model_type"], cfg, train


RECIPES = ["ouro-brown", "dense-brown", "dense4x-brown", "lckv-w2-brown", "lckv-half-brown",
           "tiny-ouro", "tiny-dense", "tiny-dense4x", "tiny-lckv-w2", "tiny-lckv-half"]

# ---- data -------------------------------------------------------------------------------------


def load_docs(text_file):
    if text_file:
        with open(text_file, encoding="utf-8") as f:
            docs = [d for d in f.read().split("\n\n") if d.strip()]
        n_held = max(1, len(docs) // 20) if len(docs) > 1 else 0
        return (docs[: len(docs) - n_held] or docs), (docs[len(docs) - n_held :] or docs)
    import data
    return data.split()


def encode_docs(enc, docs, eot):
    out = []
    for d in docs:
        out.extend(enc.encode(d))
        out.append(eot)
    return np.array(out, dtype=np.int32)


class Batches:
    """Window k of epoch e is perm_e[k]; batch i holds windows i*B .. i*B+B-1 of the stream of epochs."""

    def __init__(self, ids, seq_len, batch, seed):
        self.ids = torch.from_numpy(ids.astype(np.int64))
        self.T, self.B, self.seed = seq_len, batch, seed
        self.n = (len(ids) - 1) // seq_len
        if self.n < 1:
            raise ValueError(f"training text has {len(ids)} tokens, fewer than seq_len + 1 = {seq_len + 1}")
        self._perm = {}

    def perm(self, e):
        if e not in self._perm:
            self._perm = {e: torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed * 1000 + e))}
        return self._perm[e]

    def get(self, i):
        rows = []
        for j in range(i * self.B, (i + 1) * self.B):
            e, k = divmod(j, self.n)
            s = int(self.perm(e)[k]) * self.T
            rows.append(self.ids[s : s + self.T + 1])
        x = torch.stack(rows)
        return x[:, :-1], x[:, 1:]


def heldout_windows(ids, seq_len, max_windows):
    ids = torch.from_numpy(ids.astype(np.int64))
    n = min((len(ids) - 1) // seq_len, max_windows)
    return [ids[k * seq_len : k * seq_len + seq_len + 1] for k in range(n)]

# ---- losses -----------------------------------------------------------------------------------


def per_token_ce(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none").view(y.shape)


def ouro_stage1(out, y, beta):
    ce = torch.stack([per_token_ce(l, y) for l in out["step_logits"]])  # [R, B, T]
    pdf = out["pdf"]
    expected = (pdf * ce).sum(0).mean()
    entropy = -(pdf * torch.log(pdf.clamp_min(1e-12))).sum(0).mean()
    loss = expected - beta * entropy
    depth = (pdf * torch.arange(1, pdf.shape[0] + 1, dtype=pdf.dtype)[:, None, None]).sum(0).mean()
    return loss, {"expected_ce": expected.item(), "entropy": entropy.item(), "mean_depth": depth.item(),
                  **{f"ce{t + 1}": ce[t].mean().item() for t in range(ce.shape[0])}}


def ouro_stage2(model, x, y, k=50.0, gamma=0.005):
    with torch.no_grad():
        hs = model.states(x)
        ce = torch.stack([per_token_ce(model.lm_head(h), y) for h in hs])  # [R, B, T]
        improve = ce[:-1] - ce[1:]
        target_exit = 1.0 - torch.sigmoid(k * (improve - gamma))  # [R-1, B, T]
    lam = torch.stack([model.gate(h) for h in hs[:-1]])
    loss = F.binary_cross_entropy(lam.clamp(1e-6, 1 - 1e-6), target_exit)
    return loss, {"gate_bce": loss.item(), "target_exit": target_exit.mean().item(), "lambda": lam.mean().item(),
                  **{f"ce{t + 1}": ce[t].mean().item() for t in range(ce.shape[0])}}


@torch.no_grad()
def evaluate(model, family, windows, batch=4):
    """Mean held-out CE per depth (ouro: at each fixed step 1..R) or overall."""
    model.eval()
    sums, n = None, 0
    for s in range(0, len(windows), batch):
        w = torch.stack(windows[s : s + batch])
        x, y = w[:, :-1], w[:, 1:]
        out = model(x)
        logits = out["step_logits"] if family == "ouro" else out["logits"][None]
        ce = torch.stack([per_token_ce(l, y).sum() for l in logits])
        sums = ce if sums is None else sums + ce
        n += y.numel()
    model.train()
    return (sums / max(n, 1)).tolist()

# ---- the loop ---------------------------------------------------------------------------------


def lr_at(step, total, tr):
    if step < tr["warmup"]:
        return tr["lr"] * (step + 1) / tr["warmup"]
    frac = min(1.0, (step - tr["warmup"]) / max(1, total - tr["warmup"]))
    return tr["lr"] * (tr["min_lr_frac"] + (1 - tr["min_lr_frac"]) * 0.5 * (1 + math.cos(math.pi * frac)))


def plot_rows(path):
    """(matplotlib.pyplot, the rows of the CSV log at path), or None without matplotlib or rows."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not os.path.exists(path):
        return None
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return (plt, rows) if rows else None


def plot(run_dir, family):
    got = plot_rows(os.path.join(run_dir, "log.csv"))
    if got is None:
        return
    plt, rows = got
    fig, ax = plt.subplots(figsize=(8, 5))
    toks = [float(r["tokens"]) / 1e6 for r in rows]
    keys = [k for k in rows[0] if k.startswith("ce")] or ["loss"]
    for k in keys:
        vals = [float(r[k]) if r.get(k) not in (None, "") else float("nan") for r in rows]
        ax.plot(toks, vals, label=f"train {k}", linewidth=0.8)
    epath = os.path.join(run_dir, "eval.csv")
    if os.path.exists(epath):
        with open(epath) as f:
            ev = list(csv.DictReader(f))
        for k in [k for k in (ev[0] if ev else {}) if k.startswith("heldout")]:
            ax.plot([float(r["tokens"]) / 1e6 for r in ev], [float(r[k]) for r in ev], "o-", label=k)
    ax.set_xlabel("training tokens (M)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(f"{os.path.basename(os.path.normpath(run_dir))} ({family})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "curve.png"), dpi=110)
    plt.close(fig)


def append_csv(path, row):
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        if new:
            w.writeheader()
        w.writerow(row)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", required=True, choices=RECIPES)
    ap.add_argument("--run-dir", required=True, help="outside the repository, e.g. /tmp/fathom-train/NAME")
    ap.add_argument("--text-file", help="train on this text (documents split by blank lines) instead of Brown")
    ap.add_argument("--tokenizer", help="directory with tokenizer.json (default: train one into RUN_DIR/tokenizer)")
    ap.add_argument("--vocab", type=int, default=None, help="BPE vocabulary when training one (default 4096; tiny 300)")
    ap.add_argument("--steps", type=int, help="stage-1 optimizer steps (override the recipe)")
    ap.add_argument("--gate-steps", type=int, help="ouro stage-2 steps (override the recipe)")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--beta", type=float, help="ouro stage-1 entropy weight (override the recipe)")
    ap.add_argument("--embed-std", type=float,
                    help="init std of the token embeddings (override the recipe: ouro 1.0, the others 0.02)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-minutes", type=float, default=10.0)
    ap.add_argument("--eval-windows", type=int, default=24, help="held-out windows evaluated at each checkpoint")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--export", help="also write the final HF checkpoint here")
    ap.add_argument("--export-dtype", default="bf16", choices=["bf16", "f32"], help="of --export (RUN_DIR/hf is bf16)")
    ap.add_argument("--stop-after-minutes", type=float, help="checkpoint and exit after this long (resume later)")
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    os.makedirs(a.run_dir, exist_ok=True)
    t_start = time.time()

    # tokenizer + data
    train_docs, held_docs = load_docs(a.text_file)
    tok_dir = a.tokenizer or os.path.join(a.run_dir, "tokenizer")
    if not os.path.exists(os.path.join(tok_dir, "tokenizer.json")):
        vocab = a.vocab or (300 if a.recipe.startswith("tiny-") else 4096)
        bpe.write(tok_dir, bpe.train("\n\n".join(train_docs), vocab))
    enc = bpe.Encoder(tok_dir)
    V = len(enc.vocab) + len(enc.specials)
    eot = enc.specials["<|endoftext|>"]
    ids_path = os.path.join(a.run_dir, "train_ids.npy")
    if os.path.exists(ids_path):
        train_ids = np.load(ids_path)
    else:
        train_ids = encode_docs(enc, train_docs, eot)
        np.save(ids_path, train_ids)
    held_ids = encode_docs(enc, held_docs, eot)

    family, cfg, tr = recipe(a.recipe, V)
    cfg.update(bos_token_id=eot, eos_token_id=enc.specials["<|im_end|>"], pad_token_id=eot)
    for k in ("steps", "gate_steps", "batch", "beta", "embed_std"):
        if getattr(a, k) is not None:
            tr[k] = getattr(a, k)
    torch.manual_seed(a.seed)
    model = models.build(cfg)
    if tr["embed_std"] != 0.02:  # models.build initialises them at 0.02
        torch.nn.init.normal_(model.model.embed_tokens.weight, 0.0, tr["embed_std"])
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(),
                            lr=tr["lr"], betas=(0.9, 0.95), weight_decay=tr["weight_decay"])
    state = {"step": 0, "gate_step": 0, "tokens": 0, "elapsed": 0.0}
    gate_opt = None
    state_path = os.path.join(a.run_dir, "state.pt")
    if os.path.exists(state_path):
        saved = torch.load(state_path)
        if saved["config"] != cfg or saved["recipe"] != a.recipe:
            raise ValueError(f"{state_path}: written by another recipe/config; use a fresh --run-dir")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        if saved.get("gate_opt"):
            gate_opt = torch.optim.Adam([model.model.early_exit_gate.weight, model.model.early_exit_gate.bias],
                                        lr=tr["gate_lr"])
            gate_opt.load_state_dict(saved["gate_opt"])
        print(f"resumed {state_path}: step {state['step']}, gate step {state['gate_step']}, "
              f"{state['tokens']} tokens", flush=True)
    with open(os.path.join(a.run_dir, "run.json"), "w") as f:
        json.dump({"recipe": a.recipe, "argv": sys.argv, "config": cfg, "train": tr, "params": n_params,
                   "train_tokens": int(len(train_ids)), "heldout_tokens": int(len(held_ids)),
                   "seed": a.seed, "threads": a.threads}, f, indent=1)
    print(f"{a.recipe}: {n_params / 1e6:.2f}M params, {len(train_ids)} train tokens, {len(held_ids)} held-out, "
          f"{tr['steps']} steps x {tr['batch']}x{tr['seq_len']} tokens = {tr['steps'] * tr['batch'] * tr['seq_len'] / len(train_ids):.2f} epochs"
          + (f", then {tr['gate_steps']} gate steps" if family == "ouro" else ""), flush=True)

    batches = Batches(train_ids, tr["seq_len"], tr["batch"], a.seed)
    windows = heldout_windows(held_ids, tr["seq_len"], a.eval_windows)
    gate_batches = Batches(train_ids, tr["seq_len"], tr["batch"], a.seed + 7)
    log_path, eval_path = os.path.join(a.run_dir, "log.csv"), os.path.join(a.run_dir, "eval.csv")
    session_t0 = time.time()
    base_elapsed = state["elapsed"]
    last_ckpt = time.time()
    win_tokens, win_t0 = 0, time.time()

    def save(final=False):
        state["elapsed"] = base_elapsed + time.time() - session_t0
        ev = evaluate(model, family, windows)
        row = {"step": state["step"], "gate_step": state["gate_step"], "tokens": state["tokens"],
               "elapsed_s": round(state["elapsed"], 1)}
        row.update({(f"heldout_ce{t + 1}" if family == "ouro" else "heldout_ce"): round(v, 5) for t, v in enumerate(ev)})
        append_csv(eval_path, row)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "gate_opt": gate_opt.state_dict() if gate_opt else None, "state": state, "config": cfg,
                    "recipe": a.recipe}, state_path + ".tmp")
        os.replace(state_path + ".tmp", state_path)
        hf = os.path.join(a.run_dir, "hf")
        checkpoint.export(model, hf, "bf16")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(tok_dir, name), "rb") as src, open(os.path.join(hf, name), "wb") as dst:
                dst.write(src.read())
        if final and a.export:
            checkpoint.export(model, a.export, a.export_dtype)
            for name in ("tokenizer.json", "tokenizer_config.json"):
                with open(os.path.join(tok_dir, name), "rb") as src, open(os.path.join(a.export, name), "wb") as dst:
                    dst.write(src.read())
        plot(a.run_dir, family)
        print(f"checkpoint: step {state['step']} gate {state['gate_step']} tokens {state['tokens']} "
              f"held-out ce {' '.join(f'{v:.4f}' for v in ev)} "
              f"(ppl {' '.join(f'{math.exp(v):.2f}' for v in ev)})", flush=True)

    def progress(stage, i, total, loss, info):
        nonlocal win_tokens, win_t0
        dt = time.time() - win_t0
        tps = win_tokens / dt if dt > 0 else 0.0
        row = {"stage": stage, "step": state["step"], "gate_step": state["gate_step"], "tokens": state["tokens"],
               "elapsed_s": round(base_elapsed + time.time() - session_t0, 1), "loss": round(loss, 5),
               "lr": opt.param_groups[0]["lr"], "tok_s": round(tps, 1)}
        row.update({k: round(v, 5) for k, v in info.items()})
        append_csv(log_path if stage == 1 else os.path.join(a.run_dir, "log_gate.csv"), row)
        extra = " ".join(f"{k} {v:.3f}" for k, v in info.items())
        print(f"[stage {stage}] {i}/{total} loss {loss:.4f} {extra} | {tps:.0f} tok/s", flush=True)
        win_tokens, win_t0 = 0, time.time()

    stop_signal = []
    signal.signal(signal.SIGTERM, lambda *_: stop_signal.append(1))  # checkpoint, then exit

    def time_up():
        if stop_signal:
            return True
        return a.stop_after_minutes is not None and time.time() - t_start > 60 * a.stop_after_minutes

    model.train()
    while state["step"] < tr["steps"]:
        x, y = batches.get(state["step"])
        lr = lr_at(state["step"], tr["steps"], tr)
        for g in opt.param_groups:
            g["lr"] = lr
        out = model(x)
        if family == "ouro":
            loss, info = ouro_stage1(out, y, tr["beta"])
        else:
            loss = per_token_ce(out["logits"], y).mean()
            info = {}
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] += 1
        state["tokens"] += y.numel()
        win_tokens += y.numel()
        if state["step"] % a.log_every == 0 or state["step"] == tr["steps"]:
            progress(1, state["step"], tr["steps"], loss.item(), info)
        if time.time() - last_ckpt > 60 * a.ckpt_minutes:
            save()
            last_ckpt = time.time()
        if time_up():
            save()
            print("stopped (--stop-after-minutes or SIGTERM); re-run the same command to resume", flush=True)
            return 0

    if family == "ouro" and tr["gate_steps"] > 0:
        for p in model.parameters():
            p.requires_grad_(False)
        gate = model.model.early_exit_gate
        for p in gate.parameters():
            p.requires_grad_(True)
        if gate_opt is None:
            gate_opt = torch.optim.Adam(list(gate.parameters()), lr=tr["gate_lr"])
        while state["gate_step"] < tr["gate_steps"]:
            x, y = gate_batches.get(state["gate_step"])
            loss, info = ouro_stage2(model, x, y)
            gate_opt.zero_grad(set_to_none=True)
            loss.backward()
            gate_opt.step()
            state["gate_step"] += 1
            win_tokens += y.numel()
            if state["gate_step"] % a.log_every == 0 or state["gate_step"] == tr["gate_steps"]:
                progress(2, state["gate_step"], tr["gate_steps"], loss.item(), info)
            if time.time() - last_ckpt > 60 * a.ckpt_minutes:
                save()
                last_ckpt = time.time()
            if time_up():
                save()
                print("stopped (--stop-after-minutes or SIGTERM); re-run the same command to resume", flush=True)
                return 0
    save(final=True)
    print(f"done: {state['step']} steps, {state['gate_step']} gate steps, {state['tokens']} tokens, "
          f"{state['elapsed'] / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
