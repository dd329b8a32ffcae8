"""What one op computes and moves: flops and bytes from its types (pure).

The arithmetic of a dot (2·M·N·K), a convolution, an FFT (5·n·log₂n) and a solver (n³ per
matrix), shared by both readers: the lowered program's (:func:`op_cost`, on StableHLO types)
and the compiled program's (:mod:`pytest_jaxport.model.hlo_cost`, on HLO shapes). The
roofline (:mod:`pytest_jaxport.model.roofline`) prices what they count.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping

_TENSOR = re.compile(r"tensor<([^<>]*(?:<[^<>]*>)?)>")
_CONTRACTING = re.compile(r"lhs_contracting_dimensions = \[([0-9, ]*)\]")
_CONV_RHS = re.compile(r"\]x\[([^\]]*)\]")
_SOLVER = re.compile(
    r"(solver|lapack_|hybrid|getrf|potrf|syevd|geqrf|gesvd|gesdd|orgqr|trsm|Eigh|Qr|Lu"
    r"|Householder|cholesky|triangular)",
    re.IGNORECASE,
)
FREE_OPS = frozenset(
    {"stablehlo.constant", "stablehlo.reshape", "stablehlo.bitcast_convert",
     "stablehlo.get_tuple_element", "stablehlo.tuple", "stablehlo.optimization_barrier",
     "stablehlo.iota", "stablehlo.broadcast_in_dim", "func.return", "stablehlo.return",
     "func.call", "sdy.sharding_constraint", "sdy.manual_computation",
     "sdy.named_computation", "sdy.return"}
)  # fmt: skip
"""Ops that cost nothing in the roofline (no data moves, or none worth counting). A
``shard_map`` body (``sdy.manual_computation``) costs what its ops cost, like a call."""


def _element_bits(element: str) -> int:
    if element.startswith("complex<"):
        return 2 * _element_bits(element[len("complex<") : -1])
    if element in ("i1", "bf16"):
        return 8 if element == "i1" else 16
    m = re.match(r"^(?:f|i|ui|si)(\d+)$", element)
    if m:
        return int(m.group(1))
    if element.startswith("f8"):
        return 8
    if element.startswith("f4"):
        return 4
    return 32


@functools.lru_cache(maxsize=8192)
def tensor_shape(type_text: str) -> tuple[tuple[int, ...], int] | None:
    """``tensor<4x8xf32>`` -> ``((4, 8), 32)``: dimensions and bits per element.

    >>> tensor_shape("tensor<2x3xcomplex<f32>>")
    ((2, 3), 64)
    >>> tensor_shape("tensor<complex<f64>>"), tensor_shape("tensor<?x4xbf16>")
    (((), 128), ((1, 4), 16))
    """
    m = _TENSOR.search(type_text)
    if m is None:
        return None
    parts = m.group(1).split("x")  # (the element type may hold an x: complex<f32>)
    dims = 0
    while dims < len(parts) - 1 and (parts[dims].isdigit() or parts[dims] == "?"):
        dims += 1
    sizes = tuple(1 if d == "?" else int(d) for d in parts[:dims])
    return sizes, _element_bits("x".join(parts[dims:]))


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def dot_flops(outputs: float, contracted: float) -> float:
    """A matrix product: one multiply-add (2 flops) per output element per contracted element."""
    return 2.0 * outputs * contracted


def convolution_flops(outputs: float, kernel: tuple[int, ...], out_features: int) -> float:
    """A convolution: 2 flops per output element per kernel element of one output feature."""
    return 2.0 * outputs * _elements(kernel) / max(out_features, 1)


def fft_flops(points: float) -> float:
    """An FFT over ``points`` elements: 5·n·log2 n."""
    n = max(points, 2.0)
    return 5.0 * n * math.log2(n)


def solver_flops(dims: tuple[int, ...]) -> float:
    """A factorization or eigensolver of (a batch of) ``n×n`` matrices: n³ each."""
    n = dims[-1]
    return float(n**3 * _elements(dims[:-2]))


def is_solver(target: str | None) -> bool:
    """Whether a custom-call target is a linear-algebra solver (LAPACK, cuSOLVER, TPU's)."""
    return target is not None and _SOLVER.search(target) is not None


def op_cost(
    op: str,
    target: str | None,
    operands: list[str],
    results: list[str],
    attributes: Mapping[str, str],
) -> tuple[float, float]:
    """Approximate ``(flops, bytes)`` of one StableHLO op from its types, for the roofline.

    dot: 2·M·N·K; convolution: 2·outputs·(kernel size / output features); fft: 5·n·log2 n;
    solver-like custom calls: n³ per matrix; everything else one flop per output element.
    Bytes are every operand and result once (no reuse, no caching).
    """
    if op in FREE_OPS:
        return 0.0, 0.0
    shapes_in = [s for t in operands if (s := tensor_shape(t))]
    shapes_out = [s for t in results if (s := tensor_shape(t))]
    moved = sum(_elements(dims) * bits / 8 for dims, bits in shapes_in + shapes_out)
    out = float(sum(_elements(dims) for dims, _ in shapes_out))
    if op == "stablehlo.dot_general" and shapes_in:
        m = _CONTRACTING.search(attributes.get("dot_dimension_numbers", ""))
        lhs = shapes_in[0][0]
        k = 1
        for d in (int(x) for x in m.group(1).split(",") if x.strip()) if m else ():
            k *= lhs[d] if d < len(lhs) else 1
        return dot_flops(out, k), moved
    if op == "stablehlo.convolution" and len(shapes_in) > 1:
        rhs = shapes_in[1][0]
        spec = _CONV_RHS.search(attributes.get("dimension_numbers", ""))
        labels = [x.strip() for x in spec.group(1).split(",")] if spec else []
        out_features = rhs[labels.index("o")] if "o" in labels and len(labels) == len(rhs) else 1
        return convolution_flops(out, rhs, out_features), moved
    if op == "stablehlo.fft":
        return fft_flops(out), moved
    if is_solver(target) and shapes_in and len(shapes_in[0][0]) >= 2:
        return solver_flops(shapes_in[0][0]), moved
    if op in ("stablehlo.reduce", "stablehlo.reduce_window"):
        return float(sum(_elements(dims) for dims, _ in shapes_in)), moved
    return out, moved
