"""pytest_jaxport.model.hlo and the compiled rows of the classification table: saved compiled
HLO, no devices.

The samples under ``tests/data/hlo`` are real ``compiled.as_text()`` output (CUDA ones from
deviceless compilation against the shipped H100 description); ``generate_samples.py``
there rebuilds them and marks each sample's source line with ``# SAMPLE:<name>``.
"""

from __future__ import annotations

import itertools
import re
from functools import cache
from pathlib import Path

import pytest

from pytest_jaxport.model.census import Census, OpSite, Program, parse_location, take_census
from pytest_jaxport.model.classification import (
    CLASSIFICATION_RULES,
    COMPILED_RULES,
    Classification,
    classify,
)
from pytest_jaxport.model.hlo import CALL_OP, parse_compiled_hlo

DATA = Path(__file__).parent / "data" / "hlo"
GENERATOR = DATA / "generate_samples.py"


def sample(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


@cache
def program(name: str) -> Program:
    return parse_compiled_hlo(sample(name))


def compiled(platform: str, op: str, target: str | None = None) -> Classification:
    return classify(platform, op, target, level="compiled")


def census(name: str) -> Census:
    platform = name.split("_", 1)[0]
    return take_census(program(name), platform, level="compiled", classifier=compiled)


def all_sites(prog: Program) -> list[OpSite]:
    return [site for sites in prog.functions.values() for site in sites]


def ops(prog: Program) -> list[str]:
    return [site.op for site in all_sites(prog)]


def marked_line(name: str) -> int:
    for number, line in enumerate(GENERATOR.read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# SAMPLE:{name}"):
            return number
    raise AssertionError(f"no '# SAMPLE:{name}' line in {GENERATOR}")


def fused_computations(text: str) -> set[str]:
    return set(re.findall(r"\bfusion\(.*?calls=%([\w.\-]+)", text))


SAMPLES = sorted(path.stem for path in DATA.glob("*.txt"))


# --- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_parses_from_its_entry(name: str) -> None:
    text = sample(name)
    prog = program(name)
    entry = re.search(r"^ENTRY %([^\s(]+)", text, re.MULTILINE)
    assert entry is not None
    assert prog.entry == entry.group(1)
    assert prog.functions[prog.entry]


@pytest.mark.parametrize("name", SAMPLES)
def test_fused_computations_are_never_walked(name: str) -> None:
    fused = fused_computations(sample(name))
    assert fused.isdisjoint(program(name).functions)


@pytest.mark.parametrize("name", SAMPLES)
def test_only_dispatches_are_listed(name: str) -> None:
    listed = ops(program(name))
    for free in ("hlo.parameter", "hlo.constant", "hlo.get_tuple_element", "hlo.tuple"):
        assert free not in listed
    assert not [op for op in listed if op.endswith(("_done", "_update", "_start"))]


def test_a_triton_gemm_fusion_is_one_kernel_and_its_dot_is_not_counted() -> None:
    listed = ops(program("cuda_matmul"))
    assert listed.count("hlo.fusion:__triton_nested_gemm_fusion") == 1
    assert "hlo.dot" not in listed
    assert " dot(" in sample("cuda_matmul")  # the dot is there, inside the fusion


def test_custom_calls_carry_their_target() -> None:
    (site,) = [s for s in all_sites(program("cuda_conv")) if s.op == "hlo.custom_call"]
    assert site.target == "__cudnn$convForward"


def test_pallas_backend_config_blob_does_not_confuse_the_parser() -> None:
    sites = all_sites(program("cuda_pallas"))
    assert [(s.op, s.target) for s in sites] == [("hlo.custom_call", "__gpu$xla.gpu.triton")]


def test_cpu_library_fusions_carry_their_kind() -> None:
    assert "hlo.fusion:__ynn_fusion" in ops(program("cpu_matmul"))
    assert "hlo.fusion:__ynn_fusion" in ops(program("cpu_conv"))


def test_while_runs_its_condition_and_body_as_calls() -> None:
    prog = program("cuda_scan")
    entry = prog.functions[prog.entry]
    assert [s.op for s in entry].count("hlo.while") == 1
    callees = [s.target for s in entry if s.op == CALL_OP]
    assert len(callees) == 2
    body_ops = [op for callee in callees if callee for op in ops_of(prog, callee)]
    assert body_ops.count("hlo.fusion:__triton_nested_gemm_fusion") == 1
    assert "hlo.fusion:__custom_fusion$dynamic_slice_fusion" in body_ops


def ops_of(prog: Program, function: str) -> list[str]:
    return [site.op for site in prog.functions[function]]


@pytest.mark.parametrize("name", ["cuda_cond", "cpu_cond"])
def test_conditional_walks_every_branch(name: str) -> None:
    prog = program(name)
    entry = prog.functions[prog.entry]
    branches = [s.target for s in entry if s.op == CALL_OP]
    assert len(branches) == 2
    branch_ops = [op for b in branches if b for op in ops_of(prog, b)]
    assert "hlo.fft" in branch_ops
    sort = "hlo.sort" if name.startswith("cpu") else "hlo.fusion:kCustom"  # a fused sort
    assert sort in branch_ops


def test_async_collective_counts_once_under_the_op_it_starts() -> None:
    listed = ops(program("cuda_collective"))
    assert listed.count("hlo.all_reduce") == 1
    assert "all-reduce-done" in sample("cuda_collective")


@pytest.mark.parametrize(
    ("name", "marker"),
    [
        ("cuda_conv", "conv"),
        ("cuda_eigh", "eigh"),
        ("cuda_fft", "fft"),
        ("cuda_trisolve", "trisolve"),
        ("cuda_pallas", "pallas"),
        ("cuda_matmul_cublas", "matmul"),
        ("cuda_collective", "collective"),
        ("cuda_cond", "cond"),
        ("cpu_solve", "solve"),
        ("cpu_matmul", "matmul"),
    ],
)
def test_library_dispatches_point_at_the_users_line(name: str, marker: str) -> None:
    kernels = [k for k in census(name).kernels if k.layer != "xla"]
    assert kernels
    for kernel in kernels:
        assert kernel.location is not None
        assert Path(kernel.location.file).name == GENERATOR.name
        assert kernel.location.line == marked_line(marker)


def test_ops_inside_a_while_body_point_at_the_loop_body_line() -> None:
    prog = program("cuda_scan")
    (gemm,) = [s for s in all_sites(prog) if s.op == "hlo.fusion:__triton_nested_gemm_fusion"]
    location = parse_location(gemm.location)
    assert location is not None
    assert location.line == marked_line("scan")


def test_stack_frames_render_innermost_first_without_repeats() -> None:
    prog = program("cuda_scan")
    (gemm,) = [s for s in all_sites(prog) if s.op == "hlo.fusion:__triton_nested_gemm_fusion"]
    assert gemm.location is not None
    frames = re.findall(r'"([^"]+)"\("[^"]+":(\d+):\d+\)', gemm.location)
    assert frames[0][0] == "scan_mlp.<locals>.layer"
    assert all(a != b for a, b in itertools.pairwise(frames))


# --- hand-written modules: shapes the compiled samples above do not cover ----------------

CALLED_TWICE = """\
HloModule m

FileNames
1 "model.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=7 end_line=7 column=4 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=0}

%fused (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%p)
}

%helper (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %k = f32[8]{0} custom-call(%x), custom_call_target="my_kernel"
  ROOT %f = f32[8]{0} fusion(%k), kind=kLoop, calls=%fused
}

%wrapped (y: f32[8]) -> f32[8] {
  %y = f32[8]{0} parameter(0)
  ROOT %c = f32[8]{0} custom-call(%y), custom_call_target="__cublas$gemm"
}

%dsf_body (a: f32[4,8], i: s32[]) -> f32[8] {
  %a = f32[4,8]{1,0} parameter(0)
  %i = s32[] parameter(1)
  %z = s32[] constant(0)
  %s = f32[1,8]{1,0} dynamic-slice(%a, %i, %z), dynamic_slice_sizes={1,8}
  ROOT %g = f32[8]{0} custom-call(%s), custom_call_target="__cublas$lt$matmul"
}

ENTRY %main (a: f32[8], b: f32[4,8], i: s32[]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %b = f32[4,8]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %c1 = f32[8]{0} call(%a), to_apply=%helper, metadata={op_name="f" stack_frame_id=1}
  %c2 = f32[8]{0} call(%c1), to_apply=%helper, metadata={op_name="f" stack_frame_id=1}
  %s = ((f32[8]), f32[8], s32[]) async-start(%c2), calls=%wrapped
  %d = f32[8]{0} async-done(%s)
  %l = f32[8]{0} fusion(%b, %i), kind=kCustom, calls=%dsf_body, \
backend_config={"fusion_backend_config":{"kind":"__custom_fusion",\
"custom_fusion_config":{"name":"dynamic_slice_fusion"}}}
  ROOT %r = f32[8]{0} add(%d, %l), metadata={source_file="/src/old.py" source_line=3}
}
"""


def test_called_computations_count_once_per_call() -> None:
    result = take_census(
        parse_compiled_hlo(CALLED_TWICE), "cuda", level="compiled", classifier=compiled
    )
    (kernel,) = result.in_layer("custom")
    assert (kernel.name, kernel.count) == ("my_kernel", 2)
    assert kernel.location is not None
    assert (kernel.location.file, kernel.location.line) == ("model.py", 7)


def test_async_wrapped_and_dynamic_slice_wrapped_library_calls_are_the_dispatch() -> None:
    prog = parse_compiled_hlo(CALLED_TWICE)
    targets = [s.target for s in all_sites(prog) if s.op == "hlo.custom_call"]
    assert sorted(targets) == ["__cublas$gemm", "__cublas$lt$matmul", "my_kernel"]
    assert not [op for op in ops(prog) if op.startswith("hlo.fusion:__custom_fusion")]
    assert "dsf_body" not in prog.functions
    result = take_census(prog, "cuda", level="compiled", classifier=compiled)
    assert result.libraries() == {"cublas": 2}


def test_fused_computation_of_a_called_function_is_not_walked() -> None:
    prog = parse_compiled_hlo(CALLED_TWICE)
    assert "fused" not in prog.functions
    assert "hlo.negate" not in ops(prog)
    assert ops_of(prog, "helper") == ["hlo.custom_call", "hlo.fusion:kLoop"]


def test_legacy_source_file_metadata_becomes_a_location() -> None:
    prog = parse_compiled_hlo(CALLED_TWICE)
    (add,) = [s for s in prog.functions[prog.entry] if s.op == "hlo.add"]
    assert add.location == 'loc("/src/old.py":3:0)'


def test_parent_frame_ids_as_listed_when_the_root_reads_zero() -> None:
    text = CALLED_TWICE.replace(
        "1 {file_location_id=1 parent_frame_id=0}",
        "1 {file_location_id=1 parent_frame_id=0}\n2 {file_location_id=2 parent_frame_id=1}",
    ).replace(
        "FileLocations\n",
        "FileLocations\n2 {file_name_id=1 function_name_id=1 line=9 column=2}\n",
    )
    text = text.replace('op_name="f" stack_frame_id=1}', 'op_name="f" stack_frame_id=2}', 1)
    prog = parse_compiled_hlo(text)
    call = next(s for s in prog.functions[prog.entry] if s.op == CALL_OP)
    assert call.location == 'loc(callsite("f"("model.py":9:2) at "f"("model.py":7:4)))'


def test_text_without_an_entry_computation_is_rejected() -> None:
    with pytest.raises(ValueError, match="no ENTRY computation"):
        parse_compiled_hlo(
            "HloModule m\n\n%f (x: f32[]) -> f32[] {\n  ROOT %x = f32[] parameter(0)\n}\n"
        )


# --- compiled census of the real samples -------------------------------------------------


def test_conv_compiles_to_one_cudnn_dispatch() -> None:
    result = census("cuda_conv")
    assert result.libraries() == {"cudnn": 1}
    assert result.custom == 0


def test_eigh_compiles_to_one_cusolver_dispatch() -> None:
    assert census("cuda_eigh").libraries() == {"cusolver": 1}


def test_matmul_is_an_xla_triton_gemm_unless_triton_gemm_is_off() -> None:
    assert census("cuda_matmul").vendor == 0
    assert census("cuda_matmul_cublas").libraries() == {"cublas": 1}


def test_fft_is_cufft_on_cuda_and_ducc_on_cpu() -> None:
    assert census("cuda_fft").libraries() == {"cufft": 1}
    assert census("cpu_fft").libraries() == {"ducc": 1}


def test_pallas_triton_kernel_is_one_custom_kernel() -> None:
    result = census("cuda_pallas")
    (kernel,) = result.in_layer("custom")
    assert (kernel.name, kernel.kind, kernel.count) == ("__gpu$xla.gpu.triton", "pallas-triton", 1)


def test_disabling_binary_libraries_turns_the_cudnn_conv_into_an_xla_kernel() -> None:
    result = census("cuda_conv_nolib")
    assert result.vendor == 0
    assert result.xla_ops >= 1


def test_psum_is_one_nccl_collective() -> None:
    assert census("cuda_collective").libraries() == {"nccl": 1}


def test_cpu_libraries() -> None:
    assert census("cpu_matmul").libraries() == {"ynnpack": 1}
    assert census("cpu_solve").libraries() == {"lapack": census("cpu_solve").vendor}


def test_while_body_counts_once() -> None:
    result = census("cuda_scan")
    assert result.vendor == result.custom == 0
    assert result.xla_ops == len([s for s in all_sites(program("cuda_scan")) if s.op != CALL_OP])


# --- the compiled rule table ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "op", "target", "layer", "library"),
    [
        ("cuda", "hlo.custom_call", "__cublas$lt$matmul", "vendor", "cublas"),
        ("cuda", "hlo.custom_call", "__cublas$gemm", "vendor", "cublas"),
        ("cuda", "hlo.custom_call", "__cublas$triangularSolve", "vendor", "cublas"),
        ("cuda", "hlo.custom_call", "__cudnn$convForward", "vendor", "cudnn"),
        ("cuda", "hlo.custom_call", "__cudnn$convBiasActivationForward", "vendor", "cudnn"),
        ("cuda", "hlo.custom_call", "__cudnn$fmhaSoftmax", "vendor", "cudnn"),
        ("cuda", "hlo.custom_call", "__cudnn$norm", "vendor", "cudnn"),
        ("cuda", "hlo.custom_call", "__cub$DeviceRadixSort", "vendor", "cub"),
        ("cuda", "hlo.custom_call", "cusolver_syevd_ffi", "vendor", "cusolver"),
        ("cuda", "hlo.custom_call", "__cusolver$potrf", "vendor", "cusolver"),
        ("cuda", "hlo.custom_call", "__gpu$TopK", "xla", None),
        ("cuda", "hlo.custom_call", "__gpu$xla.gpu.triton", "custom", None),
        ("cuda", "hlo.custom_call", "mosaic_gpu_v2", "custom", None),
        ("cuda", "hlo.custom_call", "my_ffi_kernel", "custom", None),
        ("cuda", "hlo.fusion:__triton_gemm", None, "xla", None),
        ("cuda", "hlo.fusion:__triton_nested_gemm_fusion", None, "xla", None),
        ("cuda", "hlo.fusion:__triton", None, "xla", None),
        ("cuda", "hlo.fusion:kLoop", None, "xla", None),
        ("cuda", "hlo.fusion:__some_future_kind", None, "xla", None),
        ("cuda", "hlo.fusion:__cudnn$fusion", None, "vendor", "cudnn"),
        ("cuda", "hlo.fusion:__custom_fusion$cutlass_gemm", None, "vendor", "cutlass"),
        ("cuda", "hlo.fusion:__custom_fusion$dynamic_slice_fusion", None, "xla", None),
        ("cuda", "hlo.fft", None, "vendor", "cufft"),
        ("cuda", "hlo.all_reduce", None, "vendor", "nccl"),
        ("cuda", "hlo.collective_permute", None, "vendor", "nccl"),
        ("cuda", "hlo.sort", None, "xla", None),
        ("rocm", "hlo.fft", None, "vendor", "hipfft"),
        ("rocm", "hlo.all_gather", None, "vendor", "rccl"),
        ("cpu", "hlo.fusion:__ynn_fusion", None, "vendor", "ynnpack"),
        ("cpu", "hlo.fusion:__onednn_fusion", None, "vendor", "onednn"),
        ("cpu", "hlo.custom_call", "__onednn$matmul", "vendor", "onednn"),
        ("cpu", "hlo.custom_call", "lapack_sgetrf_ffi", "vendor", "lapack"),
        ("cpu", "hlo.fft", None, "vendor", "ducc"),
        ("cpu", "hlo.dot", None, "vendor", "eigen"),
        ("cpu", "hlo.convolution", None, "vendor", "eigen"),
        ("cpu", "hlo.sort", None, "xla", None),
        ("cpu", "hlo.custom_call", "TopK", "xla", None),
    ],
)
def test_compiled_rules(
    platform: str, op: str, target: str | None, layer: str, library: str | None
) -> None:
    result = compiled(platform, op, target)
    assert (result.layer, result.library) == (layer, library)


def test_compiled_rules_never_change_a_lowered_answer() -> None:
    assert all(rule.levels == frozenset({"compiled"}) for rule in COMPILED_RULES)
    lowered_only = tuple(rule for rule in CLASSIFICATION_RULES if rule not in COMPILED_RULES)
    for op, target in [
        ("stablehlo.dot_general", None),
        ("stablehlo.fft", None),
        ("stablehlo.custom_call", "__cudnn$norm"),
        ("stablehlo.custom_call", "cusolver_syevd_ffi"),
    ]:
        for platform in ("cpu", "cuda", "rocm", "tpu"):
            assert classify(platform, op, target) == classify(
                platform, op, target, rules=lowered_only
            )


# --- what each dispatch computes and moves (the runtime-share estimate's input) ------------


def only(prog: Program, op: str) -> OpSite:
    [site] = [s for s in all_sites(prog) if s.op == op]
    return site


def cpu_program(fn, *args) -> Program:  # type: ignore[no-untyped-def]
    import jax

    return parse_compiled_hlo(jax.jit(fn).lower(*args).compile().as_text())


def test_a_library_gemm_costs_2mnk_flops_and_its_operands_and_result_in_bytes() -> None:
    cublas = only(program("cuda_matmul_cublas"), "hlo.custom_call")
    assert cublas.flops == 2 * 256**3
    # a, b and the result (f32), plus the cuBLAS workspace the call returns.
    assert cublas.bytes == 3 * 256 * 256 * 4 + 4194304
    [ynn] = [s for s in all_sites(program("cpu_matmul")) if "ynn" in s.op]
    assert ynn.flops > 0


def test_a_cudnn_convolution_costs_its_multiply_adds() -> None:
    conv = only(program("cuda_conv"), "hlo.custom_call")
    # output 8x32x32x32, a 3x3 kernel over 16 input features: 2 flops per multiply-add.
    assert conv.flops == pytest.approx(2 * 8 * 32 * 32 * 32 * 3 * 3 * 16, rel=0.5)


def test_a_fusion_moves_its_operands_and_result_once_not_each_ops_traffic() -> None:
    import jax.numpy as jnp

    x = jnp.ones((512, 512))
    prog = cpu_program(lambda x: jnp.tanh(x * 2.0 + 1.0) * x - 3.0, x)
    [fusion] = [s for s in all_sites(prog) if s.op.startswith("hlo.fusion")]
    assert fusion.bytes == 2 * 512 * 512 * 4  # read x once, write the result once
    assert fusion.flops >= 4 * 512 * 512  # one per element per fused op


def test_a_gather_reads_the_rows_it_takes_not_the_whole_table() -> None:
    import jax.numpy as jnp
    import numpy as np

    table = jnp.ones((65536, 64))
    ids = jnp.asarray(np.arange(16, dtype=np.int32))
    prog = cpu_program(lambda t, i: t[i] * 2.0, table, ids)
    moved = sum(s.bytes for s in all_sites(prog))
    assert 0 < moved < table.size * 4 / 100  # the 16 rows, not the 16 MiB table


def test_a_loop_body_runs_its_known_trip_count_in_time_but_counts_once() -> None:
    import jax
    import jax.numpy as jnp

    def scan(n: int):  # type: ignore[no-untyped-def]
        def f(w, xs):  # type: ignore[no-untyped-def]
            return jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None), xs[0], xs)[0]

        return cpu_program(f, jnp.ones((64, 64)), jnp.ones((n, 8, 64)))

    def seconds(site: OpSite, layer: str) -> float:
        return site.flops + site.bytes + 1.0

    short, long = scan(5), scan(20)
    bodies = [s.runs for s in all_sites(long) if s.op == CALL_OP]
    assert sorted(set(bodies) & {20, 21}) == [20, 21]  # body and condition
    a = take_census(short, "cpu", level="compiled", classifier=compiled, seconds=seconds)
    b = take_census(long, "cpu", level="compiled", classifier=compiled, seconds=seconds)
    assert (a.vendor, a.xla_ops) == (b.vendor, b.xla_ops)
    time_a = sum(t for _, _, t in a.estimated_seconds)
    time_b = sum(t for _, _, t in b.estimated_seconds)
    assert 3.0 < time_b / time_a < 4.5  # 4x the iterations, plus the same fixed part


def test_an_in_place_update_writes_the_slice_not_the_buffer() -> None:
    import jax
    import jax.numpy as jnp

    def f(buf, row, i):  # type: ignore[no-untyped-def]
        return jax.lax.dynamic_update_slice(buf, row * 2.0, (i, 0))

    buf = jnp.ones((4096, 256))
    lowered = jax.jit(f, donate_argnums=0).lower(buf, jnp.ones((1, 256)), 3)
    prog = parse_compiled_hlo(lowered.compile().as_text())
    moved = sum(s.bytes for s in all_sites(prog))
    assert 0 < moved < buf.size * 4 / 10
