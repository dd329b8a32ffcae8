"""Compare one function's outputs across two backends, leaf by leaf (numpy).

The check runs the function on the reference platform and on every other present backend,
flattens each result into :class:`Outputs`, and :func:`compare` reports how the candidate
differs from the reference (:class:`~pytest_jaxport.model.numerics.Comparison`), with the
tolerances of :mod:`pytest_jaxport.model.numerics`. numpy arrays in, values out.

Example::

    >>> import numpy as np
    >>> from pytest_jaxport.model.numerics import describe
    >>> ref = Outputs(structure="*", leaves=(Leaf(path="", array=np.float32([1.0, 2.0])),))
    >>> got = Outputs(structure="*", leaves=(Leaf(path="", array=np.float32([1.0, 2.5])),))
    >>> print(describe(compare(ref, got, reference_platform="cpu", platform="cuda")))
    cuda vs cpu: 1 of 1 leaves differ
      <root>: 1 of 2 elements differ beyond rtol=1e-06, atol=1e-06 (float32); furthest beyond the tolerance at index (1,): cpu=2.0 cuda=2.5, abs err 5.0e-01, rel err 2.5e-01

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""  # noqa: E501

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from pytest_jaxport.model.numerics import (
    _EXACT,
    ROOT_PATH,
    Comparison,
    LeafMismatch,
    Reason,
    Tolerance,
    _one_line,
    _show_path,
    default_tolerance,
)

_Float64 = npt.NDArray[np.float64]
_Bool = npt.NDArray[np.bool_]
Array = npt.NDArray[np.generic]
"""An output leaf's array: any shape, any dtype (ml_dtypes' included)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Leaf:
    """One output array and its pytree key path as text (``"['x']"``, ``"[0].weight"``)."""

    path: str
    array: Array
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


_FloatKind = Literal["float", "complex", "integer", "other"]


def _kind(dtype: np.dtype[np.generic]) -> _FloatKind:
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
    ref: Array
    cand: Array
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
            f" furthest beyond the tolerance at index {index}: {self._values_at(index)},"
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


def _integer_errors(ref: Array, cand: Array) -> _Errors:
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
