"""A fused bias-add + GELU (sigmoid approximation) as a Pallas kernel, with a portable fallback.

``jax.lax.platform_dependent`` picks the branch when the function is lowered:

* cuda: a Pallas Triton kernel (``__gpu$xla.gpu.triton``). Passing
  ``pltriton.CompilerParams()`` selects the Triton backend explicitly; without it, Pallas on
  GPU defaults to Mosaic GPU.
* tpu: a Pallas Mosaic TPU kernel (``tpu_custom_call``).
* everything else (cpu, rocm): plain ``jax.numpy``, which XLA compiles for any backend.
"""

from __future__ import annotations

import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

# jax >= 0.6 names; older releases call them TritonCompilerParams and TPUCompilerParams.
_TRITON_PARAMS = getattr(pltriton, "CompilerParams", None) or pltriton.TritonCompilerParams
_MOSAIC_TPU_PARAMS = getattr(pltpu, "CompilerParams", None) or pltpu.TPUCompilerParams


def _gelu(y: jax.Array) -> jax.Array:
    return y * jax.nn.sigmoid(1.702 * y)


def _bias_gelu_kernel(x_ref, b_ref, o_ref):  # type: ignore[no-untyped-def]
    o_ref[...] = _gelu(x_ref[...] + b_ref[...])


def _pallas_bias_gelu(x: jax.Array, bias: jax.Array, *, compiler_params: object) -> jax.Array:
    return pl.pallas_call(
        _bias_gelu_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=compiler_params,
    )(x, bias.reshape(1, -1))


def bias_gelu_reference(x: jax.Array, bias: jax.Array) -> jax.Array:
    """The portable fallback: what every other backend runs."""
    return _gelu(x + bias)


def fused_bias_gelu(x: jax.Array, bias: jax.Array) -> jax.Array:
    """``gelu(x + bias)`` for ``x`` ``(rows, features)`` and ``bias`` ``(features,)``."""
    return jax.lax.platform_dependent(
        x,
        bias,
        cuda=functools.partial(_pallas_bias_gelu, compiler_params=_TRITON_PARAMS()),
        tpu=functools.partial(_pallas_bias_gelu, compiler_params=_MOSAIC_TPU_PARAMS()),
        default=bias_gelu_reference,
    )
