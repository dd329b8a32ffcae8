"""What emulating a platform on the CPU costs per check (issue 24's engine).

Usage::

    python -m benchmarks.overhead.emulation [--reps 5] [--cases mlp_small,...] \\
        [--output benchmarks/results/emulation-2cpu.json]

Per case and emulated platform, interleaved (plain, emulate, emulate, plain, ...) with
``jax.clear_caches()`` before each, as in a suite where each test checks a new function:

- **plain**: ``jax.block_until_ready(jax.jit(fn)(*args))``: trace, compile and run on the
  CPU, what every check already pays to compute the reference's outputs;
- **emulate**: ``pytest_jaxport._jax.emulate.emulate(fn, args, platform=p)``: the jaxpr,
  its replay with the platform's choices, compile and run on the CPU;
- **bounded** (tpu, whose chip was measured): ``emulated.bounded()``, the program again with
  each op the emulation cannot compute as the chip does moved by its bound: what a check
  whose emulated outputs matched pays on top (``with_bounds_ratio``).

The median of each and the ratio emulate / plain are recorded, with what each emulation
changed (rounded dots, interpreted kernels). Cases: the generated suite's models
(``benchmarks/corpora/models.py``) and the demo's Pallas kernel.

``--sessions`` measures the same through the plugin: whole ``python -m pytest`` sessions of
the generated suite (``benchmarks/corpora/suite.py``, one portable test per case; no cache, each
session cold), interleaved: emulation **off** (the default), ``--jaxport-emulate=tpu`` and
``--jaxport-emulate=tpu,cuda``; with ``--base-src DIR`` (a checkout of the package before
emulation was wired in, e.g. ``git archive issue-22 | tar -x -C DIR``, put first on
``PYTHONPATH``) also **before**, so "off costs nothing" is a measured difference, not a claim::

    python -m benchmarks.overhead.emulation --sessions --reps 3 --base-src /tmp/base \
        --output benchmarks/results/emulation-sessions-2cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from benchmarks import REPO as ROOT
from benchmarks import RESULTS
from benchmarks.corpora import models
from pytest_jaxport._jax.emulate import emulate

DEFAULT_OUTPUT = RESULTS / "emulation-2cpu.json"
DEFAULT_CASES = ("mlp_small", "mlp_wide", "convnet", "transformer_block", "demo_pallas_kernel")


def _demo_kernel() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    path = ROOT / "examples/demo/src/demo_models/pallas_kernel.py"
    spec = importlib.util.spec_from_file_location("demo_pallas_kernel", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = jnp.linspace(-3.0, 3.0, 64 * 128, dtype=jnp.float32).reshape(64, 128)
    return module.fused_bias_gelu, (x, jnp.linspace(-0.5, 0.5, 128, dtype=jnp.float32))


def _case(name: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return _demo_kernel() if name == "demo_pallas_kernel" else models.CASES[name]()


def _timed(run: Callable[[], Any]) -> float:
    jax.clear_caches()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def bench(name: str, platforms: tuple[str, ...], reps: int) -> dict[str, Any]:
    fn, args = _case(name)

    def plain() -> Any:
        return jax.block_until_ready(jax.jit(fn)(*args))

    plain()  # warm JAX itself (first-use imports), not this case's caches
    result: dict[str, Any] = {"platforms": {}}
    plain_s: list[float] = []
    for target in platforms:
        emulated_s: list[float] = []
        bounded_s: list[float] = []
        from_trace_s: list[float] = []
        record = None
        traced = jax.jit(fn).trace(*args)  # what a check holds already (lowering.trace)
        for rep in range(reps):
            order = ("plain", "emulate", "trace") if rep % 2 == 0 else ("trace", "emulate", "plain")
            for side in order:
                if side == "plain":
                    plain_s.append(_timed(plain))
                elif side == "trace":
                    from_trace_s.append(_timed(lambda: emulate(traced, args, platform=target)))
                else:
                    found: list[Any] = []
                    emulated_s.append(
                        _timed(lambda: found.append(emulate(fn, args, platform=target)))
                    )
                    record = found[0].emulation
                    run = found[0].bounded  # what a check whose outputs matched pays more
                    if run is not None:
                        bounded_s.append(_timed(run))
        assert record is not None
        result["platforms"][target] = {
            "emulate_s": emulated_s,
            "emulate_median_s": statistics.median(emulated_s),
            "from_trace_s": from_trace_s,
            "from_trace_median_s": statistics.median(from_trace_s),
            "bounded_s": bounded_s,
            "bounded_median_s": statistics.median(bounded_s) if bounded_s else None,
            "ran": record.ran,
            "rounded_dots": sum(op.count for op in record.rounded),
            "kernels": [k.interpreter for k in record.kernels],
            "not_emulated": [u.reason for u in record.unemulated],
        }
    result["plain_s"] = plain_s
    result["plain_median_s"] = statistics.median(plain_s)
    for entry in result["platforms"].values():
        entry["ratio"] = entry["emulate_median_s"] / result["plain_median_s"]
        entry["from_trace_ratio"] = entry["from_trace_median_s"] / result["plain_median_s"]
        if entry["bounded_median_s"] is not None:  # emulate, then the run with the bounds
            both = entry["emulate_median_s"] + entry["bounded_median_s"]
            entry["with_bounds_ratio"] = both / result["plain_median_s"]
    return result


SESSION_VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("off", ()),
    ("tpu", ("--jaxport-emulate=tpu",)),
    ("tpu,cuda", ("--jaxport-emulate=tpu,cuda",)),
)


def _session(folder: Path, args: tuple[str, ...], base: Path | None) -> dict[str, Any]:
    """One cold ``python -m pytest`` session: wall and CPU seconds, outcomes."""
    import resource

    env = dict(os.environ)
    if base is not None:  # the package before emulation: first on the path
        env["PYTHONPATH"] = os.pathsep.join([str(base), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"pytest {args} exited {done.returncode}:\n{done.stdout[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "summary": lines[-1].strip("= ") if lines else "",
    }


def sessions(reps: int, base: Path | None) -> dict[str, Any]:
    """Whole sessions of the generated suite per variant (see the module), interleaved."""
    import tempfile

    from benchmarks.corpora.suite import write_suite

    variants = [*(([("before", ())]) if base is not None else []), *SESSION_VARIANTS]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_suite(Path(tmp) / "suite", list(models.CASES))
        for rep in range(reps):
            order = variants if rep % 2 == 0 else variants[::-1]
            for name, args in order:
                runs[name].append(_session(folder, args, base if name == "before" else None))
            print(f"rep {rep + 1}/{reps}: " + ", ".join(
                f"{k} {v[-1]['wall_s']:.1f}s" for k, v in runs.items()), file=sys.stderr)  # fmt: skip
    checks = len(models.CASES)
    result: dict[str, Any] = {"checks": checks, "runs": runs, "variants": {}}
    off = statistics.median(r["cpu_s"] for r in runs["off"])
    for name, found in runs.items():
        cpu = statistics.median(r["cpu_s"] for r in found)
        result["variants"][name] = {
            "median_wall_s": statistics.median(r["wall_s"] for r in found),
            "median_cpu_s": cpu,
            "cpu_vs_off": cpu / off,
            "added_cpu_per_check_s": (cpu - off) / checks,
            "summary": found[0]["summary"],
        }
    return result


def session_table(result: dict[str, Any]) -> str:
    lines = [
        "| variant | session wall s | session CPU s | CPU vs off | added CPU per check s | outcome |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in result["variants"].items():
        lines.append(
            f"| {name} | {v['median_wall_s']:.1f} | {v['median_cpu_s']:.1f} | "
            f"{v['cpu_vs_off']:.2f}x | {v['added_cpu_per_check_s']:+.3f} | {v['summary']} |"
        )
    return "\n".join(lines)


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    parser.add_argument("--platforms", default="tpu,cuda")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--sessions", action="store_true", help="whole pytest sessions")
    parser.add_argument("--base-src", type=Path, default=None)
    options = parser.parse_args()
    from importlib.metadata import version

    started = time.time()
    load_start = os.getloadavg()
    platforms = tuple(options.platforms.split(","))
    cases: dict[str, Any] = {}
    measured: dict[str, Any] = {}
    if options.sessions:
        measured["sessions"] = sessions(options.reps, options.base_src)
    else:
        cases = {name: bench(name, platforms, options.reps) for name in options.cases.split(",")}
    results = {
        "machine": {
            "nproc": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "versions": {"jax": version("jax"), "jaxlib": version("jaxlib")},
        "date": datetime.date.today().isoformat(),
        "git": {
            "commit": _git("rev-parse", "--short", "HEAD"),
            "dirty": _git("status", "--porcelain", "--untracked-files=no"),
        },
        "loadavg": {"start": load_start, "end": os.getloadavg()},
        "duration_s": time.time() - started,
        "reps": options.reps,
        "cases": cases,
        **measured,
    }
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(results, indent=2) + "\n")
    print(session_table(measured["sessions"]) if options.sessions else table(results))


def table(results: dict[str, Any]) -> str:
    """The results as a Markdown table: medians in seconds, ratios to plain in brackets."""
    cases = results["cases"]
    platforms = list(next(iter(cases.values()))["platforms"])
    head = " | ".join(
        f"{p}: emulate s (ratio) | {p}: from the trace s (ratio) | {p}: + bounded run (ratio)"
        for p in platforms
    )
    lines = [
        f"| case | plain s | {head} | what was emulated |",
        "|---|---|" + "---|---|---|" * len(platforms) + "---|",
    ]
    for name, case in cases.items():
        cells, what = [], []
        for p in platforms:
            entry = case["platforms"][p]
            cells.append(f"{entry['emulate_median_s']:.3f} ({entry['ratio']:.2f}x)")
            cells.append(f"{entry['from_trace_median_s']:.3f} ({entry['from_trace_ratio']:.2f}x)")
            bounded = entry.get("bounded_median_s")
            cells.append(f"{bounded:.3f} ({entry['with_bounds_ratio']:.2f}x)" if bounded else "-")
            done = [f"{entry['rounded_dots']} dots rounded"] if entry["rounded_dots"] else []
            done += entry["kernels"] + (
                ["not run: " + entry["not_emulated"][0]] if not entry["ran"] else []
            )
            what.append(f"{p}: {', '.join(done) or 'nothing to change'}")
        lines.append(
            f"| {name} | {case['plain_median_s']:.3f} | {' | '.join(cells)} | {'; '.join(what)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
