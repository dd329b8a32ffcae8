"""Markdown renderings (pure: a view in, a string out), with the one Markdown escaper.

- :func:`render_markdown`, for pull requests and ``$GITHUB_STEP_SUMMARY``: headline,
  problems, the three numbers, platform totals, top hotspots, layers, then the full matrix in
  a collapsed ``<details>`` block, cut with a note so the document stays within a size
  budget (:data:`MARKDOWN_BUDGET` characters by default). It lays out a
  :class:`~pytest_jaxport.view.viewmodel.reportview.ReportView` and derives no number of its
  own.
- :func:`merge_markdown` and :func:`diff_markdown`: ``jaxport merge --md``'s legs and
  numerics across legs, and ``jaxport diff --md``'s pull-request comment.

:func:`markdown` takes a report and builds its view. :func:`md_cell` and :func:`md_code` are
how every Markdown table cell is escaped.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_jaxport.model.runtime_share import RANKING
from pytest_jaxport.report.baseline import ReportDiff, metric_label, value_text
from pytest_jaxport.report.document import Report
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.formatting import days_text, number, pct, plural, sentence
from pytest_jaxport.view.viewmodel.build import build_view
from pytest_jaxport.view.viewmodel.matrix import Cell, TestRow
from pytest_jaxport.view.viewmodel.memory import MemoryCell
from pytest_jaxport.view.viewmodel.notes import NO_AUTOTUNE_NOTE
from pytest_jaxport.view.viewmodel.reportview import ReportView
from pytest_jaxport.view.viewmodel.sites import (
    hotspot_cells,
    hotspot_headers,
    hotspot_title,
    twin_sites,
)
from pytest_jaxport.view.viewmodel.totals import totals_note

if TYPE_CHECKING:  # report.merge imports numpy: a renderer of its result never needs it
    from pytest_jaxport.report.merge import MergeResult

MARKDOWN_BUDGET = 60_000
"""Characters a Markdown report stays within: under GitHub's 65,536 for a comment."""
MARKDOWN_PROBLEMS = 150
"""Problem rows the Markdown report names; the JSON and HTML reports name every one."""
PROBLEMS_SHARE = 0.6
"""At most this share of the Markdown budget goes to the problem rows."""
MARKDOWN_HOTSPOTS = 10
"""Sites the Markdown lists for the first platform (the home platform's)."""
MARKDOWN_OTHER_SITES = 5
"""Sites the Markdown lists for each platform but the first (the home platform's)."""


def md_cell(value: object) -> str:
    """Text for a Markdown table cell: ``|`` escaped, one line, what could open an HTML tag
    or entity escaped (``>`` alone cannot, so arrows stay readable in the raw file).

    >>> print(md_cell("cudnn 1 -> <lambda> | x & y"))
    cudnn 1 -> &lt;lambda> \\| x &amp; y
    """
    text = " ".join(str(value).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")


def md_code(value: object) -> str:
    """``value`` as inline code inside a table cell (``test_op[a|b]`` stays one cell)."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown(
    report: Report,
    options: DisplayOptions | None = None,
    *,
    budget: int = MARKDOWN_BUDGET,
) -> str:
    """The Markdown report of a report (see :func:`render_markdown`)."""
    return render_markdown(build_view(report), options or DisplayOptions(), budget=budget)


def render_markdown(
    view: ReportView, options: DisplayOptions, *, budget: int = MARKDOWN_BUDGET
) -> str:
    """A Markdown report for pull requests and ``$GITHUB_STEP_SUMMARY``, at most ``budget``
    characters: the sections in order of importance, the full matrix last and cut to fit."""
    view = view.select(options)
    head = view.headline
    said = (
        f"**{number(head.failed_tests)} of {plural(head.tests, 'portable test')} failed** · "
        f"{plural(head.violations, 'budget violation')}{head.mismatches_text(' · ')} · "
        f"{plural(head.checks, 'check')}"
    )
    if head.not_collected:
        said = f"**{md_cell(head.did_not_run().removesuffix('; '))}** · {said}"
    if view.audit is not None and view.unit == "computation":
        said = f"**Suite audit: {md_cell(view.audit.seen_line())}**"
    if head.audit_failures:
        said += f" · **{plural(head.audit_failures, 'suite audit failure')}**"
    if head.may_differ_text():
        said += f" · **{md_cell(head.may_differ_text())}**"
    lead = ["## pytest-jaxport portability report", "", f"{said} · {md_cell(head.setting())}", ""]
    sections = [
        _md_problems(view, room=int(budget * PROBLEMS_SHARE) - len("\n".join(lead))),
        _md_numbers(view),
        _md_totals(view),
        _md_emulations(view),
        _md_hotspots(view, options),
        _md_audit(view, options),
        _md_layers(view),
        _md_notes(view),
    ]
    out = "\n".join(lead) + "\n"
    closing = ""
    for section in sections:
        if not section:
            continue
        piece = "\n".join(section) + "\n\n"
        if len(out) + len(piece) > budget - 200:
            closing = "_The rest of this report did not fit; the JSON and HTML reports have it._\n"
            break
        out += piece
    if not closing:
        out += _md_matrix(view, budget - len(out) - 2)
    return (out + closing).rstrip("\n") + "\n"


def _md_problems(view: ReportView, room: int) -> list[str]:
    """The problem groups, then up to :data:`MARKDOWN_PROBLEMS` rows within ``room``
    characters (violations first), saying how many were left out."""
    groups = view.problems
    if not groups:
        return ["### Problems", "", f"None: {view.all_clear()}."]
    total = sum(len(g.problems) for g in groups)
    lines = [
        "### Problems",
        "",
        "| group | problems |",
        "|---|---|",
        *[f"| {md_cell(g.title)} | {md_cell(g.summary())} |" for g in groups],
        "",
        "| test | check | platform | problem | found | limit | set in |",
        "|---|---|---|---|---|---|---|",
    ]
    used = sum(len(line) + 1 for line in lines) + 300  # and the closing note
    shown = 0
    for p in (p for g in groups for p in g.problems):
        tests = md_code(p.test)
        if len(p.tests) > 1:  # the suite audit's computations sharing one reason
            tests += f" and {plural(len(p.tests) - 1, 'more test')}"
        row = (
            f"| {tests} | {md_cell(p.check or '')} | {md_cell(p.platform or '')} | "
            f"{md_cell(p.key)} | "
            f"{md_cell(p.found if p.kind in ('violation', 'mismatch') else p.message)} | "
            f"{md_cell(p.limit)} | {md_cell(p.origin)} |"
        )
        if shown == MARKDOWN_PROBLEMS or used + len(row) + 1 > room:
            break
        lines.append(row)
        used += len(row) + 1
        shown += 1
    if shown < total:
        lines += [
            "",
            f"_Showing the first {number(shown)} of {number(total)} problems (at most "
            f"{MARKDOWN_PROBLEMS}, within the size budget); the JSON and HTML reports list "
            "every one._",
        ]
    return lines


def _md_numbers(view: ReportView, heading: str = "### The three numbers") -> list[str]:
    if view.unit == "computation":
        heading += " (suite audit: each distinct computation once)"
    lines: list[str] = []
    if view.targets:
        lines += [
            heading,
            "",
            f"| target | kernels to rewrite moving off {md_cell(view.headline.home)} (distinct "
            "sites) | engineering days | from the project | fixed per target |",
            "|---|---:|---:|---|---:|",
        ]
        lines += [
            f"| {md_cell(t.target)} | {md_cell(t.count_text('—'))} | "
            f"{days_text(t.days) if t.days is not None else '—'} | "
            + (
                "—"
                if t.from_project is None
                else md_cell(f"{days_text(t.from_project)}: {t.project_items() or 'nothing found'}")
            )
            + f" | {days_text(t.fixed)} |"
            for t in view.targets
        ]
        apart = [(t.target, t.apart) for t in view.targets if t.apart is not None]
        if apart:  # a suite audit's tests' own lines: not in the table
            said = "; ".join(f"{target} {row.text()}" for target, row in apart)
            lines += ["", f"{md_cell(apart[0][1].where).capitalize()}, apart (not in the "
                      f"table): {md_cell(said)}"]  # fmt: skip
        lines.append("")
    if view.shares:
        if not lines:
            lines += [heading, ""]
        lines += ["| platform | xla | vendor | custom | basis | libraries |",
                  "|---|---:|---:|---:|---|---|"]  # fmt: skip
        lines += [
            f"| {md_cell(s.platform)} | {pct(s.layers['xla'])} | {pct(s.layers['vendor'])} | "
            f"{pct(s.layers['custom'])} | {md_cell(s.label)}"
            + (f"; **{RANKING}**{md_cell(s.ranking.removeprefix(RANKING))}" if s.ranking else "")
            + " | "
            f"{md_cell(', '.join(f'{lib} {pct(f)}' for lib, f in s.libraries)) or '—'} |"
            for s in view.shares
        ]
    return lines


def _md_totals(view: ReportView) -> list[str]:
    totals = view.totals
    if not totals.rows:
        return []
    align = "|".join("---:" if n else "---" for n in totals.numeric)
    lines = [
        "### Platform totals",
        "",
        f"| platform | {' | '.join(totals.headers)} | libraries |",
        f"|---|{align}|---|",
    ]
    for platform, cells, libraries in totals.rows:
        libs = ", ".join(f"{lib} {number(n)}" for lib, n in libraries) or "—"
        lines.append(f"| {md_cell(platform)} | {' | '.join(cells)} | {md_cell(libs)} |")
    lines += ["", f"_{totals_note(view.unit)}_"]
    if totals.not_compiled:
        lines += ["", md_cell(totals.not_compiled)]
    if view.collectives:
        lines += ["", f"Collectives by kind (call-weighted, summed over {view.unit}s):", ""]
        lines += [f"- **{md_cell(p)}**: {md_cell(what)}" for p, what in view.collectives]
    if view.deviceless:
        lines += ["", f"Note: {NO_AUTOTUNE_NOTE}."]
    return lines


def _md_emulations(view: ReportView) -> list[str]:
    """Per emulated platform, how its checks' emulations went (never executed numbers)."""
    if not view.emulations:
        return []
    lines = [
        "### Emulated on cpu",
        "",
        "| platform | checks | match | may differ | mismatch | failed | not run |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {md_cell(r.label)} | {number(r.checks)} | {number(r.match)} | "
        f"{number(r.may_differ)} | {number(r.mismatch)} | {number(r.failed)} | "
        f"{number(r.not_run)} |"
        for r in view.emulations
    ]
    return lines


def _md_hotspots(view: ReportView, options: DisplayOptions) -> list[str]:
    """The sites table of the home platform (or ``options.platform``), then each other
    platform's top sites (:data:`MARKDOWN_OTHER_SITES`), each platform's lock-in its own."""
    first = options.platform or view.hotspot_platform()
    if first is None:
        return []
    lines = _md_sites(view, options, first, MARKDOWN_HOTSPOTS)
    if options.platform is None:
        with_sites = dict.fromkeys(h.platform for h in view.hotspots)
        known = [p for p in view.platforms if p in with_sites]
        for platform in [*known, *(p for p in with_sites if p not in known)]:
            if platform != first:
                lines += ["", *_md_sites(view, options, platform, MARKDOWN_OTHER_SITES)]
    return lines


def _md_sites(view: ReportView, options: DisplayOptions, platform: str, top: int) -> list[str]:
    rows = options.hotspot_rows(top) if options.top is not None else top
    sites, layout = view.sites_shown(platform, options, rows)
    shown = sites if rows is None else sites[:rows]
    title = hotspot_title(view.hotspots, platform, len(shown), grouped=not options.layout_in_full())
    lines = [f"### {sentence(title)}", ""]
    if shown:
        lines += [
            f"| {' | '.join(hotspot_headers(view.unit))} |",
            "|---|---|---:|---:|---:|---:|",
        ]
    twins = twin_sites(view.hotspots)
    for site in shown:
        cells = hotspot_cells(site, twins)
        lines.append(f"| {md_code(cells[0])} | {md_cell(cells[1])} | {' | '.join(cells[2:])} |")
    if layout is not None:  # the layout findings in one line, the rows one option away
        lines += [*([""] if shown else []), md_cell(layout.summary())]
    return lines


def _md_audit(view: ReportView, options: DisplayOptions) -> list[str]:
    """What the suite audit saw; in a run with checks too, its own numbers and sites."""
    audit = view.audit
    if audit is None:
        return []
    lines = [
        "### Suite audit (`--jaxport-audit`)",
        "",
        f"- seen: {md_cell(audit.seen_line())}",
        f"- recorded by: {md_cell(audit.hook)}",
    ]
    said = audit.not_audited()
    if said is not None:
        lines.append(f"- not audited: {md_cell(said)}")
    lines += [f"- note: {md_cell(note)}" for note in audit.notes]
    lines += [
        f"- largest planned device memory: {md_cell(largest.line)}" for largest in audit.memory
    ]
    if audit.lines is not None:
        lines.append(f"- counted: {md_cell(audit.lines.line())}")
    owning = {t.nodeid for t in audit.tests if t.owns or t.eager_owned}
    owners = len(owning)
    users = sum(1 for t in audit.tests if (t.uses or t.eager_used) and t.nodeid not in owning)
    lines.append(
        f"- per test: {plural(owners, 'test')} own the computations they ran first; "
        f"{plural(users, 'other test')} only ran computations an earlier test owns (JAX "
        "served them from its caches); the JSON and HTML reports and `jaxport show "
        "REPORT.json -v` list them"
    )
    numbers = audit.numbers
    if numbers is not None:
        lines += ["", "The suite audit's own numbers (each distinct computation the suite ran, "
                  "once; the numbers above are the portable checks'):", ""]  # fmt: skip
        lines += _md_numbers(numbers, heading="#### The three numbers")
        lines += ["", *_md_hotspots(numbers, options)]
    return lines


def _md_layers(view: ReportView) -> list[str]:
    if not view.layers:
        return []
    lines = ["### Layers", "", "| layer | portable? | what we count | this suite |",
             "|---|---|---|---|"]  # fmt: skip
    lines += [
        f"| {md_cell(r.layer)} | {md_cell(r.portable)} | {md_cell(r.counted)} | "
        f"{md_cell(r.value)} |"
        for r in view.layers
    ]
    if view.tooling:
        lines += ["", "| file | line | assumption | why |", "|---|---:|---|---|"]
        lines += [
            f"| {md_code(a.file)} | {md_cell(a.line)} | {md_cell(a.rule)} | {md_cell(a.reason)} |"
            for a in view.tooling
        ]
    return lines


def _md_notes(view: ReportView) -> list[str]:
    notes = [
        f"- {md_cell(n.text)}" + (f" ({plural(n.checks, 'check')})" if n.checks else "")
        for n in view.notes
    ]
    return ["Notes:", "", *notes] if notes else []


def md_matrix_cell(cell: Cell) -> str:
    """``3 / 0 · match``: vendor / custom calls, numerics where it ran, what went wrong."""
    if not cell.lowers and cell.vendor is None:
        text = "**does not lower**"
    else:
        text = f"{cell.vendor} / {cell.custom}"
        if cell.level != "lowered":
            text += f" ({cell.level})"
    if cell.numerics != "not present":
        text += f" · {cell.numerics}"
    if cell.emulated is not None:
        text += f" · emulated: {cell.emulated}"
    if cell.compile_failed:
        text += " · **compile failed**"
    if cell.not_compiling:
        text += " · rules: does not compile"
    if cell.violations:
        text += f" · **over: {', '.join(cell.violations)}**"
    return md_cell(text).replace("\\*", "*")


def _md_matrix(view: ReportView, room: int) -> str:
    """The full matrix in a collapsed block: tests with problems first, cut to ``room``."""
    if not view.tests:
        return ""
    platforms = view.platforms
    ordered = sorted(view.tests, key=lambda t: not t.problem)
    emulated = " · emulated on cpu" if view.emulations else ""
    memory = view.memory_shown
    said = "; memory: planned of the device's capacity, per device" if memory else ""
    columns = [*(md_cell(p) for p in platforms), *(["memory"] if memory else [])]
    opening = [
        f"<details><summary>All tests: platform × test matrix ({plural(len(view.tests), 'test')}"
        f"; cells: vendor / custom calls · numerics{emulated}{said})</summary>",
        "",
        f"| test | outcome | check | {' | '.join(columns)} |",
        f"|---|---|---|{'---|' * len(columns)}",
    ]
    closing = ["", "</details>", ""]
    out = "\n".join(opening) + "\n"
    shown = 0
    budget = room - len("\n".join(closing)) - 200
    for test in ordered:
        rows = _md_test_rows(test, platforms, memory=memory)
        piece = "\n".join(rows) + "\n"
        if len(out) + len(piece) > budget:
            break
        out += piece
        shown += 1
    if shown < len(ordered):
        out += (
            f"\n_Matrix cut to fit: {number(shown)} of {plural(len(ordered), 'test')} shown "
            "(tests with problems first); the JSON and HTML reports have every test._\n"
        )
    for title, lines in (
        ("Transformations (most on any platform, per check):",
         [f"- {md_code(t)} {md_cell(line)}" for t, line in view.transformations]),
        ("Lowered prediction vs compiled reality:",
         [f"- {md_code(t)} {md_cell(c)}: {md_cell(line)}" for t, c, line in view.compiled_gaps]),
    ):  # fmt: skip
        piece = "\n".join(["", title, "", *lines]) + "\n"
        if lines and len(out) + len(piece) <= budget:
            out += piece
        elif lines:
            out += f"\n_{title[:-1]}: {plural(len(lines), 'line')} left out to fit._\n"
    return out + "\n".join(closing)


def _md_test_rows(test: TestRow, platforms: Sequence[str], *, memory: bool = False) -> list[str]:
    """A test's rows of the matrix: one per check, with its memory column where ``memory``."""
    if not test.checks:
        message = md_cell(test.error or "no checks recorded")
        return [f"| {md_code(test.nodeid)} | {test.outcome} | — | {message} |" +
                " |" * (len(platforms) - 1 + memory)]  # fmt: skip
    rows = []
    for i, check in enumerate(test.checks):
        first = md_code(test.nodeid) if i == 0 else "↳"
        outcome = test.outcome if i == 0 else ""
        cells = [md_matrix_cell(check.cells[p]) if p in check.cells else "—" for p in platforms]
        if memory:
            cells.append(md_memory_cell(check.memory))
        rows.append(f"| {first} | {outcome} | {md_cell(check.name)} | {' | '.join(cells)} |")
    return rows


def md_memory_cell(cells: Sequence[MemoryCell]) -> str:
    """``tpu (v5e): 13.1 of 15.75 GiB (83%)<br>rocm: not compiled``: a check's memory per
    platform, what does not fit in bold; ``—`` where it has none."""
    lines = [
        f"**{md_cell(cell.headline)}**" if cell.status == "bad" else md_cell(cell.line)
        for cell in cells
    ]
    return "<br>".join(lines) or "—"


# -- jaxport diff and jaxport merge -----------------------------------------------------------


def merge_markdown(result: MergeResult) -> str:
    """The section ``jaxport merge --md`` appends to the merged report's Markdown."""
    lines = ["### Legs", "", "| leg | platforms | present |", "|---|---|---|"]
    legs = result.document.merged.legs if result.document.merged is not None else ()
    lines += [
        f"| `{leg.leg}` | {', '.join(leg.platforms)} | {', '.join(leg.present_platforms) or '-'} |"
        for leg in legs
    ]
    lines += ["", "### Numerics across legs", ""]
    if not result.comparisons:
        lines.append("No saved outputs to compare (run the legs with --jaxport-save-outputs).")
    elif not result.drifts:
        lines.append(f"All {plural(result.comparisons, 'compared output')} match.")
    else:
        lines += ["| test | check | platform (leg) | vs reference (leg) | leaves |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for d in result.drifts:
            leaves = "<br>".join(md_cell(m) for m in d.messages)
            lines.append(
                f"| `{d.nodeid}` | {d.check} | {d.platform} (`{d.leg}`) | "
                f"{d.reference} (`{d.reference_leg}`) | {leaves} |"
            )
    if result.notes:
        lines += ["", *(f"- {md_cell(n)}" for n in result.notes)]
    return "\n".join(lines) + "\n"


def diff_markdown(found: ReportDiff) -> str:
    """``jaxport diff --md``: a pull-request comment."""
    lines = ["### pytest-jaxport: counts against the base", "", found.headline() + ".", ""]
    if found.changes:
        lines += ["| | test | check | platform | count | base | head | change |",
                  "|---|---|---|---|---|---:|---:|---:|"]  # fmt: skip
        for c in (*found.growth, *found.shrinkage):
            mark = ":red_circle:" if c.fails else ":green_circle:"
            if c.metric is None:
                what = "lowers" if c.kind == "now_lowers" else "fails to lower"
                lines.append(
                    f"| {mark} | {md_code(c.nodeid)} | {md_cell(c.check)} | {c.platform} | "
                    f"{what} | | | |"
                )
                continue
            assert c.before is not None
            assert c.after is not None
            level = "" if c.level == "lowered" else f" ({c.level})"
            delta = c.after - c.before
            lines.append(
                f"| {mark} | {md_code(c.nodeid)} | {md_cell(c.check)} | {c.platform} | "
                f"{metric_label(c.metric)}{level} | {value_text(c.metric, c.before)} | "
                f"{value_text(c.metric, c.after)} | "
                f"{'+' if delta > 0 else '-'}{value_text(c.metric, abs(delta))}"
                f"{f' ({md_cell(c.share())})' if c.share() else ''}"
                f"{f' **no longer fits {value_text(c.metric, c.capacity)}**' if c.capacity else ''}"
                " |"
            )
        lines.append("")
    for title, names in (("New tests", found.new_tests), ("Removed tests", found.removed_tests)):
        if names:
            lines += [f"**{title}:** " + ", ".join(md_code(n) for n in names), ""]
    if found.audit:
        lines += ["#### Suite audit", "", "| | platform | count | base | head | change |",
                  "|---|---|---|---:|---:|---:|"]  # fmt: skip
        for a in found.audit:
            mark = ":red_circle:" if a.grew else ":green_circle:"
            before, after = a.before or 0, a.after or 0
            sign = "+" if after >= before else "-"
            lines.append(
                f"| {mark} | {a.platform} | {md_cell(metric_label(a.metric or ''))} | "
                f"{value_text(a.metric, before)} | {value_text(a.metric, after)} | "
                f"{sign}{value_text(a.metric, abs(after - before))} |"
            )
        lines.append("")
    for title, pairs in (("Suite audit, new sites", found.new_sites),
                         ("Suite audit, removed sites", found.removed_sites)):  # fmt: skip
        if pairs:
            lines += [f"**{title}:**", ""]
            lines += [f"- {p}: {md_code(site)}" for p, site in pairs]
            lines.append("")
    return "\n".join(lines)
