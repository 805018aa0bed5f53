#!/usr/bin/python3
"""dspark against llama.cpp's llama-speculative-simple, prompt by prompt alternating (same files, same
method, greedy, 2 threads). Prints per-method totals: tokens, seconds, tok/s, drafted, accepted and
the acceptance rate (accepted / drafted).

Default: the memory-bound reference pair after `make bench-models`, dspark with its documented
schedule per method, llama.cpp at each --llama-nmax. With --fixed N, dspark verifies a fixed N
tokens per step (no adaptive schedule) and llama.cpp runs n-max N with p-min 0: both then draft the
same chains from the same files, so their acceptance rates compare method to method.

llama.cpp is built outside the repository: LLAMA_SPECULATIVE names its llama-speculative-simple
(default: the one on PATH).

    bench/spec_vs_llamacpp.py --prompts 20 --llama-nmax 4,8
    bench/spec_vs_llamacpp.py --target models/ref-target.gguf --methods draft-eagle3 --fixed 4
    bench/spec_vs_llamacpp.py --target DEEPSEEK.gguf --methods draft-mtp   # a model with an MTP block
"""
import argparse, json, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA = os.environ.get("LLAMA_SPECULATIVE", "llama-speculative-simple")
PAIR = f"{ROOT}/build/models/ref-target-1.7b-Q4_K_M.gguf"
# Per method: the drafter for the inflated pair, the drafter for the bundled small target, and
# dspark's documented schedule.
METHODS = {
    "draft-simple": (f"{ROOT}/models/ref-draft.gguf", f"{ROOT}/models/ref-draft.gguf", ["adaptive=1", "n-max=8"]),
    "draft-dspark": (f"{ROOT}/build/models/ref-dspark-1.7b-Q8_0.gguf", f"{ROOT}/models/ref-dspark.gguf",
                     ["cost=1", "n-max=8"]),
    "draft-eagle3": (f"{ROOT}/build/models/ref-eagle3-1.7b-Q8_0.gguf", f"{ROOT}/models/ref-eagle3.gguf",
                     ["adaptive=1", "n-max=8"]),
    # The target's own multi-token-prediction block (a deepseek2 --target with nextn_predict_layers):
    # no draft file in either engine.
    "draft-mtp": (None, None, ["adaptive=1", "n-max=8"]),
}

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--prompts", type=int, default=20, help="held-out code prompts (bench/prompts/code-completion.jsonl)")
ap.add_argument("--target", default=PAIR, help="target GGUF (default: the inflated 1.7B pair's Q4_K_M)")
ap.add_argument("--methods", default="draft-simple,draft-dspark", help="comma-separated --spec-type names")
ap.add_argument("--llama-nmax", default="4,8", help="llama.cpp --spec-draft-n-max values")
ap.add_argument("--fixed", type=int, default=0, help="dspark fixed n-max N and llama.cpp n-max N, p-min 0")
ap.add_argument("-n", type=int, default=128, help="tokens per prompt")
a = ap.parse_args()

small = os.path.abspath(a.target) != os.path.abspath(PAIR)
nmaxes = [a.fixed] if a.fixed else [int(x) for x in a.llama_nmax.split(",")]
prompts = [json.loads(l) for l in open(f"{ROOT}/bench/prompts/code-completion.jsonl")][:a.prompts]

tot = {}  # key -> [tokens, seconds, drafted, accepted]
def add(key, toks, secs, drafted=0, accepted=0):
    t = tot.setdefault(key, [0, 0.0, 0, 0])
    t[0] += toks; t[1] += secs; t[2] += drafted; t[3] += accepted

for i, p in enumerate(prompts):
    pf = f"/tmp/prompt_{i}.jsonl"
    open(pf, "w").write(json.dumps(p) + "\n")
    for name in a.methods.split(","):
        md = METHODS[name][1 if small else 0]
        sweep = ["adaptive=0", f"n-max={a.fixed}"] if a.fixed else METHODS[name][2]
        out = f"/tmp/ds_{i}_{name}"
        subprocess.run([f"{ROOT}/build/bin/dspark", "bench", "--spec", "-m", a.target, "--prompts", pf, "-n", str(a.n),
                        "--max-prompts", "1", "-t", "2", "-r", "1", "--spec-type", name, *(["-md", md] if md else []),
                        *[x for s in sweep for x in ("--sweep", s)], "--out", out], check=True, capture_output=True)
        j = json.load(open(out + ".json"))
        s = j["settings"][0]
        ps = s["prompt_stats"][0]
        add("dspark plain", ps["generated_tokens"], ps["generated_tokens"] / j["plain_tokens_per_second"])
        add(f"dspark {name}", ps["generated_tokens"], ps["generated_tokens"] / s["tokens_per_second"],
            ps["drafted"], ps["accepted"])
        for nmax in nmaxes:
            extra = ["--spec-draft-p-min", "0"] if a.fixed else []
            r = subprocess.run([LLAMA, "-m", a.target, *(["-md", md] if md else []), "--spec-type", name,
                                "--spec-draft-n-max", str(nmax),
                                *extra, "-n", str(a.n), "--temp", "0", "-t", "2", "-td", "2", "-c", "2048",
                                "-p", p["prompt"]], capture_output=True, text=True, errors="replace")
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

print(f"{'setting':40s} {'tokens':>7s} {'seconds':>8s} {'tok/s':>7s} {'drafted':>8s} {'accepted':>8s} {'rate':>6s}")
for k, (t, s, dr, ac) in tot.items():
    rate = f"{ac / dr:6.3f}" if dr else "     -"
    print(f"{k:40s} {t:7d} {s:8.2f} {t / s:7.1f} {dr:8d} {ac:8d} {rate}")
