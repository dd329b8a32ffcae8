"""A linear feature projection: ``x @ w`` for a batch of feature vectors."""

from __future__ import annotations

import jax


def init_features(key: jax.Array, features: int, width: int = 128) -> jax.Array:
    """LeCun-normal weights of shape ``(features, width)``."""
    return jax.random.normal(key, (features, width)) / features**0.5


def feature_layer(w: jax.Array, x: jax.Array) -> jax.Array:
    """The projection of ``x``, of shape ``(batch, features)``, to ``width`` columns."""
    return x @ w
