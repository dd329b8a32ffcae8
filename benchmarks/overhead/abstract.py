"""What a check with abstract arguments costs (issue 56): the same check at a production shape
given as ``jax.ShapeDtypeStruct`` (traced, lowered, compiled, never run) against it at a toy
shape given as arrays (traced, lowered, compiled, run, compared).

Usage::

    JAX_PLATFORMS=cpu python -m benchmarks.overhead.abstract [--reps 3] \\
        [--cases product,mlp_step] [--modes lowered,compiled] \\
        [--output benchmarks/results/abstract-checks-2cpu.json]

Each sample is a whole ``python -m pytest`` session of one test in a temporary project
(``-p no:cacheprovider``: every session cold, as a suite's first run), its CPU time (user +
system of the session and its children: libtpu's worker included) and wall time, and the
test process's peak resident memory (``ru_maxrss``, printed by the test). The two sides of
a case are interleaved (toy, abstract, abstract, toy, ...) in one run, and medians taken.

- **lowered**: ``[tool.jaxport] platforms = ["cpu", "cuda", "rocm", "tpu"]``, nothing
  compiled: the toy check runs on the cpu, the abstract one nowhere.
- **compiled**: the same with ``compile = ["cpu", "cuda", "tpu"]`` (cuda deviceless against
  ``h100``, tpu through libtpu; a platform whose compiler is not installed is left out):
  both sides compile everywhere; the abstract side's plans are production-sized.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from benchmarks import RESULTS

DEFAULT_OUTPUT = RESULTS / "abstract-checks-2cpu.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One function, its toy arguments (arrays) and its production ones (abstract)."""

    name: str
    what: str
    source: str
    toy: str
    abstract: str


_HEAD = """
import resource

import jax
import jax.numpy as jnp
import pytest


def mlp_step(params, x, y):
    def loss(p):
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        return jnp.mean((h - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads), value


def product(a, b):
    return a @ b


def array(*shape):
    return jnp.ones(shape, jnp.float32)


def spec(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


@pytest.mark.portable
def test_case(jaxport):
    jaxport.check({call})
    print("RSS KiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case(
            name="product",
            what="a float32 product: 64² arrays against 24576² abstract (6.75 GiB planned)",
            source=_HEAD,
            toy="product, array(64, 64), array(64, 64)",
            abstract="product, spec(24576, 24576), spec(24576, 24576)",
        ),
        Case(
            name="mlp_step",
            what="an MLP train step: 8 layers of 128², batch 32, arrays, against 8 layers of "
            "8192², batch 4096, abstract (4.4 GiB planned)",
            source=_HEAD,
            toy="mlp_step, [(array(128, 128), array(128)) for _ in range(8)], array(32, 128), "
            "array(32, 128)",
            abstract="mlp_step, [(spec(8192, 8192), spec(8192)) for _ in range(8)], "
            "spec(4096, 8192), spec(4096, 8192)",
        ),
    )
}


def _installed(distribution: str) -> bool:
    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


def compiled_platforms() -> list[str]:
    """The platforms the compiled mode compiles: cpu, and cuda and tpu where their compiler
    is installed."""
    found = ["cpu"]
    if _installed("jax-cuda12-plugin"):
        found.append("cuda")
    if _installed("libtpu"):
        found.append("tpu")
    return found


def _pyproject(mode: str) -> str:
    text = '[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n'
    if mode == "compiled":
        text += f"compile = {json.dumps(compiled_platforms())}\n"
    return text


def session(folder: Path, case: Case, side: str, mode: str) -> dict[str, Any]:
    """One pytest session of ``case``'s ``side`` (toy or abstract) in ``mode``."""
    (folder / "pyproject.toml").write_text(_pyproject(mode))
    call = case.toy if side == "toy" else case.abstract
    test = folder / f"test_{case.name}.py"
    test.write_text(case.source.replace("{call}", call))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
         "-s", test.name],
        cwd=folder, capture_output=True, text=True, check=False,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss = [int(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("RSS")]
    if done.returncode != 0 or not rss:
        tail = (done.stdout + done.stderr)[-2000:]
        raise RuntimeError(f"{case.name} {side} {mode}: rc {done.returncode}\n{tail}")
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "rss_mib": round(rss[0] / 1024, 1)}


def measure(cases: list[Case], modes: list[str], reps: int) -> dict[str, Any]:
    """Every case in every mode, toy and abstract interleaved, ``reps`` pairs each."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="jaxport-abstract-") as directory:
        folder = Path(directory)
        for mode in modes:
            for case in cases:
                samples: dict[str, list[dict[str, Any]]] = {"toy": [], "abstract": []}
                for rep in range(reps):
                    order = ("toy", "abstract") if rep % 2 == 0 else ("abstract", "toy")
                    for side in order:
                        samples[side].append(session(folder, case, side, mode))
                        print(mode, case.name, side, samples[side][-1], file=sys.stderr,
                              flush=True)  # fmt: skip
                results[f"{case.name} {mode}"] = _summary(case, mode, samples)
    return results


def _summary(case: Case, mode: str, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def median(side: str, key: str) -> float:
        return round(statistics.median(s[key] for s in samples[side]), 3)

    return {
        "what": case.what,
        "mode": mode,
        "compiled": compiled_platforms() if mode == "compiled" else [],
        "toy_cpu_s": median("toy", "cpu_s"),
        "abstract_cpu_s": median("abstract", "cpu_s"),
        "cpu_ratio": round(median("abstract", "cpu_s") / median("toy", "cpu_s"), 3),
        "toy_wall_s": median("toy", "wall_s"),
        "abstract_wall_s": median("abstract", "wall_s"),
        "toy_rss_mib": median("toy", "rss_mib"),
        "abstract_rss_mib": median("abstract", "rss_mib"),
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--modes", default="lowered,compiled")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    options = parser.parse_args(argv)
    cases = [CASES[name] for name in options.cases.split(",")]
    load = os.getloadavg()
    started = time.perf_counter()
    results = measure(cases, options.modes.split(","), options.reps)
    document = {
        "about": "abstract checks (production shapes, jax.ShapeDtypeStruct) against the same "
        "checks at toy shapes (arrays): benchmarks/overhead/abstract.py",
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "jax": version("jax"),
        "libtpu": version("libtpu") if _installed("libtpu") else None,
        "cpus": os.cpu_count(),
        "load_average": {
            "start": [round(x, 2) for x in load],
            "end": [round(x, 2) for x in os.getloadavg()],
        },
        "seconds": round(time.perf_counter() - started, 1),
        "reps": options.reps,
        "results": results,
    }
    options.output.write_text(json.dumps(document, indent=1) + "\n")
    for name, found in results.items():
        print(f"{name}: toy {found['toy_cpu_s']} s, abstract {found['abstract_cpu_s']} s CPU "
              f"(x{found['cpu_ratio']}); RSS {found['toy_rss_mib']} / "
              f"{found['abstract_rss_mib']} MiB")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
