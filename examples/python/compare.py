#!/usr/bin/env python3
"""Plain vs speculative decoding on the same prompt, with the bundled models.

Runs the target alone, then with the draft model and with the DSpark drafter, greedy, and prints
each one's tokens/s, the speed-up over plain decoding and the acceptance; exits with status 1 if a
speculative output differs from the plain one (greedy speculative decoding is exact: it must not).

    cmake --build build --target dspark_python
    PYTHONPATH=build/python python3 examples/python/compare.py
    PYTHONPATH=build/python python3 examples/python/compare.py --prompt 'import os' --max-new-tokens 200
"""
import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "build" / "python"))  # when PYTHONPATH does not name it

from dspark import Model, SpeculativeDecodingEngine  # noqa: E402

PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'


def run(engine, input_ids, args):
    # A short warm-up: page the weights in and (adaptive scheduling) profile the target's cost.
    engine.generate(input_ids, max_new_tokens=8, do_sample=False)
    best = None
    for _ in range(args.repeat):
        out = engine.generate(input_ids, max_new_tokens=args.max_new_tokens, do_sample=False)
        stats = engine.stats
        if best is None or stats["tokens_per_second"] > best[1]["tokens_per_second"]:
            best = (out, stats)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(ROOT / "models/ref-target.gguf"))
    p.add_argument("--draft", default=str(ROOT / "models/ref-draft.gguf"), help="draft model ('' to skip)")
    p.add_argument("--dspark", default=str(ROOT / "models/ref-dspark.gguf"), help="DSpark drafter ('' to skip)")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--draft-length", type=int, default=5)
    p.add_argument("--no-confidence-scheduling", action="store_true",
                   help="a fixed schedule: draft_length tokens every step")
    p.add_argument("--confidence-threshold", type=float, default=0.5)
    p.add_argument("--prompt-lookup", action="store_true", help="prompt lookup first, the drafter elsewhere")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per engine; the fastest is reported")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()

    target = Model(args.target)  # loaded once, shared by every engine
    input_ids = target.tokenizer.encode(args.prompt)
    common = dict(max_length=args.max_length, draft_length=args.draft_length,
                  use_confidence_scheduling=not args.no_confidence_scheduling,
                  confidence_threshold=args.confidence_threshold)

    plain = SpeculativeDecodingEngine(target_model=target, draft_model=None, n_threads=args.threads, **common)
    print(f"device: {plain.device}, prompt: {len(input_ids)} tokens, generating {args.max_new_tokens}")
    base_out, base = run(plain, input_ids, args)
    print(f"{'plain':<14} {base['tokens_per_second']:8.1f} tok/s")

    failed = False
    for name, path in (("draft model", args.draft), ("DSpark", args.dspark)):
        if not path:
            continue
        engine = SpeculativeDecodingEngine(target_model=target, draft_model=path, n_threads=args.threads,
                                           prompt_lookup=args.prompt_lookup, **common)
        out, s = run(engine, input_ids, args)
        identical = out == base_out
        failed |= not identical
        per_pos = " ".join(f"{a:.2f}" for a in s["acceptance_per_position"])
        print(f"{name:<14} {s['tokens_per_second']:8.1f} tok/s  speed-up {s['tokens_per_second'] / base['tokens_per_second']:.2f}x"
              f"  ({engine.draft_type}, schedule {engine.schedule['mode']}{', adaptive' if engine.schedule['adaptive'] else ''})")
        print(f"{'':<14} acceptance {100 * s['acceptance_rate']:.1f}% ({s['accepted_tokens']}/{s['drafted_tokens']} "
              f"drafted tokens), tau {s['tau']:.2f}, target calls {s['target_calls']}, draft calls {s['draft_calls']}")
        print(f"{'':<14} acceptance per position: {per_pos or '-'}")
        print(f"{'':<14} time ms: draft {s['draft_ms']:.1f}, verify {s['verify_ms']:.1f}, sample {s['sample_ms']:.1f}, "
              f"other {s['other_ms']:.1f}; outputs {'identical' if identical else 'DIFFER'}")

    print("---- output ----")
    print(plain.tokenizer.decode(base_out))
    if failed:
        print("compare.py: greedy speculative output differs from plain decoding", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
