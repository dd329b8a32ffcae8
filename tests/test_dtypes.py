"""pytest_jaxport.model.dtypes: one table of element types, read by StableHLO, HLO and JAX name."""

from __future__ import annotations

import pytest

from pytest_jaxport.model.dtypes import (
    DTYPE_NAMES,
    ELEMENT_TYPES,
    FLOAT8,
    dtype_name,
    element_bits,
    hlo_element,
    jax_name,
)


@pytest.mark.parametrize("element", ELEMENT_TYPES, ids=lambda e: e.jax)
def test_each_name_of_an_element_type_gives_its_bits_and_its_other_names(element) -> None:
    assert element_bits(element.stablehlo) == element_bits(element.hlo) == element.bits
    assert hlo_element(element.stablehlo) == element.hlo
    assert dtype_name(element.stablehlo) == jax_name(element.hlo) == element.jax


def test_the_table_names_each_type_once_in_every_scheme() -> None:
    for scheme in ("stablehlo", "hlo", "jax"):
        names = [getattr(e, scheme) for e in ELEMENT_TYPES]
        assert len(names) == len(set(names)), scheme
    # where StableHLO and HLO share a name, it is one type
    shared = {e.stablehlo for e in ELEMENT_TYPES} & {e.hlo for e in ELEMENT_TYPES}
    assert shared == {"f16", "bf16", "f32", "f64"}
    assert {
        e.stablehlo for e in ELEMENT_TYPES if e.bits == 8 and e.jax.startswith("float8")
    } >= FLOAT8
    assert set(DTYPE_NAMES.values()) == {e.jax for e in ELEMENT_TYPES}


@pytest.mark.parametrize(
    ("element", "bits"),
    [
        ("f8E4M3FNUZ", 8),  # in the table
        ("f8e4m3fnuz", 8),
        ("f8E9M9", 8),  # a float8 type the table does not know yet
        ("f8e9m9", 8),
        ("si8", 8),  # a width its name says
        ("ui1", 1),
        ("token", 32),  # anything else
        ("index", 32),
    ],
)
def test_a_type_outside_the_table_takes_the_width_its_name_says(element: str, bits: int) -> None:
    assert element_bits(element) == bits


def test_names_outside_the_table_pass_through() -> None:
    assert dtype_name("index") == "index"
    assert hlo_element("f8E9M9") == "f8e9m9"
    assert jax_name("f8e9m9") == "float8_e9m9"
    assert jax_name("token") == "token"
