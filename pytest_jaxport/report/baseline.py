"""Counts against a base: the committed baseline (``--jaxport-baseline``), ``jaxport diff``,
and the audit's ratchet, one implementation for a test and for the suite (pure).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict, cast

from pytest_jaxport.model.budget import (
    BASELINE_KEY,
    RATCHETED,
    RATCHETED_SHARES,
    Setting,
    Violation,
)
from pytest_jaxport.model.census import Census, Kernel
from pytest_jaxport.model.classification import LEVELS, Layer
from pytest_jaxport.model.config import DEFAULT_MEMORY_GROWTH
from pytest_jaxport.model.counts import FormatCounts
from pytest_jaxport.model.findings import Finding, FormatCensus, size_text
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.jsontypes import (
    JsonMapping,
    JsonObject,
    read_integer,
    read_number,
    read_tables,
    read_text,
)
from pytest_jaxport.model.memory import GIB, DeviceMemory, gib_text
from pytest_jaxport.model.platforms import ordered_platforms
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.report.audit_section import AuditSection
from pytest_jaxport.report.document import TOOL_NAME, BaselineMatch, Report, StaleEntry
from pytest_jaxport.report.entries import TestEntry
from pytest_jaxport.report.errors import MergeError, ReportError
from pytest_jaxport.report.files import BASELINE_KIND, BASELINE_VERSION, load, read_json
from pytest_jaxport.version import __version__

Counted = Mapping[str, float]
"""One level's numbers of one platform entry: ``{metric: value}``."""

Levels = Mapping[str, Counted | None]
"""One platform entry's counts per level (``lowered: null`` where it did not lower)."""

TestCounts = Mapping[str, Mapping[str, Levels]]
"""One test's counts in a baseline: per check, per platform, per level."""


class AuditCounts(TypedDict):
    """What a baseline keeps of the suite audit (:func:`audit_counts`): per platform its
    counts, and the call-weighted count of each site behind them."""

    platforms: dict[str, dict[str, float]]
    sites: dict[str, dict[str, int]]


class BaselineTool(TypedDict):
    """A baseline's ``tool``: what wrote it."""

    name: str


class _BaselineFields(TypedDict):
    schema_version: int
    tool: BaselineTool
    kind: str
    tests: dict[str, TestCounts]


class Counts(_BaselineFields, total=False):
    """The committed-baseline form (:func:`baseline_of`): a JSON document, its shape checked
    where it is read (:func:`load_compared`), so it is typed from there on."""

    audit: AuditCounts


METRICS: tuple[str, ...] = RATCHETED
"""Every metric a baseline keeps: the budget keys' ratchets
(:attr:`~pytest_jaxport.model.budget.BudgetKey.ratchet`), declared there once;
``library.`` stands for one metric per library."""

FRACTIONS: frozenset[str] = RATCHETED_SHARES
"""Metrics that are shares (shown as percentages; a grown share fails like a grown count)."""

COMPILED_FORMAT_METRICS = ("relayouts", "relayout_bytes")
"""The formats-and-layout metrics the compiled program is counted in (the others: the
lowered program's)."""


MEMORY = "memory"
"""A platform entry's device memory in a baseline, beside its levels' counts: what a check
needs per device (:data:`DEVICE_MEMORY`) and the device's capacity (:data:`DEVICE_CAPACITY`),
where its compiler planned it or refused it for memory."""
DEVICE_MEMORY = "device_memory"
"""The bytes a check needs per device, as its compiler planned it (or the figure it refused
for): held to the base within ``memory_growth`` (:func:`memory_changes`), not exactly like a
count."""
DEVICE_CAPACITY = "device_capacity"
"""The device's usable bytes, where known: a plan that grew past it no longer fits, whatever
the threshold."""


def _threshold(setting: Setting[float] | None) -> Setting[float]:
    """``memory_growth`` as set, or the default
    (:data:`~pytest_jaxport.model.config.DEFAULT_MEMORY_GROWTH`)."""
    if setting is not None:
        return setting
    return Setting(value=DEFAULT_MEMORY_GROWTH, origin="the default")


def ratcheted(metric: str) -> bool:
    """Whether a baseline keeps ``metric`` (:data:`METRICS`)."""
    return metric in METRICS or any(m.endswith(".") and metric.startswith(m) for m in METRICS)


def _calls(census: Census) -> dict[str, float]:
    """A level's calls: per layer and per vendor library."""
    counts: dict[str, float] = {"vendor": census.vendor, "custom": census.custom}
    counts.update({f"library.{name}": n for name, n in census.libraries().items()})
    return counts


def _format_counts(formats: FormatCensus | None) -> dict[str, float]:
    """The formats-and-layout numbers of one level: findings, "does not compile", padding
    waste (lowered); relayouts and their bytes, and padding waste where the compiler laid
    out tiles (compiled). Absent where not judged."""
    if formats is None:
        return {}
    if formats.level == "compiled":
        counts = _numbers(FormatCounts.of(None, formats))
        found = {m: counts[m] for m in COMPILED_FORMAT_METRICS}
        if "compiled_padding_waste" in counts:
            found["padding_waste"] = round(counts["compiled_padding_waste"], 6)
        return found
    counts = _numbers(FormatCounts.of(formats, None))
    counts["padding_waste"] = round(counts["padding_waste"], 6)
    return {m: counts[m] for m in counts if m not in COMPILED_FORMAT_METRICS}


def _numbers(counts: FormatCounts) -> dict[str, float]:
    """The numbers of :meth:`FormatCounts.to_dict` (every value of it is one)."""
    return {k: v for k, v in counts.to_dict().items() if isinstance(v, int | float)}


def _level_counts(census: Census, formats: FormatCensus | None) -> dict[str, float]:
    """The numbers a baseline keeps of one level: those of :data:`METRICS`, sorted."""
    values = {**_calls(census), **_format_counts(formats)}
    return {m: v for m, v in sorted(values.items()) if ratcheted(m)}


_LABELS = {
    "vendor": "vendor calls",
    "custom": "custom calls",
    "rewrite_days": "rewrite days",
    "format_findings": "format findings",
    "layout_findings": "layout findings",
    "not_compiling": "format findings that do not compile",
    "padding_waste": "padding waste",
    "relayouts": "relayouts",
    "relayout_bytes": "relayout bytes",
    DEVICE_MEMORY: "planned device memory",
}


def metric_label(metric: str) -> str:
    """``vendor`` -> ``vendor calls``; ``library.cublas`` -> ``cublas calls``."""
    if metric.startswith("library."):
        return f"{metric.removeprefix('library.')} calls"
    return _LABELS.get(metric, metric.replace("_", " "))


def compared(metric: str, old: Mapping[str, object], new: Mapping[str, object]) -> bool:
    """Whether ``metric`` can be compared from ``old`` to ``new``: a per-library count a
    side lacks is none there, any other metric a side lacks was not measured there (a
    baseline recorded before the number existed): not growth."""
    return metric.startswith("library.") or (metric in old and metric in new)


def _counts(result: PlatformProbe) -> dict[str, Counted | None]:
    """Per level the counts of one platform entry; ``lowered: null`` when lowering failed."""
    levels: dict[str, Counted | None] = {}
    for level, census, formats in (
        ("lowered", result.census, result.formats),
        ("compiled", result.compiled, result.compiled_formats),
        ("what_if_no_vendor", result.what_if_no_vendor, None),
    ):
        if census is not None:
            levels[level] = _level_counts(census, formats)
        elif level == "lowered":
            levels[level] = None
    ordered: dict[str, Counted | None] = {
        level: levels[level] for level in LEVELS if level in levels
    }
    memory = _memory_counts(result.memory)
    return {**ordered, MEMORY: memory} if memory is not None else ordered


def _memory_counts(memory: DeviceMemory | None) -> Counted | None:
    """What a baseline keeps of a platform entry's memory: the bytes needed per device and
    the device's capacity (where known); ``None`` where there is no number."""
    if memory is None or memory.needed_bytes is None:
        return None
    counts: dict[str, float] = {DEVICE_MEMORY: memory.needed_bytes}
    if memory.capacity_bytes is not None:
        counts[DEVICE_CAPACITY] = memory.capacity_bytes
    return counts


def _test_counts(checks: Iterable[Probe]) -> dict[str, dict[str, Levels]]:
    return {
        check.name: {
            platform: _counts(result) for platform, result in sorted(check.platforms.items())
        }
        for check in sorted(checks, key=lambda c: c.name)
    }


def baseline_of(report: Report | Counts) -> Counts:
    """The committed-baseline form of a report: counts per test, check, platform and level
    (a baseline: itself).

    Small and stably ordered (sorted keys), so a baseline update reviews as a short diff.
    Tests without checks (skipped, or checking nothing) are left out.
    """
    if not isinstance(report, Report):
        if report.get("kind") != BASELINE_KIND:  # a report's JSON: load it first
            raise TypeError("baseline_of takes a Report or a baseline, not a report's JSON")
        return report.copy()
    tests = {
        test.nodeid: _test_counts(c.probe for c in test.checks)
        for test in report.tests
        if test.checks
    }
    baseline: Counts = {
        "schema_version": BASELINE_VERSION,
        "tool": {"name": TOOL_NAME},
        "kind": BASELINE_KIND,
        "tests": dict(sorted(tests.items())),
    }
    if report.audit is not None:  # --jaxport-audit: the suite's counts
        baseline["audit"] = audit_counts(report.audit)
    return baseline


def baseline_json(baseline: Counts) -> str:
    """The file text of a baseline: sorted keys, two-space indent, final newline."""
    return json.dumps(baseline, indent=2, sort_keys=True) + "\n"


def load_counts(path: Path) -> Counts:
    """Read a report or a baseline, for ``--jaxport-baseline``: the baseline form
    (:func:`baseline_of`)."""
    return baseline_of(load_compared(path))


def load_compared(path: Path) -> Report | Counts:
    """Read a report (:func:`~pytest_jaxport.report.files.load`) or a baseline, for
    ``jaxport diff`` and ``jaxport baseline``.

    Raises :class:`MergeError` naming the file when it is missing, truncated, foreign or of
    another schema version.
    """
    try:
        data = read_json(path)
    except ReportError as e:
        raise MergeError(str(e)) from None
    if not isinstance(data, dict) or data.get("kind") != BASELINE_KIND:
        try:
            return load(path)
        except ReportError as e:
            raise MergeError(str(e)) from None
    tool = data.get("tool")
    if not isinstance(tool, dict) or tool.get("name") != TOOL_NAME:
        raise MergeError(f"{path}: not a pytest-jaxport baseline")
    if data.get("schema_version") != BASELINE_VERSION:
        raise MergeError(
            f"{path}: baseline schema_version {data.get('schema_version')!r} is not supported "
            f"(this pytest-jaxport {__version__} reads version {BASELINE_VERSION}); "
            "regenerate it with --jaxport-baseline-update"
        )
    problem = _malformed_baseline(data)
    if problem is not None:
        raise MergeError(f"{path}: malformed pytest-jaxport baseline: {problem}")
    return cast(Counts, data)


def _malformed_baseline(data: JsonMapping) -> str | None:
    """What is wrong with a baseline's shape (where, what was expected, what was found), or
    ``None``: ``tests`` maps a test to its checks, a check to its platforms, a platform to its
    levels, a level to its counts (``null`` where it did not lower); ``audit``, where there
    is one, maps ``platforms`` and ``sites`` per platform to counts."""

    def found(value: object) -> str:
        return f"found {type(value).__name__} {json.dumps(value)[:40]}"

    tests = data.get("tests")
    if not isinstance(tests, Mapping):
        return f"'tests': expected a table of tests, {found(tests)}"
    for nodeid, checks in tests.items():
        if not isinstance(checks, Mapping):
            return f"test {nodeid}: expected a table of checks, {found(checks)}"
        for check, platforms in checks.items():
            where = f"test {nodeid} check {check!r}"
            if not isinstance(platforms, Mapping):
                return f"{where}: expected a table of platforms, {found(platforms)}"
            for platform, levels in platforms.items():
                if not isinstance(levels, Mapping):
                    return f"{where} on {platform}: expected a table of levels, {found(levels)}"
                for level, counts in levels.items():
                    if counts is None and level == "lowered":
                        continue  # it did not lower
                    bad = _not_counts(counts)
                    if bad:
                        return f"{where} on {platform} {level}: expected counts, {found(bad[0])}"
    audit = data.get("audit")
    if audit is None:
        return None
    if not isinstance(audit, Mapping):
        return f"'audit': expected a table, {found(audit)}"
    for key in ("platforms", "sites"):
        tables = audit.get(key, {})
        if not isinstance(tables, Mapping):
            return f"audit {key!r}: expected a table of platforms, {found(tables)}"
        for platform, counts in tables.items():
            bad = _not_counts(counts)
            if bad:
                return f"audit {key} of {platform}: expected counts, {found(bad[0])}"
    return None


def _not_counts(value: object) -> tuple[object] | None:
    """``(what is not a number,)`` in a table of counts (``value`` itself where it is no
    table); ``None`` where every value is a number."""
    if not isinstance(value, Mapping):
        return (value,)
    for n in value.values():
        if isinstance(n, bool) or not isinstance(n, int | float):
            return (n,)
    return None


ChangeKind = Literal["grew", "shrank", "stopped_lowering", "now_lowers"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One count of one platform that differs from a base (a baseline or a report) to a
    head: a check's (``nodeid``, ``check``), or the audited suite's (``check`` is ``None``;
    with the sites behind it that moved the same way)."""

    platform: str
    kind: ChangeKind
    nodeid: str | None = None
    check: str | None = None
    level: str = "lowered"
    metric: str | None = None
    """``vendor``, ``custom``, ``library.<name>``, ``rewrite_days``...; ``None`` for a
    change of whether it lowers."""
    before: float | None = None
    after: float | None = None
    sites: tuple[SiteCount, ...] = ()
    threshold: Setting[float] | None = None
    """For device memory: the share it may grow by (``memory_growth``) and where that was
    set; ``None`` for a count (any change is one)."""
    capacity: float | None = None
    """For device memory that grew past the device's capacity: that capacity (it no longer
    fits, whatever the threshold)."""

    @property
    def grew(self) -> bool:
        return self.kind == "grew"

    @property
    def fails(self) -> bool:
        """Growth, or a platform that no longer lowers (its counts became unknown)."""
        return self.kind in ("grew", "stopped_lowering")

    def finding(self) -> str:
        """The change itself, as a failure leads with it: ``vendor calls grew 3 -> 5``,
        ``padding waste grew 10.9% -> 55.5%``, ``stopped lowering``; device memory with the
        share it moved and the threshold it was held to (``planned device memory grew 4.69
        GiB -> 6.75 GiB (+44%; memory_growth 10%, set in the default)``)."""
        if self.kind == "stopped_lowering":
            return "stopped lowering"
        if self.kind == "now_lowers":
            return "lowers again"
        share = self.share()
        return self._moved() + (f" ({share})" if share else "") + self._no_longer_fits()

    def _moved(self) -> str:
        """``vendor calls grew 3 -> 5``."""
        assert self.metric is not None
        assert self.before is not None
        assert self.after is not None
        shown = functools.partial(value_text, self.metric)
        return (
            f"{metric_label(self.metric)} {self.kind} {shown(self.before)} -> {shown(self.after)}"
        )

    def _no_longer_fits(self) -> str:
        """``: no longer fits the device's 15.75 GiB`` where memory grew past the capacity."""
        if self.capacity is None:
            return ""
        return f": no longer fits the device's {value_text(self.metric, self.capacity)}"

    def share(self) -> str:
        """``+44%; memory_growth 10%, set in pyproject.toml [tool.jaxport]``: how much a
        memory figure moved, of the base's, and the threshold it was held to; ``""`` for a
        count."""
        if self.threshold is None or not self.before or self.after is None:
            return ""
        moved = self.after / self.before - 1
        return (
            f"{moved:+.0%}; memory_growth {self.threshold.value * 100:g}%, set in "
            f"{self.threshold.origin}"
        )

    def describe(self, since: str = "") -> str:
        """``check 'mlp' on cuda: vendor calls grew 3 -> 5 (+2)`` (+ ``since``); the audited
        suite's: ``cuda: cusolver calls grew 0 -> 1 (+1)``; device memory's with its share and
        threshold: ``check 'step' on tpu: planned device memory grew 4.69 GiB -> 6.75 GiB
        (+2.06 GiB, +44%; memory_growth 10%, set in the default) (compiled)``."""
        where = self.platform if self.check is None else f"check {self.check!r} on {self.platform}"
        then = "at the baseline" if since else "before"
        if self.kind == "stopped_lowering":
            return f"{where}: lowered {then}, fails to lower now"
        if self.kind == "now_lowers":
            return f"{where}: failed to lower {then}, lowers now"
        assert self.before is not None
        assert self.after is not None
        delta = self.after - self.before
        level = "" if self.level == "lowered" else f" ({self.level})"
        moved = f"{'+' if delta > 0 else '-'}{value_text(self.metric, abs(delta))}"
        share = self.share()
        return (
            f"{where}: {self._moved()} ({moved}{', ' + share if share else ''})"
            f"{self._no_longer_fits()}{level}{' ' + since if since else ''}"
        )

    def to_dict(self) -> JsonObject:
        """An audited suite's change as the report keeps it (``audit.baseline_growth``)."""
        return {
            "platform": self.platform,
            "metric": self.metric,
            "before": self.before,
            "after": self.after,
            "sites": [{"site": c.site, "before": c.before, "after": c.after} for c in self.sites],
        }

    @classmethod
    def from_dict(cls, data: JsonMapping) -> Change:
        before, after = _number(read_number(data, "before")), _number(read_number(data, "after"))
        return cls(
            platform=read_text(data, "platform"),
            kind="grew" if after > before else "shrank",
            metric=read_text(data, "metric"),
            before=before,
            after=after,
            sites=tuple(
                SiteCount(
                    site=read_text(c, "site"),
                    before=read_integer(c, "before"),
                    after=read_integer(c, "after"),
                )
                for c in read_tables(data, "sites", None)
            ),
        )


def _metric_order(metric: str) -> tuple[int, str]:
    """Calls first (vendor, custom, then per library), then the formats-and-layout numbers:
    the order a failure and a diff list what changed."""
    if metric in ("vendor", "custom"):
        return (0, "0" if metric == "vendor" else "1")
    return (1 if metric.startswith("library.") else 2, metric)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def value_text(metric: str | None, value: float) -> str:
    """A metric's value as a person reads it: ``3``, ``1.5``, ``10.9%`` for a share,
    ``4.69 GiB`` for device memory."""
    if metric in (DEVICE_MEMORY, DEVICE_CAPACITY):
        return gib_text(value) if value >= GIB else size_text(value)
    return f"{value:.1%}" if metric in FRACTIONS else _num(value)


def _number(value: float) -> float:
    """A count (an ``int``) or a share (a ``float``), as stored."""
    found = float(value)
    return int(found) if found.is_integer() else found


def memory_change(
    before: Counted, after: Counted, threshold: Setting[float]
) -> tuple[ChangeKind, float | None] | None:
    """How a platform entry's device memory moved from ``before`` to ``after`` (the
    baseline's ``memory`` entries): ``("grew", capacity)`` where it no longer fits the
    device's capacity (whatever the threshold), ``("grew", None)`` or ``("shrank", None)``
    where it moved by more than ``threshold`` of the base's; ``None`` where it moved less (a
    plan does not move run to run, but a compiler's release may move it a little).

    >>> threshold = Setting(value=0.1, origin="the default")
    >>> memory_change({"device_memory": 100}, {"device_memory": 120}, threshold)
    ('grew', None)
    >>> memory_change({"device_memory": 100}, {"device_memory": 105}, threshold) is None
    True
    >>> memory_change({"device_memory": 100}, {"device_memory": 105, "device_capacity": 104},
    ...               threshold)
    ('grew', 104)
    """
    a, b = before.get(DEVICE_MEMORY), after.get(DEVICE_MEMORY)
    if a is None or b is None:
        return None
    capacity = after.get(DEVICE_CAPACITY)
    if capacity is not None and a <= capacity < b:
        return "grew", capacity
    if b > a * (1 + threshold.value):
        return "grew", None
    if a > b * (1 + threshold.value):
        return "shrank", None
    return None


def _memory_changes(
    nodeid: str, check: str, platform: str, before: Levels, after: Levels,
    threshold: Setting[float],
) -> list[Change]:  # fmt: skip
    old, new = before.get(MEMORY), after.get(MEMORY)
    moved = memory_change(old, new, threshold) if old and new else None
    if moved is None or not old or not new:
        return []
    kind, capacity = moved
    return [
        Change(nodeid=nodeid, check=check, platform=platform, kind=kind, level="compiled",
               metric=DEVICE_MEMORY, before=old[DEVICE_MEMORY], after=new[DEVICE_MEMORY],
               threshold=threshold, capacity=capacity)
    ]  # fmt: skip


def _diff_test(
    nodeid: str, base: TestCounts, head: TestCounts, *, memory_growth: Setting[float]
) -> list[Change]:
    changes: list[Change] = []
    for check in sorted(base.keys() & head.keys()):
        base_platforms, head_platforms = base[check], head[check]
        for platform in ordered_platforms(base_platforms.keys() & head_platforms.keys()):
            before, after = base_platforms[platform], head_platforms[platform]
            if before.get("lowered") is not None and after.get("lowered", {}) is None:
                changes.append(
                    Change(nodeid=nodeid, check=check, platform=platform, kind="stopped_lowering")
                )
                continue
            if "lowered" in before and before["lowered"] is None and after.get("lowered"):
                changes.append(
                    Change(nodeid=nodeid, check=check, platform=platform, kind="now_lowers")
                )
                continue
            for level in LEVELS:
                old, new = before.get(level), after.get(level)
                if not old or not new:
                    continue
                for metric in sorted(old.keys() | new.keys(), key=_metric_order):
                    a, b = old.get(metric, 0), new.get(metric, 0)
                    if a != b and compared(metric, old, new):
                        kind: ChangeKind = "grew" if b > a else "shrank"
                        changes.append(
                            Change(nodeid=nodeid, check=check, platform=platform, kind=kind,
                                   level=level, metric=metric, before=a, after=b)
                        )  # fmt: skip
            changes += _memory_changes(nodeid, check, platform, before, after, memory_growth)
    return changes


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportDiff:
    """What changed between a base and a head report (or baseline)."""

    changes: tuple[Change, ...] = ()
    new_tests: tuple[str, ...] = ()
    removed_tests: tuple[str, ...] = ()
    new_checks: tuple[tuple[str, str], ...] = ()
    removed_checks: tuple[tuple[str, str], ...] = ()
    compared_tests: int = 0
    audit: tuple[Change, ...] = ()
    """The suite audit's counts that changed (``--jaxport-audit`` on both sides)."""
    new_sites: tuple[tuple[str, str], ...] = ()
    """``(platform, site)``: the suite audit's sites the head has and the base has not."""
    removed_sites: tuple[tuple[str, str], ...] = ()
    audit_compared: bool = False
    """Whether both sides have audit counts (else the audit is not compared)."""

    @property
    def grew(self) -> bool:
        """Whether some count grew or some platform stopped lowering: ``jaxport diff`` exits 1."""
        return any(c.fails for c in self.changes) or any(c.grew for c in self.audit)

    @property
    def growth(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.fails)

    @property
    def shrinkage(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if not c.fails)

    def headline(self) -> str:
        text = (
            f"{len(self.growth)} grew, {len(self.shrinkage)} shrank, "
            f"{counted(len(self.new_tests), 'new test')}, "
            f"{counted(len(self.removed_tests), 'removed test')} "
            f"({counted(self.compared_tests, 'test')} compared)"
        )
        if self.audit_compared:
            grew = sum(c.grew for c in self.audit)
            text += (
                f"; suite audit: {grew} grew, {len(self.audit) - grew} shrank, "
                f"{counted(len(self.new_sites), 'new site')}, "
                f"{counted(len(self.removed_sites), 'removed site')}"
            )
        return text


def counted(n: int, noun: str) -> str:
    """``1 new test``, ``2 new tests``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def diff(
    base: Report | Counts, head: Report | Counts, *, memory_growth: Setting[float] | None = None
) -> ReportDiff:
    """What grew and shrank from ``base`` to ``head`` (reports or baselines, in any mix).

    Counts are compared per test, check, platform and level, at each level both sides have
    (a compiled census is never compared with a lowered one); device memory where both
    sides have a plan, past ``memory_growth`` of the base's (:func:`memory_change`; the
    default where ``None``). New and removed tests and checks are listed; they are not
    growth.
    """
    threshold = _threshold(memory_growth)
    base_counts, head_counts = baseline_of(base), baseline_of(head)
    old, new = base_counts["tests"], head_counts["tests"]
    base_audit, head_audit = base_counts.get("audit"), head_counts.get("audit")
    compared = False
    audit: list[Change] = []
    added: list[tuple[str, str]] = []
    removed: list[tuple[str, str]] = []
    if isinstance(base_audit, Mapping) and isinstance(head_audit, Mapping):
        compared = True
        audit = audit_changes(base_audit, head_audit)
        added, removed = site_changes(base_audit, head_audit)
    changes: list[Change] = []
    new_checks: list[tuple[str, str]] = []
    removed_checks: list[tuple[str, str]] = []
    common = sorted(old.keys() & new.keys())
    for nodeid in common:
        changes += _diff_test(nodeid, old[nodeid], new[nodeid], memory_growth=threshold)
        new_checks += [(nodeid, c) for c in sorted(new[nodeid].keys() - old[nodeid].keys())]
        removed_checks += [(nodeid, c) for c in sorted(old[nodeid].keys() - new[nodeid].keys())]
    return ReportDiff(
        changes=tuple(changes),
        new_tests=tuple(sorted(new.keys() - old.keys())),
        removed_tests=tuple(sorted(old.keys() - new.keys())),
        new_checks=tuple(new_checks),
        removed_checks=tuple(removed_checks),
        compared_tests=len(common),
        audit=tuple(audit),
        new_sites=tuple(added),
        removed_sites=tuple(removed),
        audit_compared=compared,
    )


# -- baselines --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Growth:
    """What ``--jaxport-baseline`` found for one test: growth fails it, news do not."""

    nodeid: str
    message: str
    fails: bool
    change: Change | None = None


def compare_to_baseline(
    baseline: Counts,
    nodeid: str,
    checks: Sequence[Probe],
    *,
    memory_growth: Setting[float] | None = None,
) -> list[Growth]:
    """Compare one test's checks with the baseline's counts (device memory within
    ``memory_growth``: :func:`memory_change`).

    ``[]`` when nothing grew and nothing is new. A test or check missing from the baseline
    gives one ``fails=False`` entry; every grown count, and every platform that no longer
    lowers, a ``fails=True`` one, e.g. ``check 'mlp' on cuda: vendor calls grew 3 -> 5 (+2)
    since the baseline``. Counts that shrank are not reported: update the baseline to keep them.
    """
    head = _test_counts(checks)
    base = baseline.get("tests", {}).get(nodeid)
    if base is None:
        if not head:
            return []
        return [
            Growth(
                nodeid=nodeid,
                message=f"{nodeid} is not in the baseline (new test): not compared; "
                "--jaxport-baseline-update records it",
                fails=False,
            )
        ]
    found = [
        Growth(
            nodeid=nodeid,
            message=f"check {name!r} is not in the baseline (new check): not compared",
            fails=False,
        )
        for name in sorted(head.keys() - base.keys())
    ]
    found += [
        Growth(nodeid=nodeid, message=c.describe("since the baseline"), fails=True, change=c)
        for c in _diff_test(nodeid, base, head, memory_growth=_threshold(memory_growth))
        if c.fails
    ]
    return found


def growth_violation(change: Change, origin: str, check: Probe | None) -> Violation:
    """A count of ``check`` that grew since the baseline at ``origin`` (or a
    platform that stopped lowering), as a failure says it, the way it says a broken budget:
    the finding first, then the sites behind the count at its level (every site of it: the
    baseline keeps counts, not sites), or why it no longer lowers."""
    kernels: tuple[Kernel, ...] = ()
    findings: tuple[Finding, ...] = ()
    details: tuple[str, ...] = ()
    result = check.platforms.get(change.platform) if check is not None else None
    if result is not None and change.metric is not None:
        kernels, findings = _sites_of(result, change.level, change.metric)
    elif result is not None and result.error:
        details = (result.error,)
    return Violation(
        check=change.check or "?", platform=change.platform, key=BASELINE_KEY,
        limit=change.before, origin=origin, found=change.after, what=change.finding(),
        level=change.level, kernels=kernels, findings=findings, details=details,
    )  # fmt: skip


_FINDINGS_OF: Mapping[str, Callable[[Finding], bool]] = {
    "format_findings": lambda f: f.kind == "format",
    "layout_findings": lambda f: f.kind == "layout",
    "not_compiling": lambda f: not f.compiles,
    "padding_waste": lambda f: f.rule == "tile-padding",
    "relayouts": lambda f: f.rule == "inserted-relayout",
    "relayout_bytes": lambda f: f.rule == "inserted-relayout",
}
"""Which findings move a formats-and-layout metric of a check (:data:`_FINDING_SITES` says
the same of the suite audit's site labels)."""


_LAYER_METRICS: Mapping[str, Layer] = {"vendor": "vendor", "custom": "custom"}
"""The metrics that count a layer's kernels (:func:`_calls`)."""


def _sites_of(
    result: PlatformProbe, level: str, metric: str
) -> tuple[tuple[Kernel, ...], tuple[Finding, ...]]:
    """The kernels or findings of ``result`` at ``level`` that ``metric`` counts."""
    census = result.compiled if level == "compiled" else result.census
    formats = result.compiled_formats if level == "compiled" else result.formats
    layer = _LAYER_METRICS.get(metric)
    if layer is not None:
        return (census.in_layer(layer) if census is not None else ()), ()
    if metric.startswith("library."):
        library = metric.removeprefix("library.")
        vendor = census.in_layer("vendor") if census is not None else ()
        return tuple(k for k in vendor if k.library == library), ()
    picks = _FINDINGS_OF.get(metric)
    if formats is None or picks is None:
        return (), ()
    return (), tuple(f for f in formats.findings if picks(f))


def file_of(nodeid: str) -> str:
    """``tests/test_m.py`` of ``tests/test_m.py::TestC::test_f[1]``."""
    return nodeid.split("::", 1)[0]


def match_baseline(
    baseline: Counts,
    tests: Iterable[TestEntry],
    *,
    file: str,
    outcomes: Mapping[str, str],
    deselected: Iterable[str] = (),
    partial_files: Iterable[str] = (),
    exists: Callable[[str], bool] = lambda file: True,
    strict: bool = False,
) -> BaselineMatch:
    """Match the baseline's entries with a run's ``tests`` (the report's entries).

    ``outcomes``: every test that ran, portable or not (``passed``, ``failed``, ``skipped``,
    ``error``); ``deselected``: the tests collected but not selected (``-k``, ``-m``,
    ``--deselect``, ``--lf``); ``partial_files``: test files only part of which was asked
    for (``t.py::test_a``): another test of theirs may exist unseen, so their entries that
    did not run are "not run", never stale; ``exists(file)``: whether a test file is still
    there.
    """
    entries: Mapping[str, TestCounts] = baseline.get("tests", {})
    checked = {t.nodeid: t for t in tests if t.checks}
    new = tuple(sorted(n for n in checked if n not in entries))
    skipped = set(deselected)
    ran = {file_of(n) for n in (*outcomes, *skipped)} - set(partial_files)
    compared, not_run = 0, 0
    new_checks: list[tuple[str, str]] = []
    stale: list[StaleEntry] = []
    for nodeid, checks in sorted(entries.items()):
        test = checked.get(nodeid)
        if test is not None:
            compared += 1
            names = {c.name for c in test.checks}
            new_checks += [(nodeid, name) for name in sorted(names - checks.keys())]
            if test.outcome == "passed":  # a test that stopped early made fewer
                stale += [StaleEntry(nodeid=nodeid, check=c, why="check-gone")
                          for c in sorted(checks.keys() - names)]  # fmt: skip
        elif outcomes.get(nodeid) == "passed":
            stale.append(StaleEntry(nodeid=nodeid, why="checks-nothing"))
        elif nodeid in outcomes or nodeid in skipped:
            not_run += 1
        elif file_of(nodeid) in ran:
            stale.append(StaleEntry(nodeid=nodeid, why="removed"))
        elif not exists(file_of(nodeid)):
            stale.append(StaleEntry(nodeid=nodeid, why="file-gone"))
        else:
            not_run += 1
    return BaselineMatch(
        file=file, entries=len(entries), compared=compared, new=new,
        new_checks=tuple(new_checks), stale=tuple(stale), not_run=not_run, strict=strict,
    )  # fmt: skip


def audit_counts(section: AuditSection) -> AuditCounts:
    """What ``--jaxport-baseline`` keeps of an audit: per platform the vendor, custom and
    per-library counts and the formats-and-layout numbers (:data:`METRICS`), and the sites
    behind them (``layer name at file:line``)."""
    counts: dict[str, dict[str, float]] = {}
    for platform, totals in section.totals.items():
        metrics: dict[str, float] = {"vendor": totals.vendor, "custom": totals.custom}
        metrics.update({f"library.{k}": n for k, n in totals.libraries.items()})
        for metric in METRICS:
            value = getattr(totals, metric, None)
            if metric not in metrics and isinstance(value, int | float):
                metrics[metric] = _number(round(value, 6))
        counts[platform] = {m: v for m, v in sorted(metrics.items()) if ratcheted(m)}
    found: dict[str, dict[str, int]] = {}
    for site in section.sites:
        label = _site_label(site)
        platform_sites = found.setdefault(site.platform, {})
        platform_sites[label] = platform_sites.get(label, 0) + site.dispatches
    return {
        "platforms": dict(sorted(counts.items())),
        "sites": {p: dict(sorted(s.items())) for p, s in sorted(found.items())},
    }


def _site_label(site: Hotspot) -> str:
    what = site.library or site.kind
    where = f" at {site.location}" if site.location else ""
    return f"{site.layer} {site.name} ({what}){where}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteCount:
    """One site's call-weighted count at the base and at the head (``0``: absent there)."""

    site: str
    """``vendor cusolver_syevd_ffi (cusolver) at src/m.py:5``: the baseline's key."""
    before: int
    after: int

    def describe(self) -> str:
        """``vendor cusolver_syevd_ffi (cusolver) at src/m.py:5 x1 (new)``."""
        if not self.after:
            return f"{self.site} (gone; was x{self.before})"
        was = " (new)" if not self.before else f" (was {self.before})"
        return f"{self.site} x{self.after}{was}"


def audit_changes(base: AuditCounts, head: AuditCounts) -> list[Change]:
    """Every audit count that differs from ``base`` to ``head`` (:func:`audit_counts` forms)
    on a platform both have, with the sites behind it that grew (or are new) where it grew,
    that shrank (or are gone) where it shrank."""
    changes = []
    base_counts, head_counts = base.get("platforms", {}), head.get("platforms", {})
    for platform in sorted(base_counts.keys() & head_counts.keys()):
        before, after = base_counts[platform], head_counts[platform]
        old = base.get("sites", {}).get(platform, {})
        new = head.get("sites", {}).get(platform, {})
        for metric in sorted(before.keys() | after.keys()):
            a, b = _number(before.get(metric, 0)), _number(after.get(metric, 0))
            if a == b or not compared(metric, before, after):
                continue
            moved = [
                SiteCount(site=label, before=old.get(label, 0), after=new.get(label, 0))
                for label in sorted(old.keys() | new.keys())
                if _site_counts_for(label, metric)
                and (new.get(label, 0) > old.get(label, 0)) == (b > a)
                and new.get(label, 0) != old.get(label, 0)
            ]
            changes.append(
                Change(platform=platform, kind="grew" if b > a else "shrank", metric=metric,
                       before=a, after=b, sites=tuple(moved))
            )  # fmt: skip
    return changes


def site_changes(
    base: AuditCounts, head: AuditCounts
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(new sites, removed sites)`` from ``base`` to ``head`` as ``(platform, site)`` pairs,
    on the platforms both have (:func:`audit_counts` forms)."""
    old_sites, new_sites = base.get("sites", {}), head.get("sites", {})
    common = sorted(base.get("platforms", {}).keys() & head.get("platforms", {}).keys())
    added, removed = [], []
    for platform in common:
        old, new = old_sites.get(platform, {}), new_sites.get(platform, {})
        added += [(platform, label) for label in sorted(new.keys() - old.keys())]
        removed += [(platform, label) for label in sorted(old.keys() - new.keys())]
    return added, removed


_FINDING_SITES: Mapping[str, tuple[str, str]] = {
    "format_findings": ("format", ""),
    "layout_findings": ("layout", ""),
    "not_compiling": ("format", "(not-compiled)"),
    "padding_waste": ("layout", " tile-padding "),
    "relayouts": ("layout", " inserted-relayout "),
    "relayout_bytes": ("layout", " inserted-relayout "),
}
"""Which sites move a formats-and-layout metric: their layer, and what their label holds."""


def _site_counts_for(label: str, metric: str) -> bool:
    layer = label.split(" ", 1)[0]
    if metric.startswith("library."):
        return layer == "vendor" and f"({metric.removeprefix('library.')})" in label
    if metric in _FINDING_SITES:
        wanted, part = _FINDING_SITES[metric]
        return layer == wanted and part in label
    return layer == metric
