"""The report as typed values (pure): :class:`Report`, the run's environment and
configuration, a merge's legs, how a baseline met the run, what could not be collected.

:func:`read_report` reads a report's JSON (schema version :data:`SCHEMA_VERSION`, upgraded
before where older) once, field by field, through the checked
:class:`~pytest_jaxport.report.reader.Reader`: a wrong type or a missing field is a
:class:`~pytest_jaxport.report.errors.ReportError` naming the file and that place. From there
on a report is typed. :meth:`Report.to_dict` is the JSON the plugin writes, so reading a
report and writing it again gives the same JSON. Its larger parts have modules of their own:
the tests (:mod:`~pytest_jaxport.report.entries`), the summary
(:mod:`~pytest_jaxport.report.totals`) and the audit
(:mod:`~pytest_jaxport.report.audit_section`).

The parts reuse the domain's types where they already are values with a JSON form:
:class:`~pytest_jaxport.model.probe.Probe` (a check, and an audited computation's platforms),
:class:`~pytest_jaxport.model.budget.Violation`,
:class:`~pytest_jaxport.model.hotspots.Hotspot`,
:class:`~pytest_jaxport.model.runtime_share.RuntimeShare` and
:class:`~pytest_jaxport.model.cost.RewriteEstimate`.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, cast, get_args

from pytest_jaxport.model.jsontypes import Json, put_optional
from pytest_jaxport.model.platforms import DEFAULT_HOME
from pytest_jaxport.report.audit_section import AuditSection
from pytest_jaxport.report.entries import Check, Drift, TestEntry
from pytest_jaxport.report.reader import Reader
from pytest_jaxport.report.totals import Numbers, Summary

SCHEMA_VERSION = 2
TOOL_NAME = "pytest-jaxport"


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
    def read(cls, r: Reader) -> Environment:
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
        put_optional(data, "python", self.python)
        put_optional(data, "machine", self.machine)
        data["present_platforms"] = list(self.present_platforms)
        if self.device_kinds is not None:
            data["device_kinds"] = dict(self.device_kinds)
        for key in ("executed_platforms", "emulated_platforms"):
            value = getattr(self, key)
            if value is not None:
                data[key] = list(value)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgedDevice:
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
    devices: Mapping[str, JudgedDevice] | None = None
    budget: Mapping[str, Json] | None = None
    tolerance: Mapping[str, Json] | None = None
    emulate: tuple[str, ...] | None = None
    migrate_to: tuple[str, ...] | None = None
    home: str | None = None
    """``[tool.jaxport] home`` as the run used it; ``None`` in a report written before
    reports stated it (then moving was measured off cuda: :attr:`home_platform`)."""
    memory_growth: float | None = None
    """``[tool.jaxport] memory_growth`` where the project set it: the share a check's planned
    device memory may grow by before ``jaxport diff`` flags it (its ``--memory-growth`` over
    this; the default where neither says)."""
    written_null: frozenset[str] = frozenset()
    """The optional keys the report holds as ``null`` (``jaxport merge`` writes ``target``
    and ``devices`` so where no leg set them), kept so it reads back as written."""

    OPTIONAL = ("source", "compile", "target", "devices", "budget", "tolerance", "emulate",
                "migrate_to", "home", "memory_growth")  # fmt: skip

    @property
    def home_platform(self) -> str:
        """The platform moving was measured from: :attr:`home`, cuda where the report does
        not say."""
        return self.home if self.home is not None else DEFAULT_HOME

    @classmethod
    def read(cls, r: Reader) -> Config:
        budget = r.opt_table("budget")
        tolerance = r.opt_table("tolerance")
        return cls(
            source=r.opt_text("source"),
            platforms=r.texts("platforms"),
            reference=r.text("reference"),
            compile=r.texts("compile") if r.present("compile") else None,
            target=r.opt_text("target"),
            devices={
                p: JudgedDevice(generation=d.text("generation"), name=d.text("name"))
                for p, d in r.tables("devices").items()
            }
            if r.opt_table("devices") is not None
            else None,
            budget=dict(cast("Mapping[str, Json]", budget.data)) if budget else None,
            tolerance=dict(cast("Mapping[str, Json]", tolerance.data)) if tolerance else None,
            emulate=r.texts("emulate") if r.present("emulate") else None,
            migrate_to=r.texts("migrate_to") if r.present("migrate_to") else None,
            home=r.opt_text("home"),
            memory_growth=r.opt_number("memory_growth"),
            written_null=frozenset(k for k in cls.OPTIONAL if r.has(k) and r.data[k] is None),
        )

    def to_dict(self) -> dict[str, Json]:
        data: dict[str, Json] = {}
        put_optional(data, "source", self.source)
        data["platforms"] = list(self.platforms)
        data["reference"] = self.reference
        if self.compile is not None:  # the session writes both, target null unless cuda
            data["compile"] = list(self.compile)
            data["target"] = self.target
        else:
            put_optional(data, "target", self.target)
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
        put_optional(data, "home", self.home)
        put_optional(data, "memory_growth", self.memory_growth)
        for key in self.OPTIONAL:
            if key in self.written_null and data.get(key) is None:
                data[key] = None
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
    def read(cls, r: Reader) -> Leg:
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
    def read(cls, r: Reader) -> Merged | None:
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
    def read(cls, r: Reader) -> CollectionError:
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
        put_optional(data, "upgraded_from", self.upgraded_from)
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


def _read_baseline_match(r: Reader) -> BaselineMatch:
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


def _read_stale_entry(r: Reader) -> StaleEntry:
    why = r.text("why", "removed")
    if why not in get_args(StaleWhy):
        raise r.error(r.at("why"), f"one of {', '.join(get_args(StaleWhy))}", why)
    return StaleEntry(nodeid=r.text("nodeid"), check=r.opt_text("check"), why=cast(StaleWhy, why))


Recount = Callable[[tuple[TestEntry, ...], Numbers | None], Summary]
"""The summary of a report's tests, counted again (with the numbers its file holds)."""


def read_report(data: Mapping[str, object], *, file: str, recount: Recount | None = None) -> Report:
    """A report's JSON (this schema version) as a :class:`Report`, every field checked: a
    :class:`~pytest_jaxport.report.errors.ReportError` naming ``file`` and the place of the
    first that is wrong. With ``recount`` (an upgraded report's), its summary is counted
    again from its tests, and only its numbers are read."""
    r = Reader(data, file=file)
    tool = r.table("tool")
    baseline = r.opt_table("baseline")
    audit = r.opt_table("audit")
    schema_version = r.integer("schema_version")
    tool_version = tool.opt_text("version")
    environment = Environment.read(r.table("environment"))
    config = Config.read(r.table("config"))
    counted = r.table("summary")
    if recount is None:
        summary = Summary.read(counted)
        tests = tuple(TestEntry.read(t) for t in r.items("tests"))
    else:
        tests = tuple(TestEntry.read(t) for t in r.items("tests"))
        summary = recount(tests, Numbers.read(counted))
    return Report(
        schema_version=schema_version,
        tool_version=tool_version,
        environment=environment,
        config=config,
        summary=summary,
        tests=tests,
        upgraded_from=r.opt_integer("upgraded_from"),
        baseline=_read_baseline_match(baseline) if baseline else None,
        merged=Merged.read(r),
        audit=AuditSection.read(audit) if audit is not None else None,
        collection_errors=tuple(CollectionError.read(e) for e in r.items("collection_errors", ())),
    )
