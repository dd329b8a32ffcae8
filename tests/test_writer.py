"""The session's writer (``pytest_jaxport/session/writer.py``): the report is built where
something reads it, and only there."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_jaxport.model.tooling import ToolingScan
from pytest_jaxport.session import writer

DOCKERFILE = "FROM nvidia/cuda:12.3.1-runtime-ubuntu22.04\n"
"""A line the tooling scan finds (``cuda-image``)."""


def test_a_run_nothing_reads_builds_no_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a report, an audit, a baseline or a hook of the user's, nothing reads the
    report: it is not built, and the project's files are not scanned (a scan of a large tree
    costs seconds). With ``--jaxport-report`` it is built, and scanned, once."""
    scans: list[Path] = []
    scan_tree = writer.scan_tree

    def counted(root: Path, **kwargs: object) -> ToolingScan:
        scans.append(root)
        return scan_tree(root, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer, "scan_tree", counted)
    pytester.makefile("", Dockerfile=DOCKERFILE)
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert scans == []
    result = pytester.runpytest("-p", "no:cacheprovider", "--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    assert scans == [pytester.path]
    assert '"rule": "cuda-image"' in (pytester.path / "r.json").read_text()


def test_a_users_tooling_hook_runs_and_is_said_without_a_report(
    pytester: pytest.Pytester,
) -> None:
    """A tooling hook of the user's runs in every session, as before the report was built
    only where read: when it raises, the run says so and fails, report or not."""
    pytester.makeconftest(
        """
        def pytest_jaxport_tooling_rules(config):
            raise ValueError("no rules today")
        """
    )
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "jaxport: your pytest_jaxport_tooling_rules hook raised ValueError: no rules today "
            "at conftest.py:2; the tooling scan used the built-in rules only"
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
