// Encodes texts with @lenml/tokenizers (transformers.js) from a tokenizer directory written by
// train/bpe.py, and renders its chat template, for train/test_recipes.py to compare with
// fathom and with train/bpe.py's own encoder. Prints
//   {"encode": [[ids]...], "decode": [text...], "chat": [{"text", "ids"}...]}
// usage: node train/node_encode.mjs NODE_DIR TOKENIZER_DIR INPUT.json
//   NODE_DIR: the directory whose node_modules holds @lenml/tokenizers (tests/node)
//   INPUT.json: {"texts": [string...], "chats": [[{role, content}...]...]}
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [nodeDir, tokDir, inputPath] = process.argv.slice(2);
const req = createRequire(nodeDir + "/package.json");
const { TokenizerLoader } = await import(pathToFileURL(req.resolve("@lenml/tokenizers")).href);
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(tokDir + "/tokenizer.json", "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(tokDir + "/tokenizer_config.json", "utf8")),
});
const input = JSON.parse(readFileSync(inputPath, "utf8"));
const encode = input.texts.map((t) => Array.from(tok.encode(t, { add_special_tokens: true })));
const decode = encode.map((ids) => tok.decode(ids, { skip_special_tokens: false }));
const chat = input.chats.map((messages) => {
  const text = tok.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
  return { text, ids: Array.from(tok.encode(text, { add_special_tokens: false })) };
});
process.stdout.write(JSON.stringify({ encode, decode, chat }));
