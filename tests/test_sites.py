"""The sites tables (``view/viewmodel/sites.py``): one row per distinct site, each row saying
what it is apart from the others."""

from __future__ import annotations

from pytest_jaxport.model.hotspots import Hotspot
from pytest_jaxport.view.viewmodel.sites import hotspot_cells, twin_sites


def _libtpu(name: str, kind: str, dispatches: int = 1) -> Hotspot:
    return Hotspot(platform="tpu", location="model.py:35", layer="vendor", name=name, kind=kind,
                   library="libtpu", checks=1, tests=1, dispatches=dispatches)  # fmt: skip


def test_two_sites_that_read_the_same_at_one_line_say_how_they_differ() -> None:
    """Issue 55, item 2: two rows ``model.py:35 libtpu triangular-inverse`` (libtpu's Lower
    and Upper routines) and two ``libtpu lu`` (the lowered LuDecomposition of a check that
    did not compile, the compiled LuDecompositionBlock of one that did) read alike."""
    sites = [
        _libtpu("InvertDiagBlocksLowerTriangular", "triangular-inverse"),
        _libtpu("InvertDiagBlocksUpperTriangular", "triangular-inverse"),
        _libtpu("LuDecomposition", "lu"),
        _libtpu("LuDecompositionBlock", "lu", dispatches=2),
        _libtpu("stablehlo.triangular_solve", "triangular-solve"),
    ]
    twins = twin_sites(sites)
    kernels = [hotspot_cells(site, twins)[1] for site in sites]
    assert kernels == [
        "libtpu triangular-inverse (InvertDiagBlocksLowerTriangular)",
        "libtpu triangular-inverse (InvertDiagBlocksUpperTriangular)",
        "libtpu lu (LuDecomposition)",
        "libtpu lu (LuDecompositionBlock)",
        "libtpu triangular-solve",  # alone at its line: as before
    ]
    assert len(set(kernels)) == len(kernels)
    # the same routine at another line, or on another platform, is no twin
    elsewhere = [sites[0], Hotspot(**{**_libtpu("X", "triangular-inverse").to_dict(),
                                      "name": "InvertDiagBlocksUpperTriangular",
                                      "location": "model.py:40"})]  # fmt: skip
    assert twin_sites(elsewhere) == frozenset()


def test_every_format_names_twin_sites_apart() -> None:
    from helpers import built_report

    from pytest_jaxport.model.census import Census, Kernel, SourceLocation
    from pytest_jaxport.model.probe import PlatformProbe, Probe
    from pytest_jaxport.view.display import DisplayOptions
    from pytest_jaxport.view.html import html
    from pytest_jaxport.view.markdown import markdown
    from pytest_jaxport.view.text import text

    at = SourceLocation(file="model.py", line=35)
    kernels = tuple(
        Kernel(layer="vendor", name=f"InvertDiagBlocks{side}Triangular",
               kind="triangular-inverse", library="libtpu", location=at)
        for side in ("Lower", "Upper")
    )  # fmt: skip
    tpu = PlatformProbe(
        platform="tpu",
        present=False,
        census=Census(platform="tpu"),
        compiled=Census(platform="tpu", level="compiled", kernels=kernels),
    )
    probe = Probe(name="solve", reference="cpu", platforms={"tpu": tpu})
    test = {"nodeid": "t.py::test_solve", "outcome": "passed", "checks": [probe.to_dict()]}
    report = built_report([test], config={"platforms": ["tpu"], "reference": "cpu",
                                          "home": "tpu"})  # fmt: skip
    # -v's sites table puts a long kernel's rest on a line of its own, under the kernel
    said = text(report, DisplayOptions(verbosity=1)).splitlines()
    for side in ("Lower", "Upper"):
        at_line = said.index(f"               (InvertDiagBlocks{side}Triangular)")
        assert said[at_line - 1].startswith("  model.py:35  libtpu triangular-inverse ")
    for rendered in (markdown(report), html(report)):
        for side in ("Lower", "Upper"):
            assert f"libtpu triangular-inverse (InvertDiagBlocks{side}Triangular)" in rendered
