// What the OpenAI-client scripts of tests/serve share (choices, echo, json_output, logprobs): the
// client, failing with the script's name, and the check that refused requests get a 400 naming the
// field.
import OpenAI from "openai";

// The official client of the server at base (its /v1 URL), with $DCP_VK_API_KEY and no retries.
export const clientOf = (base) => new OpenAI({ baseURL: base, apiKey: process.env.DCP_VK_API_KEY || "none", maxRetries: 0 });

// fail(msg) prints "name: msg" on stderr and exits 1; check(ok, msg) fails unless ok.
export function checker(name) {
  const fail = (msg) => {
    console.error(`${name}: ${msg}`);
    process.exit(1);
  };
  const check = (ok, msg) => {
    if (!ok) fail(msg);
  };
  return { fail, check };
}

// Sends every [chat, extra, param, says] of bad (chat: a chat completion of "Hi", else a completion
// of prompt; max_tokens 2 and extra's fields) and requires each to fail with status 400 and that
// param, and its message to contain says when given (fail, check: the script's checker). Returns
// the params, in order.
export async function expectRefused(client, model, prompt, bad, { fail, check }) {
  const refused = [];
  for (const [chat, extra, param, says] of bad) {
    try {
      if (chat) await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, ...extra });
      else await client.completions.create({ model, prompt, max_tokens: 2, ...extra });
      fail(`${JSON.stringify(extra)} was accepted`);
    } catch (e) {
      if (!(e instanceof OpenAI.APIError)) throw e;
      check(e.status === 400 && e.param === param, `${JSON.stringify(extra)}: status ${e.status} param ${e.param} (want 400 ${param}): ${e.message}`);
      if (says) check(e.message.includes(says), `${param}: the message '${e.message}' does not say '${says}'`);
      refused.push(param);
    }
  }
  return refused;
}
