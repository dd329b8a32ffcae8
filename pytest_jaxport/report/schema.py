"""The versioned JSON report: built from the tests' entries, summarized, written atomically,
and read back (older versions upgraded). It holds data, never rendered sentences; its shape
is described once, in docs/reference.md ("Report: --jaxport-report=PATH.json"), and as the
types that write it (:class:`~pytest_jaxport.model.probe.Probe`,
:class:`~pytest_jaxport.report.ledger.TestRecord`,
:class:`~pytest_jaxport.model.counts.PlatformCounts`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import os
import platform as _platform
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_jaxport.model.cost import CostModel, FormatItem, RewriteEstimate, RewriteItem, estimate
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
from pytest_jaxport.model.platforms import DEFAULT_HOME, NVIDIA_PLATFORM
from pytest_jaxport.model.probe import Probe
from pytest_jaxport.model.runtime_share import RuntimeShare, combine
from pytest_jaxport.report.document import SCHEMA_VERSION as SCHEMA_VERSION
from pytest_jaxport.report.document import TOOL_NAME as TOOL_NAME
from pytest_jaxport.report.document import Report, built, read_report
from pytest_jaxport.report.document import ReportError as ReportError
from pytest_jaxport.version import __version__

READABLE_VERSIONS = (1, 2)
"""Versions :func:`load` reads; older ones are upgraded to :data:`SCHEMA_VERSION`."""


BASELINE_KIND = "baseline"
BASELINE_VERSION = 1


class MergeError(ValueError):
    """Legs cannot be merged, or a file cannot be used; one line naming the file."""


def baseline_given(path: Path) -> str:
    """What a command that reads reports says of a baseline given in a report's place."""
    return (
        f"{path}: a baseline, not a report: it holds only counts (for --jaxport-baseline and "
        "jaxport diff); give a report written by pytest --jaxport-report=PATH.json or by "
        "jaxport merge -o"
    )


# -- the report ---------------------------------------------------------------------------


def environment(present: Iterable[str], versions: Mapping[str, str]) -> dict[str, object]:
    return {
        **versions,
        "python": _platform.python_version(),
        "machine": f"{_platform.system()}-{_platform.machine()}",
        "present_platforms": list(present),
    }


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


def build_report(
    tests: Iterable[Mapping[str, Any]],
    *,
    config: Mapping[str, Any],
    environment: Mapping[str, Any],
    numbers: Callable[[list[dict[str, Any]]], Mapping[str, Any]] | None = None,
) -> Report:
    """The whole report, typed (:func:`report_data` read as :func:`built`): ``numbers``
    gives the summary's three numbers from the sorted tests, where there are some."""
    data = report_data(tests, config=config, environment=environment)
    if numbers is not None:
        data["summary"].update(numbers(data["tests"]))
    return built(data)


def report_data(
    tests: Iterable[Mapping[str, Any]],
    *,
    config: Mapping[str, Any],
    environment: Mapping[str, Any],
) -> dict[str, Any]:
    """The report's JSON from the tests' entries (the ledger's, a merge's): tests sorted by
    node id so runs with and without xdist agree, counted and summarized."""
    ordered = sorted((dict(t) for t in tests), key=lambda t: t["nodeid"])
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "environment": dict(environment),
        "config": dict(config),
        "summary": summarize(ordered),
        "tests": ordered,
    }


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


TIMING_KEYS = frozenset({"runtime_share", "seconds", "share"})
"""Report keys that hold measured times (or text made from them): they differ run to run."""


def without_timings(data: object) -> object:
    """``data`` with every measured-time key removed: what two runs of the same suite on the
    same machine must agree on exactly (counts, outcomes, numerics status)."""
    if isinstance(data, Mapping):
        return {k: without_timings(v) for k, v in data.items() if k not in TIMING_KEYS}
    if isinstance(data, list):
        return [without_timings(v) for v in data]
    return data


def write_json(path: Path, report: Report | Mapping[str, object]) -> None:
    """Write atomically: a temporary file in the same folder, then ``os.replace``. Compact
    (no indentation): a 2,000-test report is half the size and written five times faster;
    ``jaxport show`` is the way to read one."""
    data = report.to_dict() if isinstance(report, Report) else report
    write_text(path, json.dumps(data) + "\n")


def write_text(path: Path, text: str) -> None:
    """Atomic text write; a run killed mid-write leaves the previous file intact."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load(path: str | os.PathLike[str]) -> Report:
    """Read a report of any version in :data:`READABLE_VERSIONS`, upgraded to this one and
    checked field by field (:func:`~pytest_jaxport.report.document.read_report`); refuse
    anything else with a :class:`ReportError` naming the file (and the place, for a field
    of the wrong type or a missing one).

    >>> load("missing.json")
    Traceback (most recent call last):
    ...
    pytest_jaxport.report.document.ReportError: missing.json: no such file
    """
    path = Path(path)
    return from_json(read_json(path), path)


RENDERINGS: tuple[tuple[str, str], ...] = (
    ("## pytest-jaxport", "the Markdown rendering of a report"),
    ("<!doctype html", "the HTML rendering of a report"),
    ("<!DOCTYPE html", "the HTML rendering of a report"),
)
"""How a file pytest-jaxport rendered (not its JSON) starts, and what it is."""
_INSTEAD = (
    "the commands read the JSON report: pytest --jaxport-report=PATH.json writes it beside "
    "the other formats (or jaxport merge -o PATH.json)"
)


def read_json(path: Path) -> object:
    """``path``'s JSON, or a :class:`ReportError` naming the file: missing, unreadable,
    truncated, or one of pytest-jaxport's other formats (Markdown, HTML) given where the
    JSON report is read, which says where the JSON comes from."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot be read: {e}") from None
    for start, what in RENDERINGS:
        if text.lstrip().startswith(start):
            raise ReportError(f"{path}: {what}, not its JSON; {_INSTEAD}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON (truncated?): {e}") from None


def _other_format(data: object) -> str | None:
    """What a JSON file pytest-jaxport wrote, other than a report, is: a SARIF log, a GitLab
    Code Quality report; ``None`` for anything else."""
    if isinstance(data, dict) and "runs" in data and "sarif" in str(data.get("$schema", "")):
        return "a SARIF log (the report's findings for code scanning)"
    if isinstance(data, list) and all(
        isinstance(d, dict) and {"check_name", "fingerprint"} <= d.keys() for d in data
    ):
        return "a GitLab Code Quality report (the report's findings)"
    return None


def from_json(data: object, path: Path) -> Report:
    """A report's decoded JSON (any readable version) as a checked :class:`Report`."""
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(tool, dict) or tool.get("name") != TOOL_NAME:
        other = _other_format(data)
        if other is not None:
            raise ReportError(f"{path}: {other}, not a report; {_INSTEAD}")
        raise ReportError(f"{path}: not a pytest-jaxport report")
    if data.get("kind") == BASELINE_KIND:  # its schema_version counts baselines, not reports
        raise ReportError(baseline_given(path))
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise ReportError(
            f"{path}: schema_version {version!r} is not supported "
            f"(this pytest-jaxport {__version__} reads versions {readable})"
        )
    if version != SCHEMA_VERSION:
        try:
            data = upgrade(data)
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ReportError(
                f"{path}: malformed version {version} report ({type(e).__name__}: {e})"
            ) from None
    return read_report(data, file=str(path))


def upgrade(data: Mapping[str, Any]) -> dict[str, Any]:
    """A report of an older schema version as this version's (a copy; this version as is).

    Version 1 stored sentences: each violation's ``message`` (its fields are recovered from
    it), a test's ``message`` (now ``error`` where it was not the violations), and
    ``summary.layers`` (dropped: the view builds the layer table). The summary is counted
    again, which adds ``outcomes``, ``hotspots`` and the per-platform distinct sites.
    """
    if data.get("schema_version") == SCHEMA_VERSION:
        return dict(data)
    tests = [_upgrade_test(t) for t in data.get("tests") or []]
    summary = {k: v for k, v in (data.get("summary") or {}).items() if k != "layers"}
    summary.update(summarize(tests))
    return {
        **data,
        "schema_version": SCHEMA_VERSION,
        "upgraded_from": data.get("schema_version"),
        "summary": summary,
        "tests": tests,
    }


def _upgrade_test(test: Mapping[str, Any]) -> dict[str, Any]:
    upgraded = {k: v for k, v in test.items() if k != "message"}
    violations = [_upgrade_violation(v) for v in test.get("violations") or []]
    upgraded["violations"] = violations
    message = test.get("message")
    if message and not violations:
        upgraded["error"] = {"message": str(message), "where": None, "when": "call"}
    return upgraded


def _upgrade_violation(violation: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1's ``message`` (``check 'c' on p: key = limit (set in o), found F WHAT
    (level)`` and indented detail lines) as version 2's ``what`` and ``details``."""
    headline, *rest = str(violation.get("message") or "").split("\n")
    found, level = violation.get("found"), str(violation.get("level", "lowered"))
    what = ""
    _, marker, tail = headline.partition(f"), found {found} ")
    if marker and tail.endswith(f" ({level})"):
        what = tail[: -len(f" ({level})")]
    upgraded = {k: v for k, v in violation.items() if k != "message"}
    upgraded["what"] = what
    upgraded["kernels"] = []
    upgraded["details"] = [line.strip() for line in rest if line.strip()]
    if violation.get("key") == "must_lower":
        upgraded["found"] = f"fails to {what}"
    return upgraded
