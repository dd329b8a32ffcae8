"""The session's report writer (``session/writer.py``): files written, and what a run says
when one cannot be."""

from __future__ import annotations

import pytest

CHECKED = """
import jax.numpy as jnp
import pytest


@pytest.mark.portable
def test_doubled(jaxport):
    jaxport.check(lambda x: x * 2, jnp.ones(3))
"""


@pytest.mark.parametrize("quiet", [True, False])
def test_a_report_that_cannot_be_written_fails_the_run_and_says_so_on_its_own_line(
    pytester: pytest.Pytester, quiet: bool
) -> None:
    """Issue 55, item 12: ``--jaxport-report=/proc/r.json`` glued its error onto -q's
    progress line, and the last line said "1 passed" while the exit status was 1."""
    pytester.makepyfile(test_doubled=CHECKED)
    (pytester.path / "blocker").write_text("a file where a folder is needed")
    args = ["-p", "no:randomly", "--jaxport-report=blocker/r.json", "--jaxport-report=r.json"]
    result = pytester.runpytest(*(["-q"] if quiet else []), *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = result.stdout.lines
    [said] = [line for line in lines if "could not write the report" in line]
    assert said.startswith("jaxport: could not write the report "), said
    assert "blocker" in said
    result.stdout.fnmatch_lines(["*1 passed, 1 jaxport report not written in *"])
    assert (pytester.path / "r.json").is_file()  # the others are written
