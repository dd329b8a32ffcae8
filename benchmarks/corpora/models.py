"""Realistic JAX functions for the pytest-jaxport benchmarks (suite, breakdown and scale).

Every model comes with a ``make_*`` function that returns ``(fn, args)`` built from a NumPy
RNG (so building the inputs compiles nothing: the benchmark measures the checked function,
not the test's set-up). ``CASES`` lists the suite's cases; ``transformer`` builds the
scale benchmark's functions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


# -- MLP ------------------------------------------------------------------------------------


def mlp(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def make_mlp(widths: tuple[int, ...] = (64, 256, 256, 10), batch: int = 32, seed: int = 0):
    rng = _rng(seed)
    params = [
        {"w": _normal(rng, a, b, scale=a**-0.5), "b": np.zeros(b, np.float32)}
        for a, b in zip(widths[:-1], widths[1:])
    ]
    return mlp, (params, _normal(rng, batch, widths[0]))


def mlp_train_step(params: list[dict[str, jax.Array]], x: jax.Array, y: jax.Array):
    """One SGD step of the MLP on a softmax cross-entropy loss (forward + backward)."""

    def loss(p):
        logits = mlp(p, x)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    value, grads = jax.value_and_grad(loss)(params)
    return value, jax.tree_util.tree_map(lambda p, g: p - 1e-2 * g, params, grads)


def make_mlp_train(seed: int = 1):
    _, (params, x) = make_mlp(seed=seed)
    y = np.eye(10, dtype=np.float32)[_rng(seed).integers(0, 10, x.shape[0])]
    return mlp_train_step, (params, x, y)


# -- conv net -------------------------------------------------------------------------------


def convnet(params: dict[str, jax.Array], images: jax.Array) -> jax.Array:
    dn = ("NHWC", "HWIO", "NHWC")
    x = images
    for name in ("conv1", "conv2"):
        x = jax.lax.conv_general_dilated(x, params[name], (1, 1), "SAME", dimension_numbers=dn)
        x = jax.nn.relu(x + params[name + "_b"])
        x = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
    x = x.reshape(x.shape[0], -1)
    return x @ params["dense"] + params["dense_b"]


def make_convnet(batch: int = 8, size: int = 32, channels: tuple[int, int] = (16, 32), seed=2):
    rng = _rng(seed)
    c1, c2 = channels
    flat = (size // 4) * (size // 4) * c2
    params = {
        "conv1": _normal(rng, 3, 3, 3, c1, scale=0.2),
        "conv1_b": np.zeros(c1, np.float32),
        "conv2": _normal(rng, 3, 3, c1, c2, scale=0.1),
        "conv2_b": np.zeros(c2, np.float32),
        "dense": _normal(rng, flat, 10, scale=flat**-0.5),
        "dense_b": np.zeros(10, np.float32),
    }
    return convnet, (params, _normal(rng, batch, size, size, 3))


# -- attention / transformer block ----------------------------------------------------------


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias


def attention(p: dict[str, jax.Array], x: jax.Array, heads: int) -> jax.Array:
    b, t, d = x.shape
    qkv = x @ p["qkv"]  # (b, t, 3d)
    q, k, v = jnp.split(qkv.reshape(b, t, 3, heads, d // heads), 3, axis=2)
    q, k, v = (a[:, :, 0] for a in (q, k, v))  # (b, t, h, dh)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads).astype(np.float32)
    causal = jnp.tril(jnp.ones((t, t), bool))
    scores = jnp.where(causal, scores, -1e9)
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return out.reshape(b, t, d) @ p["out"]


def block(p: dict[str, jax.Array], x: jax.Array, heads: int) -> jax.Array:
    x = x + attention(p, layer_norm(x, p["ln1_s"], p["ln1_b"]), heads)
    h = layer_norm(x, p["ln2_s"], p["ln2_b"])
    return x + jax.nn.gelu(h @ p["up"] + p["up_b"]) @ p["down"] + p["down_b"]


def block_params(rng: np.random.Generator, d: int) -> dict[str, np.ndarray]:
    return {
        "ln1_s": np.ones(d, np.float32),
        "ln1_b": np.zeros(d, np.float32),
        "qkv": _normal(rng, d, 3 * d, scale=d**-0.5),
        "out": _normal(rng, d, d, scale=d**-0.5),
        "ln2_s": np.ones(d, np.float32),
        "ln2_b": np.zeros(d, np.float32),
        "up": _normal(rng, d, 4 * d, scale=d**-0.5),
        "up_b": np.zeros(4 * d, np.float32),
        "down": _normal(rng, 4 * d, d, scale=(4 * d) ** -0.5),
        "down_b": np.zeros(d, np.float32),
    }


def make_transformer_block(batch: int = 4, seq: int = 64, d: int = 128, heads: int = 4, seed=3):
    rng = _rng(seed)
    fn = functools.partial(block, heads=heads)
    functools.update_wrapper(fn, block)
    return fn, (block_params(rng, d), _normal(rng, batch, seq, d))


# -- linear solve ---------------------------------------------------------------------------


def solve(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.linalg.solve(a, b)


def make_solve(n: int = 64, rhs: int = 8, seed: int = 4):
    rng = _rng(seed)
    a = _normal(rng, n, n) + n * np.eye(n, dtype=np.float32)
    return solve, (a, _normal(rng, n, rhs))


def ridge(features: jax.Array, targets: jax.Array) -> jax.Array:
    """Ridge regression through a Cholesky factorisation."""
    gram = features.T @ features + 1e-3 * jnp.eye(features.shape[1], dtype=features.dtype)
    factor = jax.scipy.linalg.cho_factor(gram)
    return jax.scipy.linalg.cho_solve(factor, features.T @ targets)


def make_ridge(samples: int = 256, features: int = 16, seed: int = 5):
    rng = _rng(seed)
    x = _normal(rng, samples, features)
    return ridge, (x, x @ np.arange(1, features + 1, dtype=np.float32))


# -- FFT filter -----------------------------------------------------------------------------


def lowpass(signals: jax.Array, keep: int = 16) -> jax.Array:
    spectrum = jnp.fft.rfft(signals, axis=-1)
    mask = jnp.arange(spectrum.shape[-1]) < keep
    return jnp.fft.irfft(spectrum * mask, n=signals.shape[-1], axis=-1)


def make_lowpass(batch: int = 16, length: int = 1024, seed: int = 6):
    return lowpass, (_normal(_rng(seed), batch, length),)


# -- the generated suite's cases ---------------------------------------------------------------

CASES: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "mlp_small": lambda: make_mlp((32, 64, 10), batch=16),
    "mlp_wide": lambda: make_mlp((128, 512, 512, 512, 10), batch=64),
    "mlp_train_step": make_mlp_train,
    "convnet_small": lambda: make_convnet(batch=4, size=16, channels=(8, 16)),
    "convnet": make_convnet,
    "transformer_block": make_transformer_block,
    "transformer_block_small": lambda: make_transformer_block(batch=2, seq=16, d=32, heads=2),
    "solve": make_solve,
    "ridge": make_ridge,
    "lowpass": make_lowpass,
    "lowpass_long": lambda: make_lowpass(batch=4, length=4096),
}


# -- the scale benchmark: transformer-like functions -----------------------------------------


def transformer(layers: int, form: str, mode: str, *, d: int = 32, seq: int = 16, heads: int = 2):
    """``(fn, args)`` for a ``layers``-deep stack of :func:`block`.

    ``form``: ``"loop"`` (a Python loop: ops grow with depth) or ``"scan"`` (``lax.scan`` over
    stacked weights: one body). ``mode``: ``"fwd"`` or ``"grad"`` (``jax.grad`` of a
    squared-output loss with respect to every weight).
    """
    rng = _rng(100 + layers)
    per_layer = [block_params(rng, d) for _ in range(layers)]
    x = _normal(rng, 2, seq, d)
    if form == "loop":
        params: Any = per_layer

        def forward(params, x):
            for p in params:
                x = block(p, x, heads)
            return x

    elif form == "scan":
        params = jax.tree_util.tree_map(lambda *a: np.stack(a), *per_layer)

        def forward(params, x):
            def body(x, p):
                return block(p, x, heads), None

            return jax.lax.scan(body, x, params)[0]

    else:
        raise ValueError(form)
    if mode == "fwd":
        fn = forward
    elif mode == "grad":

        def fn(params, x):
            return jax.grad(lambda p: jnp.mean(forward(p, x) ** 2))(params)

    else:
        raise ValueError(mode)
    fn.__name__ = f"transformer_{form}_{mode}_{layers}"
    return fn, (params, x)
