"""Regenerate models/README.md from the summaries the exporters write (models/ref-*.json).

    /usr/bin/python3 tools/train/model_card.py
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paths import MANIFEST, MODELS_DIR  # noqa: E402
import hashlib  # noqa: E402

QUALITY_BAR = 2.4  # nats/token on the validation split (issue 3)
ROLES = [("ref-target", "target (`qwen3`)"), ("ref-draft", "draft model (`qwen3`, draft-simple)"),
         ("ref-dspark", "DSpark drafter (`dflash`)")]

HEADER = """# Reference model family

Trained by `tools/train/` (see `tools/train/README.md`) on the Python 3.11 standard library
(`/usr/lib/python3.11/**/*.py` of Debian 12, no site-/dist-packages), split by a hash of each
file's path: 96 % train, 2 % validation, 2 % test. Everything here is reproducible from the
commands below; the corpus manifest and the tokenizer pin the exact data.

| file | what |
|---|---|
| `corpus-manifest.tsv` | relative path, sha256, split of every corpus file |
| `ref-tokenizer.model` | SentencePiece BPE, 4096 pieces, byte fallback, `<mask>` = 3 |
| `ref-target.gguf` | the target, qwen3, F16 weights / F32 norms, tied embeddings |
| `ref-draft.gguf` | draft model for `draft-simple` (distilled from the target) |
| `ref-dspark.gguf` | DSpark drafter (`dflash` layout), shares the target's embeddings and head |
| (built) `build/models/ref-{draft,dspark}-q8_0.gguf` | Q8_0 copies of both drafters that `make drafters` writes with `dspark quantize`: `make run` and the benchmarks draft with them (a Q8_0 DSpark drafter also reads the shared head as Q8_0). Drafting costs about half; the output is still the F16 target's, token for token |
| `ref-*.json` | training/evaluation summary each exporter writes; this README is generated from them |

"""


def main():
    manifest_sha = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()
    out = [HEADER]
    out.append(f"Corpus manifest sha256: `{manifest_sha}`\n\n")
    out.append("| model | file | size | params | tokens trained | val nats/token | val nats/char | exported |\n")
    out.append("|---|---|---|---|---|---|---|---|\n")
    summaries = {}
    for stem, role in ROLES:
        p = MODELS_DIR / f"{stem}.json"
        if not p.exists():
            out.append(f"| {role} | `{stem}.gguf` | not yet trained | | | | | |\n")
            continue
        s = json.loads(p.read_text())
        summaries[stem] = s
        ta = s.get("train_args", {})
        # A DSpark drafter's summary has no token count or validation loss: it trains on
        # target-generated sequences (steps x batch x seq_len positions) and is judged by tau.
        # A warm-started run's own count covers its last phase only; tokens_all_phases (set with
        # the notes of a multi-phase model) covers them all.
        tokens = s.get("tokens_all_phases",
                       s.get("tokens", ta.get("steps", 0) * ta.get("batch", 0) * ta.get("seq_len", 0)))
        val_tok = f"{s['val_nats_per_token']:.4f}" if "val_nats_per_token" in s else "— (τ below)"
        val_chr = f"{s['val_nats_per_char']:.4f}" if "val_nats_per_char" in s else "—"
        out.append(f"| {role} | `{s['file']}` | {s['bytes'] / 1e6:.1f} MB | {s['params'] / 1e6:.2f} M | "
                   f"{tokens / 1e6:.2f} M | {val_tok} | {val_chr} | {s['exported']} |\n")
    t = summaries.get("ref-target")
    if t:
        c = t["config"]
        a = t.get("train_args", {})
        out.append(f"""
## Target

`qwen3`: {c['n_layer']} layers, hidden {c['n_embd']}, {c['n_head']} query heads and {c['n_head_kv']} KV heads
of {c['head_dim']}, FFN {c['n_ff']}, vocabulary {c['vocab_size']}, context {c['n_ctx']}, RoPE base
{c['rope_base']:g} (NeoX), RMSNorm eps {c['norm_eps']:g}, tied embeddings (no `output.weight`).
Trained {t['tokens'] / 1e6:.2f} M tokens ({t['steps']} steps) of a {a.get('total_tokens', 0) / 1e6:.0f} M-token
cosine schedule (AdamW, lr {a.get('lr')}, {a.get('tokens_per_step')} tokens/step, sequences of
{a.get('seq_len')} tokens with every {a.get('long_every')}th step at {c['n_ctx']}).
Validation: {t['val_nats_per_token']:.4f} nats/token, {t['val_nats_per_char']:.4f} nats/char
({t['val_tokens']} tokens, {t['val_chars']} characters; measured on the F16 weights as exported, computed
in {t.get('val_precision', 'fp32')}).
Tokenizer sha256 `{t['tokenizer_sha256']}`; file sha256 `{t['sha256']}`.
""")
        if t["val_nats_per_token"] > QUALITY_BAR:
            # The schedule ends on a whole step, up to one step short of total_tokens.
            done = a.get('total_tokens') and t['tokens'] + a.get('tokens_per_step', 0) > a['total_tokens']
            if done:
                out.append(f"\n**Below the quality bar.** Issue 3 asks for ≤ {QUALITY_BAR} nats/token on the validation "
                           f"split. Training finished its schedule and the validation loss had flattened: the model "
                           f"overfits the small train split ({a.get('total_tokens', 0) / 1e6:.0f} M tokens is several "
                           f"epochs of it), and the validation split is a handful of files. Meeting the bar needs a "
                           f"changed recipe (regularisation, early stopping, another model size), not more tokens.\n")
            else:
                out.append(f"\n**Status: training in progress.** The bar of issue 3 is ≤ {QUALITY_BAR} nats/token on the "
                           f"validation split; this export is an intermediate checkpoint.\n")
        if t.get("samples"):
            out.append("\n### Greedy continuations of held-out prompts (test split)\n")
            for smp in t["samples"]:
                out.append(f"\n`{smp['source']}` ({smp['id']}), prompt then **64 greedy tokens**:\n\n```python\n"
                           f"{smp['prompt']}# ---- model ----\n{smp['completion']}\n```\n")
    for stem in ("ref-draft", "ref-dspark"):
        s = summaries.get(stem)
        if s and s.get("notes"):
            out.append(f"\n## {stem}\n\n{s['notes']}\n")
        ev = (s or {}).get("offline_eval")
        if ev:
            length = (f"draft length {ev['draft_n']}" if "draft_n" in ev else
                      f"block size {ev['block_size']}" if "block_size" in ev else "the drafter's whole block")
            out.append(f"\n### {stem}: offline acceptance (`eval_drafters.py`)\n\n"
                       f"Greedy, {ev['split']} split, {ev['n_prompts']} prompts of {ev['prompt_len']} tokens, "
                       f"{ev['gen_len']} target tokens each, {length}: **τ = {ev['tau']:.2f}** over {ev['steps']} steps; "
                       f"acceptance per position {', '.join(f'{x:.2f}' for x in ev['accept_rate_per_position'])}.")
            if "reached_per_position" in ev:
                out.append(f" Drafts reaching each position: {', '.join(str(x) for x in ev['reached_per_position'])}.")
            if "confidence_mean_abs_err" in ev:
                out.append(f" Confidence head: mean predicted acceptance per position "
                           f"{', '.join(f'{x:.2f}' for x in ev['confidence_pred_per_position'])}; mean |predicted − "
                           f"realised| over positions {ev['confidence_mean_abs_err']:.3f}")
                if "confidence_weighted_abs_err" in ev:
                    out.append(f", weighted by the drafts reaching each position "
                               f"{ev['confidence_weighted_abs_err']:.3f}")
                out.append(".")
            out.append("\n")
    out.append("""
## Reproduce

```sh
tools/train/install-deps.sh
/usr/bin/python3 tools/train/corpus.py --check            # the stdlib here matches the manifest
/usr/bin/python3 tools/train/tokenizer.py train           # models/ref-tokenizer.model
/usr/bin/python3 tools/train/tokenizer.py encode          # token caches in $DSPARK_TRAIN_DIR
tools/train/launch_target.sh                              # background, resumable (hours on CPU)
/usr/bin/python3 tools/train/export_target.py             # models/ref-target.gguf + .json
/usr/bin/python3 tools/train/model_card.py                # this file
tools/train/launch_pipeline.sh target-data draft dspark eval  # target data, draft model, DSpark drafter, offline tau (background)
/usr/bin/python3 tools/train/export_golden.py --dspark models/ref-dspark.gguf   # goldens of both
make drafters                                             # build/models/ref-*-q8_0.gguf
```
""")
    (MODELS_DIR / "README.md").write_text("".join(out))
    print("wrote", MODELS_DIR / "README.md")


if __name__ == "__main__":
    main()
