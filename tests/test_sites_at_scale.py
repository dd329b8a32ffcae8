"""Tests of pytest_jaxport.view.viewmodel.sites: the layout layer's sites.

The layout layer does not swamp the report (issue 43): many small 3-channel images.

A real suite audited through pytester, its jitted functions working on ``(H, W, 3)`` images
of several shapes at many source lines, gets a tile-padding finding for tpu at every line
(the two minor dimensions, ``(W, 3)``, pad to ``(8, 128)`` tiles). At the default verbosity
each platform's layout findings are one line under its sites table, grouped by rule and
ranked by calls, the top sites named; the rows are one option away (``-v``, or
``--jaxport-report-details=all``) in the terminal and the Markdown, and collapsed in the HTML.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from pytest_jaxport.cli import main
from pytest_jaxport.view.formatting import number, plural
from pytest_jaxport.view.viewmodel.sites import LAYOUT_DETAIL

pytestmark = pytest.mark.slow  # an audited suite through pytester

LINES = 12
"""Distinct source lines of jitted image functions, each a tile-padding site on tpu."""
SHAPES = ((96, 80), (131, 111))

PYPROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
"""


def _suite() -> str:
    lines = [
        "import jax",
        "import jax.numpy as jnp",
        "import pytest",
        "",
        f"SHAPES = {list(SHAPES)!r}",
        "KERNEL = jnp.ones((3, 3, 1, 3), jnp.float32) / 9",
        "",
        "",
        "@pytest.mark.parametrize('shape', SHAPES)",
        "def test_blur(shape):",
        "    im = jnp.ones((*shape, 3), jnp.float32)",
        "    f = jax.jit(lambda im: jax.lax.conv_general_dilated(",
        "        im[None], KERNEL, (1, 1), 'SAME', dimension_numbers=('NHWC', 'HWIO', 'NHWC'),",
        "        feature_group_count=3)[0])",
        "    f(im).block_until_ready()",
    ]
    for i in range(LINES):
        lines += [
            "",
            "",
            "@pytest.mark.parametrize('shape', SHAPES)",
            f"def test_op{i}(shape):",
            "    im = jnp.ones((*shape, 3), jnp.float32)",
            f"    f = jax.jit(lambda im: jnp.tanh(im * {i + 1}.0).sum(-1, keepdims=True) * im)",
            "    f(im).block_until_ready()",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def images(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject=PYPROJECT)
    pytester.makepyfile(test_images=_suite())
    return pytester


def _section(output: str) -> list[str]:
    """The lines of the terminal's jaxport report section."""
    after = output.split(" jaxport portability report ")[1].split("\n", 1)[1]
    return re.split(r"^=+ .* =+$", after, maxsplit=1, flags=re.MULTILINE)[0].strip().splitlines()


def _layout_sites(report: dict[str, Any], platform: str) -> list[dict[str, Any]]:
    """The audit's layout sites of ``platform`` in the JSON report."""
    sites: list[dict[str, Any]] = report["audit"]["sites"]
    return [s for s in sites if s["platform"] == platform and s["layer"] == "layout"]


def _summary(report: dict[str, Any], platform: str) -> str:
    """The start of the group's line as the JSON's sites make it: findings and sites."""
    sites = _layout_sites(report, platform)
    findings = sum(s["count"] for s in sites)
    return f"{platform} layout: {plural(findings, 'finding')} at {plural(len(sites), 'site')}"


def _show(path: str, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    """``jaxport show`` of a report file: the lines the plugin's terminal section prints."""
    capsys.readouterr()
    assert main(["show", path, *args]) == 0
    return capsys.readouterr().out.strip().splitlines()


def _sites_part(section: list[str]) -> tuple[list[str], int]:
    """The sites table's lines (its title to the blank line after it) and where they end."""
    start = next(i for i, line in enumerate(section) if line.startswith("where the lock-in"))
    end = section.index("", start)
    return section[start:end], end


def test_default_terminal_says_the_layout_layer_in_one_bounded_group(
    images: pytest.Pytester,
) -> None:
    result = images.runpytest(
        "--jaxport-audit", "--jaxport-report", "--jaxport-report-platform=tpu"
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    section = _section(result.stdout.str())
    sites_part, end = _sites_part(section)
    found = re.search(r"on tpu: (\d+) distinct sites", sites_part[0])
    assert found is not None, sites_part
    assert int(found.group(1)) > LINES  # every image line pads on tpu
    joined = " ".join(" ".join(sites_part).split())
    assert re.search(
        r"tpu layout: [\d,]+ findings at \d+ sites \(tile-padding [\d,]+.*\); padding \d+% of "
        r"bytes moved; top: test_images.py:\d+ \([\d,]+ calls",
        joined,
    ), joined
    assert LAYOUT_DETAIL in joined
    # bounded: no layout row in the table, the part a few lines however many sites there are
    assert not any("tile-padding (padded)" in line for line in sites_part), sites_part
    assert len(sites_part) <= 8 < int(found.group(1)), sites_part
    # and the three numbers still shown after it
    for numbered in ("1. runtime share", "2. kernels to rewrite", "3. engineering days"):
        assert any(line.startswith(numbered) for line in section[end:]), numbered


def test_every_format_groups_the_layout_layer_with_its_rows_one_option_away(
    images: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    result = images.runpytest(
        "--jaxport-audit", "--jaxport-report=report.json", "--jaxport-report=report.md",
        "--jaxport-report=report.html",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()[-3000:]
    path = str(images.path / "report.json")
    report = json.loads((images.path / "report.json").read_text())
    sites = _layout_sites(report, "tpu")
    assert Counter(s["name"] for s in sites)["tile-padding"] > LINES, sites

    # the terminal (jaxport show renders as the plugin does): one line, from the JSON's sites
    shown = _show(path, capsys, "--platform", "tpu")
    sites_part, end = _sites_part(shown)
    joined = " ".join(" ".join(sites_part).split())
    assert _summary(report, "tpu") in joined, joined
    heaviest = max(sites, key=lambda s: (s["count"], s["computations"]))
    assert f"top: {heaviest['location']} ({number(heaviest['count'])} calls" in joined
    assert not any("(padded)" in line for line in sites_part), sites_part
    assert any(line.startswith("1. runtime share") for line in shown[end:])
    # -v (every row with --top 0) and --details=all list every layout site, no group line
    for option in ("-v", "--details=all"):
        listed = _show(path, capsys, "--platform", "tpu", "--top", "0", option)
        rows = {line.split()[0] for line in listed if "(padded)" in line}
        assert rows == {s["location"] for s in sites if s["name"] == "tile-padding"}, option
        assert not any(line.lstrip().startswith("tpu layout:") for line in listed), option

    # Markdown: the group's line, no layout row in the tpu sites table
    markdown = (images.path / "report.md").read_text()
    assert _summary(report, "tpu") in markdown
    tpu_part = markdown.split("on tpu:", 1)[1].split("###", 1)[0]
    assert "(padded)" not in tpu_part, tpu_part
    # HTML: the same line, every layout site in a collapsed block, none in the open table
    page = (images.path / "report.html").read_text()
    assert _summary(report, "tpu") in page
    block = page.split('<details class="more layout">', 1)
    assert len(block) == 2, "no collapsed layout block"
    collapsed = block[1].split("</details>", 1)[0]
    tpu_block = [b for b in page.split('<details class="more layout">')[1:]
                 if "tpu layout findings" in b.split("</summary>", 1)[0]]  # fmt: skip
    assert len(tpu_block) == 1
    collapsed = tpu_block[0].split("</details>", 1)[0]
    assert all(f"<code>{s['location']}</code>" in collapsed for s in sites)
    assert collapsed.count('<tr class="layout">') == len(sites)
    opened = page.split('<p class="layout-summary">tpu layout', 1)[0].rsplit("<h3>", 1)[1]
    assert "(padded)" not in opened
