"""Tests of pytest_jaxport.model.platforms: neuron, not a described platform.

``neuron`` (AWS Trainium, Inferentia2) is not a described platform yet (issue 41), and
these tests pin why, so that a JAX that starts lowering it differently is noticed
(``docs/compatibility.md``, section "neuron").

JAX names ``neuron`` in two lists only (``mlir._platforms_with_donation`` and the
compilation cache's supported platforms): it has no lowering rule of its own for it. So
``lowering_platforms=("neuron",)`` lowers by JAX's platform-independent rules, exactly as
for a name no backend uses; what has only platform rules (eigh, ``pallas_call``, host
callbacks) does not lower. Measured on jax 0.6.2, 0.10.2 and 0.12.0.1 alike. What neuron
runs is what AWS's PJRT plugin and compiler (jax-neuronx, neuronx-cc, not on PyPI) make of
that program, which no machine here can see: counts taken for it would be JAX's generic
program, all ``xla``. Real JAX, real lowering, each expectation asked of JAX itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.sharding import Mesh, PartitionSpec

from pytest_jaxport.model import platforms
from pytest_jaxport.model.platforms import DESCRIPTIONS

NO_BACKEND = "jaxport-no-such-backend"
"""A platform name no JAX release knows: what its generic lowering looks like."""

A = jnp.eye(8) + 0.1
B = jnp.ones(8)


def _conv(x: jax.Array, k: jax.Array) -> jax.Array:
    return lax.conv(x, k, (1, 1), "SAME")


def _psum(x: jax.Array) -> jax.Array:
    mesh = Mesh(np.array(jax.devices()[:1]), ("i",))
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # jax < 0.7: the experimental module
        from jax.experimental.shard_map import shard_map
    summed = shard_map(
        lambda y: lax.psum(y, "i"), mesh=mesh, in_specs=PartitionSpec("i"),
        out_specs=PartitionSpec(),
    )  # fmt: skip
    return summed(x)  # type: ignore[no-any-return]


LOWERED: dict[str, tuple[Callable[..., object], tuple[jax.Array, ...]]] = {
    "dot": (jnp.dot, (A, A)),
    "conv": (_conv, (jnp.ones((1, 3, 8, 8)), jnp.ones((4, 3, 3, 3)))),
    "solve": (jnp.linalg.solve, (A, B)),
    "cholesky": (jnp.linalg.cholesky, (A,)),
    "fft": (jnp.fft.fft, (B,)),
    "collective": (_psum, (B,)),
}


def _text(fn: Callable[..., object], args: tuple[jax.Array, ...], platform: str) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def _ops(text: str) -> list[str]:
    """The program's ops and custom-call targets, in order (no names, no locations)."""
    ops = re.findall(r"\b(stablehlo\.\w+|custom_call @\w+|call_target_name = \"[^\"]+\")", text)
    return ops


@pytest.mark.parametrize("name", list(LOWERED))
def test_neuron_lowers_by_jaxs_generic_rules_only(name: str) -> None:
    """dot, conv, solve, cholesky, fft and a collective lower for neuron to the very program
    a name no backend uses gets: no library call, no neuron rule. The day JAX registers one
    (a solver target, a kernel), this fails and neuron's description can be written."""
    fn, args = LOWERED[name]
    neuron = _text(fn, args, "neuron")
    assert _ops(neuron) == _ops(_text(fn, args, NO_BACKEND))
    assert "custom_call" not in neuron  # what a vendor library or kernel would be
    if name == "solve":  # the LU runs as JAX's own ops (a loop of XLA ops), no getrf
        assert "stablehlo.while" in neuron or "stablehlo.scatter" in neuron
    if name == "collective":
        assert "stablehlo.all_reduce" in neuron


def _pallas(x: jax.Array) -> jax.Array:
    def double(x_ref, o_ref):  # type: ignore[no-untyped-def]
        o_ref[...] = x_ref[...] * 2.0

    return pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)  # type: ignore[no-any-return]


def _callback(x: jax.Array) -> jax.Array:
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.pure_callback(lambda a: a, shape, x)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("name", "fn", "args", "error", "said"),
    [
        ("eigh", jnp.linalg.eigh, (A,), NotImplementedError,
         "MLIR translation rule for primitive 'eigh' not found for platform neuron"),
        ("pallas_call", _pallas, (jnp.ones((8, 128)),), NotImplementedError,
         "MLIR translation rule for primitive 'pallas_call' not found for platform neuron"),
        ("host callback", _callback, (B,), ValueError,
         "`EmitPythonCallback` not supported on neuron backend."),
    ],
)  # fmt: skip
def test_what_has_only_platform_rules_does_not_lower_for_neuron(
    name: str,
    fn: Callable[..., object],
    args: tuple[jax.Array, ...],
    error: type[Exception],
    said: str,
) -> None:
    """JAX's own words, as docs/compatibility.md records them: eigh and a Pallas kernel
    have no neuron rule, a host callback is refused by name."""
    with pytest.raises(error) as raised:
        _text(fn, args, "neuron")
    assert said in str(raised.value), name


def test_neuron_is_not_a_platform_and_asking_for_it_says_so(pytester: pytest.Pytester) -> None:
    """Until it is described, ``neuron`` is refused as any unknown platform is, naming the
    key and the platforms there are; never an INTERNALERROR."""
    assert "neuron" not in DESCRIPTIONS
    assert "neuron" not in platforms.PLATFORMS
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "neuron"]\n')
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stderr.str()
    assert "pyproject.toml: [tool.jaxport] platforms: unknown platform 'neuron'" in said
    assert f"expected one of {', '.join(platforms.PLATFORMS)}" in said
    assert "INTERNALERROR" not in said + result.stdout.str()
