// The official OpenAI JavaScript client against dcp-vk-serve (run by tests/test_serve.c):
//   node openai_client.mjs BASE_URL MODEL REQUESTS.json
// REQUESTS.json: [{"prompt": "...", "max_tokens": N}, ...]. Sends them all at once as streaming
// completions (greedy), plus one streaming chat completion and a models listing, then retrieves the
// model (and one that does not exist) and sends a parameter the server refuses (logit_bias), and
// prints one JSON object: {"texts": [...], "finish": [...], "chat": "...", "chat_finish": "...",
// "models": [...], "retrieved": "...", "missing": {status, code}, "refused": {status, param}}.
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

try {
  const [outs, c, models] = await Promise.all([
    Promise.all(requests.map(complete)),
    chat(),
    client.models.list(),
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
    await client.completions.create({ model, prompt: "Once", max_tokens: 4, logit_bias: { "432": -100 } });
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
  }));
} catch (e) {
  console.error(`openai client: ${e.status ?? ""} ${e.message}`);
  process.exit(1);
}
