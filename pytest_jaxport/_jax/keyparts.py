"""The text a lowered-cache key is made of: a traced program's jaxpr (:func:`census_key_parts`,
with the source line of every equation), the arguments' shardings (:func:`sharding_text`) and
JAX's configuration (:func:`lowering_settings`).

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from pytest_jaxport._jax.jaxprs import equations, is_jaxpr, source_line

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Var


def lowering_settings() -> str:
    """JAX's configuration as text (flags such as the partitioner change what is lowered),
    made again only when a value changed (the text of ~130 settings costs ~0.15 ms; it is
    asked for every computation an audit identifies)."""
    import jax

    values = jax.config.values
    last = _SETTINGS[0]
    try:
        if last is not None and last[0] == values:
            return last[1]
    except Exception:  # a value that cannot be compared: make the text
        pass
    text = repr(sorted(values.items()))
    _SETTINGS[0] = (values, text)
    return text


_SETTINGS: list[tuple[dict[str, Any], str] | None] = [None]


def census_key_parts(traced: Any, own: tuple[str, ...] = ()) -> tuple[str, str]:
    """``(jaxpr text, source lines)``: what the lowered-level cache keys a census by, made
    once per jaxpr while it lives (a program JAX traced once is often called with
    arguments that differ only in what the jaxpr does not show, weak types or placement).

    The closed jaxpr's text (with its argument types) decides the lowered module's ops; it
    has no source locations, so the second part lists, for every equation (sub-jaxprs
    included, in order), the source line a census would show for it: its innermost user
    frame outside installed packages (else its innermost user frame), as JAX's own filter
    of internal frames finds them. An edit that moves any of those lines changes the key.
    """
    closed = traced.jaxpr
    key = (id(closed), own)
    found = _KEY_PARTS.get(key)
    if found is not None and found[0]() is closed:
        return found[1]
    parts = _key_parts(closed, own)
    try:
        alive = weakref.ref(closed, lambda _: _KEY_PARTS.pop(key, None))
    except TypeError:  # a jaxpr that cannot be referred to weakly: made every time
        return parts
    _KEY_PARTS[key] = (alive, parts)
    return parts


_KEY_PARTS: dict[tuple[int, tuple[str, ...]], tuple[weakref.ref[ClosedJaxpr], tuple[str, str]]] = {}


def _key_parts(closed: ClosedJaxpr, own: tuple[str, ...]) -> tuple[str, str]:
    text = (
        f"{_avals_repr(closed.in_avals)}\n{_avals_repr(closed.out_avals)}\n{_program_text(closed)}"
    )
    memo: dict[object, str] = {}
    lines = [source_line(e.source_info, memo, own) for e in equations(closed, repeats=True)]
    return text, "\n".join(lines)


def _avals_repr(avals: object) -> str:
    """``repr(avals)`` of a list of types, each type's text made once (:data:`_AVAL_TEXTS`)."""
    if type(avals) is not list:
        return repr(avals)
    reprs = _kept(_AVAL_REPRS)
    shown = []
    for aval in avals:
        text = reprs.get(aval)
        if text is None:
            text = reprs[aval] = repr(aval)
        shown.append(text)
    return f"[{', '.join(shown)}]"


def _program_text(closed: ClosedJaxpr) -> str:
    """The closed jaxpr as text of the key's own: per jaxpr its inputs, then per equation its
    results, primitive, every parameter (``repr``; a nested jaxpr as its own text, inline)
    and operands, then its outputs. Variables are numbered per jaxpr in order of appearance
    and shown with their types (weak types included); a scalar literal is its exact value
    and dtype.

    Not JAX's printer: that formats every literal through NumPy's array printing (about 3x
    the time of this on a diffrax solve, where an audit keys every computation it meets), and
    fails on a ``frozenset`` parameter of objects without an order. A nested jaxpr is made
    once per object but written wherever it is used, so whether JAX shares one object
    between two equations (it caches traces) does not change the text."""
    from jax._src import core

    types = _kept(_AVAL_TEXTS)
    texts: dict[int, str] = {}

    def literal(value: Any) -> str:
        try:
            if getattr(value, "ndim", None) == 0:
                return f"{value.item()!r}:{value.dtype}"
        except Exception:  # a scalar without a plain value: as it prints
            pass
        return repr(value)

    def value(item: object) -> str:
        if is_jaxpr(item):
            return "{" + text(item) + "}"
        if type(item) in (tuple, list):
            items = cast("Sequence[object]", item)
            if any(is_jaxpr(i) for i in items):
                return "(" + ", ".join(value(i) for i in items) + ")"
        return repr(item)

    def text(jaxpr: Jaxpr | ClosedJaxpr) -> str:
        done = texts.get(id(jaxpr))
        if done is not None:
            return done
        inner = getattr(jaxpr, "jaxpr", jaxpr)
        names: dict[Var, str] = {}

        def name(var: Var | Literal) -> str:
            if isinstance(var, core.Literal):
                return literal(var.val)
            found = names.get(var)
            if found is None:
                shown = types.get(var.aval)
                if shown is None:
                    shown = types[var.aval] = str(var.aval)
                found = names[var] = f"v{len(names)}:{shown}"
            return found

        lines = [f"in {', '.join(map(name, (*inner.constvars, *inner.invars)))}"]
        for eqn in inner.eqns:
            params = ", ".join(f"{k}={value(v)}" for k, v in sorted(eqn.params.items()))
            lines.append(
                f"{', '.join(map(name, eqn.outvars))} = {eqn.primitive.name}[{params}] "
                f"{', '.join(map(name, eqn.invars))}"
            )
        lines.append(f"out {', '.join(map(name, inner.outvars))}")
        done = texts[id(jaxpr)] = "\n".join(lines)
        return done

    return text(closed)


_AVAL_TEXTS: dict[object, str] = {}
"""Each type's text (``str(aval)``), kept across programs: an audit keys hundreds of programs
over the same few types, and the text costs ~25 us (NumPy's ``dtype.name``)."""

_AVAL_REPRS: dict[object, str] = {}
"""Each type's ``repr``, kept as :data:`_AVAL_TEXTS` is."""

_AVAL_TEXTS_KEPT = 4096


def _kept(texts: dict[object, str]) -> dict[object, str]:
    """``texts``, emptied first where it holds more than :data:`_AVAL_TEXTS_KEPT` types."""
    if len(texts) > _AVAL_TEXTS_KEPT:
        texts.clear()
    return texts


def sharding_text(args: Sequence[object], kwargs: Mapping[str, object]) -> str:
    """The shardings of the arguments placed on more than one device, as text (``""`` for
    an unsharded call): part of what decides a partitioned program's collectives."""
    import jax

    lines = []
    for i, leaf in enumerate(jax.tree_util.tree_leaves((tuple(args), dict(kwargs)))):
        sharding = getattr(leaf, "sharding", None)
        if sharding is not None and len(sharding.device_set) > 1:
            lines.append(f"{i}: {sharding!r}")
    return "\n".join(lines)
