"""The view model's entry point: a typed report read once into its view (pure).

:func:`build_view` reads a :class:`~pytest_jaxport.report.document.Report` into a
:class:`~pytest_jaxport.view.viewmodel.reportview.ReportView`, each part by the module of
its job (:mod:`pytest_jaxport.view.viewmodel` lists them); every format renders that view.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pytest_jaxport.model.platforms import NVIDIA_PLATFORM
from pytest_jaxport.report.document import Report
from pytest_jaxport.report.totals import Numbers
from pytest_jaxport.view.formatting import natural_key
from pytest_jaxport.view.viewmodel.alerts import alerts_of
from pytest_jaxport.view.viewmodel.baseline import baseline_groups, baseline_line
from pytest_jaxport.view.viewmodel.details import compiled_gaps_of, transformations_of
from pytest_jaxport.view.viewmodel.headline import headline_of
from pytest_jaxport.view.viewmodel.layers import devices_of, layers_of
from pytest_jaxport.view.viewmodel.matrix import (
    TestRow,
    emulations_of,
    in_order,
    matrix_platforms,
    test_row,
)
from pytest_jaxport.view.viewmodel.notes import Note, notes_of, share_basis_notes
from pytest_jaxport.view.viewmodel.problems import COLLECTION, Problem, ProblemGroup, problems_of
from pytest_jaxport.view.viewmodel.reportview import ReportView
from pytest_jaxport.view.viewmodel.rewrites import targets_of
from pytest_jaxport.view.viewmodel.shares import shares_of
from pytest_jaxport.view.viewmodel.sites import hotspots_of
from pytest_jaxport.view.viewmodel.suite_audit import AuditParts, audit_parts
from pytest_jaxport.view.viewmodel.totals import collectives_of, padding_of, totals_of


def build_view(report: Report) -> ReportView:
    """The view of a report (:class:`~pytest_jaxport.report.document.Report`, checked where
    it was read)."""
    summary = report.summary
    numbers = summary.numbers or Numbers()
    platforms = matrix_platforms(report)
    rows = tuple(
        test_row(t, platforms) for t in sorted(report.tests, key=lambda t: natural_key(t.nodeid))
    )
    headline = dataclasses.replace(headline_of(report), may_differ=tuple(
        (row.platform, row.may_differ) for row in emulations_of(rows)
    ))  # fmt: skip
    audit = (
        audit_parts(report.audit, home=headline.home, order=platforms)
        if report.audit is not None
        else None
    )
    baseline = report.baseline
    view = ReportView(
        headline=headline,
        problems=_problems(report, rows, audit),
        hotspots=hotspots_of(summary.hotspots),
        totals=totals_of(in_order(summary.platforms, platforms)),
        shares=shares_of(in_order(numbers.runtime_share, platforms)),
        targets=targets_of(numbers),
        layers=(),
        tooling=numbers.tooling.assumptions if numbers.tooling is not None else (),
        notes=notes_of(rows, report)
        + ((Note(text=baseline_line(baseline)),) if baseline is not None else ()),
        tests=rows,
        platforms=tuple(platforms),
        deviceless=_deviceless(report),
        compiled_gaps=compiled_gaps_of(rows),
        transformations=transformations_of(rows),
        collectives=collectives_of(in_order(summary.platforms, platforms)),
        devices=devices_of(report.config),
        emulations=emulations_of(rows),
        baseline=baseline,
        alerts=alerts_of(report),
    )
    totals = summary.platforms
    if audit is not None:
        view = dataclasses.replace(
            view, headline=dataclasses.replace(headline, audit_failures=audit.view.failures)
        )
        if headline.checks:  # both: the checks' numbers lead, the audit's sit next to them
            view = dataclasses.replace(
                view, audit=dataclasses.replace(audit.view, numbers=audit.numbers)
            )
        else:  # an audit of an unchanged suite: its numbers are the headline's
            totals = audit.totals
            found = audit.numbers
            view = dataclasses.replace(
                view, audit=audit.view, unit=found.unit, hotspots=found.hotspots,
                totals=found.totals, shares=found.shares, targets=found.targets,
                collectives=found.collectives,
            )  # fmt: skip
    view = dataclasses.replace(
        view,
        padding=padding_of(totals),
        notes=view.notes + share_basis_notes(view.shares, totals, audit=view.audit is not None),
    )
    return dataclasses.replace(view, layers=layers_of(view, totals, numbers.tooling))


def _problems(
    report: Report, rows: Sequence[TestRow], audit: AuditParts | None
) -> tuple[ProblemGroup, ...]:
    """Every problem group: the tests', the suite audit's, the files pytest could not
    collect (their tests did not run), and the baseline's."""
    not_collected = tuple(
        Problem(kind="failure", test=e.nodeid, key=COLLECTION, found=COLLECTION, message=e.error)
        for e in report.collection_errors
    )
    audited = audit.problems if audit is not None else ()
    found = problems_of(rows, audited, not_collected=not_collected)
    return found + baseline_groups(report.baseline)


def _deviceless(report: Report) -> bool:
    """Whether a GPU platform (cuda) was compiled without its GPU: the autotuning note is
    its. tpu compiled through libtpu picks no kernels by timing them."""
    return any(
        result.deviceless
        for check in report.checks()
        for platform, result in check.probe.platforms.items()
        if platform == NVIDIA_PLATFORM
    )
