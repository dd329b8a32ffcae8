"""One validation run for every accelerator: the harness the legs ``gpu.py`` (an NVIDIA GPU)
and ``tpu.py`` (a TPU) share.

An accelerator is lent rarely and briefly (minutes, one device, no internet), so a run is one
prepared command: its parts run one after another, each as a child process under its own time
limit and all within the run's budget, and the results (``<accelerator>-validation-<name>
.json`` and ``.md``, plus a log) are written after every part, so a part that fails or runs
out of time leaves what the others measured. Each accelerator's script names its parts:

- the **device description** (a GPU's ``jaxport capture-target``; a TPU's own peak rates and
  memory) against what the plugin assumes;
- the **demo** (``examples/demo``) with the device executed: outcomes, numerics against cpu,
  the measured share;
- **fidelity** (``benchmarks/fidelity/run.py``): counts, the measured share against the
  estimates (the error band a report prints without the device), numerics;
- **emulation** against the chip (a TPU: the emulation's own ``emulation_chip.py``);
- **overhead**: the plugin against plain ``jax.jit``, and ``--jaxport-audit`` against none.

``--dry-run`` runs the same on a machine without the device (CI does): every device column
says "not measured: no GPU" (or TPU). ``docs/gpu-validation.md`` says how to run each.

A leg names its accelerator (:class:`Accelerator`), its parts' handlers and its Markdown;
the flow is here: the command line (:func:`main`), the environment and the parts under their
limits (:func:`orchestrate`), the parts run as child processes (``python -m <leg> --part
PART``, from the repository's root).

Standard library only at import (the run's own interpreter may lack JAX until set up).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform as platform_module
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import REPO, RESULTS

DEMO = REPO / "examples" / "demo"
ESTIMATE_ERRORS = REPO / "pytest_jaxport" / "estimate_error.json"

SCHEMA_VERSION = 1
MIN_BAND_PROGRAMS = 10
"""An error band needs at least this many measured programs to be adopted."""


class Unusable(Exception):
    """A problem the person running the script must fix; the message says how."""


def log(message: str, *, who: str = "validation") -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {who}: {message}", flush=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """How much each part does: on the device, in a dry run, and in a ``--quick`` smoke run."""

    demo_args: tuple[str, ...]
    """Extra pytest arguments for the demo (a selection in a smoke run)."""
    fidelity_args: tuple[str, ...]
    """fidelity.py's slice of the corpus and its profiling time."""
    overhead_reps: int
    overhead_cases: int
    """How many of ``run.QUICK_CASES`` the overhead suites have."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Accelerator:
    """What one accelerator's validation run is: its platform, its parts and their limits."""

    platform: str
    """The platform it executes (``cuda``, ``tpu``)."""
    word: str
    """The device in words, as its columns say it (``GPU``, ``TPU``)."""
    module: str
    """Its leg's module (``benchmarks.validation.gpu``): the parts' child processes run it."""
    parts: tuple[str, ...]
    limits: Mapping[str, float]
    """Each part's own time limit in seconds (``environment`` included)."""
    budget_s: float
    versions: tuple[str, ...]
    """The distributions whose versions a run records."""
    sizes: Mapping[str, Sizes]
    """How much each part does: on the device (``word.lower()``), ``dry-run`` and ``quick``."""
    env: Mapping[str, str]
    """Set for the run's parts where the environment does not set them already."""
    keeps_platforms: tuple[str, ...] = ()
    """``JAX_PLATFORMS`` values a run on the device keeps (any other would hide the device)."""
    about: str
    """What a run's results are (their ``about``)."""

    @property
    def not_measured(self) -> str:
        """What every device column says where the device did not run."""
        return f"not measured: no {self.word}"

    @property
    def results_prefix(self) -> str:
        """``gpu-validation``: the results' file names start with it, and its messages."""
        return f"{self.word.lower()}-validation"


@dataclass(frozen=True, slots=True, kw_only=True)
class Validation:
    """One validation run: where its parts run and write."""

    python: str
    env: Mapping[str, str]
    out_dir: Path
    name: str
    logfile: Path
    on_device: bool
    """Whether JAX sees the device (else every device column says ``not measured``)."""
    device: str | None
    """The device's kind as JAX names it (``NVIDIA H200``, ``TPU v5 lite``)."""
    target: str | None
    sizes: Sizes

    def limited(
        self, command: Sequence[str], limit: float, cwd: Path = REPO
    ) -> tuple[int | None, float]:
        """:func:`run_limited` with this run's log and environment."""
        return run_limited(command, limit, self.logfile, self.env, cwd)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` so that a reader (or a kill) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


# -- running a part under a limit -------------------------------------------------------------


def run_limited(
    command: Sequence[str], limit: float, logfile: Path, env: Mapping[str, str], cwd: Path
) -> tuple[int | None, float]:
    """Run ``command`` (its output appended to ``logfile``) for at most ``limit`` seconds:
    ``(exit code, seconds)``, the code ``None`` where it was stopped at the limit. The whole
    process group is stopped, so nothing it started runs on into the next part."""
    started = time.monotonic()
    with logfile.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        child = subprocess.Popen(
            list(command), cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            code: int | None = child.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
                try:
                    os.killpg(child.pid, sig)
                    child.wait(timeout=grace)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
            code = None
            out.write(f"\n[stopped at the part's limit of {limit:.0f} s]\n")
    return code, round(time.monotonic() - started, 1)


def parse_limits(values: Sequence[str], limits: Mapping[str, float]) -> dict[str, float]:
    """``--limit demo=60`` -> ``{"demo": 60.0}``; :class:`Unusable` naming a bad value."""
    parsed = {}
    for value in values:
        part, _, seconds = value.partition("=")
        try:
            parsed[part] = float(seconds)
        except ValueError:
            parsed[part] = -1.0
        if part not in limits or parsed[part] <= 0:
            raise Unusable(
                f"--limit {value!r}: expected PART=SECONDS with PART one of "
                f"{', '.join(limits)} and SECONDS a positive number"
            )
    return parsed


def add_run_options(parser: argparse.ArgumentParser, accelerator: Accelerator) -> None:
    """The options every accelerator's leg takes."""
    word = accelerator.word
    parser.add_argument("--dry-run", action="store_true",
                        help=f"no {word}: JAX on cpu, a slice of the corpus; the {word} "
                        f"columns say {accelerator.not_measured!r}")  # fmt: skip
    parser.add_argument("--out-dir", type=Path, default=RESULTS,
                        help="where the results go (default benchmarks/results)")  # fmt: skip
    parser.add_argument("--name", help=f"results file name part (default: the {word}, e.g. "
                        f"{'h200' if accelerator.platform == 'cuda' else 'v5e'})")  # fmt: skip
    parser.add_argument("--budget", type=float, default=accelerator.budget_s,
                        help=f"seconds for the whole run ({accelerator.budget_s:.0f})")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run (the test suite's): two demo tests, one fidelity "
                        "program, one overhead case")  # fmt: skip
    parser.add_argument("--limit", action="append", default=[], metavar="PART=SECONDS",
                        help="change a part's own time limit (default: "
                        + ", ".join(f"{k}={v:g}" for k, v in accelerator.limits.items()) + ")")  # fmt: skip
    parser.add_argument("--parts", default=",".join(accelerator.parts),
                        help=f"comma-separated subset of {','.join(accelerator.parts)}")  # fmt: skip
    # A part run as its own process (by the run itself, under its limit).
    parser.add_argument("--part", choices=("environment", "overhead", "device"),
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--part-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--cases", type=int, default=1, help=argparse.SUPPRESS)


def chosen_parts(args: argparse.Namespace, accelerator: Accelerator) -> list[str]:
    """The parts ``--parts`` asks for, in the accelerator's order; :class:`Unusable` for one
    it does not have."""
    asked = [p for p in args.parts.split(",") if p]
    unknown = set(asked) - set(accelerator.parts)
    if unknown:
        raise Unusable(
            f"--parts: unknown {sorted(unknown)}; choose from {', '.join(accelerator.parts)}"
        )
    return [p for p in accelerator.parts if p in asked]


# -- 0. the environment, seen from JAX (a child process) ---------------------------------------


def environment_part(
    out: Path,
    *,
    platform: str,
    versions: Sequence[str],
    extra: Callable[[], Mapping[str, Any]] | None = None,
) -> None:
    """Child process: what JAX sees here (written as JSON to ``out``); where ``platform`` is
    not present, why not in JAX's words (``<platform>_error``): the first thing to read."""
    import importlib.metadata as metadata

    from pytest_jaxport._jax.devices import device_kind, present_platforms

    present = present_platforms()
    error = None
    if platform not in present:
        import jax

        try:
            jax.devices(platform)
        except Exception as e:  # JAX raises RuntimeError or its own types here
            error = f"{type(e).__name__}: {e}"[:1000]
    found = {}
    for name in versions:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    write_atomic(
        out,
        json.dumps(
            {
                "python": sys.version.split()[0],
                "versions": found,
                "present_platforms": list(present),
                "devices": {p: device_kind(p) for p in present},
                **(extra() if extra else {}),
                f"{platform}_error": error,
                "jax_platforms": os.environ.get("JAX_PLATFORMS", ""),
            }
        ),
    )


# -- the demo (pytest on examples/demo, then its report, pure) ----------------------------------


def run_demo(
    validation: Validation,
    limit: float,
    *,
    accelerator: Accelerator,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """The demo under pytest with the plugin's report (``extra``: more options), its report
    summarised for the accelerator's platform (:func:`summarize_demo`)."""
    import shutil

    report = validation.out_dir / f"demo-report-{validation.name}.json"
    report.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="jaxport-validation-demo-") as tmp:
        folder = Path(tmp) / "demo"
        shutil.copytree(
            DEMO, folder,
            ignore=shutil.ignore_patterns(".pytest_cache", "__pycache__", "*.json", "*.md"),
        )  # fmt: skip
        command = [
            validation.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            f"--jaxport-report={report}", *validation.sizes.demo_args, *extra,
        ]  # fmt: skip
        code, seconds = validation.limited(command, limit, folder)
    data = read_json(report)
    out: dict[str, Any] = {"seconds": seconds, "command": " ".join(command[1:]), "exit": code}
    if data is None:
        out["status"] = "timed out" if code is None else "failed"
        out["error"] = "no report written (see the log)"
        return out
    summary = summarize_demo(
        data,
        accelerator=accelerator,
        on_device=validation.on_device,
        compiled_at="device" if validation.on_device else "deviceless",
    )
    out.update(status="done", report=report.name, **summary)
    return out


def _numerics(
    numerics: Mapping[str, Any] | None, entry: Mapping[str, Any], accelerator: Accelerator,
    on_device: bool,
) -> Any:  # fmt: skip
    if not on_device:
        return accelerator.not_measured
    if numerics is None:
        return "not compared: " + str(
            entry.get("execution_error")
            or entry.get("compile_error")
            or f"{accelerator.platform} did not run"
        )
    keys = ("ok", "max_abs_err", "max_rel_err", "leaves")
    return {k: numerics.get(k) for k in keys}


def share_entry(share: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A runtime share of a report, as a validation keeps it."""
    if not share:
        return None
    keep = ("basis", "xla", "vendor", "custom", "libraries", "estimated_from", "error_points",
            "error_measured_on", "checks", "left_out")  # fmt: skip
    return {k: share[k] for k in keep if k in share}


def summarize_demo(
    report: Mapping[str, Any], *, accelerator: Accelerator, on_device: bool, compiled_at: str
) -> dict[str, Any]:
    """The demo's plugin report, as a validation reads it: outcomes, the accelerator's
    platform against cpu per check, its share (measured on the device; the estimate it
    replaces otherwise). Keys are named for the platform (``cuda_executed``)."""
    p = accelerator.platform
    not_measured = accelerator.not_measured
    checks = []
    for test in report["tests"]:
        for check in test.get("checks", ()):
            entry = check["platforms"].get(p, {})
            checks.append(
                {
                    "test": test["nodeid"],
                    "check": check["name"],
                    f"{p}_executed": bool(entry.get("executed")) if on_device else not_measured,
                    f"numerics_{p}_vs_cpu": _numerics(
                        entry.get("numerics"), entry, accelerator, on_device
                    ),
                    f"{p}_share": share_entry(entry.get("runtime_share")),
                    f"{p}_compiled_at": compiled_at,
                    f"{p}_compiled": (entry.get("compiled") or {}).get("libraries"),
                }
            )
    shares = report["summary"].get("runtime_share", {})
    share = share_entry(shares.get(p))
    measured = share if share and share.get("basis") == "measured" else None
    compared = [c for c in checks if isinstance(c[f"numerics_{p}_vs_cpu"], dict)]
    return {
        "outcomes": report["summary"].get("outcomes", {}),
        "tests": [{"nodeid": t["nodeid"], "outcome": t["outcome"]} for t in report["tests"]],
        "present_platforms": report["environment"].get("present_platforms"),
        "executed_platforms": report["environment"].get("executed_platforms"),
        "checks": checks,
        "numerics": (
            {
                "compared": len(compared),
                "ok": sum(bool(c[f"numerics_{p}_vs_cpu"]["ok"]) for c in compared),
                "checks": len(checks),
            }
            if on_device
            else not_measured
        ),
        f"{p}_share_measured": measured if on_device else not_measured,
        f"{p}_share_estimated": share if measured is None else None,
        "shares": {name: share_entry(s) for name, s in shares.items()},
    }


# -- parts in child processes: the leg's own, and the fidelity harness --------------------------


def child_part(
    validation: Validation, limit: float, module: str, part: str, *args: str
) -> tuple[int | None, float, Any]:
    """``python -m MODULE --part PART`` in a child process under ``limit``: its exit code
    (``None`` where stopped at the limit), its seconds, and the JSON it wrote (``None`` where
    none)."""
    with tempfile.TemporaryDirectory(prefix=f"jaxport-validation-{part}-") as tmp:
        part_out = Path(tmp) / f"{part}.json"
        code, seconds = validation.limited(
            [validation.python, "-m", module, "--part", part, "--part-out", str(part_out),
             *args],
            limit,
        )  # fmt: skip
        return code, seconds, read_json(part_out)


def run_fidelity(
    validation: Validation, limit: float, *, extra: Sequence[str] = ()
) -> tuple[dict[str, Any], Any]:
    """The fidelity harness (``benchmarks/fidelity/run.py``) over the run's slice of the
    corpus (``extra``: more options): the part's entry so far, and its results (``None``
    where it wrote none)."""
    results = validation.out_dir / f"fidelity-{validation.name}.json"
    results.unlink(missing_ok=True)
    command = [validation.python, "-m", "benchmarks.fidelity.run", "--out", str(results),
               "--repeats", "2", *validation.sizes.fidelity_args, *extra]  # fmt: skip
    code, seconds = validation.limited(command, limit)
    data = read_json(results)
    out: dict[str, Any] = {"seconds": seconds, "command": " ".join(command[1:]), "exit": code}
    if data is None:
        out["status"] = "timed out" if code is None else "failed"
        out["error"] = "no results written (see the log)"
        return out, None
    status = "done" if data.get("complete") else ("timed out" if code is None else "failed")
    out.update(status=status, results=results.name)
    return out, data


def numerics_summary(
    numerics: Sequence[Mapping[str, Any]], *, on_device: bool, not_measured: str
) -> Any:
    """The fidelity rows' comparisons of the device's platform with cpu, counted."""
    if not on_device:
        return not_measured
    errors = [n["max_rel_err"] for n in numerics if isinstance(n["max_rel_err"], (int, float))]
    return {
        "compared": len(numerics),
        "ok": sum(bool(n["ok"]) for n in numerics),
        "max_rel_err": max(errors, default=None),
    }


def fidelity_rows(results: Mapping[str, Any], platform: str) -> tuple[list[Any], dict[str, Any]]:
    """The fidelity results' rows that ran, and what every leg's summary says of them: how
    many, how many failed, whether the run was complete and over the whole corpus, and the
    device platform's numerics against cpu (``numerics``: the rows' comparisons)."""
    rows = [r for r in results["rows"] if "error" not in r]
    return rows, {
        "programs": len(rows),
        "programs_failed": len(results["rows"]) - len(rows),
        "complete": bool(results.get("complete")),
        "whole_corpus": bool(results.get("scope", {}).get("all")),
        "numerics": [
            r["numerics"]["compared"][platform]
            for r in rows
            if platform in r.get("numerics", {}).get("compared", {})
        ],
    }


def error_band(
    errors: Mapping[str, Any] | None,
    results: Mapping[str, Any],
    device: str | None,
    *,
    platform: str,
    levels: Mapping[str, str],
    versions: Sequence[str] = ("jaxlib",),
) -> Any:
    """The band a report should print for ``platform``, from this device's measurement: per
    census level, the mean error of the estimate a report made without the device makes,
    read from the fidelity results' error ``levels`` (census level -> its source there);
    it names the device and the ``versions`` it was measured with."""
    if not errors:
        return f"not measured: the fidelity run measured no {platform} share"
    found = results["environment"]["versions"]
    band: dict[str, Any] = {"device": device, **{name: found.get(name) for name in versions}}
    for level, source in levels.items():
        s = errors.get(source) or {}
        if s.get("programs"):
            band[level] = {"points": s["mean"], "programs": s["programs"], "p90": s["p90"],
                           "from": source}  # fmt: skip
    return band


# -- the overhead part (a child process; run.py's sessions) -------------------------------------


def overhead_part(out: Path, *, reps: int, cases: int) -> None:
    """Child process: the generated suite, plugin against plain ``jit``, and a plain suite
    with ``--jaxport-audit`` against without; one rep of each in turn, written after each."""
    from benchmarks.overhead import run

    chosen = run.QUICK_CASES[:cases]
    data: dict[str, Any] = {"cases": chosen, "suites": {"checks": [], "audit": []}}
    suites = (("checks", False, []), ("audit", True, ["--jaxport-audit"]))
    with tempfile.TemporaryDirectory(prefix="jaxport-validation-overhead-") as tmp:
        for rep in range(reps):
            for suite, plain, extra in suites:
                folder = Path(tmp) / f"rep{rep}"
                result = run.suite_overhead(suite, None, chosen, 1, folder, extra, plain=plain)
                data["suites"][suite].append({k: v for k, v in result.items() if k != "runs"})
                write_atomic(out, json.dumps(data, indent=1, default=float))


def overhead_summary(data: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Medians over the reps of each suite's ratios (plugin / plain); ``where`` it ran
    (``gpu``, ``tpu``, or ``cpu`` in a dry run)."""
    out: dict[str, Any] = {"cases": data.get("cases"), "where": where}
    for suite, reps in data.get("suites", {}).items():
        if not reps:
            continue
        ratios = {
            key: round(statistics.median(r[key] for r in reps), 3)
            for key in ("cold_ratio_wall", "cold_ratio_cpu", "warm_ratio_wall", "warm_ratio_cpu")
        }
        added = statistics.median(r.get("cold_added_per_test_s") or 0.0 for r in reps)
        out[suite] = {
            "reps": len(reps),
            "tests": reps[0].get("tests"),
            **ratios,
            "cold_added_per_test_ms": round(1000 * added, 1),
            "plain_cold_s": round(statistics.median(r["b_cold_median_wall_s"] for r in reps), 2),
            "summaries": reps[-1].get("summaries"),
        }
    return out


def overhead(validation: Validation, limit: float, module: str, *, where: str) -> dict[str, Any]:
    """The overhead suites in a child process (``--part overhead``), summarised."""
    code, seconds, data = child_part(
        validation, limit, module, "overhead",
        "--reps", str(validation.sizes.overhead_reps),
        "--cases", str(validation.sizes.overhead_cases),
    )  # fmt: skip
    out: dict[str, Any] = {"seconds": seconds, "exit": code}
    if data is None:
        out["status"] = "timed out" if code is None else "failed"
        return out
    summary = overhead_summary(data, where=where)
    done = code == 0 and all(k in summary for k in ("checks", "audit"))
    out.update(status="done" if done else ("timed out" if code is None else "failed"), **summary)
    return out


# -- the run -------------------------------------------------------------------------------------


def shipped_band(platform: str) -> Any:
    """What the plugin prints for ``platform`` today (``estimate_error.json``): its own band,
    else the default (measured on cpu), for comparison."""
    data = read_json(ESTIMATE_ERRORS) or {}
    own = data.get("platforms", {}).get(platform)
    table = own or data.get("default", {})
    return {
        level: {"points": e.get("points"), "device": e.get("device"), "jaxlib": e.get("jaxlib")}
        for level, e in table.items()
    }


class Run:
    """One run's results and the loop over its parts: each under the smaller of its own limit
    and what is left of the budget, the results written after each (``save``)."""

    def __init__(
        self,
        accelerator: Accelerator,
        *,
        out_dir: Path,
        name: str,
        budget: float,
        dry: bool,
        device: Mapping[str, Any],
        limits: Mapping[str, float],
        parts: Sequence[str],
        markdown: Callable[[Mapping[str, Any]], str],
    ) -> None:
        self.accelerator = accelerator
        self.started = time.monotonic()
        self.deadline = self.started + budget
        self.limits = limits
        self.render = markdown
        out_dir.mkdir(parents=True, exist_ok=True)
        prefix = accelerator.results_prefix
        self.logfile = out_dir / f"{prefix}-{name}.log"
        self.logfile.write_text(f"{prefix} {name}, {dt.datetime.now().isoformat()}\n", "utf-8")
        self.json_path = out_dir / f"{prefix}-{name}.json"
        self.results: dict[str, Any] = {
            "about": accelerator.about,
            "schema_version": SCHEMA_VERSION,
            "mode": "dry-run" if dry else accelerator.word.lower(),
            "name": name,
            "device": dict(device),
            "budget_s": budget,
            "host": {
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "machine": platform_module.platform(),
                "nproc": os.cpu_count(),
                "git_head": git("rev-parse", "HEAD"),
                "git_dirty_files": len(git("status", "--porcelain").splitlines()),
                "loadavg_start": list(os.getloadavg()),
            },
            "parts": {p: {"status": "not run"} for p in ("environment", *parts)},
            f"{accelerator.platform}_error_band": accelerator.not_measured,
            f"shipped_{accelerator.platform}_band": shipped_band(accelerator.platform),
        }

    def save(self) -> None:
        self.results["elapsed_s"] = round(time.monotonic() - self.started, 1)
        write_atomic(self.json_path, json.dumps(self.results, indent=1, default=str) + "\n")
        write_atomic(self.json_path.with_suffix(".md"), self.render(self.results))

    def limit_for(self, part: str) -> float:
        return min(self.limits[part], self.deadline - time.monotonic())

    def environment(self, python: str, env: Mapping[str, str]) -> Mapping[str, Any] | None:
        """The environment part (``--part environment``): what JAX sees, or ``None``
        (recorded as failed) where JAX does not start."""
        limit = self.limit_for("environment")
        with tempfile.TemporaryDirectory(prefix="jaxport-validation-env-") as tmp:
            env_out = Path(tmp) / "environment.json"
            code, seconds = run_limited(
                [python, "-m", self.accelerator.module, "--part", "environment",
                 "--part-out", str(env_out)],
                limit, self.logfile, env, REPO,
            )  # fmt: skip
            seen = read_json(env_out)
        parts = self.results["parts"]
        if seen is None:
            parts["environment"] = {
                "status": "failed" if code is not None else "timed out",
                "seconds": seconds,
                "exit": code,
                "limit_s": round(limit),
            }
            self.save()
            return None
        parts["environment"] = {"status": "done", "seconds": seconds, "limit_s": round(limit),
                                **seen}  # fmt: skip
        self.save()
        return seen

    def run_parts(
        self,
        parts: Sequence[str],
        handlers: Mapping[str, Callable[[float], dict[str, Any]]],
        *,
        budget: float,
        who: str,
    ) -> int:
        """Each part in turn under its limit; 1 when a part is not done."""
        for part in parts:
            limit = self.limit_for(part)
            if self.deadline - time.monotonic() < 5:
                self.results["parts"][part] = {
                    "status": f"not run: the {budget} s budget was spent"
                }
                self.save()
                continue
            log(f"{part}: up to {limit:.0f} s", who=who)
            began = time.monotonic()
            try:
                entry = handlers[part](limit)
            except Exception as e:  # one part's failure must not lose the others' results
                entry = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
            entry["limit_s"] = round(limit)
            self.results["parts"][part] = entry
            band = f"{self.accelerator.platform}_error_band"
            if band in entry:  # the fidelity part measures the band the results propose
                self.results[band] = entry[band]
            log(f"{part}: {entry.get('status')} in {time.monotonic() - began:.0f} s", who=who)
            self.save()
        self.results["host"]["loadavg_end"] = list(os.getloadavg())
        self.save()
        log(f"wrote {self.json_path} and {self.json_path.with_suffix('.md')} in "
            f"{time.monotonic() - self.started:.0f} s", who=who)  # fmt: skip
        failed = [
            p
            for p in parts
            if not str(self.results["parts"][p].get("status")).startswith(("done", "skipped"))
        ]
        if failed:
            log(f"parts not done: {', '.join(failed)} (see {self.logfile})", who=who)
        return 1 if failed else 0


# -- the run's flow, every leg's ----------------------------------------------------------------

PartHandler = Callable[[float], dict[str, Any]]
"""A part of the run: given its time limit, its entry in the results."""


def prepared_env(accelerator: Accelerator, *, dry: bool) -> dict[str, str]:
    """The environment the run's parts get: JAX on cpu in a dry run; on the device, without
    a ``JAX_PLATFORMS`` that would hide it; the accelerator's own settings where unset."""
    env = dict(os.environ)
    who = accelerator.results_prefix
    if dry:
        env["JAX_PLATFORMS"] = "cpu"  # no device: the compiler plugins compile deviceless
    elif env.get("JAX_PLATFORMS") not in (None, "", *accelerator.keeps_platforms):
        log(f"JAX_PLATFORMS={env.pop('JAX_PLATFORMS')} unset for the {accelerator.word} run (it "
            f"would hide the {accelerator.word})", who=who)  # fmt: skip
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in accelerator.env.items():
        env.setdefault(key, value)
    return env


def begin(
    accelerator: Accelerator,
    args: argparse.Namespace,
    limits: Mapping[str, float],
    *,
    name: str,
    device: Mapping[str, Any],
    markdown: Callable[[Mapping[str, Any]], str],
) -> Run:
    """The run's results, written once before any part runs."""
    run = Run(
        accelerator, out_dir=args.out_dir, name=name, budget=args.budget, dry=args.dry_run,
        device=device, limits=limits, parts=chosen_parts(args, accelerator), markdown=markdown,
    )  # fmt: skip
    run.save()
    return run


def measure(
    run: Run,
    args: argparse.Namespace,
    env: Mapping[str, str],
    handlers: Callable[[Validation, Mapping[str, Any]], Mapping[str, PartHandler]],
    *,
    target: str | None = None,
) -> int:
    """What JAX sees (the environment part), then every part the run has (``handlers``:
    the leg's, given the run's :class:`Validation` and what JAX saw) under its limit."""
    accelerator = run.accelerator
    platform, word, who = accelerator.platform, accelerator.word, accelerator.results_prefix
    dry = args.dry_run
    python = sys.executable
    seen = run.environment(python, env)
    if seen is None:
        print(f"{who}: JAX does not start here; see {run.logfile}", file=sys.stderr)
        return 1
    on_device = not dry and platform in seen["present_platforms"]
    kind = seen["devices"].get(platform) if on_device else None
    device = run.results["device"]
    if on_device and device.get("kind") is None:
        run.results["device"] = {"kind": kind}
    if not dry and not on_device:
        device["note"] = (
            f"JAX does not see the {word} (present: {', '.join(seen['present_platforms'])}; "
            f"{seen.get(f'{platform}_error')}): {accelerator.not_measured} in every {word} column"
        )
        log(device["note"], who=who)
    run.save()
    validation = Validation(
        python=python,
        env=env,
        out_dir=args.out_dir,
        name=run.results["name"],
        logfile=run.logfile,
        on_device=on_device,
        device=kind,
        target=target,
        sizes=accelerator.sizes[
            "quick" if args.quick else word.lower() if on_device else "dry-run"
        ],
    )
    parts = chosen_parts(args, accelerator)
    return run.run_parts(parts, handlers(validation, seen), budget=args.budget, who=who)


def overhead_handler(validation: Validation, accelerator: Accelerator) -> PartHandler:
    """The overhead part, every leg's: on the device where it ran, else on cpu."""
    where = accelerator.word.lower() if validation.on_device else "cpu"
    return lambda limit: overhead(validation, limit, accelerator.module, where=where)


def main(
    accelerator: Accelerator,
    args: argparse.Namespace,
    *,
    orchestrate: Callable[[argparse.Namespace, Mapping[str, float]], int],
    children: Mapping[str, Callable[[argparse.Namespace], None]] | None = None,
) -> int:
    """A leg's command line: a part it runs as a child process (``--part``: ``environment``
    and ``overhead``, and the leg's own ``children``), or the whole run (``orchestrate``,
    given the parts' limits); 2 with the fix where the command cannot run."""
    parts: dict[str, Callable[[argparse.Namespace], None]] = {
        "environment": lambda a: environment_part(
            a.part_out, platform=accelerator.platform, versions=accelerator.versions
        ),
        "overhead": lambda a: overhead_part(a.part_out, reps=a.reps, cases=a.cases),
        **(children or {}),
    }
    try:
        if args.part:
            parts[args.part](args)
            return 0
        chosen_parts(args, accelerator)
        limits = {**accelerator.limits, **parse_limits(args.limit, accelerator.limits)}
        return orchestrate(args, limits)
    except Unusable as e:
        print(f"{accelerator.results_prefix}: {e}", file=sys.stderr)
        return 2


# -- Markdown ------------------------------------------------------------------------------------


def cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {cell(v)}" for k, v in value.items()) or "none"
    return str(value).replace("|", "\\|").replace("\n", " ")


def layers(share: Mapping[str, Any] | None) -> str:
    if not isinstance(share, Mapping):
        return cell(share)
    text = " / ".join(f"{100 * float(share.get(k, 0.0)):.0f}%" for k in ("xla", "vendor", "custom"))
    if share.get("basis") == "estimated" and share.get("error_points") is not None:
        text += f" (estimated ±{share['error_points']:.0f}"
        text += f" on {share['error_measured_on']})" if share.get("error_measured_on") else ")"
    return text


def body_lines(
    results: Mapping[str, Any],
    accelerator: Accelerator,
    sections: Mapping[str, Callable[[Mapping[str, Any]], list[str]]],
) -> list[str]:
    """Below a run's heading: its parts' table, its band against the shipped one, and each
    part's section (``sections``: its lines, by part) for the parts it has."""
    p = accelerator.platform
    parts = results["parts"]
    lines = part_lines(parts)
    lines += ["", *band_lines(p, results.get(f"{p}_error_band"),
                              results.get(f"shipped_{p}_band", {}))]  # fmt: skip
    for part, section in sections.items():
        if part in parts:
            lines += section(parts[part])
    return lines


def part_lines(parts: Mapping[str, Any]) -> list[str]:
    lines = ["| part | status | seconds | limit |", "|---|---|---:|---:|"]
    for part, entry in parts.items():
        lines.append(
            f"| {part} | {cell(entry.get('status'))} | {cell(entry.get('seconds'))} | "
            f"{cell(entry.get('limit_s'))} |"
        )
    return lines


def band_lines(platform: str, band: Any, shipped: Mapping[str, Any]) -> list[str]:
    """The error band measured here against the one shipped, per census level."""
    lines = [f"### The {platform} error band", "",
             "| census level | shipped band (measured on) | measured here |", "|---|---|---|"]  # fmt: skip
    for level in ("lowered", "compiled"):
        s = shipped.get(level, {})
        here = band.get(level) if isinstance(band, Mapping) else band
        lines.append(
            f"| {level} | ±{cell(s.get('points'))} ({cell(s.get('device'))}, jaxlib "
            f"{cell(s.get('jaxlib'))}) | "
            + (
                f"±{here['points']:.0f} on {band['device']} ({here['programs']} programs, "
                f"p90 {here['p90']})"
                if isinstance(here, Mapping)
                else cell(here)
            )
            + " |"
        )
    return lines


def overhead_lines(overhead: Mapping[str, Any], *, number: int, word: str) -> list[str]:
    lines = ["", f"### {number}. Overhead on a small suite: plugin against plain `jax.jit`", ""]
    if "checks" not in overhead and "audit" not in overhead:
        return [*lines, f"{cell(overhead.get('status'))}"]
    on_device = overhead.get("where") == word.lower()
    not_measured = f"not measured: no {word}"
    lines += [
        f"Cases: {', '.join(overhead.get('cases') or [])}. Ratios: medians of plugin / plain over "
        "the reps (wall; CPU time in brackets).",
        "",
        f"| suite | tests | reps | on the {word}, cold | on the {word}, warm | on this cpu-only "
        "machine, cold | warm |",
        "|---|---:|---:|---|---|---|---|",
    ]
    names = {
        "checks": "`jaxport.check` (generated suite)",
        "audit": "`--jaxport-audit` (plain suite)",
    }
    for suite in ("checks", "audit"):
        s = overhead.get(suite)
        if not s:
            continue
        cold = f"{s['cold_ratio_wall']:.2f} ({s['cold_ratio_cpu']:.2f})"
        warm = f"{s['warm_ratio_wall']:.2f} ({s['warm_ratio_cpu']:.2f})"
        cells = [cold, warm, "—", "—"] if on_device else [not_measured, not_measured, cold, warm]
        lines.append(f"| {names[suite]} | {s['tests']} | {s['reps']} | " + " | ".join(cells) + " |")
    return lines


def demo_lines(
    demo: Mapping[str, Any], *, accelerator: Accelerator, device_word: str, compiled: bool
) -> list[str]:
    """The demo part's section (:func:`summarize_demo`'s keys); ``compiled``: a column for
    the platform's compiled libraries (where the run compiles it)."""
    p = accelerator.platform
    lines = ["", f"### 2. The demo suite (`examples/demo`) with {p} executed", ""]
    if "checks" not in demo:
        return [*lines, f"{cell(demo.get('status'))}: {cell(demo.get('error'))}"]
    numerics = demo["numerics"]
    estimated = demo.get(f"{p}_share_estimated")
    lines += [
        f"Outcomes: {cell(demo['outcomes'])}; present: {cell(demo['present_platforms'])}; "
        f"executed: {cell(demo['executed_platforms'])}. Numerics {p} against cpu: "
        + (
            f"{numerics['ok']} of {numerics['compared']} compared checks within tolerance "
            f"({numerics['checks']} checks)"
            if isinstance(numerics, Mapping)
            else numerics
        )
        + ".",
        "",
        f"{p} share of the suite, measured: {layers(demo[f'{p}_share_measured'])}"
        + (
            f"; the estimate a run without the {device_word} prints: {layers(estimated)}"
            if estimated
            else ""
        )
        + " (xla / vendor / custom).",
        "",
        f"| test | check | {p} numerics against cpu | {p} share (xla / vendor / custom) |"
        + (f" {p} compiled |" if compiled else ""),
        "|---|---|---|---|" + ("---|" if compiled else ""),
    ]
    for c in demo["checks"]:
        n = c[f"numerics_{p}_vs_cpu"]
        numbers = (
            f"{'ok' if n['ok'] else 'DIFFERS'}, max abs {cell(n['max_abs_err'])}, "
            f"max rel {cell(n['max_rel_err'])}"
            if isinstance(n, Mapping)
            else n
        )
        lines.append(
            f"| {c['test'].split('::')[-1]} | {c['check']} | {cell(numbers)} | "
            f"{layers(c[f'{p}_share'])} |"
            + (f" {c[f'{p}_compiled_at']}: {cell(c[f'{p}_compiled'])} |" if compiled else "")
        )
    return lines


def header_lines(
    results: Mapping[str, Any], accelerator: Accelerator, *, software: str
) -> list[str]:
    """A run's heading and the line under it: when, where, which JAX (``software``: the
    accelerator's own, after jax and jaxlib), how long; the device's note where it has one."""
    host = results["host"]
    versions = results["parts"].get("environment", {}).get("versions", {})
    kind = results["device"].get("kind") or accelerator.not_measured
    lines = [
        f"## {accelerator.word} validation ({results['mode']}): {kind}",
        "",
        f"{host['date']}, {host['machine']}, {host['nproc']} CPUs; jax {versions.get('jax')}, "
        f"jaxlib {versions.get('jaxlib')}, {software}; git {host['git_head'][:8]}; "
        f"{results.get('elapsed_s', 0):.0f} s of the {results['budget_s']} s budget.",
        "",
    ]
    if results["device"].get("note"):
        lines += [results["device"]["note"], ""]
    return lines


def scope_text(fidelity: Mapping[str, Any]) -> str:
    """``12 program variants (a slice of the corpus``: the fidelity part's scope, its
    bracket left open for the leg's own words."""
    return (
        f"{fidelity['programs']} program variants ("
        + ("the whole corpus" if fidelity["whole_corpus"] else "a slice of the corpus")
        + ("" if fidelity["complete"] else ", stopped at the part's limit")
    )


def share_error_lines(platform: str, errors: Any, *, unmeasured: str) -> list[str]:
    """The measured share against the estimates, per estimate (``errors``: the fidelity
    results' error points for ``platform``, or why they were not measured, in a row named
    ``unmeasured``)."""
    lines = [
        "",
        f"{platform} share, estimated against measured (percentage points, worst layer):",
        "",
        "| estimate | programs | mean | median | p90 | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    if not isinstance(errors, Mapping):
        return [*lines, f"| {unmeasured} | {errors} | | | | |"]
    for source, e in errors.items():
        if e.get("programs"):
            lines.append(f"| {source} | {e['programs']} | {e['mean']} | {e['median']} | "
                         f"{e['p90']} | {e['max']} |")  # fmt: skip
    return lines


def numerics_lines(platform: str, numerics: Any) -> list[str]:
    """The device platform's numerics against cpu over the fidelity corpus, in a sentence."""
    return [
        "",
        f"Numerics {platform} against cpu: "
        + (
            f"{numerics['ok']} of {numerics['compared']} within tolerance (largest relative "
            f"error {cell(numerics['max_rel_err'])})"
            if isinstance(numerics, Mapping)
            else numerics
        )
        + ".",
    ]
