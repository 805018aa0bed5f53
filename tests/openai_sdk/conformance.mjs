// dspark serve judged by a real client: the official `openai` npm package (pinned in package.json)
// against a live server. Every call goes through the SDK (no retries, so a failure is not hidden);
// only /metrics and /health, which are not OpenAI endpoints, are read with fetch.
//
//   DSPARK_URL=http://127.0.0.1:8080 node tests/openai_sdk/conformance.mjs   # a running server
//   node tests/openai_sdk/run.mjs                                            # starts one (ctest)
//
// Prints one line per check, PASS or FAIL with the reason, and exits 1 if any check failed.
// Written for the bundled pair (models/ref-target.gguf + ref-draft.gguf, ChatML template) and
// --parallel 4; the texts it compares come from the server itself, never from this file.
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';

const BASE = (process.env.DSPARK_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
const client = new OpenAI({
  baseURL: `${BASE}/v1`,
  apiKey: process.env.DSPARK_API_KEY ?? 'no-key',
  maxRetries: 0,
  timeout: 30_000,
});

const CODE_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n';
const USER = [{ role: 'user', content: 'Write a Python function that adds two numbers.' }];
const LOAD_PROMPTS = [
  'import os\n\ndef walk(top):\n', 'class Stack:\n    def __init__(self):\n', 'def parse_args(argv):\n',
  'import json\n\ndef load(path):\n', 'def is_prime(n):\n', 'class Node:\n    def __init__(self, value):\n',
  'def merge(a, b):\n', 'import re\n\nPATTERN = re.compile(',
];
const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

let model = 'ref-target.gguf';
let failures = 0;

function describe(e) {
  let s;
  if (e instanceof OpenAI.APIError) {
    s = `HTTP ${e.status ?? '-'}${e.code ? ` ${e.code}` : ''}${e.param ? ` (param ${e.param})` : ''}: ${e.message}`;
  } else {
    s = e?.message ?? String(e);
  }
  s = s.replace(/\s+/g, ' ').trim();
  return s.length > 400 ? `${s.slice(0, 400)}...` : s;
}

async function check(name, fn) {
  const t0 = performance.now();
  try {
    await fn();
    console.log(`PASS ${name} (${Math.round(performance.now() - t0)} ms)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${describe(e)}`);
  }
}

const complete = (body, opts) => client.completions.create({ model, ...body }, opts);
const chat = (body, opts) => client.chat.completions.create({ model, ...body }, opts);

function assertUsage(u, maxCompletion) {
  assert.ok(u, 'usage is missing');
  assert.ok(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, `prompt_tokens ${u.prompt_tokens}`);
  assert.ok(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0, `completion_tokens ${u.completion_tokens}`);
  if (maxCompletion) assert.ok(u.completion_tokens <= maxCompletion, `completion_tokens ${u.completion_tokens} > max_tokens ${maxCompletion}`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens, 'total_tokens');
}

async function metricsText() {
  const r = await fetch(`${BASE}/metrics`);
  assert.equal(r.status, 200, '/metrics status');
  return r.text();
}

// The sum of the samples of every metric line that records a cancelled request: status 499 or a
// finish reason "cancelled" (whatever the metric's name).
function cancelledCount(text) {
  let n = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !/\{[^}]*("499"|cancel)[^}]*\}/.test(line)) continue;
    n += Number(line.trim().split(/\s+/).pop()) || 0;
  }
  return n;
}

async function streamText(iterable, field) {
  const chunks = [];
  let text = '';
  for await (const chunk of iterable) {
    chunks.push(chunk);
    const c = chunk.choices?.[0];
    if (c) text += field(c) ?? '';
  }
  return { chunks, text };
}

// ---------------------------------------------------------------------------------------------
await check('models.list', async () => {
  const page = await client.models.list();
  assert.ok(page.data.length >= 1, 'no model listed');
  assert.equal(page.data[0].object, 'model');
  model = page.data[0].id;
});

await check('completions: text and usage', async () => {
  const r = await complete({ prompt: CODE_PROMPT, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(typeof c.text, 'string');
  assert.ok(c.text.length > 0, 'empty text');
  assert.ok(['length', 'stop'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assertUsage(r.usage, 16);
});

await check('completions: logprobs 2', async () => {
  const r = await complete({ prompt: CODE_PROMPT, max_tokens: 8, temperature: 0, logprobs: 2 });
  const c = r.choices[0];
  const lp = c.logprobs;
  assert.ok(lp, 'choices[0].logprobs is null');
  const n = r.usage.completion_tokens;
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) {
    assert.ok(Array.isArray(lp[k]), `logprobs.${k} is not an array`);
    assert.equal(lp[k].length, n, `logprobs.${k} has ${lp[k].length} entries for ${n} tokens`);
  }
  assert.equal(lp.tokens.join(''), c.text, 'tokens do not spell the text');
  for (let i = 0; i < n; ++i) {
    assert.ok(typeof lp.token_logprobs[i] === 'number' && lp.token_logprobs[i] <= 0, `token_logprobs[${i}] ${lp.token_logprobs[i]}`);
    const top = Object.entries(lp.top_logprobs[i]);
    // OpenAI gives the `logprobs` most likely tokens, and may add the sampled one.
    assert.ok(top.length >= 2 && top.length <= 3, `top_logprobs[${i}] has ${top.length} entries`);
    for (const [, v] of top) assert.ok(v <= 0, `top_logprobs[${i}] value ${v}`);
    const best = Math.max(...top.map(([, v]) => v));
    assert.ok(lp.token_logprobs[i] <= best + 1e-6, `token ${i} more likely than its top_logprobs`);
    if (i > 0) {
      assert.equal(lp.text_offset[i] - lp.text_offset[i - 1], lp.tokens[i - 1].length, `text_offset[${i}]`);
    }
  }
  assert.ok([0, CODE_PROMPT.length].includes(lp.text_offset[0]), `text_offset[0] ${lp.text_offset[0]}`);
});

await check('chat: content and usage', async () => {
  const r = await chat({ messages: USER, max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0, 'empty content');
  assert.ok(['length', 'stop'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  assertUsage(r.usage, 16);
});

await check('chat: logprobs, top_logprobs 2', async () => {
  const r = await chat({ messages: USER, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
  const c = r.choices[0];
  const content = c.logprobs?.content;
  assert.ok(Array.isArray(content), 'choices[0].logprobs.content is not an array');
  assert.equal(content.length, r.usage.completion_tokens, 'one entry per token');
  assert.equal(content.map((t) => t.token).join(''), c.message.content, 'tokens do not spell the content');
  for (const [i, t] of content.entries()) {
    assert.ok(typeof t.logprob === 'number' && t.logprob <= 0, `content[${i}].logprob ${t.logprob}`);
    assert.ok(Array.isArray(t.bytes), `content[${i}].bytes`);
    assert.equal(t.top_logprobs.length, 2, `content[${i}].top_logprobs has ${t.top_logprobs.length} entries`);
    for (const alt of t.top_logprobs) {
      assert.equal(typeof alt.token, 'string');
      assert.ok(alt.logprob <= 0);
    }
  }
});

await check('completions: stream with include_usage equals the response', async () => {
  const body = { prompt: CODE_PROMPT, max_tokens: 24, temperature: 0 };
  const whole = await complete(body);
  const s = await complete({ ...body, stream: true, stream_options: { include_usage: true } });
  const { chunks, text } = await streamText(s, (c) => c.text);
  assert.ok(chunks.length >= 2, `${chunks.length} chunks`);
  assert.equal(text, whole.choices[0].text, 'streamed text');
  const finish = chunks.map((k) => k.choices?.[0]?.finish_reason).filter(Boolean);
  assert.deepEqual(finish, [whole.choices[0].finish_reason], 'finish_reason chunks');
  const last = chunks.at(-1);
  assertUsage(last.usage, 24);
  assert.equal(last.usage.completion_tokens, whole.usage.completion_tokens, 'usage.completion_tokens');
  assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens, 'usage.prompt_tokens');
});

await check('chat: stream with include_usage equals the response', async () => {
  const body = { messages: USER, max_tokens: 24, temperature: 0 };
  const whole = await chat(body);
  const s = await chat({ ...body, stream: true, stream_options: { include_usage: true } });
  const { chunks, text } = await streamText(s, (c) => c.delta?.content);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks.find((k) => k.choices?.[0]?.delta?.role)?.choices[0].delta.role, 'assistant', 'no delta.role');
  assert.equal(text, whole.choices[0].message.content, 'streamed content');
  const last = chunks.at(-1);
  assertUsage(last.usage, 24);
  assert.equal(last.usage.completion_tokens, whole.usage.completion_tokens, 'usage.completion_tokens');
});

await check('seed: same text alone and under load of 8 requests', async () => {
  const seeded = { prompt: 'import os\nimport sys\n\n', max_tokens: 48, temperature: 0.9, seed: 1234 };
  const alone = await complete(seeded);
  const load = (p) => complete({ prompt: p, max_tokens: 96, temperature: 0.9 });
  // Three others first, so the seeded request shares the batch with them, then five more.
  const first = LOAD_PROMPTS.slice(0, 3).map(load);
  await sleep(20);
  const again = complete(seeded);
  const rest = LOAD_PROMPTS.slice(3).map(load);
  const [underLoad, ...others] = await Promise.all([again, ...first, ...rest]);
  for (const o of others) assert.ok(o.choices[0].text.length > 0, 'a load request came back empty');
  assert.equal(underLoad.choices[0].text, alone.choices[0].text, 'seeded text differs under load');
  assert.equal(underLoad.seed ?? 1234, 1234, 'the seed echoed back differs');
});

await check('seed: an unseeded request returns the seed it drew', async () => {
  // (It seeds the request's sampling stream; only a request that sends a seed draws keyed, so
  // replaying it is not promised to give the same text under speculation: openai_schema.h.)
  const r = await complete({ prompt: CODE_PROMPT, max_tokens: 8, temperature: 0.9 });
  assert.ok(Number.isSafeInteger(r.seed) && r.seed >= 0, `seed field ${JSON.stringify(r.seed)}`);
});

await check('prompt cache: follow-up turn reuses the prefix, repeat gives the same answer', async () => {
  const turn1 = [
    { role: 'system', content: 'You are a careful Python programmer. Answer with code only.' },
    { role: 'user', content: 'Write a function that reverses a string.' },
  ];
  const a = await chat({ messages: turn1, max_tokens: 24, temperature: 0 });
  const turn2 = [...turn1, { role: 'assistant', content: a.choices[0].message.content },
    { role: 'user', content: 'Now make it recursive.' }];
  const b = await chat({ messages: turn2, max_tokens: 24, temperature: 0 });
  const cached = b.usage.prompt_tokens_details?.cached_tokens;
  assert.ok(Number.isInteger(cached), `usage.prompt_tokens_details.cached_tokens ${JSON.stringify(cached)}`);
  // The first turn's whole prompt is a prefix of the second's (give or take a token or two where
  // the answer's text joins the template's), so most of it must come from the cache.
  assert.ok(cached > a.usage.prompt_tokens / 2, `cached_tokens ${cached} for a first turn of ${a.usage.prompt_tokens} prompt tokens`);
  const c = await chat({ messages: turn2, max_tokens: 24, temperature: 0 });
  assert.equal(c.choices[0].message.content, b.choices[0].message.content, 'repeated request answered differently');
  assert.ok(c.usage.prompt_tokens_details.cached_tokens > b.usage.prompt_tokens / 2,
    `repeat: cached_tokens ${c.usage.prompt_tokens_details.cached_tokens} of ${b.usage.prompt_tokens}`);
});

await check('abort mid-stream: server stays healthy and counts the cancelled request', async () => {
  const before = cancelledCount(await metricsText());
  const ac = new AbortController();
  const s = await complete({ prompt: CODE_PROMPT, max_tokens: 1000, temperature: 0, stream: true,
    dspark: { ignore_eos: true } }, { signal: ac.signal });
  let chunks = 0;
  let finished = null;
  try {
    for await (const chunk of s) {
      // Chunks the client had already received before the abort may still come out of its buffer.
      if (++chunks === 1) ac.abort();
      finished ??= chunk.choices?.[0]?.finish_reason ?? null;
    }
  } catch (e) {
    if (!(e instanceof OpenAI.APIUserAbortError) && e?.name !== 'AbortError') throw e;
  }
  assert.ok(chunks >= 1, 'no chunk before the abort');
  assert.equal(finished, null, `the stream ran to its end (finish_reason ${finished}) after ${chunks} chunks`);
  let after = before;
  for (let i = 0; i < 50 && after <= before; ++i) {
    await sleep(100);
    after = cancelledCount(await metricsText());
  }
  assert.ok(after > before, `/metrics shows no new cancelled request (499 / cancelled: ${before} -> ${after})`);
  const h = await fetch(`${BASE}/health`);
  assert.equal(h.status, 200, '/health');
  const r = await complete({ prompt: CODE_PROMPT, max_tokens: 4, temperature: 0 });
  assert.ok(r.choices[0].text.length > 0, 'request after the abort');
});

await check('errors: unknown field is a 400 naming it', async () => {
  for (const call of [
    () => complete({ prompt: 'x', max_tokens: 1, frobnicate_level: 3 }),
    () => chat({ messages: USER, max_tokens: 1, frobnicate_level: 3 }),
  ]) {
    await assert.rejects(call, (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `not a BadRequestError: ${describe(e)}`);
      assert.equal(e.status, 400);
      assert.match(e.message, /frobnicate_level/);
      if (e.param != null) assert.equal(e.param, 'frobnicate_level');
      return true;
    });
  }
});

await check('chat: tool result turn renders (tool_calls + role tool)', async () => {
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21, "sky": "clear"}' },
  ];
  const r = await chat({ messages, tools: [WEATHER_TOOL], max_tokens: 8, temperature: 0 });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  assert.ok(r.usage.prompt_tokens > 100, `prompt_tokens ${r.usage.prompt_tokens}: the tools and the tool turn are not in the prompt`);
});

let toolCallContent;  // the message.content of the response below
await check('tools: tool_choice "required" gives a tool call', async () => {
  const r = await chat({ messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    tools: [WEATHER_TOOL], tool_choice: 'required', parallel_tool_calls: false, max_tokens: 128, temperature: 0 });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls', 'finish_reason');
  const calls = c.message.tool_calls;
  assert.ok(Array.isArray(calls) && calls.length >= 1, 'message.tool_calls is empty');
  assert.equal(calls[0].type, 'function');
  assert.equal(typeof calls[0].id, 'string');
  assert.equal(calls[0].function.name, 'get_weather');
  let args;
  assert.doesNotThrow(() => { args = JSON.parse(calls[0].function.arguments); },
    `arguments are not JSON: ${calls[0].function.arguments}`);
  assert.equal(typeof args, 'object');
  toolCallContent = c.message.content;
});

await check('tools: the tool call leaves no markup in message.content', async () => {
  assert.ok(toolCallContent !== undefined, 'the tool_choice "required" request failed');
  assert.ok(!(toolCallContent ?? '').includes('<tool_call'),
    `message.content keeps tool-call markup: ${JSON.stringify(toolCallContent)}`);
});

await check('response_format json_schema gives matching JSON', async () => {
  const r = await chat({
    messages: [{ role: 'user', content: 'Describe a person as JSON.' }], max_tokens: 200, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'x', strict: true, schema: {
      type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer' } },
      required: ['name', 'age'], additionalProperties: false } } },
  });
  const content = r.choices[0].message.content;
  let v;
  assert.doesNotThrow(() => { v = JSON.parse(content); }, `content is not JSON (finish_reason ${r.choices[0].finish_reason}): ${content}`);
  assert.deepEqual(Object.keys(v).sort(), ['age', 'name']);
  assert.equal(typeof v.name, 'string');
  assert.ok(Number.isInteger(v.age), `age ${v.age}`);
});

await check('completions: n=2 gives two choices', async () => {
  const r = await complete({ prompt: CODE_PROMPT, max_tokens: 8, temperature: 0.9, n: 2 });
  assert.equal(r.choices.length, 2, `${r.choices.length} choices`);
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
  for (const c of r.choices) assert.equal(typeof c.text, 'string');
  assertUsage(r.usage, 16);
});

console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exitCode = failures ? 1 : 0;
