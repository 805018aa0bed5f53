"""pytest settings of the toolkit's tests: a skipped test counts as a failure.

`make test` runs these after the C++ build with every dependency installed
(scripts/install-deps.sh), so a test that cannot run is a broken set-up, not a pass.
"""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and not hasattr(rep, "wasxfail"):
        rep.outcome = "failed"
        rep.longrepr = f"skipped, and no test may skip here: {rep.longrepr}"
