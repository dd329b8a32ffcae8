"""The session's writer (``pytest_jaxport/session/writer.py``): the report is built where
something reads it, and only there; files written, and what a run says when one cannot be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.model import tooling
from pytest_jaxport.model.tooling import ToolingScan
from pytest_jaxport.report import build
from pytest_jaxport.report.document import Report
from pytest_jaxport.report.files import load

DOCKERFILE = "FROM nvidia/cuda:12.3.1-runtime-ubuntu22.04\n"
"""A line the tooling scan finds (``cuda-image``)."""


def test_a_run_nothing_reads_builds_no_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a report, an audit, a baseline or a hook of the user's, nothing reads the
    report: it is not built, and the project's files are not scanned (a scan of a large tree
    costs seconds). With ``--jaxport-report`` it is built, and scanned, once."""
    scans: list[Path] = []
    scan_tree = tooling.scan_tree  # the writer imports it where it scans

    def counted(root: Path, **kwargs: object) -> ToolingScan:
        scans.append(root)
        return scan_tree(root, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tooling, "scan_tree", counted)
    pytester.makefile("", Dockerfile=DOCKERFILE)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert scans == []
    result = pytester.runpytest("-p", "no:cacheprovider", "--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    assert scans == [pytester.path]
    assert '"rule": "cuda-image"' in (pytester.path / "r.json").read_text()


def test_a_users_tooling_hook_runs_and_is_said_without_a_report(
    pytester: pytest.Pytester,
) -> None:
    """A tooling hook of the user's runs in every session, as before the report was built
    only where read: when it raises, the run says so and fails, report or not."""
    pytester.makeconftest(
        """
        def pytest_jaxport_tooling_rules(config):
            raise ValueError("no rules today")
        """
    )
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "jaxport: your pytest_jaxport_tooling_rules hook raised ValueError: no rules today "
            "at conftest.py:2; the tooling scan used the built-in rules only"
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


ONE_CHECK = """
import jax.numpy as jnp


def test_sin(jaxport):
    jaxport.check(jnp.sin, jnp.ones(3))
"""
"""A suite of one check: what each reader of the report below reads."""

READERS = {
    "json": ("--jaxport-report=r.json",),
    "markdown": ("--jaxport-report=r.md",),
    "html": ("--jaxport-report=r.html",),
    "sarif": ("--jaxport-report=r.sarif",),
    "code quality": ("--jaxport-report=r.codequality.json",),
    "baseline update": ("--jaxport-baseline=b.json", "--jaxport-baseline-update"),
}
"""Each reader of the report alone in its run: a report file of each format, the baseline."""


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each report the session's writer builds, counted (the real build, run)."""
    built: list[int] = []
    build_report = build.build_report  # the writer imports it where it builds

    def counted(*args: Any, **kwargs: Any) -> Report:
        built.append(len(built))
        return build_report(*args, **kwargs)

    monkeypatch.setattr(build, "build_report", counted)
    return built


@pytest.mark.slow
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_of_the_report_still_gets_it(
    pytester: pytest.Pytester, builds: list[int], reader: str
) -> None:
    """The report is built at the session's end only where something reads it: each reader
    alone in its run still gets the whole report, built once, and says the test's check."""
    pytester.makepyfile(test_readers=ONE_CHECK)
    result = pytester.runpytest("-p", "no:cacheprovider", *READERS[reader])
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert len(builds) == 1
    if reader == "baseline update":
        result.stdout.fnmatch_lines(["jaxport: baseline written to *b.json"])
        tests = json.loads((pytester.path / "b.json").read_text())["tests"]
        assert list(tests) == ["test_readers.py::test_sin"]
        return
    [target] = [a.partition("=")[2] for a in READERS[reader]]
    result.stdout.fnmatch_lines(
        ["*jaxport portability report*", f"jaxport: full report written to {target}"]
    )
    written = (pytester.path / target).read_text()
    if reader == "json":
        tests = load(pytester.path / target).tests
        assert [(t.nodeid, [c.name for c in t.checks]) for t in tests] == [
            ("test_readers.py::test_sin", ["sin"])
        ]
    elif reader in ("markdown", "html"):
        assert "1 check" in written, written[:2000]
    else:  # a file of findings: valid JSON, this run's
        json.loads(written)


@pytest.mark.slow
def test_a_baseline_compared_alone_is_still_matched(
    pytester: pytest.Pytester, builds: list[int]
) -> None:
    """A run whose only reader is the baseline it compares against builds the report, and
    says how the baseline met the run; the run nothing reads builds none."""
    pytester.makepyfile(test_readers=ONE_CHECK)
    update = ("--jaxport-baseline=b.json", "--jaxport-baseline-update")
    pytester.runpytest("-p", "no:cacheprovider", *update).assert_outcomes(passed=1)
    assert len(builds) == 1
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert len(builds) == 1
    result = pytester.runpytest("-p", "no:cacheprovider", "--jaxport-baseline=b.json")
    result.assert_outcomes(passed=1)
    assert len(builds) == 2
    result.stdout.fnmatch_lines(["jaxport: baseline b.json: 1 test compared*"])


CHECKED = """
import jax.numpy as jnp
import pytest


@pytest.mark.portable
def test_doubled(jaxport):
    jaxport.check(lambda x: x * 2, jnp.ones(3))
"""


@pytest.mark.parametrize("quiet", [True, False])
def test_a_report_that_cannot_be_written_fails_the_run_and_says_so_on_its_own_line(
    pytester: pytest.Pytester, quiet: bool
) -> None:
    """Issue 55, item 12: ``--jaxport-report=/proc/r.json`` glued its error onto -q's
    progress line, and the last line said "1 passed" while the exit status was 1."""
    pytester.makepyfile(test_doubled=CHECKED)
    (pytester.path / "blocker").write_text("a file where a folder is needed")
    args = ["-p", "no:randomly", "--jaxport-report=blocker/r.json", "--jaxport-report=r.json"]
    result = pytester.runpytest(*(["-q"] if quiet else []), *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = result.stdout.lines
    [said] = [line for line in lines if "could not write the report" in line]
    assert said.startswith("jaxport: could not write the report "), said
    assert "blocker" in said
    result.stdout.fnmatch_lines(["*1 passed, 1 jaxport report not written in *"])
    assert (pytester.path / "r.json").is_file()  # the others are written
