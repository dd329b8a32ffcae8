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


def _mosaic_gpu_bias_gelu(x: jax.Array, bias: jax.Array) -> jax.Array:
    kernel = plgpu.kernel(_bias_gelu_kernel, **{_OUT_TYPE: jax.ShapeDtypeStruct(x.shape, x.dtype)})
    return kernel(x, jnp.broadcast_to(bias, x.shape))  # Mosaic GPU does not broadcast in-kernel


def _pallas_bias_gelu(x: jax.Array, bias: jax.Array, *, compiler_params: object) -> jax.Array:
    return pl.pallas_call(
        _bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=compiler_params,
    )(x, bias.reshape(1, -1))


def bias_gelu_reference(x: jax.Array, bias: jax.Array) -> jax.Array:
    """The portable fallback: what every other backend runs."""
    return _gelu(x + bias)


if jax.__version_info__ >= (0, 7):
    _CUDA_KERNEL = _mosaic_gpu_bias_gelu
else:
    from jax.experimental.pallas import triton as pltriton

    _CUDA_KERNEL = functools.partial(_pallas_bias_gelu, compiler_params=pltriton.CompilerParams())


def fused_bias_gelu(x: jax.Array, bias: jax.Array) -> jax.Array:
    """``gelu(x + bias)`` for ``x`` ``(rows, features)`` and ``bias`` ``(features,)``."""
    return jax.lax.platform_dependent(
        x,
        bias,
        cuda=_CUDA_KERNEL,
        tpu=functools.partial(_pallas_bias_gelu, compiler_params=pltpu.CompilerParams()),
        default=bias_gelu_reference,
    )
