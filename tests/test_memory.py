"""Will it fit (issue 56), on plain data: a platform's memory as its compiler planned it, the
compiler's refusal for memory, the JSON a report keeps them in and reads them back from, and
the ``max_device_memory`` budget's value."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest
from helpers import built_report

from pytest_jaxport.model.budget import Budget, Setting, Violation
from pytest_jaxport.model.census import CompiledMemory
from pytest_jaxport.model.devices import described_device
from pytest_jaxport.model.evaluation import evaluate
from pytest_jaxport.model.failure import failure_text
from pytest_jaxport.model.memory import (
    GIB,
    DeviceMemory,
    MemoryLimit,
    MemoryTarget,
    OutOfMemory,
    out_of_memory,
    parse_memory_limit,
    planned,
    planned_peak,
    refused,
)
from pytest_jaxport.model.probe import NotCompared, PlatformProbe, Probe, platform_from_dict
from pytest_jaxport.report.audit_ledger import audited_suite, largest_memory
from pytest_jaxport.report.audit_section import AuditSection, Computation
from pytest_jaxport.report.errors import ReportError

RECORDED = Path(__file__).parent.parent / "benchmarks/results/chip-memory-tpu-v5-lite.json"
"""What the lent TPU v5e measured (issue 56), with the deviceless plans beside it."""

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
    assert plan.headline() == "cpu: 0.19 GiB planned, capacity unknown"
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


def test_the_fit_verdicts_equal_the_chips_on_every_recorded_program() -> None:
    """The lent TPU v5e's corpus (chip-memory-tpu-v5-lite.json): each program's deviceless
    plan, or libtpu's refusal, judged against v5e's capacity as a check's memory is, fits
    where the chip ran it and does not where the chip refused it: 17 of 17. The plan (the
    compiler's peak plus the code) is never below the chip's peak by more than 5.75 MiB."""
    recorded = json.loads(RECORDED.read_text())
    v5e = described_device("tpu", "v5e")
    assert v5e is not None
    target = MemoryTarget(platform="tpu", device="TPU v5e", generation="v5e", slice="v5e:1x1",
                          deviceless=True, capacity=v5e.capacity)  # fmt: skip
    agreed = 0
    for name, deviceless in recorded["recorded"]["deviceless"]["programs"].items():
        chip = recorded["programs"][name]
        if "compile_error" in deviceless:
            memory = refused(target, deviceless["compile_error"])
        else:
            memory = planned(target, CompiledMemory.from_stats(deviceless["memory_analysis"]))
        assert memory is not None
        assert memory.fits is not None
        if not chip["chip_measured"]:
            continue
        assert memory.fits is chip["fits_chip"], name
        agreed += 1
        if memory.peak_bytes is not None and chip.get("chip_peak_bytes") is not None:
            assert memory.peak_bytes - chip["chip_peak_bytes"] >= -6 * 2**20, name
    assert agreed == 17


# -- the budget and must_lower, on plain data ---------------------------------------------


ORIGIN = "pyproject.toml [tool.jaxport.budget]"


def _judged(memory: DeviceMemory, **limits: object) -> list[Violation]:
    refused = LIBTPU_40960 if memory.out_of_memory else None
    result = PlatformProbe(platform=memory.platform, present=False, memory=memory,
                           compile_error=refused)  # fmt: skip
    probe = Probe(name="step", reference="cpu", platforms={memory.platform: result})

    def budget(platform: str) -> Budget:
        settings = {k: Setting(value=v, origin=ORIGIN) for k, v in limits.items()}
        return Budget(platform=platform, **settings)  # type: ignore[arg-type]

    return evaluate(probe, budget)


def test_a_plan_over_max_device_memory_fails_with_planned_against_allowed() -> None:
    (violation,) = _judged(_planned(), max_device_memory=parse_memory_limit(0.7))
    assert violation.headline() == (
        "tpu: 12.38 GiB planned > 0.7 of 15.75 GiB = 11.02 GiB allowed on tpu (v5e) "
        "(max_device_memory = 0.7, set in pyproject.toml [tool.jaxport.budget]); check "
        "'step', compiled (deviceless v5e:1x1)"
    )
    assert violation.details[0] == "planned 13,288,710,144 bytes per device, allowed 11,836,535,244"
    assert "to pass: plan less memory per device" in failure_text([violation], "t.py::t")
    assert violation.found_text() == violation.finding()  # what every list of problems shows
    assert _judged(_planned(), max_device_memory=parse_memory_limit(0.8)) == []
    (sized,) = _judged(_planned(), max_device_memory=parse_memory_limit("12 GiB"))
    assert sized.rule() == f'max_device_memory = "12 GiB", set in {ORIGIN}'


def test_a_fraction_of_an_unknown_capacity_fails_saying_so() -> None:
    unknown = "capacity unknown: the CPU's memory is the host's"
    cpu = DeviceMemory(platform="cpu", level="compiled", device="cpu", peak_bytes=201_326_592,
                       capacity_source=unknown)  # fmt: skip
    (violation,) = _judged(cpu, max_device_memory=parse_memory_limit(0.9))
    assert violation.finding().startswith(
        "a fraction (0.9) of an unknown capacity: cpu's capacity is unknown"
    )
    assert "set max_device_memory as a size" in failure_text([violation], "t.py::t")
    assert _judged(cpu, max_device_memory=parse_memory_limit("1 GiB")) == []


def test_memory_not_compiled_is_not_judged() -> None:
    rocm = DeviceMemory(platform="rocm", level="not compiled", reason="no compiler runs")
    assert _judged(rocm, max_device_memory=parse_memory_limit("1 KiB")) == []


def test_a_refusal_for_memory_fails_must_lower_saying_it_does_not_fit() -> None:
    refused = DeviceMemory(platform="tpu", level="compiled", device="TPU v5e", generation="v5e",
                           slice="v5e:1x1", deviceless=True, capacity_bytes=V5E_BYTES_LIMIT,
                           out_of_memory=out_of_memory(LIBTPU_40960))  # fmt: skip
    (violation,) = _judged(refused, must_lower=("tpu",))
    assert violation.finding() == (
        "fails to compile: does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB"
    )
    assert violation.details == (LIBTPU_40960,)  # the compiler's words kept
    both = _judged(refused, must_lower=("tpu",), max_device_memory=parse_memory_limit(0.9))
    assert [v.key for v in both] == ["must_lower", "max_device_memory"]
    said = "needs 18.75 GiB (the compiler's figure; it refused the program) > 0.9 of 15.75"
    assert both[1].finding().startswith(said)


# -- real runs: abstract arguments, the compilers' plans, a slice ---------------------------


def _installed(distribution: str) -> bool:
    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


needs_libtpu = pytest.mark.skipif(
    not _installed("libtpu"), reason='libtpu is not installed (pip install "pytest-jaxport[tpu]")'
)


def _peak_rss_kib(result: pytest.RunResult) -> int:
    """The test process's peak resident memory, as the test printed it (``RSS KiB <n>``)."""
    (found,) = re.findall(r"RSS KiB (\d+)", result.stdout.str())
    return int(found)


def _report(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    """Each check of the run's report, by its name."""
    report = json.loads((pytester.path / "r.json").read_text())
    return {c["name"]: c for t in report["tests"] for c in t["checks"]}


ABSTRACT = """
import resource

import jax
import jax.numpy as jnp
import pytest


@pytest.mark.portable
def test_product(jaxport):
    big = jax.ShapeDtypeStruct((40960, 40960), jnp.float32)
    out = jaxport.check(lambda a, b: a @ b, big, big, name="product")
    assert out == jax.ShapeDtypeStruct((40960, 40960), jnp.float32)
    print("RSS KiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


@pytest.mark.portable
def test_mixed(jaxport):
    out = jaxport.check(jnp.dot, jnp.ones((3, 8)), jax.ShapeDtypeStruct((8, 2), jnp.float32))
    assert out.shape == (3, 2)
"""


@pytest.mark.slow
def test_an_abstract_check_is_lowered_and_compiled_never_run(pytester: pytest.Pytester) -> None:
    """A 40960² float32 product (two 6.25 GiB operands, a 6.25 GiB result) is traced, lowered
    for every platform and compiled for cpu, and never run: the test process stays under
    1 GiB of resident memory; its numerics are not compared, and the record says why."""
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", '
                      '"tpu"]\ncompile = ["cpu"]\n')  # fmt: skip
    pytester.makepyfile(test_abstract=ABSTRACT)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-s", "--jaxport-report=r.json")
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    rss = _peak_rss_kib(result)
    assert rss < 1 << 20, f"the test process peaked at {rss / 1024:.0f} MiB"
    checks = _report(pytester)
    product = checks["product"]
    assert product["not_compared"] == {"reason": "abstract arguments",
                                       "arguments": ["args[0]", "args[1]"]}  # fmt: skip
    assert product["note"].startswith("numerics not compared: abstract arguments")
    cpu = product["platforms"]["cpu"]
    assert (cpu["executed"], cpu["compiled"]["level"]) == (False, "compiled")
    assert cpu["memory"]["breakdown"]["argument_bytes"] == 2 * 40960**2 * 4
    assert cpu["memory"]["capacity_bytes"] is None
    assert cpu["memory"]["fits"] is None  # the host's memory is no device's: unknown
    assert product["platforms"]["rocm"]["memory"] == {
        **product["platforms"]["rocm"]["memory"], "level": "not compiled", "peak_bytes": None,
        "reason": "no compiler runs for rocm without its device"}  # fmt: skip
    assert product["platforms"]["tpu"]["memory"]["reason"] == (
        "tpu is not in [tool.jaxport] compile"
    )
    assert checks["dot"]["not_compared"]["arguments"] == ["args[1]"]


@pytest.mark.slow
@needs_libtpu
@pytest.mark.skipif(
    tuple(int(part) for part in version("jax").split(".")[:2]) < (0, 7),
    reason="the recorded per-chip plans are jax 0.10.2's (Shardy); jax 0.6's partitioner leaves "
    "the product's output whole on each chip (seen on the floor, 0.6.2 with libtpu 0.0.17)",
)
def test_a_sharded_abstract_check_is_planned_per_chip_as_the_sharding_divides(
    pytester: pytest.Pytester,
) -> None:
    """Four host devices (tests/conftest.py); ``devices.tpu = "v5e:2x2"``: the products with
    their left operand's rows over 4 chips plan per chip what the recorded deviceless
    ``v5e:2x2`` compiles planned, and their arguments divide as the sharding says (a quarter
    of one operand, the whole other). The 40960² product fits per chip, where one chip
    refuses it."""
    pytester.makefile(".toml", pyproject="""
        [tool.jaxport]
        platforms = ["cpu", "tpu"]
        compile = ["tpu"]
        devices = { tpu = "v5e:2x2" }
        """.replace("\n        ", "\n"))  # fmt: skip
    pytester.makepyfile(test_sliced="""
        import jax, jax.numpy as jnp, numpy as np, pytest
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        def product(a, b):
            return a @ b

        @pytest.mark.portable
        def test_rows(jaxport):
            mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
            over_rows, replicated = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P())
            for n in (24576, 40960):
                rows = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=over_rows)
                whole = jax.ShapeDtypeStruct((n, n), jnp.float32, sharding=replicated)
                jaxport.check(product, rows, whole, name=f"product_f32_{n} rows")
        """.replace("\n        ", "\n"))  # fmt: skip
    result = pytester.runpytest("-p", "no:randomly", "--jaxport-report=r.json")
    result.assert_outcomes(passed=1)
    recorded = json.loads(RECORDED.read_text())["recorded"]["sharded"]["programs"]
    for name, check in _report(pytester).items():
        memory = check["platforms"]["tpu"]["memory"]
        n = int(name.split("_")[2].split()[0])
        assert (memory["slice"], memory["devices"], memory["per"]) == ("v5e:2x2", 4, "chip")
        plan = recorded[name]["memory_analysis"]
        breakdown = memory["breakdown"]
        assert breakdown["argument_bytes"] == plan["argument_size_in_bytes"] == (
            n * n * 4 // 4 + n * n * 4)  # fmt: skip
        assert breakdown["output_bytes"] == plan["output_size_in_bytes"] == n * n * 4 // 4
        assert memory["peak_bytes"] - breakdown["generated_code_bytes"] == (
            plan["peak_memory_in_bytes"])  # fmt: skip
        assert memory["fits"] is True


TRAIN_STEP = """
import resource

import jax
import jax.numpy as jnp
import pytest


def train_step(params, x, y):
    def loss(p):
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        return jnp.mean((h - y) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads), value


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


@pytest.mark.portable(max_device_memory=0.8)
def test_train_step(jaxport):
    params = [(f32(8192, 8192), f32(8192)) for _ in range(25)]
    jaxport.check(train_step, params, f32(6144, 8192), f32(6144, 8192))


@pytest.mark.portable
def test_product(jaxport):
    jaxport.check(lambda a, b: a @ b, f32(40960, 40960), f32(40960, 40960), name="product")
    print("RSS KiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
@needs_libtpu
def test_a_production_train_step_is_planned_for_cuda_and_tpu_on_a_cpu_machine(
    pytester: pytest.Pytester,
) -> None:
    """Issue 56's "Done when": a 25-layer 8192² MLP train step at batch 6144, checked with
    abstract arguments for cuda (deviceless H100) and tpu (deviceless v5e) on this CPU
    machine, plans 13.07 of 15.75 GiB (83%) on the TPU, fails ``max_device_memory = 0.8``,
    and the 40960² product does not fit on the TPU (18.75 GiB), with nothing allocated."""
    pytest.importorskip("jax_cuda12_plugin")
    pytester.makefile(".toml", pyproject="""
        [tool.jaxport]
        platforms = ["cpu", "cuda", "tpu"]
        compile = ["cuda", "tpu"]
        compile_time_limit = 1200

        [tool.jaxport.budget]
        must_lower = ["cpu", "cuda", "tpu"]
        """.replace("\n        ", "\n"))  # fmt: skip
    pytester.makepyfile(test_production=TRAIN_STEP)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-s", "--jaxport-report=r.json")
    result.assert_outcomes(failed=2)
    result.stdout.no_fnmatch_line("*INTERNALERROR*")
    result.stdout.fnmatch_lines([
        "*tpu: 13.07 GiB planned > 0.8 of 15.75 GiB = 12.60 GiB allowed on tpu (v5e) "
        "(max_device_memory = 0.8, set in *",
        "*tpu: fails to compile: does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB "
        "(must_lower = [[]cpu, cuda, tpu[]], set in pyproject.toml [[]tool.jaxport.budget[]]);*",
    ])  # fmt: skip
    rss = _peak_rss_kib(result)
    assert rss < 1 << 20, f"the test process peaked at {rss / 1024:.0f} MiB"
    checks = _report(pytester)
    step = {p: DeviceMemory.from_dict(p, entry["memory"])
            for p, entry in checks["train_step"]["platforms"].items()}  # fmt: skip
    tpu = step["tpu"]
    assert tpu.headline() == "tpu (v5e): 13.07 of 15.75 GiB (83%)"
    assert f"{tpu.peak_bytes / GIB:.1f} of {tpu.capacity_bytes / GIB:.2f}" == "13.1 of 15.75"
    assert (tpu.fits, tpu.deviceless, tpu.slice) == (True, True, "v5e:1x1")
    assert step["cuda"].capacity_bytes == 80 * GIB
    assert step["cuda"].fits is True
    assert step["cpu"].level == "not compiled"
    product = checks["product"]["platforms"]["tpu"]
    assert product["memory"]["fits"] is False
    assert product["memory"]["out_of_memory"]["needs"] == "18.75G"
    assert product["compile_error"].startswith(
        "does not fit on tpu (v5e): needs 18.75 GiB of 15.75 GiB (at test_production.py:"
    )
    assert "(18.75G) exceeds available HBM (15.75G)" in product["compile_error"]


def test_the_audits_fail_on_judges_the_computation_that_needs_the_most() -> None:
    """``[tool.jaxport.audit.fail_on] max_device_memory``: the suite's largest computation on
    the platform (one device runs one computation at a time), not a sum."""
    small = replace(_planned(), peak_bytes=2 * GIB)
    computations = tuple(
        Computation(id=f"c{i}", function="step", source="t.py:3", kind="jit",
                    signature=("x: float32[3]",),
                    platforms={"tpu": PlatformProbe(platform="tpu", present=False,
                                                    memory=memory)})
        for i, memory in enumerate((small, _planned(), None))
    )  # fmt: skip
    section = AuditSection(
        interception={}, platforms=("tpu",), eager_users="owner", seen={}, totals={},
        numbers=None, sites=(), findings=(), computations=computations, tests={},
    )  # fmt: skip
    assert largest_memory(section, "tpu") == _planned()
    assert largest_memory(section, "cuda") is None
    limit = Setting(value=parse_memory_limit("10 GiB"), origin="[tool.jaxport.audit.fail_on]")
    (violation,) = evaluate(
        audited_suite(section), lambda p: Budget(platform=p, max_device_memory=limit)
    )
    assert violation.finding().startswith("12.38 GiB planned > 10.00 GiB (10 GiB) allowed")
