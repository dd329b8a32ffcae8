"""Tests of pytest_jaxport._jax.interception and report.audit_ledger: a computation's users.

Every test that runs a computation is its user (issue 43, item 1), serially and under
pytest-xdist alike, whether or not JAX traced it again.

Real JAX, a real suite through pytester: each test builds a new ``jax.jit`` of one function
and calls it with the same types, so JAX reuses its trace and the dispatch cache it shares
between jits of one function.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_jaxport.report.files import without_timings

pytestmark = pytest.mark.slow  # each test audits a suite serially and under pytest-xdist

PLATFORMS = '[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n'

NEW_JITS = """
import jax
import jax.numpy as jnp
import pytest


def shift(x, cval):
    return x * 2.0 + cval


@pytest.mark.parametrize("n", range(4))
def test_new_jit(n):
    x = jnp.ones((8, 3))
    assert jax.jit(shift)(x, 0.5).shape == (8, 3)
"""


def audit(pytester: pytest.Pytester, *args: str, passed: int = 4) -> dict[str, Any]:
    result = pytester.runpytest_subprocess(
        "--jaxport-audit", "--jaxport-report=r.json", "-p", "no:cacheprovider", *args
    )
    result.assert_outcomes(passed=passed)
    found: dict[str, Any] = json.loads((pytester.path / "r.json").read_text())["audit"]
    return found


def test_each_new_jit_of_one_function_counts_every_test_serially_and_under_xdist(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_new_jits=NEW_JITS)
    serial = audit(pytester)
    (shift,) = [c for c in serial["computations"] if c["function"] == "shift"]
    assert shift["users"] == [f"test_new_jits.py::test_new_jit[{n}]" for n in range(4)]
    assert serial["seen"]["shared"] == 1
    spread = audit(pytester, "-n", "2")
    for found in (serial, spread):
        found["seen"].pop("calls")  # each worker's first call of a shared jit is a miss
    assert without_timings(spread) == without_timings(serial)


UNDER_EAGER_VMAP = """
import jax
import jax.numpy as jnp
import pytest


@jax.jit
def evaluate(y):
    return y * 2.0


@pytest.mark.parametrize("n", range(4))
def test_batched(n):
    assert jax.vmap(evaluate)(jnp.ones((10, 3))).shape == (10, 3)


@jax.jit
def energy(y):
    return jnp.sum(jnp.sin(y))


@pytest.mark.parametrize("n", range(4))
def test_differentiated(n):
    assert jax.grad(energy)(jnp.ones(3)).shape == (3,)
"""


def test_a_jit_called_under_an_eager_vmap_or_grad_counts_every_test_serially_and_under_xdist(
    pytester: pytest.Pytester,
) -> None:
    """Under an eager transformation a jit's call runs JAX's transformed copy of its program
    through the jit primitive's own dispatch cache (not the jit's): that copy is cached, so
    every test after the first hit it there (diffrax's solvers under ``jax.vmap``)."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_batched=UNDER_EAGER_VMAP)
    serial = audit(pytester, passed=8)
    for function, test in (("evaluate", "test_batched"), ("energy", "test_differentiated")):
        found = [c for c in serial["computations"] if c["function"] == function]
        assert found, function
        for computation in found:
            assert computation["users"] == [f"test_batched.py::{test}[{n}]" for n in range(4)]
    assert serial["seen"]["shared"] == len(
        [c for c in serial["computations"] if c["function"] in ("evaluate", "energy")]
    )
    spread = audit(pytester, "-n", "2", passed=8)
    for found in (serial, spread):
        found["seen"].pop("calls")
    assert without_timings(spread) == without_timings(serial)


EAGER_AND_JIT = """
import jax
import jax.numpy as jnp
import pytest
from jax import lax


@pytest.mark.xdist_group("first")
def test_jit_square():
    assert jax.jit(lambda x: x ** 2)(jnp.ones(3)).shape == (3,)


@pytest.mark.xdist_group("first")
def test_eager_square():
    assert (jnp.ones(3) ** 2).shape == (3,)


@pytest.mark.xdist_group("second")
def test_eager_square_again():
    assert (jnp.ones(3) ** 2).shape == (3,)


@pytest.mark.xdist_group("first")
def test_eager_dot():
    a = jnp.ones((4, 4))
    assert lax.dot(a, a).shape == (4, 4)


@pytest.mark.xdist_group("first")
def test_jit_dot():
    a = jnp.ones((4, 4))
    assert jax.jit(lambda p, q: lax.dot(p, q))(a, a).shape == (4, 4)


@pytest.mark.xdist_group("second")
def test_jit_dot_again():
    a = jnp.ones((4, 4))
    assert jax.jit(lambda p, q: lax.dot(p, q))(a, a).shape == (4, 4)
"""


def test_an_eager_op_and_a_jit_of_the_same_program_are_two_computations_serially_and_under_xdist(
    pytester: pytest.Pytester,
) -> None:
    """Issue 50, item 4. ``jnp.ones(3) ** 2`` run eagerly and ``jax.jit(lambda x: x ** 2)``
    trace the same program. As one computation, the "first test only" rule for eager ops
    read that computation's kind: the eager square's later users counted where a worker of
    ``-n 2`` ran them first (numpyro: 23 users serially, 24 with ``-n 2``), and an eager
    ``lax.dot`` run first took the jitted dots' tests and sites away from the serial audit.
    Each kind is its own computation, owned and placed by its own rule. (The groups put each
    "again" test on the other worker of ``-n 2``, where its eager op is that worker's first.)"""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_mix=EAGER_AND_JIT)
    lines = [
        "*test_mix.py::test_jit_square: owns 1 (<lambda> [[]*]) and 2 eager ops",
        "*test_mix.py::test_eager_square: owns 1 eager op",
        "*test_mix.py::test_eager_dot: owns 2 eager ops",
        "*test_mix.py::test_jit_dot: owns 1 (<lambda> [[]*])",
        "*test_mix.py::test_jit_dot_again: uses 1 (<lambda> [[]*] of test_mix.py::test_jit_dot)",
        "*where the lock-in lives on cuda: 4 distinct sites*",
        "*test_mix.py:25 *cublas gemm * 1 * 1 * 1 *",
        "*test_mix.py:31 *cublas gemm * 1 * 2 * 1 *",
    ]
    runs = []
    for args in ((), ("-n", "2", "--dist", "loadgroup")):
        result = pytester.runpytest_subprocess(
            "--jaxport-audit", "--jaxport-report=r.json", "-p", "no:cacheprovider", "-v", *args
        )
        result.assert_outcomes(passed=6)
        result.stdout.fnmatch_lines(lines)
        result.stdout.no_fnmatch_line("*test_eager_square_again: *")
        runs.append(json.loads((pytester.path / "r.json").read_text())["audit"])
    serial, spread = runs
    # Both jits are ``<lambda>``: the square's computations are the ones its tests use (one
    # computation for both kinds would give one entry with every square test).
    squares = {c["kind"]: c["users"] for c in serial["computations"]
               if any("_square" in user for user in c["users"])}  # fmt: skip
    assert squares == {
        "jit": ["test_mix.py::test_jit_square"],
        "eager": ["test_mix.py::test_eager_square"],
    }
    for found in (serial, spread):
        found["seen"].pop("calls")
    assert without_timings(spread) == without_timings(serial)
