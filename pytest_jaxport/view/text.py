"""Terminal text renderings (pure: a view in, a string out).

- :func:`render_text`, the terminal report section: per-test details when asked for, then the
  problems, where the lock-in lives, and last the headline (layers, the three numbers, the
  platform totals, notes said once, the counts), so what needs attention and the three
  numbers are what a person sees above the prompt. Lines fit :data:`WIDTH` columns (a test
  id is never cut). It lays out a
  :class:`~pytest_jaxport.view.viewmodel.reportview.ReportView` and derives no number of its
  own.
- :func:`probe_text`, one check as its test's details show it (and the plugin's per-test
  section).
- :func:`diff_text` and :func:`merge_text`: ``jaxport diff`` and ``jaxport merge`` for the
  terminal (their Markdown is :mod:`pytest_jaxport.view.markdown`'s).

:func:`text` takes a report and builds its view.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import itertools
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_jaxport.model.emulation import (
    emulated_label,
    emulation_lines,
    may_differ_lines,
    not_emulated_message,
)
from pytest_jaxport.model.probe import (
    MAY_DIFFER,
    PlatformProbe,
    Probe,
    emulated_status,
)
from pytest_jaxport.model.runtime_share import SHARE_LAYERS
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.formatting import number, pct, plural
from pytest_jaxport.view.viewmodel.details import (
    padding_line,
    prediction_gap,
    variant_lines,
    what_if_line,
)
from pytest_jaxport.view.viewmodel.matrix import check_numerics, format_rows, level_text
from pytest_jaxport.view.viewmodel.memory import memory_cells
from pytest_jaxport.view.viewmodel.notes import NO_AUTOTUNE_NOTE, lowering_warning_lines
from pytest_jaxport.view.viewmodel.sites import (
    HOTSPOT_NUMERIC,
    hotspot_cells,
    hotspot_headers,
    hotspot_title,
    twin_sites,
)
from pytest_jaxport.view.viewmodel.totals import collective_library

# Types only: a check's section (probe_text, every portable test's) loads no report type.
if TYPE_CHECKING:  # report.merge imports numpy: a renderer of its result never needs it
    from pytest_jaxport.report.baseline import ReportDiff
    from pytest_jaxport.report.document import Report
    from pytest_jaxport.report.entries import Drift
    from pytest_jaxport.report.merge import MergeResult
    from pytest_jaxport.view.viewmodel.problems import Problem, ProblemGroup
    from pytest_jaxport.view.viewmodel.reportview import ReportView
    from pytest_jaxport.view.viewmodel.shares import ShareRow

WIDTH = 100
"""Terminal columns every report line fits (a test id longer than that is never cut)."""
PLATFORM_WIDTH = 5
"""The narrowest a column of platform names is padded to, as reports always had it (the
default platforms' names are four letters at most); wider where a longer name (``oneapi``)
is shown, so that the columns after it line up."""
LIBRARY_COLUMNS = 36
"""Columns the terminal's platform totals keep for each platform's libraries."""
TOOLING_LINES = 3
"""NVIDIA-bound tooling assumptions the default terminal report lists."""
REWRITE_ITEMS = 3
"""Kernels to rewrite the terminal lists per target (the files list every one)."""
KERNEL_COLUMN = 28
"""The least room the sites table's kernel column gets at the default verbosity (a long
site column leaves it this much, cut with ``…``; ``-v`` shows it whole)."""
AUDIT_NAMES = 3
"""Computations the terminal names per test and kind at ``-v`` (``-vv`` names every one)."""
QUIET_REASONS = 3
"""At ``-q``, why the suite audit's computations do not lower: this many reasons per group."""


def _libraries(libraries: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in libraries.items())


def level_tag(result: PlatformProbe) -> str:
    """``lowered``, ``compiled``, ``compiled deviceless h100``, ``compiled on <device>``."""
    return level_text(
        result.platform,
        compiled=result.compiled is not None,
        deviceless=result.deviceless,
        target=result.target,
    )


def collectives_line(result: PlatformProbe) -> str | None:
    """``cuda: collectives (nccl): all-reduce 7 (6 inserted by the SPMD partitioner)``, plus
    what the compiled program runs where it was compiled; ``None`` without collectives."""
    census = result.census
    if census is None or not census.collectives:
        return None
    parts = [
        f"{c.kind} {c.count}"
        + (f" ({c.inserted} inserted by the SPMD partitioner)" if c.inserted else "")
        for c in census.collectives
    ]
    library = collective_library(result.platform)
    text = f"{result.platform}: collectives ({library}): {', '.join(parts)}"
    compiled = result.compiled
    if compiled is not None:
        ran = ", ".join(f"{c.kind} {c.count}" for c in compiled.collectives) or "none"
        text += f"; compiled: {ran}"
    return text


def platform_width(platforms: Iterable[str]) -> int:
    """The width platform names are padded to in a column of lines, one per platform: the
    longest shown (``oneapi``), at least :data:`PLATFORM_WIDTH`.

    >>> platform_width(["cpu", "cuda"]), platform_width(["cpu", "oneapi"])
    (5, 6)
    """
    return max((PLATFORM_WIDTH, *(len(p) for p in platforms)))


def platform_line(probe: Probe, platform: str) -> str:
    """``cpu   vendor 0  custom 0  [lowered]  numerics: reference``; a platform not present
    here says nothing about numerics. Names are padded to the longest of the check's."""
    result = probe.platforms[platform]
    name = platform.ljust(platform_width(probe.platforms))
    if result.census is None:
        if result.needs_hardware:  # the error says "not lowerable here on jax X: needs a GPU"
            return f"{name} {result.error}"
        return f"{name} failed to lower: {result.error}"
    census = result.budgeted or result.census
    libraries = census.libraries()
    text = f"{name} vendor {census.vendor:>3}  custom {census.custom:>3}"
    if libraries:
        text += f"  ({_libraries(libraries)})"
    text += f"  [{level_tag(result)}]"
    if result.compile_error:
        text += f"  compile failed: {result.compile_error}"
    status = check_numerics(probe, platform)
    if status != "not present":  # said once for the report, not on every line
        text += f"  numerics: {status}"
    if result.execution_error:
        text += f" ({result.execution_error})"
    elif status == "mismatch" and result.numerics is not None:
        text += f" ({len(result.numerics.mismatches)} leaves differ)"
    return text


def emulated_lines(result: PlatformProbe) -> list[str]:
    """``tpu (emulated on cpu)  numerics: mismatch (1 leaf differs)`` and, under it, what
    the emulation did and where (why it did not run); ``[]`` where not emulated."""
    emulation = result.emulated
    status = emulated_status(result)
    if emulation is None or status is None:
        return []
    head = f"{emulation.label}  numerics: {status}"
    comparison = result.emulated_numerics
    if status == "mismatch" and comparison is not None:
        head += f" ({plural(len(comparison.mismatches), 'leaf differs', 'leaves differ')})"
    details = [not_emulated_message(emulation)] if status == "not run" else []
    if status == MAY_DIFFER:
        details = may_differ_lines(emulation, result.emulated_bounds)
    return [head, *(f"  {line}" for line in (*details, *emulation_lines(emulation)))]


def probe_text(
    probe: Probe, indent: str = "", *, note: bool = True, every_finding: bool = False
) -> str:
    """One check: a line per platform (and per emulated platform, with what it emulated),
    its vendor and custom kernels, what compiling changed, its formats-and-layout findings,
    and its note (``note=False`` where the report says notes once). Findings: those the
    rules say do not compile and a count per platform, or each one with ``every_finding``
    (``--jaxport-report-details=all``)."""
    lines = [f"{indent}check {probe.name!r}"]
    lines += [f"{indent}  {platform_line(probe, p)}" for p in probe.platforms]
    for platform, result in probe.platforms.items():
        census = result.budgeted
        if census is None:
            continue
        for kernel in census.kernels:
            if kernel.layer in ("vendor", "custom"):
                lines.append(f"{indent}    {platform}: {kernel.layer} {kernel.describe()}")
        extras = (prediction_gap(result), what_if_line(result), padding_line(result),
                  collectives_line(result))  # fmt: skip
        for extra in extras:
            if extra is not None:
                lines.append(f"{indent}    {extra}")
    for cell in memory_cells(probe.platforms):  # the memory column: planned / capacity
        lines.append(f"{indent}    memory {cell.line}")
        lines += [f"{indent}      {line}" for line in cell.details]
    lines += [f"{indent}    {line}" for line in findings_lines(probe, every=every_finding)]
    lines += [f"{indent}    {line}" for line in lowering_warning_lines(probe)]
    for result in probe.platforms.values():
        lines += [f"{indent}  {line}" for line in emulated_lines(result)]
    if probe.note and note:
        lines.append(f"{indent}  note: {probe.note}")
    return "\n".join(lines)


def findings_lines(probe: Probe, *, every: bool) -> list[str]:
    """A check's formats-and-layout findings: ``every`` one, or those the rules say do not
    compile and how many others each platform has."""
    rows = format_rows(probe)
    shown = [r for r in rows if every or not r.compiles]
    lines = [r.text() for r in shown]
    if not every:
        hidden: Counter[str] = Counter()
        for row in rows:
            if row.compiles:
                hidden[row.platform] += row.count
        if hidden:
            counts = ", ".join(f"{p} {number(n)}" for p, n in hidden.items())
            lines.append(
                f"format and layout findings: {counts} (--jaxport-report-details=all lists them)"
            )
    return lines


# -- layout helpers ----------------------------------------------------------------------------


def clauses(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """``text`` in one line, never cut inside a word: its whole clauses (parts between
    ``"; "``) that fit, those left out counted (``; +2 more at -v``); where the first clause
    alone is too long, its whole items (parts between ``", "`` outside parentheses), else its
    whole words, saying the rest is at -v.

    >>> clauses("ops: cpu 2, tpu 0; cpu 100% (measured); tpu 0% (estimated)", width=56)
    ['ops: cpu 2, tpu 0; cpu 100% (measured); +1 more at -v']
    >>> clauses("tpu: 3 findings (padding 2, tiles 1), 4 relayouts; none on cpu", width=54)
    ['tpu: 3 findings (padding 2, tiles 1), +2 more at -v']
    """
    parts = _outside_brackets(text, "; ")
    for keep in range(len(parts), 0, -1):
        left = len(parts) - keep
        line = indent + "; ".join(parts[:keep]) + (f"; +{left} more at -v" if left else "")
        if len(line) <= width:
            return [line]
    items = _outside_brackets(parts[0], ", ")
    for keep in range(len(items) - 1, 0, -1):
        line = (
            f"{indent}{', '.join(items[:keep])}, +{len(items) - keep + len(parts) - 1} more at -v"
        )
        if len(line) <= width:
            return [line]
    rest = " … (-v: in full)"
    return [indent + textwrap.shorten(text, width=width - len(indent), placeholder=rest)]


def _outside_brackets(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` where no parenthesis or bracket is open."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text[i] in "([":
            depth += 1
        elif text[i] in ")]":
            depth -= 1
        elif depth == 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            i += len(separator)
            start = i
            continue
        i += 1
    return [*parts, text[start:]]


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, ending in ``…`` when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def cut_left(text: str, width: int) -> str:
    """``…models/conv.py:24``: a path's end is what identifies it."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def wrap(text: str, indent: str = "", hang: str = "    ", width: int = WIDTH) -> list[str]:
    """``text`` wrapped at word boundaries to ``width``, continuation lines indented."""
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def listed(items: Sequence[str], width: int) -> str:
    """``a 1, b 2, +3 more`` within ``width`` characters."""
    shown: list[str] = []
    for i, item in enumerate(items):
        rest = len(items) - i - 1
        tail = f", +{rest} more" if rest else ""
        candidate = ", ".join([*shown, item])
        if len(candidate) + len(tail) > width and shown:
            return ", ".join(shown) + f", +{len(items) - i} more"
        shown.append(item)
    return ", ".join(shown)


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Sequence[bool],
    indent: str = "",
    width: int = WIDTH,
) -> list[str]:
    """A plain-text table; headers split over two lines when one line would be too wide."""
    split = [(h, "") for h in headers]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    if len(indent) + sum(widths) + 2 * (len(widths) - 1) > width:
        split = [_halves(h) for h in headers]
        widths = [
            max([len(a), len(b), *(len(r[i]) for r in rows)]) for i, (a, b) in enumerate(split)
        ]

    def line(cells: Sequence[str]) -> str:
        return (
            indent
            + "  ".join(
                (c.rjust(w) if num else c.ljust(w))
                for c, w, num in zip(cells, widths, numeric, strict=True)
            ).rstrip()
        )

    head = [line([a for a, _ in split])]
    if any(b for _, b in split):
        head.append(line([b for _, b in split]))
    return head + [line(r) for r in rows]


def _halves(header: str) -> tuple[str, str]:
    words = header.split()
    if len(words) < 2:
        return header, ""
    best = min(range(1, len(words)), key=lambda i: abs(len(" ".join(words[:i])) - len(header) / 2))
    return " ".join(words[:best]), " ".join(words[best:])


# -- the terminal report ---------------------------------------------------------------------


def text(report: Report, options: DisplayOptions | None = None) -> str:
    """The terminal report of a report (see :func:`render_text`)."""
    # the view's builder: loaded where a whole report is rendered, never for a check's section
    from pytest_jaxport.view.viewmodel.build import build_view

    return render_text(build_view(report), options or DisplayOptions())


def render_text(view: ReportView, options: DisplayOptions, *, written_to: str | None = None) -> str:
    """The terminal report section. With ``written_to`` (the report also went to that file)
    only the problems and the headline, unless ``options`` ask for more."""
    view = view.select(options)
    lines: list[str] = []
    level = options.detail_level()  # asked for by name, -q does not take it back
    if level != "none":
        lines += details_lines(view, every=level == "all")
        lines += audit_test_lines(view, every=level == "all")
    if options.verbosity < 0:
        return "\n".join(fit(lines + quiet_lines(view, options)))
    lines += problem_lines(view, options)
    if written_to is None or options.top is not None or options.verbosity > 0:
        lines += hotspot_lines(view, options)
    lines += headline_lines(view, options)
    return "\n".join(fit(lines))


def quiet_lines(view: ReportView, options: DisplayOptions) -> list[str]:
    """``-q``: the problem groups (their headers), one line of numbers (the checks', the
    suite audit's) and the headline; ``-qq``: one line."""
    head = view.headline
    audit = view.audit
    counts = head.setting() if view.unit == "computation" else f"{head.counts()}; {head.setting()}"
    if options.verbosity < -1:
        problems = plural(view.problem_count, "problem") if view.problems else "no problems"
        if view.unit == "computation":
            seen = f"{audit.counted()}; " if audit is not None else ""
            return [f"jaxport audit: {seen}{problems} (-q for the groups)"]
        return [f"jaxport: {head.counts()}; {problems} (-q for the groups)"]
    counted = [(plural(head.checks, "check"), view.numbers_line())]
    if audit is not None and view.unit == "computation":
        counted = [(f"suite audit: {audit.counted()}", view.numbers_line())]
    elif audit is not None and audit.numbers is not None:
        counted.append((f"suite audit: {audit.counted()}", audit.numbers.numbers_line()))
    lines = [line for what, numbers in counted if numbers
             for line in wrap_items(f"{what}; {numbers}", hang="  ")]  # fmt: skip
    return [*problem_lines(view, options), *lines, *wrap(counts, hang="  ")]


def wrap_items(text: str, hang: str = "    ") -> list[str]:
    """``text`` wrapped only after a comma or a semicolon, so that an item (``cuda 6``,
    ``vendor calls: cpu 3``) is never split across lines."""
    glued = text.replace(" ", "\xa0").replace(",\xa0", ", ").replace(";\xa0", "; ")
    return [line.replace("\xa0", " ") for line in wrap(glued, hang=hang)]


def fit(lines: Iterable[str]) -> list[str]:
    """Every line within :data:`WIDTH` columns: long ones wrap under their own indent (a test
    id heading stays whole)."""
    out: list[str] = []
    for block in lines:
        for line in block.split("\n"):
            if len(line) <= WIDTH or not line.startswith(" "):
                out.append(line)
                continue
            indent = line[: len(line) - len(line.lstrip())]
            out += wrap(line.strip(), indent=indent, hang="    ")
    return out


def details_lines(view: ReportView, *, every: bool) -> list[str]:
    """Per test: its checks' platforms and kernels, violations, errors (the tests with a
    finding, or ``every`` test)."""

    lines: list[str] = []
    for test in view.tests:
        if not (every or test.problem):
            continue
        lines += ["", f"{test.nodeid} [{test.outcome}]"]
        probes = [p for c in test.checks if (p := c.probe) is not None]
        lines += [probe_text(probe, indent="  ", note=False, every_finding=every)
                  for probe in probes]  # fmt: skip
        lines += [f"  transformations of {line}" for line in variant_lines(probes)]
        for violation in test.violations:
            lines.append("  VIOLATION " + violation.long_repr().replace("\n", "\n  "))
        if test.error:
            lines.append(f"  error: {test.error}")
    if lines:
        lines.append("")
    return lines


def audit_test_lines(view: ReportView, *, every: bool) -> list[str]:
    """Per test of an audited suite, the jitted computations it owns and those it uses that
    an earlier test owns (a few names each; ``every`` name at ``-vv``), and how many eager
    op-by-op ones."""
    audit = view.audit
    if audit is None or not audit.tests:
        return []
    lines = wrap(
        "suite audit, per test: it owns the computations it ran first in collection order; it "
        "uses the ones an earlier test owns (JAX served them from its caches, traced and "
        "compiled before: the audit counts each once, the test among its users); eager "
        "op-by-op computations (jnp outside jit) are counted, not named",
        hang="  ",
    )
    for test in audit.tests:
        parts = []
        if test.owns or test.eager_owned:
            parts.append(f"owns {_names(test.owns, test.eager_owned, every)}")
        if test.uses or test.eager_used:
            uses = [f"{name} of {owner}" for name, owner in test.uses]
            parts.append(f"uses {_names(uses, test.eager_used, every)}")
        lines += wrap(f"{test.nodeid}: {'; '.join(parts)}", indent="  ", hang="    ")
    return [*lines, ""]


def _names(names: Sequence[str], eager: int, every: bool) -> str:
    """``2 (mlp [3f2a1b2c], step [9d0e1f2a]) and 5 eager ops``."""
    ops = plural(eager, "eager op")
    if not names:
        return ops
    shown = names if every else names[:AUDIT_NAMES]
    more = f", +{number(len(names) - len(shown))} more (-vv)" if len(shown) < len(names) else ""
    named = f"{number(len(names))} ({', '.join(shown)}{more})"
    return f"{named} and {ops}" if eager else named


def audit_failure_lines(view: ReportView) -> list[str]:
    """The suite audit's budget failures as the session's one failure: a headline, then each
    broken limit or grown count with its offending sites; ``[]`` when there are none."""
    groups = [g for g in view.problems if g.audit and g.kind in ("violation", "failure")]
    problems = [p for g in groups for p in g.problems]
    if not problems:
        return []
    lines = [
        f"jaxport audit: FAILED: {plural(len(problems), 'suite budget problem')} "
        "([tool.jaxport.audit] fail_on, --jaxport-baseline); no test failed for them"
    ]
    for problem in problems:
        lines.append(problem.message)
        lines += [f"    {d}" for d in problem.details]
    return lines


def problem_lines(view: ReportView, options: DisplayOptions) -> list[str]:
    """The problems, grouped; a capped number of rows unless ``-v``."""
    head = view.headline
    groups = view.problems
    if not groups:
        return [*wrap(f"problems: none ({view.all_clear()})", hang="  "), ""]
    findings = sum(g.count for g in groups if g.kind in ("not-lowered", "numerics"))
    said = [f"{number(head.failed_tests)} failed", plural(head.violations, "budget violation")]
    if head.mismatches or head.may_differ_text():
        said.append(head.mismatches_text(", ").removeprefix(", "))
    if view.unit == "computation":  # an audit of an unchanged suite: no portable test
        said = []
    if head.not_collected:  # first: the counts below are not the suite's
        said.insert(0, f"tests did not run ({plural(head.not_collected, 'file')} not collected)")
    if head.audit_failures:
        said.append(f"{plural(head.audit_failures, 'suite audit failure')} (no test's)")
    drifts = sum(len(g.problems) for g in groups if g.kind == "drift")
    if drifts:
        said.append(plural(drifts, "output drift") + " across legs")
    mismatches = sum(g.count for g in groups if g.kind == "baseline")
    if mismatches:
        fails = view.baseline is not None and view.baseline.fails
        how = " (--jaxport-baseline-strict)" if fails else " that fail nothing"
        said.append(plural(mismatches, "baseline mismatch", "baseline mismatches") + how)
    if findings:
        said.append(
            f"{plural(findings, 'finding')} that fail{'s' if findings == 1 else ''} no test"
        )
    lines = [f"problems: {', '.join(said)}"]
    limit = options.problem_lines()
    headers = [wrap(f"{g.title} — {g.summary()}", indent="  ", hang="    ") for g in groups]
    if limit == 0:  # -q: every group's header, no rows but why the audit's do not lower
        quotas = [min(len(g.problems), QUIET_REASONS) if _reasons(g) else 0 for g in groups]
        hidden = False
        rows: list[list[list[str]]] = [
            [_problem_line(p, g.rule) for p in g.problems[:quota]]
            for g, quota in zip(groups, quotas, strict=True)
        ]
    else:
        rows = [[_problem_line(p, g.rule) for p in g.problems] for g in groups]
        costs = [[len(row) for row in group] for group in rows]
        quotas, hidden = _allot(costs, [len(h) for h in headers], limit)
    for group, group_rows, header, quota in zip(groups, rows, headers, quotas, strict=False):
        lines += header
        for row in group_rows[:quota]:
            lines += row
        rest = len(group.problems) - quota
        if rest and (limit != 0 or quota):
            lines.append(
                f"    +{number(rest)} more (-v lists them; the report files have them all)"
            )
    if hidden:
        rest = sum(len(g.problems) for g in groups[len(quotas) :])
        lines.append(
            f"  +{plural(len(groups) - len(quotas), 'more group')} "
            f"({plural(rest, 'problem')}; -v lists them)"
        )
    return [*lines, ""]


def _reasons(group: ProblemGroup | Problem) -> bool:
    """Whether ``group`` (or a problem) is the suite audit's reasons computations do not
    lower (one row per reason, shown whole)."""
    return bool(group.audit and group.kind == "not-lowered")


def _reason_lines(problem: Problem) -> list[str]:
    """A suite audit finding: which computations (in which tests: the first few; the report
    files name them all), then the reason, whole."""
    if len(problem.computations) > 1:
        tests = listed(problem.tests, WIDTH - 30)
        where = f"{problem.check} in {plural(len(problem.tests), 'test')} ({tests}):"
    else:
        where = f"{problem.test}  {problem.check!r}:"
    return [*wrap(where, indent="    ", hang="  "), *wrap(problem.message, indent="      ")]


def _problem_line(problem: Problem, common: str) -> list[str]:
    """A problem's row: the test, then the finding. A violation's fits one line (its group
    says the rest); an error or a lowering failure may take a second line, where what to do
    usually is (``did you mean ...``); the audit's computations that fail for one reason,
    the reason whole."""
    if _reasons(problem):
        return _reason_lines(problem)
    prefix = f"    {problem.test}"
    named = f"{problem.check!r}: " if problem.check is not None else ""
    if problem.kind == "violation":
        rest = f"{named}{problem.found}"
        own = f"limit {problem.limit}, set in {problem.origin}"
        if not common.startswith(own):
            rest += f" > {problem.limit} (set in {problem.origin})"
    elif problem.kind == "failure":
        rest = problem.message
    elif problem.kind == "mismatch":
        rest = f"{named}{problem.found}"
    else:
        rest = f"{named}{problem.message}"
    room = WIDTH - len(prefix) - 2
    if room < 30:  # a very long test id: the finding goes on its own line
        return [prefix, "      " + cut(rest, WIDTH - 6)]
    if problem.kind == "violation" or len(rest) <= room:
        return [f"{prefix}  {cut(rest, room)}"]
    first, *more = wrap(rest, width=room, hang="")
    second = " ".join(more)
    return [f"{prefix}  {first}", "      " + cut(second, WIDTH - 6)]


def _allot(
    rows: Sequence[Sequence[int]], headers: Sequence[int], budget: int | None
) -> tuple[list[int], bool]:
    """Rows per group within ``budget`` lines (``rows``: per group, the lines each row
    takes), each group keeping its header (``headers`` lines) and, when cut, a "+N more"
    line: ``(quotas, whether groups were left out)``. ``None``: every row."""
    sizes = [len(r) for r in rows]
    if budget is None:
        return list(sizes), False
    shown = len(sizes)
    while shown > 1 and sum(h + 1 for h in headers[:shown]) + 1 > budget:
        shown -= 1
    quotas = [0] * shown
    hidden = shown < len(sizes)

    def cost() -> int:
        return hidden + sum(
            h + sum(r[:q]) + (q < s)
            for h, r, q, s in zip(headers, rows, quotas, sizes, strict=False)
        )

    grew = True
    while grew:
        grew = False
        for i in range(shown):
            if quotas[i] < sizes[i]:
                quotas[i] += 1
                if cost() > budget:
                    quotas[i] -= 1
                    continue
                grew = True
    return quotas, hidden


def hotspot_lines(view: ReportView, options: DisplayOptions) -> list[str]:
    platform = options.platform or view.hotspot_platform()
    rows = options.hotspot_rows()
    if platform is None or rows == 0:
        return []
    sites, layout = view.sites_shown(platform, options, rows)
    shown = sites if rows is None else sites[:rows]
    if not sites and layout is None:
        return []
    headers = hotspot_headers(view.unit)
    twins = twin_sites(view.hotspots)
    cells = [(cut_left(c[0], 40), *c[1:]) for c in (hotspot_cells(h, twins) for h in shown)]
    # The kernel column gets the room the others leave it: a longer row would wrap its time
    # column under the site. -v keeps the kernel whole, its rest on a line of its own under it.
    others = sum(max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(headers)
                 if i != 1)  # fmt: skip
    room = max(WIDTH - len("  ") - others - 2 * (len(headers) - 1), KERNEL_COLUMN)
    rests: list[str] = []
    if options.verbosity < 1:
        cells = [(c[0], cut(c[1], room), *c[2:]) for c in cells]
    else:
        split = [_cell_halves(c[1], room) for c in cells]
        cells = [(c[0], head, *c[2:]) for c, (head, _) in zip(cells, split, strict=True)]
        rests = [rest for _, rest in split]
    title = hotspot_title(view.hotspots, platform, len(shown), grouped=not options.layout_in_full())
    lines = wrap(title, hang="  ")
    if cells:
        laid = table(headers, cells, HOTSPOT_NUMERIC, indent="  ")
        head = len(laid) - len(cells)
        under = " " * (2 + max(len(headers[0]), *(len(c[0]) for c in cells)) + 2)
        lines += laid[:head]
        for row, rest in itertools.zip_longest(laid[head:], rests, fillvalue=""):
            lines += [row, *([under + rest] if rest else [])]
    if len(shown) < len(sites):
        lines.append(
            f"  +{plural(len(sites) - len(shown), 'more site')} (--jaxport-report-top=N; the "
            "report files have them all)"
        )
    if layout is not None:  # thousands of tile-padding rows would be the table: one line
        lines += wrap("  " + layout.summary(), hang="      ")
    return [*lines, ""]


def _cell_halves(text: str, room: int) -> tuple[str, str]:
    """``text`` as a cell of ``room`` columns and the rest for the line under it, split at
    the last space that fits (cut where no space does)."""
    if len(text) <= room:
        return text, ""
    at = text.rfind(" ", 0, room + 1)
    if at <= 0:
        return cut(text, room), ""
    return text[:at], text[at + 1 :]


def share_line(row: ShareRow, width: int = 0) -> str:
    """``cuda  xla  74%  vendor  25%  custom   1%  [ESTIMATED ±37]  cublas 6%, ...``, the
    platform padded to ``width`` (:func:`platform_width` of the rows shown)."""
    layers = "  ".join(f"{layer} {pct(row.layers[layer]):>4}" for layer in SHARE_LAYERS)
    label = (row.short or row.label).replace("estimated", "ESTIMATED", 1)  # it must stand out
    name = row.platform.ljust(max(width, platform_width([row.platform])))
    text = f"{name} {layers}  [{label}]"
    libraries = [f"{lib} {pct(f)}" for lib, f in row.libraries]
    if libraries:
        text += "  " + listed(libraries, max(WIDTH - 3 - len(text) - 2, 20))
    return text


def headline_lines(view: ReportView, options: DisplayOptions) -> list[str]:
    """Layers, the three numbers, platform totals, notes, and the counts last."""
    lines: list[str] = []
    if view.layers:
        lines.append("layers:" if options.verbosity > 0 else "layers (-v: in full):")
        for row in view.layers:
            said = f"{row.layer}: {row.value}"
            if options.verbosity > 0:
                lines += wrap(said, indent="  ", hang="    ")
            else:
                lines += clauses(said, indent="  ")
    if view.tooling:
        shown = view.tooling if options.verbosity > 0 else view.tooling[:TOOLING_LINES]
        lines += ["", f"NVIDIA-bound tooling and CI assumptions ({number(len(view.tooling))}):"]
        lines += [cut(f"  {a.file}:{a.line}: {a.rule}: {a.reason}", WIDTH) for a in shown]
        if len(shown) < len(view.tooling):
            lines.append(f"  +{number(len(view.tooling) - len(shown))} more (-v lists them)")
    lines += numbers_lines(view, options)
    lines += ["", *totals_lines(view)]
    lines += emulation_summary(view)
    lines += audit_lines(view, options)
    notes = [f"note: {n.text}" + (f" ({plural(n.checks, 'check')})" if n.checks else "")
             for n in view.notes]  # fmt: skip
    if view.deviceless:
        notes.append(f"note: {NO_AUTOTUNE_NOTE}")
    for note in notes:
        lines += wrap(note, hang="      ")
    head = view.headline
    if view.unit == "computation":  # an audit of an unchanged suite: no portable test
        lines += wrap(head.setting(), hang="  ")
    else:
        lines += wrap(head.counts() + "; " + head.setting(), hang="  ")
    return lines


def numbers_lines(view: ReportView, options: DisplayOptions) -> list[str]:
    """The three numbers: runtime share, kernels to rewrite and engineering days (of the
    checks, or of a suite audit's distinct computations: its ``unit`` says)."""
    lines: list[str] = []
    audited = view.unit == "computation"
    if view.shares:
        basis = "suite audit, each distinct computation once" if audited else "suite, time-weighted"
        lines += ["", f"1. runtime share ({basis}):"]
        for row in view.shares:
            lines.append(f"   {share_line(row, platform_width(s.platform for s in view.shares))}")
            if row.ranking:  # under its row: the numbers above it are not amounts
                lines += wrap(row.ranking, indent=" " * 9, hang="  ")
        labels = dict.fromkeys(
            (r.short, r.label) for r in view.shares if r.short and r.short != r.label
        )
        for short, label in labels:  # each abbreviated basis spelled out once
            lines += wrap(f"[{short.replace('estimated', 'ESTIMATED', 1)}]: {label}",
                          indent="   ", hang="     ")  # fmt: skip
    if view.targets:
        counts = ", ".join(f"{t.target} {t.count_text()}" for t in view.targets)
        whose = "; suite audit" if audited else ""
        home = view.headline.home
        lines += ["", f"2. kernels to rewrite moving off {home} (distinct sites{whose}): {counts}"]
        if any(t.not_lowered for t in view.targets):
            lines += wrap("not lowered: no count and no price, not 0; lower for it to count it "
                          "([tool.jaxport] platforms, --jaxport-platforms; a merge of legs "
                          "that lowered it counts it)", indent="     ", hang="  ")  # fmt: skip
        items = [(t.target, i) for t in view.targets for i in t.items]
        listed_items = items if options.verbosity > 0 else items[:REWRITE_ITEMS]
        for name, item in listed_items:
            where = f" at {item.location}" if item.location else ""
            said = f"     {name} {item.status}: {item.name} ({item.kind}){where}"
            lines.append(cut(said, WIDTH))
        if len(listed_items) < len(items):
            lines.append(f"     +{number(len(items) - len(listed_items))} more (-v lists them)")
        whose = ", suite audit" if audited else ""
        lines += ["", f"3. engineering days for a backend switch ([tool.jaxport.cost]{whose}):"]
        for target in view.targets:
            lines += wrap(f"{target.target}: {target.days_split()}", indent="   ")
        apart = [(t.target, t.apart) for t in view.targets if t.apart is not None]
        if apart:  # a suite audit's tests' own lines: not in the numbers above
            said = "; ".join(f"{target} {row.text()}" for target, row in apart)
            lines += wrap(f"{apart[0][1].where}, apart (not above): {said}", indent="   ",
                          hang="     ")  # fmt: skip
    return lines


def audit_lines(view: ReportView, options: DisplayOptions) -> list[str]:
    """What the suite audit saw and how; in a run with checks too, its own numbers next to
    theirs (its sites and totals at ``-v``)."""
    audit = view.audit
    if audit is None:
        return []
    lines = ["", *wrap(f"suite audit (--jaxport-audit): {audit.seen_line()}; recorded by "
                       f"{audit.hook}", hang="  ")]  # fmt: skip
    said = audit.not_audited()
    if said is not None:
        lines += wrap(f"not audited: {said}", indent="  ", hang="    ")
    for note in audit.notes:
        lines += wrap(f"note: {note}", indent="  ", hang="    ")
    if audit.memory:
        lines.append("  largest planned device memory, per compiled platform:")
        for largest in audit.memory:
            lines += wrap(largest.line, indent="    ", hang="    ")
    if audit.lines is not None:
        lines += wrap(f"counted: {audit.lines.line()}", indent="  ", hang="    ")
    numbers = audit.numbers
    if numbers is not None:
        lines += wrap(
            "the suite audit's numbers (each distinct computation the suite ran, once; the "
            "numbers above are the portable checks'):", indent="  ", hang="    "
        )  # fmt: skip
        lines += numbers_lines(numbers, options)
        if options.verbosity > 0:
            lines += ["", *hotspot_lines(numbers, options), *totals_lines(numbers)]
    return lines


def totals_lines(view: ReportView) -> list[str]:
    """The platform totals table; a column with one value for every platform (the level, as
    the headline says) is left out, and each platform's libraries end its row."""
    totals = view.totals
    if not totals.rows:
        return []
    keep = [
        i
        for i in range(len(totals.headers))
        if (totals.numeric[i] or len({cells[i] for _, cells, _ in totals.rows}) > 1)
        and (not totals.terminal or totals.terminal[i])
    ]
    rows = [(p, *(cells[i] for i in keep)) for p, cells, _ in totals.rows]
    lines = table(
        ("platform", *(totals.headers[i] for i in keep)),
        rows,
        (False, *(totals.numeric[i] for i in keep)),
        width=WIDTH - LIBRARY_COLUMNS,
    )
    head, body = lines[: len(lines) - len(rows)], lines[len(lines) - len(rows) :]
    width = max(len(line) for line in lines) + 2
    # Libraries end each row where they fit (20 columns at least), else go under it.
    beside = WIDTH - width >= 20
    out = [*head[:-1], head[-1].ljust(width) + "libraries" if beside else head[-1]]
    for (_, _, libraries), line in zip(totals.rows, body, strict=True):
        names = [f"{lib} {number(n)}" for lib, n in libraries]
        if not names:
            out.append(line)
        elif beside:
            out.append((line.ljust(width) + listed(names, WIDTH - width)).rstrip())
        else:
            out += [line, "  libraries: " + listed(names, WIDTH - 13)]
    out.append("  (" + totals_note_short(view.unit) + ")")
    if totals.not_compiled:
        out += wrap(totals.not_compiled, indent="  ", hang="    ")
    if view.collectives:
        out.append(f"collectives by kind (call-weighted, summed over {view.unit}s):")
        for platform, what in view.collectives:
            out += wrap(f"{platform}: {what}", indent="  ", hang="    ")
    return out


def emulation_summary(view: ReportView) -> list[str]:
    """``emulated on cpu: tpu 12 checks: 11 match, 1 mismatch; cuda ...``; ``[]`` without
    emulation."""
    if not view.emulations:
        return []
    said = "; ".join(f"{row.platform} {row.counts()}" for row in view.emulations)
    return wrap(f"emulated on cpu (emulate): {said}", hang="  ")


TOTALS_NOTE_SHORT = (
    "calls: summed over checks; sites: distinct source lines and kernels, each counted once"
)


def totals_note_short(unit: str) -> str:
    """:data:`TOTALS_NOTE_SHORT`, for checks or a suite audit's distinct computations."""
    if unit == "computation":
        return TOTALS_NOTE_SHORT.replace("checks", "distinct computations")
    return TOTALS_NOTE_SHORT


# -- jaxport diff and jaxport merge -----------------------------------------------------------


def drift_text(drift: Drift) -> str:
    """A drift across legs, headline and differing leaves, for the terminal."""
    head = (
        f"{drift.nodeid} check {drift.check!r}: {drift.platform} ({drift.leg}) differs from "
        f"{drift.reference} ({drift.reference_leg})"
    )
    if drift.platform == emulated_label(drift.reference):  # the hardware it stands in for
        head = (
            f"{drift.nodeid} check {drift.check!r}: the emulation of {drift.reference} "
            f"({drift.leg}) disagrees with {drift.reference} itself ({drift.reference_leg})"
        )
    return "\n".join([head, *(f"  {m}" for m in drift.messages)])


def merge_text(result: MergeResult) -> str:
    """The drifts and notes of ``jaxport merge``, for the terminal (empty when there is
    nothing to say)."""
    lines: list[str] = []
    if result.drifts:
        lines.append(f"{len(result.drifts)} output drift(s) across legs:")
        lines += [drift_text(d) for d in result.drifts]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _diff_audit_lines(found: ReportDiff) -> list[str]:
    """The suite audit's changed counts (with the sites that moved them) and its new and
    removed sites, for the terminal."""
    lines = []
    for title, grew in (("suite audit grew", True), ("suite audit shrank", False)):
        changes = [c for c in found.audit if c.grew == grew]
        if changes:
            lines.append(f"{title}:")
            for change in changes:
                lines.append(f"  {change.describe()}")
                lines += [f"    {site.describe()}" for site in change.sites]
    for title, pairs in (("suite audit, new sites", found.new_sites),
                         ("suite audit, removed sites", found.removed_sites)):  # fmt: skip
        if pairs:
            lines.append(f"{title}:")
            lines += [f"  {platform}: {site}" for platform, site in pairs]
    return lines


def diff_text(found: ReportDiff) -> str:
    """``jaxport diff`` for the terminal: a headline, then each change, test and check added
    or removed."""
    lines = [f"jaxport diff: {found.headline()}"]
    for title, changes in (("grew", found.growth), ("shrank", found.shrinkage)):
        if changes:
            lines.append(f"{title}:")
            lines += [f"  {c.nodeid} {c.describe()}" for c in changes]
    for title, names in (("new tests", found.new_tests), ("removed tests", found.removed_tests)):
        if names:
            lines.append(f"{title}:")
            lines += [f"  {n}" for n in names]
    for title, pairs in (("new checks", found.new_checks),
                         ("removed checks", found.removed_checks)):  # fmt: skip
        if pairs:
            lines.append(f"{title}:")
            lines += [f"  {n} check {c!r}" for n, c in pairs]
    return "\n".join(lines + _diff_audit_lines(found))
