// vLLM's metrics of dcp-vk-serve as a Prometheus scraper and vLLM's dashboards read them (run by
// tests/test_serve.c against a fresh server):
//   node vllm_metrics.mjs ROOT_URL MODEL N
// Reads /metrics before any request (every request histogram empty), sends N streaming completions
// at once with the official OpenAI client (max_tokens 4 + 3 i, ignore_eos, usage included), then
// reads /metrics again and checks it:
//  - the text format: every line a # HELP, a # TYPE or a sample `name{label="value",...} number`;
//    each family's HELP and TYPE come once, before its samples; a sample belongs to the family
//    declared last (histograms: NAME_bucket, NAME_sum, NAME_count);
//  - the vllm: names and types, each with model_name=MODEL and engine="0";
//  - histograms: le ascending and ending in +Inf, buckets cumulative (non-decreasing), +Inf equal
//    to _count, _sum within what the buckets allow (each observation between its bucket's bounds);
//  - _count N for the per-request histograms, the ITL count sum(tokens - 1) (one step, one token),
//    request_success{finished_reason="length"} N, prompt and generation token counters equal to the
//    usage the client got, decode sum = ITL sum, inference = prefill + decode, e2e >= queue + prefill
//    + decode, TTFT >= queue + prefill; gauges idle again (nothing running, waiting or held);
//  - the token-count histograms (1-2-5 bounds up to the context), and every series that vLLM's own
//    Grafana dashboard queries;
//  - the dcpvk_ metrics still there.
// Prints one JSON line (what it saw); exits 1 with the reason on stderr when a check fails.
import OpenAI from "openai";

const [root, model, nText] = process.argv.slice(2);
const N = Number(nText);

function fail(msg) {
  console.error(`vllm_metrics: ${msg}`);
  process.exit(1);
}

class FormatError extends Error {}

// Parses the Prometheus text format (0.0.4) strictly: {families: name -> {type, help, samples}};
// throws FormatError naming the line at the first fault.
function parse(text) {
  const fail = (msg) => {
    throw new FormatError(msg);
  };
  const families = new Map();
  let current = null;
  const nameRe = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
  const lines = text.split("\n");
  if (lines[lines.length - 1] !== "") fail("the text does not end with a newline");
  lines.pop();
  for (const [i, line] of lines.entries()) {
    const where = `line ${i + 1} '${line}'`;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
      if (!m) fail(`${where}: a comment that is neither HELP nor TYPE`);
      const [, kind, name, rest] = m;
      if (!nameRe.test(name)) fail(`${where}: bad metric name`);
      let f = families.get(name);
      if (!f) {
        f = { name, type: null, help: null, samples: [] };
        families.set(name, f);
      }
      if (f.samples.length) fail(`${where}: ${kind} after the family's samples`);
      if (kind === "HELP") {
        if (f.help !== null) fail(`${where}: a second HELP`);
        f.help = rest;
      } else {
        if (f.type !== null) fail(`${where}: a second TYPE`);
        if (!["counter", "gauge", "histogram", "summary", "untyped"].includes(rest)) fail(`${where}: type ${rest}`);
        f.type = rest;
      }
      current = f;
      continue;
    }
    if (line === "") fail(`${where}: an empty line`);
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!m) fail(`${where}: not a sample`);
    const [, name, , labelText, valueText] = m;
    const labels = {};
    if (labelText !== undefined && labelText !== "") {
      const lre = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/y;
      let at = 0;
      while (at < labelText.length) {
        lre.lastIndex = at;
        const lm = lre.exec(labelText);
        if (!lm) fail(`${where}: bad labels at '${labelText.slice(at)}'`);
        if (lm[1] in labels) fail(`${where}: label ${lm[1]} twice`);
        labels[lm[1]] = lm[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
        at = lre.lastIndex;
      }
    }
    if (!/^([+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]Inf|NaN)$/.test(valueText)) fail(`${where}: value`);
    const value = Number(valueText.replace("Inf", "Infinity"));
    if (!current) fail(`${where}: a sample before any TYPE`);
    const base = current.name;
    const ok =
      current.type === "histogram"
        ? [`${base}_bucket`, `${base}_sum`, `${base}_count`].includes(name)
        : name === base;
    if (!ok) fail(`${where}: not a sample of family ${base} (${current.type})`);
    if (current.type === null || current.help === null) fail(`${where}: family without HELP and TYPE`);
    current.samples.push({ name, labels, value });
  }
  return families;
}

// The parser itself refuses what a scraper would: each of these texts must throw.
const faulty = [
  "# TYPE a counter\na 1", // no newline at the end
  "a 1\n", // a sample without HELP / TYPE
  "# HELP a x\n# TYPE a counter\na{b=\"1\"\n", // unclosed labels
  "# HELP a x\n# TYPE a counter\na{b=\"1\",b=\"2\"} 1\n", // a label twice
  "# HELP a x\n# TYPE a counter\na one\n", // not a number
  "# HELP a x\n# TYPE a counter\nb 1\n", // a sample of another family
  "# HELP a x\n# TYPE a histogram\na_total 1\n", // not a histogram's sample
  "# HELP a x\n# TYPE a gauge\n# TYPE a gauge\na 1\n", // TYPE twice
  "# HELP a x\n# TYPE a gauge\na 1\n# HELP a y\n", // HELP after the samples
  "# HELP a x\n# TYPE a gauge\n\na 1\n", // an empty line
  "# HELP 1a x\n# TYPE 1a gauge\n1a 1\n", // a bad name
];
for (const t of faulty) {
  let threw = false;
  try {
    parse(t);
  } catch (e) {
    if (!(e instanceof FormatError)) throw e;
    threw = true;
  }
  if (!threw) fail(`the parser took a faulty text: ${JSON.stringify(t)}`);
}
parse('# HELP a x\n# TYPE a histogram\na_bucket{l="q\\"\\\\",le="+Inf"} 0\na_sum 0\na_count 0\n');

async function scrape() {
  const r = await fetch(`${root}/metrics`);
  if (r.status !== 200) fail(`/metrics: ${r.status}`);
  const ctype = r.headers.get("content-type") || "";
  if (!ctype.startsWith("text/plain")) fail(`/metrics content type ${ctype}`);
  try {
    return parse(await r.text());
  } catch (e) {
    if (e instanceof FormatError) fail(`/metrics is not the Prometheus text format: ${e.message}`);
    throw e;
  }
}

const wantLabels = { model_name: model, engine: "0" };
function sameLabels(labels, extra) {
  const want = { ...wantLabels, ...extra };
  const keys = Object.keys(labels);
  return keys.length === Object.keys(want).length && keys.every((k) => labels[k] === want[k]);
}

function family(fs, name, type) {
  const f = fs.get(name);
  if (!f) fail(`no family ${name}`);
  if (f.type !== type) fail(`${name}: type ${f.type}, want ${type}`);
  if (!f.help) fail(`${name}: empty HELP`);
  return f;
}

function scalar(fs, name, type, extra = {}) {
  const f = family(fs, name, type);
  const s = f.samples.filter((x) => sameLabels(x.labels, extra));
  if (s.length !== 1) fail(`${name}${JSON.stringify(extra)}: ${s.length} samples with model_name=${model}, engine=0`);
  if (f.samples.some((x) => x.labels.model_name !== model || x.labels.engine !== "0"))
    fail(`${name}: a sample without model_name=${model} / engine=0`);
  return s[0].value;
}

// A histogram's buckets checked; returns {count, sum}.
function histogram(fs, name) {
  const f = family(fs, name, "histogram");
  const buckets = [];
  let sum = null;
  let count = null;
  for (const x of f.samples) {
    const { le, ...rest } = x.labels;
    if (!sameLabels(rest, {})) fail(`${name}: labels ${JSON.stringify(x.labels)}`);
    if (x.name === `${name}_bucket`) {
      if (le === undefined) fail(`${name}_bucket without le`);
      buckets.push({ le: le === "+Inf" ? Infinity : Number(le), value: x.value, text: le });
    } else {
      if (le !== undefined) fail(`${x.name} with le`);
      if (x.name === `${name}_sum`) sum = x.value;
      else count = x.value;
    }
  }
  if (sum === null || count === null) fail(`${name}: no _sum or no _count`);
  if (buckets.length < 2 || buckets[buckets.length - 1].le !== Infinity) fail(`${name}: buckets do not end in +Inf`);
  let lo = 0;
  let hi = 0;
  for (let i = 0; i < buckets.length; i++) {
    const b = buckets[i];
    if (Number.isNaN(b.le)) fail(`${name}: le="${b.text}"`);
    const prev = i ? buckets[i - 1] : { le: 0, value: 0 };
    if (i && !(b.le > prev.le)) fail(`${name}: le ${b.text} after ${prev.text}`);
    if (b.value < prev.value) fail(`${name}: bucket le=${b.text} ${b.value} < ${prev.value} (not cumulative)`);
    const n = b.value - prev.value;
    lo += n * prev.le;
    hi += n * b.le;
  }
  if (buckets[buckets.length - 1].value !== count) fail(`${name}: +Inf bucket ${buckets.at(-1).value}, _count ${count}`);
  if (sum < 0 || sum < lo * (1 - 1e-9) || sum > hi * (1 + 1e-9))
    fail(`${name}: _sum ${sum} outside [${lo}, ${hi}] that the buckets allow`);
  return { count, sum, buckets: buckets.length };
}

const perRequest = [
  "vllm:time_to_first_token_seconds",
  "vllm:e2e_request_latency_seconds",
  "vllm:request_queue_time_seconds",
  "vllm:request_inference_time_seconds",
  "vllm:request_prefill_time_seconds",
  "vllm:request_decode_time_seconds",
  "vllm:request_time_per_output_token_seconds",
];

try {
  const before = await scrape();
  for (const name of [...perRequest, "vllm:inter_token_latency_seconds"]) {
    const h = histogram(before, name);
    if (h.count !== 0 || h.sum !== 0) fail(`${name} before any request: count ${h.count}, sum ${h.sum}`);
  }

  const client = new OpenAI({ baseURL: `${root}/v1`, apiKey: "none", maxRetries: 0 });
  const prompts = ["Once upon a time", "Lily saw a big", "The cat", "One day, Tom went to the park", "She was"];
  const usage = await Promise.all(
    Array.from({ length: N }, async (_, i) => {
      const stream = await client.completions.create({
        model,
        prompt: prompts[i % prompts.length],
        max_tokens: 4 + 3 * i,
        temperature: 0,
        ignore_eos: true,
        stream: true,
        stream_options: { include_usage: true },
      });
      let u = null;
      for await (const chunk of stream) if (chunk.usage) u = chunk.usage;
      if (!u || u.completion_tokens !== 4 + 3 * i) fail(`request ${i}: usage ${JSON.stringify(u)}`);
      return u;
    }),
  );
  const promptTokens = usage.reduce((a, u) => a + u.prompt_tokens, 0);
  const genTokens = usage.reduce((a, u) => a + u.completion_tokens, 0);

  const fs = await scrape();
  const seen = {};
  for (const name of perRequest) {
    const h = histogram(fs, name);
    if (h.count !== N) fail(`${name}_count ${h.count}, want ${N} (one per request)`);
    seen[name] = h;
  }
  // token counts per request: _sum the usage totals, bounds 1, 2, 5, ... up to the context
  const tokenHists = {
    "vllm:request_prompt_tokens": promptTokens,
    "vllm:request_generation_tokens": genTokens,
    "vllm:request_max_num_generation_tokens": genTokens,
  };
  for (const [name, total] of Object.entries(tokenHists)) {
    const h = histogram(fs, name);
    if (h.count !== N || h.sum !== total) fail(`${name}: count ${h.count} sum ${h.sum}, want ${N} and ${total}`);
    const les = family(fs, name, "histogram").samples.filter((x) => x.labels.le).map((x) => x.labels.le);
    if (les.join(",") !== "1.0,2.0,5.0,10.0,20.0,50.0,100.0,200.0,+Inf")
      fail(`${name}: le ${les.join(",")}, want 1-2-5 bounds up to the context (256)`);
  }
  // every series vLLM's Grafana dashboard queries (examples/observability/prometheus_grafana/grafana.json)
  const dashboard = [
    "vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:inter_token_latency_seconds_bucket", "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count", "vllm:num_requests_running", "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count", "vllm:kv_cache_usage_perc", "vllm:request_prompt_tokens_bucket",
    "vllm:request_generation_tokens_bucket", "vllm:request_success_total", "vllm:request_queue_time_seconds_sum",
    "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
    "vllm:request_max_num_generation_tokens_sum",
  ];
  const series = new Set([...fs.values()].flatMap((f) => f.samples.filter((x) => x.labels.model_name === model)
    .map((x) => x.name)));
  const absent = dashboard.filter((n) => !series.has(n));
  if (absent.length) fail(`series vLLM's dashboard queries, absent: ${absent.join(", ")}`);

  const itl = histogram(fs, "vllm:inter_token_latency_seconds");
  if (itl.count !== genTokens - N) fail(`ITL count ${itl.count}, want ${genTokens - N} (tokens - 1 per request)`);
  const bucketsOf = { ttft: seen["vllm:time_to_first_token_seconds"].buckets, itl: itl.buckets,
                      e2e: seen["vllm:e2e_request_latency_seconds"].buckets };
  if (bucketsOf.ttft !== 23 || bucketsOf.itl !== 20 || bucketsOf.e2e !== 22)
    fail(`bucket counts ${JSON.stringify(bucketsOf)}, want vLLM's 22, 19, 21 bounds and +Inf`);
  const S = (n) => seen[`vllm:${n}`].sum;
  const close = (a, b) => Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(a), Math.abs(b));
  if (!close(S("request_decode_time_seconds"), itl.sum))
    fail(`decode sum ${S("request_decode_time_seconds")} != ITL sum ${itl.sum} (the same gaps)`);
  if (!close(S("request_inference_time_seconds"), S("request_prefill_time_seconds") + S("request_decode_time_seconds")))
    fail("inference sum != prefill + decode");
  if (S("e2e_request_latency_seconds") + 1e-6 <
      S("request_queue_time_seconds") + S("request_prefill_time_seconds") + S("request_decode_time_seconds"))
    fail("e2e sum < queue + prefill + decode");
  if (S("time_to_first_token_seconds") + 1e-6 < S("request_queue_time_seconds") + S("request_prefill_time_seconds"))
    fail("TTFT sum < queue + prefill");
  if (!(S("request_decode_time_seconds") > 0)) fail("no decode time");

  const counters = {};
  for (const reason of ["stop", "length", "abort", "error"])
    counters[reason] = scalar(fs, "vllm:request_success_total", "counter", { finished_reason: reason });
  if (counters.length !== N || counters.stop + counters.abort + counters.error !== 0)
    fail(`request_success ${JSON.stringify(counters)}, want length ${N}`);
  const prompt = scalar(fs, "vllm:prompt_tokens_total", "counter");
  const gen = scalar(fs, "vllm:generation_tokens_total", "counter");
  if (prompt !== promptTokens || gen !== genTokens)
    fail(`token counters ${prompt} / ${gen}, the client's usage ${promptTokens} / ${genTokens}`);
  const preempt = scalar(fs, "vllm:num_preemptions_total", "counter");
  const running = scalar(fs, "vllm:num_requests_running", "gauge");
  const waiting = scalar(fs, "vllm:num_requests_waiting", "gauge");
  const kv = scalar(fs, "vllm:kv_cache_usage_perc", "gauge");
  if (running !== 0 || waiting !== 0 || kv !== 0) fail(`idle gauges: running ${running} waiting ${waiting} kv ${kv}`);
  for (const name of ["dcpvk_steps_total", "dcpvk_requests_running", "dcpvk_step_seconds"])
    if (!fs.has(name)) fail(`the dcpvk_ metric ${name} is gone`);
  console.log(JSON.stringify({
    requests: N, prompt_tokens: prompt, generation_tokens: gen, preemptions: preempt, itl_count: itl.count,
    sums: Object.fromEntries(Object.entries(seen).map(([k, v]) => [k, v.sum])), itl_sum: itl.sum,
  }));
} catch (e) {
  fail(`${e.status ?? ""} ${e.message}`);
}
