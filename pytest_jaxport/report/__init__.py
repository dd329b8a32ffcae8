"""The report as data, pure: its typed parts and their reader, the ledgers that build it
from the tests' records, its summary, its files (the only place it is JSON), merging CI legs,
baselines and diffs, saved outputs (docs/architecture.md).

:func:`load` reads a report file as a typed :class:`Report`, checked once, there.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from pytest_jaxport.report.document import Report
from pytest_jaxport.report.errors import ReportError
from pytest_jaxport.report.files import load

__all__ = ["Report", "ReportError", "load"]
