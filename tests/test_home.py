"""Tests of [tool.jaxport] home: pytest_jaxport.model.config, report.summary and the view.

A home platform other than cuda (issue 41): ``[tool.jaxport] home`` sets the platform
moving is measured from, for the kernels to rewrite, the fallbacks, the days, the budgets
and every rendering; the report states it, and a report that does not reads as cuda."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from helpers import typed

from pytest_jaxport.model.config import ConfigError, migrate_destinations
from pytest_jaxport.model.numerics import Tolerance
from pytest_jaxport.model.pyproject import parse_project
from pytest_jaxport.report.document import Config
from pytest_jaxport.report.merge import MergeError, load_legs, merge
from pytest_jaxport.view.display import display_options
from pytest_jaxport.view.html import render_html
from pytest_jaxport.view.markdown import render_markdown
from pytest_jaxport.view.text import render_text
from pytest_jaxport.view.viewmodel.build import build_view

DATA = Path(__file__).parent / "data" / "reports"

# A TPU-first team's kernel: a Pallas (Mosaic TPU) kernel on the TPU branch only, the plain
# path everywhere else. Lowered deviceless for tpu, it is a tpu_custom_call.
TPU_KERNEL_SUITE = """
import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def tpu_kernel(x):
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def scale(x):
    return jax.lax.platform_dependent(x, tpu=tpu_kernel, default=lambda x: x * 2.0)


@pytest.mark.portable
def test_scale(jaxport):
    x = jnp.ones((8, 128))
    assert jaxport.check(scale, x).shape == (8, 128)
"""

TPU_HOME = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
home = "tpu"
"""


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    result = pytester.runpytest("--jaxport-report=r.json", *args)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    return result, json.loads((pytester.path / "r.json").read_text())


def test_a_tpu_only_kernel_is_a_fallback_for_each_target_when_home_is_tpu(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(TPU_HOME)
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    assert report["config"]["home"] == "tpu"
    assert report["config"]["migrate_to"] == ["cuda", "rocm"]  # every lowered one but home
    summary = report["summary"]
    assert summary["kernels_to_rewrite"] == {"cuda": 1, "rocm": 1}
    for target in ("cuda", "rocm"):
        [item] = summary["rewrite"][target]["items"]
        assert (item["name"], item["kind"], item["status"]) == (
            "tpu_custom_call", "pallas-mosaic-tpu", "fallback"
        )  # fmt: skip
        assert item["location"].startswith("test_scale.py:")
        assert summary["rewrite"][target]["breakdown"]["fallback_validation"] == 3.0
    result.stdout.fnmatch_lines(
        ["*2. kernels to rewrite moving off tpu (distinct sites): cuda 1, rocm 1*",
         "*cuda fallback: tpu_custom_call (pallas-mosaic-tpu) at test_scale.py:*"]
    )  # fmt: skip
    result.stdout.no_fnmatch_line("*moving off cuda*")


def test_the_same_suite_off_cuda_has_nothing_to_rewrite(pytester: pytest.Pytester) -> None:
    """The default home is unchanged: the TPU kernel is tpu's own variant, not a rewrite."""
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n')
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    result, report = run(pytester)
    result.assert_outcomes(passed=1)
    assert report["config"]["home"] == "cuda"
    assert report["summary"]["kernels_to_rewrite"] == {"rocm": 0, "tpu": 0}
    result.stdout.fnmatch_lines(["*kernels to rewrite moving off cuda*: rocm 0, tpu 0*"])


def test_a_budget_on_kernels_to_rewrite_judges_the_move_off_home(
    pytester: pytest.Pytester,
) -> None:
    budget = "\n[tool.jaxport.budget.cuda]\nmax_kernels_to_rewrite = 0\n"
    pytester.makepyprojecttoml(TPU_HOME + budget)
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    result, _ = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*cuda: 1 kernel to rewrite moving off tpu > 0 (max_kernels_to_rewrite*"]
    )


def test_migrate_to_cuda_is_accepted_off_tpu_and_refused_off_cuda(
    pytester: pytest.Pytester,
) -> None:
    project = parse_project(
        {"platforms": ["cpu", "cuda", "tpu"], "home": "tpu", "migrate_to": ["cuda"]},
        "pyproject.toml",
    )
    assert (project.home, project.migrate_to) == ("tpu", ("cuda",))
    with pytest.raises(ConfigError) as info:
        parse_project({"migrate_to": ["cuda"]}, "pyproject.toml")
    assert str(info.value) == (
        "pyproject.toml: [tool.jaxport] migrate_to: expected non-NVIDIA targets "
        f"({', '.join(migrate_destinations('cuda'))}): the cost model prices moving off cuda, the "
        "home platform ([tool.jaxport] home), found 'cuda'"
    )
    assert migrate_destinations("cuda")[:3] == ("rocm", "tpu", "oneapi")
    assert migrate_destinations("tpu")[:3] == ("cuda", "rocm", "oneapi")
    with pytest.raises(ConfigError) as info:
        parse_project({"home": "tpu", "migrate_to": ["google"]}, "pyproject.toml")
    assert "moving off tpu, the home platform ([tool.jaxport] home), found 'google'" in str(
        info.value
    )
    # and through pytest: a clear error, no traceback
    pytester.makepyprojecttoml(TPU_HOME + 'migrate_to = ["tpu"]\n')
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    result = pytester.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        [f"*[[]tool.jaxport[]] migrate_to: expected non-Google targets "
         f"({', '.join(migrate_destinations('tpu'))})*moving off tpu*found 'tpu'*"]
    )  # fmt: skip
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_home_must_be_a_configured_platform(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\nhome = "tpu"\n')
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    result = pytester.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["*pyproject.toml: [[]tool.jaxport[]] home: expected one of the configured platforms "
         "(cpu, cuda), found 'tpu': moving is measured from home's census, so add 'tpu' to "
         "platforms*"]
    )  # fmt: skip
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    with pytest.raises(ConfigError, match=r"home: unknown platform 'tpx' \(did you mean 'tpu'"):
        parse_project({"home": "tpx"}, "pyproject.toml")


def test_default_migrate_to_is_every_lowered_platform_but_home() -> None:
    assert parse_project({}, "pyproject.toml").migrate_to == ("rocm", "tpu")
    assert parse_project({"home": "tpu"}, "pyproject.toml").migrate_to == ("cuda", "rocm")
    assert parse_project({"home": "rocm"}, "pyproject.toml").migrate_to == ("cuda", "tpu")


def test_the_report_states_its_home_in_every_format(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(TPU_HOME)
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    result = pytester.runpytest("--jaxport-report=r.json", "--jaxport-report=r.md",
                                "--jaxport-report=r.html")  # fmt: skip
    result.assert_outcomes(passed=1)
    said = " ".join(result.stdout.str().split())
    assert "home tpu (moves priced off it)" in said  # the report's last line
    assert (  # and the session's header
        "jaxport: home tpu ([tool.jaxport] home): kernels to rewrite and days priced moving "
        "off it, to cuda, rocm" in said
    )
    markdown = (pytester.path / "r.md").read_text()
    assert "home tpu" in markdown
    assert "kernels to rewrite moving off tpu" in markdown
    page = (pytester.path / "r.html").read_text()
    assert "<dt>home</dt><dd>tpu</dd>" in page
    assert "moving off tpu" in page
    assert "moving off cuda" not in markdown + page


def test_a_report_without_home_reads_as_cuda() -> None:
    """Reports written before reports stated their home measured moving off cuda."""
    recorded = json.loads((DATA / "demo.json").read_text())["report"]
    recorded["config"].pop("home", None)
    report = typed(recorded)
    assert report.config.home is None
    assert report.config.home_platform == "cuda"
    assert "home" not in report.config.to_dict()  # read back as written
    view = build_view(report)
    options = display_options(lambda name: None, verbosity=0)
    assert "2. kernels to rewrite moving off cuda" in render_text(view, options)
    assert "kernels to rewrite moving off cuda" in render_markdown(view, options)
    assert "<dt>home</dt><dd>cuda</dd>" in render_html(view, options)
    stated = Config(platforms=("cpu", "tpu"), reference="cpu", home="tpu")
    assert stated.to_dict()["home"] == "tpu"
    assert typed({**recorded, "config": stated.to_dict()}).config.home_platform == "tpu"


def _legs(pytester: pytest.Pytester, homes: tuple[str, str]) -> list[Path]:
    """Two CI legs of the TPU-kernel suite (cpu+tpu, cpu+cuda+rocm), with the given homes."""
    paths = []
    for home, platforms in zip(homes, ("cpu,tpu", "cpu,cuda,rocm"), strict=True):
        pytester.makepyprojecttoml(
            f'[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\nhome = "{home}"\n'
        )
        path = pytester.path / f"{platforms.replace(',', '-')}.json"
        result = pytester.runpytest(f"--jaxport-platforms={platforms}", f"--jaxport-report={path}")
        result.assert_outcomes(passed=1)
        paths.append(path)
    return paths


@pytest.mark.slow
def test_merging_legs_of_different_homes_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    tpu, gpu = _legs(pytester, ("tpu", "cuda"))
    with pytest.raises(MergeError) as info:
        merge(load_legs([tpu, gpu]), tolerance_for=lambda platform, dtype: Tolerance())
    said = str(info.value)
    assert 'home: "cuda" here, "tpu" in' in said, said
    assert "legs of one merge must share [tool.jaxport]" in said


def test_merging_legs_of_one_home_keeps_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    merged = merge(
        load_legs(_legs(pytester, ("tpu", "tpu"))),
        tolerance_for=lambda platform, dtype: Tolerance(),
    )
    assert merged.report["config"]["home"] == "tpu"
    assert merged.document.config.home_platform == "tpu"


def test_merged_numbers_are_priced_off_the_legs_home(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    merged = merge(
        load_legs(_legs(pytester, ("tpu", "tpu"))),
        tolerance_for=lambda platform, dtype: Tolerance(),
    )
    assert merged.report["summary"]["kernels_to_rewrite"] == {"cuda": 1, "rocm": 1}


KERNELS = TPU_KERNEL_SUITE.split("@pytest.mark.portable")[0]
"""The library the audited suite tests: its kernel is at the library's lines, which the audit's
numbers count (a kernel at the tests' own lines is priced apart)."""

AUDITED_SUITE = """
import jax
import jax.numpy as jnp
from kernels import scale


def test_scale():
    assert jax.jit(scale)(jnp.ones((8, 128))).shape == (8, 128)
"""


def test_the_suite_audit_prices_off_home(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(TPU_HOME)
    pytester.makepyfile(kernels=KERNELS, test_audited=AUDITED_SUITE)
    pytester.syspathinsert()
    result, report = run(pytester, "--jaxport-audit")
    result.assert_outcomes(passed=1)
    assert report["audit"]["summary"]["kernels_to_rewrite"] == {"cuda": 1, "rocm": 1}
    said = " ".join(result.stdout.str().split())
    assert "kernels to rewrite moving off tpu (distinct sites; suite audit): cuda 1, rocm 1" in said


LINEAR_ALGEBRA = """
import jax
import jax.numpy as jnp
import pytest


def spectrum(a):
    return jnp.linalg.eigh(a)[0]


def solve(a, b):
    return jnp.linalg.solve(a, b)


@pytest.mark.portable
def test_linear_algebra(jaxport):
    a = jnp.eye(16) * 3.0 + jnp.ones((16, 16)) * 0.1
    jaxport.check(spectrum, a)
    jaxport.check(solve, a, jnp.ones((16, 4)))
"""


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason="needs libtpu (the tpu compiled level)"
)
def test_the_tpu_runtimes_routines_cost_the_same_nothing_lowered_and_compiled(
    pytester: pytest.Pytester,
) -> None:
    """Issue 55: off tpu, an eigh and a solve were 2 vendor gaps lowered (Eigh,
    LuDecomposition: 10 days) and 4 compiled (EighTpu, LuDecompositionBlock and the two
    InvertDiagBlocks*Triangular: 20 days), though cuda and rocm run them in cuSOLVER and
    hipSOLVER. Both levels price them as what they are: counterparts, no gap."""
    pytester.makepyprojecttoml(TPU_HOME + 'may_differ = "warn"\n')
    pytester.makepyfile(test_linalg=LINEAR_ALGEBRA)
    days = {}
    for level, args in (("lowered", ()), ("compiled", ("--jaxport-compile=tpu",))):
        result, report = run(pytester, *args)
        result.assert_outcomes(passed=1)
        tpu = [c["platforms"]["tpu"] for t in report["tests"] for c in t["checks"]]
        assert {p["compiled"] is not None for p in tpu} == {level == "compiled"}
        rewrite = report["summary"]["rewrite"]
        assert [i for target in rewrite.values() for i in target["items"]] == []
        assert "vendor-gap" not in result.stdout.str()
        days[level] = {target: estimate["days"] for target, estimate in rewrite.items()}
    assert days["lowered"] == days["compiled"] == {"cuda": 5.0, "rocm": 5.0}  # fixed only
