"""JAX's release-dependent facts the plugin relies on, checked on the installed JAX.

Lowering several platforms together (issue 55, item 18): threefry's GPU rule runs the default
rule (the unrolled hash) unless ``jax_threefry_gpu_kernel_lowering`` is on, so JAX's cuda,
rocm and tpu programs of a random draw are the same; set aside, the hash is emitted once for
the three instead of once per platform (blackjax's eager draws: a third of its audit's cold
lowering). Every program must be what each platform's own lowering gives.
"""

from __future__ import annotations

import re

import jax
import pytest

from pytest_jaxport._jax import adapters, lowering, stablehlo
from pytest_jaxport.model.census import Census, Program, take_census
from pytest_jaxport.model.classification import classify

PLATFORMS = ("cuda", "rocm", "tpu")


def _draw() -> jax.stages.Traced:
    return jax.jit(lambda key: jax.random.normal(key, (5, 2))).trace(jax.random.key(0))


def _census(program: Program, platform: str) -> Census:
    return take_census(program, platform, classifier=lambda p, op, t: classify(p, op, t))


class _Lowerings:
    """A real traced computation that keeps the module text of each lowering made of it (what
    :func:`lowering.lower_together` lowered); everything else is the computation's own."""

    def __init__(self, traced: jax.stages.Traced) -> None:
        self.traced = traced
        self.texts: list[str] = []

    def lower(self, *, lowering_platforms: tuple[str, ...]) -> jax.stages.Lowered:
        lowered: jax.stages.Lowered = self.traced.lower(lowering_platforms=lowering_platforms)
        self.texts.append(lowered.as_text())
        return lowered


def _hash_ops(text: str) -> int:
    """The unrolled hash's rotations in a module: 20 per threefry2x32 emitted."""
    return text.count("stablehlo.shift_left")


def _cases(text: str) -> list[str]:
    """Each ``stablehlo.case`` of a module's text with its regions (braces balanced)."""
    cases = []
    for start in (m.start() for m in re.finditer(r'"stablehlo\.case"', text)):
        depth, end = 0, start
        for end in range(text.index("({", start), len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0 and text[end] == "}":
                break
        cases.append(text[start : end + 1])
    return cases


def test_a_random_draw_lowered_together_holds_the_hash_once_with_each_platforms_program() -> None:
    """Without the GPU rules set aside, JAX emits the hash once per rule (cuda's, rocm's and
    the default for tpu) under a ``stablehlo.case``: three times the ops to build and read."""
    from jax._src.interpreters import mlir

    rules = {p: dict(mlir._platform_specific_lowerings[p]) for p in PLATFORMS}
    one = _hash_ops(_draw().lower(lowering_platforms=("cuda",)).as_text())
    assert one > 0
    traced = _Lowerings(_draw())
    together = lowering.lower_together(traced, PLATFORMS)
    assert together is not None
    assert {p: dict(mlir._platform_specific_lowerings[p]) for p in PLATFORMS} == rules
    [text] = traced.texts
    assert _hash_ops(text) == one
    # no platform switch around the hash (jax 0.12 switches its fma-or-not lowering of erf_inv)
    assert [case for case in _cases(text) if _hash_ops(case)] == []
    for platform in PLATFORMS:
        alone = stablehlo.read_program(lowering.lower(_draw(), platform))
        assert _census(together[platform], platform) == _census(alone, platform)


def test_nothing_is_set_aside_where_the_gpu_kernel_lowering_is_on() -> None:
    from jax._src.interpreters import mlir

    before = {p: dict(mlir._platform_specific_lowerings[p]) for p in PLATFORMS}
    jax.config.update("jax_threefry_gpu_kernel_lowering", True)
    try:
        together = lowering.lower_together(_draw(), PLATFORMS)
    finally:
        jax.config.update("jax_threefry_gpu_kernel_lowering", False)
    assert together is not None
    kernels = {k.name for k in _census(together["cuda"], "cuda").kernels}
    assert "cu_threefry2x32_ffi" in kernels or "cu_threefry2x32" in kernels, kernels
    assert {p: dict(mlir._platform_specific_lowerings[p]) for p in PLATFORMS} == before


@pytest.mark.skipif(
    jax.__version_info__ < (0, 10),
    reason="before jax 0.10 (checked on 0.6.2) the rule registry's entries hold no rule to read: "
    "nothing is set aside, and the hash is lowered per platform (the same census, slower)",
)
def test_only_rules_that_run_the_default_are_set_aside() -> None:
    set_aside = adapters._falling_back(("cpu", "cuda", "rocm", "tpu"))
    assert sorted(platform for platform, _, _ in set_aside) == ["cuda", "rocm"]  # not cpu's own
    assert adapters._falling_back(("cpu", "tpu")) == ()
