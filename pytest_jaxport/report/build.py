"""The report built from its typed tests (pure): the run's environment and configuration,
the tests sorted by node id so runs with and without xdist agree, and their summary counted
(:mod:`~pytest_jaxport.report.summary`), with the three numbers where the run is priced.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
import platform as _platform
from collections.abc import Iterable, Mapping

from pytest_jaxport.report.document import Config, Environment, Report
from pytest_jaxport.report.entries import TestEntry
from pytest_jaxport.report.summary import Pricing, probes_of, suite_numbers, suite_summary
from pytest_jaxport.report.totals import Tooling
from pytest_jaxport.version import __version__


def environment(present: Iterable[str], versions: Mapping[str, str]) -> Environment:
    """Where this run runs: the library ``versions``, Python, the machine and the platforms
    ``present`` here."""
    return Environment(
        versions={k: v for k, v in versions.items() if k not in Environment.FACTS},
        python=_platform.python_version(),
        machine=f"{_platform.system()}-{_platform.machine()}",
        present_platforms=tuple(present),
    )


def build_report(
    tests: Iterable[TestEntry],
    *,
    config: Config,
    environment: Environment,
    pricing: Pricing | None = None,
    tooling: Tooling | None = None,
) -> Report:
    """The report of ``tests`` (the ledger's, a merge's), sorted by node id, counted and
    summarized; priced where ``pricing`` is given (the three numbers over the sorted tests'
    checks, with its cost model and the ``tooling`` scan)."""
    ordered = tuple(sorted(tests, key=lambda t: t.nodeid))
    numbers = None
    if pricing is not None:
        numbers = suite_numbers(probes_of(ordered), pricing, tooling=tooling)
        numbers = dataclasses.replace(numbers, cost_model=pricing.model)
    return Report(
        tool_version=__version__,
        environment=environment,
        config=config,
        summary=suite_summary(ordered, numbers=numbers),
        tests=ordered,
    )
