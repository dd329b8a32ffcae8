"""Checks whose tpu compiled census the chip itself gives (benchmarks/tpu_chip_device.sh)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def solve(a, b):
    return jnp.linalg.solve(a, b)


def eigvals(a):
    return jnp.linalg.eigh(a)[0]


def _third(x_ref, o_ref):
    o_ref[...] = x_ref[...] // 3


def third(x):
    return pl.pallas_call(
        _third,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(),
    )(x)


@pytest.mark.portable
def test_solve(jaxport):
    a = np.eye(64, dtype=np.float32) * 2.0
    jaxport.check(solve, a, np.ones((64, 8), np.float32))


@pytest.mark.portable
def test_eigh(jaxport):
    jaxport.check(eigvals, np.eye(32, dtype=np.float32))


@pytest.mark.portable(platforms=["tpu"], reference="tpu")
def test_kernel(jaxport):
    jaxport.check(third, np.ones((8, 128), np.int32))
