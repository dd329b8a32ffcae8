"""A suite audit's three numbers count the library's lines; the tests' own are apart (issue 55,
item 17).

blackjax's tpu estimate was 133.5 days, 123 of them format rewrites, and 325 of its float64
findings sat at ``tests/`` lines, from the tests' own x64 variants: a maintainer reads the
library's lock-in, or does not act on the number. The lines that count are every line but the
tests' own (pytest's ``testpaths``, the files tests were collected from, every
``conftest.py``), or those under ``[tool.jaxport.audit] counted_paths``; what sits at the
others is reported apart, in every format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.cli import main
from pytest_jaxport.model.config import ConfigError
from pytest_jaxport.model.counted_lines import CountedLines, collected_files
from pytest_jaxport.model.pyproject import load_project

# -- which lines count -------------------------------------------------------------------------


def test_every_line_but_the_tests_own_counts_by_default() -> None:
    lines = CountedLines(tests=("tests", "test_top.py"))
    assert lines.counts("mylib/ops.py:3")
    assert lines.counts("optax/_src/alias.py:40")  # an installed package's line
    assert lines.counts(None)  # nothing says a finding without a line is the tests'
    assert not lines.counts("tests/unit/test_ops.py:9")  # under a testpaths folder
    assert not lines.counts("test_top.py:2")
    assert not lines.counts("mylib/conftest.py:7")  # every conftest.py, at any depth
    assert lines.counts("tests_helpers/x.py:1")  # a folder is matched whole, not by prefix


def test_counted_paths_count_only_their_lines() -> None:
    lines = CountedLines(paths=("mylib", "src/**/kernels.py"), tests=("mylib",))
    assert lines.counts("mylib/ops.py:3")  # the paths decide, whatever the tests are
    assert lines.counts("src/a/b/kernels.py:8")
    assert not lines.counts("examples/demo.py:3")
    assert not lines.counts("tests/test_ops.py:3")
    assert "the lines under mylib, src/**/kernels.py" in lines.describe()


def test_the_tests_files_are_the_collected_ones_not_already_under_a_testpath() -> None:
    files = collected_files(["tests/test_a.py::T::t[1]", "tests/test_a.py::u", "t_b.py::v"])
    assert files == ("t_b.py", "tests/test_a.py")
    lines = CountedLines(tests=("tests",)).with_tests(files)
    assert lines.tests == ("t_b.py", "tests")
    merged = lines + CountedLines(tests=("other/test_c.py",))
    assert merged.tests == ("other/test_c.py", "t_b.py", "tests")
    assert lines.describe() == "every line but the tests' own (tests, t_b.py, every conftest.py)"


# -- [tool.jaxport.audit] counted_paths --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ('"mylib"', "counted_paths: expected a list of paths or globs relative to the rootdir"),
        (
            '["mylb"]',
            "counted_paths: 'mylb' is no file or folder in .* \\(did you mean 'mylib'\\?\\)",
        ),
        ('["/abs/mylib"]', "counted_paths: '/abs/mylib' is not inside the rootdir"),
        ('["../mylib"]', "counted_paths: '../mylib' is not inside the rootdir"),
        ('[""]', "counted_paths: expected non-empty strings only"),
    ],
)
def test_a_wrong_counted_paths_names_the_file_the_key_and_what_was_found(
    tmp_path: Path, value: str, said: str
) -> None:
    (tmp_path / "mylib").mkdir()
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[tool.jaxport.audit]\ncounted_paths = {value}\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml: \[tool.jaxport.audit\] " + said):
        load_project(path, display="pyproject.toml")


def test_counted_paths_are_read_and_a_misspelt_key_gets_a_hint(tmp_path: Path) -> None:
    (tmp_path / "mylib").mkdir()
    path = tmp_path / "pyproject.toml"
    path.write_text('[tool.jaxport.audit]\ncounted_paths = ["mylib", "src/**"]\n')
    assert load_project(path).audit.counted_paths == ("mylib", "src/**")
    path.write_text('[tool.jaxport.audit]\ncounted_path = ["mylib"]\n')
    with pytest.raises(
        ConfigError, match=r"unknown key 'counted_path' \(did you mean 'counted_paths'"
    ):
        load_project(path)


# -- a real audit ------------------------------------------------------------------------------

LIBRARY = """
import jax


@jax.jit
def gram(x):
    return x.T @ x
"""

TESTS = """
import jax.numpy as jnp

from mylib.ops import gram


def test_gram_in_float64():
    x = jnp.ones((4, 3), dtype=jnp.float64)
    g = gram(x)
    reference = jnp.linalg.solve(g + jnp.eye(3), jnp.ones(3))
    assert reference.dtype == jnp.float64
"""

PYPROJECT = """
[tool.pytest.ini_options]
pythonpath = ["."]

[tool.jaxport]
platforms = ["cpu", "cuda", "tpu"]
migrate_to = ["tpu"]
"""


def audit(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], pyproject: str
) -> dict[str, Any]:
    pytester.makefile(".toml", pyproject=pyproject)
    pytester.makepyfile(**{"mylib/__init__": "", "mylib/ops": LIBRARY, "tests/test_ops": TESTS})
    result = pytester.runpytest_subprocess(
        "--jaxport-audit", "-p", "no:cacheprovider", "--jaxport-report=r.json",
        "--jaxport-report=r.md", "--jaxport-report=r.html",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    found: dict[str, Any] = json.loads((pytester.path / "r.json").read_text())["audit"]
    capsys.readouterr()
    assert main(["show", str(pytester.path / "r.json")]) == 0
    found["terminal"] = capsys.readouterr().out
    return found


def _lines(estimate: dict[str, Any]) -> set[str]:
    return {item["location"] for item in estimate.get("format_items", [])}


@pytest.mark.parametrize("counted_paths", [None, '["mylib"]'])
def test_the_three_numbers_are_the_librarys_and_the_tests_own_lines_are_apart(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    counted_paths: str | None,
) -> None:
    monkeypatch.setenv("JAX_ENABLE_X64", "1")
    chosen = f"\n[tool.jaxport.audit]\ncounted_paths = {counted_paths}\n" if counted_paths else ""
    found = audit(pytester, capsys, PYPROJECT + chosen)
    library, apart = found["summary"]["rewrite"]["tpu"], found["apart"]["rewrite"]["tpu"]
    # float64 on tpu: the library's one line counts; the test's own lines are apart
    assert _lines(library) == {"mylib/ops.py:6"}
    assert _lines(apart)
    assert all(line.startswith("tests/test_ops.py:") for line in _lines(apart))
    assert library["days"] == 5 + 3  # fixed per target + one format rewrite
    assert apart["breakdown"]["fixed"] == 0  # no fixed part: that is the library's
    assert apart["days"] == apart["breakdown"]["format_rewrite"] > 0
    assert found["summary"]["rewrite_days"] == {"tpu": library["days"]}
    assert found["counted"] == {
        "paths": ["mylib"] if counted_paths else [],
        "tests": ["tests/test_ops.py"],
    }
    # in every format: what counts and what is apart
    where = "lines outside counted_paths" if counted_paths else "the tests' own lines"
    counted = "the lines under mylib" if counted_paths else "every line but the tests' own"
    apart_days = f"tpu 0 kernels, {apart['days']:g} days (format rewrites {apart['days']:g})"
    terminal = " ".join(found["terminal"].split())
    assert f"{where}, apart (not above): {apart_days}" in terminal
    assert f"counted: {counted}" in terminal
    markdown = (pytester.path / "r.md").read_text()
    assert f"{where.capitalize()}, apart (not in the table): {apart_days}" in markdown
    assert f"- counted: {counted}" in markdown
    html = (pytester.path / "r.html").read_text().replace("&#x27;", "'")
    assert f"{where.capitalize()}, apart (not in the numbers above): {apart_days}" in html
    assert f"<li>counted: {counted}" in html
