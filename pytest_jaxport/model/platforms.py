"""Every platform pytest-jaxport lowers for, described once: who makes it, which words mean
it, which libraries and kernels its dispatches belong to, its devices (each described once,
with its facts: its peak rates), what may be configured for it and the JAX release it needs.

The tables other modules read are derived from :data:`DESCRIPTIONS`: :data:`PLATFORMS`,
:data:`PLATFORM_VENDORS`, :data:`PLATFORM_ALIASES` here; ``COLLECTIVE_LIBRARIES`` and the
lowered level's classification rows (:mod:`pytest_jaxport.model.classification`); the
configuration's default platforms, default migration destinations, compiled and emulated
platforms and device platforms (:mod:`pytest_jaxport.model.config`); the device catalogue
(:mod:`pytest_jaxport.model.devices`); the estimate's peak rates of
:mod:`pytest_jaxport.model.cost`; the platforms :mod:`pytest_jaxport._jax` asks JAX about.
Adding a platform is one :class:`Platform` here, its format rules (keyed by platform in
:data:`pytest_jaxport.model.format_rules.FORMAT_RULES`) and tests.

>>> DESCRIPTIONS["oneapi"].vendor, DESCRIPTIONS["oneapi"].requires_jax
('Intel', '0.12.0')
>>> [p.name for p in DESCRIPTIONS.values() if p.default]
['cpu', 'cuda', 'rocm', 'tpu']

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

Layer = Literal["xla", "vendor", "custom", "meta"]
LAYERS: tuple[Layer, ...] = get_args(Layer)
"""Every op or kernel lands in exactly one layer; ``meta`` never counts against budgets."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Classification:
    """What one op or custom call is, on one platform.

    ``library`` names the vendor library for the ``vendor`` layer (``cublas``, ``cudnn``,
    ``lapack``...); ``kind`` says what the dispatch does (``gemm``, ``solver``,
    ``pallas-triton``, ``ffi``...).
    """

    layer: Layer
    kind: str
    library: str | None = None


def vendor(library: str, kind: str) -> Classification:
    """A vendor-library dispatch: ``library``'s ``kind``."""
    return Classification(layer="vendor", library=library, kind=kind)


TOPK = Classification(layer="xla", kind="topk")
META = Classification(layer="meta", kind="annotation")


@dataclass(frozen=True, slots=True, kw_only=True)
class OpLibraries:
    """The libraries a GPU-like platform's compiler hands StableHLO's library ops to (at the
    lowered level): matrix products and triangular solves (``blas``), convolutions
    (``dnn``), FFTs (``fft``), Cholesky (``solver``)."""

    blas: str
    dnn: str
    fft: str
    solver: str
    triangular_solve: str = ""
    """Where triangular solves go where not to ``blas`` (oneapi: oneMKL's trsm)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PeakRates:
    """The rates the runtime-share estimate uses where a platform is not present (public
    datasheet figures; launch costs assumed), as :class:`pytest_jaxport.model.roofline.Peak`."""

    flops: float
    bandwidth: float
    launch: float
    library_call: float = 0.0
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceDescription:
    """One device a platform's findings are judged for, described once: the short names a
    configuration may use for it (``devices = { rocm = "mi300" }``), its generation, what
    reports call it, and the facts of the device itself (its peak rates)."""

    names: tuple[str, ...]
    """The short names ``devices = {...}`` accepts for it (``mi300``, ``mi300x``)."""
    generation: str
    """Its generation (:attr:`Platform.generations`): what format rules are scoped by."""
    label: str
    """What reports call it (``AMD MI300X``)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """A name of :attr:`names` that reports under a label of its own (``trillium``: ``TPU v6e
    (Trillium)``); every other name reports as :attr:`label`."""
    peak: PeakRates | None = None
    """Its rates for the runtime-share estimate, where they are known (the platform's default
    device's are the platform's: :attr:`Platform.peak`)."""
    capacity: Capacity | None = None
    """Its usable memory per device, where known: what a memory plan is judged against
    (:mod:`pytest_jaxport.model.memory`); ``None``: unknown, and a plan's fit with it."""

    def label_of(self, name: str) -> str:
        """What reports call the device when a configuration names it ``name``."""
        return self.labels.get(name, self.label)

    @property
    def capacity_bytes(self) -> int | None:
        """:attr:`capacity`'s bytes, or ``None`` where unknown."""
        return self.capacity.bytes if self.capacity is not None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Capacity:
    """A device's usable memory, per device as its compiler sees devices (``per``: a chip, or
    a TensorCore where each of a chip's cores is one), and where the figure comes from."""

    bytes: int
    source: str
    per: str = "chip"


def device(
    names: str | tuple[str, ...],
    generation: str,
    label: str,
    *,
    peak: PeakRates | None = None,
    capacity: Capacity | None = None,
) -> DeviceDescription:
    """A :class:`DeviceDescription` of one short name (or several) reporting as ``label``."""
    return DeviceDescription(
        names=(names,) if isinstance(names, str) else names,
        generation=generation,
        label=label,
        peak=peak,
        capacity=capacity,
    )


_LIBTPU_HBM = (
    "libtpu 0.0.42.1's available HBM for {topology}, measured deviceless "
    "(benchmarks/validation/tpu_capacity.py: the boundary of the plans it compiles and "
    "refuses{checked}; benchmarks/results/tpu-capacity-libtpu-0.0.42.1.json)"
)


def _libtpu_capacity(
    count: int, topology: str, *, per: str = "chip", checked: str = ""
) -> Capacity:
    """A TPU generation's capacity as libtpu's own out-of-memory check counts it."""
    return Capacity(
        bytes=count, source=_LIBTPU_HBM.format(topology=topology, checked=checked), per=per
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolingPattern:
    """A vendor-bound assumption in a project's files (a tool, an environment variable), as
    :class:`pytest_jaxport.model.tooling_rules.ToolingRule` makes it: ``files`` names a group of
    files (``everywhere``, ``not-python``: scripts, containers, CI, configuration)."""

    id: str
    pattern: str
    files: Literal["everywhere", "not-python"]
    needles: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileTarget:
    """A device generation the platform's compiler compiles for without the device: the name
    its topologies go by and the slices a partitioned program compiles for."""

    generation: str
    """The generation (:attr:`Platform.generations`)."""
    topology: str
    """The compiler's name for it, before ``:<shape>`` in a topology (``v5e``, ``tpu7x``)."""
    device_kind: str
    """What its devices report as their kind (``TPU v5 lite``): the device a trace describes
    where a lowering rule asks which one it lowers for (Pallas TPU kernels)."""
    shapes: tuple[str, ...]
    """Its slice shapes, smallest first (``1x1``, ``2x2``, ...): a program partitioned over
    ``n`` devices compiles for the first with ``n`` or more devices."""
    devices_per_chip: int = 1
    """Devices one chip of the shape counts as (2 where each TensorCore is a device)."""
    bounds: tuple[int, ...] = ()
    """The most chips a slice has along each dimension, where the compiler checks it
    (libtpu aborts its process compiling for a larger one); ``()``: no bound it checks."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Platform:
    """One platform, described once (see the module's docstring for what is derived)."""

    name: str
    """JAX's name for it (``lowering_platforms=(name,)``)."""
    vendor: str
    """Whose hardware it is, as messages name it (``write 'cuda' for NVIDIA``)."""
    aliases: tuple[str, ...] = ()
    """Words users write instead of its name (its vendor, its hardware; JAX's ``gpu``)."""
    default: bool = True
    """Lowered for when ``platforms`` is not configured, and a default migration destination
    (unless it is the home); ``False`` for a platform a project opts into."""
    compiled: bool = False
    """``compile`` accepts it (the compiled level: cpu here, cuda and tpu deviceless)."""
    compiler_decides: bool = False
    """Its compile without the device is its device's own compile (libtpu's, for tpu), so a
    compile error fails ``must_lower``; not so for cuda, whose deviceless compile cannot see
    the FFI targets a GPU machine registers."""
    compile_targets: tuple[CompileTarget, ...] = ()
    """The generations its compiler compiles for without the device (deviceless)."""
    emulated: bool = True
    """``emulate`` accepts it (the CPU is executed, never emulated)."""
    jax_gpu: bool = False
    """One of the platforms JAX's ``gpu`` means (``jax.devices("gpu")``)."""
    collectives: str
    """What runs its collectives (the partitioner's too)."""
    op_libraries: OpLibraries | None = None
    """Its compiler's library ops at the lowered level (``None``: rows of its own)."""
    custom_calls: Mapping[str, Classification] = field(default_factory=dict)
    """Custom-call targets (fnmatch globs, first match wins) on this platform."""
    ops: Mapping[str, Classification] = field(default_factory=dict)
    """Further lowered-level op rows (``stablehlo.fft`` on cpu)."""
    ici_collectives: bool = False
    """Collectives are the compiler's own (``xla``), not a vendor library's (TPU's ICI)."""
    not_runnable: tuple[str, ...] = ()
    """Custom-call targets (globs) some JAX releases lower for it although it cannot run
    them: a program holding one does not lower for it."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Each library's public source: why a dispatch is attributed to it."""
    generations: tuple[str, ...] = ()
    """Its device generations, oldest first (format rules are scoped by generation)."""
    devices: tuple[DeviceDescription, ...] = ()
    """Its devices, each described once: the names ``devices = {...}`` accepts, and each
    device's facts."""
    default_device: str = ""
    """The short name of the device (of :attr:`devices`) judged for where none is configured;
    empty: none (cpu)."""
    device_example: str = ""
    """A short device name messages give as an example."""
    jax_device_kind: str = ""
    """For a platform JAX's ``gpu`` means: the device kind a trace describes where a lowering
    rule asks which GPU it lowers for and none is present (``jax.sharding.AbstractDevice``'s
    ``device_kind``; JAX accepts only kinds it knows: its Pallas ``GpuVersion`` names, a
    ``gfx`` architecture)."""
    tooling: tuple[ToolingPattern, ...] = ()
    """Its own tools and environment variables: assumptions bound to this platform."""
    requires_jax: str | None = None
    """The first JAX release whose lowering for it gives right counts (``None``: the floor)."""
    requires_why: str = ""
    """What an older JAX does wrong, said in the configuration error."""

    @property
    def default_description(self) -> DeviceDescription | None:
        """The device judged for where none is configured (:attr:`default_device`)."""
        return next((d for d in self.devices if self.default_device in d.names), None)

    @property
    def peak(self) -> PeakRates | None:
        """The estimate's rates where the platform is absent: its default device's (``None``:
        cpu's fitted rates). One rate per platform: a device of another generation
        (``devices.tpu``) is estimated at these."""
        return self.default_description.peak if self.default_description is not None else None


GPU_LAUNCH = "launch and library costs assumed (typical small-kernel device times), not measured"

_ONEAPI_OPENXLA = "https://github.com/intel/intel-extension-for-openxla"

CPU = Platform(
    name="cpu",
    vendor="the host",
    aliases=("host", "x86", "x86_64", "amd64", "arm", "arm64", "aarch64"),
    compiled=True,
    emulated=False,
    collectives="xla-cpu",
    custom_calls={
        "lapack_*": vendor("lapack", "solver"),
        "ducc_*": vendor("ducc", "fft"),
        "__ynn_fusion": vendor("ynnpack", "gemm"),
        "__onednn$*": vendor("onednn", "gemm"),
        "TopK": TOPK,
        # jaxlib's own CPU kernels (jaxlib/cpu: its math, sparse and tridiagonal-solve FFI
        # handlers; jax 0.12.1 lowers lgamma and digamma to the first two, its GPU twins are
        # cu_*/hip_*). Named one by one, not as cpu_*: a project's own FFI kernel may well be
        # called cpu_<something>, and counting it as jaxlib's would hide a rewrite.
        # tests/test_classification_jaxlib.py holds every target the installed jaxlib registers to
        # a row that is not a hand-written kernel's.
        "cpu_lgamma_ffi": vendor("jaxlib", "jaxlib-kernel"),
        "cpu_digamma_ffi": vendor("jaxlib", "jaxlib-kernel"),
        "cpu_csr_sparse_dense_ffi": vendor("jaxlib", "jaxlib-kernel"),
        "tridiagonal_solve_perturbed_ffi": vendor("jaxlib", "jaxlib-kernel"),
    },
    # XLA:CPU always runs FFTs through DUCC; dot and conv are XLA's own choice at compile
    # time (its emitters, Eigen, YNNPACK or oneDNN), so they count as xla until compiled.
    ops={"stablehlo.fft": vendor("ducc", "fft")},
)

CUDA = Platform(
    name="cuda",
    vendor="NVIDIA",
    aliases=("gpu", "nvidia", "nv", "nvptx"),
    compiled=True,
    jax_gpu=True,
    collectives="nccl",
    op_libraries=OpLibraries(blas="cublas", dnn="cudnn", fft="cufft", solver="cusolver"),
    custom_calls={
        "cusolver_*": vendor("cusolver", "solver"),
        "__cusolver$*": vendor("cusolver", "solver"),
        "cusparse_*": vendor("cusparse", "sparse"),
        "__cudnn$conv*": vendor("cudnn", "convolution"),
        "__cudnn$fmha*": vendor("cudnn", "attention"),
        "__cudnn$*": vendor("cudnn", "dnn"),
        "cudnn_*": vendor("cudnn", "dnn"),
        "__cublas$triangularSolve": vendor("cublas", "triangular-solve"),
        "__cublas$*": vendor("cublas", "gemm"),
        "__cub$*": vendor("cub", "sort"),
        "cu_*": vendor("jaxlib", "jaxlib-kernel"),
        "cuhybrid_*": vendor("jaxlib", "jaxlib-kernel"),
        "__gpu$TopK": TOPK,
    },
    generations=(
        "sm60",
        "sm70",
        "sm75",
        "sm80",
        "sm86",
        "sm87",
        "sm89",
        "sm90",
        "sm100",
        "sm103",
        "sm120",
        "sm121",
    ),
    devices=(
        device("p100", "sm60", "NVIDIA P100"),
        device("v100", "sm70", "NVIDIA V100"),
        device("t4", "sm75", "NVIDIA T4"),
        device("a100", "sm80", "NVIDIA A100"),
        device("a10", "sm86", "NVIDIA A10"),
        device("a6000", "sm86", "NVIDIA RTX A6000"),
        device("l4", "sm89", "NVIDIA L4"),
        device("l40s", "sm89", "NVIDIA L40S"),
        device(
            "h100",
            "sm90",
            "NVIDIA H100",
            # Public datasheet figures; FP32 vector rate for GPUs (the conservative choice).
            peak=PeakRates(
                flops=67e12,
                bandwidth=3.35e12,
                launch=2e-6,
                library_call=3e-6,
                source=f"NVIDIA H100 SXM datasheet (FP32); {GPU_LAUNCH}",
            ),
        ),
        device("h200", "sm90", "NVIDIA H200"),
        device("b200", "sm100", "NVIDIA B200"),
        device("gb200", "sm100", "NVIDIA GB200"),
        device("b300", "sm103", "NVIDIA B300"),
        device("rtx6000pro", "sm120", "NVIDIA RTX PRO 6000"),
    ),
    default_device="h100",
    device_example="h100",
    jax_device_kind="NVIDIA H100",
)

ROCM = Platform(
    name="rocm",
    vendor="AMD",
    aliases=("gpu", "amd", "amdgpu", "hip", "radeon", "instinct"),
    jax_gpu=True,
    collectives="rccl",
    op_libraries=OpLibraries(blas="hipblas", dnn="miopen", fft="hipfft", solver="hipsolver"),
    # XLA's ROCm compiler reuses __cudnn$conv* for MIOpen and __cublas$lt$matmul for
    # hipBLASLt.
    custom_calls={
        "hipsolver_*": vendor("hipsolver", "solver"),
        "__cusolver$*": vendor("hipsolver", "solver"),
        "hipsparse_*": vendor("hipsparse", "sparse"),
        "__cudnn$conv*": vendor("miopen", "convolution"),
        "__cudnn$*": vendor("miopen", "dnn"),
        "miopen_*": vendor("miopen", "dnn"),
        "__cublas$triangularSolve": vendor("hipblas", "triangular-solve"),
        "__cublas$lt$*": vendor("hipblaslt", "gemm"),
        "__cublas$*": vendor("hipblas", "gemm"),
        "hip_*": vendor("jaxlib", "jaxlib-kernel"),
        "hiphybrid_*": vendor("jaxlib", "jaxlib-kernel"),
        "__gpu$TopK": TOPK,
    },
    not_runnable=("mosaic_gpu*",),
    # AMD Instinct ISAs, oldest first: MI100, MI200 (CDNA2), MI300 (CDNA3), MI350 (CDNA4).
    generations=("gfx908", "gfx90a", "gfx942", "gfx950"),
    devices=(
        device("mi100", "gfx908", "AMD MI100"),
        device("mi200", "gfx90a", "AMD MI200"),
        device("mi250", "gfx90a", "AMD MI250"),
        device("mi250x", "gfx90a", "AMD MI250X"),
        device(
            ("mi300", "mi300x"),
            "gfx942",
            "AMD MI300X",
            capacity=Capacity(
                bytes=192 << 30,
                source="AMD Instinct MI300X data sheet: 192 GB HBM3 (the vendor's figure, "
                "read as GiB as the GPU descriptions read NVIDIA's; nothing measured: no "
                "compiler runs for rocm without its device)",
                per="GPU",
            ),
            peak=PeakRates(
                flops=163.4e12,
                bandwidth=5.3e12,
                launch=2e-6,
                library_call=3e-6,
                source=f"AMD MI300X datasheet (FP32); {GPU_LAUNCH}",
            ),
        ),
        device("mi325x", "gfx942", "AMD MI325X"),
        device(("mi350", "mi350x"), "gfx950", "AMD MI350X"),
        device("mi355x", "gfx950", "AMD MI355X"),
    ),
    default_device="mi300",
    device_example="mi300",
    jax_device_kind="gfx942",
)


def _tpu_target(
    generation: str,
    topology: str,
    kind: str,
    shapes: tuple[str, ...],
    per_chip: int = 1,
    bounds: tuple[int, ...] = (),
) -> CompileTarget:
    return CompileTarget(
        generation=generation,
        topology=topology,
        device_kind=kind,
        shapes=shapes,
        devices_per_chip=per_chip,
        bounds=bounds,
    )


_SLICES_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_SLICES_3D = ("1x1x1", "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4")

# libtpu's topologies (jax.experimental.topologies.get_topology_desc(platform="tpu",
# topology_name=...)), created deviceless with libtpu 0.0.17, 0.0.42.1 and 0.0.52
# (tests/test_libtpu.py creates each): v2 and v3 count each TensorCore as a device, as do v4
# and TPU7x in their default chip configuration; v4i, 7 and 8i have no topology there
# ("Invalid TPU external name"). Bounds: libtpu 0.0.42.1 aborts its process compiling for a
# v5e slice over 16 chips a side ("Check failed: Topology()->chip_bounds().x <= 16 (1000 vs.
# 16)", .y alike); it compiled every other generation at 1,000 chips a side (measured,
# tests/test_libtpu.py holds v5e's).
TPU_COMPILE_TARGETS = (
    _tpu_target("v2", "v2", "TPU v2", _SLICES_2D, per_chip=2),
    _tpu_target("v3", "v3", "TPU v3", _SLICES_2D, per_chip=2),
    _tpu_target("v4", "v4", "TPU v4", _SLICES_3D, per_chip=2),
    _tpu_target("v5e", "v5e", "TPU v5 lite", _SLICES_2D, bounds=(16, 16)),
    _tpu_target("v5p", "v5p", "TPU v5", _SLICES_3D),
    _tpu_target("v6e", "v6e", "TPU v6 lite", _SLICES_2D),
    _tpu_target("7x", "tpu7x", "TPU7x", _SLICES_3D, per_chip=2),
)

TPU = Platform(
    name="tpu",
    vendor="Google",
    aliases=("google", "gcp"),
    compiled=True,
    compiler_decides=True,
    compile_targets=TPU_COMPILE_TARGETS,
    collectives="ici",
    ici_collectives=True,
    # The linear algebra JAX hands the TPU compiler, which compiles it into the TPU runtime's
    # routines (libtpu's: LuDecompositionBlock, InvertDiagBlocks*Triangular, EighTpu,
    # QrDecompositionBlock, CompactWyHelper, Cholesky; the compiled level's rows, in
    # model/classification.py): counted as libtpu's at the lowered level too, so the two levels
    # agree (70% of the fidelity corpus's small programs' dispatches, 3% as xla:
    # benchmarks/fidelity/baseline.json, "tpu").
    ops={
        "stablehlo.cholesky": vendor("libtpu", "cholesky"),
        "stablehlo.triangular_solve": vendor("libtpu", "triangular-solve"),
    },
    custom_calls={
        "Eigh": vendor("libtpu", "eigh"),
        "Qr": vendor("libtpu", "qr"),
        "LuDecomposition": vendor("libtpu", "lu"),
        "ProductOfElementaryHouseholderReflectors": vendor("libtpu", "qr"),
        "ApproxTopK": TOPK,
        "TopK": TOPK,
        "X64Combine": META,
        "X64SplitLow": META,
        "X64SplitHigh": META,
    },
    sources={
        "libtpu": "the TPU runtime's routines in the optimized HLO of the lent TPU v5e and of "
        "libtpu 0.0.42.1 / 0.0.52 deviceless, identical (shared/research/tpu.md §3a, §3c; "
        "benchmarks/results/tpu-chip-compare-jax0102.json); JAX lowers linear algebra for "
        "tpu to the custom calls Eigh, Qr, LuDecomposition and "
        "ProductOfElementaryHouseholderReflectors and the ops cholesky and triangular_solve "
        "(jax/_src/lax/linalg.py), which libtpu compiles into them",
    },
    # TPU chip versions as JAX names them (jax.experimental.pallas.tpu.ChipVersion).
    generations=("v2", "v3", "v4i", "v4", "v5e", "v5p", "v6e", "7", "7x", "8i"),
    devices=(
        device(
            "v2",
            "v2",
            "TPU v2",
            capacity=_libtpu_capacity(8_034_187_264, "v2:1x1", per="TensorCore"),
        ),
        device(
            "v3",
            "v3",
            "TPU v3",
            capacity=_libtpu_capacity(16_624_121_856, "v3:1x1", per="TensorCore"),
        ),
        device("v4i", "v4i", "TPU v4i"),
        device(
            "v4",
            "v4",
            "TPU v4",
            capacity=_libtpu_capacity(16_372_988_928, "v4:1x1x1", per="TensorCore"),
        ),
        device(
            "v5e",
            "v5e",
            "TPU v5e",
            # The lent TPU v5e's memory_stats()["bytes_limit"] to the byte, and libtpu's
            # refusals there and deviceless (chip-memory-tpu-v5-lite.json: 17 of 17 fit
            # verdicts agree).
            capacity=_libtpu_capacity(
                16_909_336_064,
                "v5e:1x1",
                checked="; equal to the lent TPU v5e's bytes_limit, 15.75 GiB",
            ),
            # The device's own rates (bf16 MXU, HBM), as its profiler reports them: the lent
            # TPU v5e's /device:TPU:0 (benchmarks/results/tpu-validation-v5e/, the device part;
            # Google's datasheet gives 197 TFLOP/s and 819 GB/s). One rate per platform: a
            # slice of another generation (devices.tpu) is estimated at these.
            peak=PeakRates(
                flops=202.7e12,
                bandwidth=819.16e9,
                launch=1e-6,
                source=f"TPU v5 lite's profiler on the lent chip (bf16, HBM); {GPU_LAUNCH}",
            ),
        ),
        device("v5p", "v5p", "TPU v5p", capacity=_libtpu_capacity(102_803_439_104, "v5p:1x1x1")),
        DeviceDescription(
            names=("v6e", "trillium"),
            generation="v6e",
            label="TPU v6e",
            labels={"trillium": "TPU v6e (Trillium)"},
            capacity=_libtpu_capacity(33_550_237_184, "v6e:1x1"),
        ),
        device("7", "7", "TPU 7"),
        DeviceDescription(
            names=("7x", "ironwood"),
            generation="7x",
            label="TPU 7x",
            labels={"ironwood": "TPU7x (Ironwood)"},
            capacity=_libtpu_capacity(101_732_842_496, "tpu7x:1x1x1", per="TensorCore"),
        ),
        device("8i", "8i", "TPU 8i"),
    ),
    default_device="v5e",
    device_example="v5e",
)

ONEAPI = Platform(
    name="oneapi",
    vendor="Intel",
    aliases=("gpu", "intel", "sycl", "xpu", "level-zero", "levelzero", "arc", "pvc"),
    default=False,
    jax_gpu=True,
    collectives="oneccl",
    # Intel's XLA backend (intel-extension-for-openxla, XLA's SYCL backend) hands gemms to
    # oneDNN (or XeTLA) and convolutions to oneDNN, FFTs to oneMKL's DFT, Cholesky and
    # triangular solves to oneMKL (sources below).
    op_libraries=OpLibraries(
        blas="onednn", dnn="onednn", fft="onemkl", solver="onemkl", triangular_solve="onemkl"
    ),
    custom_calls={
        # jaxlib's oneapi solver targets run oneMKL LAPACK (getrf, geqrf, orgqr, syevd,
        # gesvd, potrf); jaxlib's own kernels (oneapi_lu_pivots_to_permutation).
        "oneapisolver_*": vendor("onemkl", "solver"),
        "__cusolver$*": vendor("onemkl", "solver"),
        "oneapisparse_*": vendor("onemkl", "sparse"),
        "__cudnn$conv*": vendor("onednn", "convolution"),
        "__cudnn$*": vendor("onednn", "dnn"),
        "__onednn$*": vendor("onednn", "dnn"),
        "__cublas$triangularSolve": vendor("onemkl", "triangular-solve"),
        "__cublas$*": vendor("onednn", "gemm"),
        "oneapi_*": vendor("jaxlib", "jaxlib-kernel"),
        "oneapihybrid_*": vendor("jaxlib", "jaxlib-kernel"),
        "__gpu$TopK": TOPK,
    },
    # jax 0.12 has no pallas_call rule for oneapi: a Pallas kernel (Triton, Mosaic GPU or
    # Mosaic TPU) does not lower there, a kernel to rewrite.
    sources={
        "onemkl": "oneMKL LAPACK and DFT: jax/_src/lax/linalg.py registers the oneapi "
        "lowerings (register_cpu_gpu_lowering(..., ('oneapi',))) to jaxlib's oneapisolver_* "
        f"targets; {_ONEAPI_OPENXLA} xla/service/gpu/fft_thunk.cc (oneapi::mkl::dft) and "
        "cholesky_thunk.cc",
        "onednn": f"oneDNN: {_ONEAPI_OPENXLA} xla/service/gpu/gemm_impl_picker.cc "
        "(se::blas::kOneDnnGemm, or XeTLA where XETLA_GEMM is set) and sycl_onednn.h "
        "(convolutions)",
        "oneccl": f"oneCCL: {_ONEAPI_OPENXLA} xla/service/gpu/ccl_*_thunk.cc (all-reduce, "
        "all-gather, all-to-all, collective-permute, broadcast)",
        "jaxlib": "jaxlib's own GPU kernels, prefixed oneapi_ (lu_pivots_to_permutation)",
    },
    # Intel Data Center GPU Max (Ponte Vecchio, Xe-HPC) and Arc B-series (Battlemage, Xe2):
    # XLA ships target specs for both (xla/backends/gpu/target_config/specs: pvc, bmg).
    generations=("bmg", "pvc"),
    devices=(
        device("max1100", "pvc", "Intel Data Center GPU Max 1100"),
        device(
            ("max1550", "pvc"),
            "pvc",
            "Intel Data Center GPU Max 1550",
            # Intel Data Center GPU Max 1550 product brief: 52 TFLOP/s FP32 vector (also
            # FP64), 3.2 TB/s HBM2e. Nothing was measured on Intel hardware.
            peak=PeakRates(
                flops=52.4e12,
                bandwidth=3.2e12,
                launch=2e-6,
                library_call=3e-6,
                source="Intel Data Center GPU Max 1550 product brief (FP32); "
                f"{GPU_LAUNCH}; nothing measured on Intel hardware",
            ),
        ),
        device(("b580", "bmg"), "bmg", "Intel Arc B580"),
        device("b570", "bmg", "Intel Arc B570"),
    ),
    default_device="max1550",
    device_example="max1550",
    # The name Intel's PJRT plugin (intel-extension-for-openxla) reports, the SYCL device's;
    # jax 0.12 has no lowering rule for oneapi that asks.
    jax_device_kind="Intel(R) Data Center GPU Max 1550",
    tooling=(
        ToolingPattern(
            id="oneapi-device-selection",
            pattern=r"\bONEAPI_DEVICE_SELECTOR\b|\bSYCL_[A-Z0-9_]+\b|\bZE_[A-Z0-9_]+\b"
            r"|\bJAX_ONEAPI_VISIBLE_DEVICES\b|\bjax_oneapi_visible_devices\b",
            files="everywhere",
            needles=("oneapi", "sycl_", "ze_"),
            reason="Intel GPU selection and runtime settings (oneAPI, SYCL, Level Zero): "
            "no other backend reads them",
        ),
        ToolingPattern(
            id="intel-tool",
            pattern=r"(?<![\w.-])(?:xpu-smi|sycl-ls|unitrace|vtune|intel_gpu_top|icpx|"
            r"setvars\.sh)(?![\w-])",
            files="not-python",
            needles=("xpu-smi", "sycl-ls", "unitrace", "vtune", "intel_gpu", "icpx", "setvars"),
            reason="Intel-only tool (xpu-smi, sycl-ls, VTune, oneAPI's setvars.sh): the "
            "workflow needs a counterpart",
        ),
    ),
    requires_jax="0.12.0",
    requires_why=(
        "older releases lower for oneapi without its solver calls (0.10: an LU solve "
        "with no library call at all, eigh not at all; 0.11.2: no oneapi rule for eig, "
        "tridiagonal solves, symmetric products, Cholesky updates), so its counts would "
        "be silently wrong"
    ),
)

DESCRIPTIONS: Mapping[str, Platform] = {p.name: p for p in (CPU, CUDA, ROCM, TPU, ONEAPI)}
"""Every described platform, in the order reports list them."""

PLATFORMS: tuple[str, ...] = tuple(DESCRIPTIONS)
"""Platforms JAX can lower for without the hardware being present (each described once
here)."""
DEFAULTS: tuple[str, ...] = tuple(p.name for p in DESCRIPTIONS.values() if p.default)
JAX_GPU: tuple[str, ...] = tuple(p.name for p in DESCRIPTIONS.values() if p.jax_gpu)
"""What JAX's ``gpu`` means: cuda, rocm or oneapi (``jax.devices("gpu")``)."""
JAX_DEVICE_KINDS: Mapping[str, str] = {
    p.name: p.jax_device_kind for p in DESCRIPTIONS.values() if p.jax_gpu
}
"""Per GPU platform, the device kind a trace describes where JAX asks which GPU it lowers
for and none is present (:attr:`Platform.jax_device_kind`)."""

PLATFORM_VENDORS: Mapping[str, str] = {p.name: p.vendor for p in DESCRIPTIONS.values()}
"""Whose hardware each platform runs on, as messages name it (``write 'cuda' for NVIDIA``)."""

PLATFORM_ALIASES: Mapping[str, tuple[str, ...]] = {p.name: p.aliases for p in DESCRIPTIONS.values()}
"""Words users write for a platform instead of its name (its vendor, its hardware, JAX's
``gpu`` for any GPU backend): wherever a platform is named, one of these gets a hint
naming the platform meant (:func:`pytest_jaxport.model.hints.platform_hint`)."""

NVIDIA_PLATFORM = "cuda"

DEFAULT_HOME = NVIDIA_PLATFORM
"""The platform moving is measured from where ``[tool.jaxport] home`` is not set (and in a
report written before reports stated their home): its census's hand-written kernels and
vendor gaps are what a move to each destination rewrites."""


def ordered_platforms(names: Iterable[str]) -> list[str]:
    """``names`` once each, the known platforms first in their usual order.

    >>> ordered_platforms(["tpu", "neuron", "cpu", "tpu"])
    ['cpu', 'tpu', 'neuron']
    """
    seen = list(dict.fromkeys(names))
    known = [p for p in PLATFORMS if p in seen]
    return known + sorted(p for p in seen if p not in PLATFORMS)


def release(version: str) -> tuple[int, ...]:
    """A JAX version string as numbers, for comparing (``0.12.0.1`` -> ``(0, 12, 0, 1)``;
    a suffix such as ``.dev20260101`` or ``rc1`` ends it).

    >>> release("0.12.0.1") > release("0.12.0") > release("0.11.2")
    True
    >>> release("0.13.0.dev20260101")
    (0, 13, 0)
    """
    numbers: list[int] = []
    for part in version.split("."):
        found = re.match(r"\d+", part)
        if found is None:
            break
        numbers.append(int(found.group()))
        if found.group() != part:
            break
    return tuple(numbers)


def compiler_decides(platform: str) -> bool:
    """Whether ``platform``'s compile without its device is its device's own, so that the
    compiler's refusal fails ``must_lower`` (:attr:`Platform.compiler_decides`).

    >>> compiler_decides("tpu"), compiler_decides("cuda")
    (True, False)
    """
    described = DESCRIPTIONS.get(platform)
    return described is not None and described.compiler_decides


def needs_newer_jax(platform: str, installed: str) -> str | None:
    """Why ``platform`` cannot be counted with jax ``installed``; ``None`` where it can
    (or where the platform is not described).

    >>> needs_newer_jax("oneapi", "0.12.0.1") is None
    True
    >>> needs_newer_jax("oneapi", "0.10.2")[:40]
    'oneapi needs jax 0.12.0 or newer, found '
    """
    described = DESCRIPTIONS.get(platform)
    if described is None or described.requires_jax is None or not installed:
        return None
    if release(installed) >= release(described.requires_jax):
        return None
    return (
        f"{platform} needs jax {described.requires_jax} or newer, found jax {installed}: "
        f"{described.requires_why}"
    )


def installed_jax() -> str:
    """The installed jax's version (``""`` where none is installed), read from its package
    metadata: JAX itself is not imported."""
    return installed_release("jax")


@functools.cache
def installed_release(distribution: str) -> str:
    """The installed ``distribution``'s version (``""`` where it is not installed), read from
    its package metadata, nothing imported (``libtpu``: the TPU compiler's release)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""
