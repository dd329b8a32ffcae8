"""The audit's recorder places each kernel at the line that caused it (issue 55, item 14).

An eager ``lax.scan`` or ``lax.while_loop`` is one computation: JAX runs the loop primitive
on its own, and the loop's body is a program traced from the function the caller gave it,
whose equations carry that function's lines. Each kernel inside is placed at its line there,
as under jit; the loop's line is only where a kernel has no line of its own. (evosax's eager
``jax.lax.scan`` put cuSOLVER's syevd at the test's scan line, where jit put it at
``cma_es.py:322``; jaxopt's eager iterative refinement put potrf, trsm and 66 gemm at
``jaxopt/_src/loop.py:60``, its ``jax.lax.while_loop``, not at the solve inside it.)

Real JAX, a real suite through pytester, serially and under pytest-xdist.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

PYPROJECT = """
[tool.pytest.ini_options]
pythonpath = ["."]

[tool.jaxport]
platforms = ["cpu", "cuda"]
"""

LIBRARY = """
import jax
import jax.numpy as jnp


def decompose(c):
    w, v = jnp.linalg.eigh(c)
    return (v * w) @ v.T


def loop(cond, body, init):
    return jax.lax.while_loop(cond, body, init)


def refine(a, b):
    def body(state):
        i, x = state
        r = b - a @ x
        return i + 1, x + jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), r)

    return loop(lambda s: s[0] < 3, body, (0, jnp.zeros_like(b)))[1]
"""

TESTS = """
import jax
import jax.numpy as jnp

import mylib


def step(c, _):
    c = mylib.decompose(c) + 0.1
    return c, c.sum()


def test_eager_scan():
    jax.lax.scan(step, jnp.eye(3), jnp.zeros(4))


def test_jitted_scan():
    jax.jit(lambda c: jax.lax.scan(step, c, jnp.zeros(4)))(jnp.eye(4))


def test_eager_while_loop_inside_the_library():
    mylib.refine(jnp.eye(3) * 2.0, jnp.ones(3))


def test_eager_eigh():
    jnp.linalg.eigh(jnp.eye(5))
"""


def line(source: str, text: str, module: str = "mylib/__init__") -> str:
    """``mylib/__init__.py:6``: where ``text`` is in ``source`` as pytester writes it."""
    (number,) = [i for i, code in enumerate(source.strip().splitlines(), 1) if text in code]
    return f"{module}.py:{number}"


def cuda_sites(pytester: pytest.Pytester, *args: str) -> dict[tuple[str, str], set[str]]:
    """Where each cuda kernel was placed: ``{(kernel, computation's function): {lines}}``."""
    result = pytester.runpytest_subprocess(
        "--jaxport-audit", "--jaxport-report=r.json", "-p", "no:cacheprovider", *args
    )
    result.assert_outcomes(passed=4)
    audit: dict[str, Any] = json.loads((pytester.path / "r.json").read_text())["audit"]
    placed: dict[tuple[str, str], set[str]] = {}
    for computation in audit["computations"]:
        census = computation["platforms"]["cuda"]["lowered"]
        for kernel in census["kernels"]:
            key = (kernel["name"], computation["function"])
            placed.setdefault(key, set()).add(kernel["location"])
    return placed


@pytest.mark.parametrize(
    "args",
    [pytest.param((), id="serial"), pytest.param(("-n", "2"), id="n2", marks=pytest.mark.slow)],
)
def test_kernels_of_an_eager_loop_are_placed_at_the_lines_inside_its_body(
    pytester: pytest.Pytester, args: tuple[str, ...]
) -> None:
    pytester.makefile(".toml", pyproject=PYPROJECT)
    pytester.makepyfile(**{"mylib/__init__": LIBRARY, "test_loops": TESTS})
    placed = cuda_sites(pytester, *args)
    eigh, dot = line(LIBRARY, "jnp.linalg.eigh(c)"), line(LIBRARY, "(v * w) @ v.T")
    solve, residual = line(LIBRARY, "cho_solve("), line(LIBRARY, "r = b - a @ x")
    # the eager scan's eigh and product where the jitted scan has them: inside decompose
    assert placed[("cusolver_syevd_ffi", "scan")] == {eigh}
    assert placed[("stablehlo.dot_general", "scan")] == {dot}
    assert placed[("cusolver_syevd_ffi", "<lambda>")] == {eigh}
    assert placed[("stablehlo.dot_general", "<lambda>")] == {dot}
    # the eager while loop's kernels at its body's lines, not at the loop's
    assert line(LIBRARY, "jax.lax.while_loop(") not in {solve, residual}
    # the Cholesky factor: cuSOLVER's call, or (jax 0.6.2) XLA's op, which it lowers later
    factors = (("cusolver_potrf_ffi", "while"), ("stablehlo.cholesky", "while"))
    cholesky = [placed[k] for k in factors if k in placed]
    assert cholesky == [{solve}], sorted(placed)
    assert placed[("stablehlo.triangular_solve", "while")] == {solve}
    assert placed[("stablehlo.dot_general", "while")] == {residual}
    # an op run eagerly with no function of the caller's stays at the caller's line
    assert placed[("cusolver_syevd_ffi", "eigh")] == {line(TESTS, "jnp.linalg.eigh(", "test_loops")}
