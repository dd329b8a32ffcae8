"""The formats-and-layout rules, as data: what each platform (on which devices, with which
compiler releases) does with a numeric format or a memory layout that lowers for it but does
not port to it, each rule with its public source.

A program that lowers for every platform can still assume things its target does not share:
float64 on a TPU, one vendor's float8 variant on another vendor's matrix cores, float32 dots
that silently run with TF32 or bfloat16 inputs at the default precision, arrays whose
trailing dimensions pad out TPU tiles, convolutions in a layout the target's libraries
transpose. :data:`FORMAT_RULES` says so, row by row; :mod:`pytest_jaxport.model.format_census`
finds where a program does it. docs/reference.md's table of rules is generated from it
(:func:`rules_markdown`).

    >>> [rule.name for rule in rules_for("tpu", Device(platform="tpu", generation="v5e"))][:2]
    ['complex128-fft-not-compiled', 'float64-lu-not-compiled']

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pytest_jaxport.model.census import tensor_type
from pytest_jaxport.model.devices import COMPILERS, GENERATIONS, Device, generation_range
from pytest_jaxport.model.dtypes import FLOAT8, FNUZ_FLOAT8, INT4, OCP_FLOAT8, dtype_name
from pytest_jaxport.model.findings import Effect, FindingKind
from pytest_jaxport.model.platforms import release

MATMUL_OPS = ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution")
"""The ops a matrix unit (MXU, tensor core, matrix core) runs."""

NOTABLE_ELEMENTS = frozenset({"f64", "complex<f64>", *FLOAT8, "f8E8M0FNU", "f4E2M1FN", *INT4})
"""Element types some rule flags at any op, not only at dots and convolutions: the StableHLO
reader keeps the source location of every op whose types hold one (``lowering.py``), so that
their findings point at the user's line. float16/bfloat16/float32 rules concern dots and
convolutions only, which keep their location anyway."""


@functools.lru_cache(maxsize=8192)
def is_notable(type_text: str) -> bool:
    """Whether a StableHLO type holds an element type of :data:`NOTABLE_ELEMENTS`."""
    parsed = tensor_type(type_text)
    if parsed is not None:
        return parsed[1] in NOTABLE_ELEMENTS
    return any(element in type_text for element in ("f64", "f8E", "f4E", "i4>", "i4,"))


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatRule:
    """One row of :data:`FORMAT_RULES`: what ``platform`` (on ``devices``, every generation where
    empty) does with ``elements`` at ``ops``, and the public source that says so."""

    name: str
    kind: FindingKind
    platform: str
    effect: Effect
    summary: str
    source: str
    devices: tuple[str, ...] = ()
    elements: frozenset[str] = frozenset()
    """StableHLO element types the rule is about: in an operand, for rules on
    :data:`MATMUL_OPS` (the inputs decide what a matrix unit computes, whatever the result
    type), in any operand or result otherwise; empty: any."""
    ops: tuple[str, ...] = ("*",)
    """fnmatch patterns of the ops it applies to."""
    targets: tuple[str, ...] = ()
    """fnmatch patterns of the custom-call targets it applies to (``LuDecomposition``);
    empty: any op of :attr:`ops`."""
    releases: tuple[str, str] = ("", "")
    """``(first, first not)``: the releases of the platform's compiler (:data:`COMPILERS`)
    the rule holds for, the second excluded (``("", "0.0.50")``: libtpu before 0.0.50); empty
    ends are open. Where the release judged for is unknown, the rule holds."""
    compiles: bool = True
    """``False``: the target's compiler rejects the op (it lowers all the same)."""
    precision: Literal["any", "default"] = "any"
    """``default``: only dots/convolutions at the default precision (no explicit
    ``precision=``, no dot algorithm)."""
    unit: int = 0
    """Matrix-unit rules: the size dimensions should be multiples of (elements on TPU,
    bytes on GPUs)."""
    layout: str = ""
    """Convolution rules: the layout the target's kernels take, as ``input/kernel`` labels in
    StableHLO's notation, major to minor (``b01f/o01i``: NHWC input, OHWI kernel; an
    empty kernel part: any kernel layout)."""
    ranks: tuple[int, ...] = ()
    """Convolution rules: the input ranks it applies to (4: a 2-D convolution); empty: any."""

    def applies(self, device: Device) -> bool:
        if self.devices and device.generation not in self.devices:
            return False
        return not device.compiler or in_releases(device.compiler, self.releases)

    @property
    def release_text(self) -> str:
        """``libtpu < 0.0.50``, ``libtpu >= 0.0.44``, ``libtpu 0.0.44 to before 0.0.50``: the
        releases it holds for (empty: every release)."""
        first, until = self.releases
        if not first and not until:
            return ""
        compiler = COMPILERS.get(self.platform, "compiler")
        if first and until:
            return f"{compiler} {first} to before {until}"
        return f"{compiler} >= {first}" if first else f"{compiler} < {until}"


def in_releases(version: str, releases: tuple[str, str]) -> bool:
    """Whether ``version`` is within ``(first, first not)`` (:attr:`FormatRule.releases`).

    >>> in_releases("0.0.42.1", ("", "0.0.50")), in_releases("0.0.52", ("", "0.0.50"))
    (True, False)
    """
    first, until = releases
    found = release(version)
    return (not first or found >= release(first)) and (not until or found < release(until))


_TPU_V6_ON = generation_range("tpu", "v6e")
_TPU_BEFORE_V6 = generation_range("tpu", "v2", "v5p")
_CUDA_SM80_ON = generation_range("cuda", "sm80")
_CUDA_BEFORE_SM80 = generation_range("cuda", "sm60", "sm75")
_CUDA_BEFORE_SM89 = generation_range("cuda", "sm60", "sm87")
_CUDA_SM89_ON = generation_range("cuda", "sm89")
_CUDA_SM70_ON = generation_range("cuda", "sm70")
_CUDA_VOLTA_TO_ADA = generation_range("cuda", "sm70", "sm89")
_CUDA_SM90_ON = generation_range("cuda", "sm90")
_SIXTEEN_BIT = frozenset({"f16", "bf16"})
_EIGHT_BIT = frozenset({*FLOAT8, "i8", "ui8"})
_FLOATS_NOT_F64 = frozenset({"f32", "f16", "bf16", *_EIGHT_BIT})
TENSOR_CORE_DEVICES: Mapping[str, tuple[str, ...]] = {
    "f16": _CUDA_SM70_ON,
    "bf16": _CUDA_SM80_ON,
    "f32": _CUDA_SM80_ON,  # TF32, at the default precision
    "i8": generation_range("cuda", "sm75"),
    "ui8": generation_range("cuda", "sm75"),
    **{element: _CUDA_SM89_ON for element in FLOAT8},
}
"""Where NVIDIA tensor cores take each element type (what tensor-core alignment is about)."""
XMX_ELEMENTS = frozenset({"f16", "bf16", "i8", "ui8"})
"""What Intel XMX takes at the default precision (sycl_ext_oneapi_matrix)."""

_SRC_X64 = (
    "JAX docs, Default dtypes and the X64 flag "
    "(https://docs.jax.dev/en/latest/default_dtypes.html); "
    "jax-ml/jax#19769 (https://github.com/jax-ml/jax/issues/19769)"
)
_SRC_TPU_HW = (
    "JAX docs, TPU Hardware Reference (https://docs.jax.dev/en/latest/pallas/tpu/hardware.html)"
)
_SRC_PRECISION = (
    "JAX docs, jax.lax.Precision and jax.default_matmul_precision "
    "(https://docs.jax.dev/en/latest/_autosummary/jax.default_matmul_precision.html); "
    "jax-ml/jax#18934 (https://github.com/jax-ml/jax/issues/18934)"
)
_SRC_AMPERE = (
    "NVIDIA A100 Tensor Core GPU Architecture whitepaper: TF32 and BF16 Tensor Core "
    "operations are new in Ampere (https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/nvidia-ampere-architecture-whitepaper.pdf)"
)
_SRC_NVIDIA_FP8 = (
    "NVIDIA Transformer Engine, Using FP8: E4M3 and E5M2 on Ada and Hopper (compute "
    "capability 8.9+) (https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/"
    "examples/fp8_primer.html)"
)
_SRC_HIPBLASLT = (
    "hipBLASLt data type support: the FNUZ float8 types on gfx942 only, the OCP float8 types "
    "on gfx950 (https://rocm.docs.amd.com/projects/hipBLASLt/en/latest/reference/"
    "data-type-support.html)"
)
_SRC_TPU_TILES = (
    "Cloud TPU performance guide, Consequences of tiling and Padding "
    "(https://cloud.google.com/tpu/docs/performance-guide); Pallas TPU block shapes "
    "(https://docs.jax.dev/en/latest/pallas/tpu/details.html)"
)
_SRC_JAX_19769 = "jax-ml/jax#19769 (https://github.com/jax-ml/jax/issues/19769)"
_SRC_REFUSED = (
    "measured: deviceless libtpu compiles for TPU v5e (benchmarks/fidelity/tpu_layouts.py --part "
    "refusals, benchmarks/results/tpu-refusals.json: libtpu 0.0.42.1 with jax 0.10.2, 0.0.52 "
    "with jax 0.12.1)"
)
_SRC_REFUSED_CHIP = (
    f"{_SRC_REFUSED}; the lent TPU v5e refused it too (libtpu 0.0.42.1, recorded there)"
)
_SRC_TPU_LAYOUT = (
    "measured: the layouts of deviceless libtpu compiles (TPU v4, v5e, v5p, v6e; libtpu "
    "0.0.42.1 and 0.0.52) and of the lent TPU v5e (benchmarks/fidelity/tpu_layouts.py, "
    "benchmarks/results/tpu-layouts.json)"
)
_SRC_TPU_MXU = (
    "Cloud TPU system architecture: an MXU is 256x256 on TPU v6e, 128x128 before "
    "(https://cloud.google.com/tpu/docs/system-architecture-tpu-vm); " + _SRC_TPU_HW
)
_SRC_NVIDIA_ALIGN = (
    "NVIDIA Matrix Multiplication Background User's Guide, Tensor Core Requirements "
    "(https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/"
    "index.html#requirements-tc)"
)
_SRC_XLA_GPU_LAYOUT = (
    "XLA GPU layout assignment, HeuristicLayoutAssignment and AddDotBackendConstraints "
    "(https://github.com/openxla/xla/blob/main/xla/service/gpu/transforms/layout_assignment.cc)"
)
_SRC_XLA_CPU_LAYOUT = (
    "XLA CPU layout assignment (https://github.com/openxla/xla/blob/main/xla/backends/cpu/"
    "transforms/cpu_layout_assignment.cc); measured on jaxlib 0.10"
)


def _float8_variant(
    platform: str, devices: tuple[str, ...], native: frozenset[str], summary: str, source: str
) -> FormatRule:
    return FormatRule(
        name="float8-variant", kind="format", platform=platform, devices=devices,
        elements=FLOAT8 - native, ops=MATMUL_OPS, effect="requantize", summary=summary,
        source=source,
    )  # fmt: skip


_SRC_INTEL_XMX = (
    "sycl_ext_oneapi_matrix extension, supported combinations on Intel XMX: "
    "intel_gpu_pvc and the Xe2 GPUs (bmg) take M up to 8, N 16 and K 16 for fp16 and bf16, "
    "K 32 for int8 (32 bytes deep); no float8 type (https://github.com/intel/llvm/blob/"
    "sycl/sycl/doc/extensions/experimental/sycl_ext_matrix/sycl_ext_oneapi_matrix.asciidoc)"
)
_SRC_INTEL_FP64 = (
    "Intel oneAPI GPU Optimization Guide, double-precision emulation: Arc GPUs have no "
    "64-bit floating-point hardware; the graphics compiler emulates it only where "
    "OverrideDefaultFP64Settings=1 and IGC_EnableDPEmulation=1 are set "
    "(https://www.intel.com/content/www/us/en/docs/oneapi/optimization-guide-gpu/); "
    "Data Center GPU Max has FP64 vector and matrix hardware (Intel Data Center GPU Max "
    "Series product brief)"
)


# fmt: off
FORMAT_RULES: tuple[FormatRule, ...] = (
    # -- tpu: formats ------------------------------------------------------------------
    FormatRule(
        name="complex128-fft-not-compiled", kind="format", platform="tpu",
        elements=frozenset({"complex<f64>"}),
        ops=("stablehlo.fft",),
        effect="not-compiled", compiles=False,
        summary="a complex128 FFT (jnp.fft under x64; rfft of float64 makes one) does not "
        "compile for TPU (INVALID_ARGUMENT: Unexpected operand type for FFT: c128[1024]); "
        "libtpu 0.0.42.1 and 0.0.52 alike",
        source=f"{_SRC_JAX_19769}; {_SRC_REFUSED_CHIP}",
    ),
    FormatRule(
        name="float64-lu-not-compiled", kind="format", platform="tpu",
        elements=frozenset({"f64", "complex<f64>"}),
        ops=("stablehlo.custom_call",), targets=("LuDecomposition",),
        releases=("", "0.0.50"),
        effect="not-compiled", compiles=False,
        summary="a float64 or complex128 LU decomposition (jnp.linalg.solve, inv, det, "
        "slogdet, jax.scipy.linalg.lu and lu_factor under x64) does not compile for TPU "
        "(UNIMPLEMENTED: Only F32 and C64 types are implemented in LuDecomposition); libtpu "
        "0.0.50.1 and 0.0.52 compile it (LuRealDecompositionBlock)",
        source=_SRC_REFUSED_CHIP,
    ),
    FormatRule(
        name="float64-nextafter-not-compiled", kind="format", platform="tpu",
        elements=frozenset({"f64"}),
        ops=("chlo.next_after",),
        releases=("", "0.0.52"),
        effect="not-compiled", compiles=False,
        summary="jax.lax.nextafter on float64 (equinox and diffrax use it under x64) does not "
        "compile for TPU (INVALID_ARGUMENT: Binary op and with different element types: s32 "
        "and u32); libtpu 0.0.52 compiles it (0.0.50.1 did not)",
        source="patrick-kidger/diffrax#366 (https://github.com/patrick-kidger/diffrax/issues/"
        "366); " + _SRC_REFUSED,
    ),
    FormatRule(
        name="int64-dot-not-compiled", kind="format", platform="tpu",
        elements=frozenset({"i64", "ui64"}),
        ops=("stablehlo.dot_general", "stablehlo.dot"),
        effect="not-compiled", compiles=False,
        summary="a dot with a 64-bit integer operand (int64 or uint64 under x64) does not "
        "compile for TPU (UNIMPLEMENTED: While rewriting computation to not contain X64 "
        "element types, XLA encountered an HLO for which this rewriting is not implemented: "
        "dot_general); libtpu 0.0.42.1 and 0.0.52 alike",
        source=_SRC_REFUSED,
    ),
    FormatRule(
        name="float64-emulated", kind="format", platform="tpu",
        elements=frozenset({"f64", "complex<f64>"}),
        effect="emulated",
        summary="TPUs have no 64-bit floating-point hardware: float64 and complex128 are "
        "emulated (slow at best), and some of it does not compile",
        source=_SRC_X64,
    ),
    FormatRule(
        name="float16-matmul", kind="format", platform="tpu",
        elements=frozenset({"f16"}),
        ops=MATMUL_OPS, effect="converted",
        summary="TPU matrix units multiply bfloat16; float16 is stored but not computed natively",
        source="Cloud TPU, The bfloat16 numerical format (https://cloud.google.com/tpu/docs/"
        "bfloat16); pytorch/xla#3041 (https://github.com/pytorch/xla/issues/3041)",
    ),
    FormatRule(
        name="float8-matmul", kind="format", platform="tpu", devices=_TPU_BEFORE_V6,
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="no FP8 matrix-unit throughput on this TPU generation (v2 to v5p): float8 "
        "operands are converted",
        source=_SRC_TPU_HW,
    ),
    FormatRule(
        name="float8-matmul", kind="format", platform="tpu",
        devices=("v6e",),
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="FP8 peak equals the bfloat16 peak on TPU v6e: float8 saves memory, not compute",
        source=_SRC_TPU_HW,
    ),
    FormatRule(
        name="int4-matmul", kind="format", platform="tpu",
        devices=("v2", "v3", "v4i", "v4", "7", "7x", "8i"),
        elements=INT4, ops=MATMUL_OPS, effect="converted",
        summary="no int4 matrix-unit throughput on this TPU generation (int4 is v5e, v5p, "
        "v6e): int4 operands are converted",
        source=_SRC_TPU_HW,
    ),
    FormatRule(
        name="float32-default-precision", kind="format", platform="tpu",
        elements=frozenset({"f32"}),
        ops=MATMUL_OPS,
        precision="default",
        effect="reduced-precision",
        summary="a float32 dot or convolution at the default precision runs one bfloat16 "
        "pass (8-bit mantissa inputs); precision='highest' or a dot algorithm pins it",
        source=_SRC_PRECISION,
    ),
    # -- cuda: formats -----------------------------------------------------------------
    FormatRule(
        name="float32-default-precision", kind="format", platform="cuda", devices=_CUDA_SM80_ON,
        elements=frozenset({"f32"}),
        ops=MATMUL_OPS,
        precision="default",
        effect="reduced-precision",
        summary="a float32 dot or convolution at the default precision runs with TF32 "
        "inputs (10-bit mantissa) on Ampere and newer; precision='highest' or a dot "
        "algorithm pins it",
        source=f"{_SRC_PRECISION}; {_SRC_AMPERE}",
    ),
    FormatRule(
        name="bfloat16-matmul", kind="format", platform="cuda", devices=_CUDA_BEFORE_SM80,
        elements=frozenset({"bf16"}),
        ops=MATMUL_OPS, effect="converted",
        summary="bfloat16 tensor cores start with Ampere (sm_80): earlier GPUs convert",
        source=_SRC_AMPERE,
    ),
    FormatRule(
        name="float8-matmul", kind="format", platform="cuda", devices=_CUDA_BEFORE_SM89,
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="FP8 tensor cores start with Ada and Hopper (sm_89): earlier GPUs convert",
        source=_SRC_NVIDIA_FP8,
    ),
    _float8_variant(
        "cuda",
        _CUDA_SM89_ON,
        OCP_FLOAT8,
        "NVIDIA's FP8 tensor cores take the OCP formats (float8_e4m3fn, float8_e5m2): "
        "other float8 variants (AMD MI300's FNUZ, ...) need re-quantizing",
        f"{_SRC_NVIDIA_FP8}; {_SRC_HIPBLASLT}",
    ),
    # -- rocm: formats -----------------------------------------------------------------
    FormatRule(
        name="float8-matmul", kind="format", platform="rocm",
        devices=("gfx908", "gfx90a"),
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="no FP8 matrix cores before MI300 (CDNA3): float8 operands are converted",
        source=_SRC_HIPBLASLT,
    ),
    _float8_variant(
        "rocm",
        ("gfx942",),
        FNUZ_FLOAT8,
        "MI300 (CDNA3) matrix cores take the FNUZ float8 variants (float8_e4m3fnuz, "
        "float8_e5m2fnuz: one NaN, no negative zero, a different range): OCP float8 "
        "weights (what H100 runs) need re-quantizing",
        _SRC_HIPBLASLT,
    ),
    _float8_variant(
        "rocm",
        ("gfx950",),
        OCP_FLOAT8,
        "MI350 (CDNA4) moved to the OCP float8 formats (float8_e4m3fn, float8_e5m2): FNUZ "
        "weights quantized for MI300 need re-quantizing",
        _SRC_HIPBLASLT,
    ),
    # -- oneapi: formats (Intel GPUs) --------------------------------------------------
    FormatRule(
        name="float64-emulated", kind="format", platform="oneapi", devices=("bmg",),
        elements=frozenset({"f64", "complex<f64>"}),
        effect="emulated",
        summary="Arc GPUs (Battlemage) have no 64-bit floating-point hardware: float64 and "
        "complex128 run only where the driver's software emulation is switched on, and slowly",
        source=_SRC_INTEL_FP64,
    ),
    FormatRule(
        name="float8-matmul", kind="format", platform="oneapi",
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="Intel XMX (Data Center GPU Max, Arc B-series) has no float8 matrix type: "
        "float8 operands are converted",
        source=_SRC_INTEL_XMX,
    ),
    # -- layout ------------------------------------------------------------------------
    FormatRule(
        name="tile-padding", kind="layout", platform="tpu", effect="padded",
        summary="TPU arrays are tiled: the most minor dimension pads to 128 lanes, the next to "
        "the tile's rows (8; 4, 2 or 1 for few rows). Compiled: the layouts the compiler "
        "chose. Lowered: the layout it gives an array nothing constrains (the dimension that "
        "pads least minor, a small one out of the tile), exact for every argument measured; "
        "inside a program the compiler may lay out arrays otherwise, or fuse them away",
        source=f"{_SRC_TPU_TILES}; {_SRC_TPU_LAYOUT}",
    ),
    FormatRule(
        name="matrix-unit-misaligned", kind="layout", platform="tpu", devices=_TPU_BEFORE_V6,
        ops=MATMUL_OPS, effect="misaligned", unit=128,
        summary="contracting and output-feature dimensions that are not multiples of 128 "
        "leave part of the 128x128 MXU idle",
        source=_SRC_TPU_MXU,
    ),
    FormatRule(
        name="matrix-unit-misaligned", kind="layout", platform="tpu", devices=_TPU_V6_ON,
        ops=MATMUL_OPS, effect="misaligned", unit=256,
        summary="contracting and output-feature dimensions that are not multiples of 256 "
        "leave part of the 256x256 MXU idle",
        source=_SRC_TPU_MXU,
    ),
    FormatRule(
        name="matrix-unit-misaligned", kind="layout", platform="cuda", devices=_CUDA_SM70_ON,
        ops=MATMUL_OPS, effect="misaligned", unit=16,
        summary="tensor cores run best on dimensions that are multiples of 16 bytes (8 "
        "16-bit, 16 8-bit or 4 TF32 elements); others are padded or take slower kernels",
        source=_SRC_NVIDIA_ALIGN,
    ),
    FormatRule(
        name="matrix-unit-misaligned", kind="layout", platform="oneapi",
        ops=MATMUL_OPS, effect="misaligned", unit=32,
        summary="XMX (DPAS) tiles are 32 bytes deep (16 float16/bfloat16 or 32 int8 "
        "elements) and 16 wide: other dimensions are padded or take slower kernels",
        source=_SRC_INTEL_XMX,
    ),
    FormatRule(
        name="convolution-relayout", kind="layout", platform="tpu",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/",
        summary="TPU convolutions contract over the feature dimension on the 128 lanes: an "
        "input whose features are not minor (NCHW) is relaid out, and padded meanwhile",
        source=_SRC_TPU_TILES,
    ),
    FormatRule(
        name="convolution-relayout", kind="layout", platform="cuda", devices=_CUDA_SM90_ON,
        elements=_FLOATS_NOT_F64,
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/o01i",
        summary="cuDNN convolutions run NHWC/OHWI on Hopper and newer: other layouts are "
        "transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    FormatRule(
        name="convolution-relayout", kind="layout", platform="cuda", devices=_CUDA_VOLTA_TO_ADA,
        elements=_SIXTEEN_BIT | _EIGHT_BIT, ranks=(4,),
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/o01i",
        summary="16-bit and 8-bit 2-D cuDNN convolutions run NHWC/OHWI on Volta to Ada: "
        "other layouts are transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    FormatRule(
        name="convolution-relayout", kind="layout", platform="cuda",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="bf01/oi01",
        summary="other cuDNN convolutions run NCHW/OIHW: other layouts are transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    FormatRule(
        name="convolution-relayout", kind="layout", platform="rocm", elements=_EIGHT_BIT,
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/o01i",
        summary="8-bit MIOpen convolutions run NHWC/OHWI: other layouts are transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    FormatRule(
        name="convolution-relayout", kind="layout", platform="rocm",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="bf01/oi01",
        summary="MIOpen convolutions run NCHW/OIHW by default (NHWC needs TF_USE_ROCM_NHWC): "
        "NHWC (flax's default) is transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    FormatRule(
        name="convolution-relayout", kind="layout", platform="cpu",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/01io",
        summary="XLA's CPU convolutions run NHWC/HWIO: other layouts are transposed",
        source=_SRC_XLA_CPU_LAYOUT,
    ),
    FormatRule(
        name="dot-relayout", kind="layout", platform="cuda", elements=_EIGHT_BIT,
        ops=("stablehlo.dot_general",),
        effect="relayout",
        summary="8-bit GEMMs need the contracting dimension minor in both operands: an "
        "operand laid out (K, N) is transposed (a kernel of its own before cuBLAS, inside "
        "the GEMM where XLA's Triton GEMM runs it)",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    FormatRule(
        name="inserted-relayout", kind="layout", platform="*", effect="relayout",
        summary="transposes and copies XLA's layout assignment put around a library call "
        "(cuDNN, cuBLAS, oneDNN/YNNPACK, Eigen): counted in the compiled program, with the "
        "bytes they write",
        source="the compiled program (compiled level: cpu, deviceless cuda)",
    ),
)
# fmt: on
"""Every rule, as data (what the reference's table of rules is made from). Several rows may
share a name (one per platform or device range); for a convolution the first
``convolution-relayout`` row that applies decides."""


@functools.lru_cache(maxsize=64)
def rules_for(platform: str, device: Device) -> tuple[FormatRule, ...]:
    """The rules that apply on ``platform`` for ``device``, in table order."""
    return tuple(
        rule for rule in FORMAT_RULES if rule.platform in (platform, "*") and rule.applies(device)
    )


def _generations(devices: tuple[str, ...], platform: str) -> str:
    """``sm80+``, ``v2-v5p``, ``gfx942``: a rule's device range as the reference shows it."""
    if not devices:
        return "all"
    known = GENERATIONS.get(platform, ())
    if len(devices) > 1 and devices == known[known.index(devices[0]) :]:
        return f"{devices[0]}+"
    start = known.index(devices[0]) if devices[0] in known else -1
    if len(devices) > 2 and devices == known[start : start + len(devices)]:
        return f"{devices[0]}-{devices[-1]}"
    return ", ".join(devices)


def _formats_text(elements: frozenset[str]) -> str:
    """``float8_* except float8_e4m3fn, float8_e5m2``: a rule's formats, the float8 family
    said once."""
    if not elements:
        return "any"
    eight = elements & FLOAT8
    rest = sorted(dtype_name(e) for e in elements - FLOAT8)
    if not eight or len(eight) < len(FLOAT8) // 2:
        return ", ".join(sorted(dtype_name(e) for e in elements))
    missing = sorted(dtype_name(e) for e in FLOAT8 - eight)
    family = "float8_*" + (f" except {', '.join(missing)}" if missing else "")
    return ", ".join([*rest, family])


def rules_markdown() -> str:
    """:data:`FORMAT_RULES` as the Markdown table of docs/reference.md ("Numeric formats and memory
    layout"), one row per rule, with its source (tests keep the two equal)."""
    lines = [
        "| rule | platform | devices | formats | ops | effect | compiles | what the target does "
        "| source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rule in FORMAT_RULES:
        formats = _formats_text(rule.elements)
        ops = ", ".join(op.removeprefix("stablehlo.").removeprefix("chlo.") for op in rule.ops)
        if rule.targets:
            ops += " " + ", ".join(f"@{target}" for target in rule.targets)
        cells = (
            f"`{rule.name}`",
            rule.platform if rule.platform != "*" else "any (compiled level)",
            "; ".join(
                x for x in (_generations(rule.devices, rule.platform), rule.release_text) if x
            ),
            formats,
            "any" if ops == "*" else ops,
            rule.effect,
            "yes" if rule.compiles else "**no**",
            rule.summary,
            rule.source,
        )
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def rule_source(platform: str, name: str) -> str:
    """The public source of rule ``name`` on ``platform`` (its first row there)."""
    for rule in FORMAT_RULES:
        if rule.name == name and rule.platform in (platform, "*"):
            return rule.source
    return "the formats-and-layout rules (docs/reference.md)"
