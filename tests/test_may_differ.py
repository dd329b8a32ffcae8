"""Tests of the third state: pytest_jaxport.model.probe.emulated_status, model.emulation.

The third state of an emulation (issue 49): *may differ*. An emulated check whose outputs
matched, but where an op the emulation cannot compute as the chip does (tanh here) has a
measured error on TPU v5 lite that moves them beyond the tolerance. Said in every format,
counted in the headline, failing its test unless ``may_differ = "warn"``.

Real pytest runs through ``pytester``, real JAX, the bounds the package ships
(``pytest_jaxport/chip_errors.json``, measured on the chip). Before this state existed the
same check passed as "match".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import esc, run_json, typed

from pytest_jaxport.cli import main
from pytest_jaxport.view.html import html
from pytest_jaxport.view.markdown import markdown
from pytest_jaxport.view.sarif import sarif_log

SQUASH = """
import jax.numpy as jnp
import numpy as np
import pytest

def squash(x):
    return jnp.tanh(x) * 2

X = np.linspace(-3, 3, 256, dtype=np.float32)

@pytest.mark.portable
def test_squash(jaxport):
    jaxport.check(squash, X)

@pytest.mark.portable(rtol=1e-2, atol=1e-3)
def test_loose(jaxport):
    jaxport.check(squash, X)
"""

TANH_LINE = 6
HEAD = (
    "may differ on tpu: tanh at test_squash.py:6 is within 1,400 ulp on TPU v5 lite "
    "(measured: jax 0.10.2, libtpu 0.0.42.1), above rtol 1e-06"
)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyprojecttoml(
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        emulate = ["tpu"]
        """
    )
    pytester.makepyfile(test_squash=SQUASH)
    assert pytester.path.joinpath("test_squash.py").read_text().splitlines()[TANH_LINE - 1] == (
        "    return jnp.tanh(x) * 2"
    )
    return pytester


def tpu_entry(report: dict[str, Any], test: str) -> dict[str, Any]:
    (found,) = [t for t in report["tests"] if t["nodeid"].endswith(test)]
    (check,) = found["checks"]
    return dict(check["platforms"]["tpu"])


def test_a_check_that_may_differ_on_the_chip_fails_by_default_and_says_why(
    project: pytest.Pytester,
) -> None:
    result, report = run_json(project, "-rf", "--junitxml=out.xml")

    result.assert_outcomes(passed=1, failed=1)  # the loose tolerance holds on the chip
    result.stdout.fnmatch_lines(
        [
            esc(f"tpu (emulated on cpu): {HEAD} (may_differ = \"fail\", set in the default); "
                "check 'squash', emulated"),
            "*with each op below off by its measured bound: <root>: * of 256 elements differ "
            "beyond rtol=1e-06, atol=1e-06 (float32)*",
            "*tanh at test_squash.py:6 is within 1,400 ulp (above rtol 1e-06)",
            esc("to pass: if an error of the size measured on tpu is acceptable, loosen "
                "[tool.jaxport.tolerance.tpu.<dtype>] or the marker's rtol/atol; to be told "
                'without failing, set may_differ = "warn" (set in the default); to know, run '
                "the check on tpu"),
            "FAILED test_squash.py::test_squash - tpu (emulated on cpu): may differ on tpu*",
        ]
    )  # fmt: skip
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    tpu = tpu_entry(report, "test_squash")
    assert tpu["emulated_numerics"]["ok"] is True  # it matched: the bound is what differs
    assert tpu["emulated_bounds"]["ok"] is False
    (site,) = tpu["emulated"]["bounded"]
    assert (site["op"], site["location"], site["bound"]["worst_ulp"]) == (
        "tanh", "test_squash.py:6", 1400.0)  # fmt: skip
    assert tpu["emulated"]["bounds_from"] == "TPU v5 lite (measured: jax 0.10.2, libtpu 0.0.42.1)"
    (violation,) = [v for t in report["tests"] for v in t["violations"]]
    assert (violation["key"], violation["limit"], violation["what"]) == (
        "emulated_may_differ", "fail", HEAD)  # fmt: skip
    loose = tpu_entry(report, "test_loose")
    assert loose["emulated_bounds"]["ok"] is True  # 1,400 ulp is far inside rtol 1e-2
    xml = (project.path / "out.xml").read_text()
    assert '<property name="jaxport.squash.tpu.emulated" value="may differ"' in xml
    assert '<property name="jaxport.squash.tpu.emulated" value="match"' in xml


@pytest.mark.slow
def test_may_differ_warn_passes_with_a_warning_never_silently(project: pytest.Pytester) -> None:
    project.makepyprojecttoml(
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        emulate = ["tpu"]
        may_differ = "warn"
        """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [esc(f"*JaxportWarning: check 'squash': {HEAD} (may_differ = \"warn\", set in "
             "pyproject.toml [tool.jaxport])")]
    )  # fmt: skip
    project.runpytest("-W", "error::pytest_jaxport.JaxportWarning").assert_outcomes(
        passed=1, failed=1
    )


def test_the_marker_sets_it_for_its_test(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_squash=SQUASH.replace(
            "@pytest.mark.portable\ndef test_squash",
            '@pytest.mark.portable(may_differ="warn")\ndef test_squash',
        )
    )
    project.runpytest().assert_outcomes(passed=2, warnings=1)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ('"maybe"', "*pyproject.toml: [[]tool.jaxport[]] may_differ: expected one of 'fail', "
         "'warn' (what an emulation that may differ on the chip does to its test), found "
         "'maybe'"),
        ("true", "*pyproject.toml: [[]tool.jaxport[]] may_differ: expected one of 'fail', "
         "'warn'*found True"),
    ],
)  # fmt: skip
def test_a_wrong_may_differ_is_a_usage_error_naming_the_file_and_key(
    project: pytest.Pytester, value: str, said: str
) -> None:
    project.makepyprojecttoml(
        f"""
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        emulate = ["tpu"]
        may_differ = {value}
        """
    )
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])
    result.stderr.no_fnmatch_line("*Traceback*")


def test_every_format_names_the_third_state_and_the_headline_counts_it(
    project: pytest.Pytester, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result, report = run_json(project, "-v")

    result.stdout.fnmatch_lines(
        [
            "*tpu (emulated on cpu)  numerics: may differ",
            f"*{esc(HEAD)}",
            # numerics, not a budget violation (issue 50's item 10, for the third state too)
            "problems: 1 failed, 0 budget violations, 1 check may differ on tpu (emulated)",
            "  tpu: numerics may differ (emulated on cpu) — 1 check in 1 test (may_differ = "
            '"fail", set in the',
            "      default: the test fails)",
            "2 portable tests, 2 checks, 1 failed, 0 budget violations, 1 check may differ on "
            "tpu (emulated);",
        ]
    )
    said = " ".join(line.strip() for line in result.stdout.lines)
    assert "emulated on cpu (emulate): tpu 2 checks: 1 match, 1 may differ" in said
    md = markdown(typed(report))
    assert "| platform | checks | match | may differ | mismatch | failed | not run |" in md
    assert "| tpu (emulated on cpu) | 2 | 1 | 1 | 0 | 0 | 0 |" in md
    assert "1 check may differ on tpu (emulated)" in md
    assert "emulated: may differ" in md
    page = html(typed(report))
    assert 'class="numerics warn" title="tpu (emulated on cpu)">emulated: may differ' in page
    assert HEAD.replace("'", "&#x27;") in page or HEAD in page
    log = sarif_log(typed(report))
    (may,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "numerics-may-differ"]
    location = may["locations"][0]["physicalLocation"]
    assert (location["artifactLocation"]["uri"], location["region"]["startLine"]) == (
        "test_squash.py", TANH_LINE)  # fmt: skip
    assert HEAD in may["message"]["text"]
    path = tmp_path / "leg.json"
    path.write_text(json.dumps(report))
    capsys.readouterr()
    assert main(["merge", str(path), "-o", str(tmp_path / "all.json")]) in (0, 1)
    merged = json.loads((tmp_path / "all.json").read_text())
    assert tpu_entry(merged, "test_squash")["emulated_bounds"]["ok"] is False
    capsys.readouterr()
    main(["show", str(tmp_path / "all.json"), "-v"])
    shown = capsys.readouterr().out
    assert "tpu (emulated on cpu)  numerics: may differ" in shown
    assert "1 check may differ on tpu (emulated)" in shown


@pytest.mark.slow
def test_xdist_gives_the_same_third_state(project: pytest.Pytester) -> None:
    serial, alone = run_json(project)
    parallel, split = run_json(project, "-n", "2")
    serial.assert_outcomes(passed=1, failed=1)
    parallel.assert_outcomes(passed=1, failed=1)
    for report in (alone, split):
        tpu = tpu_entry(report, "test_squash")
        assert (tpu["emulated_numerics"]["ok"], tpu["emulated_bounds"]["ok"]) == (True, False)
    assert [v["key"] for t in split["tests"] for v in t["violations"]] == ["emulated_may_differ"]
    assert (
        tpu_entry(split, "test_squash")["emulated"] == tpu_entry(alone, "test_squash")["emulated"]
    )
