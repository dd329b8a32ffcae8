"""The writer: the session's report, built once from the ledger, its files, the baseline, and
the run's exit status.

The report's parts (its building, the audit's ledger, the baseline, the views and the
renderers) are imported where each is first needed: every session ends here, and one that
reads no report, baseline or audit loads none of them.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_jaxport.report import ci
from pytest_jaxport.session.recording import AuditRecording
from pytest_jaxport.session.settings import SessionSettings
from pytest_jaxport.view.annotations import annotation_lines, default_mode
from pytest_jaxport.view.reporters import installed_file, reporter_for

if TYPE_CHECKING:
    from pytest_jaxport.model.cost import FormatItem, RewriteItem
    from pytest_jaxport.report.audit_section import AuditSection
    from pytest_jaxport.report.document import BaselineMatch, Config, Report
    from pytest_jaxport.report.entries import TestEntry
    from pytest_jaxport.report.ledger import Ledger
    from pytest_jaxport.report.summary import Pricing
    from pytest_jaxport.report.totals import Tooling
    from pytest_jaxport.view.display import DisplayOptions
    from pytest_jaxport.view.viewmodel.reportview import ReportView

NOT_WRITTEN = "jaxport report not written"
"""What pytest's summary line counts a report file that could not be written as (``1 passed,
1 jaxport report not written``): the run fails for it (exit status 1)."""


@dataclasses.dataclass(frozen=True, kw_only=True)  # not slotted: read by its __dict__
class NotWritten:
    """A report file that could not be written, as pytest's terminal statistics hold it (an
    object with a ``__dict__``, as other plugins read every entry's: Hypothesis does)."""

    path: Path
    error: str


class ReportWriter:
    """The controller's report: built from the ledger (with the user's cost and tooling
    hooks), judged (the audit's gate, the baseline, suite-level problems), written to each
    file and the step summary; it decides whether the session fails."""

    def __init__(
        self,
        config: pytest.Config,
        settings: SessionSettings,
        *,
        ledger: Ledger,
        audit: AuditRecording,
        outcomes: Mapping[str, str],
        deselected: set[str],
    ) -> None:
        self.config = config
        self.settings = settings
        self.project = settings.project
        self.compile_settings = settings.compile_settings
        self.ci = settings.ci
        self.cost_model = settings.cost_model
        self.ledger = ledger
        self.audit = audit
        self.audited = audit.audited
        self.outcomes = outcomes
        """With a baseline to compare: every test's outcome, portable or not (which of the
        baseline's entries this run could have matched)."""
        self.deselected = deselected
        """With a baseline to compare: the tests collected but not selected (from every
        pytest-xdist worker)."""
        self._tooling: Tooling | None = None
        self._built: tuple[int, Report] | None = None
        self._view: tuple[Report, ReportView] | None = None
        self.written: list[str] = []
        """The report files written this session, as given (for the terminal's one line)."""
        self.match: BaselineMatch | None = None
        """How the baseline met the run, once the report is built with one."""
        self.hook_errors: dict[str, str] = {}
        """Per jaxport hook a user's implementation of which raised at the end of the run,
        what it raised and where (said once; the report is built without it)."""

    # -- the user's hooks -------------------------------------------------------------------

    def price(self, item: RewriteItem | FormatItem) -> float | None:
        """A ``pytest_jaxport_rewrite_cost`` hook's days for ``item`` (a kernel or a
        formats-and-layout finding); ``None`` without one (or once the user's hook raised:
        said at the end, never a crash)."""
        hook = self.config.hook.pytest_jaxport_rewrite_cost
        if not hook.get_hookimpls() or "pytest_jaxport_rewrite_cost" in self.hook_errors:
            return None
        try:
            days = hook(item=item, target=item.target, model=self.cost_model)
        except Exception as e:
            self._hook_raised("pytest_jaxport_rewrite_cost", e)
            return None
        return None if days is None else float(days)

    def _hook_raised(self, name: str, error: Exception) -> None:
        """Record that the user's implementation of hook ``name`` raised ``error``: its
        type, message and the line that raised it (the user's, not the plugin's)."""
        frames = traceback.extract_tb(error.__traceback__)
        where = ""
        if frames:
            path = Path(frames[-1].filename)
            if path.is_relative_to(self.config.rootpath):
                path = path.relative_to(self.config.rootpath)
            where = f" at {path.as_posix()}:{frames[-1].lineno}"
        message = str(error).splitlines()[0] if str(error) else ""
        self.hook_errors.setdefault(
            name, f"{type(error).__name__}{': ' + message if message else ''}{where}"
        )

    def hook_problems(self) -> list[str]:
        """One line per jaxport hook of the user's that raised, and what was done instead."""
        instead = {
            "pytest_jaxport_rewrite_cost": "rewrite days are priced by the cost model",
            "pytest_jaxport_tooling_rules": "the tooling scan used the built-in rules only",
        }
        return [
            f"jaxport: your {name} hook raised {said}; {instead.get(name, 'it was ignored')}"
            for name, said in self.hook_errors.items()
        ]

    # -- the report ---------------------------------------------------------------------------

    def build(self) -> Report:
        """The session's report (built once for the terminal, the files and the baseline)."""
        if self._built is None or self._built[0] != self.ledger.revision:
            self._built = (self.ledger.revision, self._build())
        return self._built[1]

    def _build(self) -> Report:
        from pytest_jaxport.report.build import build_report, environment
        from pytest_jaxport.report.document import CollectionError

        tests = self.ledger.tests.values()
        jax_loaded = self.audited or any(t.checks for t in tests)
        present: tuple[str, ...] = ()
        versions: dict[str, str] = {}
        kinds: dict[str, str] = {}
        if jax_loaded:
            from pytest_jaxport._jax import devices  # JAX is loaded already: checks ran

            present, versions = devices.present_platforms(), devices.versions()
            kinds = {p: devices.device_kind(p) for p in present}
        here = environment(present, versions)
        report = build_report(
            tests,
            config=self.report_config(),
            environment=ci.leg_facts(tests, kinds, environment=here),
            pricing=self.pricing(),
            tooling=self.tooling_scan(),
        )
        if self.ci.baseline is not None:
            self.match = self.baseline_match(report.tests)
        return dataclasses.replace(
            report,
            baseline=self.match,
            audit=self.audit_section() if self.audited else None,
            collection_errors=tuple(
                CollectionError(nodeid=nodeid, error=error)
                for nodeid, error in sorted(self.ledger.collection_errors.items())
            ),
        )

    def report_config(self) -> Config:
        """What the run was configured with, as the report states it."""
        from pytest_jaxport.report.document import Config, JudgedDevice

        project = self.project
        target = project.gpu if "cuda" in project.compile else None
        written = (("source", project.source), ("target", target))
        return Config(
            source=project.source,
            platforms=tuple(project.platforms),
            reference=project.reference,
            compile=tuple(project.compile),
            target=target,
            devices={
                p: JudgedDevice(generation=d.generation, name=d.name)
                for p, d in sorted(self.compile_settings.devices.items())
                if p != "cpu"  # every leg of a merge judges the same devices
            },
            budget=ci.budget_table(project),
            tolerance=ci.tolerance_table(project),
            emulate=ci.emulated_platforms(project),
            migrate_to=tuple(project.migrate_to),
            home=project.home,
            # where the project set it: jaxport diff of two reports holds memory to it
            memory_growth=project.memory_growth.value if project.memory_growth else None,
            # the keys it writes as null (a report read back gives the same JSON)
            written_null=frozenset(key for key, value in written if value is None),
        )

    def pricing(self) -> Pricing:
        """How the run's moves are priced: the project's targets, home and cost model, and
        the user's ``pytest_jaxport_rewrite_cost`` hook."""
        from pytest_jaxport.report.summary import Pricing

        return Pricing(
            migrate_to=tuple(self.project.migrate_to),
            model=self.cost_model,
            home=self.project.home,
            price=self.price,
        )

    def baseline_match(self, tests: Sequence[TestEntry]) -> BaselineMatch:
        """How the baseline's entries met this run's tests (:func:`match_baseline`): the
        files asked for in part (``t.py::test_a``) are where an entry not run is not stale."""
        assert self.ci.baseline is not None
        from pytest_jaxport.report.baseline import match_baseline

        root, here = self.config.rootpath, Path(self.config.invocation_params.dir)
        partial = set()
        for arg in self.config.args:
            path, within, _ = arg.partition("::")
            full = (here / path).resolve()
            if within and full.is_relative_to(root):
                partial.add(full.relative_to(root).as_posix())
        return match_baseline(
            self.ci.baseline, tests, file=self.ci.baseline_name, outcomes=self.outcomes,
            deselected=self.deselected, partial_files=partial,
            exists=lambda file: (root / file).exists(), strict=self.ci.baseline_strict,
        )  # fmt: skip

    def audit_section(self) -> AuditSection:
        """The report's ``audit`` section, judged against ``[tool.jaxport.audit] fail_on``
        and the baseline."""
        from pytest_jaxport.model.counted_lines import CountedLines
        from pytest_jaxport.report.audit_ledger import AuditSettings, judge

        section = self.ledger.audit.section(
            AuditSettings(
                interception=self.audit.interception or self.ledger.interception,
                platforms=tuple(self.project.platforms),
                pricing=self.pricing(),
                eager_users=self.project.audit.eager_users,
                counted=CountedLines(
                    paths=self.project.audit.counted_paths,
                    tests=tuple(str(p) for p in self.config.getini("testpaths")),
                ),
            )
        )
        base = self.ci.baseline.get("audit") if self.ci.baseline is not None else None
        return judge(
            # what it was judged against
            dataclasses.replace(section, fail_on=ci.fail_on_table(self.project)),
            budget_for=self.project.audit_budget,
            pricing=self.pricing(),
            baseline=base if isinstance(base, dict) and not self.ci.baseline_update else None,
        )

    def tooling_scan(self) -> Tooling | None:
        """The NVIDIA-bound tooling scan of the project, once per session (controller)."""
        if not self.project.scan:
            return None
        if self._tooling is None:
            from pytest_jaxport.model.tooling import assumptions_per_rule, scan_tree
            from pytest_jaxport.model.tooling_rules import TOOLING_RULES
            from pytest_jaxport.report.totals import Tooling

            try:
                extra = [r for rules in self.config.hook.pytest_jaxport_tooling_rules(
                    config=self.config) for r in rules]  # fmt: skip
            except Exception as e:  # the user's hook: said at the end, never a crash
                self._hook_raised("pytest_jaxport_tooling_rules", e)
                extra = []
            started = time.perf_counter()
            found = scan_tree(
                self.config.rootpath,
                exclude=self.project.scan_exclude,
                rules=(*TOOLING_RULES, *extra),
            )
            self._tooling = Tooling(
                assumptions=tuple(found.assumptions),
                by_rule=assumptions_per_rule(found.assumptions),
                files_listed=found.files_listed,
                files_read=found.files_read,
                source=found.source,
                seconds=round(time.perf_counter() - started, 3),
            )
        return self._tooling

    def view(self) -> ReportView:
        """The report's view, built once for the terminal, the files and the step summary."""
        from pytest_jaxport.view.viewmodel.build import build_view

        report = self.build()
        if self._view is None or self._view[0] is not report:
            self._view = (report, build_view(report))
        return self._view[1]

    def display(self) -> DisplayOptions:
        """The display options (``--jaxport-report-*``, pytest's and jaxport's verbosity)."""
        return self.settings.display

    # -- the end of the session: the gate, the files ----------------------------------------

    def problems(self) -> list[str]:
        """Suite-level failures (not any test's): each makes the session fail."""
        found = []
        setting = self.project.resolve().budget("cpu").max_tooling_assumptions
        tooling = self.tooling_scan() if setting is not None else None
        count = len(tooling.assumptions) if tooling is not None else 0
        if setting is not None and count > setting.value:
            lines = [
                f"jaxport: {count} NVIDIA-bound tooling assumptions > {setting.value} "
                f"(max_tooling_assumptions, set in {setting.origin})"
            ]
            for a in tooling.assumptions if tooling is not None else ():
                lines.append(f"    {a.file}:{a.line}: {a.rule}: {a.reason}")
            found.append("\n".join(lines))
        return found

    def finish(self, session: pytest.Session) -> None:
        """The controller's end of the session: the audit's gate, the baseline, the problems
        and the report files; the session fails where one of them does."""
        failed = False
        if self.audited or self._hooked():
            # Built only where something reads it: the audit's gate, or a user's cost or
            # tooling hook (run once, in the build; said below when it raises). A run with
            # neither, no report and no baseline never builds it (nor scans the tooling).
            from pytest_jaxport.report.audit_ledger import failures

            audit = self.build().audit
            failed = audit is not None and failures(audit) > 0
        failed = self._update_baseline() or failed
        if self.ci.baseline is not None:
            self.build()
            failed = failed or (self.match is not None and self.match.fails)
        if self.settings.report.requested:
            self.build()  # runs the user's cost and tooling hooks, once
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        for problem in (*self.hook_problems(), *self.problems()):
            failed = True
            if terminal is not None:
                _own_line(self.config, terminal)
                terminal.write_line(problem, red=True)
        failed = self._write_reports() or failed
        self._annotate()
        if failed:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _hooked(self) -> bool:
        """Whether a ``pytest_jaxport_rewrite_cost`` or ``pytest_jaxport_tooling_rules`` hook
        of the user's runs when the report is built."""
        hook = self.config.hook
        return bool(
            hook.pytest_jaxport_rewrite_cost.get_hookimpls()
            or hook.pytest_jaxport_tooling_rules.get_hookimpls()
        )

    def _update_baseline(self) -> bool:
        """``--jaxport-baseline-update``: write it; whether that failed."""
        if not self.ci.baseline_update:
            return False
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        try:
            written = ci.write_baseline(self.ci, self.build())
        except OSError as e:
            if terminal is not None:
                _own_line(self.config, terminal)
                terminal.write_line(f"jaxport: could not write the baseline: {e}", red=True)
            return True
        if terminal is not None and written is not None:
            terminal.ensure_newline()
            terminal.write_line(f"jaxport: baseline written to {written}")
        return False

    def _write_reports(self) -> bool:
        """Each ``--jaxport-report=PATH`` in the format its suffix names
        (:data:`~pytest_jaxport.view.reporters.REPORTERS`), its folder created
        as pytest does for ``--junitxml`` (and the step summary); whether one failed."""
        failed = False
        for target in self.settings.report.files:
            path = Path(self.config.invocation_params.dir) / target
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                reporter_for(path)(path, self)
            except OSError as e:
                terminal = self.config.pluginmanager.get_plugin("terminalreporter")
                if terminal is not None:
                    _own_line(self.config, terminal)
                    terminal.write_line(
                        f"jaxport: could not write the report {path}: {e}", red=True
                    )
                    # pytest's last line counts it ("1 passed, 1 jaxport report not written"):
                    # the exit status is 1, and a line reading "1 passed" alone would hide why
                    terminal.stats.setdefault(NOT_WRITTEN, []).append(
                        NotWritten(path=path, error=str(e))
                    )
                failed = True
                continue
            self.written.append(target)
        if self.written:
            self._step_summary()
        return failed

    def _step_summary(self) -> None:
        """Append the Markdown report to ``$GITHUB_STEP_SUMMARY``, within its size limit."""
        target = os.environ.get("GITHUB_STEP_SUMMARY")
        if not target:
            return
        from pytest_jaxport.view.markdown import render_markdown

        view, options = self.view(), self.display()
        said = ci.append_step_summary(
            Path(target), lambda budget: render_markdown(view, options, budget=budget)
        )
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if said is not None and terminal is not None:
            terminal.write_line(said, yellow=True)

    def _annotate(self) -> None:
        """The findings as GitHub Actions annotations (``--jaxport-annotations``; all where
        ``GITHUB_ACTIONS=true``), printed once, by the controller (view/annotations.py)."""
        mode = self.settings.annotations or default_mode(os.environ)
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if mode == "off" or terminal is None or not (self.ledger.tests or self.audited):
            return
        found = self.view().alerts.in_repository(outside=installed_file)
        lines = annotation_lines(found, mode=mode)
        if lines:  # each at the start of its own line (after pytest's progress line)
            terminal.write_line("")
        for line in lines:
            terminal.write_line(line)


def _own_line(config: pytest.Config, terminal: pytest.TerminalReporter) -> None:
    """Start a line of our own: after ``-q``'s progress dots too, which pytest writes without
    ending their line (its ``ensure_newline`` knows only a file's progress line)."""
    terminal.ensure_newline()
    writer = config.get_terminal_writer()
    if writer.width_of_current_line:
        writer.line()
