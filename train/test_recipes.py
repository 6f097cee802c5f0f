#!/usr/bin/python3
"""CI check of the training recipes (ctest `train_recipes`), no network: a synthetic text.

    /usr/bin/python3 train/test_recipes.py --fathom build/fathom [--keep DIR]

1. Tokenizer: train/bpe.py on the synthetic text (vocabulary 300); `fathom tokenize`,
   @lenml/tokenizers (train/node_encode.mjs; skipped, and said so, without node) and
   bpe.Encoder give the same ids on awkward texts (unicode, digits, whitespace runs, special
   tokens written in the text); the ChatML template renders the same in fathom and node.
2. Every tiny recipe trains a few steps and exports f32 and bf16 HF checkpoints;
   tests/reference/reference.py's logits (Ouro: also lambda, pdf and every step's logits)
   equal train/models.py's on the f32 export, and `fathom logits --kv-dtype f32` equals
   reference.py, both within 1e-4 relative (max |diff| / max |ref|); `fathom generate` and
   reference.py load the bf16 export.
3. Resuming: 1 step, stop, resume to 4 steps gives the bytes of an uninterrupted 4-step run.
4. train/eval.py's perplexity equals `reference.py --perplexity` (fixed depths, exit
   thresholds under the last-exited and depth-indexed layouts, dense) within 1e-4 relative
   on the mean NLL, with the same mean depth; and `fathom eval --kv-dtype f32` where it runs.
5. L2A gates (train/l2a.py, docs/L2A_FORMAT.md): 3 steps on the tiny dense export, f32 and
   bf16 gate checkpoints; with routers made random (mixed decisions, changing with b), the
   export read back gives l2a.py's own logits, and reference.py --budget B gives the same
   logits (within 1e-4) and decisions at several b, and so does `fathom logits --budget B`;
   --eval (gated at two b's, static pruning, dense) on a few windows.
"""
import argparse
import csv
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import bpe  # noqa: E402
import checkpoint  # noqa: E402
import l2a  # noqa: E402
import train  # noqa: E402

REFERENCE = os.path.join(ROOT, "tests", "reference", "reference.py")
PY = "/usr/bin/python3"
FAILURES = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}", flush=True)
    if not ok:
        FAILURES.append(name)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def synthetic_text(seed=7, docs=24, sentences=14):
    """Seeded English-like documents separated by blank lines, one sentence per line."""
    rng = random.Random(seed)
    subj = ["The jury", "A farmer", "The committee", "Mr. Smith", "Our neighbours", "The old river", "Every student"]
    verb = ["said", "found", "reported", "believed", "announced", "doubted", "wrote"]
    obj = ["that the election was fair", "a new road to the city", "the price of bread in 1961",
           "nothing of interest", "three reasons, and then four more", "the answer (it was 42)"]
    tail = [".", "!", "?", " today.", ", however."]
    out = []
    for _ in range(docs):
        lines = [f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)}{rng.choice(tail)}" for _ in range(sentences)]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


AWKWARD = ["Hello world", "The jury said, \"It's 1961!\"  \n\n  ok", "naïve café — 東京 🙂 ",
           "a<|endoftext|>b <|im_start|>user", "it's  they'll I'd   x\ty\r\n", "__init__ foo_bar 12345 3.14",
           "   leading and trailing   ", "price: $3,000.50; (see p. 12)"]
CHATS = [[{"role": "user", "content": "Hello"}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Why?"}]]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def fathom_ids(fathom, model, text, chat=False):
    cmd = [fathom, "tokenize", "--model", model, "--text", text, "--json"] + (["--chat"] if chat else [])
    return json.loads(run(cmd).stdout)["ids"]


def test_tokenizer(fathom, work, text):
    tok = os.path.join(work, "tok")
    bpe.write(tok, bpe.train(text, 300, log=lambda *_: None))
    enc = bpe.Encoder(tok)
    with open(os.path.join(tok, "tokenizer.json")) as f:
        tj = json.load(f)
    check("tokenizer.json: 256 bytes + 41 merges + 3 specials", len(tj["model"]["vocab"]) == 297
          and len(tj["model"]["merges"]) == 41 and [a["id"] for a in tj["added_tokens"]] == [297, 298, 299])
    mine = [enc.encode(t) for t in AWKWARD]
    if fathom:
        theirs = [fathom_ids(fathom, tok, t) for t in AWKWARD]
        check("fathom tokenize == bpe.Encoder", theirs == mine, [i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b])
    node = shutil.which("node")
    node_dir = os.path.join(ROOT, "tests", "node")
    if node and os.path.isdir(os.path.join(node_dir, "node_modules", "@lenml", "tokenizers")):
        inp = os.path.join(work, "node_in.json")
        with open(inp, "w") as f:
            json.dump({"texts": AWKWARD, "chats": CHATS}, f)
        out = json.loads(run([node, os.path.join(HERE, "node_encode.mjs"), node_dir, tok, inp]).stdout)
        check("@lenml/tokenizers == bpe.Encoder", out["encode"] == mine,
              [i for i, (a, b) in enumerate(zip(out["encode"], mine)) if a != b])
        check("@lenml/tokenizers decodes back to the text", out["decode"] == AWKWARD)
        if fathom:
            f_chat = fathom_ids(fathom, tok, "Hello", chat=True)
            check("chat template: fathom --chat == node apply_chat_template", f_chat == out["chat"][0]["ids"],
                  f"{f_chat} vs {out['chat'][0]['ids']}")
        check("chat template renders ChatML", out["chat"][1]["text"].startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
              and out["chat"][1]["text"].endswith("<|im_start|>assistant\n"), repr(out["chat"][1]["text"][:60]))
    else:
        print("skip @lenml/tokenizers comparison: node or tests/node/node_modules missing", flush=True)
    return tok


def read_ref(out_dir, name, shape):
    return np.fromfile(os.path.join(out_dir, name), dtype="<f4").reshape(shape)


def test_recipe(fathom, work, recipe, text_file, tok):
    d = os.path.join(work, recipe)
    f32 = os.path.join(d, "f32")
    train.main(["--recipe", recipe, "--run-dir", d, "--text-file", text_file, "--tokenizer", tok,
                "--steps", "3", "--gate-steps", "2", "--export", f32, "--export-dtype", "f32",
                "--log-every", "100", "--eval-windows", "2"])
    model, cfg = checkpoint.load(f32)
    model.eval()
    V = cfg["vocab_size"]
    ids = [1, 17, 42, 200, 3, 99, 7, 150, 64, 5, 255, 0, 31, 298]  # longer than m + b: LCKV's parallel plan
    ref_dir = os.path.join(d, "ref")
    run([PY, REFERENCE, "--model", f32, "--ids", ",".join(map(str, ids)), "--out-dir", ref_dir])
    S = len(ids)
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    ref_logits = read_ref(ref_dir, "logits.f32", (S, V))
    check(f"{recipe}: models.py logits == reference.py", rel(out["logits"][0], ref_logits) <= 1e-4,
          f"{rel(out['logits'][0], ref_logits):.2e}")
    if cfg["model_type"] == "ouro":
        R = cfg["total_ut_steps"]
        for name, key, shape in (("ouro_lambda.f32", "lambda", (R, S)), ("ouro_pdf.f32", "pdf", (R, S)),
                                 ("ouro_step_logits.f32", "step_logits", (R, S, V))):
            e = rel(out[key][:, 0], read_ref(ref_dir, name, shape))
            check(f"{recipe}: models.py {key} == reference.py", e <= 1e-4, f"{e:.2e}")
    if fathom:
        fl = os.path.join(d, "fathom_logits.f32")
        run([fathom, "logits", "--model", f32, "--ids", ",".join(map(str, ids)), "--out", fl, "--kv-dtype", "f32"])
        e = rel(np.fromfile(fl, dtype="<f4").reshape(S, V), ref_logits)
        check(f"{recipe}: fathom logits == reference.py", e <= 1e-4, f"{e:.2e}")
        g = run([fathom, "generate", "--model", os.path.join(d, "hf"), "--prompt-ids", "1,2,3", "--max-tokens", "4"])
        check(f"{recipe}: fathom generate loads the bf16 export", "output ids" in g.stdout + g.stderr)
    run([PY, REFERENCE, "--model", os.path.join(d, "hf"), "--ids", "1,2,3", "--out-dir", os.path.join(d, "ref_bf16")])
    with open(os.path.join(d, "hf", "config.json")) as f:
        check(f"{recipe}: bf16 export config", json.load(f)["torch_dtype"] == "bfloat16")
    return f32


def test_resume(work, text_file, tok):
    a, b = os.path.join(work, "resume_a"), os.path.join(work, "resume_b")
    common = ["--recipe", "tiny-ouro", "--text-file", text_file, "--tokenizer", tok, "--steps", "4",
              "--gate-steps", "2", "--export-dtype", "f32", "--log-every", "1", "--eval-windows", "1"]
    train.main(common + ["--run-dir", a, "--export", os.path.join(a, "out")])
    train.main(common + ["--run-dir", b, "--stop-after-minutes", "0"])
    with open(os.path.join(b, "log.csv")) as f:
        check("resume: the first run stopped after one step", len(f.read().strip().splitlines()) == 2)
    train.main(common + ["--run-dir", b, "--export", os.path.join(b, "out")])
    with open(os.path.join(a, "out", "model.safetensors"), "rb") as fa, \
            open(os.path.join(b, "out", "model.safetensors"), "rb") as fb:
        check("resume: stopped and resumed == uninterrupted (same bytes)", fa.read() == fb.read())


def eval_json(args):
    return json.loads(run([PY, os.path.join(HERE, "eval.py"), "--json"] + args).stdout)


def reference_ppl(model, ids, extra, out_dir):
    run([PY, REFERENCE, "--model", model, "--ids", ",".join(map(str, ids)), "--perplexity", "--out-dir", out_dir]
        + extra)
    with open(os.path.join(out_dir, "perplexity.json")) as f:
        return json.load(f)


def test_eval(fathom, work, ouro_f32, dense_f32, text_file):
    # a random gate, scaled and centred on this text's states so that exits land at every depth
    # (a trained-for-3-steps model's states share one large common direction)
    model, cfg = checkpoint.load(ouro_f32)
    with open(text_file) as f:
        text = f.read()[:400]  # reference.py --perplexity is slow: a few windows
    ids = bpe.Encoder(ouro_f32).encode(text)
    with torch.no_grad():
        H = torch.cat([h[0] for h in model.states(torch.tensor([ids[:32]]))])  # [R*32, E]
        w = torch.randn(cfg["hidden_size"], generator=torch.Generator().manual_seed(0))
        z = H @ w
        w = w * (2.0 / z.std())
        model.model.early_exit_gate.weight.copy_(w[None])
        model.model.early_exit_gate.bias.fill_(-float((H @ w).mean()))
    m = os.path.join(work, "ouro_random_gate")
    checkpoint.export(model, m, "f32")
    for n in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ouro_f32, n), m)
    tf = os.path.join(work, "eval.txt")
    with open(tf, "w") as f:
        f.write(text)
    ctx = "32"
    cases = [(m, ["--loops", "1"], ["--loops", "1"]), (m, [], []), (dense_f32, [], [])]
    for q in ("0.3", "0.6"):
        for layout in ("last-exited", "depth-indexed"):
            cases.append((m, ["--exit-threshold", q, "--layout", layout], ["--exit-threshold", q, "--layout", layout]))
    depths_seen = set()
    for k, (model_dir, mine_args, ref_args) in enumerate(cases):
        mine = eval_json(["--model", model_dir, "--text-file", tf, "--context", ctx] + mine_args)
        ref = reference_ppl(model_dir, ids, ["--context", ctx] + ref_args, os.path.join(work, f"ppl{k}"))
        label = f"eval {os.path.basename(model_dir)} {' '.join(mine_args) or 'default'}"
        e = abs(mine["mean_nll"] - ref["mean_nll"]) / abs(ref["mean_nll"])
        check(f"{label}: train/eval.py == reference.py --perplexity", e <= 1e-4 and mine["predictions"] == ref["predictions"],
              f"{mine['mean_nll']:.6f} vs {ref['mean_nll']:.6f} ({e:.1e}), {mine['predictions']} predictions")
        if "--exit-threshold" in mine_args:
            check(f"{label}: mean depth", abs(mine["mean_depth"] - ref["mean_depth"]) < 1e-9,
                  f"{mine['mean_depth']:.4f} vs {ref['mean_depth']:.4f}")
            depths_seen.add(round(mine["mean_depth"], 3))
        if fathom:
            fe = subprocess.run([fathom, "eval", "--model", model_dir, "--text-file", tf, "--context", ctx,
                                 "--kv-dtype", "f32", "--threads", "1", "--json"]
                                + ref_args, capture_output=True, text=True)
            if fe.returncode == 0:
                fj = json.loads(fe.stdout)
                fn = fj.get("mean_nll", math.log(fj["perplexity"]) if "perplexity" in fj else math.nan)
                e = abs(fn - ref["mean_nll"]) / abs(ref["mean_nll"])
                check(f"{label}: fathom eval == reference.py --perplexity", e <= 1e-4, f"{fn:.6f} ({e:.1e})")
            else:
                print(f"note {label}: fathom eval failed: {fe.stderr.strip()[:200]}", flush=True)
    check("eval: the thresholds give different mean depths, inside (1, 4)", len(depths_seen) >= 2
          and all(1.05 < d < 3.95 for d in depths_seen), sorted(depths_seen))


def test_l2a(fathom, work, dense_f32, text_file):
    d = os.path.join(work, "l2a")
    f32 = os.path.join(d, "f32")
    common = ["--base", dense_f32, "--run-dir", d, "--text-file", text_file, "--steps", "3", "--batch", "2",
              "--router-hidden", "8", "--budget-features", "2", "--lora-rank", "2", "--log-every", "1",
              "--eval-windows", "1"]
    l2a.main(common + ["--export", f32, "--export-dtype", "f32"])
    with open(os.path.join(f32, "config.json")) as f:
        blk = json.load(f)["l2a"]
    check("l2a: config block", blk.get("version") == 1 and blk.get("skipped_attention_kv") == "compute"
          and blk.get("lora", {}).get("rank") == 2, blk)
    model, cfg = l2a.load(f32)
    # random routers, so that decisions are mixed and depend on b
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for r in model.routers:
            r.fc2.weight.copy_(torch.randn(r.fc2.weight.shape, generator=g) * 3.0 / math.sqrt(r.fc2.weight.shape[1]))
            r.fc2.bias.copy_(torch.randn(r.fc2.bias.shape, generator=g) * 0.5)
        for k, p in model.lora.items():  # a nonzero LoRA (B is zero at init and 3 steps barely move it)
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    m = os.path.join(d, "random")
    model.export(m, "f32", dense_f32)
    back, _ = l2a.load(m)
    model.eval()
    back.eval()
    ids = [1, 17, 42, 200, 3, 99, 7, 150, 64, 5, 255, 0, 31, 298]
    S, V, L = len(ids), cfg["vocab_size"], cfg["num_hidden_layers"]
    decided = []
    for b in (0.1, 0.5, 1.0):
        with torch.no_grad():
            out = back(torch.tensor([ids]), b=b, exact=True, need_gates=True)
            out0 = model(torch.tensor([ids]), b=b, exact=True)
        mine = out["logits"][0].numpy()
        dec = out["decisions"][0].numpy()  # [S, L, G]
        decided.append(dec)
        check(f"l2a b={b}: the export read back == the model written", rel(mine, out0["logits"][0]) <= 1e-6,
              f"{rel(mine, out0['logits'][0]):.1e}")
        rd = os.path.join(d, f"ref_b{b}")
        run([PY, REFERENCE, "--model", m, "--ids", ",".join(map(str, ids)), "--budget", str(b), "--out-dir", rd])
        e = rel(mine, read_ref(rd, "logits.f32", (S, V)))
        check(f"l2a b={b}: l2a.py logits == reference.py --budget", e <= 1e-4, f"{e:.2e}")
        # reference.py writes [L, S, G] (tests/reference/README.md); l2a.py's are [S, L, G]
        ref_dec = np.fromfile(os.path.join(rd, "l2a_decisions.f32"), dtype="<f4")
        check(f"l2a b={b}: decisions == reference.py's",
              ref_dec.size == dec.size and np.array_equal(ref_dec.reshape(L, S, dec.shape[2]), dec.transpose(1, 0, 2)),
              f"{int(dec.sum())} on of {dec.size}")
        if fathom:
            fl = os.path.join(d, f"fathom_b{b}.f32")
            fr = subprocess.run([fathom, "logits", "--model", m, "--ids", ",".join(map(str, ids)), "--out", fl,
                                 "--kv-dtype", "f32", "--budget", str(b)], capture_output=True, text=True)
            check(f"l2a b={b}: fathom logits --budget runs", fr.returncode == 0, fr.stderr.strip()[:300])
            if fr.returncode == 0:
                e = rel(np.fromfile(fl, dtype="<f4").reshape(S, V), read_ref(rd, "logits.f32", (S, V)))
                check(f"l2a b={b}: fathom logits --budget == reference.py", e <= 1e-4, f"{e:.2e}")
    frac = [float(x.mean()) for x in decided]
    check("l2a: the random routers give mixed decisions that change with b",
          all(0.05 < f < 0.95 for f in frac) and not all(np.array_equal(decided[0], x) for x in decided[1:]), frac)
    bf = os.path.join(d, "bf16")
    model.export(bf, "bf16", dense_f32)
    run([PY, REFERENCE, "--model", bf, "--ids", "1,2,3", "--budget", "0.5", "--out-dir", os.path.join(d, "ref_bf16")])
    check("l2a: reference.py loads the bf16 export", os.path.exists(os.path.join(d, "ref_bf16", "logits.f32")))
    l2a.main(["--base", dense_f32, "--run-dir", d, "--text-file", text_file, "--eval", "--model", m, "--context", "32",
              "--eval-tokens", "96", "--select-tokens", "64", "--budgets", "0.3,1.0"])
    with open(os.path.join(d, "eval", "l2a_eval.json")) as f:
        ev = json.load(f)
    check("l2a --eval: gated rows, the static path from nothing to everything dropped",
          len(ev["gated"]) == 2 and len(ev["static"]) == 2 * L + 1 and ev["static"][-1]["compute"] == 0.0
          and all(0.0 <= r["compute"] <= 1.0 for r in ev["gated"]), [round(r["compute"], 3) for r in ev["gated"]])
    # --anchor (a logistic loss toward the static path's decisions) from the static warm start,
    # with more rows at low b (--b-power): it trains and logs; and its sign: the warm start agrees
    # with the static path, so its anchor is far below that against the opposite decisions.
    sj = os.path.join(d, "eval", "static.json")
    d2 = os.path.join(work, "l2a_anchor")
    l2a.main(["--base", dense_f32, "--run-dir", d2, "--text-file", text_file, "--steps", "2", "--batch", "2",
              "--router-hidden", "8", "--budget-features", "2", "--lora-rank", "0", "--log-every", "1",
              "--eval-windows", "1", "--init-from-static", sj, "--anchor", "5", "--b-power", "2"])
    with open(os.path.join(d2, "log.csv")) as f:
        rows = list(csv.DictReader(f))
    check("l2a --anchor --b-power: trains and logs the anchor", len(rows) == 2
          and all(math.isfinite(float(r["anchor"])) and float(r["anchor"]) > 0 for r in rows), [r["anchor"] for r in rows])
    warm, _ = l2a.load(os.path.join(d2, "hf"))
    warm.eval()
    taus = l2a.static_taus(sj)
    for b in (0.25, 0.8):
        on = {(k, i): b > taus.get((k, i), -1.0) for k in ("attention", "mlp") for i in range(L)}
        opposite = {key: (2.0 if v else -1.0) for key, v in on.items()}  # off where the path is on, and back
        with torch.no_grad():
            right = float(warm(torch.tensor([ids]), b=b, anchor_taus=taus)["anchor"])
            wrong = float(warm(torch.tensor([ids]), b=b, anchor_taus=opposite)["anchor"])
        check(f"l2a --anchor b={b}: the warm start agrees with the static path", right < 0.5 * wrong,
              f"{right:.3f} vs {wrong:.3f} against the opposite decisions")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fathom", help="the fathom binary (its checks are skipped without it)")
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    work = a.keep or tempfile.mkdtemp(prefix="fathom-train-test-")
    os.makedirs(work, exist_ok=True)
    try:
        text = synthetic_text()
        text_file = os.path.join(work, "text.txt")
        with open(text_file, "w") as f:
            f.write(text)
        tok = test_tokenizer(a.fathom, work, text)
        exports = {}
        for recipe in ("tiny-ouro", "tiny-dense", "tiny-dense4x", "tiny-lckv-w2", "tiny-lckv-half"):
            exports[recipe] = test_recipe(a.fathom, work, recipe, text_file, tok)
        test_resume(work, text_file, tok)
        test_eval(a.fathom, work, exports["tiny-ouro"], exports["tiny-dense"], text_file)
        test_l2a(a.fathom, work, exports["tiny-dense"], text_file)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(FAILURES)} failed" + (f": {FAILURES}" if FAILURES else ""), flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
