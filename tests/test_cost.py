"""Tests of pytest_jaxport.model.cost, model.runtime_share and model.roofline.

Runtime share arithmetic, roofline peaks, kernels to rewrite and the days model."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from pytest_jaxport._jax.profile import Event, measure, self_times
from pytest_jaxport.model.census import Census, Kernel, OpSite, SourceLocation
from pytest_jaxport.model.cost import COST_KEYS, CostModel, estimate, rewrite_items
from pytest_jaxport.model.flops import op_cost, tensor_shape
from pytest_jaxport.model.roofline import (
    DEFAULT_PEAKS,
    ESTIMATE_ERROR,
    EVERY_PLATFORM,
    Calibration,
    Peak,
    estimated_share,
    kernel_seconds,
    peak_for,
    peak_from_target,
    read_estimate_errors,
)
from pytest_jaxport.model.runtime_share import (
    Ranking,
    RuntimeShare,
    combine,
    ranking_of,
    share_basis,
    share_of,
)

TARGETS = Path(__file__).parents[1] / "pytest_jaxport" / "gpu_targets"


def loc(line: int) -> SourceLocation:
    return SourceLocation(file="k.py", line=line)


TRITON = Kernel(layer="custom", name="__gpu$xla.gpu.triton", kind="pallas-triton", location=loc(3))
FMHA = Kernel(layer="vendor", name="__cudnn$fmhaSoftmax", kind="attention", library="cudnn",
              location=loc(9))  # fmt: skip
GEMM = Kernel(layer="vendor", name="stablehlo.dot_general", kind="gemm", library="cublas",
              location=loc(5))  # fmt: skip
CUDA = Census(platform="cuda", kernels=(TRITON, FMHA, GEMM))


def test_share_sums_to_one_and_leaves_meta_out() -> None:
    share = share_of(
        [("xla", None, 1.0), ("vendor", "lapack", 2.0), ("custom", None, 1.0), ("meta", None, 9.0)],
        "measured",
    )
    assert share.seconds == 4.0
    assert share.layers == {"xla": 0.25, "vendor": 0.5, "custom": 0.25}
    assert share.libraries == {"lapack": 0.5}
    assert sum(share.layers.values()) == pytest.approx(1.0)
    assert RuntimeShare.from_dict(share.to_dict()) == share


def test_combine_weights_by_time() -> None:
    fast = share_of([("xla", None, 1.0)], "estimated")
    slow = share_of([("vendor", "cublas", 3.0)], "estimated")
    total = combine([fast, slow])
    assert total is not None
    assert total.layers["vendor"] == pytest.approx(0.75)
    assert total.libraries == {"cublas": pytest.approx(0.75)}
    assert (total.basis, total.checks, total.left_out) == ("estimated", 2, 0)
    measured = combine([share_of([("xla", None, 1.0)], "measured")] * 2)
    assert measured is not None
    assert (measured.basis, measured.checks) == ("measured", 2)
    assert combine([]) is None


def test_a_measured_total_leaves_the_estimated_checks_out_and_says_so() -> None:
    measured = share_of([("xla", None, 1.0), ("vendor", "lapack", 1.0)], "measured")
    estimated = replace(
        share_of([("vendor", "cublas", 50.0)], "estimated"),
        estimated_from="lowered",
        error_points=38.0,
    )
    total = combine([measured, estimated, measured])
    assert total is not None
    # The estimate's seconds are a model's: they never outweigh the measured checks.
    assert total.basis == "measured"
    assert total.layers["vendor"] == pytest.approx(0.5)
    assert (total.checks, total.left_out) == (2, 1)
    assert total.left_out_share is not None
    assert total.left_out_share.layers["vendor"] == pytest.approx(1.0)
    assert total.left_out_share.error_points == 38.0
    assert RuntimeShare.from_dict(total.to_dict()) == total
    assert "left_out" not in measured.to_dict()  # new keys are optional, absent when unset


def test_peak_from_shipped_h100_description() -> None:
    peak = peak_from_target((TARGETS / "h100.txtpb").read_text(), source="h100")
    assert peak is not None
    # 132 SMs x 128 FP32 lanes x 2 x ~1.98 GHz is the datasheet's ~67 TFLOP/s.
    assert peak.flops == pytest.approx(DEFAULT_PEAKS["cuda"].flops, rel=0.05)
    assert peak.bandwidth == pytest.approx(3.35e12, rel=0.05)
    assert peak_from_target("core_count: 3", source="x") is None


def test_a_kernel_costs_its_fixed_costs_plus_the_slower_of_arithmetic_and_memory() -> None:
    peak = Peak(flops=10.0, bandwidth=2.0, launch=1.0, library_call=5.0, source="test")
    calibration = Calibration(solver=0.5, fft=0.25, source="test")

    def seconds(op: str, layer: str, target: str | None = None, **cost: float) -> float:
        return kernel_seconds(OpSite(op=op, target=target, **cost), layer, peak, calibration)

    assert seconds("hlo.fusion:kLoop", "xla", flops=100.0, bytes=4.0) == 1.0 + 10.0
    assert seconds("hlo.fusion:kLoop", "xla", flops=2.0, bytes=40.0) == 1.0 + 20.0
    assert seconds("hlo.dot", "vendor", flops=100.0) == 1.0 + 5.0 + 10.0
    assert seconds("hlo.custom_call", "vendor", "lapack_sgetrf_ffi", flops=100.0) == 26.0
    assert seconds("hlo.fft", "vendor", flops=100.0) == 1.0 + 5.0 + 40.0
    # A lowered element-wise op is fused with its neighbours: a quarter of a kernel.
    assert seconds("stablehlo.add", "xla", flops=10.0, bytes=4.0) == 0.25 * (1.0 + 2.0)
    assert seconds("stablehlo.dot_general", "vendor", flops=10.0) == 7.0
    assert seconds("stablehlo.constant", "xla", flops=10.0) == 0.0


def test_every_renderer_says_what_a_share_rests_on() -> None:
    estimated = {"basis": "estimated", "estimated_from": "compiled", "error_points": 9.6}
    assert share_basis(estimated) == (
        "estimated (roofline from the compiled program, ±10 points on the fidelity corpus)"
    )
    assert share_basis({"basis": "estimated"}) == "estimated (roofline)"  # an older report
    assert share_basis({"basis": "measured", "checks": 3}) == "measured"
    assert share_basis({"basis": "measured", "checks": 3, "left_out": 2}) == (
        "measured over 3 of 5 checks (2 not measured, left out)"
    )
    from pytest_jaxport.view import html as html_report
    from pytest_jaxport.view.viewmodel.shares import share_row

    row = share_row("cuda", RuntimeShare.from_dict(estimated))
    assert row.label == share_basis(estimated)  # every format's label
    assert row.short == "estimated ±10"  # the terminal's, spelled out once in a note
    badge = html_report._badge(row)  # a few words, the whole basis as its tooltip
    assert badge.startswith('<span class="badge estimated" title="estimated (roofline from the')
    assert badge.endswith(">estimated ±10</span>")
    table = html_report.share_table([row], "shares")  # and spelled out once under the table
    assert "<strong>estimated ±10</strong>: estimated (roofline from the compiled program, ±10 " \
        "points on the fidelity corpus)" in table  # fmt: skip


def test_a_share_whose_band_reaches_zero_is_a_ranking() -> None:
    """The one rule: an estimate is a ranking, not a share, where its band is at least as
    wide as the smaller of its two largest layers' shares."""

    def share(xla: float, vendor: float, custom: float = 0.0, **more: object) -> dict[str, object]:
        return {"basis": "estimated", "error_points": 37.0, "xla": xla, "vendor": vendor,
                "custom": custom, **more}  # fmt: skip

    assert ranking_of(share(0.7, 0.3)) == Ranking(band=37.0, layer="vendor", fraction=0.3)
    assert ranking_of(share(0.63, 0.37)) is not None  # as wide as the share: it could be none
    assert ranking_of(share(0.6, 0.4)) is None  # both layers take real time
    assert ranking_of(share(0.52, 0.03, 0.45)) is None  # the two largest split it
    assert ranking_of(share(0.97, 0.0, 0.03)) == Ranking(band=37.0, layer="custom", fraction=0.03)
    assert ranking_of(share(0.26, 0.71, 0.03)) == Ranking(band=37.0, layer="xla", fraction=0.26)
    assert ranking_of(share(0.74, 0.25, 0.01, error_points=10)) is None  # the compiled band
    assert ranking_of(share(0.98, 0.02, error_points=10)) is not None
    assert ranking_of(share(1.0, 0.0)) is None  # all in one layer: no split to rank
    assert ranking_of(share(0.35, 0.15)) is not None  # fractions of the time shown: 70/30
    assert ranking_of(share(0.7, 0.3, basis="measured")) is None  # no band
    assert ranking_of(share(0.7, 0.3, error_points=None)) is None  # an older report
    assert ranking_of(share(0.7, 0.3, error_points=float("nan"))) is None
    assert ranking_of(share(0.7, "0.3")) is None  # malformed: one layer with time


def test_the_reference_gives_every_cost_default_and_what_it_rests_on() -> None:
    """docs/reference.md's ``[tool.jaxport.cost]`` table: every key of the cost model, its
    default as the model has it, and a basis that says it is an assumption (none is
    measured)."""
    text = (Path(__file__).parents[1] / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text[text.index("### `[tool.jaxport.cost]`") :]
    section = section[: section.index("\n### ")]
    rows = re.findall(r"^\| `(\w+)` \| ([\d.]+) \| [^|]+ \| ([^|]+) \|$", section, re.M)
    model = CostModel()
    assert [key for key, _, _ in rows] == list(COST_KEYS)
    for key, default, basis in rows:
        assert float(default) == getattr(model, key), key
        assert basis.startswith("an assumption: set your own."), key
    assert "No default is measured." in section


def test_cuda_peak_comes_from_the_gpu_description_and_others_from_their_defaults() -> None:
    a100 = (TARGETS / "a100.txtpb").read_text()
    described = peak_for("cuda", target_config=a100, target="a100")
    assert described.flops < DEFAULT_PEAKS["cuda"].flops  # an A100 is slower than an H100
    assert described.launch == DEFAULT_PEAKS["cuda"].launch
    assert "a100" in described.source
    assert peak_for("cuda") == DEFAULT_PEAKS["cuda"]
    assert peak_for("rocm", target_config=a100) == DEFAULT_PEAKS["rocm"]
    assert peak_for("metal") == DEFAULT_PEAKS["cpu"]


def test_an_estimated_share_names_its_census_level_and_measured_error() -> None:
    compiled = Census(
        platform="cuda",
        level="compiled",
        estimated_seconds=(("xla", None, 1.0), ("vendor", "cublas", 3.0)),
    )
    share = estimated_share(compiled)
    assert share is not None
    assert (share.basis, share.estimated_from) == ("estimated", "compiled")
    assert share.error_points == ESTIMATE_ERROR["compiled"].points
    assert share.layers["vendor"] == pytest.approx(0.75)
    lowered = estimated_share(replace(compiled, level="lowered"))
    assert lowered is not None
    assert lowered.error_points == ESTIMATE_ERROR["lowered"].points
    assert estimated_share(Census(platform="cuda")) is None


GPU_BANDS = """{"default": {"lowered": {"points": 37, "programs": 60, "device": "cpu",
                                   "jaxlib": "0.10.2"},
                       "compiled": {"points": 10, "programs": 60, "device": "cpu"}},
          "platforms": {"cuda": {"lowered": {"points": 21, "programs": 40,
                                             "device": "NVIDIA H200", "jaxlib": "0.11.2"}}}}"""


def test_a_platform_measured_on_its_own_hardware_gets_its_own_band_naming_the_device() -> None:
    table = read_estimate_errors(GPU_BANDS, source="bands.json")
    census = Census(platform="cuda", level="lowered", estimated_seconds=(("xla", None, 1.0),))
    share = estimated_share(census, table)
    assert share is not None
    assert (share.error_points, share.error_measured_on) == (21.0, "NVIDIA H200")
    assert share_basis(share.to_dict()) == (
        "estimated (roofline from the lowered program, ±21 points on NVIDIA H200)"
    )
    assert RuntimeShare.from_dict(share.to_dict()) == share
    # Without a band of its own (rocm; cuda's compiled level) the default, measured on cpu.
    rocm = estimated_share(replace(census, platform="rocm"), table)
    compiled = estimated_share(replace(census, level="compiled"), table)
    assert rocm is not None
    assert compiled is not None
    assert (rocm.error_points, rocm.error_measured_on) == (37.0, "cpu")
    assert (compiled.error_points, compiled.error_measured_on) == (10.0, "cpu")
    assert table[EVERY_PLATFORM]["lowered"].measured_on == "cpu, jaxlib 0.10.2"
    # A suite total keeps the worst part's band and where it was measured.
    total = combine([share, replace(rocm, error_points=50.0, error_measured_on="cpu")])
    assert total is not None
    assert (total.error_points, total.error_measured_on) == (50.0, "cpu")


def test_the_shipped_bands_were_measured_on_cpu() -> None:
    """Until a GPU run is adopted, cuda's band is cpu's: the JSON says so, and the label is
    the fidelity corpus's (measured on cpu, as the docs say), with no device named."""
    census = Census(platform="cuda", level="lowered", estimated_seconds=(("xla", None, 1.0),))
    share = estimated_share(census)
    assert share is not None
    assert share.error_measured_on == ESTIMATE_ERROR["lowered"].device == "cpu"
    assert share_basis(share.to_dict()) == (
        "estimated (roofline from the lowered program, ±37 points on the fidelity corpus)"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "bands.json: not JSON"),
        ("[]", "bands.json: expected an object with a 'default' table"),
        ('{"default": {"lowered": {"points": "x", "programs": 1}}}',
         "bands.json: 'default.lowered' needs a number 'points' and an integer 'programs'"),
        ('{"default": {}, "platforms": {"cuda": 3}}',
         "bands.json: 'platforms.cuda' must be an object of census levels"),
    ],
)  # fmt: skip
def test_a_malformed_band_file_is_named_with_its_key(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        read_estimate_errors(text, source="bands.json")


def test_rewrite_items_per_target() -> None:
    mosaic = Kernel(
        layer="custom", name="tpu_custom_call", kind="pallas-mosaic-tpu", location=loc(3)
    )
    tpu = Census(platform="tpu", kernels=(mosaic,))
    rocm = Census(platform="rocm")
    # The Pallas kernel has a TPU variant at the same line: only the cuDNN gap remains.
    tpu_items = rewrite_items(check="c", target="tpu", nvidia=CUDA, on_target=tpu)
    assert [(i.status, i.name) for i in tpu_items] == [("vendor-gap", "__cudnn$fmhaSoftmax")]
    [fallback, gap] = rewrite_items(check="c", target="rocm", nvidia=CUDA, on_target=rocm)
    assert (fallback.status, fallback.name) == ("fallback", "__gpu$xla.gpu.triton")
    assert "performance not guaranteed" in fallback.describe()
    assert (gap.status, gap.name) == ("vendor-gap", "__cudnn$fmhaSoftmax")
    [rewrite, _] = rewrite_items(
        check="c", target="rocm", nvidia=CUDA, on_target=None, target_error="ValueError: x"
    )
    assert rewrite.status == "rewrite"
    assert "ValueError: x" in rewrite.reason
    assert rewrite_items(check="c", target="rocm", nvidia=None, on_target=rocm) == []


def test_the_tpu_runtimes_routines_are_no_vendor_gap_moving_off_tpu() -> None:
    """Issue 55: libtpu's LU, triangular inverses, eigh, QR and Cholesky (as the compiled
    level names them, and the custom calls JAX lowers for tpu) have cuSOLVER's, hipSOLVER's
    and LAPACK's routines as counterparts: a move off tpu prices none of them as a gap."""
    routines = [
        ("EighTpu", "eigh"), ("LuDecompositionBlock", "lu"), ("LuDecomposition", "lu"),
        ("InvertDiagBlocksLowerTriangular", "triangular-inverse"),
        ("InvertDiagBlocksUpperTriangular", "triangular-inverse"),
        ("QrDecompositionBlock", "qr"), ("Cholesky", "cholesky"), ("TopK", "topk"),
        ("stablehlo.triangular_solve", "triangular-solve"),
    ]  # fmt: skip
    tpu = Census(platform="tpu", kernels=tuple(
        Kernel(layer="vendor", name=name, kind=kind, library="libtpu", location=loc(35))
        for name, kind in routines
    ))  # fmt: skip
    for target in ("cuda", "rocm", "cpu"):
        on_target = Census(platform=target, kernels=(GEMM,))
        assert rewrite_items(check="c", target=target, nvidia=tpu, on_target=on_target) == []
    # cuDNN's fused attention still has none on tpu.
    [gap] = rewrite_items(check="c", target="tpu", nvidia=CUDA, on_target=tpu)[1:]
    assert (gap.status, gap.kind) == ("vendor-gap", "attention")


def test_estimate_prices_each_distinct_item_once() -> None:
    items = rewrite_items(check="a", target="rocm", nvidia=CUDA, on_target=Census(platform="rocm"))
    again = rewrite_items(check="b", target="rocm", nvidia=CUDA, on_target=Census(platform="rocm"))
    model = CostModel(fallback_validation=2.0, vendor_gap=4.0, tooling_assumption=1.0, fixed=3.0)
    result = estimate("rocm", items + again, model=model, tooling_assumptions=2)
    assert result.kernels_to_rewrite == 1
    assert result.breakdown == {
        "kernel_rewrite": 0.0, "fallback_validation": 2.0, "vendor_gap": 4.0,
        "tooling_assumption": 2.0, "fixed": 3.0,
    }  # fmt: skip
    assert result.days == 11.0
    priced = estimate("rocm", items, model=model, priced={items[0]: 20.0})
    assert priced.breakdown["fallback_validation"] == 20.0
    assert estimate("tpu", [], model=model).days == model.fixed


def test_self_times_subtract_nested_events() -> None:
    lines = [
        [Event(op="while.1", start_ns=0, end_ns=100), Event(op="dot.1", start_ns=10, end_ns=40),
         Event(op="dot.1", start_ns=50, end_ns=80), Event(op="add", start_ns=100, end_ns=110)],
        [Event(op="dot.1", start_ns=0, end_ns=5)],
    ]  # fmt: skip
    assert self_times(lines) == {"while.1": 40.0, "dot.1": 65.0, "add": 10.0}


def test_measure_attributes_real_profiler_events_to_instructions(measured_basis: str) -> None:
    if measured_basis != "measured":
        pytest.skip("this jaxlib's profiler reports no per-instruction events (needs 0.8.3+)")

    def f(a):
        return jnp.linalg.eigh(a @ a.T)[0].sum()

    a = jnp.ones((64, 64)) + jnp.eye(64)
    compiled = jax.jit(f).trace(a).lower(lowering_platforms=("cpu",)).compile()
    times = measure(lambda: jax.block_until_ready(compiled(a)), runs=2)
    names = compiled.as_text()
    assert times, "the profiler recorded no hlo_op events"
    assert all(f"%{op} " in names or f"{op} =" in names for op in times), times
    assert max(times, key=times.__getitem__).startswith("eigh")


def test_a_kernel_site_has_one_status_per_target() -> None:
    """One check falls back on tpu (generic code there), another with the same kernel at the
    same line does not lower on tpu at all: the site is one rewrite, priced once."""
    tpu = Census(platform="tpu")
    fallback = rewrite_items(check="a", target="tpu", nvidia=CUDA, on_target=tpu)
    rewrite = rewrite_items(
        check="b", target="tpu", nvidia=CUDA, on_target=None, target_error="NotImplementedError"
    )
    model = CostModel()
    for items in (fallback + rewrite, rewrite + fallback):
        result = estimate("tpu", items, model=model)
        assert [(i.status, i.name) for i in result.items] == [
            ("rewrite", "__gpu$xla.gpu.triton"),
            ("vendor-gap", "__cudnn$fmhaSoftmax"),
        ]
        assert result.items[0].check == "b"  # the check where it does not lower
        assert result.kernels_to_rewrite == 1
        assert result.breakdown["kernel_rewrite"] == model.kernel_rewrite
        assert result.breakdown["fallback_validation"] == 0.0
        assert result.days == model.kernel_rewrite + model.vendor_gap + model.fixed


def test_a_complex_element_moves_both_of_its_parts() -> None:
    """A real FFT's lowered types: ``complex<f32>`` is 8 bytes an element, ``complex<f64>`` 16
    (the type's own ``x`` once cut it to its last part, 4 bytes: half the FFT's traffic)."""
    lowered = jax.jit(jnp.fft.fft).trace(jnp.ones(64, jnp.complex64)).lower().as_text()
    (types,) = re.findall(r"stablehlo\.fft.*: \((tensor<[^)]*>)\) -> (tensor<\S*>)", lowered)
    assert types == ("tensor<64xcomplex<f32>>", "tensor<64xcomplex<f32>>")
    flops, moved = op_cost("stablehlo.fft", None, [types[0]], [types[1]], {})
    assert (flops, moved) == (5 * 64 * 6, 64 * 8 * 2)  # 5 n log2 n; in and out once
    assert tensor_shape("tensor<2x3xcomplex<f64>>") == ((2, 3), 128)
    assert tensor_shape("tensor<?x4xbf16>") == ((1, 4), 16)
    assert tensor_shape("tensor<f32>") == ((), 32)
