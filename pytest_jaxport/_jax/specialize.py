"""A function with each ``lax.platform_dependent`` resolved for one platform
(:class:`PlatformBranches`): its jaxpr, traced once, re-played taking only that platform's
branch.

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from pytest_jaxport._jax.adapters import CALL_PRIMITIVES
from pytest_jaxport._jax.jaxprs import (
    Evaluator,
    bind,
    consts_of,
    derived,
    equation_context,
    opened,
    platform_branch,
)

if TYPE_CHECKING:
    from jax.extend.core import JaxprEqn


class PlatformBranches:
    """A function traced once, with the arguments ``arguments`` (``(args, kwargs)``), and
    re-played for any platform with each ``lax.platform_dependent`` (outside custom rules and
    loops) taking only that platform's branch (:meth:`resolved`): one trace serves every
    platform a transformed check is taken for, and every explanation of its failures."""

    __slots__ = ("_closed", "_name", "_out_tree")

    def __init__(
        self, fn: Callable[..., object], arguments: tuple[tuple[object, ...], dict[str, object]]
    ) -> None:
        import jax

        args, kwargs = arguments
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args, **kwargs)
        self._closed = closed
        self._out_tree = jax.tree_util.tree_structure(out_shape)
        self._name = getattr(fn, "__name__", "fn")

    def resolved(self, platform: str) -> Callable[..., object]:
        """The function with its ``platform_dependent`` branches resolved for ``platform``:
        the jaxpr re-played, taking only that platform's branch."""
        import jax

        closed, out_tree = self._closed, self._out_tree
        replay = _Specializer(platform)

        def specialized(*args: object, **kwargs: object) -> object:
            flat = jax.tree_util.tree_leaves((args, kwargs))
            outs = replay.run(closed.jaxpr, closed.consts, flat)
            return jax.tree_util.tree_unflatten(out_tree, outs)

        specialized.__name__ = self._name
        return specialized


class _Specializer(Evaluator):
    """Re-binds a jaxpr with each ``platform_index`` a constant for ``platform``: a
    conditional on it takes that branch only, nested jits are inlined (to reach the
    ``platform_index`` inside), and arithmetic on it stays a constant."""

    def __init__(self, platform: str) -> None:
        self.platform = platform

    def equation(
        self, eqn: JaxprEqn, values: list[object], known: tuple[bool, ...]
    ) -> tuple[Sequence[object], bool]:
        import jax

        name = eqn.primitive.name
        if name == "platform_index":
            return [np.int32(platform_branch(eqn.params["platforms"], self.platform))], True
        if name == "cond" and eqn.invars and known[0]:
            branches = eqn.params["branches"]
            index = min(max(int(np.asarray(values[0])), 0), len(branches) - 1)
            branch = branches[index]
            return self.run(branch.jaxpr, branch.consts, values[1:]), False
        if name in CALL_PRIMITIVES and "jaxpr" in eqn.params:
            inner = eqn.params["jaxpr"]
            return self.run(opened(inner), consts_of(inner), values), False
        resolved = derived(eqn, known)
        with equation_context(eqn):
            if resolved:  # arithmetic on the platform index: keep it a constant
                with jax.ensure_compile_time_eval():
                    return bind(eqn, values), True
            return bind(eqn, values), False
