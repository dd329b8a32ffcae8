"""Host callbacks made inert, so a program that calls back into Python lowers for any platform.

``jax.debug.print``, ``jax.debug.callback``, ``jax.pure_callback``, ``io_callback`` (and
everything built on them, such as equinox's ``error_if``, which diffrax uses throughout) lower
to a call into the Python process that runs the program. JAX can build that call only for a
backend it has a client for: lowering for ``cuda`` on a machine without a GPU fails with "the
platform for the specified backend cpu is different from the lowering platform cuda". That
says nothing about the program's portability, only about the machine doing the lowering.

:func:`make_inert` rewrites a traced program (a ``ClosedJaxpr``) so that every host callback,
in nested jaxprs too (``jit``, ``cond``, ``scan``, ``while``, ``shard_map``, custom
derivative rules, ``checkpoint``), becomes an inert placeholder with the same operands, result
types and effects, which lowers on every platform to
``stablehlo.custom_call @inert_host_callback.<primitive>`` at the callback's source line. Every
other op is untouched, so a census of the inert program counts exactly what the real one
dispatches, with each callback counted in the ``meta`` layer. The inert program must never be
compiled or run: the placeholder has no implementation.

Compiling for a GPU this machine does not have (the deviceless ``compile = ["cuda"]``) meets the
same wall, and the placeholder's custom call would not compile either: :func:`trace_compilable`
makes each callback a stand-in that compiles (its results are zeros that XLA cannot fold,
computed from its operands, its effects kept), so XLA compiles and optimizes the rest of the
program as it would with the callback, plus one small reduction per callback. The compiled
census then has no trace of the callbacks themselves (the lowered level counts them).

Example (an audit that recorded a computation's jaxpr and argument types)::

    closed = jax.make_jaxpr(step)(params, batch)
    found = find_callbacks(closed)                 # (HostCallback(kind='debug_print', ...),)
    traced = trace_inert(closed, jax.tree.leaves((params, batch)))
    lowered = traced.lower(lowering_platforms=("cuda", "rocm", "tpu"))

JAX is imported inside the functions, never at module import.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

CALLBACK_PRIMITIVES = frozenset({"debug_callback", "debug_print", "pure_callback", "io_callback"})
"""JAX's host-callback primitives (``jax.debug.print`` binds ``debug_print`` in recent jax,
as in 0.10; older releases, as 0.6, bind ``debug_callback``)."""

INERT_TARGET = "inert_host_callback"
"""The custom-call target of a placeholder is ``inert_host_callback.<primitive>``."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class HostCallback:
    """Host callbacks of one kind at one source line of a program.

    ``kind`` is the JAX primitive (``pure_callback``, ``io_callback``, ``debug_callback``,
    ``debug_print``); ``location`` is ``file:line`` as a census shows it (``""`` when JAX
    kept no source location); ``count`` how many such callbacks the jaxpr holds there (each
    nested jaxpr counted once, as written, not per call or iteration).
    """

    location: str
    kind: str
    count: int = 1


def find_callbacks(closed: Any) -> tuple[HostCallback, ...]:
    """The host callbacks in ``closed`` (a ``ClosedJaxpr``) and its nested jaxprs, sorted."""
    from pytest_jaxport._jax.lowering import source_line

    found: Counter[tuple[str, str]] = Counter()
    memo: dict[Any, str] = {}
    for eqn in _equations(closed):
        if eqn.primitive.name in CALLBACK_PRIMITIVES:
            found[(source_line(eqn.source_info, memo), eqn.primitive.name)] += 1
    return tuple(
        HostCallback(location=location, kind=kind, count=n)
        for (location, kind), n in sorted(found.items())
    )


def has_callbacks(closed: Any) -> bool:
    """Whether ``closed`` or any jaxpr nested in it calls back into Python."""
    return any(eqn.primitive.name in CALLBACK_PRIMITIVES for eqn in _equations(closed))


def _equations(closed: Any) -> Iterator[Any]:
    """Every equation of ``closed`` and of the jaxprs nested in it, each jaxpr once."""
    seen: set[int] = set()
    pending = [_open(closed)]
    while pending:
        jaxpr = pending.pop()
        if id(jaxpr) in seen:
            continue
        seen.add(id(jaxpr))
        for eqn in jaxpr.eqns:
            yield eqn
            pending.extend(_open(sub) for sub in _nested(eqn.params))


def make_inert(closed: Any, *, compilable: bool = False) -> Any:
    """``closed`` (a ``ClosedJaxpr``) with every host callback replaced by an inert placeholder
    (``compilable``: by a stand-in whose results are zeros, which XLA compiles).

    Nested jaxprs are rewritten too, each once (a jaxpr used twice stays shared, so the
    lowered module keeps its calls). Returns ``closed`` itself when it has no callback.
    """
    if not has_callbacks(closed):
        return closed
    return _Rewrite(_inert_primitive(compilable)).value(closed)


def trace_inert(closed: Any, args: Sequence[Any]) -> Any:
    """``jax.jit`` of the inert program, traced: a ``jax.stages.Traced`` to lower.

    ``args`` are the program's flat arguments, one per input of ``closed`` in order: arrays
    (their shardings are kept) or ``jax.ShapeDtypeStruct`` (with ``sharding=`` for a sharded
    program). Lower the result with ``.lower(lowering_platforms=(...))``; never compile it.
    """
    return _trace(make_inert(closed), args)


def trace_compilable(closed: Any, args: Sequence[Any]) -> Any:
    """Like :func:`trace_inert`, but each callback is a stand-in that compiles (results of
    zeros, effects kept): for compiling without the hardware a callback needs (a deviceless
    CUDA compile). Never run it: the stand-in does not call back.
    """
    return _trace(make_inert(closed, compilable=True), args)


def _trace(closed: Any, args: Sequence[Any]) -> Any:
    import jax
    from jax._src import core

    return jax.jit(core.jaxpr_as_fun(closed)).trace(*args)


class _Rewrite:
    """One rewrite of a program: memoised per nested jaxpr, so shared jaxprs stay shared."""

    def __init__(self, placeholder: Any) -> None:
        self.placeholder = placeholder
        self.done: dict[int, Any] = {}
        self.keep: list[Any] = []  # the originals, alive while ids are memo keys

    def closed(self, closed: Any) -> Any:
        found = self.done.get(id(closed))
        if found is None:
            self.keep.append(closed)
            found = self.done[id(closed)] = closed.replace(jaxpr=self.jaxpr(closed.jaxpr))
        return found

    def jaxpr(self, jaxpr: Any) -> Any:
        found = self.done.get(id(jaxpr))
        if found is None:
            self.keep.append(jaxpr)
            found = self.done[id(jaxpr)] = jaxpr.replace(
                eqns=[self.equation(eqn) for eqn in jaxpr.eqns]
            )
        return found

    def equation(self, eqn: Any) -> Any:
        if eqn.primitive.name in CALLBACK_PRIMITIVES:
            return eqn.replace(
                primitive=self.placeholder,
                params={
                    "kind": eqn.primitive.name,
                    "result_avals": tuple(var.aval for var in eqn.outvars),
                    "callback_effects": frozenset(eqn.effects),
                },
            )
        if not any(_is_jaxpr(value) or _holds_jaxpr(value) for value in eqn.params.values()):
            return eqn
        return eqn.replace(params={k: self.value(v) for k, v in eqn.params.items()})

    def value(self, value: Any) -> Any:
        closed_type, jaxpr_type = _jaxpr_types()
        if closed_type is not None and isinstance(value, closed_type):
            return self.closed(value)
        if isinstance(value, jaxpr_type):  # from jax 0.11 a Jaxpr holds its consts itself
            return self.jaxpr(value)
        if isinstance(value, (tuple, list)) and _holds_jaxpr(value):
            return type(value)(self.value(item) for item in value)
        return value


@functools.cache
def _jaxpr_types() -> tuple[Any, Any]:
    """``(ClosedJaxpr or None, Jaxpr)``: jax 0.11 folded ``ClosedJaxpr`` into ``Jaxpr``."""
    from jax._src import core

    return getattr(core, "ClosedJaxpr", None), core.Jaxpr


def _is_jaxpr(value: Any) -> bool:
    closed_type, jaxpr_type = _jaxpr_types()
    return isinstance(value, jaxpr_type) or (
        closed_type is not None and isinstance(value, closed_type)
    )


def _holds_jaxpr(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and any(_is_jaxpr(item) for item in value)


def _nested(params: Any) -> list[Any]:
    found = []
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if _is_jaxpr(item):
                found.append(item)
    return found


def _open(jaxpr: Any) -> Any:
    inner = getattr(jaxpr, "jaxpr", None)
    return jaxpr if inner is None else inner


def _stand_in(results: Sequence[Any]) -> Any:
    """A callback's compilable stand-in: zeros of the ``results`` types, computed from every
    operand (their sum, times zero, behind an optimization barrier) so that XLA neither
    folds the results as constants nor drops what computes the operands, as it would not
    with the callback."""
    import jax.numpy as jnp
    from jax import lax

    def stand_in(*operands: Any) -> list[Any]:
        total = jnp.zeros((), jnp.float32)
        for operand in operands:
            total = total + jnp.sum(jnp.real(operand).astype(jnp.float32))
        zero = lax.optimization_barrier(total * 0.0)  # type: ignore[no-untyped-call]
        return [jnp.broadcast_to(zero.astype(aval.dtype), aval.shape) for aval in results]

    return stand_in


@functools.cache
def _inert_primitive(compilable: bool = False) -> Any:
    """The placeholder primitive, made once: the callback's result types and effects, no
    implementation, lowered on every platform to a side-effecting custom call
    (``compilable``: to zeros of the result types, which compile anywhere)."""
    from jax._src import core, effects
    from jax._src.interpreters import mlir

    primitive = core.Primitive("compilable_host_callback" if compilable else INERT_TARGET)
    primitive.multiple_results = True

    # (``callback_effects``, not ``effects``: JAX's lowering passes its own ``effects``)
    def abstract_eval(*_: Any, kind: str, result_avals: Any, callback_effects: Any) -> Any:
        return result_avals, callback_effects

    def lower(ctx: Any, *operands: Any, kind: str, result_avals: Any, callback_effects: Any) -> Any:
        del result_avals
        if compilable:  # (lower_fun passes ordered effects' tokens through)
            return mlir.lower_fun(_stand_in(ctx.avals_out), multiple_results=True)(ctx, *operands)
        op = mlir.custom_call(
            f"{INERT_TARGET}.{kind}",
            result_types=[ir_type(ctx, aval) for aval in ctx.avals_out],
            operands=list(operands),
            has_side_effect=True,
        )
        if ordered_effects.filter_in(callback_effects):
            ctx.set_tokens_out(ctx.tokens_in)  # ordered like the callback: tokens pass through
        return op.results

    ordered_effects = effects.ordered_effects
    if len(inspect.signature(mlir.aval_to_ir_type).parameters) == 2:  # jax 0.7+: (ctx, aval)

        def ir_type(ctx: Any, aval: Any) -> Any:
            return mlir.aval_to_ir_type(ctx.module_context, aval)
    else:

        def ir_type(ctx: Any, aval: Any) -> Any:
            return mlir.aval_to_ir_type(aval)  # type: ignore[call-arg]

    primitive.def_effectful_abstract_eval(abstract_eval)  # type: ignore[no-untyped-call]
    try:  # one call per placeholder, in place, like the callbacks' own rules
        mlir.register_lowering(primitive, lower, cacheable=False)
    except TypeError:  # jax < 0.7 has no cached lowering rules
        mlir.register_lowering(primitive, lower)
    return primitive
