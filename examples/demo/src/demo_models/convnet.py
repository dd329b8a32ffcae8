"""A small convolutional classifier: two 3x3 convs (NHWC), pooling, a dense head."""

from __future__ import annotations

import jax
import jax.numpy as jnp

_DIMS = ("NHWC", "HWIO", "NHWC")


def init_convnet(
    key: jax.Array, in_channels: int = 3, width: int = 8, classes: int = 10
) -> dict[str, jax.Array]:
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "conv1": jax.random.normal(k1, (3, 3, in_channels, width)) / jnp.sqrt(9 * in_channels),
        "conv2": jax.random.normal(k2, (3, 3, width, 2 * width)) / jnp.sqrt(9 * width),
        "dense": jax.random.normal(k3, (2 * width, classes)) / jnp.sqrt(2 * width),
        "bias": jnp.zeros((classes,)),
    }


def _conv(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.lax.conv_general_dilated(
        x, w, window_strides=(1, 1), padding="SAME", dimension_numbers=_DIMS
    )


def _avg_pool_2x2(x: jax.Array) -> jax.Array:
    summed = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return summed / 4.0


def convnet(params: dict[str, jax.Array], images: jax.Array) -> jax.Array:
    """Logits for ``images`` of shape ``(batch, height, width, in_channels)``."""
    x = jax.nn.relu(_conv(images, params["conv1"]))
    x = _avg_pool_2x2(x)
    x = jax.nn.relu(_conv(x, params["conv2"]))
    x = jnp.mean(x, axis=(1, 2))  # global average pool -> (batch, 2 * width)
    return x @ params["dense"] + params["bias"]
