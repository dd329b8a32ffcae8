"""Tests of pytest_jaxport.report.files, report.build, report.upgrade and cli.

Report round trips, atomic writes, loading refusals, the CLI, xdist parity."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import built_report

from pytest_jaxport.cli import main
from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.census import Census, Kernel, SourceLocation
from pytest_jaxport.model.compare import Leaf, Outputs, compare
from pytest_jaxport.model.evaluation import evaluate
from pytest_jaxport.model.marker import merge_marks, parse_marker
from pytest_jaxport.model.numerics import EXACT_ORIGIN
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.model.pyproject import parse_project
from pytest_jaxport.report.document import SCHEMA_VERSION
from pytest_jaxport.report.errors import ReportError
from pytest_jaxport.report.files import load, write_json

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
    # The finding first: pytest's one-line short summary shows it even at 80 columns.
    assert violations[0].long_repr() == (
        "cuda: 2 custom calls > 1 (max_custom_calls, set in pyproject.toml "
        "[tool.jaxport.budget]); check 'attention', lowered\n"
        "    __gpu$xla.gpu.triton (pallas-triton) x2 at src/k.py:12"
    )
    assert violations[1].headline().startswith("cuda: 1 cublas call > 0 (max_library_calls.")
    assert violations[1].origin == "t::x"


def numerics_violation(
    tolerance: dict[str, Any], marker: dict[str, Any], cuda: list[Any], dtype: str = "float32"
) -> Violation:
    """The numerics violation of cuda's outputs ``cuda`` against cpu's ``[1, 2]`` (both
    ``dtype``), under ``[tool.jaxport.tolerance]`` ``tolerance`` and the test's marker
    keywords ``marker``, through the report's JSON."""
    project = parse_project({"tolerance": tolerance}, "pyproject.toml")
    resolved = project.resolve(merge_marks([("t.py::test_f", parse_marker((), marker, "t"))]))

    def outputs(values: list[Any]) -> Outputs:
        return Outputs(
            structure="PyTreeDef(*)", leaves=(Leaf(path="", array=np.array(values, dtype)),)
        )

    comparison = compare(
        outputs([1, 2]), outputs(cuda), reference_platform="cpu", platform="cuda",
        tolerance=lambda name: resolved.tolerance_for("cuda", name),
    )  # fmt: skip
    found = Probe(
        name="f",
        reference="cpu",
        platforms={
            "cpu": PlatformProbe(platform="cpu", present=True, executed=True,
                                 census=Census(platform="cpu")),
            "cuda": PlatformProbe(platform="cuda", present=True, executed=True,
                                  census=Census(platform="cuda"), numerics=comparison),
        },
    )  # fmt: skip
    [violation] = evaluate(
        Probe.from_dict(json.loads(json.dumps(found.to_dict()))), resolved.budget
    )
    return Violation.from_dict(json.loads(json.dumps(violation.to_dict())))


@pytest.mark.parametrize(
    ("tolerance", "marker", "cuda", "origin"),
    [
        ({"float32": {"rtol": 1e-4, "atol": 1e-4}}, {}, [1, 2.1],
         "pyproject.toml [tool.jaxport.tolerance.float32]"),
        ({"float32": {"rtol": 1e-4, "atol": 1e-4}, "cuda": {"float32": {"rtol": 1e-5, "atol": 0}}},
         {}, [1, 2.1], "pyproject.toml [tool.jaxport.tolerance.cuda.float32]"),
        ({"float32": {"atol": 1e-4}, "cuda": {"float32": {"rtol": 1e-5}}}, {}, [1, 2.1],
         "pyproject.toml [tool.jaxport.tolerance.cuda.float32] (rtol) and pyproject.toml "
         "[tool.jaxport.tolerance.float32] (atol)"),
        ({"float32": {"rtol": 1e-4, "atol": 1e-4}}, {"rtol": 1e-3}, [1, 2.1],
         "@pytest.mark.portable on t.py::test_f (rtol) and pyproject.toml "
         "[tool.jaxport.tolerance.float32] (atol)"),
        ({}, {"rtol": 1e-3, "atol": 1e-3}, [1, 2.1], "@pytest.mark.portable on t.py::test_f"),
        ({"float32": {"rtol": 1e-4}}, {}, [1, 2.1],
         "pyproject.toml [tool.jaxport.tolerance.float32] (rtol) and JAX's float32 default (atol)"),
        ({"float32": {"rtol": 1e-4}}, {}, [1, 2, 3], EXACT_ORIGIN),  # a shape: no tolerance
    ],
)  # fmt: skip
def test_a_numerics_failure_names_the_tolerance_that_applied(
    tolerance: dict[str, Any], marker: dict[str, Any], cuda: list[Any], origin: str
) -> None:
    violation = numerics_violation(tolerance, marker, cuda)
    assert violation.origin == origin
    # the worst error where values were compared (2.1 against 2); none for a shape mismatch
    worst = " (largest abs err 1.0e-01, largest rel err 5.0e-02)" if len(cuda) == 2 else ""
    assert violation.headline() == (
        f"cuda: 1 differing leaf{worst}, expected to match cpu (numerics, tolerance from "
        f"{origin}); check 'f', executed"
    )


def test_an_unconfigured_dtype_names_jaxs_default() -> None:
    violation = numerics_violation({"float32": {"rtol": 1e-9}}, {}, [1, 3], dtype="int32")
    assert violation.rule() == "numerics, tolerance from JAX's int32 default"


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
        {"nodeid": "b", "outcome": "failed", "checks": [probe().to_dict()], "violations": []},
        {"nodeid": "a", "outcome": "passed", "checks": [probe().to_dict()], "violations": []},
    ]
    built = built_report(tests, config={"platforms": [], "reference": "cpu"}, environment={})
    assert [t.nodeid for t in built.tests] == ["a", "b"]
    report = built.to_dict()
    summary = report["summary"]
    assert summary["checks"] == 2
    assert summary["failed_tests"] == 1
    # Calls are summed over checks; the same two kernels in both tests are two distinct sites.
    assert summary["platforms"]["cuda"] == {
        "vendor": 2, "custom": 4, "meta": 0, "xla": 14, "libraries": {"cublas": 2}, "lowered": 2,
        "failed_to_lower": 0, "vendor_sites": 1, "custom_sites": 1,
    }  # fmt: skip
    assert summary["outcomes"] == {"failed": 1, "passed": 1}
    sites = {h["layer"]: h for h in summary["hotspots"] if h["platform"] == "cuda"}
    custom, vendor = sites["custom"], sites["vendor"]
    reach = (custom["location"], custom["checks"], custom["tests"], custom["dispatches"])
    assert reach == ("src/k.py:12", 2, 2, 4)
    assert (vendor["layer"], vendor["library"], vendor["dispatches"]) == ("vendor", "cublas", 2)
    assert summary["platforms"]["tpu"]["failed_to_lower"] == 2


def test_the_report_is_built_typed_from_the_records_never_through_its_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ledger reads each worker's record once; the tests, the summary, the three numbers
    and the audit section are built as typed values: no part of the report is asked for its
    JSON form while it is built, and the report built is the one its file reads back."""
    from pytest_jaxport.model.cost import CostModel
    from pytest_jaxport.model.runtime_share import RuntimeShare
    from pytest_jaxport.report import audit_section, document, entries, totals
    from pytest_jaxport.report.audit_ledger import AuditSettings
    from pytest_jaxport.report.build import build_report
    from pytest_jaxport.report.files import from_json
    from pytest_jaxport.report.ledger import Ledger, TestRecord
    from pytest_jaxport.report.summary import Pricing

    share = RuntimeShare(basis="measured", seconds=0.25, layers={"xla": 0.75, "vendor": 0.25},
                         libraries={"lapack": 0.25})  # fmt: skip
    measured = Probe(name="solve", reference="cpu", platforms={
        **probe().platforms,
        "cpu": PlatformProbe(platform="cpu", present=True, census=Census(platform="cpu"),
                             executed=True, runtime_share=share),
    })  # fmt: skip
    ledger = Ledger()
    for nodeid, checked in (("t.py::b", probe()), ("t.py::a", measured)):
        record = TestRecord(nodeid=nodeid, checks=[checked.to_dict()])
        ledger.add(TestRecord.from_dict(record.to_dict()), when="call", failed=False,
                   skipped=False)  # fmt: skip
    computation = {"id": "c0ffee", "function": "solve", "source": "t.py:3", "kind": "jit",
                   "signature": ["f32[3]"], "shardings": [], "static_arguments": None,
                   "donated": [], "mesh": None, "host_callbacks": [], "partitions": 1,
                   "platforms": measured.to_dict()["platforms"], "findings": []}  # fmt: skip
    ledger.audit.add({"nodeid": "t.py::a", "index": 0, "uses": ["c0ffee"], "outside": [],
                      "computations": [computation], "calls": 1, "compiled_outside": 0,
                      "errors": []})  # fmt: skip

    def refused(self: object) -> None:
        raise AssertionError(f"{type(self).__name__} was asked for its JSON form")

    for module in (document, entries, totals, audit_section):
        for name in dir(module):
            part = getattr(module, name)
            ours = isinstance(part, type) and part.__module__ == module.__name__
            if ours and hasattr(part, "to_dict"):
                monkeypatch.setattr(part, "to_dict", refused)
    for part in (Probe, Violation, RuntimeShare):
        monkeypatch.setattr(part, "to_dict", refused)
    pricing = Pricing(migrate_to=("tpu",), model=CostModel())
    config = document.Config(platforms=("cpu", "cuda", "tpu"), reference="cpu")
    report = build_report(ledger.tests.values(), config=config,
                          environment=document.Environment(), pricing=pricing)  # fmt: skip
    settings = AuditSettings(interception={}, platforms=("cpu", "cuda", "tpu"), pricing=pricing)
    report = dataclasses.replace(report, audit=ledger.audit.section(settings))
    monkeypatch.undo()
    assert [t.nodeid for t in report.tests] == ["t.py::a", "t.py::b"]
    assert report.summary.numbers is not None
    assert report.summary.numbers.runtime_share["cpu"].libraries == {"lapack": 0.25}
    assert report.audit is not None
    assert report.audit.computations[0].users == ("t.py::a",)
    written = json.dumps(report.to_dict())
    assert from_json(json.loads(written), Path("r.json")) == report
    assert json.dumps(from_json(json.loads(written), Path("r.json")).to_dict()) == written


def test_write_is_atomic_and_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    config = {"source": "pyproject.toml", "platforms": ["cpu"], "reference": "cpu"}
    report = built_report([], config=config, environment={"present_platforms": ["cpu"]})
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
        built_report(
            tests,
            config={"platforms": ["cpu", "cuda", "tpu"], "reference": "cpu"},
            environment={"present_platforms": ["cpu"]},
        ),
    )
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tpu: does not lower — 1 check in 1 test" in out
    assert "    t.py::t  'attention': ValueError: no rule" in out
    assert "where the lock-in lives on cuda: 2 distinct sites (1 vendor, 1 custom)" in out
    assert "check 'attention'" not in out  # per-test details only on request
    assert main(["show", str(path), "--details", "all"]) == 0
    out = capsys.readouterr().out
    assert "cuda  vendor   1  custom   2  (cublas 1)  [lowered]\n" in out
    assert "numerics: not present" not in out  # said once, in a note
    assert "tpu   failed to lower: ValueError: no rule" in out
    assert main(["show", str(path), "-v"]) == main(["show", str(path), "--details", "problems"])
    assert main(["show", str(path), "--format", "md"]) == 0
    assert "| cuda | 1 | 0 | 1 | 1 | 2 | 1 | lowered | cublas 1 |" in capsys.readouterr().out
    assert main(["show", str(path), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>")
    assert "__gpu$xla.gpu.triton" in page
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err
    assert main(["show", str(path), "--platform", "rocm"]) == 2
    assert "--platform rocm: " in capsys.readouterr().err
    assert main(["show", str(path), "--platform", "cuda", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "tpu: does not lower" not in out
    assert "top 1 by dispatches" in out


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
    assert SCHEMA_VERSION == 2


# -- reading schema version 1 -------------------------------------------------------------------

V1 = Path(__file__).parent / "data" / "report-v1.json"
"""A real version 1 report: benchmarks/corpora/report_suite.py's suite at 16 tests, written by
pytest-jaxport before schema version 2 (violations and failures stored as sentences)."""


def test_a_version_1_report_is_upgraded_on_load() -> None:
    stored = json.loads(V1.read_text())
    assert stored["schema_version"] == 1
    report = load(V1).to_dict()
    assert (report["schema_version"], report["upgraded_from"]) == (SCHEMA_VERSION, 1)
    assert "layers" not in report["summary"]  # rendered rows: the view builds them now
    tests = {t["nodeid"]: t for t in report["tests"]}
    [cudnn] = tests["tests/test_conv.py::test_convnet_tight_budget[0]"]["violations"]
    assert "message" not in cudnn
    fields = (cudnn["key"], cudnn["found"], cudnn["what"], cudnn["limit"])
    assert fields == ("max_library_calls.cudnn", 2, "cudnn calls", 1)
    assert cudnn["details"] == [
        "stablehlo.convolution (cudnn) at models_report.py:34",
        "stablehlo.convolution (cudnn) at models_report.py:36",
    ]
    [lowering] = tests["tests/test_linalg.py::test_eigenvalues_must_lower[0]"]["violations"]
    assert (lowering["found"], lowering["what"]) == ("fails to lower", "lower")
    nothing = tests["tests/test_broken.py::test_checks_nothing[0]"]
    assert "checked no function" in nothing["error"]["message"]
    # The summary is counted again: version 2's sites and outcomes from version 1's checks.
    assert report["summary"]["platforms"]["cuda"]["vendor_sites"] > 0
    assert report["summary"]["outcomes"]["failed"] == stored["summary"]["failed_tests"]
    assert report["summary"]["checks"] == stored["summary"]["checks"]
    vendor = stored["summary"]["platforms"]["cuda"]["vendor"]
    assert report["summary"]["platforms"]["cuda"]["vendor"] == vendor


def test_show_merge_and_diff_read_a_version_1_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(V1)]) == 0
    out = capsys.readouterr().out
    assert "cuda: max_library_calls.cudnn — 1 violation in 1 test" in out
    assert "tpu: must_lower — 1 violation in 1 test" in out
    assert "failed: the test's own error — 2 tests" in out
    assert "tests/test_broken.py::test_raises[0]  failed (no message recorded)" in out
    assert main(["show", str(V1), "--details", "problems"]) == 0
    out = capsys.readouterr().out
    assert "VIOLATION cuda: 2 cudnn calls > 1 (max_library_calls.cudnn, set in\n" in out
    for fmt in ("md", "html"):
        assert main(["show", str(V1), "--format", fmt]) == 0
        assert "test_convnet_tight_budget[0]" in capsys.readouterr().out
    merged = tmp_path / "merged.json"
    # merged and written; exit 1: its tests failed (a merged report that is not green)
    assert main(["merge", str(V1), "-o", str(merged), "--md", str(tmp_path / "m.md")]) == 1
    assert "FAILED: 4 failed tests (failed on report-v1.json: 4), 2 budget violations" in (
        capsys.readouterr().out
    )
    assert json.loads(merged.read_text())["schema_version"] == SCHEMA_VERSION
    assert "max_library_calls.cudnn" in (tmp_path / "m.md").read_text()
    capsys.readouterr()
    assert main(["diff", str(V1), str(merged)]) == 0
    assert "jaxport diff: 0 grew, 0 shrank" in capsys.readouterr().out
