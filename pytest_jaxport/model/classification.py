"""The classification table: which layer, library and kind an op or custom call belongs to.

Everything pytest-jaxport knows about vendor libraries and hand-written kernels lives in
:data:`CLASSIFICATION_RULES`, as data. Classification is always keyed by platform as well as
by name, because one name means different libraries on different backends (XLA's ROCm
compiler reuses ``__cudnn$conv*`` for MIOpen and ``__cublas$lt$matmul`` for hipBLASLt).

Example::

    >>> classify("cuda", "stablehlo.dot_general")
    Classification(layer='vendor', kind='gemm', library='cublas')
    >>> classify("cuda", "stablehlo.custom_call", "cusolver_syevd_ffi").library
    'cusolver'
    >>> classify("cuda", "hlo.fusion:__triton_nested_gemm_fusion", level="compiled").kind
    'triton-gemm'

Rows apply at both fidelity levels unless scoped with ``levels``: the lowered level sees
StableHLO op names (``stablehlo.dot_general``), the compiled level sees optimized HLO as
:mod:`pytest_jaxport.model.hlo` names it (``hlo.fft``, ``hlo.fusion:<kind>``).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, get_args

from pytest_jaxport.model.platforms import (
    DESCRIPTIONS,
    LAYERS,
    META,
    Classification,
    Layer,
    OpLibraries,
    Platform,
    vendor,
)

__all__ = ["LAYERS", "Classification", "Layer"]

CUSTOM_CALL = "stablehlo.custom_call"

MOSAIC_TARGET = "tpu_custom_call"
"""The custom call of a Pallas TPU (Mosaic) kernel: a hand-written kernel at its line."""

Level = Literal["lowered", "compiled"]
LEVELS: tuple[Level, ...] = get_args(Level)
"""Fidelity levels, lowest first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassificationRule:
    """One row of the table: names matching ``pattern`` on ``platforms`` are ``result``.

    ``pattern`` is an fnmatch glob over the custom-call target when ``custom_call`` is true,
    otherwise over the op name (``stablehlo.dot_general``, or an HLO opcode at the compiled
    level). ``platforms`` of ``None`` means every platform; ``levels`` likewise.
    """

    pattern: str
    result: Classification
    custom_call: bool = True
    platforms: frozenset[str] | None = None
    levels: frozenset[str] | None = None

    def matches(self, platform: str, level: str, name: str, *, is_custom_call: bool) -> bool:
        return (
            self.custom_call == is_custom_call
            and (self.platforms is None or platform in self.platforms)
            and (self.levels is None or level in self.levels)
            and fnmatchcase(name, self.pattern)
        )


_vendor = vendor


def _ops(
    platforms: Iterable[str], table: dict[str, Classification], *, level: str | None = None
) -> list[ClassificationRule]:
    return [
        ClassificationRule(
            pattern=op,
            result=result,
            custom_call=False,
            platforms=frozenset(platforms),
            levels=None if level is None else frozenset({level}),
        )
        for op, result in table.items()
    ]


def _targets(
    platforms: Iterable[str] | None, table: dict[str, Classification]
) -> list[ClassificationRule]:
    chosen = None if platforms is None else frozenset(platforms)
    return [
        ClassificationRule(pattern=t, result=result, platforms=chosen)
        for t, result in table.items()
    ]


_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "collective_broadcast",
)

INSERTED_PREFIX = "spmd."
"""Op names of collectives the SPMD partitioner inserts (``spmd.all_reduce``), as
:mod:`pytest_jaxport.model.partitioner` reads them; the program's own are ``stablehlo.*``."""

COLLECTIVE_KINDS: Mapping[str, str] = {
    "all_reduce": "all-reduce",
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
    "ragged_all_to_all": "all-to-all",
    "collective_permute": "permute",
    "collective_broadcast": "broadcast",
    "send": "send",
    "recv": "recv",
}
"""Collective ops (after ``stablehlo.``, ``spmd.`` or ``hlo.``) by the kind reports show."""

COLLECTIVE_LIBRARIES: Mapping[str, str] = {
    p.name: p.collectives
    for p in sorted(DESCRIPTIONS.values(), key=lambda p: p.name == "cpu")  # the host's last
}
"""What runs a collective on each platform: NCCL, RCCL, oneCCL, the TPU's inter-chip
interconnect (XLA's own collectives), XLA:CPU's (in-process between host devices)."""


COUNTERPART_LIBRARIES: Mapping[str, str] = {
    name: library for name, library in COLLECTIVE_LIBRARIES.items() if DESCRIPTIONS[name].default
}
"""What runs a collective on each platform lowered by default: the counterparts a census's
collectives name (an opted-in platform's, oneapi's oneCCL, only on its own census)."""


COUNTERPART_KINDS: Mapping[str, str] = {
    "gemm": "every backend's BLAS (cuBLAS, hipBLAS, oneDNN, Eigen) or its compiler's own dots",
    "convolution": "every backend's DNN library (cuDNN, MIOpen, oneDNN) or its compiler's own",
    "fft": "every backend's FFT (cuFFT, hipFFT, oneMKL, DUCC) or the TPU compiler's own",
    "triangular-solve": "every backend's BLAS trsm or its runtime's (libtpu)",
    "collective": "every backend's collectives (NCCL, RCCL, oneCCL, the TPU's interconnect)",
    "solver": "every backend's LAPACK-like solver (cuSOLVER, hipSOLVER, oneMKL, LAPACK, libtpu)",
    "sparse": "cuSPARSE, hipSPARSE, oneMKL (JAX's sparse ops have a plain fallback elsewhere)",
    "sort": "XLA's own sort where CUB is absent",
    "jaxlib-kernel": "jaxlib ships each of its kernels for every backend",
    # The TPU runtime's routines (libtpu): JAX lowers each decomposition for every platform,
    # to cuSOLVER's getrf, syevd, geqrf and potrf on cuda, hipSOLVER's on rocm, LAPACK's on
    # the CPU (jax/_src/lax/linalg.py); a triangular inverse is part of the LU solve there.
    "lu": "getrf (cuSOLVER, hipSOLVER, oneMKL, LAPACK): jax.lax.linalg.lu on every platform",
    "triangular-inverse": "the triangular solves of an LU solve (trsm) on every other platform",
    "eigh": "syevd (cuSOLVER, hipSOLVER, oneMKL, LAPACK): jax.lax.linalg.eigh on every platform",
    "qr": "geqrf and orgqr (cuSOLVER, hipSOLVER, oneMKL, LAPACK): jax.lax.linalg.qr everywhere",
    "cholesky": "potrf (cuSOLVER, hipSOLVER, oneMKL, LAPACK): jax.lax.linalg.cholesky everywhere",
    "topk": "XLA's own top-k on every other platform",
    "approx-topk": "jax.lax.approx_max_k: an exact top-k on every other platform",
}
"""Vendor kinds another platform has a counterpart for, and what it is: a dispatch of one of
these kinds is no vendor gap in a move (:func:`pytest_jaxport.model.cost.rewrite_items`).
Every vendor kind of :data:`CLASSIFICATION_RULES` is decided here or priced as a gap
(tests/test_classification.py holds the table to that): cuDNN's fused attention, its
normalization and fusions, and any other DNN-library call are gaps."""


def has_counterpart(kind: str) -> bool:
    """Whether a vendor dispatch of ``kind`` has a counterpart on another platform.

    >>> has_counterpart("eigh"), has_counterpart("gemm"), has_counterpart("attention")
    (True, True, False)
    """
    return kind in COUNTERPART_KINDS


def collective_kind(op: str) -> str | None:
    """``all-reduce`` for ``stablehlo.all_reduce``, ``spmd.all_reduce`` or
    ``hlo.all_reduce``; ``None`` for an op that is not a collective."""
    prefix, _, name = op.partition(".")
    if prefix not in ("stablehlo", "spmd", "hlo"):
        return None
    return COLLECTIVE_KINDS.get(name)


STRENGTH_REDUCED_DOT = "stablehlo.dot_general:strength-reduced"
"""The op a census names a ``dot_general`` XLA's GPU compiler always rewrites into a
multiply (and a reduce), on a platform it compiles for (:data:`STRENGTH_REDUCING`): no
library gemm, no tensor core (``census.strength_reduced`` says which dots)."""

STRENGTH_REDUCING: frozenset[str] = frozenset(p.name for p in DESCRIPTIONS.values() if p.jax_gpu)
"""The platforms XLA's GPU compiler compiles for: its ``DotStrengthReduction`` pass turns
every dot of two vectors into a multiply and a reduce, and its algebraic simplifier a dot
that contracts nothing into a multiply, before any gemm is chosen
(xla/service/gpu/transforms/dot_strength_reduction.cc; measured deviceless against an
H100: benchmarks/README.md, "Dots the lowered level no longer counts")."""


ZERO_SIZE = ":zero-size"
"""The suffix a census gives the op of a product, convolution or FFT with a zero-element
operand or result (``census.census_op``): XLA's algebraic simplifier makes such a dot or
convolution a broadcast zero, and its zero-sized HLO elimination an empty result a constant,
on every platform before any library is chosen (xla/hlo/transforms/simplifiers/
algebraic_simplifier.cc, zero_sized_hlo_elimination.cc). blackjax's ``U @ ((s-1) * (U.T @
y))`` with a rank of 0, ``float32[2,0] @ float32[0]``, calls no gemm."""


def _gpu_ops(libraries: OpLibraries, collectives: str) -> dict[str, Classification]:
    table = {
        STRENGTH_REDUCED_DOT: _xla("strength-reduced-dot"),
        "stablehlo.dot_general": _vendor(libraries.blas, "gemm"),
        "stablehlo.dot": _vendor(libraries.blas, "gemm"),
        "stablehlo.convolution": _vendor(libraries.dnn, "convolution"),
        "stablehlo.fft": _vendor(libraries.fft, "fft"),
        "stablehlo.triangular_solve": _vendor(
            libraries.triangular_solve or libraries.blas, "triangular-solve"
        ),
        # jax 0.6/0.7 lower Cholesky to the op (0.8+ to cusolver_potrf_ffi/hipsolver_potrf_ffi);
        # XLA's GPU compiler runs it on cuSOLVER/hipSOLVER (__cusolver$cholesky).
        "stablehlo.cholesky": _vendor(libraries.solver, "solver"),
    }
    for op in _COLLECTIVES:
        table[f"stablehlo.{op}"] = _vendor(collectives, "collective")
        table[f"{INSERTED_PREFIX}{op}"] = _vendor(collectives, "collective")
    return table


_ICI = Classification(layer="xla", kind="ici-collective")
"""A TPU collective: XLA's own, over the inter-chip interconnect (no vendor library)."""


def _ici_ops() -> dict[str, Classification]:
    """TPU collectives at the lowered level (the program's and the partitioner's)."""
    return {
        f"{prefix}{op}": _ICI for op in _COLLECTIVES for prefix in ("stablehlo.", INSERTED_PREFIX)
    }


# -- the compiled level ---------------------------------------------------------------------
#
# :mod:`pytest_jaxport.model.hlo` names every dispatch of a compiled module ``hlo.<opcode>``
# (``hlo.fft``, ``hlo.all_reduce``), custom calls ``hlo.custom_call`` with their target, and
# fusions ``hlo.fusion:<kind>`` with the kind XLA gave them. These rows, all scoped to the
# compiled level, say which layer and library each of those is. Choices worth knowing:
#
# - XLA's own Triton kernels (``__triton_gemm``, ``__triton_nested_gemm_fusion``,
#   ``__triton``) and every loop/input/output fusion are ``xla``: the compiler regenerates
#   them for any backend. A cuDNN fusion (``__cudnn$fusion``) runs inside cuDNN, a custom
#   fusion (``__custom_fusion$<name>``, XLA's CUTLASS gemm kernels) is NVIDIA template-library
#   code: both ``vendor``. ``dynamic_slice_fusion`` only computes addresses, so it is ``xla``
#   when it wraps a copy (:mod:`hlo` reports the wrapped library call itself when there is one).
# - On CUDA, ``fft`` is a cuFFT thunk and collectives are NCCL even though they are plain HLO
#   ops; ``sort`` is XLA's own kernel unless the CUB rewriter made it a ``__cub$`` call.
# - On CPU, a standalone ``dot``/``convolution`` runs XLA:CPU's Eigen thunks: hand-written
#   library kernels, not generated code, replaced by another backend's libraries exactly like
#   YNNPACK is, so they count as ``vendor`` library ``eigen``. Dots fused into loops stay inside
#   their fusion (``xla``). ``fft`` runs DUCC.

_COMPILED = frozenset({"compiled"})
_CUDA = frozenset({"cuda"})
_ROCM = frozenset({"rocm"})
_CPU = frozenset({"cpu"})
_TPU = frozenset({"tpu"})

_HLO_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "ragged_all_to_all",
    "collective_permute",
    "collective_broadcast",
    "send",
    "recv",
)


def _xla(kind: str) -> Classification:
    return Classification(layer="xla", kind=kind)


def _compiled_rules(
    platforms: frozenset[str] | None,
    table: Mapping[str, Classification],
    *,
    custom_call: bool,
) -> Iterable[ClassificationRule]:
    return (
        ClassificationRule(
            pattern=pattern,
            result=result,
            custom_call=custom_call,
            platforms=platforms,
            levels=_COMPILED,
        )
        for pattern, result in table.items()
    )


def _collectives(library: str) -> dict[str, Classification]:
    return {f"hlo.{op}": _vendor(library, "collective") for op in _HLO_COLLECTIVES}


COMPILED_RULES: tuple[ClassificationRule, ...] = (
    # CUDA custom calls the GPU compiler introduces (library thunks).
    *_compiled_rules(
        _CUDA,
        {
            "__cublas$triangularSolve": _vendor("cublas", "triangular-solve"),
            "__cublas$*": _vendor("cublas", "gemm"),
            "__cudnn$conv*": _vendor("cudnn", "convolution"),
            "__cudnn$fmha*": _vendor("cudnn", "attention"),
            "__cudnn$norm": _vendor("cudnn", "normalization"),
            "__cudnn$blockScaledDot": _vendor("cudnn", "gemm"),
            "__cudnn$*": _vendor("cudnn", "dnn"),
            "__cub$*": _vendor("cub", "sort"),
            "__cusolver$*": _vendor("cusolver", "solver"),
            "cusolver_*": _vendor("cusolver", "solver"),
            "__gpu$TopK": _xla("topk"),
        },
        custom_call=True,
    ),
    # CUDA fusions and plain ops.
    *_compiled_rules(
        _CUDA,
        {
            "hlo.fusion:__cudnn$fusion": _vendor("cudnn", "fusion"),
            "hlo.fusion:__custom_fusion$dynamic_slice_fusion": _xla("address-computation"),
            "hlo.fusion:__custom_fusion$address_computation": _xla("address-computation"),
            "hlo.fusion:__custom_fusion$dynamic_address_computation": _xla("address-computation"),
            "hlo.fusion:__custom_fusion*": _vendor("cutlass", "gemm"),
            "hlo.fft": _vendor("cufft", "fft"),
            **_collectives("nccl"),
        },
        custom_call=False,
    ),
    # ROCm (compiled only where ROCm hardware is present): same shapes, ROCm libraries.
    *_compiled_rules(
        _ROCM,
        {"hlo.fft": _vendor("hipfft", "fft"), **_collectives("rccl")},
        custom_call=False,
    ),
    # CPU: library fusions and thunks.
    *_compiled_rules(
        _CPU,
        {
            "hlo.fusion:__ynn_fusion": _vendor("ynnpack", "fusion"),
            "hlo.fusion:__onednn_fusion": _vendor("onednn", "fusion"),
            "hlo.fft": _vendor("ducc", "fft"),
            "hlo.dot": _vendor("eigen", "gemm"),
            "hlo.convolution": _vendor("eigen", "convolution"),
        },
        custom_call=False,
    ),
    *_compiled_rules(
        _CPU,
        {
            "__onednn$*": _vendor("onednn", "dnn"),
            "lapack_*": _vendor("lapack", "solver"),
        },
        custom_call=True,
    ),
    # TPU: the TPU runtime's routines, custom calls the TPU compiler introduces for what JAX
    # lowers as an op or a linear-algebra custom call (``LuDecomposition``, ``Eigh``, ``Qr``,
    # ``stablehlo.cholesky``, ``chlo.top_k``, ``ApproxTopK``). They live in libtpu, the TPU's
    # library, as cuSOLVER's routines live in cuSOLVER: JAX maps each operation on every
    # platform, so they are no rewrite, but they are where a decomposition's time goes.
    # Source: the optimized HLO of the lent TPU v5e and of libtpu 0.0.42.1 / 0.0.52 deviceless,
    # identical (shared/research/tpu.md §3a, §3c); LuRealDecompositionBlock from libtpu 0.0.50.
    *_compiled_rules(
        _TPU,
        {
            "Lu*DecompositionBlock": _vendor("libtpu", "lu"),
            "InvertDiagBlocks*Triangular": _vendor("libtpu", "triangular-inverse"),
            "EighTpu": _vendor("libtpu", "eigh"),
            "QrDecompositionBlock": _vendor("libtpu", "qr"),
            "CompactWyHelper": _vendor("libtpu", "qr"),
            "Cholesky": _vendor("libtpu", "cholesky"),
            "TopK": _vendor("libtpu", "topk"),
            "PartialReduce": _vendor("libtpu", "approx-topk"),
            # Bookkeeping the compiler adds around gathers (index bounds, packed indices).
            "AssumeGatherIndicesInBound": META,
            "GatherScatterIndicesBitpacked": META,
        },
        custom_call=True,
    ),
    # TPU collectives at the compiled level: XLA's own over the inter-chip interconnect, as
    # at the lowered level (``_ici_ops``), the partitioner's included.
    *_compiled_rules(
        _TPU,
        {f"hlo.{op}": _ICI for op in _HLO_COLLECTIVES},
        custom_call=False,
    ),
    # Everywhere: XLA's own kernels. The catch-all keeps an unknown future fusion kind in
    # xla rather than counting it as a hand-written kernel.
    *_compiled_rules(
        None,
        {
            "hlo.fusion:__triton_gemm": _xla("triton-gemm"),
            "hlo.fusion:__triton_nested_gemm_fusion": _xla("triton-gemm"),
            "hlo.fusion:__triton_collective*": _xla("collective"),
            "hlo.fusion:__triton*": _xla("triton-fusion"),
            "hlo.fusion*": _xla("fusion"),
        },
        custom_call=False,
    ),
)
"""The compiled-level rows of :data:`CLASSIFICATION_RULES` (level-scoped, so they never change a
lowered answer). They come first in :data:`CLASSIFICATION_RULES`: the first matching rule
wins."""


# -- every level -----------------------------------------------------------------------------

_META = META
_CALLBACK = Classification(layer="meta", kind="host-callback")


def _platform_rules(described: Platform) -> list[ClassificationRule]:
    """One platform's rows at the lowered level (custom calls at every level): its custom
    calls, then its library ops (a GPU's), its ICI collectives (TPU's) or its own ops."""
    rows = _targets({described.name}, dict(described.custom_calls))
    if described.op_libraries is not None:
        rows += _ops(
            {described.name},
            _gpu_ops(described.op_libraries, described.collectives),
            level="lowered",
        )
    if described.ici_collectives:
        rows += _ops({described.name}, _ici_ops(), level="lowered")
    if described.ops:
        rows += _ops({described.name}, dict(described.ops), level="lowered")
    return rows


CLASSIFICATION_RULES: tuple[ClassificationRule, ...] = tuple(
    [
        *COMPILED_RULES,
        # meta: non-compute custom calls, everywhere.
        *_targets(
            None,
            {
                "Sharding": _META,
                "SPMDFullToShardShape": _META,
                "SPMDShardToFullShape": _META,
                "shape_assertion": _META,
                "annotate_device_placement": _META,
                "AllocateBuffer": _META,
                "MoveToHost": _META,
                "MoveToDevice": _META,
                "PinToDevice": _META,
                "dce_sink": _META,
                "xla_python_*_callback": _CALLBACK,
                "xla_ffi_python_*_callback": _CALLBACK,
                "xla_ffi_partitioned_python_*_callback": _CALLBACK,
                "inert_host_callback.*": _CALLBACK,  # callbacks.make_inert's placeholders
            },
        ),
        # xla: a product, convolution or FFT of nothing (a broadcast zero), everywhere.
        ClassificationRule(
            pattern=f"*{ZERO_SIZE}",
            result=_xla("zero-size"),
            custom_call=False,
            levels=frozenset({"lowered"}),
        ),
        # custom: hand-written kernels, everywhere.
        *_targets(
            None,
            {
                "__gpu$xla.gpu.triton": Classification(layer="custom", kind="pallas-triton"),
                "triton_kernel_call": Classification(layer="custom", kind="jax-triton"),
                "triton_kernel_call_ffi": Classification(layer="custom", kind="pallas-triton"),
                "mosaic_gpu*": Classification(layer="custom", kind="pallas-mosaic-gpu"),
                MOSAIC_TARGET: Classification(layer="custom", kind="pallas-mosaic-tpu"),
                "__gpu$xla.gpu.ptx": Classification(layer="custom", kind="ptx"),
            },
        ),
        # each platform's own rows, from its description (model/platforms.py)
        *(rule for described in DESCRIPTIONS.values() for rule in _platform_rules(described)),
    ]
)

NOT_RUNNABLE: dict[str, tuple[str, ...]] = {
    p.name: p.not_runnable for p in DESCRIPTIONS.values() if p.not_runnable
}
"""Custom-call targets (globs) a platform cannot run although some JAX releases lower them
for it: jax 0.6 to 0.8 emit Mosaic GPU kernels for rocm, which Mosaic GPU does not support
(0.9+ refuse: "Mosaic GPU does not yet support AMD ROCm devices"). A program holding one
does not lower for that platform, on every release alike."""

UNKNOWN_CUSTOM_CALL = Classification(layer="custom", kind="ffi")
"""Any custom call nobody recognises is a hand-written kernel: a rewrite per backend."""

XLA_OP = Classification(layer="xla", kind="xla")


_ROUTINE = re.compile(
    r"^(?:lapack_[sdcz]|(?:cu|hip|cpu)(?:solver|sparse|hybrid)?_|(?=tridiagonal_))"
    r"(?P<routine>[a-z][a-z0-9_]*?)(?:_to_[a-z0-9_]+)?(?:_ffi)?(?:_v[0-9]+)?$"
)
"""jaxlib's custom-call targets of one library routine each: LAPACK's (its type letter
dropped), cuSOLVER's, hipSOLVER's, cuSPARSE's, hipSPARSE's and the kernels jaxlib ships per
backend (``cu_``/``hip_``, ``cuhybrid_``/``hiphybrid_``, ``cpu_``, the CPU's
``tridiagonal_solve_perturbed_ffi``)."""


def routine(target: str) -> str | None:
    """The library routine a vendor custom call runs, where its name says (jaxlib's targets):
    what tells apart two dispatches of one library and kind at one line (an LU solve's
    ``getrf`` and ``trsm``). A conversion is named by what it converts; ``None`` for an op or
    any other name.

    >>> routine("lapack_sgetrf_ffi"), routine("lapack_strsm_ffi"), routine("cusolver_syevd_ffi")
    ('getrf', 'trsm', 'syevd')
    >>> routine("cu_lu_pivots_to_permutation"), routine("stablehlo.dot_general")
    ('lu_pivots', None)
    >>> routine("cpu_lgamma_ffi"), routine("cu_lgamma_ffi"), routine("cusparse_csr_matvec_ffi_v2")
    ('lgamma', 'lgamma', 'csr_matvec')
    """
    found = _ROUTINE.match(target)
    return found.group("routine") if found else None


def classify(
    platform: str,
    op: str,
    target: str | None = None,
    *,
    level: str = "lowered",
    rules: Iterable[ClassificationRule] = CLASSIFICATION_RULES,
) -> Classification:
    """Classify one op (``target`` set for custom calls) on ``platform``; first rule wins."""
    is_custom_call = target is not None
    name = target if target is not None else op
    if (
        rules is CLASSIFICATION_RULES
    ):  # the table's rows that can apply here, in order, worked out once
        for rule in _applicable(platform, level, is_custom_call):
            if fnmatchcase(name, rule.pattern):
                return rule.result
    else:
        for rule in rules:
            if rule.matches(platform, level, name, is_custom_call=is_custom_call):
                return rule.result
    return UNKNOWN_CUSTOM_CALL if is_custom_call else XLA_OP


@functools.lru_cache(maxsize=64)
def _applicable(platform: str, level: str, is_custom_call: bool) -> tuple[ClassificationRule, ...]:
    return tuple(
        rule
        for rule in CLASSIFICATION_RULES
        if rule.custom_call == is_custom_call
        and (rule.platforms is None or platform in rule.platforms)
        and (rule.levels is None or level in rule.levels)
    )


def libraries(platform: str) -> frozenset[str]:
    """Every library name the table can attribute a dispatch on ``platform`` to."""
    return frozenset(
        rule.result.library
        for rule in CLASSIFICATION_RULES
        if rule.result.library is not None
        and (rule.platforms is None or platform in rule.platforms)
    )


def all_libraries() -> frozenset[str]:
    """Every library name the table knows, on any platform."""
    return frozenset(
        rule.result.library for rule in CLASSIFICATION_RULES if rule.result.library is not None
    )
