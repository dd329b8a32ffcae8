"""What adding ``oneapi`` costs the lowering for absent platforms (issue 41).

For each case of :mod:`models` (MLPs, a train step, a conv net, a transformer block, a
solve, a Cholesky ridge regression, FFT low-pass filters), the plugin's own multi-platform
lowering (``pytest_jaxport._jax.lowering.lower_together``: one lowering and the reading of
every program) is timed for the default absent platforms (``cuda, rocm, tpu``: **a**) and
with oneapi added (``cuda, rocm, tpu, oneapi``: **b**), interleaved (a, b, b, a, ...), after
``jax.clear_caches()`` each time, on one trace. The verdict: **b / a <= 1.25** over the
suite's summed medians. A project that does not name oneapi never lowers for it (the default
platforms are cpu, cuda, rocm, tpu: ``tests/test_oneapi.py`` checks the report), so it pays
nothing; this measures the project that opts in.

Needs jax 0.12+ (oneapi's lowering rules)::

    python benchmarks/oneapi_overhead.py [--reps N] [--out benchmarks/results/<name>.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CASES

from pytest_jaxport._jax.lowering import lower_together

BASE = ("cuda", "rocm", "tpu")
WITH_ONEAPI = (*BASE, "oneapi")
LIMIT = 1.25


def _time(traced: object, platforms: tuple[str, ...]) -> float:
    jax.clear_caches()
    start = time.perf_counter()
    programs = lower_together(traced, platforms)
    elapsed = time.perf_counter() - start
    if programs is None or set(programs) != set(platforms):
        raise SystemExit(f"lowering for {platforms} failed together")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    cases: dict[str, dict[str, object]] = {}
    for name, make in CASES.items():
        fn, fn_args = make()
        traced = jax.jit(fn).trace(*fn_args)
        _time(traced, WITH_ONEAPI)  # warm JAX's own import-time work once
        a: list[float] = []
        b: list[float] = []
        for rep in range(args.reps):
            order = (BASE, WITH_ONEAPI) if rep % 2 == 0 else (WITH_ONEAPI, BASE)
            for platforms in order:
                (a if platforms == BASE else b).append(_time(traced, platforms))
        cases[name] = {
            "a_samples": a,
            "b_samples": b,
            "a_median": statistics.median(a),
            "b_median": statistics.median(b),
            "ratio": statistics.median(b) / statistics.median(a),
        }
        print(f"{name:24} a {cases[name]['a_median'] * 1e3:8.2f} ms  "
              f"b {cases[name]['b_median'] * 1e3:8.2f} ms  b/a {cases[name]['ratio']:.3f}")  # fmt: skip
    total_a = sum(float(c["a_median"]) for c in cases.values())  # type: ignore[arg-type]
    total_b = sum(float(c["b_median"]) for c in cases.values())  # type: ignore[arg-type]
    ratio = total_b / total_a
    verdict = "pass" if ratio <= LIMIT else "FAIL"
    print(f"suite: a {total_a * 1e3:.1f} ms, b {total_b * 1e3:.1f} ms, b/a {ratio:.3f} "
          f"(limit {LIMIT}): {verdict}")  # fmt: skip
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()  # fmt: skip
        result = {
            "what": "lower_together for cuda,rocm,tpu (a) vs cuda,rocm,tpu,oneapi (b)",
            "machine": {
                "nproc": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "jax": jax.__version__,
            "commit": commit,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load": [load_start, os.getloadavg()[0]],
            "reps": args.reps,
            "cases": cases,
            "suite": {
                "a": total_a,
                "b": total_b,
                "ratio": ratio,
                "limit": LIMIT,
                "verdict": verdict,
            },
        }
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if verdict == "pass" else 1


if __name__ == "__main__":
    raise SystemExit(main())
