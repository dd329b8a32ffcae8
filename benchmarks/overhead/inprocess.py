"""In-process measurements: per-check breakdown, scale and profile.

The breakdown times ``fixture.Jaxport.check`` itself, stage by stage, through the examiner's
instrumentation hook (``Jaxport(stages=StageTimer())``, :mod:`pytest_jaxport.examine.stages`):
no copy of the pipeline to drift from it. Scale times the lowering and the census on their own
(``lowering.lower``, ``stablehlo.read_program``, ``census.take_census``) against program size.
JAX's in-memory caches are cleared before every measured check (``jax.clear_caches()``), as
each test of a real suite checks a function not seen before.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import io
import math
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from benchmarks.corpora import models
from pytest_jaxport._jax import lowering, stablehlo, tracing
from pytest_jaxport.cache import LOWERED_FORMAT, CompiledCache, CompileSettings
from pytest_jaxport.examine.stages import StageTimer
from pytest_jaxport.model import census as census_mod
from pytest_jaxport.model import classification
from pytest_jaxport.model.config import ProjectConfig

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def session_classifier() -> Callable[..., Any]:
    """What ``JaxportSession.classifier()`` returns with no classify hooks: a fresh cache.

    The fixture asks the session for a new one per test, so the cache starts empty per check.
    """

    @functools.cache
    def classify_op(platform: str, op: str, target: str | None) -> Any:
        return classification.classify(platform, op, target)

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


def _jaxport_instance(
    rootdir: Path, *, stages: StageTimer | None = None, profile: bool = False
) -> Any:
    """A fixture as the plugin makes it for one test, with a cold lowered cache (an empty
    folder: the absent platforms are keyed, lowered together and written once)."""
    from pytest_jaxport.fixture import Jaxport

    lowered = Path(tempfile.mkdtemp(prefix="jaxport-lowered-"))
    return Jaxport(
        config=ProjectConfig().resolve(),
        classifier=session_classifier(),
        rootdir=rootdir,
        compile_settings=CompileSettings(
            lowered_cache=CompiledCache(directory=lowered, format=LOWERED_FORMAT)
        ),
        profile=profile,
        stages=stages,
    )


# -- 2. per-check breakdown --------------------------------------------------------------------

PROFILED = "measured runtime share (only with a report or a share budget)"


def _checked(fn: Any, args: tuple[Any, ...], clock: Clock, key: str, rootdir: Path) -> None:
    """``Jaxport.check`` end to end, each of its stages timed by the examiner's hook
    (``pytest_jaxport.examine.stages``): default config (4 platforms, cpu present), a cold
    lowered cache. What the hook does not cover (arguments, the caller's line, the probe) is
    the end-to-end time less the stages'."""
    timer = StageTimer()
    jaxport = _jaxport_instance(rootdir, stages=timer)
    t, _ = _timed(lambda: jaxport.check(fn, *args))
    clock.add(key, "jaxport.check (end to end)", t)
    for stage, seconds in timer.wall.items():
        LAST_CPU[0] = sum(timer.cpu[stage])
        clock.add(key, stage, sum(seconds))
    LAST_CPU[0] = 0.0
    clock.add(key, "not in a stage", max(t - sum(timer.totals().values()), 0.0))
    for stage, seconds in _report_side(jaxport.probes[-1]).items():
        LAST_CPU[0] = seconds
        clock.add(key, stage, seconds)


def _profiled(fn: Any, args: tuple[Any, ...], clock: Clock, key: str, rootdir: Path) -> None:
    """The same check with profiling on (``--jaxport-report`` or a share budget): its
    ``share:cpu`` stage is the measured runtime share (3 runs under the profiler, then the
    compiled module's instructions classified)."""
    timer = StageTimer()
    jaxport = _jaxport_instance(rootdir, stages=timer, profile=True)
    jaxport.check(fn, *args)
    measured = jaxport.probes[-1].platforms["cpu"].runtime_share
    if measured is None or measured.basis != "measured":
        PROFILER_MISSING[0] = True  # jaxlib < 0.8.3: reports fall back to the estimate
    LAST_CPU[0] = sum(timer.cpu.get("share:cpu", [0.0]))
    clock.add(key, PROFILED, sum(timer.wall.get("share:cpu", [0.0])))


PROFILER_MISSING = [False]
"""Set when this jaxlib's profiler cannot measure (the breakdown then says so)."""


def _report_side(probe: Any) -> dict[str, float]:
    """What the session does per probe after the test: budget, to_dict, probe_text."""
    from pytest_jaxport.model.evaluation import evaluate
    from pytest_jaxport.view.text import probe_text

    resolved = ProjectConfig().resolve()
    t_budget, _ = _timed(lambda: evaluate(probe, resolved.budget))
    t_dict, _ = _timed(lambda: probe.to_dict())
    t_text, _ = _timed(lambda: probe_text(probe))
    return {"budget.evaluate": t_budget, "probe.to_dict": t_dict, "render.probe_text": t_text}


ABSENT = "+".join(PLATFORMS[1:])
GROUPS: dict[str, Callable[[str], bool]] = {
    "trace": lambda s: s == "trace",
    "lower cpu": lambda s: s == "lower:cpu",
    "lowered cache (keys: jaxpr text, source lines; reads)": lambda s: s == "lowered cache",
    "lower cuda+rocm+tpu (together)": lambda s: s == f"lower:{ABSENT}",
    "lower an absent platform alone (where together failed)": lambda s: (
        s.startswith("lower:") and s not in ("lower:cpu", f"lower:{ABSENT}")
    ),
    "execute cpu (compile, run, outputs)": lambda s: s == "execute:cpu",
    "census (4 platforms)": lambda s: s.startswith("census:"),
    "runtime share estimate (4 platforms)": lambda s: s.startswith("share:"),
    "compare": lambda s: s == "compare",
    "not in a stage (arguments, the caller's line, the probe)": lambda s: s == "not in a stage",
    "report side (budget, to_dict, probe_text)": lambda s: (
        s in ("budget.evaluate", "probe.to_dict", "render.probe_text")
    ),
}
"""The breakdown's rows: each a test of the stage names the hook reported."""

PLAIN_EQUIVALENT = ("trace", "lower cpu", "execute cpu (compile, run, outputs)")
"""The rows a plain ``jax.jit(fn)(*args)`` does too."""


def breakdown(cases: list[str], reps: int, rootdir: Path) -> dict[str, Any]:
    built = {name: models.CASES[name]() for name in cases}
    clock = Clock()
    for rep in range(reps):
        order = cases if rep % 2 == 0 else list(reversed(cases))
        for name in order:
            fn, args = built[name]
            variants = ["plain", "check", "profiled"]
            variants = variants[rep % 3 :] + variants[: rep % 3]
            for variant in variants:
                _fresh()
                if variant == "plain":
                    t, _ = _timed(lambda: jax.block_until_ready(jax.jit(fn)(*args)))
                    clock.add(name, "plain jit+run", t)
                elif variant == "check":
                    _checked(fn, args, clock, name, rootdir)
                else:
                    _profiled(fn, args, clock, name, rootdir)
    per_case = clock.medians()
    ends = ("plain jit+run", "jaxport.check (end to end)", PROFILED)
    stage_names = sorted({s for c in cases for s in per_case[c] if s not in ends})
    totals = {s: sum(per_case[c].get(s, 0.0) for c in cases) for s in stage_names}
    grouped = {
        row: sum(v for s, v in totals.items() if belongs(s)) for row, belongs in GROUPS.items()
    }
    staged_sum = sum(grouped.values())
    # The default config does not profile: the measured runtime share is extra, reported as
    # its own row (share relative to the default check).
    grouped[PROFILED] = sum(per_case[c][PROFILED] for c in cases)
    totals[PROFILED] = grouped[PROFILED]
    plain = sum(per_case[c]["plain jit+run"] for c in cases)
    check = sum(per_case[c]["jaxport.check (end to end)"] for c in cases)
    cpu = clock.cpu_medians()
    plain_cpu = sum(cpu[c]["plain jit+run"] for c in cases)
    check_cpu = sum(cpu[c]["jaxport.check (end to end)"] for c in cases)
    # What check() adds on top of what a plain jit also does (trace, one lowering, compile, run).
    plain_equivalent = sum(grouped[row] for row in PLAIN_EQUIVALENT)
    return {
        "cases": cases,
        "reps": reps,
        "timed_by": "the examiner's stage hook (pytest_jaxport.examine.stages.StageTimer)",
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
            t, traced = _timed(lambda: tracing.trace(fn, args, {}))
            clock.add(key, "trace", t)
            t, lowered = _timed(lambda: lowering.lower(traced, "cpu"))
            clock.add(key, "lower", t)
            t, program = _timed(lambda: stablehlo.read_program(lowered))
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
