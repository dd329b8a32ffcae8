"""Tests of pytest_jaxport.fixture (a check's isolation), session.writer and the parsers.

Bad inputs, isolation, atomic files and strict runs: nothing crashes, nothing goes green."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_jaxport.model.census import Census, Kernel, SourceLocation
from pytest_jaxport.model.config import ConfigError
from pytest_jaxport.model.marker import parse_marker
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.model.pyproject import parse_project
from pytest_jaxport.report import build as report_build

# -- property tests ---------------------------------------------------------------------------

toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-5, max_value=50),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["cpu", "cuda", "rocm", "tpu", "gpu", "", "float32", "cudnn"]),
)
toml_values = st.recursive(
    toml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["platforms", "reference", "budget", "tolerance", "cpu", "cuda", "tpu",
                 "max_vendor_calls", "max_custom_calls", "max_library_calls", "must_lower",
                 "allow_targets", "float32", "bfloat16", "rtol", "atol", "cudnn", "nccl", "x"]
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["platforms", "reference", "budget", "tolerance", "zz"]),
                       toml_values, max_size=4))  # fmt: skip
def test_config_parser_accepts_or_explains(data: dict[str, Any]) -> None:
    """Any TOML-shaped table either parses or raises ConfigError naming the file."""
    try:
        project = parse_project(data, "pyproject.toml")
    except ConfigError as e:
        message = str(e)
        assert message.startswith("pyproject.toml: ")
        assert "\n" not in message
        return
    for platform in project.platforms:
        budget = project.resolve().budget(platform)
        for setting in (budget.max_vendor_calls, budget.max_custom_calls):
            assert setting is None or (isinstance(setting.value, int) and setting.value >= 0)


@pytest.mark.slow
@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(["max_vendor_calls", "rtol", "platforms", "reference",
                                        "must_lower", "max_library_calls", "typo"]),
                       toml_values, max_size=3))  # fmt: skip
def test_marker_parser_accepts_or_explains(kwargs: dict[str, Any]) -> None:
    try:
        parse_marker((), kwargs, "t.py::t")
    except ConfigError as e:
        assert str(e).startswith("@pytest.mark.portable on t.py::t: ")  # noqa: PT017


locations = st.one_of(
    st.none(),
    st.builds(SourceLocation, file=st.sampled_from(["a.py", "src/m.py", "C:/x y.py"]),
              line=st.integers(min_value=1, max_value=10_000)),
)  # fmt: skip
kernels = st.builds(
    Kernel,
    layer=st.sampled_from(["vendor", "custom", "meta"]),
    name=st.text(min_size=1, max_size=20),
    kind=st.sampled_from(["gemm", "ffi", "pallas-triton"]),
    library=st.one_of(st.none(), st.sampled_from(["cublas", "cudnn"])),
    location=locations,
    count=st.integers(min_value=1, max_value=100),
)
platform_probes = st.builds(
    PlatformProbe,
    platform=st.just("cuda"),
    present=st.booleans(),
    census=st.one_of(
        st.none(),
        st.builds(Census, platform=st.just("cuda"),
                  kernels=st.lists(kernels, max_size=4).map(tuple),
                  xla_ops=st.integers(min_value=0, max_value=10**6)),
    ),
    error=st.one_of(st.none(), st.text(max_size=30)),
    executed=st.booleans(),
)  # fmt: skip


probes = st.builds(
    Probe,
    name=st.text(min_size=1),
    reference=st.just("cpu"),
    platforms=st.dictionaries(st.just("cuda"), platform_probes, max_size=1),
)


@given(probes)
def test_probe_json_round_trip(probe: Probe) -> None:
    assert Probe.from_dict(json.loads(json.dumps(probe.to_dict()))) == probe


# -- check() inputs, end to end ----------------------------------------------------------------

EDGE_CASES = """
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest


def identity_plus(x):
    return x + x


@pytest.mark.portable
@pytest.mark.parametrize(
    "value",
    [
        np.zeros((0, 3), np.float32),
        np.float32(3.0),
        np.array([1.0, np.nan, np.inf, -np.inf], np.float32),
        np.array([1 + 2j, np.nan], np.complex64),
        np.array([True, False]),
        np.array([1, -2], np.int8),
        np.ones(3, ml_dtypes.bfloat16),
        np.ones(3, ml_dtypes.float8_e4m3fn),
        5,
        2.5,
    ],
    ids=["empty", "scalar", "nonfinite", "complex", "bool", "int8", "bf16", "f8", "int", "float"],
)
def test_dtypes(jaxport, value):
    out = jaxport.check(identity_plus, value)
    np.testing.assert_array_equal(np.asarray(out, dtype=np.asarray(out).dtype),
                                  np.asarray(value) + np.asarray(value))


@pytest.mark.portable
def test_raises_while_tracing(jaxport):
    def broken(x):
        raise ValueError("model bug")
    jaxport.check(broken, jnp.ones(2))


@pytest.mark.portable
def test_python_control_flow_on_tracer(jaxport):
    def branchy(x):
        if x.sum() > 0:
            return x
        return -x
    jaxport.check(branchy, jnp.ones(2))


@pytest.mark.portable
def test_non_array_output(jaxport):
    jaxport.check(lambda x: "text", jnp.ones(2))


@pytest.mark.portable
def test_after_failures_still_fine(jaxport):
    assert jaxport.check(identity_plus, jnp.ones(2)).shape == (2,)
"""


@pytest.mark.slow
def test_check_edge_cases_are_isolated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_edges=EDGE_CASES)
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=11, failed=3)
    result.stdout.fnmatch_lines(["*ValueError: model bug*"])
    result.stdout.fnmatch_lines(["*TracerBoolConversionError*"])
    result.stdout.fnmatch_lines(["*is not a valid JAX type*"])
    report = json.loads((pytester.path / "r.json").read_text())
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in report["tests"]}
    assert outcomes["test_after_failures_still_fine"] == "passed"
    assert outcomes["test_raises_while_tracing"] == "failed"
    assert sum(1 for o in outcomes.values() if o == "passed") == 11


def test_one_platform_failing_to_lower_keeps_the_others(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_eig="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable
        def test_eig(jaxport):
            jaxport.check(lambda a: jnp.linalg.eig(a)[0].real, jnp.eye(3))
        """
    )
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    platforms = json.loads((pytester.path / "r.json").read_text())["tests"][0]["checks"][0][
        "platforms"
    ]
    assert platforms["tpu"]["lowered"] is None
    assert platforms["tpu"]["error"].startswith("NotImplementedError")
    # rocm, not cuda: with the jax CUDA plugin installed, lowering eig for cuda asks cuSOLVER
    # for its version, which fails without a GPU (recorded like any lowering failure).
    assert platforms["rocm"]["lowered"]["libraries"] == {"jaxlib": 1}
    assert platforms["cpu"]["executed"] is True


# -- a user's error: their frames and the real cause, never the plugin's ------------------------

UNRUNNABLE = """
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl


def add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def add_one(x):                      # a Pallas kernel, no interpret mode: it runs on no cpu
    return pl.pallas_call(add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@pytest.mark.portable(must_lower=["cpu", "cuda", "rocm", "tpu"])
def test_kernel_must_lower_everywhere(jaxport):
    out = jaxport.check(add_one, jnp.ones((8, 128)))
    np.testing.assert_allclose(out, 2.0)


@pytest.mark.portable(must_lower=["cuda"])
def test_kernel_needs_only_cuda(jaxport):
    assert jaxport.check(add_one, jnp.ones((8, 128))) is None


@pytest.mark.portable
def test_fails_inside_numpy(jaxport):
    out = jaxport.check(jnp.tanh, jnp.ones(3))
    np.testing.assert_allclose(out, None)     # raises inside numpy's own source
"""


@pytest.mark.slow
def test_a_check_that_runs_nowhere_fails_at_the_users_line_with_the_cause(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_kernel=UNRUNNABLE)
    lines = (pytester.path / "test_kernel.py").read_text().splitlines()
    check_line = lines.index("    out = jaxport.check(add_one, jnp.ones((8, 128)))") + 1
    numpy_line = next(i for i, line in enumerate(lines, 1) if "assert_allclose(out, None)" in line)
    result = pytester.runpytest("--jaxport-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    failure = result.stdout.str().split(" test_kernel_must_lower_everywhere ")[1]
    assert "NoneType" not in failure.split(" test_fails_inside_numpy ")[0]
    # The check's own line, then the cause, then what to do.
    result.stdout.fnmatch_lines([
        ">       out = jaxport.check(add_one, jnp.ones((8, 128)))",
        "E       Failed: jaxport.check('add_one'): cpu: fails to lower: *",
        "E       It ran on no platform present here, so check() has no outputs to return, and "
        "cpu is in must_lower (set in *test_kernel_must_lower_everywhere). Give the code a "
        "portable path (jax.lax.platform_dependent(*), run a Pallas kernel with interpret=True*",
        f"test_kernel.py:{check_line}: Failed",
    ])  # fmt: skip
    result.stdout.fnmatch_lines(["FAILED *test_kernel_must_lower_everywhere - Failed: jaxport.*"])
    # Where cpu is not required, check() returns None and says so where it is called.
    warned = lines.index("    assert jaxport.check(add_one, jnp.ones((8, 128))) is None") + 1
    result.stdout.fnmatch_lines(
        [f"*test_kernel.py:{warned}: JaxportWarning: check 'add_one' not executed*"]
    )
    report = json.loads((pytester.path / "r.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in report["tests"]}
    failed = tests["test_kernel_must_lower_everywhere"]
    assert failed["error"]["where"] == f"test_kernel.py:{check_line}"
    assert failed["error"]["message"].startswith("Failed: jaxport.check('add_one'): cpu: fails")
    [check] = failed["checks"]
    assert check["platforms"]["cuda"]["lowered"]["custom"] == 1  # still counted
    assert {v["platform"] for v in failed["violations"]} >= {"cpu"}
    # An error raised inside numpy is recorded at the test's line, never a venv's path.
    numpy_error = tests["test_fails_inside_numpy"]["error"]
    assert numpy_error["where"] == f"test_kernel.py:{numpy_line}", numpy_error


PLUGIN_FRAMES = """
import jax
import jax.numpy as jnp
import pytest


def not_traceable(x):
    return jnp.zeros(int(x.sum()))


def _fused(x):
    return jax.ffi.ffi_call("my_fused_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def fused(x):
    return jax.lax.platform_dependent(x, cuda=_fused, default=jnp.tanh)


@pytest.mark.portable
def test_untraceable(jaxport):
    jaxport.check(not_traceable, jnp.ones(3))


@pytest.mark.portable(transforms=["grad"])
def test_untraceable_with_a_transform(jaxport):
    jaxport.check(not_traceable, jnp.ones(3), name="again")


@pytest.mark.portable
def test_untraceable_with_static_arguments(jaxport):
    jaxport.check(lambda x, n: not_traceable(x) * n, jnp.ones(3), 2)


@pytest.mark.portable
def test_classify_hook_raises(jaxport):
    jaxport.check(lambda x: jnp.tanh(x) @ x, jnp.ones((4, 4)))


@pytest.mark.portable
def test_priced_by_a_hook_that_raises(jaxport):
    jaxport.check(fused, jnp.ones(4))
"""

PLUGIN_FRAMES_CONFTEST = """
def pytest_jaxport_classify(platform, op, target, level):
    if op == "stablehlo.dot_general" and platform == "rocm":
        raise KeyError("my table has no " + op)


def pytest_jaxport_rewrite_cost(item, target, model):
    raise KeyError("no price for " + item.name)
"""


def test_a_users_error_shows_their_frames_never_the_plugins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_frames=PLUGIN_FRAMES, conftest=PLUGIN_FRAMES_CONFTEST)
    result = pytester.runpytest("--jaxport-report=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=4)
    output = result.stdout.str() + result.stderr.str()
    assert "pytest_jaxport/" not in output, output
    # No Python traceback (jax 0.6 names its own "SimplifiedTraceback": that is JAX's).
    assert "Traceback (most recent call last)" not in output, output
    source = (pytester.path / "test_frames.py").read_text().splitlines()
    hooks = (pytester.path / "conftest.py").read_text().splitlines()
    traced = source.index("    return jnp.zeros(int(x.sum()))") + 1
    classify = hooks.index('        raise KeyError("my table has no " + op)') + 1
    priced = hooks.index('    raise KeyError("no price for " + item.name)') + 1
    result.stdout.fnmatch_lines([f"test_frames.py:{traced}: ConcretizationTypeError"])
    result.stdout.fnmatch_lines([f"conftest.py:{classify}: KeyError"])
    # The cost hook runs at the end, for the report: said once, the run fails, no crash.
    result.stdout.fnmatch_lines([
        "jaxport: your pytest_jaxport_rewrite_cost hook raised KeyError: 'no price for "
        f"my_fused_kernel' at conftest.py:{priced}; rewrite days are priced by the cost model"
    ])  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# -- strict runs ----------------------------------------------------------------------------------

SMALL_SUITE = """
import jax.numpy as jnp
import pytest


@pytest.mark.portable(max_custom_calls=0)
def test_small(jaxport):
    assert jaxport.check(lambda a: jnp.linalg.solve(a, a), jnp.eye(2)).shape == (2, 2)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["-W", "error"],
        ["-p", "no:xdist"],
        ["-p", "no:cacheprovider"],
        ["--strict-markers"],
        ["-W", "error", "-p", "no:cacheprovider", "--strict-markers", "-n", "2"],
    ],
    ids=["W-error", "no-xdist", "no-cacheprovider", "strict-markers", "all"],
)
def test_strict_runs_stay_clean(pytester: pytest.Pytester, args: list[str]) -> None:
    pytester.makepyfile(test_small=SMALL_SUITE)
    result = pytester.runpytest_subprocess("--jaxport-report=r.json", *args)
    result.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "r.json").read_text())["summary"]["checks"] == 1


ABSENT_KERNELS = """
import jax
from jax.experimental import pallas as pl


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _kernel(x):
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def tpu_doubled(x):  # a kernel on the tpu branch only: the user wrote no GPU code
    return jax.lax.platform_dependent(x, tpu=_kernel, default=lambda x: x * 2.0)


def cuda_doubled(x):  # a kernel on the cuda branch, which must lower
    return jax.lax.platform_dependent(x, cuda=_kernel, default=lambda x: x * 2.0)
"""

ABSENT_TESTS = """
import jax
import jax.numpy as jnp
import pytest
from absent_kernels import cuda_doubled, tpu_doubled


@pytest.mark.portable
def test_tpu_kernel(jaxport):
    jaxport.check(tpu_doubled, jnp.ones((8, 128)))


@pytest.mark.portable(must_lower=["cpu", "cuda"])
def test_cuda_kernel(jaxport):
    jaxport.check(cuda_doubled, jnp.ones((8, 128)))


def test_audited():
    assert (jax.jit(tpu_doubled)(jnp.ones((8, 128))) == 2.0).all()
"""

ABSENT = ("cuda", "rocm", "tpu")


def jax_warns_lowering(pytester: pytest.Pytester, name: str) -> set[str]:
    """What JAX itself warns lowering ``absent_kernels.<name>`` for the absent platforms,
    together and each alone (as pytest-jaxport does where together fails), found here with
    JAX's public API, independently of the plugin: ``Category: message`` each. A joint
    lowering that fails warned about no program (issue 50: the tpu branch's kernel, lowered
    together for cuda, warns of Mosaic GPU; alone, it is never lowered for cuda)."""
    import contextlib
    import importlib
    import warnings

    import jax
    import jax.numpy as jnp

    pytester.syspathinsert()
    traced = jax.jit(getattr(importlib.import_module("absent_kernels"), name)).trace(
        jnp.ones((8, 128))
    )
    said: set[str] = set()
    for platforms in (ABSENT, *((p,) for p in ABSENT)):
        lowered = False
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # a platform that does not lower alone: what it warned still counts
            with contextlib.suppress(Exception):
                traced.lower(lowering_platforms=platforms)
                lowered = True
        if lowered or len(platforms) == 1:
            said |= {f"{w.category.__name__}: {w.message}" for w in caught}
    return said


@pytest.mark.slow
@pytest.mark.parametrize("strict", [False, True], ids=["default", "W-error"])
def test_jaxs_warnings_while_lowering_for_absent_platforms_are_recorded_not_shown(
    pytester: pytest.Pytester, strict: bool
) -> None:
    """A Pallas kernel that is only on the tpu branch makes JAX warn (jax 0.10: "pl.pallas_call
    for Mosaic GPU kernels is deprecated", 0.12: "Pallas Triton backend is deprecated") when
    pytest-jaxport lowers for the GPUs: not the test's doing, so it is in each check's record
    and the report, not in pytest's warnings summary, and ``-W error`` fails nothing (it
    failed must_lower = cuda). The audit, the same; a warm run (the lowered cache) says the
    same as the cold one."""
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n')
    pytester.makepyfile(absent_kernels=ABSENT_KERNELS, test_absent=ABSENT_TESTS)
    expected = {
        name: jax_warns_lowering(pytester, name) for name in ("tpu_doubled", "cuda_doubled")
    }
    args = ["--jaxport-report=r.json", "--jaxport-report", "--jaxport-audit", "-vv"]
    for run in ("cold", "warm"):
        result = pytester.runpytest_subprocess(*args, *(["-W", "error"] if strict else []))
        result.assert_outcomes(passed=3)
        result.stdout.no_fnmatch_line("*= warnings summary =*")
        report = json.loads((pytester.path / "r.json").read_text())
        for test in report["tests"]:
            for check in test["checks"]:
                heard = {p: set(e.get("lowering_warnings") or ())
                         for p, e in check["platforms"].items()}  # fmt: skip
                assert heard["cpu"] == set(), run  # present here: the test's own lowering
                assert set().union(*heard.values()) == expected[check["name"]], (run, heard)
        (audited,) = [c for c in report["audit"]["computations"] if c["function"] == "tpu_doubled"]
        heard = {p: set(e.get("lowering_warnings") or ()) for p, e in audited["platforms"].items()}
        assert heard == {"cpu": set(), **dict.fromkeys(ABSENT, expected["tpu_doubled"])}, run
        said = " ".join(line.strip() for line in result.stdout.lines)  # wrapped at 100
        for warning in expected["tpu_doubled"]:
            assert (
                "JAX warned while pytest-jaxport lowered for cuda, rocm, tpu (not present here; "
                f"not in pytest's warnings summary): {warning}" in said
            ), run
            assert (
                "note: JAX warned while pytest-jaxport lowered for platforms not present here (not "
                "in pytest's warnings summary; the details at -vv and lowering_warnings in the "
                f"JSON say for which): {warning}" in said
            ), run
        if run == "warm":  # read from the lowered cache: nothing lowered, the same said
            result.stdout.fnmatch_lines(["jaxport: lowered cache * hits, 0 misses*"])


@pytest.mark.slow
def test_devmode_run_is_clean(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDEVMODE", "1")
    pytester.makepyfile(test_small=SMALL_SUITE)
    result = pytester.runpytest_subprocess("-W", "error::ResourceWarning")
    result.assert_outcomes(passed=1)
    assert "ResourceWarning" not in result.stderr.str()


# -- files -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_unwritable_report_folder_fails_the_run_with_a_message(
    pytester: pytest.Pytester,
) -> None:
    if os.geteuid() == 0:
        # root ignores directory permissions: make the path a folder so the rename fails.
        (pytester.path / "out").mkdir()
        (pytester.path / "out" / "r.json").mkdir()
    else:
        (pytester.path / "out").mkdir(mode=0o500)
    pytester.makepyfile(test_small=SMALL_SUITE)
    result = pytester.runpytest("--jaxport-report=out/r.json")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["jaxport: could not write the report */out/r.json: *"])


@pytest.mark.slow
def test_a_bug_building_the_report_keeps_pytests_summary_and_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure of the plugin's own at the session's end (optax's audit once hit one) is said
    once, with its traceback, after pytest's own report of every test; exit status 3, never 0
    and never a bare traceback that hides the outcomes."""

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise TypeError("'<' not supported between instances of 'str' and 'NoneType'")

    monkeypatch.setattr(report_build, "build_report", broken)  # the writer imports it as it builds
    pytester.makepyfile(test_small=SMALL_SUITE)
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines([
        "*= jaxport: internal error =*",
        "jaxport: the report could not be built: a bug in pytest-jaxport, not in this suite*",
        "Traceback (most recent call last):",
        "TypeError: '<' not supported between instances of 'str' and 'NoneType'",
        "*1 passed*",
    ])  # fmt: skip
    assert not (pytester.path / "r.json").exists()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.slow
def test_killed_while_writing_leaves_previous_report(pytester: pytest.Pytester) -> None:
    """A real SIGKILL between writing the temporary file and renaming it."""
    pytester.makepyfile(test_small=SMALL_SUITE)
    first = pytester.runpytest_subprocess("--jaxport-report=r.json")
    first.assert_outcomes(passed=1)
    before = (pytester.path / "r.json").read_text()
    ready = pytester.path / "ready"
    pytester.makeconftest(
        f"""
        import os, time
        import pytest_jaxport.report.files as report

        def slow_replace(src, dst):
            open({str(ready)!r}, "w").close()
            time.sleep(60)

        report.os.replace = slow_replace
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--jaxport-report=r.json", "-p", "no:cacheprovider"],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert process.poll() is None, "the run ended before writing its report"
            assert time.monotonic() < deadline, "the run never reached the report write"
            time.sleep(0.1)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    assert (pytester.path / "r.json").read_text() == before
    json.loads(before)
    leftovers = [p.name for p in pytester.path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers, "the temporary file should be what the kill left behind"
