"""The suite's summary, counted from its typed tests (pure): totals, outcomes, per platform
the checks' counts (:class:`~pytest_jaxport.model.counts.PlatformCounts`) and distinct
sites, the hotspots, and the three numbers (runtime share, kernels to rewrite, days) over a
run's checks, merged legs' checks or an audit's computations, priced by one
:class:`Pricing`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pytest_jaxport.model.cost import CostModel, FormatItem, RewriteEstimate, RewriteItem, estimate
from pytest_jaxport.model.counts import PlatformCounts, platform_counts
from pytest_jaxport.model.hotspots import (
    COUNTED_LAYERS,
    Hotspot,
    distinct_sites,
    hotspots,
    reaches_of_checks,
    site_order,
)
from pytest_jaxport.model.platforms import DEFAULT_HOME, NVIDIA_PLATFORM
from pytest_jaxport.model.probe import Probe
from pytest_jaxport.model.runtime_share import RuntimeShare, combine
from pytest_jaxport.report.entries import TestEntry
from pytest_jaxport.report.totals import Numbers, PlatformTotals, Summary, Tooling

Price = Callable[[RewriteItem | FormatItem], float | None]
"""The days a ``pytest_jaxport_rewrite_cost`` hook gives an item (``None``: the cost model's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pricing:
    """How a suite's moves are priced: to each of ``migrate_to`` from ``home``, with the cost
    model and, in a pytest session, the user's ``pytest_jaxport_rewrite_cost`` hook."""

    migrate_to: tuple[str, ...]
    model: CostModel
    home: str = DEFAULT_HOME
    price: Price | None = None


def suite_summary(tests: Sequence[TestEntry], *, numbers: Numbers | None = None) -> Summary:
    """Suite totals: tests, checks, violations, outcomes, per platform the checks' counts (at
    the level budgets apply) with the distinct sites, and where the lock-in lives:
    ``hotspots``, every distinct vendor or custom site (:mod:`pytest_jaxport.model.hotspots`),
    stored in a fixed order (the view sorts by weight: times differ run to run)."""
    checks = [(test.nodeid, check.probe) for test in tests for check in test.checks]
    outcomes = Counter(test.outcome for test in tests)
    found = hotspots(reaches_of_checks(checks))
    return Summary(
        tests=len(tests),
        checks=len(checks),
        failed_tests=sum(1 for t in tests if t.outcome in ("failed", "error")),
        violations=sum(len(t.violations) for t in tests),
        outcomes=dict(sorted(outcomes.items())),
        platforms=platform_totals(platform_counts(probe for _, probe in checks), found),
        hotspots=tuple(sorted(found, key=site_order)),
        numbers=numbers,
    )


def platform_totals(
    counts: Mapping[str, PlatformCounts], found: Iterable[Hotspot]
) -> dict[str, PlatformTotals]:
    """Each platform's counts with how many distinct sites ``found`` has there: vendor and
    custom always, format and layout where its findings were judged (the figures set
    against the per-check sums)."""
    sites = distinct_sites(found)
    return {
        platform: PlatformTotals.of(c, sites.get(platform, dict.fromkeys(COUNTED_LAYERS, 0)))
        for platform, c in counts.items()
    }


def probes_of(tests: Iterable[TestEntry]) -> list[Probe]:
    """Every check's probe of ``tests``, in order."""
    return [check.probe for test in tests for check in test.checks]


def suite_shares(probes: Iterable[Probe]) -> dict[str, RuntimeShare]:
    """Per platform, the suite's runtime share: every probe weighted by its time."""
    by_platform: dict[str, list[RuntimeShare]] = {}
    for probe in probes:
        for platform, result in probe.platforms.items():
            if result.runtime_share is not None:
                by_platform.setdefault(platform, []).append(result.runtime_share)
    shares = {}
    for platform, parts in sorted(by_platform.items()):
        total = combine(parts)
        if total is not None:
            shares[platform] = total
    return shares


Lines = Callable[[str | None], bool]
"""Whether an item at a location (``file:line`` as reports show it; ``None``: no line) is
counted (:meth:`pytest_jaxport.model.counted_lines.CountedLines.counts`)."""


def suite_rewrite(
    probes: Iterable[Probe],
    pricing: Pricing,
    *,
    migrate_to: Sequence[str],
    tooling_assumptions: int = 0,
    lines: Lines | None = None,
) -> dict[str, RewriteEstimate]:
    """Per target of ``migrate_to``, the distinct kernels to rewrite moving off the home
    platform over the suite and the days to do it, with the formats-and-layout work there; a
    target :func:`not_lowered` has no estimate. ``lines``: only the items at the lines it
    counts (a suite audit's library apart from its tests)."""
    checks, home = list(probes), pricing.home
    estimates = {}
    missing = not_lowered(checks, migrate_to=migrate_to, home=home)
    for target in (t for t in migrate_to if t not in missing):
        items: list[RewriteItem] = []
        formats: list[FormatItem] = []
        for check in checks:  # only the two platforms each target compares
            wanted = {p: e for p, e in check.platforms.items() if p in (home, target)}
            probe = dataclasses.replace(check, platforms=wanted)
            items += probe.rewrite_items(target, home=home) or ()
            formats += probe.format_items(target)
        if lines is not None:
            items = [item for item in items if lines(item.location)]
            formats = [item for item in formats if lines(item.location)]
        priced: dict[RewriteItem | FormatItem, float] = {}
        if pricing.price is not None:
            every: list[RewriteItem | FormatItem] = [*items, *formats]
            for item in every:
                days = pricing.price(item)
                if days is not None:
                    priced[item] = days
        estimates[target] = estimate(
            target, items, model=pricing.model, tooling_assumptions=tooling_assumptions,
            priced=priced, format_items=formats,
        )  # fmt: skip
    return estimates


def not_lowered(
    probes: Iterable[Probe], *, migrate_to: Iterable[str], home: str = DEFAULT_HOME
) -> dict[str, tuple[str, ...]]:
    """Per target no check lowered together with ``home``, the platforms of the two that no
    check lowered (both where each was, but never in one check): what a move there
    rewrites was never counted, so it has no number (not 0).

    >>> from pytest_jaxport.model.probe import PlatformProbe
    >>> both = {p: PlatformProbe(platform=p, present=True) for p in ("cpu", "cuda")}
    >>> not_lowered([Probe(name="f", reference="cpu", platforms=both)], migrate_to=["rocm"])
    {'rocm': ('rocm',)}
    """
    checks = [set(probe.platforms) for probe in probes]
    missing = {}
    for target in migrate_to:
        if any({home, target} <= lowered for lowered in checks):
            continue
        absent = [p for p in (home, target) if not any(p in lowered for lowered in checks)]
        missing[target] = tuple(absent or (home, target))
    return missing


def suite_numbers(
    probes: Iterable[Probe],
    pricing: Pricing,
    *,
    tooling: Tooling | None = None,
    lines: Lines | None = None,
) -> Numbers:
    """The three numbers over ``probes`` (a run's checks, merged legs' checks, or an audit's
    computations) moving off the home platform: the runtime share, the kernels to rewrite
    and the days with the estimates behind them, and the ``tooling`` scan where there is one
    (its assumptions are NVIDIA-bound: priced moving off cuda only). ``lines``: the kernels
    and days of the items at the lines it counts only (:func:`apart_numbers` prices the
    rest); the runtime share is every line's."""
    probes = list(probes)
    migrate_to = list(pricing.migrate_to) if probes else []  # nothing checked: nothing to price
    missing = not_lowered(probes, migrate_to=migrate_to, home=pricing.home)
    assumptions = len(tooling.assumptions) if tooling is not None else 0
    estimates = suite_rewrite(
        probes, pricing, migrate_to=migrate_to,
        tooling_assumptions=assumptions if pricing.home == NVIDIA_PLATFORM else 0, lines=lines,
    )  # fmt: skip
    return Numbers(
        runtime_share=suite_shares(probes),
        kernels_to_rewrite={t: e.kernels_to_rewrite for t, e in estimates.items()},
        rewrite_days={t: e.days for t, e in estimates.items()},
        rewrite=estimates,
        tooling=tooling,
        not_lowered=missing,
    )


def apart_numbers(
    probes: Iterable[Probe], pricing: Pricing, sites: Iterable[Hotspot], lines: Lines
) -> Numbers | None:
    """The numbers of what sits at the lines ``lines`` does not count (a suite audit's tests'
    own lines), reported apart from the suite's: per target the kernels to rewrite and the
    days of their items alone (no fixed part and no tooling: those are the library's), and
    per platform the part of the suite's estimated time spent at their ``sites`` (fractions
    of the whole suite's time, by layer and library); ``None`` where no site is there."""
    apart = [site for site in sites if not lines(site.location)]
    if not apart:
        return None
    probes = list(probes)
    free = dataclasses.replace(pricing, model=dataclasses.replace(pricing.model, fixed=0.0))
    migrate_to = list(pricing.migrate_to) if probes else []
    missing = not_lowered(probes, migrate_to=migrate_to, home=pricing.home)
    estimates = suite_rewrite(
        probes, free, migrate_to=migrate_to, lines=lambda location: not lines(location)
    )
    return Numbers(
        runtime_share=_share_at(apart),
        kernels_to_rewrite={t: e.kernels_to_rewrite for t, e in estimates.items()},
        rewrite_days={t: e.days for t, e in estimates.items()},
        rewrite=estimates,
        not_lowered=missing,
    )


def _share_at(sites: Iterable[Hotspot]) -> dict[str, RuntimeShare]:
    """Per platform, the part of the suite's estimated time spent at ``sites`` (each site's
    share, a fraction of its platform's suite time), by layer and library."""
    layers: dict[str, dict[str, float]] = {}
    libraries: dict[str, dict[str, float]] = {}
    seconds: dict[str, float] = {}
    bases: dict[str, str] = {}
    for site in sites:
        if site.share is None:
            continue
        _add(layers.setdefault(site.platform, {}), site.layer, site.share)
        if site.library:
            _add(libraries.setdefault(site.platform, {}), site.library, site.share)
        _add(seconds, site.platform, site.seconds or 0.0)
        bases.setdefault(site.platform, site.basis or "estimated")
    return {
        platform: RuntimeShare(
            basis="measured" if bases[platform] == "measured" else "estimated",
            seconds=seconds[platform],
            layers={layer: found.get(layer, 0.0) for layer in ("xla", "vendor", "custom")},
            libraries=dict(libraries.get(platform, {})),
        )
        for platform, found in sorted(layers.items())
    }


def _add(sums: dict[str, float], key: str, value: float) -> None:
    sums[key] = sums.get(key, 0.0) + value
