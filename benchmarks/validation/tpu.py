"""The TPU validation run: every tpu number pytest-jaxport predicts, measured on one TPU.

    python3 -m benchmarks.validation.tpu [--out-dir DIR] [--budget 540]     # on a TPU host
    python3 -m benchmarks.validation.tpu --dry-run [--out-dir DIR]          # CPU machine, CI

Putting a TPU run's numbers in use is calibration, not measurement:
``python calibration/calibrate.py adopt RESULTS.json`` (``calibration/README.md``).

The same harness as ``gpu.py`` (``harness.py``): one command, its parts one
after another, each as a child process under its own time limit and all within ``--budget``
seconds, ``tpu-validation-<name>.json`` and ``.md`` (plus a log) written under ``--out-dir``
after every part:

1. **device**: what the chip says it is (its kind, memory, libtpu build, and the peak rates
   its own profiler reports) against what the plugin assumes for tpu (``model/platforms.py``);
2. **demo**: ``examples/demo`` under pytest with tpu executed: each check's numerics (cpu
   against tpu, at the demo's ``[tool.jaxport.tolerance.tpu.float32]``), the outcomes, the
   measured tpu share;
3. **fidelity**: ``benchmarks/fidelity/run.py`` on the corpus with the tpu share measured: the
   estimates from the lowered and the compiled program against it (the tpu error band a
   report prints without the chip), tpu's numerics against cpu;
4. **emulation**: the emulation against the chip, by the emulation's own script
   (``python -m benchmarks.validation.emulation_chip --out-dir DIR [--dry-run]``);
5. **overhead**: the generated suite under the plugin against plain ``jax.jit``, and a plain
   suite with ``--jaxport-audit`` against without, on the chip.

A TPU admits one process at a time: the run itself never imports JAX, and its parts take the
chip in turn. ``--dry-run`` runs all of it on a machine without a TPU (CI does): JAX on cpu,
a slice of the corpus, every TPU column "not measured: no TPU". ``docs/gpu-validation.md``
says how to run it on the lent TPU (``run`` of the device tool) and what each number checks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.validation import harness
from benchmarks.validation.harness import (
    Accelerator,
    PartHandler,
    Sizes,
    Validation,
    add_run_options,
    body_lines,
    cell,
    child_part,
    demo_lines,
    error_band,
    fidelity_rows,
    numerics_lines,
    numerics_summary,
    overhead_lines,
    read_json,
    run_demo,
    run_fidelity,
    scope_text,
    share_error_lines,
    write_atomic,
)

EMULATION_CHIP = "benchmarks.validation.emulation_chip"
"""The emulation's own comparison with the chip (issue 49's emulation part)."""

TPU = Accelerator(
    platform="tpu",
    word="TPU",
    module="benchmarks.validation.tpu",
    parts=("device", "demo", "fidelity", "emulation", "overhead"),
    # A TPU host starts the chip in each process (6 to 15 s each): together 590 s of limits,
    # within a device call's 10 minutes; the budget stops the last parts first.
    limits={
        "environment": 60,
        "device": 60,
        "demo": 120,
        "fidelity": 150,
        "emulation": 100,
        "overhead": 100,
    },
    budget_s=540,
    versions=("jax", "jaxlib", "libtpu", "pytest", "numpy", "pytest-jaxport"),
    sizes={
        "tpu": Sizes(
            demo_args=(),
            fidelity_args=("--sizes", "small", "--seconds", "0.05", "--share-platforms", "tpu"),
            overhead_reps=1,
            overhead_cases=3,
        ),
        # A matmul, a decomposition the TPU runtime runs, a Pallas kernel: every kind of tpu
        # count.
        "dry-run": Sizes(
            demo_args=(),
            fidelity_args=("--programs", "mlp,solve,pallas", "--sizes", "small",
                           "--seconds", "0.02", "--share-platforms", "tpu"),
            overhead_reps=1,
            overhead_cases=3,
        ),
        "quick": Sizes(
            demo_args=("-k", "mlp or lowpass"),
            fidelity_args=("--programs", "solve", "--sizes", "small", "--seconds", "0.02",
                           "--share-platforms", "tpu"),
            overhead_reps=1,
            overhead_cases=1,
        ),
    },
    env={"TPU_ACCELERATOR_TYPE": "v5litepod-1"},  # quiets libtpu where none is set
    keeps_platforms=("tpu", "tpu,cpu"),
    about="python -m benchmarks.validation.tpu: pytest-jaxport's tpu predictions against a "
    "TPU (docs/gpu-validation.md)",
)  # fmt: skip
NOT_MEASURED = TPU.not_measured


# -- 1. the device description (a child process) ------------------------------------------------


def device_part(out: Path) -> None:
    """Child process: the chip as JAX and its profiler describe it, against the plugin's tpu
    model (its peak rates); on a machine without a TPU, the model alone."""
    import jax

    from pytest_jaxport.model.roofline import peak_for

    shipped = peak_for("tpu")
    model = {"flops": shipped.flops, "bandwidth": shipped.bandwidth, "source": shipped.source}
    device = jax.devices()[0]
    if device.platform != "tpu":
        write_atomic(out, _json({"device": None, "model": model}))
        return
    described: dict[str, Any] = {
        "kind": device.device_kind,
        "cores": getattr(device, "num_cores", None),
        "memory_bytes": (device.memory_stats() or {}).get("bytes_limit"),
    }
    try:
        import jax.extend.backend

        described["runtime"] = " ".join(jax.extend.backend.get_backend().platform_version.split())
    except (AttributeError, RuntimeError):
        described["runtime"] = None
    described.update(_profiled_rates())
    differs = {}
    for key, measured in (("flops", described.get("peak_flops")),
                          ("bandwidth", described.get("peak_bandwidth"))):  # fmt: skip
        if isinstance(measured, (int, float)) and measured > 0:
            differs[key] = {
                "model": model[key],
                "device": measured,
                "relative": round(model[key] / measured - 1.0, 3),
            }
    write_atomic(out, _json({"device": described, "model": model, "differs": differs}))


def _profiled_rates() -> dict[str, Any]:
    """The peak rates the TPU's profiler reports for its device plane (``/device:TPU:0``'s
    ``peak_teraflops_per_second`` and ``peak_hbm_bw_gigabytes_per_second``)."""
    import jax
    import jax.numpy as jnp
    from jax._src.lib import _profiler

    x = jnp.ones((128, 128))
    jax.block_until_ready(x @ x)
    options = jax.profiler.ProfileOptions()
    options.host_tracer_level = 1
    options.python_tracer_level = 0
    session = _profiler.ProfilerSession(options)
    jax.block_until_ready(x @ x)
    data = jax.profiler.ProfileData.from_serialized_xspace(session.stop())
    for plane in data.planes:
        if plane.name.startswith("/device:TPU"):
            stats = dict(plane.stats)
            flops = stats.get("peak_teraflops_per_second")
            bandwidth = stats.get("peak_hbm_bw_gigabytes_per_second")
            return {
                "profiler_name": str(stats.get("device_type_string", "")).strip("'"),
                "peak_flops": float(flops) * 1e12 if flops is not None else None,
                "peak_bandwidth": float(bandwidth) * 1e9 if bandwidth is not None else None,
            }
    return {}


def _json(data: Mapping[str, Any]) -> str:
    import json

    return json.dumps(data, indent=1)


def device(validation: Validation, limit: float) -> dict[str, Any]:
    """The device part in a child process (:func:`device_part`)."""
    code, seconds, data = child_part(validation, limit, TPU.module, "device")
    out: dict[str, Any] = {"seconds": seconds, "exit": code}
    if data is None:
        out["status"] = "timed out" if code is None else "failed"
        return out
    out.update(status="done", model=data["model"])
    if data["device"] is None:
        out.update(device=NOT_MEASURED, differs=NOT_MEASURED)
    else:
        out.update(device=data["device"], differs=data["differs"])
    return out


# -- 3. the fidelity corpus with the tpu share measured (the fidelity harness, then its results)


def fidelity_part(validation: Validation, limit: float) -> dict[str, Any]:
    """The fidelity harness over the corpus (a slice in a dry run), summarised for tpu."""
    out, data = run_fidelity(validation, limit)
    if data is not None:
        out.update(fidelity_summary(data, on_device=validation.on_device, device=validation.device))
    return out


def fidelity_summary(
    results: Mapping[str, Any], *, on_device: bool, device: str | None
) -> dict[str, Any]:
    """What the fidelity run validates for tpu: the measured share against the estimates
    (the band), the programs it could not measure and why, tpu's numerics against cpu, and
    the tpu counts per library where tpu was compiled."""
    rows, scope = fidelity_rows(results, "tpu")
    errors = results.get("aggregate", {}).get("share_error_points", {}).get("tpu")
    unmeasured = {
        f"{r['program']}/{r['size']}/{r.get('mode', 'fwd')}": r["share"]["tpu"]["error"]
        for r in rows
        if "error" in (r.get("share", {}).get("tpu") or {})
    }
    libraries: dict[str, int] = {}
    for r in rows:
        compiled = (r["counts"].get("tpu") or {}).get("compiled") or {}
        for library, n in compiled.items():
            libraries[library] = libraries.get(library, 0) + n
    numerics = scope.pop("numerics")
    return {
        **scope,
        "tpu_share_error_points": errors if on_device and errors else NOT_MEASURED,
        "tpu_share_unmeasured": unmeasured if on_device else NOT_MEASURED,
        "tpu_compiled_libraries": libraries or None,
        "cpu_share_error_points": results.get("aggregate", {})
        .get("share_error_points", {})
        .get("cpu"),
        "numerics_tpu_vs_cpu": numerics_summary(
            numerics, on_device=on_device, not_measured=NOT_MEASURED
        ),
        "tpu_error_band": tpu_band(errors, results, device) if on_device else NOT_MEASURED,
    }


def tpu_band(
    errors: Mapping[str, Any] | None, results: Mapping[str, Any], device: str | None
) -> Any:
    """The band a report should print for tpu, from this chip's measurement: per census
    level, the mean error of the estimate a report without the chip makes."""
    levels = {"lowered": "lowered", "compiled": "compiled"}
    return error_band(errors, results, device, platform="tpu", levels=levels,
                      versions=("jaxlib", "libtpu"))  # fmt: skip


# -- 4. the emulation against the chip (the emulation's own script) -------------------------------


def emulation_part(validation: Validation, limit: float, *, dry: bool) -> dict[str, Any]:
    """``python -m benchmarks.validation.emulation_chip --out-dir DIR [--dry-run]`` under the
    part's limit: its exit, what it wrote, and the summary of its JSON results where it wrote
    one."""
    folder = validation.out_dir / f"emulation-{validation.name}"
    command = [validation.python, "-m", EMULATION_CHIP, "--out-dir", str(folder)]
    if dry:
        command.append("--dry-run")
    code, seconds = validation.limited(command, limit)
    written = sorted(p.name for p in folder.glob("*")) if folder.is_dir() else []
    out: dict[str, Any] = {"seconds": seconds, "command": " ".join(command[1:]), "exit": code,
                           "folder": folder.name, "written": written}  # fmt: skip
    out["status"] = "done" if code == 0 else ("timed out" if code is None else "failed")
    for name in written:
        data = read_json(folder / name) if name.endswith(".json") else None
        if isinstance(data, Mapping) and "summary" in data:
            out["summary"] = data["summary"]
            break
    return out


# -- the run -------------------------------------------------------------------------------------


def orchestrate(args: argparse.Namespace, limits: Mapping[str, float]) -> int:
    """The harness's run with the TPU's parts (the run itself never imports JAX: a TPU admits
    one process at a time, and the parts take the chip in turn)."""
    dry = args.dry_run
    run = harness.begin(
        TPU, args, limits, name=args.name or ("dry-run" if dry else "v5e"),
        device={"kind": None, "note": NOT_MEASURED}, markdown=markdown,
    )  # fmt: skip

    def handlers(validation: Validation, seen: Mapping[str, Any]) -> dict[str, PartHandler]:
        return {
            "device": lambda limit: device(validation, limit),
            "demo": lambda limit: run_demo(validation, limit, accelerator=TPU),
            "fidelity": lambda limit: fidelity_part(validation, limit),
            "emulation": lambda limit: emulation_part(validation, limit, dry=dry),
            "overhead": harness.overhead_handler(validation, TPU),
        }

    return harness.measure(run, args, harness.prepared_env(TPU, dry=dry), handlers)


# -- Markdown ------------------------------------------------------------------------------------


def markdown(results: Mapping[str, Any]) -> str:
    """The results as the tables ``docs/gpu-validation.md`` quotes."""
    versions = results["parts"].get("environment", {}).get("versions", {})
    lines = harness.header_lines(results, TPU, software=f"libtpu {versions.get('libtpu') or '—'}")
    sections = {
        "device": _device_lines,
        "demo": lambda entry: demo_lines(
            entry, accelerator=TPU, device_word="chip", compiled=False
        ),
        "fidelity": _fidelity_lines,
        "emulation": _emulation_lines,
        "overhead": lambda entry: overhead_lines(entry, number=5, word="TPU"),
    }
    lines += body_lines(results, TPU, sections)
    return "\n".join(lines) + "\n"


def _device_lines(entry: Mapping[str, Any]) -> list[str]:
    lines = ["", "### 1. The device against the plugin's tpu model", ""]
    if "model" not in entry:
        return [*lines, cell(entry.get("status"))]
    model = entry["model"]
    described = entry.get("device")
    if not isinstance(described, Mapping):
        return [*lines, f"Device: {cell(described)}. The model: {model['flops']:.3g} FLOP/s, "
                f"{model['bandwidth']:.3g} B/s ({model['source']})."]  # fmt: skip
    lines += [
        f"{described.get('kind')}: {cell(described.get('memory_bytes'))} bytes of memory, "
        f"runtime {cell(described.get('runtime'))}.",
        "",
        "| rate | the plugin's tpu model | the chip's profiler | model / chip - 1 |",
        "|---|---:|---:|---:|",
    ]
    for key, d in (entry.get("differs") or {}).items():
        lines.append(f"| {key} | {d['model']:.4g} | {d['device']:.4g} | {d['relative']:+.0%} |")
    lines += ["", f"The model's source: {model['source']}."]
    return lines


def _fidelity_lines(fidelity: Mapping[str, Any]) -> list[str]:
    lines = ["", "### 3. The fidelity corpus: the tpu share measured against the estimates", ""]
    if "tpu_share_error_points" not in fidelity:
        return [*lines, f"{cell(fidelity.get('status'))}: {cell(fidelity.get('error'))}"]
    lines.append(
        scope_text(fidelity)
        + f"); tpu compiled, per library: {cell(fidelity['tpu_compiled_libraries'])}."
    )
    lines += share_error_lines(
        "tpu", fidelity["tpu_share_error_points"], unmeasured="lowered, compiled"
    )
    unmeasured = fidelity.get("tpu_share_unmeasured")
    if isinstance(unmeasured, Mapping) and unmeasured:
        lines += ["", "Not measured: " + "; ".join(f"{k}: {v}" for k, v in unmeasured.items())]
    return lines + numerics_lines("tpu", fidelity["numerics_tpu_vs_cpu"])


def _emulation_lines(entry: Mapping[str, Any]) -> list[str]:
    lines = [
        "",
        "### 4. The emulation against the chip (`benchmarks/validation/emulation_chip.py`)",
        "",
    ]
    if "written" not in entry:
        return [*lines, cell(entry.get("status"))]
    lines.append(
        f"{cell(entry.get('status'))} in {cell(entry.get('seconds'))} s; wrote "
        f"{', '.join(entry['written']) or 'nothing'} in `{entry['folder']}`."
    )
    if entry.get("summary") is not None:
        lines += ["", f"Summary: {cell(entry['summary'])}"]
    return lines


# -- the command line ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="pytest-jaxport's tpu predictions against a TPU (docs/gpu-validation.md)"
    )
    add_run_options(parser, TPU)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    children = {"device": lambda a: device_part(a.part_out)}
    return harness.main(TPU, args, orchestrate=orchestrate, children=children)


if __name__ == "__main__":
    sys.exit(main())
