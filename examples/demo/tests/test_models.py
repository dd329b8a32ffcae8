"""Portable tests for demo_models: each one checks a function with the `jaxport` fixture.

``jaxport.check(fn, *args)`` lowers ``fn`` for cpu, cuda, rocm and tpu (no GPU or TPU
needed), counts vendor-library and custom-kernel dispatches against the budgets in
pyproject.toml (and this file's markers), runs it on the platforms present, compares their
outputs with cpu's, and returns cpu's outputs for ordinary asserts. A direct call compared
with them runs on cpu too (``jax.default_device``), so the asserts hold on a GPU or TPU host.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from demo_models import (
    bias_gelu_reference,
    convnet,
    feature_layer,
    fp8_matmul,
    fused_bias_gelu,
    init_attention,
    init_convnet,
    init_features,
    init_mlp,
    lowpass_filter,
    mlp,
    multi_head_attention,
    quantize,
    ridge_lstsq,
    solve,
)


def _key(n: int) -> jax.Array:
    return jax.random.key(n)


# -- dense models ---------------------------------------------------------------------------


@pytest.mark.portable
def test_mlp(jaxport):
    params = init_mlp(_key(0))
    x = jax.random.normal(_key(1), (16, 32))

    logits = jaxport.check(mlp, params, x)

    # The same forward pass in NumPy (jax.nn.gelu defaults to the tanh approximation).
    h = np.asarray(x, np.float64)
    for layer in params[:-1]:
        z = h @ np.asarray(layer["w"]) + np.asarray(layer["b"])
        h = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    expected = h @ np.asarray(params[-1]["w"]) + np.asarray(params[-1]["b"])
    assert logits.shape == (16, 10)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


# Attention is six matmuls; pin that on the vendor-heavy backends so a refactor that adds a
# seventh (or swaps einsums for a cuDNN fused-attention call) shows up in review.
@pytest.mark.portable(max_library_calls={"cublas": 6, "hipblas": 6})
def test_multi_head_attention(jaxport):
    params = init_attention(_key(2), d_model=32, heads=4)
    x = jax.random.normal(_key(3), (2, 16, 32))
    causal = jnp.tril(jnp.ones((16, 16), dtype=bool))

    out = jaxport.check(multi_head_attention, params, x, causal)

    assert out.shape == x.shape
    assert np.isfinite(out).all()
    # Causality: changing the last 8 positions leaves the first 8 outputs unchanged. Called
    # on the reference platform, where check() computed `out` (a TPU host's default is tpu).
    changed = x.at[:, 8:].set(jax.random.normal(_key(4), (2, 8, 32)))
    with jax.default_device(jax.devices(jaxport.reference)[0]):
        again = multi_head_attention(params, changed, causal)
    np.testing.assert_allclose(again[:, :8], out[:, :8], rtol=1e-5, atol=1e-6)
    assert not np.allclose(again[:, 8:], out[:, 8:])


# -- convolutions ---------------------------------------------------------------------------


@pytest.mark.portable
def test_convnet(jaxport):
    params = init_convnet(_key(5))
    images = jax.random.normal(_key(6), (4, 16, 16, 3))

    logits = jaxport.check(convnet, params, images)

    assert logits.shape == (4, 10)
    assert np.isfinite(logits).all()
    # Each image is classified independently of the rest of its batch (on the reference
    # platform, as check() computed `logits`: a GPU or TPU host's default device differs).
    with jax.default_device(jax.devices(jaxport.reference)[0]):
        alone = convnet(params, images[1:2])
    np.testing.assert_allclose(alone, logits[1:2], rtol=1e-5, atol=1e-6)


# FAILS ON PURPOSE, to show what a budget failure looks like. The conv net has two
# convolutions, i.e. two cuDNN dispatches on cuda; this marker allows one (it overrides the
# project's `cudnn = 2` in [tool.jaxport.budget.cuda]), so the test fails with
#   cuda: 2 cudnn calls > 1 (max_library_calls.cudnn, set in tests/test_models.py::...);
#   check 'convnet', lowered
# followed by the two convolutions, the source line that produced them, and what to do
# ("to pass: ..."). (tests/test_examples.py checks this comment against the demo's output.)
@pytest.mark.portable(max_library_calls={"cudnn": 1})
def test_cudnn_over_budget(jaxport):
    params = init_convnet(_key(5))
    images = jax.random.normal(_key(6), (4, 16, 16, 3))

    logits = jaxport.check(convnet, params, images)

    assert logits.shape == (4, 10)  # the outputs are fine; only the budget is broken


# Training needs the backward pass too, and its lock-in differs from the forward pass:
# transforms=["grad"] also checks 'convnet[grad]', the gradient of the summed logits with
# respect to the parameters and the images. Each convolution gains two backward convolutions
# (input and weight gradients), so cuda dispatches 6 cuDNN convolutions where the forward
# pass dispatches 2. This marker budgets exactly that for both checks of this test.
@pytest.mark.portable(transforms=["grad"], max_library_calls={"cudnn": 6, "miopen": 6})
def test_convnet_gradient(jaxport):
    params = init_convnet(_key(5))
    images = jax.random.normal(_key(6), (4, 16, 16, 3))

    logits = jaxport.check(convnet, params, images)

    assert logits.shape == (4, 10)


# -- linear algebra -------------------------------------------------------------------------


@pytest.mark.portable
def test_solve(jaxport):
    a = jax.random.normal(_key(7), (16, 16)) + 16 * jnp.eye(16)  # well conditioned
    b = jax.random.normal(_key(8), (16, 4))

    x = jaxport.check(solve, a, b)

    assert x.shape == (16, 4)
    np.testing.assert_allclose(a @ x, b, rtol=1e-4, atol=1e-5)


@pytest.mark.portable
def test_ridge_lstsq(jaxport):
    features = jax.random.normal(_key(9), (64, 8))
    true_weights = jnp.arange(1.0, 9.0)
    targets = features @ true_weights  # noiseless: ridge with a tiny l2 recovers the weights

    weights = jaxport.check(ridge_lstsq, features, targets)

    assert weights.shape == (8,)
    np.testing.assert_allclose(weights, true_weights, rtol=1e-3, atol=1e-3)


# -- signal processing ------------------------------------------------------------------------


# cuFFT, hipFFT and DUCC round differently from one another: compare FFT outputs a little
# more loosely than the project's float32 default.
@pytest.mark.portable(rtol=2e-2, atol=2e-3)
def test_lowpass_filter(jaxport):
    t = jnp.arange(128) / 128
    low = jnp.sin(2 * jnp.pi * 3 * t)  # bin 3: kept
    high = 0.5 * jnp.sin(2 * jnp.pi * 40 * t)  # bin 40: removed
    noise = 0.01 * jax.random.normal(_key(10), (4, 128))
    signals = low + high + noise

    filtered = jaxport.check(lowpass_filter, signals)

    assert filtered.shape == signals.shape
    np.testing.assert_allclose(filtered, jnp.broadcast_to(low, signals.shape), atol=0.05)


# -- a hand-written kernel --------------------------------------------------------------------


# The project forbids custom kernels (max_custom_calls = 0). This one is known and owned: it
# is a Pallas Mosaic GPU kernel on cuda and a Pallas Mosaic TPU kernel on tpu (one custom call
# each), while cpu and rocm run the portable jnp fallback. Budget exactly that one kernel here,
# so a second hand-written kernel sneaking into this function still fails.
#
# On a CPU the fallback is all that runs: a wrong TPU kernel would pass. emulate=["tpu"] also
# runs the check on the CPU as tpu computes it (its platform_dependent branch, the Mosaic TPU
# kernel in TPU interpret mode) and compares that with cpu's outputs: the report shows
# "tpu (emulated on cpu)  numerics: match". (On jax >= 0.11.1, --jaxport-emulate=cuda runs the
# Mosaic GPU kernel in its interpret mode too.)
@pytest.mark.portable(max_custom_calls=1, emulate=["tpu"])
def test_fused_bias_gelu(jaxport):
    x = jax.random.normal(_key(11), (8, 128))
    bias = jax.random.normal(_key(12), (128,))

    out = jaxport.check(fused_bias_gelu, x, bias)

    assert out.shape == x.shape
    np.testing.assert_allclose(out, bias_gelu_reference(x, bias), rtol=1e-6, atol=1e-6)
    y = np.asarray(x + bias, np.float64)
    np.testing.assert_allclose(out, y / (1 + np.exp(-1.702 * y)), rtol=1e-5, atol=1e-6)


# Pallas kernels are differentiable only if written so (with jax.custom_vjp, or a kernel body
# JAX can linearize and transpose). This one is not: the gradient of fused_bias_gelu cannot be
# taken on cuda and tpu, where the Pallas kernel runs, while cpu and rocm differentiate the jnp
# fallback. jaxport reports that as a finding on check 'fused_bias_gelu[grad]' (failed to lower
# on cuda and tpu, "no VJP ... for Pallas kernel _bias_gelu_kernel") and warns. A finding on a
# platform in must_lower fails the test; this test narrows must_lower to the platforms where
# the model must train today, so the demo shows the finding without failing on it.
@pytest.mark.portable(max_custom_calls=1, must_lower=["cpu", "rocm"], transforms=["grad"])
def test_fused_bias_gelu_gradient(jaxport):
    x = jax.random.normal(_key(11), (8, 128))
    bias = jax.random.normal(_key(12), (128,))

    out = jaxport.check(fused_bias_gelu, x, bias)

    assert out.shape == x.shape


# -- numeric formats and memory layout ------------------------------------------------------


# Quantized for H100: float8_e4m3fn is the OCP format NVIDIA's FP8 tensor cores take. An
# MI300 (pyproject.toml judges rocm for one: devices = { rocm = "mi300" }) takes the FNUZ
# variants instead, so moving there means re-quantizing: the report shows a float8-variant
# finding on rocm at fp8_matmul's dot, none on cuda (and TPU v5e converts float8 operands: a
# float8-matmul finding on tpu). One format finding per platform is this test's budget.
@pytest.mark.portable(max_format_findings=1)
def test_fp8_matmul(jaxport):
    x = jax.random.normal(_key(13), (64, 128))
    w = jax.random.normal(_key(14), (128, 32)) / 128**0.5
    (x8, x_scale), (w8, w_scale) = quantize(x), quantize(w)

    out = jaxport.check(fp8_matmul, x8, w8, x_scale, w_scale)

    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, x @ w, rtol=0.2, atol=0.2)  # float8 keeps 3 mantissa bits


# TPU lays arrays out in (8, 128) tiles (float32): a batch of 100-feature vectors pads every
# row to 128 lanes, so 28 of every 128 bytes the first operand moves are padding: 10.9% of
# what the matmul reads and writes (x, and the (4096, 128) result). With 128 features nothing
# pads. The report shows both; 20% is this test's ceiling.
@pytest.mark.portable(max_padding_waste=0.2)
def test_feature_layer_padding(jaxport):
    for features in (100, 128):
        w = init_features(_key(15), features)
        x = jax.random.normal(_key(16), (4096, features))

        out = jaxport.check(feature_layer, w, x, name=f"feature_layer_{features}")

        assert out.shape == (4096, 128)
        np.testing.assert_allclose(out, np.asarray(x) @ np.asarray(w), rtol=1e-4, atol=1e-4)
