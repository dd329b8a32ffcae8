"""Tests of pytest_jaxport._jax.adapters on every supported JAX release.

Every supported JAX release: Pallas GPU kernels lowered without a GPU (Mosaic GPU and
Triton), "not lowerable here: needs a GPU" kept apart from "does not lower", the install
hint for a package JAX imports without declaring it, and runs whose warnings are errors.

Each expectation that depends on the release is derived from what this JAX does when asked
directly (``jax.jit(f).trace(x).lower(lowering_platforms=...)``), never from a version table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.resources import files

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from pytest_jaxport._jax import lowering, stablehlo, tracing
from pytest_jaxport._jax.adapters import gpu_description, jax_release
from pytest_jaxport.model.census import take_census

TRITON_DEPRECATED = "ignore:The Pallas Triton backend is deprecated:DeprecationWarning"


def _double(x_ref, o_ref):  # type: ignore[no-untyped-def]
    o_ref[...] = x_ref[...] * 2.0


def triton_double(x: jax.Array) -> jax.Array:
    return pl.pallas_call(
        _double,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltriton.CompilerParams(),
    )(x)


def mosaic_gpu_double(x: jax.Array) -> jax.Array:
    import inspect

    from jax.experimental.pallas import mosaic_gpu as plgpu

    out = "out_type" if "out_type" in inspect.signature(plgpu.kernel).parameters else "out_shape"
    return plgpu.kernel(_double, **{out: jax.ShapeDtypeStruct(x.shape, x.dtype)})(x)


def jax_asks_for_a_gpu(fn, x, platform: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether this JAX, asked directly, refuses to lower ``fn`` for ``platform`` until it
    is told which GPU (Pallas on jax 0.11+)."""
    try:
        jax.jit(fn).trace(x).lower(lowering_platforms=(platform,))
    except RuntimeError as e:
        return "No supported GPU devices found" in str(e)
    return False


def census(fn, x, platform: str):  # type: ignore[no-untyped-def]
    """The census the plugin takes of ``fn`` on ``platform`` (as ``jaxport.check`` does)."""
    program = stablehlo.read_program(lowering.lower(tracing.trace(fn, (x,), {}), platform))
    lowering.refuse_unrunnable(program, platform)
    return take_census(program, platform)


# -- lowering Pallas GPU kernels without a GPU -----------------------------------------------


@pytest.mark.filterwarnings(TRITON_DEPRECATED)
@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_pallas_triton_lowers_for_a_gpu_that_is_not_here(platform: str) -> None:
    x = jnp.ones((8, 128))
    if jax_asks_for_a_gpu(triton_double, x, platform):
        # the release asks: the plugin must be able to describe a GPU here
        assert gpu_description(platform) is not None, jax_release()
    found = census(triton_double, x, platform)
    assert [(k.name, k.kind, k.count) for k in found.in_layer("custom")] == [
        ("__gpu$xla.gpu.triton", "pallas-triton", 1)
    ]
    assert found.kernels[0].location is not None
    assert found.kernels[0].location.file == __file__


@pytest.mark.filterwarnings(TRITON_DEPRECATED)  # rocm: jax 0.12 tries Triton for it
def test_mosaic_gpu_kernel_counts_on_cuda_and_does_not_lower_on_rocm() -> None:
    x = jnp.ones((128, 128))
    text = jax.jit(mosaic_gpu_double).trace(x).lower(lowering_platforms=("cuda",)).as_text()
    kernels = text.count("stablehlo.custom_call @mosaic_gpu_v2")
    assert kernels >= 1  # jax 0.6's plgpu.kernel adds one that allocates the output
    found = census(mosaic_gpu_double, x, "cuda")
    custom = found.in_layer("custom")
    assert {(k.name, k.kind) for k in custom} == {("mosaic_gpu_v2", "pallas-mosaic-gpu")}
    assert sum(k.count for k in custom) == kernels
    assert found.vendor == 0
    # Mosaic GPU has no ROCm backend: a finding about the code, not about this machine, on
    # every release (jax 0.6 to 0.8 lower it for rocm all the same; the plugin refuses).
    with pytest.raises(lowering.LoweringFailure) as failure:
        census(mosaic_gpu_double, x, "rocm")
    from pytest_jaxport._jax.adapters import needs_hardware

    assert needs_hardware(str(failure.value)) is None


# -- "not lowerable here: needs a GPU" ---------------------------------------------------------

KERNEL_SUITE = """
import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def double(x):
    kernel = pl.pallas_call(
        _double,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltriton.CompilerParams(),
    )
    return jax.lax.platform_dependent(x, cuda=kernel, default=lambda x: x * 2.0)


@pytest.mark.portable(must_lower=["cpu", "cuda"], max_custom_calls=1)
def test_double(jaxport):
    assert float(jaxport.check(double, jnp.ones((8, 128)))[0, 0]) == 2.0
"""


def _unknown_gpu_target() -> str:
    """A GPU description of a real GPU JAX's Pallas does not know (so it cannot be described)."""
    h100 = (files("pytest_jaxport") / "gpu_targets" / "h100.txtpb").read_text()
    return h100.replace('"NVIDIA H100 80GB HBM3"', '"NVIDIA GeForce RTX 3090"')


@pytest.mark.slow
@pytest.mark.filterwarnings(TRITON_DEPRECATED)
def test_a_gpu_jax_cannot_be_told_about_is_unknown_not_a_failure(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".txtpb", rtx3090=_unknown_gpu_target())
    pytester.makefile(
        ".toml",
        pyproject="""
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        target = "rtx3090.txtpb"

        [tool.pytest.ini_options]
        filterwarnings = ["ignore:The Pallas Triton backend is deprecated:DeprecationWarning"]
        """,
    )
    pytester.makepyfile(test_kernel=KERNEL_SUITE)
    asks = jax_asks_for_a_gpu(triton_double, jnp.ones((8, 128)), "cuda")

    result = pytester.runpytest_subprocess("--jaxport-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    cuda = report["tests"][0]["checks"][0]["platforms"]["cuda"]
    totals = report["summary"]["platforms"]["cuda"]
    if not asks:  # this release lowers Pallas for cuda without asking which GPU
        assert cuda["lowered"]["custom"] == 1
        assert "needs_hardware" not in cuda
        return
    assert cuda["lowered"] is None
    assert cuda["needs_hardware"] == "GPU"
    assert cuda["error"].startswith(f"not lowerable here on jax {jax_release()}: needs a GPU (")
    assert "No supported GPU devices found" in cuda["error"]
    assert (totals["needs_hardware"], totals["failed_to_lower"]) == (1, 0)
    result.stdout.fnmatch_lines(
        [
            "*JaxportWarning: check 'double': cuda: not lowerable here on jax *: needs a GPU*"
            "budgets for cuda are unverified on this machine*",
            "  cuda: not lowerable here: needs a GPU — 1 check in 1 test (JAX needs the hardware*",
        ]
    )
    # Warnings as errors make the unverified budget a failure, as a strict gate wants.
    strict = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "error::pytest_jaxport.JaxportWarning"
    )
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*needs a GPU*"])


@pytest.mark.slow
@pytest.mark.filterwarnings(TRITON_DEPRECATED)
def test_a_gpu_this_jax_knows_is_described_and_counted(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml",
        pyproject="""
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        target = "a100"

        [tool.pytest.ini_options]
        filterwarnings = ["ignore:The Pallas Triton backend is deprecated:DeprecationWarning"]
        """,
    )
    pytester.makepyfile(test_kernel=KERNEL_SUITE)
    result = pytester.runpytest_subprocess("--jaxport-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    cuda = report["tests"][0]["checks"][0]["platforms"]["cuda"]
    assert cuda["error"] is None
    assert cuda["lowered"]["custom"] == 1
    assert "JaxportWarning" not in result.stdout.str()


@pytest.mark.slow
def test_eig_with_the_cuda_plugin_needs_a_gpu(pytester: pytest.Pytester) -> None:
    """With the CUDA plugin installed (the deviceless leg), JAX's cuda lowering of ``eig``
    asks cuSOLVER for its version: unknown here, not a failure of the code."""
    from pytest_jaxport._jax.deviceless import cuda_plugin_problem

    problem = cuda_plugin_problem()
    if problem is not None:
        pytest.skip(f"needs the CUDA plugin: {problem}")
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(
        test_eig="""
        import jax.numpy as jnp, pytest

        @pytest.mark.portable(must_lower=["cpu", "cuda"])
        def test_eig(jaxport):
            jaxport.check(lambda a: jnp.linalg.eig(a)[0].real, jnp.eye(3))
        """
    )
    result = pytester.runpytest_subprocess("--jaxport-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    cuda = json.loads((pytester.path / "r.json").read_text())["tests"][0]["checks"][0]
    cuda = cuda["platforms"]["cuda"]
    assert cuda["needs_hardware"] == "GPU"
    assert "cusolverGetVersion" in cuda["error"]
    result.stdout.fnmatch_lines(["*its budgets for cuda are unverified on this machine*"])


# -- an optional package JAX imports without declaring it -----------------------------------------

_WITHOUT_ABSL = """
import sys
sys.modules["absl"] = None  # Python's own way to make an import fail: as if not installed
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from pytest_jaxport._jax import lowering, stablehlo, tracing

def double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0

x = jnp.ones((8, 128))
f = lambda x: pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
try:
    lowering.lower(tracing.trace(f, (x,), {}), "cuda")
    print("LOWERED")
except lowering.LoweringFailure as e:
    print("FAILED", e)
"""


@pytest.mark.slow
def test_missing_absl_says_what_to_install() -> None:
    """Pallas on GPU defaults to Mosaic GPU on jax 0.9 and 0.10, which imports absl (a
    dependency of pytest-jaxport; missing after an install without dependencies)."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _WITHOUT_ABSL],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    line = done.stdout.strip().splitlines()[-1]
    if "Cannot lower pallas_call on platform: gpu" not in line:
        pytest.skip(f"jax {jax_release()} lowers Pallas on GPU without absl here: {line}")
    assert line.endswith("a dependency of pytest-jaxport: pip install absl-py]"), line


# -- warnings are errors in the user's configuration ------------------------------------------

STRICT_PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]

[tool.pytest.ini_options]
filterwarnings = ["error"]
"""

STRICT_SUITE = """
import jax
import jax.numpy as jnp
import pytest


def model(a, b):
    x = jnp.linalg.solve(a, b)
    return jnp.fft.irfft(jnp.fft.rfft(jnp.tanh(a @ x), axis=0), n=a.shape[0], axis=0)


@pytest.mark.portable(transforms=["grad"])
def test_model(jaxport):
    a = jnp.eye(8) * 4.0 + 0.1
    assert jaxport.check(model, a, jnp.ones((8, 2))).shape == (8, 2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_filterwarnings_error_in_the_users_config_stays_clean(
    pytester: pytest.Pytester, workers: str
) -> None:
    """Lowering for four platforms, running, profiling (the report asks for the measured
    share) and writing the report raise no warning of the plugin's: on Python 3.12+ reading
    profiler events used to abort the process (nanobind) under warnings-as-errors."""
    pytester.makefile(".toml", pyproject=textwrap.dedent(STRICT_PROJECT))
    pytester.makepyfile(test_strict=STRICT_SUITE)
    result = pytester.runpytest_subprocess("--jaxport-report=r.json", "-n", workers)
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["summary"]["checks"] == 2
    assert "Critical nanobind error" not in result.stderr.str()
