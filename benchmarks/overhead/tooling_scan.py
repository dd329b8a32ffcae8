"""Benchmark the fifth layer's scan (``pytest_jaxport.model.tooling``) on large real trees.

Usage::

    python -m benchmarks.overhead.tooling_scan /path/to/site-packages [more roots...] \\
        [--runs 5] [--output benchmarks/results/tooling_scan.json]

Each root is scanned ``--runs`` times in this process (the first run warms the OS file
cache, like a second ``pytest --jaxport-report`` would); the median wall-clock and CPU times
are reported (CPU time is the steadier number on a busy machine). Nothing is copied: the
roots are scanned where they are.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks import RESULTS
from pytest_jaxport.model.tooling import assumptions_per_rule, scan_tree

DEFAULT_OUTPUT = RESULTS / "tooling_scan.json"


def _tree_size(root: Path) -> tuple[int, int]:
    """Every regular file under ``root`` and their bytes, skipping nothing."""
    files = 0
    size = 0
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                files += 1
                size += os.path.getsize(path)
    return files, size


def bench(root: Path, runs: int) -> dict[str, Any]:
    """Scan ``root`` ``runs`` times and describe the median run."""
    seconds: list[float] = []
    cpu_seconds: list[float] = []
    result = None
    for _ in range(runs):
        start, cpu_start = time.perf_counter(), time.process_time()
        result = scan_tree(root)
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu_start)
    assert result is not None
    median = statistics.median(seconds)
    files_in_tree, bytes_in_tree = _tree_size(root)
    return {
        "root": str(root),
        "source": result.source,
        "files_in_tree": files_in_tree,
        "bytes_in_tree": bytes_in_tree,
        "files_listed": result.files_listed,
        "files_read": result.files_read,
        "assumptions": len(result.assumptions),
        "by_rule": assumptions_per_rule(result.assumptions),
        "runs": runs,
        "seconds_each": [round(s, 4) for s in seconds],
        "seconds_median": round(median, 4),
        "cpu_seconds_median": round(statistics.median(cpu_seconds), 4),
        "files_in_tree_per_s": round(files_in_tree / median),
        "files_listed_per_s": round(result.files_listed / median),
        "files_read_per_s": round(result.files_read / median),
    }


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, help="trees to scan")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    results = [bench(root, args.runs) for root in args.roots]
    report = {
        "benchmark": "pytest_jaxport.model.tooling.scan_tree",
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(f"{args.output.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, args.output)
    for entry in results:
        print(
            f"{entry['root']}: {entry['files_in_tree']} files in tree, "
            f"{entry['files_listed']} listed, {entry['files_read']} read, "
            f"{entry['assumptions']} assumptions, median {entry['seconds_median']:.3f} s "
            f"(CPU {entry['cpu_seconds_median']:.3f} s), "
            f"{entry['files_listed_per_s']} listed files/s, over {entry['runs']} runs"
        )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
