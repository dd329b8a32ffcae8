"""The suite audit's pytest plugin object: ``pytest --jaxport-audit`` on an unchanged suite.

Registered by :mod:`pytest_jaxport.plugin` when ``--jaxport-audit`` or ``[tool.jaxport]
audit`` asks for it. In each process that runs tests it installs the
:class:`~pytest_jaxport.audit.Recorder`; at each test's setup the recorder starts a new test
(clearing only JAX's C++ dispatch caches), and the test's teardown report carries what it ran
(``report.jaxport_audit``, an :class:`~pytest_jaxport.audit_report.AuditTestRecord`), so under
pytest-xdist the controller, which runs no test and never installs the hook, merges the same
records a serial run does.

The audit never fails a test. ``[tool.jaxport.audit] fail_on`` and ``--jaxport-baseline``
judge the whole suite once, at the end of the session: one clear failure naming the limit,
the count and the offending sites, and exit status 1.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jaxport.audit_report import AuditLedger, failures, judge
from pytest_jaxport.config import ProjectConfig

if TYPE_CHECKING:
    from pytest_jaxport.audit import Recorder
    from pytest_jaxport.session import JaxportSession

RECORD_ATTRIBUTE = "jaxport_audit"
"""The attribute of a teardown report that carries the test's audit record."""


class AuditSession:
    """Records every test's computations and judges the suite at the end."""

    def __init__(
        self, config: pytest.Config, project: ProjectConfig, session: JaxportSession
    ) -> None:
        self.config = config
        self.project = project
        self.session = session
        self.ledger = AuditLedger()
        self.recorder: Recorder | None = None
        self.is_worker = hasattr(config, "workerinput")
        self.is_controller = not self.is_worker and config.getoption("dist", "no") != "no"
        self._interception: dict[str, Any] | None = None
        self._sent_interception = False
        self._index: dict[str, int] = {}
        self._revision = 0
        self._section: tuple[int, dict[str, Any]] | None = None

    def start(self) -> None:
        """Install the hook where tests run (not on an xdist controller)."""
        if self.is_controller:
            return
        from pytest_jaxport.audit import Recorder

        self.recorder = Recorder(
            platforms=self.project.platforms,
            classifier=self.session.classifier("lowered"),
            rootdir=self.config.rootpath,
            compile_settings=self.session.compile_settings,
            own_packages=self.project.own_packages,
        )
        support = self.recorder.start()
        self._interception = support.to_dict()

    def stop(self) -> None:
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None

    # -- recording -------------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from pytest_jaxport.render import wrap

        where = ", ".join(self.project.platforms)
        if self._interception is None:
            line = f"jaxport: audit on: recording every jitted computation; lowering for {where}"
        else:
            how = self._interception.get("adapter") or "compile events only"
            line = (
                f"jaxport: audit on: recording every jitted computation (jax "
                f"{self._interception.get('jax')}, {how}); lowering for {where}"
            )
        return wrap(line, hang="  ")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._index = {item.nodeid: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.recorder is not None:
            self.recorder.begin_test()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "teardown" and self.recorder is not None:
            record: dict[str, Any] = dict(
                self.recorder.end_test(item.nodeid, self._index.get(item.nodeid, -1))
            )
            if not self._sent_interception:
                record["interception"] = self._interception
                self._sent_interception = True
            setattr(report, RECORD_ATTRIBUTE, record)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = getattr(report, RECORD_ATTRIBUTE, None)
        if not isinstance(record, dict):
            return
        self._revision += 1
        self.ledger.add(record)  # type: ignore[arg-type]
        if record.get("interception") and self._interception is None:
            self._interception = record["interception"]

    # -- the report and the gate ------------------------------------------------------------------

    def section(self) -> dict[str, Any]:
        """The report's ``audit`` section, judged (built once per change of the records)."""
        if self._section is None or self._section[0] != self._revision:
            hook = self.config.hook.pytest_jaxport_rewrite_cost
            model = self.session.cost_model()

            def price(item: Any) -> float | None:
                if not hook.get_hookimpls():
                    return None
                days = hook(item=item, target=item.target, model=model)
                return None if days is None else float(days)

            section = self.ledger.section(
                interception=self._interception,
                platforms=self.project.platforms,
                migrate_to=self.project.migrate_to,
                model=model,
                price=price,
            )
            ci = self.session.ci
            base = ci.baseline.get("audit") if ci.baseline is not None else None
            judge(
                section,
                budget_for=self.project.audit_budget,
                migrate_to=self.project.migrate_to,
                model=model,
                baseline=base if isinstance(base, dict) and not ci.baseline_update else None,
            )
            self._section = (self._revision, section)
        return self._section[1]

    def _settle_worker(self) -> None:
        """An xdist worker ran its last test: unhook, collect the garbage, then freeze what
        is left (JAX's caches, grown by the lowerings for other platforms) out of the
        collector's way. This runs before the worker reports itself finished; after that,
        pytest-xdist gives it 5 seconds to exit before it interrupts it (SIGINT), and a
        full collection of that heap in every garbage-collector pass of its last steps
        (another plugin's summary, pytest's own last collection, each with JAX's collector
        hook) could overrun them on a busy machine: a KeyboardInterrupt inside JAX's
        ``_xla_gc_callback``, printed as an unraisable-exception warning."""
        import gc

        self.stop()
        gc.collect()  # (finalizers run now, as they would have at pytest's last collection)
        gc.freeze()

    def baseline_note(self) -> str | None:
        ci = self.session.ci
        if ci.baseline is None or ci.baseline_update or isinstance(ci.baseline.get("audit"), dict):
            return None
        return (
            f"jaxport audit: the baseline {ci.baseline_path} has no audit counts: not compared; "
            "--jaxport-baseline-update records them"
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            self._settle_worker()
            return
        if failures(self.section()):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The audit in the report's view: here, unless ``--jaxport-report`` prints the
        view already; then the suite's budget failures, once, as the session's failure."""
        if self.is_worker:
            return
        from pytest_jaxport.render import audit_failure_lines, render_text

        view = self.session.view()
        if self.session.report_target is None:
            terminalreporter.write_sep("=", "jaxport audit")
            terminalreporter.write_line(render_text(view, self.session.display()))
        note = self.baseline_note()
        if note is not None:
            terminalreporter.write_line(note)
        lines = audit_failure_lines(view)
        if lines:
            terminalreporter.write_line(lines[0], red=True, bold=True)
            for line in lines[1:]:
                terminalreporter.write_line(line, red=True)
