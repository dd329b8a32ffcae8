"""Tests of pytest_jaxport._jax.libtpu, _jax.tpu_worker and model.libtpu.

The compiled level for tpu without a TPU (issue 48): libtpu in its worker process.

The pure parts (which jax/libtpu pairs go together, the topology a program compiles for,
the compiler's error as a finding says it, the configuration) run everywhere. The end-to-end
runs need libtpu (``pip install "pytest-jaxport[tpu]"``) and are skipped, saying so, where it
is not installed; the usage error for a missing libtpu runs only there. Real JAX, real
libtpu, real pytest runs through ``pytester``: nothing is mocked.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

import pytest
from helpers import esc

from pytest_jaxport._jax import libtpu
from pytest_jaxport.model.config import ConfigError
from pytest_jaxport.model.libtpu import (
    MEASURED_PAIRS,
    compiler_said,
    install_line,
    matches_pin,
    pair_verdict,
    pinned_libtpu,
    topology_for,
)
from pytest_jaxport.model.platforms import DESCRIPTIONS, release
from pytest_jaxport.model.pyproject import parse_project
from pytest_jaxport.version import requirement

LIBTPU = libtpu.installed("libtpu")
needs_libtpu = pytest.mark.skipif(
    LIBTPU is None, reason='libtpu is not installed (pip install "pytest-jaxport[tpu]")'
)
without_libtpu = pytest.mark.skipif(LIBTPU is not None, reason="libtpu is installed here")
UNPLACED = LIBTPU is not None and release(LIBTPU) < release("0.0.37")
LU_F64_REFUSED = LIBTPU is not None and release(LIBTPU) < release("0.0.50")
"""libtpu 0.0.50 and later compile a float64 LU (research §4); earlier ones refuse it."""
"""libtpu 0.0.17 (jax 0.6.2's) keeps no metadata on the runtime's calls: a compiled census
places them at the check's line (as a lowered census places kernels without a line)."""


# -- the pair, judged before anything loads libtpu -------------------------------------------


def test_the_pair_jax_pins_is_good_and_a_missing_libtpu_says_what_to_install() -> None:
    assert pinned_libtpu(['libtpu==0.0.42.*; extra == "tpu"', "numpy"]) == "0.0.42.*"
    assert pinned_libtpu(["libtpu>=0.0.1", 'requests; extra == "tpu"']) is None
    assert matches_pin("0.0.42.1", "0.0.42.*")
    assert matches_pin("0.0.23", "0.0.23")
    assert not matches_pin("0.0.43", "0.0.42.*")
    good = pair_verdict("0.10.2", "0.0.42.1", pinned="0.0.42.*")
    assert good.ok
    assert good.known == "pinned by jax 0.10.2"
    missing = pair_verdict("0.10.2", None, pinned="0.0.42.*")
    assert missing.problem == (
        f'libtpu is not installed: pip install "{requirement("tpu")}" installs the libtpu '
        'jax 0.10.2 pins (or: pip install "libtpu==0.0.42.*")'
    )


def test_jax_0_12_1_is_told_to_install_the_libtpu_measured_with_it() -> None:
    """jax 0.12.1 pins libtpu 0.0.53, which is not on PyPI: the message names 0.0.52."""
    said = pair_verdict("0.12.1", None, pinned="0.0.53.*").problem
    assert said == (
        'libtpu is not installed: pip install "libtpu==0.0.52" (jax 0.12.1 pins libtpu 0.0.53, '
        "which is not on PyPI; 0.0.52 is measured with it)"
    )
    measured = pair_verdict("0.12.1", "0.0.52", pinned="0.0.53.*")
    assert measured.ok
    assert measured.known.startswith("measured: ")


def test_a_pair_measured_to_crash_is_refused_and_an_unknown_one_is_probed() -> None:
    crash = pair_verdict("0.10.2", "0.0.17.1", pinned="0.0.42.*")
    assert crash.problem is not None
    assert crash.problem.startswith("libtpu 0.0.17.1 is measured to crash jax 0.10.2 (a ")
    assert crash.problem.endswith(install_line("0.10.2", "0.0.42.*"))
    unknown = pair_verdict("0.11.2", "0.0.44.1", pinned="0.0.48.*")
    assert unknown.probe
    assert not unknown.ok
    assert unknown.problem is None
    # every measured pair is good, whatever jax pins
    assert all(pair_verdict(p.jax, p.libtpu, pinned=None).ok for p in MEASURED_PAIRS)


# -- topologies ------------------------------------------------------------------------------


def test_a_program_compiles_for_the_smallest_slice_with_its_devices() -> None:
    assert topology_for("tpu", "v5e", "", partitions=1).name == "v5e:1x1"
    four = topology_for("tpu", "v5e", "", partitions=4)
    assert (four.name, four.devices, four.host_bounds) == ("v5e:2x2", 4, (2, 2, 1))
    assert topology_for("tpu", "v5e", "", partitions=2).name == "v5e:2x2"
    assert topology_for("tpu", "v4", "", partitions=2).name == "v4:1x1x1"  # two cores a chip
    assert topology_for("tpu", "7x", "", partitions=1).name == "tpu7x:1x1x1"
    assert topology_for("tpu", "v6e", "4x4", partitions=1).name == "v6e:4x4"
    with pytest.raises(ValueError, match=re.escape("over 8 devices, more than v5e:2x2")):
        topology_for("tpu", "v5e", "2x2", partitions=8)
    with pytest.raises(ValueError, match="libtpu has no topology") as unknown:
        topology_for("tpu", "8i", "", partitions=1)
    assert str(unknown.value) == (
        "tpu compiles without a device for v2, v3, v4, v5e, v5p, v6e, 7x; libtpu has no "
        "topology for '8i'"
    )


def test_devices_tpu_takes_a_topology_and_compile_time_limit_is_checked() -> None:
    project = parse_project(
        {"compile": ["tpu"], "devices": {"tpu": "v5e:2x2"}, "compile_time_limit": 30},
        "pyproject.toml",
    )
    assert project.compile == ("tpu",)
    assert str(project.devices["tpu"]) == "TPU v5e (v5e:2x2)"
    assert project.compile_time_limit == 30.0
    bad = {
        "v5p:2x2": "[tool.jaxport] devices.tpu: v5p's topologies have 3 dimensions (e.g. "
        "v5p:2x2x1), found '2x2'",
        "v5e:2xx": "[tool.jaxport] devices.tpu: a topology is 2 whole numbers of chips joined "
        "by 'x' (e.g. v5e:2x2), found '2xx'",
        "8i:2x2": "[tool.jaxport] devices.tpu: tpu compiles without a device for v2, v3, v4, "
        "v5e, v5p, v6e, 7x; libtpu has no topology for '8i'",
    }
    for value, said in bad.items():
        with pytest.raises(ConfigError, match=re.escape(f"pyproject.toml: {said}")):
            parse_project({"devices": {"tpu": value}}, "pyproject.toml")
    with pytest.raises(ConfigError, match=re.escape("a topology (':2x2') is for a platform")):
        parse_project({"devices": {"rocm": "mi300:2x2"}}, "pyproject.toml")
    for limit in (0, -1, "60", True, 1e7, float("inf")):
        with pytest.raises(ConfigError) as raised:
            parse_project({"compile_time_limit": limit}, "pyproject.toml")
        assert str(raised.value).startswith(
            "pyproject.toml: [tool.jaxport] compile_time_limit: expected a number of seconds "
            "greater than 0 and at most 86,400 (a day; e.g. 60), found "
        )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("v5e:0x2", "a topology counts chips along each dimension, 1 or more (e.g. v5e:2x2), "
         "found 0 in '0x2'"),
        ("v5e:-2x2", "a topology is 2 whole numbers of chips joined by 'x' (e.g. v5e:2x2), "
         "found '-2x2'"),
        ("v5e:2x", "a topology is 2 whole numbers of chips joined by 'x' (e.g. v5e:2x2), found "
         "'2x'"),
        ("v5e:", "no topology after 'v5e:'; write 'v5e' alone (a program compiles for the "
         "smallest slice with its devices) or a topology (e.g. v5e:2x2)"),
        ("v5e:1000x1000", "v5e's slices are at most 16x16 chips (libtpu aborts compiling for "
         "more than 16 along dimension 1), found '1000x1000'; name a slice of v5e up to "
         "v5e:16x16"),
        ("v5e:16x32", "v5e's slices are at most 16x16 chips (libtpu aborts compiling for more "
         "than 16 along dimension 2), found '16x32'"),
        ("v6e:3x4", "libtpu lays a slice out on hosts of 2x2 chips, so its first two dimensions "
         "are each 1, 2 or a multiple of 2 (e.g. v6e:2x4), found 3 in '3x4'"),
        ("v5p:2x2x1x1", "v5p's topologies have 3 dimensions (e.g. v5p:2x2x1), found "
         "'2x2x1x1'"),
    ],
)  # fmt: skip
def test_each_malformed_topology_gets_its_own_true_message(value: str, said: str) -> None:
    """Issue 55 items 4 and 12: '0x2' has two dimensions, '-2x2' is no number of chips,
    'v5e:' names none, and a v5e slice past 16 chips a side aborts libtpu's process."""
    with pytest.raises(ConfigError) as raised:
        parse_project({"devices": {"tpu": value}}, "pyproject.toml")
    assert str(raised.value).startswith(f"pyproject.toml: [tool.jaxport] devices.tpu: {said}")


def test_a_topology_is_read_in_any_case_and_up_to_the_generations_bounds() -> None:
    for value, shape in (("V5E:2X2", "2x2"), ("v5e:16x16", "16x16"), ("v5e:2x16", "2x16"),
                         ("v6e:1000x2", "1000x2"), ("v4:2x2x3", "2x2x3")):  # fmt: skip
        project = parse_project({"devices": {"tpu": value}}, "pyproject.toml")
        assert project.devices["tpu"].topology == shape
    assert topology_for("tpu", "v5e", "16x16", partitions=1).host_bounds == (2, 2, 1)


def test_every_compile_target_is_a_generation_of_its_platform() -> None:
    tpu = DESCRIPTIONS["tpu"]
    assert tpu.compiled
    assert tpu.compiler_decides
    assert {t.generation for t in tpu.compile_targets} <= set(tpu.generations)
    assert not DESCRIPTIONS["cuda"].compiler_decides  # its deviceless compile lacks FFI targets


# -- what the compiler said ------------------------------------------------------------------


def test_the_compilers_reason_without_its_stack_and_with_the_lines_it_names() -> None:
    said = compiler_said(
        "JaxRuntimeError: UNIMPLEMENTED: While rewriting computation to not contain X{64|128} "
        "element types, XLA encountered an HLO for which this rewriting is not implemented: "
        "%dot_general.1 = s64[8,8]{1,0} dot(%x.1, %x.1), lhs_contracting_dims={1}, "
        'metadata={op_name="jit(f)/dot_general" stack_frame_id=3}\n\t\n\n'
        "Suspected Python Code Location:\n  /site-packages/jax/_src/x.py:3:1 [g]\n"
        "  /src/model.py:20:83 [f]\n  /src/test_m.py:14:14 [test] [xla::PythonStackTrace='']"
    )
    assert said.reason == (
        "JaxRuntimeError: UNIMPLEMENTED: While rewriting computation to not contain X{64|128} "
        "element types, XLA encountered an HLO for which this rewriting is not implemented: "
        "%dot_general.1 = s64[8,8]{1,0} dot(%x.1, %x.1), lhs_contracting_dims={1}"
    )
    assert said.frames == (
        ("/site-packages/jax/_src/x.py", 3),
        ("/src/model.py", 20),
        ("/src/test_m.py", 14),
    )
    lu = compiler_said(
        "JaxRuntimeError: UNIMPLEMENTED: Only F32 and C64 types are implemented in "
        "LuDecomposition; got shape f64[64,64]:     @     0x7f1492cf2ea2  "
        "xla::XlaBuilder::ReportErrorOrReturn()\n    @     0x7f1487fde114  xla::Lu::Expand()\n"
    )
    assert lu.reason.endswith("LuDecomposition; got shape f64[64,64]")
    assert "0x7f" not in lu.reason
    mosaic = compiler_said(
        "JaxRuntimeError: INTERNAL: Mosaic failed to compile TPU kernel: unsupported shape cast "
        'at location: loc("reshape:"(callsite("flat"("/src/k.py":13:17 to :39) at "flat"('
        '"/src/k.py":13:17 to :39)))) The MLIR operation involved: %3 = "tpu.reshape"(%2) '
        "Please report a bug at: https://github.com/jax-ml/jax/issues/new/choose"
    )
    assert mosaic.reason == (
        "JaxRuntimeError: INTERNAL: Mosaic failed to compile TPU kernel: unsupported shape cast "
        'The MLIR operation involved: %3 = "tpu.reshape"(%2)'
    )
    assert len(mosaic.locations) == 1
    assert '"/src/k.py":13:17' in mosaic.locations[0]


# -- end to end ------------------------------------------------------------------------------

KERNELS = """
import contextlib

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


@contextlib.contextmanager
def x64():
    jax.config.update("jax_enable_x64", True)  # jax.enable_x64 is jax 0.7 and later
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", False)


def solve(a, b):
    return jnp.linalg.solve(a, b)


def cumsum(x):
    return jnp.cumsum(x)


def _third(x_ref, o_ref):
    o_ref[...] = x_ref[...] // 3


def third(x):
    return pl.pallas_call(
        _third, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)


def _flat(x_ref, o_ref):
    o_ref[...] = x_ref[...].reshape(5, 3)


def flat(x):
    return pl.pallas_call(
        _flat, out_shape=jax.ShapeDtypeStruct((5, 3), x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def double(x):
    return pl.pallas_call(
        _double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)


def workers():  # this process's children that run libtpu's worker
    import os
    from pathlib import Path

    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes()
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"tpu_worker.py" in command:
            found.append(proc.name)
    return found
"""


def line_of(fragment: str) -> int:
    """The line of ``kernels.py`` (as pytester writes it) that holds ``fragment``."""
    lines = textwrap.dedent(KERNELS).strip().splitlines()
    return next(i for i, line in enumerate(lines, 1) if fragment in line)


def _project(pytester: pytest.Pytester, toml: str, tests: str) -> None:
    pytester.makefile(".toml", pyproject=textwrap.dedent(toml))
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_tpu=textwrap.dedent(tests))
    pytester.syspathinsert()


def _checks(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, dict[str, Any]]:
    """Each test's (first) check's tpu record, by the test's name."""
    report = json.loads((pytester.path / name).read_text())
    return {
        test["nodeid"].rpartition("::")[2]: test["checks"][0]["platforms"]["tpu"]
        for test in report["tests"]
    }


@without_libtpu
def test_compile_tpu_without_libtpu_is_a_usage_error_saying_what_to_install(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester, '[tool.jaxport]\ncompile = ["tpu"]\n', "def test_nothing():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    jax_version = libtpu.installed("jax")
    result.stderr.fnmatch_lines(
        [
            "ERROR: jaxport: pyproject.toml: [[]tool.jaxport[]] compile lists tpu, but libtpu is "
            f"not installed: pip install *libtpu*{esc(jax_version or '')}*"
        ]
    )
    result.stderr.no_fnmatch_line("*Traceback*")


def test_an_uncompilable_tpu_generation_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(
        pytester,
        '[tool.jaxport]\ndevices = { tpu = "v4i" }\n',
        "def test_nothing():\n    pass\n",
    )
    result = pytester.runpytest("--jaxport-compile=tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: jaxport: --jaxport-compile lists tpu, but [[]tool.jaxport[]] devices.tpu is "
            "TPU v4i (v4i): tpu compiles without a device for v2, v3, v4, v5e, v5p, v6e, 7x; "
            "libtpu has no topology for 'v4i' (choose one of those, or leave tpu at the lowered "
            "level)"
        ]
    )


@pytest.mark.slow
@needs_libtpu
def test_tpu_compiles_deviceless_with_the_compilers_answers(pytester: pytest.Pytester) -> None:
    """The runtime's routines counted as libtpu's at the check's line, at both levels alike;
    a float64 LU the compiler refuses fails must_lower with its reason at its line; Pallas
    kernels compile (one whose lowering reads the device's kind too), Mosaic's errors at the
    kernel's line; libtpu's stderr lines never reach the user; a second run reads every
    answer from the compiled cache, refusals included."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]

        [tool.jaxport.budget]
        must_lower = ["tpu"]
        """,
        """
        import jax
        import jax.numpy as jnp
        import pytest
        from kernels import double, flat, solve, third, x64

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(solve, jnp.eye(64) * 2.0, jnp.ones((64, 8)))

        @pytest.mark.portable
        def test_solve_f64(jaxport):
            with x64():
                a = jnp.eye(64, dtype=jnp.float64) * 2.0
                jaxport.check(solve, a, jnp.ones((64, 8), jnp.float64))

        @pytest.mark.portable(platforms=["cpu", "tpu"])
        def test_kernel(jaxport):
            jaxport.check(third, jnp.ones((8, 128), jnp.int32))

        @pytest.mark.portable(platforms=["cpu", "tpu"])
        def test_vmem(jaxport):
            jaxport.check(double, jnp.ones((4096, 4096)))

        @pytest.mark.portable(platforms=["cpu", "tpu"])
        def test_shape_cast(jaxport):
            jaxport.check(flat, jnp.ones((3, 5)))
        """,
    )
    # each run a process of its own, as a user's runs are (jax 0.6 reuses a trace, and the
    # lines it was traced at, across the tests of one process: a cache key's lines)
    first = pytester.runpytest_subprocess("-p", "no:randomly", "--jaxport-report=r.json", "-rA")
    refused = 3 if LU_F64_REFUSED else 2
    first.assert_outcomes(passed=5 - refused, failed=refused)
    solve = line_of("jnp.linalg.solve")
    first.stdout.fnmatch_lines(
        [
            "jaxport: compiled level for tpu; tpu compiles deviceless through libtpu "
            f"{LIBTPU} for TPU v5e (v5e),",
            "  within 60 s a compile; cached in pytest's cache",
        ]
    )
    if LU_F64_REFUSED:
        first.stdout.fnmatch_lines(
            [
                "tpu: fails to compile (must_lower = [[]tpu[]], set in pyproject.toml "
                "[[]tool.jaxport.budget[]]); check 'solve', compiled",
                "    *RuntimeError: UNIMPLEMENTED: Only F32 and C64 types are implemented in "
                f"LuDecomposition; got shape f64[[]64,64[]] (at kernels.py:{solve})",
            ]
        )
    double = line_of("_double, out_shape") - 1  # the pallas_call
    first.stdout.fnmatch_lines(
        [
            "    *RuntimeError: RESOURCE_EXHAUSTED: *Ran out of memory in memory space vmem "
            f"*(at kernels.py:{double})",
        ]
    )
    first.stdout.fnmatch_lines(
        [
            "    *RuntimeError: INTERNAL: Mosaic failed to compile TPU kernel*: *unsupported "
            "shape cast The MLIR operation involved: * "
            f"(at kernels.py:{line_of('.reshape(5, 3)')})",
        ]
    )
    routines = "test_tpu.py:8" if UNPLACED else f"kernels.py:{solve}"
    first.stdout.fnmatch_lines(
        [
            "  tpu   vendor   3  custom   0  (libtpu 3)  [[]compiled deviceless v5e:1x1[]]",
            "*",
            "*",
            f"    tpu: vendor InvertDiagBlocksLowerTriangular (libtpu) at {routines}",
            f"    tpu: vendor InvertDiagBlocksUpperTriangular (libtpu) at {routines}",
            f"    tpu: vendor Lu*DecompositionBlock (libtpu) at {routines}",
        ]
    )
    # the lowered census counts the calls libtpu compiles into these routines as libtpu's
    # (LuDecomposition, two triangular solves): the levels agree, and no line says otherwise
    # (a float64 solve that libtpu 0.0.50+ compiles into one LuRealDecompositionBlock: they
    # differ, and its section says so)
    solved = re.search(r"_ test_solve _+\n(.*?)\n_{3,} ", first.stdout.str(), re.DOTALL)
    assert solved is not None
    assert "tpu   vendor   3  custom   0  (libtpu 3)  [compiled deviceless" in solved.group(1)
    assert "lowered predicted" not in solved.group(1)
    third = line_of("_third, out_shape") - 1
    first.stdout.fnmatch_lines(
        [f"*tpu: custom tpu_custom_call (pallas-mosaic-tpu) at kernels.py:{third}"]
    )
    for said in (first.stdout.str(), first.stderr.str()):
        assert "0x7f" not in said  # no C++ stack addresses
        assert "TPU_ACCELERATOR_TYPE" not in said  # libtpu's start-up lines
        assert "libtpu_init_utils" not in said
    first.stdout.no_fnmatch_line("*does not autotune*")  # a GPU's note: no GPU compiled here
    checks = _checks(pytester)
    assert checks["test_solve"]["compiled"]["libraries"] == {"libtpu": 3}
    assert checks["test_solve"]["lowered"]["libraries"] == {"libtpu": 3}
    assert checks["test_solve"]["compiled"]["deviceless"] is True
    assert checks["test_solve"]["compiled"]["target"] == "v5e:1x1"
    assert checks["test_kernel"]["compiled"]["custom"] == 1
    if LU_F64_REFUSED:
        assert checks["test_solve_f64"]["compiled"] is None
    else:  # libtpu 0.0.50 and later: LuRealDecompositionBlock, float64 included
        assert checks["test_solve_f64"]["compiled"]["libraries"]["libtpu"] >= 1
    second = pytester.runpytest_subprocess("-p", "no:randomly", "--jaxport-report=r2.json")
    second.assert_outcomes(passed=5 - refused, failed=refused)
    second.stdout.fnmatch_lines(["jaxport: compiled cache 5 hits, 0 misses *"])
    assert _checks(pytester, "r2.json") == checks


@pytest.mark.slow
@needs_libtpu
def test_a_compile_past_the_time_limit_is_a_finding_and_the_run_goes_on(
    pytester: pytest.Pytester,
) -> None:
    """A float64 cumsum of 4,096 values compiles for about four minutes with libtpu 0.0.42.1:
    past ``compile_time_limit`` the worker is killed, the check says so, and the next check
    compiles in a new worker (whose start is not counted against the limit)."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        compile_time_limit = 5
        """,
        """
        import jax
        import jax.numpy as jnp
        import pytest
        from kernels import cumsum, solve, x64

        @pytest.mark.portable
        def test_slow(jaxport):
            with x64():
                jaxport.check(cumsum, jnp.ones(4096, jnp.float64))

        @pytest.mark.portable(must_lower=["tpu"])
        def test_after(jaxport):
            jaxport.check(solve, jnp.eye(16), jnp.ones((16, 2)))
        """,
    )
    result = pytester.runpytest("-p", "no:randomly", "--jaxport-report=r.json", "-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "  tpu   *compile failed: compile exceeded 5 s on tpu (v5e:1x1) compiling jit_cumsum "
            "(checking at test_tpu.py:9): the run went on without its compiled census; raise "
            "[[]tool.jaxport[]] compile_time_limit to wait longer",
        ]
    )
    checks = _checks(pytester)
    assert checks["test_slow"]["compiled"] is None
    assert checks["test_after"]["compiled"]["libraries"] == {"libtpu": 3}


@needs_libtpu
def test_the_time_limit_counts_the_compile_not_the_workers_start() -> None:
    """A fresh worker's start (JAX's import, libtpu's load, its compiler's first module: most
    of a second on a quiet machine, seconds under load) is not the program's compile: a
    module that compiles in a tenth of a second compiles on a fresh worker under half a
    second's ``compile_time_limit`` (a check after a timed-out one read "exceeded 2 s" on a
    loaded machine when the new worker's start counted)."""
    compiler = libtpu.TpuCompiler(time_limit=0.5)
    try:
        topology = topology_for("tpu", "v5e", "", partitions=1)
        compiled = compiler.compile(libtpu.PROBE_MODULE.encode(), topology, partitions=1)
        assert compiled.device_kind == "TPU v5 lite"
        assert compiled.seconds < 0.5
        assert compiler.started == 1
    finally:
        compiler.close()


@needs_libtpu
def test_a_sharded_program_compiles_for_a_slice_and_counts_its_collectives(
    pytester: pytest.Pytester,
) -> None:
    """Four host devices (tests/conftest.py): a contraction sharded over them compiles for
    v5e:2x2, where the partitioner's all-reduce is counted at the compiled level."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        """,
        """
        import jax
        import jax.numpy as jnp
        import numpy as np
        import pytest
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        def matmul(a, b):
            return jnp.tanh(a @ b)

        @pytest.mark.portable
        def test_sharded(jaxport):
            mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
            a = jax.device_put(jnp.ones((128, 256)), NamedSharding(mesh, P(None, "x")))
            b = jax.device_put(jnp.ones((256, 64)), NamedSharding(mesh, P("x", None)))
            jaxport.check(matmul, a, b)
        """,
    )
    result = pytester.runpytest("-p", "no:randomly", "--jaxport-report=r.json", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "  tpu   vendor   0  custom   0  [[]compiled deviceless v5e:2x2[]]",
            "    tpu: collectives (ici): all-reduce 1 (1 inserted by the SPMD partitioner); "
            "compiled: all-reduce 1",
        ]
    )
    tpu = _checks(pytester)["test_sharded"]
    assert tpu["compiled"]["target"] == "v5e:2x2"


@pytest.mark.slow
@needs_libtpu
def test_the_audit_compiles_tpu_and_counts_the_runtimes_routines(
    pytester: pytest.Pytester,
) -> None:
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        """,
        """
        import jax
        import jax.numpy as jnp

        @jax.jit
        def eigvals(a):
            return jnp.linalg.eigh(a)[0]

        def test_plain():
            eigvals(jnp.eye(32))
        """,
    )
    result = pytester.runpytest(
        "-p", "no:randomly", "--jaxport-audit", "--jaxport-compile=tpu", "--jaxport-report=a.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*levels: compiled for tpu; lowered elsewhere*"])
    audit = json.loads((pytester.path / "a.json").read_text())["audit"]
    compiled = [
        c["platforms"]["tpu"]["compiled"]
        for c in audit["computations"]
        if c["platforms"]["tpu"]["compiled"] is not None
    ]
    assert any(c["libraries"] == {"libtpu": 1} for c in compiled)
    eigh = next(c for c in audit["computations"] if c["platforms"]["tpu"]["compiled"]["libraries"])
    kernel = eigh["platforms"]["tpu"]["compiled"]["kernels"][0]
    assert kernel["name"] == "EighTpu"
    # at the line the lowered census places the same computation's solver (cpu's LAPACK
    # call); libtpu 0.0.17 keeps no metadata on the runtime's calls: the caller's line then
    lowered = eigh["platforms"]["cpu"]["lowered"]["kernels"][0]["location"]
    assert kernel["location"] == ("test_tpu.py:9" if UNPLACED else lowered)


@pytest.mark.slow
@needs_libtpu
def test_under_xdist_each_worker_compiles_and_the_report_is_the_same(
    pytester: pytest.Pytester,
) -> None:
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from kernels import solve

        @pytest.mark.portable
        @pytest.mark.parametrize("n", [16, 32, 48, 64])
        def test_solve(jaxport, n):
            jaxport.check(solve, jnp.eye(n), jnp.ones((n, 2)))
        """,
    )
    serial = pytester.runpytest("-p", "no:cacheprovider", "-n", "0", "--jaxport-report=s.json")
    serial.assert_outcomes(passed=4)
    spread = pytester.runpytest("-p", "no:cacheprovider", "-n", "2", "--jaxport-report=x.json")
    spread.assert_outcomes(passed=4)
    assert _checks(pytester, "x.json") == _checks(pytester, "s.json")
    assert all(
        c["compiled"]["libraries"] == {"libtpu": 3} for c in _checks(pytester, "x.json").values()
    )


@pytest.mark.slow
@needs_libtpu
def test_a_worker_that_dies_is_a_finding_not_a_crash(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libtpu ends its process on a flag it does not know (``LIBTPU_INIT_ARGS``): each check
    says so, with libtpu's own words, and the run ends normally. It died making its
    topology, so no other worker is started: the later checks say so at once."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from kernels import solve

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(solve, jnp.eye(16), jnp.ones((16, 2)))

        @pytest.mark.portable
        def test_again(jaxport):
            jaxport.check(solve, jnp.eye(8), jnp.ones((8, 2)))

        @pytest.mark.portable
        def test_third(jaxport):
            jaxport.check(solve, jnp.eye(4), jnp.ones((4, 2)))
        """,
    )
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--jaxport_no_such_flag=1")
    result = pytester.runpytest("-p", "no:randomly", "-rA", "--jaxport-report=r.json")
    result.assert_outcomes(passed=3)
    died = (
        "the libtpu worker died while making the topology v5e:1x1 (loading libtpu) (exit "
        "status 1): ERROR: Unknown command line flag 'jaxport_no_such_flag'"
    )
    result.stdout.fnmatch_lines([f"  tpu   *compile failed: {esc(died)} [[]tpu v5e:1x1[]]"])
    # issue 55 item 4: it would die so for every module; it is not started for each check
    checks = _checks(pytester)
    assert checks["test_solve"]["compile_error"] == f"{died} [tpu v5e:1x1]"
    for later in ("test_again", "test_third"):
        assert checks[later]["compile_error"] == (
            f"{died}; not started again (it died making its topology), so this compile and "
            "every later one were not tried [tpu v5e:1x1]"
        )
    # a compile that did not happen is a problem, and no level is claimed for it
    result.stdout.fnmatch_lines(
        [
            "problems: 0 failed, 0 budget violations, 3 findings that fail no test",
            "  tpu: does not compile — 3 checks in 3 tests (nothing counted at the compiled "
            "level;*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*level: lowered (StableHLO, no hardware needed); not compiled: tpu (none of 3*"]
    )
    result.stdout.no_fnmatch_line("*compiled for tpu*")


@pytest.mark.slow
@needs_libtpu
def test_the_test_process_never_loads_libtpu_on_a_machine_without_a_tpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the ``[tpu]`` extra installed and ``JAX_PLATFORMS`` unset, JAX would load libtpu
    in the test process to look for a TPU (and hold /tmp/libtpu_lockfile): with tpu compiled,
    only the worker loads it, and the checks run on the CPU as before."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        """,
        """
        import jax
        import jax.numpy as jnp
        import pytest
        from kernels import solve

        @pytest.mark.portable
        def test_solve(jaxport):
            out = jaxport.check(solve, jnp.eye(16) * 2.0, jnp.ones((16, 2)))
            assert float(out[0, 0]) == 0.5
            assert jax.devices()[0].platform == "cpu"
            with open("/proc/self/maps") as maps:
                assert "libtpu" not in maps.read()
        """,
    )
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-rA")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 passed*"])
    result.stdout.fnmatch_lines(["*tpu   vendor   3  custom   0  (libtpu 3)  [[]compiled *"])


@pytest.mark.slow
def test_without_compile_tpu_nothing_of_libtpu_is_loaded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off costs nothing: a check lowered for tpu without ``compile = ["tpu"]`` starts no
    worker and loads no libtpu (with libtpu installed or not)."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from kernels import solve, workers

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(solve, jnp.eye(16) * 2.0, jnp.ones((16, 2)))
            assert workers() == []
            with open("/proc/self/maps") as maps:
                assert "libtpu" not in maps.read()
        """,
    )
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # JAX's own look for a TPU loads libtpu
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tpu   vendor   3  custom   0  (libtpu 3)  [[]lowered[]]*"])


@pytest.mark.slow
@needs_libtpu
def test_the_worker_starts_early_on_an_empty_cache_at_a_miss_otherwise_never_when_cached(
    pytester: pytest.Pytester,
) -> None:
    """With an empty compiled cache the worker starts as collection ends (every compile is a
    miss: it imports JAX while the first tests run); with a cache, at the first compile the
    cache does not hold: a second run reads the answer from the cache and starts none, with
    the same census."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from kernels import solve, workers

        @pytest.mark.portable
        def test_solve(jaxport):
            before = len(workers())
            jaxport.check(solve, jnp.eye(16) * 2.0, jnp.ones((16, 2)))
            with open("workers.txt", "a") as seen:
                seen.write(f"{before} {len(workers())}\\n")
        """,
    )
    runs = []
    for _ in range(2):
        result = pytester.runpytest_subprocess("-p", "no:randomly", "-rA")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            ["*tpu   vendor   3  custom   0  (libtpu 3)  [[]compiled deviceless v5e:1x1[]]*"]
        )
        runs.append(result)
    runs[0].stdout.fnmatch_lines(["jaxport: compiled cache 0 hits, 1 misses (1 compiled *"])
    runs[1].stdout.fnmatch_lines(["jaxport: compiled cache 1 hits, 0 misses (0 compiled *"])
    # a program the cache does not hold, in a run whose cache is not empty: started by it
    test = pytester.path / "test_tpu.py"
    test.write_text(test.read_text().replace("jnp.eye(16)", "jnp.eye(8)").replace("((16", "((8"))
    runs.append(pytester.runpytest_subprocess("-p", "no:randomly", "-rA"))
    runs[2].assert_outcomes(passed=1)
    runs[2].stdout.fnmatch_lines(["jaxport: compiled cache 0 hits, 1 misses (1 compiled *"])
    # workers before and after the check: the cold run's from collection on; none at all
    # warm; the third run's from its compile on
    assert (pytester.path / "workers.txt").read_text().splitlines() == ["1 1", "0 0", "0 1"]


@needs_libtpu
@pytest.mark.slow
def test_libtpu_aborts_past_the_bounds_declared_for_its_generation() -> None:
    """What holds :attr:`CompileTarget.bounds` to libtpu: it compiles for the largest slice
    declared and aborts its process (a failed C++ check) one chip past it, which is why
    such a slice is refused at configuration; the worker says libtpu's own words, and dies
    once per way of dying."""
    from pytest_jaxport.model.libtpu import COMPILE_TARGETS, Topology

    v5e = COMPILE_TARGETS["tpu"]["v5e"]
    largest = "x".join(map(str, v5e.bounds))
    compiler = libtpu.TpuCompiler(time_limit=300)
    try:
        fits = Topology(name=f"v5e:{largest}", generation="v5e", devices=256, host_bounds=(2, 2, 1))
        compiler.compile(libtpu.PROBE_MODULE.encode(), fits, partitions=1)
        past = Topology(name="v5e:16x18", generation="v5e", devices=288, host_bounds=(2, 2, 1))
        for _ in range(2):
            with pytest.raises(libtpu.CompileFailure) as died:
                compiler.compile(libtpu.PROBE_MODULE.encode(), past, partitions=1)
            assert died.value.stage == "crash"
            assert "Check failed: Topology()->chip_bounds().y <= 16 (18 vs. 16)" in str(died.value)
        assert compiler.given_up is not None
        assert "the same way twice" in compiler.given_up
        assert compiler.started == 2  # the first worker compiled, then died; one more
    finally:
        compiler.close()


@needs_libtpu
@pytest.mark.skipif(not LU_F64_REFUSED, reason="libtpu 0.0.50 and later compile a float64 LU")
def test_a_refused_compile_is_a_problem_in_every_format(pytester: pytest.Pytester) -> None:
    """Issue 55 item 4: a float64 solve under x64 the compiler refuses, outside must_lower,
    is a problem in the terminal, Markdown, HTML and SARIF, with the compiler's words at
    its line; the level is claimed only for what compiled."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        """,
        """
        import jax.numpy as jnp
        import pytest
        from kernels import solve, x64

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(solve, jnp.eye(16) * 2.0, jnp.ones((16, 2)))

        @pytest.mark.portable
        def test_solve_f64(jaxport):
            with x64():
                a = jnp.eye(16, dtype=jnp.float64) * 2.0
                jaxport.check(solve, a, jnp.ones((16, 2), jnp.float64))
        """,
    )
    reports = ("r.md", "r.html", "r.sarif")
    result = pytester.runpytest(
        "-p", "no:randomly", *(f"--jaxport-report={r}" for r in reports), "--jaxport-report"
    )
    result.assert_outcomes(passed=2)
    line = f"kernels.py:{line_of('jnp.linalg.solve')}"
    result.stdout.fnmatch_lines(
        [
            "problems: 0 failed, 0 budget violations, 1 finding that fails no test",
            "  tpu: does not compile — 1 check in 1 test (nothing counted at the compiled *",
            "    test_tpu.py::test_solve_f64  'solve': *RuntimeError: UNIMPLEMENTED: Only F32 and*",
            f"      *(at {line})",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*levels: compiled for tpu (1 of 2: 1 did not compile); lowered elsewhere"]
    )
    for name in ("r.md", "r.html"):
        page = (pytester.path / name).read_text()
        assert "does not compile" in page, name
        assert "Only F32 and C64 types" in page, name
    sarif = json.loads((pytester.path / "r.sarif").read_text())
    [found] = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "does-not-compile"]
    place = found["locations"][0]["physicalLocation"]
    assert (place["artifactLocation"]["uri"], place["region"]["startLine"]) == (
        "kernels.py",
        int(line.rpartition(":")[2]),
    )


@needs_libtpu
@pytest.mark.skipif(not LU_F64_REFUSED, reason="libtpu 0.0.50 and later compile a float64 LU")
def test_a_refused_compile_is_an_audit_finding_and_its_row_one_level(
    pytester: pytest.Pytester,
) -> None:
    """Issue 55 items 13 and 16: the audit of a suite whose float64 solve libtpu refuses
    finds it (``audit.findings``, the terminal, the HTML) with the compiler's reason at its
    line; the tpu row counts the computations that compiled at the compiled level only, its
    sites add up to its calls, and what did not compile is said apart."""
    _project(
        pytester,
        """
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        """,
        """
        import jax
        import jax.numpy as jnp
        from kernels import solve, x64

        def test_f32():
            jax.jit(solve)(jnp.eye(16) * 2.0, jnp.ones((16, 2)))

        def test_f64():
            with x64():
                a = jnp.eye(16, dtype=jnp.float64) * 2.0
                jax.jit(solve)(a, jnp.ones((16, 2), jnp.float64))
        """,
    )
    result = pytester.runpytest(
        "-p", "no:randomly", "--jaxport-audit", "--jaxport-compile=tpu",
        "--jaxport-report=a.json", "--jaxport-report=a.html", "--jaxport-report",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    line = f"kernels.py:{line_of('jnp.linalg.solve')}"
    audit = json.loads((pytester.path / "a.json").read_text())["audit"]
    [finding] = audit["findings"]
    assert (finding["platform"], finding["kind"]) == ("tpu", "compile")
    assert "Only F32 and C64 types are implemented in LuDecomposition" in finding["reason"]
    assert finding["reason"].endswith(f"(at {line})")
    result.stdout.fnmatch_lines(
        [
            "problems: 1 finding that fails no test",
            "  audit: tpu: does not compile — 1 computation in 1 test *",
            "*Only F32 and C64 types are implemented in LuDecomposition*",
        ]
    )
    page = (pytester.path / "a.html").read_text()
    assert "does not compile" in page
    assert "Only F32 and C64 types" in page
    tpu = audit["summary"]["platforms"]["tpu"]
    assert (tpu["compiled"], tpu["failed_to_compile"]) == (tpu["lowered"] - 1, 1)
    compiled = [
        c["platforms"]["tpu"]["compiled"]
        for c in audit["computations"]
        if c["platforms"]["tpu"]["compiled"] is not None
    ]
    assert tpu["libraries"] == {"libtpu": sum(c["vendor"] for c in compiled)}
    sites = [s for s in audit["sites"] if s["platform"] == "tpu" and s["layer"] == "vendor"]
    assert sum(s["count"] for s in sites) == tpu["vendor"]
    assert tpu["vendor_sites"] == len(sites)
    assert not {s["name"] for s in sites} & {"LuDecomposition", "stablehlo.triangular_solve"}
    said = " ".join(result.stdout.str().split())
    levels = f"levels: compiled for tpu ({tpu['compiled']} of {tpu['lowered']}: 1 did not compile)"
    assert levels in said
    assert "tpu: 1 computation did not compile: not in the calls and sites" in said
