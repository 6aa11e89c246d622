// The official OpenAI JavaScript client against dcp-vk-serve (run by tests/test_serve.c):
//   node openai_client.mjs BASE_URL MODEL REQUESTS.json [PARAMS.json]
// REQUESTS.json: [{"prompt": "...", "max_tokens": N}, ...]. Sends them all at once as streaming
// completions (greedy), plus one streaming chat completion and a models listing, then retrieves the
// model (and one that does not exist) and sends a value the server refuses (n: 17, over its limit of 16), and
// prints one JSON object: {"texts": [...], "finish": [...], "chat": "...", "chat_finish": "...",
// "models": [...], "retrieved": "...", "missing": {status, code}, "refused": {status, param},
// "params": [...]}.
// PARAMS.json: [{"chat": bool, "body": {...}}, ...] (sampling parameters: min_p, logit_bias,
// penalties, min_tokens, stop_token_ids, ...): each body sent as it is, streaming and not; its
// entry of "params" is {"text", "finish", "usage"} of the whole response and {"stream_text",
// "stream_finish"}, or {"status", "param"} when the server refused it.
// Any other client error exits 1 with the message on stderr.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [base, model, file] = process.argv.slice(2);
const requests = JSON.parse(readFileSync(file, "utf8"));
const client = new OpenAI({ baseURL: base, apiKey: process.env.DCP_VK_API_KEY || "none", maxRetries: 0 });

async function complete(r) {
  const stream = await client.completions.create({
    model,
    prompt: r.prompt,
    max_tokens: r.max_tokens,
    temperature: 0,
    stream: true,
  });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  return { text, finish };
}

async function chat() {
  const stream = await client.chat.completions.create({
    model,
    messages: [
      { role: "system", content: "You tell stories." },
      { role: "user", content: "Tell me about a cat." },
    ],
    max_tokens: 12,
    temperature: 0,
    stream: true,
  });
  let text = "";
  let finish = null;
  let role = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  if (role !== "assistant") throw new Error(`chat stream: role ${role}, want assistant`);
  return { text, finish };
}

// One body of PARAMS.json, both ways (the error of a refused one instead).
async function withParams(p) {
  const api = p.chat ? client.chat.completions : client.completions;
  try {
    const whole = await api.create({ model, ...p.body, stream: false });
    const ch = whole.choices[0];
    const stream = await api.create({ model, ...p.body, stream: true });
    let text = "";
    let finish = null;
    for await (const chunk of stream) {
      const c0 = chunk.choices[0];
      if (!c0) continue;
      text += (p.chat ? c0.delta.content : c0.text) ?? "";
      if (c0.finish_reason) finish = c0.finish_reason;
    }
    return {
      text: p.chat ? ch.message.content : ch.text,
      finish: ch.finish_reason,
      usage: whole.usage,
      stream_text: text,
      stream_finish: finish,
    };
  } catch (e) {
    if (e.status === undefined) throw e;
    return { status: e.status, param: e.param ?? null };
  }
}

try {
  const params = process.argv[5] ? JSON.parse(readFileSync(process.argv[5], "utf8")) : [];
  const [outs, c, models, withp] = await Promise.all([
    Promise.all(requests.map(complete)),
    chat(),
    client.models.list(),
    Promise.all(params.map(withParams)),
  ]);
  const ids = [];
  for await (const m of models) ids.push(m.id);
  const retrieved = await client.models.retrieve(model);
  let missing = null;
  try {
    await client.models.retrieve("no-such-model");
  } catch (e) {
    missing = { status: e.status ?? null, code: e.code ?? null };
  }
  let refused = null;
  try {
    await client.completions.create({ model, prompt: "Once", max_tokens: 4, n: 17 });
  } catch (e) {
    refused = { status: e.status ?? null, param: e.param ?? null };
  }
  console.log(JSON.stringify({
    texts: outs.map((o) => o.text),
    finish: outs.map((o) => o.finish),
    chat: c.text,
    chat_finish: c.finish,
    models: ids,
    retrieved: retrieved.id,
    missing,
    refused,
    params: withp,
  }));
} catch (e) {
  console.error(`openai client: ${e.status ?? ""} ${e.message}`);
  process.exit(1);
}
