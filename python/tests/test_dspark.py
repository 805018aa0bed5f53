"""The Python module `dspark` on the bundled models (models/ref-*.gguf)."""
import math
import re
import threading

import pytest

import dspark
import gguf_edit

STATS_KEYS = {
    "total_tokens", "target_calls", "draft_calls", "accepted_tokens", "drafted_tokens", "acceptance_rate", "tau",
    "acceptance_per_position", "draft_ms", "verify_ms", "sample_ms", "other_ms", "prompt_ms", "decode_ms",
    "tokens_per_second", "stop_reason", "prompt_tokens", "drafts",
}


@pytest.fixture(scope="module")
def plain(target):
    return dspark.SpeculativeDecodingEngine(target_model=target, max_length=512)


@pytest.fixture(scope="module")
def greedy_reference(plain, prompt_ids):
    return plain.generate(prompt_ids, max_new_tokens=64, do_sample=False)


def check_stats(stats, new_tokens):
    assert STATS_KEYS <= set(stats)
    assert stats["total_tokens"] == new_tokens
    assert 0 <= stats["accepted_tokens"] <= stats["drafted_tokens"]
    if stats["drafted_tokens"]:
        assert stats["acceptance_rate"] == pytest.approx(stats["accepted_tokens"] / stats["drafted_tokens"])
        assert stats["tau"] == pytest.approx(1 + stats["accepted_tokens"] / stats["drafts"])
    else:
        assert stats["acceptance_rate"] == 0 and stats["tau"] == 1
    assert all(0 <= a <= 1 for a in stats["acceptance_per_position"])
    # Accepted tokens, counted per position, add up to all accepted tokens.
    assert sum(a * stats["drafts"] for a in stats["acceptance_per_position"]) == pytest.approx(stats["accepted_tokens"])
    assert stats["target_calls"] >= 1
    for k in ("draft_ms", "verify_ms", "sample_ms", "other_ms", "prompt_ms", "decode_ms"):
        assert stats[k] >= 0 and math.isfinite(stats[k]), k
    parts = stats["draft_ms"] + stats["verify_ms"] + stats["sample_ms"]
    assert stats["other_ms"] == pytest.approx(max(0.0, stats["decode_ms"] - parts), abs=1e-6)
    assert stats["tokens_per_second"] > 0


def test_snippet_from_the_issue(target_path, draft_path, dspark_path, prompt_ids):
    for draft in (draft_path, dspark_path):
        engine = dspark.SpeculativeDecodingEngine(target_model=target_path, draft_model=draft, tokenizer=None,
                                                  max_length=512, draft_length=5, temperature=0.8, top_p=0.95,
                                                  use_confidence_scheduling=True, confidence_threshold=0.5)
        out = engine.generate(prompt_ids, max_new_tokens=256, do_sample=True)
        print(engine.stats)
        assert out[:len(prompt_ids)] == prompt_ids
        assert 0 < len(out) - len(prompt_ids) <= 256
        check_stats(engine.stats, len(out) - len(prompt_ids))
        assert engine.speculative


def test_draft_type_from_the_file(target, draft_path, dspark_path, eagle3_path):
    assert dspark.SpeculativeDecodingEngine(target, draft_path).draft_type == "draft-simple"
    assert dspark.SpeculativeDecodingEngine(target, dspark_path).draft_type == "draft-dspark"
    assert dspark.SpeculativeDecodingEngine(target, eagle3_path).draft_type == "draft-eagle3"
    engine = dspark.SpeculativeDecodingEngine(target, None)
    assert engine.draft_type == "none" and not engine.speculative


@pytest.mark.parametrize("drafter", ["draft", "dspark", "eagle3"])
@pytest.mark.parametrize("confidence", [True, False])
def test_greedy_speculative_equals_greedy_plain(target, draft_path, dspark_path, eagle3_path, prompt_ids,
                                                greedy_reference, drafter, confidence):
    path = {"draft": draft_path, "dspark": dspark_path, "eagle3": eagle3_path}[drafter]
    engine = dspark.SpeculativeDecodingEngine(target, path,
                                              draft_length=5, use_confidence_scheduling=confidence,
                                              confidence_threshold=0.5 if confidence else 0.0)
    out = engine.generate(prompt_ids, max_new_tokens=64, do_sample=False)
    assert out == greedy_reference
    check_stats(engine.stats, len(out) - len(prompt_ids))
    if not confidence:
        # A fixed schedule drafts every step.
        assert engine.stats["drafted_tokens"] > 0 and engine.schedule["mode"] == "cut"
        assert not engine.schedule["adaptive"] and engine.schedule["p_min"] == 0
    else:
        assert engine.schedule["adaptive"] and engine.schedule["p_min"] == pytest.approx(0.5)


def test_confidence_scheduling_maps_to_the_library_schedules(target, dspark_path):
    # Threshold 0 with DSpark's confidence head: the library's default, cost-scheduled verification.
    cost = dspark.SpeculativeDecodingEngine(target, dspark_path, draft_length=4, confidence_threshold=0.0)
    assert cost.schedule == {"n_max": 4, "n_min": 0, "p_min": 0.0, "adaptive": True, "mode": "cost", "branches": 0, "branch_tail": 0}
    cut = dspark.SpeculativeDecodingEngine(target, dspark_path, draft_length=4, confidence_threshold=0.3)
    assert cut.schedule["mode"] == "cut" and cut.schedule["adaptive"]
    assert cut.schedule["p_min"] == pytest.approx(0.3)
    fixed = dspark.SpeculativeDecodingEngine(target, dspark_path, draft_length=4, use_confidence_scheduling=False)
    assert fixed.schedule == {"n_max": 4, "n_min": 0, "p_min": 0.0, "adaptive": False, "mode": "cut", "branches": 0, "branch_tail": 0}


def test_token_trees_keep_greedy_output_and_report_their_leaves(target, draft_path, prompt_ids, greedy_reference):
    engine = dspark.SpeculativeDecodingEngine(target, draft_path, draft_length=3, use_confidence_scheduling=False,
                                              branches=2)
    assert engine.schedule["branches"] == 2
    out = engine.generate(prompt_ids, max_new_tokens=64, do_sample=False)
    assert out == greedy_reference
    assert engine.stats["leaves"] > 0 and 0 <= engine.stats["leaves_accepted"] <= engine.stats["leaves"]
    with pytest.raises(ValueError, match="branches"):
        dspark.SpeculativeDecodingEngine(target, draft_path, branches=9)


def test_token_tree_tails_keep_greedy_output(target, prompt_ids, greedy_reference):
    # N-gram branches with the tokens that followed each: side chains verified with their alternative.
    engine = dspark.SpeculativeDecodingEngine(target, None, draft_type="ngram", draft_length=6,
                                              use_confidence_scheduling=False, branches=2, branch_tail=4)
    assert engine.schedule["branch_tail"] == 4
    assert engine.generate(prompt_ids, max_new_tokens=64, do_sample=False) == greedy_reference
    with pytest.raises(ValueError, match="branch_tail"):
        dspark.SpeculativeDecodingEngine(target, None, draft_type="ngram", branch_tail=17)


def test_stats_plain_decoding(plain, prompt_ids, greedy_reference):
    out = plain.generate(prompt_ids, max_new_tokens=64)
    assert out == greedy_reference  # do_sample defaults to False, as in Hugging Face's generate
    s = plain.stats
    check_stats(s, 64)
    assert s["drafted_tokens"] == 0 and s["draft_calls"] == 0 and s["stop_reason"] == "length"
    assert s["prompt_tokens"] == len(prompt_ids)


def test_sampling_is_reproducible_with_a_seed(target, draft_path, prompt_ids):
    engine = dspark.SpeculativeDecodingEngine(target, draft_path, use_confidence_scheduling=False)
    a = engine.generate(prompt_ids, max_new_tokens=32, do_sample=True, seed=7)
    b = engine.generate(prompt_ids, max_new_tokens=32, do_sample=True, seed=7)
    assert a == b
    # The engine's seed seeds the sequence of per-call seeds.
    runs = [dspark.SpeculativeDecodingEngine(target, seed=3).generate(prompt_ids, 32, True, temperature=1.5)
            for _ in range(2)]
    assert runs[0] == runs[1]


def test_batch_of_one_and_array_like_inputs(plain, prompt_ids, greedy_reference):
    out = plain.generate([prompt_ids], max_new_tokens=64)
    assert out == [greedy_reference]
    assert plain.generate(tuple(prompt_ids), max_new_tokens=64) == greedy_reference
    import numpy as np  # python3-numpy (scripts/install-deps.sh)

    assert plain.generate(np.array([prompt_ids]), max_new_tokens=64) == [greedy_reference]
    assert plain.generate(np.array(prompt_ids, dtype=np.int32), max_new_tokens=64) == greedy_reference
    with pytest.raises(ValueError, match="batch of 2"):
        plain.generate([prompt_ids, prompt_ids], max_new_tokens=4)
    with pytest.raises(TypeError, match="encode it first"):
        plain.generate("def f():", max_new_tokens=4)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        plain.generate([1, 10**6], max_new_tokens=4)


def test_max_length_is_the_context(target, prompt_ids):
    engine = dspark.SpeculativeDecodingEngine(target, max_length=len(prompt_ids) + 10)
    out = engine.generate(prompt_ids, max_new_tokens=100, ignore_eos=True)
    assert len(out) == len(prompt_ids) + 10  # max_length counts prompt + output, as Hugging Face's
    assert engine.stats["total_tokens"] == 10
    assert len(list(engine.stream(prompt_ids, max_new_tokens=100, ignore_eos=True))) == 10
    with pytest.raises(ValueError):
        engine.generate(list(prompt_ids) * 2, max_new_tokens=4)


def test_stream_yields_the_ids_of_generate(target, dspark_path, prompt_ids, greedy_reference):
    engine = dspark.SpeculativeDecodingEngine(target, dspark_path)
    ids = list(engine.stream(prompt_ids, max_new_tokens=64))
    assert prompt_ids + ids == greedy_reference
    check_stats(engine.stats, 64)
    pairs = list(engine.stream(prompt_ids, max_new_tokens=64, with_text=True))
    assert [i for i, _ in pairs if i is not None] == ids
    text = "".join(t for _, t in pairs)
    assert text == engine.tokenizer.decode(ids)


def test_stream_can_be_broken_out_of(target, draft_path, prompt_ids, greedy_reference):
    engine = dspark.SpeculativeDecodingEngine(target, draft_path)
    got = []
    stream = engine.stream(prompt_ids, max_new_tokens=400, ignore_eos=True)
    for tok in stream:
        got.append(tok)
        if len(got) == 5:
            break
    stream.close()  # waits for the worker: the run has ended, cancelled
    assert stream.stop_reason == "cancelled"
    assert engine.stats["stop_reason"] == "cancelled"
    assert engine.stats["total_tokens"] < 400
    assert got == greedy_reference[len(prompt_ids):len(prompt_ids) + 5]
    # Dropping an unfinished iterator cancels it too; the engine stays usable.
    for tok in engine.stream(prompt_ids, max_new_tokens=400, ignore_eos=True):
        break
    assert engine.generate(prompt_ids, max_new_tokens=64) == greedy_reference
    with engine.stream(prompt_ids, max_new_tokens=400, ignore_eos=True) as s:
        next(s)
    assert s.stop_reason == "cancelled"


def test_generate_releases_the_gil(target, prompt_ids):
    engine = dspark.SpeculativeDecodingEngine(target, max_length=1024)
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        engine.generate(prompt_ids, max_new_tokens=400, ignore_eos=True)
    finally:
        done.set()
        t.join()
    assert engine.stats["decode_ms"] > 20 and len(ticks) >= 5


@pytest.mark.parametrize("drafter", ["draft", "dspark"])
def test_draft_with_another_vocabulary_is_a_value_error(target, draft_path, dspark_path, tmp_path, drafter):
    other = tmp_path / f"{drafter}-other-vocab.gguf"
    gguf_edit.with_token_renamed(draft_path if drafter == "draft" else dspark_path, other, 1000, "dspark-test-token")
    # The error names the token: "... differs from the target's at id 1000 ('dspark-test-token' vs '...')".
    with pytest.raises(ValueError, match=r"differs from (the )?target.* at id 1000 \('dspark-test-token' vs"):
        dspark.SpeculativeDecodingEngine(target, other)


def test_tokenizer_must_be_the_targets(target, target_path, draft_path, root):
    same = dspark.Tokenizer(draft_path)  # the draft shares the target's vocabulary
    engine = dspark.SpeculativeDecodingEngine(target_path, draft_path, tokenizer=same)
    assert engine.tokenizer.path == draft_path
    with pytest.raises(ValueError, match="vocabulary is not the target model's"):
        dspark.SpeculativeDecodingEngine(target, tokenizer=dspark.Tokenizer(root / "tests/data/vocab/ggml-vocab-gpt-2.gguf"))
    with pytest.raises(TypeError):
        dspark.SpeculativeDecodingEngine(target, tokenizer="not a tokenizer")


def test_file_errors(target, tmp_path):
    with pytest.raises(FileNotFoundError):
        dspark.SpeculativeDecodingEngine(str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError):
        dspark.SpeculativeDecodingEngine(target, tmp_path / "missing-draft.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises((OSError, ValueError)):
        dspark.Model(bad)


def test_bad_options_are_value_errors(target, draft_path, prompt_ids):
    with pytest.raises(ValueError):
        dspark.SpeculativeDecodingEngine(target, draft_path, draft_length=0)
    with pytest.raises(ValueError):
        dspark.SpeculativeDecodingEngine(target, temperature=-1)
    with pytest.raises(ValueError):
        dspark.SpeculativeDecodingEngine(target, confidence_threshold=1.5)
    with pytest.raises(ValueError):
        dspark.SpeculativeDecodingEngine(target).generate(prompt_ids, max_new_tokens=0)


def test_tokenizer_round_trip(target):
    tok = target.tokenizer
    for text in ["def f(x):\n    return x + 1\n", "héllo wörld ✓ 中文", "  leading spaces\tand tabs", ""]:
        ids = tok.encode(text, add_special_tokens=False)
        assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == text
    with_bos = tok.encode("x = 1")
    assert with_bos[0] == tok.bos_token_id == 1  # the vocabulary asks for BOS (add_bos_token)
    assert tok.decode(with_bos) == "x = 1"
    assert tok.eos_token_id == 2 and tok.is_eog(2)
    assert len(tok) == target.n_vocab == 4096


def test_version_and_device(root, plain):
    project = re.search(r"project\(dspark VERSION ([0-9.]+)", (root / "CMakeLists.txt").read_text()).group(1)
    assert dspark.__version__ == project
    m = re.fullmatch(r"cpu \((\w+)\)", plain.device)
    assert m and m.group(1) == dspark.cpu_target()
    assert m.group(1) in dspark.usable_cpu_targets().split(",")


def test_models_are_shared_between_engines(target, draft_path, prompt_ids, greedy_reference):
    draft = dspark.Model(draft_path)
    assert (target.architecture, draft.architecture) == ("qwen3", "qwen3")
    engine = dspark.SpeculativeDecodingEngine(target, draft)
    assert engine.target_model is target or engine.target_model.path == target.path
    assert engine.generate(prompt_ids, max_new_tokens=64) == greedy_reference
    with pytest.raises(ValueError, match="block drafter"):
        dspark.Model(target.path.replace("ref-target", "ref-dspark"))
