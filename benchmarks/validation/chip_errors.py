"""The error of each operation on a TPU, measured against float64 (issue 49): what the tpu
emulation bounds where it cannot compute as the chip does.

    python -m benchmarks.validation.chip_errors --out-dir DIR            # on a TPU host
    python -m benchmarks.validation.chip_errors --out-dir DIR --dry-run  # anywhere: the CPU stands in

Writes ``DIR/chip-errors.json``: the device (kind, jax, jaxlib, libtpu and its build), and

- **elementwise** float32 operations, each on 65,536 inputs over a stated range, against
  float64 (NumPy, SciPy): the worst error in units in the last place of the result (``ulp``),
  split into a part relative to the result away from its zeros (``ulp_away``: results of
  magnitude 1/16 and more) and an absolute part near them (``abs_eps``: in units of float32's
  epsilon, 2**-23), so that ``|error| <= ulp_away * ulp(y) + abs_eps * eps`` holds for every
  input measured; the CPU's numbers beside them;
- **exact** operations: the share of results bit for bit equal to the CPU's (IEEE arithmetic
  both sides), and whether subnormal results are flushed;
- **reductions** (sum along either axis, cumsum) and the float32 accumulation of **dots**
  and **convolutions**: the worst error in units of ``eps * sum(|terms|)``; each product
  also against the models of how a chip may multiply (float32, one, three and six bfloat16
  passes), the closest named;
- **decompositions and transforms** (eigh, svd, qr, cholesky, solve, inv, triangular solve,
  FFTs): the worst error in units of ``eps * max|result|``, and whether eigenvector and QR
  signs agree with the CPU's.

``python calibration/calibrate.py chip-errors DIR/chip-errors.json`` turns a TPU's file into
the bounds the plugin ships (``pytest_jaxport/chip_errors.json``). A dry run writes the same
file with the device "not measured: no TPU".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform as platform_module
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

EPS32 = 2.0**-23
NOT_MEASURED = "not measured: no TPU"
SCHEMA_VERSION = 1
SAMPLES = 65536


def device_facts(dry_run: bool) -> dict[str, Any]:
    """The device, JAX, jaxlib and libtpu (the compiled result follows libtpu)."""
    import importlib.metadata as metadata

    import jax

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    facts: dict[str, Any] = {
        "jax": jax.__version__,
        "jaxlib": version("jaxlib"),
        "libtpu": version("libtpu") or version("libtpu-nightly"),
        "python": sys.version.split()[0],
        "machine": platform_module.machine(),
        "date": dt.date.today().isoformat(),
    }
    if dry_run:
        return {**facts, "kind": NOT_MEASURED, "platform": "cpu"}
    device = jax.devices()[0]
    facts.update(kind=device.device_kind, platform=device.platform)
    with contextlib.suppress(Exception):  # not every client says
        facts["platform_version"] = device.client.platform_version
    return facts


# -- running on the device and on the CPU -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Runner:
    """Runs a function on the device under test and on the host CPU."""

    dry_run: bool

    def device(self, fn: Callable[..., Any], *args: Any) -> Any:
        import jax

        if self.dry_run:
            return self.cpu(fn, *args)
        return jax.tree_util.tree_map(np.asarray, jax.jit(fn)(*args))

    def cpu(self, fn: Callable[..., Any], *args: Any) -> Any:
        import jax

        cpu = jax.devices("cpu")[0]
        with jax.default_device(cpu):
            placed = jax.device_put(args, cpu)
            return jax.tree_util.tree_map(np.asarray, jax.jit(fn)(*placed))


# -- elementwise -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Elementwise:
    op: str
    """The JAX primitive."""
    fn: Callable[..., Any]
    reference: Callable[..., Any]
    low: float
    high: float
    arity: int = 1
    log_spaced: bool = False


def _elementwise() -> tuple[Elementwise, ...]:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from scipy import special

    return (
        Elementwise("exp", jnp.exp, np.exp, -20, 20),
        Elementwise("exp2", jnp.exp2, np.exp2, -30, 30),
        Elementwise("log", jnp.log, np.log, 1e-3, 1e3, log_spaced=True),
        Elementwise("log1p", jnp.log1p, np.log1p, -0.9, 1e3),
        Elementwise("expm1", jnp.expm1, np.expm1, -10, 10),
        Elementwise("tanh", jnp.tanh, np.tanh, -5, 5),
        Elementwise("logistic", jax.nn.sigmoid, special.expit, -20, 20),
        Elementwise("erf", lax.erf, special.erf, -4, 4),
        Elementwise("erfc", lax.erfc, special.erfc, -4, 9),
        Elementwise("erf_inv", lax.erf_inv, special.erfinv, -0.999, 0.999),
        Elementwise("sin", jnp.sin, np.sin, -100, 100),
        Elementwise("cos", jnp.cos, np.cos, -100, 100),
        Elementwise("tan", jnp.tan, np.tan, -1.5, 1.5),
        Elementwise("atan", jnp.arctan, np.arctan, -100, 100),
        Elementwise("asin", jnp.arcsin, np.arcsin, -1, 1),
        Elementwise("acos", jnp.arccos, np.arccos, -1, 1),
        Elementwise("sinh", jnp.sinh, np.sinh, -10, 10),
        Elementwise("cosh", jnp.cosh, np.cosh, -10, 10),
        Elementwise("asinh", jnp.arcsinh, np.arcsinh, -100, 100),
        Elementwise("acosh", jnp.arccosh, np.arccosh, 1, 100),
        Elementwise("atanh", jnp.arctanh, np.arctanh, -0.99, 0.99),
        Elementwise("sqrt", jnp.sqrt, np.sqrt, 1e-3, 1e3, log_spaced=True),
        Elementwise("rsqrt", lax.rsqrt, lambda x: 1 / np.sqrt(x), 1e-3, 1e3, log_spaced=True),
        Elementwise("cbrt", jnp.cbrt, np.cbrt, -1e3, 1e3),
        Elementwise("lgamma", lax.lgamma, special.gammaln, 0.1, 20),
        Elementwise("digamma", lax.digamma, special.digamma, 0.1, 20),
        Elementwise("div", lax.div, np.divide, -10, 10, arity=2),
        Elementwise("pow", lax.pow, np.power, 0.1, 10, arity=2),
        Elementwise("atan2", lax.atan2, np.arctan2, -10, 10, arity=2),
        Elementwise("rem", lax.rem, np.fmod, -100, 100, arity=2),
    )


def _inputs(case: Elementwise, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    half = SAMPLES // 2
    out = []
    for _ in range(case.arity):
        if case.log_spaced:
            grid = np.geomspace(case.low, case.high, half)
            rand = np.exp(rng.uniform(np.log(case.low), np.log(case.high), SAMPLES - half))
        else:
            grid = np.linspace(case.low, case.high, half)
            rand = rng.uniform(case.low, case.high, SAMPLES - half)
        values = np.concatenate([grid, rand]).astype(np.float32)
        out.append(rng.permutation(values) if out else values)
    if case.op in ("pow",):  # base in range, exponent in [-4, 4]
        out[1] = (out[1] - 5.05) * (4 / 4.95)
        out[1] = out[1].astype(np.float32)
    if case.op in ("div", "rem"):  # no division by (nearly) zero
        out[1] = np.where(np.abs(out[1]) < 0.1, np.float32(0.1), out[1]).astype(np.float32)
    return out


def _ulp(values: np.ndarray) -> np.ndarray:
    """float32's unit in the last place at each float64 value (normal numbers only)."""
    magnitude = np.maximum(np.abs(values), 2.0**-126)
    exponent = np.floor(np.log2(magnitude))
    return np.asarray(2.0 ** (exponent - 23))


def error_profile(result: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """The worst error in ulp, and the two-part bound ``ulp_away * ulp(y) + abs_eps * eps``."""
    result = result.astype(np.float64)
    finite = np.isfinite(reference) & np.isfinite(result)
    err = np.abs(result - reference)[finite]
    ref = reference[finite]
    ulp = _ulp(ref)
    ulps = err / ulp
    away = np.abs(ref) >= 2.0**-4
    ulp_away = float(ulps[away].max(initial=0.0))
    excess = np.maximum(err - ulp_away * ulp, 0.0)
    return {
        "ulp": float(ulps.max(initial=0.0)),
        "ulp_away": ulp_away,
        "abs_eps": float((excess / EPS32).max(initial=0.0)),
        "nonfinite_differ": int((np.isfinite(reference) != np.isfinite(result)).sum()),
    }


def measure_elementwise(runner: Runner) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for i, case in enumerate(_elementwise()):
        args = _inputs(case, seed=100 + i)
        with np.errstate(all="ignore"):
            reference = np.asarray(case.reference(*[a.astype(np.float64) for a in args]))
        chip = runner.device(case.fn, *args)
        cpu = runner.cpu(case.fn, *args)
        entry = {"range": [case.low, case.high], "samples": SAMPLES,
                 **error_profile(chip, reference),
                 "cpu": error_profile(cpu, reference),
                 "same_bits_as_cpu": float(np.mean(chip.view(np.uint32) == cpu.view(np.uint32)))}  # fmt: skip
        found[case.op] = entry
        print(f"  {case.op:9s} ulp {entry['ulp']:10.1f} (away {entry['ulp_away']:8.1f}, "
              f"abs {entry['abs_eps']:8.1f} eps); cpu {entry['cpu']['ulp']:.1f}", flush=True)  # fmt: skip
    return found


def measure_exact(runner: Runner) -> dict[str, Any]:
    """IEEE operations: the share of results equal to the CPU's bit for bit."""
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(7)
    x = rng.standard_normal(SAMPLES).astype(np.float32) * 100
    y = rng.standard_normal(SAMPLES).astype(np.float32)
    ops: dict[str, Callable[..., Any]] = {
        "add": lax.add, "sub": lax.sub, "mul": lax.mul, "max": lax.max, "min": lax.min,
        "integer_pow": lambda a, b: lax.integer_pow(a, 3), "square": lambda a, b: a * a,
        "convert_bfloat16": lambda a, b: a.astype(jnp.bfloat16).astype(jnp.float32),
        "round": lambda a, b: jnp.round(a), "floor": lambda a, b: jnp.floor(a),
        "rem": lax.rem, "fma_shape": lambda a, b: a * b + a,
    }  # fmt: skip
    found: dict[str, Any] = {}
    for name, fn in ops.items():
        chip, cpu = runner.device(fn, x, y), runner.cpu(fn, x, y)
        found[name] = {
            "same_bits_as_cpu": float(np.mean(chip.view(np.uint32) == cpu.view(np.uint32)))
        }
    chip = runner.device(lambda a, b: a * b + a, x, y)
    separate = (x * y) + x  # numpy: the product rounded, then the sum
    found["fma_shape"]["same_bits_as_separate_rounding"] = float(np.mean(chip == separate))
    import ml_dtypes

    chip = runner.device(lambda a: a.astype(jnp.bfloat16), x)
    found["convert_to_bfloat16"] = {"same_bits_as_rne": float(np.mean(
        np.asarray(chip).view(np.uint16) == x.astype(ml_dtypes.bfloat16).view(np.uint16)))}  # fmt: skip
    chip = runner.device(lambda a: a.astype(jnp.bfloat16).astype(jnp.float32), x)
    found["convert_bfloat16"]["same_bits_as_input"] = float(np.mean(chip == x))
    tiny = np.full(16, 2.0**-100, np.float32)
    chip = runner.device(lambda a: a * np.float32(2.0**-40), tiny)
    cpu = runner.cpu(lambda a: a * np.float32(2.0**-40), tiny)
    found["subnormal_results"] = {"device": float(chip[0]), "cpu": float(cpu[0]),
                                  "exact": 2.0**-140}  # fmt: skip
    return found


# -- reductions ------------------------------------------------------------------------------


def _scaled(err: np.ndarray, scale: np.ndarray) -> float:
    return float((np.abs(err) / (EPS32 * np.maximum(scale, 1e-30))).max(initial=0.0))


def measure_reductions(runner: Runner) -> dict[str, Any]:
    import jax.numpy as jnp

    found: dict[str, Any] = {"reduce_sum": {}, "cumsum": {}}
    for rows, n, axis in ((64, 8, 1), (64, 128, 1), (64, 1024, 1), (64, 4096, 1), (4, 65536, 1),
                          (4096, 64, 0), (65536, 4, 0)):  # fmt: skip
        x = np.random.default_rng(n + axis).standard_normal((rows, n)).astype(np.float32)
        if axis == 0:
            x = np.ascontiguousarray(x.reshape(n, rows) if rows != n else x.T)
        chip = runner.device(lambda a, ax=axis: jnp.sum(a, axis=ax), x)
        cpu = runner.cpu(lambda a, ax=axis: jnp.sum(a, axis=ax), x)
        ref = x.astype(np.float64).sum(axis=axis)
        scale = np.abs(x.astype(np.float64)).sum(axis=axis)
        found["reduce_sum"][f"{x.shape[0]}x{x.shape[1]} axis {axis}"] = {
            "eps_sum": _scaled(chip - ref, scale), "cpu_eps_sum": _scaled(cpu - ref, scale),
            "same_bits_as_cpu": float(np.mean(chip.view(np.uint32) == cpu.view(np.uint32))),
        }  # fmt: skip
    for rows, n, axis in ((4, 128, 1), (4, 4096, 1), (2, 65536, 1), (4, 1000, 1), (4096, 4, 0),
                          (64, 256, 0)):  # fmt: skip
        shape = (rows, n) if axis == 1 else (n * 0 + rows, n)
        x = np.random.default_rng(3 * n + axis).standard_normal(shape).astype(np.float32)
        chip = runner.device(lambda a, ax=axis: jnp.cumsum(a, axis=ax), x)
        cpu = runner.cpu(lambda a, ax=axis: jnp.cumsum(a, axis=ax), x)
        x64 = x.astype(np.float64)
        ref, scale = np.cumsum(x64, axis=axis), np.cumsum(np.abs(x64), axis=axis)
        entry = {"eps_sum": _scaled(chip - ref, scale), "cpu_eps_sum": _scaled(cpu - ref, scale),
                 "same_bits_as_cpu": float(np.mean(chip.view(np.uint32) == cpu.view(np.uint32)))}  # fmt: skip
        if axis == 1:
            for block in (128, 1024):
                model = _blocked_cumsum(x, block)
                entry[f"same_bits_as_blocked_{block}"] = float(
                    np.mean(chip.view(np.uint32) == model.view(np.uint32))
                )
        moved = np.moveaxis(x, axis, -1)
        model = np.moveaxis(_recursive_cumsum(moved), -1, axis)
        entry["same_bits_as_recursive_128"] = float(np.mean(chip == model))
        entry["same_bits_as_sequential"] = float(
            np.mean(chip == np.cumsum(x, axis=axis, dtype=np.float32))
        )
        if axis == 1:
            reverse = runner.device(lambda a: jnp.flip(jnp.cumsum(jnp.flip(a, 1), axis=1), 1), x)
            model = np.flip(_recursive_cumsum(np.flip(x, 1)), 1)
            entry["reverse_same_bits_as_recursive_128"] = float(np.mean(reverse == model))
        found["cumsum"][f"{shape[0]}x{shape[1]} axis {axis}"] = entry
    return found


def _recursive_cumsum(x: np.ndarray, block: int = 128) -> np.ndarray:
    """cumsum along the last axis in blocks of ``block`` (in order inside, zero-padded at the
    end), the block totals' running sum made the same way and added: the tpu emulation's
    model (``pytest_jaxport._jax.emulate``), in float32."""
    *lead, n = x.shape
    if n <= block:
        return np.cumsum(x, axis=-1, dtype=np.float32)
    blocks = -(-n // block)
    padded = np.concatenate([x, np.zeros((*lead, blocks * block - n), np.float32)], axis=-1)
    inside = np.cumsum(padded.reshape(*lead, blocks, block), axis=-1, dtype=np.float32)
    carried = _recursive_cumsum(inside[..., -1], block)
    before = np.concatenate([np.zeros((*lead, 1), np.float32), carried[..., :-1]], axis=-1)
    return (inside + before[..., None]).astype(np.float32).reshape(*lead, blocks * block)[..., :n]


def _blocked_cumsum(x: np.ndarray, block: int) -> np.ndarray:
    """cumsum along the last axis in blocks (sequential inside, block totals carried), in
    float32: the shape of the TPU compiler's reduce-window (two levels)."""
    rows, n = x.shape
    if n % block:
        return np.cumsum(x, axis=1, dtype=np.float32)
    parts = x.reshape(rows, n // block, block)
    inside = np.cumsum(parts, axis=2, dtype=np.float32)
    totals = inside[:, :, -1]
    carried = np.concatenate(
        [np.zeros((rows, 1), np.float32), np.cumsum(totals, axis=1, dtype=np.float32)[:, :-1]],
        axis=1,
    )
    return (inside + carried[:, :, None]).astype(np.float32).reshape(rows, n)


# -- dots and convolutions ----------------------------------------------------------------------


def _bf16(x: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def _split(x: np.ndarray, parts: int) -> list[np.ndarray]:
    pieces, rest = [], np.asarray(x, np.float64)
    for _ in range(parts):
        piece = _bf16(rest.astype(np.float32))
        pieces.append(piece)
        rest = rest - piece
    return pieces


def _truncated(x: np.ndarray) -> np.ndarray:
    """float32 bits truncated to bfloat16's (the high part of the TPU's three-pass split)."""
    bits = np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


def dot_models(
    product: Callable[[np.ndarray, np.ndarray], np.ndarray], a: np.ndarray, b: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each way of multiplying, in float64 (exact accumulation): ``(result, sum of |terms|)``."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    a1, a2, a3 = _split(a, 3)
    b1, b2, b3 = _split(b, 3)
    ta1, tb1 = _truncated(a), _truncated(b)
    ta2, tb2 = _bf16((a64 - ta1).astype(np.float32)), _bf16((b64 - tb1).astype(np.float32))
    pairs = {
        "float32": [(a64, b64)],
        "bfloat16x1": [(a1, b1)],
        "bfloat16x3": [(a1, b1), (a1, b2), (a2, b1)],
        "bfloat16x3 truncated": [(ta1, tb1), (ta1, tb2), (ta2, tb1)],
        "bfloat16x6": [(a1, b1), (a1, b2), (a2, b1), (a2, b2), (a1, b3), (a3, b1)],
        "bfloat16 input": [(a1, b64)],
    }
    return {
        name: (sum(product(p, q) for p, q in terms),
               sum(product(np.abs(p), np.abs(q)) for p, q in terms))
        for name, terms in pairs.items()
    }  # fmt: skip


def closeness(
    result: np.ndarray, models: dict[str, tuple[np.ndarray, np.ndarray]]
) -> dict[str, Any]:
    """Each model's distance from ``result`` in units of ``eps * sum|terms|``, the closest,
    and the share of elements equal to each model rounded to the result's dtype."""
    result = np.asarray(result)
    distances = {
        name: _scaled(result.astype(np.float64) - value, scale)
        for name, (value, scale) in models.items()
    }
    equal = {
        name: float(np.mean(value.astype(result.dtype) == result))
        for name, (value, _) in models.items()
    }
    return {"eps_sum": distances, "closest": min(distances, key=distances.__getitem__),
            "equal_when_rounded": equal}  # fmt: skip


def _conv_nhwc(x: np.ndarray, w: np.ndarray, groups: int = 1) -> np.ndarray:
    """A SAME, stride-1 NHWC x HWIO convolution in float64 (the reference)."""
    kh, kw, cin_g, cout = w.shape
    n, h, wd, _ = x.shape
    pad = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    out = np.zeros((n, h, wd, cout))
    per_group = cout // groups
    for g in range(groups):
        xs = pad[..., g * cin_g : (g + 1) * cin_g]
        ws = w[..., g * per_group : (g + 1) * per_group]
        for i in range(kh):
            for j in range(kw):
                out[..., g * per_group : (g + 1) * per_group] += np.einsum(
                    "nhwc,co->nhwo", xs[:, i : i + h, j : j + wd, :], ws[i, j]
                )
    return out


def measure_products(runner: Runner) -> list[dict[str, Any]]:
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(11)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    found: list[dict[str, Any]] = []
    matmul = lambda p, q: p @ q  # noqa: E731
    cases: list[tuple[str, tuple[int, ...], tuple[int, ...], Any, Callable[..., Any]]] = []
    for precision in ("default", "high", "highest"):
        for m, k, n in ((1, 1024, 256), (256, 1024, 1), (2, 512, 256), (8, 512, 256),
                        (128, 256, 128)):  # fmt: skip
            cases.append((f"({m},{k})@({k},{n}) {precision}", (m, k), (k, n), np.float32,
                          functools_partial_matmul(precision)))  # fmt: skip
    cases.append(("(512,)@(512,256) default", (512,), (512, 256), np.float32, jnp.matmul))
    cases.append(("(4096,).(4096,) default", (4096,), (4096,), np.float32, jnp.dot))
    cases.append(("vmap (8,256)x(8,256,64) default", (8, 256), (8, 256, 64), np.float32,
                  lambda p, q: jnp.einsum("bk,bkn->bn", p, q)))  # fmt: skip
    cases.append(("batched (8,1,256)x(8,256,64) default", (8, 1, 256), (8, 256, 64), np.float32,
                  jnp.matmul))  # fmt: skip
    cases.append(("scan-step (32,)@(32,32) default", (32,), (32, 32), np.float32, jnp.matmul))
    for precision in ("default", "highest"):
        cases.append((f"float16 (128,128)@(128,128) {precision}", (128, 128), (128, 128),
                      np.float16, functools_partial_matmul(precision)))  # fmt: skip
        cases.append((f"float16 (1,512)@(512,128) {precision}", (1, 512), (512, 128), np.float16,
                      functools_partial_matmul(precision)))  # fmt: skip
    cases.append(("bfloat16@float32 (64,256)@(256,64) default", (64, 256), (256, 64), "mixed",
                  lambda p, q: lax.dot(p, q, preferred_element_type=jnp.float32)))  # fmt: skip
    cases.append(("float16 (128,128)@(128,128) high", (128, 128), (128, 128), np.float16,
                  functools_partial_matmul("high")))  # fmt: skip
    for name, lhs_shape, rhs_shape, dtype, fn in cases:
        a, b = normal(*lhs_shape), normal(*rhs_shape)
        if dtype == "mixed":
            import ml_dtypes

            a = a.astype(ml_dtypes.bfloat16)
        elif dtype is np.float16:
            a, b = a.astype(np.float16), b.astype(np.float16)
        chip = runner.device(fn, a, b)
        cpu = runner.cpu(fn, a, b)
        product = _batched if "vmap" in name else matmul
        models = dot_models(product, np.asarray(a, np.float32), np.asarray(b, np.float32))
        entry = {"name": name, "device": closeness(chip, models), "cpu": closeness(cpu, models),
                 "same_bits_as_cpu": float(np.mean(np.asarray(chip) == np.asarray(cpu)))}  # fmt: skip
        if dtype is np.float16:  # the result rounds to float16: distances in its units
            entry["note"] = "float16 result: distances include float16 output rounding"
        found.append(entry)
        print(
            f"  {name:42s} closest {entry['device']['closest']:10s} "
            f"{entry['device']['eps_sum'][entry['device']['closest']]:9.2f}",
            flush=True,
        )
    dn = ("NHWC", "HWIO", "NHWC")
    for name, x_shape, w_shape, groups, precision in (
        ("conv 3x3 8->16", (4, 16, 16, 8), (3, 3, 8, 16), 1, None),
        ("conv 3x3 3->16", (4, 16, 16, 3), (3, 3, 3, 16), 1, None),
        ("depthwise 3x3 16", (4, 16, 16, 16), (3, 3, 1, 16), 16, None),
        ("conv 3x3 16->1", (4, 16, 16, 16), (3, 3, 16, 1), 1, None),
        ("conv 3x3 8->16 high", (4, 16, 16, 8), (3, 3, 8, 16), 1, "high"),
        ("conv 3x3 8->16 highest", (4, 16, 16, 8), (3, 3, 8, 16), 1, "highest"),
        ("depthwise 3x3 16 high", (4, 16, 16, 16), (3, 3, 1, 16), 16, "high"),
        ("depthwise 3x3 128", (2, 16, 16, 128), (3, 3, 1, 128), 128, None),
        ("depthwise x2 3x3 16->32", (4, 16, 16, 16), (3, 3, 1, 32), 16, None),
        ("grouped 4 3x3 16->16", (4, 16, 16, 16), (3, 3, 4, 16), 4, None),
    ):  # fmt: skip
        x, w = normal(*x_shape), normal(*w_shape)

        def conv(p, q, g=groups, precision=precision):
            return lax.conv_general_dilated(p, q, (1, 1), "SAME", dimension_numbers=dn,
                                            feature_group_count=g, precision=precision)  # fmt: skip

        chip, cpu = runner.device(conv, x, w), runner.cpu(conv, x, w)
        models = dot_models(lambda p, q, g=groups: _conv_nhwc(p, q, g), x, w)
        entry = {"name": name, "device": closeness(chip, models), "cpu": closeness(cpu, models),
                 "same_bits_as_cpu": float(np.mean(chip == cpu))}  # fmt: skip
        found.append(entry)
        print(
            f"  {name:42s} closest {entry['device']['closest']:10s} "
            f"{entry['device']['eps_sum'][entry['device']['closest']]:9.2f}",
            flush=True,
        )
    return found


def _batched(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.einsum("bk,bkn->bn", p, q)


def functools_partial_matmul(precision: str) -> Callable[..., Any]:
    import jax.numpy as jnp

    if precision == "default":
        return jnp.matmul
    return lambda p, q: jnp.matmul(p, q, precision=precision)


# -- decompositions and transforms --------------------------------------------------------------


def measure_decompositions(runner: Runner) -> dict[str, Any]:
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(13)
    found: dict[str, Any] = {}

    def entry(chip: np.ndarray, cpu: np.ndarray, ref: np.ndarray) -> dict[str, float]:
        scale = np.abs(ref).max()
        return {"eps_max": float(np.abs(np.asarray(chip, np.complex128) - ref).max() / (EPS32 * scale)),
                "cpu_eps_max": float(np.abs(np.asarray(cpu, np.complex128) - ref).max() / (EPS32 * scale))}  # fmt: skip

    for n in (64, 300):
        a = rng.standard_normal((n, n)).astype(np.float32)
        a = ((a + a.T) / 2).astype(np.float32)
        w_ref, v_ref = np.linalg.eigh(a.astype(np.float64))
        (w, v) = runner.device(jnp.linalg.eigh, a)
        (w_cpu, v_cpu) = runner.cpu(jnp.linalg.eigh, a)
        signs = np.sign(np.sum(v_ref * v, axis=0))
        found[f"eigh {n} eigenvalues"] = entry(w, w_cpu, w_ref)
        found[f"eigh {n} eigenvectors"] = {
            **entry(v * np.sign(np.sum(v_ref * v, axis=0)), v_cpu * np.sign(np.sum(v_ref * v_cpu, axis=0)), v_ref),
            "signs_as_cpu": float(np.mean(np.sign(np.sum(v * v_cpu, axis=0)) > 0)),
            "signs_as_lapack": float(np.mean(signs > 0)),
        }  # fmt: skip
    m = rng.standard_normal((64, 32)).astype(np.float32)
    s_ref = np.linalg.svd(m.astype(np.float64), compute_uv=False)
    u, _, vt = runner.device(lambda x: jnp.linalg.svd(x, full_matrices=False), m)
    u_cpu, _, vt_cpu = runner.cpu(lambda x: jnp.linalg.svd(x, full_matrices=False), m)
    found["svd vectors"] = {"eps_max": 0.0, "cpu_eps_max": 0.0,
                            "signs_as_cpu": float(np.mean(np.sign(np.sum(u * u_cpu, axis=0)) > 0)),
                            "v_signs_as_cpu": float(np.mean(np.sign(np.sum(vt * vt_cpu, axis=1)) > 0))}  # fmt: skip
    found["svd singular values"] = entry(runner.device(lambda x: jnp.linalg.svd(x, compute_uv=False), m),
                                         runner.cpu(lambda x: jnp.linalg.svd(x, compute_uv=False), m), s_ref)  # fmt: skip
    _, r = runner.device(jnp.linalg.qr, m)
    _, r_cpu = runner.cpu(jnp.linalg.qr, m)
    _, r_ref = np.linalg.qr(m.astype(np.float64))
    d = np.sign(np.diag(r)) * np.sign(np.diag(r_ref))
    d_cpu = np.sign(np.diag(r_cpu)) * np.sign(np.diag(r_ref))
    found["qr r"] = {**entry(r * d[:, None], r_cpu * d_cpu[:, None], r_ref),
                     "signs_as_cpu": float(np.mean(np.sign(np.diag(r)) == np.sign(np.diag(r_cpu))))}  # fmt: skip
    spd = (m.T @ m + 32 * np.eye(32)).astype(np.float32)
    found["cholesky"] = entry(runner.device(jnp.linalg.cholesky, spd), runner.cpu(jnp.linalg.cholesky, spd),
                              np.linalg.cholesky(spd.astype(np.float64)))  # fmt: skip
    a = (rng.standard_normal((64, 64)) + 8 * np.eye(64)).astype(np.float32)
    b = rng.standard_normal((64, 8)).astype(np.float32)
    ref = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
    found["solve"] = entry(
        runner.device(jnp.linalg.solve, a, b), runner.cpu(jnp.linalg.solve, a, b), ref
    )
    found["inv"] = entry(runner.device(jnp.linalg.inv, a), runner.cpu(jnp.linalg.inv, a),
                         np.linalg.inv(a.astype(np.float64)))  # fmt: skip
    low = np.tril(a).astype(np.float32)
    tri = lambda p, q: lax.linalg.triangular_solve(p, q, left_side=True, lower=True)  # noqa: E731
    found["triangular_solve"] = entry(runner.device(tri, low, b), runner.cpu(tri, low, b),
                                      np.linalg.solve(low.astype(np.float64), b.astype(np.float64)))  # fmt: skip
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    found["rfft"] = entry(runner.device(jnp.fft.rfft, x), runner.cpu(jnp.fft.rfft, x),
                          np.fft.rfft(x.astype(np.float64)))  # fmt: skip
    z = (x + 1j * rng.standard_normal((8, 1024))).astype(np.complex64)
    found["fft"] = entry(runner.device(jnp.fft.fft, z), runner.cpu(jnp.fft.fft, z),
                         np.fft.fft(z.astype(np.complex128)))  # fmt: skip
    found["ifft"] = entry(runner.device(jnp.fft.ifft, z), runner.cpu(jnp.fft.ifft, z),
                          np.fft.ifft(z.astype(np.complex128)))  # fmt: skip
    return {k: {key: round(value, 3) if isinstance(value, float) else value for key, value in v.items()}
            for k, v in found.items()}  # fmt: skip


# -- the run ------------------------------------------------------------------------------------

PARTS: dict[str, Callable[[Runner], Any]] = {
    "elementwise": measure_elementwise,
    "exact": measure_exact,
    "reductions": measure_reductions,
    "products": measure_products,
    "decompositions": measure_decompositions,
}


def run(out_dir: Path, *, dry_run: bool, parts: tuple[str, ...] = tuple(PARTS)) -> Path:
    if dry_run:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    runner = Runner(dry_run=dry_run)
    results: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "device": device_facts(dry_run),
                               "script": "benchmarks/validation/chip_errors.py"}  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "chip-errors.json"
    for part in parts:
        started = time.perf_counter()
        print(f"chip_errors: {part}", flush=True)
        try:
            results[part] = PARTS[part](runner)
        except Exception as e:  # a part that fails leaves the others' numbers
            results[part] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"chip_errors: {part} failed: {e}", flush=True)
        results.setdefault("seconds", {})[part] = round(time.perf_counter() - started, 2)
        path.write_text(json.dumps(_finite(results), indent=1) + "\n")
    return path


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="no TPU: the CPU stands in, the device is 'not measured'",
    )
    parser.add_argument("--parts", default=",".join(PARTS))
    args = parser.parse_args(argv)
    path = run(args.out_dir, dry_run=args.dry_run, parts=tuple(args.parts.split(",")))
    print(f"chip_errors: wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
