"""Tests of pytest_jaxport.model.format_census, model.format_rules, model.tiling.

Numeric formats and memory layout (issue 23): the rule table, the layout arithmetic and the
findings of real lowerings, of real compiled programs and of real library code.

Expected numbers are computed by hand in each test; programs are lowered by JAX (no mocks)
through the same calls the plugin makes (``tracing.trace``, ``lowering.lower``,
``stablehlo.read_program``). The compiled CUDA test compiles without a GPU and skips, saying
why, where the jax CUDA plugin is absent.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from pytest_jaxport._jax import callbacks, lowering, stablehlo, tracing
from pytest_jaxport._jax.deviceless import cuda_plugin_problem, deviceless_compile
from pytest_jaxport.model.census import OpSite, Program, program_from_dict, program_to_dict
from pytest_jaxport.model.devices import (
    CUDA_GENERATIONS,
    DEFAULT_DEVICES,
    ROCM_GENERATIONS,
    TPU_GENERATIONS,
    Device,
    device_for,
    device_from_gpu_description,
)
from pytest_jaxport.model.findings import Finding, FormatCensus
from pytest_jaxport.model.format_census import take_format_census
from pytest_jaxport.model.format_rules import FORMAT_RULES
from pytest_jaxport.model.geometry import matrix_unit_waste
from pytest_jaxport.model.gpu import load_gpu_description
from pytest_jaxport.model.hlo import parse_compiled_hlo
from pytest_jaxport.model.tiling import tile_padding

# --- helpers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def x64() -> Iterator[None]:
    """64-bit types on, for one block (``jax.enable_x64`` from jax 0.8, the experimental
    context manager before)."""
    if hasattr(jax, "enable_x64"):
        with jax.enable_x64(True):
            yield
        return
    from jax.experimental import enable_x64  # jax < 0.8

    with enable_x64():
        yield


def program(fn: Callable[..., Any], *args: Any, platform: str) -> Program:
    """``fn``'s program for ``platform``, read as the census reads it."""
    traced = tracing.trace(fn, args, {})
    return stablehlo.read_program(lowering.lower(traced.traced, platform))


def census(
    fn: Callable[..., Any], *args: Any, platform: str, device: str | None = None
) -> FormatCensus:
    found = program(fn, *args, platform=platform)
    return take_format_census(found, platform, device=device_for(platform, device))


def rules(result: FormatCensus) -> set[str]:
    return {f.rule for f in result.findings}


def line_of(fn: Callable[..., Any]) -> int:
    """The line of ``fn``'s body that holds its one op (the line after its ``def``)."""
    return int(fn.__code__.co_firstlineno) + 1


# --- layout arithmetic, by hand ------------------------------------------------------------


def test_a_trailing_100_goes_minor_and_pads_to_104_rows_not_128_lanes() -> None:
    # (1024, 100) float32: the compiler puts the 1024 minor ({0,1:T(8,128)}): 100 pads to 104
    # rows of 1024 lanes, 104 * 1024 * 4 bytes (the naive last-two-dims tile: 1024 * 128 * 4).
    assert tile_padding((1024, 100), "f32") == (409_600, 104 * 1024 * 4)
    assert tile_padding((1024, 128), "f32") == (524_288, 524_288)
    # The chip's numbers (the research's table): (4096, 100) 1.04x, (8, 64, 64, 3) 2.0x.
    assert tile_padding((4096, 100), "f32") == (1_638_400, 1_703_936)
    assert tile_padding((8, 64, 64, 3), "f32") == (393_216, 786_432)
    assert tile_padding((4096, 3), "f32") == (49_152, 65_536)  # T(4,128): 3 rows pad to 4


def test_the_tile_rows_follow_the_rows_and_the_element_width() -> None:
    # bfloat16 (10, 100): 100 minor, 10 rows pad to 16 (two (8,128)(2,1) tiles), 2 bytes each.
    assert tile_padding((10, 100), "bf16") == (2_000, 16 * 128 * 2)
    assert tile_padding((1000, 1000), "bf16") == (2_000_000, 1000 * 1024 * 2)  # 8 rows, not 16
    # int8 (33, 129): 129 minor (256 lanes), 33 rows pad to 40 (8-row tiles), 1 byte each.
    assert tile_padding((33, 129), "i8") == (33 * 129, 40 * 256)
    # float32 (3, 8, 128): leading dimensions multiply, nothing pads.
    assert tile_padding((3, 8, 128), "f32") == (3 * 8 * 128 * 4, 3 * 8 * 128 * 4)
    # float64 and int4 tile as float32 and int8 do, with their own element sizes.
    assert tile_padding((8, 100), "f64") == (6_400, 8 * 128 * 8)
    assert tile_padding((8, 100), "i4") == (400, 8 * 128 // 2)


def test_a_vector_pads_to_its_tile_and_a_scalar_is_not_tiled() -> None:
    # (1000,) float32: T(1024); (129,) float32: T(256), as the compiler printed them.
    assert tile_padding((1000,), "f32") == (4_000, 4_096)
    assert tile_padding((129,), "f32") == (516, 1_024)
    assert tile_padding((), "f32") is None


def test_matrix_unit_waste_of_a_contracting_dimension_of_100() -> None:
    # 100 of the 128 rows of a 128x128 MXU hold weights: 28/128 of its multiply-adds idle.
    assert matrix_unit_waste(4096, 100, 128, k_unit=128, n_unit=128) == 28 / 128
    assert matrix_unit_waste(4096, 128, 256, k_unit=128, n_unit=128) == 0.0
    # 200 features on a 256x256 MXU (TPU v6e): 200*200 of 256*256 used.
    assert matrix_unit_waste(8, 200, 200, k_unit=256, n_unit=256) == 1 - 200 * 200 / 256**2


# --- devices and the table -----------------------------------------------------------------


def test_devices_by_name_and_by_generation() -> None:
    assert device_for("cuda", "H100").generation == "sm90"
    assert device_for("cuda", "a100").generation == "sm80"
    assert device_for("rocm", "mi300").generation == "gfx942"
    assert device_for("rocm", "MI350X").generation == "gfx950"
    assert device_for("tpu", "v6e").generation == "v6e"
    assert device_for("rocm", "gfx950").generation == "gfx950"
    assert device_for("tpu") == DEFAULT_DEVICES["tpu"]


def test_an_unknown_device_names_what_is_known() -> None:
    with pytest.raises(ValueError, match=r"unknown rocm device 'h100'; expected one of: .*mi300"):
        device_for("rocm", "h100")


@pytest.mark.parametrize(("name", "generation"), [("a100", "sm80"), ("h100", "sm90")])
def test_the_shipped_gpu_descriptions_name_their_generation(name: str, generation: str) -> None:
    assert device_from_gpu_description(load_gpu_description(name)).generation == generation


def test_a_rocm_description_names_its_isa() -> None:
    text = 'gpu_device_info { rocm_compute_capability { gcn_arch_name: "gfx942:sramecc+:xnack-" } }'
    assert device_from_gpu_description(text) == Device(platform="rocm", generation="gfx942")
    with pytest.raises(ValueError, match="without a CUDA or ROCm compute capability"):
        device_from_gpu_description("gpu_device_info { core_count: 1 }")


def test_every_rule_cites_a_public_source_and_says_whether_it_compiles() -> None:
    generations = {"cpu": (), "cuda": CUDA_GENERATIONS, "rocm": ROCM_GENERATIONS,
                   "tpu": TPU_GENERATIONS, "oneapi": ("bmg", "pvc")}  # fmt: skip
    for rule in FORMAT_RULES:
        assert rule.summary, rule.name
        assert rule.compiles == (rule.effect != "not-compiled"), rule.name
        assert rule.platform == "*" or set(rule.devices) <= set(generations[rule.platform])
    # every source is a public page or a measurement this repository records (the compiled
    # level's is the program itself), and each recording named is there
    assert [
        r.name
        for r in FORMAT_RULES
        if "https://" not in r.source and "benchmarks/results/" not in r.source
    ] == ["inserted-relayout"]
    root = Path(__file__).resolve().parent.parent
    for rule in FORMAT_RULES:
        for recorded in re.findall(r"benchmarks/results/[\w.-]+\.json", rule.source):
            assert (root / recorded).is_file(), (rule.name, recorded)


# --- the walk, on a program built by hand --------------------------------------------------


def test_findings_are_call_weighted_and_attributed_to_the_calling_line() -> None:
    """A helper with two float64 ops and no location of its own, called from two lines
    (three times from the first): five ops at the first line, two at the second on tpu."""
    f64 = "tensor<1024xf64>"
    helper = (
        OpSite(op="stablehlo.add", operand_types=(f64, f64), result_types=(f64,)),
        OpSite(op="stablehlo.multiply", operand_types=(f64, f64), result_types=(f64,), count=1),
    )
    main = (
        OpSite(op="func.call", target="helper", location='loc("model.py":3:1)', count=3),
        OpSite(op="func.call", target="helper", location='loc("model.py":9:1)'),
    )
    built = Program(entry="main", functions={"main": main, "helper": helper})
    result = take_format_census(built, "tpu")
    by_line = {f.location.line: f for f in result.findings if f.location}
    assert by_line[3].count == 6
    assert by_line[9].count == 2
    assert by_line[3].rule == "float64-emulated"
    assert by_line[3].ops == ("add", "multiply")
    assert by_line[3].detail == "float64 in add, multiply"
    assert result.formats == {"float64": 8}
    assert take_format_census(built, "cuda").findings == ()


def test_padding_bytes_are_weighted_by_the_loop_trip_count_counts_are_not() -> None:
    """A compiled-style call site that runs its body 10 times: the count is the body's (code,
    as in the census), the padding bytes are ten times the body's (what moves)."""
    x = "tensor<1024x100xf32>"
    body = (OpSite(op="stablehlo.negate", operand_types=(x,), result_types=(x,)),)
    main = (OpSite(op="call", target="body", location='loc("m.py":1:1)', runs=10),)
    result = take_format_census(
        Program(entry="main", functions={"main": main, "body": body}), "tpu"
    )
    (padding,) = result.by_rule("tile-padding")
    assert padding.count == 1
    assert padding.amount == 10 * 2 * (425_984 - 409_600)
    assert padding.of == 10 * 2 * 425_984


def test_a_census_and_its_findings_survive_json() -> None:
    f64 = "tensor<8x8xf64>"
    built = Program(
        entry="main",
        functions={
            "main": (
                OpSite(
                    op="stablehlo.fft",
                    location='loc("m.py":2:1)',
                    operand_types=("tensor<1024xcomplex<f64>>",),
                    result_types=("tensor<1024xcomplex<f64>>",),
                ),
                OpSite(op="stablehlo.add", operand_types=(f64, f64), result_types=(f64,)),
            )
        },
    )
    result = take_format_census(built, "tpu")
    again = FormatCensus.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert [f.compiles for f in again.findings] == [False, True]
    with pytest.raises(ValueError, match="not a finding kind"):
        Finding.from_dict({**result.findings[0].to_dict(), "kind": "vibes"})


# --- real lowering -------------------------------------------------------------------------


def test_the_reader_keeps_types_and_attributes_through_the_cache_form() -> None:
    def dot(x: Any, w: Any) -> Any:
        return jnp.dot(x, w, precision="highest")

    read = program(dot, jnp.ones((8, 16)), jnp.ones((16, 4)), platform="tpu")
    (site,) = [s for s in read.functions["main"] if s.op == "stablehlo.dot_general"]
    assert site.operand_types == ("tensor<8x16xf32>", "tensor<16x4xf32>")
    assert site.result_types == ("tensor<8x4xf32>",)
    attributes = dict(site.attributes)
    assert "HIGHEST" in attributes["precision_config"]
    assert "lhs_contracting_dimensions = [1]" in attributes["dot_dimension_numbers"]
    again = program_from_dict(json.loads(json.dumps(program_to_dict(read))))
    assert again == read


def test_an_x64_solve_is_a_finding_on_tpu_only() -> None:
    def solve(a: Any, b: Any) -> Any:
        return jnp.linalg.solve(a, b)

    with x64():
        a, b = jnp.eye(64) * 2.0, jnp.ones((64,))
        on_tpu = census(solve, a, b, platform="tpu")
        elsewhere = {p: census(solve, a, b, platform=p) for p in ("cpu", "cuda", "rocm")}
    (finding,) = on_tpu.by_rule("float64-emulated")
    assert finding.formats == ("float64",)
    assert finding.location is not None
    assert finding.location.file == __file__
    assert finding.location.line == line_of(solve)
    assert finding.compiles
    # The LU decomposition itself: libtpu before 0.0.50 refuses it; with the release unknown
    # the rule holds and says for which releases, with 0.0.52 it is only emulated.
    (refused,) = on_tpu.not_compiling
    assert refused.rule == "float64-lu-not-compiled"
    assert refused.detail == (
        "float64 custom_call LuDecomposition (float64[64,64]) [libtpu < 0.0.50]"
    )
    with x64():
        newer = take_format_census(program(solve, a, b, platform="tpu"), "tpu",
                                   device=Device(platform="tpu", generation="v5e",
                                                 compiler="0.0.52"))  # fmt: skip
    assert not newer.not_compiling
    assert newer.by_rule("float64-emulated")
    assert on_tpu.formats["float64"] >= 1
    for platform, result in elsewhere.items():
        assert result.findings == (), platform


def test_a_complex128_fft_does_not_compile_on_tpu() -> None:
    def spectrum(x: Any) -> Any:
        return jnp.fft.fft(x)

    with x64():
        result = census(spectrum, jnp.ones((1024,)), platform="tpu")
    (finding,) = result.not_compiling
    assert finding.rule == "complex128-fft-not-compiled"
    assert finding.formats == ("complex128",)
    assert finding.ops == ("fft",)
    assert finding.location is not None
    assert finding.location.line == line_of(spectrum)


def test_nextafter_under_x64_does_not_compile_on_tpu_before_libtpu_0_0_52() -> None:
    """jax.lax.nextafter on float64, what equinox and diffrax use: libtpu 0.0.42.1 and
    0.0.50.1 refuse it, 0.0.52 compiles it; a float64 bitcast compiles on every release."""

    def step(x: Any) -> Any:
        return lax.nextafter(x, x + 1.0)

    def bits(x: Any) -> Any:
        return lax.bitcast_convert_type(x, jnp.int64)

    with x64():
        result = census(step, jnp.ones((16,)), platform="tpu")
        read = program(step, jnp.ones((16,)), platform="tpu")
        bitcast = census(bits, jnp.ones((16,)), platform="tpu")
    assert [f.rule for f in result.not_compiling] == ["float64-nextafter-not-compiled"]
    for release, refused in (("0.0.42.1", True), ("0.0.50.1", True), ("0.0.52", False)):
        device = Device(platform="tpu", generation="v5e", compiler=release)
        assert bool(take_format_census(read, "tpu", device=device).not_compiling) == refused
    assert not bitcast.not_compiling
    with x64():
        assert census(step, jnp.ones((16,)), platform="cuda").findings == ()
    assert census(step, jnp.ones((16,), jnp.float32), platform="tpu").findings == ()


def _f8_dot(x: Any, w: Any) -> Any:
    return jnp.dot(x, w, preferred_element_type=jnp.float32)


@pytest.mark.parametrize(
    ("dtype", "platform", "device", "expected"),
    [
        ("float8_e4m3fn", "rocm", "mi300", {"float8-variant"}),
        ("float8_e4m3fn", "cuda", "h100", set()),
        ("float8_e4m3fn", "rocm", "mi350", set()),
        ("float8_e4m3fn", "cuda", "a100", {"float8-matmul"}),
        ("float8_e4m3fn", "tpu", "v5e", {"float8-matmul"}),
        ("float8_e4m3fn", "tpu", "7x", set()),
        ("float8_e4m3fnuz", "rocm", "mi300", set()),
        ("float8_e4m3fnuz", "rocm", "mi350", {"float8-variant"}),
        ("float8_e4m3fnuz", "cuda", "h100", {"float8-variant"}),
    ],
)
def test_float8_variants_per_vendor_and_generation(
    dtype: str, platform: str, device: str, expected: set[str]
) -> None:
    kind = getattr(jnp, dtype)
    x, w = jnp.ones((1024, 128), kind), jnp.ones((128, 128), kind)
    result = census(_f8_dot, x, w, platform=platform, device=device)
    formats = {f.rule for f in result.findings if f.kind == "format"}
    assert formats == expected
    for finding in result.findings:
        if finding.kind == "format":
            assert finding.formats == (dtype,)
            assert finding.location is not None
            assert finding.location.line == line_of(_f8_dot)


def _default(x: Any, w: Any) -> Any:
    return x @ w


def _highest(x: Any, w: Any) -> Any:
    return jnp.dot(x, w, precision="highest")


def _algorithm(x: Any, w: Any) -> Any:
    return jnp.dot(x, w, precision=lax.DotAlgorithmPreset.F32_F32_F32)


@pytest.mark.parametrize(
    ("platform", "device", "flagged"),
    [
        ("cuda", "h100", True),
        ("cuda", "a100", True),
        ("cuda", "v100", False),  # no TF32 before Ampere
        ("tpu", None, True),
        ("rocm", None, False),
        ("cpu", None, False),
    ],
)
def test_a_float32_dot_at_the_default_precision(
    platform: str, device: str | None, flagged: bool
) -> None:
    x, w = jnp.ones((64, 128)), jnp.ones((128, 128))
    found = census(_default, x, w, platform=platform, device=device)
    assert ("float32-default-precision" in rules(found)) == flagged
    for pinned in (_highest, _algorithm):
        assert "float32-default-precision" not in rules(
            census(pinned, x, w, platform=platform, device=device)
        )
    # bfloat16 operands are not float32 dots, whatever they accumulate in
    bf16 = census(_default, x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), platform=platform)
    assert "float32-default-precision" not in rules(bf16)


def test_the_default_matmul_precision_setting_pins_it_too() -> None:
    x, w = jnp.ones((64, 128)), jnp.ones((128, 128))
    with jax.default_matmul_precision("highest"):
        pinned = census(_default, x, w, platform="tpu")
    assert "float32-default-precision" not in rules(pinned)


def _batch_100(x: Any, w: Any) -> Any:
    return x @ w


def test_padding_of_a_batch_by_100_float32_matmul_on_tpu() -> None:
    """x (1024, 100) f32: 409,600 bytes in 425,984, the 1024 minor and 100 padded to 104
    rows; w (100, 128) f32: 51,200 bytes (under 64 KiB: left out); the result (1024, 128)
    f32 pads nothing. The dot moves 425,984 + 524,288 tiled bytes, 16,384 of them padding."""
    x, w = jnp.ones((1024, 100)), jnp.ones((100, 128))
    result = census(_batch_100, x, w, platform="tpu")
    (padding,) = result.by_rule("tile-padding")
    assert padding.amount == 16_384
    assert padding.of == 425_984 + 524_288
    assert result.padding_bytes == (16_384, 950_272)
    assert result.padding_waste == 16_384 / 950_272
    assert padding.detail == "float32[1024,100] as {0,1:T(8,128)}: 104x1024"
    assert padding.location is not None
    assert padding.location.line == line_of(_batch_100)
    # Counting every array, w too: its 128 minor, 100 rows pad to 104: 2,048 more bytes of
    # padding in 53,248 more.
    everything = take_format_census(program(_batch_100, x, w, platform="tpu"), "tpu", large_bytes=0)
    assert everything.padding_bytes == (16_384 + 2_048, 950_272 + 53_248)
    # The MXU: 100 of 128 contracting rows used.
    (mxu,) = result.by_rule("matrix-unit-misaligned")
    assert mxu.fraction == 28 / 128
    # (1024, 128): nothing pads, nothing idles; no padding on a platform without tiles.
    aligned = census(_batch_100, jnp.ones((1024, 128)), jnp.ones((128, 128)), platform="tpu")
    # Nothing pads, but its large arrays are what a padding share is a share of: x and the
    # result (1024, 128) and w (128, 128), exactly 64 KiB, in float32 tiles.
    assert aligned.padding_bytes == (0, 2 * 1024 * 128 * 4 + 128 * 128 * 4)
    assert aligned.padding_waste == 0.0
    assert aligned.padding_waste == 0.0
    assert not aligned.by_rule("matrix-unit-misaligned")
    assert census(_batch_100, x, w, platform="cuda").padding_bytes == (0, 0)


def _conv(x: Any, k: Any, dims: tuple[str, str, str]) -> Any:
    return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=dims)


NCHW = ("NCHW", "OIHW", "NCHW")
NHWC = ("NHWC", "OHWI", "NHWC")
NHWC_HWIO = ("NHWC", "HWIO", "NHWC")


def _conv_args(dims: tuple[str, str, str], dtype: Any = jnp.float32) -> tuple[Any, Any]:
    shapes = {"NCHW": (8, 64, 32, 32), "NHWC": (8, 32, 32, 64)}
    kernels = {"OIHW": (64, 64, 3, 3), "OHWI": (64, 3, 3, 64), "HWIO": (3, 3, 64, 64)}
    return jnp.ones(shapes[dims[0]], dtype), jnp.ones(kernels[dims[1]], dtype)


@pytest.mark.parametrize(
    ("dims", "platform", "device", "moved"),
    [
        (NCHW, "tpu", None, "input, output"),
        (NCHW, "cuda", "h100", "input, kernel, output"),
        (NCHW, "cpu", None, "input, kernel, output"),
        (NCHW, "rocm", "mi300", None),  # MIOpen runs NCHW
        (NCHW, "cuda", "a100", None),  # float32 before Hopper: NCHW
        (NHWC, "cuda", "h100", None),
        (NHWC, "tpu", None, None),
        (NHWC, "rocm", "mi300", "input, kernel, output"),
        (NHWC_HWIO, "cuda", "h100", "kernel"),
        (NHWC_HWIO, "cpu", None, None),
    ],
)
def test_convolution_layouts_flagged_where_the_rules_say(
    dims: tuple[str, str, str], platform: str, device: str | None, moved: str | None
) -> None:
    x, k = _conv_args(dims)
    found = census(lambda x, k: _conv(x, k, dims), x, k, platform=platform, device=device)
    relayouts = found.by_rule("convolution-relayout")
    if moved is None:
        assert relayouts == ()
        return
    (finding,) = relayouts
    assert f"{moved} relaid out" in finding.detail
    assert finding.location is not None
    assert finding.location.file == __file__


def test_a_bfloat16_nchw_convolution_before_hopper_is_relaid_out_too() -> None:
    x, k = _conv_args(NCHW, jnp.bfloat16)
    found = census(lambda x, k: _conv(x, k, NCHW), x, k, platform="cuda", device="a100")
    assert rules(found) == {"convolution-relayout"}


def test_an_8_bit_gemm_with_a_k_by_n_operand_is_relaid_out_on_cuda() -> None:
    x, w = jnp.ones((1024, 128), jnp.int8), jnp.ones((128, 256), jnp.int8)
    found = census(lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.int32), x, w,
                   platform="cuda")  # fmt: skip
    (finding,) = found.by_rule("dot-relayout")
    assert finding.detail.startswith("dot_general: rhs transposed")
    transposed = jnp.ones((256, 128), jnp.int8)
    minor = census(lambda x, w: lax.dot_general(x, w, (((1,), (1,)), ((), ())),
                                                preferred_element_type=jnp.int32),
                   x, transposed, platform="cuda")  # fmt: skip
    assert minor.by_rule("dot-relayout") == ()


# --- the compiled level --------------------------------------------------------------------


def _relaid(dims: tuple[str, str, str], dtype: Any = jnp.float32) -> tuple[int, int, int]:
    x, k = _conv_args(dims, dtype)
    size = np.dtype(dtype).itemsize
    return math.prod(x.shape) * size, math.prod(k.shape) * size, math.prod(x.shape) * size


def _subset_sums(sizes: tuple[int, int, int]) -> set[int]:
    """The bytes relayouts can write around a convolution: its input, and any of its kernel
    and output (XLA may fold one into a neighbour's kernel, or need none)."""
    source, kernel, output = sizes
    return {source + kernel * a + output * b for a in (0, 1) for b in (0, 1)}


def _conv_nchw(x: Any, k: Any) -> Any:
    return jnp.tanh(_conv(x, k, NCHW))


def _conv_nhwc(x: Any, k: Any) -> Any:
    return jnp.tanh(_conv(x, k, NHWC_HWIO))


def test_the_compiled_cpu_program_counts_relayouts_around_an_nchw_convolution() -> None:
    x, k = _conv_args(NCHW)
    text = jax.jit(_conv_nchw).lower(x, k).compile().as_text()
    result = take_format_census(parse_compiled_hlo(text), "cpu", level="compiled")
    (finding,) = result.by_rule("inserted-relayout")
    assert finding.level == "compiled"
    assert finding.location is not None
    assert finding.location.line == line_of(_conv)
    assert finding.amount in _subset_sums(_relaid(NCHW))
    assert result.relayout_bytes == finding.amount
    x, k = _conv_args(NHWC_HWIO)
    text = jax.jit(_conv_nhwc).lower(x, k).compile().as_text()
    assert take_format_census(parse_compiled_hlo(text), "cpu", level="compiled").findings == ()


@pytest.fixture(scope="module")
def h100() -> str:
    problem = cuda_plugin_problem()
    if problem is not None:
        pytest.skip(f"deviceless CUDA compilation unavailable: {problem}")
    return load_gpu_description("h100")


def test_the_deviceless_cuda_program_counts_transposes_around_a_cudnn_convolution(
    h100: str,
) -> None:
    x, k = _conv_args(NCHW, jnp.bfloat16)
    text = deviceless_compile(_conv_nchw, (x, k), {}, target_config=h100)
    result = take_format_census(parse_compiled_hlo(text), "cuda", level="compiled")
    (finding,) = result.by_rule("inserted-relayout")
    assert "around __cudnn$conv" in finding.detail
    assert finding.location is not None
    assert finding.location.line == line_of(_conv)
    assert finding.amount in _subset_sums(_relaid(NCHW, jnp.bfloat16))
    nhwc = (jnp.ones((8, 32, 32, 64), jnp.bfloat16), jnp.ones((64, 3, 3, 64), jnp.bfloat16))
    text = deviceless_compile(lambda x, k: jnp.tanh(_conv(x, k, NHWC)), nhwc, {},
                              target_config=h100)  # fmt: skip
    assert take_format_census(parse_compiled_hlo(text), "cuda", level="compiled").findings == ()


def test_the_deviceless_cuda_program_counts_the_transpose_before_a_cublas_float8_gemm(
    h100: str,
) -> None:
    """cuBLAS's FP8 GEMM takes both operands K-minor: w (128, 256) is transposed by a kernel
    of its own, 128 * 256 one-byte elements (XLA's Triton GEMM, its default without
    autotuning, transposes inside the GEMM instead: nothing to count then)."""
    kind = jnp.float8_e4m3fn
    x, w = jnp.ones((1024, 128), kind), jnp.ones((128, 256), kind)
    cublas = {"xla_gpu_enable_triton_gemm": False}
    text = deviceless_compile(_f8_dot, (x, w), {}, target_config=h100, compiler_options=cublas)
    result = take_format_census(parse_compiled_hlo(text), "cuda", level="compiled")
    (finding,) = result.by_rule("inserted-relayout")
    assert "1 transposes/copies (1 kernels of their own" in finding.detail
    assert "around __cublas$lt$matmul" in finding.detail
    assert finding.amount == 128 * 256
    assert finding.location is not None
    assert finding.location.line == line_of(_f8_dot)


# --- real library code ---------------------------------------------------------------------


def _library(name: str) -> Any:
    return pytest.importorskip(name, reason=f"{name} is not installed")


def _inert(fn: Callable[..., Any], *args: Any, platform: str) -> Program:
    """A library function's program for an absent platform, its host callbacks (equinox's
    runtime checks) made inert as the plugin does."""
    traced = tracing.trace(fn, args, {})
    quiet = callbacks.inert(traced.traced)
    return stablehlo.read_program(lowering.lower(quiet, platform))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_flax_cnn_in_float32_and_in_bfloat16(dtype: str) -> None:
    nn = _library("flax.linen")
    kind = getattr(jnp, dtype)

    class Net(nn.Module):  # type: ignore[misc,name-defined]
        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.Conv(32, (3, 3), dtype=kind, param_dtype=kind)(x)
            x = nn.relu(x).reshape((x.shape[0], -1))
            return nn.Dense(10, dtype=kind, param_dtype=kind)(x)

    model = Net()
    images = jnp.ones((4, 16, 16, 3), kind)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), images)  # types suffice

    def apply(params: Any, images: Any) -> Any:
        return model.apply(params, images)

    on_tpu = take_format_census(program(apply, params, images, platform="tpu"), "tpu")
    precision = on_tpu.by_rule("float32-default-precision")
    if dtype == "float32":  # the conv and the dense, at the lines of Net that call them
        assert sorted(f.ops for f in precision) == [("convolution",), ("dot_general",)]
        assert all(f.location and f.location.file == __file__ for f in precision)
    else:
        assert precision == ()
    v100 = take_format_census(program(apply, params, images, platform="cuda"), "cuda",
                              device=device_for("cuda", "v100"))  # fmt: skip
    assert bool(v100.by_rule("bfloat16-matmul")) == (dtype == "bfloat16")
    # flax is NHWC/HWIO: MIOpen transposes both; cuDNN on Hopper the kernel (to OHWI).
    rocm = take_format_census(program(apply, params, images, platform="rocm"), "rocm")
    assert "input, kernel, output relaid out" in rocm.by_rule("convolution-relayout")[0].detail
    h100 = take_format_census(program(apply, params, images, platform="cuda"), "cuda")
    assert "kernel relaid out" in h100.by_rule("convolution-relayout")[0].detail


@pytest.mark.slow
def test_an_equinox_mlp_in_float32_on_tpu() -> None:
    eqx = _library("equinox")
    mlp = eqx.nn.MLP(in_size=100, out_size=10, width_size=128, depth=2, key=jax.random.PRNGKey(0))

    def forward(x: Any) -> Any:
        return jax.vmap(mlp)(x)

    result = take_format_census(_inert(forward, jnp.ones((512, 100)), platform="tpu"), "tpu")
    (finding,) = result.by_rule("float32-default-precision")
    assert finding.count == 3  # three Linear layers, at the line that calls the model
    assert finding.location is not None
    assert finding.location.line == line_of(forward)


@pytest.mark.slow
def test_a_diffrax_solve_under_x64_on_tpu() -> None:
    diffrax = _library("diffrax")

    def solve(y0: Any) -> Any:
        term = diffrax.ODETerm(lambda t, y, args: -y)
        return diffrax.diffeqsolve(term, diffrax.Dopri5(), t0=0.0, t1=3.0, dt0=0.1, y0=y0,
                                   stepsize_controller=diffrax.PIDController(rtol=1e-5, atol=1e-5),
                                   ).ys  # fmt: skip

    with x64():
        read = _inert(solve, jnp.ones((4,)), platform="tpu")
        cuda = _inert(solve, jnp.ones((4,)), platform="cuda")
    result = take_format_census(read, "tpu")
    emulated = result.by_rule("float64-emulated")
    assert emulated
    assert all(f.location and f.location.file == __file__ for f in emulated)
    nextafter = any(
        site.op in ("chlo.next_after", "stablehlo.bitcast_convert")
        and any("f64" in t for t in site.operand_types)
        for sites in read.functions.values()
        for site in sites
    )
    # equinox's nextafter (diffrax's step-size control) is the op that does not compile
    assert bool(result.not_compiling) == nextafter
    assert take_format_census(cuda, "cuda").findings == ()


def test_a_suites_format_census_in_one_pass_is_the_sum_one_by_one() -> None:
    """An audited suite adds up every computation's findings per platform (issue 55, item
    18): ``plus`` in one pass gives what adding them one by one gives, findings at each line,
    formats, lines kept and tiled bytes."""
    a = jnp.ones((100, 100), jnp.bfloat16)
    b = jnp.ones((37, 5), jnp.float32)
    functions = [
        lambda x, y: (x @ x, y.T @ y),
        lambda x, y: (x.astype(jnp.float32) @ x.astype(jnp.float32), y * 2),
        lambda x, y: (jnp.dot(x, x, preferred_element_type=jnp.float32), y @ y.T),
        lambda x, y: (x @ x, y.T @ y),
    ]
    found = [census(f, a, b, platform="tpu") for f in functions]
    assert any(f.findings for f in found)
    assert any(f.formats for f in found)
    one_by_one = found[0]
    for f in found[1:]:
        one_by_one = one_by_one + f
    together = found[0].plus(found[1:])
    assert together == one_by_one
    assert together.tiled_bytes == sum(f.tiled_bytes for f in found)
    assert sum(f.count for f in together.findings) == sum(
        f.count for c in found for f in c.findings
    )
    assert sum(together.formats.values()) == sum(n for c in found for n in c.formats.values())
