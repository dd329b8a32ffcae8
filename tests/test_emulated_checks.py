"""Tests of pytest_jaxport.fixture's emulation (_jax.emulate) through pytest.

Emulated platforms through pytest (issue 24): a check run on the CPU as an absent platform
would compute it, compared with the reference like a present platform, labelled
``tpu (emulated on cpu)`` in every format, saved and merged across CI legs.

Real pytest runs through ``pytester``, real JAX: the wrong kernels below are real Pallas
kernels behind correct ``jnp`` fallbacks, so every check passes on a CPU until the kernel
that ships to the TPU or GPU is run in its interpret mode. The precision case's numbers are
computed here with ``ml_dtypes`` (bfloat16 rounding to nearest even), not by the plugin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from helpers import built_report, esc, run_json, typed

from pytest_jaxport.cli import main
from pytest_jaxport.model.emulation import Emulation, Unemulated
from pytest_jaxport.model.probe import PlatformProbe, Probe, census_from_dict
from pytest_jaxport.report.outputs import load_outputs, save_outputs
from pytest_jaxport.view.html import html
from pytest_jaxport.view.markdown import markdown
from pytest_jaxport.view.text import text
from pytest_jaxport.view.viewmodel.build import build_view

KERNELS = """
import inspect

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _double_rows(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _tpu_double(x, *, block):
    return pl.pallas_call(
        _double_rows,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), block)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(),
    )(x)


def doubled(x):
    # The TPU kernel reads the other row block (an off-by-one block index); cpu runs jnp.
    return lax.platform_dependent(
        x, tpu=lambda x: _tpu_double(x, block=lambda i: (1 - i, 0)), default=lambda x: x * 2.0
    )


def reads_past_the_end(x):
    return lax.platform_dependent(
        x, tpu=lambda x: _tpu_double(x, block=lambda i: (i + 1, 0)), default=lambda x: x * 2.0
    )


def _off_by_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def gpu_doubled(x):
    # A wrong Mosaic GPU kernel (plgpu.kernel) behind a correct fallback.
    from jax.experimental.pallas import mosaic_gpu as plgpu

    out = "out_type" if "out_type" in inspect.signature(plgpu.kernel).parameters else "out_shape"
    kernel = plgpu.kernel(_off_by_one, **{out: jax.ShapeDtypeStruct(x.shape, x.dtype)})
    return lax.platform_dependent(x, cuda=lambda x: kernel(x), default=lambda x: x * 2.0)


def project(x, w):
    return x @ w


def project_highest(x, w):
    return jnp.matmul(x, w, precision="highest")
"""

KERNEL_LINE = "        _double_rows,"
"""The line of ``pl.pallas_call(`` in KERNELS: where the kernel is called (its site)."""

DOUBLED_TEST = """
import jax.numpy as jnp
import pytest
from kernels import doubled

@pytest.mark.portable
def test_doubled(jaxport):
    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    out = jaxport.check(doubled, x)
    assert (out == 2 * x).all()   # cpu's outputs: the fallback is right
"""

# Exact in float32. bfloat16 keeps 8 significant bits: 1 + 2**-8 is halfway between 1 and
# 1 + 2**-7 and rounds to even (1); 1 + 3 * 2**-8 rounds to even upwards (1 + 2**-6).
LHS = [[1 + 2**-8] * 4, [1 + 3 * 2**-8, 1, 1, 1]]

PRECISION_TEST = f"""
import numpy as np
import pytest
from kernels import project, project_highest

LHS = np.array({LHS!r}, np.float32)
RHS = np.ones((4, 2), np.float32)  # two columns: a product on tpu's matrix unit

@pytest.mark.portable
def test_default_precision(jaxport):
    jaxport.check(project, LHS, RHS)

@pytest.mark.portable
def test_highest_precision(jaxport):
    jaxport.check(project_highest, LHS, RHS)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyprojecttoml(
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda", "tpu"]
        """
    )
    pytester.makepyfile(kernels=KERNELS)
    pytester.syspathinsert()
    return pytester


def kernel_site(project: pytest.Pytester) -> str:
    """``kernels.py:N``: the line of the TPU kernel's ``pallas_call``, from the file."""
    lines = (project.path / "kernels.py").read_text().splitlines()
    return f"kernels.py:{lines.index(KERNEL_LINE)}"  # the call opens one line above


def entry(report: dict[str, Any], test: str, platform: str) -> dict[str, Any]:
    (found,) = [t for t in report["tests"] if t["nodeid"].endswith(test)]
    (check,) = found["checks"]
    platforms: dict[str, Any] = check["platforms"]
    return dict(platforms[platform])


def has_gpu_interpret_mode() -> bool:
    """Whether this JAX can interpret Mosaic GPU kernels (jax >= 0.11.1)."""
    try:
        from jax.experimental.pallas import mosaic_gpu as plgpu
    except ImportError:
        return False
    return hasattr(plgpu, "InterpretGPUParams")


# -- hand-written kernels -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_a_wrong_tpu_kernel_passes_without_emulation_and_fails_with_it(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_doubled=DOUBLED_TEST)
    project.runpytest().assert_outcomes(passed=1)

    result, report = run_json(project, "--jaxport-emulate=tpu", "-rf")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "tpu (emulated on cpu): 1 differing leaf (largest abs err 2.0e+03, largest rel err "
            "1.0e+03), "
            "expected to match cpu (numerics, tolerance from *); check 'doubled', emulated",
            # row 0 of the output doubled from row 8 (2 * 8 * 128) instead of from itself (0)
            "*<root>: 2048 of 2048 elements differ*furthest beyond the tolerance at index (0, 0): "
            "cpu=0.0 "
            "tpu (emulated on cpu)=2048.0, abs err 2.0e+03*",
            "*emulated as tpu would run it:",
            "*platform_dependent at kernels.py:*: took the tpu branch",
            f"*Pallas kernel _double_rows at {kernel_site(project)}: run in TPU interpret mode",
            "to pass: if tpu (emulated on cpu)'s difference is expected, loosen "
            "[[]tool.jaxport.tolerance.tpu.<dtype>[]] or the marker's rtol/atol; else fix the "
            "code for that platform's path",
            "FAILED test_doubled.py::test_doubled - tpu (emulated on cpu)*",
        ]
    )
    tpu = entry(report, "test_doubled", "tpu")
    assert tpu["executed"] is False  # never counted as executed
    assert tpu["numerics"] is None
    assert tpu["emulated"]["kernels"] == [
        {
            "label": "Pallas kernel _double_rows",
            "location": kernel_site(project),
            "interpreter": "TPU interpret mode",
        }
    ]
    assert tpu["emulated_numerics"]["platform"] == "tpu (emulated on cpu)"
    (mismatch,) = tpu["emulated_numerics"]["mismatches"]
    assert (mismatch["index"], mismatch["abs_err"]) == ([0, 0], 2.0 * 8 * 128)
    cuda = entry(report, "test_doubled", "cuda")
    assert "emulated" not in cuda  # not asked for: nothing recorded
    assert report["config"]["emulate"] == ["tpu"]
    assert report["environment"]["executed_platforms"] == ["cpu"]
    assert report["environment"]["emulated_platforms"] == ["tpu"]
    (violation,) = report["tests"][0]["violations"]
    assert (violation["platform"], violation["key"]) == ("tpu", "emulated_numerics")


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_a_kernel_that_fails_in_interpret_mode_fails_the_check_with_its_error(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_oob="""
        import jax.numpy as jnp
        import pytest
        from kernels import reads_past_the_end

        @pytest.mark.portable(emulate=["tpu"])
        def test_oob(jaxport):
            jaxport.check(reads_past_the_end, jnp.zeros((16, 128), jnp.float32))
        """
    )
    result = project.runpytest("--jaxport-emulate=none")  # the marker wins
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "tpu (emulated on cpu): the emulated run failed (emulate, set in "
            "test_oob.py::test_oob); check 'reads_past_the_end', emulated",
            "*Out-of-bounds*",
            f"*Pallas kernel _double_rows at {kernel_site(project)}: run in TPU interpret mode",
            "to pass: fix what the emulated run hit (above), or take tpu out of emulate (set in "
            "test_oob.py::test_oob)",
        ]
    )


@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_wrong_mosaic_gpu_kernel_fails_where_jax_can_interpret_it(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_gpu="""
        import jax.numpy as jnp
        import pytest
        from kernels import gpu_doubled

        @pytest.mark.portable
        def test_gpu(jaxport):
            jaxport.check(gpu_doubled, jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128))
        """
    )
    project.runpytest("-W", "ignore::DeprecationWarning").assert_outcomes(passed=1)
    result, report = run_json(project, "--jaxport-emulate=cuda", "-W", "ignore::DeprecationWarning")
    cuda = entry(report, "test_gpu", "cuda")
    if not has_gpu_interpret_mode():
        # Not a failure: a note naming the release that can run it.
        result.assert_outcomes(passed=1, warnings=1)
        result.stdout.fnmatch_lines(
            [
                "*cuda (emulated on cpu): not run: Pallas kernel *: cannot interpret here: needs "
                "jax >= 0.11.1 (Mosaic GPU interpret mode; installed *)*"
            ]
        )
        assert cuda["emulated_numerics"] is None
        assert all(u["blocks"] for u in cuda["emulated"]["unemulated"])
        return
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "cuda (emulated on cpu): 1 differing leaf (largest abs err 1.0e+00, *), expected to "
            "match cpu*check 'gpu_doubled', emulated",
            "*furthest beyond the tolerance at index (0, 0): cpu=0.0 cuda (emulated on cpu)=1.0, "
            "abs err 1.0e+00*",
            "*Pallas kernel _off_by_one at kernels.py:*: run in Mosaic GPU interpret mode",
        ]
    )
    assert cuda["emulated"]["kernels"][0]["interpreter"] == "Mosaic GPU interpret mode"


DEMO_KERNEL = Path(__file__).resolve().parents[1] / "examples/demo/src/demo_models/pallas_kernel.py"


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_demos_kernel_matches_the_reference_emulated_for_tpu_and_cuda(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda", "rocm", "tpu"]
        emulate = ["tpu", "cuda", "rocm"]
        """
    )
    pytester.makepyfile(pallas_kernel=DEMO_KERNEL.read_text())
    pytester.syspathinsert()
    pytester.makepyfile(
        test_demo="""
        import jax.numpy as jnp
        import pytest
        from pallas_kernel import fused_bias_gelu

        @pytest.mark.portable
        def test_demo(jaxport):
            x = jnp.linspace(-3.0, 3.0, 16 * 128, dtype=jnp.float32).reshape(16, 128)
            jaxport.check(fused_bias_gelu, x, jnp.linspace(-0.5, 0.5, 128, dtype=jnp.float32))
        """
    )
    result, report = run_json(pytester, "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=1)
    tpu = entry(report, "test_demo", "tpu")
    assert tpu["emulated_numerics"]["ok"] is True
    assert [k["interpreter"] for k in tpu["emulated"]["kernels"]] == ["TPU interpret mode"]
    rocm = entry(report, "test_demo", "rocm")  # the portable fallback: nothing interpreted
    assert (rocm["emulated"]["kernels"], rocm["emulated_numerics"]["ok"]) == ([], True)
    cuda = entry(report, "test_demo", "cuda")
    if cuda["emulated_numerics"] is None:  # jax 0.7 to 0.11: Mosaic GPU, not interpretable yet
        assert not has_gpu_interpret_mode()
        result.stdout.fnmatch_lines(["*cuda (emulated on cpu): not run: *needs jax >= 0.11.1*"])
        return
    # jax 0.12: Mosaic GPU in its interpret mode; jax 0.6: the demo's cuda kernel is Triton
    kind = "Mosaic GPU interpret mode" if has_gpu_interpret_mode() else "Pallas interpreter"
    assert [k["interpreter"] for k in cuda["emulated"]["kernels"]] == [kind]
    assert cuda["emulated_numerics"]["ok"] is True


# -- default precision -------------------------------------------------------------------------


def bf16(values: Any) -> np.ndarray[Any, Any]:
    """Rounded to bfloat16 by ml_dtypes (round to nearest even), back in float64."""
    return np.asarray(values, np.float64).astype(ml_dtypes.bfloat16).astype(np.float64)


@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_default_precision_fails_on_the_tpu_emulation_and_highest_passes(
    project: pytest.Pytester,
) -> None:
    full = np.asarray(LHS, np.float64) @ np.ones((4, 2))  # float32 exact: what cpu computes
    one_pass = bf16(LHS) @ bf16(np.ones((4, 2)))  # tpu's one bfloat16 pass
    np.testing.assert_array_equal(full, [[4.015625, 4.015625], [4.01171875, 4.01171875]])
    np.testing.assert_array_equal(one_pass, [[4.0, 4.0], [4.015625, 4.015625]])
    project.makepyfile(test_precision=PRECISION_TEST)

    result, report = run_json(project, "--jaxport-emulate=tpu")

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "tpu (emulated on cpu): 1 differing leaf (largest abs err 1.6e-02, largest rel err "
            "3.9e-03), "
            "expected to match cpu*check 'project', emulated",
            "*4 of 4 elements differ*furthest beyond the tolerance at index (0, 0): cpu=4.015625 "
            "tpu (emulated on "
            "cpu)=4.0, abs err 1.6e-02, rel err 3.9e-03*",
            "*dot_general at kernels.py:*: float32 operands rounded to bfloat16 (tpu's default "
            "precision)",
        ]
    )
    tpu = entry(report, "test_default_precision", "tpu")
    (mismatch,) = tpu["emulated_numerics"]["mismatches"]
    worst = np.abs(full - one_pass)
    assert mismatch["index"] == [0, 0]
    assert mismatch["abs_err"] == worst.max() == 2**-6
    assert mismatch["rel_err"] == pytest.approx(2**-6 / 4.015625, rel=1e-12)
    assert tpu["emulated"]["rounded"][0]["format"] == "bfloat16"
    highest = entry(report, "test_highest_precision", "tpu")
    assert highest["emulated"]["rounded"] == []
    assert highest["emulated"]["pinned"] == 1
    assert highest["emulated_numerics"]["ok"] is True
    assert highest["emulated_numerics"]["max_abs_err"] == 0.0


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_emulate_from_pyproject_the_command_line_and_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        emulate = ["tpu"]
        """
    )
    pytester.makepyfile(kernels=KERNELS)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_where=PRECISION_TEST.replace("test_highest_precision", "test_opted_out").replace(
            "@pytest.mark.portable\ndef test_opted_out",
            "@pytest.mark.portable(emulate=[])\ndef test_opted_out",
        )
    )
    result = pytester.runpytest()  # pyproject: the default-precision check fails
    result.assert_outcomes(passed=1, failed=1)
    lines = result.stdout.lines
    end = next(i for i, line in enumerate(lines) if line.startswith("rootdir:"))
    header = " ".join(line.strip() for line in lines[:end])  # wrapped at 100
    assert (
        "jaxport: emulating tpu (bfloat16 dots; bounds measured on TPU v5 lite) on cpu where "
        "absent (emulate, set in pyproject.toml [tool.jaxport])" in header
    )
    pytester.runpytest("--jaxport-emulate=none").assert_outcomes(passed=2)
    # A leg that narrows the platforms emulates only what it still lowers for.
    narrowed = pytester.runpytest("--jaxport-platforms=cpu")
    narrowed.assert_outcomes(passed=2)
    narrowed.stdout.no_fnmatch_line("jaxport: emulating*")


TOLERANCE_TEST = f"""
import numpy as np
import pytest
from kernels import project

LHS = np.array({LHS!r}, np.float32)
RHS = np.ones((4, 2), np.float32)  # two columns: a product on tpu's matrix unit

@pytest.mark.portable
def test_project(jaxport):
    jaxport.check(project, LHS, RHS)

@pytest.mark.portable
def test_project_again(jaxport):
    jaxport.check(project, LHS, RHS)

@pytest.mark.portable(rtol=1e-4, atol=1e-4)
def test_marker(jaxport):
    jaxport.check(project, LHS, RHS)
"""


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_a_failure_names_the_tolerance_key_that_applied(pytester: pytest.Pytester) -> None:
    """The failure, the problems line and the JSON name the table, the marker or the default
    whose rtol/atol the emulation missed (issue 39: not "[tool.jaxport.tolerance] or the
    dtype defaults" whatever was set)."""
    pytester.makepyfile(kernels=KERNELS, test_tolerance=TOLERANCE_TEST)
    pytester.syspathinsert()
    config = """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        emulate = ["tpu"]

        [tool.jaxport.tolerance.{table}]
        rtol = 1e-7
        atol = 1e-7
        """
    marker = "@pytest.mark.portable on test_tolerance.py::test_marker"
    for table in ("float32", "tpu.float32"):
        pytester.makepyprojecttoml(config.format(table=table))
        origin = f"pyproject.toml [tool.jaxport.tolerance.{table}]"

        result, report = run_json(pytester, "--jaxport-report")

        result.assert_outcomes(failed=3)
        result.stdout.fnmatch_lines(
            [
                esc(f"tpu (emulated on cpu): 1 differing leaf (largest abs err 1.6e-02, largest "
                    f"rel err 3.9e-03), expected to match cpu (numerics, tolerance from {origin}); "
                    "check "
                    "'project', emulated"),
                "*<root>: 4 of 4 elements differ beyond rtol=1e-07, atol=1e-07 (float32)*",
                esc(f"tpu (emulated on cpu): 1 differing leaf (largest abs err 1.6e-02, largest "
                    f"rel err 3.9e-03), expected to match cpu (numerics, tolerance from {marker}); "
                    "check "
                    "'project', emulated"),
                "*<root>: 4 of 4 elements differ beyond rtol=0.0001, atol=0.0001 (float32)*",
            ]
        )  # fmt: skip
        problems = " ".join(line.strip() for line in result.stdout.lines)  # wrapped at 100
        assert (
            "tpu: numerics differ (emulated on cpu) — 3 checks in 3 tests (beyond the tolerance "
            f"from {origin}; 1 other setting: the test fails)" in problems
        )
        origins = {t["nodeid"]: [v["origin"] for v in t["violations"]] for t in report["tests"]}
        assert origins == {
            "test_tolerance.py::test_marker": [marker],
            "test_tolerance.py::test_project": [origin],
            "test_tolerance.py::test_project_again": [origin],
        }
        (mismatch,) = entry(report, "test_project", "tpu")["emulated_numerics"]["mismatches"]
        assert mismatch["tolerance"] == {"rtol": 1e-7, "atol": 1e-7, "origin": origin}
        assert f"beyond the tolerance from {origin}" in markdown(typed(report))


# -- every format -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_every_format_labels_the_emulation(project: pytest.Pytester, tmp_path: Path) -> None:
    project.makepyfile(test_doubled=DOUBLED_TEST)
    result, report = run_json(project, "--jaxport-emulate=tpu", "--junitxml=out.xml", "-v")
    result.stdout.fnmatch_lines(
        [
            "*tpu (emulated on cpu)  numerics: mismatch (1 leaf differs)",
            "emulated on cpu (emulate): tpu 1 check: 1 mismatch",
        ]
    )
    xml = (project.path / "out.xml").read_text()
    assert '<property name="jaxport.doubled.tpu.emulated" value="mismatch"' in xml
    md = markdown(typed(report))
    assert "| tpu (emulated on cpu) | 1 | 0 | 0 | 1 | 0 | 0 |" in md
    assert "emulated: mismatch" in md
    page = html(typed(report))
    assert "emulated: mismatch" in page
    assert "tpu (emulated on cpu)" in page
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert main(["show", str(path), "-v"]) == 0


# -- configuration errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("--jaxport-emulate=tpx",
         "*--jaxport-emulate: expected platforms from cuda, rocm, tpu, oneapi, found string 'tpx' "
         "(did you mean 'tpu'?)"),
        ("--jaxport-emulate=cpu",
         "*--jaxport-emulate: expected platforms from cuda, rocm, tpu, oneapi, found string 'cpu' "
         "(cpu is executed, never emulated)"),
        ("--jaxport-emulate=rocm",
         "*--jaxport-emulate: expected platforms among the platforms checks lower for (cpu, "
         "cuda, tpu), found 'rocm'*"),
    ],
)  # fmt: skip
def test_a_wrong_emulate_option_is_a_usage_error(
    project: pytest.Pytester, option: str, said: str
) -> None:
    project.makepyfile(test_x="def test_x(): pass")
    result = project.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])


def test_a_wrong_emulate_in_pyproject_names_the_file_and_key(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        emulate = ["tpu"]
        """
    )
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            esc(
                "*pyproject.toml: [tool.jaxport] emulate: expected platforms among the platforms "
                "checks lower for (cpu, cuda), found 'tpu'; add it to platforms, or leave it out "
                "of emulate"
            )
        ]
    )


def test_a_wrong_emulate_in_a_marker_fails_that_test(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_marks="""
        import pytest

        @pytest.mark.portable(emulate=["tpx"])
        def test_typo(jaxport):
            pass

        @pytest.mark.portable(platforms=["cpu", "cuda"], emulate=["tpu"])
        def test_not_lowered(jaxport):
            pass
        """
    )
    result = project.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.portable on test_marks.py::test_typo: emulate: expected platforms "
            "from cuda, rocm, tpu, oneapi, found string 'tpx' (did you mean 'tpu'?)",
            "*@pytest.mark.portable on test_marks.py::test_not_lowered: emulate: expected "
            "platforms among the platforms checks lower for (cpu, cuda), found 'tpu'*",
        ]
    )


# -- the cost of emulation off ------------------------------------------------------------------


@pytest.mark.slow
def test_emulation_off_never_imports_the_engine(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_imports="""
        import sys
        import jax.numpy as jnp
        import pytest
        from kernels import project

        @pytest.mark.portable
        def test_imports(jaxport):
            jaxport.check(project, jnp.ones((2, 2)), jnp.ones((2, 1)))
            with open("imported.txt", "w") as f:
                f.write(str("pytest_jaxport._jax.emulate" in sys.modules))
        """
    )
    # A fresh process: this one imported the engine for other tests.
    project.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (project.path / "imported.txt").read_text() == "False"
    project.runpytest_subprocess("-p", "no:cacheprovider", "--jaxport-emulate=tpu")
    assert (project.path / "imported.txt").read_text() == "True"  # the check can tell


# -- pytest-xdist and the CI matrix -------------------------------------------------------------


def emulations(report: dict[str, Any]) -> dict[str, Any]:
    return {
        test["nodeid"]: {
            p: (e.get("emulated"), e.get("emulated_numerics"))
            for c in test["checks"]
            for p, e in c["platforms"].items()
        }
        for test in report["tests"]
    }


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_xdist_gives_the_same_emulations(project: pytest.Pytester) -> None:
    project.makepyfile(test_precision=PRECISION_TEST, test_doubled=DOUBLED_TEST)
    serial, alone = run_json(project, "--jaxport-emulate=tpu")
    parallel, split = run_json(project, "--jaxport-emulate=tpu", "-n", "2")
    serial.assert_outcomes(passed=1, failed=2)
    parallel.assert_outcomes(passed=1, failed=2)
    assert emulations(split) == emulations(alone)
    assert split["summary"]["violations"] == alone["summary"]["violations"] == 2


@pytest.mark.slow
@pytest.mark.cpu_only("emulates tpu, which must be absent: a present platform is executed")
def test_emulated_outputs_are_saved_merged_and_checked_against_the_hardware(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    project.makepyfile(test_doubled=DOUBLED_TEST)
    # The CPU leg emulates tpu and saves what it computed.
    project.runpytest(
        "--jaxport-emulate=tpu", "--jaxport-save-outputs=cpu-out", "--jaxport-report=cpu.json"
    ).assert_outcomes(failed=1)
    cpu_leg = json.loads((project.path / "cpu.json").read_text())
    tpu = entry(cpu_leg, "test_doubled", "tpu")
    emulated = load_outputs(project.path / tpu["emulated_outputs"])
    assert "outputs" not in tpu  # never saved as executed
    # What a TPU leg with a correct kernel would record: tpu executed, its outputs saved
    # (x * 2), no emulation (--jaxport-emulate is per leg).
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    hardware = type(emulated)(
        structure=emulated.structure,
        leaves=(type(emulated.leaves[0])(path=emulated.leaves[0].path, array=x * 2),),
    )
    tpu_leg = json.loads(json.dumps(cpu_leg))
    tpu_leg["config"].pop("emulate")
    tpu_leg["environment"]["present_platforms"] = ["cpu", "tpu"]
    for test in tpu_leg["tests"]:
        test["violations"] = []
        test["outcome"] = "passed"
        for check in test["checks"]:
            for platform, found in check["platforms"].items():
                for key in ("emulated", "emulated_numerics", "emulated_outputs"):
                    found.pop(key, None)
                found.pop("outputs", None)
                if platform == "tpu":
                    found.update(present=True, executed=True)
                    found["outputs"] = "tpu-out/" + save_outputs(
                        project.path / "tpu-out", test["nodeid"], check["name"], "tpu", hardware
                    )
    (project.path / "tpu.json").write_text(json.dumps(tpu_leg))

    code = main(["merge", str(project.path / "cpu.json"), str(project.path / "tpu.json"),
                 "-o", str(project.path / "all.json")])  # fmt: skip

    assert code == 1  # a drift
    said = capsys.readouterr().out
    assert (
        "test_doubled.py::test_doubled check 'doubled': the emulation of tpu (cpu.json) "
        "disagrees with tpu itself (tpu.json)" in said
    )
    merged = json.loads((project.path / "all.json").read_text())
    tpu = entry(merged, "test_doubled", "tpu")
    assert (tpu["leg"], tpu["executed"], tpu["emulated_leg"]) == ("tpu.json", True, "cpu.json")
    assert tpu["emulated"]["kernels"][0]["label"] == "Pallas kernel _double_rows"
    assert (project.path / tpu["emulated_outputs"]).is_file()
    assert merged["config"]["emulate"] == ["tpu"]
    (violation,) = merged["tests"][0]["violations"]  # the emulation's, from the leg that ran it
    assert (violation["key"], violation["leg"]) == ("emulated_numerics", "cpu.json")
    (drift,) = merged["drifts"]
    assert (drift["platform"], drift["reference"]) == ("tpu (emulated on cpu)", "tpu")


# -- the records and the view, on plain data -------------------------------------------------------


def _probe(name: str, emulation: Emulation, ok: bool | None) -> Probe:
    from pytest_jaxport.model.numerics import Comparison

    numerics = None
    if ok is not None:
        numerics = Comparison(platform=emulation.label, reference="cpu", leaves=1,
                              mismatches=(), max_abs_err=0.0, max_rel_err=0.0)  # fmt: skip
        if not ok:
            numerics = Comparison.from_dict({**numerics.to_dict(), "mismatches": [
                {"path": "", "reason": "tolerance", "message": "<root>: 1 of 4 elements differ"}
            ]})  # fmt: skip
    return Probe(
        name=name,
        reference="cpu",
        platforms={
            "cpu": PlatformProbe(platform="cpu", present=True, executed=True),
            "tpu": PlatformProbe(
                platform="tpu",
                present=False,
                census=census_from_dict("tpu", {"level": "lowered"}),
                emulated=emulation,
                emulated_numerics=numerics,
            ),
        },
    )


def test_the_view_counts_each_emulation_and_notes_what_did_not_run() -> None:
    ran = Emulation(platform="tpu", dot_format="bfloat16")
    blocked = Emulation(platform="tpu", dot_format="bfloat16", unemulated=(Unemulated(
        what="FFI target my_kernel", location="m.py:3", reason="cannot run on cpu",
        blocks=True),))  # fmt: skip
    failed = Emulation(platform="tpu", dot_format="bfloat16", error="IndexError: out of bounds")
    probes = [_probe("a", ran, True), _probe("b", ran, False), _probe("c", blocked, None),
              _probe("d", failed, None), _probe("e", blocked, None)]  # fmt: skip
    for probe in probes:  # the JSON form round-trips; an old entry (no keys) loads unemulated
        assert Probe.from_dict(probe.to_dict()) == probe
    old = probes[0].to_dict()
    for key in ("emulated", "emulated_numerics"):
        del old["platforms"]["tpu"][key]
    assert Probe.from_dict(old).platforms["tpu"].emulated is None
    assert (
        "emulated"
        not in Probe(
            name="x",
            reference="cpu",
            platforms={"tpu": PlatformProbe(platform="tpu", present=False)},
        ).to_dict()["platforms"]["tpu"]
    )
    tests = [{"nodeid": f"t.py::test_{p.name}", "outcome": "passed", "checks": [p.to_dict()],
              "violations": []} for p in probes]  # fmt: skip
    report = built_report(tests, config={"platforms": ["cpu", "tpu"], "reference": "cpu"},
                          environment={"present_platforms": ["cpu"]})  # fmt: skip

    view = build_view(report)

    (row,) = view.emulations
    assert (row.label, row.checks, row.match, row.mismatch, row.failed, row.not_run) == (
        "tpu (emulated on cpu)", 5, 1, 1, 1, 2)  # fmt: skip
    assert row.counts() == "5 checks: 1 match, 1 mismatch, 1 failed, 2 not run"
    cells = [t.checks[0].cells["tpu"] for t in view.tests]
    assert [c.emulated for c in cells] == ["match", "mismatch", "not run", "failed", "not run"]
    assert [c.status for c in cells] == ["good", "bad", "good", "bad", "good"]
    notes = {n.text: n.checks for n in view.notes}
    said = "tpu (emulated on cpu): not run: FFI target my_kernel at m.py:3: cannot run on cpu"
    assert notes[said] == 2
    assert any(n.endswith("not vendor-library algorithms or accumulation order (on tpu bounded "
                          "by the chip's measured errors: a check they may move beyond its "
                          "tolerance may differ)") for n in notes)  # fmt: skip
    assert "emulated on cpu (emulate): tpu 5 checks: 1 match, 1 mismatch, 1 failed, 2 not run" in (
        text(report)
    )
    assert "| tpu (emulated on cpu) | 5 | 1 | 0 | 1 | 1 | 2 |" in markdown(report)
    assert "<b>tpu (emulated on cpu)</b>: 5 checks: 1 match, 1 mismatch" in html(report)
