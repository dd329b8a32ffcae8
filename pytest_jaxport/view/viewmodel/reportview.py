"""The report as a view: everything a format shows, in the order of importance (pure).

:class:`ReportView` is what every renderer reads, and all it reads (text, Markdown, HTML,
and the findings' formats through :attr:`ReportView.alerts`); :class:`AuditView` is the
suite audit's part of it. :func:`~pytest_jaxport.view.viewmodel.build.build_view` builds it
from a report.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.tooling import Assumption
from pytest_jaxport.report.document import BaselineMatch
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.formatting import number, plural
from pytest_jaxport.view.viewmodel.alerts import Alerts
from pytest_jaxport.view.viewmodel.headline import Headline
from pytest_jaxport.view.viewmodel.matrix import EmulationRow, TestRow
from pytest_jaxport.view.viewmodel.memory import LargestMemory
from pytest_jaxport.view.viewmodel.notes import Note
from pytest_jaxport.view.viewmodel.problems import ProblemGroup
from pytest_jaxport.view.viewmodel.rewrites import TargetRow
from pytest_jaxport.view.viewmodel.shares import ShareRow
from pytest_jaxport.view.viewmodel.sites import LAYOUT, LayoutGroup, layout_group_of
from pytest_jaxport.view.viewmodel.totals import TotalsTable


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerRow:
    """One layer of the layer table (:mod:`~pytest_jaxport.view.viewmodel.layers`): whether
    it is portable, what is counted, and this suite's value."""

    layer: str
    portable: str
    counted: str
    value: str


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
class CountedView:
    """Which lines a suite audit's numbers count, and what sits at the others (the tests'
    own lines), reported apart."""

    counted: str
    """``every line but the tests' own (tests, every conftest.py)``."""
    where: str
    """What is apart, as a noun: ``the tests' own lines`` or ``lines outside counted_paths``."""
    sites: tuple[tuple[str, int], ...] = ()
    """Per platform, the distinct sites there (vendor, custom, format and layout)."""
    time: tuple[tuple[str, str], ...] = ()
    """Per platform, the part of the suite's estimated time spent there: ``vendor 12%``."""

    def line(self) -> str:
        """``every line but the tests' own (tests, every conftest.py); the tests' own lines,
        apart: 325 sites (cuda 12, tpu 313); their part of the estimated time: cuda vendor
        12%``; ``...; nothing found at the tests' own lines``."""
        if not self.sites:
            return f"{self.counted}; nothing found at {self.where}"
        total = sum(n for _, n in self.sites)
        each = ", ".join(f"{p} {number(n)}" for p, n in self.sites)
        said = f"{self.counted}; {self.where}, apart: {plural(total, 'site')} ({each})"
        if self.time:
            said += "; their part of the estimated time: " + ", ".join(
                f"{p} {t}" for p, t in self.time
            )
        return said


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
    memory: tuple[LargestMemory, ...] = ()
    """Per compiled platform, the audited computation with the largest planned device
    memory (``--jaxport-compile``); ``()`` where the audit compiled nothing."""
    lines: CountedView | None = None
    """Which lines its numbers count, and what is apart (``None``: every line, a report
    from before the choice)."""

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
    and what compiling without vendor libraries gave
    (:mod:`~pytest_jaxport.view.viewmodel.details`)."""
    transformations: tuple[tuple[str, str], ...] = ()
    """``(test, line)`` per function checked with transformations
    (:func:`~pytest_jaxport.view.viewmodel.details.variant_lines`)."""
    unit: str = "check"
    """What the numbers (hotspots, totals, shares, targets) count: ``check``, or
    ``computation`` where they are a suite audit's (a run without checks)."""
    audit: AuditView | None = None
    """The suite audit (``--jaxport-audit``), where the report has one."""
    collectives: tuple[tuple[str, str], ...] = ()
    """``(platform, what)`` per platform whose checks have collectives: by kind, how many the
    SPMD partitioner inserted, what runs them there and on the other platforms
    (:func:`~pytest_jaxport.view.viewmodel.totals.collectives_of`)."""
    devices: Mapping[str, str] = field(default_factory=dict)
    """The device each platform's formats-and-layout findings were judged for."""
    emulations: tuple[EmulationRow, ...] = ()
    """Per emulated platform, its checks' outcomes
    (:func:`~pytest_jaxport.view.viewmodel.matrix.emulations_of`)."""
    baseline: BaselineMatch | None = None
    """How the baseline (``--jaxport-baseline``) met the run, where one was compared."""
    padding: Mapping[str, float] = field(default_factory=dict)
    """Per platform, the share of bytes moved that is tile padding, where there is any."""
    alerts: Alerts = field(default_factory=Alerts)
    """The report's findings at source lines, for code scanning (SARIF), GitHub annotations
    and GitLab Code Quality; never narrowed by :meth:`select`."""

    @property
    def problem_count(self) -> int:
        return sum(g.count for g in self.problems)

    @property
    def memory_shown(self) -> bool:
        """Whether a check of the tests shown has memory data: only then do the formats
        show the memory column (a report of a project that compiles nothing reads as
        before)."""
        return any(row.memory for test in self.tests for row in test.checks)

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
        tpu 1; kernels to rewrite off cuda: tpu 0`` (``compiled: tpu 1 (1 failed)`` after
        ``lowered`` where a compile gave no program; off the home platform; of the checks, or
        of a suite audit's distinct computations: :attr:`unit`); ``""`` where nothing was
        counted."""
        totals = self.totals
        column = {header: i for i, header in enumerate(totals.headers)}
        if "lowered" not in column or not totals.rows:  # nothing counted: no empty lists
            return ""

        def cell(cells: Sequence[str], header: str) -> str:
            return cells[column[header]] if header in column else "0"

        lowered = [
            f"{platform} {cell(cells, 'lowered')}"
            + (f" ({failed} failed)" if (failed := cell(cells, "failed to lower")) != "0" else "")
            for platform, cells, _ in totals.rows
        ]
        parts = ["lowered: " + ", ".join(lowered)]
        if totals.not_compiled:  # the calls below are those of the programs that compiled
            parts.append("compiled: " + ", ".join(
                f"{platform} {cell(cells, 'compiled')} ({cell(cells, 'failed to compile')} failed)"
                for platform, cells, _ in totals.rows
                if cell(cells, "failed to compile") != "0"
            ))  # fmt: skip
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
        if audit is not None and audit.memory:
            memory = tuple(m for m in audit.memory if m.memory.platform == platform)
            audit = dataclasses.replace(audit, memory=memory)
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
        """``platform``'s layout findings as one group
        (:func:`~pytest_jaxport.view.viewmodel.sites.layout_group_of`)."""
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
