"""Host callbacks made inert, so a program that calls back into Python lowers for any platform.

``jax.debug.print``, ``jax.debug.callback``, ``jax.pure_callback``, ``io_callback`` (and
everything built on them, such as equinox's ``error_if``, which diffrax and lineax use
throughout) lower to a call into the Python process that runs the program. JAX can build that
call only for a backend it has a client for: lowering for ``cuda`` on a machine without a GPU
fails with "the platform for the specified backend cpu is different from the lowering platform
cuda". That says nothing about the program's portability, only about the machine doing the
lowering.

:func:`inert` lowers a traced computation with JAX's lowering rules for the callback primitives
overridden (``mlir.LoweringParameters.override_lowering_rules``, which JAX applies to every
equation lowered into the module): each host callback becomes an inert placeholder with the
same operands, result types and ordered-effect tokens, ``stablehlo.custom_call
@inert_host_callback.<primitive>`` at the callback's source line, wherever it is. That includes
callbacks a jaxpr does not show: those a custom primitive binds in its own lowering rule
(lineax's ``linear_solve``, equinox's ``filter_primitive``s trace their implementation only
when lowered), as well as those in nested ``jit``, ``cond``, ``scan``, ``while``,
``shard_map``, custom derivative rules and ``checkpoint``. A primitive whose own lowering rule
emits a callback (calling JAX's ``emit_python_callback`` itself: equinox's ``noinline``) gets
one too, ``inert_host_callback.<that primitive>``: while an inert program is lowered, that
function emits the placeholder there (and the real callback in any other lowering). Every
other op is untouched, so a census of the inert program counts exactly what the real one
dispatches, with each callback counted in the ``meta`` layer. The inert program must never
be compiled or run: the placeholder has no implementation. The overridden rules are part of
JAX's lowering cache key, so an inert lowering never stands in for the suite's own.

Compiling for a GPU this machine does not have (the deviceless ``compile = ["cuda"]``) meets the
same wall, and the placeholder's custom call would not compile either: ``inert(traced,
compilable=True)`` makes each callback a stand-in that compiles (its results are zeros that XLA
cannot fold, computed from its operands, its effects kept), so XLA compiles and optimizes the
rest of the program as it would with the callback, plus one small reduction per callback. The
compiled census then has no trace of the callbacks themselves (the lowered level counts them).

Example (a traced computation, or a recorded jaxpr and its arguments' types)::

    traced = jax.jit(step).trace(params, batch)
    found = find_callbacks(traced.jaxpr)          # (HostCallback(kind='debug_print', ...),)
    lowered = inert(traced).lower(lowering_platforms=("cuda", "rocm", "tpu"))

    closed = jax.make_jaxpr(step)(params, batch)
    lowered = trace_inert(closed, jax.tree.leaves((params, batch))).lower(
        lowering_platforms=("cuda",))

JAX is imported inside the functions, never at module import.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_jaxport._jax.jaxprs import HOST_CALLBACK_PRIMITIVES, equations, source_line

if TYPE_CHECKING:
    import jax
    from jax._src.interpreters.mlir import LoweringParameters, LoweringRuleContext
    from jax.core import ShapedArray
    from jax.extend.core import ClosedJaxpr, Jaxpr, Primitive
    from jax.stages import Traced
    from jaxlib.mlir import ir

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


def find_callbacks(closed: Jaxpr | ClosedJaxpr) -> tuple[HostCallback, ...]:
    """The host callbacks in ``closed`` (a ``ClosedJaxpr``) and its nested jaxprs, sorted.

    Only those the jaxpr shows: a callback a custom primitive binds when it is lowered is
    seen in the lowered program (:func:`inert` makes it a placeholder there all the same)."""
    found: Counter[tuple[str, str]] = Counter()
    memo: dict[object, str] = {}
    for eqn in equations(closed):
        if eqn.primitive.name in HOST_CALLBACK_PRIMITIVES:
            found[(source_line(eqn.source_info, memo), eqn.primitive.name)] += 1
    return tuple(
        HostCallback(location=location, kind=kind, count=n)
        for (location, kind), n in sorted(found.items())
    )


def has_callbacks(closed: Jaxpr | ClosedJaxpr) -> bool:
    """Whether ``closed`` or any jaxpr nested in it shows a callback into Python."""
    return any(eqn.primitive.name in HOST_CALLBACK_PRIMITIVES for eqn in equations(closed))


def inert(traced: Any, *, compilable: bool = False) -> InertCallbacks:
    """``traced`` to lower with every host callback an inert placeholder (``compilable``: a
    stand-in whose results are zeros, which XLA compiles), wherever the callback is bound.

    ``traced`` is anything with ``.jaxpr`` and ``.lower(lowering_platforms=...,
    _private_parameters=...)``: a ``jax.stages.Traced``, :class:`pytest_jaxport._jax.tracing.Trace`
    or an audit's recorded call. Lower the result for platforms not present here; never
    compile (a placeholder) or run (either) what it lowers.
    """
    if isinstance(traced, InertCallbacks):
        traced = traced.traced
    return InertCallbacks(traced, compilable=compilable)


class InertCallbacks:
    """A traced computation whose lowering makes its host callbacks inert (see :func:`inert`)."""

    __slots__ = ("compilable", "traced")

    def __init__(self, traced: Any, *, compilable: bool = False) -> None:
        self.traced = traced
        self.compilable = compilable

    @property
    def jaxpr(self) -> Any:
        return self.traced.jaxpr

    def lower(self, *, lowering_platforms: tuple[str, ...] | None = None) -> Any:
        with _emitter_made_inert():
            return self.traced.lower(
                lowering_platforms=lowering_platforms,
                _private_parameters=inert_parameters(self.compilable),
            )


def trace_inert(closed: ClosedJaxpr, args: Sequence[object]) -> InertCallbacks:
    """``jax.jit`` of the program ``closed`` (a ``ClosedJaxpr``), traced with ``args`` and
    made inert (:func:`inert`): for code that holds a jaxpr rather than a traced function.

    ``args`` are the program's flat arguments, one per input of ``closed`` in order: arrays
    (their shardings are kept) or ``jax.ShapeDtypeStruct`` (with ``sharding=`` for a sharded
    program). Lower the result with ``.lower(lowering_platforms=(...))``; never compile it.
    """
    return inert(_trace(closed, args))


def trace_compilable(closed: ClosedJaxpr, args: Sequence[object]) -> InertCallbacks:
    """Like :func:`trace_inert`, but each callback is a stand-in that compiles (results of
    zeros, effects kept): for compiling without the hardware a callback needs (a deviceless
    CUDA compile). Never run it: the stand-in does not call back.
    """
    return inert(_trace(closed, args), compilable=True)


def _trace(closed: ClosedJaxpr, args: Sequence[object]) -> Traced:
    import jax
    from jax._src import core

    return jax.jit(core.jaxpr_as_fun(closed)).trace(*args)


_CALLBACK_HOMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("jax._src.callback", ("pure_callback_p", "io_callback_p")),
    ("jax._src.debugging", ("debug_callback_p", "debug_print_p")),
)
"""Where JAX defines its host-callback primitives (``debug_print_p`` from jax 0.8 on)."""


def callback_primitives() -> tuple[Primitive, ...]:
    """This JAX's host-callback primitive objects (whichever of
    :data:`~pytest_jaxport._jax.jaxprs.HOST_CALLBACK_PRIMITIVES`
    it defines)."""
    found = []
    for module_name, names in _CALLBACK_HOMES:
        module = importlib.import_module(module_name)
        for name in names:
            primitive = getattr(module, name, None)
            if primitive is not None and primitive.name in HOST_CALLBACK_PRIMITIVES:
                found.append(primitive)
    return tuple(found)


@functools.cache
def inert_parameters(compilable: bool = False) -> LoweringParameters:
    """JAX's lowering parameters with every host-callback primitive's rule overridden by the
    placeholder's (``compilable``: the stand-in's). Made once: equal parameters share JAX's
    lowering cache entries."""
    from jax._src.interpreters import mlir

    return mlir.LoweringParameters(
        override_lowering_rules=tuple(  # type: ignore[arg-type]
            (primitive, _placeholder_rule(primitive.name, compilable))
            for primitive in callback_primitives()
        )
    )


def _placeholder_rule(kind: str, compilable: bool) -> Callable[..., Sequence[ir.Value[ir.Type]]]:
    """The lowering rule of a ``kind`` callback's placeholder: a side-effecting custom call
    with the callback's operands and result types (``compilable``: zeros of the result types
    computed from the operands). Ordered effects' tokens pass through, as the callback's do;
    the callback's own parameters (its Python function, sharding) are not needed."""

    def rule(
        ctx: LoweringRuleContext, *operands: ir.Value[ir.Type], **params: object
    ) -> Sequence[ir.Value[ir.Type]]:
        results = _placeholder(ctx, kind, operands, ctx.avals_out, compilable=compilable)
        ctx.set_tokens_out(ctx.tokens_in)  # JAX reads them only where the effect is ordered
        return results

    rule.jaxport_compilable = compilable  # type: ignore[attr-defined]
    return rule


def _placeholder(
    ctx: LoweringRuleContext,
    kind: str,
    operands: Sequence[ir.Value[ir.Type]],
    results: Sequence[ShapedArray],
    *,
    compilable: bool,
) -> Sequence[ir.Value[ir.Type]]:
    """A ``kind`` callback's placeholder with ``operands`` (of the types ``ctx.avals_in``), of
    the ``results`` types: a side-effecting custom call, or (``compilable``) zeros computed
    from the operands."""
    from jax._src.interpreters import mlir

    if compilable:  # (ctx.avals_in: the operands' types)
        lowered: Sequence[ir.Value[ir.Type]] = mlir.lower_fun(
            _stand_in(results), multiple_results=True
        )(ctx.replace(avals_out=list(results)), *operands)  # type: ignore[no-untyped-call]
        return lowered
    op = mlir.custom_call(
        f"{INERT_TARGET}.{kind}",
        result_types=[_ir_type(ctx, aval) for aval in results],
        operands=list(operands),
        has_side_effect=True,
    )
    return op.results


# -- callbacks a primitive's own lowering rule emits -----------------------------------------

_EMITTERS: tuple[tuple[str, str], ...] = (
    ("jax._src.callback", "emit_python_callback"),
    ("jax.interpreters.mlir", "emit_python_callback"),
)
"""Where JAX's function that emits a host callback is read by the rules that call it: its
home (JAX's own rules) and its public name (equinox's ``noinline``)."""

_EMITTING = threading.Lock()
_emitter_depth = 0


@contextlib.contextmanager
def _emitter_made_inert() -> Iterator[None]:
    """While an inert program is lowered: JAX's ``emit_python_callback``, wherever rules read
    it, emits the placeholder when the module being lowered is an inert one (its lowering
    parameters hold the placeholder rules) and the real callback otherwise."""
    global _emitter_depth
    with _EMITTING:
        _emitter_depth += 1
        if _emitter_depth == 1:
            for module_name, name in _EMITTERS:
                module = importlib.import_module(module_name)
                original = getattr(module, name, None)
                if original is not None and not hasattr(original, "jaxport_original"):
                    setattr(module, name, _inert_emitter(original))
    try:
        yield
    finally:
        with _EMITTING:
            _emitter_depth -= 1
            if _emitter_depth == 0:
                for module_name, name in _EMITTERS:
                    module = importlib.import_module(module_name)
                    original = getattr(getattr(module, name, None), "jaxport_original", None)
                    if original is not None:
                        setattr(module, name, original)


def _inert_emitter(original: Callable[..., Any]) -> Callable[..., Any]:
    """``emit_python_callback`` that emits a placeholder (named for the primitive whose rule
    calls it) in a module lowered with :func:`inert_parameters`: its results of the result
    types, the ordered-effect token passed through, no host callback to keep alive."""

    @functools.wraps(original)
    def emit_python_callback(
        ctx: LoweringRuleContext,
        callback: object,
        token: object,
        operands: Sequence[ir.Value[ir.Type]],
        operand_avals: Sequence[ShapedArray],
        result_avals: Sequence[ShapedArray],
        *args: object,
        **options: object,
    ) -> tuple[Sequence[ir.Value[ir.Type]], object, object]:
        compilable = _inert_lowering(ctx)
        if compilable is None:
            return original(  # type: ignore[no-any-return]
                ctx, callback, token, operands, operand_avals, result_avals, *args, **options
            )
        kind = getattr(getattr(ctx, "primitive", None), "name", None) or "python_callback"
        sub = ctx.replace(avals_in=list(operand_avals))  # type: ignore[no-untyped-call]
        results = _placeholder(sub, kind, list(operands), result_avals, compilable=compilable)
        return list(results), token, None

    emit_python_callback.jaxport_original = original  # type: ignore[attr-defined]
    return emit_python_callback


def _inert_lowering(ctx: LoweringRuleContext) -> bool | None:
    """Whether the module ``ctx`` lowers is an inert one: ``None`` if not, else whether its
    placeholders are to compile."""
    parameters = getattr(ctx.module_context, "lowering_parameters", None)
    for _, rule in getattr(parameters, "override_lowering_rules", None) or ():
        compilable = getattr(rule, "jaxport_compilable", None)
        if compilable is not None:
            return bool(compilable)
    return None


def _ir_type(ctx: LoweringRuleContext, aval: ShapedArray) -> ir.Type:
    from jax._src.interpreters import mlir

    if _ir_type_takes_context():  # jax 0.7+: (ctx, aval)
        return mlir.aval_to_ir_type(ctx.module_context, aval)
    return mlir.aval_to_ir_type(aval)  # type: ignore[call-arg,arg-type]


@functools.cache
def _ir_type_takes_context() -> bool:
    from jax._src.interpreters import mlir

    return len(inspect.signature(mlir.aval_to_ir_type).parameters) == 2


def _stand_in(results: Sequence[ShapedArray]) -> Callable[..., list[jax.Array]]:
    """A callback's compilable stand-in: zeros of the ``results`` types, computed from every
    operand (their sum, times zero, behind an optimization barrier) so that XLA neither
    folds the results as constants nor drops what computes the operands, as it would not
    with the callback."""
    import jax.numpy as jnp
    from jax import lax

    def stand_in(*operands: jax.Array) -> list[jax.Array]:
        total = jnp.zeros((), jnp.float32)
        for operand in operands:
            total = total + jnp.sum(jnp.real(operand).astype(jnp.float32))
        zero = lax.optimization_barrier(total * 0.0)  # type: ignore[no-untyped-call]
        return [jnp.broadcast_to(zero.astype(aval.dtype), aval.shape) for aval in results]

    return stand_in
