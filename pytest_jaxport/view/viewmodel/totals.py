"""The platform totals: per platform, the suite's counts and libraries (pure).

:func:`totals_of` reads a report's per-platform
:class:`~pytest_jaxport.report.totals.PlatformTotals` (the summary's, or the suite
audit's) into a :class:`TotalsTable` of the columns of :data:`TOTALS_COLUMNS` that apply;
:func:`collectives_of` says the collectives by kind and what runs them on each platform.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_jaxport.model.classification import COLLECTIVE_LIBRARIES
from pytest_jaxport.view.formatting import number, pct, plural

if TYPE_CHECKING:
    from pytest_jaxport.report.totals import PlatformTotals


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One column of the platform totals: a header, how to read it from a platform's
    :class:`~pytest_jaxport.report.totals.PlatformTotals`, and whether it only shows when
    some platform has the figure."""

    header: str
    read: Callable[[PlatformTotals], str]
    key: str | None = None
    """Shown only when some platform's totals have this figure (an attribute that is not
    ``None``; ``None``: always)."""
    numeric: bool = True
    terminal: bool = True
    """Whether the terminal's table has room for it (the layer table's row says the same
    there); Markdown and HTML show every column."""


def _count_of(key: str) -> Callable[[PlatformTotals], str]:
    return lambda totals: number(getattr(totals, key) or 0)


def _counted_of(key: str) -> Callable[[PlatformTotals], str]:
    """A count of dispatches or sites: ``—`` where nothing was counted (every compile asked
    for the platform failed: its lowered census is not counted in its stead)."""
    return lambda totals: (
        "—" if totals_level(totals) == NOT_COMPILED_LEVEL else _count_of(key)(totals)
    )


NOT_COMPILED_LEVEL = "not compiled"
"""The level of a platform's totals where every compile asked of it failed."""


def totals_level(totals: PlatformTotals) -> str:
    """The level a platform's totals count at: ``lowered``; ``compiled`` where every check
    (computation) that lowered was compiled, the counts being those of the ones that compiled
    (the others only counted as failed to compile); ``not compiled`` where none did;
    ``mixed`` where some were not asked."""
    failed = totals.failed_to_compile or 0
    if not totals.compiled and not failed:
        return "lowered"
    if not totals.compiled:
        return NOT_COMPILED_LEVEL
    return "compiled" if totals.compiled + failed == totals.lowered else "mixed"


def not_compiled_note(platforms: Mapping[str, PlatformTotals], unit: str) -> str:
    """``tpu: 3 checks did not compile and are not in its calls and sites (the problems say
    why)``; ``""`` where every compile asked gave a program."""
    failed = [(p, t.failed_to_compile) for p, t in platforms.items() if t.failed_to_compile]
    if not failed:
        return ""
    said = "; ".join(f"{p}: {plural(n, unit)} did not compile" for p, n in failed)
    return (
        f"{said}: not in the calls and sites of the compiled level, nor counted at the lowered "
        "level in their stead (the problems say why each did not compile)"
    )


def _collective_calls(totals: PlatformTotals) -> str:
    return number(sum(count for count, _ in (totals.collectives or {}).values()))


TOTALS_COLUMNS: tuple[Column, ...] = (
    Column(header="lowered", read=_count_of("lowered")),
    Column(header="failed to lower", read=_count_of("failed_to_lower")),
    Column(header="compiled", read=_count_of("compiled"), key="compiled"),
    Column(header="failed to compile", read=_count_of("failed_to_compile"), key="compiled"),
    Column(header="vendor calls", read=_counted_of("vendor")),
    Column(header="vendor sites", read=_counted_of("vendor_sites")),
    Column(header="custom calls", read=_counted_of("custom")),
    Column(header="custom sites", read=_counted_of("custom_sites")),
    Column(header="collective calls", read=_collective_calls, key="collectives"),
    Column(
        header="format findings",
        read=_count_of("format_findings"),
        key="format_findings",
        terminal=False,
    ),
    Column(
        header="layout findings",
        read=_count_of("layout_findings"),
        key="layout_findings",
        terminal=False,
    ),
    Column(
        header="padding",
        read=lambda t: pct(t.padding_waste or 0.0),
        key="padding_waste",
        terminal=False,
    ),
    Column(
        header="padding (compiled)",
        read=lambda t: pct(t.compiled_padding_waste or 0.0),
        key="compiled_padding_waste",
        terminal=False,
    ),
    Column(header="relayouts", read=_count_of("relayouts"), key="relayouts", terminal=False),
    Column(header="level", read=totals_level, numeric=False),
)
"""The platform totals, in every format. Add a per-platform figure here."""

TOTALS_NOTE = (
    "lowered / failed to lower: checks. Calls: call-weighted dispatches summed over checks "
    "(one function checked by 40 tests counts 40 times). Sites: distinct source lines and "
    "kernels, each counted once; kernels to rewrite are distinct sites. Format and layout "
    "findings: call-weighted, summed like calls; padding: the share of bytes moved that is "
    "tile padding, in the layouts the compiler gives arrays nothing constrains (the lowered "
    "model); padding (compiled): in the layouts the compiler chose, where it compiled "
    "(tpu); relayouts: transposes and copies XLA inserted (compiled level)."
)
AUDIT_TOTALS_NOTE = (
    "lowered / failed to lower: distinct computations the suite ran. Calls: call-weighted "
    "dispatches summed over the distinct computations (one computation 40 tests ran counts "
    "once). Sites: distinct source lines and kernels, each counted once; kernels to rewrite "
    "are distinct sites. Format and layout findings: call-weighted, summed like calls; "
    "padding: the share of bytes moved that is tile padding (the lowered model; compiled: "
    "the compiler's layouts)."
)


def totals_note(unit: str) -> str:
    """What the platform totals count, for numbers of checks or of audited computations."""
    return AUDIT_TOTALS_NOTE if unit == "computation" else TOTALS_NOTE


@dataclass(frozen=True, slots=True, kw_only=True)
class TotalsTable:
    """Per platform, the suite's counts (:data:`TOTALS_COLUMNS` that apply) and libraries."""

    headers: tuple[str, ...] = ()
    numeric: tuple[bool, ...] = ()
    rows: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, int], ...]], ...] = ()
    """``(platform, cells, libraries)``."""
    terminal: tuple[bool, ...] = ()
    """Per column, :attr:`Column.terminal`."""
    not_compiled: str = ""
    """What did not compile and is counted apart (:func:`not_compiled_note`); ``""``."""


def padding_of(platforms: Mapping[str, PlatformTotals]) -> dict[str, float]:
    """Per platform with any, the share of bytes moved that is tile padding."""
    return {p: t.padding_waste for p, t in platforms.items() if t.padding_waste}


def totals_of(platforms: Mapping[str, PlatformTotals], unit: str = "check") -> TotalsTable:
    """The platform totals table of ``platforms`` (the summary's, or the audit's: ``unit``
    ``computation``)."""
    columns = [
        c
        for c in TOTALS_COLUMNS
        if c.key is None or any(getattr(t, c.key) is not None for t in platforms.values())
    ]
    rows = tuple(
        (
            platform,
            tuple(c.read(totals) for c in columns),
            tuple(totals.libraries.items()),
        )
        for platform, totals in platforms.items()
    )
    return TotalsTable(
        headers=tuple(c.header for c in columns),
        numeric=tuple(c.numeric for c in columns),
        rows=rows,
        terminal=tuple(c.terminal for c in columns),
        not_compiled=not_compiled_note(platforms, unit),
    )


def collectives_of(platforms: Mapping[str, PlatformTotals]) -> tuple[tuple[str, str], ...]:
    """The checks' collectives by kind, platforms with the same counts on one row
    (partitioning does not depend on the backend), then what runs them on each platform:
    ``("cpu, cuda, rocm, tpu", "all-reduce 12 (6 inserted by the SPMD partitioner)")``,
    ``("run by", "nccl on cuda, rccl on rocm, ici on tpu, xla-cpu on cpu")``."""

    grouped: dict[str, list[str]] = {}
    every: list[str] = []
    for platform, totals in platforms.items():
        kinds = totals.collectives
        if not kinds:
            continue
        parts = []
        for kind, (count, inserted) in sorted(kinds.items()):
            extra = f" ({number(inserted)} inserted by the SPMD partitioner)" if inserted else ""
            parts.append(f"{kind} {number(count)}{extra}")
        # A compiled program's collectives are the backend's (XLA's GPU pipeline combines
        # small all-reduces), not the partitioner's: say so where the counts come from there.
        label = f"{platform} (compiled)" if totals.compiled else platform
        grouped.setdefault(", ".join(parts), []).append(label)
        every.append(platform)
    if not grouped:
        return ()
    rows = [(", ".join(platforms), kinds) for kinds, platforms in grouped.items()]
    runs = ", ".join(f"{collective_library(p)} on {p}" for p in every)
    return (*rows, ("run by", runs))


def collective_library(platform: str) -> str:
    """What runs collectives on ``platform`` (``nccl`` on cuda), ``xla`` where the model
    names nothing (:data:`~pytest_jaxport.model.classification.COLLECTIVE_LIBRARIES`)."""
    return COLLECTIVE_LIBRARIES.get(platform, "xla")
