"""Unit tests for pytest_jaxport.model.numerics: numpy arrays only, no JAX, no devices."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_jaxport.model.compare import Leaf, Outputs, compare
from pytest_jaxport.model.numerics import (
    DEFAULT_TOLERANCES,
    Comparison,
    LeafMismatch,
    Tolerance,
    default_tolerance,
    describe,
)

STRUCTURE = "PyTreeDef({'x': *})"


def single(array: object, path: str = "['x']", structure: str = STRUCTURE) -> Outputs:
    return Outputs(structure=structure, leaves=(Leaf(path=path, array=np.asarray(array)),))


def many(**arrays: object) -> Outputs:
    leaves = tuple(Leaf(path=f"['{k}']", array=np.asarray(v)) for k, v in arrays.items())
    structure = "PyTreeDef({" + ", ".join(f"'{k}': *" for k in arrays) + "})"
    return Outputs(structure=structure, leaves=leaves)


def run(
    ref: Outputs,
    cand: Outputs,
    tolerance: Callable[[str], Tolerance] = default_tolerance,
) -> Comparison:
    return compare(ref, cand, reference_platform="cpu", platform="cuda", tolerance=tolerance)


def fixed(rtol: float, atol: float) -> Callable[[str], Tolerance]:
    return lambda _dtype: Tolerance(rtol=rtol, atol=atol)


def only(comparison: Comparison) -> LeafMismatch:
    assert len(comparison.mismatches) == 1, comparison.mismatches
    return comparison.mismatches[0]


# --- default tolerances --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("bool", 0.0),
        ("int8", 0.0),
        ("int64", 0.0),
        ("uint32", 0.0),
        ("int4", 0.0),
        ("uint2", 0.0),
        ("float8_e4m3fn", 1e-1),
        ("float8_e5m2", 1e-1),
        ("float8_e4m3b11fnuz", 1e-1),
        ("float8_e8m0fnu", 1e0),
        ("float4_e2m1fn", 1e0),
        ("bfloat16", 1e-2),
        ("float16", 1e-3),
        ("float32", 1e-6),
        ("complex64", 1e-6),
        ("float64", 1e-15),
        ("complex128", 1e-15),
    ],
)
def test_defaults_follow_jax_test_tolerances(name: str, value: float) -> None:
    assert DEFAULT_TOLERANCES[name] == Tolerance(rtol=value, atol=value)
    assert default_tolerance(name) == Tolerance(rtol=value, atol=value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("float8_e3m5fnuz", 1e-1),  # a float8 variant newer than the table
        ("float8_e8m0xyz", 1e0),
        ("float4_e1m2fn", 1e0),
        ("float6_e2m3fn", 1e-1),
        ("float128", 1e-15),
        ("complex256", 1e-15),
        ("int128", 0.0),
        ("uint1", 0.0),
        ("str128", 0.0),
        ("object", 0.0),
    ],
)
def test_default_tolerance_for_unknown_names(name: str, value: float) -> None:
    assert name not in DEFAULT_TOLERANCES or name == "uint1"
    assert default_tolerance(name) == Tolerance(rtol=value, atol=value)


def test_table_is_keyed_by_real_numpy_dtype_names() -> None:
    for attr in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn"):
        assert np.dtype(getattr(ml_dtypes, attr)).name in DEFAULT_TOLERANCES
    for dtype in (np.bool_, np.int16, np.uint64, np.float16, np.complex64):
        assert np.dtype(dtype).name in DEFAULT_TOLERANCES


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        DEFAULT_TOLERANCES["float32"] = Tolerance(rtol=1, atol=1)  # type: ignore[index]


@pytest.mark.parametrize("bad", [-1e-6, math.nan])
def test_tolerance_rejects_negative_and_nan(bad: float) -> None:
    with pytest.raises(ValueError, match="rtol must be >= 0"):
        Tolerance(rtol=bad, atol=0.0)
    with pytest.raises(ValueError, match="atol must be >= 0"):
        Tolerance(rtol=0.0, atol=bad)


# --- passing comparisons ------------------------------------------------------------------


def test_identical_outputs_pass_and_describe_says_so() -> None:
    ref = many(a=np.arange(6, dtype=np.float32), b=np.int32(3), c=np.array([True, False]))
    result = run(ref, ref)
    assert result.ok
    assert result.leaves == 3
    assert result.max_abs_err == 0.0
    assert result.max_rel_err == 0.0
    assert (
        describe(result) == "cuda vs cpu: 3 leaves match (max abs err 0.0e+00, max rel err 0.0e+00)"
    )


def test_within_tolerance_passes_and_reports_max_errors_over_all_leaves() -> None:
    ref = many(a=np.array([1.0, 2.0], np.float32), b=np.array([4.0], np.float32))
    cand = many(a=np.array([1.0, 2.000001], np.float32), b=np.array([4.000002], np.float32))
    result = run(ref, cand, fixed(1e-5, 0.0))
    assert result.ok
    errors = [float(np.float32(4.000002)) - 4.0, float(np.float32(2.000001)) - 2.0]
    assert result.max_abs_err == max(errors)
    assert result.max_rel_err == max(errors[0] / 4.0, errors[1] / 2.0)
    assert describe(result) == (
        "cuda vs cpu: 2 leaves match (max abs err 1.9e-06, max rel err 4.8e-07)"
    )


def test_single_leaf_wording() -> None:
    assert describe(run(single([1.0]), single([1.0]))).startswith("cuda vs cpu: 1 leaf matches")


def test_zero_size_arrays_match() -> None:
    empty = np.zeros((0, 3), np.float32)
    result = run(single(empty), single(empty.copy()))
    assert result.ok
    assert result.max_abs_err == 0.0


def test_zero_size_arrays_of_different_shapes_differ() -> None:
    result = run(single(np.zeros((0, 3))), single(np.zeros((3, 0))))
    assert only(result).reason == "shape"


def test_nan_in_the_same_places_passes_and_is_left_out_of_statistics() -> None:
    ref = np.array([np.nan, 1.0, np.inf, -np.inf], np.float32)
    cand = np.array([np.nan, 1.0, np.inf, -np.inf], np.float32)
    result = run(single(ref), single(cand))
    assert result.ok
    assert result.max_abs_err == 0.0
    assert not math.isnan(result.max_rel_err)


def test_nan_payload_and_sign_do_not_matter() -> None:
    ref = np.array([np.nan], np.float64)
    cand = -np.array([np.nan], np.float64)
    assert run(single(ref), single(cand)).ok


# --- tolerance failures --------------------------------------------------------------------


def test_tolerance_message_matches_the_documented_format() -> None:
    ref = np.ones((8, 8), np.float32)
    cand = ref.copy()
    cand[2, 5] = 1.0001
    cand[0, 1] = 1.00001
    cand[7, 7] = 1.00002
    result = run(single(ref), single(cand))
    mismatch = only(result)
    assert mismatch.reason == "tolerance"
    assert mismatch.path == "['x']"
    assert mismatch.index == (2, 5)
    assert mismatch.tolerance == Tolerance(rtol=1e-6, atol=1e-6)
    assert mismatch.abs_err == pytest.approx(1e-4, rel=1e-3)
    assert mismatch.rel_err == pytest.approx(1e-4, rel=1e-3)
    assert mismatch.message == (
        "['x']: 3 of 64 elements differ beyond rtol=1e-06, atol=1e-06 (float32);"
        " furthest beyond the tolerance at index (2, 5): cpu=1.0 cuda=1.0001, abs err 1.0e-04,"
        " rel err 1.0e-04"
    )
    assert "\n" not in mismatch.message
    assert not result.ok
    assert describe(result) == "cuda vs cpu: 1 of 1 leaves differ\n  " + mismatch.message


def test_worst_element_is_the_one_furthest_beyond_its_allowance() -> None:
    # Element 0 has the larger abs error (0.5) but is only 0.1 beyond its allowance (0.4);
    # element 1 (reference 0) is 0.45 beyond.
    result = run(single([1000.0, 0.0]), single([1000.5, 0.45]), fixed(4e-4, 0.0))
    mismatch = only(result)
    assert mismatch.index == (1,)
    assert mismatch.abs_err == pytest.approx(0.45)
    assert mismatch.rel_err == math.inf
    assert "2 of 2 elements" in mismatch.message
    assert "rel err inf (reference is 0)" in mismatch.message
    assert result.max_abs_err == pytest.approx(0.5)
    assert result.max_rel_err == pytest.approx(0.5 / 1000.0)  # only where the reference != 0


def test_zero_dimensional_arrays() -> None:
    assert run(single(np.float32(2.0)), single(np.float32(2.0))).ok
    mismatch = only(run(single(np.float32(2.0)), single(np.float32(3.0))))
    assert mismatch.index == ()
    assert "1 of 1 elements" in mismatch.message
    assert "furthest beyond the tolerance at index (): cpu=2.0 cuda=3.0" in mismatch.message


def test_root_path_is_shown_as_root() -> None:
    mismatch = only(run(single([1.0], path=""), single([2.0], path="")))
    assert mismatch.path == ""
    assert mismatch.message.startswith("<root>: 1 of 1 elements")


def test_tolerance_callable_gets_the_dtype_name() -> None:
    seen: list[str] = []

    def tolerance(dtype: str) -> Tolerance:
        seen.append(dtype)
        return Tolerance(rtol=0.5, atol=0.0)

    ref = many(a=np.array([1.0], np.float16), b=np.array([2.0], ml_dtypes.bfloat16))
    cand = many(a=np.array([1.4], np.float16), b=np.array([2.5], ml_dtypes.bfloat16))
    assert run(ref, cand, tolerance).ok
    assert seen == ["float16", "bfloat16"]


# --- narrow floats, complex, integers, bools ----------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "close", "far"),
    [
        (ml_dtypes.bfloat16, 1.0078125, 1.0625),  # one bfloat16 ulp passes, 6% fails
        (ml_dtypes.float8_e4m3fn, 1.125, 1.5),  # float8 tolerance is 0.1 + 0.1 * |x|
    ],
)
def test_narrow_floats(dtype: type, close: float, far: float) -> None:
    name = np.dtype(dtype).name
    ref = single(np.array([1.0, 2.0], dtype))
    assert run(ref, single(np.array([close, 2.0], dtype))).ok
    mismatch = only(run(ref, single(np.array([far, 2.0], dtype))))
    assert mismatch.reason == "tolerance"
    assert mismatch.index == (0,)
    assert f"({name});" in mismatch.message
    assert mismatch.tolerance == DEFAULT_TOLERANCES[name]
    assert mismatch.abs_err == pytest.approx(far - 1.0)


def test_float8_nan_placement() -> None:
    dtype = ml_dtypes.float8_e4m3fn
    mismatch = only(
        run(single(np.array([1.0, np.nan], dtype)), single(np.array([1.0, 2.0], dtype)))
    )
    assert mismatch.reason == "nonfinite"
    assert mismatch.index == (1,)
    assert "(float8_e4m3fn)" in mismatch.message


def test_complex_compares_the_modulus_of_the_difference() -> None:
    ref = np.array([1 + 1j, 2 - 2j], np.complex64)
    cand = np.array([1 + 1j, 2 - 2.1j], np.complex64)
    mismatch = only(run(single(ref), single(cand)))
    assert mismatch.reason == "tolerance"
    assert mismatch.index == (1,)
    assert mismatch.abs_err == pytest.approx(0.1, rel=1e-5)
    assert mismatch.rel_err == pytest.approx(0.1 / abs(2 - 2j), rel=1e-5)
    assert "(complex64)" in mismatch.message
    assert "cpu=(2-2j) cuda=(2-2.1j)" in mismatch.message
    assert run(single(ref), single(ref.copy())).ok


def test_complex_nonfinite_placement_is_per_component() -> None:
    ref = np.array([complex(1, np.nan)], np.complex128)
    assert run(single(ref), single(ref.copy())).ok
    mismatch = only(run(single(ref), single(np.array([complex(np.nan, 1)], np.complex128))))
    assert mismatch.reason == "nonfinite"


def test_integers_are_exact_by_default() -> None:
    ref = np.arange(10, dtype=np.int32)
    cand = ref.copy()
    cand[7] += 1
    mismatch = only(run(single(ref), single(cand)))
    assert mismatch.reason == "tolerance"
    assert mismatch.index == (7,)
    assert mismatch.abs_err == 1.0
    assert mismatch.tolerance == Tolerance(rtol=0.0, atol=0.0)
    assert "beyond rtol=0, atol=0 (int32)" in mismatch.message
    assert "cpu=7 cuda=8" in mismatch.message


def test_integer_tolerance_is_honoured_when_nonzero() -> None:
    ref, cand = single(np.array([100], np.int32)), single(np.array([101], np.int32))
    assert run(ref, cand, fixed(0.02, 0.0)).ok
    assert not run(ref, cand, fixed(0.005, 0.0)).ok


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.uint8, np.int8])
def test_integer_extremes_do_not_overflow(dtype: type[np.integer[Any]]) -> None:
    info = np.iinfo(dtype)
    ref = np.array([info.min, info.max], dtype)
    cand = np.array([info.max, info.max], dtype)
    with np.errstate(all="raise"):
        mismatch = only(run(single(ref), single(cand)))
    assert mismatch.index == (0,)
    assert mismatch.abs_err == float(int(info.max) - int(info.min))


def test_int4_from_ml_dtypes() -> None:
    ref = np.array([-8, 7], ml_dtypes.int4)
    mismatch = only(run(single(ref), single(np.array([-8, 6], ml_dtypes.int4))))
    assert mismatch.index == (1,)
    assert "(int4)" in mismatch.message
    assert mismatch.abs_err == 1.0


def test_bools_are_exact() -> None:
    ref = np.array([[True, False], [False, True]])
    cand = np.array([[True, False], [True, True]])
    mismatch = only(run(single(ref), single(cand)))
    assert mismatch.index == (1, 0)
    assert "(bool)" in mismatch.message
    assert "cpu=False cuda=True" in mismatch.message
    assert run(single(ref), single(ref.copy())).ok


def test_dtypes_without_arithmetic_are_compared_exactly() -> None:
    float0 = np.dtype([("float0", np.void, 0)])  # what JAX gives for gradients of ints
    assert run(single(np.zeros(3, float0)), single(np.zeros(3, float0))).ok
    mismatch = only(run(single(np.array(["a", "b"])), single(np.array(["a", "c"]))))
    assert mismatch.reason == "tolerance"
    assert mismatch.index == (1,)
    assert "compared exactly" in mismatch.message


# --- nonfinite ------------------------------------------------------------------------------


def test_nan_in_different_places() -> None:
    ref = np.array([[1.0, np.nan], [3.0, 4.0]], np.float32)
    cand = np.array([[1.0, 2.0], [np.nan, np.nan]], np.float32)
    mismatch = only(run(single(ref), single(cand)))
    assert mismatch.reason == "nonfinite"
    assert mismatch.index == (0, 1)
    assert mismatch.message == (
        "['x']: 3 of 4 elements differ in NaN/Inf placement (float32);"
        " first at index (0, 1): cpu=nan cuda=2.0"
    )


@pytest.mark.parametrize(
    ("ref", "cand"), [(np.inf, -np.inf), (np.inf, 1e30), (-np.inf, np.nan), (1.0, np.inf)]
)
def test_infinities_must_match_in_place_and_sign(ref: float, cand: float) -> None:
    mismatch = only(run(single([0.0, ref]), single([0.0, cand])))
    assert mismatch.reason == "nonfinite"
    assert mismatch.index == (1,)
    assert "1 of 2 elements differ in NaN/Inf placement (float64)" in mismatch.message


def test_nonfinite_message_also_counts_finite_failures() -> None:
    result = run(single([np.nan, 1.0, 1.0]), single([0.0, 2.0, 1.0]))
    mismatch = only(result)
    assert mismatch.reason == "nonfinite"
    assert "; also 1 finite elements differ beyond rtol=1e-15, atol=1e-15" in mismatch.message
    assert result.max_abs_err == 1.0  # the NaN position is left out, the finite one counts


# --- shape, dtype, structure --------------------------------------------------------------


def test_shape_mismatch_does_not_compare_values() -> None:
    result = run(single(np.zeros((2, 3))), single(np.ones((3, 2)) * 1e9))
    mismatch = only(result)
    assert mismatch.reason == "shape"
    assert mismatch.message == "['x']: shape differs: cpu=(2, 3) cuda=(3, 2)"
    assert mismatch.index is None
    assert result.max_abs_err == 0.0


def test_dtype_mismatch_does_not_compare_values() -> None:
    result = run(single(np.zeros(2, np.float32)), single(np.full(2, 9.0, ml_dtypes.bfloat16)))
    mismatch = only(result)
    assert mismatch.reason == "dtype"
    assert mismatch.message == "['x']: dtype differs: cpu=float32 cuda=bfloat16"
    assert result.max_abs_err == 0.0


def test_structure_text_differs_with_the_same_paths() -> None:
    ref = single([1.0], structure="PyTreeDef({'x': *})")
    cand = single([1.0], structure="PyTreeDef(CustomNode(Foo[('x',)], [*]))")
    mismatch = only(run(ref, cand))
    assert mismatch.reason == "structure"
    assert mismatch.path == ""
    assert "cpu=PyTreeDef({'x': *}) (1 leaves)" in mismatch.message
    assert "cuda=PyTreeDef(CustomNode(Foo[('x',)], [*])) (1 leaves)" in mismatch.message
    assert "only on" not in mismatch.message


def test_structure_differs_and_common_leaves_are_still_compared() -> None:
    ref = many(a=[1.0], b=[2.0])
    cand = many(a=[5.0], c=[2.0], d=[0.0])
    result = run(ref, cand)
    assert [m.reason for m in result.mismatches] == ["structure", "tolerance"]
    structure, leaf = result.mismatches
    assert "only on cpu: ['b']" in structure.message
    assert "only on cuda: ['c'], ['d']" in structure.message
    assert "(2 leaves)" in structure.message
    assert "(3 leaves)" in structure.message
    assert leaf.path == "['a']"
    assert result.leaves == 2
    text = describe(result)
    assert text.splitlines()[0] == "cuda vs cpu: pytree structure differs, 1 of 2 leaves differ"
    assert text.splitlines()[1:] == [f"  {structure.message}", f"  {leaf.message}"]


def test_leaf_order_differs() -> None:
    ref = Outputs(
        structure="S",
        leaves=(Leaf(path="[0]", array=np.zeros(1)), Leaf(path="[1]", array=np.ones(1))),
    )
    cand = Outputs(structure="S", leaves=tuple(reversed(ref.leaves)))
    result = run(ref, cand)
    assert only(result).reason == "structure"  # paired by path, so the values still match


def test_structure_newlines_stay_on_one_line() -> None:
    mismatch = only(run(single([1.0], structure="A\nB"), single([1.0], structure="C")))
    assert "\n" not in mismatch.message
    assert "A\\nB" in mismatch.message


def test_describe_counts_each_leaf_once() -> None:
    result = run(many(a=[1.0], b=[2.0], c=[3.0]), many(a=[1.5], b=[2.0], c=[np.nan]))
    assert describe(result).splitlines()[0] == "cuda vs cpu: 2 of 3 leaves differ"
    assert len(describe(result).splitlines()) == 3


# --- JSON round trip ----------------------------------------------------------------------


def test_comparison_round_trips_through_json() -> None:
    result = run(
        many(a=[1000.0, 0.0], b=np.zeros(2), c=[np.nan]),
        many(a=[1000.5, 0.45], b=np.zeros(3), c=[1.0]),
        fixed(4e-4, 0.0),
    )
    assert {m.reason for m in result.mismatches} == {"tolerance", "shape", "nonfinite"}
    data = result.to_dict()
    text = json.dumps(data, allow_nan=False)  # plain JSON: no NaN/Infinity literals
    loaded = json.loads(text)
    assert loaded["ok"] is False
    assert loaded["mismatches"][0]["rel_err"] == "inf"
    assert loaded["mismatches"][0]["index"] == [1]
    assert loaded["mismatches"][0]["tolerance"] == {"rtol": 4e-4, "atol": 0.0}
    assert Comparison.from_dict(loaded) == result
    for mismatch in result.mismatches:
        assert LeafMismatch.from_dict(json.loads(json.dumps(mismatch.to_dict()))) == mismatch


def test_round_trip_of_infinite_tolerance_and_a_passing_comparison() -> None:
    mismatch = LeafMismatch(
        path="[0]",
        reason="tolerance",
        message="m",
        index=(),
        abs_err=math.inf,
        rel_err=math.inf,
        tolerance=Tolerance(rtol=math.inf, atol=0.0),
    )
    assert mismatch.to_dict()["tolerance"] == {"rtol": "inf", "atol": 0.0}
    assert LeafMismatch.from_dict(mismatch.to_dict()) == mismatch
    passing = run(single([1.0]), single([1.0]))
    assert passing.to_dict()["mismatches"] == []
    assert Comparison.from_dict(json.loads(json.dumps(passing.to_dict()))) == passing


def test_from_dict_rejects_an_unknown_reason() -> None:
    data = LeafMismatch(path="", reason="shape", message="m").to_dict()
    data["reason"] = "vibes"
    with pytest.raises(ValueError, match="unknown mismatch reason 'vibes'"):
        LeafMismatch.from_dict(data)


# --- properties ---------------------------------------------------------------------------

_DTYPES = st.sampled_from(
    [
        np.dtype(np.float16),
        np.dtype(np.float32),
        np.dtype(np.float64),
        np.dtype(np.complex64),
        np.dtype(np.complex128),
        np.dtype(np.int32),
        np.dtype(np.uint8),
        np.dtype(np.bool_),
        np.dtype(ml_dtypes.bfloat16),
        np.dtype(ml_dtypes.float8_e4m3fn),
    ]
)
_SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)


@st.composite
def any_array(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(_DTYPES)
    shape = draw(_SHAPES)
    if dtype.kind in "biufc":
        return draw(hnp.arrays(dtype, shape))  # includes NaN and +-Inf for floats
    # ml_dtypes: draw float32 (NaN/Inf included) and round.
    return draw(hnp.arrays(np.float32, shape)).astype(dtype)


@given(any_array())
def test_property_identical_inputs_always_pass(array: np.ndarray) -> None:
    result = run(single(array), single(array.copy()))
    assert result.ok, describe(result)
    assert result.max_abs_err == 0.0


_FINITE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def pair_of_arrays(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=4))
    a = draw(hnp.arrays(np.float64, shape, elements=_FINITE))
    b = draw(hnp.arrays(np.float64, shape, elements=_FINITE))
    # Mix in near-equal elements so both outcomes occur.
    near = draw(hnp.arrays(np.bool_, shape))
    return a, np.where(near, a + draw(st.floats(-1e-3, 1e-3)), b)


@given(pair_of_arrays(), st.floats(0.0, 1.0))
def test_property_symmetric_when_rtol_is_zero(
    arrays: tuple[np.ndarray, np.ndarray], atol: float
) -> None:
    a, b = arrays
    tolerance = fixed(0.0, atol)
    forward = run(single(a), single(b), tolerance)
    backward = run(single(b), single(a), tolerance)
    assert forward.ok == backward.ok
    assert forward.max_abs_err == backward.max_abs_err


_TOL = st.floats(1e-8, 1e-2)


@st.composite
def perturbed(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...], float, float]:
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4))
    array = draw(hnp.arrays(np.float64, shape, elements=_FINITE))
    index = tuple(draw(st.integers(0, side - 1)) for side in shape)
    return array, index, draw(_TOL), draw(_TOL)


@given(perturbed(), st.floats(1.5, 1e3), st.sampled_from([-1.0, 1.0]))
def test_property_perturbation_beyond_tolerance_fails_at_that_index(
    case: tuple[np.ndarray, tuple[int, ...], float, float], factor: float, sign: float
) -> None:
    ref, index, rtol, atol = case
    cand = ref.copy()
    cand[index] += sign * factor * (atol + rtol * abs(ref[index]))
    result = run(single(ref), single(cand), fixed(rtol, atol))
    mismatch = only(result)
    assert mismatch.reason == "tolerance"
    assert mismatch.index == index
    assert f"furthest beyond the tolerance at index {index}:" in mismatch.message
    assert mismatch.abs_err is not None
    assert mismatch.abs_err > atol + rtol * abs(ref[index])


@pytest.mark.slow
@given(perturbed(), st.data())
@settings(max_examples=200)
def test_property_perturbation_within_half_tolerance_passes(
    case: tuple[np.ndarray, tuple[int, ...], float, float], data: st.DataObject
) -> None:
    ref, _, rtol, atol = case
    fractions = data.draw(hnp.arrays(np.float64, ref.shape, elements=st.floats(-0.5, 0.5)))
    cand = ref + fractions * (atol + rtol * np.abs(ref))
    assume(np.all(np.isfinite(cand)))
    result = run(single(ref), single(cand), fixed(rtol, atol))
    assert result.ok, describe(result)
    assert result.max_abs_err <= (atol + rtol * np.abs(ref)).max()


def _keys(data: list[int], impl: str = "threefry2x32") -> Outputs:
    array = np.asarray(data, dtype=np.uint32)
    return Outputs(structure="*", leaves=(Leaf(path="['key']", array=array, key_impl=impl),))


def test_typed_keys_compare_their_data_exactly() -> None:
    assert compare(_keys([1, 2]), _keys([1, 2]), reference_platform="cpu", platform="cuda").ok
    # uint32's configured tolerance does not apply to a key's bits: 2 vs 3 differs.
    loose = Tolerance(rtol=1.0, atol=10.0)
    differ = compare(
        _keys([1, 2]), _keys([1, 3]), reference_platform="cpu", platform="cuda",
        tolerance=lambda dtype: loose,
    )  # fmt: skip
    [mismatch] = differ.mismatches
    assert mismatch.reason == "tolerance"
    assert mismatch.message.startswith(
        "['key']: 1 of 2 elements differ beyond rtol=0, atol=0 (key<threefry2x32> data)"
    )


def test_typed_keys_of_another_implementation_or_plain_data_differ_in_dtype() -> None:
    other = compare(_keys([1, 2]), _keys([1, 2], impl="rbg"), reference_platform="cpu",
                    platform="cuda")  # fmt: skip
    [mismatch] = other.mismatches
    assert (mismatch.reason, mismatch.message) == (
        "dtype", "['key']: dtype differs: cpu=key<threefry2x32> cuda=key<rbg>"
    )  # fmt: skip
    plain = Outputs(structure="*", leaves=(Leaf(path="['key']", array=np.uint32([1, 2])),))
    [mismatch] = compare(_keys([1, 2]), plain, reference_platform="cpu", platform="cuda").mismatches
    assert mismatch.message == "['key']: dtype differs: cpu=key<threefry2x32> cuda=uint32"
