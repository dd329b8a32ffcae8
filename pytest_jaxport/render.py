"""Text and Markdown renderings of a report dict (pure: a report in, a string out).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_jaxport.census import Census
from pytest_jaxport.cost import SHARE_LAYERS
from pytest_jaxport.report import PlatformProbe, Probe, numerics_status
from pytest_jaxport.targets import COLLECTIVE_LIBRARIES

NO_AUTOTUNE_NOTE = (
    "deviceless compilation does not autotune, so Triton-vs-cuBLAS picks can differ from a real GPU"
)
_PLAIN_XLA_KINDS = frozenset({"xla", "fusion", "address-computation"})
"""XLA kinds too generic to name when showing what a vendor dispatch became."""


def _libraries(libraries: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in libraries.items())


def level_tag(result: PlatformProbe) -> str:
    """``lowered``, ``compiled``, ``compiled deviceless h100``, ``compiled on <device>``."""
    if result.compiled is None:
        return "lowered"
    if result.deviceless:
        return f"compiled deviceless {result.target}"
    if result.target and result.platform != "cpu":
        return f"compiled on {result.target}"
    return "compiled"


def _dispatches(census: Census, *, xla: bool) -> str:
    parts = [f"{name} {n}" for name, n in census.libraries().items()]
    if census.custom:
        parts.append(f"custom {census.custom}")
    if xla:
        parts += [
            f"XLA {kind} {n}"
            for kind, n in census.xla_kinds.items()
            if kind not in _PLAIN_XLA_KINDS and n
        ]
    return ", ".join(parts) or "no vendor or custom calls"


def prediction_gap(result: PlatformProbe) -> str | None:
    """Where the lowered prediction and the compiled reality differ, in one line.

    ``cuda: lowered predicted cublas 4; compiled: cublas 1, XLA triton-gemm 3``; ``None``
    when they agree (same libraries and counts, same custom calls) or either is missing.
    """
    lowered, compiled = result.census, result.compiled
    if lowered is None or compiled is None:
        return None
    if lowered.libraries() == compiled.libraries() and lowered.custom == compiled.custom:
        return None
    return (
        f"{result.platform}: lowered predicted {_dispatches(lowered, xla=False)}; "
        f"compiled: {_dispatches(compiled, xla=True)}"
    )


def what_if_line(result: PlatformProbe) -> str | None:
    """``cuda: with no vendor libraries: cudnn 1 -> XLA fusion 1`` (the what-if compile)."""
    compiled, fallback = result.compiled, result.what_if_no_vendor
    if compiled is None or fallback is None:
        return None
    before = _dispatches(compiled, xla=False)
    if compiled.libraries() == fallback.libraries():
        return f"{result.platform}: with no vendor libraries: unchanged ({before})"
    grown = fallback.xla_ops - compiled.xla_ops
    if fallback.libraries() or fallback.custom:
        after = _dispatches(fallback, xla=True)
    else:
        after = "XLA's own kernels only"
    return (
        f"{result.platform}: with no vendor libraries: {before} -> {after} "
        f"({fallback.xla_ops} XLA dispatches, {grown:+d})"
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
    library = COLLECTIVE_LIBRARIES.get(result.platform, "xla")
    text = f"{result.platform}: collectives ({library}): {', '.join(parts)}"
    compiled = result.compiled
    if compiled is not None:
        ran = ", ".join(f"{c.kind} {c.count}" for c in compiled.collectives) or "none"
        text += f"; compiled: {ran}"
    return text


def platform_line(probe: Probe, platform: str) -> str:
    """``cuda  vendor 2  custom 0  (cublas 2)  [lowered]  numerics: not present``."""
    result = probe.platforms[platform]
    if result.census is None:
        return f"{platform:<5} failed to lower: {result.error}"
    census = result.budgeted or result.census
    libraries = census.libraries()
    text = f"{platform:<5} vendor {census.vendor:>3}  custom {census.custom:>3}"
    if libraries:
        text += f"  ({_libraries(libraries)})"
    text += f"  [{level_tag(result)}]"
    if result.compile_error:
        text += f"  compile failed: {result.compile_error}"
    status = numerics_status(probe, platform)
    text += f"  numerics: {status}"
    if result.execution_error:
        text += f" ({result.execution_error})"
    elif status == "mismatch" and result.numerics is not None:
        text += f" ({len(result.numerics.mismatches)} leaves differ)"
    return text


def probe_text(probe: Probe, indent: str = "") -> str:
    lines = [f"{indent}check {probe.name!r}"]
    lines += [f"{indent}  {platform_line(probe, p)}" for p in probe.platforms]
    for platform, result in probe.platforms.items():
        census = result.budgeted
        if census is None:
            continue
        for kernel in census.kernels:
            if kernel.layer in ("vendor", "custom"):
                lines.append(f"{indent}    {platform}: {kernel.layer} {kernel.describe()}")
        for extra in (prediction_gap(result), what_if_line(result), collectives_line(result)):
            if extra is not None:
                lines.append(f"{indent}    {extra}")
    if probe.note:
        lines.append(f"{indent}  note: {probe.note}")
    return "\n".join(lines)


def _variant_summary(probe: Probe) -> str:
    """``0 custom, 2 vendor`` (most on any platform), plus where the transformation failed."""
    counted = [r.budgeted for r in probe.platforms.values() if r.budgeted is not None]
    text = (
        f"{max((c.custom for c in counted), default=0)} custom, "
        f"{max((c.vendor for c in counted), default=0)} vendor"
        if counted
        else "nothing lowered"
    )
    failed: dict[str, list[str]] = {}
    for platform, result in probe.platforms.items():
        if result.error is None:
            continue
        marker = f": {probe.transform} cannot be taken"
        reason = result.error.split(marker)[0] if marker in result.error else "failed"
        if reason.startswith(f"{probe.transform} cannot be taken"):
            reason = "cannot be taken"
        failed.setdefault(reason, []).append(platform)
    notes = [f"{reason} on {', '.join(platforms)}" for reason, platforms in failed.items()]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def variant_lines(test: Mapping[str, Any]) -> list[str]:
    """Per function checked with transformations, its checks side by side:
    ``'conv': forward: 0 custom, 1 vendor; grad: 0 custom, 2 vendor``."""
    probes = [Probe.from_dict(c) for c in test.get("checks", ())]
    lines = []
    for base in probes:
        if base.transform is not None:
            continue
        variants = [p for p in probes if p.variant_of == base.name]
        if not variants:
            continue
        parts = [f"forward: {_variant_summary(base)}"]
        parts += [f"{p.transform}: {_variant_summary(p)}" for p in variants]
        lines.append(f"{base.name!r}: " + "; ".join(parts))
    return lines


def _levels(report: Mapping[str, Any]) -> str:
    compiled = report["config"].get("compile") or []
    if not compiled:
        return "level: lowered (StableHLO, no hardware needed)"
    target = report["config"].get("target")
    gpu = f" (cuda deviceless against {target} where no GPU)" if target else ""
    return f"levels: compiled for {', '.join(compiled)}{gpu}; lowered elsewhere"


def _summary_level(totals: Mapping[str, Any]) -> str:
    compiled = totals.get("compiled", 0)
    if not compiled:
        return "lowered"
    return "compiled" if compiled == totals["lowered"] else "mixed"


def _deviceless_used(report: Mapping[str, Any]) -> bool:
    return any(
        (result.get("compiled") or {}).get("deviceless")
        for test in report["tests"]
        for check in test.get("checks", ())
        for result in check["platforms"].values()
    )


TOOLING_SHOWN = 20


def _share_line(platform: str, share: Mapping[str, Any]) -> str:
    libraries = ", ".join(f"{lib} {f:.0%}" for lib, f in share.get("libraries", {}).items())
    label = "measured" if share.get("basis") == "measured" else "ESTIMATED (roofline)"
    layers = "  ".join(f"{layer} {share.get(layer, 0):>4.0%}" for layer in SHARE_LAYERS)
    return f"{platform:<5} {layers}  [{label}]" + (f"  {libraries}" if libraries else "")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def three_numbers(summary: Mapping[str, Any]) -> list[str]:
    """The layer table, runtime share, kernels to rewrite and days, as terminal lines."""
    lines: list[str] = []
    layers = summary.get("layers") or []
    if layers:
        lines.append("layers:")
        for row in layers:
            lines.append(f"  {row['layer']} ({row['portable']}): {row['value']}")
    tooling = (summary.get("tooling") or {}).get("assumptions") or []
    if tooling:
        lines += ["", "NVIDIA-bound tooling and CI assumptions:"]
        shown = tooling[:TOOLING_SHOWN]
        lines += [f"  {a['file']}:{a['line']}: {a['rule']}: {a['reason']}" for a in shown]
        if len(tooling) > TOOLING_SHOWN:
            lines.append(f"  ... and {len(tooling) - TOOLING_SHOWN} more in the JSON report")
    shares = summary.get("runtime_share") or {}
    if shares:
        lines += ["", "1. runtime share (suite, time-weighted):"]
        lines += [f"   {_share_line(p, share)}" for p, share in shares.items()]
    rewrite = summary.get("rewrite") or {}
    if rewrite:
        lines += ["", "2. kernels to rewrite moving off cuda:"]
        for target, estimate in rewrite.items():
            lines.append(f"   {target}: {estimate['kernels_to_rewrite']}")
            for item in estimate.get("items", ()):
                where = f" at {item['location']}" if item.get("location") else ""
                lines.append(f"     {item['status']}: {item['name']} ({item['kind']}){where}")
        lines += ["", "3. engineering days for a backend switch ([tool.jaxport.cost]):"]
        for target, estimate in rewrite.items():
            parts = ", ".join(
                f"{key.replace('_', ' ')} {days:g}"
                for key, days in estimate["breakdown"].items()
                if days
            )
            days = f"   {target}: {estimate['days']:g} days"
            lines.append(days + (f" ({parts})" if parts else ""))
    return lines


def text(report: Mapping[str, Any]) -> str:
    """The terminal report: the layer table and the three numbers, totals, then each test."""
    summary = report["summary"]
    config = report["config"]
    env = report["environment"]
    lines = [
        f"{_count(summary['tests'], 'portable test')}, {_count(summary['checks'], 'check')}, "
        f"{summary['failed_tests']} failed, {_count(summary['violations'], 'budget violation')}",
        f"platforms: {', '.join(config['platforms'])} (reference {config['reference']}); "
        f"present here: {', '.join(env.get('present_platforms', [])) or 'none'}; "
        + _levels(report),
        "",
        *three_numbers(summary),
        "",
        f"{'platform':<9}{'vendor':>7}{'custom':>7}{'lowered':>9}{'failed':>8}  "
        f"{'level':<9} libraries",
    ]
    for platform, totals in summary["platforms"].items():
        lines.append(
            f"{platform:<9}{totals['vendor']:>7}{totals['custom']:>7}{totals['lowered']:>9}"
            f"{totals['failed_to_lower']:>8}  {_summary_level(totals):<9} "
            f"{_libraries(totals['libraries']) or '-'}"
        )
    if _deviceless_used(report):
        lines.append(f"note: {NO_AUTOTUNE_NOTE}")
    for test in report["tests"]:
        lines += ["", f"{test['nodeid']} [{test['outcome']}]"]
        for check in test.get("checks", ()):
            lines.append(probe_text(Probe.from_dict(check), indent="  "))
        lines += [f"  transformations of {line}" for line in variant_lines(test)]
        for violation in test.get("violations", ()):
            lines.append("  VIOLATION " + violation["message"].replace("\n", "\n  "))
        if test.get("message") and not test.get("violations"):
            lines.append(f"  {test['message']}")
    return "\n".join(lines)


def _markdown_numbers(summary: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    layers = summary.get("layers") or []
    if layers:
        lines += ["| layer | portable? | what we count | this suite |", "|---|---|---|---|"]
        lines += [
            f"| {r['layer']} | {r['portable']} | {r['counted']} | {r['value']} |" for r in layers
        ]
        lines.append("")
    shares = summary.get("runtime_share") or {}
    if shares:
        lines += ["| platform | xla | vendor | custom | basis |", "|---|---:|---:|---:|---|"]
        lines += [
            f"| {p} | {s.get('xla', 0):.0%} | {s.get('vendor', 0):.0%} | {s.get('custom', 0):.0%}"
            f" | {s.get('basis')} |"
            for p, s in shares.items()
        ]
        lines.append("")
    tooling = (summary.get("tooling") or {}).get("assumptions") or []
    if tooling:
        lines += ["| file | line | assumption | why |", "|---|---:|---|---|"]
        lines += [f"| `{a['file']}` | {a['line']} | {a['rule']} | {a['reason']} |" for a in tooling]
        lines.append("")
    rewrite = summary.get("rewrite") or {}
    if rewrite:
        lines += ["| target | kernels to rewrite | engineering days |", "|---|---:|---:|"]
        lines += [
            f"| {t} | {e['kernels_to_rewrite']} | {e['days']:g} |" for t, e in rewrite.items()
        ]
        lines.append("")
    return lines


def markdown(report: Mapping[str, Any]) -> str:
    """A Markdown report for pull requests and ``$GITHUB_STEP_SUMMARY``."""
    summary = report["summary"]
    lines = [
        "## pytest-jaxport portability report",
        "",
        f"{_count(summary['tests'], 'portable test')}, {_count(summary['checks'], 'check')}, "
        f"{summary['failed_tests']} failed, {_count(summary['violations'], 'budget violation')} "
        f"({_levels(report)}).",
        "",
        *_markdown_numbers(summary),
        "| platform | vendor | custom | lowered | failed to lower | libraries | level |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for platform, totals in summary["platforms"].items():
        lines.append(
            f"| {platform} | {totals['vendor']} | {totals['custom']} | {totals['lowered']} | "
            f"{totals['failed_to_lower']} | {_libraries(totals['libraries']) or '-'} | "
            f"{_summary_level(totals)} |"
        )
    if _deviceless_used(report):
        lines += ["", f"Note: {NO_AUTOTUNE_NOTE}."]
    lines += [
        "",
        "| test | check | platform | vendor | custom | numerics | level |",
        "|---|---|---|---:|---:|---|---|",
    ]
    gaps: list[str] = []
    for test in report["tests"]:
        for check in test.get("checks", ()):
            probe = Probe.from_dict(check)
            for platform, result in probe.platforms.items():
                census = result.budgeted
                vendor = census.vendor if census else "-"
                custom = census.custom if census else "failed to lower"
                level = level_tag(result) if census else "-"
                lines.append(
                    f"| `{test['nodeid']}` | {probe.name} | {platform} | {vendor} | {custom} | "
                    f"{numerics_status(probe, platform)} | {level} |"
                )
                for extra in (prediction_gap(result), what_if_line(result)):
                    if extra is not None:
                        gaps.append(f"- `{test['nodeid']}` {probe.name}: {extra}")
    grouped = [f"- `{t['nodeid']}` {line}" for t in report["tests"] for line in variant_lines(t)]
    if grouped:
        lines += ["", "Transformations (most on any platform, per check):", "", *grouped]
    if gaps:
        lines += ["", "Lowered prediction vs compiled reality:", "", *gaps]
    return "\n".join(lines) + "\n"
