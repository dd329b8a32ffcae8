"""Tests of the package as built (pyproject.toml, MANIFEST.in, the wheel).

The package as an index takes it (issue 42): its metadata, its long description's links,
the wheel built from the tracked files with every module and data file in it, ``twine check``;
and, in .ci/run's wheel leg (``JAXPORT_EXPECT_INSTALLED=1``), that the tests ran against the
installed wheel, not this checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pytest_jaxport
from pytest_jaxport.view.sarif import PROJECT_URL

ROOT = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")


def _project() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(data["project"])


def test_the_metadata_has_urls_classifiers_and_the_pytest_entry_point() -> None:
    project = _project()
    urls = project["urls"]
    assert isinstance(urls, dict)
    assert urls["Repository"] == urls["Homepage"] == PROJECT_URL
    assert all(str(u).startswith(PROJECT_URL) for u in urls.values())
    classifiers = project["classifiers"]
    assert isinstance(classifiers, list)
    assert "Framework :: Pytest" in classifiers
    assert "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # license = "Apache-2.0"
    versions = {c.rsplit(":: ", 1)[1] for c in classifiers if re.search(r":: 3\.\d+$", c)}
    assert "3.10" in versions  # requires-python's floor
    entry = project["entry-points"]
    assert isinstance(entry, dict)
    assert entry["pytest11"] == {"jaxport": "pytest_jaxport.plugin"}


def test_the_long_descriptions_links_work_on_a_package_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    relative = [link for link in links if not re.match(r"(https?://|mailto:|#)", link)]
    assert relative == []
    ours = [link for link in links if "pytest-jaxport/pytest-jaxport" in link]
    for link in ours:  # each names a file or folder this checkout has
        path = re.sub(r"^https://[^/]+/pytest-jaxport/pytest-jaxport/(?:blob|tree)/main/", "", link)
        path = path.removeprefix(
            "https://raw.githubusercontent.com/pytest-jaxport/pytest-jaxport/main/"
        )
        assert (ROOT / path.split("#")[0]).exists(), link
    assert "pip install dist/pytest_jaxport-" in readme  # how to install the built wheel


def _tracked(prefix: str) -> set[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(
        ["git", "ls-files", prefix], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {line for line in out.splitlines() if line}


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("JAXPORT_EXPECT_INSTALLED") == "1",
    reason="the wheel leg builds and checks the wheel itself",
)
def test_the_wheel_holds_every_file_of_the_package_and_twine_passes(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="build makes the wheel")
    pytest.importorskip("twine", reason="twine checks it")
    tracked = _tracked("pytest_jaxport")
    source = tmp_path / "source"
    for name in [*tracked, "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"]:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "-o", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("pytest_jaxport-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entries = archive.read(entry_points).decode()
    assert {n for n in names if n.startswith("pytest_jaxport/")} == tracked
    assert "[pytest11]\njaxport = pytest_jaxport.plugin" in entries
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.skipif(
    os.environ.get("JAXPORT_EXPECT_INSTALLED") != "1", reason="only in .ci/run's wheel leg"
)
def test_the_wheel_leg_runs_against_the_installed_package() -> None:
    installed = Path(pytest_jaxport.__file__).resolve()
    assert "site-packages" in installed.parts, installed
    assert not installed.is_relative_to(ROOT / "pytest_jaxport"), installed
