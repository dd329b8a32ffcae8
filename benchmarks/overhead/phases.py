"""Where a session's CPU goes, phase by phase: checkouts of the plugin against plain ``jax.jit``.

    python -m benchmarks.overhead.phases --checkout NAME=REV [--checkout ...] [--reps 4]
        [--cases ...] [--report] [--out benchmarks/results/<name>.json]

The generated suite of ``corpora/suite.py``, cold (no pytest cache, no bytecode of the
suite's), once per repetition under each checkout (a git revision or a folder, put first on
``PYTHONPATH`` as ``checkouts.py`` puts it) and plainly (``-p no:jaxport`` and the plain
fixture), interleaved in alternating order. A probe plugin loaded in every session reads the
process's CPU time (every thread's) at pytest's phase boundaries: start-up (importing and
registering the plugins, the options), configure, collection, the tests (and within them each
test's set-up, call, report), the session's end with the terminal summary, and unconfigure;
the whole session's CPU (user + sys, with its children) beside it. ``--report`` adds
``--jaxport-report=report.json`` to the checkouts' sessions (the main job: the measured
runtime share, the report's build, its file).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.corpora.suite import PLAIN_PLUGIN, write_suite
from benchmarks.overhead.checkouts import extract
from benchmarks.overhead.run import QUICK_CASES, _clear, log, machine

PROBE = "jaxport_bench_phases"
PROBE_SOURCE = """\
import json, os, time

import pytest

_T = {"start": time.process_time()}
_SUMS = {}


def _mark(name):
    _T[name] = time.process_time()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    _mark("started")


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    _mark("configured")


def pytest_collection_finish(session):
    _mark("collected")


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    try:
        return (yield)
    finally:
        _mark("tested")


def _summed(name):
    @pytest.hookimpl(wrapper=True)
    def wrapper(*args, **kwargs):
        started = time.process_time()
        try:
            return (yield)
        finally:
            _SUMS[name] = _SUMS.get(name, 0.0) + time.process_time() - started

    return wrapper


pytest_runtest_setup = _summed("test set-up")
pytest_runtest_call = _summed("test call")
pytest_runtest_makereport = _summed("test report")
pytest_runtest_logreport = _summed("test log report")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    _mark("finishing")
    try:
        return (yield)
    finally:
        _mark("finished")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    _mark("unconfigured")
    with open(os.environ["JAXPORT_BENCH_PHASES"], "w") as out:
        json.dump({"marks": _T, "sums": _SUMS}, out)
"""
"""The probe plugin (``-p``): process CPU at each phase boundary, and summed per test hook."""

PHASES = (
    ("start-up: interpreter to the probe", "start", None),
    ("start-up: plugins, options, ini", "started", "start"),
    ("configure", "configured", "started"),
    ("collection (the suite imports JAX)", "collected", "configured"),
    ("tests", "tested", "collected"),
    ("session end, terminal summary", "finished", "finishing"),
    ("unconfigure", "unconfigured", "finished"),
)
"""Each row: its name, the mark at its end and the mark at its start."""


def session(folder: Path, source: Path | None, extra: list[str], probe: Path) -> dict[str, Any]:
    """One cold session of the suite in ``folder``; ``source``: a checkout (``None``: plain)."""
    _clear(folder)
    marks = folder / "phases.json"
    path = [str(source) if source is not None else "", str(probe), os.environ.get("PYTHONPATH")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, path)),
        "JAXPORT_BENCH_PHASES": str(marks),
    }
    plain = ["-p", "no:jaxport", "-p", PLAIN_PLUGIN] if source is None else extra
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rN", "-p", PROBE, *plain],
        cwd=folder, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1) or not marks.exists():
        raise RuntimeError(f"pytest in {folder} exited {done.returncode}:\n{done.stdout[-3000:]}")
    found = json.loads(marks.read_text())
    phases = {
        name: (found["marks"][end] - (found["marks"][start] if start else 0.0))
        for name, end, start in PHASES
    }
    return {
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "load_start": load,
        "phases_cpu_s": phases,
        "test_hooks_cpu_s": found["sums"],
        "summary": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", action="append", default=[], metavar="NAME=REV",
                        help="a checkout (git revision or folder); several in one run")  # fmt: skip
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--cases", nargs="*", default=QUICK_CASES)
    parser.add_argument("--report", action="store_true", help="--jaxport-report=report.json")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = machine()
    extra = ["--jaxport-report=report.json"] if args.report else []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        probe = root / "probe"
        probe.mkdir()
        (probe / f"{PROBE}.py").write_text(PROBE_SOURCE)
        sources: dict[str, Path | None] = {}
        for given in args.checkout:
            name, _, revision = given.partition("=")
            if not name or not revision or name in sources or name == "plain":
                parser.error(f"--checkout {given}: expected NAME=REV with a new NAME")
            sources[name] = (
                Path(revision).resolve()
                if Path(revision).is_dir()
                else extract(revision, root / "checkouts" / name)
            )
        sources["plain"] = None
        folders = {name: write_suite(root / f"suite-{name}", args.cases) for name in sources}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sources}
        for rep in range(args.reps):
            for name in list(sources) if rep % 2 == 0 else list(reversed(sources)):
                runs[name].append(session(folders[name], sources[name], extra, probe))
            log(f"rep {rep + 1}/{args.reps}: " + ", ".join(
                f"{k} {v[-1]['cpu_s']:.2f}s cpu" for k, v in runs.items()))  # fmt: skip
    medians: dict[str, dict[str, float]] = {}
    for name, samples in runs.items():
        row = {"session (user + sys, children)": statistics.median(s["cpu_s"] for s in samples)}
        for phase, _, _ in PHASES:
            row[phase] = statistics.median(s["phases_cpu_s"][phase] for s in samples)
        for hook in samples[0]["test_hooks_cpu_s"]:
            row[f"tests: {hook}"] = statistics.median(s["test_hooks_cpu_s"][hook] for s in samples)
        medians[name] = row
    result: dict[str, Any] = {
        "machine": started,
        "checkouts": dict(c.partition("=")[::2] for c in args.checkout),
        "cases": args.cases,
        "reps": args.reps,
        "args": extra,
        "bytecode": "not written (PYTHONDONTWRITEBYTECODE)"
        if os.environ.get("PYTHONDONTWRITEBYTECODE")
        else "written beside the sources",
        "loadavg_end": os.getloadavg(),
        "median_cpu_s": medians,
        "runs": runs,
    }
    for phase in medians["plain"]:
        print(f"{phase:45s} " + "  ".join(f"{n} {m[phase]:7.3f}" for n, m in medians.items()))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
