"""The plugin object: per-test records, pass/fail by budget, report and summary.

Per-test data travels on the test report as a plain dict (``report.jaxport``), so under
pytest-xdist workers send it to the controller, which alone writes files and the summary.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jaxport.cache import CompileSettings
from pytest_jaxport.ci import CISettings
from pytest_jaxport.config import (
    ConfigError,
    ProjectConfig,
    Resolved,
    merge_marks,
    parse_marker,
)
from pytest_jaxport.targets import Classification, Level, classify

if TYPE_CHECKING:
    from pytest_jaxport.audit_session import AuditSession
    from pytest_jaxport.cost import CostModel
    from pytest_jaxport.display import DisplayOptions
    from pytest_jaxport.view import ReportView

MARKER = "portable"
VERBOSITY = "jaxport"
"""``config.get_verbosity(VERBOSITY)``: the ``verbosity_jaxport`` ini value, else ``-v``/``-q``."""
RECORD_KEYS = (
    "checks", "violations", "error", "outputs_errors", "baseline_growth", "baseline_news",
)  # fmt: skip
"""A test record's keys that the call phase's record sets (on the controller, too)."""
ERROR_LIMIT = 500
"""Characters of a failed test's error kept in the report."""
JAXPORT = pytest.StashKey["Any"]()
RESOLVED = pytest.StashKey["Resolved | ConfigError"]()


def _mark_origin(node: object, item: pytest.Item) -> str:
    if node is item:
        return item.nodeid
    if isinstance(node, pytest.Module):
        return f"module {node.nodeid}"
    if isinstance(node, pytest.Class):
        return f"class {node.nodeid}"
    return str(getattr(node, "nodeid", node))


class JaxportSession:
    """Collects probes, judges tests against budgets and writes the report."""

    def __init__(
        self,
        config: pytest.Config,
        project: ProjectConfig,
        report: str | None,
        compile_settings: CompileSettings | None = None,
    ) -> None:
        self.config = config
        self.project = project
        self.report_target = report
        self.compile_settings = compile_settings or CompileSettings()
        self.tests: dict[str, dict[str, Any]] = {}
        self.is_worker = hasattr(config, "workerinput")
        self._tooling: dict[str, Any] | None = None
        self._revision = 0
        """Bumped whenever a test's record changes; ``build`` reuses its report until then."""
        self._built: tuple[int, dict[str, Any]] | None = None
        self._view: tuple[dict[str, Any], ReportView] | None = None
        self._written: str | None = None
        """The report file written this session, as given (for the terminal's one line)."""
        self._classifiers: dict[str, Any] = {}
        self.compile_stats: dict[str, int] = {"hits": 0, "misses": 0, "compiled": 0, "reused": 0}
        self.lowered_stats: dict[str, int] = {"hits": 0, "misses": 0}
        self.ci = CISettings()
        """--jaxport-save-outputs and --jaxport-baseline (plugin.py sets them)."""
        self.audit: AuditSession | None = None
        """The suite audit, when ``--jaxport-audit`` is on (plugin.py sets it)."""

    # -- configuration per test -----------------------------------------------------------

    def resolve(self, item: pytest.Item) -> Resolved:
        """The configuration for ``item`` (raises ConfigError for a bad marker)."""
        cached = item.stash.get(RESOLVED, None)
        if cached is None:
            try:
                marks = [
                    (origin, parse_marker(mark.args, mark.kwargs, origin))
                    for node, mark in item.iter_markers_with_node(MARKER)
                    for origin in [_mark_origin(node, item)]
                ]
                cached = self.project.resolve(merge_marks(marks))
                if cached.reference not in cached.platforms:
                    raise ConfigError(
                        f"{item.nodeid}: reference platform {cached.reference!r} is not among "
                        f"the platforms {list(cached.platforms)}"
                    )
            except ConfigError as e:
                cached = e
            item.stash[RESOLVED] = cached
        if isinstance(cached, ConfigError):
            raise cached
        return cached

    def classifier(self, level: Level = "lowered") -> Any:
        """``(platform, op, target) -> Classification`` at ``level``: the hook, then the table.

        One per session and level, so each distinct op is classified once per run, not once
        per test (conftest hooks are all registered by the time tests run).
        """
        if level not in self._classifiers:
            self._classifiers[level] = self._new_classifier(level)
        return self._classifiers[level]

    def _new_classifier(self, level: Level) -> Any:
        hook = self.config.hook.pytest_jaxport_classify

        @functools.cache
        def classify_op(platform: str, op: str, target: str | None) -> Classification:
            if hook.get_hookimpls():
                found = hook(platform=platform, op=op, target=target, level=level)
                if found is not None:
                    return found  # type: ignore[no-any-return]
            return classify(platform, op, target, level=level)

        return classify_op

    def wants_measured_share(self, resolved: Resolved) -> bool:
        """Profile executions only when a report or a share budget needs the numbers."""
        if self.report_target is not None:
            return True
        return any(
            budget.max_vendor_share is not None or budget.max_custom_share is not None
            for budget in map(resolved.budget, resolved.lowering_platforms())
        )

    # -- pytest hooks -----------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        sources = self.project.budget_sources()
        lines = [
            f"jaxport: platforms {', '.join(self.project.platforms)} "
            f"(reference {self.project.reference}); config from {self.project.source}; "
            f"budgets from {', '.join(sources) if sources else 'nowhere (no limits set)'}"
        ]
        if self.project.compile:
            where = ", ".join(self.project.compile)
            gpu = (
                f"; cuda without a GPU compiles deviceless against {self.project.target}"
                if "cuda" in self.project.compile
                else ""
            )
            cache = (
                "cached in pytest's cache"
                if self.compile_settings.cache is not None
                else "not cached (cacheprovider disabled)"
            )
            lines.append(f"jaxport: compiled level for {where}{gpu}; {cache}")
        from pytest_jaxport.render import wrap  # (not at import: the plugin stays light)

        return [part for line in lines for part in wrap(line, hang="  ")]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if item.get_closest_marker(MARKER) is not None:
            try:
                self.resolve(item)
            except ConfigError as e:
                raise pytest.fail.Exception(str(e), pytrace=False) from None
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        marked = item.get_closest_marker(MARKER) is not None
        jaxport = item.stash.get(JAXPORT, None)
        if not marked and jaxport is None:
            return report
        if call.when != "call":
            # A passed setup is recorded too, so a test whose xdist worker crashes during the
            # call is in the report (as crashed), never silently missing.
            if (report.outcome != "passed" and marked) or call.when == "setup":
                record: dict[str, Any] = {"nodeid": item.nodeid, "checks": [], "violations": []}
                if report.failed:
                    record["error"] = self._error(report)
                report.jaxport = record  # type: ignore[attr-defined]
            return report
        self._judge(item, report, jaxport, marked=marked)
        return report

    def _judge(
        self, item: pytest.Item, report: pytest.TestReport, jaxport: Any, *, marked: bool
    ) -> None:
        from pytest_jaxport.budget import evaluate
        from pytest_jaxport.render import probe_text

        probes = list(jaxport.probes) if jaxport is not None else []
        record: dict[str, Any] = {
            "nodeid": item.nodeid,
            "checks": [p.to_dict() for p in probes],
            "violations": [],
        }
        report.jaxport = record  # type: ignore[attr-defined]
        if report.failed:  # the test's own failure: recorded with its error, never blank
            record["error"] = self._error(report)
        if jaxport is not None and self.project.compile:
            record["compile"] = jaxport.compile_stats.to_dict()
        if jaxport is not None:
            record["lowered_cache"] = jaxport.lowered_stats.to_dict()
        if report.outcome == "skipped":
            return
        try:
            resolved = self.resolve(item)
        except ConfigError:
            return  # already failed by pytest_runtest_call with the message
        if not probes:
            if marked and report.passed:
                message = (
                    f"{item.nodeid} is marked portable but checked no function: call "
                    "jaxport.check(fn, *args) with the `jaxport` fixture, or remove the mark"
                )
                report.outcome = "failed"
                report.longrepr = message
                record["error"] = {"message": message, "where": None, "when": "call"}
            return
        violations = [
            v
            for p in probes
            for v in evaluate(
                p, resolved.budget, migrate_to=self.project.migrate_to, model=self.cost_model()
            )
        ]
        record["violations"] = [v.to_dict() for v in violations]
        for probe in probes:
            for platform, result in probe.platforms.items():
                census = result.budgeted
                if census is not None:
                    prefix = f"jaxport.{probe.name}.{platform}"
                    for key, value in (
                        ("vendor", census.vendor),
                        ("custom", census.custom),
                        ("level", census.level),
                    ):
                        # junitxml reads the teardown report's properties, copied from the item.
                        item.user_properties.append((f"{prefix}.{key}", value))
                        report.user_properties.append((f"{prefix}.{key}", value))
        details = "\n\n".join(probe_text(p) for p in probes)
        report.sections.append(("jaxport", details))
        said = None
        if violations:
            # The first line is what pytest's short summary shows: the first headline itself.
            said = "\n".join(v.long_repr() for v in violations)
            if len(violations) > 1:
                said += f"\n({len(violations)} portability budget violations in {item.nodeid})"
            if report.passed:
                report.outcome = "failed"
                report.longrepr = said
            else:
                report.sections.append(("jaxport violations", said))
        self._judge_ci(item, report, record, jaxport, resolved, said)

    def _judge_ci(
        self,
        item: pytest.Item,
        report: pytest.TestReport,
        record: dict[str, Any],
        jaxport: Any,
        resolved: Resolved,
        message: str | None,
    ) -> None:
        """Saved outputs and the baseline ratchet: see :mod:`pytest_jaxport.ci`."""
        from pytest_jaxport import ci

        ci.record_tolerance(record, resolved)
        problems = ci.save_check_outputs(
            self.ci, item.nodeid, record["checks"], getattr(jaxport, "outputs", {})
        )
        grew, news = ci.baseline_findings(self.ci, item.nodeid, record["checks"])
        if news:
            report.sections.append(("jaxport baseline", "\n".join(news)))
            record["baseline_news"] = news
        if problems:
            record["outputs_errors"] = problems
        problems += grew
        if not problems:
            return
        if grew:
            record["baseline_growth"] = grew
        found = "\n".join(
            ([f"{item.nodeid}: {len(grew)} count(s) grew since the baseline "
              f"{self.ci.baseline_path}"] if grew else [])
            + problems
        )  # fmt: skip
        if report.passed:
            report.outcome = "failed"
            report.longrepr = f"{message}\n{found}" if message else found
        report.sections.append(("jaxport baseline" if grew else "jaxport outputs", found))

    def _error(self, report: pytest.TestReport) -> dict[str, Any]:
        """Why a test failed, for the report: the exception's line and where it was raised."""
        crash = getattr(report.longrepr, "reprcrash", None)
        message = getattr(crash, "message", None) or str(report.longrepr or "")
        where = None
        if crash is not None and getattr(crash, "path", None):
            path = Path(crash.path)
            if path.is_relative_to(self.config.rootpath):
                path = path.relative_to(self.config.rootpath)
            where = f"{path.as_posix()}:{crash.lineno}"
        return {"message": message[:ERROR_LIMIT], "where": where, "when": report.when}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._revision += 1
        data = getattr(report, "jaxport", None)
        if data is None:
            self._record_crash(report)
            return
        entry = self.tests.setdefault(
            report.nodeid,
            {"nodeid": report.nodeid, "outcome": "passed", "checks": [], "violations": []},
        )
        if report.when == "call":
            for key, value in data.get("compile", {}).items():
                self.compile_stats[key] = self.compile_stats.get(key, 0) + int(value)
            for key, value in data.get("lowered_cache", {}).items():
                self.lowered_stats[key] = self.lowered_stats.get(key, 0) + int(value)
            for key in RECORD_KEYS:
                if key in data:
                    entry[key] = data[key]
        if data.get("error") and not entry.get("error"):
            entry["error"] = data["error"]
        if report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"

    def _record_crash(self, report: pytest.TestReport) -> None:
        """A failed report without jaxport data for a portable test: its worker crashed.

        pytest-xdist reports a crashed worker's running test with a synthetic failed report
        (``when="???"``, no keywords); the test is known here from its setup report.
        """
        known = report.nodeid in self.tests
        if not report.failed or not (known or MARKER in getattr(report, "keywords", {})):
            return
        entry = self.tests.setdefault(
            report.nodeid,
            {"nodeid": report.nodeid, "outcome": "error", "checks": [], "violations": []},
        )
        entry["outcome"] = "error"
        entry["crashed"] = True
        entry["error"] = {"message": str(report.longrepr)[:500], "where": None, "when": report.when}

    def _update_baseline(self, session: pytest.Session) -> None:
        from pytest_jaxport.ci import write_baseline

        if not self.ci.baseline_update:
            return
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        try:
            written = write_baseline(self.ci, self.build())
        except OSError as e:
            if terminal is not None:
                terminal.write_line(f"jaxport: could not write the baseline: {e}", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        if terminal is not None and written is not None:
            terminal.ensure_newline()
            terminal.write_line(f"jaxport: baseline written to {written}")

    def build(self) -> dict[str, Any]:
        """The session's report (built once for the terminal, the file and the baseline)."""
        if self._built is None or self._built[0] != self._revision:
            self._built = (self._revision, self._build())
        return self._built[1]

    def _build(self) -> dict[str, Any]:
        from pytest_jaxport import lowering
        from pytest_jaxport.ci import budget_table, leg_facts, tolerance_table
        from pytest_jaxport.report import build_report, environment

        jax_loaded = self.audit is not None or any(t["checks"] for t in self.tests.values())
        present = lowering.present_platforms() if jax_loaded else ()
        versions = lowering.versions() if jax_loaded else {}
        report = build_report(
            self.tests.values(),
            config={
                "source": self.project.source,
                "platforms": list(self.project.platforms),
                "reference": self.project.reference,
                "compile": list(self.project.compile),
                "target": self.project.target if "cuda" in self.project.compile else None,
                "budget": budget_table(self.project),
                "tolerance": tolerance_table(self.project),
            },
            environment={
                **environment(present, versions),
                **leg_facts(self.tests.values(), present),
            },
        )
        report["config"]["migrate_to"] = list(self.project.migrate_to)
        report["summary"].update(self.numbers(report["tests"], report["summary"]))
        if self.audit is not None:
            report["audit"] = self.audit.section()
        return report

    def cost_model(self) -> CostModel:
        from pytest_jaxport.cost import CostModel

        return CostModel(**self.project.cost)

    def tooling_scan(self) -> dict[str, Any] | None:
        """The NVIDIA-bound tooling scan of the project, once per session (controller)."""
        if not self.project.scan:
            return None
        if self._tooling is None:
            import time

            from pytest_jaxport.tooling import RULES, scan_tree, summarize

            extra = [r for rules in self.config.hook.pytest_jaxport_tooling_rules(
                config=self.config) for r in rules]  # fmt: skip
            started = time.perf_counter()
            found = scan_tree(
                self.config.rootpath, exclude=self.project.scan_exclude, rules=(*RULES, *extra)
            )
            self._tooling = {
                "assumptions": [a.to_dict() for a in found.assumptions],
                "by_rule": summarize(found.assumptions),
                "files_listed": found.files_listed,
                "files_read": found.files_read,
                "source": found.source,
                "seconds": round(time.perf_counter() - started, 3),
            }
        return self._tooling

    def numbers(self, tests: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
        """The three numbers for the summary."""
        from pytest_jaxport.report import suite_rewrite, suite_shares

        tooling = self.tooling_scan()
        model = self.cost_model()
        hook = self.config.hook.pytest_jaxport_rewrite_cost

        def price(item: Any) -> float | None:
            if not hook.get_hookimpls():
                return None
            days = hook(item=item, target=item.target, model=model)
            return None if days is None else float(days)

        estimates = suite_rewrite(
            tests,
            migrate_to=self.project.migrate_to,
            model=model,
            tooling_assumptions=len(tooling["assumptions"]) if tooling else 0,
            price=price,
        )
        numbers: dict[str, Any] = {
            "runtime_share": suite_shares(tests),
            "kernels_to_rewrite": {t: e.kernels_to_rewrite for t, e in estimates.items()},
            "rewrite_days": {t: e.days for t, e in estimates.items()},
            "rewrite": {t: e.to_dict() for t, e in estimates.items()},
            "cost_model": dataclasses.asdict(model),
        }
        if tooling is not None:
            numbers["tooling"] = tooling
        return numbers

    def tooling_violation(self) -> str | None:
        setting = self.project.resolve().budget("cpu").max_tooling_assumptions
        if setting is None:
            return None
        tooling = self.tooling_scan()
        found = len(tooling["assumptions"]) if tooling else 0
        if found <= setting.value:
            return None
        lines = [
            f"jaxport: {found} NVIDIA-bound tooling assumptions > {setting.value} "
            f"(max_tooling_assumptions, set in {setting.origin})"
        ]
        for a in (tooling or {}).get("assumptions", []):
            lines.append(f"    {a['file']}:{a['line']}: {a['rule']}: {a['reason']}")
        return "\n".join(lines)

    def compile_summary(self) -> str | None:
        """``jaxport: compiled cache 3 hits, 0 misses (...)``, when anything was compiled."""
        stats = self.compile_stats
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
        stats = self.lowered_stats
        if self.compile_settings.lowered_cache is None or not (stats["hits"] or stats["misses"]):
            return None
        return (
            f"jaxport: lowered cache {stats['hits']} hits, {stats['misses']} misses "
            "(platforms not present here)"
        )

    def display(self) -> DisplayOptions:
        """The display options (``--jaxport-report-*``, pytest's and jaxport's verbosity)."""
        from pytest_jaxport.display import display_options

        get_verbosity = getattr(self.config, "get_verbosity", None)
        verbosity = (
            get_verbosity(VERBOSITY) if get_verbosity is not None else self.config.option.verbose
        )
        return display_options(
            self.config.getoption, dest_prefix="jaxport_report_", verbosity=int(verbosity)
        )

    def view(self) -> ReportView:
        """The report's view, built once for the terminal, the file and the step summary."""
        from pytest_jaxport.view import build_view

        report = self.build()
        if self._view is None or self._view[0] is not report:
            self._view = (report, build_view(report))
        return self._view[1]

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        """A test failed by its portability budget (not by its own error) shows as ``P`` in
        the progress line; it still counts, and is summarised, as ``FAILED``."""
        record = getattr(report, "jaxport", None)
        if report.when != "call" or not report.failed or not isinstance(record, dict):
            return None
        if record.get("error") or not (record.get("violations") or record.get("baseline_growth")):
            return None
        return "failed", "P", ("FAILED", {"red": True})

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        for line in (self.lowered_summary(), self.compile_summary()):
            if line is not None:
                terminalreporter.write_line(line)
        if self.report_target is None:
            return
        from pytest_jaxport.render import render_text

        written = self._written if self.report_target != "-" else None
        terminalreporter.write_sep("=", "jaxport portability report")
        terminalreporter.write_line(render_text(self.view(), self.display(), written_to=written))
        if written is not None:
            terminalreporter.write_line(f"jaxport: full report written to {written}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            return
        self._update_baseline(session)
        problem = self.tooling_violation()
        if problem is not None:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_line(problem, red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if not self.report_target or self.report_target == "-":
            return
        from pytest_jaxport.report import write_json, write_text

        path = Path(self.report_target)
        if not path.is_absolute():
            path = Path(self.config.invocation_params.dir) / path
        report = self.build()
        try:
            if path.suffix == ".md":
                from pytest_jaxport.render import render_markdown

                write_text(path, render_markdown(self.view(), self.display()))
            elif path.suffix == ".html":
                from pytest_jaxport.html_report import render_html

                write_text(path, render_html(self.view(), self.display()))
            else:
                write_json(path, report)
        except OSError as e:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_line(f"jaxport: could not write the report {path}: {e}", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        self._written = str(self.report_target)
        self._step_summary()

    def _step_summary(self) -> None:
        """Append the Markdown report to ``$GITHUB_STEP_SUMMARY``, within its size limit."""
        target = os.environ.get("GITHUB_STEP_SUMMARY")
        if not target:
            return
        from pytest_jaxport.ci import append_step_summary
        from pytest_jaxport.render import render_markdown

        view, options = self.view(), self.display()
        said = append_step_summary(
            Path(target), lambda budget: render_markdown(view, options, budget=budget)
        )
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if said is not None and terminal is not None:
            terminal.write_line(said, yellow=True)
