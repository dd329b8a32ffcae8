"""Will it fit: what a check needs in one device's memory, as that platform's compiler planned
it, against the device's capacity (:class:`DeviceMemory`), the compiler's refusal for memory
(:class:`OutOfMemory`), and the budget's limit on it (:class:`MemoryLimit`). Pure: no jax, no
pytest.

Where a compiler runs for a platform (``[tool.jaxport] compile``: cpu here, cuda and tpu
without their devices), its plan is the number: ``memory_analysis()``'s peak, per device (per
chip of a slice, for a program partitioned over it). Where none runs (rocm, oneapi, a platform
not in ``compile``), the memory is ``not compiled``: never a number that was not measured.

>>> plan = DeviceMemory(platform="tpu", level="compiled", device="TPU v5e", generation="v5e",
...                     slice="v5e:1x1", peak_bytes=14_063_000_000,
...                     capacity_bytes=16_909_336_064)
>>> plan.fits, f"{plan.used:.0%}"
(True, '83%')
>>> refused = out_of_memory("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory "
...                         "required for HLO temporaries (18.75G) exceeds available HBM "
...                         "(15.75G).")
>>> refused.needs_bytes == int(18.75 * 2**30), refused.available_text
(True, '15.75 GiB')

The JSON form of a check's platform entry holds it under ``memory``
(:meth:`DeviceMemory.to_dict`), written only where memory is a topic (a platform in
``compile``, or any platform of a project that compiles one): reports of projects that compile
nothing are unchanged.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

from pytest_jaxport.model.census import CompiledMemory
from pytest_jaxport.model.jsontypes import (
    JsonMapping,
    JsonObject,
    read_integer,
    read_opt_table,
    read_opt_text,
    read_text,
)
from pytest_jaxport.model.platforms import Capacity

MemoryLevel = Literal["compiled", "not compiled"]
"""Where a memory figure comes from: the platform's compiler planned it (``compiled``, here or
without the device), or no compiler ran for the platform (``not compiled``: no number)."""
MEMORY_LEVELS: tuple[MemoryLevel, ...] = get_args(MemoryLevel)

GIB = 1 << 30

_UNITS: dict[str, int] = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
}
"""The units a size is written in (``"12 GiB"``, ``"500 MB"``): spelled out, so that a size
never depends on a guess between 10⁹ and 2³⁰."""

_COMPILER_UNITS: dict[str, int] = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
"""The units libtpu prints sizes in (``18.75G``): binary (its ``15.75G`` available HBM is the
chip's ``bytes_limit``, 16,909,336,064 bytes, 15.748 GiB)."""


_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def memory_size(count: float) -> str:
    """A planned size in the binary unit that reads best, to three significant figures:
    ``13.1 GiB``, ``768 MiB``, ``12.5 KiB``, ``512 B``.

    >>> memory_size(14_063_000_000), memory_size(805_306_368), memory_size(12_800), memory_size(512)
    ('13.1 GiB', '768 MiB', '12.5 KiB', '512 B')
    """
    value, unit = float(count), _BINARY_UNITS[0]
    for unit in _BINARY_UNITS:
        if value < 1024 or unit == _BINARY_UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{value:.0f} B"
    return f"{_significant(value)} {unit}"


def _significant(value: float) -> str:
    """``13.1``, ``4.69``, ``0.75``, ``768``: three significant figures, never an exponent."""
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def capacity_size(count: float) -> str:
    """A device's capacity as its description gives it: two decimals at most, in the largest
    binary unit it fills (``15.75 GiB``, ``80 GiB``).

    >>> capacity_size(16_909_336_064), capacity_size(80 * 2**30), capacity_size(2**29)
    ('15.75 GiB', '80 GiB', '512 MiB')
    """
    value, unit = float(count), _BINARY_UNITS[0]
    for unit in _BINARY_UNITS:
        if value < 1024 or unit == _BINARY_UNITS[-1]:
            break
        value /= 1024
    return f"{value:.2f}".rstrip("0").rstrip(".") + f" {unit}"


def breakdown_text(breakdown: CompiledMemory) -> str:
    """The compiler's count as one line: ``arguments 6.63 GiB, outputs 6.25 GiB, temporaries
    100 MiB, aliased 0 B, code 3.38 MiB`` (what a memory line's details and a
    ``max_device_memory`` violation both show).

    >>> breakdown_text(CompiledMemory(argument=7_118_000_000, output=512, temp=0))
    'arguments 6.63 GiB, outputs 512 B, temporaries 0 B, aliased 0 B, code 0 B'
    """
    return ", ".join(
        f"{label} {memory_size(getattr(breakdown, name))}"
        for name, label in zip(CompiledMemory.FIELDS, _BREAKDOWN_LABELS, strict=True)
    )


_BREAKDOWN_LABELS = ("arguments", "outputs", "temporaries", "aliased", "code")
"""How a line names :attr:`CompiledMemory.FIELDS`, in their order."""


def gib_text(count: float) -> str:
    """Bytes as GiB with two decimals, as a memory line reads (``13.06 GiB``).

    >>> gib_text(16_909_336_064)
    '15.75 GiB'
    """
    return f"{count / GIB:.2f} GiB"


@dataclass(frozen=True, slots=True, kw_only=True)
class OutOfMemory:
    """The compiler refused the program for memory: the bytes it says the program needs and
    the bytes it says are available (as it printed them: ``18.75G``, rounded to its two
    decimals), and its words."""

    needs_bytes: int
    """What the compiler says the program needs (``18.75G``: its rounded figure)."""
    available_bytes: int | None = None
    """What the compiler says is available (``15.75G``), where it said."""
    needs: str = ""
    """The compiler's own figure for :attr:`needs_bytes` (``18.75G``)."""
    available: str = ""
    """The compiler's own figure for :attr:`available_bytes` (``15.75G``)."""
    memory_space: str = "hbm"
    """The memory the program does not fit (``hbm``; ``vmem`` for a Pallas kernel's scratch)."""
    said: str = ""
    """The compiler's words, cleaned of its C++ stack."""

    @property
    def needs_text(self) -> str:
        """``18.75 GiB``: the compiler's figure, in the unit it meant."""
        return _compiler_text(self.needs, self.needs_bytes)

    @property
    def available_text(self) -> str | None:
        """``15.75 GiB``, where the compiler said what is available."""
        if self.available_bytes is None:
            return None
        return _compiler_text(self.available, self.available_bytes)

    def to_dict(self) -> JsonObject:
        data: JsonObject = {
            "needs_bytes": self.needs_bytes,
            "available_bytes": self.available_bytes,
            "needs": self.needs,
            "available": self.available,
            "memory_space": self.memory_space,
            "said": self.said,
        }
        return data

    @classmethod
    def from_dict(cls, data: JsonMapping) -> OutOfMemory:
        available = data.get("available_bytes")
        return cls(
            needs_bytes=read_integer(data, "needs_bytes"),
            available_bytes=None if available is None else read_integer(data, "available_bytes"),
            needs=read_text(data, "needs", ""),
            available=read_text(data, "available", ""),
            memory_space=read_text(data, "memory_space", "hbm"),
            said=read_text(data, "said", ""),
        )


def _compiler_text(figure: str, count: int) -> str:
    """``18.75G`` as ``18.75 GiB`` (the compiler's digits kept); bytes as GiB otherwise."""
    found = re.fullmatch(r"([0-9.]+)([KMGT]?)", figure)
    if found is None:
        return gib_text(count)
    unit = found.group(2)
    return f"{found.group(1)} {unit + 'iB' if unit else 'B'}"


_EXCEEDS = re.compile(
    r"\((?P<needs>[0-9.]+[KMGT]?)\)\s+exceeds\s+(?:the\s+)?available\s+(?P<space>\w+)\s+"
    r"\((?P<available>[0-9.]+[KMGT]?)\)",
    re.IGNORECASE,
)
_USED_OF = re.compile(
    r"memory space (?P<space>\w+)\..*?Used (?P<needs>[0-9.]+[KMGT]?) of "
    r"(?P<available>[0-9.]+[KMGT]?)",
    re.IGNORECASE | re.DOTALL,
)
_SCOPED = re.compile(
    r"memory space (?P<space>\w+).*?size (?P<needs>[0-9.]+[KMGT]?) and limit "
    r"(?P<available>[0-9.]+[KMGT]?)",
    re.IGNORECASE | re.DOTALL,
)


def _compiler_bytes(figure: str) -> int:
    found = re.fullmatch(r"([0-9.]+)([KMGT]?)", figure)
    if found is None:
        raise ValueError(f"not a size: {figure!r}")
    return round(float(found.group(1)) * _COMPILER_UNITS[found.group(2)])


def out_of_memory(message: str) -> OutOfMemory | None:
    """The compiler's refusal for memory in ``message`` (a compile error's text), or ``None``
    where it refused for anything else. libtpu says ``RESOURCE_EXHAUSTED: Ran out of memory on
    HBM, the total memory required for HLO temporaries (18.75G) exceeds available HBM
    (15.75G).`` (also ``... in memory space hbm. Used 18.75G of 15.75G hbm``, and for a Pallas
    kernel's VMEM ``... size 128.00M and limit 16.00M``).

    >>> out_of_memory("UNIMPLEMENTED: Only F32 and C64 types are implemented") is None
    True
    >>> out_of_memory("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used "
    ...               "18.75G of 15.75G hbm. Exceeded hbm capacity by 3.00G.").needs_text
    '18.75 GiB'
    """
    if "RESOURCE_EXHAUSTED" not in message and "out of memory" not in message.lower():
        return None
    for pattern in (_EXCEEDS, _USED_OF, _SCOPED):
        found = pattern.search(message)
        if found is not None:
            needs, available = found.group("needs"), found.group("available")
            return OutOfMemory(
                needs_bytes=_compiler_bytes(needs),
                available_bytes=_compiler_bytes(available),
                needs=needs,
                available=available,
                memory_space=found.group("space").lower(),
                said=" ".join(message.split())[:1000],
            )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceMemory:
    """What one check needs in one device's memory, on one platform, and whether it fits.

    ``compiled``: the platform's compiler planned it (:attr:`peak_bytes`, per device: per chip
    of a slice) or refused it for memory (:attr:`out_of_memory`). ``not compiled``: no compiler
    ran (:attr:`reason` says why), and there is no number.

    :attr:`peak_bytes` is the compiler's planned peak plus the program's code, as libtpu's
    own out-of-memory check counts them, so :attr:`fits` is the compiler's verdict
    (:func:`planned` says how that was measured); on the lent TPU v5e the chip's measured
    peak was that to the byte for the products, and at most 5.75 MiB above it for the other
    programs (``benchmarks/validation/CHIP_WAVE6.md``).
    """

    platform: str
    level: MemoryLevel
    device: str = ""
    """What reports call the device (``TPU v5e``, ``NVIDIA H100 80GB HBM3``, ``cpu``)."""
    generation: str = ""
    """Its generation (``v5e``, ``sm90``); empty for cpu."""
    slice: str = ""
    """The topology the program was compiled for (``v5e:2x2``), where the compiler takes one
    (tpu); empty elsewhere."""
    devices: int = 1
    """The devices the program is partitioned over: :attr:`peak_bytes` is each one's."""
    per: str = "device"
    """What one device is (:attr:`peak_bytes` and :attr:`capacity_bytes` are per one):
    ``chip`` (TPU v5e, v5p, v6e), ``TensorCore`` (where each of a chip's cores is one: TPU v2,
    v3, v4, 7x), ``GPU``, ``device``."""
    deviceless: bool = False
    """Whether the compiler ran without the device (cuda's and tpu's plans here)."""
    peak_bytes: int | None = None
    """The compiler's planned peak per device (``peak_memory_in_bytes``; where a compiler does
    not give one, arguments + outputs + temporaries − aliased) plus the program's code
    (``generated_code_size_in_bytes``). ``None`` where not compiled or refused."""
    capacity_bytes: int | None = None
    """The device's usable memory (:attr:`capacity_source` says where the figure comes
    from); ``None``: unknown, and :attr:`fits` is then unknown too."""
    capacity_source: str = ""
    """Where :attr:`capacity_bytes` comes from (the device description's source), or why it is
    unknown."""
    breakdown: CompiledMemory | None = None
    """The compiler's count: arguments, outputs, temporaries, aliased, generated code (its
    ``peak`` is :attr:`peak_bytes`, kept there alone: ``None`` here)."""
    out_of_memory: OutOfMemory | None = None
    """The compiler's refusal for memory, where it refused."""
    reason: str = ""
    """Why it was not compiled (``not compiled``), or why the compile gave no plan."""

    @property
    def fits(self) -> bool | None:
        """Whether the plan fits the device: ``False`` where the compiler refused it for
        memory, ``None`` where there is no plan or the capacity is unknown."""
        if self.out_of_memory is not None:
            return False
        if self.peak_bytes is None or self.capacity_bytes is None:
            return None
        return self.peak_bytes <= self.capacity_bytes

    @property
    def needed_bytes(self) -> int | None:
        """The bytes the check needs per device: the plan's peak, or the compiler's figure
        where it refused (rounded as it printed it)."""
        if self.peak_bytes is not None:
            return self.peak_bytes
        return self.out_of_memory.needs_bytes if self.out_of_memory is not None else None

    @property
    def used(self) -> float | None:
        """The share of the capacity the plan takes (0.83), where both are known."""
        needed = self.needed_bytes
        if needed is None or not self.capacity_bytes:
            return None
        return needed / self.capacity_bytes

    @property
    def where(self) -> str:
        """The platform and its device as a memory line names them: ``tpu (v5e)``, ``tpu
        (v5e:2x2, per chip)`` (a program partitioned over the slice), ``cuda (NVIDIA H100 80GB
        HBM3)``."""
        # A TPU by its generation (its slice where the program spans several chips), any
        # other device by what it reports (``NVIDIA H100 80GB HBM3``).
        shown = self.generation if self.platform == "tpu" else self.device
        if self.devices > 1 and self.slice:
            shown = self.slice
        if self.devices > 1 or self.per == "TensorCore":
            shown = f"{shown}, per {self.per}" if shown else f"per {self.per}"
        # A device that reports only its platform's name (cpu) is said once.
        return f"{self.platform} ({shown})" if shown and shown != self.platform else self.platform

    def headline(self) -> str:
        """One sentence: ``does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB``,
        ``tpu (v5e): 13.06 of 15.75 GiB (83%)``, ``rocm: not compiled (...)``."""
        if self.level == "not compiled":
            return f"{self.where}: not compiled" + (f" ({self.reason})" if self.reason else "")
        refused = self.out_of_memory
        if refused is not None:
            of = refused.available_text or (
                gib_text(self.capacity_bytes) if self.capacity_bytes is not None else None
            )
            return f"does not fit on {self.where}: needs {refused.needs_text}" + (
                f" of {of}" if of else ""
            )
        if self.peak_bytes is None:
            return f"{self.where}: no plan" + (f" ({self.reason})" if self.reason else "")
        planned = f"{self.peak_bytes / GIB:.2f}"
        if self.capacity_bytes is None:
            return f"{self.where}: {planned} GiB planned, capacity unknown"
        used = f" ({self.used:.0%})" if self.used is not None else ""
        verdict = "" if self.fits else ": does not fit"
        return f"{self.where}: {planned} of {gib_text(self.capacity_bytes)}{used}{verdict}"

    def to_dict(self) -> JsonObject:
        data: JsonObject = {
            "level": self.level,
            "device": self.device,
            "generation": self.generation,
            "slice": self.slice,
            "devices": self.devices,
            "per": self.per,
            "deviceless": self.deviceless,
            "peak_bytes": self.peak_bytes,
            "capacity_bytes": self.capacity_bytes,
            "capacity_source": self.capacity_source,
            "fits": self.fits,
            "breakdown": _breakdown_to_dict(self.breakdown) if self.breakdown else None,
        }
        if self.out_of_memory is not None:
            data["out_of_memory"] = self.out_of_memory.to_dict()
        if self.reason:
            data["reason"] = self.reason
        return data

    @classmethod
    def from_dict(cls, platform: str, data: JsonMapping) -> DeviceMemory:
        """The inverse of :meth:`to_dict` (``fits`` is derived, not read)."""
        level = read_text(data, "level")
        if level not in MEMORY_LEVELS:
            raise ValueError(f"level: expected one of {', '.join(MEMORY_LEVELS)}, found {level!r}")
        breakdown = read_opt_table(data, "breakdown")
        refused = read_opt_table(data, "out_of_memory")
        return cls(
            platform=platform,
            level="compiled" if level == "compiled" else "not compiled",
            device=read_text(data, "device", ""),
            generation=read_text(data, "generation", ""),
            slice=read_text(data, "slice", ""),
            devices=read_integer(data, "devices", 1),
            per=read_text(data, "per", "device"),
            deviceless=bool(data.get("deviceless", False)),
            peak_bytes=_opt_bytes(data, "peak_bytes"),
            capacity_bytes=_opt_bytes(data, "capacity_bytes"),
            capacity_source=read_text(data, "capacity_source", ""),
            breakdown=_breakdown_from_dict(breakdown) if breakdown else None,
            out_of_memory=OutOfMemory.from_dict(refused) if refused else None,
            reason=read_opt_text(data, "reason") or "",
        )


BREAKDOWN_KEYS: dict[str, str] = {
    "argument": "argument_bytes",
    "output": "output_bytes",
    "temp": "temp_bytes",
    "alias": "alias_bytes",
    "generated_code": "generated_code_bytes",
}
"""The compiler's count as a memory record writes it: each :class:`CompiledMemory` field by
its JSON key (arguments, outputs, temporaries, aliased, generated code)."""


def _breakdown_to_dict(memory: CompiledMemory) -> JsonObject:
    return {key: getattr(memory, name) for name, key in BREAKDOWN_KEYS.items()}


def _breakdown_from_dict(data: JsonMapping) -> CompiledMemory:
    return CompiledMemory.from_stats(
        {name: read_integer(data, key, 0) for name, key in BREAKDOWN_KEYS.items()}
    )


def _opt_bytes(data: JsonMapping, key: str) -> int | None:
    return None if data.get(key) is None else read_integer(data, key)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTarget:
    """The device one platform's memory is planned for: what reports call it, the slice it
    was compiled for, and its capacity (``None``: unknown, said in :attr:`unknown`)."""

    platform: str
    device: str
    generation: str = ""
    slice: str = ""
    deviceless: bool = False
    capacity: Capacity | None = None
    unknown: str = ""
    """Why the capacity is unknown, where it is (``capacity unknown: ...``)."""
    per: str = "device"


def planned(
    target: MemoryTarget, memory: CompiledMemory | None, *, devices: int = 1
) -> DeviceMemory:
    """The memory a compile planned, per device, against ``target``'s capacity.

    The peak is the compiler's planned peak plus the program's code
    (``generated_code_size_in_bytes``: 0 on cpu and cuda): libtpu's own check counts both
    (its largest v5e program that compiles has plan + code 7,168 bytes under the chip's
    ``bytes_limit``, its smallest refused one 1,024 bytes over:
    ``benchmarks/results/tpu-capacity-libtpu-0.0.42.1.json``), so :attr:`DeviceMemory.fits`
    is the compiler's verdict; on the lent chip plan + code was the measured peak to the
    byte for the products, and within 5.75 MiB of it for every other program.
    """
    base = _base(target, devices)
    if memory is None:
        return replace(base, reason="the compiler gave no memory count")
    return replace(
        base,
        peak_bytes=planned_peak(memory) + memory.generated_code,
        breakdown=CompiledMemory(
            argument=memory.argument, output=memory.output, temp=memory.temp,
            alias=memory.alias, generated_code=memory.generated_code,
        ),
    )  # fmt: skip


def refused(target: MemoryTarget, error: str, *, devices: int = 1) -> DeviceMemory | None:
    """The memory of a compile the compiler refused for device memory (its ``error`` names
    the bytes needed and available), or ``None`` where it refused for anything else (a
    Pallas kernel's scoped VMEM is the kernel's limit, not the device's: the kernel's
    finding)."""
    found = out_of_memory(error)
    if found is None or found.memory_space != "hbm":
        return None
    return replace(_base(target, devices), out_of_memory=found)


def _base(target: MemoryTarget, devices: int) -> DeviceMemory:
    """``target``'s memory with no number yet: its device, slice and capacity."""
    capacity = target.capacity
    return DeviceMemory(
        platform=target.platform,
        level="compiled",
        device=target.device,
        generation=target.generation,
        slice=target.slice,
        devices=devices,
        per=capacity.per if capacity is not None else target.per,
        deviceless=target.deviceless,
        capacity_bytes=capacity.bytes if capacity is not None else None,
        capacity_source=capacity.source if capacity is not None else target.unknown,
    )


def not_compiled(platform: str, reason: str) -> DeviceMemory:
    """No compiler ran for ``platform``: no number, and why (``reason``)."""
    return DeviceMemory(platform=platform, level="not compiled", reason=reason)


def why_not_compiled(
    platform: str,
    *,
    compile: Sequence[str],
    compilable: Sequence[str],
    lowered: bool,
    audited: bool = False,
) -> str:
    """Why ``platform``'s memory has no number, where a project compiles (``compile``) and
    ``platform`` was not compiled: ``compilable`` are the platforms any compiler runs for
    here.

    >>> why_not_compiled("rocm", compile=["tpu"], compilable=["cpu", "cuda", "tpu"],
    ...                  lowered=True)
    'no compiler runs for rocm without its device'
    >>> why_not_compiled("cuda", compile=["tpu"], compilable=["cpu", "cuda", "tpu"],
    ...                  lowered=True)
    'cuda is not in [tool.jaxport] compile'
    """
    if not lowered:
        return "not lowered: nothing to compile"
    if platform not in compilable:
        return f"no compiler runs for {platform} without its device"
    if platform not in compile:
        return f"{platform} is not in [tool.jaxport] compile"
    if audited:
        return "an audited computation compiles for tpu only (its lowered module, by libtpu)"
    return "not compiled here"


def planned_peak(memory: CompiledMemory) -> int:
    """The planned peak of a compiled program: the compiler's own (``peak_memory_in_bytes``)
    where it gave one, else what is live at once at most: arguments, outputs and temporaries,
    less the outputs aliased to arguments.

    >>> planned_peak(CompiledMemory(argument=8, output=4, temp=2, alias=4))
    10
    """
    if memory.peak is not None:
        return memory.peak
    return memory.argument + memory.output + memory.temp - memory.alias


# -- the budget's limit --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryLimit:
    """``max_device_memory``: a fraction of the device's capacity (``0.9``) or a size
    (``"12 GiB"``, ``"500 MB"``), as written.

    >>> MemoryLimit(fraction=0.8).allowed(16_909_336_064)
    13527468851
    >>> parse_memory_limit("12 GiB").allowed(None)
    12884901888
    """

    fraction: float | None = None
    size: int | None = None
    written: str = ""
    """The value as the configuration wrote it (``0.8``, ``12 GiB``)."""

    def allowed(self, capacity: int | None) -> int | None:
        """The bytes allowed on a device of ``capacity`` bytes; ``None`` for a fraction of an
        unknown capacity."""
        if self.size is not None:
            return self.size
        if self.fraction is None or capacity is None:
            return None
        return math.floor(self.fraction * capacity)

    def text(self, capacity: int | None = None) -> str:
        """``12.00 GiB`` for a size; ``80% of 15.75 GiB = 12.60 GiB`` for a fraction."""
        if self.size is not None:
            return f"{gib_text(self.size)}" + (
                f" ({self.written})" if self.written and self.written != gib_text(self.size)
                else ""
            )  # fmt: skip
        assert self.fraction is not None
        if capacity is None:
            return f"{self.fraction:.0%} of the capacity"
        allowed = self.allowed(capacity)
        assert allowed is not None
        return f"{self.fraction:g} of {gib_text(capacity)} = {gib_text(allowed)}"

    def to_json(self) -> float | str:
        """As the configuration wrote it: the fraction, or the size's text."""
        if self.fraction is not None:
            return self.fraction
        return self.written or f"{self.size} B"


_SIZE = re.compile(r"\s*(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[A-Za-z]*)\s*")


def parse_memory_limit(value: object) -> MemoryLimit:
    """``max_device_memory``'s value: a number in (0, 1] (a fraction of the capacity) or a
    string of a number and its unit spelled out (``"12 GiB"``, ``"500 MB"``). Raises
    ``ValueError`` saying what was expected.

    >>> parse_memory_limit(0.9).fraction, parse_memory_limit("500 MB").size
    (0.9, 500000000)
    >>> parse_memory_limit("12")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    ValueError: a size needs its unit: "12" is ambiguous; write "12 GiB" (2^30 bytes each) ...
    """
    if isinstance(value, bool):
        raise ValueError(_EXPECTED)
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or not 0 < value <= 1:
            raise ValueError(
                f"{_EXPECTED}; {value!r} is no fraction in (0, 1] (a size needs its unit: "
                f'"{value:g} GiB")'
            )
        return MemoryLimit(fraction=float(value), written=f"{value:g}")
    if not isinstance(value, str):
        raise ValueError(_EXPECTED)
    found = _SIZE.fullmatch(value)
    if found is None:
        raise ValueError(f"{_EXPECTED}; {value!r} is neither")
    number, unit = found.group("number"), found.group("unit")
    if not unit:
        raise ValueError(
            f'a size needs its unit: "{value.strip()}" is ambiguous; write "{number} GiB" '
            f'(2^30 bytes each) or "{number} GB" (10^9), or a fraction of the capacity as a '
            "number (0.9)"
        )
    known = {u.lower(): u for u in _UNITS}
    spelled = known.get(unit.lower())
    if spelled is None or (spelled != unit and unit.lower() not in ("b",)):
        raise ValueError(
            f"{_EXPECTED}; unknown unit {unit!r} in {value!r}: write one of "
            f"{', '.join(_UNITS)} ({unit!r} could mean 10^n or 2^n bytes)"
        )
    size = math.floor(float(number) * _UNITS[spelled])
    if size <= 0:
        raise ValueError(f"{_EXPECTED}; {value!r} is no size")
    return MemoryLimit(size=size, written=f"{number} {spelled}")


_EXPECTED = (
    'a fraction of the device\'s capacity in (0, 1] (0.9) or a size with its unit ("12 GiB", '
    '"500 MB")'
)
