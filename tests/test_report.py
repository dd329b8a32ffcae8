"""Report round trips, atomic writes, loading refusals, the CLI, xdist parity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_jaxport.budget import evaluate
from pytest_jaxport.census import Census, Kernel, SourceLocation
from pytest_jaxport.cli import main
from pytest_jaxport.config import merge_marks, parse_marker, parse_project
from pytest_jaxport.report import (
    SCHEMA_VERSION,
    PlatformProbe,
    Probe,
    ReportError,
    build_report,
    load,
    write_json,
)

KERNEL = Kernel(
    layer="custom",
    name="__gpu$xla.gpu.triton",
    kind="pallas-triton",
    location=SourceLocation(file="src/k.py", line=12),
    count=2,
)


def probe() -> Probe:
    cuda = Census(
        platform="cuda",
        kernels=(
            KERNEL,
            Kernel(layer="vendor", name="stablehlo.dot_general", kind="gemm", library="cublas"),
        ),
        xla_ops=7,
    )
    return Probe(
        name="attention",
        reference="cpu",
        platforms={
            "cpu": PlatformProbe(platform="cpu", present=True, census=Census(platform="cpu"),
                                 executed=True),
            "cuda": PlatformProbe(platform="cuda", present=False, census=cuda),
            "tpu": PlatformProbe(platform="tpu", present=False, error="ValueError: no rule"),
        },
    )  # fmt: skip


def test_probe_round_trips_through_json() -> None:
    original = probe()
    again = Probe.from_dict(json.loads(json.dumps(original.to_dict())))
    assert again == original


def test_evaluate_names_key_origin_count_and_kernels() -> None:
    project = parse_project({"budget": {"max_custom_calls": 1}}, "pyproject.toml")
    marks = merge_marks([("t::x", parse_marker((), {"max_library_calls": {"cublas": 0}}, "t"))])
    violations = evaluate(probe(), project.resolve(marks).budget)
    assert [(v.platform, v.key, v.limit, v.found) for v in violations] == [
        ("cuda", "max_custom_calls", 1, 2),
        ("cuda", "max_library_calls.cublas", 0, 1),
    ]
    assert violations[0].long_repr() == (
        "check 'attention' on cuda: max_custom_calls = 1 (set in pyproject.toml "
        "[tool.jaxport.budget]), found 2 custom calls (lowered)\n"
        "    __gpu$xla.gpu.triton (pallas-triton) x2 at src/k.py:12"
    )
    assert violations[1].origin == "t::x"


def test_allow_targets_exempts_matching_kernels() -> None:
    project = parse_project(
        {"budget": {"max_custom_calls": 0, "allow_targets": ["__gpu$xla.gpu.*"]}}, "p"
    )
    assert evaluate(probe(), project.resolve().budget) == []


def test_must_lower_failure_is_a_violation() -> None:
    project = parse_project({"budget": {"must_lower": ["tpu"]}}, "p")
    [violation] = evaluate(probe(), project.resolve().budget)
    assert violation.key == "must_lower"
    assert "ValueError: no rule" in violation.long_repr()


def test_build_report_sorts_tests_and_sums() -> None:
    tests = [
        {"nodeid": "b", "outcome": "failed", "checks": [probe().to_dict()], "violations": [{}]},
        {"nodeid": "a", "outcome": "passed", "checks": [probe().to_dict()], "violations": []},
    ]
    report = build_report(tests, config={"platforms": []}, environment={})
    assert [t["nodeid"] for t in report["tests"]] == ["a", "b"]
    summary = report["summary"]
    assert summary["checks"] == 2
    assert summary["failed_tests"] == 1
    assert summary["platforms"]["cuda"] == {
        "vendor": 2, "custom": 4, "meta": 0, "xla": 14, "libraries": {"cublas": 2}, "lowered": 2,
        "failed_to_lower": 0,
    }  # fmt: skip
    assert summary["platforms"]["tpu"]["failed_to_lower"] == 2


def test_write_is_atomic_and_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    report = build_report([], config={}, environment={})
    write_json(path, report)
    assert load(path) == report
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema_version": 1, "tool": {"name": "pytest-jaxport"}, "tests": [', "not valid JSON"),
        ('{"coverage": 1}', "not a pytest-jaxport report"),
        ("[1, 2]", "not a pytest-jaxport report"),
        ('{"schema_version": 99, "tool": {"name": "pytest-jaxport"}}', "schema_version 99"),
    ],
)
def test_load_refuses_unusable_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ReportError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)


def test_cli_show_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    tests = [{"nodeid": "t.py::t", "outcome": "passed", "checks": [probe().to_dict()],
              "violations": []}]  # fmt: skip
    write_json(
        path,
        build_report(
            tests,
            config={"platforms": ["cpu", "cuda", "tpu"], "reference": "cpu"},
            environment={"present_platforms": ["cpu"]},
        ),
    )
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "cuda  vendor   1  custom   2  (cublas 1)  [lowered]  numerics: not present" in out
    assert "tpu   failed to lower: ValueError: no rule" in out
    assert main(["show", str(path), "--format", "md"]) == 0
    assert "| cuda | 1 | 2 | 1 | 0 | cublas 1 |" in capsys.readouterr().out
    assert main(["show", str(path), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>")
    assert "__gpu$xla.gpu.triton" in page
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err


def test_console_script_is_installed(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest_jaxport.cli", "show", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "no such file" in result.stderr
    assert "Traceback" not in result.stderr


def test_schema_version_constant() -> None:
    assert SCHEMA_VERSION == 1
