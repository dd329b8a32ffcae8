"""Multi-head self-attention written with einsums."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def init_attention(key: jax.Array, d_model: int = 32, heads: int = 4) -> dict[str, jax.Array]:
    head_dim = d_model // heads
    kq, kk, kv, ko = jax.random.split(key, 4)
    scale = 1.0 / jnp.sqrt(d_model)
    return {
        "wq": jax.random.normal(kq, (d_model, heads, head_dim)) * scale,
        "wk": jax.random.normal(kk, (d_model, heads, head_dim)) * scale,
        "wv": jax.random.normal(kv, (d_model, heads, head_dim)) * scale,
        "wo": jax.random.normal(ko, (heads, head_dim, d_model)) * scale,
    }


def multi_head_attention(params: dict[str, jax.Array], x: jax.Array, mask: jax.Array) -> jax.Array:
    """Self-attention over ``x`` ``(batch, seq, d_model)``; ``mask`` ``(seq, seq)`` is True
    where a query may attend to a key (e.g. a causal mask)."""
    q = jnp.einsum("bsd,dhk->bhsk", x, params["wq"])
    k = jnp.einsum("bsd,dhk->bhsk", x, params["wk"])
    v = jnp.einsum("bsd,dhk->bhsk", x, params["wv"])
    logits = jnp.einsum("bhqk,bhsk->bhqs", q, k) / jnp.sqrt(q.shape[-1]).astype(x.dtype)
    logits = jnp.where(mask, logits, jnp.finfo(x.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)
    context = jnp.einsum("bhqs,bhsk->bhqk", weights, v)
    return jnp.einsum("bhqk,hkd->bqd", context, params["wo"])
