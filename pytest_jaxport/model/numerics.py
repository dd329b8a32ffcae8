"""Tolerances and what comparing two backends' outputs found (pure Python: the report reads
and writes these records without importing numpy; :mod:`pytest_jaxport.model.compare` does
the comparing).

A leaf passes when, elementwise and in float64, ``|candidate - reference| <= atol + rtol *
|reference|`` (``numpy.allclose``'s convention), with NaNs and infinities in the same places.
The defaults are JAX's own test tolerances per dtype (``jax/_src/public_test_util.py``); the
table and how to loosen them: docs/reference.md ("[tool.jaxport.tolerance...]").

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from pytest_jaxport.model.jsontypes import JsonMapping, JsonObject, as_list, as_table

Reason = Literal["structure", "shape", "dtype", "nonfinite", "tolerance"]
"""Why a leaf (or the whole pytree, for ``"structure"``) failed to match."""

REASONS: tuple[Reason, ...] = ("structure", "shape", "dtype", "nonfinite", "tolerance")

ROOT_PATH = ""
"""The key path of a bare array output, and the path a ``"structure"`` mismatch carries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tolerance:
    """Elementwise bound ``|candidate - reference| <= atol + rtol * |reference|``.

    ``origin`` says where the bound was set, as a failure names it
    (``pyproject.toml [tool.jaxport.tolerance.float32]``, ``JAX's float32 default``): made
    where the tolerance is resolved (:meth:`pytest_jaxport.model.config.Resolved.tolerance_for`),
    carried with every mismatch. It is not part of the bound: two tolerances with the same
    ``rtol`` and ``atol`` are equal wherever they were set.
    """

    rtol: float
    atol: float
    origin: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"Tolerance.{name} must be a number, got {value!r}")
            if math.isnan(value) or value < 0:
                raise ValueError(f"Tolerance.{name} must be >= 0, got {value!r}")

    @property
    def exact(self) -> bool:
        """Whether only bit-for-bit equal values pass."""
        return self.rtol == 0 and self.atol == 0

    def __str__(self) -> str:
        return f"rtol={self.rtol:g}, atol={self.atol:g}"

    def to_dict(self) -> JsonObject:
        """``{"rtol": ..., "atol": ...}``, infinities as the string ``"inf"``; ``"origin"``
        where known."""
        bound: JsonObject = {
            "rtol": _float_to_json(self.rtol),
            "atol": _float_to_json(self.atol),
        }
        return {**bound, "origin": self.origin} if self.origin else bound

    @classmethod
    def from_dict(cls, data: JsonMapping) -> Tolerance:
        """Inverse of :meth:`to_dict`."""
        return cls(
            rtol=_float_from_json(data["rtol"]),
            atol=_float_from_json(data["atol"]),
            origin=str(data.get("origin") or ""),
        )


def _same(value: float) -> Tolerance:
    return Tolerance(rtol=value, atol=value)


EXACT_ORIGIN = (
    "pytest-jaxport (pytree structure, shapes, dtypes, key data and non-numeric data match exactly)"
)
"""The origin of a bound no setting changes, and what a numerics failure names when no
tolerance applied to any of its mismatches."""
_EXACT = Tolerance(rtol=0.0, atol=0.0, origin=EXACT_ORIGIN)
_INTEGER_NAMES = (
    "bool",
    *(f"{sign}int{bits}" for sign in ("", "u") for bits in (1, 2, 4, 8, 16, 32, 64)),
)
_FLOAT8_NAMES = (
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
)

DEFAULT_TOLERANCES: Mapping[str, Tolerance] = MappingProxyType(
    {
        **dict.fromkeys(_INTEGER_NAMES, _EXACT),
        **dict.fromkeys(_FLOAT8_NAMES, _same(1e-1)),
        "float8_e8m0fnu": _same(1e0),
        "float4_e2m1fn": _same(1e0),
        "bfloat16": _same(1e-2),
        "float16": _same(1e-3),
        "float32": _same(1e-6),
        "complex64": _same(1e-6),
        "float64": _same(1e-15),
        "complex128": _same(1e-15),
    }
)
"""JAX's test tolerances (``rtol = atol``), keyed by numpy dtype name."""

_SIZED_FLOAT = re.compile(r"^(?:b?float|complex)(\d+)")


def default_origin(dtype_name: str, *, gradient: bool = False) -> str:
    """Where an unconfigured tolerance comes from, as a failure names it.

    >>> default_origin("float32")
    "JAX's float32 default"
    >>> default_origin("float32", gradient=True)
    "JAX's float32 gradient default"
    """
    return f"JAX's {dtype_name} {'gradient ' if gradient else ''}default"


def default_tolerance(dtype_name: str) -> Tolerance:
    """The default tolerance for a dtype name, including dtypes newer than this table.

    Unknown narrow floats fall back by width: float8 variants (except the exponent-only
    ``float8_e8m0*``) to 1e-1, float4 to 1e0, float6 (which JAX does not list) to 1e-1, like
    the float8 formats with as few mantissa bits. Wider floats fall back to the tolerance of
    the float of that width (``float128`` like ``float64``). Anything that is not a float or
    complex dtype (bools, integers of any width, strings) is compared exactly.

    >>> default_tolerance("float8_e4m3fn")
    Tolerance(rtol=0.1, atol=0.1)
    >>> default_tolerance("uint4")
    Tolerance(rtol=0.0, atol=0.0)
    """
    return replace(_default_bound(dtype_name), origin=default_origin(dtype_name))


def _default_bound(dtype_name: str) -> Tolerance:
    known = DEFAULT_TOLERANCES.get(dtype_name)
    if known is not None:
        return known
    if dtype_name.startswith("float8_e8m0"):
        return _same(1e0)
    match = _SIZED_FLOAT.match(dtype_name)
    if match is None:
        return _EXACT
    bits = int(match.group(1))
    if dtype_name.startswith("complex"):
        bits //= 2
    if bits <= 4:
        return _same(1e0)
    if bits <= 8:
        return _same(1e-1)
    if bits <= 16:
        return _same(1e-3)
    if bits <= 32:
        return _same(1e-6)
    return _same(1e-15)


GRADIENT_TOLERANCES: Mapping[str, Tolerance] = MappingProxyType(
    {
        "bfloat16": _same(1e-1),
        "float16": _same(1e-2),
        "float32": _same(2e-3),
        "complex64": _same(1e-3),
        "float64": _same(1e-5),
        "complex128": _same(1e-5),
    }
)
"""JAX's ``default_gradient_tolerance`` (``rtol = atol``) for derivative outputs."""


def gradient_tolerance(dtype_name: str) -> Tolerance:
    """The default tolerance for a derivative (``[grad]``/``[jvp]`` checks) of ``dtype_name``.

    Follows JAX's ``check_grads`` defaults; dtypes without a gradient default (integers,
    float8, float4) fall back to :func:`default_tolerance`.

    >>> gradient_tolerance("float32")
    Tolerance(rtol=0.002, atol=0.002)
    """
    known = GRADIENT_TOLERANCES.get(dtype_name)
    if known is None:
        return default_tolerance(dtype_name)
    return replace(known, origin=default_origin(dtype_name, gradient=True))


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafMismatch:
    """One way the candidate's outputs differ from the reference's.

    ``index``, ``abs_err`` and ``rel_err`` describe the element furthest beyond the tolerance
    (its error less what the tolerance allows is the largest; the first offending
    one for ``"nonfinite"``); ``rel_err`` is ``inf`` when the reference value is 0.
    """

    path: str
    reason: Reason
    message: str
    index: tuple[int, ...] | None = None
    abs_err: float | None = None
    rel_err: float | None = None
    tolerance: Tolerance | None = None

    def to_dict(self) -> JsonObject:
        """Plain JSON-able dict; tuples become lists, ``inf``/``nan`` become strings."""
        return {
            "path": self.path,
            "reason": self.reason,
            "message": self.message,
            "index": None if self.index is None else list(self.index),
            "abs_err": None if self.abs_err is None else _float_to_json(self.abs_err),
            "rel_err": None if self.rel_err is None else _float_to_json(self.rel_err),
            "tolerance": None if self.tolerance is None else self.tolerance.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: JsonMapping) -> LeafMismatch:
        """Inverse of :meth:`to_dict`."""
        reason = data["reason"]
        if reason not in REASONS:
            raise ValueError(f"unknown mismatch reason {reason!r}, expected one of {REASONS}")
        index = data.get("index")
        abs_err = data.get("abs_err")
        rel_err = data.get("rel_err")
        tolerance = data.get("tolerance")
        return cls(
            path=str(data["path"]),
            reason=reason,
            message=str(data["message"]),
            index=None if index is None else tuple(_index(i) for i in as_list(index, "index")),
            abs_err=None if abs_err is None else _float_from_json(abs_err),
            rel_err=None if rel_err is None else _float_from_json(rel_err),
            tolerance=None
            if tolerance is None
            else Tolerance.from_dict(as_table(tolerance, "tolerance")),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """How ``platform``'s outputs compare with ``reference``'s.

    ``leaves`` counts the reference's leaves. ``max_abs_err`` and ``max_rel_err`` range over
    the finite elements of every leaf whose shape and dtype matched (``max_rel_err`` only
    where the reference is nonzero); both are 0.0 when everything matched exactly.
    """

    platform: str
    reference: str
    leaves: int
    mismatches: tuple[LeafMismatch, ...]
    max_abs_err: float
    max_rel_err: float

    @property
    def ok(self) -> bool:
        """Whether the outputs match in structure, shapes, dtypes and values."""
        return not self.mismatches

    def to_dict(self) -> JsonObject:
        """Plain JSON-able dict (``ok`` included for readers; :meth:`from_dict` ignores it)."""
        return {
            "platform": self.platform,
            "reference": self.reference,
            "leaves": self.leaves,
            "ok": self.ok,
            "max_abs_err": _float_to_json(self.max_abs_err),
            "max_rel_err": _float_to_json(self.max_rel_err),
            "mismatches": [m.to_dict() for m in self.mismatches],
        }

    @classmethod
    def from_dict(cls, data: JsonMapping) -> Comparison:
        """Inverse of :meth:`to_dict`."""
        return cls(
            platform=str(data["platform"]),
            reference=str(data["reference"]),
            leaves=_index(data["leaves"]),
            mismatches=tuple(
                LeafMismatch.from_dict(as_table(m, "mismatches[]"))
                for m in as_list(data["mismatches"], "mismatches")
            ),
            max_abs_err=_float_from_json(data["max_abs_err"]),
            max_rel_err=_float_from_json(data["max_rel_err"]),
        )


def tolerance_origin(comparison: Comparison) -> str:
    """Where the tolerances behind ``comparison``'s mismatches were set, each once, in the
    order of the mismatches (``pyproject.toml [tool.jaxport.tolerance.float32]``), or
    :data:`EXACT_ORIGIN` when none of them was a matter of tolerance."""
    origins = dict.fromkeys(
        m.tolerance.origin for m in comparison.mismatches if m.tolerance and m.tolerance.origin
    )
    return "; ".join(origins) or EXACT_ORIGIN


def describe(comparison: Comparison) -> str:
    """A status line, then one indented line per mismatch.

    ``cuda vs cpu: 12 leaves match (max abs err 3.1e-07, max rel err 2.0e-07)`` or
    ``cuda vs cpu: 2 of 12 leaves differ`` followed by the mismatch messages.
    """
    head = f"{comparison.platform} vs {comparison.reference}:"
    if comparison.ok:
        noun = "leaf matches" if comparison.leaves == 1 else "leaves match"
        return (
            f"{head} {comparison.leaves} {noun} (max abs err {comparison.max_abs_err:.1e},"
            f" max rel err {comparison.max_rel_err:.1e})"
        )
    differing = len({m.path for m in comparison.mismatches if m.reason != "structure"})
    parts = []
    if any(m.reason == "structure" for m in comparison.mismatches):
        parts.append("pytree structure differs")
    if differing or not parts:
        parts.append(f"{differing} of {comparison.leaves} leaves differ")
    lines = [f"{head} {', '.join(parts)}"]
    lines.extend(f"  {m.message}" for m in comparison.mismatches)
    return "\n".join(lines)


# --- structure -----------------------------------------------------------------------------


# --- one leaf ------------------------------------------------------------------------------

# --- text and JSON -------------------------------------------------------------------------


def _show_path(path: str) -> str:
    return path if path else "<root>"


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _float_to_json(value: float) -> float | str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(value)


def _index(value: object) -> int:
    """An integer of a record (``int()`` of what is one: a JSON number or a string of
    digits)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"expected an integer, got {value!r}")
    return int(value)


def _float_from_json(value: object) -> float:
    if isinstance(value, str):
        if value in ("inf", "-inf", "nan"):
            return float(value)
        raise ValueError(f"expected a number or 'inf'/'-inf'/'nan', got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number or 'inf'/'-inf'/'nan', got {value!r}")
    return float(value)
