"""Tests of pytest_jaxport.examine.compiled, cache (the compiled cache) and _jax.deviceless.

The compiled level end to end: ``compile = [...]``, budgets by level, the cache, errors.

Real JAX and real compilation throughout, no mocks. The cuda tests need the jax CUDA plugin
at the jaxlib version and ``JAX_PLATFORMS=cpu`` (no GPU needed) and are skipped, with the
plugin's own reason, elsewhere; the no-plugin tests run only where it is absent.
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from helpers import LIBRARY_WITH_HIDDEN_CALLBACK, built_report, esc

from pytest_jaxport._jax.deviceless import cuda_plugin_problem
from pytest_jaxport.model.census import Census, Kernel
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.report.files import without_timings
from pytest_jaxport.version import requirement
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.markdown import markdown
from pytest_jaxport.view.text import text
from pytest_jaxport.view.viewmodel.details import prediction_gap, what_if_line

PLUGIN_PROBLEM = cuda_plugin_problem()
needs_plugin = pytest.mark.skipif(
    PLUGIN_PROBLEM is not None, reason=f"deviceless CUDA unavailable: {PLUGIN_PROBLEM}"
)
without_plugin = pytest.mark.skipif(
    PLUGIN_PROBLEM is None, reason="the jax CUDA plugin is installed and usable here"
)

MODELS = """
import jax
import jax.numpy as jnp


def conv(x, w):
    dims = ("NHWC", "HWIO", "NHWC")
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)


def eigvals(a):
    return jnp.linalg.eigh(a)[0]


def four_matmuls(a):
    return a @ a + (a * 2.0) @ a + (a + 1.0) @ a + a @ (a - 1.0)
"""

CONV_ARGS = "jnp.ones((8, 32, 32, 16)), jnp.ones((3, 3, 16, 32))"


def make_project(pytester: pytest.Pytester, toml: str, tests: str) -> None:
    pytester.makefile(".toml", pyproject=textwrap.dedent(toml))
    pytester.makepyfile(models=MODELS)
    pytester.makepyfile(test_models=textwrap.dedent(tests))
    pytester.syspathinsert()


def report_of(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / name).read_text())
    return data


def platforms_of(report: dict[str, Any], test: str) -> dict[str, Any]:
    entry = next(t for t in report["tests"] if t["nodeid"].endswith(test))
    result: dict[str, Any] = entry["checks"][0]["platforms"]
    return result


# --- cpu: works everywhere ---------------------------------------------------------------


@pytest.mark.slow
def test_cpu_compiled_census_and_budget_at_the_compiled_level(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["cpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from models import conv, eigvals, four_matmuls

        @pytest.mark.portable(max_library_calls={"lapack": 1})
        def test_eigh_at_count(jaxport):
            jaxport.check(eigvals, jnp.eye(16))

        @pytest.mark.portable(max_library_calls={"lapack": 0})
        def test_eigh_one_under(jaxport):
            jaxport.check(eigvals, jnp.eye(16))

        @pytest.mark.portable
        def test_matmuls(jaxport):
            jaxport.check(four_matmuls, jnp.ones((64, 64)))
        """,
    )
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cpu: 1 lapack call > 0 (max_library_calls.lapack, set in "
            "test_models.py::test_eigh_one_under); check 'eigvals', compiled",
            "*lapack_ssyevd_ffi (lapack) at models.py:11",
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")
    report = report_of(pytester)
    assert report["config"]["compile"] == ["cpu"]
    eigh = platforms_of(report, "test_eigh_at_count")
    assert eigh["cpu"]["compiled"]["level"] == "compiled"
    assert eigh["cpu"]["compiled"]["libraries"] == {"lapack": 1}
    assert eigh["cpu"]["compiled"]["deviceless"] is False
    assert eigh["cpu"]["lowered"]["libraries"] == {"lapack": 1}
    assert eigh["tpu"]["compiled"] is None  # tpu stays at the lowered level
    matmuls = platforms_of(report, "test_matmuls")["cpu"]
    assert matmuls["lowered"]["vendor"] == 0  # lowered: XLA:CPU picks its gemm at compile time
    assert set(matmuls["compiled"]["libraries"]) <= {"ynnpack", "eigen", "onednn"}
    assert matmuls["compiled"]["vendor"] >= 1
    assert report["summary"]["platforms"]["cpu"]["compiled"] == 3
    violation = next(t for t in report["tests"] if t["nodeid"].endswith("one_under"))
    assert violation["violations"][0]["level"] == "compiled"
    # The terminal report says where the lowered prediction and the compiled reality differ.
    pytester.runpytest("--jaxport-report", "--jaxport-report-details=all").stdout.fnmatch_lines(
        ["*cpu: lowered predicted no vendor or custom calls; compiled: *"]
    )


@pytest.mark.slow
def test_compile_platforms_from_the_command_line(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from models import eigvals

        @pytest.mark.portable
        def test_eigh(jaxport):
            jaxport.check(eigvals, jnp.eye(4))
        """,
    )
    pytester.runpytest("--jaxport-report=r.json").assert_outcomes(passed=1)
    assert platforms_of(report_of(pytester), "test_eigh")["cpu"]["compiled"] is None
    result = pytester.runpytest("--jaxport-report=r.json", "--jaxport-compile=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["jaxport: compiled level for cpu; cached in pytest's cache"])
    assert platforms_of(report_of(pytester), "test_eigh")["cpu"]["compiled"]["vendor"] == 1


@pytest.mark.slow
def test_unchanged_suite_is_not_recompiled(pytester: pytest.Pytester) -> None:
    compile_for = '["cpu", "cuda"]' if PLUGIN_PROBLEM is None else '["cpu"]'
    make_project(
        pytester,
        f"""
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = {compile_for}
        """,
        """
        import jax.numpy as jnp
        import pytest
        from models import eigvals, four_matmuls

        @pytest.mark.portable
        def test_eigh(jaxport):
            jaxport.check(eigvals, jnp.eye(8))

        @pytest.mark.portable
        def test_matmuls(jaxport):
            jaxport.check(four_matmuls, jnp.ones((32, 32)))
        """,
    )
    n = 4 if PLUGIN_PROBLEM is None else 2  # (check, compiled platform) pairs
    deviceless = n - 2  # cuda compiles for the census only; cpu reads numerics' executable

    first = pytester.runpytest("--jaxport-report=r.json")
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(
        [
            f"jaxport: compiled cache 0 hits, {n} misses ({deviceless} compiled for the census, "
            "2 read from executables numerics built)"
        ]
    )
    before = report_of(pytester)

    second = pytester.runpytest("--jaxport-report=r.json")
    second.assert_outcomes(passed=2)
    second.stdout.fnmatch_lines(
        [
            f"jaxport: compiled cache {n} hits, 0 misses (0 compiled for the census, "
            "0 read from executables numerics built)"
        ]
    )
    after = report_of(pytester)
    # The cached census is the same census (measured run times differ run to run).
    assert without_timings(after["tests"]) == without_timings(before["tests"])

    for option in ("--jaxport-cache-clear", "--cache-clear"):
        cleared = pytester.runpytest(option)
        cleared.assert_outcomes(passed=2)
        cleared.stdout.fnmatch_lines([f"jaxport: compiled cache 0 hits, {n} misses *"])

    off = pytester.runpytest("-p", "no:cacheprovider")
    off.assert_outcomes(passed=2)
    off.stdout.fnmatch_lines(
        [f"jaxport: compiled cache off (cacheprovider disabled): {deviceless} compiled *"]
    )


def test_a_compile_error_is_recorded_once_never_raised(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu"]
        compile = ["cpu"]
        """,
        """
        import jax
        import jax.numpy as jnp
        import pytest

        def my_kernel(x):
            out = jax.ShapeDtypeStruct(x.shape, x.dtype)
            return jax.ffi.ffi_call("my_unregistered_kernel", out)(x)

        @pytest.mark.portable(allow_targets=["my_*"])
        def test_ffi(jaxport):
            jaxport.check(my_kernel, jnp.ones((4,)))
        """,
    )
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    # numerics' compile failed; the compiled level records that and does not compile again
    result.stdout.fnmatch_lines(["jaxport: compiled cache 0 hits, 1 misses (0 compiled *"])
    cpu = platforms_of(report_of(pytester), "test_ffi")["cpu"]
    assert cpu["compiled"] is None
    assert "my_unregistered_kernel" in cpu["compile_error"]
    assert cpu["compile_error"] == cpu["execution_error"]
    assert cpu["lowered"]["custom"] == 1  # budgets fall back to the lowered census
    shown = pytester.runpytest("--jaxport-report", "-vv")
    shown.stdout.fnmatch_lines(["*[[]lowered[]]  compile failed: *"])


def test_classify_hook_sees_the_compiled_level(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu"]
        compile = ["cpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from models import four_matmuls

        @pytest.mark.portable(max_custom_calls=0)
        def test_matmuls(jaxport):
            jaxport.check(four_matmuls, jnp.ones((8, 8)))
        """,
    )
    pytester.makeconftest(
        """
        from pytest_jaxport import Classification

        def pytest_jaxport_classify(platform, op, target, level):
            # jaxlib >= 0.10 fuses CPU dots into YNNPACK calls; older jaxlib emits plain dots.
            if level == "compiled" and (op.startswith("hlo.fusion:__ynn") or op == "hlo.dot"):
                return Classification(layer="custom", kind="my-gemm")
            return None
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["cpu: 4 custom calls > 0 (max_custom_calls, set in test_models.py::test_matmuls); "
         "check 'four_matmuls', compiled"]
    )  # fmt: skip


@pytest.mark.slow
def test_cache_counts_travel_from_xdist_workers(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu"]
        compile = ["cpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from models import eigvals, four_matmuls

        @pytest.mark.portable
        def test_eigh(jaxport):
            jaxport.check(eigvals, jnp.eye(8))

        @pytest.mark.portable
        def test_matmuls(jaxport):
            jaxport.check(four_matmuls, jnp.ones((8, 8)))
        """,
    )
    for expected in ("0 hits, 2 misses", "2 hits, 0 misses"):
        result = pytester.runpytest_subprocess("-n", "2", "--jaxport-report=r.json")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines([f"jaxport: compiled cache {expected} *"])
        assert platforms_of(report_of(pytester), "test_eigh")["cpu"]["compiled"]["vendor"] == 1


@pytest.mark.slow
def test_a_changed_source_line_is_a_cache_miss(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu"]
        compile = ["cpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from models import eigvals

        @pytest.mark.portable
        def test_eigh(jaxport):
            jaxport.check(eigvals, jnp.eye(8))
        """,
    )
    pytester.runpytest().stdout.fnmatch_lines(["jaxport: compiled cache 0 hits, 1 misses *"])
    pytester.makepyfile(models="# a new first line moves every source line\n" + MODELS)
    # A fresh process: older JAX keeps the edited module's previous locations in-process.
    result = pytester.runpytest_subprocess("--jaxport-report=r.json")
    result.stdout.fnmatch_lines(["jaxport: compiled cache 0 hits, 1 misses *"])
    kernels = platforms_of(report_of(pytester), "test_eigh")["cpu"]["compiled"]["kernels"]
    assert [k["location"] for k in kernels] == ["models.py:13"]


# --- cuda: deviceless, with the plugin -----------------------------------------------------


@pytest.mark.slow
@needs_plugin
def test_deviceless_cuda_conv_is_one_cudnn_and_eigh_one_cusolver(
    pytester: pytest.Pytester,
) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = ["cuda"]
        target = "h100"
        """,
        f"""
        import jax.numpy as jnp
        import pytest
        from models import conv, eigvals

        @pytest.mark.portable(max_library_calls={{"cudnn": 1}})
        def test_conv_at_count(jaxport):
            jaxport.check(conv, {CONV_ARGS})

        @pytest.mark.portable(max_library_calls={{"cudnn": 0}})
        def test_conv_one_under(jaxport):
            jaxport.check(conv, {CONV_ARGS})

        @pytest.mark.portable(max_library_calls={{"cusolver": 1}})
        def test_eigh_at_count(jaxport):
            jaxport.check(eigvals, jnp.eye(64))

        @pytest.mark.portable(max_library_calls={{"cusolver": 0}})
        def test_eigh_one_under(jaxport):
            jaxport.check(eigvals, jnp.eye(64))
        """,
    )
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "cuda: 1 cudnn call > 0 (max_library_calls.cudnn, set in "
            "test_models.py::test_conv_one_under); check 'conv', compiled",
            "*__cudnn$convForward (cudnn) at models.py:7",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "cuda: 1 cusolver call > 0 (max_library_calls.cusolver, set in "
            "test_models.py::test_eigh_one_under); check 'eigvals', compiled",
            "*cusolver_syevd_ffi (cusolver) at models.py:11",
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")
    report = report_of(pytester)
    conv = platforms_of(report, "test_conv_at_count")["cuda"]
    assert conv["compiled"]["libraries"] == {"cudnn": 1}
    assert (conv["compiled"]["deviceless"], conv["compiled"]["target"]) == (True, "h100")
    assert conv["lowered"]["libraries"] == {"cudnn": 1}
    eigh = platforms_of(report, "test_eigh_at_count")["cuda"]
    assert eigh["compiled"]["libraries"] == {"cusolver": 1}
    assert platforms_of(report, "test_eigh_at_count")["cpu"]["compiled"] is None
    assert report["config"]["target"] == "h100"
    # The deviceless caveat is stated once.
    shown = pytester.runpytest("--jaxport-report", "-vv").stdout.str()
    assert shown.count("deviceless compilation does not autotune") == 1


@pytest.mark.slow
@needs_plugin
def test_deviceless_matmuls_show_prediction_versus_compiled(pytester: pytest.Pytester) -> None:
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = ["cuda"]
        target = "a100"
        what_if_no_vendor = true
        """,
        f"""
        import jax.numpy as jnp
        import pytest
        from models import conv, four_matmuls

        @pytest.mark.portable
        def test_matmuls(jaxport):
            jaxport.check(four_matmuls, jnp.ones((256, 256)))

        @pytest.mark.portable
        def test_conv(jaxport):
            jaxport.check(conv, {CONV_ARGS})
        """,
    )
    result = pytester.runpytest("--jaxport-report=r.md")
    result.assert_outcomes(passed=2)
    md = (pytester.path / "r.md").read_text()
    assert "cuda: lowered predicted cublas 4; compiled: " in md
    assert re.search(r"cuda: with no vendor libraries: cudnn 1 -> XLA's own kernels only", md)
    assert "(compiled deviceless a100) |" in md  # the check's cuda cell names its level
    assert "does not autotune" in md


@pytest.mark.slow
@needs_plugin
def test_deviceless_cuda_compiles_a_sharded_program_for_as_many_gpus(
    pytester: pytest.Pytester,
) -> None:
    """A jit over a Mesh of host devices (data parallel) and a shard_map: traced on this
    machine's devices, compiled for four described GPUs. XLA's GPU pipeline combines the
    partitioner's six gradient all-reduces and the psum into fewer NCCL calls."""
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = ["cuda"]
        """,
        """
        import jax, jax.numpy as jnp, numpy as np, pytest
        from jax import lax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        def loss(params, x):
            h = x
            for w, b in params:
                h = jnp.tanh(h @ w + b)
            return jnp.mean(h ** 2)

        def step(params, x):
            mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
            total = jax.shard_map(lambda v: lax.psum(v, "data"), mesh=mesh,
                                  in_specs=P("data"), out_specs=P())(x)
            grads = jax.grad(loss)(params, x)
            return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), total

        @pytest.mark.portable
        def test_step(jaxport):
            mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
            replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
            params = [(jax.device_put(np.eye(8, dtype=np.float32), replicated),
                       jax.device_put(np.zeros(8, np.float32), replicated)) for _ in range(3)]
            jaxport.check(step, params, jax.device_put(np.ones((16, 8), np.float32), batch))
        """,
    )
    result = pytester.runpytest("--jaxport-report=r.json", "--jaxport-report-details=all")
    result.assert_outcomes(passed=1)
    cuda = platforms_of(report_of(pytester), "test_step")["cuda"]
    assert cuda["compile_error"] is None
    assert cuda["compiled"]["deviceless"] is True
    lowered, compiled = cuda["lowered"]["collectives"], cuda["compiled"]["collectives"]
    assert (lowered["all-reduce"]["count"], lowered["all-reduce"]["inserted"]) == (7, 6)
    assert 1 <= compiled["all-reduce"]["count"] < 7
    assert "inserted" not in compiled["all-reduce"]
    assert compiled["all-reduce"]["library"] == "nccl"
    assert cuda["compiled"]["libraries"]["nccl"] == compiled["all-reduce"]["count"]
    result.stdout.fnmatch_lines(["*cuda: collectives (nccl): all-reduce 7 (6 inserted*compiled*"])
    # The suite's collectives by kind: cuda's are the compiled program's, and say so.
    result.stdout.fnmatch_lines(
        [
            f"  cuda (compiled): all-reduce {compiled['all-reduce']['count']}",
            "  run by: *nccl on cuda*",
        ]
    )


@needs_plugin
def test_an_unknown_target_lists_the_shipped_ones(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject='[tool.jaxport]\ncompile = ["cuda"]\ntarget = "v100"\n')
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [esc("ERROR: jaxport: pyproject.toml: [tool.jaxport] target: expected a shipped GPU "
             "description (a100, h100, h200) or the path of a text GpuTargetConfigProto, "
             "found string 'v100' (no such file)")]
    )  # fmt: skip


@needs_plugin
def test_a_target_file_next_to_pyproject(pytester: pytest.Pytester) -> None:
    from pytest_jaxport.model.gpu import load_gpu_description

    (pytester.path / "gpus").mkdir()
    (pytester.path / "gpus" / "mine.txtpb").write_text(load_gpu_description("h200"))
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = ["cuda"]
        target = "gpus/mine.txtpb"
        """,
        """
        import jax.numpy as jnp
        import pytest
        from models import eigvals

        @pytest.mark.portable
        def test_eigh(jaxport):
            jaxport.check(eigvals, jnp.eye(8))
        """,
    )
    pytester.runpytest("--jaxport-report=r.json").assert_outcomes(passed=1)
    cuda = platforms_of(report_of(pytester), "test_eigh")["cuda"]["compiled"]
    assert cuda["target"] == str((pytester.path / "gpus" / "mine.txtpb").resolve())


# --- cuda without the plugin: one clear usage error -----------------------------------------


@without_plugin
@pytest.mark.parametrize("how", ["pyproject", "cli"])
def test_compile_cuda_without_the_plugin_is_one_usage_error(
    pytester: pytest.Pytester, how: str
) -> None:
    from importlib.metadata import version

    toml = '[tool.jaxport]\ncompile = ["cuda"]\n' if how == "pyproject" else "[tool.jaxport]\n"
    pytester.makefile(".toml", pyproject=toml)
    pytester.makepyfile(test_x="def test_x(): pass")
    args = ["--jaxport-compile=cuda"] if how == "cli" else []
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    jaxlib = version("jaxlib")
    origin = "--jaxport-compile" if how == "cli" else esc("pyproject.toml: [tool.jaxport] compile")
    result.stderr.fnmatch_lines(
        [
            f"ERROR: jaxport: {origin} lists cuda, but *"
            + esc(f'pip install "{requirement("cuda")}" installs it*')
            + f'"jax-cuda12-plugin=={jaxlib}" "jax-cuda12-pjrt=={jaxlib}"*'
        ]
    )
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert len([line for line in result.stderr.lines if line.startswith("ERROR")]) == 1


# --- configuration errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "args", "expected"),
    [
        ('compile = "cpu"', (), "*compile: expected a list of platforms (from cpu, cuda, tpu), "
         "found string 'cpu'"),
        ('compile = ["rocm"]', (), "*compile: expected platforms from cpu, cuda, tpu, found "
         "string 'rocm' (rocm and oneapi are counted at the lowered level only)"),
        ('compile = ["cpu", "cpu"]', (), "*compile: expected each platform at most once*"),
        ('compile = ["cdua"]', (), "*found string 'cdua' (did you mean 'cuda'?)"),
        ("target = 3", (), "*target: expected a shipped GPU description*found int 3"),
        ('target = "v100"', (), "*target: *found string 'v100' (no such file)"),
        ('what_if_no_vendor = "yes"', (), "*what_if_no_vendor: expected a boolean*"),
        # a command-line value: pytest's usage error, validated where the option is declared
        ("", ("--jaxport-compile=gpu",), "*: error: argument --jaxport-compile: expected "
         "platforms from cpu, cuda, tpu, found string 'gpu'*"),
    ],
)  # fmt: skip
def test_malformed_compile_settings_are_usage_errors(
    pytester: pytest.Pytester, toml: str, args: tuple[str, ...], expected: str
) -> None:
    pytester.makefile(".toml", pyproject=f"[tool.jaxport]\n{toml}\n")
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected if args else f"ERROR: jaxport: {esc(expected)}"])
    assert "Traceback" not in result.stderr.str()


def test_help_lists_the_compile_options(pytester: pytest.Pytester) -> None:
    pytester.runpytest("--help").stdout.fnmatch_lines(
        ["*--jaxport-compile=LIST*", "*--jaxport-cache-clear*"]
    )


def _gpu_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(_gpu_driver_present(), reason="a CUDA driver is present: capture would work")
def test_capture_target_without_a_gpu_exits_2_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_jaxport.cli", "capture-target"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("jaxport capture-target: no CUDA GPU here")
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


# --- pure: report and rendering of two levels --------------------------------------------------


def _census(level: str, **libraries: int) -> Census:
    kernels = tuple(
        Kernel(layer="vendor", name=f"{name}_call", kind="gemm", library=name, count=n)
        for name, n in libraries.items()
    )
    return Census(platform="cuda", level=level, kernels=kernels)  # type: ignore[arg-type]


def test_budgets_and_summary_use_the_compiled_census_where_there_is_one() -> None:
    compiled = Census(
        platform="cuda",
        level="compiled",
        kernels=_census("compiled", cublas=1).kernels,
        xla_ops=3,
        xla_kinds={"triton-gemm": 3},
    )
    result = PlatformProbe(
        platform="cuda",
        present=False,
        census=_census("lowered", cublas=4),
        compiled=compiled,
        deviceless=True,
        target="h100",
    )
    assert result.budgeted is compiled
    assert prediction_gap(result) == (
        "cuda: lowered predicted cublas 4; compiled: cublas 1, XLA triton-gemm 3"
    )
    probe = Probe(name="mm", reference="cpu", platforms={"cuda": result})
    back = Probe.from_dict(json.loads(json.dumps(probe.to_dict())))
    assert back == probe
    tests = [{"nodeid": "t.py::t", "outcome": "passed", "checks": [probe.to_dict()]}]
    report = built_report(
        tests,
        config={"platforms": ["cuda"], "reference": "cpu", "compile": ["cuda"], "target": "h100"},
        environment={},
    )
    totals = report.summary.platforms["cuda"]
    assert (totals.vendor, totals.libraries, totals.compiled) == (1, {"cublas": 1}, 1)
    rendered = text(report, DisplayOptions(details="all"))
    assert "[compiled deviceless h100]" in rendered
    assert rendered.count("does not autotune") == 1
    page = markdown(report)
    assert "| 1 / 0 (compiled deviceless h100) |" in page
    assert page.count("does not autotune") == 1


def test_prediction_that_held_is_not_repeated_and_what_if_says_unchanged() -> None:
    same = PlatformProbe(
        platform="cuda",
        present=False,
        census=_census("lowered", cusolver=1),
        compiled=_census("compiled", cusolver=1),
        what_if_no_vendor=_census("compiled", cusolver=1),
    )
    assert prediction_gap(same) is None
    assert what_if_line(same) == "cuda: with no vendor libraries: unchanged (cusolver 1)"


def test_a_compile_error_is_recorded_and_budgets_fall_back_to_lowered() -> None:
    from pytest_jaxport.model.config import Budget, Setting
    from pytest_jaxport.model.evaluation import evaluate

    result = PlatformProbe(
        platform="cuda",
        present=False,
        census=_census("lowered", cublas=2),
        compile_error="XlaRuntimeError: boom",
    )
    probe = Probe(name="mm", reference="cpu", platforms={"cuda": result})
    limit = Setting(value=1, origin="here")
    [violation] = evaluate(probe, lambda p: Budget(platform=p, max_vendor_calls=limit))
    assert violation.level == "lowered"
    assert violation.headline().startswith("cuda: 2 vendor calls > 1 (max_vendor_calls, ")
    assert violation.headline().endswith("; check 'mm', lowered")
    assert "compile failed: XlaRuntimeError: boom" in text(
        built_report(
            [{"nodeid": "t", "outcome": "passed", "checks": [probe.to_dict()]}],
            config={"platforms": ["cuda"], "reference": "cpu"},
            environment={},
        ),
        DisplayOptions(details="all"),
    )


@pytest.mark.slow
@needs_plugin
def test_deviceless_cuda_compiles_programs_with_host_callbacks(pytester: pytest.Pytester) -> None:
    """A compile-only GPU has no client for a callback to call back into: each callback
    compiles as a stand-in, so a program that prints, and a diffrax solve (equinox's
    ``error_if`` checks are callbacks), get a compiled cuda census, not a compile error."""
    pytest.importorskip("diffrax", reason="needs diffrax (pip install diffrax)")
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = ["cuda"]
        """,
        """
        import diffrax, jax, jax.numpy as jnp, pytest

        def printed(x):
            jax.debug.print("norm {}", jnp.linalg.norm(x))
            return jnp.tanh(x @ x.T)

        def solve(y0, rate):
            term = diffrax.ODETerm(lambda t, y, args: -args * y)
            return diffrax.diffeqsolve(
                term, diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.1, y0=y0, args=rate,
                stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5),
            ).ys

        @pytest.mark.portable
        def test_printed(jaxport):
            jaxport.check(printed, jnp.ones((64, 64)))

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(solve, jnp.ones(3), 0.5)
        """,
    )
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=2)
    report = report_of(pytester)
    for test in ("test_printed", "test_solve"):
        cuda = platforms_of(report, test)["cuda"]
        assert cuda["compile_error"] is None, (test, cuda["compile_error"])
        assert cuda["compiled"]["deviceless"] is True
        assert cuda["compiled"]["xla"] >= 1, test
        assert cuda["lowered"]["meta"] >= 1, test  # the callbacks, counted where they lower
    # The 64x64 matmul is still there after compiling (a GEMM: cuBLAS or XLA's Triton).
    printed = platforms_of(report, "test_printed")["cuda"]["compiled"]
    assert printed["libraries"].get("cublas", 0) + printed["xla_kinds"].get("triton-gemm", 0) == 1


@pytest.mark.slow
@needs_plugin
def test_deviceless_cuda_compiles_a_callback_inside_a_librarys_primitive(
    pytester: pytest.Pytester,
) -> None:
    """The callback is bound only when the library's primitive is lowered (lineax's solve
    with equinox's ``error_if``): it compiles as a stand-in all the same, and the compiled
    cuda census has the LU factorisation."""
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = ["cuda"]
        """,
        """
        import jax.numpy as jnp, pytest
        from library import solve

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(solve, jnp.eye(8) * 2, jnp.ones(8))
        """,
    )
    pytester.makepyfile(library=LIBRARY_WITH_HIDDEN_CALLBACK)
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    cuda = platforms_of(report_of(pytester), "test_solve")["cuda"]
    assert cuda["compile_error"] is None, cuda["compile_error"]
    assert cuda["compiled"]["deviceless"] is True
    assert cuda["compiled"]["libraries"].get("cusolver", 0) >= 1, cuda["compiled"]["libraries"]
    assert cuda["lowered"]["meta"] == 1


@pytest.mark.slow
@needs_plugin
def test_deviceless_cuda_compiles_a_sharded_program_with_host_callbacks(
    pytester: pytest.Pytester,
) -> None:
    """A partitioned program compiles from its cuda lowering, whose callbacks are inert
    placeholders that do not compile: it is lowered again with compilable stand-ins."""
    make_project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "cuda"]
        compile = ["cuda"]
        """,
        """
        import jax, jax.numpy as jnp, numpy as np, pytest
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        def step(w, x):
            loss = lambda w: jnp.mean(jnp.tanh(x @ w) ** 2)
            jax.debug.print("loss {}", loss(w))
            return w - 0.1 * jax.grad(loss)(w)

        @pytest.mark.portable
        def test_step(jaxport):
            mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
            w = jax.device_put(np.eye(8, dtype=np.float32), NamedSharding(mesh, P()))
            x = jax.device_put(np.ones((16, 8), np.float32), NamedSharding(mesh, P("data")))
            jaxport.check(step, w, x)
        """,
    )
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    cuda = platforms_of(report_of(pytester), "test_step")["cuda"]
    assert cuda["compile_error"] is None
    assert cuda["compiled"]["deviceless"] is True
    assert cuda["lowered"]["meta"] == 1  # the print, where the program lowers
    assert cuda["compiled"]["collectives"]["all-reduce"]["library"] == "nccl"
