#include "serve/playground.h"

namespace dspark::serve {

namespace {
constexpr char kHtml[] = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dspark playground</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2330; }
  header { background: #1d2330; color: #fff; padding: 10px 18px; display: flex; gap: 16px; align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header span { opacity: .7; font-size: 13px; }
  main { max-width: 980px; margin: 16px auto; padding: 0 16px; }
  textarea { width: 100%; box-sizing: border-box; min-height: 110px; font: 14px ui-monospace, monospace; padding: 8px; }
  .row { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin: 8px 0; font-size: 13px; }
  .row input[type=number] { width: 80px; }
  button { padding: 6px 16px; font-size: 14px; cursor: pointer; }
  #out { white-space: pre-wrap; font: 14px/1.5 ui-monospace, monospace; background: #fff; border: 1px solid #d5d9e0;
         min-height: 160px; padding: 10px; margin-top: 8px; }
  .tok-draft { background: #c9f2d0; }
  .tok-target { background: #dde6ff; }
  .legend span { padding: 1px 6px; margin-right: 8px; }
  #stats { font: 13px ui-monospace, monospace; }
  #error { color: #b00020; white-space: pre-wrap; }
</style>
</head>
<body>
<header><h1>dspark playground</h1><span id="model">lossless speculative decoding</span></header>
<main>
  <div class="row">
    <label>API key <input id="key" type="password" placeholder="(if the server has --api-key)" size="28"></label>
    <label><input id="chat" type="checkbox"> chat (/v1/chat/completions)</label>
  </div>
  <textarea id="prompt" placeholder="Type a prompt...">def fibonacci(n):</textarea>
  <div class="row">
    <label>max_tokens <input id="max_tokens" type="number" value="128" min="1"></label>
    <label>temperature <input id="temperature" type="number" value="0" min="0" step="0.1"></label>
    <label>top_p <input id="top_p" type="number" value="1" min="0.01" max="1" step="0.05"></label>
    <label><input id="speculate" type="checkbox" checked> speculate</label>
    <button id="run">Run</button><button id="stop" disabled>Stop</button>
    <span id="status">idle</span>
  </div>
  <div class="row legend"><span class="tok-draft">accepted draft token</span><span class="tok-target">sampled by the target</span></div>
  <div id="stats">tokens 0 | 0.0 tok/s | tau 1.00</div>
  <div id="out"></div>
  <div id="error"></div>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let controller = null;

function setState(s) { $("status").textContent = s; document.body.dataset.state = s; }

function stats(n, nTarget, t0, tFirst, tau) {
  const secs = tFirst ? (performance.now() - tFirst) / 1000 : 0;
  const rate = secs > 0 && n > 1 ? (n - 1) / secs : 0;
  const liveTau = nTarget > 0 ? n / nTarget : 1;
  $("stats").textContent = "tokens " + n + " | " + rate.toFixed(1) + " tok/s | tau " +
      (tau !== undefined ? tau : liveTau).toFixed(2) + (tau !== undefined ? "" : " (live)");
}

async function run() {
  const key = $("key").value.trim();
  localStorage.setItem("dspark_key", key);
  const chat = $("chat").checked;
  const body = {
    max_tokens: parseInt($("max_tokens").value, 10),
    temperature: parseFloat($("temperature").value),
    top_p: parseFloat($("top_p").value),
    stream: true,
    dspark: { speculate: $("speculate").checked },
  };
  if (chat) body.messages = [{ role: "user", content: $("prompt").value }];
  else body.prompt = $("prompt").value;
  const headers = { "Content-Type": "application/json" };
  if (key) headers["Authorization"] = "Bearer " + key;
  $("out").textContent = ""; $("error").textContent = "";
  $("run").disabled = true; $("stop").disabled = false;
  setState("running");
  controller = new AbortController();
  let n = 0, nTarget = 0, tFirst = 0, finalTau;
  const t0 = performance.now();
  try {
    const res = await fetch(chat ? "/v1/chat/completions" : "/v1/completions",
                            { method: "POST", headers, body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      let msg = "HTTP " + res.status;
      try { msg += ": " + (await res.json()).error.message; } catch (e) {}
      throw new Error(msg);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let idx;
      while ((idx = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, idx); buf = buf.slice(idx + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          const choice = chunk.choices[0];
          const text = chat ? (choice.delta.content || "") : (choice.text || "");
          if (text) {
            const span = document.createElement("span");
            const src = chunk.dspark_source === "draft" ? "draft" : "target";
            span.className = "tok tok-" + src;
            span.textContent = text;
            $("out").appendChild(span);
            n++; if (src === "target") nTarget++;
            if (!tFirst) tFirst = performance.now();
          }
          if (chunk.dspark) finalTau = chunk.dspark.tau;
          if (chunk.usage) n = chunk.usage.completion_tokens;
          stats(n, nTarget, t0, tFirst, finalTau);
        }
      }
    }
    setState("done");
  } catch (e) {
    if (e.name === "AbortError") setState("stopped");
    else { $("error").textContent = String(e.message || e); setState("error"); }
  } finally {
    $("run").disabled = false; $("stop").disabled = true; controller = null;
  }
}

$("run").addEventListener("click", run);
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("key").value = localStorage.getItem("dspark_key") || "";

const q = new URLSearchParams(location.search);
if (q.has("prompt")) $("prompt").value = q.get("prompt");
if (q.has("max_tokens")) $("max_tokens").value = q.get("max_tokens");
if (q.has("temperature")) $("temperature").value = q.get("temperature");
if (q.has("key")) $("key").value = q.get("key");
if (q.get("chat") === "1") $("chat").checked = true;
setState("idle");
if (q.get("autorun") === "1") run();
</script>
</body>
</html>
)HTML";
}  // namespace

std::string_view PlaygroundHtml() { return std::string_view(kHtml, sizeof(kHtml) - 1); }

}  // namespace dspark::serve
