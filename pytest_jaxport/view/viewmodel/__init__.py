"""The view model: what every report format shows, built once from a typed report (pure).

:func:`~pytest_jaxport.view.viewmodel.build.build_view` reads a
:class:`~pytest_jaxport.report.document.Report` (as :func:`pytest_jaxport.report.load` reads a
file, older schema versions upgraded, or as the plugin builds it) into a
:class:`~pytest_jaxport.view.viewmodel.reportview.ReportView`: the headline counts, the
problems grouped by budget key and platform, where the lock-in lives (hotspots by source
site), the platform totals, the three numbers, the layer table, environment notes said once,
the per-test matrix, and the findings as alerts at source lines. Every renderer only lays it
out: :mod:`pytest_jaxport.view.text` (terminal text), :mod:`pytest_jaxport.view.markdown`,
:mod:`pytest_jaxport.view.html`, and the findings' formats (:mod:`pytest_jaxport.view.sarif`,
:mod:`pytest_jaxport.view.annotations`, :mod:`pytest_jaxport.view.codequality`). No format
derives a fact of its own, so they agree on every number.
:class:`pytest_jaxport.view.display.DisplayOptions` (shared by the plugin and ``jaxport show``)
say how much of it to show.

One module per part of the view:

- ``reportview``: the view itself (``ReportView``, the suite audit's ``AuditView``);
- ``build``: ``build_view``, which reads a report into it;
- ``headline``: the counts and what the run was against;
- ``problems``: the problem rows and groups; ``baseline``: how a baseline met the run;
- ``matrix``: the per-test, per-check, per-platform cells (and the emulations' outcomes);
- ``sites``: where the lock-in lives (hotspots, a platform's layout findings in one line);
- ``totals``: the platform totals; ``shares`` and ``rewrites``: the three numbers;
- ``layers``: the layer table; ``notes``: what is said once; ``details``: per-check lines;
- ``suite_audit``: the suite audit's part; ``alerts``: the findings at source lines.

Where to add something new, once for every format:

- a per-platform figure (a new field of
  :class:`~pytest_jaxport.report.totals.PlatformTotals`, e.g. collectives by kind): one
  ``Column`` in ``totals.TOTALS_COLUMNS``;
- a per-check, per-platform fact in the matrix: ``matrix.cell_of``;
- how a runtime share's basis is labelled (an error band, what was left out):
  ``shares.share_label``;
- a new kind of problem: ``problems.problems_of``;
- a new kind of finding at a source line: an alert builder in ``alerts`` (and its SARIF rule,
  :data:`pytest_jaxport.view.sarif.RULES`);
- another source of censuses for the hotspots: :class:`pytest_jaxport.model.hotspots.Reach`.

The suite audit (``--jaxport-audit``, the report's ``audit`` section) is part of the same
view (``suite_audit.audit_parts`` reads it): its failures to re-lower and its suite budget
failures are problem groups (``audit``), and its three numbers, sites and platform totals
are the headline's where the run has no checks (``unit`` says what the numbers count), else
``AuditView.numbers``, next to the checks'.

The view reads a :class:`~pytest_jaxport.report.document.Report`'s attributes: the report
was checked once, where it was read (:func:`pytest_jaxport.report.load`), so nothing here
guesses at a missing or malformed field. Platforms are the report's (its configuration,
its totals, its checks), never a list of the view's.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""
