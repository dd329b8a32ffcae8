"""Calibration: the shipped data the runtime-share estimate is fitted to and the error bands
it prints, written from measurements (``benchmarks/``) and never by them.

    python calibration/calibrate.py fit TRAINING.json [--write]   # CALIBRATION, cpu's rates
    python calibration/calibrate.py adopt RESULTS.json            # a device run's error band
    python calibration/calibrate.py chip-errors RESULTS.json \
        [--by-range BOUNDS.json --formats FORMATS.json]             # a TPU's measured op errors

``fit`` fits cpu's bandwidth, launch and library-call costs and the solver/FFT efficiencies
to the measured cpu shares of the fidelity corpus (``benchmarks/fidelity/run.py --training
TRAINING.json`` measures them), then the same with each program left out in turn, and prints
both errors; with ``--write`` it writes the fitted constants to
``pytest_jaxport/calibration.json``, which ``pytest_jaxport.model.cost`` reads at import.

``adopt`` makes an accelerator's numbers the ones in use (``benchmarks/validation/gpu.py``
on an NVIDIA GPU, ``benchmarks/validation/tpu.py`` or ``benchmarks/validation/tpu_traces.py
errors`` from a TPU): that platform's error band in ``pytest_jaxport/estimate_error.json``,
naming the device, and a GPU's agreement in ``benchmarks/fidelity/baseline.json``.

``chip-errors`` makes a chip's measured op errors (``benchmarks/validation/chip_errors.py`` on
a TPU) the bounds the tpu emulation judges by: ``pytest_jaxport/chip_errors.json``, naming the
device, jax and libtpu. With ``--by-range`` (``benchmarks/validation/chip_formats.py``'s
``chip-bounds-by-range-<device>.json``) each bound gets its measurements per input range,
matrix size and conditioning, transform and cumulative length; with ``--formats`` (its
``chip-formats-<device>.json``) the ops a narrow format computes less accurately than float32
get a bound of their own in that format.

``calibration/README.md`` says when to run each.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # run as a script: the benchmarks package is the root's

from benchmarks.fidelity.run import estimate_layers, summary, worst_layer_points  # noqa: E402
from benchmarks.validation.harness import (  # noqa: E402
    MIN_BAND_PROGRAMS,
    Unusable,
    read_json,
    write_atomic,
)

CALIBRATION = REPO / "pytest_jaxport" / "calibration.json"
ESTIMATE_ERRORS = REPO / "pytest_jaxport" / "estimate_error.json"
CHIP_ERRORS = REPO / "pytest_jaxport" / "chip_errors.json"
BASELINE = REPO / "benchmarks" / "fidelity" / "baseline.json"


def log(message: str) -> None:
    """Progress on stderr: stdout holds the fit's numbers (JSON)."""
    print(f"calibrate: {message}", file=sys.stderr, flush=True)


# -- the fit -------------------------------------------------------------------------------------


def read_training(path: Path) -> list[dict[str, Any]]:
    """The rows ``fidelity.py --training`` wrote, each level's sites as ``OpSite`` again."""
    from pytest_jaxport.model.census import OpSite

    data = json.loads(path.read_text(encoding="utf-8"))

    def sites(flat: Sequence[Sequence[Any]]) -> list[tuple[Any, str, str | None, float]]:
        return [(OpSite(**site), layer, lib, float(w)) for site, layer, lib, w in flat]

    return [
        {**row, "compiled": sites(row["compiled"]), "lowered": sites(row["lowered"])}
        for row in data["rows"]
    ]


def nelder_mead(
    f: Callable[[list[float]], float],
    x0: Sequence[float],
    *,
    step: float = 1.0,
    iterations: int = 400,
) -> tuple[list[float], float]:
    """Minimise ``f`` (a handful of parameters; no gradients, no SciPy)."""
    n = len(x0)
    points = [list(x0)] + [
        [x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)
    ]
    values = [f(p) for p in points]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        points, values = [points[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-4:
            break
        centre = [sum(p[i] for p in points[:-1]) / n for i in range(n)]

        def towards(t: float) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centre, points[-1], strict=True)]  # noqa: B023

        reflected = towards(-1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = towards(-2.0)
            fe = f(expanded)
            points[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            points[-1], values[-1] = reflected, fr
        else:
            contracted = towards(0.5)
            fc = f(contracted)
            if fc < values[-1]:
                points[-1], values[-1] = contracted, fc
            else:
                best = points[0]
                points = [best] + [
                    [b + 0.5 * (x - b) for b, x in zip(best, p, strict=True)] for p in points[1:]
                ]
                values = [values[0]] + [f(p) for p in points[1:]]
    i = min(range(n + 1), key=values.__getitem__)
    return points[i], values[i]


def _model(x: Sequence[float]) -> tuple[Any, Any]:
    from pytest_jaxport.model.roofline import DEFAULT_PEAKS, Calibration

    bandwidth, launch, library_call, solver, fft = (10.0**v for v in x)
    peak = replace(
        DEFAULT_PEAKS["cpu"], bandwidth=bandwidth, launch=launch, library_call=library_call
    )
    return peak, Calibration(solver=min(solver, 1.0), fft=min(fft, 1.0), source="fit")


def _errors(x: Sequence[float], rows: Sequence[Mapping[str, Any]], level: str) -> list[float]:
    peak, calibration = _model(x)
    return [
        worst_layer_points(estimate_layers(r[level], peak, calibration), r["measured"])
        for r in rows
    ]


def fit(training: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Fit cpu's bandwidth, launch and library costs and the solver/FFT efficiencies to the
    measured cpu shares (compiled-program estimates), then the same with each program left
    out in turn: the error on programs the fit did not see."""
    from pytest_jaxport.model.roofline import CALIBRATION, DEFAULT_PEAKS

    rows = [r for r in training if r["platform"] == "cpu"]
    if not rows:
        return {"error": "nothing measured on cpu"}
    cpu = DEFAULT_PEAKS["cpu"]
    x0 = [
        math.log10(v)
        for v in (cpu.bandwidth, cpu.launch, cpu.library_call, CALIBRATION.solver, CALIBRATION.fft)
    ]

    def objective(rows: Sequence[Mapping[str, Any]]) -> Callable[[list[float]], float]:
        return lambda x: statistics.fmean(_errors(x, rows, "compiled"))

    best, _ = nelder_mead(objective(rows), x0)
    held_out: list[float] = []
    programs = sorted({r["key"].split("/")[0] for r in rows})
    for name in programs:
        train = [r for r in rows if r["key"].split("/")[0] != name]
        test = [r for r in rows if r["key"].split("/")[0] == name]
        x, _ = nelder_mead(objective(train), best, step=0.5, iterations=200)
        held_out += _errors(x, test, "compiled")
    peak, calibration = _model(best)
    return {
        "fitted": {
            "cpu_bandwidth": peak.bandwidth,
            "cpu_launch": peak.launch,
            "cpu_library_call": peak.library_call,
            "solver": calibration.solver,
            "fft": calibration.fft,
        },
        "in_sample_points": summary(_errors(best, rows, "compiled")),
        "leave_one_program_out_points": summary(held_out),
        "lowered_in_sample_points": summary(_errors(best, rows, "lowered")),
        "programs_left_out": programs,
    }


def write_calibration(fitted: Mapping[str, Any], *, path: Path, measured_on: str) -> None:
    """Write the fitted constants where the package reads them (``calibration.json``)."""
    current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    source = f"fitted on the fidelity corpus ({measured_on})"
    data = {
        "about": current.get("about", "The runtime-share estimate's calibration."),
        "cpu": {
            "bandwidth": float(f"{fitted['cpu_bandwidth']:.3g}"),
            "launch": float(f"{fitted['cpu_launch']:.3g}"),
            "library_call": float(f"{fitted['cpu_library_call']:.3g}"),
            "source": source,
        },
        "solver": float(f"{fitted['solver']:.3g}"),
        "fft": float(f"{fitted['fft']:.3g}"),
        "source": f"fitted on the fidelity corpus on cpu ({measured_on})",
    }
    write_atomic(path, json.dumps(data, indent=1) + "\n")


# -- putting GPU numbers in use --------------------------------------------------------------------


BANDS = {
    "cuda_error_band": ("cuda", "GPU", "an NVIDIA GPU"),
    "tpu_error_band": ("tpu", "TPU", "a TPU"),
}
"""The error bands a results file can carry: the platform each is for, its device in a word
and where to run it."""


def adopt(results_path: Path, *, estimate_errors: Path, baseline: Path) -> int:
    """Make an accelerator's numbers the ones in use: its platform's error band
    (``estimate_error.json``, naming the device) and, from a validation run with a fidelity
    part, the fidelity baseline's entry for the device. Takes ``gpu_validation.py``'s or
    ``tpu_validation.py``'s results on the device, or ``tpu_traces.py errors``' file."""
    results = read_json(results_path)
    found = [key for key in BANDS if isinstance(results, Mapping) and key in results]
    if not found:
        raise Unusable(f"{results_path}: not a validation results file (no {' or '.join(BANDS)})")
    key = found[0]
    platform, word, where = BANDS[key]
    if results.get("mode") == "dry-run":
        raise Unusable(
            f"{results_path}: a dry-run run has no {word} numbers (its {word} columns say "
            f"'not measured: no {word}'); adopt the results of a run on {where}"
        )
    band = results.get(key)
    if not isinstance(band, Mapping):
        raise Unusable(f"{results_path}: no {platform} error band ({band})")
    levels = {k: v for k, v in band.items() if k in ("lowered", "compiled")}
    thin = {k: v["programs"] for k, v in levels.items() if v["programs"] < MIN_BAND_PROGRAMS}
    if not levels or thin:
        raise Unusable(
            f"{results_path}: the {platform} band rests on too few programs ({thin or 'none'}; "
            f"at least {MIN_BAND_PROGRAMS} per level): run the fidelity part longer"
        )
    source = _relative(results_path)
    table = read_json(estimate_errors)
    if not isinstance(table, dict) or "default" not in table:
        raise Unusable(f"{estimate_errors}: not an estimate_error.json (no 'default' table)")
    compiled_how = "deviceless compiled" if platform == "cuda" else "compiled"
    table.setdefault("platforms", {})[platform] = {
        level: {
            "points": float(round(entry["points"])),
            "programs": entry["programs"],
            "device": band["device"],
            "jaxlib": band["jaxlib"],
            **({"libtpu": band["libtpu"]} if band.get("libtpu") else {}),
            "how": f"the shipped constants' error against the measured {platform} share, the "
            f"estimate from the {compiled_how if level == 'compiled' else 'lowered'} program",
            "source": source,
        }
        for level, entry in levels.items()
    }
    write_atomic(estimate_errors, json.dumps(table, indent=1) + "\n")
    bands = ", ".join(f"{level} ±{round(e['points'])}" for level, e in levels.items())
    log(f"{platform} error band from {band['device']}: {bands} -> {estimate_errors}")
    fidelity_part = results.get("parts", {}).get("fidelity")
    if platform != "cuda" or fidelity_part is None:
        return 0  # the fidelity baseline records GPU agreement only
    fidelity_file = fidelity_part.get("results")
    fidelity_results = read_json(results_path.parent / fidelity_file) if fidelity_file else None
    if fidelity_results is None:
        raise Unusable(f"{results_path}: its fidelity results ({fidelity_file}) cannot be read")
    from benchmarks.fidelity import run as fidelity

    fidelity.update_baseline(
        fidelity_results, baseline, source=_relative(results_path.parent / fidelity_file)
    )
    log(f"fidelity baseline for {band['device']}, jaxlib {band['jaxlib']} -> {baseline}")
    return 0


# -- putting a chip's measured op errors in use --------------------------------------------------

MODEL_MISS = 10.0
"""A product no model of the chip's arithmetic comes within this many eps of (in units of
eps times the sum of its terms) is unexplained: the adoption refuses it."""
DECOMPOSITIONS: Mapping[str, tuple[str, ...]] = {
    "eigh": ("eigh 64 eigenvalues", "eigh 300 eigenvalues"),
    "svd": ("svd singular values",),
    "qr": ("qr r",),
    "cholesky": ("cholesky",),
    "lu": ("solve", "inv"),
    "triangular_solve": ("triangular_solve",),
    "fft": ("rfft", "fft", "ifft"),
}
"""Each decomposition's primitive and the measurements of its results that bound it."""


def _up(value: float, significant: int = 2) -> float:
    """Rounded up to ``significant`` digits (a bound never shrinks in the rounding; a
    measured condition number is rounded up too, so that the matrix measured is within it)."""
    if value <= 0:
        return 0.0
    digits = significant - 1 - math.floor(math.log10(value))
    return float(f"{math.ceil(value * 10**digits) / 10**digits:.6g}")  # no float noise


def chip_bounds(results: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """The bounds the plugin ships for a chip, from ``benchmarks/validation/chip_errors.py``'s
    results: each elementwise op's ulp (away from its zeros, and near them in eps), the worst sum
    error of reductions, dots and convolutions (the chip against the model of its
    arithmetic the emulation uses: the closest), decompositions against their largest
    result, and the ops equal to the CPU's bit for bit."""
    device = results["device"]
    if device.get("platform") != "tpu":
        raise Unusable(f"{source}: measured on {device.get('kind')!r}, not a TPU: a dry run "
                       "has no chip numbers; adopt the results of a run on the chip")  # fmt: skip
    ops: dict[str, dict[str, Any]] = {}
    for op, entry in results["elementwise"].items():
        ops[op] = {"scale": "result", "ulps": _up(entry["ulp_away"]),
                   "abs_eps": _up(entry["abs_eps"]), "worst_ulp": _up(entry["ulp"]),
                   "range": entry["range"]}  # fmt: skip
    for op in ("reduce_sum", "cumsum"):
        worst = max(e["eps_sum"] for e in results["reductions"][op].values())
        ops[op] = {"scale": "terms", "ulps": _up(worst)}
    products: dict[str, float] = {}
    for entry in results["products"]:
        if "float16" in entry["name"]:
            continue  # a float16 result's rounding, not the accumulation
        closest = entry["device"]["closest"]
        distance = entry["device"]["eps_sum"][closest]
        if distance > MODEL_MISS:
            raise Unusable(
                f"{source}: {entry['name']}: no model of the chip's arithmetic "
                f"comes within {MODEL_MISS:g} eps (closest {closest}: {distance:.3g})"
            )
        op = (
            "conv_general_dilated"
            if entry["name"].startswith(("conv", "depthwise"))
            else "dot_general"
        )
        products[op] = max(products.get(op, 0.0), distance)
    for op, worst in products.items():
        ops[op] = {"scale": "terms", "ulps": _up(worst)}
    decompositions = results["decompositions"]
    for op, names in DECOMPOSITIONS.items():
        ops[op] = {
            "scale": "largest",
            "ulps": _up(max(decompositions[n]["eps_max"] for n in names)),
        }
    vectors = [v for k, v in decompositions.items() if k.endswith("eigenvectors")]
    if any(v["signs_as_cpu"] < 1.0 for v in vectors):
        ops["eigh"]["sign_flips"] = True
    svd = decompositions.get("svd vectors")
    if svd is not None and min(svd["signs_as_cpu"], svd["v_signs_as_cpu"]) < 1.0:
        ops["svd"]["sign_flips"] = True
    fused = results["exact"].get("fma_shape", {})
    if fused.get("same_bits_as_separate_rounding") == 1.0 and fused.get("same_bits_as_cpu", 1) < 1:
        # The chip rounds a product before adding; XLA's CPU compiler fuses them.
        ops["mul+add"] = {"scale": "result", "ulps": 0.5}
    exact = sorted(op for op, entry in results["exact"].items()
                   if isinstance(entry, Mapping) and entry.get("same_bits_as_cpu") == 1.0
                   and op in EXACT_PRIMITIVES)  # fmt: skip
    return {
        "device": device["kind"], "jax": device["jax"], "libtpu": device["libtpu"],
        "date": device["date"], "script": "benchmarks/validation/chip_errors.py",
        "results": source, "exact": exact, "ops": dict(sorted(ops.items())),
    }  # fmt: skip


EXACT_PRIMITIVES = frozenset({"add", "sub", "mul", "max", "min", "integer_pow", "square",
                              "round", "floor"})  # fmt: skip
"""The measured exact operations that are JAX primitives (the others are compositions)."""


def adopt_chip_errors(
    results_path: Path,
    *,
    chip_errors: Path,
    by_range: Path | None = None,
    formats: Path | None = None,
) -> int:
    """Make a chip's measured op errors the bounds in use (``chip_errors.json``), with their
    measurements per range, size and conditioning (``by_range``) and per narrow format
    (``formats``) where given."""
    results = read_json(results_path)
    if not isinstance(results, Mapping) or "elementwise" not in results:
        raise Unusable(f"{results_path}: not a chip_errors.py results file (no 'elementwise')")
    platform = "tpu"
    table = read_json(chip_errors) if chip_errors.exists() else {}
    if not isinstance(table, dict):
        raise Unusable(f"{chip_errors}: not a chip_errors.json")
    table.setdefault("about", "Each op's worst error on a chip, measured against float64 by "
                     "benchmarks/validation/chip_errors.py and adopted by "
                     "calibration/calibrate.py chip-errors: what the emulation of that platform "
                     "bounds.")  # fmt: skip
    table[platform] = chip_bounds(results, source=_relative(results_path))
    ops = table[platform]["ops"]
    if by_range is not None:
        shaped = read_json(by_range)
        if not isinstance(shaped, Mapping) or "measured" not in shaped:
            raise Unusable(f"{by_range}: not a chip-bounds-by-range file (no 'measured')")
        shaped_bounds(ops, shaped["measured"], earlier=results.get("decompositions", {}))
        table[platform]["shapes"] = _relative(by_range)
    if formats is not None:
        measured = read_json(formats)
        if not isinstance(measured, Mapping) or "formats" not in measured:
            raise Unusable(f"{formats}: not a chip_formats.py analysis (no 'formats')")
        narrow_bounds(ops, measured["formats"])
        table[platform]["formats"] = _relative(formats)
    table[platform]["ops"] = dict(sorted(ops.items()))
    write_atomic(chip_errors, json.dumps(table, indent=1) + "\n")
    log(f"{platform} bounds from {table[platform]['device']}: {len(table[platform]['ops'])} ops, "
        f"{len(table[platform]['exact'])} exact -> {chip_errors}")  # fmt: skip
    return 0


LU_FROM: tuple[str, ...] = ("lu",)
"""The measurements lu's bound per size is made of: the factors' own error (the bounded run
moves the factors, then the triangular solves by theirs, so that inv and solve, measured
end to end, come out of the two: benchmarks/validation/bounded_matrices.py holds them to it)."""

MATRIX_BOUNDS: Mapping[str, tuple[tuple[str, ...], bool]] = {
    "lu": (LU_FROM, True),
    "qr": (("qr_r", "qr_q"), True),
    "svd": (("svd",), False),
    "eigh": (("eigh",), False),
    "cholesky": (("cholesky",), True),
    "triangular_solve": (("triangular_solve",), False),
}
"""Per decomposition: the measurements of ``chip_formats.py``'s matrices its bound per size
is the worst of, and whether it is kept per conditioning (the bounded run computes the
input's)."""


def shaped_bounds(
    ops: dict[str, Any], measured: Mapping[str, Any], *, earlier: Mapping[str, Any]
) -> None:
    """``ops`` (``chip_errors.json``'s) given their measurements per input range
    (``ranges``), matrix size and conditioning, transform length and cumulative position
    (``sizes``, ``size_of``), from ``chip_formats.py run``'s ranges part (``measured``);
    ``earlier``: ``chip_errors.py``'s decompositions, whose eigh at n = 300 is the largest
    matrix measured."""
    for e in measured.get("elementwise", []):
        entry = {"range": e["range"], "ulps": _up(e["ulp_away"]), "abs_eps": _up(e["abs_eps"]),
                 "worst_ulp": _up(e["ulp"]), "cpu_abs": _up(e["chip_vs_cpu_max_abs"])}  # fmt: skip
        if "**" in e["what"]:  # pow: the exponent's range too
            entry["exponent"] = json.loads(e["what"].split("** ")[1])
        ops[e["op"]].setdefault("ranges", []).append(entry)
    for op, (names, conditioned) in MATRIX_BOUNDS.items():
        sizes = [size for e in measured.get("matrices", []) for size in _matrix_sizes(e, names)]
        if not conditioned:
            sizes = [{"size": s["size"], "ulps": s["ulps"]} for s in sizes]
        if op == "eigh":  # chip_errors.py's symmetric normal matrices, 64 and 300
            sizes += [{"size": int(name.split()[1]), "ulps": _up(e["eps_max"])}
                      for name, e in earlier.items() if name.endswith(" eigenvalues")]  # fmt: skip
        ops[op].update(sizes=sizes, size_of="n", ulps=max(s["ulps"] for s in sizes))
    fft = measured.get("fft", [])
    if fft:
        sizes = [{"size": e["n"], "ulps": _up(e["rfft"])} for e in fft]
        ops["fft"].update(sizes=sizes, size_of="length", ulps=max(s["ulps"] for s in sizes))
    cumprod = measured.get("cumprod", [])
    if cumprod:
        lengths = sorted({e["n"] for e in cumprod})
        sizes = [{"size": n, "ulps": _up(max(e["ulp"] for e in cumprod if e["n"] == n))}
                 for n in lengths]  # fmt: skip
        ops["cumprod"] = {"scale": "result", "ulps": max(s["ulps"] for s in sizes),
                          "per_factor": _up(max(e["ulp_per_factor"] for e in cumprod)),
                          "sizes": sizes, "size_of": "position"}  # fmt: skip


def _matrix_sizes(entry: Mapping[str, Any], names: Sequence[str]) -> list[dict[str, Any]]:
    """One matrix measurement's sizes for a bound made of ``names``: the square matrix's
    (its condition: the SPD matrix's for cholesky) and the tall one's (qr, svd)."""
    from benchmarks.validation.chip_formats import CONDITIONS, conditioned

    found = []
    values = [v for n in names if isinstance(v := entry["eps_max"].get(n), float)]
    spd = names == ("cholesky",)
    if values:
        condition = entry["measured_condition_spd" if spd else "measured_condition"]
        found.append({"size": entry["n"], "ulps": _up(max(values)),
                      "condition": _up(condition, 3)})  # fmt: skip
    tall = entry.get("tall", {}).get("eps_max", {})
    kept = [v for n in names if isinstance(v := tall.get(n), float)]
    if kept:
        n, k = entry["n"], CONDITIONS.index(entry["condition"])
        matrix = conditioned(n // 2, entry["condition"], 8900 + n + k, m=n)  # as measured
        condition = float(np.linalg.cond(matrix.astype(np.float64)))
        found.append({"size": n, "ulps": _up(max(kept)), "condition": _up(condition, 3)})
    return found


def narrow_bounds(ops: dict[str, Any], formats: Mapping[str, Any]) -> None:
    """A bound of its own (``"bfloat16 div"``) for each op a narrow format computes less
    accurately than its float32 bound says: where the chip rounded one of the format's one-op
    cases to the other side of a midpoint the float32 bound does not reach
    (``chip_formats.py analyse``'s ``narrow_op``)."""
    for entry in formats.values():
        found = entry.get("narrow_op")
        if not found or not found["flips"]:
            continue
        general = ops.get(found["op"], {})
        if found["needed_ulps"] <= general.get("worst_ulp", general.get("ulps", 0.0)):
            continue
        worst = _up(found["needed_ulps"])
        ops[f"{found['dtype']} {found['op']}"] = {"scale": "result", "ulps": worst,
                                                  "worst_ulp": worst}  # fmt: skip


def _relative(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


# -- the command line ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fitting = commands.add_parser("fit", help="fit the estimate's calibration on a training set")
    fitting.add_argument("training", type=Path, help="fidelity.py --training's file")
    fitting.add_argument(
        "--write",
        action="store_true",
        help="write the fitted constants to pytest_jaxport/calibration.json",
    )
    fitting.add_argument("--measured-on", default="",
                         help="the machine in words, as the shipped data names it")  # fmt: skip
    fitting.add_argument("--calibration", type=Path, default=CALIBRATION, help=argparse.SUPPRESS)
    adopting = commands.add_parser("adopt", help="put a device run's error band in use")
    adopting.add_argument(
        "results", type=Path, help="a validation run's results on the device (GPU or TPU)"
    )
    adopting.add_argument("--estimate-errors", type=Path, default=ESTIMATE_ERRORS,
                          help=argparse.SUPPRESS)  # fmt: skip
    adopting.add_argument("--baseline", type=Path, default=BASELINE, help=argparse.SUPPRESS)
    chip = commands.add_parser("chip-errors", help="put a TPU's measured op errors in use")
    chip.add_argument("results", type=Path, help="chip_errors.py's results on a TPU")
    chip.add_argument("--chip-errors", type=Path, default=CHIP_ERRORS, help=argparse.SUPPRESS)
    chip.add_argument("--by-range", type=Path,
                      help="chip_formats.py's chip-bounds-by-range-<device>.json")  # fmt: skip
    chip.add_argument("--formats", type=Path,
                      help="chip_formats.py analyse's chip-formats-<device>.json")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.command == "chip-errors":
            return adopt_chip_errors(args.results, chip_errors=args.chip_errors,
                                     by_range=args.by_range, formats=args.formats)  # fmt: skip
        if args.command == "adopt":
            return adopt(args.results, estimate_errors=args.estimate_errors, baseline=args.baseline)
        found = fit(read_training(args.training))
        print(json.dumps(found, indent=1))
        if "error" in found:
            raise Unusable(f"{args.training}: {found['error']}")
        if args.write:
            measured_on = args.measured_on or f"{os.cpu_count()}-core machine"
            write_calibration(found["fitted"], path=args.calibration, measured_on=measured_on)
            log(f"wrote the fitted constants to {args.calibration}")
        return 0
    except (Unusable, OSError, ValueError, KeyError) as e:
        print(f"calibrate: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
