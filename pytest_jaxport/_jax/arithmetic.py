"""The arithmetic the emulation puts in place of an op: a product's operands rounded to the
format the emulated platform multiplies in (:func:`rounded`; the TPU's three bfloat16 passes,
:func:`three_passes`; its float16 products, :func:`float16_as_bfloat16`), a cumulative sum
added in blocks as the TPU adds it (:func:`blocked_cumsum`), and an op's results moved by the
chip's measured error bound (:func:`moved_outputs`). :mod:`pytest_jaxport._jax.emulate`
decides which op gets which; this module computes it.

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from pytest_jaxport._jax.jaxprs import bind
from pytest_jaxport.model.arithmetic import BFLOAT16, SCAN_BLOCK, NumberFormat, conv_unit, dot_unit
from pytest_jaxport.model.chip_errors import EPS32, OpBound

if TYPE_CHECKING:
    import jax
    from jax.extend.core import JaxprEqn


def is_float32(aval: object, *, complex_too: bool = True) -> bool:
    """Whether ``aval`` (a value's abstract type) is float32, or complex64 (``complex_too``)."""
    dtype = str(getattr(aval, "dtype", ""))
    return dtype == "float32" or (complex_too and dtype == "complex64")


_PRECISIONS = {"DEFAULT": "default", "HIGH": "high", "HIGHEST": "highest"}
_MATMUL_PRECISIONS = {
    "default": "default", "fastest": "default", "bfloat16": "default", "high": "high",
    "bfloat16_3x": "high", "tensorfloat32": "high", "highest": "highest", "float32": "highest",
}  # fmt: skip
"""``jax_default_matmul_precision``'s values, as the precision they give a default dot."""


def precision_of(precision: object) -> str:
    """``default``, ``high``, ``highest`` of a product's ``precision`` parameter (the higher
    of a pair), ``pinned`` for a dot algorithm."""
    if precision is None:
        return "default"
    if isinstance(precision, (tuple, list)):
        found = [precision_of(p) for p in precision]
        if "pinned" in found:
            return "pinned"
        return max(found, key=("default", "high", "highest").index)
    name = getattr(precision, "name", None)
    if name in _PRECISIONS:
        return _PRECISIONS[name]
    return "pinned"  # a DotAlgorithm or DotAlgorithmPreset other than DEFAULT


def matmul_precision() -> str | None:
    """The precision ``jax_default_matmul_precision`` (or ``jax.default_matmul_precision(...)``)
    gives every default dot traced now: ``None`` where it is unset, ``pinned`` where it names
    an algorithm."""
    import jax

    value = getattr(jax.config, "jax_default_matmul_precision", None)
    if value is None:
        return None
    return _MATMUL_PRECISIONS.get(str(value).lower(), "pinned")


def product_unit(eqn: JaxprEqn) -> str:
    """Where a TPU computes this product (``model.arithmetic.dot_unit`` / ``conv_unit``)."""
    lhs, rhs = (tuple(getattr(v.aval, "shape", ())) for v in eqn.invars[:2])
    params = eqn.params
    if eqn.primitive.name == "dot_general":
        contracting, batch = params["dimension_numbers"]
        return dot_unit(lhs, rhs, contracting, batch)
    numbers = params["dimension_numbers"]
    if params.get("batch_group_count", 1) != 1 or numbers is None:
        return "matrix"
    return conv_unit(input_features=lhs[numbers.lhs_spec[1]],
                     feature_group_count=params.get("feature_group_count", 1),
                     output_features=rhs[numbers.rhs_spec[0]])  # fmt: skip


def rounded(x: jax.Array, fmt: NumberFormat) -> jax.Array:
    """``x`` rounded to ``fmt`` (each part of a complex number)."""
    from jax import lax

    def narrow(part: jax.Array) -> jax.Array:
        return lax.reduce_precision(
            part, exponent_bits=fmt.exponent_bits, mantissa_bits=fmt.mantissa_bits
        )

    if str(x.dtype) == "complex64":
        return lax.complex(narrow(lax.real(x)), narrow(lax.imag(x)))
    return narrow(x)


def rounded_float32(x: jax.Array, fmt: NumberFormat) -> jax.Array:
    """``x`` rounded to ``fmt`` where it is float32 (complex64); a narrower operand of a mixed
    product as it is."""
    return rounded(x, fmt) if str(x.dtype) in ("float32", "complex64") else x


def _split_truncated(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(hi, lo)``: ``hi`` the float32 bits of ``x`` truncated to bfloat16's, ``lo`` the rest
    rounded to bfloat16 (the split the TPU's three-pass product makes, measured)."""
    import jax.numpy as jnp
    from jax import lax

    bits = lax.bitcast_convert_type(x, jnp.uint32)
    hi = lax.bitcast_convert_type(bits & jnp.uint32(0xFFFF0000), jnp.float32)
    return hi, rounded(x - hi, BFLOAT16)


def three_passes(
    eqn: JaxprEqn, lhs: jax.Array, rhs: jax.Array, rest: Sequence[object]
) -> list[object]:
    """``hi*lo + lo*hi + hi*hi`` of the truncated splits (float16 operands through float32,
    the result rounded back)."""
    import jax.numpy as jnp

    narrow = str(lhs.dtype) == "float16"
    wide = {"preferred_element_type": jnp.dtype("float32")} if narrow else {}
    hi_l, lo_l = _split_truncated(lhs.astype(jnp.float32))
    hi_r, lo_r = _split_truncated(rhs.astype(jnp.float32))
    one = cast("list[jax.Array]", bind(eqn, [hi_l, lo_r, *rest], **wide))
    other = cast("list[jax.Array]", bind(eqn, [lo_l, hi_r, *rest], **wide))
    large = cast("list[jax.Array]", bind(eqn, [hi_l, hi_r, *rest], **wide))
    small = [a + b for a, b in zip(one, other, strict=True)]  # the small terms first
    outs: list[object] = [a + b for a, b in zip(small, large, strict=True)]
    return [cast("jax.Array", out).astype(jnp.float16) for out in outs] if narrow else outs


def float16_as_bfloat16(
    eqn: JaxprEqn, lhs: jax.Array, rhs: jax.Array, rest: Sequence[object]
) -> list[object]:
    """A float16 product as the TPU's matrix unit computes it: operands rounded to bfloat16,
    products accumulated in float32, the result rounded to float16."""
    import jax.numpy as jnp

    wide = [rounded(v.astype(jnp.float32), BFLOAT16) for v in (lhs, rhs)]
    outs = bind(eqn, [*wide, *rest], preferred_element_type=jnp.dtype("float32"))
    return [cast("jax.Array", out).astype(jnp.float16) for out in outs]


def _sequential_cumsum(x: jax.Array) -> jax.Array:
    """The cumulative sum along the last axis, added in order (one float32 add a step)."""
    import jax.numpy as jnp
    from jax import lax

    def step(total: jax.Array, value: jax.Array) -> tuple[jax.Array, jax.Array]:
        total = total + value
        return total, total

    _, sums = lax.scan(step, jnp.zeros(x.shape[:-1], x.dtype), jnp.moveaxis(x, -1, 0))
    return jnp.moveaxis(sums, 0, -1)


def blocked_cumsum(x: object, *, axis: int = -1, reverse: bool = False) -> jax.Array:
    """The cumulative sum along ``axis`` as the TPU computes it: blocks of
    :data:`~pytest_jaxport.model.arithmetic.SCAN_BLOCK` summed in order, the block totals'
    running sum (blocked the same way) added to each block."""
    import jax.numpy as jnp

    array = cast("jax.Array", x)
    if axis % array.ndim != array.ndim - 1:
        moved = blocked_cumsum(jnp.moveaxis(array, axis, -1), reverse=reverse)
        return jnp.moveaxis(moved, -1, axis)
    if reverse:
        return jnp.flip(blocked_cumsum(jnp.flip(array, -1)), -1)
    n = array.shape[-1]
    if n <= SCAN_BLOCK:
        return _sequential_cumsum(array)
    blocks = -(-n // SCAN_BLOCK)
    padded = jnp.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, blocks * SCAN_BLOCK - n)])
    inside = _sequential_cumsum(padded.reshape(*array.shape[:-1], blocks, SCAN_BLOCK))
    carried = blocked_cumsum(inside[..., -1])
    before = jnp.concatenate([jnp.zeros_like(carried[..., :1]), carried[..., :-1]], axis=-1)
    summed = inside + before[..., None]
    return summed.reshape(*array.shape[:-1], blocks * SCAN_BLOCK)[..., :n]


# -- moving an op's results by the chip's measured bound -----------------------------------------

_TERMS = ("reduce_sum", "reduce_window_sum", "cumsum", "dot_general", "conv_general_dilated")
"""Ops whose ``terms`` bound scales with the same op over the magnitudes of its operands."""


def moved_outputs(
    eqn: JaxprEqn, values: Sequence[object], outs: Sequence[object], bound: OpBound, *, salt: int
) -> list[object]:
    """Each float32 (complex64) result of ``eqn`` moved by ``bound``: three in four elements
    up, one in four down (a pattern from the result's own bits and ``salt``), so that neither
    a sum, which adds errors of one sign, nor a normalization, which cancels them, hides the
    bound; eigenvector columns flipped in sign where the chip's come either way."""
    import jax.numpy as jnp

    magnitudes: Sequence[object] = ()
    if bound.scale == "terms" and eqn.primitive.name in _TERMS:
        magnitudes = bind(eqn, [jnp.abs(cast("jax.Array", v)) for v in values])
    moved: list[object] = []
    for i, (out, var) in enumerate(zip(outs, eqn.outvars, strict=True)):
        if not is_float32(var.aval):
            moved.append(out)
            continue
        y = _flipped(eqn, outs, i) if bound.sign_flips else cast("jax.Array", out)
        size = _size(y, bound, magnitudes[i] if magnitudes else None)
        moved.append(_shifted(y, size, salt + 7919 * i))
    return moved


_VECTORS: Mapping[str, tuple[int, Mapping[int, int]]] = {
    "eigh": (1, {0: -2}),  # (v, w): w's signs flip v's columns
    "svd": (0, {1: -2, 2: -1}),  # (s, u, vt): s's flip u's columns and vt's rows alike
}
"""Per decomposition whose vectors a chip returns with either sign: the output whose values
draw the signs, and for each vector output the axis the vectors run along (the sign
broadcast over it), so that a reconstruction (``v @ diag(w) @ v.T``) is unchanged."""


def _flipped(eqn: JaxprEqn, outs: Sequence[object], i: int) -> jax.Array:
    """Output ``i`` of a decomposition, its vectors' signs flipped one in two (a pattern from
    the values they belong to)."""
    import jax.numpy as jnp

    y = cast("jax.Array", outs[i])
    found = _VECTORS.get(eqn.primitive.name)
    if found is None or i not in found[1] or len(outs) <= found[0]:
        return y
    values = cast("jax.Array", outs[found[0]])
    signs = _signs(values, 104729, quarter=False)
    return y * jnp.expand_dims(signs, found[1][i])


def _size(y: jax.Array, bound: OpBound, terms: object) -> jax.Array:
    """How far each element of ``y`` moves: ``bound`` in units of its scale (lax only, so
    that the moved program stays a few fused ops an output)."""
    import jax.numpy as jnp
    from jax import lax

    eps = jnp.float32(EPS32)
    magnitude = lax.abs(y)
    size: jax.Array
    if bound.scale == "result":
        # ulp(y): y's exponent bits alone, times eps (0 for 0; normal numbers only)
        bits = lax.bitcast_convert_type(magnitude, jnp.uint32) & jnp.uint32(0x7F800000)
        ulp = lax.bitcast_convert_type(bits, jnp.float32) * eps
        size = ulp * jnp.float32(bound.ulps) + jnp.float32(bound.abs_eps) * eps
    elif bound.scale == "terms" and terms is not None:
        size = lax.abs(cast("jax.Array", terms)) * (jnp.float32(bound.ulps) * eps)
    else:  # largest, or a terms bound without its terms
        axes = tuple(range(magnitude.ndim))
        largest = lax.reduce_max(magnitude, axes) if axes else magnitude
        size = largest * (jnp.float32(bound.ulps) * eps)
    return size


def _shifted(y: jax.Array, size: jax.Array, salt: int) -> jax.Array:
    from jax import lax

    if str(y.dtype) == "complex64":
        real, imag = lax.real(y), lax.imag(y)
        return lax.complex(real + _signs(real, salt) * size, imag + _signs(imag, salt + 1) * size)
    return y + _signs(y, salt) * size


def _signs(y: jax.Array, salt: int, *, quarter: bool = True) -> jax.Array:
    """+1 or -1 per element from a hash of its bits and ``salt``: -1 for one element in four
    (``quarter``), else for one in two."""
    import jax.numpy as jnp
    from jax import lax

    bits = lax.bitcast_convert_type(y.astype(jnp.float32), jnp.uint32)
    mixed = (bits ^ jnp.uint32(salt & 0xFFFFFFFF)) * jnp.uint32(0x9E3779B1)  # wraps
    down = (mixed >> jnp.uint32(30 if quarter else 31)) == jnp.uint32(0)
    signs: jax.Array = jnp.float32(1) - jnp.float32(2) * down.astype(jnp.float32)
    return signs
