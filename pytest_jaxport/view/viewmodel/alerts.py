"""The findings where reviewers look: a report's findings as alerts at source lines (pure).

:func:`alerts_of` reads a typed :class:`~pytest_jaxport.report.document.Report` once into
:class:`Alert` values, each one finding at one line: a vendor-library or custom-kernel site, a
numeric-format or memory-layout site, a check that does not lower, a budget violation, a
numerics difference, a tooling assumption; the suite audit's sites and findings, and a merged
report's drifts, too. The view holds them (:attr:`ReportView.alerts
<pytest_jaxport.view.viewmodel.reportview.ReportView.alerts>`), and three formats lay them out:
:mod:`pytest_jaxport.view.sarif` as a SARIF log with one rule per kind of finding,
:mod:`pytest_jaxport.view.annotations` as GitHub Actions workflow commands,
:mod:`pytest_jaxport.view.codequality` as a GitLab Code Quality report.

An alert's level says what it does to the run: ``error`` for what fails a test or the
audit's gate, ``warning`` for findings that fail nothing but need a decision (a kernel to
rewrite, a check that does not lower, outputs that differ), ``note`` for the rest (vendor
calls with a counterpart elsewhere, format and layout findings, tooling assumptions).

Locations are the report's, relative to pytest's rootdir: a site in an installed package or
outside the rootdir has no line in the repository, and :meth:`Alerts.in_repository` leaves it
out (:meth:`Alerts.left_out` counts them); a finding with no line of its own is placed at its
test's file (a budget of the suite's: the configuration file).

An alert's fingerprint identifies it without its line number: its rule, platform, file, what
it is, and its rank among the alerts of the same identity in that file, so code scanning
keeps tracking it when lines above it move, and closes it when the site goes.

Example::

    >>> from pytest_jaxport.report.document import Config, Environment, Report, Summary
    >>> from pytest_jaxport.model.hotspots import Hotspot
    >>> site = Hotspot(platform="cuda", location="src/m.py:24", layer="vendor",
    ...                name="stablehlo.convolution", kind="convolution", library="cudnn",
    ...                checks=1, tests=1, dispatches=2)
    >>> report = Report(tool_version="1.0", environment=Environment(),
    ...     config=Config(platforms=("cpu", "cuda"), reference="cpu"),
    ...     summary=Summary(tests=1, checks=1, failed_tests=0, violations=0, outcomes={},
    ...                     platforms={}, hotspots=(site,)), tests=())
    >>> [alert] = alerts_of(report).in_repository()
    >>> (alert.rule, alert.level, alert.file, alert.line)
    ('vendor-library', 'note', 'src/m.py', 24)
    >>> alert.message
    'cuda: cudnn stablehlo.convolution, 2 dispatches in 1 check (1 test)'

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pytest_jaxport.model.budget import MAY_DIFFER_KEY, NUMERICS_KEYS, Violation
from pytest_jaxport.model.emulation import emulated_label, may_differ_lines
from pytest_jaxport.model.failure import failure_line
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.memory import DeviceMemory
from pytest_jaxport.model.probe import MAY_DIFFER, PlatformProbe, emulated_status
from pytest_jaxport.report.audit_section import COMPILE_FINDING
from pytest_jaxport.report.document import Report
from pytest_jaxport.report.entries import Drift, TestEntry
from pytest_jaxport.view.viewmodel.memory import check_line, compiler_words, memory_cell
from pytest_jaxport.view.viewmodel.problems import MEMORY_KEYS, emulated_sites, platform_entry

AlertLevel = Literal["error", "warning", "note"]
ALERT_LEVELS: tuple[AlertLevel, ...] = ("error", "warning", "note")
"""Every level, the most urgent first (the order alerts are listed in)."""

_LOWER_KEYS = ("must_lower", "must_trace")
_SITE_RULES: Mapping[str, tuple[str, AlertLevel]] = {
    "vendor": ("vendor-library", "note"),
    "custom": ("custom-kernel", "warning"),
    "format": ("numeric-format", "note"),
    "layout": ("memory-layout", "note"),
}
"""A site's rule by its layer, with its level: a custom kernel is a rewrite to decide on, the
rest fail nothing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    """One finding at one line of the repository."""

    rule: str
    """The kind of finding (:data:`pytest_jaxport.view.sarif.RULE_IDS`)."""
    level: AlertLevel
    file: str
    """Relative to the repository's root, ``/``-separated."""
    line: int
    message: str
    title: str
    """A short title (an annotation's)."""
    identity: str
    """What the alert is, without its line: the fingerprint's text before its rank."""
    rank: int = 0
    """Its place among the alerts of the same identity in :attr:`file`, in line order."""

    @property
    def fingerprint(self) -> str:
        """Stable across runs, serial or under pytest-xdist, and across lines moving above."""
        text = f"{self.identity}#{self.rank}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True, kw_only=True)
class Alerts:
    """A report's findings at source lines, every one in the order found, whether its line is
    the repository's or not."""

    found: tuple[Alert, ...] = ()

    def in_repository(self, *, outside: Callable[[str], bool] | None = None) -> tuple[Alert, ...]:
        """The findings at a line of the repository, in a fixed order (level, file, line,
        rule, message), each with its fingerprint's rank.

        ``outside`` tells a file that is not the repository's though it looks relative (a
        site in an installed package shows relative to its ``site-packages``): such alerts,
        and those at absolute paths, are left out (:meth:`left_out` counts them).
        """
        return _ranked(a for a in self.found if _kept(a.file, outside))

    def left_out(self, *, outside: Callable[[str], bool] | None = None) -> int:
        """How many findings :meth:`in_repository` leaves out: their line is not in the
        repository."""
        return sum(1 for a in self.found if not _kept(a.file, outside))


def alerts_of(report: Report) -> Alerts:
    """Every finding of ``report`` at a source line: each test's, the sites', the suite
    audit's and the tooling assumptions'."""
    return Alerts(found=tuple(_all_alerts(report)))


def counts_by_level(found: Iterable[Alert]) -> Mapping[str, int]:
    """How many alerts of each level (``{"error": 1, "warning": 3, "note": 80}``)."""
    counts: dict[str, int] = dict.fromkeys(ALERT_LEVELS, 0)
    for alert in found:
        counts[alert.level] += 1
    return counts


_DRIVE = re.compile(r"[A-Za-z]:[\\/]")


def split_location(location: str | None) -> tuple[str, int] | None:
    """``("src/m.py", 24)`` for ``src/m.py:24``; ``None`` without a line.

    >>> split_location("src/m.py:24"), split_location("m.py"), split_location(None)
    (('src/m.py', 24), None, None)
    """
    if not location:
        return None
    file, _, line = location.rpartition(":")
    if not file or not line.isdigit():
        return None
    return file.replace("\\", "/"), max(1, int(line))


_SAID_AT = re.compile(r"\(at ([^()\s]+:\d+)\)\s*$")
"""A compile error's own line, as the compiled level ends it: ``... (at model.py:35)``."""


def said_at(error: str | None) -> tuple[str, int] | None:
    """The repository's line a compile error ends by naming, or ``None``.

    >>> said_at("UNIMPLEMENTED: Only F32 and C64 types ... (at src/model.py:35)")
    ('src/model.py', 35)
    >>> said_at("the libtpu worker died while compiling (SIGABRT)") is None
    True
    """
    found = _SAID_AT.search(error or "")
    where = split_location(found.group(1)) if found else None
    return where if where is not None and in_repository(where[0]) else None


def _not_compiled(entry: PlatformProbe) -> bool:
    """Whether a compile was asked of ``entry`` (it lowered) and gave no program."""
    return bool(entry.compile_error) and entry.lowered and entry.compiled is None


def in_repository(file: str) -> bool:
    """Whether ``file`` (as a report shows it) can be a path in the repository: relative, not
    above the root (a site-packages file shows relative to its ``site-packages``: the
    reporter knows those apart, :meth:`Alerts.in_repository`'s ``outside``).

    >>> in_repository("src/m.py"), in_repository("/opt/x.py"), in_repository("../x.py")
    (True, False, False)
    """
    return not (file.startswith("/") or _DRIVE.match(file) or ".." in file.split("/"))


def _kept(file: str, outside: Callable[[str], bool] | None) -> bool:
    return in_repository(file) and not (outside is not None and outside(file))


def _ranked(found: Iterable[Alert]) -> tuple[Alert, ...]:
    ordered = sorted(
        found, key=lambda a: (ALERT_LEVELS.index(a.level), a.file, a.line, a.rule, a.message)
    )
    by_place = sorted(ordered, key=lambda a: (a.identity, a.line, a.message))
    ranks: dict[int, int] = {}
    seen: Counter[str] = Counter()
    for alert in by_place:
        ranks[id(alert)] = seen[alert.identity]
        seen[alert.identity] += 1
    return tuple(replace(a, rank=ranks[id(a)]) for a in ordered)


def _all_alerts(report: Report) -> Iterator[Alert]:
    for test in report.tests:
        yield from _test_alerts(test)
    for site in report.summary.hotspots:
        alert = _site_alert(site, audit=False)
        if alert is not None:
            yield alert
    yield from _audit_alerts(report)
    yield from _tooling_alerts(report)


def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _count(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _site_alert(site: Hotspot, *, audit: bool) -> Alert | None:
    rule, level = _SITE_RULES.get(site.layer, (None, None))
    where = split_location(site.location)
    if rule is None or level is None or where is None:
        return None
    file, line = where
    reached = (
        f"{_count(site.checks, 'computation')} of the audited suite"
        if audit
        else f"{_count(site.checks, 'check')} ({_count(site.tests, 'test')})"
    )
    if site.layer == "vendor":
        what = f"{site.library or 'vendor'} {site.name}"
        counted = _count(site.dispatches, "dispatch", "dispatches")
    elif site.layer == "custom":
        what = f"hand-written kernel {site.name} ({site.kind})"
        counted = _count(site.dispatches, "dispatch", "dispatches")
    else:
        what = f"{site.name} ({site.kind})"
        counted = _count(site.dispatches, "finding")
    return Alert(
        rule=rule,
        level=level,
        file=file,
        line=line,
        message=f"{site.platform}: {what}, {counted} in {reached}",
        title=f"{site.platform}: {site.what}",
        identity="|".join(
            (rule, site.platform, file, site.name, site.library or site.kind, "audit" * audit)
        ),
    )


def _violation_place(
    violation: Violation, fallback: str, lines: Sequence[str] = ()
) -> tuple[str, int]:
    for line in lines:
        where = split_location(line)
        if where is not None and in_repository(where[0]):
            return where
    for kernel in violation.kernels:
        if kernel.location is not None:
            where = split_location(str(kernel.location))
            if where is not None:
                return where
    for finding in violation.findings:
        if finding.location is not None:
            where = split_location(str(finding.location))
            if where is not None:
                return where
    return _failure_place(violation.details) or (fallback, 1)


def _failure_place(texts: Iterable[str | None]) -> tuple[str, int] | None:
    """The repository line a failure concerns where its text names one (a compiler's refusal
    ``... (at model.py:35)``: :func:`~pytest_jaxport.model.failure.failure_line`)."""
    for text in texts:
        where = split_location(failure_line(text)) if text else None
        if where is not None and in_repository(where[0]):
            return where
    return None


def _violation_alert(
    violation: Violation,
    *,
    fallback: str,
    subject: str,
    leg: str | None,
    lines: Sequence[str] = (),
    refused: bool = False,
) -> Alert:
    """A violation at the line it comes from; ``refused``: the compile it fails to lower for
    was refused for memory (a ``must_lower`` violation: it does not fit)."""
    title = f"{violation.where()}: {violation.key} ({violation.found_text()})"
    if violation.key in NUMERICS_KEYS:  # numerics, not a budget key: what differs, by how much
        rule, title = "numerics-difference", f"{violation.where()}: {violation.found_text()}"
    elif violation.key == MAY_DIFFER_KEY:  # numerics too: what may differ, by how much
        rule, title = "numerics-may-differ", f"{violation.where()}: {violation.found_text()}"
    elif violation.key in _LOWER_KEYS and refused:
        rule = "does-not-fit"
    elif violation.key in _LOWER_KEYS:
        rule = "does-not-lower"
    else:
        rule = "budget-violation"
    file, line = _violation_place(violation, fallback, lines)
    on_leg = f" [leg {leg}]" if leg else ""
    return Alert(
        rule=rule,
        level="error",
        file=file,
        line=line,
        message=f"{violation.headline()}; {subject}{on_leg}",
        title=title,
        identity="|".join(
            (rule, violation.platform, file, violation.key, violation.check, subject)
        ),
    )


def _check_place(memory: DeviceMemory | None) -> tuple[str, int] | None:
    """Where the check that does not fit was called (its refusal names the line), where that
    line is the repository's."""
    line = check_line(memory) if memory is not None else None
    where = split_location(line)
    return where if where is not None and in_repository(where[0]) else None


def _may_differ_site(entry: PlatformProbe) -> tuple[str, int] | None:
    """Where an emulation's widest bounded op is (the line a may-differ finding points at)."""
    emulation = entry.emulated
    if emulation is None or emulated_status(entry) != MAY_DIFFER:
        return None
    for site in emulation.bounded:
        where = split_location(site.location) if site.location else None
        if where is not None:
            return where
    return None


def _test_alerts(test: TestEntry) -> Iterator[Alert]:
    """A test's findings: its violations, at the lines they come from; per check and platform
    what no violation covers (:func:`_check_alerts`); a merged report's drifts."""
    covered = {(v.check, v.platform, v.key) for v in test.violations}
    for i, violation in enumerate(test.violations):
        leg = test.violation_legs[i] if i < len(test.violation_legs) else None
        yield _test_violation_alert(test, violation, leg)
    for check in test.checks:
        for platform, entry in check.probe.platforms.items():
            yield from _check_alerts(test, check.name, platform, entry, covered)
    for drift in test.drifts:
        yield _drift_alert(test.nodeid, drift)


def _test_violation_alert(test: TestEntry, violation: Violation, leg: str | None) -> Alert:
    """A test's violation: one that may differ on the chip at its emulation's widest bounded
    op; an emulated mismatch where its emulation computed differently; else at its kernels'
    or findings' line, or the test's file."""
    file = _test_file(test.nodeid)
    entry = platform_entry(test, violation.check, violation.platform)
    site = _may_differ_site(entry) if entry is not None else None
    if violation.key == MAY_DIFFER_KEY and site is not None:
        bare = replace(violation, kernels=(), findings=())
        alert = _violation_alert(bare, fallback=file, subject=test.nodeid, leg=leg)
        return replace(alert, file=site[0], line=site[1])
    memory = entry.memory if entry is not None else None
    refused = memory is not None and memory.fits is False
    lines = emulated_sites(test, violation)
    said = check_line(memory) if memory is not None else None
    if refused and said is not None and violation.key in (*_LOWER_KEYS, "max_device_memory"):
        lines = (said,)  # the check's line, which its refusal names
    return _violation_alert(violation, fallback=file, subject=test.nodeid, leg=leg,
                            lines=lines, refused=refused)  # fmt: skip


def _check_alerts(
    test: TestEntry,
    name: str,
    platform: str,
    entry: PlatformProbe,
    covered: set[tuple[str, str, str]],
) -> Iterator[Alert]:
    """What check ``name`` found on ``platform`` that fails nothing and that no violation of
    the test (``covered``) says: outputs that may differ on the chip (emulated), a failure
    to lower outside ``must_lower``, outputs that differ from the reference's."""
    file = _test_file(test.nodeid)
    of = f"check {name!r} of {test.nodeid}"
    identity = (platform, file, name, test.nodeid)
    emulation = entry.emulated
    said = (name, platform, MAY_DIFFER_KEY) in covered
    if emulation is not None and emulated_status(entry) == MAY_DIFFER and not said:
        head = may_differ_lines(emulation, entry.emulated_bounds)[0]
        at_file, at_line = _may_differ_site(entry) or (file, 1)
        yield Alert(rule="numerics-may-differ", level="warning", file=at_file, line=at_line,
                    message=f"{emulated_label(platform)}: {of}: {head}",
                    title=f"{platform}: {name} may differ (emulated)",
                    identity="|".join(("numerics-may-differ", *identity)))  # fmt: skip
    if entry.error is not None and (name, platform, "must_lower") not in covered:
        at_file, at_line = _failure_place([entry.error]) or (file, 1)
        yield Alert(rule="does-not-lower", level="warning", file=at_file, line=at_line,
                    message=f"{platform}: {of} does not lower (not in must_lower: a finding, "
                    f"not a failure): {_first_line(entry.error.split(': ', 1)[-1])}",
                    title=f"{platform}: {name} does not lower",
                    identity="|".join(("does-not-lower", *identity)))  # fmt: skip
    memory = entry.memory
    said = any((name, platform, key) in covered for key in MEMORY_KEYS)
    if memory is not None and memory.fits is False and not said:
        refused = memory.out_of_memory
        words = compiler_words(refused.said) if refused is not None else ""
        words = f"; the compiler: {words}" if words else ""
        at_file, at_line = _check_place(memory) or (file, 1)
        yield Alert(rule="does-not-fit", level="warning", file=at_file, line=at_line,
                    message=f"{of}: {memory_cell(memory).headline} (not in must_lower: a "
                    f"finding, not a failure){words}",
                    title=f"{platform}: {name} does not fit",
                    identity="|".join(("does-not-fit", *identity)))  # fmt: skip
    if (
        _not_compiled(entry)
        and (name, platform, "must_lower") not in covered
        and not (memory is not None and memory.fits is False)  # said as does-not-fit
    ):
        at_file, at_line = said_at(entry.compile_error) or (file, 1)
        yield Alert(rule="does-not-compile", level="warning", file=at_file, line=at_line,
                    message=f"{platform}: {of} does not compile (a finding, not a failure): "
                    f"{_first_line(entry.compile_error or '')}",
                    title=f"{platform}: {name} does not compile",
                    identity="|".join(("does-not-compile", *identity)))  # fmt: skip
    numerics = entry.numerics
    if (
        numerics is not None
        and not numerics.ok
        and not any((name, platform, key) in covered for key in NUMERICS_KEYS)
    ):
        leaves = _count(len(numerics.mismatches), "leaf", "leaves")
        yield Alert(rule="numerics-difference", level="warning", file=file, line=1,
                    message=f"{platform}: {of}: {leaves} of {numerics.leaves} differ from "
                    f"{numerics.reference}",
                    title=f"{platform}: {name} outputs differ",
                    identity="|".join(("numerics-difference", *identity)))  # fmt: skip


def _drift_alert(nodeid: str, drift: Drift) -> Alert:
    """A merged report's drift: a check's outputs on one leg differ from the reference's."""
    file = _test_file(nodeid)
    return Alert(
        rule="numerics-difference",
        level="error",
        file=file,
        line=1,
        message=f"{drift.platform} (leg {drift.leg}): check {drift.check!r} of "
        f"{nodeid} differs from {drift.reference} (leg {drift.reference_leg}): "
        + (_first_line(drift.messages[0]) if drift.messages else "outputs differ"),
        title=f"{drift.platform}: {drift.check} outputs drift across legs",
        identity="|".join(
            ("numerics-difference", drift.platform, file, drift.check, nodeid, "drift")
        ),
    )


def _audit_alerts(report: Report) -> Iterator[Alert]:
    audit = report.audit
    if audit is None:
        return
    config = report.config.source if report.config.source else "pyproject.toml"
    for site in audit.sites:
        alert = _site_alert(site, audit=True)
        if alert is not None:
            yield alert
    sources = {c.id: c.source for c in audit.computations}
    for finding in audit.findings:
        where = split_location(sources.get(finding.computation)) or (config, 1)
        rule, does = "does-not-lower", "does not lower"
        if finding.kind == COMPILE_FINDING:  # the line the compiler's words name first
            rule, does = "does-not-compile", "does not compile"
            where = said_at(finding.reason) or where
        yield Alert(
            rule=rule,
            level="warning",
            file=where[0],
            line=where[1],
            message=f"{finding.platform}: audited computation {finding.function} "
            f"({finding.kind}) {does}: {_first_line(finding.reason)}",
            title=f"{finding.platform}: {finding.function} {does}",
            identity="|".join((rule, finding.platform, where[0], finding.function, "audit")),
        )
    for violation in audit.violations or ():
        yield _violation_alert(violation, fallback=config, subject="the audited suite", leg=None)


def _tooling_alerts(report: Report) -> Iterator[Alert]:
    numbers = report.summary.numbers
    tooling = numbers.tooling if numbers is not None else None
    for assumption in tooling.assumptions if tooling is not None else ():
        yield Alert(
            rule="tooling-assumption",
            level="note",
            file=assumption.file,
            line=max(1, assumption.line),
            message=f"{assumption.rule}: {assumption.reason} ({assumption.text})",
            title=f"tooling: {assumption.rule}",
            identity="|".join(
                ("tooling-assumption", assumption.file, assumption.rule, assumption.text)
            ),
        )
