"""Tests of pytest_jaxport.report.ci, report.merge, report.baseline and cli.

One CI leg in pytest, the `jaxport merge/diff/baseline` commands, and the example workflow.

The workflow test reads ``examples/ci/github-actions.yml``, runs the CPU-side legs' commands
from it in a temporary project with ``sys.executable -m pytest`` (as a CI runner does), then
the merge job's commands with the installed ``jaxport`` script.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_jaxport.cli import main
from pytest_jaxport.model.compare import Leaf, Outputs
from pytest_jaxport.report.baseline import baseline_json, baseline_of
from pytest_jaxport.report.files import load
from pytest_jaxport.report.outputs import load_outputs, save_outputs

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
JAXPORT = Path(sys.executable).parent / "jaxport"
TIMEOUT_S = 300

PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"

[tool.jaxport.budget]
max_custom_calls = 0

[tool.jaxport.tolerance.float32]
rtol = 1e-5
"""

SUITE = """
import jax.numpy as jnp
import pytest


def mlp(x):
    return {"y": x @ x, "z": jnp.tanh(x)}


@pytest.mark.portable
def test_mlp(jaxport):
    jaxport.check(mlp, jnp.ones((4, 4)))


@pytest.mark.portable(rtol=1e-3)
def test_solve(jaxport):
    jaxport.check(jnp.linalg.inv, jnp.eye(3) * 2.0)
    jaxport.check(jnp.cos, jnp.arange(3.0), name="cos")
"""


def _environment() -> dict[str, str]:
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("PYTEST_") and name != "GITHUB_STEP_SUMMARY"
    }


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        args,
        cwd=cwd,
        env={**_environment(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _jaxport(args: list[str], cwd: Path) -> tuple[int, str, str]:
    command = [str(JAXPORT)] if JAXPORT.exists() else [sys.executable, "-m", "pytest_jaxport.cli"]
    return _run([*command, *args], cwd)


def _refused(code: int, err: str, name: str) -> None:
    """Exit 2, one line naming the file, no traceback."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert name in lines[0], err


@pytest.fixture
def leg_project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject=PROJECT)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


# -- the workflow file --------------------------------------------------------------------


def _workflow() -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_workflow_parses_and_has_the_legs_and_the_merge() -> None:
    data = _workflow()
    # YAML 1.1 reads the bare key `on` as the boolean True.
    triggers = data["on"] if "on" in data else data[True]
    assert set(triggers) == {"pull_request", "push"}
    legs = data["jobs"]["leg"]
    names = [entry["leg"] for entry in legs["strategy"]["matrix"]["include"]]
    assert names == ["cpu", "cuda-compile", "gpu"]
    assert legs["strategy"]["fail-fast"] is False
    run = next(step["run"] for step in legs["steps"] if step.get("name") == "run the suite")
    assert "--jaxport-report=leg-${{ matrix.leg }}.json" in run
    assert "--jaxport-save-outputs=outputs-${{ matrix.leg }}" in run
    merge = data["jobs"]["merge"]
    assert merge["needs"] == "leg"
    commands = "\n".join(step.get("run", "") for step in merge["steps"])
    assert "jaxport merge leg-*.json -o merged.json --md merged.md" in commands
    assert "jaxport diff .jaxport/baseline.json merged.json --md diff.md" in commands
    assert 'cat merged.md >> "$GITHUB_STEP_SUMMARY"' in commands


def _leg_command(data: dict[Any, Any], leg: dict[str, str]) -> list[str]:
    """The `run the suite` step of the workflow, with the matrix values filled in."""
    step = next(s for s in data["jobs"]["leg"]["steps"] if s.get("name") == "run the suite")
    text = re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m: str(leg[m.group(1)]), step["run"])
    words = shlex.split(text)
    assert words[0] == "pytest"
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *words[1:]]


def _merge_commands(data: dict[Any, Any]) -> list[str]:
    steps = data["jobs"]["merge"]["steps"]
    merge = next(s["run"] for s in steps if s.get("name") == "merge the legs")
    return [line for line in merge.splitlines() if line.startswith("jaxport merge")]


@pytest.mark.slow
def test_cpu_side_legs_and_merge_run_as_the_workflow_says(tmp_path: Path) -> None:
    data = _workflow()
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    (tmp_path / "test_suite.py").write_text(SUITE)
    from pytest_jaxport._jax import deviceless

    cpu_side = [
        leg for leg in data["jobs"]["leg"]["strategy"]["matrix"]["include"]
        if leg["runner"] == "ubuntu-latest"
    ]  # fmt: skip
    assert [leg["leg"] for leg in cpu_side] == ["cpu", "cuda-compile"]
    for leg in cpu_side:
        leg = dict(leg)
        if leg["jaxport_args"] and deviceless.cuda_plugin_problem() is not None:
            # Without the CUDA plugin the compile-only leg still differs from the cpu leg in
            # what it lowers for; the merge rules are the same.
            leg["jaxport_args"] = "--jaxport-platforms=cpu,cuda"
        env = {"JAX_PLATFORMS": leg["jax_platforms"]} if leg["jax_platforms"] else {}
        code, out, err = _run(_leg_command(data, leg), tmp_path, env)
        assert code == 0, out + err
        assert (tmp_path / f"leg-{leg['leg']}.json").is_file()
        assert list((tmp_path / f"outputs-{leg['leg']}").glob("*.npz"))

    [merge_line] = _merge_commands(data)
    words = shlex.split(merge_line)
    legs = sorted(p.name for p in tmp_path.glob("leg-*.json"))  # the shell's glob
    expanded = [w for word in words[1:] for w in (legs if word == "leg-*.json" else [word])]
    code, out, err = _jaxport(expanded, tmp_path)
    assert code == 0, out + err
    assert "consistent" in out
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert [leg["leg"] for leg in merged["legs"]] == ["leg-cpu.json", "leg-cuda-compile.json"]
    assert merged["comparisons"] == 3  # each check's cpu outputs, second leg vs first
    assert merged["drifts"] == []
    assert "### Numerics across legs" in (tmp_path / "merged.md").read_text()

    # One leg's saved outputs perturbed: the merge fails naming the test, check and leaf.
    saved = next((tmp_path / "outputs-cuda-compile").glob("*test_mlp*"))
    outputs = load_outputs(saved)
    bumped = tuple(
        Leaf(path=leaf.path, array=leaf.array + (0.5 if leaf.path == "['y']" else 0.0))
        for leaf in outputs.leaves
    )
    save_outputs(saved.parent, "test_suite.py::test_mlp", "mlp", "cpu",
                 Outputs(structure=outputs.structure, leaves=bumped))  # fmt: skip
    code, out, err = _jaxport(expanded, tmp_path)
    assert code == 1, out + err
    assert "test_suite.py::test_mlp check 'mlp': cpu (leg-cuda-compile.json) differs" in out
    assert "['y']" in out
    assert "['z']" not in out
    assert "1 output drift(s)" in out

    # A truncated leg and a foreign JSON file: refused naming the file, no traceback.
    text = (tmp_path / "leg-cpu.json").read_text()
    (tmp_path / "leg-cpu.json").write_text(text[: len(text) // 2])
    _refused(*_jaxport(["merge", "leg-cpu.json", "leg-cuda-compile.json", "-o", "m.json"],
                       tmp_path)[::2], "leg-cpu.json")  # fmt: skip
    (tmp_path / "other.json").write_text('{"name": "something else", "tests": []}')
    _refused(*_jaxport(["merge", "leg-cuda-compile.json", "other.json", "-o", "m.json"],
                       tmp_path)[::2], "other.json")  # fmt: skip


# -- one leg in pytest --------------------------------------------------------------------


@pytest.mark.slow
def test_saved_outputs_are_recorded_relative_to_the_report(leg_project: pytest.Pytester) -> None:
    leg_project.mkdir("reports")
    result = leg_project.runpytest(
        "--jaxport-report=reports/leg.json", "--jaxport-save-outputs=outputs"
    )
    result.assert_outcomes(passed=2)
    report = json.loads((leg_project.path / "reports" / "leg.json").read_text())
    paths = {
        (test["nodeid"], check["name"], platform): entry.get("outputs")
        for test in report["tests"]
        for check in test["checks"]
        for platform, entry in check["platforms"].items()
    }
    executed = {k: v for k, v in paths.items() if k[2] == "cpu"}
    assert len(executed) == 3
    assert all(v is None for k, v in paths.items() if k[2] != "cpu")  # nothing ran there
    for relative in executed.values():
        assert relative.startswith("../outputs/")
        loaded = load_outputs(leg_project.path / "reports" / relative)
        assert loaded.leaves
    mlp = load_outputs(leg_project.path / "reports" / executed[("test_suite.py::test_mlp",
                                                                 "mlp", "cpu")])  # fmt: skip
    assert [leaf.path for leaf in mlp.leaves] == ["['y']", "['z']"]
    np.testing.assert_allclose(mlp.leaves[0].array, np.full((4, 4), 4.0))

    # The leg describes itself: machine, versions, device kinds, what ran, and the config
    # merge checks (budgets and tolerances).
    env = report["environment"]
    assert {"jax", "jaxlib", "python", "machine"} <= env.keys()
    assert env["device_kinds"] == {"cpu": "cpu"}
    assert env["executed_platforms"] == ["cpu"]
    assert report["config"]["budget"] == {"max_custom_calls": 0}
    assert report["config"]["tolerance"] == {"float32": {"rtol": 1e-5}}
    [solve] = [t for t in report["tests"] if t["nodeid"].endswith("test_solve")]
    assert all(check["tolerance"] == {"rtol": 1e-3} for check in solve["checks"])


@pytest.mark.slow
def test_without_a_json_report_paths_are_relative_to_the_folder(
    leg_project: pytest.Pytester,
) -> None:
    result = leg_project.runpytest("--jaxport-save-outputs=out", "--jaxport-report=r.md")
    result.assert_outcomes(passed=2)
    assert len(list((leg_project.path / "out").glob("*.npz"))) == 3


@pytest.mark.slow
def test_saved_outputs_are_the_same_with_and_without_xdist(leg_project: pytest.Pytester) -> None:
    reports = []
    for args in (["-n", "0"], ["-n", "2"]):
        result = leg_project.runpytest_subprocess(
            "--jaxport-report=r.json", "--jaxport-save-outputs=o", *args
        )
        result.assert_outcomes(passed=2)
        reports.append(json.loads((leg_project.path / "r.json").read_text()))
    # Runtime shares are measured per run; where each check's outputs are is not.
    assert [_outputs_paths(r) for r in reports[1:]] == [_outputs_paths(reports[0])]
    assert len(_outputs_paths(reports[0])) == 3
    assert len(list((leg_project.path / "o").glob("*.npz"))) == 3


def _outputs_paths(report: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    return {
        (test["nodeid"], check["name"], platform): entry["outputs"]
        for test in report["tests"]
        for check in test["checks"]
        for platform, entry in check["platforms"].items()
        if entry.get("outputs")
    }


def test_save_outputs_into_a_file_is_a_usage_error(leg_project: pytest.Pytester) -> None:
    (leg_project.path / "taken").write_text("")
    result = leg_project.runpytest("--jaxport-save-outputs=taken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jaxport-save-outputs taken*is not a folder*"])


@pytest.mark.slow
def test_a_crashed_worker_test_is_in_the_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_crash="""
        import os
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable
        def test_crashes(jaxport):
            jaxport.check(jnp.sin, jnp.ones(3))
            os._exit(1)

        @pytest.mark.portable
        def test_fine(jaxport):
            jaxport.check(jnp.cos, jnp.ones(3))
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "--jaxport-report=r.json")
    result.stdout.fnmatch_lines(["*crashed while running*test_crashes*"])
    report = json.loads((pytester.path / "r.json").read_text())
    tests = {t["nodeid"]: t for t in report["tests"]}
    crashed = tests["test_crash.py::test_crashes"]
    assert crashed["outcome"] == "error"
    assert crashed["crashed"] is True
    assert "crashed" in crashed["error"]["message"]
    assert tests["test_crash.py::test_fine"]["outcome"] == "passed"
    assert report["summary"]["failed_tests"] == 1


# -- baselines ------------------------------------------------------------------------------

GROWN = """
import jax.numpy as jnp
import pytest


def mlp(x):
    return {"y": x @ x @ x, "z": jnp.tanh(x)}


@pytest.mark.portable
def test_mlp(jaxport):
    jaxport.check(mlp, jnp.ones((4, 4)))


@pytest.mark.portable(rtol=1e-3)
def test_solve(jaxport):
    jaxport.check(jnp.linalg.inv, jnp.eye(3) * 2.0)
    jaxport.check(jnp.cos, jnp.arange(3.0), name="cos")


@pytest.mark.portable
def test_new(jaxport):
    jaxport.check(jnp.sin, jnp.ones(3))
"""


@pytest.mark.slow
def test_baseline_round_trip(leg_project: pytest.Pytester) -> None:
    # The update creates the baseline's folder, as --jaxport-report creates its own.
    update = leg_project.runpytest(
        "--jaxport-baseline=.jaxport/baseline.json", "--jaxport-baseline-update",
        "--jaxport-report=base.json",
    )  # fmt: skip
    update.assert_outcomes(passed=2)
    update.stdout.fnmatch_lines(["jaxport: baseline written to *baseline.json"])
    written = (leg_project.path / ".jaxport" / "baseline.json").read_text()
    base = load(leg_project.path / "base.json")
    assert written == baseline_json(baseline_of(base))  # sorted, stable
    assert json.loads(written)["tests"]["test_suite.py::test_mlp"]["mlp"]["cuda"]["lowered"] == {
        "custom": 0, "library.cublas": 1, "vendor": 1,
        # the float32 dot at the default precision: TF32 on an H100
        "format_findings": 1, "layout_findings": 0, "not_compiling": 0, "padding_waste": 0.0,
    }  # fmt: skip

    same = leg_project.runpytest("--jaxport-baseline=.jaxport/baseline.json")
    same.assert_outcomes(passed=2)

    leg_project.makepyfile(test_suite=GROWN)  # one more matmul, and a new test
    grown = leg_project.runpytest(
        "--jaxport-baseline=.jaxport/baseline.json", "--jaxport-report=head.json", "-rA"
    )
    grown.assert_outcomes(passed=2, failed=1)
    # Said like a broken budget: the finding first, where it is, what to do.
    since = "(since the baseline .jaxport/baseline.json); check 'mlp', lowered"
    grown.stdout.fnmatch_lines(
        [
            f"cuda: vendor calls grew 1 -> 2 {since}",
            "    stablehlo.dot_general (cublas) x2 at test_suite.py:6",
            f"cuda: cublas calls grew 1 -> 2 {since}",
            "    stablehlo.dot_general (cublas) x2 at test_suite.py:6",
            f"cuda: format findings grew 1 -> 2 {since}",
            "    float32-default-precision (reduced-precision) x2 at test_suite.py:6: *",
            "(6 counts grown since the baseline in test_suite.py::test_mlp)",
            "to pass: take out of the code what grew (the sites above say where), or, if the "
            "growth is intended, record it: pytest --jaxport-baseline=.jaxport/baseline.json "
            "--jaxport-baseline-update (from a full run), and commit the file",
            "*- jaxport baseline -*",
            "*test_suite.py::test_new is not in the baseline (new test)*",
            "jaxport: baseline .jaxport/baseline.json: 2 tests compared, 1 test not in it (new); "
            "of its 2 tests, 2 matched",
        ]
    )
    # pytest's one-line summary shows the finding, not the test's id again.
    grown.stdout.fnmatch_lines(["FAILED test_suite.py::test_mlp - cuda: vendor calls grew 1 -> 2*"])
    head = json.loads((leg_project.path / "head.json").read_text())
    [mlp] = [t for t in head["tests"] if t["nodeid"] == "test_suite.py::test_mlp"]
    assert mlp["outcome"] == "failed"
    assert f"cuda: vendor calls grew 1 -> 2 {since}" in mlp["baseline_growth"]
    assert "error" not in mlp  # the test itself passed: the baseline failed it

    code = main(["diff", str(leg_project.path / ".jaxport" / "baseline.json"),
                 str(leg_project.path / "head.json"),
                 "--md", str(leg_project.path / "diff.md")])  # fmt: skip
    assert code == 1
    assert "cublas calls" in (leg_project.path / "diff.md").read_text()
    assert main(["diff", str(leg_project.path / "head.json"),
                 str(leg_project.path / "base.json")]) == 0  # fmt: skip

    # Ratchet: update again, and the grown numbers are the new baseline.
    leg_project.runpytest(
        "--jaxport-baseline=.jaxport/baseline.json", "--jaxport-baseline-update"
    ).assert_outcomes(passed=3)
    leg_project.runpytest("--jaxport-baseline=.jaxport/baseline.json").assert_outcomes(passed=3)


ANOTHER_PROJECT = {  # a baseline `jaxport baseline` wrote for another project
    "kind": "baseline", "schema_version": 1, "tool": {"name": "pytest-jaxport"},
    "tests": {"tests/test_model.py::test_forward": {
        "forward": {"cpu": {"lowered": {"custom": 0, "vendor": 0}}}}},
}  # fmt: skip


@pytest.mark.slow
def test_a_baseline_that_matches_no_test_is_said_and_strict_fails_the_run(
    leg_project: pytest.Pytester,
) -> None:
    (leg_project.path / "good.json").write_text(json.dumps(ANOTHER_PROJECT))
    result = leg_project.runpytest("test_suite.py", "--jaxport-baseline=good.json")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK  # a warning, not a failure
    result.stdout.fnmatch_lines(
        [
            "jaxport: baseline good.json: 0 tests compared, 2 tests not in it (new); of its 1 "
            "test, 0 matched, 1 no longer matched (stale)",
            "jaxport: baseline entries no longer matched: tests/test_model.py::test_forward "
            "(its file tests/test_model.py is gone)",
            "jaxport: warning: the baseline good.json matched none of the 2 tests that checked: "
            "nothing was compared (a baseline of another project, or tests renamed?); "
            "--jaxport-baseline-update writes this suite's",
        ]
    )

    strict = leg_project.runpytest(
        "test_suite.py", "--jaxport-baseline=good.json", "--jaxport-baseline-strict"
    )
    strict.assert_outcomes(passed=2)  # every test reported as it was; the run fails
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines(
        [
            "jaxport: FAILED: --jaxport-baseline-strict: the baseline good.json does not match "
            "this run (matched none of the 2 tests that checked; 1 entry no longer matched); no "
            "test failed for it. --jaxport-baseline-update records the suite as it is",
            "*= 2 passed in *",
        ]
    )

    usage = leg_project.runpytest("--jaxport-baseline-strict")
    assert usage.ret == pytest.ExitCode.USAGE_ERROR
    usage.stderr.fnmatch_lines(
        ["ERROR: jaxport: --jaxport-baseline-strict: say which baseline to hold the run to with "
         "--jaxport-baseline=FILE"]
    )  # fmt: skip


OTHER_FILE = """
import jax.numpy as jnp
import pytest


@pytest.mark.portable
def test_other(jaxport):
    jaxport.check(jnp.sin, jnp.ones(3))
"""

EXTRA = """

@pytest.mark.portable
def test_extra(jaxport):
    jaxport.check(jnp.sin, jnp.ones(3))
"""


def _subset_run(pytester: pytest.Pytester, *, xdist: bool = False) -> dict[str, Any]:
    """Run test_suite.py without test_extra against the whole suite's baseline; the report's
    ``baseline`` section, after checking what the terminal and every format say."""
    run = pytester.runpytest_subprocess if xdist else pytester.runpytest
    result = run("test_suite.py", "-k", "not extra", *(["-n", "2"] if xdist else []),
                 "--jaxport-baseline=.jaxport/baseline.json", "--jaxport-report=r.json",
                 "--jaxport-report=r.md", "--jaxport-report=r.html")  # fmt: skip
    result.assert_outcomes(passed=2, deselected=0 if xdist else 1)  # (-n: deselected by workers)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "jaxport: baseline .jaxport/baseline.json: 1 test compared, 1 test not in it (new); "
            "of its 4 tests, 1 matched, 1 no longer matched (stale), 2 not run this time",
            "jaxport: baseline entries no longer matched: test_suite.py::test_solve (no test of "
            "that name in test_suite.py, which ran: renamed or removed?)",
            "*= jaxport portability report =*",
            "problems: 0 failed, 0 budget violations, 2 baseline mismatches that fail nothing",
            "  baseline entries no longer matched — 1 test (a finding; --jaxport-baseline-strict "
            "fails the run on",
            "      it; --jaxport-baseline-update drops them)",
            "    test_suite.py::test_solve  no test of that name in test_suite.py, which ran: "
            "renamed or removed?",
            "  not in the baseline — 1 test (*",
            "*",
            "    test_suite.py::test_solve_renamed  new test: its counts are not compared",
        ]
    )
    markdown = (pytester.path / "r.md").read_text()
    assert (
        "| `test_suite.py::test_solve` |  |  | baseline entries no longer matched | no test of "
        "that name in test_suite.py, which ran: renamed or removed? |"
    ) in markdown
    assert "- baseline .jaxport/baseline.json: 1 test compared, 1 test not in it" in markdown
    page = (pytester.path / "r.html").read_text()
    assert "baseline entries no longer matched" in page
    assert "<code>test_suite.py::test_solve_renamed</code>" in page
    return dict(json.loads((pytester.path / "r.json").read_text())["baseline"])


@pytest.mark.slow
def test_a_subset_run_against_a_whole_suite_baseline_says_what_matched(
    leg_project: pytest.Pytester,
) -> None:
    leg_project.makepyfile(test_suite=SUITE + EXTRA, test_other=OTHER_FILE)
    leg_project.runpytest(
        "--jaxport-baseline=.jaxport/baseline.json", "--jaxport-baseline-update"
    ).assert_outcomes(passed=4)
    # test_solve renamed, test_extra deselected, test_other.py not run this time.
    renamed = SUITE.replace("def test_solve", "def test_solve_renamed") + EXTRA
    leg_project.makepyfile(test_suite=renamed)
    serial = _subset_run(leg_project)
    assert serial == {
        "file": ".jaxport/baseline.json", "entries": 4, "compared": 1,
        "new": ["test_suite.py::test_solve_renamed"], "new_checks": [],
        "stale": [{"nodeid": "test_suite.py::test_solve", "check": None, "why": "removed"}],
        "not_run": 2, "strict": False,
    }  # fmt: skip
    assert _subset_run(leg_project, xdist=True) == serial
    # Asked for one test of the file: its other entries may exist unseen, not stale.
    one = leg_project.runpytest(
        "test_suite.py::test_mlp", "--jaxport-baseline=.jaxport/baseline.json",
        "--jaxport-baseline-strict",
    )  # fmt: skip
    one.assert_outcomes(passed=1)
    assert one.ret == pytest.ExitCode.OK
    one.stdout.fnmatch_lines(
        ["jaxport: baseline .jaxport/baseline.json: 1 test compared; of its 4 tests, 1 matched, "
         "3 not run this time"]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("content", "update", "expected"),
    [
        (None, False, "*--jaxport-baseline b.json*b.json: no such file*"),
        ("{not json", False, "*--jaxport-baseline b.json*b.json: not valid JSON*"),
        ('{"tool": {"name": "other"}}', False, "*--jaxport-baseline b.json*b.json: not a*"),
        ('{"tool": {"name": "pytest-jaxport"}, "kind": "baseline", "schema_version": 9}',
         False, "*b.json: baseline schema_version 9 is not supported*"),
        ('{"tool": {"name": "pytest-jaxport"}, "schema_version": 1, "tests": []}', True,
         "*b.json exists and is not a pytest-jaxport baseline*"),
        ('{"tool": {"name": "pytest-jaxport"}, "kind": "baseline", "schema_version": 1, '
         '"tests": {"t.py::a": {"c": 1}}}', False, "ERROR: jaxport: --jaxport-baseline b.json: "
         "*b.json: malformed pytest-jaxport baseline: test t.py::a check 'c': expected a table "
         "of platforms, found int 1"),
    ],
)  # fmt: skip
def test_unusable_baseline_is_a_usage_error_naming_the_file(
    leg_project: pytest.Pytester, content: str | None, update: bool, expected: str
) -> None:
    if content is not None:
        (leg_project.path / "b.json").write_text(content)
    args = ["--jaxport-baseline=b.json"] + (["--jaxport-baseline-update"] if update else [])
    result = leg_project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert "Traceback" not in result.stderr.str()


@pytest.mark.slow
def test_baseline_update_needs_a_file_and_accepts_a_missing_one(
    leg_project: pytest.Pytester,
) -> None:
    result = leg_project.runpytest("--jaxport-baseline-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jaxport-baseline-update: say which file*"])
    result = leg_project.runpytest_subprocess(
        "-n", "2", "--jaxport-baseline=new.json", "--jaxport-baseline-update"
    )
    result.assert_outcomes(passed=2)
    assert json.loads((leg_project.path / "new.json").read_text())["kind"] == "baseline"


# -- the merged report: as complete as a leg's, never green over a drift ---------------------

MATRIX_PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"
"""

MATRIX_SUITE = """
import os

import jax
import jax.numpy as jnp
import pytest

SCALE = float(os.environ.get("JAXPORT_TEST_SCALE", "1"))


def _fused(x):
    return jax.ffi.ffi_call("my_fused_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def fused(x):                  # a hand-written kernel on cuda, jnp elsewhere
    return jax.lax.platform_dependent(x, cuda=_fused, default=jnp.tanh) * SCALE


@pytest.mark.portable
def test_fused(jaxport):
    jaxport.check(fused, jnp.linspace(-1.0, 1.0, 8))
"""


@pytest.fixture
def matrix_legs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """Two legs as a CI matrix runs them: one lowers for cpu and cuda, the other for cpu, rocm
    and tpu (neither alone sees both sides of a move off cuda); the second leg's outputs are
    scaled by 1.01, beyond float32's tolerance. Each saves its outputs."""
    pytester.makefile(".toml", pyproject=MATRIX_PROJECT)
    pytester.makepyfile(test_suite=MATRIX_SUITE)
    (pytester.path / "run.sh").write_text("export CUDA_VISIBLE_DEVICES=0\n")  # tooling
    for leg, platforms, scale in (("1", "cpu,cuda", "1"), ("2", "cpu,rocm,tpu", "1.01")):
        monkeypatch.setenv("JAXPORT_TEST_SCALE", scale)
        result = pytester.runpytest(
            f"--jaxport-report=leg-{leg}.json", f"--jaxport-save-outputs=outputs-{leg}",
            f"--jaxport-platforms={platforms}", "-p", "no:cacheprovider",
        )  # fmt: skip
        result.assert_outcomes(passed=1)
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()  # the legs' own output
    return pytester.path


def test_a_drifting_merge_fails_the_test_in_every_rendering(
    matrix_legs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["merge", "leg-1.json", "leg-2.json", "-o", "merged.json", "--md", "merged.md",
                 "--html", "merged.html"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1, out
    assert "1 output drift(s)" in out
    merged = json.loads((matrix_legs / "merged.json").read_text())
    [test] = merged["tests"]
    assert test["legs"] == {"leg-1.json": "passed", "leg-2.json": "passed"}
    assert test["outcome"] == "failed"  # each leg passed; together their outputs disagree
    [drift] = test["drifts"]
    assert (drift["platform"], drift["leg"], drift["reference_leg"]) == (
        "cpu",
        "leg-2.json",
        "leg-1.json",
    )
    assert merged["summary"]["failed_tests"] == 1

    markdown = (matrix_legs / "merged.md").read_text()
    assert "None: every portable test" not in markdown
    assert "**1 of 1 portable test failed**" in markdown
    assert "| cpu: outputs differ across legs | 1 drift in 1 test" in markdown
    assert main(["show", "merged.json"]) == 0
    shown = capsys.readouterr().out
    assert "problems: none" not in shown
    assert "problems: 1 failed, 0 budget violations, 1 output drift across legs" in shown
    assert "test_suite.py::test_fused  'fused': cpu (leg-2.json) differs from cpu (leg-1" in shown
    page = (matrix_legs / "merged.html").read_text()
    assert '<span class="verdict bad">1 of 1 portable test failed' in page
    assert "cpu: outputs differ across legs" in page


def test_a_merged_report_has_the_three_numbers_of_the_union_of_legs(
    matrix_legs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["merge", "leg-1.json", "leg-2.json", "-o", "merged.json"])
    capsys.readouterr()
    legs = [json.loads((matrix_legs / f"leg-{n}.json").read_text()) for n in (1, 2)]
    merged = json.loads((matrix_legs / "merged.json").read_text())
    summary = merged["summary"]
    # Neither leg sees both cuda's kernel and what rocm and tpu run instead: neither counts a
    # move off cuda (issue 50: never "rocm 0, tpu 0"), and only the union prices it.
    first, second = (leg["summary"] for leg in legs)
    # cpu and cuda: no target lowered, so none priced (migrate_to follows the leg's platforms)
    assert (first["kernels_to_rewrite"], first.get("not_lowered")) == ({}, None)
    assert (second["kernels_to_rewrite"], second["not_lowered"]) == (
        {}, {"rocm": ["cuda"], "tpu": ["cuda"]}  # the home was not lowered there
    )  # fmt: skip
    assert merged["config"]["migrate_to"] == ["rocm", "tpu"]  # the legs' together
    assert summary["kernels_to_rewrite"] == {"rocm": 1, "tpu": 1}
    assert "not_lowered" not in summary
    [item] = summary["rewrite"]["rocm"]["items"]
    assert (item["name"], item["status"]) == ("my_fused_kernel", "fallback")
    assert summary["rewrite_days"] == {"rocm": 3 + 0.5 + 5, "tpu": 3 + 0.5 + 5}
    assert summary["cost_model"] == legs[0]["summary"]["cost_model"]
    assert set(summary["runtime_share"]) == {"cpu", "cuda", "rocm", "tpu"}
    assert [a["rule"] for a in summary["tooling"]["assumptions"]] == ["cuda-visible-devices"]

    assert main(["show", "merged.json"]) == 0
    shown = capsys.readouterr().out
    assert "2. kernels to rewrite moving off cuda (distinct sites): rocm 1, tpu 1" in shown
    # the days line wraps at 100 columns: compare its words
    assert (
        "rocm: 8.5 days = 3.5 from the project (fallback validation 3, tooling assumptions 0.5)"
        " + 5 fixed per target"
    ) in " ".join(shown.split())
    for platform in ("cpu", "cuda", "rocm", "tpu"):
        assert re.search(rf"^   {platform} +xla ", shown, re.M), shown
    assert "no cuda census" not in shown
    assert "not scanned" not in shown
    assert "profiling, tooling and CI assumptions: 1 found in" in shown
    assert "merged from 2 legs (leg-1.json, leg-2.json) by jaxport merge" in shown


@pytest.mark.slow
def test_a_merge_without_saved_outputs_does_not_say_consistent(
    leg_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    for leg in ("a", "b"):
        leg_project.runpytest(f"--jaxport-report=leg-{leg}.json").assert_outcomes(passed=2)
    monkeypatch.chdir(leg_project.path)
    capsys.readouterr()
    assert main(["merge", "leg-a.json", "leg-b.json", "-o", "m.json"]) == 0
    out = capsys.readouterr().out
    assert "consistent" not in out
    assert "2 legs, 2 tests, 0 output comparisons: nothing compared (no leg saved outputs" in out
    assert main(["show", "m.json"]) == 0
    assert "numerics across legs: nothing compared" in capsys.readouterr().out


OVER_BUDGET = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"

[tool.jaxport.budget.cuda]
max_vendor_calls = 0
"""


@pytest.mark.slow
def test_a_merge_of_legs_whose_tests_failed_is_not_green(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    pytester.makefile(".toml", pyproject=OVER_BUDGET)
    pytester.makepyfile(test_suite=SUITE)  # a matmul and an inverse: cuBLAS, cuSOLVER on cuda
    for leg, platforms in (("a", "cpu,cuda"), ("b", "cpu,cuda,tpu")):
        pytester.runpytest(
            f"--jaxport-report=leg-{leg}.json", f"--jaxport-save-outputs=outputs-{leg}",
            f"--jaxport-platforms={platforms}",
        ).assert_outcomes(failed=2)  # fmt: skip
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    code = main(["merge", "leg-a.json", "leg-b.json", "-o", "merged.json"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.splitlines()[-1] == (
        "jaxport merge: 2 legs, 2 tests, 3 output comparisons: FAILED: 2 failed tests (failed "
        "on leg-a.json: 2, leg-b.json: 2), 2 budget violations; outputs consistent; wrote "
        "merged.json"
    )
    assert main(["show", "merged.json", "-q"]) == 0
    assert "problems: 2 failed, 2 budget violations" in capsys.readouterr().out


@pytest.mark.slow
def test_merge_refuses_a_leg_twice_and_says_legs_of_mixed_versions(
    leg_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from pytest_jaxport.version import __version__

    for leg, platforms in (("a", "cpu,cuda"), ("b", "cpu,tpu")):
        leg_project.runpytest(
            f"--jaxport-report=leg-{leg}.json", f"--jaxport-platforms={platforms}"
        ).assert_outcomes(passed=2)
    monkeypatch.chdir(leg_project.path)
    capsys.readouterr()
    code = main(["merge", "leg-a.json", "leg-b.json", "leg-a.json", "-o", "m.json"])
    _refused(code, err := capsys.readouterr().err, "leg-a.json")
    assert err == "jaxport merge: leg-a.json: given twice; give each leg once\n"
    (leg_project.path / "copy").mkdir()
    (leg_project.path / "copy" / "leg-a.json").write_text(
        (leg_project.path / "leg-a.json").read_text()
    )
    code = main(["merge", "leg-a.json", "copy/leg-a.json", "-o", "m.json"])
    _refused(code, err := capsys.readouterr().err, "copy/leg-a.json")
    assert "copy/leg-a.json: the same leg as leg-a.json (an identical report); give each " in err

    # Leg b from another release of jax and of pytest-jaxport: merged, and said everywhere.
    leg_b = json.loads((leg_project.path / "leg-b.json").read_text())
    leg_b["environment"].update(jax="0.12.0", jaxlib="0.12.0")
    leg_b["tool"]["version"] = "9.9.9"
    (leg_project.path / "leg-b.json").write_text(json.dumps(leg_b))
    ours = json.loads((leg_project.path / "leg-a.json").read_text())["environment"]
    jax, python = ours["jax"], ours["python"]
    code = main(["merge", "leg-a.json", "leg-b.json", "-o", "m.json", "--md", "m.md",
                 "--html", "m.html"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    said = (
        f"legs differ in versions: pytest-jaxport {__version__} (leg-a.json), 9.9.9 (leg-b.json); "
        f"jax {jax} (leg-a.json), 0.12.0 (leg-b.json); jaxlib {ours['jaxlib']} (leg-a.json), "
        "0.12.0 (leg-b.json); counts and numerics can differ between releases for reasons "
        "other than the code: merge legs of one release"
    )
    assert f"note: {said}" in out.splitlines()
    merged = json.loads((leg_project.path / "m.json").read_text())
    assert merged["mixed_versions"]["jax"] == {"leg-a.json": jax, "leg-b.json": "0.12.0"}
    assert [leg["tool_version"] for leg in merged["legs"]] == [__version__, "9.9.9"]
    assert f"- {said}" in (leg_project.path / "m.md").read_text()
    page = (leg_project.path / "m.html").read_text()
    assert (
        f"<dt>legs</dt><dd>leg-a.json: jax {jax} · jaxlib {ours['jaxlib']} · python {python} · "
        f"pytest-jaxport {__version__}; leg-b.json: jax 0.12.0 · jaxlib 0.12.0 · python "
        f"{python} · pytest-jaxport 9.9.9</dd>"
    ) in page
    assert "<dt>versions differ</dt><dd>pytest-jaxport, jax, jaxlib</dd>" in page
    assert main(["show", "m.json"]) == 0
    assert "note: legs differ in versions: pytest-jaxport" in capsys.readouterr().out


# -- the commands on bad input ----------------------------------------------------------------


def _leg(tmp_path: Path, name: str = "leg.json") -> Path:
    from helpers import built_report

    from pytest_jaxport.report.files import write_json

    path = tmp_path / name
    write_json(path, built_report([], config={"source": "pyproject.toml", "platforms": ["cpu"],
                                              "reference": "cpu"},
                                  environment={"present_platforms": ["cpu"],
                                               "machine": f"runner of {name}"}))  # fmt: skip
    return path


@pytest.mark.parametrize(
    "content",
    ["", "{", "[]", '{"tool": "x"}', '{"tool": {"name": "pytest-jaxport"}, "schema_version": 1}',
     '{"tool": {"name": "pytest-jaxport"}, "schema_version": 1, "config": {}, '
     '"environment": {}, "tests": [{"nodeid": 3}]}', "\udcff",
     '{"tool": {"name": "pytest-jaxport"}, "schema_version": 2, "config": {}, "environment": '
     '{}, "tests": [{"nodeid": "t.py::a", "checks": [{"name": "c", "platforms": {"cpu": '
     '{"lowered": 3}}}]}]}'],
)  # fmt: skip
def test_commands_refuse_bad_input_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content.encode("utf-8", "surrogateescape"))
    good = _leg(tmp_path)
    out = str(tmp_path / "m.json")
    for argv in (
        ["merge", str(good), str(bad), "-o", out],
        ["merge", str(bad), "-o", out, "--md", str(tmp_path / "m.md")],
        ["diff", str(good), str(bad)],
        ["diff", str(bad), str(good)],
        ["baseline", str(bad), "-o", str(tmp_path / "b.json")],
    ):
        code = main(argv)
        err = capsys.readouterr().err
        _refused(code, err, "bad.json")


def test_a_baseline_where_a_report_belongs_is_said_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(ANOTHER_PROJECT))
    good, out = _leg(tmp_path), str(tmp_path / "m.json")
    for argv in (["show", str(baseline)], ["merge", str(good), str(baseline), "-o", out],
                 ["merge", str(baseline), "-o", out]):  # fmt: skip
        code = main(argv)
        err = capsys.readouterr().err
        _refused(code, err, "baseline.json")
        assert (
            f"{baseline}: a baseline, not a report: it holds only counts (for "
            "--jaxport-baseline and jaxport diff); give a report written by pytest "
            "--jaxport-report=PATH.json or by jaxport merge -o"
        ) in err, err
    # diff and baseline read baselines as they are
    assert main(["diff", str(baseline), str(baseline)]) == 0
    assert main(["baseline", str(baseline), "-o", str(tmp_path / "again.json")]) == 0


@pytest.mark.parametrize(
    ("tests", "said"),
    [
        ([], "'tests': expected a table of tests, found list []"),
        ({"t.py::a": ["c"]}, 'test t.py::a: expected a table of checks, found list ["c"]'),
        ({"t.py::a": {"c": 1}},
         "test t.py::a check 'c': expected a table of platforms, found int 1"),
        ({"t.py::a": {"c": {"cpu": 1}}},
         "test t.py::a check 'c' on cpu: expected a table of levels, found int 1"),
        ({"t.py::a": {"c": {"cpu": {"lowered": {"vendor": "3"}}}}},
         "test t.py::a check 'c' on cpu lowered: expected counts, found str \"3\""),
    ],
)  # fmt: skip
def test_a_malformed_baseline_is_refused_saying_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tests: Any, said: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**ANOTHER_PROJECT, "tests": tests}))
    good = _leg(tmp_path)
    for argv in (["diff", str(bad), str(good)], ["diff", str(good), str(bad)],
                 ["baseline", str(bad), "-o", str(tmp_path / "b.json")]):  # fmt: skip
        code = main(argv)
        err = capsys.readouterr().err
        _refused(code, err, "bad.json")
        assert f"{bad}: malformed pytest-jaxport baseline: {said}" in err, err
    assert "AttributeError" not in err


def test_commands_refuse_missing_files_and_unwritable_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _leg(tmp_path)
    assert main(["merge", str(good), str(tmp_path / "gone.json"), "-o", "m.json"]) == 2
    _refused(2, capsys.readouterr().err, "gone.json")
    assert main(["diff", str(tmp_path / "gone.json"), str(good)]) == 2
    _refused(2, capsys.readouterr().err, "gone.json")
    assert main(["merge", str(good), "-o", str(tmp_path / "no" / "m.json")]) == 2
    _refused(2, capsys.readouterr().err, "m.json")
    assert main(["baseline", str(good), "-o", str(tmp_path / "no" / "b.json")]) == 2
    _refused(2, capsys.readouterr().err, "b.json")


def test_merge_writes_json_markdown_and_html(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = _leg(tmp_path, "leg-a.json"), _leg(tmp_path, "leg-b.json")
    code = main(["merge", str(a), str(b), "-o", str(tmp_path / "m.json"),
                 "--md", str(tmp_path / "m.md"), "--html", str(tmp_path / "m.html")])  # fmt: skip
    assert code == 0
    assert "2 legs, 0 tests, 0 output comparisons: nothing compared" in capsys.readouterr().out
    merged = json.loads((tmp_path / "m.json").read_text())
    assert [leg["leg"] for leg in merged["legs"]] == ["leg-a.json", "leg-b.json"]
    assert "### Legs" in (tmp_path / "m.md").read_text()
    assert (tmp_path / "m.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert main(["baseline", str(tmp_path / "m.json"), "-o", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["kind"] == "baseline"
