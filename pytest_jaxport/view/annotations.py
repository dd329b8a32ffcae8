"""A report's findings as GitHub Actions workflow commands (pure): ``::error file=PATH,
line=N,title=...::message`` lines, which GitHub attaches to the pull request's changed lines
without any upload.

:func:`annotation_lines` reads the view's alerts (:attr:`ReportView.alerts
<pytest_jaxport.view.viewmodel.reportview.ReportView.alerts>`, those at the repository's
lines): each budget violation, numerics failure and ``must_lower`` failure (level ``error``) once as
``::error``; with ``all``, the findings that fail nothing (level ``warning``: a kernel to
rewrite, a check that does not lower, outputs that differ) as ``::warning``. GitHub shows
:data:`PER_STEP` annotations of each kind per step (actions/toolkit's
docs/problem-matchers.md: 10 warnings, 10 errors and 10 notices per step, 50 per job); the
rest are counted on one plain line. Notes (vendor calls, format and layout findings) are
never annotated: they are in the SARIF log and the report.

Example::

    >>> from pytest_jaxport.view.viewmodel.alerts import Alert
    >>> alert = Alert(rule="budget-violation", level="error", file="src/m.py", line=24,
    ...               message="cuda: 2 cudnn calls > 1", title="cuda: max_library_calls.cudnn",
    ...               identity="x")
    >>> [line] = annotation_lines([alert], mode="errors")
    >>> line.split("::")
    ['', 'error file=src/m.py,line=24,title=jaxport budget-violation%3A cuda%3A \
max_library_calls.cudnn', 'cuda: 2 cudnn calls > 1']

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the plugin reads MODES at start-up: the view's alerts load with a report
    from pytest_jaxport.view.viewmodel.alerts import Alert

AnnotationMode = Literal["off", "errors", "all"]
MODES: tuple[AnnotationMode, ...] = ("off", "errors", "all")
"""``--jaxport-annotations``: none; the errors only; errors and warnings."""

PER_STEP = 10
"""Annotations of one kind (error, warning) GitHub shows per step."""

_COMMANDS = {"error": "error", "warning": "warning"}


def default_mode(environ: Mapping[str, str]) -> AnnotationMode:
    """``all`` inside GitHub Actions (``GITHUB_ACTIONS=true``), else ``off``."""
    return "all" if environ.get("GITHUB_ACTIONS") == "true" else "off"


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit escapes it.

    >>> escape_data("50% done\\nnext")
    '50%25 done%0Anext'
    """
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``), escaped.

    >>> escape_property("a: b, c")
    'a%3A b%2C c'
    """
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(alert: Alert) -> str:
    """One alert as its workflow command."""
    title = f"jaxport {alert.rule}: {alert.title}"
    return (
        f"::{_COMMANDS[alert.level]} file={escape_property(alert.file)},line={alert.line},"
        f"title={escape_property(title)}::{escape_data(alert.message)}"
    )


def annotation_lines(found: Iterable[Alert], *, mode: AnnotationMode) -> list[str]:
    """The workflow commands for ``found`` under ``mode``: errors first, at most
    :data:`PER_STEP` of each kind, then one plain line counting those left out."""
    if mode == "off":
        return []
    levels = ("error", "warning") if mode == "all" else ("error",)
    lines: list[str] = []
    left: dict[str, int] = {}
    for level in levels:
        of_level = [a for a in found if a.level == level]
        lines += [command(a) for a in of_level[:PER_STEP]]
        if len(of_level) > PER_STEP:
            left[level] = len(of_level) - PER_STEP
    if left:
        said = " and ".join(f"{n} more {level}{'s' if n != 1 else ''}" for level, n in left.items())
        lines.append(
            f"jaxport: {said} not annotated (GitHub shows {PER_STEP} of each kind per step); "
            "every finding is in the report (--jaxport-report=FILE.sarif for code scanning)"
        )
    return lines
