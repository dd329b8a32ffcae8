"""Tests of pytest_jaxport.recorder and _jax.interception on library code.

The audit on the ways real JAX code is jitted: flax (nnx and linen), equinox, optax, and
sharded programs (``shard_map``, ``NamedSharding`` inputs, ``pmap``) on several host devices.

The libraries are not pytest-jaxport's dependencies: each test skips, saying which package it
needs, where it is not installed. The sharded suite runs in a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (set before JAX starts).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # each test audits a suite of library code in a subprocess

PLATFORMS = '[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n'


def audit_of(pytester: pytest.Pytester, *args: str, cache: bool = False) -> dict[str, Any]:
    result = pytester.runpytest_subprocess(
        "--jaxport-audit",
        "--jaxport-report=report.json",
        *(() if cache else ("-p", "no:cacheprovider")),
        *args,
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == outcomes.get("errors", 0) == 0, result.stdout.str()
    audit: dict[str, Any] = json.loads((pytester.path / "report.json").read_text())["audit"]
    return audit


def cuda_libraries(computation: dict[str, Any]) -> dict[str, int]:
    libraries: dict[str, int] = computation["platforms"]["cuda"]["lowered"]["libraries"]
    return libraries


def test_flax_equinox_and_optax_steps_are_recorded(pytester: pytest.Pytester) -> None:
    pytest.importorskip("flax", reason="needs flax (pip install flax)")
    pytest.importorskip("equinox", reason="needs equinox (pip install equinox)")
    pytest.importorskip("optax", reason="needs optax (pip install optax)")
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_libraries="""
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        import optax
        from flax import linen, nnx


        def test_nnx_jit():
            model = nnx.Linear(8, 4, rngs=nnx.Rngs(0))

            @nnx.jit
            def nnx_forward(model, x):
                return model(x)

            assert nnx_forward(model, jnp.ones((2, 8))).shape == (2, 4)


        def test_linen_apply_under_jit():
            layer = linen.Dense(4)
            params = layer.init(jax.random.key(0), jnp.ones((2, 8)))
            linen_forward = jax.jit(layer.apply)
            assert linen_forward(params, jnp.ones((2, 8))).shape == (2, 4)


        def test_equinox_filter_jit():
            mlp = eqx.nn.MLP(8, 4, 16, 2, key=jax.random.key(1))

            @eqx.filter_jit
            def eqx_forward(model, x):
                return jax.vmap(model)(x)

            assert eqx_forward(mlp, jnp.ones((3, 8))).shape == (3, 4)


        def test_optax_update_in_a_jitted_step():
            optimizer = optax.adam(1e-3)
            w = jnp.ones((8, 4))
            state = optimizer.init(w)

            @jax.jit
            def train_step(w, state, x):
                grads = jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)
                updates, state = optimizer.update(grads, state, w)
                return optax.apply_updates(w, updates), state

            for _ in range(3):
                w, state = train_step(w, state, jnp.ones((2, 8)))
        """
    )
    audit = audit_of(pytester)
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for computation in audit["computations"]:
        if computation["kind"] == "jit" and computation["owner"]:
            by_owner.setdefault(computation["owner"].split("::")[1], []).append(computation)
    for test in ("test_nnx_jit", "test_linen_apply_under_jit", "test_equinox_filter_jit",
                 "test_optax_update_in_a_jitted_step"):  # fmt: skip
        gemms = [c for c in by_owner.get(test, ()) if cuda_libraries(c).get("cublas")]
        assert gemms, f"{test}: no jitted computation with a cuBLAS dot recorded"
    (step,) = [c for c in by_owner["test_optax_update_in_a_jitted_step"]
               if c["function"] == "train_step"]  # fmt: skip
    # the forward and the backward dot, at the test's line, counted once for three calls
    assert cuda_libraries(step) == {"cublas": 2}
    assert step["users"] == ["test_libraries.py::test_optax_update_in_a_jitted_step"]
    assert all(not c["findings"] for c in audit["computations"])
    # The formats-and-layout layer is counted for the unchanged suite: each float32 dot of
    # these libraries runs TF32 on an H100 and one bfloat16 pass on a TPU at the default
    # precision, at the test's line that called the library.
    platforms = audit["summary"]["platforms"]
    assert platforms["tpu"]["format_findings"] > 0
    assert platforms["cuda"]["format_findings"] == platforms["tpu"]["format_findings"]
    assert platforms["cpu"]["format_findings"] == platforms["rocm"]["format_findings"] == 0
    [finding] = step["platforms"]["tpu"]["lowered"]["formats"]["findings"]
    assert (finding["rule"], finding["count"]) == ("float32-default-precision", 2)
    assert finding["location"].startswith("test_libraries.py:")
    sites = {(s["platform"], s["name"]) for s in audit["sites"] if s["layer"] == "format"}
    assert ("tpu", "float32-default-precision") in sites


def test_sharded_programs_are_recorded_with_their_shardings(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    pytester.makefile(".toml", pyproject=PLATFORMS)
    pytester.makepyfile(
        test_sharded="""
        from functools import partial

        import jax
        import jax.numpy as jnp
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        MESH = Mesh(np.array(jax.devices()[:4]), ("data",))


        def test_data_parallel_step():
            x = jax.device_put(jnp.ones((8, 16)), NamedSharding(MESH, P("data")))
            w = jnp.ones((16, 4))

            @jax.jit
            def data_parallel(w, x):
                return jnp.mean(jnp.tanh(x @ w))

            assert data_parallel(w, x).shape == ()


        def test_data_parallel_gradient():
            x = jax.device_put(jnp.ones((8, 16)), NamedSharding(MESH, P("data")))
            w = jax.device_put(jnp.ones((16, 4)), NamedSharding(MESH, P()))

            @jax.jit
            def gradient(w, x):
                return jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w)))(w)

            assert gradient(w, x).shape == (16, 4)


        def test_shard_map_psum():
            @jax.jit
            @partial(jax.shard_map, mesh=MESH, in_specs=P("data"), out_specs=P())
            def summed(x):
                return jax.lax.psum(x.sum(), "data")

            assert summed(jnp.arange(8.0)) == 28.0


        def test_pmap():
            out = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.ones((4, 2)))
            assert out.shape == (4, 2)
        """
    )
    audit = audit_of(pytester, cache=True)
    names = {c["function"]: c for c in audit["computations"]}
    parallel = names["data_parallel"]
    assert any("data" in s for s in parallel["shardings"]), parallel["shardings"]
    assert cuda_libraries(parallel).get("cublas") == 1
    # the SPMD partitioner's collectives, as jaxport.check counts them: the mean over the
    # split batch, and the gradient of the replicated weights, need an all-reduce each
    for name in ("data_parallel", "gradient"):
        computation = names[name]
        assert computation["partitions"] == 4, name
        for platform, library in (("cuda", "nccl"), ("rocm", "rccl")):
            census = computation["platforms"][platform]["lowered"]
            reduce = census["collectives"]["all-reduce"]
            assert reduce["inserted"] >= 1, (name, platform, census["collectives"])
            assert census["libraries"][library] == reduce["count"], (name, platform)
        assert computation["findings"] == []
    # a warm run reads the partitioner's record from the lowered cache: the same audit
    from pytest_jaxport.report.files import without_timings

    warm = audit_of(pytester, cache=True)
    warm["seen"].pop("calls")
    audit["seen"].pop("calls")
    assert without_timings(warm) == without_timings(audit)
    folder = pytester.path / ".pytest_cache" / "d" / "jaxport-lowered"
    entries = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    partitioned = sum(c["partitions"] > 1 for c in audit["computations"])
    assert partitioned >= 3  # data_parallel, gradient, the shard_map program
    # a judged census only for those not partitioned (their collectives depend on the
    # machine); for each partitioned one its program per platform and the partitioner's record
    judged = [e for e in entries if "judged" in e]
    assert len(judged) == audit["seen"]["computations"] - partitioned
    assert len(entries) - len(judged) == 4 * partitioned + partitioned
    (summed,) = [c for c in audit["computations"] if c["owner"] and "shard_map" in c["owner"]
                 and c["kind"] == "jit"]  # fmt: skip
    assert cuda_libraries(summed).get("nccl") == 1  # the psum, an all-reduce
    import jax

    pmapped = [c for c in audit["computations"] if c["function"] == "pmap"]
    if tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 7):
        assert [c["kind"] for c in pmapped] == ["jit"], "pmap is a jit on jax 0.7+"
        assert cuda_libraries(pmapped[0]).get("nccl") == 1
    else:  # older pmap is compiled outside jit: counted, not audited
        assert audit["seen"]["compiled_outside"] >= 1
