"""Compiled level, CUDA without a GPU: what ``--jaxport-compile=cuda`` costs, cold and cached.

    JAX_PLATFORMS=cpu python -m benchmarks.overhead.run --parts cuda --out benchmarks/results/<name>.json

Needs ``jax-cuda12-plugin`` (and ``jax-cuda12-pjrt``) at the installed jaxlib's version; no
GPU. Three measurements (``run.py`` calls them; each is stored under ``compiled_cuda``):

- ``suite``: the generated suite (benchmarks/corpora/suite.py) in pytest subprocesses, three sides
  interleaved (order reversed every other repetition): **plain** (``-p no:jaxport -p
  jaxport_plain``), **default** (the plugin's default config: lowered level only) and
  **cuda** (``--jaxport-compile=cuda``: a deviceless CUDA compile per test against the
  default target description). **cold**: ``.pytest_cache`` and ``__pycache__`` removed
  first (so the compiled-level cache in ``.pytest_cache/d/jaxport-compiled`` is empty);
  **warm**: run again with them kept. Wall and CPU time per session, the cache hits and
  misses each session's terminal summary prints.
- ``fixed_costs_s``: per-process costs in a fresh interpreter (plugin check, first
  deviceless compile against later ones).
- ``per_case``: in-process, per model case, one deviceless CUDA compile against the cpu
  compile of the same function (``jax.clear_caches()`` before each), split into trace +
  lower / XLA compile / HLO text + parse + census, plus ``compile_deviceless`` end
  to end (what the fixture calls on a cache miss) and what a cache hit costs instead (key +
  ``CompiledCache.get`` + census).
"""

from __future__ import annotations

import gc
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

MODES = {
    "plain": ("b", []),
    "default": ("a", []),
    "cuda": ("a", ["--jaxport-compile=cuda"]),
}
"""side -> (run._session mode, extra pytest arguments)."""

RATIOS = (("default", "plain"), ("cuda", "plain"), ("cuda", "default"))

_CACHE_LINE = re.compile(r"jaxport: (compiled|lowered) cache (\d+) hits, (\d+) misses")
_COMPILED_COUNT = re.compile(r"\((\d+) compiled for the census")


def _installed(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def plugin_versions() -> dict[str, str | None]:
    return {
        name: _installed(name)
        for name in ("jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt")
    }


def plugin_problem() -> str | None:
    """``None`` when this part can run here; otherwise one line saying why not."""
    if not (_installed("jax-cuda12-plugin") or _installed("jax-cuda13-plugin")):
        jaxlib = _installed("jaxlib") or "<your jaxlib version>"
        return (
            "--parts cuda needs jax-cuda12-plugin (deviceless CUDA compilation), which is not "
            f'installed for {sys.executable}: pip install "jax-cuda12-plugin=={jaxlib}" '
            f'"jax-cuda12-pjrt=={jaxlib}"'
        )
    if os.environ.get("JAX_PLATFORMS") != "cpu":
        return (
            "--parts cuda measures deviceless CUDA compilation: run it with JAX_PLATFORMS=cpu "
            f"(now {os.environ.get('JAX_PLATFORMS')!r})"
        )
    from pytest_jaxport._jax.deviceless import cuda_plugin_problem

    problem = cuda_plugin_problem()
    return None if problem is None else f"--parts cuda: {problem}"


def toolchain() -> dict[str, str | None]:
    """The ``ptxas`` / ``nvlink`` on PATH: XLA's CUDA compiler runs them as subprocesses
    when present (else it uses the PTX compiler library it links), so they are part of
    what a deviceless compile costs here."""
    found: dict[str, str | None] = {}
    for tool in ("ptxas", "nvlink"):
        path = shutil.which(tool)
        found[tool] = path
        if path:
            try:
                out = subprocess.run(
                    [path, "--version"], capture_output=True, text=True, timeout=30
                )
                lines = [line for line in out.stdout.splitlines() if line.strip()]
                found[f"{tool} version"] = lines[-1] if lines else None
            except (OSError, subprocess.SubprocessError):
                found[f"{tool} version"] = None
    return found


def default_target() -> str:
    try:
        from pytest_jaxport.model.config import DEFAULT_GPU
    except ImportError:
        return "h100"
    return str(DEFAULT_GPU)


# -- suite sessions ------------------------------------------------------------------------------


def _cache_counts(lines: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in lines:
        found = _CACHE_LINE.search(line)
        if found:
            level, hits, misses = found.groups()
            counts[f"{level}_hits"] = int(hits)
            counts[f"{level}_misses"] = int(misses)
        compiled = _COMPILED_COUNT.search(line)
        if compiled:
            counts["compiled_for_census"] = int(compiled.group(1))
    return counts


def suite(
    cases: list[str],
    reps: int,
    tmp: Path,
    *,
    session: Callable[[Path, str, list[str]], dict[str, Any]],
    clear: Callable[[Path], None],
    write_suite: Callable[[Path, list[str]], Path],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Plain, default and cuda sessions, cold then warm per repetition, interleaved."""
    folders = {side: write_suite(tmp / f"cuda-{side}", cases) for side in MODES}
    runs: dict[str, list[dict[str, Any]]] = {
        f"{side}_{state}": [] for state in ("cold", "warm") for side in MODES
    }
    for rep in range(reps):
        order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
        for state in ("cold", "warm"):
            for side in order:
                if state == "cold":
                    clear(folders[side])
                mode, extra = MODES[side]
                run = session(folders[side], mode, extra)
                run.update(_cache_counts(run.get("jaxport_lines", [])))
                runs[f"{side}_{state}"].append(run)
        log(
            f"  cuda suite rep {rep + 1}/{reps}: "
            + ", ".join(f"{k} {v[-1]['wall_s']:.1f}s" for k, v in runs.items())
        )
    result: dict[str, Any] = {"reps": reps, "sides": {k: v[1] for k, v in MODES.items()}}
    result["runs"] = runs
    counts = re.findall(r"(\d+) (?:passed|failed|error)", runs["plain_cold"][0]["summary"])
    tests = sum(int(n) for n in counts) or len(cases)
    result["tests"] = tests
    medians: dict[str, dict[str, float]] = {}
    for key, values in runs.items():
        medians[key] = {
            "wall_s": statistics.median(v["wall_s"] for v in values),
            "cpu_s": statistics.median(v["cpu_s"] for v in values),
        }
    result["medians"] = medians
    ratios: dict[str, dict[str, float]] = {}
    added: dict[str, float] = {}
    for state in ("cold", "warm"):
        for a, b in RATIOS:
            ma, mb = medians[f"{a}_{state}"], medians[f"{b}_{state}"]
            ratios[f"{a}/{b} {state}"] = {
                "wall": ma["wall_s"] / mb["wall_s"],
                "cpu": ma["cpu_s"] / mb["cpu_s"],
                "paired_wall_median": statistics.median(
                    x["wall_s"] / y["wall_s"]
                    for x, y in zip(runs[f"{a}_{state}"], runs[f"{b}_{state}"])
                ),
            }
            added[f"{a}-{b} {state}"] = (ma["wall_s"] - mb["wall_s"]) / tests * 1000
    for side in MODES:
        mc, mw = medians[f"{side}_cold"], medians[f"{side}_warm"]
        ratios[f"{side} warm/cold"] = {
            "wall": mw["wall_s"] / mc["wall_s"],
            "cpu": mw["cpu_s"] / mc["cpu_s"],
            "paired_wall_median": statistics.median(
                w["wall_s"] / c["wall_s"]
                for w, c in zip(runs[f"{side}_warm"], runs[f"{side}_cold"])
            ),
        }
    result["ratios"] = ratios
    result["added_per_test_ms"] = added
    cache: dict[str, dict[str, Any]] = {}
    for key, values in runs.items():
        if key.startswith("plain"):
            continue
        fields = sorted({f for v in values for f in v if f.endswith(("_hits", "_misses"))})
        cache[key] = {f: [v.get(f) for v in values] for f in fields}
        cache[key]["compiled_for_census"] = [v.get("compiled_for_census") for v in values]
    result["cache"] = cache
    result["failed_sessions"] = [
        f"{key}[{i}]: {v['summary']}"
        for key, values in runs.items()
        for i, v in enumerate(values)
        if v["rc"] != 0
    ]
    result["summaries"] = {k: v[0]["summary"] for k, v in runs.items()}
    result["jaxport_lines"] = {k: v[0].get("jaxport_lines", []) for k, v in runs.items()}
    return result


# -- per-process fixed costs ---------------------------------------------------------------------

_FIXED = r"""
import json, sys, time
t0 = time.perf_counter()
import jax
import numpy as np
t1 = time.perf_counter()
jax.devices()
t2 = time.perf_counter()
from pytest_jaxport._jax import deviceless
problem = deviceless.cuda_plugin_problem()
t3 = time.perf_counter()
from pytest_jaxport.model.gpu import load_gpu_description
target = load_gpu_description(sys.argv[1])

def fn(x):
    return jax.numpy.tanh(x @ x).sum(0)

x = np.ones((64, 64), np.float32)
times = {}
for what in ("cpu", "cuda"):
    for i in ("first", "second"):
        jax.clear_caches()
        t = time.perf_counter()
        if what == "cpu":
            jax.jit(fn).lower(x).compile().as_text()
        else:
            deviceless.deviceless_compile(fn, (x,), {}, target_config=target)
        times[f"{what} compile of a small function, {i} in the process"] = time.perf_counter() - t
print(json.dumps({"problem": problem, "import jax": t1 - t0, "jax.devices() (cpu backend)": t2 - t1,
                  "cuda_plugin_problem() (CUDA plugin, one topology)": t3 - t2, **times}))
"""


def fixed_costs(samples: int = 3) -> dict[str, Any]:
    """Fresh interpreters: the CUDA plugin's start-up and the first deviceless compile."""
    runs: list[dict[str, Any]] = []
    for _ in range(samples):
        out = subprocess.run(
            [sys.executable, "-c", _FIXED, default_target()], capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"fixed-cost probe exited {out.returncode}: {out.stderr[-2000:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    problem = runs[0].pop("problem")
    for run in runs[1:]:
        run.pop("problem")
    return {
        "median_s": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
        "samples": runs,
        "plugin_problem": problem,
    }


# -- per-case, in-process ------------------------------------------------------------------------


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall seconds, CPU seconds (this process's threads + waited-for children: XLA runs
    ``ptxas`` as a subprocess when it finds one), value."""
    cpu = time.process_time() + _children_cpu()
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, time.process_time() + _children_cpu() - cpu, value


CPU_STAGES = ("cpu: trace+lower", "cpu: compile", "cpu: HLO text+parse+census")
CUDA_STAGES = (
    "cuda: trace+lower (deviceless)",
    "cuda: compile (deviceless)",
    "cuda: HLO text+parse+census+cache put",
)
E2E = "cuda: compile_deviceless (end to end)"
HIT = "cuda: cache hit (key+get+census)"


def per_case(cases: list[str], reps: int) -> dict[str, Any]:
    """One deviceless CUDA compile per case against its cpu compile; medians of ``reps``."""
    import jax
    import numpy as np
    from jax.experimental import topologies

    from benchmarks.corpora import models
    from pytest_jaxport._jax import keyparts, lowering, stablehlo, tracing
    from pytest_jaxport._jax.devices import versions
    from pytest_jaxport._jax.execution import compile_deviceless
    from pytest_jaxport.cache import CompiledCache, cache_key, source_fingerprint
    from pytest_jaxport.model.census import take_census
    from pytest_jaxport.model.gpu import load_gpu_description
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    target_name = default_target()
    target = load_gpu_description(target_name)
    device = topologies.get_topology_desc(
        platform="cuda", target_config=target, topology="1x1x1"
    ).devices[0]
    sharding = jax.sharding.SingleDeviceSharding(device)

    def abstract(leaf: Any) -> Any:
        leaf = np.asarray(leaf)
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

    built = {name: models.CASES[name]() for name in cases}
    wall: dict[str, dict[str, list[float]]] = {name: {} for name in cases}
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in cases}
    sites: dict[str, dict[str, int]] = {}

    def add(name: str, stage: str, t: tuple[float, float, Any]) -> Any:
        wall[name].setdefault(stage, []).append(t[0])
        cpu[name].setdefault(stage, []).append(t[1])
        return t[2]

    def fresh() -> None:
        jax.clear_caches()
        gc.collect()

    with tempfile.TemporaryDirectory(prefix="jaxport-cuda-cache-") as folder:
        cache = CompiledCache(directory=Path(folder))
        # Warm-up, not measured: the first compile of each kind in a process pays one-off
        # costs (fixed_costs measures them); a pytest session pays them once, not per test.
        fn, args = built[cases[0]]
        compile_deviceless(fn, args, {}, target_config=target, options={})
        jax.jit(fn).lower(*args).compile()
        for rep in range(reps):
            order = cases if rep % 2 == 0 else list(reversed(cases))
            for name in order:
                fn, args = built[name]
                variants = ["cpu", "cuda", "e2e"]
                variants = variants[rep % 3 :] + variants[: rep % 3]
                for variant in variants:
                    fresh()
                    if variant == "cpu":
                        lowered = add(name, CPU_STAGES[0], _timed(
                            lambda f=fn, a=args: jax.jit(f).trace(*a).lower()
                        ))  # fmt: skip
                        compiled = add(name, CPU_STAGES[1], _timed(lowered.compile))
                        program = add(name, CPU_STAGES[2], _timed(
                            lambda c=compiled: _census(c.as_text(), "cpu")
                        ))  # fmt: skip
                        sites.setdefault(name, {})["cpu compiled sites"] = program
                    elif variant == "cuda":
                        specs = jax.tree.map(abstract, args)
                        lowered = add(name, CUDA_STAGES[0], _timed(
                            lambda f=fn, s=specs: jax.jit(f).trace(*s).lower()
                        ))  # fmt: skip
                        compiled = add(name, CUDA_STAGES[1], _timed(lowered.compile))
                        program = add(name, CUDA_STAGES[2], _timed(
                            lambda c=compiled, n=name: _census(c.as_text(), "cuda", cache, f"miss-{n}")
                        ))  # fmt: skip
                        sites.setdefault(name, {})["cuda compiled sites"] = program
                    else:
                        text = add(name, E2E, _timed(
                            lambda f=fn, a=args: compile_deviceless(
                                f, a, {}, target_config=target, options={}
                            )
                        ))  # fmt: skip
                        # What a warm session does instead, per compiled platform: the key
                        # (module text + source lines, as fixture.Jaxport._compiled builds
                        # it), a cache read, the census.
                        traced = tracing.trace(fn, args, {})
                        lowered = lowering.lower(traced, "cuda")
                        program = stablehlo.read_program(lowered)
                        lines = keyparts.census_key_parts(traced)[1]

                        def key_of(lo: Any = lowered, pr: Any = program, li: str = lines) -> str:
                            module = lowering.module_text(lo) + "\n" + source_fingerprint(pr)
                            return cache_key(
                                module=module + "\n" + li,
                                platform="cuda",
                                mode="deviceless",
                                versions=versions(),
                                target_config=target,
                                options={},
                                xla_flags=os.environ.get("XLA_FLAGS", ""),
                            )

                        if cache.get(key_of()) is None:
                            cache.put(key_of(), parse_compiled_hlo(text))

                        def hit(key_of: Callable[[], str] = key_of) -> Any:
                            found = cache.get(key_of())
                            assert found is not None
                            return take_census(found, "cuda", level="compiled")

                        add(name, HIT, _timed(hit))
            log_line = f"  cuda per-case rep {rep + 1}/{reps} done"
            print(f"[{time.strftime('%H:%M:%S')}] {log_line}", flush=True)

    def medians(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
        return {
            name: {stage: statistics.median(v) for stage, v in stages.items()}
            for name, stages in samples.items()
        }

    m, mc = medians(wall), medians(cpu)
    stages = (*CPU_STAGES, *CUDA_STAGES, E2E, HIT)
    totals = {stage: sum(m[name][stage] for name in cases) for stage in stages}
    totals_cpu = {stage: sum(mc[name][stage] for name in cases) for stage in stages}
    compile_ratio = {name: m[name][CUDA_STAGES[1]] / m[name][CPU_STAGES[1]] for name in cases}
    cuda_total = {name: sum(m[name][s] for s in CUDA_STAGES) for name in cases}
    cpu_total = {name: sum(m[name][s] for s in CPU_STAGES) for name in cases}
    return {
        "target": target_name,
        "reps": reps,
        "cases": cases,
        "samples_s": wall,
        "samples_cpu_s": cpu,
        "median_s": m,
        "median_cpu_s": mc,
        "total_s": totals,
        "total_cpu_s": totals_cpu,
        "compiled_sites": sites,
        "cuda_compile_over_cpu_compile": compile_ratio,
        "cuda_compile_over_cpu_compile_total": totals[CUDA_STAGES[1]] / totals[CPU_STAGES[1]],
        "cuda_compile_over_cpu_compile_total_cpu": (
            totals_cpu[CUDA_STAGES[1]] / totals_cpu[CPU_STAGES[1]]
        ),
        "cuda_all_over_cpu_all": {name: cuda_total[name] / cpu_total[name] for name in cases},
        "e2e_per_check_ms": totals[E2E] / len(cases) * 1000,
        "hit_per_check_ms": totals[HIT] / len(cases) * 1000,
    }


def _census(text: str, platform: str, cache: Any = None, name: str | None = None) -> int:
    """Parse compiled HLO, take its census (and store it, as a cache miss does); its size."""
    from pytest_jaxport.model.census import take_census
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    program = parse_compiled_hlo(text)
    take_census(program, platform, level="compiled")
    if cache is not None and name is not None:
        cache.put(name, program)
    return sum(len(sites) for sites in program.functions.values())
