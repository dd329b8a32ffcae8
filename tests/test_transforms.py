"""Tests of pytest_jaxport._jax.transforms through the fixture.

Transformations (``transforms=("grad", "vmap", "jvp")``): each its own check, through pytester.

Expected counts are derived here from JAX's own lowered text of ``jax.grad``/``jax.vmap``
(``jax.jit(...).trace(...).lower(lowering_platforms=(p,)).as_text()``), not from the plugin.
"""

from __future__ import annotations

import re
import textwrap
from fnmatch import fnmatch

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import esc, run_json, typed

from pytest_jaxport.model.numerics import Tolerance, default_tolerance, gradient_tolerance
from pytest_jaxport.view.viewmodel.build import build_view

PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"
"""

MODELS = """
import jax
import jax.numpy as jnp

DIMS = ("NHWC", "HWIO", "NHWC")


def conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DIMS)


def my_kernel(x):
    return jax.ffi.ffi_call("my_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def kernel_on_cuda(x):
    # A custom kernel only on cuda (no VJP, no batching rule); portable jnp elsewhere.
    return jax.lax.platform_dependent(x, cuda=my_kernel, default=jnp.tanh)


def scaled_sin(x, *, scale):
    return jnp.sin(x) * scale
"""


def conv(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject=PROJECT)
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    return pytester


def checks_of(report: dict, test: str) -> dict[str, dict]:
    (entry,) = (t for t in report["tests"] if t["nodeid"].endswith(f"::{test}"))
    return {c["name"]: c for c in entry["checks"]}


def lowered_convolutions(fn, *args) -> dict[str, int]:  # type: ignore[no-untyped-def]
    traced = jax.jit(fn).trace(*args)
    return {
        p: traced.lower(lowering_platforms=(p,)).as_text().count("stablehlo.convolution")
        for p in ("cuda", "rocm")
    }


@pytest.mark.slow
def test_conv_gradient_counts_more_cudnn_dispatches_than_forward(project: pytest.Pytester) -> None:
    x, w = jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 4))
    forward = lowered_convolutions(conv, x, w)
    backward = lowered_convolutions(jax.grad(lambda x, w: conv(x, w).sum(), argnums=(0, 1)), x, w)
    batched = lowered_convolutions(jax.vmap(conv), jnp.stack([x, x]), jnp.stack([w, w]))
    assert forward["cuda"] < backward["cuda"]  # input and weight gradients: two convolutions
    project.makepyfile(
        test_conv="""
        import jax.numpy as jnp
        import pytest
        from models import conv

        @pytest.mark.portable(transforms=["grad", "vmap", "jvp"])
        def test_conv(jaxport):
            out = jaxport.check(conv, jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 4)))
            assert out.shape == (2, 8, 8, 4)
        """
    )
    result, report = run_json(project, "--jaxport-report-details=all")
    result.assert_outcomes(passed=1)
    checks = checks_of(report, "test_conv")
    assert list(checks) == ["conv", "conv[grad]", "conv[vmap]", "conv[jvp]"]
    for name, expected in (("conv", forward), ("conv[grad]", backward), ("conv[vmap]", batched)):
        cuda = checks[name]["platforms"]["cuda"]["lowered"]["libraries"]
        rocm = checks[name]["platforms"]["rocm"]["lowered"]["libraries"]
        assert (cuda, rocm) == ({"cudnn": expected["cuda"]}, {"miopen": expected["rocm"]}), name
    for name, check in checks.items():
        assert check["variant_of"] == (None if name == "conv" else "conv")
        assert check["transform"] == (None if name == "conv" else name[5:-1])
        assert check["platforms"]["cpu"]["executed"]
    [(_, line)] = build_view(typed(report)).transformations
    assert fnmatch(
        line,
        f"'conv': forward: 0 custom, {forward['cuda']} vendor; grad: 0 custom, "
        f"{backward['cuda']} vendor; vmap: 0 custom, {batched['cuda']} vendor; jvp: 0 custom, "
        "* vendor",
    )
    result.stdout.fnmatch_lines(
        [f"  transformations of 'conv': forward: 0 custom, {forward['cuda']}*"]
    )


def test_grad_of_a_custom_call_without_vjp_is_a_finding(project: pytest.Pytester) -> None:
    def kernel_sum(x: jax.Array) -> jax.Array:
        return jax.ffi.ffi_call("my_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x).sum()

    with pytest.raises(ValueError, match="cannot be differentiated"):  # JAX's own verdict
        jax.jit(jax.grad(kernel_sum)).trace(jnp.ones(3))
    project.makepyfile(
        test_ffi="""
        import jax.numpy as jnp
        import pytest
        from models import my_kernel

        @pytest.mark.portable(allow_targets=["my_kernel"], transforms=["grad"])
        def test_reported(jaxport):
            jaxport.check(my_kernel, jnp.ones(3))

        @pytest.mark.portable(must_lower=["cuda"])
        def test_must_lower(jaxport):
            jaxport.check(my_kernel, jnp.ones(3), transforms=("grad",))
        """
    )
    result, report = run_json(
        project,
        "-W",
        "ignore::pytest_jaxport.JaxportWarning",
        "--jaxport-report-details=all",
    )
    result.assert_outcomes(passed=1, failed=1)
    grad = checks_of(report, "test_reported")["my_kernel[grad]"]
    for platform, entry in grad["platforms"].items():
        assert entry["lowered"] is None
        assert entry["error"].startswith(
            "no VJP (reverse-mode differentiation rule) for FFI target my_kernel: "
            f"grad cannot be taken on {platform}"
        )
    result.stdout.fnmatch_lines(
        [
            esc(
                "cuda: fails to lower (must_lower = [cuda], set in test_ffi.py::test_must_lower); "
                "check 'my_kernel[grad]', lowered"
            ),
            "*no VJP (reverse-mode differentiation rule) for FFI target my_kernel: grad cannot "
            "be taken on cuda*",
            "*transformations of 'my_kernel': forward: 1 custom, 0 vendor; grad: nothing *",
        ]
    )
    assert (
        "test_ffi.py::test_must_lower",
        "'my_kernel': forward: 1 custom, 0 vendor; grad: nothing lowered (no VJP (reverse-mode "
        "differentiation rule) for FFI target my_kernel on cpu, cuda, rocm, tpu)",
    ) in build_view(typed(report)).transformations
    assert "Traceback" not in result.stdout.str()


def test_finding_outside_must_lower_warns_and_passes(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_warn="""
        import jax.numpy as jnp
        import pytest
        from models import kernel_on_cuda

        @pytest.mark.portable(must_lower=["cpu", "rocm", "tpu"], transforms=["grad"])
        def test_warns(jaxport):
            jaxport.check(kernel_on_cuda, jnp.ones(3))
        """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            esc(
                "*test_warn.py:7: JaxportWarning: check 'kernel_on_cuda[grad]': cuda: no VJP*"
                "FFI target my_kernel*"
            )
        ]
    )


@pytest.mark.slow
def test_finding_is_per_platform_for_a_platform_dependent_kernel(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_branch="""
        import jax.numpy as jnp
        import pytest
        from models import kernel_on_cuda

        @pytest.mark.portable(must_lower=["cpu", "rocm", "tpu"], transforms=["grad", "vmap"])
        def test_branch(jaxport):
            jaxport.check(kernel_on_cuda, jnp.linspace(-1.0, 1.0, 5))
            grad = jaxport.outputs["kernel_on_cuda[grad]"]["cpu"].leaves
            assert [leaf.path for leaf in grad] == ["['args[0]']"]
            x = jnp.linspace(-1.0, 1.0, 5)
            assert jnp.allclose(grad[0].array, 1 - jnp.tanh(x) ** 2)
        """
    )
    result, report = run_json(
        project,
        "-W",
        "ignore::pytest_jaxport.JaxportWarning",
        "--jaxport-report-details=all",
    )
    result.assert_outcomes(passed=1)
    checks = checks_of(report, "test_branch")
    for transform, rule in (("grad", "VJP"), ("vmap", "batching rule")):
        platforms = checks[f"kernel_on_cuda[{transform}]"]["platforms"]
        failed = {p for p, r in platforms.items() if r["error"]}
        assert failed == {"cuda"}, transform
        assert f"no {rule}" in platforms["cuda"]["error"]
        assert f"{transform} cannot be taken on cuda" in platforms["cuda"]["error"]
        assert platforms["cpu"]["executed"]
        assert platforms["rocm"]["lowered"]["custom"] == 0
    result.stdout.fnmatch_lines(["  transformations of 'kernel_on_cuda': forward: 1 custom, *"])
    [(_, line)] = build_view(typed(report)).transformations
    assert line == (
        "'kernel_on_cuda': forward: 1 custom, 0 vendor; grad: 0 custom, 0 vendor (no VJP "
        "(reverse-mode differentiation rule) for FFI target my_kernel on cuda); vmap: 0 custom, "
        "0 vendor (no batching rule for FFI target my_kernel on cuda)"
    )


def test_vmap_of_a_custom_call_without_batching_rule_is_a_finding(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_vmap="""
        import jax.numpy as jnp
        import pytest
        from models import my_kernel

        @pytest.mark.portable(allow_targets=["my_kernel"])
        def test_vmap(jaxport):
            jaxport.check(my_kernel, jnp.ones(3), transforms=["vmap"])
        """
    )
    result, report = run_json(
        project,
        "-W",
        "ignore::pytest_jaxport.JaxportWarning",
        "--jaxport-report-details=all",
    )
    result.assert_outcomes(passed=1)
    vmap = checks_of(report, "test_vmap")["my_kernel[vmap]"]
    assert vmap["transform"] == "vmap"
    for platform, entry in vmap["platforms"].items():
        assert entry["error"].startswith(
            f"no batching rule for FFI target my_kernel: vmap cannot be taken on {platform}"
        )


@pytest.mark.slow
def test_variant_outputs_kwargs_and_jvp(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_values="""
        import jax.numpy as jnp
        import numpy as np
        import pytest
        from models import scaled_sin

        @pytest.mark.portable(transforms=["grad", "vmap", "jvp"])
        def test_values(jaxport):
            x = jnp.linspace(0.0, 1.0, 4)
            out = jaxport.check(scaled_sin, x, scale=jnp.float32(3.0))
            np.testing.assert_allclose(out, np.sin(x) * 3, rtol=1e-6)
            grad = {l.path: l.array for l in jaxport.outputs["scaled_sin[grad]"]["cpu"].leaves}
            assert set(grad) == {"['args[0]']", "[\\"kwargs['scale']\\"]"}
            np.testing.assert_allclose(grad["['args[0]']"], np.cos(x) * 3, rtol=1e-6)
            np.testing.assert_allclose(grad["[\\"kwargs['scale']\\"]"], np.sin(x).sum(), rtol=1e-6)
            (batched,) = jaxport.outputs["scaled_sin[vmap]"]["cpu"].leaves
            expected = [np.sin(x) * 3, np.sin(x * 0.5 + 0.25) * (3 * 0.5 + 0.25)]
            np.testing.assert_allclose(batched.array, expected, rtol=1e-6)
            (tangent,) = jaxport.outputs["scaled_sin[jvp]"]["cpu"].leaves
            np.testing.assert_allclose(tangent.array, np.cos(x) * 3 + np.sin(x), rtol=1e-6)
        """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1)


def test_transformation_usage_errors_name_the_argument(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_usage="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable
        def test_int_args(jaxport):
            jaxport.check(lambda i, j: i * j, jnp.arange(3), jnp.int8(2), transforms=["grad"])

        @pytest.mark.portable
        def test_bool_output(jaxport):
            jaxport.check(lambda x: x > 0, jnp.ones(3), transforms=["jvp"])

        @pytest.mark.portable
        def test_unknown(jaxport):
            jaxport.check(jnp.sin, jnp.ones(3), transforms=["vamp"])
        """
    )
    result = project.runpytest()
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            esc(
                "*jaxport.check('lambda'): grad needs a floating-point argument to "
                "differentiate with respect to; found none (args[0] is int32, args[1] is int8)*"
            ),
            "*jaxport.check('lambda'): jvp needs a floating-point output to differentiate; "
            "found none (output is bool)*",
            "*jaxport.check('sin') transforms: unknown transformation 'vamp' (did you mean "
            "'vmap'?); known: grad, vmap, jvp",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert "During handling" not in result.stdout.str()


def test_transforms_from_config_marker_and_check_closest_wins(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=PROJECT + 'transforms = ["jvp"]\n')
    pytester.makepyfile(
        test_where="""
        import jax.numpy as jnp
        import pytest

        class TestNested:
            pytestmark = pytest.mark.portable(transforms=["grad"])

            @pytest.mark.portable(transforms=["vmap"])
            def test_marker(self, jaxport):
                jaxport.check(jnp.sin, jnp.ones(3), name="m")

            def test_class(self, jaxport):
                jaxport.check(jnp.sin, jnp.ones(3), name="c")

            def test_check(self, jaxport):
                jaxport.check(jnp.sin, jnp.ones(3), name="k", transforms=())

        @pytest.mark.portable
        def test_project(jaxport):
            jaxport.check(jnp.sin, jnp.ones(3), name="p")
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=4)
    names = sorted(c["name"] for t in report["tests"] for c in t["checks"])
    assert names == ["c", "c[grad]", "k", "m", "m[vmap]", "p", "p[jvp]"]


def test_unknown_transform_in_marker_fails_only_that_test(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_mark="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable(transforms=["grd"])
        def test_typo(jaxport):
            jaxport.check(jnp.sin, jnp.ones(3))

        @pytest.mark.portable(transforms="grad")
        def test_string(jaxport):
            jaxport.check(jnp.sin, jnp.ones(3))

        @pytest.mark.portable(transforms=["grad"])
        def test_fine(jaxport):
            jaxport.check(jnp.sin, jnp.ones(3))
        """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_typo: transforms: unknown transformation 'grd' (did you mean 'grad'?); "
            "known: grad, vmap, jvp",
        ]
    )
    result.stdout.fnmatch_lines(["*test_string: transforms: expected a list of transformations*"])


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('transforms = ["grad", "jvpp"]', "*transforms: unknown transformation 'jvpp' (did you*"),
        ('transforms = "grad"', "*transforms: expected a list of transformations*"),
    ],
)
def test_unknown_transform_in_pyproject_is_a_usage_error(
    pytester: pytest.Pytester, toml: str, expected: str
) -> None:
    pytester.makefile(".toml", pyproject=textwrap.dedent(f"[tool.jaxport]\n{toml}\n"))
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: jaxport: *[[]tool.jaxport[]] {expected}"])


def test_gradient_checks_use_jax_gradient_tolerances() -> None:
    assert gradient_tolerance("float32") == Tolerance(rtol=2e-3, atol=2e-3)
    assert gradient_tolerance("bfloat16") == Tolerance(rtol=1e-1, atol=1e-1)
    assert gradient_tolerance("float16") == Tolerance(rtol=1e-2, atol=1e-2)
    assert gradient_tolerance("float64") == Tolerance(rtol=1e-5, atol=1e-5)
    assert gradient_tolerance("int32") == default_tolerance("int32")


def test_html_report_groups_variants_under_their_function(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_html="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable(transforms=["grad"])
        def test_two(jaxport):
            jaxport.check(jnp.sin, jnp.ones(3), name="f")
            jaxport.check(jnp.cos, jnp.ones(3), name="g")
        """
    )
    result = project.runpytest("--jaxport-report=report.html")
    result.assert_outcomes(passed=1)
    page = (project.path / "report.html").read_text()
    order = re.findall(r"<code>(f|g|f\[grad\]|g\[grad\])</code></th>", page)
    assert order[:4] == ["f", "f[grad]", "g", "g[grad]"]
    assert 'class="checkname variant" title="a transformation of f"' in page


def test_vmap_argument_stacking_is_deterministic() -> None:
    from pytest_jaxport._jax.transforms import transformed

    variant = transformed(
        lambda x, i, b: x, "vmap", (jnp.ones(2), jnp.arange(2), jnp.array([True, False])), {}
    )
    x, i, b = (np.asarray(a) for a in variant.args)
    np.testing.assert_array_equal(x, [[1, 1], [0.75, 0.75]])
    np.testing.assert_array_equal(i, [[0, 1], [1, 2]])
    np.testing.assert_array_equal(b, [[True, False], [False, True]])


@pytest.mark.slow
def test_compiled_level_counts_transformations_too(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=PROJECT + 'compile = ["cpu"]\n')
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_levels="""
        import jax.numpy as jnp
        import pytest
        from models import conv, kernel_on_cuda

        @pytest.mark.portable(transforms=["grad"])
        def test_levels(jaxport):
            jaxport.check(conv, jnp.ones((1, 4, 4, 2)), jnp.ones((3, 3, 2, 2)))
            jaxport.check(kernel_on_cuda, jnp.ones(3))
        """
    )
    result, report = run_json(pytester, "-W", "ignore::pytest_jaxport.JaxportWarning")
    result.assert_outcomes(passed=1)
    checks = checks_of(report, "test_levels")
    for name in ("conv[grad]", "kernel_on_cuda[grad]"):
        cpu = checks[name]["platforms"]["cpu"]
        assert cpu["compiled"] is not None, (name, cpu["compile_error"])
        assert cpu["executed"]
    assert checks["kernel_on_cuda[grad]"]["platforms"]["cuda"]["error"]
