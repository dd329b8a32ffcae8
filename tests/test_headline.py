"""The headline (``view/viewmodel/headline.py``): the counts and setting a report leads with."""

from __future__ import annotations

import pytest


def test_a_run_that_checked_nothing_says_so_without_empty_lists(
    pytester: pytest.Pytester,
) -> None:
    """Issue 55, item 12: with 0 checks, ``-q`` read ``0 checks; lowered: ; vendor calls: ;
    custom calls:``, and "present here: none" on a CPU machine (JAX was never loaded to
    look)."""
    pytester.makepyfile(test_plain="def test_a():\n    assert True\n")
    result = pytester.runpytest("-q", "-p", "no:randomly", "--jaxport-report=r.md")
    result.assert_outcomes(passed=1)
    said = result.stdout.str()
    assert "lowered: ;" not in said
    assert "0 checks;" not in said
    flat = " ".join(said.split())
    assert "present here: not looked up (no check ran: JAX was not loaded)" in flat
    assert "present here: none" not in flat
    assert "present here: not looked up" in (pytester.path / "r.md").read_text()
