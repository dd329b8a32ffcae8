"""Reports of older schema versions, upgraded to this one (pure).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_jaxport.report.document import SCHEMA_VERSION
from pytest_jaxport.report.entries import TestEntry
from pytest_jaxport.report.summary import suite_summary
from pytest_jaxport.report.totals import Numbers, Summary

READABLE_VERSIONS = (1, 2)
"""Versions :func:`load` reads; older ones are upgraded to :data:`SCHEMA_VERSION`."""


def upgrade(data: Mapping[str, Any]) -> dict[str, Any]:
    """A report of an older schema version as this version's JSON (a copy; this version as
    is), its summary to be counted again from its tests as it is read (:func:`recounted`).

    Version 1 stored sentences: each violation's ``message`` (its fields are recovered from
    it), a test's ``message`` (now ``error`` where it was not the violations), and
    ``summary.layers`` (dropped: the view builds the layer table). Counting the summary again
    adds ``outcomes``, ``hotspots`` and the per-platform distinct sites.
    """
    if data.get("schema_version") == SCHEMA_VERSION:
        return dict(data)
    tests = [_upgrade_test(t) for t in data.get("tests") or []]
    summary = {k: v for k, v in (data.get("summary") or {}).items() if k != "layers"}
    return {
        **data,
        "schema_version": SCHEMA_VERSION,
        "upgraded_from": data.get("schema_version"),
        "summary": summary,
        "tests": tests,
    }


def recounted(tests: tuple[TestEntry, ...], numbers: Numbers | None) -> Summary:
    """An upgraded report's summary: counted again from its ``tests``, with the three
    ``numbers`` its file holds."""
    return suite_summary(tests, numbers=numbers)


def _upgrade_test(test: Mapping[str, Any]) -> dict[str, Any]:
    upgraded = {k: v for k, v in test.items() if k != "message"}
    violations = [_upgrade_violation(v) for v in test.get("violations") or []]
    upgraded["violations"] = violations
    message = test.get("message")
    if message and not violations:
        upgraded["error"] = {"message": str(message), "where": None, "when": "call"}
    return upgraded


def _upgrade_violation(violation: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1's ``message`` (``check 'c' on p: key = limit (set in o), found F WHAT
    (level)`` and indented detail lines) as version 2's ``what`` and ``details``."""
    headline, *rest = str(violation.get("message") or "").split("\n")
    found, level = violation.get("found"), str(violation.get("level", "lowered"))
    what = ""
    _, marker, tail = headline.partition(f"), found {found} ")
    if marker and tail.endswith(f" ({level})"):
        what = tail[: -len(f" ({level})")]
    upgraded = {k: v for k, v in violation.items() if k != "message"}
    upgraded["what"] = what
    upgraded["kernels"] = []
    upgraded["details"] = [line.strip() for line in rest if line.strip()]
    if violation.get("key") == "must_lower":
        upgraded["found"] = f"fails to {what}"
    return upgraded
