"""Check a deepseek2 GGUF (trunk + MTP block) against llama.cpp itself: runs the peer's
llama-speculative-simple with --spec-type draft-mtp (greedy, draft length --n-max) and compares,
round by round, what it drafts (its debug log's "draft candidate 0" ids), how many drafts it
accepts and which token it commits, plus the generated text and the n_drafted / n_accept totals,
with ref_forward.spec_simple_mtp's replay of the same loop on the numpy reference (float64).
Not part of the tests (llama.cpp is an optional peer).

    /usr/bin/python3 -m dspark_train check-deepseek-llamacpp models/ref-deepseek.gguf \\
        --llama-bin /work/peer/llama.cpp/build/bin -p "def fib(n):" -n 32

llama.cpp computes in F16/F32 (activations rounded to F16 in F16 matmuls, an F16 KV cache), the
reference in float64: a draft or a committed token may differ where two logits (or two experts'
router scores) are within rounding; the report counts the rounds that agree.
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from . import llama_spm
from . import ref_forward
from . import tokenizer as tok

_CAND = re.compile(r"draft candidate\s+0, pos\s+(\d+):\s+(\d+)")
_ACC = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")
_TOT = re.compile(r"n_(predict|drafted|accept)\s+=\s+(\d+)")


def run_llamacpp(bin_dir, gguf, prompt, n, n_max, threads=2, ctx=1024, tries=5):
    """The tool's text (stdout), rounds and totals. llama.cpp's asynchronous logger may lose the
    last lines at exit (its common_log_main() is leaked on purpose, llama.cpp issue 22142), more
    often on a busy machine: a run whose log lacks the totals is repeated."""
    for _ in range(tries):
        r = _run_llamacpp(bin_dir, gguf, prompt, n, n_max, threads, ctx)
        if "n_accept" in r:
            return r
    return r


def _run_llamacpp(bin_dir, gguf, prompt, n, n_max, threads, ctx):
    cmd = [str(Path(bin_dir) / "llama-speculative-simple"), "-m", str(gguf), "--spec-type", "draft-mtp",
           "--spec-draft-n-max", str(n_max), "-p", prompt, "-n", str(n), "--temp", "0", "-t", str(threads),
           "--no-repack", "-c", str(ctx), "-v"]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    rounds, cur = [], []
    for line in p.stderr.splitlines():
        m = _CAND.search(line)
        if m:
            if int(m.group(1)) == 0 and cur:
                cur = []
            cur.append(int(m.group(2)))
            continue
        m = _ACC.search(line)
        if m:
            rounds.append({"draft": cur, "n_draft": int(m.group(2)), "n_accept": int(m.group(1)),
                           "last": int(m.group(3))})
            cur = []
    totals = {f"n_{k}": int(v) for k, v in _TOT.findall(p.stderr)}
    return {"cmd": cmd, "text": p.stdout, "rounds": rounds, **totals}


def check(gguf, prompt, n, n_max, bin_dir, threads=2):
    ids = [tok.BOS_ID] + llama_spm.LlamaSpm.from_gguf(gguf).encode(prompt)
    rounds = []
    out, nd, na = ref_forward.spec_simple_mtp(gguf, ids, n, n_max=n_max, rounds=rounds)
    sp = tok.load()
    ref_text = sp.decode(out[:-1] if out and out[-1] == tok.EOS_ID else out)
    lc = run_llamacpp(bin_dir, gguf, prompt, n, n_max, threads)
    same_rounds = sum(a == b for a, b in zip(rounds, lc["rounds"]))
    return {
        "prompt": prompt, "prompt_ids": ids, "cmd": " ".join(lc["cmd"]),
        "text_equal": ref_text in lc["text"] and prompt + ref_text in lc["text"],
        "ref_text": ref_text,
        "ref": {"n_predict": len(out), "n_drafted": nd, "n_accept": na},
        "llamacpp": {k: lc.get(k) for k in ("n_predict", "n_drafted", "n_accept")},
        "rounds": len(rounds), "rounds_llamacpp": len(lc["rounds"]), "rounds_equal": same_rounds,
        "first_difference": next(({"round": i, "ref": a, "llamacpp": b} for i, (a, b) in
                                  enumerate(zip(rounds, lc["rounds"])) if a != b), None),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--llama-bin", default="/work/peer/llama.cpp/build/bin")
    ap.add_argument("-p", "--prompt", action="append", help="prompt(s) (default: three code prompts)")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--n-max", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args(argv)
    prompts = a.prompt or ["def fib(n):\n", "import os\nimport sys\n\n\nclass ", "    for i in range("]
    ok = True
    for p in prompts:
        r = check(a.gguf, p, a.n, a.n_max, a.llama_bin, a.threads)
        print(json.dumps(r, ensure_ascii=False))
        ok &= r["text_equal"] and r["rounds_equal"] == r["rounds"] == r["rounds_llamacpp"]
    print("all equal" if ok else "DIFFERENCES (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
