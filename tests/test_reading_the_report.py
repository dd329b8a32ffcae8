"""What a new user reads in a report, said so it cannot mislead (issue 50): a share's largest
library first, numerics findings named as numerics at their lines, files handled without
surprises, and the rest a new user met."""

from __future__ import annotations

import json
import re

import pytest
from helpers import typed

from pytest_jaxport.model.cost import RuntimeShare
from pytest_jaxport.view.model import share_row

DOT_HEAVY = """
import jax.numpy as jnp
import pytest


def model(a, x, w):
    x = x + jnp.fft.fft(a).real.sum()  # a small DUCC call; the dots below are most of the time
    for _ in range(4):
        x = jnp.tanh(x @ w)
    return x


@pytest.mark.portable
def test_model(jaxport):
    jaxport.check(model, jnp.ones(8), jnp.ones((256, 512)), jnp.ones((512, 512)) / 512)
"""


def test_a_shares_libraries_are_listed_largest_first() -> None:
    share = RuntimeShare(
        basis="measured",
        seconds=1.0,
        layers={"xla": 0.0, "vendor": 1.0, "custom": 0.0},
        libraries={"ducc": 0.004, "eigen": 0.12, "lapack": 0.01, "ynnpack": 0.84},
    )
    assert [name for name, _ in share_row("cpu", share).libraries] == [
        "ynnpack", "eigen", "lapack", "ducc"
    ]  # fmt: skip


def test_cpus_measured_share_names_its_largest_library_and_says_why_it_differs(
    pytester: pytest.Pytester, measured_basis: str
) -> None:
    if measured_basis != "measured":
        pytest.skip("this jaxlib's profiler measures no share")
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(test_model=DOT_HEAVY)
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    [line] = [s for s in result.stdout.lines if s.startswith("   cpu ") and "[measured]" in s]
    shown = re.findall(r"([a-z]+) <?[\d.]+%", line.split("]", 1)[1])
    report = json.loads((pytester.path / "r.json").read_text())
    timed = report["summary"]["runtime_share"]["cpu"]["libraries"]
    assert len(timed) > 1
    assert shown == sorted(timed, key=lambda name: -timed[name])[: len(shown)], line
    said = " ".join(result.stdout.str().split())
    assert (
        "note: cpu's vendor share times the compiled program, where ynnpack runs its dots; its "
        "vendor calls count the lowered one, where dots are XLA's own (docs/reference.md, "
        '"Why cpu\'s numbers differ"; --jaxport-compile=cpu counts the compiled calls)'
    ) in said
    counted = report["summary"]["platforms"]["cpu"]["libraries"]
    assert set(timed) - set(counted)  # what the note is about
    assert typed(report).summary.numbers is not None
