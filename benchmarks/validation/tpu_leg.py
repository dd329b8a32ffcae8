"""The project's own tests on a TPU host: the TPU leg, run through the device tool.

    python -m benchmarks.validation.tpu_leg prepare /work/main/.dev-NAME  # here: what the call carries
    run(command="python3 .dev-NAME/tpu_leg.py run .dev-NAME", carry=[".dev-NAME"])  # the device
    python -m benchmarks.validation.tpu_leg record OUT_DIR [--name v5e]   # here: its outcome recorded

CI has no accelerator; a TPU host is lent through the device tool (``run``), which sends
one checkout and brings back what the command writes under ``$OUT``. ``prepare`` fills a
folder of that checkout which git ignores (``.dev-*``) with everything the call needs: this
checkout's wheel and tests (a tar of the working tree), the wheels the TPU host lacks
(absl-py, pytest-xdist, execnet) and this script. ``run``, on the TPU host (standard library
only until it has installed them), runs :data:`FILES` in one process on the chip (a TPU
admits one; every process a test starts is pinned to the CPU by ``tests/conftest.py``), with
``-v`` and a JUnit XML report, and writes ``$OUT/tpu-leg.log`` and ``tpu-leg.xml``. ``record``
reads them back: each test's outcome, the failures' first lines, and where the process died
if it did (the last test started), into ``benchmarks/results/tpu-leg-<name>.json`` and ``.md``.

It imports nothing of the ``benchmarks`` package: ``run`` runs on the TPU host as a copy of
this file, beside the call's wheels, before anything is installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
"""The repository's root (``prepare`` and ``record`` run in this checkout)."""
FILES = (
    "tests/test_numerics.py",
    "tests/test_emulated_checks.py",
    "tests/test_plugin.py",
    "tests/test_examples.py",
    "tests/test_home.py",
)
"""The TPU leg's selection: the numerics, emulation, plugin, example and home tests."""
WHEELS = ("absl-py", "pytest-xdist", "execnet")
"""What the TPU host's Python lacks for them (its own JAX, libtpu, pytest stay)."""
LIMIT_S = 540
"""The tests' limit: a device call runs at most 10 minutes."""

_REPORTED = re.compile(r"^(tests/\S+::\S+(?:\[.*?\])?) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")
_STARTED = re.compile(r"^(tests/\S+::\S+(?:\[.*?\])?) ?$")


# -- prepare (here) ------------------------------------------------------------------------------


def prepare(folder: Path) -> int:
    """The call's folder: the wheel, the working tree's tests, the missing wheels, this script."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    python = sys.executable
    subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(folder)],
                   check=True)  # fmt: skip
    subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    *WHEELS, "-d", str(folder)], check=True)  # fmt: skip
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    with tarfile.open(folder / "checkout.tar", "w") as tar:
        for name in tracked:
            if (REPO / name).is_file():
                tar.add(REPO / name, arcname=name)
    shutil.copy(Path(__file__), folder / "tpu_leg.py")
    print(
        f"prepared {folder}: carry it, and run: python3 {folder.name}/tpu_leg.py run {folder.name}"
    )
    return 0


# -- run (on the TPU host) -----------------------------------------------------------------------


def run(folder: Path, out: Path, *, limit: float = LIMIT_S, tests: Sequence[str] = ()) -> int:
    """Install, then the tests (``tests``, or :data:`FILES`) in one process on the chip; the
    log and JUnit XML to ``out``."""
    base = Path("/tmp/jaxport-tpu-leg")
    site, checkout = base / "site", base / "checkout"
    checkout.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PIP_CONFIG_FILE="/dev/null", PYTHONUNBUFFERED="1")
    subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "-q", "--no-index",
                    "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
                    *map(str, sorted(folder.glob("*.whl")))], env=env, check=True)  # fmt: skip
    with tarfile.open(folder / "checkout.tar") as tar:
        tar.extractall(checkout, filter="data")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(site)]))
    env.pop("JAX_PLATFORMS", None)  # the chip: tpu first
    out.mkdir(parents=True, exist_ok=True)
    log = out / "tpu-leg.log"
    # --capture=sys: what the process prints at the C level (libtpu's fatal errors, the
    # faulthandler's traceback) reaches the log even when the process dies mid-test.
    command = [sys.executable, "-m", "pytest", "-v", "-rA", "--capture=sys",
               "-p", "no:cacheprovider", "-p", "no:randomly", "-o",
               "console_output_style=classic", f"--junitxml={out / 'tpu-leg.xml'}", *(tests or FILES)]  # fmt: skip
    with log.open("w", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        try:
            done = subprocess.run(command, cwd=checkout, env=env, stdout=handle,
                                  stderr=subprocess.STDOUT, timeout=limit)  # fmt: skip
            code: int | None = done.returncode
        except subprocess.TimeoutExpired:
            code = None
        handle.write(f"\n[exit {code}]\n")
    print(f"tpu leg: exit {code}; wrote {log}")
    return 0 if code == 0 else 1


# -- record (here) -------------------------------------------------------------------------------


def outcomes(log_text: str) -> tuple[dict[str, str], str | None, int | None]:
    """Each reported test's outcome in a ``pytest -v`` log, the test that was running when
    the process ended without reporting it (an abort), and the exit code the log ends with.

    >>> outcomes("tests/a.py::t PASSED\\ntests/a.py::u \\n[exit -6]\\n")
    ({'tests/a.py::t': 'passed'}, 'tests/a.py::u', -6)
    """
    reported: dict[str, str] = {}
    started: str | None = None
    for line in log_text.splitlines():
        found = _REPORTED.match(line)
        if found:
            reported[found.group(1)] = found.group(2).lower()
            started = None
            continue
        begun = _STARTED.match(line)
        if begun and begun.group(1) not in reported:
            started = begun.group(1)
    exits = re.findall(r"^\[exit (-?\d+|None)\]$", log_text, re.M)
    code = int(exits[-1]) if exits and exits[-1] != "None" else None
    return reported, started, code


def failures(xml_path: Path) -> dict[str, str]:
    """Each failed or errored test's first line of its message, from the JUnit XML."""
    if not xml_path.is_file():
        return {}
    found = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            element = case.find(kind)
            if element is not None:
                name = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
                message = (element.get("message") or element.text or "").strip().splitlines()
                found[name] = message[0][:300] if message else kind
    return found


def record(out: Path, name: str, *, results: Path, note: str = "") -> int:
    log = out / "tpu-leg.log"
    reported, died_in, code = outcomes(log.read_text(encoding="utf-8"))
    counts: dict[str, int] = {}
    for outcome in reported.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    data: dict[str, Any] = {
        "about": "benchmarks/validation/tpu_leg.py: the project's tests on a TPU host, in one process "
        "on the chip",
        "recorded": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "files": list(FILES),
        "exit": code,
        "counts": counts,
        "aborted_in": died_in,
        "failures": failures(out / "tpu-leg.xml"),
        "tests": reported,
    }
    if note:
        data["note"] = note
    results.mkdir(parents=True, exist_ok=True)
    (results / f"tpu-leg-{name}.json").write_text(json.dumps(data, indent=1) + "\n", "utf-8")
    lines = [
        f"## The TPU leg ({name})",
        "",
        f"{', '.join(FILES)} in one process on the chip: exit {code}; "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
        "",
    ]
    if note:
        lines += [note, ""]
    if died_in:
        lines += [f"The process died while `{died_in}` ran (no outcome reported).", ""]
    for test, message in data["failures"].items():
        lines.append(f"- `{test}`: {message}")
    (results / f"tpu-leg-{name}.md").write_text("\n".join(lines) + "\n", "utf-8")
    print(f"recorded {results / f'tpu-leg-{name}.json'}: exit {code}, {counts}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prepare", help="fill the call's folder (here)").add_argument(
        "folder", type=Path
    )
    running = commands.add_parser("run", help="the tests on the chip (on the TPU host)")
    running.add_argument("folder", type=Path)
    running.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    running.add_argument("--limit", type=float, default=LIMIT_S, help=argparse.SUPPRESS)
    running.add_argument("--test", action="append", default=[], dest="tests", metavar="ID",
                         help="a test (file or node id) to run instead of the leg's files")  # fmt: skip
    recording = commands.add_parser("record", help="record what a call brought back (here)")
    recording.add_argument("out", type=Path)
    recording.add_argument("--name", default="v5e")
    recording.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    recording.add_argument("--note", default="", help="how the run was made, in words")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.folder)
    if args.command == "run":
        return run(args.folder.resolve(), args.out, limit=args.limit, tests=args.tests)
    return record(args.out, args.name, results=args.results, note=args.note)


if __name__ == "__main__":
    sys.exit(main())
