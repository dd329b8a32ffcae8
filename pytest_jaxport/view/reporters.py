"""The report's file formats, one table: a report file's suffix names its :class:`Reporter`.

The plugin's ``--jaxport-report=PATH`` picks from :data:`REPORTERS` by PATH's suffix, and
refuses a suffix the table lacks by the same table (``plugin.REPORT_SUFFIXES``); a new format
is a row here.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import site
import sysconfig
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pytest_jaxport.report.document import Report
    from pytest_jaxport.view.display import DisplayOptions
    from pytest_jaxport.view.viewmodel.reportview import ReportView

# Each reporter loads its renderer (and the report's file writing) when it writes: the plugin
# reads this table at start-up, and a session that writes no report never loads them.


class ReportSource(Protocol):
    """What a reporter reads, each built once and only when a format asks for it."""

    def build(self) -> Report:
        """The report (typed: its JSON appears only as the ``.json`` file is written)."""
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
    from pytest_jaxport.report.files import write_json

    write_json(path, source.build())


def write_markdown_report(path: Path, source: ReportSource) -> None:
    """The view as Markdown, for pull requests."""
    from pytest_jaxport.report.files import write_text
    from pytest_jaxport.view.markdown import render_markdown

    write_text(path, render_markdown(source.view(), source.display()))


def write_html_report(path: Path, source: ReportSource) -> None:
    """The view as one self-contained HTML page."""
    from pytest_jaxport.report.files import write_text
    from pytest_jaxport.view.html import render_html

    write_text(path, render_html(source.view(), source.display()))


@lru_cache(maxsize=4096)
def installed_file(file: str) -> bool:
    """Whether ``file``, as a report shows it, is a file of an installed package (a site in
    a library shows relative to its ``site-packages``): not a line of the repository."""
    folders = {*site.getsitepackages(), site.getusersitepackages()}
    folders |= {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    return any((Path(folder) / file).is_file() for folder in folders)


def sarif_text(view: ReportView) -> str:
    """The view's findings as a SARIF 2.1.0 log's text (view/sarif.py), those at installed
    packages' files left out."""
    from pytest_jaxport.view.sarif import render_sarif

    log = render_sarif(view, outside=installed_file)
    return json.dumps(log, indent=2) + "\n"


def write_sarif_report(path: Path, source: ReportSource) -> None:
    """The findings as a SARIF 2.1.0 log, for code scanning."""
    from pytest_jaxport.report.files import write_text

    write_text(path, sarif_text(source.view()))


def write_code_quality_report(path: Path, source: ReportSource) -> None:
    """The findings as a GitLab Code Quality report (view/codequality.py)."""
    from pytest_jaxport.report.files import write_text
    from pytest_jaxport.view.codequality import code_quality

    found = source.view().alerts.in_repository(outside=installed_file)
    write_text(path, json.dumps(code_quality(found), indent=2) + "\n")


REPORTERS: Mapping[str, Reporter] = {
    ".json": write_json_report,
    ".md": write_markdown_report,
    ".html": write_html_report,
    ".sarif": write_sarif_report,
    ".codequality.json": write_code_quality_report,
}
"""Each report file format by its suffix, in the order the option's help names them. A
two-part suffix (``.codequality.json``) is matched before its last part (``.json``)."""


def report_suffix(path: Path) -> str:
    """The suffix of :data:`REPORTERS` that ``path`` ends in, the longest first; else its
    last suffix (``''`` for none)."""
    matches = [s for s in REPORTERS if path.name.endswith(s) and path.name != s]
    return max(matches, key=len) if matches else path.suffix


def reporter_for(path: Path) -> Reporter:
    """The reporter ``path``'s suffix names; ``KeyError`` naming the suffix and the known
    ones for any other."""
    try:
        return REPORTERS[report_suffix(path)]
    except KeyError:
        raise KeyError(
            f"{path}: no report format for suffix {path.suffix or '(none)'!r}, expected "
            f"{' or '.join(REPORTERS)}"
        ) from None
