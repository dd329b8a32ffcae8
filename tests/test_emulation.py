"""Tests of pytest_jaxport._jax.emulate, model.emulation and model.interpreters.

Emulating a platform on the CPU (issue 24): its platform_dependent branch, its Pallas
kernels in the matching interpret mode, its default-precision float32 dots rounded to the
format it multiplies in.

Real JAX throughout. Expected numbers are computed independently of the engine: numpy
(float64) on operands rounded with ml_dtypes' bfloat16, or JAX's own ``astype`` rounding;
which interpreter a kernel needs is read off what JAX's lowering for that platform emits
(its custom-call target), and whether this JAX has it off its public API, never from a
version table.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from helpers import line_of
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pytest_jaxport._jax import lowering, stablehlo, tracing
from pytest_jaxport._jax.adapters import jax_release
from pytest_jaxport._jax.emulate import emulate
from pytest_jaxport._jax.outputs import to_outputs
from pytest_jaxport.model.arithmetic import (
    BFLOAT16,
    TF32,
    compute_capability,
    default_dot_format,
    precision_rule,
)
from pytest_jaxport.model.compare import compare
from pytest_jaxport.model.emulation import (
    ChosenBranch,
    EmulatedKernel,
    Emulation,
    RoundedOp,
    Unemulated,
    divergence_message,
    emulated_label,
    emulation_lines,
    not_emulated_message,
)
from pytest_jaxport.model.interpreters import GPU_INTERPRET
from pytest_jaxport.model.numerics import describe

HERE = Path(__file__).resolve()
DEMO_KERNEL = HERE.parents[1] / "examples/demo/src/demo_models/pallas_kernel.py"
TRITON_DEPRECATED = "ignore:The Pallas Triton backend is deprecated:DeprecationWarning"
MGPU_PALLAS_CALL = "ignore:Using ``pl.pallas_call`` for Mosaic GPU:DeprecationWarning"


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    """The demo's Pallas kernel module (examples/demo), imported from its file."""
    spec = importlib.util.spec_from_file_location("demo_pallas_kernel", DEMO_KERNEL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def demo_inputs() -> tuple[jax.Array, jax.Array]:
    x = jnp.linspace(-3.0, 3.0, 16 * 128, dtype=jnp.float32).reshape(16, 128)
    return x, jnp.linspace(-0.5, 0.5, 128, dtype=jnp.float32)


# -- kernels --------------------------------------------------------------------------------

_INTERPRETER_OF_TARGET = {
    # what a platform's lowering emits -> the interpret mode that runs that kernel kind
    "tpu_custom_call": "TPU interpret mode",
    "mosaic_gpu_v2": "Mosaic GPU interpret mode",
    "__gpu$xla.gpu.triton": "Pallas interpreter",
}


def lowered_kernel_targets(
    fn: Callable[..., Any], args: tuple[Any, ...], platform: str
) -> set[str]:
    """The custom-call targets JAX's own lowering for ``platform`` emits for ``fn``."""
    program = stablehlo.read_program(lowering.lower(tracing.trace(fn, args, {}), platform))
    return {
        site.target
        for sites in program.functions.values()
        for site in sites
        if site.op == "stablehlo.custom_call" and site.target in _INTERPRETER_OF_TARGET
    }


@pytest.mark.filterwarnings(TRITON_DEPRECATED)
@pytest.mark.parametrize("platform", ["tpu", "cuda"])
def test_the_demo_kernel_runs_in_the_interpret_mode_its_platform_lowering_selects(
    demo: ModuleType, platform: str
) -> None:
    x, b = demo_inputs()
    (target,) = lowered_kernel_targets(demo.fused_bias_gelu, (x, b), platform)
    interpreter = _INTERPRETER_OF_TARGET[target]

    emulated = emulate(demo.fused_bias_gelu, (x, b), platform=platform)

    record = emulated.emulation
    branch = line_of(demo.fused_bias_gelu, "platform_dependent(")
    assert record.branches == (ChosenBranch(location=branch, branch=platform),)
    call_site = line_of(demo._pallas_bias_gelu, "return kernel(")
    if interpreter == GPU_INTERPRET.name and not hasattr(_mosaic_gpu(), "InterpretGPUParams"):
        # a Mosaic GPU kernel on a JAX without its interpret mode: said, not failed
        assert not record.ran
        assert emulated.value is None
        assert {(u.location, u.blocks) for u in record.unemulated} == {(call_site, True)}
        assert all(
            u.reason.startswith(f"cannot interpret here: needs jax >= {GPU_INTERPRET.since} ")
            and f"installed {jax_release()}" in u.reason
            for u in record.unemulated
        )
        return
    assert record.ran, record
    assert [(k.location, k.interpreter) for k in record.kernels] == [(call_site, interpreter)]
    assert record.kernels[0].label == "Pallas kernel _bias_gelu_kernel"
    reference = jax.jit(demo.bias_gelu_reference)(x, b)
    comparison = compare(
        to_outputs(reference),
        emulated.outputs,  # type: ignore[arg-type]
        reference_platform="cpu",
        platform=record.label,
    )
    assert comparison.ok, describe(comparison)


def test_rocm_runs_the_portable_fallback(demo: ModuleType) -> None:
    x, b = demo_inputs()
    emulated = emulate(demo.fused_bias_gelu, (x, b), platform="rocm")
    assert emulated.emulation.branches[0].branch == "default"
    assert emulated.emulation.kernels == ()
    np.testing.assert_array_equal(
        np.asarray(emulated.value), np.asarray(jax.jit(demo.bias_gelu_reference)(x, b))
    )


def _double_rows(x_ref, o_ref):  # type: ignore[no-untyped-def]
    o_ref[...] = x_ref[...] * 2.0


def _tpu_double(x: jax.Array, *, block: Callable[[Any], tuple[Any, int]]) -> jax.Array:
    """A Pallas TPU kernel doubling (16, 128) in two (8, 128) row blocks; ``block`` maps
    the grid step to the input block it reads."""
    return pl.pallas_call(
        _double_rows,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), block)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(),
    )(x)


def doubled(x: jax.Array) -> jax.Array:
    """A TPU kernel with a wrong block index (each step reads the other block) behind a
    correct jnp fallback: every test on a CPU passes."""
    return lax.platform_dependent(
        x, tpu=lambda x: _tpu_double(x, block=lambda i: (1 - i, 0)), default=lambda x: x * 2.0
    )


def test_a_wrong_tpu_kernel_behind_a_correct_fallback_is_caught() -> None:
    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    on_cpu = to_outputs(jax.jit(doubled)(x))
    assert compare(on_cpu, to_outputs(x * 2.0), reference_platform="cpu",
                   platform="cpu").ok  # fmt: skip

    emulated = emulate(doubled, (x,), platform="tpu")

    record = emulated.emulation
    assert record.ran
    assert record.kernels == (
        EmulatedKernel(
            label="Pallas kernel _double_rows",
            location=line_of(_tpu_double, "return pl.pallas_call("),
            interpreter="TPU interpret mode",
        ),
    )
    comparison = compare(on_cpu, emulated.outputs, reference_platform="cpu",  # type: ignore[arg-type]
                         platform=record.label)  # fmt: skip
    assert not comparison.ok
    # the worst element: row 0 doubled from row 8 (2 * 8 * 128) instead of from itself (0)
    (mismatch,) = comparison.mismatches
    assert mismatch.index == (0, 0)
    assert mismatch.abs_err == 2.0 * 8 * 128
    message = divergence_message(record, describe(comparison))
    assert message.startswith("tpu (emulated on cpu) vs cpu: 1 of 1 leaves differ")
    kernel_site = line_of(_tpu_double, "return pl.pallas_call(")
    assert f"Pallas kernel _double_rows at {kernel_site}: run in TPU interpret mode" in message


@pytest.mark.slow
def test_a_kernel_failing_in_interpret_mode_is_the_runs_error_and_the_next_emulation_runs(
    demo: ModuleType,
) -> None:
    x = jnp.zeros((16, 128), jnp.float32)

    def reads_past_the_end(x: jax.Array) -> jax.Array:
        return lax.platform_dependent(
            x, tpu=lambda x: _tpu_double(x, block=lambda i: (i + 1, 0)), default=lambda x: x
        )

    failed = emulate(reads_past_the_end, (x,), platform="tpu")

    assert not failed.emulation.ran
    assert failed.value is None
    assert failed.emulation.error is not None
    assert "Out-of-bounds" in failed.emulation.error, failed.emulation.error
    assert "CpuCallback" not in failed.emulation.error  # the kernel's own exception
    again = emulate(demo.fused_bias_gelu, demo_inputs(), platform="tpu")
    assert again.emulation.ran


def _mosaic_gpu() -> ModuleType:
    from jax.experimental.pallas import mosaic_gpu as plgpu

    return plgpu


def _off_by_one(x_ref, o_ref):  # type: ignore[no-untyped-def]
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def gpu_doubled(x: jax.Array) -> jax.Array:
    """A wrong Mosaic GPU kernel (``plgpu.kernel``) behind a correct fallback."""
    plgpu = _mosaic_gpu()
    out = "out_type" if "out_type" in inspect.signature(plgpu.kernel).parameters else "out_shape"
    kernel = plgpu.kernel(_off_by_one, **{out: jax.ShapeDtypeStruct(x.shape, x.dtype)})
    return lax.platform_dependent(x, cuda=lambda x: kernel(x), default=lambda x: x * 2.0)


def test_a_wrong_mosaic_gpu_kernel_is_caught_where_jax_can_interpret_it() -> None:
    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    on_cpu = to_outputs(jax.jit(gpu_doubled)(x))

    emulated = emulate(gpu_doubled, (x,), platform="cuda")

    record = emulated.emulation
    call_site = line_of(gpu_doubled, "cuda=lambda")
    if not hasattr(_mosaic_gpu(), "InterpretGPUParams"):
        assert not record.ran
        assert record.unemulated
        assert all(u.blocks for u in record.unemulated)
        note = not_emulated_message(record)
        assert note.startswith("cuda (emulated on cpu): not run: Pallas kernel ")
        assert f"cannot interpret here: needs jax >= {GPU_INTERPRET.since} " in note
        return
    assert record.kernels == (
        EmulatedKernel(label="Pallas kernel _off_by_one", location=call_site,
                       interpreter="Mosaic GPU interpret mode"),
    )  # fmt: skip
    comparison = compare(on_cpu, emulated.outputs, reference_platform="cpu",  # type: ignore[arg-type]
                         platform=record.label)  # fmt: skip
    assert [(m.reason, m.abs_err) for m in comparison.mismatches] == [("tolerance", 1.0)]


def test_an_ffi_target_stops_the_emulation_with_a_reason() -> None:
    def custom(x: jax.Array) -> jax.Array:
        def tpu(x: jax.Array) -> jax.Array:
            return jax.ffi.ffi_call("my_tpu_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

        return lax.platform_dependent(x, tpu=tpu, default=lambda x: x)

    emulated = emulate(custom, (jnp.ones(4),), platform="tpu")

    assert not emulated.emulation.ran
    (note,) = emulated.emulation.unemulated
    assert note.what == "FFI target my_tpu_kernel"
    assert note.blocks
    assert "cannot run on cpu" in note.reason


# -- default precision ----------------------------------------------------------------------

# Exact in float32; 1 + 2**-8 is halfway between two bfloat16 values (1 and 1 + 2**-7) and
# rounds to even (1); 1 + 3 * 2**-8 rounds to even upwards (1 + 2**-6).
LHS = np.array([[1 + 2**-8] * 4, [1 + 3 * 2**-8, 1, 1, 1]], np.float32)
RHS = np.ones((4, 2), np.float32)  # two columns: a product on tpu's matrix unit


def project(x: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w


def project_highest(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.matmul(x, w, precision="highest")


def bf16(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Rounded to bfloat16 by ml_dtypes (round to nearest even), back in float64."""
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def test_tpu_rounds_default_precision_dots_to_bfloat16_and_the_difference_fails() -> None:
    expected = (bf16(LHS) @ bf16(RHS)).astype(np.float32)  # exact: sums of small dyadics
    np.testing.assert_array_equal(expected, [[4.0, 4.0], [4.015625, 4.015625]])
    on_cpu = jax.jit(project)(LHS, RHS)
    np.testing.assert_array_equal(
        np.asarray(on_cpu), [[4.015625, 4.015625], [4.01171875, 4.01171875]]
    )

    emulated = emulate(project, (LHS, RHS), platform="tpu")

    np.testing.assert_array_equal(np.asarray(emulated.value), expected)
    assert emulated.emulation.rounded == (
        RoundedOp(op="dot_general", location=line_of(project, "x @ w"), format="bfloat16"),
    )
    comparison = compare(to_outputs(on_cpu), emulated.outputs,  # type: ignore[arg-type]
                         reference_platform="cpu", platform=emulated.emulation.label)  # fmt: skip
    (mismatch,) = comparison.mismatches
    assert (mismatch.index, mismatch.abs_err) == ((0, 0), 2**-6)
    assert mismatch.rel_err == pytest.approx(2**-6 / 4.015625, rel=1e-12)
    assert comparison.max_abs_err == 2**-6


def test_an_explicit_precision_is_left_alone() -> None:
    on_cpu = jax.jit(project_highest)(LHS, RHS)

    emulated = emulate(project_highest, (LHS, RHS), platform="tpu")

    assert emulated.emulation.rounded == ()
    assert emulated.emulation.pinned == 1
    comparison = compare(to_outputs(on_cpu), emulated.outputs,  # type: ignore[arg-type]
                         reference_platform="cpu", platform=emulated.emulation.label)  # fmt: skip
    assert comparison.ok
    assert comparison.max_abs_err == 0.0


def test_jax_default_matmul_precision_around_the_check_pins_every_default_dot() -> None:
    with jax.default_matmul_precision("highest"):
        emulated = emulate(project, (LHS, RHS), platform="tpu")
    assert emulated.emulation.rounded == ()
    assert emulated.emulation.pinned == 1
    np.testing.assert_array_equal(
        np.asarray(emulated.value), [[4.015625, 4.015625], [4.01171875, 4.01171875]]
    )


def test_cuda_rounds_to_tf32_on_ampere_and_newer_only() -> None:
    lhs = np.full((1, 4), 1 + 2**-11, np.float32)  # halfway between two TF32 values: to 1
    rhs = np.ones((4, 1), np.float32)
    full = np.float32(4 + 2**-9)

    hopper = emulate(project, (lhs, rhs), platform="cuda")
    volta = emulate(project, (lhs, rhs), platform="cuda", cuda_capability=(7, 0))

    assert np.asarray(hopper.value).item() == 4.0
    assert hopper.emulation.dot_format == "tf32"
    assert np.asarray(volta.value).item() == full
    assert volta.emulation.dot_format is None
    assert volta.emulation.rounded == ()


def rounded_everywhere(x: jax.Array, w: jax.Array, rnd: Callable[[Any], Any]) -> jax.Array:
    """Default-precision dots in a nested jit, scan, while, cond, checkpoint, custom_jvp
    and custom_vjp; ``rnd`` rounds each dot's operands (identity: as written)."""

    def mm(a: jax.Array, b: jax.Array) -> jax.Array:
        return rnd(a) @ rnd(b)

    y = jax.jit(mm)(x, w)
    y = lax.scan(lambda c, _: (jnp.tanh(mm(c, w)), None), y, None, length=2)[0]
    y = lax.while_loop(lambda c: c[1] < 2, lambda c: (jnp.sin(mm(c[0], w)), c[1] + 1), (y, 0))[0]
    y = lax.cond(y.sum() > 0, lambda q: mm(q, w), lambda q: -mm(w, q), y)
    y = jax.checkpoint(lambda q: mm(q, w))(y)

    @jax.custom_jvp
    def smooth(q: jax.Array) -> jax.Array:
        return mm(q, w)

    smooth.defjvp(lambda p, t: (smooth(p[0]), t[0]))

    @jax.custom_vjp
    def sharp(q: jax.Array) -> jax.Array:
        return mm(q, w)

    sharp.defvjp(lambda q: (sharp(q), None), lambda _, g: (g,))
    return smooth(y) + sharp(y)


@pytest.mark.slow
def test_dots_are_rounded_inside_every_control_flow_and_custom_rule() -> None:
    x = jax.random.normal(jax.random.key(0), (8, 8), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (8, 8), jnp.float32) / 3

    def as_written(x: jax.Array, w: jax.Array) -> jax.Array:
        return rounded_everywhere(x, w, lambda a: a)

    def by_hand(x: jax.Array, w: jax.Array) -> jax.Array:
        return rounded_everywhere(x, w, lambda a: a.astype(jnp.bfloat16).astype(jnp.float32))

    emulated = emulate(as_written, (x, w), platform="tpu")

    np.testing.assert_array_equal(np.asarray(emulated.value), np.asarray(jax.jit(by_hand)(x, w)))
    assert not np.array_equal(np.asarray(emulated.value), np.asarray(jax.jit(as_written)(x, w)))
    # jit 1, scan 1, while 1, cond 2 (both branches), checkpoint 1, custom_jvp 1, custom_vjp 1
    sites = {(r.location, r.count) for r in emulated.emulation.rounded}
    assert sites == {(line_of(rounded_everywhere, "return rnd(a) @ rnd(b)"), 8)}


@pytest.mark.slow
def test_a_convolution_is_rounded_too() -> None:
    x = jax.random.normal(jax.random.key(2), (1, 3, 9, 9), jnp.float32)
    k = jax.random.normal(jax.random.key(3), (4, 3, 3, 3), jnp.float32)

    def conv(x: jax.Array, k: jax.Array) -> jax.Array:
        return lax.conv_general_dilated(x, k, (1, 1), "SAME")

    emulated = emulate(conv, (x, k), platform="tpu")

    def to_bf16(a: jax.Array) -> jax.Array:
        return a.astype(jnp.bfloat16).astype(jnp.float32)

    np.testing.assert_array_equal(
        np.asarray(emulated.value), np.asarray(jax.jit(conv)(to_bf16(x), to_bf16(k)))
    )
    assert [r.op for r in emulated.emulation.rounded] == ["conv_general_dilated"]


def test_a_trace_emulates_like_its_function() -> None:
    traced = jax.jit(project).trace(LHS, RHS)
    from_trace = emulate(traced, (LHS, RHS), platform="tpu")
    from_function = emulate(project, (LHS, RHS), platform="tpu")
    np.testing.assert_array_equal(np.asarray(from_trace.value), np.asarray(from_function.value))
    assert from_trace.emulation == from_function.emulation


def test_the_cpu_is_not_emulated() -> None:
    with pytest.raises(
        ValueError, match="cannot emulate 'cpu': expected one of cuda, rocm, tpu, oneapi"
    ):
        emulate(project, (LHS, RHS), platform="cpu")


# -- the pure model -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "capability", "fmt"),
    [("a100", (8, 0), TF32), ("h100", (9, 0), TF32), ("h200", (9, 0), TF32)],
)
def test_the_shipped_gpu_descriptions_multiply_float32_in_tf32(
    target: str, capability: tuple[int, int], fmt: Any
) -> None:
    text = files("pytest_jaxport.gpu_targets").joinpath(f"{target}.txtpb").read_text()
    assert compute_capability(text) == capability
    assert default_dot_format("cuda", cuda_capability=capability) == fmt


def test_the_precision_table() -> None:
    assert default_dot_format("tpu") == BFLOAT16
    assert default_dot_format("cuda") == TF32  # an H100 when none is configured
    assert default_dot_format("cuda", cuda_capability=(7, 5)) is None  # Turing: float32
    assert default_dot_format("rocm") is None
    assert default_dot_format("cpu") is None
    assert precision_rule("metal") is None
    assert str(TF32) == "tf32 (e8m10)"
    assert str(BFLOAT16) == "bfloat16 (e8m7)"
    assert compute_capability("gpu_device_info { }") is None
    tpu = precision_rule("tpu")
    assert tpu is not None
    assert "jax.lax.Precision" in tpu.source


def test_an_emulation_record_round_trips_and_reads_as_emulated() -> None:
    record = Emulation(
        platform="tpu",
        dot_format="bfloat16",
        branches=(ChosenBranch(location="m.py:1", branch="tpu"),),
        kernels=(EmulatedKernel(label="Pallas kernel k", location="m.py:2",
                                interpreter="TPU interpret mode"),),
        rounded=(RoundedOp(op="dot_general", location="m.py:3", format="bfloat16", count=3),),
        pinned=1,
        unemulated=(Unemulated(what="dot_general", location="m.py:4", blocks=False,
                               reason="inside shard_map, which the emulation cannot replay"),),
    )  # fmt: skip
    assert Emulation.from_dict(record.to_dict()) == record
    assert record.label == emulated_label("tpu") == "tpu (emulated on cpu)"
    assert record.ran
    assert emulation_lines(record) == [
        "platform_dependent at m.py:1: took the tpu branch",
        "Pallas kernel k at m.py:2: run in TPU interpret mode",
        "3 dot_general at m.py:3: float32 operands rounded to bfloat16 (tpu's default precision)",
        "1 float32 dot/convolution whose precision the program sets: left as set",
        "dot_general at m.py:4: computed as on cpu: inside shard_map, which the emulation "
        "cannot replay",
    ]


def _shard_map() -> Callable[..., Any]:
    found = getattr(jax, "shard_map", None)
    if found is None:  # jax < 0.7
        from jax.experimental.shard_map import shard_map as found
    return found  # type: ignore[no-any-return]


def test_a_dot_inside_shard_map_is_computed_as_on_cpu_and_the_report_says_so() -> None:
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))

    def sharded(x: jax.Array, w: jax.Array) -> jax.Array:
        return _shard_map()(project, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec()),
                            out_specs=PartitionSpec())(x, w)  # fmt: skip

    emulated = emulate(sharded, (LHS, RHS), platform="tpu")

    assert emulated.emulation.ran
    assert emulated.emulation.rounded == ()
    (note,) = emulated.emulation.unemulated
    assert (note.what, note.location, note.blocks) == (
        "dot_general", line_of(project, "x @ w"), False)  # fmt: skip
    assert note.reason == "inside shard_map, which the emulation cannot replay"
    np.testing.assert_array_equal(
        np.asarray(emulated.value), [[4.015625, 4.015625], [4.01171875, 4.01171875]]
    )


@pytest.mark.slow
def test_the_emulation_benchmark_runs(tmp_path: Path) -> None:
    """benchmarks/overhead/emulation.py stays runnable (it asserts no timing; this neither)."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "emulation.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.overhead.emulation", "--reps", "1",
         "--cases", "mlp_small", "--platforms", "tpu", "--output", str(out)],
        cwd=HERE.parents[1], env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    tpu = json.loads(out.read_text())["cases"]["mlp_small"]["platforms"]["tpu"]
    assert tpu["ran"]
    assert tpu["rounded_dots"] == 2
    assert "| mlp_small |" in done.stdout


def _plus_one_on_tpu(x: jax.Array) -> jax.Array:
    return lax.platform_dependent(x, tpu=lambda y: y + 1.0, default=lambda y: y)


def test_a_platform_dependent_branch_without_kernels_or_dots_computes_the_platforms_value() -> None:
    """Issue 41's suspected bug, confirmed: a branch holding nothing else the emulation
    changes (no kernel, no dot) was bound as it was, and JAX's cond (``branches_platforms``,
    jax 0.7+) lowered for the CPU runs the CPU's branch whatever the index: the record said
    "took the tpu branch" and the value was the CPU's."""
    x = jnp.arange(4.0)
    emulated = emulate(_plus_one_on_tpu, (x,), platform="tpu")
    assert [c.branch for c in emulated.emulation.branches] == ["tpu"]
    np.testing.assert_array_equal(np.asarray(emulated.value), np.arange(4.0) + 1.0)
    # the other way round: rocm has no branch of its own, the default one runs
    np.testing.assert_array_equal(
        np.asarray(emulate(_plus_one_on_tpu, (x,), platform="rocm").value), np.arange(4.0)
    )

    # and inside a jit, a scan and a cond on a traced index
    def nested(x: jax.Array, flag: jax.Array) -> jax.Array:
        def body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
            return jax.jit(_plus_one_on_tpu)(c), None

        stepped, _ = lax.scan(body, x, None, length=3)
        return lax.cond(flag, lambda y: _plus_one_on_tpu(y) * 2.0, lambda y: y, stepped)

    got = emulate(nested, (x, jnp.bool_(True)), platform="tpu").value
    np.testing.assert_array_equal(np.asarray(got), (np.arange(4.0) + 4.0) * 2.0)


BRANCH_TEST = """
import jax.numpy as jnp, pytest
from jax import lax

def f(x):
    return lax.platform_dependent(x, tpu=lambda y: y + 1.0, default=lambda y: y)

@pytest.mark.portable
def test_branch(jaxport):
    jaxport.check(f, jnp.arange(4.0))
"""


def test_emulated_numerics_show_a_tpu_branch_that_differs_from_the_cpus(
    pytester: pytest.Pytester,
) -> None:
    """``emulate = ["tpu"]`` with a tpu branch computing ``x + 1`` where the CPU computes
    ``x``: the emulated numerics differ by 1 and the check fails, never "ok" with zero
    error."""
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda", "tpu"]\nemulate = ["tpu"]\n'
    )
    pytester.makepyfile(test_branch=BRANCH_TEST)
    result = pytester.runpytest("--jaxport-report=report.json")
    result.assert_outcomes(failed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    tpu = report["tests"][0]["checks"][0]["platforms"]["tpu"]
    assert tpu["emulated"]["branches"] == [{"location": "test_branch.py:5", "branch": "tpu"}]
    numerics = tpu["emulated_numerics"]
    assert numerics["ok"] is False
    assert numerics["max_abs_err"] == 1.0
    result.stdout.fnmatch_lines(
        ["*tpu (emulated on cpu): 1 differing leaf*", "*took the tpu branch*"]
    )
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


NOTHING_TEST = """
import jax.numpy as jnp, pytest

@pytest.mark.portable
def test_nothing(jaxport):
    assert jaxport.check(lambda x: None, jnp.ones(3)) is None
"""


def test_a_function_returning_none_emulates_as_it_checks(pytester: pytest.Pytester) -> None:
    """Issue 55 item 8: a check of ``lambda x: None`` under ``emulate = ["tpu"]`` failed with
    ``TypeError: cannot create weak reference to 'Trace' object`` (then ``the first argument
    must be callable``), where without emulation it passes."""
    traced = tracing.trace(lambda x: None, (jnp.ones(3),), {})
    emulated = emulate(traced, (jnp.ones(3),), platform="tpu")
    assert emulated.emulation.ran
    assert emulated.value is None
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "tpu"]\nemulate = ["tpu"]\n')
    pytester.makepyfile(test_nothing=NOTHING_TEST)
    result = pytester.runpytest("--jaxport-report=report.json")
    result.assert_outcomes(passed=1)
    tpu = json.loads((pytester.path / "report.json").read_text())["tests"][0]["checks"][0]
    assert tpu["platforms"]["tpu"]["emulated"]["error"] is None
    result.stdout.no_fnmatch_line("*TypeError*")


FLOAT64_TEST = """
import jax, jax.numpy as jnp, numpy as np, pytest
jax.config.update("jax_enable_x64", True)

def solve(a, b):
    return jnp.linalg.solve(a, b)

@pytest.mark.portable
def test_solve(jaxport):
    jaxport.check(solve, np.eye(4) * 2.0 + 0.1, np.ones(4))
"""


def test_float64_is_never_an_emulated_match_on_tpu(pytester: pytest.Pytester) -> None:
    """Issue 55 item 6: a float64 solve under x64 read ``tpu (emulated on cpu) numerics:
    match``, though the TPU compiler refuses a float64 LU decomposition and computes the rest
    of float64 in software, which was never measured. It reads "not run", saying why, in the
    warning, the terminal's details, the JSON and the Markdown."""
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "tpu"]\nemulate = ["tpu"]\n')
    pytester.makepyfile(test_solve=FLOAT64_TEST)
    x64 = jax.config.jax_enable_x64  # the test file turns x64 on in this process: put it back
    try:
        result = pytester.runpytest(
            "-rA", "--jaxport-report=report.json", "--jaxport-report=report.md"
        )
    finally:
        jax.config.update("jax_enable_x64", x64)
    result.assert_outcomes(passed=1)
    refused = (
        "float64 lu at test_solve.py:5: the tpu compiler refuses it (UNIMPLEMENTED: Only F32 "
        "and C64 types are implemented in LuDecomposition)"
    )
    result.stdout.fnmatch_lines(
        ["*tpu (emulated on cpu)  numerics: not run*", f"*not run: {refused}; float64 arith*"]
    )
    result.stdout.no_fnmatch_line("*numerics: match*")
    report = json.loads((pytester.path / "report.json").read_text())
    tpu = report["tests"][0]["checks"][0]["platforms"]["tpu"]
    assert tpu["emulated_numerics"] is None
    unemulated = tpu["emulated"]["unemulated"]
    assert unemulated[0]["what"] == "float64 lu"
    assert unemulated[1]["reason"] == (
        "float64 is not emulated on tpu: the TPU has no float64 unit: its compiler computes "
        "float64 in software, never measured on the chip"
    )
    assert all(u["blocks"] for u in unemulated)
    markdown = (pytester.path / "report.md").read_text()
    assert f"tpu (emulated on cpu): not run: {refused}" in markdown
    assert "| tpu (emulated on cpu) | 1 | 0 | 0 | 0 | 0 | 1 |" in markdown


def x64() -> Any:
    """64-bit types on for one block (``jax.enable_x64`` from jax 0.8, the experimental one
    before)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64

    return enable_x64()


def test_float64_is_computed_by_the_cpu_where_a_platform_has_it() -> None:
    with x64():
        a = np.eye(4) * 2.0 + 0.1
        emulated = emulate(jnp.linalg.solve, (a, np.ones(4)), platform="cuda")
        on_tpu = emulate(jnp.linalg.solve, (a, np.ones(4)), platform="tpu")
    assert emulated.emulation.ran
    assert not on_tpu.emulation.ran
    assert on_tpu.emulation.error is None  # a note, never a failure
