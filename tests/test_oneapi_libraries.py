"""Tests of oneapi (pytest_jaxport.model.platforms) on library code.

Real library code on oneapi (issue 41): flax nnx, equinox and lineax models checked with
``jaxport.check`` for ``platforms = ["cpu", "cuda", "oneapi"]``, and a suite of their jitted
steps audited with oneapi among the platforms, serially and with ``-n 2``.

The libraries are not pytest-jaxport's dependencies: each test skips, naming the package it
needs, where it is absent (``tests/test_audit_libraries.py``'s way). A JAX that lowers for
oneapi (0.12+) is needed; older JAX refuses oneapi (``tests/test_oneapi.py``). Which oneMKL
solver each lineax solve calls is asked of JAX itself (its oneapi lowering of the same
function), never written out here.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from typing import Any

import pytest

from pytest_jaxport.model.platforms import DESCRIPTIONS, release
from tests.helpers import run_json

NEEDED = DESCRIPTIONS["oneapi"].requires_jax or "0"
INSTALLED = importlib.metadata.version("jax")

pytestmark = [
    pytest.mark.skipif(
        release(INSTALLED) < release(NEEDED),
        reason=f"oneapi's counts need jax {NEEDED}+, found {INSTALLED}",
    ),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

PROJECT = '[tool.jaxport]\nplatforms = ["cpu", "cuda", "oneapi"]\n'

MODELS = """
import equinox as eqx, jax, jax.numpy as jnp, lineax as lx, pytest
from flax import nnx

class CNN(nnx.Module):
    def __init__(self, rngs):
        self.conv = nnx.Conv(3, 8, (3, 3), rngs=rngs)
        self.dense = nnx.Linear(8 * 8 * 8, 4, rngs=rngs)

    def __call__(self, x):
        return self.dense(nnx.relu(self.conv(x)).reshape(x.shape[0], -1))

@pytest.mark.portable
def test_flax_nnx(jaxport):
    graphdef, state = nnx.split(CNN(nnx.Rngs(0)))
    def forward(state, x):
        return nnx.merge(graphdef, state)(x)
    jaxport.check(forward, state, jnp.ones((2, 8, 8, 3)), name="nnx")

@pytest.mark.portable
def test_equinox_conv(jaxport):
    conv = eqx.nn.Conv2d(3, 4, 3, key=jax.random.key(0))
    jaxport.check(lambda m, x: jax.vmap(m)(x), conv, jnp.ones((2, 3, 8, 8)), name="equinox")

A = jnp.eye(6) * 3.0 + 0.1

def solve_with(solver):
    tags = lx.positive_semidefinite_tag if solver == "Cholesky" else ()
    operator = lx.MatrixLinearOperator(A, tags)
    return lambda b: lx.linear_solve(operator, b, getattr(lx, solver)()).value

SOLVERS = ["LU", "QR", "Cholesky", "SVD"]

@pytest.mark.portable
@pytest.mark.parametrize("solver", SOLVERS)
def test_lineax(jaxport, solver):
    jaxport.check(solve_with(solver), jnp.ones(6), name=f"lineax-{solver}")
"""


def _emitted_solvers() -> dict[str, set[str]]:
    """The oneMKL solver targets JAX emits lowering each lineax solve for oneapi (equinox's
    error_if, a host callback, made inert: JAX lowers no callback for a backend it is not
    running on)."""
    import jax.numpy as jnp

    from pytest_jaxport._jax.callbacks import inert

    namespace: dict[str, Any] = {}
    exec(MODELS.replace("@pytest.mark", "#"), namespace)  # the same functions the suite checks
    found = {}
    for solver in namespace["SOLVERS"]:
        lowered = namespace["jax"].jit(namespace["solve_with"](solver)).trace(jnp.ones(6))
        text = inert(lowered).lower(lowering_platforms=("oneapi",)).as_text()
        found[solver] = set(re.findall(r"oneapisolver_\w+", text))
    return found


def test_flax_nnx_equinox_and_lineax_models_are_checked_on_oneapi(
    pytester: pytest.Pytester,
) -> None:
    """An nnx conv net and an equinox convolution count oneDNN's convolution (and gemm);
    each lineax solve (LU, QR, Cholesky, SVD) counts the oneMKL solver JAX emits for it
    (``oneapisolver_getrf_ffi``, ``geqrf``, ``potrf``, ``gesvd``), and equinox's error_if
    inside it lowers as meta, never a failure."""
    for package in ("flax.nnx", "equinox", "lineax"):
        pytest.importorskip(package, reason=f"needs {package.split('.')[0]} installed")
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_models=MODELS)
    result, report = run_json(pytester)
    result.assert_outcomes(passed=6)
    checks = {c["name"]: c["platforms"]["oneapi"] for t in report["tests"] for c in t["checks"]}
    assert all(c["lowered"] is not None for c in checks.values()), checks

    def kinds(name: str) -> set[tuple[str, str]]:
        return {(k["library"], k["kind"]) for k in checks[name]["lowered"]["kernels"]}

    assert kinds("nnx") == {("onednn", "convolution"), ("onednn", "gemm")}
    assert kinds("equinox") == {("onednn", "convolution")}
    emitted = _emitted_solvers()
    for solver, lapack in (("LU", "getrf"), ("QR", "geqrf"), ("Cholesky", "potrf"),
                           ("SVD", "gesvd")):  # fmt: skip
        lowered = checks[f"lineax-{solver}"]["lowered"]
        counted = {k["name"] for k in lowered["kernels"] if k["name"].startswith("oneapisolver_")}
        assert counted == emitted[solver], solver
        assert any(lapack in name for name in counted), (solver, counted)
        for kernel in lowered["kernels"]:
            if kernel["name"] in counted:
                assert (kernel["library"], kernel["kind"]) == ("onemkl", "solver")
        assert lowered["meta"] > 0  # equinox's error_if: a host callback, meta
    totals = report["summary"]["platforms"]["oneapi"]
    assert totals["lowered"] == 6
    assert totals["failed_to_lower"] == 0
    assert set(totals["libraries"]) >= {"onednn", "onemkl"}


STEPS = """
import equinox as eqx, jax, jax.numpy as jnp, lineax as lx, optax
from flax import nnx

def test_nnx_train_step():
    model = nnx.Linear(8, 4, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    assert step(model, optimizer, jnp.ones((2, 8))).shape == ()

def test_equinox_mlp():
    mlp = eqx.nn.MLP(8, 4, 16, 2, key=jax.random.key(1))
    forward = eqx.filter_jit(lambda m, x: jax.vmap(m)(x))
    assert forward(mlp, jnp.ones((3, 8))).shape == (3, 4)

def test_lineax_lu_solve():
    operator = lx.MatrixLinearOperator(jnp.eye(4) * 2.0 + 0.1)
    solve = jax.jit(lambda b: lx.linear_solve(operator, b, lx.LU()).value)
    assert solve(jnp.ones(4)).shape == (4,)

def test_lineax_cholesky_solve():
    operator = lx.MatrixLinearOperator(jnp.eye(4) * 2.0, lx.positive_semidefinite_tag)
    solve = jax.jit(lambda b: lx.linear_solve(operator, b, lx.Cholesky()).value)
    assert solve(jnp.ones(4)).shape == (4,)
"""


def _audit(pytester: pytest.Pytester, *args: str) -> dict[str, Any]:
    result = pytester.runpytest_subprocess(
        "--jaxport-audit", "--jaxport-report=r.json", "-p", "no:cacheprovider", *args
    )
    result.assert_outcomes(passed=4)
    audit: dict[str, Any] = json.loads((pytester.path / "r.json").read_text())["audit"]
    audit["seen"].pop("calls")  # each worker's first call of a shared jit is its own miss
    return audit


@pytest.mark.slow
def test_a_real_library_suite_audited_with_oneapi_is_the_same_serial_and_with_n2(
    pytester: pytest.Pytester,
) -> None:
    """flax nnx, equinox and lineax steps as their users jit them, audited for cpu, cuda
    and oneapi: oneapi counts oneMKL's LU and Cholesky and oneDNN's gemms, and the audit
    serial, ``-n 0`` and ``-n 2`` is one and the same."""
    for package in ("flax.nnx", "equinox", "lineax", "optax", "xdist"):
        pytest.importorskip(package, reason=f"needs {package.split('.')[0]} installed")
    from pytest_jaxport.report.files import without_timings

    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_steps=STEPS)
    audits = [without_timings(_audit(pytester, *args)) for args in ([], ["-n", "0"], ["-n", "2"])]
    assert audits[1] == audits[0]
    assert audits[2] == audits[0]
    oneapi = audits[0]["summary"]["platforms"]["oneapi"]
    assert oneapi["failed_to_lower"] == 0
    names = {
        k["name"]
        for c in audits[0]["computations"]
        for k in (c["platforms"]["oneapi"]["lowered"] or {}).get("kernels", [])
    }
    assert {"oneapisolver_getrf_ffi", "oneapisolver_potrf_ffi"} <= names
    assert oneapi["libraries"]["onednn"] > 0
    assert oneapi["libraries"]["onemkl"] >= 2
