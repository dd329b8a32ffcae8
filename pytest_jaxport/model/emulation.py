"""What an emulation of another platform did, and what a report says of it (pure).

An *emulation* runs a checked function on the CPU as a platform that is not present would
run it (``pytest_jaxport._jax.emulate``): its ``lax.platform_dependent`` branch for that
platform, its Pallas kernels in the interpret mode matching the kernel kind that platform's
lowering selects (:mod:`pytest_jaxport.model.interpreters`), and its dots, convolutions and
scans as that platform computes them (:mod:`pytest_jaxport.model.arithmetic`), with the
chip's measured bounds where it has them (:mod:`pytest_jaxport.model.chip_errors`). This
module holds the records an emulation produces (:class:`Emulation`) and their words. It
imports neither JAX nor pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from pytest_jaxport.model.arithmetic import ARITHMETIC_TEXT
from pytest_jaxport.model.chip_errors import EPS32, OpBound
from pytest_jaxport.model.numerics import Comparison, Tolerance
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


# -- what an emulation did ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EmulatedKernel:
    """A kernel the emulation ran in an interpret mode."""

    label: str
    """``Pallas kernel matmul`` (``_jax.adapters.kernel_equation_name``)."""
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
    """Dots, convolutions or scans at one source line the emulation computed as the emulated
    platform does (``count`` equations in the program, loop bodies counted once): ``format``
    names the arithmetic (a key of
    :data:`~pytest_jaxport.model.arithmetic.ARITHMETIC_TEXT`: ``bfloat16``, ``float32``,
    ``bfloat16x3``...), ``why`` the rule (a key of :data:`REASON_TEXT`; ``""``: the
    platform's default precision)."""

    op: str
    location: str
    format: str
    count: int = 1
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"op": self.op, "location": self.location,
                                 "format": self.format, "count": self.count}  # fmt: skip
        if self.why:  # reports without the measured rules are unchanged
            found["why"] = self.why
        return found

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoundedOp:
        return cls(
            op=str(data["op"]),
            location=str(data["location"]),
            format=str(data["format"]),
            count=int(data.get("count", 1)),
            why=str(data.get("why", "")),
        )


REASON_TEXT: Mapping[str, str] = {
    "": "{platform}'s default precision",
    "vector": "{platform} computes a matrix-vector product in float32",
    "depthwise": "{platform}'s depthwise convolution",
    "high": '{platform}\'s precision="high"',
    "highest": '{platform}\'s precision="highest" on float16',
    "float16": "{platform}'s matrix unit multiplies float16 as bfloat16",
    "mixed": "{platform} multiplies a bfloat16 x float32 product in bfloat16",
    "scan": "{platform}'s cumulative sum",
    "round trip": "{platform}'s compiler removes the round trip",
    "narrow": "{platform} computes formats narrower than float32 in float32",
}
"""Why the emulation changed an op (``RoundedOp.why``), as its line says it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundedOp:
    """Ops at one source line the emulation cannot compute as the platform's chip does (its
    transcendental functions, reduction order, decompositions), with the chip's measured
    bound (``None``: no bound was measured for it, or not at its size (``note`` says which):
    it may differ by any amount)."""

    op: str
    location: str
    bound: OpBound | None
    count: int = 1
    note: str = ""

    def describe(self, device: str) -> str:
        """``tanh at model.py:12 is within 1,336 ulp on TPU v5 lite``."""
        if self.bound is None:
            why = f" ({self.note})" if self.note else ""
            return f"{self.op}{_at(self.location)} has no measured bound on {device}{why}"
        return f"{self.op}{_at(self.location)} is {self.bound.describe()} on {device}"

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"op": self.op, "location": self.location, "count": self.count}
        if self.bound is not None:
            found["bound"] = self.bound.to_dict()
        if self.note:
            found["note"] = self.note
        return found

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BoundedOp:
        op = str(data["op"])
        raw = data.get("bound")
        bound = None if raw is None else OpBound.from_dict(op, raw)
        return cls(op=op, location=str(data["location"]), bound=bound,
                   count=int(data.get("count", 1)), note=str(data.get("note", "")))  # fmt: skip


BoundedSite = tuple[str, str, "OpBound | None", str]
"""``(op, location, the bound it was moved by or None, why none)``: one bounded equation."""


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
    bounded: tuple[BoundedOp, ...] = ()
    """The ops computed as on the CPU whose error on the chip is bounded by measurement
    (or has no measured bound); the emulation ran a second time with each moved by its
    bound (``PlatformProbe.emulated_bounds``)."""
    bounds_from: str | None = None
    """The chip those bounds were measured on (``TPU v5 lite (measured: jax 0.10.2, libtpu
    0.0.42.1)``); ``None`` where the platform has none."""
    mismatch_from: MismatchCause | None = None
    """Where outputs that differ from the reference's come from, where the emulation both
    ran other code (kernels, branches) and rounded: ``code`` when the platform's code alone
    (computed as on the CPU) differs too, ``arithmetic`` when it alone matches; ``None``
    where it was not told apart (a match, or one of the two only)."""

    @property
    def mismatch_sites(self) -> tuple[str, ...]:
        """The lines a mismatch comes from, in order: its interpreted kernels, its chosen
        branches and its rounded ops, those of :attr:`mismatch_from` only where it is known
        (issue 55: a mismatch of bfloat16 dots was shown at the exact Pallas kernel's line).

        >>> e = Emulation(platform="tpu", dot_format="bfloat16",
        ...     kernels=(EmulatedKernel(label="k", location="m.py:48", interpreter="tpu"),),
        ...     rounded=(RoundedOp(op="dot_general", location="m.py:10", format="bfloat16"),))
        >>> e.mismatch_sites, replace(e, mismatch_from="arithmetic").mismatch_sites
        (('m.py:48', 'm.py:10'), ('m.py:10',))
        """
        code = [k.location for k in self.kernels] + [b.location for b in self.branches]
        arithmetic = [r.location for r in self.rounded]
        if self.mismatch_from == "code":
            arithmetic = []
        elif self.mismatch_from == "arithmetic":
            code = []
        return tuple(dict.fromkeys(code + arithmetic))

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
            **({"bounded": [b.to_dict() for b in self.bounded], "bounds_from": self.bounds_from}
               if self.bounds_from is not None else {}),
            **({"mismatch_from": self.mismatch_from} if self.mismatch_from else {}),
        }  # fmt: skip

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
            bounded=tuple(BoundedOp.from_dict(b) for b in data.get("bounded", ())),
            bounds_from=None if data.get("bounds_from") is None else str(data["bounds_from"]),
            mismatch_from=_mismatch_cause(data.get("mismatch_from")),
        )


MismatchCause = Literal["code", "arithmetic"]
MISMATCH_CAUSES: tuple[MismatchCause, ...] = get_args(MismatchCause)


def _mismatch_cause(value: object) -> MismatchCause | None:
    if value is None:
        return None
    if value not in MISMATCH_CAUSES:
        raise ValueError(f"mismatch_from: expected one of {', '.join(MISMATCH_CAUSES)}, "
                         f"found {value!r}")  # fmt: skip
    return value  # narrowed by the membership test


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
        bounded=tuple(replace(b, location=at(b.location)) for b in emulation.bounded),
    )


def grouped_rounding(sites: Sequence[tuple[str, ...]]) -> tuple[RoundedOp, ...]:
    """``(op, location, format[, why])`` per changed equation, grouped into counted sites in
    the order they first occur."""
    counts: dict[tuple[str, ...], int] = {}
    for site in sites:
        counts[site] = counts.get(site, 0) + 1
    return tuple(
        RoundedOp(
            op=site[0],
            location=site[1],
            format=site[2],
            count=n,
            why=site[3] if len(site) > 3 else "",
        )
        for site, n in counts.items()
    )


def grouped_bounds(sites: Sequence[BoundedSite]) -> tuple[BoundedOp, ...]:
    """One :data:`BoundedSite` per bounded equation, grouped into counted sites, the widest
    bound first (none: widest of all)."""
    counts: dict[BoundedSite, int] = {}
    for site in sites:
        counts[site] = counts.get(site, 0) + 1
    found = [
        BoundedOp(op=op, location=location, bound=bound, count=n, note=note)
        for (op, location, bound, note), n in counts.items()
    ]
    return tuple(sorted(found, key=lambda b: -_width(b.bound)))


def _width(bound: OpBound | None) -> float:
    """How wide a bound reads: no bound widest, then the worst ulp of a result."""
    if bound is None:
        return math.inf
    return (bound.worst_ulp or bound.ulps) * EPS32 if bound.scale == "result" else bound.relative


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
        what = ARITHMETIC_TEXT.get(op.format, f"float32 operands rounded to {op.format}")
        why = REASON_TEXT.get(op.why, op.why).format(platform=emulation.platform)
        measured = (
            f"; measured on {emulation.bounds_from}" if op.why and emulation.bounds_from else ""
        )
        lines.append(f"{count}{op.op}{_at(op.location)}: {what} ({why}{measured})")
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


def may_differ(emulation: Emulation, bounded: Comparison | None) -> bool:
    """Whether an emulation whose outputs matched may still differ on the chip: an op with
    no measured bound ran, or moving each bounded op by its bound moved the outputs beyond
    the tolerance (``bounded``: that run's comparison)."""
    if any(b.bound is None for b in emulation.bounded):
        return True
    return bounded is not None and not bounded.ok


def may_differ_lines(emulation: Emulation, bounded: Comparison | None) -> list[str]:
    """Why an emulation that matched may differ on the chip: a headline naming the widest
    bound (``may differ on tpu: tanh at model.py:12 is within 1,336 ulp on TPU v5 lite
    (measured: ...), above rtol 1e-06``), then how far the bounds move the outputs and each
    bounded op.

    >>> tanh = OpBound(op="tanh", scale="result", ulps=734, worst_ulp=1336)
    >>> e = Emulation(platform="tpu", dot_format="bfloat16", bounds_from="TPU v5 lite",
    ...     bounded=(BoundedOp(op="tanh", location="m.py:12", bound=tanh),))
    >>> print("\\n".join(may_differ_lines(e, None)))
    may differ on tpu: tanh at m.py:12 is within 1,336 ulp on TPU v5 lite
    """
    device = emulation.bounds_from or emulation.platform
    tolerance = _tolerance_of(bounded)
    sites = emulation.bounded
    if not sites:
        return []
    head = sites[0]
    line = f"may differ on {emulation.platform}: {head.describe(device)}"
    if tolerance is not None and _above(head.bound, tolerance.rtol):
        line += f", above rtol {tolerance.rtol:g}"
    lines = [line]
    if bounded is not None and not bounded.ok:
        moved = "; ".join(m.message for m in bounded.mismatches)
        lines.append(f"with each op below off by its measured bound: {moved}")
    for site in sites[1:] if len(lines) == 1 else sites:
        count = f"{site.count} " if site.count > 1 else ""
        said = site.describe(device).removesuffix(f" on {device}")
        above = ""
        if tolerance is not None and _above(site.bound, tolerance.rtol):
            above = f" (above rtol {tolerance.rtol:g})"
        lines.append(f"{count}{said}{above}")
    return lines


def _tolerance_of(comparison: Comparison | None) -> Tolerance | None:
    if comparison is None:
        return None
    return next((m.tolerance for m in comparison.mismatches if m.tolerance is not None), None)


def _above(bound: OpBound | None, rtol: float) -> bool:
    """Whether an op's own error bound, relative to its result, exceeds ``rtol``."""
    if bound is None:
        return True
    return bound.scale == "result" and (bound.worst_ulp or bound.ulps) * EPS32 > rtol


def divergence_message(emulation: Emulation, comparison_text: str) -> str:
    """A mismatch of an emulated platform with the reference: the comparison (as
    ``model.numerics.describe`` words it, compared under :attr:`Emulation.label`), then what was
    emulated, so the failure names the kernel or dot that may have diverged."""
    lines = [comparison_text, f"  emulated as {emulation.platform} would run it:"]
    lines += [f"    {line}" for line in emulation_lines(emulation)]
    platform = emulation.platform
    if emulation.mismatch_from == "arithmetic":
        lines.append(f"  the difference is {platform}'s arithmetic: its branches and kernels "
                     f"alone, computed as on {HOST}, match")  # fmt: skip
    elif emulation.mismatch_from == "code":
        lines.append(f"  the difference is the code {platform} runs: its branches and kernels "
                     f"alone, computed as on {HOST}, differ too")  # fmt: skip
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
