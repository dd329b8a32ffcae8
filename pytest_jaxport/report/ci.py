"""One CI leg inside pytest: saved outputs, the leg's facts, and the baseline ratchet.

The session calls into this module; it keeps ``--jaxport-save-outputs``,
``--jaxport-baseline``, ``--jaxport-baseline-update`` and the ``$GITHUB_STEP_SUMMARY``
append (bounded by :func:`append_step_summary`) out of the core judging code. Nothing
here imports JAX or NumPy at module import: :mod:`pytest_jaxport.report.merge` and
:mod:`pytest_jaxport.report.outputs` are imported only when the options are used. Nor the
report's types (:mod:`~pytest_jaxport.report.baseline`, :mod:`~pytest_jaxport.report.document`):
every test of a check session reaches this module, and only a baseline or a report needs them.

Where saved outputs go: every process (each pytest-xdist worker too, on the shared
filesystem) writes its checks' ``.npz`` files straight into ``DIR``; each platform entry of a
check records ``"outputs": PATH``, relative to the folder of the JSON report
(``--jaxport-report=PATH.json``), or relative to ``DIR`` when there is no JSON report.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_jaxport.model.budget import Setting, Violation
from pytest_jaxport.model.config import (
    BudgetTable,
    ConfigError,
    ProjectConfig,
    Resolved,
    ToleranceSetting,
)
from pytest_jaxport.model.emulation import emulated_label
from pytest_jaxport.model.jsontypes import (
    Json,
    read_table,
)
from pytest_jaxport.model.memory import MemoryLimit
from pytest_jaxport.model.platforms import PLATFORMS
from pytest_jaxport.model.probe import Probe
from pytest_jaxport.report.errors import MergeError

if TYPE_CHECKING:
    from pytest_jaxport.model.compare import Outputs
    from pytest_jaxport.report.baseline import Counts
    from pytest_jaxport.report.document import Environment, Report
    from pytest_jaxport.report.entries import TestEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class CISettings:
    """What the CI options asked for, with paths made absolute."""

    outputs_dir: Path | None = None
    """``--jaxport-save-outputs``: where each check's outputs go."""
    outputs_base: Path | None = None
    """The folder ``outputs`` paths in the report are relative to."""
    baseline_path: Path | None = None
    baseline_name: str = ""
    """``--jaxport-baseline``'s FILE as given (what messages name, and what to run again)."""
    baseline: Counts | None = None
    """The baseline's counts (``merge.baseline_of`` form); ``None`` when not comparing."""
    baseline_update: bool = False
    baseline_strict: bool = False
    """``--jaxport-baseline-strict``: a baseline that does not match the run fails it."""


def ci_settings(option: Callable[[str], object], here: Path) -> CISettings:
    """Read the options (``option(dest)``, paths relative to ``here``); a
    :class:`ConfigError` naming the file for an unusable one."""
    outputs_dir = outputs_base = None
    value = _text(option("jaxport_save_outputs"))
    if value:
        outputs_dir = (here / value).resolve()
        if outputs_dir.exists() and not outputs_dir.is_dir():
            raise ConfigError(f"--jaxport-save-outputs {value}: {outputs_dir} is not a folder")
        given = option("jaxport_report")
        reports = [str(r) for r in given if r != "-"] if isinstance(given, list | tuple) else []
        report = next((r for r in reports if Path(r).suffix == ".json"), None)
        outputs_base = outputs_dir if report is None else (here / report).resolve().parent
    update = bool(option("jaxport_baseline_update"))
    name = _text(option("jaxport_baseline"))
    if update and not name:
        raise ConfigError(
            "--jaxport-baseline-update: say which file to write with --jaxport-baseline=FILE"
        )
    strict = bool(option("jaxport_baseline_strict"))
    if strict and not name:
        raise ConfigError(
            "--jaxport-baseline-strict: say which baseline to hold the run to with "
            "--jaxport-baseline=FILE"
        )
    if not name:
        return CISettings(outputs_dir=outputs_dir, outputs_base=outputs_base)
    path = (here / name).resolve()
    baseline = None if update else _read_baseline(name, path)
    if update:
        _check_update_target(name, path)
    return CISettings(
        outputs_dir=outputs_dir,
        outputs_base=outputs_base,
        baseline_path=path,
        baseline_name=name,
        baseline=baseline,
        baseline_update=update,
        baseline_strict=strict,
    )


def _text(value: object) -> str | None:
    """A path option's value (``None`` where not given)."""
    return None if value is None else str(value)


def _read_baseline(name: str, path: Path) -> Counts:
    from pytest_jaxport.report.baseline import load_counts  # the report's types: only now

    try:
        return load_counts(path)
    except MergeError as e:
        hint = " (write one with --jaxport-baseline-update)" if not path.exists() else ""
        raise ConfigError(f"--jaxport-baseline {name}: {e}{hint}") from None


def _check_update_target(name: str, path: Path) -> None:
    """A missing file is fine (its missing folders are created when it is written, as
    ``--jaxport-report`` creates its own); an existing one must be a baseline (any version),
    not a report."""
    import json

    folder = next(p for p in path.parents if p.exists())
    if not folder.is_dir():
        raise ConfigError(f"--jaxport-baseline {name}: {folder} is a file, not a folder")
    if not path.exists():
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(
            f"--jaxport-baseline {name}: {path} exists and is not a pytest-jaxport baseline "
            f"({type(e).__name__}); remove it to write a new one"
        ) from None
    if not isinstance(data, dict) or data.get("kind") != "baseline":
        raise ConfigError(
            f"--jaxport-baseline {name}: {path} exists and is not a pytest-jaxport baseline "
            "(a report?); --jaxport-baseline-update will not overwrite it"
        )


# -- the leg's record ---------------------------------------------------------------------


def _jsonable(value: object) -> Json:
    """A configuration value (read_tables, tuples, numbers, strings) as JSON, read_tables sorted."""
    if isinstance(value, Mapping):
        return _jsonable_table(value)
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, MemoryLimit):  # as written: 0.8, "12 GiB"
        return value.to_json()
    raise TypeError(f"not a configuration value: {value!r}")


def _jsonable_table(value: Mapping[str, object]) -> dict[str, Json]:
    return {str(k): _jsonable(v) for k, v in sorted(value.items())}


def budget_table(project: ProjectConfig) -> dict[str, Json]:
    """The project's budgets shaped like ``[tool.jaxport.budget]``, for ``report["config"]``."""
    return _shaped(project.budget, project.platform_budgets)


def fail_on_table(project: ProjectConfig) -> dict[str, Json] | None:
    """``[tool.jaxport.audit] fail_on`` shaped like its read_table, for the report's ``audit``
    section where it sets a limit (a view says the suite is "within its audit budget" only
    then); ``None`` otherwise, so reports without one are unchanged."""
    audit = project.audit
    return _shaped(audit.fail_on, audit.platform_fail_on) if audit.gated else None


def _shaped(common: BudgetTable, platforms: Mapping[str, BudgetTable]) -> dict[str, Json]:
    shaped = _jsonable_table(common.values)
    for platform, platform_table in sorted(platforms.items()):
        shaped[platform] = _jsonable_table(platform_table.values)
    return shaped


def _tolerance_entry(tolerance: ToleranceSetting) -> dict[str, float]:
    entry = {}
    if tolerance.rtol is not None:
        entry["rtol"] = tolerance.rtol
    if tolerance.atol is not None:
        entry["atol"] = tolerance.atol
    return entry


def tolerance_table(project: ProjectConfig) -> dict[str, Json]:
    """The project's tolerances shaped like ``[tool.jaxport.tolerance]`` (what merge reads)."""
    shaped: dict[str, Json] = {
        dtype: dict(_tolerance_entry(t)) for dtype, t in sorted(project.tolerances.items())
    }
    for platform, dtypes in sorted(project.platform_tolerances.items()):
        shaped[platform] = {dtype: dict(_tolerance_entry(t)) for dtype, t in sorted(dtypes.items())}
    return shaped


def emulated_platforms(project: ProjectConfig) -> tuple[str, ...] | None:
    """The platforms the project (or the command line) emulates, for ``report.config``;
    ``None`` where it emulates none, so reports without emulation are unchanged."""
    return tuple(project.emulate.value) if project.emulate is not None else None


def leg_facts(
    tests: Iterable[TestEntry], device_kinds: Mapping[str, str], *, environment: Environment
) -> Environment:
    """``environment`` with the leg's facts: each present platform's device kind
    (``device_kinds``), what executed here, and (where any) what was emulated on the CPU:
    never executed."""
    entries = [
        (platform, entry)
        for test in tests
        for check in test.checks
        for platform, entry in check.probe.platforms.items()
    ]
    executed = {platform for platform, entry in entries if entry.executed}
    emulated = {platform for platform, entry in entries if entry.emulated is not None}
    return replace(
        environment,
        device_kinds=dict(device_kinds),
        executed_platforms=_in_order(executed),
        # where something was emulated only: other reports are unchanged
        emulated_platforms=_in_order(emulated) if emulated else None,
    )


def _in_order(platforms: set[str]) -> tuple[str, ...]:
    return (*(p for p in PLATFORMS if p in platforms), *sorted(platforms - set(PLATFORMS)))


# -- per test -----------------------------------------------------------------------------


def record_tolerance(checks: Iterable[MutableMapping[str, object]], resolved: Resolved) -> None:
    """Record a test's marker ``rtol``/``atol`` on its checks, for merge's cross-leg compare."""
    overrides = {
        key: setting.value
        for key in ("rtol", "atol")
        if (setting := resolved.overrides.get(key)) is not None
    }
    if overrides:
        for check in checks:
            check["tolerance"] = dict(overrides)


def save_check_outputs(
    settings: CISettings,
    nodeid: str,
    checks: Iterable[MutableMapping[str, object]],
    outputs: Mapping[str, Mapping[str, Outputs]],
    emulated: Mapping[str, Mapping[str, Outputs]] | None = None,
) -> list[str]:
    """Save each check's executed outputs, and each emulation's; set ``outputs`` (and
    ``emulated_outputs``, never read as executed) on its platform entries.

    Returns one message per file that could not be written (the test fails with them).
    """
    if settings.outputs_dir is None or settings.outputs_base is None:
        return []
    from pytest_jaxport.report.outputs import OutputsError, save_outputs  # numpy: only now

    problems = []
    for check in checks:
        name = str(check["name"])
        saved = [(p, found, p, "outputs") for p, found in outputs.get(name, {}).items()]
        saved += [
            (p, found, emulated_label(p), "emulated_outputs")
            for p, found in (emulated or {}).get(name, {}).items()
        ]
        for platform, found, label, key in saved:
            entry = read_table(check, "platforms").get(platform)
            if not isinstance(entry, MutableMapping):
                continue
            try:
                file = save_outputs(settings.outputs_dir, nodeid, name, label, found)
            except (OutputsError, OSError) as e:
                problems.append(
                    f"--jaxport-save-outputs: check {name!r} on {label}: not saved: {e}"
                )
                continue
            relative = os.path.relpath(settings.outputs_dir / file, settings.outputs_base)
            entry[key] = Path(relative).as_posix()
    return problems


def baseline_findings(
    settings: CISettings,
    nodeid: str,
    probes: Sequence[Probe],
    *,
    memory_growth: Setting[float] | None = None,
) -> tuple[list[Violation], list[str]]:
    """One test against the baseline: each count that grew, and device memory that grew past
    ``memory_growth`` (``[tool.jaxport] memory_growth``; each fails the test, said like a
    broken budget), and the messages for what is new there."""
    if settings.baseline is None:
        return [], []
    from pytest_jaxport.report.baseline import compare_to_baseline, growth_violation

    found = compare_to_baseline(settings.baseline, nodeid, probes, memory_growth=memory_growth)
    by_name = {probe.name: probe for probe in probes}
    grown = [
        growth_violation(g.change, settings.baseline_name, by_name.get(g.change.check or ""))
        for g in found
        if g.fails and g.change is not None
    ]
    return grown, [g.message for g in found if not g.fails]


def write_baseline(settings: CISettings, report: Report) -> Path | None:
    """``--jaxport-baseline-update``: write the run's counts atomically; the path written."""
    if not settings.baseline_update or settings.baseline_path is None:
        return None
    from pytest_jaxport.report.baseline import baseline_json, baseline_of
    from pytest_jaxport.report.files import write_text

    settings.baseline_path.parent.mkdir(parents=True, exist_ok=True)
    write_text(settings.baseline_path, baseline_json(baseline_of(report)))
    return settings.baseline_path


# -- $GITHUB_STEP_SUMMARY ------------------------------------------------------------------

STEP_SUMMARY_LIMIT = 1024 * 1024
"""GitHub's limit on one step's ``$GITHUB_STEP_SUMMARY``, in bytes: over it, the summary is
dropped with an error annotation."""
STEP_SUMMARY_SHARE = 60_000
"""At most this many bytes of the summary are ours: the Markdown report's own budget."""
STEP_SUMMARY_MARGIN = 16 * 1024
"""Room left for whatever else the step appends after us."""
STEP_SUMMARY_MINIMUM = 2_000
"""Below this much room, nothing is appended (a headline alone would not fit usefully)."""


def step_summary_budget(existing: int) -> int:
    """Bytes the report may append to a step summary that already holds ``existing`` bytes."""
    return min(STEP_SUMMARY_SHARE, STEP_SUMMARY_LIMIT - STEP_SUMMARY_MARGIN - existing)


def append_step_summary(path: Path, render: Callable[[int], str]) -> str | None:
    """Append ``render(budget)`` (Markdown within ``budget`` characters) to the step summary
    at ``path``, keeping the file under :data:`STEP_SUMMARY_LIMIT`. Returns a line for the
    terminal when nothing could be appended, else ``None``."""
    try:
        existing = path.stat().st_size if path.exists() else 0
    except OSError as e:
        return f"jaxport: $GITHUB_STEP_SUMMARY {path} cannot be read: {e}"
    budget = step_summary_budget(existing)
    if budget < STEP_SUMMARY_MINIMUM:
        return (
            f"jaxport: $GITHUB_STEP_SUMMARY already holds {existing:,} bytes of GitHub's "
            f"{STEP_SUMMARY_LIMIT:,}; the Markdown report was not appended"
        )
    text = render(budget)
    data = text.encode("utf-8")
    while len(data) > budget and budget >= STEP_SUMMARY_MINIMUM:
        budget -= len(data) - budget + 256  # non-ASCII text: bytes exceed characters
        data = render(budget).encode("utf-8")
    if len(data) > budget:
        return "jaxport: the Markdown report does not fit $GITHUB_STEP_SUMMARY; not appended"
    try:
        with open(path, "ab") as f:
            f.write(data)
    except OSError as e:
        return f"jaxport: could not append to $GITHUB_STEP_SUMMARY {path}: {e}"
    return None
