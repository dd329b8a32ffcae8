"""Linear solves: LU-based ``solve`` and Cholesky-based ridge least squares."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg


def solve(a: jax.Array, b: jax.Array) -> jax.Array:
    """``x`` with ``a @ x == b`` (LU with partial pivoting)."""
    return jnp.linalg.solve(a, b)


def ridge_lstsq(features: jax.Array, targets: jax.Array, l2: float = 1e-3) -> jax.Array:
    """Ridge regression weights via the normal equations and a Cholesky factorisation:
    ``(X^T X + l2 I) w = X^T y``."""
    gram = features.T @ features + l2 * jnp.eye(features.shape[1], dtype=features.dtype)
    factor = jax.scipy.linalg.cho_factor(gram, lower=True)
    return jax.scipy.linalg.cho_solve(factor, features.T @ targets)
