"""Tests of pytest_jaxport.view.html.

The HTML report: built from a real pytester run, checked as text and in headless Chromium."""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers import typed

from pytest_jaxport.model.cost import CostModel, estimate, rewrite_items
from pytest_jaxport.model.probe import Probe, census_from_dict, numerics_status
from pytest_jaxport.model.runtime_share import RuntimeShare
from pytest_jaxport.report.errors import ReportError
from pytest_jaxport.report.files import from_json
from pytest_jaxport.view import html as html_report
from pytest_jaxport.view.viewmodel.layers import LAYER_ROWS

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<script>alert('x')</script>"

PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"
"""

MODELS = """
import jax
import jax.numpy as jnp


def mlp(x, w):
    return jax.nn.relu(x @ w) @ w.T


def solve(a, b):
    return jnp.linalg.solve(a, b)


def eigenvalues(a):
    return jnp.linalg.eig(a)[0]          # no TPU lowering: a red cell in the matrix


def _fused(x):
    return jax.ffi.ffi_call("my_fused_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def fused(x):                             # a CUDA-only hand-written kernel
    return jax.lax.platform_dependent(x, cuda=_fused, default=jnp.tanh)
"""

TESTS = """
import jax.numpy as jnp
import pytest
from models import eigenvalues, fused, mlp, solve

A = jnp.eye(4) * 3.0 + 0.1


@pytest.mark.portable
def test_mlp(jaxport):
    jaxport.check(mlp, jnp.ones((4, 8)), jnp.ones((8, 8)) * 0.1)


@pytest.mark.portable
def test_solve(jaxport):
    jaxport.check(solve, A, jnp.ones((4,)))


# must_lower names rocm, not cuda: with the jax CUDA plugin installed and no GPU, JAX's cuda
# lowering of eig asks cuSOLVER for its version and fails (see docs/reference.md).
@pytest.mark.portable(must_lower=["cpu", "rocm"])
def test_eigenvalues(jaxport):
    jaxport.check(eigenvalues, A)


@pytest.mark.portable(max_custom_calls=0)
@pytest.mark.parametrize("scale", [1.0], ids=[EVIL])
def test_fused(jaxport, scale):
    jaxport.check(fused, jnp.ones((8,)) * scale, name="fused<b>bold</b>")
""".replace("EVIL", repr(EVIL))

_CACHE: dict[str, dict[str, Any]] = {}


@pytest.fixture
def report(pytester: pytest.Pytester) -> dict[str, Any]:
    """The JSON report of a small real suite (run once per process, then copied)."""
    if "report" not in _CACHE:
        pytester.makefile(".toml", pyproject=PROJECT)
        pytester.makepyfile(models=MODELS, test_suite=TESTS)
        pytester.syspathinsert()
        result = pytester.runpytest("--jaxport-report=r.json", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=3, failed=1)
        _CACHE["report"] = json.loads((pytester.path / "r.json").read_text())
    return copy.deepcopy(_CACHE["report"])


def _share(basis: str, seconds: float, xla: float, vendor: float, custom: float,
           libraries: Mapping[str, float]) -> dict[str, object]:  # fmt: skip
    layers = {"xla": xla, "vendor": vendor, "custom": custom}
    return RuntimeShare(
        basis=basis,  # type: ignore[arg-type]
        seconds=seconds,
        layers=layers,
        libraries=libraries,
    ).to_dict()


SHARES = {
    "cpu": _share("measured", 0.0125, 0.62, 0.38, 0.0, {"lapack": 0.38}),
    "cuda": _share("estimated", 4.1e-5, 0.41, 0.47, 0.12, {"cublas": 0.3, "cusolver": 0.17}),
    "rocm": _share("estimated", 3.3e-5, 0.55, 0.45, 0.0, {"hipblas": 0.28, "hipsolver": 0.17}),
    "tpu": _share("estimated", 2.2e-5, 1.0, 0.0, 0.0, {}),
}


def add_three_numbers(report: dict[str, Any]) -> dict[str, Any]:
    """The optional summary fields, computed with the real cost model from the report."""
    report = copy.deepcopy(report)
    summary = report["summary"]
    summary["runtime_share"] = SHARES
    estimates = {}
    for target in ("rocm", "tpu"):
        items = []
        for test in report["tests"]:
            for check in test["checks"]:
                cuda = check["platforms"]["cuda"]
                there = check["platforms"][target]
                items += rewrite_items(
                    check=check["name"],
                    target=target,
                    nvidia=census_from_dict("cuda", cuda["lowered"]) if cuda["lowered"] else None,
                    on_target=census_from_dict(target, there["lowered"])
                    if there["lowered"]
                    else None,
                    target_error=there["error"],
                )
        estimates[target] = estimate(target, items, model=CostModel(), tooling_assumptions=2)
    summary["rewrite"] = {t: e.to_dict() for t, e in estimates.items()}
    summary["kernels_to_rewrite"] = {t: e.kernels_to_rewrite for t, e in estimates.items()}
    summary["rewrite_days"] = {t: e.days for t, e in estimates.items()}
    for test in report["tests"]:
        for check in test["checks"]:
            for platform, entry in check["platforms"].items():
                entry["runtime_share"] = SHARES[platform]
    return report


def _bars(page: str) -> int:
    return len(re.findall(r'<svg class="bar ', page))


# -- the page as text ---------------------------------------------------------------------


@pytest.mark.slow
def test_problems_first_then_the_numbers_and_labels(report: dict[str, Any]) -> None:
    full = add_three_numbers(report)
    page = html_report.html(typed(full))
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>pytest-jaxport portability report: 4 tests, 1 failed" in page
    # Problems open the page; the numbers, sites, totals and layers follow; then the matrix.
    order = ["problems", "numbers", "hotspots", "totals", "layers", "matrix", "tests"]
    at = [page.index(f'<section id="{section}"') for section in order]
    assert at == sorted(at)
    assert '<a href="#problems" class="tile bad">' in page  # the tiles link to them
    for row in LAYER_ROWS:
        assert f'<th scope="row">{row[0]}</th>' in page
    assert "3 of 4 checks lower on every configured platform" in page
    # runtime share: one labelled bar per platform, measured vs estimated visible
    assert page.count('<span class="badge measured">measured</span>') >= 2  # + legend
    assert 'aria-label="cpu runtime share (measured): XLA-generated 62%' in page
    assert 'aria-label="cuda runtime share (estimated (roofline)): XLA-generated 41%' in page
    assert "cublas 30%, cusolver 17%" in page
    assert "12.5 ms" in page
    assert "41 µs" in page  # a time in the unit that reads best, not "0.041 ms"
    # kernels to rewrite and days, with the breakdown, from the real cost model
    rocm = full["summary"]["rewrite"]["rocm"]
    assert full["summary"]["kernels_to_rewrite"]["rocm"] == 1
    assert [i["status"] for i in rocm["items"]] == ["fallback"]
    assert rocm["days"] == 3 + 1 + 5  # one fallback, two tooling assumptions, fixed
    assert full["summary"]["rewrite"]["tpu"]["items"][0]["status"] == "fallback"
    assert '<span class="value">9</span><span class="label">engineering days</span>' in page
    assert (
        '<span class="value">1</span><span class="label">kernels to rewrite (distinct sites)'
        in page
    )
    for label in ("fallback validation", "tooling assumptions", "fixed per target"):
        assert label in page
    assert "my_fused_kernel" in page
    assert "rocm runs generic code here" in page
    assert (
        'aria-label="to rocm: 9 engineering days = 4 from the project (fallback validation 3, '
        'tooling assumptions 1) + 5 fixed per target"' in page
    )
    # per-check bars: 4 platforms x 4 checks, plus the suite's 4, plus 2 days bars
    assert _bars(page) == 16 + 4 + 2


def _bar_of(page: str, platform: str) -> str:
    """The suite table's bar of ``platform`` (the first one labelled so)."""
    at = page.index(f'aria-label="{platform} runtime share')
    return page[page.rindex("<svg", 0, at) : page.index("</svg>", at)]


def test_the_problems_intro_speaks_of_drift_only_in_a_merged_report(
    report: dict[str, Any],
) -> None:
    """Issue 55, item 12: a single leg's problems intro spoke of outputs that drift across CI
    legs (only ``jaxport merge`` compares legs)."""
    page = html_report.html(typed(report))
    intro = page[page.index('<section id="problems"') :].split("</p>", 1)[0]
    assert "violations by budget key and platform, then checks that do not lower" in intro
    assert "drift" not in intro


def test_estimates_draw_their_band_and_say_when_it_is_a_ranking(report: dict[str, Any]) -> None:
    full = add_three_numbers(report)
    full["summary"]["runtime_share"] = {
        "cpu": SHARES["cpu"],
        "cuda": {**_share("estimated", 4e-5, 0.7, 0.3, 0.0, {"cublas": 0.3}),
                 "estimated_from": "lowered", "error_points": 37.0},
        "rocm": {**_share("estimated", 3e-5, 0.5, 0.3, 0.2, {"hipblas": 0.3}),
                 "estimated_from": "compiled", "error_points": 10.0},
    }  # fmt: skip
    page = html_report.html(typed(full))
    # measured: no band; estimated: each boundary ± the band, hatched, cut to the bar
    assert '<g class="band">' not in _bar_of(page, "cpu")
    cuda = _bar_of(page, "cuda")
    assert cuda.count('<g class="band"><title>error band ±37 points') == 1
    assert '<rect x="118.80" y="0" width="241.20" height="20" fill="#ffffff"' in cuda  # 70% ± 37
    assert '<path d="M118.80 0V20" stroke="#1f2328"' in cuda  # a tick where the band starts
    assert "; a ranking, not a share: within ±37 points, vendor&#x27;s 30% could be 0%" in cuda
    rocm = _bar_of(page, "rocm")  # 50% ± 10 and 80% ± 10: two spans, four ticks
    assert re.findall(r'<rect x="([\d.]+)" y="0" width="([\d.]+)" height="20" fill="#ffffff"',
                      rocm) == [("144.00", "72.00"), ("252.00", "72.00")]  # fmt: skip
    assert len(re.findall(r'<path d="M[\d.]+ 0V20"', rocm)) == 4
    assert "a ranking" not in rocm
    # the words: a badge beside the basis, the reason under the table, the legend
    numbers = page[page.index('<section id="numbers"') :]
    numbers = numbers[: numbers.index("</section>")]
    badge = '<span class="badge ranking" title="a ranking, not a share: within ±37 points, '
    assert numbers.count(badge) == 1
    assert "<li><strong>cuda</strong>: a ranking, not a share: within ±37 points" in numbers
    assert "<li><strong>rocm</strong>:" not in numbers
    assert "error band: where a boundary between layers may lie" in numbers
    assert '<span class="badge ranking">a ranking, not a share</span> the band is at least' in (
        numbers
    )


def test_matrix_cells_say_what_the_report_says(report: dict[str, Any]) -> None:
    page = html_report.html(typed(report))
    statuses = []
    for test in report["tests"]:
        for check in test["checks"]:
            probe = Probe.from_dict(check)
            for platform in report["config"]["platforms"]:
                status = numerics_status(probe, platform)
                statuses.append(status)
    shown = re.findall(r'<span class="numerics [a-z]+">([a-z ]+)</span>', page)
    assert sorted(shown) == sorted(s for s in statuses if s != "not present")
    assert "not present" not in page.split('id="matrix"')[1].split("</section>")[0]
    # eig does not lower for TPU: a red cell whose tooltip is the lowering error
    assert re.search(
        r'<td class="cell c bad" title="does not lower: [^"]*eig[^"]*" aria-label="tpu: does '
        "not lower",
        page,
    )
    # the over-budget custom call on cuda is marked in the matrix and spelled out below
    assert "over: max_custom_calls" in page
    assert page.count('<pre class="violation">') == 1
    assert "my_fused_kernel" in page
    assert "models.py:" in page
    # a failed test's row is among the problems; the passing ones are collapsed
    assert page.index("with problems</h3>") < page.index("without problems</summary>")


def test_plain_report_renders_without_optional_keys(report: dict[str, Any]) -> None:
    """Reports without runtime_share/rewrite/tooling/compiled keys: no numbers section."""
    for key in (
        "runtime_share",
        "kernels_to_rewrite",
        "rewrite_days",
        "rewrite",
        "tooling",
        "cost_model",
    ):
        report["summary"].pop(key, None)
    for site in report["summary"]["hotspots"]:  # the sites, without times
        site.update(seconds=None, share=None, basis=None)
    for test in report["tests"]:
        for check in test["checks"]:
            for entry in check["platforms"].values():
                entry.pop("runtime_share", None)
    page = html_report.html(typed(report))
    assert "3 of 4 checks lower on every configured platform" in page
    body = page.split("<body>")[1]
    assert 'id="numbers"' not in body
    assert "estimated" not in body
    assert "measured" not in body
    assert _bars(page) == 0
    assert "not scanned" in page


def test_compiled_level_counts_where_compiled(report: dict[str, Any]) -> None:
    check = next(t for t in report["tests"] if t["nodeid"].endswith("test_mlp"))["checks"][0]
    cuda = check["platforms"]["cuda"]
    kernels = [  # the counts are the kernels' (a report's vendor and custom are their sums)
        {"name": "cublas$gemm", "layer": "vendor", "library": "cublas", "kind": "gemm",
         "count": 7, "location": None},
        {"name": "my_kernel", "layer": "custom", "library": None, "kind": "pallas-triton",
         "count": 2, "location": None},
    ]  # fmt: skip
    cuda["compiled"] = {**cuda["lowered"], "level": "compiled", "vendor": 7, "custom": 2,
                        "libraries": {"cublas": 7}, "kernels": kernels, "deviceless": True,
                        "target": "h100"}  # fmt: skip
    page = html_report.html(typed(report))
    assert re.search(r'aria-label="cuda: lowers, vendor 7, custom 2 \(compiled deviceless h100\)',
                     page)  # fmt: skip
    assert '<span class="level compiled">compiled deviceless h100</span>' in page


def test_escapes_everything_from_the_report(report: dict[str, Any]) -> None:
    full = add_three_numbers(report)
    test = full["tests"][0]
    test["violations"] = [{"check": "x", "platform": "cuda", "key": "<k>", "origin": EVIL,
                           "what": "vendor calls", "limit": 0, "found": 1}]  # fmt: skip
    entry = test["checks"][0]["platforms"]["tpu"]
    entry["lowered"], entry["error"] = None, 'bad "quote" <img src=x onerror=alert(1)>'
    full["summary"]["rewrite"]["rocm"]["items"][0]["name"] = EVIL
    full["summary"]["hotspots"][0]["location"] = EVIL
    full["config"]["platforms"].append("<svg onload=alert(1)>")
    page = html_report.html(typed(full))
    assert EVIL in json.dumps(report)  # the parametrize id is in the node id
    assert "<script" not in page.lower()
    assert "onerror=alert" not in page.replace("onerror=alert(1)&gt;", "")
    assert "<svg onload" not in page
    assert "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "fused&lt;b&gt;bold&lt;/b&gt;" in page
    assert (
        'title="does not lower: bad &quot;quote&quot; &lt;img src=x onerror=alert(1)&gt;"' in page
    )


def test_self_contained_no_network(report: dict[str, Any]) -> None:
    page = html_report.html(typed(add_three_numbers(report)))
    assert "http://" not in page
    assert "https://" not in page
    for needle in ("<link", "<script", "@import", "url(", " src=", "<iframe", "<object"):
        assert needle not in page.lower(), needle
    assert "Content-Security-Policy" in page
    assert "default-src 'none'" in page


def test_deterministic_and_a_broken_report_is_refused_where_it_is_read(
    report: dict[str, Any],
) -> None:
    assert html_report.html(typed(report)) == html_report.html(typed(copy.deepcopy(report)))
    for broken in (
        {},
        {"summary": None, "tests": None, "config": 3},
        {"tests": [None, {"checks": [None, {"platforms": {"cpu": None}}]}]},
        {"summary": {"runtime_share": {"cpu": {"basis": "measured", "xla": "NaN"}, "x": 1},
                     "rewrite": {"rocm": {"breakdown": {"fixed": -1}, "items": [None]}},
                     "kernels_to_rewrite": {"rocm": None}, "layers": [None, {}],
                     "platforms": {"cpu": None}}},
    ):  # fmt: skip
        with pytest.raises(ReportError, match=r"^r\.json: "):  # never rendered half
            from_json({"schema_version": 2, "tool": {"name": "pytest-jaxport"}, **broken},
                      Path("r.json"))  # fmt: skip


# -- the page in a real browser -----------------------------------------------------------

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed here (.ci/run installs Debian's chromium)",
)
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
]  # fmt: skip


def load_in_chromium(page: Path, tmp: Path) -> tuple[str, list[str], Path]:
    """Open ``page``; return the DOM after load, the console lines, and a screenshot."""
    png = tmp / "shot.png"
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}",
         f"--screenshot={png}", "--window-size=1280,2000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console, png


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.slow
@needs_chromium
def test_loads_in_chromium_without_console_errors(report: dict[str, Any], tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(html_report.html(typed(add_three_numbers(report))), encoding="utf-8")
    dom, console, png = load_in_chromium(page, tmp_path)
    assert console == []
    assert "<title>pytest-jaxport portability report" in dom
    assert len(re.findall(r'<svg class="bar ', dom)) == 22
    assert len(re.findall(r'<rect class="seg ', dom)) > 22
    assert png_size(png) == (1280, 2000)
    assert png.stat().st_size > 30_000  # a rendered page, not a blank one


MEASURE = """<script>
window.addEventListener("load", () => {
  const tables = [...document.querySelectorAll("table.shares")].map((t) => {
    const box = t.parentElement;
    const libs = t.querySelector("td.libs").getBoundingClientRect();
    const time = t.querySelector("thead th:last-child").getBoundingClientRect();
    return {caption: t.caption.textContent, boxOverflow: box.scrollWidth - box.clientWidth,
            boxRight: box.getBoundingClientRect().right, libs: libs.width, timeRight: time.right};
  });
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({viewport: window.innerWidth,
                                    page: document.documentElement.scrollWidth, tables});
  document.body.appendChild(out);
});
</script>"""


def measure_in_chromium(page: str, tmp: Path, width: int, script: str = MEASURE) -> dict[str, Any]:
    """Load ``page`` in a ``width``-pixel window and measure its runtime-share tables (or what
    ``script`` measures; the page's own policy forbids scripts: the copy measured here drops
    it)."""
    measured = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    path = tmp / f"measure-{width}.html"
    path.write_text(measured.replace("</body>", script + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}",
         f"--window-size={width},1000", "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    data: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return data


def long_basis_labels(report: dict[str, Any]) -> dict[str, Any]:
    """Every share labelled as a real run labels it: the estimate's program and error band,
    a measured total that left checks out; and more libraries than fit a narrow column."""
    full = add_three_numbers(report)
    shares = [*full["summary"]["runtime_share"].values()]
    shares += [e["runtime_share"] for t in full["tests"] for c in t["checks"]
               for e in c["platforms"].values()]  # fmt: skip
    for share in shares:
        if share["basis"] == "estimated":
            share.update(estimated_from="lowered", error_points=37.2)
        else:
            share.update(checks=3, left_out=1)
        share["libraries"] = {**share["libraries"], "cusparse": 0.01, "cufft": 0.02, "nccl": 0.03}
    return full


@pytest.mark.slow
@needs_chromium
def test_runtime_share_tables_fit_1280_to_1920_pixels(
    report: dict[str, Any], tmp_path: Path
) -> None:
    page = html_report.html(typed(long_basis_labels(report)))
    assert "estimated (roofline from the lowered program, ±37 points" in page  # said once
    for width in (1280, 1400, 1600, 1920):
        data = measure_in_chromium(page, tmp_path, width)
        assert data["page"] <= width, (width, data)  # nothing widens the page
        assert len(data["tables"]) == 5  # the suite's and each check's
        for table in data["tables"]:
            assert table["boxOverflow"] <= 0, (width, table)  # no sideways scrolling
            assert table["timeRight"] <= table["boxRight"] + 1, (width, table)
            assert table["libs"] >= 150, (width, table)  # libraries readable, not one letter


EVERY_TABLE = """<script>
window.addEventListener("load", () => {
  const tables = [...document.querySelectorAll("table")].map((t) => {
    const box = t.parentElement;
    return {table: t.className, overflow: box.scrollWidth - box.clientWidth};
  });
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({viewport: window.innerWidth,
                                    page: document.documentElement.scrollWidth, tables});
  document.body.appendChild(out);
});
</script>"""


def every_column(report: dict[str, Any]) -> dict[str, Any]:
    """:func:`long_basis_labels`, and every platform with every column the platform totals
    can have: compiled and failed to compile, collectives, findings, both paddings and the
    relayouts (a TPU-first project's compiled tpu, issue 55)."""
    full = long_basis_labels(report)
    for totals in full["summary"]["platforms"].values():
        totals.update(
            compiled=totals["lowered"], failed_to_compile=1,
            collectives={"all-reduce": {"count": 12, "inserted": 4}},
            format_findings=1234, layout_findings=567, not_compiling=1, padding_waste=0.109,
            padding_bytes=65536.0, compiled_padding_waste=0.038, compiled_padding_bytes=4096.0,
            relayouts=12, relayout_bytes=1.0e6, format_sites=14, layout_sites=3,
            libraries={"hipsolver": 1234, "hipblaslt": 1234, "jaxlib": 123, "libtpu": 12},
        )  # fmt: skip
    return full


@needs_chromium
def test_no_table_scrolls_sideways_from_1280_to_1920_pixels(
    report: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 55, item 12: the platform totals scrolled sideways at 1,400 px (every column
    of a compiled tpu), against the docs' promise of 1,280 to 1,920."""
    page = html_report.html(typed(every_column(report)))
    for width in (1280, 1400, 1600, 1920):
        data = measure_in_chromium(page, tmp_path, width, script=EVERY_TABLE)
        assert data["page"] <= width, (width, data)
        assert "totals" in {t["table"] for t in data["tables"]}
        assert [t for t in data["tables"] if t["overflow"] > 0] == [], width


@pytest.mark.slow
@needs_chromium
def test_chromium_harness_sees_console_errors(tmp_path: Path) -> None:
    """The check above would catch an error: a page that throws and fetches is reported."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="default-src '
        '\'none\'"><title>t</title><img src="https://example.invalid/x.png" alt="">'
    )
    _, console, _ = load_in_chromium(page, tmp_path)
    assert any("Content Security Policy" in line for line in console), console


@pytest.mark.slow
@needs_chromium
def test_screenshot_script(report: dict[str, Any], tmp_path: Path) -> None:
    source = tmp_path / "r.json"
    source.write_text(json.dumps(add_three_numbers(report)))
    png = tmp_path / "full.png"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "screenshot_report.py"), str(source), str(png)],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    width, height = png_size(png)
    assert width == 1280
    assert height > 2000
