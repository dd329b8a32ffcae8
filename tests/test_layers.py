"""The layers table (``view/viewmodel/layers.py``): each layer's line, counted as the rest of
the report counts it."""

from __future__ import annotations

from helpers import built_report

from pytest_jaxport.model.census import Census, SourceLocation
from pytest_jaxport.model.devices import DEFAULT_DEVICES
from pytest_jaxport.model.findings import Finding, FormatCensus
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.html import html
from pytest_jaxport.view.text import text
from pytest_jaxport.view.viewmodel.build import build_view


def _finding(rule: str, level: str, line: int, count: int) -> Finding:
    return Finding(kind="layout", rule=rule, platform="tpu", level=level,  # type: ignore[arg-type]
                   location=SourceLocation(file="model.py", line=line), count=count,
                   effect="relayout")  # fmt: skip


def _compiled_with_relayouts() -> Probe:
    """A tpu check with 2 misaligned matrix-unit findings in its lowered program and 3
    relayouts the compiler inserted (a finding of the compiled program)."""
    device = DEFAULT_DEVICES["tpu"]
    lowered = FormatCensus(
        platform="tpu",
        device=device,
        findings=(_finding("matrix-unit-misaligned", "lowered", 7, 2),),
    )
    compiled = FormatCensus(
        platform="tpu",
        device=device,
        level="compiled",
        findings=(_finding("inserted-relayout", "compiled", 8, 3),),
    )
    result = PlatformProbe(
        platform="tpu",
        present=False,
        census=Census(platform="tpu"),
        formats=lowered,
        compiled=Census(platform="tpu", level="compiled"),
        compiled_formats=compiled,
        deviceless=True,
        target="v5e",
    )
    return Probe(name="f", reference="cpu", platforms={"tpu": result})  # fmt: skip


def test_the_layout_findings_line_counts_what_its_rules_and_the_sites_count() -> None:
    """Issue 55, item 2: "2 layout findings (inserted-relayout 3, matrix-unit-misaligned 2)"
    in the layers, "5 findings at 4 sites" in the sites: the total left out the compiled
    program's findings that its own rules listed. Every format now says 5."""
    test = {"nodeid": "t.py::test_f", "outcome": "passed",
            "checks": [_compiled_with_relayouts().to_dict()]}  # fmt: skip
    report = built_report([test], config={"platforms": ["tpu"], "reference": "cpu"})
    view = build_view(report)
    [row] = [r for r in view.layers if r.layer.startswith("numeric formats")]
    assert "5 layout findings (inserted-relayout 3, matrix-unit-misaligned 2)" in row.value
    group = view.layout_group("tpu")
    assert group is not None
    assert group.findings == 5
    assert report.summary.platforms["tpu"].layout_findings == 5
    said = " ".join(text(report, DisplayOptions(verbosity=1)).split())
    assert "5 layout findings (inserted-relayout 3, matrix-unit-misaligned 2)" in said
    assert "5 findings at 2 sites" in html(report)


def test_the_vendor_layer_says_which_calls_have_no_counterpart() -> None:
    """Issue 55, item 12: the Layers table said vendor calls' "counterpart usually exists"
    above a rewrite table that listed them as "no counterpart": where a move has vendor gaps,
    the layer says how many."""
    from pytest_jaxport.model.census import Kernel
    from pytest_jaxport.model.cost import CostModel
    from pytest_jaxport.report.summary import Pricing

    fmha = Kernel(layer="vendor", name="__cudnn$fmhaSoftmax", kind="attention",
                  library="cudnn", location=SourceLocation(file="model.py", line=9))  # fmt: skip
    probe = Probe(name="attention", reference="cpu", platforms={
        "cuda": PlatformProbe(platform="cuda", present=False,
                              census=Census(platform="cuda", kernels=(fmha,))),
        "tpu": PlatformProbe(platform="tpu", present=False, census=Census(platform="tpu")),
    })  # fmt: skip
    test = {"nodeid": "t.py::test_attention", "outcome": "passed", "checks": [probe.to_dict()]}
    config = {"platforms": ["cuda", "tpu"], "reference": "cpu", "migrate_to": ["tpu"]}
    pricing = Pricing(migrate_to=("tpu",), model=CostModel())
    view = build_view(built_report([test], config=config, pricing=pricing))
    [row] = [r for r in view.layers if r.layer == "vendor-library calls"]
    assert row.portable == "NVIDIA-bound, counterpart usually exists (none for 1 vendor gap)"
    [target] = view.targets
    assert [i.status for i in target.items] == ["vendor-gap"]
