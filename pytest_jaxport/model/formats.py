"""Numeric formats and memory layout: what lowers for a platform but does not port to it.

A program that lowers for every platform can still assume things its target does not share:
float64 on a TPU, one vendor's float8 variant on another vendor's matrix cores, float32 dots
that silently run with TF32 or bfloat16 inputs at the default precision, arrays whose
trailing dimensions pad out TPU tiles, convolutions in a layout the target's libraries
transpose. Each is a finding at the user's source line, for one platform and target device,
call-weighted like the census, with the fidelity level it came from.

Everything here is data and arithmetic on it: :data:`RULES` (each rule with its public
source), the layout arithmetic (:func:`tile_padding`, :func:`matrix_unit_waste`,
:func:`convolution_relayout`) and :func:`take_format_census`, which reads a census
:class:`~pytest_jaxport.model.census.Program`: at the lowered level the operand and result types
of each op and the attributes of dots and convolutions (``lowering.read_program`` keeps
them); at the compiled level the transposes and copies XLA's layout assignment put around
library calls (``hlo.parse_compiled_hlo`` counts them). No jax, no pytest.

Example::

    >>> dot = OpSite(op="stablehlo.dot_general", location='loc("model.py":3:4)',
    ...              operand_types=("tensor<4096x100xf32>", "tensor<100x128xf32>"),
    ...              result_types=("tensor<4096x128xf32>",))
    >>> census = take_format_census(Program(entry="main", functions={"main": (dot,)}), "tpu")
    >>> [f.rule for f in census.findings]
    ['float32-default-precision', 'matrix-unit-misaligned', 'tile-padding']
    >>> str(census.findings[0].location)
    'model.py:3'
    >>> round(census.padding_waste, 4)  # 100 rows pad to 104 of the 4096 lanes: 4% of x
    0.0172

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Literal, get_args

from pytest_jaxport.model.census import (
    CALL_OPS,
    UNCOUNTED_OPS,
    OpSite,
    Program,
    SourceLocation,
    census_op,
    dot_dimensions,
    innermost_frame,
    placed_location,
    tensor_type,
)
from pytest_jaxport.model.platforms import DESCRIPTIONS, release
from pytest_jaxport.model.targets import Level, classify
from pytest_jaxport.model.tiling import (
    TiledLayout,
    default_layout,
    hlo_element,
    jax_name,
    read_layouts,
)

FindingKind = Literal["format", "layout"]
"""``format``: a numeric format the target computes differently, emulates, converts or cannot
compile; ``layout``: bytes or matrix-unit work a target's memory layout wastes or moves."""

FINDING_KINDS: tuple[FindingKind, ...] = get_args(FindingKind)

Effect = Literal[
    "emulated",
    "not-compiled",
    "converted",
    "requantize",
    "reduced-precision",
    "padded",
    "misaligned",
    "relayout",
]
"""What the target does with it: runs it in software (``emulated``), refuses to compile it
(``not-compiled``), converts it to another format before its matrix units (``converted``),
needs the data re-quantized to its own variant (``requantize``), computes with fewer
mantissa bits than the program's type (``reduced-precision``), pads it to tiles
(``padded``), leaves matrix-unit lanes idle (``misaligned``), or transposes it to the layout
its kernels take (``relayout``)."""
EFFECTS: frozenset[str] = frozenset(get_args(Effect))

LARGE_ARRAY_BYTES = 64 * 1024
"""Arrays smaller than this (64 KiB, 16 float32 tiles of (8, 128)) are left out of the
padding and matrix-unit numbers: their waste is a large fraction of nothing, and the toy
shapes of a unit test say nothing about production shapes."""

MATMUL_OPS = ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution")
"""The ops a matrix unit (MXU, tensor core, matrix core) runs."""

# -- element types --------------------------------------------------------------------------

DTYPE_NAMES: Mapping[str, str] = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "complex<f64>": "complex128",
    "complex<f32>": "complex64",
    "f8E4M3FN": "float8_e4m3fn",
    "f8E5M2": "float8_e5m2",
    "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz",
    "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
    "f8E4M3": "float8_e4m3",
    "f8E3M4": "float8_e3m4",
    "f8E8M0FNU": "float8_e8m0fnu",
    "f4E2M1FN": "float4_e2m1fn",
    "i1": "bool",
    "i2": "int2",
    "i4": "int4",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "ui2": "uint2",
    "ui4": "uint4",
    "ui8": "uint8",
    "ui16": "uint16",
    "ui32": "uint32",
    "ui64": "uint64",
}
"""StableHLO element types by the name JAX and NumPy give them (``jnp.float8_e4m3fn``): what
findings, budgets (``forbid_formats``) and reports call a format."""

_BITS: Mapping[str, int] = {
    "f64": 64, "f32": 32, "f16": 16, "bf16": 16, "complex<f64>": 128, "complex<f32>": 64,
    "i1": 8, "i2": 2, "i4": 4, "ui2": 2, "ui4": 4, "f4E2M1FN": 4,
}  # fmt: skip

OCP_FLOAT8 = frozenset({"f8E4M3FN", "f8E5M2"})
"""The OCP FP8 formats (NVIDIA Ada/Hopper/Blackwell, AMD MI350)."""
FNUZ_FLOAT8 = frozenset({"f8E4M3FNUZ", "f8E5M2FNUZ"})
"""AMD CDNA3's FP8 formats (MI300): one NaN, no negative zero, exponent bias one higher."""
FLOAT8 = frozenset({*OCP_FLOAT8, *FNUZ_FLOAT8, "f8E4M3B11FNUZ", "f8E4M3", "f8E3M4"})
"""Every 8-bit float JAX has (``float8_e8m0fnu``, a scale type, is not among them)."""
INT4 = frozenset({"i4", "ui4"})

NOTABLE_ELEMENTS = frozenset({"f64", "complex<f64>", *FLOAT8, "f8E8M0FNU", "f4E2M1FN", *INT4})
"""Element types some rule flags at any op, not only at dots and convolutions: the StableHLO
reader keeps the source location of every op whose types hold one (``lowering.py``), so that
their findings point at the user's line. float16/bfloat16/float32 rules concern dots and
convolutions only, which keep their location anyway."""


def element_bits(element: str) -> int:
    """Bits per element of a StableHLO element type (``f8E4M3FN`` -> 8, ``ui4`` -> 4)."""
    if element in _BITS:
        return _BITS[element]
    if element.startswith("f8"):
        return 8
    found = re.fullmatch(r"(?:f|i|ui|si)(\d+)", element)
    return int(found.group(1)) if found else 32


def dtype_name(element: str) -> str:
    """The JAX name of a StableHLO element type (``f8E4M3FN`` -> ``float8_e4m3fn``)."""
    return DTYPE_NAMES.get(element, element)


@functools.lru_cache(maxsize=8192)
def is_notable(type_text: str) -> bool:
    """Whether a StableHLO type holds an element type of :data:`NOTABLE_ELEMENTS`."""
    parsed = tensor_type(type_text)
    if parsed is not None:
        return parsed[1] in NOTABLE_ELEMENTS
    return any(element in type_text for element in ("f64", "f8E", "f4E", "i4>", "i4,"))


# -- target devices -------------------------------------------------------------------------

CUDA_GENERATIONS = DESCRIPTIONS["cuda"].generations
"""NVIDIA compute capabilities, oldest first (``sm90``: Hopper, H100/H200)."""
ROCM_GENERATIONS = DESCRIPTIONS["rocm"].generations
"""AMD Instinct ISAs, oldest first: MI100, MI200 (CDNA2), MI300 (CDNA3), MI350 (CDNA4)."""
TPU_GENERATIONS = DESCRIPTIONS["tpu"].generations
"""TPU chip versions as JAX names them (``jax.experimental.pallas.tpu.ChipVersion``)."""

GENERATIONS: Mapping[str, tuple[str, ...]] = {p.name: p.generations for p in DESCRIPTIONS.values()}
"""Each platform's device generations, from its description
(:mod:`pytest_jaxport.model.platforms`); oneapi's: ``bmg`` (Arc B-series, Xe2) and ``pvc``
(Data Center GPU Max, Xe-HPC)."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Device:
    """The device a platform's findings are judged for: a generation of :data:`GENERATIONS`
    (``""`` for cpu)."""

    platform: str
    generation: str = ""
    name: str = ""
    """What reports call it (``NVIDIA H100``); the generation where empty."""
    compiler: str = ""
    """The release of the platform's compiler (:data:`COMPILERS`) the findings are judged
    for, where known (tpu: the libtpu installed, ``0.0.42.1``); empty where unknown: then a
    rule a later release lifted still applies, saying which releases it holds for."""
    topology: str = ""
    """The slice a partitioned program compiles for (``2x2`` of ``tpu = "v5e:2x2"``); empty:
    the generation's smallest with enough devices."""

    def __str__(self) -> str:
        generation = f"{self.generation}:{self.topology}" if self.topology else self.generation
        if self.name:
            return f"{self.name} ({generation})" if generation else self.name
        return generation or self.platform


COMPILERS: Mapping[str, str] = {"tpu": "libtpu"}
"""The compiler whose release decides what a platform compiles, where a rule depends on it
(:attr:`Rule.releases`): libtpu for tpu (the compiled program follows libtpu, not jax)."""


DEFAULT_DEVICES: Mapping[str, Device] = {
    p.name: Device(platform=p.name, generation=p.default_device[0], name=p.default_device[1])
    if p.default_device is not None
    else Device(platform=p.name)
    for p in DESCRIPTIONS.values()
}
"""Judged for when no target is configured: the project's default GPU description (h100),
the GPU JAX describes where it lowers for rocm (gfx942), TPU v5e (a 128x128 MXU and no
FP8 matrix units, as every TPU before v6e), Intel's Data Center GPU Max 1550 (pvc)."""


def default_devices(platforms: Sequence[str] = ()) -> dict[str, Device]:
    """:data:`DEFAULT_DEVICES` of the platforms lowered by default and of ``platforms`` (an
    opted-in platform's device is judged, and recorded, only where a project names it).

    >>> sorted(default_devices()), "oneapi" in default_devices(["cpu", "oneapi"])
    (['cpu', 'cuda', 'rocm', 'tpu'], True)
    """
    return {
        name: device
        for name, device in DEFAULT_DEVICES.items()
        if DESCRIPTIONS[name].default or name in platforms
    }


DEVICE_NAMES: Mapping[str, Device] = {
    name: Device(platform=p.name, generation=generation, name=label)
    for p in DESCRIPTIONS.values()
    for name, generation, label in p.devices
}
"""Devices by the short names a configuration may use (``h100``, ``mi300``, ``v5e``,
``max1550``)."""


def device_for(platform: str, name: str | None = None) -> Device:
    """The device ``name`` (a :data:`DEVICE_NAMES` key or a generation such as ``sm90``,
    ``gfx942``, ``v6e``) on ``platform``; the platform's default without a name. Raises
    ``ValueError`` naming what is known for anything else.

    >>> str(device_for("rocm", "mi350"))
    'AMD MI350X (gfx950)'
    """
    if not name:
        return DEFAULT_DEVICES.get(platform, Device(platform=platform))
    key = name.strip().lower().replace(" ", "").replace("-", "")
    found = DEVICE_NAMES.get(key)
    if found is not None and found.platform == platform:
        return found
    generations = GENERATIONS.get(platform, ())
    if key in generations:
        return Device(platform=platform, generation=key)
    known = sorted(
        {n for n, d in DEVICE_NAMES.items() if d.platform == platform} | set(generations)
    )
    raise ValueError(
        f"unknown {platform} device {name!r}; expected one of: {', '.join(known) or '(none)'}"
    )


_CUDA_CAPABILITY = re.compile(r"cuda_compute_capability\s*\{([^}]*)\}")
_GCN_ARCH = re.compile(r'gcn_arch_name:\s*"(gfx[0-9a-f]+)')
_DESCRIPTION = re.compile(r'device_description_str:\s*"([^"]*)"')


def device_from_target_config(text: str) -> Device:
    """The device a GPU target description (a ``GpuTargetConfigProto`` as text, as
    ``[tool.jaxport] target`` names one) describes. Raises ``ValueError`` when it names no
    compute capability.

    >>> str(device_from_target_config('gpu_device_info { cuda_compute_capability { major: 9 } }'
    ...                               ' device_description_str: "NVIDIA H100 80GB HBM3"'))
    'NVIDIA H100 80GB HBM3 (sm90)'
    """
    described = _DESCRIPTION.search(text)
    name = described.group(1) if described else ""
    cuda = _CUDA_CAPABILITY.search(text)
    if cuda is not None:
        fields = dict(re.findall(r"(major|minor):\s*(\d+)", cuda.group(1)))
        generation = f"sm{int(fields.get('major', 0))}{int(fields.get('minor', 0))}"
        return Device(platform="cuda", generation=generation, name=name)
    rocm = _GCN_ARCH.search(text)
    if rocm is not None:
        return Device(platform="rocm", generation=rocm.group(1), name=name)
    raise ValueError("a GPU target description without a CUDA or ROCm compute capability")


def _from(platform: str, first: str, last: str | None = None) -> tuple[str, ...]:
    """The generations of ``platform`` from ``first`` to ``last`` (inclusive; the newest
    known where ``None``)."""
    generations = GENERATIONS[platform]
    end = len(generations) if last is None else generations.index(last) + 1
    return generations[generations.index(first) : end]


# -- the rule table -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One row of :data:`RULES`: what ``platform`` (on ``devices``, every generation where
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
    """Whether ``version`` is within ``(first, first not)`` (:attr:`Rule.releases`).

    >>> in_releases("0.0.42.1", ("", "0.0.50")), in_releases("0.0.52", ("", "0.0.50"))
    (True, False)
    """
    first, until = releases
    found = release(version)
    return (not first or found >= release(first)) and (not until or found < release(until))


_TPU_V6_ON = _from("tpu", "v6e")
_TPU_BEFORE_V6 = _from("tpu", "v2", "v5p")
_CUDA_SM80_ON = _from("cuda", "sm80")
_CUDA_BEFORE_SM80 = _from("cuda", "sm60", "sm75")
_CUDA_BEFORE_SM89 = _from("cuda", "sm60", "sm87")
_CUDA_SM89_ON = _from("cuda", "sm89")
_CUDA_SM70_ON = _from("cuda", "sm70")
_CUDA_VOLTA_TO_ADA = _from("cuda", "sm70", "sm89")
_CUDA_SM90_ON = _from("cuda", "sm90")
_SIXTEEN_BIT = frozenset({"f16", "bf16"})
_EIGHT_BIT = frozenset({*FLOAT8, "i8", "ui8"})
_FLOATS_NOT_F64 = frozenset({"f32", "f16", "bf16", *_EIGHT_BIT})
_TENSOR_CORE_DEVICES: Mapping[str, tuple[str, ...]] = {
    "f16": _CUDA_SM70_ON,
    "bf16": _CUDA_SM80_ON,
    "f32": _CUDA_SM80_ON,  # TF32, at the default precision
    "i8": _from("cuda", "sm75"),
    "ui8": _from("cuda", "sm75"),
    **{element: _CUDA_SM89_ON for element in FLOAT8},
}
"""Where NVIDIA tensor cores take each element type (what tensor-core alignment is about)."""
_XMX_ELEMENTS = frozenset({"f16", "bf16", "i8", "ui8"})
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
    "measured: deviceless libtpu compiles for TPU v5e (benchmarks/tpu_layouts.py --part "
    "refusals, benchmarks/results/tpu-refusals.json: libtpu 0.0.42.1 with jax 0.10.2, 0.0.52 "
    "with jax 0.12.1)"
)
_SRC_REFUSED_CHIP = (
    f"{_SRC_REFUSED}; the lent TPU v5e refused it too (libtpu 0.0.42.1, recorded there)"
)
_SRC_TPU_LAYOUT = (
    "measured: the layouts of deviceless libtpu compiles (TPU v4, v5e, v5p, v6e; libtpu "
    "0.0.42.1 and 0.0.52) and of the lent TPU v5e (benchmarks/tpu_layouts.py, "
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
) -> Rule:
    return Rule(
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
RULES: tuple[Rule, ...] = (
    # -- tpu: formats ------------------------------------------------------------------
    Rule(
        name="complex128-fft-not-compiled", kind="format", platform="tpu",
        elements=frozenset({"complex<f64>"}),
        ops=("stablehlo.fft",),
        effect="not-compiled", compiles=False,
        summary="a complex128 FFT (jnp.fft under x64; rfft of float64 makes one) does not "
        "compile for TPU (INVALID_ARGUMENT: Unexpected operand type for FFT: c128[1024]); "
        "libtpu 0.0.42.1 and 0.0.52 alike",
        source=f"{_SRC_JAX_19769}; {_SRC_REFUSED_CHIP}",
    ),
    Rule(
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
    Rule(
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
    Rule(
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
    Rule(
        name="float64-emulated", kind="format", platform="tpu",
        elements=frozenset({"f64", "complex<f64>"}),
        effect="emulated",
        summary="TPUs have no 64-bit floating-point hardware: float64 and complex128 are "
        "emulated (slow at best), and some of it does not compile",
        source=_SRC_X64,
    ),
    Rule(
        name="float16-matmul", kind="format", platform="tpu",
        elements=frozenset({"f16"}),
        ops=MATMUL_OPS, effect="converted",
        summary="TPU matrix units multiply bfloat16; float16 is stored but not computed natively",
        source="Cloud TPU, The bfloat16 numerical format (https://cloud.google.com/tpu/docs/"
        "bfloat16); pytorch/xla#3041 (https://github.com/pytorch/xla/issues/3041)",
    ),
    Rule(
        name="float8-matmul", kind="format", platform="tpu", devices=_TPU_BEFORE_V6,
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="no FP8 matrix-unit throughput on this TPU generation (v2 to v5p): float8 "
        "operands are converted",
        source=_SRC_TPU_HW,
    ),
    Rule(
        name="float8-matmul", kind="format", platform="tpu",
        devices=("v6e",),
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="FP8 peak equals the bfloat16 peak on TPU v6e: float8 saves memory, not compute",
        source=_SRC_TPU_HW,
    ),
    Rule(
        name="int4-matmul", kind="format", platform="tpu",
        devices=("v2", "v3", "v4i", "v4", "7", "7x", "8i"),
        elements=INT4, ops=MATMUL_OPS, effect="converted",
        summary="no int4 matrix-unit throughput on this TPU generation (int4 is v5e, v5p, "
        "v6e): int4 operands are converted",
        source=_SRC_TPU_HW,
    ),
    Rule(
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
    Rule(
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
    Rule(
        name="bfloat16-matmul", kind="format", platform="cuda", devices=_CUDA_BEFORE_SM80,
        elements=frozenset({"bf16"}),
        ops=MATMUL_OPS, effect="converted",
        summary="bfloat16 tensor cores start with Ampere (sm_80): earlier GPUs convert",
        source=_SRC_AMPERE,
    ),
    Rule(
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
    Rule(
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
    Rule(
        name="float64-emulated", kind="format", platform="oneapi", devices=("bmg",),
        elements=frozenset({"f64", "complex<f64>"}),
        effect="emulated",
        summary="Arc GPUs (Battlemage) have no 64-bit floating-point hardware: float64 and "
        "complex128 run only where the driver's software emulation is switched on, and slowly",
        source=_SRC_INTEL_FP64,
    ),
    Rule(
        name="float8-matmul", kind="format", platform="oneapi",
        elements=FLOAT8, ops=MATMUL_OPS, effect="converted",
        summary="Intel XMX (Data Center GPU Max, Arc B-series) has no float8 matrix type: "
        "float8 operands are converted",
        source=_SRC_INTEL_XMX,
    ),
    # -- layout ------------------------------------------------------------------------
    Rule(
        name="tile-padding", kind="layout", platform="tpu", effect="padded",
        summary="TPU arrays are tiled: the most minor dimension pads to 128 lanes, the next to "
        "the tile's rows (8; 4, 2 or 1 for few rows). Compiled: the layouts the compiler "
        "chose. Lowered: the layout it gives an array nothing constrains (the dimension that "
        "pads least minor, a small one out of the tile), exact for every argument measured; "
        "inside a program the compiler may lay out arrays otherwise, or fuse them away",
        source=f"{_SRC_TPU_TILES}; {_SRC_TPU_LAYOUT}",
    ),
    Rule(
        name="matrix-unit-misaligned", kind="layout", platform="tpu", devices=_TPU_BEFORE_V6,
        ops=MATMUL_OPS, effect="misaligned", unit=128,
        summary="contracting and output-feature dimensions that are not multiples of 128 "
        "leave part of the 128x128 MXU idle",
        source=_SRC_TPU_MXU,
    ),
    Rule(
        name="matrix-unit-misaligned", kind="layout", platform="tpu", devices=_TPU_V6_ON,
        ops=MATMUL_OPS, effect="misaligned", unit=256,
        summary="contracting and output-feature dimensions that are not multiples of 256 "
        "leave part of the 256x256 MXU idle",
        source=_SRC_TPU_MXU,
    ),
    Rule(
        name="matrix-unit-misaligned", kind="layout", platform="cuda", devices=_CUDA_SM70_ON,
        ops=MATMUL_OPS, effect="misaligned", unit=16,
        summary="tensor cores run best on dimensions that are multiples of 16 bytes (8 "
        "16-bit, 16 8-bit or 4 TF32 elements); others are padded or take slower kernels",
        source=_SRC_NVIDIA_ALIGN,
    ),
    Rule(
        name="matrix-unit-misaligned", kind="layout", platform="oneapi",
        ops=MATMUL_OPS, effect="misaligned", unit=32,
        summary="XMX (DPAS) tiles are 32 bytes deep (16 float16/bfloat16 or 32 int8 "
        "elements) and 16 wide: other dimensions are padded or take slower kernels",
        source=_SRC_INTEL_XMX,
    ),
    Rule(
        name="convolution-relayout", kind="layout", platform="tpu",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/",
        summary="TPU convolutions contract over the feature dimension on the 128 lanes: an "
        "input whose features are not minor (NCHW) is relaid out, and padded meanwhile",
        source=_SRC_TPU_TILES,
    ),
    Rule(
        name="convolution-relayout", kind="layout", platform="cuda", devices=_CUDA_SM90_ON,
        elements=_FLOATS_NOT_F64,
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/o01i",
        summary="cuDNN convolutions run NHWC/OHWI on Hopper and newer: other layouts are "
        "transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    Rule(
        name="convolution-relayout", kind="layout", platform="cuda", devices=_CUDA_VOLTA_TO_ADA,
        elements=_SIXTEEN_BIT | _EIGHT_BIT, ranks=(4,),
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/o01i",
        summary="16-bit and 8-bit 2-D cuDNN convolutions run NHWC/OHWI on Volta to Ada: "
        "other layouts are transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    Rule(
        name="convolution-relayout", kind="layout", platform="cuda",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="bf01/oi01",
        summary="other cuDNN convolutions run NCHW/OIHW: other layouts are transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    Rule(
        name="convolution-relayout", kind="layout", platform="rocm", elements=_EIGHT_BIT,
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/o01i",
        summary="8-bit MIOpen convolutions run NHWC/OHWI: other layouts are transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    Rule(
        name="convolution-relayout", kind="layout", platform="rocm",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="bf01/oi01",
        summary="MIOpen convolutions run NCHW/OIHW by default (NHWC needs TF_USE_ROCM_NHWC): "
        "NHWC (flax's default) is transposed",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    Rule(
        name="convolution-relayout", kind="layout", platform="cpu",
        ops=("stablehlo.convolution",),
        effect="relayout", layout="b01f/01io",
        summary="XLA's CPU convolutions run NHWC/HWIO: other layouts are transposed",
        source=_SRC_XLA_CPU_LAYOUT,
    ),
    Rule(
        name="dot-relayout", kind="layout", platform="cuda", elements=_EIGHT_BIT,
        ops=("stablehlo.dot_general",),
        effect="relayout",
        summary="8-bit GEMMs need the contracting dimension minor in both operands: an "
        "operand laid out (K, N) is transposed (a kernel of its own before cuBLAS, inside "
        "the GEMM where XLA's Triton GEMM runs it)",
        source=_SRC_XLA_GPU_LAYOUT,
    ),
    Rule(
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
def rules_for(platform: str, device: Device) -> tuple[Rule, ...]:
    """The rules that apply on ``platform`` for ``device``, in table order."""
    return tuple(
        rule for rule in RULES if rule.platform in (platform, "*") and rule.applies(device)
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
    """:data:`RULES` as the Markdown table of docs/reference.md ("Numeric formats and memory
    layout"), one row per rule, with its source (tests keep the two equal)."""
    lines = [
        "| rule | platform | devices | formats | ops | effect | compiles | what the target does "
        "| source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rule in RULES:
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
    for rule in RULES:
        if rule.name == name and rule.platform in (platform, "*"):
            return rule.source
    return "the formats-and-layout rules (docs/reference.md)"


# -- layout arithmetic ----------------------------------------------------------------------


def _ceil(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def tile_padding(dims: Sequence[int], element: str) -> tuple[int, int] | None:
    """``(data bytes, bytes in tiles)`` of an array of StableHLO ``element`` type in the layout
    the TPU compiler gives it where nothing constrains it
    (:func:`~pytest_jaxport.model.tiling.default_layout`), or ``None`` for a scalar (untiled
    here) or a dynamic shape.

    A ``(1024, 100)`` float32 array pads 100 to 104 rows of 1024 lanes, 425,984 bytes for
    409,600 of data, where padding its minor dimension to 128 lanes would take 524,288:

    >>> tile_padding((1024, 100), "f32")
    (409600, 425984)
    >>> tile_padding((8, 64, 64, 3), "f32")  # the channels out of the tile: 2x, not 42x
    (393216, 786432)
    """
    if not dims:
        return None
    layout = default_layout(tuple(dims), hlo_element(element))
    return layout.data_bytes, layout.bytes


def matrix_unit_waste(
    m: int, k: int, n: int, *, k_unit: int, n_unit: int, m_unit: int = 1
) -> float:
    """The fraction of a matrix unit's multiply-adds that a ``(m, k) x (k, n)`` product
    leaves idle when each dimension is padded to its unit.

    A TPU MXU holds a ``k_unit x n_unit`` block of the weights and streams rows through it
    (``m_unit = 1``): ``(4096, 100) x (100, 128)`` on a 128x128 MXU uses 100 of 128 rows:

    >>> matrix_unit_waste(4096, 100, 128, k_unit=128, n_unit=128)
    0.21875
    """
    padded = _ceil(m, m_unit) * _ceil(k, k_unit) * _ceil(n, n_unit)
    if padded == 0:
        return 0.0
    return 1.0 - (m * k * n) / padded


_CONV_LABELS = re.compile(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]")


def convolution_labels(
    attribute: str,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None:
    """A convolution's ``dimension_numbers`` as ``(input, kernel, output)`` labels per
    logical dimension (``b``/``f``, ``i``/``o``, spatial ``0``, ``1``...), or ``None`` for
    the raw form this reader does not parse.

    >>> convolution_labels("#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>")[0]
    ('b', 'f', '0', '1')
    """
    found = _CONV_LABELS.search(attribute)
    if found is None:
        return None
    parts = tuple(
        tuple(x.strip() for x in group.split(",") if x.strip()) for group in found.groups()
    )
    return parts[0], parts[1], parts[2]


def _wanted(layout: str, rank: int) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """A rule's ``input/kernel`` layout expanded to ``rank`` dimensions (``b01f`` -> ``b``,
    the spatial dimensions in order, ``f``)."""
    spatial = tuple(str(i) for i in range(rank - 2))

    def expand(text: str) -> tuple[str, ...]:
        out: list[str] = []
        for char in text:
            if char == "0":
                out.extend(spatial)
            elif not char.isdigit():
                out.append(char)
        return tuple(out)

    data, _, kernel = layout.partition("/")
    return expand(data), (expand(kernel) if kernel else None)


def convolution_relayout(labels: tuple[tuple[str, ...], ...], layout: str) -> tuple[str, ...]:
    """Which of a convolution's ``input``, ``kernel``, ``output`` the target relays out: those
    whose logical dimension order (a row-major array's physical order) differs from the
    rule's ``layout``.

    >>> nchw = convolution_labels("#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>")
    >>> convolution_relayout(nchw, "b01f/o01i")
    ('input', 'kernel', 'output')
    >>> convolution_relayout(nchw, "bf01/oi01")
    ()
    """
    source, kernel, result = labels
    wanted_data, wanted_kernel = _wanted(layout, len(source))
    moved = []
    if source != wanted_data:
        moved.append("input")
    if wanted_kernel is not None and kernel != wanted_kernel:
        moved.append("kernel")
    if result != wanted_data:
        moved.append("output")
    return tuple(moved)


# -- findings -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Finding:
    """One rule at one source line of one program, on one platform, call-weighted.

    ``amount`` of ``of`` (in ``unit``) sizes what a layout finding wastes or moves, weighted
    by how often its ops run: padding bytes of the bytes the ops move (``tile-padding``),
    idle multiply-adds of the matrix unit's (``matrix-unit-misaligned``), bytes written by
    inserted relayouts of the bytes the library calls move (``inserted-relayout``). Zero
    for the rest.
    """

    kind: FindingKind
    rule: str
    platform: str
    level: Level = "lowered"
    location: SourceLocation | None = None
    count: int = 1
    """How many ops at this line (call-weighted; a loop body's once, as in the census); for
    ``inserted-relayout``, the transposes and copies themselves."""
    effect: Effect = "converted"
    formats: tuple[str, ...] = ()
    """The formats involved, by JAX name (``float64``)."""
    ops: tuple[str, ...] = ()
    """The ops involved (``dot_general``), sorted."""
    detail: str = ""
    compiles: bool = True
    amount: float = 0.0
    of: float = 0.0
    unit: str = ""

    @property
    def fraction(self) -> float:
        """``amount / of`` (0 when there is nothing to divide)."""
        return self.amount / self.of if self.of else 0.0

    def describe(self) -> str:
        """``float64-emulated (emulated) x3 at model.py:12: float64 in add, dot_general``."""
        times = f" x{self.count}" if self.count != 1 else ""
        where = f" at {self.location}" if self.location else ""
        return f"{self.rule} ({self.effect}){times}{where}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "rule": self.rule,
            "platform": self.platform,
            "level": self.level,
            "location": str(self.location) if self.location else None,
            "count": self.count,
            "effect": self.effect,
            "formats": list(self.formats),
            "ops": list(self.ops),
            "detail": self.detail,
        }
        if not self.compiles:
            data["compiles"] = False
        if self.of:
            data.update(amount=self.amount, of=self.of, unit=self.unit)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """The inverse of :meth:`to_dict`; raises ``KeyError``/``TypeError``/``ValueError``
        on anything else."""
        kind = data["kind"]
        if kind not in FINDING_KINDS:
            raise ValueError(f"not a finding kind: {kind!r:.40}")
        effect = data.get("effect", "converted")
        if effect not in EFFECTS:
            raise ValueError(f"not a finding effect: {effect!r:.40}")
        level = data.get("level", "lowered")
        if level not in ("lowered", "compiled"):
            raise ValueError(f"not a fidelity level: {level!r:.40}")
        count = data.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"not a finding count: {count!r:.40}")
        return cls(
            kind=kind,
            rule=str(data["rule"]),
            platform=str(data["platform"]),
            level=level,
            location=_location_from_text(data.get("location")),
            count=count,
            effect=effect,
            formats=tuple(map(str, data.get("formats", ()))),
            ops=tuple(map(str, data.get("ops", ()))),
            detail=str(data.get("detail", "")),
            compiles=bool(data.get("compiles", True)),
            amount=float(data.get("amount", 0.0)),
            of=float(data.get("of", 0.0)),
            unit=str(data.get("unit", "")),
        )


@functools.lru_cache(maxsize=4096)
def _location_from_text(text: object) -> SourceLocation | None:
    """A stored location (``file:line``): a report repeats a few thousand lines at most."""
    if text is None:
        return None
    file, sep, line = str(text).rpartition(":")
    if not sep or not line.isdigit():
        raise ValueError(f"not a source location: {text!r:.80}")
    return SourceLocation(file=file, line=int(line))


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryFootprint:
    """What a compiled program's arguments and outputs take on its device beside their data,
    and the temporaries it allocates: from the layouts the compiler chose for them (its
    ``entry_computation_layout``) and, where the compile counted it, the compiler's own count
    (``memory_analysis``: :class:`~pytest_jaxport.model.census.CompiledMemory`). Adds up over
    programs (an audited suite's).

    >>> footprint = MemoryFootprint(argument_data=1_638_400, argument_bytes=1_703_936)
    >>> round(footprint.argument_padding, 3)
    0.04
    """

    argument_data: int = 0
    argument_bytes: int = 0
    output_data: int = 0
    output_bytes: int = 0
    temp_bytes: int | None = None
    """The temporaries the compiler allocates (``None`` where it did not count)."""
    counted: bool = False
    """Whether the argument and output bytes are the compiler's count (``memory_analysis``)
    rather than summed from the layouts (the two agree: ``tests/test_tpu_layout.py``)."""

    @property
    def argument_padding(self) -> float:
        """The arguments' bytes on the device over their data, less one (0.04: 4% more)."""
        return self.argument_bytes / self.argument_data - 1 if self.argument_data else 0.0

    def __add__(self, other: MemoryFootprint) -> MemoryFootprint:
        temp = None
        if self.temp_bytes is not None or other.temp_bytes is not None:
            temp = (self.temp_bytes or 0) + (other.temp_bytes or 0)
        return MemoryFootprint(
            argument_data=self.argument_data + other.argument_data,
            argument_bytes=self.argument_bytes + other.argument_bytes,
            output_data=self.output_data + other.output_data,
            output_bytes=self.output_bytes + other.output_bytes,
            temp_bytes=temp,
            counted=self.counted and other.counted,
        )

    def describe(self) -> str:
        """``arguments 1.6 MiB for 1.6 MiB of data (+4%), outputs 512 B for 12 B of data,
        temporaries 0 B``."""
        said = [
            f"arguments {_size(self.argument_bytes)} for {_size(self.argument_data)} of data"
            + (f" (+{self.argument_padding:.0%})" if self.argument_bytes > self.argument_data
               else ""),
            f"outputs {_size(self.output_bytes)} for {_size(self.output_data)} of data",
        ]  # fmt: skip
        if self.temp_bytes is not None:
            said.append(f"temporaries {_size(self.temp_bytes)}")
        return ", ".join(said)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "argument_data": self.argument_data,
            "argument_bytes": self.argument_bytes,
            "output_data": self.output_data,
            "output_bytes": self.output_bytes,
            "counted": self.counted,
        }
        if self.temp_bytes is not None:
            data["temp_bytes"] = self.temp_bytes
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryFootprint:
        """The inverse of :meth:`to_dict`; raises ``ValueError`` naming a field that is not a
        count of bytes."""
        values: dict[str, int | None] = {}
        for name in ("argument_data", "argument_bytes", "output_data", "output_bytes",
                     "temp_bytes"):  # fmt: skip
            value = data.get(name, None if name == "temp_bytes" else 0)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ValueError(f"not a byte count: {name} = {value!r:.40}")
            values[name] = value
        return cls(
            argument_data=values["argument_data"] or 0,
            argument_bytes=values["argument_bytes"] or 0,
            output_data=values["output_data"] or 0,
            output_bytes=values["output_bytes"] or 0,
            temp_bytes=values["temp_bytes"],
            counted=bool(data.get("counted", False)),
        )


def memory_footprint(program: Program) -> MemoryFootprint | None:
    """A compiled program's :class:`MemoryFootprint`, where the compiler tiled its arrays
    (``Program.entry_layout``; ``None`` elsewhere)."""
    if not program.entry_layout:
        return None
    arguments, _, outputs = program.entry_layout.rpartition("->")
    taken = read_layouts(arguments), read_layouts(outputs)
    argument_data, output_data = (sum(x.data_bytes for x in side) for side in taken)
    argument_bytes, output_bytes = (sum(x.bytes for x in side) for side in taken)
    memory = program.memory
    if memory is None:
        return MemoryFootprint(argument_data=argument_data, argument_bytes=argument_bytes,
                               output_data=output_data, output_bytes=output_bytes)  # fmt: skip
    return MemoryFootprint(argument_data=argument_data, argument_bytes=memory.argument,
                           output_data=output_data, output_bytes=memory.output,
                           temp_bytes=memory.temp, counted=True)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatCensus:
    """The formats-and-layout findings of one program on one platform, at one level."""

    platform: str
    device: Device
    level: Level = "lowered"
    findings: tuple[Finding, ...] = ()
    formats: Mapping[str, int] = field(default_factory=dict)
    """Every format the program's typed ops use, by JAX name: how many ops (call-weighted)
    use it, whether or not a rule flags it (what ``forbid_formats`` checks)."""
    tiled_bytes: float = 0.0
    """On a device that tiles arrays (tpu): the bytes every op's large arrays take in tiles,
    padded or not, weighted by how often the ops run (what padding is a share of)."""
    lines: Mapping[str, tuple[SourceLocation, ...]] = field(default_factory=dict)
    """Per format of :attr:`formats`, the first :data:`LINES_KEPT` source lines (in order)
    of ops that use it: where a ``forbid_formats`` violation points when no rule flags the
    format on this device."""
    memory: MemoryFootprint | None = None
    """A compiled program's arguments, outputs and temporaries on its device (compiled level,
    where the compiler tiled its arrays: tpu)."""

    def count(self, kind: FindingKind | None = None) -> int:
        """Call-weighted findings (of ``kind``; every kind where ``None``)."""
        return sum(f.count for f in self.findings if kind is None or f.kind == kind)

    def rules(self) -> dict[str, int]:
        """Call-weighted findings per rule, sorted by name."""
        counts: Counter[str] = Counter()
        for f in self.findings:
            counts[f.rule] += f.count
        return dict(sorted(counts.items()))

    def by_rule(self, rule: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.rule == rule)

    @property
    def not_compiling(self) -> tuple[Finding, ...]:
        """Findings the rules know the target's compiler rejects: the program lowers for the
        platform but does not compile there."""
        return tuple(f for f in self.findings if not f.compiles)

    def _sum(self, rule: str) -> tuple[float, float]:
        found = self.by_rule(rule)
        return sum(f.amount for f in found), sum(f.of for f in found)

    @property
    def padding_bytes(self) -> tuple[float, float]:
        """``(padding bytes, bytes moved with the padding)`` of the large arrays every op
        reads and writes under the target's tiling, weighted by how often the ops run."""
        padding, padded = self._sum("tile-padding")
        return padding, max(self.tiled_bytes, padded)

    @property
    def padding_waste(self) -> float:
        """The share of bytes moved that is padding (0 where nothing is tiled)."""
        padding, moved = self.padding_bytes
        return padding / moved if moved else 0.0

    @property
    def relayout_bytes(self) -> float:
        """Bytes written by the relayouts XLA inserted (compiled level)."""
        return self._sum("inserted-relayout")[0]

    @property
    def relayouts(self) -> int:
        """The transposes and copies XLA inserted around library calls (compiled level),
        call-weighted."""
        return sum(f.count for f in self.by_rule("inserted-relayout"))

    def relocated(
        self,
        where: Callable[[SourceLocation | None], SourceLocation | None],
        lines_where: Callable[[SourceLocation | None], SourceLocation | None] | None = None,
    ) -> FormatCensus:
        """This census with each finding's location as ``where`` gives it (the file as
        reports show it, a check's call site where a finding has none), and each format's
        lines as ``lines_where`` does (``where`` by default)."""
        findings = tuple(replace(f, location=where(f.location)) for f in self.findings)
        placed = lines_where or where
        lines = {
            name: _kept(at for line in found if (at := placed(line)) is not None)
            for name, found in self.lines.items()
        }
        return replace(self, findings=findings, lines={k: v for k, v in lines.items() if v})

    def __add__(self, other: FormatCensus) -> FormatCensus:
        """Two programs' findings on one platform as one census (an audited suite's sum):
        findings of the same rule at the same line add up, formats add up."""
        merged: dict[tuple[str, str, str, SourceLocation | None], Finding] = {}
        for f in (*self.findings, *other.findings):
            key = (f.kind, f.rule, f.level, f.location)
            had = merged.get(key)
            merged[key] = (
                f
                if had is None
                else replace(
                    had,
                    count=had.count + f.count,
                    amount=had.amount + f.amount,
                    of=had.of + f.of,
                    formats=tuple(sorted({*had.formats, *f.formats})),
                    ops=tuple(sorted({*had.ops, *f.ops})),
                )
            )
        formats = Counter(self.formats)
        formats.update(other.formats)
        lines = {
            name: _kept((*self.lines.get(name, ()), *other.lines.get(name, ())))
            for name in {*self.lines, *other.lines}
        }
        return replace(
            self,
            findings=tuple(sorted(merged.values(), key=_finding_order)),
            formats=dict(sorted(formats.items())),
            tiled_bytes=self.tiled_bytes + other.tiled_bytes,
            lines=dict(sorted(lines.items())),
            memory=_added(self.memory, other.memory),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "device": {
                "generation": self.device.generation,
                "name": self.device.name,
                **({"compiler": self.device.compiler} if self.device.compiler else {}),
            },
            "level": self.level,
            "findings": [f.to_dict() for f in self.findings],
            "formats": dict(self.formats),
            **({"tiled_bytes": self.tiled_bytes} if self.tiled_bytes else {}),
            **({"lines": {k: [str(at) for at in v] for k, v in self.lines.items()}}
               if self.lines else {}),
            **({"memory": self.memory.to_dict()} if self.memory is not None else {}),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FormatCensus:
        """The inverse of :meth:`to_dict`."""
        platform = str(data["platform"])
        device = data.get("device") or {}
        level = data.get("level", "lowered")
        if level not in ("lowered", "compiled"):
            raise ValueError(f"not a fidelity level: {level!r:.40}")
        formats = data.get("formats", {})
        if not isinstance(formats, Mapping):
            raise TypeError("formats: not a mapping")
        return cls(
            platform=platform,
            device=Device(
                platform=platform,
                generation=str(device.get("generation", "")),
                name=str(device.get("name", "")),
                compiler=str(device.get("compiler", "")),
            ),
            level=level,
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", ())),
            formats={str(k): int(v) for k, v in formats.items()},
            tiled_bytes=float(data.get("tiled_bytes", 0.0)),
            lines={
                str(k): tuple(at for at in map(_location_from_text, v) if at is not None)
                for k, v in (data.get("lines") or {}).items()
            },
            memory=MemoryFootprint.from_dict(data["memory"]) if data.get("memory") else None,
        )


LINES_KEPT = 3
"""The source lines a census keeps per format (:attr:`FormatCensus.lines`): enough to find
the code, few enough that every census can carry them."""


def _kept(lines: Iterable[SourceLocation]) -> tuple[SourceLocation, ...]:
    """The first :data:`LINES_KEPT` distinct ``lines``, in file and line order."""
    return tuple(sorted(set(lines), key=lambda at: (at.file, at.line))[:LINES_KEPT])


def _added(a: MemoryFootprint | None, b: MemoryFootprint | None) -> MemoryFootprint | None:
    if a is None or b is None:
        return a or b
    return a + b


# -- per site -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Hit:
    """What one rule found at one op, before weighting and grouping by line."""

    rule: Rule
    detail: str
    formats: tuple[str, ...] = ()
    amount: float = 0.0
    of: float = 0.0
    unit: str = ""
    ops: int = 1
    """How many ops the finding is at this site: the relayouts around a compiled library
    call (each a transpose or copy), one otherwise."""


_Types = tuple[tuple[tuple[int, ...] | None, str], ...]


@functools.lru_cache(maxsize=8192)
def _parsed(types: tuple[str, ...]) -> _Types:
    """Each ranked tensor type of ``types`` as ``(dims, element)``; a program repeats a few
    signatures many times (cached)."""
    return tuple(t for t in map(tensor_type, types) if t is not None)


def _short(dims: tuple[int, ...] | None, element: str) -> str:
    shape = "?" if dims is None else ",".join(map(str, dims))
    return f"{dtype_name(element)}[{shape}]"


def _size(count: float) -> str:
    """``1.5 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def _op_name(op: str) -> str:
    return op.rsplit(".", 1)[-1]


def _default_precision(attributes: Mapping[str, str]) -> bool:
    """No ``precision=`` other than DEFAULT and no dot algorithm: what the platform decides."""
    if "algorithm" in attributes:
        return False
    config = attributes.get("precision_config", "")
    return all(p == "DEFAULT" for p in re.findall(r"precision (\w+)", config))


@functools.lru_cache(maxsize=16384)
def _cached_hits(site: OpSite, platform: str, device: Device, large_bytes: int) -> tuple[_Hit, ...]:
    """:func:`site_hits` of a site without location or count: a suite's checks repeat the
    same op signatures (the rules are data, fixed for the process)."""
    return site_hits(site, platform, device, large_bytes=large_bytes)


def site_hits(
    site: OpSite, platform: str, device: Device, *, large_bytes: int = LARGE_ARRAY_BYTES
) -> tuple[_Hit, ...]:
    """Every rule's finding at one op site (before call weighting). A compiled program's
    site has the findings the compiler's own output shows: the relayouts it inserted around a
    library call and the padding of the layouts it chose; the rules about formats and
    matrix units are the lowered level's."""
    if site.compiled:
        return _compiled_hits(site, rules_for(platform, device), large_bytes)
    operands = _parsed(site.operand_types)
    results = _parsed(site.result_types)
    if not operands and not results:
        return ()
    inputs = {element for _, element in operands}
    elements = inputs | {element for _, element in results}
    attributes = dict(site.attributes)
    hits: list[_Hit] = []
    relayout_decided = False
    op = census_op(site, platform)  # a dot XLA makes elementwise is no matrix unit's
    for rule in rules_for(platform, device):
        if not any(fnmatchcase(op, pattern) for pattern in rule.ops):
            continue
        if rule.targets and not any(fnmatchcase(site.target or "", t) for t in rule.targets):
            continue
        if rule.elements and not rule.elements & (inputs if rule.ops == MATMUL_OPS else elements):
            continue
        if rule.precision == "default" and not _default_precision(attributes):
            continue
        hit: _Hit | None = None
        if rule.kind == "format":
            if not rule.compiles or not any(not h.rule.compiles for h in hits):
                found = inputs if rule.ops == MATMUL_OPS else elements
                hit = _format_hit(rule, site, operands, found)  # one finding per op that
                # does not compile: its emulation is moot
        elif rule.name == "tile-padding":
            hit = _padding_hit(rule, _layouts(site), large_bytes)
        elif rule.name == "matrix-unit-misaligned":
            hit = _alignment_hit(rule, site, operands, attributes, device, large_bytes)
        elif rule.name == "convolution-relayout" and not relayout_decided:
            if rule.ranks and not (operands and len(operands[0][0] or ()) in rule.ranks):
                continue
            relayout_decided = True  # the first row that applies decides
            hit = _convolution_hit(rule, attributes)
        elif rule.name == "dot-relayout":
            hit = _dot_relayout_hit(rule, operands, attributes)
        if hit is not None:
            hits.append(hit)
    return tuple(hits)


def _compiled_hits(site: OpSite, rules: Sequence[Rule], large_bytes: int) -> tuple[_Hit, ...]:
    hits: list[_Hit] = []
    relayouts = _compiled_relayouts(site) if site.attributes else None
    for rule in rules:
        if rule.name == "inserted-relayout" and relayouts is not None:
            count, kernels, written, moved = relayouts
            call = site.target or site.op.removeprefix("hlo.fusion:")
            detail = (
                f"{count} transposes/copies ({kernels} kernels of their own, "
                f"{_size(written)}) around {call}"
            )
            hits.append(_Hit(rule=rule, detail=detail, amount=written, of=moved + written,
                             unit="bytes", ops=count))  # fmt: skip
        elif rule.name == "tile-padding" and (site.operand_types or site.result_types):
            hit = _padding_hit(rule, _layouts(site), large_bytes)
            if hit is not None:
                hits.append(hit)
    return tuple(hits)


def _format_hit(rule: Rule, site: OpSite, operands: _Types, elements: set[str]) -> _Hit:
    found = tuple(sorted(dtype_name(e) for e in elements & rule.elements))
    types = " x ".join(_short(dims, element) for dims, element in operands)
    op = f"{_op_name(site.op)} {site.target}" if rule.targets and site.target else _op_name(site.op)
    detail = f"{', '.join(found)} {op}" + (f" ({types})" if types else "")
    if rule.release_text:
        detail += f" [{rule.release_text}]"
    return _Hit(rule=rule, formats=found, detail=detail)


def _convolution_hit(rule: Rule, attributes: Mapping[str, str]) -> _Hit | None:
    labels = convolution_labels(attributes.get("dimension_numbers", ""))
    moved = convolution_relayout(labels, rule.layout) if labels else ()
    if not labels or not moved:
        return None
    numbers = "x".join("[" + ", ".join(part) + "]" for part in labels[:2])
    wanted = rule.layout.rstrip("/")
    return _Hit(rule=rule, detail=f"{numbers}: {', '.join(moved)} relaid out to {wanted}")


def _tiled_bytes(site: OpSite, large_bytes: int) -> int:
    """The bytes ``site``'s large tiled arrays take in TPU tiles, padded or not: what the
    padding share is a share of."""
    return _padding(_layouts(site), large_bytes)[1]


def _layouts(site: OpSite) -> tuple[TiledLayout, ...]:
    """The arrays ``site`` reads and writes as the TPU lays them out: a compiled program's
    as the compiler printed them, a lowered program's in the layout the compiler gives an
    array nothing constrains (:func:`~pytest_jaxport.model.tiling.default_layout`)."""
    types = (*site.operand_types, *site.result_types)
    if site.compiled:
        return tuple(layout for text in types for layout in read_layouts(text) if layout.tiled)
    return _modelled(types)


@functools.lru_cache(maxsize=8192)
def _modelled(types: tuple[str, ...]) -> tuple[TiledLayout, ...]:
    return tuple(
        default_layout(dims, hlo_element(element))
        for dims, element in _parsed(types)
        if dims  # a scalar is not tiled here; a dynamic shape has no layout yet
    )


def _padding(arrays: Sequence[TiledLayout], large_bytes: int) -> tuple[int, int, tuple[int, str]]:
    """``(padding bytes, tiled bytes, (the largest padding, what it pads))`` of the large
    tiled arrays among ``arrays``."""
    padding = 0
    padded_total = 0
    worst: tuple[int, str] = (0, "")
    for layout in arrays:
        if not layout.tiled or layout.data_bytes < large_bytes:
            continue
        padding += layout.padding
        padded_total += layout.bytes
        if layout.padding > worst[0]:
            worst = (layout.padding, _layout_detail(layout))
    return padding, padded_total, worst


def _layout_detail(layout: TiledLayout) -> str:
    """``float32[4096,100] as {0,1:T(8,128)}: 104x4096``: the array, its layout and the
    dimensions it takes, major to minor, padded."""
    shape = ",".join(map(str, layout.dims))
    taken = "x".join(map(str, layout.physical_dims))
    return f"{jax_name(layout.element)}[{shape}] as {layout.layout_text}: {taken}"


def _padding_hit(rule: Rule, arrays: Sequence[TiledLayout], large_bytes: int) -> _Hit | None:
    padding, padded_total, worst = _padding(arrays, large_bytes)
    if padding == 0:
        return None
    return _Hit(rule=rule, detail=worst[1], amount=float(padding), of=float(padded_total),
                unit="bytes")  # fmt: skip


def _matmul_sizes(
    site: OpSite, operands: _Types, attributes: Mapping[str, str]
) -> tuple[int, int, int, int, str] | None:
    """``(batch x rows, contracting, output features, bits, element)`` of a dot or
    convolution (a convolution contracts over its input features per window position)."""
    if len(operands) < 2:
        return None
    (lhs, element), (rhs, _) = operands[0], operands[1]
    if lhs is None or rhs is None:
        return None
    if site.op == "stablehlo.convolution":
        labels = convolution_labels(attributes.get("dimension_numbers", ""))
        if labels is None or len(labels[1]) != len(rhs) or len(labels[0]) != len(lhs):
            return None
        source, kernel, _ = labels
        k = rhs[kernel.index("i")]
        n = rhs[kernel.index("o")]
        m = math.prod(d for d, label in zip(lhs, source, strict=True) if label != "f")
        return m, k, n, element_bits(element), element
    dims = dot_dimensions(attributes.get("dot_dimension_numbers", ""))
    if site.op == "stablehlo.dot" or not attributes.get("dot_dimension_numbers"):
        dims["lhs_contracting"] = (len(lhs) - 1,)
        dims["rhs_contracting"] = (0,)
    k = math.prod(lhs[d] for d in dims["lhs_contracting"] if d < len(lhs))
    used_rhs = set(dims["rhs_contracting"]) | set(dims["rhs_batching"])
    n = math.prod(d for i, d in enumerate(rhs) if i not in used_rhs)
    m = math.prod(d for i, d in enumerate(lhs) if i not in set(dims["lhs_contracting"]))
    return m, k, n, element_bits(element), element


def _alignment_hit(
    rule: Rule,
    site: OpSite,
    operands: _Types,
    attributes: Mapping[str, str],
    device: Device,
    large_bytes: int,
) -> _Hit | None:
    sizes = _matmul_sizes(site, operands, attributes)
    if sizes is None:
        return None
    m, k, n, bits, element = sizes
    if not any(dims is not None and math.prod(dims) * element_bits(e) // 8 >= large_bytes
               for dims, e in operands):  # fmt: skip
        return None
    if rule.platform == "tpu":
        k_unit = n_unit = rule.unit
        m_unit = 1  # rows stream through the systolic array
        unit_text = f"a {rule.unit}x{rule.unit} MXU"
    elif rule.platform == "oneapi":
        if element not in _XMX_ELEMENTS:
            return None  # float32 stays off XMX at oneDNN's default (strict) math mode
        k_unit = max(rule.unit * 8 // bits, 1)
        n_unit = 16  # XMX tiles are 16 wide (N) and up to 8 deep in rows (M)
        m_unit = 8
        unit_text = f"XMX tiles ({m_unit}x{k_unit}x{n_unit})"
    else:
        if (
            element not in _TENSOR_CORE_DEVICES
            or device.generation not in _TENSOR_CORE_DEVICES[element]
        ):
            return None  # no tensor cores for this type here: nothing to align to
        if element == "f32" and not _default_precision(attributes):
            return None  # full float32 (precision='highest'): no tensor cores
        k_unit = n_unit = m_unit = max(rule.unit * 8 // bits, 1)
        unit_text = f"tensor cores (multiples of {k_unit})"
    waste = matrix_unit_waste(m, k, n, k_unit=k_unit, n_unit=n_unit, m_unit=m_unit)
    if waste <= 0.0:
        return None
    padded = float(2 * _ceil(m, m_unit) * _ceil(k, k_unit) * _ceil(n, n_unit))
    return _Hit(
        rule=rule,
        detail=f"{_op_name(site.op)} contracting {k}, features {n} on {unit_text}: "
        f"{waste:.0%} idle",
        amount=padded * waste,
        of=padded,
        unit="flops",
    )


def _dot_relayout_hit(rule: Rule, operands: _Types, attributes: Mapping[str, str]) -> _Hit | None:
    if len(operands) < 2:
        return None
    dims = dot_dimensions(attributes.get("dot_dimension_numbers", ""))
    moved = []
    for side, (shape, _) in zip(("lhs", "rhs"), operands[:2], strict=False):
        contracting = dims[f"{side}_contracting"]
        if shape is None or not contracting:
            continue
        if max(contracting) != len(shape) - 1:
            moved.append(side)
    if not moved:
        return None
    return _Hit(rule=rule, detail=f"dot_general: {' and '.join(moved)} transposed to put the "
                "contracting dimension minor")  # fmt: skip


def _compiled_relayouts(site: OpSite) -> tuple[int, int, float, float] | None:
    """``(relayouts, of which kernels of their own, bytes they write, bytes the call
    moves)`` a compiled library call's site carries (``hlo.parse_compiled_hlo``)."""
    attributes = dict(site.attributes)
    raw = attributes.get("relayouts")
    if raw is None:
        return None
    try:
        kernels = int(attributes.get("relayout_kernels", "0"))
        return int(raw), kernels, float(attributes.get("relayout_bytes", "0")), site.bytes
    except ValueError:
        return None


def site_formats(site: OpSite) -> frozenset[str]:
    """The formats (JAX names) an op's operands and results use."""
    return _formats_of((*site.operand_types, *site.result_types))


@functools.lru_cache(maxsize=8192)
def _formats_of(types: tuple[str, ...]) -> frozenset[str]:
    return frozenset(dtype_name(e) for _, e in _parsed(types))


# -- the walk -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    """One (rule, line)'s findings so far."""

    hit: _Hit
    count: int = 0
    amount: float = 0.0
    of: float = 0.0
    ops: set[str] = field(default_factory=set)
    formats: set[str] = field(default_factory=set)

    def add(self, other: _Tally, calls: int, runs: int) -> None:
        self.count += other.count * calls
        self.amount += other.amount * runs
        self.of += other.of * runs
        self.ops |= other.ops
        self.formats |= other.formats
        if other.hit.amount > self.hit.amount:
            self.hit = other.hit


_Line = tuple[str, "SourceLocation | None"]
_Result = tuple[dict[_Line, _Tally], Counter[str], float, dict[str, tuple[SourceLocation, ...]]]
"""A function's findings per line, formats, tiled bytes and lines per format."""
"""A function's findings by line, its formats, and its tiled bytes (run-weighted)."""


@dataclass(slots=True)
class _Walk:
    program: Program
    platform: str
    device: Device
    large_bytes: int
    own: tuple[str, ...] = ()
    """Installed packages whose lines count as the user's (``[tool.jaxport] own_packages``)."""
    tiling: bool = False
    """Whether the device tiles arrays (a ``tile-padding`` rule applies): then every op's
    tiled bytes are summed, the padding share's denominator."""
    memo: dict[tuple[str, SourceLocation | None, tuple[str, str] | None], _Result] = field(
        default_factory=dict
    )
    tiles: dict[OpSite, int] = field(default_factory=dict)
    hits: dict[OpSite, tuple[_Hit, ...]] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)

    def site(self, site: OpSite) -> tuple[_Hit, ...]:
        key = OpSite(op=site.op, target=site.target, bytes=site.bytes,
                     operand_types=site.operand_types, result_types=site.result_types,
                     attributes=site.attributes)  # fmt: skip
        found = self.hits.get(key)
        if found is None:
            found = self.hits[key] = _cached_hits(key, self.platform, self.device, self.large_bytes)
        return found

    def tiled(self, site: OpSite) -> int:
        key = OpSite(op=site.op, operand_types=site.operand_types, result_types=site.result_types)
        found = self.tiles.get(key)
        if found is None:
            found = self.tiles[key] = _tiled_bytes(key, self.large_bytes)
        return found

    def function(
        self, name: str, inherited: SourceLocation | None, entry: tuple[str, str] | None = None
    ) -> _Result:
        """Function ``name``'s findings, called at ``inherited`` through a call op entering
        it at ``entry``: each at the line the census shows (``census.placed_location``)."""
        key = (name, inherited, entry)
        if key in self.memo:
            return self.memo[key]
        tallies: dict[_Line, _Tally] = {}
        formats: Counter[str] = Counter()
        tiled = 0.0
        lines: dict[str, tuple[SourceLocation, ...]] = {}
        if name in self.active:  # StableHLO forbids recursion; never loop on a malformed module
            return tallies, formats, tiled, lines
        self.active.add(name)
        for site, repeats in Counter(self.program.functions.get(name, ())).items():
            n = site.count * repeats
            location = placed_location(site.location, inherited, entry, self.own)
            if site.op in CALL_OPS and site.target is not None:
                callee, callee_formats, callee_tiled, callee_lines = self.function(
                    site.target, location, innermost_frame(site.location)
                )
                for line, tally in callee.items():
                    _merge(tallies, line, tally, n, n * site.runs)
                formats.update({k: v * n for k, v in callee_formats.items()})
                tiled += callee_tiled * n * site.runs
                for found, at in callee_lines.items():
                    lines[found] = _kept((*lines.get(found, ()), *at))
                continue
            if site.op in UNCOUNTED_OPS or _is_meta(self.platform, site):
                continue
            for found in site_formats(site):
                formats[found] += n
                had = lines.get(found, ())
                if location is not None and location not in had:
                    lines[found] = _kept((*had, location))
            if self.tiling:
                tiled += self.tiled(site) * n
            op = _op_name(site.target or site.op)
            for hit in self.site(site):
                one = _Tally(hit=hit, count=hit.ops, amount=hit.amount, of=hit.of, ops={op},
                             formats=set(hit.formats))  # fmt: skip
                _merge(tallies, (hit.rule.name, location), one, n, n)
        self.active.discard(name)
        self.memo[key] = (tallies, formats, tiled, lines)
        return tallies, formats, tiled, lines


def _is_meta(platform: str, site: OpSite) -> bool:
    """A custom call that computes nothing on the device (a host callback, a sharding
    annotation): its operands' formats are not the target's to compute."""
    if not site.op.endswith("custom_call") or site.target is None:
        return False
    return _meta_target(platform, site.target)


@functools.lru_cache(maxsize=4096)
def _meta_target(platform: str, target: str) -> bool:
    return classify(platform, "stablehlo.custom_call", target).layer == "meta"


def _merged_detail(tally: _Tally) -> str:
    """A line's detail: its one op's, or for a format at several kinds of op, which."""
    if tally.hit.rule.kind != "format" or len(tally.ops) < 2:
        return tally.hit.detail
    return f"{', '.join(sorted(tally.formats))} in {', '.join(sorted(tally.ops))}"


def _merge(tallies: dict[_Line, _Tally], line: _Line, tally: _Tally, calls: int, runs: int) -> None:
    found = tallies.get(line)
    if found is None:
        found = tallies[line] = _Tally(hit=tally.hit)
    found.add(tally, calls, runs)


def _finding_order(finding: Finding) -> tuple[str, str, str]:
    return (finding.kind, finding.rule, str(finding.location or ""))


def take_format_census(
    program: Program,
    platform: str,
    *,
    device: Device | None = None,
    level: Level = "lowered",
    large_bytes: int = LARGE_ARRAY_BYTES,
    own: tuple[str, ...] = (),
) -> FormatCensus:
    """The formats-and-layout findings of ``program`` on ``platform`` for ``device`` (the
    platform's :data:`DEFAULT_DEVICES` entry where ``None``), one per rule and source line;
    ``own``: installed packages whose lines are the user's, as in a census.

    Counts are call-weighted like the census's (a function called three times counts three
    times; a loop body once); padding and relayout bytes and idle matrix-unit work are
    weighted by how often the ops run (known trip counts of compiled loops included). Ops
    without a location of their own are attributed to the line that called their function.
    """
    judged = device or DEFAULT_DEVICES.get(platform, Device(platform=platform))
    tiling = any(r.name == "tile-padding" for r in rules_for(platform, judged))
    walk = _Walk(program=program, platform=platform, device=judged, large_bytes=large_bytes,
                 own=own, tiling=tiling)  # fmt: skip
    tallies, formats, tiled, lines = walk.function(program.entry, None)
    findings = tuple(
        sorted(
            (
                Finding(
                    kind=tally.hit.rule.kind,
                    rule=rule,
                    platform=platform,
                    level=level,
                    location=location,
                    count=tally.count,
                    effect=tally.hit.rule.effect,
                    formats=tuple(sorted(tally.formats)),
                    ops=tuple(sorted(tally.ops)),
                    detail=detail,
                    compiles=tally.hit.rule.compiles,
                    amount=tally.amount,
                    of=tally.of,
                    unit=tally.hit.unit,
                )
                for (rule, location), tally in tallies.items()
                for detail in (_merged_detail(tally),)
            ),
            key=_finding_order,
        )
    )
    return FormatCensus(
        platform=platform,
        device=judged,
        level=level,
        findings=findings,
        formats=dict(sorted(formats.items())),
        tiled_bytes=tiled,
        lines=dict(sorted(lines.items())),
        memory=memory_footprint(program) if level == "compiled" else None,
    )
