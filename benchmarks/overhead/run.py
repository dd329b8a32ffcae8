"""pytest-jaxport benchmarks: suite overhead, per-check breakdown, scale, profile.

    python -m benchmarks.overhead.run [--quick] [--out benchmarks/results/<name>.json]

See benchmarks/overhead/README.md for what each part measures and the latest numbers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks import REPO, RESULTS
from benchmarks.corpora.suite import PLAIN_PLUGIN, add_package, write_suite

DEMO = REPO / "examples" / "demo"

TARGETS = {
    "suite_cold_ratio_max": 1.25,
    "suite_warm_ratio_max": 1.10,
    "census_time_per_2x_ops_max": 2.2,
    "census_share_of_lowering_max": 0.02,
}

QUICK_CASES = ["mlp_small", "convnet_small", "transformer_block_small", "solve", "lowpass"]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- machine ------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            out = subprocess.run(
                ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30
            )
            return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "versions": {p: version(p) for p in ("jax", "jaxlib", "pytest", "pytest-jaxport", "numpy")},
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_head": git("rev-parse", "HEAD"),
        "git_dirty_files": len(git("status", "--porcelain").splitlines()),
        "loadavg_start": os.getloadavg(),
    }


# -- 1. suite overhead ----------------------------------------------------------------------

PLAIN_ARGS = ["-p", "no:jaxport", "-p", PLAIN_PLUGIN]
_SUMMARY = re.compile(r"=* ?(.*\bin [\d.]+s.*?) ?=*$")


def _clear(folder: Path) -> None:
    shutil.rmtree(folder / ".pytest_cache", ignore_errors=True)
    for cache in folder.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def _session(folder: Path, mode: str, extra: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "pytest", "-q", "-rN", *(PLAIN_ARGS if mode == "b" else extra)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else ""
    if done.returncode not in (0, 1):
        raise RuntimeError(
            f"pytest in {folder} ({mode}) exited {done.returncode}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    jaxport_lines = [line.strip() for line in lines if line.startswith("jaxport:")]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "rc": done.returncode,
        "summary": summary,
        "jaxport_lines": jaxport_lines,
    }


def suite_overhead(
    name: str,
    source: Path | None,
    cases: list[str],
    reps: int,
    tmp: Path,
    plugin_args: list[str] | None = None,
    module: str = "models",
    plain: bool = False,
) -> dict[str, Any]:
    """Interleaved a/b sessions, cold (no .pytest_cache, no __pycache__) then warm.

    a: the plugin with the suite's config (plus ``plugin_args``); b: ``-p no:jaxport`` and
    the plain fixture of ``corpora/jaxport_plain.py``. ``plain``: the generated tests jit and run each
    case themselves (the suite an audit, ``--jaxport-audit``, sees).
    """
    extra = plugin_args or []
    folders = {}
    for mode in ("a", "b"):
        folder = tmp / f"{name}-{mode}"
        if source is None:
            write_suite(folder, cases, module, plain=plain)
        else:
            shutil.copytree(
                source,
                folder,
                ignore=shutil.ignore_patterns(".pytest_cache", "__pycache__", "*.json", "*.md"),
            )
            add_package(folder)  # the plain baseline, for -p
        folders[mode] = folder
    runs: dict[str, list[dict[str, Any]]] = {"a_cold": [], "b_cold": [], "a_warm": [], "b_warm": []}
    for rep in range(reps):
        order = ["a", "b"] if rep % 2 == 0 else ["b", "a"]
        for mode in order:
            _clear(folders[mode])
            runs[f"{mode}_cold"].append(_session(folders[mode], mode, extra))
        for mode in order:
            runs[f"{mode}_warm"].append(_session(folders[mode], mode, extra))
        log(
            f"  {name} rep {rep + 1}/{reps}: "
            + ", ".join(f"{k} {v[-1]['wall_s']:.1f}s" for k, v in runs.items())
        )
    result: dict[str, Any] = {"reps": reps, "plugin_args": extra, "runs": runs}
    for key, values in runs.items():
        result[f"{key}_median_wall_s"] = statistics.median(v["wall_s"] for v in values)
        result[f"{key}_median_cpu_s"] = statistics.median(v["cpu_s"] for v in values)
    for state in ("cold", "warm"):
        a, b = runs[f"a_{state}"], runs[f"b_{state}"]
        result[f"{state}_ratio_wall"] = (
            result[f"a_{state}_median_wall_s"] / result[f"b_{state}_median_wall_s"]
        )
        result[f"{state}_ratio_cpu"] = (
            result[f"a_{state}_median_cpu_s"] / result[f"b_{state}_median_cpu_s"]
        )
        result[f"{state}_paired_ratio_wall_median"] = statistics.median(
            x["wall_s"] / y["wall_s"] for x, y in zip(a, b)
        )
        result[f"{state}_added_wall_s"] = (
            result[f"a_{state}_median_wall_s"] - result[f"b_{state}_median_wall_s"]
        )
    counts = re.findall(r"(\d+) (?:passed|failed|error)", runs["b_cold"][0]["summary"])
    tests = sum(int(n) for n in counts) or None
    result["tests"] = tests
    if tests:
        result["cold_added_per_test_s"] = result["cold_added_wall_s"] / tests
    result["summaries"] = {k: v[0]["summary"] for k, v in runs.items()}
    return result


def fixed_costs() -> dict[str, Any]:
    """Session-level costs in a fresh interpreter: plugin import, jax import, first check."""
    code = r"""
import json, time
import pytest
t0 = time.perf_counter(); import pytest_jaxport.plugin; t1 = time.perf_counter()
import jax; t2 = time.perf_counter()
from pytest_jaxport._jax.devices import present_platforms
present_platforms(); t3 = time.perf_counter()
print(json.dumps({"import pytest_jaxport.plugin (after pytest)": t1 - t0, "import jax": t2 - t1,
                  "present_platforms() first call": t3 - t2}))
"""
    samples: list[dict[str, float]] = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


# -- 4. targets ------------------------------------------------------------------------------


def verdicts(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    suites = dict(results.get("suite", {}))
    if results.get("suite_compiled_cpu"):
        suites["generated --jaxport-compile=cpu"] = results["suite_compiled_cpu"]
    if results.get("suite_report"):
        suites["generated --jaxport-report"] = results["suite_report"]
    for name, suite in suites.items():
        if not suite or "cold_ratio_wall" not in suite:
            continue
        for state, key in (("cold", "suite_cold_ratio_max"), ("warm", "suite_warm_ratio_max")):
            ratio = suite[f"{state}_ratio_wall"]
            out[f"{name} suite {state} wall ratio <= {TARGETS[key]}"] = {
                "value": round(ratio, 3),
                "cpu_time_ratio": round(suite[f"{state}_ratio_cpu"], 3),
                "pass": ratio <= TARGETS[key],
            }
    scale = results.get("scale")
    if scale and "rows" in scale:
        limit = TARGETS["census_time_per_2x_ops_max"]
        for clock in ("census_per_2x_weighted_ops", "census_cpu_per_2x_weighted_ops"):
            steps = [
                s[clock] for e in scale["linearity"] for s in e["steps"] if s[clock] is not None
            ]
            fits = [
                e[key]
                for e in scale["linearity"]
                for key in [
                    "census_fit_per_2x_ops" if "cpu" not in clock else "census [cpu]_fit_per_2x_ops"
                ]
                if e.get(key) is not None
            ]
            if steps:
                what = "CPU" if "cpu" in clock else "wall"
                out[f"census {what} time per 2x ops <= {limit}"] = {
                    "worst_step": round(max(steps), 3),
                    "median_step": round(statistics.median(steps), 3),
                    "fit_over_all_sizes": [round(f, 3) for f in fits],
                    "pass": max(fits) <= limit if fits else max(steps) <= limit,
                }
        shares = [r["census_share_of_lower"] for r in scale["rows"]]
        both = [r["read_census_share_of_lower"] for r in scale["rows"]]
        limit = TARGETS["census_share_of_lowering_max"]
        out[f"census / lowering (cpu) < {limit}"] = {
            "value_max": round(max(shares), 4),
            "value_median": round(statistics.median(shares), 4),
            "pass": max(shares) < limit,
        }
        fresh = [r["fresh_census_share_of_lower"] for r in scale["rows"]]
        out[f"[first check of a session: fresh classifier] census / lowering < {limit}"] = {
            "value_max": round(max(fresh), 4),
            "value_median": round(statistics.median(fresh), 4),
            "pass": max(fresh) < limit,
        }
        out[f"(census + read_program) / lowering (cpu) < {limit}"] = {
            "value_max": round(max(both), 4),
            "value_median": round(statistics.median(both), 4),
            "pass": max(both) < limit,
        }
    return out


# -- main -----------------------------------------------------------------------------------


ALL_PARTS = (
    "suite", "second", "report", "demo", "breakdown", "scale", "profile", "compiled", "cuda",
    "sharded",
)  # fmt: skip
SHARDED_XLA_FLAGS = "--xla_force_host_platform_device_count=4"
DEFAULT_PARTS = "suite,second,report,demo,breakdown,scale,profile"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="about a minute: fewer cases/reps")
    parser.add_argument("--out", type=Path, default=None, help="results JSON path")
    parser.add_argument(
        "--reps", type=int, default=None, help="suite repetitions (default 5 generated, 3 demo)"
    )
    parser.add_argument(
        "--parts",
        default=DEFAULT_PARTS,
        help=f"comma-separated subset of {','.join(ALL_PARTS)} (default {DEFAULT_PARTS}; "
        "'second' is a second generated suite (models_second.py, not used to tune the plugin); "
        "'report' times the generated suite with --jaxport-report (the main job: measured "
        "runtime share, tooling scan, report files); "
        "'compiled' times the generated suite with --jaxport-compile=cpu, cold and warm cache; "
        "'cuda' times --jaxport-compile=cuda deviceless, suite and per case: needs "
        "jax-cuda12-plugin and JAX_PLATFORMS=cpu; "
        "'sharded' times a suite of sharded programs (models_sharded.py) on four host "
        "devices: the partitioner's collectives, recorded by the compile that runs the check)",
    )
    options = parser.parse_args(argv)
    parts = set(options.parts.split(","))
    unknown = parts - set(ALL_PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(ALL_PARTS)}")
    if "cuda" in parts:
        from benchmarks.overhead import compiled_cuda

        problem = compiled_cuda.plugin_problem()
        if problem:
            print(f"benchmarks.overhead.run: {problem}", file=sys.stderr)
            return 2
    quick = options.quick
    suite_reps = options.reps or (2 if quick else 5)
    demo_reps = options.reps or 3
    cases = QUICK_CASES if quick else list(_cases())
    out = options.out or RESULTS / ("quick.json" if quick else "latest.json")
    results: dict[str, Any] = {"mode": "quick" if quick else "full", "machine": machine()}
    results["targets"] = TARGETS
    results["errors"] = {}
    started = time.perf_counter()

    def save() -> None:
        results["verdicts"] = verdicts(results)
        results["machine"]["loadavg_end"] = os.getloadavg()
        results["elapsed_s"] = time.perf_counter() - started
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=float) + "\n")

    def stage(name: str, fn: Any, *args: Any) -> Any:
        """Run one part; a failure is recorded and the other parts still run."""
        try:
            return fn(*args)
        except Exception as e:  # keep what the other parts measured
            import traceback

            results["errors"][name] = traceback.format_exc()
            log(f"  {name} FAILED: {type(e).__name__}: {e}")
            return {"error": f"{type(e).__name__}: {e}"}
        finally:
            save()

    results["suite"] = {}
    with tempfile.TemporaryDirectory(prefix="jaxport-bench-") as tmp:
        if "suite" in parts:
            log(f"1. generated suite ({len(cases)} tests), {suite_reps} interleaved reps")
            results["suite"]["generated"] = stage(
                "suite", suite_overhead, "generated", None, cases, suite_reps, Path(tmp)
            )
        if "second" in parts:
            from benchmarks.corpora import models_second

            second = list(models_second.CASES)[: 5 if quick else None]
            log(f"1. second suite ({len(second)} tests), {suite_reps} interleaved reps")
            results["suite"]["second"] = stage(
                "second", suite_overhead, "second", None, second, suite_reps, Path(tmp), None,
                "models_second",
            )  # fmt: skip
        if "demo" in parts and not quick:
            if (DEMO / "tests").is_dir():
                log(f"1. demo suite {DEMO}, {demo_reps} interleaved reps")
                results["suite"]["demo"] = stage(
                    "demo", suite_overhead, "demo", DEMO, [], demo_reps, Path(tmp)
                )
            else:
                results["suite"]["demo"] = {"skipped": f"{DEMO} does not exist"}
        if "report" in parts:
            log(f"1b. generated suite with --jaxport-report, {suite_reps} reps")
            results["suite_report"] = stage(
                "report", suite_overhead, "report", None, cases, suite_reps, Path(tmp),
                ["--jaxport-report=jaxport-report.json"],
            )  # fmt: skip
        if "sharded" in parts:
            from benchmarks.corpora import models_sharded

            sharded = list(models_sharded.CASES)
            log(f"1c. sharded suite ({len(sharded)} tests, 4 host devices), {suite_reps} reps")
            flags = os.environ.get("XLA_FLAGS", "")
            os.environ["XLA_FLAGS"] = f"{flags} {SHARDED_XLA_FLAGS}".strip()
            try:
                results["suite"]["sharded"] = stage(
                    "sharded", suite_overhead, "sharded", None, sharded, suite_reps, Path(tmp),
                    None, "models_sharded",
                )  # fmt: skip
            finally:
                os.environ["XLA_FLAGS"] = flags
        if "compiled" in parts:
            log(f"1b. generated suite with --jaxport-compile=cpu, {suite_reps} reps")
            results["suite_compiled_cpu"] = stage(
                "compiled",
                suite_overhead,
                "compiled",
                None,
                cases,
                suite_reps,
                Path(tmp),
                ["--jaxport-compile=cpu"],
            )
    if "cuda" in parts:
        from benchmarks.overhead import compiled_cuda

        results["compiled_cuda"] = part = {
            "target": compiled_cuda.default_target(),
            "plugin_versions": compiled_cuda.plugin_versions(),
            "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS"),
            "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
            "toolchain": compiled_cuda.toolchain(),
        }
        with tempfile.TemporaryDirectory(prefix="jaxport-bench-cuda-") as tmp:
            log(f"6. generated suite, plain / default / --jaxport-compile=cuda, {suite_reps} reps")
            sessions = functools.partial(
                compiled_cuda.suite,
                session=_session,
                clear=_clear,
                write_suite=write_suite,
                log=log,
            )
            part["suite"] = stage("cuda suite", sessions, cases, suite_reps, Path(tmp))
        log("6. cuda fixed costs (fresh interpreters)")
        part["fixed_costs_s"] = stage("cuda fixed costs", compiled_cuda.fixed_costs)
        reps = 2 if quick else 5
        log(f"6. cuda per case, {len(cases)} cases x {reps} reps")
        part["per_case"] = stage("cuda per case", compiled_cuda.per_case, cases, reps)
    if parts & {"breakdown", "scale", "profile"}:
        results["fixed_costs_s"] = stage("fixed_costs", fixed_costs)
        from benchmarks.overhead import inprocess  # imports jax: only now

        if "breakdown" in parts:
            reps = 2 if quick else 5
            log(f"2. per-check breakdown, {len(cases)} cases x {reps} reps")
            results["breakdown"] = stage("breakdown", inprocess.breakdown, cases, reps, REPO)
        if "scale" in parts:
            layers = [6, 12] if quick else [6, 12, 24, 48]
            log(f"3. scale {layers}")
            results["scale"] = stage("scale", inprocess.scale, layers, 2 if quick else 3)
        if "profile" in parts:
            log("5. profile")
            results["profile"] = stage("profile", inprocess.profile, cases, REPO)
    save()
    log(f"wrote {out} in {results['elapsed_s']:.0f}s")
    print(summary(results))
    return 0


def _cases() -> list[str]:
    from benchmarks.corpora import models

    return list(models.CASES)


def summary(results: dict[str, Any]) -> str:
    lines = []
    suites = dict(results.get("suite", {}))
    if results.get("suite_compiled_cpu"):
        suites["generated --jaxport-compile=cpu"] = results["suite_compiled_cpu"]
    if results.get("suite_report"):
        suites["generated --jaxport-report"] = results["suite_report"]
    for name, suite in suites.items():
        if "skipped" in suite or "error" in suite:
            lines.append(f"{name}: {suite.get('skipped') or suite.get('error')}")
            continue
        lines.append(
            f"{name} suite ({suite['tests']} tests): cold a {suite['a_cold_median_wall_s']:.1f}s "
            f"b {suite['b_cold_median_wall_s']:.1f}s ratio {suite['cold_ratio_wall']:.3f} "
            f"(cpu {suite['cold_ratio_cpu']:.3f}, paired {suite['cold_paired_ratio_wall_median']:.3f}); "
            f"warm ratio {suite['warm_ratio_wall']:.3f} (cpu {suite['warm_ratio_cpu']:.3f}, "
            f"paired {suite['warm_paired_ratio_wall_median']:.3f})"
        )
    b = results.get("breakdown")
    if b and "error" not in b:
        lines.append(
            f"breakdown: check/plain in-process {b['check_over_plain']:.3f}; "
            f"added by plugin {b['added_share_of_check']:.1%} of check time"
        )
        for k, v in b["grouped_share"].items():
            lines.append(f"  {k:55s} {b['grouped_total_s'][k]:8.3f}s {v:6.1%}")
    cuda = results.get("compiled_cuda") or {}
    s = cuda.get("suite") or {}
    if "ratios" in s:
        for state in ("cold", "warm"):
            r, added = s["ratios"], s["added_per_test_ms"]
            lines.append(
                f"cuda suite {state}: cuda/plain {r[f'cuda/plain {state}']['wall']:.3f} "
                f"(cpu {r[f'cuda/plain {state}']['cpu']:.3f}), cuda/default "
                f"{r[f'cuda/default {state}']['wall']:.3f}, default/plain "
                f"{r[f'default/plain {state}']['wall']:.3f}; cuda adds "
                f"{added[f'cuda-plain {state}']:.0f} ms/test over plain, "
                f"{added[f'cuda-default {state}']:.0f} ms/test over default"
            )
        for key, counts in s["cache"].items():
            lines.append(f"  {key} cache: {counts}")
    p = cuda.get("per_case") or {}
    if "total_s" in p:
        lines.append(
            f"cuda per case: deviceless compile / cpu compile "
            f"{p['cuda_compile_over_cpu_compile_total']:.2f}x; compile_deviceless end to end "
            f"{p['e2e_per_check_ms']:.0f} ms/check, cache hit {p['hit_per_check_ms']:.1f} ms/check"
        )
    for name, part in cuda.items():
        if isinstance(part, dict) and "error" in part:
            lines.append(f"cuda {name}: {part['error']}")
    for k, v in results.get("verdicts", {}).items():
        lines.append(f"{'PASS' if v['pass'] else 'FAIL'} {k}: {v}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
