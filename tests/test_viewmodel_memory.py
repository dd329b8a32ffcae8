"""Will it fit, as the reports show it (``view/viewmodel/memory.py``), on typed data: the
memory column of every format, what does not fit as a problem and an alert, a check with
abstract arguments read as "not compared", and a suite audit's largest plan. A report without
memory data shows no memory column (``tests/test_reports_unchanged.py`` holds real runs to
that)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_jaxport._jax import libtpu
from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.census import Census, CompiledMemory
from pytest_jaxport.model.memory import DeviceMemory, out_of_memory
from pytest_jaxport.model.probe import NotCompared, PlatformProbe, Probe
from pytest_jaxport.report.build import build_report
from pytest_jaxport.report.document import Config, Environment, Report
from pytest_jaxport.report.entries import Check, TestEntry
from pytest_jaxport.report.files import from_json, load
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.html import render_html
from pytest_jaxport.view.markdown import render_markdown
from pytest_jaxport.view.sarif import render_sarif
from pytest_jaxport.view.text import probe_text, render_text
from pytest_jaxport.view.viewmodel.build import build_view
from pytest_jaxport.view.viewmodel.memory import largest_plans, memory_cell

GIB = 1 << 30
V5E = 16_909_336_064
"""A TPU v5e chip's usable bytes (its ``bytes_limit``: 15.75 GiB)."""
REFUSED = (
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
    "temporaries (18.75G) exceeds available HBM (15.75G)."
)


def tpu_memory(peak: int | None = None, **changes: object) -> DeviceMemory:
    memory = DeviceMemory(
        platform="tpu", level="compiled", device="TPU v5e", generation="v5e", slice="v5e:1x1",
        deviceless=True, peak_bytes=peak, capacity_bytes=V5E,
        capacity_source="the TPU v5e's bytes_limit",
        breakdown=CompiledMemory(argument=4 * GIB, output=GIB, temp=8 * GIB)
        if peak is not None else None,
    )  # fmt: skip
    return dataclasses.replace(memory, **changes)  # type: ignore[arg-type]


def census(platform: str, level: str = "lowered") -> Census:
    return Census(platform=platform, level="compiled" if level == "compiled" else "lowered")


def check(
    name: str, memory: DeviceMemory | None, *, abstract: bool = False, refused: bool = False
) -> Check:
    """A check lowered for cpu (present), tpu (compiled deviceless, ``memory``) and rocm (not
    compiled); ``abstract``: given ``jax.ShapeDtypeStruct`` arguments, run nowhere."""
    tpu = PlatformProbe(
        platform="tpu", present=False, census=census("tpu"),
        compiled=None if refused else census("tpu", "compiled"), deviceless=True,
        target="TPU v5e", compile_error=REFUSED if refused else None, memory=memory,
    )  # fmt: skip
    rocm_memory = DeviceMemory(platform="rocm", level="not compiled", reason="not in compile")
    not_compared = NotCompared(arguments=("args[0]",)) if abstract else None
    return Check(
        probe=Probe(
            name=name,
            reference="cpu",
            platforms={
                "cpu": PlatformProbe(
                    platform="cpu", present=True, census=census("cpu"), executed=not abstract
                ),
                "tpu": tpu,
                "rocm": PlatformProbe(
                    platform="rocm",
                    present=False,
                    census=census("rocm"),
                    memory=None if memory is None else rocm_memory,
                ),
            },
            not_compared=not_compared,
            note=not_compared.sentence() if not_compared else None,
        )
    )


def report(*tests: TestEntry) -> Report:
    return build_report(
        tests,
        config=Config(platforms=("cpu", "tpu", "rocm"), reference="cpu", compile=("cpu", "tpu")),
        environment=Environment(present_platforms=("cpu",)),
    )


STEP = TestEntry(
    nodeid="tests/test_fit.py::test_step",
    outcome="passed",
    checks=(check("step", tpu_memory(14_063_000_000), abstract=True),),
)
BIG = TestEntry(
    nodeid="tests/test_fit.py::test_big",
    outcome="passed",
    checks=(check("big", tpu_memory(out_of_memory=out_of_memory(REFUSED)), refused=True),),
)


# -- the memory column's words -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("memory", "line", "status"),
    [
        (tpu_memory(14_063_000_000), "tpu (v5e): 13.1 of 15.75 GiB (83%)", "good"),
        (tpu_memory(out_of_memory=out_of_memory(REFUSED)),
         "tpu (v5e): does not fit: needs 18.75 GiB of 15.75 GiB", "bad"),
        (tpu_memory(3 * GIB, slice="v5e:2x2", devices=4, per="chip"),
         "tpu (v5e:2x2, per chip): 3 of 15.75 GiB (19%)", "good"),
        (tpu_memory(805_306_368), "tpu (v5e): 768 MiB of 15.75 GiB (4.8%)", "good"),
        (tpu_memory(V5E - 1), "tpu (v5e): 15.7 of 15.75 GiB (>99%)", "good"),
        (tpu_memory(V5E + GIB), "tpu (v5e): 16.7 of 15.75 GiB (106%): does not fit", "bad"),
        (tpu_memory(4 * GIB, capacity_bytes=None),
         "tpu (v5e): 4 GiB planned, capacity unknown", "unknown"),
        (DeviceMemory(platform="rocm", level="not compiled"), "rocm: not compiled", "unknown"),
        (DeviceMemory(platform="cpu", level="compiled", device="cpu", peak_bytes=1024),
         "cpu: 1 KiB planned, capacity unknown", "unknown"),
    ],
)  # fmt: skip
def test_the_memory_column_says_planned_of_capacity_and_what_it_cannot_know(
    memory: DeviceMemory, line: str, status: str
) -> None:
    cell = memory_cell(memory)
    assert (cell.line, cell.status) == (line, status)


def test_what_does_not_fit_reads_as_the_finding_with_the_compilers_words() -> None:
    cell = memory_cell(tpu_memory(out_of_memory=out_of_memory(REFUSED)))
    assert cell.headline == "does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB"
    assert f"the compiler: {REFUSED}" in cell.details
    planned = memory_cell(tpu_memory(14_063_000_000))
    assert planned.details[0] == (
        "the compiler's count (planned without the device): arguments 4 GiB, outputs 1 GiB, "
        "temporaries 8 GiB, aliased 0 B, code 0 B"
    )
    assert "capacity 15.75 GiB: the TPU v5e's bytes_limit" in planned.details


# -- the view and every format -----------------------------------------------------------------


def test_every_format_shows_the_memory_column_where_a_check_has_memory() -> None:
    view = build_view(report(STEP, BIG))
    assert view.memory_shown
    step = next(t for t in view.tests if t.nodeid.endswith("test_step")).checks[0]
    assert [c.line for c in step.memory] == [
        "tpu (v5e): 13.1 of 15.75 GiB (83%)",
        "rocm: not compiled",
    ]
    options = DisplayOptions(details="all")
    text = render_text(view, options)
    assert "memory tpu (v5e): 13.1 of 15.75 GiB (83%)" in text
    assert "memory rocm: not compiled" in text
    markdown = render_markdown(view, options)
    assert "| test | outcome | check | cpu | tpu | rocm | memory |" in markdown
    assert "tpu (v5e): 13.1 of 15.75 GiB (83%)<br>rocm: not compiled |" in markdown
    assert "**does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB**" in markdown
    html = render_html(view, options)
    assert '<th scope="col">memory</th>' in html
    assert "tpu (v5e): 13.1 of 15.75 GiB (83%)</span>" in html
    assert "Device memory: the compiler's plan per device" in html


def test_a_report_without_memory_has_no_memory_column() -> None:
    plain = TestEntry(nodeid="t.py::test_plain", outcome="passed", checks=(check("f", None),))
    view = build_view(report(plain))
    assert not view.memory_shown
    markdown = render_markdown(view, DisplayOptions(details="all"))
    assert "| memory |" not in markdown
    assert "planned of the device's capacity" not in markdown
    html = render_html(view, DisplayOptions(details="all"))
    assert '<th scope="col">memory</th>' not in html
    assert "Device memory" not in html
    text = render_text(view, DisplayOptions(details="all"))
    assert not [line for line in text.splitlines() if line.strip().startswith("memory ")]


def test_what_does_not_fit_is_a_problem_a_finding_where_no_must_lower_says_so() -> None:
    view = build_view(report(STEP, BIG))
    [group] = view.problems
    assert (group.title, group.summary()) == (
        "tpu: does not fit",
        "1 check in 1 test (not in must_lower: a finding, not a failure)",
    )
    [problem] = group.problems
    assert problem.message == "does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB"
    assert f"the compiler: {REFUSED}" in problem.details
    [row] = [t for t in view.tests if t.nodeid.endswith("test_big")]
    assert row.problem
    assert row.checks[0].cells["tpu"].status == "bad"
    text = render_text(view, DisplayOptions())
    assert "tpu: does not fit — 1 check in 1 test" in text
    assert "'big': does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB" in text


def test_a_must_lower_violation_says_it_once_and_is_code_scannings_does_not_fit() -> None:
    violation = Violation(check="big", platform="tpu", key="must_lower", limit=["tpu"],
                          origin="pyproject.toml [tool.jaxport.budget]", found=None,
                          what="compile: does not fit", level="compiled")  # fmt: skip
    failed = dataclasses.replace(BIG, outcome="failed", violations=(violation,))
    view = build_view(report(failed))
    assert [g.title for g in view.problems] == ["tpu: must_lower"]
    [alert] = [a for a in view.alerts.found if a.rule == "does-not-fit"]
    assert alert.level == "error"


def test_code_scanning_gets_what_does_not_fit_as_a_warning_with_the_compilers_words() -> None:
    log = render_sarif(build_view(report(STEP, BIG)))
    [result] = [r for r in log["runs"][0]["results"] if r["ruleId"] == "does-not-fit"]
    assert result["level"] == "warning"
    assert result["message"]["text"] == (
        "check 'big' of tests/test_fit.py::test_big: does not fit on tpu (v5e): needs 18.75 "
        f"GiB of 15.75 GiB (not in must_lower: a finding, not a failure); the compiler: {REFUSED}"
    )
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "tests/test_fit.py"
    )


def test_an_abstract_check_says_its_numerics_were_not_compared_and_why() -> None:
    view = build_view(report(STEP))
    [row] = view.tests
    assert row.checks[0].cells["cpu"].numerics == "not compared"
    assert row.checks[0].cells["tpu"].numerics == "not present"
    said = (
        "numerics not compared: abstract arguments (jax.ShapeDtypeStruct: args[0]), nothing was run"
    )
    assert said in [n.text for n in view.notes]
    assert "cpu   vendor   0  custom   0  [lowered]  numerics: not compared" in probe_text(
        row.checks[0].probe
    )
    options = DisplayOptions()
    assert "0 / 0 · not compared" in render_markdown(view, options)
    assert said in render_markdown(view, options)
    assert said in render_html(view, options)
    assert said in render_text(view, options)


def test_memory_carries_through_the_reports_json() -> None:
    written = report(STEP, BIG)
    again = from_json(json.loads(json.dumps(written.to_dict())), Path("r.json"))
    assert render_markdown(build_view(again), DisplayOptions()) == render_markdown(
        build_view(written), DisplayOptions()
    )


# -- the suite audit's largest plan ------------------------------------------------------------


def test_the_audit_names_the_largest_plan_per_compiled_platform() -> None:
    def entries(tpu: DeviceMemory | None, cpu: int | None) -> dict[str, PlatformProbe]:
        cpu_memory = DeviceMemory(platform="cpu", level="compiled", device="cpu", peak_bytes=cpu)
        return {
            "cpu": PlatformProbe(platform="cpu", present=True, memory=cpu_memory),
            "tpu": PlatformProbe(platform="tpu", present=False, memory=tpu),
            "rocm": PlatformProbe(platform="rocm", present=False,
                                  memory=DeviceMemory(platform="rocm", level="not compiled")),
        }  # fmt: skip

    found = largest_plans(
        [
            ("mlp [3f2a1b2c]", entries(tpu_memory(2 * GIB), 4 * GIB)),
            ("step [9d0e1f2a]", entries(tpu_memory(14_063_000_000), 2 * GIB)),
            ("eval [00aa11bb]", entries(None, None)),
        ]
    )
    assert [f.line for f in found] == [
        "cpu: 4 GiB planned, capacity unknown, mlp [3f2a1b2c] (the largest of 2 planned)",
        "tpu (v5e): 13.1 of 15.75 GiB (83%), step [9d0e1f2a] (the largest of 2 planned)",
    ]


# -- real runs: every format of a suite that compiles for cpu and tpu (libtpu, deviceless) ----

LIBTPU = libtpu.installed("libtpu")
needs_libtpu = pytest.mark.skipif(
    LIBTPU is None, reason='libtpu is not installed (pip install "pytest-jaxport[tpu]")'
)
refusing_libtpu = pytest.mark.skipif(
    LIBTPU is not None and LIBTPU.startswith("0.0.") and int(LIBTPU.split(".")[2]) < 40,
    reason="these runs read libtpu's refusal of the 40960² product; the floor's libtpu 0.0.17 "
    "plans it instead (18.8 of 15.75 GiB: does not fit), which test_memory.py holds to account",
)

SUITE = """
import os

import jax
import jax.numpy as jnp
import pytest

SIDE = int(os.environ.get("SIDE", "4096"))


def product(a, b):
    return a @ b


@pytest.mark.portable
def test_fits(jaxport):
    x = jax.ShapeDtypeStruct((SIDE, SIDE), jnp.float32)
    jaxport.check(product, x, x)


@pytest.mark.portable
def test_does_not_fit(jaxport):
    x = jax.ShapeDtypeStruct((40960, 40960), jnp.float32)
    jaxport.check(product, x, x)


@pytest.mark.portable(max_device_memory="100 MiB")
def test_over_the_limit(jaxport):
    x = jax.ShapeDtypeStruct((4096, 4096), jnp.float32)
    jaxport.check(product, x, x)
"""
PROJECT = """
[tool.jaxport]
platforms = ["cpu", "tpu", "rocm"]
compile = ["cpu", "tpu"]
"""
FORMATS = ("r.json", "r.md", "r.html", "r.sarif")
PLAN = r"2\d\d MiB"
"""The 4096² product's plan on a v5e: three 64 MiB arrays, scratch and code (256 MiB with libtpu
0.0.42.1; the scratch and code move by a few MiB with the compiler's release)."""


def run_suite(folder: Path, *options: str, side: int = 4096) -> subprocess.CompletedProcess[str]:
    """A real run of :data:`SUITE` in ``folder`` (its own process: libtpu takes a lock)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "SIDE": str(side)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-vv",
         "test_suite.py", *options],
        cwd=folder, capture_output=True, text=True, timeout=900, check=False, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """:data:`SUITE` run once, compiled for cpu and tpu, its report in every format."""
    folder = tmp_path_factory.mktemp("fit")
    (folder / "test_suite.py").write_text(SUITE)
    (folder / "pyproject.toml").write_text(PROJECT)
    done = run_suite(folder, *(f"--jaxport-report={name}" for name in FORMATS))
    out = done.stdout + done.stderr
    assert "INTERNALERROR" not in out, out
    assert done.returncode == 1, out  # test_over_the_limit fails its max_device_memory
    return folder, out


@needs_libtpu
@refusing_libtpu
@pytest.mark.slow
def test_a_real_run_shows_memory_in_every_format(fitted: tuple[Path, str]) -> None:
    folder, out = fitted
    # the -vv details: 256 MiB with libtpu 0.0.42.1; the plan's code and scratch move by a few
    # MiB with the compiler's release
    assert re.search(rf"memory tpu \(v5e\): {PLAN} of 15\.75 GiB \(1\.\d%\)", out), out
    assert "tpu: does not fit — 1 check in 1 test" in out
    assert "'product': does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB" in out
    assert "tpu: max_device_memory — 1 violation in 1 test" in out
    markdown = (folder / "r.md").read_text(encoding="utf-8")
    assert "| test | outcome | check | cpu | tpu | rocm | memory |" in markdown
    assert re.search(
        rf"tpu \(v5e\): {PLAN} of 15\.75 GiB \(1\.\d%\)<br>rocm: not compiled \|", markdown
    )
    assert "**does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB**" in markdown
    assert "| 1 / 0 (compiled) · not compared |" in markdown  # cpu ran nothing: abstract
    html = (folder / "r.html").read_text(encoding="utf-8")
    assert '<th scope="col">memory</th>' in html
    assert "does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB</span>" in html
    sarif = json.loads((folder / "r.sarif").read_text(encoding="utf-8"))
    [result] = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "does-not-fit"]
    region = result["locations"][0]["physicalLocation"]["region"]
    line = SUITE.splitlines().index("def test_does_not_fit(jaxport):") + 3  # its check's line
    assert region == {"startLine": line}
    report = load(folder / "r.json")
    [check] = next(t for t in report.tests if t.nodeid.endswith("test_fits")).checks
    memory = check.probe.platforms["tpu"].memory
    assert memory is not None
    assert memory.fits is True


@needs_libtpu
@refusing_libtpu
@pytest.mark.slow
def test_show_and_merge_carry_memory(fitted: tuple[Path, str]) -> None:
    folder, _ = fitted
    shown = subprocess.run(
        [sys.executable, "-m", "pytest_jaxport.cli", "show", "r.json", "--format", "md"],
        cwd=folder, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert shown.stdout == (folder / "r.md").read_text(encoding="utf-8") + "\n"
    lowered = folder / "lowered"
    lowered.mkdir()
    (lowered / "test_suite.py").write_text(SUITE)
    (lowered / "pyproject.toml").write_text(PROJECT.replace('"cpu", "tpu"]\n', '"cpu"]\n'))
    run_suite(lowered, "--jaxport-report=leg.json")
    merged = subprocess.run(
        [sys.executable, "-m", "pytest_jaxport.cli", "merge", "lowered/leg.json", "r.json",
         "-o", "merged.json", "--md", "merged.md"],
        cwd=folder, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert "wrote merged.json" in merged.stdout, merged.stdout + merged.stderr
    markdown = (folder / "merged.md").read_text(encoding="utf-8")
    assert re.search(
        rf"tpu \(v5e\): {PLAN} of 15\.75 GiB \(1\.\d%\)", markdown
    )  # the compiled leg's
    assert "**does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB**" in markdown


AUDITED = """
import jax
import jax.numpy as jnp


@jax.jit
def step(w, x):
    return jnp.tanh(x @ w)


def test_step():
    step(jnp.ones((512, 512)), jnp.ones((256, 512)))
"""


@needs_libtpu
@refusing_libtpu
@pytest.mark.slow
def test_the_audit_names_its_largest_plan_in_every_format(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_audited=AUDITED)
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "tpu"]\n')
    done = pytester.runpytest_subprocess(
        "-p", "no:randomly", "--jaxport-audit", "--jaxport-compile=tpu",
        "--jaxport-report=r.md", "--jaxport-report=r.html", "--jaxport-report=r.json",
    )  # fmt: skip
    done.assert_outcomes(passed=1)
    done.stdout.fnmatch_lines([
        "  largest planned device memory, per compiled platform:",
        "    tpu (v5e): * of 15.75 GiB (*), step [[]*[]] (the largest of * planned)",
    ])  # fmt: skip
    said = next(line for line in done.outlines if line.startswith("    tpu (v5e): "))
    for name in ("r.md", "r.html"):
        assert said.strip() in (pytester.path / name).read_text(encoding="utf-8").replace(
            "&lt;", "<"
        )
