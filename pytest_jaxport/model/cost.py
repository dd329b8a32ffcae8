"""The three numbers' arithmetic: runtime share, kernels to rewrite, engineering days (pure).

- :class:`RuntimeShare`: the fraction of time in ``xla``, ``vendor`` and ``custom`` kernels,
  ``measured`` (profiled where the platform ran) or ``estimated`` (a roofline model from op
  shapes against the platform's peak numbers). ``meta`` time is not part of the denominator.
- :func:`rewrite_items`: the home platform's kernels (cuda's unless ``[tool.jaxport] home``
  names another) a move to another target would have to rewrite, and the vendor dispatches
  with no counterpart there.
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
``format_rewrite``        a line the target emulates or cannot compile (float64  3 days
                          on TPU): move it off the format (or the op) and
                          re-validate
``requantize``            a float8 format the target's matrix units do not take  2 days
                          (OCP vs FNUZ): re-quantize the weights once per
                          format and re-validate accuracy
``precision_review``      a dot or convolution the target computes with fewer    0.25 days
                          mantissa bits (TF32, one bfloat16 pass) or converts:
                          pin ``precision=`` or accept and document it
``layout_work``           a convolution the target relays out, or an array      0.5 days
                          with 10% or more tile padding: change the layout or
                          pad the features
========================  ====================================================  ========

The defaults are assumptions, deliberately round, not measurements (no public study prices
these items in days; docs/reference.md says what each rests on): a kernel rewrite two
engineer-weeks including tuning; validating a fallback a few days of benchmarking; a
tooling change hours. Format and layout items are priced per distinct line (a
re-quantization per format and target): a format rewrite a few days of moving a code path
off float64 and re-validating it, a precision review an afternoon. Every number is
configurable in ``[tool.jaxport.cost]``; ``fixed`` is the same for every target whatever the
code does, so the reports show it apart from what the project's findings cost.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from pytest_jaxport.model.census import Census, Kernel, OpSite
from pytest_jaxport.model.classification import Classification
from pytest_jaxport.model.findings import Effect, FormatCensus
from pytest_jaxport.model.platforms import DESCRIPTIONS, GPU_LAUNCH

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
    """Where the time of one program (or a suite) goes, by layer and by library.

    An estimate says which census it was computed from (``estimated_from``: ``compiled`` or
    ``lowered``) and how far off such estimates were on the fidelity corpus
    (``error_points``, see :func:`estimate_error`; ``error_measured_on``: the device that
    error was measured on, ``cpu`` or a GPU's name). A suite total says how many checks went
    into it (``checks``) and how many it leaves out (``left_out``: estimated checks kept
    apart from a measured total, whose own estimated total is ``left_out_share``).
    """

    basis: Basis
    seconds: float
    layers: Mapping[str, float] = field(default_factory=dict)
    libraries: Mapping[str, float] = field(default_factory=dict)
    estimated_from: str | None = None
    error_points: float | None = None
    error_measured_on: str | None = None
    checks: int | None = None
    left_out: int = 0
    left_out_share: RuntimeShare | None = None

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "basis": self.basis,
            "seconds": self.seconds,
            **{layer: self.layers.get(layer, 0.0) for layer in SHARE_LAYERS},
            "libraries": dict(self.libraries),
        }
        if self.estimated_from is not None:
            data["estimated_from"] = self.estimated_from
        if self.error_points is not None:
            data["error_points"] = self.error_points
        if self.error_measured_on is not None:
            data["error_measured_on"] = self.error_measured_on
        if self.checks is not None:
            data["checks"] = self.checks
        if self.left_out:
            data["left_out"] = self.left_out
        if self.left_out_share is not None:
            data["left_out_share"] = self.left_out_share.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RuntimeShare:
        libraries = data.get("libraries") or {}
        assert isinstance(libraries, Mapping)
        error = data.get("error_points")
        measured_on = data.get("error_measured_on")
        checks = data.get("checks")
        left_out_share = data.get("left_out_share")
        return cls(
            basis="measured" if data.get("basis") == "measured" else "estimated",
            seconds=float(data.get("seconds", 0.0)),  # type: ignore[arg-type]
            layers={layer: float(data.get(layer, 0.0)) for layer in SHARE_LAYERS},  # type: ignore[arg-type]
            libraries={str(k): float(v) for k, v in libraries.items()},
            estimated_from=str(data["estimated_from"]) if data.get("estimated_from") else None,
            error_points=float(error) if isinstance(error, (int, float)) else None,
            error_measured_on=measured_on if isinstance(measured_on, str) else None,
            checks=int(checks) if isinstance(checks, int) else None,
            left_out=int(data.get("left_out", 0) or 0),  # type: ignore[call-overload]
            left_out_share=(
                cls.from_dict(left_out_share) if isinstance(left_out_share, Mapping) else None
            ),
        )


def share_basis(share: Mapping[str, object]) -> str:
    """What a share (a ``RuntimeShare.to_dict()``) rests on, in words, for every renderer.

    >>> share_basis({"basis": "estimated", "estimated_from": "compiled", "error_points": 9.6})
    'estimated (roofline from the compiled program, ±10 points on the fidelity corpus)'
    >>> share_basis({"basis": "estimated", "error_points": 12, "error_measured_on": "NVIDIA H200"})
    'estimated (roofline, ±12 points on NVIDIA H200)'
    >>> share_basis({"basis": "measured", "checks": 5, "left_out": 1})
    'measured over 5 of 6 checks (1 not measured, left out)'
    """
    if share.get("basis") == "measured":
        left_out = share.get("left_out")
        checks = share.get("checks")
        if isinstance(left_out, int) and left_out > 0 and isinstance(checks, int):
            return (
                f"measured over {checks} of {checks + left_out} checks "
                f"({left_out} not measured, left out)"
            )
        return "measured"
    source = share.get("estimated_from")
    error = share.get("error_points")
    parts = ["roofline" + (f" from the {source} program" if isinstance(source, str) else "")]
    if isinstance(error, (int, float)):
        # A band measured on the platform's own hardware names it (the fidelity corpus run
        # there); the default band, measured on cpu, is the corpus's, as the docs say. Short:
        # a terminal note is one line of at most 100 columns.
        device = share.get("error_measured_on")
        own = isinstance(device, str) and device not in ("", "cpu")
        parts.append(f"±{error:.0f} points on {device if own else 'the fidelity corpus'}")
    return f"estimated ({', '.join(parts)})"


def share_basis_short(share: Mapping[str, object]) -> str:
    """:func:`share_basis` in a few words, for a terminal line: ``measured``,
    ``measured, 5 of 6 checks``, ``estimated ±10`` (the full wording goes in a note).

    >>> share_basis_short({"basis": "estimated", "estimated_from": "lowered", "error_points": 37})
    'estimated ±37'
    """
    if share.get("basis") == "measured":
        left_out = share.get("left_out")
        checks = share.get("checks")
        if isinstance(left_out, int) and left_out > 0 and isinstance(checks, int):
            return f"measured, {checks} of {checks + left_out} checks"
        return "measured"
    error = share.get("error_points")
    return "estimated" + (f" ±{error:.0f}" if isinstance(error, (int, float)) else "")


RANKING = "a ranking, not a share"
"""What an estimate whose band swallows its split is, in every format's words."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ranking:
    """Why an estimated share reads as a ranking, not a share: within its band (``band``,
    percentage points) the smaller of its two largest layers (``layer``, at ``fraction``)
    could take no time at all, so the estimate says which layer takes more, not how much."""

    band: float
    layer: str
    fraction: float


def ranking_of(share: Mapping[str, object]) -> Ranking | None:
    """The one rule for when a share (a ``RuntimeShare.to_dict()``) is :data:`RANKING`: an
    estimate whose error band is at least as wide as the smaller of its two largest layers'
    shares. The split it qualifies is those two layers; ``None`` where the numbers can be read
    as amounts: a measured share (it has no band), an estimate without a band, or one whose
    time is all in one layer (a layer with no kernels has no time, estimated or not).

    The band is the estimate's mean error on the fidelity corpus (its worst layer's, in
    points), so a ranking is the estimate's likeliest reading, not a bound.

    >>> ranking_of({"basis": "estimated", "error_points": 37, "xla": 0.7, "vendor": 0.3})
    Ranking(band=37, layer='vendor', fraction=0.3)
    >>> ranking_of({"basis": "estimated", "error_points": 10, "xla": 0.7, "vendor": 0.3}) is None
    True
    """
    if share.get("basis") == "measured":
        return None
    band = share.get("error_points")
    if not isinstance(band, (int, float)) or not math.isfinite(band) or band <= 0:
        return None
    layers = []
    for layer in SHARE_LAYERS:
        value = share.get(layer)
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            layers.append((float(value), layer))
    if len(layers) < 2:
        return None
    total = sum(value for value, _ in layers)
    fraction, layer = sorted(layers, key=lambda v: (-v[0], SHARE_LAYERS.index(v[1])))[1]
    fraction /= total  # as the shares are shown: fractions of the time in the three layers
    if band < fraction * 100:
        return None
    return Ranking(band=band, layer=layer, fraction=fraction)


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


def measured_share(
    times: Mapping[str, float],
    sites: Mapping[str, OpSite],
    classify: Callable[[str, str | None], Classification],
) -> RuntimeShare:
    """The measured share: each compiled instruction's measured seconds (by name, as the
    profiler reports them) in the layer and library its op site classifies as. An
    instruction the module's text does not name (a runtime copy) is XLA's own."""
    timed: list[tuple[str, str | None, float]] = []
    for name, seconds in times.items():
        site = sites.get(name)
        if site is None:
            timed.append(("xla", None, seconds))
            continue
        found = classify(site.op, site.target if site.op.endswith("custom_call") else None)
        timed.append((found.layer, found.library, seconds))
    return share_of(timed, "measured")


def combine(shares: Iterable[RuntimeShare]) -> RuntimeShare | None:
    """A suite total: each share weighted by its time.

    Measured and estimated seconds are never added together (an estimate's seconds are a
    model's, not a clock's): where some checks were measured, the total is theirs, basis
    ``measured``, and the estimated checks are counted in ``left_out`` with their own total
    in ``left_out_share``. Only when nothing was measured is the total an estimate; its
    error band is the largest of its parts'.
    """
    shares = [s for s in shares if s.seconds > 0]
    if not shares:
        return None
    measured = [s for s in shares if s.basis == "measured"]
    estimated = [s for s in shares if s.basis != "measured"]
    if not measured:
        return _weighted(estimated, "estimated")
    total = _weighted(measured, "measured")
    rest = _weighted(estimated, "estimated") if estimated else None
    return RuntimeShare(
        basis="measured",
        seconds=total.seconds,
        layers=total.layers,
        libraries=total.libraries,
        checks=len(measured),
        left_out=len(estimated),
        left_out_share=rest,
    )


def _weighted(shares: list[RuntimeShare], basis: Basis) -> RuntimeShare:
    timed: list[tuple[str, str | None, float]] = []
    for s in shares:
        timed += [(layer, None, s.layers.get(layer, 0.0) * s.seconds) for layer in SHARE_LAYERS]
        timed += [("", lib, f * s.seconds) for lib, f in s.libraries.items()]
    layers = share_of([t for t in timed if t[0]], basis)
    total = layers.seconds
    libraries: dict[str, float] = {}
    for _, lib, seconds in timed:
        if lib:
            libraries[lib] = libraries.get(lib, 0.0) + seconds / total
    errors = [(s.error_points, s.error_measured_on) for s in shares if s.error_points is not None]
    worst = max(errors, key=lambda e: e[0]) if errors else (None, None)
    sources = {s.estimated_from for s in shares if s.estimated_from}
    return RuntimeShare(
        basis=basis,
        seconds=total,
        layers=layers.layers,
        libraries=dict(sorted(libraries.items())),
        estimated_from=" and ".join(sorted(sources)) if sources else None,
        error_points=worst[0],
        error_measured_on=worst[1],
        checks=len(shares),
    )


# -- roofline -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Peak:
    """A platform's rates for the runtime-share estimate, and where they came from.

    ``flops`` and ``bandwidth`` are peak rates; ``launch`` is what every kernel costs
    whatever it computes (launch, dispatch, synchronisation), ``library_call`` what a
    library or hand-written kernel costs on top (argument checks, workspace, plans).
    """

    flops: float
    bandwidth: float
    source: str
    launch: float = 0.0
    library_call: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """The fractions of peak arithmetic that kernels other than dense ones reach.

    Fitted on the fidelity corpus (``calibration/calibrate.py fit``, shipped in
    ``pytest_jaxport/calibration.json``) and applied to every platform: a solver's n³ or an
    FFT's 5·n·log₂n flops run at ``solver`` or ``fft`` times the platform's peak rate.
    """

    solver: float
    fft: float
    source: str


CALIBRATION_FILE = "calibration.json"
"""The fitted constants, shipped inside the package (``pytest_jaxport/calibration.json``):
``calibration/calibrate.py fit --write`` writes it, nothing else does."""


def read_calibration(text: str) -> tuple[Calibration, Mapping[str, Any]]:
    """The calibration and cpu's fitted rates (``bandwidth``, ``launch``, ``library_call``,
    ``source``) of a ``calibration.json`` text.

    >>> calibration, cpu = read_calibration(
    ...     '{"solver": 0.5, "fft": 0.25, "source": "s", "cpu": {"bandwidth": 1e10}}'
    ... )
    >>> calibration.solver, cpu["bandwidth"]
    (0.5, 10000000000.0)
    """
    data = json.loads(text)
    calibration = Calibration(
        solver=float(data["solver"]), fft=float(data["fft"]), source=str(data["source"])
    )
    return calibration, data["cpu"]


def _shipped_calibration() -> tuple[Calibration, Mapping[str, Any]]:
    import importlib.resources

    resource = importlib.resources.files("pytest_jaxport") / CALIBRATION_FILE
    return read_calibration(resource.read_text(encoding="utf-8"))


CALIBRATION, _CPU_FITTED = _shipped_calibration()

_GPU_LAUNCH = GPU_LAUNCH
DEFAULT_PEAKS: Mapping[str, Peak] = {
    # Each platform's datasheet rates, from its description (model/platforms.py): FP32
    # vector rate for GPUs (the conservative choice), bf16 MXU rate for TPU since that is
    # what JAX programs use there. No GPU or TPU was available to measure launch costs: they
    # are typical minimum device times of a kernel.
    **{
        p.name: Peak(flops=p.peak.flops, bandwidth=p.peak.bandwidth, launch=p.peak.launch,
                     library_call=p.peak.library_call, source=p.peak.source)
        for p in DESCRIPTIONS.values()
        if p.peak is not None
    },
    # Shares are ratios, so only the cpu's proportions matter: bandwidth, launch and library
    # costs relative to a nominal 100 GFLOP/s, fitted with CALIBRATION on the fidelity corpus
    # (pytest_jaxport/calibration.json).
    "cpu": Peak(flops=1e11, bandwidth=float(_CPU_FITTED["bandwidth"]),
                launch=float(_CPU_FITTED["launch"]),
                library_call=float(_CPU_FITTED["library_call"]),
                source=str(_CPU_FITTED["source"])),
}  # fmt: skip


def peak_from_target(text: str, *, source: str) -> Peak | None:
    """Peak FP32 rate and bandwidth from a text ``GpuTargetConfigProto``, if it has them.

    FLOP/s = SMs x FP32 lanes per SM x 2 (fused multiply-add) x clock. Launch and library
    costs are the cuda defaults' (a description has none).
    """
    fields = {
        name: float(m.group(1))
        for name in ("core_count", "fpus_per_core", "clock_rate_ghz", "memory_bandwidth")
        if (m := re.search(rf"\b{name}:\s*([0-9.eE+]+)", text))
    }
    if len(fields) < 4:
        return None
    flops = fields["core_count"] * fields["fpus_per_core"] * 2 * fields["clock_rate_ghz"] * 1e9
    cuda = DEFAULT_PEAKS["cuda"]
    return Peak(
        flops=flops,
        bandwidth=fields["memory_bandwidth"],
        launch=cuda.launch,
        library_call=cuda.library_call,
        source=f"{source}; {_GPU_LAUNCH}",
    )


def peak_for(platform: str, *, target_config: str = "", target: str = "") -> Peak:
    """The rates an estimate for ``platform`` uses: cuda's from its GPU description when
    there is one, else the platform's defaults (a platform without any uses cpu's)."""
    if platform == "cuda" and target_config:
        described = peak_from_target(target_config, source=target or "GPU description")
        if described is not None:
            return described
    return DEFAULT_PEAKS.get(platform, DEFAULT_PEAKS["cpu"])


@dataclass(frozen=True, slots=True, kw_only=True)
class EstimateError:
    """How far the estimate was from the measured share on the fidelity corpus.

    ``points``: the mean, over the corpus's ``programs``, of the worst layer's difference
    between estimated and measured share, in percentage points; ``device``: what it was
    measured on (``cpu``, or a GPU's name such as ``NVIDIA H200``); ``measured_on``: the
    device and jaxlib, in words; ``source``: the results file it came from.
    """

    points: float
    programs: int
    measured_on: str
    device: str = ""
    source: str = ""


ESTIMATE_ERRORS_FILE = "estimate_error.json"
"""The band data, shipped inside the package (``pytest_jaxport/estimate_error.json``): per
platform and census level; ``calibration/calibrate.py adopt`` writes cuda's from a run on a
GPU (``benchmarks/gpu_validation.py``)."""

EVERY_PLATFORM = "*"
"""The key of :func:`read_estimate_errors`'s table that applies to every platform without
an entry of its own (the file's ``default`` table)."""


def read_estimate_errors(text: str, *, source: str) -> dict[str, dict[str, EstimateError]]:
    """The error bands of an ``estimate_error.json`` text: ``{platform: {level: error}}``,
    with the file's ``default`` table under :data:`EVERY_PLATFORM`.

    Raises ``ValueError`` naming ``source``, the key, what was expected and what was found.

    >>> table = read_estimate_errors(
    ...     '{"default": {"lowered": {"points": 37, "programs": 60, "device": "cpu"}},'
    ...     ' "platforms": {"cuda": {"lowered": {"points": 12, "programs": 30,'
    ...     ' "device": "NVIDIA H200", "jaxlib": "0.11.2"}}}}', source="bands.json")
    >>> table["cuda"]["lowered"].measured_on
    'NVIDIA H200, jaxlib 0.11.2'
    """
    import json

    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{source}: not JSON ({e})") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("default"), Mapping):
        raise ValueError(f"{source}: expected an object with a 'default' table of levels")
    platforms = data.get("platforms", {})
    if not isinstance(platforms, Mapping):
        raise ValueError(
            f"{source}: 'platforms' must be an object of platforms, found "
            f"{type(platforms).__name__}"
        )
    tables = {EVERY_PLATFORM: data["default"], **platforms}
    out: dict[str, dict[str, EstimateError]] = {}
    for platform, levels in tables.items():
        where = "default" if platform == EVERY_PLATFORM else f"platforms.{platform}"
        if not isinstance(levels, Mapping):
            raise ValueError(f"{source}: '{where}' must be an object of census levels")
        out[platform] = {}
        for level, entry in levels.items():
            key = f"{where}.{level}"
            points = entry.get("points") if isinstance(entry, Mapping) else None
            programs = entry.get("programs") if isinstance(entry, Mapping) else None
            if not isinstance(points, (int, float)) or not isinstance(programs, int):
                raise ValueError(
                    f"{source}: '{key}' needs a number 'points' and an integer 'programs', "
                    f"found {entry!r}"
                )
            assert isinstance(entry, Mapping)
            device = str(entry.get("device") or "")
            jaxlib = entry.get("jaxlib")
            libtpu = entry.get("libtpu")  # the TPU's compiler and runtime, where it ran on one
            measured_on = [device, f"jaxlib {jaxlib}" if jaxlib else "",
                           f"libtpu {libtpu}" if libtpu else ""]  # fmt: skip
            out[platform][str(level)] = EstimateError(
                points=float(points),
                programs=programs,
                measured_on=", ".join(filter(None, measured_on)),
                device=device,
                source=str(entry.get("source") or ""),
            )
    return out


@functools.cache
def shipped_estimate_errors() -> Mapping[str, Mapping[str, EstimateError]]:
    """The bands shipped in ``pytest_jaxport/estimate_error.json`` (read once per process)."""
    import importlib.resources

    resource = importlib.resources.files("pytest_jaxport") / ESTIMATE_ERRORS_FILE
    return read_estimate_errors(
        resource.read_text(encoding="utf-8"), source=f"pytest_jaxport/{ESTIMATE_ERRORS_FILE}"
    )


ESTIMATE_ERROR: Mapping[str, EstimateError] = shipped_estimate_errors()[EVERY_PLATFORM]
"""The shipped band by census level for platforms without a band of their own, measured on
cpu (``benchmarks/results/fidelity-cpu.json``): for ``compiled``, the fit's error on each
program left out of it (the shipped constants, fitted on an earlier run, were 8.2 points
off there); for ``lowered``, the shipped constants' error (on cpu a lowered dot counts as
``xla``, so dot-heavy programs are misattributed whatever the timing model)."""


def estimate_error(
    platform: str,
    level: str,
    errors: Mapping[str, Mapping[str, EstimateError]] | None = None,
) -> EstimateError | None:
    """The band an estimate for ``platform`` from a ``level`` census carries: the platform's
    own, measured on its hardware, where there is one, else the default (measured on cpu).
    ``errors`` defaults to the shipped table (:func:`shipped_estimate_errors`)."""
    table = shipped_estimate_errors() if errors is None else errors
    own = table.get(platform, {}).get(level)
    return own if own is not None else table.get(EVERY_PLATFORM, {}).get(level)


def estimated_share(
    census: Census, errors: Mapping[str, Mapping[str, EstimateError]] | None = None
) -> RuntimeShare | None:
    """The estimated share of one census (its ``estimated_seconds``), labelled with the
    census's level and the error measured for that platform and level (and where it was
    measured); ``None`` when it has no estimate."""
    if not census.estimated_seconds:
        return None
    share = share_of(census.estimated_seconds, "estimated")
    if share.seconds <= 0:
        return None
    error = estimate_error(census.platform, census.level, errors)
    return replace(
        share,
        estimated_from=census.level,
        error_points=error.points if error is not None else None,
        error_measured_on=(error.device or None) if error is not None else None,
    )


_KERNEL_OPS = frozenset(
    {"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution", "stablehlo.fft",
     "stablehlo.custom_call", "stablehlo.sort", "stablehlo.reduce", "stablehlo.reduce_window",
     "stablehlo.gather", "stablehlo.scatter", "stablehlo.while", "stablehlo.case",
     "stablehlo.if", "stablehlo.triangular_solve", "stablehlo.cholesky", "chlo.top_k",
     "stablehlo.select_and_scatter", "stablehlo.rng_bit_generator", "stablehlo.all_reduce",
     "stablehlo.all_gather", "stablehlo.reduce_scatter", "stablehlo.all_to_all",
     "stablehlo.collective_permute", "stablehlo.collective_broadcast"}
)  # fmt: skip
"""Lowered ops XLA keeps as kernels of their own; every other lowered op is element-wise or
data movement that XLA fuses with its neighbours."""

FUSED_SHARE = 0.25
"""How much of a kernel one fusible lowered op is: on the fidelity corpus XLA makes one
kernel of about every four lowered ``xla`` ops (0.24 deviceless on cuda, 0.25 on cpu)."""


def kernel_seconds(
    site: OpSite, layer: str, peak: Peak, calibration: Calibration = CALIBRATION
) -> float:
    """The estimated time of one dispatch: a fixed cost plus its roofline.

    A kernel costs ``peak.launch`` (``+ peak.library_call`` outside the ``xla`` layer) plus
    the slower of its arithmetic (at the peak rate, times the calibrated efficiency for
    solvers and FFTs) and its memory traffic. Compiled sites are kernels as XLA made them
    (a fusion moves its operands and result once). A lowered element-wise op is fused by
    XLA with its neighbours: it costs :data:`FUSED_SHARE` of a kernel of its own.
    """
    if site.op in FREE_OPS:
        return 0.0
    if site.op.startswith(("stablehlo.", "chlo.")) and site.op not in _KERNEL_OPS:
        return FUSED_SHARE * (peak.launch + site.bytes / peak.bandwidth)
    fixed = peak.launch + (peak.library_call if layer != "xla" else 0.0)
    rate = peak.flops
    if is_solver(site.target) or site.op.endswith(("cholesky", "triangular_solve")):
        rate *= calibration.solver
    elif site.op.endswith(".fft"):
        rate *= calibration.fft
    return fixed + max(site.flops / rate, site.bytes / peak.bandwidth)


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
    >>> tensor_shape("tensor<complex<f64>>"), tensor_shape("tensor<?x4xbf16>")
    (((), 128), ((1, 4), 16))
    """
    m = _TENSOR.search(type_text)
    if m is None:
        return None
    parts = m.group(1).split("x")  # (the element type may hold an x: complex<f32>)
    dims = 0
    while dims < len(parts) - 1 and (parts[dims].isdigit() or parts[dims] == "?"):
        dims += 1
    sizes = tuple(1 if d == "?" else int(d) for d in parts[:dims])
    return sizes, _element_bits("x".join(parts[dims:]))


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def dot_flops(outputs: float, contracted: float) -> float:
    """A matrix product: one multiply-add (2 flops) per output element per contracted element."""
    return 2.0 * outputs * contracted


def convolution_flops(outputs: float, kernel: tuple[int, ...], out_features: int) -> float:
    """A convolution: 2 flops per output element per kernel element of one output feature."""
    return 2.0 * outputs * _elements(kernel) / max(out_features, 1)


def fft_flops(points: float) -> float:
    """An FFT over ``points`` elements: 5·n·log2 n."""
    n = max(points, 2.0)
    return 5.0 * n * math.log2(n)


def solver_flops(dims: tuple[int, ...]) -> float:
    """A factorization or eigensolver of (a batch of) ``n×n`` matrices: n³ each."""
    n = dims[-1]
    return float(n**3 * _elements(dims[:-2]))


def is_solver(target: str | None) -> bool:
    """Whether a custom-call target is a linear-algebra solver (LAPACK, cuSOLVER, TPU's)."""
    return target is not None and _SOLVER.search(target) is not None


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
        return dot_flops(out, k), moved
    if op == "stablehlo.convolution" and len(shapes_in) > 1:
        rhs = shapes_in[1][0]
        spec = _CONV_RHS.search(attributes.get("dimension_numbers", ""))
        labels = [x.strip() for x in spec.group(1).split(",")] if spec else []
        out_features = rhs[labels.index("o")] if "o" in labels and len(labels) == len(rhs) else 1
        return convolution_flops(out, rhs, out_features), moved
    if op == "stablehlo.fft":
        return fft_flops(out), moved
    if is_solver(target) and shapes_in and len(shapes_in[0][0]) >= 2:
        return solver_flops(shapes_in[0][0]), moved
    if op in ("stablehlo.reduce", "stablehlo.reduce_window"):
        return float(sum(_elements(dims) for dims, _ in shapes_in)), moved
    return out, moved


# -- kernels to rewrite and days ----------------------------------------------------------


def _in_order(item: RewriteItem | FormatItem) -> tuple[tuple[bool, Any], ...]:
    """What ``item`` sorts by: its fields in order, ``None`` (no source line) before any value
    (``None`` and text do not compare: a suite with one site found both with and without a
    line failed to report)."""
    return tuple(
        (value is not None, value) for value in (getattr(item, f.name) for f in fields(item))
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteItem:
    """One kernel or dispatch bound to the home platform, as seen from one target. Items sort
    by their fields in order, one without a line before those with one (:func:`_in_order`)."""

    target: str
    status: Status
    name: str
    kind: str
    location: str | None = None
    check: str = ""
    reason: str = ""

    def __lt__(self, other: RewriteItem) -> bool:
        return _in_order(self) < _in_order(other)

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
    """What moving ``check`` from the home platform to ``target`` needs, kernel by kernel:
    ``nvidia`` is the home platform's census (cuda's unless ``[tool.jaxport] home`` names
    another; the keyword predates ``home``).

    Every distinct custom kernel of the home census without a target-specific variant counts
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


FormatCost = Literal["format_rewrite", "requantize", "precision_review", "layout_work"]

_FORMAT_COSTS: Mapping[str, FormatCost] = {
    "not-compiled": "format_rewrite",
    "emulated": "format_rewrite",
    "requantize": "requantize",
    "reduced-precision": "precision_review",
    "converted": "precision_review",
}
LAYOUT_WORK_FRACTION = 0.1
"""Tile padding priced as layout work from this share of the bytes an op moves (less is
noise next to the other costs of a move)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatItem:
    """One formats-and-layout finding a move to ``target`` has to deal with, priced by the
    cost model's ``cost`` key. Items sort as :class:`RewriteItem` does."""

    target: str
    cost: FormatCost
    rule: str
    effect: Effect
    location: str | None = None
    formats: tuple[str, ...] = ()
    check: str = ""

    def __lt__(self, other: FormatItem) -> bool:
        return _in_order(self) < _in_order(other)

    @property
    def name(self) -> str:
        """The rule (as :attr:`RewriteItem.name`: a hook written for kernels keeps working)."""
        return self.rule

    @property
    def kind(self) -> str:
        """The effect (``emulated``, ``requantize``...), as :attr:`RewriteItem.kind`."""
        return self.effect

    @property
    def status(self) -> str:
        """The cost key, as :attr:`RewriteItem.status`."""
        return self.cost

    @property
    def site(self) -> tuple[str, ...]:
        """What one price covers: a rule at a line for a format rewrite, the formats for a
        re-quantization (one per model, whatever its lines), a line otherwise."""
        if self.cost == "format_rewrite":
            return (self.cost, self.rule, self.location or "")
        if self.cost == "requantize":
            return (self.cost, *self.formats)
        return (self.cost, self.location or "")

    def describe(self) -> str:
        where = f" at {self.location}" if self.location else ""
        formats = f" ({', '.join(self.formats)})" if self.formats else ""
        return f"{self.rule}{formats}{where}: {self.cost.replace('_', ' ')}"

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "cost": self.cost,
            "rule": self.rule,
            "effect": self.effect,
            "location": self.location,
            "formats": list(self.formats),
            "check": self.check,
        }


def format_items(
    *,
    check: str,
    target: str,
    formats: FormatCensus | None,
    padding: FormatCensus | None = None,
) -> list[FormatItem]:
    """What the formats-and-layout findings of ``check`` on ``target`` (its configured
    device) cost a move there: the lines it emulates or cannot compile, the float8 formats
    to re-quantize, the dots it computes at a lower precision or converts, the convolutions
    it relays out and the arrays padded by a tenth or more (those of ``padding`` where given:
    the compiled program's, where the compiler laid it out)."""
    if formats is None:
        return []
    padded = padding if padding is not None else formats
    findings = [f for f in formats.findings if f.rule != "tile-padding"]
    findings += padded.by_rule("tile-padding")
    items = []
    for finding in findings:
        cost = _FORMAT_COSTS.get(finding.effect)
        if finding.rule == "convolution-relayout" or (
            finding.rule == "tile-padding" and finding.fraction >= LAYOUT_WORK_FRACTION
        ):
            cost = "layout_work"
        if cost is None:
            continue
        items.append(
            FormatItem(
                target=target,
                cost=cost,
                rule=finding.rule,
                effect=finding.effect,
                location=str(finding.location) if finding.location else None,
                formats=finding.formats if cost == "requantize" else (),
                check=check,
            )
        )
    return items


_GRAVITY: Mapping[str, int] = {"rewrite": 0, "vendor-gap": 1, "fallback": 2}
"""Which status a kernel site keeps when checks disagree: the lowest number wins."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CostModel:
    """Days per item; see the module docstring for the reasoning behind the defaults."""

    kernel_rewrite: float = 10.0
    fallback_validation: float = 3.0
    vendor_gap: float = 5.0
    tooling_assumption: float = 0.5
    fixed: float = 5.0
    format_rewrite: float = 3.0
    requantize: float = 2.0
    precision_review: float = 0.25
    layout_work: float = 0.5

    def days(self, status: Status) -> float:
        return {
            "rewrite": self.kernel_rewrite,
            "fallback": self.fallback_validation,
            "vendor-gap": self.vendor_gap,
        }[status]


FORMAT_COST_KEYS: tuple[FormatCost, ...] = (
    "format_rewrite",
    "requantize",
    "precision_review",
    "layout_work",
)
COST_KEYS = (
    "kernel_rewrite",
    "fallback_validation",
    "vendor_gap",
    "tooling_assumption",
    "fixed",
    *FORMAT_COST_KEYS,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteEstimate:
    """Engineering days to move the suite's code to one target, with the breakdown."""

    target: str
    items: tuple[RewriteItem, ...]
    tooling_assumptions: int
    days: float
    breakdown: Mapping[str, float]
    format_items: tuple[FormatItem, ...] = ()
    """The formats-and-layout items priced, each distinct site once."""

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
            **({"format_items": [i.to_dict() for i in self.format_items]}
               if self.format_items else {}),
        }  # fmt: skip


def estimate(
    target: str,
    items: Iterable[RewriteItem],
    *,
    model: CostModel,
    tooling_assumptions: int = 0,
    priced: Mapping[RewriteItem | FormatItem, float] | None = None,
    format_items: Iterable[FormatItem] = (),
) -> RewriteEstimate:
    """Days for ``target``: each kernel site priced once (``priced`` overrides the model),
    each formats-and-layout site once (:attr:`FormatItem.site`).

    A site (a kernel's name at one source line) has one status per target, the gravest
    any check gave it: a kernel that does not lower on the target in one check is a rewrite,
    even where another check's lowering falls back to generic code (the rewrite covers it).
    """
    distinct: dict[tuple[str, str | None], RewriteItem] = {}
    for item in items:
        site = (item.name, item.location)
        known = distinct.get(site)
        if known is None or _GRAVITY[item.status] < _GRAVITY[known.status]:
            distinct[site] = item
    unique = tuple(sorted(distinct.values()))
    breakdown = {"kernel_rewrite": 0.0, "fallback_validation": 0.0, "vendor_gap": 0.0}
    names = {"rewrite": "kernel_rewrite", "fallback": "fallback_validation",
             "vendor-gap": "vendor_gap"}  # fmt: skip
    for item in unique:
        cost = (priced or {}).get(item, model.days(item.status))
        breakdown[names[item.status]] += cost
    breakdown["tooling_assumption"] = tooling_assumptions * model.tooling_assumption
    breakdown["fixed"] = model.fixed  # CI runners, images, a first end-to-end validation
    sites: dict[tuple[str, ...], FormatItem] = {}
    for found in format_items:
        sites.setdefault(found.site, found)
    formats = tuple(sorted(sites.values()))
    if formats:  # the format and layout keys where there is something to price
        breakdown.update(dict.fromkeys(FORMAT_COST_KEYS, 0.0))
    for found in formats:
        breakdown[found.cost] += (priced or {}).get(found, getattr(model, found.cost))
    return RewriteEstimate(
        target=target,
        items=unique,
        tooling_assumptions=tooling_assumptions,
        days=sum(breakdown.values()),
        breakdown=breakdown,
        format_items=formats,
    )
