"""The tpu emulation's bounded run against the chip's measured matrix errors (issue 55 item 10).

    python -m benchmarks.validation.bounded_matrices [--out benchmarks/results/bounded-matrices-tpu-v5-lite]

``benchmarks/validation/chip_formats.py run`` (ranges) measured TPU v5 lite's error on lu,
inv, solve, slogdet, qr, svd, eigh, cholesky and a triangular solve of matrices of 16, 64 and
256 at five conditionings (``chip-bounds-by-range-tpu-v5-lite.json``, ``measured.matrices``:
the matrices are seeded, so they are made again here). Here, each is computed by the
emulation's bounded run (every op moved by the shipped bound at its size and the input's
conditioning, ``pytest_jaxport/chip_errors.json``) and measured the same way, against float64.
A bounded error below the chip's is a bound that would let a check read "match" where the
chip may differ: the table says where, for the ops bounded directly (lu's factors, qr, svd,
eigh, cholesky, the triangular solve) and for those made of them end to end (inv, solve,
slogdet: lu's factors and the solves moved in turn). No chip needed: it reads the recording.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.validation import chip_formats

RESULTS = Path(__file__).resolve().parents[1] / "results"
RECORDED = RESULTS / "chip-bounds-by-range-tpu-v5-lite.json"
MEASURES = ("lu", "inv", "solve", "slogdet", "qr_r", "qr_q", "svd", "triangular_solve", "eigh",
            "cholesky")  # fmt: skip


def bounded(fn: Callable[..., Any], *args: Any) -> list[np.ndarray]:
    """``fn(*args)``'s outputs from the tpu emulation's bounded run (as ``chip_formats.on_cpu``
    gives the CPU's)."""
    import jax

    from pytest_jaxport._jax.emulate import emulate

    emulated = emulate(fn, args, platform="tpu")
    if emulated.bounded is None:
        raise RuntimeError(f"not emulated: {emulated.emulation}")
    run = emulated.bounded()
    if run.outputs is None:
        raise RuntimeError(f"the bounded run failed: {run.error}")
    del jax  # (imported for the emulation's backend)
    return [np.asarray(leaf.array) for leaf in run.outputs.leaves]


def measure(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One recorded size and conditioning: the bounded run's errors beside the chip's."""
    n, condition = int(entry["n"]), str(entry["condition"])
    k = chip_formats.CONDITIONS.index(condition)
    a = chip_formats.conditioned(n, condition, 8000 + 10 * n + k)
    b = chip_formats.normal(8500 + n + k, n, 8)
    sym = chip_formats.conditioned(n, condition, 8700 + n + k, kind="symmetric")
    spd = chip_formats.conditioned(n, condition, 8800 + n + k, kind="spd")
    found = {**chip_formats._matrix_measures(a, b, bounded),
             **chip_formats._spd_measures(sym, spd, bounded)}  # fmt: skip
    rows = {}
    for name in MEASURES:
        chip, mine = entry["eps_max"].get(name), found.get(name)
        if isinstance(chip, float) and isinstance(mine, float):
            rows[name] = {"chip": chip, "bounded": mine, "covered": mine >= chip}
    return {"n": n, "condition": condition, "measured_condition": entry["measured_condition"],
            "ops": rows}  # fmt: skip


def markdown(results: Mapping[str, Any]) -> str:
    lines = ["# The emulation's bounded run against the chip's matrix errors", "",
             "Errors in eps × the largest result (slogdet: eps × max(|log det|, 1)), against "
             "float64: the chip's (TPU v5 lite, `chip-bounds-by-range-tpu-v5-lite.json`) and the "
             "bounded run's (`pytest_jaxport/chip_errors.json`). **bold**: the bounded run's "
             "error is below the chip's (not covered).", "",
             "| n | condition | " + " | ".join(MEASURES) + " |", "|---|---|" + "---|" * len(MEASURES)]  # fmt: skip
    for e in results["entries"]:
        cells = []
        for name in MEASURES:
            row = e["ops"].get(name)
            if row is None:
                cells.append("")
                continue
            text = f"{row['chip']:.3g} / {row['bounded']:.3g}"
            cells.append(text if row["covered"] else f"**{text}**")
        lines.append(f"| {e['n']} | {e['condition']} | " + " | ".join(cells) + " |")
    s = results["summary"]
    lines += ["", f"Covered: {s['covered']} of {s['measured']} (chip / bounded per cell)."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recorded", type=Path, default=RECORDED)
    parser.add_argument("--out", type=Path, help="the results' stem (.json, .md)")
    parser.add_argument("--sizes", default="16,64,256")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sizes = {int(s) for s in args.sizes.split(",")}
    recorded = json.loads(args.recorded.read_text())["measured"]["matrices"]
    entries = []
    for entry in recorded:
        if entry["n"] in sizes:
            entries.append(measure(entry))
            print(f"bounded_matrices: n={entry['n']} {entry['condition']}: "
                  + ", ".join(f"{k} {v['chip']:.3g}/{v['bounded']:.3g}"
                              for k, v in entries[-1]["ops"].items()), flush=True)  # fmt: skip
    rows = [r for e in entries for r in e["ops"].values()]
    results = {"about": __doc__.splitlines()[0], "recorded": str(args.recorded.name),
               "entries": entries,
               "summary": {"measured": len(rows), "covered": sum(r["covered"] for r in rows)}}  # fmt: skip
    if args.out is not None:
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
