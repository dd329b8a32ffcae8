"""Tests of benchmarks/fidelity/run.py (the fidelity harness and its CI check).

The fidelity harness (benchmarks/fidelity/run.py) stays runnable, and its CI check bites.

The harness runs in subprocesses on a slice of its corpus, as CI and users run it. Nothing
here asserts a timing or an estimate's accuracy (benchmarks/ measures those); what is
asserted is the structure of what it records, counts that are deterministic, and that the
agreement check fails when agreement drops and passes when it does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.model.platforms import DEFAULTS
from pytest_jaxport.model.roofline import CALIBRATION, DEFAULT_PEAKS, ESTIMATE_ERROR, FUSED_SHARE

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
RESULTS = BENCHMARKS / "results" / "fidelity-cpu.json"
CHIP_RATES = {"tpu": BENCHMARKS / "results" / "tpu-validation-v5e" / "tpu-validation-v5e.json"}
"""The platforms whose peak rates are their chip's own, and the run that measured them."""


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.fidelity.run", *args],
        cwd=BENCHMARKS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow
def test_the_harness_records_counts_shares_and_numerics(
    tmp_path: Path, measured_basis: str
) -> None:
    out = tmp_path / "fidelity.json"
    done = harness(
        "--programs",
        "fft_filter,pallas",
        "--sizes",
        "small",
        "--seconds",
        "0.02",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    rows = {f"{r['program']}/{r['mode']}": r for r in results["rows"]}
    assert set(rows) == {"fft_filter/fwd", "fft_filter/grad", "pallas/fwd"}
    fft = rows["fft_filter/fwd"]["counts"]["cpu"]
    # rfft and irfft: DUCC at both levels, so the lowered prediction is right.
    assert fft["lowered"] == fft["compiled"] == {"ducc": 2}
    assert fft["agreement"] == {"ducc": 100.0}
    pallas = rows["pallas/fwd"]["counts"]["cuda"]
    if pallas["lowered"] is None:  # jax 0.12 with the CUDA plugin and no GPU: a known failure
        assert "No supported GPU devices found" in pallas["lowered_error"]
    else:
        assert pallas["lowered"] == {"custom": 1}
    for row in rows.values():
        share = row["share"]["cpu"]
        if measured_basis != "measured":
            assert "error" in share  # this jaxlib's profiler cannot measure: said so
            continue
        assert sum(share["measured"].values()) == pytest.approx(1.0)
        for source in ("compiled", "lowered", "before"):
            assert sum(share[f"estimated_{source}"].values()) == pytest.approx(1.0)
            assert 0.0 <= share["error_points"][source] <= 100.0
        # What the plugin itself reports for the check carries the error band.
        assert share["plugin_label"]["error_points"] == ESTIMATE_ERROR["compiled"].points
        assert row["numerics"]["note"]  # only cpu ran: nothing compared, and it says why
    assert results["aggregate"]["agreement"]["cpu"]["programs"] == 3
    capture = results["capture_target"]
    assert "error" in capture or "written" in capture
    md = out.with_suffix(".md").read_text()
    assert "### Counts: lowered census against compiled census" in md
    assert "| fft_filter small fwd | ducc 2 | ducc 2 | 100% |" in md


@pytest.mark.slow
def test_the_agreement_check_fails_when_agreement_drops(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.json"
    slice_ = ("--programs", "mlp,fft_filter", "--sizes", "small")
    recorded = harness(*slice_, "--update-baseline", str(baseline))
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    data = json.loads(baseline.read_text())
    [jaxlib] = data["jaxlib"]
    assert harness(*slice_, "--agreement-check", str(baseline)).returncode == 0

    # Pretend the lowered level once predicted XLA:CPU's library calls for the MLP's dots.
    programs: dict[str, Any] = data["jaxlib"][jaxlib]["programs"]["cpu"]
    programs["mlp/small/fwd"] = {library: 100.0 for library in programs["mlp/small/fwd"]}
    baseline.write_text(json.dumps(data))
    dropped = harness(*slice_, "--agreement-check", str(baseline))
    assert dropped.returncode == 1
    assert "AGREEMENT DROPPED: cpu mlp/small/fwd" in dropped.stderr

    # Pretend the lowered level once counted no library in the MLP, as compiled (issue 50:
    # numpyro's dots of vectors, counted as cuBLAS calls, are recorded as no library at all).
    programs["mlp/small/fwd"] = {}
    baseline.write_text(json.dumps(data))
    dropped = harness(*slice_, "--agreement-check", str(baseline))
    assert dropped.returncode == 1
    assert "AGREEMENT DROPPED: cpu mlp/small/fwd" in dropped.stderr

    baseline.write_text("{}")
    broken = harness(*slice_, "--agreement-check", str(baseline))
    assert broken.returncode == 1
    assert "not a fidelity baseline" in broken.stderr


def test_the_shipped_model_and_error_band_are_those_of_the_recorded_run() -> None:
    """cost.py's constants are the ones the committed fidelity run measured, and the error
    band it states is that run's: the fit's error on programs left out of it (compiled),
    and the lowered estimate's error with the shipped constants."""
    results = json.loads(RESULTS.read_text())
    model = results["model"]
    assert model["calibration"] == {
        "solver": CALIBRATION.solver,
        "fft": CALIBRATION.fft,
        "source": CALIBRATION.source,
    }
    # Every platform the run recorded keeps its rates; one it did not record (an opt-in
    # platform described later, oneapi) is outside the default platforms the corpus measures,
    # and says its rates are a datasheet's.
    unrecorded = set(DEFAULT_PEAKS) - set(model["peaks"])
    assert not unrecorded & set(DEFAULTS), unrecorded
    for platform in unrecorded:
        assert "nothing measured" in DEFAULT_PEAKS[platform].source, platform
    for platform, recorded in model["peaks"].items():
        peak = DEFAULT_PEAKS[platform]
        if platform in CHIP_RATES:  # measured on the platform's own chip since this run
            continue
        assert (
            recorded["flops"],
            recorded["bandwidth"],
            recorded["launch"],
            recorded["library_call"],
        ) == (peak.flops, peak.bandwidth, peak.launch, peak.library_call)
    assert model["fused_share"] == FUSED_SHARE
    held_out = results["fit"]["leave_one_program_out_points"]
    assert ESTIMATE_ERROR["compiled"].points == round(held_out["mean"])
    assert ESTIMATE_ERROR["compiled"].programs == held_out["programs"]
    lowered = results["aggregate"]["share_error_points"]["cpu"]["lowered"]
    assert ESTIMATE_ERROR["lowered"].points == round(lowered["mean"])
    jaxlib = results["environment"]["versions"]["jaxlib"]
    assert f"jaxlib {jaxlib}" in ESTIMATE_ERROR["compiled"].measured_on
    assert ESTIMATE_ERROR["compiled"].source == str(RESULTS.relative_to(BENCHMARKS.parent))
    # A platform's own band (cuda's from a GPU run, tpu's from the chip) is that run's,
    # naming its device.
    bands = json.loads((BENCHMARKS.parent / "pytest_jaxport" / "estimate_error.json").read_text())
    for platform, levels in bands["platforms"].items():
        for level, entry in levels.items():
            recorded = json.loads((BENCHMARKS.parent / entry["source"]).read_text())
            assert recorded.get("mode") != "dry-run"
            band = recorded[f"{platform}_error_band"]
            assert entry["points"] == round(band[level]["points"])
            assert entry["device"] == band["device"]


def _harness_module() -> Any:
    import importlib

    sys.path.insert(0, str(BENCHMARKS.parent))
    try:
        return importlib.import_module("benchmarks.fidelity.run")
    finally:
        sys.path.remove(str(BENCHMARKS.parent))


def test_per_plane_times_are_what_the_gpu_path_records(measured_basis: str) -> None:
    """On an accelerator the harness records the measured share per profiler plane; the
    function that does it runs on cpu too."""
    if measured_basis != "measured":
        pytest.skip("this jaxlib's profiler reports no per-instruction events (needs 0.8.3+)")
    import jax
    import jax.numpy as jnp

    fidelity = _harness_module()
    x = jnp.ones((256, 256))
    compiled = jax.jit(lambda x: jnp.tanh(x @ x)).lower(x).compile()
    planes = fidelity.times_by_plane(lambda: jax.block_until_ready(compiled(x)), runs=3)
    assert planes, "no plane recorded an hlo_op event"
    ops = {op for times in planes.values() for op in times}
    assert all(f"%{op} " in compiled.as_text() for op in ops), ops


def test_deviceless_vs_gpu_causes_name_the_autotuning_pick() -> None:
    """Two real deviceless compiles of one matmul, one with XLA's Triton gemms and one
    without, differ as an autotuned GPU and a deviceless compile can: by who got the gemm."""
    from pytest_jaxport._jax.deviceless import cuda_plugin_problem, deviceless_compile
    from pytest_jaxport.model.classification import classify
    from pytest_jaxport.model.gpu import load_gpu_description
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    if (problem := cuda_plugin_problem()) is not None:
        pytest.skip(problem)
    import jax.numpy as jnp

    fidelity = _harness_module()
    a = jnp.ones((512, 512))

    def census(options: dict[str, object] | None) -> Any:
        from pytest_jaxport.model.census import take_census

        text = deviceless_compile(
            lambda a, b: a @ b, (a, a), {}, target_config=load_gpu_description("h100"),
            compiler_options=options,
        )  # fmt: skip
        return take_census(
            parse_compiled_hlo(text), "cuda", level="compiled",
            classifier=lambda p, op, t: classify(p, op, t, level="compiled"),
        )  # fmt: skip

    triton, cublas = census(None), census({"xla_gpu_enable_triton_gemm": False})
    causes = fidelity.deviceless_vs_gpu_causes(triton, cublas)
    assert causes
    assert causes[0].startswith("autotuning picks: Triton gemms 1 deviceless vs 0")
    assert fidelity.agreement(fidelity.library_counts(triton), fidelity.library_counts(cublas)) == {
        "cublas": 0.0
    }
    assert fidelity.deviceless_vs_gpu_causes(triton, triton) == []


@pytest.mark.parametrize("platform", sorted(CHIP_RATES))
def test_a_platforms_peak_rates_are_those_its_chip_reported(platform: str) -> None:
    """tpu's estimate divides by the rates the lent TPU v5e's profiler reported in the
    validation run's device part, not a datasheet's (a v5p's were 2.3x and 3.4x these)."""
    device = json.loads(CHIP_RATES[platform].read_text())["parts"]["device"]["device"]
    peak = DEFAULT_PEAKS[platform]
    assert (peak.flops, peak.bandwidth) == pytest.approx(
        (device["peak_flops"], device["peak_bandwidth"]), rel=1e-3
    )
    assert device["kind"] in peak.source
