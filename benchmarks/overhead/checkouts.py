"""The same suite under two checkouts of the plugin, interleaved: did a change cost time?

    python -m benchmarks.overhead.checkouts --base REV [--head REV-or-FOLDER] [--reps 3] [--cases ...]
        [--out benchmarks/results/<name>.json]

For a change that must not change behaviour or cost (a restructuring), run the generated
suite of ``corpora/suite.py`` (the per-case tests of ``run.py``'s suite overhead) three ways in each
repetition, in turn and in alternating order: the plugin from ``--base`` and from ``--head``
(git revisions, each extracted into a temporary folder, or a folder; this checkout by
default), and plain ``jax.jit`` (``-p no:jaxport``), each cold (no pytest cache) then warm.
Each checkout is put first on ``PYTHONPATH``; the interpreter and its packages are this one's.
Reports the medians, each checkout's ratio to plain and head over base (CPU time: user + sys
of the pytest process and its children, the steadier number on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
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


def session(folder: Path, mode: str, source: Path | None) -> dict[str, Any]:
    saved = os.environ.get("PYTHONPATH")
    if source is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), saved) if p)
    try:
        return _session(folder, "b" if source is None else "a", [])
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="git revision of the plugin before")
    parser.add_argument(
        "--head", default=str(REPO), help="git revision or folder of the plugin after"
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", nargs="*", default=QUICK_CASES)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sources: dict[str, Path | None] = {
            "base": extract(args.base, root / "base"),
            "head": Path(args.head).resolve()
            if Path(args.head).is_dir()
            else extract(args.head, root / "head"),
            "plain": None,
        }
        folders = {}
        for name in sources:
            folders[name] = root / f"suite-{name}"
            write_suite(folders[name], args.cases, "models")
        runs: dict[str, list[dict[str, Any]]] = {
            f"{n}_{s}": [] for n in sources for s in ("cold", "warm")
        }
        for rep in range(args.reps):
            order = list(sources) if rep % 2 == 0 else list(reversed(sources))
            for name in order:
                _clear(folders[name])
                runs[f"{name}_cold"].append(session(folders[name], name, sources[name]))
            for name in order:
                runs[f"{name}_warm"].append(session(folders[name], name, sources[name]))
            log(f"rep {rep + 1}/{args.reps}: " + ", ".join(
                f"{k} {v[-1]['cpu_s']:.1f}s cpu" for k, v in runs.items()))  # fmt: skip
    result: dict[str, Any] = {
        "machine": machine(),
        "base": args.base,
        "head": args.head,
        "cases": args.cases,
        "reps": args.reps,
        "loadavg_end": os.getloadavg(),
        "summaries": {k: v[0]["summary"] for k, v in runs.items()},
    }
    for key, values in runs.items():
        result[f"{key}_median_cpu_s"] = statistics.median(v["cpu_s"] for v in values)
        result[f"{key}_median_wall_s"] = statistics.median(v["wall_s"] for v in values)
    for state in ("cold", "warm"):
        plain = result[f"plain_{state}_median_cpu_s"]
        for name in ("base", "head"):
            result[f"{name}_{state}_ratio_cpu"] = result[f"{name}_{state}_median_cpu_s"] / plain
        result[f"head_over_base_{state}_cpu"] = (
            result[f"head_{state}_median_cpu_s"] / result[f"base_{state}_median_cpu_s"]
        )
    print(json.dumps({k: v for k, v in result.items() if "ratio" in k or "over" in k}, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps({**result, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
