"""Element types: what StableHLO, HLO and JAX call each one, and its bits, in one table.

A lowered program names its element types as StableHLO does (``f8E4M3FN``, ``i8``,
``complex<f32>``), a compiled one as HLO does (``f8e4m3fn``, ``s8``, ``c64``), and findings,
budgets (``forbid_formats``) and tolerances by the name JAX and NumPy give them
(``float8_e4m3fn``, ``int8``, ``complex64``). :data:`ELEMENT_TYPES` holds the three names and
the bits of each, once; the lookups below read it.

Example::

    >>> dtype_name("f8E4M3FN"), hlo_element("i8"), jax_name("c64")
    ('float8_e4m3fn', 's8', 'complex64')
    >>> element_bits("ui4"), element_bits("u4"), element_bits("complex<f64>")
    (4, 4, 128)

Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ElementType:
    """One element type, by the names StableHLO, HLO and JAX give it, and its bits in memory."""

    stablehlo: str
    hlo: str
    jax: str
    bits: int


def _element(stablehlo: str, hlo: str, jax: str, bits: int) -> ElementType:
    return ElementType(stablehlo=stablehlo, hlo=hlo, jax=jax, bits=bits)


ELEMENT_TYPES: tuple[ElementType, ...] = (
    _element("i1", "pred", "bool", 8),
    _element("i2", "s2", "int2", 2),
    _element("i4", "s4", "int4", 4),
    _element("i8", "s8", "int8", 8),
    _element("i16", "s16", "int16", 16),
    _element("i32", "s32", "int32", 32),
    _element("i64", "s64", "int64", 64),
    _element("ui2", "u2", "uint2", 2),
    _element("ui4", "u4", "uint4", 4),
    _element("ui8", "u8", "uint8", 8),
    _element("ui16", "u16", "uint16", 16),
    _element("ui32", "u32", "uint32", 32),
    _element("ui64", "u64", "uint64", 64),
    _element("f4E2M1FN", "f4e2m1fn", "float4_e2m1fn", 4),
    _element("f8E3M4", "f8e3m4", "float8_e3m4", 8),
    _element("f8E4M3", "f8e4m3", "float8_e4m3", 8),
    _element("f8E4M3B11FNUZ", "f8e4m3b11fnuz", "float8_e4m3b11fnuz", 8),
    _element("f8E4M3FN", "f8e4m3fn", "float8_e4m3fn", 8),
    _element("f8E4M3FNUZ", "f8e4m3fnuz", "float8_e4m3fnuz", 8),
    _element("f8E5M2", "f8e5m2", "float8_e5m2", 8),
    _element("f8E5M2FNUZ", "f8e5m2fnuz", "float8_e5m2fnuz", 8),
    _element("f8E8M0FNU", "f8e8m0fnu", "float8_e8m0fnu", 8),
    _element("bf16", "bf16", "bfloat16", 16),
    _element("f16", "f16", "float16", 16),
    _element("f32", "f32", "float32", 32),
    _element("f64", "f64", "float64", 64),
    _element("complex<f32>", "c64", "complex64", 64),
    _element("complex<f64>", "c128", "complex128", 128),
)
"""Every element type JAX has, in the order a configuration's errors list them (the dtypes
``[tool.jaxport.tolerance.<dtype>]`` takes). A float8 type's HLO name is its StableHLO name
lower-cased; a boolean takes a byte."""

DTYPE_NAMES: Mapping[str, str] = {e.stablehlo: e.jax for e in ELEMENT_TYPES}
"""StableHLO element types by the name JAX and NumPy give them (``jnp.float8_e4m3fn``): what
findings, budgets (``forbid_formats``) and reports call a format."""

_BY_HLO: Mapping[str, ElementType] = {e.hlo: e for e in ELEMENT_TYPES}
_HLO_NAMES: Mapping[str, str] = {e.stablehlo: e.hlo for e in ELEMENT_TYPES}
_BITS: Mapping[str, int] = {
    **{e.stablehlo: e.bits for e in ELEMENT_TYPES},
    **{e.hlo: e.bits for e in ELEMENT_TYPES},
}
"""Bits by either name: StableHLO and HLO never name two types alike (where a name is both,
``f32``, ``bf16``, it is one type)."""
_WIDTH = re.compile(r"(?:f|i|ui|si)(\d+)")

OCP_FLOAT8 = frozenset({"f8E4M3FN", "f8E5M2"})
"""The OCP FP8 formats (NVIDIA Ada/Hopper/Blackwell, AMD MI350)."""
FNUZ_FLOAT8 = frozenset({"f8E4M3FNUZ", "f8E5M2FNUZ"})
"""AMD CDNA3's FP8 formats (MI300): one NaN, no negative zero, exponent bias one higher."""
FLOAT8 = frozenset({*OCP_FLOAT8, *FNUZ_FLOAT8, "f8E4M3B11FNUZ", "f8E4M3", "f8E3M4"})
"""Every 8-bit float JAX has (``float8_e8m0fnu``, a scale type, is not among them)."""
INT4 = frozenset({"i4", "ui4"})


def element_bits(element: str) -> int:
    """Bits per element of an element type, by its StableHLO name (``f8E4M3FN``, ``i8``,
    ``complex<f32>``) or its HLO name (``f8e4m3fn``, ``s8``, ``c64``): a float8 type not in
    the table is 8 bits, another integer or float type the width its name says (``si8``),
    anything else 32.

    >>> element_bits("f8E4M3FN"), element_bits("f8e5m2"), element_bits("pred"), element_bits("i1")
    (8, 8, 8, 8)
    """
    if element in _BITS:
        return _BITS[element]
    if element.startswith("f8"):
        return 8
    found = _WIDTH.fullmatch(element)
    return int(found.group(1)) if found else 32


def dtype_name(element: str) -> str:
    """The JAX name of a StableHLO element type (``f8E4M3FN`` -> ``float8_e4m3fn``)."""
    return DTYPE_NAMES.get(element, element)


def hlo_element(stablehlo: str) -> str:
    """The HLO name of a StableHLO element type (``i8`` -> ``s8``, ``f8E4M3FN`` -> ``f8e4m3fn``)."""
    fallback = stablehlo.lower() if stablehlo.startswith("f8") else stablehlo
    return _HLO_NAMES.get(stablehlo, fallback)


def jax_name(element: str) -> str:
    """The name JAX gives an HLO element type (``s8`` -> ``int8``, ``f8e4m3fn`` ->
    ``float8_e4m3fn``)."""
    known = _BY_HLO.get(element)
    if known is not None:
        return known.jax
    if element.startswith("f8"):
        return "float8_" + element[2:]
    return element
