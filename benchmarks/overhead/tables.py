"""Markdown tables from a results JSON (what benchmarks/README.md shows).

python -m benchmarks.overhead.tables benchmarks/results/full-2cpu.json [more.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _f(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def suites(results: dict[str, Any]) -> list[str]:
    found = dict(results.get("suite", {}))
    if results.get("suite_report"):
        found["generated, `--jaxport-report`"] = results["suite_report"]
    if results.get("suite_compiled_cpu"):
        found["generated, `--jaxport-compile=cpu`"] = results["suite_compiled_cpu"]
    if not found:
        return []
    lines = [
        "| suite | tests | reps | plain cold s | jaxport cold s | **cold ratio** (cpu-time, paired) "
        "| plain warm s | jaxport warm s | **warm ratio** (cpu-time, paired) | added / test, cold |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in found.items():
        if "cold_ratio_wall" not in s:
            lines.append(f"| {name} | {s.get('skipped') or s.get('error')} |||||||||")
            continue
        lines.append(
            f"| {name} | {s['tests']} | {s['reps']} | {s['b_cold_median_wall_s']:.2f} "
            f"| {s['a_cold_median_wall_s']:.2f} | **{s['cold_ratio_wall']:.3f}** "
            f"({s['cold_ratio_cpu']:.3f}, {s['cold_paired_ratio_wall_median']:.3f}) "
            f"| {s['b_warm_median_wall_s']:.2f} | {s['a_warm_median_wall_s']:.2f} "
            f"| **{s['warm_ratio_wall']:.3f}** ({s['warm_ratio_cpu']:.3f}, "
            f"{s['warm_paired_ratio_wall_median']:.3f}) "
            f"| {_ms(s.get('cold_added_per_test_s', 0.0))} ms |"
        )
    return lines


def breakdown(results: dict[str, Any]) -> list[str]:
    b = results.get("breakdown")
    if not b or "grouped_total_s" not in b:
        return []
    n = len(b["cases"])
    lines = [
        f"{n} cases x {b['reps']} reps, medians summed over cases; jaxport.check end to end "
        f"{b['check_total_s']:.3f} s vs plain jit+run {b['plain_total_s']:.3f} s: "
        f"**{b['check_over_plain']:.3f}x** wall, {b['check_over_plain_cpu']:.3f}x CPU time. "
        f"Stages a plain jit does not do: **{b['added_share_of_check']:.1%}** of the check "
        f"({b['added_by_plugin_s'] / n * 1000:.1f} ms per check).",
        "",
        "| stage | total s | ms / check | share |",
        "|---|---|---|---|",
    ]
    for stage, seconds in b["grouped_total_s"].items():
        lines.append(
            f"| {stage} | {seconds:.3f} | {seconds / n * 1000:.1f} | {b['grouped_share'][stage]:.1%} |"
        )
    lines += [
        "",
        "| case | plain jit+run ms | check ms | ratio |",
        "|---|---|---|---|",
    ]
    for case in b["cases"]:
        m = b["per_case_median_s"][case]
        lines.append(
            f"| {case} | {_ms(m['plain jit+run'])} | {_ms(m['jaxport.check (end to end)'])} "
            f"| {b['per_case_check_over_plain'][case]:.2f} |"
        )
    return lines


def scale(results: dict[str, Any]) -> list[str]:
    s = results.get("scale")
    if not s or "rows" not in s:
        return []
    lines = [
        "| form | mode | layers | static ops | call-weighted ops | trace ms | lower (cpu) ms "
        "| read_program ms | census ms | **census / lower** | census, fresh classifier ms "
        "| fresh / lower | (read+census) / lower |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["rows"]:
        fresh = r.get("census (fresh classifier)")  # absent from results before 2026-11-30
        fresh_cells = "n/a | n/a" if fresh is None else f"{_ms(fresh)} | {fresh / r['lower']:.1%}"
        lines.append(
            f"| {r['form']} | {r['mode']} | {r['layers']} | {r['static_ops']} "
            f"| {r['weighted_ops']} | {_ms(r['trace'])} | {_ms(r['lower'])} "
            f"| {_ms(r['read_program'])} | {_ms(r['census'])} "
            f"| **{r['census_share_of_lower']:.1%}** | {fresh_cells} "
            f"| {r['read_census_share_of_lower']:.1%} |"
        )
    lines += [
        "",
        "| form | mode | census time per 2x ops (fit, wall) | (fit, CPU) | read_program "
        "| lower | census time 48 / 6 layers | ops 48 / 6 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in s["linearity"]:
        lines.append(
            f"| {e['form']} | {e['mode']} | {_f(e['census_fit_per_2x_ops'])} "
            f"| {_f(e['census [cpu]_fit_per_2x_ops'])} | {_f(e['read_program_fit_per_2x_ops'])} "
            f"| {_f(e['lower_fit_per_2x_ops'])} | {e['census_time_ratio_last_over_first']:.2f} "
            f"| {e['ops_ratio_last_over_first']:.2f} |"
        )
    return lines


def whatif(results: dict[str, Any]) -> list[str]:
    w = results.get("whatif")
    if not w or "median_s" not in w:
        return []
    pairs = [
        ("lower cuda, rocm, tpu separately", "lower cuda+rocm+tpu in one multi-platform module"),
        ("read_program cpu", "lean read cpu"),
        ("census cpu", "lazy census on lean read cpu"),
        ("read_program cuda", "lean read cuda"),
        ("census cuda", "lazy census on lean read cuda"),
    ]
    lines = [
        "| subject | now → what-if (ms) | | | | | jaxpr-hash key ms | same census |",
        "|---|---|---|---|---|---|---|---|",
        "| | 3 lowerings → 1 multi-platform | read cpu → lean | census cpu → lazy "
        "| read cuda → lean | census cuda → lazy | | |",
    ]
    for subject, m in w["median_s"].items():
        cells = [f"{_ms(m[a])} → {_ms(m[b])} ({m[a] / m[b]:.1f}x)" for a, b in pairs]
        same = all(v for k, v in w["same_census"].items() if k.startswith(subject + " "))
        key = m.get("cache key: sha256 of the jaxpr text")
        lines.append(
            f"| {subject} | " + " | ".join(cells) + f" | {_ms(key) if key else 'n/a'} | {same} |"
        )
    return lines


def _counts(values: list[Any]) -> str:
    """``0`` when every repetition printed 0, ``11`` when all 11, else the list."""
    if not values or all(v is None for v in values):
        return "–"
    return str(values[0]) if len(set(values)) == 1 else "/".join(str(v) for v in values)


def compiled_cuda(results: dict[str, Any]) -> list[str]:
    c = results.get("compiled_cuda")
    if not c:
        return []
    versions = ", ".join(f"{k} {v}" for k, v in c.get("plugin_versions", {}).items() if v)
    lines = [
        f"Deviceless CUDA compile against the `{c.get('target')}` description "
        f"({versions}; JAX_PLATFORMS={c.get('JAX_PLATFORMS')}; "
        + ", ".join(f"{k}: {v}" for k, v in c.get("toolchain", {}).items() if "version" in k and v)
        + ").",
        "",
    ]
    s = c.get("suite") or {}
    if "error" in s:
        lines += [f"suite: {s['error']}", ""]
    elif "medians" in s:
        m, cache = s["medians"], s["cache"]
        lines += [
            f"Generated suite, {s['tests']} tests, {s['reps']} interleaved reps (medians):",
            "",
            "| side | cold wall s | cold CPU s | warm wall s | warm CPU s | warm / cold (cpu) "
            "| compiled cache hits / misses, cold | warm | lowered cache hits / misses, cold "
            "| warm |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        labels = {
            "plain": "plain `jit` (`-p no:jaxport -p jaxport_plain`)",
            "default": "jaxport default (lowered only)",
            "cuda": "jaxport `--jaxport-compile=cuda`",
        }
        for side, label in labels.items():
            cold, warm = m[f"{side}_cold"], m[f"{side}_warm"]
            r = s["ratios"][f"{side} warm/cold"]
            cells = []
            for level in ("compiled", "lowered"):
                for state in ("cold", "warm"):
                    got = cache.get(f"{side}_{state}", {})
                    hits, misses = got.get(f"{level}_hits"), got.get(f"{level}_misses")
                    cells.append("–" if hits is None else f"{_counts(hits)} / {_counts(misses)}")
            lines.append(
                f"| {label} | {cold['wall_s']:.2f} | {cold['cpu_s']:.2f} | {warm['wall_s']:.2f} "
                f"| {warm['cpu_s']:.2f} | {r['wall']:.3f} ({r['cpu']:.3f}) | "
                + " | ".join(cells)
                + " |"
            )
        lines += [
            "",
            "| ratio | **cold** wall (CPU, paired) | added / test, cold | **warm** wall (CPU, "
            "paired) | added / test, warm |",
            "|---|---|---|---|---|",
        ]
        for a, b in (("default", "plain"), ("cuda", "plain"), ("cuda", "default")):
            cells = []
            for state in ("cold", "warm"):
                r = s["ratios"][f"{a}/{b} {state}"]
                cells.append(
                    f"**{r['wall']:.3f}** ({r['cpu']:.3f}, {r['paired_wall_median']:.3f}) "
                    f"| {s['added_per_test_ms'][f'{a}-{b} {state}']:.0f} ms"
                )
            lines.append(f"| {a} / {b} | " + " | ".join(cells) + " |")
        if s.get("failed_sessions"):
            lines += ["", "Sessions with failures: " + "; ".join(s["failed_sessions"])]
        lines.append("")
    f = c.get("fixed_costs_s") or {}
    if "median_s" in f:
        lines += [
            "Per process (fresh interpreter, median of 3; a session pays these once):",
            "",
            "| step | ms |",
            "|---|---|",
        ]
        lines += [f"| {k} | {_ms(v)} |" for k, v in f["median_s"].items()]
        lines.append("")
    p = c.get("per_case") or {}
    if "error" in p:
        lines.append(f"per case: {p['error']}")
    elif "median_s" in p:
        n = len(p["cases"])
        t = p["total_s"]
        lines += [
            f"Per case, in-process ({n} cases x {p['reps']} reps, medians; `jax.clear_caches()` "
            f"before each): a deviceless CUDA compile is **{p['cuda_compile_over_cpu_compile_total']:.2f}x** "
            f"the cpu compile of the same function (CPU time "
            f"{p['cuda_compile_over_cpu_compile_total_cpu']:.2f}x); `lowering.compile_deviceless` "
            f"end to end **{p['e2e_per_check_ms']:.0f} ms per check** on a cache miss, "
            f"**{p['hit_per_check_ms']:.1f} ms** on a hit (key + read + census).",
            "",
            "| case | cpu lower ms | cpu compile ms | cuda lower ms | **cuda compile ms** "
            "| cuda / cpu compile (CPU time) | cuda text+parse+census+put ms | compile_deviceless e2e ms "
            "| cache hit ms | compiled sites cpu / cuda |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        from_stage = {
            "cpu lower": "cpu: trace+lower",
            "cpu compile": "cpu: compile",
            "cuda lower": "cuda: trace+lower (deviceless)",
            "cuda compile": "cuda: compile (deviceless)",
            "cuda census": "cuda: HLO text+parse+census+cache put",
            "e2e": "cuda: lowering.compile_deviceless (end to end)",
            "hit": "cuda: cache hit (key+get+census)",
        }

        def row(label: str, get: Any, ratio: float, ratio_cpu: float, sites: str) -> str:
            cells = [_ms(get(from_stage[k])) for k in ("cpu lower", "cpu compile", "cuda lower")]
            return (
                f"| {label} | "
                + " | ".join(cells)
                + f" | **{_ms(get(from_stage['cuda compile']))}** "
                f"| {ratio:.2f} ({ratio_cpu:.2f}) | {_ms(get(from_stage['cuda census']))} "
                f"| {_ms(get(from_stage['e2e']))} | {_ms(get(from_stage['hit']))} | {sites} |"
            )

        for case in p["cases"]:
            site = p["compiled_sites"].get(case, {})
            lines.append(
                row(
                    case,
                    p["median_s"][case].__getitem__,
                    p["cuda_compile_over_cpu_compile"][case],
                    p["median_cpu_s"][case][from_stage["cuda compile"]]
                    / p["median_cpu_s"][case][from_stage["cpu compile"]],
                    f"{site.get('cpu compiled sites')} / {site.get('cuda compiled sites')}",
                )
            )
        lines.append(
            row(
                f"**total ({n})**",
                t.__getitem__,
                p["cuda_compile_over_cpu_compile_total"],
                p["cuda_compile_over_cpu_compile_total_cpu"],
                "",
            )
        )
    return lines


def verdicts(results: dict[str, Any]) -> list[str]:
    if not results.get("verdicts"):
        return []
    lines = ["| target | measured | verdict |", "|---|---|---|"]
    for name, v in results.get("verdicts", {}).items():
        shown = {k: val for k, val in v.items() if k != "pass"}
        lines.append(f"| {name} | {shown} | {'PASS' if v['pass'] else 'FAIL'} |")
    return lines


def machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    v = m["versions"]
    return [
        f"{m['date']}, {m['nproc']} CPUs ({m['processor']}), {m['platform']}, Python "
        f"{m['python']}, jax {v['jax']}, jaxlib {v['jaxlib']}, pytest {v['pytest']}, "
        f"load average {m['loadavg_start'][0]:.1f} at start / {m['loadavg_end'][0]:.1f} at end, "
        f"{results['elapsed_s']:.0f} s for the run, git {m['git_head'][:10]} "
        f"(+{m['git_dirty_files']} uncommitted files)."
    ]


def main(paths: list[str]) -> None:
    for path in paths:
        results = json.loads(Path(path).read_text())
        print(f"### {path}\n")
        for title, part in (
            ("machine", machine),
            ("suite overhead", suites),
            ("per-check breakdown", breakdown),
            ("scale", scale),
            ("what-if", whatif),
            ("compiled level, deviceless CUDA", compiled_cuda),
            ("targets", verdicts),
        ):
            body = part(results)
            if body:
                print(f"#### {title}\n")
                print("\n".join(body))
                print()


if __name__ == "__main__":
    main(sys.argv[1:])
