"""Join CI legs into one report and compare their numerics across legs (pure).

Per test, check and platform the entry of the leg that saw the platform at the highest
fidelity wins (:func:`fidelity`: executed > failed to run > compiled on the device >
deviceless > lowered > failed to lower; ties to the leg given first); each executed
platform's saved outputs are compared with the reference platform's, whichever leg ran it,
and every difference is a :class:`Drift`. An emulation (``emulate = [...]``) never counts as
executed: the merged entry keeps it from the leg that emulated, and its saved outputs are
compared with the platform's own where a leg ran that platform (how an emulation is
validated where the hardware exists) and with the reference where another leg ran that.
Legs must share the schema version and the project configuration except
:data:`PER_LEG_CONFIG_KEYS`. docs/ci.md says what a user sees.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_jaxport.model.budget import EMULATED_KEYS, Violation, numerics_tally
from pytest_jaxport.model.compare import Outputs, compare
from pytest_jaxport.model.config import DEFAULT_MIGRATE_TO, ConfigError, ProjectConfig
from pytest_jaxport.model.cost import COST_KEYS, CostModel
from pytest_jaxport.model.emulation import emulated_label
from pytest_jaxport.model.jsontypes import Json, JsonObject
from pytest_jaxport.model.numerics import Tolerance, default_tolerance, gradient_tolerance
from pytest_jaxport.model.platforms import ordered_platforms
from pytest_jaxport.model.probe import PlatformProbe
from pytest_jaxport.model.pyproject import parse_project
from pytest_jaxport.model.tooling import Assumption, assumptions_per_rule
from pytest_jaxport.report.audit_ledger import failures, merge_audits
from pytest_jaxport.report.baseline import counted
from pytest_jaxport.report.build import build_report
from pytest_jaxport.report.document import (
    SCHEMA_VERSION,
    TOOL_NAME,
    Config,
    Environment,
    Leg,
    Merged,
    Report,
)
from pytest_jaxport.report.entries import Check, Drift, Provenance, TestEntry
from pytest_jaxport.report.errors import MergeError, ReportError
from pytest_jaxport.report.files import load
from pytest_jaxport.report.outputs import OutputsError, load_outputs
from pytest_jaxport.report.summary import Pricing
from pytest_jaxport.report.totals import Tooling
from pytest_jaxport.version import __version__

PER_LEG_CONFIG_KEYS: frozenset[str] = frozenset(
    {"platforms", "compile", "source", "emulate", "migrate_to"}
)
"""``config`` keys that may differ between legs; every other key must be equal.

``platforms``, ``compile`` and ``emulate`` are what ``--jaxport-platforms`` /
``--jaxport-compile`` / ``--jaxport-emulate`` set per leg (a CPU leg emulates tpu, the TPU
leg runs it); ``migrate_to``, where pyproject leaves it to the default, follows the platforms a
leg lowers for (the merge prices the legs' targets together); ``source`` only says which file
the configuration was read from. Budgets, tolerances,
the reference platform and the GPU target description must agree, or the legs measured
different things.
"""

WHERE_SET_CONFIG_KEYS: frozenset[str] = frozenset({"target", "devices"})
"""``config`` keys compared only between legs that set them (``target`` is recorded only by
legs that compile for cuda; ``devices``, what the formats-and-layout findings were judged
for, by reports of pytest-jaxport versions that have them)."""


ToleranceFor = Callable[[str, str], Tolerance]
"""``(platform, dtype name) -> Tolerance`` for comparing that platform with the reference."""


def tolerance_from_project(project: ProjectConfig) -> ToleranceFor:
    """The project's ``[tool.jaxport.tolerance]`` tables over JAX's dtype defaults."""
    resolved = project.resolve()

    return resolved.tolerance_for


def tolerance_from_config(config: Config, *, source: str = "report") -> ToleranceFor:
    """Tolerances from a report's ``config`` section.

    Reads its ``tolerance`` table, shaped like the ``[tool.jaxport.tolerance]`` table
    (``{"float32": {"rtol": ...}, "cuda": {"bfloat16": {...}}}``); without it, the defaults.
    """
    table = dict(config.tolerance or {})
    try:
        project = parse_project({"tolerance": table}, f"{source} config")
    except ConfigError as e:
        raise MergeError(str(e)) from None
    return tolerance_from_project(project)


def _with_overrides(
    tolerance_for: ToleranceFor,
    platform: str,
    overrides: Mapping[str, float] | None,
    *,
    gradient: bool = False,
) -> Callable[[str], Tolerance]:
    """A check's marker ``rtol``/``atol`` (recorded as ``check["tolerance"]``) win per field.

    ``gradient``: a ``[grad]``/``[jvp]`` check, whose unconfigured dtypes take JAX's gradient
    tolerances (as in-process numerics do)."""

    def tolerance(dtype: str) -> Tolerance:
        base = tolerance_for(platform, dtype)
        if gradient and base == default_tolerance(dtype):
            base = gradient_tolerance(dtype)
        if not overrides:
            return base
        return Tolerance(
            rtol=float(overrides.get("rtol", base.rtol)),
            atol=float(overrides.get("atol", base.atol)),
        )

    return tolerance


# -- merge ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeResult:
    """The merged report, every cross-leg drift, and notes on what could not be compared."""

    document: Report
    """The merged report: what ``jaxport merge`` renders, and writes (:attr:`report`)."""
    drifts: tuple[Drift, ...] = ()
    notes: tuple[str, ...] = ()
    comparisons: int = 0
    """How many (check, platform, leg) outputs were compared with a reference's."""

    @property
    def report(self) -> dict[str, Json]:
        """The merged report's JSON, as ``jaxport merge -o`` writes it
        (:meth:`Report.to_dict` of :attr:`document`)."""
        return self.document.to_dict()

    @property
    def ok(self) -> bool:
        """Whether every compared output matched."""
        return not self.drifts

    def failures(self) -> list[str]:
        """What keeps the merged report from green, for its one-line summary: the legs'
        failed tests (and on which leg), budget violations, output drifts, suite audit
        failures; ``[]`` when it is green (``jaxport merge`` exits 1 otherwise)."""
        summary = self.document.summary
        said = []
        failed = summary.failed_tests
        if failed:
            by_leg: dict[str, int] = {}
            for test in self.document.tests:
                for leg, outcome in (test.legs or {}).items():
                    if outcome in ("failed", "error"):
                        by_leg[leg] = by_leg.get(leg, 0) + 1
            where = []
            if by_leg:
                where.append(f"failed on {', '.join(f'{leg}: {n}' for leg, n in by_leg.items())}")
            drifted = sum(1 for t in self.document.tests if t.drifts)
            if drifted:
                where.append(f"{drifted} by output drift")
            shown = f" ({'; '.join(where)})" if where else ""
            said.append(counted(failed, "failed test") + shown)
        # Numerics apart from the budgets, as every format's headline counts them.
        mismatches, differ = numerics_tally(v for t in self.document.tests for v in t.violations)
        if summary.violations - mismatches - differ:
            said.append(counted(summary.violations - mismatches - differ, "budget violation"))
        if mismatches:
            said.append(f"{mismatches} numerics mismatch{'' if mismatches == 1 else 'es'}")
        if differ:
            said.append(counted(differ, "check") + " that may differ (emulated)")
        if self.drifts:
            said.append(f"{counted(len(self.drifts), 'output drift')} across legs")
        audit = self.document.audit
        suite = failures(audit) if audit is not None else 0
        if suite:
            said.append(counted(suite, "suite audit failure"))
        if self.document.collection_errors:  # a leg's tests there did not run
            said.append(counted(len(self.document.collection_errors), "file") + " not collected")
        return said


@dataclass(frozen=True, slots=True, kw_only=True)
class _Leg:
    name: str
    path: Path
    report: Report


@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    """One leg's entry for one platform of one check: what it found (``probe``), and its
    saved outputs and legs (``provenance``)."""

    leg: _Leg
    probe: PlatformProbe
    provenance: Provenance

    @property
    def leg_name(self) -> str:
        """The leg that measured it (a merged report passed in names its own legs)."""
        return self.provenance.leg or self.leg.name

    @property
    def emulated_leg(self) -> str:
        return self.provenance.emulated_leg or self.leg.name


@dataclass(slots=True, kw_only=True)
class _MergedCheck:
    """A check of the merged test as the cross-leg comparisons complete it: its first leg's
    check, and per platform the winning entry with its saved outputs and legs."""

    first: Check
    platforms: dict[str, PlatformProbe]
    provenance: dict[str, Provenance]
    reference: str
    reference_leg: str | None
    note: str | None

    @property
    def name(self) -> str:
        return self.first.name

    @property
    def tolerance(self) -> Mapping[str, float] | None:
        return self.first.tolerance

    @property
    def gradient(self) -> bool:
        """A ``[grad]``/``[jvp]`` check (JAX's gradient tolerances where unconfigured)."""
        return self.first.probe.transform in ("grad", "jvp")

    def check(self) -> Check:
        """The merged check as the report holds it."""
        probe = dataclasses.replace(
            self.first.probe, reference=self.reference, note=self.note, platforms=self.platforms
        )
        return Check(
            probe=probe,
            tolerance=self.first.tolerance,
            provenance={p: v for p, v in self.provenance.items() if not v.empty},
            reference_leg=self.reference_leg,
        )


def load_legs(paths: Sequence[Path]) -> list[tuple[Path, Report]]:
    """Read each leg's report (:func:`report.load`), as :class:`MergeError` on failure."""
    legs = []
    for path in paths:
        try:
            legs.append((path, load(path)))
        except ReportError as e:
            raise MergeError(str(e)) from None
    return legs


def fidelity(entry: PlatformProbe) -> tuple[int, ...]:
    """How much a leg saw of a platform; higher wins the merge.

    executed > present but failed to compile or run > compiled on the device > compiled
    deviceless > its memory planned or refused by a compiler > lowered > failed to lower. A
    new level (profiled, say) is a new leading element. (A compile refused for memory is
    no census, but it is the compiler's answer: it beats a leg that only lowered, whose
    memory is "not compiled".)
    """
    compiled = entry.compiled is not None
    memory = entry.memory
    return (
        int(entry.executed),
        int(entry.present and bool(entry.execution_error or entry.compile_error)),
        int(compiled and not entry.deviceless),
        int(compiled),
        int(memory is not None and memory.level == "compiled"),
        int(entry.census is not None),
    )


def merge(
    legs: Sequence[tuple[Path, Report]],
    *,
    tolerance_for: ToleranceFor,
    outputs_root: Path | None = None,
) -> MergeResult:
    """One report from many legs; see the module docstring for the rules.

    ``outputs_root`` is the folder the merged report will be written to (default: the
    current directory): the ``outputs`` paths of merged entries are rewritten relative to it.
    Raises :class:`MergeError` for incompatible legs or unreadable outputs. The legs were
    checked when read (:func:`load_legs`).
    """
    if not legs:
        raise MergeError("nothing to merge: no leg reports given")
    named = _name_legs(legs)
    _check_distinct(named)
    _check_compatible(named)
    root = Path.cwd() if outputs_root is None else outputs_root
    config = _merged_config(named)
    compared = _compared_tests(named, root, tolerance_for=tolerance_for)
    pricing = Pricing(
        migrate_to=_migrate_to(config),
        model=_merged_cost_model(named),
        home=named[0].report.config.home_platform,  # the legs agree (checked)
    )
    report = build_report(
        compared.tests,
        config=config,
        environment=_merged_environment(named),
        pricing=pricing,
        tooling=_merged_tooling(named),
    )
    records = _leg_records(named)
    audits = [(leg.name, leg.report.audit) for leg in named if leg.report.audit is not None]
    errors = {(e.nodeid, e.error): e for leg in named for e in leg.report.collection_errors}
    document = dataclasses.replace(
        report,
        merged=Merged(
            legs=tuple(records),
            drifts=compared.drifts,
            notes=compared.notes,
            comparisons=compared.comparisons,
            # only where the legs differ: other merged reports are unchanged
            mixed_versions=mixed_versions(records) or None,
        ),
        # --jaxport-audit: one audit of the union of the legs' computations
        audit=merge_audits(audits, pricing=pricing) if audits else None,
        # the legs' own: their tests there did not run
        collection_errors=tuple(e for _, e in sorted(errors.items())),
    )
    return MergeResult(
        document=document,
        drifts=compared.drifts,
        notes=compared.notes,
        comparisons=compared.comparisons,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Compared:
    """The legs' tests merged, their outputs compared across legs: the merged tests, every
    drift, the notes on what could not be compared and how many outputs were."""

    tests: tuple[TestEntry, ...]
    drifts: tuple[Drift, ...]
    notes: tuple[str, ...]
    comparisons: int


def _compared_tests(legs: Sequence[_Leg], root: Path, *, tolerance_for: ToleranceFor) -> _Compared:
    """Each test of the legs merged (:func:`_merge_test`), its checks' saved outputs compared
    across legs: a drift fails the test in the merged report, whatever each leg said."""
    reference = legs[0].report.config.reference
    by_nodeid: dict[str, list[tuple[_Leg, TestEntry]]] = {}
    for leg in legs:
        for test in leg.report.tests:
            by_nodeid.setdefault(test.nodeid, []).append((leg, test))
    tests: list[TestEntry] = []
    drifts: list[Drift] = []
    notes: list[str] = []
    comparisons = 0
    cache: dict[Path, Outputs] = {}
    for nodeid in sorted(by_nodeid):
        merged_test, compared = _merge_test(nodeid, by_nodeid[nodeid], root)
        drifted: list[Drift] = []
        for check, candidates in compared:
            for across in (_cross_leg_numerics, _cross_leg_emulations):
                found, said, n = across(nodeid, check, candidates, reference, tolerance_for, cache)
                drifted += found
                comparisons += n
                notes += said
        merged_test = dataclasses.replace(merged_test, checks=tuple(c.check() for c, _ in compared))
        if drifted:
            worse = _outcome_rank(merged_test.outcome) < _outcome_rank("failed")
            merged_test = dataclasses.replace(
                merged_test,
                drifts=tuple(drifted),
                outcome="failed" if worse else merged_test.outcome,
            )
        drifts += drifted
        tests.append(merged_test)
    return _Compared(
        tests=tuple(tests), drifts=tuple(drifts), notes=tuple(notes), comparisons=comparisons
    )


def _migrate_to(config: Config) -> tuple[str, ...]:
    """The targets the merged report prices: the legs' together (:func:`_merged_config`), or
    the default where no leg said (a report older than ``migrate_to``)."""
    if config.migrate_to is None:
        return tuple(DEFAULT_MIGRATE_TO)
    return config.migrate_to


def _merged_cost_model(legs: Sequence[_Leg]) -> CostModel:
    """The legs' cost model (``[tool.jaxport.cost]``, which they must share), to price the
    union of the legs' merged entries with. ``pytest_jaxport_rewrite_cost`` hooks are
    pytest's: ``jaxport merge`` does not run them."""
    first: tuple[_Leg, CostModel] | None = None
    for leg in legs:
        recorded = leg.report.summary.numbers.cost_model if leg.report.summary.numbers else None
        if recorded is None:
            continue
        if first is None:
            first = (leg, recorded)
        elif recorded != first[1]:
            raise MergeError(
                f"{leg.path}: cost model ([tool.jaxport.cost]) {_short(_costs(recorded))} "
                f"differs from {first[0].path}'s {_short(_costs(first[1]))}; legs of one merge "
                "must share [tool.jaxport]"
            )
    return CostModel(**{k: getattr(first[1], k) for k in COST_KEYS}) if first else CostModel()


def _costs(model: CostModel) -> JsonObject:
    """A cost model as the report writes it (every key)."""
    return dataclasses.asdict(model)


def _merged_tooling(legs: Sequence[_Leg]) -> Tooling | None:
    """The legs' tooling scans as one: every assumption once (legs scan the same project)."""
    scans = [
        leg.report.summary.numbers.tooling
        for leg in legs
        if leg.report.summary.numbers is not None and leg.report.summary.numbers.tooling is not None
    ]
    if not scans:
        return None
    found: dict[tuple[str, int, str], Assumption] = {}
    for scan in scans:
        for assumption in scan.assumptions:
            found.setdefault((assumption.file, assumption.line, assumption.rule), assumption)
    assumptions = sorted(found.values())
    return Tooling(
        assumptions=tuple(assumptions),
        by_rule=assumptions_per_rule(assumptions),
        files_listed=max(s.files_listed for s in scans),
        files_read=max(s.files_read for s in scans),
        source=next((s.source for s in scans if s.source), None),
    )


def _name_legs(legs: Sequence[tuple[Path, Report]]) -> list[_Leg]:
    names = [path.name for path, _ in legs]
    clash = {n for n in names if names.count(n) > 1}
    return [
        _Leg(name=path.as_posix() if path.name in clash else path.name, path=path, report=report)
        for path, report in legs
    ]


def _check_distinct(legs: Sequence[_Leg]) -> None:
    """Refuse a leg given twice: the same file, or an identical report (a copy): it would
    count its tests and its numbers twice."""
    seen: dict[object, _Leg] = {}
    for leg in legs:
        text = json.dumps(leg.report.to_dict(), sort_keys=True)
        for key, how in ((leg.path.resolve(), "the same file"), (text, "an identical report")):
            other = seen.setdefault(key, leg)
            if other is leg:
                continue
            given = "given twice" if str(other.path) == str(leg.path) else (
                f"the same leg as {other.path} ({how})")  # fmt: skip
            raise MergeError(f"{leg.path}: {given}; give each leg once")


def _config_conflicts(ours: Config, theirs: Config) -> list[tuple[str, Json, Json]]:
    """The ``config`` keys two legs must agree on and do not, sorted, with their values
    (theirs, ours). ``home`` is the platform moving is measured from: a report that does
    not state it measured from cuda (:attr:`Config.home_platform`)."""
    a_config, b_config = ours.to_dict(), theirs.to_dict()
    conflicts: list[tuple[str, Json, Json]] = []
    for key in sorted(a_config.keys() | b_config.keys() | {"home"}):
        if key in PER_LEG_CONFIG_KEYS:
            continue
        if key == "home":
            if ours.home_platform != theirs.home_platform:
                conflicts.append((key, theirs.home_platform, ours.home_platform))
            continue
        a, b = a_config.get(key), b_config.get(key)
        if key in WHERE_SET_CONFIG_KEYS and (a is None or b is None):
            continue
        if a != b:
            conflicts.append((key, b, a))
    return conflicts


def _check_compatible(legs: Sequence[_Leg]) -> None:
    first = legs[0]
    version = first.report.schema_version
    if version != SCHEMA_VERSION:
        raise MergeError(
            f"{first.path}: schema_version {version!r} is not supported "
            f"(this pytest-jaxport {__version__} reads version {SCHEMA_VERSION})"
        )
    for leg in legs[1:]:
        other = leg.report.schema_version
        if other != version:
            raise MergeError(
                f"{leg.path}: schema_version {other!r} differs from {first.path}'s {version!r}"
            )
        conflicts = _config_conflicts(first.report.config, leg.report.config)
        if conflicts:
            detail = "; ".join(
                f"{k}: {_short(theirs)} here, {_short(ours)} in {first.path}"
                for k, theirs, ours in conflicts
            )
            raise MergeError(
                f"{leg.path}: project config differs from {first.path} ({detail}); legs of one "
                "merge must share [tool.jaxport] (only platforms, compile, emulate and "
                "migrate_to may differ per leg)"
            )


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True) if value is not None else "unset"
    return text if len(text) <= 60 else text[:57] + "..."


def _merged_config(legs: Sequence[_Leg]) -> Config:
    """The first leg's configuration with what may differ per leg joined: the platforms
    (and what compiles, emulates and prices) of every leg, the GPU target and the devices of
    the first leg that set them, the home of the first that states it."""
    configs = [leg.report.config for leg in legs]
    first = configs[0]

    def joined(key: str) -> tuple[str, ...] | None:
        """Every leg's platforms of ``key``, where a leg wrote it."""
        if not any(getattr(c, key) is not None or key in c.written_null for c in configs):
            return None
        return tuple(ordered_platforms(p for c in configs for p in getattr(c, key) or ()))

    merged = dataclasses.replace(
        first,
        platforms=tuple(ordered_platforms(p for c in configs for p in c.platforms)),
        compile=joined("compile"),
        emulate=joined("emulate"),
        migrate_to=joined("migrate_to"),
        target=next((c.target for c in configs if c.target is not None), None),
        devices=next((c.devices for c in configs if c.devices is not None), None),
        home=next((c.home for c in configs if c.home is not None), None),
    )

    def null(key: str) -> bool:
        """Whether the merged report writes ``key`` as null."""
        if key in WHERE_SET_CONFIG_KEYS:  # null where no leg set it
            return getattr(merged, key) is None
        if key in ("compile", "emulate", "migrate_to"):  # joined: a list where one wrote it
            return False
        return key in first.written_null and getattr(merged, key) is None

    return dataclasses.replace(merged, written_null=frozenset(filter(null, Config.OPTIONAL)))


def _merged_environment(legs: Sequence[_Leg]) -> Environment:
    """What the legs share of where they ran, and every platform present on one of them."""
    first, *rest = (leg.report.environment for leg in legs)

    def same(of: Callable[[Environment], object]) -> bool:
        return all(of(e) == of(first) for e in rest)

    present = (p for leg in legs for p in leg.report.environment.present_platforms)
    return Environment(
        versions={
            k: v for k, v in first.versions.items() if all(e.versions.get(k) == v for e in rest)
        },
        python=first.python if same(lambda e: e.python) else None,
        machine=first.machine if same(lambda e: e.machine) else None,
        present_platforms=tuple(ordered_platforms(present)),
        device_kinds=first.device_kinds if same(lambda e: e.device_kinds) else None,
        executed_platforms=first.executed_platforms
        if same(lambda e: e.executed_platforms)
        else None,
        emulated_platforms=first.emulated_platforms
        if same(lambda e: e.emulated_platforms)
        else None,
    )


def _leg_records(legs: Sequence[_Leg]) -> list[Leg]:
    """One record per original leg; a merged report passed in contributes its own legs."""
    records: dict[str, Leg] = {}
    for leg in legs:
        merged = leg.report.merged
        if merged is not None and merged.legs:
            for record in merged.legs:
                records.setdefault(record.leg, record)
            continue
        environment = leg.report.environment
        records.setdefault(
            leg.name,
            Leg(
                leg=leg.name,
                platforms=leg.report.config.platforms,
                present_platforms=environment.present_platforms,
                environment=environment,
                tool_version=leg.report.tool_version,
            ),
        )
    return list(records.values())


VERSION_KEYS = (TOOL_NAME, "jax", "jaxlib", "python")
"""What a leg ran with, which legs of one merge should share: counts and numerics from
different releases can differ for reasons other than the code."""


def mixed_versions(records: Sequence[Leg]) -> dict[str, dict[str, str]]:
    """``{"jax": {"leg-a.json": "0.10.2", "leg-b.json": "0.12.0"}}``: each of
    :data:`VERSION_KEYS` the legs (the merged report's ``legs``) do not share, per leg."""
    mixed = {}
    for key in VERSION_KEYS:
        found = {r.leg: str(v) for r in records if (v := _version(r, key)) is not None}
        if len(set(found.values())) > 1:
            mixed[key] = found
    return mixed


def _version(record: Leg, key: str) -> str | None:
    """The release of ``key`` (one of :data:`VERSION_KEYS`) a leg ran with."""
    if key == TOOL_NAME:
        return record.tool_version
    if key == "python":
        return record.environment.python
    return record.environment.versions.get(key)


_OUTCOME_RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}


def _outcome_rank(outcome: str) -> int:
    return _OUTCOME_RANK.get(outcome, 3)  # unknown outcomes (a crashed worker) rank worst


_Candidates = tuple[_MergedCheck, dict[str, list[_Candidate]]]


def _merge_test(
    nodeid: str, seen: Sequence[tuple[_Leg, TestEntry]], root: Path
) -> tuple[TestEntry, list[_Candidates]]:
    """The merged test (its checks to come), and per check its merged form with every leg's
    platform entries."""
    legs_outcome: dict[str, str] = {}
    for leg, test in seen:
        if test.legs:
            for name, outcome in test.legs.items():
                legs_outcome.setdefault(name, outcome)
        else:
            legs_outcome.setdefault(leg.name, test.outcome)
    worst = max(seen, key=lambda s: _outcome_rank(s[1].outcome))[1]
    check_names = list(dict.fromkeys(c.name for _, t in seen for c in t.checks))
    winners: dict[tuple[str, str], _Leg] = {}
    emulators: dict[tuple[str, str], _Leg] = {}
    compared: list[_Candidates] = []
    for name in check_names:
        per_leg = [(leg, c) for leg, t in seen for c in t.checks if c.name == name]
        # The first leg that traced it: another leg's "could not be traced here" is moot.
        first = next((c for _, c in per_leg if c.probe.platforms), per_leg[0][1])
        candidates: dict[str, list[_Candidate]] = {}
        for leg, check in per_leg:
            for platform, probe in check.probe.platforms.items():
                provenance = check.provenance.get(platform) or Provenance()
                candidates.setdefault(platform, []).append(
                    _Candidate(leg=leg, probe=probe, provenance=provenance)
                )
        merged = _MergedCheck(first=first, platforms={}, provenance={},
                              reference=first.probe.reference,
                              reference_leg=first.reference_leg, note=first.probe.note)  # fmt: skip
        for platform in ordered_platforms(candidates):
            best = max(candidates[platform], key=lambda c: fidelity(c.probe))
            winners[(name, platform)] = best.leg
            # An emulation is never the platform's fidelity: the entry keeps it from the leg
            # that emulated (the winner's own where it emulated too).
            emulating = [c for c in candidates[platform] if c.probe.emulated is not None]
            emulated = best if best in emulating else next(iter(emulating), None)
            if emulated is not None:
                emulators[(name, platform)] = emulated.leg
            merged.platforms[platform], merged.provenance[platform] = _winner(best, root, emulated)
        compared.append((merged, candidates))
    violations = _winning_violations(seen, winners, emulators)
    entry = TestEntry(
        nodeid=nodeid,
        outcome=worst.outcome,
        violations=tuple(v for v, _ in violations),
        error=worst.error,
        crashed=worst.crashed,
        legs=legs_outcome,
        violation_legs=tuple(leg for _, leg in violations),
    )
    return entry, compared


def _winner(
    candidate: _Candidate, root: Path, emulated: _Candidate | None = None
) -> tuple[PlatformProbe, Provenance]:
    """The winning entry with its emulation from ``emulated``'s leg (never the platform's
    own fidelity), its leg named, and saved outputs' paths relative to ``root``."""
    found = emulated.probe if emulated is not None else None
    probe = dataclasses.replace(
        candidate.probe,
        emulated=found.emulated if found is not None else None,
        emulated_numerics=found.emulated_numerics if found is not None else None,
        emulated_bounds=found.emulated_bounds if found is not None else None,
    )
    outputs = candidate.provenance.outputs
    emulated_leg = emulated_outputs = None
    if emulated is not None:
        emulated_leg = emulated.emulated_leg
        emulated_outputs = emulated.provenance.emulated_outputs
        if emulated_outputs:
            emulated_outputs = _relative(emulated, emulated_outputs, root)
    provenance = Provenance(
        outputs=_relative(candidate, outputs, root) if outputs else outputs,
        emulated_outputs=emulated_outputs,
        leg=candidate.leg_name,
        emulated_leg=emulated_leg,
    )
    return probe, provenance


def _relative(candidate: _Candidate, saved: str, root: Path) -> str:
    """A saved outputs path of ``candidate``'s leg (relative to its report), from ``root``."""
    absolute = candidate.leg.path.parent / saved
    return Path(os.path.relpath(absolute, root)).as_posix()


def _winning_violations(
    seen: Sequence[tuple[_Leg, TestEntry]],
    winners: Mapping[tuple[str, str], _Leg],
    emulators: Mapping[tuple[str, str], _Leg],
) -> list[tuple[Violation, str]]:
    """Violations of the leg whose entry won (an emulation's: of the leg whose emulation the
    entry keeps), with that leg; ones about no merged entry, from the first leg."""
    kept: list[tuple[Violation, str]] = []
    keys: set[str] = set()
    first = seen[0][0]
    for leg, test in seen:
        for i, violation in enumerate(test.violations):
            owners = emulators if violation.key in EMULATED_KEYS else winners
            owner = owners.get((violation.check, violation.platform))
            if (owner or first) is not leg:
                continue
            said = test.violation_legs[i] if i < len(test.violation_legs) else None
            key = json.dumps(violation.to_dict(), sort_keys=True)  # the same violation once
            if key not in keys:
                keys.add(key)
                kept.append((violation, said or leg.name))
    return kept


def _cross_leg_numerics(
    nodeid: str,
    merged_check: _MergedCheck,
    candidates: Mapping[str, Sequence[_Candidate]],
    reference: str,
    tolerance_for: ToleranceFor,
    cache: dict[Path, Outputs],
) -> tuple[list[Drift], list[str], int]:
    """Compare every saved output of one check with the reference's; set winners' numerics."""
    check = merged_check.name
    saved = [
        (platform, c)
        for platform in ordered_platforms(candidates)
        for c in candidates[platform]
        if c.probe.executed and c.provenance.outputs
    ]
    unsaved = [
        (platform, c)
        for platform in candidates
        for c in candidates[platform]
        if c.probe.executed and not c.provenance.outputs
    ]
    notes: list[str] = []
    if not saved or (len(saved) == 1 and not unsaved):
        return [], notes, 0  # nothing to compare with
    ref_platform = reference if any(p == reference for p, _ in saved) else saved[0][0]
    ref_candidate = next(c for p, c in saved if p == ref_platform)
    ref_outputs = _outputs(nodeid, check, ref_platform, ref_candidate, cache)
    ref_leg = ref_candidate.leg_name
    if ref_platform != reference and len(saved) > 1:
        notes.append(
            f"{nodeid} check {check!r}: no leg saved outputs of the reference platform "
            f"{reference}; compared with {ref_platform} ({ref_leg})"
        )
    for platform, candidate in unsaved:
        notes.append(
            f"{nodeid} check {check!r}: {platform} ran on {candidate.leg_name} but its outputs "
            "were not saved (run that leg with --jaxport-save-outputs); not compared across legs"
        )
    drifts: list[Drift] = []
    comparisons = 0
    merged_check.reference = ref_platform
    merged_check.reference_leg = ref_leg
    merged_check.note = None  # a leg's in-process note ("only cpu executed here") is moot
    for platform, candidate in saved:
        if candidate is ref_candidate:
            continue
        comparisons += 1
        leg = candidate.leg_name
        same = platform == ref_platform
        comparison = compare(
            ref_outputs,
            _outputs(nodeid, check, platform, candidate, cache),
            reference_platform=f"{ref_platform}@{ref_leg}" if same else ref_platform,
            platform=f"{platform}@{leg}" if same else platform,
            tolerance=_with_overrides(
                tolerance_for,
                platform,
                merged_check.tolerance,
                gradient=merged_check.gradient,
            ),
        )
        if merged_check.provenance[platform].leg == leg and not same:
            merged_check.platforms[platform] = dataclasses.replace(
                merged_check.platforms[platform], numerics=comparison
            )
        if not comparison.ok:
            drifts.append(
                Drift(
                    nodeid=nodeid,
                    check=check,
                    platform=platform,
                    leg=leg,
                    reference=ref_platform,
                    reference_leg=ref_leg,
                    messages=tuple(m.message for m in comparison.mismatches),
                )
            )
    return drifts, notes, comparisons


def _cross_leg_emulations(
    nodeid: str,
    merged_check: _MergedCheck,
    candidates: Mapping[str, Sequence[_Candidate]],
    reference: str,
    tolerance_for: ToleranceFor,
    cache: dict[Path, Outputs],
) -> tuple[list[Drift], list[str], int]:
    """Each saved emulation against the platform it stands in for, where a leg ran that
    platform and saved its outputs (the emulation's validation on real hardware), and
    against the reference where only another leg ran that (its own leg compared in-process)."""
    check = merged_check.name
    executed = {
        platform: [c for c in found if c.probe.executed and c.provenance.outputs]
        for platform, found in candidates.items()
    }
    ref_platform = merged_check.reference or reference
    references = executed.get(ref_platform, [])
    drifts: list[Drift] = []
    comparisons = 0
    for platform in ordered_platforms(candidates):
        for emulating in (c for c in candidates[platform] if c.provenance.emulated_outputs):
            leg = emulating.emulated_leg
            label = emulated_label(platform)
            emulated = _outputs(nodeid, check, label, emulating, cache, emulation=True)
            tolerance = _with_overrides(
                tolerance_for, platform, merged_check.tolerance,
                gradient=merged_check.gradient,
            )  # fmt: skip
            against = [(c, platform, True) for c in executed.get(platform, [])]
            if references and all(c.leg is not emulating.leg for c in references):
                against.append((references[0], ref_platform, False))
            for other, other_platform, hardware in against:
                other_leg = other.leg_name
                comparison = compare(
                    _outputs(nodeid, check, other_platform, other, cache),
                    emulated,
                    reference_platform=f"{other_platform}@{other_leg}",
                    platform=f"{label}@{leg}",
                    tolerance=tolerance,
                )
                comparisons += 1
                if not hardware and merged_check.provenance[platform].emulated_leg == leg:
                    merged_check.platforms[platform] = dataclasses.replace(
                        merged_check.platforms[platform], emulated_numerics=comparison
                    )
                if not comparison.ok:
                    drifts.append(
                        Drift(
                            nodeid=nodeid, check=check, platform=label, leg=leg,
                            reference=other_platform, reference_leg=other_leg,
                            messages=tuple(m.message for m in comparison.mismatches),
                        )
                    )  # fmt: skip
    return drifts, [], comparisons


def _outputs(
    nodeid: str,
    check: str,
    platform: str,
    candidate: _Candidate,
    cache: dict[Path, Outputs],
    *,
    emulation: bool = False,
) -> Outputs:
    """The outputs ``candidate``'s leg saved (its emulation's, with ``emulation``)."""
    provenance = candidate.provenance
    saved = provenance.emulated_outputs if emulation else provenance.outputs
    path = candidate.leg.path.parent / str(saved)
    if path not in cache:
        try:
            cache[path] = load_outputs(path)
        except OutputsError as e:
            raise MergeError(
                f"{candidate.leg.path}: outputs of {nodeid} check {check!r} on {platform}: {e}"
            ) from None
    return cache[path]


# -- counts: what diff and the baseline ratchet -----------------------------------------------
