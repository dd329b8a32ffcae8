"""A float8 matmul, quantized the way H100 runs it (``float8_e4m3fn``, the OCP format)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

E4M3_MAX = 448.0
"""The largest finite ``float8_e4m3fn`` value: per-tensor scales map each tensor's largest
magnitude onto it."""


def quantize(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x`` as ``float8_e4m3fn`` with a per-tensor scale: ``x ~= q * scale``."""
    scale = jnp.max(jnp.abs(x)) / E4M3_MAX
    return (x / scale).astype(jnp.float8_e4m3fn), scale


def fp8_matmul(x: jax.Array, w: jax.Array, x_scale: jax.Array, w_scale: jax.Array) -> jax.Array:
    """``(x * x_scale) @ (w * w_scale)`` from float8 operands, accumulated in float32."""
    return jnp.dot(x, w, preferred_element_type=jnp.float32) * (x_scale * w_scale)
