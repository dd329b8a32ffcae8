"""The runtime-share estimate: a roofline of each dispatch against the platform's rates (pure).

A kernel costs a fixed launch (plus a library call's overhead outside XLA's own kernels) and
the slower of its arithmetic and its memory traffic, at the platform's peak rates
(:class:`Peak`: each platform's description, cpu's fitted). Solvers and FFTs run at the
fractions of peak :class:`Calibration` holds, fitted on the fidelity corpus and shipped as
``pytest_jaxport/calibration.json``. Every estimate carries the error band measured for its
platform and census level (:class:`EstimateError`, shipped as
``pytest_jaxport/estimate_error.json``). What one op computes and moves is
:mod:`pytest_jaxport.model.flops`'s.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pytest_jaxport.model.census import Census, OpSite
from pytest_jaxport.model.flops import FREE_OPS, is_solver
from pytest_jaxport.model.platforms import DESCRIPTIONS, GPU_LAUNCH
from pytest_jaxport.model.runtime_share import RuntimeShare, share_of


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
        source=f"{source}; {GPU_LAUNCH}",
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
GPU (``benchmarks/validation/gpu.py``)."""

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
