"""Findings at source lines (``view/viewmodel/alerts.py``): each one at the line that caused
it, the same line in the problems row, the ``::error`` annotation and SARIF."""

from __future__ import annotations

import json

import pytest

# A TPU-first model: float32 dots (rounded to bfloat16 on tpu) at lines 7 and 18, and a
# Pallas kernel on tpu's branch at line 13. ``exact`` doubles as the default path does;
# ``off`` adds one: its code, not its arithmetic, differs.
MODEL = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def first(x, w):
    return jnp.dot(x, w)


def scaled(x, kernel):
    return jax.lax.platform_dependent(
        x,
        tpu=lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x),
        default=lambda x: x * 2.0)


def second(h, w):
    return jnp.dot(h, w)


def exact(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def off(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def forward(x, w, w2, kernel):
    return second(scaled(first(x, w), kernel), w2)
"""

TESTS = """
import functools

import jax.numpy as jnp
import pytest

import model

X = jnp.linspace(-1, 1, 16 * 256).reshape(16, 256)
W = jnp.linspace(-2, 1, 256 * 128).reshape(256, 128)
W2 = jnp.linspace(-1, 3, 128 * 128).reshape(128, 128)


@pytest.mark.portable
@pytest.mark.parametrize("kernel", ["exact", "off"])
def test_forward(jaxport, kernel):
    jaxport.check(functools.partial(model.forward, kernel=getattr(model, kernel)), X, W, W2)
"""


def test_an_emulated_mismatch_is_at_the_line_that_made_it_differ(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 55, item 11: a mismatch of bfloat16 dots (lines 7 and 18) was shown, annotated
    and put in SARIF at the exact Pallas kernel's line (13). The emulation now tells the
    platform's code from its arithmetic: the exact kernel's mismatch is the dots', the
    kernel that adds one is its own."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "tpu"]\nemulate = ["tpu"]\n')
    pytester.makepyfile(model=MODEL, test_forward=TESTS)
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "no:randomly", "--jaxport-report=r.sarif")
    result.assert_outcomes(failed=2)
    said = result.stdout.str()
    exact, off = (
        [line for line in said.splitlines() if line.startswith("::error") and f"[{k}]" in line]
        for k in ("exact", "off")
    )
    assert [line.split(",title=")[0] for line in exact] == ["::error file=model.py,line=7"]
    assert [line.split(",title=")[0] for line in off] == ["::error file=model.py,line=13"]
    result.stdout.fnmatch_lines([
        "*test_forward?exact?*'forward': 1 differing leaf*",
        "*at model.py:7 (+1 more)",
        "*test_forward?off?*'forward': 1 differing leaf*",
        "*at model.py:13 (+1 more)",  # the kernel, then its branch (line 11)
    ])  # fmt: skip
    assert "the difference is tpu's arithmetic: its branches and kernels alone, " in said
    assert "the difference is the code tpu runs: its branches and kernels alone, " in said
    sarif = json.loads((pytester.path / "r.sarif").read_text())
    lines = sorted(
        r["locations"][0]["physicalLocation"]["region"]["startLine"]
        for r in sarif["runs"][0]["results"]
        if r["ruleId"] == "numerics-difference"
    )
    assert lines == [7, 13]


def test_a_refused_compile_is_annotated_at_the_line_the_compiler_refused() -> None:
    """Issue 55, item 11: the float64 solve's "fails to compile" annotation sat at
    ``tests/test_portable.py:1`` though its message said model.py:35."""
    from helpers import built_report

    from pytest_jaxport.model.census import Census
    from pytest_jaxport.model.probe import PlatformProbe, Probe
    from pytest_jaxport.view.viewmodel.alerts import alerts_of

    refused = (
        "JaxRuntimeError: UNIMPLEMENTED: Only F32 and C64 types are implemented in "
        "LuDecomposition; got shape f64[16,16] (at model.py:35)"
    )
    tpu = PlatformProbe(platform="tpu", present=False, census=Census(platform="tpu"),
                        compile_error=refused)  # fmt: skip
    rocm = PlatformProbe(platform="rocm", present=False, error="ValueError: " + refused)
    probe = Probe(name="solve", reference="cpu", platforms={"tpu": tpu, "rocm": rocm})
    violation = {"check": "solve", "platform": "tpu", "key": "must_lower", "limit": ["tpu"],
                 "origin": "pyproject.toml [tool.jaxport.budget]", "found": "fails to compile",
                 "what": "compile", "level": "compiled", "details": [refused]}  # fmt: skip
    test = {"nodeid": "tests/test_portable.py::test_x64", "outcome": "failed",
            "checks": [probe.to_dict()], "violations": [violation]}  # fmt: skip
    report = built_report([test], config={"platforms": ["cpu", "rocm", "tpu"],
                                          "reference": "cpu"})  # fmt: skip
    placed = {(a.rule, a.level): (a.file, a.line) for a in alerts_of(report).in_repository()}
    assert placed[("does-not-lower", "error")] == ("model.py", 35)
    assert placed[("does-not-lower", "warning")] == ("model.py", 35)  # rocm: not must_lower
