"""Tests of pytest_jaxport.fixture and _jax.arguments on library code.

Real JAX code as its users write it, through pytester: typed PRNG keys in arguments,
outputs and model state; functions already jitted with static arguments; flax (nnx and
linen), equinox, haiku and optax models as the checked function and as its arguments.

A test that needs a library skips, saying so, where it is not installed (``.[test]``
installs them all).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from helpers import esc, run_json

from pytest_jaxport.report.outputs import INDEX_KEY, load_outputs

PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject=PROJECT)
    return pytester


def needs(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed")


def checks_of(report: dict[str, Any], test: str) -> dict[str, dict[str, Any]]:
    (entry,) = (t for t in report["tests"] if t["nodeid"].endswith(f"::{test}"))
    return {c["name"]: c for c in entry["checks"]}


def lowered_everywhere(check: dict[str, Any]) -> bool:
    platforms = check["platforms"]
    return set(platforms) == {"cpu", "cuda", "rocm", "tpu"} and all(
        p["lowered"] is not None and p["error"] is None for p in platforms.values()
    )


def saved(project: pytest.Pytester, check: dict[str, Any], platform: str = "cpu") -> Any:
    return load_outputs(project.path / check["platforms"][platform]["outputs"])


# -- typed PRNG keys --------------------------------------------------------------------------


@pytest.mark.slow
def test_typed_key_outputs_are_compared_and_saved_without_pickle(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_keys="""
        import jax
        import pytest

        def sample(key):
            key, sub = jax.random.split(key)
            return {"key": key, "x": jax.random.normal(sub, (3,))}

        @pytest.mark.portable
        def test_threefry(jaxport):
            out = jaxport.check(sample, jax.random.key(0))
            assert jax.dtypes.issubdtype(out["key"].dtype, jax.dtypes.prng_key)

        @pytest.mark.portable
        def test_rbg(jaxport):
            jaxport.check(sample, jax.random.key(0, impl="rbg"))
        """
    )
    result, report = run_json(project, "--jaxport-save-outputs=saved")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*cannot be converted to a NumPy array*")
    for test, impl in (("test_threefry", "threefry2x32"), ("test_rbg", "rbg")):
        check = checks_of(report, test)["sample"]
        assert lowered_everywhere(check)
        assert check["platforms"]["cpu"]["executed"]
        leaves = {leaf.path: leaf for leaf in saved(project, check).leaves}
        assert leaves["['key']"].key_impl == impl
        assert leaves["['x']"].key_impl is None
        # What was saved is the key's data: JAX rebuilds the very key from it.
        key, _ = jax.random.split(jax.random.key(0, impl=impl))
        rebuilt = jax.random.wrap_key_data(leaves["['key']"].array, impl=impl)
        np.testing.assert_array_equal(jax.random.key_data(rebuilt), jax.random.key_data(key))
        # A plain .npz of numeric arrays: numpy reads it with pickle refused.
        path = project.path / check["platforms"]["cpu"]["outputs"]
        with np.load(path, allow_pickle=False) as npz:
            index = json.loads(npz[INDEX_KEY].tobytes())
            assert [e.get("key_impl") for e in index["leaves"]] == [impl, None]
            assert npz["leaf_0"].dtype == np.uint32
        assert zipfile.is_zipfile(path)


@pytest.mark.slow
def test_vmap_with_a_key_argument_batches_split_keys(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_vmap="""
        import jax
        import jax.numpy as jnp
        import pytest

        def noisy(key, x):
            return x + jax.random.normal(key, x.shape)

        @pytest.mark.portable
        def test_noisy(jaxport):
            jaxport.check(noisy, jax.random.key(7), jnp.ones(3), transforms=["vmap", "grad"])
        """
    )
    result, report = run_json(project, "--jaxport-save-outputs=saved")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*does not accept dtypes*")
    checks = checks_of(report, "test_noisy")
    assert set(checks) == {"noisy", "noisy[vmap]", "noisy[grad]"}
    assert all(lowered_everywhere(c) for c in checks.values())
    # The batch holds the key split in two, as jax.random.split splits it.
    (batched,) = saved(project, checks["noisy[vmap]"]).leaves
    keys = jax.random.split(jax.random.key(7), 2)
    others = np.stack([np.ones(3), np.ones(3) * 0.5 + 0.25]).astype(np.float32)
    expected = jax.vmap(lambda k, x: x + jax.random.normal(k, x.shape))(keys, others)
    np.testing.assert_allclose(batched.array, np.asarray(expected), rtol=1e-6)
    # The gradient is taken with respect to x only (a key is not differentiable).
    (grad,) = saved(project, checks["noisy[grad]"]).leaves
    assert grad.path == "['args[1]']"


@pytest.mark.slow
def test_flax_nnx_dropout_state_with_rngs_is_an_output(project: pytest.Pytester) -> None:
    needs("flax.nnx")
    project.makepyfile(
        test_nnx="""
        import jax.numpy as jnp
        import pytest
        from flax import nnx

        class Block(nnx.Module):
            def __init__(self, rngs):
                self.linear = nnx.Linear(8, 4, rngs=rngs)
                self.dropout = nnx.Dropout(0.5, rngs=rngs)

            def __call__(self, x):
                return self.dropout(self.linear(x))

        def train_step(graphdef, state, x):
            model = nnx.merge(graphdef, state)
            y = model(x)
            return y, nnx.state(model)   # the Rngs' key and count advanced

        @pytest.mark.portable
        def test_block(jaxport):
            graphdef, state = nnx.split(Block(nnx.Rngs(0)))
            y, state = jaxport.check(lambda s, x: train_step(graphdef, s, x), state,
                                     jnp.ones((2, 8)))
            assert y.shape == (2, 4)
        """
    )
    result, report = run_json(project, "--jaxport-save-outputs=saved")
    result.assert_outcomes(passed=1)
    (check,) = checks_of(report, "test_block").values()
    assert lowered_everywhere(check)
    keys = [leaf for leaf in saved(project, check).leaves if leaf.key_impl is not None]
    assert [leaf.key_impl for leaf in keys] == ["threefry2x32"]
    assert "rngs" in keys[0].path


# -- functions already jitted with static arguments ------------------------------------------


@pytest.mark.slow
def test_jitted_function_keeps_its_static_arguments(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_static="""
        import functools
        import jax
        import jax.numpy as jnp
        import pytest

        @functools.partial(jax.jit, static_argnames=("n", "mode"))
        def power(x, n, mode="sum"):
            y = x
            for _ in range(n - 1):   # a Python loop: n must be static
                y = y @ x
            return y.sum() if mode == "sum" else y

        @pytest.mark.portable
        def test_by_keyword(jaxport):
            out = jaxport.check(power, jnp.eye(4) * 2, n=3, mode="sum", transforms=["grad", "vmap"])
            assert float(out) == 32.0

        @pytest.mark.portable
        def test_by_position(jaxport):
            out = jaxport.check(power, jnp.eye(4) * 2, 2, "full")
            assert out.shape == (4, 4)

        @pytest.mark.portable
        def test_unhashable_static(jaxport):
            jaxport.check(power, jnp.eye(4), n=[2])
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=2, failed=1)
    checks = checks_of(report, "test_by_keyword")
    assert set(checks) == {"power", "power[grad]", "power[vmap]"}
    for name, dots in (("power", 2), ("power[grad]", None), ("power[vmap]", 2)):
        assert lowered_everywhere(checks[name])
        cuda = checks[name]["platforms"]["cuda"]["lowered"]
        if dots is not None:  # two matmuls: n = 3 was honoured, not traced
            assert cuda["libraries"] == {"cublas": dots}
    (position,) = checks_of(report, "test_by_position").values()
    assert position["platforms"]["cuda"]["lowered"]["libraries"] == {"cublas": 1}
    result.stdout.fnmatch_lines(
        [esc("*jaxport.check('power'): kwargs['n'] is a static argument of the jitted function "
             "(its static_argnums/static_argnames) but list [2] is not hashable; pass a "
             "hashable value*")]
    )  # fmt: skip
    result.stdout.no_fnmatch_line("*Non-hashable static arguments*")


# -- library models ---------------------------------------------------------------------------


@pytest.mark.slow
def test_equinox_module_as_the_checked_function_and_as_an_argument(
    project: pytest.Pytester,
) -> None:
    needs("equinox")
    project.makepyfile(
        test_eqx="""
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        import pytest

        mlp = eqx.nn.MLP(4, 2, 8, depth=2, key=jax.random.key(0))

        @pytest.mark.portable
        def test_module(jaxport):
            out = jaxport.check(mlp, jnp.ones(4), transforms=["grad", "vmap"])
            assert out.shape == (2,)

        @pytest.mark.portable
        def test_module_argument(jaxport):
            # Dropout keeps p (a float) and inference (a bool) as settings: held static.
            dropout = eqx.nn.Dropout(0.5, inference=True)
            out = jaxport.check(lambda m, d, x: d(m(x)), mlp, dropout, jnp.ones(4))
            assert out.shape == (2,)

        @pytest.mark.portable
        def test_partitioned(jaxport):
            params, static = eqx.partition(mlp, eqx.is_array)
            jaxport.check(lambda p, x: eqx.combine(p, static)(x), params, jnp.ones(4))
        """
    )
    result, report = run_json(project, "--jaxport-save-outputs=saved")
    result.assert_outcomes(passed=3)
    result.stdout.no_fnmatch_line("*not an array*")
    module = checks_of(report, "test_module")
    assert set(module) == {"MLP", "MLP[grad]", "MLP[vmap]"}
    for name in ("test_module", "test_module_argument", "test_partitioned"):
        for check in checks_of(report, name).values():
            assert lowered_everywhere(check)
    # Three matmuls per call, on every filtering of the same model.
    for name in ("test_module", "test_module_argument", "test_partitioned"):
        check = next(iter(checks_of(report, name).values()))
        assert check["platforms"]["cuda"]["lowered"]["libraries"] == {"cublas": 3}
    # The model's arrays are arguments: its gradient is taken with respect to them, by name.
    grads = {leaf.path for leaf in saved(project, module["MLP[grad]"]).leaves}
    assert "['fn.layers[0].weight']" in grads
    assert "['args[0]']" in grads
    assert len(grads) == 7  # 3 weights, 3 biases, the input


@pytest.mark.slow
def test_flax_nnx_module_checked_directly_and_split(project: pytest.Pytester) -> None:
    nnx = needs("flax.nnx")
    module_is_pytree = bool(jax.tree_util.tree_leaves(nnx.Linear(2, 2, rngs=nnx.Rngs(0))))
    project.makepyfile(
        test_nnx="""
        import jax.numpy as jnp
        import pytest
        from flax import nnx

        class MLP(nnx.Module):
            def __init__(self, rngs):
                self.hidden = nnx.Linear(8, 16, rngs=rngs)
                self.out = nnx.Linear(16, 4, rngs=rngs)

            def __call__(self, x):
                return self.out(nnx.relu(self.hidden(x)))

        @pytest.mark.portable
        def test_split(jaxport):
            graphdef, state = nnx.split(MLP(nnx.Rngs(0)))
            jaxport.check(lambda s, x: nnx.merge(graphdef, s)(x), state, jnp.ones((2, 8)),
                          transforms=["grad"])

        @pytest.mark.portable
        def test_module(jaxport):
            jaxport.check(MLP(nnx.Rngs(0)), jnp.ones((2, 8)), transforms=["grad"])
        """
    )
    result, report = run_json(project, "-k", "test_split or test_module" if module_is_pytree
                              else "test_split")  # fmt: skip
    result.assert_outcomes(passed=2 if module_is_pytree else 1)
    split = checks_of(report, "test_split")
    assert all(lowered_everywhere(c) for c in split.values())
    assert split["lambda"]["platforms"]["cuda"]["lowered"]["libraries"] == {"cublas": 2}
    if module_is_pytree:  # flax releases where nnx modules are pytrees (not 0.10)
        module = checks_of(report, "test_module")
        assert set(module) == {"MLP", "MLP[grad]"}
        assert all(lowered_everywhere(c) for c in module.values())
        assert module["MLP"]["platforms"]["cuda"]["lowered"]["libraries"] == {"cublas": 2}


@pytest.mark.slow
def test_flax_linen_apply_with_a_dropout_key(project: pytest.Pytester) -> None:
    needs("flax.linen")
    project.makepyfile(
        test_linen="""
        import flax.linen as nn
        import jax
        import jax.numpy as jnp
        import pytest

        class Model(nn.Module):
            @nn.compact
            def __call__(self, x, train):
                x = nn.Dense(16)(x)
                x = nn.Dropout(0.5, deterministic=not train)(x)
                return nn.Dense(4)(x)

        @pytest.mark.portable
        def test_train(jaxport):
            model = Model()
            x = jnp.ones((2, 8))
            params = model.init(jax.random.key(0), x, train=False)
            out = jaxport.check(model.apply, params, x, train=True,
                                rngs={"dropout": jax.random.key(1)})
            assert out.shape == (2, 4)
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1)
    (check,) = checks_of(report, "test_train").values()
    assert lowered_everywhere(check)
    assert check["platforms"]["cuda"]["lowered"]["libraries"] == {"cublas": 2}


@pytest.mark.slow
def test_haiku_transform_and_apply_with_an_rng(project: pytest.Pytester) -> None:
    needs("haiku")
    project.makepyfile(
        test_haiku="""
        import haiku as hk
        import jax
        import jax.numpy as jnp
        import pytest

        def forward(x):
            x = hk.nets.MLP([16, 4])(x)
            return hk.dropout(hk.next_rng_key(), 0.5, x)

        @pytest.mark.portable
        def test_apply(jaxport):
            model = hk.transform(forward)
            x = jnp.ones((2, 8))
            params = model.init(jax.random.key(0), x)
            out = jaxport.check(model.apply, params, jax.random.key(1), x)
            assert out.shape == (2, 4)
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1)
    (check,) = checks_of(report, "test_apply").values()
    assert lowered_everywhere(check)
    assert check["platforms"]["cuda"]["lowered"]["libraries"] == {"cublas": 2}


@pytest.mark.slow
def test_optax_training_step(project: pytest.Pytester) -> None:
    needs("optax")
    project.makepyfile(
        test_optax="""
        import jax
        import jax.numpy as jnp
        import optax
        import pytest

        def loss(params, x):
            return jnp.sum(jnp.tanh(x @ params["w"] + params["b"]) ** 2)

        @pytest.mark.portable
        def test_step(jaxport):
            tx = optax.adamw(1e-3)
            params = {"w": jnp.ones((8, 4)) / 8, "b": jnp.zeros(4)}
            state = tx.init(params)

            def step(params, state, x):
                grads = jax.grad(loss)(params, x)
                updates, state = tx.update(grads, state, params)
                return optax.apply_updates(params, updates), state

            new_params, new_state = jaxport.check(step, params, state, jnp.ones((2, 8)))
            assert new_params["w"].shape == (8, 4)
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1)
    (check,) = checks_of(report, "test_step").values()
    assert lowered_everywhere(check)
    assert check["platforms"]["cuda"]["lowered"]["libraries"] == {"cublas": 2}


# -- where a census points --------------------------------------------------------------------


DEEP_LIBRARY = """
import jax.numpy as jnp


def layer(x, depth):
    if depth == 0:
        return jnp.dot(x, x.T)
    return layer(x, depth - 1)
"""


def test_a_deep_library_stack_still_points_at_the_users_line(project: pytest.Pytester) -> None:
    """Sixteen frames inside an installed package between the user's line and the op: more
    than JAX 0.6 keeps in a location by default, so the plugin keeps more."""
    package = project.path / "venv" / "lib" / "site-packages" / "deeplib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(DEEP_LIBRARY)
    project.makepyfile(
        test_deep="""
        import sys
        from pathlib import Path

        import jax.numpy as jnp
        import pytest

        sys.path.insert(0, str(Path(__file__).parent / "venv" / "lib" / "site-packages"))
        import deeplib

        def model(x):
            return deeplib.layer(x, 15)

        @pytest.mark.portable(max_vendor_calls=0)
        def test_deep(jaxport):
            jaxport.check(model, jnp.ones((2, 5)))
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stablehlo.dot_general (cublas) at test_deep.py:11"])
    (check,) = checks_of(report, "test_deep").values()
    (kernel,) = check["platforms"]["cuda"]["lowered"]["kernels"]
    assert kernel["location"] == "test_deep.py:11"


@pytest.mark.slow
def test_library_lines_are_shown_relative_to_site_packages(project: pytest.Pytester) -> None:
    """Compiled for cpu, an nnx Linear's dot carries the line inside flax where JAX keeps no
    call stack in the compiled program (jax 0.6): shown as ``flax/nnx/nn/linear.py``, never
    as the virtual env's absolute path; the user's line where the stack is kept."""
    needs("flax.nnx")
    project.makefile(".toml", pyproject=PROJECT + 'compile = ["cpu"]\n')
    project.makepyfile(
        test_linear_compiled="""
        import jax.numpy as jnp
        import pytest
        from flax import nnx

        @pytest.mark.portable
        def test_linear(jaxport):
            graphdef, state = nnx.split(nnx.Linear(64, 64, rngs=nnx.Rngs(0)))
            jaxport.check(lambda s, x: nnx.merge(graphdef, s)(x), state, jnp.ones((64, 64)))
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1)
    (check,) = checks_of(report, "test_linear").values()
    kernels = [
        k
        for result in check["platforms"].values()
        for census in (result["lowered"], result.get("compiled"))
        if census
        for k in census["kernels"]
    ]
    assert kernels
    files = {k["location"].rpartition(":")[0] for k in kernels}
    assert files <= {"test_linear_compiled.py", "flax/nnx/nn/linear.py"}, files
    assert not any(Path(f).is_absolute() for f in files)


@pytest.mark.parametrize(
    ("file", "shown"),
    [
        ("/venv/lib/python3.11/site-packages/flax/nnx/nn/linear.py", "flax/nnx/nn/linear.py"),
        ("/usr/lib/python3/dist-packages/optax/_src/alias.py", "optax/_src/alias.py"),
        ("C:\\venv\\Lib\\site-packages\\equinox\\nn\\_mlp.py", "equinox/nn/_mlp.py"),
        # a virtual env inside the project is still an installed package's file
        ("/src/proj/.venv/lib/python3.13/site-packages/haiku/_src/basic.py", "haiku/_src/basic.py"),
        ("/src/proj/tests/test_model.py", "tests/test_model.py"),
        ("/elsewhere/model.py", None),
    ],
)
def test_shown_file(file: str, shown: str | None) -> None:
    from pytest_jaxport.examine import shown_file

    assert shown_file(file, Path("/src/proj")) == shown
