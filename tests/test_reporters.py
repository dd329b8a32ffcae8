"""Tests of pytest_jaxport.view.reporters.

The report's file formats are one table (``view.reporters.REPORTERS``): the plugin writes
each suffix it names with its reporter, and refuses any other suffix by that table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_jaxport.plugin import REPORT_SUFFIXES
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.reporters import REPORTERS, reporter_for
from pytest_jaxport.view.viewmodel.reportview import ReportView

SMALL_SUITE = """
import jax.numpy as jnp
import pytest

@pytest.mark.portable
def test_small(jaxport):
    jaxport.check(lambda x: x * 2.0, jnp.ones(3))
"""


class _Data:
    """A source whose report is plain data; a reporter of the data never builds the view."""

    def build(self) -> dict[str, object]:
        return {"schema_version": 0, "summary": {"checks": 0}}

    def view(self) -> ReportView:
        raise AssertionError("the JSON reporter writes the data, not the view")

    def display(self) -> DisplayOptions:
        raise AssertionError("the JSON reporter writes the data, not the view")


def test_the_plugin_accepts_exactly_the_suffixes_of_the_table() -> None:
    assert tuple(REPORTERS) == REPORT_SUFFIXES
    assert REPORT_SUFFIXES == (".json", ".md", ".html", ".sarif", ".codequality.json")


@pytest.mark.parametrize("suffix", list(REPORTERS))
def test_each_suffix_picks_its_reporter(suffix: str) -> None:
    assert reporter_for(Path(f"out/report{suffix}")) is REPORTERS[suffix]


def test_the_json_reporter_writes_the_data_compact(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    reporter_for(path)(path, _Data())
    assert path.read_text(encoding="utf-8") == '{"schema_version": 0, "summary": {"checks": 0}}\n'


def test_an_unknown_suffix_has_no_reporter_and_is_named() -> None:
    with pytest.raises(KeyError, match=r"suffix '\.txt', expected \.json or \.md or \.html"):
        reporter_for(Path("report.txt"))
    with pytest.raises(KeyError, match=r"suffix '\(none\)'"):
        reporter_for(Path("report"))


def test_the_plugin_writes_every_format_and_refuses_another_by_name(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_small=SMALL_SUITE)
    result = pytester.runpytest("--jaxport-report=r.json", "--jaxport-report=r.md",
                                "--jaxport-report=r.html")  # fmt: skip
    result.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "r.json").read_text())["summary"]["checks"] == 1
    assert (pytester.path / "r.md").read_text().startswith("## pytest-jaxport")
    assert (pytester.path / "r.html").read_text().startswith("<!DOCTYPE html>")
    result.stdout.fnmatch_lines(["jaxport: full report written to r.json, r.md, r.html"])
    result = pytester.runpytest("--jaxport-report=r.xml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*r.xml*expected a path ending in .json, .md, .html, "
                                 ".sarif or .codequality.json, found suffix '.xml'"])  # fmt: skip
    assert not (pytester.path / "r.xml").exists()
