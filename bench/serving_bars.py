#!/usr/bin/python3
"""Serving bars: prompt cache, structured output and seeded sampling, against live `dspark serve`.

Starts its own servers (one at a time, on free ports; each is killed at exit, also on errors) with
the bundled models, runs three checks and prints one Markdown table per bar, ready to paste into
docs/performance.md, with the exact command lines:

  1. Prompt cache: a ~2,000-token prefix of held-out stdlib source plus 8 short continuations.
     Median time to first token on a server without the cache (`--no-cache-prompt`) against one
     with it (the prefix sent once first). Bar: warm >= 5x lower; greedy outputs identical.
  2. Structured output: 10 JSON schemas x 10 seeded requests at T = 0.8 with response_format
     json_schema (strict), 4 at a time on a DSpark server with --parallel 4. Bar: every content
     parses and validates (jsonschema). Then greedy decode speed with the grammar against the same
     prompts without it (ignore_eos, as many tokens as the grammar run made). Bar: >= 0.9x.
  3. Seeded sampling: 10 seeded /v1/completions (T = 0.9, top_p 0.95) alone on a plain server, with
     the draft model, with DSpark, with DSpark under 16 concurrent unseeded requests, and with the
     draft model and `"dspark": {"speculate": false}`. Bar: all five texts byte-identical, 10/10.
     Also the acceptance of seeded (coupled) against unseeded verification.

Only the standard library and Debian's python3-jsonschema (scripts/install-deps.sh installs it).

    /usr/bin/python3 bench/serving_bars.py [--quick] [--threads N] [--dspark BIN] [--bars 1,2,3] [--no-fail]

Exit status: 0 when every bar run holds, 1 when one is missed (0 with --no-fail), 2 on an error.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    import jsonschema
except ImportError:  # reported when bar 2 runs, so bars 1 and 3 work without it
    jsonschema = None

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from dspark_server import ServeError, ServeProcess, sse_chunks  # noqa: E402 -- needs the path above

TARGET = "models/ref-target.gguf"
DRAFT = ["--spec-type", "draft-simple", "-md", "models/ref-draft.gguf"]
DSPARK = ["--spec-type", "draft-dspark", "-md", "models/ref-dspark.gguf"]
CODE_PROMPTS = ROOT / "bench/prompts/code-completion.jsonl"
STDLIB = Path("/usr/lib/python3.11")
MANIFEST = ROOT / "models/corpus-manifest.tsv"


class BenchError(Exception):
    """A failure of the benchmark itself (server did not start, HTTP error): exit status 2."""


# ---------------------------------------------------------------------------------------------
# Servers

class Server(ServeProcess):
    """One `dspark serve` child. Use as a context manager; stop() also runs at exit and on signals."""

    live = []  # servers not yet stopped, for the exit handler

    def __init__(self, binary, args, name, log_dir):
        super().__init__(binary, ["-m", TARGET] + args, Path(log_dir) / f"{name}.log", name=name, cwd=ROOT)
        self.models = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        Server.live.append(self)  # before the start-up wait, so that a failed start is stopped too
        try:
            super().start()
        except ServeError as e:
            raise BenchError(str(e)) from None
        self.models = request(self.port, "GET", "/v1/models")[1]["data"][0]["dspark"]

    def stop(self):
        super().stop(timeout=10)
        if self in Server.live:
            Server.live.remove(self)

    def health(self):
        return request(self.port, "GET", "/health", timeout=5)[1]


def stop_all_servers(*_):
    for s in list(Server.live):
        s.stop()


# ---------------------------------------------------------------------------------------------
# HTTP

def request(port, method, path, body=None, timeout=600):
    """(status, parsed JSON) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def post(port, path, body, timeout=600):
    status, j = request(port, "POST", path, body, timeout)
    if status != 200:
        raise BenchError(f"POST {path} answered {status}: {json.dumps(j)}\n  body: {json.dumps(body)[:2000]}")
    return j


def stream(port, path, body, timeout=600):
    """Streams one request. Returns a dict: text, ttft (s from sending to the first chunk with
    content), t_first/t_end (monotonic), chunks, finish_reason, usage, dspark."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        t0 = time.monotonic()
        conn.request("POST", path, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise BenchError(f"POST {path} answered {r.status}: {r.read()[:2000]!r}\n  body: {json.dumps(body)[:2000]}")
        out = {"text": "", "t_first": None, "chunks": 0, "finish_reason": None, "usage": None, "dspark": None}
        for chunk in sse_chunks(r):
            if chunk is None:
                break
            now = time.monotonic()
            for c in chunk.get("choices", []):
                piece = c.get("text")
                if piece is None:
                    piece = (c.get("delta") or {}).get("content") or ""
                if piece or c.get("tokens"):
                    if out["t_first"] is None:
                        out["t_first"] = now
                    out["chunks"] += 1
                out["text"] += piece
                if c.get("finish_reason"):
                    out["finish_reason"] = c["finish_reason"]
            if chunk.get("usage"):
                out["usage"] = chunk["usage"]
            if chunk.get("dspark"):
                out["dspark"] = chunk["dspark"]
        out["t_end"] = time.monotonic()
        out["ttft"] = (out["t_first"] if out["t_first"] is not None else out["t_end"]) - t0
        return out
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------
# Reporting helpers

class Acceptance:
    """Sums of the responses' `dspark` counters over requests."""

    def __init__(self):
        self.drafts = self.drafted = self.accepted = self.requests = 0

    def add(self, d):
        if d:
            self.requests += 1
            self.drafts += d.get("drafts", 0)
            self.drafted += d.get("drafted", 0)
            self.accepted += d.get("accepted", 0)

    def rate(self):
        return f"{self.accepted / self.drafted:.3f}" if self.drafted else "- (nothing drafted)"

    def tau(self):
        # tau = 1 + accepted / drafts, as SpecStats::tau() (the bonus token counted)
        return f"{1 + self.accepted / self.drafts:.2f}" if self.drafts else "-"

    def cell(self):
        return f"{self.accepted}/{self.drafted} = {self.rate()}, τ {self.tau()} ({self.drafts} drafts)"


def verdict(ok):
    return "**pass**" if ok else "**MISSED**"


def ms(x):
    return f"{x * 1000:.1f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def threads_args(opts):
    return ["-t", str(opts.threads)] if opts.threads else []


# ---------------------------------------------------------------------------------------------
# Bar 1: prompt cache

FOLLOW_UPS = [
    "def dedent_all(lines):\n",
    "class Wrapper(TextWrapper):\n    def __init__(self, width):\n",
    "if __name__ == \"__main__\":\n    import sys\n",
    "def count_words(text):\n    \"\"\"Return the number of words in text.\"\"\"\n",
    "import re\n\ndef strip_comments(source):\n",
    "def indent_block(text, prefix=\"    \"):\n",
    "class Paragraph:\n    def __init__(self, text):\n        self.text = text\n\n    def lines(self, width):\n",
    "def shorten_title(title, width=20):\n    return ",
]


def source_text():
    """Held-out stdlib source (the corpus manifest's test split, in manifest order), about 30 KB."""
    paths = []
    if MANIFEST.exists():
        for line in MANIFEST.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[2] == "test" and parts[0].endswith(".py"):
                paths.append(parts[0])
    paths += ["textwrap.py", "shlex.py", "fnmatch.py"]  # fallback when the manifest's files are absent
    text = ""
    for rel in paths:
        p = STDLIB / rel
        if p.is_file():
            body = p.read_text(errors="replace")
            if len(body) > 2000:
                text += f"# ---- {rel}\n{body}\n"
        if len(text) > 30000:
            break
    if len(text) < 12000:
        raise BenchError(f"not enough Python source under {STDLIB} for a 2,000-token prefix")
    return text


def build_prefix(port, n_tokens):
    """The longest whole-line prefix of source_text() with at most n_tokens tokens."""
    lines = source_text().splitlines(keepends=True)
    count = lambda k: len(post(port, "/tokenize", {"content": "".join(lines[:k])})["tokens"])
    lo, hi = 1, len(lines)
    if count(hi) <= n_tokens:
        raise BenchError("source text shorter than the prefix asked for")
    while lo < hi:  # largest k with count(k) <= n_tokens
        mid = (lo + hi + 1) // 2
        if count(mid) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    prefix = "".join(lines[:lo])
    return prefix, count(lo)


def bar_prompt_cache(opts, log_dir):
    n_prefix = 2000
    max_tokens = 32
    follow_ups = FOLLOW_UPS[:4] if opts.quick else FOLLOW_UPS
    base = threads_args(opts) + ["-c", str(opts.ctx)]
    warmup = {"prompt": "def f(x):\n", "max_tokens": 4, "temperature": 0}
    body = lambda text: {"prompt": text, "max_tokens": max_tokens, "temperature": 0}
    cold, warm = [], []
    with Server(opts.dspark, base + ["--no-cache-prompt"], "bar1-cold", log_dir) as srv:
        cold_cmd = srv.command()
        info = srv.models
        prefix, prefix_tokens = build_prefix(srv.port, n_prefix)
        need = prefix_tokens + 64 + max_tokens
        if info["n_ctx"] < need:
            raise BenchError(f"n_ctx {info['n_ctx']} < {need}: raise --ctx")
        post(srv.port, "/v1/completions", warmup)
        for f in follow_ups:
            cold.append(stream(srv.port, "/v1/completions", body(prefix + f)))
    with Server(opts.dspark, base, "bar1-warm", log_dir) as srv:
        warm_cmd = srv.command()
        post(srv.port, "/v1/completions", warmup)
        first = post(srv.port, "/v1/completions", {"prompt": prefix, "max_tokens": 1, "temperature": 0})
        for f in follow_ups:
            warm.append(stream(srv.port, "/v1/completions", body(prefix + f)))

    med_cold = statistics.median(r["ttft"] for r in cold)
    med_warm = statistics.median(r["ttft"] for r in warm)
    ratio = med_cold / med_warm if med_warm > 0 else float("inf")
    same = sum(c["text"] == w["text"] for c, w in zip(cold, warm))
    cached = lambda r: ((r["usage"] or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    ptoks = [(r["usage"] or {}).get("prompt_tokens", 0) for r in warm]
    ok_ratio, ok_same = ratio >= 5, same == len(follow_ups)
    rows = [
        ["prompt tokens (prefix + follow-up)", f"{min(ptoks)}-{max(ptoks)}", f"{min(ptoks)}-{max(ptoks)}", ""],
        ["cached_tokens per follow-up", " / ".join(str(cached(r)) for r in cold),
         " / ".join(str(cached(r)) for r in warm), ""],
        ["TTFT median (ms)", ms(med_cold), ms(med_warm), ""],
        ["TTFT min-max (ms)", f"{ms(min(r['ttft'] for r in cold))}-{ms(max(r['ttft'] for r in cold))}",
         f"{ms(min(r['ttft'] for r in warm))}-{ms(max(r['ttft'] for r in warm))}", ""],
        ["TTFT ratio cold / warm (bar >= 5x)", "", f"**{ratio:.1f}x**", verdict(ok_ratio)],
        [f"greedy outputs identical ({max_tokens} tokens)", "", f"{same}/{len(follow_ups)}", verdict(ok_same)],
    ]
    mismatches = [f"follow-up {i}: cold {c['text']!r} / warm {w['text']!r}"
                  for i, (c, w) in enumerate(zip(cold, warm)) if c["text"] != w["text"]]
    md = [f"### Bar 1: prompt cache ({prefix_tokens}-token prefix, {len(follow_ups)} follow-ups)", "",
          table(["", "cold (`--no-cache-prompt`)", "warm (prompt cache)", "bar"], rows), "",
          f"Prefix: held-out stdlib source cut at a line to {prefix_tokens} tokens (n_ctx_train "
          f"{info['n_ctx_train']}, served with n_ctx {info['n_ctx']}); the prefix alone was sent once "
          f"first on the warm server (cached_tokens {cached(first)}). Streaming /v1/completions, "
          f"temperature 0, max_tokens {max_tokens}; TTFT is from sending to the first chunk with text.",
          "", f"- cold: `{cold_cmd}`", f"- warm: `{warm_cmd}`"]
    if mismatches:
        md += ["", "Mismatches:"] + [f"- {m}" for m in mismatches]
    return "\n".join(md), [("1 prompt cache: TTFT cold/warm >= 5x", f"{ratio:.1f}x", ok_ratio),
                           ("1 prompt cache: outputs identical", f"{same}/{len(follow_ups)}", ok_same)]


# ---------------------------------------------------------------------------------------------
# Bar 2: structured output

def _obj(props, **extra):
    return dict({"type": "object", "properties": props, "required": list(props),
                 "additionalProperties": False}, **extra)


SCHEMAS = [
    ("person", "a person with a name, an age, an optional e-mail address and whether the account is active",
     _obj({"name": {"type": "string", "minLength": 1, "maxLength": 24},
           "age": {"type": "integer"},
           "email": {"type": ["string", "null"], "maxLength": 32},
           "active": {"type": "boolean"}})),
    ("order", "a shop order with its line items and its status",
     _obj({"order_id": {"type": "integer"},
           "items": {"type": "array", "minItems": 1, "maxItems": 3,
                     "items": _obj({"sku": {"type": "string", "maxLength": 10},
                                    "qty": {"type": "integer"},
                                    "price": {"type": "number"}})},
           "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]}})),
    ("escapes", "a label chosen from a fixed list, with a short note",
     _obj({"label": {"enum": ["say \"hi\"", "C:\\temp\\new", "tab\there", "back\\slash \"and\" quote", "plain"]},
           "mixed": {"enum": [1, "two", None, True, {"k": "v\"w"}]},
           "note": {"type": "string", "maxLength": 20}})),
    ("geometry", "a route between two points with intermediate waypoints",
     _obj({"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"},
           "waypoints": {"type": "array", "minItems": 2, "maxItems": 4, "items": {"$ref": "#/$defs/point"}}},
          **{"$defs": {"point": _obj({"x": {"type": "number"}, "y": {"type": "number"}})}})),
    ("config", "a server configuration",
     _obj({"server": _obj({"host": {"type": "string", "maxLength": 16}, "port": {"type": "integer"},
                           "tls": _obj({"enabled": {"type": "boolean"},
                                        "cert": {"type": ["string", "null"], "maxLength": 24}})}),
           "debug": {"type": "boolean"},
           "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 8}}})),
    ("review", "a book review whose subtitle, rating and reviewer may be missing",
     _obj({"title": {"type": "string", "maxLength": 30},
           "subtitle": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
           "rating": {"type": ["number", "null"]},
           "reviewer": {"anyOf": [{"$ref": "#/$defs/user"}, {"type": "null"}]}},
          **{"$defs": {"user": _obj({"handle": {"type": "string", "maxLength": 12},
                                     "verified": {"type": "boolean"}})}})),
    ("matrix", "a small integer matrix and its name",
     _obj({"name": {"type": "string", "maxLength": 10},
           "rows": {"type": "array", "minItems": 2, "maxItems": 3,
                    "items": {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "integer"}}}})),
    ("tree", "a two-level tree of named nodes",
     _obj({"root": {"$ref": "#/$defs/branch"}},
          **{"$defs": {"leaf": _obj({"name": {"type": "string", "maxLength": 8}, "weight": {"type": "number"}}),
                       "branch": _obj({"name": {"type": "string", "maxLength": 8},
                                       "children": {"type": "array", "maxItems": 2,
                                                    "items": {"anyOf": [{"$ref": "#/$defs/leaf"},
                                                                        {"$ref": "#/$defs/twig"}]}}}),
                       "twig": _obj({"name": {"type": "string", "maxLength": 8},
                                     "leaves": {"type": "array", "maxItems": 2,
                                                "items": {"$ref": "#/$defs/leaf"}}})}})),
    ("paths", "a file path, a quoted command line and a regular expression",
     _obj({"path": {"enum": ["C:\\Windows\\System32", "/usr/bin", "\\\\server\\share", "\"quoted dir\""]},
           "command": {"type": "string", "maxLength": 40},
           "regex": {"const": "^\\d+\\.\\d*\"$"},
           "escaped": {"type": "string", "minLength": 1, "maxLength": 12}})),
    ("events", "an event log with up to three events",
     _obj({"version": {"const": "1.0"},
           "events": {"type": "array", "minItems": 1, "maxItems": 3,
                      "items": _obj({"kind": {"enum": ["start", "stop", "error"]},
                                     "ts": {"type": "integer"},
                                     "ok": {"type": "boolean"},
                                     "detail": {"type": ["string", "null"], "maxLength": 16}})},
           "count": {"type": "integer"}})),
]


def messages_for(desc):
    return [{"role": "system", "content": "You are a JSON API. Answer with one JSON object and nothing else."},
            {"role": "user", "content": f"Return {desc} as JSON."}]


def response_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def bar_structured(opts, log_dir):
    if jsonschema is None:
        raise BenchError("bar 2 needs python3-jsonschema (scripts/install-deps.sh installs it)")
    per_schema = 2 if opts.quick else 10
    reps = 1 if opts.quick else 5
    max_tokens = 512
    args = threads_args(opts) + DSPARK + ["--parallel", "4"] + opts.spec_args
    jobs = []
    for si, (name, desc, schema) in enumerate(SCHEMAS):
        jsonschema.Draft202012Validator.check_schema(schema)
        for k in range(per_schema):
            jobs.append((name, schema, {"messages": messages_for(desc), "max_tokens": max_tokens,
                                        "temperature": 0.8, "seed": 1000 * si + k + 1,
                                        "response_format": response_format(name, schema)}))

    def run(job):
        name, schema, body = job
        r = post(port, "/v1/chat/completions", body)
        content = r["choices"][0]["message"].get("content") or ""
        fin = r["choices"][0]["finish_reason"]
        try:
            jsonschema.validate(json.loads(content), schema)
            return None, r
        except (ValueError, jsonschema.ValidationError) as e:
            return (f"{name} seed {body['seed']}: finish_reason {fin}, {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:160]}; content {content[:300]!r}"), r

    with Server(opts.dspark, args, "bar2-dspark", log_dir) as srv:
        port = srv.port
        cmd = srv.command()
        post(port, "/v1/chat/completions", {"messages": messages_for("anything"), "max_tokens": 8, "temperature": 0})
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(run, jobs))
        valid_wall = time.monotonic() - t0
        failures = [f for f, _ in results if f]
        sampled = Acceptance()
        for _, r in results:
            sampled.add(r.get("dspark"))
        gen_tokens = sum(r["usage"]["completion_tokens"] for _, r in results)

        # Speed: sequential and greedy, the grammar run first, then the same prompt without it for
        # exactly as many tokens (ignore_eos; the grammar ends its own text, so it cannot use it).
        # The order alternates between rounds (a shared host drifts); the grammar run of a round's
        # first pass fixes the token count of the prompt's plain runs.
        speed = {k: [0, 0.0, 0, 0.0, 0.0, 0] for k in ("grammar", "plain")}  # tokens-1, s, tokens, decode s, draft s, calls
        acc = {"grammar": Acceptance(), "plain": Acceptance()}
        counts = {}
        for rep in range(reps):
            for name, desc, schema in SCHEMAS:
                base = {"messages": messages_for(desc), "temperature": 0}
                bodies = {"grammar": dict(base, max_tokens=max_tokens, response_format=response_format(name, schema))}
                order = ["grammar", "plain"] if rep % 2 == 0 or name not in counts else ["plain", "grammar"]
                for key in order:
                    if key == "plain":
                        body = dict(base, max_tokens=counts[name], dspark={"ignore_eos": True})
                    else:
                        body = bodies["grammar"]
                    r = stream(port, "/v1/chat/completions", body)
                    n = r["usage"]["completion_tokens"]
                    counts.setdefault(name, n)
                    if n != counts[name]:
                        failures.append(f"{key} run of {name} (round {rep}) made {n} tokens, not {counts[name]}")
                    d = r["dspark"] or {}
                    s = speed[key]
                    s[0] += n - 1
                    s[1] += r["t_end"] - r["t_first"]
                    s[2] += n
                    s[3] += d.get("decode_ms", 0) / 1000
                    s[4] += d.get("draft_ms", 0) / 1000
                    s[5] += d.get("target_calls", 0)
                    if rep == 0:
                        acc[key].add(d)

    n_ok = len(jobs) - sum(1 for f, _ in results if f)
    tps = {k: v[0] / v[1] if v[1] else 0.0 for k, v in speed.items()}
    tps_server = {k: v[2] / v[3] if v[3] else 0.0 for k, v in speed.items()}
    ratio = tps["grammar"] / tps["plain"] if tps["plain"] else 0.0
    ok_valid, ok_speed = n_ok == len(jobs), ratio >= 0.9
    rows = [
        ["valid JSON matching the schema (T 0.8, seeded, 4 concurrent)", f"**{n_ok}/{len(jobs)}**", verdict(ok_valid)],
        ["  acceptance while sampling", sampled.cell(), ""],
        ["  tokens generated / wall time", f"{gen_tokens} in {valid_wall:.1f} s", ""],
        ["greedy tok/s with the grammar (client: after the first token)", f"{tps['grammar']:.0f}", ""],
        ["greedy tok/s without it (same prompts, same token counts)", f"{tps['plain']:.0f}", ""],
        ["ratio grammar / plain (bar >= 0.9x)", f"**{ratio:.2f}x**", verdict(ok_speed)],
        ["server decode tok/s (usage / dspark.decode_ms): grammar / plain",
         f"{tps_server['grammar']:.0f} / {tps_server['plain']:.0f}", ""],
        ["acceptance with the grammar (greedy)", acc["grammar"].cell(), ""],
        ["acceptance without it (greedy)", acc["plain"].cell(), ""],
        ["drafting time (dspark.draft_ms) / target passes: grammar", f"{speed['grammar'][4]:.2f} s / {speed['grammar'][5]}", ""],
        ["drafting time / target passes: plain", f"{speed['plain'][4]:.2f} s / {speed['plain'][5]}", ""],
    ]
    md = [f"### Bar 2: structured output ({len(SCHEMAS)} schemas x {per_schema} requests, DSpark drafter)", "",
          table(["", "measured", "bar"], rows), "",
          f"response_format json_schema (strict) on /v1/chat/completions, max_tokens {max_tokens}. Speed: "
          f"the {len(SCHEMAS)} prompts one at a time, greedy, {reps} round(s), streaming; tok/s is the sum of "
          f"(completion_tokens - 1) over the sum of (last chunk - first chunk).",
          "", f"- server: `{cmd}`"]
    if failures:
        md += ["", "Failures:"] + [f"- {f}" for f in failures]
    return "\n".join(md), [("2 structured: valid", f"{n_ok}/{len(jobs)}", ok_valid),
                           ("2 structured: tok/s grammar/plain >= 0.9x", f"{ratio:.2f}x", ok_speed)]


# ---------------------------------------------------------------------------------------------
# Bar 3: seeded sampling

def code_prompts():
    return [json.loads(line)["prompt"] for line in CODE_PROMPTS.read_text().splitlines() if line.strip()]


class Background:
    """n workers sending unseeded completions in a loop until stopped."""

    def __init__(self, port, prompts, n):
        self.port, self.prompts, self.stop_flag = port, prompts, threading.Event()
        self.errors, self.done = [], 0
        self.threads = [threading.Thread(target=self.work, args=(i,), daemon=True) for i in range(n)]

    def work(self, i):
        k = i
        while not self.stop_flag.is_set():
            body = {"prompt": self.prompts[k % len(self.prompts)], "max_tokens": 96,
                    "temperature": 0.9, "top_p": 0.95}
            try:
                post(self.port, "/v1/completions", body)
                self.done += 1
            except (BenchError, OSError, http.client.HTTPException) as e:
                self.errors.append(str(e)[:300])
                time.sleep(0.2)
            k += len(self.threads)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        for t in self.threads:
            t.join(120)


def bar_seeded(opts, log_dir):
    n = 4 if opts.quick else 10
    acc_reps = 1 if opts.quick else 3
    n_load = 16
    prompts = code_prompts()
    seeded_prompts, load_prompts = prompts[:n], prompts[n:]
    sample = {"max_tokens": 64, "temperature": 0.9, "top_p": 0.95}
    seeded = lambda i, rep=0: dict(sample, prompt=seeded_prompts[i], seed=101 + i + 1000 * rep)
    unseeded = lambda i: dict(sample, prompt=seeded_prompts[i])
    base = threads_args(opts)
    # Drafting on every step (no cost model): the comparison must exercise coupled verification,
    # and a busy host can make the cost model stop drafting altogether.
    fixed = [] if opts.adaptive else ["--no-spec-adaptive"]
    texts = {k: [None] * n for k in "abcde"}
    acc = {}
    cmds = {}

    def run_alone(port, key, extra=None, acc_key=None):
        a = Acceptance()
        for i in range(n):
            r = post(port, "/v1/completions", dict(seeded(i), **(extra or {})))
            texts[key][i] = r["choices"][0]["text"]
            a.add(r["dspark"])
        for rep in range(1, acc_reps):
            for i in range(n):
                a.add(post(port, "/v1/completions", dict(seeded(i, rep), **(extra or {})))["dspark"])
        if acc_key:
            acc[acc_key] = a

    def run_unseeded(port, acc_key):
        a = Acceptance()
        for _ in range(acc_reps):
            for i in range(n):
                a.add(post(port, "/v1/completions", unseeded(i))["dspark"])
        acc[acc_key] = a

    warm = {"prompt": "def f(x):\n", "max_tokens": 8, "temperature": 0}
    with Server(opts.dspark, base, "bar3-plain", log_dir) as srv:
        cmds["plain"] = srv.command()
        post(srv.port, "/v1/completions", warm)
        run_alone(srv.port, "a")
    draft_args = base + DRAFT + fixed + opts.spec_args
    with Server(opts.dspark, draft_args, "bar3-draft", log_dir) as srv:
        cmds["draft model"] = srv.command()
        post(srv.port, "/v1/completions", warm)
        run_alone(srv.port, "b", acc_key="draft seeded")
        run_alone(srv.port, "e", extra={"dspark": {"speculate": False}})
        run_unseeded(srv.port, "draft unseeded")
    dspark_args = base + DSPARK + fixed + opts.spec_args + ["--parallel", str(n_load + 4)]
    busy = []
    with Server(opts.dspark, dspark_args, "bar3-dspark", log_dir) as srv:
        cmds["DSpark"] = srv.command()
        post(srv.port, "/v1/completions", warm)
        run_alone(srv.port, "c", acc_key="dspark seeded")
        run_unseeded(srv.port, "dspark unseeded")
        with Background(srv.port, load_prompts, n_load) as bg:
            deadline = time.monotonic() + 60
            while srv.health()["slots_busy"] < n_load and time.monotonic() < deadline:
                time.sleep(0.05)
            for i in range(n):
                busy.append(srv.health()["slots_busy"])
                texts["d"][i] = post(srv.port, "/v1/completions", seeded(i))["choices"][0]["text"]
        if bg.errors:
            raise BenchError(f"background requests failed: {bg.errors[:3]}")

    same = [len({texts[k][i] for k in "abcde"}) == 1 for i in range(n)]
    ok = all(same)
    labels = {"a": "plain server", "b": "draft model", "c": "DSpark",
              "d": f"DSpark + {n_load} concurrent unseeded", "e": "draft model, speculate false"}
    rows = [[f"seeded texts identical: {', '.join(f'({k}) {v}' for k, v in labels.items())}",
             f"**{sum(same)}/{n}**", verdict(ok)],
            [f"slots busy when each seeded request of (d) was sent", " / ".join(map(str, busy)), ""]]
    for drafter in ("draft", "dspark"):
        name = "draft model" if drafter == "draft" else "DSpark"
        rows.append([f"{name} acceptance, seeded (coupled, keyed)", acc[f"{drafter} seeded"].cell(), ""])
        rows.append([f"{name} acceptance, unseeded (rejection sampling)", acc[f"{drafter} unseeded"].cell(), ""])
    md = [f"### Bar 3: seeded sampling ({n} requests, T 0.9, top_p 0.95, max_tokens 64)", "",
          table(["", "measured", "bar"], rows), "",
          f"/v1/completions with the first {n} prompts of bench/prompts/code-completion.jsonl, seeds "
          f"101-{100 + n}; the load is {n_load} threads sending unseeded requests (max_tokens 96) in a loop. "
          f"Acceptance: sums of the responses' dspark.accepted / dspark.drafted over {acc_reps * n} requests "
          f"(seeds 101+1000r), τ = 1 + accepted / drafts."
          + ("" if opts.adaptive else " Drafter servers run with --no-spec-adaptive, so every step drafts."),
          ""] + [f"- {k}: `{v}`" for k, v in cmds.items()]
    for i in range(n):
        if not same[i]:
            md.append(f"- prompt {i} (seed {101 + i}) differs: " +
                      "; ".join(f"({k}) {texts[k][i]!r}" for k in "abcde"))
    return "\n".join(md), [("3 seeded: identical in all five modes", f"{sum(same)}/{n}", ok)]


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    ap.add_argument("--dspark", default=str(ROOT / "build/bin/dspark"), help="the dspark binary")
    ap.add_argument("--threads", "-t", type=int, default=None, help="server threads (default: the server's)")
    ap.add_argument("--ctx", type=int, default=4096, help="-c of the bar 1 servers (default 4096)")
    ap.add_argument("--bars", default="1,2,3", help="which bars to run (default 1,2,3)")
    ap.add_argument("--adaptive", action="store_true",
                    help="bar 3: keep the drafters' cost model (default: --no-spec-adaptive, every step drafts)")
    ap.add_argument("--spec-args", default="", help="extra flags for every server with a drafter")
    ap.add_argument("--no-fail", action="store_true", help="report only: exit 0 when a bar is missed")
    ap.add_argument("--log-dir", default=None, help="keep the servers' logs here (default: a temporary folder)")
    opts = ap.parse_args()
    opts.dspark = os.path.abspath(opts.dspark)
    opts.spec_args = shlex.split(opts.spec_args)
    bars = {b.strip() for b in opts.bars.split(",") if b.strip()}

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = shlex.join(["/usr/bin/python3", os.path.relpath(__file__, ROOT)] + sys.argv[1:])
    results = []
    tmp = None if opts.log_dir else tempfile.TemporaryDirectory(prefix="serving_bars-")
    log_dir = opts.log_dir or tmp.name
    os.makedirs(log_dir, exist_ok=True)
    try:
        print(f"## Serving bars\n\n`{command}` · {time.strftime('%Y-%m-%d %H:%M')}\n", flush=True)
        for key, fn in (("1", bar_prompt_cache), ("2", bar_structured), ("3", bar_seeded)):
            if key in bars:
                t0 = time.monotonic()
                md, res = fn(opts, log_dir)
                print(md + f"\n\n({time.monotonic() - t0:.0f} s)\n", flush=True)
                results += res
    except BenchError as e:
        print(f"serving_bars: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        stop_all_servers()
        if tmp:
            tmp.cleanup()
    print(table(["bar", "measured", "result"], [[n, m, verdict(ok)] for n, m, ok in results]))
    missed = [n for n, _, ok in results if not ok]
    if missed:
        print(f"\nmissed: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed and not opts.no_fail else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all_servers()
