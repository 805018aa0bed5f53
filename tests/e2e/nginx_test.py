#!/usr/bin/env python3
"""Scale-out behind a real nginx: deploy/nginx/dspark.conf in front of three `dspark serve` replicas.

Starts three replicas on free loopback ports and a foreground nginx (own prefix in a temp dir, as the
current user) whose config is the deploy/ template with those ports substituted. Then, through nginx:
6 sessions (X-Session-Id) each run a 10-turn chat, non-streamed, one request after another, while
3 clients without a session loop over long streams. Each session stops before its turn 3 and waits
at a gate, so that the kill never depends on how fast the machine is: once every session has settled
on its replica and waits there, the gate opens and, a moment later (turn 3 requests in flight), one
replica that holds sessions (and, if possible, serves a stream) is killed with SIGKILL. The test
checks that

  - every one of the 60 non-streamed requests succeeds (nginx retries those the dead replica held,
    proxy_next_upstream ... non_idempotent);
  - streams on surviving replicas all end with `data: [DONE]`; streams cut by the kill end without it
    (counted and reported: a started stream cannot be retried);
  - affinity holds: a session whose replica survived was served by that replica on every turn, and a
    session of the dead replica moved to one other replica and stayed there.

The serving replica of each request is read from the X-Upstream header the config adds. Usage:

  python3 tests/e2e/nginx_test.py [path/to/dspark]    # default: build/bin/dspark; ctest -R nginx_test

Fails (does not skip) when nginx is missing: scripts/install-deps.sh installs it.
"""
import grp
import http.client
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from dspark_server import ServeError, ServeProcess, free_port  # noqa: E402 -- needs the path above

TEMPLATE = os.path.join(ROOT, "deploy", "nginx", "dspark.conf")
N_REPLICAS = 3
N_SESSIONS = 6
TURNS = 10  # per session: 60 non-streamed requests
N_STREAMERS = 3
SESSION_MAX_TOKENS = 24  # 10 turns of ChatML stay well inside the bundled model's 1024-token context
STREAM_MAX_TOKENS = 800
GATE_TURN = 3  # sessions wait before this turn until the victim is chosen
KILL_DELAY_S = 0.02  # after opening the gate: the victim dies with its sessions' next turns in flight


def log(msg):
    print(msg, flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    sys.exit(1)


def find_nginx():
    found = shutil.which("nginx")
    if found:
        return found
    for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"):
        if os.access(p, os.X_OK):
            return p
    return None


def wait_health(port, proc, seconds, what):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    log(f"{what} on port {port}: no healthy answer in {seconds} s")
    return False


def render_config(template, replica_ports, listen_port):
    """deploy/nginx/dspark.conf with each upstream's `server 127.0.0.1:PORT ...;` lines replaced by one
    line per replica (parameters of the template's first line kept) and the listen port replaced."""
    out, in_upstream, emitted, blocks = [], False, False, 0
    server_line = re.compile(r"^(\s*)server\s+127\.0\.0\.1:\d+(.*)$")
    for line in template.splitlines():
        if re.match(r"^\s*upstream\s+\S+\s*\{", line):
            in_upstream, emitted = True, False
        elif in_upstream and re.match(r"^\s*\}", line):
            in_upstream = False
        m = server_line.match(line) if in_upstream else None
        if m:
            if not emitted:
                out += [f"{m.group(1)}server 127.0.0.1:{p}{m.group(2)}" for p in replica_ports]
                emitted = True
                blocks += 1
            continue
        if re.match(r"^\s*listen\s+\d+\s*;", line):
            line = re.sub(r"listen\s+\d+", f"listen 127.0.0.1:{listen_port}", line)
        out.append(line)
    return "\n".join(out) + "\n", blocks


def main_config(tmp, site_conf):
    # The user directive matters only when the master runs as root: without one, nginx would run its
    # workers as `nobody`. Name the current user so everything runs as the one running the test.
    user = ""
    if os.geteuid() == 0:
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};"
    temp = "\n".join(f"    {d}_temp_path {tmp}/temp/{d};" for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""{user}
worker_processes 2;
error_log {tmp}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format lb '$msec $status session=$http_x_session_id upstream=[$upstream_addr] '
                  'upstream_status=[$upstream_status] $request_time';
    access_log {tmp}/access.log lb;
{temp}
    include {site_conf};
}}
"""


class Record:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def final_upstream(header):
    # "$upstream_addr" lists every replica tried: "127.0.0.1:A, 127.0.0.1:B" after a retry.
    return header.split(",")[-1].strip() if header else ""


def session_client(port, sid, out, progress, lock, gate):
    messages = []
    for turn in range(TURNS):
        if turn == GATE_TURN and not gate.wait(timeout=120):
            return  # the check reports the missing turns
        # The session id leads the first message, so sessions share no prompt prefix beyond the template's.
        messages.append({"role": "user", "content": f"{sid} turn {turn}: one more line."})
        body = {"messages": messages, "max_tokens": SESSION_MAX_TOKENS, "temperature": 0,
                "dspark": {"ignore_eos": True}}
        t0 = time.time()
        rec = Record(sid=sid, turn=turn, t0=t0, t1=None, status=None, upstream="", error=None, cached=0, prompt=0)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/chat/completions", json.dumps(body),
                      {"Content-Type": "application/json", "X-Session-Id": sid})
            r = c.getresponse()
            data = r.read()
            c.close()
            rec.status, rec.upstream = r.status, r.getheader("X-Upstream", "")
            if r.status == 200:
                j = json.loads(data)
                text = j["choices"][0]["message"]["content"] or ""
                u = j.get("usage", {})
                rec.prompt = u.get("prompt_tokens", 0)
                rec.cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                messages.append({"role": "assistant", "content": text})
            else:
                rec.error = data[:200].decode("utf-8", "replace")
                messages.pop()
        except Exception as e:  # noqa: BLE001 -- any failure is a failed request
            rec.error = f"{type(e).__name__}: {e}"
            messages.pop()
        rec.t1 = time.time()
        with lock:
            out.append(rec)
            progress[sid] = turn + 1


def stream_client(port, idx, out, stop, inflight, lock):
    n = 0
    while not stop.is_set():
        body = {"prompt": f"Stream {idx}.{n}: def main():", "max_tokens": STREAM_MAX_TOKENS, "temperature": 0,
                "stream": True, "dspark": {"ignore_eos": True}}
        rec = Record(idx=idx, n=n, t0=time.time(), t1=None, status=None, upstream="", chunks=0, done=False, error=None)
        key = (idx, n)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            rec.status, rec.upstream = r.status, r.getheader("X-Upstream", "")
            if r.status == 200:
                with lock:
                    inflight[key] = final_upstream(rec.upstream)
                while True:
                    line = r.readline()
                    if not line:
                        break
                    line = line.strip()
                    if line == b"data: [DONE]":
                        rec.done = True
                    elif line.startswith(b"data: "):
                        rec.chunks += 1
                if not rec.done:
                    rec.error = "connection closed without data: [DONE]"
            else:
                rec.error = f"HTTP {r.status}: {r.read()[:200]!r}"
            c.close()
        except Exception as e:  # noqa: BLE001 -- a cut stream surfaces as IncompleteRead or a reset
            rec.error = f"{type(e).__name__}: {e}"
        rec.t1 = time.time()
        with lock:
            inflight.pop(key, None)
            out.append(rec)
        n += 1


def main():
    dspark = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "DSPARK_BIN", os.path.join(ROOT, "build", "bin", "dspark")))
    nginx = find_nginx()
    if not nginx:
        fail("nginx is not installed; run scripts/install-deps.sh (it installs Debian's nginx package "
             "without starting its system service)")
    if not os.access(dspark, os.X_OK):
        fail(f"no dspark binary at {dspark}")
    target = os.path.join(ROOT, "models", "ref-target.gguf")
    draft = os.path.join(ROOT, "models", "ref-draft.gguf")

    tmp = tempfile.mkdtemp(prefix="dspark-nginx-")
    for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(tmp, "temp", d))
    replicas = {}  # port -> ServeProcess
    nginx_proc = None
    stop = threading.Event()  # ends the stream clients
    ok = False
    try:
        # --- replicas -------------------------------------------------------------------------
        ports = [free_port() for _ in range(N_REPLICAS)]
        for p in ports:
            replicas[p] = ServeProcess(
                dspark, ["-m", target, "--spec-type", "draft-simple", "-md", draft,
                         "--host", "127.0.0.1", "--parallel", "2", "-t", "1"],
                os.path.join(tmp, f"replica-{p}.log"), name=f"replica on port {p}", port=p)
            replicas[p].launch()  # all three first, so that they load in parallel
        for p in ports:
            try:
                replicas[p].wait_ready(60)
            except ServeError as e:
                log(str(e))
                fail(f"replica on port {p} did not start (log: {tmp}/replica-{p}.log)")
        addr = {f"127.0.0.1:{p}": p for p in ports}

        # --- nginx ----------------------------------------------------------------------------
        lb_port = free_port()
        with open(TEMPLATE) as f:
            template = f.read()
        if "X-Upstream $upstream_addr" not in template:
            fail(f"{TEMPLATE} no longer adds the X-Upstream header this test reads")
        site, blocks = render_config(template, ports, lb_port)
        # A shorter fail_timeout than the template's, so that nginx probes the dead replica again (and
        # is refused and retries) several times during the run: sessions must still land on one replica.
        site = re.sub(r"fail_timeout=\d+s", "fail_timeout=1s", site)
        if blocks != 2 or f"listen 127.0.0.1:{lb_port}" not in site:
            fail(f"could not substitute ports into {TEMPLATE} ({blocks} upstream blocks rewritten, expected 2)")
        site_conf = os.path.join(tmp, "dspark.conf")
        with open(site_conf, "w") as f:
            f.write(site)
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(main_config(tmp, site_conf))
        cmd = [nginx, "-p", tmp + "/", "-c", conf, "-e", os.path.join(tmp, "error.log"),
               "-g", f"daemon off; pid {tmp}/nginx.pid;"]
        t = subprocess.run(cmd + ["-t"], capture_output=True, text=True)
        if t.returncode != 0:
            fail(f"nginx -t rejected the config:\n{t.stderr}")
        nginx_log = open(os.path.join(tmp, "nginx.out"), "w")
        nginx_proc = subprocess.Popen(cmd, stdout=nginx_log, stderr=subprocess.STDOUT)
        if not wait_health(lb_port, nginx_proc, 15, "nginx"):
            fail(f"nginx did not start: {open(os.path.join(tmp, 'error.log')).read()[-2000:]}")
        log(f"replicas on {', '.join(map(str, ports))}; nginx {nginx} on {lb_port} (config {site_conf})")

        # --- load -----------------------------------------------------------------------------
        lock = threading.Lock()
        sess_recs, stream_recs, progress, inflight = [], [], {}, {}
        sids = [f"sess-{i}-{os.urandom(3).hex()}" for i in range(N_SESSIONS)]
        # Daemon threads: a failed check must not leave the process waiting on a client.
        gate = threading.Event()  # opened by the killer once every session waits before GATE_TURN
        sess_threads = [threading.Thread(target=session_client, args=(lb_port, s, sess_recs, progress, lock, gate),
                                         daemon=True) for s in sids]
        stream_threads = [threading.Thread(target=stream_client, args=(lb_port, i, stream_recs, stop, inflight, lock),
                                           daemon=True) for i in range(N_STREAMERS)]
        start = time.time()
        for th in stream_threads + sess_threads:
            th.start()

        # Once every session has settled on its replica and waits at the gate, choose a replica that
        # holds sessions (so that they must move) and, if possible, serves a stream right now; open
        # the gate and kill it while its sessions' next turns are in flight.
        victim, kill_time, reason, ready_at = None, None, "", None
        while victim is None:
            time.sleep(0.02)
            with lock:
                settled = len(progress) == N_SESSIONS and min(progress.values()) >= GATE_TURN
                homes = {}
                for r in sess_recs:
                    if r.status == 200 and r.sid not in homes:
                        homes[r.sid] = final_upstream(r.upstream)
                busy = {}  # replica -> its sessions
                for sid, a in homes.items():
                    busy[a] = busy.get(a, 0) + 1
                streaming = set(inflight.values())
            if not settled:
                if time.time() - start > 120:
                    fail(f"the sessions did not finish {GATE_TURN} turns each within 120 s")
                continue
            if not busy:
                fail(f"no session request succeeded in its first {GATE_TURN} turns")
            ready_at = ready_at or time.time()
            both = [a for a in busy if a in streaming]
            if both:
                victim = max(both, key=lambda a: busy[a])
                reason = "holds sessions and serves a stream"
            elif time.time() - ready_at > 1.0:
                victim = max(busy, key=lambda a: busy[a])
                reason = "holds sessions; no stream in flight there"
        gate.set()
        time.sleep(KILL_DELAY_S)
        replicas[addr[victim]].proc.kill()
        kill_time = time.time()
        log(f"t={kill_time - start:.1f}s: SIGKILL replica {victim} ({reason})")
        replicas[addr[victim]].proc.wait()

        for th in sess_threads:
            th.join(timeout=120)
        stop.set()
        for th in stream_threads:
            th.join(timeout=90)
        total_s = time.time() - start
        if any(th.is_alive() for th in sess_threads + stream_threads):
            fail("a client thread hung")

        # --- checks ---------------------------------------------------------------------------
        problems = []
        failed = [r for r in sess_recs if r.status != 200]
        retried = [r for r in sess_recs if "," in r.upstream]
        if len(sess_recs) != N_SESSIONS * TURNS:
            problems.append(f"{len(sess_recs)} session requests recorded, expected {N_SESSIONS * TURNS}")
        for r in failed:
            problems.append(f"session {r.sid} turn {r.turn} failed: status {r.status}, {r.error}")

        log("")
        log(f"sessions ({N_SESSIONS} x {TURNS} non-streamed chat turns, X-Session-Id):")
        moved = {}
        for sid in sids:
            recs = sorted((r for r in sess_recs if r.sid == sid), key=lambda r: r.turn)
            served = [final_upstream(r.upstream) for r in recs if r.status == 200]
            if not served:
                continue
            home = served[0]
            path = []
            for a in served:
                if not path or path[-1] != a:
                    path.append(a)
            cached, prompt = sum(r.cached for r in recs), sum(r.prompt for r in recs)
            ok_recs = [r for r in recs if r.status == 200]
            first_moved = next((r for r in ok_recs if final_upstream(r.upstream) != home), None)
            note = ""
            if home != victim:
                if path != [home]:
                    problems.append(f"session {sid}: its replica {home} survived but it was served by {path}")
                note = "stayed"
            else:
                if len(path) > 2:
                    problems.append(f"session {sid}: after its replica died it was served by {path[1:]}, "
                                    f"expected one replica")
                elif len(path) == 2:
                    moved[sid] = path[1]
                    note = (f"moved once, at turn {first_moved.turn}: {first_moved.cached}/{first_moved.prompt} "
                            f"prompt tokens cached there")
                else:
                    note = "finished before the kill"
                after = [r for r in recs if r.t0 > kill_time and final_upstream(r.upstream) == victim]
                if after:
                    problems.append(f"session {sid}: served by the dead replica after the kill")
            log(f"  {sid}: {' -> '.join(path)}  ({note}; all turns: {cached}/{prompt} prompt tokens cached; "
                f"retried {sum(1 for r in recs if ',' in r.upstream)})")
        if not moved:
            problems.append("no session moved off the killed replica: the kill exercised nothing")

        cut = [r for r in stream_recs if not r.done]
        cut_on_victim = [r for r in cut if final_upstream(r.upstream) == victim]
        cut_elsewhere = [r for r in cut if final_upstream(r.upstream) != victim]
        for r in cut_elsewhere:
            problems.append(f"stream {r.idx}.{r.n} on surviving replica {final_upstream(r.upstream) or '?'} "
                            f"did not finish: {r.error}")
        by_replica = {}
        for r in stream_recs:
            a = final_upstream(r.upstream)
            by_replica[a] = by_replica.get(a, 0) + 1

        err_log = open(os.path.join(tmp, "error.log")).read()
        refused = len(re.findall(r"connect\(\) failed \(111", err_log))
        premature = len(re.findall(r"upstream prematurely closed|recv\(\) failed \(104", err_log))

        log("")
        log(f"summary ({total_s:.1f} s, replica {victim} killed at t={kill_time - start:.1f}s):")
        log(f"  non-streamed: {len(sess_recs)} requests, {len(failed)} failed, {len(retried)} retried by nginx "
            f"onto another replica (X-Upstream lists two)")
        log(f"  streams: {len(stream_recs)} (by replica: "
            f"{', '.join(f'{a or None}={n}' for a, n in sorted(by_replica.items()))}), "
            f"{len(stream_recs) - len(cut)} ended with [DONE], {len(cut_on_victim)} cut by the kill "
            f"(expected; no [DONE]), {len(cut_elsewhere)} cut elsewhere")
        for r in cut_on_victim:
            log(f"    stream {r.idx}.{r.n}: {r.chunks} chunks, then {r.error}")
        log(f"  affinity: {sum(1 for s in sids if s not in moved)} sessions kept their replica, "
            f"{len(moved)} moved from {victim} to {sorted(set(moved.values())) or '-'}")
        log(f"  nginx error log: {refused} refused connects, {premature} connections cut mid-response")
        if not cut_on_victim:
            log("  note: no stream was in flight on the killed replica")
        if problems:
            log("")
            for p in problems:
                log(f"PROBLEM: {p}")
            fail(f"{len(problems)} problem(s); logs in {tmp}")
        ok = True
        log("PASS")
    finally:
        stop.set()
        if nginx_proc and nginx_proc.poll() is None:
            nginx_proc.send_signal(signal.SIGQUIT)
            try:
                nginx_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                nginx_proc.kill()
        for r in replicas.values():
            r.terminate()  # all at once: each takes up to 2 s to let go of nginx's keep-alive connections
        for r in replicas.values():
            r.stop(timeout=10)
        if ok and not os.environ.get("DSPARK_TEST_KEEP_TMP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log(f"kept {tmp} (replica logs, nginx error.log and access.log)")


if __name__ == "__main__":
    main()
