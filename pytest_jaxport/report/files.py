"""The report's files (the only place a report is JSON): written atomically, read back and
checked (:func:`load`, older versions upgraded), and told apart from the other files
pytest-jaxport writes (a rendering, a SARIF log, a baseline) given in a report's place. Its
shape is described once, in docs/reference.md ("Report: --jaxport-report=PATH.json").

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pytest_jaxport.report.document import SCHEMA_VERSION, TOOL_NAME, Report, read_report
from pytest_jaxport.report.errors import ReportError
from pytest_jaxport.report.upgrade import READABLE_VERSIONS, recounted, upgrade
from pytest_jaxport.version import __version__

BASELINE_KIND = "baseline"
BASELINE_VERSION = 1


def baseline_given(path: Path) -> str:
    """What a command that reads reports says of a baseline given in a report's place."""
    return (
        f"{path}: a baseline, not a report: it holds only counts (for --jaxport-baseline and "
        "jaxport diff); give a report written by pytest --jaxport-report=PATH.json or by "
        "jaxport merge -o"
    )


TIMING_KEYS = frozenset({"runtime_share", "seconds", "share"})
"""Report keys that hold measured times (or text made from them): they differ run to run."""


def without_timings(data: object) -> object:
    """``data`` with every measured-time key removed: what two runs of the same suite on the
    same machine must agree on exactly (counts, outcomes, numerics status)."""
    if isinstance(data, Mapping):
        return {k: without_timings(v) for k, v in data.items() if k not in TIMING_KEYS}
    if isinstance(data, list):
        return [without_timings(v) for v in data]
    return data


def write_json(path: Path, report: Report | Mapping[str, object]) -> None:
    """Write atomically: a temporary file in the same folder, then ``os.replace``. Compact
    (no indentation): a 2,000-test report is half the size and written five times faster;
    ``jaxport show`` is the way to read one."""
    data = report.to_dict() if isinstance(report, Report) else report
    write_text(path, json.dumps(data) + "\n")


def write_text(path: Path, text: str) -> None:
    """Atomic text write; a run killed mid-write leaves the previous file intact."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load(path: str | os.PathLike[str]) -> Report:
    """Read a report of any version in :data:`READABLE_VERSIONS`, upgraded to this one and
    checked field by field (:func:`~pytest_jaxport.report.document.read_report`); refuse
    anything else with a :class:`ReportError` naming the file (and the place, for a field
    of the wrong type or a missing one).

    >>> load("missing.json")
    Traceback (most recent call last):
    ...
    pytest_jaxport.report.errors.ReportError: missing.json: no such file
    """
    path = Path(path)
    return from_json(read_json(path), path)


RENDERINGS: tuple[tuple[str, str], ...] = (
    ("## pytest-jaxport", "the Markdown rendering of a report"),
    ("<!doctype html", "the HTML rendering of a report"),
    ("<!DOCTYPE html", "the HTML rendering of a report"),
)
"""How a file pytest-jaxport rendered (not its JSON) starts, and what it is."""
_INSTEAD = (
    "the commands read the JSON report: pytest --jaxport-report=PATH.json writes it beside "
    "the other formats (or jaxport merge -o PATH.json)"
)


def read_json(path: Path) -> object:
    """``path``'s JSON, or a :class:`ReportError` naming the file: missing, unreadable,
    truncated, or one of pytest-jaxport's other formats (Markdown, HTML) given where the
    JSON report is read, which says where the JSON comes from."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot be read: {e}") from None
    for start, what in RENDERINGS:
        if text.lstrip().startswith(start):
            raise ReportError(f"{path}: {what}, not its JSON; {_INSTEAD}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON (truncated?): {e}") from None


def _other_format(data: object) -> str | None:
    """What a JSON file pytest-jaxport wrote, other than a report, is: a SARIF log, a GitLab
    Code Quality report; ``None`` for anything else."""
    if isinstance(data, dict) and "runs" in data and "sarif" in str(data.get("$schema", "")):
        return "a SARIF log (the report's findings for code scanning)"
    if (
        isinstance(data, list)
        and data  # an empty list is anyone's (issue 55: `[]` read as Code Quality's)
        and all(isinstance(d, dict) and {"check_name", "fingerprint"} <= d.keys() for d in data)
    ):
        return "a GitLab Code Quality report (the report's findings)"
    return None


def from_json(data: object, path: Path) -> Report:
    """A report's decoded JSON (any readable version) as a checked :class:`Report`."""
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(tool, dict) or tool.get("name") != TOOL_NAME:
        other = _other_format(data)
        if other is not None:
            raise ReportError(f"{path}: {other}, not a report; {_INSTEAD}")
        raise ReportError(f"{path}: not a pytest-jaxport report")
    if data.get("kind") == BASELINE_KIND:  # its schema_version counts baselines, not reports
        raise ReportError(baseline_given(path))
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise ReportError(
            f"{path}: schema_version {version!r} is not supported "
            f"(this pytest-jaxport {__version__} reads versions {readable})"
        )
    if version == SCHEMA_VERSION:
        return read_report(data, file=str(path))
    try:
        upgraded = upgrade(data)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise ReportError(
            f"{path}: malformed version {version} report ({type(e).__name__}: {e})"
        ) from None
    return read_report(upgraded, file=str(path), recount=recounted)
