"""What every report format shows, built once from a report (pure: a typed report in, values out).

:func:`build_view` reads a :class:`~pytest_jaxport.report.document.Report` (as
:func:`pytest_jaxport.report.load` reads a file, older schema versions upgraded, or as the
plugin builds it) into a :class:`ReportView`: the headline counts, the problems grouped by
budget key and platform, where the lock-in lives (hotspots by source site), the platform
totals, the three numbers, the layer table, environment notes said once, and the per-test
matrix. :mod:`pytest_jaxport.view.text` (terminal text, Markdown) and
:mod:`pytest_jaxport.view.html` only lay it out: no format derives a fact of its own, so
they agree on every number. :class:`pytest_jaxport.view.display.DisplayOptions` (shared by the
plugin and ``jaxport show``) say how much of it to show.

Where to add something new, once for every format:

- a per-platform figure (a new field of
  :class:`~pytest_jaxport.report.totals.PlatformTotals`, e.g. collectives by kind): one
  :class:`Column` in :data:`TOTALS_COLUMNS`;
- a per-check, per-platform fact in the matrix: :func:`cell_of`;
- how a runtime share's basis is labelled (an error band, what was left out):
  :func:`share_label`;
- a new kind of problem: :func:`problems_of`;
- another source of censuses for the hotspots: :class:`pytest_jaxport.model.hotspots.Reach`.

The suite audit (``--jaxport-audit``, the report's ``audit`` section) is part of the same
view (:func:`audit_parts` reads it): its failures to re-lower and its suite
budget failures are problem groups (``audit``), and its three numbers, sites and platform
totals are the headline's where the run has no checks (``unit`` says what the numbers
count), else :attr:`AuditView.numbers`, next to the checks'.

The view reads a :class:`~pytest_jaxport.report.document.Report`'s attributes: the report
was checked once, where it was read (:func:`pytest_jaxport.report.load`), so nothing here
guesses at a missing or malformed field. Platforms are the report's (its configuration,
its totals, its checks), never a list of this module's.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from pytest_jaxport.model.budget import MAY_DIFFER_KEY, NUMERICS_KEYS, Violation
from pytest_jaxport.model.census import Census
from pytest_jaxport.model.cost import (
    RANKING,
    SHARE_LAYERS,
    RuntimeShare,
    ranking_of,
    share_basis,
    share_basis_short,
)
from pytest_jaxport.model.emulation import (
    HOST,
    emulated_label,
    emulation_lines,
    may_differ_lines,
    not_emulated_message,
)
from pytest_jaxport.model.formats import FINDING_KINDS, Finding
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.probe import (
    MAY_DIFFER,
    PlatformProbe,
    Probe,
    emulated_status,
    numerics_status,
)
from pytest_jaxport.model.targets import (
    COLLECTIVE_LIBRARIES,
    DEFAULT_HOME,
    NVIDIA_PLATFORM,
    PLATFORM_VENDORS,
)
from pytest_jaxport.model.tooling import Assumption
from pytest_jaxport.report.audit_section import AuditSection, Computation, computation_label
from pytest_jaxport.report.baseline import Change, file_of
from pytest_jaxport.report.document import (
    TOOL_NAME,
    BaselineMatch,
    Config,
    Environment,
    Merged,
    Report,
    StaleEntry,
)
from pytest_jaxport.report.entries import Check, TestEntry
from pytest_jaxport.report.totals import Numbers, PlatformTotals, Tooling
from pytest_jaxport.view.display import DisplayOptions

NO_AUTOTUNE_NOTE = (
    "deviceless compilation does not autotune, so Triton-vs-cuBLAS picks can differ from a real GPU"
)
NVIDIA = NVIDIA_PLATFORM
MARKER_ORIGIN = "the test's own marker"
"""Where a limit was set when a test's own ``portable`` mark set it (one phrase for all)."""

# -- formatting shared by every format ---------------------------------------------------------


def number(n: int | float) -> str:
    """``2,000``; floats as ``2.5``."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.4g}"
    return f"{int(n):,}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 check``, ``2,000 checks``, ``3 differing leaves`` (``many`` for irregular plurals)."""
    return f"{number(n)} {word if n == 1 else many or word + 's'}"


def pct(fraction: float) -> str:
    """``0%``, ``<0.1%``, ``4.5%``, ``31%``."""
    value = fraction * 100
    if value == 0:
        return "0%"
    if value < 0.1:
        return "<0.1%"
    if value < 10:
        return f"{value:.1f}".removesuffix(".0") + "%"
    return f"{value:.0f}%"


def _as_shown(fraction: float | None) -> float:
    """A share at the precision :func:`pct` prints it: rows that read the same are ordered by
    what follows (dispatches, checks, place), not by a difference no reader can see and that
    moves between JAX versions."""
    value = (fraction or 0.0) * 100
    return round(value, 1) if value < 10 else float(round(value))


def days_text(days: float) -> str:
    """``11``, ``2.5``, ``0.25``."""
    return f"{days:.2f}".rstrip("0").rstrip(".")


def seconds_text(seconds: float) -> str:
    """A time in the unit that reads best: ``5.76 ns``, ``41 µs``, ``12.5 ms``, ``3.2 s``."""
    if seconds <= 0 or not math.isfinite(seconds):
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            return f"{seconds / scale:.3g} {unit}"
    raise AssertionError("unreachable")


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts ``test[4]`` before ``test[10]``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


def sentence(text: str) -> str:
    """``text`` with its first letter upper case, the rest as written (a heading)."""
    return text[:1].upper() + text[1:]


def first_line(text: str, limit: int = 200) -> str:
    """The first non-empty line of ``text``, cut at ``limit`` characters."""
    line = next((x.strip() for x in str(text).splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- the view -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Headline:
    """The suite's counts and what it was run against."""

    tests: int = 0
    checks: int = 0
    failed_tests: int = 0
    violations: int = 0
    platforms: tuple[str, ...] = ()
    reference: str = ""
    present: tuple[str, ...] = ()
    level: str = ""
    tool_version: str = ""
    schema_version: str = ""
    upgraded_from: str = ""
    facts: tuple[tuple[str, str], ...] = ()
    """Configuration and environment, as ``(label, value)`` pairs."""
    audit_failures: int = 0
    """The suite audit's budget failures (``fail_on``, the baseline): each fails the session,
    no test."""
    budgeted: bool | None = None
    """Whether ``[tool.jaxport.budget]`` (or one of its platform tables) sets a limit; ``None``
    where the report does not say. A marker's limits are its test's own, not recorded."""
    also_lowered: str = ""
    """The platforms checks lowered for beyond ``platforms`` and why (``cuda, rocm: from
    must_lower``; a marker's ``platforms`` can add one too); empty where there are none."""
    home: str = DEFAULT_HOME
    """The platform moving was measured from (``[tool.jaxport] home``; cuda where the
    report does not say): kernels to rewrite, days and the sites listed first are its."""
    not_collected: int = 0
    """Files pytest could not collect: their tests did not run."""
    mismatches: int = 0
    """Numerics mismatches that fail their tests (not among :attr:`violations`, which are
    the budgets' only)."""
    may_differ: tuple[tuple[str, int], ...] = ()
    """Per emulated platform, how many checks *may differ* there (emulated: they matched,
    but the chip's measured errors move the outputs beyond the tolerance)."""

    def may_differ_text(self) -> str:
        """``3 checks may differ on tpu (emulated)``; ``""`` where none may."""
        return ", ".join(
            f"{plural(n, 'check')} may differ on {platform} (emulated)"
            for platform, n in self.may_differ
            if n
        )

    def counts(self) -> str:
        """``2,000 portable tests, 2,400 checks, 97 failed, 120 budget violations`` (``, 3
        numerics mismatches`` where there are some, ``, 3 checks may differ on tpu
        (emulated)`` where any may); led by ``tests did not run: 1 file not collected; ``
        where pytest could not collect one."""
        return (
            f"{self.did_not_run()}{plural(self.tests, 'portable test')}, "
            f"{plural(self.checks, 'check')}, {number(self.failed_tests)} failed, "
            f"{plural(self.violations, 'budget violation')}{self.mismatches_text(', ')}"
        )

    def mismatches_text(self, lead: str = "") -> str:
        """``3 numerics mismatches`` and ``3 checks may differ on tpu (emulated)``, each after
        ``lead``: numerics, apart from the budget violations; ``""`` without any."""
        said = [plural(self.mismatches, "numerics mismatch", "numerics mismatches")]
        said = said if self.mismatches else []
        differ = self.may_differ_text()
        return "".join(lead + part for part in (*said, *([differ] if differ else [])))

    def did_not_run(self) -> str:
        """``tests did not run: 1 file not collected; `` (``""`` where every file was)."""
        if not self.not_collected:
            return ""
        return f"tests did not run: {plural(self.not_collected, 'file')} not collected; "

    def setting(self) -> str:
        """``platforms: cpu, tpu (reference cpu); present here: cpu; level: lowered (...);
        home tpu (moves priced off it)``: the home said where it is not cuda (the numbers'
        "moving off cuda" says that one)."""
        also = f"{self.also_lowered}; " if self.also_lowered else ""
        home = f"; home {self.home} (moves priced off it)" if self.home != DEFAULT_HOME else ""
        return (
            f"platforms: {', '.join(self.platforms) or 'none'} "
            f"(reference {self.reference or '-'}); {also}"
            f"present here: {', '.join(self.present) or 'none'}; {self.level}{home}"
        )


ProblemKind = Literal[
    "violation", "mismatch", "drift", "not-lowered", "numerics", "failure", "baseline"
]
"""``mismatch``: outputs beyond the tolerance, which fail the test (numerics, not a budget);
``numerics``: a difference no tolerance judged (a finding)."""
FAILURE_TITLES: Mapping[str, str] = {
    "failed": "failed: the test's own error",
    "error": "errored in setup or teardown",
    "crashed": "crashed: the worker died",
    "baseline": "counts grew since the baseline",
    "outputs": "outputs could not be saved",
    "collection": "did not run: pytest could not collect them",
}
PROBLEM_KINDS: tuple[ProblemKind, ...] = (
    "violation",
    "mismatch",
    "drift",
    "not-lowered",
    "numerics",
    "failure",
    "baseline",
)
MISMATCH_KEYS: Mapping[str, str] = {
    "numerics": "numerics differ",
    "emulated_numerics": "numerics differ (emulated on cpu)",
    MAY_DIFFER_KEY: "numerics may differ (emulated on cpu)",
}
"""What a numerics mismatch's group is called (its violation's key in the JSON): numerics,
never a budget key. An emulation that may differ on the chip (``may_differ = "fail"``) is
numerics too: grouped with them, not counted as a budget violation."""
DRIFT_KEY = "outputs differ across legs"
"""A merged report's drift: a check's saved outputs on one CI leg differ from the reference's
on another (``jaxport merge``); the test fails in the merged report."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing that needs attention: a violation, outputs that drift across CI legs, a check
    that does not lower, a numerics mismatch, or a test that failed for another reason."""

    kind: ProblemKind
    test: str
    check: str | None = None
    platform: str | None = None
    key: str = ""
    """The budget key; ``does not lower``, ``does not run``, ``numerics``; ``failed``,
    ``error``, ``crashed``, ``baseline``, ``outputs`` for failures."""
    found: str = ""
    limit: str = ""
    origin: str = ""
    message: str = ""
    """The whole finding in one line (a violation's headline, an error's first line)."""
    details: tuple[str, ...] = ()
    audit: bool = False
    """The suite audit's: computations that failed to re-lower (``test`` the first one's
    owner, ``check`` the computation), or a suite budget failure (``test`` is
    :data:`AUDITED_SUITE`)."""
    computations: tuple[str, ...] = ()
    """The suite audit's computations that share this finding: one problem for all that fail
    to lower for one platform with the same reason, whole in ``message``."""
    tests: tuple[str, ...] = ()
    """The tests that own ``computations`` (collection order, each once)."""

    @property
    def count(self) -> int:
        """How many findings this problem stands for (the computations sharing it)."""
        return max(1, len(self.computations))


COLLECTION = "collection"
"""A failure's key where pytest could not collect a file: its tests did not run, so the
report's counts are not the suite's."""
AUDITED_SUITE = "the audited suite"
"""What a suite-level audit problem names in place of a test (it fails the session)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProblemGroup:
    """Problems of one kind, key and platform: ``cuda max_library_calls.cudnn``."""

    kind: ProblemKind
    key: str
    platform: str | None
    rule: str
    """What the group's rows share: ``limit 2, set in pyproject.toml`` (the most common)."""
    problems: tuple[Problem, ...]
    audit: bool = False
    """The suite audit's problems (``--jaxport-audit``), apart from the portable tests'."""

    @property
    def title(self) -> str:
        """``cuda: max_library_calls.cudnn``, ``tpu: does not lower``, ``crashed``; the suite
        audit's start ``audit``: ``audit: cuda: max_custom_calls``."""
        title = f"{self.platform}: {self.key}" if self.platform else FAILURE_TITLES.get(
            self.key, self.key)  # fmt: skip
        return f"audit: {title}" if self.audit else title

    @property
    def tests(self) -> int:
        return len({t for p in self.problems for t in p.tests or (p.test,)})

    @property
    def count(self) -> int:
        """Its problems, each of the suite audit's grouped findings counted per computation."""
        return sum(p.count for p in self.problems)

    def summary(self) -> str:
        """``40 violations in 38 tests (limit 2, set in pyproject.toml ...)``; the audit's
        ``1 suite violation (...)``, ``3 computations in 2 tests (...)``, ``2 counts``."""
        if self.kind == "baseline":  # how the baseline met the run (BaselineMatch)
            checks = sum(p.check is not None for p in self.problems)
            counted = [plural(n, noun) for n, noun in ((self.count - checks, "test"),
                                                       (checks, "check")) if n]  # fmt: skip
            if self.key == BASELINE_NONE:
                counted = []
            return ", ".join(counted) + (f" ({self.rule})" if counted else self.rule)
        nouns = {"violation": "violation", "failure": "test", "drift": "drift"}
        if self.key == COLLECTION:
            nouns = {"failure": "file"}
        if self.audit:
            nouns = {"violation": "suite violation", "failure": "count"}
        text = plural(self.count, nouns.get(self.kind, "computation" if self.audit
                                                      else "check"))  # fmt: skip
        if self.kind != "failure" and not (self.audit and self.kind == "violation"):
            text += f" in {plural(self.tests, 'test')}"
        return text + (f" ({self.rule})" if self.rule else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One column of the platform totals: a header, how to read it from a platform's
    :class:`~pytest_jaxport.report.totals.PlatformTotals`, and whether it only shows when
    some platform has the figure."""

    header: str
    read: Callable[[PlatformTotals], str]
    key: str | None = None
    """Shown only when some platform's totals have this figure (an attribute that is not
    ``None``; ``None``: always)."""
    numeric: bool = True
    terminal: bool = True
    """Whether the terminal's table has room for it (the layer table's row says the same
    there); Markdown and HTML show every column."""


def _count_of(key: str) -> Callable[[PlatformTotals], str]:
    return lambda totals: number(getattr(totals, key) or 0)


def _totals_level(totals: PlatformTotals) -> str:
    if not totals.compiled:
        return "lowered"
    return "compiled" if totals.compiled == totals.lowered else "mixed"


def _collective_calls(totals: PlatformTotals) -> str:
    return number(sum(count for count, _ in (totals.collectives or {}).values()))


TOTALS_COLUMNS: tuple[Column, ...] = (
    Column(header="lowered", read=_count_of("lowered")),
    Column(header="failed to lower", read=_count_of("failed_to_lower")),
    Column(header="compiled", read=_count_of("compiled"), key="compiled"),
    Column(header="failed to compile", read=_count_of("failed_to_compile"), key="compiled"),
    Column(header="vendor calls", read=_count_of("vendor")),
    Column(header="vendor sites", read=_count_of("vendor_sites")),
    Column(header="custom calls", read=_count_of("custom")),
    Column(header="custom sites", read=_count_of("custom_sites")),
    Column(header="collective calls", read=_collective_calls, key="collectives"),
    Column(
        header="format findings",
        read=_count_of("format_findings"),
        key="format_findings",
        terminal=False,
    ),
    Column(
        header="layout findings",
        read=_count_of("layout_findings"),
        key="layout_findings",
        terminal=False,
    ),
    Column(
        header="padding",
        read=lambda t: pct(t.padding_waste or 0.0),
        key="padding_waste",
        terminal=False,
    ),
    Column(
        header="padding (compiled)",
        read=lambda t: pct(t.compiled_padding_waste or 0.0),
        key="compiled_padding_waste",
        terminal=False,
    ),
    Column(header="relayouts", read=_count_of("relayouts"), key="relayouts", terminal=False),
    Column(header="level", read=_totals_level, numeric=False),
)
"""The platform totals, in every format. Add a per-platform figure here."""

TOTALS_NOTE = (
    "lowered / failed to lower: checks. Calls: call-weighted dispatches summed over checks "
    "(one function checked by 40 tests counts 40 times). Sites: distinct source lines and "
    "kernels, each counted once; kernels to rewrite are distinct sites. Format and layout "
    "findings: call-weighted, summed like calls; padding: the share of bytes moved that is "
    "tile padding, in the layouts the compiler gives arrays nothing constrains (the lowered "
    "model); padding (compiled): in the layouts the compiler chose, where it compiled "
    "(tpu); relayouts: transposes and copies XLA inserted (compiled level)."
)
AUDIT_TOTALS_NOTE = (
    "lowered / failed to lower: distinct computations the suite ran. Calls: call-weighted "
    "dispatches summed over the distinct computations (one computation 40 tests ran counts "
    "once). Sites: distinct source lines and kernels, each counted once; kernels to rewrite "
    "are distinct sites. Format and layout findings: call-weighted, summed like calls; "
    "padding: the share of bytes moved that is tile padding (the lowered model; compiled: "
    "the compiler's layouts)."
)


def totals_note(unit: str) -> str:
    """What the platform totals count, for numbers of checks or of audited computations."""
    return AUDIT_TOTALS_NOTE if unit == "computation" else TOTALS_NOTE


@dataclass(frozen=True, slots=True, kw_only=True)
class TotalsTable:
    """Per platform, the suite's counts (:data:`TOTALS_COLUMNS` that apply) and libraries."""

    headers: tuple[str, ...] = ()
    numeric: tuple[bool, ...] = ()
    rows: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, int], ...]], ...] = ()
    """``(platform, cells, libraries)``."""
    terminal: tuple[bool, ...] = ()
    """Per column, :attr:`Column.terminal`."""


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
    """Why this estimate is :data:`~pytest_jaxport.model.cost.RANKING` (``within ±37 points,
    xla's 26% could be 0%``), empty where its numbers read as amounts
    (:func:`ranking_text`)."""
    band_points: float | None = None
    """The estimate's error band, ± percentage points (``None`` for a measured share)."""
    band: tuple[tuple[float, float], ...] = ()
    """Where the boundaries between its layers may lie: each boundary ± the estimate's error
    band, as ``(from, to)`` fractions of the bar, overlapping ones joined; none for a
    measured share (:func:`band_spans`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteRow:
    """One NVIDIA-bound kernel or dispatch a move to a target has to deal with."""

    status: str
    name: str
    kind: str
    location: str | None
    check: str
    reason: str


COST_ITEMS: tuple[tuple[str, str], ...] = (
    ("kernel_rewrite", "kernel rewrites"),
    ("fallback_validation", "fallback validation"),
    ("vendor_gap", "vendor gaps"),
    ("tooling_assumption", "tooling assumptions"),
    ("format_rewrite", "format rewrites"),
    ("requantize", "re-quantization"),
    ("precision_review", "precision reviews"),
    ("layout_work", "layout work"),
    ("fixed", "fixed per target"),
)
FIXED = "fixed"
"""The cost model's key of the days every target costs whatever the code does."""
FIXED_LABEL = dict(COST_ITEMS)[FIXED]


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRow:
    """Kernels to rewrite and engineering days for one ``migrate_to`` target."""

    target: str
    kernels: int | None
    days: float | None
    breakdown: tuple[tuple[str, str, float], ...] = ()
    """``(cost-model key, label, days)``."""
    items: tuple[RewriteRow, ...] = ()
    fixed: float = 0.0
    """The cost model's ``fixed`` days, the same for every target whatever the code does."""
    from_project: float | None = None
    """``days`` less ``fixed``: what the project's findings cost (``None`` without days)."""
    not_lowered: tuple[str, ...] = ()
    """The platforms (the target, or the home platform) no check lowered: then there is no
    count and no price (:attr:`kernels` and :attr:`days` are ``None``), never 0."""

    def uncounted(self) -> str:
        """``not lowered`` / ``cuda (home) not lowered``: why there is no count; ``""``
        where there is one."""
        if not self.not_lowered:
            return ""
        names = [p if p == self.target else f"{p} (home)" for p in self.not_lowered]
        return ("" if names == [self.target] else f"{' and '.join(names)} ") + "not lowered"

    def count_text(self, missing: str = "-") -> str:
        """The kernels to rewrite, or why there is no count (``not lowered``); ``missing``
        where the report has neither."""
        if self.kernels is not None:
            return number(self.kernels)
        return self.uncounted() or missing

    @property
    def project_breakdown(self) -> tuple[tuple[str, str, float], ...]:
        """:attr:`breakdown` without the fixed part: the items the project's findings cost."""
        return tuple(row for row in self.breakdown if row[0] != FIXED)

    def project_items(self) -> str:
        """``fallback validation 3, tooling assumptions 3`` (the items that cost days)."""
        return ", ".join(f"{label} {days_text(d)}" for _, label, d in self.project_breakdown if d)

    def days_split(self) -> str:
        """``13.5 days = 8.5 from the project (fallback validation 3, ...) + 5 fixed per
        target``: the fixed part apart from what the project's findings cost (``8.5 days
        (...)`` where the cost model has no fixed part; ``-`` without days, ``not priced:
        not lowered`` where there is no count)."""
        if self.not_lowered:
            return f"not priced: {self.uncounted()}"
        if self.days is None or self.from_project is None:
            return "-"
        items = self.project_items()
        detail = f" ({items})" if items else ""
        if self.fixed <= 0:
            return f"{days_text(self.days)} days{detail}"
        return f"{days_text(self.days)} days = {self.parts(detail)}"

    def parts(self, detail: str = "") -> str:
        """``8.5 from the project + 5 fixed per target`` (``detail`` after the project's
        part); ``""`` without days or without a fixed part."""
        if self.from_project is None or self.fixed <= 0:
            return ""
        return (
            f"{days_text(self.from_project)} from the project{detail} + "
            f"{days_text(self.fixed)} {FIXED_LABEL}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerRow:
    layer: str
    portable: str
    counted: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Cell:
    """One check on one platform, as the matrix shows it."""

    platform: str
    lowers: bool
    vendor: int | None = None
    custom: int | None = None
    level: str = "lowered"
    numerics: str = "not present"
    violations: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    """Why it did not lower, compile or run; each mismatch's message."""
    compile_failed: bool = False
    needs_hardware: str | None = None
    """What JAX needed to lower here and this machine lacks (``GPU``): not the code's fault,
    but nothing is known about this platform until a machine with it runs the check."""
    not_compiling: tuple[str, ...] = ()
    """Rules saying the target's compiler rejects what lowered here (``float64-lu-not-
    compiled``): it lowers, but will not compile there."""

    emulated: str | None = None
    """How emulating this absent platform on the CPU went (``emulate = [...]``): ``match``,
    ``mismatch``, ``may differ``, ``failed``, ``not run``; ``None`` where it was not
    emulated. Never the platform's own numerics (:attr:`numerics`)."""
    emulation: tuple[str, ...] = ()
    """What the emulation did and where (``emulation_lines``), why it did not run, and each
    mismatch's message."""

    @property
    def emulated_label(self) -> str:
        """``tpu (emulated on cpu)``: how every format names the emulation's result."""
        return emulated_label(self.platform)

    @property
    def status(self) -> Literal["good", "warn", "bad"]:
        """``bad``: does not lower, over budget, numerics differ (its own or its
        emulation's); ``warn``: custom kernels, lowers but the format rules say it does not
        compile, not lowerable here (unknown), or its emulation may differ on the chip."""
        if self.needs_hardware and not self.violations:
            return "warn"
        if not self.lowers or self.violations or self.compile_failed:
            return "bad"
        if self.numerics in ("mismatch", "error") or self.emulated in ("mismatch", "failed"):
            return "bad"
        return (
            "warn" if self.custom or self.not_compiling or self.emulated == MAY_DIFFER else "good"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatRow:
    """One formats-and-layout finding of one check on one platform, as the details show it."""

    platform: str
    rule: str
    effect: str
    location: str | None
    count: int
    detail: str
    fraction: float | None = None
    """What it wastes or moves, as a share (padding of the bytes moved...); ``None`` where
    the finding is not sized."""
    unit: str = ""
    """What ``fraction`` is a share of: ``bytes`` moved, or matrix-unit ``flops``."""
    level: str = "lowered"
    compiles: bool = True

    def text(self) -> str:
        """``tpu: tile-padding (padded) at m.py:3: float32[4096,100] pads to ... (11%)``."""
        times = f" x{self.count}" if self.count != 1 else ""
        where = f" at {self.location}" if self.location else ""
        # matrix-unit findings say their idle share in the detail already
        sized = self.fraction is not None and self.unit == "bytes"
        size = f" ({pct(self.fraction or 0.0)} of the bytes moved)" if sized else ""
        level = " [compiled]" if self.level == "compiled" else ""
        said = f"{self.platform}: {self.rule} ({self.effect}){times}{where}: {self.detail}"
        return said + size + level


def format_rows(probe: Probe) -> tuple[FormatRow, ...]:
    """Every formats-and-layout finding of ``probe``, lowered then compiled, per platform."""
    rows = []
    for platform, result in probe.platforms.items():
        for census in (result.formats, result.compiled_formats):
            for f in census.findings if census is not None else ():
                rows.append(format_row(platform, f))
    return tuple(rows)


def format_row(platform: str, finding: Finding) -> FormatRow:
    return FormatRow(
        platform=platform,
        rule=finding.rule,
        effect=finding.effect,
        location=str(finding.location) if finding.location else None,
        count=finding.count,
        detail=finding.detail,
        fraction=finding.fraction if finding.of else None,
        unit=finding.unit,
        level=finding.level,
        compiles=finding.compiles,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckRow:
    name: str
    variant_of: str | None
    cells: Mapping[str, Cell]
    check: Check
    """The check as the report has it (its probe, tolerance, saved outputs)."""
    note: str | None = None

    @property
    def probe(self) -> Probe:
        """The check's :class:`Probe` (for per-test details)."""
        return self.check.probe

    @property
    def formats(self) -> tuple[FormatRow, ...]:
        """Its formats-and-layout findings, lowered then compiled per platform."""
        return format_rows(self.check.probe)


@dataclass(frozen=True, slots=True, kw_only=True)
class TestRow:
    nodeid: str
    outcome: str
    checks: tuple[CheckRow, ...] = ()
    error: str | None = None
    problem: bool = False
    """Whether the test failed or has a finding (a red or amber row)."""
    entry: TestEntry
    """The test as the report has it."""

    __test__ = False  # not a pytest test class

    @property
    def violations(self) -> tuple[Violation, ...]:
        """The test's broken limits."""
        return self.entry.violations


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    text: str
    checks: int = 0
    """How many checks it applies to (0: the whole report)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EmulationRow:
    """One emulated platform over the suite: how many checks it emulated, and how each
    went (``emulate = [...]``)."""

    platform: str
    checks: int = 0
    match: int = 0
    mismatch: int = 0
    failed: int = 0
    not_run: int = 0
    may_differ: int = 0
    """Matched, but may differ on the chip (its measured errors move the outputs beyond the
    tolerance)."""

    @property
    def label(self) -> str:
        """``tpu (emulated on cpu)``."""
        return emulated_label(self.platform)

    def counts(self) -> str:
        """``12 checks: 10 match, 1 may differ, 1 mismatch``; only the outcomes that occur."""
        parts = [
            f"{number(n)} {word}"
            for n, word in ((self.match, "match"), (self.may_differ, MAY_DIFFER),
                            (self.mismatch, "mismatch"), (self.failed, "failed"),
                            (self.not_run, "not run"))
            if n
        ]  # fmt: skip
        return f"{plural(self.checks, 'check')}: {', '.join(parts) or 'not compared'}"


LOWERING_WARNED = "JAX warned while pytest-jaxport lowered for {platforms}"
"""How every format introduces a warning JAX gave while pytest-jaxport lowered a check or an
audited computation for platforms not present here (``PlatformProbe.lowering_warnings``):
pytest-jaxport's lowering, not the test's run, so it is said here, never in pytest's warnings
summary (and never an error under ``-W error``)."""


def heard_while_lowering(platforms: Mapping[str, PlatformProbe]) -> dict[str, list[str]]:
    """Each warning of ``PlatformProbe.lowering_warnings`` once, with the platforms it was
    heard for, from a check's (or an audited computation's) platform entries."""
    heard: dict[str, list[str]] = {}
    for platform, entry in platforms.items():
        for warning in entry.lowering_warnings:
            heard.setdefault(warning, []).append(platform)
    return heard


def lowering_warning_lines(probe: Probe) -> list[str]:
    """A check's details: each warning JAX gave while pytest-jaxport lowered it for platforms
    not present here, with those platforms."""
    return [
        f"{LOWERING_WARNED.format(platforms=', '.join(platforms))} (not present here; not in "
        f"pytest's warnings summary): {warning}"
        for warning, platforms in heard_while_lowering(probe.platforms).items()
    ]


def lowering_warning_notes(heard: Sequence[Mapping[str, list[str]]]) -> list[tuple[str, int]]:
    """Said once for a report: each warning, and how many of the checks (or computations)
    whose ``heard`` it is (:func:`heard_while_lowering`) JAX gave it for."""
    counts: Counter[str] = Counter(w for found in heard for w in found)
    platforms = "platforms not present here"
    return [
        (
            f"{LOWERING_WARNED.format(platforms=platforms)} (not in pytest's warnings summary; "
            f"the details at -vv and lowering_warnings in the JSON say for which): {warning}",
            n,
        )
        for warning, n in counts.most_common()
    ]


EMULATION_NOTE = (
    "emulated on cpu: run as the platform would compute (its platform_dependent branch, its "
    "Pallas kernels in interpret mode, default-precision float32 dots rounded), never "
    "executed there; it catches kernel logic and precision sensitivity, not vendor-library "
    "algorithms or accumulation order (on tpu bounded by the chip's measured errors: a check "
    "they may move beyond its tolerance may differ)"
)
"""Said once in a report where a platform was emulated (docs/troubleshooting.md has more)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditTest:
    """One test of an audited suite and the computations it ran."""

    nodeid: str
    owns: tuple[str, ...] = ()
    """The jitted computations it ran first in collection order (``mlp [3f2a1b2c]``)."""
    uses: tuple[tuple[str, str], ...] = ()
    """``(computation, owner)``: jitted computations an earlier test ran first. JAX served
    them from its caches (traced and compiled before); the audit still counts the test a
    user."""
    eager_owned: int = 0
    """Eager op-by-op computations (a ``jnp`` function or primitive run outside jit) it ran
    first: counted, not named (their names are JAX's own: ``convert_element_type``)."""
    eager_used: int = 0
    """Eager op-by-op computations an earlier test ran first."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditView:
    """The suite audit (``--jaxport-audit``): what it saw and how; per test what it ran."""

    seen: Counter[str]
    """The report's ``seen`` counts (``computations``, ``jit``, ``eager``, ``tests``...); a
    count it does not have is 0."""
    hook: str
    """How computations were recorded: ``jax 0.10.2, jit cache-miss hook (...)``."""
    notes: tuple[str, ...] = ()
    """What it could not see here, and the audit's own errors."""
    lowers_everywhere: int = 0
    """Computations that lowered for every platform."""
    numbers: ReportView | None = None
    """Its three numbers, sites and totals, where the headline's are the checks' (a run with
    both); ``None`` where they are the headline's."""
    tests: tuple[AuditTest, ...] = ()
    failures: int = 0
    eager_users: str = "all"
    """``owner``: each eager op is counted in the first test that ran it only
    (``[tool.jaxport.audit] eager_users``)."""
    budgeted: bool = False
    """Whether ``[tool.jaxport.audit] fail_on`` set a limit (the section's ``fail_on``) or
    the suite broke one: only then is the suite "within its audit budget"."""

    def counted(self) -> str:
        """``17 distinct computations (3 jit, 14 eager op-by-op)``."""
        seen = self.seen
        return (
            f"{plural(seen['computations'], 'distinct computation')} "
            f"({number(seen['jit'])} jit, {number(seen['eager'])} eager op-by-op)"
        )

    def seen_line(self) -> str:
        """``34 distinct computations (5 jit, 29 eager op-by-op) in 7 of 9 tests; 8 run by
        more than one test``."""
        seen = self.seen
        text = (
            f"{plural(seen['computations'], 'distinct computation')} "
            f"({number(seen['jit'])} jit, {number(seen['eager'])} eager "
            f"op-by-op) in {number(seen['tests_using'])} of "
            f"{plural(seen['tests'], 'test')}; {number(seen['shared'])} run by "
            "more than one test"
        )
        if self.eager_users == "owner" and seen["eager"]:
            text += " (an eager op: in the first test that ran it)"
        if seen["partitioned"]:
            text += (
                f"; {number(seen['partitioned'])} partitioned over several devices (with the "
                "collectives XLA's SPMD partitioner inserts)"
            )
        return text

    def not_audited(self) -> str | None:
        """``4 compilations outside jit dispatch ...``; ``None`` when there were none."""
        n = self.seen["compiled_outside"]
        if not n:
            return None
        return (
            f"{plural(n, 'compilation')} outside jit dispatch, counted but not audited "
            "(ahead-of-time .lower().compile(), pmap on jax < 0.7)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportView:
    """Everything a report format shows, in the order of importance."""

    headline: Headline
    problems: tuple[ProblemGroup, ...] = ()
    hotspots: tuple[Hotspot, ...] = ()
    totals: TotalsTable = field(default_factory=TotalsTable)
    shares: tuple[ShareRow, ...] = ()
    targets: tuple[TargetRow, ...] = ()
    layers: tuple[LayerRow, ...] = ()
    tooling: tuple[Assumption, ...] = ()
    notes: tuple[Note, ...] = ()
    tests: tuple[TestRow, ...] = ()
    platforms: tuple[str, ...] = ()
    """Matrix columns: the configured platforms, then any other the report mentions."""
    deviceless: bool = False
    """cuda was compiled without a GPU: the report says deviceless compiles do not autotune."""
    compiled_gaps: tuple[tuple[str, str, str], ...] = ()
    """``(test, check, line)`` where the lowered prediction and the compiled reality differ,
    and what compiling without vendor libraries gave (:func:`prediction_gap`,
    :func:`what_if_line`)."""
    transformations: tuple[tuple[str, str], ...] = ()
    """``(test, line)`` per function checked with transformations (:func:`variant_lines`)."""
    unit: str = "check"
    """What the numbers (hotspots, totals, shares, targets) count: ``check``, or
    ``computation`` where they are a suite audit's (a run without checks)."""
    audit: AuditView | None = None
    """The suite audit (``--jaxport-audit``), where the report has one."""
    collectives: tuple[tuple[str, str], ...] = ()
    """``(platform, what)`` per platform whose checks have collectives: by kind, how many the
    SPMD partitioner inserted, what runs them there and on the other platforms
    (:func:`collectives_of`)."""
    devices: Mapping[str, str] = field(default_factory=dict)
    """The device each platform's formats-and-layout findings were judged for."""
    emulations: tuple[EmulationRow, ...] = ()
    """Per emulated platform, its checks' outcomes (:func:`emulations_of`)."""
    baseline: BaselineMatch | None = None
    """How the baseline (``--jaxport-baseline``) met the run, where one was compared."""
    padding: Mapping[str, float] = field(default_factory=dict)
    """Per platform, the share of bytes moved that is tile padding, where there is any."""

    @property
    def problem_count(self) -> int:
        return sum(g.count for g in self.problems)

    def all_clear(self) -> str:
        """What a report without problems says, claiming no budget that was never set:
        ``every audited computation lowers on every platform; no suite budget:
        [tool.jaxport.audit] fail_on sets none``."""
        if self.unit == "computation":  # an audit of an unchanged suite: no portable test
            lowers = "every audited computation lowers on every platform"
            if self.audit is not None and self.audit.budgeted:
                return f"{lowers}, the suite within its audit budget"
            return f"{lowers}; no suite budget: [tool.jaxport.audit] fail_on sets none"
        if self.headline.budgeted is False:
            return "every check lowers, no limit broken; [tool.jaxport.budget] sets none"
        return "every portable test within budget, every check lowers"

    def within_budget(self) -> str:
        """The verdict on budgets where none was broken, claiming none that was never set:
        ``every portable test within budget``, ``suite audit within its budget``, or that
        nothing set one."""
        if self.unit == "computation":
            if self.audit is not None and self.audit.budgeted:
                return "suite audit within its budget"
            return "no suite audit budget: [tool.jaxport.audit] fail_on sets none"
        if self.headline.budgeted is False:
            return "no limit broken; [tool.jaxport.budget] sets none"
        return "every portable test within budget"

    def numbers_line(self) -> str:
        """What was counted, in one line (``-q``): per platform what lowered (and how many
        failed to), the vendor and custom calls, then the kernels to rewrite per target:
        ``lowered: cpu 3, tpu 2 (1 failed); vendor calls: cpu 3, tpu 0; custom calls: cpu 0,
        tpu 1; kernels to rewrite off cuda: tpu 0`` (off the home platform; of the checks, or
        of a suite audit's distinct computations: :attr:`unit`); ``""`` where nothing was
        counted."""
        totals = self.totals
        column = {header: i for i, header in enumerate(totals.headers)}
        if "lowered" not in column:
            return ""

        def cell(cells: Sequence[str], header: str) -> str:
            return cells[column[header]] if header in column else "0"

        lowered = [
            f"{platform} {cell(cells, 'lowered')}"
            + (f" ({failed} failed)" if (failed := cell(cells, "failed to lower")) != "0" else "")
            for platform, cells, _ in totals.rows
        ]
        parts = ["lowered: " + ", ".join(lowered)]
        for header in ("vendor calls", "custom calls"):
            counts = [f"{platform} {cell(cells, header)}" for platform, cells, _ in totals.rows]
            parts.append(f"{header}: " + ", ".join(counts))
        if self.targets:
            parts.append(f"kernels to rewrite off {self.headline.home}: " + ", ".join(
                f"{t.target} {t.count_text()}" for t in self.targets
            ))  # fmt: skip
        return "; ".join(parts)

    def select(self, options: DisplayOptions) -> ReportView:
        """This view narrowed to ``options.platform`` and, for the per-test lists, to failed
        tests (``options.failed_only``). Headline counts stay the suite's."""
        view = self
        if options.failed_only:
            view = dataclasses.replace(
                view, tests=tuple(t for t in view.tests if t.outcome in ("failed", "error"))
            )
        platform = options.platform
        if platform is None:
            return view
        groups = []
        for group in view.problems:
            kept = tuple(p for p in group.problems if p.platform in (None, platform))
            if kept:
                groups.append(dataclasses.replace(group, problems=kept))
        tests = tuple(
            dataclasses.replace(
                t,
                checks=tuple(
                    dataclasses.replace(
                        c, cells={p: x for p, x in c.cells.items() if p == platform}
                    )
                    for c in t.checks
                ),
            )
            for t in view.tests
        )
        targets = view.targets
        if any(t.target == platform for t in targets):
            targets = tuple(t for t in targets if t.target == platform)
        audit = view.audit
        if audit is not None and audit.numbers is not None:
            audit = dataclasses.replace(audit, numbers=audit.numbers.select(options))
        return dataclasses.replace(
            view,
            audit=audit,
            problems=tuple(groups),
            hotspots=tuple(h for h in view.hotspots if h.platform == platform),
            padding={p: f for p, f in view.padding.items() if p == platform},
            totals=dataclasses.replace(
                view.totals, rows=tuple(r for r in view.totals.rows if r[0] == platform)
            ),
            shares=tuple(s for s in view.shares if s.platform == platform),
            emulations=tuple(e for e in view.emulations if e.platform == platform),
            targets=targets,
            tests=tests,
            platforms=tuple(p for p in view.platforms if p == platform),
        )

    def layout_group(self, platform: str) -> LayoutGroup | None:
        """``platform``'s layout findings as one group (:func:`layout_group_of`)."""
        padding = next((f for p, f in self.padding.items() if p == platform), None)
        return layout_group_of(self.hotspots, platform, padding)

    def sites_shown(
        self, platform: str, options: DisplayOptions, rows: int | None = None
    ) -> tuple[list[Hotspot], LayoutGroup | None]:
        """``platform``'s sites as a sites table of ``rows`` rows (``None``: all) lists them,
        and its layout group where that is said in one line instead: at the default verbosity
        the layout findings (thousands on tpu for small images) leave the table to the vendor
        and custom sites and the format findings, and the line stands where they would have
        taken rows; ``-v`` or ``--jaxport-report-details=all`` lists them as rows."""
        sites = [h for h in self.hotspots if h.platform == platform]
        if options.layout_in_full():
            return sites, None
        listed = [h for h in sites if h.layer != LAYOUT]
        crowded = any(h.layer == LAYOUT for h in (sites if rows is None else sites[:rows]))
        return listed, self.layout_group(platform) if crowded else None

    def hotspot_platform(self) -> str | None:
        """The platform whose sites the short reports list: the home platform (where the
        lock-in is, cuda unless ``[tool.jaxport] home`` says) when it has any, else the first
        platform with sites."""
        platforms = [h.platform for h in self.hotspots]
        if not platforms:
            return None
        home = self.headline.home
        return home if home in platforms else platforms[0]


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


def padding_of(platforms: Mapping[str, PlatformTotals]) -> dict[str, float]:
    """Per platform with any, the share of bytes moved that is tile padding."""
    return {p: t.padding_waste for p, t in platforms.items() if t.padding_waste}


HOTSPOT_HEADERS = ("site", "kernel", "checks", "tests", "calls", "time")
HOTSPOT_NUMERIC = (False, False, True, True, True, True)


def hotspot_headers(unit: str) -> tuple[str, ...]:
    """:data:`HOTSPOT_HEADERS`, the third column named for what the numbers count."""
    return (*HOTSPOT_HEADERS[:2], f"{unit}s", *HOTSPOT_HEADERS[3:])


def hotspot_cells(site: Hotspot) -> tuple[str, str, str, str, str, str]:
    """A site's row, the same in every format: where, what, reach, dispatches, time share."""
    return (
        site.location or "(no source line)",
        site.what,
        number(site.checks),
        number(site.tests),
        number(site.dispatches),
        pct(site.share) if site.share is not None else "—",
    )


def hotspot_title(view: ReportView, platform: str, shown: int, *, grouped: bool = False) -> str:
    """``where the lock-in lives on cuda: 31 distinct sites (29 vendor, 2 custom, 6
    format/layout); top 5 by estimated time`` (of the sites other than layout ones where
    those are ``grouped`` in one line)."""
    sites = [h for h in view.hotspots if h.platform == platform]
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


# -- building it --------------------------------------------------------------------------------


def build_view(report: Report) -> ReportView:
    """The view of a report (:class:`~pytest_jaxport.report.document.Report`, checked where
    it was read)."""
    summary = report.summary
    numbers = summary.numbers or Numbers()
    platforms = _platforms(report)
    rows = tuple(
        test_row(t, platforms) for t in sorted(report.tests, key=lambda t: natural_key(t.nodeid))
    )
    headline = dataclasses.replace(headline_of(report), may_differ=tuple(
        (row.platform, row.may_differ) for row in emulations_of(rows)
    ))  # fmt: skip
    audit = (
        audit_parts(report.audit, home=headline.home, order=platforms)
        if report.audit is not None
        else None
    )
    baseline = report.baseline
    view = ReportView(
        headline=headline,
        problems=problems_of(
            rows,
            audit.problems if audit is not None else (),
            not_collected=tuple(
                Problem(
                    kind="failure",
                    test=e.nodeid,
                    key=COLLECTION,
                    found=COLLECTION,
                    message=e.error,
                )
                for e in report.collection_errors
            ),
        )
        + baseline_groups(baseline),
        hotspots=hotspots_of(summary.hotspots),
        totals=totals_of(in_order(summary.platforms, platforms)),
        shares=shares_of(in_order(numbers.runtime_share, platforms)),
        targets=targets_of(numbers),
        layers=(),
        tooling=numbers.tooling.assumptions if numbers.tooling is not None else (),
        notes=notes_of(rows, report)
        + ((Note(text=baseline_line(baseline)),) if baseline is not None else ()),
        tests=rows,
        platforms=tuple(platforms),
        deviceless=_deviceless(report),
        compiled_gaps=compiled_gaps_of(rows),
        transformations=transformations_of(rows),
        collectives=collectives_of(in_order(summary.platforms, platforms)),
        devices=devices_of(report.config),
        emulations=emulations_of(rows),
        baseline=baseline,
    )
    totals = summary.platforms
    if audit is not None:
        view = dataclasses.replace(
            view, headline=dataclasses.replace(headline, audit_failures=audit.view.failures)
        )
        if headline.checks:  # both: the checks' numbers lead, the audit's sit next to them
            view = dataclasses.replace(
                view, audit=dataclasses.replace(audit.view, numbers=audit.numbers)
            )
        else:  # an audit of an unchanged suite: its numbers are the headline's
            totals = audit.totals
            found = audit.numbers
            view = dataclasses.replace(
                view, audit=audit.view, unit=found.unit, hotspots=found.hotspots,
                totals=found.totals, shares=found.shares, targets=found.targets,
                collectives=found.collectives,
            )  # fmt: skip
    view = dataclasses.replace(
        view,
        padding=padding_of(totals),
        notes=view.notes + share_basis_notes(view.shares, totals, audit=view.audit is not None),
    )
    return dataclasses.replace(view, layers=layers_of(view, totals, numbers.tooling))


def share_basis_notes(
    shares: Sequence[ShareRow], totals: Mapping[str, PlatformTotals], *, audit: bool
) -> tuple[Note, ...]:
    """Why a platform's runtime share names libraries its vendor calls do not count, said
    once per platform: the share was measured on the compiled program, where XLA:CPU runs
    dots and convolutions in its libraries (eigen, ynnpack, onednn), while the calls count
    the lowered program, where they are XLA's own ops (and the suite ``audit``'s share is
    estimated from that program). docs/reference.md says it in full."""
    notes = []
    for row in shares:
        counted = totals.get(row.platform)
        if row.basis != "measured" or counted is None:
            continue
        timed = [name for name, _ in row.libraries]
        # in name order: which of them took longer is a measurement, and varies by machine
        only_timed = sorted(name for name in timed if name not in counted.libraries)
        if not only_timed:
            continue
        audited = "; the suite audit's estimates the lowered one" if audit else ""
        notes.append(
            Note(
                text=f"{row.platform}'s vendor share times the compiled program, where "
                f"{' and '.join(only_timed)} {'runs' if len(only_timed) == 1 else 'run'} its "
                "dots; its vendor calls count the lowered one, where dots are XLA's own"
                f'{audited} (docs/reference.md, "Why cpu\'s numbers differ"; '
                f"--jaxport-compile={row.platform} counts the compiled calls)"
            )
        )
    return tuple(notes)


def compiled_gaps_of(rows: Sequence[TestRow]) -> tuple[tuple[str, str, str], ...]:
    """Where compiling changed what lowering predicted, per test and check (only checks
    compiled somewhere are looked at)."""
    found = []
    for row in rows:
        for check in row.checks:
            if all(c.level == "lowered" for c in check.cells.values()):
                continue
            for result in check.probe.platforms.values():
                for line in (prediction_gap(result), what_if_line(result), padding_line(result)):
                    if line is not None:
                        found.append((row.nodeid, check.name, line))
    return tuple(found)


def transformations_of(rows: Sequence[TestRow]) -> tuple[tuple[str, str], ...]:
    """Per test with transformation checks, each function's checks side by side."""
    found = []
    for row in rows:
        if any(c.variant_of is not None for c in row.checks):
            found += [(row.nodeid, line) for line in variant_lines([c.probe for c in row.checks])]
    return tuple(found)


_V = TypeVar("_V")


def in_order(by_platform: Mapping[str, _V], order: Sequence[str]) -> dict[str, _V]:
    """``by_platform`` with the platforms of ``order`` (the configured order) first, then the
    others as they come: a report's totals are written in name order, its rows are shown in
    the order the project names its platforms.

    >>> list(in_order({"cpu": 1, "oneapi": 3, "tpu": 4}, ["cpu", "tpu", "oneapi"]))
    ['cpu', 'tpu', 'oneapi']
    """
    first = [p for p in order if p in by_platform]
    return {p: by_platform[p] for p in (*first, *(p for p in by_platform if p not in order))}


def _platforms(report: Report) -> list[str]:
    """The matrix's platforms: the configured ones, then any other the report's totals or
    checks have, in the order the report has them."""
    seen: dict[str, None] = dict.fromkeys(report.config.platforms)
    seen.update(dict.fromkeys(report.summary.platforms))
    for check in report.checks():
        seen.update(dict.fromkeys(check.probe.platforms))
    return list(seen)


def _levels(config: Config) -> str:
    if not config.compile:
        return "level: lowered (StableHLO, no hardware needed)"
    gpu = f" ({NVIDIA} deviceless against {config.target} where no GPU)" if config.target else ""
    return f"levels: compiled for {', '.join(config.compile)}{gpu}; lowered elsewhere"


def _version(env: Environment, name: str) -> str | None:
    """A version the run recorded: ``python``, or a library's (``jax``, ``jaxlib``)."""
    return env.python if name == "python" else env.versions.get(name)


def headline_of(report: Report) -> Headline:
    summary, config, env = report.summary, report.config, report.environment
    facts = [
        ("platforms", ", ".join(config.platforms) or "—"),
        ("reference", config.reference or "—"),
        ("home", config.home_platform),
    ]
    also = also_lowered_of(report)
    if also:
        facts.append(("also lowered", also))
    if config.compile:
        target = f" (target {config.target})" if config.target else ""
        facts.append(("compiled for", ", ".join(config.compile) + target))
    if config.source:
        facts.append(("configuration", config.source))
    versions = " · ".join(
        f"{k} {v}" for k in ("jax", "jaxlib", "python") if (v := _version(env, k))
    )
    facts.append(("environment", " · ".join(x for x in (versions, env.machine) if x) or "—"))
    facts += leg_facts(report)
    facts.append(("present here", ", ".join(env.present_platforms) or "none"))
    budgeted = None
    if config.budget is not None:
        budgeted = _sets_limit(config.budget)
    elif "budget" in config.written_null:
        budgeted = False
    mismatches = sum(v.key in NUMERICS_KEYS for t in report.tests for v in t.violations)
    differ = sum(v.key == MAY_DIFFER_KEY for t in report.tests for v in t.violations)
    return Headline(
        tests=summary.tests,
        checks=summary.checks,
        failed_tests=summary.failed_tests,
        violations=summary.violations - mismatches - differ,
        mismatches=mismatches,
        platforms=config.platforms,
        reference=config.reference,
        present=env.present_platforms,
        level=_levels(config),
        tool_version=report.tool_version or "",
        schema_version=str(report.schema_version),
        upgraded_from="" if report.upgraded_from is None else str(report.upgraded_from),
        facts=tuple(facts),
        also_lowered=also,
        budgeted=budgeted,
        home=config.home_platform,
        not_collected=len(report.collection_errors),
    )


def _sets_limit(value: object) -> bool:
    """Whether a budget table as the report records it sets any limit (an empty list or
    table sets none: ``allow_targets = []``)."""
    if isinstance(value, Mapping):
        return any(_sets_limit(v) for v in value.values())
    if isinstance(value, list):
        return bool(value)
    return value is not None


def also_lowered_of(report: Report) -> str:
    """``cuda, rocm: from must_lower``: the platforms the report's checks lowered for that its
    ``platforms`` leave out (a ``must_lower`` adds them, ``--jaxport-platforms`` does not take
    them away), or a marker's ``platforms`` where no ``must_lower`` of the configuration
    names them; ``""`` where there are none."""
    configured = set(report.config.platforms)
    extra = [p for p in _platforms(report) if p not in configured]
    if not configured or not extra:
        return ""
    budget = report.config.budget or {}
    tables = [budget, *(t for t in budget.values() if isinstance(t, Mapping))]
    named = {
        str(p)
        for table in tables
        if isinstance(must := table.get("must_lower"), list)
        for p in must
    }
    why = "must_lower" if set(extra) <= named else "must_lower or a marker's platforms"
    return f"{', '.join(extra)}: from {why}"


def emulated_of(result: PlatformProbe) -> tuple[str | None, tuple[str, ...]]:
    """How an emulation went (:func:`pytest_jaxport.model.probe.emulated_status`) and its
    lines: each mismatch's message, why it did not run, what it did and where;
    ``(None, ())`` where the platform was not emulated."""
    emulation = result.emulated
    status = emulated_status(result)
    if emulation is None or status is None:
        return None, ()
    numerics = result.emulated_numerics
    lines = [m.message for m in numerics.mismatches] if numerics is not None else []
    if status == "not run":
        lines.append(not_emulated_message(emulation))
    if status == MAY_DIFFER:
        lines += may_differ_lines(emulation, result.emulated_bounds)
    return status, (*lines, *emulation_lines(emulation))


def level_text(platform: str, *, compiled: bool, deviceless: bool, target: str | None) -> str:
    """``lowered``, ``compiled``, ``compiled deviceless h100``, ``compiled on <device>``."""
    if not compiled:
        return "lowered"
    if deviceless:
        return f"compiled deviceless {target}"
    if target and platform != HOST:
        return f"compiled on {target}"
    return "compiled"


def cell_of(probe: Probe, platform: str, violations: Sequence[str]) -> Cell:
    """One matrix cell: lowers, counts and their level, numerics, violations, errors."""
    result = probe.platforms[platform]
    census = result.budgeted
    compiled = result.compiled is not None
    status = numerics_status(probe, platform)
    errors = [
        f"{what}: {found}"
        for found, what in (
            (result.error if census is None else None, "does not lower"),
            (result.compile_error, "compile"),
            (result.execution_error, "run"),
        )
        if found
    ]
    if status == "mismatch" and result.numerics is not None:
        errors += [m.message for m in result.numerics.mismatches]
    emulated, emulation = emulated_of(result)
    return Cell(
        platform=platform,
        lowers=result.lowered,
        vendor=census.vendor if census is not None else None,
        custom=census.custom if census is not None else None,
        level=level_text(
            platform,
            compiled=compiled,
            deviceless=result.deviceless and compiled,
            target=result.target if compiled else None,
        ),
        numerics=status,
        # a mismatch is said as numerics ("mismatch", "emulated: mismatch"), not as a limit
        violations=tuple(key for key in violations if key not in NUMERICS_KEYS),
        errors=tuple(errors),
        compile_failed=bool(result.compile_error),
        needs_hardware=result.needs_hardware or None,
        not_compiling=_not_compiling(result),
        emulated=emulated,
        emulation=emulation,
    )


def _not_compiling(result: PlatformProbe) -> tuple[str, ...]:
    """The rules (distinct, in order) that say a platform's compiler rejects what lowered."""
    findings = result.formats.findings if result.formats is not None else ()
    return tuple(dict.fromkeys(f.rule for f in findings if not f.compiles))


def _error_text(test: TestEntry) -> str | None:
    error = test.error
    if error is None:
        return None
    message = first_line(error.message, 300)
    said = (error.where, f"during {error.when}" if error.when else None)
    suffix = ", ".join(x for x in said if x)
    return message + (f" ({suffix})" if suffix else "")


def test_row(test: TestEntry, platforms: Sequence[str]) -> TestRow:
    """One row of the matrix: the test's checks (each function's transformations after it)."""
    by_cell: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for v in test.violations:
        by_cell[v.check, v.platform].append(v.key)
    rows = []
    for check in grouped_checks(test.checks):
        probe = check.probe
        rows.append(
            CheckRow(
                name=probe.name,
                variant_of=probe.variant_of,
                cells={
                    p: cell_of(probe, p, by_cell[probe.name, p])
                    for p in platforms
                    if p in probe.platforms
                },
                check=check,
                note=probe.note,
            )
        )
    problem = test.outcome in ("failed", "error") or any(
        c.status == "bad" for r in rows for c in r.cells.values()
    )
    return TestRow(
        nodeid=test.nodeid,
        outcome=test.outcome,
        checks=tuple(rows),
        error=_error_text(test),
        problem=problem,
        entry=test,
    )


def grouped_checks(checks: Sequence[Check]) -> list[Check]:
    """Each function's check followed by its transformations' (``conv``, ``conv[grad]``)."""
    names = {c.name for c in checks}
    ordered: list[Check] = []
    for check in checks:
        if check.probe.variant_of in names:
            continue
        ordered.append(check)
        ordered += [c for c in checks if c.probe.variant_of == check.name]
    return ordered


def violation_details(violation: Violation) -> tuple[str, ...]:
    """What a problem row lists under a violation: its kernels, findings and details."""
    return (
        tuple(k.describe() for k in violation.kernels)
        + tuple(f.describe() for f in violation.findings)
        + violation.details
    )


def problems_of(
    tests: Iterable[TestRow],
    audit: Iterable[Problem] = (),
    *,
    not_collected: Iterable[Problem] = (),
) -> tuple[ProblemGroup, ...]:
    """Every problem of the suite, grouped: violations by budget key and platform; checks
    that do not lower (or run) where no ``must_lower`` made that a violation; numerics
    mismatches no violation covers; tests that failed or errored for another reason; the
    files pytest could not collect (``not_collected``: their tests did not run); and the
    suite ``audit``'s problems (:func:`audit_problems`), apart."""
    found: list[Problem] = [*audit, *not_collected]
    for test in tests:
        violated: set[tuple[str, str, str]] = set()
        for v in test.violations:
            violated.add((v.check, v.platform, v.key))
            numerics = v.key in NUMERICS_KEYS
            found.append(
                Problem(
                    kind="mismatch" if numerics or v.key == MAY_DIFFER_KEY else "violation",
                    test=test.nodeid,
                    check=v.check,
                    platform=v.platform,
                    key=MISMATCH_KEYS.get(v.key, v.key),
                    found=_mismatch_found(test.entry, v) if numerics else v.found_text(),
                    limit=v.limit_text(),
                    origin=MARKER_ORIGIN if v.origin == test.nodeid else v.origin,
                    message=v.headline(),
                    details=violation_details(v),
                )
            )
        drifts = _drifts(test)  # a merged report's: they say more than the cell's mismatch
        violated |= {(p.check or "", p.platform or "", "numerics") for p in drifts}
        for row in test.checks:
            for cell in row.cells.values():
                found += _cell_problems(test.nodeid, row, cell, violated)
        found += drifts
        found += _failures(test)
    groups: dict[tuple[ProblemKind, str, str | None, bool], list[Problem]] = {}
    for problem in found:
        key = (problem.kind, problem.key, problem.platform, problem.audit)
        groups.setdefault(key, []).append(problem)
    ordered = sorted(
        groups.items(),
        key=lambda item: (PROBLEM_KINDS.index(item[0][0]), -sum(p.count for p in item[1]),
                          item[0][2] or "", item[0][1], item[0][3]),
    )  # fmt: skip
    return tuple(
        ProblemGroup(
            kind=kind,
            key=key,
            platform=platform,
            rule=_rule(kind, key, rows, audit=audit),
            problems=tuple(rows),
            audit=audit,
        )
        for (kind, key, platform, audit), rows in ordered
    )


def emulated_sites(test: TestEntry, violation: Violation) -> tuple[str, ...]:
    """Where an emulated mismatch's emulation computed differently from the reference: its
    interpreted kernels, its chosen branches, its rounded dots, in that order (the lines a
    mismatch is shown and annotated at); ``()`` for any other violation."""
    if violation.key != "emulated_numerics":
        return ()
    for check in test.checks:
        entry = check.probe.platforms.get(violation.platform)
        if check.name != violation.check or entry is None or entry.emulated is None:
            continue
        emulated = entry.emulated
        return tuple(
            dict.fromkeys(
                [k.location for k in emulated.kernels]
                + [b.location for b in emulated.branches]
                + [r.location for r in emulated.rounded]
            )
        )
    return ()


def _mismatch_found(test: TestEntry, violation: Violation) -> str:
    """``1 differing leaf (worst abs err 9.8e-04, rel err 9.7e-05) at model.py:6``: a
    numerics mismatch, its worst error and the line it comes from where the report knows."""
    sites = emulated_sites(test, violation)
    more = f" (+{len(sites) - 1} more)" if len(sites) > 1 else ""
    return violation.found_text() + (f" at {sites[0]}{more}" if sites else "")


def _cell_problems(
    nodeid: str, row: CheckRow, cell: Cell, violated: set[tuple[str, str, str]]
) -> list[Problem]:
    problems = []
    if (row.name, cell.platform, "must_lower") in violated:
        return []
    if not cell.lowers or (cell.numerics == "error"):
        key = "does not lower" if not cell.lowers else "does not run"
        if cell.needs_hardware and not cell.lowers:
            key = f"not lowerable here: needs a {cell.needs_hardware}"
        message = cell.errors[0] if cell.errors else key
        problems.append(
            Problem(
                kind="not-lowered",
                test=nodeid,
                check=row.name,
                platform=cell.platform,
                key=key,
                found=key,
                message=first_line(message.split(": ", 1)[-1]),
                details=tuple(cell.errors),
            )
        )
    if cell.numerics == "mismatch" and (row.name, cell.platform, "numerics") not in violated:
        problems.append(
            Problem(
                kind="numerics",
                test=nodeid,
                check=row.name,
                platform=cell.platform,
                key="numerics differ",
                found=plural(len(cell.errors), "differing leaf", "differing leaves"),
                message=first_line(cell.errors[0]) if cell.errors else "numerics differ",
                details=tuple(cell.errors),
            )
        )
    return problems


def _drifts(test: TestRow) -> list[Problem]:
    """A merged report's drifts: outputs on one leg that differ from the reference's."""
    problems = []
    for drift in test.entry.drifts:
        messages = drift.messages
        reference = f"{drift.reference} ({drift.reference_leg})"
        problems.append(
            Problem(
                kind="drift",
                test=test.nodeid,
                check=drift.check,
                platform=drift.platform,
                key=DRIFT_KEY,
                found=plural(len(messages), "differing leaf", "differing leaves"),
                message=f"{drift.platform} ({drift.leg}) differs from {reference}: "
                + (first_line(messages[0]) if messages else "outputs differ"),
                details=messages,
            )
        )
    return problems


def _without_test(error: str, nodeid: str) -> str:
    """A test's error as its problem row shows it, next to the test's id: without the id
    again nor pytest.fail's ``Failed:`` (``@pytest.mark.portable: unknown keyword ...``)."""
    text = error.removeprefix("Failed: ")
    if text.startswith(nodeid):
        return text.removeprefix(nodeid).removeprefix(":").lstrip()
    return text.replace(f" on {nodeid}:", ":", 1)  # "@pytest.mark.portable on t.py::t: ..."


def _failures(test: TestRow) -> list[Problem]:
    """Why a test failed or errored, when it was not (only) a violation."""
    entry = test.entry
    problems = []
    if test.error is not None:
        key = "crashed" if entry.crashed else test.outcome
        message = _without_test(test.error, test.nodeid)
        problems.append(
            Problem(kind="failure", test=test.nodeid, key=key, message=message, found=key)
        )
    for lines, name in ((entry.baseline_growth, "baseline"), (entry.outputs_errors, "outputs")):
        if lines:
            problems.append(
                Problem(
                    kind="failure",
                    test=test.nodeid,
                    key=name,
                    found=name,
                    message=first_line(lines[0]),
                    details=lines,
                )
            )
    explained = entry.violations or entry.drifts
    if not problems and test.outcome in ("failed", "error") and not explained:
        problems.append(
            Problem(kind="failure", test=test.nodeid, key=test.outcome, found=test.outcome,
                    message=f"{test.outcome} (no message recorded)")
        )  # fmt: skip
    return problems


def setting_text(key: str, limit: object, origin: str) -> str:
    """``limit 2, set in pyproject.toml [tool.jaxport.budget]``; ``may_differ = "fail", set
    in the default`` for an emulation that may differ on the chip (no limit: a setting)."""
    if key == MAY_DIFFER_KEY:
        return f'may_differ = "{limit}", set in {origin}'
    return f"limit {limit}, set in {origin}"


def _rule(kind: ProblemKind, key: str, rows: Sequence[Problem], *, audit: bool = False) -> str:
    if audit and kind == "not-lowered":
        return "a finding of the suite audit: no test fails for it"
    if audit and kind == "failure":
        return "the session fails; no test does"
    if kind == "violation":
        (limit, origin), _ = Counter((p.limit, p.origin) for p in rows).most_common(1)[0]
        others = len({(p.limit, p.origin) for p in rows}) - 1
        more = f"; {plural(others, 'other setting')}" if others else ""
        return f"{setting_text(key, limit, origin)}{more}"
    if kind == "not-lowered":
        if key.startswith("not lowerable here"):
            return "JAX needs the hardware to lower it: its budgets are unverified here"
        return "not in must_lower: a finding, not a failure"
    if kind == "numerics":
        return "no numerics budget applied"
    if kind == "mismatch" and key == MISMATCH_KEYS[MAY_DIFFER_KEY]:
        (limit, origin), _ = Counter((p.limit, p.origin) for p in rows).most_common(1)[0]
        return f"{setting_text(MAY_DIFFER_KEY, limit, origin)}: the test fails"
    if kind == "mismatch":
        tolerances = Counter(p.origin for p in rows).most_common()
        more = f"; {plural(len(tolerances) - 1, 'other setting')}" if len(tolerances) > 1 else ""
        return f"beyond the tolerance from {tolerances[0][0]}{more}: the test fails"
    if kind == "drift":
        return "beyond the project's tolerances: the test fails in the merged report"
    return ""


BASELINE_NONE = "baseline matches no test"
BASELINE_STALE = "baseline entries no longer matched"
BASELINE_NEW = "not in the baseline"
"""The baseline's problem groups (``--jaxport-baseline``): what each is titled."""
_STALE_WHY: Mapping[str, str] = {
    "removed": "no test of that name in {file}, which ran: renamed or removed?",
    "file-gone": "its file {file} is gone",
    "checks-nothing": "the test ran and passed, checking nothing",
    "check-gone": "the test no longer makes this check",
}


def stale_text(entry: StaleEntry) -> str:
    """Why a baseline entry is no longer matched: ``no such test in t.py, which ran
    (renamed or removed?)``."""
    return _STALE_WHY[entry.why].format(file=file_of(entry.nodeid))


def baseline_line(match: BaselineMatch) -> str:
    """``baseline b.json: 3 tests compared, 1 test not in it (new); of its 5 tests, 3
    matched, 1 no longer matched (stale), 1 not run this time``: said after every run
    compared with a baseline, and among the report's notes."""
    ran = [f"{plural(match.compared, 'test')} compared"]
    ran += [f"{plural(len(match.new), 'test')} not in it (new)"] if match.new else []
    if match.new_checks:
        ran.append(f"{plural(len(match.new_checks), 'check')} of compared tests not in it (new)")
    stale = sum(e.check is None for e in match.stale)
    has = [f"{number(match.compared)} matched"]
    has += [f"{number(stale)} no longer matched (stale)"] if stale else []
    has += [f"{number(match.not_run)} not run this time"] if match.not_run else []
    text = (
        f"baseline {match.file}: {', '.join(ran)}; of its {plural(match.entries, 'test')}, "
        f"{', '.join(has)}"
    )
    if len(match.stale) > stale:
        text += f"; {plural(len(match.stale) - stale, 'check')} no longer made (stale)"
    return text


def baseline_verdict(match: BaselineMatch) -> str | None:
    """What a baseline that does not match the run means: the warning for one that matched
    no test (``None`` for one that matches), the failure under ``--jaxport-baseline-strict``."""
    said = []
    if match.matched_nothing:
        said.append(f"matched none of the {plural(len(match.new), 'test')} that checked")
    stale = sum(e.check is None for e in match.stale)
    said += [f"{plural(stale, 'entry', 'entries')} no longer matched"] if stale else []
    if len(match.stale) > stale:
        said.append(f"{plural(len(match.stale) - stale, 'check')} no longer made")
    if match.strict and not match.matched_nothing:
        said += [f"{plural(len(match.new), 'test')} not in it"] if match.new else []
        said += [f"{plural(len(match.new_checks), 'check')} not in it"] if match.new_checks else []
    if match.fails:
        return (
            f"FAILED: --jaxport-baseline-strict: the baseline {match.file} does not match this "
            f"run ({'; '.join(said)}); no test failed for it. --jaxport-baseline-update "
            "records the suite as it is"
        )
    if match.matched_nothing:
        return (
            f"warning: the baseline {match.file} {said[0]}: nothing was compared (a baseline "
            "of another project, or tests renamed?); --jaxport-baseline-update writes this "
            "suite's"
        )
    return None


def baseline_groups(match: BaselineMatch | None) -> tuple[ProblemGroup, ...]:
    """The baseline's problems: a baseline that matched no test, its entries no test matched
    any more, the tests and checks it does not have; failures under ``--jaxport-baseline-strict``,
    findings that fail nothing otherwise."""
    if match is None:
        return ()
    fails = "fails the run: --jaxport-baseline-strict" if match.strict else (
        "a finding; --jaxport-baseline-strict fails the run on it")  # fmt: skip
    groups = []
    if match.matched_nothing:
        row = Problem(
            kind="baseline", test=match.file, key=BASELINE_NONE, found=BASELINE_NONE,
            message=f"matched none of the {plural(len(match.new), 'test')} that checked: "
            "nothing was compared (a baseline of another project, or tests renamed?)",
        )  # fmt: skip
        groups.append((BASELINE_NONE, f"{fails}; --jaxport-baseline-update writes this "
                       "suite's", [row]))  # fmt: skip
    stale = [
        Problem(kind="baseline", test=e.nodeid, check=e.check, key=BASELINE_STALE,
                found=BASELINE_STALE, message=stale_text(e))
        for e in match.stale
    ]  # fmt: skip
    if stale:
        groups.append((BASELINE_STALE, f"{fails}; --jaxport-baseline-update drops them", stale))
    new = [
        Problem(kind="baseline", test=n, key=BASELINE_NEW, found=BASELINE_NEW,
                message="new test: its counts are not compared")
        for n in match.new
    ] + [
        Problem(kind="baseline", test=n, check=c, key=BASELINE_NEW, found=BASELINE_NEW,
                message="new check: its counts are not compared")
        for n, c in match.new_checks
    ]  # fmt: skip
    if new:
        groups.append((BASELINE_NEW, f"{fails}; --jaxport-baseline-update records them", new))
    return tuple(
        ProblemGroup(kind="baseline", key=key, platform=None, rule=rule, problems=tuple(rows))
        for key, rule, rows in groups
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


def totals_of(platforms: Mapping[str, PlatformTotals]) -> TotalsTable:
    """The platform totals table of ``platforms`` (the summary's, or the audit's)."""
    columns = [
        c
        for c in TOTALS_COLUMNS
        if c.key is None or any(getattr(t, c.key) is not None for t in platforms.values())
    ]
    rows = tuple(
        (
            platform,
            tuple(c.read(totals) for c in columns),
            tuple(totals.libraries.items()),
        )
        for platform, totals in platforms.items()
    )
    return TotalsTable(
        headers=tuple(c.header for c in columns),
        numeric=tuple(c.numeric for c in columns),
        rows=rows,
        terminal=tuple(c.terminal for c in columns),
    )


def collectives_of(platforms: Mapping[str, PlatformTotals]) -> tuple[tuple[str, str], ...]:
    """The checks' collectives by kind, platforms with the same counts on one row
    (partitioning does not depend on the backend), then what runs them on each platform:
    ``("cpu, cuda, rocm, tpu", "all-reduce 12 (6 inserted by the SPMD partitioner)")``,
    ``("run by", "nccl on cuda, rccl on rocm, ici on tpu, xla-cpu on cpu")``."""

    grouped: dict[str, list[str]] = {}
    every: list[str] = []
    for platform, totals in platforms.items():
        kinds = totals.collectives
        if not kinds:
            continue
        parts = []
        for kind, (count, inserted) in sorted(kinds.items()):
            extra = f" ({number(inserted)} inserted by the SPMD partitioner)" if inserted else ""
            parts.append(f"{kind} {number(count)}{extra}")
        # A compiled program's collectives are the backend's (XLA's GPU pipeline combines
        # small all-reduces), not the partitioner's: say so where the counts come from there.
        label = f"{platform} (compiled)" if totals.compiled else platform
        grouped.setdefault(", ".join(parts), []).append(label)
        every.append(platform)
    if not grouped:
        return ()
    rows = [(", ".join(platforms), kinds) for kinds, platforms in grouped.items()]
    runs = ", ".join(f"{collective_library(p)} on {p}" for p in every)
    return (*rows, ("run by", runs))


def collective_library(platform: str) -> str:
    """What runs collectives on ``platform`` (``nccl`` on cuda), ``xla`` where the model
    names nothing (:data:`~pytest_jaxport.model.targets.COLLECTIVE_LIBRARIES`)."""
    return COLLECTIVE_LIBRARIES.get(platform, "xla")


def share_label(share: RuntimeShare) -> str:
    """How a runtime share's numbers were obtained, as every format labels them: measured
    (over how many checks, and what was left out) or estimated (from which program, with
    the estimate's measured error band): :func:`pytest_jaxport.model.cost.share_basis`."""
    return share_basis(share.to_dict())


def ranking_text(share: RuntimeShare) -> str:
    """``a ranking, not a share: within ±37 points, xla's 26% could be 0%``, the words every
    format says of an estimate :func:`pytest_jaxport.model.cost.ranking_of` finds its band
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
    said = share.to_dict()  # the words are model.cost's, over a share's JSON form
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


def targets_of(numbers: Numbers | None) -> tuple[TargetRow, ...]:
    """Per ``migrate_to`` target, the kernels to rewrite and the days, with their breakdown
    and items (:class:`~pytest_jaxport.report.totals.Numbers`)."""
    if numbers is None:
        return ()
    rows = []
    targets = [*numbers.kernels_to_rewrite, *numbers.rewrite_days, *numbers.rewrite]
    for target in dict.fromkeys(targets):
        estimate = numbers.rewrite.get(target)
        kernels = numbers.kernels_to_rewrite.get(
            target, estimate.kernels_to_rewrite if estimate is not None else None
        )
        priced = numbers.rewrite_days.get(target, estimate.days if estimate is not None else None)
        breakdown = estimate.breakdown if estimate is not None else {}
        fixed = max(0.0, breakdown.get(FIXED, 0.0))
        rows.append(
            TargetRow(
                target=target,
                kernels=kernels,
                days=priced,
                fixed=fixed,
                from_project=None if priced is None else max(0.0, priced - fixed),
                breakdown=tuple(
                    (key, label, max(0.0, breakdown[key]))
                    for key, label in COST_ITEMS
                    if key in breakdown
                ),
                items=tuple(
                    RewriteRow(
                        status=i.status,
                        name=i.name,
                        kind=i.kind,
                        location=i.location,
                        check=i.check,
                        reason=i.reason,
                    )
                    for i in (estimate.items if estimate is not None else ())
                ),
            )
        )
    rows += [
        TargetRow(target=target, kernels=None, days=None, not_lowered=missing)
        for target, missing in numbers.not_lowered.items()
        if target not in targets
    ]
    return tuple(rows)


LAYER_ROWS = (
    ("JAX Python code (jit, grad, vmap)", "in principle", "checks that lower on every target"),
    ("XLA-generated kernels", "regenerated per backend, performance not guaranteed",
     "xla share and counts"),
    ("vendor-library calls", "{home}-bound, counterpart usually exists",
     "vendor share and counts by library"),
    ("hand-written kernels and custom calls", "{home}-bound, each a rewrite",
     "kernels to rewrite per target"),
    ("numeric formats and memory layout", "lowers everywhere, computes or costs differently",
     "format and layout findings per platform and device"),
    ("profiling, tooling and CI assumptions", "often NVIDIA-bound",
     "NVIDIA-bound assumptions in the project"),
)  # fmt: skip


def layers_of(
    view: ReportView, platforms: Mapping[str, PlatformTotals], tooling: Tooling | None
) -> tuple[LayerRow, ...]:
    """The suite's portability, layer by layer: the table a team shows when asked how
    locked in it is."""
    checks = [c for t in view.tests for c in t.checks]
    everywhere = sum(1 for c in checks if c.cells and all(x.lowers for x in c.cells.values()))
    untraced = sum(1 for c in checks if c.probe.untraced is not None)
    counted = len(checks)
    if view.audit is not None and view.unit == "computation":
        everywhere = view.audit.lowers_everywhere
        counted = view.audit.seen["computations"]
    home = view.headline.home
    bound = PLATFORM_VENDORS.get(home, home).removeprefix("the ")  # NVIDIA for cuda

    def shares(layer: str) -> str:
        return ", ".join(f"{s.platform} {pct(s.layers[layer])} ({s.basis})" for s in view.shares)

    xla = ", ".join(f"{p} {number(t.xla or 0)}" for p, t in platforms.items())
    vendor = "; ".join(
        f"{p} {number(t.vendor)} calls at {plural(t.vendor_sites or 0, 'site')}"
        for p, t in platforms.items()
    )
    custom = ", ".join(f"{p} {number(t.custom)}" for p, t in platforms.items())
    rewrite = ", ".join(
        f"{t.target}: {number(t.kernels)} to rewrite"
        if t.kernels is not None
        else f"{t.target}: {t.uncounted()}"
        for t in view.targets
        if t.kernels is not None or t.not_lowered
    )
    if not rewrite:
        lowered = platforms[home].lowered if home in platforms else 0
        rewrite = "not computed in this report" if lowered else f"no {home} census"
    values = [
        f"{number(everywhere)} of {plural(counted, view.unit)} "
        f"lower{'s' if everywhere == 1 else ''} on every configured platform"
        + (f" ({number(untraced)} could not be traced here)" if untraced else ""),
        "; ".join(x for x in (f"ops: {xla}" if xla else "", shares("xla")) if x),
        "; ".join(x for x in (vendor, shares("vendor")) if x),
        rewrite + (f"; custom calls: {custom}" if custom else ""),
        formats_value(platforms, view.hotspots, view.devices),
        (f"{number(len(view.tooling))} found in {number(tooling.files_read)} files read"
         if tooling is not None else "not scanned"),
    ]  # fmt: skip
    return tuple(
        LayerRow(layer=layer, portable=portable.format(home=bound), counted=counted, value=value)
        for (layer, portable, counted), value in zip(LAYER_ROWS, values, strict=True)
    )


def formats_value(
    platforms: Mapping[str, PlatformTotals],
    sites: Sequence[Hotspot],
    devices: Mapping[str, str],
) -> str:
    """The formats-and-layout layer's value: per platform (and the device judged for) its
    findings by rule, which of them do not compile, the padding and the relayouts:
    ``tpu (TPU v5e): 14 format findings (float64-emulated 12, ...), padding 10.9% of bytes
    moved; cuda (H100 80GB HBM3): 6 format findings (...); none on cpu, rocm (MI300X)``."""
    parts = []
    clean = []
    for platform, totals in platforms.items():
        if totals.format_findings is None:
            continue
        said = []
        for kind in FINDING_KINDS:
            found = Counter[str]()
            stuck: set[str] = set()
            for site in sites:
                if site.platform == platform and site.layer == kind:
                    found[site.name] += site.dispatches
                    if site.kind == "not-compiled":
                        stuck.add(site.name)
            total = getattr(totals, f"{kind}_findings") or 0
            if total:
                rules = ", ".join(
                    f"{rule} {number(n)}" + (" does not compile" if rule in stuck else "")
                    for rule, n in found.most_common()
                )
                said.append(plural(total, f"{kind} finding") + (f" ({rules})" if rules else ""))
        if totals.padding_waste or totals.compiled_padding_waste is not None:
            said.append(padding_text(totals.padding_waste, totals.compiled_padding_waste))
        if totals.relayouts:
            said.append(f"{plural(totals.relayouts, 'relayout')} (compiled)")
        device = f" ({devices[platform]})" if devices.get(platform) else ""
        if said:
            parts.append(f"{platform}{device}: {', '.join(said)}")
        else:
            clean.append(f"{platform}{device}")
    if clean:
        parts.append(f"none on {', '.join(clean)}")
    return "; ".join(parts) or "not judged (a report without format and layout findings)"


def devices_of(config: Config) -> dict[str, str]:
    """The device each platform's findings were judged for, as the layer table names it:
    ``H100 80GB HBM3``, ``MI300X``, ``TPU v5e`` (its generation where it has no name)."""
    return {
        platform: device.name.removeprefix("NVIDIA ").removeprefix("AMD ") or device.generation
        for platform, device in (config.devices or {}).items()
    }


def not_compiling_notes(tests: Sequence[TestRow]) -> list[Note]:
    """Checks that lower for a platform outside ``must_lower`` although the format rules say
    its compiler rejects them: a note per platform, said once, never silent."""
    checks: Counter[str] = Counter()
    rules: defaultdict[str, dict[str, None]] = defaultdict(dict)
    for test in tests:
        for row in test.checks:
            for cell in row.cells.values():
                if cell.not_compiling and "must_lower" not in cell.violations:
                    checks[cell.platform] += 1
                    rules[cell.platform].update(dict.fromkeys(cell.not_compiling))
    return [
        Note(
            text=f"{plural(n, 'check')} lower{'s' if n == 1 else ''} for {platform} but the "
            "format rules say "
            f"{'it does' if n == 1 else 'they do'} not compile there: "
            f"{', '.join(rules[platform])} "
            f'(must_lower = ["{platform}"] makes that a failure)',
        )
        for platform, n in sorted(checks.items())
    ]


def emulations_of(tests: Sequence[TestRow]) -> tuple[EmulationRow, ...]:
    """Per emulated platform (in the matrix's order), how its checks' emulations went."""
    found: dict[str, Counter[str]] = {}
    for test in tests:
        for row in test.checks:
            for cell in row.cells.values():
                if cell.emulated is not None:
                    found.setdefault(cell.platform, Counter())[cell.emulated] += 1
    return tuple(
        EmulationRow(
            platform=platform,
            checks=sum(counts.values()),
            match=counts["match"],
            mismatch=counts["mismatch"],
            failed=counts["failed"],
            not_run=counts["not run"],
            may_differ=counts[MAY_DIFFER],
        )
        for platform, counts in found.items()
    )


def notes_of(tests: Sequence[TestRow], report: Report) -> tuple[Note, ...]:
    """Notes said once: each distinct check note with how many checks it applies to; why
    an emulation did not run (never a failure), with how many checks it applies to; and
    for a merged report how its numbers and numerics were obtained."""
    counts: Counter[str] = Counter(c.note for t in tests for c in t.checks if c.note is not None)
    notes = [Note(text=text, checks=n) for text, n in counts.most_common()]
    notes += not_compiling_notes(tests)
    not_run: Counter[str] = Counter(
        line
        for t in tests
        for c in t.checks
        for cell in c.cells.values()
        if cell.emulated == "not run"
        for line in cell.emulation
        if line.startswith(f"{cell.emulated_label}: not run:")
    )
    notes += [Note(text=text, checks=n) for text, n in not_run.most_common()]
    heard = [heard_while_lowering(c.probe.platforms) for t in tests for c in t.checks]
    notes += [Note(text=text, checks=n) for text, n in lowering_warning_notes(heard)]
    if any(cell.emulated for t in tests for c in t.checks for cell in c.cells.values()):
        notes.append(Note(text=EMULATION_NOTE))
    if report.merged is not None and report.merged.legs:
        notes += merged_notes(report, report.merged)
        return tuple(notes)
    present = report.environment.present_platforms
    if any(c.numerics == "not present" for t in tests for r in t.checks for c in r.cells.values()):
        notes.append(
            Note(
                text="numerics are compared only among platforms present here "
                f"({', '.join(present) or 'none'}); the others are lowered, not run"
            )
        )
    return tuple(notes)


def leg_facts(report: Report) -> list[tuple[str, str]]:
    """A merged report's legs, each with its jax and Python (and pytest-jaxport where the legs
    differ in it), and which versions differ between them (``mixed_versions``)."""
    merged = report.merged
    if merged is None or not merged.legs:
        return []
    mixed = merged.mixed_versions or {}
    keys = ["jax", *(["jaxlib"] if "jaxlib" in mixed else []), "python"]
    said = []
    for leg in merged.legs:
        versions = [f"{k} {v}" for k in keys if (v := _version(leg.environment, k))]
        if TOOL_NAME in mixed and leg.tool_version:
            versions.append(f"{TOOL_NAME} {leg.tool_version}")
        said.append(f"{leg.leg}: {' · '.join(versions) or '—'}")
    facts = [("legs", "; ".join(said))]
    if mixed:
        facts.append(("versions differ", ", ".join(mixed)))
    return facts


def versions_note(mixed: Mapping[str, Mapping[str, str]]) -> str:
    """``legs differ in versions: jax 0.10.2 (leg-a.json), 0.12.0 (leg-b.json); ...``: what a
    merged report says of legs that ran different releases (``mixed_versions``)."""
    parts = []
    for key, by_leg in mixed.items():
        legs_of: dict[str, list[str]] = {}
        for leg, version in by_leg.items():
            legs_of.setdefault(version, []).append(leg)
        parts.append(
            f"{key} " + ", ".join(f"{v} ({', '.join(legs)})" for v, legs in legs_of.items())
        )
    return (
        f"legs differ in versions: {'; '.join(parts)}; counts and numerics can differ between "
        "releases for reasons other than the code: merge legs of one release"
    )


def merged_notes(report: Report, merged: Merged) -> list[Note]:
    """How a merged report (``jaxport merge``) got its numbers, and what it compared."""
    names = ", ".join(leg.leg for leg in merged.legs)
    notes = [
        Note(
            text=f"merged from {plural(len(merged.legs), 'leg')} ({names}) by jaxport merge: "
            "each platform's entry comes from the leg that saw it best; the three numbers are "
            "recomputed over the merged entries with the legs' cost model ([tool.jaxport.cost]); "
            "pytest_jaxport_rewrite_cost hooks run only inside pytest, not in the merge"
        )
    ]
    if merged.mixed_versions:
        notes.append(Note(text=versions_note(merged.mixed_versions)))
    if merged.comparisons:
        drifted = sum(len(t.drifts) for t in report.tests)
        notes.append(
            Note(
                text=f"numerics across legs: {plural(merged.comparisons, 'saved output')} "
                f"compared with the reference's, {number(drifted)} drifted"
            )
        )
    else:
        notes.append(
            Note(
                text="numerics across legs: nothing compared (no two legs saved outputs of the "
                "same check: run the legs with --jaxport-save-outputs)"
            )
        )
    return notes


def _deviceless(report: Report) -> bool:
    """Whether a GPU platform (cuda) was compiled without its GPU: the autotuning note is
    its. tpu compiled through libtpu picks no kernels by timing them."""
    return any(
        result.deviceless
        for check in report.checks()
        for platform, result in check.probe.platforms.items()
        if platform == NVIDIA
    )


# -- per-check findings shown in the details -----------------------------------------------

_PLAIN_XLA_KINDS = frozenset({"xla", "fusion", "address-computation"})
"""XLA kinds too generic to name when showing what a vendor dispatch became."""


def _dispatches(census: Census, *, xla: bool) -> str:
    parts = [f"{name} {n}" for name, n in census.libraries().items()]
    if census.custom:
        parts.append(f"custom {census.custom}")
    if xla:
        parts += [
            f"XLA {kind} {n}"
            for kind, n in census.xla_kinds.items()
            if kind not in _PLAIN_XLA_KINDS and n
        ]
    return ", ".join(parts) or "no vendor or custom calls"


def prediction_gap(result: PlatformProbe) -> str | None:
    """Where the lowered prediction and the compiled reality differ, in one line.

    ``cuda: lowered predicted cublas 4; compiled: cublas 1, XLA triton-gemm 3``; ``None``
    when they agree (same libraries and counts, same custom calls) or either is missing.
    """
    lowered, compiled = result.census, result.compiled
    if lowered is None or compiled is None:
        return None
    if lowered.libraries() == compiled.libraries() and lowered.custom == compiled.custom:
        return None
    return (
        f"{result.platform}: lowered predicted {_dispatches(lowered, xla=False)}; "
        f"compiled: {_dispatches(compiled, xla=True)}"
    )


def padding_text(lowered: float | None, compiled: float | None) -> str:
    """``padding 21.9% of bytes moved (lowered model), 4.0% compiled``: the two padding
    figures side by side, as the census levels are (the compiled one where there is one)."""
    said = f"padding {pct(lowered or 0.0)} of bytes moved"
    if compiled is None:
        return said
    return f"{said} (lowered model), {pct(compiled)} compiled"


def padding_line(result: PlatformProbe) -> str | None:
    """``tpu: padding 21.9% of bytes moved (lowered model), 4.0% compiled; arguments 1.6 MiB
    for 1.6 MiB of data (+4%), outputs 512 B for 12 B of data, temporaries 0 B``: where the
    compiler laid out the program in tiles (tpu compiled), its padding beside the lowered
    model's, and what its arguments, outputs and temporaries take on the device; ``None``
    elsewhere."""
    compiled = result.compiled_formats
    if compiled is None or not compiled.tiled_bytes:
        return None
    lowered = result.formats.padding_waste if result.formats is not None else None
    said = f"{result.platform}: {padding_text(lowered, compiled.padding_waste)}"
    if compiled.memory is not None:
        said += f"; {compiled.memory.describe()}"
    return said


def what_if_line(result: PlatformProbe) -> str | None:
    """``cuda: with no vendor libraries: cudnn 1 -> XLA fusion 1`` (the what-if compile)."""
    compiled, fallback = result.compiled, result.what_if_no_vendor
    if compiled is None or fallback is None:
        return None
    before = _dispatches(compiled, xla=False)
    if compiled.libraries() == fallback.libraries():
        return f"{result.platform}: with no vendor libraries: unchanged ({before})"
    grown = fallback.xla_ops - compiled.xla_ops
    if fallback.libraries() or fallback.custom:
        after = _dispatches(fallback, xla=True)
    else:
        after = "XLA's own kernels only"
    return (
        f"{result.platform}: with no vendor libraries: {before} -> {after} "
        f"({fallback.xla_ops} XLA dispatches, {grown:+d})"
    )


def _variant_summary(probe: Probe) -> str:
    """``0 custom, 2 vendor`` (most on any platform), plus where the transformation failed."""
    counted = [r.budgeted for r in probe.platforms.values() if r.budgeted is not None]
    text = (
        f"{max((c.custom for c in counted), default=0)} custom, "
        f"{max((c.vendor for c in counted), default=0)} vendor"
        if counted
        else "nothing lowered"
    )
    failed: dict[str, list[str]] = {}
    for platform, result in probe.platforms.items():
        if result.error is None:
            continue
        marker = f": {probe.transform} cannot be taken"
        reason = result.error.split(marker)[0] if marker in result.error else "failed"
        if reason.startswith(f"{probe.transform} cannot be taken"):
            reason = "cannot be taken"
        failed.setdefault(reason, []).append(platform)
    notes = [f"{reason} on {', '.join(platforms)}" for reason, platforms in failed.items()]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def variant_lines(probes: Sequence[Probe]) -> list[str]:
    """Per function checked with transformations, its checks side by side:
    ``'conv': forward: 0 custom, 2 vendor; grad: 0 custom, 2 vendor``."""
    lines = []
    for base in probes:
        if base.transform is not None:
            continue
        variants = [p for p in probes if p.variant_of == base.name]
        if not variants:
            continue
        parts = [f"forward: {_variant_summary(base)}"]
        parts += [f"{p.transform}: {_variant_summary(p)}" for p in variants]
        lines.append(f"{base.name!r}: " + "; ".join(parts))
    return lines


# -- the suite audit -------------------------------------------------------------------------


OUTSIDE_TESTS = "(outside tests)"
"""The owner a computation run only while importing or collecting shows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditParts:
    """What a report's audit section adds to its view."""

    view: AuditView
    numbers: ReportView
    """Its three numbers, sites and totals (``unit="computation"``; no tests, no problems)."""
    totals: Mapping[str, PlatformTotals]
    """Its per-platform totals, for the layer table where they are the headline's."""
    problems: tuple[Problem, ...] = ()


def _label(computation: Computation) -> str:
    """``mlp [3f2a1b2c]`` (:func:`pytest_jaxport.report.audit_section.computation_label`)."""
    return computation_label(computation.id, computation.function)


def audit_parts(
    audit: AuditSection, *, home: str = DEFAULT_HOME, order: Sequence[str] = ()
) -> AuditParts:
    """The audit's part of the view of a report with an ``audit`` section (moving off
    ``home``; platforms in ``order``, the configured one, first)."""
    numbers = audit.numbers or Numbers()
    found = ReportView(
        headline=Headline(home=home),
        hotspots=hotspots_of(audit.sites),
        totals=totals_of(in_order(audit.totals, order)),
        shares=shares_of(in_order(numbers.runtime_share, order)),
        targets=targets_of(numbers),
        collectives=collectives_of(in_order(audit.totals, order)),
        unit="computation",
        padding=padding_of(audit.totals),
    )
    everywhere = sum(
        1
        for c in audit.computations
        if c.platforms and all(e.lowered for e in c.platforms.values())
    )
    view = AuditView(
        seen=Counter(audit.seen),
        hook=hook_text(audit.interception),
        notes=audit_notes_of(audit),
        lowers_everywhere=everywhere,
        tests=tests_of(audit),
        failures=len(audit.violations or ()) + len(audit.baseline_growth or ()),
        eager_users=audit.eager_users or "all",
        budgeted=bool(audit.fail_on or audit.violations),
    )
    return AuditParts(view=view, numbers=found, totals=audit.totals, problems=audit_problems(audit))


def hook_text(interception: Mapping[str, object]) -> str:
    """``jax 0.10.2, jit cache-miss hook (argument types, jax>=0.8)``; ``compile events
    only`` where JAX's patch points were missing (the section's ``interception``, a table
    whose keys are the interception's own)."""
    jax = f"jax {interception['jax']}, " if interception.get("jax") else ""
    return jax + str(interception.get("adapter") or "compile events only")


def audit_notes_of(audit: AuditSection) -> tuple[str, ...]:
    """What the audit could not see here (its interception's notes) and its own errors."""
    said = audit.interception.get("notes")
    notes = [str(n) for n in said if n] if isinstance(said, list) else []
    heard = [heard_while_lowering(c.platforms) for c in audit.computations]
    notes += [f"{text} ({plural(n, 'computation')})" for text, n in lowering_warning_notes(heard)]
    errors = audit.seen.get("audit_errors", 0)
    if errors:
        notes.append(
            f"the audit recorded {plural(errors, 'error')} of its own instead of raising them "
            "(audit_errors in the JSON report); no test saw them"
        )
    return tuple(notes)


def tests_of(audit: AuditSection) -> tuple[AuditTest, ...]:
    """Per test that ran anything (collection order), the jitted computations it owns and
    those it uses that an earlier test owns, and how many eager op-by-op ones of each."""
    by_id = {c.id: c for c in audit.computations}

    def label(cid: str) -> str:
        return _label(by_id[cid]) if cid in by_id else computation_label(cid)

    def split(cids: Sequence[str]) -> tuple[list[str], int]:  # the jitted; eager ops counted
        jitted = [c for c in cids if c not in by_id or by_id[c].kind != "eager"]
        return jitted, len(cids) - len(jitted)

    rows = []
    for nodeid, test in audit.tests.items():
        owns, eager_owned = split(test.owns)
        uses, eager_used = split([c for c in test.uses if c not in set(test.owns)])
        rows.append(
            AuditTest(
                nodeid=nodeid,
                owns=tuple(label(cid) for cid in owns),
                uses=tuple(
                    (label(cid), str(by_id[cid].owner if cid in by_id else None)) for cid in uses
                ),
                eager_owned=eager_owned,
                eager_used=eager_used,
            )
        )
    return tuple(rows)


def audit_problems(audit: AuditSection) -> tuple[Problem, ...]:
    """The audit's findings (computations that failed to re-lower) and its suite budget
    failures, as problems of the view (``audit=True``)."""
    problems = []
    by_id = {c.id: c for c in audit.computations}
    # One problem per platform and reason: the same failure in 150 computations is one row
    # that says how many and which tests, with the reason whole.
    shared: dict[tuple[str, str, str], list[Computation]] = {}
    for finding in audit.findings:
        computation = by_id.get(finding.computation) or Computation(
            id=finding.computation, function=finding.function, source=None, kind="jit",
            signature=(),
        )  # fmt: skip
        entry = computation.platforms.get(finding.platform)
        hardware = entry.needs_hardware if entry is not None else None
        key = f"not lowerable here: needs a {hardware}" if hardware else "does not lower"
        shared.setdefault((finding.platform, key, finding.reason), []).append(computation)
    for (platform, key, reason), sharing in shared.items():
        names = tuple(_label(c) for c in sharing)
        owners = tuple(dict.fromkeys(c.owner or OUTSIDE_TESTS for c in sharing))
        details = []
        for name, c in zip(names, sharing, strict=True):
            source = f" defined at {c.source}" if c.source else ""
            signature = f" ({', '.join(c.signature)})" if c.signature else ""
            details.append(f"{name}{source}{signature}, owned by {c.owner or OUTSIDE_TESTS}")
        problems.append(
            Problem(
                kind="not-lowered",
                audit=True,
                test=owners[0],
                check=names[0] if len(names) == 1 else plural(len(names), "computation"),
                platform=platform,
                key=key,
                found=key,
                message=" ".join(reason.split()),
                details=tuple(details),
                computations=names,
                tests=owners,
            )
        )
    for v in audit.violations or ():
        problems.append(
            Problem(
                kind="violation",
                audit=True,
                test=AUDITED_SUITE,
                platform=v.platform,
                key=v.key,
                found=v.found_text(),
                limit=v.limit_text(),
                origin=v.origin,
                message=f"{v.platform}: {v.finding()} ({v.rule()}); {v.level}",
                details=violation_details(v),
            )
        )
    for data in audit.baseline_growth or ():
        change = Change.from_dict(data)
        problems.append(
            Problem(
                kind="failure",
                audit=True,
                test=AUDITED_SUITE,
                key="baseline",
                found="baseline",
                message=change.describe("since the baseline"),
                details=tuple(site.describe() for site in change.sites),
            )
        )
    return tuple(problems)
