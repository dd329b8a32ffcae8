"""Tests of pytest_jaxport.report.summary.not_lowered and what every format says of it.

Never a number the tool did not measure (issue 50): a move to a target nobody lowered has
no kernels to rewrite and no days (not 0), in every format, the merge and the audit, and a
rewrite budget on it cannot pass; a budget for a platform nothing lowers is refused."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import typed
from test_home import TPU_KERNEL_SUITE

from pytest_jaxport.model.budget import Budget, Setting
from pytest_jaxport.model.census import Census
from pytest_jaxport.model.config import ConfigError
from pytest_jaxport.model.evaluation import evaluate
from pytest_jaxport.model.numerics import Tolerance
from pytest_jaxport.model.probe import PlatformProbe, Probe, Untraced
from pytest_jaxport.model.pyproject import parse_project
from pytest_jaxport.report.merge import load_legs, merge
from pytest_jaxport.view.display import display_options
from pytest_jaxport.view.html import render_html
from pytest_jaxport.view.markdown import render_markdown
from pytest_jaxport.view.text import render_text
from pytest_jaxport.view.viewmodel.build import build_view

JAXPORT = (sys.executable, "-m", "pytest_jaxport.cli")
"""The ``jaxport`` command of this checkout's environment."""

# The Pallas kernel of test_home's suite on the cuda branch: a kernel to rewrite for every
# other GPU target.
CUDA_KERNEL_SUITE = TPU_KERNEL_SUITE.replace("tpu=tpu_kernel", "cuda=tpu_kernel")


def _report(pytester: pytest.Pytester, *args: str, name: str = "r.json") -> dict:
    result = pytester.runpytest(f"--jaxport-report={name}", *args)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    return json.loads((pytester.path / name).read_text())


def test_a_target_not_lowered_is_not_priced_by_default(pytester: pytest.Pytester) -> None:
    """``platforms = ["cpu", "cuda"]``: no "rocm 0, tpu 0"; migrate_to follows what is
    lowered, as docs/reference.md says."""
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(test_scale=CUDA_KERNEL_SUITE)
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*rocm 0*")
    result.stdout.no_fnmatch_line("*kernels to rewrite moving off*")
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["config"]["migrate_to"] == []
    assert report["summary"]["kernels_to_rewrite"] == {}
    assert "rocm" not in report["summary"]["rewrite_days"]


def test_default_migrate_to_is_every_lowered_platform_but_cpu_and_home() -> None:
    assert parse_project({}, "pyproject.toml").migrate_to == ("rocm", "tpu")
    assert parse_project({"platforms": ["cpu", "cuda"]}, "p").migrate_to == ()
    assert parse_project({"platforms": ["cpu"]}, "p").migrate_to == ()
    # a platform must_lower adds is lowered, so it is priced
    lowered = parse_project(
        {"platforms": ["cpu", "cuda"], "budget": {"must_lower": ["cpu", "cuda", "tpu"]}}, "p"
    )
    assert lowered.migrate_to == ("tpu",)


def test_migrate_to_naming_a_platform_not_lowered_is_refused() -> None:
    with pytest.raises(ConfigError) as e:
        parse_project({"platforms": ["cpu", "cuda"], "migrate_to": ["rocm", "tpu"]}, "p.toml")
    assert str(e.value) == (
        "p.toml: [tool.jaxport] migrate_to: expected platforms among the platforms checks lower "
        "for (cpu, cuda), found 'rocm', 'tpu': a target that is not lowered has no kernels "
        "counted; add them to platforms, or leave them out of migrate_to"
    )


@pytest.mark.slow
def test_a_leg_that_does_not_lower_a_target_says_so_everywhere(
    pytester: pytest.Pytester,
) -> None:
    """pyproject prices tpu; a leg narrowed to cpu and cuda has no tpu count: the terminal,
    the JSON, the Markdown and the HTML say "not lowered", the merge with a leg that
    lowered tpu counts it, and a rewrite budget on tpu fails the narrowed leg."""
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda", "tpu"]\nmigrate_to = ["tpu"]\n'
    )
    pytester.makepyfile(test_scale=CUDA_KERNEL_SUITE)
    result = pytester.runpytest("--jaxport-report=leg.json", "--jaxport-platforms=cpu,cuda")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "2. kernels to rewrite moving off cuda (distinct sites): tpu not lowered",
        "*not lowered: no count and no price, not 0*",
        "   tpu: not priced: not lowered",
    ])  # fmt: skip
    leg = json.loads((pytester.path / "leg.json").read_text())
    summary = leg["summary"]
    assert summary["not_lowered"] == {"tpu": ["tpu"]}
    assert "tpu" not in summary["kernels_to_rewrite"]
    view = build_view(typed(leg))
    options = display_options(lambda name: None, verbosity=0)
    assert "| tpu | not lowered | — |" in render_markdown(view, options)
    assert ">not lowered</span>" in render_html(view, options)

    full = _report(pytester, name="full.json")
    assert full["summary"]["kernels_to_rewrite"] == {"tpu": 1}
    legs = load_legs([pytester.path / "leg.json", pytester.path / "full.json"])
    merged = merge(legs, tolerance_for=lambda dtype, platform: Tolerance(rtol=0, atol=0))
    numbers = merged.document.summary.numbers
    assert numbers is not None
    assert (dict(numbers.kernels_to_rewrite), dict(numbers.not_lowered)) == ({"tpu": 1}, {})

    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda", "tpu"]\nmigrate_to = ["tpu"]\n'
        "[tool.jaxport.budget.tpu]\nmax_kernels_to_rewrite = 1\n"
    )
    budgeted = pytester.runpytest("--jaxport-platforms=cpu,cuda", "--jaxport-report=budget.json")
    budgeted.assert_outcomes(failed=1)
    budgeted.stdout.fnmatch_lines([
        "*tpu: kernels to rewrite moving off cuda not counted: tpu not lowered "
        "(max_kernels_to_rewrite, set in pyproject.toml [[]tool.jaxport.budget.tpu[]]); "
        "check 'scale', not lowered",
        "to pass: lower for the platforms not lowered*or drop max_kernels_to_rewrite*",
    ])  # fmt: skip
    # what was never counted has no number (found null): written, and read back
    [violation] = load_legs([pytester.path / "budget.json"])[0][1].tests[0].violations
    assert (violation.key, violation.found) == ("max_kernels_to_rewrite", None)


def test_an_audit_of_a_suite_that_lowers_no_target_prices_none(
    pytester: pytest.Pytester,
) -> None:
    """The audit's numbers: a target its computations never lowered for has no count."""
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda", "tpu"]\nmigrate_to = ["tpu"]\n'
    )
    pytester.makepyfile(
        test_plain="""
        import jax, jax.numpy as jnp

        def test_it():
            assert jax.jit(lambda x: x * 2)(jnp.ones(3)).shape == (3,)
        """
    )
    report = _report(pytester, "--jaxport-audit", "--jaxport-platforms=cpu,cuda")
    numbers = report["audit"]["summary"]
    assert numbers["not_lowered"] == {"tpu": ["tpu"]}
    assert numbers["kernels_to_rewrite"] == {}
    text = render_text(build_view(typed(report)), display_options(lambda n: None, verbosity=0))
    assert "(distinct sites; suite audit): tpu not lowered" in text


def test_a_budget_for_a_platform_not_lowered_is_refused(pytester: pytest.Pytester) -> None:
    """``[tool.jaxport.budget.tpu]`` with tpu not in platforms read "problems: none": now a
    usage error saying what to do, like ``--jaxport-emulate`` of a platform not lowered."""
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n'
        "[tool.jaxport.budget.tpu]\nmax_vendor_calls = 0\n"
    )
    pytester.makepyfile(test_scale=CUDA_KERNEL_SUITE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*jaxport: pyproject.toml: [[]tool.jaxport.budget.tpu[]]: a budget for tpu, which the "
        "checks do not lower for (they lower for cpu, cuda), would pass whatever the code does;"
        " add 'tpu' to [[]tool.jaxport[]] platforms, or remove the table",
    ])  # fmt: skip
    result.stdout.no_fnmatch_line("*problems: none*")


def test_a_library_limit_a_platform_never_calls_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        "[tool.jaxport]\n[tool.jaxport.budget.rocm]\nmax_library_calls = { cudnn = 1 }\n"
    )
    pytester.makepyfile(test_scale=CUDA_KERNEL_SUITE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*[[]tool.jaxport.budget.rocm[]] max_library_calls.cudnn: rocm never calls cudnn (a "
        "library of cuda), so the limit could not fail; expected one of rocm's libraries "
        "(hipblas, hipblaslt, hipfft, hipsolver, hipsparse, jaxlib, miopen, rccl), or set it in "
        "[[]tool.jaxport.budget.cuda[]]",
    ])  # fmt: skip


def test_a_leg_narrower_than_its_budgets_says_which_it_does_not_judge(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda", "tpu"]\n'
        "[tool.jaxport.budget.tpu]\nmax_vendor_calls = 0\n"
    )
    pytester.makepyfile(test_scale=CUDA_KERNEL_SUITE)
    result = pytester.runpytest("--jaxport-platforms=cpu,cuda")
    result.assert_outcomes(passed=1)
    header = " ".join(result.stdout.str().split())  # pytest's header, unwrapped
    assert (
        "budgets from pyproject.toml [tool.jaxport.budget.tpu] (not judged in this run: tpu is "
        "not lowered, --jaxport-platforms)" in header
    )


BROKEN = "import not_a_module_anywhere\n\n\ndef test_never_runs():\n    pass\n"


@pytest.mark.slow
@pytest.mark.parametrize("dist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_collection_error_says_tests_did_not_run(
    pytester: pytest.Pytester, dist: tuple[str, ...]
) -> None:
    """A test file that fails to import read "problems: none (every portable test within
    budget, every check lowers)" and "0 of 0 checks": the report says tests did not run, in
    the terminal, the JSON and the Markdown, also where pytest-xdist collected it."""
    pytester.makepyprojecttoml("[tool.jaxport]\n")
    pytester.makepyfile(test_broken=BROKEN)
    result = pytester.runpytest("--jaxport-report=r.json", "--jaxport-report=r.md", *dist)
    assert result.ret != pytest.ExitCode.OK  # interrupted, or (xdist) failed
    result.stdout.no_fnmatch_line("*problems: none*")
    result.stdout.fnmatch_lines([
        "problems: tests did not run (1 file not collected), 0 failed, 0 budget violations",
        "  did not run: pytest could not collect them — 1 file",
        "    test_broken.py  ModuleNotFoundError: No module named 'not_a_module_anywhere'",
        "tests did not run: 1 file not collected; 0 portable tests, 0 checks, *",
    ])  # fmt: skip
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["collection_errors"] == [
        {
            "nodeid": "test_broken.py",
            "error": "ModuleNotFoundError: No module named 'not_a_module_anywhere'",
        }
    ]
    markdown = (pytester.path / "r.md").read_text()
    assert "**tests did not run: 1 file not collected** · **0 of 0 portable tests" in markdown
    assert "None: every" not in markdown


@pytest.mark.slow
def test_a_merge_of_a_leg_whose_tests_did_not_run_is_not_green(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml("[tool.jaxport]\n")
    pytester.makepyfile(test_broken=BROKEN)
    pytester.runpytest("--jaxport-report=leg.json")
    (pytester.path / "test_broken.py").unlink()
    pytester.makepyfile(test_fine="def test_fine():\n    pass\n")
    pytester.runpytest("--jaxport-report=other.json")
    merged = pytester.run(*JAXPORT, "merge", "leg.json", "other.json", "-o", "m.json")
    assert merged.ret == 1
    merged.stdout.fnmatch_lines(["jaxport merge: 2 legs, 0 tests, *FAILED: 1 file not collected*"])
    assert (
        json.loads((pytester.path / "m.json").read_text())["collection_errors"][0]["nodeid"]
        == "test_broken.py"
    )


def test_a_rewrite_budget_fails_where_nothing_was_counted_but_not_an_untraced_check() -> None:
    """The judge on plain data: a check lowered for cpu and cuda has no tpu count, and a
    limit on it fails saying so; a check that could not be traced here lowered nowhere and
    fails no budget (as it fails no must_lower)."""
    budget = Budget(platform="tpu", max_kernels_to_rewrite=Setting(value=0, origin="here"))
    lowered = Probe(
        name="f",
        reference="cpu",
        platforms={
            p: PlatformProbe(platform=p, present=p == "cpu", census=Census(platform=p))
            for p in ("cpu", "cuda")
        },
    )
    [violation] = evaluate(lowered, lambda p: budget, migrate_to=["tpu"])
    assert violation.headline() == (
        "tpu: kernels to rewrite moving off cuda not counted: tpu not lowered "
        "(max_kernels_to_rewrite, set in here); check 'f', not lowered"
    )
    untraced = Probe(
        name="g", reference="cpu", untraced=Untraced(platform="cuda", needs="cuDNN", error="x")
    )
    assert evaluate(untraced, lambda p: budget, migrate_to=["tpu"]) == []
