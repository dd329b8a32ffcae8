"""Text and Markdown renderings of a report dict (pure: a report in, a string out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_jaxport.report import Probe, numerics_status


def _libraries(libraries: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in libraries.items())


def platform_line(probe: Probe, platform: str) -> str:
    """``cuda  vendor 2  custom 0  (cublas 2)  numerics: not present``."""
    result = probe.platforms[platform]
    if result.census is None:
        return f"{platform:<5} failed to lower: {result.error}"
    census = result.census
    libraries = census.libraries()
    text = f"{platform:<5} vendor {census.vendor:>3}  custom {census.custom:>3}"
    if libraries:
        text += f"  ({_libraries(libraries)})"
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
        if result.census is None:
            continue
        for kernel in result.census.kernels:
            if kernel.layer in ("vendor", "custom"):
                lines.append(f"{indent}    {platform}: {kernel.layer} {kernel.describe()}")
    if probe.note:
        lines.append(f"{indent}  note: {probe.note}")
    return "\n".join(lines)


def text(report: Mapping[str, Any]) -> str:
    """The terminal report: suite totals per platform, then each test's checks."""
    summary = report["summary"]
    config = report["config"]
    env = report["environment"]
    lines = [
        f"{summary['tests']} portable tests, {summary['checks']} checks, "
        f"{summary['failed_tests']} failed, {summary['violations']} budget violations",
        f"platforms: {', '.join(config['platforms'])} (reference {config['reference']}); "
        f"present here: {', '.join(env.get('present_platforms', [])) or 'none'}; "
        "level: lowered (StableHLO, no hardware needed)",
        "",
        f"{'platform':<9}{'vendor':>7}{'custom':>7}{'lowered':>9}{'failed':>8}  libraries",
    ]
    for platform, totals in summary["platforms"].items():
        lines.append(
            f"{platform:<9}{totals['vendor']:>7}{totals['custom']:>7}{totals['lowered']:>9}"
            f"{totals['failed_to_lower']:>8}  {_libraries(totals['libraries']) or '-'}"
        )
    for test in report["tests"]:
        lines += ["", f"{test['nodeid']} [{test['outcome']}]"]
        for check in test.get("checks", ()):
            lines.append(probe_text(Probe.from_dict(check), indent="  "))
        for violation in test.get("violations", ()):
            lines.append("  VIOLATION " + violation["message"].replace("\n", "\n  "))
        if test.get("message") and not test.get("violations"):
            lines.append(f"  {test['message']}")
    return "\n".join(lines)


def markdown(report: Mapping[str, Any]) -> str:
    """A Markdown report for pull requests and ``$GITHUB_STEP_SUMMARY``."""
    summary = report["summary"]
    lines = [
        "## pytest-jaxport portability report",
        "",
        f"{summary['tests']} portable tests, {summary['checks']} checks, "
        f"{summary['failed_tests']} failed, {summary['violations']} budget violations "
        "(level: lowered).",
        "",
        "| platform | vendor | custom | lowered | failed to lower | libraries |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for platform, totals in summary["platforms"].items():
        lines.append(
            f"| {platform} | {totals['vendor']} | {totals['custom']} | {totals['lowered']} | "
            f"{totals['failed_to_lower']} | {_libraries(totals['libraries']) or '-'} |"
        )
    lines += [
        "",
        "| test | check | platform | vendor | custom | numerics |",
        "|---|---|---|---:|---:|---|",
    ]
    for test in report["tests"]:
        for check in test.get("checks", ()):
            probe = Probe.from_dict(check)
            for platform, result in probe.platforms.items():
                vendor = result.census.vendor if result.census else "-"
                custom = result.census.custom if result.census else "failed to lower"
                lines.append(
                    f"| `{test['nodeid']}` | {probe.name} | {platform} | {vendor} | {custom} | "
                    f"{numerics_status(probe, platform)} |"
                )
    return "\n".join(lines) + "\n"
