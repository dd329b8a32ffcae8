"""Tests of oneapi (pytest_jaxport.model.platforms) in every report, merge and baseline.

oneapi in every place a platform travels (issue 41): every report format, ``jaxport
merge`` of two legs, a baseline written then compared, ``jaxport diff`` and the suite audit.

One small suite, a oneMKL solve and a Pallas kernel (no pallas_call rule for oneapi: a kernel
to rewrite), is run for ``platforms = ["cpu", "cuda", "oneapi"]``; each place is read for
oneapi's own counts (its oneMKL and jaxlib calls, its failure to lower, its kernel to rewrite
and its days), which are taken from the JSON report the same run wrote, never written out
here. Real pytest runs through ``pytester``, real lowering, on a JAX that lowers for oneapi
(0.12+); older JAX refuses oneapi (``tests/test_oneapi.py``).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.model.platforms import DESCRIPTIONS, release

NEEDED = DESCRIPTIONS["oneapi"].requires_jax or "0"
INSTALLED = importlib.metadata.version("jax")

pytestmark = [
    pytest.mark.skipif(
        release(INSTALLED) < release(NEEDED),
        reason=f"oneapi's counts need jax {NEEDED}+, found {INSTALLED}",
    ),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "oneapi"]
"""

SUITE = """
import jax, jax.numpy as jnp, pytest
from jax.experimental import pallas as pl

def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0

def double(x):
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=False)(x)

def solve(a, b):
    return jnp.linalg.solve(a, b)

@pytest.mark.portable
def test_solve(jaxport):
    jaxport.check(solve, jnp.eye(4) + 1.0, jnp.ones(4), name="solve")

@pytest.mark.portable
def test_kernel(jaxport):
    jaxport.check(double, jnp.ones((8, 128)), name="double")
"""

GROWN = SUITE.replace(
    "return jnp.linalg.solve(a, b)", "return jnp.linalg.solve(a, b) + jnp.linalg.eigh(a)[0]"
)

FORMATS = ("r.json", "r.md", "r.html", "r.sarif", "r.codequality.json")
JAXPORT = [sys.executable, "-m", "pytest_jaxport.cli"]


def _cli(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JAXPORT, *args], cwd=where, capture_output=True, text=True, check=False)


def _oneapi(report: dict[str, Any]) -> dict[str, Any]:
    return report["summary"]["platforms"]["oneapi"]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_every_format_carries_oneapis_counts_and_numbers(project: pytest.Pytester) -> None:
    """JSON, Markdown, HTML, SARIF and GitLab Code Quality written by one run: each names
    oneapi's oneMKL and jaxlib calls, its failure to lower the Pallas kernel, and (where a
    format shows the three numbers) its kernel to rewrite and its days."""
    result = project.runpytest(*(f"--jaxport-report={name}" for name in FORMATS))
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    report = json.loads((project.path / "r.json").read_text())
    oneapi = _oneapi(report)
    assert oneapi["libraries"] == {"onemkl": 3, "jaxlib": 1}  # getrf, two trsm; the pivots
    assert (oneapi["lowered"], oneapi["failed_to_lower"], oneapi["custom"]) == (1, 1, 0)
    summary = report["summary"]
    rewrite, days = summary["kernels_to_rewrite"]["oneapi"], summary["rewrite_days"]["oneapi"]
    assert rewrite == 1  # cuda's Triton kernel has no oneapi lowering
    assert days > summary["rewrite"]["oneapi"]["breakdown"]["fixed"]  # priced: its rewrite
    assert "rocm" not in summary["rewrite_days"]  # not lowered here: not priced
    result.stdout.fnmatch_lines([f"*kernels to rewrite*oneapi {rewrite}*"])

    markdown = (project.path / "r.md").read_text()
    assert f"| oneapi | {rewrite} | {days:g} |" in markdown  # the rewrite table's row
    assert "oneapi: does not lower" in markdown
    assert "jaxlib 1, onemkl 3" in markdown  # the per-platform counts' libraries

    html = (project.path / "r.html").read_text()
    assert "oneapi: does not lower" in html
    assert "onemkl" in html
    assert "Intel Data Center GPU Max 1550" in html  # the device oneapi was judged for

    def alerts(texts: list[str]) -> list[str]:
        return sorted(t for t in texts if t.startswith(("oneapi:", "jaxport/")) and "oneapi" in t)

    sarif = json.loads((project.path / "r.sarif").read_text())
    results = [r for run in sarif["runs"] for r in run["results"]]
    said = alerts([r["message"]["text"] for r in results])
    assert any(
        t.startswith("oneapi: check 'double'") and "pallas_call" in t and "oneapi" in t
        for t in said
    ), said
    vendor = [r for r in results if r["message"]["text"].startswith("oneapi: onemkl ")]
    assert {r["ruleId"] for r in vendor} == {"vendor-library"}
    assert sum(int(r["message"]["text"].split(", ")[1].split()[0]) for r in vendor) == 3

    quality = json.loads((project.path / "r.codequality.json").read_text())
    described = [i["description"] for i in quality]
    assert sum(d.startswith("oneapi: onemkl ") for d in described) == len(vendor)
    assert any(d.startswith("oneapi: check 'double'") for d in described)
    assert all(
        i["check_name"].startswith("jaxport/") for i in quality if "oneapi" in i["description"]
    )


@pytest.mark.slow
def test_a_merge_of_two_legs_keeps_oneapi(project: pytest.Pytester) -> None:
    """Two CI legs, each lowering for oneapi (one without cuda): the merged report holds
    oneapi's counts from both legs, and its Markdown names them."""
    first = project.runpytest("--jaxport-report=leg1.json")
    first.assert_outcomes(passed=2)
    second = project.runpytest("--jaxport-report=leg2.json", "--jaxport-platforms=cpu,oneapi")
    second.assert_outcomes(passed=2)
    legs = [json.loads((project.path / n).read_text()) for n in ("leg1.json", "leg2.json")]
    merged = _cli(project.path, "merge", "-o", "m.json", "--md", "m.md", "leg1.json", "leg2.json")
    assert merged.returncode == 0, merged.stderr
    data = json.loads((project.path / "m.json").read_text())
    assert _oneapi(data)["libraries"] == _oneapi(legs[0])["libraries"]
    assert _oneapi(data)["libraries"] == _oneapi(legs[1])["libraries"]
    assert "oneapi" in data["config"]["platforms"]
    checks = {c["name"]: c for t in data["tests"] for c in t["checks"]}
    assert checks["solve"]["platforms"]["oneapi"]["lowered"]["libraries"] == {
        "onemkl": 3,
        "jaxlib": 1,
    }
    assert checks["double"]["platforms"]["oneapi"]["lowered"] is None
    assert "onemkl" in (project.path / "m.md").read_text()


@pytest.mark.slow
def test_a_baseline_ratchets_oneapis_counts_and_diff_shows_them(
    project: pytest.Pytester,
) -> None:
    """``--jaxport-baseline`` written, then compared: unchanged it passes; a new oneMKL
    eigh grows oneapi's counts and the test fails naming oneapi. ``jaxport diff`` of the two
    reports says the same."""
    written = project.runpytest(
        "--jaxport-baseline=base.json", "--jaxport-baseline-update", "--jaxport-report=before.json"
    )
    written.assert_outcomes(passed=2)
    baseline = json.loads((project.path / "base.json").read_text())
    solve = baseline["tests"]["test_suite.py::test_solve"]["solve"]["oneapi"]["lowered"]
    assert (solve["library.onemkl"], solve["library.jaxlib"], solve["vendor"]) == (3, 1, 4)
    assert baseline["tests"]["test_suite.py::test_kernel"]["double"]["oneapi"] == {"lowered": None}
    same = project.runpytest("--jaxport-baseline=base.json")
    same.assert_outcomes(passed=2)

    project.makepyfile(test_suite=GROWN)
    grown = project.runpytest("--jaxport-baseline=base.json", "--jaxport-report=after.json")
    grown.assert_outcomes(passed=1, failed=1)
    after = json.loads((project.path / "after.json").read_text())
    grown_solve = next(c for t in after["tests"] for c in t["checks"] if c["name"] == "solve")[
        "platforms"
    ]["oneapi"]["lowered"]
    assert grown_solve["libraries"] == {"onemkl": 4, "jaxlib": 1}  # and oneapisolver_syevd_ffi
    grown.stdout.fnmatch_lines(["*oneapi: onemkl calls grew*since the baseline*"])

    diff = _cli(project.path, "diff", "before.json", "after.json", "--md", "d.md")
    assert diff.returncode in (0, 1), diff.stderr
    before = json.loads((project.path / "before.json").read_text())
    was, now = _oneapi(before)["libraries"]["onemkl"], _oneapi(after)["libraries"]["onemkl"]
    assert now == was + 1
    assert "oneapi" in diff.stdout
    assert "onemkl" in diff.stdout
    assert "oneapi" in (project.path / "d.md").read_text()


AUDITED = """
import jax, jax.numpy as jnp

@jax.jit
def solve(a, b):
    return jnp.linalg.solve(a, b)

def test_solve():
    assert solve(jnp.eye(4) + 1.0, jnp.ones(4)).shape == (4,)

def test_eigh():
    w, v = jax.jit(jnp.linalg.eigh)(jnp.eye(4))
    assert w.shape == (4,)
"""


def test_the_audit_counts_oneapi(pytester: pytest.Pytester) -> None:
    """``--jaxport-audit`` with oneapi among the platforms: each distinct computation is
    counted for oneapi (oneMKL's getrf and syevd, jaxlib's pivots), and the audit's totals
    and its terminal section say so."""
    pytester.makepyprojecttoml(PROJECT)
    pytester.makepyfile(test_audited=AUDITED)
    result = pytester.runpytest(
        "--jaxport-audit", "--jaxport-report=a.json", "--jaxport-report=a.md"
    )
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    audit = json.loads((pytester.path / "a.json").read_text())["audit"]
    names = {
        k["name"]
        for c in audit["computations"]
        for k in (c["platforms"]["oneapi"]["lowered"] or {}).get("kernels", [])
    }
    assert {"oneapisolver_getrf_ffi", "oneapisolver_syevd_ffi"} <= names
    assert "oneapi_lu_pivots_to_permutation" in names
    totals = audit["summary"]["platforms"]["oneapi"]
    assert totals["libraries"]["onemkl"] >= 2
    assert totals["libraries"]["jaxlib"] == 1
    assert totals["failed_to_lower"] == 0
    said = " ".join(result.stdout.str().split())  # the terminal's lines, unwrapped
    markdown = (pytester.path / "a.md").read_text()
    assert f"oneapi {totals['vendor']} calls at {totals['vendor_sites']} sites" in markdown
    assert "| jaxlib 1, onemkl " in markdown  # the per-platform counts' libraries
    assert re.search(r"kernels to rewrite (?:moving )?off cuda[^:]*: oneapi 0", said)
    assert totals["vendor"] == sum(totals["libraries"].values())
    assert audit["platforms"] == ["cpu", "cuda", "oneapi"]


def test_oneapi_named_on_the_command_line_is_priced(pytester: pytest.Pytester) -> None:
    """``--jaxport-platforms=cpu,cuda,oneapi`` with no ``platforms`` in pyproject: oneapi is
    lowered for, and its kernel to rewrite (the Pallas kernel) is counted and priced, as
    when pyproject names it."""
    pytester.makepyprojecttoml("[tool.jaxport]\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--jaxport-platforms=cpu,cuda,oneapi", "--jaxport-report=r.json")
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    assert _oneapi(report)["failed_to_lower"] == 1
    assert "oneapi" in report["config"]["migrate_to"]
    assert report["summary"]["kernels_to_rewrite"]["oneapi"] == 1
