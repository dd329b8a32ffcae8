"""Regenerate the compiled-HLO samples in this folder (used by tests/test_hlo.py).

Needs jax, jaxlib and the jax CUDA plugin at the jaxlib version; no GPU:

    JAX_PLATFORMS=cpu python tests/data/hlo/generate_samples.py

``cuda_*.txt`` are deviceless compilations against the shipped H100 description,
``cpu_*.txt`` are compilations for the host. A line ending in ``# SAMPLE:<name>`` is where
the tests expect the named sample's library dispatch to be attributed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental import topologies
from jax.experimental.pallas import triton as pltriton
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from pytest_jaxport._jax.deviceless import deviceless_compile, load_gpu_description  # noqa: E402


def conv(x: Any, w: Any) -> Any:
    dims = ("NHWC", "HWIO", "NHWC")
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)  # SAMPLE:conv


def matmul(a: Any, b: Any) -> Any:
    return jax.nn.gelu(a @ b)  # SAMPLE:matmul


def eigh(a: Any) -> Any:
    return jnp.linalg.eigh(a)[0]  # SAMPLE:eigh


def fft(x: Any) -> Any:
    return jnp.fft.fft(x)  # SAMPLE:fft


def solve(a: Any, b: Any) -> Any:
    return jnp.linalg.solve(a, b)  # SAMPLE:solve


def triangular_solve(a: Any, b: Any) -> Any:
    return jax.scipy.linalg.solve_triangular(a, b, lower=True)  # SAMPLE:trisolve


def top_k(x: Any) -> Any:
    return lax.top_k(x, 8)


def _add_kernel(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] + y_ref[...]


def pallas_add(x: Any, y: Any) -> Any:
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    call = pl.pallas_call(_add_kernel, out_shape=out, compiler_params=pltriton.CompilerParams())
    return call(x, y)  # SAMPLE:pallas


def scan_mlp(w: Any, x: Any) -> Any:
    def layer(h: Any, wi: Any) -> tuple[Any, None]:
        return jax.nn.relu(h @ wi), None  # SAMPLE:scan

    return lax.scan(layer, x, w)[0]


def branch(p: Any, x: Any) -> Any:
    return lax.cond(p > 0, lambda v: jnp.fft.fft(v).real, jnp.sort, x)  # SAMPLE:cond


def f32(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def c64(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.complex64)


_CUDA: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, object] | None]] = {
    "matmul": (matmul, (f32(256, 256), f32(256, 256)), None),
    "matmul_cublas": (
        matmul,
        (f32(256, 256), f32(256, 256)),
        {"xla_gpu_enable_triton_gemm": False},
    ),
    "conv": (conv, (f32(8, 32, 32, 16), f32(3, 3, 16, 32)), None),
    "conv_nolib": (
        conv,
        (f32(8, 32, 32, 16), f32(3, 3, 16, 32)),
        {"xla_gpu_experimental_disable_binary_libraries": True},
    ),
    "eigh": (eigh, (f32(64, 64),), None),
    "fft": (fft, (c64(1024),), None),
    "trisolve": (triangular_solve, (f32(64, 64), f32(64, 8)), None),
    "topk": (top_k, (f32(128, 4096),), None),
    "pallas": (pallas_add, (f32(128), f32(128)), None),
    "scan": (scan_mlp, (f32(4, 128, 128), f32(8, 128)), None),
    "cond": (branch, (f32(), f32(256)), None),
}

_CPU: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "matmul": (matmul, (f32(256, 256), f32(256, 256))),
    "conv": (conv, (f32(8, 32, 32, 16), f32(3, 3, 16, 32))),
    "fft": (fft, (c64(1024),)),
    "solve": (solve, (f32(64, 64), f32(64, 8))),
    "cond": (branch, (f32(), f32(256))),
}


def collective_text() -> str:
    """A psum over a two-GPU topology: all-reduce-start / all-reduce-done on cuda."""
    target = load_gpu_description("h100")
    topology = topologies.get_topology_desc(platform="cuda", target_config=target, topology="1x1x2")
    mesh = Mesh(topology.devices, ("x",))

    @partial(jax.shard_map, mesh=mesh, in_specs=P("x"), out_specs=P())
    def gram(x: Any) -> Any:
        return lax.psum(x @ x.T, "x")  # SAMPLE:collective

    arg = jax.ShapeDtypeStruct((256, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    return str(jax.jit(gram).trace(arg).lower().compile().as_text())


def main() -> None:
    target = load_gpu_description("h100")
    for name, (fn, args, options) in _CUDA.items():
        text = deviceless_compile(fn, args, {}, target_config=target, compiler_options=options)
        (HERE / f"cuda_{name}.txt").write_text(text)
    (HERE / "cuda_collective.txt").write_text(collective_text())
    for name, (fn, args) in _CPU.items():
        text = jax.jit(fn).trace(*args).lower().compile().as_text()
        (HERE / f"cpu_{name}.txt").write_text(text)


if __name__ == "__main__":
    main()
