"""The ``jaxport`` console script (``cli.py``): what each command says."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import built_report

from pytest_jaxport.cli import main
from pytest_jaxport.report.files import write_json


def _leg(path: Path) -> Path:
    test = {"nodeid": "t.py::test_f", "outcome": "passed", "checks": []}
    report = built_report([test], config={"platforms": ["cpu"], "reference": "cpu"})
    write_json(path, report)
    return path


def test_a_merge_of_one_leg_says_it_is_one_leg(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 55, item 12: ``jaxport merge`` of a single leg said "no leg saved outputs", when
    the reason nothing was compared is that there is one leg."""
    leg = _leg(tmp_path / "leg.json")
    assert main(["merge", str(leg), "-o", str(tmp_path / "m.json")]) == 0
    said = capsys.readouterr().out
    assert "1 leg, 1 test, 0 output comparisons: nothing compared (one leg: outputs are " in said
    assert "no leg saved outputs" not in said
    assert main(["show", str(tmp_path / "m.json")]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "numerics across legs: nothing compared (one leg: outputs are compared across " in (
        shown
    )
    assert "no two legs saved outputs" not in shown
