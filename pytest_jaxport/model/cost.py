"""The cost model: kernels to rewrite, formats-and-layout items, engineering days (pure).

- :func:`rewrite_items`: the home platform's kernels (cuda's unless ``[tool.jaxport] home``
  names another) a move to another target would have to rewrite, and the vendor dispatches
  with no counterpart there.
- :func:`format_items`: the formats-and-layout findings a move there has to deal with.
- :class:`CostModel` and :func:`estimate`: days per target, with the breakdown.

The runtime share, the first of the three numbers, is :mod:`pytest_jaxport.model.runtime_share`'s.

The cost model is tiered the way porting tools tier API migrations (SYCLomatic and HIPIFY
sort calls into migrated automatically, migrated with a warning to check, and not migrated):

========================  ====================================================  ========
item                      what it means                                          default
========================  ====================================================  ========
``kernel_rewrite``        a hand-written kernel that does not lower on the      10 days
                          target at all: write and tune a new one
``fallback_validation``   a hand-written kernel whose target runs a generic      3 days
                          fallback: validate numerics, profile, decide whether
                          a native kernel is needed ("performance not
                          guaranteed")
``vendor_gap``            a vendor-library dispatch with no counterpart on the   5 days
                          target (e.g. cuDNN fused attention): reimplement or
                          restructure
``tooling_assumption``    an NVIDIA-bound tool, pin or flag in the project       0.5 days
                          (Nsight, CUDA images, ``--xla_gpu_*``)
``fixed``                 per target, once: CI runners, containers, a first      5 days
                          end-to-end validation
``format_rewrite``        a line the target emulates or cannot compile (float64  3 days
                          on TPU): move it off the format (or the op) and
                          re-validate
``requantize``            a float8 format the target's matrix units do not take  2 days
                          (OCP vs FNUZ): re-quantize the weights once per
                          format and re-validate accuracy
``precision_review``      a dot or convolution the target computes with fewer    0.25 days
                          mantissa bits (TF32, one bfloat16 pass) or converts:
                          pin ``precision=`` or accept and document it
``layout_work``           a convolution the target relays out, or an array      0.5 days
                          with 10% or more tile padding: change the layout or
                          pad the features
========================  ====================================================  ========

The defaults are assumptions, deliberately round, not measurements (no public study prices
these items in days; docs/reference.md says what each rests on): a kernel rewrite two
engineer-weeks including tuning; validating a fallback a few days of benchmarking; a
tooling change hours. Format and layout items are priced per distinct line (a
re-quantization per format and target): a format rewrite a few days of moving a code path
off float64 and re-validating it, a precision review an afternoon. Every number is
configurable in ``[tool.jaxport.cost]``; ``fixed`` is the same for every target whatever the
code does, so the reports show it apart from what the project's findings cost.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from pytest_jaxport.model.census import Census, Kernel
from pytest_jaxport.model.classification import has_counterpart
from pytest_jaxport.model.findings import Effect, FormatCensus

Status = Literal["rewrite", "fallback", "vendor-gap"]
STATUS_LABELS: Mapping[str, str] = {
    "rewrite": "rewrite: does not lower on the target",
    "fallback": "fallback — performance not guaranteed",
    "vendor-gap": "vendor gap: no counterpart on the target",
}

# -- kernels to rewrite and days ----------------------------------------------------------


def _in_order(item: RewriteItem | FormatItem) -> tuple[tuple[bool, Any], ...]:
    """What ``item`` sorts by: its fields in order, ``None`` (no source line) before any value
    (``None`` and text do not compare: a suite with one site found both with and without a
    line failed to report)."""
    return tuple(
        (value is not None, value) for value in (getattr(item, f.name) for f in fields(item))
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteItem:
    """One kernel or dispatch bound to the home platform, as seen from one target. Items sort
    by their fields in order, one without a line before those with one (:func:`_in_order`)."""

    target: str
    status: Status
    name: str
    kind: str
    location: str | None = None
    check: str = ""
    reason: str = ""

    def __lt__(self, other: RewriteItem) -> bool:
        return _in_order(self) < _in_order(other)

    def describe(self) -> str:
        where = f" at {self.location}" if self.location else ""
        return f"{self.name} ({self.kind}){where}: {STATUS_LABELS[self.status]}"

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "status": self.status,
            "name": self.name,
            "kind": self.kind,
            "location": self.location,
            "check": self.check,
            "reason": self.reason,
        }


def _site(kernel: Kernel) -> tuple[str | None, str | None]:
    caller = getattr(kernel, "caller", None)
    return (str(kernel.location) if kernel.location else None, str(caller) if caller else None)


def _has_variant(kernel: Kernel, target: Census) -> bool:
    """A target-specific kernel at the same line, or called from the same place."""
    location, caller = _site(kernel)
    for other in target.in_layer("custom"):
        other_location, other_caller = _site(other)
        if location is not None and other_location == location:
            return True
        if caller is not None and other_caller == caller:
            return True
    return False


def rewrite_items(
    *,
    check: str,
    target: str,
    nvidia: Census | None,
    on_target: Census | None,
    target_error: str | None = None,
) -> list[RewriteItem]:
    """What moving ``check`` from the home platform to ``target`` needs, kernel by kernel:
    ``nvidia`` is the home platform's census (cuda's unless ``[tool.jaxport] home`` names
    another; the keyword predates ``home``).

    Every distinct custom kernel of the home census without a target-specific variant counts
    as one to rewrite: ``rewrite`` when the function does not lower on the target at all,
    ``fallback`` when the target runs generic code there instead (performance not
    guaranteed). Vendor dispatches of kinds with no counterpart elsewhere (e.g. cuDNN fused
    attention) are listed as ``vendor-gap``.
    """
    if nvidia is None:
        return []
    items: list[RewriteItem] = []
    seen: set[tuple[str, str | None]] = set()
    for kernel in nvidia.kernels:
        key = (kernel.name, str(kernel.location) if kernel.location else None)
        if key in seen:
            continue
        location = key[1]
        if kernel.layer == "custom":
            seen.add(key)
            if on_target is None:
                status: Status = "rewrite"
                reason = f"does not lower on {target}: {target_error or 'not lowered'}"
            elif _has_variant(kernel, on_target):
                continue
            else:
                status = "fallback"
                reason = f"{target} runs generic code here; no {target}-specific kernel"
        elif kernel.layer == "vendor" and not has_counterpart(kernel.kind):
            seen.add(key)
            status = "vendor-gap"
            reason = f"{kernel.library} {kernel.kind} has no counterpart on {target}"
        else:
            continue
        items.append(
            RewriteItem(
                target=target,
                status=status,
                name=kernel.name,
                kind=kernel.kind,
                location=location,
                check=check,
                reason=reason,
            )
        )
    return items


FormatCost = Literal["format_rewrite", "requantize", "precision_review", "layout_work"]

_FORMAT_COSTS: Mapping[str, FormatCost] = {
    "not-compiled": "format_rewrite",
    "emulated": "format_rewrite",
    "requantize": "requantize",
    "reduced-precision": "precision_review",
    "converted": "precision_review",
}
LAYOUT_WORK_FRACTION = 0.1
"""Tile padding priced as layout work from this share of the bytes an op moves (less is
noise next to the other costs of a move)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FormatItem:
    """One formats-and-layout finding a move to ``target`` has to deal with, priced by the
    cost model's ``cost`` key. Items sort as :class:`RewriteItem` does."""

    target: str
    cost: FormatCost
    rule: str
    effect: Effect
    location: str | None = None
    formats: tuple[str, ...] = ()
    check: str = ""

    def __lt__(self, other: FormatItem) -> bool:
        return _in_order(self) < _in_order(other)

    @property
    def name(self) -> str:
        """The rule (as :attr:`RewriteItem.name`: a hook written for kernels keeps working)."""
        return self.rule

    @property
    def kind(self) -> str:
        """The effect (``emulated``, ``requantize``...), as :attr:`RewriteItem.kind`."""
        return self.effect

    @property
    def status(self) -> str:
        """The cost key, as :attr:`RewriteItem.status`."""
        return self.cost

    @property
    def site(self) -> tuple[str, ...]:
        """What one price covers: a rule at a line for a format rewrite, the formats for a
        re-quantization (one per model, whatever its lines), a line otherwise."""
        if self.cost == "format_rewrite":
            return (self.cost, self.rule, self.location or "")
        if self.cost == "requantize":
            return (self.cost, *self.formats)
        return (self.cost, self.location or "")

    def describe(self) -> str:
        where = f" at {self.location}" if self.location else ""
        formats = f" ({', '.join(self.formats)})" if self.formats else ""
        return f"{self.rule}{formats}{where}: {self.cost.replace('_', ' ')}"

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "cost": self.cost,
            "rule": self.rule,
            "effect": self.effect,
            "location": self.location,
            "formats": list(self.formats),
            "check": self.check,
        }


def format_items(
    *,
    check: str,
    target: str,
    formats: FormatCensus | None,
    padding: FormatCensus | None = None,
) -> list[FormatItem]:
    """What the formats-and-layout findings of ``check`` on ``target`` (its configured
    device) cost a move there: the lines it emulates or cannot compile, the float8 formats
    to re-quantize, the dots it computes at a lower precision or converts, the convolutions
    it relays out and the arrays padded by a tenth or more (those of ``padding`` where given:
    the compiled program's, where the compiler laid it out)."""
    if formats is None:
        return []
    padded = padding if padding is not None else formats
    findings = [f for f in formats.findings if f.rule != "tile-padding"]
    findings += padded.by_rule("tile-padding")
    items = []
    for finding in findings:
        cost = _FORMAT_COSTS.get(finding.effect)
        if finding.rule == "convolution-relayout" or (
            finding.rule == "tile-padding" and finding.fraction >= LAYOUT_WORK_FRACTION
        ):
            cost = "layout_work"
        if cost is None:
            continue
        items.append(
            FormatItem(
                target=target,
                cost=cost,
                rule=finding.rule,
                effect=finding.effect,
                location=str(finding.location) if finding.location else None,
                formats=finding.formats if cost == "requantize" else (),
                check=check,
            )
        )
    return items


_GRAVITY: Mapping[str, int] = {"rewrite": 0, "vendor-gap": 1, "fallback": 2}
"""Which status a kernel site keeps when checks disagree: the lowest number wins."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CostModel:
    """Days per item; see the module docstring for the reasoning behind the defaults."""

    kernel_rewrite: float = 10.0
    fallback_validation: float = 3.0
    vendor_gap: float = 5.0
    tooling_assumption: float = 0.5
    fixed: float = 5.0
    format_rewrite: float = 3.0
    requantize: float = 2.0
    precision_review: float = 0.25
    layout_work: float = 0.5

    def days(self, status: Status) -> float:
        return {
            "rewrite": self.kernel_rewrite,
            "fallback": self.fallback_validation,
            "vendor-gap": self.vendor_gap,
        }[status]


FORMAT_COST_KEYS: tuple[FormatCost, ...] = (
    "format_rewrite",
    "requantize",
    "precision_review",
    "layout_work",
)
COST_KEYS = (
    "kernel_rewrite",
    "fallback_validation",
    "vendor_gap",
    "tooling_assumption",
    "fixed",
    *FORMAT_COST_KEYS,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RewriteEstimate:
    """Engineering days to move the suite's code to one target, with the breakdown."""

    target: str
    items: tuple[RewriteItem, ...]
    tooling_assumptions: int
    days: float
    breakdown: Mapping[str, float]
    format_items: tuple[FormatItem, ...] = ()
    """The formats-and-layout items priced, each distinct site once."""

    @property
    def kernels_to_rewrite(self) -> int:
        return len({(i.name, i.location) for i in self.items if i.status != "vendor-gap"})

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "kernels_to_rewrite": self.kernels_to_rewrite,
            "days": self.days,
            "breakdown": dict(self.breakdown),
            "items": [i.to_dict() for i in self.items],
            "tooling_assumptions": self.tooling_assumptions,
            **({"format_items": [i.to_dict() for i in self.format_items]}
               if self.format_items else {}),
        }  # fmt: skip


def estimate(
    target: str,
    items: Iterable[RewriteItem],
    *,
    model: CostModel,
    tooling_assumptions: int = 0,
    priced: Mapping[RewriteItem | FormatItem, float] | None = None,
    format_items: Iterable[FormatItem] = (),
) -> RewriteEstimate:
    """Days for ``target``: each kernel site priced once (``priced`` overrides the model),
    each formats-and-layout site once (:attr:`FormatItem.site`).

    A site (a kernel's name at one source line) has one status per target, the gravest
    any check gave it: a kernel that does not lower on the target in one check is a rewrite,
    even where another check's lowering falls back to generic code (the rewrite covers it).
    """
    distinct: dict[tuple[str, str | None], RewriteItem] = {}
    for item in items:
        site = (item.name, item.location)
        known = distinct.get(site)
        if known is None or _GRAVITY[item.status] < _GRAVITY[known.status]:
            distinct[site] = item
    unique = tuple(sorted(distinct.values()))
    breakdown = {"kernel_rewrite": 0.0, "fallback_validation": 0.0, "vendor_gap": 0.0}
    names = {"rewrite": "kernel_rewrite", "fallback": "fallback_validation",
             "vendor-gap": "vendor_gap"}  # fmt: skip
    for item in unique:
        cost = (priced or {}).get(item, model.days(item.status))
        breakdown[names[item.status]] += cost
    breakdown["tooling_assumption"] = tooling_assumptions * model.tooling_assumption
    breakdown["fixed"] = model.fixed  # CI runners, images, a first end-to-end validation
    sites: dict[tuple[str, ...], FormatItem] = {}
    for found in format_items:
        sites.setdefault(found.site, found)
    formats = tuple(sorted(sites.values()))
    if formats:  # the format and layout keys where there is something to price
        breakdown.update(dict.fromkeys(FORMAT_COST_KEYS, 0.0))
    for found in formats:
        breakdown[found.cost] += (priced or {}).get(found, getattr(model, found.cost))
    return RewriteEstimate(
        target=target,
        items=unique,
        tooling_assumptions=tooling_assumptions,
        days=sum(breakdown.values()),
        breakdown=breakdown,
        format_items=formats,
    )
