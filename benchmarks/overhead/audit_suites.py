"""``pytest --jaxport-audit`` on real test suites nobody here wrote: outcomes, counts, overhead.

The suites are test modules nobody here wrote, copied unchanged into a temporary folder
(nothing is fetched, nothing is edited). Some ship in their libraries' own wheels and are
copied from the installed packages:

- **optax** (``optax/**/*_test.py``, absl-py + scikit-learn for two modules): a documented
  selection of modules (:data:`SUITES`), sized for a 2-core machine;
- **chex** (``chex/**/*_test.py``): all of it (its variants run functions with and without
  jit and under pmap; ``restrict_backends`` patches compilation itself);
- **haiku** (``haiku/**/*_test.py``): a selection of the modules that need no TensorFlow.

Others live in their source repositories only; give the folder that holds the test folder,
at the release that matches the installed wheel (``--from NAME=PATH``, e.g. a ``git
archive`` of the release tag)::

    git -C lineax archive v0.1.1 tests | tar -x -C /tmp/lineax-0.1.1
    python -m benchmarks.overhead.audit_suites --suites lineax --from lineax=/tmp/lineax-0.1.1

- **lineax** (``tests/``, 0.1.1), **optimistix** (``tests/``, 0.1.0) and **diffrax**
  (``test/``, 0.7.2): documented selections of modules, run as the projects run them
  (``test_*.py``, their own ``conftest.py``; the repositories' ``pyproject.toml`` options,
  jaxtyping's runtime checks, are not applied). Equinox's ``error_if`` (a host callback)
  is inside nearly every solve, inside lineax's own ``linear_solve`` primitive too.

For each suite, in one run and interleaved (plain, audit cold, audit warm; repeated):

- **plain**: ``python -m pytest <selection>`` with the plugin loaded but the audit off;
- **audit cold**: the same with ``--jaxport-audit`` and an empty pytest cache (nothing lowered
  before);
- **audit warm**: the same again, the lowered cache kept from the cold run;
- then each of plain and audit once more with ``-n 2`` (pytest-xdist).

Every run writes JUnit XML; the set of ``(test, outcome)`` pairs of every run must be the same
(the proof that no outcome changed), and the audit runs' JSON reports give the computations
found, lowering success per platform, the census and the sites. Wall and CPU time (user+sys of
the pytest process and its children, the steadier number on a shared machine) per run; ratios
are medians of audit over plain.

Each serial run also records its **main thread's** CPU (a probe plugin, loaded in every run,
reads ``time.thread_time()`` when pytest unconfigures). The audit's own work runs there;
XLA's compile and execution threads are most of a suite's CPU and carry most of its run-to-run
noise (optax: 217.9 s and 257.7 s in two plain runs that compiled the same programs).
``own_cpu`` ratios are ``(plain CPU + median audit main-thread CPU - median plain main-thread
CPU) / plain CPU``: the audit's cost with the other threads' noise left out (they do the same
work in both). ``recording_cpu`` ratios are ``(plain CPU + median audit recording CPU) / plain
CPU``, where the recording CPU is the CPU of the thread in the audit's listener
(``Recorder.record``: identifying each computation JAX traced, its census and judgment, from
the caches when warm), timed by the probe: the audit's per-computation work alone, without any
noise of a second run (it leaves out the hooks' few microseconds per traced call and the report
at the end). ``--no-n2`` leaves out the ``-n 2`` runs (outcomes and numbers serial against
``-n 2``), for repetitions that only measure the overhead. ``--pairs N`` runs, per suite, one cold
audit (to fill the cache; first, on a fresh copy, so not a cold measurement), then ``N`` pairs
of plain and warm alternating: the warm overhead, each pair's ratio in
``audit-warm_cpu_pairs``. ``--eager-all`` adds a third run to each pair, warm with
``[tool.jaxport.audit] eager_users = "all"`` (its configuration from a file of its own, ``-c``;
the same lowered cache): what counting every test that runs an eager op costs
(``audit-warmall_cpu_pairs``), and, from one more run with a report, what it changes in the
audit's numbers (``audit_eager_users_all``).

Usage (the interpreter that has pytest-jaxport and the libraries installed)::

    python -m benchmarks.overhead.audit_suites --suites optax,chex,haiku --reps 2 \\
        --out benchmarks/results/audit-suites-2cpu.json
    python -m benchmarks.overhead.audit_suites --suites lineax,optimistix,diffrax \\
        --from lineax=/tmp/lineax-0.1.1 --from optimistix=/tmp/optimistix-0.1.0 \\
        --from diffrax=/tmp/diffrax-0.7.2 --out benchmarks/results/audit-folders-2cpu.json
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks import REPO, RESULTS

SUITES: dict[str, dict[str, Any]] = {
    "optax": {
        "package": "optax",
        # 530 tests, sized for 2 shared cores: the transforms, losses, tree utilities,
        # projections, perturbations and microbatching modules and four small core modules.
        # Left out for time: _src/alias_test.py (623 parametrized optimizer cases),
        # _src/linesearch_test.py, schedules/, contrib/ and the rest of _src/. Left out by
        # keyword: the test_mask* tests of losses/ (21), whose arrays' shapes come from
        # numpy's unseeded global generator (preds[mask] of a random mask), so each process
        # runs eager ops of other shapes and serial and -n 2 cannot audit the same ones.
        "keyword": "not test_mask",
        "select": [
            "transforms",
            "losses",
            "tree_utils",
            "projections",
            "perturbations",
            "microbatching",
            "_src/update_test.py",
            "_src/lookahead_test.py",
            "_src/base_test.py",
            "_src/combine_test.py",
        ],
    },
    "chex": {"package": "chex", "select": ["."]},
    "haiku": {
        "package": "haiku",
        "select": [
            "_src/basic_test.py",
            "_src/conv_test.py",
            "_src/batch_norm_test.py",
            "_src/layer_norm_test.py",
            "_src/attention_test.py",
            "_src/embed_test.py",
            "_src/pool_test.py",
            "_src/stateful_test.py",
            "_src/multi_transform_test.py",
            "_src/nets/mlp_test.py",
            "_src/nets/resnet_test.py",
        ],
    },
    # From source repositories (--from NAME=PATH: the folder holding the test folder).
    "lineax": {
        "package": "lineax",
        "folder": "tests",
        # 78 tests: solves, inverses, adjoints, norms, LSMR and misc (LU, QR, SVD,
        # Cholesky, triangular and iterative solvers, most under equinox's error_if).
        # Left out for time: the jvp/vmap/transpose/singular/well-posed products (4,000
        # parametrized cases) and test_operator.py.
        "select": [
            "tests/test_solve.py",
            "tests/test_invert.py",
            "tests/test_adjoint.py",
            "tests/test_misc.py",
            "tests/test_norm.py",
            "tests/test_lsmr.py",
        ],
    },
    "optimistix": {
        "package": "optimistix",
        "folder": "tests",
        # 76 tests: the Cauchy point, L-BFGS's operator, best-so-far, solve, compat (one of
        # its tests fails against this jax, audit or not) and misc. Left out for time:
        # minimise (493), least squares (122), root find (83), fixed point (36).
        "select": [
            "tests/test_misc.py",
            "tests/test_best_so_far.py",
            "tests/test_solve.py",
            "tests/test_compat.py",
            "tests/test_lbfgs_linear_operator.py",
            "tests/test_cauchy_point.py",
        ],
    },
    "diffrax": {
        "package": "diffrax",
        "folder": "test",
        # 30 tests: terms, local interpolation, step-size controllers, vmap and misc (a
        # diffeqsolve with equinox's error_if checks in most). Left out for time (each module
        # takes minutes here): integrate (540), interpolation, save-at, events, detest, SDEs,
        # adjoints, Brownian motion.
        "select": [
            "test/test_term.py",
            "test/test_local_interpolation.py",
            "test/test_adaptive_stepsize_controller.py",
            "test/test_vmap.py",
            "test/test_misc.py",
        ],
    },
    "equinox": {
        "package": "equinox",
        "folder": "tests",
        # 291 tests at v0.13.8 (issue 43, a suite new to the project): every module but
        # test_nn.py (66 tests, ~100 s of a ~180 s plain run here), test_while_loop.py (117)
        # and test_onnx.py (needs onnx), the repository's pyproject options (jaxtyping's
        # runtime checks, warnings as errors) not applied. Its conftest gives the CPU two
        # devices: test_pmap.py's and test_sharding.py's programs are partitioned.
        # Deselected: the three tests whose arrays' shapes come from a key its getkey fixture
        # seeds at random in each process ("deliberate non-determinism"), so each process
        # runs eager ops of other shapes and serial and -n 2 cannot audit the same ones.
        "deselect": [
            "tests/test_misc.py::test_ω_add_mul",
            "tests/test_misc.py::test_ω_inplace",
            "tests/test_misc.py::test_ω_is_leaf",
        ],
        "select": [
            "tests/test_abstract.py",
            "tests/test_ad.py",
            "tests/test_caches.py",
            "tests/test_callback.py",
            "tests/test_checkpoint.py",
            "tests/test_closure_to_pytree.py",
            "tests/test_debug.py",
            "tests/test_enum.py",
            "tests/test_errors.py",
            "tests/test_eval_shape.py",
            "tests/test_filters.py",
            "tests/test_finalise_jaxpr.py",
            "tests/test_jit.py",
            "tests/test_make_jaxpr.py",
            "tests/test_misc.py",
            "tests/test_module.py",
            "tests/test_noinline.py",
            "tests/test_nontraceable.py",
            "tests/test_pformat.py",
            "tests/test_pmap.py",
            "tests/test_primitive.py",
            "tests/test_progress_meter.py",
            "tests/test_scan.py",
            "tests/test_serialisation.py",
            "tests/test_sharding.py",
            "tests/test_shared.py",
            "tests/test_stateful.py",
            "tests/test_str2jax.py",
            "tests/test_tree.py",
            "tests/test_update.py",
            "tests/test_vmap.py",
        ],
    },
    # Issue 55's three suites, each run from its source as its maintainers run it: the
    # library's own folder beside its tests (``library``, imported from there: ``-o
    # pythonpath=.``), so its lines are the project's, not an installed package's.
    "jaxopt": {
        "package": "jaxopt",
        "folder": "tests",
        "library": "jaxopt",
        # 0.8.5 (git tag jaxopt-v0.8.5): the linear solvers, iterative refinement (an eager
        # lax.while_loop around gmres: issue 55, item 14), the equality-constrained QP and
        # the backtracking line search. Needs scikit-learn (jaxopt's test_util imports it).
        "select": [
            "tests/iterative_refinement_test.py",
            "tests/linear_solve_test.py",
            "tests/eq_qp_test.py",
            "tests/backtracking_linesearch_test.py",
        ],
    },
    "blackjax": {
        "package": "blackjax",
        "folder": "tests",
        "library": "blackjax",
        "files": ["pytest.ini"],  # its testpaths and filterwarnings = error
        # 1.7.1 (the PyPI sdist, which ships tests/): the mass matrices, 84 tests and 762
        # computations, 740 of them eager (items 15, 17 and 18: the zero-size products, the
        # tests' own x64 variants, the audit's cold cost). Needs chex and toolz.
        "select": ["tests/mcmc/test_metrics.py"],
    },
    "evosax": {
        "package": "evosax",
        "folder": "tests",
        "library": "evosax",
        # 0.3.1: the distribution-based strategies, each run step by step, under an eager
        # jax.lax.scan (CMA-ES's eigh inside it: item 14) and through its base API. Needs
        # dotmap and matplotlib.
        "select": ["tests/test_algorithms/test_distribution_based.py"],
    },
}

AUDIT_LINES = ("suite audit (--jaxport-audit):", "not audited:", "note:")
COMMON = ["-q", "-p", "no:randomly"]
WHEEL_OPTIONS = ["-o", "python_files=*_test.py", "--import-mode=importlib"]
"""How a wheel's ``*_test.py`` modules run (a folder suite runs as its project runs it)."""


def copy_suite(package: str, folder: Path) -> Path:
    """The package's own ``*_test.py`` modules, copied unchanged under ``folder/<package>_suite``
    (a folder named like the package would shadow it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{package} is not installed: pip install {package}")
    source = Path(spec.origin).parent
    target = folder / f"{package}_suite"
    for test in source.rglob("*_test.py"):
        destination = target / test.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(test, destination)
    return target


def copy_folder(name: str, source: Path, folder: Path) -> Path:
    """The suite's test folder (``SUITES[name]["folder"]`` under ``source``), copied unchanged
    under ``folder/<name>_suite``, so that its modules import as they do in its project."""
    tests = source / SUITES[name]["folder"]
    if not tests.is_dir():
        raise SystemExit(
            f"--from {name}={source}: expected the folder that holds {name}'s "
            f"{SUITES[name]['folder']}/ (e.g. git -C {name} archive <tag> "
            f"{SUITES[name]['folder']} | tar -x -C {source}), found no {tests}"
        )
    target = folder / f"{name}_suite"
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache")
    shutil.copytree(tests, target / SUITES[name]["folder"], ignore=ignore)
    library = SUITES[name].get("library")
    if library is not None:  # the library's own lines are the project's (item 17)
        shutil.copytree(source / library, target / library, ignore=ignore)
    for file in SUITES[name].get("files", ()):
        shutil.copy(source / file, target / file)
    return target


def outcomes(junit: Path) -> dict[str, str]:
    """``{test id: outcome}`` from JUnit XML (passed, failed, error, skipped)."""
    found: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                if outcome == "error" and found.get(name) == "failed":
                    outcome = "failed"
        found[name] = found.get(name) if found.get(name) in ("failed",) else outcome
    return found


PROBE = "jaxport_bench_main_thread"
PROBE_SOURCE = """\
import gc, os, time

_CPU = {"recording": None, "compile": 0.0, "compiles": 0, "gc": 0.0, "full_collections": 0}
_INSIDE = [False]
try:  # the audit's per-computation work (identify, census, judge), timed on its thread
    from pytest_jaxport.recorder import Recorder

    _record = Recorder.record
    _CPU["recording"] = 0.0

    def _timed_record(self, call):
        started = time.thread_time()
        _INSIDE[0] = True
        try:
            return _record(self, call)
        finally:
            _INSIDE[0] = False
            _CPU["recording"] += time.thread_time() - started

    Recorder.record = _timed_record
except Exception:  # another version of the plugin: the main thread's CPU alone
    pass

def pytest_configure(config):  # JAX's compiles of the suite's own programs (not the audit's)
    try:
        from jax._src import compiler
    except Exception:
        return
    name = next((n for n in ("backend_compile_and_load", "backend_compile")
                 if hasattr(compiler, n)), None)
    if name is None:
        return
    original = getattr(compiler, name)

    def timed(*args, **kwargs):
        if _INSIDE[0]:
            return original(*args, **kwargs)
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            _CPU["compile"] += time.thread_time() - started
            _CPU["compiles"] += 1

    setattr(compiler, name, timed)

_GC = [0.0]

def _collecting(phase, info):  # the thread that triggers a collection runs it
    if phase == "start":
        _GC[0] = time.thread_time()
    else:
        _CPU["gc"] += time.thread_time() - _GC[0]
        _CPU["full_collections"] += info["generation"] == 2

gc.callbacks.append(_collecting)

def pytest_unconfigure(config):  # after pytest's session and the plugin's report
    with open(os.environ["JAXPORT_BENCH_MAIN_CPU"], "w") as out:
        out.write(repr({"main": time.thread_time(), "process": time.process_time(), **_CPU}))
"""
"""The probe plugin every run loads (``-p``), read when pytest unconfigures (after the session
and the plugin's report; not at interpreter exit: chex's tests run the ``atexit`` handlers
themselves, early, so an exit handler read chex's first 4 s): the main thread's CPU seconds; the
CPU seconds the audit spent recording computations (``Recorder.record``, the listener JAX's
cache-miss hook calls; ``0`` where the audit is off); JAX's compiles of the suite's programs
(their count and the CPU of the thread that asked for them, outside the audit's listener);
and garbage collection (its CPU and the number of full collections). Also the process's CPU
(``time.process_time``, every thread).

Its code is compiled under a file name in angle brackets, as the interpreter names code that
has no file: the audit places an eager op at the innermost frame that is the user's code, and
a wrapper of ``Recorder.record`` in a plain file would be that frame (every eager op placed
at the probe's line, and judged under another key than without the probe)."""

PROBE_LOADER = f"exec(compile({PROBE_SOURCE!r}, '<jaxport-bench-probe>', 'exec'))\n"
"""The probe module's text: :data:`PROBE_SOURCE`, compiled under a file name no audit takes for
the user's code."""


def _run(
    folder: Path,
    select: list[str],
    args: list[str],
    label: str,
    out: Path,
    *,
    python: str = sys.executable,
    plugin: Path | None = None,
) -> dict[str, Any]:
    """One pytest session of the suite: ``python`` (the suite's interpreter), with the
    plugin of the checkout whose package folder is ``plugin`` first on ``PYTHONPATH`` (the
    interpreter's own where ``None``)."""
    junit = out / f"{label}.xml"
    probe = out / "probe"
    probe.mkdir(exist_ok=True)
    (probe / f"{PROBE}.py").write_text(PROBE_LOADER)
    main_cpu = out / f"{label}.main-cpu"
    paths = [str(probe), str(plugin) if plugin else None, os.environ.get("PYTHONPATH")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, paths)),
        "JAXPORT_BENCH_MAIN_CPU": str(main_cpu),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(
        [python, "-m", "pytest", *COMMON, "-p", PROBE, f"--junitxml={junit}", *args, *select],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    probed: dict[str, Any] = ast.literal_eval(main_cpu.read_text()) if main_cpu.exists() else {}
    main, recording = probed.get("main"), probed.get("recording")
    lines = proc.stdout.strip().splitlines()
    print(
        f"  {label}: {wall:.1f} s wall, {cpu:.1f} s cpu ({main or 0:.1f} s main thread, "
        f"{recording or 0:.1f} s recording, {probed.get('compile', 0):.1f} s in "
        f"{probed.get('compiles', 0)} compiles, {probed.get('gc', 0):.1f} s gc): "
        f"{lines[-1] if lines else ''}",
        flush=True,
    )
    return {
        "label": label,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "main_thread_cpu_s": round(main, 3) if main is not None else None,
        "recording_cpu_s": round(recording, 3) if recording is not None else None,
        "compile_cpu_s": round(probed["compile"], 3) if probed else None,
        "compiles": probed.get("compiles"),
        "gc_cpu_s": round(probed["gc"], 3) if probed else None,
        "process_cpu_s": round(probed["process"], 3) if "process" in probed else None,
        "full_collections": probed.get("full_collections"),
        "load_start": round(load, 2),
        "load_end": round(os.getloadavg()[0], 2),
        "exit": proc.returncode,
        "last_line": lines[-1] if lines else "",
        "outcomes": outcomes(junit) if junit.exists() else {},
        "audit_lines": [line.strip() for line in lines if line.strip().startswith(AUDIT_LINES)],
        "unraisable": (proc.stdout + proc.stderr).count("PytestUnraisableExceptionWarning"),
        "longest_line": max((len(line) for line in lines), default=0),
    }


def audit_numbers(report: Path) -> dict[str, Any]:
    audit = json.loads(report.read_text())["audit"]
    summary = audit["summary"]
    return {
        "seen": audit["seen"],
        "interception": audit["interception"],
        "lowered": {
            p: {"lowered": t["lowered"], "failed_to_lower": t["failed_to_lower"]}
            for p, t in summary["platforms"].items()
        },
        "census": {
            p: {"vendor": t["vendor"], "custom": t["custom"], "libraries": t["libraries"]}
            for p, t in summary["platforms"].items()
        },
        "solver_kinds": {p: solver_kinds(audit, p) for p in summary["platforms"]},
        "kernels_to_rewrite": summary["kernels_to_rewrite"],
        "rewrite_days": summary["rewrite_days"],
        "rewrite_breakdown": {t: e["breakdown"] for t, e in summary["rewrite"].items()},
        "counted": audit.get("counted"),
        "apart": {
            "kernels_to_rewrite": audit["apart"]["kernels_to_rewrite"],
            "rewrite_days": audit["apart"]["rewrite_days"],
            "rewrite_breakdown": {t: e["breakdown"] for t, e in audit["apart"]["rewrite"].items()},
        }
        if audit.get("apart")
        else None,
        "sites_by_layer": _sites_by_layer(audit["sites"]),
        "cuda_vendor_sites": _kernel_sites(audit["sites"], "cuda"),
        "findings_by_kind": _count_by(audit["findings"], "kind"),
        "failure_reasons": _reasons(audit["findings"]),
        "sites": len(audit["sites"]),
        "top_cuda_sites": [
            s
            for s in sorted(audit["sites"], key=lambda s: (s["layer"] != "custom", -s["count"]))
            if s["platform"] == "cuda"
        ][:10],
    }


def _sites_by_layer(sites: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per platform and layer, the distinct sites in the tests' files and elsewhere (a site
    whose file is under a ``tests``/``test`` folder, or named ``test_*.py``/``*_test.py``,
    or ``conftest.py``)."""
    counts: dict[str, dict[str, int]] = {}
    for site in sites:
        file = (site["location"] or "").rpartition(":")[0]
        name = file.rpartition("/")[2]
        tests = (
            file.startswith(("tests/", "test/"))
            or name.startswith("test_")
            or name.endswith("_test.py")
            or name == "conftest.py"
        )
        key = f"{site['platform']} {site['layer']}"
        found = counts.setdefault(key, {"tests": 0, "elsewhere": 0})
        found["tests" if tests else "elsewhere"] += 1
    return dict(sorted(counts.items()))


def _kernel_sites(sites: list[dict[str, Any]], platform: str) -> dict[str, dict[str, int]]:
    """Per vendor kernel on ``platform``, its call-weighted count at each line."""
    found: dict[str, dict[str, int]] = {}
    for site in sites:
        if site["platform"] == platform and site["layer"] == "vendor":
            where = found.setdefault(site["name"], {})
            where[str(site["location"])] = where.get(str(site["location"]), 0) + site["count"]
    return {name: dict(sorted(where.items())) for name, where in sorted(found.items())}


SOLVER_KINDS = {
    "getrf": "lu", "geqrf": "qr", "ormqr": "apply-q", "unmqr": "apply-q", "potrf": "cholesky",
    "gesdd": "svd", "gesvd": "svd", "gesvdj": "svd", "syevd": "eigh", "heevd": "eigh",
    "trsm": "triangular-solve", "triangular_solve": "triangular-solve",
}  # fmt: skip
"""Linear-algebra kernels by what they compute, whatever the library calls them (LAPACK's
``lapack_dgetrf_ffi``, cuSOLVER's ``cusolver_getrf_ffi``, ``stablehlo.triangular_solve``)."""


def solver_kinds(audit: dict[str, Any], platform: str) -> dict[str, int]:
    """Per linear-algebra kind, the calls of every computation on ``platform``: LAPACK on cpu
    should match cuSOLVER (and cuBLAS's triangular solves) on cuda where the programs are the
    same."""
    counts: dict[str, int] = {}
    for computation in audit["computations"]:
        lowered = computation["platforms"].get(platform, {}).get("lowered") or {}
        for kernel in lowered.get("kernels", []):
            name = kernel["name"].rpartition(".")[2].removesuffix("_ffi")
            for suffix, kind in SOLVER_KINDS.items():
                if name.endswith(suffix):
                    counts[kind] = counts.get(kind, 0) + kernel["count"]
                    break
    return dict(sorted(counts.items()))


def _count_by(items: list[dict[str, Any]], key: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item[key]] = counts.get(item[key], 0) + 1
    return counts


def _reasons(findings: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in findings:
        reason = f["reason"].split(" (")[0][:120]
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1])[:10])


def measure(
    name: str,
    reps: int,
    out: Path,
    source: Path | None = None,
    *,
    n2: bool = True,
    pairs: int = 0,
    eager_all: bool = False,
    python: str = sys.executable,
    base: Path | None = None,
    head: Path | None = None,
) -> dict[str, Any]:
    """One suite's runs and what they found. ``python``: its interpreter; ``base``: the
    package folder of a checkout of the plugin from before a change, whose cold audit runs
    in each repetition too (``audit-base-cold``), interleaved with this checkout's; ``head``:
    the package folder of the checkout every other run uses (the interpreter's own where
    ``None``)."""
    run = functools.partial(_run, python=python, plugin=head)
    spec = SUITES[name]
    if "folder" in spec:
        if source is None:
            raise SystemExit(f"{name} is not in its wheel: give its source, --from {name}=PATH")
        folder = copy_folder(name, source, out)
        options = ["-o", "pythonpath=."] if "library" in spec else []
    else:
        folder = copy_suite(spec["package"], out)
        options = WHEEL_OPTIONS
    deselect = [f"--deselect={test}" for test in spec.get("deselect", ())]
    keyword = ["-k", spec["keyword"]] if "keyword" in spec else []
    select = [*options, *deselect, *keyword, *spec["select"]]
    runs: list[dict[str, Any]] = []
    cache = folder / ".pytest_cache"
    report = out / f"{name}-audit.json"
    print(f"{name}: {folder} {' '.join(select)}", flush=True)
    plain_cache = ["-o", f"cache_dir={out / 'plain-cache'}"]
    cold = ["--jaxport-audit", f"--jaxport-report={report}"]
    # eager_users = "all": the same suite and cache, its configuration from another file
    every_config = out / f"{name}-eager-all" / "pyproject.toml"
    every = ["-c", str(every_config), f"--rootdir={folder}", "--jaxport-audit"]
    every_report = out / f"{name}-audit-all.json"
    if eager_all:
        every_config.parent.mkdir(exist_ok=True)
        every_config.write_text('[tool.jaxport.audit]\nenabled = false\neager_users = "all"\n')
    if pairs:  # one cold run, then plain and warm alternating
        shutil.rmtree(cache, ignore_errors=True)
        runs.append(run(folder, select, cold, f"{name}-audit-cold-0", out))
        for pair in range(pairs):
            runs.append(run(folder, select, plain_cache, f"{name}-plain-{pair}", out))
            runs.append(run(folder, select, ["--jaxport-audit"], f"{name}-audit-warm-{pair}", out))
            if eager_all:
                runs.append(run(folder, select, every, f"{name}-audit-warmall-{pair}", out))
    base_report = out / f"{name}-audit-base.json"
    for rep in range(0 if pairs else reps):
        if base is not None:  # before and after, cold, in an order that turns each time
            sessions = [
                ("plain", plain_cache, None),
                ("audit-cold", cold, None),
                ("audit-base-cold", ["--jaxport-audit", f"--jaxport-report={base_report}"],
                 base),
            ]  # fmt: skip
            for kind, args, plugin in sessions[rep % 3 :] + sessions[: rep % 3]:
                shutil.rmtree(cache, ignore_errors=True)
                runs.append(run(folder, select, args, f"{name}-{kind}-{rep}", out,
                                plugin=plugin or head))  # fmt: skip
            continue
        shutil.rmtree(cache, ignore_errors=True)
        runs.append(run(folder, select, plain_cache, f"{name}-plain-{rep}", out))
        runs.append(run(folder, select, cold, f"{name}-audit-cold-{rep}", out))
        runs.append(run(folder, select, ["--jaxport-audit"], f"{name}-audit-warm-{rep}", out))
    if eager_all:  # what counting every test's eager ops changes in the report (untimed)
        runs.append(run(folder, select, [*every, f"--jaxport-report={every_report}"],
                        f"{name}-audit-all-report", out))  # fmt: skip
    n2_report = out / f"{name}-audit-n2.json"
    if n2:
        runs.append(run(folder, select, ["-n", "2", *plain_cache], f"{name}-plain-n2", out))
        shutil.rmtree(cache, ignore_errors=True)
        runs.append(
            run(
                folder,
                select,
                ["-n", "2", "--jaxport-audit", f"--jaxport-report={n2_report}"],
                f"{name}-audit-n2",
                out,
            )
        )

    reference = runs[0]["outcomes"]
    same = {r["label"]: r["outcomes"] == reference for r in runs}
    differences = {
        r["label"]: sorted(
            f"{t}: {reference.get(t)} -> {o}"
            for t, o in r["outcomes"].items()
            if reference.get(t) != o
        )[:20]
        for r in runs
        if not same[r["label"]]
    }

    def median(kind: str, key: str) -> float:
        return statistics.median(
            r[key] for r in runs if f"-{kind}-" in r["label"] and "n2" not in r["label"]
        )

    # With --pairs the one cold run comes first, on a fresh copy of the suite: not a measure
    # of the cold audit against plain (that is --reps), so only the warm ratios are given.
    kinds: tuple[str, ...] = ("audit-warm",) if pairs else ("audit-cold", "audit-warm")
    if base is not None:
        kinds = ("audit-cold", "audit-base-cold")
    if pairs and eager_all:
        kinds += ("audit-warmall",)
    ratios = {
        f"{kind}_{key}": round(median(kind, key) / median("plain", key), 3)
        for kind in kinds
        for key in ("wall_s", "cpu_s")
    }
    serial = [r for r in runs if "n2" not in r["label"]]
    if all(r["main_thread_cpu_s"] is not None for r in serial):
        for kind in kinds:
            own = median(kind, "main_thread_cpu_s") - median("plain", "main_thread_cpu_s")
            ratios[f"{kind}_own_cpu"] = round(1 + own / median("plain", "cpu_s"), 3)
    if all(r.get("recording_cpu_s") is not None for r in serial):
        for kind in kinds:
            recording = median(kind, "recording_cpu_s") / median("plain", "cpu_s")
            ratios[f"{kind}_recording_cpu"] = round(1 + recording, 3)
    plain_runs = {r["label"].rpartition("-")[2]: r for r in serial if "-plain-" in r["label"]}
    for kind in (k for k in kinds if k != "audit-cold" or base is not None):
        ratios[f"{kind}_cpu_pairs"] = [
            round(r["cpu_s"] / plain_runs[r["label"].rpartition("-")[2]]["cpu_s"], 3)
            for r in serial
            if f"-{kind}-" in r["label"] and r["label"].rpartition("-")[2] in plain_runs
        ]
    totals: dict[str, int] = {}
    for outcome in reference.values():
        totals[outcome] = totals.get(outcome, 0) + 1
    return {
        "suite": name,
        "source": str(source) if source is not None else f"the installed {spec['package']}",
        "select": spec["select"],
        "command": f"python -m pytest {' '.join(COMMON)} [--jaxport-audit] {' '.join(select)}",
        "tests": len(reference),
        "outcomes": totals,
        "same_outcomes_everywhere": all(same.values()),
        "outcome_differences": differences,
        "ratios": ratios,
        "runs": [{k: v for k, v in r.items() if k != "outcomes"} for r in runs],
        "unraisable_warnings": sum(r["unraisable"] for r in runs),
        "audit": audit_numbers(report),
        "audit_base": audit_numbers(base_report) if base is not None else None,
        "head_over_base_cpu_pairs": _head_over_base(serial) if base is not None else None,
        "audit_eager_users_all": audit_numbers(every_report) if eager_all else None,
        "serial_vs_n2": same_audit(report, n2_report) if n2 else None,
    }


def _head_over_base(serial: list[dict[str, Any]]) -> list[float]:
    """Per repetition, this checkout's cold audit CPU over the base checkout's."""
    by_label = {r["label"]: r for r in serial}
    return [
        round(r["cpu_s"] / by_label[base]["cpu_s"], 3)
        for r in serial
        if "-audit-cold-" in r["label"]
        and (base := r["label"].replace("-audit-cold-", "-audit-base-cold-")) in by_label
    ]


def same_audit(serial: Path, n2: Path) -> dict[str, Any]:
    """Whether the serial cold run and the ``-n 2`` run audited the same computations with
    the same numbers (timings and cache-miss calls aside: each worker misses on its own)."""
    from pytest_jaxport.report.files import without_timings

    sections = []
    for path in (serial, n2):
        audit = without_timings(json.loads(path.read_text())["audit"])
        calls = audit["seen"].pop("calls", None)
        sections.append((audit, calls))
    (a, calls_serial), (b, calls_n2) = sections
    return {
        "identical": a == b,
        "differing_keys": sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)),
        "computations": [a["seen"]["computations"], b["seen"]["computations"]],
        "calls": [calls_serial, calls_n2],
    }


def hot_path(calls: int = 5000, reps: int = 7) -> dict[str, Any]:
    """A jitted function called in a loop: per-call time after its first call, without and
    with the audit's hook installed (interleaved, median of ``reps`` loops of ``calls``)."""
    from pathlib import Path as _Path

    import jax
    import jax.numpy as jnp

    from pytest_jaxport.cache import CompileSettings
    from pytest_jaxport.model.classification import classify
    from pytest_jaxport.recorder import Recorder

    @jax.jit
    def step(w: Any, x: Any) -> Any:
        return jnp.tanh(x @ w).sum()

    w, x = jnp.ones((16, 16)), jnp.ones((4, 16))
    recorder = Recorder(
        platforms=("cpu", "cuda", "rocm", "tpu"),
        classifier=lambda p, op, t: classify(p, op, t),
        rootdir=_Path.cwd(),
        compile_settings=CompileSettings(),
    )

    def loop() -> float:
        step(w, x).block_until_ready()  # the first call per signature: not timed
        started = time.perf_counter()
        for _ in range(calls):
            step(w, x)
        step(w, x).block_until_ready()
        return (time.perf_counter() - started) / calls * 1e6

    plain, hooked = [], []
    for _ in range(reps):
        plain.append(loop())
        recorder.start()
        recorder.begin_test()
        hooked.append(loop())
        recorder.stop()
    return {
        "calls": calls,
        "reps": reps,
        "plain_us_per_call": round(statistics.median(plain), 3),
        "audit_us_per_call": round(statistics.median(hooked), 3),
        "ratio": round(statistics.median(hooked) / statistics.median(plain), 3),
    }


def redispatch(per_kind: int = 20, tests: int = 30, reps: int = 5) -> dict[str, Any]:
    """What the audit's per-test re-dispatch costs: ``3 * per_kind`` small computations (two
    eager ops and a jit per shape) called once per "test", ``tests`` tests, four ways
    interleaved: plain (JAX's C++ dispatch after the first call), JAX's dispatch caches
    emptied before each test (JAX's own Python path once per computation and test), the
    audit (``begin_test`` empties the jits' caches; the hook records each call) and the audit
    with ``eager_users = "all"`` (every cache emptied: the eager ops' too), with the CPU inside
    ``Recorder.record`` timed. Medians of ``reps``; CPU time of this thread."""
    from pathlib import Path as _Path

    import jax
    import jax.numpy as jnp
    from jax._src import pjit

    from pytest_jaxport.cache import CompileSettings
    from pytest_jaxport.model.classification import classify
    from pytest_jaxport.recorder import Recorder

    xs = [jnp.ones((i + 1, 3)) for i in range(per_kind)]
    jits = [jax.jit(lambda a, i=i: jnp.tanh(a * i).sum()) for i in range(per_kind)]

    def body() -> None:
        for x in xs:
            jnp.sin(x + 1.0)
        for f, x in zip(jits, xs, strict=True):
            f(x).block_until_ready()

    recording = [0.0]
    record = Recorder.record

    def timed(self: Recorder, call: Any) -> None:
        started = time.thread_time()
        try:
            record(self, call)
        finally:
            recording[0] += time.thread_time() - started

    def clear() -> None:  # (Interception.clear_dispatch_caches does nothing uninstalled)
        pjit._cpp_pjit_cache_fun_only.clear()
        pjit._cpp_pjit_cache_explicit_attributes.clear()

    Recorder.record = timed  # type: ignore[method-assign]
    try:
        body()
        audits = {  # a recorder each: every computation known to it before timing
            kind: Recorder(
                platforms=("cpu", "cuda", "rocm", "tpu"),
                classifier=lambda p, op, t: classify(p, op, t),
                rootdir=_Path.cwd(),
                compile_settings=CompileSettings(),
                eager_users=users,
            )
            for kind, users in (("audit", "owner"), ("audit_all", "all"))
        }
        for audit in audits.values():
            audit.start()
            audit.begin_test()
            body()
            audit.end_test("warm-up", 0)
            audit.stop()
        times: dict[str, list[float]] = {"plain": [], "emptied": [], "audit": [], "audit_all": []}
        recorded: dict[str, list[float]] = {"audit": [], "audit_all": []}
        for _ in range(reps):
            started = time.thread_time()
            for _ in range(tests):
                body()
            times["plain"].append((time.thread_time() - started) / tests)
            started = time.thread_time()
            for _ in range(tests):
                clear()
                body()
            times["emptied"].append((time.thread_time() - started) / tests)
            for kind, audit in audits.items():
                audit.start()
                body()  # the install emptied every cache: that re-dispatch is not a test's
                recording[0] = 0.0
                started = time.thread_time()
                for i in range(tests):
                    audit.begin_test()
                    body()
                    audit.end_test(f"t{i}", i)
                times[kind].append((time.thread_time() - started) / tests)
                recorded[kind].append(recording[0] / tests)
                audit.stop()
    finally:
        Recorder.record = record  # type: ignore[method-assign]
    per_test = {k: statistics.median(v) for k, v in times.items()}
    computations = 3 * per_kind
    return {
        "computations_per_test": computations,
        "tests": tests,
        "reps": reps,
        "ms_per_test": {k: round(v * 1e3, 3) for k, v in per_test.items()},
        "us_per_redispatch_jax": round(
            (per_test["emptied"] - per_test["plain"]) / computations * 1e6, 1
        ),
        # with eager_users = "owner" only the jits (a third) pass the hook again
        "us_per_redispatch_audit": round(
            (per_test["audit"] - per_test["plain"]) / per_kind * 1e6, 1
        ),
        "us_per_redispatch_audit_all": round(
            (per_test["audit_all"] - per_test["plain"]) / computations * 1e6, 1
        ),
        "us_per_redispatch_recording": {
            kind: round(statistics.median(v) / calls * 1e6, 1)
            for kind, v in recorded.items()
            for calls in [per_kind if kind == "audit" else computations]
        },
    }


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in (
        "jax",
        "jaxlib",
        "pytest",
        "pytest-xdist",
        "optax",
        "chex",
        "dm-haiku",
        "lineax",
        "optimistix",
        "diffrax",
        "equinox",
        "jaxopt",
        "blackjax",
        "evosax",
        "absl-py",
        "pytest-jaxport",
    ):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="optax,chex,haiku")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "audit-suites-2cpu.json"))
    parser.add_argument("--hot-path", action="store_true", help="only the hot-path loop")
    parser.add_argument(
        "--redispatch", action="store_true", help="only the per-test re-dispatch measurement"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="one cold audit, then N pairs of plain and warm audit runs, alternating "
        "(instead of --reps; the warm overhead alone)",
    )
    parser.add_argument(
        "--eager-all",
        action="store_true",
        help='with --pairs, a third warm run in each: [tool.jaxport.audit] eager_users = "all" '
        "(every test's first call of each eager op re-dispatched)",
    )
    parser.add_argument(
        "--no-n2", action="store_true", help="no -n 2 runs (repetitions for the overhead only)"
    )
    parser.add_argument(
        "--python",
        dest="pythons",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="the interpreter a suite runs with (its own virtual env; this one by default)",
    )
    parser.add_argument(
        "--base",
        help="a git revision of the plugin from before a change: each repetition runs a cold "
        "audit with it too, interleaved with this checkout's (plain, cold, base cold)",
    )
    parser.add_argument(
        "--head",
        help="a git revision of the plugin every other run uses (extracted: this checkout can "
        "change meanwhile); the interpreter's own plugin by default",
    )
    parser.add_argument(
        "--from",
        dest="sources",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a suite from its source: the folder holding its test folder (lineax, "
        "optimistix, diffrax)",
    )
    options = parser.parse_args()
    sources: dict[str, Path] = {}
    for given in options.sources:
        name, _, path = given.partition("=")
        if name not in SUITES or not path:
            raise SystemExit(f"--from {given}: expected NAME=PATH with NAME one of {list(SUITES)}")
        sources[name] = Path(path).resolve()
    pythons: dict[str, str] = {}
    for given in options.pythons:
        name, _, path = given.partition("=")
        if name not in SUITES or not path:
            raise SystemExit(
                f"--python {given}: expected NAME=PATH with NAME one of {list(SUITES)}"
            )
        pythons[name] = path
    if options.hot_path:
        print(json.dumps(hot_path(), indent=2))
        return
    if options.redispatch:
        print(json.dumps(redispatch(), indent=2))
        return
    started = time.time()
    result: dict[str, Any] = {
        "machine": {
            "nproc": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        },
        "versions": versions(),
        "git": subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
        "date": time.strftime("%Y-%m-%d"),
        "load_start": os.getloadavg()[0],
        "suites": [],
    }
    with tempfile.TemporaryDirectory(prefix="jaxport-audit-suites-") as tmp:
        from benchmarks.overhead.checkouts import extract

        base = head = None
        if options.base is not None:
            base = extract(options.base, Path(tmp) / "base")
            result["base"] = options.base
        if options.head is not None:
            head = extract(options.head, Path(tmp) / "head")
            result["head"] = options.head
        for name in options.suites.split(","):
            folder = Path(tmp) / name
            folder.mkdir()
            result["suites"].append(
                measure(
                    name,
                    options.reps,
                    folder,
                    sources.get(name),
                    n2=not options.no_n2,
                    pairs=options.pairs,
                    eager_all=options.eager_all,
                    python=pythons.get(name, sys.executable),
                    base=base,
                    head=head,
                )
            )
            result["load_end"] = os.getloadavg()[0]
            result["seconds"] = round(time.time() - started, 1)
            Path(options.out).write_text(json.dumps(result, indent=2) + "\n")
    for suite in result["suites"]:
        print(
            suite["suite"],
            suite["tests"],
            suite["outcomes"],
            "same outcomes:",
            suite["same_outcomes_everywhere"],
            suite["ratios"],
        )


if __name__ == "__main__":
    main()
