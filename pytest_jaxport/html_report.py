"""A self-contained HTML rendering of a report dict (pure: a report in, a string out).

:func:`html` returns one HTML document a person opens in a browser: no scripts, no network
(a ``Content-Security-Policy`` of ``default-src 'none'`` forbids every fetch), inline CSS and
inline SVG only. In order it shows:

1. the header: configuration, environment, suite totals and per-platform counts;
2. the layer table (``summary["layers"]`` when the report carries one, otherwise a minimal
   one derived from the counts);
3. the three numbers when present: runtime share per platform as stacked bars, each labelled
   *measured* or *estimated*; kernels to rewrite and engineering days per target, with the
   cost breakdown and the items behind it;
4. a platform × test matrix: lowers, vendor/custom counts (and the level they come from),
   numerics status, budget violations;
5. per test details: violations, lowering errors, kernels with source lines, runtime share.

Every optional key may be missing (reports written before the three numbers existed render
fine) and every string from the report is escaped.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from pytest_jaxport.audit_report import audit_html

__all__ = ["html", "numerics_status"]

SHARE_LAYERS: tuple[str, ...] = ("xla", "vendor", "custom")
LAYER_COLOURS: Mapping[str, str] = {"xla": "#0077bb", "vendor": "#ee7733", "custom": "#aa3377"}
LAYER_TEXT: Mapping[str, str] = {"xla": "#ffffff", "vendor": "#1f2328", "custom": "#ffffff"}
LAYER_NAMES: Mapping[str, str] = {
    "xla": "XLA-generated",
    "vendor": "vendor library",
    "custom": "hand-written",
}

COST_ITEMS: tuple[tuple[str, str, str], ...] = (
    # key, label, colour
    ("kernel_rewrite", "kernel rewrites", "#aa3377"),
    ("fallback_validation", "fallback validation", "#ccbb44"),
    ("vendor_gap", "vendor gaps", "#ee7733"),
    ("tooling_assumption", "tooling assumptions", "#66ccee"),
    ("fixed", "fixed per target", "#bbbbbb"),
)
STATUS_LABELS: Mapping[str, str] = {
    "rewrite": "rewrite: does not lower on the target",
    "fallback": "fallback — performance not guaranteed",
    "vendor-gap": "vendor gap: no counterpart on the target",
}
NUMERICS_CLASS: Mapping[str, str] = {
    "reference": "ref",
    "match": "good",
    "mismatch": "bad",
    "error": "bad",
    "not present": "muted",
    "not executed": "muted",
    "not compared": "muted",
}
OPEN_DETAILS_UP_TO = 40
"""Up to this many tests every test's details are open; beyond it, only tests with problems."""

BAR_WIDTH = 360
BAR_HEIGHT = 20

# -- small, forgiving accessors --------------------------------------------------------------


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int:
    number = _num(value)
    return int(number) if number is not None else 0


def _e(value: Any) -> str:
    """Escape anything for element content and quoted attribute values."""
    return escape("" if value is None else str(value), quote=True)


def _pct(fraction: float) -> str:
    value = fraction * 100
    if value == 0:
        return "0%"
    if value < 0.1:
        return "<0.1%"
    if value < 10:
        return f"{value:.1f}".removesuffix(".0") + "%"
    return f"{value:.0f}%"


def _days(days: float) -> str:
    return f"{days:.1f}".rstrip("0").rstrip(".")


def _seconds(seconds: float) -> str:
    if seconds <= 0:
        return "0 s"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _join(parts: Iterable[str], sep: str = " · ") -> str:
    return sep.join(p for p in parts if p)


# -- facts derived from a check's platform entry -----------------------------------------------


def counted_census(entry: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str]:
    """The census budgets apply to and its level: compiled where compiled, else lowered."""
    compiled = entry.get("compiled")
    if isinstance(compiled, Mapping):
        return compiled, "compiled"
    lowered = entry.get("lowered")
    if isinstance(lowered, Mapping):
        return lowered, "lowered"
    return None, "lowered"


def numerics_status(check: Mapping[str, Any], platform: str) -> str:
    """As :func:`pytest_jaxport.report.numerics_status`, from the dict, tolerating gaps."""
    entry = _map(_map(check.get("platforms")).get(platform))
    if entry.get("execution_error"):
        return "error"
    if not entry.get("executed"):
        return "not executed" if entry.get("present") else "not present"
    if platform == check.get("reference"):
        return "reference"
    numerics = entry.get("numerics")
    if not isinstance(numerics, Mapping):
        return "not compared"
    ok = numerics.get("ok")
    if not isinstance(ok, bool):
        ok = not _list(numerics.get("mismatches"))
    return "match" if ok else "mismatch"


def _platforms(report: Mapping[str, Any]) -> list[str]:
    """Configured platforms first, then any other platform the report mentions."""
    seen: dict[str, None] = {}
    for p in _list(_map(report.get("config")).get("platforms")):
        seen[str(p)] = None
    for p in _map(_map(report.get("summary")).get("platforms")):
        seen[str(p)] = None
    for test in _list(report.get("tests")):
        for check in _list(_map(test).get("checks")):
            for p in _map(_map(check).get("platforms")):
                seen[str(p)] = None
    return list(seen)


def _checks(report: Mapping[str, Any]) -> Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    for test in _list(report.get("tests")):
        for check in _list(_map(test).get("checks")):
            yield _map(test), _map(check)


# -- SVG ------------------------------------------------------------------------------------------


def share_bar(share: Mapping[str, Any], label: str) -> str:
    """A horizontal stacked bar of the ``xla``/``vendor``/``custom`` fractions, inline SVG."""
    fractions = {layer: max(0.0, _num(share.get(layer)) or 0.0) for layer in SHARE_LAYERS}
    total = sum(fractions.values())
    basis = "measured" if share.get("basis") == "measured" else "estimated"
    summary = ", ".join(f"{LAYER_NAMES[k]} {_pct(v)}" for k, v in fractions.items())
    aria = f"{label} runtime share ({basis}): {summary}" if total > 0 else f"{label}: no time"
    parts = [
        f'<svg class="bar {basis}" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" '
        f'viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT}" role="img" aria-label="{_e(aria)}">',
        f"<title>{_e(aria)}</title>",
        f'<rect class="track" x="0" y="0" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" rx="3"/>',
    ]
    x = 0.0
    if total > 0:
        for layer in SHARE_LAYERS:
            width = fractions[layer] / total * BAR_WIDTH
            if width <= 0:
                continue
            parts.append(
                f'<rect class="seg {layer}" x="{x:.2f}" y="0" width="{width:.2f}" '
                f'height="{BAR_HEIGHT}" fill="{LAYER_COLOURS[layer]}">'
                f"<title>{_e(LAYER_NAMES[layer])}: {_pct(fractions[layer])}</title></rect>"
            )
            if width >= 40:
                parts.append(
                    f'<text x="{x + width / 2:.2f}" y="{BAR_HEIGHT / 2 + 4:.1f}" '
                    f'text-anchor="middle" fill="{LAYER_TEXT[layer]}">'
                    f"{_e(_pct(fractions[layer]))}</text>"
                )
            x += width
    else:
        parts.append(
            f'<text x="8" y="{BAR_HEIGHT / 2 + 4:.1f}" fill="#57606a">no time recorded</text>'
        )
    if basis == "estimated":
        parts.append(
            f'<rect class="estimate-outline" x="0.5" y="0.5" width="{BAR_WIDTH - 1}" '
            f'height="{BAR_HEIGHT - 1}" rx="3" fill="none"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


def days_bar(breakdown: Mapping[str, Any], scale: float, label: str) -> str:
    """A horizontal stacked bar of one target's days by cost item, scaled to ``scale`` days."""
    values = [
        (key, name, colour, max(0.0, _num(breakdown.get(key)) or 0.0))
        for key, name, colour in COST_ITEMS
    ]
    total = sum(v for *_, v in values)
    summary = ", ".join(f"{name} {_days(v)} d" for _, name, _, v in values if v > 0)
    aria = f"{label}: {_days(total)} engineering days" + (f" ({summary})" if summary else "")
    parts = [
        f'<svg class="bar days" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" '
        f'viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT}" role="img" aria-label="{_e(aria)}">',
        f"<title>{_e(aria)}</title>",
        f'<rect class="track" x="0" y="0" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" rx="3"/>',
    ]
    x = 0.0
    for key, name, colour, value in values:
        if value <= 0 or scale <= 0:
            continue
        width = value / scale * BAR_WIDTH
        parts.append(
            f'<rect class="seg {key}" x="{x:.2f}" y="0" width="{width:.2f}" '
            f'height="{BAR_HEIGHT}" fill="{colour}"><title>{_e(name)}: {_days(value)} days'
            "</title></rect>"
        )
        if width >= 32:
            parts.append(
                f'<text x="{x + width / 2:.2f}" y="{BAR_HEIGHT / 2 + 4:.1f}" '
                f'text-anchor="middle" fill="#1f2328">{_days(value)}</text>'
            )
        x += width
    parts.append("</svg>")
    return "".join(parts)


def _swatch(colour: str, label: str, extra: str = "") -> str:
    return (
        f'<li><span class="swatch{extra}" style="background:{colour}" aria-hidden="true">'
        f"</span>{_e(label)}</li>"
    )


def _layer_legend() -> str:
    items = "".join(_swatch(LAYER_COLOURS[k], f"{k}: {LAYER_NAMES[k]}") for k in SHARE_LAYERS)
    return (
        f'<ul class="legend" aria-label="runtime share legend">{items}'
        '<li><span class="badge measured">measured</span> profiled on this machine</li>'
        '<li><span class="badge estimated">estimated</span> roofline model, dashed outline</li>'
        "</ul>"
    )


def _basis_badge(share: Mapping[str, Any]) -> str:
    basis = "measured" if share.get("basis") == "measured" else "estimated"
    return f'<span class="badge {basis}">{basis}</span>'


def _libraries_text(libraries: Any, fmt: str = "share") -> str:
    items = []
    for name, value in _map(libraries).items():
        number = _num(value)
        if number is None:
            continue
        items.append(f"{_e(name)} {_pct(number) if fmt == 'share' else _int(value)}")
    return ", ".join(items)


def share_table(shares: Mapping[str, Any], caption: str, first: str = "platform") -> str:
    """One row per platform: label, basis badge, the bar, the fractions, libraries, time."""
    rows = []
    for platform, share in shares.items():
        if not isinstance(share, Mapping):
            continue
        seconds = _num(share.get("seconds"))
        cells = "".join(
            f'<td class="num">{_pct(max(0.0, _num(share.get(k)) or 0.0))}</td>'
            for k in SHARE_LAYERS
        )
        rows.append(
            f'<tr><th scope="row">{_e(platform)}</th><td>{_basis_badge(share)}</td>'
            f'<td class="barcell">{share_bar(share, str(platform))}</td>{cells}'
            f'<td class="libs">{_libraries_text(share.get("libraries")) or "—"}</td>'
            f'<td class="num">{_seconds(seconds) if seconds is not None else "—"}</td></tr>'
        )
    if not rows:
        return ""
    head = "".join(f'<th scope="col" class="num">{k}</th>' for k in SHARE_LAYERS)
    return (
        f'<table class="shares"><caption>{_e(caption)}</caption><thead><tr>'
        f'<th scope="col">{_e(first)}</th><th scope="col">basis</th>'
        f'<th scope="col">where the time goes</th>{head}<th scope="col">libraries</th>'
        f'<th scope="col" class="num">time</th></tr></thead><tbody>{"".join(rows)}'
        "</tbody></table>"
    )


# -- sections -------------------------------------------------------------------------------------


def _header(report: Mapping[str, Any]) -> str:
    config = _map(report.get("config"))
    env = _map(report.get("environment"))
    summary = _map(report.get("summary"))
    tool = _map(report.get("tool"))
    platforms = [str(p) for p in _list(config.get("platforms"))]
    reference = config.get("reference")
    compile_list = [str(p) for p in _list(config.get("compile"))]
    present = [str(p) for p in _list(env.get("present_platforms"))]

    facts = [
        ("platforms", _e(", ".join(platforms)) or "—"),
        ("reference", _e(reference) if reference else "—"),
    ]
    if compile_list:
        target = f" (target {_e(config['target'])})" if config.get("target") else ""
        facts.append(("compiled for", _e(", ".join(compile_list)) + target))
    if config.get("source"):
        facts.append(("configuration", f"<code>{_e(config['source'])}</code>"))
    versions = _join(
        f"{name} {_e(env[name])}" for name in ("jax", "jaxlib", "python") if env.get(name)
    )
    facts.append(("environment", _join([versions, _e(env.get("machine") or "")]) or "—"))
    facts.append(("present here", _e(", ".join(present)) or "none"))
    dl = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts)

    failed = _int(summary.get("failed_tests"))
    violations = _int(summary.get("violations"))
    tiles = [
        ("tests", _int(summary.get("tests")), ""),
        ("checks", _int(summary.get("checks")), ""),
        ("failed tests", failed, " bad" if failed else " good"),
        ("budget violations", violations, " bad" if violations else " good"),
    ]
    tile_html = "".join(
        f'<div class="tile{cls}"><span class="value">{value}</span>'
        f'<span class="label">{label}</span></div>'
        for label, value, cls in tiles
    )
    version = f" {_e(tool['version'])}" if tool.get("version") else ""
    status = "bad" if failed or violations else "good"
    verdict = (
        f"{failed} failed test{'s' if failed != 1 else ''}, "
        f"{violations} budget violation{'s' if violations != 1 else ''}"
        if failed or violations
        else "every portable test within budget"
    )
    return (
        '<header class="top"><div class="titles"><h1>Portability report</h1>'
        f'<p class="sub">pytest-jaxport{version} · <span class="verdict {status}">'
        f"{verdict}</span></p></div>"
        f'<div class="tiles" role="group" aria-label="suite totals">{tile_html}</div>'
        f'<dl class="facts">{dl}</dl></header>'
    )


def _totals(report: Mapping[str, Any]) -> str:
    platforms = _map(_map(report.get("summary")).get("platforms"))
    if not platforms:
        return ""
    compiled_any = any("compiled" in _map(t) for t in platforms.values())
    rows = []
    for name, totals in platforms.items():
        t = _map(totals)
        failed = _int(t.get("failed_to_lower"))
        compiled = ""
        if compiled_any:
            compiled = (
                f'<td class="num">{_int(t.get("compiled"))}</td>'
                f'<td class="num{" badtext" if _int(t.get("failed_to_compile")) else ""}">'
                f"{_int(t.get('failed_to_compile'))}</td>"
            )
        rows.append(
            f'<tr><th scope="row">{_e(name)}</th><td class="num">{_int(t.get("lowered"))}</td>'
            f'<td class="num{" badtext" if failed else ""}">{failed}</td>{compiled}'
            f'<td class="num">{_int(t.get("vendor"))}</td>'
            f'<td class="num{" warntext" if _int(t.get("custom")) else ""}">'
            f'{_int(t.get("custom"))}</td><td class="num">{_int(t.get("meta"))}</td>'
            f'<td class="libs">{_libraries_text(t.get("libraries"), "count") or "—"}</td></tr>'
        )
    compiled_head = (
        '<th scope="col" class="num">compiled</th>'
        '<th scope="col" class="num">failed to compile</th>'
        if compiled_any
        else ""
    )
    return (
        '<section id="totals" aria-labelledby="totals-h"><h2 id="totals-h">Suite totals by '
        "platform</h2>"
        '<p class="note">Call-weighted dispatch counts over every check, at the level budgets '
        "apply: compiled where a check was compiled, lowered (StableHLO) elsewhere.</p>"
        '<table class="totals"><thead><tr><th scope="col">platform</th>'
        '<th scope="col" class="num">checks lowered</th>'
        f'<th scope="col" class="num">failed to lower</th>{compiled_head}'
        '<th scope="col" class="num">vendor</th><th scope="col" class="num">custom</th>'
        '<th scope="col" class="num">meta</th><th scope="col">libraries</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _value_html(value: Any) -> str:
    if isinstance(value, Mapping):
        return _e(", ".join(f"{k} {v}" for k, v in value.items())) or "—"
    if isinstance(value, list | tuple):
        return _e(", ".join(str(v) for v in value)) or "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return _e(f"{value:g}")
    return _e(value) if value is not None and value != "" else "—"


def _portable_html(value: Any) -> str:
    if isinstance(value, bool):
        return '<span class="pill good">yes</span>' if value else '<span class="pill bad">no</span>'
    return _e(value) if value is not None else "—"


def derived_layers(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A minimal layer table from the counts, for reports that do not carry one."""
    summary = _map(report.get("summary"))
    totals = _map(summary.get("platforms"))
    platforms = _platforms(report)
    n_checks = 0
    everywhere = 0
    xla: dict[str, int] = dict.fromkeys(platforms, 0)
    for _, check in _checks(report):
        n_checks += 1
        entries = _map(check.get("platforms"))
        if entries and all(isinstance(_map(e).get("lowered"), Mapping) for e in entries.values()):
            everywhere += 1
        for p, entry in entries.items():
            census, _ = counted_census(_map(entry))
            if census is not None:
                xla[str(p)] = xla.get(str(p), 0) + _int(census.get("xla"))

    def per_platform(key: str) -> str:
        return _join(f"{p} {_int(_map(totals.get(p)).get(key))}" for p in totals) or "—"

    custom = per_platform("custom")
    to_rewrite = _map(summary.get("kernels_to_rewrite"))
    if to_rewrite:
        custom += "; to rewrite: " + _join(f"{t} {_int(n)}" for t, n in to_rewrite.items())
    tooling = summary.get("tooling")
    tooling_value: Any = "not scanned in this report"
    if isinstance(tooling, Mapping):
        tooling_value = tooling.get("count", len(_list(tooling.get("assumptions"))))
    elif isinstance(tooling, list):
        tooling_value = len(tooling)
    return [
        {
            "layer": "JAX Python code (jit, grad, vmap)",
            "portable": "in principle",
            "counted": "checks that lower on every target",
            "value": f"{everywhere} of {n_checks} checks lower on every platform",
        },
        {
            "layer": "XLA-generated kernels",
            "portable": "regenerated per backend, performance not guaranteed",
            "counted": "xla ops",
            "value": _join(f"{p} {n}" for p, n in xla.items()) or "—",
        },
        {
            "layer": "vendor-library calls",
            "portable": "NVIDIA-bound, counterpart usually exists",
            "counted": "vendor dispatches",
            "value": per_platform("vendor"),
        },
        {
            "layer": "hand-written kernels and custom calls",
            "portable": "NVIDIA-bound, each a rewrite",
            "counted": "custom calls",
            "value": custom,
        },
        {
            "layer": "profiling, tooling and CI assumptions",
            "portable": "often NVIDIA-bound",
            "counted": "NVIDIA-bound assumptions in the project",
            "value": tooling_value,
        },
    ]


def _layers(report: Mapping[str, Any]) -> str:
    given = _list(_map(report.get("summary")).get("layers"))
    rows: Sequence[Mapping[str, Any]] = [_map(r) for r in given if isinstance(r, Mapping)]
    caption = "How locked in the suite is, layer by layer."
    if not rows:
        rows = derived_layers(report)
        caption += " Derived from the counts in this report."
    body = "".join(
        f'<tr><th scope="row">{_e(r.get("layer"))}</th>'
        f"<td>{_portable_html(r.get('portable'))}</td><td>{_e(r.get('counted') or '—')}</td>"
        f"<td>{_value_html(r.get('value'))}</td></tr>"
        for r in rows
    )
    return (
        '<section id="layers" aria-labelledby="layers-h"><h2 id="layers-h">Layers</h2>'
        f'<table class="layers"><caption>{_e(caption)}</caption><thead><tr>'
        '<th scope="col">layer</th><th scope="col">portable?</th>'
        '<th scope="col">what we count</th><th scope="col">value</th></tr></thead>'
        f"<tbody>{body}</tbody></table></section>"
    )


def _rewrite(summary: Mapping[str, Any]) -> str:
    rewrite = {str(t): _map(v) for t, v in _map(summary.get("rewrite")).items()}
    to_rewrite = _map(summary.get("kernels_to_rewrite"))
    days = _map(summary.get("rewrite_days"))
    targets = list(dict.fromkeys([*to_rewrite, *days, *rewrite]))
    if not targets:
        return ""

    def kernels(t: str) -> int | None:
        if t in to_rewrite:
            return _int(to_rewrite[t])
        return (
            _int(rewrite[t]["kernels_to_rewrite"])
            if "kernels_to_rewrite" in rewrite.get(t, {})
            else None
        )

    def total_days(t: str) -> float | None:
        if _num(days.get(t)) is not None:
            return _num(days.get(t))
        return _num(rewrite.get(t, {}).get("days"))

    tiles = []
    for t in targets:
        k = kernels(t)
        d = total_days(t)
        tiles.append(
            f'<div class="target"><h4>to {_e(t)}</h4><div class="pair">'
            f'<div class="tile{" warn" if k else ""}"><span class="value">'
            f'{k if k is not None else "—"}</span><span class="label">kernels to rewrite'
            "</span></div>"
            f'<div class="tile"><span class="value">{_days(d) if d is not None else "—"}</span>'
            '<span class="label">engineering days</span></div></div></div>'
        )
    out = [
        "<h3>Kernels to rewrite and engineering days</h3>",
        f'<div class="targets">{"".join(tiles)}</div>',
    ]

    with_breakdown = [t for t in targets if _map(rewrite.get(t, {}).get("breakdown"))]
    if with_breakdown:
        scale = max(
            (
                sum(max(0.0, _num(v) or 0.0) for v in _map(rewrite[t]["breakdown"]).values())
                for t in with_breakdown
            ),
            default=0.0,
        )
        head = "".join(f'<th scope="col" class="num">{_e(t)}</th>' for t in with_breakdown)
        rows = []
        for key, label, colour in COST_ITEMS:
            cells = "".join(
                f'<td class="num">{_days(_num(_map(rewrite[t]["breakdown"]).get(key)) or 0.0)}</td>'
                for t in with_breakdown
            )
            rows.append(
                f'<tr><th scope="row"><span class="swatch" style="background:{colour}" '
                f'aria-hidden="true"></span>{_e(label)}</th>{cells}</tr>'
            )
        total_cells = "".join(
            f'<td class="num"><strong>{_days(total_days(t) or 0.0)}</strong></td>'
            for t in with_breakdown
        )
        rows.append(f'<tr class="total"><th scope="row">total days</th>{total_cells}</tr>')
        bars = "".join(
            f'<tr><th scope="row">{_e(t)}</th><td class="barcell">'
            f"{days_bar(_map(rewrite[t]['breakdown']), scale, f'to {t}')}</td>"
            f'<td class="num">{_days(total_days(t) or 0.0)} d</td></tr>'
            for t in with_breakdown
        )
        out.append(
            '<div class="split"><table class="breakdown"><caption>Cost breakdown, days '
            "(configurable in <code>[tool.jaxport.cost]</code>)</caption><thead><tr>"
            f'<th scope="col">item</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            '</table><table class="daybars"><caption>Days per target</caption><thead><tr>'
            '<th scope="col">target</th><th scope="col">breakdown</th>'
            f'<th scope="col" class="num">total</th></tr></thead><tbody>{bars}</tbody></table>'
            "</div>"
        )

    items = [(t, _map(i)) for t in targets for i in _list(rewrite.get(t, {}).get("items"))]
    if items:
        rows = []
        for t, item in items:
            status = str(item.get("status") or "")
            cls = {"rewrite": "bad", "fallback": "warn", "vendor-gap": "warn"}.get(status, "")
            where = f"<code>{_e(item['location'])}</code>" if item.get("location") else "—"
            rows.append(
                f'<tr><td>{_e(t)}</td><td><span class="pill {cls}">{_e(status or "?")}</span>'
                f'<span class="statusnote">{_e(_status_note(status))}</span></td>'
                f"<td><code>{_e(item.get('name'))}</code></td>"
                f'<td class="nowrap">{_e(item.get("kind"))}</td>'
                f"<td>{where}</td><td>{_e(item.get('check'))}</td>"
                f'<td class="reason">{_e(item.get("reason"))}</td></tr>'
            )
        out.append(
            '<table class="items"><caption>What the estimate counts: each NVIDIA-bound kernel '
            'or dispatch, per target</caption><thead><tr><th scope="col">target</th>'
            '<th scope="col">status</th><th scope="col">kernel</th><th scope="col">kind</th>'
            '<th scope="col">source</th><th scope="col">check</th><th scope="col">why</th>'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
    return "".join(out)


def _status_note(status: str) -> str:
    """``performance not guaranteed`` for ``fallback``: the label after its dash or colon."""
    label = STATUS_LABELS.get(status, "")
    for sep in (" — ", ": "):
        if sep in label:
            return label.split(sep, 1)[1]
    return label


def _numbers(report: Mapping[str, Any]) -> str:
    summary = _map(report.get("summary"))
    shares = {
        str(p): _map(s)
        for p, s in _map(summary.get("runtime_share")).items()
        if isinstance(s, Mapping)
    }
    parts = []
    if shares:
        parts.append(
            "<h3>Runtime share</h3>"
            '<p class="note">Fraction of kernel time by layer. <em>Measured</em>: profiled '
            "where the platform ran. <em>Estimated</em>: a roofline model from op shapes "
            "against the platform's peak numbers, not a measurement.</p>"
            + _layer_legend()
            + share_table(shares, "Runtime share per platform, suite total (time-weighted)")
        )
    rewrite = _rewrite(summary)
    if rewrite:
        parts.append(rewrite)
    if not parts:
        return ""
    return (
        '<section id="numbers" aria-labelledby="numbers-h"><h2 id="numbers-h">The three '
        f"numbers</h2>{''.join(parts)}</section>"
    )


def _violations_by_cell(test: Mapping[str, Any]) -> dict[tuple[str, str], list[str]]:
    cells: dict[tuple[str, str], list[str]] = {}
    for v in _list(test.get("violations")):
        v = _map(v)
        key = (str(v.get("check") or ""), str(v.get("platform") or ""))
        cells.setdefault(key, []).append(str(v.get("key") or "budget"))
    return cells


def _matrix_cell(
    check: Mapping[str, Any], platform: str, violations: Sequence[str], reference: bool
) -> str:
    entry = (
        check.get("platforms", {}).get(platform)
        if isinstance(check.get("platforms"), Mapping)
        else None
    )
    if not isinstance(entry, Mapping):
        return '<td class="cell na"><span class="muted">not checked</span></td>'
    census, level = counted_census(entry)
    status = numerics_status(check, platform)
    lowered = isinstance(entry.get("lowered"), Mapping)
    lines = []
    tag = f' <span class="level {level}">{level}</span>' if census is not None else ""
    if lowered:
        lines.append(f'<div><span class="mark good" aria-hidden="true">✓</span> lowers{tag}</div>')
    else:
        lines.append('<div><span class="mark bad" aria-hidden="true">✗</span> does not lower</div>')
    title = ""
    if not lowered:
        title = str(entry.get("error") or "lowering failed")
    if census is not None:
        custom = _int(census.get("custom"))
        lines.append(
            f'<div class="counts">vendor <b>{_int(census.get("vendor"))}</b> · custom '
            f'<b class="{"warntext" if custom else ""}">{custom}</b></div>'
        )
    if entry.get("compile_error"):
        lines.append('<div class="badtext">compile failed</div>')
        title = _join([title, f"compile: {entry['compile_error']}"], "\n")
    if entry.get("execution_error"):
        title = _join([title, f"run: {entry['execution_error']}"], "\n")
    numerics = _map(entry.get("numerics"))
    if status == "mismatch" and numerics:
        title = _join(
            [title]
            + [str(_map(m).get("message") or "") for m in _list(numerics.get("mismatches"))],
            "\n",
        )
    lines.append(
        f'<div class="numerics {NUMERICS_CLASS.get(status, "muted")}">'
        f'<span class="muted">numerics</span> {status}</div>'
    )
    if violations:
        lines.append(f'<div class="viol">over budget: {_e(", ".join(violations))}</div>')
    if not lowered or status in ("mismatch", "error") or entry.get("compile_error") or violations:
        cls = "bad"
    elif census is not None and _int(census.get("custom")):
        cls = "warn"
    else:
        cls = "good"
    attr = f' title="{_e(title)}"' if title else ""
    label = (
        f"{platform}: {'lowers' if lowered else 'does not lower'}"
        + (
            f", vendor {_int(census.get('vendor'))}, custom {_int(census.get('custom'))} ({level})"
            if census is not None
            else ""
        )
        + f", numerics {status}"
        + (", over budget" if violations else "")
    )
    ref = " refcol" if reference else ""
    return f'<td class="cell {cls}{ref}"{attr} aria-label="{_e(label)}">{"".join(lines)}</td>'


def grouped_checks(checks: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each function's check followed by its transformations' (``conv``, ``conv[grad]``)."""
    names = {c.get("name") for c in checks}
    ordered: list[Mapping[str, Any]] = []
    for check in checks:
        if check.get("variant_of") in names:
            continue
        ordered.append(check)
        ordered += [c for c in checks if c.get("variant_of") == check.get("name")]
    return ordered


def _matrix(report: Mapping[str, Any]) -> str:
    platforms = _platforms(report)
    reference = _map(report.get("config")).get("reference")
    present = {str(p) for p in _list(_map(report.get("environment")).get("present_platforms"))}
    head = "".join(
        f'<th scope="col">{_e(p)}'
        + ('<span class="tag">reference</span>' if p == reference else "")
        + ('<span class="tag">present</span>' if p in present else "")
        + "</th>"
        for p in platforms
    )
    rows = []
    for test in _list(report.get("tests")):
        test = _map(test)
        outcome = str(test.get("outcome") or "?")
        ocls = {"passed": "good", "failed": "bad", "error": "bad"}.get(outcome, "muted")
        checks = grouped_checks([_map(c) for c in _list(test.get("checks"))])
        violations = _violations_by_cell(test)
        span = f' rowspan="{len(checks)}"' if len(checks) > 1 else ""
        first = (
            f'<th scope="rowgroup" class="testname"{span}>'
            f'<a href="#{_anchor(test)}">{_nodeid_html(test.get("nodeid"))}</a></th>'
        )
        pill = f'<td{span}><span class="pill {ocls}">{_e(outcome)}</span></td>'
        if not checks:
            rows.append(
                f'<tr>{first}<td class="muted">—</td>{pill}'
                f'<td class="cell na" colspan="{max(1, len(platforms))}">'
                f"{_e(test.get('message') or 'no checks recorded')}</td></tr>"
            )
            continue
        for i, check in enumerate(checks):
            name = str(check.get("name") or "?")
            cells = "".join(
                _matrix_cell(check, p, violations.get((name, p), []), p == reference)
                for p in platforms
            )
            lead = first if i == 0 else ""
            of = check.get("variant_of")
            label = (
                f'<th scope="row" class="checkname variant" title="a transformation of '
                f'{_e(of)}">↳ '
                if of
                else '<th scope="row" class="checkname">'
            )
            rows.append(
                f"<tr>{lead}{label}<code>{_e(name)}</code></th>"
                f"{pill if i == 0 else ''}{cells}</tr>"
            )
    if not rows:
        return (
            '<section id="matrix" aria-labelledby="matrix-h"><h2 id="matrix-h">Platform × test '
            'matrix</h2><p class="note">No portable tests ran.</p></section>'
        )
    legend = (
        '<ul class="legend" aria-label="matrix legend">'
        '<li><span class="swatch cellgood" aria-hidden="true"></span><span>lowers, within '
        "budget, numerics fine</span></li>"
        '<li><span class="swatch cellwarn" aria-hidden="true"></span><span>hand-written '
        "kernels present</span></li>"
        '<li><span class="swatch cellbad" aria-hidden="true"></span><span>does not lower, '
        "over budget, or numerics differ</span></li>"
        '<li><span><span class="level lowered">lowered</span> / '
        '<span class="level compiled">compiled</span> the level the counts come from</span>'
        "</li><li><span>hover a red cell for the error</span></li></ul>"
    )
    return (
        '<section id="matrix" aria-labelledby="matrix-h"><h2 id="matrix-h">Platform × test '
        f"matrix</h2>{legend}"
        '<div class="scroll"><table class="matrix"><thead><tr><th scope="col">test</th>'
        '<th scope="col">check</th><th scope="col">outcome</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody>"
        "</table></div></section>"
    )


def _nodeid_html(nodeid: Any) -> str:
    """``tests/test_x.py::test_y[id]`` as the test's name, then its file in small print."""
    text = str(nodeid or "?")
    path, sep, name = text.rpartition("::")
    if not sep:
        return f'<code class="tname">{_e(text)}</code>'
    return f'<code class="tname">{_e(name)}</code><span class="tpath">{_e(path)}</span>'


def _anchor(test: Mapping[str, Any]) -> str:
    nodeid = str(test.get("nodeid") or "")
    safe = "".join(c if c.isalnum() else "-" for c in nodeid)
    digest = zlib.crc32(nodeid.encode("utf-8"))
    return f"t-{safe[:60]}-{digest:08x}" if nodeid else "t-unnamed"


def _kernels_table(check: Mapping[str, Any]) -> str:
    rows = []
    for platform, entry in _map(check.get("platforms")).items():
        census, level = counted_census(_map(entry))
        if census is None:
            continue
        for k in _list(census.get("kernels")):
            k = _map(k)
            layer = str(k.get("layer") or "")
            if layer not in ("vendor", "custom"):
                continue
            where = f"<code>{_e(k['location'])}</code>" if k.get("location") else "—"
            rows.append(
                f'<tr class="{layer}"><td>{_e(platform)}</td>'
                f'<td><span class="pill {layer}">{_e(layer)}</span></td>'
                f"<td><code>{_e(k.get('name'))}</code></td><td>{_e(k.get('library') or '—')}</td>"
                f'<td>{_e(k.get("kind"))}</td><td class="num">{_int(k.get("count")) or 1}</td>'
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


def _check_details(check: Mapping[str, Any]) -> str:
    out = [f"<h4>check <code>{_e(check.get('name'))}</code></h4>"]
    if check.get("note"):
        out.append(f'<p class="note">{_e(check["note"])}</p>')
    problems = []
    for platform, entry in _map(check.get("platforms")).items():
        entry = _map(entry)
        for key, what in (
            ("error", "does not lower"),
            ("compile_error", "does not compile"),
            ("execution_error", "failed to run"),
        ):
            if entry.get(key) and (key != "error" or entry.get("lowered") is None):
                problems.append(f"<li>{_e(platform)}: {what}<pre>{_e(entry[key])}</pre></li>")
        numerics = _map(entry.get("numerics"))
        if numerics_status(check, str(platform)) == "mismatch":
            msgs = [str(_map(m).get("message") or "") for m in _list(numerics.get("mismatches"))]
            problems.append(
                f"<li>{_e(platform)}: numerics differ from {_e(check.get('reference'))}"
                f"<pre>{_e(chr(10).join(msgs))}</pre></li>"
            )
    if problems:
        out.append(f'<ul class="problems">{"".join(problems)}</ul>')
    out.append(_kernels_table(check))
    shares = {
        str(p): _map(_map(e).get("runtime_share"))
        for p, e in _map(check.get("platforms")).items()
        if isinstance(_map(e).get("runtime_share"), Mapping)
    }
    if shares:
        out.append(share_table(shares, f"Runtime share of {check.get('name')}"))
    return "".join(out)


def _test_details(report: Mapping[str, Any]) -> str:
    tests = [_map(t) for t in _list(report.get("tests"))]
    if not tests:
        return ""
    out = []
    many = len(tests) > OPEN_DETAILS_UP_TO
    for test in tests:
        outcome = str(test.get("outcome") or "?")
        ocls = {"passed": "good", "failed": "bad", "error": "bad"}.get(outcome, "muted")
        violations = [_map(v) for v in _list(test.get("violations"))]
        checks = [_map(c) for c in _list(test.get("checks"))]
        interesting = (
            outcome != "passed"
            or violations
            or any(
                _int(_map(counted_census(_map(e))[0]).get("custom"))
                for c in checks
                for e in _map(c.get("platforms")).values()
            )
        )
        body = []
        if violations:
            body.append(
                '<div class="violations"><h4>Budget violations</h4>'
                + "".join(
                    f'<pre class="violation">{_e(v.get("message"))}</pre>' for v in violations
                )
                + "</div>"
            )
        elif test.get("message"):
            body.append(f'<pre class="violation">{_e(test["message"])}</pre>')
        body += [_check_details(c) for c in checks]
        if not checks and not test.get("message"):
            body.append('<p class="note">No checks recorded.</p>')
        is_open = " open" if (not many or interesting) else ""
        summary_bits = f"{len(checks)} check{'s' if len(checks) != 1 else ''}"
        if violations:
            summary_bits += f", {len(violations)} violation{'s' if len(violations) != 1 else ''}"
        out.append(
            f'<details class="test" id="{_anchor(test)}"{is_open}><summary>'
            f'<span class="pill {ocls}">{_e(outcome)}</span> <code>{_e(test.get("nodeid"))}'
            f'</code> <span class="muted">{summary_bits}</span></summary>'
            f'<div class="testbody">{"".join(body)}</div></details>'
        )
    return (
        '<section id="tests" aria-labelledby="tests-h"><h2 id="tests-h">Tests</h2>'
        + "".join(out)
        + "</section>"
    )


def _tooling(report: Mapping[str, Any]) -> str:
    tooling = _map(report.get("summary")).get("tooling")
    items = _list(tooling) if isinstance(tooling, list) else _list(_map(tooling).get("assumptions"))
    rows = [
        f'<tr><td class="nowrap"><code>{_e(a.get("file"))}:{_e(a.get("line"))}</code></td>'
        f'<td class="nowrap">{_e(a.get("rule"))}</td><td>{_e(a.get("reason"))}</td>'
        f"<td><code>{_e(a.get('text'))}</code></td></tr>"
        for a in (_map(i) for i in items)
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


CSS = """
:root { color-scheme: light; --fg:#1f2328; --muted:#57606a; --line:#d0d7de; --soft:#f6f8fa;
  --good:#116329; --goodbg:#dafbe1; --bad:#a40e26; --badbg:#ffebe9; --warn:#7d4e00;
  --warnbg:#fff8c5; --ref:#0a3069; --refbg:#ddf4ff; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff; line-height: 1.45;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans",
  "DejaVu Sans", sans-serif; -webkit-print-color-adjust: exact; print-color-adjust: exact; }
main, header.top { max-width: 1240px; margin: 0 auto; padding: 0 24px; }
header.top { display: grid; grid-template-columns: 1fr auto; gap: 8px 24px; align-items: end;
  padding-top: 24px; padding-bottom: 16px; border-bottom: 1px solid var(--line); }
h1 { font-size: 26px; margin: 0; letter-spacing: -0.01em; }
h2 { font-size: 19px; margin: 32px 0 8px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 20px 0 8px; }
h4 { font-size: 14px; margin: 16px 0 6px; }
.sub { margin: 4px 0 0; color: var(--muted); }
.verdict { font-weight: 600; }
.verdict.good { color: var(--good); } .verdict.bad { color: var(--bad); }
.facts { grid-column: 1 / -1; display: flex; flex-wrap: wrap; gap: 4px 28px; margin: 8px 0 0; }
.facts div { display: flex; gap: 6px; } .facts dt { color: var(--muted); }
.facts dd { margin: 0; font-weight: 500; }
.tiles, .pair { display: flex; gap: 10px; }
.tile { min-width: 96px; padding: 8px 12px; border: 1px solid var(--line); border-radius: 8px;
  background: var(--soft); display: flex; flex-direction: column; }
.tile .value { font-size: 24px; font-weight: 650; line-height: 1.1;
  font-variant-numeric: tabular-nums; }
.tile .label { color: var(--muted); font-size: 12px; }
.tile.good .value { color: var(--good); } .tile.bad { background: var(--badbg);
  border-color: #ffcecb; } .tile.bad .value { color: var(--bad); }
.tile.warn { background: var(--warnbg); border-color: #eed888; }
.tile.warn .value { color: var(--warn); }
.targets { display: flex; flex-wrap: wrap; gap: 12px 28px; }
.targets h4 { margin: 0 0 4px; color: var(--muted); font-weight: 600; }
table { border-collapse: collapse; margin: 8px 0 12px; font-variant-numeric: tabular-nums; }
caption { text-align: left; color: var(--muted); padding: 0 0 6px; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 10px; text-align: left;
  vertical-align: top; }
thead th { background: var(--soft); font-size: 12px; text-transform: uppercase;
  letter-spacing: 0.03em; color: var(--muted); border-bottom: 2px solid var(--line); }
tbody th { font-weight: 600; }
.num { text-align: right; white-space: nowrap; }
td.barcell { vertical-align: middle; padding: 4px 10px; }
.libs, .reason { color: var(--muted); max-width: 340px; }
tr.total th, tr.total td { border-top: 2px solid var(--line); }
code { font: 12.5px/1.4 ui-monospace, "SFMono-Regular", "DejaVu Sans Mono",
  "Liberation Mono", monospace; overflow-wrap: break-word; }
pre { font: 12.5px/1.45 ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace;
  background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px;
  white-space: pre-wrap; overflow-wrap: anywhere; margin: 6px 0; }
pre.violation { background: var(--badbg); border-color: #ffcecb; color: #5d0011; }
.note { color: var(--muted); margin: 4px 0 8px; max-width: 900px; }
.muted { color: var(--muted); } .nowrap { white-space: nowrap; }
.statusnote { display: block; color: var(--muted); font-size: 12px; margin-top: 2px; }
.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 18px; padding: 0;
  margin: 6px 0; font-size: 13px; color: var(--muted); }
.legend li { display: flex; align-items: center; gap: 6px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 3px;
  vertical-align: -1px; margin-right: 6px; border: 1px solid rgba(0,0,0,.15); }
.swatch.cellgood { background: #f3fcf5; border: 1px solid #4ac26b; border-left-width: 4px; }
.swatch.cellwarn { background: #fffbe6; border: 1px solid #d4a72c; border-left-width: 4px; }
.swatch.cellbad { background: var(--badbg); border: 1px solid #cf222e; border-left-width: 4px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; white-space: nowrap; }
.badge.measured { background: var(--goodbg); color: var(--good); border: 1px solid #aceebb; }
.badge.estimated { background: #fff; color: var(--warn); border: 1px dashed #bf8700; }
.pill { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px;
  font-weight: 600; background: var(--soft); color: var(--muted); border: 1px solid var(--line);
  white-space: nowrap; }
.pill.good { background: var(--goodbg); color: var(--good); border-color: #aceebb; }
.pill.bad { background: var(--badbg); color: var(--bad); border-color: #ffcecb; }
.pill.warn, .pill.vendor { background: var(--warnbg); color: var(--warn); border-color: #eed888; }
.pill.custom { background: #f8e6f0; color: #7a1f55; border-color: #e8bcd6; }
svg.bar { display: block; font: 600 11px system-ui, "Liberation Sans", "DejaVu Sans",
  sans-serif; }
svg.bar .track { fill: #eaeef2; }
svg.bar .estimate-outline { stroke: #1f2328; stroke-width: 1; stroke-dasharray: 4 3; }
svg.bar.estimated .seg { fill-opacity: 0.8; }
.split { display: flex; flex-wrap: wrap; gap: 8px 40px; align-items: flex-start; }
.scroll { overflow-x: auto; }
table.matrix { width: 100%; }
table.matrix th.testname { max-width: 300px; }
.tname { display: block; font-weight: 600; font-size: 13px; }
.tpath { display: block; font-weight: 400; color: var(--muted); font-size: 11.5px;
  overflow-wrap: break-word; }
table.matrix th.checkname code { font-weight: 400; }
table.matrix th.checkname.variant { padding-left: 1.2em; font-weight: 400; }
table.matrix tbody th, table.matrix tbody td { border-bottom-color: #e4e8ec; }
.tag { display: inline-block; margin-left: 6px; padding: 0 5px; border-radius: 4px;
  font-size: 10px; text-transform: none; letter-spacing: 0; background: var(--refbg);
  color: var(--ref); }
td.cell { font-size: 12.5px; min-width: 150px; border-left: 3px solid transparent; }
td.cell > div { white-space: nowrap; }
td.cell > div.viol { white-space: normal; }
td.cell.good { background: #f3fcf5; border-left-color: #4ac26b; }
td.cell.warn { background: #fffbe6; border-left-color: #d4a72c; }
td.cell.bad { background: var(--badbg); border-left-color: #cf222e; }
td.cell.na { background: var(--soft); color: var(--muted); }
td.cell[title] { cursor: help; }
.mark { font-weight: 700; } .mark.good { color: var(--good); } .mark.bad { color: var(--bad); }
.level { display: inline-block; margin-left: 4px; padding: 0 4px; border-radius: 3px;
  font-size: 10.5px; background: #eaeef2; color: var(--muted); }
.level.compiled { background: var(--refbg); color: var(--ref); }
.numerics { font-weight: 600; } .numerics .muted { font-weight: 400; }
.numerics.good { color: var(--good); } .numerics.bad { color: var(--bad); }
.numerics.ref { color: var(--ref); } .numerics.muted { color: var(--muted); font-weight: 400; }
.viol, .badtext { color: var(--bad); font-weight: 600; } .warntext { color: #9a6700; }
a { color: #0550ae; text-decoration: none; } a:hover { text-decoration: underline; }
details.test { border: 1px solid var(--line); border-radius: 8px; margin: 10px 0;
  background: #fff; }
details.test > summary { padding: 8px 12px; cursor: pointer; background: var(--soft);
  border-radius: 8px; }
details.test[open] > summary { border-bottom: 1px solid var(--line);
  border-radius: 8px 8px 0 0; }
.testbody { padding: 4px 14px 10px; }
ul.problems { padding-left: 18px; }
footer { max-width: 1240px; margin: 32px auto 24px; padding: 8px 24px 0; color: var(--muted);
  font-size: 12px; border-top: 1px solid var(--line); }
@media print {
  body { font-size: 11px; }
  main, header.top { max-width: none; padding: 0; }
  h2 { break-after: avoid; } tr, .tile, pre, svg { break-inside: avoid; }
  details.test { break-inside: auto; border: none; }
  details.test > summary { list-style: none; }
  details::details-content { content-visibility: visible; display: block; }
  .scroll { overflow: visible; } a { color: inherit; }
  table { width: 100%; } th, td { padding: 3px 5px; }
  td.cell { min-width: 0; font-size: 10.5px; } td.cell > div, .nowrap, .num { white-space: normal; }
  code, pre, .tpath { overflow-wrap: anywhere; font-size: 10.5px; }
  thead th { font-size: 10px; } .libs, .reason { max-width: none; }
}
"""


def html(report: Mapping[str, Any]) -> str:
    """The whole report as one self-contained HTML document."""
    summary = _map(report.get("summary"))
    tool = _map(report.get("tool"))
    title = (
        f"pytest-jaxport portability report: {_int(summary.get('tests'))} tests, "
        f"{_int(summary.get('failed_tests'))} failed, {_int(summary.get('violations'))} "
        "budget violations"
    )
    body = "".join(
        [
            _header(report),
            "<main>",
            _layers(report),
            _numbers(report),
            _totals(report),
            _matrix(report),
            _tooling(report),
            audit_html(report["audit"]) if report.get("audit") else "",
            _test_details(report),
            "</main>",
            f"<footer>Generated by pytest-jaxport {_e(tool.get('version') or '')} from a "
            f"schema version {_e(report.get('schema_version'))} report. Self-contained: no "
            "scripts, no network.</footer>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">\n"
        '<meta name="generator" content="pytest-jaxport">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n"
        "</body>\n</html>\n"
    )
