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
from typing import Any

from pytest_jaxport.model.budget import EMULATED_KEYS
from pytest_jaxport.model.compare import Outputs, compare
from pytest_jaxport.model.config import (
    DEFAULT_MIGRATE_TO,
    ConfigError,
    ProjectConfig,
    parse_project,
)
from pytest_jaxport.model.cost import COST_KEYS, CostModel
from pytest_jaxport.model.emulation import emulated_label
from pytest_jaxport.model.numerics import Tolerance, default_tolerance, gradient_tolerance
from pytest_jaxport.model.targets import ordered_platforms
from pytest_jaxport.model.tooling import Assumption, summarize
from pytest_jaxport.report.audit import failures, merge_audits
from pytest_jaxport.report.baseline import counted
from pytest_jaxport.report.document import Drift, Report, built
from pytest_jaxport.report.outputs import OutputsError, load_outputs
from pytest_jaxport.report.schema import (
    SCHEMA_VERSION,
    TOOL_NAME,
    MergeError,
    ReportError,
    checks_of,
    load,
    report_data,
    suite_numbers,
)
from pytest_jaxport.version import __version__

PER_LEG_CONFIG_KEYS: frozenset[str] = frozenset({"platforms", "compile", "source", "emulate"})
"""``config`` keys that may differ between legs; every other key must be equal.

``platforms``, ``compile`` and ``emulate`` are what ``--jaxport-platforms`` /
``--jaxport-compile`` / ``--jaxport-emulate`` set per leg (a CPU leg emulates tpu, the TPU
leg runs it); ``source`` only says which file the configuration was read from. Budgets, tolerances,
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


def tolerance_from_config(config: Mapping[str, Any], *, source: str = "report") -> ToleranceFor:
    """Tolerances from a report's ``config`` section.

    Reads ``config["tolerance"]``, shaped like the ``[tool.jaxport.tolerance]`` table
    (``{"float32": {"rtol": ...}, "cuda": {"bfloat16": {...}}}``); without it, the defaults.
    """
    table = config.get("tolerance") or {}
    try:
        project = parse_project({"tolerance": table}, f"{source} config")
    except ConfigError as e:
        raise MergeError(str(e)) from None
    return tolerance_from_project(project)


def _with_overrides(
    tolerance_for: ToleranceFor,
    platform: str,
    overrides: Mapping[str, Any] | None,
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
    """The merged report."""
    report: dict[str, Any]
    """Its JSON (:meth:`Report.to_dict`), as ``jaxport merge -o`` writes it."""
    drifts: tuple[Drift, ...] = ()
    notes: tuple[str, ...] = ()
    comparisons: int = 0
    """How many (check, platform, leg) outputs were compared with a reference's."""

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
        if summary.violations:
            said.append(counted(summary.violations, "budget violation"))
        if self.drifts:
            said.append(f"{counted(len(self.drifts), 'output drift')} across legs")
        audit = self.document.audit
        suite = failures(audit) if audit is not None else 0
        if suite:
            said.append(counted(suite, "suite audit failure"))
        return said


@dataclass(frozen=True, slots=True, kw_only=True)
class _Leg:
    name: str
    path: Path
    report: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    leg: _Leg
    entry: Mapping[str, Any]


def load_legs(paths: Sequence[Path]) -> list[tuple[Path, Report]]:
    """Read each leg's report (:func:`report.load`), as :class:`MergeError` on failure."""
    legs = []
    for path in paths:
        try:
            legs.append((path, load(path)))
        except ReportError as e:
            raise MergeError(str(e)) from None
    return legs


def fidelity(entry: Mapping[str, Any]) -> tuple[int, ...]:
    """How much a leg saw of a platform; higher wins the merge.

    executed > present but failed to compile or run > compiled on the device > compiled
    deviceless > lowered > failed to lower. A new level (profiled, say) is a new leading
    element.
    """
    compiled = entry.get("compiled")
    return (
        int(bool(entry.get("executed"))),
        int(
            bool(entry.get("present"))
            and bool(entry.get("execution_error") or entry.get("compile_error"))
        ),
        int(compiled is not None and not compiled.get("deviceless", False)),
        int(compiled is not None),
        int(entry.get("lowered") is not None),
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
    named = _name_legs([(path, report.to_dict()) for path, report in legs])
    _check_distinct(named)
    _check_compatible(named)
    root = Path.cwd() if outputs_root is None else outputs_root
    config = _merged_config(named)
    reference = str(config.get("reference", "cpu"))

    by_nodeid: dict[str, list[tuple[_Leg, Mapping[str, Any]]]] = {}
    for leg in named:
        for test in leg.report["tests"]:
            by_nodeid.setdefault(test["nodeid"], []).append((leg, test))

    tests: list[dict[str, Any]] = []
    drifts: list[Drift] = []
    notes: list[str] = []
    comparisons = 0
    cache: dict[Path, Any] = {}
    for nodeid in sorted(by_nodeid):
        merged_test, compared = _merge_test(nodeid, by_nodeid[nodeid], root)
        drifted: list[Drift] = []
        for check, candidates in compared:
            for across in (_cross_leg_numerics, _cross_leg_emulations):
                found, said, n = across(nodeid, check, candidates, reference, tolerance_for, cache)
                drifted += found
                comparisons += n
                notes += said
        if drifted:  # a drift fails the test in the merged report, whatever each leg said
            merged_test["drifts"] = [d.to_dict() for d in drifted]
            if _outcome_rank(str(merged_test["outcome"])) < _outcome_rank("failed"):
                merged_test["outcome"] = "failed"
        drifts += drifted
        tests.append(merged_test)

    report = report_data(tests, config=config, environment=_merged_environment(named))
    report["summary"].update(_merged_numbers(named, report["tests"], config))
    report["legs"] = _leg_records(named)
    mixed = mixed_versions(report["legs"])
    if mixed:  # a key only where the legs differ: other merged reports are unchanged
        report["mixed_versions"] = mixed
    report["drifts"] = [d.to_dict() for d in drifts]
    report["notes"] = notes
    report["comparisons"] = comparisons
    audits = [(leg.name, leg.report["audit"]) for leg in named
              if isinstance(leg.report.get("audit"), Mapping)]  # fmt: skip
    if audits:  # --jaxport-audit: one audit of the union of the legs' computations
        try:
            report["audit"] = merge_audits(audits, migrate_to=config.get("migrate_to") or ())
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise MergeError(f"malformed audit section in a leg: {e!r}") from None
    return MergeResult(
        document=built(report),
        report=report,
        drifts=tuple(drifts),
        notes=tuple(notes),
        comparisons=comparisons,
    )


def _merged_numbers(
    legs: Sequence[_Leg], tests: Sequence[Mapping[str, Any]], config: Mapping[str, Any]
) -> dict[str, Any]:
    """The three numbers over the union of the legs' merged entries: each platform's runtime
    share from the leg whose entry won, the rewrite estimate with the legs' cost model
    (``[tool.jaxport.cost]``, which they must share), and their tooling scans joined.
    ``pytest_jaxport_rewrite_cost`` hooks are pytest's: ``jaxport merge`` does not run them."""
    first: tuple[_Leg, Mapping[str, Any]] | None = None
    for leg in legs:
        recorded = leg.report.get("summary", {}).get("cost_model")
        if not isinstance(recorded, Mapping):
            continue
        if first is None:
            first = (leg, recorded)
        elif dict(recorded) != dict(first[1]):
            raise MergeError(
                f"{leg.path}: cost model ([tool.jaxport.cost]) {_short(dict(recorded))} differs "
                f"from {first[0].path}'s {_short(dict(first[1]))}; legs of one merge must share "
                "[tool.jaxport]"
            )
    values = {}
    for key in COST_KEYS:
        value = first[1].get(key) if first is not None else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            values[key] = float(value)
    migrate_to = config.get("migrate_to")
    model = CostModel(**values)
    numbers = suite_numbers(
        checks_of(tests),
        migrate_to=DEFAULT_MIGRATE_TO if not isinstance(migrate_to, list) else migrate_to,
        model=model,
        tooling=_merged_tooling(legs),
    )
    numbers["cost_model"] = dataclasses.asdict(model)
    return numbers


def _merged_tooling(legs: Sequence[_Leg]) -> dict[str, Any] | None:
    """The legs' tooling scans as one: every assumption once (legs scan the same project)."""
    scans = [
        t for leg in legs if isinstance(t := leg.report.get("summary", {}).get("tooling"), Mapping)
    ]
    if not scans:
        return None
    found: dict[tuple[str, int, str], Assumption] = {}
    for scan in scans:
        for data in scan.get("assumptions") or ():
            try:
                assumption = Assumption.from_dict(data)
            except ValueError as e:
                raise MergeError(f"malformed tooling assumption in a leg: {e}") from None
            found.setdefault((assumption.file, assumption.line, assumption.rule), assumption)
    assumptions = sorted(found.values())
    return {
        "assumptions": [a.to_dict() for a in assumptions],
        "by_rule": summarize(assumptions),
        "files_listed": max(int(s.get("files_listed") or 0) for s in scans),
        "files_read": max(int(s.get("files_read") or 0) for s in scans),
        "source": next((s["source"] for s in scans if s.get("source")), None),
    }


def _name_legs(legs: Sequence[tuple[Path, Mapping[str, Any]]]) -> list[_Leg]:
    names = [path.name for path, _ in legs]
    clash = {n for n in names if names.count(n) > 1}
    return [
        _Leg(name=path.as_posix() if path.name in clash else path.name, path=path, report=data)
        for path, data in legs
    ]


def _check_distinct(legs: Sequence[_Leg]) -> None:
    """Refuse a leg given twice: the same file, or an identical report (a copy): it would
    count its tests and its numbers twice."""
    seen: dict[object, _Leg] = {}
    for leg in legs:
        text = json.dumps(leg.report, sort_keys=True)
        for key, how in ((leg.path.resolve(), "the same file"), (text, "an identical report")):
            other = seen.setdefault(key, leg)
            if other is leg:
                continue
            given = "given twice" if str(other.path) == str(leg.path) else (
                f"the same leg as {other.path} ({how})")  # fmt: skip
            raise MergeError(f"{leg.path}: {given}; give each leg once")


def _config_conflicts(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The ``config`` keys two legs must agree on and do not, sorted."""
    conflicts = []
    for key in sorted(ours.keys() | theirs.keys()):
        if key in PER_LEG_CONFIG_KEYS:
            continue
        a, b = ours.get(key), theirs.get(key)
        if key in WHERE_SET_CONFIG_KEYS and (a is None or b is None):
            continue
        if a != b:
            conflicts.append(key)
    return conflicts


def _check_compatible(legs: Sequence[_Leg]) -> None:
    first = legs[0]
    version = first.report.get("schema_version")
    if version != SCHEMA_VERSION:
        raise MergeError(
            f"{first.path}: schema_version {version!r} is not supported "
            f"(this pytest-jaxport {__version__} reads version {SCHEMA_VERSION})"
        )
    shared = first.report["config"]
    for leg in legs[1:]:
        other = leg.report.get("schema_version")
        if other != version:
            raise MergeError(
                f"{leg.path}: schema_version {other!r} differs from {first.path}'s {version!r}"
            )
        theirs = leg.report["config"]
        keys = _config_conflicts(shared, theirs)
        if keys:
            detail = "; ".join(
                f"{k}: {_short(theirs.get(k))} here, {_short(shared.get(k))} in {first.path}"
                for k in keys
            )
            raise MergeError(
                f"{leg.path}: project config differs from {first.path} ({detail}); legs of one "
                "merge must share [tool.jaxport] (only platforms, compile and emulate may "
                "differ per leg)"
            )


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True) if value is not None else "unset"
    return text if len(text) <= 60 else text[:57] + "..."


def _merged_config(legs: Sequence[_Leg]) -> dict[str, Any]:
    configs = [leg.report["config"] for leg in legs]
    config = dict(configs[0])
    for key in ("platforms", "compile", "emulate"):
        if any(key in c for c in configs):
            config[key] = ordered_platforms(p for c in configs for p in c.get(key) or [])
    for key in WHERE_SET_CONFIG_KEYS:
        config[key] = next((c[key] for c in configs if c.get(key) is not None), None)
    return config


def _merged_environment(legs: Sequence[_Leg]) -> dict[str, Any]:
    envs = [leg.report["environment"] for leg in legs]
    common = {
        k: v
        for k, v in envs[0].items()
        if k != "present_platforms" and all(e.get(k) == v for e in envs[1:])
    }
    present = ordered_platforms(p for e in envs for p in e.get("present_platforms", []))
    return {**common, "present_platforms": present}


def _leg_records(legs: Sequence[_Leg]) -> list[dict[str, Any]]:
    """One record per original leg; a merged report passed in contributes its own legs."""
    records: dict[str, dict[str, Any]] = {}
    for leg in legs:
        inherited = leg.report.get("legs")
        if isinstance(inherited, list) and inherited:
            for record in inherited:
                records.setdefault(str(record.get("leg")), dict(record))
            continue
        env = leg.report["environment"]
        records.setdefault(
            leg.name,
            {
                "leg": leg.name,
                "platforms": list(leg.report["config"].get("platforms", [])),
                "present_platforms": list(env.get("present_platforms", [])),
                "environment": dict(env),
                "tool_version": leg.report.get("tool", {}).get("version"),
            },
        )
    return list(records.values())


VERSION_KEYS = (TOOL_NAME, "jax", "jaxlib", "python")
"""What a leg ran with, which legs of one merge should share: counts and numerics from
different releases can differ for reasons other than the code."""


def mixed_versions(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """``{"jax": {"leg-a.json": "0.10.2", "leg-b.json": "0.12.0"}}``: each of
    :data:`VERSION_KEYS` the legs (``report["legs"]`` records) do not share, per leg."""
    mixed = {}
    for key in VERSION_KEYS:
        found = {
            str(r.get("leg")): str(v)
            for r in records
            if (v := r.get("tool_version") if key == TOOL_NAME
                else r.get("environment", {}).get(key)) is not None
        }  # fmt: skip
        if len(set(found.values())) > 1:
            mixed[key] = found
    return mixed


_OUTCOME_RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}


def _outcome_rank(outcome: str) -> int:
    return _OUTCOME_RANK.get(outcome, 3)  # unknown outcomes (a crashed worker) rank worst


_Compared = tuple[dict[str, Any], dict[str, list[_Candidate]]]


def _merge_test(
    nodeid: str, seen: Sequence[tuple[_Leg, Mapping[str, Any]]], root: Path
) -> tuple[dict[str, Any], list[_Compared]]:
    """The merged test, and per check its merged dict with every leg's platform entries."""
    legs_outcome: dict[str, str] = {}
    for leg, test in seen:
        inherited = test.get("legs")
        if isinstance(inherited, Mapping) and inherited:
            for name, outcome in inherited.items():
                legs_outcome.setdefault(str(name), str(outcome))
        else:
            legs_outcome.setdefault(leg.name, str(test.get("outcome", "passed")))
    worst = max(seen, key=lambda s: _outcome_rank(str(s[1].get("outcome", "passed"))))
    merged: dict[str, Any] = {
        "nodeid": nodeid,
        "outcome": worst[1].get("outcome", "passed"),
        "legs": legs_outcome,
    }
    for key in ("error", "crashed"):
        if worst[1].get(key):
            merged[key] = worst[1][key]

    check_names = list(dict.fromkeys(c["name"] for _, t in seen for c in t.get("checks", [])))
    checks = []
    winners: dict[tuple[str, str], _Leg] = {}
    emulators: dict[tuple[str, str], _Leg] = {}
    compared: list[_Compared] = []
    for name in check_names:
        per_leg = [(leg, c) for leg, t in seen for c in t.get("checks", []) if c["name"] == name]
        # The first leg that traced it: another leg's "could not be traced here" is moot.
        first = next((c for _, c in per_leg if c["platforms"]), per_leg[0][1])
        platforms: dict[str, Any] = {}
        candidates: dict[str, list[_Candidate]] = {}
        for leg, check in per_leg:
            for platform, entry in check["platforms"].items():
                candidates.setdefault(platform, []).append(_Candidate(leg=leg, entry=entry))
        for platform in ordered_platforms(candidates):
            best = max(candidates[platform], key=lambda c: fidelity(c.entry))
            winners[(name, platform)] = best.leg
            # An emulation is never the platform's fidelity: the entry keeps it from the leg
            # that emulated (the winner's own where it emulated too).
            emulating = [c for c in candidates[platform] if c.entry.get("emulated")]
            emulated = best if best in emulating else next(iter(emulating), None)
            if emulated is not None:
                emulators[(name, platform)] = emulated.leg
            platforms[platform] = _provenance(best, root, emulated)
        merged_check = {k: v for k, v in first.items() if k != "platforms"}
        merged_check["platforms"] = platforms
        checks.append(merged_check)
        compared.append((merged_check, candidates))
    merged["checks"] = checks
    merged["violations"] = _winning_violations(seen, winners, emulators)
    return merged, compared


EMULATION_ENTRY_KEYS = ("emulated", "emulated_numerics", "emulated_outputs", "emulated_leg")
"""A platform entry's emulation: kept from the leg that emulated, whichever leg won."""


def _provenance(
    candidate: _Candidate, root: Path, emulated: _Candidate | None = None
) -> dict[str, Any]:
    """The winning entry with its leg named, its emulation from ``emulated``'s leg, and
    saved outputs' paths relative to ``root``."""
    entry = {k: v for k, v in candidate.entry.items() if k not in EMULATION_ENTRY_KEYS}
    entry["leg"] = entry.get("leg") or candidate.leg.name
    if entry.get("outputs"):
        entry["outputs"] = _relative(candidate, "outputs", root)
    if emulated is not None:
        entry.update({k: emulated.entry[k] for k in EMULATION_ENTRY_KEYS if k in emulated.entry})
        entry["emulated_leg"] = emulated.entry.get("emulated_leg") or emulated.leg.name
        if emulated.entry.get("emulated_outputs"):
            entry["emulated_outputs"] = _relative(emulated, "emulated_outputs", root)
    return entry


def _relative(candidate: _Candidate, key: str, root: Path) -> str:
    """A saved outputs path of ``candidate``'s leg (relative to its report), from ``root``."""
    absolute = candidate.leg.path.parent / str(candidate.entry[key])
    return Path(os.path.relpath(absolute, root)).as_posix()


def _winning_violations(
    seen: Sequence[tuple[_Leg, Mapping[str, Any]]],
    winners: Mapping[tuple[str, str], _Leg],
    emulators: Mapping[tuple[str, str], _Leg],
) -> list[dict[str, Any]]:
    """Violations of the leg whose entry won (an emulation's: of the leg whose emulation the
    entry keeps); ones about no merged entry, from the first leg."""
    kept: list[dict[str, Any]] = []
    keys: set[str] = set()
    first = seen[0][0]
    for leg, test in seen:
        for violation in test.get("violations", []):
            owners = emulators if violation.get("key") in EMULATED_KEYS else winners
            owner = owners.get((str(violation.get("check")), str(violation.get("platform"))))
            if (owner or first) is not leg:
                continue
            tagged = {**violation, "leg": violation.get("leg") or leg.name}
            key = json.dumps({k: v for k, v in tagged.items() if k != "leg"}, sort_keys=True)
            if key not in keys:
                keys.add(key)
                kept.append(tagged)
    return kept


def _cross_leg_numerics(
    nodeid: str,
    merged_check: dict[str, Any],
    candidates: Mapping[str, Sequence[_Candidate]],
    reference: str,
    tolerance_for: ToleranceFor,
    cache: dict[Path, Any],
) -> tuple[list[Drift], list[str], int]:
    """Compare every saved output of one check with the reference's; set winners' numerics."""
    check = str(merged_check["name"])
    saved = [
        (platform, c)
        for platform in ordered_platforms(candidates)
        for c in candidates[platform]
        if c.entry.get("executed") and c.entry.get("outputs")
    ]
    unsaved = [
        (platform, c)
        for platform in candidates
        for c in candidates[platform]
        if c.entry.get("executed") and not c.entry.get("outputs")
    ]
    notes: list[str] = []
    if not saved or (len(saved) == 1 and not unsaved):
        return [], notes, 0  # nothing to compare with
    ref_platform = reference if any(p == reference for p, _ in saved) else saved[0][0]
    ref_candidate = next(c for p, c in saved if p == ref_platform)
    ref_outputs = _outputs(nodeid, check, ref_platform, ref_candidate, cache)
    ref_leg = ref_candidate.entry.get("leg") or ref_candidate.leg.name
    if ref_platform != reference and len(saved) > 1:
        notes.append(
            f"{nodeid} check {check!r}: no leg saved outputs of the reference platform "
            f"{reference}; compared with {ref_platform} ({ref_leg})"
        )
    for platform, candidate in unsaved:
        leg = candidate.entry.get("leg") or candidate.leg.name
        notes.append(
            f"{nodeid} check {check!r}: {platform} ran on {leg} but its outputs were not saved "
            "(run that leg with --jaxport-save-outputs); not compared across legs"
        )
    drifts: list[Drift] = []
    comparisons = 0
    merged_check["reference"] = ref_platform
    merged_check["reference_leg"] = ref_leg
    merged_check["note"] = None  # a leg's in-process note ("only cpu executed here") is moot
    for platform, candidate in saved:
        if candidate is ref_candidate:
            continue
        comparisons += 1
        leg = candidate.entry.get("leg") or candidate.leg.name
        same = platform == ref_platform
        comparison = compare(
            ref_outputs,
            _outputs(nodeid, check, platform, candidate, cache),
            reference_platform=f"{ref_platform}@{ref_leg}" if same else ref_platform,
            platform=f"{platform}@{leg}" if same else platform,
            tolerance=_with_overrides(
                tolerance_for,
                platform,
                merged_check.get("tolerance"),
                gradient=merged_check.get("transform") in ("grad", "jvp"),
            ),
        )
        entry = merged_check["platforms"][platform]
        if entry.get("leg") == leg and not same:
            entry["numerics"] = comparison.to_dict()
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
    merged_check: dict[str, Any],
    candidates: Mapping[str, Sequence[_Candidate]],
    reference: str,
    tolerance_for: ToleranceFor,
    cache: dict[Path, Any],
) -> tuple[list[Drift], list[str], int]:
    """Each saved emulation against the platform it stands in for, where a leg ran that
    platform and saved its outputs (the emulation's validation on real hardware), and
    against the reference where only another leg ran that (its own leg compared in-process)."""
    check = str(merged_check["name"])
    executed = {
        platform: [c for c in found if c.entry.get("executed") and c.entry.get("outputs")]
        for platform, found in candidates.items()
    }
    ref_platform = str(merged_check.get("reference") or reference)
    references = executed.get(ref_platform, [])
    drifts: list[Drift] = []
    comparisons = 0
    for platform in ordered_platforms(candidates):
        for emulating in (c for c in candidates[platform] if c.entry.get("emulated_outputs")):
            leg = emulating.entry.get("emulated_leg") or emulating.leg.name
            label = emulated_label(platform)
            emulated = _outputs(nodeid, check, label, emulating, cache, key="emulated_outputs")
            tolerance = _with_overrides(
                tolerance_for, platform, merged_check.get("tolerance"),
                gradient=merged_check.get("transform") in ("grad", "jvp"),
            )  # fmt: skip
            against = [(c, platform, True) for c in executed.get(platform, [])]
            if references and all(c.leg is not emulating.leg for c in references):
                against.append((references[0], ref_platform, False))
            for other, other_platform, hardware in against:
                other_leg = other.entry.get("leg") or other.leg.name
                comparison = compare(
                    _outputs(nodeid, check, other_platform, other, cache),
                    emulated,
                    reference_platform=f"{other_platform}@{other_leg}",
                    platform=f"{label}@{leg}",
                    tolerance=tolerance,
                )
                comparisons += 1
                entry = merged_check["platforms"][platform]
                if not hardware and entry.get("emulated_leg") == leg:
                    entry["emulated_numerics"] = comparison.to_dict()
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
    cache: dict[Path, Any],
    *,
    key: str = "outputs",
) -> Outputs:
    path = candidate.leg.path.parent / str(candidate.entry[key])
    if path not in cache:
        try:
            cache[path] = load_outputs(path)
        except OutputsError as e:
            raise MergeError(
                f"{candidate.leg.path}: outputs of {nodeid} check {check!r} on {platform}: {e}"
            ) from None
    found: Outputs = cache[path]
    return found


# -- counts: what diff and the baseline ratchet -----------------------------------------------
