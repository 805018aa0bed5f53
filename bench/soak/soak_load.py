"""The soak's load (soak.py): the request mix, an HTTP client with SSE, the request builders and
the workers that send them and check every answer."""
import http.client
import json
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from dspark_server import sse_chunks  # noqa: E402 -- needs the path above

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


