"""The formats-and-layout findings: one rule at one source line (:class:`Finding`), the
findings of one program on one platform (:class:`FormatCensus`) and what a compiled program
takes on its device (:class:`MemoryFootprint`). Each adds up over programs (an audited
suite's), and each is written to and read from a report's JSON.

The rules they come from are :mod:`pytest_jaxport.model.format_rules`'s; the walk that finds
them, :mod:`pytest_jaxport.model.format_census`. Pure: no jax, no pytest.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from pytest_jaxport.model.census import Program, SourceLocation
from pytest_jaxport.model.classification import Level
from pytest_jaxport.model.devices import Device
from pytest_jaxport.model.tiling import read_layouts

FindingKind = Literal["format", "layout"]
"""``format``: a numeric format the target computes differently, emulates, converts or cannot
compile; ``layout``: bytes or matrix-unit work a target's memory layout wastes or moves."""

FINDING_KINDS: tuple[FindingKind, ...] = get_args(FindingKind)

Effect = Literal[
    "emulated",
    "not-compiled",
    "converted",
    "requantize",
    "reduced-precision",
    "padded",
    "misaligned",
    "relayout",
]
"""What the target does with it: runs it in software (``emulated``), refuses to compile it
(``not-compiled``), converts it to another format before its matrix units (``converted``),
needs the data re-quantized to its own variant (``requantize``), computes with fewer
mantissa bits than the program's type (``reduced-precision``), pads it to tiles
(``padded``), leaves matrix-unit lanes idle (``misaligned``), or transposes it to the layout
its kernels take (``relayout``)."""
EFFECTS: frozenset[str] = frozenset(get_args(Effect))


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Finding:
    """One rule at one source line of one program, on one platform, call-weighted.

    ``amount`` of ``of`` (in ``unit``) sizes what a layout finding wastes or moves, weighted
    by how often its ops run: padding bytes of the bytes the ops move (``tile-padding``),
    idle multiply-adds of the matrix unit's (``matrix-unit-misaligned``), bytes written by
    inserted relayouts of the bytes the library calls move (``inserted-relayout``). Zero
    for the rest.
    """

    kind: FindingKind
    rule: str
    platform: str
    level: Level = "lowered"
    location: SourceLocation | None = None
    count: int = 1
    """How many ops at this line (call-weighted; a loop body's once, as in the census); for
    ``inserted-relayout``, the transposes and copies themselves."""
    effect: Effect = "converted"
    formats: tuple[str, ...] = ()
    """The formats involved, by JAX name (``float64``)."""
    ops: tuple[str, ...] = ()
    """The ops involved (``dot_general``), sorted."""
    detail: str = ""
    compiles: bool = True
    amount: float = 0.0
    of: float = 0.0
    unit: str = ""

    @property
    def fraction(self) -> float:
        """``amount / of`` (0 when there is nothing to divide)."""
        return self.amount / self.of if self.of else 0.0

    def describe(self) -> str:
        """``float64-emulated (emulated) x3 at model.py:12: float64 in add, dot_general``."""
        times = f" x{self.count}" if self.count != 1 else ""
        where = f" at {self.location}" if self.location else ""
        return f"{self.rule} ({self.effect}){times}{where}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind,
            "rule": self.rule,
            "platform": self.platform,
            "level": self.level,
            "location": str(self.location) if self.location else None,
            "count": self.count,
            "effect": self.effect,
            "formats": list(self.formats),
            "ops": list(self.ops),
            "detail": self.detail,
        }
        if not self.compiles:
            data["compiles"] = False
        if self.of:
            data.update(amount=self.amount, of=self.of, unit=self.unit)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """The inverse of :meth:`to_dict`; raises ``KeyError``/``TypeError``/``ValueError``
        on anything else."""
        kind = data["kind"]
        if kind not in FINDING_KINDS:
            raise ValueError(f"not a finding kind: {kind!r:.40}")
        effect = data.get("effect", "converted")
        if effect not in EFFECTS:
            raise ValueError(f"not a finding effect: {effect!r:.40}")
        level = data.get("level", "lowered")
        if level not in ("lowered", "compiled"):
            raise ValueError(f"not a fidelity level: {level!r:.40}")
        count = data.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"not a finding count: {count!r:.40}")
        return cls(
            kind=kind,
            rule=str(data["rule"]),
            platform=str(data["platform"]),
            level=level,
            location=_location_from_text(data.get("location")),
            count=count,
            effect=effect,
            formats=tuple(map(str, data.get("formats", ()))),
            ops=tuple(map(str, data.get("ops", ()))),
            detail=str(data.get("detail", "")),
            compiles=bool(data.get("compiles", True)),
            amount=float(data.get("amount", 0.0)),
            of=float(data.get("of", 0.0)),
            unit=str(data.get("unit", "")),
        )


@functools.lru_cache(maxsize=4096)
def _location_from_text(text: object) -> SourceLocation | None:
    """A stored location (``file:line``): a report repeats a few thousand lines at most."""
    if text is None:
        return None
    file, sep, line = str(text).rpartition(":")
    if not sep or not line.isdigit():
        raise ValueError(f"not a source location: {text!r:.80}")
    return SourceLocation(file=file, line=int(line))


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryFootprint:
    """What a compiled program's arguments and outputs take on its device beside their data,
    and the temporaries it allocates: from the layouts the compiler chose for them (its
    ``entry_computation_layout``) and, where the compile counted it, the compiler's own count
    (``memory_analysis``: :class:`~pytest_jaxport.model.census.CompiledMemory`). Adds up over
    programs (an audited suite's).

    >>> footprint = MemoryFootprint(argument_data=1_638_400, argument_bytes=1_703_936)
    >>> round(footprint.argument_padding, 3)
    0.04
    """

    argument_data: int = 0
    argument_bytes: int = 0
    output_data: int = 0
    output_bytes: int = 0
    temp_bytes: int | None = None
    """The temporaries the compiler allocates (``None`` where it did not count)."""
    counted: bool = False
    """Whether the argument and output bytes are the compiler's count (``memory_analysis``)
    rather than summed from the layouts (the two agree: ``tests/test_tiling.py``)."""

    @property
    def argument_padding(self) -> float:
        """The arguments' bytes on the device over their data, less one (0.04: 4% more)."""
        return self.argument_bytes / self.argument_data - 1 if self.argument_data else 0.0

    def __add__(self, other: MemoryFootprint) -> MemoryFootprint:
        temp = None
        if self.temp_bytes is not None or other.temp_bytes is not None:
            temp = (self.temp_bytes or 0) + (other.temp_bytes or 0)
        return MemoryFootprint(
            argument_data=self.argument_data + other.argument_data,
            argument_bytes=self.argument_bytes + other.argument_bytes,
            output_data=self.output_data + other.output_data,
            output_bytes=self.output_bytes + other.output_bytes,
            temp_bytes=temp,
            counted=self.counted and other.counted,
        )

    def describe(self) -> str:
        """``arguments 1.6 MiB for 1.6 MiB of data (+4%), outputs 512 B for 12 B of data,
        temporaries 0 B``."""
        data = size_text(self.argument_data)
        said = [
            f"arguments {size_text(self.argument_bytes)} for {data} of data"
            + (f" (+{self.argument_padding:.0%})" if self.argument_bytes > self.argument_data
               else ""),
            f"outputs {size_text(self.output_bytes)} for {size_text(self.output_data)} of data",
        ]  # fmt: skip
        if self.temp_bytes is not None:
            said.append(f"temporaries {size_text(self.temp_bytes)}")
        return ", ".join(said)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "argument_data": self.argument_data,
            "argument_bytes": self.argument_bytes,
            "output_data": self.output_data,
            "output_bytes": self.output_bytes,
            "counted": self.counted,
        }
        if self.temp_bytes is not None:
            data["temp_bytes"] = self.temp_bytes
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryFootprint:
        """The inverse of :meth:`to_dict`; raises ``ValueError`` naming a field that is not a
        count of bytes."""
        values: dict[str, int | None] = {}
        for name in ("argument_data", "argument_bytes", "output_data", "output_bytes",
                     "temp_bytes"):  # fmt: skip
            value = data.get(name, None if name == "temp_bytes" else 0)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ValueError(f"not a byte count: {name} = {value!r:.40}")
            values[name] = value
        return cls(
            argument_data=values["argument_data"] or 0,
            argument_bytes=values["argument_bytes"] or 0,
            output_data=values["output_data"] or 0,
            output_bytes=values["output_bytes"] or 0,
            temp_bytes=values["temp_bytes"],
            counted=bool(data.get("counted", False)),
        )


def memory_footprint(program: Program) -> MemoryFootprint | None:
    """A compiled program's :class:`MemoryFootprint`, where the compiler tiled its arrays
    (``Program.entry_layout``; ``None`` elsewhere)."""
    if not program.entry_layout:
        return None
    arguments, _, outputs = program.entry_layout.rpartition("->")
    taken = read_layouts(arguments), read_layouts(outputs)
    argument_data, output_data = (sum(x.data_bytes for x in side) for side in taken)
    argument_bytes, output_bytes = (sum(x.bytes for x in side) for side in taken)
    memory = program.memory
    if memory is None:
        return MemoryFootprint(argument_data=argument_data, argument_bytes=argument_bytes,
                               output_data=output_data, output_bytes=output_bytes)  # fmt: skip
    return MemoryFootprint(argument_data=argument_data, argument_bytes=memory.argument,
                           output_data=output_data, output_bytes=memory.output,
                           temp_bytes=memory.temp, counted=True)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatCensus:
    """The formats-and-layout findings of one program on one platform, at one level."""

    platform: str
    device: Device
    level: Level = "lowered"
    findings: tuple[Finding, ...] = ()
    formats: Mapping[str, int] = field(default_factory=dict)
    """Every format the program's typed ops use, by JAX name: how many ops (call-weighted)
    use it, whether or not a rule flags it (what ``forbid_formats`` checks)."""
    tiled_bytes: float = 0.0
    """On a device that tiles arrays (tpu): the bytes every op's large arrays take in tiles,
    padded or not, weighted by how often the ops run (what padding is a share of)."""
    lines: Mapping[str, tuple[SourceLocation, ...]] = field(default_factory=dict)
    """Per format of :attr:`formats`, the first :data:`LINES_KEPT` source lines (in order)
    of ops that use it: where a ``forbid_formats`` violation points when no rule flags the
    format on this device."""
    memory: MemoryFootprint | None = None
    """A compiled program's arguments, outputs and temporaries on its device (compiled level,
    where the compiler tiled its arrays: tpu)."""

    def count(self, kind: FindingKind | None = None) -> int:
        """Call-weighted findings (of ``kind``; every kind where ``None``)."""
        return sum(f.count for f in self.findings if kind is None or f.kind == kind)

    def rules(self) -> dict[str, int]:
        """Call-weighted findings per rule, sorted by name."""
        counts: Counter[str] = Counter()
        for f in self.findings:
            counts[f.rule] += f.count
        return dict(sorted(counts.items()))

    def by_rule(self, rule: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.rule == rule)

    @property
    def not_compiling(self) -> tuple[Finding, ...]:
        """Findings the rules know the target's compiler rejects: the program lowers for the
        platform but does not compile there."""
        return tuple(f for f in self.findings if not f.compiles)

    def _sum(self, rule: str) -> tuple[float, float]:
        found = self.by_rule(rule)
        return sum(f.amount for f in found), sum(f.of for f in found)

    @property
    def padding_bytes(self) -> tuple[float, float]:
        """``(padding bytes, bytes moved with the padding)`` of the large arrays every op
        reads and writes under the target's tiling, weighted by how often the ops run."""
        padding, padded = self._sum("tile-padding")
        return padding, max(self.tiled_bytes, padded)

    @property
    def padding_waste(self) -> float:
        """The share of bytes moved that is padding (0 where nothing is tiled)."""
        padding, moved = self.padding_bytes
        return padding / moved if moved else 0.0

    @property
    def relayout_bytes(self) -> float:
        """Bytes written by the relayouts XLA inserted (compiled level)."""
        return self._sum("inserted-relayout")[0]

    @property
    def relayouts(self) -> int:
        """The transposes and copies XLA inserted around library calls (compiled level),
        call-weighted."""
        return sum(f.count for f in self.by_rule("inserted-relayout"))

    def relocated(
        self,
        where: Callable[[SourceLocation | None], SourceLocation | None],
        lines_where: Callable[[SourceLocation | None], SourceLocation | None] | None = None,
    ) -> FormatCensus:
        """This census with each finding's location as ``where`` gives it (the file as
        reports show it, a check's call site where a finding has none), and each format's
        lines as ``lines_where`` does (``where`` by default)."""
        findings = tuple(replace(f, location=where(f.location)) for f in self.findings)
        placed = lines_where or where
        lines = {
            name: kept_lines(at for line in found if (at := placed(line)) is not None)
            for name, found in self.lines.items()
        }
        return replace(self, findings=findings, lines={k: v for k, v in lines.items() if v})

    def __add__(self, other: FormatCensus) -> FormatCensus:
        """Two programs' findings on one platform as one census (an audited suite's sum):
        findings of the same rule at the same line add up, formats add up."""
        return self.plus((other,))

    def plus(self, others: Iterable[FormatCensus]) -> FormatCensus:
        """This census and ``others`` as one, in one pass: what adding them one by one gives
        (an audited suite adds up thousands; one by one, each sum sorts every finding again)."""
        merged: dict[tuple[str, str, str, SourceLocation | None], Finding] = {}
        formats: Counter[str] = Counter()
        found: dict[str, list[SourceLocation]] = {}
        tiled = 0.0
        every = (self, *others)
        for census in every:
            for f in census.findings:
                key = (f.kind, f.rule, f.level, f.location)
                had = merged.get(key)
                merged[key] = (
                    f
                    if had is None
                    else replace(
                        had,
                        count=had.count + f.count,
                        amount=had.amount + f.amount,
                        of=had.of + f.of,
                        formats=tuple(sorted({*had.formats, *f.formats})),
                        ops=tuple(sorted({*had.ops, *f.ops})),
                    )
                )
            formats.update(census.formats)
            for name, at in census.lines.items():
                found.setdefault(name, []).extend(at)
            tiled += census.tiled_bytes
        lines = {name: kept_lines(at) for name, at in found.items()}
        return replace(
            self,
            findings=tuple(sorted(merged.values(), key=finding_order)),
            formats=dict(sorted(formats.items())),
            tiled_bytes=tiled,
            lines=dict(sorted(lines.items())),
            memory=functools.reduce(_added, (census.memory for census in every)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "device": {
                "generation": self.device.generation,
                "name": self.device.name,
                **({"compiler": self.device.compiler} if self.device.compiler else {}),
            },
            "level": self.level,
            "findings": [f.to_dict() for f in self.findings],
            "formats": dict(self.formats),
            **({"tiled_bytes": self.tiled_bytes} if self.tiled_bytes else {}),
            **({"lines": {k: [str(at) for at in v] for k, v in self.lines.items()}}
               if self.lines else {}),
            **({"memory": self.memory.to_dict()} if self.memory is not None else {}),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FormatCensus:
        """The inverse of :meth:`to_dict`."""
        platform = str(data["platform"])
        device = data.get("device") or {}
        level = data.get("level", "lowered")
        if level not in ("lowered", "compiled"):
            raise ValueError(f"not a fidelity level: {level!r:.40}")
        formats = data.get("formats", {})
        if not isinstance(formats, Mapping):
            raise TypeError("formats: not a mapping")
        return cls(
            platform=platform,
            device=Device(
                platform=platform,
                generation=str(device.get("generation", "")),
                name=str(device.get("name", "")),
                compiler=str(device.get("compiler", "")),
            ),
            level=level,
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", ())),
            formats={str(k): int(v) for k, v in formats.items()},
            tiled_bytes=float(data.get("tiled_bytes", 0.0)),
            lines={
                str(k): tuple(at for at in map(_location_from_text, v) if at is not None)
                for k, v in (data.get("lines") or {}).items()
            },
            memory=MemoryFootprint.from_dict(data["memory"]) if data.get("memory") else None,
        )


def counted_findings(
    lowered: FormatCensus | None, compiled: FormatCensus | None
) -> tuple[Finding, ...]:
    """One program's findings on one platform, as every count of them is made (the sites,
    the totals, the layers' line): the lowered program's, then the compiled program's; where
    the compiler laid the program out in tiles (tpu compiled), its padding stands for the
    lowered model's (one ``tile-padding`` site per line, as budgets judge it)."""
    padded = compiled is not None and compiled.tiled_bytes > 0
    found = () if lowered is None else lowered.findings
    return (
        *(f for f in found if not (padded and f.rule == "tile-padding")),
        *(() if compiled is None else compiled.findings),
    )


LINES_KEPT = 3
"""The source lines a census keeps per format (:attr:`FormatCensus.lines`): enough to find
the code, few enough that every census can carry them."""


def kept_lines(lines: Iterable[SourceLocation]) -> tuple[SourceLocation, ...]:
    """The first :data:`LINES_KEPT` distinct ``lines``, in file and line order."""
    return tuple(sorted(set(lines), key=lambda at: (at.file, at.line))[:LINES_KEPT])


def _added(a: MemoryFootprint | None, b: MemoryFootprint | None) -> MemoryFootprint | None:
    if a is None or b is None:
        return a or b
    return a + b


def finding_order(finding: Finding) -> tuple[str, str, str]:
    """How a census sorts its findings: by kind, rule and line."""
    return (finding.kind, finding.rule, str(finding.location or ""))


def size_text(count: float) -> str:
    """A size in bytes as a person reads it.

    >>> size_text(512), size_text(1_572_864)
    ('512 B', '1.5 MiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"
