"""Will it fit, as the reports show it: a check's planned device memory per platform against
the device's capacity (pure).

:func:`memory_cell` reads one platform's
:class:`~pytest_jaxport.model.memory.DeviceMemory` into a :class:`MemoryCell`: what the
memory column says (``13.1 of 15.75 GiB (83%)``, ``does not fit: needs 18.75 GiB of 15.75
GiB``, ``not compiled``, ``capacity unknown``), the device it was planned for (``tpu
(v5e)``; ``tpu (v5e:2x2, per chip)`` for a sliced check), and what the details add (the
compiler's breakdown, its words where it refused). :func:`largest_plans` picks, per platform,
the computation of a suite audit with the largest plan.

Every format lays out these cells and says no figure of its own: the terminal's per-check
lines, the Markdown's and the HTML's memory column, the problems (what does not fit) and
the alerts.

Example::

    >>> from pytest_jaxport.model.memory import DeviceMemory
    >>> cell = memory_cell(DeviceMemory(platform="tpu", level="compiled", generation="v5e",
    ...     slice="v5e:1x1", peak_bytes=14_063_000_000, capacity_bytes=16_909_336_064))
    >>> cell.line
    'tpu (v5e): 13.1 of 15.75 GiB (83%)'
    >>> memory_cell(DeviceMemory(platform="rocm", level="not compiled")).line
    'rocm: not compiled'

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pytest_jaxport.model.memory import DeviceMemory, breakdown_text, capacity_size, memory_size
from pytest_jaxport.view.formatting import memory_of, used_pct

if TYPE_CHECKING:
    from pytest_jaxport.model.probe import PlatformProbe

MemoryStatus = Literal["good", "bad", "unknown"]
"""``good``: the plan fits the device; ``bad``: it does not (the compiler refused it, or its
plan is over the capacity); ``unknown``: no plan (not compiled, no count) or no capacity."""

NOT_COMPILED = "not compiled"
CAPACITY_UNKNOWN = "capacity unknown"
DOES_NOT_FIT = "does not fit"
"""A problem's key where a check does not fit a platform's device and no violation says so
(the platform is not in ``must_lower``): a finding, not a failure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryCell:
    """One check's memory on one platform, as every format shows it."""

    platform: str
    where: str
    """The platform and the device it was planned for: ``tpu (v5e)``, ``tpu (v5e:2x2, per
    chip)``; the platform alone where no device is known (``rocm``)."""
    text: str
    """What the memory column says: ``13.1 of 15.75 GiB (83%)``, ``does not fit: needs 18.75
    GiB of 15.75 GiB``, ``13.1 GiB planned, capacity unknown``, ``not compiled``."""
    status: MemoryStatus
    needed: int | None = None
    """The bytes it needs per device (the plan's peak, or the compiler's figure where it
    refused); ``None`` where there is no number."""
    details: tuple[str, ...] = ()
    """What the details add (``-v``, the HTML's check details): the compiler's breakdown, its
    words where it refused, why it was not compiled, where the capacity comes from."""

    @property
    def line(self) -> str:
        """``tpu (v5e): 13.1 of 15.75 GiB (83%)``."""
        return f"{self.where}: {self.text}"

    @property
    def headline(self) -> str:
        """The cell as a finding says it: ``does not fit on tpu (v5e): needs 18.75 GiB of
        15.75 GiB`` where it does not fit, else :attr:`line`."""
        if self.status == "bad":
            return f"{DOES_NOT_FIT} on {self.where}: {self.text.removeprefix(DOES_NOT_FIT + ': ')}"
        return self.line


def memory_text(memory: DeviceMemory) -> tuple[str, MemoryStatus]:
    """What the memory column says of ``memory``, and how it stands."""
    if memory.level == NOT_COMPILED:
        return NOT_COMPILED, "unknown"
    refused = memory.out_of_memory
    if refused is not None:
        available = refused.available_text
        if available is None and memory.capacity_bytes is not None:
            available = capacity_size(memory.capacity_bytes)
        return f"{DOES_NOT_FIT}: needs {refused.needs_text}" + (
            f" of {available}" if available else ""
        ), "bad"
    planned = memory.peak_bytes
    if planned is None:
        return "no plan", "unknown"
    capacity = memory.capacity_bytes
    if capacity is None:
        return f"{memory_size(planned)} planned, {CAPACITY_UNKNOWN}", "unknown"
    said = f"{memory_of(planned, capacity)} ({used_pct(planned / capacity)})"
    if memory.fits is False:
        return f"{said}: {DOES_NOT_FIT}", "bad"
    return said, "good"


def memory_details(memory: DeviceMemory) -> tuple[str, ...]:
    """What the details say beside the column: the compiler's breakdown (and that it planned
    without the device), its words where it refused, why it was not compiled or gave no
    plan, where the capacity comes from."""
    lines = []
    breakdown = memory.breakdown
    if breakdown is not None:
        how = "planned without the device" if memory.deviceless else "planned"
        lines.append(f"the compiler's count ({how}): {breakdown_text(breakdown)}")
    if memory.out_of_memory is not None and memory.out_of_memory.said:
        lines.append(f"the compiler: {compiler_words(memory.out_of_memory.said)}")
    if memory.reason:
        lines.append(f"{'not compiled' if memory.level == NOT_COMPILED else 'no plan'}: "
                     f"{memory.reason}")  # fmt: skip
    if memory.capacity_bytes is not None and memory.capacity_source:
        lines.append(f"capacity {capacity_size(memory.capacity_bytes)}: "
                     f"{memory.capacity_source}")  # fmt: skip
    elif memory.capacity_bytes is None and memory.capacity_source:
        source = memory.capacity_source
        lines.append(source if source.startswith(CAPACITY_UNKNOWN) else
                     f"{CAPACITY_UNKNOWN}: {source}")  # fmt: skip
    return tuple(lines)


_AT_LINE = re.compile(r"\(at (?P<where>[^()\s]+:\d+)\)")


def compiler_words(said: str) -> str:
    """The compiler's own words in a refusal's text: without the finding a compile error
    leads with (``does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB (at t.py:19): ``),
    which the memory column says already.

    >>> compiler_words("does not fit on tpu (v5e): needs 18.75 GiB (at t.py:19): RESOURCE_...")
    'RESOURCE_...'
    """
    if said.startswith(DOES_NOT_FIT):
        found = _AT_LINE.search(said)
        if found is not None and said[found.end() :].startswith(": "):
            return said[found.end() + 2 :]
    return said


def check_line(memory: DeviceMemory) -> str | None:
    """The check's line a refusal for memory names (``t.py:19``: the compile error says where
    the check was called), or ``None``."""
    refused = memory.out_of_memory
    found = _AT_LINE.search(refused.said) if refused is not None else None
    return found.group("where") if found is not None else None


def memory_cell(memory: DeviceMemory) -> MemoryCell:
    """One platform's memory as every format shows it."""
    text, status = memory_text(memory)
    return MemoryCell(
        platform=memory.platform,
        where=memory.where,
        text=text,
        status=status,
        needed=memory.needed_bytes,
        details=memory_details(memory),
    )


def memory_cells(platforms: Mapping[str, PlatformProbe]) -> tuple[MemoryCell, ...]:
    """Each platform's memory cell, where it has memory data, in the entries' order."""
    return tuple(memory_cell(e.memory) for e in platforms.values() if e.memory is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class LargestMemory:
    """A suite audit's largest planned memory on one platform: which computation, and its
    cell."""

    computation: str
    """``mlp [3f2a1b2c]``."""
    memory: MemoryCell
    computations: int = 1
    """How many of the audit's computations have a plan (or a refusal) on the platform."""

    @property
    def line(self) -> str:
        """``tpu (v5e): 13.1 of 15.75 GiB (83%), mlp [3f2a1b2c] (the largest of 12
        computations planned)``."""
        of = (
            f"the largest of {self.computations} planned"
            if self.computations > 1
            else "the one planned"
        )
        return f"{self.memory.line}, {self.computation} ({of})"


def largest_plans(
    computations: Iterable[tuple[str, Mapping[str, PlatformProbe]]],
) -> tuple[LargestMemory, ...]:
    """Per platform (in the order met), the computation that needs the most device memory,
    of ``(label, platform entries)`` pairs: only compiled plans and refusals count (a
    computation not compiled for a platform has no number there)."""
    best: dict[str, tuple[str, MemoryCell]] = {}
    counted: Counter[str] = Counter()
    for label, platforms in computations:
        for platform, entry in platforms.items():
            memory = entry.memory
            if memory is None or memory.needed_bytes is None:
                continue
            counted[platform] += 1
            if platform not in best or (best[platform][1].needed or 0) < memory.needed_bytes:
                best[platform] = (label, memory_cell(memory))
    return tuple(
        LargestMemory(computation=label, memory=cell, computations=counted[platform])
        for platform, (label, cell) in best.items()
    )
