"""Walking JAX programs, once for every use: each equation of a jaxpr and of the jaxprs nested
in it, the source line an equation shows, and the primitives that call back into Python.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from pytest_jaxport._jax.adapters import user_frames
from pytest_jaxport.model.census import shown_frame

HOST_CALLBACK_PRIMITIVES = frozenset(
    {"pure_callback", "io_callback", "debug_callback", "debug_print", "callback"}
)
"""Primitives that call back into Python on the host: no other backend can lower them
(``jax.debug.print`` binds ``debug_print`` in recent jax, as in 0.10; older releases, as 0.6,
bind ``debug_callback``)."""


def equations(program: Any) -> Iterator[Any]:
    """Every equation of ``program`` (a ``ClosedJaxpr`` or ``Jaxpr``) and of the jaxprs nested
    in its equations' parameters (loop bodies, branches, custom rules, nested jits), each
    jaxpr once."""
    seen: set[int] = set()
    pending = [_open(program)]
    while pending:
        jaxpr = pending.pop()
        if id(jaxpr) in seen:
            continue
        seen.add(id(jaxpr))
        for eqn in jaxpr.eqns:
            yield eqn
            pending.extend(_open(sub) for sub in _nested(eqn.params))


@functools.cache
def _jaxpr_types() -> tuple[Any, Any]:
    """``(ClosedJaxpr or None, Jaxpr)``: jax 0.11 folded ``ClosedJaxpr`` into ``Jaxpr``."""
    from jax._src import core

    return getattr(core, "ClosedJaxpr", None), core.Jaxpr


def is_jaxpr(value: Any) -> bool:
    """Whether ``value`` is a jaxpr (closed or not), on every jax this supports."""
    closed_type, jaxpr_type = _jaxpr_types()
    return isinstance(value, jaxpr_type) or (
        closed_type is not None and isinstance(value, closed_type)
    )


def _nested(params: Any) -> list[Any]:
    found = []
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if is_jaxpr(item):
                found.append(item)
    return found


def _open(jaxpr: Any) -> Any:
    inner = getattr(jaxpr, "jaxpr", None)
    return jaxpr if inner is None else inner


def source_line(
    source_info: Any, memo: dict[Any, str] | None = None, own: tuple[str, ...] = ()
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


def _census_frame(frames: Any, own: tuple[str, ...] = ()) -> str:
    """``census.shown_frame`` of a traceback's user frames, as ``file:line`` (``""``: none)."""
    found = shown_frame(((f.file_name, f.start_line) for f in frames), own)
    return "" if found is None else f"{found[0]}:{found[1]}"
