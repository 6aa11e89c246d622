// logprobs through the official OpenAI JavaScript client (run by tests/test_serve.c):
//   node logprobs.mjs BASE_URL MODEL
// Completions ("logprobs": N) and chat ("logprobs": true, "top_logprobs": k), streaming and not,
// greedy and sampled; checks the shapes (one entry per generated token; completions' tokens,
// token_logprobs, top_logprobs, text_offset; chat's content [{token, logprob, bytes, top_logprobs}]),
// that the token texts concatenate to the output text, that exp of the top logprobs sums to <= 1,
// top lists sorted, the greedy token the most likely, the stream's entries those of the whole
// response, and 400s naming the field for values out of range. Prints one JSON line; exits 1 with
// the reason on stderr when a check fails.
import { checker, clientOf, expectRefused } from "./util.mjs";

const [base, model] = process.argv.slice(2);
const client = clientOf(base);
const { fail, check } = checker("logprobs");
const EPS = 1e-6;
const utf8 = (s) => [...Buffer.from(s, "utf8")];
const sumExp = (lps) => lps.reduce((a, x) => a + Math.exp(x), 0);

// completions: logprobs object of n entries
function checkCompletion(what, lp, text, n, N, greedy) {
  check(lp && Array.isArray(lp.tokens), `${what}: no logprobs object: ${JSON.stringify(lp)}`);
  for (const f of ["tokens", "token_logprobs", "top_logprobs", "text_offset"])
    check(Array.isArray(lp[f]) && lp[f].length === n, `${what}: ${f} has ${lp[f]?.length} entries, want ${n}`);
  check(lp.tokens.join("") === text, `${what}: tokens '${lp.tokens.join("")}' are not the text '${text}'`);
  let off = 0;
  for (let i = 0; i < n; i++) {
    check(lp.text_offset[i] === off, `${what}: text_offset[${i}] ${lp.text_offset[i]}, want ${off}`);
    off += [...lp.tokens[i]].length;
    const x = lp.token_logprobs[i];
    check(Number.isFinite(x) && x <= EPS, `${what}: token_logprobs[${i}] ${x}`);
    const top = lp.top_logprobs[i];
    const vals = Object.values(top);
    check(vals.length >= Math.min(N, 1) && vals.length <= N + 1, `${what}: top_logprobs[${i}] has ${vals.length} entries for N ${N}`);
    check(sumExp(vals) <= 1 + EPS, `${what}: top_logprobs[${i}] exp sums to ${sumExp(vals)}`);
    if (lp.tokens[i] in top) check(Math.abs(top[lp.tokens[i]] - x) < EPS, `${what}: token ${i} in its top with another logprob`);
    if (greedy && N > 0) check(x >= Math.max(...vals) - EPS, `${what}: greedy token ${i} (${x}) is not the most likely (${Math.max(...vals)})`);
  }
}

// chat: logprobs.content of n entries
function checkChat(what, lp, text, n, k, greedy) {
  check(lp && Array.isArray(lp.content), `${what}: no logprobs.content: ${JSON.stringify(lp)}`);
  check(lp.content.length === n, `${what}: ${lp.content.length} entries, want ${n}`);
  check(lp.content.map((c) => c.token).join("") === text, `${what}: tokens are not the text '${text}'`);
  for (const [i, c] of lp.content.entries()) {
    check(Number.isFinite(c.logprob) && c.logprob <= EPS, `${what}: entry ${i} logprob ${c.logprob}`);
    check(JSON.stringify(c.bytes) === JSON.stringify(utf8(c.token)), `${what}: entry ${i} bytes ${c.bytes}`);
    check(Array.isArray(c.top_logprobs) && c.top_logprobs.length === k, `${what}: entry ${i} has ${c.top_logprobs?.length} top, want ${k}`);
    for (const [j, t] of c.top_logprobs.entries()) {
      check(typeof t.token === "string" && JSON.stringify(t.bytes) === JSON.stringify(utf8(t.token)), `${what}: entry ${i} top ${j} token/bytes`);
      if (j) check(t.logprob <= c.top_logprobs[j - 1].logprob, `${what}: entry ${i} top not sorted`);
    }
    check(sumExp(c.top_logprobs.map((t) => t.logprob)) <= 1 + EPS, `${what}: entry ${i} top exp sum > 1`);
    if (greedy && k > 0) {
      check(Math.abs(c.top_logprobs[0].logprob - c.logprob) < EPS, `${what}: greedy entry ${i} is not the most likely`);
      check(c.top_logprobs[0].token === c.token, `${what}: greedy entry ${i}: top token '${c.top_logprobs[0].token}', chosen '${c.token}'`);
    }
  }
}

const prompt = "Once upon a time, there was a little";
const out = {};

// completions, greedy and sampled, whole and streamed
for (const [name, extra, N] of [["greedy", { temperature: 0 }, 5], ["sampled", { temperature: 0.8, seed: 7, top_k: 30 }, 3], ["zero", { temperature: 0 }, 0]]) {
  const body = { model, prompt, max_tokens: 12, ignore_eos: true, logprobs: N, ...extra };
  const r = await client.completions.create(body);
  const c = r.choices[0];
  checkCompletion(`completion ${name}`, c.logprobs, c.text, r.usage.completion_tokens, N, extra.temperature === 0);
  const s = await client.completions.create({ ...body, stream: true });
  let text = "";
  const lp = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const ch of s) {
    const x = ch.choices[0];
    text += x.text;
    if (x.logprobs) for (const f of Object.keys(lp)) lp[f].push(...x.logprobs[f]);
  }
  check(text === c.text, `completion ${name}: stream text '${text}', whole '${c.text}'`);
  checkCompletion(`completion ${name} stream`, lp, text, r.usage.completion_tokens, N, extra.temperature === 0);
  for (let i = 0; i < lp.tokens.length; i++)
    check(Math.abs(lp.token_logprobs[i] - c.logprobs.token_logprobs[i]) < EPS, `completion ${name}: stream logprob ${i} differs`);
  out[`completion_${name}`] = { text: c.text, tokens: c.logprobs.tokens.length, first: c.logprobs.token_logprobs[0] };
}

// chat, greedy and sampled, whole and streamed
for (const [name, extra, k] of [["greedy", { temperature: 0 }, 3], ["sampled", { temperature: 1.0, seed: 3 }, 20], ["nontop", { temperature: 0 }, 0]]) {
  const body = { model, messages: [{ role: "user", content: "Tell me about a cat." }], max_tokens: 10, logprobs: true, ...extra };
  if (k || name !== "nontop") body.top_logprobs = k;
  const r = await client.chat.completions.create(body);
  const c = r.choices[0];
  // a stop token that ended the text (the end of turn) has no entry
  const n = r.usage.completion_tokens - (c.finish_reason === "stop" ? 1 : 0);
  checkChat(`chat ${name}`, c.logprobs, c.message.content, n, k, extra.temperature === 0);
  const s = await client.chat.completions.create({ ...body, stream: true });
  let text = "";
  const content = [];
  for await (const ch of s) {
    const x = ch.choices[0];
    if (!x) continue;
    text += x.delta?.content ?? "";
    if (x.logprobs) content.push(...x.logprobs.content);
  }
  check(text === c.message.content, `chat ${name}: stream text '${text}', whole '${c.message.content}'`);
  checkChat(`chat ${name} stream`, { content }, text, n, k, extra.temperature === 0);
  for (let i = 0; i < n; i++) check(Math.abs(content[i].logprob - c.logprobs.content[i].logprob) < EPS, `chat ${name}: stream logprob ${i} differs`);
  out[`chat_${name}`] = { text: c.message.content, tokens: n };
}

// without logprobs: null
{
  const r = await client.completions.create({ model, prompt, max_tokens: 3 });
  check(r.choices[0].logprobs === null, `no logprobs asked: ${JSON.stringify(r.choices[0].logprobs)}`);
}

// out of range: 400 naming the field
const bad = [
  [false, { logprobs: 21 }, "logprobs"],
  [false, { logprobs: -1 }, "logprobs"],
  [false, { logprobs: true }, "logprobs"],
  [true, { logprobs: true, top_logprobs: 21 }, "top_logprobs"],
  [true, { logprobs: true, top_logprobs: -1 }, "top_logprobs"],
  [true, { top_logprobs: 2 }, "top_logprobs"],
  [true, { logprobs: 3 }, "logprobs"],
];
out.refused = await expectRefused(client, model, prompt, bad, { fail, check });
console.log(JSON.stringify(out));
