"""Tests of pytest_jaxport.cache (the lowered cache) and examine.lowered.

The lowered-level cache: platforms not present here are read from pytest's cache on a
second run of an unchanged suite, and lowered again when a source line moves.

Real JAX throughout, no mocks: the suites run in pytester, twice.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from pytest_jaxport._jax import keyparts, lowering, stablehlo, tracing
from pytest_jaxport._jax.devices import present_platforms, versions
from pytest_jaxport.cache import LOWERED_FORMAT, CompiledCache, lowered_key
from pytest_jaxport.model.census import (
    OpSite,
    Program,
    program_from_dict,
    program_to_dict,
    take_census,
)
from pytest_jaxport.report.files import without_timings

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")

MODELS = """
import jax.numpy as jnp


def eigvals(a):
    return jnp.linalg.eigh(a)[0]


def matmuls(a):
    return a @ a + (a * 2.0) @ a
"""

TESTS = """
import jax.numpy as jnp
import pytest
from models import eigvals, matmuls

@pytest.mark.portable
def test_eigh(jaxport):
    jaxport.check(eigvals, jnp.eye(8))

@pytest.mark.portable
def test_matmuls(jaxport):
    jaxport.check(matmuls, jnp.ones((16, 16)), transforms=["grad"])
"""

CHECKS = 3  # eigvals, matmuls, matmuls[grad]


def absent() -> int:
    """How many of the configured platforms are not present here (cached ones)."""
    present = present_platforms()
    return sum(p not in present for p in PLATFORMS)


def make_project(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n'
    )
    pytester.makepyfile(models=MODELS)
    pytester.makepyfile(test_models=textwrap.dedent(TESTS))
    pytester.syspathinsert()


def report_of(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "r.json").read_text())
    return data


def locations(report: dict[str, Any], test: str, platform: str) -> list[str]:
    entry = next(t for t in report["tests"] if t["nodeid"].endswith(test))
    kernels = entry["checks"][0]["platforms"][platform]["lowered"]["kernels"]
    return sorted(str(k.get("location")) for k in kernels)


@pytest.mark.slow
def test_second_run_reads_every_absent_platform_from_the_cache(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    n = CHECKS * absent()
    first = pytester.runpytest("--jaxport-report=r.json")
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines([f"jaxport: lowered cache 0 hits, {n} misses *"])
    before = report_of(pytester)

    second = pytester.runpytest("--jaxport-report=r.json")
    second.assert_outcomes(passed=2)
    second.stdout.fnmatch_lines([f"jaxport: lowered cache {n} hits, 0 misses *"])
    after = report_of(pytester)
    # The census from the cache is the census lowering gives (run times aside).
    assert without_timings(after["tests"]) == without_timings(before["tests"])

    for option in ("--jaxport-cache-clear", "--cache-clear"):
        cleared = pytester.runpytest(option)
        cleared.assert_outcomes(passed=2)
        cleared.stdout.fnmatch_lines([f"jaxport: lowered cache 0 hits, {n} misses *"])

    off = pytester.runpytest("-p", "no:cacheprovider")
    off.assert_outcomes(passed=2)
    assert "lowered cache" not in off.stdout.str()


@pytest.mark.slow
def test_a_moved_source_line_is_lowered_again(pytester: pytest.Pytester) -> None:
    if "cuda" in present_platforms():
        pytest.skip("cuda is present here: it is lowered, never cached")
    make_project(pytester)
    # Fresh processes throughout: older JAX keeps a traced module's source locations
    # in-process, across pytester's in-process runs of other tests' models.py.
    pytester.runpytest_subprocess("--jaxport-report=r.json").assert_outcomes(passed=2)
    before = locations(report_of(pytester), "test_eigh", "cuda")
    line = MODELS.strip().splitlines().index("    return jnp.linalg.eigh(a)[0]") + 1
    assert before == [f"models.py:{line}"], before

    # Two lines above eigvals: its kernels move; matmuls' equations move too.
    pytester.makepyfile(models="# moved\n# down\n" + MODELS.strip() + "\n")
    moved = pytester.runpytest_subprocess("--jaxport-report=r.json")
    moved.assert_outcomes(passed=2)
    moved.stdout.fnmatch_lines([f"jaxport: lowered cache 0 hits, {CHECKS * absent()} misses *"])
    after = locations(report_of(pytester), "test_eigh", "cuda")
    assert after == [f"models.py:{line + 2}"]


def test_cached_program_keeps_costs_and_census(tmp_path: Any) -> None:
    """Round trip through an entry: the same Program, so the same census and roofline."""
    import jax.numpy as jnp

    def f(a: Any) -> Any:
        return jnp.linalg.eigh(a @ a)[0]

    traced = tracing.trace(f, (jnp.eye(8),), {})
    program = stablehlo.read_program(lowering.lower(traced, "cuda"))
    assert any(site.flops > 0 for sites in program.functions.values() for site in sites)
    assert any(site.count > 1 for sites in program.functions.values() for site in sites)
    assert program_from_dict(json.loads(json.dumps(program_to_dict(program)))) == program

    jaxpr, sources = keyparts.census_key_parts(traced)
    key = lowered_key(jaxpr=jaxpr, sources=sources, platform="cuda", versions=versions())
    assert key != lowered_key(jaxpr=jaxpr, sources=sources, platform="rocm", versions=versions())
    cache = CompiledCache(directory=tmp_path, format=LOWERED_FORMAT)
    assert cache.get(key) is None
    cache.put(key, program)
    cached = cache.get(key)
    assert cached == program

    def seconds(site: OpSite, layer: str) -> float:
        return site.flops + site.bytes

    fresh = take_census(program, "cuda", seconds=seconds)
    assert take_census(cached, "cuda", seconds=seconds) == fresh
    assert fresh.estimated_seconds


def test_old_three_field_entries_still_read() -> None:
    program = program_from_dict(
        {"entry": "main", "functions": {"main": [["stablehlo.add", None, None]]}}
    )
    assert program == Program(entry="main", functions={"main": (OpSite(op="stablehlo.add"),)})
    with pytest.raises(ValueError, match="not an op site"):
        program_from_dict({"entry": "main", "functions": {"main": [["a", None]]}})
    for count in (0, True, "2", 1.5):
        with pytest.raises(ValueError, match="not an op site count"):
            program_from_dict(
                {"entry": "main", "functions": {"main": [["a", None, None, 0, 0, count]]}}
            )
    six = program_from_dict({"entry": "main", "functions": {"main": [["a", None, None, 1, 2, 4]]}})
    assert six.functions["main"] == (OpSite(op="a", flops=1.0, bytes=2.0, count=4),)


def test_key_parts_are_made_once_per_jaxpr_and_settings_follow_every_change() -> None:
    """The identity key's parts are made once per jaxpr while it lives (an audit asks again
    for each signature JAX runs it with) and JAX's settings' text again when one changed."""
    import jax
    import jax.numpy as jnp

    def f(a: Any) -> Any:
        return jnp.sin(a) * 2.0

    traced = tracing.trace(f, (jnp.ones(3),), {})
    parts = keyparts.census_key_parts(traced)
    assert keyparts.census_key_parts(traced) is parts  # the same jaxpr: made once
    assert keyparts.census_key_parts(traced, ("mine",)) is not parts  # another own: again
    other = tracing.trace(f, (jnp.ones(4),), {})
    assert keyparts.census_key_parts(other)[0] != parts[0]  # another jaxpr: its own text
    assert keyparts.census_key_parts(other)[0].replace("[4]", "[3]") == parts[0]

    before = keyparts.lowering_settings()
    assert keyparts.lowering_settings() is before
    with jax.default_matmul_precision("highest"):
        changed = keyparts.lowering_settings()
        assert changed != before
        assert "'highest'" in changed
    assert keyparts.lowering_settings() == before


def test_key_text_is_the_same_whether_jax_shares_a_nested_program_or_not() -> None:
    """The key's text writes a nested jaxpr wherever it is used: JAX shares one traced
    object between two calls of a jitted function in one process and not in another (it
    caches traces), and the key must not tell them apart. Scalar literals are their exact
    values (0.1 and 0.10000001 are other programs)."""
    import jax
    import jax.numpy as jnp

    inner = jax.jit(lambda a: jnp.sin(a) * 0.1)

    def f(a: Any) -> Any:
        return inner(a) + inner(a + 1.0)

    closed = jax.make_jaxpr(f)(jnp.ones(3))
    body = getattr(closed, "jaxpr", closed)
    calls = [e for e in body.eqns if "jaxpr" in e.params]
    assert len(calls) == 2
    assert calls[0].params["jaxpr"] is calls[1].params["jaxpr"]
    shared = keyparts._program_text(closed)

    nested = calls[1].params["jaxpr"]
    if hasattr(nested, "jaxpr"):  # a ClosedJaxpr (jax < 0.11)
        copy = type(nested)(nested.jaxpr.replace(eqns=list(nested.jaxpr.eqns)), nested.consts)
    else:  # jax >= 0.11: one Jaxpr type
        copy = nested.replace(eqns=list(nested.eqns))
    eqns = [
        e.replace(params={**e.params, "jaxpr": copy}) if e is calls[1] else e for e in body.eqns
    ]
    if hasattr(closed, "jaxpr"):
        unshared = type(closed)(closed.jaxpr.replace(eqns=eqns), closed.consts)
    else:
        unshared = closed.replace(eqns=eqns)
    assert sum(e.params.get("jaxpr") is nested for e in eqns) == 1
    assert keyparts._program_text(unshared) == shared
    assert shared.count("= sin[") == 2  # written at both calls

    other = jax.make_jaxpr(lambda a: jnp.sin(a) * 0.10000001)(jnp.ones(3))
    same = jax.make_jaxpr(lambda a: jnp.sin(a) * 0.1)(jnp.ones(3))
    assert keyparts._program_text(other) != keyparts._program_text(same)
    assert "0.1" in keyparts._program_text(same).partition("= mul[")[2]
