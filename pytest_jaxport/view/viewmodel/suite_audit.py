"""The suite audit's part of the view (``--jaxport-audit``, the report's ``audit`` section).

:func:`audit_parts` reads an :class:`~pytest_jaxport.report.document.AuditSection` into
what it adds to the view (:class:`AuditParts`): the
:class:`~pytest_jaxport.view.viewmodel.reportview.AuditView` (what the audit saw and how, per
test what it ran), its three numbers, sites and totals as a view of their own, and its
findings and suite budget failures as problems (``audit=True``).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_jaxport.model.platforms import DEFAULT_HOME
from pytest_jaxport.report.audit_section import (
    COMPILE_FINDING,
    AuditSection,
    Computation,
    computation_label,
)
from pytest_jaxport.report.baseline import Change
from pytest_jaxport.report.totals import Numbers, PlatformTotals
from pytest_jaxport.view.formatting import pct, plural
from pytest_jaxport.view.viewmodel.headline import Headline
from pytest_jaxport.view.viewmodel.matrix import in_order
from pytest_jaxport.view.viewmodel.memory import largest_plans
from pytest_jaxport.view.viewmodel.notes import heard_while_lowering, lowering_warning_notes
from pytest_jaxport.view.viewmodel.problems import (
    AUDITED_SUITE,
    DOES_NOT_COMPILE,
    Problem,
    violation_details,
)
from pytest_jaxport.view.viewmodel.reportview import (
    AuditTest,
    AuditView,
    CountedView,
    ReportView,
)
from pytest_jaxport.view.viewmodel.rewrites import targets_of
from pytest_jaxport.view.viewmodel.shares import shares_of
from pytest_jaxport.view.viewmodel.sites import hotspots_of
from pytest_jaxport.view.viewmodel.totals import collectives_of, padding_of, totals_of

OUTSIDE_TESTS = "(outside tests)"
"""The owner a computation run only while importing or collecting shows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditParts:
    """What a report's audit section adds to its view."""

    view: AuditView
    numbers: ReportView
    """Its three numbers, sites and totals (``unit="computation"``; no tests, no problems)."""
    totals: Mapping[str, PlatformTotals]
    """Its per-platform totals, for the layer table where they are the headline's."""
    problems: tuple[Problem, ...] = ()


def _label(computation: Computation) -> str:
    """``mlp [3f2a1b2c]`` (:func:`pytest_jaxport.report.audit_section.computation_label`)."""
    return computation_label(computation.id, computation.function)


def audit_parts(
    audit: AuditSection, *, home: str = DEFAULT_HOME, order: Sequence[str] = ()
) -> AuditParts:
    """The audit's part of the view of a report with an ``audit`` section (moving off
    ``home``; platforms in ``order``, the configured one, first)."""
    numbers = audit.numbers or Numbers()
    lines = counted_of(audit, order)
    found = ReportView(
        headline=Headline(home=home),
        hotspots=hotspots_of(audit.sites),
        totals=totals_of(in_order(audit.totals, order), unit="computation"),
        shares=shares_of(in_order(numbers.runtime_share, order)),
        targets=targets_of(numbers, audit.apart, lines.where if lines is not None else ""),
        collectives=collectives_of(in_order(audit.totals, order)),
        unit="computation",
        padding=padding_of(audit.totals),
    )
    everywhere = sum(
        1
        for c in audit.computations
        if c.platforms and all(e.lowered for e in c.platforms.values())
    )
    view = AuditView(
        seen=Counter(audit.seen),
        hook=hook_text(audit_hook_of(audit.interception)),
        notes=audit_notes_of(audit),
        lowers_everywhere=everywhere,
        tests=tests_of(audit),
        failures=len(audit.violations or ()) + len(audit.baseline_growth or ()),
        eager_users=audit.eager_users or "all",
        budgeted=bool(audit.fail_on or audit.violations),
        memory=largest_plans((_label(c), in_order(c.platforms, order)) for c in audit.computations),
        lines=lines,
    )
    return AuditParts(view=view, numbers=found, totals=audit.totals, problems=audit_problems(audit))


def counted_of(audit: AuditSection, order: Sequence[str] = ()) -> CountedView | None:
    """Which lines the audit's numbers count and what is at the others, per platform in
    ``order`` (``None`` for a report without the choice: every line counted)."""
    counted = audit.counted
    if counted is None:
        return None
    where = "lines outside counted_paths" if counted.paths else "the tests' own lines"
    sites = Counter(s.platform for s in audit.sites if not counted.counts(s.location))
    time = []
    shares = audit.apart.runtime_share if audit.apart is not None else {}
    for platform, share in in_order(shares, order).items():
        parts = [f"{layer} {pct(share.layers.get(layer, 0.0))}" for layer in ("vendor", "custom")
                 if share.layers.get(layer, 0.0) > 0]  # fmt: skip
        if parts:
            time.append((platform, " ".join(parts)))
    return CountedView(
        counted=counted.describe(),
        where=where,
        sites=tuple((p, sites[p]) for p in in_order(dict(sites), order)),
        time=tuple(time),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditHook:
    """How the suite audit hooked into JAX to record computations, as the section's
    ``interception`` table says it."""

    jax: str = ""
    """The JAX release it hooked into."""
    adapter: str = ""
    """What recorded them (``jit cache-miss hook (argument types, jax>=0.8)``); ``""`` where
    JAX's patch points were missing."""
    notes: tuple[str, ...] = ()
    """What it could not see here."""


def audit_hook_of(table: Mapping[str, object]) -> AuditHook:
    """The section's ``interception`` table, whose keys are the interception's own (the
    report's reader leaves them unchecked), read once into typed values: a key it lacks or
    leaves empty reads as empty."""
    said = {"jax": None, "adapter": None, "notes": None, **table}
    jax, adapter, notes = said["jax"], said["adapter"], said["notes"]
    return AuditHook(
        jax=str(jax) if jax else "",
        adapter=str(adapter) if adapter else "",
        notes=tuple(str(n) for n in notes if n) if isinstance(notes, list) else (),
    )


def hook_text(hook: AuditHook) -> str:
    """``jax 0.10.2, jit cache-miss hook (argument types, jax>=0.8)``; ``compile events
    only`` where JAX's patch points were missing."""
    jax = f"jax {hook.jax}, " if hook.jax else ""
    return jax + (hook.adapter or "compile events only")


def audit_notes_of(audit: AuditSection) -> tuple[str, ...]:
    """What the audit could not see here (its interception's notes) and its own errors."""
    notes = list(audit_hook_of(audit.interception).notes)
    heard = [heard_while_lowering(c.platforms) for c in audit.computations]
    notes += [f"{text} ({plural(n, 'computation')})" for text, n in lowering_warning_notes(heard)]
    errors = Counter(audit.seen)["audit_errors"]  # a count it does not have is 0
    if errors:
        notes.append(
            f"the audit recorded {plural(errors, 'error')} of its own instead of raising them "
            "(audit_errors in the JSON report); no test saw them"
        )
    return tuple(notes)


def tests_of(audit: AuditSection) -> tuple[AuditTest, ...]:
    """Per test that ran anything (collection order), the jitted computations it owns and
    those it uses that an earlier test owns, and how many eager op-by-op ones of each."""
    by_id = {c.id: c for c in audit.computations}

    def label(cid: str) -> str:
        return _label(by_id[cid]) if cid in by_id else computation_label(cid)

    def split(cids: Sequence[str]) -> tuple[list[str], int]:  # the jitted; eager ops counted
        jitted = [c for c in cids if c not in by_id or by_id[c].kind != "eager"]
        return jitted, len(cids) - len(jitted)

    rows = []
    for nodeid, test in audit.tests.items():
        owns, eager_owned = split(test.owns)
        uses, eager_used = split([c for c in test.uses if c not in set(test.owns)])
        rows.append(
            AuditTest(
                nodeid=nodeid,
                owns=tuple(label(cid) for cid in owns),
                uses=tuple(
                    (label(cid), str(by_id[cid].owner if cid in by_id else None)) for cid in uses
                ),
                eager_owned=eager_owned,
                eager_used=eager_used,
            )
        )
    return tuple(rows)


def audit_problems(audit: AuditSection) -> tuple[Problem, ...]:
    """The audit's findings (computations that failed to re-lower) and its suite budget
    failures, as problems of the view (``audit=True``)."""
    problems = []
    by_id = {c.id: c for c in audit.computations}
    # One problem per platform and reason: the same failure in 150 computations is one row
    # that says how many and which tests, with the reason whole.
    shared: dict[tuple[str, str, str], list[Computation]] = {}
    for finding in audit.findings:
        computation = by_id.get(finding.computation) or Computation(
            id=finding.computation, function=finding.function, source=None, kind="jit",
            signature=(),
        )  # fmt: skip
        entry = computation.platforms.get(finding.platform)
        hardware = entry.needs_hardware if entry is not None else None
        key = f"not lowerable here: needs a {hardware}" if hardware else "does not lower"
        if finding.kind == COMPILE_FINDING:
            key = DOES_NOT_COMPILE
        shared.setdefault((finding.platform, key, finding.reason), []).append(computation)
    for (platform, key, reason), sharing in shared.items():
        names = tuple(_label(c) for c in sharing)
        owners = tuple(dict.fromkeys(c.owner or OUTSIDE_TESTS for c in sharing))
        details = []
        for name, c in zip(names, sharing, strict=True):
            source = f" defined at {c.source}" if c.source else ""
            signature = f" ({', '.join(c.signature)})" if c.signature else ""
            details.append(f"{name}{source}{signature}, owned by {c.owner or OUTSIDE_TESTS}")
        problems.append(
            Problem(
                kind="not-lowered",
                audit=True,
                test=owners[0],
                check=names[0] if len(names) == 1 else plural(len(names), "computation"),
                platform=platform,
                key=key,
                found=key,
                message=" ".join(reason.split()),
                details=tuple(details),
                computations=names,
                tests=owners,
            )
        )
    for v in audit.violations or ():
        problems.append(
            Problem(
                kind="violation",
                audit=True,
                test=AUDITED_SUITE,
                platform=v.platform,
                key=v.key,
                found=v.found_text(),
                limit=v.limit_text(),
                origin=v.origin,
                message=f"{v.platform}: {v.finding()} ({v.rule()}); {v.level}",
                details=violation_details(v),
            )
        )
    for data in audit.baseline_growth or ():
        change = Change.from_dict(data)
        problems.append(
            Problem(
                kind="failure",
                audit=True,
                test=AUDITED_SUITE,
                key="baseline",
                found="baseline",
                message=change.describe("since the baseline"),
                details=tuple(site.describe() for site in change.sites),
            )
        )
    return tuple(problems)
