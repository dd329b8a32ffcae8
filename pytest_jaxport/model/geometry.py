"""The shapes matrix units and convolution kernels see: the share of a matrix unit that a
product's dimensions leave idle, and a convolution's dimension order against the layout a
target's kernels take (what the target relays out).

Example::

    >>> matrix_unit_waste(4096, 100, 128, k_unit=128, n_unit=128)
    0.21875
    >>> nchw = convolution_labels("#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>")
    >>> convolution_relayout(nchw, "b01f/o01i")
    ('input', 'kernel', 'output')

The bytes TPU tiles take are :mod:`pytest_jaxport.model.tiling`'s. Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re


def padded_to(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple`` (``padded_to(100, 128)`` is 128)."""
    return -(-value // multiple) * multiple


def matrix_unit_waste(
    m: int, k: int, n: int, *, k_unit: int, n_unit: int, m_unit: int = 1
) -> float:
    """The fraction of a matrix unit's multiply-adds that a ``(m, k) x (k, n)`` product
    leaves idle when each dimension is padded to its unit.

    A TPU MXU holds a ``k_unit x n_unit`` block of the weights and streams rows through it
    (``m_unit = 1``): ``(4096, 100) x (100, 128)`` on a 128x128 MXU uses 100 of 128 rows:

    >>> matrix_unit_waste(4096, 100, 128, k_unit=128, n_unit=128)
    0.21875
    """
    padded = padded_to(m, m_unit) * padded_to(k, k_unit) * padded_to(n, n_unit)
    if padded == 0:
        return 0.0
    return 1.0 - (m * k * n) / padded


_CONV_LABELS = re.compile(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]")


def convolution_labels(
    attribute: str,
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None:
    """A convolution's ``dimension_numbers`` as ``(input, kernel, output)`` labels per
    logical dimension (``b``/``f``, ``i``/``o``, spatial ``0``, ``1``...), or ``None`` for
    the raw form this reader does not parse.

    >>> convolution_labels("#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>")[0]
    ('b', 'f', '0', '1')
    """
    found = _CONV_LABELS.search(attribute)
    if found is None:
        return None
    parts = tuple(
        tuple(x.strip() for x in group.split(",") if x.strip()) for group in found.groups()
    )
    return parts[0], parts[1], parts[2]


def _wanted(layout: str, rank: int) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """A rule's ``input/kernel`` layout expanded to ``rank`` dimensions (``b01f`` -> ``b``,
    the spatial dimensions in order, ``f``)."""
    spatial = tuple(str(i) for i in range(rank - 2))

    def expand(text: str) -> tuple[str, ...]:
        out: list[str] = []
        for char in text:
            if char == "0":
                out.extend(spatial)
            elif not char.isdigit():
                out.append(char)
        return tuple(out)

    data, _, kernel = layout.partition("/")
    return expand(data), (expand(kernel) if kernel else None)


def convolution_relayout(labels: tuple[tuple[str, ...], ...], layout: str) -> tuple[str, ...]:
    """Which of a convolution's ``input``, ``kernel``, ``output`` the target relays out: those
    whose logical dimension order (a row-major array's physical order) differs from the
    rule's ``layout``.

    >>> nchw = convolution_labels("#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>")
    >>> convolution_relayout(nchw, "b01f/o01i")
    ('input', 'kernel', 'output')
    >>> convolution_relayout(nchw, "bf01/oi01")
    ()
    """
    source, kernel, result = labels
    wanted_data, wanted_kernel = _wanted(layout, len(source))
    moved = []
    if source != wanted_data:
        moved.append("input")
    if wanted_kernel is not None and kernel != wanted_kernel:
        moved.append("kernel")
    if result != wanted_data:
        moved.append("output")
    return tuple(moved)
