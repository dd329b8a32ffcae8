"""The TPU compiler without a TPU against the chip: the fidelity corpus compiled both ways.

    python benchmarks/tpu_chip.py deviceless --out DIR     # JAX_PLATFORMS=cpu; any machine
    python benchmarks/tpu_chip.py chip --modules DIR --out DIR   # on a TPU host
    python benchmarks/tpu_chip.py compare A.json B.json [--out FILE]

``deviceless`` lowers every program of the fidelity corpus (``fidelity_corpus.py``: both
sizes, forward and gradient) for tpu as pytest-jaxport does on a machine without a TPU
(``tracing.trace``, the described TPU where Pallas asks, ``lowering.lower``), keeps each
module's bytes (``DIR/modules/*.mlirbc``) and compiles it as ``compile = ["tpu"]`` does:
libtpu in its worker (``pytest_jaxport._jax.libtpu``), for v5e (a program partitioned over
two devices for v5e:2x2). ``chip``, on the TPU host, compiles the same bytes on the chip
(its own client), and each program again the way a user's program compiles there
(``jax.jit(fn).lower(*args).compile()`` with the arguments on the TPU). Each records, per
program: the custom-call targets and their counts, the census's libraries (as
``model.targets`` classifies them), ``memory_analysis``, the entry computation's layouts,
the number of fusions and a digest of the optimized HLO with its metadata and source tables
removed (and the keys of each ``backend_config`` sorted). ``compare`` says where two
recordings agree, field by field.

Results: ``benchmarks/results/tpu-chip-*.json`` (benchmarks/README.md shows the tables). A
step stops adding programs at ``--deadline`` seconds and writes what it has.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fidelity_corpus as corpus  # noqa: E402

FIELDS = ("custom_calls", "libraries", "memory", "entry_layout", "fusions", "hlo")
"""What ``compare`` holds two recordings of a program to."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- what one compiled program is (pure) -------------------------------------------------------

_METADATA = re.compile(r",?\s*metadata=\{[^{}]*\}")
_TABLES = re.compile(
    r"^(FileNames|FunctionNames|FileLocations|StackFrames)\n(?:.+\n)*?\n", re.MULTILINE
)
_BACKEND_CONFIG = re.compile(r"backend_config=(\{.*?\})(?=[,\s]|$)")
_SHARDING = re.compile(r",\s*sharding=\{[^{}]*\}")
_FRONTEND = re.compile(r",\s*frontend_attributes=\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")
_HEADER_EXTRAS = re.compile(r",\s*allow_spmd_sharding_propagation_to_\w+=\{[^}]*\}")


def stripped(hlo: str) -> str:
    """The optimized HLO without what names the Python source or the caller (metadata, the
    stack-frame tables, shardings of a single device, frontend attributes), each
    ``backend_config``'s keys sorted (a chip and a deviceless compile order them apart)."""
    text = _TABLES.sub("", hlo + "\n")
    text = _METADATA.sub("", text)
    text = _SHARDING.sub("", text)
    text = _FRONTEND.sub("", text)
    text = _HEADER_EXTRAS.sub("", text)

    def sort_keys(found: re.Match[str]) -> str:
        try:
            return "backend_config=" + json.dumps(json.loads(found.group(1)), sort_keys=True)
        except ValueError:
            return found.group(0)

    text = _BACKEND_CONFIG.sub(sort_keys, text)
    lines = [line for line in text.splitlines() if line.strip()]
    lines[0] = re.sub(r"^HloModule \S+", "HloModule m", lines[0]) if lines else ""
    return "\n".join(lines)


def summarize(hlo: str, memory: Mapping[str, int] | None) -> dict[str, Any]:
    """What the recordings compare of one compiled program."""
    from pytest_jaxport.model.census import take_census
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    census = take_census(parse_compiled_hlo(hlo), "tpu", level="compiled")
    layout = re.search(r"entry_computation_layout=\{(.*?)\}(?:,\s*\w+=|$)", hlo.splitlines()[0])
    text = stripped(hlo)
    return {
        "custom_calls": dict(
            sorted(Counter(re.findall(r'custom_call_target="([^"]+)"', hlo)).items())
        ),
        "libraries": dict(sorted(census.libraries().items())),
        "custom": census.custom,
        "memory": dict(memory) if memory is not None else None,
        "entry_layout": layout.group(1) if layout else None,
        "fusions": len(re.findall(r"\sfusion\(", hlo)),
        "hlo": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Per field of :data:`FIELDS`, in how many programs both recorded the two agree, and
    which programs differ."""
    both = sorted(set(a["programs"]) & set(b["programs"]))
    out: dict[str, Any] = {"programs": len(both), "fields": {}}
    for field in FIELDS:
        agree = [
            k
            for k in both
            if "error" not in a["programs"][k]
            and "error" not in b["programs"][k]
            and a["programs"][k][field] == b["programs"][k][field]
        ]
        compiled = [
            k for k in both if "error" not in a["programs"][k] and "error" not in b["programs"][k]
        ]
        out["fields"][field] = {
            "agree": len(agree),
            "of": len(compiled),
            "differ": sorted(set(compiled) - set(agree)),
        }
    errors = {
        k: (a["programs"][k].get("error"), b["programs"][k].get("error"))
        for k in both
        if "error" in a["programs"][k] or "error" in b["programs"][k]
    }
    out["errors"] = errors
    return out


# -- the programs ------------------------------------------------------------------------------


def variants(sizes: Sequence[str]) -> list[tuple[str, Callable[..., Any], tuple[Any, ...]]]:
    """Every corpus program at each size, forward and (where measured) gradient, as
    ``fidelity.py`` checks them."""
    from pytest_jaxport._jax.transforms import transformed

    out = []
    for program in corpus.CORPUS:
        for size in sizes:
            fn, args = program.build(size)
            out.append((f"{program.name}/{size}/fwd", fn, args))
            if program.gradient:
                grad = transformed(fn, "grad", args, {})
                out.append((f"{program.name}/{size}/grad", grad, grad.args))
    return out


def _environment() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("jax", "jaxlib", "libtpu", "pytest-jaxport"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return {"versions": found, "python": sys.version.split()[0], "cpus": os.cpu_count()}


def _save(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def deviceless(out: Path, sizes: Sequence[str], deadline: float) -> int:
    """Lower each program for tpu here and compile it through libtpu's worker."""
    from pytest_jaxport._jax import libtpu, lowering, stablehlo, tracing
    from pytest_jaxport.model.libtpu import topology_for

    started = time.monotonic()
    modules = out / "modules"
    modules.mkdir(parents=True, exist_ok=True)
    compiler = libtpu.TpuCompiler(time_limit=120)
    results: dict[str, Any] = {"environment": _environment(), "how": "deviceless", "programs": {}}
    try:
        for key, fn, args in variants(sizes):
            if time.monotonic() - started > deadline:
                results["stopped"] = f"deadline of {deadline:g} s reached at {key}"
                break
            entry: dict[str, Any] = {}
            try:
                traced = tracing.trace(fn, args, {}, described={"tpu": "TPU v5 lite"})
                lowered = lowering.lower(traced, "tpu")
                data = libtpu.module_bytes(lowered)
                partitions = stablehlo.read_program(lowered).partitions
                (modules / f"{key.replace('/', '__')}.mlirbc").write_bytes(data)
                topology = topology_for("tpu", "v5e", "", partitions=partitions)
                made = compiler.compile(
                    data, topology, partitions=partitions, settings=libtpu.jax_settings()
                )
                memory = made.memory.to_dict() if made.memory is not None else None
                entry = {
                    **summarize(made.hlo, _stats_names(memory)),
                    "partitions": partitions,
                    "topology": topology.name,
                    "seconds": round(made.seconds, 3),
                }
            except Exception as e:  # a program that does not compile here: recorded
                entry = {"error": lowering.describe_error(e)}
            results["programs"][key] = entry
            log(f"deviceless {key}: {entry.get('error') or entry['custom_calls']}")
    finally:
        compiler.close()
    results["seconds"] = round(time.monotonic() - started, 1)
    _save(out / "deviceless.json", results)
    return 0


def _stats_names(memory: Mapping[str, int] | None) -> dict[str, int] | None:
    """``CompiledMemory`` fields under the names ``memory_analysis`` gives them."""
    if memory is None:
        return None
    return {f"{name}_size_in_bytes": int(value) for name, value in memory.items()}


_STATS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
)


def _memory(stats: Any) -> dict[str, int]:
    return {name: int(getattr(stats, name)) for name in _STATS}


def _compile_with(client: Any, module: Any, devices: Any, options: Any) -> Any:
    """The client's executable of ``module``: unloaded where it compiles so (a compile-only
    client; jaxlib 0.10's), else loaded (a client that only loads what it compiles)."""
    failure: Exception | None = None
    for method in ("compile", "compile_and_load"):
        compile_ = getattr(client, method, None)
        if compile_ is None:
            continue
        try:
            return compile_(module, executable_devices=devices, compile_options=options)
        except Exception as e:  # the other method may be the one this client has
            failure = e
    assert failure is not None
    raise failure


def chip(modules: Path, out: Path, sizes: Sequence[str], deadline: float, dry_run: bool) -> int:
    """On a TPU host: each kept module compiled by the chip's client, and each program
    compiled as a user's jit compiles it there. ``dry_run`` (no TPU): a compile-only
    v5e topology's client stands in for the chip's, to test this script."""
    import jax
    import numpy as np
    from jax._src import compiler as jax_compiler
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jax._src.lib.mlir import ir

    started = time.monotonic()
    if dry_run:
        from jax.experimental import topologies

        device = topologies.get_topology_desc(
            platform="tpu", topology_name="v5e:1x1", chip_config_name="default",
            chips_per_host_bounds=(1, 1, 1), num_slices=1, wrap=(False, False, False),
        ).devices[0]  # fmt: skip
    else:
        device = jax.devices("tpu")[0]
    results: dict[str, Any] = {
        "environment": {**_environment(), "device": str(device.device_kind)},
        "how": "dry run (compile-only client)" if dry_run else "chip",
        "programs": {},
        "jit": {},
    }
    client = device.client
    for path in sorted(modules.glob("*.mlirbc")):
        if time.monotonic() - started > deadline:
            results["stopped"] = f"deadline of {deadline:g} s reached at {path.name}"
            break
        key = path.stem.replace("__", "/")
        data = path.read_bytes()
        entry: dict[str, Any]
        try:
            with mlir.make_ir_context():
                module = ir.Module.parse(data)
                partitions = int(
                    str(module.operation.attributes["mhlo.num_partitions"]).split(":")[0]
                ) if "mhlo.num_partitions" in module.operation.attributes else 1  # fmt: skip
                if partitions > 1:
                    raise RuntimeError(f"partitioned over {partitions} devices; one chip here")
                options = jax_compiler.get_compile_options(
                    num_replicas=1, num_partitions=1,
                    device_assignment=np.array([device], dtype=object).reshape(1, 1),
                )  # fmt: skip
                devices = xla_client.DeviceList((device,))
                executable = _compile_with(client, module, devices, options)
            hlo = executable.hlo_modules()[0].to_string()
            entry = summarize(hlo, _memory(executable.get_compiled_memory_stats()))
        except Exception as e:  # recorded, never the end of the run
            entry = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        results["programs"][key] = entry
        log(f"chip module {key}: {entry.get('error') or entry['custom_calls']}")
    if not dry_run:
        for key, fn, args in variants(sizes):
            if time.monotonic() - started > deadline:
                results["stopped_jit"] = f"deadline of {deadline:g} s reached at {key}"
                break
            try:
                placed = jax.device_put(args, device)
                compiled = jax.jit(fn).lower(*placed).compile()
                stats = compiled.memory_analysis()
                results["jit"][key] = summarize(compiled.as_text(), _memory(stats))
            except Exception as e:  # recorded, never the end of the run
                results["jit"][key] = {
                    "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                }
            log(
                f"chip jit {key}: {results['jit'][key].get('error') or results['jit'][key]['custom_calls']}"
            )
    results["seconds"] = round(time.monotonic() - started, 1)
    _save(out / "chip.json", results)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    corpus.ensure_host_devices()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    one = sub.add_parser("deviceless")
    one.add_argument("--out", type=Path, required=True)
    two = sub.add_parser("chip")
    two.add_argument("--modules", type=Path, required=True)
    two.add_argument("--out", type=Path, required=True)
    two.add_argument("--dry-run", action="store_true")
    three = sub.add_parser("compare")
    three.add_argument("first", type=Path)
    three.add_argument("second", type=Path)
    three.add_argument("--jit", action="store_true", help="the second's jit recordings")
    three.add_argument("--out", type=Path)
    for step in (one, two):
        step.add_argument("--sizes", default="small,large")
        step.add_argument("--deadline", type=float, default=150.0)
    args = parser.parse_args(argv)
    if args.step == "compare":
        a = json.loads(args.first.read_text())
        b = json.loads(args.second.read_text())
        if args.jit:
            b = {**b, "programs": b["jit"]}
        found = compare(a, b)
        text = json.dumps(found, indent=1, sort_keys=True)
        if args.out:
            args.out.write_text(text + "\n", encoding="utf-8")
        print(text)
        return 0
    sizes = [s for s in args.sizes.split(",") if s]
    if args.step == "deviceless":
        return deviceless(args.out, sizes, args.deadline)
    return chip(args.modules, args.out, sizes, args.deadline, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
