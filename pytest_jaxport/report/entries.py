"""A report's tests as typed values (pure): each :class:`TestEntry`, its checks
(:class:`Check`: a :class:`~pytest_jaxport.model.probe.Probe` with its saved outputs and
legs), violations, error and drifts, read from a report's JSON through the checked
:class:`~pytest_jaxport.report.reader.Reader`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.emulation import Emulation
from pytest_jaxport.model.findings import Finding, FormatCensus
from pytest_jaxport.model.jsontypes import Json, as_json, put_optional
from pytest_jaxport.model.memory import BREAKDOWN_KEYS, DeviceMemory
from pytest_jaxport.model.numerics import Comparison
from pytest_jaxport.model.probe import PlatformProbe, Probe, platform_from_dict
from pytest_jaxport.model.runtime_share import SHARE_LAYERS, RuntimeShare
from pytest_jaxport.report.reader import Reader

# -- a check's census, as the report stores it ------------------------------------------------


def _read_kernel(r: Reader) -> None:
    if r.trusted:
        return
    r.text("name")
    r.text("layer")
    r.opt_text("library")
    r.text("kind")
    r.integer("count", 1)
    r.opt_text("location")


def _read_finding(r: Reader) -> None:
    if r.trusted:
        return
    r.text("kind")
    r.text("rule")
    r.text("platform")
    r.text("level", "lowered")
    r.opt_text("location")
    r.integer("count", 1)
    r.text("effect", "converted")
    r.texts("formats", ())
    r.texts("ops", ())
    r.text("detail", "")
    r.flag("compiles", True)
    r.number("amount", 0.0)
    r.number("of", 0.0)
    r.convert(Finding.from_dict)


def _read_census(r: Reader) -> None:
    """A level's census (``lowered``, ``compiled``, ``what_if_no_vendor``)."""
    if r.trusted:
        return
    r.text("level", "lowered")
    for layer in ("vendor", "custom", "meta", "xla"):
        r.integer(layer)
    r.counts("xla_kinds", {})
    r.counts("libraries")
    for kernel in r.items("kernels"):
        _read_kernel(kernel)
    for found in r.tables("collectives", {}).values():
        found.integer("count")
        found.integer("inserted", 0)
        found.opt_text("library")
    formats = r.opt_table("formats")
    if formats is not None:
        formats.text("platform")
        formats.text("level", "lowered")
        device = formats.table("device")
        device.text("generation")
        device.text("name")
        for finding in formats.items("findings"):
            _read_finding(finding)
        formats.counts("formats", {})
        formats.number("tiled_bytes", 0.0)
        formats.convert(FormatCensus.from_dict)


def read_share(r: Reader) -> RuntimeShare:
    """A runtime share (a check's, a suite's): where its time goes, by layer and library."""
    r.text("basis")
    r.number("seconds")
    for layer in SHARE_LAYERS:
        r.number(layer, 0.0)
    r.numbers("libraries", {})
    r.opt_text("estimated_from")
    r.opt_number("error_points")
    r.opt_text("error_measured_on")
    r.opt_integer("checks")
    r.integer("left_out", 0)
    left_out = r.opt_table("left_out_share")
    if left_out is not None:
        read_share(left_out)
    return r.convert(RuntimeShare.from_dict)


def _read_comparison(r: Reader) -> None:
    if r.trusted:
        return
    r.text("platform")
    r.text("reference")
    r.integer("leaves")
    r.flag("ok", True)
    for mismatch in r.items("mismatches"):
        mismatch.text("path")
        mismatch.text("reason")
        mismatch.text("message")
    r.convert(Comparison.from_dict)


def read_platform(platform: str, r: Reader) -> PlatformProbe:
    """A check's (or an audited computation's) entry for one platform."""
    r.flag("present")
    for level in ("lowered", "compiled", "what_if_no_vendor"):
        census = r.opt_table(level)
        if census is not None:
            _read_census(census)
    compiled = r.opt_table("compiled")
    if compiled is not None:
        compiled.flag("deviceless", False)
        compiled.opt_text("target")
    for key in ("error", "compile_error", "execution_error", "needs_hardware"):
        r.opt_text(key)
    r.flag("executed", False)
    for key in ("numerics", "emulated_numerics", "emulated_bounds"):
        numerics = r.opt_table(key)
        if numerics is not None:
            _read_comparison(numerics)
    share = r.opt_table("runtime_share")
    if share is not None:
        read_share(share)
    emulated = r.opt_table("emulated")
    if emulated is not None:
        emulated.text("platform")
        emulated.opt_text("dot_format")
        emulated.integer("pinned", 0)
        emulated.opt_text("error")
        emulated.convert(Emulation.from_dict)
    r.texts("lowering_warnings", ())
    memory = r.opt_table("memory")
    if memory is not None:
        read_memory(platform, memory)
    return r.convert(lambda data: platform_from_dict(platform, data))


def read_memory(platform: str, r: Reader) -> DeviceMemory:
    """A check's memory on one platform (``platforms.<p>.memory``): the compiler's plan
    against the device's capacity, or ``not compiled``."""
    r.text("level")
    for key in ("device", "generation", "slice", "per", "capacity_source"):
        r.text(key, "")
    r.integer("devices", 1)
    r.flag("deviceless", False)
    for key in ("peak_bytes", "capacity_bytes"):
        r.opt_integer(key)
    fits = r.json("fits", None)
    if fits is not None and not isinstance(fits, bool):
        raise r.error(r.at("fits"), "true, false or null", fits)
    breakdown = r.opt_table("breakdown")
    if breakdown is not None:
        for key in BREAKDOWN_KEYS.values():
            breakdown.integer(key, 0)
    refused = r.opt_table("out_of_memory")
    if refused is not None:
        refused.integer("needs_bytes")
        refused.opt_integer("available_bytes")
        for key in ("needs", "available", "memory_space", "said"):
            refused.text(key, "")
    r.opt_text("reason")
    return r.convert(lambda data: DeviceMemory.from_dict(platform, data))


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    """What a platform entry of a check carries beside its probe: its saved outputs
    (``--jaxport-save-outputs``) and, in a merged report, the legs it came from."""

    outputs: str | None = None
    emulated_outputs: str | None = None
    leg: str | None = None
    emulated_leg: str | None = None

    KEYS = ("outputs", "emulated_outputs", "leg", "emulated_leg")

    @property
    def empty(self) -> bool:
        return all(getattr(self, key) is None for key in self.KEYS)

    @classmethod
    def read(cls, r: Reader) -> Provenance:
        return cls(**{key: r.opt_text(key) for key in cls.KEYS})


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One ``jaxport.check`` of a test: its :class:`~pytest_jaxport.model.probe.Probe`, the
    marker's ``rtol``/``atol`` where set, and per platform its saved outputs and legs."""

    probe: Probe
    tolerance: Mapping[str, float] | None = None
    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    reference_leg: str | None = None
    """In a merged report: the leg whose reference outputs the others were compared with."""

    @property
    def name(self) -> str:
        return self.probe.name

    @classmethod
    def read(cls, r: Reader) -> Check:
        r.text("name")
        r.text("reference")
        for key in ("note", "variant_of", "transform"):
            r.opt_text(key)
        entries = r.tables("platforms")
        platforms = {p: read_platform(p, e) for p, e in entries.items()}
        untraced = r.opt_table("untraced")
        if untraced is not None:
            for key in ("platform", "needs", "error"):
                untraced.text(key)
        not_compared = r.opt_table("not_compared")
        if not_compared is not None:
            not_compared.text("reason")
            not_compared.texts("arguments", ())
        probe = r.convert(lambda data: Probe.from_dict({**data, "platforms": {}}))
        tolerance = r.numbers("tolerance") if r.opt_table("tolerance") is not None else None
        provenance = {p: Provenance.read(e) for p, e in entries.items()}
        return cls(
            probe=Probe(
                name=probe.name,
                reference=probe.reference,
                platforms=platforms,
                note=probe.note,
                variant_of=probe.variant_of,
                transform=probe.transform,
                untraced=probe.untraced,
                not_compared=probe.not_compared,
            ),
            tolerance=tolerance,
            provenance={p: v for p, v in provenance.items() if not v.empty},
            reference_leg=r.opt_text("reference_leg"),
        )

    def to_dict(self) -> dict[str, Json]:
        data = cast("dict[str, Json]", self.probe.to_dict())
        for platform, provenance in self.provenance.items():
            entry = cast("dict[str, Json]", cast("dict[str, Json]", data["platforms"])[platform])
            for key in Provenance.KEYS:
                put_optional(entry, key, getattr(provenance, key))
        if self.tolerance is not None:
            data["tolerance"] = dict(self.tolerance)
        put_optional(data, "reference_leg", self.reference_leg)
        return data


def read_violation(r: Reader) -> Violation:
    """A broken budget limit, its kernels, details and findings checked."""
    for key in ("check", "platform", "key", "origin", "what"):
        r.text(key)
    r.json("limit")
    found = r.json("found")
    # null: a limit on what was never counted (a target no check lowered)
    if found is not None and (not isinstance(found, int | float | str) or isinstance(found, bool)):
        raise r.error(r.at("found"), "a number or a string", found)
    r.text("level", "lowered")
    for kernel in r.items("kernels", ()):
        _read_kernel(kernel)
    r.texts("details", ())
    for finding in r.items("findings", ()):
        _read_finding(finding)
    return r.convert(Violation.from_dict)


OUTCOMES = ("passed", "failed", "error", "skipped")

ERROR_LIMIT = 500
"""Characters of a failed test's error kept in the report."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TestError:
    """Why a test failed or errored other than by its budget."""

    __test__ = False  # a record, not a test class for pytest to collect

    message: str
    where: str | None = None
    """``path:line`` of the exception, relative to the rootdir where it is inside it."""
    when: str = "call"

    def to_dict(self) -> dict[str, Json]:
        return {"message": self.message[:ERROR_LIMIT], "where": self.where, "when": self.when}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TestError:
        where = data.get("where")
        return cls(
            message=str(data.get("message", "")),
            where=None if where is None else str(where),
            when=str(data.get("when", "call")),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Drift:
    """A check whose outputs on one leg's platform differ from the reference's."""

    nodeid: str
    check: str
    platform: str
    leg: str
    reference: str
    reference_leg: str
    messages: tuple[str, ...]

    def to_dict(self) -> dict[str, Json]:
        return {
            "nodeid": self.nodeid,
            "check": self.check,
            "platform": self.platform,
            "leg": self.leg,
            "reference": self.reference,
            "reference_leg": self.reference_leg,
            "messages": list(self.messages),
        }

    @classmethod
    def read(cls, r: Reader, nodeid: str = "") -> Drift:
        return cls(
            nodeid=r.text("nodeid", nodeid),
            check=r.text("check"),
            platform=r.text("platform"),
            leg=r.text("leg"),
            reference=r.text("reference"),
            reference_leg=r.text("reference_leg"),
            messages=r.texts("messages"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TestEntry:
    """One test of the report: its outcome, checks and what failed it."""

    __test__ = False  # a record, not a test class for pytest to collect

    nodeid: str
    outcome: str
    checks: tuple[Check, ...] = ()
    violations: tuple[Violation, ...] = ()
    error: TestError | None = None
    outputs_errors: tuple[str, ...] = ()
    baseline_growth: tuple[str, ...] = ()
    baseline_news: tuple[str, ...] = ()
    crashed: bool = False
    drifts: tuple[Drift, ...] = ()
    legs: Mapping[str, str] | None = None
    """In a merged report: each leg's outcome of the test."""
    violation_legs: tuple[str | None, ...] = ()
    """In a merged report: the leg each of :attr:`violations` came from (``()`` where none
    says)."""

    @classmethod
    def read(cls, r: Reader) -> TestEntry:
        outcome = r.text("outcome")
        if outcome not in OUTCOMES:
            raise r.error(r.at("outcome"), f"one of {', '.join(OUTCOMES)}", outcome)
        error = r.opt_table("error")
        nodeid = r.text("nodeid")
        legs = tuple(v.opt_text("leg") for v in r.items("violations", ()))
        return cls(
            nodeid=nodeid,
            outcome=outcome,
            checks=tuple(Check.read(c) for c in r.items("checks", ())),
            violations=tuple(read_violation(v) for v in r.items("violations", ())),
            error=None
            if error is None
            else TestError(
                message=error.text("message"),
                where=error.opt_text("where"),
                when=error.text("when", "call"),
            ),
            outputs_errors=r.texts("outputs_errors", ()),
            baseline_growth=r.texts("baseline_growth", ()),
            baseline_news=r.texts("baseline_news", ()),
            crashed=r.flag("crashed", False),
            drifts=tuple(Drift.read(d) for d in r.items("drifts", ())),
            legs=r.strings("legs") if r.has("legs") else None,
            violation_legs=legs if any(leg is not None for leg in legs) else (),
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {"nodeid": self.nodeid, "outcome": self.outcome}
        if self.legs is not None:
            data["legs"] = dict(self.legs)
        violations = []
        for i, violation in enumerate(self.violations):
            said = cast("dict[str, Json]", violation.to_dict())
            if i < len(self.violation_legs):
                put_optional(said, "leg", self.violation_legs[i])
            violations.append(said)
        data["checks"] = [c.to_dict() for c in self.checks]
        data["violations"] = cast(Json, violations)
        if self.error is not None:
            data["error"] = as_json(self.error.to_dict())
        for key in ("outputs_errors", "baseline_growth", "baseline_news"):
            if getattr(self, key):
                data[key] = list(getattr(self, key))
        if self.crashed:
            data["crashed"] = True
        if self.drifts:
            data["drifts"] = [d.to_dict() for d in self.drifts]
        return data
