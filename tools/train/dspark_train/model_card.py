"""Regenerate models/README.md from the summaries the exporters write (models/ref-*.json).

    /usr/bin/python3 -m dspark_train model-card
"""
import argparse
import hashlib
import json

from .paths import MANIFEST, MODELS_DIR

QUALITY_BAR = 2.4  # nats/token on the validation split (issue 3)
ROLES = [("ref-target", "target (`qwen3`)"), ("ref-draft", "draft model (`qwen3`, draft-simple)"),
         ("ref-dspark", "DSpark drafter (`dflash`)"), ("ref-eagle3", "EAGLE-3 head (`eagle3`)")]

HEADER = """# Reference model family

Trained by `tools/train/` (see `tools/train/README.md`) on the Python 3.11 standard library
(`/usr/lib/python3.11/**/*.py` of Debian 12, no site-/dist-packages), split by a hash of each
file's path: 96 % train, 2 % validation, 2 % test. Debian ships that stdlib in two packages:
libpython3.11-stdlib (668 files, 3.3 M tokens) and libpython3.11-testsuite (its `test` package and
the modules' test folders, 975 more files); the corpus has both (1,643 files: train 9.27 M tokens,
validation 160 k, test 147 k). The tokenizer and the target's first phase were trained on the
first package alone (`corpus-manifest-v1.tsv`); the hash split keeps every file of it in its split.
Everything here is reproducible from the commands below; the corpus manifests and the tokenizer
pin the exact data.

| file | what |
|---|---|
| `corpus-manifest.tsv` | relative path, sha256, split of every corpus file |
| `corpus-manifest-v1.tsv` | the same for the earlier corpus (libpython3.11-stdlib alone) |
| `ref-tokenizer.model` | SentencePiece BPE, 4096 pieces, byte fallback, `<mask>` = 3 |
| `ref-target.gguf` | the target, qwen3, F16 weights / F32 norms, tied embeddings |
| `ref-draft.gguf` | draft model for `draft-simple` (distilled from the target) |
| `ref-dspark.gguf` | DSpark drafter (`dflash` layout), shares the target's embeddings and head |
| `ref-eagle3.gguf` | EAGLE-3 head (llama.cpp's `eagle3` layout: taps 2, 5, 7, one decoder layer), shares the target's embeddings and head; trained with training-time test (`train-eagle3`) |
| (built) `build/models/ref-{draft,dspark}-q8_0.gguf` | Q8_0 copies of both drafters that `make drafters` writes with `dspark quantize`: `make run` and the benchmarks draft with them (a Q8_0 DSpark drafter also reads the shared head as Q8_0). Drafting costs about half; the output is still the F16 target's, token for token |
| `ref-*.json` | training/evaluation summary each exporter writes; this README is generated from them |

All three GGUFs carry a ChatML chat template (`tokenizer.chat_template`, the text of
`tools/train/dspark_train/chatml.jinja`), so `/v1/chat/completions` and `dspark generate --chat` work
with them: `<|im_start|>role ... <|im_end|>` turns, `tools` listed in the system turn inside
`<tools></tools>`, assistant calls as `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (Hermes),
tool results as `<tool_response>`. The vocabulary has no control tokens for the markers; they are
encoded as ordinary text, and the models were trained on code, not on chats. The exporters write
the template; `python3 -m dspark_train set-chat-template IN.gguf OUT.gguf [--template FILE]` adds or
replaces it in an existing file without touching anything else (the tensor data stays byte for byte).
The bundled files got it that way after training: the goldens in `tests/data/golden/` name their
sha256 from before, and still hold, as the tensor data is the same.

"""


def main(argv=None):
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
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
        also = t.get("val_also")
        if also:
            out.append(f"On the validation files of `{also['manifest']}` alone: {also['nats_per_token']:.4f} "
                       f"nats/token, {also['nats_per_char']:.4f} nats/char ({also['tokens']} tokens).\n")
        if t.get("notes"):
            out.append(f"\n{t['notes']}\n")
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
    for stem in ("ref-draft", "ref-dspark", "ref-eagle3"):
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
                out.append(" (realised = greedy: the draft token equals the target's argmax).")
                if "confidence_analytic_mean_abs_err" in ev:
                    out.append(f" Against what the head is trained to predict, the analytic acceptance 1 − ½‖p_draft − "
                               f"p_target‖₁ of the same slots ({', '.join(f'{x:.2f}' for x in ev['analytic_accept_per_position'])}): "
                               f"mean |predicted − analytic| over positions {ev['confidence_analytic_mean_abs_err']:.3f}.")
            sm = (s or {}).get("offline_eval_sampled")
            if sm:
                out.append(f" With speculative sampling at temperature {sm['temperature']:g} ({sm['n_prompts']} prompts, "
                           f"{sm['steps']} steps: each block token sampled from the drafter, accepted with probability "
                           f"min(1, p/q)): τ = {sm['tau']:.2f}; realised acceptance per position "
                           f"{', '.join(f'{x:.2f}' for x in sm['accept_rate_per_position'])} against predicted "
                           f"{', '.join(f'{x:.2f}' for x in sm['confidence_pred_per_position'])}: mean |predicted − "
                           f"realised| over positions **{sm['confidence_mean_abs_err']:.3f}** (weighted "
                           f"{sm['confidence_weighted_abs_err']:.3f}). This is the acceptance the head's training target "
                           f"predicts in expectation (realised analytic acceptance of the same slots: mean "
                           f"{', '.join(f'{x:.2f}' for x in sm['analytic_accept_per_position'])}).")
            for key, ev1 in sorted((s or {}).items()):
                if key.startswith("offline_eval_") and key != "offline_eval_sampled" and isinstance(ev1, dict):
                    out.append(f" On the validation files of `{ev1.get('manifest', key)}` ({ev1['n_prompts']} prompts): "
                               f"τ = {ev1['tau']:.2f}; acceptance per position "
                               f"{', '.join(f'{x:.2f}' for x in ev1['accept_rate_per_position'])}"
                               + (f"; confidence error {ev1['confidence_mean_abs_err']:.3f}"
                                  if "confidence_mean_abs_err" in ev1 else "") + ".")
            out.append("\n")
    out.append("""
## Reproduce

```sh
tools/train/install-deps.sh
export PYTHONPATH=$PWD/tools/train                        # the toolkit's package, dspark_train
/usr/bin/python3 -m dspark_train corpus --check           # the stdlib here matches the manifest
tools/train/pipeline.sh data                              # tokenizer (phase-1 corpus) + token caches
tools/train/launch_pipeline.sh                            # background, resumable (hours on CPU):
#   target phase 1 -> export -> target data -> draft model and DSpark phases 1-3 (phase-1 corpus),
#   target phase 2 (whole stdlib) -> export -> greedy data -> both drafters for it -> eval
make drafters                                             # build/models/ref-*-q8_0.gguf
```
Each stage is one command of `tools/train/pipeline.sh` (listed in `tools/train/README.md`).
""")
    (MODELS_DIR / "README.md").write_text("".join(out))
    print("wrote", MODELS_DIR / "README.md")


if __name__ == "__main__":
    main()
