"""A run's outputs as host arrays keyed by their path (:func:`to_outputs`), a typed PRNG key
as its data and implementation (:func:`key_impl`).

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from pytest_jaxport.model.compare import Leaf, Outputs

if TYPE_CHECKING:
    import jax


def to_outputs(value: object) -> Outputs:
    """Flatten a pytree of arrays into host arrays keyed by their path."""
    import jax

    flat, treedef = jax.tree_util.tree_flatten_with_path(value)
    leaves = tuple(_host_leaf(jax.tree_util.keystr(path), leaf) for path, leaf in flat)
    return Outputs(structure=str(treedef), leaves=leaves)


def _host_leaf(path: str, value: object) -> Leaf:
    """One output leaf on the host; a typed PRNG key as its data and implementation."""
    impl = key_impl(value)
    if impl is None:
        return Leaf(path=path, array=np.asarray(value))
    import jax

    return Leaf(
        path=path, array=np.asarray(jax.random.key_data(cast("jax.Array", value))), key_impl=impl
    )


def key_impl(value: object) -> str | None:
    """The implementation of a typed PRNG key array (``threefry2x32``), else ``None``."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or isinstance(dtype, np.dtype):  # numpy's (and ml_dtypes'): not keys
        return None
    import jax
    import jax.numpy as jnp

    if not jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    return str(jax.random.key_impl(cast("jax.Array", value)))  # a key array: its dtype says
