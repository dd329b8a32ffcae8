"""How a baseline (``--jaxport-baseline``) met the run, as every format says it (pure).

A report's :class:`~pytest_jaxport.report.document.BaselineMatch` read into its problem
groups (:func:`baseline_groups`: a baseline that matched no test, entries no test matched
any more, tests and checks it does not have), the line said after every run compared with
one (:func:`baseline_line`), and the verdict on one that does not match
(:func:`baseline_verdict`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_jaxport.report.baseline import file_of
from pytest_jaxport.report.document import BaselineMatch, StaleEntry
from pytest_jaxport.view.formatting import number, plural
from pytest_jaxport.view.viewmodel.problems import (
    BASELINE_NEW,
    BASELINE_NONE,
    BASELINE_STALE,
    Problem,
    ProblemGroup,
)

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
