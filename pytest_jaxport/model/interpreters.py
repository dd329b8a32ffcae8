"""Which interpreter runs a Pallas kernel of each kind on a CPU, as a platform would (pure).

An emulation runs a platform's Pallas kernels in the interpret mode matching the kernel
kind that platform's lowering selects; each interpreter arrived with a JAX release
(:attr:`Interpreter.since`), and a kernel this JAX cannot interpret blocks the emulation
(:func:`needs_release` says why).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

KernelKind = Literal["mosaic_tpu", "mosaic_gpu", "triton"]
KERNEL_KINDS: tuple[KernelKind, ...] = ("mosaic_tpu", "mosaic_gpu", "triton")


@dataclass(frozen=True, slots=True, kw_only=True)
class Interpreter:
    """A way JAX runs a Pallas kernel of one kind on a CPU."""

    name: str
    api: str
    since: str
    """The first JAX release whose public API has it."""


TPU_INTERPRET = Interpreter(
    name="TPU interpret mode", api="jax.experimental.pallas.tpu.InterpretParams", since="0.6.2"
)
"""Simulates VMEM, DMAs and semaphores (``pltpu.force_tpu_interpret_mode`` from 0.7)."""
GPU_INTERPRET = Interpreter(
    name="Mosaic GPU interpret mode",
    api="jax.experimental.pallas.mosaic_gpu.InterpretGPUParams",
    since="0.11.1",
)
"""Simulates shared memory, threads and barriers (``plgpu.force_gpu_interpret_mode``)."""
GENERIC_INTERPRET = Interpreter(
    name="Pallas interpreter", api="pallas_call(interpret=True)", since="0.4.31"
)
"""The generic interpreter: what a Triton kernel has (it has no interpret mode of its own)."""

_INTERPRETERS: Mapping[tuple[str, KernelKind], Interpreter] = {
    ("tpu", "mosaic_tpu"): TPU_INTERPRET,
    ("cuda", "mosaic_gpu"): GPU_INTERPRET,
    ("cuda", "triton"): GENERIC_INTERPRET,
    ("rocm", "triton"): GENERIC_INTERPRET,
}


def interpreter_for(platform: str, kind: KernelKind) -> Interpreter | None:
    """The interpreter that runs a ``kind`` kernel as ``platform`` would, or ``None`` where
    ``platform`` does not run that kind (a TPU kernel on cuda, Mosaic GPU on rocm).

    >>> interpreter_for("cuda", "triton").name
    'Pallas interpreter'
    >>> interpreter_for("rocm", "mosaic_gpu") is None
    True
    """
    return _INTERPRETERS.get((platform, kind))


def needs_release(interpreter: Interpreter, installed: str) -> str:
    """Why a kernel is not interpreted here: ``cannot interpret here: needs jax >= 0.11.1
    (Mosaic GPU interpret mode; installed 0.10.2)``."""
    return (
        f"cannot interpret here: needs jax >= {interpreter.since} ({interpreter.name}; "
        f"installed {installed})"
    )
