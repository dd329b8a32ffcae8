"""Will it fit (issue 56), on plain data: a platform's memory as its compiler planned it, the
compiler's refusal for memory, the JSON a report keeps them in and reads them back from, and
the ``max_device_memory`` budget's value."""

from __future__ import annotations

import json
import re

import pytest
from helpers import built_report

from pytest_jaxport.model.census import CompiledMemory
from pytest_jaxport.model.memory import (
    GIB,
    DeviceMemory,
    MemoryLimit,
    OutOfMemory,
    out_of_memory,
    parse_memory_limit,
    planned_peak,
)
from pytest_jaxport.model.probe import NotCompared, PlatformProbe, Probe, platform_from_dict
from pytest_jaxport.report.errors import ReportError

V5E_BYTES_LIMIT = 16_909_336_064
"""The lent TPU v5e's ``memory_stats()["bytes_limit"]`` (chip-memory-tpu-v5-lite.json)."""

LIBTPU_40960 = (
    "JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required "
    "for HLO temporaries (18.75G) exceeds available HBM (15.75G)."
)
"""libtpu's refusal of the 40960² float32 product, word for word, on the chip and deviceless
(benchmarks/results/chip-memory-tpu-v5-lite.md)."""


def _planned() -> DeviceMemory:
    """The 24-layer 8192² MLP step the chip ran: its deviceless plan (chip-memory-tpu-v5-lite)."""
    return DeviceMemory(
        platform="tpu", level="compiled", device="TPU v5e", generation="v5e", slice="v5e:1x1",
        deviceless=True, peak_bytes=13_288_710_144, capacity_bytes=V5E_BYTES_LIMIT,
        capacity_source="libtpu's available HBM",
        breakdown=CompiledMemory(argument=6_711_672_832, output=6_442_713_088,
                                 temp=137_494_528, generated_code=4_424_704),
    )  # fmt: skip


def test_a_plan_fits_where_the_compilers_peak_is_within_the_capacity() -> None:
    plan = _planned()
    assert plan.fits is True
    assert plan.headline() == "tpu (v5e): 12.38 of 15.75 GiB (79%)"
    over = DeviceMemory(platform="cuda", level="compiled", device="NVIDIA H100 80GB HBM3",
                        generation="sm90", peak_bytes=120_000_000_000,
                        capacity_bytes=80 * GIB)  # fmt: skip
    assert over.fits is False
    assert over.headline().endswith(": does not fit")


def test_an_unknown_capacity_leaves_the_verdict_unknown_never_true() -> None:
    plan = DeviceMemory(platform="cpu", level="compiled", device="cpu", peak_bytes=201_326_592)
    assert plan.fits is None
    assert plan.used is None
    assert plan.headline() == "cpu (cpu): 0.19 GiB planned, capacity unknown"
    sliced = DeviceMemory(platform="tpu", level="compiled", device="TPU v5e", generation="v5e",
                          slice="v5e:2x2", devices=4, per="chip", peak_bytes=3 * GIB,
                          capacity_bytes=V5E_BYTES_LIMIT)  # fmt: skip
    assert sliced.headline() == "tpu (v5e:2x2, per chip): 3.00 of 15.75 GiB (19%)"


def test_not_compiled_has_no_number() -> None:
    memory = DeviceMemory(platform="rocm", level="not compiled", reason="no compiler runs "
                          "for rocm without its device")  # fmt: skip
    assert memory.fits is None
    assert memory.needed_bytes is None
    assert memory.headline() == "rocm: not compiled (no compiler runs for rocm without its device)"


def test_libtpus_refusal_is_read_as_out_of_memory_with_its_figures() -> None:
    refused = out_of_memory(LIBTPU_40960)
    assert refused is not None
    assert refused.needs_bytes == round(18.75 * GIB)
    assert refused.available_bytes == round(15.75 * GIB)
    assert (refused.needs_text, refused.available_text) == ("18.75 GiB", "15.75 GiB")
    assert refused.memory_space == "hbm"
    memory = DeviceMemory(platform="tpu", level="compiled", device="TPU v5e", generation="v5e",
                          capacity_bytes=V5E_BYTES_LIMIT, out_of_memory=refused)  # fmt: skip
    assert memory.fits is False
    assert memory.headline() == "does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB"


@pytest.mark.parametrize(
    "message",
    [
        "UNIMPLEMENTED: Only F32 and C64 types are implemented in LuDecomposition",
        "INVALID_ARGUMENT: Unexpected operand type for FFT: c128[1024]{0}",
        "compile exceeded 60 s on tpu (v5e:1x1)",
    ],
)
def test_other_refusals_are_not_out_of_memory(message: str) -> None:
    assert out_of_memory(message) is None


def test_a_pallas_kernels_vmem_exhaustion_names_its_memory_space() -> None:
    refused = out_of_memory(
        "JaxRuntimeError: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: Ran out of "
        "memory in memory space vmem while allocating on stack for %my_kernel. Scoped "
        "allocation with size 128.00M and limit 16.00M exceeded scoped vmem limit by 112.00M."
    )
    assert refused is not None
    assert (refused.memory_space, refused.needs_text, refused.available_text) == (
        "vmem", "128.00 MiB", "16.00 MiB")  # fmt: skip


def test_the_planned_peak_is_the_compilers_or_what_is_live_at_once() -> None:
    assert planned_peak(CompiledMemory(argument=8, output=4, temp=2, alias=4, peak=11)) == 11
    assert planned_peak(CompiledMemory(argument=8, output=4, temp=2, alias=4)) == 10


def test_memory_round_trips_through_a_platform_entrys_json() -> None:
    refused = DeviceMemory(platform="tpu", level="compiled", device="TPU v5e",
                           generation="v5e", slice="v5e:1x1", deviceless=True,
                           capacity_bytes=V5E_BYTES_LIMIT,
                           out_of_memory=out_of_memory(LIBTPU_40960))  # fmt: skip
    for memory in (_planned(), refused, DeviceMemory(platform="tpu", level="not compiled")):
        result = PlatformProbe(platform="tpu", present=False, memory=memory)
        data = json.loads(json.dumps(Probe(name="c", reference="cpu",
                                           platforms={"tpu": result}).to_dict()))  # fmt: skip
        entry = data["platforms"]["tpu"]
        assert entry["memory"]["fits"] == memory.fits
        assert platform_from_dict("tpu", entry).memory == memory


def test_memory_is_left_out_of_the_json_where_it_is_no_topic() -> None:
    """A project that compiles nothing writes the reports it wrote before (no ``memory``)."""
    cpu = PlatformProbe(platform="cpu", present=True)
    entry = Probe(name="c", reference="cpu", platforms={"cpu": cpu}).to_dict()
    assert "memory" not in entry["platforms"]["cpu"]  # type: ignore[index]
    assert "not_compared" not in entry


def _report_with(memory: object, not_compared: object = None) -> dict[str, object]:
    check = Probe(name="step", reference="cpu", platforms={
        "tpu": PlatformProbe(platform="tpu", present=False)}).to_dict()  # fmt: skip
    check["platforms"]["tpu"]["memory"] = memory  # type: ignore[index]
    if not_compared is not None:
        check["not_compared"] = not_compared
    return {"nodeid": "t.py::test_step", "outcome": "passed", "checks": [check]}


def test_a_report_reads_a_checks_memory_and_why_its_numerics_were_not_compared() -> None:
    memory = _planned()
    not_compared = NotCompared(arguments=("args[0]", "args[1]"))
    test = _report_with(memory.to_dict(), not_compared.to_dict())
    report = built_report([test], config={"platforms": ["cpu", "tpu"], "reference": "cpu"})
    (check,) = report.checks()
    assert check.probe.platforms["tpu"].memory == memory
    assert check.probe.not_compared == not_compared
    assert check.probe.to_dict() == test["checks"][0]  # type: ignore[index]


def test_a_malformed_memory_entry_is_said_at_its_place() -> None:
    broken = {**_planned().to_dict(), "peak_bytes": "13 GiB"}
    with pytest.raises(ReportError, match=r"platforms\.tpu\.memory.*peak_bytes.*expected an "
                                          "integer"):  # fmt: skip
        built_report([_report_with(broken)], config={"platforms": ["cpu", "tpu"]})
    with pytest.raises(ReportError, match=r"memory: malformed.*level"):
        built_report([_report_with({"level": "guessed"})], config={"platforms": ["tpu"]})


def test_not_compared_says_why_in_one_sentence() -> None:
    assert NotCompared().sentence() == (
        "numerics not compared: abstract arguments (jax.ShapeDtypeStruct), nothing was run"
    )
    many = NotCompared(arguments=tuple(f"args[{i}]" for i in range(10)))
    assert many.sentence().endswith("args[7], and 2 more), nothing was run")


# -- max_device_memory's value --------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "allowed"),
    [
        (0.8, 13_527_468_851),
        (1, V5E_BYTES_LIMIT),
        ("12 GiB", 12 * GIB),
        ("500 MB", 500_000_000),
        ("1.5 TiB", int(1.5 * 2**40)),
        ("64 KiB", 65_536),
    ],
)
def test_a_limit_is_a_fraction_of_the_capacity_or_a_size(written: object, allowed: int) -> None:
    assert parse_memory_limit(written).allowed(V5E_BYTES_LIMIT) == allowed


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("12", 'a size needs its unit: "12" is ambiguous'),
        (12, "12 is no fraction in (0, 1]"),
        (0, "0 is no fraction in (0, 1]"),
        (1.5, "1.5 is no fraction in (0, 1]"),
        ("12G", "unknown unit 'G'"),
        ("12 gib", "unknown unit 'gib'"),
        ("lots", "'lots' is neither"),
        (True, "a fraction of the device's capacity"),
        ([12], "a fraction of the device's capacity"),
    ],
)
def test_a_limit_that_is_neither_is_refused_saying_what_was_expected(
    written: object, said: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        parse_memory_limit(written)


def test_a_fraction_of_an_unknown_capacity_allows_nothing_known() -> None:
    limit = MemoryLimit(fraction=0.9, written="0.9")
    assert limit.allowed(None) is None
    assert limit.text(None) == "90% of the capacity"
    assert limit.text(V5E_BYTES_LIMIT) == "0.9 of 15.75 GiB = 14.17 GiB"
    assert parse_memory_limit("12 GiB").text() == "12.00 GiB (12 GiB)"
    assert OutOfMemory(needs_bytes=5, needs="5").needs_text == "5 B"
