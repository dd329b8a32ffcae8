"""What the JAX profiler records on a TPU, and how far the tpu share's estimate is from it.

    python -m benchmarks.validation.tpu_traces record DIR          # on a TPU machine (one process)
    python -m benchmarks.validation.tpu_traces errors DIR [--out benchmarks/results/tpu-band-v5e.json]

``record`` compiles and runs each program of :data:`PROGRAMS` on the chip and writes, per
program, the optimized HLO (``hlo-NAME.txt``) and the serialized XSpace of one in-memory
profiler session around three runs (``xspace-NAME.pb``), plus ``manifest.json`` (the device,
jax, jaxlib and libtpu). ``errors`` reads a recording anywhere (CI has no TPU): per program
the tpu share the plugin measures from the trace (``pytest_jaxport._jax.profile``, the
compiled-level classification of ``model/classification.py``) against the shares it would estimate
without the chip, from the compiled program (the chip's HLO: the deviceless TPU compile gives
the same, ``../shared/research/tpu.md`` §3c) and from the lowered one (lowered here for tpu),
in percentage points of the worst layer, as ``benchmarks/fidelity/run.py`` measures them for cpu and cuda.
Their means over the programs are the tpu error band; ``calibration/calibrate.py adopt``
puts it in use (``pytest_jaxport/estimate_error.json``).

The recording of 2026-12-06 on the lent TPU v5e is ``benchmarks/results/tpu-v5e-traces/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform as platform_module
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import REPO

RUNS = 3
"""Runs inside each recorded profiler session (after one outside it)."""


def programs() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """The recorded programs: a fused matmul, the TPU runtime's routines (LU, eigh,
    Cholesky, QR, top-k), XLA's own sort, cumsum, FFT and a scan, and a Pallas kernel."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def spd(n: int) -> Any:
        a = np.random.default_rng(0).normal(size=(n, n)).astype(np.float32)
        return a @ a.T + n * np.eye(n, dtype=np.float32)

    def kernel(x_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] * 2.0 + 1.0

    def pallas(x: Any) -> Any:
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            compiler_params=pltpu.CompilerParams(),
        )(x)

    def scan(w: Any, x: Any) -> Any:
        return lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=16)[0]

    rng = np.random.default_rng(1)

    def normal(*shape: int) -> Any:
        return rng.normal(size=shape).astype(np.float32)

    # The order of the draws is the recording's: keep it.
    matmul = (normal(256, 256),) * 2
    solve_b = normal(64, 8)
    sort_x = normal(4096)
    top_k_x = normal(128, 4096)
    cumsum_x = normal(4096)
    fft_x = normal(1024)
    scan_args = (normal(32, 32), normal(32))
    return {
        "matmul": (lambda a, b: jnp.tanh(a @ b), matmul),
        "solve": (jnp.linalg.solve, (spd(64), solve_b)),
        "eigh": (lambda a: jnp.linalg.eigh(a)[0], (spd(64),)),
        "cholesky": (jnp.linalg.cholesky, (spd(64),)),
        "qr": (lambda a: jnp.linalg.qr(a)[1], (spd(64),)),
        "sort": (jnp.sort, (sort_x,)),
        "top_k": (lambda x: lax.top_k(x, 8)[0], (top_k_x,)),
        "cumsum": (jnp.cumsum, (cumsum_x,)),
        "fft": (lambda x: jnp.abs(jnp.fft.fft(x)), (fft_x,)),
        "scan": (scan, scan_args),
        "pallas": (pallas, (jnp.ones((8, 128), jnp.float32),)),
    }


# -- record (on a TPU) ---------------------------------------------------------------------------


def record(folder: Path) -> int:
    import importlib.metadata as metadata

    import jax
    from jax._src.lib import _profiler

    if jax.devices()[0].platform != "tpu":
        print(f"tpu_traces: no TPU here ({jax.devices()[0]}); record on a TPU machine",
              file=sys.stderr)  # fmt: skip
        return 2
    folder.mkdir(parents=True, exist_ok=True)
    versions = {}
    for name in ("jax", "jaxlib", "libtpu", "pytest-jaxport"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    manifest: dict[str, Any] = {
        "about": "benchmarks/validation/tpu_traces.py record: per program the chip's optimized HLO and "
        "one profiler session's XSpace",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": jax.devices()[0].device_kind,
        "versions": versions,
        "python": sys.version.split()[0],
        "machine": platform_module.platform(),
        "runs_per_session": RUNS,
        "programs": {},
    }
    for name, (fn, args) in programs().items():
        started = time.perf_counter()
        placed = tuple(jax.device_put(a) for a in args)
        compiled = jax.jit(fn).lower(*placed).compile()
        (folder / f"hlo-{name}.txt").write_text(compiled.as_text(), encoding="utf-8")

        def run(compiled: Any = compiled, placed: tuple[Any, ...] = placed) -> object:
            return jax.block_until_ready(compiled(*placed))

        run()
        options = jax.profiler.ProfileOptions()
        options.host_tracer_level = 1
        options.python_tracer_level = 0
        session = _profiler.ProfilerSession(options)
        for _ in range(RUNS):
            run()
        (folder / f"xspace-{name}.pb").write_bytes(session.stop())
        manifest["programs"][name] = {"seconds": round(time.perf_counter() - started, 2)}
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        print(name, manifest["programs"][name]["seconds"], flush=True)
    return 0


# -- errors (anywhere) ---------------------------------------------------------------------------


def measured_layers(folder: Path, name: str) -> tuple[dict[str, float], dict[str, float], float]:
    """The tpu share the plugin measures from a recorded trace: layers, libraries, seconds."""
    from pytest_jaxport._jax.profile import read_trace, seconds_per_run
    from pytest_jaxport.model.classification import classify
    from pytest_jaxport.model.hlo import instruction_sites
    from pytest_jaxport.model.runtime_share import measured_share

    trace = read_trace((folder / f"xspace-{name}.pb").read_bytes())
    times = seconds_per_run(trace.lines(), RUNS)
    sites = instruction_sites((folder / f"hlo-{name}.txt").read_text(encoding="utf-8"))
    share = measured_share(times, sites, lambda op, t: classify("tpu", op, t, level="compiled"))
    return dict(share.layers), dict(share.libraries), share.seconds


def errors(folder: Path) -> dict[str, Any]:
    """Per recorded program, measured against estimated tpu shares; the band per level."""
    import jax

    from benchmarks.fidelity import run as fidelity
    from pytest_jaxport._jax import stablehlo
    from pytest_jaxport.model.hlo import parse_compiled_hlo
    from pytest_jaxport.model.roofline import CALIBRATION, peak_for

    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    peak = peak_for("tpu")
    rows = []
    for name, (fn, args) in programs().items():
        if not (folder / f"xspace-{name}.pb").is_file():
            continue
        measured, libraries, seconds = measured_layers(folder, name)
        compiled = parse_compiled_hlo((folder / f"hlo-{name}.txt").read_text(encoding="utf-8"))
        traced = jax.jit(fn).trace(*args)
        lowered = stablehlo.read_program(traced.lower(lowering_platforms=("tpu",)))
        estimated = {
            "compiled": fidelity.estimate_layers(
                fidelity.flatten(compiled, "tpu", "compiled"), peak, CALIBRATION
            ),
            "lowered": fidelity.estimate_layers(
                fidelity.flatten(lowered, "tpu", "lowered"), peak, CALIBRATION
            ),
        }
        rows.append(
            {
                "program": name,
                "measured": measured,
                "measured_libraries": libraries,
                "measured_seconds": seconds,
                "estimated": estimated,
                "error_points": {
                    level: round(fidelity.worst_layer_points(layers, measured), 2)
                    for level, layers in estimated.items()
                },
            }
        )
    band = {}
    for level in ("lowered", "compiled"):
        points = [row["error_points"][level] for row in rows]
        band[level] = {**fidelity.summary(points), "from": level}
    return {
        "about": "benchmarks/validation/tpu_traces.py errors: the tpu share measured on the chip (from "
        "recorded traces) against the estimates made without it, in percentage points of "
        "the worst layer",
        "recording": _relative(folder),
        "device": manifest["device"],
        "versions": manifest["versions"],
        "recorded": manifest["date"],
        "peak": {"flops": peak.flops, "bandwidth": peak.bandwidth, "source": peak.source},
        "rows": rows,
        "tpu_error_band": {
            "device": manifest["device"],
            "jaxlib": manifest["versions"]["jaxlib"],
            "libtpu": manifest["versions"].get("libtpu"),
            **{
                level: {
                    "points": s["mean"],
                    "programs": s["programs"],
                    "p90": s["p90"],
                    "from": level,
                }
                for level, s in band.items()
            },
        },
    }


def _relative(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record", help="record the traces (on a TPU machine)")
    recording.add_argument("folder", type=Path)
    measuring = commands.add_parser("errors", help="the tpu share's estimate errors")
    measuring.add_argument("folder", type=Path)
    measuring.add_argument("--out", type=Path, help="write the results JSON here")
    args = parser.parse_args(argv)
    if args.command == "record":
        return record(args.folder)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # nothing runs: lowering only
    results = errors(args.folder)
    text = json.dumps(results, indent=1) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    band = results["tpu_error_band"]
    for level in ("lowered", "compiled"):
        b: Mapping[str, Any] = band[level]
        print(f"tpu {level}: ±{b['points']} points over {b['programs']} programs (p90 {b['p90']})")
    for row in results["rows"]:
        print(f"  {row['program']:9s} measured {row['measured']} errors {row['error_points']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
