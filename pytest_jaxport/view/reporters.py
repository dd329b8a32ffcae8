"""The report's file formats, one table: a report file's suffix names its :class:`Reporter`.

The plugin's ``--jaxport-report=PATH`` picks from :data:`REPORTERS` by PATH's suffix, and
refuses a suffix the table lacks by the same table (``plugin.REPORT_SUFFIXES``); a new format
is a row here.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pytest_jaxport.report.schema import write_json, write_text
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.html import render_html
from pytest_jaxport.view.model import ReportView
from pytest_jaxport.view.text import render_markdown


class ReportSource(Protocol):
    """What a reporter reads, each built once and only when a format asks for it."""

    def build(self) -> Mapping[str, Any]:
        """The report as the plugin writes it."""
        ...

    def view(self) -> ReportView:
        """The report's view."""
        ...

    def display(self) -> DisplayOptions:
        """The display options."""
        ...


Reporter = Callable[[Path, ReportSource], None]
"""Writes the report to ``path`` (atomically) in its format."""


def write_json_report(path: Path, source: ReportSource) -> None:
    """The report's data itself, compact JSON (``jaxport show`` reads it)."""
    write_json(path, source.build())


def write_markdown_report(path: Path, source: ReportSource) -> None:
    """The view as Markdown, for pull requests."""
    write_text(path, render_markdown(source.view(), source.display()))


def write_html_report(path: Path, source: ReportSource) -> None:
    """The view as one self-contained HTML page."""
    write_text(path, render_html(source.view(), source.display()))


REPORTERS: Mapping[str, Reporter] = {
    ".json": write_json_report,
    ".md": write_markdown_report,
    ".html": write_html_report,
}
"""Each report file format by its suffix, in the order the option's help names them."""


def reporter_for(path: Path) -> Reporter:
    """The reporter ``path``'s suffix names; ``KeyError`` naming the suffix and the known
    ones for any other."""
    try:
        return REPORTERS[path.suffix]
    except KeyError:
        raise KeyError(
            f"{path}: no report format for suffix {path.suffix or '(none)'!r}, expected "
            f"{' or '.join(REPORTERS)}"
        ) from None
