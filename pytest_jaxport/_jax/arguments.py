"""What ``jaxport.check``'s function and arguments mean to JAX: traced, or held static.

``check(fn, *args, **kwargs)`` filters its arguments the way ``equinox.filter_jit`` does, so
library models are checked as their users call them:

- Array leaves (JAX arrays, numpy arrays and scalars) are traced, and so are abstract ones
  (``jax.ShapeDtypeStruct``, with a sharding or not): a check with any is traced, lowered and
  compiled for every platform, and never run (:func:`abstract_leaves`).
- Every other leaf is held static: functions, strings, and Python numbers and bools (a
  dropout rate, a ``train`` flag, a layer count), any hashable object. Pass
  ``jnp.asarray(0.5)`` to trace a number (to differentiate with respect to it, say).
- ``fn`` may itself be a pytree: an equinox ``Module`` (``check(mlp, x)``), a flax nnx
  ``Module`` where nnx makes modules pytrees, a ``jax.tree_util.Partial``. Its arrays are
  traced like arguments (named ``fn...`` in messages and ``[grad]`` outputs).
- A function already wrapped in ``jax.jit(..., static_argnums=..., static_argnames=...)``
  keeps its own static arguments: they are held static, not traced.
- A leaf that is neither an array nor hashable cannot be either; :class:`ArgumentError`
  says which and how to split it off.

JAX is imported lazily, inside the functions; only the fixture and ``transforms.py`` call this.

Example::

    call = prepare(eqx.nn.MLP(4, 2, 8, 2, key=key), (x,), {}, name="MLP")
    jax.jit(call.fn).trace(*call.args, **call.kwargs)   # the MLP's weights are arguments

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FN_KEY = "jaxport.fn"
"""The keyword under which the traced part of a pytree ``fn`` travels (never a Python name,
so it cannot clash with the function's own keywords)."""


class ArgumentError(Exception):
    """An argument can be neither traced nor held static; the message says which and why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """``fn(*args, **kwargs)`` with every static part bound into ``fn``: what is traced."""

    fn: Callable[..., object]
    args: tuple[object, ...]
    kwargs: dict[str, object]


class _Held:
    """Marks a static leaf's place in the traced pytree: a node with no children (like
    ``None``), so ``jax.jit`` sees nothing there and the place is kept."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<held static>"


_HELD = _Held()
_TRACED = object()


@functools.cache
def _register_held() -> None:
    import jax

    jax.tree_util.register_pytree_node(_Held, lambda _: ((), None), lambda _, __: _HELD)


def jit_static_arguments(fn: Callable[..., object]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The ``static_argnums`` and ``static_argnames`` of a ``jax.jit``-wrapped ``fn`` (both
    filled in from the signature by ``jax.jit``); ``((), ())`` for any other callable.

    JAX keeps them on the wrapper's ``_jit_info`` (jax 0.6 to 0.12 at least); where a JAX
    version does not, a keyword meant to be static is traced and JAX says so.
    """
    info = getattr(fn, "_jit_info", None)
    numbers = getattr(info, "static_argnums", None) or ()
    names = getattr(info, "static_argnames", None) or ()
    try:
        return tuple(int(n) for n in numbers), tuple(str(n) for n in names)
    except (TypeError, ValueError):  # not JAX's PjitInfo after all
        return (), ()


def prepare(
    fn: Callable[..., object], args: Sequence[object], kwargs: Mapping[str, object], *, name: str
) -> Call:
    """The call to trace for ``check(fn, *args, **kwargs)``: static parts bound into the
    function, traced parts left as arguments (their paths unchanged). ``fn``, ``args`` and
    ``kwargs`` come back as they are when nothing is static.

    Raises :class:`ArgumentError` for a leaf that is neither an array nor hashable, and for
    an unhashable value of the function's own static arguments. ``name`` is the check's.
    """
    import jax

    _register_held()
    args, kwargs = tuple(args), dict(kwargs)
    jit_static = _jit_static(fn, args, kwargs, name)
    traced_args = tuple(a for i, a in enumerate(args) if i not in jit_static)
    traced_kwargs = {k: v for k, v in kwargs.items() if k not in jit_static}

    fn_leaves, _ = jax.tree_util.tree_flatten(fn)
    fn_is_tree = not (len(fn_leaves) == 1 and fn_leaves[0] is fn)
    tree: dict[str, object] = {"args": traced_args, "kwargs": traced_kwargs}
    if fn_is_tree:
        tree["fn"] = fn
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    places = _places(flat, name)
    if all(place is _TRACED for place in places) and not jit_static and not fn_is_tree:
        return Call(fn=fn, args=args, kwargs=kwargs)

    pairs = zip(places, flat, strict=True)
    masked = jax.tree_util.tree_unflatten(
        treedef, [leaf if place is _TRACED else _HELD for place, (_, leaf) in pairs]
    )
    bound = _bound(fn, places, treedef, jit_static, len(args), fn_is_tree=fn_is_tree)
    bound.__name__ = name
    if hasattr(fn, "__code__"):
        # JAX names the traced function in its errors ("while tracing the function f at
        # file:line") by unwrapping it: the user's function, not this wrapper. Its own
        # signature stays the one JAX binds the traced arguments to.
        bound.__signature__ = inspect.signature(bound)  # type: ignore[attr-defined]
        bound.__wrapped__ = fn  # type: ignore[attr-defined]
    call_kwargs = dict(masked["kwargs"])
    if fn_is_tree:
        call_kwargs[FN_KEY] = masked["fn"]
    return Call(fn=bound, args=masked["args"], kwargs=call_kwargs)


def _jit_static(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: Mapping[str, object], name: str
) -> dict[int | str, object]:
    """The values of ``fn``'s own static arguments (a ``jax.jit``'s ``static_argnums`` and
    ``static_argnames``) in this call, by position or keyword; each must be hashable."""
    numbers, names = jit_static_arguments(fn)
    positions = {n if n >= 0 else n + len(args) for n in numbers}
    jit_static: dict[int | str, object] = {
        i: args[i] for i in sorted(positions) if 0 <= i < len(args)
    }
    jit_static.update({k: kwargs[k] for k in names if k in kwargs})
    for where, value in jit_static.items():
        if not _hashable(value):
            given = f"args[{where}]" if isinstance(where, int) else f"kwargs[{where!r}]"
            raise ArgumentError(
                f"jaxport.check({name!r}): {given} is a static argument of the jitted "
                f"function (its static_argnums/static_argnames) but {type(value).__name__} "
                f"{value!r:.60} is not hashable; pass a hashable value (a tuple, not a list)"
            )
    return jit_static


def _places(flat: Sequence[tuple[Any, object]], name: str) -> list[object]:
    """Per leaf of ``flat`` (``(path, leaf)`` pairs, in flattening order): ``_TRACED``, or
    the value held static."""
    places: list[object] = []
    for path, leaf in flat:
        if _traced(leaf):
            places.append(_TRACED)
            continue
        if not _hashable(leaf):
            shown = f"{_shown_path(path)} is {type(leaf).__name__} {leaf!r:.60}"
            raise ArgumentError(
                f"jaxport.check({name!r}): {shown}: neither an array (traced) nor hashable "
                f"(held static); split the arrays off (as eqx.partition(model, eqx.is_array) "
                f"does) and bind the rest with functools.partial"
            )
        places.append(leaf)
    return places


def _bound(
    fn: Callable[..., object],
    places: Sequence[object],
    treedef: Any,
    jit_static: Mapping[int | str, object],
    arg_count: int,
    *,
    fn_is_tree: bool,
) -> Callable[..., object]:
    """``fn`` as a function of its traced leaves alone: the static ones (``places``) and its
    own static arguments (``jit_static``) put back where they were, in a pytree of
    ``treedef`` (the call's ``args``, ``kwargs`` and, for a pytree ``fn``, the function)."""
    import jax

    static_kwargs = {k: v for k, v in jit_static.items() if isinstance(k, str)}

    def bound(*traced: object, **traced_kwargs: object) -> object:
        __tracebackhide__ = True  # the function's own error shows the user's frames
        given: dict[str, Any] = {"args": traced, "kwargs": dict(traced_kwargs)}
        if fn_is_tree:
            given["fn"] = given["kwargs"].pop(FN_KEY)
        leaves = jax.tree_util.tree_leaves(given, is_leaf=_is_held)
        pairs = zip(places, leaves, strict=True)
        whole = jax.tree_util.tree_unflatten(
            treedef, [leaf if place is _TRACED else place for place, leaf in pairs]
        )
        rest = iter(whole["args"])
        full_args = [jit_static[i] if i in jit_static else next(rest) for i in range(arg_count)]
        target = whole["fn"] if fn_is_tree else fn
        return target(*full_args, **whole["kwargs"], **static_kwargs)

    return bound


def _is_held(value: object) -> bool:
    return isinstance(value, _Held)


def _traced(leaf: object) -> bool:
    """Arrays (JAX's and numpy's, scalars included), as ``eqx.is_array`` says, and abstract
    ones (``jax.ShapeDtypeStruct``: a shape, a dtype and a sharding, no data), as
    ``jax.jit(fn).lower`` takes them."""
    import jax
    import numpy as np

    return isinstance(leaf, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def abstract_leaves(args: Sequence[object], kwargs: Mapping[str, object]) -> tuple[str, ...]:
    """The paths of the abstract leaves (``jax.ShapeDtypeStruct``) among a call's traced
    arguments (``args[0]``, ``kwargs['x']``, ``fn.layers[0].weight``): a check with any is
    traced, lowered and compiled, never run (there is no data to run it on)."""
    import jax

    return tuple(
        path for path, leaf in argument_leaves(args, kwargs)
        if isinstance(leaf, jax.ShapeDtypeStruct)
    )  # fmt: skip


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _shown_path(path: Sequence[Any]) -> str:
    """``args[0].layers[1].weight``, ``kwargs['n']``, ``fn.layers[0].weight``."""
    import jax

    head, *rest = path  # the root: DictKey "args", "kwargs" or "fn"
    return f"{head.key}{jax.tree_util.keystr(tuple(rest))}"


def argument_leaves(
    args: Sequence[object], kwargs: Mapping[str, object]
) -> list[tuple[str, object]]:
    """Every leaf of the arguments with a readable path (``args[1]['w']``, ``kwargs['x']``)."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))
    named = []
    for path, leaf in flat:
        head, *rest = path
        root = "args" if getattr(head, "idx", 0) == 0 else "kwargs"
        if root == "kwargs" and rest and getattr(rest[0], "key", None) == FN_KEY:
            root, rest = "fn", rest[1:]  # the arrays of a pytree function (a model)
        named.append((root + jax.tree_util.keystr(tuple(rest)), leaf))
    return named
