// echo and prompt_logprobs on /v1/completions (and prompt_logprobs on chat) through the official OpenAI JavaScript client (run by
// tests/test_serve.c): node echo.mjs BASE_URL MODEL
// Checks: echo puts the prompt's text before the completion (max_tokens 0: the prompt alone); with
// logprobs N the prompt's tokens come first in the logprobs arrays, the first with null
// token_logprobs and top_logprobs, the tokens concatenating to the text, text_offset counting
// characters across prompt and completion; the completion part equals a request without echo; the
// prompt's logprobs are raw (a bias, penalties and temperature leave them as they are) and do not
// take prefix-cache blocks (cached_tokens 0 after the same prompt was cached); vLLM's
// prompt_logprobs k ([null, {id: {logprob, rank, decoded_token}}]) agrees with echo's values; a
// stream's first chunk carries the prompt and its entries; prompt_logprobs -1 (the whole
// vocabulary, ranked, agreeing with k's) and its size limit; prompt_logprobs on chat (beside the
// choices, over the templated prompt; a stream's first chunk); 400s naming the field. Prints one JSON
// line; exits 1 with the reason on stderr when a check fails.
import { checker, clientOf, expectRefused } from "./util.mjs";

const [base, model] = process.argv.slice(2);
const client = clientOf(base);
const { fail, check } = checker("echo");
const EPS = 1e-5;
const prompt =
  "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day, she saw a big red ball in the park.";
const out = {};

function checkEcho(what, c, n_prompt, n_gen, N) {
  const lp = c.logprobs;
  check(lp && Array.isArray(lp.tokens), `${what}: no logprobs`);
  const n = n_prompt + n_gen;
  for (const f of ["tokens", "token_logprobs", "top_logprobs", "text_offset"])
    check(lp[f].length === n, `${what}: ${f} has ${lp[f].length} entries, want ${n} (${n_prompt} prompt + ${n_gen})`);
  check(lp.token_logprobs[0] === null && lp.top_logprobs[0] === null, `${what}: the first prompt token has a logprob`);
  check(lp.tokens.join("") === c.text, `${what}: tokens '${lp.tokens.join("")}' are not the text '${c.text}'`);
  let off = 0;
  for (let i = 0; i < n; i++) {
    check(lp.text_offset[i] === off, `${what}: text_offset[${i}] ${lp.text_offset[i]}, want ${off}`);
    off += [...lp.tokens[i]].length;
    if (i === 0) continue;
    const x = lp.token_logprobs[i];
    check(Number.isFinite(x) && x <= EPS, `${what}: token_logprobs[${i}] ${x}`);
    const vals = Object.values(lp.top_logprobs[i]);
    check(vals.length >= Math.min(N, 1) && vals.length <= N + 1, `${what}: top_logprobs[${i}] has ${vals.length} for N ${N}`);
    check(vals.reduce((a, v) => a + Math.exp(v), 0) <= 1 + EPS, `${what}: top_logprobs[${i}] exp sum > 1`);
    if (lp.tokens[i] in lp.top_logprobs[i] && i < n_prompt)
      check(Math.abs(lp.top_logprobs[i][lp.tokens[i]] - x) < EPS, `${what}: prompt token ${i} in its top with another logprob`);
  }
}

// the plain completion, to compare with
const plain = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, logprobs: 2, ignore_eos: true });
const pc = plain.choices[0];
const P = plain.usage.prompt_tokens;

// echo + logprobs (the same prompt was just cached: prompt logprobs take no cached blocks)
const e = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, logprobs: 2, echo: true, ignore_eos: true });
const ec = e.choices[0];
check(ec.text === prompt + pc.text, `echo: text '${ec.text}', want the prompt + '${pc.text}'`);
checkEcho("echo", ec, P, e.usage.completion_tokens, 2);
check(e.usage.prompt_tokens_details.cached_tokens === 0, `echo: ${e.usage.prompt_tokens_details.cached_tokens} cached tokens`);
for (let i = 0; i < pc.logprobs.tokens.length; i++) {
  check(ec.logprobs.tokens[P + i] === pc.logprobs.tokens[i], `echo: generated token ${i} differs`);
  check(Math.abs(ec.logprobs.token_logprobs[P + i] - pc.logprobs.token_logprobs[i]) < EPS, `echo: generated logprob ${i} differs`);
}
const again = await client.completions.create({ model, prompt, max_tokens: 2, temperature: 0 });
out.cached_after = again.usage.prompt_tokens_details.cached_tokens;
check(out.cached_after > 0, `a plain request after found no cached tokens: the cache is not in use`);
out.echo = { prompt_tokens: P, entries: ec.logprobs.tokens.length, second: ec.logprobs.token_logprobs[1] };

// raw: a bias, penalties, a temperature change the completion, not the prompt's logprobs
const b = await client.completions.create({
  model, prompt, max_tokens: 3, temperature: 0.7, seed: 4, logit_bias: { 13: -100, 29: 5 }, presence_penalty: 1.5,
  repetition_penalty: 1.4, logprobs: 2, echo: true,
});
for (let i = 1; i < P; i++)
  check(Math.abs(b.choices[0].logprobs.token_logprobs[i] - ec.logprobs.token_logprobs[i]) < EPS, `raw: prompt logprob ${i} changed with sampling`);

// echo with max_tokens 0: the prompt alone, with and without logprobs
const z = await client.completions.create({ model, prompt, max_tokens: 0, echo: true, logprobs: 1 });
check(z.choices[0].text === prompt && z.usage.completion_tokens === 0, `max_tokens 0: '${z.choices[0].text}', ${z.usage.completion_tokens} tokens`);
check(z.choices[0].finish_reason === "length", `max_tokens 0: finish ${z.choices[0].finish_reason}`);
checkEcho("max_tokens 0", z.choices[0], P, 0, 1);
for (let i = 1; i < P; i++) check(Math.abs(z.choices[0].logprobs.token_logprobs[i] - ec.logprobs.token_logprobs[i]) < EPS, `max_tokens 0: prompt logprob ${i}`);
const z0 = await client.completions.create({ model, prompt, max_tokens: 0, echo: true });
check(z0.choices[0].text === prompt && z0.choices[0].logprobs === null, `echo without logprobs, max_tokens 0: ${JSON.stringify(z0.choices[0])}`);
const t = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, echo: true, ignore_eos: true });
check(t.choices[0].text === prompt + pc.text && t.choices[0].logprobs === null, `echo without logprobs: '${t.choices[0].text}'`);

// vLLM's prompt_logprobs: [null, {id: {logprob, rank, decoded_token}}], the prompt token first
const v = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, prompt_logprobs: 3, ignore_eos: true });
const pl = v.choices[0].prompt_logprobs;
check(v.choices[0].text === pc.text, `prompt_logprobs: the text changed`);
check(Array.isArray(pl) && pl.length === P && pl[0] === null, `prompt_logprobs: ${JSON.stringify(pl?.slice(0, 2))}`);
for (let i = 1; i < P; i++) {
  // (a JS object orders integer keys itself: the prompt token is found by its text and value)
  const entries = Object.entries(pl[i]);
  const own = entries.map(([, x]) => x).find((x) => x.decoded_token === ec.logprobs.tokens[i] && Math.abs(x.logprob - ec.logprobs.token_logprobs[i]) < EPS);
  check(own, `prompt_logprobs ${i}: no entry for the prompt token '${ec.logprobs.tokens[i]}' (${ec.logprobs.token_logprobs[i]}): ${JSON.stringify(pl[i])}`);
  const ranks = entries.map(([, x]) => x.rank);
  for (let r = 1; r <= 3; r++) check(ranks.includes(r), `prompt_logprobs ${i}: no rank ${r} in ${JSON.stringify(pl[i])}`);
  check(entries.length === 3 + (own.rank > 3 ? 1 : 0), `prompt_logprobs ${i}: ${entries.length} entries, rank ${own.rank}`);
  const top = entries.filter(([, x]) => x.rank === 1)[0][1];
  check(top.logprob >= own.logprob - EPS, `prompt_logprobs ${i}: rank 1 less likely than the token`);
}
out.prompt_logprobs = { positions: pl.length, second: pl[1] };

// streams: the first chunk carries the prompt (and its entries); the rest as the whole response
for (const [name, body] of [["stream", { max_tokens: 6, logprobs: 2 }], ["stream max_tokens 0", { max_tokens: 0, logprobs: 2 }]]) {
  const s = await client.completions.create({ model, prompt, temperature: 0, echo: true, ignore_eos: true, stream: true, ...body });
  let text = "", first = null;
  const lp = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const ch of s) {
    const x = ch.choices[0];
    if (first === null) first = x;
    text += x.text;
    if (x.logprobs) for (const f of Object.keys(lp)) lp[f].push(...x.logprobs[f]);
  }
  check(first.text === prompt, `${name}: first chunk '${first.text}'`);
  check(first.logprobs && first.logprobs.tokens.length === P, `${name}: first chunk has ${first.logprobs?.tokens.length} entries`);
  const whole = body.max_tokens ? ec : z.choices[0];
  check(text === whole.text, `${name}: text '${text}', whole '${whole.text}'`);
  check(JSON.stringify(lp.tokens) === JSON.stringify(whole.logprobs.tokens), `${name}: tokens differ`);
  check(JSON.stringify(lp.text_offset) === JSON.stringify(whole.logprobs.text_offset), `${name}: offsets differ`);
  for (let i = 1; i < lp.tokens.length; i++) check(Math.abs(lp.token_logprobs[i] - whole.logprobs.token_logprobs[i]) < EPS, `${name}: logprob ${i}`);
}

// prompt_logprobs -1: the whole vocabulary at each position, ranked; its first entries are those of k
// (the server runs with --max-prompt-logprobs-entries 32768: short prompts only)
function checkAll(what, pl, n_prompt, pk, k) {
  check(Array.isArray(pl) && pl.length === n_prompt && pl[0] === null, `${what}: ${JSON.stringify(pl?.slice(0, 1))}`);
  let V = 0;
  for (let i = 1; i < n_prompt; i++) {
    const xs = Object.values(pl[i]);
    if (i === 1) V = xs.length;
    check(V > 20 && xs.length === V, `${what} ${i}: ${xs.length} entries (position 1: ${V})`);
    const mass = xs.reduce((a, x) => a + Math.exp(x.logprob), 0);
    check(Math.abs(mass - 1) < 1e-3, `${what} ${i}: the probabilities sum to ${mass}`);
    // ranked: a larger rank is never more likely (the prompt token's own rank may repeat another's)
    const byRank = xs.slice().sort((a, b) => a.rank - b.rank);
    for (let j = 1; j < byRank.length; j++)
      check(byRank[j].logprob <= byRank[j - 1].logprob + EPS, `${what} ${i}: rank ${byRank[j].rank} more likely than rank ${byRank[j - 1].rank}`);
    // every entry of k's is here with the same logprob, rank and text
    for (const [id, x] of Object.entries(pk[i])) {
      const y = pl[i][id];
      check(y && Math.abs(y.logprob - x.logprob) < EPS && y.rank === x.rank && y.decoded_token === x.decoded_token,
        `${what} ${i}: token ${id} ${JSON.stringify(x)} (k ${k}) against ${JSON.stringify(y)}`);
    }
  }
  return V;
}
const shortPrompt = "Once upon a time, there was";
const a3 = await client.completions.create({ model, prompt: shortPrompt, max_tokens: 3, temperature: 0, prompt_logprobs: 3, ignore_eos: true });
const aAll = await client.completions.create({ model, prompt: shortPrompt, max_tokens: 3, temperature: 0, prompt_logprobs: -1, ignore_eos: true });
check(aAll.choices[0].text === a3.choices[0].text, `prompt_logprobs -1: the text changed`);
const PS = aAll.usage.prompt_tokens;
const V = checkAll("prompt_logprobs -1", aAll.choices[0].prompt_logprobs, PS, a3.choices[0].prompt_logprobs, 3);
// the prompt token's own entry (found by echo's text and logprob): rank = 1 + the tokens more likely
const eS = (await client.completions.create({ model, prompt: shortPrompt, max_tokens: 0, echo: true, logprobs: 0 })).choices[0].logprobs;
for (let i = 1; i < PS; i++) {
  const xs = Object.values(aAll.choices[0].prompt_logprobs[i]);
  const own = xs.find((x) => x.decoded_token === eS.tokens[i] && Math.abs(x.logprob - eS.token_logprobs[i]) < EPS);
  check(own, `prompt_logprobs -1 ${i}: no entry for the prompt token '${eS.tokens[i]}'`);
  const more = xs.filter((x) => x.logprob > own.logprob).length, atLeast = xs.filter((x) => x.logprob >= own.logprob).length;
  check(own.rank >= more + 1 && own.rank <= atLeast, `prompt_logprobs -1 ${i}: rank ${own.rank}, ${more} more likely, ${atLeast} at least as likely`);
}
out.prompt_logprobs_all = { positions: PS, vocabulary: V };

// chat: prompt_logprobs over the prompt after the chat template, beside the choices (vLLM's
// ChatCompletionResponse.prompt_logprobs); the content as without; a stream's first chunk
const messages = [{ role: "user", content: "Hi" }];
const c0 = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0 });
const c2 = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, prompt_logprobs: 2 });
const CP = c2.usage.prompt_tokens;
check(c2.choices[0].message.content === c0.choices[0].message.content, `chat prompt_logprobs: the content changed`);
check(c2.choices[0].prompt_logprobs === undefined, `chat: prompt_logprobs inside the choice`);
const cpl = c2.prompt_logprobs;
check(Array.isArray(cpl) && cpl.length === CP && cpl[0] === null, `chat prompt_logprobs: ${JSON.stringify(cpl?.slice(0, 2))}`);
for (let i = 1; i < CP; i++) {
  const xs = Object.values(cpl[i]), ranks = xs.map((x) => x.rank);
  check(ranks.includes(1) && ranks.includes(2) && xs.length >= 2 && xs.length <= 3, `chat prompt_logprobs ${i}: ${JSON.stringify(cpl[i])}`);
}
const cAll = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, prompt_logprobs: -1 });
check(cAll.choices[0].message.content === c0.choices[0].message.content, `chat prompt_logprobs -1: the content changed`);
checkAll("chat prompt_logprobs -1", cAll.prompt_logprobs, CP, cpl, 2);
const cz = await client.chat.completions.create({ model, messages, max_tokens: 0, prompt_logprobs: 1 });
check(cz.choices[0].message.content === "" && cz.choices[0].finish_reason === "length" && cz.usage.completion_tokens === 0,
  `chat max_tokens 0: ${JSON.stringify(cz.choices[0])}`);
check(JSON.stringify(cz.prompt_logprobs.map((d) => d && Object.keys(d).length)) !== "[]", `chat max_tokens 0: no prompt_logprobs`);
for (const k of [2, -1]) {
  const s = await client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0, prompt_logprobs: k, stream: true });
  let content = "", n = 0, first = null;
  for await (const ch of s) {
    if (n++ === 0) first = ch;
    else check(ch.prompt_logprobs === undefined, `chat stream ${k}: prompt_logprobs in chunk ${n}`);
    content += ch.choices[0]?.delta?.content ?? "";
  }
  const whole = k === 2 ? cpl : cAll.prompt_logprobs;
  check(JSON.stringify(first.prompt_logprobs) === JSON.stringify(whole), `chat stream ${k}: the first chunk's prompt_logprobs differ`);
  check(content === c0.choices[0].message.content, `chat stream ${k}: content '${content}'`);
}
// a completions stream with -1: the first chunk carries them
{
  const s = await client.completions.create({ model, prompt: shortPrompt, max_tokens: 3, temperature: 0, prompt_logprobs: -1, ignore_eos: true, stream: true });
  let first = null;
  for await (const ch of s) if (first === null) first = ch;
  check(JSON.stringify(first.choices[0].prompt_logprobs) === JSON.stringify(aAll.choices[0].prompt_logprobs), `stream -1: the first chunk's prompt_logprobs differ`);
}
out.chat_prompt_logprobs = { prompt_tokens: CP, second: cpl[1] };

// refused: 400 naming the field
const bad = [
  [false, { echo: "yes" }, "echo"],
  [false, { prompt_logprobs: 21 }, "prompt_logprobs"],
  [false, { prompt_logprobs: -2 }, "prompt_logprobs"],
  [false, { prompt: Array(4).fill(prompt).join(" "), prompt_logprobs: -1 }, "prompt_logprobs", "--max-prompt-logprobs-entries"],
  [false, { max_tokens: 0 }, "max_tokens"],
  [true, { prompt_logprobs: 21 }, "prompt_logprobs"],
  [true, { prompt_logprobs: 2, n: 2 }, "n"],
  [true, { echo: true }, "echo"],
];
out.refused = await expectRefused(client, model, prompt, bad, { fail, check });
console.log(JSON.stringify(out));
