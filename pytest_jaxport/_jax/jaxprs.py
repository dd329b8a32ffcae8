"""Walking and running JAX programs, once for every use: each equation of a jaxpr and of the
jaxprs nested in it (:func:`equations`), the one interpreter that re-binds a jaxpr's
equations with a per-equation override (:class:`Evaluator`), the source line an equation
shows, and the primitives that call back into Python.

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeGuard, cast

from pytest_jaxport._jax.adapters import bind_params, user_frames
from pytest_jaxport.model.census import shown_frame

if TYPE_CHECKING:
    from jax._src.source_info_util import Frame, SourceInfo
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Var

HOST_CALLBACK_PRIMITIVES = frozenset(
    {"pure_callback", "io_callback", "debug_callback", "debug_print", "callback"}
)
"""Primitives that call back into Python on the host: no other backend can lower them
(``jax.debug.print`` binds ``debug_print`` in recent jax, as in 0.10; older releases, as 0.6,
bind ``debug_callback``)."""


# -- the walk -------------------------------------------------------------------------------------


def equations(
    *programs: Jaxpr | ClosedJaxpr,
    repeats: bool = False,
    into: Callable[[JaxprEqn], bool] | None = None,
) -> Iterator[JaxprEqn]:
    """Every equation of ``programs`` (``ClosedJaxpr`` or ``Jaxpr``) and of the jaxprs nested
    in their equations' parameters (loop bodies, branches, custom rules, nested jits,
    kernels' bodies).

    Each jaxpr is walked once, unless ``repeats``: then a jaxpr that several equations hold
    is walked at each (as a key that writes a nested jaxpr wherever it is used must).
    ``into(eqn)`` false leaves ``eqn``'s nested jaxprs out. The order is a stack's: a
    jaxpr's equations, then the last nested jaxpr met first."""
    seen: set[int] = set()
    pending = [opened(program) for program in programs]
    while pending:
        jaxpr = pending.pop()
        if not repeats:
            if id(jaxpr) in seen:
                continue
            seen.add(id(jaxpr))
        for eqn in jaxpr.eqns:
            yield eqn
            if into is None or into(eqn):
                pending.extend(nested(eqn.params))


def nested(params: Mapping[str, object]) -> list[Jaxpr]:
    """The jaxprs in an equation's parameters (directly or in a tuple), opened."""
    found = []
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if is_jaxpr(item):
                found.append(opened(item))
    return found


def opened(program: Jaxpr | ClosedJaxpr) -> Jaxpr:
    """The open jaxpr of ``program`` (jax 0.12's ``Jaxpr`` is its own)."""
    inner: Jaxpr | None = getattr(program, "jaxpr", None)
    return program if inner is None else inner  # type: ignore[return-value]


def consts_of(program: Jaxpr | ClosedJaxpr) -> Sequence[object]:
    """The constants a closed jaxpr binds to its ``constvars`` (``()`` for an open one)."""
    consts: Sequence[object] = getattr(program, "consts", ())
    return consts


@functools.cache
def _jaxpr_types() -> tuple[type[ClosedJaxpr] | None, type[Jaxpr]]:
    """``(ClosedJaxpr or None, Jaxpr)``: jax 0.11 folded ``ClosedJaxpr`` into ``Jaxpr``."""
    from jax._src import core

    return getattr(core, "ClosedJaxpr", None), core.Jaxpr


def is_jaxpr(value: object) -> TypeGuard[Jaxpr | ClosedJaxpr]:
    """Whether ``value`` is a jaxpr (closed or not), on every jax this supports."""
    closed_type, jaxpr_type = _jaxpr_types()
    return isinstance(value, jaxpr_type) or (
        closed_type is not None and isinstance(value, closed_type)
    )


# -- the interpreter ------------------------------------------------------------------------------


class Evaluator:
    """The one interpreter of jaxprs: runs a jaxpr's equations in order under the current
    trace, each by :meth:`equation`, which binds the primitive again; a subclass overrides
    it for the equations it changes (``specialize.PlatformBranches``' platform branches, the
    emulation's branches, kernels and dots) and calls :meth:`run` for a body it replays.

    Values an override computes from what it chose (a platform index) are *static*: known
    while tracing. :meth:`equation` says which operands are (literals count), and whether
    its own outputs are."""

    def run(self, jaxpr: Jaxpr, consts: Iterable[object], args: Iterable[object]) -> list[object]:
        """The outputs of ``jaxpr`` (open) on ``consts`` and ``args``."""
        from jax._src import core as jcore  # Literal and DropVar, under the same names since 0.4

        env: dict[Var, object] = {}
        static: set[Var] = set()

        def read(atom: object) -> object:
            return atom.val if isinstance(atom, jcore.Literal) else env[atom]  # type: ignore[index]

        for var, value in zip(jaxpr.constvars, consts, strict=True):
            env[var] = value
        for var, value in zip(jaxpr.invars, args, strict=True):
            env[var] = value
        for eqn in jaxpr.eqns:
            values = [read(v) for v in eqn.invars]
            known = tuple(isinstance(v, jcore.Literal) or v in static for v in eqn.invars)
            outs, outs_static = self.equation(eqn, values, known)
            for var, value in zip(eqn.outvars, outs, strict=True):
                if isinstance(var, jcore.DropVar):
                    continue
                env[var] = value
                if outs_static:
                    static.add(var)
        return [read(v) for v in jaxpr.outvars]

    def equation(
        self, eqn: JaxprEqn, values: list[object], known: tuple[bool, ...]
    ) -> tuple[Sequence[object], bool]:
        """``(outputs, whether they are static)`` of ``eqn`` on ``values``; ``known[i]``:
        whether operand ``i`` is static or a literal. Here: bound again, not static."""
        return bind(eqn, values), False


def derived(eqn: JaxprEqn, known: tuple[bool, ...]) -> bool:
    """Whether ``eqn`` computes from static values alone: it has a variable operand, and each
    of its variable operands is static (``known`` as :meth:`Evaluator.equation` has it)."""
    from jax._src import core as jcore

    variables = [
        k for v, k in zip(eqn.invars, known, strict=True) if not isinstance(v, jcore.Literal)
    ]
    return bool(variables) and all(variables)


def bind(eqn: JaxprEqn, values: Sequence[object], **changed: object) -> list[object]:
    """``eqn``'s primitive bound again on ``values``, with ``changed`` parameters."""
    subfuns, params = bind_params(eqn)
    params.update(changed)
    primitive: Callable[..., object] = eqn.primitive.bind  # untyped in JAX
    outs = primitive(*subfuns, *values, **params)
    return list(cast("Iterable[object]", outs)) if eqn.primitive.multiple_results else [outs]


def equation_context(eqn: JaxprEqn) -> contextlib.ExitStack:
    """Re-bind ``eqn`` under its source location (so the census still names user lines)."""
    from jax._src import source_info_util

    stack = contextlib.ExitStack()
    info = eqn.source_info
    name_stack = source_info_util.current_name_stack() + info.name_stack
    stack.enter_context(source_info_util.user_context(info.traceback, name_stack=name_stack))
    stack.enter_context(eqn.ctx.manager)
    return stack


def platform_branch(platforms: Sequence[Sequence[str] | None], platform: str) -> int:
    """The index ``platform_index`` takes for ``platform``: the branch naming it, else the
    default (``None``) one."""
    default = None
    for i, names in enumerate(platforms):
        if names is None:
            default = i
        elif platform in names:
            return i
    if default is None:
        raise ValueError(f"platform_dependent has no branch for {platform} and no default")
    return default


# -- source lines ---------------------------------------------------------------------------------


def source_line(
    source_info: SourceInfo, memo: dict[object, str] | None = None, own: tuple[str, ...] = ()
) -> str:
    """The ``file:line`` a census shows for an equation with this ``source_info`` (``""``
    when JAX kept no traceback); ``memo`` caches it per traceback (for one ``own``)."""
    tb = source_info.traceback
    if tb is None:
        return ""
    line = memo.get(tb) if memo is not None else None
    if line is None:
        line = _census_frame(user_frames(source_info), own)
        if memo is not None:
            memo[tb] = line
    return line


def _census_frame(frames: Iterable[Frame], own: tuple[str, ...] = ()) -> str:
    """``census.shown_frame`` of a traceback's user frames, as ``file:line`` (``""``: none)."""
    found = shown_frame(((f.file_name, f.start_line) for f in frames), own)
    return "" if found is None else f"{found[0]}:{found[1]}"
