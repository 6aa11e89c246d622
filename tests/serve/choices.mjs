// n choices per request through the official OpenAI JavaScript client (run by tests/test_serve.c):
//   node choices.mjs BASE_URL MODEL
// Completions and chat with n = 3, streaming and not: three choices with indexes 0, 1, 2; greedy
// (temperature 0) every choice's text is the n = 1 text; seeded sampling gives the same choices
// again (reproducible), choice 0 that of the request with n = 1 and the same seed, the streamed
// choices (chunks routed by index) those of the whole response; usage counts the prompt once and
// the completion tokens summed over the choices. Prints one JSON line; exits 1 with the reason on
// stderr when a check fails.
import { checker, clientOf } from "./util.mjs";

const [base, model] = process.argv.slice(2);
const client = clientOf(base);
const { fail, check } = checker("choices");

const N = 3;
const textOf = (chat, c) => (chat ? c.message.content : c.text);

async function whole(chat, body) {
  const r = chat
    ? await client.chat.completions.create({ model, messages: [{ role: "user", content: "Tell me a story." }], ...body })
    : await client.completions.create({ model, prompt: "Once upon a time", ...body });
  const n = body.n ?? 1;
  check(r.choices.length === n, `${chat ? "chat" : "completions"}: ${r.choices.length} choices, want ${n}`);
  r.choices.forEach((c, i) => check(c.index === i, `choice ${i} has index ${c.index}`));
  return { texts: r.choices.map((c) => textOf(chat, c)), finish: r.choices.map((c) => c.finish_reason), usage: r.usage };
}

async function streamed(chat, body) {
  const args = { ...body, stream: true, stream_options: { include_usage: true } };
  const s = chat
    ? await client.chat.completions.create({ model, messages: [{ role: "user", content: "Tell me a story." }], ...args })
    : await client.completions.create({ model, prompt: "Once upon a time", ...args });
  const n = body.n ?? 1;
  const texts = Array(n).fill(""), finish = Array(n).fill(null);
  let usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      check(Number.isInteger(c.index) && c.index >= 0 && c.index < n, `stream: chunk index ${c.index}`);
      check(finish[c.index] === null, `stream: choice ${c.index} has a chunk after its finish`);
      texts[c.index] += chat ? (c.delta?.content ?? "") : c.text;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  finish.forEach((f, i) => check(f !== null, `stream: choice ${i} never finished`));
  return { texts, finish, usage };
}

const out = {};
try {
  for (const chat of [false, true]) {
    const what = chat ? "chat" : "completions";
    const greedy = { max_tokens: 10, temperature: 0 };
    const one = await whole(chat, greedy);
    const g = await whole(chat, { ...greedy, n: N });
    const gs = await streamed(chat, { ...greedy, n: N });
    for (let i = 0; i < N; i++) {
      check(g.texts[i] === one.texts[0], `${what} greedy: choice ${i} '${g.texts[i]}' is not the n = 1 text '${one.texts[0]}'`);
      check(gs.texts[i] === one.texts[0], `${what} greedy stream: choice ${i} '${gs.texts[i]}' is not '${one.texts[0]}'`);
    }
    check(g.usage.prompt_tokens === one.usage.prompt_tokens, `${what}: prompt_tokens ${g.usage.prompt_tokens}, want ${one.usage.prompt_tokens} (once)`);
    check(g.usage.completion_tokens === N * one.usage.completion_tokens,
      `${what}: completion_tokens ${g.usage.completion_tokens}, want ${N} x ${one.usage.completion_tokens}`);
    check(gs.usage && gs.usage.completion_tokens === g.usage.completion_tokens, `${what} stream: usage ${JSON.stringify(gs.usage)}`);
    const seeded = { max_tokens: 12, temperature: 1.0, seed: 1234 };
    const s1 = await whole(chat, seeded);
    const a = await whole(chat, { ...seeded, n: N });
    const b = await whole(chat, { ...seeded, n: N });
    const st = await streamed(chat, { ...seeded, n: N });
    check(a.texts[0] === s1.texts[0], `${what} seeded: choice 0 '${a.texts[0]}' is not the n = 1 text '${s1.texts[0]}'`);
    for (let i = 0; i < N; i++) {
      check(a.texts[i] === b.texts[i], `${what} seeded: choice ${i} differs between runs`);
      check(a.texts[i] === st.texts[i], `${what} seeded: streamed choice ${i} '${st.texts[i]}' is not '${a.texts[i]}'`);
    }
    check(new Set(a.texts).size > 1, `${what} seeded: all ${N} choices are the same '${a.texts[0]}'`);
    out[what] = { greedy: g.texts[0], seeded: a.texts };
  }
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(`choices: ${e.status ?? ""} ${e.message}`);
  process.exit(1);
}
