#!/usr/bin/python3
"""Soak test: mixed OpenAI-API load on one live `dspark serve` with the DSpark drafter.

Starts `dspark serve -m models/ref-target.gguf --spec-type draft-dspark -md models/ref-dspark.gguf
--parallel 8` on a free loopback port (or targets --url), then runs --concurrency workers for
--duration seconds. Each worker loops picking a request type at random from a fixed mix (seeded by
--seed, so runs are comparable): completions and chat completions, streamed and not; streams
cancelled after a few chunks; ~5% malformed bodies; prompts of exactly n_ctx-1 tokens and just over
the limit; stop strings; seeded sampling (a few fixed requests re-sent throughout, whose text must
never change); logprobs; json_schema response_format; n=2. Every answer is checked against what the
request asked for (bench/soak/README.md lists the checks).

Prints Markdown tables: the bars, then counts and latencies per request type.

Bars: no response with status >= 500; the server alive at the end (its exit code if not); its RSS
after warm-up grown by at most 5% (the mean of the first post-warm-up minute, or first 20% of a
short run, against the last; the server runs with --cache-ram 128 so that the prompt cache's host
store fills during warm-up); `dspark:slots_busy` back to 0 after the load stops; seeded repeats
identical; malformed bodies and over-long prompts answered 400; no other unexpected answer.

    /usr/bin/python3 bench/soak/soak.py [--duration 600] [--concurrency 16] [--seed 1]
        [--url http://127.0.0.1:8080 [--pid PID]] [--dspark BIN] [--threads N] [--log-dir DIR] [--no-fail]

Standard library only. Exit status: 0 when every bar holds, 1 when one is missed (0 with
--no-fail), 2 when the soak itself fails (the server does not start, the models are missing).
"""
import argparse
import http.client
import json
import random
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from dspark_server import ServeError, ServeProcess, sse_chunks  # noqa: E402 -- needs the path above

SERVER_ARGS = ["-m", "models/ref-target.gguf", "--spec-type", "draft-dspark",
               "-md", "models/ref-dspark.gguf", "--parallel", "8"]
CODE_PROMPTS = ROOT / "bench/prompts/code-completion.jsonl"
HTTP_TIMEOUT = 120  # seconds for one request; the longest one here takes a few seconds

# The mix: request type -> weight (percent). Malformed bodies are 5%.
MIX = {
    "completion": 12, "completion_stream": 10, "chat": 10, "chat_stream": 10,
    "cancel_stream": 9, "malformed": 5, "ctx_at_limit": 4, "ctx_over_limit": 4,
    "stop": 8, "seeded": 8, "logprobs": 8, "json_schema": 6, "n2": 6,
}
STREAM_TYPES = {"completion_stream", "chat_stream", "cancel_stream"}


class SoakError(Exception):
    """A failure of the soak itself (no server, no models): exit status 2."""


# ---------------------------------------------------------------------------------------------
# HTTP

class Target:
    """Where the server listens."""

    def __init__(self, host, port):
        self.host, self.port = host, port

    def conn(self, timeout=HTTP_TIMEOUT):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, method, path, body=None, raw=None, timeout=HTTP_TIMEOUT):
        """(status, parsed JSON or None, raw bytes) on a fresh connection. `raw` sends bytes as they are."""
        c = self.conn(timeout)
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            c.request(method, path, body=data, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            payload = r.read()
            try:
                parsed = json.loads(payload) if payload else None
            except ValueError:
                parsed = None
            return r.status, parsed, payload
        finally:
            c.close()

    def metrics(self):
        status, _, payload = self.call("GET", "/metrics", timeout=10)
        if status != 200:
            raise SoakError(f"GET /metrics answered {status}")
        out = {}
        for line in payload.decode(errors="replace").splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out


def stream_request(target, path, body, stop_after=None):
    """Streams one request. Returns (status, result): result is the error JSON for a non-200, else a
    dict with texts per choice index, ttft (s to the first chunk with text), chunks, finish reasons,
    done ([DONE] seen), usage. With stop_after, closes the socket after that many data chunks."""
    c = target.conn()
    try:
        t0 = time.monotonic()
        c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            payload = r.read()
            try:
                return r.status, json.loads(payload)
            except ValueError:
                return r.status, {"raw": payload[:500].decode(errors="replace")}
        out = {"texts": {}, "ttft": None, "chunks": 0, "finish": {}, "done": False, "usage": None, "error": None}
        for chunk in sse_chunks(r):
            if chunk is None:
                out["done"] = True
                break
            if "error" in chunk:
                out["error"] = chunk["error"]
            out["chunks"] += 1
            if chunk.get("usage"):
                out["usage"] = chunk["usage"]
            for ch in chunk.get("choices", []):
                piece = ch.get("text")
                if piece is None:
                    piece = (ch.get("delta") or {}).get("content") or ""
                i = ch.get("index", 0)
                out["texts"][i] = out["texts"].get(i, "") + piece
                if piece and out["ttft"] is None:
                    out["ttft"] = time.monotonic() - t0
                if ch.get("finish_reason"):
                    out["finish"][i] = ch["finish_reason"]
            if stop_after is not None and out["chunks"] >= stop_after:
                break  # cancel: the socket closes in `finally`
        return 200, out
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# The server

class Server(ServeProcess):
    """One `dspark serve` child on a free loopback port; stop() also runs on SIGTERM/SIGINT."""

    def __init__(self, binary, extra, log_dir):
        super().__init__(binary, SERVER_ARGS + extra, Path(log_dir) / "server.log", cwd=ROOT)

    def start(self):
        for m in ("models/ref-target.gguf", "models/ref-dspark.gguf"):
            if not (ROOT / m).exists():
                raise SoakError(f"{m} is missing")
        try:
            super().start()
        except ServeError as e:
            raise SoakError(str(e)) from None
        return Target("127.0.0.1", self.port)

    def stop(self):
        """Stops the server; returns its exit code (None when it was never started)."""
        return super().stop(timeout=15)


def read_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------------------------
# Request builders

def load_prompts():
    prompts = []
    with open(CODE_PROMPTS) as f:
        for line in f:
            if line.strip():
                prompts.append(json.loads(line)["prompt"])
    return prompts


CHAT_QUESTIONS = [
    "Write a Python function that reverses a string.",
    "What does the `yield` keyword do?",
    "Explain list comprehensions with an example.",
    "How do I read a file line by line?",
    "hi",
    "Write a function that checks whether a number is prime.",
]

JSON_SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                               "maxItems": 3}},
     "required": ["ok", "tags"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "score": {"type": "number"}},
     "required": ["color"], "additionalProperties": False},
]

STOPS = [["\n\n"], ["\n"], ["return"], [":", "("], ["def ", "class "]]

# Malformed bodies: (path, raw bytes). Every one must be answered 400.
MALFORMED = [
    ("/v1/completions", b"{bad json"),
    ("/v1/completions", b""),
    ("/v1/completions", b"[]"),
    ("/v1/completions", b"null"),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 8'),
    ("/v1/completions", b'{"prompt": 5}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": "many"}'),
    ("/v1/completions", b'{"prompt": "x", "temperature": "hot"}'),
    ("/v1/completions", b'{"prompt": "x", "stream": "yes"}'),
    ("/v1/completions", b'{"prompt": "x", "stop": [1, 2]}'),
    ("/v1/completions", b'{"prompt": "x", "n": 0}'),
    ("/v1/completions", b'{"prompt": "x", "n": 99}'),
    ("/v1/completions", b'{"prompt": "x", "logprobs": 50}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": -3}'),
    ("/v1/completions", b'{"prompt": [99999999]}'),
    ("/v1/completions", b'{"prompt": "x", "unknown_field": 1}'),
    ("/v1/completions", b'{"prompt": "x", "dspark": {"speculat": false}}'),
    ("/v1/completions", b'{"messages": [{"role": "user", "content": "hi"}]}'),
    ("/v1/completions", b'{"prompt": "x", "response_format": {"type": "json_schema"}}'),
    ("/v1/completions", b'{"prompt": "x", "seed": 1.5}'),
    ("/v1/completions", b'{"prompt": "\\ud800"}'),
    ("/v1/chat/completions", b"{not json at all"),
    ("/v1/chat/completions", b'{"messages": "hi"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "prompt": "x"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "top_p": "all"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stream_options": {"x": 1}}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "logprobs": 3}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 99, "logprobs": true}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "frobnicate": true}'),
    ("/v1/chat/completions", b'{"messages": 42, "max_tokens": 4}'),
    ("/tokenize", b'{"content": 5}'),
    ("/tokenize", b'{"content": "x", "bogus": 1}'),
    ("/detokenize", b'{"tokens": ["a"]}'),
]


class Context:
    """What the workers share: the prompts built at start-up and the seeded references."""

    def __init__(self, target, n_ctx, prompts):
        self.target, self.n_ctx, self.prompts = target, n_ctx, prompts
        self.at_limit = []   # completion bodies whose prompt is n_ctx - 1 tokens
        self.over_limit = []  # completion bodies whose prompt is n_ctx or a little more
        self.seeded = []     # (label, path, body, streamed)
        self.seeded_ref = {}  # label -> first text
        self.seeded_lock = threading.Lock()

    def build_context_prompts(self):
        """Token-id prompts of exactly n_ctx - 1 (and n_ctx, n_ctx + 7) tokens, and text prompts
        whose /tokenize count (with BOS, as the completion endpoint adds it) is exactly that."""
        text = "\n".join(self.prompts)

        def count(s, special):
            status, body, _ = self.target.call("POST", "/tokenize", {"content": s, "add_special": special})
            if status != 200:
                raise SoakError(f"/tokenize answered {status}")
            return body["tokens"]
        n_special = len(count("x", True)) - len(count("x", False))  # BOS/EOS the endpoints add to text
        body_ids = count(text, False)
        if len(body_ids) < self.n_ctx + 300:
            raise SoakError(f"the prompt corpus has only {len(body_ids)} tokens, n_ctx is {self.n_ctx}")
        for off in (0, 97, 211):
            piece = body_ids[off:off + self.n_ctx + 8]
            self.at_limit.append({"prompt": piece[:self.n_ctx - 1], "max_tokens": 1, "temperature": 0})
            self.over_limit.append({"prompt": piece[:self.n_ctx], "max_tokens": 1})
            self.over_limit.append({"prompt": piece[:self.n_ctx + 7]})
        # Text prompts: detokenize a slice, count it as the server will, adjust the slice length.
        for off in (0, 150):
            k = self.n_ctx - 1 - n_special
            for _ in range(12):
                _, d, _ = self.target.call("POST", "/detokenize", {"tokens": body_ids[off:off + k]})
                s = d["content"]
                n = len(count(s, True))
                if n == self.n_ctx - 1:
                    self.at_limit.append({"prompt": s, "max_tokens": 1, "temperature": 0})
                    _, d2, _ = self.target.call("POST", "/detokenize", {"tokens": body_ids[off:off + k + 4]})
                    self.over_limit.append({"prompt": d2["content"], "max_tokens": 4})
                    break
                k += (self.n_ctx - 1) - n
        if not self.at_limit:
            raise SoakError("could not build a prompt of n_ctx - 1 tokens")

    def build_seeded(self):
        p = self.prompts
        self.seeded = [
            ("completion seed 7", "/v1/completions",
             {"prompt": p[3], "max_tokens": 48, "temperature": 0.9, "top_p": 0.95, "seed": 7}, False),
            ("completion seed 123456789", "/v1/completions",
             {"prompt": p[11], "max_tokens": 64, "temperature": 1.0, "seed": 123456789}, False),
            ("chat seed 42", "/v1/chat/completions",
             {"messages": [{"role": "user", "content": CHAT_QUESTIONS[0]}], "max_tokens": 48,
              "temperature": 0.8, "seed": 42}, False),
            ("completion stream seed 99", "/v1/completions",
             {"prompt": p[20], "max_tokens": 40, "temperature": 0.7, "top_k": 40, "seed": 99}, True),
        ]


# ---------------------------------------------------------------------------------------------
# Workers

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.count = {}        # type -> {status: n}
        self.latency = {}      # type -> [s] (non-streamed, 200)
        self.ttft = {}         # type -> [s] (streams)
        self.anomalies = []    # dicts: type, status, problem, path, body
        self.seeded_checks = 0
        self.seeded_mismatch = []

    def record(self, kind, status, latency=None, ttft=None):
        with self.lock:
            c = self.count.setdefault(kind, {})
            c[status] = c.get(status, 0) + 1
            if latency is not None:
                self.latency.setdefault(kind, []).append(latency)
            if ttft is not None:
                self.ttft.setdefault(kind, []).append(ttft)

    def anomaly(self, kind, status, problem, path, body):
        if isinstance(body, (bytes, bytearray)):
            body = body.decode(errors="replace")
        elif not isinstance(body, str):
            body = json.dumps(body)
        if len(body) > 400:
            body = body[:400] + f"... ({len(body)} chars)"
        with self.lock:
            self.anomalies.append({"type": kind, "status": status, "problem": problem, "path": path, "body": body})


def err_code(j):
    return ((j or {}).get("error") or {}).get("code")


def check_ok(stats, kind, status, j, path, body):
    """True when a normal request got a 200 carrying choices; records an anomaly otherwise."""
    if status == 200 and isinstance(j, dict) and j.get("choices"):
        return True
    stats.anomaly(kind, status, f"expected 200 with choices, got {status}: {json.dumps(j)[:300]}", path, body)
    return False


def run_one(kind, rng, ctx, stats):
    t = ctx.target
    p = ctx.prompts
    if kind in ("completion", "chat", "stop", "logprobs", "json_schema", "n2", "ctx_at_limit"):
        if kind == "completion":
            path = "/v1/completions"
            body = {"prompt": rng.choice(p), "max_tokens": rng.randint(8, 96),
                    "temperature": rng.choice([0, 0.7, 1.0])}
        elif kind == "chat":
            path = "/v1/chat/completions"
            body = {"messages": [{"role": "system", "content": "You are a helpful coding assistant."},
                                 {"role": "user", "content": rng.choice(CHAT_QUESTIONS)}],
                    "max_tokens": rng.randint(8, 96), "temperature": rng.choice([0, 0.8])}
        elif kind == "stop":
            path = "/v1/completions"
            body = {"prompt": rng.choice(p), "max_tokens": 96, "temperature": 0, "stop": rng.choice(STOPS)}
        elif kind == "logprobs":
            if rng.random() < 0.5:
                path = "/v1/completions"
                body = {"prompt": rng.choice(p), "max_tokens": rng.randint(4, 32), "logprobs": rng.randint(0, 5),
                        "temperature": rng.choice([0, 1.0])}
            else:
                path = "/v1/chat/completions"
                body = {"messages": [{"role": "user", "content": rng.choice(CHAT_QUESTIONS)}],
                        "max_tokens": rng.randint(4, 32), "logprobs": True, "top_logprobs": rng.randint(0, 5)}
        elif kind == "json_schema":
            path = "/v1/chat/completions"
            body = {"messages": [{"role": "user", "content": "Reply with a JSON object."}],
                    "max_tokens": 128, "temperature": rng.choice([0, 0.8]),
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "reply", "schema": rng.choice(JSON_SCHEMAS),
                                                        "strict": True}}}
        elif kind == "n2":
            if rng.random() < 0.5:
                path = "/v1/completions"
                body = {"prompt": rng.choice(p), "max_tokens": rng.randint(8, 48), "n": 2, "temperature": 0.9}
            else:
                path = "/v1/chat/completions"
                body = {"messages": [{"role": "user", "content": rng.choice(CHAT_QUESTIONS)}],
                        "max_tokens": rng.randint(8, 48), "n": 2, "temperature": 0.9}
        else:  # ctx_at_limit
            path = "/v1/completions"
            body = rng.choice(ctx.at_limit)
        t0 = time.monotonic()
        status, j, _ = t.call("POST", path, body)
        dt = time.monotonic() - t0
        stats.record(kind, status, latency=dt if status == 200 else None)
        if not check_ok(stats, kind, status, j, path, body):
            return
        ch = j["choices"]
        texts = [c.get("text") if "text" in c else (c.get("message") or {}).get("content") for c in ch]
        if kind == "stop":
            for c, s in zip(ch, texts):
                hit = [x for x in body["stop"] if x in (s or "")]
                if hit:
                    stats.anomaly(kind, status, f"text contains stop string {hit[0]!r}: {s!r}", path, body)
                if c.get("finish_reason") not in ("stop", "length"):
                    stats.anomaly(kind, status, f"finish_reason {c.get('finish_reason')!r}", path, body)
        elif kind == "logprobs":
            lp = ch[0].get("logprobs")
            n_gen = (j.get("usage") or {}).get("completion_tokens")
            if not lp:
                stats.anomaly(kind, status, "no logprobs in the response", path, body)
            elif path == "/v1/completions":
                toks = lp.get("tokens") or []
                if n_gen is not None and len(toks) != n_gen:
                    stats.anomaly(kind, status, f"{len(toks)} logprob tokens for {n_gen} completion tokens",
                                  path, body)
                if any(v is None or v > 1e-6 for v in lp.get("token_logprobs") or []):
                    stats.anomaly(kind, status, "a token logprob is missing or > 0", path, body)
            else:
                content = lp.get("content") or []
                if n_gen is not None and len(content) != n_gen:
                    stats.anomaly(kind, status, f"{len(content)} logprob entries for {n_gen} completion tokens",
                                  path, body)
                if any(len(e.get("top_logprobs") or []) != body["top_logprobs"] for e in content):
                    stats.anomaly(kind, status, "top_logprobs length differs from the request", path, body)
        elif kind == "json_schema":
            if ch[0].get("finish_reason") == "stop":
                try:
                    v = json.loads(texts[0])
                    if not isinstance(v, dict):
                        raise ValueError("not an object")
                    req = body["response_format"]["json_schema"]["schema"].get("required", [])
                    missing = [k for k in req if k not in v]
                    if missing:
                        stats.anomaly(kind, status, f"required keys missing {missing}: {texts[0]!r}", path, body)
                except (ValueError, TypeError) as e:
                    stats.anomaly(kind, status, f"content is not schema JSON ({e}): {texts[0]!r}", path, body)
        elif kind == "n2":
            if sorted(c.get("index") for c in ch) != [0, 1]:
                stats.anomaly(kind, status, f"choice indices {[c.get('index') for c in ch]}, wanted [0, 1]",
                              path, body)
        elif kind == "ctx_at_limit":
            pt = (j.get("usage") or {}).get("prompt_tokens")
            if pt != ctx.n_ctx - 1:
                stats.anomaly(kind, status, f"usage.prompt_tokens {pt}, wanted {ctx.n_ctx - 1}", path, body)
        return

    if kind in ("completion_stream", "chat_stream", "cancel_stream"):
        chat = kind == "chat_stream" or (kind == "cancel_stream" and rng.random() < 0.5)
        if chat:
            path = "/v1/chat/completions"
            body = {"messages": [{"role": "user", "content": rng.choice(CHAT_QUESTIONS)}]}
        else:
            path = "/v1/completions"
            body = {"prompt": rng.choice(p)}
        body.update(stream=True, temperature=rng.choice([0, 0.8]))
        stop_after = None
        if kind == "cancel_stream":
            body["max_tokens"] = 400  # long enough to be running when the socket closes
            stop_after = rng.randint(1, 6)
        else:
            body["max_tokens"] = rng.randint(8, 96)
            if rng.random() < 0.5:
                body["stream_options"] = {"include_usage": True}
        status, res = stream_request(t, path, body, stop_after)
        if status != 200:
            stats.record(kind, status)
            stats.anomaly(kind, status, f"expected 200, got {json.dumps(res)[:300]}", path, body)
            return
        stats.record(kind, "cancelled" if kind == "cancel_stream" else 200, ttft=res["ttft"])
        if kind == "cancel_stream":
            if res["error"]:
                stats.anomaly(kind, status, f"error chunk {res['error']}", path, body)
            return
        if res["error"]:
            stats.anomaly(kind, status, f"error chunk {res['error']}", path, body)
        elif not res["done"]:
            stats.anomaly(kind, status, "stream ended without [DONE]", path, body)
        elif 0 not in res["finish"]:
            stats.anomaly(kind, status, "no finish_reason in the stream", path, body)
        elif body.get("stream_options") and not res["usage"]:
            stats.anomaly(kind, status, "include_usage asked for but no usage chunk", path, body)
        return

    if kind == "malformed":
        path, raw = rng.choice(MALFORMED)
        status, j, payload = t.call("POST", path, raw=raw)
        stats.record(kind, status)
        if status != 400:
            stats.anomaly(kind, status, f"expected 400, got {status}: {payload[:300]!r}", path, raw)
        elif not err_code(j):
            stats.anomaly(kind, status, f"400 without an error object: {payload[:300]!r}", path, raw)
        return

    if kind == "ctx_over_limit":
        path = "/v1/completions"
        body = rng.choice(ctx.over_limit)
        status, j, payload = t.call("POST", path, body)
        stats.record(kind, status)
        if status != 400 or err_code(j) != "context_length_exceeded":
            stats.anomaly(kind, status, f"expected 400 context_length_exceeded, got {status}: {payload[:300]!r}",
                          path, body)
        return

    if kind == "seeded":
        label, path, body, streamed = rng.choice(ctx.seeded)
        t0 = time.monotonic()
        if streamed:
            status, res = stream_request(t, path, dict(body, stream=True))
            text = res["texts"].get(0) if status == 200 and res["done"] else None
            stats.record(kind, status, ttft=res["ttft"] if status == 200 else None)
        else:
            status, j, _ = t.call("POST", path, body)
            stats.record(kind, status, latency=time.monotonic() - t0 if status == 200 else None)
            text = None
            if check_ok(stats, kind, status, j, path, body):
                c = j["choices"][0]
                text = c["text"] if "text" in c else (c.get("message") or {}).get("content")
                if text is None:
                    stats.anomaly(kind, status, "no text in the seeded answer", path, body)
        if text is None:
            if streamed:
                stats.anomaly(kind, status, "seeded stream failed or had no [DONE]", path, body)
            return
        with ctx.seeded_lock:
            ref = ctx.seeded_ref.setdefault(label, text)
            stats.seeded_checks += 1
            if text != ref:
                stats.seeded_mismatch.append({"label": label, "first": ref, "now": text, "body": body})
        return

    raise AssertionError(kind)


def worker(idx, args, ctx, stats, deadline):
    rng = random.Random(args.seed * 1000 + idx)
    kinds, weights = list(MIX), list(MIX.values())
    while time.monotonic() < deadline:
        kind = rng.choices(kinds, weights)[0]
        try:
            run_one(kind, rng, ctx, stats)
        except (OSError, http.client.HTTPException, ValueError) as e:
            stats.record(kind, "conn-error")
            stats.anomaly(kind, None, f"{type(e).__name__}: {e}", "?", "(see the type's builder)")
            time.sleep(0.2)
        except Exception as e:  # a response shaped so that a check itself fails: keep the worker going
            stats.anomaly(kind, None, f"check raised {type(e).__name__}: {e}", "?", "(see the type's builder)")


# ---------------------------------------------------------------------------------------------
# Report

def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q / 100 * (len(v) - 1)))))]


def ms(x):
    return "-" if x is None else f"{x * 1000:.0f}"


def rss_windows(samples, warmup_s, load_s):
    """(first mean KiB, last mean KiB, window s, n first, n last) over the post-warm-up samples:
    the first and last minute, or 20% of the post-warm-up span when that is under five minutes."""
    post = [(t, r) for t, r in samples if warmup_s <= t <= load_s]
    if len(post) < 4:
        return None
    span = post[-1][0] - post[0][0]
    win = 60.0 if span >= 300 else max(0.2 * span, 1.0)
    first = [r for t, r in post if t <= post[0][0] + win]
    last = [r for t, r in post if t >= post[-1][0] - win]
    return statistics.mean(first), statistics.mean(last), win, len(first), len(last)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    ap.add_argument("--concurrency", type=int, default=16, help="client workers (default 16)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the request mix (default 1)")
    ap.add_argument("--url", help="target an existing server instead of starting one")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for the RSS bar")
    ap.add_argument("--dspark", default=str(ROOT / "build/bin/dspark"), help="the dspark binary")
    ap.add_argument("--threads", type=int, help="server threads (-t; default: the server's)")
    ap.add_argument("--cache-ram", type=int, default=128,
                    help="the server's --cache-ram in MiB (default 128: the prompt cache's host store fills "
                         "during warm-up and then evicts, so a flat RSS means no leak; the server's own "
                         "default, 2048, takes minutes to fill and its growth would mask one)")
    ap.add_argument("--server-args", default="", help="more flags for the server (e.g. --no-spec-adaptive)")
    ap.add_argument("--warmup", type=float, help="seconds of load before RSS counts (default: half the "
                                                 "run, at most 60)")
    ap.add_argument("--rss-tolerance", type=float, default=0.05,
                    help="RSS bar: most growth from the first to the last window (default 0.05: 5%%)")
    ap.add_argument("--log-dir", help="server log and anomalies.json (default: a temporary folder)")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 even when a bar is missed")
    args = ap.parse_args()

    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="dspark-soak-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    warmup = args.warmup if args.warmup is not None else min(60.0, 0.5 * args.duration)

    server = None
    pid = args.pid
    stop_flag = {"stop": False}

    def on_signal(signum, _frame):
        if server:
            server.stop()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)

    try:
        t_start = time.monotonic()
        if args.url:
            u = urllib.parse.urlparse(args.url)
            target = Target(u.hostname or "127.0.0.1", u.port or 80)
            command = f"(existing server at {args.url})"
        else:
            extra = ["--cache-ram", str(args.cache_ram)] + shlex.split(args.server_args)
            extra += ["-t", str(args.threads)] if args.threads else []
            server = Server(args.dspark, extra, log_dir)
            target = server.start()
            pid = server.proc.pid
            command = server.command()
        startup_s = time.monotonic() - t_start

        status, models, _ = target.call("GET", "/v1/models")
        if status != 200:
            raise SoakError(f"GET /v1/models answered {status}")
        info = models["data"][0]["dspark"]
        n_ctx = info["n_ctx"]
        ctx = Context(target, n_ctx, load_prompts())
        ctx.build_context_prompts()
        ctx.build_seeded()
        stats = Stats()

        # RSS sampler: every second (two for long runs) until the drain ends.
        rss = []
        interval = 1.0 if args.duration < 300 else 2.0
        t_load = time.monotonic()

        def sampler():
            while not stop_flag["stop"]:
                if pid:
                    r = read_rss_kib(pid)
                    if r is not None:
                        rss.append((time.monotonic() - t_load, r))
                time.sleep(interval)
        sampler_thread = threading.Thread(target=sampler, daemon=True)
        sampler_thread.start()

        deadline = t_load + args.duration
        threads = [threading.Thread(target=worker, args=(i, args, ctx, stats, deadline), daemon=True)
                   for i in range(args.concurrency)]
        for th in threads:
            th.start()
        next_note = t_load + 30
        while any(th.is_alive() for th in threads):
            time.sleep(0.5)
            if time.monotonic() >= next_note and time.monotonic() < deadline:
                done = sum(sum(c.values()) for c in stats.count.values())
                r = rss[-1][1] / 1024 if rss else float("nan")
                print(f"  {time.monotonic() - t_load:5.0f} s: {done} requests, {len(stats.anomalies)} anomalies, "
                      f"RSS {r:.1f} MiB", file=sys.stderr, flush=True)
                next_note += 30
        load_s = time.monotonic() - t_load

        # Drain: slots_busy back to 0 within 10 s.
        slots_busy, in_flight, drain_s = None, None, None
        t_drain = time.monotonic()
        while time.monotonic() - t_drain < 10:
            try:
                m = target.metrics()
                slots_busy = m.get("dspark:slots_busy")
                in_flight = m.get("dspark:num_requests_in_flight")
                if slots_busy == 0 and in_flight == 0:
                    drain_s = time.monotonic() - t_drain
                    break
            except (OSError, http.client.HTTPException, SoakError):
                pass
            time.sleep(0.25)
        final_metrics = {}
        try:
            final_metrics = target.metrics()
        except (OSError, http.client.HTTPException, SoakError):
            pass
        stop_flag["stop"] = True
        sampler_thread.join()

        # Crash check: the process alive (or /health answering, with --url).
        if server:
            alive = server.alive()
            died_code = None if alive else server.proc.returncode
        else:
            try:
                alive = target.call("GET", "/health", timeout=5)[0] == 200
            except (OSError, http.client.HTTPException):
                alive = False
            died_code = None
        shutdown_code = server.stop() if server else None
    except KeyboardInterrupt:
        if server:
            server.stop()
        return 130
    except SoakError as e:
        if server:
            server.stop()
            print(f"server log: {server.log_path}", file=sys.stderr)
        print(f"soak: {e}", file=sys.stderr)
        return 2

    # ----- report
    total = sum(sum(c.values()) for c in stats.count.values())
    n5xx = sum(n for c in stats.count.values() for s, n in c.items() if isinstance(s, int) and s >= 500)
    n_malformed_bad = sum(1 for a in stats.anomalies if a["type"] == "malformed")
    n_ctx_bad = sum(1 for a in stats.anomalies if a["type"] in ("ctx_at_limit", "ctx_over_limit"))
    n_other = len(stats.anomalies) - n_malformed_bad - n_ctx_bad
    rw = rss_windows(rss, warmup, load_s) if pid else None

    bars = []  # (bar, measured, limit, ok)
    bars.append(("responses with status >= 500", str(n5xx), "0", n5xx == 0))
    crash_txt = "alive" if alive else (f"died, exit code {died_code}" if died_code is not None else "not answering")
    bars.append(("server alive at the end", crash_txt, "alive", alive))
    if shutdown_code is not None:
        ok = shutdown_code in (0, -signal.SIGTERM)
        bars.append(("exit on SIGTERM at the end", f"exit code {shutdown_code}", "0", ok))
    if rw:
        first, last, win, nf, nl = rw
        growth = (last - first) / first
        bars.append((f"RSS after warm-up ({win:.0f} s means: first {nf}, last {nl} samples)",
                     f"{first / 1024:.1f} -> {last / 1024:.1f} MiB ({growth * 100:+.1f}%)",
                     f"growth <= {args.rss_tolerance * 100:.0f}%", growth <= args.rss_tolerance))
    else:
        bars.append(("RSS after warm-up", "not sampled" + ("" if pid else " (no --pid)"), "-", True))
    sb = "-" if slots_busy is None else f"{slots_busy:.0f}"
    bars.append(("`dspark:slots_busy` after the load stops",
                 f"{sb}" + (f" after {drain_s:.2f} s" if drain_s is not None else " after 10 s"),
                 "0 within 10 s", slots_busy == 0 and in_flight == 0))
    bars.append(("seeded repeats identical", f"{stats.seeded_checks - len(stats.seeded_mismatch)}/"
                 f"{stats.seeded_checks} ({len(ctx.seeded_ref)} requests)", "all",
                 not stats.seeded_mismatch and stats.seeded_checks > 0))
    bars.append(("malformed bodies answered 400", f"{n_malformed_bad} wrong of "
                 f"{sum(stats.count.get('malformed', {}).values())}", "0 wrong", n_malformed_bad == 0))
    bars.append(("context limit (n_ctx-1: 200, over: 400 context_length_exceeded)", f"{n_ctx_bad} wrong", "0",
                 n_ctx_bad == 0))
    bars.append(("other unexpected answers (checks below)", str(n_other), "0", n_other == 0))

    print(f"\n## Soak: {args.duration:.0f} s, {args.concurrency} workers, mix seed {args.seed}\n")
    print(f"Server: `{command}` (n_ctx {n_ctx}, start-up {startup_s:.1f} s). "
          f"Load {load_s:.1f} s, {total} requests, {total / load_s:.1f} req/s; RSS warm-up {warmup:.0f} s.\n")
    print("| bar | measured | limit | pass |\n|---|---|---|---|")
    for name, val, lim, ok in bars:
        print(f"| {name} | {val} | {lim} | {'yes' if ok else '**NO**'} |")

    all_lat = [x for v in stats.latency.values() for x in v]
    all_ttft = [x for v in stats.ttft.values() for x in v if x is not None]
    print("\n| latency | n | p50 ms | p99 ms |\n|---|---|---|---|")
    print(f"| non-streamed end to end (200s) | {len(all_lat)} | {ms(pct(all_lat, 50))} | {ms(pct(all_lat, 99))} |")
    print(f"| stream TTFT | {len(all_ttft)} | {ms(pct(all_ttft, 50))} | {ms(pct(all_ttft, 99))} |")

    print("\n| type | requests | by status | anomalies | p50 ms | p99 ms |\n|---|---|---|---|---|---|")
    for kind in MIX:
        c = stats.count.get(kind, {})
        n = sum(c.values())
        by = ", ".join(f"{s}: {v}" for s, v in sorted(c.items(), key=lambda kv: str(kv[0])))
        lat = stats.ttft.get(kind) if kind in STREAM_TYPES else stats.latency.get(kind)
        lat = [x for x in (lat or []) if x is not None]
        unit = " (TTFT)" if kind in STREAM_TYPES else ""
        na = sum(1 for a in stats.anomalies if a["type"] == kind)
        print(f"| {kind}{unit} | {n} | {by or '-'} | {na} | {ms(pct(lat, 50))} | {ms(pct(lat, 99))} |")

    if final_metrics:
        keys = sorted(k for k in final_metrics if k.startswith("dspark:requests_total"))
        served = ", ".join(f"{k[len('dspark:requests_total'):]}: {final_metrics[k]:.0f}" for k in keys)
        acc = final_metrics.get("dspark:spec_decode_num_accepted_tokens_total", 0)
        dra = final_metrics.get("dspark:spec_decode_num_draft_tokens_total", 0)
        print(f"\nServer metrics: requests {served}; generated "
              f"{final_metrics.get('dspark:generation_tokens_total', 0):.0f} tokens; drafted {dra:.0f}, accepted "
              f"{acc:.0f} ({(acc / dra * 100) if dra else 0:.0f}%); fallbacks "
              f"{final_metrics.get('dspark:spec_decode_num_fallbacks_total', 0):.0f}.")

    with open(log_dir / "rss.tsv", "w") as f:
        f.write("seconds\trss_kib\n" + "".join(f"{t:.1f}\t{r}\n" for t, r in rss))
    if stats.anomalies or stats.seeded_mismatch:
        with open(log_dir / "anomalies.json", "w") as f:
            json.dump({"anomalies": stats.anomalies, "seeded_mismatch": stats.seeded_mismatch}, f, indent=1)
        print(f"\n### Anomalies ({len(stats.anomalies)}; all in {log_dir / 'anomalies.json'})\n")
        seen = set()
        for a in stats.anomalies:
            key = (a["type"], a["status"], a["problem"][:60])
            if key in seen:
                continue
            seen.add(key)
            print(f"- {a['type']} {a['path']} -> {a['status']}: {a['problem']}\n  body: `{a['body']}`")
            if len(seen) >= 20:
                break
        for m in stats.seeded_mismatch[:5]:
            print(f"- seeded {m['label']}: first {m['first']!r} now {m['now']!r}")
    print(f"\nServer log, RSS samples (rss.tsv) and anomalies: {log_dir}")
    failed = [b for b in bars if not b[3]]
    if failed:
        print(f"\nsoak: {len(failed)} bar(s) missed: " + "; ".join(b[0] for b in failed), file=sys.stderr)
        if not server or not alive:
            print(server.log_tail() if server else "", file=sys.stderr)
        return 0 if args.no_fail else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
