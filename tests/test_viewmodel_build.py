"""Tests of pytest_jaxport.view.viewmodel.build: the view of a typed report.

The view reads the typed report (issue 40): a report file loaded with
``pytest_jaxport.report.load`` renders as the plugin's own run wrote it, every row of the view
is the report's own value (not a copy read again from its JSON), and building and rendering a
view never turns the report back into dicts."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_jaxport.report import Report, audit_section, document, entries, load, totals
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.formatting import natural_key
from pytest_jaxport.view.html import render_html
from pytest_jaxport.view.markdown import render_markdown
from pytest_jaxport.view.text import render_text
from pytest_jaxport.view.viewmodel.build import build_view

pytestmark = pytest.mark.slow  # a real run in a subprocess

SUITE = """
import jax.numpy as jnp
import pytest

@pytest.mark.portable
def test_scale(jaxport):
    jaxport.check(lambda x: x * 2.0, jnp.ones(3))

@pytest.mark.portable
def test_solve(jaxport):
    jaxport.check(jnp.linalg.solve, jnp.eye(3), jnp.ones(3))

@pytest.mark.portable(max_library_calls={"lapack": 0})
def test_over_budget(jaxport):
    jaxport.check(jnp.linalg.solve, jnp.eye(3), jnp.ones(3))

@pytest.mark.portable
def test_eig(jaxport):
    jaxport.check(jnp.linalg.eigvals, jnp.eye(3))

def test_plain():
    assert jnp.sum(jnp.ones(4)) == 4.0
"""

FILES = ("r.json", "r.md", "r.html")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of :data:`SUITE` with its audit, its report written in every format."""
    folder = tmp_path_factory.mktemp("typed")
    (folder / "test_suite.py").write_text(SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--jaxport-audit",
         *(f"--jaxport-report={name}" for name in FILES), "test_suite.py"],
        cwd=folder, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert "INTERNALERROR" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr  # test_over_budget fails
    return folder


def test_a_loaded_report_renders_as_the_plugins_own_run_wrote_it(written: Path) -> None:
    report = load(written / "r.json")
    assert isinstance(report, Report)
    view = build_view(report)
    options = DisplayOptions()
    assert render_markdown(view, options) == (written / "r.md").read_text(encoding="utf-8")
    assert render_html(view, options) == (written / "r.html").read_text(encoding="utf-8")
    text = render_text(view, options)
    assert "test_over_budget" in text
    assert "max_library_calls.lapack" in text
    assert view.audit is not None
    assert view.audit.seen["computations"] > 0


def test_each_row_of_the_view_is_the_reports_own_value(written: Path) -> None:
    report = load(written / "r.json")
    view = build_view(report)
    entries = sorted(report.tests, key=lambda t: natural_key(t.nodeid))
    assert [row.nodeid for row in view.tests] == [t.nodeid for t in entries]
    for row, entry in zip(view.tests, entries, strict=True):
        assert row.entry is entry  # the report's TestEntry, not one read again from JSON
        assert row.violations is entry.violations
        assert sorted(map(id, (c.check for c in row.checks))) == sorted(map(id, entry.checks))
        for check in row.checks:
            assert check.probe is check.check.probe
            assert set(check.cells) <= set(check.probe.platforms)
    over = next(row for row in view.tests if row.nodeid.endswith("test_over_budget"))
    assert [v.key for v in over.violations] == ["max_library_calls.lapack"]
    # the matrix's platforms are the report's own, in its order: none are the view's
    assert view.platforms[: len(report.config.platforms)] == report.config.platforms


def test_the_view_never_turns_the_report_back_into_dicts(
    written: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building and rendering a view reads attributes only: every part of the report that
    has a JSON form refuses to give it while the view is built and rendered."""
    report = load(written / "r.json")
    assert report.audit is not None  # the audit's parts are read too

    def refused(self: object) -> None:
        raise AssertionError(f"the view asked {type(self).__name__} for its JSON form")

    parts = [
        getattr(module, name)
        for module in (document, entries, totals, audit_section)
        for name in dir(module)
        if dataclasses.is_dataclass(getattr(module, name))
        and getattr(getattr(module, name), "__module__", "") == module.__name__
        and hasattr(getattr(module, name), "to_dict")
    ]
    assert {"Report", "TestEntry", "Check", "Summary", "AuditSection"} <= {
        p.__name__ for p in parts
    }
    for part in parts:
        monkeypatch.setattr(part, "to_dict", refused)
    view = build_view(report)
    for verbosity in (-1, 0, 2):
        options = DisplayOptions(verbosity=verbosity, details="all")
        assert render_text(view, options)
        assert render_markdown(view, options)
        assert render_html(view, options).endswith("</html>\n")
