"""A report's summary as typed values (pure): the suite's counts (:class:`Summary`), each
platform's totals (:class:`PlatformTotals`), the three numbers (:class:`Numbers`: runtime
share, kernels to rewrite, days) and the tooling scan (:class:`Tooling`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, cast

from pytest_jaxport.model.cost import CostModel, FormatItem, RewriteEstimate, RewriteItem
from pytest_jaxport.model.counts import PlatformCounts
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.jsontypes import Json, as_json, put_optional
from pytest_jaxport.model.runtime_share import RuntimeShare
from pytest_jaxport.model.tooling import Assumption
from pytest_jaxport.report.entries import read_share
from pytest_jaxport.report.reader import Reader


@dataclass(frozen=True, slots=True, kw_only=True)
class PlatformTotals:
    """``summary.platforms.<platform>``: the checks' (or computations') counts summed
    (:class:`~pytest_jaxport.model.counts.PlatformCounts`) and the distinct sites."""

    vendor: int
    custom: int
    meta: int
    libraries: Mapping[str, int]
    lowered: int
    failed_to_lower: int
    needs_hardware: int | None = None
    compiled: int | None = None
    failed_to_compile: int | None = None
    xla: int | None = None
    collectives: Mapping[str, tuple[int, int]] | None = None
    format_findings: int | None = None
    layout_findings: int | None = None
    not_compiling: int | None = None
    padding_waste: float | None = None
    padding_bytes: float | None = None
    compiled_padding_waste: float | None = None
    compiled_padding_bytes: float | None = None
    relayouts: int | None = None
    relayout_bytes: float | None = None
    vendor_sites: int | None = None
    custom_sites: int | None = None
    format_sites: int | None = None
    layout_sites: int | None = None

    INTEGERS = ("needs_hardware", "compiled", "failed_to_compile", "xla", "format_findings",
                "layout_findings", "not_compiling", "relayouts", "vendor_sites", "custom_sites",
                "format_sites", "layout_sites")  # fmt: skip
    NUMBERS = ("padding_waste", "padding_bytes", "compiled_padding_waste",
               "compiled_padding_bytes", "relayout_bytes")  # fmt: skip

    @classmethod
    def read(cls, r: Reader) -> PlatformTotals:
        collectives = None
        if r.has("collectives"):
            collectives = {
                kind: (found.integer("count"), found.integer("inserted", 0))
                for kind, found in r.tables("collectives").items()
            }
        optional: dict[str, int | float | None] = {k: r.opt_integer(k) for k in cls.INTEGERS}
        optional.update({k: r.opt_number(k) for k in cls.NUMBERS})
        return cls(
            vendor=r.integer("vendor"),
            custom=r.integer("custom"),
            meta=r.integer("meta"),
            libraries=r.counts("libraries"),
            lowered=r.integer("lowered"),
            failed_to_lower=r.integer("failed_to_lower"),
            collectives=collectives,
            **optional,  # type: ignore[arg-type]
        )

    @classmethod
    def of(cls, counts: PlatformCounts, sites: Mapping[str, int]) -> PlatformTotals:
        """A platform's summed counts with its distinct ``sites`` per layer: ``vendor`` and
        ``custom`` always, ``format`` and ``layout`` where its findings were judged."""
        totals = cls(
            vendor=counts.vendor,
            custom=counts.custom,
            meta=counts.meta,
            libraries=dict(sorted(counts.libraries.items())),
            lowered=counts.lowered,
            failed_to_lower=counts.failed_to_lower,
            needs_hardware=counts.needs_hardware or None,
            compiled=counts.compiled,
            failed_to_compile=counts.failed_to_compile if counts.compiled is not None else None,
            xla=counts.xla,
            collectives=dict(counts.collectives) if counts.collectives else None,
            vendor_sites=sites["vendor"],
            custom_sites=sites["custom"],
        )
        found = counts.formats
        if found is None:
            return totals
        compiled = found.compiled_padding_bytes is not None
        return replace(
            totals,
            format_findings=found.format_findings,
            layout_findings=found.layout_findings,
            not_compiling=found.not_compiling,
            padding_waste=found.padding_waste,
            padding_bytes=found.padding_bytes,
            compiled_padding_waste=found.compiled_padding_waste if compiled else None,
            compiled_padding_bytes=found.compiled_padding_bytes,
            relayouts=found.relayouts,
            relayout_bytes=found.relayout_bytes if found.relayouts is not None else None,
            format_sites=sites["format"],
            layout_sites=sites["layout"],
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "vendor": self.vendor,
            "custom": self.custom,
            "meta": self.meta,
            "libraries": dict(self.libraries),
            "lowered": self.lowered,
            "failed_to_lower": self.failed_to_lower,
        }
        for key in ("needs_hardware", "compiled", "failed_to_compile", "xla"):
            put_optional(data, key, getattr(self, key))
        if self.collectives is not None:
            data["collectives"] = {
                kind: {"count": count, "inserted": inserted}
                for kind, (count, inserted) in self.collectives.items()
            }
        for key in ("format_findings", "layout_findings", "not_compiling", "padding_waste",
                    "padding_bytes", "compiled_padding_waste", "compiled_padding_bytes",
                    "relayouts", "relayout_bytes", "vendor_sites", "custom_sites",
                    "format_sites", "layout_sites"):  # fmt: skip
            put_optional(data, key, getattr(self, key))
        return data


def _read_item(r: Reader) -> RewriteItem:
    status = r.text("status")
    if status not in ("rewrite", "fallback", "vendor-gap"):
        raise r.error(r.at("status"), "rewrite, fallback or vendor-gap", status)
    return RewriteItem(
        target=r.text("target"),
        status=cast(Literal["rewrite", "fallback", "vendor-gap"], status),
        name=r.text("name"),
        kind=r.text("kind"),
        location=r.opt_text("location"),
        check=r.text("check", ""),
        reason=r.text("reason", ""),
    )


def _read_format_item(r: Reader) -> FormatItem:
    return FormatItem(
        target=r.text("target"),
        cost=cast(Literal["format_rewrite"], r.text("cost")),
        rule=r.text("rule"),
        effect=cast(Literal["converted"], r.text("effect")),
        location=r.opt_text("location"),
        formats=r.texts("formats", ()),
        check=r.text("check", ""),
    )


def _read_estimate(r: Reader) -> RewriteEstimate:
    r.integer("kernels_to_rewrite")
    return RewriteEstimate(
        target=r.text("target"),
        items=tuple(_read_item(i) for i in r.items("items", ())),
        tooling_assumptions=r.integer("tooling_assumptions"),
        days=r.number("days"),
        breakdown=r.numbers("breakdown"),
        format_items=tuple(_read_format_item(i) for i in r.items("format_items", ())),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Tooling:
    """The NVIDIA-bound tooling scan (``[tool.jaxport.scan]``)."""

    assumptions: tuple[Assumption, ...] = ()
    by_rule: Mapping[str, int] = field(default_factory=dict)
    files_listed: int = 0
    files_read: int = 0
    seconds: float | None = None
    source: str | None = None

    @classmethod
    def read(cls, r: Reader) -> Tooling:
        assumptions = []
        for a in r.items("assumptions", ()):
            for key in ("file", "rule", "reason", "text"):
                a.text(key)
            a.integer("line")
            assumptions.append(a.convert(Assumption.from_dict))
        return cls(
            assumptions=tuple(assumptions),
            by_rule=r.counts("by_rule", {}),
            files_listed=r.integer("files_listed", 0),
            files_read=r.integer("files_read", 0),
            seconds=r.opt_number("seconds"),
            source=r.opt_text("source"),
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "assumptions": [as_json(a.to_dict()) for a in self.assumptions],
            "by_rule": dict(self.by_rule),
            "files_listed": self.files_listed,
            "files_read": self.files_read,
        }
        data["source"] = self.source
        put_optional(data, "seconds", self.seconds)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Numbers:
    """The three numbers over a run's checks (or an audit's computations): per platform the
    runtime share, per target the kernels to rewrite and the days, with the estimates behind
    them, the cost model priced with and the tooling scan where there is one."""

    runtime_share: Mapping[str, RuntimeShare] = field(default_factory=dict)
    kernels_to_rewrite: Mapping[str, int] = field(default_factory=dict)
    rewrite_days: Mapping[str, float] = field(default_factory=dict)
    rewrite: Mapping[str, RewriteEstimate] = field(default_factory=dict)
    cost_model: CostModel | None = None
    tooling: Tooling | None = None
    not_lowered: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per ``migrate_to`` target without a count, the platforms (it, or the home platform)
    that no check lowered: it has no kernels to rewrite and no days, not 0."""

    KEYS = ("runtime_share", "kernels_to_rewrite", "rewrite_days", "rewrite", "cost_model",
            "tooling", "not_lowered")  # fmt: skip

    @classmethod
    def read(cls, r: Reader) -> Numbers | None:
        if not any(r.has(key) for key in cls.KEYS):
            return None
        tooling = r.opt_table("tooling")
        return cls(
            runtime_share={p: read_share(s) for p, s in r.tables("runtime_share", {}).items()},
            kernels_to_rewrite=r.counts("kernels_to_rewrite", {}),
            rewrite_days=r.numbers("rewrite_days", {}),
            rewrite={t: _read_estimate(e) for t, e in r.tables("rewrite", {}).items()},
            cost_model=read_cost(r.table("cost_model")) if r.has("cost_model") else None,
            tooling=Tooling.read(tooling) if tooling is not None else None,
            not_lowered={t: r.table("not_lowered").texts(t)
                         for t in r.table("not_lowered").data} if r.has("not_lowered") else {},
        )  # fmt: skip

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "runtime_share": {p: as_json(s.to_dict()) for p, s in self.runtime_share.items()},
            "kernels_to_rewrite": dict(self.kernels_to_rewrite),
            "rewrite_days": dict(self.rewrite_days),
            "rewrite": {t: as_json(e.to_dict()) for t, e in self.rewrite.items()},
        }
        if self.cost_model is not None:
            data["cost_model"] = cost_dict(self.cost_model)
        if self.not_lowered:
            data["not_lowered"] = {t: list(p) for t, p in self.not_lowered.items()}
        if self.tooling is not None:
            data["tooling"] = self.tooling.to_dict()
        return data


def read_cost(r: Reader) -> CostModel:
    """The cost model the numbers were priced with (the keys the report has)."""
    keys = [f for f in CostModel.__dataclass_fields__ if r.has(f)]
    return CostModel(**{key: r.number(key) for key in keys})


def cost_dict(model: CostModel) -> dict[str, Json]:
    """A cost model as the report writes it: every key."""
    return {key: getattr(model, key) for key in CostModel.__dataclass_fields__}


def read_hotspot(r: Reader, *, audit: bool = False) -> Hotspot:
    """A distinct site: the summary's, or (``audit``) the audit section's form of it."""
    return Hotspot(
        platform=r.text("platform"),
        location=r.opt_text("location"),
        layer=r.text("layer"),
        name=r.text("name"),
        kind=r.text("kind"),
        library=r.opt_text("library"),
        checks=r.integer("computations" if audit else "checks"),
        tests=r.integer("tests"),
        dispatches=r.integer("count" if audit else "dispatches"),
        seconds=r.opt_number("seconds"),
        share=r.opt_number("share"),
        basis=r.opt_text("basis"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """The suite's totals: tests, checks, outcomes, per platform the counts
    (:class:`PlatformTotals`), every distinct site (hotspots) and the three numbers."""

    tests: int
    checks: int
    failed_tests: int
    violations: int
    outcomes: Mapping[str, int]
    platforms: Mapping[str, PlatformTotals]
    hotspots: tuple[Hotspot, ...] = ()
    numbers: Numbers | None = None

    @classmethod
    def read(cls, r: Reader) -> Summary:
        return cls(
            tests=r.integer("tests"),
            checks=r.integer("checks"),
            failed_tests=r.integer("failed_tests"),
            violations=r.integer("violations"),
            outcomes=r.counts("outcomes"),
            platforms={p: PlatformTotals.read(t) for p, t in r.tables("platforms").items()},
            hotspots=tuple(read_hotspot(h) for h in r.items("hotspots")),
            numbers=Numbers.read(r),
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "tests": self.tests,
            "checks": self.checks,
            "failed_tests": self.failed_tests,
            "violations": self.violations,
            "outcomes": dict(self.outcomes),
            "platforms": {p: t.to_dict() for p, t in self.platforms.items()},
            "hotspots": [as_json(h.to_dict()) for h in self.hotspots],
        }
        if self.numbers is not None:
            data.update(self.numbers.to_dict())
        return data
