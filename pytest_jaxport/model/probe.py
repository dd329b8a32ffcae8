"""What one check (or one audited computation) found: per platform its census, errors,
numerics and runtime share (:class:`Probe`), and their JSON forms.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pytest_jaxport.model.census import Census, CollectiveCount, Kernel, SourceLocation
from pytest_jaxport.model.classification import (
    COLLECTIVE_LIBRARIES,
    COUNTERPART_LIBRARIES,
    LAYERS,
    Layer,
)
from pytest_jaxport.model.cost import FormatItem, RewriteItem, format_items, rewrite_items
from pytest_jaxport.model.emulation import Emulation, may_differ
from pytest_jaxport.model.findings import FormatCensus
from pytest_jaxport.model.jsontypes import (
    JsonMapping,
    JsonObject,
    as_table,
    read_counts,
    read_flag,
    read_integer,
    read_opt_table,
    read_opt_text,
    read_table,
    read_tables,
    read_text,
    read_texts,
)
from pytest_jaxport.model.memory import DeviceMemory
from pytest_jaxport.model.numerics import Comparison
from pytest_jaxport.model.platforms import NVIDIA_PLATFORM
from pytest_jaxport.model.runtime_share import RuntimeShare


@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformProbe:
    """One check on one platform: its census (or why lowering failed), execution, numerics."""

    platform: str
    present: bool
    census: Census | None = None
    error: str | None = None
    needs_hardware: str | None = None
    """``"GPU"`` when lowering failed only because JAX asked for hardware absent here
    (``error`` then reads "not lowerable here on jax X: needs a GPU (...)"): unknown, not
    non-portable. ``must_lower`` neither fails nor passes it; the check warns."""
    executed: bool = False
    execution_error: str | None = None
    numerics: Comparison | None = None
    compiled: Census | None = None
    """The compiled-level census, when this platform was compiled (``compile = [...]``)."""
    compile_error: str | None = None
    deviceless: bool = False
    """Whether ``compiled`` came from deviceless compilation (no GPU: no autotuning)."""
    target: str | None = None
    """What it was compiled for: the GPU description (``h100``) or the device kind."""
    what_if_no_vendor: Census | None = None
    """The compiled census with vendor libraries disabled (``what_if_no_vendor = true``)."""
    runtime_share: RuntimeShare | None = None
    """Where the time goes: measured where this platform ran and was profiled, else an
    estimate from the compiled program where there is one, else from the lowered one."""
    formats: FormatCensus | None = None
    """The formats-and-layout findings of the lowered program, for this platform's device."""
    compiled_formats: FormatCensus | None = None
    """Those of the compiled program: the relayouts XLA inserted around library calls, and on
    tpu the padding of the layouts the compiler chose and the memory it counted."""
    emulated: Emulation | None = None
    """What emulating this absent platform on the CPU did (``emulate = [...]``); never
    counted as executed: :attr:`executed` and :attr:`numerics` stay the hardware's."""
    emulated_numerics: Comparison | None = None
    """The emulation's outputs against the reference's (its ``platform`` is the label,
    ``tpu (emulated on cpu)``); ``None`` where the emulation did not run."""
    emulated_bounds: Comparison | None = None
    """The emulation's outputs with every op it cannot compute as the chip does moved by the
    chip's measured bound (``Emulation.bounded``), against the reference's: where they
    differ and :attr:`emulated_numerics` matched, the platform *may differ*. ``None`` where
    the platform has no measured bounds or the emulation did not run."""
    lowering_warnings: tuple[str, ...] = ()
    """What JAX warned while pytest-jaxport lowered for this platform, not present here
    (``DeprecationWarning: ...``): pytest-jaxport's doing, not the user's run, so kept here
    instead of in pytest's warnings summary (and never an error under ``-W error``). A
    warning of a lowering for several platforms at once is each of theirs."""
    memory: DeviceMemory | None = None
    """What the check needs in this platform's device memory, as its compiler planned it
    (``compiled``), or that no compiler ran (``not compiled``); ``None`` where memory is no
    topic (the project compiles nothing): :mod:`pytest_jaxport.model.memory`."""

    @property
    def lowered(self) -> bool:
        return self.census is not None

    @property
    def budgeted(self) -> Census | None:
        """The census budgets apply to: compiled where compiled, else lowered."""
        return self.compiled if self.compiled is not None else self.census

    @property
    def counted(self) -> Census | None:
        """The census a suite's counts and sites add up (:mod:`~pytest_jaxport.model.counts`,
        :mod:`~pytest_jaxport.model.hotspots`): the compiled one where a compile was asked,
        ``None`` where that compile gave no program (it counts as failed to compile, never
        as its lowered census: a row does not mix levels), else the lowered one."""
        if self.compiled is not None or self.compile_error:
            return self.compiled
        return self.census

    @property
    def padding_formats(self) -> FormatCensus | None:
        """The findings tile padding is judged and priced from: the compiled program's where
        the compiler laid out its arrays in tiles (the layouts it chose), else the lowered
        program's (the layouts the compiler gives arrays nothing constrains: a model)."""
        compiled = self.compiled_formats
        if compiled is not None and compiled.tiled_bytes > 0:
            return compiled
        return self.formats


@dataclass(frozen=True, slots=True, kw_only=True)
class Untraced:
    """Why JAX could not trace a check on this machine: it needs something absent here
    (``cuDNN`` for ``platform`` cuda), so nothing was lowered, counted or run."""

    platform: str
    needs: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"platform": self.platform, "needs": self.needs, "error": self.error}

    @classmethod
    def from_dict(cls, data: JsonMapping) -> Untraced:
        return cls(
            platform=str(data["platform"]), needs=str(data["needs"]), error=str(data["error"])
        )


NotComparedReason = Literal["abstract arguments"]
"""Why a check's numerics were not compared although it lowered: its arguments were abstract
(``jax.ShapeDtypeStruct``), so nothing was run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NotCompared:
    """Why a check that lowered was run nowhere and its numerics not compared, on purpose:
    some of its arguments were abstract (``jax.ShapeDtypeStruct``: a shape and a dtype, no
    data), so it was traced, lowered and compiled only.

    >>> NotCompared(arguments=("args[0]", "args[1]")).sentence()[-56:]
    'jax.ShapeDtypeStruct: args[0], args[1]), nothing was run'
    """

    reason: NotComparedReason = "abstract arguments"
    arguments: tuple[str, ...] = ()
    """The abstract leaves, by path (``args[0]``, ``kwargs['x']``; the first few)."""

    ARGUMENTS_KEPT = 8

    def sentence(self) -> str:
        """What every format says of the check's numerics."""
        shown = ", ".join(self.arguments[: self.ARGUMENTS_KEPT])
        if len(self.arguments) > self.ARGUMENTS_KEPT:
            shown += f", and {len(self.arguments) - self.ARGUMENTS_KEPT} more"
        named = f"jax.ShapeDtypeStruct: {shown}" if shown else "jax.ShapeDtypeStruct"
        return f"numerics not compared: {self.reason} ({named}), nothing was run"

    def to_dict(self) -> JsonObject:
        return {"reason": self.reason, "arguments": list(self.arguments)}

    @classmethod
    def from_dict(cls, data: JsonMapping) -> NotCompared:
        reason = read_text(data, "reason")
        if reason != "abstract arguments":
            raise ValueError(f"reason: expected 'abstract arguments', found {reason!r}")
        return cls(reason="abstract arguments", arguments=read_texts(data, "arguments", ()))


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """Everything one ``jaxport.check`` found."""

    name: str
    reference: str
    platforms: Mapping[str, PlatformProbe] = field(default_factory=dict)
    note: str | None = None
    variant_of: str | None = None
    """For a transformation's check (``conv[grad]``), the check of the function itself."""
    transform: str | None = None
    """``grad``, ``vmap`` or ``jvp`` for a transformation's check; ``None`` otherwise."""
    untraced: Untraced | None = None
    """Set when the function could not be traced here (then ``platforms`` is empty)."""
    not_compared: NotCompared | None = None
    """Set when the check was run nowhere on purpose (abstract arguments): why its numerics
    were not compared."""

    @property
    def executed(self) -> tuple[str, ...]:
        return tuple(p for p, r in self.platforms.items() if r.executed)

    def rewrite_items(
        self, target: str, *, home: str = NVIDIA_PLATFORM
    ) -> list[RewriteItem] | None:
        """What moving this check from ``home`` (cuda unless the project says otherwise) to
        ``target`` needs, kernel by kernel; ``None`` when the check was not lowered for
        ``target`` or for ``home`` (nothing is known), ``[]`` when ``home`` has no census
        (it failed to lower: nothing of it to move)."""
        origin = self.platforms.get(home)
        on_target = self.platforms.get(target)
        if origin is None or on_target is None:
            return None
        if origin.budgeted is None:
            return []
        return rewrite_items(
            check=self.name,
            target=target,
            nvidia=origin.budgeted,
            on_target=on_target.budgeted,
            target_error=on_target.error,
        )

    def format_items(self, target: str) -> list[FormatItem]:
        """What this check's formats-and-layout findings on ``target`` cost a move there."""
        on_target = self.platforms.get(target)
        if on_target is None:
            return []
        return format_items(check=self.name, target=target, formats=on_target.formats,
                            padding=on_target.padding_formats)  # fmt: skip

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "reference": self.reference,
            "note": self.note,
            "variant_of": self.variant_of,
            "transform": self.transform,
            "platforms": {p: platform_to_dict(r) for p, r in self.platforms.items()},
            **({"untraced": self.untraced.to_dict()} if self.untraced else {}),
            **({"not_compared": self.not_compared.to_dict()} if self.not_compared else {}),
        }

    @classmethod
    def from_dict(cls, data: JsonMapping) -> Probe:
        untraced = read_opt_table(data, "untraced")
        not_compared = read_opt_table(data, "not_compared")
        return cls(
            name=read_text(data, "name"),
            reference=read_text(data, "reference"),
            note=read_opt_text(data, "note"),
            variant_of=read_opt_text(data, "variant_of"),
            transform=read_opt_text(data, "transform"),
            platforms={
                p: platform_from_dict(p, as_table(r, p))
                for p, r in read_table(data, "platforms").items()
            },
            untraced=Untraced.from_dict(untraced) if untraced else None,
            not_compared=NotCompared.from_dict(not_compared) if not_compared else None,
        )


def census_to_dict(census: Census) -> JsonObject:
    data: JsonObject = {
        "level": census.level,
        "vendor": census.vendor,
        "custom": census.custom,
        "meta": census.meta,
        "xla": census.xla_ops,
        "xla_kinds": dict(census.xla_kinds),
        "libraries": census.libraries(),
        "kernels": [kernel_to_dict(k) for k in census.kernels],
    }
    if census.collectives:
        data["collectives"] = collectives_to_dict(census)
    return data


def collectives_to_dict(census: Census) -> dict[str, JsonObject]:
    """``{"all-reduce": {"count": 7, "inserted": 6, "library": "nccl", "counterparts":
    {"rocm": "rccl", "tpu": "ici", "cpu": "xla-cpu"}}}``: collectives by kind, what runs them
    on this platform and on the others. ``inserted`` (how many the SPMD partitioner added)
    is known at the lowered level only."""
    library = COLLECTIVE_LIBRARIES.get(census.platform)
    counterparts = {p: lib for p, lib in COUNTERPART_LIBRARIES.items() if p != census.platform}
    return {
        c.kind: {
            "count": c.count,
            **({"inserted": c.inserted} if census.level == "lowered" else {}),
            "library": library,
            "counterparts": counterparts,
        }
        for c in census.collectives
    }


def census_from_dict(platform: str, data: JsonMapping) -> Census:
    return Census(
        platform=platform,
        level="compiled" if read_text(data, "level", "lowered") == "compiled" else "lowered",
        xla_ops=read_integer(data, "xla", 0),
        xla_kinds=read_counts(data, "xla_kinds", None),
        kernels=tuple(kernel_from_dict(k) for k in read_tables(data, "kernels", ())),
        collectives=tuple(
            _collective(kind, as_table(found, kind))
            for kind, found in sorted(read_table(data, "collectives", None).items())
        ),
    )


def _collective(kind: str, found: JsonMapping) -> CollectiveCount:
    return CollectiveCount(
        kind=kind, count=read_integer(found, "count"), inserted=read_integer(found, "inserted", 0)
    )


def kernel_to_dict(kernel: Kernel) -> JsonObject:
    return {
        "name": kernel.name,
        "layer": kernel.layer,
        "library": kernel.library,
        "kind": kernel.kind,
        "count": kernel.count,
        "location": str(kernel.location) if kernel.location else None,
    }


def kernel_from_dict(data: JsonMapping) -> Kernel:
    location = None
    if data.get("location"):
        file, _, line = read_text(data, "location").rpartition(":")
        location = SourceLocation(file=file, line=int(line))
    return Kernel(
        layer=_layer(read_text(data, "layer")),
        name=read_text(data, "name"),
        kind=read_text(data, "kind"),
        library=read_opt_text(data, "library"),
        location=location,
        count=read_integer(data, "count", 1),
    )


def _layer(name: str) -> Layer:
    if name not in LAYERS:
        raise ValueError(f"layer: expected one of {', '.join(LAYERS)}, found {name!r}")
    return name


def _level_to_dict(census: Census, formats: FormatCensus | None) -> JsonObject:
    """One level's census with its formats-and-layout findings, where they were judged."""
    data = census_to_dict(census)
    if formats is not None:
        data["formats"] = formats.to_dict()
    return data


def _formats_from_dict(level: JsonMapping | None) -> FormatCensus | None:
    found = read_opt_table(level, "formats") if level else None
    return FormatCensus.from_dict(found) if found else None


def platform_to_dict(result: PlatformProbe) -> JsonObject:
    compiled: JsonObject | None = None
    if result.compiled is not None:
        compiled = {
            **_level_to_dict(result.compiled, result.compiled_formats),
            "deviceless": result.deviceless,
            "target": result.target,
        }
    data: JsonObject = {
        "present": result.present,
        "lowered": _level_to_dict(result.census, result.formats) if result.census else None,
        "error": result.error,
        "compiled": compiled,
        "compile_error": result.compile_error,
        "executed": result.executed,
        "execution_error": result.execution_error,
        "numerics": result.numerics.to_dict() if result.numerics else None,
        "runtime_share": result.runtime_share.to_dict() if result.runtime_share else None,
    }
    if result.what_if_no_vendor is not None:
        data["what_if_no_vendor"] = census_to_dict(result.what_if_no_vendor)
    if result.needs_hardware is not None:
        data["needs_hardware"] = result.needs_hardware
    if result.lowering_warnings:
        data["lowering_warnings"] = list(result.lowering_warnings)
    if result.memory is not None:  # optional: reports of projects compiling nothing unchanged
        data["memory"] = result.memory.to_dict()
    if result.emulated is not None:  # optional keys: reports without emulation are unchanged
        data["emulated"] = result.emulated.to_dict()
        data["emulated_numerics"] = (
            result.emulated_numerics.to_dict() if result.emulated_numerics else None
        )
        if result.emulated_bounds is not None:
            data["emulated_bounds"] = result.emulated_bounds.to_dict()
    return data


def platform_from_dict(platform: str, data: JsonMapping) -> PlatformProbe:
    lowered = read_opt_table(data, "lowered")
    compiled = read_opt_table(data, "compiled")
    what_if = read_opt_table(data, "what_if_no_vendor")
    numerics = read_opt_table(data, "numerics")
    share = read_opt_table(data, "runtime_share")
    emulated = read_opt_table(data, "emulated")
    emulated_numerics = read_opt_table(data, "emulated_numerics")
    emulated_bounds = read_opt_table(data, "emulated_bounds")
    memory = read_opt_table(data, "memory")
    return PlatformProbe(
        platform=platform,
        present=read_flag(data, "present", False),
        census=census_from_dict(platform, lowered) if lowered else None,
        error=read_opt_text(data, "error"),
        needs_hardware=read_opt_text(data, "needs_hardware"),
        executed=read_flag(data, "executed", False),
        execution_error=read_opt_text(data, "execution_error"),
        numerics=Comparison.from_dict(numerics) if numerics else None,
        compiled=census_from_dict(platform, compiled) if compiled else None,
        compile_error=read_opt_text(data, "compile_error"),
        deviceless=read_flag(compiled, "deviceless", False) if compiled else False,
        target=read_opt_text(compiled, "target") if compiled else None,
        what_if_no_vendor=census_from_dict(platform, what_if) if what_if else None,
        runtime_share=RuntimeShare.from_dict(share) if share else None,
        formats=_formats_from_dict(lowered),
        compiled_formats=_formats_from_dict(compiled),
        emulated=Emulation.from_dict(emulated) if emulated else None,
        emulated_numerics=Comparison.from_dict(emulated_numerics) if emulated_numerics else None,
        emulated_bounds=Comparison.from_dict(emulated_bounds) if emulated_bounds else None,
        lowering_warnings=read_texts(data, "lowering_warnings", None),
        memory=DeviceMemory.from_dict(platform, memory) if memory else None,
    )


def numerics_status(probe: Probe, platform: str) -> str:
    """``reference``, ``match``, ``mismatch``, ``not executed``, ``not present`` or ``error``."""
    result = probe.platforms[platform]
    return numerics_state(
        present=result.present,
        executed=result.executed,
        failed=bool(result.execution_error),
        reference=platform == probe.reference,
        ok=None if result.numerics is None else result.numerics.ok,
    )


def emulated_status(result: PlatformProbe) -> str | None:
    """How an emulation of ``result``'s platform went: ``match``, ``mismatch``, ``may
    differ`` (it matched, but what it cannot compute as the chip does is measured to move
    the outputs beyond the tolerance, or has no measured bound), ``failed`` (the emulated
    run raised), ``not run`` (this JAX cannot run a kernel of it; never a failure);
    ``None`` where it was not emulated."""
    emulation = result.emulated
    if emulation is None:
        return None
    return emulated_state(
        ran=emulation.ran,
        failed=emulation.error is not None,
        ok=None if result.emulated_numerics is None else result.emulated_numerics.ok,
        may_differ=may_differ(emulation, result.emulated_bounds),
    )


MAY_DIFFER = "may differ"
"""The third state of an emulation: it matched, but the chip may not (its measured bounds
move the outputs beyond the tolerance)."""


def emulated_state(*, ran: bool, failed: bool, ok: bool | None, may_differ: bool = False) -> str:
    """The status of one emulation, from its facts (one rule for the typed probe and for a
    report's dicts)."""
    if failed:
        return "failed"
    if not ran:
        return "not run"
    if ok is None:
        return "not compared"
    if not ok:
        return "mismatch"
    return MAY_DIFFER if may_differ else "match"


def numerics_state(
    *, present: bool, executed: bool, failed: bool, reference: bool, ok: bool | None
) -> str:
    """The numerics status of one check on one platform, from its facts (one rule for the
    typed :class:`Probe` and for a report's dicts)."""
    if failed:
        return "error"
    if not executed:
        return "not present" if not present else "not executed"
    if reference:
        return "reference"
    if ok is None:
        return "not compared"
    return "match" if ok else "mismatch"
