"""Join CI legs into one report, diff two reports, and ratchet counts against a baseline (pure).

A CI matrix runs one leg per backend; each leg writes its own JSON report (and, with
``--jaxport-save-outputs``, one ``.npz`` per executed check and platform). :func:`merge`
makes one report of them:

- **Which leg wins.** For each test, check and platform, the entry of the leg that saw the
  platform at the highest fidelity (:func:`fidelity`): executed > present but failed to
  compile or run > compiled on the device > compiled deviceless > lowered > failed to lower.
  Ties go to the leg given first. Every merged platform entry says where it came from
  (``"leg": "leg-gpu.json"``); a test keeps each leg's outcome (``"legs"``), its outcome is
  the worst of them, and its violations are those of the legs whose entry won.
- **Numerics across legs.** Each executed platform whose outputs a leg saved is compared,
  with the project's tolerances, against the reference platform's outputs (from whichever
  leg ran it; the first such leg), so a GPU leg's results are checked against the CPU leg's.
  Every difference is a :class:`Drift`.
- **What must agree.** Legs must share ``schema_version``, the tool, and the project
  configuration: every key of the report's ``config`` section except
  :data:`PER_LEG_CONFIG_KEYS` (the platforms a leg lowers for and compiles, which
  ``--jaxport-platforms`` and ``--jaxport-compile`` set per leg, and where the configuration
  was read from); :data:`WHERE_SET_CONFIG_KEYS` (the GPU ``target``) only between the legs
  that record them.

:func:`diff` compares two reports (or baselines) count by count; :func:`baseline_of` and
:func:`compare_to_baseline` implement ``--jaxport-baseline``. Counts come from
:data:`COUNTERS`, the one place to add a new ratcheted number (rewrite days, say).

Example::

    >>> result = merge([(Path("leg-cpu.json"), cpu), (Path("leg-gpu.json"), gpu)],
    ...                tolerance_for=tolerance_from_config(cpu["config"]))  # doctest: +SKIP
    >>> result.ok, [d.describe() for d in result.drifts]                    # doctest: +SKIP

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_jaxport import __version__
from pytest_jaxport.audit_report import AuditChange
from pytest_jaxport.config import DEFAULT_MIGRATE_TO, ConfigError, ProjectConfig, parse_project
from pytest_jaxport.cost import COST_KEYS, CostModel
from pytest_jaxport.numerics import Tolerance, compare, default_tolerance, gradient_tolerance
from pytest_jaxport.outputs import OutputsError, load_outputs
from pytest_jaxport.report import (
    SCHEMA_VERSION,
    TOOL_NAME,
    ReportError,
    build_report,
    load,
    suite_numbers,
)
from pytest_jaxport.targets import PLATFORMS
from pytest_jaxport.tooling import Assumption, summarize

PER_LEG_CONFIG_KEYS: frozenset[str] = frozenset({"platforms", "compile", "source"})
"""``config`` keys that may differ between legs; every other key must be equal.

``platforms`` and ``compile`` are what ``--jaxport-platforms`` / ``--jaxport-compile`` set per
leg; ``source`` only says which file the configuration was read from. Budgets, tolerances,
the reference platform and the GPU target description must agree, or the legs measured
different things.
"""

WHERE_SET_CONFIG_KEYS: frozenset[str] = frozenset({"target"})
"""``config`` keys compared only between legs that set them (``target`` is recorded only by
legs that compile for cuda)."""

BASELINE_KIND = "baseline"
BASELINE_VERSION = 1
LEVELS: tuple[str, ...] = ("lowered", "compiled")
"""Census levels a platform entry may carry, each a census dict under its own key."""

ToleranceFor = Callable[[str, str], Tolerance]
"""``(platform, dtype name) -> Tolerance`` for comparing that platform with the reference."""


class MergeError(ValueError):
    """Legs cannot be merged, or a file cannot be used; one line naming the file."""


# -- tolerances -------------------------------------------------------------------------------


def tolerance_from_project(project: ProjectConfig) -> ToleranceFor:
    """The project's ``[tool.jaxport.tolerance]`` tables over JAX's dtype defaults."""
    resolved = project.resolve()

    def tolerance_for(platform: str, dtype: str) -> Tolerance:
        configured = resolved.tolerance(platform, dtype)
        default = default_tolerance(dtype)
        return Tolerance(
            rtol=default.rtol if configured.rtol is None else configured.rtol,
            atol=default.atol if configured.atol is None else configured.atol,
        )

    return tolerance_for


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
class Drift:
    """A check whose outputs on one leg's platform differ from the reference's."""

    nodeid: str
    check: str
    platform: str
    leg: str
    reference: str
    reference_leg: str
    messages: tuple[str, ...]

    def describe(self) -> str:
        head = (
            f"{self.nodeid} check {self.check!r}: {self.platform} ({self.leg}) differs from "
            f"{self.reference} ({self.reference_leg})"
        )
        return "\n".join([head, *(f"  {m}" for m in self.messages)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "check": self.check,
            "platform": self.platform,
            "leg": self.leg,
            "reference": self.reference,
            "reference_leg": self.reference_leg,
            "messages": list(self.messages),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeResult:
    """The merged report, every cross-leg drift, and notes on what could not be compared."""

    report: dict[str, Any]
    drifts: tuple[Drift, ...] = ()
    notes: tuple[str, ...] = ()
    comparisons: int = 0
    """How many (check, platform, leg) outputs were compared with a reference's."""

    @property
    def ok(self) -> bool:
        """Whether every compared output matched."""
        return not self.drifts

    def text(self) -> str:
        """The drifts and notes, for the terminal (empty when there is nothing to say)."""
        lines: list[str] = []
        if self.drifts:
            lines.append(f"{len(self.drifts)} output drift(s) across legs:")
            lines += [d.describe() for d in self.drifts]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def markdown(self) -> str:
        """A section to append to the merged report's Markdown."""
        legs = self.report.get("legs", [])
        lines = ["### Legs", "", "| leg | platforms | present |", "|---|---|---|"]
        lines += [
            f"| `{leg['leg']}` | {', '.join(leg.get('platforms', []))} | "
            f"{', '.join(leg.get('present_platforms', [])) or '-'} |"
            for leg in legs
        ]
        lines += ["", "### Numerics across legs", ""]
        if not self.comparisons:
            lines.append("No saved outputs to compare (run the legs with --jaxport-save-outputs).")
        elif not self.drifts:
            lines.append(f"All {_count(self.comparisons, 'compared output')} match.")
        else:
            lines += ["| test | check | platform (leg) | vs reference (leg) | leaves |",
                      "|---|---|---|---|---|"]  # fmt: skip
            for d in self.drifts:
                leaves = "<br>".join(_md_cell(m) for m in d.messages)
                lines.append(
                    f"| `{d.nodeid}` | {d.check} | {d.platform} (`{d.leg}`) | "
                    f"{d.reference} (`{d.reference_leg}`) | {leaves} |"
                )
        if self.notes:
            lines += ["", *(f"- {_md_cell(n)}" for n in self.notes)]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Leg:
    name: str
    path: Path
    report: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    leg: _Leg
    entry: Mapping[str, Any]


def load_legs(paths: Sequence[Path]) -> list[tuple[Path, dict[str, Any]]]:
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
    legs: Sequence[tuple[Path, Mapping[str, Any]]],
    *,
    tolerance_for: ToleranceFor,
    outputs_root: Path | None = None,
) -> MergeResult:
    """One report from many legs; see the module docstring for the rules.

    ``outputs_root`` is the folder the merged report will be written to (default: the
    current directory): the ``outputs`` paths of merged entries are rewritten relative to it.
    Raises :class:`MergeError` for incompatible legs or unreadable outputs.
    """
    if not legs:
        raise MergeError("nothing to merge: no leg reports given")
    named = _name_legs(legs)
    for leg in named:
        _check_shape(leg)
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
            found, said, n = _cross_leg_numerics(
                nodeid, check, candidates, reference, tolerance_for, cache
            )
            drifted += found
            comparisons += n
            notes += said
        if drifted:  # a drift fails the test in the merged report, whatever each leg said
            merged_test["drifts"] = [d.to_dict() for d in drifted]
            if _outcome_rank(str(merged_test["outcome"])) < _outcome_rank("failed"):
                merged_test["outcome"] = "failed"
        drifts += drifted
        tests.append(merged_test)

    report = build_report(tests, config=config, environment=_merged_environment(named))
    report["summary"].update(_merged_numbers(named, report["tests"], config))
    report["legs"] = _leg_records(named)
    report["drifts"] = [d.to_dict() for d in drifts]
    report["notes"] = notes
    report["comparisons"] = comparisons
    audits = [(leg.name, leg.report["audit"]) for leg in named
              if isinstance(leg.report.get("audit"), Mapping)]  # fmt: skip
    if audits:  # --jaxport-audit: one audit of the union of the legs' computations
        from pytest_jaxport.audit_report import merge_audits

        try:
            report["audit"] = merge_audits(audits, migrate_to=config.get("migrate_to") or ())
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise MergeError(f"malformed audit section in a leg: {e!r}") from None
    return MergeResult(
        report=report, drifts=tuple(drifts), notes=tuple(notes), comparisons=comparisons
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
    return suite_numbers(
        tests,
        migrate_to=DEFAULT_MIGRATE_TO if not isinstance(migrate_to, list) else migrate_to,
        model=CostModel(**values),
        tooling=_merged_tooling(legs),
    )


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


def _malformed(leg: _Leg, what: str) -> MergeError:
    return MergeError(f"{leg.path}: malformed pytest-jaxport report: {what}")


def _check_shape(leg: _Leg) -> None:
    data = leg.report
    if not isinstance(data, Mapping):
        raise MergeError(f"{leg.path}: not a pytest-jaxport report")
    tool = data.get("tool")
    if not isinstance(tool, Mapping) or tool.get("name") != TOOL_NAME:
        raise MergeError(f"{leg.path}: not a pytest-jaxport report")
    if data.get("kind") == BASELINE_KIND:
        raise MergeError(f"{leg.path}: a baseline, not a report: merge the legs' reports")
    for key in ("config", "environment"):
        if not isinstance(data.get(key), Mapping):
            raise _malformed(leg, f"no {key!r} section")
    if not isinstance(data.get("tests"), list):
        raise _malformed(leg, "no 'tests' list")
    for test in data["tests"]:
        if not isinstance(test, Mapping) or not isinstance(test.get("nodeid"), str):
            raise _malformed(leg, f"a test without a node id: {str(test)[:80]}")
        if not isinstance(test.get("checks", []), list):
            raise _malformed(leg, f"{test['nodeid']}: 'checks' is not a list")
        for check in test.get("checks", []):
            if (
                not isinstance(check, Mapping)
                or not isinstance(check.get("name"), str)
                or not isinstance(check.get("platforms"), Mapping)
                or not all(isinstance(e, Mapping) for e in check["platforms"].values())
            ):
                raise _malformed(leg, f"{test['nodeid']}: a check without a name or platforms")


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
                "merge must share [tool.jaxport] (only platforms and compile may differ per leg)"
            )


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True) if value is not None else "unset"
    return text if len(text) <= 60 else text[:57] + "..."


def _ordered_platforms(names: Iterable[str]) -> list[str]:
    seen = list(dict.fromkeys(names))
    known = [p for p in PLATFORMS if p in seen]
    return known + sorted(p for p in seen if p not in PLATFORMS)


def _merged_config(legs: Sequence[_Leg]) -> dict[str, Any]:
    configs = [leg.report["config"] for leg in legs]
    config = dict(configs[0])
    for key in ("platforms", "compile"):
        if any(key in c for c in configs):
            config[key] = _ordered_platforms(p for c in configs for p in c.get(key) or [])
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
    present = _ordered_platforms(p for e in envs for p in e.get("present_platforms", []))
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
            },
        )
    return list(records.values())


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
        for platform in _ordered_platforms(candidates):
            best = max(candidates[platform], key=lambda c: fidelity(c.entry))
            winners[(name, platform)] = best.leg
            platforms[platform] = _provenance(best, root)
        merged_check = {k: v for k, v in first.items() if k != "platforms"}
        merged_check["platforms"] = platforms
        checks.append(merged_check)
        compared.append((merged_check, candidates))
    merged["checks"] = checks
    merged["violations"] = _winning_violations(seen, winners)
    return merged, compared


def _provenance(candidate: _Candidate, root: Path) -> dict[str, Any]:
    entry = dict(candidate.entry)
    entry["leg"] = entry.get("leg") or candidate.leg.name
    if entry.get("outputs"):
        absolute = candidate.leg.path.parent / str(entry["outputs"])
        entry["outputs"] = Path(os.path.relpath(absolute, root)).as_posix()
    return entry


def _winning_violations(
    seen: Sequence[tuple[_Leg, Mapping[str, Any]]], winners: Mapping[tuple[str, str], _Leg]
) -> list[dict[str, Any]]:
    """Violations of the leg whose entry won; ones about no merged entry, from the first leg."""
    kept: list[dict[str, Any]] = []
    keys: set[str] = set()
    first = seen[0][0]
    for leg, test in seen:
        for violation in test.get("violations", []):
            owner = winners.get((str(violation.get("check")), str(violation.get("platform"))))
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
        for platform in _ordered_platforms(candidates)
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


def _outputs(
    nodeid: str, check: str, platform: str, candidate: _Candidate, cache: dict[Path, Any]
) -> Any:
    path = candidate.leg.path.parent / str(candidate.entry["outputs"])
    if path not in cache:
        try:
            cache[path] = load_outputs(path)
        except OutputsError as e:
            raise MergeError(
                f"{candidate.leg.path}: outputs of {nodeid} check {check!r} on {platform}: {e}"
            ) from None
    return cache[path]


# -- counts: what diff and the baseline ratchet -----------------------------------------------

Counter = Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, float]]
"""``(platform entry, census dict of one level) -> {metric: value}``."""


def _layer_counts(entry: Mapping[str, Any], census: Mapping[str, Any]) -> dict[str, float]:
    return {"vendor": census.get("vendor", 0), "custom": census.get("custom", 0)}


def _library_counts(entry: Mapping[str, Any], census: Mapping[str, Any]) -> dict[str, float]:
    return {f"library.{name}": n for name, n in (census.get("libraries") or {}).items()}


COUNTERS: tuple[Counter, ...] = (_layer_counts, _library_counts)
"""Every ratcheted number. Rewrite days join here as one more counter (``rewrite_days``)."""

_LABELS = {"vendor": "vendor calls", "custom": "custom calls", "rewrite_days": "rewrite days"}


def metric_label(metric: str) -> str:
    """``vendor`` -> ``vendor calls``; ``library.cublas`` -> ``cublas calls``."""
    if metric.startswith("library."):
        return f"{metric.removeprefix('library.')} calls"
    return _LABELS.get(metric, metric.replace("_", " "))


def _counts(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Per level the counts of one platform entry; ``lowered: null`` when lowering failed."""
    levels: dict[str, Any] = {}
    for level in LEVELS:
        census = entry.get(level)
        if census is None:
            if level == "lowered":
                levels[level] = None
            continue
        values: dict[str, float] = {}
        for counter in COUNTERS:
            values.update(counter(entry, census))
        levels[level] = dict(sorted(values.items()))
    return levels


def _test_counts(checks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        str(check["name"]): {
            platform: _counts(entry)
            for platform, entry in sorted(check.get("platforms", {}).items())
        }
        for check in sorted(checks, key=lambda c: str(c["name"]))
    }


def baseline_of(report: Mapping[str, Any]) -> dict[str, Any]:
    """The committed-baseline form of a report: counts per test, check, platform and level.

    Small and stably ordered (sorted keys), so a baseline update reviews as a short diff.
    Tests without checks (skipped, or checking nothing) are left out.
    """
    if report.get("kind") == BASELINE_KIND:
        return dict(report)
    tests = {
        str(test["nodeid"]): _test_counts(test["checks"])
        for test in report.get("tests", [])
        if test.get("checks")
    }
    baseline: dict[str, Any] = {
        "schema_version": BASELINE_VERSION,
        "tool": {"name": TOOL_NAME},
        "kind": BASELINE_KIND,
        "tests": dict(sorted(tests.items())),
    }
    if isinstance(report.get("audit"), Mapping):  # --jaxport-audit: the suite's counts
        from pytest_jaxport.audit_report import audit_counts

        baseline["audit"] = audit_counts(report["audit"])
    return baseline


def baseline_json(baseline: Mapping[str, Any]) -> str:
    """The file text of a baseline: sorted keys, two-space indent, final newline."""
    return json.dumps(baseline, indent=2, sort_keys=True) + "\n"


def load_counts(path: Path) -> dict[str, Any]:
    """Read a report or a baseline, for ``jaxport diff`` and ``--jaxport-baseline``.

    Returns the baseline form (:func:`baseline_of`). Raises :class:`MergeError` naming the
    file when it is missing, truncated, foreign or of another schema version.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MergeError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MergeError(f"{path}: cannot be read: {e}") from None
    except json.JSONDecodeError as e:
        raise MergeError(f"{path}: not valid JSON (truncated?): {e}") from None
    if not isinstance(data, dict) or data.get("kind") != BASELINE_KIND:
        try:
            report = load(path)
            _check_shape(_Leg(name=path.name, path=path, report=report))
            return baseline_of(report)
        except ReportError as e:
            raise MergeError(str(e)) from None
        except (AttributeError, KeyError, TypeError) as e:
            raise MergeError(f"{path}: malformed pytest-jaxport report: {e!r}") from None
    tool = data.get("tool")
    if not isinstance(tool, dict) or tool.get("name") != TOOL_NAME:
        raise MergeError(f"{path}: not a pytest-jaxport baseline")
    if data.get("schema_version") != BASELINE_VERSION:
        raise MergeError(
            f"{path}: baseline schema_version {data.get('schema_version')!r} is not supported "
            f"(this pytest-jaxport {__version__} reads version {BASELINE_VERSION}); "
            "regenerate it with --jaxport-baseline-update"
        )
    if not isinstance(data.get("tests"), dict) or not all(
        isinstance(t, dict) for t in data["tests"].values()
    ):
        raise MergeError(f"{path}: malformed pytest-jaxport baseline: no 'tests' table")
    return data


ChangeKind = Literal["grew", "shrank", "stopped_lowering", "now_lowers"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One count of one check on one platform that differs between base and head."""

    nodeid: str
    check: str
    platform: str
    kind: ChangeKind
    level: str = "lowered"
    metric: str | None = None
    before: float | None = None
    after: float | None = None

    @property
    def fails(self) -> bool:
        """Growth, or a platform that no longer lowers (its counts became unknown)."""
        return self.kind in ("grew", "stopped_lowering")

    def describe(self, since: str = "") -> str:
        """``check 'mlp' on cuda: vendor calls grew 3 -> 5 (+2)`` (+ ``since``)."""
        where = f"check {self.check!r} on {self.platform}"
        then = "at the baseline" if since else "before"
        if self.kind == "stopped_lowering":
            return f"{where}: lowered {then}, fails to lower now"
        if self.kind == "now_lowers":
            return f"{where}: failed to lower {then}, lowers now"
        assert self.metric is not None
        assert self.before is not None
        assert self.after is not None
        delta = self.after - self.before
        level = "" if self.level == "lowered" else f" ({self.level})"
        return (
            f"{where}: {metric_label(self.metric)} {self.kind} {_num(self.before)} -> "
            f"{_num(self.after)} ({'+' if delta > 0 else '-'}{_num(abs(delta))}){level}"
            f"{' ' + since if since else ''}"
        )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _diff_test(nodeid: str, base: Mapping[str, Any], head: Mapping[str, Any]) -> list[Change]:
    changes: list[Change] = []
    for check in sorted(base.keys() & head.keys()):
        base_platforms, head_platforms = base[check], head[check]
        for platform in _ordered_platforms(base_platforms.keys() & head_platforms.keys()):
            before, after = base_platforms[platform], head_platforms[platform]
            if before.get("lowered") is not None and after.get("lowered", {}) is None:
                changes.append(
                    Change(nodeid=nodeid, check=check, platform=platform, kind="stopped_lowering")
                )
                continue
            if "lowered" in before and before["lowered"] is None and after.get("lowered"):
                changes.append(
                    Change(nodeid=nodeid, check=check, platform=platform, kind="now_lowers")
                )
                continue
            for level in LEVELS:
                old, new = before.get(level), after.get(level)
                if not old or not new:
                    continue
                for metric in sorted(old.keys() | new.keys()):
                    a, b = old.get(metric, 0), new.get(metric, 0)
                    if a != b:
                        kind: ChangeKind = "grew" if b > a else "shrank"
                        changes.append(
                            Change(nodeid=nodeid, check=check, platform=platform, kind=kind,
                                   level=level, metric=metric, before=a, after=b)
                        )  # fmt: skip
    return changes


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportDiff:
    """What changed between a base and a head report (or baseline)."""

    changes: tuple[Change, ...] = ()
    new_tests: tuple[str, ...] = ()
    removed_tests: tuple[str, ...] = ()
    new_checks: tuple[tuple[str, str], ...] = ()
    removed_checks: tuple[tuple[str, str], ...] = ()
    compared_tests: int = 0
    audit: tuple[AuditChange, ...] = ()
    """The suite audit's counts that changed (``--jaxport-audit`` on both sides)."""
    new_sites: tuple[tuple[str, str], ...] = ()
    """``(platform, site)``: the suite audit's sites the head has and the base has not."""
    removed_sites: tuple[tuple[str, str], ...] = ()
    audit_compared: bool = False
    """Whether both sides have audit counts (else the audit is not compared)."""

    @property
    def grew(self) -> bool:
        """Whether some count grew or some platform stopped lowering: ``jaxport diff`` exits 1."""
        return any(c.fails for c in self.changes) or any(c.grew for c in self.audit)

    @property
    def growth(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.fails)

    @property
    def shrinkage(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if not c.fails)

    def headline(self) -> str:
        text = (
            f"{len(self.growth)} grew, {len(self.shrinkage)} shrank, "
            f"{_count(len(self.new_tests), 'new test')}, "
            f"{_count(len(self.removed_tests), 'removed test')} "
            f"({_count(self.compared_tests, 'test')} compared)"
        )
        if self.audit_compared:
            grew = sum(c.grew for c in self.audit)
            text += (
                f"; suite audit: {grew} grew, {len(self.audit) - grew} shrank, "
                f"{_count(len(self.new_sites), 'new site')}, "
                f"{_count(len(self.removed_sites), 'removed site')}"
            )
        return text

    def audit_lines(self) -> list[str]:
        """The suite audit's changed counts (with the sites that moved them) and its new and
        removed sites, for the terminal."""
        lines = []
        for title, grew in (("suite audit grew", True), ("suite audit shrank", False)):
            changes = [c for c in self.audit if c.grew == grew]
            if changes:
                lines.append(f"{title}:")
                for change in changes:
                    lines.append(f"  {change.describe()}")
                    lines += [f"    {site.describe()}" for site in change.sites]
        for title, pairs in (("suite audit, new sites", self.new_sites),
                             ("suite audit, removed sites", self.removed_sites)):  # fmt: skip
            if pairs:
                lines.append(f"{title}:")
                lines += [f"  {platform}: {site}" for platform, site in pairs]
        return lines

    def text(self) -> str:
        """For the terminal: a headline, then each change, test and check added or removed."""
        lines = [f"jaxport diff: {self.headline()}"]
        for title, changes in (("grew", self.growth), ("shrank", self.shrinkage)):
            if changes:
                lines.append(f"{title}:")
                lines += [f"  {c.nodeid} {c.describe()}" for c in changes]
        for title, names in (("new tests", self.new_tests), ("removed tests", self.removed_tests)):
            if names:
                lines.append(f"{title}:")
                lines += [f"  {n}" for n in names]
        for title, pairs in (("new checks", self.new_checks),
                             ("removed checks", self.removed_checks)):  # fmt: skip
            if pairs:
                lines.append(f"{title}:")
                lines += [f"  {n} check {c!r}" for n, c in pairs]
        return "\n".join(lines + self.audit_lines())

    def markdown(self) -> str:
        """For a pull-request comment."""
        lines = ["### pytest-jaxport: counts against the base", "", self.headline() + ".", ""]
        if self.changes:
            lines += ["| | test | check | platform | count | base | head | change |",
                      "|---|---|---|---|---|---:|---:|---:|"]  # fmt: skip
            for c in (*self.growth, *self.shrinkage):
                mark = ":red_circle:" if c.fails else ":green_circle:"
                if c.metric is None:
                    what = "lowers" if c.kind == "now_lowers" else "fails to lower"
                    lines.append(
                        f"| {mark} | `{c.nodeid}` | {c.check} | {c.platform} | {what} | | | |"
                    )
                    continue
                assert c.before is not None
                assert c.after is not None
                level = "" if c.level == "lowered" else f" ({c.level})"
                delta = c.after - c.before
                lines.append(
                    f"| {mark} | `{c.nodeid}` | {c.check} | {c.platform} | "
                    f"{metric_label(c.metric)}{level} | {_num(c.before)} | {_num(c.after)} | "
                    f"{'+' if delta > 0 else '-'}{_num(abs(delta))} |"
                )
            lines.append("")
        for title, names in (("New tests", self.new_tests), ("Removed tests", self.removed_tests)):
            if names:
                lines += [f"**{title}:** " + ", ".join(f"`{n}`" for n in names), ""]
        if self.audit:
            lines += ["#### Suite audit", "", "| | platform | count | base | head | change |",
                      "|---|---|---|---:|---:|---:|"]  # fmt: skip
            for a in self.audit:
                mark = ":red_circle:" if a.grew else ":green_circle:"
                lines.append(
                    f"| {mark} | {a.platform} | {_md_cell(metric_label(a.metric))} | {a.before} | "
                    f"{a.after} | {a.after - a.before:+d} |"
                )
            lines.append("")
        for title, pairs in (("Suite audit, new sites", self.new_sites),
                             ("Suite audit, removed sites", self.removed_sites)):  # fmt: skip
            if pairs:
                lines += [f"**{title}:**", ""]
                lines += [f"- {p}: `{_md_cell(site)}`" for p, site in pairs]
                lines.append("")
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def diff(base: Mapping[str, Any], head: Mapping[str, Any]) -> ReportDiff:
    """What grew and shrank from ``base`` to ``head`` (reports or baselines, in any mix).

    Counts are compared per test, check, platform and level, at each level both sides have
    (a compiled census is never compared with a lowered one). New and removed tests and
    checks are listed; they are not growth.
    """
    from pytest_jaxport.audit_report import audit_changes, site_changes

    base_counts, head_counts = baseline_of(base), baseline_of(head)
    old, new = base_counts["tests"], head_counts["tests"]
    base_audit, head_audit = base_counts.get("audit"), head_counts.get("audit")
    compared = False
    audit: list[AuditChange] = []
    added: list[tuple[str, str]] = []
    removed: list[tuple[str, str]] = []
    if isinstance(base_audit, Mapping) and isinstance(head_audit, Mapping):
        compared = True
        audit = audit_changes(base_audit, head_audit)
        added, removed = site_changes(base_audit, head_audit)
    changes: list[Change] = []
    new_checks: list[tuple[str, str]] = []
    removed_checks: list[tuple[str, str]] = []
    common = sorted(old.keys() & new.keys())
    for nodeid in common:
        changes += _diff_test(nodeid, old[nodeid], new[nodeid])
        new_checks += [(nodeid, c) for c in sorted(new[nodeid].keys() - old[nodeid].keys())]
        removed_checks += [(nodeid, c) for c in sorted(old[nodeid].keys() - new[nodeid].keys())]
    return ReportDiff(
        changes=tuple(changes),
        new_tests=tuple(sorted(new.keys() - old.keys())),
        removed_tests=tuple(sorted(old.keys() - new.keys())),
        new_checks=tuple(new_checks),
        removed_checks=tuple(removed_checks),
        compared_tests=len(common),
        audit=tuple(audit),
        new_sites=tuple(added),
        removed_sites=tuple(removed),
        audit_compared=compared,
    )


# -- baselines --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Growth:
    """What ``--jaxport-baseline`` found for one test: growth fails it, news do not."""

    nodeid: str
    message: str
    fails: bool
    change: Change | None = None


def compare_to_baseline(
    baseline: Mapping[str, Any], nodeid: str, checks: Sequence[Mapping[str, Any]]
) -> list[Growth]:
    """Compare one test's checks (as in a report) with the baseline's counts.

    ``[]`` when nothing grew and nothing is new. A test or check missing from the baseline
    gives one ``fails=False`` entry; every grown count, and every platform that no longer
    lowers, a ``fails=True`` one, e.g. ``check 'mlp' on cuda: vendor calls grew 3 -> 5 (+2)
    since the baseline``. Counts that shrank are not reported: update the baseline to keep them.
    """
    head = _test_counts(checks)
    base = baseline.get("tests", {}).get(nodeid)
    if base is None:
        if not head:
            return []
        return [
            Growth(
                nodeid=nodeid,
                message=f"{nodeid} is not in the baseline (new test): not compared; "
                "--jaxport-baseline-update records it",
                fails=False,
            )
        ]
    found = [
        Growth(
            nodeid=nodeid,
            message=f"check {name!r} is not in the baseline (new check): not compared",
            fails=False,
        )
        for name in sorted(head.keys() - base.keys())
    ]
    found += [
        Growth(nodeid=nodeid, message=c.describe("since the baseline"), fails=True, change=c)
        for c in _diff_test(nodeid, base, head)
        if c.fails
    ]
    return found


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
