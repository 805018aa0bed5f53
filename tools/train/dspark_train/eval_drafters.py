"""Offline acceptance of the drafters against the target (greedy), on the validation split.

For each prompt (a window of the validation token stream) the target's greedy continuation y is
computed once. Speculative decoding is then simulated exactly as a greedy engine would run it: at
anchor j (the newest committed token) the drafter proposes n tokens; the longest prefix equal to
y is accepted, plus the target's bonus token, so the step commits a + 1 tokens. Reported:
tau = mean tokens per step (a + 1), acceptance per draft position (conditional on reaching it),
and for DSpark the confidence head's calibration: per position, mean predicted survival vs the
realised acceptance rate.

    /usr/bin/python3 -m dspark_train eval-drafters --draft models/ref-draft.gguf --dspark models/ref-dspark.gguf
    /usr/bin/python3 -m dspark_train eval-drafters --eagle3 models/ref-eagle3.gguf
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch

from . import decode
from . import gguf_model
from . import gguf_reader
from . import teacher as teacher_mod
from . import tokenizer as tok
from . import trainutil as tu
from .dspark_model import DSpark, DSparkConfig
from .paths import TARGET_GGUF


def load_dspark(path):
    """DSpark from a training checkpoint or from our dflash GGUF."""
    if str(path).endswith(".gguf"):
        from . import export_dspark
        f = gguf_reader.read(path)
        md = f.metadata
        c = gguf_model.config_from_metadata(md, "dflash")
        cfg = DSparkConfig(**{k: getattr(c, k) for k in ("vocab_size", "n_layer", "n_embd", "n_head", "n_head_kv",
                                                         "head_dim", "n_ff", "n_ctx", "rope_base", "norm_eps")},
                           target_layer_ids=[l - 1 for l in md["dflash.target_layers"]],
                           block_size=md["dflash.block_size"], mask_token_id=md["tokenizer.ggml.mask_token_id"],
                           markov_rank=f.tensor_info["markov_w1.weight"][0][0])
        m = DSpark(cfg)
        inv = {export_dspark.tensor_name(k): k for k in m.state_dict()}
        m.load_state_dict({inv[n]: torch.from_numpy(np.array(a, dtype=np.float32)) for n, a in f.tensors.items()})
    else:
        ck = tu.load_checkpoint(path)
        m = DSpark(DSparkConfig(**ck["config"]))
        m.load_state_dict(ck["model"])
    return m.eval()


def load_eagle3(path):
    """(Eagle3, own token_embd or None, own output or None, d2t or None) from our eagle3 GGUF, or
    (Eagle3, None, None, None) from a training checkpoint (the drafter then uses the target's tables)."""
    from .eagle3_model import Eagle3, Eagle3Config
    if str(path).endswith(".gguf"):
        from . import export_eagle3
        f = gguf_reader.read(path)
        md = f.metadata
        c = gguf_model.config_from_metadata(md, "eagle3")
        cfg = Eagle3Config(**{k: getattr(c, k) for k in ("vocab_size", "n_layer", "n_embd", "n_head", "n_head_kv",
                                                         "head_dim", "n_ff", "n_ctx", "rope_base", "norm_eps")},
                           target_n_embd=md["eagle3.target_hidden_size"],
                           target_layers=list(md["eagle3.target_layers"]),
                           norm_before_fc=bool(md.get("eagle3.norm_before_fc", False)),
                           norm_before_residual=bool(md.get("eagle3.norm_before_residual", False)))
        m = Eagle3(cfg)
        tables = {"token_embd.weight": None, "output.weight": None, "d2t": None}
        state = {}
        for n, a in f.tensors.items():
            if n in tables:
                tables[n] = torch.from_numpy(np.array(a))
            else:
                state[export_eagle3.param_name(n)] = torch.from_numpy(np.array(a, dtype=np.float32))
        m.load_state_dict(state)
        emb, head, d2t = tables["token_embd.weight"], tables["output.weight"], tables["d2t"]
        return m.eval(), (None if emb is None else emb.float()), (None if head is None else head.float()), d2t
    ck = tu.load_checkpoint(path)
    m = Eagle3(Eagle3Config(**ck["config"]))
    m.load_state_dict(ck["model"])
    return m.eval(), None, None, None


def val_stream(manifest=None):
    """The validation split's token stream; with a manifest, of that manifest's validation files
    (e.g. the earlier corpus, models/corpus-manifest-v1.tsv), tokenised here."""
    return tok.load_cache("val")[0] if manifest is None else tok.encode_split("val", Path(manifest))[0]


def prompts_and_continuations(target, n_prompts, prompt_len, gen_len, manifest=None):
    val = val_stream(manifest)
    starts = np.linspace(0, len(val) - prompt_len - 1, n_prompts).astype(int)
    seqs = []
    for s in starts:
        p = val[s:s + prompt_len].astype(int).tolist()
        y = decode.greedy(target, p, gen_len, stop_ids=())
        seqs.append((p, y))
    return seqs


class Stats:
    def __init__(self, n):
        self.n = n
        self.steps, self.committed = 0, 0
        self.reached = np.zeros(n)
        self.accepted = np.zeros(n)
        self.conf_sum = np.zeros(n)
        self.analytic_sum = np.zeros(n)

    def add(self, drafts, truth, confs=None, analytic=None):
        a = 0
        while a < len(drafts) and drafts[a] == truth[a]:
            a += 1
        for k in range(min(a + 1, len(drafts))):
            self.reached[k] += 1
            self.accepted[k] += k < a
            if confs is not None:
                self.conf_sum[k] += confs[k]
            if analytic is not None:
                self.analytic_sum[k] += analytic[k]
        self.steps += 1
        self.committed += a + 1
        return a

    def report(self, with_conf=False):
        r = {"tau": round(self.committed / max(1, self.steps), 3), "steps": self.steps,
             "accept_rate_per_position": [round(x, 3) for x in self.accepted / np.maximum(1, self.reached)],
             "reached_per_position": [int(x) for x in self.reached]}
        if with_conf:
            pred = self.conf_sum / np.maximum(1, self.reached)
            real = self.accepted / np.maximum(1, self.reached)
            err = np.abs(pred - real)
            seen = self.reached > 0
            r["confidence_pred_per_position"] = [round(x, 3) for x in pred]
            r["confidence_abs_err_per_position"] = [round(x, 3) for x in err]
            # The bar's reading: every position that was reached counts the same. Deep positions are
            # reached rarely, so their error is mostly sampling noise; the weighted mean (by drafts
            # that reached the position) says how far the head is off per verified slot.
            r["confidence_mean_abs_err"] = round(float(err[seen].mean()), 3)
            r["confidence_weighted_abs_err"] = round(float((err * self.reached)[seen].sum() / self.reached[seen].sum()), 3)
            # What the head is trained to predict: the analytic acceptance 1 - TV(p_draft, p_target) of
            # the slot (the acceptance probability of speculative sampling), here in the same reached
            # slots. Greedy realised acceptance above is a different variable: a draft whose argmax
            # matches is accepted whole, so it runs above the analytic value where both are peaked.
            analytic = self.analytic_sum / np.maximum(1, self.reached)
            aerr = np.abs(pred - analytic)
            r["analytic_accept_per_position"] = [round(x, 3) for x in analytic]
            r["confidence_analytic_abs_err_per_position"] = [round(x, 3) for x in aerr]
            r["confidence_analytic_mean_abs_err"] = round(float(aerr[seen].mean()), 3)
        return r


@torch.no_grad()
def eval_dspark(target, drafter, seqs, n_draft):
    st = Stats(n_draft)
    ids_l = drafter.c.target_layer_ids
    for p, y in seqs:
        s = p + y
        hidden, tapped = target.hidden_states(torch.tensor([s]), taps=tuple(ids_l))
        taps = torch.cat([tapped[l] for l in ids_l], -1).float()
        p_target = target.logits_from_hidden(hidden)[0].float().softmax(-1)  # row i predicts s[i + 1]
        j = len(p)  # y[0] is the first target token: the first anchor
        while j + n_draft < len(s):
            toks, confs, z = drafter.draft(target.tok_embd.weight.float(), taps[:, :j], s[j], j, n_draft)
            analytic = (1 - 0.5 * (z.softmax(-1) - p_target[j:j + n_draft]).abs().sum(-1)).tolist()
            a = st.add(toks, s[j + 1:j + 1 + n_draft], confs, analytic)
            j += a + 1
    return st.report(with_conf=True)


@torch.no_grad()
def eval_dspark_sampled(target, drafter, prompts, n_draft, gen_len, temperature, seed):
    """Speculative sampling as the engine runs it at `temperature`: each block token sampled from the
    drafter's chained distribution q, accepted with probability min(1, p/q), a rejection resampled
    from norm(max(0, p - q)), a bonus token after a full block. Realised acceptance here is what the
    confidence head's target, the analytic acceptance 1 - TV(q, p), predicts in expectation (at
    temperature 1, the distributions it is trained on)."""
    st = Stats(n_draft)
    ids_l = drafter.c.target_layer_ids
    embd = target.tok_embd.weight.float()
    gen = torch.Generator().manual_seed(seed)
    for p in prompts:
        s = list(p)
        hidden, tapped = target.hidden_states(torch.tensor([s[:-1]]), taps=tuple(ids_l))
        taps = torch.cat([tapped[l] for l in ids_l], -1).float()  # rows before the anchor s[-1]
        while len(s) - len(p) < gen_len and len(s) + n_draft + 1 < target.c.n_ctx:
            j = len(s) - 1
            toks, confs, z = drafter.draft(embd, taps[:, :j], s[j], j, n_draft, temperature, gen)
            q = (z / temperature).softmax(-1)
            # One target pass over the anchor and the block: verification, and the taps of whatever
            # it commits.
            hidden, tapped = target.hidden_states(torch.tensor([s + toks]), taps=tuple(ids_l))
            p_t = (target.logits_from_hidden(hidden[:, j:]).float()[0] / temperature).softmax(-1)
            a, nxt = 0, None
            while a < n_draft:
                x = toks[a]
                if torch.rand(1, generator=gen).item() < min(1.0, (p_t[a, x] / q[a, x]).item()):
                    a += 1
                    continue
                resid = (p_t[a] - q[a]).clamp(min=0)
                nxt = int(torch.multinomial(resid / resid.sum(), 1, generator=gen))
                break
            if nxt is None:
                nxt = int(torch.multinomial(p_t[n_draft], 1, generator=gen))
            analytic = (1 - 0.5 * (q - p_t[:n_draft]).abs().sum(-1)).tolist()
            # Stats.add counts the accepted prefix by comparing with the "truth": the accepted tokens,
            # then a token that differs from the rejected draft.
            st.add(toks, toks[:a] + [-1] * (n_draft - a), confs, analytic)
            taps = torch.cat([taps, torch.cat([tapped[l][:, j:j + a + 1] for l in ids_l], -1).float()], 1)
            s += toks[:a] + [nxt]
    r = st.report(with_conf=True)
    r["temperature"] = temperature
    return r


@torch.no_grad()
def eval_eagle3(target, loaded, seqs, n_draft):
    """Greedy chain drafting as llama.cpp's eagle3 driver does it: at anchor j (the newest committed
    token s[j], target features known for positions < j) the rows (s[P+1], g_P), P < j, are in the
    draft's cache, the row at j-1 predicts the first draft, each further row takes the previous
    draft and the previous row's prenorm output. tau and acceptance per draft position as for the
    other drafters; the drafter's KV cache keeps the committed rows across steps."""
    from .eagle3_model import Eagle3Cache
    drafter, own_embd, own_head, d2t = loaded
    st = Stats(n_draft)
    embd = (target.tok_embd.weight if own_embd is None else own_embd).float()
    head = (target.tok_embd.weight if own_head is None else own_head).float()
    ids = tuple(l - 1 for l in drafter.c.target_layers)  # layer L's input = layer L-1's output
    for p, y in seqs:
        s = p + y
        _, tapped = target.hidden_states(torch.tensor([s]), taps=ids)
        feats = torch.cat([tapped[i] for i in ids], -1).float()
        cache = Eagle3Cache()
        j = len(p)  # y[0] is the first target token: the newest committed token
        while j + n_draft < len(s):
            toks, _ = drafter.draft(embd, head, feats[:, :j], s[:j + 1], n_draft, cache=cache, d2t=d2t)
            a = st.add(toks, s[j + 1:j + 1 + n_draft])
            j += a + 1
    return st.report()


@torch.no_grad()
def eval_draft_model(target, draft, seqs, n_draft):
    st = Stats(n_draft)
    for p, y in seqs:
        s = p + y
        cache = decode.KVCache(len(draft.blocks))
        j = len(p)
        while j + n_draft < len(s):
            if cache.n < j:  # commit everything before the anchor
                decode.forward_cached(draft, torch.tensor([s[cache.n:j]]), cache)
            logits = decode.forward_cached(draft, torch.tensor([[s[j]]]), cache)
            drafts = []
            for _ in range(n_draft):
                t = int(logits[0, -1].argmax())
                drafts.append(t)
                logits = decode.forward_cached(draft, torch.tensor([[t]]), cache)
            cache.crop(j + 1)
            a = st.add(drafts, s[j + 1:j + 1 + n_draft])
            j += a + 1
    return st.report()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_GGUF))
    ap.add_argument("--draft", default=None, help="draft model GGUF (qwen3) or checkpoint")
    ap.add_argument("--dspark", default=None, help="DSpark GGUF (dflash) or checkpoint")
    ap.add_argument("--eagle3", default=None, help="EAGLE-3 GGUF (eagle3) or checkpoint")
    ap.add_argument("--eagle3-n", type=int, default=5, help="draft length of the EAGLE-3 drafter")
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--draft-n", type=int, default=5, help="draft length of the draft model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sample-temperature", type=float, default=0.0,
                    help="also run DSpark with speculative sampling at this temperature (its confidence "
                         "calibration against acceptance realised by sampling)")
    ap.add_argument("--seed", type=int, default=1, help="sampling seed (--sample-temperature)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--val-manifest", default=None,
                    help="prompts from the validation files of this manifest (recorded as offline_eval_<manifest stem>)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    target = teacher_mod.load_target(a.target)
    seqs = prompts_and_continuations(target, a.n_prompts, a.prompt_len, a.gen_len, a.val_manifest)
    res = {}
    if a.draft:
        draft = teacher_mod.load_target(a.draft)
        res["draft"] = eval_draft_model(target, draft, seqs, a.draft_n)
        print("draft model:", json.dumps(res["draft"]), flush=True)
    if a.dspark:
        ds = load_dspark(a.dspark)
        res["dspark"] = {**eval_dspark(target, ds, seqs, ds.c.block_size), "block_size": ds.c.block_size}
        print("dspark:", json.dumps(res["dspark"]), flush=True)
        if a.sample_temperature > 0:
            res["dspark_sampled"] = {**eval_dspark_sampled(target, ds, [p for p, _ in seqs], ds.c.block_size,
                                                           a.gen_len, a.sample_temperature, a.seed),
                                     "block_size": ds.c.block_size}
            print("dspark, speculative sampling:", json.dumps(res["dspark_sampled"]), flush=True)
    if a.eagle3:
        res["eagle3"] = {**eval_eagle3(target, load_eagle3(a.eagle3), seqs, a.eagle3_n), "draft_n": a.eagle3_n}
        print("eagle3:", json.dumps(res["eagle3"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    # A bundled drafter's summary (models/ref-*.json next to its GGUF) keeps its latest evaluation,
    # which the model card shows.
    setting = {"split": "val", "n_prompts": a.n_prompts, "prompt_len": a.prompt_len, "gen_len": a.gen_len}
    record_key = "offline_eval"
    if a.val_manifest:
        setting["manifest"] = Path(a.val_manifest).name
        record_key = "offline_eval_" + Path(a.val_manifest).stem
    for key, path, extra in (("draft", a.draft, {"draft_n": a.draft_n}), ("dspark", a.dspark, {}),
                             ("dspark_sampled", a.dspark, {"seed": a.seed}), ("eagle3", a.eagle3, {})):
        summary = Path(path).with_suffix(".json") if path and str(path).endswith(".gguf") else None
        if key in res and summary is not None and summary.exists():
            s = json.loads(summary.read_text())
            s[record_key + ("_sampled" if key == "dspark_sampled" else "")] = {**setting, **extra, **res[key]}
            summary.write_text(json.dumps(s, indent=1) + "\n")
            print("recorded in", summary)


if __name__ == "__main__":
    main()
