"""Counts that add up: one platform's dispatches over one probe or a whole suite (pure).

A check's platform entry and a suite's totals are one type, :class:`PlatformCounts`, summed
with ``+`` (as coverage.py's ``Numbers``): the report's per-platform totals over a run's
checks and over an audit's distinct computations are the same sum.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from pytest_jaxport.model.census import CollectiveCount
from pytest_jaxport.model.findings import FormatCensus, counted_findings
from pytest_jaxport.model.jsontypes import (
    JsonObject,
)
from pytest_jaxport.model.probe import PlatformProbe, Probe

_N = TypeVar("_N", int, float)

LAYER_COUNTS = ("vendor", "custom", "meta")
"""The layers counted as calls (``xla`` read_counts generated ops, every one)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatCounts:
    """The formats-and-layout findings of probes on one platform: call-weighted findings by
    kind, the rules' "does not compile", padding and relayout bytes (bytes add up; the
    padding fraction is derived from them, never summed). Padding twice, side by side: the
    lowered program's in the layouts the compiler gives arrays nothing constrains (a model),
    and the compiled program's in the layouts the compiler chose, where it was compiled."""

    format_findings: int = 0
    layout_findings: int = 0
    not_compiling: int = 0
    """Call-weighted findings the rules say the target's compiler rejects."""
    padding_bytes: float = 0.0
    padded_bytes: float = 0.0
    """Bytes moved by the ops with padded arrays, padding included."""
    compiled_padding_bytes: float | None = None
    """Padding in the layouts the compiler chose (compiled level, where the compiler tiles
    arrays: tpu); ``None`` where no probe was compiled so."""
    compiled_padded_bytes: float = 0.0
    relayouts: int | None = None
    """Transposes and copies XLA inserted around library calls (compiled level); ``None``
    where nothing was compiled."""
    relayout_bytes: float = 0.0

    @classmethod
    def of(cls, lowered: FormatCensus | None, compiled: FormatCensus | None) -> FormatCounts:
        """One probe's, from its lowered and compiled findings (those the sites count:
        :func:`~pytest_jaxport.model.findings.counted_findings`)."""
        padding, padded = lowered.padding_bytes if lowered is not None else (0.0, 0.0)
        compiled_padding: float | None = None
        compiled_padded = 0.0
        if compiled is not None and compiled.tiled_bytes > 0:
            compiled_padding, compiled_padded = compiled.padding_bytes
        # Counted as the sites are: the compiled program's findings too (issue 55: the
        # layers' line said 6 layout findings where its rules and the sites summed 11).
        findings = counted_findings(lowered, compiled)
        return cls(
            format_findings=sum(f.count for f in findings if f.kind == "format"),
            layout_findings=sum(f.count for f in findings if f.kind == "layout"),
            not_compiling=sum(f.count for f in lowered.not_compiling) if lowered is not None else 0,
            padding_bytes=padding,
            padded_bytes=padded,
            compiled_padding_bytes=compiled_padding,
            compiled_padded_bytes=compiled_padded,
            relayouts=compiled.relayouts if compiled is not None else None,
            relayout_bytes=compiled.relayout_bytes if compiled is not None else 0.0,
        )

    @property
    def padding_waste(self) -> float:
        """The share of bytes moved that is padding."""
        return self.padding_bytes / self.padded_bytes if self.padded_bytes else 0.0

    @property
    def compiled_padding_waste(self) -> float | None:
        """The share of bytes moved that is padding, in the layouts the compiler chose;
        ``None`` where nothing was compiled so."""
        if self.compiled_padding_bytes is None:
            return None
        padded = self.compiled_padded_bytes
        return self.compiled_padding_bytes / padded if padded else 0.0

    def __add__(self, other: FormatCounts) -> FormatCounts:
        return FormatCounts(
            format_findings=self.format_findings + other.format_findings,
            layout_findings=self.layout_findings + other.layout_findings,
            not_compiling=self.not_compiling + other.not_compiling,
            padding_bytes=self.padding_bytes + other.padding_bytes,
            padded_bytes=self.padded_bytes + other.padded_bytes,
            compiled_padding_bytes=_add(self.compiled_padding_bytes, other.compiled_padding_bytes),
            compiled_padded_bytes=self.compiled_padded_bytes + other.compiled_padded_bytes,
            relayouts=_add(self.relayouts, other.relayouts),
            relayout_bytes=self.relayout_bytes + other.relayout_bytes,
        )

    def to_dict(self) -> JsonObject:
        data: JsonObject = {
            "format_findings": self.format_findings,
            "layout_findings": self.layout_findings,
            "not_compiling": self.not_compiling,
            "padding_waste": self.padding_waste,
            "padding_bytes": self.padding_bytes,
        }
        if self.compiled_padding_bytes is not None:
            data["compiled_padding_waste"] = self.compiled_padding_waste
            data["compiled_padding_bytes"] = self.compiled_padding_bytes
        if self.relayouts is not None:
            data["relayouts"] = self.relayouts
            data["relayout_bytes"] = self.relayout_bytes
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformCounts:
    """Probes on one platform: how many lowered, failed, compiled; their dispatches by layer,
    library and collective kind, at the compiled level where compiled (one that failed to
    compile counts only as that: :attr:`PlatformProbe.counted`), else the lowered."""

    lowered: int = 0
    failed_to_lower: int = 0
    needs_hardware: int = 0
    """Probes JAX could not lower for without hardware absent here (not failures)."""
    compiled: int | None = None
    """How many compiled; ``None`` where no probe was asked to compile for the platform."""
    failed_to_compile: int = 0
    vendor: int = 0
    custom: int = 0
    meta: int = 0
    xla: int | None = None
    """Generated ops; ``None`` where nothing lowered."""
    libraries: Mapping[str, int] = field(default_factory=dict)
    collectives: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per kind, ``(count, inserted by the SPMD partitioner)``."""
    formats: FormatCounts | None = None
    """The formats-and-layout findings; ``None`` where no probe's were judged (a report
    written before the layer existed)."""

    @classmethod
    def of(cls, entry: PlatformProbe) -> PlatformCounts:
        """One probe's platform entry, at the level budgets apply (compiled where compiled)."""
        if entry.census is None:
            if entry.needs_hardware:
                return cls(needs_hardware=1)
            return cls(failed_to_lower=1)
        compiled = entry.compiled
        asked = compiled is not None or bool(entry.compile_error)
        counted = entry.counted
        formats = None
        if entry.formats is not None:
            formats = FormatCounts.of(entry.formats, entry.compiled_formats)
        if counted is None:  # lowered, not compiled: counted as that, not at another level
            return cls(lowered=1, compiled=0, failed_to_compile=1, formats=formats)
        return cls(
            lowered=1,
            compiled=(1 if compiled is not None else 0) if asked else None,
            failed_to_compile=int(asked and compiled is None),
            vendor=counted.vendor,
            custom=counted.custom,
            meta=counted.meta,
            xla=counted.xla_ops,
            libraries=counted.libraries(),
            collectives={c.kind: _collective(c, counted.level) for c in counted.collectives},
            formats=formats,
        )

    def __add__(self, other: PlatformCounts) -> PlatformCounts:
        libraries = dict(self.libraries)
        for library, n in other.libraries.items():
            libraries[library] = libraries.get(library, 0) + n
        collectives = dict(self.collectives)
        for kind, (count, inserted) in other.collectives.items():
            had = collectives.get(kind, (0, 0))
            collectives[kind] = (had[0] + count, had[1] + inserted)
        return PlatformCounts(
            lowered=self.lowered + other.lowered,
            failed_to_lower=self.failed_to_lower + other.failed_to_lower,
            needs_hardware=self.needs_hardware + other.needs_hardware,
            compiled=_add(self.compiled, other.compiled),
            failed_to_compile=self.failed_to_compile + other.failed_to_compile,
            vendor=self.vendor + other.vendor,
            custom=self.custom + other.custom,
            meta=self.meta + other.meta,
            xla=_add(self.xla, other.xla),
            libraries=libraries,
            collectives=collectives,
            formats=(self.formats or FormatCounts()) + other.formats
            if other.formats is not None
            else self.formats,
        )

    def to_dict(self) -> JsonObject:
        """The report's ``summary.platforms.<platform>`` (keys present where they apply)."""
        data: JsonObject = {
            "vendor": self.vendor,
            "custom": self.custom,
            "meta": self.meta,
            "libraries": dict(sorted(self.libraries.items())),
            "lowered": self.lowered,
            "failed_to_lower": self.failed_to_lower,
        }
        if self.needs_hardware:
            data["needs_hardware"] = self.needs_hardware
        if self.compiled is not None:
            data["compiled"] = self.compiled
            data["failed_to_compile"] = self.failed_to_compile
        if self.xla is not None:
            data["xla"] = self.xla
        if self.collectives:
            data["collectives"] = {
                kind: {"count": count, "inserted": inserted}
                for kind, (count, inserted) in self.collectives.items()
            }
        if self.formats is not None:
            data.update(self.formats.to_dict())
        return data


def _collective(found: CollectiveCount, level: str) -> tuple[int, int]:
    """A collective kind's ``(count, inserted)``: how many the SPMD partitioner inserted is
    known at the lowered level only."""
    return found.count, found.inserted if level == "lowered" else 0


def _add(a: _N | None, b: _N | None) -> _N | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def platform_counts(probes: Iterable[Probe]) -> dict[str, PlatformCounts]:
    """Per platform, the sum over ``probes`` (a run's checks, an audit's computations)."""
    totals: dict[str, PlatformCounts] = {}
    for probe in probes:
        for platform, entry in probe.platforms.items():
            counted = PlatformCounts.of(entry)
            had = totals.get(platform)
            totals[platform] = counted if had is None else had + counted
    return dict(sorted(totals.items()))
