"""Tests of pytest_jaxport._jax.stablehlo: ops XLA folds are not read.

Ops XLA folds into constants are not counted at the lowered level (issue 43, item 2).

A rotation whose angle is bound by ``functools.partial`` computes ``matrix @ center`` on
constants only: XLA computes it while compiling, so no cuBLAS or hipBLAS gemm ever runs it
and no TF32 pass rounds it. Real JAX, real lowering; the audit through pytester.
"""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import pytest

from pytest_jaxport._jax import stablehlo

ROTATION = """
import functools

import jax
import jax.numpy as jnp


def rotate(points, angle):
    c, s = jnp.cos(angle), jnp.sin(angle)
    matrix = jnp.array([[c, -s], [s, c]])
    center = jnp.array([1.5, 2.5])
    offset = center - matrix @ center  # on constants only: folded
    return points @ matrix + offset  # on the argument: a library's gemm


def test_rotate():
    turn = jax.jit(functools.partial(rotate, angle=0.3))
    assert turn(jnp.ones((16, 2))).shape == (16, 2)
"""


def test_a_dot_on_constants_is_folded_not_counted_nor_found_in_formats(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm"]\n')
    pytester.makepyfile(test_rotation=ROTATION)
    result = pytester.runpytest("--jaxport-audit", "--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    audit = json.loads((pytester.path / "r.json").read_text())["audit"]
    (rotate,) = [c for c in audit["computations"] if c["function"] == "rotate"]
    for platform, library in (("cuda", "cublas"), ("rocm", "hipblas")):
        lowered = rotate["platforms"][platform]["lowered"]
        assert lowered["libraries"] == {library: 1}, platform
        (gemm,) = lowered["kernels"]
        assert (gemm["count"], gemm["location"]) == (1, "test_rotation.py:12")
        dots = [f for f in lowered["formats"]["findings"] if "dot_general" in f.get("ops", ())]
        assert sum(f["count"] for f in dots) == (1 if platform == "cuda" else 0)
        assert all("float32[16,2]" in f["detail"] for f in dots)


def _rotate(points: jax.Array, angle: float) -> jax.Array:
    c, s = jnp.cos(angle), jnp.sin(angle)
    matrix = jnp.array([[c, -s], [s, c]])
    center = jnp.array([1.5, 2.5])
    return points @ matrix + (center - matrix @ center)


def _dots(fn: object, *args: object, platform: str) -> int:
    traced = jax.jit(fn).trace(*args)  # type: ignore[call-overload]
    program = stablehlo.read_program(traced.lower(lowering_platforms=(platform,)))
    return sum(
        s.count for sites in program.functions.values() for s in sites
        if s.op == "stablehlo.dot_general"
    )  # fmt: skip


def test_the_lowered_count_is_what_xla_leaves_after_folding() -> None:
    """The compiled CPU program keeps one dot of the two; the lowered census reads one.
    A dot on a broadcast constant or an ``iota`` is not folded (XLA keeps broadcasts and
    iotas as they are), nor one on an argument."""
    points = jnp.ones((16, 2))
    rotate = functools.partial(_rotate, angle=0.3)
    compiled = jax.jit(rotate).lower(points).compile().as_text()
    assert compiled.count(" dot(") == 1  # (inside a fusion, on the CPU)
    assert _dots(rotate, points, platform="cuda") == 1

    def broadcast(x: jax.Array) -> jax.Array:
        a = jnp.full((64, 64), 0.5)
        b = jnp.arange(64.0 * 64).reshape(64, 64)
        return x + a @ b

    assert _dots(broadcast, jnp.ones((64, 64)), platform="cuda") == 1
