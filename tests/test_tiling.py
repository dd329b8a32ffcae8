"""Tests of pytest_jaxport.model.tiling and the compiled level's padding on tpu.

TPU layout, padding and refusals from the compiler (issue 48).

Three sources, each checked against the others:

- the compiler itself, without a TPU: real models (flax linen and nnx, equinox, haiku) and
  the research's probes compiled by libtpu in a process of their own
  (``benchmarks/fidelity/tpu_layouts.py --compile``), read by the compiled HLO reader and judged by
  ``take_format_census`` at the compiled level; skipped, saying so, where libtpu is missing;
- the recordings of the compiler (``benchmarks/results/tpu-layouts.json`` and
  ``tpu-refusals.json``: every libtpu release measured), which the lowered model and the rule
  table must reproduce: these run everywhere, CI included;
- hand-computed layouts and bytes.

Real JAX, real lowering, real libtpu; nothing is mocked.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import built_report, typed

from pytest_jaxport._jax import lowering, stablehlo, tracing
from pytest_jaxport.model.census import Census, CompiledMemory, Program, SourceLocation
from pytest_jaxport.model.counts import FormatCounts
from pytest_jaxport.model.devices import DEFAULT_DEVICES, Device
from pytest_jaxport.model.evaluation import evaluate
from pytest_jaxport.model.findings import Finding, FormatCensus, MemoryFootprint, memory_footprint
from pytest_jaxport.model.format_census import take_format_census
from pytest_jaxport.model.format_rules import FORMAT_RULES
from pytest_jaxport.model.hlo import parse_compiled_hlo
from pytest_jaxport.model.platforms import installed_release
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.model.pyproject import parse_project
from pytest_jaxport.model.tiling import default_layout, read_layouts
from pytest_jaxport.report.baseline import diff
from pytest_jaxport.report.document import Report
from pytest_jaxport.view.display import DisplayOptions
from pytest_jaxport.view.html import html
from pytest_jaxport.view.markdown import markdown
from pytest_jaxport.view.text import text

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK = ROOT / "benchmarks" / "fidelity" / "tpu_layouts.py"
MODULE = "benchmarks.fidelity.tpu_layouts"
LAYOUTS = ROOT / "benchmarks" / "results" / "tpu-layouts.json"
REFUSALS = ROOT / "benchmarks" / "results" / "tpu-refusals.json"
LIBTPU = installed_release("libtpu")
needs_libtpu = pytest.mark.skipif(
    not LIBTPU, reason='libtpu is not installed (pip install "pytest-jaxport[tpu]")'
)

sys.path.insert(0, str(ROOT))  # the benchmarks package, as `python -m` from the root finds it
from benchmarks.fidelity import tpu_layouts  # noqa: E402  (the programs and refusal cases)

# -- layouts as the compiler prints them ------------------------------------------------------


def test_a_printed_layout_reads_as_the_bytes_the_compiler_counts() -> None:
    """The chip's own numbers (research tpu.md §3b), each computed from its layout string."""
    (batch,) = read_layouts("f32[4096,100]{0,1:T(8,128)}")
    assert (batch.data_bytes, batch.bytes, batch.physical_dims) == (1_638_400, 1_703_936,
                                                                    (104, 4096))  # fmt: skip
    (image,) = read_layouts("f32[8,64,64,3]{2,1,3,0:T(8,128)}")
    assert image.bytes == 786_432 == 2 * image.data_bytes
    (packed,) = read_layouts("bf16[1000,1000]{1,0:T(8,128)(2,1)}")
    assert packed.bytes == 2_048_000
    (int4,) = read_layouts("s4[256,256]{1,0:T(64,128)(8,1)E(4)}")
    assert (int4.bits, int4.bytes) == (4, 32_768)
    # a tuple (an asynchronous copy's), a prefetched array (S(1): VMEM), a scalar
    copy = read_layouts(
        "(f32[65536,10]{0,1:T(8,128)S(1)}, f32[65536,10]{0,1:T(8,128)}, u32[]{:S(2)})"
    )
    assert [(x.memory_space, x.bytes) for x in copy] == [(1, 4_194_304), (0, 4_194_304), (2, 4)]
    assert str(copy[0]) == "f32[65536,10]{0,1:T(8,128)S(1)}"
    # what a CPU or GPU prints: row-major, untiled, no padding
    (plain,) = read_layouts("f32[3,5]{1,0}")
    assert not plain.tiled
    assert plain.bytes == plain.data_bytes == 60


def test_the_model_lays_out_arrays_as_the_compiler_does() -> None:
    assert str(default_layout((4096, 100), "f32")) == "f32[4096,100]{0,1:T(8,128)}"
    assert str(default_layout((4096, 3), "f32")) == "f32[4096,3]{0,1:T(4,128)}"
    assert str(default_layout((2, 4096), "f32")) == "f32[2,4096]{1,0:T(2,128)}"
    assert str(default_layout((1, 4096), "f32")) == "f32[1,4096]{1,0:T(1,128)}"
    assert str(default_layout((8, 64, 64, 3), "f32")) == "f32[8,64,64,3]{2,1,3,0:T(8,128)}"
    assert str(default_layout((100, 100, 3), "u8")) == "u8[100,100,3]{1,0,2:T(8,128)(4,1)}"
    assert str(default_layout((64, 64), "s8")) == "s8[64,64]{1,0:T(32,128)(4,1)}"
    assert str(default_layout((7,), "bf16")) == "bf16[7]{0:T(256)(128)(2,1)}"


def _recorded(path: Path) -> dict[str, Any]:
    runs: dict[str, Any] = json.loads(path.read_text())["runs"]
    assert runs, f"{path} records no run"
    return runs


def test_the_model_reproduces_every_layout_the_compiler_was_seen_to_choose() -> None:
    """Every array of every recorded libtpu release, and the chip's: the layout string and
    the bytes, exactly (rank 0 aside: left untiled, never large)."""
    runs = _recorded(LAYOUTS)
    assert {"libtpu 0.0.42.1", "libtpu 0.0.52"} <= set(runs)
    compared = 0
    for release, run in runs.items():
        for array in run["shapes"]["arrays"]:
            (chosen,) = read_layouts(array["compiler"])
            model = default_layout(tuple(array["shape"]), chosen.element)
            where = (release, array["compiler"])
            assert chosen.bytes == array["argument_bytes"], where  # the arithmetic
            assert (str(model), model.bytes) == (array["compiler"], array["argument_bytes"]), where
            compared += 1
        for array in run["chip"]["arrays"]:
            (chosen,) = read_layouts(array["chip"])
            model = default_layout(tuple(array["shape"]), chosen.element)
            assert (str(model), model.bytes) == (array["chip"], array["chip_bytes"])
        # the model it replaces was 42.7x off for (4096, 3) and (8, 64, 64, 3)
        assert run["shapes"]["summary"]["naive_over_compiler_max"] >= 40
        generations = run["generations"]
        assert all(g["same_as_v5e"] == g["arrays"] > 0 for g in generations.values())
    assert compared > 800


def test_the_rule_table_agrees_with_every_refusal_recorded() -> None:
    """For each libtpu release recorded, each case lowered here and judged for that release
    says "does not compile" exactly where the compiler refused it."""
    cases = _lowered_refusal_cases()
    for release, run in _recorded(REFUSALS).items():
        version = release.removeprefix("libtpu ")
        device = Device(platform="tpu", generation="v5e", compiler=version)
        for name, recorded in run["cases"].items():
            judged = take_format_census(cases[name], "tpu", device=device)
            refused = sorted({f.rule for f in judged.not_compiling})
            assert (not refused) == recorded["compiles"], (release, name, refused, recorded)
        chip = run["chip"]  # what the lent TPU v5e refused and ran
        device = Device(platform="tpu", generation="v5e", compiler=chip["libtpu"])
        for name in (*chip["refused"], *chip["compiled"]):
            judged = take_format_census(cases[name], "tpu", device=device)
            assert bool(judged.not_compiling) == (name in chip["refused"]), (name, chip)
    releases = set(_recorded(REFUSALS))
    assert {"libtpu 0.0.42.1", "libtpu 0.0.52"} <= releases


_PROGRAMS: dict[str, Program] = {}


def _lowered_refusal_cases() -> dict[str, Program]:
    if not _PROGRAMS:
        with tpu_layouts._x64():
            for name, (fn, args) in tpu_layouts.refusal_cases().items():
                traced = tracing.trace(fn, args, {})
                _PROGRAMS[name] = stablehlo.read_program(lowering.lower(traced.traced, "tpu"))
    return _PROGRAMS


def test_a_rule_keyed_by_a_release_says_so_and_holds_where_the_release_is_unknown() -> None:
    (lu,) = (r for r in FORMAT_RULES if r.name == "float64-lu-not-compiled")
    assert lu.release_text == "libtpu < 0.0.50"
    assert lu.applies(Device(platform="tpu", generation="v5e"))  # unknown: it holds
    assert lu.applies(Device(platform="tpu", generation="v5e", compiler="0.0.42.1"))
    assert not lu.applies(Device(platform="tpu", generation="v5e", compiler="0.0.50.1"))
    (refused,) = take_format_census(_lowered_refusal_cases()["solve_c128"], "tpu").not_compiling
    assert refused.detail.endswith("[libtpu < 0.0.50]")
    assert refused.formats == ("complex128",)


# -- the compiler, without a TPU ----------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled() -> dict[str, Program]:
    """Every program of the catalogue compiled for TPU v5e by the installed libtpu, in a
    process of its own (libtpu's lockfile, and this process's CPU backend, stay untouched)."""
    if not LIBTPU:
        pytest.skip('libtpu is not installed (pip install "pytest-jaxport[tpu]")')
    names = ",".join(tpu_layouts.PROGRAMS)
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--compile", names],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, **tpu_layouts.DEVICELESS_ENVIRONMENT},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return {
        name: replace(
            parse_compiled_hlo(found["hlo"]), memory=CompiledMemory.from_stats(found["memory"])
        )
        for name, found in json.loads(done.stdout).items()
    }


def _lowered(name: str) -> Program:
    fn, args = tpu_layouts.PROGRAMS[name]()
    return stablehlo.read_program(lowering.lower(tracing.trace(fn, args, {}).traced, "tpu"))


@pytest.mark.slow
@needs_libtpu
def test_the_compiler_counts_every_programs_arguments_as_their_layouts_take(
    compiled: dict[str, Program],
) -> None:
    for name, program in compiled.items():
        assert program.memory is not None, name
        arguments = read_layouts(program.entry_layout.rpartition("->")[0])
        assert arguments, name
        assert sum(a.bytes for a in arguments) == program.memory.argument, name
        footprint = memory_footprint(program)
        assert footprint is not None, name
        assert footprint.counted, name
        assert footprint.argument_data == sum(a.data_bytes for a in arguments), name


@pytest.mark.slow
@needs_libtpu
def test_a_4096_by_100_batch_takes_4_percent_more_as_the_chip_measured(
    compiled: dict[str, Program],
) -> None:
    """x (4096, 100) f32 with the 4096 minor: 1,703,936 bytes (the chip's figure); w
    (100, 128) f32: 100 rows pad to 104, 53,248 bytes. The lowered model says the same of x,
    where the naive tile said 2,097,152."""
    result = take_format_census(compiled["matmul_4096x100"], "tpu", level="compiled")
    assert result.memory is not None
    assert result.memory == MemoryFootprint(
        argument_data=1_638_400 + 51_200, argument_bytes=1_703_936 + 53_248,
        output_data=2_097_152, output_bytes=2_097_152, temp_bytes=result.memory.temp_bytes,
        counted=True,
    )  # fmt: skip
    assert result.memory.describe().startswith(
        "arguments 1.7 MiB for 1.6 MiB of data (+4%), outputs 2.0 MiB for 2.0 MiB of data"
    )
    padded = result.by_rule("tile-padding")
    assert padded
    assert all(f.level == "compiled" for f in padded)
    assert {f.detail.split(" as ")[0] for f in padded} == {"float32[4096,100]"}
    # x's 65,536 bytes of padding each time an op reads or writes it (the fusion, and the
    # prefetch into VMEM that reads and writes it), beside the (4096, 128) result's none
    padding, moved = result.padding_bytes
    reads = round(padding / 65_536)
    assert reads in (1, 2, 3)
    assert (padding, moved) == (reads * 65_536, reads * 1_703_936 + 2_097_152)
    lowered = take_format_census(_lowered("matmul_4096x100"), "tpu")
    assert lowered.padding_bytes == (65_536, 1_703_936 + 2_097_152)


@pytest.mark.slow
@needs_libtpu
@pytest.mark.parametrize(
    "name", ["flax_linen_cnn", "flax_nnx_mlp", "equinox_mlp", "haiku_convnet", "mlp_grad"]
)
def test_real_models_compiled_padding_is_sane_and_placed_at_their_lines(
    compiled: dict[str, Program], name: str
) -> None:
    """The compiler's padding of library models: a share of the bytes moved, at lines of the
    library's code or the user's, each finding a layout the compiler printed; the arguments
    at least their data."""
    result = take_format_census(compiled[name], "tpu", level="compiled")
    lowered = take_format_census(_lowered(name), "tpu")
    assert 0.0 <= result.padding_waste < 1.0
    assert 0.0 <= lowered.padding_waste < 1.0
    assert result.tiled_bytes > 0
    assert result.memory is not None
    assert result.memory.argument_bytes >= result.memory.argument_data > 0
    for finding in result.by_rule("tile-padding"):
        assert " as {" in finding.detail
        assert ":T(" in finding.detail
        assert 0 < finding.fraction < 1
    located = [f.location for f in result.findings if f.location is not None]
    assert all(isinstance(at, SourceLocation) for at in located)


@pytest.mark.slow
@needs_libtpu
def test_a_flax_cnn_on_rgb_images_is_padded_where_its_convolutions_keep_features_minor(
    compiled: dict[str, Program],
) -> None:
    """The compiler keeps a convolution's 32 features in the 128 lanes (3/4 of them padding)
    where the lowered model puts its 64-wide image rows there: the compiled figure is the
    compiler's, the lowered one a model (docs/reference.md)."""
    result = take_format_census(compiled["flax_linen_cnn"], "tpu", level="compiled")
    details = [f.detail for f in result.by_rule("tile-padding")]
    assert any(d.startswith("float32[8,64,64,32] as {3,") for d in details), details
    lowered = take_format_census(_lowered("flax_linen_cnn"), "tpu")
    assert result.padding_waste > lowered.padding_waste
    # at the lines of the model's own code (flax's frames are a library's)
    source, first = inspect.getsourcelines(tpu_layouts.flax_linen_cnn)
    lines = range(first, first + len(source))
    placed = {(f.location.file, f.location.line) for f in result.findings if f.location}
    assert placed
    assert all(file == str(BENCHMARK) and line in lines for file, line in placed), placed


@pytest.mark.slow
@needs_libtpu
def test_the_installed_libtpu_refuses_what_the_rules_say_it_refuses(tmp_path: Path) -> None:
    out = tmp_path / "refusals.json"
    cases = "solve_f64,nextafter_f64,dot_i64,bitcast_f64_to_i64"
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "--part", "refusals", "--cases", cases, "--out",
         str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, **tpu_layouts.DEVICELESS_ENVIRONMENT},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = json.loads(out.read_text())["runs"].values()
    assert set(run["cases"]) == set(cases.split(","))
    for name, found in run["cases"].items():
        assert found["agree"], (name, found)
    assert run["cases"]["dot_i64"]["compiler_said"].startswith(
        "JaxRuntimeError: UNIMPLEMENTED: While rewriting computation to not contain X"
    )
    assert run["cases"]["bitcast_f64_to_i64"]["compiles"]


# -- the two levels side by side, in every format ---------------------------------------------


def _finding(level: str, padding: int) -> Finding:
    return Finding(kind="layout", rule="tile-padding", platform="tpu", level=level,  # type: ignore[arg-type]
                   location=SourceLocation(file="model.py", line=12), effect="padded",
                   detail="float32[4096,100] as {0,1:T(8,128)}: 104x4096",
                   amount=padding, of=1_703_936, unit="bytes")  # fmt: skip


LOWERED = FormatCensus(platform="tpu", device=DEFAULT_DEVICES["tpu"],
                       findings=(_finding("lowered", 425_984),), tiled_bytes=1_703_936)  # fmt: skip
COMPILED = FormatCensus(
    platform="tpu", device=DEFAULT_DEVICES["tpu"], level="compiled",
    findings=(_finding("compiled", 65_536),), tiled_bytes=1_703_936,
    memory=MemoryFootprint(argument_data=1_638_400, argument_bytes=1_703_936,
                           output_data=12, output_bytes=512, temp_bytes=0, counted=True),
)  # fmt: skip


def _probe(*, compiled: bool = True) -> Probe:
    result = PlatformProbe(
        platform="tpu", present=False, census=Census(platform="tpu"), formats=LOWERED,
        compiled=Census(platform="tpu", level="compiled") if compiled else None,
        compiled_formats=COMPILED if compiled else None, deviceless=compiled,
        target="v5e" if compiled else None,
    )  # fmt: skip
    return Probe(name="batch", reference="cpu", platforms={"tpu": result})


def _report(probe: Probe) -> Report:
    test = {"nodeid": "t.py::test_batch", "outcome": "passed", "checks": [probe.to_dict()]}
    return built_report([test], config={"platforms": ["tpu"], "reference": "cpu"},
                        environment={})  # fmt: skip


def test_max_padding_waste_judges_the_compilers_layouts_where_tpu_was_compiled() -> None:
    project = parse_project({"budget": {"tpu": {"max_padding_waste": 0.03}}}, "pyproject.toml")
    (compiled,) = evaluate(_probe(), project.resolve().budget)
    assert compiled.headline() == (
        "tpu: 3.8% of bytes moved are padding > 3.0% (max_padding_waste, set in pyproject.toml "
        "[tool.jaxport.budget.tpu]); check 'batch', compiled (deviceless v5e)"
    )
    (lowered,) = evaluate(_probe(compiled=False), project.resolve().budget)
    assert lowered.headline().endswith("check 'batch', lowered (layout model)")
    assert lowered.found == "25.0%"
    loose = parse_project({"budget": {"tpu": {"max_padding_waste": 0.1}}}, "pyproject.toml")
    assert evaluate(_probe(), loose.resolve().budget) == []  # the model's 25% does not judge


def test_every_format_shows_the_lowered_and_compiled_padding_side_by_side() -> None:
    report = _report(_probe())
    line = (
        "tpu: padding 25% of bytes moved (lowered model), 3.8% compiled; arguments 1.6 MiB "
        "for 1.6 MiB of data (+4%), outputs 512 B for 12 B of data, temporaries 0 B"
    )
    totals = report.summary.platforms["tpu"]
    assert (totals.padding_waste, totals.compiled_padding_waste) == (0.25, 65_536 / 1_703_936)
    again = typed(json.loads(json.dumps(report.to_dict())))  # as `jaxport show` reads it
    assert again.summary.platforms["tpu"].compiled_padding_waste == 65_536 / 1_703_936
    said = text(again, DisplayOptions(verbosity=2))  # -vv: each check's lines, wrapped
    assert line in " ".join(part.strip() for part in said.splitlines())
    written = markdown(again)
    assert line in written
    assert "| padding | padding (compiled) |" in written
    assert "padding 25% of bytes moved (lowered model), 3.8% compiled" in written
    page = html(again)
    assert f'<p class="note">{line}</p>' in page
    assert '<th scope="col" class="num">padding (compiled)</th>' in page
    counts = FormatCounts.of(LOWERED, COMPILED)
    assert (counts.padding_waste, counts.compiled_padding_waste) == (0.25, 65_536 / 1_703_936)
    # a probe compiled and one not: the compiled share is of the compiled one's bytes only
    summed = counts + FormatCounts.of(LOWERED, None)
    assert summed.compiled_padding_waste == 65_536 / 1_703_936
    assert summed.padding_waste == 0.25


def test_a_compiled_census_keeps_its_memory_through_json_and_adds_up() -> None:
    again = FormatCensus.from_dict(json.loads(json.dumps(COMPILED.to_dict())))
    assert again == COMPILED
    both = COMPILED + COMPILED
    assert both.memory is not None
    assert both.memory.argument_bytes == 2 * 1_703_936
    assert (COMPILED + LOWERED).memory == COMPILED.memory
    with pytest.raises(ValueError, match="not a byte count: argument_bytes"):
        MemoryFootprint.from_dict({"argument_bytes": -1})


def test_the_cost_model_and_baselines_read_the_compilers_padding_where_there_is_one() -> None:
    """The lowered model's 25% would be layout work (10% or more); the compiler's 3.8% is
    not. A baseline keeps the compiled padding at the compiled level, and its growth fails."""
    priced = {i.rule for i in _probe().format_items("tpu")}
    assert "tile-padding" not in priced
    assert "tile-padding" in {i.rule for i in _probe(compiled=False).format_items("tpu")}
    grown_finding = replace(COMPILED.findings[0], amount=425_984)
    grown = replace(_probe(), platforms={"tpu": replace(
        _probe().platforms["tpu"], compiled_formats=replace(COMPILED, findings=(grown_finding,))
    )})  # fmt: skip
    found = diff(_report(_probe()), _report(grown))
    assert [c.describe() for c in found.growth] == [
        "check 'batch' on tpu: padding waste grew 3.8% -> 25.0% (+21.2%) (compiled)"
    ]


def test_the_compiled_reader_keeps_tpu_layouts_and_nothing_elsewhere() -> None:
    tpu = parse_compiled_hlo(TPU_HLO)
    assert tpu.entry_layout == (
        "(f32[4096,100]{0,1:T(8,128)}, f32[100,3]{0,1:T(4,128)})->f32[3]{0:T(128)}"
    )
    sites = {site.op: site for site in tpu.functions[tpu.entry]}
    # the prefetch into VMEM reads x and writes its copy there (not x again, nor its context)
    assert sites["hlo.copy"].operand_types == ("f32[4096,100]{0,1:T(8,128)}",)
    assert sites["hlo.copy"].result_types == ("f32[4096,100]{0,1:T(8,128)S(1)}",)
    fusion = sites["hlo.fusion:kOutput"]
    assert fusion.operand_types == (
        "f32[4096,100]{0,1:T(8,128)S(1)}", "f32[100,3]{0,1:T(4,128)}"
    )  # fmt: skip
    assert fusion.result_types == ("f32[3]{0:T(128)}",)
    cpu = parse_compiled_hlo(TPU_HLO.replace(":T(8,128)", "").replace(":T(4,128)", "")
                             .replace(":T(128)", "").replace("S(1)", ""))  # fmt: skip
    assert cpu.entry_layout == ""
    assert all(not s.operand_types and not s.result_types
               for sites in cpu.functions.values() for s in sites)  # fmt: skip


TPU_HLO = (Path(__file__).resolve().parent / "data" / "tpu-matmul.hlo").read_text()
"""What libtpu 0.0.42.1 printed for ``jnp.tanh(x @ w).sum(0)`` (tanh left out, metadata and
backend configs cut), x (4096, 100) and w (100, 3) float32, for TPU v5e."""
