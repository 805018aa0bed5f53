"""bench/tree_bound.py on sweeps small enough to work out by hand: the pass-cost interpolation, the
candidate rows' values (chain, alternatives of each rank, measured and chain-like tails) and the
best chain and tree under flat and steep costs."""
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("tree_bound", BENCH / "tree_bound.py")
tree_bound = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tree_bound)


def setting(branches, drafts, accepted=(), leaf=(), tail=None, leaves_accepted=0, tail_accepted=()):
    name = {"branches": float(branches)}
    if tail is not None:
        name["branch-tail"] = float(tail)
    return {"setting": name, "drafts": drafts, "accepted_per_position": list(accepted),
            "leaf_accepted_per_position": list(leaf), "leaves_accepted": leaves_accepted,
            "tail_accepted_per_position": list(tail_accepted)}


# Chain survival 0.6 0.3 0.1 0.05; the first alternative is taken at position 1 in 30% of drafts, the
# first two together in 40%; at position 2 the first in 10%.
SWEEP = {"settings": [
    setting(0, 100, accepted=[60, 30, 10, 5]),
    setting(1, 200, leaf=[60, 20]),
    setting(2, 100, leaf=[40, 10]),
]}
FLAT = {str(n): 5.0 for n in (1, 2, 4, 8, 16, 32)}
LINEAR = {str(n): 5.0 * n for n in (1, 2, 4, 8, 16, 32)}


def values(rows, kind):
    return sorted((round(v, 6) for v, k in rows if k.startswith(kind)), reverse=True)


def test_pass_cost_interpolates_between_and_extrapolates_past_the_measured_rows():
    costs = {"1": 10.0, "2": 12.0, "4": 20.0}
    assert tree_bound.pass_cost(costs, 1) == pytest.approx(1.0)
    assert tree_bound.pass_cost(costs, 3) == pytest.approx(1.6)
    assert tree_bound.pass_cost(costs, 6) == pytest.approx(2.8)  # the 2-to-4 slope, 4 ms a row


def test_candidates_value_each_row_by_the_share_of_drafts_it_adds():
    rows, tails = tree_bound.candidates(SWEEP)
    assert values(rows, "chain") == [0.6, 0.3, 0.1, 0.05]
    assert values(rows, "alternative rank 0") == [0.3, 0.1]
    assert values(rows, "alternative rank 1") == [0.1]  # 0.4 - 0.3 at position 1; none at 2
    # No sweep measured tails: after the rank-0 alternative at position i, the chain's conditional
    # acceptance from i + 1 on (0.3 / 0.6, 0.1 / 0.3, 0.05 / 0.1).
    assert tails.startswith("chain-like")
    assert values(rows, "tail") == sorted([0.15, 0.05, 0.025, round(0.1 / 3, 6), round(0.05 / 3, 6)], reverse=True)


def test_measured_tails_scale_their_alternative_by_the_survival_seen():
    sweep = {"settings": SWEEP["settings"][:1] + [
        setting(1, 200, leaf=[60, 20], tail=2, leaves_accepted=10, tail_accepted=[5, 2])]}
    rows, tails = tree_bound.candidates(sweep)
    assert tails == "measured"
    # 0.3 and 0.1 times 0.5 and 0.2: the two tokens a taken alternative kept, of its two.
    assert values(rows, "tail") == [0.15, 0.06, 0.05, 0.02]


def test_flat_passes_take_every_row_and_linear_passes_none():
    rows, _ = tree_bound.candidates(SWEEP)
    chain = [v for v, k in rows if k == "chain"]
    every = [v for v, _ in rows]
    rate, n, tau = tree_bound.best(chain, FLAT, 32)
    assert (n, tau) == (4, pytest.approx(2.05))
    rate, n, tau = tree_bound.best(every, FLAT, 32)
    assert n == len(every) and tau == pytest.approx(1 + sum(every))
    # A pass of n rows costing n times one: no draft row pays (each adds under one token).
    assert tree_bound.best(every, LINEAR, 32)[1:] == (0, 1.0)
    # The row limit holds: at most 3 rows, the anchor and the two most valuable.
    assert tree_bound.best(every, FLAT, 3)[1:] == (2, pytest.approx(1.9))


def test_the_command_prints_tree_against_chain_from_split_sweeps(tmp_path):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"verify_ms": FLAT}))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"settings": SWEEP["settings"][:2]}))
    b.write_text(json.dumps({"settings": SWEEP["settings"][2:]}))
    out = subprocess.run([sys.executable, str(BENCH / "tree_bound.py"), "--costs", str(costs), f"x={a},{b}"],
                         capture_output=True, text=True, check=True).stdout
    row = [line for line in out.splitlines() if line.startswith("| x |")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[1] == "5, 2.05, 2.05x"
    assert float(cells[3]) == pytest.approx((1 + sum(v for v, _ in tree_bound.candidates(SWEEP)[0])) / 2.05, abs=1e-3)
