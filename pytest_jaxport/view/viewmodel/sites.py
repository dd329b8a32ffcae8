"""Where the lock-in lives: each distinct site, and the sites tables' rows and titles (pure).

:func:`hotspots_of` orders a report's :class:`~pytest_jaxport.model.hotspots.Hotspot` sites
heaviest first; :func:`hotspot_cells` and :func:`hotspot_title` are a sites table's row and
title in every format. A platform's memory-layout findings (thousands of tile-padding sites
on tpu for small images) are said in one line at the default verbosity
(:func:`layout_group_of`, :class:`LayoutGroup`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_jaxport.model.findings import FINDING_KINDS
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.view.formatting import number, pct, plural


def _as_shown(fraction: float | None) -> float:
    """A share at the precision :func:`pct` prints it: rows that read the same are ordered by
    what follows (dispatches, checks, place), not by a difference no reader can see and that
    moves between JAX versions."""
    value = (fraction or 0.0) * 100
    return round(value, 1) if value < 10 else float(round(value))


LAYOUT = "layout"
"""The layer of the memory-layout findings (tile padding, relayouts, misaligned matrix units)."""
LAYOUT_TOP_SITES = 3
"""Sites a layout group's one line names."""
LAYOUT_DETAIL = "-v or --jaxport-report-details=all lists them"


@dataclass(frozen=True, slots=True)
class LayoutGroup:
    """One platform's layout findings, grouped by rule and ranked by calls: what the sites
    tables say in one line at the default verbosity, where thousands of tile-padding findings
    (small images with 3 channels on tpu) would otherwise be the table."""

    platform: str
    sites: tuple[Hotspot, ...]
    """The layout sites, heaviest (most calls) first."""
    rules: tuple[tuple[str, int, int], ...]
    """``(rule, calls, sites)`` per rule, heaviest first."""
    padding: float | None = None
    """The share of the platform's bytes moved that is tile padding."""

    @property
    def findings(self) -> int:
        return sum(n for _, n, _ in self.rules)

    def summary(self, top: int = LAYOUT_TOP_SITES, *, detail: str = LAYOUT_DETAIL) -> str:
        """``tpu layout: 6,048 findings at 65 sites (tile-padding 6,000 (99% of the calls);
        matrix-unit-misaligned 48); padding 98% of bytes moved; top: a.py:12 (900 calls,
        tile-padding), b.py:3 (640, tile-padding), +63 more; -v or
        --jaxport-report-details=all lists them`` (a site's rule named where there are
        several)."""
        total = self.findings
        rules = []
        for i, (rule, calls, _) in enumerate(self.rules):
            share = (
                f" ({pct(calls / total)} of the calls)" if i == 0 and len(self.rules) > 1 else ""
            )
            rules.append(f"{rule} {number(calls)}{share}")
        text = (
            f"{self.platform} layout: {plural(total, 'finding')} at "
            f"{plural(len(self.sites), 'site')} ({'; '.join(rules)})"
        )
        if self.padding:
            text += f"; padding {pct(self.padding)} of bytes moved"
        named = [
            f"{h.location or '(no source line)'} ({number(h.dispatches)}"
            f"{' calls' if i == 0 else ''}{f', {h.name}' if len(self.rules) > 1 else ''})"
            for i, h in enumerate(self.sites[:top])
        ]
        if named:
            text += "; top: " + ", ".join(named)
            if len(self.sites) > top:
                text += f", +{number(len(self.sites) - top)} more"
        return f"{text}; {detail}" if detail else text


def layout_group_of(
    sites: Iterable[Hotspot], platform: str, padding: float | None = None
) -> LayoutGroup | None:
    """``platform``'s layout sites grouped by rule, both ranked by calls; ``None`` where it
    has none."""
    found = [h for h in sites if h.platform == platform and h.layer == LAYOUT]
    if not found:
        return None
    found.sort(key=lambda h: (-h.dispatches, -h.checks, h.location or "~", h.name))
    calls = Counter[str]()
    where = Counter[str]()
    for site in found:
        calls[site.name] += site.dispatches
        where[site.name] += 1
    rules = sorted(calls, key=lambda rule: (-calls[rule], rule))
    return LayoutGroup(
        platform=platform,
        sites=tuple(found),
        rules=tuple((rule, calls[rule], where[rule]) for rule in rules),
        padding=padding,
    )


HOTSPOT_HEADERS = ("site", "kernel", "checks", "tests", "calls", "time")
HOTSPOT_NUMERIC = (False, False, True, True, True, True)


def hotspot_headers(unit: str) -> tuple[str, ...]:
    """:data:`HOTSPOT_HEADERS`, the third column named for what the numbers count."""
    return (*HOTSPOT_HEADERS[:2], f"{unit}s", *HOTSPOT_HEADERS[3:])


Twins = frozenset[tuple[str, str | None, str, str]]
"""``(platform, location, layer, label)`` that more than one site reads as
(:func:`twin_sites`)."""


def twin_sites(sites: Iterable[Hotspot]) -> Twins:
    """The labels two distinct sites at one line share (``libtpu triangular-inverse`` for
    libtpu's ``InvertDiagBlocksLowerTriangular`` and ``...UpperTriangular``): their rows name
    what tells them apart (:func:`hotspot_cells`)."""
    names: dict[tuple[str, str | None, str, str], set[str]] = {}
    for site in sites:
        names.setdefault((site.platform, site.location, site.layer, site.what), set()).add(
            site.name
        )
    return frozenset(key for key, found in names.items() if len(found) > 1)


def hotspot_cells(site: Hotspot, twins: Twins = frozenset()) -> tuple[str, str, str, str, str, str]:
    """A site's row, the same in every format: where, what, reach, dispatches, time share;
    what with its name where another site at its line reads the same (``twins``: the view's
    :func:`twin_sites`)."""
    what = site.what
    if (site.platform, site.location, site.layer, what) in twins:
        what += f" ({site.name})"
    return (
        site.location or "(no source line)",
        what,
        number(site.checks),
        number(site.tests),
        number(site.dispatches),
        pct(site.share) if site.share is not None else "—",
    )


def hotspot_title(
    hotspots: Sequence[Hotspot], platform: str, shown: int, *, grouped: bool = False
) -> str:
    """``where the lock-in lives on cuda: 31 distinct sites (29 vendor, 2 custom, 6
    format/layout); top 5 by estimated time``: the title of ``platform``'s sites table (of
    the sites other than layout ones where those are ``grouped`` in one line), ``shown`` of
    them listed."""
    sites = [h for h in hotspots if h.platform == platform]
    listed = sum(1 for h in sites if not grouped or h.layer != LAYOUT)
    layers = {layer: sum(1 for h in sites if h.layer == layer)
              for layer in ("vendor", "custom", *FINDING_KINDS)}  # fmt: skip
    timed = next((h.basis for h in sites if h.basis), None)
    order = f"by {timed} time" if timed else "by dispatches"
    top = f"; top {shown} {order}" if shown < listed else f"; {order}"
    if grouped and not listed:
        top = ""
    findings = sum(layers[layer] for layer in FINDING_KINDS)
    found = f", {findings} format/layout" if findings else ""
    return (
        f"where the lock-in lives on {platform}: {plural(len(sites), 'distinct site')} "
        f"({layers['vendor']} vendor, {layers['custom']} custom{found}){top}"
    )


def hotspots_of(sites: Iterable[Hotspot]) -> tuple[Hotspot, ...]:
    """The report's sites, heaviest first (time share where known, then dispatches)."""
    found = list(sites)
    order = {p: i for i, p in enumerate(dict.fromkeys(s.platform for s in found))}
    found.sort(
        key=lambda h: (order[h.platform], -_as_shown(h.share), -h.dispatches, -h.checks,
                       h.location or "~", h.name)
    )  # fmt: skip
    return tuple(found)
