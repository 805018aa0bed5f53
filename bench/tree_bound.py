#!/usr/bin/env python3
"""What token trees can gain over chains on a target, from measured acceptance and pass costs.

Reads the target's pass costs (`dspark bench --plain --json`: verify_ms by row count) and, per
drafter, a `dspark bench --spec` sweep of *fixed* trees (`--sweep adaptive=0 --sweep cost=0
--spec-draft-p-min 0 --sweep n-max=8 --sweep branches=0,1,2 [--sweep branch-tail=T]`), in which
every alternative (and tail token) beside every draft token was verified. From it, the expected
tokens each candidate row of a tree adds per step:

  chain token i      accepted_per_position[i] / drafts (the chain survives to it);
  alternative, rank r, at position i
                     leaf_accepted_per_position[i] / drafts of the setting with r + 1 branches,
                     less that of the setting with r (rank 0: the branches=1 setting);
  tail token t after the rank-0 alternative at position i
                     its value times the measured survival of a taken alternative's tail
                     (tail_accepted_per_position[t] / leaves_accepted), where the sweep measured
                     tails; otherwise, optimistically, the chain's own conditional acceptance at
                     the same depth (an autoregressive drafter that continues from the right
                     token drafts as it does along the chain).

Every row's value is at most its parent's, so the best tree of N draft rows holds the N most
valuable candidates, and its mean tokens per step is 1 plus their sum. With drafting taken as
free, the best tree over all N commits tau*(N) / cost(N + 1) tokens per one-row pass; the best
chain the same over chain rows only. Their ratio bounds what any fixed tree shape adds over the
best fixed chain (a planner that picks each step's shape from the draft's own confidences can do
somewhat better than any fixed shape, so it is a bound on shapes, not on schedules).

  bench/tree_bound.py --costs pass-costs.json dspark=fx-dspark.json eagle3=fx-eagle3.json ...

A drafter's sweep may be split over several runs (NAME=a.json,b.json: their settings together),
e.g. the tail-carrying branches=1 setting in one and branches=2 without tails in another.
"""
import argparse
import json
import sys


def pass_cost(costs, rows):
    """Cost of a pass of `rows` rows relative to one row: linear between measured points, and past
    the last one at the last measured slope."""
    pts = sorted((int(k), v) for k, v in costs.items())
    one = dict(pts)[1]
    if rows <= pts[-1][0]:
        for (r0, c0), (r1, c1) in zip(pts, pts[1:]):
            if r0 <= rows <= r1:
                return (c0 + (c1 - c0) * (rows - r0) / (r1 - r0)) / one
    (r0, c0), (r1, c1) = pts[-2], pts[-1]
    return (c1 + (c1 - c0) / (r1 - r0) * (rows - r1)) / one


def setting(sweep, branches, tail=None):
    for s in sweep["settings"]:
        name = s["setting"]
        if int(name.get("branches", 0)) != branches:
            continue
        if tail is not None and int(name.get("branch-tail", 0)) != tail:
            continue
        return s
    return None


def candidates(sweep):
    """(value, kind) of every candidate row, from one fixed-tree sweep."""
    chain = setting(sweep, 0)
    if chain is None:
        sys.exit("the sweep needs a branches=0 setting (the chain)")
    drafts = chain["drafts"]
    surv = [a / drafts for a in chain["accepted_per_position"]]
    rows = [(v, "chain") for v in surv]
    prev_leaf = [0.0] * len(surv)
    rank0 = None
    for branches in (1, 2, 3):
        s = setting(sweep, branches)
        if s is None:
            break
        d = s["drafts"]
        leaf = [a / d for a in s["leaf_accepted_per_position"]] + [0.0] * len(surv)
        leaf = leaf[: len(surv)]
        values = [max(0.0, leaf[i] - prev_leaf[i]) for i in range(len(surv))]
        if branches == 1:
            rank0 = values
        rows += [(v, f"alternative rank {branches - 1}") for v in values if v > 0]
        prev_leaf = leaf
    if rank0 is None:
        return rows, "none"
    # Tails after the rank-0 alternatives.
    measured = None
    for s in sweep["settings"]:
        if int(s["setting"].get("branch-tail", 0)) > 0 and s["leaves_accepted"] > 0:
            measured = [a / s["leaves_accepted"] for a in s["tail_accepted_per_position"]]
            tail_len = int(s["setting"]["branch-tail"])
            break
    cond = [surv[0]] + [surv[i] / surv[i - 1] if surv[i - 1] > 0 else 0.0 for i in range(1, len(surv))]
    for i, v in enumerate(rank0):
        if measured is not None:
            tail = [v * m for m in measured[:tail_len]]
        else:
            tail, t = [], v
            for j in range(i + 1, len(surv)):
                t *= cond[j]
                tail.append(t)
        rows += [(t, "tail") for t in tail if t > 0]
    return rows, "measured" if measured is not None else "chain-like (optimistic)"


def best(values, costs, max_rows):
    values = sorted(values, reverse=True)
    out, tau = (1.0 / pass_cost(costs, 1), 0, 1.0), 1.0
    for n, v in enumerate(values[: max_rows - 1], start=1):
        tau += v
        rate = tau / pass_cost(costs, n + 1)
        if rate > out[0]:
            out = (rate, n, tau)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--costs", required=True, help="dspark bench --plain --json output")
    ap.add_argument("--max-rows", type=int, default=32, help="largest pass considered (rows)")
    ap.add_argument("sweeps", nargs="+", help="NAME=bench-spec.json")
    a = ap.parse_args()
    costs = json.load(open(a.costs))["verify_ms"]
    print("| drafter | best chain: rows, tau, bound | best tree: rows, tau, bound | tree / chain | tails |")
    print("|---|---|---|---|---|")
    for arg in a.sweeps:
        name, path = arg.split("=", 1)
        sweep = {"settings": [st for p in path.split(",") for st in json.load(open(p))["settings"]]}
        rows, tails = candidates(sweep)
        c = best([v for v, k in rows if k == "chain"], costs, a.max_rows)
        t = best([v for v, _ in rows], costs, a.max_rows)
        print(f"| {name} | {c[1] + 1}, {c[2]:.2f}, {c[0]:.2f}x | {t[1] + 1}, {t[2]:.2f}, {t[0]:.2f}x | "
              f"{t[0] / c[0]:.3f} | {tails} |")


if __name__ == "__main__":
    main()
