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
from pathlib import Path
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


# -- formats narrower than float32 (issue 55 item 9) -----------------------------------------


def fused(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
    return a * b + c


def test_a_bfloat16_chain_is_computed_in_float32_and_rounded_once() -> None:
    """bfloat16 1.0078125 * 1.0078125 = 1.01568603515625 exactly (rounded alone: 1.015625);
    + 2**-8: the CPU rounds the product first and gets 1.0195312, the TPU adds in float32 and
    rounds once: 1.0234375 (measured: a*b+c equal to that model in 100% of 16,384 elements)."""
    a = np.full((4,), 1.0078125, ml_dtypes.bfloat16)
    c = np.full((4,), 2.0**-8, ml_dtypes.bfloat16)
    once = (a.astype(np.float64) ** 2 + c.astype(np.float64)).astype(np.float32)

    emulated = emulate(fused, (a, a, c), platform="tpu")

    np.testing.assert_array_equal(np.asarray(emulated.value), once.astype(ml_dtypes.bfloat16))
    cpu = np.asarray(jax.jit(fused)(a, a, c))
    assert not np.array_equal(cpu, np.asarray(emulated.value))
    assert [(r.op, r.format, r.why) for r in emulated.emulation.rounded] == [
        ("add", "float32, rounded once", "narrow")]  # fmt: skip
    line = next(ln for ln in _lines(emulated.emulation) if ln.startswith("add"))
    assert line.endswith(
        ": computed in float32, rounded where stored (not after each op) (tpu computes formats "
        "narrower than float32 in float32; measured on TPU v5 lite (measured: jax 0.10.2, "
        "libtpu 0.0.42.1))"
    )


def test_a_value_broadcast_into_a_larger_one_is_stored_rounded_first() -> None:
    """The layer norm's per-row scale is stored in bfloat16 before it multiplies the row (its
    own fusion), as the TPU compiler's program has it: not the chain rounded once, which
    differs in 50 of these 128 elements."""
    x = np.linspace(1.0, 1.9921875, 128).astype(ml_dtypes.bfloat16).reshape(2, 64)
    s = np.full((2, 1), 1.25, ml_dtypes.bfloat16)

    def scaled(p: jax.Array, q: jax.Array) -> jax.Array:
        return p * jnp.exp(q - 1) * 1  # exp(q - 1): a float32 value the row would read

    emulated = emulate(scaled, (x, s), platform="tpu")
    wide = np.exp(np.float32(0.25)).astype(np.float64)
    stored = np.float64(np.float32(wide).astype(ml_dtypes.bfloat16))
    expected = (x.astype(np.float64) * stored).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    once = (x.astype(np.float64) * wide).astype(np.float32).astype(ml_dtypes.bfloat16)
    assert np.sum(once != expected) == 50


def test_float16_times_float16_into_float32_multiplies_as_bfloat16() -> None:
    """dot(f16, f16, preferred_element_type=float32) on the matrix unit: the operands rounded
    to bfloat16 (measured: the CPU 0.176 away, this model within 2.3e-5, the accumulation)."""
    x = np.full((2, 4), 1.0009765625, np.float16)  # 1 + 2**-10: bfloat16 rounds it to 1

    emulated = emulate(lambda p, q: jax.lax.dot(p, q, preferred_element_type=jnp.float32),
                       (x, x.T.copy()), platform="tpu")  # fmt: skip

    np.testing.assert_array_equal(np.asarray(emulated.value), np.full((2, 2), 4.0, np.float32))
    assert [(r.format, r.why) for r in emulated.emulation.rounded] == [
        ("float16 as bfloat16", "float16")]  # fmt: skip


def test_float32_to_bfloat16_flushes_float32_subnormals_to_signed_zero() -> None:
    x = np.array([1e-39, -1e-39, 2.0**-126, 3.0], np.float32)

    emulated = emulate(lambda v: v.astype(jnp.bfloat16), (x,), platform="tpu")

    got = np.asarray(emulated.value).astype(np.float32)
    np.testing.assert_array_equal(got, [0.0, -0.0, 2.0**-126, 3.0])
    assert np.signbit(got[1])
    assert np.asarray(jax.jit(lambda v: v.astype(jnp.bfloat16))(x))[0] != 0  # the CPU keeps it


def test_a_float16_round_trip_is_left_out_too() -> None:
    x = np.full((4,), 1 + 2.0**-12, np.float32)  # float16 rounds it to 1

    emulated = emulate(lambda v: v.astype(jnp.float16).astype(jnp.float32), (x,), platform="tpu")

    np.testing.assert_array_equal(np.asarray(emulated.value), x)


def test_a_bfloat16_cumsum_stores_its_blocks_and_carries_rounded() -> None:
    """Not the CPU's running sum (184 of these 256 differ) nor the float32 sum rounded once
    (39 differ): each block of 128 summed in float32 and stored, the carry added to it."""
    x = np.random.default_rng(0).uniform(0, 1, 256).astype(ml_dtypes.bfloat16)

    emulated = emulate(lambda v: jnp.cumsum(v), (x,), platform="tpu")

    wide = x.astype(np.float32)
    inside = np.cumsum(wide.reshape(2, 128), axis=-1).astype(ml_dtypes.bfloat16)
    carry = inside[0, -1].astype(np.float32)
    second = (inside[1].astype(np.float32) + carry).astype(ml_dtypes.bfloat16)
    expected = np.concatenate([inside[0], second])
    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    assert np.sum(np.asarray(jax.jit(jnp.cumsum)(x)) != expected) == 184
    assert np.sum(np.cumsum(wide).astype(ml_dtypes.bfloat16) != expected) == 39


def test_a_bfloat16_division_is_bounded_apart_from_float32s() -> None:
    """The chip rounded a bfloat16 quotient 135 float32 ulps from its midpoint the other way
    (float32 division: within 2.3 ulp): ``bfloat16 div`` has its own bound, and the bounded
    run rounds every element within it the other way."""
    bounds = chip_bounds("tpu")
    assert bounds is not None
    bf16_div = bounds.bound("div", "bfloat16")
    assert bf16_div is not None
    assert (bf16_div.op, bf16_div.ulps) == ("bfloat16 div", 140.0)
    assert bounds.bound("div", "float16") == bounds.bound("div")
    rng = np.random.default_rng(5)
    x, y = (rng.uniform(0.5, 4.0, 16384).astype(ml_dtypes.bfloat16) for _ in range(2))
    emulated = emulate(jnp.divide, (x, y), platform="tpu")
    assert emulated.bounded is not None
    bounded = emulated.bounded()
    assert bounded.outputs is not None
    assert [(s.op, s.bound and s.bound.ulps) for s in bounded.sites] == [("bfloat16 div", 140.0)]
    moved = bounded.outputs.leaves[0].array
    assert np.sum(moved != np.asarray(emulated.value)) > 0


# -- bounds per range, size and conditioning (issue 55 item 10) -------------------------------

BY_RANGE = "benchmarks/results/chip-bounds-by-range-tpu-v5-lite.json"
DIRECT = {"lu": ("lu",), "qr": ("qr_r", "qr_q"), "svd": ("svd",), "eigh": ("eigh",),
          "cholesky": ("cholesky",), "triangular_solve": ("triangular_solve",)}  # fmt: skip
"""Each decomposition's bound and the chip's measurements of that decomposition itself."""


def _ulps_at(bound: OpBound, condition: float) -> float:
    """The bound the bounded run moves by for an input of ``condition`` (as it computes it)."""
    if not bound.conditioned:
        return bound.ulps
    steps = bound.steps()
    above = [u for c, u in steps if c >= condition]
    return above[0] if above else steps[-1][1] * condition / steps[-1][0]


def test_every_decomposition_bound_covers_the_chips_error_at_its_size_and_conditioning() -> None:
    """The chip's error grows with the size: the bounds measured at n = 64 alone (lu 6.1,
    svd 2.4, eigh 12, cholesky 0.71) were exceeded at n = 256 by well-conditioned matrices.
    Each is now kept per size (and conditioning, where the error depends on it) and covers
    every measurement, square and tall; a larger matrix has no bound."""
    root = Path(__file__).resolve().parents[1]
    measured = json.loads((root / BY_RANGE).read_text())["measured"]["matrices"]
    bounds = chip_bounds("tpu")
    assert bounds is not None
    short = []
    for entry in measured:
        for op, names in DIRECT.items():
            bound = bounds.bound(op)
            assert bound is not None
            at = bound.at(int(entry["n"]))
            assert isinstance(at, OpBound)
            condition = entry[
                "measured_condition_spd" if op == "cholesky" else "measured_condition"
            ]
            for name in names:
                chip = entry["eps_max"].get(name)
                if isinstance(chip, float) and chip > _ulps_at(at, condition):
                    short.append((op, entry["n"], entry["condition"], name, chip))
    assert not short, short
    assert bounds.bound("eigh").at(300).ulps >= 11.077  # type: ignore[union-attr]
    assert bounds.bound("lu").at(512) == "n = 512 is beyond the sizes measured (16 to 256)"  # type: ignore[union-attr]


def test_a_matrix_larger_than_measured_may_differ_and_says_why() -> None:
    a = np.eye(300, dtype=np.float32) * 2 + np.float32(0.01)

    emulated = emulate(jnp.linalg.inv, (a,), platform="tpu")
    assert emulated.bounded is not None
    sites = emulated.bounded().sites

    lu = next(s for s in sites if s.op == "lu")
    assert lu.bound is None
    assert lu.describe("TPU v5 lite").endswith(
        "has no measured bound on TPU v5 lite (n = 300 is beyond the sizes measured (16 to 256))"
    )
    assert may_differ(Emulation(platform="tpu", dot_format=None, bounded=sites), None)


def test_cumprod_has_a_bound_per_factor_and_per_length() -> None:
    """No cumprod bound was shipped, so every cumprod "may differ"ed: measured, it is within
    0.42 ulp per factor, and within 4, 11, 33 and 68 ulp at lengths 16, 128, 1,024, 4,096."""
    x = np.exp(np.random.default_rng(88).uniform(-0.1, 0.1, (4, 128))).astype(np.float32)

    emulated = emulate(lambda v: jnp.cumprod(v, axis=-1), (x,), platform="tpu")
    assert emulated.bounded is not None
    bounded = emulated.bounded()

    (site,) = bounded.sites
    assert site.bound is not None
    assert site.bound.describe() == (
        "within 0.42 ulp per factor, within 11 in all (measured at length 16 to 128)"
    )
    assert bounded.outputs is not None
    moved = bounded.outputs.leaves[0].array.astype(np.float64)
    clean = np.asarray(emulated.value, np.float64)
    ulps = np.abs(moved - clean) / np.spacing(np.abs(clean).astype(np.float32))
    assert ulps[:, 0].max() <= 0.5  # the first factor: 0.42 ulp
    assert 5 < ulps[:, -1].max() <= 11.5  # the 128th: the length's 11 ulp


def test_expm1_near_zero_is_bounded_by_its_own_range() -> None:
    """expm1 on [-1e-3, 1e-3]: 3.2 ulp at worst on the chip, where the bound over [-10, 10]
    is 430 ulp + 27 eps: each element is moved by the tightest range it lies in."""
    x = np.linspace(-1e-3, 1e-3, 4096, dtype=np.float32)

    emulated = emulate(jnp.expm1, (x,), platform="tpu")
    assert emulated.bounded is not None
    bounded = emulated.bounded()

    assert bounded.outputs is not None
    moved = bounded.outputs.leaves[0].array.astype(np.float64)
    clean = np.asarray(emulated.value, np.float64)
    assert np.abs(moved - clean).max() <= 2.5e-10  # the chip's largest difference there
