"""What the trainers' resume tests share: a tiny teacher checkpoint, and the check that a run of six
steps logs the same losses and metrics as three steps plus three resumed from the checkpoint (model, optimizer
and RNG state restored exactly)."""
import csv
import json

TINY_TARGET = json.dumps(dict(n_layer=4, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=32, n_ctx=64))


def tiny_teacher(d):
    """A one-step qwen3 training checkpoint in d/t (the drafters' --teacher)."""
    from dspark_train import train_target
    train_target.main(["--config", TINY_TARGET, "--seq-len", "32", "--tokens-per-step", "128", "--eval-every", "1000",
                       "--total-tokens", "1000", "--dtype", "fp32", "--out", f"{d}/t", "--max-steps", "1"])
    return f"{d}/t/ckpt.pt"


def assert_resume_is_exact(test, main, common, d):
    """main(argv) trains: six steps in d/a against 3 + 3 resumed in d/b (common logs every step).
    Every logged column but the clock's agrees; returns run a's rows."""
    main(common + ["--out", f"{d}/a", "--max-steps", "6"])
    main(common + ["--out", f"{d}/b", "--max-steps", "3"])
    main(common + ["--out", f"{d}/b", "--max-steps", "3", "--resume"])

    def rows(run):
        with open(f"{d}/{run}/losses.csv") as f:
            return [{k: v for k, v in r.items() if k not in ("time", "tok_per_s")} for r in csv.DictReader(f)]
    a = rows("a")
    test.assertEqual(len(a), 6)
    test.assertEqual(a, rows("b"))
    return a
