"""Tests of pytest_jaxport._jax.interception.

The audit's interception layer on the installed JAX: every patch point, for real.

This module is the compatibility test the audit needs on each JAX release CI covers (the
newest, 0.10.2, and the floor 0.6.2): every private name of ``pytest_jaxport._jax.interception``
is exercised here with real jitted code, no mocks. When a JAX release moves one of them, a
test below fails and names it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pytest_jaxport._jax import interception, recorded_call, stablehlo
from pytest_jaxport._jax.interception import Interception
from pytest_jaxport._jax.recorded_call import RecordedCall

VERSION = recorded_call.version_tuple(jax.__version__)


@pytest.fixture
def recorded() -> Iterator[tuple[list[RecordedCall], Interception]]:
    calls: list[RecordedCall] = []
    hook = Interception(calls.append)
    hook.install()
    try:
        yield calls, hook
    finally:
        hook.uninstall()


def names(calls: list[RecordedCall]) -> list[str]:
    return [c.name for c in calls]


def test_every_patch_point_exists_on_this_jax() -> None:
    hook = Interception(lambda call: None)
    support = hook.install()
    hook.uninstall()
    assert support.hooked, support.notes()
    assert support.missing == ()
    assert support.static_arguments
    assert support.compile_events
    assert support.adapter is not None
    expected = "argument types" if VERSION >= (0, 8) else "arguments, jax 0.6.2"
    assert expected in support.adapter


def test_top_level_calls_are_recorded_and_nested_jits_are_part_of_their_caller(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    calls, _ = recorded

    @jax.jit
    def inner(x: jax.Array) -> jax.Array:
        return jnp.sin(x) * 2

    @jax.jit
    def outer_step(x: jax.Array) -> jax.Array:
        return inner(x) @ x

    x = jnp.ones((4, 4))
    calls.clear()
    outer_step(x)
    assert names(calls) == ["outer_step"]
    facts = calls[0].facts()
    assert facts.kind == "jit"
    assert facts.source is not None
    assert facts.source.startswith(__file__)
    assert facts.signature == ("x: float32[4,4]",)
    # The C++ fast path: a second call with the same types never reaches the hook.
    outer_step(x)
    assert names(calls) == ["outer_step"]
    # A new signature is a cache miss again; a weakly typed scalar says so.
    y = jnp.ones((2, 2))
    calls.clear()
    outer_step(y)
    assert names(calls) == ["outer_step"]
    inner(1.0)
    assert calls[-1].facts().signature == ("x: float32[] weak",)


def test_eager_operations_are_recorded_as_eager(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    calls, _ = recorded
    a = jnp.arange(16.0).reshape(4, 4)
    calls.clear()
    jnp.linalg.cholesky(a @ a.T + jnp.eye(4))
    kinds = {c.name: c.facts().kind for c in calls}
    assert "cholesky" in kinds, kinds
    assert set(kinds.values()) == {"eager"}


def test_static_arguments_donation_and_names(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    calls, _ = recorded

    @functools.partial(jax.jit, static_argnames=("power",), donate_argnums=(0,))
    def scale(x: jax.Array, y: jax.Array, power: int) -> jax.Array:
        return x * y**power

    x, y = jnp.ones(3), jnp.ones(3)
    calls.clear()
    scale(x, y, power=3)
    facts = calls[0].facts()
    assert facts.static_arguments == "power=3"
    assert facts.donated == (0,)
    assert facts.signature == ("x: float32[3]", "y: float32[3]")


def test_clearing_dispatch_caches_passes_the_hook_again_without_retracing(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    calls, hook = recorded
    traces = []

    @jax.jit
    def traced_once(x: jax.Array) -> jax.Array:
        traces.append(1)
        return x + 1

    x = jnp.ones(8)
    traced_once(x)
    traced_once(x)
    calls.clear()
    hook.clear_dispatch_caches()
    traced_once(x)
    assert names(calls) == ["traced_once"]
    assert len(traces) == 1  # the trace came from JAX's tracing cache
    traced_once(x)
    assert names(calls) == ["traced_once"]


def test_clearing_the_suites_caches_leaves_jaxs_own_functions_on_the_fast_path(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    """``jax_own=False`` (``eager_users = "owner"``): a jit of the suite's passes the hook
    again, an op run eagerly (a ``jnp`` function, a primitive) does not; ``jax_own=True``
    empties every cache."""
    calls, hook = recorded

    @jax.jit
    def suites_own(x: jax.Array) -> jax.Array:
        return x * 3

    def doubled(v: jax.Array) -> jax.Array:
        return v * 2

    vmapped = jax.jit(jax.vmap(doubled))  # JAX's wrapper of the suite's function: the suite's

    def run(x: jax.Array) -> None:
        suites_own(jnp.cos(x))
        vmapped(x)
        jax.lax.neg(x)

    x = jnp.arange(4.0)
    calls.clear()
    run(x)
    assert names(calls) == ["cos", "suites_own", "doubled", "neg"]
    calls.clear()
    run(x)
    assert names(calls) == []
    hook.clear_dispatch_caches(jax_own=False)
    run(x)
    assert names(calls) == ["suites_own", "doubled"]
    assert [c.facts().kind for c in calls] == ["jit", "jit"]
    calls.clear()
    hook.clear_dispatch_caches(jax_own=True)
    run(x)
    assert names(calls) == ["cos", "suites_own", "doubled", "neg"]


def test_what_ran_before_the_install_passes_the_hook_at_its_next_call() -> None:
    """A module-level ``@jax.jit`` that a ``conftest.py`` imported before the plugin
    configured, and an op it ran eagerly, are in JAX's caches: the install empties them all,
    and the jit, found among the interpreter's objects, is the suite's (cleared per test)."""

    @jax.jit
    def made_before(x: jax.Array) -> jax.Array:
        return x - 1

    x = jnp.arange(3.0)
    made_before(jnp.cos(x))
    calls: list[RecordedCall] = []
    hook = Interception(calls.append)
    hook.install()
    try:
        made_before(jnp.cos(x))
        assert names(calls) == ["cos", "made_before"]
        calls.clear()
        made_before(jnp.cos(x))
        assert names(calls) == []  # JAX's fast path
        hook.clear_dispatch_caches(jax_own=False)
        made_before(jnp.cos(x))
        assert names(calls) == ["made_before"]
    finally:
        hook.uninstall()


def test_a_recorded_call_lowers_for_every_platform_without_running_again() -> None:
    runs = []

    @functools.partial(jax.jit, donate_argnums=(1,))
    def solve(a: jax.Array, b: jax.Array) -> jax.Array:
        runs.append(1)
        return jnp.linalg.solve(a @ a.T + jnp.eye(8), b)

    lowered = {}

    def lower_now(call: RecordedCall) -> None:
        # JAX has run the call (and deleted the donated buffer): its types are all it takes.
        for platform in ("cpu", "cuda", "rocm", "tpu"):
            lowered[platform] = stablehlo.read_program(call.lower(lowering_platforms=(platform,)))
        lowered["together"] = stablehlo.read_programs(
            call.lower(lowering_platforms=("cuda", "rocm", "tpu")), 3
        )

    hook = Interception(lower_now)
    calls_before = len(runs)
    hook.install()
    try:
        out = solve(jnp.ones((8, 8)), jnp.ones(8))
    finally:
        hook.uninstall()
    assert out.shape == (8,)
    assert len(runs) == calls_before + 1  # traced once, not again for the lowerings
    targets = {
        platform: {s.target for f in program.functions.values() for s in f if s.target}
        for platform, program in lowered.items()
        if platform != "together"
    }
    assert any("getrf" in t for t in targets["cuda"]), targets["cuda"]
    assert any("lapack" in t for t in targets["cpu"]), targets["cpu"]
    assert any(t == "LuDecomposition" for t in targets["tpu"]), targets["tpu"]
    assert len(lowered["together"]) == 3


def test_compilations_outside_the_hook_are_counted(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    calls, hook = recorded

    def aot(x: jax.Array) -> jax.Array:
        return x * 3 + 1

    x = jnp.ones(5)
    before = hook.compiles.outside
    jax.jit(aot).lower(x).compile()
    assert hook.compiles.outside == before + 1
    assert "aot" not in names(calls)
    x = jnp.ones(6)
    audited = hook.compiles.audited
    jax.jit(lambda x: x - 7)(x)
    assert hook.compiles.audited == audited + 1


def test_paused_work_is_neither_recorded_nor_counted(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    calls, hook = recorded
    calls.clear()
    outside = hook.compiles.outside
    with interception.paused():
        x = jnp.ones(7)
        jax.jit(lambda x: x * 11)(x)
        jax.jit(lambda x: x * 13).lower(x).compile()
    assert calls == []
    assert hook.compiles.outside == outside


def test_host_callbacks_are_found_in_nested_programs(
    recorded: tuple[list[RecordedCall], Interception],
) -> None:
    calls, _ = recorded

    @jax.jit
    def noisy(x: jax.Array) -> jax.Array:
        def body(carry: jax.Array, _: None) -> tuple[jax.Array, None]:
            jax.debug.print("carry {}", carry)
            return carry * 2, None

        y, _ = jax.lax.scan(body, x, None, length=2)
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(y.shape, y.dtype), y)

    x = jnp.ones(2)
    calls.clear()
    noisy(x)
    found = set(calls[0].facts().host_callbacks)
    # jax.debug.print is its own primitive since jax 0.8
    assert found in ({"debug_callback", "pure_callback"}, {"debug_print", "pure_callback"})


@pytest.mark.skipif(VERSION < (0, 7), reason="jax < 0.7 implements pmap outside jit")
def test_pmap_is_a_recorded_jit(recorded: tuple[list[RecordedCall], Interception]) -> None:
    calls, _ = recorded
    x = jnp.ones((1, 3))
    calls.clear()
    jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(x)
    assert calls, "pmap did not pass the cache-miss hook"


def test_uninstall_restores_jax() -> None:
    from jax._src import pjit

    original = pjit._pjit_call_impl_python
    infer = pjit._infer_params
    hook = Interception(lambda call: None)
    hook.install()
    assert pjit._pjit_call_impl_python is not original
    hook.uninstall()
    assert pjit._pjit_call_impl_python is original
    assert pjit._infer_params is infer


def test_a_hook_installed_again_after_uninstall_records_again() -> None:
    """install, uninstall, install: the second install patches JAX again (it was idempotent
    by remembering its first install, and then recorded nothing)."""
    seen: list[RecordedCall] = []
    hook = Interception(seen.append)
    hook.install()
    hook.uninstall()
    x = jnp.ones(5)
    hook.install()
    try:
        jax.jit(lambda x: x * 3 + 1)(x)
    finally:
        hook.uninstall()
    assert len(seen) == 1


def test_a_listener_that_raises_never_reaches_the_suite() -> None:
    def broken(call: RecordedCall) -> None:
        raise RuntimeError("audit bug")

    x = jnp.ones(3)
    hook = Interception(broken)
    hook.install()
    try:
        out = jax.jit(lambda x: x + 41)(x)
    finally:
        hook.uninstall()
    assert float(out[0]) == 42.0
    assert hook.compiles.errors == ["RuntimeError: audit bug"]


def test_warnings_of_the_audits_own_lowering_never_reach_the_suite() -> None:
    import warnings

    @functools.partial(jax.jit, donate_argnums=(0,))
    def unusable_donation(a: jax.Array) -> jax.Array:
        return a.sum()

    def lower_elsewhere(call: RecordedCall) -> None:
        call.lower(lowering_platforms=("cuda",))
        call.lower(lowering_platforms=("cpu",))

    def donation_warnings(x: jax.Array) -> int:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            unusable_donation(x)
        return sum("donated buffers" in str(w.message) for w in seen)

    without = donation_warnings(jnp.ones((3, 5)))
    hook = Interception(lower_elsewhere)
    hook.install()
    try:
        with_audit = donation_warnings(jnp.ones((5, 3)))
    finally:
        hook.uninstall()
    assert without == with_audit == 1
    assert hook.compiles.errors == []


def test_without_its_patch_points_the_audit_says_what_it_cannot_see() -> None:
    from pytest_jaxport.model.cost import CostModel
    from pytest_jaxport.report.audit_ledger import AuditLedger, AuditSettings
    from pytest_jaxport.report.document import Config, Environment, Report
    from pytest_jaxport.report.summary import Pricing
    from pytest_jaxport.report.totals import Summary
    from pytest_jaxport.view.display import DisplayOptions
    from pytest_jaxport.view.text import render_text
    from pytest_jaxport.view.viewmodel.build import build_view

    support = interception.Support(
        jax="9.0.0",
        adapter=None,
        hooked=False,
        static_arguments=False,
        compile_events=True,
        missing=("jax._src.pjit._pjit_call_impl_python",),
    )
    (note,) = support.notes()
    assert "_pjit_call_impl_python not found" in note
    assert "only compilations are counted" in note
    ledger = AuditLedger()
    ledger.add(
        {
            "nodeid": "t.py::test",
            "index": 0,
            "uses": [],
            "outside": [],
            "computations": [],
            "calls": 0,
            "compiled_outside": 3,
            "errors": [],
        }
    )
    pricing = Pricing(migrate_to=(), model=CostModel())
    section = ledger.section(
        AuditSettings(interception=support.to_dict(), platforms=("cpu",), pricing=pricing)
    )
    report = Report(
        tool_version=None,
        environment=Environment(),
        config=Config(platforms=("cpu",), reference="cpu"),
        summary=Summary(tests=0, checks=0, failed_tests=0, violations=0, outcomes={},
                        platforms={}),
        tests=(),
        audit=section,
    )  # fmt: skip
    view = build_view(report)
    assert view.audit is not None
    assert view.audit.not_audited() is not None
    assert view.audit.not_audited().startswith("3 compilations")  # type: ignore[union-attr]
    assert view.audit.notes == (note,)
    text = " ".join(render_text(view, DisplayOptions()).split())
    assert "not audited: 3 compilations outside jit dispatch" in text
    assert f"note: {' '.join(note.split())}" in text


FAILS_WHILE_TRACED = """
import jax
import jax.numpy as jnp


def step(x):
    return x.reshape(5)


def test_trace_fails():
    jax.jit(step)(jnp.ones(3))
"""


@pytest.mark.slow
@pytest.mark.parametrize("filtering", ["auto", "off"])
def test_a_test_that_fails_while_jax_traces_its_jit_shows_the_same_traceback_under_the_audit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, filtering: str
) -> None:
    """Issue 50, item 6: the hook's frames (``infer_params``, the rule-trace cache) are in the
    suite's call path while JAX traces a jit. JAX's traceback filtering leaves them out as it
    leaves out its own; with it off, pytest does (``__tracebackhide__``)."""
    from jax._src import traceback_util

    assert hasattr(traceback_util, "register_exclusion")  # a patch point: PATCH_POINTS
    monkeypatch.setenv("JAX_TRACEBACK_FILTERING", filtering)
    pytester.makepyfile(test_trace=FAILS_WHILE_TRACED)
    shown = []
    for audit in ((), ("--jaxport-audit",)):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *audit)
        result.assert_outcomes(failed=1)
        lines = result.outlines
        start = next(i for i, line in enumerate(lines) if "FAILURES" in line)
        end = next(i for i, line in enumerate(lines) if i > start and (
            "jaxport audit" in line or "short test summary" in line))  # fmt: skip
        shown.append(lines[start:end])
    result.stdout.no_fnmatch_line("*pytest_jaxport*")
    result.stdout.fnmatch_lines(["test_trace.py:6: in step", "E * cannot reshape array*"])
    plain, audited = shown
    assert audited == plain


COMPILED_MODULES = """
import jax._src.compiler as compiler

NAME = next(n for n in ("backend_compile_and_load", "backend_compile") if hasattr(compiler, n))
ORIGINAL = getattr(compiler, NAME)
SEEN = []


def compiled(backend, module, *args, **kwargs):
    SEEN.append(module.operation.get_asm(enable_debug_info=True))
    return ORIGINAL(backend, module, *args, **kwargs)


setattr(compiler, NAME, compiled)


def pytest_unconfigure(config):
    with open("compiled.txt", "w") as out:
        out.write("\\n=====\\n".join(SEEN))
"""

EAGER_AND_JITTED = """
import jax
import jax.numpy as jnp


def test_eager_and_jitted():
    x = jnp.arange(4.0) + 1.0
    y = jnp.log(x) @ x
    z = jax.jit(lambda v: jnp.sin(v) * 2)(x)
    assert float(y) > 0 and z.shape == (4,)
"""


@pytest.mark.slow
def test_the_programs_a_suite_compiles_are_the_same_under_the_audit(
    pytester: pytest.Pytester,
) -> None:
    """Issue 55, item 18: an eager op is traced inside the audit's hook, whose frame was the
    innermost of every location of the programs the suite compiled (the line XLA's metadata
    names, for profilers and dumps, and one more frame to compile). JAX leaves the hook's
    frames out of its locations as it leaves out its own: the audited suite compiles the
    programs the plain suite compiles, locations included."""
    pytester.makeconftest(COMPILED_MODULES)
    pytester.makepyfile(test_eager=EAGER_AND_JITTED)
    compiled = []
    for audit in ((), ("--jaxport-audit", "--jaxport-report=r.json")):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *audit)
        result.assert_outcomes(passed=1)
        compiled.append((pytester.path / "compiled.txt").read_text())
    plain, audited = compiled
    seen = json.loads((pytester.path / "r.json").read_text())["audit"]["seen"]
    assert seen["eager"] >= 2  # the audit recorded the eager ops (traced inside its hook)
    assert seen["jit"] >= 1
    assert "test_eager.py" in audited  # the locations are there: the test's lines
    assert "pytest_jaxport" not in audited
    assert audited == plain


def test_a_rule_the_audit_traces_for_one_platform_serves_the_others() -> None:
    """Lowering a recorded call for several platforms together runs each platform's rule;
    where those rules are one Python function (``mlir.lower_fun``: threefry's unrolled hash
    for cuda, rocm and tpu), the first platform's trace serves the others (issue 55, item 18:
    blackjax's eager random draws, a third of its audit's cold lowering)."""
    from jax.interpreters import mlir

    try:
        from jax.extend.core import Primitive
    except ImportError:  # jax without jax.extend.core
        from jax.core import Primitive  # type: ignore[attr-defined,no-redef]

    traces: list[tuple[int, ...]] = []

    def doubled(x: jax.Array) -> jax.Array:
        traces.append(x.shape)
        return x * 2

    rule = mlir.lower_fun(doubled, multiple_results=False)
    doubled_p = Primitive("jaxport_test_doubled")
    doubled_p.def_impl(doubled)
    doubled_p.def_abstract_eval(lambda x: x)
    mlir.register_lowering(doubled_p, rule)  # rocm, tpu
    mlir.register_lowering(doubled_p, lambda ctx, x: rule(ctx, x), platform="cuda")
    cpu_rule = mlir.lower_fun(lambda x: x + x, multiple_results=False)
    mlir.register_lowering(doubled_p, cpu_rule, platform="cpu")

    def lower_together(call: RecordedCall) -> None:
        traces.clear()  # JAX's own cpu lowering traced nothing: cpu's rule is its own
        stablehlo.read_programs(call.lower(lowering_platforms=("cuda", "rocm", "tpu")), 3)

    hook = Interception(lower_together)
    hook.install()
    try:
        jax.jit(lambda x: doubled_p.bind(x) + 1)(jnp.ones(3))
    finally:
        hook.uninstall()
    assert traces == [(3,)]  # cuda's trace served the default rule's (rocm and tpu)
