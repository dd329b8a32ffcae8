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
from dataclasses import dataclass
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

    def to_dict(self) -> dict[str, object]:
        """The bound as ``chip_errors.json`` and a report's ``BoundedOp`` hold it (without
        its op, their key)."""
        return {"scale": self.scale, "ulps": self.ulps, "abs_eps": self.abs_eps,
                "worst_ulp": self.worst_ulp, "sign_flips": self.sign_flips,
                "range": None if self.measured_range is None
                else list(self.measured_range)}  # fmt: skip

    @classmethod
    def from_dict(cls, op: str, data: Mapping[str, Any]) -> OpBound:
        """``op``'s bound from :meth:`to_dict`'s form; a wrong shape raises ``KeyError``,
        ``TypeError``, ``ValueError`` or ``IndexError``."""
        worst, span = data.get("worst_ulp"), data.get("range")
        return cls(op=op, scale=_scale(data["scale"]), ulps=float(data["ulps"]),
                   abs_eps=float(data.get("abs_eps", 0.0)),
                   worst_ulp=None if worst is None else float(worst),
                   measured_range=None if span is None else (float(span[0]), float(span[1])),
                   sign_flips=bool(data.get("sign_flips", False)))  # fmt: skip

    @property
    def relative(self) -> float:
        """The bound's size relative to its scale (``ulps * eps``)."""
        return self.ulps * EPS32

    def describe(self) -> str:
        """``within 1,336 ulp``, ``within 0.9 ulp of the sum of its terms``.

        >>> OpBound(op="tanh", scale="result", ulps=734, worst_ulp=1336).describe()
        'within 1,336 ulp'
        >>> OpBound(op="eigh", scale="largest", ulps=12, sign_flips=True).describe()
        'within 12 ulp of its largest result, vectors of either sign'
        """
        if self.scale == "result":
            return (
                f"within {_count(self.worst_ulp if self.worst_ulp is not None else self.ulps)} ulp"
            )
        of = "of the sum of its terms" if self.scale == "terms" else "of its largest result"
        flips = ", vectors of either sign" if self.sign_flips else ""
        return f"within {_count(self.ulps)} ulp {of}{flips}"


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

    def bound(self, op: str) -> OpBound | None:
        """``op``'s measured bound (or that of the op whose arithmetic it is, :data:`ALIKE`)."""
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
