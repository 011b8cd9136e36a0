"""Settings shared by the whole suite."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

# Bytecode caching on for the suite and every process it starts (brokers, CLIs, Spark's
# Python workers), whatever PYTHONDONTWRITEBYTECODE says in the calling shell: with it
# set and no __pycache__ in the tree, every process compiled app/ from source and every
# xdist worker re-ran pytest's assertion rewriting of all ~300 test modules. Measured on
# this 2-core host (loaded): collecting the suite 9.7 -> 3.6 s of CPU per worker;
# importing the broker (app.cli, app.api.app) 1.08 -> 0.84 s of CPU per broker started
# (median of 5; tests/e2e starts hundreds); tests/e2e/test_e2e_cli.py 22.2/21.0 -> 17.8/17.8
# s of CPU. __pycache__ is in .gitignore; CPython writes .pyc files atomically (a temporary
# file renamed), so concurrent processes are safe.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Hypothesis's default 200-ms deadline per example is a wall-clock bound: on this
# 2-core host under two pytest-xdist workers (and other load) it measured the host,
# not the code, and failed a model test once. Speed is measured in bench/, never
# asserted in tests; examples still run and shrink as before.
settings.register_profile("logbus", deadline=None)
settings.load_profile("logbus")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules holding ``@pytest.mark.slow`` tests run first, the rest after, each module's
    tests kept together and in their order (the sort is stable).

    Why: ``make test`` runs ``-n 2 --dist worksteal``, which hands each worker a contiguous
    half of this list and lets an idle worker steal the tail half of the other's queue.
    Alphabetically the long tests (chaos, kills, Spark, schemathesis) sat anywhere in
    tests/e2e, so the last steals cut through them: a module split over both workers
    started its expensive fixtures twice (seen: a Spark JVM in each worker, 12 s each),
    and a run could end with one worker idle while the other finished a 30-60 s test. With
    the long modules at the head, the tail that gets stolen and ends the run is short
    tests. The same order on every worker (xdist requires it): it depends only on the
    collected items.
    """
    has_slow: dict[str, bool] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        has_slow[module] = (
            has_slow.get(module, False) or item.get_closest_marker("slow") is not None
        )
    items.sort(key=lambda item: not has_slow[item.nodeid.split("::", 1)[0]])


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def _missing_module(report: pytest.CollectReport | pytest.TestReport) -> bool:
    # pytest.importorskip's reason: "could not import 'name': ..."
    return report.skipped and "could not import" in str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    """Under ``CI=true`` a module skipped by ``pytest.importorskip`` (a dependency the
    Makefile should have installed) fails instead: a missing dependency is a failure in
    CI, never a silent skip."""
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and _missing_module(report):
        report.outcome = "failed"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """The same for a test that calls ``pytest.importorskip`` itself."""
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and _missing_module(report):
        report.outcome = "failed"
