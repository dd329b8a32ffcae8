"""The report as data, pure: its typed parts and their reader, the ledgers that build it
from the tests' records, its summary, its files (the only place it is JSON), merging CI legs,
baselines and diffs, saved outputs (docs/architecture.md).

:func:`load` reads a report file as a typed :class:`Report`, checked once, there.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_jaxport.report.errors import ReportError

if TYPE_CHECKING:
    from pytest_jaxport.report.document import Report
    from pytest_jaxport.report.files import load


def __getattr__(name: str) -> object:
    # Report and load are the report's reading, loaded on first use: a check session, which
    # reaches this package for its records and CI options, never builds or reads a report
    # unless one is asked for, and so never loads its types (docs/architecture.md).
    if name == "Report":
        from pytest_jaxport.report.document import Report

        return Report
    if name == "load":
        from pytest_jaxport.report.files import load

        return load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Report", "ReportError", "load"]
