"""Tests of pytest_jaxport.model.partitioner and _jax.execution.compile_partitioned.

Sharded programs: the collectives XLA's SPMD partitioner inserts, counted and attributed.

The suite runs with four host devices (``conftest.py``). Independent counts: the SPMD
semantics of data parallelism (one all-reduce per parameter gradient when parameters are
replicated and the batch is sharded), and the collectives in the text of XLA's own dump of
the partitioned module.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import run_json, typed
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from pytest_jaxport._jax import execution, lowering, tracing
from pytest_jaxport._jax.execution import compile_partitioned
from pytest_jaxport.model import partitioner
from pytest_jaxport.model.census import OpSite, Program, parse_location, take_census
from pytest_jaxport.model.probe import PlatformProbe, census_from_dict, census_to_dict
from pytest_jaxport.view.text import collectives_line

LAYERS = 3


def _mesh(*shape: int, names: tuple[str, ...] = ("data",)) -> Mesh:
    count = int(np.prod(shape))
    return Mesh(np.array(jax.devices()[:count]).reshape(shape), names)


def mlp_loss(params, x, y):
    h = x
    for w, b in params:
        h = jnp.tanh(h @ w + b)  # LAYER LINE
    return jnp.mean((h - y) ** 2)


def sgd_step(params, x, y):
    grads = jax.grad(mlp_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def data_parallel():
    mesh = _mesh(4)
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = [
        (jax.device_put(np.eye(8, dtype=np.float32), replicated),
         jax.device_put(np.zeros(8, np.float32), replicated))
        for _ in range(LAYERS)
    ]  # fmt: skip
    x = jax.device_put(np.ones((16, 8), np.float32), batch)
    y = jax.device_put(np.ones((16, 8), np.float32), batch)
    return params, x, y


def model_parallel(x, w1, w2):
    mesh = _mesh(2, 2, names=("data", "model"))
    h = lax.with_sharding_constraint(jnp.tanh(x @ w1), NamedSharding(mesh, P("data", "model")))
    return lax.with_sharding_constraint(h @ w2, NamedSharding(mesh, P("data", None)))


def psum_only(x):
    return jax.shard_map(
        lambda v: lax.psum(v * 2, "data"), mesh=_mesh(4), in_specs=P("data"), out_specs=P()
    )(x)


LAYER_LINE = next(
    i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if "LAYER LINE" in line
)


def _dump(fn, *args) -> Path:
    lowered = lowering.lower(tracing.trace(fn, args, {}), "cpu")
    directory = Path(tempfile.mkdtemp())
    lowered.compile(partitioner.dump_options(directory))
    return directory


def _dumped_text(directory: Path, pattern: str) -> str:
    [path] = directory.glob(pattern)
    return path.read_text()


def _count(text: str, opcode: str) -> int:
    """Instructions of ``opcode`` in HLO text (a tuple result has spaces: match either)."""
    return len(re.findall(rf"= (?:\([^)]*\)|\S+) {opcode}\(", text))


def test_data_parallel_gradients_are_all_reduced_once_per_parameter() -> None:
    inserted = partitioner.inserted_collectives(_dump(sgd_step, *data_parallel()))
    assert {site.op for site in inserted} == {"spmd.all_reduce"}
    assert sum(site.count for site in inserted) == 2 * LAYERS  # a weight and a bias per layer
    lines = {parse_location(site.location) for site in inserted}
    assert {(loc.file, loc.line) for loc in lines if loc} == {(__file__, LAYER_LINE)}


def test_inserted_collectives_are_those_of_the_partitioned_module() -> None:
    """XLA's partitioned module, counted as text, minus the module as lowered."""
    x, w = np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)
    mesh = _mesh(2, 2, names=("data", "model"))
    args = [
        jax.device_put(x, NamedSharding(mesh, P("data"))),
        jax.device_put(w, NamedSharding(mesh, P(None, "model"))),
        jax.device_put(w, NamedSharding(mesh, P("model", None))),
    ]
    directory = _dump(model_parallel, *args)
    after = _dumped_text(directory, "*after_spmd-partitioning*.txt")
    before = _dumped_text(directory, "*before_optimizations.txt")
    inserted = partitioner.inserted_collectives(directory)
    for opcode in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        op = "spmd." + opcode.replace("-", "_")
        found = sum(site.count for site in inserted if site.op == op)
        assert found == _count(after, opcode) - _count(before, opcode), opcode
    assert sum(site.count for site in inserted) >= 1


def test_a_program_s_own_collectives_are_not_inserted_ones() -> None:
    directory = _dump(psum_only, np.ones(8, np.float32))
    assert _count(_dumped_text(directory, "*before_optimizations.txt"), "all-reduce") == 1
    assert partitioner.inserted_collectives(directory) == ()


def test_an_unpartitioned_program_has_no_record() -> None:
    with pytest.raises(ValueError, match="0 records of a partitioned module"):
        partitioner.inserted_collectives(_dump(jnp.sin, np.ones(3, np.float32)))


def test_with_inserted_adds_one_function_called_once() -> None:
    program = Program(entry="main", functions={"main": (OpSite(op="stablehlo.add"),)})
    sites = (OpSite(op="spmd.all_reduce", location='loc("m.py":3:1)', count=2),)
    added = partitioner.with_inserted(program, sites)
    assert added.functions[partitioner.PARTITIONER_FUNCTION] == sites
    assert partitioner.with_inserted(added, sites) is added
    assert partitioner.with_inserted(program, ()) is program
    for platform, library in (("cuda", "nccl"), ("rocm", "rccl")):
        census = take_census(added, platform)
        assert census.libraries() == {library: 2}
        [kernel] = census.kernels
        assert (kernel.name, str(kernel.location)) == ("spmd.all_reduce", "m.py:3")
    tpu = take_census(added, "tpu")
    assert tpu.xla_kinds == {"ici-collective": 2, "xla": 1}
    assert [(c.kind, c.count, c.inserted) for c in tpu.collectives] == [("all-reduce", 2, 2)]


def test_collectives_in_the_report_and_the_text() -> None:
    program = Program(
        entry="main",
        functions={
            "main": (
                OpSite(op="stablehlo.all_gather"),
                OpSite(op="func.call", target=partitioner.PARTITIONER_FUNCTION),
            ),
            partitioner.PARTITIONER_FUNCTION: (OpSite(op="spmd.all_reduce", count=3),),
        },
    )
    census = take_census(program, "cuda")
    data = census_to_dict(census)
    assert data["collectives"] == {
        "all-gather": {"count": 1, "inserted": 0, "library": "nccl",
                       "counterparts": {"rocm": "rccl", "tpu": "ici", "cpu": "xla-cpu"}},
        "all-reduce": {"count": 3, "inserted": 3, "library": "nccl",
                       "counterparts": {"rocm": "rccl", "tpu": "ici", "cpu": "xla-cpu"}},
    }  # fmt: skip
    assert census_from_dict("cuda", data).collectives == census.collectives
    line = collectives_line(PlatformProbe(platform="cuda", present=False, census=census))
    assert line == (
        "cuda: collectives (nccl): all-gather 1, all-reduce 3 (3 inserted by the SPMD partitioner)"
    )
    plain = take_census(Program(entry="main", functions={"main": (OpSite(op="a"),)}), "cuda")
    assert "collectives" not in census_to_dict(plain)
    assert census_from_dict("cuda", census_to_dict(plain)) == dataclasses.replace(plain)


DATA_PARALLEL_TEST = """
import jax, jax.numpy as jnp, numpy as np, pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def loss(params, x, y):
    h = x
    for w, b in params:
        h = jnp.tanh(h @ w + b)
    return jnp.mean((h - y) ** 2)

def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

@pytest.mark.portable(max_library_calls={"nccl": 6, "rccl": 6})
def test_step(jaxport):
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = [(jax.device_put(np.eye(8, dtype=np.float32), replicated),
               jax.device_put(np.zeros(8, np.float32), replicated)) for _ in range(3)]
    x = jax.device_put(np.ones((16, 8), np.float32), batch)
    jaxport.check(step, params, x, x)
"""


def _collectives(probe: dict, platform: str) -> dict:
    return probe["platforms"][platform]["lowered"].get("collectives", {})


@pytest.mark.slow
def test_the_gradient_all_reduce_is_counted_per_platform(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cold: the compile that runs the check records the partitioning (once); warm: the
    record comes from the lowered cache and the compile is a plain one (a spy on the real
    function, nothing replaced)."""
    recorded: list[object] = []
    real = compile_partitioned

    def spy(lowered):
        recorded.append(lowered)
        return real(lowered)

    monkeypatch.setattr(execution, "compile_partitioned", spy)
    pytester.makepyfile(test_dp=DATA_PARALLEL_TEST)
    cold, report = run_json(pytester, "-vv")  # -vv: every test's per-check details
    assert len(recorded) == 1
    cold.assert_outcomes(passed=1)
    cold.stdout.fnmatch_lines(
        [
            "*cuda: vendor spmd.all_reduce (nccl) x6 at test_dp.py:7",
            "*cuda: collectives (nccl): all-reduce 6 (6 inserted by the SPMD partitioner)",
            "*tpu: collectives (ici): all-reduce 6 (6 inserted by the SPMD partitioner)",
        ]
    )
    [probe] = report["tests"][0]["checks"]
    for platform, library in (("cuda", "nccl"), ("rocm", "rccl"), ("tpu", "ici")):
        found = _collectives(probe, platform)["all-reduce"]
        assert (found["count"], found["inserted"], found["library"]) == (6, 6, library)
    assert probe["platforms"]["cuda"]["lowered"]["libraries"]["nccl"] == 6
    assert probe["platforms"]["tpu"]["lowered"]["xla_kinds"]["ici-collective"] == 6

    recorded.clear()
    warm, again = run_json(pytester)  # absent platforms read from the lowered cache
    warm.assert_outcomes(passed=1)
    assert recorded == []
    warm.stdout.fnmatch_lines(["*lowered cache 3 hits, 0 misses*"])
    assert again["tests"][0]["checks"][0]["platforms"]["cuda"] == probe["platforms"]["cuda"]


def test_collectives_by_kind_are_in_the_suite_totals_of_every_format(
    pytester: pytest.Pytester,
) -> None:
    """The suite totals carry each platform's collectives by kind (the 6 gradient
    all-reduces the partitioner inserts), and every format shows them with what runs them
    on each platform."""
    from pytest_jaxport.view import html as html_report
    from pytest_jaxport.view import markdown as render

    pytester.makepyfile(test_dp=DATA_PARALLEL_TEST)
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    totals = report["summary"]["platforms"]
    for platform in ("cpu", "cuda", "rocm", "tpu"):
        assert totals[platform]["collectives"] == {"all-reduce": {"count": 6, "inserted": 6}}
    kinds = "all-reduce 6 (6 inserted by the SPMD partitioner)"
    runs = "xla-cpu on cpu, nccl on cuda, rccl on rocm, ici on tpu"
    result.stdout.fnmatch_lines(
        ["collectives by kind*", f"  cpu, cuda, rocm, tpu: {kinds}", f"  run by: {runs}"]
    )
    assert f"**cpu, cuda, rocm, tpu**: {kinds}" in render.markdown(typed(report))
    assert f"<b>run by</b>: {runs}" in html_report.html(typed(report))
    result.stdout.fnmatch_lines(
        ["platform * collective", "* calls  libraries", "cuda * 6  *nccl 6"]
    )


def test_a_budget_fails_on_inserted_collectives(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dp=DATA_PARALLEL_TEST.replace('"nccl": 6', '"nccl": 5'))
    result, _ = run_json(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["cuda: 6 nccl calls > 5 (max_library_calls.nccl, set in *", "*spmd.all_reduce*"]
    )


@pytest.mark.slow
def test_the_partition_is_keyed_by_the_input_shardings(pytester: pytest.Pytester) -> None:
    """The same jaxpr with the batch replicated instead of sharded: no all-reduce, and not
    the cached census of the sharded run."""
    pytester.makepyfile(test_dp=DATA_PARALLEL_TEST)
    run_json(pytester)[0].assert_outcomes(passed=1)
    sharded = 'batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))'
    assert sharded in DATA_PARALLEL_TEST
    replicated = DATA_PARALLEL_TEST.replace(sharded, "batch = (NamedSharding(mesh, P()),) * 2")
    pytester.makepyfile(test_dp=replicated)
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    [probe] = report["tests"][0]["checks"]
    assert _collectives(probe, "cuda") == {}


def test_without_the_reference_platform_the_check_partitions_anyway(
    pytester: pytest.Pytester,
) -> None:
    """Nothing runs (cpu is not configured): the program is compiled here only to be
    partitioned."""
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cuda", "rocm"]\nreference = "cuda"\n')
    pytester.makepyfile(test_dp=DATA_PARALLEL_TEST)
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    [probe] = report["tests"][0]["checks"]
    assert _collectives(probe, "rocm")["all-reduce"]["inserted"] == 6


def test_shard_map_collectives_are_the_program_s_own(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_psum="""
        import jax, numpy as np, pytest
        from jax import lax
        from jax.sharding import Mesh, PartitionSpec as P

        def total(x):
            mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
            body = lambda v: lax.psum(lax.ppermute(v, "i", [(0, 1), (1, 0)]), "i")
            return jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P())(x)

        @pytest.mark.portable
        def test_total(jaxport):
            jaxport.check(total, np.arange(8.0, dtype=np.float32))
        """
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    [probe] = report["tests"][0]["checks"]
    found = _collectives(probe, "rocm")
    assert {kind: (c["count"], c["inserted"]) for kind, c in found.items()} == {
        "all-reduce": (1, 0),
        "permute": (1, 0),
    }


@pytest.mark.slow
def test_a_compile_served_from_jax_s_persistent_cache_still_counts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With JAX's persistent compilation cache on, the second session's executable comes
    from that cache: XLA compiles nothing and records nothing, so the check compiles once
    more past the cache for the record. Both sessions count the six all-reduces."""
    cache = tmp_path / "xla-cache"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(cache))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    pytester.makepyfile(test_dp=DATA_PARALLEL_TEST)
    for session in ("cold", "served from the cache"):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--jaxport-report=r.json")
        result.assert_outcomes(passed=1)
        report = json.loads((pytester.path / "r.json").read_text())
        [probe] = report["tests"][0]["checks"]
        found = _collectives(probe, "cuda")["all-reduce"]
        assert (found["count"], found["inserted"]) == (6, 6), session
        assert any(cache.iterdir()), "JAX wrote no cache entry: the test tests nothing"
