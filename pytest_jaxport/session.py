"""The plugin object: records each test, judges it, and at the end reports and sets the exit
status, for portable tests and for the suite audit alike (docs/architecture.md).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import time
import traceback
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_jaxport.cache import CompileSettings, judged_by
from pytest_jaxport.model.budget import Violation, evaluate, failure_text
from pytest_jaxport.model.config import (
    ConfigError,
    ProjectConfig,
    Resolved,
    emulated_among,
    merge_marks,
    parse_marker,
)
from pytest_jaxport.model.cost import CostModel, FormatItem, RewriteItem
from pytest_jaxport.model.emulation import HOST, compute_capability, default_dot_format
from pytest_jaxport.model.gpu import load_target
from pytest_jaxport.model.probe import emulated_status
from pytest_jaxport.model.targets import Classification, Level, classify
from pytest_jaxport.model.tooling import RULES, scan_tree, summarize
from pytest_jaxport.report import ci
from pytest_jaxport.report.audit import AuditRecord, failures, judge
from pytest_jaxport.report.baseline import BaselineMatch, match_baseline
from pytest_jaxport.report.ledger import Ledger, TestError, TestRecord
from pytest_jaxport.report.schema import (
    build_report,
    checks_of,
    environment,
    suite_numbers,
    write_json,
    write_text,
)
from pytest_jaxport.view.display import DisplayOptions, display_options
from pytest_jaxport.view.html import render_html
from pytest_jaxport.view.model import (
    ReportView,
    baseline_line,
    baseline_verdict,
    build_view,
    plural,
    stale_text,
)
from pytest_jaxport.view.text import (
    audit_failure_lines,
    probe_text,
    render_markdown,
    render_text,
    wrap,
)

if TYPE_CHECKING:
    from pytest_jaxport.audit import Recorder

MARKER = "portable"
VERBOSITY = "jaxport"
"""``config.get_verbosity(VERBOSITY)``: the ``verbosity_jaxport`` ini value, else ``-v``/``-q``."""
JAXPORT = pytest.StashKey["Any"]()
RESOLVED = pytest.StashKey["Resolved | ConfigError"]()
BASELINE_SHOWN = 3
"""Stale baseline entries the terminal names after the run (the report files name all)."""


def _mark_origin(node: object, item: pytest.Item) -> str:
    if node is item:
        return item.nodeid
    if isinstance(node, pytest.Module):
        return f"module {node.nodeid}"
    if isinstance(node, pytest.Class):
        return f"class {node.nodeid}"
    return str(getattr(node, "nodeid", node))


class JaxportSession:
    """Collects each test's record, judges tests against budgets, writes the report."""

    def __init__(
        self,
        config: pytest.Config,
        project: ProjectConfig,
        report: str | Sequence[str] | None,
        compile_settings: CompileSettings | None = None,
        ci_settings: ci.CISettings | None = None,
        audit: bool = False,
    ) -> None:
        self.config = config
        self.project = project
        targets = [report] if isinstance(report, str) else list(report or ())
        self.report_files: tuple[str, ...] = tuple(t for t in targets if t != "-")
        """Every ``--jaxport-report=PATH`` given, as given: each is written, by its suffix."""
        self.report_target: str | None = (self.report_files or ("-",))[0] if targets else None
        """``None`` without ``--jaxport-report``; ``-`` for the terminal only; else the first
        file (all of them: :attr:`report_files`)."""
        self.compile_settings = compile_settings or CompileSettings()
        self.ci = ci_settings or ci.CISettings()
        self.ledger = Ledger()
        self.audited = audit
        """Whether ``--jaxport-audit`` records every computation the tests run."""
        self.is_worker = hasattr(config, "workerinput")
        self.recorder: Recorder | None = None
        self._interception: dict[str, Any] | None = None
        self._sent_interception = False
        self._index: dict[str, int] = {}
        self._tooling: dict[str, Any] | None = None
        self._built: tuple[int, dict[str, Any]] | None = None
        self._view: tuple[dict[str, Any], ReportView] | None = None
        self._written: list[str] = []
        """The report files written this session, as given (for the terminal's one line)."""
        self._broken: str | None = None
        """The traceback of a failure of this plugin's own at the session's end (a bug here):
        said once in the terminal summary instead of the report, never in pytest's way."""
        self._classifiers: dict[str, Any] = {}
        self._judging: str | None = None
        self._budget_failed: set[str] = set()
        """Tests shown as ``P`` in the progress line (failed by their budget alone)."""
        self._outcomes: dict[str, str] = {}
        """With a baseline to compare: every test's outcome, portable or not (which of the
        baseline's entries this run could have matched)."""
        self._deselected: set[str] = set()
        """With a baseline to compare: the tests collected but not selected (from every
        pytest-xdist worker)."""
        self._match: BaselineMatch | None = None
        self.hook_errors: dict[str, str] = {}
        """Per jaxport hook a user's implementation of which raised at the end of the run,
        what it raised and where (said once; the report is built without it)."""

    # -- the audit's recorder ---------------------------------------------------------------

    def start(self) -> None:
        """Install the audit's hook where tests run (not on a pytest-xdist controller)."""
        controller = not self.is_worker and self.config.getoption("dist", "no") != "no"
        if not self.audited or controller:
            return
        from pytest_jaxport.audit import Recorder  # imports JAX: only for an audited run

        self.recorder = Recorder(
            platforms=self.project.platforms,
            classifier=self.classifier("lowered"),
            rootdir=self.config.rootpath,
            compile_settings=self.compile_settings,
            own_packages=self.project.own_packages,
            judging=self.judging,
            eager_users=self.project.audit.eager_users,
        )
        self._interception = self.recorder.start().to_dict()

    def judging(self) -> str | None:
        """What, besides its program, decides an audited computation's census
        (:func:`~pytest_jaxport.cache.judged_by`); ``None`` while a ``pytest_jaxport_classify``
        hook is registered (a conftest's code is not covered: nothing judged is kept or read)."""
        if self.config.hook.pytest_jaxport_classify.get_hookimpls():
            return None
        if self._judging is None:
            self._judging = judged_by(
                self.compile_settings,
                rootdir=self.config.rootpath,
                own_packages=self.project.own_packages,
            )
        return self._judging

    def stop(self) -> None:
        if self.recorder is not None:
            self.recorder.stop()
            self.recorder = None

    def _settle_worker(self) -> None:
        """An audited xdist worker ran its last test: unhook, collect the garbage, then freeze
        what is left (JAX's caches, grown by the lowerings for other platforms) out of the
        collector's way. This runs before the worker reports itself finished; after that,
        pytest-xdist gives it 5 seconds to exit before it interrupts it (SIGINT), and a full
        collection of that heap in every garbage-collector pass of its last steps could
        overrun them on a busy machine: a KeyboardInterrupt inside JAX's ``_xla_gc_callback``,
        printed as an unraisable-exception warning."""
        self.stop()
        gc.collect()  # (finalizers run now, as they would have at pytest's last collection)
        gc.freeze()

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
                emulate = cached.overrides.get("emulate")
                if emulate is not None:
                    emulated_among(
                        f"@pytest.mark.portable on {emulate.origin}: emulate",
                        emulate.value,
                        cached.platforms,
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
            hook = self.config.hook.pytest_jaxport_classify

            @functools.cache
            def classify_op(platform: str, op: str, target: str | None) -> Classification:
                __tracebackhide__ = True  # the user's hook error shows their conftest
                if hook.get_hookimpls():
                    found = hook(platform=platform, op=op, target=target, level=level)
                    if found is not None:
                        return found  # type: ignore[no-any-return]
                return classify(platform, op, target, level=level)

            self._classifiers[level] = classify_op
        return self._classifiers[level]

    @functools.cached_property
    def cuda_capability(self) -> tuple[int, int] | None:
        """The compute capability of the configured GPU (``[tool.jaxport] target``): what a
        cuda emulation rounds default-precision dots for."""
        try:
            return compute_capability(load_target(self.project.target))
        except (ValueError, OSError):  # validated at configure: unreachable in practice
            return None

    def emulation_line(self) -> str | None:
        """``jaxport: emulating tpu (bfloat16 dots), cuda (h100: tf32 dots) on cpu ...``."""
        emulate = self.project.emulate
        if emulate is None:
            return None
        parts = []
        for platform in emulate.value:
            fmt = default_dot_format(platform, cuda_capability=self.cuda_capability)
            dots = f"{fmt.name} dots" if fmt is not None else "float32 dots"
            parts.append(f"{platform} ({self.project.target}: {dots})" if platform == "cuda"
                         else f"{platform} ({dots})")  # fmt: skip
        return (
            f"jaxport: emulating {', '.join(parts)} on {HOST} where absent (emulate, set in "
            f"{emulate.origin})"
        )

    def wants_measured_share(self, resolved: Resolved) -> bool:
        """Profile executions only when a report or a share budget needs the numbers."""
        if self.report_target is not None:
            return True
        return any(
            budget.max_vendor_share is not None or budget.max_custom_share is not None
            for budget in map(resolved.budget, resolved.lowering_platforms())
        )

    def cost_model(self) -> CostModel:
        return CostModel(**self.project.cost)

    def price(self, item: RewriteItem | FormatItem) -> float | None:
        """A ``pytest_jaxport_rewrite_cost`` hook's days for ``item`` (a kernel or a
        formats-and-layout finding); ``None`` without one (or once the user's hook raised:
        said at the end, never a crash)."""
        hook = self.config.hook.pytest_jaxport_rewrite_cost
        if not hook.get_hookimpls() or "pytest_jaxport_rewrite_cost" in self.hook_errors:
            return None
        try:
            days = hook(item=item, target=item.target, model=self.cost_model())
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

    # -- pytest hooks: recording and judging ------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        sources = self.project.budget_sources()
        # must_lower is a gate: --jaxport-platforms narrows `platforms`, never the gate, so
        # the platforms it adds are said where the platforms are.
        added: dict[str, list[str]] = {}
        for platform, origin in self.project.resolve().added_by_must_lower().items():
            added.setdefault(origin, []).append(platform)
        must = "".join(
            f"; {', '.join(names)}: from must_lower ({origin}), checks lower for "
            f"{'it' if len(names) == 1 else 'them'} too"
            for origin, names in added.items()
        )
        lines = [
            f"jaxport: platforms {', '.join(self.project.platforms)} "
            f"(reference {self.project.reference}){must}; config from {self.project.source}; "
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
        judged = [
            f"{p} {self.compile_settings.devices[p]}"
            for p in self.project.resolve().lowering_platforms()
            if p != "cpu" and p in self.compile_settings.devices
        ]
        if judged:
            lines.append(f"jaxport: formats judged for: {', '.join(judged)}")
        emulating = self.emulation_line()
        if emulating is not None:
            lines.append(emulating)
        if self.audited:
            where = ", ".join(self.project.platforms)
            how = ""
            if self._interception is not None:
                hook = self._interception.get("adapter") or "compile events only"
                how = f" (jax {self._interception.get('jax')}, {hook})"
            lines.append(
                f"jaxport: audit on: recording every jitted computation{how}; lowering for {where}"
            )
        return [part for line in lines for part in wrap(line, hang="  ")]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._index = {item.nodeid: i for i, item in enumerate(session.items)}

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        """Tests ``-k``, ``-m``, ``--deselect`` or ``--lf`` left out: the baseline's entries
        of theirs are not run, never stale. A pytest-xdist worker sends them to the
        controller with its output (:meth:`pytest_testnodedown`)."""
        if self.ci.baseline is None:
            return
        ids = [item.nodeid for item in items]
        self._deselected.update(ids)
        if self.is_worker:
            output = self.config.workeroutput  # type: ignore[attr-defined]
            output.setdefault("jaxport_deselected", []).extend(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """pytest-xdist's controller: a worker finished; the tests it deselected."""
        output = getattr(node, "workeroutput", None) or {}
        self._deselected.update(output.get("jaxport_deselected", ()))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.recorder is not None:
            self.recorder.begin_test()

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
        record: TestRecord | None = None
        if call.when == "call" and (marked or jaxport is not None):
            record = self._judge(item, report, jaxport, marked=marked)
        elif (marked or jaxport is not None) and (call.when == "setup" or report.failed):
            # A passed setup is recorded too, so a test whose xdist worker crashes during the
            # call is in the report (as crashed), never silently missing.
            record = TestRecord(nodeid=item.nodeid)
            if report.failed:
                record.error = self._error(report)
        if call.when == "teardown" and self.recorder is not None:
            record = record or TestRecord(nodeid=item.nodeid)
            ended = self.recorder.end_test(item.nodeid, self._index.get(item.nodeid, -1))
            audit = cast(AuditRecord, dict(ended))
            if not self._sent_interception:
                audit["interception"] = self._interception
                self._sent_interception = True
            record.audit = audit
        if record is not None:
            report.jaxport = record.to_dict()  # type: ignore[attr-defined]
        return report

    def _judge(
        self, item: pytest.Item, report: pytest.TestReport, jaxport: Any, *, marked: bool
    ) -> TestRecord:
        probes = list(jaxport.probes) if jaxport is not None else []
        record = TestRecord(nodeid=item.nodeid, checks=[p.to_dict() for p in probes])
        if report.failed:  # the test's own failure: recorded with its error, never blank
            record.error = self._error(report)
        if jaxport is not None:
            if self.project.compile:
                record.compile = jaxport.compile_stats.to_dict()
            record.lowered_cache = jaxport.lowered_stats.to_dict()
        if report.outcome == "skipped":
            return record
        try:
            resolved = self.resolve(item)
        except ConfigError:
            return record  # already failed by pytest_runtest_call with the message
        if not probes:
            if marked and report.passed:
                message = (
                    f"{item.nodeid} is marked portable but checked no function: call "
                    "jaxport.check(fn, *args) with the `jaxport` fixture, or remove the mark"
                )
                report.outcome = "failed"
                report.longrepr = message
                record.error = TestError(message=message, when="call")
            return record
        emulate = resolved.emulate()
        violations = [
            v
            for p in probes
            for v in evaluate(
                p, resolved.budget, migrate_to=self.project.migrate_to, model=self.cost_model(),
                emulate_origin=emulate.origin if emulate is not None else "emulate",
            )
        ]  # fmt: skip
        record.violations = [v.to_dict() for v in violations]
        for probe in probes:
            for platform, result in probe.platforms.items():
                census = result.budgeted
                prefix = f"jaxport.{probe.name}.{platform}"
                properties: list[tuple[str, object]] = []
                if census is not None:
                    properties += [("vendor", census.vendor), ("custom", census.custom),
                                   ("level", census.level)]  # fmt: skip
                if census is not None and result.formats is not None:
                    properties += [
                        ("format_findings", result.formats.count("format")),
                        ("padding_waste", round(result.formats.padding_waste, 4)),
                    ]
                emulated = emulated_status(result)
                if emulated is not None:
                    properties.append(("emulated", emulated))
                for key, value in properties:
                    # junitxml reads the teardown report's properties, copied from the item.
                    item.user_properties.append((f"{prefix}.{key}", value))
                    report.user_properties.append((f"{prefix}.{key}", value))
        report.sections.append(("jaxport", "\n\n".join(probe_text(p) for p in probes)))
        self._judge_ci(item, report, record, jaxport, resolved, violations)
        return record

    def _judge_ci(
        self,
        item: pytest.Item,
        report: pytest.TestReport,
        record: TestRecord,
        jaxport: Any,
        resolved: Resolved,
        violations: list[Violation],
    ) -> None:
        """Saved outputs and the baseline ratchet (:mod:`pytest_jaxport.report.ci`), then the
        test's failure: its budget violations and the counts that grew since the baseline,
        said one way (:func:`~pytest_jaxport.model.budget.failure_text`), and the outputs
        that could not be saved."""
        ci.record_tolerance(record.checks, resolved)
        problems = ci.save_check_outputs(
            self.ci, item.nodeid, record.checks, getattr(jaxport, "outputs", {}),
            getattr(jaxport, "emulated_outputs", {}),
        )  # fmt: skip
        record.outputs_errors = list(problems)
        grown, news = ci.baseline_findings(self.ci, item.nodeid, record.checks)
        if news:
            report.sections.append(("jaxport baseline", "\n".join(news)))
            record.baseline_news = news
        if grown:
            record.baseline_growth = [v.headline() for v in grown]
        found = [*violations, *grown]
        if not (found or problems):
            return
        # The first line is what pytest's short summary shows: the first finding itself.
        said = "\n".join(([failure_text(found, item.nodeid)] if found else []) + problems)
        if report.passed:
            report.outcome = "failed"
            report.longrepr = said
        else:
            report.sections.append(("jaxport violations" if found else "jaxport outputs", said))

    def _error(self, report: pytest.TestReport) -> TestError:
        """Why a test failed, for the report: the exception's line and where it was raised."""
        crash = getattr(report.longrepr, "reprcrash", None)
        message = getattr(crash, "message", None) or str(report.longrepr or "")
        return TestError(message=message, where=self._where(report), when=report.when)

    def _where(self, report: pytest.TestReport) -> str | None:
        """The project's line the failure went through last (``tests/test_m.py:12``): where
        it was raised, or, when that is inside an installed library (numpy's assertions), the
        deepest frame of the project's own code; never a virtual env's absolute path."""
        longrepr = report.longrepr
        crash = getattr(longrepr, "reprcrash", None)
        entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", None) or ()
        places = [(getattr(crash, "path", None), getattr(crash, "lineno", None))]
        for entry in reversed(entries):
            location = getattr(entry, "reprfileloc", None)
            places.append((getattr(location, "path", None), getattr(location, "lineno", None)))
        root = self.config.rootpath
        for path, line in places:
            if not path or line is None:
                continue
            found = Path(path)
            if not found.is_absolute():
                found = Path(self.config.invocation_params.dir) / found
            if not found.is_relative_to(root):
                continue
            shown = found.relative_to(root)
            if {"site-packages", "dist-packages"} & set(shown.parts):
                continue  # a virtual env inside the project
            return f"{shown.as_posix()}:{line}"
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
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

    def _ran(self, report: pytest.TestReport) -> None:
        """Every test's outcome (its call's; ``skipped`` or ``error`` from its setup, or from
        a crashed worker), for the baseline's match."""
        if report.when == "call":
            self._outcomes[report.nodeid] = report.outcome
        elif not report.passed and (report.when == "setup" or report.nodeid not in self._outcomes):
            self._outcomes[report.nodeid] = "skipped" if report.skipped else "error"

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
        self._budget_failed.add(report.nodeid)
        return "failed", "P", ("FAILED", {"red": True})

    # -- the report ---------------------------------------------------------------------------

    def build(self) -> dict[str, Any]:
        """The session's report (built once for the terminal, the files and the baseline)."""
        if self._built is None or self._built[0] != self.ledger.revision:
            self._built = (self.ledger.revision, self._build())
        return self._built[1]

    def _build(self) -> dict[str, Any]:
        tests = self.ledger.tests.values()
        jax_loaded = self.audited or any(t["checks"] for t in tests)
        present: tuple[str, ...] = ()
        versions: dict[str, str] = {}
        kinds: dict[str, str] = {}
        if jax_loaded:
            from pytest_jaxport._jax import lowering  # JAX is loaded already: checks ran

            present, versions = lowering.present_platforms(), lowering.versions()
            kinds = {p: lowering.device_kind(p) for p in present}
        report = build_report(
            tests,
            config={
                "source": self.project.source,
                "platforms": list(self.project.platforms),
                "reference": self.project.reference,
                "compile": list(self.project.compile),
                "target": self.project.target if "cuda" in self.project.compile else None,
                "devices": {
                    p: {"generation": d.generation, "name": d.name}
                    for p, d in sorted(self.compile_settings.devices.items())
                    if p != "cpu"  # every leg of a merge judges the same devices
                },
                "budget": ci.budget_table(self.project),
                "tolerance": ci.tolerance_table(self.project),
                **ci.emulate_entry(self.project),
            },
            environment={**environment(present, versions), **ci.leg_facts(tests, kinds)},
        )
        report["config"]["migrate_to"] = list(self.project.migrate_to)
        report["summary"].update(self.numbers(report["tests"]))
        if self.ci.baseline is not None:
            self._match = self.baseline_match(report["tests"])
            report["baseline"] = self._match.to_dict()
        if self.audited:
            report["audit"] = self.audit_section()
        return report

    def baseline_match(self, tests: Sequence[Mapping[str, Any]]) -> BaselineMatch:
        """How the baseline's entries met this run's tests (:func:`match_baseline`): the
        files asked for in part (``t.py::test_a``) are where an entry not run is not stale."""
        assert self.ci.baseline is not None
        root, here = self.config.rootpath, Path(self.config.invocation_params.dir)
        partial = set()
        for arg in self.config.args:
            path, within, _ = arg.partition("::")
            full = (here / path).resolve()
            if within and full.is_relative_to(root):
                partial.add(full.relative_to(root).as_posix())
        return match_baseline(
            self.ci.baseline, tests, file=self.ci.baseline_name, outcomes=self._outcomes,
            deselected=self._deselected, partial_files=partial,
            exists=lambda file: (root / file).exists(), strict=self.ci.baseline_strict,
        )  # fmt: skip

    def audit_section(self) -> dict[str, Any]:
        """The report's ``audit`` section, judged against ``[tool.jaxport.audit] fail_on``
        and the baseline."""
        model = self.cost_model()
        section = self.ledger.audit.section(
            interception=self._interception or self.ledger.interception,
            platforms=self.project.platforms,
            migrate_to=self.project.migrate_to,
            model=model,
            eager_users=self.project.audit.eager_users,
            price=self.price,
        )
        base = self.ci.baseline.get("audit") if self.ci.baseline is not None else None
        section.update(ci.fail_on_entry(self.project))  # what it was judged against
        return judge(
            section,
            budget_for=self.project.audit_budget,
            migrate_to=self.project.migrate_to,
            model=model,
            baseline=base if isinstance(base, dict) and not self.ci.baseline_update else None,
        )

    def tooling_scan(self) -> dict[str, Any] | None:
        """The NVIDIA-bound tooling scan of the project, once per session (controller)."""
        if not self.project.scan:
            return None
        if self._tooling is None:
            try:
                extra = [r for rules in self.config.hook.pytest_jaxport_tooling_rules(
                    config=self.config) for r in rules]  # fmt: skip
            except Exception as e:  # the user's hook: said at the end, never a crash
                self._hook_raised("pytest_jaxport_tooling_rules", e)
                extra = []
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

    def numbers(self, tests: list[dict[str, Any]]) -> dict[str, Any]:
        """The three numbers for the summary."""
        model = self.cost_model()
        numbers = suite_numbers(
            checks_of(tests),
            migrate_to=self.project.migrate_to,
            model=model,
            tooling=self.tooling_scan(),
            price=self.price,
        )
        numbers["cost_model"] = dataclasses.asdict(model)
        if "tooling" in numbers:  # after the cost model, as reports always had it
            numbers["tooling"] = numbers.pop("tooling")
        return numbers

    def view(self) -> ReportView:
        """The report's view, built once for the terminal, the files and the step summary."""
        report = self.build()
        if self._view is None or self._view[0] is not report:
            self._view = (report, build_view(report))
        return self._view[1]

    def display(self) -> DisplayOptions:
        """The display options (``--jaxport-report-*``, pytest's and jaxport's verbosity)."""
        get_verbosity = getattr(self.config, "get_verbosity", None)
        verbosity = (
            get_verbosity(VERBOSITY) if get_verbosity is not None else self.config.option.verbose
        )
        return display_options(
            self.config.getoption, dest_prefix="jaxport_report_", verbosity=int(verbosity)
        )

    # -- the end of the session: the gate, the files, the terminal --------------------------

    def problems(self) -> list[str]:
        """Suite-level failures (not any test's): each makes the session fail."""
        found = []
        setting = self.project.resolve().budget("cpu").max_tooling_assumptions
        tooling = self.tooling_scan() if setting is not None else None
        count = len(tooling["assumptions"]) if tooling else 0
        if setting is not None and count > setting.value:
            lines = [
                f"jaxport: {count} NVIDIA-bound tooling assumptions > {setting.value} "
                f"(max_tooling_assumptions, set in {setting.origin})"
            ]
            for a in (tooling or {}).get("assumptions", []):
                lines.append(f"    {a['file']}:{a['line']}: {a['rule']}: {a['reason']}")
            found.append("\n".join(lines))
        return found

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            if self.recorder is not None:
                self._settle_worker()
            return
        try:
            self._finish(session)
        except Exception:  # a bug of this plugin's: pytest still reports the tests
            self._broken = traceback.format_exc()
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _finish(self, session: pytest.Session) -> None:
        """The controller's end of the session: the audit's gate, the baseline, the problems
        and the report files."""
        failed = self.audited and failures(self.build()["audit"]) > 0
        failed = self._update_baseline() or failed
        if self.ci.baseline is not None:
            self.build()
            failed = failed or (self._match is not None and self._match.fails)
        if self.report_target is not None:
            self.build()  # runs the user's cost and tooling hooks, once
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        for problem in (*self.hook_problems(), *self.problems()):
            failed = True
            if terminal is not None:
                terminal.write_line(problem, red=True)
        failed = self._write_reports() or failed
        if failed:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _update_baseline(self) -> bool:
        """``--jaxport-baseline-update``: write it; whether that failed."""
        if not self.ci.baseline_update:
            return False
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        try:
            written = ci.write_baseline(self.ci, self.build())
        except OSError as e:
            if terminal is not None:
                terminal.write_line(f"jaxport: could not write the baseline: {e}", red=True)
            return True
        if terminal is not None and written is not None:
            terminal.ensure_newline()
            terminal.write_line(f"jaxport: baseline written to {written}")
        return False

    def _write_reports(self) -> bool:
        """Each ``--jaxport-report=PATH`` in the format its suffix names, its folder created
        as pytest does for ``--junitxml`` (and the step summary); whether one failed."""
        failed = False
        for target in self.report_files:
            path = Path(self.config.invocation_params.dir) / target
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.suffix == ".md":
                    write_text(path, render_markdown(self.view(), self.display()))
                elif path.suffix == ".html":
                    write_text(path, render_html(self.view(), self.display()))
                else:
                    write_json(path, self.build())
            except OSError as e:
                terminal = self.config.pluginmanager.get_plugin("terminalreporter")
                if terminal is not None:
                    terminal.write_line(
                        f"jaxport: could not write the report {path}: {e}", red=True
                    )
                failed = True
                continue
            self._written.append(target)
        if self._written:
            self._step_summary()
        return failed

    def _step_summary(self) -> None:
        """Append the Markdown report to ``$GITHUB_STEP_SUMMARY``, within its size limit."""
        target = os.environ.get("GITHUB_STEP_SUMMARY")
        if not target:
            return
        view, options = self.view(), self.display()
        said = ci.append_step_summary(
            Path(target), lambda budget: render_markdown(view, options, budget=budget)
        )
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if said is not None and terminal is not None:
            terminal.write_line(said, yellow=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
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
        if self._budget_failed:  # the letter is ours: say what it means
            terminalreporter.write_line(
                f"jaxport: P in the progress line is a test its portability budget failed "
                f"({plural(len(self._budget_failed), 'test')}; counted as failed)"
            )
        if self.report_target is not None:
            written = ", ".join(self._written) or None
            terminalreporter.write_sep("=", "jaxport portability report")
            terminalreporter.write_line(render_text(self.view(), self.display(),
                                                    written_to=written))  # fmt: skip
            if written is not None:
                terminalreporter.write_line(f"jaxport: full report written to {written}")
        if not self.audited:
            return
        if self.report_target is None:  # the audit's view: the one --jaxport-report prints
            terminalreporter.write_sep("=", "jaxport audit")
            terminalreporter.write_line(render_text(self.view(), self.display()))
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
        lines = audit_failure_lines(self.view())
        if lines:
            terminalreporter.write_line(lines[0], red=True, bold=True)
            for line in lines[1:]:
                terminalreporter.write_line(line, red=True)

    def _baseline_summary(self, terminal: Any) -> None:
        """How the baseline met the run, after every run that compared one; a baseline
        that matched no test is a warning, under ``--jaxport-baseline-strict`` a failure."""
        match = self._match
        if match is None:
            return
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
