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
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
from dspark_server import ServeError, ServeProcess  # noqa: E402 -- needs the path above
from soak_load import (MIX, ROOT, SERVER_ARGS, STREAM_TYPES, Context, SoakError, Stats,  # noqa: E402
                       Target, load_prompts, worker)
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
