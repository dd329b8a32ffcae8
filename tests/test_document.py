"""The typed report (issue 40): a recorded report reads back as the JSON it is, and a wrong
field anywhere is refused at load, naming the file and its place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.report import Report, ReportError, load  # noqa: F401

REPORTS = Path(__file__).parent / "data" / "reports"
RECORDED = ("demo", "suite", "audit")


def recorded(name: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((REPORTS / f"{name}.json").read_text())["report"]
    return report


def written(tmp_path: Path, report: dict[str, Any], name: str = "r.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return path


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_report_reads_back_as_the_json_it_is(name: str, tmp_path: Path) -> None:
    report = recorded(name)
    loaded = load(written(tmp_path, report))
    assert isinstance(loaded, Report)
    assert loaded.to_dict() == report
    # The same keys in the same order: what the plugin writes is what it wrote before. (The
    # recordings' zeroed times are integers; a report's own are floats, written as such.)
    assert json.dumps(loaded.to_dict()).replace(".0,", ",").replace(".0}", "}") == json.dumps(
        report
    ).replace(".0,", ",").replace(".0}", "}")


def test_a_report_written_again_reads_back_the_same(tmp_path: Path) -> None:
    once = load(written(tmp_path, recorded("demo"))).to_dict()
    assert load(written(tmp_path, once, "again.json")).to_dict() == once
