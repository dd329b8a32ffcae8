"""In-process measurements: per-check breakdown, scale and profile.

Everything here calls pytest-jaxport's own functions the way ``fixture.Jaxport.check`` does
(``lowering.trace`` once, then per platform ``lowering.lower`` + ``lowering.read_program`` +
``census.take_census``, then compile + execute on the present platform, then
``numerics.compare``). JAX's in-memory caches are cleared before every measured check
(``jax.clear_caches()``), as each test of a real suite checks a function not seen before.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import io
import math
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import models

from pytest_jaxport._jax import lowering
from pytest_jaxport._jax import profile as profiler
from pytest_jaxport.model import census as census_mod
from pytest_jaxport.model import compare as numerics
from pytest_jaxport.model import targets
from pytest_jaxport.model.config import ProjectConfig

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def session_classifier() -> Callable[..., Any]:
    """What ``JaxportSession.classifier()`` returns with no classify hooks: a fresh cache.

    The fixture asks the session for a new one per test, so the cache starts empty per check.
    """

    @functools.cache
    def classify_op(platform: str, op: str, target: str | None) -> Any:
        return targets.classify(platform, op, target)

    return classify_op


class Clock:
    """Collects named durations per key; medians at the end."""

    def __init__(self) -> None:
        self.samples: dict[str, dict[str, list[float]]] = {}

        self.cpu: dict[str, dict[str, list[float]]] = {}

    def add(self, key: str, stage: str, seconds: float) -> None:
        """Record a wall time (and the CPU time of the _timed call that produced it)."""
        self.samples.setdefault(key, {}).setdefault(stage, []).append(seconds)
        self.cpu.setdefault(key, {}).setdefault(stage, []).append(LAST_CPU[0])

    def cpu_medians(self) -> dict[str, dict[str, float]]:
        return {
            key: {stage: statistics.median(v) for stage, v in stages.items()}
            for key, stages in self.cpu.items()
        }

    def medians(self) -> dict[str, dict[str, float]]:
        return {
            key: {stage: statistics.median(v) for stage, v in stages.items()}
            for key, stages in self.samples.items()
        }


LAST_CPU: list[float] = [0.0]


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds and value; the process CPU seconds go to LAST_CPU[0]."""
    cpu = time.process_time()
    start = time.perf_counter()
    value = fn()
    wall = time.perf_counter() - start
    LAST_CPU[0] = time.process_time() - cpu
    return wall, value


def _fresh() -> None:
    jax.clear_caches()
    gc.collect()


def _jaxport_instance(rootdir: Path) -> Any:
    import inspect

    from pytest_jaxport.fixture import Jaxport

    # The constructor's keywords have changed while the plugin is developed: pass only the
    # ones this version of the fixture takes.
    offered = {
        "config": ProjectConfig().resolve(),
        "classifier": session_classifier(),
        "rootdir": rootdir,
        "nodeid": "benchmarks::check",
    }
    accepted = inspect.signature(Jaxport).parameters
    return Jaxport(**{k: v for k, v in offered.items() if k in accepted})


# -- 2. per-check breakdown --------------------------------------------------------------------


def _staged_check(fn: Any, args: tuple[Any, ...], clock: Clock, key: str) -> None:
    """fixture.check, stage by stage, timing each (default config: 4 platforms, cpu present,
    a cold lowered cache: the absent platforms are keyed, lowered together and read once)."""
    classifier = session_classifier()
    t, traced = _timed(lambda: lowering.trace(fn, args, {}))
    clock.add(key, "trace", t)
    t, lowered_cpu = _timed(lambda: lowering.lower(traced, "cpu"))
    clock.add(key, "lower:cpu", t)
    t, program = _timed(lambda: lowering.read_program(lowered_cpu))
    clock.add(key, "read_program:cpu", t)
    t, _ = _timed(lambda: census_mod.take_census(program, "cpu", classifier=classifier))
    clock.add(key, "census:cpu", t)
    absent = PLATFORMS[1:]
    t, _ = _timed(lambda: lowering.census_key_parts(traced))
    clock.add(key, "cache key", t)
    t, together = _timed(lambda: traced.lower(lowering_platforms=absent))
    clock.add(key, "lower:together", t)
    t, programs = _timed(lambda: lowering.read_programs(together, len(absent)))
    clock.add(key, "read_program:together", t)
    for platform, read in zip(absent, programs, strict=True):
        t, _ = _timed(
            lambda pr=read, p=platform: census_mod.take_census(pr, p, classifier=classifier)
        )
        clock.add(key, f"census:{platform}", t)
    # lowering.execute on the default platform: lowered.compile()(*args), block, to_outputs.
    t, compiled = _timed(lambda: lowered_cpu.compile())
    clock.add(key, "compile:cpu", t)
    t, value = _timed(lambda: jax.block_until_ready(compiled(*args)))
    clock.add(key, "execute:cpu", t)
    t, outputs = _timed(lambda: lowering.to_outputs(value))
    clock.add(key, "to_outputs", t)
    # With --jaxport-report (or a share budget) check() also measures the runtime share of
    # the platforms it ran on: a profiler session around 3 more runs, then the compiled
    # module's instructions classified (fixture.Jaxport._measured).
    try:
        t, times = _timed(
            lambda: profiler.measure(
                lambda: jax.block_until_ready(compiled(*args)), runs=3, warmup=0
            )
        )
    except RuntimeError:  # jaxlib < 0.8.3: no measured share (reports fall back to the estimate)
        PROFILER_MISSING[0] = True
        t, times = 0.0, {}
    clock.add(key, "profile: 3 runs under the profiler", t)
    t, _ = _timed(lambda: _measured_share(compiled, times, classifier))
    clock.add(key, "profile: compiled text, sites, share", t)
    # Only cpu is present here, so check() compares nothing; time what one comparison with a
    # second backend would cost (cpu outputs against themselves).
    t, _ = _timed(
        lambda: numerics.compare(outputs, outputs, reference_platform="cpu", platform="cuda")
    )
    clock.add(key, "compare (one pair)", t)


PROFILER_MISSING = [False]
"""Set when this jaxlib's profiler cannot measure (the breakdown then records 0 for it)."""


def _measured_share(compiled: Any, times: dict[str, float], classifier: Any) -> Any:
    """What fixture.Jaxport._measured does with the profiler's times."""
    from pytest_jaxport.model.cost import share_of
    from pytest_jaxport.model.hlo import instruction_sites

    sites = instruction_sites(lowering.compiled_text(compiled))
    timed = []
    for name, seconds in times.items():
        site = sites.get(name)
        if site is None:
            timed.append(("xla", None, seconds))
            continue
        target = site.target if site.op.endswith("custom_call") else None
        found = targets.classify("cpu", site.op, target, level="compiled")
        timed.append((found.layer, found.library, seconds))
    return share_of(timed, "measured")


def _report_side(probe: Any) -> dict[str, float]:
    """What session._judge does per probe after the test: budget, to_dict, probe_text."""
    from pytest_jaxport.model.budget import evaluate
    from pytest_jaxport.view.text import probe_text

    resolved = ProjectConfig().resolve()
    t_budget, _ = _timed(lambda: evaluate(probe, resolved.budget))
    t_dict, _ = _timed(lambda: probe.to_dict())
    t_text, _ = _timed(lambda: probe_text(probe))
    return {"budget.evaluate": t_budget, "probe.to_dict": t_dict, "render.probe_text": t_text}


def breakdown(cases: list[str], reps: int, rootdir: Path) -> dict[str, Any]:
    built = {name: models.CASES[name]() for name in cases}
    clock = Clock()
    for rep in range(reps):
        order = cases if rep % 2 == 0 else list(reversed(cases))
        for name in order:
            fn, args = built[name]
            variants = ["plain", "staged", "check"]
            variants = variants[rep % 3 :] + variants[: rep % 3]
            for variant in variants:
                _fresh()
                if variant == "plain":
                    t, _ = _timed(lambda: jax.block_until_ready(jax.jit(fn)(*args)))
                    clock.add(name, "plain jit+run", t)
                elif variant == "staged":
                    _staged_check(fn, args, clock, name)
                else:
                    jaxport = _jaxport_instance(rootdir)
                    t, _ = _timed(lambda: jaxport.check(fn, *args))
                    clock.add(name, "jaxport.check (end to end)", t)
                    for stage, seconds in _report_side(jaxport.probes[-1]).items():
                        LAST_CPU[0] = seconds
                        clock.add(name, stage, seconds)
    per_case = clock.medians()
    stage_names = [
        "trace",
        "lower:cpu",
        "read_program:cpu",
        "cache key",
        "lower:together",
        "read_program:together",
        *(f"census:{p}" for p in PLATFORMS),
        "compile:cpu",
        "execute:cpu",
        "to_outputs",
        "compare (one pair)",
        "profile: 3 runs under the profiler",
        "profile: compiled text, sites, share",
        "budget.evaluate",
        "probe.to_dict",
        "render.probe_text",
    ]
    totals = {s: sum(per_case[c][s] for c in cases) for s in stage_names}
    # The default config does not profile: the measured runtime share is extra, reported as
    # its own row (share relative to the default check).
    staged_sum = sum(v for k, v in totals.items() if not k.startswith("profile:"))
    grouped = {
        "trace": totals["trace"],
        "lower cpu": totals["lower:cpu"],
        "lowered-cache key (jaxpr text, source lines)": totals["cache key"],
        "lower cuda+rocm+tpu (together)": totals["lower:together"],
        "read_program (cpu, and cuda+rocm+tpu once)": totals["read_program:cpu"]
        + totals["read_program:together"],
        "census (4 platforms)": sum(totals[f"census:{p}"] for p in PLATFORMS),
        "compile cpu": totals["compile:cpu"],
        "execute cpu": totals["execute:cpu"],
        "to_outputs": totals["to_outputs"],
        "compare (one pair, not run on a cpu-only machine)": totals["compare (one pair)"],
        "measured runtime share (only with a report or a share budget)": totals[
            "profile: 3 runs under the profiler"
        ]
        + totals["profile: compiled text, sites, share"],
        "report side (budget, to_dict, probe_text)": totals["budget.evaluate"]
        + totals["probe.to_dict"]
        + totals["render.probe_text"],
    }
    plain = sum(per_case[c]["plain jit+run"] for c in cases)
    check = sum(per_case[c]["jaxport.check (end to end)"] for c in cases)
    cpu = clock.cpu_medians()
    plain_cpu = sum(cpu[c]["plain jit+run"] for c in cases)
    check_cpu = sum(cpu[c]["jaxport.check (end to end)"] for c in cases)
    # What check() adds on top of what a plain jit also does (trace, one lowering, compile, run).
    plain_equivalent = (
        grouped["trace"] + grouped["lower cpu"] + grouped["compile cpu"] + grouped["execute cpu"]
    )
    return {
        "cases": cases,
        "reps": reps,
        "per_case_median_s": per_case,
        "stage_total_s": totals,
        "grouped_total_s": grouped,
        "grouped_share": {k: v / staged_sum for k, v in grouped.items()},
        "staged_sum_s": staged_sum,
        "plain_total_s": plain,
        "check_total_s": check,
        "check_over_plain": check / plain,
        "plain_total_cpu_s": plain_cpu,
        "check_total_cpu_s": check_cpu,
        "check_over_plain_cpu": check_cpu / plain_cpu,
        "per_case_median_cpu_s": cpu,
        "added_by_plugin_s": staged_sum - plain_equivalent,
        "added_share_of_check": (staged_sum - plain_equivalent) / staged_sum,
        "measured_share_available": not PROFILER_MISSING[0],
        "per_case_check_over_plain": {
            c: per_case[c]["jaxport.check (end to end)"] / per_case[c]["plain jit+run"]
            for c in cases
        },
    }


# -- 3. scale -------------------------------------------------------------------------------


def _ops(program: Any) -> int:
    """Op sites of a program, identical ops counted each (read_program groups them)."""
    return sum(getattr(site, "count", 1) for sites in program.functions.values() for site in sites)


def _weighted(census: Any) -> int:
    return census.xla_ops + sum(k.count for k in census.kernels)


def _per_doubling(t1: float, t2: float, n1: float, n2: float) -> float | None:
    if n2 / n1 < 1.3 or t1 <= 0 or t2 <= 0:
        return None
    return 2 ** (math.log(t2 / t1) / math.log(n2 / n1))


def _slope(points: list[tuple[float, float]]) -> float | None:
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    if len(points) < 2 or max(xs) - min(xs) < math.log(1.3):
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def scale(layers: list[int], reps: int) -> dict[str, Any]:
    configs = [(f, m, n) for f in ("loop", "scan") for m in ("fwd", "grad") for n in layers]
    built = {c: models.transformer(c[2], c[0], c[1]) for c in configs}
    clock = Clock()
    counts: dict[str, dict[str, int]] = {}
    # The session's classifier lives for the whole pytest run (JaxportSession.classifier):
    # after the first check, each distinct op is already classified. "census (fresh
    # classifier)" is the first check of a session, which classifies every distinct op.
    shared = session_classifier()
    for rep in range(reps):
        order = configs if rep % 2 == 0 else list(reversed(configs))
        for config in order:
            key = "{}/{}/{}".format(*config)
            fn, args = built[config]
            _fresh()
            t, traced = _timed(lambda: lowering.trace(fn, args, {}))
            clock.add(key, "trace", t)
            t, lowered = _timed(lambda: lowering.lower(traced, "cpu"))
            clock.add(key, "lower", t)
            t, program = _timed(lambda: lowering.read_program(lowered))
            clock.add(key, "read_program", t)
            classifier = session_classifier()
            t, census = _timed(
                lambda: census_mod.take_census(program, "cpu", classifier=classifier)
            )
            clock.add(key, "census (fresh classifier)", t)
            t, census = _timed(lambda: census_mod.take_census(program, "cpu", classifier=shared))
            clock.add(key, "census", t)
            counts[key] = {
                "static_ops": _ops(program),
                "weighted_ops": _weighted(census),
                "functions": len(program.functions),
            }
            del traced, lowered, program
    med = clock.medians()
    cpu = clock.cpu_medians()
    rows = []
    for f, m, n in configs:
        key = f"{f}/{m}/{n}"
        r = {"form": f, "mode": m, "layers": n, **counts[key], **med[key]}
        r.update({f"{stage} [cpu]": v for stage, v in cpu[key].items()})
        r["census_share_of_lower"] = r["census"] / r["lower"]
        r["fresh_census_share_of_lower"] = r["census (fresh classifier)"] / r["lower"]
        r["read_census_share_of_lower"] = (r["census"] + r["read_program"]) / r["lower"]
        rows.append(r)
    linearity = []
    for f in ("loop", "scan"):
        for m in ("fwd", "grad"):
            series = [r for r in rows if r["form"] == f and r["mode"] == m]
            entry: dict[str, Any] = {"form": f, "mode": m, "steps": []}
            for a, b in zip(series, series[1:]):
                entry["steps"].append(
                    {
                        "layers": [a["layers"], b["layers"]],
                        "ops_ratio": b["static_ops"] / a["static_ops"],
                        "weighted_ops_ratio": b["weighted_ops"] / a["weighted_ops"],
                        **{
                            f"{s}_time_ratio": b[s] / a[s]
                            for s in ("lower", "read_program", "census")
                        },
                        "census_per_2x_weighted_ops": _per_doubling(
                            a["census"], b["census"], a["weighted_ops"], b["weighted_ops"]
                        ),
                        "census_cpu_per_2x_weighted_ops": _per_doubling(
                            a["census [cpu]"],
                            b["census [cpu]"],
                            a["weighted_ops"],
                            b["weighted_ops"],
                        ),
                        "read_program_per_2x_ops": _per_doubling(
                            a["read_program"], b["read_program"], a["static_ops"], b["static_ops"]
                        ),
                    }
                )
            for stage, ops in (
                ("census", "weighted_ops"),
                ("census [cpu]", "weighted_ops"),
                ("read_program", "static_ops"),
                ("lower", "static_ops"),
            ):
                slope = _slope([(r[ops], r[stage]) for r in series])
                entry[f"{stage}_fit_per_2x_ops"] = None if slope is None else 2**slope
            first, last = series[0], series[-1]
            entry["census_time_ratio_last_over_first"] = last["census"] / first["census"]
            entry["ops_ratio_last_over_first"] = last["weighted_ops"] / first["weighted_ops"]
            linearity.append(entry)
    return {"layers": layers, "reps": reps, "rows": rows, "linearity": linearity}


# -- 5. profile -----------------------------------------------------------------------------


def profile(cases: list[str], rootdir: Path, top: int = 25) -> dict[str, Any]:
    """cProfile of jaxport.check over ``cases`` (caches cleared before each)."""
    built = {name: models.CASES[name]() for name in cases}
    profiler = cProfile.Profile()
    for name in cases:
        fn, args = built[name]
        _fresh()
        jaxport = _jaxport_instance(rootdir)
        profiler.enable()
        jaxport.check(fn, *args)
        profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())  # sum of tottime
    entries = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        entries.append(
            {
                "function": f"{_short(file)}:{line}({func})",
                "calls": nc,
                "tottime_s": tt,
                "cumtime_s": ct,
            }
        )
    by_tot = sorted(entries, key=lambda e: -e["tottime_s"])[:top]
    ours = sorted(
        (e for e in entries if "pytest_jaxport" in e["function"]), key=lambda e: -e["cumtime_s"]
    )[:top]
    buffer = io.StringIO()
    pstats.Stats(profiler, stream=buffer).sort_stats("cumulative").print_stats(40)
    return {
        "cases": cases,
        "total_tottime_s": total,
        "top_by_tottime": by_tot,
        "pytest_jaxport_by_cumtime": ours,
        "text_top_cumulative": buffer.getvalue(),
    }


def _short(file: str) -> str:
    for marker in ("site-packages/", "/work/main/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file
