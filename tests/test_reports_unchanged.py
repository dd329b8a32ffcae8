"""Tests of the whole package against recorded reports (tests/data/reports/).

The package's restructuring changed no report: three real runs against recorded reports.

Recorded at the commit before the restructuring (issue 22), with jax 0.10.2 on Python 3.11,
by ``python tests/test_reports_unchanged.py --record``:

- **demo**: ``examples/demo`` with ``--jaxport-report`` and ``--jaxport-audit`` (checks, the
  three numbers, the audit of the same run);
- **suite**: ``benchmarks/corpora/report_suite.py``'s generated suite run for real at 24 tests (its
  renderings are those of the report grown to 2,000 tests by ``replicate``: the report's
  arithmetic and layout at scale);
- **audit**: three of optax's own test modules, unchanged, under ``--jaxport-audit``.

The demo's and the audit's reports were recorded again when the identity key's jaxpr text
became the key's own (computations' ids changed): before recording, the new runs were checked
equal to the recorded reports with every id mapped to its new value, except where a finding
names one of several computations at one line (the first by id). They were recorded again when
an eager op came to count in its owner only (``eager_users``): before recording, the new runs
were checked equal to the recorded reports but for each eager op's users (the recorded ones'
first), each test's uses and the counts made of them (``seen``'s ``tests_using`` and
``shared``, each site's ``tests``). Their renderings were recorded again when a vendor site
came to name its library routine (issue 39: ``cusolver getrf`` and ``jaxlib lu_pivots``, not
``cusolver solver`` and ``jaxlib jaxlib-kernel``): nothing else in them changed. And again when
an estimate whose band swallows its split came to be called a ranking, not a share, and the
engineering days to show their fixed part apart (issue 39): the renderings only, the reports
are the same. And again when ``-q`` came to keep a line of numbers and a report to claim no
budget nobody set (issue 39: the audit's "no suite budget: [tool.jaxport.audit] fail_on sets
none"): the renderings only. The demo's report and renderings were recorded again when its
failing test was renamed ``test_cudnn_over_budget`` (issue 39: so that its finding shows in
pytest's short summary at 80 columns): before recording, the new run was checked equal to the
recorded report with the old name mapped to the new one. The reports came to state their home
platform (issue 41: ``config.home``, cuda for all three): the key was added to each recorded
report, nothing else in them changed, and their renderings were recorded again with the display
changes of issue 43 (the sites table's kernel column whole where the line has room, layer lines
of whole clauses at the default verbosity, the HTML's suite time column named for what it
holds, the Markdown's sites of every platform, each platform's layout findings grouped into one
line) and the home named in the HTML's facts and the three numbers. The audit's report was
recorded again when a jit called under an eager transformation came to pass the hook in every
test that calls it (issue 43): its ``seen.calls`` went from 336 to 342 and nothing else in the
report changed (checked field by field before recording); its renderings are the same. The
demo's and the audit's reports were recorded again when an eager op and a jit of the same
program came to be two computations (issue 50: an eager op's key names its kind, so every eager
op's id changed): before recording, the new runs were checked equal to the recorded reports
with each id mapped to its new value, but for the order of what is sorted by id and which of
several computations at one line a finding names; their renderings are the same. The renderings
(not the reports) were recorded again for issue 50: each runtime share's libraries listed
largest first (the demo's rocm line had hidden miopen's 21% behind "+3 more"; the audit's cuda
and rocm lines swap two libraries), and the demo's note on why cpu's measured share, its vendor
calls and the audit's estimate differ; nothing else in them changed (each text diff read). Then
the demo's -v rendering, where the sites table's long kernels went on a line of their own. The
reports were recorded again for issue 50 too: each format census keeps its formats' first lines
(``lines``: the new runs equal the recorded reports with that key taken out), and the audit's
report, which has no portable check, prices no target for its checks (its summary's
``kernels_to_rewrite``, ``rewrite_days`` and ``rewrite`` are empty where they were "rocm 0, tpu
0"; its audit section's numbers are unchanged); their renderings are the same. The demo's
report was recorded again when tpu's lowered padding came to model the layout the TPU compiler
chooses (issue 48: the (4096, 100) batch pads 4%, not 28%; vectors and 64-bit arrays counted):
before recording, the new run was checked equal to the recorded report but for tpu's tile-
padding findings, their sums, the cost items they price and the demo's test lines after its
longer padding comment; the suite's and the audit's reports did not change. The three
renderings were recorded again for the totals' note naming the two padding figures. A device's
``compiler`` (the libtpu installed, where one is) is the machine's, not compared. The demo's
report was recorded again when an emulation came to carry the chip's measured bounds (issue 49:
its one emulated check's ``emulated.bounded``, ``emulated.bounds_from`` and
``emulated_bounds``, the check still a match): before recording, the new run was checked equal
to the recorded report without those keys; of its renderings only the Markdown changed (the
emulation table's ``may differ`` column). The demo's report and renderings were recorded again
when issue 49's two halves were merged: a run then differed from the recorded report only by
the TPU host work's intended changes (the demo's own tpu tolerance,
``config.tolerance.tpu.float32``; its direct calls under ``jax.default_device``, which move
three of ``test_models.py``'s lines and add one call through the hook, 113; and tpu's error
band measured on the chip, ``error_points`` 41 and ``error_measured_on`` "TPU v5 lite", in
place of cpu's 37), its emulated bounds kept; the terminal, Markdown and HTML renderings show
the tpu band as ``[ESTIMATED ±41]`` (``±41 points on TPU v5 lite``). The suite's and the
audit's reports were recorded again then for the same band: runs differed from them only in
tpu's ``error_points`` and ``error_measured_on``, and so did their renderings. The demo's
renderings were recorded again when the emulation's note came to say what tpu bounds ("not
vendor-library algorithms or accumulation order (on tpu bounded by the chip's measured errors:
...)"): the report is the same. The fifth wave's branches (issues 48, 49 and 50) were then
merged and the three reports and their renderings recorded once more from the merged code:
before recording, each run was compared field by field with the recording last made (issue
49's, which already held main's changes), and differed only by the other branches' intended
changes: each format census's ``lines`` and the audit's empty prices (issue 50); tpu's lowered
padding from the layout model (issue 48: the demo's tile-padding findings, their sums and the
cost items they price); and tpu's lowered linear algebra counted as libtpu's (issue 48: the
checks' and computations' tpu vendor calls, sites and libtpu share, and the hotspots that
follow). The renderings differ in those and in issue 50's library order and cpu note (read as a
text diff). All three were recorded again when tpu's band was adopted again from the chip's
recorded traces, once the lowered level counted tpu's linear algebra as libtpu's (issue 48: ±41
points from the lowered program became ±19): runs differed from the recordings only in tpu's
``error_points``, and so did their renderings. And again when tpu's peak rates became the
TPU v5e's own, as the lent chip's profiler reported them, and the band with them ±18 (issue 49's
validation run): runs differed only in tpu's runtime shares (``xla``, ``vendor``, ``custom``,
``libraries.libtpu``) and ``error_points``, per check, computation and summary. The demo's and
the audit's reports and renderings were recorded again when the suite audit's numbers came to
count the library's lines, the tests' own apart (issue 55, item 17: the audit section's
``apart`` and ``counted``): before recording, each run was checked equal to the recorded report
with those two keys taken out, but for the audit section's tpu price, which lost the findings at
the tests' lines (the demo's three precision reviews at ``tests/test_models.py``, 7.25 days to
6.5; the optax audit's float64 rewrite at ``numerics_test.py:73``, 8 days to 5), now priced
apart; the terminal text gains the ``counted`` line and the "apart" line under the days (read as
a text diff). The renderings (not the reports) were recorded again for issue 55's counts and
messages (items 2 and 12, read as a text diff): the audit's two libtpu qr
sites at ``numerics_test.py:119`` name the routine that tells them apart (``libtpu qr (Qr)``,
``libtpu qr (ProductOfElementaryHouseholderReflectors)``) in the Markdown and the HTML; the
HTML's platform totals are set tighter (no sideways scroll at 1,280 px); and the demo's and the
suite's HTML problems intro no longer speaks of outputs that drift across CI legs (they are one
leg's); the terminal text did not change with these. Both re-recordings landed together: the
renderings were recorded once more from the merge, and read as a text diff against each.

Each JSON report is compared whole after :func:`normalized` (what depends on the clock or
the machine: measured times and shares, the environment, the tool's version), and each is
rendered again by this checkout (terminal text at -q, default and -v; Markdown; HTML) and
compared with the recorded renderings of the recorded report. Runs use ``PYTHONHASHSEED=0``:
a set's order in a static argument's text follows string hashing.

Where jax is not the recorded release the counts legitimately differ (docs/compatibility.md):
the runs are skipped there, saying so; the renderings of the recorded reports are compared on
every release (they depend on no JAX).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import typed

pytestmark = pytest.mark.slow  # three whole runs, and the reports grown to 2,000 tests

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "reports"
RECORDED_JAX = "0.10.2"
RUNS = ("demo", "suite", "audit")
OPTAX_MODULES = ("_src/update_test.py", "_src/numerics_test.py", "_src/utils_test.py")
TIMEOUT_S = 600

_CLOCK_KEYS = frozenset({"seconds", "share"})
"""Keys whose numbers come from the clock wherever they occur (hotspots, tooling scan)."""
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_MACHINE_KEYS = {"environment": ("python", "machine"), "tool": ("version",)}
"""Per top-level key of a report, what the machine running it decides."""


def normalized(report: Any, *, measured: bool = False) -> Any:
    """``report`` without what the clock or the machine decides: a measured runtime share's
    numbers (its basis and libraries stay), every ``seconds``/``share`` number, the
    environment, the libtpu a device was judged for and the tool version; lists of sites in a
    fixed order; other numbers to 12 significant digits (identical sites grouped otherwise
    sum in another order)."""
    if isinstance(report, dict):
        measured = measured or report.get("basis") == "measured"
        out: dict[str, Any] = {}
        for key, value in report.items():
            if key == "compiler" and "generation" in report:
                continue  # the libtpu installed here, where one is (a device's compiler)
            if key in _MACHINE_KEYS and "schema_version" in report and isinstance(value, dict):
                out[key] = {k: v for k, v in value.items() if k not in _MACHINE_KEYS[key]}
                continue
            timed = key in _CLOCK_KEYS or (measured and not isinstance(value, bool))
            if timed and isinstance(value, int | float):
                out[key] = 0
            elif key == "libraries" and measured and isinstance(value, dict):
                out[key] = dict.fromkeys(sorted(value), 0)
            else:
                out[key] = normalized(value, measured=measured)
        return out
    if isinstance(report, list):
        items = [normalized(v, measured=measured) for v in report]
        if items and all(isinstance(v, dict) and "location" in v for v in items):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return items
    if isinstance(report, str):
        return _ADDRESS.sub("0x?", report)  # an object's address in a static argument's text
    if isinstance(report, float):  # a sum's last bits follow how its terms were grouped
        return float(f"{report:.12g}")
    return report


# -- the three runs ---------------------------------------------------------------------------


def _environment() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_") and k != "GITHUB_STEP_SUMMARY"
    }
    env["PYTHONHASHSEED"] = "0"
    return env


def _pytest(folder: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-q", "--jaxport-report=out.json", *args],
        cwd=folder, env=_environment(), capture_output=True, text=True, timeout=TIMEOUT_S,
        check=False,
    )  # fmt: skip
    written = folder / "out.json"
    assert written.is_file(), f"no report written (exit {proc.returncode}):\n{proc.stdout[-4000:]}"
    report: dict[str, Any] = json.loads(written.read_text())
    return report


def run_demo(folder: Path) -> dict[str, Any]:
    ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache")
    demo = shutil.copytree(ROOT / "examples" / "demo", folder / "demo", ignore=ignore)
    return _pytest(demo, "--jaxport-audit")


def _report_suite() -> Any:
    spec = importlib.util.spec_from_file_location(
        "report_suite", ROOT / "benchmarks" / "corpora" / "report_suite.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_suite(folder: Path) -> dict[str, Any]:
    project = folder / "suite"
    project.mkdir()
    _report_suite().write_suite(project, tests=24)
    return _pytest(project)


def grown(report: dict[str, Any]) -> dict[str, Any]:
    """The generated suite's report at 2,000 tests (``report_suite.replicate``)."""
    return dict(_report_suite().replicate(report, 2000))


def run_audit(folder: Path) -> dict[str, Any]:
    optax = importlib.util.find_spec("optax")
    if optax is None or optax.origin is None:
        pytest.skip("optax is not installed: pip install -e '.[test]'")
    source = Path(optax.origin).parent
    suite = folder / "optax_suite"
    suite.mkdir()
    for module in OPTAX_MODULES:
        shutil.copy(source / module, suite / Path(module).name)
    return _pytest(suite, "-o", "python_files=*_test.py", "--jaxport-audit")


RUNNERS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "demo": run_demo,
    "suite": run_suite,
    "audit": run_audit,
}


# -- renderings ---------------------------------------------------------------------------------


def renderings(report: dict[str, Any]) -> dict[str, str]:
    """The report as every format shows it, at three verbosities."""
    from pytest_jaxport.view.display import display_options
    from pytest_jaxport.view.html import render_html
    from pytest_jaxport.view.markdown import render_markdown
    from pytest_jaxport.view.text import render_text
    from pytest_jaxport.view.viewmodel.build import build_view

    view = build_view(typed(report))
    shown: dict[str, str] = {}
    for verbosity in (-1, 0, 1):
        options = display_options(lambda name: None, verbosity=verbosity)
        shown[f"text{verbosity}"] = render_text(view, options)
    options = display_options(lambda name: None, verbosity=0)
    shown["markdown"] = render_markdown(view, options)
    shown["html"] = render_html(view, options)
    return shown


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return data


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RUNS)
def test_renderings_of_the_recorded_report_are_unchanged(name: str) -> None:
    recorded = _recorded(name)
    expected = json.loads((DATA / f"{name}.renderings.json").read_text())
    report = recorded["report"] if name != "suite" else grown(recorded["report"])
    shown = renderings(report)
    shown["json"] = json.dumps(report, sort_keys=True)
    assert {k: _digest(v) for k, v in shown.items()} == expected["digests"], (
        "a rendering changed; the recorded terminal text at default verbosity was:\n"
        + expected["text0"]
        + "\n\nand is now:\n"
        + shown["text0"]
    )


@pytest.mark.skipif(
    importlib.metadata.version("jax") != RECORDED_JAX,
    reason=f"reports recorded with jax {RECORDED_JAX}; counts differ by release",
)
@pytest.mark.parametrize("name", RUNS)
def test_report_of_a_real_run_is_unchanged(name: str, tmp_path: Path) -> None:
    report = normalized(RUNNERS[name](tmp_path))
    recorded = normalized(_recorded(name)["report"])
    assert (
        json.dumps(report, indent=1, sort_keys=True).splitlines()
        == json.dumps(recorded, indent=1, sort_keys=True).splitlines()
    )


def record() -> None:
    """Record the three runs' normalized reports and their renderings (``--record``)."""
    DATA.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        with tempfile.TemporaryDirectory() as folder:
            report = normalized(RUNNERS[name](Path(folder)))
        (DATA / f"{name}.json").write_text(
            json.dumps({"jax": importlib.metadata.version("jax"), "report": report}, indent=1)
            + "\n"
        )
        report = _recorded(name)["report"]  # rendered as the test reads it back
        if name == "suite":
            report = grown(report)
        shown = renderings(report)
        shown["json"] = json.dumps(report, sort_keys=True)
        (DATA / f"{name}.renderings.json").write_text(
            json.dumps({"digests": {k: _digest(v) for k, v in shown.items()},
                        "text0": shown["text0"]}, indent=1, sort_keys=True) + "\n"
        )  # fmt: skip
        print(f"recorded {name}: {len(json.dumps(report))} characters")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        raise SystemExit("usage: python tests/test_reports_unchanged.py --record")
    record()
