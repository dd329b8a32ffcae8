"""Reading a report's file (``report/files.py``): what a file that is no report is called."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_jaxport.report.errors import ReportError
from pytest_jaxport.report.files import from_json


def test_an_empty_list_is_no_code_quality_report() -> None:
    """Issue 55, item 12: a file holding ``[]`` was called "a GitLab Code Quality report"."""
    with pytest.raises(ReportError) as raised:
        from_json([], Path("r.json"))
    assert str(raised.value) == "r.json: not a pytest-jaxport report"
    finding = {"check_name": "jaxport", "fingerprint": "0" * 32, "description": "x"}
    with pytest.raises(ReportError, match=r"^r\.json: a GitLab Code Quality report"):
        from_json([finding], Path("r.json"))
