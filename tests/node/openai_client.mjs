// Drives `fathom serve` with the official `openai` npm client: completions and chat
// completions, streamed and not, plus the model list and an error. The expected texts come
// from the caller (the C++ test computes them one request at a time through the engine), so
// this script checks the server against a reference, not against itself.
//
//   node openai_client.mjs CASES.json
//
// CASES.json: {"base_url": "http://127.0.0.1:PORT/v1", "api_key": "...", "model": "...",
//              "cases": [{"name": "...", "kind": "completion"|"chat", "prompt": "...",
//                         "messages": [...], "max_tokens": N, "extra": {...},
//                         "expected_text": "...", "expected_prompt_tokens": N}]}
// Prints one line per check and exits 1 on the first mismatch.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
// Node's own fetch (undici, Node >= 18) instead of the client's default node-fetch@2. On a
// fresh Debian 12 machine (Node 18), node-fetch@2 failed a complete streamed response with
// "Premature close" (scripts/fresh-machine-check.sh, 2026-12-01), its known false positive
// when a keep-alive socket is closed after a complete chunked body (node-fetch#1767,
// nodejs/node#63989); the openai client takes `fetch` for this.
const client = new OpenAI({ baseURL: spec.base_url, apiKey: spec.api_key, maxRetries: 0, timeout: 120000,
                            ...(globalThis.fetch ? { fetch: globalThis.fetch } : {}) });

let failures = 0;
function check(cond, what) {
  if (cond) {
    console.log(`ok   ${what}`);
  } else {
    console.log(`FAIL ${what}`);
    failures++;
  }
}

function expectEqual(got, want, what) {
  check(got === want, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

async function runCase(c) {
  const base = { model: spec.model, max_tokens: c.max_tokens, temperature: 0, ...(c.extra || {}) };
  if (c.kind === "completion") {
    const r = await client.completions.create({ ...base, prompt: c.prompt });
    expectEqual(r.object, "text_completion", `${c.name} object`);
    expectEqual(r.choices.length, 1, `${c.name} choices`);
    expectEqual(r.choices[0].text, c.expected_text, `${c.name} text`);
    check(["stop", "length"].includes(r.choices[0].finish_reason), `${c.name} finish_reason ${r.choices[0].finish_reason}`);
    expectEqual(r.usage.prompt_tokens, c.expected_prompt_tokens, `${c.name} usage.prompt_tokens`);
    expectEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, `${c.name} usage.total_tokens`);

    const stream = await client.completions.create({ ...base, prompt: c.prompt, stream: true,
                                                     stream_options: { include_usage: true } });
    let text = "", finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices && chunk.choices.length > 0) {
        text += chunk.choices[0].text;
        if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
      }
    }
    expectEqual(text, c.expected_text, `${c.name} streamed text (${chunks} chunks)`);
    expectEqual(finish, r.choices[0].finish_reason, `${c.name} streamed finish_reason`);
    check(usage !== null && usage.completion_tokens === r.usage.completion_tokens,
          `${c.name} streamed usage ${JSON.stringify(usage)}`);
  } else {
    const r = await client.chat.completions.create({ ...base, messages: c.messages });
    expectEqual(r.object, "chat.completion", `${c.name} object`);
    expectEqual(r.choices[0].message.role, "assistant", `${c.name} role`);
    expectEqual(r.choices[0].message.content, c.expected_text, `${c.name} content`);
    expectEqual(r.usage.prompt_tokens, c.expected_prompt_tokens, `${c.name} usage.prompt_tokens`);

    const stream = await client.chat.completions.create({ ...base, messages: c.messages, stream: true });
    let text = "", role = null, finish = null;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta;
      if (d?.role) role = d.role;
      if (d?.content) text += d.content;
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    }
    expectEqual(role, "assistant", `${c.name} streamed role`);
    expectEqual(text, c.expected_text, `${c.name} streamed content`);
    expectEqual(finish, r.choices[0].finish_reason, `${c.name} streamed finish_reason`);
  }
}

try {
  const models = await client.models.list();
  check(models.data.some((m) => m.id === spec.model), `models.list has ${spec.model}`);
  for (const c of spec.cases) await runCase(c);
  // An error surfaces as the client's typed error with the server's message.
  try {
    await client.completions.create({ model: spec.model, prompt: "", max_tokens: 4 });
    check(false, "empty prompt rejected");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400, `empty prompt -> 400 (${e.status}: ${e.message})`);
  }
} catch (e) {
  console.log(`FAIL unexpected error: ${e.stack || e}`);
  failures++;
}
console.log(failures === 0 ? "all checks passed" : `${failures} check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
