#!/usr/bin/python3
"""dspark against llama.cpp's llama-speculative-simple on the memory-bound reference pair, prompt by
prompt alternating (same files, same method, greedy, 2 threads). Prints per-method totals.

Usage: bench/spec_vs_llamacpp.py [N_PROMPTS [LLAMA_NMAX,...]] after `make bench-models`, with
llama.cpp built outside the repository: LLAMA_SPECULATIVE names its llama-speculative-simple
(default: the one on PATH)."""
import json, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA = os.environ.get("LLAMA_SPECULATIVE", "llama-speculative-simple")
TARGET = f"{ROOT}/build/models/ref-target-1.7b-Q4_K_M.gguf"
METHODS = {
    "draft-simple": dict(md=f"{ROOT}/models/ref-draft.gguf", sweep=["--sweep", "adaptive=1", "--sweep", "n-max=8"]),
    "draft-dspark": dict(md=f"{ROOT}/build/models/ref-dspark-1.7b-Q8_0.gguf", sweep=["--sweep", "cost=1", "--sweep", "n-max=8"]),
}
LLAMA_NMAX = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [4, 8]
N_PROMPTS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
prompts = [json.loads(l) for l in open(f"{ROOT}/bench/prompts/code-completion.jsonl")][:N_PROMPTS]

tot = {}  # key -> [tokens, seconds, drafted, accepted]
def add(key, toks, secs, drafted=0, accepted=0):
    t = tot.setdefault(key, [0, 0.0, 0, 0])
    t[0] += toks; t[1] += secs; t[2] += drafted; t[3] += accepted

for i, p in enumerate(prompts):
    pf = f"/tmp/prompt_{i}.jsonl"
    open(pf, "w").write(json.dumps(p) + "\n")
    for name, m in METHODS.items():
        out = f"/tmp/ds_{i}_{name}"
        subprocess.run([f"{ROOT}/build/bin/dspark", "bench", "--spec", "-m", TARGET, "--prompts", pf, "-n", "128",
                        "--max-prompts", "1", "-t", "2", "-r", "1", "--spec-type", name, "-md", m["md"], *m["sweep"],
                        "--out", out], check=True, capture_output=True)
        j = json.load(open(out + ".json"))
        s = j["settings"][0]
        ps = s["prompt_stats"][0]
        add("dspark plain", ps["generated_tokens"], ps["generated_tokens"] / j["plain_tokens_per_second"])
        add(f"dspark {name}", ps["generated_tokens"], ps["generated_tokens"] / s["tokens_per_second"],
            ps["drafted"], ps["accepted"])
        for nmax in LLAMA_NMAX:
            r = subprocess.run([LLAMA, "-m", TARGET, "-md", m["md"], "--spec-type", name, "--spec-draft-n-max", str(nmax),
                                "-n", "128", "--temp", "0", "-t", "2", "-td", "2", "-c", "2048", "-p", p["prompt"]],
                               capture_output=True, text=True)
            log = r.stdout + r.stderr
            d = re.search(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds", log)
            if r.returncode != 0 or not d:
                print(f"llama.cpp {name} n-max {nmax} failed on prompt {i}:\n{log[-1500:]}", file=sys.stderr)
                sys.exit(1)
            dr = re.search(r"n_drafted\s*=\s*(\d+)", log)
            ac = re.search(r"n_accept\s*=\s*(\d+)", log)
            add(f"llama.cpp {name} n-max {nmax}", int(d.group(1)), float(d.group(2)),
                int(dr.group(1)) if dr else 0, int(ac.group(1)) if ac else 0)
    print(f"prompt {i} done", file=sys.stderr, flush=True)

print(f"{'setting':40s} {'tokens':>7s} {'seconds':>8s} {'tok/s':>7s}")
for k, (t, s, dr, ac) in tot.items():
    print(f"{k:40s} {t:7d} {s:8.2f} {t / s:7.1f}  drafted {dr} accepted {ac}")
