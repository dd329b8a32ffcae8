"""The second and third of the three numbers: kernels to rewrite and engineering days per
``migrate_to`` target, moving off the home platform (pure).

:func:`targets_of` reads a report's :class:`~pytest_jaxport.report.document.Numbers` into a
:class:`TargetRow` per target: the count (or why there is none: not lowered), the days with
their breakdown by cost item (:data:`COST_ITEMS`), the fixed part apart from what the
project's findings cost, and each kernel or dispatch the estimate counts.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pytest_jaxport.report.totals import Numbers
from pytest_jaxport.view.formatting import days_text, number, plural


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteRow:
    """One NVIDIA-bound kernel or dispatch a move to a target has to deal with."""

    status: str
    name: str
    kind: str
    location: str | None
    check: str
    reason: str


COST_ITEMS: tuple[tuple[str, str], ...] = (
    ("kernel_rewrite", "kernel rewrites"),
    ("fallback_validation", "fallback validation"),
    ("vendor_gap", "vendor gaps"),
    ("tooling_assumption", "tooling assumptions"),
    ("format_rewrite", "format rewrites"),
    ("requantize", "re-quantization"),
    ("precision_review", "precision reviews"),
    ("layout_work", "layout work"),
    ("fixed", "fixed per target"),
)
FIXED = "fixed"
"""The cost model's key of the days every target costs whatever the code does."""
FIXED_LABEL = dict(COST_ITEMS)[FIXED]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApartRow:
    """The part of a suite audit's estimate for one target at the lines it does not count
    (the tests' own), reported apart from the target's numbers."""

    where: str
    """``the tests' own lines`` (or ``lines outside counted_paths``)."""
    kernels: int | None
    days: float | None
    items: str = ""
    """``format rewrites 123`` (the items that cost days)."""

    def text(self) -> str:
        """``0 kernels, 123 days (format rewrites 123)``."""
        kernels = "-" if self.kernels is None else plural(self.kernels, "kernel")
        days = "-" if self.days is None else f"{days_text(self.days)} days"
        return f"{kernels}, {days}" + (f" ({self.items})" if self.items else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRow:
    """Kernels to rewrite and engineering days for one ``migrate_to`` target."""

    target: str
    kernels: int | None
    days: float | None
    breakdown: tuple[tuple[str, str, float], ...] = ()
    """``(cost-model key, label, days)``."""
    items: tuple[RewriteRow, ...] = ()
    fixed: float = 0.0
    """The cost model's ``fixed`` days, the same for every target whatever the code does."""
    from_project: float | None = None
    """``days`` less ``fixed``: what the project's findings cost (``None`` without days)."""
    not_lowered: tuple[str, ...] = ()
    """The platforms (the target, or the home platform) no check lowered: then there is no
    count and no price (:attr:`kernels` and :attr:`days` are ``None``), never 0."""
    apart: ApartRow | None = None
    """A suite audit's part at the lines it does not count (the tests' own), not in
    :attr:`kernels` and :attr:`days`; ``None`` where there is none."""

    def uncounted(self) -> str:
        """``not lowered`` / ``cuda (home) not lowered``: why there is no count; ``""``
        where there is one."""
        if not self.not_lowered:
            return ""
        names = [p if p == self.target else f"{p} (home)" for p in self.not_lowered]
        return ("" if names == [self.target] else f"{' and '.join(names)} ") + "not lowered"

    def count_text(self, missing: str = "-") -> str:
        """The kernels to rewrite, or why there is no count (``not lowered``); ``missing``
        where the report has neither."""
        if self.kernels is not None:
            return number(self.kernels)
        return self.uncounted() or missing

    @property
    def project_breakdown(self) -> tuple[tuple[str, str, float], ...]:
        """:attr:`breakdown` without the fixed part: the items the project's findings cost."""
        return tuple(row for row in self.breakdown if row[0] != FIXED)

    def project_items(self) -> str:
        """``fallback validation 3, tooling assumptions 3`` (the items that cost days)."""
        return ", ".join(f"{label} {days_text(d)}" for _, label, d in self.project_breakdown if d)

    def days_split(self) -> str:
        """``13.5 days = 8.5 from the project (fallback validation 3, ...) + 5 fixed per
        target``: the fixed part apart from what the project's findings cost (``8.5 days
        (...)`` where the cost model has no fixed part; ``-`` without days, ``not priced:
        not lowered`` where there is no count)."""
        if self.not_lowered:
            return f"not priced: {self.uncounted()}"
        if self.days is None or self.from_project is None:
            return "-"
        items = self.project_items()
        detail = f" ({items})" if items else ""
        if self.fixed <= 0:
            return f"{days_text(self.days)} days{detail}"
        return f"{days_text(self.days)} days = {self.parts(detail)}"

    def parts(self, detail: str = "") -> str:
        """``8.5 from the project + 5 fixed per target`` (``detail`` after the project's
        part); ``""`` without days or without a fixed part."""
        if self.from_project is None or self.fixed <= 0:
            return ""
        return (
            f"{days_text(self.from_project)} from the project{detail} + "
            f"{days_text(self.fixed)} {FIXED_LABEL}"
        )


def targets_of(
    numbers: Numbers | None, apart: Numbers | None = None, where: str = ""
) -> tuple[TargetRow, ...]:
    """Per ``migrate_to`` target, the kernels to rewrite and the days, with their breakdown
    and items (:class:`~pytest_jaxport.report.document.Numbers`); a suite audit's ``apart``
    (the numbers of the lines it does not count, ``where``) beside each."""
    if numbers is None:
        return ()
    rows = _target_rows(numbers)
    if apart is None:
        return rows
    return tuple(replace(row, apart=_apart_row(apart, row.target, where)) for row in rows)


def _apart_row(apart: Numbers, target: str, where: str) -> ApartRow | None:
    """``target``'s part of ``apart`` (``None`` where it has none): its row as
    :func:`_target_rows` reads any numbers, said in one line."""
    if target not in apart.rewrite:
        return None
    row = next(row for row in _target_rows(apart) if row.target == target)
    return ApartRow(
        where=where,
        kernels=row.kernels,
        days=row.days,
        items=", ".join(f"{label} {days_text(days)}" for _, label, days in row.breakdown if days),
    )


def _target_rows(numbers: Numbers) -> tuple[TargetRow, ...]:
    """Per target of ``numbers``, its row (without anything apart)."""
    rows = []
    targets = [*numbers.kernels_to_rewrite, *numbers.rewrite_days, *numbers.rewrite]
    for target in dict.fromkeys(targets):
        estimate = numbers.rewrite.get(target)
        kernels = numbers.kernels_to_rewrite.get(
            target, estimate.kernels_to_rewrite if estimate is not None else None
        )
        priced = numbers.rewrite_days.get(target, estimate.days if estimate is not None else None)
        breakdown = estimate.breakdown if estimate is not None else {}
        fixed = max(0.0, breakdown.get(FIXED, 0.0))
        rows.append(
            TargetRow(
                target=target,
                kernels=kernels,
                days=priced,
                fixed=fixed,
                from_project=None if priced is None else max(0.0, priced - fixed),
                breakdown=tuple(
                    (key, label, max(0.0, breakdown[key]))
                    for key, label in COST_ITEMS
                    if key in breakdown
                ),
                items=tuple(
                    RewriteRow(
                        status=i.status,
                        name=i.name,
                        kind=i.kind,
                        location=i.location,
                        check=i.check,
                        reason=i.reason,
                    )
                    for i in (estimate.items if estimate is not None else ())
                ),
            )
        )
    rows += [
        TargetRow(target=target, kernels=None, days=None, not_lowered=missing)
        for target, missing in numbers.not_lowered.items()
        if target not in targets
    ]
    return tuple(rows)
