"""A three-layer MLP with GELU activations."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def init_mlp(
    key: jax.Array, sizes: tuple[int, ...] = (32, 64, 64, 10)
) -> list[dict[str, jax.Array]]:
    """Dense layers ``sizes[0] -> sizes[1] -> ... -> sizes[-1]``, LeCun-normal weights."""
    keys = jax.random.split(key, len(sizes) - 1)
    return [
        {
            "w": jax.random.normal(k, (n_in, n_out), jnp.float32) / jnp.sqrt(n_in),
            "b": jnp.zeros((n_out,), jnp.float32),
        }
        for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]


def mlp(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    """Logits for a batch ``x`` of shape ``(batch, sizes[0])``."""
    *hidden, last = params
    for layer in hidden:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ last["w"] + last["b"]
