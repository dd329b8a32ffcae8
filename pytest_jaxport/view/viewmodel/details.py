"""Per-check lines the details show: what compiling changed, what a transformation lowered
to (pure).

Where the lowered prediction and the compiled reality differ (:func:`prediction_gap`), what
compiling without vendor libraries gave (:func:`what_if_line`), the compiled program's tile
padding and device memory (:func:`padding_line`), and each function's transformations side
by side (:func:`variant_lines`); :func:`compiled_gaps_of` and :func:`transformations_of`
gather them over the matrix's rows.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_jaxport.view.formatting import pct

if TYPE_CHECKING:
    from pytest_jaxport.model.census import Census
    from pytest_jaxport.model.probe import PlatformProbe, Probe
    from pytest_jaxport.view.viewmodel.matrix import TestRow


def compiled_gaps_of(rows: Sequence[TestRow]) -> tuple[tuple[str, str, str], ...]:
    """Where compiling changed what lowering predicted, per test and check (only checks
    compiled somewhere are looked at)."""
    found = []
    for row in rows:
        for check in row.checks:
            if all(c.level == "lowered" for c in check.cells.values()):
                continue
            for result in check.probe.platforms.values():
                for line in (prediction_gap(result), what_if_line(result), padding_line(result)):
                    if line is not None:
                        found.append((row.nodeid, check.name, line))
    return tuple(found)


def transformations_of(rows: Sequence[TestRow]) -> tuple[tuple[str, str], ...]:
    """Per test with transformation checks, each function's checks side by side."""
    found = []
    for row in rows:
        if any(c.variant_of is not None for c in row.checks):
            found += [(row.nodeid, line) for line in variant_lines([c.probe for c in row.checks])]
    return tuple(found)


_PLAIN_XLA_KINDS = frozenset({"xla", "fusion", "address-computation"})
"""XLA kinds too generic to name when showing what a vendor dispatch became."""


def _dispatches(census: Census, *, xla: bool) -> str:
    parts = [f"{name} {n}" for name, n in census.libraries().items()]
    if census.custom:
        parts.append(f"custom {census.custom}")
    if xla:
        parts += [
            f"XLA {kind} {n}"
            for kind, n in census.xla_kinds.items()
            if kind not in _PLAIN_XLA_KINDS and n
        ]
    return ", ".join(parts) or "no vendor or custom calls"


def prediction_gap(result: PlatformProbe) -> str | None:
    """Where the lowered prediction and the compiled reality differ, in one line.

    ``cuda: lowered predicted cublas 4; compiled: cublas 1, XLA triton-gemm 3``; ``None``
    when they agree (same libraries and counts, same custom calls) or either is missing.
    """
    lowered, compiled = result.census, result.compiled
    if lowered is None or compiled is None:
        return None
    if lowered.libraries() == compiled.libraries() and lowered.custom == compiled.custom:
        return None
    return (
        f"{result.platform}: lowered predicted {_dispatches(lowered, xla=False)}; "
        f"compiled: {_dispatches(compiled, xla=True)}"
    )


def padding_text(lowered: float | None, compiled: float | None) -> str:
    """``padding 21.9% of bytes moved (lowered model), 4.0% compiled``: the two padding
    figures side by side, as the census levels are (the compiled one where there is one)."""
    said = f"padding {pct(lowered or 0.0)} of bytes moved"
    if compiled is None:
        return said
    return f"{said} (lowered model), {pct(compiled)} compiled"


def padding_line(result: PlatformProbe) -> str | None:
    """``tpu: padding 21.9% of bytes moved (lowered model), 4.0% compiled; arguments 1.6 MiB
    for 1.6 MiB of data (+4%), outputs 512 B for 12 B of data, temporaries 0 B``: where the
    compiler laid out the program in tiles (tpu compiled), its padding beside the lowered
    model's, and what its arguments, outputs and temporaries take on the device; ``None``
    elsewhere."""
    compiled = result.compiled_formats
    if compiled is None or not compiled.tiled_bytes:
        return None
    lowered = result.formats.padding_waste if result.formats is not None else None
    said = f"{result.platform}: {padding_text(lowered, compiled.padding_waste)}"
    if compiled.memory is not None:
        said += f"; {compiled.memory.describe()}"
    return said


def what_if_line(result: PlatformProbe) -> str | None:
    """``cuda: with no vendor libraries: cudnn 1 -> XLA fusion 1`` (the what-if compile)."""
    compiled, fallback = result.compiled, result.what_if_no_vendor
    if compiled is None or fallback is None:
        return None
    before = _dispatches(compiled, xla=False)
    if compiled.libraries() == fallback.libraries():
        return f"{result.platform}: with no vendor libraries: unchanged ({before})"
    grown = fallback.xla_ops - compiled.xla_ops
    if fallback.libraries() or fallback.custom:
        after = _dispatches(fallback, xla=True)
    else:
        after = "XLA's own kernels only"
    return (
        f"{result.platform}: with no vendor libraries: {before} -> {after} "
        f"({fallback.xla_ops} XLA dispatches, {grown:+d})"
    )


def _variant_summary(probe: Probe) -> str:
    """``0 custom, 2 vendor`` (most on any platform), plus where the transformation failed."""
    counted = [r.budgeted for r in probe.platforms.values() if r.budgeted is not None]
    text = (
        f"{max((c.custom for c in counted), default=0)} custom, "
        f"{max((c.vendor for c in counted), default=0)} vendor"
        if counted
        else "nothing lowered"
    )
    failed: dict[str, list[str]] = {}
    for platform, result in probe.platforms.items():
        if result.error is None:
            continue
        marker = f": {probe.transform} cannot be taken"
        reason = result.error.split(marker)[0] if marker in result.error else "failed"
        if reason.startswith(f"{probe.transform} cannot be taken"):
            reason = "cannot be taken"
        failed.setdefault(reason, []).append(platform)
    notes = [f"{reason} on {', '.join(platforms)}" for reason, platforms in failed.items()]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def variant_lines(probes: Sequence[Probe]) -> list[str]:
    """Per function checked with transformations, its checks side by side:
    ``'conv': forward: 0 custom, 2 vendor; grad: 0 custom, 2 vendor``."""
    lines = []
    for base in probes:
        if base.transform is not None:
            continue
        variants = [p for p in probes if p.variant_of == base.name]
        if not variants:
            continue
        parts = [f"forward: {_variant_summary(base)}"]
        parts += [f"{p.transform}: {_variant_summary(p)}" for p in variants]
        lines.append(f"{base.name!r}: " + "; ".join(parts))
    return lines
