"""Compiled level, tpu without a TPU: what ``--jaxport-compile=tpu`` costs a check (issue 48).

    JAX_PLATFORMS=cpu python benchmarks/compiled_tpu.py --out benchmarks/results/<name>.json

Needs libtpu (``pip install "pytest-jaxport[tpu]"``). The generated suite
(``benchmarks/suite.py``: one portable test per case of ``models.CASES``, the plugin's default
platforms) run in pytest subprocesses, two sides interleaved (their order reversed every other
repetition): **default** (lowered level only, as without the option) and **tpu**
(``--jaxport-compile=tpu``: every check's tpu lowering compiled by libtpu's worker, the
worker started as collection ends). **cold**: ``.pytest_cache`` and ``__pycache__`` removed
first (the compiled cache empty: every check compiles); **warm**: run again with them kept.
Wall and CPU time per session (the worker's included: it is a child of the session), and
the ratio tpu / default: what the tpu compiled level adds to a check. The target is at most
1.25 cold (issue 48); off, the option loads nothing (``tests/test_libtpu.py`` checks that a
run without it never starts the worker).
"""

from __future__ import annotations

import argparse
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import suite as generated  # noqa: E402

SIDES = {"default": [], "tpu": ["--jaxport-compile=tpu"]}
TARGET_COLD = 1.25


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
        "cpu_s": round(
            (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2
        ),
        "summary": done.stdout.strip().splitlines()[-1].strip("= "),
        "jaxport_lines": lines,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", help="comma-separated models.CASES (default: all)")
    args = parser.parse_args(argv)
    import models

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
    with tempfile.TemporaryDirectory(prefix="jaxport-tpu-cost-") as folder:
        suite = generated.write_suite(Path(folder) / "suite", cases)
        for repeat in range(args.repeats):
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
    results["target_cold_max"] = TARGET_COLD
    results["within_target"] = ratios["cold_wall_s"] <= TARGET_COLD
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(ratios, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
