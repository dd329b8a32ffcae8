"""The formats a TPU computes differently from the CPU (issue 55 item 9), and the chip's error
per input range and conditioning (item 10).

    python benchmarks/validation/chip_formats.py run --out-dir DIR            # on the TPU host
    python benchmarks/validation/chip_formats.py run --out-dir DIR --dry-run  # no TPU: the CPU stands in
    python benchmarks/validation/chip_formats.py analyse --run DIR/chip-formats-run.json \\
        --outputs DIR/chip-formats-outputs.npz --out benchmarks/results/chip-formats-tpu-v5-lite

``run`` has two parts.

- **formats** (:func:`format_cases`): bfloat16 and float16 elementwise arithmetic (add, mul,
  div, exp, log, tanh, rsqrt, sqrt, sigmoid, ``a*b+c``, a polynomial, layer norm, softmax,
  gelu), float8 (e4m3fn, e5m2) arithmetic and products, products of narrow inputs with a
  float32 result (``preferred_element_type``), conversions into narrow formats (inputs at and
  beside the rounding ties, out of range, subnormal, inf and nan) and bfloat16/float16
  reductions. Inputs are seeded (NumPy): 16,384
  elements, 65,536 for the layer norms, reductions and conversions. The chip's outputs are kept
  (``chip-formats-outputs.npz``: each leaf's bits, its dtype in the run's JSON) with a digest
  of the chip host's CPU outputs.
- **ranges**: the chip's error against float64 per input range (expm1, exp, log, log1p,
  pow, erf_inv, lgamma, tanh), per conditioning and size (lu, inv, solve, slogdet, qr, svd,
  eigh, cholesky, triangular solve), of rfft and its round trip per length, of cumprod per
  length and value range, and of products of bfloat16 inputs with a float32 result per
  contraction length, in the units ``benchmarks/validation/chip_errors.py`` uses (ulp of the result,
  eps times the largest result, eps times the sum of the terms); the chip host's CPU beside.

``analyse`` (here, no chip) computes each format case on this machine's CPU (JAX), its float64
reference and the models of how a chip may compute it (the whole expression in float32 and
rounded once; the float64 result correctly rounded), and counts the chip's mismatches against
the CPU at rtol = atol = 1e-6, 1e-4, 1e-3, 1e-2 and 1e-1 with the worst errors. It writes
``OUT.json``, ``OUT.md``, ``OUT.npz`` (``chip/<case>/<i>``: the chip's outputs as bits;
``cpu_xor_chip/<case>/<i>``: this CPU's bits XOR the chip's, zero where they agree; each
leaf's dtype in ``OUT.json``; :func:`load_recorded` reads them back) and, from the
ranges, ``chip-bounds-by-range-<device>.json``: the bounds in ``pytest_jaxport/chip_errors.json``'s
format, keyed by range, conditioning or length.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import platform as platform_module
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

EPS32 = 2.0**-23
N = 65536
SHAPE = (128, 128)
"""Most format cases: 16,384 elements (the chip's outputs are kept in the repository)."""
SIZE = SHAPE[0] * SHAPE[1]
LARGE = (256, 256)
"""The layer norms (65,536 elements, as in issue 55) and the reductions."""
TOLERANCES = (1e-6, 1e-4, 1e-3, 1e-2, 1e-1)
NOT_MEASURED = "not measured: no TPU"


# -- helpers shared by both parts ----------------------------------------------------------------


def dtype_of(name: str) -> Any:
    """A NumPy dtype by name, ml_dtypes' narrow floats included."""
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def bits(a: np.ndarray) -> np.ndarray:
    """``a``'s bits as unsigned integers of its width (npz keeps no narrow float dtype)."""
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fcV" else a


def unbits(raw: np.ndarray, dtype: str) -> np.ndarray:
    return (
        raw.view(dtype_of(dtype)) if raw.dtype.kind == "u" and dtype_of(dtype).kind != "u" else raw
    )


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(bits(a)).tobytes()).hexdigest()[:16]


def device_facts(dry_run: bool) -> dict[str, Any]:
    import importlib.metadata as metadata

    import jax

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    device = jax.devices()[0]
    facts: dict[str, Any] = {"jax": jax.__version__, "jaxlib": version("jaxlib"),
                             "libtpu": version("libtpu"), "python": sys.version.split()[0],
                             "machine": platform_module.machine(),
                             "date": dt.date.today().isoformat(),
                             "kind": NOT_MEASURED if dry_run else device.device_kind,
                             "platform": device.platform}  # fmt: skip
    with contextlib.suppress(Exception):
        facts["platform_version"] = device.client.platform_version
    return facts


def on_device(fn: Callable[..., Any], *args: Any) -> list[np.ndarray]:
    import jax

    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]


def on_cpu(fn: Callable[..., Any], *args: Any) -> list[np.ndarray]:
    import jax

    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        placed = jax.device_put(args, cpu)
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*placed))]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def spread(low: float, high: float, seed: int, *, n: int = N, log: bool = False) -> np.ndarray:
    """Half a grid over ``[low, high]``, half uniform draws (log-uniform with ``log``),
    shuffled: float32."""
    rng, half = _rng(seed), n // 2
    if log:
        grid = np.geomspace(low, high, half)
        rand = np.exp(rng.uniform(np.log(low), np.log(high), n - half))
    else:
        grid, rand = np.linspace(low, high, half), rng.uniform(low, high, n - half)
    return rng.permutation(np.concatenate([grid, rand])).astype(np.float32)


def normal(seed: int, *shape: int, scale: float = 1.0, loc: float = 0.0) -> np.ndarray:
    return (loc + scale * _rng(seed).standard_normal(shape)).astype(np.float32)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        return _finite(value.item())
    return value


def _save(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(value), indent=1) + "\n")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- part B: the formats corpus ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One format program: ``fn(*inputs())``."""

    name: str
    group: str
    what: str
    fn: Callable[..., Any]
    inputs: Callable[[], tuple[np.ndarray, ...]]
    reference: Callable[..., Any] | None = None
    """float64 NumPy reference of the inputs (as float64); default: ``fn`` under x64."""
    model: bool = True
    """Whether "computed in float32, rounded once" is a model of it (not for conversions)."""


def _layernorm(x: Any, g: Any, b: Any) -> Any:
    from jax import lax

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def _softmax(x: Any) -> Any:
    import jax

    return jax.nn.softmax(x, axis=-1)


def _gelu(x: Any) -> Any:
    import jax

    return jax.nn.gelu(x, approximate=True)


def _elementwise(dtype: str, seed: int) -> list[Case]:
    """The elementwise programs in ``dtype`` (bfloat16 or float16)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    d = dtype_of(dtype)
    big = 1e3 if dtype == "bfloat16" else 60.0  # float16 stops at 65,504

    def one(
        low: float, high: float, s: int, log: bool = False
    ) -> Callable[[], tuple[np.ndarray, ...]]:
        return lambda: (spread(low, high, seed + s, n=SIZE, log=log).reshape(SHAPE).astype(d),)

    def two(s: int) -> Callable[[], tuple[np.ndarray, ...]]:
        return lambda: (normal(seed + s, *SHAPE, scale=3).astype(d),
                        normal(seed + s + 1, *SHAPE, scale=3).astype(d))  # fmt: skip

    def divisor(s: int) -> Callable[[], tuple[np.ndarray, ...]]:
        def make() -> tuple[np.ndarray, ...]:
            y = normal(seed + s + 1, *SHAPE, scale=3)
            return normal(seed + s, *SHAPE, scale=3).astype(d), np.where(
                np.abs(y) < 0.1, np.float32(0.1), y).astype(d)  # fmt: skip

        return make

    def three(s: int) -> Callable[[], tuple[np.ndarray, ...]]:
        return lambda: tuple(normal(seed + s + i, *SHAPE, scale=2).astype(d) for i in range(3))

    def layernorm_inputs() -> tuple[np.ndarray, ...]:
        return (normal(seed + 40, *LARGE, scale=2, loc=0.5).astype(d),
                normal(seed + 41, LARGE[1], scale=0.1, loc=1.0).astype(d),
                normal(seed + 42, LARGE[1], scale=0.1).astype(d))  # fmt: skip

    p = "f16" if dtype == "float16" else "bf16"
    g = f"{dtype} elementwise"
    return [
        Case(name=f"{p}_add", group=g, what="x + y", fn=lax.add, inputs=two(1)),
        Case(name=f"{p}_mul", group=g, what="x * y", fn=lax.mul, inputs=two(3)),
        Case(name=f"{p}_div", group=g, what="x / y, |y| >= 0.1", fn=lax.div, inputs=divisor(5)),
        Case(name=f"{p}_exp", group=g, what="exp on [-10, 10]", fn=jnp.exp, inputs=one(-10, 10, 7)),
        Case(name=f"{p}_log", group=g, what=f"log on [1e-3, {big:g}]", fn=jnp.log,
             inputs=one(1e-3, big, 8, log=True)),
        Case(name=f"{p}_tanh", group=g, what="tanh on [-5, 5]", fn=jnp.tanh, inputs=one(-5, 5, 9)),
        Case(name=f"{p}_rsqrt", group=g, what=f"rsqrt on [1e-3, {big:g}]", fn=lax.rsqrt,
             inputs=one(1e-3, big, 10, log=True)),
        Case(name=f"{p}_sqrt", group=g, what=f"sqrt on [1e-3, {big:g}]", fn=jnp.sqrt,
             inputs=one(1e-3, big, 11, log=True)),
        Case(name=f"{p}_sigmoid", group=g, what="sigmoid on [-10, 10]", fn=jax.nn.sigmoid,
             inputs=one(-10, 10, 12)),
        Case(name=f"{p}_fma", group=g, what="a * b + c", fn=lambda a, b, c: a * b + c,
             inputs=three(13)),
        Case(name=f"{p}_poly", group=g, what="(x*x + y*y) * 0.5 - x*y: a chain of five ops",
             fn=lambda x, y: (x * x + y * y) * 0.5 - x * y, inputs=two(16)),
        Case(name=f"{p}_layernorm", group=g,
             what=f"layer norm of {LARGE[0]} rows of {LARGE[1]}, all {dtype} (issue 55 item 9)",
             fn=_layernorm, inputs=layernorm_inputs),
        Case(name=f"{p}_softmax", group=g, what=f"softmax over rows of {SHAPE[1]}", fn=_softmax,
             inputs=lambda: (normal(seed + 43, *SHAPE, scale=3).astype(d),)),
        Case(name=f"{p}_gelu", group=g, what="gelu (tanh form) on [-6, 6]", fn=_gelu,
             inputs=one(-6, 6, 44)),
    ]  # fmt: skip


def _f8(seed: int) -> list[Case]:
    import jax.numpy as jnp
    from jax import lax

    found = []
    for name, dtype, scale in (("e4m3fn", "float8_e4m3fn", 8.0), ("e5m2", "float8_e5m2", 64.0)):
        d = dtype_of(dtype)

        def pair(s: int, d: Any = d, scale: float = scale) -> Callable[[], tuple[np.ndarray, ...]]:
            return lambda: (normal(seed + s, *SHAPE, scale=scale).astype(d),
                            normal(seed + s + 1, *SHAPE, scale=scale).astype(d))  # fmt: skip

        def small(s: int, d: Any = d) -> Callable[[], tuple[np.ndarray, ...]]:
            return lambda: (
                normal(seed + s, *SHAPE).astype(d),
                normal(seed + s + 1, *SHAPE).astype(d),
            )

        g = f"float8 {name}"
        found += [
            Case(name=f"f8{name}_add", group=g, what=f"x + y in {dtype}", fn=lax.add, inputs=pair(60)),
            Case(name=f"f8{name}_mul", group=g, what=f"x * y in {dtype}", fn=lax.mul, inputs=small(62)),
            Case(name=f"f8{name}_exp", group=g, what=f"exp in {dtype} on [-4, 4]", fn=jnp.exp,
                 inputs=lambda d=d: (spread(-4, 4, seed + 64, n=SIZE).reshape(SHAPE).astype(d),)),
            Case(name=f"f8{name}_dot_f32", group=g,
                 what=f"({SHAPE[0]},{SHAPE[1]}) @ ({SHAPE[1]},{SHAPE[0]}) {dtype} -> float32",
                 fn=lambda a, b: lax.dot(a, b, preferred_element_type=jnp.float32),
                 inputs=small(66), model=False),
            Case(name=f"f8{name}_dot", group=g, what=f"the same product, a {dtype} result",
                 fn=lax.dot, inputs=small(68)),
        ]  # fmt: skip
    return found


def _products(seed: int) -> list[Case]:
    import jax.numpy as jnp
    from jax import lax

    bf16, f16 = dtype_of("bfloat16"), dtype_of("float16")

    def pair(
        s: int, a: Any, b: Any, k: int = 256, m: int = SHAPE[0]
    ) -> Callable[[], tuple[np.ndarray, ...]]:
        return lambda: (
            normal(seed + s, m, k).astype(a),
            normal(seed + s + 1, k, SHAPE[0]).astype(b),
        )

    def f32(p: Any, q: Any) -> Any:
        return lax.dot(p, q, preferred_element_type=jnp.float32)

    g = "mixed-precision products"
    return [
        Case(name="dot_bf16_f32out", group=g, what="bf16 (128,256) @ bf16 (256,128) -> float32",
             fn=f32, inputs=pair(70, bf16, bf16), model=False),
        Case(name="dot_f16_f32out", group=g, what="f16 (128,256) @ f16 (256,128) -> float32",
             fn=f32, inputs=pair(72, f16, f16), model=False),
        Case(name="dot_bf16_k4096_f32out", group=g, what="bf16 (16,4096) @ bf16 (4096,128) -> float32",
             fn=f32, inputs=pair(74, bf16, bf16, k=4096, m=16), model=False),
        Case(name="dot_bf16", group=g, what="bf16 @ bf16 -> bfloat16 (the default)", fn=lax.dot,
             inputs=pair(76, bf16, bf16)),
        Case(name="dot_f16", group=g, what="f16 @ f16 -> float16 (the default)", fn=lax.dot,
             inputs=pair(78, f16, f16)),
        Case(name="dot_bf16_x_f32", group=g, what="bf16 @ float32 -> float32 (jnp.matmul promotes)",
             fn=jnp.matmul, inputs=pair(80, bf16, np.float32), model=False),
        Case(name="einsum_bf16_f32out", group=g, what="batched bf16 einsum bqk,bkn->bqn -> float32",
             fn=lambda p, q: jnp.einsum("bqk,bkn->bqn", p, q, preferred_element_type=jnp.float32),
             inputs=lambda: (normal(seed + 82, 16, 64, 128).astype(bf16),
                             normal(seed + 83, 16, 128, 64).astype(bf16)), model=False),
    ]  # fmt: skip


def tie_inputs(target: str, seed: int, n: int = N) -> np.ndarray:
    """float32 values where a conversion to ``target`` is hardest: every midpoint between two
    neighbouring ``target`` values (a tie) and the float32 values just beside it, values past
    the largest finite one, subnormals, zeros, infinities and nan; topped up with values
    spread over the format's range."""
    d = dtype_of(target)
    info = __import__("ml_dtypes").finfo(d)
    width = d.itemsize * 8
    with np.errstate(all="ignore"):
        pattern = np.arange(2**width, dtype=f"u{d.itemsize}").view(d).astype(np.float64)
    finite = np.unique(pattern[np.isfinite(pattern)])
    mid = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)
    beside = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)),
                             np.nextafter(mid, np.float32(-np.inf))])  # fmt: skip
    top = float(info.max)
    with np.errstate(all="ignore"):
        over = (top * (1 + np.geomspace(1e-6, 10, 256))).astype(np.float32)
    tiny = (
        float(info.smallest_subnormal) if hasattr(info, "smallest_subnormal") else float(info.tiny)
    )
    edges = np.concatenate([over, -over, np.float32(tiny) * np.geomspace(1e-3, 64, 256, dtype=np.float32),
                            np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38], np.float32)])  # fmt: skip
    rng = _rng(seed)
    take = rng.permutation(beside)[: n // 2]
    rest = n - take.size - edges.size
    spread_values = (rng.choice([-1, 1], rest)
                     * np.exp(rng.uniform(np.log(tiny), np.log(top), rest))).astype(np.float32)  # fmt: skip
    return rng.permutation(np.concatenate([take, edges.astype(np.float32), spread_values]))


def _conversions(seed: int) -> list[Case]:
    import jax.numpy as jnp

    g = "conversions"
    found = []
    for i, target in enumerate(("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")):
        found.append(Case(
            name=f"f32_to_{target}", group=g,
            what=f"float32 -> {target}: ties and beside them, out of range, subnormals, inf, nan",
            fn=lambda x, t=target: x.astype(dtype_of(t)),
            inputs=lambda t=target, s=seed + 90 + i: (tie_inputs(t, s),),
            reference=lambda x: x, model=False))  # fmt: skip
    found += [
        Case(name="bf16_to_f16", group=g, what="bfloat16 -> float16 (every bfloat16 value)",
             fn=lambda x: x.astype(jnp.float16),
             inputs=lambda: (np.arange(N, dtype=np.uint16).view(dtype_of("bfloat16")),),
             reference=lambda x: x, model=False),
        Case(name="f16_to_bf16", group=g, what="float16 -> bfloat16 (every float16 value)",
             fn=lambda x: x.astype(jnp.bfloat16),
             inputs=lambda: (np.arange(N, dtype=np.uint16).view(np.float16),),
             reference=lambda x: x, model=False),
        Case(name="f8e4m3fn_to_f32", group=g, what="float8_e4m3fn -> float32 (every value)",
             fn=lambda x: x.astype(jnp.float32),
             inputs=lambda: (np.tile(np.arange(256, dtype=np.uint8), 256).view(dtype_of("float8_e4m3fn")),),
             reference=lambda x: x, model=False),
        Case(name="f8e5m2_to_f32", group=g, what="float8_e5m2 -> float32 (every value)",
             fn=lambda x: x.astype(jnp.float32),
             inputs=lambda: (np.tile(np.arange(256, dtype=np.uint8), 256).view(dtype_of("float8_e5m2")),),
             reference=lambda x: x, model=False),
        Case(name="f32_bf16_f32", group=g, what="float32 -> bfloat16 -> float32 in one program",
             fn=lambda x: x.astype(jnp.bfloat16).astype(jnp.float32),
             inputs=lambda: (normal(seed + 99, N, scale=100),),
             reference=lambda x: x.astype(np.float32).astype(dtype_of("bfloat16")).astype(np.float64),
             model=False),
        Case(name="f32_f16_f32", group=g, what="float32 -> float16 -> float32 in one program",
             fn=lambda x: x.astype(jnp.float16).astype(jnp.float32),
             inputs=lambda: (normal(seed + 100, N, scale=100),),
             reference=lambda x: x.astype(np.float32).astype(np.float16).astype(np.float64),
             model=False),
    ]  # fmt: skip
    return found


def _reductions(seed: int) -> list[Case]:
    import jax.numpy as jnp

    bf16, f16 = dtype_of("bfloat16"), dtype_of("float16")
    g = "narrow reductions"

    def x(s: int, d: Any, loc: float = 0.0) -> Callable[[], tuple[np.ndarray, ...]]:
        return lambda: (normal(seed + s, *LARGE, loc=loc).astype(d),)

    return [
        Case(name="bf16_sum_all", group=g, what="sum of 65,536 bfloat16 values", fn=jnp.sum,
             inputs=x(110, bf16, 0.5)),
        Case(name="bf16_sum_rows", group=g, what="sum over rows of 256", fn=lambda a: a.sum(-1),
             inputs=x(111, bf16, 0.5)),
        Case(name="bf16_sum_cols", group=g, what="sum over columns of 256", fn=lambda a: a.sum(0),
             inputs=x(112, bf16, 0.5)),
        Case(name="bf16_mean_rows", group=g, what="mean over rows of 256", fn=lambda a: a.mean(-1),
             inputs=x(113, bf16, 0.5)),
        Case(name="bf16_var_rows", group=g, what="variance over rows of 256", fn=lambda a: a.var(-1),
             inputs=x(114, bf16, 0.5)),
        Case(name="bf16_sum_f32", group=g, what="sum over rows of 256, float32 accumulator and result",
             fn=lambda a: a.sum(-1, dtype=jnp.float32), inputs=x(115, bf16, 0.5), model=False),
        Case(name="bf16_cumsum", group=g, what="cumsum along rows of 256", fn=lambda a: jnp.cumsum(a, -1),
             inputs=x(116, bf16, 0.5)),
        Case(name="f16_sum_rows", group=g, what="float16 sum over rows of 256", fn=lambda a: a.sum(-1),
             inputs=x(117, f16, 0.5)),
        Case(name="f16_mean_rows", group=g, what="float16 mean over rows of 256", fn=lambda a: a.mean(-1),
             inputs=x(118, f16, 0.5)),
    ]  # fmt: skip


def format_cases() -> tuple[Case, ...]:
    """The formats corpus, every case with seeded inputs."""
    return tuple(_elementwise("bfloat16", 1000) + _elementwise("float16", 2000) + _f8(3000)
                 + _products(4000) + _conversions(5000) + _reductions(6000))  # fmt: skip


def run_formats(dry_run: bool, saved: dict[str, np.ndarray]) -> dict[str, Any]:
    """Every format case on the device; its outputs' bits kept in ``saved``."""
    found: dict[str, Any] = {}
    for case in format_cases():
        started = time.perf_counter()
        entry: dict[str, Any] = {"group": case.group, "what": case.what}
        try:
            args = case.inputs()
            entry["inputs"] = [{"dtype": str(a.dtype), "shape": list(a.shape), "digest": digest(a)}
                               for a in args]  # fmt: skip
            chip = on_device(case.fn, *args)
            entry["outputs"] = [{"dtype": str(a.dtype), "shape": list(a.shape)} for a in chip]
            for i, leaf in enumerate(chip):
                saved[f"chip/{case.name}/{i}"] = bits(leaf)
            host = on_cpu(case.fn, *args)
            entry["host_cpu_digests"] = [digest(a) for a in host]
            entry["host_cpu_same_bits"] = [float(np.mean(bits(a) == bits(b)))
                                           for a, b in zip(chip, host)]  # fmt: skip
        except Exception as e:  # a format the chip refuses is a measurement too
            entry["error"] = f"{type(e).__name__}: {e}"[:3000]
        entry["seconds"] = round(time.perf_counter() - started, 2)
        found[case.name] = entry
        same = entry.get("host_cpu_same_bits")
        log(
            f"formats: {case.name:24s} {entry.get('error', '')[:160] or f'same bits as cpu {same}'}"
        )
    return found


# -- part C: error per input range and conditioning ------------------------------------------------


def _ulp32(values: np.ndarray) -> np.ndarray:
    magnitude = np.maximum(np.abs(values), 2.0**-126)
    return np.asarray(2.0 ** (np.floor(np.log2(magnitude)) - 23))


def error_profile(result: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """``benchmarks/validation/chip_errors.py``'s measure: the worst error in ulp (``ulp``), that away from
    the result's zeros (``ulp_away``: results of magnitude 1/16 and more) and the absolute part
    near them in eps (``abs_eps``), so ``|err| <= ulp_away * ulp(y) + abs_eps * eps``."""
    result = np.asarray(result, np.float64)
    finite = np.isfinite(reference) & np.isfinite(result)
    err, ref = np.abs(result - reference)[finite], reference[finite]
    ulp = _ulp32(ref)
    ulps = err / ulp
    away = np.abs(ref) >= 2.0**-4
    ulp_away = float(ulps[away].max(initial=0.0))
    excess = np.maximum(err - ulp_away * ulp, 0.0)
    return {"ulp": float(ulps.max(initial=0.0)), "ulp_away": ulp_away,
            "abs_eps": float((excess / EPS32).max(initial=0.0)),
            "nonfinite_differ": int((np.isfinite(reference) != np.isfinite(result)).sum())}  # fmt: skip


RANGES: tuple[tuple[str, Sequence[tuple[float, float, bool]]], ...] = (
    ("expm1", ((-1e-3, 1e-3, False), (-1e-2, 1e-2, False), (-0.1, 0.1, False), (-1, 1, False),
               (-10, 10, False))),
    ("exp", ((-1, 1, False), (-10, 10, False), (-20, 20, False), (-80, 80, False))),
    ("log", ((0.5, 2, False), (1e-3, 1e3, True), (1e-30, 1e30, True))),
    ("log1p", ((-1e-3, 1e-3, False), (-0.5, 1, False), (-0.9, 1e3, False))),
    ("tanh", ((-0.1, 0.1, False), (-1, 1, False), (-5, 5, False))),
    ("erf_inv", ((-0.5, 0.5, False), (-0.9, 0.9, False), (-0.999, 0.999, False))),
    ("lgamma", ((1e-3, 0.5, True), (0.5, 5, False), (0.1, 20, False), (5, 100, False))),
    ("pow", ((0.5, 2, False), (0.1, 10, False))),
)  # fmt: skip
"""Each op's input ranges: ``(low, high, log-spaced)``."""


def _elementwise_op(op: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    import jax.numpy as jnp
    from jax import lax
    from scipy import special

    return {
        "expm1": (jnp.expm1, np.expm1), "exp": (jnp.exp, np.exp), "log": (jnp.log, np.log),
        "log1p": (jnp.log1p, np.log1p), "tanh": (jnp.tanh, np.tanh),
        "erf_inv": (lax.erf_inv, special.erfinv), "lgamma": (lax.lgamma, special.gammaln),
        "pow": (lax.pow, np.power),
    }[op]  # fmt: skip


def measure_elementwise_ranges() -> list[dict[str, Any]]:
    found = []
    for i, (op, ranges) in enumerate(RANGES):
        fn, ref_fn = _elementwise_op(op)
        for j, (low, high, log_spaced) in enumerate(ranges):
            args = [spread(low, high, 7000 + 10 * i + j, log=log_spaced)]
            what = f"[{low:g}, {high:g}]"
            if op == "pow":  # the exponent over [-2, 2] (narrow base) or [-4, 4]
                top = 2.0 if high <= 2 else 4.0
                args.append(spread(-top, top, 7500 + j))
                what += f" ** [{-top:g}, {top:g}]"
            with np.errstate(all="ignore"):
                reference = np.asarray(ref_fn(*[a.astype(np.float64) for a in args]))
            chip, cpu = on_device(fn, *args)[0], on_cpu(fn, *args)[0]
            entry = {"op": op, "range": [low, high], "what": what, "samples": N,
                     **error_profile(chip, reference), "cpu": error_profile(cpu, reference),
                     "same_bits_as_cpu": float(np.mean(bits(chip) == bits(cpu))),
                     "chip_vs_cpu_max_abs": float(np.nanmax(np.abs(chip.astype(np.float64) - cpu))),
                     "chip_vs_cpu_max_rel": float(np.nanmax(np.abs(chip.astype(np.float64) - cpu)
                                                            / np.maximum(np.abs(cpu), 1e-30)))}  # fmt: skip
            found.append(entry)
            log(f"ranges: {op} {what}: ulp {entry['ulp']:.1f} (away {entry['ulp_away']:.1f}, "
                f"abs {entry['abs_eps']:.2g} eps); cpu {entry['cpu']['ulp']:.1f}")  # fmt: skip
    return found


def conditioned(n: int, condition: str, seed: int, *, m: int | None = None,
                kind: str = "general") -> np.ndarray:  # fmt: skip
    """An ``m x n`` float32 matrix: ``"normal"`` (standard normal entries), ``"normal+sqrt(n)I"``
    (the shifted one the emulation corpus solves), or ``U diag(s) V^T`` with singular values
    log-spaced over ``[1, c]`` for ``condition = "c"``. ``kind``: ``"symmetric"`` (``V = U``,
    eigenvalues of either sign), ``"spd"`` (``V = U``, positive)."""
    rng = _rng(seed)
    m = n if m is None else m
    if condition in ("normal", "normal+sqrt(n)I"):
        a = rng.standard_normal((m, n)) + (
            np.sqrt(n) * np.eye(m, n) if condition != "normal" else 0
        )
        if kind == "symmetric":
            a = (a + a.T) / 2
        elif kind == "spd":
            a = a.T @ a / n + (0.1 * np.eye(n) if condition == "normal" else 0)
        return a.astype(np.float32)
    k = min(m, n)
    s = np.geomspace(1.0, float(condition), k)
    rng.shuffle(s)
    u, _ = np.linalg.qr(rng.standard_normal((m, k)))
    if kind != "general":
        signs = rng.choice([-1.0, 1.0], k) if kind == "symmetric" else np.ones(k)
        a = (u * (s * signs)) @ u.T
        return ((a + a.T) / 2).astype(np.float32)
    v, _ = np.linalg.qr(rng.standard_normal((n, k)))
    return ((u * s) @ v.T).astype(np.float32)


def _eps_max(result: Any, reference: np.ndarray) -> float:
    scale = float(np.abs(reference).max())
    return float(
        np.abs(np.asarray(result, np.complex128) - reference).max() / (EPS32 * max(scale, 1e-300))
    )


def _fixed_qr(q: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.sign(np.diag(r))
    s[s == 0] = 1
    return q * s[None, :], r * s[:, None]


def singular_values(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.linalg.svd(x, compute_uv=False)


def lower_solve(p: Any, q: Any) -> Any:
    from jax import lax

    return lax.linalg.triangular_solve(p, q, left_side=True, lower=True)


def lu(x: Any) -> Any:
    from jax import lax

    return lax.linalg.lu(x)


def _guarded(found: dict[str, Any], name: str, measure: Callable[[], Any]) -> None:
    """One measurement into ``found``; a failure recorded in its place."""
    try:
        found[name] = measure()
    except Exception as e:  # one op that fails leaves the others' numbers
        found[name] = f"{type(e).__name__}: {e}"[:300]


def _matrix_measures(a: np.ndarray, b: np.ndarray, run: Callable[..., Any]) -> dict[str, Any]:
    """Each decomposition of ``a`` on one side (``run``: the chip or the CPU), in eps times its
    largest result against float64."""
    import jax.numpy as jnp
    import scipy.linalg as sl

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    found: dict[str, Any] = {}

    def lu_measure() -> Any:
        packed, _, perm = run(lu, a)
        p_ref, l_ref, u_ref = sl.lu(a64)
        if not np.array_equal(perm, np.argmax(p_ref, axis=0)):
            return "pivots differ from LAPACK's"
        return _eps_max(packed, np.tril(l_ref, -1) + u_ref)

    def slogdet() -> Any:
        sign, logdet = run(jnp.linalg.slogdet, a)
        sign_ref, logdet_ref = np.linalg.slogdet(a64)
        found["slogdet_abs"] = float(abs(float(logdet) - logdet_ref))
        found["slogdet_sign_agrees"] = float(sign == sign_ref)
        return float(abs(float(logdet) - logdet_ref) / (EPS32 * max(abs(logdet_ref), 1.0)))

    def qr() -> Any:
        q, r = _fixed_qr(*run(jnp.linalg.qr, a))
        q_ref, r_ref = _fixed_qr(*np.linalg.qr(a64))
        found["qr_q"] = _eps_max(q, q_ref)
        return _eps_max(r, r_ref)

    low = (np.tril(a) + np.diag(np.where(np.diag(a) >= 0, 1.0, -1.0) * np.abs(a).max())).astype(
        np.float32
    )
    _guarded(found, "lu", lu_measure)
    _guarded(found, "inv", lambda: _eps_max(run(jnp.linalg.inv, a)[0], np.linalg.inv(a64)))
    _guarded(
        found, "solve", lambda: _eps_max(run(jnp.linalg.solve, a, b)[0], np.linalg.solve(a64, b64))
    )
    _guarded(found, "slogdet", slogdet)
    _guarded(found, "qr_r", qr)
    _guarded(
        found,
        "svd",
        lambda: _eps_max(run(singular_values, a)[0], np.linalg.svd(a64, compute_uv=False)),
    )
    _guarded(
        found,
        "triangular_solve",
        lambda: _eps_max(
            run(lower_solve, low, b)[0],
            sl.solve_triangular(low.astype(np.float64), b64, lower=True),
        ),
    )
    return found


def _spd_measures(sym: np.ndarray, spd: np.ndarray, run: Callable[..., Any]) -> dict[str, Any]:
    import jax.numpy as jnp

    found: dict[str, Any] = {}
    _guarded(
        found,
        "eigh",
        lambda: _eps_max(
            run(jnp.linalg.eigvalsh, sym)[0], np.linalg.eigvalsh(sym.astype(np.float64))
        ),
    )
    _guarded(
        found,
        "cholesky",
        lambda: _eps_max(
            run(jnp.linalg.cholesky, spd)[0], np.linalg.cholesky(spd.astype(np.float64))
        ),
    )
    return found


CONDITIONS = ("10", "100", "1e4", "normal", "normal+sqrt(n)I")
SIZES = (16, 64, 256)


def measure_matrices(found: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each size and conditioning, appended to ``found`` as it is measured (a run stopped
    part-way keeps what it has, :func:`step_run`)."""
    found = [] if found is None else found
    for n in SIZES:
        for k, condition in enumerate(CONDITIONS):
            a = conditioned(n, condition, 8000 + 10 * n + k)
            b = normal(8500 + n + k, n, 8)
            sym = conditioned(n, condition, 8700 + n + k, kind="symmetric")
            spd = conditioned(n, condition, 8800 + n + k, kind="spd")
            chip = {**_matrix_measures(a, b, on_device), **_spd_measures(sym, spd, on_device)}
            cpu = {**_matrix_measures(a, b, on_cpu), **_spd_measures(sym, spd, on_cpu)}
            entry = {"n": n, "condition": condition,
                     "measured_condition": float(np.linalg.cond(a.astype(np.float64))),
                     "measured_condition_spd": float(np.linalg.cond(spd.astype(np.float64))),
                     "eps_max": chip, "cpu_eps_max": cpu}  # fmt: skip
            try:  # a tall (n, n/2) matrix: qr and svd as the emulation corpus has them
                tall = conditioned(n // 2, condition, 8900 + n + k, m=n)
                entry["tall"] = {"shape": list(tall.shape), "eps_max": _tall(tall, on_device),
                                 "cpu_eps_max": _tall(tall, on_cpu)}  # fmt: skip
            except Exception as e:  # recorded; the square matrix's numbers stay
                entry["tall_error"] = f"{type(e).__name__}: {e}"[:300]
            found.append(entry)
            log(f"ranges: matrices n={n} cond {condition} ({entry['measured_condition']:.3g}): "
                + ", ".join(f"{k2} {v:.2g}" if isinstance(v, float) else f"{k2} {v}"
                            for k2, v in chip.items()))  # fmt: skip
    return found


def _tall(a: np.ndarray, run: Callable[..., Any]) -> dict[str, Any]:
    import jax.numpy as jnp

    a64 = a.astype(np.float64)
    found: dict[str, Any] = {}

    def qr() -> Any:
        q, r = _fixed_qr(*run(jnp.linalg.qr, a))
        q_ref, r_ref = _fixed_qr(*np.linalg.qr(a64))
        found["qr_q"] = _eps_max(q, q_ref)
        return _eps_max(r, r_ref)

    _guarded(found, "qr_r", qr)
    _guarded(
        found,
        "svd",
        lambda: _eps_max(run(singular_values, a)[0], np.linalg.svd(a64, compute_uv=False)),
    )
    return found


def rfft_round_trip(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.fft.irfft(jnp.fft.rfft(x), n=x.shape[-1])


def cumprod(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.cumprod(x, axis=-1)


def dot_f32(p: Any, q: Any) -> Any:
    import jax.numpy as jnp
    from jax import lax

    return lax.dot(p, q, preferred_element_type=jnp.float32)


def measure_fft() -> list[dict[str, Any]]:
    import jax.numpy as jnp

    found = []
    for n in (64, 1024, 16384):
        x = normal(9000 + n, max(1, 65536 // n), n)
        x64 = x.astype(np.float64)
        trip = rfft_round_trip
        entry = {"n": n, "rows": x.shape[0],
                 "rfft": _eps_max(on_device(jnp.fft.rfft, x)[0], np.fft.rfft(x64)),
                 "cpu_rfft": _eps_max(on_cpu(jnp.fft.rfft, x)[0], np.fft.rfft(x64)),
                 "round_trip": _eps_max(on_device(trip, x)[0], x64),
                 "cpu_round_trip": _eps_max(on_cpu(trip, x)[0], x64),
                 "round_trip_chip_vs_cpu_max_abs": float(np.abs(on_device(trip, x)[0] - on_cpu(trip, x)[0]).max())}  # fmt: skip
        found.append(entry)
        log(f"ranges: rfft {n}: {entry['rfft']:.2g} eps, round trip {entry['round_trip']:.2g}")
    return found


CUMPROD_RANGES: Mapping[str, tuple[float, bool]] = {
    "exp([-0.01, 0.01])": (0.01, False), "exp([-0.1, 0.1])": (0.1, False),
    "exp([-1, 1])": (1.0, False), "±exp([-0.1, 0.1])": (0.1, True),
}  # fmt: skip


def _cumprod_profile(result: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    err = np.abs(np.asarray(result, np.float64) - reference)
    ulps = err / _ulp32(reference)
    position = np.arange(1, reference.shape[-1] + 1)
    ok = np.isfinite(ulps) & (np.abs(reference) > 2.0**-126)
    return {"ulp": float(ulps[ok].max(initial=0.0)),
            "ulp_per_factor": float((ulps / position)[ok].max(initial=0.0))}  # fmt: skip


def measure_cumprod() -> list[dict[str, Any]]:

    found = []
    for n in (16, 128, 1024, 4096):
        for k, (name, (spread_log, signed)) in enumerate(CUMPROD_RANGES.items()):
            rng = _rng(9500 + n + k)
            x = np.exp(rng.uniform(-spread_log, spread_log, (16, n)))
            if signed:
                x *= rng.choice([-1.0, 1.0], x.shape)
            x = x.astype(np.float32)
            reference = np.cumprod(x.astype(np.float64), axis=-1)
            chip, cpu = on_device(cumprod, x)[0], on_cpu(cumprod, x)[0]
            entry = {"n": n, "range": name, **_cumprod_profile(chip, reference),
                     "cpu": _cumprod_profile(cpu, reference),
                     "same_bits_as_cpu": float(np.mean(bits(chip) == bits(cpu))),
                     "chip_vs_cpu_max_rel": float(np.nanmax(np.abs(chip.astype(np.float64) - cpu)
                                                            / np.abs(cpu.astype(np.float64))))}  # fmt: skip
            found.append(entry)
            log(
                f"ranges: cumprod {n} {name}: {entry['ulp']:.1f} ulp "
                f"({entry['ulp_per_factor']:.2f}/factor); cpu {entry['cpu']['ulp']:.1f}"
            )
    return found


def _eps_sum(result: np.ndarray, exact: np.ndarray, terms: np.ndarray) -> float:
    return float(
        (np.abs(np.asarray(result, np.float64) - exact) / (EPS32 * np.maximum(terms, 1e-30))).max()
    )


def measure_narrow_dots() -> list[dict[str, Any]]:

    bf16 = dtype_of("bfloat16")
    found = []
    for k in (16, 64, 256, 1024, 4096):
        for kind in ("bf16 x bf16 -> f32", "bf16 x f32 -> f32"):
            a = normal(9800 + k, 64, k).astype(bf16)
            b = normal(9900 + k, k, 64)
            if kind.startswith("bf16 x bf16"):
                b = b.astype(bf16)
            fn = dot_f32
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            exact, terms = a64 @ b64, np.abs(a64) @ np.abs(b64)
            b_rounded = b.astype(bf16).astype(np.float64)
            chip, cpu = on_device(fn, a, b)[0], on_cpu(fn, a, b)[0]
            entry = {"k": k, "kind": kind, "shape": f"(64,{k})@({k},64)",
                     "eps_sum": _eps_sum(chip, exact, terms), "cpu_eps_sum": _eps_sum(cpu, exact, terms),
                     "eps_sum_vs_bf16_rounded_rhs": _eps_sum(chip, a64 @ b_rounded, terms),
                     "same_bits_as_cpu": float(np.mean(chip == cpu)),
                     "chip_vs_cpu_max_abs": float(np.abs(chip - cpu).max())}  # fmt: skip
            found.append(entry)
            log(
                f"ranges: {kind} k={k}: {entry['eps_sum']:.3g} eps·Σ|terms| (cpu {entry['cpu_eps_sum']:.3g})"
            )
    return found


def run_ranges(found: dict[str, Any], save: Callable[[], None]) -> dict[str, Any]:
    """Each part of the ranges into ``found``, ``save`` called after each."""
    for name, measure in (("elementwise", measure_elementwise_ranges), ("narrow_dots", measure_narrow_dots),
                          ("cumprod", measure_cumprod), ("fft", measure_fft),
                          ("matrices", measure_matrices)):  # fmt: skip
        started = time.perf_counter()
        try:
            if measure is measure_matrices:
                found[name] = []
                measure_matrices(found[name])
            else:
                found[name] = measure()
        except Exception as e:  # a part that fails leaves the others' numbers
            found[name] = {"error": f"{type(e).__name__}: {e}"[:3000]}
            log(f"ranges: {name} failed: {e}")
        found.setdefault("seconds", {})[name] = round(time.perf_counter() - started, 2)
        save()
    return found


def step_run(out_dir: Path, *, dry_run: bool, parts: Sequence[str]) -> int:
    if dry_run:
        os.environ["JAX_PLATFORMS"] = "cpu"
    results: dict[str, Any] = {"device": device_facts(dry_run),
                               "script": "benchmarks/validation/chip_formats.py"}  # fmt: skip
    path = out_dir / "chip-formats-run.json"
    saved: dict[str, np.ndarray] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    if "formats" in parts:
        results["formats"] = run_formats(dry_run, saved)
        np.savez_compressed(out_dir / "chip-formats-outputs.npz", **saved)
        _save(path, results)
    if "ranges" in parts:
        results["ranges"] = {}

        def stopped(signum: int, frame: Any) -> None:  # `timeout`: keep what is measured
            results["ranges"]["stopped"] = f"signal {signum} part-way"
            _save(path, results)
            os._exit(3)

        signal.signal(signal.SIGTERM, stopped)
        run_ranges(results["ranges"], lambda: _save(path, results))
    _save(path, results)
    log(f"run: wrote {path}")
    return 0


# -- the analysis here ------------------------------------------------------------------------------


def _ulp_in(values: np.ndarray, dtype: Any) -> np.ndarray:
    """``dtype``'s unit in the last place at each float64 value (its subnormal step below)."""
    import ml_dtypes

    info = ml_dtypes.finfo(dtype)
    exponent = np.floor(np.log2(np.maximum(np.abs(values), float(info.smallest_normal))))
    return np.asarray(2.0 ** (exponent - info.nmant))


def leaf_comparison(chip: np.ndarray, cpu: np.ndarray, reference: np.ndarray | None,
                    models: Mapping[str, np.ndarray]) -> dict[str, Any]:  # fmt: skip
    """The chip against the CPU (mismatches per tolerance, worst errors), both against float64
    (worst error, ulp of the format, correctly rounded share) and against each model."""
    c, p = chip.astype(np.float64), cpu.astype(np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(c - p)
        finite = np.isfinite(diff)
        entry: dict[str, Any] = {
            "dtype": str(chip.dtype), "elements": int(chip.size),
            "same_bits_as_cpu": float(np.mean(bits(chip) == bits(cpu))),
            "nan_or_inf_differ": int(((np.isnan(c) != np.isnan(p)) | (np.isinf(c) != np.isinf(p))
                                      | (np.isinf(c) & np.isinf(p) & (np.sign(c) != np.sign(p)))).sum()),
            "chip_vs_cpu_max_abs": float(diff[finite].max(initial=0.0)),
            "chip_vs_cpu_max_rel": float((diff / np.abs(p))[finite & (p != 0)].max(initial=0.0)),
            "mismatches": {f"{t:g}": int((~np.isclose(c, p, rtol=t, atol=t, equal_nan=True)).sum())
                           for t in TOLERANCES},
        }  # fmt: skip
        if reference is not None:
            ref = np.asarray(reference, np.float64)
            rounded = ref.astype(chip.dtype)
            for side, value, raw in (("chip", c, chip), ("cpu", p, cpu)):
                ok = np.isfinite(ref) & np.isfinite(value)
                err = np.abs(value - ref)[ok]
                entry[f"{side}_vs_f64"] = {
                    "max_abs": float(err.max(initial=0.0)),
                    "max_ulp": float((err / _ulp_in(ref[ok], chip.dtype)).max(initial=0.0)),
                    "correctly_rounded": float(np.mean(bits(raw) == bits(rounded))),
                }
        entry["same_bits_as_model"] = {name: {"chip": float(np.mean(bits(chip) == bits(m))),
                                              "cpu": float(np.mean(bits(cpu) == bits(m)))}
                                       for name, m in models.items()}  # fmt: skip
    return entry


def _reference(case: Case, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    import jax

    with np.errstate(all="ignore"):
        wide = [np.asarray(a).astype(np.float64) for a in args]
    if case.reference is not None:
        return [np.asarray(case.reference(*wide), np.float64)]
    with jax.enable_x64(True):
        return [np.asarray(x, np.float64) for x in on_cpu(case.fn, *wide)]


def _models(case: Case, args: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
            reference: Sequence[np.ndarray]) -> list[dict[str, np.ndarray]]:  # fmt: skip
    found: list[dict[str, np.ndarray]] = [{} for _ in outputs]
    if case.model:
        once = on_cpu(case.fn, *[np.asarray(a).astype(np.float32) for a in args])
        for i, (m, out) in enumerate(zip(once, outputs)):
            found[i]["float32, rounded once"] = m.astype(out.dtype)
    for i, (ref, out) in enumerate(zip(reference, outputs)):
        with np.errstate(all="ignore"):
            found[i]["float64, correctly rounded"] = ref.astype(out.dtype)
    return found


def conversion_detail(case: Case, args: Sequence[np.ndarray], chip: np.ndarray) -> dict[str, Any]:
    """Where a conversion's result differs from the correctly rounded one, by kind of input."""
    import ml_dtypes

    with np.errstate(all="ignore"):
        x = np.asarray(args[0]).astype(np.float64)
        rne = x.astype(chip.dtype)
    differ = bits(chip) != bits(rne)
    if not differ.any():
        return {"differ_from_rne": 0}
    info = ml_dtypes.finfo(chip.dtype)
    with np.errstate(all="ignore"):
        over = np.abs(x) > float(info.max)
        below = np.abs(x) < float(info.smallest_normal)
    kinds = {"nan input": np.isnan(x), "inf input": np.isinf(x), "past the largest finite": over & np.isfinite(x),
             "subnormal or zero": below, "in range": ~(np.isnan(x) | np.isinf(x) | over | below)}  # fmt: skip
    examples = [{"input": float(x[i]), "chip": float(chip[i]), "rne": float(rne[i])}
                for i in np.flatnonzero(differ)[:8]]  # fmt: skip
    return {"differ_from_rne": int(differ.sum()),
            "by_input": {k: int((differ & v).sum()) for k, v in kinds.items()},
            "examples": examples}  # fmt: skip


SINGLE_OPS: Mapping[str, str] = {
    "div": "div", "exp": "exp", "log": "log", "tanh": "tanh", "rsqrt": "rsqrt", "sqrt": "sqrt",
    "sigmoid": "logistic",
}  # fmt: skip
"""The narrow elementwise cases of one op, by case suffix, and the op's primitive."""


def narrow_flips(case: Case, args: Sequence[np.ndarray], chip: np.ndarray) -> dict[str, Any] | None:
    """A one-op narrow case: the elements the chip rounds to the other neighbour of this
    CPU's float32 result, and how far that float32 result is from the midpoint the chip's
    must have crossed, in float32 ulps (its error before rounding was at least that:
    ``calibration/calibrate.py chip-errors`` bounds the op in that format where the float32
    bound does not cover it)."""
    prefix, _, suffix = case.name.partition("_")
    if prefix not in ("bf16", "f16") or suffix not in SINGLE_OPS:
        return None
    wide = on_cpu(case.fn, *[np.asarray(a).astype(np.float32) for a in args])[0].ravel()
    stored = chip.ravel()
    rounded = wide.astype(stored.dtype)
    flipped = (bits(rounded) != bits(stored)) & np.isfinite(wide)
    found: dict[str, Any] = {"op": SINGLE_OPS[suffix], "dtype": str(stored.dtype),
                             "elements": int(stored.size), "flips": int(flipped.sum()), "needed_ulps": 0.0}  # fmt: skip
    if flipped.any():
        middle = (rounded[flipped].astype(np.float64) + stored[flipped].astype(np.float64)) / 2
        ulp = np.spacing(np.abs(wide[flipped]).astype(np.float32)).astype(np.float64)
        found["needed_ulps"] = float(
            (np.abs(wide[flipped].astype(np.float64) - middle) / ulp).max()
        )
    return found


def emulated_formats(case: Case, args: Sequence[np.ndarray], chip: Sequence[np.ndarray],
                     cpu: Sequence[np.ndarray]) -> dict[str, Any]:  # fmt: skip
    """pytest-jaxport's tpu emulation of ``case`` against this CPU's outputs at each
    tolerance (its state: ``match``, ``mismatch``, ``may differ``; how it stands against the
    chip's verdict), and the share of the chip's elements its outputs equal bit for bit."""
    import jax

    from pytest_jaxport._jax.emulate import emulate

    try:  # run as a module from the repository's root, or as a script beside chip_checks.py
        from benchmarks.validation.chip_checks import emulated_verdicts, judge
    except ModuleNotFoundError:
        from chip_checks import emulated_verdicts, judge  # type: ignore[import-not-found,no-redef]

    tolerances = [(f"{t:g}", t) for t in TOLERANCES]
    device = jax.devices("cpu")[0]
    with jax.default_device(device):  # this CPU's outputs in their tree (``cpu``: its leaves)
        cpu_value = jax.jit(case.fn)(*jax.device_put(tuple(args), device))
    found: dict[str, Any] = {"states": emulated_verdicts(case.fn, args, cpu_value, tolerances)}
    found["judged"] = {
        name: judge(all(np.isclose(c.astype(np.float64), p.astype(np.float64), rtol=t, atol=t,
                                   equal_nan=True).all() for c, p in zip(chip, cpu)),
                    found["states"][name]["state"])
        for name, t in tolerances
    }  # fmt: skip
    value = emulate(case.fn, tuple(args), platform="tpu").value
    if value is not None:
        leaves = [np.asarray(v) for v in jax.tree_util.tree_leaves(value)]
        found["same_bits_as_chip"] = [float(np.mean(bits(e) == bits(c)))
                                      for e, c in zip(leaves, chip)]  # fmt: skip
    return found


def analyse_formats(
    run: Mapping[str, Any], npz: Path, saved: dict[str, np.ndarray], *, emulate: bool = False
) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with np.load(npz) as data:
        chip_raw = {k: data[k] for k in data.files}
    for case in format_cases():
        recorded = run.get("formats", {}).get(case.name)
        if recorded is None or "error" in recorded:
            found[case.name] = {"group": case.group, "what": case.what,
                                "chip_error": None if recorded is None else recorded["error"]}  # fmt: skip
            continue
        args = case.inputs()
        entry: dict[str, Any] = {"group": case.group, "what": case.what,
                                 "inputs_as_recorded": [digest(a) for a in args]
                                 == [i["digest"] for i in recorded["inputs"]]}  # fmt: skip
        chip = [unbits(chip_raw[f"chip/{case.name}/{i}"], o["dtype"])
                for i, o in enumerate(recorded["outputs"])]  # fmt: skip
        cpu = on_cpu(case.fn, *args)
        entry["cpu_here_same_as_chip_host_cpu"] = [digest(a) for a in cpu] == recorded[
            "host_cpu_digests"
        ]
        reference = _reference(case, args)
        models = _models(case, args, cpu, reference)
        entry["outputs"] = [
            leaf_comparison(c, p, r, m) for c, p, r, m in zip(chip, cpu, reference, models)
        ]
        if case.group == "conversions":
            entry["conversion"] = conversion_detail(case, args, chip[0])
        flips = narrow_flips(case, args, chip[0])
        if flips is not None:
            entry["narrow_op"] = flips
        if emulate:
            entry["emulated"] = emulated_formats(case, args, chip, cpu)
        for i, (c, p) in enumerate(zip(chip, cpu)):
            saved[f"chip/{case.name}/{i}"] = bits(c)
            saved[f"cpu_xor_chip/{case.name}/{i}"] = bits(p) ^ bits(c)
        found[case.name] = entry
        out = entry["outputs"][0]
        judged = entry.get("emulated", {}).get("judged", {})
        log(f"analyse: {case.name:24s} mismatches {out['mismatches']} same bits "
            f"{out['same_bits_as_cpu']:.3f}" + (f" judged {list(judged.values())}" if judged else ""))  # fmt: skip
    return found


def _up(value: float) -> float:
    """Rounded up to two significant digits (``calibration/calibrate.py``'s rounding)."""
    if value <= 0:
        return 0.0
    digits = 1 - math.floor(math.log10(value))
    return math.ceil(value * 10**digits) / 10**digits


MATRIX_OPS: Mapping[str, tuple[str, ...]] = {
    "lu": ("lu", "inv", "solve"), "qr": ("qr_r",), "svd": ("svd",), "eigh": ("eigh",),
    "cholesky": ("cholesky",), "triangular_solve": ("triangular_solve",),
}  # fmt: skip
"""Each primitive's bound and the measurements that make it (``calibrate.py``'s choice)."""


def bounds_by_range(ranges: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The per-range bounds, in ``chip_errors.json``'s entry format, with the CPU's beside."""
    ops: dict[str, list[dict[str, Any]]] = {}
    for e in ranges.get("elementwise", []):
        ops.setdefault(e["op"], []).append({
            "range": e["range"], "scale": "result", "ulps": _up(e["ulp_away"]),
            "abs_eps": _up(e["abs_eps"]), "worst_ulp": _up(e["ulp"]),
            "cpu_worst_ulp": _up(e["cpu"]["ulp"]), **({"exponent": e["what"].split("** ")[1]} if "**" in e["what"] else {})})  # fmt: skip
    for e in ranges.get("matrices", []):
        for op, names in MATRIX_OPS.items():
            values = [v for n in names if isinstance(v := e["eps_max"].get(n), float)]
            cpu = [v for n in names if isinstance(v := e["cpu_eps_max"].get(n), float)]
            if values and cpu:
                ops.setdefault(op, []).append({
                    "condition": e["condition"], "measured_condition": float(f"{e['measured_condition']:.3g}"),
                    "n": e["n"], "scale": "largest", "ulps": _up(max(values)), "cpu_ulps": _up(max(cpu))})  # fmt: skip
        for op in ("inv", "slogdet"):
            if not isinstance(e["eps_max"].get(op), float) or not isinstance(
                e["cpu_eps_max"].get(op), float
            ):
                continue
            ops.setdefault(f"{op} (end to end)", []).append({
                "condition": e["condition"], "n": e["n"], "scale": "largest",
                "ulps": _up(e["eps_max"][op]), "cpu_ulps": _up(e["cpu_eps_max"][op])})  # fmt: skip
        if "tall" in e:
            for op, key in (("qr", "qr_r"), ("svd", "svd")):
                if not isinstance(e["tall"]["eps_max"].get(key), float):
                    continue
                ops.setdefault(op, []).append({"condition": e["condition"], "n": e["n"], "shape": e["tall"]["shape"],
                                "scale": "largest", "ulps": _up(e["tall"]["eps_max"][key]),
                                "cpu_ulps": _up(e["tall"]["cpu_eps_max"][key])})  # fmt: skip
    for e in ranges.get("fft", []):
        ops.setdefault("fft", []).append({"length": e["n"], "scale": "largest", "ulps": _up(e["rfft"]),
                                          "cpu_ulps": _up(e["cpu_rfft"])})  # fmt: skip
        ops.setdefault("rfft round trip (end to end)", []).append({
            "length": e["n"], "scale": "largest", "ulps": _up(e["round_trip"]),
            "cpu_ulps": _up(e["cpu_round_trip"])})  # fmt: skip
    for e in ranges.get("cumprod", []):
        ops.setdefault("cumprod", []).append({
            "length": e["n"], "values": e["range"], "scale": "result", "ulps": _up(e["ulp"]),
            "ulps_per_factor": _up(e["ulp_per_factor"]), "cpu_ulps": _up(e["cpu"]["ulp"])})  # fmt: skip
    for e in ranges.get("narrow_dots", []):
        ops.setdefault(f"dot_general {e['kind']}", []).append({
            "k": e["k"], "scale": "terms", "ulps": _up(e["eps_sum"]), "cpu_ulps": _up(e["cpu_eps_sum"])})  # fmt: skip
    return ops


def load_recorded(npz: Path, results: Mapping[str, Any]) -> dict[str, dict[str, list[np.ndarray]]]:
    """``analyse``'s recorded outputs: per case, the chip's and the CPU's, in their dtypes."""
    found: dict[str, dict[str, list[np.ndarray]]] = {}
    with np.load(npz) as data:
        for name, entry in results["formats"].items():
            if "outputs" not in entry:
                continue
            chip, cpu = [], []
            for i, leaf in enumerate(entry["outputs"]):
                raw = data[f"chip/{name}/{i}"]
                chip.append(unbits(raw, leaf["dtype"]))
                cpu.append(unbits(raw ^ data[f"cpu_xor_chip/{name}/{i}"], leaf["dtype"]))
            found[name] = {"chip": chip, "cpu": cpu}
    return found


def step_analyse(run_path: Path, npz: Path, out: Path, *, emulate: bool = False) -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    run = json.loads(run_path.read_text())
    run = run.get("run", run)  # analyse's own results hold the run they were made from
    saved: dict[str, np.ndarray] = {}
    results: dict[str, Any] = {
        "about": "Formats the chip computes differently from the CPU (issue 55 item 9): "
                 "benchmarks/validation/chip_formats.py",
        "device": run["device"], "host": device_facts(dry_run=True) | {"kind": "cpu"},
        "tolerances": "a mismatch: |chip - cpu| > t + t * |cpu| (numpy.isclose, nan equal to nan)",
        "formats": analyse_formats(run, npz, saved, emulate=emulate),
    }  # fmt: skip
    results["summary"] = formats_summary(results["formats"])
    results["run"] = run
    _save(out.with_suffix(".json"), results)
    np.savez_compressed(out.with_suffix(".npz"), **saved)
    if "ranges" in run:
        device = run["device"]
        kind = re.sub(r"[^a-z0-9]+", "-", str(device.get("kind", "")).lower()).strip("-")
        bounds = {"about": "The chip's error against float64 per input range, conditioning or "
                           "length, in pytest_jaxport/chip_errors.json's entry format (scale, ulps, "
                           "abs_eps, worst_ulp), measured by benchmarks/validation/chip_formats.py run "
                           "(ranges); cpu_* is the CPU's for the same inputs.",
                  "tpu": {"device": device.get("kind"), "jax": device.get("jax"),
                          "libtpu": device.get("libtpu"), "date": device.get("date"),
                          "script": "benchmarks/validation/chip_formats.py",
                          "ops": bounds_by_range(run["ranges"])},
                  "measured": run["ranges"]}  # fmt: skip
        _save(out.parent / f"chip-bounds-by-range-{kind}.json", bounds)
        results["bounds_file"] = f"chip-bounds-by-range-{kind}.json"
        out.with_suffix(".md").write_text(markdown(results, bounds["tpu"]["ops"]))
    else:
        out.with_suffix(".md").write_text(markdown(results, {}))
    log(f"analyse: wrote {out}.json/.md/.npz")
    return 0


def formats_summary(formats: Mapping[str, Any]) -> dict[str, Any]:
    """Per group: cases, and elements that mismatch the CPU at each tolerance (all outputs)."""
    found: dict[str, Any] = {}
    for name, entry in formats.items():
        group = found.setdefault(entry["group"], {"cases": 0, "refused_by_chip": [], "elements": 0,
                                                  "cases_differing": {f"{t:g}": 0 for t in TOLERANCES},
                                                  "mismatches": {f"{t:g}": 0 for t in TOLERANCES}})  # fmt: skip
        group["cases"] += 1
        if "outputs" not in entry:
            group["refused_by_chip"].append(name)
            continue
        for t in TOLERANCES:
            count = sum(o["mismatches"][f"{t:g}"] for o in entry["outputs"])
            group["mismatches"][f"{t:g}"] += count
            group["cases_differing"][f"{t:g}"] += int(count > 0)
        group["elements"] += sum(o["elements"] for o in entry["outputs"])
        judged = entry.get("emulated", {}).get("judged")
        if judged:
            emulated = group.setdefault("emulation", {f"{t:g}": {"agrees": 0, "missed": 0,
                                        "false alarm": 0, "not emulated": 0} for t in TOLERANCES})  # fmt: skip
            for t in TOLERANCES:
                emulated[f"{t:g}"][judged[f"{t:g}"]] += 1
    return found


def markdown(results: Mapping[str, Any], bounds: Mapping[str, Any]) -> str:
    device = results["device"]
    lines = ["# Formats the chip computes differently from the CPU", "",
             f"Chip: {device.get('kind')} (jax {device.get('jax')}, libtpu {device.get('libtpu')}, "
             f"{device.get('date')}); CPU: JAX on the CPU machine. A mismatch is an element with "
             "|chip − cpu| > t + t·|cpu| at rtol = atol = t. Script: "
             "`benchmarks/validation/chip_formats.py`.", "",
             "| group | cases | elements | " + " | ".join(f"mismatches at {t:g}" for t in TOLERANCES) + " |",
             "|---|---|---|" + "---|" * len(TOLERANCES)]  # fmt: skip
    for group, s in results["summary"].items():
        lines.append(f"| {group} | {s['cases']} | {s['elements']} | "
                     + " | ".join(f"{s['mismatches'][f'{t:g}']} ({s['cases_differing'][f'{t:g}']} cases)"
                                  for t in TOLERANCES) + " |")  # fmt: skip
    if any("emulation" in s for s in results["summary"].values()):
        lines += ["", "pytest-jaxport's tpu emulation against the chip, per group: cases where the chip "
                  "differs and the emulation reads `match` (missed), where the chip matches and it "
                  "does not (false alarm).", "",
                  "| group | " + " | ".join(f"missed at {t:g}" for t in TOLERANCES) + " | "
                  + " | ".join(f"false alarm at {t:g}" for t in TOLERANCES) + " |",
                  "|---|" + "---|" * (2 * len(TOLERANCES))]  # fmt: skip
        for group, s in results["summary"].items():
            e = s.get("emulation", {})
            lines.append(f"| {group} | " + " | ".join(str(e.get(f"{t:g}", {}).get("missed", "")) for t in TOLERANCES)
                         + " | " + " | ".join(str(e.get(f"{t:g}", {}).get("false alarm", "")) for t in TOLERANCES)
                         + " |")  # fmt: skip
    lines += ["", "Per case (first output): mismatching elements at each tolerance, the worst "
              "chip − cpu, and the share of the chip's elements equal bit for bit to the CPU's, to the "
              "expression computed in float32 and rounded once, and to the float64 result correctly "
              "rounded.", "",
              "| case | dtype | " + " | ".join(f"{t:g}" for t in TOLERANCES)
              + " | worst abs | worst rel | = cpu | = f32 once | = f64 rounded |",
              "|---|---|" + "---|" * len(TOLERANCES) + "---|---|---|---|---|"]  # fmt: skip
    for name, entry in results["formats"].items():
        if "outputs" not in entry:
            lines.append(f"| {name} | refused by the chip: {str(entry.get('chip_error'))[:120]} |")
            continue
        o = entry["outputs"][0]
        models = o["same_bits_as_model"]
        once = models.get("float32, rounded once", {}).get("chip")
        rne = models.get("float64, correctly rounded", {}).get("chip")
        lines.append(
            f"| {name} | {o['dtype']} | " + " | ".join(str(o["mismatches"][f"{t:g}"]) for t in TOLERANCES)
            + f" | {o['chip_vs_cpu_max_abs']:.3g} | {o['chip_vs_cpu_max_rel']:.3g} | {o['same_bits_as_cpu']:.3f} | "
            + ("" if once is None else f"{once:.3f}") + " | " + ("" if rne is None else f"{rne:.3f}") + " |"
        )  # fmt: skip
    if bounds:
        lines += ["", "## The chip's error per range, conditioning and length",
                  "", f"From `{results.get('bounds_file')}` (bounds rounded up to two digits; "
                  "`result`: ulp of each result (away from zeros) + abs_eps·eps near them; "
                  "`largest`: eps × the largest result; `terms`: eps × Σ|terms|).", "",
                  "| op | where | scale | chip | cpu |", "|---|---|---|---|---|"]  # fmt: skip
        for op, entries in bounds.items():
            for e in entries:
                where = ", ".join(f"{k} {e[k]}" for k in ("range", "exponent", "condition", "n", "shape",
                                                         "length", "values", "k") if k in e)  # fmt: skip
                chip = f"{e['ulps']:g}" + (f" (+{e['abs_eps']:g} eps, worst {e['worst_ulp']:g})"
                                          if e.get("abs_eps") else "")  # fmt: skip
                if "ulps_per_factor" in e:
                    chip += f" ({e['ulps_per_factor']:g}/factor)"
                cpu = e.get("cpu_worst_ulp", e.get("cpu_ulps"))
                lines.append(f"| {op} | {where} | {e['scale']} | {chip} | {cpu:g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("run", "analyse"))
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="no TPU: the CPU stands in")
    parser.add_argument("--parts", default="formats,ranges")
    parser.add_argument("--run", type=Path, help="analyse: the run's JSON")
    parser.add_argument("--outputs", type=Path, help="analyse: the run's npz")
    parser.add_argument("--out", type=Path, help="analyse: the results' stem")
    parser.add_argument("--emulate", action="store_true",
                        help="analyse: add pytest-jaxport's tpu emulation's verdicts")  # fmt: skip
    args = parser.parse_args(argv)
    if args.step == "run":
        return step_run(args.out_dir, dry_run=args.dry_run, parts=tuple(args.parts.split(",")))
    return step_analyse(args.run, args.outputs, args.out, emulate=args.emulate)


if __name__ == "__main__":
    raise SystemExit(main())
