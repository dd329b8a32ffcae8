"""TPU layouts, padding and refusals: the lowered model against the TPU compiler (issue 48).

    JAX_PLATFORMS=cpu ALLOW_MULTIPLE_LIBTPU_LOAD=1 python -m benchmarks.fidelity.tpu_layouts \\
        [--part layouts|refusals] [--quick] [--out benchmarks/results/tpu-layouts.json]

Needs ``libtpu`` (``pip install "pytest-jaxport[tpu]"``, or ``libtpu==0.0.42.1`` beside jax
0.10.2, ``libtpu==0.0.52`` beside jax 0.12.1); no TPU: every program is compiled deviceless,
against ``jax.experimental.topologies.get_topology_desc(platform="tpu", ...)``, which is the
chip's own compile (the lent TPU v5e gave the same HLO and ``memory_analysis`` for 17 of 17
programs). Each run is kept in the results file under its libtpu release, so one file holds
every release measured; the tests read it (``tests/test_tiling.py``), CI has no libtpu.

``--part layouts`` (``tpu-layouts.json``):

- ``shapes``: generated arrays (ranks 1 to 4, dimensions from 1 to 4096, eleven element
  types), each compiled as ``x + x`` for TPU v5e. Per array: the layout the compiler chose for
  the argument (``entry_computation_layout``), the argument bytes it counted
  (``memory_analysis``), the bytes that layout takes (``model.tiling``), the layout the
  lowered level models (``tiling.default_layout``) and the naive tile model it replaces (the
  two minor dimensions padded to (8, 128), (16, 128) or (32, 128) by element width).
- ``generations``: a sample of those arrays compiled for TPU v4, v5p and v6e too.
- ``programs``: real models (flax linen CNN on RGB images, flax nnx MLP, equinox MLP, haiku
  convnet, attention, an MLP's gradient, the research's probes), each lowered (the lowered
  model's padding share, ``take_format_census``) and compiled (the compiler's layouts and
  memory), side by side.
- ``chip``: the research's measurements on the lent TPU v5e (libtpu 0.0.42.1), against the
  model.

``--part refusals`` (``tpu-refusals.json``): the float64, complex128 and int64 programs the
compiler was seen to refuse, compiled with the installed libtpu: what the compiler said and
what the lowered rule table says for that release (they must agree).

``--compile NAME,...`` prints, as JSON, the compiled HLO and ``memory_analysis`` of those
programs (the catalogue's names), for the tests' deviceless checks.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import REPO, RESULTS

DEVICELESS_ENVIRONMENT = {
    "JAX_PLATFORMS": "cpu",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",  # another process may hold libtpu's lockfile
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",  # these two silence libtpu's start-up lines
    "TPU_WORKER_HOSTNAMES": "localhost",
}
"""What a process that compiles for TPU without one sets before JAX starts (research §1d,
§7); :func:`main` sets each that is unset (importing this module sets nothing)."""

TOPOLOGIES: dict[str, dict[str, Any]] = {
    "v5e": {"topology_name": "v5e:1x1", "chip_config_name": "default",
            "chips_per_host_bounds": (1, 1, 1)},
    "v6e": {"topology_name": "v6e:1x1", "chip_config_name": "default",
            "chips_per_host_bounds": (1, 1, 1)},
    "v5p": {"topology_name": "v5p:2x2x1", "chip_config_name": "megacore",
            "chips_per_host_bounds": (2, 2, 1)},
    "v4": {"topology_name": "v4:2x2x1", "chip_config_name": "megacore",
           "chips_per_host_bounds": (2, 2, 1)},
}  # fmt: skip
"""Topologies libtpu creates without a TPU (research tpu.md §6); a single-device program
compiles for the first device of each."""


def installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


# -- compiling without a TPU -----------------------------------------------------------------

_SHARDINGS: dict[str, Any] = {}


def sharding(generation: str = "v5e") -> Any:
    """A one-device sharding on a compile-only TPU device of ``generation``."""
    if generation not in _SHARDINGS:
        from jax.experimental import topologies
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        topology = topologies.get_topology_desc(
            platform="tpu", num_slices=1, wrap=(False, False, False), **TOPOLOGIES[generation]
        )
        mesh = Mesh(np.array(topology.devices[:1]), ("x",))
        _SHARDINGS[generation] = NamedSharding(mesh, PartitionSpec())
    return _SHARDINGS[generation]


def abstract(tree: Any, generation: str = "v5e") -> Any:
    """``tree``'s arrays as shapes placed on the compile-only TPU device."""
    import jax

    placed = sharding(generation)
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=placed), tree)


def compile_tpu(fn: Callable[..., Any], args: tuple[Any, ...], generation: str = "v5e") -> Any:
    """``fn(*args)`` compiled for TPU ``generation`` without a TPU (the compiled executable)."""
    import jax

    return jax.jit(fn).lower(*abstract(args, generation)).compile()


def memory_of(compiled: Any) -> dict[str, int]:
    """``compiled.memory_analysis()`` as the compile path hands it on (``CompiledMemory``'s
    fields)."""
    stats = compiled.memory_analysis()
    return {
        "argument": int(stats.argument_size_in_bytes),
        "output": int(stats.output_size_in_bytes),
        "temp": int(stats.temp_size_in_bytes),
        "alias": int(stats.alias_size_in_bytes),
        "generated_code": int(stats.generated_code_size_in_bytes),
    }


def entry_arguments(text: str) -> str:
    """The arguments' part of a compiled module's ``entry_computation_layout``."""
    from pytest_jaxport.model.hlo import parse_compiled_hlo

    return parse_compiled_hlo(text).entry_layout.rpartition("->")[0]


# -- the programs: real model code -----------------------------------------------------------


def _normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def matmul_4096x100() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The research's padding probe: a (4096, 100) float32 batch through a 100 x 128 layer."""
    return (lambda x, w: x @ w), (_normal(0, 4096, 100), _normal(1, 100, 128))


def image_rgb() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """An (8, 64, 64, 3) float32 image batch, scaled: the research's 42.7x-or-2x probe."""
    return (lambda x: x * 2.0), (_normal(2, 8, 64, 64, 3),)


def flax_linen_cnn() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """flax linen: conv 32, average pool, conv 64, dense 10 on (8, 64, 64, 3) RGB images."""
    import jax
    from flax import linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.relu(nn.Conv(32, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(64, (3, 3))(x))
            return nn.Dense(10)(x.reshape(x.shape[0], -1))

    model = CNN()
    x = _normal(3, 8, 64, 64, 3)
    params = jax.tree.map(np.asarray, model.init(jax.random.key(0), x))
    return model.apply, (params, x)


def flax_nnx_mlp() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """flax nnx: a 784-512-10 MLP on a batch of 128."""
    import jax
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.hidden = nnx.Linear(784, 512, rngs=rngs)
            self.out = nnx.Linear(512, 10, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return self.out(nnx.relu(self.hidden(x)))

    graphdef, state = nnx.split(MLP(nnx.Rngs(0)))

    def apply(state: Any, x: Any) -> Any:
        return nnx.merge(graphdef, state)(x)

    return apply, (jax.tree.map(np.asarray, state), _normal(4, 128, 784))


def equinox_mlp() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """equinox: ``eqx.nn.MLP`` (100 in, two hidden layers of 64, 10 out) over a batch of 1024."""
    import equinox as eqx
    import jax

    model = eqx.nn.MLP(100, 10, 64, 2, key=jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)

    def apply(params: Any, x: Any) -> Any:
        return jax.vmap(eqx.combine(params, static))(x)

    return apply, (jax.tree.map(np.asarray, params), _normal(5, 1024, 100))


def haiku_convnet() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """haiku: conv 16, relu, flatten, linear 10 on (16, 32, 32, 3) RGB images."""
    import haiku as hk
    import jax

    def net(x: Any) -> Any:
        x = jax.nn.relu(hk.Conv2D(16, 3)(x))
        return hk.Linear(10)(hk.Flatten()(x))

    model = hk.without_apply_rng(hk.transform(net))
    x = _normal(6, 16, 32, 32, 3)
    params = jax.tree.map(np.asarray, model.init(jax.random.key(0), x))
    return model.apply, (params, x)


def attention_bf16() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """``jax.nn.dot_product_attention`` on three bfloat16 (2, 128, 4, 64) arrays."""
    import jax
    import ml_dtypes

    q, k, v = (_normal(7 + i, 2, 128, 4, 64).astype(ml_dtypes.bfloat16) for i in range(3))
    return jax.nn.dot_product_attention, (q, k, v)


def mlp_grad() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """value_and_grad of an MSE through a 784-512-10 MLP, a batch of 128 (research §3a)."""
    import jax
    import jax.numpy as jnp

    def loss(params: Any, x: Any, y: Any) -> Any:
        (w1, b1), (w2, b2) = params
        return jnp.mean((jax.nn.relu(x @ w1 + b1) @ w2 + b2 - y) ** 2)

    params = ((_normal(8, 784, 512), _normal(9, 512)), (_normal(10, 512, 10), _normal(11, 10)))
    return jax.value_and_grad(loss), (params, _normal(12, 128, 784), _normal(13, 128, 10))


PROGRAMS: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "matmul_4096x100": matmul_4096x100,
    "image_rgb": image_rgb,
    "flax_linen_cnn": flax_linen_cnn,
    "flax_nnx_mlp": flax_nnx_mlp,
    "equinox_mlp": equinox_mlp,
    "haiku_convnet": haiku_convnet,
    "attention_bf16": attention_bf16,
    "mlp_grad": mlp_grad,
}


# -- the refusals ----------------------------------------------------------------------------


def refusal_cases() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """Programs the TPU compiler refused somewhere (research tpu.md §4), built under x64."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    f64 = lambda *s: _normal(20, *s).astype(np.float64)  # noqa: E731
    c128 = lambda *s: f64(*s).astype(np.complex128)  # noqa: E731
    i64 = lambda *s: np.arange(math.prod(s), dtype=np.int64).reshape(s) % 7  # noqa: E731
    a = f64(64, 64) + 64 * np.eye(64)
    return {
        "solve_f64": (jnp.linalg.solve, (a, f64(64, 8))),
        "inv_f64": (jnp.linalg.inv, (a,)),
        "slogdet_f64": (jnp.linalg.slogdet, (a,)),
        "det_f64": (jnp.linalg.det, (a,)),
        "lu_factor_f64": (jax.scipy.linalg.lu_factor, (a,)),
        "solve_c128": (jnp.linalg.solve, (a.astype(np.complex128), c128(64, 8))),
        "nextafter_f64": (lax.nextafter, (f64(4096), f64(4096))),
        "nextafter_f32": (lax.nextafter, (_normal(21, 4096), _normal(22, 4096))),
        "bitcast_f64_to_i64": (lambda x: lax.bitcast_convert_type(x, jnp.int64), (f64(4096),)),
        "bitcast_f64_to_u32": (lambda x: lax.bitcast_convert_type(x, jnp.uint32), (f64(4096),)),
        "dot_i64": (lambda x, y: x @ y, (i64(64, 64), i64(64, 64))),
        "dot_i64_i32": (jnp.dot, (i64(64, 64), i64(64, 64).astype(np.int32))),
        "fft_c128": (jnp.fft.fft, (c128(1024),)),
        "rfft_f64": (jnp.fft.rfft, (f64(1024),)),
        "add_i64": (lambda x: x + x, (i64(4096),)),
        "matmul_f64": (lambda x, y: x @ y, (a, a)),
        "cholesky_f64": (jnp.linalg.cholesky, (a @ a.T,)),
    }


def _x64() -> Any:
    import jax

    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # jax < 0.8

    return enable_x64()


def first_line(error: BaseException) -> str:
    """The compiler's reason, without the C++ stack the message may carry."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"{type(error).__name__}: {text.split('    @ ')[0].strip()}"[:300]


CHIP_REFUSED: dict[str, str] = {
    "solve_f64": "UNIMPLEMENTED: Only F32 and C64 types are implemented in LuDecomposition",
    "inv_f64": "UNIMPLEMENTED: Only F32 and C64 types are implemented in LuDecomposition",
    "slogdet_f64": "UNIMPLEMENTED: Only F32 and C64 types are implemented in LuDecomposition",
    "fft_c128": "INVALID_ARGUMENT: Unexpected operand type for FFT",
    "rfft_f64": "INVALID_ARGUMENT: Unexpected operand type for FFT",
}
"""What the lent TPU v5e refused (research tpu.md §B, jax 0.10.2, libtpu 0.0.42.1, x64 on);
float64 matmul and cholesky ran there (:data:`CHIP_COMPILED`)."""
CHIP_COMPILED = ("matmul_f64", "cholesky_f64")


def chip_refusals() -> dict[str, Any]:
    """The chip's record, kept beside each run (the tests hold the rules to it too)."""
    return {
        "source": "shared research tpu.md §B: the lent TPU v5e, jax 0.10.2, libtpu 0.0.42.1",
        "libtpu": "0.0.42.1",
        "refused": CHIP_REFUSED,
        "compiled": list(CHIP_COMPILED),
    }


def refusals(libtpu: str, only: list[str] | None = None) -> dict[str, Any]:
    from pytest_jaxport._jax import lowering, stablehlo, tracing
    from pytest_jaxport.model.devices import Device
    from pytest_jaxport.model.format_census import take_format_census

    device = Device(platform="tpu", generation="v5e", name="TPU v5e", compiler=libtpu)
    found: dict[str, Any] = {}
    with _x64():
        for name, (fn, args) in refusal_cases().items():
            if only is not None and name not in only:
                continue
            started = time.perf_counter()
            try:
                compile_tpu(fn, args)
                said = None
            except Exception as error:  # the compiler's refusal, whatever its type
                said = first_line(error)
            seconds = time.perf_counter() - started
            program = stablehlo.read_program(
                lowering.lower(tracing.trace(fn, args, {}).traced, "tpu")
            )
            census = take_format_census(program, "tpu", device=device)
            rules = sorted({f.rule for f in census.not_compiling})
            found[name] = {
                "compiles": said is None,
                "compiler_said": said,
                "seconds": round(seconds, 2),
                "rules_say_compiles": not rules,
                "rules": rules,
                "agree": (said is None) == (not rules),
            }
            print(f"{name}: {'compiles' if said is None else said[:90]}; rules: {rules}",
                  flush=True)  # fmt: skip
    return found


# -- layouts ---------------------------------------------------------------------------------

ELEMENTS = ("float32", "bfloat16", "int8", "float16", "int32", "uint8", "bool", "int4",
            "float8_e4m3fn", "float64", "complex64")  # fmt: skip
DIMENSIONS = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 127, 128, 129, 200, 256,
              300, 512, 1000, 1024, 4096)  # fmt: skip


def generated_shapes(per_rank: int, seed: int = 0) -> list[tuple[int, ...]]:
    """Arrays of ranks 1 to 4 from :data:`DIMENSIONS`, at most 16 Mi elements (seeded)."""
    rng = random.Random(seed)
    shapes = set()
    for rank in (1, 2, 3, 4):
        for _ in range(per_rank):
            shape = tuple(rng.choice(DIMENSIONS) for _ in range(rank))
            if math.prod(shape) <= 1 << 24:
                shapes.add(shape)
    return sorted(shapes)


def naive_bytes(shape: tuple[int, ...], bits: int) -> int | None:
    """The tile model before the compiler was asked: the two minor dimensions padded to
    (8, 128), (16, 128) or (32, 128) by element width; ``None`` where it claimed nothing."""
    rows = {32: 8, 16: 16, 8: 32}.get(bits)
    if rows is None or len(shape) < 2:
        return None
    padded = (*shape[:-2], -(-shape[-2] // rows) * rows, -(-shape[-1] // 128) * 128)
    return math.prod(padded) * bits // 8


def _dtype(name: str) -> Any:
    import jax.numpy as jnp

    return jnp.dtype(name)


def _argument_layout(compiled: Any) -> str:
    return entry_arguments(compiled.as_text())


def layout_of(shape: tuple[int, ...], element: str, generation: str = "v5e") -> dict[str, Any]:
    """One array compiled as ``x + x`` (``~x`` for bool, itself for int4 and float8)."""
    from pytest_jaxport.model.tiling import default_layout, read_layouts

    dtype = _dtype(element)
    fn: Callable[..., Any] = lambda x: x + x  # noqa: E731
    if element == "bool":
        fn = lambda x: ~x  # noqa: E731
    elif element in ("int4", "float8_e4m3fn"):
        fn = lambda x: x  # noqa: E731
    compiled = compile_tpu(fn, (np.zeros(shape, dtype),), generation)
    (printed,) = re.findall(r"\b[a-z][a-z0-9]*\[[^\]]*\]\{[^{}]*\}", _argument_layout(compiled))
    (chosen,) = read_layouts(printed)
    model = default_layout(shape, chosen.element)
    argument = memory_of(compiled)["argument"]
    return {
        "dtype": element,
        "shape": list(shape),
        "compiler": printed,
        "argument_bytes": argument,
        "layout_bytes": chosen.bytes,
        "data_bytes": chosen.data_bytes,
        "model": str(model),
        "model_bytes": model.bytes,
        "naive_bytes": naive_bytes(shape, chosen.bits),
        "exact": str(model) == printed and model.bytes == argument == chosen.bytes,
    }


def _ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else 0.0


def shapes_part(quick: bool) -> dict[str, Any]:
    per_rank = 4 if quick else 12
    rows = []
    for element in ELEMENTS:
        with _x64() if element == "float64" else contextlib.nullcontext():
            for shape in generated_shapes(per_rank, seed=ELEMENTS.index(element)):
                rows.append(layout_of(shape, element))
    tiled = [r for r in rows if len(r["shape"]) >= 2]
    naive = [r for r in tiled if r["naive_bytes"] is not None]
    summary = {
        "arrays": len(rows),
        "model_exact": sum(r["exact"] for r in rows),
        "layout_bytes_equal_memory_analysis": sum(
            r["layout_bytes"] == r["argument_bytes"] for r in rows
        ),
        "naive_exact": sum(r["naive_bytes"] == r["argument_bytes"] for r in naive),
        "naive_compared": len(naive),
        "naive_over_compiler_max": max(
            (_ratio(r["naive_bytes"], r["argument_bytes"]) for r in naive), default=0.0
        ),
        "naive_over_compiler_median": sorted(
            _ratio(r["naive_bytes"], r["argument_bytes"]) for r in naive
        )[len(naive) // 2]
        if naive
        else 0.0,
        "transposed": sum(
            r["compiler"].split("{")[1].split(":")[0]
            != ",".join(str(d) for d in range(len(r["shape"]) - 1, -1, -1))
            for r in tiled
        ),
    }
    return {"summary": summary, "arrays": rows}


def generations_part(quick: bool, arrays: list[dict[str, Any]]) -> dict[str, Any]:
    rng = random.Random(1)
    sample = [a for a in arrays if a["dtype"] in ("float32", "bfloat16", "int8")]
    sample = rng.sample(sample, min(len(sample), 12 if quick else 40))
    found: dict[str, Any] = {}
    for generation in ("v4", "v5p", "v6e"):
        same = []
        for array in sample:
            again = layout_of(tuple(array["shape"]), array["dtype"], generation)
            same.append(again["compiler"] == array["compiler"]
                        and again["argument_bytes"] == array["argument_bytes"])  # fmt: skip
        found[generation] = {"arrays": len(same), "same_as_v5e": sum(same)}
        print(f"{generation}: {sum(same)} of {len(same)} as on v5e", flush=True)
    return found


def program_part(name: str) -> dict[str, Any]:
    """One program, lowered (the model) and compiled (the compiler), side by side."""
    from pytest_jaxport._jax import lowering, stablehlo, tracing
    from pytest_jaxport.model.census import CompiledMemory
    from pytest_jaxport.model.format_census import take_format_census
    from pytest_jaxport.model.hlo import parse_compiled_hlo
    from pytest_jaxport.model.tiling import read_layouts

    fn, args = PROGRAMS[name]()
    started = time.perf_counter()
    compiled = compile_tpu(fn, args)
    seconds = time.perf_counter() - started
    memory = memory_of(compiled)
    program = replace(
        parse_compiled_hlo(compiled.as_text()), memory=CompiledMemory.from_stats(memory)
    )
    after = take_format_census(program, "tpu", level="compiled")
    lowered = stablehlo.read_program(lowering.lower(tracing.trace(fn, args, {}).traced, "tpu"))
    before = take_format_census(lowered, "tpu")
    arguments = read_layouts(program.entry_layout.rpartition("->")[0])
    top = sorted(after.by_rule("tile-padding"), key=lambda f: -f.amount)[:3]
    footprint = after.memory
    assert footprint is not None
    return {
        "compile_s": round(seconds, 2),
        "lowered_padding": round(before.padding_waste, 4),
        "compiled_padding": round(after.padding_waste, 4),
        "lowered_bytes": list(before.padding_bytes),
        "compiled_bytes": list(after.padding_bytes),
        "argument_data": footprint.argument_data,
        "argument_bytes": footprint.argument_bytes,
        "argument_layout_bytes": sum(a.bytes for a in arguments),
        "argument_padding": round(footprint.argument_padding, 4),
        "output_bytes": footprint.output_bytes,
        "temp_bytes": footprint.temp_bytes,
        "memory": memory,
        "compiled_findings": [f"{f.detail} ({f.fraction:.0%})" for f in top],
    }


CHIP: tuple[tuple[str, tuple[int, ...], str, int], ...] = (
    ("float32", (4096, 100), "f32[4096,100]{0,1:T(8,128)}", 1_703_936),
    ("float32", (4096, 3), "f32[4096,3]{0,1:T(4,128)}", 65_536),
    ("float32", (8, 64, 64, 3), "f32[8,64,64,3]{2,1,3,0:T(8,128)}", 786_432),
    ("bfloat16", (1000, 1000), "bf16[1000,1000]{1,0:T(8,128)(2,1)}", 2_048_000),
    ("float32", (128, 130), "f32[128,130]{0,1:T(8,128)}", 69_632),
    ("float32", (4096, 128), "f32[4096,128]{1,0:T(8,128)}", 2_097_152),
    ("float32", (3, 4096), "f32[3,4096]{1,0:T(4,128)}", 65_536),
    ("float32", (7,), "f32[7]{0:T(128)}", 512),
    ("float32", (1000,), "f32[1000]{0:T(1024)}", 4_096),
    ("uint8", (100, 100, 3), "u8[100,100,3]{1,0,2:T(8,128)(4,1)}", 39_936),
    ("int8", (1000, 1000), "s8[1000,1000]{1,0:T(8,128)(4,1)}", 1_024_000),
    ("bfloat16", (4096, 100), "bf16[4096,100]{0,1:T(8,128)(2,1)}", 851_968),
)
"""The research's layout table (tpu.md §3b): ``x*2`` compiled for TPU v5e, each argument's
layout and bytes, the same deviceless and on the lent TPU v5e (jax 0.10.2, libtpu 0.0.42.1)."""


def chip_part() -> dict[str, Any]:
    from pytest_jaxport.model.tiling import default_layout, read_layouts

    rows = []
    for element, shape, layout, argument in CHIP:
        (chosen,) = read_layouts(layout)
        model = default_layout(shape, chosen.element)
        rows.append({"dtype": element, "shape": list(shape), "chip": layout,
                     "chip_bytes": argument, "model": str(model), "model_bytes": model.bytes,
                     "naive_bytes": naive_bytes(shape, chosen.bits),
                     "exact": str(model) == layout and model.bytes == argument})  # fmt: skip
    return {"source": "shared research tpu.md §3b: the lent TPU v5e, jax 0.10.2, libtpu "
            "0.0.42.1 (deviceless gave the same 12 layouts)", "arrays": rows,
            "exact": sum(r["exact"] for r in rows)}  # fmt: skip


def run_metadata() -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO, check=False).stdout.strip()  # fmt: skip
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "jax": installed("jax"),
        "jaxlib": installed("jaxlib"),
        "libtpu": installed("libtpu"),
    }


def _update(path: Path, key: str, run: dict[str, Any]) -> None:
    """Keep ``run`` under ``runs[key]`` of ``path`` (other releases' runs stay)."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    data.setdefault("runs", {})[key] = run
    data["runs"] = dict(sorted(data["runs"].items()))
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("layouts", "refusals"), default="layouts")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compile", help="print the compiled HLO and memory of these programs")
    parser.add_argument("--cases", help="refusals: only these cases (comma-separated)")
    options = parser.parse_args(argv)
    for name, value in DEVICELESS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    libtpu = installed("libtpu")
    if libtpu is None:
        print("benchmarks/fidelity/tpu_layouts.py needs libtpu: pip install \"pytest-jaxport[tpu]\" "
              "(or the libtpu the installed jax pins)", file=sys.stderr)  # fmt: skip
        return 2
    if options.compile:
        out = {}
        for name in options.compile.split(","):
            fn, args = PROGRAMS[name]()
            compiled = compile_tpu(fn, args)
            out[name] = {"hlo": compiled.as_text(), "memory": memory_of(compiled)}
        json.dump(out, sys.stdout)
        return 0
    run = run_metadata()
    started = time.perf_counter()
    if options.part == "refusals":
        run["cases"] = refusals(libtpu, options.cases.split(",") if options.cases else None)
        run["chip"] = chip_refusals()
        out = options.out or RESULTS / "tpu-refusals.json"
    else:
        shapes = shapes_part(options.quick)
        print(json.dumps(shapes["summary"]), flush=True)
        run["shapes"] = shapes
        run["generations"] = generations_part(options.quick, shapes["arrays"])
        run["programs"] = {}
        for name in PROGRAMS:
            run["programs"][name] = program_part(name)
            print(name, json.dumps(run["programs"][name]), flush=True)
        run["chip"] = chip_part()
        out = options.out or RESULTS / "tpu-layouts.json"
    run["seconds"] = round(time.perf_counter() - started, 1)
    _update(out, f"libtpu {libtpu}", run)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
