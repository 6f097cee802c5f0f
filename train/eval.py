#!/usr/bin/python3
"""Held-out perplexity of a trained checkpoint in PyTorch (train/models.py), teacher-forced.

    /usr/bin/python3 train/eval.py --model DIR --text-file F [--loops R | --exit-threshold Q] [--json]
        [--context N] [--layout last-exited|depth-indexed] [--all-depths] [--max-tokens N]

The same scoring as `fathom eval` and `reference.py --perplexity`: the text is encoded with
DIR/tokenizer.json, cut into non-overlapping windows of --context tokens (default the
model's max_position_embeddings, at most 1024), each window its own sequence; token 0 of a
window is only context, every later token is predicted from the ones before it in its
window.  Perplexity = exp(mean NLL over all predictions), natural log.

* No policy flag, or --loops R (Ouro): every token runs R loop steps (default total_ut_steps);
  this is one causal forward per window.  --all-depths reports R = 1 .. total_ut_steps from
  that forward (step t's logits lm_head(h_t)).
* --exit-threshold Q (Ouro): token by token through a per-(step, layer) KV cache, as served:
  token 0 of a window runs every step; each later token runs its steps reading the earlier
  tokens' K/V under --layout, and exits at the first step t where cumsum(p)_t >= Q (p the
  exit pdf of its own gates), else R; its logits are lm_head(h_t).  Layouts: last-exited
  (fathom eval's default: an exited token's step-(t-1) K/V stands in for its later steps)
  and depth-indexed (later steps of an exited token are holes, masked).
* Dense llama: one causal forward per window.
"""
import argparse
import json
import math
import os
import sys
import time

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import checkpoint  # noqa: E402
import fastmm  # noqa: E402
import models  # noqa: E402


def windows_of(ids, context):
    """Non-overlapping windows of `context` ids; a trailing window of one id predicts nothing."""
    return [ids[b : b + context] for b in range(0, len(ids) - 1, context) if len(ids[b : b + context]) >= 2]


def _batches(wins, batch):
    """Group windows of equal length (all but perhaps the last are `context` long)."""
    by_len = {}
    for w in wins:
        by_len.setdefault(len(w), []).append(w)
    for n, group in sorted(by_len.items(), reverse=True):
        for s in range(0, len(group), batch):
            yield torch.tensor(group[s : s + batch], dtype=torch.long)


@torch.no_grad()
def fixed_depth_nll(model, wins, loops, batch=16):
    """{depth: sum NLL} for depths 1..loops (ouro) or {0: sum} (dense), and the prediction count."""
    sums, n = {}, 0
    for x in _batches(wins, batch):
        inp, tgt = x[:, :-1], x[:, 1:]
        if isinstance(model, models.Ouro):
            for t, h in enumerate(model.states(inp, loops)):
                nll = F.cross_entropy(model.lm_head(h).reshape(-1, model.config["vocab_size"]), tgt.reshape(-1),
                                      reduction="sum")
                sums[t + 1] = sums.get(t + 1, 0.0) + nll.item()
        else:
            logits = model(inp)["logits"]
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="sum")
            sums[0] = sums.get(0, 0.0) + nll.item()
        n += tgt.numel()
    return sums, n


class DecodeKV:
    """K/V per (step r, layer l): [B, Hkv, T, D], and which (r, b, position) entries are readable."""

    def __init__(self, R, L, B, Hkv, T, D):
        self.k = [[torch.zeros(B, Hkv, T, D) for _ in range(L)] for _ in range(R)]
        self.v = [[torch.zeros(B, Hkv, T, D) for _ in range(L)] for _ in range(R)]
        self.valid = torch.zeros(R, B, T, dtype=torch.bool)


def _attend(layer, cfg, x, pos, kv, r, l, cos, sin):
    """One position `pos` for a batch: x [B, E] normed -> attention output [B, E]; writes K/V (r, l)."""
    att = layer.self_attn
    B = x.shape[0]
    H, Hkv, D = att.H, att.Hkv, att.D
    c, s = cos[pos : pos + 1], sin[pos : pos + 1]
    q = models.rope_neox(att.q_proj(x).view(B, H, 1, D), c, s)  # [B, H, 1, D]
    k = models.rope_neox(att.k_proj(x).view(B, Hkv, 1, D), c, s)
    v = att.v_proj(x).view(B, Hkv, 1, D)
    kv.k[r][l][:, :, pos : pos + 1] = k
    kv.v[r][l][:, :, pos : pos + 1] = v
    K, V = kv.k[r][l][:, :, : pos + 1], kv.v[r][l][:, :, : pos + 1]
    rep = H // Hkv
    if rep > 1:
        K, V = K.repeat_interleave(rep, dim=1), V.repeat_interleave(rep, dim=1)
    scores = (K * q).sum(-1) / math.sqrt(D)  # [B, H, pos+1]
    visible = kv.valid[r][:, : pos + 1].clone()
    visible[:, pos] = True
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    y = (probs[..., None] * V).sum(2)  # [B, H, D]
    return att.o_proj(y.reshape(B, H * D))


def _ouro_token(model, ids, pos, kv, cos, sin, R):
    """All R steps of the tokens ids [B] at `pos`: states [R, B, E] and lambdas [R, B]."""
    m = model.model
    h = m.embed_tokens(ids)
    hs, lams = [], []
    for r in range(R):
        for l, layer in enumerate(m.layers):
            a = _attend(layer, model.config, layer.input_layernorm(h), pos, kv, r, l, cos, sin)
            h = h + layer.input_layernorm_2(a)
            h = h + layer.post_attention_layernorm_2(layer.mlp(layer.post_attention_layernorm(h)))
        h = m.norm(h)
        hs.append(h)
        lams.append(model.gate(h))
    return torch.stack(hs), torch.stack(lams)


@torch.no_grad()
def exit_threshold_nll(model, wins, q, R, layout, batch=32):
    """(sum NLL, predictions, sum of depths) with each decode token exiting by its own gates."""
    cfg = model.config
    L = cfg["num_hidden_layers"]
    total, n, depth_sum = 0.0, 0, 0
    for x in _batches(wins, batch):
        B, T = x.shape
        cos, sin = models.rope_tables(T, cfg["head_dim"], cfg["rope_theta"])
        kv = DecodeKV(R, L, B, cfg["num_key_value_heads"], T, cfg["head_dim"])
        for pos in range(T - 1):
            hs, lams = _ouro_token(model, x[:, pos], pos, kv, cos, sin, R)
            if pos == 0:
                e = torch.full((B,), R, dtype=torch.long)  # the window's first token: every step
            else:
                cum = torch.cumsum(models.exit_pdf(lams), dim=0)  # [R, B]
                hit = cum >= q
                e = torch.where(hit.any(0), hit.float().argmax(0) + 1, torch.full((B,), R, dtype=torch.long))
            for r in range(R):
                written = e > r  # the token ran step r
                kv.valid[r, :, pos] = written if layout == "depth-indexed" else True
                if layout == "last-exited" and not bool(written.all()):
                    src = (e - 1).clamp(max=r)  # its last step's K/V stands in
                    for l in range(L):
                        for b in torch.nonzero(~written).flatten().tolist():
                            kv.k[r][l][b, :, pos] = kv.k[int(src[b])][l][b, :, pos]
                            kv.v[r][l][b, :, pos] = kv.v[int(src[b])][l][b, :, pos]
            h_exit = hs[e - 1, torch.arange(B)]  # [B, E]
            logits = model.lm_head(h_exit)
            total += F.cross_entropy(logits, x[:, pos + 1], reduction="sum").item()
            n += B
            if pos > 0:
                depth_sum += int(e.sum())
            else:
                depth_sum += B * R
    return total, n, depth_sum


def encode_file(model_dir, path, max_tokens=None):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    ids = bpe.Encoder(model_dir).encode(text)
    return ids[:max_tokens] if max_tokens else ids


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text-file", required=True)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--loops", type=int)
    g.add_argument("--exit-threshold", type=float)
    ap.add_argument("--context", type=int)
    ap.add_argument("--layout", default="last-exited", choices=["last-exited", "depth-indexed"])
    ap.add_argument("--all-depths", action="store_true", help="Ouro: report every fixed depth 1..R")
    ap.add_argument("--max-tokens", type=int, help="score only the first N tokens of the text")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    model, cfg = checkpoint.load(a.model)
    model.eval()
    ouro = isinstance(model, models.Ouro)
    R_max = int(cfg.get("total_ut_steps", 1)) if ouro else 0
    if (a.loops is not None or a.exit_threshold is not None or a.all_depths) and not ouro:
        raise SystemExit(f"{a.model}/config.json: model_type {cfg['model_type']!r} is not looped; "
                         "--loops / --exit-threshold / --all-depths need ouro")
    if a.loops is not None and not 1 <= a.loops:
        raise SystemExit(f"--loops {a.loops}: must be >= 1")
    context = a.context or min(int(cfg.get("max_position_embeddings", 1024)), 1024)
    ids = encode_file(a.model, a.text_file, a.max_tokens)
    wins = windows_of(ids, context)
    if not wins:
        raise SystemExit(f"{a.text_file}: fewer than 2 tokens")
    out = {"model": a.model, "text_file": a.text_file, "model_type": cfg["model_type"], "tokens": len(ids),
           "context": context}
    if a.exit_threshold is not None:
        total, n, dsum = exit_threshold_nll(model, wins, a.exit_threshold, R_max if a.loops is None else a.loops,
                                            a.layout, a.batch)
        out.update(exit_threshold=a.exit_threshold, layout=a.layout, predictions=n, mean_nll=total / n,
                   perplexity=math.exp(total / n), mean_depth=dsum / n)
    else:
        R = (a.loops or R_max) if ouro else 0
        sums, n = fixed_depth_nll(model, wins, max(R, R_max if a.all_depths else 0) or None, a.batch)
        key = R if ouro else 0
        out.update(loops=R if ouro else None, predictions=n, mean_nll=sums[key] / n, perplexity=math.exp(sums[key] / n),
                   mean_depth=float(R))
        if a.all_depths:
            out["per_depth"] = {str(t): {"mean_nll": s / n, "perplexity": math.exp(s / n)} for t, s in sorted(sums.items())}
    out["seconds"] = round(time.time() - t0, 1)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        desc = (f"exit threshold {a.exit_threshold} ({a.layout})" if a.exit_threshold is not None
                else (f"{out['loops']} loop steps" if ouro else "dense"))
        print(f"{a.model}: {out['predictions']} predictions in windows of {context}, {desc}: "
              f"perplexity {out['perplexity']:.4f} (mean NLL {out['mean_nll']:.5f}), mean depth {out['mean_depth']:.3f}")
        for t, v in (out.get("per_depth") or {}).items():
            print(f"  depth {t}: perplexity {v['perplexity']:.4f} (mean NLL {v['mean_nll']:.5f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
