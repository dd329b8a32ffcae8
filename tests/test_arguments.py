"""What ``jaxport.check``'s arguments mean to JAX (``pytest_jaxport._jax.arguments``):
abstract leaves (``jax.ShapeDtypeStruct``) are traced like arrays, never held static, and
named by path (issue 56)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pytest_jaxport._jax.arguments import abstract_leaves, prepare
from pytest_jaxport._jax.tracing import output_shapes, trace


def _product(a: jax.Array, b: jax.Array, *, scale: float = 1.0) -> jax.Array:
    return (a @ b) * scale


def test_an_abstract_leaf_is_traced_not_held_static() -> None:
    """A ``ShapeDtypeStruct`` is hashable: without its own rule it would be held static (and
    the function called with it). It is traced, as ``jax.jit(fn).lower`` takes it."""
    spec = jax.ShapeDtypeStruct((8, 4), jnp.float32)
    call = prepare(_product, (np.ones((3, 8), np.float32), spec), {"scale": 2.0}, name="p")
    traced = trace(call.fn, call.args, call.kwargs)
    assert [v.aval.shape for v in traced.jaxpr.jaxpr.invars] == [(3, 8), (8, 4)]
    assert abstract_leaves(call.args, call.kwargs) == ("args[1]",)


def test_abstract_leaves_are_named_by_their_path_in_pytrees() -> None:
    spec = jax.ShapeDtypeStruct((4,), jnp.bfloat16)
    params = {"w": spec, "b": np.zeros(4)}
    assert abstract_leaves(((params, spec),), {"x": spec}) == (
        "args[0][0]['w']", "args[0][1]", "kwargs['x']")  # fmt: skip
    assert abstract_leaves((np.zeros(3),), {}) == ()


def test_the_outputs_of_an_abstract_trace_are_what_eval_shape_gives() -> None:
    spec = jax.ShapeDtypeStruct((40960, 40960), jnp.float32)

    def both(a: jax.Array, b: jax.Array) -> dict[str, jax.Array]:
        return {"product": a @ b, "norm": jnp.sum(a * a)}

    found = output_shapes(trace(both, (spec, spec), {}))
    assert found == jax.eval_shape(both, spec, spec)
    assert found["product"].shape == (40960, 40960)
