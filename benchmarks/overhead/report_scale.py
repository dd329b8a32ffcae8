"""Benchmark the report at suite scale: building and rendering it at 2,000 tests.

Usage::

    python -m benchmarks.overhead.report_scale [--tests 2000] [--reps 5] [--folder DIR]
        [--output benchmarks/results/report-scale-2cpu.json]

1. Writes the generated suite of ``report_suite.py`` (``--tests`` portable tests: passing
   and parametrized, about 5 % over a cuDNN budget, a few that do not lower, a few that raise
   or check nothing) and runs it once for real: ``python -m pytest -p no:cacheprovider
   --jaxport-report=report.json`` (wall and CPU time of the whole session). ``--folder`` keeps
   the project and reuses a finished run.
2. In this process, times each step the session does at the end of a run, ``--reps`` times
   interleaved (medians): the summary (counts, hotspots), the three numbers (runtime share,
   kernels to rewrite, days), the view, and the terminal, Markdown, HTML and JSON renderings;
   plus ``report.load`` of the written file (what ``jaxport show`` pays).
3. Records the sizes (terminal lines, Markdown characters, HTML and JSON bytes) and opens
   the HTML in headless Chromium (``scripts/screenshot_report.py --first-screen``): load
   time, page height, where the problems start.

Timings on a shared machine are noisy: read the share of the suite's time, not the
milliseconds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import REPO as ROOT
from benchmarks import RESULTS
from benchmarks.corpora import report_suite

DEFAULT_OUTPUT = RESULTS / "report-scale-2cpu.json"


def run_suite(folder: Path, tests: int) -> dict[str, Any]:
    """Write and run the suite (unless ``folder`` holds a finished run): times and outcome."""
    done_file = folder / "run.json"
    if done_file.is_file():
        return dict(json.loads(done_file.read_text()), reused=True)
    if folder.exists():
        shutil.rmtree(folder)
    counts = report_suite.write_suite(folder, tests)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--jaxport-report=report.json"],
        cwd=folder, env={**os.environ, "JAX_PLATFORMS": "cpu", "COLUMNS": "100"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    section = proc.stdout.split(" jaxport portability report ", 1)[-1]
    result = {
        "tests": sum(counts.values()),
        "mix": counts,
        "returncode": proc.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "summary_line": proc.stdout.strip().splitlines()[-1],
        "terminal_section": section.split("\n=", 1)[0].strip("= \n"),
    }
    done_file.write_text(json.dumps(result))
    return result


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def time_steps(report_path: Path, reps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each end-of-session step, timed ``reps`` times in turn; medians and the outputs."""
    from pytest_jaxport.model.cost import CostModel
    from pytest_jaxport.report.files import load
    from pytest_jaxport.report.summary import Pricing, probes_of, suite_numbers, suite_summary
    from pytest_jaxport.view.display import DisplayOptions
    from pytest_jaxport.view.html import render_html
    from pytest_jaxport.view.markdown import render_markdown
    from pytest_jaxport.view.text import render_text
    from pytest_jaxport.view.viewmodel.build import build_view

    loaded = load(report_path)  # a typed Report: the steps below count its typed tests
    report = loaded.to_dict()
    numbers = loaded.summary.numbers
    model = numbers.cost_model if numbers is not None and numbers.cost_model else CostModel()
    pricing = Pricing(migrate_to=loaded.config.migrate_to or (), model=model)
    view = build_view(loaded)
    options = DisplayOptions()
    steps: dict[str, Callable[[], Any]] = {
        "summary (counts, hotspots)": lambda: suite_summary(loaded.tests),
        "three numbers (share, rewrite, days)": lambda: suite_numbers(
            probes_of(loaded.tests), pricing
        ),
        "view": lambda: build_view(loaded),
        "terminal text": lambda: render_text(view, options, written_to="report.json"),
        "markdown": lambda: render_markdown(view, options),
        "html": lambda: render_html(view, options),
        "json (as written)": lambda: json.dumps(report),
        "load (jaxport show)": lambda: load(report_path),
    }
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for rep in range(reps):
        order = list(steps) if rep % 2 == 0 else list(reversed(steps))
        for name in order:
            started = time.perf_counter()
            steps[name]()
            samples[name].append(time.perf_counter() - started)
    medians = {name: _median_ms(s) for name, s in samples.items()}
    outputs = {
        "terminal": render_text(view, options),
        "terminal_written": render_text(view, options, written_to="report.json"),
        "markdown": render_markdown(view, options),
        "html": render_html(view, options),
        "json": json.dumps(report),
    }
    return medians, outputs


def first_screen(html: str) -> dict[str, Any] | None:
    """Chromium's load time and what the first screen shows; ``None`` without Chromium."""
    if shutil.which("chromium") is None and not os.environ.get("CHROMIUM"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "screenshot_report.py"), "--first-screen",
             str(page), "#problems", "#problems .group", "#numbers", "#hotspots", "#matrix"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": version("jax"),
        "jaxlib": version("jaxlib"),
        "pytest": version("pytest"),
        "git": git("rev-parse", "--short", "HEAD"),
        "dirty": git("status", "--porcelain").splitlines(),
        "load_average_start": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--folder", type=Path, default=None, help="keep (and reuse) the suite here")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    results: dict[str, Any] = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="jaxport-report-scale-") as tmp:
        folder = args.folder or Path(tmp) / "suite"
        print(f"report_scale: running the {args.tests}-test suite in {folder}", flush=True)
        suite = run_suite(folder, args.tests)
        results["suite"] = suite
        medians, outputs = time_steps(folder / "report.json", args.reps)
    steps_ms = sum(medians[k] for k in medians if k != "load (jaxport show)")
    results["steps_ms"] = medians
    results["end_of_session_ms"] = round(steps_ms, 1)
    results["share_of_suite"] = round(steps_ms / 1000 / suite["wall_s"], 5)
    terminal = outputs["terminal"].splitlines()
    results["sizes"] = {
        "terminal_lines": len(terminal),
        "terminal_lines_written_to_file": len(outputs["terminal_written"].splitlines()),
        "terminal_widest": max(len(line) for line in terminal),
        "markdown_chars": len(outputs["markdown"]),
        "html_bytes": len(outputs["html"].encode()),
        "json_bytes": len(outputs["json"].encode()),
    }
    results["chromium"] = first_screen(outputs["html"])
    results["machine"]["load_average_end"] = os.getloadavg()[0]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: results[k] for k in ("steps_ms", "end_of_session_ms", "share_of_suite",
                                                "sizes", "chromium")}, indent=2))  # fmt: skip
    print(f"report_scale: suite {suite['wall_s']} s wall, {suite['cpu_s']} s CPU; "
          f"wrote {args.output}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
