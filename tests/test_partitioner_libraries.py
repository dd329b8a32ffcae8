"""Tests of pytest_jaxport.model.partitioner on library training steps.

Sharded training steps as users write them with flax (linen and nnx), equinox and optax.

Each runs through the plugin on a mesh of the suite's four host devices. The independent
count for a data-parallel step: XLA's SPMD partitioner all-reduces the gradient of every
replicated parameter once, so the cuda census has one NCCL all-reduce per parameter leaf,
each at the line of the layer that owns the parameter. Under ``shard_map`` the collectives
are the program's own: the lowered module's text counts them. The libraries are optional
(``pip install flax equinox optax``); a missing one skips its test, saying which.
"""

from __future__ import annotations

import importlib
import sys

import jax
import pytest
from helpers import run_json

pytestmark = pytest.mark.slow  # library training steps through pytester

MODELS = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH = Mesh(np.array(jax.devices()[:4]), ("data",))
REPLICATED, BATCH = NamedSharding(MESH, P()), NamedSharding(MESH, P("data"))


def batch():
    x = jax.device_put(np.linspace(0, 1, 16 * 8, dtype=np.float32).reshape(16, 8), BATCH)
    return x, jax.device_put(np.ones((16, 4), np.float32), BATCH)


def linen_adam():
    import flax.linen as nn
    import optax

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(32)(x))  # LINEN DENSE
            return nn.Dense(4)(nn.LayerNorm()(x))  # LINEN HEAD

    model, tx = MLP(), optax.adam(1e-3)
    params = jax.device_put(model.init(jax.random.key(0), jnp.ones((1, 8))), REPLICATED)

    def train_step(params, opt_state, x, y):
        grads = jax.grad(lambda p: optax.l2_loss(model.apply(p, x), y).mean())(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return train_step, (params, jax.device_put(tx.init(params), REPLICATED), *batch()), params


def nnx_sgd():
    from flax import nnx

    model = nnx.Sequential(
        nnx.Linear(8, 16, rngs=nnx.Rngs(0)), nnx.relu, nnx.Linear(16, 4, rngs=nnx.Rngs(1))
    )
    graphdef, state = nnx.split(model)
    state = jax.device_put(state, REPLICATED)

    def train_step(state, x, y):
        def loss(state):
            return jnp.mean((nnx.merge(graphdef, state)(x) - y) ** 2)  # NNX LOSS

        grads = jax.grad(loss)(state)
        return jax.tree.map(lambda p, g: p - 0.1 * g, state, grads)

    return train_step, (state, *batch()), state


def equinox_sgd():
    import equinox as eqx

    params, static = eqx.partition(eqx.nn.MLP(8, 4, 16, 2, key=jax.random.key(0)), eqx.is_array)
    params = jax.device_put(params, REPLICATED)

    def train_step(params, x, y):
        def loss(params):
            model = eqx.combine(params, static)
            return jnp.mean((jax.vmap(model)(x) - y) ** 2)  # EQX LOSS

        grads = jax.grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    return train_step, (params, *batch()), params


def optax_pjit():
    import optax

    tx = optax.sgd(0.1, momentum=0.9)
    params = jax.device_put({"w": jnp.ones((8, 4)), "b": jnp.zeros(4)}, REPLICATED)

    @jax.jit
    def train_step(params, opt_state, x, y):
        grads = jax.grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state

    opt_state = jax.device_put(tx.init(params), REPLICATED)
    return train_step, (params, opt_state, *batch()), params


def optax_shard_map():
    import optax

    tx = optax.adamw(1e-3)
    params = {"a": jnp.ones((8, 16)), "b": jnp.ones((16, 4))}

    def local(params, opt_state, x, y):
        loss = lambda p: jnp.mean((jnp.tanh(x @ p["a"]) @ p["b"] - y) ** 2)
        grads = jax.lax.pmean(jax.grad(loss)(params), "data")
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def train_step(params, opt_state, x, y):
        specs = (P(), P(), P("data"), P("data"))
        return jax.shard_map(local, mesh=MESH, in_specs=specs, out_specs=(P(), P()))(
            params, opt_state, x, y
        )

    return train_step, (params, tx.init(params), *batch()), params
"""

TESTS = """
import pytest
import models

@pytest.mark.portable
@pytest.mark.parametrize("case", {cases!r})
def test_step(jaxport, case):
    fn, args, _ = getattr(models, case)()
    jaxport.check(fn, *args, name=case)
"""

LIBRARIES = {
    "linen_adam": ("flax", "optax"),
    "nnx_sgd": ("flax",),
    "equinox_sgd": ("equinox",),
    "optax_pjit": ("optax",),
    "optax_shard_map": ("optax",),
}
DATA_PARALLEL = ("linen_adam", "nnx_sgd", "equinox_sgd", "optax_pjit")


def _available() -> list[str]:
    found = []
    for case, needs in LIBRARIES.items():
        try:
            for name in needs:
                importlib.import_module(name)
        except ImportError:
            continue
        found.append(case)
    return found


def test_library_training_steps_over_a_mesh(pytester: pytest.Pytester) -> None:
    """One inner session over every case whose libraries are installed; the outer test
    imports the same definitions for the independent counts."""
    available = _available()
    if not available:
        pytest.skip("needs flax, equinox or optax (pip install flax equinox optax)")
    pytester.makepyfile(models=MODELS, test_steps=TESTS.format(cases=available))
    pytester.syspathinsert()
    result, report = run_json(pytester)
    result.assert_outcomes(passed=len(available))
    sys.modules.pop("models", None)
    models = importlib.import_module("models")
    source = (pytester.path / "models.py").read_text().splitlines()
    steps = (pytester.path / "test_steps.py").read_text().splitlines()
    check_line = _line(steps, "jaxport.check(", "test_steps.py")
    checks = {c["name"]: c for t in report["tests"] for c in t["checks"]}
    for case in available:
        if case in DATA_PARALLEL:
            _check_data_parallel(case, checks[case], models, source, check_line)
        else:
            _check_shard_map(checks[case], models)


def _line(source: list[str], marker: str, file: str = "models.py") -> str:
    return f"{file}:{next(i for i, text in enumerate(source, 1) if marker in text)}"


def _check_data_parallel(
    case: str, check: dict, models: object, source: list[str], check_line: str
) -> None:
    *_, params = getattr(models, case)()
    leaves = len(jax.tree.leaves(params))
    cuda = check["platforms"]["cuda"]["lowered"]
    found = cuda["collectives"]["all-reduce"]
    assert (found["count"], found["inserted"]) == (leaves, leaves), case
    assert cuda["libraries"]["nccl"] == leaves, case
    for platform, library in (("rocm", "rccl"), ("tpu", "ici")):
        there = check["platforms"][platform]["lowered"]["collectives"]["all-reduce"]
        assert (there["count"], there["library"]) == (leaves, library), (case, platform)
    lines = {k["location"] for k in cuda["kernels"] if k["name"] == "spmd.all_reduce"}
    if jax.__version_info__ < (0, 7):
        # HLO metadata without stack frames: a collective needed by an op that keeps no
        # location of its own (a bias add) has only its frame inside the library, so it is
        # shown at the line that called the computation (the check's).
        assert lines, case
        assert all(line.startswith("models.py:") or line == check_line for line in lines), (
            case,
            lines,
        )
        return
    assert all(line.startswith("models.py:") for line in lines), (case, lines)
    if case == "linen_adam":  # each Dense's and the LayerNorm's parameters, at their layer
        assert lines == {_line(source, "LINEN DENSE"), _line(source, "LINEN HEAD")}


def _check_shard_map(check: dict, models: object) -> None:
    fn, args, _ = models.optax_shard_map()  # type: ignore[attr-defined]
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    own = text.count("stablehlo.all_reduce")
    cuda = check["platforms"]["cuda"]["lowered"]
    assert own >= 1
    assert cuda["collectives"]["all-reduce"] == {
        "count": own,
        "inserted": 0,
        "library": "nccl",
        "counterparts": {"rocm": "rccl", "tpu": "ici", "cpu": "xla-cpu"},
    }
    assert cuda["libraries"]["nccl"] == own
