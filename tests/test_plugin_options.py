"""Tests of pytest_jaxport.plugin.OPTIONS.

Command-line values are validated where the options declare them (``addoption(type=...)``):
a bad value is pytest's usage error (exit code 4) naming the option, with the words that
say how to fix it, before any test is collected."""

from __future__ import annotations

from argparse import ArgumentTypeError

import pytest

from pytest_jaxport.plugin import compile_option, emulate_option, platforms_option, report_path


def test_good_values_are_parsed_at_the_option() -> None:
    assert platforms_option(" cpu, tpu ") == ("cpu", "tpu")
    assert platforms_option("") is None
    assert compile_option("cpu,cuda") == ("cpu", "cuda")
    assert compile_option("none") == compile_option("") == ()
    assert emulate_option("tpu") == ("tpu",)
    assert emulate_option("none") == ()
    assert report_path("out/r.html") == "out/r.html"
    assert report_path("-") == "-"


@pytest.mark.parametrize(
    ("parse", "value", "said"),
    [
        (platforms_option, "cpu,nvidia", "unknown platform 'nvidia' (did you mean 'cuda', "
         "NVIDIA's platform?); expected one of cpu, cuda, rocm, tpu, oneapi"),
        (platforms_option, "cpu,cpu", "expected each platform at most once, found array "
         "['cpu', 'cpu']"),
        (platforms_option, ",", "expected a non-empty list of platforms, found array []"),
        (compile_option, "rocm", "expected platforms from cpu, cuda, tpu, found string 'rocm' "
         "(rocm and oneapi are counted at the lowered level only)"),
        (emulate_option, "cpu", "expected platforms from cuda, rocm, tpu, oneapi, found string "
         "'cpu' (cpu is executed, never emulated)"),
        (report_path, "report.txt", "report.txt: expected a path ending in .json, .md, .html, "
         ".sarif or .codequality.json, found suffix '.txt'"),
        (report_path, "test_x.py", "took the test path 'test_x.py' as its report PATH: put "
         "--jaxport-report after the test paths, or give the PATH with '=' "
         "(--jaxport-report=report.json test_x.py)"),
    ],
)  # fmt: skip
def test_a_bad_value_is_refused_in_words_without_the_options_name(
    parse: object, value: str, said: str
) -> None:
    with pytest.raises(ArgumentTypeError) as raised:
        parse(value)  # type: ignore[operator]
    assert str(raised.value) == said  # argparse puts "argument --jaxport-...: " before it


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("--jaxport-platforms=cpu,gpu", "argument --jaxport-platforms: unknown platform 'gpu' "
         "('gpu' is JAX's name for any GPU backend: *"),
        ("--jaxport-compile=rocm", "argument --jaxport-compile: expected platforms from cpu, "
         "cuda, tpu, found string 'rocm' (rocm and oneapi are counted at the lowered level only)"),
        ("--jaxport-emulate=tpx", "argument --jaxport-emulate: expected platforms from cuda, "
         "rocm, tpu, oneapi, found string 'tpx' (did you mean 'tpu'?)"),
        ("--jaxport-report=r.txt", "argument --jaxport-report: r.txt: expected a path ending "
         "in .json, .md, .html, .sarif or .codequality.json, found suffix '.txt'"),
    ],
)  # fmt: skip
def test_a_bad_option_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, option: str, said: str
) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*: error: {said}"])
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output
    assert "INTERNALERROR" not in output
    assert "collected" not in result.stdout.str()


def test_what_needs_the_project_is_still_checked_with_it(pytester: pytest.Pytester) -> None:
    """The reference and the emulated platforms are judged against the project's platforms,
    after the options are parsed: still a usage error naming the option."""
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("--jaxport-platforms=tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: jaxport: --jaxport-platforms: the reference platform 'cpu' must be among the "
        "platforms, found tpu"
    ])  # fmt: skip
    result = pytester.runpytest("--jaxport-platforms=cpu", "--jaxport-emulate=tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: jaxport: --jaxport-emulate: expected platforms among the platforms checks "
        "lower for (cpu), found 'tpu'*"
    ])  # fmt: skip


def test_compile_names_only_platforms_the_checks_lower_for(pytester: pytest.Pytester) -> None:
    """``--jaxport-compile=tpu`` with tpu not lowered is refused as ``--jaxport-emulate``
    is; a leg that narrows the platforms compiles only those of ``[tool.jaxport] compile``
    it lowers for (issue 55, item 5)."""
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("--jaxport-platforms=cpu,cuda", "--jaxport-compile=tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: jaxport: --jaxport-compile: expected platforms among the platforms checks "
        "lower for (cpu, cuda), found 'tpu'; add it to platforms, or leave it out of compile"
    ])  # fmt: skip
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\ncompile = ["tpu"]\n')
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: jaxport: pyproject.toml: [[]tool.jaxport[]] compile: *"])
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "tpu"]\ncompile = ["tpu"]\n')
    result = pytester.runpytest("--jaxport-platforms=cpu", "--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    report = (pytester.path / "r.json").read_text()
    assert '"compile": []' in report or '"compile": null' in report
