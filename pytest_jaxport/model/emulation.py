"""What another platform computes differently from the CPU, and what an emulation of it did.

An *emulation* runs a checked function on the CPU as a platform that is not present would
run it (``pytest_jaxport._jax.emulate``): its ``lax.platform_dependent`` branch for that
platform, its Pallas kernels in the interpret mode matching the kernel kind that platform's
lowering selects, and its float32 dots and convolutions at the default precision with their
operands rounded to the format that platform multiplies in. This module holds the pure
half: the facts (which platform multiplies float32 in which format, which interpreter runs
which kernel kind, from which JAX release) and the records an emulation produces. It
imports neither JAX nor pytest.

>>> default_dot_format("tpu")
NumberFormat(name='bfloat16', exponent_bits=8, mantissa_bits=7)
>>> default_dot_format("cuda", cuda_capability=(7, 0)) is None  # V100: full float32
True

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from pytest_jaxport.model.platforms import DESCRIPTIONS

HOST = "cpu"
"""Where an emulation runs."""

EMULATED_PLATFORMS: tuple[str, ...] = tuple(p.name for p in DESCRIPTIONS.values() if p.emulated)
"""Platforms an emulation can stand in for (the CPU is executed, never emulated), as their
descriptions say (:mod:`pytest_jaxport.model.platforms`)."""


def emulated_label(platform: str) -> str:
    """How reports name an emulated platform's numerics: never as if executed there.

    >>> emulated_label("tpu")
    'tpu (emulated on cpu)'
    """
    return f"{platform} (emulated on {HOST})"


# -- number formats ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberFormat:
    """A floating-point format operands are rounded to (``lax.reduce_precision`` widths)."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    """Explicit mantissa bits (the implicit leading one not counted)."""

    def __str__(self) -> str:
        return f"{self.name} (e{self.exponent_bits}m{self.mantissa_bits})"


BFLOAT16 = NumberFormat(name="bfloat16", exponent_bits=8, mantissa_bits=7)
TF32 = NumberFormat(name="tf32", exponent_bits=8, mantissa_bits=10)
FORMATS: Mapping[str, NumberFormat] = {f.name: f for f in (BFLOAT16, TF32)}


@dataclass(frozen=True, slots=True, kw_only=True)
class DotPrecisionRule:
    """How one platform (one GPU generation) computes a float32 dot or convolution at the
    default precision, with the public source that says so."""

    platform: str
    hardware: str
    format: NumberFormat | None
    """What operands are rounded to; ``None``: full float32."""
    source: str
    min_capability: tuple[int, int] | None = None
    """For cuda: the lowest compute capability the row covers (rows are read top down)."""


_PRECISION_DOC = (
    "jax.lax.Precision docstring (DEFAULT: 'On TPU: performs float32 computations in "
    "bfloat16. On GPU: uses tensorfloat32 if available (e.g. on A100 and H100 GPUs), "
    "otherwise standard float32 (e.g. on V100 GPUs)'); JAX docs, 'Matmul precision'; "
    "jax-ml/jax#18934"
)

PRECISION_RULES: tuple[DotPrecisionRule, ...] = (
    DotPrecisionRule(
        platform="tpu",
        hardware="every TPU generation (MXU)",
        format=BFLOAT16,
        source=_PRECISION_DOC,
    ),
    DotPrecisionRule(
        platform="cuda",
        hardware="Ampere and newer (compute capability 8.0+: A100, H100, H200, B200)",
        format=TF32,
        min_capability=(8, 0),
        source=_PRECISION_DOC + "; NVIDIA A100 Tensor Core GPU Architecture whitepaper "
        "(TF32: 8-bit exponent, 10-bit mantissa)",
    ),
    DotPrecisionRule(
        platform="cuda",
        hardware="Volta and Turing (compute capability 7.x: V100, T4)",
        format=None,
        min_capability=(0, 0),
        source=_PRECISION_DOC + "; TF32 tensor cores arrived with Ampere (A100 whitepaper)",
    ),
    DotPrecisionRule(
        platform="rocm",
        hardware="AMD Instinct",
        format=None,
        source="JAX's Precision docs name a reduced default for TPU and NVIDIA GPUs only",
    ),
    DotPrecisionRule(
        platform="oneapi",
        hardware="Intel GPUs (Data Center GPU Max, Arc)",
        format=None,
        source="oneDNN's default floating-point math mode is strict (dnnl::fpmath_mode::"
        "strict: float32 computed in float32; tf32 or bf16 only where asked, oneDNN docs, "
        "'Primitive Attributes: floating-point math mode'); JAX's Precision docs name a "
        "reduced default for TPU and NVIDIA GPUs only",
    ),
    DotPrecisionRule(
        platform="cpu", hardware="any CPU", format=None, source="jax.lax.Precision docstring "
        "('Has no impact on CPU backends')"
    ),
)  # fmt: skip
"""Float32 dots and convolutions at the default precision, per platform (top row wins)."""

DEFAULT_CUDA_CAPABILITY = (9, 0)
"""The GPU a cuda emulation assumes when none is configured: an H100, like the deviceless
compile's default target description."""


def precision_rule(
    platform: str, *, cuda_capability: tuple[int, int] | None = None
) -> DotPrecisionRule | None:
    """The row of :data:`PRECISION_RULES` for ``platform`` (``None`` for an unknown one)."""
    capability = cuda_capability or DEFAULT_CUDA_CAPABILITY
    for rule in PRECISION_RULES:
        if rule.platform != platform:
            continue
        if rule.min_capability is None or capability >= rule.min_capability:
            return rule
    return None


def default_dot_format(
    platform: str, *, cuda_capability: tuple[int, int] | None = None
) -> NumberFormat | None:
    """The format ``platform`` rounds float32 dot operands to at the default precision
    (``None``: full float32). ``cuda_capability``: the GPU generation for cuda (default
    :data:`DEFAULT_CUDA_CAPABILITY`)."""
    rule = precision_rule(platform, cuda_capability=cuda_capability)
    return None if rule is None else rule.format


_CAPABILITY = re.compile(
    r"cuda_compute_capability\s*\{[^}]*?major:\s*(\d+)[^}]*?minor:\s*(\d+)[^}]*\}", re.S
)


def compute_capability(target_text: str) -> tuple[int, int] | None:
    """The ``cuda_compute_capability`` of a text ``GpuTargetConfigProto`` (the configured
    ``target``), else ``None``.

    >>> compute_capability("gpu_device_info { cuda_compute_capability { major: 8 minor: 0 } }")
    (8, 0)
    """
    found = _CAPABILITY.search(target_text)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


# -- kernels and the interpreters that run them on a CPU ----------------------------------------

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


# -- what an emulation did ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EmulatedKernel:
    """A kernel the emulation ran in an interpret mode."""

    label: str
    """``Pallas kernel matmul`` (``_jax.adapters.kernel_label``)."""
    location: str
    """The user's ``file:line`` that called it (``""`` where JAX kept none)."""
    interpreter: str

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "location": self.location, "interpreter": self.interpreter}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmulatedKernel:
        return cls(
            label=str(data["label"]),
            location=str(data["location"]),
            interpreter=str(data["interpreter"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundedOp:
    """Default-precision dots or convolutions at one source line whose operands were
    rounded to ``format`` (``count`` equations in the program, loop bodies counted once)."""

    op: str
    location: str
    format: str
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "location": self.location, "format": self.format,
                "count": self.count}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoundedOp:
        return cls(
            op=str(data["op"]),
            location=str(data["location"]),
            format=str(data["format"]),
            count=int(data.get("count", 1)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ChosenBranch:
    """A ``lax.platform_dependent`` resolved for the emulated platform."""

    location: str
    branch: str
    """The platform names of the branch taken (``"tpu"``), or ``"default"``."""

    def to_dict(self) -> dict[str, Any]:
        return {"location": self.location, "branch": self.branch}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChosenBranch:
        return cls(location=str(data["location"]), branch=str(data["branch"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Unemulated:
    """Something the emulation could not do as the platform would.

    ``blocks``: the emulation did not run at all (a kernel this JAX cannot interpret, an FFI
    target with no CPU counterpart); otherwise it ran without this part emulated (a dot
    inside a ``shard_map`` computed at full float32), which the report says beside the
    numbers.
    """

    what: str
    location: str
    reason: str
    blocks: bool

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "location": self.location, "reason": self.reason,
                "blocks": self.blocks}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Unemulated:
        return cls(
            what=str(data["what"]),
            location=str(data["location"]),
            reason=str(data["reason"]),
            blocks=bool(data["blocks"]),
        )


def needs_release(interpreter: Interpreter, installed: str) -> str:
    """Why a kernel is not interpreted here: ``cannot interpret here: needs jax >= 0.11.1
    (Mosaic GPU interpret mode; installed 0.10.2)``."""
    return (
        f"cannot interpret here: needs jax >= {interpreter.since} ({interpreter.name}; "
        f"installed {installed})"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulation:
    """What emulating ``platform`` on the CPU did, and where (a report's record of it)."""

    platform: str
    dot_format: str | None
    """The format default-precision float32 operands were rounded to (``None``: none)."""
    branches: tuple[ChosenBranch, ...] = ()
    kernels: tuple[EmulatedKernel, ...] = ()
    rounded: tuple[RoundedOp, ...] = ()
    pinned: int = 0
    """float32 dots and convolutions left alone: explicit ``precision``, a
    ``preferred_element_type`` other than their operands', a dot algorithm, or
    ``jax.default_matmul_precision`` set around the check."""
    unemulated: tuple[Unemulated, ...] = ()
    error: str | None = None
    """How the emulated run failed (an interpreted kernel's out-of-bounds read, say)."""

    @property
    def label(self) -> str:
        """``tpu (emulated on cpu)``."""
        return emulated_label(self.platform)

    @property
    def ran(self) -> bool:
        """Whether outputs exist: nothing blocked the emulation and its run succeeded."""
        return self.error is None and not any(u.blocks for u in self.unemulated)

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "dot_format": self.dot_format,
            "branches": [b.to_dict() for b in self.branches],
            "kernels": [k.to_dict() for k in self.kernels],
            "rounded": [r.to_dict() for r in self.rounded],
            "pinned": self.pinned,
            "unemulated": [u.to_dict() for u in self.unemulated],
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Emulation:
        error = data.get("error")
        dot_format = data.get("dot_format")
        return cls(
            platform=str(data["platform"]),
            dot_format=None if dot_format is None else str(dot_format),
            branches=tuple(ChosenBranch.from_dict(b) for b in data.get("branches", ())),
            kernels=tuple(EmulatedKernel.from_dict(k) for k in data.get("kernels", ())),
            rounded=tuple(RoundedOp.from_dict(r) for r in data.get("rounded", ())),
            pinned=int(data.get("pinned", 0)),
            unemulated=tuple(Unemulated.from_dict(u) for u in data.get("unemulated", ())),
            error=None if error is None else str(error),
        )


def with_locations(emulation: Emulation, shown: Callable[[str], str]) -> Emulation:
    """``emulation`` with each non-empty ``file:line`` as ``shown`` writes it (a report shows
    files relative to the project, as the census does).

    >>> e = Emulation(platform="tpu", dot_format=None,
    ...     branches=(ChosenBranch(location="/src/m.py:3", branch="tpu"),))
    >>> with_locations(e, lambda at: at.removeprefix("/src/")).branches[0].location
    'm.py:3'
    """

    def at(location: str) -> str:
        return shown(location) if location else location

    return replace(
        emulation,
        branches=tuple(replace(b, location=at(b.location)) for b in emulation.branches),
        kernels=tuple(replace(k, location=at(k.location)) for k in emulation.kernels),
        rounded=tuple(replace(r, location=at(r.location)) for r in emulation.rounded),
        unemulated=tuple(replace(u, location=at(u.location)) for u in emulation.unemulated),
    )


def grouped_rounding(sites: Sequence[tuple[str, str, str]]) -> tuple[RoundedOp, ...]:
    """``(op, location, format)`` per rounded equation, grouped into counted sites in the
    order they first occur."""
    counts: dict[tuple[str, str, str], int] = {}
    for site in sites:
        counts[site] = counts.get(site, 0) + 1
    return tuple(
        RoundedOp(op=op, location=location, format=fmt, count=n)
        for (op, location, fmt), n in counts.items()
    )


# -- what a report says ----------------------------------------------------------------------------


def _at(location: str) -> str:
    return f" at {location}" if location else ""


def emulation_lines(emulation: Emulation) -> list[str]:
    """What was emulated and where, one line per kind of change, for a failure message or
    a report's details (the sites a mismatch may come from).

    >>> e = Emulation(platform="tpu", dot_format="bfloat16",
    ...     kernels=(EmulatedKernel(label="Pallas kernel k", location="m.py:3",
    ...                             interpreter="TPU interpret mode"),),
    ...     rounded=(RoundedOp(op="dot_general", location="m.py:9", format="bfloat16", count=2),))
    >>> print("\\n".join(emulation_lines(e)))
    Pallas kernel k at m.py:3: run in TPU interpret mode
    2 dot_general at m.py:9: float32 operands rounded to bfloat16 (tpu's default precision)
    """
    lines = []
    for branch in emulation.branches:
        lines.append(f"platform_dependent{_at(branch.location)}: took the {branch.branch} branch")
    for kernel in emulation.kernels:
        lines.append(f"{kernel.label}{_at(kernel.location)}: run in {kernel.interpreter}")
    for op in emulation.rounded:
        count = f"{op.count} " if op.count > 1 else ""
        lines.append(
            f"{count}{op.op}{_at(op.location)}: float32 operands rounded to {op.format} "
            f"({emulation.platform}'s default precision)"
        )
    if emulation.pinned:
        noun = "dot/convolution" if emulation.pinned == 1 else "dots/convolutions"
        lines.append(
            f"{emulation.pinned} float32 {noun} whose precision the program sets: left as set"
        )
    for item in emulation.unemulated:
        state = "not emulated" if item.blocks else "computed as on cpu"
        lines.append(f"{item.what}{_at(item.location)}: {state}: {item.reason}")
    if emulation.error is not None:
        lines.append(f"the emulated run failed: {emulation.error}")
    return lines


def divergence_message(emulation: Emulation, comparison_text: str) -> str:
    """A mismatch of an emulated platform with the reference: the comparison (as
    ``model.numerics.describe`` words it, compared under :attr:`Emulation.label`), then what was
    emulated, so the failure names the kernel or dot that may have diverged."""
    lines = [comparison_text, f"  emulated as {emulation.platform} would run it:"]
    lines += [f"    {line}" for line in emulation_lines(emulation)]
    return "\n".join(lines)


def not_emulated_message(emulation: Emulation) -> str:
    """Why an emulation has no outputs (a note for the report, never a failure).

    >>> e = Emulation(platform="cuda", dot_format="tf32", unemulated=(Unemulated(
    ...     what="Pallas kernel k", location="m.py:3", blocks=True,
    ...     reason="cannot interpret here: needs jax >= 0.11.1 (Mosaic GPU interpret mode; "
    ...            "installed 0.10.2)"),))
    >>> print(not_emulated_message(e))
    cuda (emulated on cpu): not run: Pallas kernel k at m.py:3: cannot interpret here: needs jax >= 0.11.1 (Mosaic GPU interpret mode; installed 0.10.2)
    """  # noqa: E501
    reasons = [f"{u.what}{_at(u.location)}: {u.reason}" for u in emulation.unemulated if u.blocks]
    if emulation.error is not None:
        reasons.append(f"the emulated run failed: {emulation.error}")
    return f"{emulation.label}: not run: " + "; ".join(reasons or ["nothing to run"])
