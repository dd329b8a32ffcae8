"""Tests of pytest_jaxport.view (viewmodel.shares, notes, problems) and cli: the wording.

What a new user reads in a report, said so it cannot mislead (issue 50): a share's largest
library first, numerics findings named as numerics at their lines, files handled without
surprises, and the rest a new user met."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import typed
from test_home import TPU_KERNEL_SUITE

import pytest_jaxport.report
from pytest_jaxport.cli import main
from pytest_jaxport.model.runtime_share import RuntimeShare
from pytest_jaxport.view.html import html
from pytest_jaxport.view.markdown import markdown
from pytest_jaxport.view.reporters import sarif_text
from pytest_jaxport.view.viewmodel.build import build_view
from pytest_jaxport.view.viewmodel.shares import share_row

DOT_HEAVY = """
import jax.numpy as jnp
import pytest


def model(a, x, w):
    x = x + jnp.fft.fft(a).real.sum()  # a small DUCC call; the dots below are most of the time
    for _ in range(4):
        x = jnp.tanh(x @ w)
    return x


@pytest.mark.portable
def test_model(jaxport):
    jaxport.check(model, jnp.ones(8), jnp.ones((256, 512)), jnp.ones((512, 512)) / 512)
"""


def test_a_shares_libraries_are_listed_largest_first() -> None:
    share = RuntimeShare(
        basis="measured",
        seconds=1.0,
        layers={"xla": 0.0, "vendor": 1.0, "custom": 0.0},
        libraries={"ducc": 0.004, "eigen": 0.12, "lapack": 0.01, "ynnpack": 0.84},
    )
    assert [name for name, _ in share_row("cpu", share).libraries] == [
        "ynnpack", "eigen", "lapack", "ducc"
    ]  # fmt: skip


def test_cpus_measured_share_names_its_largest_library_and_says_why_it_differs(
    pytester: pytest.Pytester, measured_basis: str
) -> None:
    if measured_basis != "measured":
        pytest.skip("this jaxlib's profiler measures no share")
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(test_model=DOT_HEAVY)
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    [line] = [s for s in result.stdout.lines if s.startswith("   cpu ") and "[measured]" in s]
    shown = re.findall(r"([a-z]+) <?[\d.]+%", line.split("]", 1)[1])
    report = json.loads((pytester.path / "r.json").read_text())
    timed = report["summary"]["runtime_share"]["cpu"]["libraries"]
    assert len(timed) > 1
    assert shown == sorted(timed, key=lambda name: -timed[name])[: len(shown)], line
    said = " ".join(result.stdout.str().split())
    assert (
        "note: cpu's vendor share times the compiled program, where ynnpack runs its dots; its "
        "vendor calls count the lowered one, where dots are XLA's own (docs/reference.md, "
        '"Why cpu\'s numbers differ"; --jaxport-compile=cpu counts the compiled calls)'
    ) in said
    counted = report["summary"]["platforms"]["cpu"]["libraries"]
    assert set(timed) - set(counted)  # what the note is about
    assert typed(report).summary.numbers is not None


def test_the_share_notes_libraries_in_name_order_not_by_measured_time() -> None:
    """Which of eigen and ynnpack took longer is a measurement (a TPU host's CPU ordered
    them the other way), so the note that names them keeps one order on every machine."""
    from pytest_jaxport.report.totals import PlatformTotals
    from pytest_jaxport.view.viewmodel.notes import share_basis_notes
    from pytest_jaxport.view.viewmodel.shares import ShareRow

    totals = PlatformTotals(vendor=1, custom=0, meta=0, libraries={"ducc": 1}, lowered=1,
                            failed_to_lower=0)  # fmt: skip
    texts = []
    for order in ((("ynnpack", 0.6), ("eigen", 0.3)), (("eigen", 0.6), ("ynnpack", 0.3))):
        row = ShareRow(platform="cpu", basis="measured", label="measured", layers={},
                       libraries=(*order, ("ducc", 0.1)))  # fmt: skip
        [note] = share_basis_notes([row], {"cpu": totals}, audit=False)
        texts.append(note.text)
    assert texts[0] == texts[1]
    assert "where eigen and ynnpack run its dots" in texts[0]


# float32-exact on cpu; cuda's TF32 (10 mantissa bits) and tpu's bfloat16 (7) both round
# 1 + 2**-12 to 1 at the default precision, so both emulations differ from cpu by 4 * 2**-12.
MISMATCH_MODEL = """
import jax.numpy as jnp


def project(x, w):
    y = jnp.tanh(x)
    return x @ w + y.sum()
"""
MISMATCH_TEST = """
import numpy as np
import pytest
from model import project


@pytest.mark.portable
def test_project(jaxport):
    jaxport.check(project, np.full((2, 4), 1 + 2**-12, np.float32), np.ones((4, 2), np.float32))
"""


def test_a_numerics_mismatch_is_named_numerics_with_its_worst_error_at_its_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two emulations that differ from cpu: not "budget violations" under the key
    ``emulated_numerics`` with "1 differing leaf", annotated at line 1 of the test file, and
    one tolerance table named, but numerics mismatches with their worst error, at the line
    of the dot the emulation rounded, each platform's table named."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda", "tpu"]\nemulate = ["cuda", "tpu"]\n'
    )
    pytester.makepyfile(model=MISMATCH_MODEL, test_model=MISMATCH_TEST)
    pytester.syspathinsert()
    result = pytester.runpytest(*(f"--jaxport-report=r.{s}" for s in ("json", "md", "html")))
    result.assert_outcomes(failed=1)
    worst = "1 differing leaf (largest abs err 9.8e-04, largest rel err 9.7e-05)"
    result.stdout.fnmatch_lines([
        f"tpu (emulated on cpu): {worst}, expected to match cpu (numerics, tolerance from JAX's "
        "float32 default); check 'project', emulated",
        "(2 numerics mismatches in test_model.py::test_project)",
        "to pass: if the differences on cuda (emulated on cpu) and tpu (emulated on cpu) are "
        "expected, loosen [[]tool.jaxport.tolerance.cuda.<dtype>[]] and "
        "[[]tool.jaxport.tolerance.tpu.<dtype>[]] or the marker's rtol/atol; else fix the code "
        "for those platforms' paths",
        "problems: 1 failed, 0 budget violations, 2 numerics mismatches",
        "  cuda: numerics differ (emulated on cpu) — 1 check in 1 test (beyond the tolerance from*",
        "*the test fails)",
        "    test_model.py::test_project  'project': 1 differing leaf (largest abs err 9.8e-04,"
        " largest rel",
        "      err 9.7e-05) at model.py:6",
    ])  # fmt: skip
    result.stdout.fnmatch_lines([  # the annotations, printed as the run ends
        "::error file=model.py,line=6,title=jaxport numerics-difference%3A tpu (emulated on cpu)"
        f"%3A {worst.replace(',', '%2C')}::*",
    ])  # fmt: skip
    report = result.stdout.str().split("jaxport portability report", 1)[1]
    markdown = (pytester.path / "r.md").read_text()
    page = (pytester.path / "r.html").read_text()
    for shown in (report, markdown, page):
        assert "emulated_numerics" not in shown
        assert "budget violations" not in shown or "0 budget violations" in shown
    assert f"| numerics differ (emulated on cpu) | {worst} at model.py:6 |" in markdown
    assert f"{worst} at model.py:6" in page
    data = json.loads((pytester.path / "r.json").read_text())
    [test] = data["tests"]
    assert {v["key"] for v in test["violations"]} == {"emulated_numerics"}  # the data's key


# -- files --------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "data" / "reports"


def _recorded(name: str, folder: Path) -> Path:
    """A recorded report (tests/data/reports) as a report file in ``folder``."""
    path = folder / f"{name}.json"
    path.write_text(json.dumps(json.loads((RECORDED / f"{name}.json").read_text())["report"]))
    return path


def _jaxport(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    said = capsys.readouterr()
    return code, said.out, said.err


def test_merge_never_writes_over_a_leg(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    leg = _recorded("demo", tmp_path)
    before = leg.read_text()
    code, _, err = _jaxport(capsys, "merge", "demo.json", "-o", "demo.json")
    assert (code, err.strip()) == (
        2,
        "jaxport merge: demo.json is an input here (demo.json): writing it would overwrite "
        "what is read; write to another file",
    )
    assert leg.read_text() == before
    code, _, err = _jaxport(capsys, "merge", "demo.json", "-o", "m.json", "--md", "./demo.json")
    assert code == 2
    assert "./demo.json is an input here (demo.json)" in err
    code, _, err = _jaxport(capsys, "baseline", "demo.json", "-o", "demo.json")
    assert (code, "jaxport baseline: demo.json is an input here" in err) == (2, True)


def test_diff_of_two_unrelated_reports_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "(0 tests compared)" and exit 0: nothing was compared, and that is said."""
    demo, suite = _recorded("demo", tmp_path), _recorded("suite", tmp_path)
    code, out, err = _jaxport(capsys, "diff", str(demo), str(suite))
    assert code == 2
    assert out == ""
    assert re.match(
        rf"jaxport diff: {demo} and {suite} have no test in common \(12 tests in {demo}, \d+ "
        rf"tests in {suite}; first tests/test_models.py::test_\w+ and tests/\S+\): ",
        err,
    ), err
    assert err.rstrip().endswith(
        "nothing to compare; diff two runs of one suite (or record a new baseline: jaxport "
        "baseline)"
    )
    code, out, _ = _jaxport(capsys, "diff", str(demo), str(demo))
    assert (code, "(12 tests compared)" in out) == (0, True)


def test_load_takes_a_path_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _recorded("demo", tmp_path)
    assert pytest_jaxport.report.load("demo.json").summary.tests == 12


def test_another_format_given_for_the_json_says_where_the_json_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Markdown, HTML or SARIF a run wrote, given where its JSON is read: not "not
    valid JSON (truncated?)" or "not a pytest-jaxport report", but what the file is and how
    to get the JSON."""
    report = pytest_jaxport.report.load(_recorded("demo", tmp_path))
    written = {
        "r.md": markdown(report),
        "r.html": html(report),
        "r.sarif": sarif_text(build_view(report)),
    }
    for name, text in written.items():
        (tmp_path / name).write_text(text)
    instead = (
        "the commands read the JSON report: pytest --jaxport-report=PATH.json writes it "
        "beside the other formats (or jaxport merge -o PATH.json)"
    )
    md, page, sarif = (str(tmp_path / name) for name in written)
    code, _, err = _jaxport(capsys, "merge", md, "-o", str(tmp_path / "m.json"))
    assert (code, err.strip()) == (
        2, f"jaxport merge: {md}: the Markdown rendering of a report, not its JSON; {instead}"
    )  # fmt: skip
    code, _, err = _jaxport(capsys, "show", page)
    assert (code, err.strip()) == (
        2, f"jaxport show: {page}: the HTML rendering of a report, not its JSON; {instead}"
    )  # fmt: skip
    code, _, err = _jaxport(capsys, "show", sarif)
    assert (code, err.strip()) == (
        2, f"jaxport show: {sarif}: a SARIF log (the report's findings for code scanning), not "
        f"a report; {instead}"
    )  # fmt: skip
    code, _, err = _jaxport(capsys, "diff", md, sarif)
    assert code == 2
    assert "the Markdown rendering of a report, not its JSON" in err


# -- the rest a new user met --------------------------------------------------------------------

DOT = """
import jax.numpy as jnp
import pytest


def project(x, w):
    return jnp.tanh(x @ w)


@pytest.mark.portable
def test_project(jaxport):
    jaxport.check(project, jnp.ones((8, 128)), jnp.ones((128, 128)))
"""


def test_q_keeps_the_details_asked_for_by_name(pytester: pytest.Pytester) -> None:
    """``-q --jaxport-report-details=all``: -q shortens the report, it does not take back
    what was asked for by name."""
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(test_dot=DOT)
    result = pytester.runpytest("-q", "--jaxport-report", "--jaxport-report-details=all")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_dot.py::test_project *", "  check 'project'"])
    quiet = pytester.runpytest("-q", "--jaxport-report")
    quiet.stdout.no_fnmatch_line("  check 'project'")


def test_the_v_sites_table_keeps_its_columns_within_the_line(pytester: pytest.Pytester) -> None:
    """At -v a long kernel (a format finding's rule and effect) no longer pushes the time
    column past the line, where it wrapped under the site: its rest goes on a line of its own."""
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(test_a_model_module_with_a_long_descriptive_name=DOT)  # a wide site
    result = pytester.runpytest("-v", "--jaxport-report")
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if line.startswith("where the lock-in"))
    table = lines[start : lines.index("", start)]
    assert all(len(line) <= 100 for line in table), "\n".join(table)
    rows = [line for line in table if line.startswith("  …")]  # the site keeps its end
    assert rows
    assert all(re.search(r"\s(\d+(\.\d+)?%|—)$", row) for row in rows), "\n".join(table)
    assert any(line.strip() == "(reduced-precision)" for line in table), "\n".join(table)


def test_a_kernel_only_on_the_tpu_branch_warns_of_no_gpu_api(pytester: pytest.Pytester) -> None:
    """A TPU-first team's report warned of Mosaic GPU's deprecation for a kernel that exists
    only on the tpu branch: JAX said it while lowering the absent platforms together, which
    failed (rocm refuses Mosaic GPU), and each was then lowered alone without a warning."""
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\nhome = "tpu"\n'
    )
    pytester.makepyfile(test_scale=TPU_KERNEL_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--jaxport-report=r.json", "-vv")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*Mosaic GPU*")
    result.stdout.no_fnmatch_line("*JAX warned while pytest-jaxport lowered*")
    [check] = json.loads((pytester.path / "r.json").read_text())["tests"][0]["checks"]
    assert {p: e.get("lowering_warnings") for p, e in check["platforms"].items()} == dict.fromkeys(
        ("cpu", "cuda", "rocm", "tpu")
    )


def test_the_example_workflow_copied_adds_nothing_to_the_bill(pytester: pytest.Pytester) -> None:
    """examples/ci/github-actions.yml copied as a project's workflow: its CUDA legs' pins
    measure, and the tooling scan reports none of them."""
    workflow = pytester.path / ".github" / "workflows" / "portability.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text((ROOT / "examples" / "ci" / "github-actions.yml").read_text())
    pytester.makepyprojecttoml('[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(test_dot=DOT)
    result = pytester.runpytest("--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    tooling = json.loads((pytester.path / "r.json").read_text())["summary"]["tooling"]
    assert (tooling["assumptions"], tooling["files_read"] >= 1) == ([], True)
    result.stdout.fnmatch_lines(
        ["  profiling, tooling and CI assumptions: 0 found in * files read"]
    )
    pinned = workflow.read_text().replace("# jaxport: ignore[cuda-pin]", "")
    workflow.write_text(pinned)  # without the comments, the pins are found: the scan reads it
    again = pytester.runpytest("--jaxport-report=r.json")
    again.assert_outcomes(passed=1)
    found = json.loads((pytester.path / "r.json").read_text())["summary"]["tooling"]
    assert [a["rule"] for a in found["assumptions"]] == ["cuda-pin", "cuda-pin"]


def test_forbid_formats_points_at_the_lines_no_rule_flags(pytester: pytest.Pytester) -> None:
    """``forbid_formats`` of a format no rule flags on the platform said "in 2 ops (no rule
    flags them on this device: no line kept)": the ops' own lines are kept now."""
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n'
        '[tool.jaxport.budget.cpu]\nforbid_formats = ["float8_e5m2"]\n'
    )
    pytester.makepyfile(
        test_half="""
        import jax.numpy as jnp
        import pytest


        def halved(x):
            y = x.astype(jnp.float8_e5m2)
            return (y * 2).astype(jnp.float32)


        @pytest.mark.portable
        def test_halved(jaxport):
            jaxport.check(halved, jnp.ones((8, 128)))
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "cpu: uses float8_e5m2 (forbid_formats = [[]float8_e5m2[]], set in pyproject.toml "
        "[[]tool.jaxport.budget.cpu[]]); check 'halved', lowered",
        "    float8_e5m2 at test_half.py:6, test_half.py:7",
    ])  # fmt: skip
    result.stdout.no_fnmatch_line("*no line kept*")


def test_every_time_the_readme_promises_says_it_is_an_idle_machines() -> None:
    """A new user under load measured 61 s against "about 35 seconds" and projected over 20
    minutes against "about 7 minutes": each paragraph that gives a time says it is an idle
    machine's and grows with load (the loaded measurement: benchmarks/results/
    readme-first-command-loaded-2cpu.json)."""
    paragraphs = (ROOT / "README.md").read_text().split("\n\n")
    timed = [p for p in paragraphs if re.search(r"about [\d,]+ (seconds|minutes)", p)]
    assert timed
    for paragraph in timed:
        said = " ".join(paragraph.split())
        assert "idle" in said, said
        assert "grow with its load" in said, said
    assert (ROOT / "benchmarks" / "results" / "readme-first-command-loaded-2cpu.json").is_file()
