"""pytest settings of the Python module's tests (python/tests): a skipped test counts as a failure.

`make test` (ctest, label python) runs them after the build with every dependency installed
(scripts/install-deps.sh), so a test that cannot run is a broken set-up, not a pass. They import
the module from build/python (PYTHONPATH, set by ctest; run by hand:
PYTHONPATH=build/python python3 -m pytest -q python/tests).
"""
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(os.environ.get("DSPARK_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
MODELS = ROOT / "models"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # gguf_edit


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and not hasattr(rep, "wasxfail"):
        rep.outcome = "failed"
        rep.longrepr = f"skipped, and no test may skip here: {rep.longrepr}"


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def target_path():
    return str(MODELS / "ref-target.gguf")


@pytest.fixture(scope="session")
def draft_path():
    return str(MODELS / "ref-draft.gguf")


@pytest.fixture(scope="session")
def dspark_path():
    return str(MODELS / "ref-dspark.gguf")


@pytest.fixture(scope="session")
def eagle3_path():
    return str(MODELS / "ref-eagle3.gguf")


@pytest.fixture(scope="session")
def target(target_path):
    import dspark

    return dspark.Model(target_path)


@pytest.fixture(scope="session")
def prompt_ids(target):
    text = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    return target.tokenizer.encode(text)
