"""The platform × test matrix: per test its checks, per check and platform a cell (pure).

:func:`test_row` reads a report's :class:`~pytest_jaxport.report.document.TestEntry` into a
:class:`TestRow`: its checks (each function's transformations after it), each a
:class:`CheckRow` whose :class:`Cell` per platform says whether it lowers, its counts and
their level, its numerics, its violations and errors, and how emulating the platform went.
The matrix's platforms are the report's (:func:`matrix_platforms`), in the configured order
(:func:`in_order`); :func:`emulations_of` counts each emulated platform's outcomes.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from pytest_jaxport.model.budget import NUMERICS_KEYS, Violation
from pytest_jaxport.model.emulation import (
    HOST,
    emulated_label,
    emulation_lines,
    may_differ_lines,
    not_emulated_message,
)
from pytest_jaxport.model.probe import (
    MAY_DIFFER,
    PlatformProbe,
    Probe,
    emulated_status,
    numerics_status,
)
from pytest_jaxport.view.formatting import first_line, number, pct, plural
from pytest_jaxport.view.viewmodel.memory import MemoryCell, memory_cell

if TYPE_CHECKING:
    from pytest_jaxport.model.findings import Finding
    from pytest_jaxport.report.document import Report
    from pytest_jaxport.report.entries import Check, TestEntry


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
    compile_error: str = ""
    """Why the compile asked of it gave no program: the compiler's words (a refusal, a time
    limit, its worker's death); ``""`` where it compiled or none was asked."""
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
    memory: MemoryCell | None = None
    """What the check needs in this platform's device memory against its capacity, where
    the report has it (a project that compiles); ``None`` elsewhere."""

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
        if self.memory is not None and self.memory.status == "bad":  # does not fit
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

    @property
    def memory(self) -> tuple[MemoryCell, ...]:
        """Its memory per platform (the matrix's order), where the report has it."""
        return tuple(c.memory for c in self.cells.values() if c.memory is not None)


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


def matrix_platforms(report: Report) -> list[str]:
    """The matrix's platforms: the configured ones, then any other the report's totals or
    checks have, in the order the report has them."""
    seen: dict[str, None] = dict.fromkeys(report.config.platforms)
    seen.update(dict.fromkeys(report.summary.platforms))
    for check in report.checks():
        seen.update(dict.fromkeys(check.probe.platforms))
    return list(seen)


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


NOT_COMPARED = "not compared"
"""The numerics of a check given abstract arguments (``jax.ShapeDtypeStruct``) on a platform
present here: nothing was run, on purpose (its note says why)."""


def check_numerics(probe: Probe, platform: str) -> str:
    """``probe``'s numerics on ``platform`` as every format says them
    (:func:`~pytest_jaxport.model.probe.numerics_status`), ``not compared`` where the check
    had abstract arguments and the platform is present: run nowhere on purpose, never "not
    executed" as if something failed."""
    status = numerics_status(probe, platform)
    if probe.not_compared is not None and status == "not executed":
        return NOT_COMPARED
    return status


def cell_of(probe: Probe, platform: str, violations: Sequence[str]) -> Cell:
    """One matrix cell: lowers, counts and their level, numerics, violations, errors, and its
    memory where the report has it."""
    result = probe.platforms[platform]
    census = result.budgeted
    compiled = result.compiled is not None
    status = check_numerics(probe, platform)
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
        compile_error=result.compile_error or "",
        needs_hardware=result.needs_hardware or None,
        not_compiling=_not_compiling(result),
        emulated=emulated,
        emulation=emulation,
        memory=memory_cell(result.memory) if result.memory is not None else None,
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
