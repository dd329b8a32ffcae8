"""An FFT low-pass filter for batches of real signals."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def lowpass_filter(signals: jax.Array, keep: int = 8) -> jax.Array:
    """Zero every frequency bin from ``keep`` upwards along the last axis."""
    spectrum = jnp.fft.rfft(signals, axis=-1)
    bins = jnp.arange(spectrum.shape[-1])
    spectrum = jnp.where(bins < keep, spectrum, 0)
    return jnp.fft.irfft(spectrum, n=signals.shape[-1], axis=-1)
