"""The problems: what needs attention, one row each, grouped by kind, key and platform (pure).

:func:`problems_of` reads the matrix's rows (:mod:`~pytest_jaxport.view.viewmodel.matrix`)
into groups (:class:`ProblemGroup`) of :class:`Problem` rows: budget violations by key and
platform, numerics mismatches, outputs that drift across a merge's legs, checks that do not
lower (or run) where no ``must_lower`` made that a violation, numerics differences no
tolerance judged, tests that failed for another reason, and the files pytest could not
collect. The
suite audit's problems (:mod:`~pytest_jaxport.view.viewmodel.suite_audit`) and the
baseline's (:mod:`~pytest_jaxport.view.viewmodel.baseline`) join them as groups of their own.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_jaxport.model.budget import MAY_DIFFER_KEY, NUMERICS_KEYS, Violation
from pytest_jaxport.model.probe import PlatformProbe
from pytest_jaxport.report.entries import TestEntry
from pytest_jaxport.view.formatting import first_line, plural
from pytest_jaxport.view.viewmodel.matrix import Cell, CheckRow, TestRow
from pytest_jaxport.view.viewmodel.memory import DOES_NOT_FIT

MARKER_ORIGIN = "the test's own marker"
"""Where a limit was set when a test's own ``portable`` mark set it (one phrase for all)."""


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
MEMORY_KEYS = ("must_lower", "max_device_memory")
"""The violations that say a check does not fit a platform's device (its compile refused for
memory fails ``must_lower``; a plan over ``max_device_memory``): where one does, the cell's
"does not fit" is not said again as a finding."""
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


DOES_NOT_COMPILE = "does not compile"
"""The problem of a check (or an audited computation) whose compile was asked and gave no
program: the compiler refused it, it ran past ``compile_time_limit``, or libtpu's worker
died. It lowers, so its lowered counts stand, but nothing is known at the compiled level."""
DOES_NOT_COMPILE_RULE = "nothing counted at the compiled level; a failure only in a tpu must_lower"

COLLECTION = "collection"
"""A failure's key where pytest could not collect a file: its tests did not run, so the
report's counts are not the suite's."""
AUDITED_SUITE = "the audited suite"
"""What a suite-level audit problem names in place of a test (it fails the session)."""
BASELINE_NONE = "baseline matches no test"
BASELINE_STALE = "baseline entries no longer matched"
BASELINE_NEW = "not in the baseline"
"""The baseline's problem groups (``--jaxport-baseline``): what each is titled."""


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
    suite ``audit``'s problems
    (:func:`~pytest_jaxport.view.viewmodel.suite_audit.audit_problems`), apart."""
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
    interpreted kernels, its chosen branches, its rounded dots, in that order, those that
    made the outputs differ where the emulation told (:attr:`Emulation.mismatch_sites
    <pytest_jaxport.model.emulation.Emulation.mismatch_sites>`: the lines a mismatch is
    shown and annotated at); ``()`` for any other violation."""
    if violation.key != "emulated_numerics":
        return ()
    entry = platform_entry(test, violation.check, violation.platform)
    emulated = entry.emulated if entry is not None else None
    if emulated is None:
        return ()
    return emulated.mismatch_sites


def platform_entry(test: TestEntry, check: str, platform: str) -> PlatformProbe | None:
    """The test's check named ``check`` on ``platform``, as the report has it; ``None`` where
    the test has no such check or the check no entry for the platform (a check's name is
    unique in its test)."""
    for found in test.checks:
        if found.name == check and platform in found.probe.platforms:
            return found.probe.platforms[platform]
    return None


def _mismatch_found(test: TestEntry, violation: Violation) -> str:
    """``1 differing leaf (largest abs err 9.8e-04, largest rel err 9.7e-05) at model.py:6``:
    a numerics mismatch, its largest errors and the line it comes from where the report
    knows."""
    sites = emulated_sites(test, violation)
    more = f" (+{len(sites) - 1} more)" if len(sites) > 1 else ""
    return violation.found_text() + (f" at {sites[0]}{more}" if sites else "")


def _cell_problems(
    nodeid: str, row: CheckRow, cell: Cell, violated: set[tuple[str, str, str]]
) -> list[Problem]:
    problems = []
    if (row.name, cell.platform, "must_lower") in violated:
        return []

    def not_lowered(key: str, message: str, details: tuple[str, ...]) -> Problem:
        return Problem(kind="not-lowered", test=nodeid, check=row.name, platform=cell.platform,
                       key=key, found=key, message=message, details=details)  # fmt: skip

    memory = cell.memory
    said = any((row.name, cell.platform, key) in violated for key in MEMORY_KEYS)
    if not cell.lowers or (cell.numerics == "error"):
        key = "does not lower" if not cell.lowers else "does not run"
        if cell.needs_hardware and not cell.lowers:
            key = f"not lowerable here: needs a {cell.needs_hardware}"
        message = cell.errors[0] if cell.errors else key
        problems.append(
            not_lowered(key, first_line(message.split(": ", 1)[-1]), tuple(cell.errors))
        )
    if memory is not None and memory.status == "bad":
        # A compile refused for memory is said once, as what does not fit.
        if not said:
            problems.append(not_lowered(DOES_NOT_FIT, memory.headline, memory.details))
    elif cell.lowers and cell.numerics != "error" and cell.compile_error:
        problems.append(
            not_lowered(DOES_NOT_COMPILE, first_line(cell.compile_error), (cell.compile_error,))
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
        if key == DOES_NOT_COMPILE:
            return DOES_NOT_COMPILE_RULE
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
