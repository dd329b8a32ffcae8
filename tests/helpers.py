"""Small helpers shared by the pytester-based test modules."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest


def esc(text: str) -> str:
    """Escape fnmatch's character classes: ``[tool.jaxport]`` and ``f[grad]`` match themselves."""
    return re.sub(r"[\[\]]", lambda m: f"[{m.group()}]", text)


def run_json(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run pytest in-process with a JSON report; the result and the loaded report."""
    result = pytester.runpytest("--jaxport-report=report.json", *args)
    report = json.loads((pytester.path / "report.json").read_text())
    return result, report
