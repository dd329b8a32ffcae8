"""Device memory against a base (``report/baseline.py``): a baseline keeps each check's planned
memory per platform, and ``jaxport diff`` and ``--jaxport-baseline`` flag memory that grew past
``memory_growth`` of the base's, or past the device's capacity; on typed reports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_viewmodel_memory import SUITE, run_suite

from pytest_jaxport.model.budget import Setting
from pytest_jaxport.model.census import Census
from pytest_jaxport.model.memory import DeviceMemory
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.report.baseline import (
    DEVICE_MEMORY,
    MEMORY,
    baseline_of,
    compare_to_baseline,
    diff,
    growth_violation,
)
from pytest_jaxport.report.build import build_report
from pytest_jaxport.report.document import Config, Environment, Report
from pytest_jaxport.report.entries import Check, TestEntry
from pytest_jaxport.view.markdown import diff_markdown
from pytest_jaxport.view.text import diff_text

GIB = 1 << 30
V5E = 16_909_336_064
NODEID = "tests/test_fit.py::test_step"
STEP = 5_035_000_000
"""An 8-layer 8192-wide MLP train step's plan on a v5e (4.69 GiB)."""


def probe(peak: int | None, *, capacity: int | None = V5E) -> Probe:
    memory = None
    if peak is not None:
        memory = DeviceMemory(platform="tpu", level="compiled", generation="v5e",
                              peak_bytes=peak, capacity_bytes=capacity)  # fmt: skip
    census = Census(platform="tpu", level="lowered")
    compiled = Census(platform="tpu", level="compiled")
    tpu = PlatformProbe(
        platform="tpu",
        present=False,
        census=census,
        compiled=compiled,
        deviceless=True,
        memory=memory,
    )
    return Probe(name="step", reference="cpu", platforms={"tpu": tpu})


def run(peak: int | None, *, capacity: int | None = V5E, growth: float | None = None) -> Report:
    test = TestEntry(
        nodeid=NODEID, outcome="passed", checks=(Check(probe=probe(peak, capacity=capacity)),)
    )
    return build_report(
        [test],
        config=Config(
            platforms=("cpu", "tpu"), reference="cpu", compile=("tpu",), memory_growth=growth
        ),
        environment=Environment(),
    )


def test_a_baseline_keeps_the_memory_a_check_needs_per_platform() -> None:
    counts = baseline_of(run(STEP))
    assert counts["tests"][NODEID]["step"]["tpu"][MEMORY] == {
        "device_memory": STEP,
        "device_capacity": V5E,
    }
    assert MEMORY not in baseline_of(run(None))["tests"][NODEID]["step"]["tpu"]


def test_memory_that_grew_past_the_threshold_is_growth() -> None:
    found = diff(run(STEP), run(7_248_000_000))
    [change] = found.changes
    assert found.grew
    assert change.fails
    assert change.metric == DEVICE_MEMORY
    assert change.describe() == (
        "check 'step' on tpu: planned device memory grew 4.69 GiB -> 6.75 GiB (+2.06 GiB, "
        "+44%; memory_growth 10%, set in the default) (compiled)"
    )
    assert f"  {NODEID} {change.describe()}" in diff_text(found)
    assert (
        "| planned device memory (compiled) | 4.69 GiB | 6.75 GiB | +2.06 GiB (+44%; "
        "memory_growth 10%, set in the default) |"
    ) in diff_markdown(found)


@pytest.mark.parametrize(
    ("after", "growth", "kind"),
    [
        (int(STEP * 1.05), None, None),  # within the default 10%: no change
        (int(STEP * 1.05), Setting(value=0.01, origin="--memory-growth"), "grew"),
        (int(STEP * 1.5), Setting(value=1.0, origin="--memory-growth"), None),
        (int(STEP * 0.8), None, "shrank"),
        (STEP + 1, Setting(value=0.0, origin="pyproject.toml [tool.jaxport]"), "grew"),
        (STEP, Setting(value=0.0, origin="pyproject.toml [tool.jaxport]"), None),
    ],
)
def test_the_threshold_is_the_users(after: int, growth: Setting[float] | None, kind: str) -> None:
    found = diff(run(STEP), run(after), memory_growth=growth)
    assert [c.kind for c in found.changes] == ([kind] if kind else [])


def test_memory_that_no_longer_fits_is_growth_whatever_the_threshold() -> None:
    found = diff(run(V5E - GIB // 10), run(V5E + GIB // 10),
                 memory_growth=Setting(value=0.5, origin="--memory-growth"))  # fmt: skip
    [change] = found.growth
    assert change.capacity == V5E
    assert change.finding() == (
        "planned device memory grew 15.65 GiB -> 15.85 GiB (+1%; memory_growth 50%, set in "
        "--memory-growth): no longer fits the device's 15.75 GiB"
    )
    assert "**no longer fits 15.75 GiB**" in diff_markdown(found)


def test_memory_is_compared_only_where_both_sides_planned_it() -> None:
    assert not diff(run(None), run(STEP)).changes
    assert not diff(run(STEP), run(None)).changes


def test_the_baseline_fails_a_test_whose_memory_grew_past_memory_growth() -> None:
    baseline = baseline_of(run(STEP))
    threshold = Setting(value=0.2, origin="pyproject.toml [tool.jaxport]")
    within = compare_to_baseline(baseline, NODEID, [probe(int(STEP * 1.15))],
                                 memory_growth=threshold)  # fmt: skip
    assert within == []
    [grown] = compare_to_baseline(baseline, NODEID, [probe(int(STEP * 1.3))],
                                  memory_growth=threshold)  # fmt: skip
    assert grown.fails
    assert grown.message.startswith(
        "check 'step' on tpu: planned device memory grew 4.69 GiB -> 6.10 GiB (+1.41 GiB, +30%; "
        "memory_growth 20%, set in pyproject.toml [tool.jaxport]) (compiled) since the "
        "baseline"
    )
    assert grown.change is not None
    violation = growth_violation(grown.change, "baseline.json", probe(int(STEP * 1.3)))
    assert violation.headline() == (
        "tpu: planned device memory grew 4.69 GiB -> 6.10 GiB (+30%; memory_growth 20%, set in "
        "pyproject.toml [tool.jaxport]) (since the baseline baseline.json); check 'step', "
        "compiled"
    )


def test_a_baseline_of_older_counts_compares_as_before() -> None:
    """A baseline written before memory was kept has no ``memory``: nothing to compare."""
    baseline = baseline_of(run(STEP))
    entry = baseline["tests"][NODEID]["step"]["tpu"]
    baseline["tests"] = {NODEID: {"step": {"tpu": {k: v for k, v in entry.items() if k != MEMORY}}}}
    assert compare_to_baseline(baseline, NODEID, [probe(STEP * 3)]) == []


# -- a real run against its baseline ------------------------------------------------------------


@pytest.mark.slow
def test_a_run_fails_where_planned_memory_grew_past_memory_growth(tmp_path: Path) -> None:
    """A baseline recorded at one shape; the same check at twice the side plans four times
    the memory (cpu's compile): the run fails, saying by how much and against which
    threshold; a project that allows it passes."""
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.jaxport]\nplatforms = ["cpu"]\ncompile = ["cpu"]\n'
    )
    recorded = run_suite(tmp_path, "-k", "test_fits", "--jaxport-baseline=b.json",
                         "--jaxport-baseline-update", "--jaxport-report=base.json")  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    grown = run_suite(tmp_path, "-k", "test_fits", "--jaxport-baseline=b.json",
                      "--jaxport-report=head.json", side=8192)  # fmt: skip
    assert grown.returncode == 1, grown.stdout + grown.stderr
    assert (
        "cpu: planned device memory grew 192.0 MiB -> 768.0 MiB (+300%; memory_growth 10%, set "
        "in the default) (since the baseline b.json); check 'product', compiled"
    ) in grown.stdout
    diffed = subprocess.run(
        [sys.executable, "-m", "pytest_jaxport.cli", "diff", "base.json", "head.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert diffed.returncode == 1
    assert (
        "test_suite.py::test_fits check 'product' on cpu: planned device memory grew 192.0 MiB "
        "-> 768.0 MiB (+576.0 MiB, +300%; memory_growth 10%, set in the default) "
        "(compiled)"
    ) in diffed.stdout
    (tmp_path / "pyproject.toml").write_text(
        '[tool.jaxport]\nplatforms = ["cpu"]\ncompile = ["cpu"]\nmemory_growth = 4.0\n'
    )
    allowed = run_suite(tmp_path, "-k", "test_fits", "--jaxport-baseline=b.json", side=8192)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
