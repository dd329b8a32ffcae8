"""The plugin object: per-test records, pass/fail by budget, report and summary.

Per-test data travels on the test report as a plain dict (``report.jaxport``), so under
pytest-xdist workers send it to the controller, which alone writes files and the summary.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.cache import CompileSettings
from pytest_jaxport.config import (
    ConfigError,
    ProjectConfig,
    Resolved,
    merge_marks,
    parse_marker,
)
from pytest_jaxport.targets import Classification, Level, classify

MARKER = "portable"
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
        self.compile_stats: dict[str, int] = {"hits": 0, "misses": 0, "compiled": 0, "reused": 0}

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
        """``(platform, op, target) -> Classification`` at ``level``: the hook, then the table."""
        hook = self.config.hook.pytest_jaxport_classify

        @functools.cache
        def classify_op(platform: str, op: str, target: str | None) -> Classification:
            if hook.get_hookimpls():
                found = hook(platform=platform, op=op, target=target, level=level)
                if found is not None:
                    return found  # type: ignore[no-any-return]
            return classify(platform, op, target, level=level)

        return classify_op

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
        return lines

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
            if report.outcome != "passed" and marked:
                report.jaxport = {"nodeid": item.nodeid, "checks": [], "violations": []}  # type: ignore[attr-defined]
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
        if jaxport is not None and self.project.compile:
            record["compile"] = jaxport.compile_stats.to_dict()
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
                record["message"] = message
            return
        violations = [v for p in probes for v in evaluate(p, resolved.budget)]
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
        if violations:
            message = "\n".join(
                [f"{item.nodeid}: {len(violations)} portability budget violation(s)"]
                + [v.long_repr() for v in violations]
            )
            record["message"] = message
            if report.passed:
                report.outcome = "failed"
                report.longrepr = message
            else:
                report.sections.append(("jaxport violations", message))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "jaxport", None)
        if data is None:
            return
        entry = self.tests.setdefault(
            report.nodeid,
            {"nodeid": report.nodeid, "outcome": "passed", "checks": [], "violations": []},
        )
        if report.when == "call":
            for key, value in data.get("compile", {}).items():
                self.compile_stats[key] = self.compile_stats.get(key, 0) + int(value)
            entry["checks"] = data["checks"]
            entry["violations"] = data["violations"]
            if data.get("message"):
                entry["message"] = data["message"]
        if report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"

    def build(self) -> dict[str, Any]:
        from pytest_jaxport import lowering
        from pytest_jaxport.report import build_report, environment

        jax_loaded = any(t["checks"] for t in self.tests.values())
        present = lowering.present_platforms() if jax_loaded else ()
        versions = lowering.versions() if jax_loaded else {}
        return build_report(
            self.tests.values(),
            config={
                "source": self.project.source,
                "platforms": list(self.project.platforms),
                "reference": self.project.reference,
                "compile": list(self.project.compile),
                "target": self.project.target if "cuda" in self.project.compile else None,
            },
            environment=environment(present, versions),
        )

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

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        line = self.compile_summary()
        if line is not None:
            terminalreporter.write_line(line)
        if self.report_target is None:
            return
        from pytest_jaxport.render import text

        terminalreporter.write_sep("=", "jaxport portability report")
        terminalreporter.write_line(text(self.build()))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker or not self.report_target or self.report_target == "-":
            return
        from pytest_jaxport.render import markdown
        from pytest_jaxport.report import write_json, write_text

        path = Path(self.report_target)
        if not path.is_absolute():
            path = Path(self.config.invocation_params.dir) / path
        report = self.build()
        try:
            if path.suffix == ".md":
                write_text(path, markdown(report))
            else:
                write_json(path, report)
        except OSError as e:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            if terminal is not None:
                terminal.write_line(f"jaxport: could not write the report {path}: {e}", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            with open(step_summary, "a", encoding="utf-8") as f:
                f.write(markdown(report))
