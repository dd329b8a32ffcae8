"""Tests of pytest_jaxport._jax.emulate against the chip's recorded outputs.

The tpu emulation held to what the chip computed (issue 49), on a machine without a TPU.

TPU v5 lite's outputs for every case of ``benchmarks/corpora/chip_corpus.py`` are recorded in
``benchmarks/results/emulation-chip-tpu-v5-lite.npz`` (jax 0.10.2, libtpu 0.0.42.1; the
``.json`` beside it says so). Each test here emulates the cases for tpu on this CPU with the
plugin's engine and compares, as ``benchmarks/validation/emulation_chip.py --chip-outputs``
does: an emulation that moves away from the chip fails CI, though CI has no accelerator.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RECORDED = RESULTS / "emulation-chip-tpu-v5-lite.npz"
sys.path.insert(0, str(ROOT))  # the benchmarks package, as `python -m` from the root finds it

from benchmarks.validation import emulation_chip  # noqa: E402

CASES = (
    "matmul", "matmul_high", "matmul_highest", "matmul_f16", "matvec", "matvec_vmapped",
    "scan_linear", "scan_rnn", "exp", "tanh", "erf", "row_sums", "cumsum",
    "softmax_layernorm", "eigvalsh", "rfft", "depthwise_conv", "mlp", "linen_mlp",
)  # fmt: skip
"""A case for each rule and each kind of bound (the whole corpus: the script, about three
minutes on two cores)."""


@pytest.fixture(scope="module")
def against_chip(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("emulation-chip")
    return emulation_chip.run(out, chip_outputs=RECORDED, names=CASES)


def test_the_recording_names_its_chip() -> None:
    device = json.loads(RECORDED.with_suffix(".json").read_text())["device"]
    assert (device["kind"], device["jax"], device["libtpu"]) == (
        "TPU v5 lite", "0.10.2", "0.0.42.1")  # fmt: skip
    errors = json.loads((RESULTS / "chip-errors-tpu-v5-lite.json").read_text())["device"]
    assert (errors["kind"], errors["libtpu"]) == ("TPU v5 lite", "0.0.42.1")


@pytest.mark.slow
@pytest.mark.parametrize("setting", [s.name for s in emulation_chip.SETTINGS])
def test_no_emulated_match_where_the_chip_differs_and_both_errors_within_3x(
    against_chip: dict[str, Any], setting: str
) -> None:
    judged = {
        name: case["settings"][setting].get("judged", case.get("error"))
        for name, case in against_chip["cases"].items()
    }
    wrong = {n: j for n, j in judged.items() if j in ("missed", "too far", "not emulated") or
             j is None}  # fmt: skip
    assert not wrong, f"{setting}: the emulation moved away from the chip: {wrong}"
    summary = against_chip["summary"][setting]
    assert summary["target_met"] is True
    assert summary["cases"] == len(CASES)


@pytest.mark.slow
def test_what_the_emulation_computes_as_the_chip_does_matches_it(
    against_chip: dict[str, Any],
) -> None:
    """cumsum, the float16 product, precision high and the depthwise convolution are emulated
    as the chip computes them: their worst errors against the CPU are the chip's (cumsum's
    and float16's bit for bit)."""
    row = {n: c["settings"]["jax-default"] for n, c in against_chip["cases"].items()}
    for name in ("cumsum", "matmul_f16"):
        assert row[name]["emulated"]["max_abs_err"] == row[name]["chip"]["max_abs_err"], name
    for name in ("matmul_high", "depthwise_conv", "matmul", "matvec_vmapped"):
        ratio = row[name]["emulated"]["max_abs_err"] / row[name]["chip"]["max_abs_err"]
        assert 0.95 < ratio < 1.05, (name, ratio)


def test_the_emulated_cumsum_is_the_chips_bit_for_bit() -> None:
    import jax

    from benchmarks.corpora import chip_corpus
    from pytest_jaxport._jax.emulate import emulate

    (case,) = [c for c in chip_corpus.CASES if c.name == "cumsum"]
    with np.load(RECORDED, allow_pickle=False) as recorded:
        chip = recorded["chip/cumsum/0"]
    emulated = emulate(case.fn, case.inputs(), platform="tpu")
    np.testing.assert_array_equal(np.asarray(emulated.value), chip)
    assert not np.array_equal(np.asarray(jax.jit(case.fn)(*case.inputs())), chip)


@pytest.mark.slow
def test_the_dry_run_writes_every_file_with_the_chip_not_measured(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.validation.emulation_chip", "--out-dir",
         str(tmp_path), "--dry-run", "--cases", "matmul,exp"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "emulation-chip.json").read_text())
    assert results["device"]["kind"] == "not measured: no TPU"
    exp = results["cases"]["exp"]["settings"]["jax-default"]
    assert (exp["chip"], exp["emulated"]["state"]) == ("not measured: no TPU", "may differ")
    assert (
        "| exp | not measured: no TPU |  | may differ |"
        in (tmp_path / "emulation-chip.md").read_text()
    )


CALIBRATE = ROOT / "calibration" / "calibrate.py"


@pytest.mark.slow
def test_the_shipped_bounds_are_the_recorded_measurement_adopted(tmp_path: Path) -> None:
    """``pytest_jaxport/chip_errors.json`` is what ``calibrate.py chip-errors`` makes of the
    chip's recorded results: no bound is edited by hand."""
    out = tmp_path / "chip_errors.json"
    done = subprocess.run(
        [sys.executable, str(CALIBRATE), "chip-errors",
         str(RESULTS / "chip-errors-tpu-v5-lite.json"), "--chip-errors", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    shipped = json.loads((ROOT / "pytest_jaxport" / "chip_errors.json").read_text())
    assert json.loads(out.read_text())["tpu"] == shipped["tpu"]
    assert "TPU v5 lite: 42 ops, 9 exact" in done.stderr


@pytest.mark.slow
def test_a_dry_runs_numbers_are_refused_as_bounds(tmp_path: Path) -> None:
    results = json.loads((RESULTS / "chip-errors-tpu-v5-lite.json").read_text())
    results["device"].update(kind="not measured: no TPU", platform="cpu")
    dry = tmp_path / "dry.json"
    dry.write_text(json.dumps(results))
    done = subprocess.run(
        [sys.executable, str(CALIBRATE), "chip-errors", str(dry), "--chip-errors",
         str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    assert "measured on 'not measured: no TPU', not a TPU: a dry run has no chip numbers" in (
        done.stderr
    )
    assert not (tmp_path / "out.json").exists()
