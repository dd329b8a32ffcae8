"""Small helpers shared by the pytester-based test modules."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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


@contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Hold a file lock: pytest-xdist workers sharing one expensive run take turns."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: each worker runs its own copy
        yield
        return
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
