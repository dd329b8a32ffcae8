"""Issue 55's 38 checks of ops the tpu emulation was never calibrated on, as a corpus with the
chip's outputs recorded, so that the emulation's verdicts can be computed without a chip.

    python benchmarks/validation/chip_checks.py run --out-dir DIR            # on the TPU host
    python benchmarks/validation/chip_checks.py run --out-dir DIR --dry-run  # no TPU: the CPU stands in
    python benchmarks/validation/chip_checks.py analyse --run DIR/chip-checks-run.json \\
        --outputs DIR/chip-checks-outputs.npz --out benchmarks/results/chip-checks-tpu-v5-lite [--emulate]

The corpus (:data:`CASES`), float32 unless it says, with seeded NumPy inputs: batched,
mixed-precision (bfloat16 and float16 inputs, float32 result), 8×8 and vmapped products and
causal multi-head attention; log, exp, expm1, pow, erf_inv and lgamma over narrow and wide
ranges; mean and variance, an L2 norm, column sums, cumprod and a segment sum; strided,
dilated, depthwise and transposed convolutions; cholesky, qr, svd, slogdet and inv of
well-conditioned matrices; an rfft round trip, a bilinear resize and a while loop; a bfloat16
layer norm, integer arithmetic, random normals and a cross-entropy gradient. Issue 55 names
these kinds of checks, not their code: this is a corpus of those kinds, written before any
emulation change.

``run`` records each case's outputs on the device and on the device host's CPU
(``chip-checks-outputs.npz``: ``chip/<case>/<i>`` and ``cpu/<case>/<i>``, a narrow float as
its bits, each leaf's dtype in ``chip-checks-run.json``). ``analyse`` keeps the chip's
outputs and this CPU's (as their bits XOR the chip's) in ``OUT.npz``, which
:func:`load_recorded` reads back. ``analyse`` runs each case on this
machine's CPU and gives the chip's verdict against it per tolerance (JAX's default per dtype,
and rtol = atol = 1e-4, 1e-3, 1e-2), with the worst errors; ``--emulate`` adds the verdicts
of pytest-jaxport's tpu emulation (``match``, ``mismatch``, ``may differ``) and how each
stands against the chip's (a missed difference, a false alarm).
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NOT_MEASURED = "not measured: no TPU"


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One checked program: ``fn(*inputs())`` (the fields of ``chip_corpus.Case``)."""

    name: str
    fn: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]
    what: str
    needs: str = ""


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _normal(seed: int, *shape: int, scale: float = 1.0, loc: float = 0.0) -> np.ndarray:
    return (loc + scale * _rng(seed).standard_normal(shape)).astype(np.float32)


def _grid(low: float, high: float, n: int = 4096, *, log: bool = False) -> np.ndarray:
    values = np.geomspace(low, high, n) if log else np.linspace(low, high, n)
    return values.astype(np.float32)


def _narrow(name: str) -> Any:
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


# -- products ----------------------------------------------------------------------------------


def batched_matmul(a: Any, b: Any) -> Any:
    import jax.numpy as jnp

    return jnp.matmul(a, b)


def mixed_product(a: Any, b: Any) -> Any:
    import jax.numpy as jnp
    from jax import lax

    return lax.dot(a, b, preferred_element_type=jnp.float32)


def matmul(a: Any, b: Any) -> Any:
    return a @ b


def vmapped_matmul(a: Any, b: Any) -> Any:
    import jax
    import jax.numpy as jnp

    return jax.vmap(jnp.matmul)(a, b)


def causal_attention(q: Any, k: Any, v: Any) -> Any:
    """4 heads over 64 tokens of 32, a causal mask: (heads, tokens, dim)."""
    import jax
    import jax.numpy as jnp

    scores = jnp.einsum("hqd,hkd->hqk", q, k) / np.float32(math.sqrt(q.shape[-1]))
    mask = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))
    scores = jnp.where(mask, scores, -1e9)
    return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(scores, axis=-1), v)


# -- elementwise -------------------------------------------------------------------------------


def log(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.log(x)


def exp(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.exp(x)


def expm1(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.expm1(x)


def power(x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    return jnp.power(x, y)


def erfinv(x: Any) -> Any:
    import jax

    return jax.scipy.special.erfinv(x)


def lgamma(x: Any) -> Any:
    import jax

    return jax.scipy.special.gammaln(x)


def _pow_inputs(low: float, high: float, top: float, *, log_base: bool) -> tuple[np.ndarray, ...]:
    return _grid(low, high, log=log_base), _rng(77).permutation(_grid(-top, top))


# -- reductions --------------------------------------------------------------------------------


def mean_var(x: Any) -> Any:
    return x.mean(-1), x.var(-1)


def l2_norm(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.sqrt(jnp.sum(x * x, axis=-1))


def column_sums(x: Any) -> Any:
    return x.sum(0)


def cumprod(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.cumprod(x, axis=-1)


def segment_sum(data: Any, ids: Any) -> Any:
    import jax

    return jax.ops.segment_sum(data, ids, num_segments=64, indices_are_sorted=True)


def _cumprod_inputs() -> tuple[np.ndarray]:
    return (np.exp(_rng(88).uniform(-0.1, 0.1, (16, 128))).astype(np.float32),)


def _segment_inputs() -> tuple[np.ndarray, np.ndarray]:
    ids = np.sort(_rng(89).integers(0, 64, 65536)).astype(np.int32)
    return _normal(90, 65536), ids


# -- convolutions ------------------------------------------------------------------------------

_DN = ("NHWC", "HWIO", "NHWC")


def conv_strided(x: Any, w: Any) -> Any:
    from jax import lax

    return lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=_DN)


def conv_dilated(x: Any, w: Any) -> Any:
    from jax import lax

    return lax.conv_general_dilated(
        x, w, (1, 1), "SAME", rhs_dilation=(2, 2), dimension_numbers=_DN
    )


def depthwise_5x5(x: Any, w: Any) -> Any:
    from jax import lax

    return lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=_DN, feature_group_count=x.shape[-1]
    )


def conv_transpose(x: Any, w: Any) -> Any:
    from jax import lax

    return lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=_DN)


# -- linear algebra (well-conditioned) ---------------------------------------------------------


def cholesky(a: Any) -> Any:
    import jax.numpy as jnp

    return jnp.linalg.cholesky(a)


def qr_signed(a: Any) -> Any:
    """Q and R with R's diagonal made positive (a chip and a CPU may pick either sign)."""
    import jax.numpy as jnp

    q, r = jnp.linalg.qr(a)
    s = jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0).astype(a.dtype)
    return q * s[None, :], r * s[:, None]


def singular_values(a: Any) -> Any:
    import jax.numpy as jnp

    return jnp.linalg.svd(a, compute_uv=False)


def slogdet(a: Any) -> Any:
    import jax.numpy as jnp

    return jnp.linalg.slogdet(a)


def inv(a: Any) -> Any:
    import jax.numpy as jnp

    return jnp.linalg.inv(a)


def _shifted(seed: int, n: int) -> tuple[np.ndarray]:
    return ((_normal(seed, n, n) + n**0.5 * np.eye(n)).astype(np.float32),)


def _spd(seed: int, n: int) -> tuple[np.ndarray]:
    a = _normal(seed, n, n)
    return ((a.T @ a / n + np.eye(n)).astype(np.float32),)


# -- transforms and loops ----------------------------------------------------------------------


def rfft_round_trip(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.fft.irfft(jnp.fft.rfft(x), n=x.shape[-1])


def resize(x: Any) -> Any:
    import jax

    return jax.image.resize(x, (1, 64, 64, 3), method="bilinear")


def newton_sqrt(x: Any) -> Any:
    """sqrt by Newton's iteration in a while loop, until every element has converged."""
    import jax.numpy as jnp
    from jax import lax

    def cond(state: Any) -> Any:
        y, i = state
        return (i < 50) & jnp.any(jnp.abs(y * y - x) > 1e-6 * x)

    def body(state: Any) -> Any:
        y, i = state
        return 0.5 * (y + x / y), i + 1

    return lax.while_loop(cond, body, (jnp.maximum(x, 1.0), 0))


# -- the rest ----------------------------------------------------------------------------------


def layernorm(x: Any, g: Any, b: Any) -> Any:
    from jax import lax

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def integer_ops(a: Any, b: Any) -> Any:
    import jax.numpy as jnp

    return (
        (a * b + (a >> 2)) // 7 % 1000,
        a ^ b,
        jnp.abs(a - b) // (jnp.abs(b) + 1),
        jnp.cumsum(a % 16),
    )


def random_normal(key_data: Any) -> Any:
    import jax

    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    return jax.random.normal(key, (128, 128), dtype="float32")


def cross_entropy_grad(w: Any, b: Any, x: Any, labels: Any) -> Any:
    import jax

    def loss(params: Any) -> Any:
        logits = x @ params[0] + params[1]
        return -(jax.nn.log_softmax(logits) * labels).sum(-1).mean()

    return jax.grad(loss)((w, b))


def _layernorm_inputs() -> tuple[np.ndarray, ...]:
    bf16 = _narrow("bfloat16")
    return (_normal(95, 256, 256, scale=2, loc=0.5).astype(bf16),
            _normal(96, 256, scale=0.1, loc=1.0).astype(bf16), _normal(97, 256, scale=0.1).astype(bf16))  # fmt: skip


def _integer_inputs() -> tuple[np.ndarray, ...]:
    rng = _rng(98)
    return (rng.integers(-(2**20), 2**20, 4096, dtype=np.int32),
            rng.integers(-(2**10), 2**10, 4096, dtype=np.int32))  # fmt: skip


def _ce_inputs() -> tuple[np.ndarray, ...]:
    labels = np.eye(10, dtype=np.float32)[_rng(99).integers(0, 10, 32)]
    return (
        _normal(100, 64, 10, scale=0.125),
        _normal(101, 10, scale=0.1),
        _normal(102, 32, 64),
        labels,
    )


CASES: tuple[Case, ...] = (
    Case(name="batched_matmul", fn=batched_matmul, what="(8,64,128) @ (8,128,64)",
         inputs=lambda: (_normal(1, 8, 64, 128), _normal(2, 8, 128, 64))),
    Case(name="mixed_bf16_product", fn=mixed_product, what="bfloat16 (64,256) @ bfloat16 (256,64) -> float32",
         inputs=lambda: (_normal(3, 64, 256).astype(_narrow("bfloat16")),
                         _normal(4, 256, 64).astype(_narrow("bfloat16")))),
    Case(name="mixed_f16_product", fn=mixed_product, what="float16 (64,256) @ float16 (256,64) -> float32",
         inputs=lambda: (_normal(5, 64, 256).astype(np.float16), _normal(6, 256, 64).astype(np.float16))),
    Case(name="matmul_8x8", fn=matmul, what="(8,8) @ (8,8)",
         inputs=lambda: (_normal(7, 8, 8), _normal(8, 8, 8))),
    Case(name="vmapped_matmul", fn=vmapped_matmul, what="vmap over 16 of (32,64) @ (64,32)",
         inputs=lambda: (_normal(9, 16, 32, 64), _normal(10, 16, 64, 32))),
    Case(name="causal_attention", fn=causal_attention, what="4 heads, 64 tokens of 32, causal",
         inputs=lambda: (_normal(11, 4, 64, 32), _normal(12, 4, 64, 32), _normal(13, 4, 64, 32))),
    Case(name="log_narrow", fn=log, what="log on [0.5, 2]", inputs=lambda: (_grid(0.5, 2),)),
    Case(name="log_wide", fn=log, what="log on [1e-6, 1e6]", inputs=lambda: (_grid(1e-6, 1e6, log=True),)),
    Case(name="exp_narrow", fn=exp, what="exp on [-1, 1]", inputs=lambda: (_grid(-1, 1),)),
    Case(name="exp_wide", fn=exp, what="exp on [-60, 60]", inputs=lambda: (_grid(-60, 60),)),
    Case(name="expm1_tiny", fn=expm1, what="expm1 on [-1e-3, 1e-3]", inputs=lambda: (_grid(-1e-3, 1e-3),)),
    Case(name="pow_narrow", fn=power, what="[0.5, 2] ** [-2, 2]",
         inputs=lambda: _pow_inputs(0.5, 2, 2, log_base=False)),
    Case(name="pow_wide", fn=power, what="[0.01, 100] ** [-4, 4]",
         inputs=lambda: _pow_inputs(0.01, 100, 4, log_base=True)),
    Case(name="erfinv_mid", fn=erfinv, what="erfinv on [-0.9, 0.9]", inputs=lambda: (_grid(-0.9, 0.9),)),
    Case(name="erfinv_wide", fn=erfinv, what="erfinv on [-0.999, 0.999]",
         inputs=lambda: (_grid(-0.999, 0.999),)),
    Case(name="lgamma_narrow", fn=lgamma, what="lgamma on [0.5, 5]", inputs=lambda: (_grid(0.5, 5),)),
    Case(name="lgamma_wide", fn=lgamma, what="lgamma on [0.01, 50]",
         inputs=lambda: (_grid(0.01, 50, log=True),)),
    Case(name="mean_var", fn=mean_var, what="mean and variance over rows of 1024",
         inputs=lambda: (_normal(20, 64, 1024, scale=2, loc=1),)),
    Case(name="l2_norm", fn=l2_norm, what="sqrt(sum(x*x)) over rows of 1024",
         inputs=lambda: (_normal(21, 64, 1024),)),
    Case(name="column_sums", fn=column_sums, what="sum over 4096 rows of 64 columns",
         inputs=lambda: (_normal(22, 4096, 64),)),
    Case(name="cumprod", fn=cumprod, what="cumprod along 128 of values in exp([-0.1, 0.1])",
         inputs=_cumprod_inputs),
    Case(name="segment_sum", fn=segment_sum, what="65,536 values into 64 sorted segments",
         inputs=_segment_inputs),
    Case(name="conv_strided", fn=conv_strided, what="3x3, stride 2, 8 -> 16 channels",
         inputs=lambda: (_normal(30, 4, 32, 32, 8), _normal(31, 3, 3, 8, 16, scale=0.3))),
    Case(name="conv_dilated", fn=conv_dilated, what="3x3, dilation 2, 8 -> 16 channels",
         inputs=lambda: (_normal(32, 1, 32, 32, 8), _normal(33, 3, 3, 8, 16, scale=0.3))),
    Case(name="depthwise_5x5", fn=depthwise_5x5, what="5x5 depthwise, 16 channels",
         inputs=lambda: (_normal(34, 1, 32, 32, 16), _normal(35, 5, 5, 1, 16, scale=0.3))),
    Case(name="conv_transpose", fn=conv_transpose, what="3x3 transposed, stride 2, 8 -> 16",
         inputs=lambda: (_normal(36, 1, 16, 16, 8), _normal(37, 3, 3, 8, 16, scale=0.3))),
    Case(name="cholesky", fn=cholesky, what="cholesky of a well-conditioned 64x64", inputs=lambda: _spd(40, 64)),
    Case(name="qr", fn=qr_signed, what="qr of a (64,32) normal matrix, R's diagonal positive",
         inputs=lambda: (_normal(41, 64, 32),)),
    Case(name="svd_values", fn=singular_values, what="singular values of a (64,32) normal matrix",
         inputs=lambda: (_normal(42, 64, 32),)),
    Case(name="slogdet", fn=slogdet, what="slogdet of normal + 8 I (64x64)", inputs=lambda: _shifted(43, 64)),
    Case(name="inv", fn=inv, what="inverse of normal + 8 I (64x64)", inputs=lambda: _shifted(44, 64)),
    Case(name="rfft_round_trip", fn=rfft_round_trip, what="irfft(rfft(x)) of 8 rows of 1024",
         inputs=lambda: (_normal(50, 8, 1024),)),
    Case(name="resize", fn=resize, what="bilinear resize (1,32,32,3) -> (1,64,64,3)",
         inputs=lambda: (_normal(51, 1, 32, 32, 3),)),
    Case(name="while_newton", fn=newton_sqrt, what="Newton's sqrt in a while loop, 4096 values",
         inputs=lambda: (_grid(1e-2, 1e4, log=True),)),
    Case(name="bf16_layernorm", fn=layernorm, what="layer norm of (256,256) in bfloat16",
         inputs=_layernorm_inputs),
    Case(name="integer_ops", fn=integer_ops, what="int32 mul, add, shift, floor div, mod, xor, cumsum",
         inputs=_integer_inputs),
    Case(name="random_normal", fn=random_normal, what="jax.random.normal (128,128) from a threefry key",
         inputs=lambda: (np.array([0, 42], np.uint32),)),
    Case(name="cross_entropy_grad", fn=cross_entropy_grad,
         what="gradient of softmax cross-entropy of a linear layer", inputs=_ce_inputs),
)  # fmt: skip


# -- the run -----------------------------------------------------------------------------------


def _bits(a: np.ndarray) -> np.ndarray:
    """A narrow float's bits (npz keeps no ml_dtypes dtype); other arrays as they are."""
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" or a.dtype.name in (
        "bfloat16", "float8_e4m3fn", "float8_e5m2") else a  # fmt: skip


def _raw(a: np.ndarray) -> np.ndarray:
    """Any array's bits as unsigned integers of its width."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def load_recorded(npz: Path, results: Mapping[str, Any]) -> dict[str, dict[str, list[np.ndarray]]]:
    """``analyse``'s recorded outputs (``chip/<case>/<i>``, and ``cpu_xor_chip/<case>/<i>``:
    this CPU's bits XOR the chip's): per case, the chip's and the CPU's, in their dtypes."""
    found: dict[str, dict[str, list[np.ndarray]]] = {}
    with np.load(npz) as data:
        for name, entry in results["cases"].items():
            chip, cpu = [], []
            for i, dtype in enumerate(entry.get("dtypes", [])):
                raw = data[f"chip/{name}/{i}"]
                leaf = raw.view(_narrow(dtype)) if raw.dtype.name != dtype else raw
                chip.append(leaf)
                cpu.append((_raw(leaf) ^ data[f"cpu_xor_chip/{name}/{i}"]).view(leaf.dtype))
            found[name] = {"chip": chip, "cpu": cpu}
    return found


def load_outputs(
    npz: Path, run: Mapping[str, Any], side: str = "chip"
) -> dict[str, list[np.ndarray]]:
    """Each case's recorded outputs (``side``: ``chip`` or ``cpu``), in their dtypes."""
    found: dict[str, list[np.ndarray]] = {}
    with np.load(npz) as data:
        for name, entry in run["cases"].items():
            leaves = []
            for i, dtype in enumerate(entry.get("dtypes", [])):
                key = f"{side}/{name}/{i}"
                if key not in data.files:  # analyse's own npz keeps no host CPU outputs
                    break
                raw = data[key]
                leaves.append(raw.view(_narrow(dtype)) if raw.dtype.name != dtype else raw)
            found[name] = leaves
    return found


def facts(dry_run: bool) -> dict[str, Any]:
    import importlib.metadata as metadata

    import jax

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    device = jax.devices()[0]
    found: dict[str, Any] = {"jax": jax.__version__, "jaxlib": version("jaxlib"),
                             "libtpu": version("libtpu"), "python": sys.version.split()[0],
                             "machine": platform_module.machine(), "date": dt.date.today().isoformat(),
                             "kind": NOT_MEASURED if dry_run else device.device_kind,
                             "platform": device.platform}  # fmt: skip
    with contextlib.suppress(Exception):
        found["platform_version"] = device.client.platform_version
    return found


def leaves_on(fn: Callable[..., Any], args: Sequence[Any], *, cpu: bool) -> list[np.ndarray]:
    import jax

    if not cpu:
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    device = jax.devices("cpu")[0]
    with jax.default_device(device):
        placed = jax.device_put(tuple(args), device)
        return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(fn)(*placed))]


def step_run(out_dir: Path, *, dry_run: bool) -> int:
    if dry_run:
        os.environ["JAX_PLATFORMS"] = "cpu"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"device": facts(dry_run), "script": "benchmarks/validation/chip_checks.py",
                               "cases": {}}  # fmt: skip
    saved: dict[str, np.ndarray] = {}
    for case in CASES:
        started = time.perf_counter()
        entry: dict[str, Any] = {"what": case.what}
        try:
            args = case.inputs()
            chip = leaves_on(case.fn, args, cpu=False)
            host = leaves_on(case.fn, args, cpu=True)
            entry["dtypes"] = [str(a.dtype) for a in chip]
            entry["shapes"] = [list(a.shape) for a in chip]
            for i, (c, p) in enumerate(zip(chip, host)):
                saved[f"chip/{case.name}/{i}"], saved[f"cpu/{case.name}/{i}"] = _bits(c), _bits(p)
            entry["host_cpu_same_bits"] = [
                float(np.mean(_bits(c) == _bits(p))) for c, p in zip(chip, host)
            ]
        except Exception as e:  # one case's failure leaves the others' outputs
            entry["error"] = f"{type(e).__name__}: {e}"[:3000]
        entry["seconds"] = round(time.perf_counter() - started, 2)
        results["cases"][case.name] = entry
        if len(results["cases"]) % 8 == 0:  # a run stopped part-way keeps what it has
            (out_dir / "chip-checks-run.json").write_text(json.dumps(results, indent=1) + "\n")
            np.savez_compressed(out_dir / "chip-checks-outputs.npz", **saved)
        print(f"[{time.strftime('%H:%M:%S')}] checks: {case.name:20s} "
              f"{entry.get('error', '')[:200] or entry['host_cpu_same_bits']}", flush=True)  # fmt: skip
    (out_dir / "chip-checks-run.json").write_text(json.dumps(results, indent=1) + "\n")
    np.savez_compressed(out_dir / "chip-checks-outputs.npz", **saved)
    return 0


# -- the analysis here ------------------------------------------------------------------------------

TOLERANCES: tuple[tuple[str, float | None], ...] = (
    ("jax-default", None), ("1e-4", 1e-4), ("1e-3", 1e-3), ("1e-2", 1e-2),
)  # fmt: skip
"""The tolerances of the verdicts: JAX's default per dtype (float32 1e-6, float16 1e-3,
bfloat16 1e-2, integers exact), and rtol = atol = t."""
JAX_DEFAULT = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-2, "float64": 1e-15}


def _tol(dtype: str, t: float | None) -> float:
    if np.dtype(_narrow(dtype)).kind in "iub":
        return 0.0
    return JAX_DEFAULT.get(dtype, 1e-6) if t is None else t


def leaves_verdict(
    chip: Sequence[np.ndarray], cpu: Sequence[np.ndarray], t: float | None
) -> dict[str, Any]:
    """Whether every element of every leaf is within ``|chip - cpu| <= tol + tol * |cpu|``."""
    worst_abs, worst_rel, mismatches = 0.0, 0.0, 0
    for c, p in zip(chip, cpu):
        tol = _tol(str(c.dtype), t)
        c64, p64 = np.asarray(c, np.float64), np.asarray(p, np.float64)
        with np.errstate(all="ignore"):
            diff = np.abs(c64 - p64)
            finite = np.isfinite(diff)
            worst_abs = max(worst_abs, float(diff[finite].max(initial=0.0)))
            worst_rel = max(
                worst_rel, float((diff / np.abs(p64))[finite & (p64 != 0)].max(initial=0.0))
            )
            mismatches += int((~np.isclose(c64, p64, rtol=tol, atol=tol, equal_nan=True)).sum())
    return {"ok": mismatches == 0, "mismatches": mismatches, "max_abs_err": worst_abs,
            "max_rel_err": worst_rel}  # fmt: skip


def emulated_verdicts(
    fn: Callable[..., Any],
    args: Sequence[Any],
    cpu_value: Any,
    tolerances: Sequence[tuple[str, float | None]] = TOLERANCES,
) -> dict[str, Any]:
    """pytest-jaxport's tpu emulation of ``fn(*args)`` at each of ``tolerances``: its state as
    the plugin's fixture decides it (``match``, ``mismatch``, ``may differ``) and worst error
    (``benchmarks/validation/chip_formats.py`` asks it at its own tolerances)."""
    import dataclasses
    import functools

    from pytest_jaxport._jax.emulate import emulate
    from pytest_jaxport._jax.outputs import to_outputs
    from pytest_jaxport.model import probe
    from pytest_jaxport.model.compare import compare
    from pytest_jaxport.model.emulation import may_differ
    from pytest_jaxport.model.numerics import Tolerance, default_tolerance

    reference = to_outputs(cpu_value)
    emulated = emulate(fn, tuple(args), platform="tpu")
    if emulated.outputs is None:
        reason = emulated.emulation.error or [u.reason for u in emulated.emulation.unemulated]
        return {name: {"state": "not run", "why": str(reason)[:300]} for name, _ in tolerances}
    bounded = functools.cache(emulated.bounded) if emulated.bounded is not None else None
    found: dict[str, Any] = {}
    for name, t in tolerances:

        def tolerance(dtype: str, t: float | None = t) -> Any:
            bound = default_tolerance(dtype)
            if t is None or bound.exact:
                return bound
            return Tolerance(rtol=t, atol=t, origin=f"rtol = atol = {t:g}")

        comparison = compare(reference, emulated.outputs, reference_platform="cpu",
                             platform="tpu (emulated on cpu)", tolerance=tolerance)  # fmt: skip
        state = "match" if comparison.ok else "mismatch"
        if comparison.ok and bounded is not None:
            run = bounded()
            emulation = dataclasses.replace(emulated.emulation, bounded=run.sites)
            moved = None if run.outputs is None else compare(
                reference, run.outputs, reference_platform="cpu", platform="tpu (bounded)",
                tolerance=tolerance)  # fmt: skip
            state = str(probe.emulated_state(ran=True, failed=False, ok=True,
                                             may_differ=may_differ(emulation, moved)))  # fmt: skip
        found[name] = {"state": state, "max_abs_err": float(comparison.max_abs_err)}
    return found


def judge(chip_ok: bool, state: str) -> str:
    """How an emulated state stands against the chip's verdict."""
    if state == "not run":
        return "not emulated"
    if not chip_ok:
        return "missed" if state == "match" else "agrees"
    return "agrees" if state == "match" else "false alarm"


def step_analyse(run_path: Path, npz: Path, out: Path, *, emulate: bool) -> int:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    run = json.loads(run_path.read_text())
    chip_outputs = load_outputs(npz, run, "chip")
    host_outputs = load_outputs(npz, run, "cpu")
    results: dict[str, Any] = {"about": "Issue 55's 38 checks on the chip against this machine's CPU: "
                                        "benchmarks/validation/chip_checks.py",
                               "device": run["device"], "host": facts(True) | {"kind": "cpu"},
                               "tolerances": {n: t for n, t in TOLERANCES}, "cases": {}}  # fmt: skip
    here: dict[str, list[np.ndarray]] = {}
    for case in CASES:
        recorded = run["cases"].get(case.name, {})
        if "error" in recorded or not chip_outputs.get(case.name):
            results["cases"][case.name] = {
                "what": case.what,
                "chip_error": recorded.get("error", "not run"),
            }
            continue
        import jax

        args = case.inputs()
        cpu = here[case.name] = leaves_on(case.fn, args, cpu=True)
        entry: dict[str, Any] = {
            "what": case.what, "dtypes": recorded["dtypes"], "shapes": recorded["shapes"],
            "cpu_here_same_as_chip_host_cpu": None if not host_outputs.get(case.name) else all(
                np.array_equal(_bits(a), _bits(b)) for a, b in zip(cpu, host_outputs[case.name])),
            "chip": {n: leaves_verdict(chip_outputs[case.name], cpu, t) for n, t in TOLERANCES},
        }  # fmt: skip
        if emulate:
            cpu_device = jax.devices("cpu")[0]
            with jax.default_device(cpu_device):
                cpu_value = jax.jit(case.fn)(*jax.device_put(tuple(args), cpu_device))
            try:
                entry["emulated"] = emulated_verdicts(case.fn, args, cpu_value)
            except Exception as e:  # recorded, never the end of the analysis
                entry["emulated"] = {n: {"state": "not run", "why": f"{type(e).__name__}: {e}"[:300]}
                                     for n, _ in TOLERANCES}  # fmt: skip
            entry["judged"] = {n: judge(entry["chip"][n]["ok"], entry["emulated"][n]["state"])
                               for n, _ in TOLERANCES}  # fmt: skip
        results["cases"][case.name] = entry
        print(f"analyse: {case.name:20s} chip ok {[entry['chip'][n]['ok'] for n, _ in TOLERANCES]}"
              + (f" judged {list(entry['judged'].values())}" if emulate else ""), flush=True)  # fmt: skip
    results["summary"] = summary(results["cases"], emulate=emulate)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(results))
    with np.load(npz) as data:
        kept = {k: data[k] for k in data.files if k.startswith("chip/")}
    for name, leaves in here.items():  # this CPU's outputs, as their difference from the chip's
        for i, leaf in enumerate(leaves):
            kept[f"cpu_xor_chip/{name}/{i}"] = _raw(leaf) ^ _raw(chip_outputs[name][i])
    np.savez_compressed(out.with_suffix(".npz"), **kept)
    return 0


def summary(cases: Mapping[str, Any], *, emulate: bool) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, _ in TOLERANCES:
        rows = [c for c in cases.values() if "chip" in c]
        s: dict[str, Any] = {
            "cases": len(rows),
            "chip_differs": sum(not r["chip"][name]["ok"] for r in rows),
        }
        if emulate:
            judged = [r["judged"][name] for r in rows]
            s.update({k.replace(" ", "_"): judged.count(k)
                      for k in ("agrees", "missed", "false alarm", "not emulated")})  # fmt: skip
        found[name] = s
    return found


def markdown(results: Mapping[str, Any]) -> str:
    device = results["device"]
    names = [n for n, _ in TOLERANCES]
    lines = ["# Issue 55's 38 checks: the chip against the CPU", "",
             f"Chip: {device.get('kind')} (jax {device.get('jax')}, libtpu {device.get('libtpu')}, "
             f"{device.get('date')}); the CPU: JAX on the CPU machine. A verdict is `differs` where some "
             "element has |chip − cpu| > t + t·|cpu|. Script: `benchmarks/validation/chip_checks.py`.", "",
             "| tolerance | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
             "| chip differs | " + " | ".join(f"{results['summary'][n]['chip_differs']} of "
                                             f"{results['summary'][n]['cases']}" for n in names) + " |"]  # fmt: skip
    if "agrees" in results["summary"][names[0]]:
        for key in ("agrees", "missed", "false_alarm", "not_emulated"):
            lines.append(f"| emulation {key.replace('_', ' ')} | "
                         + " | ".join(str(results["summary"][n][key]) for n in names) + " |")  # fmt: skip
    lines += ["", "| case | what | " + " | ".join(names) + " | worst abs | worst rel |",
              "|---|---|" + "---|" * len(names) + "---|---|"]  # fmt: skip
    for name, c in results["cases"].items():
        if "chip" not in c:
            lines.append(f"| {name} | {c['what']} | {str(c.get('chip_error'))[:100]} |")
            continue
        verdicts = []
        for n in names:
            v = "match" if c["chip"][n]["ok"] else f"differs ({c['chip'][n]['mismatches']})"
            if "emulated" in c:
                v += f" / {c['emulated'][n]['state']}"
            verdicts.append(v)
        worst = c["chip"][names[0]]
        lines.append(f"| {name} | {c['what']} | " + " | ".join(verdicts)
                     + f" | {worst['max_abs_err']:.3g} | {worst['max_rel_err']:.3g} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("run", "analyse"))
    parser.add_argument("--out-dir", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="no TPU: the CPU stands in")
    parser.add_argument("--run", type=Path)
    parser.add_argument("--outputs", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--emulate", action="store_true", help="add pytest-jaxport's tpu emulation")
    args = parser.parse_args(argv)
    if args.step == "run":
        return step_run(args.out_dir, dry_run=args.dry_run)
    return step_analyse(args.run, args.outputs, args.out, emulate=args.emulate)


if __name__ == "__main__":
    raise SystemExit(main())
