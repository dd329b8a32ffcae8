"""Tests of pytest_jaxport.view.sarif and view.codequality.

Findings where reviewers look (issue 42): the SARIF 2.1.0 log of ``--jaxport-report=
FILE.sarif``, ``jaxport show --format sarif`` and ``jaxport merge --sarif``, and the GitLab
Code Quality report of ``--jaxport-report=FILE.codequality.json``.

The log is validated with ``jsonschema`` against :data:`CODE_SCANNING`, a schema written here
of what GitHub code scanning requires and shows of a SARIF 2.1.0 file (docs.github.com, "SARIF
support for code scanning": the log's ``version`` and ``runs``; the driver's ``name``; each
rule's ``id``, its short and full description, help and ``helpUri``; each result's
``ruleId``, ``level``, ``message.text``, one ``physicalLocation`` with an
``artifactLocation.uri`` and a ``region.startLine``, and ``partialFingerprints``). No
package on the index ships the OASIS schema file, and none is copied here.

The demo is the one of tests/test_examples.py (run once per session, serial); this file runs
it once more under pytest-xdist with ``GITHUB_ACTIONS=true`` and compares.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import exclusive
from test_examples import DEMO, TIMEOUT_S, DemoRun, _copy_demo, _environment, demo

from pytest_jaxport import cli
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.report.document import Config, Environment, Report
from pytest_jaxport.report.totals import Summary
from pytest_jaxport.view.reporters import REPORTERS, reporter_for
from pytest_jaxport.view.sarif import DOCS_URL, FINGERPRINT, RULE_IDS, RULES, sarif_log
from pytest_jaxport.view.viewmodel.alerts import alerts_of

__all__ = ["demo"]  # the demo's fixture, shared with tests/test_examples.py

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates the SARIF log")

ROOT = Path(__file__).resolve().parent.parent
TEXT = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}
CODE_SCANNING: dict[str, Any] = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name", "version", "rules"],
                                "properties": {
                                    "name": {"const": "pytest-jaxport"},
                                    "version": {"type": "string", "minLength": 1},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": [
                                                "id",
                                                "shortDescription",
                                                "fullDescription",
                                                "help",
                                                "helpUri",
                                            ],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "shortDescription": TEXT,
                                                "fullDescription": TEXT,
                                                "help": TEXT,
                                                "helpUri": {"type": "string", "format": "uri"},
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": [
                                "ruleId",
                                "level",
                                "message",
                                "locations",
                                "partialFingerprints",
                            ],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "level": {"enum": ["error", "warning", "note"]},
                                "message": TEXT,
                                "locations": {
                                    "type": "array",
                                    "minItems": 1,
                                    "maxItems": 10,
                                    "items": {
                                        "type": "object",
                                        "required": ["physicalLocation"],
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "required": ["artifactLocation", "region"],
                                                "properties": {
                                                    "artifactLocation": {
                                                        "type": "object",
                                                        "required": ["uri", "uriBaseId"],
                                                        "properties": {
                                                            "uri": {
                                                                "type": "string",
                                                                # relative, never absolute
                                                                "pattern": r"^[^/\\:]",
                                                            },
                                                            "uriBaseId": {"type": "string"},
                                                        },
                                                    },
                                                    "region": {
                                                        "type": "object",
                                                        "required": ["startLine"],
                                                        "properties": {
                                                            "startLine": {
                                                                "type": "integer",
                                                                "minimum": 1,
                                                            }
                                                        },
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                                "partialFingerprints": {
                                    "type": "object",
                                    "minProperties": 1,
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def validate(log: dict[str, Any]) -> None:
    """``log`` has every field code scanning requires, and each result names a rule of the
    driver by id and index."""
    jsonschema.validate(log, CODE_SCANNING)
    [run] = log["runs"]
    ids = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    for result in run["results"]:
        assert ids[result["ruleIndex"]] == result["ruleId"]


def results_at(log: dict[str, Any], file: str, line: int) -> list[dict[str, Any]]:
    return [
        r
        for r in log["runs"][0]["results"]
        if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == file
        and r["locations"][0]["physicalLocation"]["region"]["startLine"] == line
    ]


def fingerprints(log: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted(
        (r["ruleId"], r["message"]["text"], r["partialFingerprints"][FINGERPRINT])
        for r in log["runs"][0]["results"]
    )


def pallas_line() -> int:
    """The line of the demo's Pallas kernel call, read from its source (not remembered)."""
    source = (DEMO / "src" / "demo_models" / "pallas_kernel.py").read_text().splitlines()
    [line] = [i for i, text in enumerate(source, 1) if text.strip().startswith("return kernel(")]
    return line


def show_sarif(report: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``jaxport show --format sarif REPORT``, as a user runs it."""
    capsys.readouterr()  # what came before (an in-process pytest run's output)
    assert cli.main(["show", "--format", "sarif", str(report)]) == 0
    return json.loads(capsys.readouterr().out)


# -- the demo ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demos_sarif_validates_with_the_cudnn_site_and_the_pallas_kernel(
    demo: DemoRun, capsys: pytest.CaptureFixture[str]
) -> None:
    log = show_sarif(demo.folder / "out.json", capsys)
    validate(log)
    [run] = log["runs"]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == list(RULE_IDS)
    at_conv = [(r["ruleId"], r["level"], r["message"]["text"])
               for r in results_at(log, "src/demo_models/convnet.py", 24)]  # fmt: skip
    cudnn = [m for rule, level, m in at_conv if (rule, level) == ("vendor-library", "note")]
    [site] = [h for h in demo.report["summary"]["hotspots"]
              if (h["platform"], h["library"], h["location"])
              == ("cuda", "cudnn", "src/demo_models/convnet.py:24")]  # fmt: skip
    calls = site["dispatches"]
    assert f"cuda: cudnn stablehlo.convolution, {calls} dispatches" in [
        m.split(" in ")[0] for m in cudnn
    ]
    [violation] = [
        m for rule, level, m in at_conv if (rule, level) == ("budget-violation", "error")
    ]
    assert violation.startswith("cuda: 2 cudnn calls > 1 (max_library_calls.cudnn")
    at_kernel = results_at(log, "src/demo_models/pallas_kernel.py", pallas_line())
    kernels = {
        r["message"]["text"].split(":")[0] for r in at_kernel if r["ruleId"] == "custom-kernel"
    }
    assert kernels == {"cuda", "tpu"}
    assert {r["level"] for r in at_kernel if r["ruleId"] == "custom-kernel"} == {"warning"}
    for result in run["results"]:  # every location a repository path, none a library's
        uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert (demo.folder / uri).is_file(), uri


def _demo_under_xdist(base: Path) -> tuple[Path, str]:
    """A second run of the demo, with ``-n 2`` and ``GITHUB_ACTIONS=true``, writing the
    SARIF and Code Quality reports (once per session, shared by xdist workers)."""
    with exclusive(base / "jaxport-demo-sarif.lock"):
        folder = base / "jaxport-demo-sarif"
        said = folder / "output.txt"
        if said.is_file():
            return folder, said.read_text()
        if folder.exists():
            shutil.rmtree(folder)
        _copy_demo(folder)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
             "--jaxport-report=r.sarif", "--jaxport-report=r.codequality.json"],
            cwd=folder, env=_environment() | {"GITHUB_ACTIONS": "true"},
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stdout + proc.stderr  # the demo's designed failure
        said.write_text(proc.stdout)
        return folder, proc.stdout


@pytest.fixture(scope="module")
def demo_xdist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.getbasetemp()
    return _demo_under_xdist(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.mark.slow
def test_the_demos_budget_violation_is_an_error_annotation_at_the_cudnn_line(
    demo_xdist: tuple[Path, str],
) -> None:
    _, output = demo_xdist
    errors = [line for line in output.splitlines() if line.startswith("::error ")]
    assert len(errors) == 1, output  # once, though two workers ran the tests
    assert errors[0].startswith("::error file=src/demo_models/convnet.py,line=24,title=")
    assert "::cuda: 2 cudnn calls > 1 (max_library_calls.cudnn" in errors[0]
    warnings = [line for line in output.splitlines() if line.startswith("::warning ")]
    assert f"::warning file=src/demo_models/pallas_kernel.py,line={pallas_line()}," in "\n".join(
        warnings
    )


@pytest.mark.slow
def test_fingerprints_are_the_same_across_runs_serial_and_under_xdist(
    demo: DemoRun, demo_xdist: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = demo_xdist
    written = json.loads((folder / "r.sarif").read_text())
    validate(written)
    serial = show_sarif(demo.folder / "out.json", capsys)
    assert fingerprints(written) == fingerprints(serial)
    prints = [f for _, _, f in fingerprints(written)]
    assert len(prints) == len(set(prints))  # each alert its own


@pytest.mark.slow
def test_the_demos_code_quality_report_has_the_same_findings(
    demo_xdist: tuple[Path, str],
) -> None:
    folder, _ = demo_xdist
    issues = json.loads((folder / "r.codequality.json").read_text())
    log = json.loads((folder / "r.sarif").read_text())
    assert len(issues) == len(log["runs"][0]["results"])
    [violation] = [i for i in issues if i["check_name"] == "jaxport/budget-violation"]
    assert violation["severity"] == "major"
    assert violation["location"] == {"path": "src/demo_models/convnet.py", "lines": {"begin": 24}}
    assert {i["fingerprint"] for i in issues} == {
        r["partialFingerprints"][FINGERPRINT] for r in log["runs"][0]["results"]
    }


# -- the rules --------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_each_rule_says_what_it_is_and_what_to_do_and_links_its_docs(rule: Any) -> None:
    assert rule.short
    assert rule.full
    assert rule.help
    assert rule.help_uri.startswith(f"{DOCS_URL}/")
    page, _, anchor = rule.docs.partition("#")
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    if anchor:
        headings = {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.M)}
        assert anchor in headings, f"docs/{page} has no section #{anchor}"


def test_the_rules_are_one_per_kind_of_finding() -> None:
    assert set(RULE_IDS) == {
        "vendor-library", "custom-kernel", "numeric-format", "memory-layout",
        "does-not-lower", "does-not-fit", "does-not-compile", "budget-violation",
        "numerics-difference", "numerics-may-differ", "tooling-assumption",
    }  # fmt: skip


# -- locations and fingerprints, on plain data ------------------------------------------------


def _report(*sites: Hotspot) -> Report:
    return Report(
        tool_version="9.9",
        environment=Environment(),
        config=Config(platforms=("cpu", "cuda"), reference="cpu"),
        summary=Summary(
            tests=1,
            checks=1,
            failed_tests=0,
            violations=0,
            outcomes={},
            platforms={},
            hotspots=sites,
        ),
        tests=(),
    )


def _site(location: str, name: str = "stablehlo.dot_general", library: str = "cublas") -> Hotspot:
    return Hotspot(platform="cuda", location=location, layer="vendor", name=name, kind="gemm",
                   library=library, checks=1, tests=1, dispatches=3)  # fmt: skip


def test_a_site_outside_the_repository_is_left_out_and_counted() -> None:
    report = _report(
        _site("src/m.py:3"), _site("/opt/lib/x.py:9"), _site("../up.py:2"),
        _site("flax/linear.py:5"),
    )  # fmt: skip
    outside = {"flax/linear.py"}.__contains__
    found = alerts_of(report).in_repository(outside=outside)
    assert [(a.file, a.line) for a in found] == [("src/m.py", 3)]
    assert alerts_of(report).left_out(outside=outside) == 3
    log = sarif_log(report, outside=outside)
    validate(log)
    assert log["runs"][0]["properties"]["leftOut"] == 3
    assert log["runs"][0]["tool"]["driver"]["version"] == "9.9"


def test_a_fingerprint_stays_when_lines_move_and_tells_two_sites_apart() -> None:
    before = alerts_of(_report(_site("src/m.py:3"), _site("src/m.py:9"))).in_repository()
    after = alerts_of(_report(_site("src/m.py:13"), _site("src/m.py:19"))).in_repository()
    assert [a.fingerprint for a in before] == [a.fingerprint for a in after]
    assert len({a.fingerprint for a in before}) == 2
    cudnn = _site("src/m.py:3", library="cudnn", name="stablehlo.convolution")
    other = alerts_of(_report(cudnn)).in_repository()
    assert other[0].fingerprint not in {a.fingerprint for a in before}


def test_a_sites_alert_has_its_rules_level() -> None:
    """The view model levels a site's alert by its layer; the SARIF rule of that kind says
    the same level as its default (``defaultConfiguration``)."""
    sites = [
        Hotspot(platform="tpu", location=f"src/m.py:{i + 1}", layer=layer, name="x", kind="k",
                library="cublas" if layer == "vendor" else None, checks=1, tests=1, dispatches=1)
        for i, layer in enumerate(("vendor", "custom", "format", "layout"))
    ]  # fmt: skip
    found = alerts_of(_report(*sites)).in_repository()
    assert len(found) == 4
    default = {rule.id: rule.level for rule in RULES}
    assert [(a.rule, a.level) for a in found] == [(a.rule, default[a.rule]) for a in found]


# -- the plugin, jaxport show and merge -------------------------------------------------------

SUITE = """
import jax.numpy as jnp
import pytest

def _solve(a, b):
    return jnp.linalg.solve(a, b)

@pytest.mark.portable(max_vendor_calls=0)
def test_solve(jaxport):
    jaxport.check(_solve, jnp.eye(4), jnp.ones(4))

@pytest.mark.portable
def test_double(jaxport):
    jaxport.check(lambda x: x * 2.0, jnp.ones(3))
"""
PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda"]
reference = "cpu"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject=PROJECT)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_the_plugin_writes_sarif_and_code_quality_by_suffix(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    result = project.runpytest(
        "--jaxport-report=out/r.sarif", "--jaxport-report=out/r.codequality.json",
        "--jaxport-report=out/r.json",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    log = json.loads((project.path / "out" / "r.sarif").read_text())
    validate(log)
    line = SUITE.strip().splitlines().index("    return jnp.linalg.solve(a, b)") + 1
    at = {(r["ruleId"], r["level"]) for r in results_at(log, "test_suite.py", line)}
    assert {("budget-violation", "error"), ("vendor-library", "note")} <= at
    issues = json.loads((project.path / "out" / "r.codequality.json").read_text())
    assert {"path": "test_suite.py", "lines": {"begin": line}} in [i["location"] for i in issues]
    # the same log from the saved JSON report, through jaxport show
    assert fingerprints(show_sarif(project.path / "out" / "r.json", capsys)) == fingerprints(log)


@pytest.mark.slow
def test_jaxport_merge_writes_the_legs_findings_as_sarif(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    project.runpytest("--jaxport-report=leg-cpu.json").assert_outcomes(passed=1, failed=1)
    code = cli.main([
        "merge", str(project.path / "leg-cpu.json"), "-o", str(project.path / "merged.json"),
        "--sarif", str(project.path / "merged.sarif"),
    ])  # fmt: skip
    assert code == 1, capsys.readouterr()  # the leg's failed test
    log = json.loads((project.path / "merged.sarif").read_text())
    validate(log)
    errors = [r for r in log["runs"][0]["results"] if r["level"] == "error"]
    assert {e["ruleId"] for e in errors} == {"budget-violation"}
    assert {e["message"]["text"].split(":")[0] for e in errors} == {"cpu", "cuda"}
    assert all(e["message"]["text"].endswith("[leg leg-cpu.json]") for e in errors)
    assert log["runs"][0]["properties"]["legs"]


def test_a_report_file_suffix_picks_the_longest_match() -> None:
    assert reporter_for(Path("gl.codequality.json")) is REPORTERS[".codequality.json"]
    assert reporter_for(Path("r.json")) is REPORTERS[".json"]
    assert reporter_for(Path("r.sarif")) is REPORTERS[".sarif"]
