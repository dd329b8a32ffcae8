"""TPU tiled layouts: the bytes an array takes in TPU memory, read from the compiler or modelled.

XLA's TPU compiler stores every array in tiles, and prints the layout it chose with the
array's type in the optimized HLO: ``f32[4096,100]{0,1:T(8,128)}`` is a float32 (4096, 100)
array with dimension 0 minor (the ``minor_to_major`` order ``0,1``), tiled (8, 128) over its
two most minor dimensions, so dimension 1 (100) pads to 104 rows of 4096 lanes:
1,703,936 bytes for 1,638,400 of data. Further tiles (``(2,1)``: two bfloat16 rows packed in
a 32-bit word), an element size (``E(4)``: int4) and a memory space (``S(1)``: VMEM) may
follow.

Two sources of a layout, one arithmetic (:attr:`TiledLayout.bytes`):

- :func:`read_layouts`: the layouts a compiled program prints (the compiled level);
- :func:`default_layout`: the layout the TPU compiler gives an array nothing constrains, the
  lowered level's model of it. Measured on deviceless libtpu compiles (libtpu 0.0.42.1 and
  0.0.52; TPU v4, v5e, v5p, v6e alike; ``benchmarks/fidelity/tpu_layouts.py``): the compiler
  orders the dimensions so that the two most minor ones pad least (the big dimension minor, a
  small one out of the tile), takes narrower tiles for few rows (``T(4,128)`` for 3 or 4,
  ``T(2,128)``, ``T(1,128)``), and among equal layouts keeps the program's order as far as it can.

Example::

    >>> layout = default_layout((4096, 100), "f32")
    >>> str(layout), layout.data_bytes, layout.bytes
    ('f32[4096,100]{0,1:T(8,128)}', 1638400, 1703936)
    >>> [str(x) for x in read_layouts("(bf16[8,64,64,3]{0,3,2,1:T(4,128)(2,1)S(1)}, u32[]{:S(2)})")]
    ['bf16[8,64,64,3]{0,3,2,1:T(4,128)(2,1)S(1)}', 'u32[]{:S(2)}']

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_jaxport.model.dtypes import element_bits, hlo_element

Tile = tuple[int | None, ...]
"""One tile of a layout, its dimensions major to minor; ``None``: a dimension left whole
(``*``)."""

LANES = 128
"""The lanes of a TPU vector register: every tiled array's minor dimension pads to them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TiledLayout:
    """One array as the TPU compiler lays it out: its HLO element type, logical dimensions,
    the order of its dimensions in memory and its tiles."""

    element: str
    """HLO element type (``f32``, ``bf16``, ``s8``, ``pred``, ``c64``)."""
    dims: tuple[int, ...]
    minor_to_major: tuple[int, ...]
    tiles: tuple[Tile, ...] = ()
    bits: int = 32
    """Bits per element in memory (``E(4)`` where printed, else the element type's)."""
    memory_space: int = 0
    """``S(n)``: 0 is HBM, 1 VMEM (where the compiler prefetched it)."""
    element_size: int = 0
    """The ``E(n)`` the layout prints (0: none)."""

    @property
    def tiled(self) -> bool:
        return bool(self.tiles)

    @property
    def data_bytes(self) -> int:
        """The array's bytes without padding."""
        return -(-math.prod(self.dims) * self.bits // 8)

    @property
    def physical_dims(self) -> tuple[int, ...]:
        """The dimensions in memory order (major to minor), each padded by the first tile:
        ``(104, 4096)`` for ``f32[4096,100]{0,1:T(8,128)}``."""
        shape = [self.dims[d] for d in reversed(self.minor_to_major)]
        if not self.tiles:
            return tuple(shape)
        head, counts, inner = _tile(shape, self.tiles[0])
        return (*head, *(c * i for c, i in zip(counts, inner, strict=True)))

    @property
    def bytes(self) -> int:
        """The bytes the array takes, padding included: each tile in turn splits the most
        minor dimensions of what the one before made, padding them to a multiple of its own
        (XLA's tiling; further tiles subdivide the first and pad nothing more in practice).

        >>> read_layouts("f32[8,64,64,3]{2,1,3,0:T(8,128)}")[0].bytes
        786432
        """
        shape = [self.dims[d] for d in reversed(self.minor_to_major)]
        for tile in self.tiles:
            head, counts, inner = _tile(shape, tile)
            shape = [*head, *counts, *inner]
        return -(-math.prod(shape) * self.bits // 8)

    @property
    def padding(self) -> int:
        """Bytes of padding (:attr:`bytes` less :attr:`data_bytes`)."""
        return self.bytes - self.data_bytes

    @property
    def layout_text(self) -> str:
        """``{0,1:T(8,128)}``: the layout as HLO prints it."""
        order = ",".join(map(str, self.minor_to_major))
        tiles = "".join(
            "(" + ",".join("*" if t is None else str(t) for t in tile) + ")" for tile in self.tiles
        )
        suffix = ("T" + tiles if tiles else "") + (
            f"E({self.element_size})" if self.element_size else ""
        )
        suffix += f"S({self.memory_space})" if self.memory_space else ""
        return "{" + order + (":" + suffix if suffix else "") + "}"

    def __str__(self) -> str:
        return f"{self.element}[{','.join(map(str, self.dims))}]{self.layout_text}"


def _tile(shape: list[int], tile: Tile) -> tuple[list[int], list[int], list[int]]:
    """``shape`` (major to minor) split by ``tile`` over its most minor dimensions: the
    dimensions it leaves, how many tiles each tiled dimension takes, and the tile (a shape of
    lower rank is taken as led by ones, as XLA does)."""
    shape = [1] * max(len(tile) - len(shape), 0) + shape
    split = len(shape) - len(tile)
    tail = shape[split:]
    counts = [1 if t is None else -(-d // t) for d, t in zip(tail, tile, strict=True)]
    inner = [d if t is None else t for d, t in zip(tail, tile, strict=True)]
    return shape[:split], counts, inner


_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,<=?]*)\](\{[^{}]*\})?")
_LAYOUT = re.compile(r"^\{([0-9,]*)(?::(.*))?\}$")
_PART = re.compile(r"([A-Z#]*)\(([^)]*)\)")
"""One part of a layout's suffix: ``T(8,128)``, a further tile ``(2,1)`` (no letter: it
continues the tiles), ``E(4)``, ``S(1)``."""


@functools.lru_cache(maxsize=16384)
def read_layouts(shape: str) -> tuple[TiledLayout, ...]:
    """Each array of an HLO shape as the compiled module prints it (a tuple shape gives
    several; tokens none), with its layout; an array printed without a layout reads as
    row-major and untiled. Dynamic dimensions (``<=8``) read as their bound."""
    layouts = []
    for element, dims_text, layout in _ARRAY.findall(shape):
        if element == "token":
            continue
        dims = tuple(int(d.removeprefix("<=")) for d in dims_text.split(",") if d.strip("<=?"))
        order = tuple(range(len(dims) - 1, -1, -1))
        tiles: list[Tile] = []
        size = 0
        space = 0
        found = _LAYOUT.match(layout) if layout else None
        if found is not None:
            if found.group(1):
                order = tuple(int(d) for d in found.group(1).split(","))
            kind = ""
            for letter, body in _PART.findall(found.group(2) or ""):
                kind = letter or kind
                if kind == "T":
                    tile = (None if t.strip() == "*" else int(t) for t in body.split(","))
                    tiles.append(tuple(tile))
                elif kind == "E" and body.isdigit():
                    size = int(body)
                elif kind == "S" and body.isdigit():
                    space = int(body)
        if sorted(order) != list(range(len(dims))):
            order = tuple(range(len(dims) - 1, -1, -1))  # a layout this reader does not know
            tiles = []
        bits = size or element_bits(element)
        layouts.append(
            TiledLayout(element=element, dims=dims, minor_to_major=order, tiles=tuple(tiles),
                        bits=bits, memory_space=space, element_size=size)
        )  # fmt: skip
    return tuple(layouts)


def _packing(bits: int) -> Tile:
    """The sub-tile that packs narrow elements into 32-bit words: ``(2,1)`` for 16-bit,
    ``(4,1)`` for 8-bit, ``(8,1)`` for 4-bit types; none for 32 bits and wider."""
    return (32 // bits, 1) if bits < 32 else ()


def _rows(bits: int, rows: int) -> int:
    """The rows of the tile the compiler takes for an array whose second-most-minor dimension
    is ``rows`` long (measured: ``benchmarks/results/tpu-layouts-*.json``)."""
    if bits <= 4:
        return 64 if rows % 64 == 0 else 8
    if bits <= 8:
        if rows <= 4:
            return 4
        return 32 if rows % 32 == 0 else 8
    floor = 2 if bits == 16 else 1
    for narrow in (floor, 2, 4):
        if rows <= narrow:
            return narrow
    return 8


def _descending(order: tuple[int, ...]) -> tuple[int, ...]:
    """A key that sorts the orders nearest row-major (``n-1, ..., 0`` minor to major) first."""
    return tuple(-d for d in order)


@functools.lru_cache(maxsize=16384)
def default_layout(dims: tuple[int, ...], element: str) -> TiledLayout:
    """The layout the TPU compiler gives an array of ``dims`` and HLO ``element`` type where
    nothing constrains it: every argument's and result's of a compiled program, and what the
    lowered level assumes of every array (see the module's docstring; rank 0 is left untiled).

    >>> str(default_layout((8, 64, 64, 3), "f32"))
    'f32[8,64,64,3]{2,1,3,0:T(8,128)}'
    >>> str(default_layout((1000, 1000), "bf16")), str(default_layout((1000,), "f32"))
    ('bf16[1000,1000]{1,0:T(8,128)(2,1)}', 'f32[1000]{0:T(1024)}')
    """
    bits = element_bits(element)
    rank = len(dims)
    size = 4 if bits == 4 else 0
    if rank == 0:
        return TiledLayout(element=element, dims=dims, minor_to_major=(), bits=bits)
    packing = _packing(bits)
    if rank == 1:
        smallest = LANES * max(32 // bits, 1)
        width = min(max(smallest, 1 << max(dims[0] - 1, 0).bit_length()), 1024)
        tiles: tuple[Tile, ...] = ((width,), (LANES,), packing) if packing else ((width,),)
        return TiledLayout(element=element, dims=dims, minor_to_major=(0,), tiles=tiles,
                           bits=bits, element_size=size)  # fmt: skip
    best: tuple[int, tuple[int, ...]] | None = None
    for minor in range(rank):
        for second in range(rank):
            if second == minor:
                continue
            rows = _rows(bits, dims[second])
            rest = tuple(d for d in range(rank - 1, -1, -1) if d not in (minor, second))
            order = (minor, second, *rest)
            padded = -(-dims[minor] // LANES) * LANES * -(-dims[second] // rows) * rows
            cost = padded * math.prod(dims[d] for d in rest)
            # the fewest bytes; among equals, the order nearest the program's (row-major)
            if best is None or (cost, _descending(order)) < (best[0], _descending(best[1])):
                best = (cost, order)
    assert best is not None
    order = best[1]
    tile: Tile = (_rows(bits, dims[order[1]]), LANES)
    return TiledLayout(element=element, dims=dims, minor_to_major=order,
                       tiles=(tile, packing) if packing else (tile,), bits=bits,
                       element_size=size)  # fmt: skip


def tile_padding(dims: Sequence[int], element: str) -> tuple[int, int] | None:
    """``(data bytes, bytes in tiles)`` of an array of StableHLO ``element`` type in the layout
    the TPU compiler gives it where nothing constrains it
    (:func:`default_layout`), or ``None`` for a scalar (untiled
    here) or a dynamic shape.

    A ``(1024, 100)`` float32 array pads 100 to 104 rows of 1024 lanes, 425,984 bytes for
    409,600 of data, where padding its minor dimension to 128 lanes would take 524,288:

    >>> tile_padding((1024, 100), "f32")
    (409600, 425984)
    >>> tile_padding((8, 64, 64, 3), "f32")  # the channels out of the tile: 2x, not 42x
    (393216, 786432)
    """
    if not dims:
        return None
    layout = default_layout(tuple(dims), hlo_element(element))
    return layout.data_bytes, layout.bytes
