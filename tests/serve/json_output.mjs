// JSON output (response_format) through the official OpenAI JavaScript client (run by tests/test_serve.c):
//   node json_output.mjs BASE_URL MODEL
// json_schema with a schema whose values are bounded (so the output must end within max_tokens):
// completions and chat, streamed and not, greedy and sampled: finish_reason "stop", the text parses
// with JSON.parse and matches the schema (checked here by a validator of the supported keywords),
// the stream's text is the whole response's. json_object: every output that ends with "stop"
// parses as an object; one cut by max_tokens says "length". Unsupported keywords: a 400 with param
// response_format naming the keyword. Prints one JSON line; exits 1 with the reason when a check fails.
import OpenAI from "openai";
import { checker, clientOf } from "./util.mjs";

const [base, model] = process.argv.slice(2);
const client = clientOf(base);
const { fail, check } = checker("json_output");

// The keywords dcp-vk-serve supports, checked on a parsed value; returns an error string or "".
function validate(v, s, path = "$") {
  if (s === true || s === undefined) return "";
  const typeOf = (x) => (x === null ? "null" : Array.isArray(x) ? "array" : Number.isInteger(x) ? "integer" : typeof x);
  if (s.type) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    const t = typeOf(v);
    if (!(types.includes(t) || (t === "integer" && types.includes("number")))) return `${path}: ${t} is not ${types}`;
  }
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) return `${path}: ${JSON.stringify(v)} not in enum`;
  if ("const" in s && JSON.stringify(s.const) !== JSON.stringify(v)) return `${path}: not the const`;
  if (typeOf(v) === "object") {
    for (const r of s.required || []) if (!(r in v)) return `${path}: required ${r} missing`;
    for (const [k, x] of Object.entries(v)) {
      if (s.properties && k in s.properties) {
        const e = validate(x, s.properties[k], `${path}.${k}`);
        if (e) return e;
      } else if (s.additionalProperties === false) return `${path}: additional property ${k}`;
      else if (typeof s.additionalProperties === "object") {
        const e = validate(x, s.additionalProperties, `${path}.${k}`);
        if (e) return e;
      }
    }
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) return `${path}: ${v.length} < minItems`;
    if (s.maxItems !== undefined && v.length > s.maxItems) return `${path}: ${v.length} > maxItems`;
    for (const [i, x] of v.entries()) {
      const e = validate(x, s.items, `${path}[${i}]`);
      if (e) return e;
    }
  }
  return "";
}

const schema = {
  type: "object",
  properties: {
    ok: { type: "boolean" },
    color: { enum: ["red", "green", "blue"] },
    count: { type: "integer" },
    marks: { type: "array", items: { const: "x" }, minItems: 1, maxItems: 2 },
  },
  required: ["ok", "color", "count", "marks"],
  additionalProperties: false,
};
const rf = { type: "json_schema", json_schema: { name: "thing", schema, strict: true } };
const out = { parsed: 0, refused: [], json_object: [] };

async function run(chat, body) {
  const full = chat
    ? { model, messages: [{ role: "user", content: "Describe a cat as JSON." }], ...body }
    : { model, prompt: "Once upon a time", ...body };
  const api = chat ? client.chat.completions : client.completions;
  const r = await api.create(full);
  const c = r.choices[0];
  const text = chat ? c.message.content : c.text;
  const s = await api.create({ ...full, stream: true });
  let st = "", finish = null;
  for await (const ch of s) {
    const x = ch.choices[0];
    if (!x) continue;
    st += (chat ? x.delta?.content : x.text) ?? "";
    if (x.finish_reason) finish = x.finish_reason;
  }
  check(st === text, `${chat ? "chat" : "completion"} ${JSON.stringify(body)}: stream '${st}' != whole '${text}'`);
  check(finish === c.finish_reason, `stream finish ${finish}, whole ${c.finish_reason}`);
  return { text, finish: c.finish_reason, tokens: r.usage.completion_tokens };
}

// json_schema: bounded values, so the output ends with "stop" and matches
for (const chat of [false, true])
  for (const sampling of [{ temperature: 0 }, { temperature: 1.5, seed: 11 }]) {
    const r = await run(chat, { max_tokens: 190, response_format: rf, ...sampling });
    check(r.finish === "stop", `json_schema ${chat} ${JSON.stringify(sampling)}: finish ${r.finish}: '${r.text}'`);
    let v;
    try {
      v = JSON.parse(r.text);
    } catch (e) {
      fail(`json_schema output does not parse: '${r.text}': ${e}`);
    }
    const err = validate(v, schema);
    check(!err, `json_schema output '${r.text}' does not match: ${err}`);
    out.parsed += 2; // the whole response and the stream
    if (!out.example) out.example = r.text;
  }

// json_object: what ends with "stop" parses as an object; max_tokens can cut it ("length")
for (const chat of [false, true])
  for (const seed of [1, 2]) {
    const r = await run(chat, { max_tokens: 60, response_format: { type: "json_object" }, temperature: 1.0, seed });
    check(r.text.trimStart().startsWith("{"), `json_object: '${r.text}' does not open an object`);
    if (r.finish === "stop") {
      let v;
      try {
        v = JSON.parse(r.text);
      } catch (e) {
        fail(`json_object output does not parse: '${r.text}': ${e}`);
      }
      check(v !== null && typeof v === "object" && !Array.isArray(v), `json_object: '${r.text}' is not an object`);
      out.parsed += 2;
    } else {
      check(r.finish === "length" && r.tokens === 60, `json_object: finish ${r.finish} after ${r.tokens} tokens`);
    }
    out.json_object.push(r.finish);
  }
{
  const r = await run(false, { max_tokens: 3, response_format: { type: "json_object" }, temperature: 0 });
  check(r.finish === "length", `json_object with max_tokens 3: finish ${r.finish} ('${r.text}')`);
}
// {"type": "text"}: as without
{
  const a = await run(false, { max_tokens: 8, temperature: 0 });
  const b = await run(false, { max_tokens: 8, temperature: 0, response_format: { type: "text" } });
  check(a.text === b.text, `response_format text changed the output: '${a.text}' vs '${b.text}'`);
}

// refused: 400, param response_format, the keyword named
const bad = [
  [{ type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "^a" } } }, "pattern"],
  [{ type: "json_schema", json_schema: { name: "x", schema: { properties: { a: { minLength: 2 } } } } }, "minLength"],
  [{ type: "json_schema", json_schema: { name: "x", schema: { anyOf: [{ type: "string" }] } } }, "anyOf"],
  [{ type: "json_schema", json_schema: { name: "x", schema: { type: "string", format: "date" } } }, "format"],
  [{ type: "json_schema", json_schema: { name: "x" } }, "schema"],
  [{ type: "yaml" }, "yaml"],
];
for (const chat of [false, true])
  for (const [format, word] of bad) {
    try {
      if (chat) await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, response_format: format });
      else await client.completions.create({ model, prompt: "Hi", max_tokens: 2, response_format: format });
      fail(`${JSON.stringify(format)} was accepted`);
    } catch (e) {
      if (!(e instanceof OpenAI.APIError)) throw e;
      check(e.status === 400 && e.param === "response_format" && e.message.includes(word),
        `${JSON.stringify(format)}: status ${e.status} param ${e.param} message '${e.message}' (want 400 response_format naming ${word})`);
      if (!chat) out.refused.push(word);
    }
  }
console.log(JSON.stringify(out));
