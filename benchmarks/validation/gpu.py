"""The GPU validation run: every cuda number pytest-jaxport predicts, measured on one NVIDIA GPU.

    python3 -m benchmarks.validation.gpu [--wheelhouse DIR] [--out-dir DIR] [--budget 480]
    python3 -m benchmarks.validation.gpu --dry-run [--out-dir DIR]          # CPU machine, CI
    python3 -m benchmarks.validation.gpu --prepare-wheelhouse DIR [...]     # beforehand, online

Putting a GPU run's numbers in use is calibration, not measurement:
``python calibration/calibrate.py adopt RESULTS.json`` (``calibration/README.md``).

Made for a GPU machine that is lent rarely and briefly (minutes, one device, no internet), so
everything is prepared (the harness, ``harness.py``, is the TPU run's too: ``tpu.py``): one
command installs what is missing from a wheelhouse made beforehand, then runs four parts, each under its own time limit, all within ``--budget``
seconds (480 by default, the install step included), writing
``gpu-validation-<name>.json`` and ``.md`` (plus a log) under ``--out-dir`` after every part,
so a part that fails or runs out of time leaves what the others measured:

1. **capture**: ``jaxport capture-target`` of the device, diffed field by field against the
   shipped description of that GPU (``pytest_jaxport/gpu_targets/``);
2. **demo**: ``examples/demo`` under pytest with cuda executed: each check's numerics (cpu
   against cuda), the outcomes, the measured cuda share;
3. **fidelity**: ``benchmarks/fidelity/run.py`` on the corpus: the census the GPU compiles
   against the deviceless one (agreement per library), and the measured cuda share against
   the estimates from the lowered and the compiled program: the error band a report should
   print for cuda (``calibration/calibrate.py adopt`` puts it in use);
4. **overhead**: the generated suite under the plugin against plain ``jax.jit``, and a plain
   suite with ``--jaxport-audit`` against without, cold and warm, on the GPU.

``--dry-run`` runs all of it on a machine without a GPU (CI does, in its cuda leg): JAX on
cpu, deviceless compilation standing in for the device, a small slice of the corpus; the same
files, with every GPU column marked "not measured: no GPU".

The install step (``gpu_install.py``, standard library only; skipped by ``--dry-run`` unless
``--setup`` is given) adds what the interpreter lacks into ``.gpu-site/``: the jax CUDA
plugin pinned to the installed jaxlib, jax itself on a machine with only ``python3``, and
this checkout as ``pytest-jaxport``. ``docs/gpu-validation.md`` says how to prepare and run
it and what each number validates.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import REPO
from benchmarks.validation import harness
from benchmarks.validation.gpu_install import (
    CUDA_MAJORS,
    log,
    nvidia_smi,
    prepare_wheelhouse,
    setup,
    short_name,
)
from benchmarks.validation.harness import (
    Accelerator,
    PartHandler,
    Sizes,
    Unusable,
    Validation,
    add_run_options,
    body_lines,
    cell,
    demo_lines,
    environment_part,
    error_band,
    fidelity_rows,
    numerics_lines,
    numerics_summary,
    overhead_lines,
    run_demo,
    run_fidelity,
    scope_text,
    share_error_lines,
    summarize_demo,
)

TARGETS = REPO / "pytest_jaxport" / "gpu_targets"

VERSIONS = ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin",
            "jax-cuda13-pjrt", "pytest", "numpy", "pytest-jaxport")  # fmt: skip
"""The distributions whose versions a run records."""

GPU = Accelerator(
    platform="cuda",
    word="GPU",
    module="benchmarks.validation.gpu",
    parts=("capture", "demo", "fidelity", "overhead"),
    # Each part's own time limit (together 470 s); no part runs past the budget either, so a
    # slow install step shortens the last parts.
    limits={"environment": 60, "capture": 30, "demo": 100, "fidelity": 180, "overhead": 100},
    budget_s=480,
    versions=VERSIONS,
    sizes={
        "gpu": Sizes(
            demo_args=(),
            fidelity_args=("--seconds", "0.05", "--share-platforms", "cuda"),
            overhead_reps=2,
            overhead_cases=5,
        ),
        # A gemm, a vendor library call and a Pallas kernel: every kind of cuda count.
        "dry-run": Sizes(
            demo_args=(),
            fidelity_args=("--programs", "mlp,fft_filter,pallas", "--sizes", "small",
                           "--seconds", "0.02"),
            overhead_reps=1,
            overhead_cases=3,
        ),
        "quick": Sizes(
            demo_args=("-k", "mlp or lowpass"),
            fidelity_args=("--programs", "fft_filter", "--sizes", "small", "--seconds", "0.02"),
            overhead_reps=1,
            overhead_cases=1,
        ),
    },
    env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},  # each part takes what it uses
    about="python -m benchmarks.validation.gpu: pytest-jaxport's cuda predictions against an "
    "NVIDIA GPU (docs/gpu-validation.md)",
)  # fmt: skip
NOT_MEASURED = GPU.not_measured
"""What every GPU column says where no GPU ran (a dry run, or a GPU JAX could not use)."""


# -- 0. the environment, seen from JAX (a child process) ---------------------------------------


def gpu_environment_part(out: Path) -> None:
    """Child process: what JAX sees here, and whether the CUDA plugin can compile."""
    from pytest_jaxport._jax import deviceless

    environment_part(
        out,
        platform="cuda",
        versions=VERSIONS,
        extra=lambda: {"cuda_plugin_problem": deviceless.cuda_plugin_problem()},
    )


# -- 1. capture-target against the shipped description (pure, then the CLI) ------------------

_PROTO_TOKEN = re.compile(r'\s*(?:#[^\n]*|("(?:[^"\\]|\\.)*")|([{}:<>])|([^\s{}:<>#"]+))')


def proto_fields(text: str) -> dict[str, str]:
    """A text proto's scalar fields by dotted path (``gpu_device_info.core_count``); a
    repeated field's later values get ``[1]``, ``[2]``... Comments and quotes are dropped.

    >>> proto_fields('a { b: 1 c: "x" }  # note\\nd: 2.5\\nd: 3')
    {'a.b': '1', 'a.c': 'x', 'd': '2.5', 'd[1]': '3'}
    """
    tokens: list[tuple[str, str]] = []
    for quoted, punct, word in _PROTO_TOKEN.findall(text):
        if quoted:
            tokens.append(("value", quoted[1:-1]))
        elif punct:
            tokens.append(("punct", punct))
        elif word:
            tokens.append(("word", word))
    fields: dict[str, str] = {}
    path: list[str] = []
    i = 0
    while i < len(tokens):
        _, token = tokens[i]
        if token in ("}", ">"):
            if not path:
                raise ValueError(f"unbalanced {token!r} in a text proto")
            path.pop()
            i += 1
            continue
        following = [t for _, t in tokens[i + 1 : i + 3]]
        if following[:1] == [":"] and following[1:] not in ([], ["{"], ["<"]):
            key = ".".join([*path, token])
            n = sum(1 for k in fields if k == key or k.startswith(f"{key}["))
            fields[f"{key}[{n}]" if n else key] = tokens[i + 2][1]
            i += 3
        elif following[:1] in (["{"], ["<"]) or following[:2] in ([":", "{"], [":", "<"]):
            path.append(token)
            i += 2 if following[:1] != [":"] else 3
        else:
            raise ValueError(f"cannot read a text proto at {token!r} (then {following})")
    return fields


def shipped_description_for(kind: str) -> str | None:
    """The shipped description (``h200``) whose device name is ``kind``, or has its model."""
    names: dict[str, str] = {}
    for path in sorted(TARGETS.glob("*.txtpb")):
        names[path.stem] = proto_fields(path.read_text(encoding="utf-8")).get(
            "device_description_str", ""
        )
    for stem, name in names.items():
        if name and name == kind:
            return stem
    model = short_name(kind)
    return next((stem for stem, name in names.items() if short_name(name) == model), None)


def diff_descriptions(shipped: str, captured: str) -> dict[str, Any]:
    """Field by field: what the shipped description says that the device does not."""
    a, b = proto_fields(shipped), proto_fields(captured)

    def same(x: str, y: str) -> bool:
        try:
            return float(x) == float(y)
        except ValueError:
            return x == y

    differs = []
    for key in sorted(set(a) & set(b)):
        if not same(a[key], b[key]):
            entry: dict[str, Any] = {"field": key, "shipped": a[key], "captured": b[key]}
            with contextlib.suppress(ValueError, ZeroDivisionError):
                entry["relative"] = round(float(b[key]) / float(a[key]) - 1.0, 4)
            differs.append(entry)
    return {
        "fields_shipped": len(a),
        "fields_captured": len(b),
        "differs": differs,
        "only_shipped": sorted(set(a) - set(b)),
        "only_captured": sorted(set(b) - set(a)),
    }


def capture_part(validation: Validation, limit: float) -> dict[str, Any]:
    """``jaxport capture-target`` on the device, diffed against the shipped description."""
    written = validation.out_dir / f"{validation.name}-captured.txtpb"
    written.unlink(missing_ok=True)
    code, seconds = validation.limited(
        [validation.python, "-c",
         "import sys; from pytest_jaxport.cli import main; sys.exit(main())",
         "capture-target", "-o", str(written)],
        limit,
    )  # fmt: skip
    kind = validation.device
    shipped = shipped_description_for(kind) if kind else (validation.target or "h100")
    shipped_text = (TARGETS / f"{shipped}.txtpb").read_text("utf-8") if shipped else ""
    out: dict[str, Any] = {"seconds": seconds, "shipped": shipped, "device": kind or NOT_MEASURED}
    if code == 0 and written.is_file():
        captured = written.read_text(encoding="utf-8")
        out.update(status="done", captured=written.name, error=None)
        out["device"] = proto_fields(captured).get("device_description_str", kind)
        if shipped is None:
            out["error"] = f"no shipped description for {kind}: the captured one is the first"
        out.update(diff_descriptions(shipped_text or captured, captured))
        return out
    tail = validation.logfile.read_text(encoding="utf-8").strip().splitlines()[-1:]
    # Without a GPU the capture is expected to fail: the part did what it could.
    out.update(status="failed" if kind else "done", captured=NOT_MEASURED if not kind else None)
    out["error"] = "stopped at the limit" if code is None else " ".join(tail)
    out.update(
        {key: NOT_MEASURED for key in ("fields_captured", "differs", "only_shipped",
                                        "only_captured")},
        fields_shipped=len(proto_fields(shipped_text)),
    )  # fmt: skip
    return out


# -- 2. the demo suite with cuda executed (pytest, then its report, pure) -----------------------


def demo_part(validation: Validation, limit: float, *, compile_cuda: bool) -> dict[str, Any]:
    """The demo under pytest with the plugin's report: cuda executed on a GPU, compiled
    deviceless in a dry run (``compile_cuda``: where the CUDA plugin is installed)."""
    extra = ("--jaxport-compile=cuda",) if compile_cuda else ()
    return run_demo(validation, limit, accelerator=GPU, extra=extra)


def demo_summary(report: Mapping[str, Any], *, gpu: bool) -> dict[str, Any]:
    """The demo's plugin report, as the validation reads it (:func:`harness.summarize_demo`):
    cuda compiled on the GPU, or deviceless in a dry run."""
    return summarize_demo(report, accelerator=GPU, on_device=gpu,
                          compiled_at="device" if gpu else "deviceless")  # fmt: skip


# -- 3. the fidelity corpus (the fidelity harness, then its results, pure) ----------------------


def fidelity_part(validation: Validation, limit: float) -> dict[str, Any]:
    """The fidelity harness over the corpus (a slice in a dry run), summarised for cuda."""
    target = ("--target", validation.target) if validation.target else ()
    out, data = run_fidelity(validation, limit, extra=target)
    if data is not None:
        out.update(fidelity_summary(data, gpu=validation.on_device, device=validation.device))
    return out


def _overall(pairs: Sequence[tuple[Mapping[str, int], Mapping[str, int]]], library: str) -> Any:
    low = sum(min(a.get(library, 0), b.get(library, 0)) for a, b in pairs)
    high = sum(max(a.get(library, 0), b.get(library, 0)) for a, b in pairs)
    return round(100.0 * low / high, 1) if high else None


def fidelity_summary(
    results: Mapping[str, Any], *, gpu: bool, device: str | None
) -> dict[str, Any]:
    """What the fidelity run validates for cuda: the deviceless census against the GPU's
    (per library), the measured cuda share against the estimates (the band), cuda's
    numerics against cpu."""
    rows, scope = fidelity_rows(results, "cuda")
    aggregate = results.get("aggregate", {})
    pairs = [
        (r["gpu_vs_deviceless"]["deviceless"], r["gpu_vs_deviceless"]["gpu"])
        for r in rows
        if "gpu" in r.get("gpu_vs_deviceless", {})
    ]
    if gpu:
        deviceless = [a for a, _ in pairs]
    else:
        deviceless = [
            r["counts"]["cuda"]["compiled"]
            for r in rows
            if (r["counts"].get("cuda") or {}).get("compiled") is not None
        ]
    libraries = sorted({lib for counts in deviceless for lib in counts} |
                       {lib for _, counts in pairs for lib in counts})  # fmt: skip
    by_library = {
        lib: {
            "deviceless": sum(c.get(lib, 0) for c in deviceless),
            "gpu": sum(b.get(lib, 0) for _, b in pairs) if gpu else NOT_MEASURED,
            "agreement": _overall(pairs, lib) if gpu else NOT_MEASURED,
        }
        for lib in libraries
    }
    causes = sorted({c for r in rows for c in r.get("gpu_vs_deviceless", {}).get("causes", ())})
    errors = aggregate.get("share_error_points", {})
    cuda_errors = errors.get("cuda")
    deviceless_error = [
        (r["counts"].get("cuda") or {}).get("compile_error")
        for r in rows
        if (r["counts"].get("cuda") or {}).get("compile_error")
    ]
    numerics = scope.pop("numerics")
    return {
        **scope,
        "target": results.get("target"),
        "lowered_vs_compiled": aggregate.get("agreement", {}),
        "deviceless_vs_gpu": {
            "programs": len(pairs) if gpu else NOT_MEASURED,
            "by_library": by_library,
            "causes": causes if gpu else NOT_MEASURED,
            "deviceless_compile_problem": deviceless_error[0] if deviceless_error else None,
        },
        "cuda_share_error_points": cuda_errors if gpu and cuda_errors else NOT_MEASURED,
        "cpu_share_error_points": errors.get("cpu"),
        "numerics_cuda_vs_cpu": numerics_summary(
            numerics, on_device=gpu, not_measured=NOT_MEASURED
        ),
        "cuda_error_band": cuda_band(cuda_errors, results, device) if gpu else NOT_MEASURED,
    }


def cuda_band(
    errors: Mapping[str, Any] | None, results: Mapping[str, Any], device: str | None
) -> Any:
    """The band a report should print for cuda, from this GPU's measurement: per census
    level, the mean error of the estimate a report without the GPU makes (``lowered``; and
    ``compiled``: the deviceless compile's)."""
    levels = {"lowered": "lowered", "compiled": "compiled_deviceless"}
    return error_band(errors, results, device, platform="cuda", levels=levels)


# -- the run -------------------------------------------------------------------------------------


def orchestrate(args: argparse.Namespace, limits: Mapping[str, float]) -> int:
    """The install step where it runs, then the harness's run with the GPU's parts; or the
    wheelhouse (``--prepare-wheelhouse``), made online beforehand."""
    if args.prepare_wheelhouse:
        return prepare_wheelhouse(
            args.prepare_wheelhouse, jax_version=args.jax or _installed_jaxlib(),
            python_version=args.python_version, cuda=args.cuda,
            with_cuda_libraries=args.with_cuda_libraries,
            platforms=("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                       "manylinux_2_17_x86_64", "manylinux2014_x86_64"),
        )  # fmt: skip
    dry = args.dry_run
    gpu_info = None if dry else nvidia_smi()
    if not dry and gpu_info is None:
        print(
            "gpu-validation: no NVIDIA GPU here (nvidia-smi cannot be run or lists none); on a "
            "machine without one, run it with --dry-run",
            file=sys.stderr,
        )
        return 2
    kind = gpu_info["name"] if gpu_info else None
    env = harness.prepared_env(GPU, dry=dry)
    run = harness.begin(
        GPU, args, limits, name=args.name or ("dry-run" if dry else short_name(kind or "")),
        device={"kind": kind, **gpu_info} if gpu_info else {"kind": None, "note": NOT_MEASURED},
        markdown=markdown,
    )  # fmt: skip
    if args.setup or not dry:
        try:
            run.results["setup"] = setup(sys.executable, env, args.wheelhouse, gpu=not dry)
        except (Unusable, OSError, subprocess.SubprocessError) as e:
            run.results["setup"] = {"error": str(e)}
            run.save()
            print(f"gpu-validation: the install step failed: {e}", file=sys.stderr)
            return 2
        log(f"setup: {'; '.join(run.results['setup']['actions'])}")
        run.save()

    def handlers(validation: Validation, seen: Mapping[str, Any]) -> dict[str, PartHandler]:
        compile_cuda = validation.on_device or seen.get("cuda_plugin_problem") is None
        return {
            "capture": lambda limit: capture_part(validation, limit),
            "demo": lambda limit: demo_part(validation, limit, compile_cuda=compile_cuda),
            "fidelity": lambda limit: fidelity_part(validation, limit),
            "overhead": harness.overhead_handler(validation, GPU),
        }

    return harness.measure(run, args, env, handlers, target=args.target)


# -- Markdown ------------------------------------------------------------------------------------


def markdown(results: Mapping[str, Any]) -> str:
    """The results as the tables ``benchmarks/validation/README.md`` and the docs quote."""
    device = results["device"]
    versions = results["parts"].get("environment", {}).get("versions", {})
    software = "CUDA plugin " + (
        ", ".join(f"{k} {v}" for k, v in versions.items() if "plugin" in k and v) or "—"
    )
    if device.get("driver"):
        software += f"; driver {device['driver']} (CUDA {device['cuda']})"
    lines = harness.header_lines(results, GPU, software=software)
    if results.get("setup"):
        setup_done = results["setup"]
        lines += [
            f"Install step: {'; '.join(setup_done.get('actions', [])) or setup_done.get('error')}",
            "",
        ]
    sections = {
        "capture": _capture_lines,
        "demo": lambda entry: demo_lines(entry, accelerator=GPU, device_word="GPU", compiled=True),
        "fidelity": _fidelity_lines,
        "overhead": lambda entry: overhead_lines(entry, number=4, word="GPU"),
    }
    lines += body_lines(results, GPU, sections)
    return "\n".join(lines) + "\n"


def _capture_lines(capture: Mapping[str, Any]) -> list[str]:
    lines = ["", "### 1. `jaxport capture-target` against the shipped description", ""]
    if capture.get("status") == "not run":
        return [*lines, "Not run."]
    if not isinstance(capture.get("differs"), list):
        return [
            *lines,
            f"Captured: {cell(capture.get('captured'))} ({cell(capture.get('error'))}); "
            f"shipped description `{capture.get('shipped')}` has "
            f"{cell(capture.get('fields_shipped'))} fields.",
        ]
    lines += [
        f"Captured `{capture['captured']}` from {capture['device']}; against the shipped "
        f"`{capture['shipped']}` ({capture['fields_shipped']} fields): {len(capture['differs'])} "
        f"differ, {len(capture['only_shipped'])} only shipped, {len(capture['only_captured'])} "
        "only captured.",
        "",
        "| field | shipped | captured | relative |",
        "|---|---|---|---:|",
    ]
    for d in capture["differs"]:
        lines.append(
            f"| {d['field']} | {cell(d['shipped'])} | {cell(d['captured'])} | "
            f"{cell(d.get('relative'))} |"
        )
    if capture["only_captured"]:
        lines += ["", f"Only captured: {', '.join(capture['only_captured'])}"]
    return lines


def _fidelity_lines(fidelity: Mapping[str, Any]) -> list[str]:
    lines = ["", "### 3. The fidelity corpus: deviceless against the GPU", ""]
    if "deviceless_vs_gpu" not in fidelity:
        return [*lines, f"{cell(fidelity.get('status'))}: {cell(fidelity.get('error'))}"]
    d = fidelity["deviceless_vs_gpu"]
    lines += [
        scope_text(fidelity)
        + f"; deviceless against `{fidelity['target']}`). Lowered against compiled census: "
        + "; ".join(
            f"{p} {e['percent']:.1f}% over {e['programs']}"
            for p, e in fidelity["lowered_vs_compiled"].items()
        )
        + ".",
        "",
        "| library | dispatches, deviceless | dispatches, GPU | agreement |",
        "|---|---:|---:|---:|",
    ]
    for lib, e in d["by_library"].items():
        agreement = e["agreement"]
        lines.append(
            f"| {lib} | {e['deviceless']} | {cell(e['gpu'])} | "
            + (f"{agreement:.0f}%" if isinstance(agreement, (int, float)) else cell(agreement))
            + " |"
        )
    if d.get("deviceless_compile_problem"):
        lines += ["", f"Deviceless cuda: {d['deviceless_compile_problem']}"]
    if isinstance(d.get("causes"), list) and d["causes"]:
        lines += ["", "Why they differ: " + "; ".join(d["causes"])]
    lines += share_error_lines(
        "cuda", fidelity["cuda_share_error_points"], unmeasured="lowered, compiled (deviceless)"
    )
    return lines + numerics_lines("cuda", fidelity["numerics_cuda_vs_cpu"])


# -- the command line ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="pytest-jaxport's cuda predictions against an NVIDIA GPU "
        "(docs/gpu-validation.md)"
    )
    add_run_options(parser, GPU)
    parser.add_argument("--target", help="GPU description the deviceless compile uses (default: "
                        "the shipped one for this GPU; h100 in a dry run)")  # fmt: skip
    parser.add_argument("--wheelhouse", type=Path,
                        help="install offline from this folder (--prepare-wheelhouse made it)")  # fmt: skip
    parser.add_argument("--setup", action="store_true",
                        help="run the install step in a dry run too (a GPU run always does)")  # fmt: skip
    parser.add_argument("--prepare-wheelhouse", type=Path, metavar="DIR",
                        help="download the wheels the install step needs into DIR (online)")  # fmt: skip
    parser.add_argument("--jax", help="--prepare-wheelhouse: the jax version (default: this "
                        "interpreter's jaxlib)")  # fmt: skip
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}",
                        help="--prepare-wheelhouse: the GPU machine's Python (default: this one)")  # fmt: skip
    parser.add_argument("--cuda", choices=CUDA_MAJORS, default="12",
                        help="--prepare-wheelhouse: the jax CUDA plugin's major (12; 13 for "
                        "jax >= 0.7.2 and a CUDA 13 driver)")  # fmt: skip
    parser.add_argument("--with-cuda-libraries", action="store_true",
                        help="--prepare-wheelhouse: also the nvidia-* wheels (a machine without "
                        "a CUDA toolkit of its own; about 3 GB)")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    children = {"environment": lambda a: gpu_environment_part(a.part_out)}
    return harness.main(GPU, args, orchestrate=orchestrate, children=children)


def _installed_jaxlib() -> str:
    import importlib.metadata as metadata

    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        raise Unusable("no jaxlib here: give --jax VERSION") from None


if __name__ == "__main__":
    sys.exit(main())
