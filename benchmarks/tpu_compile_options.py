"""Compile options for libtpu's deviceless compile: faster, and the same answer? (issue 48)

    JAX_PLATFORMS=cpu python benchmarks/tpu_compile_options.py --out benchmarks/results/<name>.json

Needs libtpu (``pip install "pytest-jaxport[tpu]"``). ``--jaxport-compile=tpu`` spends most
of what it adds to a check in libtpu's compile (``compiled_tpu.py``). This asks whether a
compile option makes that compile faster **without changing anything the plugin reads**. Every
program of the fidelity corpus (``fidelity_corpus.py``, forward and gradient, at
``--sizes``) and of the generated suite (``models.CASES``) is lowered for tpu as a check
lowers it on a machine without a TPU (``tracing.trace`` with the described TPU v5e,
``lowering.lower``), then compiled by libtpu's worker (``pytest_jaxport._jax.libtpu``, the
plugin's path, for v5e; a program partitioned over two devices for v5e:2x2) with the default
options and with each candidate of :data:`CANDIDATES`, each candidate in a worker of its own
(a libtpu flag may outlive the compile that set it), each compile ``--repeats`` times (the
fastest kept: libtpu's own ``seconds``).

What must be identical to the default compile, per program, for a candidate to be adoptable:

- ``census``: the compiled census as the plugin takes it (``take_census``, level compiled,
  the compiled classification and the roofline estimate): each kernel (custom calls and
  runtime routines, their layer and library, their line and count), the XLA op count and
  kinds, the collectives;
- ``formats``: the formats-and-layout findings judged from the compiled program for v5e
  (``take_format_census``: layouts, tile padding, the tiled bytes);
- ``memory``: ``memory_analysis`` (argument, output, alias, temp, generated code bytes).

Recorded besides (not required): whether the optimized HLO is identical once metadata is
removed (``tpu_chip.stripped``). A candidate that differs anywhere, or fails where the
default compiles, is not adoptable; ``adoptable`` lists those that are faster and identical
everywhere.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import fidelity_corpus as corpus  # noqa: E402

CANDIDATES: Mapping[str, Mapping[str, object]] = {
    # ExecutableBuildOptions (jax's get_compile_options sets these on the build options; the
    # two efforts only up to jax 0.10: later ones pass them on as XLA flags)
    "exec_time_optimization_effort=-1": {"exec_time_optimization_effort": -1.0},
    "memory_fitting_effort=-1": {"memory_fitting_effort": -1.0},
    "optimization_level=O0": {"optimization_level": 9},
    "optimization_level=O1": {"optimization_level": 19},
    "memory_fitting_level=O0": {"memory_fitting_level": 9},
    # XLA's DebugOptions (env_option_overrides)
    "xla_backend_optimization_level=0": {"xla_backend_optimization_level": 0},
    # libtpu's own flags (env_option_overrides: the TPU client parses them)
    "xla_tpu_enable_latency_hiding_scheduler=false": {
        "xla_tpu_enable_latency_hiding_scheduler": False
    },
    "xla_jf_llo_level=0": {"xla_jf_llo_level": 0},
}
"""Each candidate's name and the options it passes (``options`` of a worker request)."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def programs(
    sizes: Sequence[str], only: str = ""
) -> list[tuple[str, Callable[..., Any], tuple[Any, ...]]]:
    """The fidelity corpus at ``sizes`` (forward and gradient) and the generated suite, those
    whose key (``corpus/mlp/small/fwd``, ``suite/convnet``) ``only`` matches."""
    import models
    import tpu_chip

    found = [(f"corpus/{key}", fn, args) for key, fn, args in tpu_chip.variants(sizes)]
    for name, build in models.CASES.items():
        fn, args = build()
        found.append((f"suite/{name}", fn, args))
    return [(key, fn, args) for key, fn, args in found if re.search(only, key)]


def lowered_modules(sizes: Sequence[str], only: str = "") -> dict[str, tuple[bytes, int]]:
    """Each program's tpu module (as a check lowers it here) and its partition count."""
    from pytest_jaxport._jax import lowering, stablehlo, tracing

    modules: dict[str, tuple[bytes, int]] = {}
    from pytest_jaxport._jax import libtpu

    for key, fn, args in programs(sizes, only):
        traced = tracing.trace(fn, args, {}, described={"tpu": "TPU v5 lite"})
        lowered = lowering.lower(traced, "tpu")
        modules[key] = (libtpu.module_bytes(lowered), stablehlo.read_program(lowered).partitions)
    return modules


def what_the_plugin_reads(hlo: str, memory: Any) -> dict[str, Any]:
    """The compiled census, the formats findings and ``memory_analysis`` of one compiled
    program, as the plugin takes them (``examine/compiled.py``), and the stripped HLO's
    digest."""
    import functools
    from dataclasses import replace

    import tpu_chip

    from pytest_jaxport.cache import CompileSettings
    from pytest_jaxport.examine.compiled import roofline
    from pytest_jaxport.model import targets
    from pytest_jaxport.model.census import take_census
    from pytest_jaxport.model.formats import DEFAULT_DEVICES, take_format_census
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    program = replace(parse_compiled_hlo(hlo), memory=memory)
    census = take_census(
        program,
        "tpu",
        level="compiled",
        classifier=functools.partial(targets.classify, level="compiled"),
        seconds=roofline("tpu", CompileSettings()),
    )
    formats = take_format_census(program, "tpu", device=DEFAULT_DEVICES["tpu"], level="compiled")
    return {
        "census": repr(census),
        "formats": json.dumps(formats.to_dict(), sort_keys=True, default=str),
        "memory": memory.to_dict() if memory is not None else None,
        "hlo": hashlib.sha256(tpu_chip.stripped(hlo).encode()).hexdigest()[:16],
        "summary": {
            "vendor": census.vendor,
            "custom": census.custom,
            "meta": census.meta,
            "xla_ops": census.xla_ops,
            "libraries": census.libraries(),
            "collectives": {c.kind: c.count for c in census.collectives},
        },
    }


def compile_all(
    modules: Mapping[str, tuple[bytes, int]], options: Mapping[str, object], repeats: int
) -> dict[str, dict[str, Any]]:
    """Every module compiled with ``options`` in a worker of its own: what the plugin reads
    and the fastest of ``repeats`` compiles (libtpu's seconds)."""
    from pytest_jaxport._jax import libtpu
    from pytest_jaxport.model.libtpu import topology_for

    compiler = libtpu.TpuCompiler(time_limit=600)
    out: dict[str, dict[str, Any]] = {}
    try:
        try:
            compiler.compile(
                libtpu.PROBE_MODULE.encode(),
                topology_for("tpu", "v5e", "", partitions=1),
                partitions=1,
                options=options,
            )  # started, its first compile's set-up paid, as in a run
        except libtpu.CompileFailure as failure:  # an option this jax or libtpu refuses
            return {key: {"error": f"{failure.stage}: {str(failure)[:300]}"} for key in modules}
        for key, (data, partitions) in modules.items():
            topology = topology_for("tpu", "v5e", "", partitions=partitions)
            seconds: list[float] = []
            entry: dict[str, Any] = {}
            for _ in range(repeats):
                try:
                    made = compiler.compile(
                        data, topology, partitions=partitions, options=options,
                        settings=libtpu.jax_settings(),
                    )  # fmt: skip
                except libtpu.CompileFailure as failure:
                    entry = {"error": f"{failure.stage}: {str(failure)[:300]}"}
                    break
                seconds.append(made.seconds)
                entry = what_the_plugin_reads(made.hlo, made.memory)
            if seconds:
                entry["seconds"] = round(min(seconds), 4)
            out[key] = entry
    finally:
        compiler.close()
    return out


def compare(default: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """Where ``other`` differs from ``default``, per field the plugin reads, and the time."""
    fields = ("census", "formats", "memory", "hlo")
    differ: dict[str, list[str]] = {field: [] for field in fields}
    failed = []
    for key, base in default.items():
        mine = other.get(key, {"error": "missing"})
        if "error" in base:
            continue
        if "error" in mine:
            failed.append(key)
            continue
        for field in fields:
            if base[field] != mine[field]:
                differ[field].append(key)
    compiled = [k for k in default if "error" not in default[k] and "error" not in other[k]]
    base_s = sum(default[k]["seconds"] for k in compiled)
    mine_s = sum(other[k]["seconds"] for k in compiled)
    identical = not failed and not any(differ[f] for f in ("census", "formats", "memory"))
    return {
        "identical_where_read": identical,
        "differ": {field: keys for field, keys in differ.items()},
        "failed_where_default_compiles": failed,
        "seconds_sum": round(mine_s, 3),
        "default_seconds_sum": round(base_s, 3),
        "ratio": round(mine_s / base_s, 3) if base_s else None,
        "per_program_ratio_median": round(
            statistics.median(other[k]["seconds"] / default[k]["seconds"] for k in compiled), 3
        )
        if compiled
        else None,
    }


def judge(results: dict[str, Any]) -> None:
    """Which candidates are faster beyond the noise, and adoptable (faster, and identical
    where the plugin reads). The noise: the largest difference in summed compile time from
    the first default pass among the compiles that are the default's in effect (the default
    again, and candidates whose optimized HLO was identical on every program)."""
    verdicts = results["candidates"]
    same = [
        v
        for v in verdicts.values()
        if not v["differ"]["hlo"] and not v["failed_where_default_compiles"] and v["ratio"]
    ]
    noise = max(abs(1 - v["ratio"]) for v in same)
    for name in results["candidates_tried"]:
        verdict = verdicts[name]
        verdict["faster_beyond_noise"] = bool(verdict["ratio"] and verdict["ratio"] < 1 - noise)
    results["noise"] = {
        "ratio_band": round(noise, 3),
        "from": [n for n, v in verdicts.items() if v in same],
    }
    results["adoptable"] = [
        n
        for n in results["candidates_tried"]
        if verdicts[n]["identical_where_read"] and verdicts[n]["faster_beyond_noise"]
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", default="small", help="fidelity corpus sizes (small,large)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--candidates", help="comma-separated names of CANDIDATES (default all)")
    parser.add_argument("--only", default="", help="a regex: the programs whose key it matches")
    parser.add_argument(
        "--rejudge", action="store_true", help="judge --out's recorded compiles again (no compile)"
    )
    args = parser.parse_args(argv)
    if args.rejudge:
        recorded = json.loads(args.out.read_text(encoding="utf-8"))
        judge(recorded)
        args.out.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
        log(f"adoptable: {recorded['adoptable']}")
        return 0
    corpus.ensure_host_devices()  # the data-parallel step's two cpu devices, before JAX
    from importlib.metadata import version

    names = [c for c in (args.candidates or "").split(",") if c] or list(CANDIDATES)
    results: dict[str, Any] = {
        "machine": {
            "nproc": os.cpu_count(),
            "python": sys.version.split()[0],
            "versions": {n: version(n) for n in ("jax", "jaxlib", "libtpu")},
            "loadavg_start": list(os.getloadavg()),
        },
        "sizes": args.sizes.split(","),
        "only": args.only,
        "candidates_tried": names,
        "repeats": args.repeats,
    }
    started = time.monotonic()
    modules = lowered_modules(args.sizes.split(","), args.only)
    results["programs"] = sorted(modules)
    log(f"{len(modules)} programs lowered for tpu")
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    runs["default"] = compile_all(modules, {}, args.repeats)
    log(f"default: {sum(e.get('seconds', 0) for e in runs['default'].values()):.2f} s")
    verdicts: dict[str, Any] = {}
    for name in names:
        runs[name] = compile_all(modules, CANDIDATES[name], args.repeats)
        verdicts[name] = {"options": dict(CANDIDATES[name]), **compare(runs["default"], runs[name])}
        log(f"{name}: {json.dumps({k: v for k, v in verdicts[name].items() if k != 'differ'})}")
    again = compile_all(modules, {}, args.repeats)  # the machine's drift over the run
    verdicts["default (again, last)"] = {"options": {}, **compare(runs["default"], again)}
    results["candidates"] = verdicts
    judge(results)
    results["default"] = {
        key: {
            "seconds": entry.get("seconds"),
            **({"error": entry["error"]} if "error" in entry else {"summary": entry["summary"]}),
        }
        for key, entry in runs["default"].items()
    }
    results["seconds_per_program"] = {
        key: {name: runs[name][key].get("seconds") for name in runs} for key in modules
    }
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    results["wall_s"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    log(f"adoptable: {results['adoptable']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
