"""A self-contained HTML rendering of a report (pure: a view in, a string out).

:func:`render_html` lays out a :class:`~pytest_jaxport.view.viewmodel.reportview.ReportView`
as one HTML document a person opens in a browser: no scripts, no network (a
``Content-Security-Policy`` of ``default-src 'none'`` forbids every fetch), inline CSS (the
package's ``assets/report.css``) and inline SVG only. It opens on what needs attention:

1. the header: the verdict, tiles (each links to its section) and the environment;
2. the problems, grouped by budget key and platform (violations, checks that do not lower,
   numerics mismatches, tests that failed or crashed, with their error);
3. the three numbers: runtime share per platform as stacked bars, each labelled measured or
   estimated; kernels to rewrite and engineering days per target, with the breakdown;
4. where the lock-in lives: distinct dispatch sites by source line, per platform;
5. platform totals (per-check sums next to distinct sites), the layer table, tooling;
6. the platform × test matrix: tests with problems first, passing tests collapsed; test ids
   in natural order (``[4]`` before ``[10]``);
7. per-test details (every test up to :data:`ALL_DETAILS_UP_TO` tests, beyond that the tests
   with problems).

Every string from the report is escaped. :func:`html` takes a report and builds its view.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from functools import lru_cache
from html import escape
from importlib.resources import files

from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.model.probe import Probe
from pytest_jaxport.model.runtime_share import RANKING, SHARE_LAYERS
from pytest_jaxport.report.document import Report
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.formatting import (
    days_text,
    number,
    pct,
    plural,
    seconds_text,
    sentence,
)
from pytest_jaxport.view.viewmodel.build import build_view
from pytest_jaxport.view.viewmodel.details import padding_line
from pytest_jaxport.view.viewmodel.matrix import Cell, CheckRow, FormatRow, TestRow
from pytest_jaxport.view.viewmodel.memory import MemoryCell
from pytest_jaxport.view.viewmodel.notes import NO_AUTOTUNE_NOTE
from pytest_jaxport.view.viewmodel.problems import Problem, ProblemGroup, setting_text
from pytest_jaxport.view.viewmodel.reportview import ReportView
from pytest_jaxport.view.viewmodel.rewrites import FIXED, RewriteRow, TargetRow
from pytest_jaxport.view.viewmodel.shares import ShareRow, share_row
from pytest_jaxport.view.viewmodel.sites import (
    LAYOUT,
    Twins,
    hotspot_cells,
    hotspot_headers,
    hotspot_title,
    twin_sites,
)
from pytest_jaxport.view.viewmodel.totals import totals_note

__all__ = ["html", "render_html"]

LAYER_COLOURS: Mapping[str, str] = {"xla": "#0077bb", "vendor": "#ee7733", "custom": "#aa3377"}
LAYER_TEXT: Mapping[str, str] = {"xla": "#ffffff", "vendor": "#1f2328", "custom": "#ffffff"}
LAYER_NAMES: Mapping[str, str] = {
    "xla": "XLA-generated",
    "vendor": "vendor library",
    "custom": "hand-written",
}
COST_COLOURS: Mapping[str, str] = {
    "kernel_rewrite": "#aa3377",
    "fallback_validation": "#ccbb44",
    "vendor_gap": "#ee7733",
    "tooling_assumption": "#66ccee",
    "format_rewrite": "#4477aa",
    "requantize": "#228833",
    "precision_review": "#99ddff",
    "layout_work": "#44bb99",
    "fixed": "#bbbbbb",
}
STATUS_NOTES: Mapping[str, str] = {
    "rewrite": "does not lower on the target",
    "fallback": "performance not guaranteed",
    "vendor-gap": "no counterpart on the target",
}
NUMERICS_CLASS: Mapping[str, str] = {
    "reference": "ref",
    "match": "good",
    "mismatch": "bad",
    "error": "bad",
    "failed": "bad",  # an emulation's run that raised
    "may differ": "warn",  # an emulation that matched, but the chip's measured errors may not
}
"""The class of a numerics (or emulation) state; any other is ``muted``."""
STATUS_CLASS: Mapping[str, str] = {"rewrite": "bad", "fallback": "warn", "vendor-gap": "warn"}
"""The class of a rewrite item's status (:data:`STATUS_NOTES` says what it means)."""
MEMORY_CLASS: Mapping[str, str] = {
    "good": "",
    "bad": ' class="badtext"',
    "unknown": ' class="muted"',
}
"""The class attribute of a memory cell's text, by how it stands (what does not fit in the
colour of a failure, what has no number muted)."""
OUTCOME_CLASS: Mapping[str, str] = {"passed": "good", "failed": "bad", "error": "bad"}
"""The class of a test's outcome; any other (skipped) is ``muted``."""


def _numerics_class(state: str) -> str:
    return NUMERICS_CLASS.get(state, "muted")


def _outcome_class(outcome: str) -> str:
    return OUTCOME_CLASS.get(outcome, "muted")


def _cost_colour(key: str) -> str:
    return COST_COLOURS.get(key, "#bbbbbb")


ALL_DETAILS_UP_TO = 200
"""Up to this many tests every test gets its details; beyond, the tests with problems."""
GROUP_ROWS = 10
"""Problem rows shown per group before the rest collapse."""
MATRIX_ROWS = 50
"""Matrix rows of tests with problems shown before the rest collapse (passing tests always
collapse when some test has a problem)."""
HOTSPOT_ROWS = 20
"""Sites shown per platform before the rest collapse."""

NUM = ' class="num"'
BAR_WIDTH = 360
BAR_HEIGHT = 20


def _e(value: object) -> str:
    """Escape anything for element content and quoted attribute values."""
    return escape("" if value is None else str(value), quote=True)


# -- SVG -------------------------------------------------------------------------------------------


def share_bar(row: ShareRow) -> str:
    """A horizontal stacked bar of the ``xla``/``vendor``/``custom`` fractions, inline SVG."""
    fractions = row.layers
    total = sum(fractions.values())
    summary = ", ".join(f"{LAYER_NAMES[k]} {pct(fractions[k])}" for k in SHARE_LAYERS)
    aria = (
        f"{row.platform} runtime share ({row.label}): {summary}"
        if total > 0
        else f"{row.platform}: no time"
    )
    parts = [
        f'<svg class="bar {row.basis}" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" '
        f'viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT}" role="img" aria-label="{_e(aria)}">',
        f"<title>{_e(aria)}</title>",
        f'<rect class="track" x="0" y="0" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" rx="3"/>',
    ]
    x = 0.0
    if total > 0:
        labels = []
        # A label over the band keeps a halo of its layer's colour, so the hatching never
        # runs through its digits.
        halo = ' stroke-width="3" paint-order="stroke" stroke="{}"' if row.band else ""
        for layer in SHARE_LAYERS:
            width = fractions[layer] / total * BAR_WIDTH
            if width <= 0:
                continue
            parts.append(
                f'<rect class="seg {layer}" x="{x:.2f}" y="0" width="{width:.2f}" '
                f'height="{BAR_HEIGHT}" fill="{LAYER_COLOURS[layer]}">'
                f"<title>{_e(LAYER_NAMES[layer])}: {pct(fractions[layer])}</title></rect>"
            )
            if width >= 40:
                labels.append(
                    f'<text x="{x + width / 2:.2f}" y="{BAR_HEIGHT / 2 + 4:.1f}" '
                    f'text-anchor="middle" fill="{LAYER_TEXT[layer]}"'
                    f"{halo.format(LAYER_COLOURS[layer])}>{_e(pct(fractions[layer]))}</text>"
                )
            x += width
        parts.append(band_marks(row))
        parts += labels
    else:
        parts.append(
            f'<text x="8" y="{BAR_HEIGHT / 2 + 4:.1f}" fill="#57606a">no time recorded</text>'
        )
    if row.basis == "estimated":
        parts.append(
            f'<rect class="estimate-outline" x="0.5" y="0.5" width="{BAR_WIDTH - 1}" '
            f'height="{BAR_HEIGHT - 1}" rx="3" fill="none"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


BAND_STEP = 6
"""Pixels between the band's hatch lines."""


def band_marks(row: ShareRow) -> str:
    """An estimate's error band on its bar: each span where a boundary between layers may
    lie (:attr:`ShareRow.band`) faded and hatched, with a tick at each end; nothing for a
    measured share."""
    if not row.band:
        return ""
    points = f" ±{row.band_points:.0f} points" if row.band_points is not None else ""
    said = (
        f"error band{points} (the estimate's mean error on the fidelity corpus): each boundary "
        "between layers may lie anywhere in the hatched region"
        + (f"; {row.ranking}" if row.ranking else "")
    )
    return f'<g class="band"><title>{_e(said)}</title>{_hatch(row.band)}</g>'


def _hatch(spans: Sequence[tuple[float, float]], width: int = BAR_WIDTH,
           height: int = BAR_HEIGHT) -> str:  # fmt: skip
    """``spans`` (fractions of ``width``) faded and hatched, a dark tick at each inner end.
    Plain shapes, no pattern: the page's policy allows no ``url(...)``."""
    marks = []
    for low, high in spans:
        x0, x1 = low * width, high * width
        if x1 <= x0:
            continue
        strokes = []
        start = int((x0 - height) // BAND_STEP) * BAND_STEP  # one grid: spans line up
        for x in range(start, int(x1) + 1, BAND_STEP):
            a, b = max(0.0, x0 - x), min(float(height), x1 - x)
            if a < b:
                strokes.append(f"M{x + a:.2f} {height - a:.2f}L{x + b:.2f} {height - b:.2f}")
        marks.append(
            f'<rect x="{x0:.2f}" y="0" width="{x1 - x0:.2f}" height="{height}" fill="#ffffff" '
            f'fill-opacity="0.35"/><path d="{"".join(strokes)}" stroke="#ffffff" '
            'stroke-width="1.5" fill="none"/>'
        )
        marks += [
            f'<path d="M{end:.2f} 0V{height}" stroke="#1f2328" stroke-width="1.5"/>'
            for end in (x0, x1)
            if 0.5 < end < width - 0.5
        ]
    return "".join(marks)


def days_bar(target: TargetRow, scale: float) -> str:
    """A horizontal stacked bar of one target's days by cost item, scaled to ``scale`` days."""
    aria = f"to {target.target}: {target.days_split().replace(' days', ' engineering days', 1)}"
    parts = [
        f'<svg class="bar days" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" '
        f'viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT}" role="img" aria-label="{_e(aria)}">',
        f"<title>{_e(aria)}</title>",
        f'<rect class="track" x="0" y="0" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" rx="3"/>',
    ]
    x = 0.0
    for key, label, value in target.breakdown:
        if value <= 0 or scale <= 0:
            continue
        width = value / scale * BAR_WIDTH
        parts.append(
            f'<rect class="seg {key}" x="{x:.2f}" y="0" width="{width:.2f}" '
            f'height="{BAR_HEIGHT}" fill="{_cost_colour(key)}"><title>'
            f"{_e(label)}: {days_text(value)} days</title></rect>"
        )
        if width >= 32:
            parts.append(
                f'<text x="{x + width / 2:.2f}" y="{BAR_HEIGHT / 2 + 4:.1f}" '
                f'text-anchor="middle" fill="#1f2328">{days_text(value)}</text>'
            )
        x += width
    parts.append("</svg>")
    return "".join(parts)


def _swatch(colour: str, label: str) -> str:
    return (
        f'<li><span class="swatch" style="background:{colour}" aria-hidden="true">'
        f"</span>{_e(label)}</li>"
    )


def _layer_legend() -> str:
    items = "".join(_swatch(LAYER_COLOURS[k], f"{k}: {LAYER_NAMES[k]}") for k in SHARE_LAYERS)
    return (
        f'<ul class="legend" aria-label="runtime share legend">{items}'
        '<li><span class="badge measured">measured</span> profiled on this machine</li>'
        '<li><span class="badge estimated">estimated</span> roofline model, dashed outline</li>'
        f"<li>{_band_swatch()} error band: where a boundary between layers may lie, ± the "
        "estimate's measured error; measured shares have none</li>"
        f'<li><span class="badge ranking">{RANKING}</span> the band is at least as wide as '
        "the smaller of the two largest shares: read which layer takes more time, not how "
        "much</li></ul>"
    )


def _band_swatch() -> str:
    """The band as the bars draw it, on a swatch of the vendor layer's colour."""
    return (
        '<svg class="bandswatch" width="28" height="14" viewBox="0 0 28 14" aria-hidden="true">'
        f'<rect width="28" height="14" fill="{LAYER_COLOURS["vendor"]}"/>'
        f"{_hatch([(0.0, 1.0)], width=28, height=14)}</svg>"
    )


def _badge(row: ShareRow) -> str:
    """The basis in a few words (``estimated ±37``); the full wording is its tooltip and is
    spelled out once under the table: a badge that wraps nothing keeps the table narrow."""
    short = row.short or row.label
    title = f' title="{_e(row.label)}"' if row.label != short else ""
    badge = f'<span class="badge {row.basis}"{title}>{_e(short)}</span>'
    if row.ranking:  # said once more under the table, with the reason
        badge += f'<span class="badge ranking" title="{_e(row.ranking)}">{_e(RANKING)}</span>'
    return badge


def _basis_notes(rows: Sequence[ShareRow]) -> str:
    """Each abbreviated basis spelled out once (``estimated ±37: estimated (roofline ...)``)."""
    said = dict.fromkeys((r.short, r.label) for r in rows if r.short and r.short != r.label)
    items = "".join(f"<li><strong>{_e(short)}</strong>: {_e(label)}</li>" for short, label in said)
    items += "".join(
        f"<li><strong>{_e(r.platform)}</strong>: {_e(r.ranking)}</li>" for r in rows if r.ranking
    )
    return f'<ul class="basis">{items}</ul>' if items else ""


def share_table(
    rows: Sequence[ShareRow], caption: str, *, bars: bool = True, time: str = "time per call"
) -> str:
    """One row per platform: label, basis badge, the bar (unless ``bars`` is false: a large
    report's per-check tables), the fractions, libraries, time (headed ``time``: one check's
    is per call, a suite total's the sum of one call of each); then each basis in full. In
    a scrolling box, so it never widens the page (1280 to 1920 pixels: tests/test_html_report)."""
    if not rows:
        return ""
    body = "".join(
        f'<tr><th scope="row">{_e(r.platform)}</th><td>{_badge(r)}</td>'
        + (f'<td class="barcell">{share_bar(r)}</td>' if bars else "")
        + "".join(f'<td class="num">{pct(r.layers[k])}</td>' for k in SHARE_LAYERS)
        + f'<td class="libs">{_e(", ".join(f"{n} {pct(f)}" for n, f in r.libraries)) or "—"}'
        f'</td><td class="num">{seconds_text(r.seconds) if r.seconds is not None else "—"}'
        "</td></tr>"
        for r in rows
    )
    head = "".join(f'<th scope="col" class="num">{k}</th>' for k in SHARE_LAYERS)
    return (
        f'<div class="scroll"><table class="shares"><caption>{_e(caption)}</caption><thead><tr>'
        '<th scope="col">platform</th><th scope="col">basis</th>'
        + ('<th scope="col">where the time goes</th>' if bars else "")
        + f'{head}<th scope="col">libraries</th>'
        + f'<th scope="col" class="num">{_e(time)}</th></tr></thead><tbody>{body}'
        f"</tbody></table></div>{_basis_notes(rows)}"
    )


# -- sections --------------------------------------------------------------------------------------


def _anchor(nodeid: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in nodeid)
    digest = zlib.crc32(nodeid.encode("utf-8"))
    return f"t-{safe[:60]}-{digest:08x}" if nodeid else "t-unnamed"


def _group_anchor(group: ProblemGroup) -> str:
    return "p-" + "".join(c if c.isalnum() else "-" for c in f"{group.kind}-{group.title}")


def _nodeid_html(nodeid: str) -> str:
    """``tests/test_x.py::test_y[id]`` as the test's name, then its file in small print."""
    path, sep, name = nodeid.rpartition("::")
    if not sep:
        return f'<code class="tname">{_e(nodeid)}</code>'
    return f'<code class="tname">{_e(name)}</code><span class="tpath">{_e(path)}</span>'


def _tile(value: str, label: str, href: str | None, cls: str = "") -> str:
    tag = f'a href="{href}"' if href else "div"
    end = "a" if href else "div"
    return (
        f'<{tag} class="tile{cls}"><span class="value">{_e(value)}</span>'
        f'<span class="label">{_e(label)}</span></{end}>'
    )


def _header(view: ReportView) -> str:
    head = view.headline
    failed, violations = head.failed_tests, head.violations
    findings = sum(g.count for g in view.problems if g.kind in ("not-lowered", "numerics"))
    audited = view.audit is not None and view.unit == "computation"
    tiles = [
        _tile(number(head.tests), "portable tests", "#matrix"),
        _tile(number(head.checks), "checks", "#matrix"),
        _tile(number(failed), "failed tests", "#problems", " bad" if failed else " good"),
        _tile(number(violations), "budget violations", "#problems",
              " bad" if violations else " good"),
    ]  # fmt: skip
    if head.mismatches:
        tiles.append(_tile(number(head.mismatches), "numerics mismatches", "#problems", " bad"))
    if view.audit is not None:
        seen = view.audit.seen["computations"]
        audit_tiles = [_tile(number(seen), "audited computations", "#audit")]
        if head.audit_failures or audited:
            cls = " bad" if head.audit_failures else " good"
            failures = _tile(number(head.audit_failures), "suite audit failures", "#problems", cls)
            audit_tiles.append(failures)
        tiles = audit_tiles if audited else [*tiles, *audit_tiles]
    if findings:
        label = "findings that fail no test" if audited else "other problems"
        tiles.append(_tile(number(findings), label, "#problems", " warn"))
    platform = view.hotspot_platform()
    if platform is not None:
        sites = sum(1 for h in view.hotspots if h.platform == platform)
        tiles.append(_tile(number(sites), f"{platform} sites", "#hotspots"))
    for target in view.targets:
        if target.kernels is not None:
            tiles.append(
                _tile(number(target.kernels), f"to rewrite for {target.target}", "#numbers",
                      " warn" if target.kernels else "")
            )  # fmt: skip
    dl = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in head.facts)
    version = f" {_e(head.tool_version)}" if head.tool_version else ""
    status = "bad" if failed or violations or head.audit_failures or head.not_collected else "good"
    verdict = (
        f"{number(failed)} of {plural(head.tests, 'portable test')} failed, "
        f"{plural(violations, 'budget violation')}{_e(head.mismatches_text(', '))}"
        if failed or violations
        else _e(view.within_budget())
    )
    if head.may_differ_text():
        verdict += f"; {_e(head.may_differ_text())}"
    if audited:
        verdict = _e(view.within_budget())
        if _not_lowered(view):
            verdict += f"; {plural(_not_lowered(view), 'computation')} do not lower everywhere"
    if head.audit_failures:
        verdict = (verdict + ", " if not audited else "") + plural(
            head.audit_failures, "suite audit failure")  # fmt: skip
    if head.not_collected:
        verdict = _e(head.did_not_run()) + verdict
    return (
        '<header class="top"><div class="titles"><h1>Portability report</h1>'
        f'<p class="sub">pytest-jaxport{version} · <span class="verdict {status}">'
        f"{verdict}</span> · {_e(head.level)}</p></div>"
        f'<div class="tiles" role="group" aria-label="suite totals">{"".join(tiles)}</div>'
        f'<dl class="facts">{dl}</dl></header>'
    )


def _not_lowered(view: ReportView) -> int:
    """The suite audit's computations that do not lower on some platform."""
    audit = view.audit
    if audit is None:
        return 0
    return max(0, audit.seen["computations"] - audit.lowers_everywhere)


def _toc(view: ReportView) -> str:
    links = [("problems", "Problems")]
    if view.shares or view.targets:
        links.append(("numbers", "The three numbers"))
    if view.hotspots:
        links.append(("hotspots", "Where the lock-in lives"))
    links += [("totals", "Platform totals"), ("layers", "Layers")]
    if view.tooling:
        links.append(("tooling", "Tooling"))
    if view.audit is not None:
        links.append(("audit", "Suite audit"))
    links.append(("matrix", "Platform × test matrix"))
    return (
        '<nav class="toc" aria-label="sections">'
        + "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in links)
        + "</nav>"
    )


def _problem_row(problem: Problem, group: ProblemGroup) -> str:
    test = f'<a href="#{_anchor(problem.test)}"><code>{_e(problem.test)}</code></a>'
    if len(problem.tests) > 1:  # the suite audit's computations sharing one reason
        more = plural(len(problem.tests) - 1, "more test")
        others = _e(", ".join(problem.tests[1:]))
        test += f' <span class="muted" title="{others}">and {more}</span>'
    if problem.kind == "violation":
        own = setting_text(problem.key, problem.limit, problem.origin)
        setting = "" if group.rule.startswith(own) else f" ({own})"
        what = f"{_e(problem.found)}{_e(setting)}"
    elif problem.kind == "mismatch":
        what = _e(problem.found)
    else:
        what = _e(problem.message)
    check = f"<code>{_e(problem.check)}</code>" if problem.check else "—"
    title = "\n".join(problem.details)
    attr = f' title="{_e(title)}"' if title else ""
    return f"<tr{attr}><td>{test}</td><td>{check}</td><td>{what}</td></tr>"


def _problems(view: ReportView) -> str:
    audited = view.unit == "computation"  # a suite audit without portable tests
    if not view.problems:
        clear = f"None: {_e(view.all_clear())}."
        return (
            '<section id="problems" class="problems" aria-labelledby="problems-h">'
            f'<h2 id="problems-h">Problems</h2><p class="allclear">{clear}</p></section>'
        )
    groups = []
    for group in view.problems:
        rows = [_problem_row(p, group) for p in group.problems]
        head = (
            '<thead><tr><th scope="col">test</th><th scope="col">check</th>'
            f'<th scope="col">{"found" if group.kind in ("violation", "mismatch") else "what"}'
            "</th></tr></thead>"
        )
        table = f'<table class="items">{head}<tbody>{"".join(rows[:GROUP_ROWS])}</tbody></table>'
        if len(rows) > GROUP_ROWS:
            table += (
                f'<details class="more"><summary>{plural(len(rows) - GROUP_ROWS, "more row")}'
                f'</summary><table class="items">{head}<tbody>{"".join(rows[GROUP_ROWS:])}'
                "</tbody></table></details>"
            )
        cls = "group" if group.kind in ("violation", "drift", "failure") else "group finding"
        groups.append(
            f'<div class="{cls}" id="{_group_anchor(group)}"><h3>{_e(group.title)} '
            f'<span class="muted">{_e(group.summary())}</span></h3>{table}</div>'
        )
    overview = "".join(
        f'<tr><th scope="row"><a href="#{_group_anchor(g)}">{_e(g.title)}</a></th>'
        f'<td class="num">{number(g.count)}</td><td class="num">{number(g.tests)}</td>'
        f"<td>{_e(g.rule)}</td></tr>"
        for g in view.problems
    )
    overview = (
        '<table class="overview"><thead><tr><th scope="col">group</th>'
        '<th scope="col" class="num">problems</th><th scope="col" class="num">tests</th>'
        f'<th scope="col">rule</th></tr></thead><tbody>{overview}</tbody></table>'
    )
    order = (
        "suite budget failures ([tool.jaxport.audit] fail_on, --jaxport-baseline), then "
        "computations that do not lower for a platform, one row per reason (findings that fail "
        "no test). Hover a row for the computations and where they are defined."
        if audited
        else "violations by budget key and platform, "
        # drift is a merged report's (jaxport merge): a run of one leg has none to speak of
        + ("outputs that drift across CI legs, " if view.headline.legs else "")
        + "then checks that do not lower or run (findings that fail no test unless "
        "must_lower says so), numerics mismatches, and tests that failed for another reason. "
        "Hover a row for the kernels or the full error."
    )
    return (
        '<section id="problems" class="problems" aria-labelledby="problems-h">'
        '<h2 id="problems-h">Problems</h2>'
        f'<p class="note">{plural(view.problem_count, "problem")} in '
        f"{plural(len(view.problems), 'group')}: {order}</p>{overview}{''.join(groups)}"
        "</section>"
    )


def _numbers(view: ReportView, anchor: str = "numbers") -> str:
    parts = []
    basis = "each distinct computation once" if view.unit == "computation" else "time-weighted"

    if view.shares:
        parts.append(
            "<h3>Runtime share</h3>"
            '<p class="note">Fraction of kernel time by layer. <em>Measured</em>: profiled '
            "where the platform ran. <em>Estimated</em>: a roofline model from op shapes "
            "against the platform's peak numbers, not a measurement.</p>"
            + _layer_legend()
            + share_table(
                view.shares,
                f"Runtime share per platform, suite total ({basis})",
                time=f"time, one call of each {view.unit}",
            )
        )
    if view.targets:
        parts.append(_rewrite(view.targets, home=view.headline.home))
    if not parts:
        return ""
    whose = " (suite audit)" if view.unit == "computation" else ""
    return (
        f'<section id="{anchor}" aria-labelledby="{anchor}-h"><h2 id="{anchor}-h">The three '
        f"numbers{whose}</h2>{''.join(parts)}</section>"
    )


def _rewrite(targets: Sequence[TargetRow], *, home: str) -> str:
    """Kernels to rewrite and engineering days: a pair of tiles per target, then the cost
    breakdown of the targets that are priced and what the estimate counts."""
    tiles = "".join(
        f'<div class="target"><h4>to {_e(t.target)}</h4><div class="pair">'
        f'<div class="tile{" warn" if t.kernels else ""}"><span class="value">'
        f'{_e(t.count_text("—"))}</span><span class="label">'
        "kernels to rewrite (distinct sites)</span></div>"
        f'<div class="tile"><span class="value">{days_text(t.days) if t.days is not None else "—"}'
        '</span><span class="label">engineering days</span>'
        + (f'<span class="parts">= {_e(t.parts())}</span>' if t.parts() else "")
        + "</div></div></div>"
        for t in targets
    )
    out = [
        f"<h3>Kernels to rewrite and engineering days moving off {_e(home)}</h3>",
        f'<div class="targets">{tiles}</div>',
    ]
    apart = [(t.target, t.apart) for t in targets if t.apart is not None]
    if apart:  # a suite audit's tests' own lines: not in the tiles
        said = "; ".join(f"{target} {row.text()}" for target, row in apart)
        out.append(
            f'<p class="note">{_e(apart[0][1].where.capitalize())}, apart (not in the '
            f"numbers above): {_e(said)}</p>"
        )
    priced = [t for t in targets if t.breakdown]
    if priced:
        out.append(_cost_breakdown(priced))
    items = [(t.target, i) for t in targets for i in t.items]
    if items:
        out.append(_rewrite_items(items, home=home))
    return "".join(out)


def _cost_breakdown(priced: Sequence[TargetRow]) -> str:
    """The priced targets' days by cost item (the project's part above the fixed one) beside
    a bar per target."""
    scale = max(t.days or 0.0 for t in priced)
    labels = list(dict.fromkeys((key, label) for t in priced for key, label, _ in t.breakdown))
    head = "".join(f'<th scope="col" class="num">{_e(t.target)}</th>' for t in priced)
    rows = []
    for key, label in labels:
        if key == FIXED and any(t.fixed for t in priced):  # the project's part above it
            cells = "".join(
                f'<td class="num">{days_text(t.from_project or 0.0)}</td>' for t in priced
            )
            rows.append(f'<tr class="subtotal"><th scope="row">from the project</th>{cells}</tr>')
        days = [next((d for k, _, d in t.breakdown if k == key), 0) for t in priced]
        cells = "".join(f'<td class="num">{days_text(d)}</td>' for d in days)
        rows.append(
            f'<tr><th scope="row"><span class="swatch" style="background:'
            f'{_cost_colour(key)}" aria-hidden="true"></span>{_e(label)}</th>'
            f"{cells}</tr>"
        )
    total = "".join(
        f'<td class="num"><strong>{days_text(t.days or 0.0)}</strong></td>' for t in priced
    )
    rows.append(f'<tr class="total"><th scope="row">total days</th>{total}</tr>')
    bars = "".join(
        f'<tr><th scope="row">{_e(t.target)}</th><td class="barcell">{days_bar(t, scale)}'
        f'</td><td class="num">{days_text(t.days or 0.0)} d</td></tr>'
        for t in priced
    )
    return (
        '<div class="split"><table class="breakdown"><caption>Cost breakdown, days '
        "(configurable in <code>[tool.jaxport.cost]</code>)</caption><thead><tr>"
        f'<th scope="col">item</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
        '</table><table class="daybars"><caption>Days per target</caption><thead><tr>'
        '<th scope="col">target</th><th scope="col">breakdown</th>'
        f'<th scope="col" class="num">total</th></tr></thead><tbody>{bars}</tbody></table>'
        "</div>"
    )


def _rewrite_items(items: Sequence[tuple[str, RewriteRow]], *, home: str) -> str:
    """Each kernel or dispatch bound to ``home`` the estimate counts, per target."""
    rows = []
    for target, item in items:
        cls = STATUS_CLASS[item.status]
        where = f"<code>{_e(item.location)}</code>" if item.location else "—"
        rows.append(
            f'<tr><td>{_e(target)}</td><td><span class="pill {cls}">{_e(item.status)}</span>'
            f'<span class="statusnote">{_e(STATUS_NOTES[item.status])}</span></td>'
            f"<td><code>{_e(item.name)}</code></td>"
            f'<td class="nowrap">{_e(item.kind)}</td>'
            f"<td>{where}</td><td>{_e(item.check)}</td>"
            f'<td class="reason">{_e(item.reason)}</td></tr>'
        )
    return (
        '<table class="items"><caption>What the estimate counts: each kernel or dispatch '
        f'bound to {_e(home)}, per target</caption><thead><tr><th scope="col">target</th>'
        '<th scope="col">status</th><th scope="col">kernel</th><th scope="col">kind</th>'
        '<th scope="col">source</th><th scope="col">check</th><th scope="col">why</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _hotspot_table(
    sites: Sequence[Hotspot], unit: str = "check", twins: Twins = frozenset()
) -> str:
    head = "".join(
        f'<th scope="col"{NUM if i >= 2 else ""}>{_e(h)}</th>'
        for i, h in enumerate(hotspot_headers(unit))
    )
    rows = []
    for site in sites:
        cells = hotspot_cells(site, twins)
        rows.append(
            f'<tr class="{_e(site.layer)}"><td class="site"><code>{_e(cells[0])}</code></td>'
            f'<td><span class="pill {_e(site.layer)}">{_e(site.layer)}</span> {_e(cells[1])}</td>'
            + "".join(f'<td class="num">{_e(c)}</td>' for c in cells[2:])
            + "</tr>"
        )
    return (
        f'<table class="hotspots"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
        "</tbody></table>"
    )


def _hotspots(view: ReportView, options: DisplayOptions, anchor: str = "hotspots") -> str:
    if not view.hotspots:
        return ""
    counted = "computations" if view.unit == "computation" else "checks"
    shown_rows = options.hotspot_rows(HOTSPOT_ROWS) if options.top is not None else HOTSPOT_ROWS
    parts = []
    platforms = list(dict.fromkeys(h.platform for h in view.hotspots))
    first = view.hotspot_platform()  # the home platform, where the lock-in is, first
    twins = twin_sites(view.hotspots)
    for platform in sorted(platforms, key=lambda p: p != first):
        # the layout findings in one line, their rows collapsed, as at the terminal's default
        sites = [h for h in view.hotspots if h.platform == platform and h.layer != LAYOUT]
        layout = view.layout_group(platform)
        shown = sites if shown_rows is None else sites[:shown_rows]
        title = hotspot_title(view.hotspots, platform, len(shown), grouped=True)
        block = f"<h3>{_e(sentence(title))}</h3>"
        if shown:
            block += _hotspot_table(shown, view.unit, twins)
        if len(shown) < len(sites):
            block += (
                f'<details class="more"><summary>{plural(len(sites) - len(shown), "more site")}'
                f"</summary>{_hotspot_table(sites[len(shown) :], view.unit, twins)}</details>"
            )
        if layout is not None:
            block += (
                f'<p class="layout-summary">{_e(layout.summary(detail=""))}</p>'
                f'<details class="more layout"><summary>{_e(platform)} layout findings: '
                f"{plural(len(layout.sites), 'site')}, heaviest first</summary>"
                f"{_hotspot_table(layout.sites, view.unit, twins)}</details>"
            )
        parts.append(block)
    return (
        f'<section id="{anchor}" aria-labelledby="{anchor}-h"><h2 id="{anchor}-h">Where the '
        'lock-in lives</h2><p class="note">Each distinct vendor or hand-written dispatch site '
        f"(source line and kernel) counted once, with the {counted} and tests that reach it and "
        f"the dispatches they make there (summed over {counted}). Time: the site's share of the "
        f"platform's suite time, each of the {counted}' library or layer time split among its "
        "dispatches by count. Format and layout sites (a rule at a source line) count the "
        f"findings there; they have no time of their own.</p>{''.join(parts)}</section>"
    )


def _audit(view: ReportView, options: DisplayOptions) -> str:
    """What the suite audit saw and how, per test the computations it owns and uses; in a run
    with checks too, its own numbers, sites and totals."""
    audit = view.audit
    if audit is None:
        return ""
    items = [f"<li>seen: {_e(audit.seen_line())}</li>",
             f"<li>recorded by: {_e(audit.hook)}</li>"]  # fmt: skip
    said = audit.not_audited()
    if said is not None:
        items.append(f"<li>not audited: {_e(said)}</li>")
    items += [f"<li>note: {_e(note)}</li>" for note in audit.notes]
    items += [
        f"<li>largest planned device memory: {_memory_span(largest.memory, largest.line)}</li>"
        for largest in audit.memory
    ]
    if audit.lines is not None:
        items.append(f"<li>counted: {_e(audit.lines.line())}</li>")
    parts = [f"<ul>{''.join(items)}</ul>"]
    numbers = audit.numbers
    if numbers is not None:
        parts.append(
            '<p class="note">The suite audit\'s own numbers: each distinct computation the '
            "suite ran, once (the numbers above are the portable checks').</p>"
            + _numbers(numbers, anchor="audit-numbers")
            + _hotspots(numbers, options, anchor="audit-hotspots")
            + _totals(numbers, anchor="audit-totals")
        )
    if audit.tests:
        rows = "".join(
            f"<tr><td><code>{_e(t.nodeid)}</code></td>"
            f"<td>{_e(_listed(t.owns, t.eager_owned))}</td>"
            f"<td>{_e(_listed([f'{n} of {o}' for n, o in t.uses], t.eager_used))}</td>"
            "</tr>"
            for t in audit.tests
        )
        parts.append(
            '<details class="more"><summary>Per test: the computations it owns (ran first in '
            "collection order) and those it uses that an earlier test owns (JAX served them "
            "from its caches); eager op-by-op computations (jnp outside jit) are counted"
            + (" (each in the first test that ran it)" if audit.eager_users == "owner" else "")
            + '</summary><table class="items"><thead><tr><th scope="col">'
            'test</th><th scope="col">owns</th><th scope="col">uses</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></details>"
        )
    return (
        '<section id="audit" aria-labelledby="audit-h"><h2 id="audit-h">Suite audit '
        f"(<code>--jaxport-audit</code>)</h2>{''.join(parts)}</section>"
    )


def _listed(names: Sequence[str], eager: int) -> str:
    """``mlp [3f2a1b2c], step [9d0e1f2a]; 5 eager ops``; ``—`` for none."""
    parts = [", ".join(names)] if names else []
    parts += [plural(eager, "eager op")] if eager else []
    return "; ".join(parts) or "—"


def _totals(view: ReportView, anchor: str = "totals") -> str:
    totals = view.totals
    if not totals.rows:
        return ""
    head = "".join(
        f'<th scope="col"{NUM if n else ""}>{_e(h)}</th>'
        for h, n in zip(totals.headers, totals.numeric, strict=True)
    )
    rows = "".join(
        f'<tr><th scope="row">{_e(platform)}</th>'
        + "".join(
            f"<td{NUM if n else ''}>{_e(c)}</td>"
            for c, n in zip(cells, totals.numeric, strict=True)
        )
        + f'<td class="libs">{_e(", ".join(f"{lib} {number(k)}" for lib, k in libraries)) or "—"}'
        "</td></tr>"
        for platform, cells, libraries in totals.rows
    )
    note = f'<p class="note">{_e(NO_AUTOTUNE_NOTE)}.</p>' if view.deviceless else ""
    if totals.not_compiled:
        note += f'<p class="note">{_e(totals.not_compiled)}.</p>'
    if view.collectives:
        items = "".join(f"<li><b>{_e(p)}</b>: {_e(what)}</li>" for p, what in view.collectives)
        note += (
            f'<p class="note">Collectives by kind (call-weighted, summed over {view.unit}s):</p>'
            f'<ul class="collectives">{items}</ul>'
        )
    return (
        f'<section id="{anchor}" aria-labelledby="{anchor}-h"><h2 id="{anchor}-h">Platform '
        "totals</h2>"
        f'<p class="note">{_e(totals_note(view.unit))}</p>'
        f'<div class="scroll"><table class="totals"><thead><tr><th scope="col">platform</th>'
        f'{head}<th scope="col">libraries</th></tr></thead><tbody>{rows}</tbody></table></div>'
        f"{note}"
        "</section>"
    )


def _emulations(view: ReportView) -> str:
    """Per emulated platform, how its checks' emulations went (never executed numbers)."""
    if not view.emulations:
        return ""
    items = "".join(f"<li><b>{_e(r.label)}</b>: {_e(r.counts())}</li>" for r in view.emulations)
    return (
        '<section id="emulated" aria-labelledby="emulated-h"><h2 id="emulated-h">Emulated on '
        'cpu</h2><p class="note">Run on cpu as each platform would compute (emulate), '
        f'compared with the reference; never executed there.</p><ul class="emulations">{items}'
        "</ul></section>"
    )


def _layers(view: ReportView) -> str:
    if not view.layers:
        return ""
    body = "".join(
        f'<tr><th scope="row">{_e(r.layer)}</th><td>{_e(r.portable)}</td>'
        f"<td>{_e(r.counted)}</td><td>{_e(r.value)}</td></tr>"
        for r in view.layers
    )
    notes = "".join(
        f"<li>{_e(n.text)}" + (f" ({plural(n.checks, 'check')})" if n.checks else "") + "</li>"
        for n in view.notes
    )
    return (
        '<section id="layers" aria-labelledby="layers-h"><h2 id="layers-h">Layers</h2>'
        '<table class="layers"><caption>How locked in the suite is, layer by layer.</caption>'
        '<thead><tr><th scope="col">layer</th><th scope="col">portable?</th>'
        '<th scope="col">what we count</th><th scope="col">value</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
        + (f'<ul class="note">{notes}</ul>' if notes else "")
        + "</section>"
    )


def _tooling(view: ReportView) -> str:
    rows = [
        f'<tr><td class="nowrap"><code>{_e(a.file)}:{_e(a.line)}</code></td>'
        f'<td class="nowrap">{_e(a.rule)}</td><td>{_e(a.reason)}</td>'
        f"<td><code>{_e(a.text)}</code></td></tr>"
        for a in view.tooling
    ]
    if not rows:
        return ""
    return (
        '<section id="tooling" aria-labelledby="tooling-h"><h2 id="tooling-h">NVIDIA-bound '
        'tooling and CI assumptions</h2><table class="items"><thead><tr>'
        '<th scope="col">where</th><th scope="col">rule</th><th scope="col">why</th>'
        f'<th scope="col">line</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
        "</section>"
    )


def _cell(cell: Cell) -> str:
    """One matrix cell: counts (and their level) where it lowers, what went wrong."""
    if cell.vendor is None:
        text = '<span class="mark bad" aria-hidden="true">✗</span> does not lower'
    else:
        custom = f'<b class="warntext">{cell.custom}</b>' if cell.custom else "0"
        text = f"{cell.vendor} / {custom}"
        if cell.level != "lowered":
            text += f' <span class="level compiled">{_e(cell.level)}</span>'
    if cell.numerics != "not present":
        cls = _numerics_class(cell.numerics)
        text += f' <span class="numerics {cls}">{_e(cell.numerics)}</span>'
    if cell.emulated is not None:
        cls = _numerics_class(cell.emulated)
        text += (
            f' <span class="numerics {cls}" title="{_e(cell.emulated_label)}">emulated: '
            f"{_e(cell.emulated)}</span>"
        )
    if cell.compile_failed:
        text += ' <span class="badtext">compile failed</span>'
    if cell.not_compiling:
        text += ' <span class="warntext">rules: does not compile</span>'
    if cell.violations:
        text += f'<div class="viol">over: {_e(", ".join(cell.violations))}</div>'
    label = (
        f"{cell.platform}: "
        + ("does not lower" if cell.vendor is None else
           f"lowers, vendor {cell.vendor}, custom {cell.custom} ({cell.level})")
        + (f", numerics {cell.numerics}" if cell.numerics != "not present" else "")
        + (f", the format rules say it does not compile ({', '.join(cell.not_compiling)})"
           if cell.not_compiling else "")
        + (f", {cell.emulated_label}: {cell.emulated}" if cell.emulated is not None else "")
        + (", over budget" if cell.violations else "")
    )  # fmt: skip
    title = f' title="{_e(chr(10).join(cell.errors))}"' if cell.errors else ""
    if cell.status == "good":  # the text and the column say it all: a large matrix stays small
        return f'<td class="cell c good"{title}>{text}</td>'
    return f'<td class="cell c {cell.status}"{title} aria-label="{_e(label)}">{text}</td>'


def _memory_span(cell: MemoryCell, text: str, *, titled: bool = True) -> str:
    """``text`` (a memory cell's line) marked as the cell stands: what does not fit in the
    colour of a failure, what has no number muted; the details as its tooltip (``titled``)."""
    cls = MEMORY_CLASS[cell.status]
    title = f' title="{_e(chr(10).join(cell.details))}"' if cell.details and titled else ""
    return f"<span{cls}{title}>{_e(text)}</span>"


def _memory_td(row: CheckRow) -> str:
    """A check's memory column: per platform, its plan against the device's capacity."""
    lines = [
        f"<div>{_memory_span(c, c.headline if c.status == 'bad' else c.line)}</div>"
        for c in row.memory
    ]
    return f'<td class="cell memory">{"".join(lines) or "—"}</td>'


def _test_rows(
    test: TestRow, platforms: Sequence[str], *, linked: bool, memory: bool = False
) -> str:
    ocls = _outcome_class(test.outcome)
    checks: Sequence[CheckRow | None] = test.checks or [None]
    span = f' rowspan="{len(checks)}"' if len(checks) > 1 else ""
    name = _nodeid_html(test.nodeid)
    if linked:
        name = f'<a href="#{_anchor(test.nodeid)}">{name}</a>'
    first = (
        f'<th scope="rowgroup" class="testname"{span}>{name}</th>'
        f'<td{span}><span class="pill {ocls}">{_e(test.outcome)}</span></td>'
    )
    rows = []
    for i, check in enumerate(checks):
        lead = first if i == 0 else ""
        if check is None:
            message = test.error or "no checks recorded"
            rows.append(
                f'<tr>{lead}<td class="muted">—</td><td class="cell na" '
                f'colspan="{max(1, len(platforms) + memory)}">{_e(message)}</td></tr>'
            )
            continue
        label = (
            f'<th scope="row" class="checkname variant" title="a transformation of '
            f'{_e(check.variant_of)}">↳ '
            if check.variant_of
            else '<th scope="row" class="checkname">'
        )
        cells = "".join(
            _cell(check.cells[p]) if p in check.cells else '<td class="cell na">—</td>'
            for p in platforms
        )
        if memory:
            cells += _memory_td(check)
        rows.append(f"<tr>{lead}{label}<code>{_e(check.name)}</code></th>{cells}</tr>")
    return "".join(rows)


def _matrix(view: ReportView) -> str:
    if not view.tests:
        said = "No portable tests ran."
        if view.audit is not None:
            said = (
                "No portable tests ran: this run audited the suite as it is "
                '(<code>--jaxport-audit</code>); what each test ran is under <a href="#audit">'
                "Suite audit</a>."
            )
        return (
            '<section id="matrix" aria-labelledby="matrix-h"><h2 id="matrix-h">Platform × test '
            f'matrix</h2><p class="note">{said}</p></section>'
        )
    reference = view.headline.reference
    present = set(view.headline.present)
    head = (
        '<thead><tr><th scope="col">test</th><th scope="col">outcome</th>'
        '<th scope="col">check</th>'
        + "".join(
            f'<th scope="col">{_e(p)}'
            + ('<span class="tag">reference</span>' if p == reference else "")
            + ('<span class="tag">present</span>' if p in present else "")
            + "</th>"
            for p in view.platforms
        )
        + ('<th scope="col">memory</th>' if view.memory_shown else "")
        + "</tr></thead>"
    )
    problem = [t for t in view.tests if t.problem]
    passing = [t for t in view.tests if not t.problem]
    every = len(view.tests) <= ALL_DETAILS_UP_TO  # passing tests have details to link to
    out = []
    if problem:
        rows = [_test_rows(t, view.platforms, linked=True, memory=view.memory_shown)
                for t in problem]  # fmt: skip
        out.append(
            f"<h3>{plural(len(problem), 'test')} with problems</h3>"
            f'<div class="scroll"><table class="matrix">{head}<tbody>'
            + "".join(rows[:MATRIX_ROWS])
            + "</tbody></table></div>"
        )
        if len(rows) > MATRIX_ROWS:
            out.append(
                f'<details class="more"><summary>{plural(len(rows) - MATRIX_ROWS, "more test")}'
                f' with problems</summary><div class="scroll"><table class="matrix">{head}<tbody>'
                + "".join(rows[MATRIX_ROWS:])
                + "</tbody></table></div></details>"
            )
    if passing:
        passed = [
            _test_rows(t, view.platforms, linked=every, memory=view.memory_shown) for t in passing
        ]
        table = (
            f'<div class="scroll"><table class="matrix">{head}<tbody>'
            + "".join(passed)
            + "</tbody></table></div>"
        )
        summary = f"{plural(len(passing), 'test')} without problems"
        out.append(
            table
            if not problem
            else f'<details class="more"><summary>{summary}</summary>{table}</details>'
        )
    legend = _matrix_legend(view)
    return (
        '<section id="matrix" aria-labelledby="matrix-h"><h2 id="matrix-h">Platform × test '
        f"matrix</h2>{legend}{''.join(out)}</section>"
    )


def _memory_table(cells: Sequence[MemoryCell]) -> str:
    """A check's device memory per platform: its plan of the device's capacity, and the
    compiler's count, or its words where it refused; ``""`` where it has none."""
    if not cells:
        return ""
    rows = "".join(
        ('<tr class="bad">' if c.status == "bad" else "<tr>") + f"<td>{_e(c.where)}</td>"
        f"<td>{_memory_span(c, c.text, titled=False)}</td>"
        f"<td>{'<br>'.join(_e(d) for d in c.details) or '—'}</td></tr>"
        for c in cells
    )
    return (
        '<table class="kernels"><caption>Device memory: the compiler\'s plan per device, of '
        'the device\'s capacity</caption><thead><tr><th scope="col">platform (device)</th>'
        '<th scope="col">planned</th><th scope="col">the compiler</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _matrix_legend(view: ReportView) -> str:
    """What the matrix's cells say and what their colours mean (its memory column's, where
    it has one)."""
    return (
        '<ul class="legend" aria-label="matrix legend">'
        "<li>cells: vendor / custom calls (call-weighted), the level they come from where "
        "compiled, numerics where the platform ran"
        + (", its emulation's where emulated on cpu" if view.emulations else "")
        + "</li>"
        + ("<li>memory: the check's planned device memory per platform, of the device's "
           "capacity (per chip of a slice)</li>" if view.memory_shown else "")
        + '<li><span class="swatch cellgood" aria-hidden="true"></span>lowers, within budget</li>'
        '<li><span class="swatch cellwarn" aria-hidden="true"></span>hand-written kernels</li>'
        + '<li><span class="swatch cellbad" aria-hidden="true"></span>does not lower, over '
        + ("budget, numerics differ, or does not fit its device" if view.memory_shown
           else "budget, or numerics differ")
        + " (hover for the error)</li></ul>"
    )  # fmt: skip


def _kernels_table(probe: Probe) -> str:
    rows = []
    for platform, result in probe.platforms.items():
        census = result.budgeted
        if census is None:
            continue
        level = "compiled" if result.compiled is not None else "lowered"
        for k in census.kernels:
            if k.layer not in ("vendor", "custom"):
                continue
            layer = k.layer
            where = f"<code>{_e(k.location)}</code>" if k.location else "—"
            rows.append(
                f'<tr class="{layer}"><td>{_e(platform)}</td>'
                f'<td><span class="pill {layer}">{_e(layer)}</span></td>'
                f"<td><code>{_e(k.name)}</code></td><td>{_e(k.library or '—')}</td>"
                f'<td>{_e(k.kind)}</td><td class="num">{_e(k.count or 1)}</td>'
                f"<td>{where}</td><td>{level}</td></tr>"
            )
    if not rows:
        return '<p class="note">No vendor-library or hand-written kernels on any platform.</p>'
    return (
        '<table class="kernels"><caption>Vendor and hand-written kernels, with the source line '
        'that produced each</caption><thead><tr><th scope="col">platform</th>'
        '<th scope="col">layer</th><th scope="col">kernel</th><th scope="col">library</th>'
        '<th scope="col">kind</th><th scope="col" class="num">count</th>'
        '<th scope="col">source</th><th scope="col">level</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _findings_table(rows: Sequence[FormatRow]) -> str:
    if not rows:
        return ""
    body = "".join(
        f'<tr class="{"bad" if not r.compiles else ""}"><td>{_e(r.platform)}</td>'
        f"<td><code>{_e(r.rule)}</code></td><td>{_e(r.effect)}</td>"
        f'<td class="num">{number(r.count)}</td>'
        f"<td>{f'<code>{_e(r.location)}</code>' if r.location else '—'}</td>"
        f"<td>{_e(r.detail)}</td>"
        f'<td class="num">{pct(r.fraction) if r.fraction is not None else "—"}</td>'
        f"<td>{_e(r.level)}</td></tr>"
        for r in rows
    )
    return (
        '<table class="kernels"><caption>Numeric-format and memory-layout findings, per '
        "platform and source line (docs/reference.md: the rules and their sources)</caption>"
        '<thead><tr><th scope="col">platform</th><th scope="col">rule</th>'
        '<th scope="col">effect</th><th scope="col" class="num">count</th>'
        '<th scope="col">source</th><th scope="col">detail</th>'
        '<th scope="col" class="num">share</th><th scope="col">level</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _check_details(row: CheckRow, *, bars: bool) -> str:

    out = [f"<h4>check <code>{_e(row.name)}</code></h4>"]
    problems = [
        f"<li>{_e(cell.platform)}<pre>{_e(chr(10).join(cell.errors))}</pre></li>"
        for cell in row.cells.values()
        if cell.errors
    ]
    if problems:
        out.append(f'<ul class="problems">{"".join(problems)}</ul>')
    emulated = [
        f"<li>{_e(cell.emulated_label)}: {_e(cell.emulated)}"
        f"<pre>{_e(chr(10).join(cell.emulation))}</pre></li>"
        for cell in row.cells.values()
        if cell.emulated is not None
    ]
    if emulated:
        out.append(f'<ul class="emulated">{"".join(emulated)}</ul>')
    out.append(_memory_table(row.memory))
    out.append(_kernels_table(row.probe))
    padding = [line for r in row.probe.platforms.values() if (line := padding_line(r))]
    if padding:
        out.append("".join(f'<p class="note">{_e(line)}</p>' for line in padding))
    out.append(_findings_table(row.formats))
    shares = [
        share_row(p, r.runtime_share)
        for p, r in row.probe.platforms.items()
        if r.runtime_share is not None
    ]
    if shares:
        out.append(share_table(shares, f"Runtime share of {row.name}", bars=bars))
    return "".join(out)


def _test_details(view: ReportView) -> str:

    every = len(view.tests) <= ALL_DETAILS_UP_TO
    shown = [t for t in view.tests if every or t.problem]
    if not shown:
        return ""
    out = []
    for test in shown:
        ocls = _outcome_class(test.outcome)
        body = []
        violations = test.violations
        if violations:
            body.append(
                '<div class="violations"><h4>Budget violations</h4>'
                + "".join(f'<pre class="violation">{_e(v.long_repr())}</pre>' for v in violations)
                + "</div>"
            )
        if test.error:
            body.append(f'<pre class="violation">{_e(test.error)}</pre>')
        body += [_check_details(r, bars=every) for r in test.checks]
        if not test.checks and not test.error:
            body.append('<p class="note">No checks recorded.</p>')
        bits = plural(len(test.checks), "check")
        if violations:
            bits += f", {plural(len(violations), 'violation')}"
        is_open = " open" if test.problem and every else ""  # a long page opens nothing
        out.append(
            f'<details class="test" id="{_anchor(test.nodeid)}"{is_open}><summary>'
            f'<span class="pill {ocls}">{_e(test.outcome)}</span> <code>{_e(test.nodeid)}'
            f'</code> <span class="muted">{bits}</span></summary>'
            f'<div class="testbody">{"".join(body)}</div></details>'
        )
    note = (
        ""
        if every
        else f'<p class="note">Details of the {plural(len(shown), "test")} with problems; '
        "<code>jaxport show REPORT.json --details all</code> prints every test's.</p>"
    )
    return (
        '<section id="tests" aria-labelledby="tests-h"><h2 id="tests-h">Tests</h2>'
        + note
        + "".join(out)
        + "</section>"
    )


@lru_cache(maxsize=1)
def stylesheet() -> str:
    """The page's CSS: ``assets/report.css``, package data beside this module, read once and
    inlined (the page fetches nothing)."""
    return (files("pytest_jaxport.view") / "assets" / "report.css").read_text(encoding="utf-8")


def html(report: Report, options: DisplayOptions | None = None) -> str:
    """The whole report as one self-contained HTML document (see :func:`render_html`)."""
    return render_html(build_view(report), options or DisplayOptions())


def render_html(view: ReportView, options: DisplayOptions) -> str:
    """The view as one self-contained HTML document, problems first."""
    view = view.select(options)
    head = view.headline
    title = (
        f"pytest-jaxport portability report: {plural(head.tests, 'test')}, "
        f"{number(head.failed_tests)} failed, {plural(head.violations, 'budget violation')}"
    )
    if view.audit is not None and view.unit == "computation":  # a suite audit, no checks
        title = (
            "pytest-jaxport suite audit: "
            f"{plural(view.audit.seen['computations'], 'computation')} "
            f"({number(_not_lowered(view))} do not lower everywhere), "
            f"{plural(head.audit_failures, 'suite audit failure')}"
        )
    upgraded = f" (upgraded from version {_e(head.upgraded_from)})" if head.upgraded_from else ""
    body = "".join(
        [
            _header(view),
            _toc(view),
            "<main>",
            _problems(view),
            _numbers(view),
            _hotspots(view, options),
            _totals(view),
            _emulations(view),
            _layers(view),
            _tooling(view),
            _audit(view, options),
            _matrix(view),
            _test_details(view),
            "</main>",
            f"<footer>Generated by pytest-jaxport {_e(head.tool_version)} from a schema version "
            f"{_e(head.schema_version)} report{upgraded}. Self-contained: no scripts, no "
            "network.</footer>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">\n"
        '<meta name="generator" content="pytest-jaxport">\n'
        f"<title>{_e(title)}</title>\n<style>\n{stylesheet()}</style>\n</head>\n<body>\n{body}\n"
        "</body>\n</html>\n"
    )
