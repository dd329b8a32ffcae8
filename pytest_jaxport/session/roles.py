"""The two roles of a process, as pytest-cov splits its controller and workers: the
:class:`Controller` joins every test's record and ends the session (pytest's own process
without pytest-xdist, xdist's controller with it); a :class:`Worker` runs tests and sends
what the controller needs with its output.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from pytest_jaxport.report.ledger import Ledger, TestRecord, error_line
from pytest_jaxport.session.judge import MARKER
from pytest_jaxport.session.recording import AuditRecording
from pytest_jaxport.session.settings import SessionSettings
from pytest_jaxport.view.formatting import plural

if TYPE_CHECKING:
    from pytest_jaxport.session.writer import ReportWriter

BASELINE_SHOWN = 3
"""Stale baseline entries the terminal names after the run (the report files name all)."""


class Controller:
    """Joins the records (in any order, from any worker) into the ledger, has the writer
    end the session, and says the end in the terminal."""

    def __init__(
        self, config: pytest.Config, settings: SessionSettings, *, audit: AuditRecording
    ) -> None:
        self.config = config
        self.project = settings.project
        self.compile_settings = settings.compile_settings
        self.ci = settings.ci
        self.audited = settings.audited
        self.runs_tests = config.getoption("dist", "no") == "no"
        """Whether tests run in this process: pytest's own, not pytest-xdist's controller."""
        self.ledger = Ledger()
        self._outcomes: dict[str, str] = {}
        """With a baseline to compare: every test's outcome, portable or not."""
        self._deselected: set[str] = set()
        """With a baseline to compare: the tests collected but not selected (from every
        pytest-xdist worker)."""
        self._settings = settings
        self._audit = audit
        self._writer: ReportWriter | None = None
        self._broken: str | None = None
        """The traceback of a failure of this plugin's own at the session's end (a bug here):
        said once in the terminal summary instead of the report, never in pytest's way."""

    @property
    def writer(self) -> ReportWriter:
        """The session's report writer, made where the session ends: the report's building,
        views and files load then, and only where something reads them (a check session with
        no report, baseline or audit never builds one)."""
        if self._writer is None:
            from pytest_jaxport.session.writer import ReportWriter

            self._writer = ReportWriter(
                self.config, self._settings, ledger=self.ledger, audit=self._audit,
                outcomes=self._outcomes, deselected=self._deselected,
            )  # fmt: skip
        return self._writer

    # -- joining the records ----------------------------------------------------------------

    def deselected(self, items: Sequence[pytest.Item]) -> None:
        """Tests ``-k``, ``-m``, ``--deselect`` or ``--lf`` left out: the baseline's entries
        of theirs are not run, never stale."""
        if self.ci.baseline is not None:
            self._deselected.update(item.nodeid for item in items)

    def node_down(self, node: object) -> None:
        """pytest-xdist's controller: a worker finished; the tests it deselected."""
        output = getattr(node, "workeroutput", None) or {}
        self._deselected.update(output.get("jaxport_deselected", ()))

    def logreport(self, report: pytest.TestReport) -> None:
        """A test's phase reported (here, or by a worker): its record into the ledger."""
        if self.ci.baseline is not None:
            self._ran(report)
        data = getattr(report, "jaxport", None)
        if isinstance(data, dict):
            record = TestRecord.from_dict(data)
            self.ledger.add(record, when=report.when, failed=report.failed,
                            skipped=report.skipped)  # fmt: skip
            return
        # A failed report without a record for a portable test: its xdist worker crashed.
        # pytest-xdist reports the running test with a synthetic report (``when="???"``, no
        # keywords); the test is known here from its setup record.
        known = report.nodeid in self.ledger.tests
        if report.failed and (known or MARKER in getattr(report, "keywords", {})):
            self.ledger.crashed(report.nodeid, str(report.longrepr), report.when)

    def collected(self, report: pytest.CollectReport) -> None:
        """A collector reported (here, or by a worker: pytest-xdist sends the failed ones):
        one that failed is a file whose tests did not run, said in the report."""
        if report.failed:
            self.ledger.collection_error(report.nodeid or ".", error_line(report.longreprtext))

    def _ran(self, report: pytest.TestReport) -> None:
        """Every test's outcome (its call's; ``skipped`` or ``error`` from its setup, or from
        a crashed worker), for the baseline's match."""
        if report.when == "call":
            self._outcomes[report.nodeid] = report.outcome
        elif not report.passed and (report.when == "setup" or report.nodeid not in self._outcomes):
            self._outcomes[report.nodeid] = "skipped" if report.skipped else "error"

    # -- the end of the session ---------------------------------------------------------------

    def session_finished(self, session: pytest.Session) -> None:
        """The writer's end of the session, never in pytest's way: a failure of the plugin's
        own is kept for the terminal summary and exits 3."""
        try:
            self.writer.finish(session)
        except Exception:  # a bug of this plugin's: pytest still reports the tests
            self._broken = traceback.format_exc()
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, *, budget_failed: int
    ) -> None:
        """After pytest's own summary: the caches, the baseline, what ``P`` means (for the
        ``budget_failed`` tests shown so), the report and the audit's failures."""
        if self._broken is not None:
            terminalreporter.write_sep("=", "jaxport: internal error", red=True)
            terminalreporter.write_line(
                "jaxport: the report could not be built: a bug in pytest-jaxport, not in "
                "this suite (the tests' outcomes above are theirs). Please report it with "
                "this traceback:",
                red=True,
            )
            terminalreporter.write_line(self._broken.rstrip())
            return
        for line in (self.lowered_summary(), self.compile_summary()):
            if line is not None:
                terminalreporter.write_line(line)
        self._baseline_summary(terminalreporter)
        if budget_failed:  # the letter is ours: say what it means
            terminalreporter.write_line(
                f"jaxport: P in the progress line is a test its portability budget failed "
                f"({plural(budget_failed, 'test')}; counted as failed)"
            )
        writer = self.writer
        # the report's text, as the writer's parts: loaded where the session ends
        from pytest_jaxport.view.text import audit_failure_lines, render_text

        if writer.settings.report.requested:
            written = ", ".join(writer.written) or None
            terminalreporter.write_sep("=", "jaxport portability report")
            terminalreporter.write_line(render_text(writer.view(), writer.display(),
                                                    written_to=written))  # fmt: skip
            if written is not None:
                terminalreporter.write_line(f"jaxport: full report written to {written}")
        if not self.audited:
            return
        if (
            not writer.settings.report.requested
        ):  # the audit's view: the one --jaxport-report prints
            terminalreporter.write_sep("=", "jaxport audit")
            terminalreporter.write_line(render_text(writer.view(), writer.display()))
        baseline = self.ci.baseline
        if (
            baseline is not None
            and not self.ci.baseline_update
            and not isinstance(baseline.get("audit"), dict)
        ):
            terminalreporter.write_line(
                f"jaxport audit: the baseline {self.ci.baseline_path} has no audit counts: "
                "not compared; --jaxport-baseline-update records them"
            )
        lines = audit_failure_lines(writer.view())
        if lines:
            terminalreporter.write_line(lines[0], red=True, bold=True)
            for line in lines[1:]:
                terminalreporter.write_line(line, red=True)

    def _baseline_summary(self, terminal: pytest.TerminalReporter) -> None:
        """How the baseline met the run, after every run that compared one; a baseline
        that matched no test is a warning, under ``--jaxport-baseline-strict`` a failure."""
        match = self.writer.match
        if match is None:
            return
        # the baseline's wording: loaded only where a baseline was compared
        from pytest_jaxport.view.viewmodel.baseline import (
            baseline_line,
            baseline_verdict,
            stale_text,
        )

        terminal.write_line(f"jaxport: {baseline_line(match)}")
        stale = [f"{e.nodeid}{f' check {e.check!r}' if e.check else ''} ({stale_text(e)})"
                 for e in match.stale]  # fmt: skip
        if stale:
            shown = stale[:BASELINE_SHOWN]
            more = len(stale) - len(shown)
            terminal.write_line(
                "jaxport: baseline entries no longer matched: " + "; ".join(shown)
                + (f"; +{more} more (--jaxport-report lists them)" if more else ""),
                yellow=not match.fails,
            )  # fmt: skip
        verdict = baseline_verdict(match)
        if verdict is not None:
            terminal.write_line(f"jaxport: {verdict}", red=match.fails, bold=match.fails,
                                yellow=not match.fails)  # fmt: skip

    def compile_summary(self) -> str | None:
        """``jaxport: compiled cache 3 hits, 0 misses (...)``, when anything was compiled."""
        stats = self.ledger.compile_stats
        if not self.project.compile or not (stats["hits"] or stats["misses"]):
            return None
        work = (
            f"{stats['compiled']} compiled for the census, "
            f"{stats['reused']} read from executables numerics built"
        )
        if self.compile_settings.cache is None:
            return f"jaxport: compiled cache off (cacheprovider disabled): {work}"
        return f"jaxport: compiled cache {stats['hits']} hits, {stats['misses']} misses ({work})"

    def lowered_summary(self) -> str | None:
        """``jaxport: lowered cache 6 hits, 0 misses``, when any platform was looked up."""
        stats = self.ledger.lowered_stats
        if self.compile_settings.lowered_cache is None or not (stats["hits"] or stats["misses"]):
            return None
        return (
            f"jaxport: lowered cache {stats['hits']} hits, {stats['misses']} misses "
            "(platforms not present here)"
        )


class Worker:
    """A pytest-xdist worker: it runs tests (their records travel on pytest's reports) and
    sends the tests it deselected with its output; the controller says the end."""

    def __init__(
        self, config: pytest.Config, settings: SessionSettings, *, audit: AuditRecording
    ) -> None:
        self.config = config
        self.ci = settings.ci
        self.audit = audit
        self.runs_tests = True
        """A worker is where tests run."""

    def deselected(self, items: Sequence[pytest.Item]) -> None:
        """The tests left out here, sent to the controller (:meth:`Controller.node_down`)."""
        if self.ci.baseline is None:
            return
        output = self.config.workeroutput  # type: ignore[attr-defined]
        output.setdefault("jaxport_deselected", []).extend(item.nodeid for item in items)

    def node_down(self, node: object) -> None:
        """Only a controller hears of workers."""

    def logreport(self, report: pytest.TestReport) -> None:
        """The controller joins the records; a worker's reports travel there."""

    def collected(self, report: pytest.CollectReport) -> None:
        """pytest-xdist sends a failed collection to the controller."""

    def session_finished(self, session: pytest.Session) -> None:
        """The last test ran: settle the audit's recorder before the worker exits."""
        self.audit.settle()

    def terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, *, budget_failed: int
    ) -> None:
        """The controller's terminal says the end."""
