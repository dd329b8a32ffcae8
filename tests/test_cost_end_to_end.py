"""Tests of pytest_jaxport.model.cost and report.summary through the plugin.

The three numbers and the fifth layer, end to end: runtime share, kernels to rewrite,
engineering days, their budgets, the tooling scan and the layer table in every format."""

from __future__ import annotations

import html
import json
import textwrap

import pytest
from helpers import typed

from pytest_jaxport.model.roofline import shipped_estimate_errors
from pytest_jaxport.view.viewmodel.build import build_view

FFI_SUITE = """
import jax
import jax.numpy as jnp
import pytest


def cuda_kernel(x):
    return jax.ffi.ffi_call("my_cuda_gelu", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def gelu(x):
    return jax.lax.platform_dependent(x, cuda=cuda_kernel, default=jax.nn.gelu)


def block(w, x):
    return gelu(x @ w) @ w.T


@pytest.mark.portable(max_custom_calls=1)
def test_block(jaxport):
    w = jnp.ones((64, 64)) / 64
    x = jnp.ones((32, 64))
    assert jaxport.check(block, w, x).shape == (32, 64)
"""


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    result = pytester.runpytest("--jaxport-report=r.json", *args)
    return result, json.loads((pytester.path / "r.json").read_text())


def test_cuda_only_ffi_kernel_behind_platform_dependent(
    pytester: pytest.Pytester, measured_basis: str
) -> None:
    pytester.makepyfile(test_block=FFI_SUITE)
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    summary = report["summary"]
    cpu, cuda = summary["runtime_share"]["cpu"], summary["runtime_share"]["cuda"]
    assert cpu["basis"] == measured_basis
    assert cpu["xla"] + cpu["vendor"] + cpu["custom"] == pytest.approx(1.0)
    assert cuda["basis"] == "estimated"
    assert cuda["custom"] > 0  # the FFI kernel's share of the roofline estimate
    assert summary["kernels_to_rewrite"] == {"rocm": 1, "tpu": 1}
    for target in ("rocm", "tpu"):
        estimate = summary["rewrite"][target]
        [item] = estimate["items"]
        assert (item["name"], item["status"]) == ("my_cuda_gelu", "fallback")
        # The ffi_call line; JAX before 0.10 attributes ops in platform_dependent branches to
        # the platform_dependent call instead (line 11). Both are the user's own lines.
        assert item["location"] in ("test_block.py:7", "test_block.py:11")
        assert estimate["days"] > 0
        assert estimate["breakdown"]["fallback_validation"] > 0
        assert sum(estimate["breakdown"].values()) == pytest.approx(estimate["days"])
    platforms = report["tests"][0]["checks"][0]["platforms"]
    assert platforms["cpu"]["runtime_share"]["basis"] == measured_basis
    assert platforms["tpu"]["runtime_share"]["basis"] == "estimated"
    result.stdout.fnmatch_lines(
        [
            "1. runtime share (suite, time-weighted):",
            "   cpu   xla*vendor*custom*[[]*[]]*",
            "   cuda  xla*[[]ESTIMATED ±*[]]*",
            "2. kernels to rewrite moving off cuda (distinct sites): rocm 1, tpu 1",
            "     rocm fallback: my_cuda_gelu (ffi) at test_block.py:*",
            "     tpu fallback: my_cuda_gelu (ffi) at test_block.py:*",
            "3. engineering days for a backend switch*",
            "   rocm: 8 days = 3 from the project (fallback validation 3) + 5 fixed per target",
        ]
    )


def test_the_numbers_say_what_they_can_bear(pytester: pytest.Pytester) -> None:
    """An estimate whose ±band is as wide as the smaller of its two largest shares is called
    a ranking, not a share, under its row in every format; the HTML draws the band on its
    bar; the days show the fixed part apart from what the project costs."""
    from pytest_jaxport.view.display import DisplayOptions
    from pytest_jaxport.view.html import render_html
    from pytest_jaxport.view.markdown import render_markdown

    pytester.makepyfile(test_block=FFI_SUITE)
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    shares = report["summary"]["runtime_share"]
    # rocm: the dot is hipBLAS, the rest XLA's, estimated from the lowered program (±37)
    assert shares["rocm"]["error_points"] == 37
    assert 0 < shares["rocm"]["xla"] <= 0.37 < shares["rocm"]["vendor"]
    assert shares["tpu"]["xla"] == 1.0  # all in one layer: nothing to rank
    # tpu's band is its own, measured on the chip (estimate_error.json's platforms.tpu)
    chip = shipped_estimate_errors()["tpu"]["lowered"]
    assert (shares["tpu"]["error_points"], shares["tpu"]["error_measured_on"]) == (
        chip.points, chip.device
    )  # fmt: skip
    band = f"±{chip.points:.0f}"
    result.stdout.fnmatch_lines(
        [
            "   rocm  xla  *%  vendor  *%  custom   0%  [[]ESTIMATED ±37[]]  hipblas *%",
            "         a ranking, not a share: within ±37 points, xla's *% could be 0%",
            f"   tpu   xla 100%  vendor   0%  custom   0%  [[]ESTIMATED {band}[]]",
            "   [[]ESTIMATED ±37[]]: estimated (roofline from the lowered program, ±37 points *",
            f"   [[]ESTIMATED {band}[]]: estimated (roofline from the lowered program, {band} "
            f"points on {chip.device})",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "   rocm: 8 days = 3 from the project (fallback validation 3) + 5 fixed per target",
            "   tpu: 8.25 days = 3.25 from the project (fallback validation 3, precision reviews "
            "0.25) + 5 fixed",
            "       per target",
        ],
        consecutive=True,
    )
    view = build_view(typed(report))
    xla = view.shares[[s.platform for s in view.shares].index("rocm")].layers["xla"]
    said = f"within ±37 points, xla's {round(xla * 100)}% could be 0%"
    md = render_markdown(view, DisplayOptions())
    assert f"; **a ranking, not a share**: {said} |" in md
    assert "| rocm | 1 | 8 | 3: fallback validation 3 | 5 |" in md
    assert "| tpu | 1 | 8.25 | 3.25: fallback validation 3, precision reviews 0.25 | 5 |" in md
    page = render_html(view, DisplayOptions())
    said = html.escape(said)
    assert f'<span class="badge ranking" title="a ranking, not a share: {said}">' in page
    assert f"<li><strong>rocm</strong>: a ranking, not a share: {said}</li>" in page
    parts = '<span class="parts">= 3 from the project + 5 fixed per target</span>'
    assert f'<span class="label">engineering days</span>{parts}' in page
    assert '<tr class="subtotal"><th scope="row">from the project</th>' in page


def test_kernel_that_does_not_lower_is_a_rewrite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_only="""
        import jax
        import jax.numpy as jnp
        import pytest

        def only_cuda(x):
            return jax.lax.platform_dependent(
                x, cuda=lambda y: jax.ffi.ffi_call("k", jax.ShapeDtypeStruct(y.shape, y.dtype))(y),
                cpu=jnp.sin)

        @pytest.mark.portable(platforms=["cpu", "cuda", "rocm", "tpu"])
        def test_only(jaxport):
            jaxport.check(only_cuda, jnp.ones(4))
        """
    )
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    items = report["summary"]["rewrite"]["rocm"]["items"]
    assert [(i["name"], i["status"]) for i in items] == [("k", "rewrite")]
    assert "does not lower on rocm" in items[0]["reason"]
    assert report["summary"]["rewrite"]["rocm"]["breakdown"]["kernel_rewrite"] == 10.0


@pytest.mark.slow
def test_rewrite_and_share_budgets(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_budgets=FFI_SUITE
        + """

@pytest.mark.portable(max_custom_calls=1, max_kernels_to_rewrite=0)
def test_no_rewrites_allowed(jaxport):
    jaxport.check(block, jnp.ones((8, 8)), jnp.ones((4, 8)))


# tpu: the kernel's fallback validation (3 days) and a precision review of the float32 dots
# at the default precision (0.25: one line).
@pytest.mark.portable(max_custom_calls=1, max_kernels_to_rewrite=1, max_rewrite_days=3.25)
def test_at_the_limits(jaxport):
    jaxport.check(block, jnp.ones((8, 8)), jnp.ones((4, 8)))


@pytest.mark.portable(max_custom_calls=1, max_rewrite_days=2.5)
def test_days_over(jaxport):
    jaxport.check(block, jnp.ones((8, 8)), jnp.ones((4, 8)))


@pytest.mark.portable(max_custom_calls=1, max_vendor_share=0.0)
def test_vendor_share_over(jaxport):
    jaxport.check(block, jnp.ones((8, 8)), jnp.ones((4, 8)))
"""
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(
        [
            "rocm: 1 kernel to rewrite moving off cuda > 0 (max_kernels_to_rewrite, set in "
            "test_budgets.py::test_no_rewrites_allowed); check 'block', from the cuda census",
            "*my_cuda_gelu (ffi) at test_budgets.py:*: fallback*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["tpu: 3.25 engineering days to move off cuda > 2.5 (max_rewrite_days, set in "
         "*test_days_over); check 'block', cost model",
         "*my_cuda_gelu (ffi) at test_budgets.py:*: fallback*",
         "*float32-default-precision at test_budgets.py:*: precision review"]
    )  # fmt: skip
    result.stdout.fnmatch_lines(
        ["cuda: *% of the run time in vendor kernels > 0.0% (max_vendor_share, set in "
         "*test_vendor_share_over); check 'block', estimated runtime share"]
    )  # fmt: skip


def test_cost_table_and_rewrite_cost_hook(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml",
        pyproject="""
        [tool.jaxport]
        migrate_to = ["tpu"]
        [tool.jaxport.cost]
        fallback_validation = 1.5
        fixed = 0
        """,
    )
    pytester.makeconftest(
        """
        def pytest_jaxport_rewrite_cost(item, target, model):
            assert model.fallback_validation == 1.5
            return 42.0 if item.name == "my_cuda_gelu" else None
        """
    )
    pytester.makepyfile(test_block=FFI_SUITE)
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    assert set(report["summary"]["rewrite"]) == {"tpu"}
    tpu = report["summary"]["rewrite"]["tpu"]
    assert tpu["breakdown"]["fallback_validation"] == 42.0
    # The float32 dots' line at the default precision: one precision review on tpu.
    assert tpu["breakdown"]["precision_review"] == 0.25
    assert tpu["days"] == 42.25
    assert report["summary"]["cost_model"]["fallback_validation"] == 1.5


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[tool.jaxport]\nmigrate_to = ['cuda']\n", "*migrate_to: expected non-NVIDIA targets*"),
        ("[tool.jaxport.cost]\nkernel_rewrit = 3\n",
         "*unknown key 'kernel_rewrit' (did you mean 'kernel_rewrite'?)*"),
        ("[tool.jaxport.cost]\nfixed = -1\n", "*fixed: expected a finite non-negative number*"),
        ("[tool.jaxport.budget]\nmax_vendor_share = 1.5\n",
         "*max_vendor_share: expected a fraction between 0 and 1, found float 1.5"),
        ("[tool.jaxport.budget.cuda]\nmax_tooling_assumptions = 1\n",
         "*max_tooling_assumptions: expected only in [[]tool.jaxport.budget[]]*"),
        ("[tool.jaxport.scan]\nexclud = ['x']\n",
         "*unknown key 'exclud' (did you mean 'exclude'?)*"),
    ],
)  # fmt: skip
def test_bad_cost_and_scan_config(pytester: pytest.Pytester, toml: str, expected: str) -> None:
    pytester.makefile(".toml", pyproject=textwrap.dedent(toml))
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: jaxport: {expected}"])


TOOLING_PROJECT = {
    "Dockerfile": "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\nRUN pip install 'jax[cuda12]'\n",
    "scripts/profile.sh": "#!/bin/sh\nnsys profile python train.py\n",
    "vendor/old/Dockerfile": "FROM nvidia/cuda:11.8.0-base\n",
}


def _plant(pytester: pytest.Pytester) -> None:
    for name, text in TOOLING_PROJECT.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    pytester.makepyfile(test_block=FFI_SUITE)


def test_tooling_scan_feeds_report_cost_and_budget(pytester: pytest.Pytester) -> None:
    _plant(pytester)
    pytester.makefile(
        ".toml",
        pyproject="""
        [tool.jaxport.scan]
        exclude = ["vendor/**"]
        [tool.jaxport.budget]
        max_tooling_assumptions = 2
        """,
    )
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    tooling = report["summary"]["tooling"]
    found = {(a["file"], a["line"], a["rule"]) for a in tooling["assumptions"]}
    assert found == {
        ("Dockerfile", 1, "cuda-image"),
        ("Dockerfile", 2, "cuda-pin"),
        ("scripts/profile.sh", 2, "nvidia-tool"),
    }
    assert report["summary"]["rewrite"]["rocm"]["breakdown"]["tooling_assumption"] == 1.5
    result.stdout.fnmatch_lines(
        [
            "jaxport: 3 NVIDIA-bound tooling assumptions > 2 (max_tooling_assumptions, set in "
            "pyproject.toml [[]tool.jaxport.budget[]])",
            "    Dockerfile:1: cuda-image: *",
        ]
    )
    layers = build_view(typed(report)).layers  # the view builds the layer table; the JSON has data
    assert [row.layer for row in layers] == [
        "JAX Python code (jit, grad, vmap)",
        "XLA-generated kernels",
        "vendor-library calls",
        "hand-written kernels and custom calls",
        "numeric formats and memory layout",
        "profiling, tooling and CI assumptions",
    ]
    assert layers[5].value.startswith("3 found in")
    assert layers[0].value == "1 of 1 check lowers on every configured platform"


@pytest.mark.slow
def test_tooling_rules_hook_and_scan_switch(pytester: pytest.Pytester) -> None:
    _plant(pytester)
    pytester.makeconftest(
        """
        from pytest_jaxport import ToolingRule

        def pytest_jaxport_tooling_rules(config):
            return [ToolingRule(id="our-base", pattern=r"python train[.]py",
                                files=("*.sh",), reason="our GPU training entry point")]
        """
    )
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    assumptions = report["summary"]["tooling"]["assumptions"]
    assert "our-base" in {a["rule"] for a in assumptions}
    # Without [tool.jaxport.scan] exclude, only always-skipped folders are left out: vendor/.
    assert "vendor/old/Dockerfile" not in {a["file"] for a in assumptions}
    pytester.makefile(".toml", pyproject="[tool.jaxport.scan]\nenabled = false\n")
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    assert "tooling" not in report["summary"]
    assert build_view(typed(report)).layers[5].value == "not scanned"


def test_layer_table_is_in_every_format_after_the_problems(pytester: pytest.Pytester) -> None:
    _plant(pytester)
    result = pytester.runpytest("--jaxport-report=r.md")
    result.stdout.fnmatch_lines(
        [
            "problems: none *",
            "layers (-v: in full):",
            "  JAX Python code (jit, grad, vmap): 1 of 1 check lowers on every configured platform",
        ]
    )
    markdown = (pytester.path / "r.md").read_text()
    assert markdown.index("### Problems") < markdown.index("| layer | portable? |")
    assert "| profiling, tooling and CI assumptions | often NVIDIA-bound |" in markdown
    pytester.runpytest("--jaxport-report=r.html")
    page = (pytester.path / "r.html").read_text()
    assert page.index('id="problems"') < page.index('id="layers"') < page.index('id="matrix"')
    assert "profiling, tooling and CI assumptions" in page


def test_one_kernel_site_is_priced_once_per_target(pytester: pytest.Pytester) -> None:
    """The same FFI kernel at the same line, checked twice: once with a portable fallback
    (tpu runs generic code), once without a tpu branch (it does not lower on tpu). On tpu
    the site is one rewrite, 10 days, not a rewrite plus a fallback validation."""
    pytester.makepyfile(
        test_site="""
        import jax
        import jax.numpy as jnp
        import pytest

        def cuda_kernel(x):
            return jax.ffi.ffi_call("my_cuda_gelu", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

        def gelu(x, portable):
            others = {"default": jax.nn.gelu} if portable else {"cpu": jax.nn.gelu}
            return jax.lax.platform_dependent(x, cuda=cuda_kernel, **others)

        @pytest.mark.portable(platforms=["cpu", "cuda", "rocm", "tpu"])
        def test_both(jaxport):
            jaxport.check(lambda x: gelu(x, True), jnp.ones(8), name="with_fallback")
            jaxport.check(lambda x: gelu(x, False), jnp.ones(8), name="without")
        """
    )
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    checks = {c["name"]: c for c in report["tests"][0]["checks"]}
    assert checks["with_fallback"]["platforms"]["tpu"]["error"] is None
    assert checks["without"]["platforms"]["tpu"]["error"] is not None
    for target in ("rocm", "tpu"):
        estimate = report["summary"]["rewrite"][target]
        [item] = estimate["items"]
        assert (item["name"], item["status"], item["check"]) == ("my_cuda_gelu", "rewrite",
                                                                  "without")  # fmt: skip
        assert estimate["breakdown"]["kernel_rewrite"] == 10.0
        assert estimate["breakdown"]["fallback_validation"] == 0.0
        assert report["summary"]["kernels_to_rewrite"][target] == 1


UNRUNNABLE_SUITE = """
import jax
import jax.numpy as jnp
import pytest


def no_handler(x):
    return jax.ffi.ffi_call("kernel_nobody_registered", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@pytest.mark.portable
def test_runs(jaxport):
    jaxport.check(lambda a: jnp.tanh(a @ a), jnp.ones((64, 64)))


@pytest.mark.portable
def test_does_not_run_here(jaxport):
    with pytest.warns(UserWarning):
        jaxport.check(no_handler, jnp.ones((8,)))
"""


def test_suite_share_is_measured_over_what_ran_and_says_what_it_left_out(
    pytester: pytest.Pytester, measured_basis: str
) -> None:
    """A check that cannot run on cpu gets an estimate; the suite's cpu share stays measured
    over the checks that ran and says it left one out, with the estimate kept apart."""
    if measured_basis != "measured":
        pytest.skip("this jaxlib's profiler reports no per-instruction events (needs 0.8.3+)")
    pytester.makepyfile(test_mixed=UNRUNNABLE_SUITE)
    result, report = run(pytester, "-p", "no:cacheprovider", "-W", "ignore")
    result.assert_outcomes(passed=2)
    cpu = report["summary"]["runtime_share"]["cpu"]
    assert (cpu["basis"], cpu["checks"], cpu["left_out"]) == ("measured", 1, 1)
    left_out = cpu["left_out_share"]
    assert (left_out["basis"], left_out["estimated_from"]) == ("estimated", "lowered")
    assert left_out["custom"] == pytest.approx(1.0)  # the unregistered FFI kernel
    assert cpu["custom"] == 0.0  # ... is not mixed into what was measured
    result.stdout.fnmatch_lines(
        [
            "   cpu   xla*[[]measured, 1 of 2 checks[]]*",
            "*[[]measured, 1 of 2 checks[]]: measured over 1 of 2 checks (1 not measured, left"
            " out)",
        ]
    )
