"""The same suite under several checkouts of the plugin, interleaved: did a change cost time?

    python -m benchmarks.overhead.checkouts --base REV [--head REV-or-FOLDER] [--also NAME=REV]
        [--reps 3] [--cases ...] [--states cold,warm] [--pycache DIR] [--audit]
        [--out benchmarks/results/<name>.json]

For a change that must not change behaviour or cost (a restructuring), run the generated
suite of ``corpora/suite.py`` (the per-case tests of ``run.py``'s suite overhead) in each
repetition, in turn and in alternating order: the plugin from ``--base``, from ``--head``
(git revisions, each extracted into a temporary folder, or a folder; this checkout by
default) and from each ``--also NAME=REV``, and plain ``jax.jit`` (``-p no:jaxport``), each
cold (no pytest cache) then warm. Each checkout is put first on ``PYTHONPATH``; the
interpreter and its packages are this one's. Reports the medians, each checkout's ratio to
plain, each over base, and each repetition's own ratio to the plain session beside it (CPU
time: user + sys of the pytest process and its children, the steadier number on a shared
machine), with the load average at every session's start.

``--audit``: the audit's overhead instead of the check's. The generated tests jit and run each
case themselves (``write_suite(..., plain=True)``: a suite that never heard of the plugin),
each checkout's sessions add ``--jaxport-audit``, and plain is the same tests without the
plugin (``-p no:jaxport``).

Bytecode: the sessions inherit this environment's. Where ``PYTHONDONTWRITEBYTECODE`` is set,
nothing is cached between sessions, and a checkout's modules are compiled from source in
every one (a checkout is not byte-compiled, and pytest's assertion-rewriting hook, which
loads a plugin found on ``sys.path``, keeps bytecode of its own only where it may write it).
``--pycache DIR`` runs the sessions as a machine that keeps bytecode does, in ``DIR``
(``PYTHONPYCACHEPREFIX``; nothing is written beside the installed packages), after one
unmeasured session per checkout; a cold session still compiles the suite's own modules.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import REPO
from benchmarks.corpora.suite import write_suite
from benchmarks.overhead.run import QUICK_CASES, _clear, _session, log, machine


def extract(revision: str, folder: Path) -> Path:
    """The package of ``revision`` (``git archive``), as a folder to put on PYTHONPATH."""
    folder.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", revision, "pytest_jaxport"], cwd=REPO, capture_output=True,
        check=True,
    )  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def session(
    folder: Path,
    mode: str,
    source: Path | None,
    pycache: Path | None = None,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One session in ``folder`` (``source``: a checkout put first on ``PYTHONPATH``;
    ``None``: plain, without the plugin); ``extra``: the checkout's own arguments."""
    saved = dict(os.environ)
    if source is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(source), saved.get("PYTHONPATH")) if p
        )
    if pycache is not None:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(pycache)
    try:
        load = os.getloadavg()[0]
        return {
            **_session(folder, "b" if source is None else "a", list(extra)),
            "load_start": load,
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)


def clear(folder: Path, pycache: Path | None) -> None:
    """A cold session's folder: no pytest cache, none of the suite's bytecode (in the folder,
    or under ``--pycache``'s prefix)."""
    _clear(folder)
    if pycache is not None:
        shutil.rmtree(pycache / folder.resolve().relative_to(folder.resolve().anchor),
                      ignore_errors=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="git revision of the plugin before")
    parser.add_argument(
        "--head", default=str(REPO), help="git revision or folder of the plugin after"
    )
    parser.add_argument(
        "--also", action="append", default=[], metavar="NAME=REV",
        help="another checkout in the same run (a git revision or a folder), named NAME",
    )  # fmt: skip
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", nargs="*", default=QUICK_CASES)
    parser.add_argument("--states", default="cold,warm", help="cold, warm or both (default)")
    parser.add_argument(
        "--pycache", type=Path, default=None,
        help="keep bytecode between sessions in this folder (PYTHONPYCACHEPREFIX)",
    )  # fmt: skip
    parser.add_argument(
        "--audit", action="store_true",
        help="the audit's overhead: plain tests, --jaxport-audit against no plugin",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    extra = ("--jaxport-audit",) if args.audit else ()
    states = args.states.split(",")
    if not set(states) <= {"cold", "warm"}:
        parser.error(f"--states {args.states}: expected cold, warm or cold,warm")
    started = machine()
    pycache = args.pycache.resolve() if args.pycache is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def checkout(name: str, given: str) -> Path:
            return Path(given).resolve() if Path(given).is_dir() else extract(given, root / name)

        revisions = {"base": args.base, "head": args.head}
        for also in args.also:
            name, _, given = also.partition("=")
            if not name or not given or name in (*revisions, "plain"):
                parser.error(f"--also {also}: expected NAME=REV with a new NAME")
            revisions[name] = given
        sources: dict[str, Path | None] = {n: checkout(n, r) for n, r in revisions.items()}
        sources["plain"] = None
        folders = {}
        for name in sources:
            folders[name] = root / f"suite-{name}"
            write_suite(folders[name], args.cases, "models", plain=args.audit)
        if pycache is not None:  # the bytecode a machine that keeps it has: one session each
            for name in sources:
                session(folders[name], name, sources[name], pycache, extra)
        runs: dict[str, list[dict[str, Any]]] = {f"{n}_{s}": [] for n in sources for s in states}
        for rep in range(args.reps):
            order = list(sources) if rep % 2 == 0 else list(reversed(sources))
            for state in states:
                for name in order:
                    if state == "cold":
                        clear(folders[name], pycache)
                    runs[f"{name}_{state}"].append(
                        session(folders[name], name, sources[name], pycache, extra)
                    )
            log(f"rep {rep + 1}/{args.reps}: " + ", ".join(
                f"{k} {v[-1]['cpu_s']:.1f}s cpu" for k, v in runs.items()))  # fmt: skip
    result: dict[str, Any] = {
        "machine": started,
        "base": args.base,
        "head": args.head,
        "also": dict(a.partition("=")[::2] for a in args.also),
        "cases": args.cases,
        "reps": args.reps,
        "states": states,
        "measured": "--jaxport-audit on plain tests" if args.audit else "checks",
        "bytecode": (
            f"kept in {pycache} (PYTHONPYCACHEPREFIX)"
            if pycache is not None
            else "not written (PYTHONDONTWRITEBYTECODE)"
            if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else "written beside the sources"
        ),
        "loadavg_end": os.getloadavg(),
        "summaries": {k: v[0]["summary"] for k, v in runs.items()},
    }
    for key, values in runs.items():
        result[f"{key}_median_cpu_s"] = statistics.median(v["cpu_s"] for v in values)
        result[f"{key}_median_wall_s"] = statistics.median(v["wall_s"] for v in values)
    for state in states:
        plain = result[f"plain_{state}_median_cpu_s"]
        for name in sources:
            if name == "plain":
                continue
            result[f"{name}_{state}_ratio_cpu"] = result[f"{name}_{state}_median_cpu_s"] / plain
            result[f"{name}_{state}_paired_ratios_cpu"] = [
                round(a["cpu_s"] / b["cpu_s"], 3)
                for a, b in zip(runs[f"{name}_{state}"], runs[f"plain_{state}"], strict=True)
            ]
            if name != "base":
                over = "head_over_base" if name == "head" else f"{name}_over_base"
                result[f"{over}_{state}_cpu"] = (
                    result[f"{name}_{state}_median_cpu_s"] / result[f"base_{state}_median_cpu_s"]
                )
    print(json.dumps({k: v for k, v in result.items() if "ratio" in k or "over" in k}, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps({**result, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
