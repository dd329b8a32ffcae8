"""What the formats-and-layout layer adds to a cold check (issue 23; target: at most 3%).

Usage::

    python benchmarks/formats.py [--reps 5] [--base REV] [--cases a,b] \\
        [--out benchmarks/results/formats-2cpu.json]

The layer costs two things on a cold run:

- **reading**: ``stablehlo.read_programs`` now keeps each op's operand and result types, the
  attributes of dots and convolutions, and the location of every op with a notable format
  (float64, float8, int4). That cost is the new reader's time minus the reader of ``--base``
  (default: the merge-base of HEAD and ``main``, the last commit before the layer), loaded
  from git and run on the same lowered modules, interleaved;
- **findings**: ``model.formats.take_format_census`` for cpu, cuda, rocm and tpu.

Both are compared with a cold ``jaxport.check`` of the same function (``jax.clear_caches()``
first: trace, lower for every platform, read, census, compile and run on cpu), the quantity a
cold suite run is made of. The lowered cache's entry grows too: its JSON size is recorded.
The compiled level's extra work (relayouts around library calls) is timed on the cpu
compiled text of each case, against ``--base``'s ``hlo.parse_compiled_hlo``; a warm run's,
reading the (larger) lowered-cache entries back, on the entries of both readers.

``--sessions N`` also measures the whole of it, wired in: a cold ``pytest
--jaxport-report=report.json -p no:cacheprovider`` session of the generated report suite
(``report_suite.py``, ``N`` tests) with this tree's plugin and with ``--base``'s (extracted
with ``git archive``, first on ``PYTHONPATH``), interleaved ``--reps`` times: wall and CPU time
of each, medians, and their ratio. That is what a user's cold run pays: the reader, the
findings of every check, and the report (counts, sites, cost items, rendering).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import jax  # noqa: E402
import models  # noqa: E402
import models_second  # noqa: E402
from inprocess import _fresh, _jaxport_instance  # noqa: E402

from pytest_jaxport._jax import lowering, stablehlo, tracing  # noqa: E402
from pytest_jaxport.model import hlo  # noqa: E402
from pytest_jaxport.model.census import program_from_dict, program_to_dict  # noqa: E402
from pytest_jaxport.model.formats import take_format_census  # noqa: E402

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
ABSENT = PLATFORMS[1:]


def cases() -> dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]]:
    """Both generated suites' cases and two deep transformers (many ops per program)."""
    found: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {}
    found.update(models.CASES)
    found.update(models_second.CASES)
    for name, (layers, form) in SCALE.items():
        found[name] = lambda layers=layers, form=form: models.transformer(layers, form, "grad")
    return found


SCALE = {"transformer_loop_grad_6": (6, "loop"), "transformer_scan_grad_12": (12, "scan")}
"""Programs of many ops (a Python loop's ops grow with depth), reported on their own: a
6-layer gradient is 2,300 call-weighted ops, the suites' cases 30 to 700."""


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=HERE.parent, capture_output=True, text=True, check=True
    ).stdout.strip()


def base_module(revision: str, paths: tuple[str, ...], name: str, folder: Path) -> Any:
    """The first of ``paths`` the package has at ``revision`` (a module moved with issue 22's
    layout), imported as module ``name`` (its own imports of the package resolve to the
    working tree: they are the same apart from the layer)."""
    for path in paths:
        try:
            source = _git("show", f"{revision}:{path}")
            break
        except subprocess.CalledProcessError:
            continue
    else:
        raise SystemExit(f"none of {', '.join(paths)} at {revision}")
    file = folder / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


INNER = 5
"""Milliseconds-long steps run this many times in a row; the fastest counts (what the step
costs without the collector or a neighbour's process in between)."""


def _fastest(fn: Callable[[], Any]) -> tuple[float, Any]:
    best, value = _timed(fn)
    for _ in range(INNER - 1):
        best = min(best, _timed(fn)[0])
    return best, value


def measure(names: list[str], reps: int, base: str) -> dict[str, Any]:
    built = {name: cases()[name]() for name in names}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    sizes: dict[str, dict[str, int]] = {}
    findings: dict[str, dict[str, int]] = {}

    def add(name: str, stage: str, seconds: float) -> None:
        samples[name].setdefault(stage, []).append(seconds)

    with tempfile.TemporaryDirectory(prefix="jaxport-formats-bench-") as folder:
        old_lowering = base_module(
            base,
            (
                "pytest_jaxport/_jax/stablehlo.py",
                "pytest_jaxport/_jax/lowering.py",
                "pytest_jaxport/lowering.py",
            ),
            "base_lowering", Path(folder),
        )  # fmt: skip
        old_hlo = base_module(
            base, ("pytest_jaxport/model/hlo.py", "pytest_jaxport/hlo.py"), "base_hlo",
            Path(folder),
        )  # fmt: skip
        for rep in range(reps):
            order = names if rep % 2 == 0 else list(reversed(names))
            for name in order:
                fn, args = built[name]
                _fresh()
                jaxport = _jaxport_instance(Path(folder))
                t, _ = _timed(lambda: jaxport.check(fn, *args))
                add(name, "cold check", t)
                traced = tracing.trace(fn, args, {})
                together = traced.traced.lower(lowering_platforms=ABSENT)
                cpu = lowering.lower(traced.traced, "cpu")
                for lowered in (cpu, together):  # JAX builds the module once: not a reader's cost
                    lowered.compiler_ir("stablehlo")
                readers = [("new", stablehlo), ("base", old_lowering)]
                if rep % 2:
                    readers.reverse()
                programs: dict[str, Any] = {}
                for label, reader in readers:
                    t1, on_cpu = _fastest(lambda r=reader: r.read_program(cpu))
                    t2, others = _fastest(lambda r=reader: r.read_programs(together, len(ABSENT)))
                    add(name, f"read ({label})", t1 + t2)
                    programs[label] = dict(zip(PLATFORMS, (on_cpu, *others), strict=True))
                total = 0.0
                for p in PLATFORMS:
                    t, result = _fastest(lambda p=p: take_format_census(programs["new"][p], p))
                    total += t
                    findings.setdefault(name, {})[p] = result.count()
                add(name, "findings (4 platforms)", total)
                text = cpu.compile().as_text()
                parsers = [("new", hlo), ("base", old_hlo)]
                if rep % 2:
                    parsers.reverse()
                for label, parser in parsers:
                    t, _ = _fastest(lambda p=parser: p.parse_compiled_hlo(text))
                    add(name, f"parse compiled cpu ({label})", t)
                for label in ("new", "base"):  # a warm run reads them back from the cache
                    texts = [json.dumps(program_to_dict(programs[label][p])) for p in ABSENT]
                    t, _ = _fastest(lambda t=texts: [program_from_dict(json.loads(x)) for x in t])
                    add(name, f"warm: load cached programs ({label})", t)
                if rep == 0:
                    sizes[name] = {
                        label: sum(
                            len(json.dumps(program_to_dict(programs[label][p]))) for p in ABSENT
                        )
                        for label in ("new", "base")
                    }
    medians = {
        name: {stage: statistics.median(v) for stage, v in stages.items()}
        for name, stages in samples.items()
    }
    per_case = {}
    for name, m in medians.items():
        added = m["read (new)"] - m["read (base)"] + m["findings (4 platforms)"]
        per_case[name] = {
            **m,
            "added (reading + findings)": added,
            "added share of a cold check": added / m["cold check"],
            "lowered cache bytes (cuda+rocm+tpu)": sizes[name],
            "findings per platform": findings[name],
        }
    suites = [n for n in medians if n not in SCALE] or list(medians)
    total_check = sum(medians[n]["cold check"] for n in suites)
    total_read = sum(medians[n]["read (new)"] - medians[n]["read (base)"] for n in suites)
    total_findings = sum(medians[n]["findings (4 platforms)"] for n in suites)
    total_compiled = sum(medians[n]["parse compiled cpu (new)"] for n in suites)
    total_compiled_base = sum(medians[n]["parse compiled cpu (base)"] for n in suites)
    warm = {
        label: sum(medians[n][f"warm: load cached programs ({label})"] for n in suites)
        for label in ("new", "base")
    }
    return {
        "per_case": per_case,
        "totals_s": {
            "cases": suites,
            "cold check": total_check,
            "reading added": total_read,
            "findings": total_findings,
            "added": total_read + total_findings,
            "parse compiled cpu (new)": total_compiled,
            "parse compiled cpu (base)": total_compiled_base,
            "warm: load cached programs (new)": warm["new"],
            "warm: load cached programs (base)": warm["base"],
        },
        "added_share_of_cold_checks": (total_read + total_findings) / total_check,
        "worst_case": max(per_case, key=lambda n: per_case[n]["added share of a cold check"]),
        "lowered_cache_growth": sum(s["new"] for s in sizes.values())
        / max(sum(s["base"] for s in sizes.values()), 1),
    }


def _session(project: Path, tree: Path) -> dict[str, float]:
    """One cold session of the suite in ``project`` with the plugin of ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         "--jaxport-report=report.json"],
        cwd=project, capture_output=True, text=True, check=False,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(tree)},
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # the suite has designed failures
        raise SystemExit(f"session with {tree} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def sessions(tests: int, reps: int, base: str) -> dict[str, Any]:
    """Cold sessions of the generated report suite with this tree's plugin and ``base``'s,
    interleaved (the order alternated per repetition): medians and ratios."""
    import report_suite

    samples: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory(prefix="jaxport-formats-sessions-") as folder:
        root = Path(folder)
        tree = root / "base"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", base, "pytest_jaxport"], cwd=HERE.parent,
                                 capture_output=True, check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        project = root / "suite"
        mix = report_suite.write_suite(project, tests)
        trees = {"base": tree, "head": HERE.parent}
        _session(project, HERE.parent)  # warm the interpreter's own caches (.pyc) once
        for rep in range(reps):
            for label in ("base", "head") if rep % 2 == 0 else ("head", "base"):
                samples[label].append(_session(project, trees[label]))
    medians = {
        label: {key: statistics.median(s[key] for s in runs) for key in ("wall_s", "cpu_s")}
        for label, runs in samples.items()
    }
    return {
        "tests": sum(mix.values()),
        "samples": samples,
        "medians": medians,
        "cpu_ratio": medians["head"]["cpu_s"] / medians["base"]["cpu_s"],
        "wall_ratio": medians["head"]["wall_s"] / medians["base"]["wall_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--base", default=None, help="the revision to compare the readers with")
    parser.add_argument("--cases", default=None, help="comma-separated subset of the cases")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "formats.json")
    parser.add_argument(
        "--sessions",
        type=int,
        default=0,
        metavar="N",
        help="also time cold sessions of an N-test generated suite, both trees",
    )
    parser.add_argument("--skip-cases", action="store_true",
                        help="only the sessions (with --sessions)")  # fmt: skip
    options = parser.parse_args(argv)
    names = options.cases.split(",") if options.cases else list(cases())
    unknown = set(names) - set(cases())
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose from {', '.join(cases())}")
    base = options.base or _git("merge-base", "HEAD", "main")
    started = time.perf_counter()
    loadavg = os.getloadavg()
    results = {} if options.skip_cases else measure(names, options.reps, base)
    if options.sessions:
        results["sessions"] = sessions(options.sessions, options.reps, base)
    results["machine"] = {
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "date": datetime.date.today().isoformat(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "base": _git("rev-parse", "--short", base),
        "dirty": _git("status", "--porcelain", "--untracked-files=no").splitlines(),
        "loadavg_start": loadavg,
        "loadavg_end": os.getloadavg(),
    }
    results["reps"] = options.reps
    results["elapsed_s"] = time.perf_counter() - started
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(results, indent=1) + "\n")
    if "per_case" in results:
        share = results["added_share_of_cold_checks"]
        worst = results["worst_case"]
        print(
            f"formats layer: {results['totals_s']['added'] * 1000:.1f} ms added to "
            f"{results['totals_s']['cold check']:.2f} s of the suites' cold checks ({share:.2%}); "
            f"worst case {worst} "
            f"({results['per_case'][worst]['added share of a cold check']:.2%}); "
            f"lowered cache x{results['lowered_cache_growth']:.2f}; written to {options.out}"
        )
    if "sessions" in results:
        found = results["sessions"]
        print(
            f"cold sessions of {found['tests']} tests: CPU x{found['cpu_ratio']:.3f}, wall "
            f"x{found['wall_ratio']:.3f} ({found['medians']['base']['cpu_s']:.1f} s -> "
            f"{found['medians']['head']['cpu_s']:.1f} s CPU, medians of {options.reps})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
