"""The report as typed values (pure): :class:`Report` and its parts, read from JSON once.

:func:`read_report` checks a report's JSON (schema version :data:`SCHEMA_VERSION`, upgraded
before where older) field by field through one small typed reader, :class:`_Reader`, which
knows the place it reads (``tests[3].checks[0].platforms.cuda.lowered.vendor``): a wrong
type or a missing field is a :class:`ReportError` naming the file and that place. From there
on a report is typed. :meth:`Report.to_dict` is the JSON the plugin writes, so reading a
report and writing it again gives the same JSON.

The parts reuse the domain's types where they already are values with a JSON form:
:class:`~pytest_jaxport.model.probe.Probe` (a check, and an audited computation's platforms),
:class:`~pytest_jaxport.model.budget.Violation`,
:class:`~pytest_jaxport.model.hotspots.Hotspot`,
:class:`~pytest_jaxport.model.runtime_share.RuntimeShare` and
:class:`~pytest_jaxport.model.cost.RewriteEstimate`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar, cast, get_args

from pytest_jaxport.model.budget import Violation
from pytest_jaxport.model.cost import CostModel, FormatItem, RewriteEstimate, RewriteItem
from pytest_jaxport.model.emulation import Emulation
from pytest_jaxport.model.findings import Finding, FormatCensus
from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.jsontypes import Json
from pytest_jaxport.model.numerics import Comparison
from pytest_jaxport.model.platforms import DEFAULT_HOME
from pytest_jaxport.model.probe import PlatformProbe, Probe, platform_from_dict, platform_to_dict
from pytest_jaxport.model.runtime_share import SHARE_LAYERS, RuntimeShare
from pytest_jaxport.model.tooling import Assumption

SCHEMA_VERSION = 2
TOOL_NAME = "pytest-jaxport"

_T = TypeVar("_T")


class ReportError(ValueError):
    """A report file cannot be used; the message names the file and what is wrong."""


# -- the reader -------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_MISSING = object()


def _shown(value: object) -> str:
    """A found value as the message quotes it (JSON, cut at 40 characters)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Reader:
    """One JSON object of a report, read at a known place: each accessor checks the type of
    the field it returns, or raises a :class:`ReportError` naming the file and the place
    (``tests[3].outcome: expected a string, found 3``).

    A ``trusted`` reader reads what this package has just built (the session's report, a
    merge): the same typed values, without checking each field's type again."""

    __slots__ = ("data", "file", "place", "trusted")

    def __init__(self, data: object, *, file: str, place: str = "", trusted: bool = False) -> None:
        self.file = file
        self.place = place
        self.trusted = trusted
        if not isinstance(data, Mapping):
            raise self.error(place, "a table", data)
        self.data: Mapping[str, object] = data

    def at(self, key: str) -> str:
        """The place of ``key`` in this object."""
        part = key if _NAME.match(key) else json.dumps(key)
        if not self.place:
            return part
        return f"{self.place}.{part}" if _NAME.match(key) else f"{self.place}[{part}]"

    def _inner(self, key: str) -> str:
        """The place of an object inside this one (a trusted reader's: where it is, for
        speed; it is said only where this package built a report wrongly)."""
        return f"{self.place}.{key}" if self.trusted else self.at(key)

    def error(self, place: str, expected: str, found: object) -> ReportError:
        where = f"{place}: " if place else ""
        return ReportError(f"{self.file}: {where}expected {expected}, found {_shown(found)}")

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str, expected: str) -> object:
        if key not in self.data:
            raise ReportError(f"{self.file}: {self.at(key)}: missing (expected {expected})")
        return self.data[key]

    def _typed(
        self, key: str, expected: str, ok: Callable[[object], bool], default: object
    ) -> object:
        if default is not _MISSING and key not in self.data:
            return default
        value = self._get(key, expected)
        if not self.trusted and not ok(value):
            raise self.error(self.at(key), expected, value)
        return value

    def text(self, key: str, default: object = _MISSING) -> str:
        return cast(str, self._typed(key, "a string", _is_text, default))

    def opt_text(self, key: str) -> str | None:
        """A string or ``null`` (absent reads as ``null``)."""
        return cast("str | None", self._typed(key, "a string or null", _opt(_is_text), None))

    def integer(self, key: str, default: object = _MISSING) -> int:
        return cast(int, self._typed(key, "an integer", _is_int, default))

    def opt_integer(self, key: str) -> int | None:
        return cast("int | None", self._typed(key, "an integer or null", _opt(_is_int), None))

    def number(self, key: str, default: object = _MISSING) -> float:
        return cast(float, self._typed(key, "a number", _is_number, default))

    def opt_number(self, key: str) -> float | None:
        return cast("float | None", self._typed(key, "a number or null", _opt(_is_number), None))

    def flag(self, key: str, default: object = _MISSING) -> bool:
        return cast(bool, self._typed(key, "true or false", _is_bool, default))

    def texts(self, key: str, default: object = _MISSING) -> tuple[str, ...]:
        found = self._typed(key, "a list of strings", _is_list, default)
        if found is default and default is not _MISSING:
            return cast("tuple[str, ...]", default)
        values = cast("list[object]", found)
        for i, value in enumerate(() if self.trusted else values):
            if not _is_text(value):
                raise self.error(f"{self.at(key)}[{i}]", "a string", value)
        return tuple(cast("list[str]", values))

    def json(self, key: str, default: object = _MISSING) -> Json:
        """Any JSON value (what the report keeps as written: a configuration table)."""
        return cast(Json, self._typed(key, "a value", lambda _: True, default))

    def present(self, key: str) -> bool:
        """Whether ``key`` is there and not ``null``."""
        return self.data.get(key) is not None

    def table(self, key: str) -> _Reader:
        value = self._get(key, "a table")
        return _Reader(value, file=self.file, place=self._inner(key), trusted=self.trusted)

    def opt_table(self, key: str) -> _Reader | None:
        value = self.data.get(key)
        return None if value is None else self.table(key)

    def items(self, key: str, default: object = _MISSING) -> list[_Reader]:
        """A list of tables (absent: ``[]`` where ``default`` is given)."""
        if default is not _MISSING and self.data.get(key) is None:
            return []
        values = self._get(key, "a list")
        if not isinstance(values, list):
            raise self.error(self.at(key), "a list", values)
        return [
            _Reader(v, file=self.file, place=f"{self._inner(key)}[{i}]", trusted=self.trusted)
            for i, v in enumerate(values)
        ]

    def tables(self, key: str, default: object = _MISSING) -> dict[str, _Reader]:
        """A table of tables, by name (absent: ``{}`` where ``default`` is given)."""
        if default is not _MISSING and self.data.get(key) is None:
            return {}
        inner = self.table(key)
        return {name: inner.table(name) for name in inner.data}

    def counts(self, key: str, default: object = _MISSING) -> dict[str, int]:
        """A table of integers (absent: ``{}`` where ``default`` is given)."""
        if default is not _MISSING and self.data.get(key) is None:
            return {}
        inner = self.table(key)
        return {name: inner.integer(name) for name in inner.data}

    def numbers(self, key: str, default: object = _MISSING) -> dict[str, float]:
        if default is not _MISSING and self.data.get(key) is None:
            return {}
        inner = self.table(key)
        return {name: inner.number(name) for name in inner.data}

    def strings(self, key: str) -> dict[str, str]:
        inner = self.table(key)
        return {name: inner.text(name) for name in inner.data}

    def convert(self, make: Callable[[Mapping[str, object]], _T]) -> _T:
        """This object through a domain type's ``from_dict`` (after its fields were read):
        what that still refuses is said at this place."""
        try:
            return make(self.data)
        except (KeyError, TypeError, ValueError, AttributeError, AssertionError) as e:
            what = f"{type(e).__name__}: {e}"
            raise ReportError(
                f"{self.file}: {self.place or 'report'}: malformed ({what})"
            ) from None


def _is_text(value: object) -> bool:
    return isinstance(value, str)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


def _is_list(value: object) -> bool:
    return isinstance(value, list)


def _opt(ok: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or ok(value)


def _put(data: dict[str, Json], key: str, value: Json) -> None:
    """An optional key: written only where it has a value."""
    if value is not None:
        data[key] = value


def _json(value: object) -> Json:
    """A domain type's ``to_dict`` (typed loosely there) as JSON."""
    return cast(Json, value)


# -- a check's census, as the report stores it ------------------------------------------------


def _read_kernel(r: _Reader) -> None:
    if r.trusted:
        return
    r.text("name")
    r.text("layer")
    r.opt_text("library")
    r.text("kind")
    r.integer("count", 1)
    r.opt_text("location")


def _read_finding(r: _Reader) -> None:
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


def _read_census(r: _Reader) -> None:
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


def _read_share(r: _Reader) -> RuntimeShare:
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
        _read_share(left_out)
    return r.convert(RuntimeShare.from_dict)


def _read_comparison(r: _Reader) -> None:
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


def _read_platform(platform: str, r: _Reader) -> PlatformProbe:
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
        _read_share(share)
    emulated = r.opt_table("emulated")
    if emulated is not None:
        emulated.text("platform")
        emulated.opt_text("dot_format")
        emulated.integer("pinned", 0)
        emulated.opt_text("error")
        emulated.convert(Emulation.from_dict)
    r.texts("lowering_warnings", ())
    return r.convert(lambda data: platform_from_dict(platform, data))


# -- the report's parts -----------------------------------------------------------------------


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
    def read(cls, r: _Reader) -> Provenance:
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
    def read(cls, r: _Reader) -> Check:
        r.text("name")
        r.text("reference")
        for key in ("note", "variant_of", "transform"):
            r.opt_text(key)
        entries = r.tables("platforms")
        platforms = {p: _read_platform(p, e) for p, e in entries.items()}
        untraced = r.opt_table("untraced")
        if untraced is not None:
            for key in ("platform", "needs", "error"):
                untraced.text(key)
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
                _put(entry, key, getattr(provenance, key))
        if self.tolerance is not None:
            data["tolerance"] = dict(self.tolerance)
        _put(data, "reference_leg", self.reference_leg)
        return data


def _read_violation(r: _Reader) -> Violation:
    for key in ("check", "platform", "key", "origin", "what"):
        r.text(key)
    r.json("limit")
    found = r.json("found")
    if not isinstance(found, int | float | str) or isinstance(found, bool):
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
    def read(cls, r: _Reader, nodeid: str = "") -> Drift:
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
    """In a merged report: the leg each of :attr:`violations` came from."""

    @classmethod
    def read(cls, r: _Reader) -> TestEntry:
        outcome = r.text("outcome")
        if outcome not in OUTCOMES:
            raise r.error(r.at("outcome"), f"one of {', '.join(OUTCOMES)}", outcome)
        error = r.opt_table("error")
        nodeid = r.text("nodeid")
        return cls(
            nodeid=nodeid,
            outcome=outcome,
            checks=tuple(Check.read(c) for c in r.items("checks", ())),
            violations=tuple(_read_violation(v) for v in r.items("violations", ())),
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
            violation_legs=tuple(v.opt_text("leg") for v in r.items("violations", ())),
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {"nodeid": self.nodeid, "outcome": self.outcome}
        if self.legs is not None:
            data["legs"] = dict(self.legs)
        violations = []
        for i, violation in enumerate(self.violations):
            said = cast("dict[str, Json]", violation.to_dict())
            if i < len(self.violation_legs):
                _put(said, "leg", self.violation_legs[i])
            violations.append(said)
        data["checks"] = [c.to_dict() for c in self.checks]
        data["violations"] = cast(Json, violations)
        if self.error is not None:
            data["error"] = _json(self.error.to_dict())
        for key in ("outputs_errors", "baseline_growth", "baseline_news"):
            if getattr(self, key):
                data[key] = list(getattr(self, key))
        if self.crashed:
            data["crashed"] = True
        if self.drifts:
            data["drifts"] = [d.to_dict() for d in self.drifts]
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    """Where the run ran: library versions, Python, the machine, the platforms present,
    executed and emulated, and each present platform's device kind."""

    versions: Mapping[str, str] = field(default_factory=dict)
    """``jax``, ``jaxlib`` and the other versions the run recorded, by name."""
    python: str | None = None
    machine: str | None = None
    present_platforms: tuple[str, ...] = ()
    device_kinds: Mapping[str, str] | None = None
    executed_platforms: tuple[str, ...] | None = None
    emulated_platforms: tuple[str, ...] | None = None

    FACTS = ("python", "machine", "present_platforms", "device_kinds", "executed_platforms",
             "emulated_platforms")  # fmt: skip

    @classmethod
    def read(cls, r: _Reader) -> Environment:
        versions = {k: r.text(k) for k in r.data if k not in cls.FACTS}
        return cls(
            versions=versions,
            python=r.opt_text("python"),
            machine=r.opt_text("machine"),
            present_platforms=r.texts("present_platforms", ()),
            device_kinds=r.strings("device_kinds") if r.has("device_kinds") else None,
            executed_platforms=r.texts("executed_platforms")
            if r.has("executed_platforms")
            else None,
            emulated_platforms=r.texts("emulated_platforms")
            if r.has("emulated_platforms")
            else None,
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = dict(self.versions)
        _put(data, "python", self.python)
        _put(data, "machine", self.machine)
        data["present_platforms"] = list(self.present_platforms)
        if self.device_kinds is not None:
            data["device_kinds"] = dict(self.device_kinds)
        for key in ("executed_platforms", "emulated_platforms"):
            value = getattr(self, key)
            if value is not None:
                data[key] = list(value)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """The device a platform's format and layout findings were judged for."""

    generation: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """What the run was configured with (``[tool.jaxport]``); ``budget`` and ``tolerance``
    are the project's tables as written, so ``jaxport merge`` can refuse legs that differ."""

    platforms: tuple[str, ...]
    reference: str
    source: str | None = None
    """The configuration file (``pyproject.toml``)."""
    compile: tuple[str, ...] | None = None
    target: str | None = None
    devices: Mapping[str, Device] | None = None
    budget: Mapping[str, Json] | None = None
    tolerance: Mapping[str, Json] | None = None
    emulate: tuple[str, ...] | None = None
    migrate_to: tuple[str, ...] | None = None
    home: str | None = None
    """``[tool.jaxport] home`` as the run used it; ``None`` in a report written before
    reports stated it (then moving was measured off cuda: :attr:`home_platform`)."""
    written_null: frozenset[str] = frozenset()
    """The optional keys the report holds as ``null`` (``jaxport merge`` writes ``target``
    and ``devices`` so where no leg set them), kept so it reads back as written."""

    OPTIONAL = ("source", "compile", "target", "devices", "budget", "tolerance", "emulate",
                "migrate_to", "home")  # fmt: skip

    @property
    def home_platform(self) -> str:
        """The platform moving was measured from: :attr:`home`, cuda where the report does
        not say."""
        return self.home if self.home is not None else DEFAULT_HOME

    @classmethod
    def read(cls, r: _Reader) -> Config:
        budget = r.opt_table("budget")
        tolerance = r.opt_table("tolerance")
        return cls(
            source=r.opt_text("source"),
            platforms=r.texts("platforms"),
            reference=r.text("reference"),
            compile=r.texts("compile") if r.present("compile") else None,
            target=r.opt_text("target"),
            devices={
                p: Device(generation=d.text("generation"), name=d.text("name"))
                for p, d in r.tables("devices").items()
            }
            if r.opt_table("devices") is not None
            else None,
            budget=dict(cast("Mapping[str, Json]", budget.data)) if budget else None,
            tolerance=dict(cast("Mapping[str, Json]", tolerance.data)) if tolerance else None,
            emulate=r.texts("emulate") if r.present("emulate") else None,
            migrate_to=r.texts("migrate_to") if r.present("migrate_to") else None,
            home=r.opt_text("home"),
            written_null=frozenset(k for k in cls.OPTIONAL if r.has(k) and r.data[k] is None),
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {}
        _put(data, "source", self.source)
        data["platforms"] = list(self.platforms)
        data["reference"] = self.reference
        if self.compile is not None:  # the session writes both, target null unless cuda
            data["compile"] = list(self.compile)
            data["target"] = self.target
        else:
            _put(data, "target", self.target)
        if self.devices is not None:
            data["devices"] = {
                p: {"generation": d.generation, "name": d.name} for p, d in self.devices.items()
            }
        for key in ("budget", "tolerance"):
            value = getattr(self, key)
            if value is not None:
                data[key] = dict(value)
        for key in ("emulate", "migrate_to"):
            value = getattr(self, key)
            if value is not None:
                data[key] = list(value)
        _put(data, "home", self.home)
        for key in self.OPTIONAL:
            if key in self.written_null and data.get(key) is None:
                data[key] = None
        return data


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
    def read(cls, r: _Reader) -> PlatformTotals:
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
    def of(cls, data: Mapping[str, object]) -> PlatformTotals:
        """From :meth:`PlatformCounts.to_dict` and the site counts (already checked)."""
        return cls.read(_Reader(data, file="<built>"))

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
            _put(data, key, getattr(self, key))
        if self.collectives is not None:
            data["collectives"] = {
                kind: {"count": count, "inserted": inserted}
                for kind, (count, inserted) in self.collectives.items()
            }
        for key in ("format_findings", "layout_findings", "not_compiling", "padding_waste",
                    "padding_bytes", "compiled_padding_waste", "compiled_padding_bytes",
                    "relayouts", "relayout_bytes", "vendor_sites", "custom_sites",
                    "format_sites", "layout_sites"):  # fmt: skip
            _put(data, key, getattr(self, key))
        return data


def _read_item(r: _Reader) -> RewriteItem:
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


def _read_format_item(r: _Reader) -> FormatItem:
    return FormatItem(
        target=r.text("target"),
        cost=cast(Literal["format_rewrite"], r.text("cost")),
        rule=r.text("rule"),
        effect=cast(Literal["converted"], r.text("effect")),
        location=r.opt_text("location"),
        formats=r.texts("formats", ()),
        check=r.text("check", ""),
    )


def _read_estimate(r: _Reader) -> RewriteEstimate:
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
    def read(cls, r: _Reader) -> Tooling:
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
            "assumptions": [_json(a.to_dict()) for a in self.assumptions],
            "by_rule": dict(self.by_rule),
            "files_listed": self.files_listed,
            "files_read": self.files_read,
        }
        data["source"] = self.source
        _put(data, "seconds", self.seconds)
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
    def read(cls, r: _Reader) -> Numbers | None:
        if not any(r.has(key) for key in cls.KEYS):
            return None
        tooling = r.opt_table("tooling")
        return cls(
            runtime_share={p: _read_share(s) for p, s in r.tables("runtime_share", {}).items()},
            kernels_to_rewrite=r.counts("kernels_to_rewrite", {}),
            rewrite_days=r.numbers("rewrite_days", {}),
            rewrite={t: _read_estimate(e) for t, e in r.tables("rewrite", {}).items()},
            cost_model=_read_cost(r.table("cost_model")) if r.has("cost_model") else None,
            tooling=Tooling.read(tooling) if tooling is not None else None,
            not_lowered={t: r.table("not_lowered").texts(t)
                         for t in r.table("not_lowered").data} if r.has("not_lowered") else {},
        )  # fmt: skip

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "runtime_share": {p: _json(s.to_dict()) for p, s in self.runtime_share.items()},
            "kernels_to_rewrite": dict(self.kernels_to_rewrite),
            "rewrite_days": dict(self.rewrite_days),
            "rewrite": {t: _json(e.to_dict()) for t, e in self.rewrite.items()},
        }
        if self.cost_model is not None:
            data["cost_model"] = _cost_dict(self.cost_model)
        if self.not_lowered:
            data["not_lowered"] = {t: list(p) for t, p in self.not_lowered.items()}
        if self.tooling is not None:
            data["tooling"] = self.tooling.to_dict()
        return data


def _read_cost(r: _Reader) -> CostModel:
    keys = [f for f in CostModel.__dataclass_fields__ if r.has(f)]
    return CostModel(**{key: r.number(key) for key in keys})


def _cost_dict(model: CostModel) -> dict[str, Json]:
    return {key: getattr(model, key) for key in CostModel.__dataclass_fields__}


def _read_hotspot(r: _Reader, *, audit: bool = False) -> Hotspot:
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
    def read(cls, r: _Reader) -> Summary:
        return cls(
            tests=r.integer("tests"),
            checks=r.integer("checks"),
            failed_tests=r.integer("failed_tests"),
            violations=r.integer("violations"),
            outcomes=r.counts("outcomes"),
            platforms={p: PlatformTotals.read(t) for p, t in r.tables("platforms").items()},
            hotspots=tuple(_read_hotspot(h) for h in r.items("hotspots")),
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
            "hotspots": [_json(h.to_dict()) for h in self.hotspots],
        }
        if self.numbers is not None:
            data.update(self.numbers.to_dict())
        return data


# -- the audit section ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFinding:
    """A computation that could not be lowered for a platform, and why."""

    computation: str
    function: str
    platform: str
    kind: str
    reason: str

    @classmethod
    def read(cls, r: _Reader) -> AuditFinding:
        return cls(**{key: r.text(key) for key in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Json]:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True, kw_only=True)
class Computation:
    """One distinct computation the audit saw: what it is, who ran it, and per platform the
    same entry a check has (:class:`~pytest_jaxport.model.probe.PlatformProbe`)."""

    id: str
    function: str
    source: str | None
    kind: str
    signature: tuple[str, ...]
    shardings: tuple[str, ...] | None = None
    static_arguments: str | None = None
    donated: tuple[int, ...] | None = None
    mesh: str | None = None
    host_callbacks: tuple[str, ...] | None = None
    partitions: int = 1
    owner: str | None = None
    users: tuple[str, ...] = ()
    outside_tests: bool = False
    findings: tuple[Mapping[str, str], ...] | None = None
    platforms: Mapping[str, PlatformProbe] = field(default_factory=dict)

    @classmethod
    def read(cls, r: _Reader) -> Computation:
        kind = r.text("kind")
        if kind not in ("jit", "eager"):
            raise r.error(r.at("kind"), "jit or eager", kind)
        donated = None
        if r.has("donated"):
            values = r.json("donated")
            if not isinstance(values, list) or not all(_is_int(v) for v in values):
                raise r.error(r.at("donated"), "a list of integers", values)
            donated = tuple(cast("list[int]", values))
        findings = None
        if r.has("findings"):
            findings = tuple(
                {k: f.text(k) for k in ("platform", "kind", "reason")} for f in r.items("findings")
            )
        return cls(
            id=r.text("id"),
            function=r.text("function"),
            source=r.opt_text("source"),
            kind=kind,
            signature=r.texts("signature"),
            shardings=r.texts("shardings") if r.has("shardings") else None,
            static_arguments=r.opt_text("static_arguments"),
            donated=donated,
            mesh=r.opt_text("mesh"),
            host_callbacks=r.texts("host_callbacks") if r.has("host_callbacks") else None,
            partitions=r.integer("partitions", 1),
            owner=r.opt_text("owner"),
            users=r.texts("users", ()),
            outside_tests=r.flag("outside_tests", False),
            findings=findings,
            platforms={p: _read_platform(p, e) for p, e in r.tables("platforms").items()},
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "id": self.id,
            "function": self.function,
            "source": self.source,
            "kind": self.kind,
            "signature": list(self.signature),
        }
        if self.shardings is not None:
            data["shardings"] = list(self.shardings)
        data["static_arguments"] = self.static_arguments
        if self.donated is not None:
            data["donated"] = list(self.donated)
        data["mesh"] = self.mesh
        if self.host_callbacks is not None:
            data["host_callbacks"] = list(self.host_callbacks)
        data["partitions"] = self.partitions
        data["platforms"] = {p: _json(platform_to_dict(e)) for p, e in self.platforms.items()}
        if self.findings is not None:
            data["findings"] = [dict(f) for f in self.findings]
        data["users"] = list(self.users)
        data["outside_tests"] = self.outside_tests
        data["owner"] = self.owner
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class TestUse:
    """The computations one test owns (ran first) and uses."""

    __test__ = False

    owns: tuple[str, ...]
    uses: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditSection:
    """The report's ``audit`` (``--jaxport-audit``): what the hook could see, the counts of
    what it saw, the suite's totals and numbers, each distinct site, the findings, every
    computation, which test used which, the cost model, and the suite budget's judgement."""

    interception: Mapping[str, Json]
    platforms: tuple[str, ...]
    eager_users: str
    seen: Mapping[str, int]
    totals: Mapping[str, PlatformTotals]
    numbers: Numbers | None
    sites: tuple[Hotspot, ...]
    findings: tuple[AuditFinding, ...]
    computations: tuple[Computation, ...]
    tests: Mapping[str, TestUse]
    cost: CostModel | None = None
    audit_errors: tuple[str, ...] | None = None
    violations: tuple[Violation, ...] | None = None
    baseline_growth: tuple[Mapping[str, Json], ...] | None = None
    fail_on: Mapping[str, Json] | None = None
    legs: tuple[str, ...] | None = None

    @classmethod
    def read(cls, r: _Reader) -> AuditSection:
        summary = r.table("summary")
        tests = {
            nodeid: TestUse(owns=t.texts("owns", ()), uses=t.texts("uses", ()))
            for nodeid, t in r.tables("tests").items()
        }
        growth = None
        if r.has("baseline_growth"):
            growth = tuple(
                dict(cast("Mapping[str, Json]", g.data)) for g in r.items("baseline_growth")
            )
        fail_on = r.opt_table("fail_on")
        return cls(
            interception=dict(cast("Mapping[str, Json]", r.table("interception").data)),
            platforms=r.texts("platforms"),
            eager_users=r.text("eager_users", "owner"),
            seen=r.counts("seen"),
            totals={p: PlatformTotals.read(t) for p, t in summary.tables("platforms").items()},
            numbers=Numbers.read(summary),
            sites=tuple(_read_hotspot(s, audit=True) for s in r.items("sites")),
            findings=tuple(AuditFinding.read(f) for f in r.items("findings", ())),
            computations=tuple(Computation.read(c) for c in r.items("computations")),
            tests=tests,
            cost=_read_cost(r.table("cost")) if r.has("cost") else None,
            audit_errors=r.texts("audit_errors") if r.has("audit_errors") else None,
            violations=tuple(_read_violation(v) for v in r.items("violations"))
            if r.has("violations")
            else None,
            baseline_growth=growth,
            fail_on=dict(cast("Mapping[str, Json]", fail_on.data)) if fail_on else None,
            legs=r.texts("legs") if r.has("legs") else None,
        )

    def to_dict(self) -> dict[str, Json]:
        summary: dict[str, Json] = {"platforms": {p: t.to_dict() for p, t in self.totals.items()}}
        if self.numbers is not None:
            summary.update(self.numbers.to_dict())
        data: dict[str, Json] = {
            "interception": dict(self.interception),
            "platforms": list(self.platforms),
            "eager_users": self.eager_users,
            "seen": dict(self.seen),
            "summary": summary,
            "sites": [h.to_audit_dict() for h in self.sites],
            "findings": [f.to_dict() for f in self.findings],
            "computations": [c.to_dict() for c in self.computations],
            "tests": {
                n: {"owns": list(t.owns), "uses": list(t.uses)} for n, t in self.tests.items()
            },
        }
        if self.cost is not None:
            data["cost"] = _cost_dict(self.cost)
        if self.audit_errors is not None:
            data["audit_errors"] = list(self.audit_errors)
        if self.violations is not None:
            data["violations"] = [_json(v.to_dict()) for v in self.violations]
        if self.baseline_growth is not None:
            data["baseline_growth"] = [dict(g) for g in self.baseline_growth]
        if self.fail_on is not None:
            data["fail_on"] = dict(self.fail_on)
        if self.legs is not None:
            data["legs"] = list(self.legs)
        return data


# -- the merge --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Leg:
    """One CI leg of a merged report: its platforms and what it ran with."""

    leg: str
    platforms: tuple[str, ...]
    present_platforms: tuple[str, ...]
    environment: Environment
    tool_version: str | None

    @classmethod
    def read(cls, r: _Reader) -> Leg:
        return cls(
            leg=r.text("leg"),
            platforms=r.texts("platforms", ()),
            present_platforms=r.texts("present_platforms", ()),
            environment=Environment.read(r.table("environment")),
            tool_version=r.opt_text("tool_version"),
        )

    def to_dict(self) -> dict[str, Json]:
        return {
            "leg": self.leg,
            "platforms": list(self.platforms),
            "present_platforms": list(self.present_platforms),
            "environment": self.environment.to_dict(),
            "tool_version": self.tool_version,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Merged:
    """What ``jaxport merge`` adds: the legs, the releases where they differ, the drifts
    across legs, notes and how many outputs were compared."""

    legs: tuple[Leg, ...]
    drifts: tuple[Drift, ...] = ()
    notes: tuple[str, ...] = ()
    comparisons: int = 0
    mixed_versions: Mapping[str, Mapping[str, str]] | None = None

    @classmethod
    def read(cls, r: _Reader) -> Merged | None:
        if not r.has("legs"):
            return None
        mixed = None
        if r.has("mixed_versions"):
            table = r.table("mixed_versions")
            mixed = {name: table.strings(name) for name in table.data}
        return cls(
            legs=tuple(Leg.read(leg) for leg in r.items("legs")),
            drifts=tuple(Drift.read(d) for d in r.items("drifts", ())),
            notes=r.texts("notes", ()),
            comparisons=r.integer("comparisons", 0),
            mixed_versions=mixed,
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {"legs": [leg.to_dict() for leg in self.legs]}
        if self.mixed_versions is not None:
            data["mixed_versions"] = {k: dict(v) for k, v in self.mixed_versions.items()}
        data["drifts"] = [d.to_dict() for d in self.drifts]
        data["notes"] = list(self.notes)
        data["comparisons"] = self.comparisons
        return data


# -- how a baseline met the run ---------------------------------------------------------


StaleWhy = Literal["removed", "file-gone", "checks-nothing", "check-gone"]
"""Why a baseline entry is no longer matched: no test of that name in its file, which ran
(renamed or removed); its file is gone; its test ran and passed but checks nothing now; its
test ran and passed but no longer makes that check."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StaleEntry:
    """A baseline entry no test of this run matched any more (like an unused snapshot)."""

    nodeid: str
    check: str | None = None
    """The check, where the test still matched but no longer makes it."""
    why: StaleWhy = "removed"

    def to_dict(self) -> dict[str, Json]:
        return {"nodeid": self.nodeid, "check": self.check, "why": self.why}


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselineMatch:
    """How the baseline's entries met the tests of a run (``--jaxport-baseline``): the tests
    it matched, the tests and checks it does not have (new), its entries no test matched any
    more (stale: only of test files that ran whole this time, or whose file is gone) and
    those of tests not run this time (another file, deselected, skipped, failed before
    checking). A baseline that matched no test although tests checked is a wrong file (or
    renamed tests): nothing was compared. ``--jaxport-baseline-strict`` (``strict``) fails
    the run on that, on stale entries and on new tests or checks."""

    file: str
    """The baseline's FILE as given."""
    entries: int = 0
    """Tests the baseline has."""
    compared: int = 0
    """Tests that checked this run and that the baseline has: their counts were compared."""
    new: tuple[str, ...] = ()
    """Tests that checked this run and that the baseline does not have (not compared)."""
    new_checks: tuple[tuple[str, str], ...] = ()
    """``(test, check)``: checks a compared test made that its baseline entry does not have."""
    stale: tuple[StaleEntry, ...] = ()
    not_run: int = 0
    """The baseline's tests neither compared nor stale: not run this time."""
    strict: bool = False

    @property
    def matched_nothing(self) -> bool:
        """Tests checked, and the baseline matched none of them."""
        return not self.compared and bool(self.new)

    @property
    def unmatched(self) -> int:
        """The baseline's tests that no test of this run matched (stale or not run)."""
        return self.entries - self.compared

    @property
    def fails(self) -> bool:
        """Whether ``--jaxport-baseline-strict`` fails the run: the baseline matched nothing,
        has stale entries, or lacks tests or checks that ran."""
        return self.strict and bool(
            self.matched_nothing or self.stale or self.new or self.new_checks
        )

    def to_dict(self) -> dict[str, Json]:
        """The report's ``baseline`` (:attr:`Report.baseline`)."""
        return {
            "file": self.file,
            "entries": self.entries,
            "compared": self.compared,
            "new": list(self.new),
            "new_checks": [{"nodeid": n, "check": c} for n, c in self.new_checks],
            "stale": [e.to_dict() for e in self.stale],
            "not_run": self.not_run,
            "strict": self.strict,
        }


# -- the report -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectionError:
    """A file (or other collector) pytest could not collect: its tests did not run, so the
    report's counts are not the suite's."""

    nodeid: str
    error: str
    """The error's last line (``ModuleNotFoundError: No module named 'x'``)."""

    @classmethod
    def read(cls, r: _Reader) -> CollectionError:
        return cls(nodeid=r.text("nodeid"), error=r.text("error"))

    def to_dict(self) -> dict[str, Json]:
        return {"nodeid": self.nodeid, "error": self.error}


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """A whole report (schema version :data:`SCHEMA_VERSION`); :meth:`to_dict` is its JSON."""

    schema_version: int = SCHEMA_VERSION
    tool_version: str | None
    """The pytest-jaxport release that wrote it (absent in recordings made comparable)."""
    environment: Environment
    config: Config
    summary: Summary
    tests: tuple[TestEntry, ...]
    upgraded_from: int | None = None
    baseline: BaselineMatch | None = None
    """How the baseline met the run (``--jaxport-baseline``)."""
    merged: Merged | None = None
    audit: AuditSection | None = None
    collection_errors: tuple[CollectionError, ...] = ()
    """What pytest could not collect (its tests did not run); the key only where there are
    some."""

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {
            "schema_version": self.schema_version,
            "tool": {"name": TOOL_NAME},
            "environment": self.environment.to_dict(),
            "config": self.config.to_dict(),
            "summary": self.summary.to_dict(),
            "tests": [t.to_dict() for t in self.tests],
        }
        if self.tool_version is not None:
            cast("dict[str, Json]", data["tool"])["version"] = self.tool_version
        _put(data, "upgraded_from", self.upgraded_from)
        if self.baseline is not None:
            data["baseline"] = self.baseline.to_dict()
        if self.merged is not None:
            data.update(self.merged.to_dict())
        if self.audit is not None:
            data["audit"] = self.audit.to_dict()
        if self.collection_errors:
            data["collection_errors"] = [e.to_dict() for e in self.collection_errors]
        return data

    def checks(self) -> Iterator[Check]:
        """Every check of every test, in order."""
        return (check for test in self.tests for check in test.checks)


def _read_baseline_match(r: _Reader) -> BaselineMatch:
    """The report's ``baseline`` (how the baseline met the run)."""
    return BaselineMatch(
        file=r.text("file"),
        entries=r.integer("entries", 0),
        compared=r.integer("compared", 0),
        new=r.texts("new", ()),
        new_checks=tuple((p.text("nodeid"), p.text("check")) for p in r.items("new_checks", ())),
        stale=tuple(_read_stale_entry(e) for e in r.items("stale", ())),
        not_run=r.integer("not_run", 0),
        strict=r.flag("strict", False),
    )


def _read_stale_entry(r: _Reader) -> StaleEntry:
    why = r.text("why", "removed")
    if why not in get_args(StaleWhy):
        raise r.error(r.at("why"), f"one of {', '.join(get_args(StaleWhy))}", why)
    return StaleEntry(nodeid=r.text("nodeid"), check=r.opt_text("check"), why=cast(StaleWhy, why))


BUILT = "<built>"
"""The ``file`` a report built in this process is read as (:func:`built`)."""


def built(data: Mapping[str, object]) -> Report:
    """A report this package has just built as JSON (the session's, a merge's) as a
    :class:`Report`, without checking each field again (:func:`read_report` checks a file's)."""
    return read_report(data, file=BUILT, trusted=True)


def built_audit(data: Mapping[str, object]) -> AuditSection:
    """The audit section the session has just assembled, as an :class:`AuditSection`."""
    return AuditSection.read(_Reader(data, file=BUILT, place="audit", trusted=True))


def read_report(data: Mapping[str, object], *, file: str, trusted: bool = False) -> Report:
    """A report's JSON (this schema version) as a :class:`Report`, every field checked: a
    :class:`ReportError` naming ``file`` and the place of the first that is wrong (a
    ``trusted`` report, :func:`built`, is read without the checks)."""
    r = _Reader(data, file=file, trusted=trusted)
    tool = r.table("tool")
    baseline = r.opt_table("baseline")
    audit = r.opt_table("audit")
    return Report(
        schema_version=r.integer("schema_version"),
        tool_version=tool.opt_text("version"),
        environment=Environment.read(r.table("environment")),
        config=Config.read(r.table("config")),
        summary=Summary.read(r.table("summary")),
        tests=tuple(TestEntry.read(t) for t in r.items("tests")),
        upgraded_from=r.opt_integer("upgraded_from"),
        baseline=_read_baseline_match(baseline) if baseline else None,
        merged=Merged.read(r),
        audit=AuditSection.read(audit) if audit is not None else None,
        collection_errors=tuple(CollectionError.read(e) for e in r.items("collection_errors", ())),
    )
