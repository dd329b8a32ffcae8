"""What a platform's chip was measured to compute: each primitive's error bound (pure).

The bounds are data, shipped as ``pytest_jaxport/chip_errors.json`` (written by
``calibration/calibrate.py chip-errors`` from a chip's ``benchmarks/validation/chip_errors.py``
results) and read once per process (:func:`chip_bounds`). An emulation moves each op it
cannot compute as the chip does by its bound (``PlatformProbe.emulated_bounds``).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """Where a platform's bounds come from: the device, JAX and libtpu they were measured
    with, the script and its recorded results."""

    device: str
    jax: str
    libtpu: str
    date: str
    script: str
    results: str

    def __str__(self) -> str:
        return f"{self.device} (measured: jax {self.jax}, libtpu {self.libtpu})"


Scale = Literal["result", "terms", "largest"]
"""What an op's error bound is relative to: ``result`` (units in the last place of each
result, plus an absolute part near the result's zeros), ``terms`` (float32's epsilon times
the sum of the magnitudes of what is added: reductions, dots, convolutions), ``largest``
(epsilon times the op's largest result: decompositions, transforms)."""

EPS32 = 2.0**-23
"""float32's epsilon: one unit in the last place of 1."""

FUSED_MULTIPLY_ADD = "mul+add"
"""The bound of a product an add reads (``a * b + c``): XLA's CPU compiler fuses the two
into one rounding, a chip that rounds the product first differs by up to half an ulp of it
(``calibration/calibrate.py chip-errors`` adopts it where the chip was measured to)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RangeBound:
    """An elementwise op's error measured over one range of its inputs (``result`` scale),
    tighter there than its bound over the widest range."""

    low: float
    high: float
    ulps: float
    abs_eps: float = 0.0
    worst_ulp: float | None = None
    cpu_abs: float | None = None
    """The largest ``|chip - cpu|`` measured over the range (the chip's error being more
    absolute than relative for some ops: log's is about 1.1e-4 on every range)."""
    second: tuple[float, float] | None = None
    """The range of the second operand it was measured with (pow's exponent)."""

    def to_dict(self) -> dict[str, object]:
        found: dict[str, object] = {
            "range": [self.low, self.high], "ulps": self.ulps, "abs_eps": self.abs_eps,
            "worst_ulp": self.worst_ulp,
        }  # fmt: skip
        if self.cpu_abs is not None:
            found["cpu_abs"] = self.cpu_abs
        if self.second is not None:
            found["exponent"] = list(self.second)
        return found

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RangeBound:
        low, high = (float(v) for v in data["range"])
        worst, cpu, second = data.get("worst_ulp"), data.get("cpu_abs"), data.get("exponent")
        return cls(
            low=low, high=high, ulps=float(data["ulps"]), abs_eps=float(data.get("abs_eps", 0.0)),
            worst_ulp=None if worst is None else float(worst),
            cpu_abs=None if cpu is None else float(cpu),
            second=None if second is None else (float(second[0]), float(second[1])),
        )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class SizeBound:
    """An op's error measured at one size (a matrix's order, a transform's length, a
    cumulative product's length) and, for some, one conditioning."""

    size: int
    ulps: float
    condition: float | None = None
    """The input's 2-norm condition number where the error depends on it."""

    def to_dict(self) -> dict[str, object]:
        found: dict[str, object] = {"size": self.size, "ulps": self.ulps}
        if self.condition is not None:
            found["condition"] = self.condition
        return found

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SizeBound:
        condition = data.get("condition")
        return cls(size=int(data["size"]), ulps=float(data["ulps"]),
                   condition=None if condition is None else float(condition))  # fmt: skip


SizeOf = Literal["", "n", "length", "position"]
"""What an op's sizes measure: ``n`` (a matrix's order: the larger of its last two
dimensions), ``length`` (a transform's length), ``position`` (an element's 1-based position
along a cumulative op's axis); ``""``: none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OpBound:
    """The measured worst error of one primitive on a platform's chip, against float64."""

    op: str
    scale: Scale
    ulps: float
    """The bound, in units of its scale: ``|error| <= ulps * ulp(y) + abs_eps * eps``
    (``result``), ``<= ulps * eps * sum|terms|`` (``terms``), ``<= ulps * eps * max|y|``
    (``largest``)."""
    abs_eps: float = 0.0
    worst_ulp: float | None = None
    """``result`` scale: the worst error measured in ulp (near the result's zeros too)."""
    measured_range: tuple[float, float] | None = None
    sign_flips: bool = False
    """Its vector outputs come out with either sign, vector by vector (eigenvectors, the
    singular vectors)."""
    ranges: tuple[RangeBound, ...] = ()
    """Tighter bounds measured over narrower input ranges (an element in several: the
    tightest; in none: the bound above)."""
    sizes: tuple[SizeBound, ...] = ()
    """The error per size (and conditioning), where it grows with them: a shape larger than
    every size measured has no bound (:meth:`at`)."""
    size_of: SizeOf = ""
    per_factor: float | None = None
    """``position`` sizes: the error of the ``k``-th element is also within
    ``per_factor * k`` ulp (measured at every length)."""
    note: str = ""
    """What a bound specialized to a shape (:meth:`at`) rests on, in words."""

    def to_dict(self) -> dict[str, object]:
        """The bound as ``chip_errors.json`` and a report's ``BoundedOp`` hold it (without its
        op, their key)."""
        found: dict[str, object] = {"scale": self.scale, "ulps": self.ulps,
                                    "abs_eps": self.abs_eps, "worst_ulp": self.worst_ulp,
                                    "sign_flips": self.sign_flips,
                                    "range": None if self.measured_range is None
                                    else list(self.measured_range)}  # fmt: skip
        # the measurements by shape where it has them (a report's sites hold none:
        # ``OpBound.shown``), so that reports of bounds with no shape are unchanged
        if self.ranges:
            found["ranges"] = [r.to_dict() for r in self.ranges]
        if self.sizes:
            found.update(sizes=[b.to_dict() for b in self.sizes], size_of=self.size_of)
        if self.per_factor is not None:
            found["per_factor"] = self.per_factor
        if self.note:
            found["note"] = self.note
        return found

    @classmethod
    def from_dict(cls, op: str, data: Mapping[str, Any]) -> OpBound:
        """``op``'s bound from :meth:`to_dict`'s form or ``chip_errors.json``'s (which adds
        ``ranges``, ``sizes``, ``size_of`` and ``per_factor``); a wrong shape raises
        ``KeyError``, ``TypeError``, ``ValueError`` or ``IndexError``."""
        worst, span, factor = data.get("worst_ulp"), data.get("range"), data.get("per_factor")
        return cls(op=op, scale=_scale(data["scale"]), ulps=float(data["ulps"]),
                   abs_eps=float(data.get("abs_eps", 0.0)),
                   worst_ulp=None if worst is None else float(worst),
                   measured_range=None if span is None else (float(span[0]), float(span[1])),
                   sign_flips=bool(data.get("sign_flips", False)),
                   ranges=tuple(RangeBound.from_dict(r) for r in data.get("ranges", ())),
                   sizes=tuple(SizeBound.from_dict(b) for b in data.get("sizes", ())),
                   size_of=_size_of(data.get("size_of", "")),
                   per_factor=None if factor is None else float(factor),
                   note=str(data.get("note", "")))  # fmt: skip

    @property
    def relative(self) -> float:
        """The bound's size relative to its scale (``ulps * eps``)."""
        return self.ulps * EPS32

    @property
    def conditioned(self) -> bool:
        """Whether the error was measured per conditioning (the run computes the input's)."""
        return any(b.condition is not None for b in self.sizes)

    def at(self, size: int) -> OpBound | str:
        """This bound for a shape of ``size`` (:attr:`size_of`): the measurements at the
        smallest size measured at or above it and below (errors grow with the size), their
        worst as :attr:`ulps`; or why there is none (a size beyond every one measured).

        >>> lu = OpBound(op="lu", scale="largest", ulps=6.1, size_of="n", sizes=(
        ...     SizeBound(size=16, ulps=3.0, condition=10), SizeBound(size=64, ulps=5.0,
        ...     condition=10), SizeBound(size=64, ulps=18.0, condition=1e4)))
        >>> print(lu.at(32).describe())
        within 18 ulp of its largest result (measured at n = 16 to 64: 5 ulp to condition 10, 18 to 1e+04, in proportion above)
        >>> lu.at(100)
        'n = 100 is beyond the sizes measured (16 to 64)'
        """  # noqa: E501
        if not self.sizes:
            return self
        measured = sorted({b.size for b in self.sizes})
        what = _SIZE_WORDS.get(self.size_of, self.size_of)
        if size > measured[-1]:
            span = f"{measured[0]:,} to {measured[-1]:,}"
            return f"{what} {size:,} is beyond the sizes measured ({span})"
        bucket = min(m for m in measured if m >= size)
        kept = tuple(b for b in self.sizes if b.size <= bucket)
        spread = f"{measured[0]:,} to {bucket:,}" if bucket > measured[0] else f"{bucket:,}"
        found = replace(self, ulps=max(b.ulps for b in kept), sizes=kept, note="")
        note = f"measured at {what} {spread}"
        if found.conditioned:
            steps: list[str] = []
            last = -1.0
            for condition, ulps in found.steps():
                if ulps > last:  # each step where the bound grows
                    first = " ulp to condition" if not steps else " to"
                    steps.append(f"{_count(ulps)}{first} {condition:.3g}")
                    last = ulps
            note += ": " + ", ".join(steps) + ", in proportion above"
        return replace(found, note=note)

    @property
    def shown(self) -> OpBound:
        """The bound as a report's site shows it: its worst over what it was measured on, its
        note, without the measurements by range and size the bounded run moved by."""
        return replace(self, ranges=(), sizes=())

    def steps(self) -> tuple[tuple[float, float], ...]:
        """``(condition, ulps)`` from the best conditioned up: the worst error measured at
        that conditioning or better (its :attr:`sizes`, as :meth:`at` keeps them)."""
        levels = sorted({b.condition for b in self.sizes if b.condition is not None})
        found = []
        for level in levels:
            found.append((level, max(b.ulps for b in self.sizes
                                     if b.condition is None or b.condition <= level)))  # fmt: skip
        return tuple(found)

    def describe(self) -> str:
        """``within 1,336 ulp``, ``within 0.9 ulp of the sum of its terms``.

        >>> OpBound(op="tanh", scale="result", ulps=734, worst_ulp=1336).describe()
        'within 1,336 ulp'
        >>> OpBound(op="eigh", scale="largest", ulps=12, sign_flips=True).describe()
        'within 12 ulp of its largest result, vectors of either sign'
        """
        note = f" ({self.note})" if self.note else ""
        if self.scale == "result":
            worst = self.worst_ulp if self.worst_ulp is not None else self.ulps
            per = f" per factor, within {_count(self.ulps)} in all" if self.per_factor else ""
            if self.per_factor:
                return f"within {_count(self.per_factor)} ulp{per}{note}"
            return f"within {_count(worst)} ulp{note}"
        of = "of the sum of its terms" if self.scale == "terms" else "of its largest result"
        flips = ", vectors of either sign" if self.sign_flips else ""
        return f"within {_count(self.ulps)} ulp {of}{flips}{note}"


_SIZE_WORDS: Mapping[str, str] = {"n": "n =", "length": "length", "position": "length"}


def _count(value: float) -> str:
    """``1,336``, ``0.9``, ``12``."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChipBounds:
    """What one platform's chip was measured to compute: each bounded primitive's error,
    and the primitives equal bit for bit to the CPU's."""

    platform: str
    measurement: Measurement
    ops: Mapping[str, OpBound]
    exact: frozenset[str]

    def bound(self, op: str, dtype: str = "") -> OpBound | None:
        """``op``'s measured bound (or that of the op whose arithmetic it is, :data:`ALIKE`);
        ``dtype``: the narrow format a TPU computes it for in float32, where that op was
        measured apart (``bfloat16 div``)."""
        if dtype:
            narrow = self.ops.get(f"{dtype} {ALIKE.get(op, op)}")
            if narrow is not None:
                return narrow
        return self.ops.get(ALIKE.get(op, op))

    def is_exact(self, op: str) -> bool:
        """Whether ``op`` (or the op whose arithmetic it is) was measured bit-equal."""
        return ALIKE.get(op, op) in self.exact


ALIKE: Mapping[str, str] = {"add_any": "add", "reduce_window_sum": "reduce_sum"}
"""Primitives whose arithmetic is another's, bounded (or exact) as that one: ``add_any`` (the
sum of two cotangents) is an add; ``reduce_window_sum`` (average pooling) is a sum of what
each window holds, bounded against the sum of their magnitudes."""


CHIP_ERRORS_FILE = "chip_errors.json"
"""The bounds, shipped inside the package (``pytest_jaxport/chip_errors.json``):
``calibration/calibrate.py chip-errors`` writes it from a chip's
``benchmarks/validation/chip_errors.py`` results, nothing else does."""

EXACT_EVERYWHERE: frozenset[str] = frozenset(
    {
        # moving, selecting and comparing values: no arithmetic
        "broadcast_in_dim", "concatenate", "convert_element_type", "copy", "copy_p",
        "dynamic_slice", "dynamic_update_slice", "expand_dims", "gather", "iota", "pad",
        "reshape", "rev", "scatter", "select_n", "slice", "split", "squeeze", "transpose",
        "eq", "ne", "lt", "le", "gt", "ge", "is_finite", "and", "or", "not", "xor",
        "argmax", "argmin", "reduce_max", "reduce_min", "reduce_and", "reduce_or", "sort",
        "reduce_window_max", "reduce_window_min", "select_and_gather_add",
        "cummax", "cummin", "top_k", "abs", "neg", "sign", "clamp", "stop_gradient",
        "reduce_precision", "nextafter", "bitcast_convert_type", "shift_left",
        "shift_right_logical", "shift_right_arithmetic", "population_count", "ceil",
        "random_bits", "random_seed", "random_wrap", "random_unwrap", "threefry2x32",
        "real", "imag", "complex", "conj", "optimization_barrier", "pjit", "jit",
        "closed_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
        "remat", "checkpoint", "cond", "while", "scan", "platform_index", "device_put",
        "sharding_constraint", "mesh_cast", "reshard", "name", "pvary", "psum_invariant",
    }
)  # fmt: skip
"""Primitives no platform computes differently (they move, select or compare values, or
hold other equations): never bounded, never "no bound"."""


def read_chip_bounds(text: str, *, source: str) -> dict[str, ChipBounds]:
    """The bounds of a ``chip_errors.json`` text, per platform; a wrong shape names
    ``source`` and the key.

    >>> bounds = read_chip_bounds(
    ...     '{"tpu": {"device": "TPU v5 lite", "jax": "0.10.2", "libtpu": "0.0.42.1", '
    ...     '"date": "2026-12-06", "script": "s", "results": "r", "exact": ["add"], '
    ...     '"ops": {"tanh": {"scale": "result", "ulps": 734, "abs_eps": 4.7, '
    ...     '"worst_ulp": 1336, "range": [-5, 5]}}}}', source="x")
    >>> bounds["tpu"].bound("tanh").describe(), sorted(bounds["tpu"].exact)
    ('within 1,336 ulp', ['add'])
    """
    import json

    found: dict[str, ChipBounds] = {}
    data = json.loads(text)
    for platform, entry in data.items():
        if platform == "about":
            continue
        try:
            measurement = Measurement(
                device=str(entry["device"]), jax=str(entry["jax"]), libtpu=str(entry["libtpu"]),
                date=str(entry["date"]), script=str(entry["script"]),
                results=str(entry["results"]),
            )  # fmt: skip
            ops = {op: OpBound.from_dict(op, bound) for op, bound in entry["ops"].items()}
            exact = frozenset(str(op) for op in entry["exact"])
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"{source}: {platform}: {type(e).__name__}: {e}") from e
        found[platform] = ChipBounds(
            platform=platform, measurement=measurement, ops=ops, exact=exact
        )
    return found


def _size_of(value: object) -> SizeOf:
    if value == "n":
        return "n"
    if value == "length":
        return "length"
    if value == "position":
        return "position"
    if value == "":
        return ""
    raise ValueError(f"size_of: expected n, length or position, found {value!r}")


def _scale(value: object) -> Scale:
    if value == "result":
        return "result"
    if value == "terms":
        return "terms"
    if value == "largest":
        return "largest"
    raise ValueError(f"scale: expected result, terms or largest, found {value!r}")


@functools.cache
def shipped_chip_bounds() -> Mapping[str, ChipBounds]:
    """The bounds shipped in ``pytest_jaxport/chip_errors.json`` (read once per process)."""
    import importlib.resources

    resource = importlib.resources.files("pytest_jaxport") / CHIP_ERRORS_FILE
    return read_chip_bounds(
        resource.read_text(encoding="utf-8"), source=f"pytest_jaxport/{CHIP_ERRORS_FILE}"
    )


def chip_bounds(platform: str) -> ChipBounds | None:
    """The measured bounds of ``platform``'s chip, ``None`` where none was measured."""
    return shipped_chip_bounds().get(platform)
