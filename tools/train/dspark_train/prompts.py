"""Held-out prompt sets for benchmarks and model cards, built from the TEST split only.

code-completion: a function's signature and docstring; the model continues the body.
repeat-edit:     a function, then a copy with a search-and-replace edit already started; the model
                 continues the copy (repeat-heavy, where drafters should accept long runs).

    /usr/bin/python3 -m dspark_train prompts      # -> bench/prompts/{code-completion,repeat-edit}.jsonl
"""
import argparse
import ast
import json
import re

from . import corpus
from .paths import REPO_ROOT

OUT_DIR = REPO_ROOT / "bench" / "prompts"


def _functions(split="test"):
    """(relpath, lines, FunctionDef node) for every function with a docstring, in file order."""
    for rel, text in corpus.documents(split):
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.splitlines(keepends=True)
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for n in sorted(nodes, key=lambda n: n.lineno):
            yield rel, lines, n


def _start_line(n):
    return min([n.lineno] + [d.lineno for d in n.decorator_list])


def code_completion(split="test", max_prompt_chars=1500, max_body_lines=40):
    """Functions with a docstring and at least two statements after it."""
    out = []
    for rel, lines, n in _functions(split):
        if ast.get_docstring(n) is None or len(n.body) < 3:
            continue
        head_end = n.body[0].end_lineno  # last line of the docstring
        body_end = n.end_lineno
        if body_end - head_end > max_body_lines:
            continue
        prompt = "".join(lines[_start_line(n) - 1:head_end])
        ref = "".join(lines[head_end:body_end])
        if len(prompt) > max_prompt_chars or not ref.strip():
            continue
        out.append({"id": f"cc-{len(out):04d}", "prompt": prompt, "reference": ref,
                    "source": f"{rel}:{_start_line(n)}"})
    return out


def _most_used_arg(n, code):
    args = [a.arg for a in n.args.args + n.args.kwonlyargs if a.arg not in ("self", "cls")]
    counts = [(len(re.findall(rf"\b{re.escape(a)}\b", code)), a) for a in args if len(a) > 1]
    counts = [c for c in counts if c[0] >= 3]
    return max(counts)[1] if counts else None


def repeat_edit(split="test", min_lines=6, max_lines=40, prefix_frac=0.3):
    """Rename the function and its most used argument, show the original and the start of the copy."""
    out = []
    for rel, lines, n in _functions(split):
        start, end = _start_line(n), n.end_lineno
        if not (min_lines <= end - start + 1 <= max_lines):
            continue
        code = "".join(lines[start - 1:end])
        arg = _most_used_arg(n, code)
        if arg is None:
            continue
        new_arg = f"{arg}_value" if not arg.endswith("_value") else f"the_{arg}"
        edited = re.sub(rf"\b{re.escape(arg)}\b", new_arg, code)
        edited = re.sub(rf"\bdef {re.escape(n.name)}\b", f"def {n.name}_v2", edited, count=1)
        ed_lines = edited.splitlines(keepends=True)
        k = max(1, int(len(ed_lines) * prefix_frac))
        instr = f"# Edit: rename the function to {n.name}_v2 and the argument {arg!r} to {new_arg!r}.\n"
        prompt = "# Original:\n" + code + "\n" + instr + "".join(ed_lines[:k])
        out.append({"id": f"re-{len(out):04d}", "prompt": prompt, "reference": "".join(ed_lines[k:]),
                    "source": f"{rel}:{start}"})
    return out


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv=None):
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    cc, re_ = code_completion(), repeat_edit()
    write_jsonl(OUT_DIR / "code-completion.jsonl", cc)
    write_jsonl(OUT_DIR / "repeat-edit.jsonl", re_)
    print(f"code-completion: {len(cc)} prompts, repeat-edit: {len(re_)} prompts -> {OUT_DIR}")


if __name__ == "__main__":
    main()
