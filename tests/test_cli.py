"""The ``jaxport`` console script (``cli.py``): what each command says; ``jaxport diff``'s
``--memory-growth``, checked where it is declared, and the threshold it falls back to (the HEAD
report's ``[tool.jaxport] memory_growth``, else the default); ``jaxport show`` of a report with
memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import built_report
from test_baseline import STEP, run
from test_viewmodel_memory import BIG, report
from test_viewmodel_memory import STEP as STEP_TEST

from pytest_jaxport.cli import main
from pytest_jaxport.report.files import write_json


def reports(tmp_path: Path, *, after: int, growth: float | None = None) -> tuple[str, str]:
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    write_json(base, run(STEP))
    write_json(head, run(after, growth=growth))
    return str(base), str(head)


def test_diff_exits_1_on_memory_grown_past_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, head = reports(tmp_path, after=int(STEP * 1.2))
    assert main(["diff", base, head]) == 1
    out = capsys.readouterr().out
    assert "jaxport diff: 1 grew, 0 shrank" in out
    assert "check 'step' on tpu: planned device memory grew 4.69 GiB -> 5.63 GiB (+" in out
    assert "+20%; memory_growth 10%, set in the default) (compiled)" in out


def test_diff_takes_the_threshold_from_the_option_then_the_head_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, head = reports(tmp_path, after=int(STEP * 1.2), growth=0.5)
    assert main(["diff", base, head]) == 0  # within HEAD's [tool.jaxport] memory_growth
    assert main(["diff", base, head, "--memory-growth", "0.05"]) == 1
    assert "memory_growth 5%, set in --memory-growth)" in capsys.readouterr().out
    base, head = reports(tmp_path, after=int(STEP * 2), growth=0.5)
    assert main(["diff", base, head]) == 1
    assert f"memory_growth 50%, set in {head}'s [tool.jaxport])" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("value", "found"),
    [("10%", "found string '10%' (write 0.1)"), ("-0.1", "found float -0.1"),
     ("nan", "found float nan"), ("lots", "found string 'lots'")],
)  # fmt: skip
def test_memory_growth_is_checked_where_it_is_declared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, found: str
) -> None:
    base, head = reports(tmp_path, after=STEP)
    with pytest.raises(SystemExit) as exited:
        main(["diff", base, head, "--memory-growth", value])
    assert exited.value.code == 2
    assert (
        "jaxport diff: error: argument --memory-growth: expected a share of the base's planned "
        f"memory, 0 or more (0.1: growth past 10% is flagged), {found}"
    ) in capsys.readouterr().err


def test_show_renders_memory_as_the_run_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    write_json(path, report(STEP_TEST, BIG))
    assert main(["show", str(path), "--format", "md"]) == 0
    shown = capsys.readouterr().out
    assert "tpu (v5e): 13.1 of 15.75 GiB (83%)<br>rocm: not compiled |" in shown
    assert "| tpu: does not fit | 1 check in 1 test" in shown


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
