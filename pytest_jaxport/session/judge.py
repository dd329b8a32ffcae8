"""The judge: each test's configuration, its checks against the budget, its failure text.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_jaxport.model.arithmetic import compute_capability, default_dot_format
from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.census import Classifier
from pytest_jaxport.model.chip_errors import chip_bounds
from pytest_jaxport.model.classification import Classification, Level, classify
from pytest_jaxport.model.config import ConfigError, Resolved
from pytest_jaxport.model.emulation import HOST
from pytest_jaxport.model.evaluation import evaluate
from pytest_jaxport.model.failure import failure_text
from pytest_jaxport.model.gpu import load_gpu_description
from pytest_jaxport.model.marker import merge_marks, parse_marker
from pytest_jaxport.model.platforms import DEFAULT_HOME
from pytest_jaxport.model.probe import emulated_status
from pytest_jaxport.model.validators import emulated_among
from pytest_jaxport.report import ci
from pytest_jaxport.report.entries import TestError
from pytest_jaxport.report.ledger import TestRecord
from pytest_jaxport.session.settings import SessionSettings
from pytest_jaxport.view.text import probe_text

if TYPE_CHECKING:
    from pytest_jaxport.fixture import Jaxport  # imports JAX: only where a check runs

MARKER = "portable"
JAXPORT = pytest.StashKey["Jaxport"]()
"""The test's ``jaxport`` fixture (:class:`~pytest_jaxport.fixture.Jaxport`), set by the
fixture: its probes are what the judge evaluates."""
RESOLVED = pytest.StashKey["Resolved | ConfigError"]()


def _mark_origin(node: object, item: pytest.Item) -> str:
    if node is item:
        return item.nodeid
    if isinstance(node, pytest.Module):
        return f"module {node.nodeid}"
    if isinstance(node, pytest.Class):
        return f"class {node.nodeid}"
    return str(getattr(node, "nodeid", node))


class Judge:
    """Per test: its configuration (``[tool.jaxport]`` < budget tables < the marker), its
    probes against the budget, the failure a user reads, and the record the report gets."""

    def __init__(self, config: pytest.Config, settings: SessionSettings) -> None:
        self.config = config
        self.project = settings.project
        self.compile_settings = settings.compile_settings
        self.ci = settings.ci
        self.cost_model = settings.cost_model
        self.reports = settings.report.requested
        """Whether ``--jaxport-report`` asks for a report (which wants measured shares)."""
        self._classifiers: dict[str, Classifier] = {}
        self.budget_failed: set[str] = set()
        """Tests shown as ``P`` in the progress line (failed by their budget alone)."""

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

    def classifier(self, level: Level = "lowered") -> Classifier:
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
            return compute_capability(load_gpu_description(self.project.gpu))
        except (ValueError, OSError):  # validated at configure: unreachable in practice
            return None

    def emulation_line(self) -> str | None:
        """``jaxport: emulating tpu (bfloat16 dots; bounds measured on TPU v5 lite), cuda
        (h100: tf32 dots) on cpu ...``."""
        emulate = self.project.emulate
        if emulate is None:
            return None
        parts = []
        for platform in emulate.value:
            fmt = default_dot_format(platform, cuda_capability=self.cuda_capability)
            dots = f"{fmt.name} dots" if fmt is not None else "float32 dots"
            bounds = chip_bounds(platform)
            if bounds is not None:
                dots += f"; bounds measured on {bounds.measurement.device}"
            parts.append(f"{platform} ({self.project.gpu}: {dots})" if platform == "cuda"
                         else f"{platform} ({dots})")  # fmt: skip
        return (
            f"jaxport: emulating {', '.join(parts)} on {HOST} where absent (emulate, set in "
            f"{emulate.origin})"
        )

    def wants_measured_share(self, resolved: Resolved) -> bool:
        """Profile executions only when a report or a share budget needs the numbers."""
        if self.reports:
            return True
        return any(
            budget.max_vendor_share is not None or budget.max_custom_share is not None
            for budget in map(resolved.budget, resolved.lowering_platforms())
        )

    def header_lines(self) -> list[str]:
        """What checks are judged by, for pytest's header (unwrapped): the platforms and
        where the budgets come from, the compiled level, the devices formats are judged for,
        the emulation."""
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
        # A leg narrower than pyproject (--jaxport-platforms) does not judge the budgets of
        # the platforms it leaves out: said, never silently green.
        lowered = self.project.lowered()
        unjudged = {
            table.origin: platform
            for platform, table in self.project.platform_budgets.items()
            if table.values and platform not in lowered
        }
        said = [
            f"{origin} (not judged in this run: {unjudged[origin]} is not lowered, "
            "--jaxport-platforms)" if origin in unjudged else origin
            for origin in sources
        ]  # fmt: skip
        lines = [
            f"jaxport: platforms {', '.join(self.project.platforms)} "
            f"(reference {self.project.reference}){must}; config from {self.project.source}; "
            f"budgets from {', '.join(said) if said else 'nowhere (no limits set)'}"
        ]
        if self.project.home != DEFAULT_HOME:  # said where it is not what reports assumed
            lines.append(
                f"jaxport: home {self.project.home} ([tool.jaxport] home): kernels to rewrite "
                f"and days priced moving off it, to {', '.join(self.project.migrate_to) or 'none'}"
            )
        if self.project.compile:
            where = ", ".join(self.project.compile)
            gpu = (
                f"; cuda without a GPU compiles deviceless against {self.project.gpu}"
                if "cuda" in self.project.compile
                else ""
            )
            if self.compile_settings.tpu_compiler is not None:
                gpu += (
                    f"; tpu compiles deviceless through libtpu {self.compile_settings.libtpu} "
                    f"for {self.compile_settings.devices['tpu']}, within "
                    f"{self.compile_settings.compile_time_limit:g} s a compile"
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
        return lines

    # -- each test ----------------------------------------------------------------------------

    def check_marker(self, item: pytest.Item) -> None:
        """Before a marked test runs: a bad marker fails it with the message, not a trace."""
        if item.get_closest_marker(MARKER) is not None:
            try:
                self.resolve(item)
            except ConfigError as e:
                raise pytest.fail.Exception(str(e), pytrace=False) from None

    def record(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> TestRecord | None:
        """The test's record for this phase of it (``None`` for a test that neither is
        marked nor checked anything); the call's is judged, and may fail the test."""
        marked = item.get_closest_marker(MARKER) is not None
        jaxport = item.stash.get(JAXPORT, None)
        if call.when == "call" and (marked or jaxport is not None):
            return self._judge(item, report, jaxport, marked=marked)
        if (marked or jaxport is not None) and (call.when == "setup" or report.failed):
            # A passed setup is recorded too, so a test whose xdist worker crashes during the
            # call is in the report (as crashed), never silently missing.
            record = TestRecord(nodeid=item.nodeid)
            if report.failed:
                record.error = self._error(report)
            return record
        return None

    def _judge(
        self, item: pytest.Item, report: pytest.TestReport, jaxport: Jaxport | None, *, marked: bool
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
                p, resolved.budget, migrate_to=self.project.migrate_to, model=self.cost_model,
                emulate_origin=emulate.origin if emulate is not None else "emulate",
                may_differ=resolved.may_differ(),
                home=self.project.home,
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
                compiled = result.compiled_formats
                if compiled is not None and compiled.tiled_bytes > 0:
                    properties.append(("compiled_padding_waste", round(compiled.padding_waste, 4)))
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
        jaxport: Jaxport | None,
        resolved: Resolved,
        violations: list[Violation],
    ) -> None:
        """Saved outputs and the baseline ratchet (:mod:`pytest_jaxport.report.ci`), then the
        test's failure: its budget violations and the counts that grew since the baseline,
        said one way (:func:`~pytest_jaxport.model.failure.failure_text`), and the outputs
        that could not be saved."""
        ci.record_tolerance(record.checks, resolved)
        problems = ci.save_check_outputs(
            self.ci, item.nodeid, record.checks, getattr(jaxport, "outputs", {}),
            getattr(jaxport, "emulated_outputs", {}),
        )  # fmt: skip
        record.outputs_errors = list(problems)
        probes = jaxport.probes if jaxport is not None else []
        grown, news = ci.baseline_findings(
            self.ci, item.nodeid, probes, memory_growth=self.project.memory_threshold
        )
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

    def teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        """A test failed by its portability budget (not by its own error) shows as ``P`` in
        the progress line; it still counts, and is summarised, as ``FAILED``."""
        record = getattr(report, "jaxport", None)
        if report.when != "call" or not report.failed or not isinstance(record, dict):
            return None
        if record.get("error") or not (record.get("violations") or record.get("baseline_growth")):
            return None
        self.budget_failed.add(report.nodeid)
        return "failed", "P", ("FAILED", {"red": True})
