"""The checks the tpu emulation is held to on the chip (issue 49): float32 programs and flax /
optax models, each with deterministic inputs.

``benchmarks/validation/emulation_chip.py`` runs every case on the CPU (the reference), on a TPU where
one is present, and emulated for tpu on the CPU (``pytest_jaxport._jax.emulate``), and
compares the three; ``tests/test_emulation_chip.py`` holds the emulation to the chip's
recorded outputs (``benchmarks/results/emulation-chip-*.npz``) in CI, which has no TPU.

Written before the emulation was changed and not tuned to it ("measure, don't tune"): each
case is a program of the kind the issue's 20 checks were (a float16 matmul, precision
highest/high, exp/log1p/tanh/erf/sin, softmax with layer norm, sum, cumsum, eigh, FFT, a
``lax.scan`` of (32,) @ (32, 32), default matmuls, convolutions, an MLP, a gradient), plus
models from flax (linen and nnx) and optax. Inputs come from NumPy (seeded), model parameters
are made on the CPU and passed as arguments, so every platform computes from the same bits.
Outputs are kept small (the chip's are recorded in the repository).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One checked program: ``fn(*inputs())``."""

    name: str
    fn: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]
    what: str
    needs: str = ""
    """A package the case imports (``flax``, ``optax``); the case is left out without it."""


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * _rng(seed).standard_normal(shape)).astype(np.float32)


def _grid(low: float, high: float, n: int = 4096) -> tuple[np.ndarray]:
    return (np.linspace(low, high, n, dtype=np.float32),)


# -- matrix products ------------------------------------------------------------------------


def matmul(x, w):
    return x @ w


def matmul_high(x, w):
    return jnp.matmul(x, w, precision="high")


def matmul_highest(x, w):
    return jnp.matmul(x, w, precision="highest")


def matmul_f16(x, w):
    return x @ w


def matvec(x, w):
    return x @ w


def inner_product(x, y):
    return jnp.dot(x, y)


def matvec_vmapped(x, w):
    return jax.vmap(lambda v, m: v @ m)(x, w)


def scan_rnn(h0, xs, w):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h

    return lax.scan(step, h0, xs)


def scan_linear(h0, xs, w):
    def step(h, x):
        h = h @ w + x
        return h, h[0]

    return lax.scan(step, h0, xs)


def mixed_matmul(x, w):
    return lax.dot(x, w, preferred_element_type=jnp.float32)


def attention(q, k, v):
    scores = jnp.einsum("qd,kd->qk", q, k) / np.sqrt(q.shape[-1]).astype(np.float32)
    return jax.nn.softmax(scores, axis=-1) @ v


# -- elementwise ------------------------------------------------------------------------------


def exp(x):
    return jnp.exp(x)


def log1p(x):
    return jnp.log1p(x)


def tanh(x):
    return jnp.tanh(x)


def erf(x):
    return jax.scipy.special.erf(x)


def sin(x):
    return jnp.sin(x)


def gelu(x):
    return jax.nn.gelu(x, approximate=False)


def softplus_sigmoid(x):
    return jax.nn.softplus(x), jax.nn.sigmoid(x)


# -- reductions and normalisation -------------------------------------------------------------


def row_sums(x):
    return jnp.sum(x, axis=-1)


def total(x):
    return jnp.sum(x)


def cumsum(x):
    return jnp.cumsum(x)


def logsumexp(x):
    return jax.scipy.special.logsumexp(x, axis=-1)


def softmax_layernorm(x, scale, bias):
    p = jax.nn.softmax(x, axis=-1)
    mean = p.mean(-1, keepdims=True)
    var = ((p - mean) ** 2).mean(-1, keepdims=True)
    return (p - mean) * lax.rsqrt(var + 1e-5) * scale + bias


# -- decompositions and transforms ------------------------------------------------------------


def eigvalsh(a):
    return jnp.linalg.eigvalsh(a)


def solve(a, b):
    return jnp.linalg.solve(a, b)


def rfft(x):
    return jnp.fft.rfft(x)


def _symmetric(seed: int, n: int) -> tuple[np.ndarray]:
    a = _normal(seed, n, n)
    return ((a + a.T) / 2,)


def _well_conditioned(seed: int, n: int, rhs: int) -> tuple[np.ndarray, np.ndarray]:
    a = _normal(seed, n, n) + n**0.5 * np.eye(n, dtype=np.float32)
    return a, _normal(seed + 1, n, rhs)


# -- convolutions, an MLP, a gradient ---------------------------------------------------------

_DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=_DN)


def depthwise_conv(x, w):
    return lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=_DN, feature_group_count=x.shape[-1]
    )


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def _mlp_params(seed: int, widths: tuple[int, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
    return [
        (_normal(seed + i, a, b, scale=a**-0.5), _normal(seed + 100 + i, b, scale=0.1))
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=False))
    ]


def mlp_grad(params, x, y):
    def loss(p):
        logits = mlp(p, x)
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    return jax.grad(loss)(params)


def _mlp_grad_inputs() -> tuple[Any, ...]:
    x = _normal(31, 32, 64)
    y = np.eye(10, dtype=np.float32)[_rng(32).integers(0, 10, 32)]
    return _mlp_params(30, (64, 128, 10)), x, y


# -- flax and optax models (parameters made on the CPU, passed as arguments) ------------------


def _on_cpu(make: Callable[[], Any]) -> Any:
    with jax.default_device(jax.devices("cpu")[0]):
        return jax.tree_util.tree_map(np.asarray, make())


@functools.cache
def _linen() -> dict[str, Any]:
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.gelu(nn.Dense(128)(x))
            return nn.Dense(10)(x)

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(16, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            return nn.Dense(10)(x.reshape(x.shape[0], -1))

    class GroupNormConv(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.swish(nn.GroupNorm(num_groups=4)(nn.Conv(16, (3, 3))(x)))

    class LSTM(nn.Module):
        @nn.compact
        def __call__(self, xs):
            return nn.RNN(nn.OptimizedLSTMCell(32))(xs)

    class BatchNormTrain(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(64)(x)
            return nn.relu(nn.BatchNorm(use_running_average=False)(x))

    return {"MLP": MLP, "CNN": CNN, "GroupNormConv": GroupNormConv, "LSTM": LSTM,
            "BatchNormTrain": BatchNormTrain}  # fmt: skip


def _linen_case(name: str, shape: tuple[int, ...], seed: int) -> tuple[Any, ...]:
    module = _linen()[name]()
    x = _normal(seed, *shape)
    variables = _on_cpu(lambda: module.init(jax.random.key(seed), x))
    return variables, x


def linen_apply(name: str) -> Callable[..., Any]:
    def apply(variables, x):
        module = _linen()[name]()
        if name == "BatchNormTrain":
            out, updates = module.apply(variables, x, mutable=["batch_stats"])
            return out, updates
        return module.apply(variables, x)

    apply.__name__ = f"linen_{name}"
    return apply


def nnx_attention(state, x):
    from flax import nnx

    graphdef = _nnx_attention_graph()
    model = nnx.merge(graphdef, state)
    return model(x)


@functools.cache
def _nnx_attention_graph() -> Any:
    from flax import nnx

    model = nnx.MultiHeadAttention(num_heads=4, in_features=64, decode=False, rngs=nnx.Rngs(0))
    graphdef, _ = nnx.split(model)
    return graphdef


def _nnx_attention_inputs() -> tuple[Any, ...]:
    from flax import nnx

    def make() -> Any:
        model = nnx.MultiHeadAttention(num_heads=4, in_features=64, decode=False,
                                       rngs=nnx.Rngs(0))  # fmt: skip
        return nnx.split(model)[1]

    with jax.default_device(jax.devices("cpu")[0]):
        state = make()
        state = jax.tree_util.tree_map(np.asarray, state)
    return state, _normal(41, 2, 16, 64)


def adamw_step(params, grads, opt_state):
    import optax

    optimizer = optax.adamw(1e-3, weight_decay=1e-4)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def _adamw_inputs() -> tuple[Any, ...]:
    import optax

    params = {"w": _normal(51, 64, 32), "b": _normal(52, 32)}
    grads = {"w": _normal(53, 64, 32, scale=0.1), "b": _normal(54, 32, scale=0.1)}
    state = _on_cpu(lambda: optax.adamw(1e-3, weight_decay=1e-4).init(params))
    # Two steps' worth of moments, so the update is not the first step's sign(g).
    state = _on_cpu(lambda: adamw_step(params, grads, state)[1])
    return params, grads, state


# -- the corpus -------------------------------------------------------------------------------

CASES: tuple[Case, ...] = (
    Case(name="matmul", fn=matmul, inputs=lambda: (_normal(1, 128, 256), _normal(2, 256, 128)),
         what="(128, 256) @ (256, 128), default precision"),
    Case(name="matmul_high", fn=matmul_high,
         inputs=lambda: (_normal(3, 128, 256), _normal(4, 256, 128)),
         what='precision="high"'),
    Case(name="matmul_highest", fn=matmul_highest,
         inputs=lambda: (_normal(5, 128, 256), _normal(6, 256, 128)),
         what='precision="highest"'),
    Case(name="matmul_f16", fn=matmul_f16,
         inputs=lambda: (_normal(7, 128, 128).astype(np.float16),
                         _normal(8, 128, 128).astype(np.float16)),
         what="float16 operands"),
    Case(name="matvec", fn=matvec, inputs=lambda: (_normal(9, 1, 1024), _normal(10, 1024, 256)),
         what="(1, 1024) @ (1024, 256): a matrix-vector product"),
    Case(name="inner_product", fn=inner_product,
         inputs=lambda: (_normal(11, 4096), _normal(12, 4096)), what="dot of two vectors"),
    Case(name="matvec_vmapped", fn=matvec_vmapped,
         inputs=lambda: (_normal(13, 8, 256), _normal(14, 8, 256, 64)),
         what="vmap of (256,) @ (256, 64)"),
    Case(name="scan_rnn", fn=scan_rnn,
         inputs=lambda: (_normal(15, 32), _normal(16, 64, 32), _normal(17, 32, 32, scale=0.3)),
         what="lax.scan: h = tanh(h @ W + x), (32,) @ (32, 32)"),
    Case(name="scan_linear", fn=scan_linear,
         inputs=lambda: (_normal(18, 32), _normal(19, 64, 32), _normal(20, 32, 32, scale=0.18)),
         what="lax.scan: h = h @ W + x, (32,) @ (32, 32)"),
    Case(name="mixed_matmul", fn=mixed_matmul,
         inputs=lambda: (_normal(21, 64, 256).astype(jnp.bfloat16), _normal(22, 256, 64)),
         what="bfloat16 @ float32 -> float32"),
    Case(name="attention", fn=attention,
         inputs=lambda: (_normal(23, 64, 32), _normal(24, 64, 32), _normal(25, 64, 32)),
         what="softmax(q k^T / sqrt(d)) v"),
    Case(name="exp", fn=exp, inputs=lambda: _grid(-20, 20), what="exp on [-20, 20]"),
    Case(name="log1p", fn=log1p, inputs=lambda: _grid(-0.9, 100), what="log1p on [-0.9, 100]"),
    Case(name="tanh", fn=tanh, inputs=lambda: _grid(-5, 5), what="tanh on [-5, 5]"),
    Case(name="erf", fn=erf, inputs=lambda: _grid(-4, 4), what="erf on [-4, 4]"),
    Case(name="sin", fn=sin, inputs=lambda: _grid(-100, 100), what="sin on [-100, 100]"),
    Case(name="gelu", fn=gelu, inputs=lambda: _grid(-6, 6), what="exact gelu (erf)"),
    Case(name="softplus_sigmoid", fn=softplus_sigmoid, inputs=lambda: _grid(-20, 20),
         what="softplus and sigmoid on [-20, 20]"),
    Case(name="row_sums", fn=row_sums, inputs=lambda: (_normal(26, 64, 4096),),
         what="sum over 4096 of 64 rows"),
    Case(name="total", fn=total, inputs=lambda: (_normal(27, 256, 256),),
         what="sum of 65,536 values"),
    Case(name="cumsum", fn=cumsum, inputs=lambda: (_normal(28, 4096),), what="cumsum of 4096"),
    Case(name="logsumexp", fn=logsumexp, inputs=lambda: (_normal(29, 64, 512, scale=3.0),),
         what="logsumexp over 512"),
    Case(name="softmax_layernorm", fn=softmax_layernorm,
         inputs=lambda: (_normal(33, 32, 256, scale=2.0), _normal(34, 256), _normal(35, 256)),
         what="layer norm of a softmax"),
    Case(name="eigvalsh", fn=eigvalsh, inputs=lambda: _symmetric(36, 64),
         what="eigenvalues of a symmetric 64 x 64"),
    Case(name="solve", fn=solve, inputs=lambda: _well_conditioned(37, 64, 8),
         what="solve 64 x 64"),
    Case(name="rfft", fn=rfft, inputs=lambda: (_normal(39, 8, 1024),), what="rfft of 1024"),
    Case(name="conv", fn=conv,
         inputs=lambda: (_normal(42, 4, 16, 16, 8), _normal(43, 3, 3, 8, 16, scale=0.3)),
         what="3x3 convolution, 8 -> 16 channels"),
    Case(name="depthwise_conv", fn=depthwise_conv,
         inputs=lambda: (_normal(44, 4, 16, 16, 16), _normal(45, 3, 3, 1, 16, scale=0.3)),
         what="3x3 depthwise convolution"),
    Case(name="mlp", fn=mlp, inputs=lambda: (_mlp_params(46, (64, 256, 128, 10)),
                                             _normal(47, 32, 64)),
         what="MLP 64-256-128-10, relu"),
    Case(name="mlp_grad", fn=mlp_grad, inputs=_mlp_grad_inputs,
         what="gradient of a softmax cross-entropy"),
    Case(name="linen_mlp", fn=linen_apply("MLP"), inputs=lambda: _linen_case("MLP", (16, 64), 61),
         what="flax.linen MLP (gelu)", needs="flax"),
    Case(name="linen_cnn", fn=linen_apply("CNN"),
         inputs=lambda: _linen_case("CNN", (4, 16, 16, 3), 62), what="flax.linen CNN",
         needs="flax"),
    Case(name="linen_groupnorm_conv", fn=linen_apply("GroupNormConv"),
         inputs=lambda: _linen_case("GroupNormConv", (2, 16, 16, 3), 63),
         what="flax.linen Conv + GroupNorm on RGB", needs="flax"),
    Case(name="linen_lstm", fn=linen_apply("LSTM"),
         inputs=lambda: _linen_case("LSTM", (4, 12, 16), 64), what="flax.linen LSTM",
         needs="flax"),
    Case(name="linen_batchnorm", fn=linen_apply("BatchNormTrain"),
         inputs=lambda: _linen_case("BatchNormTrain", (32, 16), 65),
         what="flax.linen BatchNorm, training", needs="flax"),
    Case(name="nnx_attention", fn=nnx_attention, inputs=_nnx_attention_inputs,
         what="flax.nnx MultiHeadAttention", needs="flax"),
    Case(name="optax_adamw", fn=adamw_step, inputs=_adamw_inputs, what="optax adamw step",
         needs="optax"),
)  # fmt: skip


def available(case: Case) -> bool:
    """Whether ``case``'s package is installed."""
    if not case.needs:
        return True
    import importlib.util

    return importlib.util.find_spec(case.needs) is not None
