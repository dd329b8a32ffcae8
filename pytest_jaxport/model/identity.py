"""What makes two programs one computation: their text without what differs between
processes printing the same value (pure).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_NUMPY_SCALAR = re.compile(r"\bnp\.(?:u?int|float|complex)\d+\(([^()]*)\)|\bnp\.(True|False)_")
_FROZENSET = "frozenset({"
_CLOSING = {"(": ")", "[": "]", "{": "}"}


def stable_text(text: str) -> str:
    """``text`` (a jaxpr's, a static argument's) without what differs between processes
    printing the same value: object addresses blanked (a function in a primitive's
    parameters); NumPy scalars as the numbers they are (JAX caches a primitive's eager
    computation by its parameters, so ``sizes=(np.int64(2),)`` and ``sizes=(2,)`` are one
    trace, printed as whichever came first); and the elements of every ``frozenset({...})``
    sorted (a frozenset iterates in hash order, and objects without ``__hash__`` of their
    own, such as lineax's operator tags, hash by address; strings hash differently in every
    process).

    >>> stable_text("tags=frozenset({b_tag, a_tag}), f=<function g at 0x7f3a2c1e9d30>")
    'tags=frozenset({a_tag, b_tag}), f=<function g at 0x?>'
    >>> stable_text("split[axis=0 sizes=(np.int64(1), np.int64(6))] keep=np.True_")
    'split[axis=0 sizes=(1, 6)] keep=True'
    """
    text = _ADDRESS.sub("0x?", text)
    if "np." in text:
        text = _NUMPY_SCALAR.sub(lambda m: m.group(1) or m.group(2), text)
    if _FROZENSET not in text:
        return text
    return _sorted_sets(text)


def _sorted_sets(text: str) -> str:
    out: list[str] = []
    at = 0
    while True:
        start = text.find(_FROZENSET, at)
        if start < 0:
            out.append(text[at:])
            return "".join(out)
        inner = start + len(_FROZENSET)
        end = _closing(text, inner - 1)
        if end is None or text[end + 1 : end + 2] != ")":  # not a printed frozenset: as is
            out.append(text[at:inner])
            at = inner
            continue
        elements = sorted(_sorted_sets(e) for e in _top_level(text[inner:end]))
        out.append(f"{text[at:inner]}{', '.join(elements)}}})")
        at = end + 2


def _closing(text: str, opening: int) -> int | None:
    """The index of the bracket closing the one at ``opening`` (quotes respected)."""
    stack: list[str] = []
    quote = ""
    for i in range(opening, len(text)):
        c = text[i]
        if quote:
            if c == quote and text[i - 1] != "\\":
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _CLOSING:
            stack.append(_CLOSING[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return i
    return None


def _top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes (``""``: no element)."""
    parts: list[str] = []
    depth, quote, start = 0, "", 0
    for i, c in enumerate(text):
        if quote:
            if c == quote and text[i - 1] != "\\":
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return [*parts, last] if last or parts else []
