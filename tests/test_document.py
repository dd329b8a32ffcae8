"""Tests of pytest_jaxport.report.document and report.reader.

The typed report (issue 40): a recorded report reads back as the JSON it is, and a wrong
field anywhere is refused at load, naming the file and its place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.report import Report, ReportError, load

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


def _set(report: dict[str, Any], place: list[str | int], value: object) -> None:
    inner: Any = report
    for key in place[:-1]:
        inner = inner[key]
    inner[place[-1]] = value


CHECK: list[str | int] = ["tests", 3, "checks", 0]
CUDA: list[str | int] = [*CHECK, "platforms", "cuda", "lowered"]
LEG = {"leg": 5, "platforms": [], "present_platforms": [], "environment": {}}

CORRUPTED = [  # (section, where in the demo's report, the value put there, the message's place)
    ("environment", ["environment", "present_platforms"], "cpu",
     'environment.present_platforms: expected a list of strings, found "cpu"'),
    ("config", ["config", "reference"], 3, "config.reference: expected a string, found 3"),
    ("summary", ["summary", "platforms", "cuda", "vendor"], "three",
     'summary.platforms.cuda.vendor: expected an integer, found "three"'),
    ("hotspots", ["summary", "hotspots", 0, "tests"], None,
     "summary.hotspots[0].tests: expected an integer, found null"),
    ("outcome", ["tests", 3, "outcome"], "maybe",
     'tests[3].outcome: expected one of passed, failed, error, skipped, found "maybe"'),
    ("checks", [*CHECK, "name"], None, "tests[3].checks[0].name: expected a string, found null"),
    ("census", [*CUDA, "vendor"], "three",
     'tests[3].checks[0].platforms.cuda.lowered.vendor: expected an integer, found "three"'),
    ("kernels", [*CUDA, "kernels", 0, "count"], "2",
     'tests[3].checks[0].platforms.cuda.lowered.kernels[0].count: expected an integer, '
     'found "2"'),
    ("findings", [*CUDA, "formats", "findings", 0, "rule"], 7,
     "tests[3].checks[0].platforms.cuda.lowered.formats.findings[0].rule: expected a string, "
     "found 7"),
    ("violations", ["tests", 2, "violations", 0, "what"], 1,
     "tests[2].violations[0].what: expected a string, found 1"),
    ("numbers", ["summary", "rewrite", "rocm", "days"], "ten",
     'summary.rewrite.rocm.days: expected a number, found "ten"'),
    ("runtime share", ["summary", "runtime_share", "cuda", "seconds"], [],
     "summary.runtime_share.cuda.seconds: expected a number, found []"),
    ("audit", ["audit", "seen", "calls"], "x", 'audit.seen.calls: expected an integer, found "x"'),
    ("audit computation", ["audit", "computations", 0, "platforms", "cpu", "lowered", "meta"],
     1.5, "audit.computations[0].platforms.cpu.lowered.meta: expected an integer, found 1.5"),
    ("merge", ["legs"], [LEG], "legs[0].leg: expected a string, found 5"),
    ("baseline", ["baseline"], {"file": "b.json", "stale": [{"nodeid": 1}]},
     "baseline.stale[0].nodeid: expected a string, found 1"),
    ("baseline why", ["baseline"], {"file": "b.json", "stale": [{"nodeid": "t.py::a",
                                                                  "why": "lost"}]},
     'baseline.stale[0].why: expected one of removed, file-gone, checks-nothing, check-gone, '
     'found "lost"'),
    ("missing", ["tests", 3], {"outcome": "passed"},
     "tests[3].nodeid: missing (expected a string)"),
]  # fmt: skip


@pytest.mark.parametrize(("section", "place", "value", "said"), CORRUPTED,
                         ids=[c[0] for c in CORRUPTED])  # fmt: skip
def test_a_wrong_field_in_any_section_is_refused_by_its_place(
    section: str,
    place: list[str | int],
    value: object,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_jaxport.cli import main

    report = recorded("demo")
    _set(report, place, value)
    path = written(tmp_path, report)
    with pytest.raises(ReportError) as refused:
        load(path)
    assert str(refused.value) == f"{path}: {said}"
    for command in (["show", str(path)], ["merge", str(path), "-o", str(tmp_path / "m.json")],
                    ["diff", str(path), str(path)]):  # fmt: skip
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err == f"jaxport {command[0]}: {path}: {said}\n", command


def test_a_baseline_given_for_a_report_is_said_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_jaxport.cli import main
    from pytest_jaxport.report.files import baseline_given

    report = written(tmp_path, recorded("suite"))
    baseline = tmp_path / "b.json"
    assert main(["baseline", str(report), "-o", str(baseline)]) == 0
    capsys.readouterr()
    for command in (["show", str(baseline)], ["merge", str(baseline), "-o", "m.json"]):
        assert main(command) == 2
        assert capsys.readouterr().err == f"jaxport {command[0]}: {baseline_given(baseline)}\n"
