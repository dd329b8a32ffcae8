"""The suite's summary, counted from its tests (pure): totals, outcomes, per platform the
checks' counts and distinct sites, the hotspots, and the three numbers (runtime share,
kernels to rewrite, days) over a run's checks, merged legs' checks or an audit's
computations.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytest_jaxport.model.cost import (
    CostModel,
    FormatItem,
    RewriteEstimate,
    RewriteItem,
    RuntimeShare,
    combine,
    estimate,
)
from pytest_jaxport.model.counts import platform_counts
from pytest_jaxport.model.hotspots import (
    COUNTED_LAYERS,
    KERNEL_LAYERS,
    Hotspot,
    distinct_sites,
    hotspots,
    reaches_of_tests,
    site_order,
)
from pytest_jaxport.model.probe import Probe
from pytest_jaxport.model.targets import DEFAULT_HOME, NVIDIA_PLATFORM


def count_suite(tests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Suite totals: tests, checks, violations, outcomes, and per platform the checks' counts
    (:class:`~pytest_jaxport.model.counts.PlatformCounts`, at the level budgets apply)."""
    tests = list(tests)
    checks = checks_of(tests)
    outcomes: dict[str, int] = {}
    for test in tests:
        outcome = str(test.get("outcome", "passed"))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "tests": len(tests),
        "checks": len(checks),
        "failed_tests": sum(1 for t in tests if t.get("outcome") in ("failed", "error")),
        "violations": sum(len(t.get("violations", ())) for t in tests),
        "outcomes": dict(sorted(outcomes.items())),
        "platforms": {p: c.to_dict() for p, c in platform_counts(checks).items()},
    }


def checks_of(tests: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every check of ``tests``, in order."""
    return [check for test in tests for check in test.get("checks", ())]


def suite_shares(probes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per platform, the suite's runtime share: every probe weighted by its time."""
    by_platform: dict[str, list[RuntimeShare]] = {}
    for probe in probes:
        for platform, result in probe["platforms"].items():
            share = result.get("runtime_share")
            if share:
                by_platform.setdefault(platform, []).append(RuntimeShare.from_dict(share))
    shares = {}
    for platform, parts in sorted(by_platform.items()):
        total = combine(parts)
        if total is not None:
            shares[platform] = total.to_dict()
    return shares


def suite_rewrite(
    probes: Iterable[Mapping[str, Any]],
    *,
    migrate_to: Iterable[str],
    model: CostModel,
    tooling_assumptions: int = 0,
    price: Callable[[RewriteItem | FormatItem], float | None] | None = None,
    home: str = DEFAULT_HOME,
) -> dict[str, RewriteEstimate]:
    """Per target, the distinct kernels to rewrite moving off ``home`` over the suite and the
    days to do it, with the formats-and-layout work there; a target :func:`not_lowered`
    has no estimate."""
    checks, targets = list(probes), list(migrate_to)
    estimates = {}
    missing = not_lowered(checks, migrate_to=targets, home=home)
    for target in (t for t in targets if t not in missing):
        items: list[RewriteItem] = []
        formats: list[FormatItem] = []
        for check in checks:  # read only the two platforms each target compares
            wanted = {p: e for p, e in check["platforms"].items() if p in (home, target)}
            probe = Probe.from_dict({**check, "platforms": wanted})
            items += probe.rewrite_items(target, home=home) or ()
            formats += probe.format_items(target)
        priced: dict[RewriteItem | FormatItem, float] = {}
        if price is not None:
            every: list[RewriteItem | FormatItem] = [*items, *formats]
            for item in every:
                days = price(item)
                if days is not None:
                    priced[item] = days
        estimates[target] = estimate(
            target, items, model=model, tooling_assumptions=tooling_assumptions, priced=priced,
            format_items=formats,
        )  # fmt: skip
    return estimates


def not_lowered(
    probes: Iterable[Mapping[str, Any]], *, migrate_to: Iterable[str], home: str = DEFAULT_HOME
) -> dict[str, list[str]]:
    """Per target no check lowered together with ``home``, the platforms of the two that no
    check lowered (both where each was, but never in one check): what a move there
    rewrites was never counted, so it has no number (not 0).

    >>> not_lowered([{"platforms": {"cpu": {}, "cuda": {}}}], migrate_to=["rocm"])
    {'rocm': ['rocm']}
    """
    checks = [set(probe["platforms"]) for probe in probes]
    missing = {}
    for target in migrate_to:
        if any({home, target} <= lowered for lowered in checks):
            continue
        absent = [p for p in (home, target) if not any(p in lowered for lowered in checks)]
        missing[target] = absent or [home, target]
    return missing


def suite_numbers(
    probes: Iterable[Mapping[str, Any]],
    *,
    migrate_to: Iterable[str],
    model: CostModel,
    tooling: Mapping[str, Any] | None = None,
    price: Callable[[RewriteItem | FormatItem], float | None] | None = None,
    home: str = DEFAULT_HOME,
) -> dict[str, Any]:
    """The three numbers over ``probes`` (a run's checks, merged legs' checks, or an audit's
    computations) moving off ``home``: ``runtime_share``, ``kernels_to_rewrite``,
    ``rewrite_days`` and the ``rewrite`` estimates behind them, and the ``tooling`` scan
    where there is one (its assumptions are NVIDIA-bound: priced moving off cuda only)."""
    probes = list(probes)
    migrate_to = list(migrate_to) if probes else []  # nothing checked: nothing to price
    missing = not_lowered(probes, migrate_to=migrate_to, home=home)
    assumptions = len(tooling.get("assumptions") or ()) if tooling else 0
    estimates = suite_rewrite(probes, migrate_to=migrate_to, model=model, home=home,
                              tooling_assumptions=assumptions if home == NVIDIA_PLATFORM else 0,
                              price=price)  # fmt: skip
    numbers: dict[str, Any] = {
        "runtime_share": suite_shares(probes),
        "kernels_to_rewrite": {t: e.kernels_to_rewrite for t, e in estimates.items()},
        "rewrite_days": {t: e.days for t, e in estimates.items()},
        "rewrite": {t: e.to_dict() for t, e in estimates.items()},
    }
    if missing:  # a key only where a target has no count: other reports are unchanged
        numbers["not_lowered"] = missing
    if tooling is not None:
        numbers["tooling"] = dict(tooling)
    return numbers


def summarize(tests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`count_suite` plus where the lock-in lives: ``hotspots``, every distinct vendor
    or custom site (:mod:`pytest_jaxport.model.hotspots`), and per platform ``vendor_sites`` and
    ``custom_sites``, the distinct-site figures set against the per-check sums."""
    tests = list(tests)
    summary = count_suite(tests)
    found = hotspots(reaches_of_tests(tests))
    with_sites(summary["platforms"], found)
    # Stored in a fixed order (the view sorts by weight): times differ run to run.
    summary["hotspots"] = [h.to_dict() for h in sorted(found, key=site_order)]
    return summary


def with_sites(platforms: Mapping[str, dict[str, Any]], found: Iterable[Hotspot]) -> None:
    """Add each platform's ``vendor_sites`` and ``custom_sites`` (how many distinct sites
    ``found`` has there), and ``format_sites`` and ``layout_sites`` where its findings were
    judged, to its totals, the figures set against the per-probe sums."""
    sites = distinct_sites(found)
    for platform, totals in platforms.items():
        for layer, n in sites.get(platform, dict.fromkeys(COUNTED_LAYERS, 0)).items():
            if layer in KERNEL_LAYERS or "format_findings" in totals:  # where judged
                totals[f"{layer}_sites"] = n
