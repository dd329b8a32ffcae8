"""The report built from its tests' entries (pure): the run's environment and configuration,
the tests sorted by node id so runs with and without xdist agree, counted and summarized
(:mod:`~pytest_jaxport.report.summary`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import platform as _platform
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytest_jaxport.report.document import SCHEMA_VERSION, TOOL_NAME, Report, built
from pytest_jaxport.report.summary import summarize
from pytest_jaxport.version import __version__


def environment(present: Iterable[str], versions: Mapping[str, str]) -> dict[str, object]:
    return {
        **versions,
        "python": _platform.python_version(),
        "machine": f"{_platform.system()}-{_platform.machine()}",
        "present_platforms": list(present),
    }


def build_report(
    tests: Iterable[Mapping[str, Any]],
    *,
    config: Mapping[str, Any],
    environment: Mapping[str, Any],
    numbers: Callable[[list[dict[str, Any]]], Mapping[str, Any]] | None = None,
) -> Report:
    """The whole report, typed (:func:`report_data` read as :func:`built`): ``numbers``
    gives the summary's three numbers from the sorted tests, where there are some."""
    data = report_data(tests, config=config, environment=environment)
    if numbers is not None:
        data["summary"].update(numbers(data["tests"]))
    return built(data)


def report_data(
    tests: Iterable[Mapping[str, Any]],
    *,
    config: Mapping[str, Any],
    environment: Mapping[str, Any],
) -> dict[str, Any]:
    """The report's JSON from the tests' entries (the ledger's, a merge's): tests sorted by
    node id so runs with and without xdist agree, counted and summarized."""
    ordered = sorted((dict(t) for t in tests), key=lambda t: t["nodeid"])
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "environment": dict(environment),
        "config": dict(config),
        "summary": summarize(ordered),
        "tests": ordered,
    }
