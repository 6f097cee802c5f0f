#!/usr/bin/python3
"""Byte-level BPE trainer (GPT-2 style), written as a Hugging Face tokenizer.json.

    /usr/bin/python3 train/bpe.py --out DIR [--vocab 4096] [--text-file F]   # default text: Brown train split

Algorithm: the text is split into pre-tokens with the GPT-2 regex (approximated with
Python's `re`: letters are [^\\W\\d_], numbers \\d; the written tokenizer.json carries the real
GPT-2 pattern, which is the same on ASCII text such as Brown), each pre-token's UTF-8 bytes
are mapped through GPT-2's bytes_to_unicode, and identical pre-tokens are counted once with
their frequency.  Merges are learned greedily: the most frequent adjacent pair (ties: the
smallest (left id, right id)) becomes a new token; pair counts are updated incrementally for
the words that contain the merged pair only, and a lazy max-heap finds the next pair.

Vocabulary: ids 0..255 the 256 byte symbols (in byte order), then one id per merge, then the
special tokens <|endoftext|>, <|im_start|>, <|im_end|> as the last three ids.

Files written to DIR:
  tokenizer.json         ByteLevel pre-tokenizer (add_prefix_space false, use_regex true: the
                         GPT-2 split), BPE model with vocab + merges, ByteLevel decoder, no
                         normalizer, ByteLevel post-processor (adds nothing), the special
                         tokens as added_tokens.
  tokenizer_config.json  bos/eos/pad = <|endoftext|> (chat: eos <|im_end|>), a ChatML chat_template.
"""
import argparse
import heapq
import json
import os
import re
import sys
import time
from collections import Counter

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PY_PATTERN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def pretokenize(text):
    # Python's \w includes '_', which GPT-2's \p{L}/\p{N} do not, hence (?:[^\s\w]|_) for
    # GPT-2's [^\s\p{L}\p{N}].
    return PY_PATTERN.findall(text)


def train(text, vocab_size, log=print):
    n_merges = vocab_size - 256 - len(SPECIALS)
    if n_merges < 0:
        raise ValueError(f"vocab {vocab_size} is smaller than 256 bytes + {len(SPECIALS)} specials")
    t0 = time.time()
    counts = Counter(pretokenize(text))
    words = [list(w.encode("utf-8")) for w in counts]
    freqs = list(counts.values())
    log(f"bpe: {sum(freqs)} pre-tokens, {len(words)} distinct ({time.time() - t0:.1f}s)")

    pair_count = Counter()
    where = {}
    for wi, (w, f) in enumerate(zip(words, freqs)):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            where.setdefault((a, b), set()).add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    next_id = 256
    while len(merges) < n_merges and heap:
        c, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -c or c == 0:
            continue  # stale entry
        new = next_id
        next_id += 1
        merges.append(pair)
        changed = {}
        for wi in list(where.get(pair, ())):
            w, f = words[wi], freqs[wi]
            for a, b in zip(w, w[1:]):
                pair_count[(a, b)] -= f
                changed[(a, b)] = True
                s = where.get((a, b))
                if s is not None:
                    s.discard(wi)
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                pair_count[(a, b)] += f
                changed[(a, b)] = True
                where.setdefault((a, b), set()).add(wi)
        for p in changed:
            n = pair_count.get(p, 0)
            if n > 0:
                heapq.heappush(heap, (-n, p))
            else:
                pair_count.pop(p, None)
                where.pop(p, None)
        pair_count.pop(pair, None)
        where.pop(pair, None)
    log(f"bpe: {len(merges)} merges ({time.time() - t0:.1f}s)")
    return merges


def tokenizer_files(merges):
    """(tokenizer.json dict, tokenizer_config.json dict) for the learned merges."""
    b2u = bytes_to_unicode()
    strings = [b2u[b] for b in range(256)]
    merge_strs = []
    for a, b in merges:
        merge_strs.append(f"{strings[a]} {strings[b]}")
        strings.append(strings[a] + strings[b])
    vocab = {s: i for i, s in enumerate(strings)}
    if len(vocab) != len(strings):
        raise RuntimeError("duplicate token strings in the learned vocabulary")
    first_special = len(strings)
    added = [{"id": first_special + k, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for k, s in enumerate(SPECIALS)]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merge_strs},
    }
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return tok, cfg


def write(out_dir, merges):
    os.makedirs(out_dir, exist_ok=True)
    tok, cfg = tokenizer_files(merges)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)


class Encoder:
    """A small encoder of the written tokenizer (rank-ordered merges per pre-token), used by
    the recipes and train/eval.py.  Special tokens written literally in the text are matched
    as such (as the added tokens of tokenizer.json are); the text between them is BPE-encoded."""

    def __init__(self, tok_dir):
        with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        self.vocab = tok["model"]["vocab"]
        self.ranks = {tuple(m.split(" ")): i for i, m in enumerate(tok["model"]["merges"])}
        self.specials = {a["content"]: a["id"] for a in tok["added_tokens"]}
        self.b2u = bytes_to_unicode()
        self.cache = {}

    def encode_word(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = [self.b2u[b] for b in word.encode("utf-8")]
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi : bi + 2] = [parts[bi] + parts[bi + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        out = []
        if self.specials:
            pattern = "(" + "|".join(re.escape(s) for s in sorted(self.specials, key=len, reverse=True)) + ")"
            pieces = re.split(pattern, text)
        else:
            pieces = [text]
        for k, piece in enumerate(pieces):
            if k % 2 == 1:
                out.append(self.specials[piece])
                continue
            for w in pretokenize(piece):
                out.extend(self.encode_word(w))
        return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--text-file", help="training text (default: the Brown training split, train/data.py)")
    a = ap.parse_args(argv)
    if a.text_file:
        with open(a.text_file, encoding="utf-8") as f:
            text = f.read()
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import data
        text = "\n\n".join(data.split()[0])
    write(a.out, train(text, a.vocab))
    print(f"wrote {a.out}/tokenizer.json and tokenizer_config.json (vocab {a.vocab})")


if __name__ == "__main__":
    sys.exit(main())
