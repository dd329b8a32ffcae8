"""What another platform computes differently from the CPU, and what an emulation of it did.

An *emulation* runs a checked function on the CPU as a platform that is not present would
run it (``pytest_jaxport._jax.emulate``): its ``lax.platform_dependent`` branch for that
platform, its Pallas kernels in the interpret mode matching the kernel kind that platform's
lowering selects, and its float32 dots and convolutions at the default precision with their
operands rounded to the format that platform multiplies in. This module holds the pure
half: the facts (which platform multiplies float32 in which format, which interpreter runs
which kernel kind, from which JAX release) and the records an emulation produces. It
imports neither JAX nor pytest.

>>> default_dot_format("tpu")
NumberFormat(name='bfloat16', exponent_bits=8, mantissa_bits=7)
>>> default_dot_format("cuda", cuda_capability=(7, 0)) is None  # V100: full float32
True

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pytest_jaxport.model.numerics import Comparison, Tolerance
from pytest_jaxport.model.platforms import DESCRIPTIONS

HOST = "cpu"
"""Where an emulation runs."""

EMULATED_PLATFORMS: tuple[str, ...] = tuple(p.name for p in DESCRIPTIONS.values() if p.emulated)
"""Platforms an emulation can stand in for (the CPU is executed, never emulated), as their
descriptions say (:mod:`pytest_jaxport.model.platforms`)."""


def emulated_label(platform: str) -> str:
    """How reports name an emulated platform's numerics: never as if executed there.

    >>> emulated_label("tpu")
    'tpu (emulated on cpu)'
    """
    return f"{platform} (emulated on {HOST})"


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
}
"""What each change the emulation makes reads as (``RoundedOp.format`` names one)."""

Unit = Literal["matrix", "vector", "depthwise"]
"""Where a TPU computes a product: its matrix unit (MXU), its vector unit (a matrix-vector
product: multiply and reduce, in float32), or a depthwise convolution."""

_CHIP = "benchmarks/results/chip-errors-tpu-v5-lite.json"
_MEASURED = (
    "measured on TPU v5 lite (jax 0.10.2, libtpu 0.0.42.1) against float64 models of each "
    f"arithmetic ({_CHIP}, benchmarks/chip_errors.py)"
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
    ``tests/test_chip_numerics.py``).

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

ROUND_TRIPS_ELIDED: Mapping[str, tuple[str, ...]] = {"tpu": ("bfloat16",)}
"""The narrower formats whose float32 -> format -> float32 round trip a platform's compiler
removes (the result is the input): on TPU v5 lite ``x.astype(bfloat16).astype(float32)``
returned ``x`` bit for bit, 65,536 of 65,536, while ``x.astype(bfloat16)`` alone rounds
to nearest even (benchmarks/results/chip-errors-tpu-v5-lite.json)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """Where a platform's bounds come from: the device, JAX and libtpu they were measured
    with, the script and its recorded results."""

    device: str
    jax: str
    libtpu: str
    date: str
    script: str
    results: str

    def __str__(self) -> str:
        return f"{self.device} (measured: jax {self.jax}, libtpu {self.libtpu})"


Scale = Literal["result", "terms", "largest"]
"""What an op's error bound is relative to: ``result`` (units in the last place of each
result, plus an absolute part near the result's zeros), ``terms`` (float32's epsilon times
the sum of the magnitudes of what is added: reductions, dots, convolutions), ``largest``
(epsilon times the op's largest result: decompositions, transforms)."""

EPS32 = 2.0**-23
"""float32's epsilon: one unit in the last place of 1."""

FUSED_MULTIPLY_ADD = "mul+add"
"""The bound of a product an add reads (``a * b + c``): XLA's CPU compiler fuses the two
into one rounding, a chip that rounds the product first differs by up to half an ulp of it
(``calibration/calibrate.py chip-errors`` adopts it where the chip was measured to)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OpBound:
    """The measured worst error of one primitive on a platform's chip, against float64."""

    op: str
    scale: Scale
    ulps: float
    """The bound, in units of its scale: ``|error| <= ulps * ulp(y) + abs_eps * eps``
    (``result``), ``<= ulps * eps * sum|terms|`` (``terms``), ``<= ulps * eps * max|y|``
    (``largest``)."""
    abs_eps: float = 0.0
    worst_ulp: float | None = None
    """``result`` scale: the worst error measured in ulp (near the result's zeros too)."""
    measured_range: tuple[float, float] | None = None
    sign_flips: bool = False
    """Its vector outputs come out with either sign, vector by vector (eigenvectors, the
    singular vectors)."""

    @property
    def relative(self) -> float:
        """The bound's size relative to its scale (``ulps * eps``)."""
        return self.ulps * EPS32

    def describe(self) -> str:
        """``within 1,336 ulp``, ``within 0.9 ulp of the sum of its terms``.

        >>> OpBound(op="tanh", scale="result", ulps=734, worst_ulp=1336).describe()
        'within 1,336 ulp'
        >>> OpBound(op="eigh", scale="largest", ulps=12, sign_flips=True).describe()
        'within 12 ulp of its largest result, vectors of either sign'
        """
        if self.scale == "result":
            return (
                f"within {_count(self.worst_ulp if self.worst_ulp is not None else self.ulps)} ulp"
            )
        of = "of the sum of its terms" if self.scale == "terms" else "of its largest result"
        flips = ", vectors of either sign" if self.sign_flips else ""
        return f"within {_count(self.ulps)} ulp {of}{flips}"


def _count(value: float) -> str:
    """``1,336``, ``0.9``, ``12``."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChipBounds:
    """What one platform's chip was measured to compute: each bounded primitive's error,
    and the primitives equal bit for bit to the CPU's."""

    platform: str
    measurement: Measurement
    ops: Mapping[str, OpBound]
    exact: frozenset[str]

    def bound(self, op: str) -> OpBound | None:
        """``op``'s measured bound (or that of the op whose arithmetic it is, :data:`ALIKE`)."""
        return self.ops.get(ALIKE.get(op, op))

    def is_exact(self, op: str) -> bool:
        """Whether ``op`` (or the op whose arithmetic it is) was measured bit-equal."""
        return ALIKE.get(op, op) in self.exact


ALIKE: Mapping[str, str] = {"add_any": "add", "reduce_window_sum": "reduce_sum"}
"""Primitives whose arithmetic is another's, bounded (or exact) as that one: ``add_any`` (the
sum of two cotangents) is an add; ``reduce_window_sum`` (average pooling) is a sum of what
each window holds, bounded against the sum of their magnitudes."""


CHIP_ERRORS_FILE = "chip_errors.json"
"""The bounds, shipped inside the package (``pytest_jaxport/chip_errors.json``):
``calibration/calibrate.py chip-errors`` writes it from a chip's
``benchmarks/chip_errors.py`` results, nothing else does."""

EXACT_EVERYWHERE: frozenset[str] = frozenset(
    {
        # moving, selecting and comparing values: no arithmetic
        "broadcast_in_dim", "concatenate", "convert_element_type", "copy", "copy_p",
        "dynamic_slice", "dynamic_update_slice", "expand_dims", "gather", "iota", "pad",
        "reshape", "rev", "scatter", "select_n", "slice", "split", "squeeze", "transpose",
        "eq", "ne", "lt", "le", "gt", "ge", "is_finite", "and", "or", "not", "xor",
        "argmax", "argmin", "reduce_max", "reduce_min", "reduce_and", "reduce_or", "sort",
        "reduce_window_max", "reduce_window_min", "select_and_gather_add",
        "cummax", "cummin", "top_k", "abs", "neg", "sign", "clamp", "stop_gradient",
        "reduce_precision", "nextafter", "bitcast_convert_type", "shift_left",
        "shift_right_logical", "shift_right_arithmetic", "population_count", "ceil",
        "random_bits", "random_seed", "random_wrap", "random_unwrap", "threefry2x32",
        "real", "imag", "complex", "conj", "optimization_barrier", "pjit", "jit",
        "closed_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
        "remat", "checkpoint", "cond", "while", "scan", "platform_index", "device_put",
        "sharding_constraint", "mesh_cast", "reshard", "name", "pvary", "psum_invariant",
    }
)  # fmt: skip
"""Primitives no platform computes differently (they move, select or compare values, or
hold other equations): never bounded, never "no bound"."""


def read_chip_bounds(text: str, *, source: str) -> dict[str, ChipBounds]:
    """The bounds of a ``chip_errors.json`` text, per platform; a wrong shape names
    ``source`` and the key.

    >>> bounds = read_chip_bounds(
    ...     '{"tpu": {"device": "TPU v5 lite", "jax": "0.10.2", "libtpu": "0.0.42.1", '
    ...     '"date": "2026-12-06", "script": "s", "results": "r", "exact": ["add"], '
    ...     '"ops": {"tanh": {"scale": "result", "ulps": 734, "abs_eps": 4.7, '
    ...     '"worst_ulp": 1336, "range": [-5, 5]}}}}', source="x")
    >>> bounds["tpu"].bound("tanh").describe(), sorted(bounds["tpu"].exact)
    ('within 1,336 ulp', ['add'])
    """
    import json

    found: dict[str, ChipBounds] = {}
    data = json.loads(text)
    for platform, entry in data.items():
        if platform == "about":
            continue
        try:
            measurement = Measurement(
                device=str(entry["device"]), jax=str(entry["jax"]), libtpu=str(entry["libtpu"]),
                date=str(entry["date"]), script=str(entry["script"]),
                results=str(entry["results"]),
            )  # fmt: skip
            ops = {
                op: OpBound(
                    op=op,
                    scale=_scale(bound["scale"]),
                    ulps=float(bound["ulps"]),
                    abs_eps=float(bound.get("abs_eps", 0.0)),
                    worst_ulp=None if bound.get("worst_ulp") is None
                    else float(bound["worst_ulp"]),
                    measured_range=None if bound.get("range") is None
                    else (float(bound["range"][0]), float(bound["range"][1])),
                    sign_flips=bool(bound.get("sign_flips", False)),
                )
                for op, bound in entry["ops"].items()
            }  # fmt: skip
            exact = frozenset(str(op) for op in entry["exact"])
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"{source}: {platform}: {type(e).__name__}: {e}") from e
        found[platform] = ChipBounds(
            platform=platform, measurement=measurement, ops=ops, exact=exact
        )
    return found


def _scale(value: object) -> Scale:
    if value == "result":
        return "result"
    if value == "terms":
        return "terms"
    if value == "largest":
        return "largest"
    raise ValueError(f"scale: expected result, terms or largest, found {value!r}")


@functools.cache
def shipped_chip_bounds() -> Mapping[str, ChipBounds]:
    """The bounds shipped in ``pytest_jaxport/chip_errors.json`` (read once per process)."""
    import importlib.resources

    resource = importlib.resources.files("pytest_jaxport") / CHIP_ERRORS_FILE
    return read_chip_bounds(
        resource.read_text(encoding="utf-8"), source=f"pytest_jaxport/{CHIP_ERRORS_FILE}"
    )


def chip_bounds(platform: str) -> ChipBounds | None:
    """The measured bounds of ``platform``'s chip, ``None`` where none was measured."""
    return shipped_chip_bounds().get(platform)


# -- kernels and the interpreters that run them on a CPU ----------------------------------------

KernelKind = Literal["mosaic_tpu", "mosaic_gpu", "triton"]
KERNEL_KINDS: tuple[KernelKind, ...] = ("mosaic_tpu", "mosaic_gpu", "triton")


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpreter:
    """A way JAX runs a Pallas kernel of one kind on a CPU."""

    name: str
    api: str
    since: str
    """The first JAX release whose public API has it."""


TPU_INTERPRET = Interpreter(
    name="TPU interpret mode", api="jax.experimental.pallas.tpu.InterpretParams", since="0.6.2"
)
"""Simulates VMEM, DMAs and semaphores (``pltpu.force_tpu_interpret_mode`` from 0.7)."""
GPU_INTERPRET = Interpreter(
    name="Mosaic GPU interpret mode",
    api="jax.experimental.pallas.mosaic_gpu.InterpretGPUParams",
    since="0.11.1",
)
"""Simulates shared memory, threads and barriers (``plgpu.force_gpu_interpret_mode``)."""
GENERIC_INTERPRET = Interpreter(
    name="Pallas interpreter", api="pallas_call(interpret=True)", since="0.4.31"
)
"""The generic interpreter: what a Triton kernel has (it has no interpret mode of its own)."""

_INTERPRETERS: Mapping[tuple[str, KernelKind], Interpreter] = {
    ("tpu", "mosaic_tpu"): TPU_INTERPRET,
    ("cuda", "mosaic_gpu"): GPU_INTERPRET,
    ("cuda", "triton"): GENERIC_INTERPRET,
    ("rocm", "triton"): GENERIC_INTERPRET,
}


def interpreter_for(platform: str, kind: KernelKind) -> Interpreter | None:
    """The interpreter that runs a ``kind`` kernel as ``platform`` would, or ``None`` where
    ``platform`` does not run that kind (a TPU kernel on cuda, Mosaic GPU on rocm).

    >>> interpreter_for("cuda", "triton").name
    'Pallas interpreter'
    >>> interpreter_for("rocm", "mosaic_gpu") is None
    True
    """
    return _INTERPRETERS.get((platform, kind))


# -- what an emulation did ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EmulatedKernel:
    """A kernel the emulation ran in an interpret mode."""

    label: str
    """``Pallas kernel matmul`` (``_jax.adapters.kernel_label``)."""
    location: str
    """The user's ``file:line`` that called it (``""`` where JAX kept none)."""
    interpreter: str

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "location": self.location, "interpreter": self.interpreter}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmulatedKernel:
        return cls(
            label=str(data["label"]),
            location=str(data["location"]),
            interpreter=str(data["interpreter"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundedOp:
    """Dots, convolutions or scans at one source line the emulation computed as the emulated
    platform does (``count`` equations in the program, loop bodies counted once): ``format``
    names the arithmetic (a key of :data:`ARITHMETIC_TEXT`: ``bfloat16``, ``float32``,
    ``bfloat16x3``...), ``why`` the rule (a key of :data:`REASON_TEXT`; ``""``: the
    platform's default precision)."""

    op: str
    location: str
    format: str
    count: int = 1
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"op": self.op, "location": self.location,
                                 "format": self.format, "count": self.count}  # fmt: skip
        if self.why:  # reports without the measured rules are unchanged
            found["why"] = self.why
        return found

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoundedOp:
        return cls(
            op=str(data["op"]),
            location=str(data["location"]),
            format=str(data["format"]),
            count=int(data.get("count", 1)),
            why=str(data.get("why", "")),
        )


REASON_TEXT: Mapping[str, str] = {
    "": "{platform}'s default precision",
    "vector": "{platform} computes a matrix-vector product in float32",
    "depthwise": "{platform}'s depthwise convolution",
    "high": '{platform}\'s precision="high"',
    "highest": '{platform}\'s precision="highest" on float16',
    "float16": "{platform}'s matrix unit multiplies float16 as bfloat16",
    "mixed": "{platform} multiplies a bfloat16 x float32 product in bfloat16",
    "scan": "{platform}'s cumulative sum",
    "round trip": "{platform}'s compiler removes the round trip",
}
"""Why the emulation changed an op (``RoundedOp.why``), as its line says it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundedOp:
    """Ops at one source line the emulation cannot compute as the platform's chip does (its
    transcendental functions, reduction order, decompositions), with the chip's measured
    bound (``None``: no bound was measured for it: it may differ by any amount)."""

    op: str
    location: str
    bound: OpBound | None
    count: int = 1

    def describe(self, device: str) -> str:
        """``tanh at model.py:12 is within 1,336 ulp on TPU v5 lite``."""
        if self.bound is None:
            return f"{self.op}{_at(self.location)} has no measured bound on {device}"
        return f"{self.op}{_at(self.location)} is {self.bound.describe()} on {device}"

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"op": self.op, "location": self.location, "count": self.count}
        if self.bound is not None:
            b = self.bound
            found["bound"] = {"scale": b.scale, "ulps": b.ulps, "abs_eps": b.abs_eps,
                              "worst_ulp": b.worst_ulp, "sign_flips": b.sign_flips,
                              "range": None if b.measured_range is None
                              else list(b.measured_range)}  # fmt: skip
        return found

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BoundedOp:
        op = str(data["op"])
        raw = data.get("bound")
        bound = None
        if raw is not None:
            worst, span = raw.get("worst_ulp"), raw.get("range")
            bound = OpBound(op=op, scale=_scale(raw["scale"]), ulps=float(raw["ulps"]),
                            abs_eps=float(raw.get("abs_eps", 0.0)),
                            worst_ulp=None if worst is None else float(worst),
                            measured_range=None if span is None
                            else (float(span[0]), float(span[1])),
                            sign_flips=bool(raw.get("sign_flips", False)))  # fmt: skip
        return cls(op=op, location=str(data["location"]), bound=bound,
                   count=int(data.get("count", 1)))  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ChosenBranch:
    """A ``lax.platform_dependent`` resolved for the emulated platform."""

    location: str
    branch: str
    """The platform names of the branch taken (``"tpu"``), or ``"default"``."""

    def to_dict(self) -> dict[str, Any]:
        return {"location": self.location, "branch": self.branch}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChosenBranch:
        return cls(location=str(data["location"]), branch=str(data["branch"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Unemulated:
    """Something the emulation could not do as the platform would.

    ``blocks``: the emulation did not run at all (a kernel this JAX cannot interpret, an FFI
    target with no CPU counterpart); otherwise it ran without this part emulated (a dot
    inside a ``shard_map`` computed at full float32), which the report says beside the
    numbers.
    """

    what: str
    location: str
    reason: str
    blocks: bool

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "location": self.location, "reason": self.reason,
                "blocks": self.blocks}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Unemulated:
        return cls(
            what=str(data["what"]),
            location=str(data["location"]),
            reason=str(data["reason"]),
            blocks=bool(data["blocks"]),
        )


def needs_release(interpreter: Interpreter, installed: str) -> str:
    """Why a kernel is not interpreted here: ``cannot interpret here: needs jax >= 0.11.1
    (Mosaic GPU interpret mode; installed 0.10.2)``."""
    return (
        f"cannot interpret here: needs jax >= {interpreter.since} ({interpreter.name}; "
        f"installed {installed})"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulation:
    """What emulating ``platform`` on the CPU did, and where (a report's record of it)."""

    platform: str
    dot_format: str | None
    """The format default-precision float32 operands were rounded to (``None``: none)."""
    branches: tuple[ChosenBranch, ...] = ()
    kernels: tuple[EmulatedKernel, ...] = ()
    rounded: tuple[RoundedOp, ...] = ()
    pinned: int = 0
    """float32 dots and convolutions left alone: explicit ``precision``, a
    ``preferred_element_type`` other than their operands', a dot algorithm, or
    ``jax.default_matmul_precision`` set around the check."""
    unemulated: tuple[Unemulated, ...] = ()
    error: str | None = None
    """How the emulated run failed (an interpreted kernel's out-of-bounds read, say)."""
    bounded: tuple[BoundedOp, ...] = ()
    """The ops computed as on the CPU whose error on the chip is bounded by measurement
    (or has no measured bound); the emulation ran a second time with each moved by its
    bound (``PlatformProbe.emulated_bounds``)."""
    bounds_from: str | None = None
    """The chip those bounds were measured on (``TPU v5 lite (measured: jax 0.10.2, libtpu
    0.0.42.1)``); ``None`` where the platform has none."""

    @property
    def label(self) -> str:
        """``tpu (emulated on cpu)``."""
        return emulated_label(self.platform)

    @property
    def ran(self) -> bool:
        """Whether outputs exist: nothing blocked the emulation and its run succeeded."""
        return self.error is None and not any(u.blocks for u in self.unemulated)

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "dot_format": self.dot_format,
            "branches": [b.to_dict() for b in self.branches],
            "kernels": [k.to_dict() for k in self.kernels],
            "rounded": [r.to_dict() for r in self.rounded],
            "pinned": self.pinned,
            "unemulated": [u.to_dict() for u in self.unemulated],
            "error": self.error,
            **({"bounded": [b.to_dict() for b in self.bounded], "bounds_from": self.bounds_from}
               if self.bounds_from is not None else {}),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Emulation:
        error = data.get("error")
        dot_format = data.get("dot_format")
        return cls(
            platform=str(data["platform"]),
            dot_format=None if dot_format is None else str(dot_format),
            branches=tuple(ChosenBranch.from_dict(b) for b in data.get("branches", ())),
            kernels=tuple(EmulatedKernel.from_dict(k) for k in data.get("kernels", ())),
            rounded=tuple(RoundedOp.from_dict(r) for r in data.get("rounded", ())),
            pinned=int(data.get("pinned", 0)),
            unemulated=tuple(Unemulated.from_dict(u) for u in data.get("unemulated", ())),
            error=None if error is None else str(error),
            bounded=tuple(BoundedOp.from_dict(b) for b in data.get("bounded", ())),
            bounds_from=None if data.get("bounds_from") is None else str(data["bounds_from"]),
        )


def with_locations(emulation: Emulation, shown: Callable[[str], str]) -> Emulation:
    """``emulation`` with each non-empty ``file:line`` as ``shown`` writes it (a report shows
    files relative to the project, as the census does).

    >>> e = Emulation(platform="tpu", dot_format=None,
    ...     branches=(ChosenBranch(location="/src/m.py:3", branch="tpu"),))
    >>> with_locations(e, lambda at: at.removeprefix("/src/")).branches[0].location
    'm.py:3'
    """

    def at(location: str) -> str:
        return shown(location) if location else location

    return replace(
        emulation,
        branches=tuple(replace(b, location=at(b.location)) for b in emulation.branches),
        kernels=tuple(replace(k, location=at(k.location)) for k in emulation.kernels),
        rounded=tuple(replace(r, location=at(r.location)) for r in emulation.rounded),
        unemulated=tuple(replace(u, location=at(u.location)) for u in emulation.unemulated),
        bounded=tuple(replace(b, location=at(b.location)) for b in emulation.bounded),
    )


def grouped_rounding(sites: Sequence[tuple[str, ...]]) -> tuple[RoundedOp, ...]:
    """``(op, location, format[, why])`` per changed equation, grouped into counted sites in
    the order they first occur."""
    counts: dict[tuple[str, ...], int] = {}
    for site in sites:
        counts[site] = counts.get(site, 0) + 1
    return tuple(
        RoundedOp(
            op=site[0],
            location=site[1],
            format=site[2],
            count=n,
            why=site[3] if len(site) > 3 else "",
        )
        for site, n in counts.items()
    )


def grouped_bounds(sites: Sequence[tuple[str, str]], bounds: ChipBounds) -> tuple[BoundedOp, ...]:
    """``(op, location)`` per bounded equation, grouped into counted sites, each with its
    measured bound (``None``: none measured), the widest first."""
    counts: dict[tuple[str, str], int] = {}
    for site in sites:
        counts[site] = counts.get(site, 0) + 1
    found = [
        BoundedOp(op=op, location=location, bound=bounds.bound(op), count=n)
        for (op, location), n in counts.items()
    ]
    return tuple(sorted(found, key=lambda b: -_width(b.bound)))


def _width(bound: OpBound | None) -> float:
    """How wide a bound reads: no bound widest, then the worst ulp of a result."""
    if bound is None:
        return math.inf
    return (bound.worst_ulp or bound.ulps) * EPS32 if bound.scale == "result" else bound.relative


# -- what a report says ----------------------------------------------------------------------------


def _at(location: str) -> str:
    return f" at {location}" if location else ""


def emulation_lines(emulation: Emulation) -> list[str]:
    """What was emulated and where, one line per kind of change, for a failure message or
    a report's details (the sites a mismatch may come from).

    >>> e = Emulation(platform="tpu", dot_format="bfloat16",
    ...     kernels=(EmulatedKernel(label="Pallas kernel k", location="m.py:3",
    ...                             interpreter="TPU interpret mode"),),
    ...     rounded=(RoundedOp(op="dot_general", location="m.py:9", format="bfloat16", count=2),))
    >>> print("\\n".join(emulation_lines(e)))
    Pallas kernel k at m.py:3: run in TPU interpret mode
    2 dot_general at m.py:9: float32 operands rounded to bfloat16 (tpu's default precision)
    """
    lines = []
    for branch in emulation.branches:
        lines.append(f"platform_dependent{_at(branch.location)}: took the {branch.branch} branch")
    for kernel in emulation.kernels:
        lines.append(f"{kernel.label}{_at(kernel.location)}: run in {kernel.interpreter}")
    for op in emulation.rounded:
        count = f"{op.count} " if op.count > 1 else ""
        what = ARITHMETIC_TEXT.get(op.format, f"float32 operands rounded to {op.format}")
        why = REASON_TEXT.get(op.why, op.why).format(platform=emulation.platform)
        measured = (
            f"; measured on {emulation.bounds_from}" if op.why and emulation.bounds_from else ""
        )
        lines.append(f"{count}{op.op}{_at(op.location)}: {what} ({why}{measured})")
    if emulation.pinned:
        noun = "dot/convolution" if emulation.pinned == 1 else "dots/convolutions"
        lines.append(
            f"{emulation.pinned} float32 {noun} whose precision the program sets: left as set"
        )
    for item in emulation.unemulated:
        state = "not emulated" if item.blocks else "computed as on cpu"
        lines.append(f"{item.what}{_at(item.location)}: {state}: {item.reason}")
    if emulation.error is not None:
        lines.append(f"the emulated run failed: {emulation.error}")
    return lines


def may_differ(emulation: Emulation, bounded: Comparison | None) -> bool:
    """Whether an emulation whose outputs matched may still differ on the chip: an op with
    no measured bound ran, or moving each bounded op by its bound moved the outputs beyond
    the tolerance (``bounded``: that run's comparison)."""
    if any(b.bound is None for b in emulation.bounded):
        return True
    return bounded is not None and not bounded.ok


def may_differ_lines(emulation: Emulation, bounded: Comparison | None) -> list[str]:
    """Why an emulation that matched may differ on the chip: a headline naming the widest
    bound (``may differ on tpu: tanh at model.py:12 is within 1,336 ulp on TPU v5 lite
    (measured: ...), above rtol 1e-06``), then how far the bounds move the outputs and each
    bounded op.

    >>> tanh = OpBound(op="tanh", scale="result", ulps=734, worst_ulp=1336)
    >>> e = Emulation(platform="tpu", dot_format="bfloat16", bounds_from="TPU v5 lite",
    ...     bounded=(BoundedOp(op="tanh", location="m.py:12", bound=tanh),))
    >>> print("\\n".join(may_differ_lines(e, None)))
    may differ on tpu: tanh at m.py:12 is within 1,336 ulp on TPU v5 lite
    """
    device = emulation.bounds_from or emulation.platform
    tolerance = _tolerance_of(bounded)
    sites = emulation.bounded
    if not sites:
        return []
    head = sites[0]
    line = f"may differ on {emulation.platform}: {head.describe(device)}"
    if tolerance is not None and _above(head.bound, tolerance.rtol):
        line += f", above rtol {tolerance.rtol:g}"
    lines = [line]
    if bounded is not None and not bounded.ok:
        moved = "; ".join(m.message for m in bounded.mismatches)
        lines.append(f"with each op below off by its measured bound: {moved}")
    for site in sites[1:] if len(lines) == 1 else sites:
        count = f"{site.count} " if site.count > 1 else ""
        said = site.describe(device).removesuffix(f" on {device}")
        above = ""
        if tolerance is not None and _above(site.bound, tolerance.rtol):
            above = f" (above rtol {tolerance.rtol:g})"
        lines.append(f"{count}{said}{above}")
    return lines


def _tolerance_of(comparison: Comparison | None) -> Tolerance | None:
    if comparison is None:
        return None
    return next((m.tolerance for m in comparison.mismatches if m.tolerance is not None), None)


def _above(bound: OpBound | None, rtol: float) -> bool:
    """Whether an op's own error bound, relative to its result, exceeds ``rtol``."""
    if bound is None:
        return True
    return bound.scale == "result" and (bound.worst_ulp or bound.ulps) * EPS32 > rtol


def divergence_message(emulation: Emulation, comparison_text: str) -> str:
    """A mismatch of an emulated platform with the reference: the comparison (as
    ``model.numerics.describe`` words it, compared under :attr:`Emulation.label`), then what was
    emulated, so the failure names the kernel or dot that may have diverged."""
    lines = [comparison_text, f"  emulated as {emulation.platform} would run it:"]
    lines += [f"    {line}" for line in emulation_lines(emulation)]
    return "\n".join(lines)


def not_emulated_message(emulation: Emulation) -> str:
    """Why an emulation has no outputs (a note for the report, never a failure).

    >>> e = Emulation(platform="cuda", dot_format="tf32", unemulated=(Unemulated(
    ...     what="Pallas kernel k", location="m.py:3", blocks=True,
    ...     reason="cannot interpret here: needs jax >= 0.11.1 (Mosaic GPU interpret mode; "
    ...            "installed 0.10.2)"),))
    >>> print(not_emulated_message(e))
    cuda (emulated on cpu): not run: Pallas kernel k at m.py:3: cannot interpret here: needs jax >= 0.11.1 (Mosaic GPU interpret mode; installed 0.10.2)
    """  # noqa: E501
    reasons = [f"{u.what}{_at(u.location)}: {u.reason}" for u in emulation.unemulated if u.blocks]
    if emulation.error is not None:
        reasons.append(f"the emulated run failed: {emulation.error}")
    return f"{emulation.label}: not run: " + "; ".join(reasons or ["nothing to run"])
