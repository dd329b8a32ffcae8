"""The notes: what a report says once, not on every row (pure).

:func:`notes_of` gathers them from the matrix's rows and the report: each distinct check
note with how many checks it applies to, checks the format rules say do not compile where
they lowered, why an emulation did not run, each warning JAX gave while pytest-jaxport
lowered for platforms not present here (:func:`heard_while_lowering`), what emulation
catches, what numerics were compared, and how a merged report got its numbers
(:func:`merged_notes`). :func:`share_basis_notes` says why a measured share names libraries
its vendor calls do not count.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_jaxport.view.formatting import number, plural

if TYPE_CHECKING:
    from pytest_jaxport.model.probe import PlatformProbe, Probe
    from pytest_jaxport.report.document import Merged, Report
    from pytest_jaxport.report.totals import PlatformTotals
    from pytest_jaxport.view.viewmodel.matrix import TestRow
    from pytest_jaxport.view.viewmodel.shares import ShareRow

NO_AUTOTUNE_NOTE = (
    "deviceless compilation does not autotune, so Triton-vs-cuBLAS picks can differ from a real GPU"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    text: str
    checks: int = 0
    """How many checks it applies to (0: the whole report)."""


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
    elif len(merged.legs) < 2:
        notes.append(Note(text=f"numerics across legs: nothing compared ({ONE_LEG})"))
    else:
        notes.append(
            Note(
                text="numerics across legs: nothing compared (no two legs saved outputs of the "
                "same check: run the legs with --jaxport-save-outputs)"
            )
        )
    return notes


ONE_LEG = "one leg: outputs are compared across legs, merge two or more"
"""Why a merge of one leg compares nothing (not that no leg saved outputs)."""
