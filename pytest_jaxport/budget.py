"""Census and numerics against the budget: which limits a check broke, and why (pure).

Example message::

    check 'attention' on cuda: max_custom_calls = 0 (set in pyproject.toml
    [tool.jaxport.budget]), found 1 custom call (lowered)
        __gpu$xla.gpu.triton (pallas-triton) at src/kernels.py:12

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from pytest_jaxport.census import Kernel
from pytest_jaxport.config import Budget
from pytest_jaxport.cost import CostModel, RuntimeShare, estimate
from pytest_jaxport.numerics import describe
from pytest_jaxport.report import Probe


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """One broken limit of one check on one platform."""

    check: str
    platform: str
    key: str
    limit: Any
    origin: str
    found: Any
    what: str
    level: str = "lowered"
    kernels: tuple[Kernel, ...] = ()
    details: tuple[str, ...] = ()

    def headline(self) -> str:
        return (
            f"check {self.check!r} on {self.platform}: {self.key} = {self.limit!r} "
            f"(set in {self.origin}), found {self.found} {self.what} ({self.level})"
        )

    def long_repr(self) -> str:
        lines = [self.headline()]
        lines += [f"    {k.describe()}" for k in self.kernels]
        lines += [f"    {d}" for d in self.details]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "platform": self.platform,
            "key": self.key,
            "limit": list(self.limit) if isinstance(self.limit, tuple) else self.limit,
            "origin": self.origin,
            "found": self.found,
            "level": self.level,
            "message": self.long_repr(),
        }


def _plural(n: int, word: str) -> str:
    return f"{word}{'' if n == 1 else 's'}"


def _allowed(kernel: Kernel, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(kernel.name, p) for p in patterns)


def evaluate(
    probe: Probe,
    budget_for: Callable[[str], Budget],
    *,
    migrate_to: Sequence[str] = (),
    model: CostModel | None = None,
) -> list[Violation]:
    """Every violation of ``probe`` against the budget of each platform it was lowered for.

    Counts come from the compiled census where the platform was compiled, else from the
    lowered one; each violation says which (``level``). Rewrite budgets apply per target in
    ``migrate_to``, priced with ``model``.
    """
    violations: list[Violation] = []
    for target in migrate_to:
        violations += _rewrite_violations(probe, budget_for(target), model or CostModel())
    for platform, result in probe.platforms.items():
        budget = budget_for(platform)
        must = budget.must_lower
        if must is not None and platform in must.value:
            failure = result.error or result.execution_error
            if failure is not None:
                stage = "lower" if result.error else "compile or run"
                violations.append(
                    Violation(
                        check=probe.name,
                        platform=platform,
                        key="must_lower",
                        limit=must.value,
                        origin=must.origin,
                        found="a failure to",
                        what=stage,
                        details=(failure,),
                    )
                )
        census = result.budgeted  # the highest level available: compiled, else lowered
        if census is None:
            continue
        custom = census.in_layer("custom")
        if budget.allow_targets is not None:
            custom = tuple(k for k in custom if not _allowed(k, budget.allow_targets.value))
        counted: list[tuple[str, Any, tuple[Kernel, ...], str]] = [
            ("max_custom_calls", budget.max_custom_calls, custom, "custom call"),
            ("max_vendor_calls", budget.max_vendor_calls, census.in_layer("vendor"),
             "vendor call"),
        ]  # fmt: skip
        for library, setting in budget.max_library_calls.items():
            kernels = tuple(k for k in census.in_layer("vendor") if k.library == library)
            counted.append((f"max_library_calls.{library}", setting, kernels, f"{library} call"))
        for key, setting, kernels, noun in counted:
            if setting is None:
                continue
            found = sum(k.count for k in kernels)
            if found > setting.value:
                violations.append(
                    Violation(
                        check=probe.name,
                        platform=platform,
                        key=key,
                        limit=setting.value,
                        origin=setting.origin,
                        found=found,
                        what=_plural(found, noun),
                        level=census.level,
                        kernels=kernels,
                    )
                )
        violations += _share_violations(probe.name, result.runtime_share, budget)
        if result.numerics is not None and not result.numerics.ok:
            comparison = result.numerics
            violations.append(
                Violation(
                    check=probe.name,
                    platform=platform,
                    key="numerics",
                    limit=f"match {comparison.reference}",
                    origin="[tool.jaxport.tolerance] or the dtype defaults",
                    found=len(comparison.mismatches),
                    what=_plural(len(comparison.mismatches), "differing leaf").replace(
                        "leafs", "leaves"
                    ),
                    level="executed",
                    details=tuple(describe(comparison).splitlines()[1:]),
                )
            )
    return violations


def _share_violations(check: str, share: RuntimeShare | None, budget: Budget) -> list[Violation]:
    if share is None:
        return []
    found = []
    for key, layer in (("max_vendor_share", "vendor"), ("max_custom_share", "custom")):
        setting = getattr(budget, key)
        value = share.layers.get(layer, 0.0)
        if setting is not None and value > setting.value:
            libraries = ", ".join(f"{lib} {f:.0%}" for lib, f in share.libraries.items())
            found.append(
                Violation(
                    check=check,
                    platform=budget.platform,
                    key=key,
                    limit=setting.value,
                    origin=setting.origin,
                    found=f"{value:.1%}",
                    what=f"of the run time in {layer} kernels",
                    level=f"{share.basis} runtime share",
                    details=(f"libraries: {libraries}",) if libraries and layer == "vendor" else (),
                )
            )
    return found


def _rewrite_violations(probe: Probe, budget: Budget, model: CostModel) -> list[Violation]:
    if budget.max_kernels_to_rewrite is None and budget.max_rewrite_days is None:
        return []
    items = probe.rewrite_items(budget.platform)
    if not items:
        return []
    # Per check: the kernels' own days; the per-target fixed cost belongs to the suite.
    result = estimate(budget.platform, items, model=replace(model, fixed=0.0))
    return rewrite_violations(
        probe.name,
        budget,
        kernels=result.kernels_to_rewrite,
        days=result.days,
        details=tuple(item.describe() for item in result.items),
    )


def rewrite_violations(
    check: str, budget: Budget, *, kernels: int, days: float, details: tuple[str, ...]
) -> list[Violation]:
    """``max_kernels_to_rewrite`` and ``max_rewrite_days`` of ``budget`` (its platform is the
    target) against an estimate of ``kernels`` and ``days``; ``details`` lists the items."""
    target = budget.platform
    found: list[Violation] = []
    limit = budget.max_kernels_to_rewrite
    if limit is not None and kernels > limit.value:
        found.append(
            Violation(
                check=check,
                platform=target,
                key="max_kernels_to_rewrite",
                limit=limit.value,
                origin=limit.origin,
                found=kernels,
                what=f"{_plural(kernels, 'kernel')} to rewrite moving off cuda",
                level="from the cuda census",
                details=details,
            )
        )
    most = budget.max_rewrite_days
    if most is not None and days > most.value:
        found.append(
            Violation(
                check=check,
                platform=target,
                key="max_rewrite_days",
                limit=most.value,
                origin=most.origin,
                found=f"{days:g}",
                what="engineering days to move off cuda",
                level="cost model",
                details=details,
            )
        )
    return found
