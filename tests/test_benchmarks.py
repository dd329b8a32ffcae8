"""Tests of the benchmarks package (benchmarks/overhead, benchmarks/validation) and calibration/.

The benchmarks stay runnable: a quick in-process run, its tables, and both generated suites.

Nothing here asserts a timing (performance is measured in benchmarks/, not in tests); these
tests fail when the benchmark code no longer matches the plugin it measures. The benchmarks are
a package run from the repository's root (``python -m benchmarks.<folder>.<script>``), as
here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
CALIBRATE = ROOT / "calibration" / "calibrate.py"


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the repository's root (``cwd``: elsewhere), on cpu."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_quick_in_process_run_writes_every_stage_and_verdict(tmp_path: Path) -> None:
    out = tmp_path / "quick.json"
    done = _run(
        "-m", "benchmarks.overhead.run", "--quick", "--parts", "breakdown,scale", "--out", str(out)
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

    tables = _run("-m", "benchmarks.overhead.tables", str(out))
    assert tables.returncode == 0, tables.stderr[-2000:]
    assert "#### per-check breakdown" in tables.stdout
    assert "| loop | grad | 12 |" in tables.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module", ["models", "models_second", "models_sharded"])
def test_generated_suites_pass_under_the_plugin_and_plainly(tmp_path: Path, module: str) -> None:
    # Written by a child process, as the benchmarks write it (the models import JAX).
    folder = tmp_path / module
    written = _run(
        "-c",
        f"import pathlib; from benchmarks.corpora import {module}, suite; "
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
        "benchmarks.corpora.jaxport_plain", cwd=folder,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stdout[-3000:]
    assert f"{cases} passed" in plain.stdout


@pytest.mark.slow
def test_report_scale_benchmark_runs_and_records_sizes(tmp_path: Path) -> None:
    out = tmp_path / "report-scale.json"
    done = _run(
        "-m", "benchmarks.overhead.report_scale", "--tests", "12", "--reps", "1",
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


# -- the validation runs (benchmarks/validation/: gpu.py, tpu.py) -----------------------------

GPU_FIXTURE = Path(__file__).resolve().parent / "data" / "gpu_validation"
"""A GPU run's files, constructed by tests/data/gpu_validation/make_fixture.py from invented
numbers (no GPU has run it): what calibration/calibrate.py adopt must turn into the bands in use."""
FIXTURE_DEVICE = "Fixture GPU (test data, not a measurement)"


def _benchmark_module(name: str) -> Any:
    """``benchmarks.<name>``, imported as ``python -m`` would from the repository's root."""
    import importlib

    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(f"benchmarks.{name}")
    finally:
        sys.path.remove(str(ROOT))


@pytest.mark.slow
def test_gpu_validation_dry_run_writes_every_part_with_gpu_columns_not_measured(
    tmp_path: Path,
) -> None:
    gv = _benchmark_module("validation.gpu")
    done = _run("-m", "benchmarks.validation.gpu", "--dry-run", "--quick",
                "--out-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = {p.name for p in tmp_path.iterdir()}
    assert written >= {
        "gpu-validation-dry-run.json", "gpu-validation-dry-run.md", "gpu-validation-dry-run.log",
        "fidelity-dry-run.json", "fidelity-dry-run.md", "demo-report-dry-run.json",
    }  # fmt: skip
    results = json.loads((tmp_path / "gpu-validation-dry-run.json").read_text())
    parts = results["parts"]
    assert {p: e["status"] for p, e in parts.items()} == dict.fromkeys(
        ("environment", "capture", "demo", "fidelity", "overhead"), "done"
    )
    assert results["mode"] == "dry-run"
    assert results["cuda_error_band"] == gv.NOT_MEASURED
    assert parts["capture"]["captured"] == gv.NOT_MEASURED
    assert "no CUDA GPU here" in parts["capture"]["error"]
    demo = parts["demo"]
    assert demo["outcomes"] == {"passed": 2}  # -k "mlp or lowpass" in a smoke run
    assert demo["numerics"] == demo["cuda_share_measured"] == gv.NOT_MEASURED
    assert all(c["numerics_cuda_vs_cpu"] == gv.NOT_MEASURED for c in demo["checks"])
    assert demo["cuda_share_estimated"]["basis"] == "estimated"  # what a cpu-only run prints
    fidelity = parts["fidelity"]
    assert fidelity["cuda_share_error_points"] == gv.NOT_MEASURED
    assert fidelity["numerics_cuda_vs_cpu"] == gv.NOT_MEASURED
    libraries = fidelity["deviceless_vs_gpu"]["by_library"]
    if fidelity["deviceless_vs_gpu"]["deviceless_compile_problem"] is None:
        # Deviceless stands in for the device: the FFT filter's rfft and irfft are cuFFT
        # calls, forward and in the gradient; the GPU's columns are not measured.
        assert libraries["cufft"] == {
            "deviceless": 4, "gpu": gv.NOT_MEASURED, "agreement": gv.NOT_MEASURED
        }  # fmt: skip
    overhead = parts["overhead"]
    assert overhead["where"] == "cpu"
    assert overhead["checks"]["tests"] == overhead["audit"]["tests"] == 1
    md = (tmp_path / "gpu-validation-dry-run.md").read_text()
    assert "| lowered | ±37 (cpu, jaxlib" in md
    assert md.count("not measured: no GPU") >= 8
    # The same files as a GPU run writes: the recorded fixture has the same keys.
    fixture = json.loads((GPU_FIXTURE / "gpu-validation-fixture.json").read_text())
    assert set(fixture) - {"fixture", "setup"} == set(results)
    assert set(fixture) - {"fixture", "setup"} == set(results)
    for part, entry in parts.items():
        assert set(fixture["parts"][part]) == set(entry), part
    gpu_parts = fixture["parts"]
    assert set(gpu_parts["environment"]["versions"]) == set(parts["environment"]["versions"])
    assert set(gpu_parts["demo"]["checks"][0]) == set(demo["checks"][0])
    assert set(gpu_parts["fidelity"]["deviceless_vs_gpu"]) == set(fidelity["deviceless_vs_gpu"])
    assert set(gpu_parts["overhead"]["checks"]) == set(overhead["checks"])


@pytest.mark.slow
def test_gpu_validation_stops_a_part_at_its_limit_and_keeps_the_others(tmp_path: Path) -> None:
    done = _run("-m", "benchmarks.validation.gpu", "--dry-run", "--parts", "capture,demo",
                "--limit", "demo=2", "--out-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu-validation-dry-run.json").read_text())
    assert results["parts"]["capture"]["status"] == "done"
    assert results["parts"]["demo"]["status"] == "timed out"
    assert results["parts"]["demo"]["limit_s"] == 2
    assert (
        "[stopped at the part's limit of 2 s]"
        in (tmp_path / "gpu-validation-dry-run.log").read_text()
    )
    assert "| demo | timed out |" in (tmp_path / "gpu-validation-dry-run.md").read_text()
    bad = _run("-m", "benchmarks.validation.gpu", "--dry-run", "--limit", "demo=soon")
    assert bad.returncode == 2
    assert "--limit 'demo=soon': expected PART=SECONDS" in bad.stderr


@pytest.mark.slow
def test_tpu_validation_dry_run_writes_every_part_with_tpu_columns_not_measured(
    tmp_path: Path,
) -> None:
    """The TPU run's harness is the GPU run's: its parts under their limits, written after
    each; without a TPU every TPU column says so, the emulation part says why it skipped
    where the emulation's script is absent, and the band shown is the one in use (the
    chip's, from estimate_error.json)."""
    tv = _benchmark_module("validation.tpu")
    parts = "device,demo,fidelity,emulation"
    done = _run("-m", "benchmarks.validation.tpu", "--dry-run", "--quick",
                "--parts", parts, "--out-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = {p.name for p in tmp_path.iterdir()}
    assert written >= {"tpu-validation-dry-run.json", "tpu-validation-dry-run.md",
                       "tpu-validation-dry-run.log", "demo-report-dry-run.json"}  # fmt: skip
    results = json.loads((tmp_path / "tpu-validation-dry-run.json").read_text())
    parts = results["parts"]
    assert list(parts) == ["environment", "device", "demo", "fidelity", "emulation"]
    assert results["mode"] == "dry-run"
    assert results["tpu_error_band"] == tv.NOT_MEASURED == "not measured: no TPU"
    device = parts["device"]
    assert device["status"] == "done"
    assert device["device"] == device["differs"] == tv.NOT_MEASURED
    assert device["model"]["flops"] > 0
    demo = parts["demo"]
    assert demo["outcomes"] == {"passed": 2}  # -k "mlp or lowpass" in a smoke run
    assert demo["numerics"] == demo["tpu_share_measured"] == tv.NOT_MEASURED
    assert all(c["numerics_tpu_vs_cpu"] == tv.NOT_MEASURED for c in demo["checks"])
    estimated = demo["tpu_share_estimated"]
    assert (estimated["basis"], estimated["error_measured_on"]) == ("estimated", "TPU v5 lite")
    fidelity = parts["fidelity"]
    assert fidelity["status"] == "done"
    assert fidelity["tpu_share_error_points"] == fidelity["numerics_tpu_vs_cpu"] == tv.NOT_MEASURED
    emulation = parts["emulation"]
    assert emulation["status"] == "done", emulation
    assert emulation["summary"], emulation  # emulation_chip's own results, read back
    md = (tmp_path / "tpu-validation-dry-run.md").read_text()
    shipped = results["shipped_tpu_band"]["lowered"]
    assert f"| lowered | ±{shipped['points']:g} (TPU v5 lite, jaxlib 0.10.2) |" in md
    assert md.count("not measured: no TPU") >= 6


def _adopted(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    for name in ("gpu-validation-fixture.json", "fidelity-fixture.json"):
        shutil.copy(GPU_FIXTURE / name, tmp_path / name)
    bands = tmp_path / "estimate_error.json"
    baseline = tmp_path / "fidelity_baseline.json"
    shutil.copy(ROOT / "pytest_jaxport" / "estimate_error.json", bands)
    shutil.copy(BENCHMARKS / "fidelity" / "baseline.json", baseline)
    done = _run(str(CALIBRATE), "adopt",
                str(tmp_path / "gpu-validation-fixture.json"), "--estimate-errors", str(bands),
                "--baseline", str(baseline), *extra)  # fmt: skip
    return done, bands, baseline


@pytest.mark.slow
def test_gpu_numbers_become_the_cuda_error_band_and_baseline_naming_the_device(
    tmp_path: Path,
) -> None:
    import jax
    import jax.numpy as jnp

    from pytest_jaxport._jax.stablehlo import read_program
    from pytest_jaxport.model.census import take_census
    from pytest_jaxport.model.roofline import (
        estimated_share,
        kernel_seconds,
        peak_for,
        read_estimate_errors,
    )
    from pytest_jaxport.model.runtime_share import share_basis

    gv = _benchmark_module("validation.gpu")
    fidelity = _benchmark_module("fidelity.run")
    fixture = json.loads((GPU_FIXTURE / "gpu-validation-fixture.json").read_text())
    fixture_fidelity = json.loads((GPU_FIXTURE / "fidelity-fixture.json").read_text())
    # The fixture is what the script writes from its fidelity results.
    summary = gv.fidelity_summary(fixture_fidelity, gpu=True, device=FIXTURE_DEVICE)
    assert fixture["cuda_error_band"] == summary["cuda_error_band"]
    band = fixture["cuda_error_band"]

    done, bands, baseline = _adopted(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = read_estimate_errors(bands.read_text(), source=str(bands))
    for level in ("lowered", "compiled"):
        assert table["cuda"][level].points == round(band[level]["points"])
        assert table["cuda"][level].device == FIXTURE_DEVICE
    assert table["*"]["lowered"].points == 37.0  # every other platform keeps cpu's

    # A real program's cuda estimate now carries the GPU's band, and says where it came from.
    def mlp(w: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ w).sum()

    lowered = jax.jit(mlp).trace(jnp.ones((64, 64)), jnp.ones((8, 64)))
    program = read_program(lowered.lower(lowering_platforms=("cuda",)))
    census = take_census(
        program, "cuda", seconds=lambda site, layer: kernel_seconds(site, layer, peak_for("cuda"))
    )
    before = estimated_share(census)
    after = estimated_share(census, table)
    assert before is not None
    assert after is not None
    assert (before.error_points, before.error_measured_on) == (37.0, "cpu")
    assert (after.error_points, after.error_measured_on) == (
        round(band["lowered"]["points"]), FIXTURE_DEVICE
    )  # fmt: skip
    assert f"±{round(band['lowered']['points'])} points on {FIXTURE_DEVICE})" in share_basis(
        after.to_dict()
    )

    # The fidelity baseline: the device's own entry, the deviceless one untouched.
    recorded = json.loads(baseline.read_text())["jaxlib"]["0.10.2"]
    original = json.loads((BENCHMARKS / "fidelity" / "baseline.json").read_text())["jaxlib"][
        "0.10.2"
    ]
    assert recorded["programs"] == original["programs"]
    on_device = recorded["devices"][FIXTURE_DEVICE]
    table_now = fidelity.agreement_table(fixture_fidelity["rows"])
    assert on_device["programs"]["cuda"] == table_now["cuda"]
    assert on_device["source"].endswith("fidelity-fixture.json")
    assert fidelity.check_agreement(fixture_fidelity, baseline) == []
    worse = json.loads(json.dumps(fixture_fidelity))
    worse["rows"][2]["counts"]["cuda"]["agreement"] = {"cublas": 0.0}
    [drop] = fidelity.check_agreement(worse, baseline)
    assert drop == (
        f"cuda mlp/large/fwd cublas: agreement 0% < 100% recorded for jaxlib 0.10.2 on "
        f"{FIXTURE_DEVICE}"
    )


@pytest.mark.slow
def test_adopting_refuses_a_dry_run_and_a_band_on_too_few_programs(tmp_path: Path) -> None:
    results = tmp_path / "gpu-validation-fixture.json"
    done, _, _ = _adopted(tmp_path)
    assert done.returncode == 0
    data = json.loads(results.read_text())
    results.write_text(json.dumps(dict(data, mode="dry-run")))
    dry = _run(str(CALIBRATE), "adopt", str(results),
               "--estimate-errors", str(tmp_path / "estimate_error.json"),
               "--baseline", str(tmp_path / "fidelity_baseline.json"))  # fmt: skip
    assert dry.returncode == 2
    assert "a dry-run run has no GPU numbers" in dry.stderr
    data["cuda_error_band"]["lowered"]["programs"] = 3
    results.write_text(json.dumps(data))
    thin = _run(str(CALIBRATE), "adopt", str(results),
                "--estimate-errors", str(tmp_path / "estimate_error.json"),
                "--baseline", str(tmp_path / "fidelity_baseline.json"))  # fmt: skip
    assert thin.returncode == 2
    assert "rests on too few programs ({'lowered': 3}" in thin.stderr


def _training_row(key: str, dot_flops: float, measured: dict[str, float]) -> dict[str, object]:
    sites = [
        [{"op": "stablehlo.dot_general", "target": None, "flops": dot_flops, "bytes": 4e4},
         "library", "eigen", 1.0],
        [{"op": "stablehlo.add", "target": None, "flops": 1e3, "bytes": 8e4}, "xla", None, 3.0],
        [{"op": "stablehlo.custom_call", "target": "lapack_sgetrf_ffi", "flops": 1e5,
          "bytes": 4e3}, "library", "lapack", 1.0],
    ]  # fmt: skip
    return {"key": key, "platform": "cpu", "measured": measured, "compiled": sites,
            "lowered": sites}  # fmt: skip


@pytest.mark.slow
def test_a_calibration_fit_writes_the_shipped_calibration_file(tmp_path: Path) -> None:
    """``calibration/calibrate.py fit --write`` on a tiny training set (the form
    ``benchmarks/fidelity/run.py --training`` writes) writes the file the package reads at
    import."""
    from pytest_jaxport.model.roofline import CALIBRATION_FILE, read_calibration

    training = tmp_path / "training.json"
    rows = [
        _training_row(f"p{i}/small/fwd", 10.0 ** (4 + i), {"library": 0.2 + 0.1 * i,
                      "xla": 0.8 - 0.1 * i})
        for i in range(3)
    ]  # fmt: skip
    training.write_text(json.dumps({"rows": rows}))
    written = tmp_path / CALIBRATION_FILE
    shutil.copy(ROOT / "pytest_jaxport" / CALIBRATION_FILE, written)
    shipped = written.read_text()

    done = _run(str(CALIBRATE), "fit", str(training), "--write", "--measured-on", "a test",
                "--calibration", str(written))  # fmt: skip

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["programs_left_out"] == ["p0", "p1", "p2"]
    assert written.read_text() != shipped
    calibration, cpu = read_calibration(written.read_text())
    assert calibration.source == "fitted on the fidelity corpus on cpu (a test)"
    assert calibration.solver == float(f"{report['fitted']['solver']:.3g}")
    assert cpu["bandwidth"] == float(f"{report['fitted']['cpu_bandwidth']:.3g}")
    assert json.loads(written.read_text())["about"] == json.loads(shipped)["about"]


def test_a_captured_description_is_diffed_field_by_field_against_the_shipped_one() -> None:
    gv = _benchmark_module("validation.gpu")
    shipped = (gv.TARGETS / "h200.txtpb").read_text()
    captured = shipped.replace("core_count: 132", "core_count: 132\n  pci_bus_id: 7").replace(
        "memory_bandwidth: 4800000000000", "memory_bandwidth: 4.9e12"
    )
    diff = gv.diff_descriptions(shipped, captured)
    assert diff["differs"] == [
        {"field": "gpu_device_info.memory_bandwidth", "shipped": "4800000000000",
         "captured": "4.9e12", "relative": 0.0208},
    ]  # fmt: skip
    assert diff["only_captured"] == ["gpu_device_info.pci_bus_id"]
    assert diff["fields_shipped"] == 34
    assert gv.proto_fields(shipped)["gpu_device_info.cuda_compute_capability.major"] == "9"
    assert gv.shipped_description_for("NVIDIA H200") == "h200"
    assert gv.shipped_description_for("NVIDIA H100 80GB HBM3") == "h100"
    assert gv.shipped_description_for("NVIDIA H100 PCIe") == "h100"
    assert gv.shipped_description_for("Tesla T4") is None
