"""A check against its budget: every limit it broke, on every platform (pure).

:func:`evaluate` holds each probe to the keys :data:`pytest_jaxport.model.budget.KEYS`
declares, each by its own judge and in the table's order, then to its numerics (executed
and emulated); :func:`rewrite_violations` holds a suite's estimate of moving to a target to
the rewrite keys (the audit's).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pytest_jaxport.model.budget import (
    KEYS,
    MAY_DIFFER_KEY,
    Budget,
    OnCheck,
    OnPlatform,
    OnTarget,
    Rewrite,
    Setting,
    Violation,
    noun_for,
)
from pytest_jaxport.model.cost import CostModel, estimate
from pytest_jaxport.model.emulation import (
    Emulation,
    divergence_message,
    emulation_lines,
    may_differ_lines,
)
from pytest_jaxport.model.numerics import Comparison, describe, tolerance_origin
from pytest_jaxport.model.platforms import DEFAULT_HOME
from pytest_jaxport.model.probe import MAY_DIFFER, PlatformProbe, Probe, emulated_status

_PER_CHECK = tuple(k.judged for k in KEYS if isinstance(k.judged, OnCheck))
_PER_TARGET = tuple(k.judged for k in KEYS if isinstance(k.judged, OnTarget))
_TARGET_KEYS = tuple(k.name for k in KEYS if isinstance(k.judged, OnTarget))
_PER_PLATFORM_ANY = tuple(
    k.judged for k in KEYS if isinstance(k.judged, OnPlatform) and not k.judged.needs_census
)
_PER_PLATFORM_COUNTED = tuple(
    k.judged for k in KEYS if isinstance(k.judged, OnPlatform) and k.judged.needs_census
)


def evaluate(
    probe: Probe,
    budget_for: Callable[[str], Budget],
    *,
    migrate_to: Sequence[str] = (),
    model: CostModel | None = None,
    emulate_origin: str = "emulate",
    may_differ: Setting[str] | None = None,
    home: str = DEFAULT_HOME,
) -> list[Violation]:
    """Every violation of ``probe`` against the budget of each platform it was lowered for.

    Counts come from the compiled census where the platform was compiled, else from the
    lowered one; each violation says which (``level``). Rewrite budgets apply per target in
    ``migrate_to``, moving off ``home``, priced with ``model``. An emulation's outputs must
    match the reference like a present platform's, and its run must not fail
    (``emulate_origin``: where ``emulate`` was set); one that may differ on the chip fails
    where ``may_differ`` is ``fail`` (the default). Each key is judged by its judge, in
    :data:`KEYS`' order (on a platform, those judged whether or not it lowered first).
    """
    violations: list[Violation] = []
    for on_check in _PER_CHECK:
        violations += on_check.judge(probe, budget_for)
    for target in migrate_to:
        violations += _rewrite_violations(probe, budget_for(target), model or CostModel(), home)
    for platform, result in probe.platforms.items():
        budget = budget_for(platform)
        for on_platform in _PER_PLATFORM_ANY:
            violations += on_platform.judge(probe.name, result, budget)
        if result.budgeted is None:  # no census (compiled, else lowered) to count in
            continue
        for on_platform in _PER_PLATFORM_COUNTED:
            violations += on_platform.judge(probe.name, result, budget)
        if result.numerics is not None and not result.numerics.ok:
            comparison = result.numerics
            violations.append(
                Violation(
                    check=probe.name,
                    platform=platform,
                    key="numerics",
                    limit=f"match {comparison.reference}",
                    origin=tolerance_origin(comparison),
                    found=len(comparison.mismatches),
                    what=_numerics_what(comparison),
                    level="executed",
                    details=tuple(describe(comparison).splitlines()[1:]),
                )
            )
        violations += _emulation_violations(probe.name, result, emulate_origin, may_differ)
    return violations


def _emulation_violations(
    check: str, result: PlatformProbe, origin: str, may_differ: Setting[str] | None = None
) -> list[Violation]:
    """An emulation whose outputs differ from the reference's, whose run failed, or (with
    ``may_differ = "fail"``) that may differ on the chip; one that could not run here (a
    kernel this JAX cannot interpret) is a note, not a failure."""
    emulation = result.emulated
    if emulation is None:
        return []
    comparison = result.emulated_numerics
    if emulation.error is not None:
        return [
            Violation(
                check=check,
                platform=result.platform,
                key="emulated_run",
                limit=True,
                origin=origin,
                found="failed",
                what="the emulated run",
                level="emulated",
                details=(emulation.error, *emulation_lines(emulation)[:-1]),
            )
        ]
    setting = may_differ or Setting(value="fail", origin="the default")
    if emulated_status(result) == MAY_DIFFER and setting.value == "fail":
        head, *rest = may_differ_lines(emulation, result.emulated_bounds)
        return [
            Violation(
                check=check,
                platform=result.platform,
                key=MAY_DIFFER_KEY,
                limit=setting.value,
                origin=setting.origin,
                found=len(emulation.bounded),
                what=head,
                level="emulated",
                details=(*rest, *_emulated_as(emulation)),
            )
        ]
    if comparison is None or comparison.ok:
        return []
    return [
        Violation(
            check=check,
            platform=result.platform,
            key="emulated_numerics",
            limit=f"match {comparison.reference}",
            origin=tolerance_origin(comparison),
            found=len(comparison.mismatches),
            what=_numerics_what(comparison),
            level="emulated",
            details=tuple(divergence_message(emulation, describe(comparison)).splitlines()[1:]),
        )
    ]


def _emulated_as(emulation: Emulation) -> list[str]:
    """What the emulation changed, under a heading (nothing where it changed nothing)."""
    lines = emulation_lines(emulation)
    if not lines:
        return []
    return [f"emulated as {emulation.platform} would run it:", *(f"  {line}" for line in lines)]


def _rewrite_violations(
    probe: Probe, budget: Budget, model: CostModel, home: str
) -> list[Violation]:
    if not any(budget.is_set(key) for key in _TARGET_KEYS) or budget.platform == home:
        return []
    items = probe.rewrite_items(budget.platform, home=home)
    if items is None and probe.untraced is not None:  # lowered nowhere: it fails no budget
        return []
    if items is None:  # nothing counted: a limit on the count cannot pass
        missing = tuple(p for p in (home, budget.platform) if p not in probe.platforms)
        return rewrite_violations(probe.name, budget, kernels=0, days=0.0, details=(),
                                  home=home, not_lowered=missing)  # fmt: skip
    formats = probe.format_items(budget.platform)
    if not items and not formats:
        return []
    # Per check: the kernels' own days; the per-target fixed cost belongs to the suite.
    result = estimate(
        budget.platform, items or (), model=replace(model, fixed=0.0), format_items=formats
    )
    return rewrite_violations(
        probe.name,
        budget,
        kernels=result.kernels_to_rewrite,
        days=result.days,
        details=tuple(i.describe() for i in result.items)
        + tuple(i.describe() for i in result.format_items),
        home=home,
    )


def rewrite_violations(
    check: str,
    budget: Budget,
    *,
    kernels: int,
    days: float,
    details: tuple[str, ...],
    home: str = DEFAULT_HOME,
    not_lowered: tuple[str, ...] = (),
) -> list[Violation]:
    """The rewrite keys (``max_kernels_to_rewrite``, ``max_rewrite_days``) of ``budget`` (its
    platform is the target) against an estimate of ``kernels`` and ``days`` moving off
    ``home``; ``details`` lists the items. Where ``not_lowered`` names the platforms not
    lowered, nothing was counted, and every limit set fails."""
    rewrite = Rewrite(kernels=kernels, days=days, details=details, home=home,
                      not_lowered=not_lowered)  # fmt: skip
    return [v for on_target in _PER_TARGET for v in on_target.judge(check, budget, rewrite)]


def _numerics_what(comparison: Comparison) -> str:
    """``differing leaf (largest abs err 9.8e-04, largest rel err 9.7e-05)``: how many
    leaves differ and the largest errors over their elements, each its own element's (the
    element furthest beyond the tolerance, which the leaf's message shows, may be another;
    a structure or shape mismatch has no error to give)."""
    n = len(comparison.mismatches)
    said = noun_for(n, "differing leaf").replace("leafs", "leaves")
    if comparison.max_abs_err > 0 or comparison.max_rel_err > 0:
        said += (
            f" (largest abs err {comparison.max_abs_err:.1e},"
            f" largest rel err {comparison.max_rel_err:.1e})"
        )
    return said
