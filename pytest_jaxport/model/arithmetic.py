"""How each platform computes a dot, a convolution or a scan, where that differs from the CPU.

The facts an emulation (``pytest_jaxport._jax.emulate``) computes by: which format a
platform rounds float32 operands to at the default precision (:data:`PRECISION_RULES`, from
JAX's documentation and the vendors'), what the TPU chip was measured to do otherwise
(:data:`DOT_RULES`, :data:`BLOCKED_SCANS`, :data:`NARROW_RULES`), where a TPU computes a
product (:func:`dot_unit`, :func:`conv_unit`), and what it does with float64
(:data:`WIDE_RULES`). Pure: no JAX, no pytest.

>>> default_dot_format("tpu")
NumberFormat(name='bfloat16', exponent_bits=8, mantissa_bits=7)
>>> default_dot_format("cuda", cuda_capability=(7, 0)) is None  # V100: full float32
True

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

# -- number formats ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberFormat:
    """A floating-point format operands are rounded to (``lax.reduce_precision`` widths)."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    """Explicit mantissa bits (the implicit leading one not counted)."""

    def __str__(self) -> str:
        return f"{self.name} (e{self.exponent_bits}m{self.mantissa_bits})"


BFLOAT16 = NumberFormat(name="bfloat16", exponent_bits=8, mantissa_bits=7)
TF32 = NumberFormat(name="tf32", exponent_bits=8, mantissa_bits=10)
FORMATS: Mapping[str, NumberFormat] = {f.name: f for f in (BFLOAT16, TF32)}


@dataclass(frozen=True, slots=True, kw_only=True)
class DotPrecisionRule:
    """How one platform (one GPU generation) computes a float32 dot or convolution at the
    default precision, with the public source that says so."""

    platform: str
    hardware: str
    format: NumberFormat | None
    """What operands are rounded to; ``None``: full float32."""
    source: str
    min_capability: tuple[int, int] | None = None
    """For cuda: the lowest compute capability the row covers (rows are read top down)."""


_PRECISION_DOC = (
    "jax.lax.Precision docstring (DEFAULT: 'On TPU: performs float32 computations in "
    "bfloat16. On GPU: uses tensorfloat32 if available (e.g. on A100 and H100 GPUs), "
    "otherwise standard float32 (e.g. on V100 GPUs)'); JAX docs, 'Matmul precision'; "
    "jax-ml/jax#18934"
)

PRECISION_RULES: tuple[DotPrecisionRule, ...] = (
    DotPrecisionRule(
        platform="tpu",
        hardware="every TPU generation (MXU)",
        format=BFLOAT16,
        source=_PRECISION_DOC,
    ),
    DotPrecisionRule(
        platform="cuda",
        hardware="Ampere and newer (compute capability 8.0+: A100, H100, H200, B200)",
        format=TF32,
        min_capability=(8, 0),
        source=_PRECISION_DOC + "; NVIDIA A100 Tensor Core GPU Architecture whitepaper "
        "(TF32: 8-bit exponent, 10-bit mantissa)",
    ),
    DotPrecisionRule(
        platform="cuda",
        hardware="Volta and Turing (compute capability 7.x: V100, T4)",
        format=None,
        min_capability=(0, 0),
        source=_PRECISION_DOC + "; TF32 tensor cores arrived with Ampere (A100 whitepaper)",
    ),
    DotPrecisionRule(
        platform="rocm",
        hardware="AMD Instinct",
        format=None,
        source="JAX's Precision docs name a reduced default for TPU and NVIDIA GPUs only",
    ),
    DotPrecisionRule(
        platform="oneapi",
        hardware="Intel GPUs (Data Center GPU Max, Arc)",
        format=None,
        source="oneDNN's default floating-point math mode is strict (dnnl::fpmath_mode::"
        "strict: float32 computed in float32; tf32 or bf16 only where asked, oneDNN docs, "
        "'Primitive Attributes: floating-point math mode'); JAX's Precision docs name a "
        "reduced default for TPU and NVIDIA GPUs only",
    ),
    DotPrecisionRule(
        platform="cpu", hardware="any CPU", format=None, source="jax.lax.Precision docstring "
        "('Has no impact on CPU backends')"
    ),
)  # fmt: skip
"""Float32 dots and convolutions at the default precision, per platform (top row wins)."""

DEFAULT_CUDA_CAPABILITY = (9, 0)
"""The GPU a cuda emulation assumes when none is configured: an H100, like the deviceless
compile's default target description."""


def precision_rule(
    platform: str, *, cuda_capability: tuple[int, int] | None = None
) -> DotPrecisionRule | None:
    """The row of :data:`PRECISION_RULES` for ``platform`` (``None`` for an unknown one)."""
    capability = cuda_capability or DEFAULT_CUDA_CAPABILITY
    for rule in PRECISION_RULES:
        if rule.platform != platform:
            continue
        if rule.min_capability is None or capability >= rule.min_capability:
            return rule
    return None


def default_dot_format(
    platform: str, *, cuda_capability: tuple[int, int] | None = None
) -> NumberFormat | None:
    """The format ``platform`` rounds float32 dot operands to at the default precision
    (``None``: full float32). ``cuda_capability``: the GPU generation for cuda (default
    :data:`DEFAULT_CUDA_CAPABILITY`)."""
    rule = precision_rule(platform, cuda_capability=cuda_capability)
    return None if rule is None else rule.format


_CAPABILITY = re.compile(
    r"cuda_compute_capability\s*\{[^}]*?major:\s*(\d+)[^}]*?minor:\s*(\d+)[^}]*\}", re.S
)


def compute_capability(target_text: str) -> tuple[int, int] | None:
    """The ``cuda_compute_capability`` of a text ``GpuTargetConfigProto`` (the configured
    ``target``), else ``None``.

    >>> compute_capability("gpu_device_info { cuda_compute_capability { major: 8 minor: 0 } }")
    (8, 0)
    """
    found = _CAPABILITY.search(target_text)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


# -- what the chip was measured to do (issue 49) ------------------------------------------------

Arithmetic = Literal["float32", "bfloat16", "tf32", "bfloat16 input", "bfloat16x3"]
"""How a dot or convolution multiplies on a platform: ``float32`` (as the CPU: products exact
in float32), a format both operands are rounded to (``bfloat16``, ``tf32``), ``bfloat16
input`` (only the input, the lhs, rounded; the kernel kept in float32), ``bfloat16x3`` (three
bfloat16 passes: ``hi*hi + hi*lo + lo*hi``, each operand split as ``hi`` = its bits truncated
to bfloat16, ``lo`` = the rest rounded to bfloat16)."""

ARITHMETIC_TEXT: Mapping[str, str] = {
    "float32": "kept at float32",
    "bfloat16": "float32 operands rounded to bfloat16",
    "tf32": "float32 operands rounded to tf32",
    "bfloat16 input": "the input rounded to bfloat16, the kernel kept at float32",
    "bfloat16x3": "three bfloat16 passes (high parts truncated, low parts rounded)",
    "float16 as bfloat16": "float16 operands rounded to bfloat16",
    "round trip kept": "the float32 -> bfloat16 -> float32 round trip left out (the input kept)",
    "blocked scan": "scanned in blocks of 128, each block in order, block totals carried",
    "float32, rounded once": "computed in float32, rounded where stored (not after each op)",
    "flushed": "float32 subnormals flushed to zero",
}
"""What each change the emulation makes reads as (``RoundedOp.format`` names one)."""

Unit = Literal["matrix", "vector", "depthwise"]
"""Where a TPU computes a product: its matrix unit (MXU), its vector unit (a matrix-vector
product: multiply and reduce, in float32), or a depthwise convolution."""

_CHIP = "benchmarks/results/chip-errors-tpu-v5-lite.json"
_MEASURED = (
    "measured on TPU v5 lite (jax 0.10.2, libtpu 0.0.42.1) against float64 models of each "
    f"arithmetic ({_CHIP}, benchmarks/validation/chip_errors.py)"
)
_COMPILER = (
    "the TPU compiler's optimized program (libtpu 0.0.42.1, v5e, deviceless): a product with "
    "a vector operand becomes multiply + reduce, any other a convolution on the matrix unit"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DotRule:
    """How one platform computes a dot or convolution of one kind, with where that is known
    from. Rows are read top down; the first that fits applies."""

    platform: str
    operands: str
    """``float32`` (complex64 too), ``float16``, ``mixed`` (bfloat16 with float32)."""
    precision: str
    """``default``, ``high``, ``highest`` (``precision=`` of the op; ``"any"`` for every one)."""
    unit: str
    """A :data:`Unit`, or ``"any"``."""
    arithmetic: str
    """An :data:`Arithmetic`, or ``float16 as bfloat16``."""
    source: str

    def fits(self, *, operands: str, precision: str, unit: str) -> bool:
        return (
            self.operands == operands
            and self.precision in (precision, "any")
            and self.unit in (unit, "any")
        )


DOT_RULES: tuple[DotRule, ...] = (
    DotRule(platform="tpu", operands="float32", precision="any", unit="vector",
            arithmetic="float32",
            source=f"{_MEASURED}: (1,1024)@(1024,256), (256,1024)@(1024,1), (512,)@(512,256), "
            "(8,1,256)x(8,256,64) and a (32,)@(32,32) scan step came within 0.5 eps of the "
            f"float32 model at every precision, thousands from the bfloat16 one; {_COMPILER}"),
    DotRule(platform="tpu", operands="float32", precision="default", unit="depthwise",
            arithmetic="bfloat16 input",
            source=f"{_MEASURED}: 3x3 depthwise convolutions of 16 and 128 channels came within "
            "2 and 1.5 eps of the model with only the input rounded to bfloat16, 42% bit for bit; "
            "both rounded: 23,000 to 29,000 eps off; with two outputs a channel, both rounded"),
    DotRule(platform="tpu", operands="float32", precision="high", unit="depthwise",
            arithmetic="float32",
            source=f"{_MEASURED}: a depthwise convolution at precision high within 1.5 eps "
            "of the float32 model, 42% bit for bit"),
    DotRule(platform="tpu", operands="float32", precision="high", unit="matrix",
            arithmetic="bfloat16x3",
            source=f"{_MEASURED}: (2,512)@(512,256) to (128,256)@(256,128) products and a 3x3 "
            "convolution came within 0.18 to 0.6 eps of three passes with truncated high "
            "parts, 25 to 55 eps from three passes with rounded ones"),
    DotRule(platform="tpu", operands="float32", precision="highest", unit="any",
            arithmetic="float32",
            source=f"{_MEASURED}: within 0.2 to 0.45 eps of the float32 model (six bfloat16 "
            "passes carry float32's products)"),
    DotRule(platform="tpu", operands="float16", precision="default", unit="matrix",
            arithmetic="float16 as bfloat16",
            source=f"{_MEASURED}: a (128,128)@(128,128) float16 product equal bit for bit to "
            "its operands rounded to bfloat16, products accumulated in float32, the result "
            "rounded to float16"),
    DotRule(platform="tpu", operands="float16", precision="any", unit="matrix",
            arithmetic="bfloat16x3",
            source=f"{_MEASURED}: a (128,128)@(128,128) float16 product at precision high "
            "and highest equal bit for bit to three passes with truncated high parts, the "
            "result rounded to float16"),
    DotRule(platform="tpu", operands="float16", precision="any", unit="any",
            arithmetic="float32",
            source=f"{_MEASURED}: a float16 matrix-vector product 99% equal to the float32 "
            "model"),
    DotRule(platform="tpu", operands="mixed", precision="default", unit="any",
            arithmetic="bfloat16",
            source=f"{_MEASURED}: bfloat16 @ float32 -> float32 within 0.36 eps of both "
            "operands in bfloat16"),
)  # fmt: skip
"""Dots and convolutions a platform computes otherwise than its default-precision rule says
(:data:`PRECISION_RULES`), measured on the chip; a row's ``source`` says how."""


def dot_arithmetic(
    platform: str,
    *,
    operands: str,
    precision: str,
    unit: str,
    cuda_capability: tuple[int, int] | None = None,
) -> DotRule | DotPrecisionRule | None:
    """The rule for one dot or convolution on ``platform``: a measured row of
    :data:`DOT_RULES`, else (float32 at the default precision) its :data:`PRECISION_RULES`
    row, else ``None`` (computed as on the CPU).

    >>> dot_arithmetic("tpu", operands="float32", precision="default", unit="vector").arithmetic
    'float32'
    >>> dot_arithmetic("tpu", operands="float32", precision="default", unit="matrix").format.name
    'bfloat16'
    """
    for rule in DOT_RULES:
        if rule.platform == platform and rule.fits(
            operands=operands, precision=precision, unit=unit
        ):
            return rule
    if operands == "float32" and precision == "default":
        return precision_rule(platform, cuda_capability=cuda_capability)
    return None


def dot_unit(
    lhs_shape: Sequence[int],
    rhs_shape: Sequence[int],
    contracting: tuple[Sequence[int], Sequence[int]],
    batch: tuple[Sequence[int], Sequence[int]],
) -> Unit:
    """Where a TPU computes a ``dot_general``: ``vector`` when one operand is a vector (its
    dimensions that are neither contracted nor batched hold one element) and the compiler
    turns the product into multiply + reduce, else ``matrix``.

    With batch dimensions of more than one element, the compiler does so only where that
    operand has a free dimension (of size 1) or neither operand has any; a batched
    ``(b, k) x (b, k, n)`` product (what ``vmap`` of a vector-matrix product makes) goes to
    the matrix unit (the compiler's optimized program, held to it by
    ``tests/test_arithmetic.py``).

    >>> dot_unit((1, 512), (512, 256), ((1,), (0,)), ((), ()))
    'vector'
    >>> dot_unit((2, 512), (512, 256), ((1,), (0,)), ((), ()))
    'matrix'
    >>> dot_unit((8, 256), (8, 256, 64), ((1,), (1,)), ((0,), (0,)))
    'matrix'
    >>> dot_unit((8, 1, 256), (8, 256, 64), ((2,), (1,)), ((0,), (0,)))
    'vector'
    """

    def free(shape: Sequence[int], side: int) -> list[int]:
        taken = set(contracting[side]) | set(batch[side])
        return [d for i, d in enumerate(shape) if i not in taken]

    lhs_free, rhs_free = free(lhs_shape, 0), free(rhs_shape, 1)
    batched = math.prod(lhs_shape[d] for d in batch[0]) > 1
    for own, other in ((lhs_free, rhs_free), (rhs_free, lhs_free)):
        if math.prod(own) != 1:
            continue
        if not batched or own or not other:
            return "vector"
    return "matrix"


def conv_unit(*, input_features: int, feature_group_count: int, output_features: int) -> Unit:
    """``depthwise`` for a convolution with one group per input feature and one output
    feature per group (``feature_group_count`` equal to both), else ``matrix``.

    >>> conv_unit(input_features=16, feature_group_count=16, output_features=16)
    'depthwise'
    >>> conv_unit(input_features=16, feature_group_count=16, output_features=32)
    'matrix'
    """
    if feature_group_count > 1 and input_features == feature_group_count == output_features:
        return "depthwise"
    return "matrix"


SCAN_BLOCK = 128
"""The TPU's cumulative sums along an array's last axis: blocks of this many elements, each
summed in order, the block totals carried the same way (recursively past 128 blocks)."""

BLOCKED_SCANS: Mapping[str, tuple[str, ...]] = {"tpu": ("cumsum",)}
"""The cumulative reductions each platform scans in blocks (float32, along any axis): on TPU
v5 lite, float32 cumsums of 128 to 65,536 values (a length of 1,000 too), reversed, along
the last axis and along the first, equal bit for bit to that model (the CPU's: 3 to 47%);
the TPU compiler's program is reduce-windows of 128, two levels (three past 16,384)
(benchmarks/results/chip-errors-tpu-v5-lite.json)."""

# -- formats narrower than float32, and float64 (issue 55) ---------------------------------------

_FORMATS_MEASURED = (
    "measured on TPU v5 lite (jax 0.10.2, libtpu 0.0.42.1): 64 programs in bfloat16, float16 and "
    "float8 (benchmarks/results/chip-formats-tpu-v5-lite.json, "
    "benchmarks/validation/chip_formats.py)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class NarrowRule:
    """How a platform computes elementwise work in formats narrower than float32.

    A TPU has no vector unit for them: its compiler computes a fused expression of them in
    float32 and rounds where the value is stored, so each op of a chain is not rounded as the
    CPU rounds it. Where a value is stored is the compiler's fusion: the emulation follows it
    by rule (``_jax.emulate``: a reduction's result, a value broadcast into a larger one, a
    conversion the program asks for where it feeds no op of a chain), and its bounded run
    takes the other side of each such choice (what a rule cannot see)."""

    platform: str
    formats: tuple[str, ...]
    """The dtypes computed in float32 and rounded where stored."""
    flushed: tuple[str, ...]
    """Targets whose conversion from float32 flushes float32 subnormals to (signed) zero."""
    stored_sums: tuple[str, ...]
    """Formats in which a float32 sum converted back to the format is stored rounded (the
    compiler makes the pair a reduction in the format)."""
    source: str


NARROW_RULES: Mapping[str, NarrowRule] = {
    "tpu": NarrowRule(
        platform="tpu",
        formats=("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                 "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3"),
        flushed=("bfloat16",),
        stored_sums=("bfloat16",),
        source=f"{_FORMATS_MEASURED}: a*b+c, a five-op polynomial and sigmoid equal to the "
        "expression in float32 rounded once in 100% of the elements, in bfloat16 and float16 "
        "(the CPU: 50-74%); the layer norm and softmax equal to that model with the roundings "
        "where the compiler stores (its optimized program: a reduction's result, a value "
        "broadcast into a larger one), 100% in both formats; f32 -> bfloat16 flushes float32 "
        "subnormals (1,107 of 65,536, every one); x.astype(bfloat16 or float16).astype(float32) "
        "returns x (65,536 of 65,536); bfloat16 cumsum: blocks of 128 rounded, 100%",
    ),
}  # fmt: skip
"""Per platform, how it computes formats narrower than float32 (absent: as the CPU)."""

CHAIN_OPS: frozenset[str] = frozenset(
    {
        "add", "sub", "mul", "div", "neg", "abs", "sign", "max", "min", "rem", "pow",
        "integer_pow", "square", "sqrt", "rsqrt", "cbrt", "exp", "exp2", "expm1", "log",
        "log1p", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
        "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "lgamma",
        "digamma", "floor", "ceil", "round", "clamp", "select_n", "reduce_precision",
        "nextafter", "copy", "copy_p", "add_any",
    }
)  # fmt: skip
"""Elementwise primitives a platform of :data:`NARROW_RULES` computes in float32 on values of
a narrow format, the result kept in float32 for the next op of the chain."""

PASSED_THROUGH: frozenset[str] = frozenset(
    {"reshape", "squeeze", "expand_dims", "transpose", "slice", "rev", "stop_gradient"}
)
"""Primitives that move a chain's float32 values without ending the chain (the compiler fuses
through them)."""

NARROW_IN_FLOAT32: frozenset[str] = frozenset(
    {"reduce_sum", "reduce_window_sum", "cumsum", "cumprod", "cumlogsumexp", "reduce_prod"}
)
"""Reductions a platform of :data:`NARROW_RULES` computes in float32 on a narrow format's
values, its result rounded once (what the CPU may round at every step)."""


def is_narrow(dtype: str, platform: str) -> bool:
    """Whether ``platform`` computes ``dtype`` in float32 (:data:`NARROW_RULES`).

    >>> is_narrow("bfloat16", "tpu"), is_narrow("float32", "tpu"), is_narrow("bfloat16", "cuda")
    (True, False, False)
    """
    rule = NARROW_RULES.get(platform)
    return rule is not None and dtype in rule.formats


@dataclass(frozen=True, slots=True, kw_only=True)
class WideRule:
    """What a platform does with float64 (and complex128): never emulated, and where its
    compiler refuses it, why."""

    platform: str
    refused: Mapping[str, str]
    """Per primitive, the compiler's refusal (its own words)."""
    otherwise: str
    """What the platform does with the rest of float64 arithmetic."""
    source: str


WIDE_DTYPES: tuple[str, ...] = ("float64", "complex128")

WIDE_RULES: Mapping[str, WideRule] = {
    "tpu": WideRule(
        platform="tpu",
        refused={
            "lu": "UNIMPLEMENTED: Only F32 and C64 types are implemented in LuDecomposition",
            "fft": "INVALID_ARGUMENT: Unexpected operand type for FFT",
        },
        otherwise="the TPU has no float64 unit: its compiler computes float64 in software, "
        "never measured on the chip",
        source="libtpu 0.0.42.1 compiling for v5e:1x1 without a chip (jax 0.10.2, x64): float64 "
        "add, exp, dot, sum, cumsum, qr, cholesky, triangular_solve, svd, eigh, tanh and lgamma "
        "compile (the compiler's 64-bit rewrite); lu and fft are refused",
    ),
}
"""Per platform, float64 and complex128: the emulation never computes them as the platform
does (a check holding them reads "not run", with why)."""
