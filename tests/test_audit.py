"""Tests of the suite audit: pytest_jaxport.recorder, session.recording, report.audit_ledger.

``pytest --jaxport-audit``: an unchanged suite audited, for real, through pytester.

Real JAX throughout: each inner suite jits, runs eager ``jnp`` code and host callbacks the way
ordinary test suites do, and nothing in it knows about pytest-jaxport.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from helpers import LIBRARY_WITH_HIDDEN_CALLBACK, esc, run_json, typed

from pytest_jaxport.cli import main
from pytest_jaxport.model.cost import CostModel
from pytest_jaxport.report.audit_ledger import merge_audits
from pytest_jaxport.report.files import without_timings
from pytest_jaxport.report.summary import Pricing

PLATFORMS = '[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n'
CHOLESKY = "potrf" if jax.__version_info__ >= (0, 8) else "solver"
"""What a cuda site of a Cholesky factorization names: its cuSOLVER routine (jax 0.6 and 0.7
lower it to ``stablehlo.cholesky``, an op, so the site names its kind)."""

SUITE = """
import functools

import jax
import jax.numpy as jnp
import pytest


@jax.jit
def inner(x):
    return jnp.tanh(x)


@jax.jit
def mlp(w, x):
    return inner(x @ w) @ w.T


@functools.partial(jax.jit, static_argnames=("steps",), donate_argnums=(1,))
def solve(a, b, steps):
    for _ in range(steps):
        b = jnp.linalg.solve(a, b)
    return b


@pytest.fixture
def weights():
    return jnp.ones((8, 8))


def test_mlp(weights):
    assert mlp(weights, jnp.ones((4, 8))).shape == (4, 8)


def test_mlp_again(weights):
    assert mlp(weights, jnp.ones((4, 8))).shape == (4, 8)


def test_solve():
    assert solve(jnp.eye(4) * 2, jnp.ones(4), steps=2).shape == (4,)


def test_eager_cholesky():
    a = jnp.eye(3) * 4.0
    assert jnp.linalg.cholesky(a)[0, 0] == 2.0


def test_fails():
    assert mlp(jnp.ones((2, 2)), jnp.ones((1, 2)))[0, 0] == 0.0


@pytest.mark.skip(reason="not today")
def test_skipped():
    mlp(jnp.ones((2, 2)), jnp.ones((1, 2)))


@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    assert inner(jnp.zeros(3))[0] == 1.0


@pytest.fixture
def broken():
    raise RuntimeError("fixture error")


def test_errors(broken):
    pass


def test_callback():
    @jax.jit
    def noisy(x):
        jax.debug.print("x={x}", x=x)
        return x * 2

    assert noisy(jnp.ones(2))[0] == 2.0
"""

OUTCOMES = {"passed": 5, "failed": 1, "skipped": 1, "xfailed": 1, "errors": 1}


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def audit_of(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest("--jaxport-audit", "--jaxport-report=report.json", *args)
    report = json.loads((pytester.path / "report.json").read_text())
    return result, report["audit"]


def install_library(pytester: pytest.Pytester, name: str, source: str) -> None:
    """Package ``name`` (an ``__init__.py`` of ``source``) importable from a ``site-packages``
    folder, as an installed library is: its lines are a library's, not the user's."""
    folder = pytester.path / "venv" / "site-packages" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(source)
    pytester.syspathinsert(folder.parent)


def by_function(audit: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [c for c in audit["computations"] if c["function"] == name]


@pytest.mark.slow
def test_an_unchanged_suite_is_audited_and_no_outcome_changes(suite: pytest.Pytester) -> None:
    plain = suite.runpytest()
    plain.assert_outcomes(**OUTCOMES)
    result, audit = audit_of(suite)
    result.assert_outcomes(**OUTCOMES)
    assert result.ret == plain.ret == pytest.ExitCode.TESTS_FAILED

    # mlp is one computation per signature; inner is part of it, not a computation of its own
    mlps = {c["signature"][1]: c for c in by_function(audit, "mlp")}
    mlp_4x8, mlp_2x2 = mlps["x: float32[4,8]"], mlps["x: float32[1,2]"]
    # inner runs at the top level only in test_xfail; inside mlp it is part of mlp
    assert [c["owner"] for c in by_function(audit, "inner")] == ["test_suite.py::test_xfail"]
    assert mlp_4x8["signature"] == ["w: float32[8,8]", "x: float32[4,8]"]
    assert mlp_4x8["owner"] == "test_suite.py::test_mlp"
    assert mlp_4x8["users"] == ["test_suite.py::test_mlp", "test_suite.py::test_mlp_again"]
    assert mlp_2x2["users"] == ["test_suite.py::test_fails"]  # the skipped test ran nothing
    assert mlp_4x8["kind"] == "jit"
    assert mlp_4x8["source"] == "test_suite.py:13"
    # cuBLAS for both dots, counted where the dots are written
    cuda = mlp_4x8["platforms"]["cuda"]["lowered"]
    assert cuda["libraries"] == {"cublas": 2}
    assert {k["location"] for k in cuda["kernels"]} == {"test_suite.py:15"}

    (solve,) = by_function(audit, "solve")
    assert solve["static_arguments"] == "steps=2"
    assert solve["donated"] == [1]
    assert "cusolver" in solve["platforms"]["cuda"]["lowered"]["libraries"]
    assert solve["platforms"]["cpu"]["present"] is True

    # op-by-op jnp outside jit: eager computations, with their vendor calls
    eager = [c for c in audit["computations"] if c["kind"] == "eager"]
    assert any(c["function"] == "cholesky" for c in eager)
    cholesky = next(c for c in eager if c["function"] == "cholesky")
    assert cholesky["owner"] == "test_suite.py::test_eager_cholesky"
    assert "lapack" in cholesky["platforms"]["cpu"]["lowered"]["libraries"]

    seen = audit["seen"]
    assert seen["computations"] == len(audit["computations"])
    assert seen["tests"] == 9
    assert audit["tests"]["test_suite.py::test_mlp_again"]["owns"] == []
    assert mlp_4x8["id"] in audit["tests"]["test_suite.py::test_mlp_again"]["uses"]
    assert audit["interception"]["hooked"] is True
    result.stdout.fnmatch_lines(
        ["*= jaxport portability report =*", "suite audit (--jaxport-audit): *"]
    )


@pytest.mark.slow
def test_the_audit_counts_exactly_what_jaxport_check_counts(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        models="""
        import jax
        import jax.numpy as jnp

        def step(a, b):
            x = jnp.linalg.solve(a @ a.T + jnp.eye(4), b)
            return jnp.fft.rfft(x).real.sum() + jnp.linalg.eigh(a)[0].sum()
        """,
        test_same="""
        import jax
        import jax.numpy as jnp
        import pytest
        from models import step

        A, B = jnp.arange(16.0).reshape(4, 4) / 16, jnp.ones(4)

        @pytest.mark.portable
        def test_checked(jaxport):
            jaxport.check(step, A, B)

        def test_jitted():
            jax.jit(step)(A, B)
        """,
    )
    pytester.syspathinsert()
    result, report = run_json(pytester, "--jaxport-audit")
    result.assert_outcomes(passed=2)
    (checked,) = report["tests"][0]["checks"]
    (audited,) = [c for c in report["audit"]["computations"] if c["function"] == "step"]
    for platform in ("cpu", "cuda", "rocm", "tpu"):
        ours, theirs = audited["platforms"][platform], checked["platforms"][platform]
        assert ours["lowered"] == theirs["lowered"], platform
        assert ours["error"] == theirs["error"]


@pytest.mark.slow
def test_host_callbacks_lower_everywhere_as_meta_at_their_line(suite: pytest.Pytester) -> None:
    """A recorded computation with ``jax.debug.print`` lowers for the platforms not present
    as well (its callback made inert, as a check's is), the callback counted in ``meta`` at
    the line of the print: no finding."""
    _, audit = audit_of(suite)
    (noisy,) = by_function(audit, "noisy")
    source = (suite.path / "test_suite.py").read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if "jax.debug.print" in text)
    assert noisy["host_callbacks"]
    assert noisy["findings"] == []
    for platform in ("cpu", "cuda", "rocm", "tpu"):
        lowered = noisy["platforms"][platform]["lowered"]
        assert lowered is not None, platform
        assert lowered["meta"] >= 1, platform
        callbacks = [k for k in lowered["kernels"] if k["kind"] == "host-callback"]
        assert callbacks, platform
        assert {k["location"] for k in callbacks} == {f"test_suite.py:{line}"}, platform
    assert audit["summary"]["platforms"]["cuda"]["failed_to_lower"] == 0


@pytest.mark.slow
def test_a_callback_inside_a_librarys_primitive_is_no_failure_to_lower(
    pytester: pytest.Pytester,
) -> None:
    """The recorded jaxpr shows the library's primitive, not the callback its lowering binds
    (lineax's ``linear_solve`` with equinox's ``error_if``): every platform lowers, the LU
    factorisation is cuSOLVER's on cuda as it is LAPACK's on cpu, no finding."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(library=LIBRARY_WITH_HIDDEN_CALLBACK)
    pytester.makepyfile(
        test_solve="""
        import jax, jax.numpy as jnp
        from library import solve

        def test_solve():
            assert jnp.allclose(jax.jit(solve)(jnp.eye(3) * 2, jnp.ones(3)), 1.0)
        """
    )
    pytester.syspathinsert()
    result, audit = audit_of(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*does not lower*")
    (solve,) = by_function(audit, "solve")
    assert solve["findings"] == []
    assert solve["host_callbacks"] == ["pure_callback"]
    solvers = {"cpu": "lapack", "cuda": "cusolver", "rocm": "hipsolver"}
    for platform, library in solvers.items():
        lowered = solve["platforms"][platform]["lowered"]
        assert lowered["libraries"].get(library, 0) >= 1, platform
    assert solve["platforms"]["tpu"]["lowered"]["meta"] == 1
    assert all(t["failed_to_lower"] == 0 for t in audit["summary"]["platforms"].values())


@pytest.mark.slow
def test_a_lowering_rule_written_in_python_is_traced_once_per_call(
    pytester: pytest.Pytester,
) -> None:
    """A primitive whose lowering rule is a Python function (``mlir.lower_fun``: equinox's
    primitives, lineax's solve, TPU's SVD) is traced when JAX lowers the call to run it; the
    audit lowering the same call for the other platforms reuses that trace instead of tracing
    it again (about a quarter of the audit's cold CPU on lineax's solves), and each platform
    still gets its own kernels from it."""
    library = LIBRARY_WITH_HIDDEN_CALLBACK.replace(
        "def _checked_solve(a, b):\n",
        "TRACES = []\n\n\ndef _checked_solve(a, b):\n    TRACES.append(a.shape)\n",
    )
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(library=library)
    pytester.makepyfile(
        test_solve="""
        import jax, jax.numpy as jnp
        from library import TRACES, solve

        def test_solve():
            jax.jit(solve)(jnp.eye(3) * 2, jnp.ones(3))
            jax.jit(solve)(jnp.eye(4) * 2, jnp.ones(4))
            assert TRACES == [(3, 3), (4, 4)]  # as many as without the audit
        """
    )
    pytester.syspathinsert()
    assert pytester.runpytest_subprocess("-p", "no:jaxport").ret == pytest.ExitCode.OK
    result, audit = audit_of(pytester)
    result.assert_outcomes(passed=1)
    solves = by_function(audit, "solve")
    assert len(solves) == 2
    solvers = {"cpu": "lapack", "cuda": "cusolver", "rocm": "hipsolver"}
    for solve in solves:
        for platform, library_name in solvers.items():
            lowered = solve["platforms"][platform]["lowered"]
            assert lowered["libraries"].get(library_name, 0) >= 1, (platform, solve)


@pytest.mark.slow
def test_the_ini_setting_turns_it_on_and_the_terminal_shows_the_numbers(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS + "audit = true\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest()
    result.assert_outcomes(**OUTCOMES)
    result.stdout.fnmatch_lines(
        [
            "jaxport: audit on: recording every jitted computation*",
            "*= jaxport audit =*",
            "problems: none (every audited computation lowers on every platform; no suite budget:",
            "  [[]tool.jaxport.audit[]] fail_on sets none)",
            "",
            # the float32 dot at test_suite.py:15 is a format site too (TF32 on an H100)
            "where the lock-in lives on cuda: 6 distinct sites (5 vendor, 0 custom, 1 "
            "format/layout); top 5 by",
            "  estimated time",
            "  site * kernel * computations  tests  calls  time",
            "  test_suite.py:15  cublas gemm * 2      3      4 *",
            "  test_suite.py:21  cublas triangular-solve * 1      1      4 *",
            "  test_suite.py:21  *",
            "  test_suite.py:21  *",
            # each solver row names its routine (jax 0.6/0.7 lower cholesky to the op itself)
            f"  test_suite.py:44  cusolver {CHOLESKY}*",
            "",
            "layers (-v: in full):",
            "  JAX Python code (jit, grad, vmap): * of * computations lower on every configured*",
            "*",
            "1. runtime share (suite audit, each distinct computation once):",
            "*",
            "2. kernels to rewrite moving off cuda (distinct sites; suite audit): rocm 0, tpu 0",
            "*",
            "cuda  * 0 *cublas*",
            "*",
            "suite audit (--jaxport-audit): * distinct computations (* jit, * eager op-by-op) in 7"
            " of 9 tests;",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "  test_suite.py:21  jaxlib lu_pivots * 1      1      2 *",
            "  test_suite.py:21  cusolver getrf * 1      1      2 *",
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


@pytest.mark.slow
def test_serial_and_xdist_give_the_same_audit(suite: pytest.Pytester) -> None:
    audits = []
    for args in ([], ["-n", "0"], ["-n", "2"]):
        result = suite.runpytest_subprocess(
            "--jaxport-audit", "--jaxport-report=r.json", "-p", "no:cacheprovider", *args
        )
        result.assert_outcomes(**OUTCOMES)
        audit = json.loads((suite.path / "r.json").read_text())["audit"]
        audit["seen"].pop("calls")  # each worker's first call of a shared jit is a miss
        audits.append(without_timings(audit))
    assert audits[1] == audits[0]
    assert audits[2] == audits[0]


EAGER_SUITE = """
import jax
import jax.numpy as jnp

IMPORTED = jnp.cos(jnp.ones((4, 4)))  # run while collecting: counts in the first test too

@jax.jit
def step(x):
    return x @ x


def row_sums(r):
    return r.sum()


batched = jax.jit(jax.vmap(row_sums))  # JAX's wrapper of the suite's function: a jit of its


def test_first():
    assert step(jnp.cos(jnp.ones((4, 4)))).shape == (4, 4)
    assert batched(jnp.ones((4, 4))).shape == (4,)


def test_second():
    assert step(jnp.cos(jnp.ones((4, 4)))).shape == (4, 4)
    assert batched(jnp.ones((4, 4))).shape == (4,)
"""


@pytest.mark.slow
@pytest.mark.parametrize("eager_users", [None, "all"])
def test_an_eager_op_counts_in_the_first_test_that_ran_it_unless_all_are_asked_for(
    pytester: pytest.Pytester, eager_users: str | None
) -> None:
    """By default an eager op is counted in its owner only (JAX's fast path serves it in
    every later test); ``eager_users = "all"`` counts every test that runs it. A jitted
    function of the suite counts in every test either way."""
    table = "" if eager_users is None else f'[tool.jaxport.audit]\neager_users = "{eager_users}"\n'
    pytester.makefile(".toml", pyproject=PLATFORMS + table)
    pytester.makepyfile(test_eager=EAGER_SUITE)
    result, audit = audit_of(pytester)
    result.assert_outcomes(passed=2)
    both = ["test_eager.py::test_first", "test_eager.py::test_second"]
    (step,) = by_function(audit, "step")
    (batched,) = by_function(audit, "row_sums")
    assert batched["kind"] == "jit"
    assert batched["users"] == both
    (cos,) = by_function(audit, "cos")
    assert cos["kind"] == "eager"
    assert cos["outside_tests"]
    assert step["users"] == both
    assert audit["eager_users"] == (eager_users or "owner")
    second = audit["tests"]["test_eager.py::test_second"]["uses"]
    if eager_users == "all":
        assert cos["users"] == both
        assert cos["id"] in second
        assert "in the first test that ran it" not in result.stdout.str()
    else:
        assert cos["users"] == ["test_eager.py::test_first"]
        assert sorted(second) == sorted([step["id"], batched["id"]])
        words = " ".join(result.stdout.str().split())  # the terminal wraps at 100 columns
        assert "run by more than one test (an eager op: in the first test that ran it);" in words
    shared = {c["function"] for c in audit["computations"] if len(c["users"]) > 1}
    assert audit["seen"]["shared"] == len(shared)
    assert ("cos" in shared) == (eager_users == "all")


@pytest.mark.slow
def test_the_lowered_cache_makes_a_second_run_read_instead_of_lower(
    suite: pytest.Pytester,
) -> None:
    _, cold = audit_of(suite)
    _, warm = audit_of(suite)
    assert without_timings(warm) == without_timings(cold)
    folder = suite.path / ".pytest_cache" / "d" / "jaxport-lowered"
    entries = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    # one entry per computation (the host callback's too: it lowers inert), its census as
    # judged: what the warm run read; its programs are not kept besides (a file each)
    programs = [e for e in entries if "program" in e]
    judged = [e for e in entries if "judged" in e]
    assert programs == []
    assert len(judged) == cold["seen"]["computations"] > 0
    assert len(entries) == len(judged)


@pytest.mark.slow
def test_a_failure_to_lower_is_kept_and_not_lowered_again(pytester: pytest.Pytester) -> None:
    """A computation that does not lower for a platform (an eigendecomposition on tpu) is kept
    with its failure: a warm run reads the failure instead of lowering it again to fail the
    same way. (The kept reason is marked here, and the warm run reports the mark.)"""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_eig="""
        import jax
        import jax.numpy as jnp

        @jax.jit
        def eigenvalues(a):
            return jnp.linalg.eig(a)[0].real

        def test_eig():
            assert eigenvalues(jnp.eye(3)).shape == (3,)
        """
    )
    _, cold = audit_of(pytester)
    (failure,) = cold["findings"]
    assert failure["platform"] == "tpu", failure
    assert "eig" in failure["reason"], failure
    folder = pytester.path / ".pytest_cache" / "d" / "jaxport-lowered"
    (path,) = [p for p in folder.glob("*.json")
               if json.loads(p.read_text()).get("judged", {}).get("findings")]  # fmt: skip
    entry = json.loads(path.read_text())
    (kept,) = entry["judged"]["findings"]
    kept["reason"] = f"kept by the cold run: {kept['reason']}"
    path.write_text(json.dumps(entry))
    _, warm = audit_of(pytester)
    assert [f["reason"] for f in warm["findings"]] == [kept["reason"]]


@pytest.mark.slow
def test_a_warm_run_reads_each_census_as_judged_until_what_judges_it_changes(
    suite: pytest.Pytester,
) -> None:
    """A warm run reads each computation's census as judged (nothing lowered, classified or
    priced again); a classify hook, another GPU target or a cleared cache judges anew, and
    what it finds is what a cold run finds."""
    _, cold = audit_of(suite)
    folder = suite.path / ".pytest_cache" / "d" / "jaxport-lowered"
    for path in folder.glob("*.json"):  # keep the censuses as judged, drop the programs
        if "judged" not in json.loads(path.read_text()):
            path.unlink()
    _, warm = audit_of(suite)
    assert without_timings(warm) == without_timings(cold)
    assert all("judged" in json.loads(p.read_text()) for p in folder.glob("*.json"))

    def cuda_devices(audit: dict[str, Any]) -> set[str]:
        return {c["platforms"]["cuda"]["lowered"]["formats"]["device"]["name"]
                for c in audit["computations"]}  # fmt: skip

    # another GPU: cuda's formats are judged for it, read from no earlier run
    assert cuda_devices(cold) == {"NVIDIA H100 80GB HBM3"}
    suite.makefile(".toml", pyproject=PLATFORMS + 'target = "a100"\n')
    _, a100 = audit_of(suite)
    assert cuda_devices(a100) == {"NVIDIA A100-SXM4-80GB"}
    _, a100_cold = audit_of(suite, "--jaxport-cache-clear")
    assert without_timings(a100) == without_timings(a100_cold)

    # a classify hook judges every op itself: nothing judged is kept or read while it is there
    suite.makeconftest(
        """
        from pytest_jaxport import Classification

        def pytest_jaxport_classify(platform, op, target, level):
            if platform == "cuda" and op == "stablehlo.dot_general":
                return Classification(layer="custom", kind="in-house")
        """
    )
    _, hooked = audit_of(suite)
    mlps = [c["platforms"]["cuda"]["lowered"] for c in by_function(hooked, "mlp")]
    assert mlps
    assert all(m["custom"] == 2 for m in mlps), mlps  # x @ w and its @ w.T
    _, hooked_again = audit_of(suite)
    assert without_timings(hooked_again) == without_timings(hooked)


@pytest.mark.slow
def test_checks_inside_an_audited_suite_are_not_recorded_twice(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_checked="""
        import jax.numpy as jnp
        import pytest

        def gram(x):
            return x @ x.T

        @pytest.mark.portable
        def test_checked(jaxport):
            x = jnp.ones((3, 3))
            jaxport.check(gram, x, transforms=["vmap"])
        """
    )
    result, audit = audit_of(pytester)
    result.assert_outcomes(passed=1)
    # only the test's own jnp.ones: the check's tracing, lowering and runs are the plugin's
    assert {c["kind"] for c in audit["computations"]} == {"eager"}
    assert "gram" not in {c["function"] for c in audit["computations"]}
    assert audit["seen"]["compiled_outside"] == 0


prebound = jax.jit(lambda x: jnp.linalg.qr(x)[0])
"""A jit bound before the inner pytest run (and its plugin) started: still seen."""


@pytest.mark.slow
def test_a_jit_bound_before_the_plugin_loaded_is_seen(pytester: pytest.Pytester) -> None:
    module = types.ModuleType("jaxport_prebound")
    module.prebound = prebound  # type: ignore[attr-defined]
    sys.modules["jaxport_prebound"] = module
    prebound(jnp.eye(3))  # and already in JAX's dispatch cache
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_pre="""
        import jax.numpy as jnp
        from jaxport_prebound import prebound

        def test_pre():
            prebound(jnp.eye(3))
        """
    )
    try:
        result, audit = audit_of(pytester)
    finally:
        del sys.modules["jaxport_prebound"]
    result.assert_outcomes(passed=1)
    (qr,) = [c for c in audit["computations"] if c["function"] == "<lambda>"]
    assert "cusolver" in qr["platforms"]["cuda"]["lowered"]["libraries"]


@pytest.mark.slow
def test_fail_on_fails_the_session_once_and_no_test(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml",
        pyproject=PLATFORMS
        + "\n[tool.jaxport.audit.fail_on]\nmax_library_calls = {cusolver = 0}\n"
        + "\n[tool.jaxport.audit.fail_on.cuda]\nmax_vendor_calls = 1\n",
    )
    pytester.makepyfile(
        test_gate="""
        import jax
        import jax.numpy as jnp

        @jax.jit
        def step(a):
            return jnp.linalg.inv(a) @ a

        def test_innocent():
            assert step(jnp.eye(2) * 2).shape == (2, 2)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "problems: 2 suite audit failures (no test's)",
            "  audit: cuda: max_library_calls.cusolver — 1 suite violation (limit 0, set in*",
            "*",
            "    the audited suite  1 cusolver call",
            "  audit: cuda: max_vendor_calls — 1 suite violation (limit 1, set in*",
            "*",
            "    the audited suite  5 vendor calls",
        ]
    )
    # then once more, as the session's one failure, with the offending sites
    result.stdout.fnmatch_lines(
        [
            "jaxport audit: FAILED: 2 suite budget problems*no test failed for them",
            esc("cuda: 1 cusolver call > 0 (max_library_calls.cusolver, set in pyproject.toml ")
            + esc("[tool.jaxport.audit.fail_on]); lowered"),
            "    cusolver_getrf_ffi (cusolver) at test_gate.py:6",
            esc("cuda: 5 vendor calls > 1 (max_vendor_calls, set in pyproject.toml ")
            + esc("[tool.jaxport.audit.fail_on.cuda]); lowered"),
            "*",
            "*",
            "*",
            "    stablehlo.triangular_solve (cublas) x2 at test_gate.py:6",
        ]
    )
    assert result.stdout.str().count("jaxport audit: FAILED") == 1


def test_fail_on_within_limits_passes(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml",
        pyproject=PLATFORMS + "\n[tool.jaxport.audit]\nfail_on = {max_custom_calls = 0}\n",
    )
    pytester.makepyfile(
        test_ok="import jax.numpy as jnp\n\ndef test_ok():\n    jnp.ones(3) @ jnp.ones(3)\n"
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*FAILED*")


@pytest.mark.slow
def test_the_baseline_ratchets_audit_counts(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS + "audit = true\n")
    test = "import jax, jax.numpy as jnp\n\ndef test_mm():\n"
    test += "    jax.jit(lambda x: x @ x)(jnp.eye(2))\n"
    pytester.makepyfile(test_base=test)
    pytester.runpytest("--jaxport-baseline=base.json", "--jaxport-baseline-update")
    baseline = json.loads((pytester.path / "base.json").read_text())
    assert baseline["audit"]["platforms"]["cuda"]["library.cublas"] == 1
    same = pytester.runpytest("--jaxport-baseline=base.json")
    assert same.ret == pytest.ExitCode.OK

    grown = test + "    jnp.linalg.eigh(jnp.eye(2))\n"
    pytester.makepyfile(test_base=grown)
    result = pytester.runpytest("--jaxport-baseline=base.json")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "  audit: counts grew since the baseline — 8 counts (the session fails; no test does)",
            "*",
            "*",
            "    the audited suite  cuda: cusolver calls grew 0 -> 1 (+1) since the baseline",
            "*",
            "*",
            "*",
            "    the audited suite  tpu: libtpu calls grew 0 -> 1 (+1) since the baseline",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "jaxport audit: FAILED: 8 suite budget problems*",
            "*",
            "*",
            "*",
            "*",
            "cuda: cusolver calls grew 0 -> 1 (+1) since the baseline",
            "    vendor cusolver_syevd_ffi (cusolver) at test_base.py:5 x1 (new)",
        ]
    )


def test_a_baseline_without_audit_counts_says_so(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    pytester.runpytest("--jaxport-baseline=base.json", "--jaxport-baseline-update")
    result = pytester.runpytest("--jaxport-audit", "--jaxport-baseline=base.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*has no audit counts: not compared*"])


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('audit = "yes"', "[tool.jaxport] audit: expected a boolean (true or false) or a table"),
        (
            "[tool.jaxport.audit]\nfail_onn = {}",
            "[tool.jaxport.audit]: unknown key 'fail_onn' (did you mean 'fail_on'?)",
        ),
        (
            "[tool.jaxport.audit]\nfail_on = {max_custom_calls = -1}",
            "[tool.jaxport.audit.fail_on] max_custom_calls: expected a non-negative integer",
        ),
        (
            "[tool.jaxport.audit.fail_on]\nmax_tooling_assumptions = 1",
            "[tool.jaxport.audit.fail_on] max_tooling_assumptions: expected only in "
            "[tool.jaxport.budget]",
        ),
        (
            "[tool.jaxport.audit]\nenabled = 1",
            "[tool.jaxport.audit] enabled: expected a boolean (true or false), found int 1",
        ),
        (
            '[tool.jaxport.audit]\neager_users = "every"',
            '[tool.jaxport.audit] eager_users: expected "owner" or "all", found string \'every\'',
        ),
        (
            'own_packages = "lineax"',
            "[tool.jaxport] own_packages: expected a list of package import names",
        ),
        (
            'own_packages = ["line-ax"]',
            '[tool.jaxport] own_packages: expected package import names such as "lineax" '
            "(the name you import), found 'line-ax'",
        ),
    ],
)
def test_bad_audit_configuration_is_a_usage_error(
    pytester: pytest.Pytester, table: str, message: str
) -> None:
    section = table if table.startswith("[") else f"[tool.jaxport]\n{table}"
    pytester.makefile(".toml", pyproject=section + "\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: jaxport: pyproject.toml: {esc(message)}*"])


@pytest.mark.slow
def test_show_merge_and_diff_read_audit_reports(
    suite: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    audit_of(suite)
    report = str(suite.path / "report.json")
    for fmt, expected in (("text", "suite audit (--jaxport-audit):"),
                          ("md", "### Suite audit"), ("html", '<section id="audit" ')):  # fmt: skip
        assert main(["show", report, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert expected in out
        assert "test_suite.py" in out
    merged = str(suite.path / "merged.json")
    assert main(["merge", report, "-o", merged]) == 0  # (the same leg twice is refused)
    assert json.loads((suite.path / "merged.json").read_text())["audit"]["seen"]["computations"]
    assert main(["diff", report, report]) == 0
    capsys.readouterr()


GATED = """
import jax
import jax.numpy as jnp


@jax.jit
def step(a):
    return jnp.linalg.inv(a) @ a


def test_owner():
    assert step(jnp.eye(2) * 2).shape == (2, 2)


def test_user():
    assert step(jnp.eye(2) * 3).shape == (2, 2)


def test_eager():
    assert jnp.linalg.cholesky(jnp.eye(3) * 4.0)[0, 0] == 2.0
"""


@pytest.mark.slow
def test_every_format_renders_the_audit_from_the_one_view(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makefile(
        ".toml",
        pyproject=PLATFORMS + "\n[tool.jaxport.audit]\nfail_on = {max_library_calls = "
        "{cusolver = 0}}\n",
    )
    pytester.makepyfile(test_gate=GATED)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    outputs = {}
    for fmt in ("md", "html", "json"):
        result = pytester.runpytest("--jaxport-audit", f"--jaxport-report=r.{fmt}", "-v")
        result.assert_outcomes(passed=3)
        assert result.ret == pytest.ExitCode.TESTS_FAILED  # the suite's budget, no test
        outputs[fmt] = (pytester.path / f"r.{fmt}").read_text()
    terminal = result.stdout.str()
    # terminal: problems first, the audit's three numbers as the headline, per test at -v
    result.stdout.fnmatch_lines(
        [
            "*= jaxport portability report =*",
            "suite audit, per test: it owns the computations it ran first*",
            "  test_gate.py::test_owner: owns * (step *",
            "  test_gate.py::test_user: uses * (step * of test_gate.py::test_owner*",
            "  test_gate.py::test_eager: owns *",
            "problems: 1 suite audit failure (no test's)",
            "  audit: cuda: max_library_calls.cusolver — 1 suite violation (limit 0, *",
            "*",
            "    the audited suite  2 cusolver calls",
        ]
    )
    assert terminal.index("problems: 1 suite audit failure") < terminal.index(
        "1. runtime share (suite audit, each distinct computation once):"
    )
    result.stdout.fnmatch_lines(
        ["  site * kernel * computations  tests  calls  time", "  test_gate.py:7 * cusolver *"]
    )
    # Markdown (the file and the CI step summary): the same problems first, then the numbers
    for text in (outputs["md"], summary.read_text()):
        assert "**Suite audit: " in text
        assert "audit: cuda: max_library_calls.cusolver" in text
        problems = text.index("### Problems")
        assert problems < text.index("### The three numbers (suite audit: each distinct")
        assert problems < text.index("### Suite audit (`--jaxport-audit`)")
        assert "| site | kernel | computations | tests | calls | time |" in text
    # HTML: the problems section holds the audit's failure; the audit's own section its tests
    html = outputs["html"]
    assert '<span class="label">audited computations</span>' in html
    assert '<span class="label">suite audit failures</span>' in html
    problems = html.index('<section id="problems"')
    assert (
        problems
        < html.index("audit: cuda: max_library_calls.cusolver")
        < html.index('<section id="numbers"')
    )
    assert "The three numbers (suite audit)" in html
    assert '<th scope="col" class="num">computations</th>' in html
    audit_section = html[html.index('<section id="audit"') :]
    assert "<code>test_gate.py::test_user</code>" in audit_section
    assert "of test_gate.py::test_owner" in audit_section
    # JSON: the judgement and the sites as data, read back into the same view by `show`
    audit = json.loads(outputs["json"])["audit"]
    (violation,) = audit["violations"]
    assert (violation["platform"], violation["key"]) == ("cuda", "max_library_calls.cusolver")
    (site,) = [s for s in audit["sites"] if s["platform"] == "cuda" and "cusolver" in
               (s["library"] or "") and s["location"] == "test_gate.py:7"]  # fmt: skip
    assert (site["computations"], site["tests"]) == (1, 2)
    assert main(["show", str(pytester.path / "r.json"), "--format", "md"]) == 0


@pytest.mark.slow
def test_a_run_with_checks_shows_the_audits_numbers_next_to_theirs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_both=GATED
        + """

import pytest


@pytest.mark.portable
def test_checked(jaxport):
    jaxport.check(lambda x: jnp.tanh(x) @ x, jnp.ones((4, 4)))
"""
    )
    result = pytester.runpytest("--jaxport-audit", "--jaxport-report=r.md", "-v")
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK
    text = result.stdout.str()
    checks = text.index("1. runtime share (suite, time-weighted):")
    audit = text.index("the suite audit's numbers (each distinct computation the suite ran")
    assert checks < audit < text.index("1. runtime share (suite audit, each distinct computation")
    result.stdout.fnmatch_lines(["*1 portable test, 1 check*"])
    md = (pytester.path / "r.md").read_text()
    assert md.index("### The three numbers\n") < md.index("#### The three numbers (suite audit")


@pytest.mark.slow
def test_merge_unions_legs_audits_and_diff_shows_audit_changes(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_gate=GATED
        + """

def test_eigh():
    assert step(jnp.eye(2) * 2).shape == (2, 2)
    assert jnp.linalg.eigh(jnp.eye(2))[0].shape == (2,)
"""
    )

    def leg(name: str, *select: str) -> dict[str, Any]:
        result = pytester.runpytest("--jaxport-audit", f"--jaxport-report={name}.json", *select)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        return json.loads((pytester.path / f"{name}.json").read_text())["audit"]

    whole = leg("whole")
    first = leg("first", "-k", "test_owner or test_eager")
    second = leg("second", "-k", "test_user or test_eigh")
    step = {c["id"] for c in whole["computations"] if c["function"] == "step"}
    assert {c["id"] for c in first["computations"]} & {c["id"] for c in second["computations"]}
    assert step <= {c["id"] for c in second["computations"]}
    out = str(pytester.path / "merged.json")
    assert main(["merge", str(pytester.path / "first.json"), str(pytester.path / "second.json"),
                 "-o", out, "--md", str(pytester.path / "merged.md")]) == 0  # fmt: skip
    capsys.readouterr()
    merged = json.loads((pytester.path / "merged.json").read_text())["audit"]
    # one computation both legs ran counts once: the union is the whole suite's audit
    assert len(merged["computations"]) == len(whole["computations"])
    assert merged["seen"]["computations"] < (
        first["seen"]["computations"] + second["seen"]["computations"]
    )
    for key in ("summary", "sites", "tests", "findings"):
        assert without_timings(merged[key]) == without_timings(whole[key]), key
    (merged_step,) = [c for c in merged["computations"] if c["id"] in step]
    assert merged_step["owner"] == "test_gate.py::test_owner"
    assert merged_step["users"] == [
        "test_gate.py::test_owner", "test_gate.py::test_user", "test_gate.py::test_eigh"
    ]  # fmt: skip
    assert merged["legs"] == ["first.json", "second.json"]
    # jnp.eye(2) * 2 ran eagerly in both legs: one user, the first leg's (its owner)
    assert merged["eager_users"] == "owner"
    (mul,) = [c for c in merged["computations"] if c["function"] == "multiply"
              and c["signature"][0] == "x: float32[2,2]"]  # fmt: skip
    assert mul["users"] == ["test_gate.py::test_owner"]
    assert "### Suite audit" in (pytester.path / "merged.md").read_text()
    # diff: the first leg against the union grew by eigh's solver, at its line
    assert main(["diff", str(pytester.path / "first.json"), out]) == 1
    text = capsys.readouterr().out
    assert "; suite audit: " in text
    assert "suite audit grew:" in text
    assert "  cuda: cusolver calls grew 2 -> 3 (+1)" in text
    assert "    vendor cusolver_syevd_ffi (cusolver) at test_gate.py:24 x1 (new)" in text
    assert "suite audit, new sites:" in text
    assert main(["diff", out, str(pytester.path / "first.json")]) == 0  # shrinking passes
    assert "suite audit shrank:" in capsys.readouterr().out
    assert main(["diff", out, out]) == 0
    assert "suite audit: 0 grew, 0 shrank, 0 new sites, 0 removed sites" in (
        capsys.readouterr().out
    )


NO_TPU_EIG = """
import jax
import jax.numpy as jnp
import pytest


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_eig(n):
    assert jax.jit(lambda a: jnp.linalg.eig(a)[0])(jnp.eye(n)).shape == (n,)


def test_eig_squared():
    assert jax.jit(lambda a: jnp.linalg.eig(a @ a)[0])(jnp.eye(3)).shape == (3,)
"""
"""Six computations that do not lower for tpu (no eig there), all for the same reason."""


@pytest.mark.slow
def test_one_reason_is_one_row_with_the_reason_whole(pytester: pytest.Pytester) -> None:
    """Six computations failing tpu the same way are one row saying how many and in which
    tests, the reason whole (never cut), in the terminal (``-q`` included), the Markdown and
    the HTML; the JSON keeps each computation's finding."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_eig=NO_TPU_EIG)
    outputs, terminal = {}, {}
    for fmt, verbosity in (("json", ""), ("md", "-q"), ("html", "-v")):
        args = ["--jaxport-audit", f"--jaxport-report=r.{fmt}"] + ([verbosity] if verbosity else [])
        result = pytester.runpytest(*args)
        result.assert_outcomes(passed=6)
        outputs[fmt] = (pytester.path / f"r.{fmt}").read_text()
        terminal[verbosity] = result.stdout.lines
    findings = json.loads(outputs["json"])["audit"]["findings"]
    assert [f["platform"] for f in findings] == ["tpu"] * 6
    (reason,) = {f["reason"] for f in findings}
    assert "eig" in reason
    for verbosity, lines in terminal.items():
        start = lines.index("problems: 6 findings that fail no test")
        section = lines[start : lines.index("", start)]
        assert section[1].startswith("  audit: tpu: does not lower — 6 computations in 6 tests")
        rows = [line for line in section if line.startswith("    ") and line[4] != " "]
        assert len(rows) == 1, (verbosity, section)
        assert rows[0].startswith("    6 computations in 6 tests (test_eig.py::test_eig[2], ")
        said = " ".join(line.strip() for line in section[section.index(rows[0]) + 1 :])
        assert reason in said, verbosity  # whole: wrapped, never cut
        assert not any("…" in line for line in section), verbosity
        assert all(len(line) <= 100 for line in section), verbosity
    markdown = outputs["md"]
    table = markdown[markdown.index("| test | check |") : markdown.index("### The three")]
    assert table.count(reason) == 1
    assert "`test_eig.py::test_eig[2]` and 5 more tests | 6 computations | tpu |" in table
    html = outputs["html"]
    problems = html[html.index('<section id="problems"') : html.index('<section id="numbers"')]
    assert problems.count("<tr title=") == 1
    assert problems.count(esc_html(reason)) == 1
    assert "and 5 more tests" in problems


def esc_html(text: str) -> str:
    import html

    return html.escape(text, quote=True)


@pytest.mark.slow
def test_an_audit_only_html_report_speaks_of_the_audit(pytester: pytest.Pytester) -> None:
    """No portable test ran: the HTML says what the audit found, not what checks did."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest("--jaxport-audit", "--jaxport-report=clean.html", "-k", "mlp")
    clean = (pytester.path / "clean.html").read_text()
    assert "None: every audited computation lowers on every platform" in clean
    assert "portable test is within budget" not in clean
    assert "No portable tests ran." not in clean
    assert "this run audited the suite as it is" in clean
    assert "<title>pytest-jaxport suite audit: " in clean
    pytester.makepyfile(test_eig=NO_TPU_EIG)
    pytester.runpytest("--jaxport-audit", "--jaxport-report=eig.html", "test_eig.py")
    found = (pytester.path / "eig.html").read_text()
    assert (
        "no suite audit budget: [tool.jaxport.audit] fail_on sets none; 6 computations do not "
        "lower everywhere"
    ) in found
    assert "computations that do not lower for a platform, one row per reason" in found
    assert "checks that do not lower or run" not in found
    assert '<span class="label">findings that fail no test</span>' in found


@pytest.mark.slow
def test_quiet_audit_keeps_its_numbers_and_claims_no_budget_nobody_set(
    pytester: pytest.Pytester,
) -> None:
    """``-q --jaxport-audit`` keeps one line of what the audit counted, per platform, and says
    the suite is within its audit budget only where ``[tool.jaxport.audit] fail_on`` set one
    (issue 39: a new user read "problems: none (... within its audit budget)" with none set)."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-q", "--jaxport-audit", "-k", "mlp")
    result.assert_outcomes(passed=2)
    said = " ".join(result.stdout.str().split())
    assert (
        "problems: none (every audited computation lowers on every platform; no suite budget: "
        "[tool.jaxport.audit] fail_on sets none)"
    ) in said
    assert "within its audit budget" not in said
    numbers = re.search(r"suite audit: (\d+) distinct computations \(1 jit, \d+ eager op-by-op\); "
                        r"lowered: cpu \1, cuda \1, rocm \1, tpu \1; vendor calls: cpu 0, cuda 2, "
                        r"rocm 2, tpu 0; custom calls: cpu 0, cuda 0, rocm 0, tpu 0; kernels to "
                        r"rewrite off cuda: rocm 0, tpu 0 platforms: ", said)  # fmt: skip
    assert numbers, said
    result = pytester.runpytest("-qq", "--jaxport-audit", "-k", "mlp")
    result.stdout.fnmatch_lines([
        f"jaxport audit: {numbers[1]} distinct computations (1 jit, * eager op-by-op); no problems "
        "(-q for the groups)"
    ])  # fmt: skip
    # A suite budget set: the report records it, and only then is the suite within it.
    pytester.makefile(
        ".toml", pyproject=PLATFORMS + "\n[tool.jaxport.audit.fail_on]\nmax_custom_calls = 0\n"
    )
    result, report = run_json(pytester, "-q", "--jaxport-audit", "-k", "mlp")
    assert report["audit"]["fail_on"] == {"max_custom_calls": 0}
    audit = typed(report).audit
    assert audit is not None
    unset = dataclasses.replace(audit, fail_on=None)  # a leg without one
    pricing = Pricing(migrate_to=("tpu",), model=CostModel())
    merged = merge_audits([("a.json", unset), ("b.json", audit)], pricing=pricing)
    assert merged.fail_on == {"max_custom_calls": 0}
    assert (
        "problems: none (every audited computation lowers on every platform, the suite within "
        "its audit budget)"
    ) in " ".join(result.stdout.str().split())
    # What does not lower is counted too.
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_eig=NO_TPU_EIG)
    result, report = run_json(pytester, "-q", "--jaxport-audit", "test_eig.py")
    assert "fail_on" not in report["audit"]
    computations = report["audit"]["seen"]["computations"]
    assert (
        f"lowered: cpu {computations}, cuda {computations}, rocm {computations}, tpu "
        f"{computations - 6} (6 failed); vendor calls: "
    ) in " ".join(result.stdout.str().split())


@pytest.mark.slow
def test_per_test_lists_name_jitted_computations_and_count_eager_ops(
    pytester: pytest.Pytester,
) -> None:
    """The terminal's per-test lists (``-v``) name the suite's jitted computations; the
    eager op-by-op ones, named after JAX's own functions, are counted; every line of the
    report section fits 100 columns."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_suite=SUITE)
    result, audit = audit_of(pytester, "-vv")
    eager = {c["function"] for c in audit["computations"] if c["kind"] == "eager"}
    assert "cholesky" in eager
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "jaxport portability report" in line)
    section = lines[start + 1 :]
    per_test = [line for line in section if line.startswith("  test_suite.py::")]
    assert per_test
    result.stdout.fnmatch_lines(["  test_suite.py::test_eager_cholesky: owns * eager op*"])
    listed = " ".join(per_test)
    assert not any(f"{name} [" in listed for name in eager - {"mlp", "inner", "solve"})
    assert "mlp [" in listed
    assert all(len(line) <= 100 for line in section if not line.startswith("=")), [
        line for line in section if len(line) > 100
    ]


def _installed_library(pytester: pytest.Pytester) -> None:
    """``hiddenlib`` as an installed package (under a ``site-packages`` folder): a jitted
    function around its own primitive, whose ops JAX traces only when lowering it."""
    install_library(
        pytester,
        "hiddenlib",
        LIBRARY_WITH_HIDDEN_CALLBACK + "\n\n@jax.jit\ndef jitted_solve(a, b):\n"
        "    return solve(a, b) @ a + 1\n",
    )
    pytester.makepyfile(
        test_lib="""
        import jax.numpy as jnp
        from hiddenlib import jitted_solve

        def test_solve():
            assert jitted_solve(jnp.eye(3) * 2, jnp.ones(3)).shape == (3,)
        """
    )


@pytest.mark.slow
def test_kernels_inside_an_installed_library_are_at_the_users_line(
    pytester: pytest.Pytester,
) -> None:
    """Every kernel of a computation run from an installed library lands on the line of the
    test that called into it, those JAX lowers inside the library's own primitive (whose
    locations stop inside the library) as well as the rest."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    _installed_library(pytester)
    _, audit = audit_of(pytester)
    (solve,) = by_function(audit, "jitted_solve")
    assert solve["source"] == "hiddenlib/__init__.py:31"
    for platform in ("cpu", "cuda", "rocm"):
        kernels = solve["platforms"][platform]["lowered"]["kernels"]
        assert len(kernels) >= 3, platform  # the callback, the LU factorisation, the solves
        assert {k["location"] for k in kernels} == {"test_lib.py:5"}, (platform, kernels)
    # so are its format findings (the float32 dot at the default precision)
    findings = solve["platforms"]["tpu"]["lowered"]["formats"]["findings"]
    assert "float32-default-precision" in {f["rule"] for f in findings}
    assert {f["location"] for f in findings} == {"test_lib.py:5"}


@pytest.mark.slow
def test_own_packages_keep_their_own_lines(pytester: pytest.Pytester) -> None:
    """A library's developers list it in ``own_packages``: its lines are theirs, reported as
    such even where it runs installed."""
    pytester.makefile(".toml", pyproject=PLATFORMS + 'own_packages = ["hiddenlib"]\n')
    _installed_library(pytester)
    _, audit = audit_of(pytester)
    (solve,) = by_function(audit, "jitted_solve")
    cuda = solve["platforms"]["cuda"]["lowered"]["kernels"]
    assert {k["location"].rpartition(":")[0] for k in cuda} == {"hiddenlib/__init__.py"}
    assert "cusolver" in {k["library"] for k in cuda}
    findings = solve["platforms"]["tpu"]["lowered"]["formats"]["findings"]
    assert "float32-default-precision" in {f["rule"] for f in findings}
    assert {f["location"].rpartition(":")[0] for f in findings} == {"hiddenlib/__init__.py"}


@pytest.mark.slow
def test_the_users_code_a_library_calls_keeps_its_own_line(pytester: pytest.Pytester) -> None:
    """A library's jitted function that calls the user's code (a vector field, a loss): the
    kernels of the library's own ops are at the line that called the library, those of the
    user's function at the user's function's own line."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    install_library(
        pytester,
        "fieldlib",
        "import functools\n\nimport jax\nimport jax.numpy as jnp\n\n\n"
        "@functools.partial(jax.jit, static_argnums=0)\n"
        "def integrate(field, x):\n"
        "    return jnp.linalg.cholesky(field(x) @ field(x).T + jnp.eye(3))\n",
    )
    pytester.makepyfile(
        test_field="""
        import jax.numpy as jnp
        from fieldlib import integrate

        def field(x):
            return jnp.linalg.qr(x)[0]

        def test_integrate():
            assert integrate(field, jnp.eye(3) * 2).shape == (3, 3)
        """
    )
    _, audit = audit_of(pytester)
    (solve,) = by_function(audit, "integrate")
    kernels = solve["platforms"]["cuda"]["lowered"]["kernels"]
    lines = {k["kind"]: k["location"] for k in kernels}
    assert {k["location"] for k in kernels} == {"test_field.py:5", "test_field.py:8"}, kernels
    assert all(k["location"] == "test_field.py:8" for k in kernels if "potrf" in k["name"]), (
        lines
    )  # the library's Cholesky: at the call into the library


def test_a_kernel_whose_location_holds_only_a_librarys_lines_is_at_the_users_line(
    pytester: pytest.Pytester,
) -> None:
    """A kernel whose location holds no frame of the user's code (only an installed
    library's: lineax's solves inside equinox's primitives; here JAX keeps one frame a
    location) is at the line that called into the library, like every kernel of the
    computation; an own package keeps its line."""
    install_library(
        pytester,
        "deeplib",
        "import jax\n\n\ndef _inner(a):\n    return a @ a\n\n\n"
        "@jax.jit\ndef step(a):\n    return _inner(a) + 1.0\n",
    )
    pytester.makepyfile(
        test_deep="""
        import jax
        import jax.numpy as jnp
        import pytest
        from deeplib import step

        @pytest.fixture(autouse=True)
        def one_frame_a_location():
            before = jax.config.jax_include_full_tracebacks_in_locations
            jax.config.update("jax_include_full_tracebacks_in_locations", False)
            yield
            jax.config.update("jax_include_full_tracebacks_in_locations", before)

        def test_step():
            assert step(jnp.ones((4, 4))).shape == (4, 4)
        """
    )
    for own, expected in (("", "test_deep.py:14"), ('own_packages = ["deeplib"]\n', None)):
        pytester.makefile(".toml", pyproject=PLATFORMS + own)
        _, audit = audit_of(pytester, "--jaxport-cache-clear")
        (computation,) = by_function(audit, "step")
        cuda = computation["platforms"]["cuda"]["lowered"]["kernels"]
        lines = {k["location"] for k in cuda if k["library"] == "cublas"}
        assert lines == {expected or "deeplib/__init__.py:5"}, (own, cuda)


@pytest.mark.slow
def test_a_nested_jit_traced_earlier_is_at_this_calls_line(pytester: pytest.Pytester) -> None:
    """A library's inner jit traced once (in ``test_first``) and reused inside another
    computation (``test_second``'s, other types outside, the same inside): jax 0.6 keeps in
    the reused jaxpr the stack of the call that traced it, so the second computation's solver
    kernels were at ``test_first``'s line when both ran in one process and at
    ``test_second``'s when it ran alone (lineax's suite, serial against ``-n 2``). They are at
    the line of the call that ran them, whatever ran before."""
    install_library(
        pytester,
        "nestedlib",
        "import jax\nimport jax.numpy as jnp\n\n\n@jax.jit\ndef _inner(a):\n"
        "    return jnp.linalg.solve(a, a)\n\n\n@jax.jit\ndef outer(a, b):\n"
        "    return _inner(a) + b\n",
    )
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_nested="""
        import jax.numpy as jnp
        from nestedlib import outer

        A = jnp.eye(3) * 2.0

        def test_first():
            assert outer(A, jnp.ones((3, 3))).shape == (3, 3)

        def test_second():
            assert outer(A, jnp.ones((3,))).shape == (3, 3)
        """
    )
    for selection in ("test_nested.py", "test_nested.py::test_second"):
        _, audit = audit_of(pytester, "--jaxport-cache-clear", selection)
        (second,) = [c for c in by_function(audit, "outer") if "float32[3]" in str(c["signature"])]
        for platform, library in (("cpu", "lapack"), ("cuda", "cusolver")):
            kernels = second["platforms"][platform]["lowered"]["kernels"]
            found = {k["location"] for k in kernels if k["library"] == library}
            assert found == {"test_nested.py:10"}, (selection, platform, kernels)


def test_code_with_no_file_is_not_the_users_line(pytester: pytest.Pytester) -> None:
    """Code compiled under a name in angle brackets (``exec``, generated ``__init__``s) has no
    line a report could point at: a kernel traced through it, and an eager op it runs, land on
    the nearest frame that is the user's file."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_nofile="""
        import jax
        import jax.numpy as jnp

        namespace = {"jnp": jnp}
        exec(compile("def helper(a, b):\\n    return a @ b\\n", "<generated>", "exec"), namespace)
        helper = namespace["helper"]

        @jax.jit
        def step(a, b):
            return helper(a, b) + 1.0

        def test_step():
            assert step(jnp.ones((4, 4)), jnp.ones((4, 4))).shape == (4, 4)
            assert helper(jnp.ones((3, 3)), jnp.ones((3, 3))).shape == (3, 3)
        """
    )
    _, audit = audit_of(pytester)
    (step,) = by_function(audit, "step")
    cuda = step["platforms"]["cuda"]["lowered"]["kernels"]
    assert "cublas" in {k["library"] for k in cuda}, cuda
    assert {k["location"] for k in cuda if k["library"] == "cublas"} == {"test_nofile.py:10"}
    eager_cuda = [
        k
        for c in audit["computations"]
        if c["kind"] == "eager"
        for k in c["platforms"]["cuda"]["lowered"]["kernels"]
        if k["library"] == "cublas"
    ]
    assert eager_cuda, audit["computations"]  # the eager matmul helper ran in the test
    assert {k["location"] for k in eager_cuda} == {"test_nofile.py:14"}, eager_cuda


ORDER_DEPENDENT = """
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import mlir

try:
    from jax.extend.core import Primitive
except ImportError:  # jax without jax.extend.core
    from jax.core import Primitive

ORDER = int(os.environ.get("ORDER", "0"))


class Tag:
    # Hashes by address, as lineax's operator tags do; ORDER stands for another process's
    # addresses (a frozenset of them iterates in another order there).
    def __init__(self, name, rank):
        self.name, self.rank = name, rank

    def __repr__(self):
        return self.name

    def __hash__(self):
        return self.rank


TAGS = frozenset({Tag("symmetric_tag", 1 + ORDER), Tag("diagonal_tag", 2 - ORDER)})

scaled_p = Primitive("scaled")  # a library primitive whose parameters hold the tags
scaled_p.def_impl(lambda x, tags: x * 2)
scaled_p.def_abstract_eval(lambda x, tags: jax.core.ShapedArray(x.shape, x.dtype))
mlir.register_lowering(scaled_p, mlir.lower_fun(lambda x, tags: x * 2, multiple_results=False))


@jax.jit
def tagged(x, tags):
    return scaled_p.bind(x, tags=tags) + 1


tagged = jax.jit(tagged.__wrapped__, static_argnames="tags")


def test_tagged():
    assert tagged(jnp.ones(3), tags=TAGS).shape == (3,)


class Structure:
    # A static argument whose repr is long and holds the frozenset deep inside (as a
    # PyTreeDef of lineax's operators does): the report shortens it, the same in every run.
    def __init__(self, tags):
        self.tags = tags

    def __repr__(self):
        return f"Structure(leaves=[*, *, *, *], node=CustomNode(operator[{self.tags!r}]))"

    def __hash__(self):
        return 7

    def __eq__(self, other):
        return isinstance(other, Structure) and other.tags == self.tags


MANY = frozenset(Tag(f"tag{i}", (i * 5 + ORDER * 3) % 8) for i in range(8))


@jax.jit
def structured(x, spec, many):
    return x * 3


structured = jax.jit(structured.__wrapped__, static_argnames=("spec", "many"))


def test_structured():
    assert structured(jnp.ones(3), spec=Structure(TAGS), many=MANY).shape == (3,)


def test_split():
    # an eager split traced with NumPy integers or Python ints, whichever came first
    first, second = (2, 4), (np.int64(2), np.int64(4))
    for sizes in (first, second) if ORDER == 0 else (second, first):
        assert len(jax.lax.split(jnp.arange(6.0), sizes)) == 2
"""
"""A computation whose printed program and static arguments depend on memory addresses
(a frozenset of objects hashed by id) and one whose trace depends on which call came first."""


@pytest.mark.slow
def test_a_computations_identity_depends_on_no_address_or_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs whose frozensets iterate in other orders, and whose eager split is traced
    first with Python ints or first with NumPy integers, audit the same computations, with
    the same ids and the same static-argument text (as serial and ``-n 2`` runs must)."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_order=ORDER_DEPENDENT)
    audits = []
    for order in ("0", "1"):
        monkeypatch.setenv("ORDER", order)
        result, audit = audit_of(pytester, "-p", "no:cacheprovider")
        result.assert_outcomes(passed=3)
        audits.append(audit)
    (tagged,) = by_function(audits[0], "tagged")
    assert "frozenset({diagonal_tag, symmetric_tag})" in tagged["static_arguments"]
    structured = [by_function(audit, "structured")[0]["static_arguments"] for audit in audits]
    assert structured[0] == structured[1]
    assert "symmetric_tag})]))" in structured[0]  # sorted before it is shortened
    assert "frozenset({tag0, tag1, tag2, tag3, tag4, tag5, ...})" in structured[0]
    splits = [by_function(audit, "split") for audit in audits]
    assert len(splits[0]) == 1
    assert [c["id"] for c in splits[0]] == [c["id"] for c in splits[1]]
    ids = [sorted(c["id"] for c in audit["computations"]) for audit in audits]
    assert ids[0] == ids[1]
    statics = [{c["id"]: c["static_arguments"] for c in a["computations"]} for a in audits]
    assert statics[0] == statics[1]
    assert without_timings(audits[0]) == without_timings(audits[1])


@pytest.mark.slow
def test_an_xdist_worker_leaves_no_heap_for_its_last_collections(
    pytester: pytest.Pytester,
) -> None:
    """After its last test an audited worker has 5 seconds (pytest-xdist's) to exit; every
    garbage-collector pass of those last steps (another plugin's summary, pytest's final
    collection, each with JAX's collector hook) must not scan the heap JAX's caches and the
    audit's lowerings grew, or on a busy machine the worker is interrupted inside JAX's
    ``_xla_gc_callback`` and prints an unraisable KeyboardInterrupt."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest(
        """
        import gc, json, os

        def pytest_unconfigure(config):
            if hasattr(config, "workerinput"):
                name = f"heap-{config.workerinput['workerid']}.json"
                heap = {"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}
                with open(os.path.join(str(config.rootpath), name), "w") as f:
                    json.dump(heap, f)
        """
    )
    result = pytester.runpytest_subprocess("--jaxport-audit", "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(**OUTCOMES)
    result.stderr.no_fnmatch_line("*Unraisable*")
    heaps = [json.loads(p.read_text()) for p in sorted(pytester.path.glob("heap-gw*.json"))]
    assert len(heaps) == 2
    for heap in heaps:
        assert heap["frozen"] > 10 * heap["tracked"], heap


WARNS_AT_TRACE = """
import warnings

import jax
import jax.numpy as jnp


@jax.jit
def scaled(x):
    warnings.warn("complex support is a work in progress", UserWarning)
    return x * 2


def test_shapes():
    for n in range(1, 6):  # five traces, one warning place
        assert scaled(jnp.ones(n)).shape == (n,)
"""


@pytest.mark.slow
def test_the_audit_shows_the_suites_warnings_as_often_as_a_plain_run(
    pytester: pytest.Pytester,
) -> None:
    """A warning the suite's code gives at every trace is shown as often with the audit as
    without: the audit ignores warnings while it works without resetting Python's "shown
    once per place" registries (diffrax's complex-dtype warning was shown 10 times, not 2)."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(test_warns=WARNS_AT_TRACE)
    plain = pytester.runpytest("-p", "no:cacheprovider").parseoutcomes()
    audited = pytester.runpytest("-p", "no:cacheprovider", "--jaxport-audit").parseoutcomes()
    assert plain["passed"] == audited["passed"] == 1
    assert audited.get("warnings") == plain.get("warnings") == 1


def test_an_eager_op_is_placed_where_the_suite_called_it(pytester: pytest.Pytester) -> None:
    """The sites of an op executed eagerly are at the line that called it, whatever program
    JAX reused for it: jax 0.12 runs an eager ``multiply`` with the jaxpr it traced for the
    same op inside a jit earlier in the process, source lines included, so a run in which
    the jit ran first (serially) and one in which it did not (another xdist worker) would
    otherwise place the same computation's float64 finding on different lines."""
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_eager="""
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)


        @jax.jit
        def scaled(x, y):
            return jnp.multiply(x, y) + 1.0


        def test_jit_first():
            assert scaled(jnp.ones(3), jnp.ones(3))[0] == 2.0


        def test_eager():
            assert jnp.multiply(jnp.ones(3), jnp.ones(3))[0] == 1.0
        """
    )
    x64 = jax.config.jax_enable_x64
    try:
        result, audit = audit_of(pytester)
    finally:  # the suite runs in this process: its x64 must not outlive it
        jax.config.update("jax_enable_x64", x64)
    result.assert_outcomes(passed=2)
    eager = [c for c in audit["computations"] if c["kind"] == "eager"
             and c["function"] == "multiply"]  # fmt: skip
    assert len(eager) == 1, [(c["function"], c["kind"]) for c in audit["computations"]]
    findings = eager[0]["platforms"]["tpu"]["lowered"]["formats"]["findings"]
    assert findings, eager[0]["platforms"]["tpu"]["lowered"]["formats"]
    assert {f["location"] for f in findings} == {"test_eager.py:17"}


@pytest.mark.slow
def test_a_tests_computations_are_listed_in_one_order_whatever_order_they_missed_in(
    suite: pytest.Pytester,
) -> None:
    """The order in which a test's calls miss JAX's caches depends on what else the process
    ran (a warm xdist worker misses in another order than a cold serial run): each test's
    ``uses`` and ``owns`` follow the computations' order instead."""
    from pytest_jaxport.report.audit_ledger import AuditLedger, AuditSettings

    _, audit = audit_of(suite)
    computations = [
        {k: v for k, v in c.items() if k not in ("users", "owner", "outside_tests")}
        for c in audit["computations"]
    ]
    ids = [c["id"] for c in computations]
    sections = []
    for used in (ids, ids[::-1]):
        ledger = AuditLedger()
        ledger.add({"nodeid": "t.py::test", "index": 0, "uses": used, "outside": [],
                    "computations": computations, "calls": len(used),
                    "compiled_outside": 0, "errors": []})  # fmt: skip
        pricing = Pricing(migrate_to=(), model=CostModel())
        settings = AuditSettings(interception={}, platforms=("cpu",), pricing=pricing)
        sections.append(ledger.section(settings))
    forward, backward = (s.tests["t.py::test"] for s in sections)
    assert forward == backward
    assert forward.uses == tuple(c.id for c in sections[0].computations)
