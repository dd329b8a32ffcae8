"""The headline: the suite's counts and what it was run against (pure).

:func:`headline_of` reads a report's summary, configuration and environment into a
:class:`Headline`: the counts every format leads with, the configuration and environment as
``(label, value)`` facts (a merged report's legs among them: :func:`merge_facts`), the
platforms lowered beyond the configured ones and why.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_jaxport.model.budget import numerics_tally
from pytest_jaxport.model.platforms import DEFAULT_HOME, NVIDIA_PLATFORM
from pytest_jaxport.report.document import TOOL_NAME, Config, Environment, Report
from pytest_jaxport.view.formatting import number, plural
from pytest_jaxport.view.viewmodel.matrix import matrix_platforms


@dataclass(frozen=True, slots=True, kw_only=True)
class Headline:
    """The suite's counts and what it was run against."""

    tests: int = 0
    checks: int = 0
    failed_tests: int = 0
    violations: int = 0
    platforms: tuple[str, ...] = ()
    reference: str = ""
    present: tuple[str, ...] = ()
    level: str = ""
    tool_version: str = ""
    schema_version: str = ""
    upgraded_from: str = ""
    facts: tuple[tuple[str, str], ...] = ()
    """Configuration and environment, as ``(label, value)`` pairs."""
    audit_failures: int = 0
    """The suite audit's budget failures (``fail_on``, the baseline): each fails the session,
    no test."""
    budgeted: bool | None = None
    """Whether ``[tool.jaxport.budget]`` (or one of its platform tables) sets a limit; ``None``
    where the report does not say. A marker's limits are its test's own, not recorded."""
    also_lowered: str = ""
    """The platforms checks lowered for beyond ``platforms`` and why (``cuda, rocm: from
    must_lower``; a marker's ``platforms`` can add one too); empty where there are none."""
    home: str = DEFAULT_HOME
    """The platform moving was measured from (``[tool.jaxport] home``; cuda where the
    report does not say): kernels to rewrite, days and the sites listed first are its."""
    not_collected: int = 0
    """Files pytest could not collect: their tests did not run."""
    mismatches: int = 0
    """Numerics mismatches that fail their tests (not among :attr:`violations`, which are
    the budgets' only)."""
    may_differ: tuple[tuple[str, int], ...] = ()
    """Per emulated platform, how many checks *may differ* there (emulated: they matched,
    but the chip's measured errors move the outputs beyond the tolerance)."""
    legs: tuple[str, ...] = ()
    """A merged report's legs (``jaxport merge``), by name, in the order it has them."""

    def may_differ_text(self) -> str:
        """``3 checks may differ on tpu (emulated)``; ``""`` where none may."""
        return ", ".join(
            f"{plural(n, 'check')} may differ on {platform} (emulated)"
            for platform, n in self.may_differ
            if n
        )

    def counts(self) -> str:
        """``2,000 portable tests, 2,400 checks, 97 failed, 120 budget violations`` (``, 3
        numerics mismatches`` where there are some, ``, 3 checks may differ on tpu
        (emulated)`` where any may); led by ``tests did not run: 1 file not collected; ``
        where pytest could not collect one."""
        return (
            f"{self.did_not_run()}{plural(self.tests, 'portable test')}, "
            f"{plural(self.checks, 'check')}, {number(self.failed_tests)} failed, "
            f"{plural(self.violations, 'budget violation')}{self.mismatches_text(', ')}"
        )

    def mismatches_text(self, lead: str = "") -> str:
        """``3 numerics mismatches`` and ``3 checks may differ on tpu (emulated)``, each after
        ``lead``: numerics, apart from the budget violations; ``""`` without any."""
        said = [plural(self.mismatches, "numerics mismatch", "numerics mismatches")]
        said = said if self.mismatches else []
        differ = self.may_differ_text()
        return "".join(lead + part for part in (*said, *([differ] if differ else [])))

    def did_not_run(self) -> str:
        """``tests did not run: 1 file not collected; `` (``""`` where every file was)."""
        if not self.not_collected:
            return ""
        return f"tests did not run: {plural(self.not_collected, 'file')} not collected; "

    def setting(self) -> str:
        """``platforms: cpu, tpu (reference cpu); present here: cpu; level: lowered (...);
        home tpu (moves priced off it)``: the home said where it is not cuda (the numbers'
        "moving off cuda" says that one)."""
        also = f"{self.also_lowered}; " if self.also_lowered else ""
        home = f"; home {self.home} (moves priced off it)" if self.home != DEFAULT_HOME else ""
        return (
            f"platforms: {', '.join(self.platforms) or 'none'} "
            f"(reference {self.reference or '-'}); {also}"
            f"present here: {present_text(self.present)}; {self.level}{home}"
        )


NOT_LOOKED_UP = "not looked up (no check ran: JAX was not loaded)"


def present_text(present: tuple[str, ...]) -> str:
    """The platforms present here, as a report says them: a run that checked nothing never
    loaded JAX, so it does not know them (a CPU machine's run said "none", issue 55).

    >>> present_text(("cpu",)), present_text(())
    ('cpu', 'not looked up (no check ran: JAX was not loaded)')
    """
    return ", ".join(present) or NOT_LOOKED_UP


def compile_outcomes(report: Report) -> dict[str, tuple[int, int]]:
    """Per platform the report compiled for, ``(compiled, failed to compile)`` over its
    checks and its audited computations."""
    done: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    audited = report.audit.totals if report.audit is not None else {}
    for totals in (report.summary.platforms, audited):
        for platform, counted in totals.items():
            done[platform] += counted.compiled or 0
            failed[platform] += counted.failed_to_compile or 0
    every = [*(report.config.compile or ()), *done, *failed]
    return {platform: (done[platform], failed[platform]) for platform in every}


def compiled_levels(config: Config, outcomes: Mapping[str, tuple[int, int]]) -> tuple[str, str]:
    """``("cuda, tpu (101 of 104: 3 did not compile)", "tpu (none of 2: see problems)")``
    (``outcomes``: :func:`compile_outcomes`, which has every platform of ``compile``):
    the platforms compiled for, each with how many did not where any did not, and those for
    which nothing compiled (every compile asked of them failed): a level is claimed only
    where something compiled at it."""
    compiled, none = [], []
    for platform in config.compile or ():
        done, failed = outcomes[platform]
        if failed and not done:
            none.append(f"{platform} (none of {number(failed)} compiled: see problems)")
        elif failed:
            did_not = f"{number(failed)} did not compile"
            compiled.append(f"{platform} ({number(done)} of {number(done + failed)}: {did_not})")
        else:
            compiled.append(platform)
    return ", ".join(compiled), ", ".join(none)


def _levels(config: Config, outcomes: Mapping[str, tuple[int, int]]) -> str:
    compiled, none = compiled_levels(config, outcomes)
    failed = f"; not compiled: {none}" if none else ""
    if not compiled:
        return f"level: lowered (StableHLO, no hardware needed){failed}"
    gpu = (
        f" ({NVIDIA_PLATFORM} deviceless against {config.target} where no GPU)"
        if config.target
        else ""
    )
    return f"levels: compiled for {compiled}{gpu}; lowered elsewhere{failed}"


def _version(env: Environment, name: str) -> str | None:
    """A version the run recorded: ``python``, or a library's (``jax``, ``jaxlib``)."""
    return env.python if name == "python" else env.versions.get(name)


def headline_of(report: Report) -> Headline:
    summary, config, env = report.summary, report.config, report.environment
    facts = [
        ("platforms", ", ".join(config.platforms) or "—"),
        ("reference", config.reference or "—"),
        ("home", config.home_platform),
    ]
    also = also_lowered_of(report)
    if also:
        facts.append(("also lowered", also))
    outcomes = compile_outcomes(report)
    compiled, none = compiled_levels(config, outcomes)
    if compiled:
        target = f" (target {config.target})" if config.target else ""
        facts.append(("compiled for", compiled + target))
    if none:
        facts.append(("not compiled", none))
    if config.source:
        facts.append(("configuration", config.source))
    versions = " · ".join(
        f"{k} {v}" for k in ("jax", "jaxlib", "python") if (v := _version(env, k))
    )
    facts.append(("environment", " · ".join(x for x in (versions, env.machine) if x) or "—"))
    facts += merge_facts(report)
    facts.append(("present here", present_text(env.present_platforms)))
    budgeted = None
    if config.budget is not None:
        budgeted = _sets_limit(config.budget)
    elif "budget" in config.written_null:
        budgeted = False
    mismatches, differ = numerics_tally(v for t in report.tests for v in t.violations)
    return Headline(
        tests=summary.tests,
        checks=summary.checks,
        failed_tests=summary.failed_tests,
        violations=summary.violations - mismatches - differ,
        mismatches=mismatches,
        platforms=config.platforms,
        reference=config.reference,
        present=env.present_platforms,
        level=_levels(config, outcomes),
        tool_version=report.tool_version or "",
        schema_version=str(report.schema_version),
        upgraded_from="" if report.upgraded_from is None else str(report.upgraded_from),
        facts=tuple(facts),
        also_lowered=also,
        budgeted=budgeted,
        home=config.home_platform,
        not_collected=len(report.collection_errors),
        legs=tuple(leg.leg for leg in report.merged.legs) if report.merged else (),
    )


def _sets_limit(value: object) -> bool:
    """Whether a budget table as the report records it sets any limit (an empty list or
    table sets none: ``allow_targets = []``)."""
    if isinstance(value, Mapping):
        return any(_sets_limit(v) for v in value.values())
    if isinstance(value, list):
        return bool(value)
    return value is not None


def also_lowered_of(report: Report) -> str:
    """``cuda, rocm: from must_lower``: the platforms the report's checks lowered for that its
    ``platforms`` leave out (a ``must_lower`` adds them, ``--jaxport-platforms`` does not take
    them away), or a marker's ``platforms`` where no ``must_lower`` of the configuration
    names them; ``""`` where there are none."""
    configured = set(report.config.platforms)
    extra = [p for p in matrix_platforms(report) if p not in configured]
    if not configured or not extra:
        return ""
    budget = report.config.budget or {}
    tables = [budget, *(t for t in budget.values() if isinstance(t, Mapping))]
    named = {
        str(p)
        for table in tables
        for key, must in table.items()
        if key == "must_lower" and isinstance(must, list)
        for p in must
    }
    why = "must_lower" if set(extra) <= named else "must_lower or a marker's platforms"
    return f"{', '.join(extra)}: from {why}"


def merge_facts(report: Report) -> list[tuple[str, str]]:
    """A merged report's legs, each with its jax and Python (and pytest-jaxport where the legs
    differ in it), and which versions differ between them (``mixed_versions``)."""
    merged = report.merged
    if merged is None or not merged.legs:
        return []
    mixed = merged.mixed_versions or {}
    keys = ["jax", *(["jaxlib"] if "jaxlib" in mixed else []), "python"]
    said = []
    for leg in merged.legs:
        versions = [f"{k} {v}" for k in keys if (v := _version(leg.environment, k))]
        if TOOL_NAME in mixed and leg.tool_version:
            versions.append(f"{TOOL_NAME} {leg.tool_version}")
        said.append(f"{leg.leg}: {' · '.join(versions) or '—'}")
    facts = [("legs", "; ".join(said))]
    if mixed:
        facts.append(("versions differ", ", ".join(mixed)))
    return facts
