"""The plugin object pytest registers, thin: each hook is handed to the part whose work it
is, as pytest-cov's plugin hands its hooks to its controller or worker (docs/architecture.md):

- :class:`~pytest_jaxport.session.judge.Judge`: each test's configuration, its checks against
  the budget, its failure text and record;
- :class:`~pytest_jaxport.session.recording.AuditRecording`: the audit recorder's session
  side;
- :class:`~pytest_jaxport.session.roles.Controller` (joins the records, says the end) or
  :class:`~pytest_jaxport.session.roles.Worker` (a pytest-xdist worker);
- :class:`~pytest_jaxport.session.writer.ReportWriter` (the controller's): the report, its
  files, the baseline and the exit status;

each reading the one :class:`~pytest_jaxport.session.settings.SessionSettings` the plugin
builds from ``[tool.jaxport]``, the options and the ini value.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import pytest

from pytest_jaxport.report.ledger import TestRecord
from pytest_jaxport.session.judge import MARKER, Judge
from pytest_jaxport.session.recording import AuditRecording
from pytest_jaxport.session.roles import Controller, Worker
from pytest_jaxport.session.settings import SessionSettings
from pytest_jaxport.view.text import wrap

__all__ = ["JaxportSession"]


class JaxportSession:
    """The hooks of one pytest session, each delegated to its part."""

    def __init__(self, config: pytest.Config, settings: SessionSettings) -> None:
        self.config = config
        self.settings = settings
        self.judge = Judge(config, settings)
        self.audit = AuditRecording(config, settings)
        self.role: Controller | Worker = (
            Worker(config, settings, audit=self.audit)
            if hasattr(config, "workerinput")  # pytest-xdist's worker
            else Controller(config, settings, audit=self.audit)
        )

    def start(self) -> None:
        """Install the audit's hook where tests run (not on a pytest-xdist controller)."""
        self.audit.start(
            runs_tests=self.role.runs_tests, classifier=self.judge.classifier("lowered")
        )

    def stop(self) -> None:
        self.audit.stop()
        compiler = self.settings.compile_settings.tpu_compiler
        if compiler is not None:
            compiler.close()

    # -- pytest hooks ---------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = [*self.judge.header_lines(), *self.audit.header_lines()]
        return [part for line in lines for part in wrap(line, hang="  ")]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.audit.collected(session.items)
        compiler = self.settings.compile_settings.tpu_compiler
        cache = self.settings.compile_settings.cache
        if (
            compiler is not None
            and self.role.runs_tests
            and (cache is None or cache.empty())
            and (self.audit.audited or any(i.get_closest_marker(MARKER) for i in session.items))
        ):  # every compile a miss: the worker imports JAX while the first tests run; with a
            # cache, the first compile it does not hold starts it (all cached: none starts)
            compiler.start()

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        """Tests ``-k``, ``-m``, ``--deselect`` or ``--lf`` left out: the baseline's entries
        of theirs are not run, never stale. A pytest-xdist worker sends them to the
        controller with its output (:meth:`pytest_testnodedown`)."""
        self.role.deselected(items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """pytest-xdist's controller: a worker finished; the tests it deselected."""
        self.role.node_down(node)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.audit.begin_test()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        self.judge.check_marker(item)
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        record = self.judge.record(item, call, report)
        if call.when == "teardown":
            audit = self.audit.end_test(item)
            if audit is not None:
                record = record or TestRecord(nodeid=item.nodeid)
                record.audit = audit
        if record is not None:
            report.jaxport = record.to_dict()  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.role.logreport(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.role.collected(report)

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        """A test failed by its portability budget (not by its own error) shows as ``P`` in
        the progress line; it still counts, and is summarised, as ``FAILED``."""
        return self.judge.teststatus(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.role.session_finished(session)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        self.role.terminal_summary(terminalreporter, budget_failed=len(self.judge.budget_failed))
