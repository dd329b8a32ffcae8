"""The runtime share: where a program's time goes, by layer and by library (pure).

:class:`RuntimeShare` is the fraction of time in ``xla``, ``vendor`` and ``custom`` kernels,
``measured`` (profiled where the platform ran: :func:`measured_share`) or ``estimated`` (a
roofline model from op shapes against the platform's peak numbers:
:func:`pytest_jaxport.model.roofline.estimated_share`). ``meta`` time is not part of the
denominator. :func:`combine` makes a suite's total; :func:`share_basis` and
:func:`ranking_of` say, in every format's words, what a share rests on and whether it reads
as a ranking.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pytest_jaxport.model.census import OpSite
from pytest_jaxport.model.classification import Classification

Basis = Literal["measured", "estimated"]
SHARE_LAYERS = ("xla", "vendor", "custom")


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeShare:
    """Where the time of one program (or a suite) goes, by layer and by library.

    An estimate says which census it was computed from (``estimated_from``: ``compiled`` or
    ``lowered``) and how far off such estimates were on the fidelity corpus
    (``error_points``, see :func:`pytest_jaxport.model.roofline.estimate_error`;
    ``error_measured_on``: the device that error was measured on, ``cpu`` or a GPU's name).
    A suite total says how many checks went into it (``checks``) and how many it leaves out
    (``left_out``: estimated checks kept apart from a measured total, whose own estimated
    total is ``left_out_share``).
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
