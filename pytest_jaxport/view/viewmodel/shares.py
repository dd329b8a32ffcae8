"""The first of the three numbers: each platform's runtime share by layer (pure).

:func:`share_row` reads a :class:`~pytest_jaxport.model.runtime_share.RuntimeShare` into a
:class:`ShareRow`: its layers, its libraries largest first, how its numbers were obtained
(measured, or estimated with the estimate's error band, :func:`share_label`), and, where the
band swallows the split, why it is a ranking and not a share (:func:`ranking_text`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_jaxport.model.runtime_share import (
    RANKING,
    SHARE_LAYERS,
    RuntimeShare,
    ranking_of,
    share_basis,
    share_basis_short,
)
from pytest_jaxport.view.formatting import pct


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareRow:
    """One platform's runtime share, suite total or one check's."""

    platform: str
    basis: str
    label: str
    layers: Mapping[str, float]
    libraries: tuple[tuple[str, float], ...] = ()
    seconds: float | None = None
    short: str = ""
    """``label`` in a few words (``estimated ±37``), where a line has no room for it."""
    ranking: str = ""
    """Why this estimate is :data:`~pytest_jaxport.model.runtime_share.RANKING` (``within ±37
    points, xla's 26% could be 0%``), empty where its numbers read as amounts
    (:func:`ranking_text`)."""
    band_points: float | None = None
    """The estimate's error band, ± percentage points (``None`` for a measured share)."""
    band: tuple[tuple[float, float], ...] = ()
    """Where the boundaries between its layers may lie: each boundary ± the estimate's error
    band, as ``(from, to)`` fractions of the bar, overlapping ones joined; none for a
    measured share (:func:`band_spans`)."""


def share_label(share: RuntimeShare) -> str:
    """How a runtime share's numbers were obtained, as every format labels them: measured
    (over how many checks, and what was left out) or estimated (from which program, with
    the estimate's measured error band): :func:`pytest_jaxport.model.runtime_share.share_basis`."""
    return share_basis(share.to_dict())


def ranking_text(share: RuntimeShare) -> str:
    """``a ranking, not a share: within ±37 points, xla's 26% could be 0%``, the words every
    format says of an estimate :func:`pytest_jaxport.model.runtime_share.ranking_of` finds its band
    swallows; ``""`` where its numbers read as amounts."""
    ranking = ranking_of(share.to_dict())
    if ranking is None:
        return ""
    return (
        f"{RANKING}: within ±{ranking.band:.0f} points, {ranking.layer}'s "
        f"{pct(ranking.fraction)} could be 0%"
    )


def band_spans(layers: Mapping[str, float], band: float | None) -> tuple[tuple[float, float], ...]:
    """Where the boundaries between a share's layers may lie, as fractions of its bar: each
    boundary (between two layers with time, in :data:`SHARE_LAYERS` order) ± ``band``
    (percentage points), cut to the bar, overlapping spans joined.

    >>> band_spans({"xla": 0.7, "vendor": 0.3, "custom": 0.0}, 37)
    ((0.33, 1.0),)
    """
    total = sum(v for v in layers.values() if v > 0)
    if band is None or band <= 0 or total <= 0:
        return ()
    shown = [layers[layer] / total for layer in SHARE_LAYERS if layers[layer] > 0]
    boundaries = [sum(shown[: i + 1]) for i in range(len(shown) - 1)]
    spans: list[tuple[float, float]] = []
    for at in boundaries:
        low, high = max(0.0, at - band / 100), min(1.0, at + band / 100)
        if spans and low <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], high))
        else:
            spans.append((low, high))
    return tuple((round(a, 6), round(b, 6)) for a, b in spans)


def share_row(platform: str, share: RuntimeShare) -> ShareRow:
    said = share.to_dict()  # the words are model.runtime_share's, over a share's JSON form
    layers = {layer: max(0.0, share.layers.get(layer, 0.0)) for layer in SHARE_LAYERS}
    measured = share.basis == "measured"
    return ShareRow(
        platform=platform,
        basis="measured" if measured else "estimated",
        label=share_basis(said),
        short=share_basis_short(said),
        ranking=ranking_text(share),
        band_points=None if measured else share.error_points,
        band=() if measured else band_spans(layers, share.error_points),
        layers=layers,
        libraries=tuple(sorted(share.libraries.items(), key=lambda lib: (-lib[1], lib[0]))),
        seconds=share.seconds,
    )


def shares_of(shares: Mapping[str, RuntimeShare]) -> tuple[ShareRow, ...]:
    return tuple(share_row(p, s) for p, s in shares.items())
