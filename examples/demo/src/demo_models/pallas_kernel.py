"""A fused bias-add + GELU (sigmoid approximation) as a Pallas kernel, with a portable fallback.

``jax.lax.platform_dependent`` picks the branch when the function is lowered:

* cuda: a Pallas Mosaic GPU kernel (``mosaic_gpu_v2``), written with ``plgpu.kernel``,
  Mosaic GPU's own entry point. Mosaic GPU is where Pallas on GPU is going: jax 0.12
  deprecates the Triton backend. (On jax 0.6, whose ``plgpu.kernel`` adds a second Mosaic
  GPU kernel just to allocate the output, the same body runs as a Pallas Triton kernel,
  ``__gpu$xla.gpu.triton``, so the demo counts one kernel on every release.)
* tpu: a Pallas Mosaic TPU kernel (``tpu_custom_call``).
* everything else (cpu, rocm): plain ``jax.numpy``, which XLA compiles for any backend.
  Mosaic GPU does not support ROCm.

Importing Mosaic GPU needs ``absl-py`` on jax < 0.12 (pytest-jaxport depends on it).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu

# plgpu.kernel takes the output's type as `out_type` from jax 0.10 (`out_shape` before).
_OUT_TYPE = "out_type" if "out_type" in inspect.signature(plgpu.kernel).parameters else "out_shape"


def _gelu(y: jax.Array) -> jax.Array:
    return y * jax.nn.sigmoid(1.702 * y)


def _bias_gelu_kernel(x_ref, b_ref, o_ref):  # type: ignore[no-untyped-def]
    o_ref[...] = _gelu(x_ref[...] + b_ref[...])


def bias_gelu_reference(x: jax.Array, bias: jax.Array) -> jax.Array:
    """The portable fallback: what every other backend runs."""
    return _gelu(x + bias)


Backend = Callable[[jax.ShapeDtypeStruct], Callable[..., jax.Array]]
"""Builds the kernel for an output type: ``backend(out)(x, bias)``."""


def _mosaic_gpu(out: jax.ShapeDtypeStruct) -> Callable[..., jax.Array]:
    return plgpu.kernel(_bias_gelu_kernel, **{_OUT_TYPE: out})


def _pallas_call(compiler_params: object) -> Backend:
    def build(out: jax.ShapeDtypeStruct) -> Callable[..., jax.Array]:
        return pl.pallas_call(_bias_gelu_kernel, out_shape=out, compiler_params=compiler_params)

    return build


if jax.__version_info__ >= (0, 7):
    _CUDA_BACKEND: Backend = _mosaic_gpu
else:
    from jax.experimental.pallas import triton as pltriton

    _CUDA_BACKEND = _pallas_call(pltriton.CompilerParams())


def _pallas_bias_gelu(x: jax.Array, bias: jax.Array, *, backend: Backend) -> jax.Array:
    kernel = backend(jax.ShapeDtypeStruct(x.shape, x.dtype))
    # One call site for every backend: each platform's kernel is reported at this line, so
    # the report sees the tpu kernel as the cuda kernel's counterpart (not a rewrite). The
    # bias is broadcast first: Mosaic GPU does not broadcast inside a kernel.
    return kernel(x, jnp.broadcast_to(bias, x.shape))


def fused_bias_gelu(x: jax.Array, bias: jax.Array) -> jax.Array:
    """``gelu(x + bias)`` for ``x`` ``(rows, features)`` and ``bias`` ``(features,)``."""
    return jax.lax.platform_dependent(
        x,
        bias,
        cuda=functools.partial(_pallas_bias_gelu, backend=_CUDA_BACKEND),
        tpu=functools.partial(_pallas_bias_gelu, backend=_pallas_call(pltpu.CompilerParams())),
        default=bias_gelu_reference,
    )
