"""The fidelity corpus: fixed programs whose predicted counts and runtime share are measured.

Eighteen programs, each at two sizes: ``small`` (launch-bound: a handful of microseconds per
kernel, so fixed per-kernel costs dominate) and ``large`` (compute- or bandwidth-bound). Each
builder returns ``(fn, args)`` with arguments built from NumPy (building them compiles
nothing). ``gradient`` says whether the program's gradient is measured too (as
``jaxport.check(..., transforms=["grad"])`` checks it: the gradient of the sum of its
floating outputs with respect to every floating argument).

The programs cover what the issue lists: an MLP, a conv net in NHWC and NCHW, attention, layer
norm, embedding + softmax cross-entropy, a GRU as ``lax.scan``, an FFT filter, solve,
Cholesky, eigh and SVD, sort and top-k, a Pallas kernel (Triton on cuda, Mosaic on tpu, plain
``jax.numpy`` elsewhere), a rotation about a constant centre (a dot XLA folds beside one it
keeps), numpyro's HMC energy (dots of vectors, which XLA's GPU compiler never hands to a gemm)
and a data-parallel training step over a two-device mesh (on cpu
that needs ``--xla_force_host_platform_device_count=2`` in ``XLA_FLAGS`` before JAX starts;
:func:`ensure_host_devices` sets it).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SIZES = ("small", "large")
HOST_DEVICES = 2


def ensure_host_devices() -> None:
    """Ask XLA:CPU for two host devices (the data-parallel step's mesh); before JAX starts."""
    flag = f"--xla_force_host_platform_device_count={HOST_DEVICES}"
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()


def _normal(seed: int, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _spd(seed: int, n: int) -> np.ndarray:
    a = _normal(seed, n, n)
    return (a @ a.T / n + np.eye(n, dtype=np.float32)).astype(np.float32)


# -- the programs ----------------------------------------------------------------------------


def mlp(params: list[tuple[Any, Any]], x: Any) -> Any:
    import jax

    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def _mlp(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    batch, width = (8, 64) if size == "small" else (256, 1024)
    dims = (width, width, width, 16)
    params = [
        (_normal(i, a, b, scale=a**-0.5), np.zeros(b, np.float32))
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True))
    ]
    return mlp, (params, _normal(9, batch, width))


def _convnet(layout: str) -> Callable[..., Any]:
    def convnet(w1: Any, w2: Any, images: Any) -> Any:
        import jax

        spatial = (1, 2) if layout == "NHWC" else (2, 3)
        dn = (layout, "HWIO", layout)
        x = jax.lax.conv_general_dilated(images, w1, (1, 1), "SAME", dimension_numbers=dn)
        x = jax.nn.relu(x)
        x = jax.lax.conv_general_dilated(x, w2, (1, 1), "SAME", dimension_numbers=dn)
        return jax.nn.relu(x).mean(axis=spatial)

    convnet.__name__ = f"convnet_{layout.lower()}"
    return convnet


def _conv(layout: str, size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    batch, hw, c1, c2 = (1, 8, 4, 8) if size == "small" else (8, 64, 32, 64)
    shape = (batch, hw, hw, 3) if layout == "NHWC" else (batch, 3, hw, hw)
    w1 = _normal(1, 3, 3, 3, c1, scale=0.3)
    w2 = _normal(2, 3, 3, c1, c2, scale=0.2)
    return _convnet(layout), (w1, w2, _normal(3, *shape))


def attention(x: Any, wqkv: Any, wout: Any) -> Any:
    import jax
    import jax.numpy as jnp

    heads = 4
    b, t, d = x.shape
    q, k, v = jnp.split(x @ wqkv, 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(np.sqrt(d // heads))
    mask = jnp.tril(jnp.ones((t, t), bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, d) @ wout


def _attention(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    b, t, d = (1, 8, 32) if size == "small" else (4, 256, 256)
    return attention, (
        _normal(1, b, t, d),
        _normal(2, d, 3 * d, scale=d**-0.5),
        _normal(3, d, d, scale=d**-0.5),
    )


def layer_norm(x: Any, scale: Any, bias: Any) -> Any:
    import jax

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias


def _layer_norm(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    rows, d = (8, 64) if size == "small" else (4096, 1024)
    return layer_norm, (_normal(1, rows, d), np.ones(d, np.float32), np.zeros(d, np.float32))


def embed_xent(table: Any, w: Any, ids: Any, labels: Any) -> Any:
    import jax
    import jax.numpy as jnp

    logits = table[ids].mean(axis=1) @ w
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def _embed_xent(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    vocab, d, batch, bag, classes = (
        (100, 16, 8, 4, 10) if size == "small" else (32768, 256, 512, 16, 8192)
    )
    rng = np.random.default_rng(4)
    return embed_xent, (
        _normal(1, vocab, d, scale=0.1),
        _normal(2, d, classes, scale=d**-0.5),
        rng.integers(0, vocab, (batch, bag)).astype(np.int32),
        rng.integers(0, classes, batch).astype(np.int32),
    )


def gru(params: dict[str, Any], xs: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def cell(h: Any, x: Any) -> tuple[Any, None]:
        z = jax.nn.sigmoid(x @ params["wz"] + h @ params["uz"])
        r = jax.nn.sigmoid(x @ params["wr"] + h @ params["ur"])
        n = jnp.tanh(x @ params["wn"] + (r * h) @ params["un"])
        return (1 - z) * n + z * h, None

    h0 = jnp.zeros((xs.shape[1], params["uz"].shape[0]), xs.dtype)
    return jax.lax.scan(cell, h0, xs)[0]


def _gru(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    steps, batch, d_in, d = (8, 4, 8, 16) if size == "small" else (64, 64, 256, 512)
    names = ("wz", "wr", "wn", "uz", "ur", "un")
    params = {
        n: _normal(i, d_in if n.startswith("w") else d, d, scale=d**-0.5)
        for i, n in enumerate(names)
    }
    return gru, (params, _normal(9, steps, batch, d_in))


def fft_filter(signals: Any) -> Any:
    import jax.numpy as jnp

    spectrum = jnp.fft.rfft(signals, axis=-1)
    keep = jnp.arange(spectrum.shape[-1]) < spectrum.shape[-1] // 8
    return jnp.fft.irfft(spectrum * keep, n=signals.shape[-1], axis=-1)


def _fft(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    batch, length = (2, 128) if size == "small" else (64, 65536)
    return fft_filter, (_normal(1, batch, length),)


def solve(a: Any, b: Any) -> Any:
    import jax.numpy as jnp

    return jnp.linalg.solve(a, b)


def _solve(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    n = 8 if size == "small" else 768
    return solve, (_spd(1, n), _normal(2, n, 16))


def cholesky_solve(a: Any, b: Any) -> Any:
    import jax

    factor = jax.scipy.linalg.cho_factor(a)
    return jax.scipy.linalg.cho_solve(factor, b)


def _cholesky(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    n = 8 if size == "small" else 768
    return cholesky_solve, (_spd(3, n), _normal(4, n, 16))


def eigh(a: Any) -> Any:
    import jax.numpy as jnp

    values, vectors = jnp.linalg.eigh(a)
    return values, vectors[:, -4:]


def _eigh(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return eigh, (_spd(5, 8 if size == "small" else 384),)


def svd(a: Any) -> Any:
    import jax.numpy as jnp

    return jnp.linalg.svd(a, compute_uv=False)


def _svd(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    rows, cols = (8, 6) if size == "small" else (512, 256)
    return svd, (_normal(6, rows, cols),)


def sort(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.sort(x, axis=-1)


def _sort(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    shape = (4, 64) if size == "small" else (16, 65536)
    return sort, (_normal(7, *shape),)


def top_k(logits: Any) -> Any:
    import jax

    values, _ = jax.lax.top_k(logits, 8)
    return jax.nn.softmax(values, axis=-1)


def _top_k(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    shape = (4, 64) if size == "small" else (512, 16384)
    return top_k, (_normal(8, *shape),)


def _bias_gelu_kernel(x_ref: Any, b_ref: Any, o_ref: Any) -> None:
    import jax

    y = x_ref[...] + b_ref[...]
    o_ref[...] = y * jax.nn.sigmoid(1.702 * y)


def _pallas_bias_gelu(x: Any, bias: Any, *, compiler_params: object) -> Any:
    import jax
    from jax.experimental import pallas as pl

    rows, d = x.shape
    block = min(rows, 8)  # 8 rows per program instance: a kernel Triton compiles quickly
    return pl.pallas_call(
        _bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(rows // block,),
        in_specs=[
            pl.BlockSpec((block, d), lambda i: (i, 0)),
            pl.BlockSpec((1, d), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((block, d), lambda i: (i, 0)),
        compiler_params=compiler_params,
    )(x, bias.reshape(1, -1))


def _bias_gelu_reference(x: Any, bias: Any) -> Any:
    import jax

    y = x + bias
    return y * jax.nn.sigmoid(1.702 * y)


def pallas_bias_gelu(x: Any, bias: Any) -> Any:
    """A Pallas kernel on cuda (Triton) and tpu (Mosaic); ``jax.numpy`` on other platforms."""
    import jax
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas import triton as pltriton

    triton = getattr(pltriton, "CompilerParams", None) or pltriton.TritonCompilerParams
    mosaic = getattr(pltpu, "CompilerParams", None) or pltpu.TPUCompilerParams
    return jax.lax.platform_dependent(
        x,
        bias,
        cuda=functools.partial(_pallas_bias_gelu, compiler_params=triton()),
        tpu=functools.partial(_pallas_bias_gelu, compiler_params=mosaic()),
        default=_bias_gelu_reference,
    )


def _pallas(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    rows, d = (8, 128) if size == "small" else (1024, 1024)
    return pallas_bias_gelu, (_normal(1, rows, d), _normal(2, d))


def rotate(points: Any, angle: float, basis: Any, skew: Any, center: Any) -> Any:
    """Points rotated by a bound angle about a constant centre: ``center @ matrix`` is a
    dot on constants only (XLA folds it while compiling: no library runs it), ``points @
    matrix`` one on the argument (issue 43)."""
    import jax.numpy as jnp

    matrix = basis * jnp.cos(angle) + skew * jnp.sin(angle)
    return points @ matrix + (center - center @ matrix)


def _rotation(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    rows, d = (64, 128) if size == "small" else (4096, 512)
    bound = functools.partial(
        rotate, angle=0.3, basis=_normal(5, d, d), skew=_normal(6, d, d), center=_normal(7, d)
    )
    return bound, (_normal(1, rows, d),)


def hmc_energy(q: Any, p: Any, inverse_mass: Any, chains: Any) -> Any:
    """numpyro's ``build_tree`` step on a model of ``d`` parameters: the kinetic energy
    ``p . (M^-1 p)`` (a dot of two vectors, ``tensor<1xf32>`` for a one-parameter model)
    and each chain's energy (a batched dot of vectors); XLA's GPU compiler makes both a
    multiply and a reduce, never a gemm (issue 50)."""
    import jax.numpy as jnp

    kinetic = 0.5 * jnp.dot(p, inverse_mass * p)
    per_chain = jnp.einsum("cd,cd->c", chains, chains * inverse_mass)
    return kinetic + jnp.sum(jnp.tanh(q)) + jnp.mean(per_chain)


def _hmc_energy(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    d, chains = (1, 4) if size == "small" else (4096, 256)
    return hmc_energy, (_normal(1, d), _normal(2, d), np.abs(_normal(3, d)) + 0.5,
                        _normal(4, chains, d))  # fmt: skip


def dp_step(w: Any, x: Any, y: Any) -> Any:
    """One SGD step of a two-layer model; the batch is sharded over the mesh, so XLA's
    partitioner inserts the gradient all-reduce."""
    import jax
    import jax.numpy as jnp

    def loss(w: Any) -> Any:
        h = jnp.tanh(x @ w[0])
        return jnp.mean((h @ w[1] - y) ** 2)

    grads = jax.grad(loss)(w)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, w, grads)


def _dp_step(size: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    batch, d = (8, 32) if size == "small" else (1024, 1024)
    devices = jax.devices("cpu")[:HOST_DEVICES]
    if len(devices) < HOST_DEVICES:
        raise RuntimeError(
            f"dp_step needs {HOST_DEVICES} cpu devices; JAX started with {len(devices)}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={HOST_DEVICES} before JAX starts"
        )
    mesh = Mesh(np.array(devices), ("data",))
    batched = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())
    w = jax.device_put((_normal(1, d, d, scale=d**-0.5), _normal(2, d, 8, scale=d**-0.5)),
                       replicated)  # fmt: skip
    x = jax.device_put(_normal(3, batch, d), batched)
    y = jax.device_put(_normal(4, batch, 8), batched)
    return dp_step, (w, x, y)


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    """One corpus program: how to build it at a size, and whether its gradient is measured."""

    name: str
    build: Callable[[str], tuple[Callable[..., Any], tuple[Any, ...]]]
    gradient: bool = True
    what: str = ""


CORPUS: tuple[Program, ...] = (
    Program(name="mlp", build=_mlp, what="3-layer MLP, GELU"),
    Program(name="conv_nhwc", build=functools.partial(_conv, "NHWC"), what="2 convs, NHWC"),
    Program(name="conv_nchw", build=functools.partial(_conv, "NCHW"), what="2 convs, NCHW"),
    Program(name="attention", build=_attention, what="causal multi-head attention"),
    Program(name="layer_norm", build=_layer_norm, what="layer norm"),
    Program(name="embed_xent", build=_embed_xent, what="embedding bag + softmax cross-entropy"),
    Program(name="gru_scan", build=_gru, what="GRU over lax.scan"),
    Program(name="fft_filter", build=_fft, what="rfft low-pass, irfft"),
    Program(name="solve", build=_solve, what="jnp.linalg.solve"),
    Program(name="cholesky", build=_cholesky, what="cho_factor + cho_solve"),
    Program(name="eigh", build=_eigh, what="jnp.linalg.eigh"),
    Program(name="svd", build=_svd, what="jnp.linalg.svd (values)"),
    Program(name="sort", build=_sort, what="jnp.sort"),
    Program(name="top_k", build=_top_k, what="lax.top_k + softmax"),
    Program(name="pallas", build=_pallas, gradient=False,
            what="Pallas bias+GELU (cuda Triton, tpu Mosaic, jnp elsewhere)"),
    Program(name="rotation", build=_rotation,
            what="rotation about a constant centre (one dot folded, one kept)"),
    Program(name="hmc_energy", build=_hmc_energy,
            what="numpyro's HMC energy: dots of vectors (XLA's GPU compiler reduces them)"),
    Program(name="dp_step", build=_dp_step, gradient=False,
            what="data-parallel SGD step, batch sharded over 2 devices"),
)  # fmt: skip
"""The corpus, in report order."""


def by_name(names: str | None) -> tuple[Program, ...]:
    """The programs named in a comma-separated list (all when ``None``); raises ``ValueError``
    naming an unknown one and the known names."""
    if not names:
        return CORPUS
    known = {p.name: p for p in CORPUS}
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise ValueError(
            f"unknown program(s) {', '.join(unknown)}; the corpus has {', '.join(known)}"
        )
    return tuple(known[n] for n in chosen)
