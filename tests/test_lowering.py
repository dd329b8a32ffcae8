"""Tests of pytest_jaxport._jax.lowering (lower_together) and _jax.stablehlo.read_programs.

One multi-platform lowering read per platform equals lowering for each platform.

Platforms not present here are lowered together (``traced.lower(lowering_platforms=(...))``)
and ``stablehlo.read_programs`` projects the module onto each platform by resolving the cases
on the platform index. Every function below is lowered both ways with real JAX; the census
and the counted op sites must agree exactly.
"""

from __future__ import annotations

import contextlib
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import run_json
from jax import lax

from pytest_jaxport._jax import lowering, stablehlo, tracing
from pytest_jaxport.model.census import (
    CALL_OPS,
    UNCOUNTED_OPS,
    Program,
    parse_location,
    take_census,
)

PLATFORMS = ("cuda", "rocm", "tpu")

a = np.full((8, 8), 0.5, np.float32) + 8 * np.eye(8, dtype=np.float32)
v = np.linspace(0.0, 1.0, 16, dtype=np.float32)


def mlp(x):
    w = jnp.ones((8, 16))
    return jax.nn.relu(x @ w) @ w.T


def solve_grad(x):
    return jax.grad(lambda m: jnp.linalg.solve(m, m).sum())(x)


def per_platform_sine(x):
    return lax.platform_dependent(x, cpu=jnp.sin, cuda=jnp.cos, default=jnp.tanh)


def per_platform_in_scan(x):
    def body(carry, _):
        return lax.platform_dependent(carry, tpu=jnp.cos, default=jnp.sin) @ carry, None

    return lax.scan(body, x, None, length=3)[0]


def per_platform_in_nested_jit(x):
    inner = jax.jit(lambda y: lax.platform_dependent(y, rocm=jnp.cos, default=jnp.sin) @ y)
    return jax.jit(inner)(x) + 1


def branches(x):
    return lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x)


def while_matmul(x):
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] @ c[1]), (0, x))[1]


def psum_under_shard_map(x):
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(jax.devices()[:1], ("i",))
    summed = jax.shard_map(
        lambda y: lax.psum(y, "i"), mesh=mesh, in_specs=PartitionSpec("i"),
        out_specs=PartitionSpec(),
    )  # fmt: skip
    return summed(x)


def _shard_map(body, in_specs, out_specs):
    """``jax.shard_map`` over two devices (the suite runs with four host devices): over one,
    JAX inlines the body, and the platform index never enters ``sdy.manual_computation``."""
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()[:2]), ("i",))
    return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


def collectives_and_dot_under_shard_map(x, w):
    """dot_general and all_gather lower per platform: JAX wraps them in cases on the platform
    index, which reaches the body as an argument of ``sdy.manual_computation``."""
    from jax.sharding import PartitionSpec as P

    def body(x, w):
        gathered = lax.all_gather(lax.psum(x @ w, "i"), "i")
        return lax.psum(gathered.sum(0), "i")

    return _shard_map(body, (P("i"), P()), P())(x, w)


def platform_dependent_under_shard_map(x):
    from jax.sharding import PartitionSpec as P

    def body(y):
        z = lax.platform_dependent(y, cuda=jnp.cos, rocm=jnp.tanh, default=jnp.sin)
        return lax.psum(z @ y, "i")

    return _shard_map(body, P(), P())(x)


def shard_map_in_scan(x):
    from jax.sharding import PartitionSpec as P

    step = _shard_map(lambda y: lax.psum(jnp.linalg.cholesky(y @ y.T + 8 * y), "i"), P(), P())
    return lax.scan(lambda c, _: (step(c), None), x, None, length=2)[0]


def scan_and_cond_in_shard_map(x):
    from jax.sharding import PartitionSpec as P

    def body(y):
        def step(c, _):
            c = lax.platform_dependent(c, tpu=jnp.cos, default=jnp.sin) @ c
            return lax.psum(c, "i"), None

        y = lax.scan(step, y, None, length=2)[0]
        return lax.cond(
            y.sum() > 0,
            lambda z: lax.psum(lax.all_gather(z @ z, "i")[0], "i"),
            lambda z: lax.psum(jnp.linalg.cholesky(z), "i"),
            y,
        )

    return _shard_map(body, P(), P())(x)


def shard_map_in_cond(x):
    from jax.sharding import PartitionSpec as P

    summed = _shard_map(lambda y: lax.psum(jnp.linalg.qr(y)[0] @ y, "i"), P(), P())
    return lax.cond(x.sum() > 0, summed, jnp.sin, x)


def ffi_kernel(x):
    return jax.ffi.ffi_call("my_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


CASES = {
    "mlp": (mlp, (a,)),
    "solve": (jnp.linalg.solve, (a, a)),
    "solve_grad": (solve_grad, (a,)),
    "eigh": (jnp.linalg.eigh, (a,)),
    "qr": (jnp.linalg.qr, (a,)),
    "cholesky": (jnp.linalg.cholesky, (a,)),
    "svd": (jnp.linalg.svd, (a,)),
    "lu": (jax.scipy.linalg.lu, (a,)),
    "vmap_solve": (jax.vmap(jnp.linalg.solve), (np.stack([a, a]), np.stack([a, a]))),
    "rfft": (jnp.fft.rfft, (v,)),
    "sort": (jnp.sort, (v,)),
    "top_k": (lambda x: lax.top_k(x, 3), (v,)),
    "cumsum": (jnp.cumsum, (v,)),
    "random": (lambda k: jax.random.normal(k, (4,)), (jax.random.key(0),)),
    "conv": (
        lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME"),
        (np.ones((1, 2, 8, 8), np.float32), np.ones((4, 2, 3, 3), np.float32)),
    ),
    "cond": (branches, (a,)),
    "while": (while_matmul, (a,)),
    "remat_grad": (jax.grad(jax.checkpoint(lambda x: jnp.sin(x @ x).sum())), (a,)),
    "platform_dependent": (per_platform_sine, (a,)),
    "platform_dependent_in_scan": (per_platform_in_scan, (a,)),
    "platform_dependent_in_nested_jit": (per_platform_in_nested_jit, (a,)),
    "ffi": (ffi_kernel, (a,)),
    "psum_under_shard_map": (psum_under_shard_map, (v,)),
    "collectives_and_dot_under_shard_map": (collectives_and_dot_under_shard_map, (a, a)),
    "platform_dependent_under_shard_map": (platform_dependent_under_shard_map, (a,)),
    "shard_map_in_scan": (shard_map_in_scan, (a,)),
    "scan_and_cond_in_shard_map": (scan_and_cond_in_shard_map, (a,)),
    "shard_map_in_cond": (shard_map_in_cond, (a,)),
}


def _lower(traced, platforms):
    # one call site for both forms: JAX records the lowering's caller in some locations
    return traced.lower(lowering_platforms=platforms)


def _counted(program: Program) -> Counter[tuple[object, ...]]:
    """The sites a census counts, call-weighted from the entry, each location reduced to the
    line it reports. Private function names play no part: some releases (jax 0.7) number the
    functions of a multi-platform lowering differently from a single-platform one. A call with
    no location of its own is walked but not counted: jax 0.12.1 wraps a lowering rule with
    per-platform cases (cumsum's) in a forwarding function it calls at ``loc(unknown)``, which
    the census places at its caller's line like any location-less op."""
    found: Counter[tuple[object, ...]] = Counter()

    def walk(name: str, times: int) -> None:
        for site in program.functions.get(name, ()):
            if site.op in UNCOUNTED_OPS:
                continue
            n = times * site.count
            where = parse_location(site.location)
            line = str(where)
            if site.op in CALL_OPS and site.target in program.functions:
                if where is not None:
                    found[(site.op, line)] += n
                walk(site.target, n)
            else:
                found[(site.op, site.target, line, site.flops, site.bytes)] += n

    walk(program.entry, 1)
    return found


def _x64() -> contextlib.AbstractContextManager[object]:
    """64-bit mode, where JAX passes the platform index as i64 and converts it to i32."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # jax < 0.8

    return enable_x64()


@pytest.mark.parametrize("x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_projection_equals_lowering_per_platform(case: str, x64: bool) -> None:
    fn, args = CASES[case]
    with _x64() if x64 else contextlib.nullcontext():
        traced = tracing.trace(fn, args, {})
        _check_projection(traced)


def _check_projection(traced: object) -> None:
    together = stablehlo.read_programs(_lower(traced, PLATFORMS), len(PLATFORMS))
    assert len(together) == len(PLATFORMS)
    for platform, projected in zip(PLATFORMS, together, strict=True):
        alone = stablehlo.read_program(_lower(traced, (platform,)))
        assert take_census(projected, platform) == take_census(alone, platform), platform
        assert _counted(projected) == _counted(alone), platform


def test_each_platform_gets_its_own_branch() -> None:
    traced = tracing.trace(per_platform_sine, (a,), {})
    programs = lowering.lower_together(traced, PLATFORMS)
    assert programs is not None
    ops = {
        platform: {site.op for sites in program.functions.values() for site in sites}
        for platform, program in programs.items()
    }
    assert "stablehlo.cosine" in ops["cuda"]
    assert "stablehlo.tanh" in ops["rocm"]
    assert "stablehlo.tanh" in ops["tpu"]
    assert "stablehlo.cosine" not in ops["rocm"] | ops["tpu"]
    assert all("stablehlo.case" not in found for found in ops.values())


def test_vendor_calls_differ_per_platform() -> None:
    traced = tracing.trace(jnp.linalg.solve, (a, a), {})
    programs = lowering.lower_together(traced, PLATFORMS)
    assert programs is not None
    libraries = {p: take_census(programs[p], p).libraries() for p in PLATFORMS}
    assert "cusolver" in libraries["cuda"]
    assert "hipsolver" in libraries["rocm"]
    assert not any("solver" in library for library in libraries["tpu"])


def test_a_user_cond_keeps_both_branches() -> None:
    traced = tracing.trace(branches, (a,), {})
    programs = lowering.lower_together(traced, PLATFORMS)
    assert programs is not None
    for program in programs.values():
        ops = [site.op for sites in program.functions.values() for site in sites]
        assert "stablehlo.case" in ops
        assert "stablehlo.sine" in ops
        assert "stablehlo.cosine" in ops


def test_what_cannot_lower_together_is_lowered_per_platform() -> None:
    def callback(x):
        return jax.pure_callback(lambda y: y, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    traced = tracing.trace(callback, (a,), {})
    with pytest.raises(NotImplementedError):
        traced.lower(lowering_platforms=PLATFORMS)  # JAX refuses Python callbacks here
    assert lowering.lower_together(traced, PLATFORMS) is None


def test_callbacks_no_longer_need_the_fallback(pytester: pytest.Pytester) -> None:
    """The plugin lowers a program with a callback for the absent platforms together, with
    the callback inert (``callbacks.inert``): no per-platform failure to report."""
    pytester.makepyfile(
        """
        import jax, jax.numpy as jnp, pytest

        def callback(x):
            out = jax.ShapeDtypeStruct(x.shape, x.dtype)
            return jax.pure_callback(lambda y: y, out, x)

        @pytest.mark.portable
        def test_callback(jaxport):
            jaxport.check(callback, jnp.ones(3))
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    [test] = report["tests"]
    [probe] = test["checks"]
    platforms = probe["platforms"]
    assert set(platforms) == {"cpu", "cuda", "rocm", "tpu"}
    for platform in PLATFORMS:
        assert platforms[platform]["error"] is None
        assert platforms[platform]["lowered"]["meta"] == 1


@pytest.mark.slow
def test_the_plugin_lowers_absent_platforms_together_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spies on the real functions (nothing is replaced): a cold run lowers cpu on its own
    (it runs there) and cuda, rocm and tpu in one lowering; a warm run reads those three from
    pytest's cache and lowers only cpu."""
    together: list[tuple[str, ...]] = []
    alone: list[str] = []
    real_together, real_lower = lowering.lower_together, lowering.lower

    def spy_together(traced, platforms):
        together.append(tuple(platforms))
        return real_together(traced, platforms)

    def spy_lower(traced, platform):
        alone.append(platform)
        return real_lower(traced, platform)

    monkeypatch.setattr(lowering, "lower_together", spy_together)
    monkeypatch.setattr(lowering, "lower", spy_lower)
    pytester.makepyfile(
        """
        import jax.numpy as jnp, pytest

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(jnp.linalg.solve, jnp.eye(4) * 2, jnp.ones((4, 2)))
        """
    )
    cold, report = run_json(pytester)
    cold.assert_outcomes(passed=1)
    assert together == [PLATFORMS]
    assert alone == ["cpu"]
    [probe] = report["tests"][0]["checks"]
    assert probe["platforms"]["cuda"]["lowered"]["libraries"]["cusolver"] == 1

    together.clear()
    alone.clear()
    warm, again = run_json(pytester)
    warm.assert_outcomes(passed=1)
    warm.stdout.fnmatch_lines(["*lowered cache 3 hits, 0 misses*"])
    assert together == []
    assert alone == ["cpu"]
    assert again["tests"][0]["checks"][0]["platforms"]["cuda"] == probe["platforms"]["cuda"]


@pytest.mark.slow
def test_a_library_function_checked_directly_is_the_check_calls(pytester: pytest.Pytester) -> None:
    """``jaxport.check(jnp.linalg.solve, ...)``: no frame of the user's code traced it, so its
    kernels are attributed to the check call, never to the plugin's own lowering code (which
    an editable install would otherwise count as the user's)."""
    pytester.makepyfile(
        test_direct="""
        import jax.numpy as jnp, pytest

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(jnp.linalg.solve, jnp.eye(4) * 2, jnp.ones((4, 2)))
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    [probe] = report["tests"][0]["checks"]
    for platform in ("cpu", *PLATFORMS):
        kernels = probe["platforms"][platform]["lowered"]["kernels"]
        assert {k["location"] for k in kernels} <= {"test_direct.py:5"}, platform
    assert probe["platforms"]["cuda"]["lowered"]["kernels"]


_UNRESOLVABLE = """
module @jit_f {
  func.func public @main(%arg0: tensor<i32> {jax.global_constant = "_platform_index"},
                         %arg1: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %c = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.add %arg0, %c : tensor<i32>
    %1 = "stablehlo.case"(%0) ({
      %2 = stablehlo.custom_call @cusolver_potrf_ffi(%arg1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      stablehlo.return %2 : tensor<4x4xf32>
    }, {
      %2 = stablehlo.custom_call @hipsolver_potrf_ffi(%arg1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      stablehlo.return %2 : tensor<4x4xf32>
    }) : (tensor<i32>) -> tensor<4x4xf32>
    return %1 : tensor<4x4xf32>
  }
}
"""


class _Parsed:
    """A lowered-like holder of a module parsed from text (what read_programs reads)."""

    def __init__(self, module: object) -> None:
        self.module = module

    def compiler_ir(self, dialect: str) -> object:
        assert dialect == "stablehlo"
        return self.module


def test_a_case_it_cannot_resolve_is_refused_not_miscounted() -> None:
    """A case whose index is computed from the platform index by an op the projection does
    not follow (here an add) would take a different branch per platform: counting both
    branches for every platform would put cuSOLVER on rocm. read_programs refuses it, so the
    check lowers for each platform instead."""
    real = lowering.lower(tracing.trace(mlp, (a,), {}), "cpu").compiler_ir("stablehlo")
    module = type(real).parse(_UNRESOLVABLE, context=real.context)
    with pytest.raises(ValueError, match="cannot resolve"):
        stablehlo.read_programs(_Parsed(module), 2)
    # a single-platform lowering has no platform index: the case is a data-dependent one
    (program,) = stablehlo.read_programs(_Parsed(module), 1)
    assert take_census(program, "cuda").custom == 1  # hipsolver is unknown on cuda


_WHILE = """
module @jit_f {
  func.func public @main(%arg0: tensor<i32> {jax.global_constant = "_platform_index"},
                         %arg1: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %0:3 = stablehlo.while(%p = %arg0, %m = %arg1, %n = %c0)
        : tensor<i32>, tensor<4x4xf32>, tensor<i32>
     cond {
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %1 = stablehlo.compare LT, %n, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = "stablehlo.case"(%p) ({
        %2 = stablehlo.custom_call @cusolver_potrf_ffi(%m) : (tensor<4x4xf32>) -> tensor<4x4xf32>
        stablehlo.return %2 : tensor<4x4xf32>
      }, {
        %2 = stablehlo.custom_call @hipsolver_potrf_ffi(%m) : (tensor<4x4xf32>) -> tensor<4x4xf32>
        stablehlo.return %2 : tensor<4x4xf32>
      }) : (tensor<i32>) -> tensor<4x4xf32>
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %3 = stablehlo.add %n, %c1 : tensor<i32>
      %4 = CARRIED
      stablehlo.return %4, %1, %3 : tensor<i32>, tensor<4x4xf32>, tensor<i32>
    }
    return %0#1 : tensor<4x4xf32>
  }
}
"""


def _parse(text: str) -> _Parsed:
    real = lowering.lower(tracing.trace(mlp, (a,), {}), "cpu").compiler_ir("stablehlo")
    return _Parsed(type(real).parse(text, context=real.context))


def test_the_platform_index_carried_unchanged_through_a_loop_is_followed() -> None:
    """A loop that hands the platform index to its body unchanged: each platform counts only
    its own branch, as in a ``shard_map`` body (``sdy.manual_computation``), whose regions
    receive the index the same way."""
    unchanged = _WHILE.replace("%4 = CARRIED", "%4 = stablehlo.abs %p : tensor<i32>")
    unchanged = unchanged.replace("stablehlo.return %4,", "stablehlo.return %p,")
    cuda, rocm = stablehlo.read_programs(_parse(unchanged), 2)
    for program, platform, library in ((cuda, "cuda", "cusolver"), (rocm, "rocm", "hipsolver")):
        census = take_census(program, platform)
        assert (census.libraries(), census.custom) == ({library: 1}, 0), platform


def test_an_index_the_loop_changes_is_refused_not_miscounted() -> None:
    """A loop that changes the carried index between iterations: the case inside may take a
    different branch each time, so the projection refuses it (the check then lowers for
    each platform) rather than counting a branch it cannot know."""
    changed = _WHILE.replace("%4 = CARRIED", "%4 = stablehlo.add %p, %c1 : tensor<i32>")
    with pytest.raises(ValueError, match="cannot resolve"):
        stablehlo.read_programs(_parse(changed), 2)


_CALLED = """
module @jit_f {
  func.func public @main(%arg0: tensor<i32> {jax.global_constant = "_platform_index"},
                         %arg1: tensor<i32>, %arg2: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %0 = func.call @pick(%arg0, %arg1) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %1 = "stablehlo.case"(%0) ({
      %2 = stablehlo.custom_call @lapack_spotrf_ffi(%arg2) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      stablehlo.return %2 : tensor<4x4xf32>
    }, {
      stablehlo.return %arg2 : tensor<4x4xf32>
    }) : (tensor<i32>) -> tensor<4x4xf32>
    return %1 : tensor<4x4xf32>
  }
  func.func private @pick(%arg0: tensor<i32> {jax.global_constant = "_platform_index"},
                          %arg1: tensor<i32>) -> tensor<i32> {
    %0 = func.call @inner(%arg0, %arg1) : (tensor<i32>, tensor<i32>) -> tensor<i32>
    return %0 : tensor<i32>
  }
  func.func private @inner(%arg0: tensor<i32> {jax.global_constant = "_platform_index"},
                           %arg1: tensor<i32>) -> tensor<i32> {
    %c = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.minimum BODY : tensor<i32>
    return %0 : tensor<i32>
  }
}
"""


def test_a_case_on_a_call_that_only_hands_the_index_on_is_data_not_platform() -> None:
    """Every function JAX lowers from a jaxpr receives the platform index, most only to hand
    it on: a ``lax.switch`` on what such a function computes from data (diffrax's and
    equinox's ``_where`` helpers inside a solve) is a case on data, counted alike on every
    platform, and the program is read from one multi-platform lowering (it was refused, and
    lowered for each platform again). Where the callee computes with the index, it is still
    refused."""
    on_data = _CALLED.replace("BODY", "%arg1, %c")
    cuda, rocm = stablehlo.read_programs(_parse(on_data), 2)
    for program, platform in ((cuda, "cuda"), (rocm, "rocm")):
        assert take_census(program, platform).custom == 1, platform  # both branches counted
    on_index = _CALLED.replace("BODY", "%arg0, %c")
    with pytest.raises(ValueError, match="cannot resolve"):
        stablehlo.read_programs(_parse(on_index), 2)


def test_a_shard_map_budget_does_not_depend_on_the_platforms_lowered_with_it(
    pytester: pytest.Pytester,
) -> None:
    """Two collectives and a dot in a shard_map body, lowered for cuda alone or together with
    rocm and tpu: two nccl calls and one cublas call either way, so ``nccl = 2`` passes."""
    pytester.makepyfile(
        test_budget_sharded="""
        import jax, numpy as np, pytest
        from jax import lax
        from jax.sharding import Mesh, PartitionSpec as P

        def body(x, w):
            return lax.psum(lax.all_gather(x @ w, "i").sum(0), "i")

        def sharded(x, w):
            mesh = Mesh(np.array(jax.devices()[:2]), ("i",))
            return jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P()), out_specs=P())(x, w)

        @pytest.mark.portable(max_library_calls={"nccl": 2, "cublas": 1})
        def test_shard_map(jaxport):
            jaxport.check(sharded, np.ones((8, 4), np.float32), np.ones((4, 4), np.float32))
        """
    )
    counts = {}
    for platforms in (["cpu", "cuda"], ["cpu", "cuda", "rocm", "tpu"]):
        pytester.makepyprojecttoml(f"[tool.jaxport]\nplatforms = {platforms!r}\n")
        result, report = run_json(pytester, "-p", "no:cacheprovider")  # lower every time
        result.assert_outcomes(passed=1)
        [probe] = report["tests"][0]["checks"]
        counts[len(platforms)] = probe["platforms"]["cuda"]["lowered"]["libraries"]
    assert counts[2] == counts[4] == {"cublas": 1, "nccl": 2}


ALIKE = {
    "elementwise": lambda x: jnp.tanh(x * 2 + 1).astype(jnp.float16),
    "shapes": lambda x: jnp.concatenate([x.T, x[::-1]]).reshape(-1)[3:9],
    "reductions": lambda x: (x.sum(0), x.max(), jnp.argmax(x, axis=1)),
    "control flow": lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) + i, x),
    "nested jit": lambda x: jax.jit(lambda y: jnp.where(y > 0, y, -y))(x),
    "custom_jvp": jax.nn.relu,
}
DIFFERENT = {
    "dot_general (cpu and tpu rules)": lambda x: x @ x,
    "scatter-add (GPU rules)": lambda x: x.at[0].add(1.0),
    "platform_dependent (jnp.diag)": jnp.diag,
    "cholesky (solver per platform)": lambda x: jnp.linalg.cholesky(x @ x.T + 4 * jnp.eye(4)),
    "threefry (a GPU kernel)": lambda x: jax.random.normal(jax.random.key(0), x.shape),
}


@pytest.mark.parametrize("case", sorted(ALIKE))
def test_a_program_that_lowers_alike_everywhere_is_lowered_once(case: str) -> None:
    """Programs of ops with one lowering rule for every platform: the cpu lowering's
    program is each other platform's, op for op (checked against real lowerings)."""
    traced = tracing.trace(ALIKE[case], (np.ones((4, 4), np.float32),), {})
    assert lowering.same_on_every_platform(traced, ("cpu", *PLATFORMS))
    cpu = stablehlo.read_program(lowering.lower(traced, "cpu"))
    for platform in PLATFORMS:
        own = stablehlo.read_program(lowering.lower(traced, platform))
        # (a cached rule's function carries the stack that lowered it: not the program's)
        assert _ops(own) == _ops(cpu), platform
        assert take_census(own, platform) == take_census(cpu, platform), platform


def _ops(program: Program) -> dict[str, list[tuple[object, ...]]]:
    return {
        name: sorted((s.op, s.target, s.flops, s.bytes, s.count, s.runs) for s in sites)
        for name, sites in program.functions.items()
    }


@pytest.mark.parametrize("case", sorted(DIFFERENT))
def test_a_program_with_a_platforms_own_rule_is_lowered_per_platform(case: str) -> None:
    traced = tracing.trace(DIFFERENT[case], (np.ones((4, 4), np.float32),), {})
    assert not lowering.same_on_every_platform(traced, ("cpu", *PLATFORMS))


@pytest.mark.slow
def test_lowerings_share_an_mlir_context_and_nested_lowerings_get_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loading every dialect into a fresh MLIR context is a fifth of a small lowering: the
    modules this package lowers share contexts (a limited number of lowerings each), while a
    program a lowering rule lowers and compiles on the way gets a context of its own (it
    must not be built at the outer module's insertion point), and JAX's own lowerings
    outside ours get fresh contexts as always."""
    from jax._src.interpreters import mlir

    original = mlir.make_ir_context

    def context_of(lowered: object) -> object:
        return lowered.compiler_ir("stablehlo").context  # type: ignore[attr-defined]

    def nested(x: jax.Array) -> jax.Array:
        # an eager op executed while the outer module is being built (lowered and compiled
        # in the middle of `mlp`'s lowering, as equinox's error_if does)
        return x * 2

    def rule(ctx, x):  # type: ignore[no-untyped-def]
        jnp.ones(3).block_until_ready()  # compiles a program of its own, mid-lowering
        return mlir.lower_fun(nested, multiple_results=False)(ctx, x)

    doubled = jax.extend.core.Primitive("jaxport_test_doubled")
    doubled.def_abstract_eval(lambda x: x)
    mlir.register_lowering(doubled, rule)

    # A context serves USES lowerings: start this test's two at the count of a fresh one, or
    # they straddle a renewal whenever the worker has lowered a multiple of USES before.
    monkeypatch.setattr(lowering._SHARED_IR_CONTEXTS, "_uses", 0)
    first = lowering.lower(jax.jit(mlp).trace(jnp.ones((4, 8))), "cuda")
    second = lowering.lower(jax.jit(lambda x: doubled.bind(x) + 1).trace(jnp.ones(3)), "tpu")
    assert mlir.make_ir_context is original  # restored once lowering is done
    assert "stablehlo.multiply" in str(second.compiler_ir("stablehlo"))
    if hasattr(mlir, "_thread_local_context"):
        # jax 0.12+ reuses contexts itself, each up to 10 times per thread: left to it (whether
        # these two share one depends on how many lowerings the thread made before)
        return
    assert context_of(first) is context_of(second)
    own = jax.jit(lambda x: x - 1).trace(jnp.ones(2)).lower(lowering_platforms=("cuda",))
    assert context_of(own) is not context_of(first)
