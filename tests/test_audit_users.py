"""Every test that runs a computation is its user (issue 43, item 1), serially and under
pytest-xdist alike, whether or not JAX traced it again.

Real JAX, a real suite through pytester: each test builds a new ``jax.jit`` of one function
and calls it with the same types, so JAX reuses its trace and the dispatch cache it shares
between jits of one function.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_jaxport.report.schema import without_timings

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
