"""Findings where reviewers look: a report's findings as alerts at the user's source lines,
and the SARIF 2.1.0 log GitHub code scanning, GitLab and Azure DevOps show inline (pure).

:func:`alerts` reads a typed :class:`~pytest_jaxport.report.document.Report` once into
:class:`Alert` values, each one finding at one line of the repository: a vendor-library or
custom-kernel site, a numeric-format or memory-layout site, a check that does not lower, a
budget violation, a numerics difference, a tooling assumption; the suite audit's sites and
findings, and a merged report's legs, too. :func:`sarif_log` writes them as one SARIF run,
with one rule per kind of finding (:data:`RULES`); ``view.annotations`` prints the same
alerts as GitHub Actions workflow commands, ``view.codequality`` as a GitLab Code Quality
report.

An alert's level says what it does to the run: ``error`` for what fails a test or the
audit's gate, ``warning`` for findings that fail nothing but need a decision (a kernel to
rewrite, a check that does not lower, outputs that differ), ``note`` for the rest (vendor
calls with a counterpart elsewhere, format and layout findings, tooling assumptions).

Locations are the report's, relative to pytest's rootdir (``uriBaseId`` ``%SRCROOT%``): a
site in an installed package or outside the rootdir has no line in the repository and is
left out of the results (counted in the run's properties); a finding with no line of its own
is placed at its test's file (a budget of the suite's: the configuration file).

Fingerprints (``partialFingerprints``) identify an alert without its line number: its rule,
platform, file, what it is, and its rank among the alerts of the same identity in that file,
so code scanning keeps tracking it when lines above it move, and closes it when the site goes.

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
    >>> [alert] = alerts(report)
    >>> (alert.rule, alert.level, alert.file, alert.line)
    ('vendor-library', 'note', 'src/m.py', 24)
    >>> alert.message
    'cuda: cudnn stablehlo.convolution, 2 dispatches in 1 check (1 test)'

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pytest_jaxport.model.budget import MAY_DIFFER_KEY, NUMERICS_KEYS, Violation
from pytest_jaxport.model.emulation import emulated_label, may_differ_lines
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.probe import MAY_DIFFER, PlatformProbe, emulated_status
from pytest_jaxport.report.document import Report
from pytest_jaxport.report.entries import TestEntry
from pytest_jaxport.version import __version__
from pytest_jaxport.view.model import emulated_sites

PROJECT_URL = "https://github.com/pytest-jaxport/pytest-jaxport"
"""The project's home (``[project.urls]`` in pyproject.toml says the same; a test keeps them
equal). The rules' help links point into its docs."""
DOCS_URL = f"{PROJECT_URL}/blob/main/docs"
SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
"""The ``uriBaseId`` of every location: the repository's root (pytest's rootdir)."""
FINGERPRINT = "jaxportFinding/v1"
"""The key of an alert's fingerprint in ``partialFingerprints``."""

Level = Literal["error", "warning", "note"]
LEVELS: tuple[Level, ...] = ("error", "warning", "note")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One kind of finding: a SARIF ``reportingDescriptor``."""

    id: str
    name: str
    short: str
    full: str
    help: str
    """What to do about it."""
    docs: str
    """The docs page and section (``reference.md#...``), under :data:`DOCS_URL`."""
    level: Level
    """Its usual level (an alert that fails a test or the gate is an ``error`` anyway)."""

    @property
    def help_uri(self) -> str:
        return f"{DOCS_URL}/{self.docs}"

    def to_sarif(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "shortDescription": {"text": self.short},
            "fullDescription": {"text": self.full},
            "help": {"text": self.help, "markdown": f"{self.help} [Docs]({self.help_uri})"},
            "helpUri": self.help_uri,
            "defaultConfiguration": {"level": self.level},
            "properties": {"tags": ["portability", "jax"]},
        }


RULES: tuple[Rule, ...] = (
    Rule(
        id="vendor-library",
        name="VendorLibraryCall",
        short="A vendor-library call on one platform",
        full="This line dispatches to a vendor library on the platform named (cuBLAS, cuDNN, "
        "cuFFT, cuSOLVER, NCCL on cuda; their ROCm and CPU counterparts elsewhere). Another "
        "backend usually has a counterpart, but the kernel, its speed and its numerics differ.",
        help="Nothing to do unless a budget says so: keep the count from growing with "
        "max_vendor_calls or max_library_calls, or a baseline.",
        docs="reference.md#classification-rules-lowered-level",
        level="note",
    ),
    Rule(
        id="custom-kernel",
        name="CustomKernel",
        short="A hand-written kernel to rewrite on other backends",
        full="This line runs a hand-written kernel (Pallas, Triton, Mosaic, an FFI custom call) "
        "on the platform named: each one is a rewrite on every backend it does not run on.",
        help="Keep a portable fallback (jax.lax.platform_dependent) and budget the kernel "
        "with max_custom_calls, or write its counterpart for the other backends.",
        docs="reference.md#classification-rules-lowered-level",
        level="warning",
    ),
    Rule(
        id="numeric-format",
        name="NumericFormat",
        short="A numeric format that does not port as it is",
        full="This line uses a numeric format another platform computes differently or not at "
        "all: float64 on TPU, a float8 variant of another vendor, a float32 dot at the default "
        "precision (TF32, one bfloat16 pass).",
        help="Set the precision or the format explicitly where it matters, or budget the "
        "findings with max_format_findings / forbid_formats.",
        docs="reference.md#numeric-formats-and-memory-layout",
        level="note",
    ),
    Rule(
        id="memory-layout",
        name="MemoryLayout",
        short="A memory layout that costs on the platform named",
        full="This line's shapes pad to the platform's tiles, miss its matrix-unit alignment, "
        "or make XLA insert relayouts around a library call.",
        help="Pick shapes that are multiples of the platform's tiles, or budget the waste "
        "with max_padding_waste / max_relayouts.",
        docs="reference.md#numeric-formats-and-memory-layout",
        level="note",
    ),
    Rule(
        id="does-not-lower",
        name="DoesNotLower",
        short="A check that does not lower for a platform",
        full="JAX cannot lower this check (or an audited computation) for the platform named: "
        "the code does not run there as it is. A platform in must_lower makes it a failure.",
        help="Read the lowering error in the report; add the platform to must_lower once it "
        "lowers, so it keeps lowering.",
        docs="reference.md#tooljaxportbudget-and-tooljaxportbudgetplatform",
        level="warning",
    ),
    Rule(
        id="budget-violation",
        name="BudgetViolation",
        short="A portability budget is exceeded",
        full="A check found more than its budget allows on the platform named (a key of "
        "[tool.jaxport.budget], a platform's table or the test's marker): the test fails.",
        help="Remove the kernels at this line, or raise the limit where it was set, or drop "
        "the limit and keep the count from growing with a baseline.",
        docs="reference.md#tooljaxportbudget-and-tooljaxportbudgetplatform",
        level="error",
    ),
    Rule(
        id="numerics-difference",
        name="NumericsDifference",
        short="Outputs differ across backends",
        full="The check's outputs on the platform named differ from the reference platform's "
        "beyond the tolerance (on this machine, emulated, or on another CI leg).",
        help="Compare the differing leaves in the report; loosen rtol/atol for the dtype "
        "where the difference is expected, or fix the code where it is not.",
        docs="reference.md#tooljaxporttolerancedtype-and-tooljaxporttoleranceplatformdtype",
        level="error",
    ),
    Rule(
        id="numerics-may-differ",
        name="NumericsMayDiffer",
        short="Outputs may differ on the chip (emulated)",
        full="Emulated for the platform named, the check's outputs matched the reference, "
        "but an op the emulation cannot compute as that platform's chip does (its "
        "transcendental functions, reduction order, decompositions) has a measured error "
        "that moves them beyond the tolerance, or no measured bound.",
        help="Loosen rtol/atol for that platform's dtype where an error of the measured size "
        "is acceptable; run the check on the platform to know.",
        docs="reference.md#may-differ-what-the-chip-may-do",
        level="warning",
    ),
    Rule(
        id="tooling-assumption",
        name="ToolingAssumption",
        short="An NVIDIA-bound tooling assumption",
        full="This line assumes NVIDIA tooling (nvidia-smi, CUDA_VISIBLE_DEVICES, a cuda "
        "package pin...) that another backend's machines do not have.",
        help="Make it conditional on the platform, or budget the assumptions with "
        "max_tooling_assumptions.",
        docs="tooling.md",
        level="note",
    ),
)
"""Every kind of finding, each one SARIF rule."""

RULE_IDS = tuple(rule.id for rule in RULES)
_RULES = {rule.id: rule for rule in RULES}
_LOWER_KEYS = ("must_lower", "must_trace")
_SITE_RULES = {
    "vendor": "vendor-library",
    "custom": "custom-kernel",
    "format": "numeric-format",
    "layout": "memory-layout",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    """One finding at one line of the repository."""

    rule: str
    level: Level
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


def in_repository(file: str) -> bool:
    """Whether ``file`` (as a report shows it) can be a path in the repository: relative, not
    above the root (a site-packages file shows relative to its ``site-packages``: the
    reporter knows those apart, :func:`alerts`'s ``outside``).

    >>> in_repository("src/m.py"), in_repository("/opt/x.py"), in_repository("../x.py")
    (True, False, False)
    """
    return not (file.startswith("/") or _DRIVE.match(file) or ".." in file.split("/"))


def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _count(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _site_alert(site: Hotspot, *, audit: bool) -> Alert | None:
    rule = _SITE_RULES.get(site.layer)
    where = split_location(site.location)
    if rule is None or where is None:
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
        level=_RULES[rule].level,
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
    return fallback, 1


def _violation_alert(
    violation: Violation,
    *,
    fallback: str,
    subject: str,
    leg: str | None,
    lines: Sequence[str] = (),
) -> Alert:
    title = f"{violation.where()}: {violation.key} ({violation.found_text()})"
    if violation.key in NUMERICS_KEYS:  # numerics, not a budget key: what differs, by how much
        rule, title = "numerics-difference", f"{violation.where()}: {violation.found_text()}"
    elif violation.key == MAY_DIFFER_KEY:  # numerics too: what may differ, by how much
        rule, title = "numerics-may-differ", f"{violation.where()}: {violation.found_text()}"
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


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _test_alerts(test: TestEntry) -> Iterator[Alert]:
    file = _test_file(test.nodeid)
    covered: set[tuple[str, str, str]] = set()
    sites = {(c.name, p): _may_differ_site(e) for c in test.checks
             for p, e in c.probe.platforms.items()}  # fmt: skip
    for i, violation in enumerate(test.violations):
        leg = test.violation_legs[i] if i < len(test.violation_legs) else None
        covered.add((violation.check, violation.platform, violation.key))
        site = sites.get((violation.check, violation.platform))
        if violation.key == MAY_DIFFER_KEY and site is not None:
            violation = replace(violation, kernels=(), findings=())
            yield replace(_violation_alert(violation, fallback=file, subject=test.nodeid,
                                           leg=leg), file=site[0], line=site[1])  # fmt: skip
            continue
        yield _violation_alert(violation, fallback=file, subject=test.nodeid, leg=leg,
                               lines=emulated_sites(test, violation))  # fmt: skip
    for check in test.checks:
        name = check.name
        for platform, entry in check.probe.platforms.items():
            site = sites.get((name, platform))
            if (
                emulated_status(entry) == MAY_DIFFER
                and entry.emulated is not None
                and (name, platform, MAY_DIFFER_KEY) not in covered
            ):
                head = may_differ_lines(entry.emulated, entry.emulated_bounds)[0]
                at_file, at_line = site if site is not None else (file, 1)
                yield Alert(
                    rule="numerics-may-differ",
                    level="warning",
                    file=at_file,
                    line=at_line,
                    message=f"{emulated_label(platform)}: check {name!r} of {test.nodeid}: {head}",
                    title=f"{platform}: {name} may differ (emulated)",
                    identity="|".join(("numerics-may-differ", platform, file, name, test.nodeid)),
                )
            lowered = (name, platform, "must_lower") not in covered
            if entry.error is not None and lowered:
                yield Alert(
                    rule="does-not-lower",
                    level="warning",
                    file=file,
                    line=1,
                    message=f"{platform}: check {name!r} of {test.nodeid} does not lower "
                    f"(not in must_lower: a finding, not a failure): "
                    f"{_first_line(entry.error.split(': ', 1)[-1])}",
                    title=f"{platform}: {name} does not lower",
                    identity="|".join(("does-not-lower", platform, file, name, test.nodeid)),
                )
            numerics = entry.numerics
            if (
                numerics is not None
                and not numerics.ok
                and not any((name, platform, k) in covered for k in NUMERICS_KEYS)
            ):
                yield Alert(
                    rule="numerics-difference",
                    level="warning",
                    file=file,
                    line=1,
                    message=f"{platform}: check {name!r} of {test.nodeid}: "
                    f"{_count(len(numerics.mismatches), 'leaf', 'leaves')} of "
                    f"{numerics.leaves} differ from {numerics.reference}",
                    title=f"{platform}: {name} outputs differ",
                    identity="|".join(("numerics-difference", platform, file, name, test.nodeid)),
                )
    for drift in test.drifts:
        yield Alert(
            rule="numerics-difference",
            level="error",
            file=file,
            line=1,
            message=f"{drift.platform} (leg {drift.leg}): check {drift.check!r} of "
            f"{test.nodeid} differs from {drift.reference} (leg {drift.reference_leg}): "
            + (_first_line(drift.messages[0]) if drift.messages else "outputs differ"),
            title=f"{drift.platform}: {drift.check} outputs drift across legs",
            identity="|".join(
                ("numerics-difference", drift.platform, file, drift.check, test.nodeid, "drift")
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
        yield Alert(
            rule="does-not-lower",
            level="warning",
            file=where[0],
            line=where[1],
            message=f"{finding.platform}: audited computation {finding.function} "
            f"({finding.kind}) does not lower: {_first_line(finding.reason)}",
            title=f"{finding.platform}: {finding.function} does not lower",
            identity="|".join(
                ("does-not-lower", finding.platform, where[0], finding.function, "audit")
            ),
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


def alerts(report: Report, *, outside: Callable[[str], bool] | None = None) -> tuple[Alert, ...]:
    """Every finding of ``report`` at a line of the repository, in a fixed order (level,
    file, line, rule, message), each with its fingerprint's rank.

    ``outside`` tells a file that is not the repository's though it looks relative (a site
    in an installed package shows relative to its ``site-packages``): such alerts, and those
    at absolute paths, are left out (:func:`left_out` counts them).
    """
    found = [a for a in _all_alerts(report) if _kept(a.file, outside)]
    return _ranked(found)


def left_out(report: Report, *, outside: Callable[[str], bool] | None = None) -> int:
    """How many findings :func:`alerts` leaves out: their line is not in the repository."""
    return sum(1 for a in _all_alerts(report) if not _kept(a.file, outside))


def _kept(file: str, outside: Callable[[str], bool] | None) -> bool:
    return in_repository(file) and not (outside is not None and outside(file))


def _all_alerts(report: Report) -> Iterator[Alert]:
    for test in report.tests:
        yield from _test_alerts(test)
    for site in report.summary.hotspots:
        alert = _site_alert(site, audit=False)
        if alert is not None:
            yield alert
    yield from _audit_alerts(report)
    yield from _tooling_alerts(report)


def _ranked(found: Iterable[Alert]) -> tuple[Alert, ...]:
    ordered = sorted(
        found, key=lambda a: (LEVELS.index(a.level), a.file, a.line, a.rule, a.message)
    )
    by_place = sorted(ordered, key=lambda a: (a.identity, a.line, a.message))
    ranks: dict[int, int] = {}
    seen: dict[str, int] = {}
    for alert in by_place:
        ranks[id(alert)] = seen.get(alert.identity, 0)
        seen[alert.identity] = ranks[id(alert)] + 1
    return tuple(replace(a, rank=ranks[id(a)]) for a in ordered)


def _result(alert: Alert) -> dict[str, Any]:
    return {
        "ruleId": alert.rule,
        "ruleIndex": RULE_IDS.index(alert.rule),
        "level": alert.level,
        "message": {"text": alert.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": alert.file, "uriBaseId": SRCROOT},
                    "region": {"startLine": alert.line},
                }
            }
        ],
        "partialFingerprints": {FINGERPRINT: alert.fingerprint},
    }


def sarif_log(report: Report, *, outside: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """``report`` as one SARIF 2.1.0 log: one run, its tool driver pytest-jaxport with every
    rule (:data:`RULES`), one result per :func:`alerts`."""
    found = alerts(report, outside=outside)
    legs: Sequence[str] = [leg.leg for leg in report.merged.legs] if report.merged else ()
    properties: dict[str, Any] = {
        "platforms": list(report.config.platforms),
        "reference": report.config.reference,
        "leftOut": left_out(report, outside=outside),
    }
    if legs:
        properties["legs"] = list(legs)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "pytest-jaxport",
                        "version": report.tool_version or __version__,
                        "informationUri": PROJECT_URL,
                        "rules": [rule.to_sarif() for rule in RULES],
                    }
                },
                "originalUriBaseIds": {
                    SRCROOT: {"description": {"text": "The repository's root (pytest's rootdir)."}}
                },
                "results": [_result(a) for a in found],
                "columnKind": "unicodeCodePoints",
                "properties": properties,
            }
        ],
    }


def counts_by_level(found: Iterable[Alert]) -> Mapping[str, int]:
    """How many alerts of each level (``{"error": 1, "warning": 3, "note": 80}``)."""
    counts: dict[str, int] = dict.fromkeys(LEVELS, 0)
    for alert in found:
        counts[alert.level] += 1
    return counts
