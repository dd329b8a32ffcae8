"""The suite audit in the report's one view model (pure: the report's ``audit`` section in,
view values out).

``pytest --jaxport-audit`` stores its findings as data (:mod:`pytest_jaxport.audit_report`);
:func:`audit_parts` reads them into what :func:`pytest_jaxport.view.build_view` puts in the
:class:`~pytest_jaxport.view.ReportView` every format renders:

- **problems** (:func:`audit_problems`): each computation that failed to re-lower for a
  platform is a finding (``audit: cuda: does not lower``, the row naming its owner test and
  the computation); each broken ``[tool.jaxport.audit] fail_on`` limit and each count grown
  since ``--jaxport-baseline`` is a suite-level failure (``audit: cuda: max_custom_calls``,
  the row naming :data:`~pytest_jaxport.view.AUDITED_SUITE`): it fails the session, never
  a test;
- **numbers**: the three numbers, the sites where the lock-in lives (each distinct site
  once, with the computations and tests that reach it) and the platform totals, counting
  each distinct computation once (a view whose ``unit`` is ``computation``);
- **what it saw** (:class:`~pytest_jaxport.view.AuditView`): the counts, how computations
  were recorded, what it could not see, and per test the computations it owns and uses.

Every key may be missing or malformed: a broken section gives an empty audit, never an
exception.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_jaxport.audit_report import AuditChange, failures
from pytest_jaxport.budget import Violation
from pytest_jaxport.view import (
    AUDITED_SUITE,
    AuditTest,
    AuditView,
    Headline,
    Problem,
    ReportView,
    collectives_of,
    hotspots_of,
    plural,
    shares_of,
    targets_of,
    totals_of,
)

OUTSIDE_TESTS = "(outside tests)"
"""The owner a computation run only while importing or collecting shows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditParts:
    """What a report's audit section adds to its view."""

    view: AuditView
    numbers: ReportView
    """Its three numbers, sites and totals (``unit="computation"``; no tests, no problems)."""
    summary: Mapping[str, Any]
    """Its ``summary`` (per platform totals), for the layer table where it is the headline."""
    problems: tuple[Problem, ...] = ()


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _maps(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def label(computation: Mapping[str, Any]) -> str:
    """``mlp [3f2a1b2c]``: the function and the start of the computation's key (one function
    traced for two signatures is two computations)."""
    return f"{computation.get('function', '?')} [{str(computation.get('id', ''))[:8]}]"


def audit_parts(report: Mapping[str, Any]) -> AuditParts | None:
    """The audit's part of the view of ``report``; ``None`` without an ``audit`` section."""
    audit = _map(report.get("audit"))
    if not audit:
        return None
    computations = _maps(audit.get("computations"))
    summary = _map(audit.get("summary"))
    sites = [
        {**site, "checks": site.get("computations"), "dispatches": site.get("count")}
        for site in _maps(audit.get("sites"))
    ]
    numbers = ReportView(
        headline=Headline(),
        hotspots=hotspots_of({"hotspots": sites}, ()),
        totals=totals_of(summary),
        shares=shares_of(summary.get("runtime_share")),
        targets=targets_of(summary),
        collectives=collectives_of(summary),
        unit="computation",
    )
    everywhere = sum(
        1
        for c in computations
        if _map(c.get("platforms"))
        and all(_map(e).get("lowered") is not None for e in _map(c.get("platforms")).values())
    )
    view = AuditView(
        seen={str(k): _count(v) for k, v in _map(audit.get("seen")).items()},
        hook=hook_text(_map(audit.get("interception"))),
        notes=notes_of(audit),
        lowers_everywhere=everywhere,
        tests=tests_of(audit, computations),
        failures=failures(audit),
    )
    return AuditParts(
        view=view, numbers=numbers, summary=summary, problems=audit_problems(audit, computations)
    )


def hook_text(interception: Mapping[str, Any]) -> str:
    """``jax 0.10.2, jit cache-miss hook (argument types, jax>=0.8)``; ``compile events
    only`` where JAX's patch points were missing."""
    jax = f"jax {interception['jax']}, " if interception.get("jax") else ""
    return jax + str(interception.get("adapter") or "compile events only")


def notes_of(audit: Mapping[str, Any]) -> tuple[str, ...]:
    """What the audit could not see here (its interception's notes) and its own errors."""
    interception = _map(audit.get("interception"))
    notes = [str(n) for n in interception.get("notes") or () if n]
    errors = _count(_map(audit.get("seen")).get("audit_errors"))
    if errors:
        notes.append(
            f"the audit recorded {plural(errors, 'error')} of its own instead of raising them "
            "(audit_errors in the JSON report); no test saw them"
        )
    return tuple(notes)


def tests_of(
    audit: Mapping[str, Any], computations: Sequence[Mapping[str, Any]]
) -> tuple[AuditTest, ...]:
    """Per test that ran anything (collection order), the jitted computations it owns and
    those it uses that an earlier test owns, and how many eager op-by-op ones of each."""
    by_id = {str(c.get("id")): c for c in computations}

    def split(cids: Any) -> tuple[list[str], int]:  # the jitted functions; eager ops counted
        jitted = [str(c) for c in cids or () if by_id.get(str(c), {}).get("kind") != "eager"]
        return jitted, len(list(cids or ())) - len(jitted)

    rows = []
    for nodeid, test in _map(audit.get("tests")).items():
        test = _map(test)
        owned = {str(c) for c in test.get("owns") or ()}
        owns, eager_owned = split(test.get("owns"))
        uses, eager_used = split([c for c in test.get("uses") or () if str(c) not in owned])
        rows.append(
            AuditTest(
                nodeid=str(nodeid),
                owns=tuple(label(by_id.get(cid, {"id": cid})) for cid in owns),
                uses=tuple(
                    (label(by_id.get(cid, {"id": cid})), str(by_id.get(cid, {}).get("owner")))
                    for cid in uses
                ),
                eager_owned=eager_owned,
                eager_used=eager_used,
            )
        )
    return tuple(rows)


def audit_problems(
    audit: Mapping[str, Any], computations: Sequence[Mapping[str, Any]]
) -> tuple[Problem, ...]:
    """The audit's findings (computations that failed to re-lower) and its suite budget
    failures, as problems of the view (``audit=True``)."""
    problems = []
    by_id = {str(c.get("id")): c for c in computations}
    # One problem per platform and reason: the same failure in 150 computations is one row
    # that says how many and which tests, with the reason whole.
    shared: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for finding in _maps(audit.get("findings")):
        computation = by_id.get(str(finding.get("computation")), {})
        platform = str(finding.get("platform", "?"))
        entry = _map(_map(computation.get("platforms")).get(platform))
        hardware = entry.get("needs_hardware")
        key = f"not lowerable here: needs a {hardware}" if hardware else "does not lower"
        reason = str(finding.get("reason", ""))
        shared.setdefault((platform, key, reason), []).append(
            computation or {"function": finding.get("function"), "id": finding.get("computation")}
        )
    for (platform, key, reason), sharing in shared.items():
        names = tuple(label(c) for c in sharing)
        owners = tuple(dict.fromkeys(str(c.get("owner") or OUTSIDE_TESTS) for c in sharing))
        details = []
        for name, c in zip(names, sharing, strict=True):
            source = f" defined at {c['source']}" if c.get("source") else ""
            signature = ", ".join(map(str, c.get("signature") or ()))
            signature = f" ({signature})" if signature else ""
            details.append(f"{name}{source}{signature}, owned by {c.get('owner') or OUTSIDE_TESTS}")
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
    for data in _maps(audit.get("violations")):
        try:
            v = Violation.from_dict(data)
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
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
                details=tuple(k.describe() for k in v.kernels) + v.details,
            )
        )
    for data in _maps(audit.get("baseline_growth")):
        try:
            change = AuditChange.from_dict(data)
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
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
