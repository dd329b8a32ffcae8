"""Tests of pytest_jaxport._jax.callbacks.

Host callbacks are inert placeholders for platforms not present, never a lowering failure.

JAX lowers a host callback only for a backend it has a client for. ``callbacks.inert`` lowers
a traced program with each callback a placeholder that lowers anywhere (nested jaxprs, and
callbacks a custom primitive binds only in its own lowering, included); every other op is
unchanged. The independent check throughout: the inert program lowered for cpu has exactly the
census of the real one, callback for callback.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import LIBRARY_WITH_HIDDEN_CALLBACK, run_json
from jax import lax
from jax.experimental import io_callback

from pytest_jaxport._jax import callbacks, lowering, stablehlo, tracing
from pytest_jaxport.model.census import Census, take_census

ABSENT = ("cuda", "rocm", "tpu")
x = np.linspace(0.5, 1.5, 4, dtype=np.float32)


def host_double(v):
    return np.asarray(v) * 2


def debug_print(x):
    jax.debug.print("x = {}", x)
    return jnp.sin(x)


def every_kind(x):
    jax.debug.callback(lambda v: None, x)
    y = jax.pure_callback(host_double, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    z = io_callback(host_double, jax.ShapeDtypeStruct(x.shape, x.dtype), y, ordered=True)
    jax.debug.print("z = {}", z)
    return jnp.outer(z, z) @ jnp.outer(x, x)


def nested(x):
    @jax.jit
    def inner(v):
        jax.debug.print("inner {}", v)
        return v @ jnp.ones((4, 4))

    def step(c, _):
        c = lax.cond(c.sum() > 0, inner, jnp.cos, c)
        return jax.pure_callback(host_double, jax.ShapeDtypeStruct(c.shape, c.dtype), c), None

    def loop(c):
        io_callback(host_double, jax.ShapeDtypeStruct(c.shape, c.dtype), c, ordered=True)
        return c * 2

    y = lax.scan(step, inner(x), None, length=2)[0]
    y = lax.while_loop(lambda c: c.sum() < 100, loop, y)
    return jax.checkpoint(lambda v: jnp.linalg.cholesky(jnp.outer(v, v) + 4 * jnp.eye(4)))(y)


@jax.custom_jvp
def logged(v):
    jax.debug.print("logged {}", v)
    return jnp.exp(v)


@logged.defjvp
def _logged_jvp(primals, tangents):
    (v,), (t,) = primals, tangents
    return logged(v), jnp.exp(v) * t


def under_custom_jvp(x):
    return jax.grad(lambda v: logged(v).sum())(x)


def under_shard_map(x):
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:2]), ("i",))

    def body(v):
        jax.debug.print("shard {}", v)
        return lax.psum(
            jax.pure_callback(host_double, jax.ShapeDtypeStruct(v.shape, v.dtype), v), "i"
        )

    spec = PartitionSpec("i")
    return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=PartitionSpec())(x)


def shared_twice(x):
    @jax.jit
    def helper(v):
        jax.debug.print("helper {}", v)
        return v @ jnp.ones((4, 4))

    return helper(helper(x))


def _checked_matmul(v):
    """A library primitive's implementation with a host check inside, as equinox's
    ``error_if`` sits inside lineax's ``linear_solve``: traced only when lowered."""
    v = jax.pure_callback(host_double, jax.ShapeDtypeStruct(v.shape, v.dtype), v)
    return v @ jnp.ones((4, 4), v.dtype)


def _library_primitive():
    from jax.interpreters import mlir

    try:
        from jax.extend.core import Primitive
    except ImportError:  # jax without jax.extend.core
        from jax.core import Primitive

    primitive = Primitive("checked_matmul")
    primitive.def_impl(_checked_matmul)
    primitive.def_abstract_eval(lambda v: jax.core.ShapedArray(v.shape, v.dtype))
    mlir.register_lowering(primitive, mlir.lower_fun(_checked_matmul, multiple_results=False))
    return primitive


checked_matmul_p = _library_primitive()


def in_a_custom_primitive(x):
    return jnp.tanh(checked_matmul_p.bind(x))


CASES = {
    "debug_print": debug_print,
    "every_kind": every_kind,
    "nested": nested,
    "under_custom_jvp": under_custom_jvp,
    "under_shard_map": under_shard_map,
    "shared_twice": shared_twice,
}


def _real_names(census: Census) -> Census:
    """``census`` with every callback named as the cpu lowering names it, for comparison."""
    import dataclasses

    kernels = tuple(
        dataclasses.replace(k, name="xla_ffi_python_cpu_callback")
        if k.name.startswith(callbacks.INERT_TARGET)
        else k
        for k in census.kernels
    )
    return dataclasses.replace(census, kernels=tuple(sorted(kernels)))


def _sorted(census: Census) -> Census:
    import dataclasses

    return dataclasses.replace(census, kernels=tuple(sorted(census.kernels)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_inert_program_counts_what_the_real_one_does(case: str) -> None:
    """Lowered for cpu (where the real callbacks lower too), the inert program's census is
    the real program's, op for op, with each callback at its line in meta."""
    traced = tracing.trace(CASES[case], (x,), {})
    inert = callbacks.inert(traced)
    real = take_census(stablehlo.read_program(lowering.lower(traced, "cpu")), "cpu")
    placeholder = take_census(stablehlo.read_program(lowering.lower(inert, "cpu")), "cpu")
    assert _real_names(placeholder) == _sorted(real)
    assert placeholder.meta == real.meta >= 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_absent_platforms_lower_alone_and_together(case: str) -> None:
    traced = tracing.trace(CASES[case], (x,), {})
    with pytest.raises(lowering.LoweringFailure):
        lowering.lower(traced, "cuda")  # the limitation this module works around
    inert = callbacks.inert(traced)
    found = callbacks.find_callbacks(traced.jaxpr)
    together = lowering.lower_together(inert, ABSENT)
    assert together is not None
    for platform in ABSENT:
        alone = take_census(stablehlo.read_program(lowering.lower(inert, platform)), platform)
        assert take_census(together[platform], platform) == alone
        placeholders = {
            (k.name.rpartition(".")[2], str(k.location)) for k in alone.in_layer("meta")
            if k.kind == "host-callback"
        }  # fmt: skip
        assert placeholders == {(c.kind, c.location) for c in found}, platform


@pytest.mark.parametrize("case", sorted(set(CASES) - {"under_shard_map"}))
def test_the_compilable_program_compiles_what_the_real_one_does(case: str) -> None:
    """What a deviceless CUDA compile gets (a compile-only GPU has no client to call back
    into): each callback a stand-in that XLA compiles; the inert placeholder does not
    compile. Compiled for cpu, where the real program compiles too, the libraries are the
    real program's, and no callback is left."""
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    def compiled(traced: object) -> Census:
        text = traced.lower(lowering_platforms=("cpu",)).compile().as_text()  # type: ignore[attr-defined]
        return take_census(parse_compiled_hlo(text), "cpu", level="compiled")

    traced = tracing.trace(CASES[case], (x,), {})
    with pytest.raises(Exception, match=callbacks.INERT_TARGET):
        compiled(callbacks.inert(traced))
    real = compiled(traced)
    stand_in = compiled(callbacks.inert(traced, compilable=True))
    assert stand_in.libraries() == real.libraries()
    assert any("callback" in k.name for k in real.kernels)
    assert not any("callback" in k.name for k in stand_in.kernels)


def test_a_callback_a_custom_primitive_binds_when_lowered_is_inert_too() -> None:
    """The jaxpr shows no callback (the primitive traces its implementation only when it is
    lowered), yet lowering for an absent platform fails without the placeholder; with it,
    each absent platform lowers, alone and together, with the callback in meta at the line
    that binds the primitive (where JAX places what a primitive's lowering emits) and the
    primitive's dot counted."""
    traced = tracing.trace(in_a_custom_primitive, (x,), {})
    assert callbacks.find_callbacks(traced.jaxpr) == ()
    with pytest.raises(lowering.LoweringFailure, match="lowering platform cuda"):
        lowering.lower(traced, "cuda")
    inert = callbacks.inert(traced)
    together = lowering.lower_together(inert, ABSENT)
    assert together is not None
    line = f"{__file__}:{in_a_custom_primitive.__code__.co_firstlineno + 1}"
    libraries = {"cuda": {"cublas": 1}, "rocm": {"hipblas": 1}, "tpu": {}}
    for platform in ABSENT:
        alone = take_census(stablehlo.read_program(lowering.lower(inert, platform)), platform)
        assert take_census(together[platform], platform) == alone
        [placeholder] = alone.in_layer("meta")
        assert (placeholder.kind, placeholder.name) == (
            "host-callback",
            f"{callbacks.INERT_TARGET}.pure_callback",
        )
        assert str(placeholder.location) == line
        assert alone.libraries() == libraries[platform]
    real = take_census(stablehlo.read_program(lowering.lower(traced, "cpu")), "cpu")
    on_cpu = take_census(stablehlo.read_program(lowering.lower(inert, "cpu")), "cpu")
    assert _real_names(on_cpu) == _sorted(real)


def _host_emitting_primitive():
    """A primitive whose own lowering rule emits the host callback (``emit_python_callback``
    called directly, as equinox's ``noinline`` does): no callback primitive to override."""
    from jax.interpreters import mlir

    try:
        from jax.extend.core import Primitive
    except ImportError:  # jax without jax.extend.core
        from jax.core import Primitive

    primitive = Primitive("host_emitting")
    primitive.def_impl(lambda v: host_double(v))
    primitive.def_abstract_eval(lambda v: jax.core.ShapedArray(v.shape, v.dtype))

    def rule(ctx, v):
        results, _, keepalive = mlir.emit_python_callback(
            ctx, lambda a: (host_double(a),), None, [v], ctx.avals_in, ctx.avals_out,
            has_side_effect=False, sharding=None,
        )  # fmt: skip
        ctx.module_context.add_keepalive(keepalive)
        return results

    mlir.register_lowering(primitive, rule)
    return primitive


host_emitting_p = _host_emitting_primitive()


def emits_in_its_rule(x):
    return jnp.tanh(host_emitting_p.bind(x)) @ jnp.ones((4, 4), x.dtype)


def test_a_callback_a_lowering_rule_emits_itself_is_inert_too() -> None:
    """The rule calls JAX's ``emit_python_callback`` itself (no callback primitive whose rule
    the placeholder overrides): lowering for an absent platform fails without the inert
    lowering; with it, each absent platform lowers, alone and together, with a placeholder
    named for the primitive, and the program's dot counted. For cpu (present here) the inert
    lowering is the real program, op for op; the compilable one compiles with no callback."""
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    traced = tracing.trace(emits_in_its_rule, (x,), {})
    with pytest.raises(lowering.LoweringFailure, match="lowering platform cuda"):
        lowering.lower(traced, "cuda")
    inert = callbacks.inert(traced)
    together = lowering.lower_together(inert, ABSENT)
    assert together is not None
    libraries = {"cuda": {"cublas": 1}, "rocm": {"hipblas": 1}, "tpu": {}}
    for platform in ABSENT:
        alone = take_census(stablehlo.read_program(lowering.lower(inert, platform)), platform)
        assert take_census(together[platform], platform) == alone
        [placeholder] = alone.in_layer("meta")
        assert (placeholder.kind, placeholder.name) == (
            "host-callback",
            f"{callbacks.INERT_TARGET}.host_emitting",
        )
        assert alone.libraries() == libraries[platform]
    real = take_census(stablehlo.read_program(lowering.lower(traced, "cpu")), "cpu")
    on_cpu = take_census(stablehlo.read_program(lowering.lower(inert, "cpu")), "cpu")
    assert _real_names(on_cpu) == _sorted(real)

    def compiled(traced: object) -> Census:
        lowered = traced.lower(lowering_platforms=("cpu",))  # type: ignore[attr-defined]
        return take_census(parse_compiled_hlo(lowered.compile().as_text()), "cpu",
                           level="compiled")  # fmt: skip

    stand_in = compiled(callbacks.inert(traced, compilable=True))
    assert not any("callback" in k.name for k in stand_in.kernels)
    assert stand_in.libraries() == compiled(traced).libraries()
    # JAX's own function is back: a lowering that is not inert emits the real callback
    from jax.interpreters import mlir

    assert not hasattr(mlir.emit_python_callback, "jaxport_original")
    assert "callback" in str(lowering.lower(traced, "cpu").compiler_ir("stablehlo")).split(
        "#loc", 1)[0]  # fmt: skip


@pytest.mark.slow
def test_equinox_noinline_lowers_for_every_platform_in_an_audit(
    pytester: pytest.Pytester,
) -> None:
    """equinox's ``noinline`` (its lowering rule emits the host callback itself), run by an
    unchanged test under ``--jaxport-audit``: its computation lowers on every platform."""
    pytest.importorskip("equinox", reason="needs equinox (pip install equinox)")
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n')
    pytester.makepyfile(
        test_noinline="""
        import equinox as eqx, jax.numpy as jnp

        def addone(x):
            return x + 1

        def test_noinline():
            assert eqx.filter_jit(eqx.internal.noinline(addone))(jnp.array(1)) == 2
        """
    )
    result = pytester.runpytest_subprocess(
        "--jaxport-audit", "--jaxport-report=r.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    import json

    audit = json.loads((pytester.path / "r.json").read_text())["audit"]
    [noinline] = [
        c for c in audit["computations"]
        if any(k["name"] == f"{callbacks.INERT_TARGET}.noinline"
               for k in c["platforms"]["cuda"]["lowered"]["kernels"])
    ]  # fmt: skip
    for platform in ("cpu", *ABSENT):
        assert noinline["platforms"][platform]["error"] is None, platform


def test_lineax_linear_solve_with_error_if_lowers_for_every_platform() -> None:
    """lineax's ``linear_solve`` is its own primitive, with equinox's ``error_if`` (a
    ``pure_callback``) inside: the LU factorisation is cuSOLVER's on cuda, hipSOLVER's on
    rocm, as LAPACK's on cpu."""
    lx = pytest.importorskip("lineax", reason="needs lineax (pip install lineax)")

    def solve(m, b):
        return lx.linear_solve(lx.MatrixLinearOperator(m), b, solver=lx.LU()).value

    m = np.eye(4, dtype=np.float32) * 2 + 0.1
    traced = tracing.trace(solve, (m, np.ones(4, np.float32)), {})
    inert = callbacks.inert(traced)
    found = {}
    for platform in ("cpu", *ABSENT):
        census = take_census(stablehlo.read_program(lowering.lower(inert, platform)), platform)
        assert census.meta >= 1, platform
        found[platform] = census.libraries()
    assert found["cpu"].get("lapack", 0) >= 1
    assert found["cuda"].get("cusolver", 0) >= 1
    assert found["rocm"].get("hipsolver", 0) >= 1


def test_find_callbacks_names_each_kind_at_its_line() -> None:
    found = callbacks.find_callbacks(tracing.trace(every_kind, (x,), {}).jaxpr)
    lines = {c.kind: int(c.location.rpartition(":")[2]) for c in found}
    first = every_kind.__code__.co_firstlineno
    print_kind = "debug_print" if "debug_print" in lines else "debug_callback"
    assert lines["pure_callback"] == first + 2
    assert lines["io_callback"] == first + 3
    assert lines[print_kind] == first + 4
    assert all(c.location.startswith(__file__) for c in found)
    assert sum(c.count for c in found) == 4


def test_nested_callbacks_are_found_once_per_jaxpr() -> None:
    found = callbacks.find_callbacks(tracing.trace(nested, (x,), {}).jaxpr)
    kinds = sorted(c.kind for c in found for _ in range(c.count))
    # inner's print (one jaxpr, called twice), the scan's pure_callback, the loop's io_callback
    assert len(kinds) == 3
    assert "pure_callback" in kinds
    assert "io_callback" in kinds


def test_a_program_without_callbacks_lowers_as_it_is() -> None:
    traced = tracing.trace(jnp.linalg.solve, (np.eye(3), np.ones(3)), {})
    assert not callbacks.has_callbacks(traced.jaxpr)
    assert callbacks.find_callbacks(traced.jaxpr) == ()
    for platform in ("cpu", "cuda"):
        inert = lowering.lower(callbacks.inert(traced), platform).as_text()
        assert inert == lowering.lower(traced, platform).as_text(), platform


def test_a_jaxpr_used_twice_stays_one_function_called_twice() -> None:
    traced = tracing.trace(shared_twice, (x,), {})
    inert = callbacks.inert(traced)
    census = take_census(stablehlo.read_program(lowering.lower(inert, "cuda")), "cuda")
    [placeholder] = [k for k in census.kernels if k.layer == "meta"]
    assert placeholder.count == 2
    assert census.libraries() == {"cublas": 2}


def test_recorded_types_are_enough_to_lower() -> None:
    """What an audit has: the jaxpr and the arguments' types (no arrays)."""
    closed = jax.make_jaxpr(every_kind)(x)
    inert = callbacks.trace_inert(closed, [jax.ShapeDtypeStruct(x.shape, x.dtype)])
    census = take_census(stablehlo.read_program(lowering.lower(inert, "rocm")), "rocm")
    assert census.meta == 4
    assert census.libraries() == {"hipblas": 1}


def test_the_inert_program_keeps_shardings() -> None:
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:2]), ("d",))
    sharded = jax.device_put(np.ones((4, 4), np.float32), NamedSharding(mesh, PartitionSpec("d")))
    traced = tracing.trace(debug_print, (sharded,), {})
    inert = callbacks.inert(traced)
    text = inert.lower(lowering_platforms=("cuda",)).as_text()
    assert "mhlo.num_partitions = 2" in text
    assert f"{callbacks.INERT_TARGET}." in text


def test_through_the_plugin_callbacks_lower_everywhere(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        """
        [tool.jaxport.budget]
        must_lower = ["cpu", "cuda", "rocm", "tpu"]
        """
    )
    pytester.makepyfile(
        test_step="""
        import jax, jax.numpy as jnp, numpy as np, pytest
        from jax.experimental import io_callback

        def step(x):
            jax.debug.print("x = {}", x)
            y = jax.pure_callback(np.cos, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
            io_callback(print, None, y, ordered=True)
            return jnp.outer(y, y) @ jnp.eye(3)

        @pytest.mark.portable(max_custom_calls=0)
        def test_step(jaxport):
            out = jaxport.check(step, jnp.ones(3))
            assert out.shape == (3, 3)
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    [probe] = report["tests"][0]["checks"]
    libraries = {"cuda": {"cublas": 1}, "rocm": {"hipblas": 1}}
    for platform, found in probe["platforms"].items():
        lowered = found["lowered"]
        assert found["error"] is None, platform
        assert lowered["meta"] == 3, platform
        assert lowered["custom"] == 0, platform
        assert lowered["libraries"] == libraries.get(platform, {}), platform
        lines = sorted(k["location"] for k in lowered["kernels"] if k["kind"] == "host-callback")
        assert lines == ["test_step.py:5", "test_step.py:6", "test_step.py:7"]


@pytest.mark.slow
def test_a_check_lowers_callbacks_inside_a_librarys_primitive(pytester: pytest.Pytester) -> None:
    """The callback is not in the checked program's jaxpr (the library's primitive binds it
    when lowered): every platform still lowers, the LU factorisation counted as cuSOLVER's
    on cuda as it is LAPACK's on cpu, the callback in meta."""
    pytester.makepyprojecttoml(
        """
        [tool.jaxport.budget]
        must_lower = ["cpu", "cuda", "rocm", "tpu"]
        """
    )
    pytester.makepyfile(library=LIBRARY_WITH_HIDDEN_CALLBACK)
    pytester.makepyfile(
        test_solve="""
        import jax.numpy as jnp, pytest
        from library import solve

        @pytest.mark.portable
        def test_solve(jaxport):
            out = jaxport.check(solve, jnp.eye(3) * 2, jnp.ones(3))
            assert jnp.allclose(out, 1.0)
        """
    )
    pytester.syspathinsert()
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*fails to lower*")
    [probe] = report["tests"][0]["checks"]
    solvers = {"cpu": "lapack", "cuda": "cusolver", "rocm": "hipsolver"}
    for platform, found in probe["platforms"].items():
        assert found["error"] is None, (platform, found["error"])
        lowered = found["lowered"]
        assert lowered["meta"] == 1, platform
        if platform in solvers:
            assert lowered["libraries"].get(solvers[platform], 0) >= 1, platform


def test_a_real_failure_to_lower_stays_a_failure(pytester: pytest.Pytester) -> None:
    """A callback next to an op that has no TPU lowering: tpu fails for the op, named as
    such, while rocm (where both lower) passes."""
    pytester.makepyfile(
        test_eig="""
        import jax, jax.numpy as jnp, pytest

        def eig(a):
            jax.debug.print("a = {}", a)
            return jnp.linalg.eig(a)[0].real

        @pytest.mark.portable(must_lower=["rocm", "tpu"])
        def test_eig(jaxport):
            jaxport.check(eig, jnp.eye(3))
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["tpu: fails to lower (must_lower = *, set in *); check 'eig', lowered"]
    )
    platforms = report["tests"][0]["checks"][0]["platforms"]
    assert "eig" in platforms["tpu"]["error"]
    assert "lowering platform" not in platforms["tpu"]["error"]
    assert platforms["rocm"]["error"] is None
    assert platforms["rocm"]["lowered"]["meta"] == 1


@pytest.mark.slow
def test_equinox_error_if_as_diffrax_uses_it(pytester: pytest.Pytester) -> None:
    """A diffrax solve (equinox's ``error_if`` checks inside, as host callbacks) lowers for
    every platform, with its callbacks in meta and its ops counted."""
    pytest.importorskip("diffrax", reason="needs diffrax (pip install diffrax)")
    pytester.makepyprojecttoml(
        """
        [tool.jaxport.budget]
        must_lower = ["cpu", "cuda", "rocm", "tpu"]
        max_custom_calls = 0
        """
    )
    pytester.makepyfile(
        test_ode="""
        import diffrax, equinox as eqx, jax.numpy as jnp, pytest

        def solve(y0, rate):
            term = diffrax.ODETerm(lambda t, y, args: -args * y)
            solution = diffrax.diffeqsolve(
                term, diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.1, y0=y0, args=rate,
                stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5),
            )
            return eqx.error_if(solution.ys, jnp.any(jnp.isnan(solution.ys)), "nan")

        @pytest.mark.portable
        def test_decay(jaxport):
            out = jaxport.check(solve, jnp.ones(3), 0.5)
            assert jnp.allclose(out[-1], jnp.exp(-0.5), rtol=1e-3)
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    [probe] = report["tests"][0]["checks"]
    cpu = probe["platforms"]["cpu"]["lowered"]
    for platform in ABSENT:
        lowered = probe["platforms"][platform]["lowered"]
        assert lowered is not None, probe["platforms"][platform]["error"]
        assert lowered["meta"] == cpu["meta"] >= 1, platform
        assert lowered["xla"] >= cpu["xla"] // 2, platform  # the solver's ops are all there


@pytest.mark.slow
def test_transformed_checks_get_inert_callbacks_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_grad="""
        import jax, jax.numpy as jnp, pytest

        def loss(w):
            jax.debug.print("w = {}", w)
            return jnp.sum(jnp.tanh(w @ w))

        @pytest.mark.portable(must_lower=["cuda", "tpu"], transforms=["grad"])
        def test_loss(jaxport):
            jaxport.check(loss, jnp.eye(3))
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    for probe in report["tests"][0]["checks"]:
        assert probe["platforms"]["cuda"]["lowered"]["libraries"]["cublas"] >= 1, probe["name"]


def test_a_program_with_callbacks_is_not_run_again_to_profile(pytester: pytest.Pytester) -> None:
    """The measured runtime share profiles a few more runs of each check; a program with host
    callbacks is left out of it (estimated, and the suite's share says so), so its callbacks
    run once, as the check runs it, not once per profiled run."""
    pytester.makepyfile(
        test_calls="""
        import jax, jax.numpy as jnp, pytest
        calls = []

        def logged(x):
            jax.debug.callback(lambda v: calls.append(1), x.sum())
            return jnp.tanh(x @ x)

        def plain(x):
            return jnp.tanh(x @ x)

        @pytest.mark.portable
        def test_logged(jaxport):
            jaxport.check(logged, jnp.ones((32, 32)))
            assert len(calls) == 1

        @pytest.mark.portable
        def test_plain(jaxport):
            jaxport.check(plain, jnp.ones((32, 32)))
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=2)
    shares = {
        t["nodeid"].split("::")[1]: t["checks"][0]["platforms"]["cpu"] for t in report["tests"]
    }
    assert shares["test_logged"]["runtime_share"]["basis"] == "estimated"
    cpu = report["summary"]["runtime_share"]["cpu"]
    if shares["test_plain"]["runtime_share"]["basis"] == "measured":
        assert (cpu["basis"], cpu["checks"], cpu["left_out"]) == ("measured", 1, 1)
    else:  # jaxlib < 0.8.3 has no profiler to measure with: every share is the estimate
        assert jax.__version_info__ < (0, 8, 3)
        assert cpu["basis"] == "estimated"
