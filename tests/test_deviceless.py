"""Tests of pytest_jaxport._jax.deviceless and model.gpu.

Deviceless CUDA compilation, for real: skipped, with the reason, where the plugin is absent.

Run with the jax CUDA plugin installed at the jaxlib version and ``JAX_PLATFORMS=cpu``;
no GPU needed. The target-loading tests run everywhere.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport._jax import deviceless
from pytest_jaxport._jax.deviceless import capture_target, cuda_plugin_problem, deviceless_compile
from pytest_jaxport.model.census import Census, take_census
from pytest_jaxport.model.classification import Classification, classify
from pytest_jaxport.model.gpu import SHIPPED_GPUS, load_gpu_description
from pytest_jaxport.model.hlo import parse_compiled_hlo


def _compiled(platform: str, op: str, target: str | None) -> Classification:
    return classify(platform, op, target, level="compiled")


def _gpu_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def h100() -> str:
    problem = cuda_plugin_problem()
    if problem is not None:
        pytest.skip(f"deviceless CUDA compilation unavailable: {problem}")
    return load_gpu_description("h100")


def cuda_census(
    fn: Callable[..., Any],
    *args: Any,
    target: str,
    options: dict[str, object] | None = None,
) -> Census:
    text = deviceless_compile(fn, args, {}, target_config=target, compiler_options=options)
    return take_census(parse_compiled_hlo(text), "cuda", level="compiled", classifier=_compiled)


# --- target descriptions (no JAX) --------------------------------------------------------


@pytest.mark.parametrize("name", [*SHIPPED_GPUS, "H100", " A100 "])
def test_shipped_targets_load_by_name_in_any_case(name: str) -> None:
    text = load_gpu_description(name)
    assert "gpu_device_info" in text
    assert 'platform_name: "CUDA"' in text


def test_a_target_loads_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.txtpb"
    path.write_text(load_gpu_description("a100"))
    assert load_gpu_description(str(path)) == load_gpu_description("a100")


def test_an_unknown_target_names_the_value_and_the_shipped_ones() -> None:
    with pytest.raises(ValueError, match=r"'v100'.*a100, h100, h200"):
        load_gpu_description("v100")


def test_a_file_that_is_not_a_target_description_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(ValueError, match="not a text GpuTargetConfigProto"):
        load_gpu_description(str(path))


def test_plugin_problem_is_none_or_one_line_with_the_install_command() -> None:
    problem = cuda_plugin_problem()
    if problem is None:
        return
    version = importlib.metadata.version("jaxlib")
    assert "\n" not in problem
    assert "Traceback" not in problem
    assert f'"jax-cuda12-plugin=={version}" "jax-cuda12-pjrt=={version}"' in problem or (
        "JAX_PLATFORMS=cpu" in problem
    )


# --- deviceless compilation (needs the plugin) ------------------------------------------


@pytest.mark.parametrize("name", SHIPPED_GPUS)
def test_every_shipped_target_compiles_a_matmul_and_a_conv(h100: str, name: str) -> None:
    import jax
    import jax.numpy as jnp

    def model(x: Any, w: Any, a: Any, b: Any) -> Any:
        dims = ("NHWC", "HWIO", "NHWC")
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)
        return y.sum() + (a @ b).sum()

    result = cuda_census(
        model,
        jnp.zeros((8, 32, 32, 16)),
        jax.ShapeDtypeStruct((3, 3, 16, 32), jnp.float32),
        jnp.zeros((256, 256)),
        jnp.zeros((256, 256)),
        target=load_gpu_description(name),
    )
    assert result.libraries() == {"cudnn": 1}
    assert result.custom == 0


def test_conv_is_one_cudnn_dispatch_eigh_one_cusolver(h100: str) -> None:
    import jax
    import jax.numpy as jnp

    def conv(x: Any, w: Any) -> Any:
        dims = ("NHWC", "HWIO", "NHWC")
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)

    conv_census = cuda_census(
        conv, jnp.zeros((8, 32, 32, 16)), jnp.zeros((3, 3, 16, 32)), target=h100
    )
    assert conv_census.libraries() == {"cudnn": 1}
    eigh_census = cuda_census(lambda a: jnp.linalg.eigh(a)[0], jnp.eye(64), target=h100)
    assert eigh_census.libraries() == {"cusolver": 1}


def test_matmul_is_a_triton_gemm_or_cublas_when_triton_gemm_is_off(h100: str) -> None:
    import jax.numpy as jnp

    a = jnp.zeros((256, 256))
    assert cuda_census(lambda x, y: x @ y, a, a, target=h100).vendor == 0
    off = {"xla_gpu_enable_triton_gemm": False}
    cublas = cuda_census(lambda x, y: x @ y, a, a, target=h100, options=off)
    assert cublas.libraries() == {"cublas": 1}


VECTOR_DOTS = {
    # numpyro's build_tree: the kinetic energy of a one-parameter model
    "dot of two tensor<1xf32>": (lambda p, m: jnp_dot(p, m * p), ((1,), (1,))),
    "dot of two vectors": (lambda a, b: jnp_dot(a, b), ((4096,), (4096,))),
    "batched dot of vectors": (lambda a, b: jnp_einsum("cd,cd->c", a, b), ((256, 512),) * 2),
    "row times column": (lambda a, b: a @ b, ((1, 64), (64, 1))),
    "outer product": (lambda a, b: a @ b, ((4096, 1), (1, 4096))),
}


def jnp_dot(a: Any, b: Any) -> Any:
    import jax.numpy as jnp

    return jnp.dot(a, b)


def jnp_einsum(spec: str, a: Any, b: Any) -> Any:
    import jax.numpy as jnp

    return jnp.einsum(spec, a, b)


@pytest.mark.parametrize("case", sorted(VECTOR_DOTS))
def test_a_dot_xla_always_makes_elementwise_is_no_library_call_lowered_or_compiled(
    h100: str, case: str
) -> None:
    """Issue 50, item 7: XLA's GPU compiler turns a dot of two vectors into a multiply and a
    reduce (and one that contracts nothing into a multiply) before any gemm is chosen, with
    Triton gemms on or off: the lowered level counts no cuBLAS call there either."""
    import jax.numpy as jnp

    from pytest_jaxport._jax import lowering, stablehlo, tracing

    fn, shapes = VECTOR_DOTS[case]
    args = [jnp.ones(shape) for shape in shapes]
    for options in (None, {"xla_gpu_enable_triton_gemm": False}):
        assert cuda_census(fn, *args, target=h100, options=options).vendor == 0, options
    traced = tracing.trace(fn, tuple(args), {})
    for platform in ("cuda", "rocm"):
        lowered = take_census(stablehlo.read_program(lowering.lower(traced, platform)), platform)
        assert lowered.vendor == 0, platform
        assert lowered.xla_kinds.get("strength-reduced-dot", 0) >= 1


def test_a_product_of_nothing_compiles_to_no_library_call(h100: str) -> None:
    """Issue 55, item 15: the lowered level counts no gemm for blackjax's ``float32[2,0] @
    float32[0]`` (tests/test_census.py); an H100's compile agrees, Triton gemms on or off."""
    import jax.numpy as jnp

    u, s, y = jnp.ones((2, 0)), jnp.ones((0,)), jnp.ones((2,))
    for options in (None, {"xla_gpu_enable_triton_gemm": False}):
        census = cuda_census(lambda u, s, y: u @ ((s - 1) * (u.T @ y)), u, s, y,
                             target=h100, options=options)  # fmt: skip
        assert census.vendor == 0, (options, census.kernels)


@pytest.mark.slow
def test_fft_is_cufft_and_a_pallas_kernel_is_one_custom_kernel(h100: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    def add(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] + y_ref[...]

    def pallas_add(x: Any, y: Any) -> Any:
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        params = pltriton.CompilerParams()
        return pl.pallas_call(add, out_shape=out, compiler_params=params)(x, y)

    fft = cuda_census(jnp.fft.fft, jnp.zeros(1024, jnp.complex64), target=h100)
    assert fft.libraries() == {"cufft": 1}
    x = jnp.zeros(128)
    pallas = cuda_census(pallas_add, x, x, target=h100)
    assert [(k.name, k.count) for k in pallas.in_layer("custom")] == [("__gpu$xla.gpu.triton", 1)]


def test_platform_dependent_picks_the_pallas_branch_for_cuda_only(h100: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as pltriton

    def add(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] + y_ref[...]

    def kernel(x: Any, y: Any) -> Any:
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        params = pltriton.CompilerParams()
        return pl.pallas_call(add, out_shape=out, compiler_params=params)(x, y)

    def portable_add(x: Any, y: Any) -> Any:
        return jax.lax.platform_dependent(x, y, cuda=kernel, default=jnp.add)

    x = jnp.zeros(128)
    assert cuda_census(portable_add, x, x, target=h100).custom == 1
    cpu_text = jax.jit(portable_add).lower(x, x).compile().as_text()
    cpu = take_census(parse_compiled_hlo(cpu_text), "cpu", level="compiled", classifier=_compiled)
    assert cpu.custom == 0


def test_disabling_binary_libraries_falls_back_to_xla_kernels(h100: str) -> None:
    import jax
    import jax.numpy as jnp

    def conv(x: Any, w: Any) -> Any:
        dims = ("NHWC", "HWIO", "NHWC")
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)

    options = {"xla_gpu_experimental_disable_binary_libraries": True}
    args = (jnp.zeros((8, 32, 32, 16)), jnp.zeros((3, 3, 16, 32)))
    assert cuda_census(conv, *args, target=h100).vendor == 1
    fallback = cuda_census(conv, *args, target=h100, options=options)
    assert fallback.vendor == 0
    assert fallback.xla_ops >= 1


def test_python_scalars_and_keyword_arguments_are_traced(h100: str) -> None:
    import jax.numpy as jnp

    text = deviceless_compile(
        lambda x, scale, *, shift: x * scale + shift,
        (jnp.zeros(8), 2.0),
        {"shift": jnp.ones(8)},
        target_config=h100,
    )
    assert "ENTRY" in text


def test_the_topology_is_built_once_per_description(h100: str) -> None:
    import jax.numpy as jnp

    deviceless_compile(jnp.sin, (jnp.zeros(4),), {}, target_config=h100)
    before = deviceless._topology_device.cache_info()
    deviceless_compile(jnp.cos, (jnp.zeros(4),), {}, target_config=h100)
    after = deviceless._topology_device.cache_info()
    assert (after.misses, after.hits) == (before.misses, before.hits + 1)


@pytest.mark.skipif(_gpu_driver_present(), reason="a CUDA driver is present: capture would work")
def test_capture_without_a_gpu_says_so_in_one_line(h100: str) -> None:
    with pytest.raises(RuntimeError, match="cannot capture a GPU target here") as info:
        capture_target()
    assert "\n" not in str(info.value)


@pytest.mark.skipif(not _gpu_driver_present(), reason="needs a CUDA GPU to describe")
def test_capture_on_a_gpu_returns_a_description_that_compiles() -> None:
    import jax.numpy as jnp

    text = capture_target()
    assert "gpu_device_info" in text
    assert "ENTRY" in deviceless_compile(jnp.sin, (jnp.zeros(4),), {}, target_config=text)


@pytest.mark.slow
@pytest.mark.skipif(_gpu_driver_present(), reason="a CUDA driver is present")
def test_prefer_deviceless_makes_the_plugin_usable_without_jax_platforms(h100: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    code = (
        "from pytest_jaxport._jax import deviceless as d\n"
        "assert d.prefer_deviceless()\n"
        "assert d.cuda_plugin_problem() is None\n"
        "import jax\n"
        "assert {x.platform for x in jax.devices()} == {'cpu'}\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


# --- code that needs cuDNN to be traced ----------------------------------------------------

CUDNN_SUITE = """
import jax
import jax.numpy as jnp
import pytest

def attention(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, implementation="cudnn")

Q = jnp.ones((2, 128, 4, 64), jnp.bfloat16)

@pytest.mark.portable(must_lower=["cpu", "cuda", "rocm", "tpu"])
def test_default(jaxport):
    jaxport.check(attention, Q, Q, Q, transforms=["grad"])

@pytest.mark.portable(must_trace=True)
def test_strict(jaxport):
    jaxport.check(attention, Q, Q, Q)
"""


def _cudnn_trace_error() -> str | None:
    """What JAX itself says when tracing cuDNN attention here (``None``: it traces)."""
    import jax
    import jax.numpy as jnp

    q = jnp.ones((2, 128, 4, 64), jnp.bfloat16)
    try:
        jax.jit(lambda q: jax.nn.dot_product_attention(q, q, q, implementation="cudnn")).trace(q)
    except RuntimeError as e:
        return str(e)
    return None


def test_cudnn_attention_is_counted_where_cudnn_is_installed_else_reported_untraced(
    pytester: pytest.Pytester,
) -> None:
    """JAX asks cuDNN for its version while tracing ``implementation="cudnn"`` attention.
    With the jax CUDA plugin and cuDNN's library installed (no GPU needed) it traces, and its
    cuda census holds the cuDNN kernels; without them the check is reported as not traced
    here, fails no ``must_lower``, and fails only under ``must_trace``."""
    pytester.makepyfile(test_attention=CUDNN_SUITE)
    result = pytester.runpytest("--jaxport-report=report.json", "-v")  # -v: layers in full
    report = json.loads((pytester.path / "report.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in report["tests"]}
    error = _cudnn_trace_error()
    result.stdout.no_fnmatch_line("*Traceback*")
    if error is not None:
        assert "cuDNN" in error
        result.assert_outcomes(passed=1, failed=1)
        for name in ("test_default", "test_strict"):
            [check] = tests[name]["checks"]
            assert check["platforms"] == {}
            assert check["untraced"] == {
                "platform": "cuda", "needs": "cuDNN", "error": f"RuntimeError: {error}"
            }  # fmt: skip
            assert check["note"].startswith("could not be traced here: needs cuDNN")
        assert tests["test_default"]["violations"] == []
        [violation] = tests["test_strict"]["violations"]
        assert (violation["key"], violation["platform"]) == ("must_trace", "cuda")
        result.stdout.fnmatch_lines(
            [
                "cuda: could not be traced here (must_trace = true, set in test_attention.py::"
                "test_strict); check 'attention', needs cuDNN",
            ]
        )
        result.stdout.fnmatch_lines(["*could not be traced here: needs cuDNN*nor its grad*"])
        result.stdout.fnmatch_lines(
            ["*: 0 of 2 checks lower on every configured platform (2 could not*"]
        )
        return
    result.assert_outcomes(passed=1, failed=1)
    checks = {c["name"]: c for c in tests["test_default"]["checks"]}
    kernels = {
        name: [k["name"] for k in check["platforms"]["cuda"]["lowered"]["kernels"]]
        for name, check in checks.items()
    }
    assert kernels == {
        "attention": ["__cudnn$fmhaSoftmax"],
        "attention[grad]": ["__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"],
    }
    # cuDNN attention has no lowering elsewhere: a real portability finding.
    failed = {(v["check"], v["platform"]) for v in tests["test_default"]["violations"]}
    assert failed == {(c, p) for c in checks for p in ("cpu", "rocm", "tpu")}
    assert tests["test_strict"]["violations"] == []
