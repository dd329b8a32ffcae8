"""Runs on a lent accelerator: one harness with a leg per accelerator (an NVIDIA GPU, a TPU),
and the chip's own measurements (``README.md``).

Standard library only at import: a validation run's interpreter may lack JAX until set up.
"""
