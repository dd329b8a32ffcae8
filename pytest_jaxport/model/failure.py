"""A test's failure text: each violation, finding first, then what a person can do (pure).

The first line is what pytest's one-line short summary shows. :func:`ways_out` says, once per
kind of limit broken, how to pass: a declared key's own way out
(:attr:`pytest_jaxport.model.budget.BudgetKey.way_out`), else change the code or raise the
limit; numerics, the emulation and the baseline have their own.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pytest_jaxport.model.budget import (
    BASELINE_KEY,
    DECLARED,
    MAY_DIFFER_KEY,
    NUMERICS_KEYS,
    Violation,
    change_or_raise,
    noun_for,
)
from pytest_jaxport.model.emulation import emulated_label


def ways_out(violations: Sequence[Violation]) -> list[str]:
    """What a person can do about ``violations``, one line per kind of limit they broke
    (said once per test, after the violations): fix the code, raise the limit where it was
    set, or, for a count, let a baseline ratchet it instead.

    >>> ways_out([Violation(check="c", platform="cuda", key="max_custom_calls", limit=0,
    ...                     origin="pyproject.toml [tool.jaxport.budget]", found=1,
    ...                     what="custom call")])[0][:60]
    'to pass: remove the kernels above from the code, or raise ma'
    """
    lines: list[str] = []
    said: set[str] = set()
    for v in violations:
        kind = v.key.partition(".")[0]  # max_library_calls.cudnn: max_library_calls
        if kind in said:
            continue
        said.add(kind)
        declared = DECLARED.get(kind)
        if declared is not None:
            lines.append((declared.way_out or change_or_raise)(v, violations))
        elif v.key in NUMERICS_KEYS:
            lines.append(_loosen_or_fix(v.key, violations))
        elif v.key == "emulated_run":
            lines.append(
                f"to pass: fix what the emulated run hit (above), or take {v.platform} out of "
                f"emulate (set in {v.origin})"
            )
        elif v.key == MAY_DIFFER_KEY:
            lines.append(
                f"to pass: if an error of the size measured on {v.platform} is acceptable, "
                f"loosen [tool.jaxport.tolerance.{v.platform}.<dtype>] or the marker's "
                f'rtol/atol; to be told without failing, set may_differ = "warn" (set in '
                f"{v.origin}); to know, run the check on {v.platform}"
            )
        elif v.key == BASELINE_KEY:
            grown = [x for x in violations if x.key == BASELINE_KEY and x.found is not None]
            undo = ("take out of the code what grew (the sites above say where)" if grown
                    else "make the code lower there again (the error above)")  # fmt: skip
            lines.append(
                f"to pass: {undo}, or, if the {'growth' if grown else 'change'} is intended, "
                f"record it: pytest --jaxport-baseline={v.origin} --jaxport-baseline-update "
                "(from a full run), and commit the file"
            )
        else:
            lines.append(change_or_raise(v, violations))
    return lines


def _loosen_or_fix(key: str, violations: Sequence[Violation]) -> str:
    """The way out of every numerics mismatch of ``key`` (executed or emulated), each
    platform's tolerance table named: two platforms that differ are two tables."""
    emulated = key == "emulated_numerics"
    platforms = list(dict.fromkeys(v.platform for v in violations if v.key == key))
    labels = [emulated_label(p) if emulated else p for p in platforms]
    tables = [f"[tool.jaxport.tolerance.{p}.<dtype>]" for p in platforms]
    one = len(platforms) == 1
    paths = " for that platform's path" if one else " for those platforms' paths"
    differs = f"{labels[0]}'s difference is" if one else f"the differences on {_and(labels)} are"
    return (
        f"to pass: if {differs} expected, loosen {_and(tables)} or the marker's rtol/atol; "
        "else fix the code" + (paths if emulated else "")
    )


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def failure_text(violations: Sequence[Violation], nodeid: str) -> str:
    """A test's failure for its budget violations and the counts that grew since the
    baseline, said one way: each finding first (the first line is what pytest's one-line
    short summary shows), what it names under it, how many when several, then what to do
    (:func:`ways_out`)."""
    lines = [v.long_repr() for v in violations]
    if len(violations) > 1:
        grown = sum(v.key == BASELINE_KEY for v in violations)
        differ = sum(v.key in NUMERICS_KEYS for v in violations)
        broken = len(violations) - grown - differ
        said = [f"{broken} portability budget {noun_for(broken, 'violation')}"] if broken else []
        said += [f"{differ} numerics mismatch{'' if differ == 1 else 'es'}"] if differ else []
        said += [f"{grown} {noun_for(grown, 'count')} grown since the baseline"] if grown else []
        lines.append(f"({' and '.join(said)} in {nodeid})")
    return "\n".join(lines + ways_out(violations))


def failure_at(reason: str, line: object | None) -> str:
    """A failure's reason with the source line it concerns, as every report writes it (and
    :func:`failure_line` reads it back: where an annotation of it is put).

    >>> failure_at("UNIMPLEMENTED: Only F32 and C64 types are implemented", "model.py:35")
    'UNIMPLEMENTED: Only F32 and C64 types are implemented (at model.py:35)'
    """
    return reason if line is None else f"{reason} (at {line})"


_AT_LINE = re.compile(r" \(at (?P<line>[^()]+:\d+)\)$")


def failure_line(text: str) -> str | None:
    """The ``file:line`` a failure written by :func:`failure_at` concerns; ``None`` where it
    names none.

    >>> failure_line("JaxRuntimeError: UNIMPLEMENTED: ... f64[16,16] (at model.py:35)")
    'model.py:35'
    >>> failure_line("ValueError: Only interpret mode is supported on CPU backend.") is None
    True
    """
    found = _AT_LINE.search(text.strip())
    return found.group("line") if found else None
