"""Per-test records and the ledger that joins them into the report's tests (pure).

A :class:`TestRecord` is what one phase of one test found: at the call, its checks and their
judgement; at the teardown of an audited run, the computations it ran. It travels on pytest's
test report as ``report.jaxport`` (:meth:`TestRecord.to_dict`), so pytest-xdist workers send
it to the controller, where the :class:`Ledger` joins the records of every phase, in any
order, into the same report a serial run builds.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

from pytest_jaxport.model.jsontypes import (
    JsonMapping,
    JsonObject,
    as_table,
    read_counts,
    read_tables,
    read_texts,
)
from pytest_jaxport.report.entries import ERROR_LIMIT, Check, TestEntry, TestError, read_violation
from pytest_jaxport.report.reader import record_reader

if TYPE_CHECKING:  # the audit's machinery: loaded where an audit records (Ledger.audit)
    from pytest_jaxport.report.audit_ledger import AuditLedger, AuditRecord


@dataclass(slots=True, kw_only=True)
class TestRecord:
    """What one phase of one test found (see the module docstring)."""

    __test__ = False

    nodeid: str
    checks: list[JsonObject] = field(default_factory=list)
    """Each check's probe (:meth:`~pytest_jaxport.model.probe.Probe.to_dict`)."""
    violations: list[JsonObject] = field(default_factory=list)
    """Each broken budget limit (:meth:`~pytest_jaxport.model.budget.Violation.to_dict`)."""
    error: TestError | None = None
    outputs_errors: list[str] = field(default_factory=list)
    """Saved outputs that could not be written (``--jaxport-save-outputs``); they fail it."""
    baseline_growth: list[str] = field(default_factory=list)
    """Counts that grew since ``--jaxport-baseline``; they fail it."""
    baseline_news: list[str] = field(default_factory=list)
    """Counts the baseline does not have yet (reported, never failed)."""
    compile: dict[str, int] | None = None
    """The compiled-level cache's hits and misses of its checks (not in the report)."""
    lowered_cache: dict[str, int] | None = None
    """The lowered-level cache's hits and misses of its checks (not in the report)."""
    audit: AuditRecord | None = None
    """With ``--jaxport-audit``, at teardown: the computations it ran."""

    def to_dict(self) -> JsonObject:
        data: JsonObject = {
            "nodeid": self.nodeid,
            "checks": self.checks,
            "violations": self.violations,
        }
        if self.error is not None:
            data["error"] = self.error.to_dict()
        for key in ("outputs_errors", "baseline_growth", "baseline_news"):
            if getattr(self, key):
                data[key] = list(getattr(self, key))
        for key in ("compile", "lowered_cache", "audit"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return data

    @classmethod
    def from_dict(cls, data: JsonMapping) -> TestRecord:
        """What :meth:`to_dict` wrote (this package's own record, from a worker)."""
        error = data.get("error")
        audit = data.get("audit")
        return cls(
            nodeid=str(data["nodeid"]),
            checks=[dict(c) for c in read_tables(data, "checks", None)],
            violations=[dict(v) for v in read_tables(data, "violations", None)],
            error=TestError.from_dict(as_table(error, "error")) if error else None,
            outputs_errors=list(read_texts(data, "outputs_errors", None)),
            baseline_growth=list(read_texts(data, "baseline_growth", None)),
            baseline_news=list(read_texts(data, "baseline_news", None)),
            compile=read_counts(data, "compile") if data.get("compile") is not None else None,
            lowered_cache=read_counts(data, "lowered_cache")
            if data.get("lowered_cache") is not None
            else None,
            # the audit's record is a TypedDict of what this package wrote (report.audit_ledger)
            audit=cast("AuditRecord", as_table(audit, "audit")) if audit is not None else None,
        )


def error_line(text: str) -> str:
    r"""The line of a failure's text that says what went wrong: the last ``E`` line of a
    traceback (``ModuleNotFoundError: No module named 'x'``), else its last non-empty line.

    >>> error_line("t.py:1: in <module>\nE   ModuleNotFoundError: No module named 'x'")
    "ModuleNotFoundError: No module named 'x'"
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (said or lines or ["(no message)"])[-1]


class Ledger:
    """Joins the records of every test and phase into the report's typed tests and audit."""

    def __init__(self) -> None:
        self.tests: dict[str, TestEntry] = {}
        """Per node id, the report's test entry."""
        self._audit: AuditLedger | None = None
        self.compile_stats: dict[str, int] = {"hits": 0, "misses": 0, "compiled": 0, "reused": 0}
        self.lowered_stats: dict[str, int] = {"hits": 0, "misses": 0}
        self.interception: dict[str, object] | None = None
        """What the audit's hook could see, as the first audited process said."""
        self.revision = 0
        """Bumped whenever a record arrives: a report built before is stale."""
        self.collection_errors: dict[str, str] = {}
        """Per collector pytest could not collect (its tests did not run), the error's last
        line."""

    @property
    def audit(self) -> AuditLedger:
        """The audit's ledger: made (its module loaded) by the first audited record, or where
        the report reads it; a check session never loads the audit's machinery."""
        if self._audit is None:
            from pytest_jaxport.report.audit_ledger import AuditLedger

            self._audit = AuditLedger()
        return self._audit

    def _entry(self, nodeid: str, outcome: str = "passed") -> TestEntry:
        return self.tests.setdefault(nodeid, TestEntry(nodeid=nodeid, outcome=outcome))

    def add(self, record: TestRecord, *, when: str, failed: bool, skipped: bool) -> None:
        """One phase's record, with its report's outcome."""
        self.revision += 1
        if record.audit is not None:
            self.audit.add(record.audit)
            interception = record.audit.get("interception")
            if interception and self.interception is None:
                self.interception = dict(interception)
            if not record.checks and record.error is None and record.nodeid not in self.tests:
                return  # an audited test that is not a portable one: in the audit only
        entry = self._entry(record.nodeid)
        if when == "call":
            for stats, found in ((self.compile_stats, record.compile),
                                 (self.lowered_stats, record.lowered_cache)):  # fmt: skip
                for key, value in (found or {}).items():
                    stats[key] = stats.get(key, 0) + int(value)
            entry = _judged(entry, record)
        if record.error is not None and entry.error is None:
            entry = replace(entry, error=_kept(record.error))
        if failed:
            entry = replace(entry, outcome="failed" if when == "call" else "error")
        elif skipped and entry.outcome == "passed":
            entry = replace(entry, outcome="skipped")
        self.tests[record.nodeid] = entry

    def collection_error(self, nodeid: str, error: str) -> None:
        """A file (or other collector) pytest could not collect: its tests did not run."""
        self.revision += 1
        self.collection_errors.setdefault(nodeid, error)

    def crashed(self, nodeid: str, message: str, when: str) -> None:
        """A test whose pytest-xdist worker died while it ran (no record arrived)."""
        self.revision += 1
        entry = self._entry(nodeid, outcome="error")
        self.tests[nodeid] = replace(
            entry, outcome="error", crashed=True, error=_kept(TestError(message=message, when=when))
        )


def _judged(entry: TestEntry, record: TestRecord) -> TestEntry:
    """``entry`` with what its call phase decided (``record``): its checks and violations,
    read from the record the worker sent (trusted: this package wrote it), its error and
    what failed it outside its budget, where the record says."""
    place = f"{record.nodeid}: "
    return replace(
        entry,
        checks=tuple(
            Check.read(record_reader(c, f"{place}checks[{i}]")) for i, c in enumerate(record.checks)
        ),
        violations=tuple(
            read_violation(record_reader(v, f"{place}violations[{i}]"))
            for i, v in enumerate(record.violations)
        ),
        error=_kept(record.error) if record.error is not None else entry.error,
        outputs_errors=tuple(record.outputs_errors) or entry.outputs_errors,
        baseline_growth=tuple(record.baseline_growth) or entry.baseline_growth,
        baseline_news=tuple(record.baseline_news) or entry.baseline_news,
    )


def _kept(error: TestError) -> TestError:
    """``error`` as the report keeps it: its message cut at :data:`ERROR_LIMIT` characters."""
    return replace(error, message=error.message[:ERROR_LIMIT])
