"""The benchmarks stay runnable: a quick in-process run, its tables, and both generated suites.

Nothing here asserts a timing (performance is measured in benchmarks/, not in tests); these
tests fail when the benchmark code no longer matches the plugin it measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(BENCHMARKS), JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_quick_in_process_run_writes_every_stage_and_verdict(tmp_path: Path) -> None:
    out = tmp_path / "quick.json"
    done = _run(
        str(BENCHMARKS / "run.py"), "--quick", "--parts", "breakdown,scale", "--out", str(out)
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["errors"] == {}
    breakdown = results["breakdown"]
    assert set(breakdown["grouped_total_s"]) >= {
        "lower cuda+rocm+tpu (together)",
        "census (4 platforms)",
        "measured runtime share (only with a report or a share budget)",
    }
    measured = breakdown["measured_share_available"]
    for stage, seconds in breakdown["stage_total_s"].items():
        if measured or not stage.startswith("profile:"):
            assert seconds > 0, stage
    rows = results["scale"]["rows"]
    assert {(r["form"], r["mode"], r["layers"]) for r in rows} >= {("loop", "grad", 12)}
    for row in rows:
        assert row["weighted_ops"] > 0
        assert 0 < row["census"] < row["lower"]
    verdicts = results["verdicts"]
    assert any(key.startswith("census / lowering") for key in verdicts)

    tables = _run(str(BENCHMARKS / "tables.py"), str(out))
    assert tables.returncode == 0, tables.stderr[-2000:]
    assert "#### per-check breakdown" in tables.stdout
    assert "| loop | grad | 12 |" in tables.stdout


@pytest.mark.parametrize("module", ["models", "models_second", "models_sharded"])
def test_generated_suites_pass_under_the_plugin_and_plainly(tmp_path: Path, module: str) -> None:
    # Written by a child process: importing the benchmarks' `models` here would shadow the
    # `models.py` that other tests' pytester projects create.
    folder = tmp_path / module
    written = _run(
        "-c",
        f"import pathlib, {module}, suite; "
        f"suite.write_suite(pathlib.Path({str(folder)!r}), list({module}.CASES), {module!r}); "
        f"print(len({module}.CASES))",
    )
    assert written.returncode == 0, written.stderr[-2000:]
    cases = int(written.stdout.split()[-1])
    assert cases >= 5
    checked = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=folder)
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert f"{cases} passed" in checked.stdout
    plain = _run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:jaxport", "-p",
        "jaxport_plain", cwd=folder,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stdout[-3000:]
    assert f"{cases} passed" in plain.stdout


def test_report_scale_benchmark_runs_and_records_sizes(tmp_path: Path) -> None:
    out = tmp_path / "report-scale.json"
    done = _run(
        str(BENCHMARKS / "report_scale.py"), "--tests", "12", "--reps", "1",
        "--folder", str(tmp_path / "suite"), "--output", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["suite"]["tests"] == sum(results["suite"]["mix"].values()) >= 12
    assert results["suite"]["returncode"] == 1  # the mix has failures by design
    assert set(results["steps_ms"]) >= {"summary (counts, hotspots)", "view", "html", "markdown"}
    sizes = results["sizes"]
    assert 0 < sizes["terminal_lines_written_to_file"] < sizes["terminal_lines"]
    assert sizes["terminal_widest"] <= 100
    assert 0 < sizes["markdown_chars"] < 60_000
    assert "problems: " in results["suite"]["terminal_section"]


def test_formats_benchmark_runs_and_records_the_added_share(tmp_path: Path) -> None:
    out = tmp_path / "formats.json"
    done = _run(
        str(BENCHMARKS / "formats.py"), "--reps", "1", "--cases", "tiny_elementwise,convnet_small",
        "--base", "HEAD", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert set(results["per_case"]) == {"tiny_elementwise", "convnet_small"}
    assert results["per_case"]["convnet_small"]["findings per platform"]["tpu"] > 0
    assert isinstance(results["added_share_of_cold_checks"], float)
    assert "of the suites' cold checks" in done.stdout
