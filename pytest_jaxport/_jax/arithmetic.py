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
from typing import TYPE_CHECKING, Any, cast

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
    return _as_results(eqn, outs) if narrow else outs


def float16_as_bfloat16(
    eqn: JaxprEqn, lhs: jax.Array, rhs: jax.Array, rest: Sequence[object]
) -> list[object]:
    """A float16 product as the TPU's matrix unit computes it: operands rounded to bfloat16,
    products accumulated in float32, the result in the product's own dtype (float16, or the
    float32 its ``preferred_element_type`` asks for)."""
    import jax.numpy as jnp

    wide = [rounded(v.astype(jnp.float32), BFLOAT16) for v in (lhs, rhs)]
    outs = bind(eqn, [*wide, *rest], preferred_element_type=jnp.dtype("float32"))
    return _as_results(eqn, outs)


def _as_results(eqn: JaxprEqn, outs: Sequence[object]) -> list[object]:
    """``outs`` (float32) in the dtypes of ``eqn``'s results."""
    return [
        cast("jax.Array", out).astype(getattr(var.aval, "dtype", None))
        for out, var in zip(outs, eqn.outvars, strict=True)
    ]


def in_format(x: object, dtype: object, *, flush: bool = False) -> jax.Array:
    """``x`` (float32) rounded to ``dtype`` to nearest even; ``flush``: float32 subnormals
    become zeros of their sign first (the TPU's float32 -> bfloat16 conversion)."""
    import jax.numpy as jnp
    from jax import lax

    array = cast("jax.Array", x)
    if flush and str(array.dtype) == "float32":
        tiny = jnp.float32(2.0**-126)  # float32's smallest normal number
        array = lax.select(lax.abs(array) < tiny, array * jnp.float32(0), array)
    narrowed: jax.Array = array.astype(cast("Any", dtype))
    return narrowed


def _sequential_cumsum(x: jax.Array) -> jax.Array:
    """The cumulative sum along the last axis, added in order (one float32 add a step)."""
    import jax.numpy as jnp
    from jax import lax

    def step(total: jax.Array, value: jax.Array) -> tuple[jax.Array, jax.Array]:
        total = total + value
        return total, total

    _, sums = lax.scan(step, jnp.zeros(x.shape[:-1], x.dtype), jnp.moveaxis(x, -1, 0))
    return jnp.moveaxis(sums, 0, -1)


def blocked_cumsum(
    x: object, *, axis: int = -1, reverse: bool = False, stored: object = None
) -> jax.Array:
    """The cumulative sum along ``axis`` as the TPU computes it: blocks of
    :data:`~pytest_jaxport.model.arithmetic.SCAN_BLOCK` summed in order, the block totals'
    running sum (blocked the same way) added to each block. ``stored``: the narrow dtype
    of a narrow cumsum, whose blocks, carries and result are stored rounded to it (``x`` in
    float32), as the TPU's program of reduce-windows stores them."""
    import jax.numpy as jnp

    array = cast("jax.Array", x)

    def kept(value: jax.Array) -> jax.Array:
        return value if stored is None else in_format(value, stored).astype(jnp.float32)

    if axis % array.ndim != array.ndim - 1:
        moved = blocked_cumsum(jnp.moveaxis(array, axis, -1), reverse=reverse, stored=stored)
        return jnp.moveaxis(moved, -1, axis)
    if reverse:
        return jnp.flip(blocked_cumsum(jnp.flip(array, -1), stored=stored), -1)
    n = array.shape[-1]
    if n <= SCAN_BLOCK:
        return kept(_sequential_cumsum(array))
    blocks = -(-n // SCAN_BLOCK)
    padded = jnp.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, blocks * SCAN_BLOCK - n)])
    inside = kept(_sequential_cumsum(padded.reshape(*array.shape[:-1], blocks, SCAN_BLOCK)))
    carried = blocked_cumsum(inside[..., -1], stored=stored)
    before = jnp.concatenate([jnp.zeros_like(carried[..., :1]), carried[..., :-1]], axis=-1)
    summed = kept(inside + before[..., None])
    return summed.reshape(*array.shape[:-1], blocks * SCAN_BLOCK)[..., :n]


# -- moving an op's results by the chip's measured bound -----------------------------------------

_TERMS = ("reduce_sum", "reduce_window_sum", "cumsum", "dot_general", "conv_general_dilated")
"""Ops whose ``terms`` bound scales with the same op over the magnitudes of its operands."""


def moved_outputs(
    eqn: JaxprEqn,
    values: Sequence[object],
    outs: Sequence[object],
    bound: OpBound,
    *,
    salt: int,
    towards: object = None,
) -> list[object]:
    """Each float32 (complex64) result of ``eqn`` moved by ``bound``: three in four elements
    up, one in four down (a pattern from the result's own bits and ``salt``), so that neither
    a sum, which adds errors of one sign, nor a normalization, which cancels them, hides the
    bound; eigenvector columns flipped in sign where the chip's come either way.
    ``towards``: ``outs`` are the float32 values of results stored in this narrow dtype; each
    moves towards the nearest point where its rounding to that format changes, so that every
    element the bound lets round the other way does."""
    import jax.numpy as jnp

    magnitudes: Sequence[object] = ()
    if bound.scale == "terms" and eqn.primitive.name in _TERMS:
        magnitudes = bind(eqn, [jnp.abs(cast("jax.Array", v)) for v in values])
    moved: list[object] = []
    for i, (out, var) in enumerate(zip(outs, eqn.outvars, strict=True)):
        if towards is None and not is_float32(var.aval):
            moved.append(out)
            continue
        y = _flipped(eqn, outs, i) if bound.sign_flips else cast("jax.Array", out)
        size = _size(y, bound, magnitudes[i] if magnitudes else None, eqn, values)
        if eqn.primitive.name in _TRIANGULAR:  # its structural zeros are the chip's too
            size = jnp.where(y == 0, jnp.zeros_like(size), size)
        if towards is not None:
            moved.append(y + _towards_tie(y, towards) * size)
        else:
            half = bound.scale == "largest"  # a matrix's or a transform's elements
            moved.append(_shifted(y, size, salt + 7919 * i, quarter=not half))
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


_TRIANGULAR = frozenset({"qr", "cholesky"})
"""Decompositions with triangular results: an element exactly zero is one of the triangle's
zeros, on every chip."""


def _size(
    y: jax.Array, bound: OpBound, terms: object, eqn: JaxprEqn, values: Sequence[object]
) -> jax.Array:
    """How far each element of ``y`` moves: ``bound`` in units of its scale (lax only, so
    that the moved program stays a few fused ops an output), by the input range of each
    element, its position, or the input's conditioning where the bound was measured so."""
    import jax.numpy as jnp
    from jax import lax

    eps = jnp.float32(EPS32)
    magnitude = lax.abs(y)
    size: jax.Array
    if bound.scale == "result":
        # ulp(y): y's exponent bits alone, times eps (0 for 0; normal numbers only)
        bits = lax.bitcast_convert_type(magnitude, jnp.uint32) & jnp.uint32(0x7F800000)
        ulp = lax.bitcast_convert_type(bits, jnp.float32) * eps
        if bound.per_factor is not None:
            size = ulp * _per_position(y, bound, eqn)
        else:
            size = ulp * jnp.float32(bound.ulps) + jnp.float32(bound.abs_eps) * eps
            size = _in_ranges(size, ulp, bound, y, values) if bound.ranges else size
    elif bound.scale == "terms" and terms is not None:
        size = lax.abs(cast("jax.Array", terms)) * (jnp.float32(bound.ulps) * eps)
    else:  # largest, or a terms bound without its terms
        axes = tuple(range(magnitude.ndim))
        largest = lax.reduce_max(magnitude, axes) if axes else magnitude
        ulps = _conditioned(bound, values[0]) if bound.conditioned else jnp.float32(bound.ulps)
        size = largest * (ulps * eps)
    return size


def _in_ranges(
    size: jax.Array, ulp: jax.Array, bound: OpBound, y: jax.Array, values: Sequence[object]
) -> jax.Array:
    """``size`` (the bound over its widest range) made the tightest of the bounds measured
    over the narrower ranges each element's inputs lie in."""
    import jax.numpy as jnp

    eps = jnp.float32(EPS32)
    first = jnp.broadcast_to(cast("jax.Array", values[0]), y.shape)
    second = jnp.broadcast_to(cast("jax.Array", values[1]), y.shape) if len(values) > 1 else None
    for r in bound.ranges:
        inside = (first >= r.low) & (first <= r.high)
        if r.second is not None and second is not None:
            inside = inside & (second >= r.second[0]) & (second <= r.second[1])
        there = ulp * jnp.float32(r.ulps) + jnp.float32(r.abs_eps) * eps
        if r.cpu_abs is not None:
            there = jnp.minimum(there, jnp.float32(r.cpu_abs))
        size = jnp.where(inside, jnp.minimum(size, there), size)
    return size


def _per_position(y: jax.Array, bound: OpBound, eqn: JaxprEqn) -> jax.Array:
    """A cumulative op's bound in ulp at each element: ``per_factor`` times its position
    along the axis, and at most the worst measured at the first length at or past it."""
    import jax.numpy as jnp
    from jax import lax

    axis = int(eqn.params.get("axis", 0)) % max(y.ndim, 1)
    n = y.shape[axis] if y.ndim else 1
    step = lax.broadcasted_iota(jnp.float32, y.shape, axis) if y.ndim else jnp.float32(0)
    position = (jnp.float32(n) - step) if eqn.params.get("reverse") else step + 1
    lengths = sorted({b.size for b in bound.sizes})
    worst = [max(b.ulps for b in bound.sizes if b.size == length) for length in lengths]
    table = jnp.asarray(worst, jnp.float32)
    at = jnp.searchsorted(jnp.asarray(lengths, jnp.float32), position, side="left")
    capped = table[jnp.minimum(at, len(worst) - 1)]
    return jnp.minimum(jnp.float32(bound.per_factor or 0.0) * position, capped)


def _conditioned(bound: OpBound, matrix: object) -> jax.Array:
    """A decomposition's bound in ulp for its input's 2-norm condition number (the worst in
    a batch): the worst measured at that conditioning or better; above every one measured,
    the worst measured times the ratio of the conditions."""
    import jax.numpy as jnp

    steps = bound.steps()
    condition = jnp.max(jnp.linalg.cond(cast("jax.Array", matrix).astype(jnp.float32)))
    levels = jnp.asarray([c for c, _ in steps], jnp.float32)
    ulps = jnp.asarray([u for _, u in steps], jnp.float32)
    at = jnp.searchsorted(levels, condition, side="left")
    beyond = ulps[-1] * condition / levels[-1]
    return jnp.where(at >= len(steps), beyond, ulps[jnp.minimum(at, len(steps) - 1)])


def _towards_tie(y: jax.Array, narrow: object) -> jax.Array:
    """+1 or -1 per element of ``y`` (float32): the side of the midpoint between the two
    values of ``narrow`` nearest it, where its rounding to ``narrow`` changes."""
    import jax.numpy as jnp
    from jax import lax

    rounded = y.astype(cast("Any", narrow)).astype(jnp.float32)
    return lax.select(y >= rounded, jnp.ones_like(y), -jnp.ones_like(y))


def _shifted(y: jax.Array, size: jax.Array, salt: int, *, quarter: bool = True) -> jax.Array:
    """``y`` moved by ``size``: down one element in four (``quarter``), else one in two."""
    from jax import lax

    if str(y.dtype) == "complex64":
        real, imag = lax.real(y), lax.imag(y)
        return lax.complex(real + _signs(real, salt, quarter=quarter) * size,
                           imag + _signs(imag, salt + 1, quarter=quarter) * size)  # fmt: skip
    return y + _signs(y, salt, quarter=quarter) * size


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
