"""What recording every user of a computation costs (issue 43, item 1).

    python benchmarks/new_jits.py [--calls 2000] [--out benchmarks/results/new-jits-<name>.json]

A suite that builds a new ``jax.jit`` of one function in each test (chex's ``with_jit``
variants do) shares one C++ dispatch cache entry between those jits; the audit's hook
(:mod:`pytest_jaxport._jax.interception`) now empties it when a test makes the first jit of
that function, so that test's call passes the hook and the test is recorded as a user. Timed
here, in one process, with the hook installed and a listener that only counts (no census):

- ``plain``: ``jax.jit(f)(x)`` ``--calls`` times, no hook (JAX's own cost of a new jit);
- ``one test``: the same with the hook, all in one test (a jit made again in a loop keeps its
  fast path after the first: the cost of the check itself);
- ``a test each``: the same, a new test before each call (each call passes the hook: the cost
  a test pays for being recorded as a user of a computation it did not trace).

Medians of ``--repeats`` runs, microseconds per call. Measurement only, never CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from pytest_jaxport._jax.interception import Interception

    def shift(x: jax.Array, c: float) -> jax.Array:
        return x * 2.0 + c

    x = jnp.ones((8, 3))
    jax.jit(shift)(x, 0.5).block_until_ready()
    recorded: list[object] = []
    hook = Interception(recorded.append)

    def timed(new_test: bool) -> float:
        start = time.perf_counter()
        for _ in range(args.calls):
            if new_test:
                hook.clear_dispatch_caches(jax_own=False)
            jax.jit(shift)(x, 0.5)
        return (time.perf_counter() - start) / args.calls * 1e6

    runs: dict[str, list[float]] = {"plain": [], "one test": [], "a test each": []}
    for _ in range(args.repeats):
        runs["plain"].append(timed(False))
        hook.install()
        hook.clear_dispatch_caches(jax_own=False)
        before = len(recorded)
        runs["one test"].append(timed(False))
        one = len(recorded) - before
        before = len(recorded)
        runs["a test each"].append(timed(True))
        each = len(recorded) - before
        hook.uninstall()
    results = {
        "calls": args.calls,
        "repeats": args.repeats,
        "jax": jax.__version__,
        "python": sys.version.split()[0],
        "loadavg": list(os.getloadavg()),
        "recorded": {"one test": one, "a test each": each},
        "us_per_call": {k: statistics.median(v) for k, v in runs.items()},
        "runs": runs,
    }
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
