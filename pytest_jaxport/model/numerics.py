"""Compare one function's outputs across two backends, leaf by leaf, with dtype-aware tolerances.

``lowering.py`` runs the checked function on the reference platform (``reference`` in
``[tool.jaxport]``, usually ``"cpu"``) and on every other present backend, flattens each result
into :class:`Outputs`, and :func:`compare` reports how the candidate differs from the
reference. The module is pure: numpy arrays in, values out; it never imports JAX or pytest.

A leaf passes when, elementwise and computed in float64 (complex128 for complex dtypes;
bfloat16 and float8 are upcast exactly), ``|candidate - reference| <= atol + rtol *
|reference|`` — the ``numpy.allclose`` convention. NaNs must sit in the same places on both
sides, and infinities in the same places with the same sign; non-finite positions are left
out of the error statistics. Integer and bool leaves are compared exactly by default.

Default tolerances are JAX's own test defaults (``_default_tolerance`` in
``jax/_src/public_test_util.py``), with ``rtol = atol``:

=====================================  ==========
dtype                                  tolerance
=====================================  ==========
bool, every signed/unsigned integer    0 (exact)
float4_e2m1fn, float8_e8m0fnu          1e0
other float8 variants                  1e-1
bfloat16                               1e-2
float16                                1e-3
float32, complex64                     1e-6
float64, complex128                    1e-15
=====================================  ==========

float32's 1e-6 is tight for code whose reductions or matmuls run in a different order on a
GPU. Loosen it where you mean to, most specific wins:

.. code-block:: toml

    [tool.jaxport.tolerance.float32]        # every platform
    rtol = 1e-5
    atol = 1e-6

    [tool.jaxport.tolerance.cuda.bfloat16]  # one platform, one dtype
    rtol = 2e-2
    atol = 1e-2

or per test with ``@pytest.mark.portable(rtol=1e-4, atol=1e-5)``. The plugin turns those into
the ``tolerance`` callable that :func:`compare` takes (one per compared platform).

Example::

    >>> import numpy as np
    >>> ref = Outputs(structure="*", leaves=(Leaf(path="", array=np.float32([1.0, 2.0])),))
    >>> got = Outputs(structure="*", leaves=(Leaf(path="", array=np.float32([1.0, 2.5])),))
    >>> print(describe(compare(ref, got, reference_platform="cpu", platform="cuda")))
    cuda vs cpu: 1 of 1 leaves differ
      <root>: 1 of 2 elements differ beyond rtol=1e-06, atol=1e-06 (float32); worst at index (1,): cpu=2.0 cuda=2.5, abs err 5.0e-01, rel err 2.5e-01

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""  # noqa: E501

from __future__ import annotations

import math
import numbers
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

Reason = Literal["structure", "shape", "dtype", "nonfinite", "tolerance"]
"""Why a leaf (or the whole pytree, for ``"structure"``) failed to match."""

REASONS: tuple[Reason, ...] = ("structure", "shape", "dtype", "nonfinite", "tolerance")

ROOT_PATH = ""
"""The key path of a bare array output, and the path a ``"structure"`` mismatch carries."""

_Float64 = npt.NDArray[np.float64]
_Bool = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tolerance:
    """Elementwise bound ``|candidate - reference| <= atol + rtol * |reference|``."""

    rtol: float
    atol: float

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

    def to_dict(self) -> dict[str, Any]:
        """``{"rtol": ..., "atol": ...}``, infinities as the string ``"inf"``."""
        return {"rtol": _float_to_json(self.rtol), "atol": _float_to_json(self.atol)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tolerance:
        """Inverse of :meth:`to_dict`."""
        return cls(rtol=_float_from_json(data["rtol"]), atol=_float_from_json(data["atol"]))


def _same(value: float) -> Tolerance:
    return Tolerance(rtol=value, atol=value)


_EXACT = _same(0.0)
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
    return known if known is not None else default_tolerance(dtype_name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Leaf:
    """One output array and its pytree key path as text (``"['x']"``, ``"[0].weight"``)."""

    path: str
    array: np.ndarray[Any, Any]
    key_impl: str | None = None
    """For a typed PRNG key (``jax.random.key``), its implementation (``threefry2x32``);
    ``array`` then holds the key's data (``jax.random.key_data``), compared exactly."""

    @property
    def dtype_name(self) -> str:
        """``float32``, or ``key<threefry2x32>`` for a typed PRNG key."""
        return f"key<{self.key_impl}>" if self.key_impl else np.asarray(self.array).dtype.name


@dataclass(frozen=True, slots=True, kw_only=True)
class Outputs:
    """One backend's flattened outputs: ``str(treedef)`` and the leaves in flattening order."""

    structure: str
    leaves: tuple[Leaf, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafMismatch:
    """One way the candidate's outputs differ from the reference's.

    ``index``, ``abs_err`` and ``rel_err`` describe the worst element (the first offending
    one for ``"nonfinite"``); ``rel_err`` is ``inf`` when the reference value is 0.
    """

    path: str
    reason: Reason
    message: str
    index: tuple[int, ...] | None = None
    abs_err: float | None = None
    rel_err: float | None = None
    tolerance: Tolerance | None = None

    def to_dict(self) -> dict[str, Any]:
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
    def from_dict(cls, data: Mapping[str, Any]) -> LeafMismatch:
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
            reason=cast(Reason, reason),
            message=str(data["message"]),
            index=None if index is None else tuple(int(i) for i in index),
            abs_err=None if abs_err is None else _float_from_json(abs_err),
            rel_err=None if rel_err is None else _float_from_json(rel_err),
            tolerance=None if tolerance is None else Tolerance.from_dict(tolerance),
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

    def to_dict(self) -> dict[str, Any]:
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
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """Inverse of :meth:`to_dict`."""
        return cls(
            platform=str(data["platform"]),
            reference=str(data["reference"]),
            leaves=int(data["leaves"]),
            mismatches=tuple(LeafMismatch.from_dict(m) for m in data["mismatches"]),
            max_abs_err=_float_from_json(data["max_abs_err"]),
            max_rel_err=_float_from_json(data["max_rel_err"]),
        )


def compare(
    reference: Outputs,
    candidate: Outputs,
    *,
    reference_platform: str,
    platform: str,
    tolerance: Callable[[str], Tolerance] = default_tolerance,
) -> Comparison:
    """Compare ``candidate`` (run on ``platform``) with ``reference`` (on ``reference_platform``).

    ``tolerance`` maps a dtype name to the bound for leaves of that dtype; bind the platform
    into it to make tolerances platform-specific. A structure mismatch is reported once and
    the leaves whose paths exist on both sides are still compared; a leaf whose shape or dtype
    differs is reported without comparing its values.
    """
    mismatches: list[LeafMismatch] = []
    ref_paths = [leaf.path for leaf in reference.leaves]
    cand_paths = [leaf.path for leaf in candidate.leaves]
    if reference.structure != candidate.structure or ref_paths != cand_paths:
        mismatches.append(_structure_mismatch(reference, candidate, reference_platform, platform))
    max_abs = 0.0
    max_rel = 0.0
    for ref_leaf, cand_leaf in _pair(reference.leaves, candidate.leaves):
        leaf = _LeafComparison(
            path=ref_leaf.path,
            ref=np.asarray(ref_leaf.array),
            cand=np.asarray(cand_leaf.array),
            ref_platform=reference_platform,
            platform=platform,
            ref_dtype=ref_leaf.dtype_name,
            cand_dtype=cand_leaf.dtype_name,
        )
        mismatch, leaf_abs, leaf_rel = leaf.run(tolerance)
        if mismatch is not None:
            mismatches.append(mismatch)
        max_abs = max(max_abs, leaf_abs)
        max_rel = max(max_rel, leaf_rel)
    return Comparison(
        platform=platform,
        reference=reference_platform,
        leaves=len(reference.leaves),
        mismatches=tuple(mismatches),
        max_abs_err=max_abs,
        max_rel_err=max_rel,
    )


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


def _occurrences(leaves: tuple[Leaf, ...]) -> list[tuple[tuple[str, int], Leaf]]:
    """Key each leaf by (path, how many times that path came before) so duplicates pair up."""
    seen: Counter[str] = Counter()
    keyed = []
    for leaf in leaves:
        keyed.append(((leaf.path, seen[leaf.path]), leaf))
        seen[leaf.path] += 1
    return keyed


def _pair(ref: tuple[Leaf, ...], cand: tuple[Leaf, ...]) -> list[tuple[Leaf, Leaf]]:
    by_key = dict(_occurrences(cand))
    return [(leaf, by_key[key]) for key, leaf in _occurrences(ref) if key in by_key]


def _structure_mismatch(
    reference: Outputs, candidate: Outputs, ref_platform: str, platform: str
) -> LeafMismatch:
    ref_keys = [key for key, _ in _occurrences(reference.leaves)]
    cand_keys = [key for key, _ in _occurrences(candidate.leaves)]
    ref_set, cand_set = set(ref_keys), set(cand_keys)
    only_ref = [_show_path(path) for path, n in ref_keys if (path, n) not in cand_set]
    only_cand = [_show_path(path) for path, n in cand_keys if (path, n) not in ref_set]
    message = (
        f"pytree structure differs: {ref_platform}={reference.structure}"
        f" ({len(reference.leaves)} leaves) {platform}={candidate.structure}"
        f" ({len(candidate.leaves)} leaves)"
    )
    if only_ref:
        message += f"; only on {ref_platform}: {', '.join(only_ref)}"
    if only_cand:
        message += f"; only on {platform}: {', '.join(only_cand)}"
    return LeafMismatch(path=ROOT_PATH, reason="structure", message=_one_line(message))


# --- one leaf ------------------------------------------------------------------------------

_FloatKind = Literal["float", "complex", "integer", "other"]


def _kind(dtype: np.dtype[Any]) -> _FloatKind:
    if dtype.kind == "c":
        return "complex"
    if dtype.kind == "f":
        return "float"
    if dtype.kind in "biu":
        return "integer"
    # ml_dtypes' bfloat16/float8/int4... register as kind "V"; their names say what they are.
    if dtype.kind == "V" and dtype.names is None and dtype.itemsize > 0:
        if dtype.name.startswith(("float", "bfloat")):
            return "float"
        if dtype.name.startswith(("int", "uint")):
            return "integer"
    return "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Errors:
    """Per-element error arrays of one leaf, all of the leaf's shape."""

    abs_err: _Float64
    magnitude: _Float64  # |reference|
    finite: _Bool  # both sides finite: the positions that enter the statistics
    placement: _Bool  # NaN/Inf placement differs


@dataclass(frozen=True, slots=True, kw_only=True)
class _LeafComparison:
    path: str
    ref: np.ndarray[Any, Any]
    cand: np.ndarray[Any, Any]
    ref_platform: str
    platform: str
    ref_dtype: str
    """What the reference leaf is: its dtype's name, or ``key<impl>`` for key data."""
    cand_dtype: str

    def run(
        self, tolerance: Callable[[str], Tolerance]
    ) -> tuple[LeafMismatch | None, float, float]:
        """The leaf's mismatch (if any) and its max abs and rel error over finite elements."""
        ref, cand = self.ref, self.cand
        if ref.shape != cand.shape:
            return self._mismatch("shape", f"shape differs: {self._sides(ref.shape, cand.shape)}")
        if ref.dtype != cand.dtype or self.ref_dtype != self.cand_dtype:
            sides = self._sides(self.ref_dtype, self.cand_dtype)
            return self._mismatch("dtype", f"dtype differs: {sides}")
        errors = self._errors()
        if errors is None:
            return self._compare_exactly(), 0.0, 0.0
        # a key's data are bits, not numbers: equal or not, whatever uint32's tolerance is
        tol = tolerance(ref.dtype.name) if self.ref_dtype == ref.dtype.name else _EXACT
        abs_err = np.where(errors.finite, errors.abs_err, 0.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # inf*0, x/0, x/tiny
            scaled = np.where(errors.magnitude == 0, 0.0, tol.rtol * errors.magnitude)
            allowed = tol.atol + scaled
            beyond = errors.finite & ~(abs_err <= allowed)
            rel = np.where(errors.finite & (errors.magnitude > 0), abs_err / errors.magnitude, 0.0)
        leaf_abs = float(abs_err.max(initial=0.0))
        leaf_rel = float(rel.max(initial=0.0))
        if errors.placement.any():
            return self._nonfinite(errors.placement, beyond, tol), leaf_abs, leaf_rel
        if beyond.any():
            return self._beyond(beyond, abs_err - allowed, errors, tol), leaf_abs, leaf_rel
        return None, leaf_abs, leaf_rel

    # messages

    def _sides(self, ref: object, cand: object) -> str:
        return f"{self.ref_platform}={ref} {self.platform}={cand}"

    def _values_at(self, index: tuple[int, ...]) -> str:
        # str(), not format(): numpy scalars print their shortest round-trip text that way.
        return self._sides(str(self.ref[index]), str(self.cand[index]))

    def _mismatch(self, reason: Reason, text: str) -> tuple[LeafMismatch, float, float]:
        message = _one_line(f"{_show_path(self.path)}: {text}")
        return LeafMismatch(path=self.path, reason=reason, message=message), 0.0, 0.0

    def _counted(self, mask: _Bool, what: str) -> str:
        shown = self.ref_dtype
        if shown != self.ref.dtype.name:  # a key's data
            shown += " data"
        return f"{int(mask.sum())} of {mask.size} elements {what} ({shown})"

    def _nonfinite(self, placement: _Bool, beyond: _Bool, tol: Tolerance) -> LeafMismatch:
        index = _first(placement)
        text = (
            f"{self._counted(placement, 'differ in NaN/Inf placement')};"
            f" first at index {index}: {self._values_at(index)}"
        )
        if beyond.any():
            text += f"; also {int(beyond.sum())} finite elements differ beyond {tol}"
        return LeafMismatch(
            path=self.path,
            reason="nonfinite",
            message=_one_line(f"{_show_path(self.path)}: {text}"),
            index=index,
            tolerance=tol,
        )

    def _beyond(
        self, beyond: _Bool, excess: _Float64, errors: _Errors, tol: Tolerance
    ) -> LeafMismatch:
        flat = int(np.argmax(np.where(beyond, excess, -np.inf)))
        index = _unravel(flat, beyond.shape)
        abs_err = float(errors.abs_err[index])
        magnitude = float(errors.magnitude[index])
        rel_err = abs_err / magnitude if magnitude > 0 else math.inf
        rel_text = f"{rel_err:.1e}" if magnitude > 0 else "inf (reference is 0)"
        text = (
            f"{self._counted(beyond, f'differ beyond {tol}')};"
            f" worst at index {index}: {self._values_at(index)},"
            f" abs err {abs_err:.1e}, rel err {rel_text}"
        )
        return LeafMismatch(
            path=self.path,
            reason="tolerance",
            message=_one_line(f"{_show_path(self.path)}: {text}"),
            index=index,
            abs_err=abs_err,
            rel_err=rel_err,
            tolerance=tol,
        )

    def _compare_exactly(self) -> LeafMismatch | None:
        """Dtypes without arithmetic (float0, strings, records): equal bytes or equal objects."""
        ref, cand = self.ref, self.cand
        if ref.size == 0 or ref.dtype.itemsize == 0:
            return None
        if ref.dtype.hasobject:
            differ = np.asarray(ref != cand, dtype=bool).reshape(ref.shape)
        else:
            width = ref.dtype.itemsize
            ref_bytes = np.ascontiguousarray(ref).view(np.uint8).reshape((*ref.shape, width))
            cand_bytes = np.ascontiguousarray(cand).view(np.uint8).reshape((*ref.shape, width))
            differ = (ref_bytes != cand_bytes).any(axis=-1)
        if not differ.any():
            return None
        index = _first(differ)
        text = (
            f"{self._counted(differ, 'differ (compared exactly)')};"
            f" first at index {index}: {self._values_at(index)}"
        )
        return LeafMismatch(
            path=self.path,
            reason="tolerance",
            message=_one_line(f"{_show_path(self.path)}: {text}"),
            index=index,
            tolerance=_EXACT,
        )

    # arithmetic

    def _errors(self) -> _Errors | None:
        kind = _kind(self.ref.dtype)
        if kind == "integer":
            return _integer_errors(self.ref, self.cand)
        if kind == "float":
            ref64 = self.ref.astype(np.float64)
            cand64 = self.cand.astype(np.float64)
            finite = np.isfinite(ref64) & np.isfinite(cand64)
            placement = _class(ref64) != _class(cand64)
        elif kind == "complex":
            ref64 = self.ref.astype(np.complex128)
            cand64 = self.cand.astype(np.complex128)
            finite = np.isfinite(ref64) & np.isfinite(cand64)
            placement = (_class(ref64.real) != _class(cand64.real)) | (
                _class(ref64.imag) != _class(cand64.imag)
            )
        else:
            return None
        safe_ref = np.where(finite, ref64, 0)
        safe_cand = np.where(finite, cand64, 0)
        with np.errstate(over="ignore"):
            abs_err = np.abs(safe_cand - safe_ref).astype(np.float64)
        magnitude = np.abs(safe_ref).astype(np.float64)
        return _Errors(abs_err=abs_err, magnitude=magnitude, finite=finite, placement=placement)


def _integer_errors(ref: np.ndarray[Any, Any], cand: np.ndarray[Any, Any]) -> _Errors:
    # Exact |a - b| for every integer width up to 64 bits: subtract in uint64, where
    # wraparound makes larger-minus-smaller exact even when the signed difference overflows.
    wide = np.uint64 if ref.dtype.kind == "u" else np.int64
    ref_w = ref.astype(wide)
    cand_w = cand.astype(wide)
    ref_u = ref_w.astype(np.uint64)
    cand_u = cand_w.astype(np.uint64)
    diff = np.where(cand_w >= ref_w, cand_u - ref_u, ref_u - cand_u)
    shape = ref.shape
    return _Errors(
        abs_err=diff.astype(np.float64).reshape(shape),
        magnitude=np.abs(ref.astype(np.float64)).reshape(shape),
        finite=np.ones(shape, dtype=bool),
        placement=np.zeros(shape, dtype=bool),
    )


def _class(values: _Float64) -> npt.NDArray[np.int8]:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    code = np.zeros(values.shape, dtype=np.int8)
    code[np.isnan(values)] = 1
    code[np.isposinf(values)] = 2
    code[np.isneginf(values)] = 3
    return code


def _first(mask: _Bool) -> tuple[int, ...]:
    return _unravel(int(np.argmax(mask)), mask.shape)


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


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


def _float_from_json(value: object) -> float:
    if isinstance(value, str):
        if value in ("inf", "-inf", "nan"):
            return float(value)
        raise ValueError(f"expected a number or 'inf'/'-inf'/'nan', got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number or 'inf'/'-inf'/'nan', got {value!r}")
    return float(value)
