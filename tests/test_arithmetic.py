"""Tests of pytest_jaxport.model.arithmetic, model.chip_errors and _jax.arithmetic.

The tpu emulation from measurements on the chip (issue 49): what TPU v5 lite was measured
to compute, emulated on the CPU, and what it cannot be bounded by the chip's measured errors.

Real JAX. Expected numbers come from float64 NumPy on operands split or rounded with
ml_dtypes (never from the engine), on values chosen so that the chip's arithmetic and the
CPU's give different results: each test fails on the engine before this change, which
rounded every default-precision float32 product to bfloat16 and nothing else. What the chip
itself returned is held in ``tests/test_emulation_chip.py`` (its recorded outputs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import line_of
from jax import lax

from pytest_jaxport._jax.emulate import emulate
from pytest_jaxport.model.arithmetic import DOT_RULES, conv_unit, dot_arithmetic, dot_unit
from pytest_jaxport.model.chip_errors import OpBound, chip_bounds, read_chip_bounds
from pytest_jaxport.model.emulation import BoundedOp, Emulation, may_differ, may_differ_lines
from pytest_jaxport.model.numerics import Comparison, LeafMismatch, Tolerance
from pytest_jaxport.model.probe import emulated_state


def bf16(x: Any) -> np.ndarray[Any, Any]:
    """Rounded to bfloat16 (to nearest even, ml_dtypes), in float64."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def truncated(x: Any) -> np.ndarray[Any, Any]:
    """float32 bits truncated to bfloat16's, in float64."""
    bits = np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


# 1 + 2**-8 + 2**-9: bfloat16 to nearest is 1 + 2**-7; truncated, 1. Exact in float32.
X = np.float32(1 + 2**-8 + 2**-9)


def product(x: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w


def product_high(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.matmul(x, w, precision="high")


# -- where the chip computes a product --------------------------------------------------------


def test_a_matrix_vector_product_is_kept_at_float32() -> None:
    x = np.full((1, 4), X)
    w = np.full((4, 2), X)

    emulated = emulate(product, (x, w), platform="tpu")
    on_cpu = np.asarray(jax.jit(product)(x, w))

    np.testing.assert_array_equal(np.asarray(emulated.value), on_cpu)  # not bfloat16's 4.0625
    (kept,) = emulated.emulation.rounded
    assert (kept.format, kept.why, kept.location) == ("float32", "vector", line_of(product, "@"))
    line = next(ln for ln in _lines(emulated.emulation) if "dot_general" in ln)
    assert line.endswith(
        ": kept at float32 (tpu computes a matrix-vector product in float32; measured on TPU "
        "v5 lite (measured: jax 0.10.2, libtpu 0.0.42.1))"
    )


def test_a_product_of_two_rows_goes_to_the_matrix_unit_and_rounds() -> None:
    x = np.full((2, 4), X)
    w = np.full((4, 2), X)

    emulated = emulate(product, (x, w), platform="tpu")

    expected = (bf16(x) @ bf16(w)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    assert [r.format for r in emulated.emulation.rounded] == ["bfloat16"]


@pytest.mark.parametrize(
    ("lhs", "rhs", "contracting", "batch", "unit"),
    [
        ((1, 512), (512, 256), ((1,), (0,)), ((), ()), "vector"),
        ((512,), (512, 256), ((0,), (0,)), ((), ()), "vector"),
        ((256, 512), (512, 1), ((1,), (0,)), ((), ()), "vector"),
        ((512,), (512,), ((0,), (0,)), ((), ()), "vector"),
        ((2, 512), (512, 256), ((1,), (0,)), ((), ()), "matrix"),
        ((3, 1, 512), (512, 256), ((2,), (0,)), ((), ()), "matrix"),
        ((1, 512), (1, 512, 256), ((1,), (1,)), ((0,), (0,)), "vector"),
        ((4, 512), (4, 512, 256), ((1,), (1,)), ((0,), (0,)), "matrix"),
        ((4, 1, 512), (4, 512, 256), ((2,), (1,)), ((0,), (0,)), "vector"),
        ((4, 256, 512), (4, 512), ((2,), (1,)), ((0,), (0,)), "matrix"),
        ((4, 512), (4, 512), ((1,), (1,)), ((0,), (0,)), "vector"),
    ],
)  # fmt: skip
def test_the_unit_a_product_runs_on(
    lhs: tuple[int, ...], rhs: tuple[int, ...], contracting: Any, batch: Any, unit: str
) -> None:
    """Each case is what the TPU compiler (libtpu 0.0.42.1, v5e) compiled to multiply +
    reduce (vector) or to a convolution (matrix); test_the_rule_is_the_compilers holds the
    rule to the compiler where libtpu is installed."""
    assert dot_unit(lhs, rhs, contracting, batch) == unit


def test_a_depthwise_convolution_is_one_group_per_feature() -> None:
    assert conv_unit(input_features=16, feature_group_count=16, output_features=16) == "depthwise"
    assert conv_unit(input_features=16, feature_group_count=4, output_features=16) == "matrix"
    assert conv_unit(input_features=16, feature_group_count=16, output_features=32) == "matrix"
    assert conv_unit(input_features=3, feature_group_count=1, output_features=16) == "matrix"


def test_every_measured_rule_names_where_it_comes_from() -> None:
    for rule in DOT_RULES:
        assert "measured on TPU v5 lite" in rule.source, rule
    assert dot_arithmetic("cuda", operands="float32", precision="high", unit="vector") is None
    rule = dot_arithmetic("tpu", operands="float16", precision="highest", unit="matrix")
    assert rule is not None
    assert rule.arithmetic == "bfloat16x3"  # type: ignore[union-attr]


# -- what the chip computes, emulated --------------------------------------------------------


def test_precision_high_is_three_passes_with_truncated_high_parts() -> None:
    x = np.full((2, 4), X)
    w = np.full((4, 2), X)
    hi, lo = truncated(x), bf16(x - truncated(x))
    wh, wl = truncated(w), bf16(w - truncated(w))
    expected = (hi @ wl + lo @ wh + hi @ wh).astype(np.float32)
    rounded = bf16(x) @ bf16(w - bf16(w)) + bf16(x - bf16(x)) @ bf16(w) + bf16(x) @ bf16(w)
    assert not np.array_equal(expected, rounded.astype(np.float32))  # the split matters here

    emulated = emulate(product_high, (x, w), platform="tpu")

    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    (site,) = emulated.emulation.rounded
    assert (site.format, site.why) == ("bfloat16x3", "high")


def test_float16_operands_are_multiplied_as_bfloat16() -> None:
    x = np.full((2, 4), 1 + 2**-8, np.float16)  # bfloat16: 1
    w = np.ones((4, 2), np.float16)  # exact: 4 + 2**-6 in float16, 4 as bfloat16

    emulated = emulate(product, (x, w), platform="tpu")

    expected = (bf16(x) @ bf16(w)).astype(np.float16)
    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    assert np.asarray(emulated.value).dtype == np.float16
    assert not np.array_equal(np.asarray(jax.jit(product)(x, w)), expected)


def depthwise(x: jax.Array, w: jax.Array) -> jax.Array:
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO",
                                    "NHWC"), feature_group_count=x.shape[-1])  # fmt: skip


def test_a_depthwise_convolution_rounds_only_its_input() -> None:
    x = np.full((1, 1, 1, 2), X)
    w = np.full((1, 1, 1, 2), X)

    emulated = emulate(depthwise, (x, w), platform="tpu")

    expected = (bf16(x) * w.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    assert [(r.format, r.why) for r in emulated.emulation.rounded] == [
        ("bfloat16 input", "depthwise")
    ]


def blocked_model(x: np.ndarray[Any, Any], block: int = 128) -> np.ndarray[Any, Any]:
    """cumsum in blocks (in order inside, zero-padded), block totals carried the same way."""
    n = x.shape[-1]
    if n <= block:
        return np.cumsum(x, axis=-1, dtype=np.float32)
    blocks = -(-n // block)
    padded = np.concatenate([x, np.zeros((*x.shape[:-1], blocks * block - n), np.float32)], -1)
    inside = np.cumsum(padded.reshape(*x.shape[:-1], blocks, block), -1, dtype=np.float32)
    carried = blocked_model(inside[..., -1], block)
    before = np.concatenate([np.zeros((*x.shape[:-1], 1), np.float32), carried[..., :-1]], -1)
    return (inside + before[..., None]).reshape(*x.shape[:-1], -1)[..., :n]


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "axis"), [((4, 4096), 1), ((2, 20000), 1), ((1000, 3), 0)])
def test_cumsum_is_scanned_in_blocks_of_128(shape: tuple[int, ...], axis: int) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    emulated = emulate(lambda v: jnp.cumsum(v, axis=axis), (x,), platform="tpu")

    expected = np.moveaxis(blocked_model(np.moveaxis(x, axis, -1)), -1, axis)
    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    assert not np.array_equal(np.asarray(jax.jit(lambda v: jnp.cumsum(v, axis=axis))(x)), expected)
    assert [(r.op, r.format) for r in emulated.emulation.rounded] == [("cumsum", "blocked scan")]


def round_trip(x: jax.Array) -> jax.Array:
    return x.astype(jnp.bfloat16).astype(jnp.float32) * 2


def test_a_bfloat16_round_trip_is_left_out_as_the_tpu_compiler_does() -> None:
    x = np.full((4,), X)

    emulated = emulate(round_trip, (x,), platform="tpu")

    np.testing.assert_array_equal(np.asarray(emulated.value), x * 2)  # not bfloat16's 2.015625
    assert [r.format for r in emulated.emulation.rounded] == ["round trip kept"]
    cuda = emulate(round_trip, (x,), platform="cuda")
    np.testing.assert_array_equal(np.asarray(cuda.value), bf16(x).astype(np.float32) * 2)


# -- bounds: what the emulation cannot compute as the chip does ------------------------------


def squash(x: jax.Array) -> jax.Array:
    return jnp.tanh(x) * 3


def test_ops_it_cannot_compute_as_the_chip_are_moved_by_their_measured_bound() -> None:
    x = np.linspace(-2, 2, 64, dtype=np.float32)

    emulated = emulate(squash, (x,), platform="tpu")
    assert emulated.bounded is not None
    bounded = emulated.bounded()

    assert bounded.outputs is not None
    np.testing.assert_array_equal(np.asarray(emulated.value), np.asarray(jax.jit(squash)(x)))
    (site,) = bounded.sites
    assert (site.op, site.location) == ("tanh", line_of(squash, "tanh"))
    assert site.bound is not None
    assert site.bound.describe() == "within 1,400 ulp"
    assert emulated.emulation.bounds_from == "TPU v5 lite (measured: jax 0.10.2, libtpu 0.0.42.1)"
    moved = bounded.outputs.leaves[0].array.astype(np.float64)
    clean = np.asarray(emulated.value, np.float64)
    relative = np.abs(moved - clean) / np.maximum(np.abs(clean), 1e-30)
    assert relative.max() > 1e-5  # 740 ulp of tanh, times 3
    assert relative.max() < 2e-4


def test_eigenvectors_come_with_either_sign_and_a_reconstruction_does_not_care() -> None:
    a = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    a = (a + a.T) / 2

    def vectors(m: jax.Array) -> tuple[jax.Array, jax.Array]:
        w, v = jnp.linalg.eigh(m)
        return v, jnp.matmul(v * w, v.T, precision="highest")  # bfloat16 would blur it

    emulated = emulate(vectors, (a,), platform="tpu")
    assert emulated.bounded is not None
    bounded = emulated.bounded()

    assert bounded.outputs is not None
    v_moved, rebuilt = (leaf.array for leaf in bounded.outputs.leaves)
    v_clean = emulated.outputs.leaves[0].array  # type: ignore[union-attr]
    signs = np.sign(np.sum(v_moved * v_clean, axis=0))
    assert (signs < 0).any()
    assert (signs > 0).any()
    np.testing.assert_allclose(rebuilt, a, atol=1e-4)


def test_the_shipped_bounds_name_their_chip_and_the_issues_example_reads_as_the_issue() -> None:
    bounds = chip_bounds("tpu")
    assert bounds is not None
    assert str(bounds.measurement) == "TPU v5 lite (measured: jax 0.10.2, libtpu 0.0.42.1)"
    assert bounds.measurement.results == "benchmarks/results/chip-errors-tpu-v5-lite.json"
    assert chip_bounds("cuda") is None  # no GPU was lent: no bounds, no third state
    assert bounds.bound("reduce_window_sum") == bounds.bound("reduce_sum")  # pooling is a sum
    assert bounds.is_exact("add_any")
    assert bounds.bound("reduce_prod") is None  # not measured: it may differ by any amount
    tanh = BoundedOp(op="tanh", location="model.py:12", bound=bounds.bound("tanh"))
    emulation = Emulation(platform="tpu", dot_format="bfloat16", bounded=(tanh,),
                          bounds_from=str(bounds.measurement))  # fmt: skip
    tolerance = Tolerance(rtol=1e-6, atol=1e-6, origin="JAX's float32 default")
    moved = Comparison(platform="tpu (emulated on cpu)", reference="cpu", leaves=1,
                       mismatches=(LeafMismatch(path="", reason="tolerance", tolerance=tolerance,
                                                message="<root>: 3 of 64 elements differ"),),
                       max_abs_err=1e-4, max_rel_err=1e-4)  # fmt: skip

    lines = may_differ_lines(emulation, moved)

    assert lines[0] == (
        "may differ on tpu: tanh at model.py:12 is within 1,400 ulp on TPU v5 lite (measured: "
        "jax 0.10.2, libtpu 0.0.42.1), above rtol 1e-06"
    )
    assert (
        lines[1] == "with each op below off by its measured bound: <root>: 3 of 64 elements differ"
    )
    assert may_differ(emulation, moved)
    assert emulated_state(ran=True, failed=False, ok=True, may_differ=True) == "may differ"
    assert emulated_state(ran=True, failed=False, ok=False, may_differ=True) == "mismatch"
    assert Emulation.from_dict(json.loads(json.dumps(emulation.to_dict()))) == emulation


def test_an_op_with_no_measured_bound_may_differ_by_any_amount() -> None:
    site = BoundedOp(op="igamma", location="m.py:3", bound=None)
    unbounded = Emulation(
        platform="tpu", dot_format="bfloat16", bounds_from="TPU v5 lite", bounded=(site,)
    )
    assert may_differ(unbounded, None)
    assert may_differ_lines(unbounded, None) == [
        "may differ on tpu: igamma at m.py:3 has no measured bound on TPU v5 lite"
    ]


def test_a_wrong_bounds_file_names_itself_and_the_key() -> None:
    with pytest.raises(ValueError, match=r"^x.json: tpu: KeyError: 'libtpu'"):
        read_chip_bounds('{"tpu": {"device": "d", "jax": "j"}}', source="x.json")
    with pytest.raises(ValueError, match="scale: expected result, terms or largest, found 'ulp'"):
        read_chip_bounds('{"tpu": {"device": "d", "jax": "j", "libtpu": "l", "date": "d", '
                         '"script": "s", "results": "r", "exact": [], "ops": {"exp": '
                         '{"scale": "ulp", "ulps": 1}}}}', source="x.json")  # fmt: skip
    assert OpBound(op="reduce_sum", scale="terms", ulps=0.88).describe() == (
        "within 0.88 ulp of the sum of its terms"
    )


def _lines(emulation: Emulation) -> list[str]:
    from pytest_jaxport.model.emulation import emulation_lines

    return emulation_lines(emulation)


# -- the rule, held to the TPU compiler ---------------------------------------------------------


COMPILED = """
import json, os, sys
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
topo = topologies.get_topology_desc(platform="tpu", topology_name="v5e:1x1",
    chip_config_name="default", chips_per_host_bounds=(1, 1, 1), num_slices=1,
    wrap=(False, False, False))
device = SingleDeviceSharding(topo.devices[0])
found = []
for lhs, rhs, contracting, batch in json.loads(sys.argv[1]):
    dims = ((tuple(contracting[0]), tuple(contracting[1])), (tuple(batch[0]), tuple(batch[1])))
    f = lambda x, w, dims=dims: lax.dot_general(x, w, dims)
    specs = [jax.ShapeDtypeStruct(tuple(s), jnp.float32, sharding=device) for s in (lhs, rhs)]
    text = jax.jit(f).lower(*specs).compile().as_text()
    found.append("matrix" if " convolution(" in text or "convolution-base" in text else "vector")
print(json.dumps(found))
"""


@pytest.mark.slow
def test_the_rule_is_the_compilers() -> None:
    pytest.importorskip("libtpu", reason="needs the TPU compiler: pip install libtpu")
    cases = [
        ((1, 512), (512, 256), ((1,), (0,)), ((), ())),
        ((2, 512), (512, 256), ((1,), (0,)), ((), ())),
        ((4, 512), (4, 512, 256), ((1,), (1,)), ((0,), (0,))),
        ((4, 1, 512), (4, 512, 256), ((2,), (1,)), ((0,), (0,))),
        ((4, 512), (4, 512), ((1,), (1,)), ((0,), (0,))),
        ((256, 512), (512, 1), ((1,), (0,)), ((), ())),
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
           "TPU_ACCELERATOR_TYPE": "v5litepod-1", "TPU_WORKER_HOSTNAMES": "localhost"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(COMPILED), json.dumps(cases)],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"the TPU compiler did not run here: {done.stderr.strip()[-300:]}")
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    assert compiled == [dot_unit(*case) for case in cases]
