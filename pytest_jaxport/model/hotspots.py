"""Where the lock-in lives: NVIDIA-bound dispatch sites aggregated over a whole suite (pure).

A per-test list repeats the same kernel once for every test that reaches it: a matmul at
``model.py:24`` checked by 40 tests reads as 40 findings. :func:`hotspots` counts each
*site* (platform, source line, kernel) once, with how many checks and tests reach it, how many
dispatches those checks make there in total (the per-check sum), and its share of the suite's
time on that platform, like coverage's per-file table.

The input is a stream of :class:`Reach` values: one census (with source locations) that one
source reached in one test. ``jaxport.check`` calls feed it through :func:`reaches_of_checks`;
any other source of censuses (an audit of a suite's jitted computations, say) builds
``Reach`` values itself and gets the same table.

Time per site is apportioned: a check's time in a library (or in hand-written kernels) is
split among that check's dispatches of that library (or layer) by count. Per platform, the
sites' shares of one layer add up to the suite's runtime share of that layer.

Example::

    >>> from pytest_jaxport.model.census import Census, Kernel, SourceLocation
    >>> dot = Kernel(layer="vendor", name="stablehlo.dot_general", kind="gemm",
    ...              library="cublas", location=SourceLocation(file="m.py", line=3), count=2)
    >>> census = Census(platform="cuda", kernels=(dot,))
    >>> [site] = hotspots([Reach(test="t1", source=("t1", "mlp"), census=census),
    ...                    Reach(test="t2", source=("t2", "mlp"), census=census)])
    >>> (site.location, site.checks, site.tests, site.dispatches)
    ('m.py:3', 2, 2, 4)

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from pytest_jaxport.model.census import Census, Kernel, kernel_label
from pytest_jaxport.model.findings import FINDING_KINDS, Finding, counted_findings
from pytest_jaxport.model.jsontypes import JsonObject
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.model.runtime_share import RuntimeShare

KERNEL_LAYERS = ("vendor", "custom")
"""Layers whose dispatches are sites: NVIDIA-bound (``xla`` is regenerated, ``meta`` free)."""
COUNTED_LAYERS = (*KERNEL_LAYERS, *FINDING_KINDS)
"""Every layer with sites: those dispatches, and the formats-and-layout findings (``format``,
``layout``: one site per platform, line and rule; no time of their own)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reach:
    """One census that one source reached in one test.

    ``source`` identifies what produced the census across the whole suite (a check:
    ``(nodeid, check name)``; an audited computation: its key); distinct sources are what
    the ``checks`` column counts. A source reached from several tests (a computation 40
    tests ran) is one reach per test: its dispatches and time count once, its tests each.
    """

    test: str | None
    """``None``: reached outside any test (a computation run while importing a module)."""
    source: Hashable
    census: Census
    share: RuntimeShare | None = None
    """The source's runtime share on this platform, if known: the time column."""
    findings: tuple[Finding, ...] = ()
    """The source's formats-and-layout findings on this platform (lowered and compiled)."""

    @property
    def platform(self) -> str:
        return self.census.platform


@dataclass(frozen=True, slots=True, kw_only=True)
class Hotspot:
    """One distinct dispatch site of one platform, summed over everything that reaches it."""

    platform: str
    location: str | None
    layer: str
    name: str
    kind: str
    library: str | None = None
    checks: int = 0
    """Distinct sources (checks) reaching the site."""
    tests: int = 0
    dispatches: int = 0
    """Call-weighted dispatches at the site, summed over the sources: the per-check sum."""
    seconds: float | None = None
    """Apportioned time per call of every reaching source, summed; ``None`` when unknown."""
    share: float | None = None
    """``seconds`` over the platform's suite time (the runtime share's denominator)."""
    basis: str | None = None
    """``measured`` when every contributing share was measured, else ``estimated``."""

    @property
    def what(self) -> str:
        """``cublas gemm`` or ``lapack getrf`` for a vendor dispatch, ``my_kernel (ffi)`` for a
        custom one (:func:`~pytest_jaxport.model.census.kernel_label`), ``float64-emulated
        (emulated)`` for a formats-and-layout finding."""
        return kernel_label(layer=self.layer, name=self.name, kind=self.kind, library=self.library)

    def to_dict(self) -> JsonObject:
        return {
            "platform": self.platform,
            "location": self.location,
            "layer": self.layer,
            "name": self.name,
            "kind": self.kind,
            "library": self.library,
            "checks": self.checks,
            "tests": self.tests,
            "dispatches": self.dispatches,
            "seconds": self.seconds,
            "share": self.share,
            "basis": self.basis,
        }

    def to_audit_dict(self) -> JsonObject:
        """The audit section's site: its calls as ``count``, its checks as ``computations``."""
        return {
            "location": self.location,
            "platform": self.platform,
            "layer": self.layer,
            "name": self.name,
            "kind": self.kind,
            "library": self.library,
            "count": self.dispatches,
            "computations": self.checks,
            "tests": self.tests,
            "seconds": self.seconds,
            "share": self.share,
            "basis": self.basis,
        }


_SiteKey = tuple[str, str | None, str, str, str, str | None]


@dataclass(slots=True)
class _Tally:
    sources: set[Hashable] = field(default_factory=set)
    tests: set[str] = field(default_factory=set)
    dispatches: int = 0
    seconds: float = 0.0
    timed: bool = False
    measured: bool = True


def _site(kernel: Kernel, platform: str) -> _SiteKey:
    location = str(kernel.location) if kernel.location else None
    return (platform, location, kernel.layer, kernel.name, kernel.kind, kernel.library)


def _finding_site(finding: Finding, platform: str) -> _SiteKey:
    location = str(finding.location) if finding.location else None
    return (platform, location, finding.kind, finding.rule, finding.effect, None)


def _apportioned(census: Census, share: RuntimeShare) -> dict[_SiteKey, float]:
    """Each site's part of one source's time: its library's (or layer's) time split by count."""
    pools: dict[tuple[str, str | None], list[Kernel]] = {}
    for kernel in census.kernels:
        if kernel.layer in KERNEL_LAYERS:
            library = kernel.library if kernel.layer == "vendor" else None
            pools.setdefault((kernel.layer, library), []).append(kernel)
    vendor_named = sum(share.libraries.values())
    times: dict[_SiteKey, float] = {}
    for (layer, library), kernels in pools.items():
        if layer == "vendor" and library is not None:
            fraction = share.libraries.get(library, 0.0)
        elif layer == "vendor":  # vendor time not attributed to a named library
            fraction = max(0.0, share.layers.get("vendor", 0.0) - vendor_named)
        else:
            fraction = share.layers.get(layer, 0.0)
        total = sum(k.count for k in kernels)
        for kernel in kernels:
            key = _site(kernel, census.platform)
            times[key] = times.get(key, 0.0) + share.seconds * fraction * kernel.count / total
    return times


def hotspots(reaches: Iterable[Reach]) -> tuple[Hotspot, ...]:
    """Every distinct vendor or custom site, heaviest first.

    Sorted per platform (in order of first appearance) by time share where known, then by
    dispatches, checks and location.
    """
    tallies: dict[_SiteKey, _Tally] = {}
    suite_seconds: dict[str, float] = {}
    platforms: dict[str, None] = {}
    counted: set[tuple[str, Hashable]] = set()
    for reach in reaches:
        census = reach.census
        platforms.setdefault(census.platform, None)
        again = (census.platform, reach.source) in counted
        counted.add((census.platform, reach.source))
        if again:  # the same source from another test: one more test, nothing more to count
            if reach.test is not None:
                for key in _reach_sites(reach):
                    tallies[key].tests.add(reach.test)
            continue
        share = reach.share if reach.share is not None and reach.share.seconds > 0 else None
        times = _apportioned(census, share) if share is not None else {}
        if share is not None:
            suite_seconds[census.platform] = suite_seconds.get(census.platform, 0.0) + share.seconds
        for kernel in census.kernels:
            if kernel.layer not in KERNEL_LAYERS:
                continue
            key = _site(kernel, census.platform)
            tally = tallies.setdefault(key, _Tally())
            tally.sources.add(reach.source)
            if reach.test is not None:
                tally.tests.add(reach.test)
            tally.dispatches += kernel.count
            if share is not None:
                tally.seconds += times.get(key, 0.0)
                tally.timed = True
                tally.measured = tally.measured and share.basis == "measured"
        for finding in reach.findings:  # no time of their own: the time column says "—"
            tally = tallies.setdefault(_finding_site(finding, census.platform), _Tally())
            tally.sources.add(reach.source)
            if reach.test is not None:
                tally.tests.add(reach.test)
            tally.dispatches += finding.count
    found = []
    for key, tally in tallies.items():
        platform, location, layer, name, kind, library = key
        total = suite_seconds.get(platform, 0.0)
        found.append(
            Hotspot(
                platform=platform,
                location=location,
                layer=layer,
                name=name,
                kind=kind,
                library=library,
                checks=len(tally.sources),
                tests=len(tally.tests),
                dispatches=tally.dispatches,
                seconds=tally.seconds if tally.timed else None,
                share=tally.seconds / total if tally.timed and total > 0 else None,
                basis=("measured" if tally.measured else "estimated") if tally.timed else None,
            )
        )
    order = {p: i for i, p in enumerate(platforms)}
    found.sort(
        key=lambda h: (
            order[h.platform],
            -(h.share or 0.0),
            -h.dispatches,
            -h.checks,
            h.location or "~",
            h.name,
        )
    )
    return tuple(found)


def _reach_sites(reach: Reach) -> Iterator[_SiteKey]:
    platform = reach.census.platform
    for kernel in reach.census.kernels:
        if kernel.layer in KERNEL_LAYERS:
            yield _site(kernel, platform)
    for finding in reach.findings:
        yield _finding_site(finding, platform)


def findings_of(entry: PlatformProbe) -> tuple[Finding, ...]:
    """A platform entry's formats-and-layout findings, lowered then compiled
    (:func:`~pytest_jaxport.model.findings.counted_findings`)."""
    return counted_findings(entry.formats, entry.compiled_formats)


def site_order(site: Hotspot) -> tuple[str, str, str, str, str]:
    """A fixed order of sites (platform, location, layer, name, library), independent of time."""
    return (site.platform, site.location or "", site.layer, site.name, site.library or "")


def reach_of(test: str | None, source: Hashable, entry: PlatformProbe) -> Reach | None:
    """What ``source`` reached on ``entry``'s platform in ``test``, at the level the suite's
    counts read (:attr:`PlatformProbe.counted`: compiled where a compile was asked, else
    lowered): where the compile gave no program, no kernel and no time (its lowered census
    is another level's), only its formats-and-layout findings; ``None`` where it did not
    lower."""
    if entry.census is None:
        return None
    counted = entry.counted
    return Reach(
        test=test,
        source=source,
        census=counted if counted is not None else Census(platform=entry.platform),
        share=entry.runtime_share if counted is not None else None,
        findings=findings_of(entry),
    )


def reaches_of_checks(checks: Iterable[tuple[str, Probe]]) -> Iterator[Reach]:
    """One :class:`Reach` per check and platform of a suite's ``(node id, check)`` pairs
    (:func:`reach_of`); platforms that did not lower reach nothing."""
    for nodeid, check in checks:
        for entry in check.platforms.values():
            reach = reach_of(nodeid, (nodeid, check.name), entry)
            if reach is not None:
                yield reach


def distinct_sites(found: Iterable[Hotspot]) -> dict[str, dict[str, int]]:
    """Per platform, how many distinct sites each counted layer has: ``{"cuda": {"vendor":
    12, "custom": 1, "format": 6, "layout": 1}}`` (the figure to set against the per-check
    sum of dispatches, or of findings)."""
    sites: dict[str, dict[str, int]] = {}
    for site in found:
        per_layer = sites.setdefault(site.platform, dict.fromkeys(COUNTED_LAYERS, 0))
        per_layer[site.layer] += 1
    return sites
