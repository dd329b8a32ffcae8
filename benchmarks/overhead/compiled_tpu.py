"""Compiled level, tpu without a TPU: what ``--jaxport-compile=tpu`` costs a check (issue 48).

    JAX_PLATFORMS=cpu python -m benchmarks.overhead.compiled_tpu --out benchmarks/results/<name>.json

Needs libtpu (``pip install "pytest-jaxport[tpu]"``). The generated suite
(``benchmarks/corpora/suite.py``: one portable test per case of ``models.CASES``, the plugin's default
platforms) run in pytest subprocesses, two sides interleaved (their order reversed every other
repetition): **default** (lowered level only, as without the option) and **tpu**
(``--jaxport-compile=tpu``: every check's tpu lowering compiled by libtpu's worker, the
worker started at the first compile the compiled cache does not hold). **cold**: ``.pytest_cache`` and ``__pycache__`` removed
first (the compiled cache empty: every check compiles); **warm**: run again with them kept.
Wall and CPU time per session (the worker's included: it is a child of the session), and
the ratio tpu / default: what the tpu compiled level adds to a check. The target is at most
1.25 (issue 48); off, the option loads nothing (``tests/test_libtpu.py`` checks that a run
without it, and a warm run with it, never starts the worker).

**breakdown** (in this process, after the sessions; ``--breakdown-only`` for it alone): what
the added time is made of. The worker's start (spawned, JAX imported, libtpu loaded, a first
trivial compile) against a second trivial compile; then per case ``fixture.Jaxport.check``
end to end with the default config and with ``compile = ["tpu"]`` (a cold lowered and
compiled cache each, ``jax.clear_caches()`` first), its ``compile:tpu`` stage timed by the
examiner's hook, and the seconds the worker says libtpu compiled for.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.corpora import suite as generated

SIDES = {"default": [], "tpu": ["--jaxport-compile=tpu"]}
TARGET = 1.25


def _clear(folder: Path) -> None:
    shutil.rmtree(folder / ".pytest_cache", ignore_errors=True)
    for cache in folder.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def _session(folder: Path, extra: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "pytest", "-q", "-rN", "-p", "no:randomly", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"pytest exited {done.returncode}:\n{done.stdout[-3000:]}")
    lines = [line.strip() for line in done.stdout.splitlines() if line.startswith("jaxport:")]
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "summary": done.stdout.strip().splitlines()[-1].strip("= "),
        "jaxport_lines": lines,
    }


def _check(fn: Any, args: tuple[Any, ...], compiler: Any | None) -> dict[str, float]:
    """``Jaxport.check`` once, as the plugin makes it for one test (cold caches), with
    ``compile = ["tpu"]`` where ``compiler`` is given; its wall time and ``compile:tpu``."""
    import jax

    from pytest_jaxport.cache import LOWERED_FORMAT, CompiledCache, CompileSettings
    from pytest_jaxport.examine.stages import StageTimer
    from pytest_jaxport.fixture import Jaxport
    from pytest_jaxport.model import classification
    from pytest_jaxport.model.config import ProjectConfig

    jax.clear_caches()
    platforms = ("tpu",) if compiler is not None else ()
    folder = Path(tempfile.mkdtemp(prefix="jaxport-tpu-breakdown-"))
    timer = StageTimer()
    jaxport = Jaxport(
        config=ProjectConfig(compile=platforms).resolve(),
        classifier=classification.classify,
        compiled_classifier=functools.partial(classification.classify, level="compiled"),
        rootdir=folder,
        compile_settings=CompileSettings(
            platforms=platforms,
            cache=CompiledCache(directory=folder / "compiled"),
            lowered_cache=CompiledCache(directory=folder / "lowered", format=LOWERED_FORMAT),
            tpu_compiler=compiler,
        ),
        stages=timer,
    )
    start = time.perf_counter()
    jaxport.check(fn, *args)
    wall = time.perf_counter() - start
    shutil.rmtree(folder, ignore_errors=True)
    return {"check_s": wall, "compile_tpu_s": sum(timer.wall.get("compile:tpu", [0.0]))}


def breakdown(cases: list[str], repeats: int) -> dict[str, Any]:
    """The worker's start, and per case what ``compile = ["tpu"]`` adds to one check."""
    from benchmarks.corpora import models
    from pytest_jaxport._jax import libtpu
    from pytest_jaxport.model.libtpu import Topology

    v5e = Topology(name="v5e:1x1", generation="v5e", devices=1)
    starts: list[dict[str, float]] = []
    for _ in range(repeats):
        compiler = libtpu.TpuCompiler(time_limit=600)
        begin = time.perf_counter()
        first = compiler.compile(libtpu.PROBE_MODULE.encode(), v5e, partitions=1)
        ready = time.perf_counter() - begin
        begin = time.perf_counter()
        compiler.compile(libtpu.PROBE_MODULE.encode(), v5e, partitions=1)
        again = time.perf_counter() - begin
        compiler.close()
        starts.append({"spawn_to_first_compile_s": ready, "second_compile_s": again,
                       "first_compile_in_worker_s": first.seconds})  # fmt: skip
    compiler = libtpu.TpuCompiler(time_limit=600)
    compiler.compile(libtpu.PROBE_MODULE.encode(), v5e, partitions=1)  # started, as in a run
    per_case: dict[str, dict[str, float]] = {}
    for name in cases:
        fn, args = models.CASES[name]()
        samples: dict[str, list[float]] = {}
        for repeat in range(repeats):
            sides = [None, compiler] if repeat % 2 == 0 else [compiler, None]
            for side in sides:
                timed = _check(fn, args, side)
                label = "default" if side is None else "tpu"
                samples.setdefault(f"{label}_check_s", []).append(timed["check_s"])
                if side is not None:
                    samples.setdefault("compile_tpu_stage_s", []).append(timed["compile_tpu_s"])
        per_case[name] = {k: round(statistics.median(v), 4) for k, v in samples.items()}
        print(f"breakdown {name}: {per_case[name]}", flush=True)
    compiler.close()
    default = sum(c["default_check_s"] for c in per_case.values())
    tpu = sum(c["tpu_check_s"] for c in per_case.values())
    stage = sum(c["compile_tpu_stage_s"] for c in per_case.values())
    start = statistics.median(s["spawn_to_first_compile_s"] for s in starts)
    return {
        "worker_start": {"samples": starts, "median_spawn_to_first_compile_s": round(start, 3)},
        "per_case_median": per_case,
        "checks": len(per_case),
        "sum_default_check_s": round(default, 3),
        "sum_tpu_check_s": round(tpu, 3),
        "sum_compile_tpu_stage_s": round(stage, 3),
        "checks_ratio_tpu_over_default": round(tpu / default, 3),
        "compile_tpu_stage_share_of_added": round(stage / (tpu - default), 3)
        if tpu > default
        else None,
        "added_per_check_ms": round(1000 * (tpu - default) / len(per_case), 1),
    }


def sessions(results: dict[str, Any], cases: list[str], repeats: int) -> None:
    """The generated suite's sessions, both sides interleaved, and their ratios."""
    with tempfile.TemporaryDirectory(prefix="jaxport-tpu-cost-") as folder:
        suite = generated.write_suite(Path(folder) / "suite", cases)
        for repeat in range(repeats):
            order = list(SIDES) if repeat % 2 == 0 else list(reversed(SIDES))
            for side in order:
                _clear(suite)
                cold = _session(suite, SIDES[side])
                warm = _session(suite, SIDES[side])
                results["sessions"][side]["cold"].append(cold)
                results["sessions"][side]["warm"].append(warm)
                print(f"{side} cold {cold['wall_s']} s, warm {warm['wall_s']} s", flush=True)
    ratios: dict[str, Any] = {}
    for state in ("cold", "warm"):
        for measure in ("wall_s", "cpu_s"):
            tpu = statistics.median(s[measure] for s in results["sessions"]["tpu"][state])
            base = statistics.median(s[measure] for s in results["sessions"]["default"][state])
            ratios[f"{state}_{measure}"] = round(tpu / base, 3)
    results["ratios_tpu_over_default"] = ratios
    results["target_max"] = TARGET
    results["within_target"] = {s: ratios[f"{s}_wall_s"] <= TARGET for s in ("cold", "warm")}
    print(json.dumps(ratios, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", help="comma-separated models.CASES (default: all)")
    parser.add_argument(
        "--breakdown-only", action="store_true", help="only the in-process breakdown"
    )
    args = parser.parse_args(argv)
    from benchmarks.corpora import models

    cases = [c for c in (args.cases or "").split(",") if c] or list(models.CASES)
    results: dict[str, Any] = {
        "machine": {
            "nproc": os.cpu_count(),
            "python": sys.version.split()[0],
            "loadavg_start": list(os.getloadavg()),
        },
        "cases": cases,
        "sessions": {side: {"cold": [], "warm": []} for side in SIDES},
    }
    from importlib.metadata import version

    results["machine"]["versions"] = {n: version(n) for n in ("jax", "jaxlib", "libtpu")}
    if not args.breakdown_only:
        sessions(results, cases, args.repeats)
    results["breakdown"] = breakdown(cases, args.repeats)
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
