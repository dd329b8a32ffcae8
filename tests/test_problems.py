"""The problems (``view.viewmodel.problems``): a compile that did not happen is one, in every
format, with the compiler's words at the line they name; the headline claims a compiled
level only where something compiled at it, and the platform totals do not mix levels
(issue 55, items 4 and 16). Typed reports of plain data, rendered by the real renderers.
"""

from __future__ import annotations

import json

from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.census import Census, Kernel, SourceLocation
from pytest_jaxport.model.counts import platform_counts
from pytest_jaxport.model.hotspots import hotspots, reaches_of_checks
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.report.document import Config, Environment, Report
from pytest_jaxport.report.entries import Check, TestEntry
from pytest_jaxport.report.summary import platform_totals
from pytest_jaxport.report.totals import Summary
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.html import render_html
from pytest_jaxport.view.markdown import render_markdown
from pytest_jaxport.view.sarif import render_sarif
from pytest_jaxport.view.text import render_text
from pytest_jaxport.view.viewmodel.build import build_view
from pytest_jaxport.view.viewmodel.reportview import ReportView

REFUSED = (
    "JaxRuntimeError: UNIMPLEMENTED: Only F32 and C64 types are implemented in "
    "LuDecomposition; got shape f64[64,64] (at src/model.py:35)"
)
NODE = "tests/test_model.py::test_solve"


def _census(platform: str, level: str, *kernels: tuple[str, str]) -> Census:
    return Census(
        platform=platform,
        level=level,
        kernels=tuple(
            Kernel(
                name=name,
                layer="vendor",
                library=library,
                kind="lu",
                location=SourceLocation(file="src/model.py", line=35),
            )
            for name, library in kernels
        ),
    )


def _probe(name: str, *, refused: bool) -> Probe:
    lowered = _census("tpu", "lowered", ("LuDecomposition", "libtpu"))
    compiled = None if refused else _census("tpu", "compiled", ("LuDecompositionBlock", "libtpu"))
    return Probe(
        name=name,
        reference="cpu",
        platforms={
            "cpu": PlatformProbe(
                platform="cpu",
                present=True,
                census=_census("cpu", "lowered", ("lapack_sgetrf_ffi", "lapack")),
            ),
            "tpu": PlatformProbe(
                platform="tpu",
                present=False,
                census=lowered,
                compiled=compiled,
                compile_error=REFUSED if refused else None,
                deviceless=True,
                target=None if refused else "v5e:1x1",
            ),
        },
    )


def _report(*probes: Probe, violations: tuple[Violation, ...] = ()) -> Report:
    checks = [(NODE, p) for p in probes]
    totals = platform_totals(platform_counts(probes), hotspots(reaches_of_checks(checks)))
    return Report(
        tool_version="9.9",
        environment=Environment(),
        config=Config(platforms=("cpu", "tpu"), reference="cpu", compile=("tpu",)),
        summary=Summary(
            tests=1,
            checks=len(probes),
            failed_tests=0,
            violations=len(violations),
            outcomes={"passed": 1},
            platforms=totals,
            hotspots=hotspots(reaches_of_checks(checks)),
        ),
        tests=(
            TestEntry(
                nodeid=NODE,
                outcome="failed" if violations else "passed",
                checks=tuple(Check(probe=p) for p in probes),
                violations=violations,
            ),
        ),
    )


def _row(view: ReportView, platform: str) -> dict[str, str]:
    """``platform``'s row of the platform totals, by column."""
    cells = next(c for p, c, _ in view.totals.rows if p == platform)
    return dict(zip(view.totals.headers, cells, strict=True))


def test_a_compile_that_did_not_happen_is_a_problem_in_every_format() -> None:
    view = build_view(_report(_probe("solve", refused=True)))
    [group] = view.problems
    assert group.title == "tpu: does not compile"
    assert group.problems[0].message == REFUSED
    options = DisplayOptions()
    text = render_text(view, options)
    assert "problems: 0 failed, 0 budget violations, 1 finding that fails no test" in text
    assert "tpu: does not compile — 1 check in 1 test" in text
    assert "Only F32 and C64 types" in text
    for page in (render_markdown(view, options), render_html(view, options)):
        assert "does not compile" in page
        assert "Only F32 and C64 types" in page
    # where reviewers look: at the line the compiler's words name
    [alert] = [a for a in view.alerts.in_repository() if a.rule == "does-not-compile"]
    assert (alert.file, alert.line, alert.level) == ("src/model.py", 35, "warning")
    sarif = json.dumps(render_sarif(view))
    assert '"ruleId": "does-not-compile"' in sarif


def test_the_headline_claims_a_compiled_level_only_where_something_compiled() -> None:
    none = build_view(_report(_probe("solve", refused=True))).headline
    assert none.level == (
        "level: lowered (StableHLO, no hardware needed); not compiled: tpu (none of 1 "
        "compiled: see problems)"
    )
    assert ("not compiled", "tpu (none of 1 compiled: see problems)") in none.facts
    assert not any(label == "compiled for" for label, _ in none.facts)
    some = build_view(_report(_probe("a", refused=True), _probe("b", refused=False))).headline
    assert some.level == ("levels: compiled for tpu (1 of 2: 1 did not compile); lowered elsewhere")
    every = build_view(_report(_probe("b", refused=False))).headline
    assert every.level == "levels: compiled for tpu; lowered elsewhere"


def test_a_must_lower_failure_is_said_once_not_again_as_a_finding() -> None:
    violation = Violation(
        check="solve", platform="tpu", key="must_lower", limit=("tpu",),
        origin="pyproject.toml [tool.jaxport.budget]", found="fails to compile",
        what="compile", level="compiled", details=(REFUSED,),
    )  # fmt: skip
    view = build_view(_report(_probe("solve", refused=True), violations=(violation,)))
    assert [g.title for g in view.problems] == ["tpu: must_lower"]
    assert not [a for a in view.alerts.found if a.rule == "does-not-compile"]


def test_a_platform_row_counts_one_level_and_says_what_did_not_compile() -> None:
    """Issue 55 item 16: one probe compiled, one refused. The tpu row counts the compiled
    program's routine only (not the refused one's lowered LuDecomposition), its sites add up
    to its calls, and what did not compile is said apart."""
    report = _report(_probe("a", refused=True), _probe("b", refused=False))
    tpu = report.summary.platforms["tpu"]
    assert (tpu.lowered, tpu.compiled, tpu.failed_to_compile) == (2, 1, 1)
    assert (tpu.vendor, dict(tpu.libraries), tpu.vendor_sites) == (1, {"libtpu": 1}, 1)
    sites = [h for h in report.summary.hotspots if h.platform == "tpu"]
    assert [h.name for h in sites] == ["LuDecompositionBlock"]
    assert sum(h.dispatches for h in sites) == tpu.vendor
    view = build_view(report)
    row = _row(view, "tpu")
    assert row["level"] == "compiled"
    assert view.totals.not_compiled.startswith("tpu: 1 check did not compile: not in the calls")
    assert "compiled: tpu 1 (1 failed)" in view.numbers_line()
    text = render_text(view, DisplayOptions(verbosity=1))
    assert "tpu: 1 check did not compile" in text
    # nothing compiled: no count at all, not its lowered census, not 0
    alone = build_view(_report(_probe("a", refused=True)))
    row = _row(alone, "tpu")
    assert (row["level"], row["vendor calls"], row["vendor sites"]) == ("not compiled", "—", "—")
