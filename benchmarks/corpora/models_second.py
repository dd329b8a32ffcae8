"""A second benchmark suite: models written after the plugin's optimisations, never used to tune
them, so the suite-overhead ratio can be checked on functions it was not fitted to.

Same conventions as models.py: every ``make_*`` returns ``(fn, args)`` built with NumPy (so the
test's set-up compiles nothing), and ``CASES`` lists the suite. It leans towards what the first
suite lacks: tiny functions (where a check's fixed cost weighs most), recurrent ``scan``s,
gathers, per-example gradients via ``vmap``, random numbers, sorting and an eigensolver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _normal(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def tiny_elementwise(x: jax.Array) -> jax.Array:
    return jnp.tanh(x) * 2.0 + 1.0


def softmax_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))


def embedding_pool(table: jax.Array, ids: jax.Array, w: jax.Array) -> jax.Array:
    """Bag of embeddings: gather, mean over the bag, one dense layer."""
    return jnp.mean(table[ids], axis=1) @ w


def gru(params: dict[str, jax.Array], xs: jax.Array) -> jax.Array:
    """A GRU over the sequence axis with ``lax.scan``; the last hidden state."""

    def cell(h: jax.Array, x: jax.Array) -> tuple[jax.Array, None]:
        z = jax.nn.sigmoid(x @ params["wz"] + h @ params["uz"])
        r = jax.nn.sigmoid(x @ params["wr"] + h @ params["ur"])
        n = jnp.tanh(x @ params["wn"] + (r * h) @ params["un"])
        return (1 - z) * n + z * h, None

    h0 = jnp.zeros((xs.shape[1], params["uz"].shape[0]), xs.dtype)
    return lax.scan(cell, h0, xs)[0]


def causal_attention(x: jax.Array, wqkv: jax.Array, heads: int = 4) -> jax.Array:
    b, t, d = x.shape
    q, k, v = jnp.split(x @ wqkv, 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
    mask = jnp.tril(jnp.ones((t, t), bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, d)


def per_example_grads(w: jax.Array, xs: jax.Array, ys: jax.Array) -> jax.Array:
    def loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.sum((jnp.tanh(x @ w) - y) ** 2)

    return jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)


def adam_update(params: dict[str, jax.Array], grads: dict[str, jax.Array], m: Any, v: Any):
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    params = jax.tree_util.tree_map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, m, v


def conv_batchnorm(x: jax.Array, w: jax.Array, gamma: jax.Array, beta: jax.Array) -> jax.Array:
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    mean, var = jnp.mean(y, axis=(0, 1, 2)), jnp.var(y, axis=(0, 1, 2))
    return jax.nn.relu((y - mean) / jnp.sqrt(var + 1e-5) * gamma + beta)


def top_k_sampling_prep(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    values, indices = lax.top_k(logits, 16)
    probs = jax.nn.softmax(values, axis=-1)
    return jnp.cumsum(jnp.sort(probs, axis=-1)[:, ::-1], axis=-1), indices


def dropout_mlp(key: jax.Array, x: jax.Array, w: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(jax.random.wrap_key_data(key), 0.9, x.shape)
    return jax.nn.relu(jnp.where(keep, x / 0.9, 0.0) @ w)


def pca(x: jax.Array) -> jax.Array:
    centred = x - jnp.mean(x, axis=0)
    _, vectors = jnp.linalg.eigh(centred.T @ centred / x.shape[0])
    return centred @ vectors[:, -4:]


def upsample_decoder(z: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    y = jax.image.resize(jax.nn.relu(z @ w1), (z.shape[0], 16, 16, z.shape[3]), "nearest")
    return jax.nn.sigmoid(
        lax.conv_general_dilated(y, w2, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    )


def _gru_params(d_in: int, d: int) -> dict[str, np.ndarray]:
    names = ("wz", "wr", "wn", "uz", "ur", "un")
    return {
        n: _normal(i, d_in if n.startswith("w") else d, d, scale=0.2) for i, n in enumerate(names)
    }


def _adam_args() -> tuple[Any, ...]:
    shapes = {"w1": (64, 128), "b1": (128,), "w2": (128, 10)}
    tree = lambda seed: {k: _normal(seed + i, *s) for i, (k, s) in enumerate(shapes.items())}  # noqa: E731
    return tree(0), tree(10), tree(20), {k: np.abs(v) for k, v in tree(30).items()}


CASES: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "tiny_elementwise": lambda: (tiny_elementwise, (_normal(0, 8),)),
    "softmax_cross_entropy": lambda: (
        softmax_cross_entropy,
        (_normal(1, 32, 10), np.arange(32, dtype=np.int32) % 10),
    ),
    "embedding_pool": lambda: (
        embedding_pool,
        (
            _normal(2, 1000, 32),
            np.random.default_rng(2).integers(0, 1000, (16, 12)).astype(np.int32),
            _normal(3, 32, 8),
        ),
    ),
    "gru": lambda: (gru, (_gru_params(16, 32), _normal(4, 20, 8, 16))),
    "causal_attention": lambda: (
        causal_attention,
        (_normal(5, 2, 32, 64), _normal(6, 64, 192, scale=0.1)),
    ),
    "per_example_grads": lambda: (
        per_example_grads,
        (_normal(7, 16, 4, scale=0.3), _normal(8, 32, 16), _normal(9, 32, 4)),
    ),
    "adam_update": lambda: (adam_update, _adam_args()),
    "conv_batchnorm": lambda: (
        conv_batchnorm,
        (
            _normal(10, 4, 16, 16, 3),
            _normal(11, 3, 3, 3, 16, scale=0.2),
            np.ones(16, np.float32),
            np.zeros(16, np.float32),
        ),
    ),
    "top_k_sampling_prep": lambda: (top_k_sampling_prep, (_normal(12, 8, 512),)),
    "dropout_mlp": lambda: (
        dropout_mlp,
        (np.array([0, 42], np.uint32), _normal(13, 16, 64), _normal(14, 64, 32, scale=0.1)),
    ),
    "pca": lambda: (pca, (_normal(15, 128, 16),)),
    "upsample_decoder": lambda: (
        upsample_decoder,
        (_normal(16, 4, 8, 8, 4), _normal(17, 4, 4, scale=0.3), _normal(18, 3, 3, 4, 1, scale=0.3)),
    ),
}
