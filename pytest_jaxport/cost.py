"""The three numbers' arithmetic: runtime share, kernels to rewrite, engineering days (pure).

- :class:`RuntimeShare`: the fraction of time in ``xla``, ``vendor`` and ``custom`` kernels,
  ``measured`` (profiled where the platform ran) or ``estimated`` (a roofline model from op
  shapes against the platform's peak numbers). ``meta`` time is not part of the denominator.
- :func:`rewrite_items`: the NVIDIA (cuda) kernels a move to another target would have to
  rewrite, and the vendor dispatches with no counterpart there.
- :class:`CostModel` and :func:`estimate`: days per target, with the breakdown.

The cost model is tiered the way porting tools tier API migrations (SYCLomatic and HIPIFY
sort calls into migrated automatically, migrated with a warning to check, and not migrated):

========================  ====================================================  ========
item                      what it means                                          default
========================  ====================================================  ========
``kernel_rewrite``        a hand-written kernel that does not lower on the      10 days
                          target at all: write and tune a new one
``fallback_validation``   a hand-written kernel whose target runs a generic      3 days
                          fallback: validate numerics, profile, decide whether
                          a native kernel is needed ("performance not
                          guaranteed")
``vendor_gap``            a vendor-library dispatch with no counterpart on the   5 days
                          target (e.g. cuDNN fused attention): reimplement or
                          restructure
``tooling_assumption``    an NVIDIA-bound tool, pin or flag in the project       0.5 days
                          (Nsight, CUDA images, ``--xla_gpu_*``)
``fixed``                 per target, once: CI runners, containers, a first      5 days
                          end-to-end validation
========================  ====================================================  ========

The defaults are deliberately round: a Pallas/Triton kernel port is commonly quoted at one to
three engineer-weeks including tuning; validating a fallback is a few days of benchmarking;
a tooling change is hours. Every number is configurable in ``[tool.jaxport.cost]``.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pytest_jaxport.census import Census, Kernel

Basis = Literal["measured", "estimated"]
SHARE_LAYERS = ("xla", "vendor", "custom")

Status = Literal["rewrite", "fallback", "vendor-gap"]
STATUS_LABELS: Mapping[str, str] = {
    "rewrite": "rewrite: does not lower on the target",
    "fallback": "fallback — performance not guaranteed",
    "vendor-gap": "vendor gap: no counterpart on the target",
}

# Vendor kinds that have a library counterpart on every other GPU backend and a compiler
# counterpart on TPU and CPU: dots, convolutions, FFTs, solvers, collectives.
_PORTABLE_VENDOR_KINDS = frozenset(
    {"gemm", "convolution", "fft", "triangular-solve", "collective", "solver", "sparse",
     "sort", "jaxlib-kernel"}
)  # fmt: skip


# -- runtime share ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeShare:
    """Where the time of one program (or a suite) goes, by layer and by library."""

    basis: Basis
    seconds: float
    layers: Mapping[str, float] = field(default_factory=dict)
    libraries: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "basis": self.basis,
            "seconds": self.seconds,
            **{layer: self.layers.get(layer, 0.0) for layer in SHARE_LAYERS},
            "libraries": dict(self.libraries),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RuntimeShare:
        libraries = data.get("libraries") or {}
        assert isinstance(libraries, Mapping)
        return cls(
            basis="measured" if data.get("basis") == "measured" else "estimated",
            seconds=float(data.get("seconds", 0.0)),  # type: ignore[arg-type]
            layers={layer: float(data.get(layer, 0.0)) for layer in SHARE_LAYERS},  # type: ignore[arg-type]
            libraries={str(k): float(v) for k, v in libraries.items()},
        )


def share_of(timed: Iterable[tuple[str, str | None, float]], basis: Basis) -> RuntimeShare:
    """Shares from ``(layer, library, seconds)`` triples; ``meta`` time is left out.

    >>> share_of([("xla", None, 1.0), ("vendor", "lapack", 3.0)], "measured").layers["vendor"]
    0.75
    """
    by_layer = dict.fromkeys(SHARE_LAYERS, 0.0)
    by_library: dict[str, float] = {}
    for layer, library, seconds in timed:
        if layer not in by_layer:
            continue
        by_layer[layer] += seconds
        if library:
            by_library[library] = by_library.get(library, 0.0) + seconds
    total = sum(by_layer.values())
    if total <= 0:
        return RuntimeShare(basis=basis, seconds=0.0, layers=dict.fromkeys(SHARE_LAYERS, 0.0))
    return RuntimeShare(
        basis=basis,
        seconds=total,
        layers={layer: t / total for layer, t in by_layer.items()},
        libraries={lib: t / total for lib, t in sorted(by_library.items())},
    )


def combine(shares: Iterable[RuntimeShare]) -> RuntimeShare | None:
    """A suite total: each share weighted by its (measured or estimated) time.

    The basis is ``measured`` only when every part was measured.
    """
    shares = [s for s in shares if s.seconds > 0]
    if not shares:
        return None
    timed: list[tuple[str, str | None, float]] = []
    for s in shares:
        timed += [(layer, None, s.layers.get(layer, 0.0) * s.seconds) for layer in SHARE_LAYERS]
        timed += [("", lib, f * s.seconds) for lib, f in s.libraries.items()]
    basis: Basis = "measured" if all(s.basis == "measured" for s in shares) else "estimated"
    layers = share_of([t for t in timed if t[0]], basis)
    total = layers.seconds
    libraries: dict[str, float] = {}
    for _, lib, seconds in timed:
        if lib:
            libraries[lib] = libraries.get(lib, 0.0) + seconds / total
    return RuntimeShare(
        basis=basis, seconds=total, layers=layers.layers, libraries=dict(sorted(libraries.items()))
    )


# -- roofline -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Peak:
    """A platform's peak arithmetic rate and memory bandwidth, and where they came from."""

    flops: float
    bandwidth: float
    source: str


DEFAULT_PEAKS: Mapping[str, Peak] = {
    # Public datasheet figures; FP32 vector rate for GPUs (the conservative choice), bf16 MXU
    # rate for TPU since that is what JAX programs use there.
    "cuda": Peak(flops=67e12, bandwidth=3.35e12, source="NVIDIA H100 SXM datasheet (FP32)"),
    "rocm": Peak(flops=163.4e12, bandwidth=5.3e12, source="AMD MI300X datasheet (FP32)"),
    "tpu": Peak(flops=459e12, bandwidth=2.765e12, source="Google Cloud TPU v5p (bf16)"),
    "cpu": Peak(flops=1e12, bandwidth=100e9, source="a generic 16-core server CPU"),
}


def peak_from_target(text: str, *, source: str) -> Peak | None:
    """Peak FP32 rate and bandwidth from a text ``GpuTargetConfigProto``, if it has them.

    FLOP/s = SMs x FP32 lanes per SM x 2 (fused multiply-add) x clock.
    """
    fields = {
        name: float(m.group(1))
        for name in ("core_count", "fpus_per_core", "clock_rate_ghz", "memory_bandwidth")
        if (m := re.search(rf"\b{name}:\s*([0-9.eE+]+)", text))
    }
    if len(fields) < 4:
        return None
    flops = fields["core_count"] * fields["fpus_per_core"] * 2 * fields["clock_rate_ghz"] * 1e9
    return Peak(flops=flops, bandwidth=fields["memory_bandwidth"], source=source)


_TENSOR = re.compile(r"tensor<([^<>]*(?:<[^<>]*>)?)>")
_CONTRACTING = re.compile(r"lhs_contracting_dimensions = \[([0-9, ]*)\]")
_CONV_RHS = re.compile(r"\]x\[([^\]]*)\]")
_SOLVER = re.compile(
    r"(solver|lapack_|hybrid|getrf|potrf|syevd|geqrf|gesvd|gesdd|orgqr|trsm|Eigh|Qr|Lu"
    r"|Householder|cholesky|triangular)",
    re.IGNORECASE,
)
FREE_OPS = frozenset(
    {"stablehlo.constant", "stablehlo.reshape", "stablehlo.bitcast_convert",
     "stablehlo.get_tuple_element", "stablehlo.tuple", "stablehlo.optimization_barrier",
     "stablehlo.iota", "stablehlo.broadcast_in_dim", "func.return", "stablehlo.return",
     "func.call", "sdy.sharding_constraint", "sdy.manual_computation",
     "sdy.named_computation", "sdy.return"}
)  # fmt: skip
"""Ops that cost nothing in the roofline (no data moves, or none worth counting). A
``shard_map`` body (``sdy.manual_computation``) costs what its ops cost, like a call."""


def _element_bits(element: str) -> int:
    if element.startswith("complex<"):
        return 2 * _element_bits(element[len("complex<") : -1])
    if element in ("i1", "bf16"):
        return 8 if element == "i1" else 16
    m = re.match(r"^(?:f|i|ui|si)(\d+)$", element)
    if m:
        return int(m.group(1))
    if element.startswith("f8"):
        return 8
    if element.startswith("f4"):
        return 4
    return 32


@functools.lru_cache(maxsize=8192)
def tensor_shape(type_text: str) -> tuple[tuple[int, ...], int] | None:
    """``tensor<4x8xf32>`` -> ``((4, 8), 32)``: dimensions and bits per element.

    >>> tensor_shape("tensor<2x3xcomplex<f32>>")
    ((2, 3), 64)
    """
    m = _TENSOR.search(type_text)
    if m is None:
        return None
    *dims, element = m.group(1).split("x") if "x" in m.group(1) else ["", m.group(1)]
    if dims == [""]:
        dims = []
    sizes = tuple(1 if d in ("?", "") else int(d) for d in dims if d.isdigit() or d == "?")
    return sizes, _element_bits(element)


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def op_cost(
    op: str,
    target: str | None,
    operands: list[str],
    results: list[str],
    attributes: Mapping[str, str],
) -> tuple[float, float]:
    """Approximate ``(flops, bytes)`` of one StableHLO op from its types, for the roofline.

    dot: 2·M·N·K; convolution: 2·outputs·(kernel size / output features); fft: 5·n·log2 n;
    solver-like custom calls: n³ per matrix; everything else one flop per output element.
    Bytes are every operand and result once (no reuse, no caching).
    """
    if op in FREE_OPS:
        return 0.0, 0.0
    shapes_in = [s for t in operands if (s := tensor_shape(t))]
    shapes_out = [s for t in results if (s := tensor_shape(t))]
    moved = sum(_elements(dims) * bits / 8 for dims, bits in shapes_in + shapes_out)
    out = float(sum(_elements(dims) for dims, _ in shapes_out))
    if op == "stablehlo.dot_general" and shapes_in:
        m = _CONTRACTING.search(attributes.get("dot_dimension_numbers", ""))
        lhs = shapes_in[0][0]
        k = 1
        for d in (int(x) for x in m.group(1).split(",") if x.strip()) if m else ():
            k *= lhs[d] if d < len(lhs) else 1
        return 2.0 * out * k, moved
    if op == "stablehlo.convolution" and len(shapes_in) > 1:
        rhs = shapes_in[1][0]
        spec = _CONV_RHS.search(attributes.get("dimension_numbers", ""))
        labels = [x.strip() for x in spec.group(1).split(",")] if spec else []
        out_features = rhs[labels.index("o")] if "o" in labels and len(labels) == len(rhs) else 1
        return 2.0 * out * _elements(rhs) / max(out_features, 1), moved
    if op == "stablehlo.fft":
        n = max(out, 2.0)
        return 5.0 * n * math.log2(n), moved
    if target is not None and _SOLVER.search(target) and shapes_in and len(shapes_in[0][0]) >= 2:
        dims = shapes_in[0][0]
        n = dims[-1]
        return float(n**3 * _elements(dims[:-2])), moved
    if op in ("stablehlo.reduce", "stablehlo.reduce_window"):
        return float(sum(_elements(dims) for dims, _ in shapes_in)), moved
    return out, moved


def roofline_seconds(flops: float, bytes_moved: float, peak: Peak) -> float:
    """The roofline time of one op: bound by arithmetic or by memory, whichever is slower."""
    return max(flops / peak.flops, bytes_moved / peak.bandwidth)


# -- kernels to rewrite and days ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class RewriteItem:
    """One NVIDIA-bound kernel or dispatch, as seen from one target."""

    target: str
    status: Status
    name: str
    kind: str
    location: str | None = None
    check: str = ""
    reason: str = ""

    def describe(self) -> str:
        where = f" at {self.location}" if self.location else ""
        return f"{self.name} ({self.kind}){where}: {STATUS_LABELS[self.status]}"

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "status": self.status,
            "name": self.name,
            "kind": self.kind,
            "location": self.location,
            "check": self.check,
            "reason": self.reason,
        }


def _site(kernel: Kernel) -> tuple[str | None, str | None]:
    caller = getattr(kernel, "caller", None)
    return (str(kernel.location) if kernel.location else None, str(caller) if caller else None)


def _has_variant(kernel: Kernel, target: Census) -> bool:
    """A target-specific kernel at the same line, or called from the same place."""
    location, caller = _site(kernel)
    for other in target.in_layer("custom"):
        other_location, other_caller = _site(other)
        if location is not None and other_location == location:
            return True
        if caller is not None and other_caller == caller:
            return True
    return False


def rewrite_items(
    *,
    check: str,
    target: str,
    nvidia: Census | None,
    on_target: Census | None,
    target_error: str | None = None,
) -> list[RewriteItem]:
    """What moving ``check`` from cuda to ``target`` needs, kernel by kernel.

    Every distinct custom kernel of the cuda census without a target-specific variant counts
    as one to rewrite: ``rewrite`` when the function does not lower on the target at all,
    ``fallback`` when the target runs generic code there instead (performance not
    guaranteed). Vendor dispatches of kinds with no counterpart elsewhere (e.g. cuDNN fused
    attention) are listed as ``vendor-gap``.
    """
    if nvidia is None:
        return []
    items: list[RewriteItem] = []
    seen: set[tuple[str, str | None]] = set()
    for kernel in nvidia.kernels:
        key = (kernel.name, str(kernel.location) if kernel.location else None)
        if key in seen:
            continue
        location = key[1]
        if kernel.layer == "custom":
            seen.add(key)
            if on_target is None:
                status: Status = "rewrite"
                reason = f"does not lower on {target}: {target_error or 'not lowered'}"
            elif _has_variant(kernel, on_target):
                continue
            else:
                status = "fallback"
                reason = f"{target} runs generic code here; no {target}-specific kernel"
        elif kernel.layer == "vendor" and kernel.kind not in _PORTABLE_VENDOR_KINDS:
            seen.add(key)
            status = "vendor-gap"
            reason = f"{kernel.library} {kernel.kind} has no counterpart on {target}"
        else:
            continue
        items.append(
            RewriteItem(
                target=target,
                status=status,
                name=kernel.name,
                kind=kernel.kind,
                location=location,
                check=check,
                reason=reason,
            )
        )
    return items


@dataclass(frozen=True, slots=True, kw_only=True)
class CostModel:
    """Days per item; see the module docstring for the reasoning behind the defaults."""

    kernel_rewrite: float = 10.0
    fallback_validation: float = 3.0
    vendor_gap: float = 5.0
    tooling_assumption: float = 0.5
    fixed: float = 5.0

    def days(self, status: Status) -> float:
        return {
            "rewrite": self.kernel_rewrite,
            "fallback": self.fallback_validation,
            "vendor-gap": self.vendor_gap,
        }[status]


COST_KEYS = ("kernel_rewrite", "fallback_validation", "vendor_gap", "tooling_assumption", "fixed")


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteEstimate:
    """Engineering days to move the suite's code to one target, with the breakdown."""

    target: str
    items: tuple[RewriteItem, ...]
    tooling_assumptions: int
    days: float
    breakdown: Mapping[str, float]

    @property
    def kernels_to_rewrite(self) -> int:
        return len({(i.name, i.location) for i in self.items if i.status != "vendor-gap"})

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "kernels_to_rewrite": self.kernels_to_rewrite,
            "days": self.days,
            "breakdown": dict(self.breakdown),
            "items": [i.to_dict() for i in self.items],
            "tooling_assumptions": self.tooling_assumptions,
        }


def estimate(
    target: str,
    items: Iterable[RewriteItem],
    *,
    model: CostModel,
    tooling_assumptions: int = 0,
    priced: Mapping[RewriteItem, float] | None = None,
) -> RewriteEstimate:
    """Days for ``target``: each distinct item priced once (``priced`` overrides the model)."""
    distinct: dict[tuple[str, str, str | None], RewriteItem] = {}
    for item in items:
        distinct.setdefault((item.status, item.name, item.location), item)
    unique = tuple(sorted(distinct.values()))
    breakdown = {"kernel_rewrite": 0.0, "fallback_validation": 0.0, "vendor_gap": 0.0}
    names = {"rewrite": "kernel_rewrite", "fallback": "fallback_validation",
             "vendor-gap": "vendor_gap"}  # fmt: skip
    for item in unique:
        cost = (priced or {}).get(item, model.days(item.status))
        breakdown[names[item.status]] += cost
    breakdown["tooling_assumption"] = tooling_assumptions * model.tooling_assumption
    breakdown["fixed"] = model.fixed  # CI runners, images, a first end-to-end validation
    return RewriteEstimate(
        target=target,
        items=unique,
        tooling_assumptions=tooling_assumptions,
        days=sum(breakdown.values()),
        breakdown=breakdown,
    )
