"""Tests of pytest_jaxport.view.annotations (the alerts of view.viewmodel.alerts).

GitHub Actions annotations (issue 42): under ``GITHUB_ACTIONS=true`` each budget violation
is one ``::error file=PATH,line=N,title=...::message`` line at the user's source line, the
findings that fail nothing are ``::warning`` lines, at most 10 of each kind per step (the
documented limit of actions/toolkit's docs/problem-matchers.md) with the rest counted, and
``--jaxport-annotations=off|errors|all`` says which.
"""

from __future__ import annotations

import pytest

from pytest_jaxport.view.annotations import PER_STEP, annotation_lines, default_mode
from pytest_jaxport.view.viewmodel.alerts import Alert

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

def test_plain():
    assert True
"""
PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda"]
reference = "cpu"
"""
SOLVE_LINE = SUITE.strip().splitlines().index("    return jnp.linalg.solve(a, b)") + 1


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    pytester.makefile(".toml", pyproject=PROJECT)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _commands(result: pytest.RunResult, kind: str) -> list[str]:
    return [line for line in result.outlines if line.startswith(f"::{kind} ")]


@pytest.mark.slow
def test_in_github_actions_each_violation_is_an_error_at_its_source_line(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = project.runpytest()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    errors = _commands(result, "error")
    assert {e.split("::")[2].split(":")[0] for e in errors} == {"cpu", "cuda"}  # one each
    for error in errors:
        assert error.startswith(f"::error file=test_suite.py,line={SOLVE_LINE},title=jaxport ")
        assert "vendor calls > 0 (max_vendor_calls, set in test_suite.py::test_solve)" in error
    assert len(errors) == len(set(errors))


@pytest.mark.slow
def test_outside_github_actions_nothing_is_annotated_unless_asked(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest()
    assert not _commands(result, "error")
    result = project.runpytest("--jaxport-annotations=errors")
    assert len(_commands(result, "error")) == 2
    assert not _commands(result, "warning")


@pytest.mark.slow
def test_annotations_off_prints_none_in_github_actions(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = project.runpytest("--jaxport-annotations=off")
    result.assert_outcomes(passed=2, failed=1)
    assert not [line for line in result.outlines if line.startswith("::")]


def test_a_suite_without_portable_tests_prints_no_annotation(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert not [line for line in result.outlines if line.startswith("::")]


def test_a_bad_annotations_value_is_a_usage_error_naming_the_choices(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest("--jaxport-annotations=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*argument --jaxport-annotations: invalid choice: 'maybe' (choose from *off*errors*all*"]
    )
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


# -- on plain data ----------------------------------------------------------------------------


def _alert(level: str, n: int) -> Alert:
    return Alert(rule="custom-kernel", level=level, file="src/k.py", line=n,  # type: ignore[arg-type]
                 message=f"kernel {n}: 100% hand-written,\nrewrite", title="cuda: k",
                 identity=f"k{n}")  # fmt: skip


def test_warnings_and_errors_are_capped_per_step_and_the_rest_counted() -> None:
    found = [_alert("error", n) for n in range(1, 13)] + [
        _alert("warning", n) for n in range(1, 16)
    ]
    found += [_alert("note", 99)]
    lines = annotation_lines(found, mode="all")
    assert sum(line.startswith("::error ") for line in lines) == PER_STEP == 10
    assert sum(line.startswith("::warning ") for line in lines) == PER_STEP
    assert lines[-1].startswith("jaxport: 2 more errors and 5 more warnings not annotated")
    assert not any("line=99" in line for line in lines)  # notes are never annotated
    errors_only = annotation_lines(found, mode="errors")
    assert not any(line.startswith("::warning") for line in errors_only)
    assert errors_only[-1].startswith("jaxport: 2 more errors not annotated")
    assert annotation_lines(found, mode="off") == []


def test_messages_and_properties_are_escaped_as_workflow_commands_need() -> None:
    [line] = annotation_lines([_alert("warning", 3)], mode="all")
    assert line == (
        "::warning file=src/k.py,line=3,title=jaxport custom-kernel%3A cuda%3A k"
        "::kernel 3: 100%25 hand-written,%0Arewrite"
    )


def test_the_default_is_all_in_github_actions_and_off_elsewhere() -> None:
    assert default_mode({"GITHUB_ACTIONS": "true"}) == "all"
    assert default_mode({"CI": "true"}) == "off"
    assert default_mode({}) == "off"
