"""Tests of pytest_jaxport.report.merge and report.baseline.

Merging CI legs, cross-leg numerics, report diffs and baselines (pure, no pytest runs)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import built_report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_jaxport.model.census import Census, Kernel
from pytest_jaxport.model.compare import Leaf, Outputs
from pytest_jaxport.model.cost import CostModel
from pytest_jaxport.model.emulation import EmulatedKernel, Emulation
from pytest_jaxport.model.failure import failure_text
from pytest_jaxport.model.memory import DeviceMemory, OutOfMemory
from pytest_jaxport.model.numerics import Tolerance, default_tolerance
from pytest_jaxport.model.probe import (
    PlatformProbe,
    Probe,
    Untraced,
    census_to_dict,
    platform_from_dict,
)
from pytest_jaxport.report.baseline import (
    baseline_json,
    baseline_of,
    compare_to_baseline,
    diff,
    growth_violation,
    load_counts,
    match_baseline,
)
from pytest_jaxport.report.document import Config, Report
from pytest_jaxport.report.errors import MergeError, ReportError
from pytest_jaxport.report.files import from_json, write_json
from pytest_jaxport.report.merge import (
    PER_LEG_CONFIG_KEYS,
    fidelity,
    load_legs,
    merge,
    tolerance_from_config,
)
from pytest_jaxport.report.outputs import save_outputs
from pytest_jaxport.report.summary import Pricing
from pytest_jaxport.view.markdown import diff_markdown, markdown, merge_markdown
from pytest_jaxport.view.text import diff_text, drift_text, merge_text, text
from pytest_jaxport.view.viewmodel.build import build_view

NODEID = "tests/test_models.py::test_mlp"
OTHER = "tests/test_models.py::test_attention"


def defaults(platform: str, dtype: str) -> Tolerance:
    return default_tolerance(dtype)


def census(platform: str, *, vendor: int = 0, custom: int = 0, level: str = "lowered") -> Census:
    library = {"cpu": "lapack", "cuda": "cublas", "rocm": "hipblas", "tpu": None}[platform]
    kernels = []
    if vendor:
        kernels.append(
            Kernel(
                layer="vendor",
                name="stablehlo.dot_general",
                kind="gemm",
                library=library,
                count=vendor,
            )
        )
    if custom:
        kernels.append(Kernel(layer="custom", name="my_kernel", kind="ffi", count=custom))
    return Census(platform=platform, level=level, kernels=tuple(kernels), xla_ops=5)  # type: ignore[arg-type]


def entry(
    platform: str, *, present: bool, executed: bool = False, vendor: int = 0, custom: int = 0
) -> PlatformProbe:
    return PlatformProbe(
        platform=platform,
        present=present,
        census=census(platform, vendor=vendor, custom=custom),
        executed=executed,
    )


def check(name: str, *platforms: PlatformProbe, reference: str = "cpu") -> dict[str, Any]:
    return Probe(
        name=name, reference=reference, platforms={p.platform: p for p in platforms}
    ).to_dict()


def make_test(nodeid: str, *checks: dict[str, Any], outcome: str = "passed") -> dict[str, Any]:
    return {"nodeid": nodeid, "outcome": outcome, "checks": list(checks), "violations": []}


CONFIG = {"source": "pyproject.toml", "platforms": ["cpu", "cuda"], "reference": "cpu"}


def leg_report(
    tests: list[dict[str, Any]], *, present: list[str], config: Mapping[str, Any] = CONFIG
) -> dict[str, Any]:
    env = {
        "jax": "0.10.2",
        "jaxlib": "0.10.2",
        "python": "3.11",
        "machine": "Linux-x86_64",
        "present_platforms": present,
    }
    # The three numbers as a run records them (a merge recomputes them over its legs).
    pricing = Pricing(migrate_to=("rocm", "tpu"), model=CostModel())
    report = built_report(tests, config=config, environment=env, pricing=pricing)
    return report.to_dict()


def result(value: np.ndarray) -> Outputs:
    return Outputs(structure="PyTreeDef({'y': *})", leaves=(Leaf(path="['y']", array=value),))


Y = np.linspace(-1, 1, 6, dtype=np.float32)


def save(folder: Path, leg_dir: str, report: dict[str, Any], values: Mapping[str, Any]) -> None:
    """Save outputs for every executed platform, recording paths relative to ``folder``."""
    for test in report["tests"]:
        for chk in test["checks"]:
            for platform, e in chk["platforms"].items():
                if e["executed"]:
                    name = save_outputs(
                        folder / leg_dir,
                        test["nodeid"],
                        chk["name"],
                        platform,
                        result(values.get(platform, Y)),
                    )
                    e["outputs"] = f"{leg_dir}/{name}"


def typed(report: Mapping[str, Any]) -> Report:
    """A report's JSON as :func:`~pytest_jaxport.report.files.load` reads it."""
    return from_json(json.loads(json.dumps(report)), Path("r.json"))


def probes(checks: Sequence[Mapping[str, Any]]) -> list[Probe]:
    """A test's checks as the judge has them."""
    return [Probe.from_dict(c) for c in checks]


def reports(legs: Sequence[tuple[Path, Any]]) -> list[tuple[Path, Report]]:
    """Legs as :func:`merge` takes them: each a report checked as ``load`` checks it."""
    return [(p, r if isinstance(r, Report) else from_json(r, p)) for p, r in legs]


def write(folder: Path, name: str, report: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    path = folder / name
    write_json(path, report)
    return path, report


def two_legs(
    folder: Path, *, gpu_values: Mapping[str, Any] | None = None
) -> list[tuple[Path, dict[str, Any]]]:
    """A CPU leg (cpu ran, cuda lowered) and a GPU leg (both ran; cuda with 3 gemms)."""
    cpu = leg_report(
        [
            make_test(
                NODEID,
                check(
                    "mlp",
                    entry("cpu", present=True, executed=True),
                    entry("cuda", present=False, vendor=3),
                ),
            )
        ],
        present=["cpu"],
    )
    gpu = leg_report(
        [
            make_test(
                NODEID,
                check(
                    "mlp",
                    entry("cpu", present=True, executed=True),
                    entry("cuda", present=True, executed=True, vendor=3),
                ),
            ),
            make_test(OTHER, check("attn", entry("cuda", present=True, executed=True, custom=1))),
        ],
        present=["cpu", "cuda"],
    )
    find_test(cpu, NODEID)["checks"][0]["note"] = "only cpu executed here: nothing to compare"
    save(folder, "outputs-cpu", cpu, {})
    save(folder, "outputs-gpu", gpu, gpu_values or {})
    return [write(folder, "leg-cpu.json", cpu), write(folder, "leg-gpu.json", gpu)]


def find_test(report: Mapping[str, Any], nodeid: str) -> dict[str, Any]:
    found: dict[str, Any] = next(t for t in report["tests"] if t["nodeid"] == nodeid)
    return found


def platforms_of(report: Mapping[str, Any], nodeid: str, name: str) -> dict[str, Any]:
    chk = next(c for c in find_test(report, nodeid)["checks"] if c["name"] == name)
    platforms: dict[str, Any] = chk["platforms"]
    return platforms


# -- merge ------------------------------------------------------------------------------------


def test_two_legs_merge_cleanly(tmp_path: Path) -> None:
    legs = load_legs([p for p, _ in two_legs(tmp_path)])
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    assert merged.ok, merge_text(merged)
    assert merged.drifts == ()
    report = merged.report
    mlp = platforms_of(report, NODEID, "mlp")
    merged_check = find_test(report, NODEID)["checks"][0]
    assert (merged_check["reference"], merged_check["reference_leg"]) == ("cpu", "leg-cpu.json")
    assert merged_check["note"] is None
    assert mlp["cpu"]["leg"] == "leg-cpu.json"  # first leg wins ties
    assert mlp["cuda"]["leg"] == "leg-gpu.json"  # executed beats lowered
    assert mlp["cuda"]["executed"] is True
    assert mlp["cuda"]["numerics"]["ok"] is True
    assert mlp["cuda"]["numerics"]["reference"] == "cpu"
    assert mlp["cuda"]["outputs"].startswith("outputs-gpu/")
    assert platforms_of(report, OTHER, "attn")["cuda"]["leg"] == "leg-gpu.json"
    assert [t["nodeid"] for t in report["tests"]] == sorted([NODEID, OTHER])
    assert report["config"]["platforms"] == ["cpu", "cuda"]
    assert report["environment"]["present_platforms"] == ["cpu", "cuda"]
    assert report["environment"]["jax"] == "0.10.2"
    assert [leg["leg"] for leg in report["legs"]] == ["leg-cpu.json", "leg-gpu.json"]
    assert report["summary"]["platforms"]["cuda"]["vendor"] == 3
    assert report["summary"]["platforms"]["cuda"]["custom"] == 1
    test = next(t for t in report["tests"] if t["nodeid"] == NODEID)
    assert test["legs"] == {"leg-cpu.json": "passed", "leg-gpu.json": "passed"}
    # The merged report renders like any other (``jaxport show`` works on it).
    assert "leg" not in text(merged.document).split("\n")[0]
    assert (
        "| `tests/test_models.py::test_mlp` | passed | mlp | 0 / 0 · reference | 3 / 0 · match |"
        in (markdown(merged.document))
    )
    assert merged.notes == ()  # test_attention ran on one leg only: nothing to compare
    assert merged.comparisons == 2  # cuda and the GPU machine's cpu, against the CPU leg
    assert "All 2 compared outputs match." in merge_markdown(merged)
    json.dumps(report)  # JSON-able


def test_perturbed_outputs_drift_naming_test_check_leaf_and_legs(tmp_path: Path) -> None:
    legs = two_legs(tmp_path, gpu_values={"cuda": Y + np.float32(1e-3)})
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    assert not merged.ok
    [drift] = merged.drifts
    assert (drift.nodeid, drift.check, drift.platform, drift.leg) == (
        NODEID,
        "mlp",
        "cuda",
        "leg-gpu.json",
    )
    assert (drift.reference, drift.reference_leg) == ("cpu", "leg-cpu.json")
    [message] = drift.messages
    assert message.startswith("['y']: 6 of 6 elements differ beyond rtol=1e-06, atol=1e-06")
    described = drift_text(drift)
    assert described.startswith(
        f"{NODEID} check 'mlp': cuda (leg-gpu.json) differs from cpu (leg-cpu.json)\n  ['y']: "
    )
    assert NODEID in merge_text(merged)
    assert platforms_of(merged.report, NODEID, "mlp")["cuda"]["numerics"]["ok"] is False
    assert merged.report["drifts"] == [drift.to_dict()]
    assert "['y']" in merge_markdown(merged)


def test_same_platform_on_two_legs_is_compared_too(tmp_path: Path) -> None:
    legs = two_legs(tmp_path, gpu_values={"cpu": Y * 2})
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    drifts = {(d.platform, d.leg) for d in merged.drifts}
    # the GPU machine's cpu run differs from the CPU leg's; its cuda run matches the reference
    assert drifts == {("cpu", "leg-gpu.json")}
    assert "cpu@leg-gpu.json=" in merged.drifts[0].messages[0]


def _config(tolerance: dict[str, Any]) -> Config:
    """A report's configuration with the ``[tool.jaxport.tolerance]`` table ``tolerance``."""
    return Config(platforms=("cpu", "cuda"), reference="cpu", tolerance=tolerance)


def test_tolerances_come_from_the_project(tmp_path: Path) -> None:
    legs = two_legs(tmp_path, gpu_values={"cuda": Y + np.float32(1e-3)})
    loose = tolerance_from_config(_config({"cuda": {"float32": {"atol": 1e-2}}}))
    assert merge(reports(legs), tolerance_for=loose, outputs_root=tmp_path).ok
    tight_elsewhere = tolerance_from_config(_config({"rocm": {"float32": {"atol": 1}}}))
    assert not merge(reports(legs), tolerance_for=tight_elsewhere, outputs_root=tmp_path).ok
    # A check's own rtol/atol (the portable marker's, recorded on the check) wins.
    for _, report in legs:
        for test in report["tests"]:
            for chk in test["checks"]:
                chk["tolerance"] = {"atol": 1e-2}
    assert merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path).ok
    with pytest.raises(MergeError, match=r"report config: \[tool.jaxport.tolerance\]"):
        tolerance_from_config(_config({"float33": {"atol": 1}}))


def test_outputs_paths_are_rewritten_relative_to_the_merged_report(tmp_path: Path) -> None:
    legs = two_legs(tmp_path)
    out = tmp_path / "merged"
    out.mkdir()
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=out)
    path = platforms_of(merged.report, NODEID, "mlp")["cuda"]["outputs"]
    assert path.startswith("../outputs-gpu/")
    assert (out / path).is_file()
    # merging the merged report again (written there) finds the same files
    again = merge(
        reports([(out / "m.json", merged.report)]), tolerance_for=defaults, outputs_root=out
    )
    assert again.ok
    assert platforms_of(again.report, NODEID, "mlp")["cuda"]["outputs"] == path


def leg_with(platform_entry: dict[str, Any], name: str = "mlp") -> dict[str, Any]:
    probe = check(name, entry("cpu", present=True))
    probe["platforms"]["cuda"] = platform_entry
    return leg_report([make_test(NODEID, probe)], present=["cpu"])


def emulating_legs(
    folder: Path, *, emulated: np.ndarray, cpu_saved: bool = True
) -> list[tuple[Path, dict[str, Any]]]:
    """:func:`two_legs`, the CPU leg also emulating cuda (its kernel run as cuda would run
    it; ``emulated`` its outputs, saved) with an emulation violation and a lowered-level one."""
    [(_, cpu), (_, gpu)] = two_legs(folder)
    test = find_test(cpu, NODEID)
    platforms = platforms_of(cpu, NODEID, "mlp")
    emulation = Emulation(
        platform="cuda",
        dot_format="tf32",
        kernels=(EmulatedKernel(label="Pallas kernel k", location="src/k.py:3",
                                interpreter="Mosaic GPU interpret mode"),),
    )  # fmt: skip
    cuda = platforms["cuda"]
    cuda["emulated"] = emulation.to_dict()
    cuda["emulated_numerics"] = None
    cuda["emulated_outputs"] = "outputs-cpu/" + save_outputs(
        folder / "outputs-cpu", NODEID, "mlp", emulation.label, result(emulated)
    )
    if not cpu_saved:
        del platforms["cpu"]["outputs"]
    test["violations"] = [
        {"check": "mlp", "platform": "cuda", "key": "emulated_numerics", "limit": "match cpu",
         "origin": "defaults", "found": 1, "what": "differing leaf", "level": "emulated"},
        {"check": "mlp", "platform": "cuda", "key": "max_vendor_calls", "limit": 2,
         "origin": "defaults", "found": 3, "what": "vendor calls", "level": "lowered"},
    ]  # fmt: skip
    cpu["config"]["emulate"] = ["cuda"]  # per leg: the GPU leg runs cuda itself
    return [write(folder, "leg-cpu.json", cpu), write(folder, "leg-gpu.json", gpu)]


def test_an_emulation_is_kept_from_its_leg_and_checked_against_the_hardware(
    tmp_path: Path,
) -> None:
    (tmp_path / "out").mkdir()
    merged = merge(reports(emulating_legs(tmp_path, emulated=Y)), tolerance_for=defaults,
                   outputs_root=tmp_path / "out")  # fmt: skip
    assert merged.ok, merge_text(merged)
    assert merged.comparisons == 3  # cuda and cpu of the GPU leg, and the emulation vs cuda
    cuda = platforms_of(merged.report, NODEID, "mlp")["cuda"]
    # the executed entry wins; the emulation stays the CPU leg's, never counted as executed
    assert (cuda["leg"], cuda["executed"], cuda["emulated_leg"]) == (
        "leg-gpu.json", True, "leg-cpu.json")  # fmt: skip
    assert cuda["emulated"]["kernels"][0]["label"] == "Pallas kernel k"
    assert cuda["emulated_outputs"].startswith("../outputs-cpu/")
    assert (tmp_path / "out" / cuda["emulated_outputs"]).is_file()
    assert merged.report["config"]["emulate"] == ["cuda"]
    # the emulation's violation stays with the leg that emulated; the lowered count does not
    # outlive the GPU leg's executed entry
    keys = [(v["key"], v["leg"]) for v in find_test(merged.report, NODEID)["violations"]]
    assert keys == [("emulated_numerics", "leg-cpu.json")]


def test_the_verdict_counts_numerics_apart_from_budget_violations_as_show_does(
    tmp_path: Path,
) -> None:
    """Issue 55, item 2: ``jaxport merge`` ended "4 budget violations" where ``jaxport show``
    of the merged file said "1 budget violation, 3 numerics mismatches"."""
    merged = merge(reports(emulating_legs(tmp_path, emulated=Y)), tolerance_for=defaults,
                   outputs_root=tmp_path)  # fmt: skip
    head = build_view(merged.document).headline
    assert (head.violations, head.mismatches) == (0, 1)
    said = merged.failures()
    assert "1 numerics mismatch" in said
    assert not [s for s in said if "budget violation" in s], said


def test_an_emulation_that_disagrees_with_the_hardware_is_a_drift(tmp_path: Path) -> None:
    merged = merge(reports(emulating_legs(tmp_path, emulated=Y + np.float32(1e-3))),
                   tolerance_for=defaults, outputs_root=tmp_path)  # fmt: skip
    [drift] = merged.drifts
    assert (drift.platform, drift.leg, drift.reference, drift.reference_leg) == (
        "cuda (emulated on cpu)", "leg-cpu.json", "cuda", "leg-gpu.json")  # fmt: skip
    assert drift_text(drift).startswith(
        f"{NODEID} check 'mlp': the emulation of cuda (leg-cpu.json) disagrees with cuda "
        "itself (leg-gpu.json)\n  ['y']: 6 of 6 elements differ"
    )
    assert "cuda (emulated on cpu)@leg-cpu.json=" in drift.messages[0]


def test_an_emulation_is_compared_with_a_reference_another_leg_ran(tmp_path: Path) -> None:
    legs = emulating_legs(tmp_path, emulated=Y * 2, cpu_saved=False)
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    found = {(d.platform, d.reference, d.reference_leg) for d in merged.drifts}
    assert found == {
        ("cuda (emulated on cpu)", "cuda", "leg-gpu.json"),
        ("cuda (emulated on cpu)", "cpu", "leg-gpu.json"),
    }
    cuda = platforms_of(merged.report, NODEID, "mlp")["cuda"]
    assert cuda["emulated_numerics"]["ok"] is False
    assert cuda["emulated_numerics"]["reference"] == "cpu@leg-gpu.json"


def test_fidelity_order() -> None:
    lowered = Probe.from_dict(check("x", entry("cuda", present=False, vendor=1))).to_dict()
    base = lowered["platforms"]["cuda"]
    failed = {**base, "lowered": None, "error": "boom"}
    deviceless = {
        **base,
        "compiled": {
            **census_to_dict(census("cuda", vendor=2, level="compiled")),
            "deviceless": True,
            "target": "h100",
        },
    }
    on_device = {**deviceless, "compiled": {**deviceless["compiled"], "deviceless": False}}
    uncompilable = {**base, "present": True, "compile_error": "XlaRuntimeError: ..."}
    crashed = {**on_device, "present": True, "execution_error": "XlaRuntimeError: OOM"}
    executed = {**base, "present": True, "executed": True}
    ranked = [failed, base, deviceless, on_device, uncompilable, crashed, executed]
    # what a leg's report entry found (fidelity reads the typed entry)
    assert sorted(ranked, key=lambda e: fidelity(platform_from_dict("cuda", e))) == ranked


def test_compiled_census_wins_over_lowered(tmp_path: Path) -> None:
    lowered = check("mlp", entry("cuda", present=False, vendor=3))["platforms"]["cuda"]
    compiled = {**lowered, "compiled": census_to_dict(census("cuda", vendor=5, level="compiled"))}
    a = write(tmp_path, "leg-lowered.json", leg_with(lowered))
    b = write(tmp_path, "leg-deviceless.json", leg_with(compiled))
    merged = merge(reports([a, b]), tolerance_for=defaults)
    cuda = platforms_of(merged.report, NODEID, "mlp")["cuda"]
    assert cuda["leg"] == "leg-deviceless.json"
    assert cuda["compiled"]["vendor"] == 5


def test_memory_carries_through_from_the_leg_whose_compiler_answered(tmp_path: Path) -> None:
    """A leg that only lowered cuda says its memory was "not compiled"; the leg whose
    compiler refused the check for memory (no census: the compile failed) answered: the
    merged check's memory is its, and every format then says it does not fit."""
    lowered = check("mlp", entry("cuda", present=False, vendor=3))["platforms"]["cuda"]
    not_compiled = {
        **lowered,
        "memory": DeviceMemory(
            platform="cuda", level="not compiled", reason="not in compile"
        ).to_dict(),
    }
    refused = DeviceMemory(
        platform="cuda",
        level="compiled",
        device="NVIDIA H100",
        capacity_bytes=80 * 2**30,
        out_of_memory=OutOfMemory(needs_bytes=90 * 2**30, needs="90G", said="out of memory"),
    )
    compiled = {**lowered, "compile_error": "RESOURCE_EXHAUSTED: out of memory",
                "memory": refused.to_dict()}  # fmt: skip
    for order in (
        (("lowered", not_compiled), ("refused", compiled)),
        (("refused", compiled), ("lowered", not_compiled)),
    ):
        legs = [write(tmp_path, f"leg-{name}.json", leg_with(e)) for name, e in order]
        merged = merge(reports(legs), tolerance_for=defaults)
        cuda = platforms_of(merged.report, NODEID, "mlp")["cuda"]
        assert cuda["leg"] == "leg-refused.json"
        assert cuda["memory"]["fits"] is False
        said = "does not fit on cuda (NVIDIA H100): needs 90 GiB of 80 GiB"
        assert said in markdown(merged.document)


def test_a_leg_that_traced_a_check_wins_over_one_that_could_not(tmp_path: Path) -> None:
    """A CPU-only leg could not trace cuDNN attention; the leg with cuDNN counted it: the
    merged check is the counted one, without the other leg's "could not be traced here"."""
    untraced = Probe(
        name="attn",
        reference="cpu",
        note="could not be traced here: needs cuDNN (RuntimeError: cuDNN is not detected.)",
        untraced=Untraced(platform="cuda", needs="cuDNN", error="RuntimeError: cuDNN is not"),
    ).to_dict()
    counted = check("attn", entry("cuda", present=False, vendor=1))
    for order in ((untraced, counted), (counted, untraced)):
        legs = [
            write(tmp_path, f"leg-{i}.json", leg_report([make_test(NODEID, c)], present=["cpu"]))
            for i, c in enumerate(order)
        ]
        merged = merge(reports(legs), tolerance_for=defaults)
        (merged_check,) = find_test(merged.report, NODEID)["checks"]
        assert "untraced" not in merged_check
        assert merged_check["note"] is None
        assert merged_check["platforms"]["cuda"]["lowered"]["vendor"] == 1
    alone = merge(reports([write(tmp_path, "only.json", leg_report([make_test(NODEID, untraced)],
                                                            present=["cpu"]))]),
                  tolerance_for=defaults)  # fmt: skip
    (merged_check,) = find_test(alone.report, NODEID)["checks"]
    assert merged_check["untraced"]["needs"] == "cuDNN"


def test_violations_and_outcome(tmp_path: Path) -> None:
    violation = {
        "check": "mlp",
        "platform": "cuda",
        "key": "max_vendor_calls",
        "limit": 2,
        "origin": "pyproject.toml [tool.jaxport.budget]",
        "found": 3,
        "what": "vendor calls",
        "level": "lowered",
        "details": ["check 'mlp' on cuda: ..."],
    }
    legs = two_legs(tmp_path)
    cpu, gpu = legs[0][1], legs[1][1]
    find_test(cpu, NODEID)["violations"] = [violation]
    find_test(cpu, NODEID)["outcome"] = "failed"
    find_test(gpu, NODEID)["violations"] = [{**violation, "details": ["from the gpu leg"]}]
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    test = next(t for t in merged.report["tests"] if t["nodeid"] == NODEID)
    # cuda's entry came from the GPU leg, so its violation is the one kept
    assert [(v["leg"], v["details"]) for v in test["violations"]] == [
        ("leg-gpu.json", ["from the gpu leg"])
    ]
    assert test["outcome"] == "failed"
    assert test["legs"] == {"leg-cpu.json": "failed", "leg-gpu.json": "passed"}
    assert merged.report["summary"]["failed_tests"] == 1


def test_a_crashed_workers_test_stays_in_the_merge(tmp_path: Path) -> None:
    legs = two_legs(tmp_path)
    crash = {**make_test("tests/test_x.py::test_crash", outcome="error"), "crashed": True}
    legs[1][1]["tests"].append(crash)
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    crashed = next(t for t in merged.report["tests"] if t["nodeid"].endswith("test_crash"))
    assert (crashed["outcome"], crashed["crashed"]) == ("error", True)
    assert crashed["legs"] == {"leg-gpu.json": "error"}


def test_unsaved_outputs_are_noted_not_failed(tmp_path: Path) -> None:
    legs = two_legs(tmp_path)
    platforms_of(legs[1][1], NODEID, "mlp")["cuda"].pop("outputs")
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    assert merged.ok
    assert any("cuda ran on leg-gpu.json but its outputs were not saved" in n for n in merged.notes)


def test_legs_with_the_same_file_name_are_told_apart(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cpu = leg_report([make_test(NODEID, check("mlp", entry("cpu", present=True)))], present=[])
    other = {**cpu, "environment": {**cpu["environment"], "machine": "another machine"}}
    merged = merge(
        reports(
            [write(tmp_path / "a", "report.json", cpu), write(tmp_path / "b", "report.json", other)]
        ),
        tolerance_for=defaults,
    )
    names = [leg["leg"] for leg in merged.report["legs"]]
    assert names == [f"{tmp_path}/a/report.json", f"{tmp_path}/b/report.json"]


# -- refusals ---------------------------------------------------------------------------------


def test_truncated_and_foreign_json_are_refused_naming_the_file(tmp_path: Path) -> None:
    (good, _), _ = two_legs(tmp_path)
    truncated = tmp_path / "leg-truncated.json"
    truncated.write_text(good.read_text()[:200])
    with pytest.raises(MergeError, match=rf"^{truncated}: not valid JSON \(truncated\?\)"):
        load_legs([good, truncated])
    foreign = tmp_path / "package.json"
    foreign.write_text('{"name": "left-pad"}')
    with pytest.raises(MergeError, match=rf"^{foreign}: not a pytest-jaxport report$"):
        load_legs([good, foreign])
    with pytest.raises(MergeError, match=rf"^{tmp_path / 'nope.json'}: no such file$"):
        load_legs([tmp_path / "nope.json"])
    with pytest.raises(ReportError, match=rf"^{foreign}: not a pytest-jaxport report$"):
        merge(reports([(foreign, {"name": "left-pad"})]), tolerance_for=defaults)
    with pytest.raises(MergeError, match=r"^nothing to merge"):
        merge([], tolerance_for=defaults)


def test_wrong_schema_version_is_refused(tmp_path: Path) -> None:
    (cpu_path, _), (gpu_path, gpu) = two_legs(tmp_path)
    gpu["schema_version"] = 3
    write_json(gpu_path, gpu)
    with pytest.raises(MergeError, match=rf"^{gpu_path}: schema_version 3 is not supported"):
        load_legs([cpu_path, gpu_path])


def test_different_project_config_is_refused_but_platforms_may_differ(tmp_path: Path) -> None:
    (cpu_path, cpu), (gpu_path, gpu) = two_legs(tmp_path)
    assert {"platforms", "compile", "source", "emulate", "migrate_to"} == PER_LEG_CONFIG_KEYS
    gpu["config"] = {
        **gpu["config"],
        "platforms": ["cpu", "cuda", "rocm"],
        "source": "x.toml",
        "compile": ["cuda"],
        "emulate": ["rocm"],  # a leg without the hardware emulates it; others need not
        "migrate_to": ["rocm", "tpu"],  # a leg's default follows its platforms
    }
    merged = merge(
        reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults, outputs_root=tmp_path
    )
    assert merged.report["config"]["platforms"] == ["cpu", "cuda", "rocm"]
    assert merged.report["config"]["emulate"] == ["rocm"]
    assert merged.report["config"]["migrate_to"] == ["rocm", "tpu"]  # the legs' together
    # target is recorded only by legs that compile cuda: compared where both set it
    gpu["config"]["target"] = "h100"
    merged = merge(
        reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults, outputs_root=tmp_path
    )
    assert merged.report["config"]["target"] == "h100"
    assert merged.report["config"]["compile"] == ["cuda"]
    cpu["config"]["target"] = "a100"
    with pytest.raises(MergeError, match=r'\(target: "h100" here, "a100" in '):
        merge(reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults)
    cpu["config"]["target"] = None
    gpu["config"]["tolerance"] = {"float32": {"rtol": 1e-4}}
    with pytest.raises(MergeError) as info:
        merge(reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults)
    message = str(info.value)
    assert message.startswith(f"{gpu_path}: project config differs from {cpu_path} (tolerance: ")
    assert "\n" not in message
    assert message.endswith("(only platforms, compile, emulate and migrate_to may differ per leg)")


def test_legs_of_different_homes_are_refused_and_legs_of_one_home_keep_it(
    tmp_path: Path,
) -> None:
    """``home`` is what moving is measured from: legs measured from different platforms
    measured different things. A report that does not state it measured from cuda."""
    (cpu_path, cpu), (gpu_path, gpu) = two_legs(tmp_path)
    cpu["config"]["home"] = "tpu"
    gpu["config"]["home"] = "cuda"
    with pytest.raises(MergeError) as info:
        merge(reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults)
    message = str(info.value)
    assert message.startswith(f"{gpu_path}: project config differs from {cpu_path} (home: ")
    assert f'(home: "cuda" here, "tpu" in {cpu_path})' in message
    # a leg written before reports stated their home measured from cuda: it differs from tpu
    del gpu["config"]["home"]
    with pytest.raises(MergeError, match=rf'\(home: "cuda" here, "tpu" in {cpu_path}\)'):
        merge(reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults)
    # ... and agrees with cuda, which the merged report states
    cpu["config"]["home"] = "cuda"
    merged = merge(reports([(gpu_path, gpu), (cpu_path, cpu)]), tolerance_for=defaults)
    assert merged.document.config.home == "cuda"
    gpu["config"]["home"] = cpu["config"]["home"] = "tpu"
    merged = merge(
        reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults, outputs_root=tmp_path
    )
    assert merged.report["config"]["home"] == "tpu"
    assert merged.document.config.home_platform == "tpu"


def test_legs_with_different_cost_models_are_refused(tmp_path: Path) -> None:
    """The merged rewrite days use the legs' cost model: legs that priced differently measured
    different things."""
    (cpu_path, cpu), (gpu_path, gpu) = two_legs(tmp_path)
    gpu["summary"]["cost_model"] = {**gpu["summary"]["cost_model"], "kernel_rewrite": 20.0}
    with pytest.raises(MergeError) as info:
        merge(reports([(cpu_path, cpu), (gpu_path, gpu)]), tolerance_for=defaults)
    message = str(info.value)
    assert message.startswith(f"{gpu_path}: cost model ([tool.jaxport.cost]) ")
    assert f"differs from {cpu_path}'s" in message


def test_a_drift_fails_the_merged_test_and_is_its_problem(tmp_path: Path) -> None:
    legs = two_legs(tmp_path, gpu_values={"cuda": Y + 1.0})
    merged = merge(
        reports(load_legs([p for p, _ in legs])), tolerance_for=defaults, outputs_root=tmp_path
    )
    test = find_test(merged.report, NODEID)
    assert test["outcome"] == "failed"
    assert [d["platform"] for d in test["drifts"]] == ["cuda"]
    assert find_test(merged.report, OTHER)["outcome"] == "passed"
    view = build_view(merged.document)
    [group] = view.problems
    assert (group.kind, group.title) == ("drift", "cuda: outputs differ across legs")
    [problem] = group.problems
    assert problem.message.startswith("cuda (leg-gpu.json) differs from cpu (leg-cpu.json): ")
    assert "problems: 1 failed, 0 budget violations, 1 output drift across legs" in text(
        merged.document
    )


def test_missing_or_unreadable_outputs_are_refused_naming_both_files(tmp_path: Path) -> None:
    legs = two_legs(tmp_path)
    cuda = platforms_of(legs[1][1], NODEID, "mlp")["cuda"]
    npz = tmp_path / cuda["outputs"]
    npz.unlink()
    with pytest.raises(MergeError) as info:
        merge(reports(legs), tolerance_for=defaults)
    assert str(info.value).startswith(
        f"{legs[1][0]}: outputs of {NODEID} check 'mlp' on cuda: {npz}: no such outputs file"
    )
    npz.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(MergeError, match=r"cannot be read|unusable"):
        merge(reports(legs), tolerance_for=defaults)


def test_malformed_report_is_refused_naming_the_file(tmp_path: Path) -> None:
    (path, report), _ = two_legs(tmp_path)
    with pytest.raises(ReportError, match=rf"^{path}: a baseline, not a report"):
        merge(reports([(path, baseline_of(typed(report)))]), tolerance_for=defaults)
    find_test(report, NODEID)["checks"][0]["platforms"] = ["cpu"]
    with pytest.raises(
        ReportError,
        match=rf"^{path}: tests\[\d+\].checks\[0\].platforms: expected a table, found \[",
    ):
        merge(reports([(path, report)]), tolerance_for=defaults)
    report["tests"] = [{"outcome": "passed"}]
    with pytest.raises(ReportError, match=rf"^{path}: tests\[0\].nodeid: missing"):
        merge(reports([(path, report)]), tolerance_for=defaults)


# -- diff -------------------------------------------------------------------------------------


def simple(
    counts: Mapping[str, Mapping[str, tuple[int, int] | None]], *, compiled: int | None = None
) -> dict[str, Any]:
    """A report: per node id, per platform (vendor, custom), ``None`` for failed to lower."""
    tests = []
    for nodeid, platforms in counts.items():
        probe = {}
        for platform, pair in platforms.items():
            if pair is None:
                probe[platform] = PlatformProbe(platform=platform, present=False, error="no")
            else:
                probe[platform] = entry(platform, present=False, vendor=pair[0], custom=pair[1])
        chk = check("mlp", *probe.values())
        if compiled is not None:
            chk["platforms"]["cuda"]["compiled"] = census_to_dict(
                census("cuda", vendor=compiled, level="compiled")
            )
        tests.append(make_test(nodeid, chk))
    return leg_report(tests, present=[])


def test_diff_reports_growth_shrinkage_new_and_removed() -> None:
    base = simple(
        {NODEID: {"cuda": (3, 0), "tpu": (0, 1), "rocm": (2, 0)}, OTHER: {"cuda": (1, 0)}}
    )
    head = simple(
        {
            NODEID: {"cuda": (5, 0), "tpu": (0, 0), "rocm": None},
            "tests/test_new.py::test_new": {"cuda": (9, 9)},
        }
    )
    result = diff(typed(base), typed(head))
    assert result.grew
    grew = [c.describe() for c in result.growth]
    assert grew == [  # vendor, custom, per library, then formats: what a failure leads with
        "check 'mlp' on cuda: vendor calls grew 3 -> 5 (+2)",
        "check 'mlp' on cuda: cublas calls grew 3 -> 5 (+2)",
        "check 'mlp' on rocm: lowered before, fails to lower now",
    ]
    assert [c.describe() for c in result.shrinkage] == [
        "check 'mlp' on tpu: custom calls shrank 1 -> 0 (-1)"
    ]
    assert result.new_tests == ("tests/test_new.py::test_new",)
    assert result.removed_tests == (OTHER,)
    rendered = diff_text(result)
    assert rendered.splitlines()[0] == (
        "jaxport diff: 3 grew, 1 shrank, 1 new test, 1 removed test (1 test compared)"
    )
    assert f"  {NODEID} check 'mlp' on cuda: vendor calls grew 3 -> 5 (+2)" in rendered
    md = diff_markdown(result)
    assert f"| :red_circle: | `{NODEID}` | mlp | cuda | vendor calls | 3 | 5 | +2 |" in md
    assert f"| :green_circle: | `{NODEID}` | mlp | tpu | custom calls | 1 | 0 | -1 |" in md
    assert "**New tests:** `tests/test_new.py::test_new`" in md


def test_diff_only_shrinking_does_not_grow() -> None:
    result = diff(
        typed(simple({NODEID: {"cuda": (3, 1)}})), typed(simple({NODEID: {"cuda": (2, 0)}}))
    )
    assert not result.grew
    assert len(result.shrinkage) == 3
    same = diff(
        typed(simple({NODEID: {"cuda": (3, 1)}})), typed(simple({NODEID: {"cuda": (3, 1)}}))
    )
    assert same.changes == ()
    assert diff_text(same) == (
        "jaxport diff: 0 grew, 0 shrank, 0 new tests, 0 removed tests (1 test compared)"
    )


def test_diff_compares_like_levels_only() -> None:
    base = typed(simple({NODEID: {"cuda": (3, 0)}}))
    head = typed(simple({NODEID: {"cuda": (3, 0)}}, compiled=7))  # compiled shows more
    assert not diff(base, head).grew
    grown = diff(typed(simple({NODEID: {"cuda": (3, 0)}}, compiled=4)), head)
    assert [c.describe() for c in grown.growth] == [
        "check 'mlp' on cuda: vendor calls grew 4 -> 7 (+3) (compiled)",
        "check 'mlp' on cuda: cublas calls grew 4 -> 7 (+3) (compiled)",
    ]


def test_diff_new_and_removed_checks() -> None:
    base = simple({NODEID: {"cuda": (1, 0)}})
    head = simple({NODEID: {"cuda": (1, 0)}})
    head["tests"][0]["checks"].append(check("extra", entry("cuda", present=False, vendor=4)))
    result = diff(typed(base), typed(head))
    assert not result.grew
    assert result.new_checks == ((NODEID, "extra"),)
    assert diff(typed(head), typed(base)).removed_checks == ((NODEID, "extra"),)


# -- baselines --------------------------------------------------------------------------------


def test_baseline_is_small_sorted_and_stable() -> None:
    report = simple({OTHER: {"tpu": (0, 1), "cuda": (1, 0)}, NODEID: {"cuda": (3, 0)}})
    shuffled = dict(report, tests=list(reversed(report["tests"])))
    assert baseline_json(baseline_of(typed(report))) == baseline_json(baseline_of(typed(shuffled)))
    baseline = baseline_of(typed(report))
    assert list(baseline["tests"]) == sorted([OTHER, NODEID])
    assert baseline["tests"][NODEID] == {
        "mlp": {"cuda": {"lowered": {"custom": 0, "library.cublas": 3, "vendor": 3}}}
    }
    assert baseline["kind"] == "baseline"
    assert "version" not in baseline["tool"]  # upgrading the tool leaves the file alone
    assert baseline_of(baseline) == baseline


def test_compare_to_baseline_messages() -> None:
    baseline = baseline_of(typed(simple({NODEID: {"cuda": (3, 0), "rocm": (3, 0)}})))
    now = probes(simple({NODEID: {"cuda": (5, 0), "rocm": None}})["tests"][0]["checks"])
    found = compare_to_baseline(baseline, NODEID, now)
    assert [(g.fails, g.message) for g in found] == [
        (True, "check 'mlp' on cuda: vendor calls grew 3 -> 5 (+2) since the baseline"),
        (True, "check 'mlp' on cuda: cublas calls grew 3 -> 5 (+2) since the baseline"),
        (True, "check 'mlp' on rocm: lowered at the baseline, fails to lower now"),
    ]
    # As a test's failure says them, the way a broken budget is said: finding, sites, to pass.
    grown = [growth_violation(g.change, ".jaxport/b.json", now[0]) for g in found if g.change]
    assert failure_text(grown, NODEID).splitlines() == [
        "cuda: vendor calls grew 3 -> 5 (since the baseline .jaxport/b.json); check 'mlp', lowered",
        "    stablehlo.dot_general (cublas) x5",
        "cuda: cublas calls grew 3 -> 5 (since the baseline .jaxport/b.json); check 'mlp', lowered",
        "    stablehlo.dot_general (cublas) x5",
        "rocm: stopped lowering (since the baseline .jaxport/b.json); check 'mlp', lowered",
        "    no",
        f"(3 counts grown since the baseline in {NODEID})",
        "to pass: take out of the code what grew (the sites above say where), or, if the growth "
        "is intended, record it: pytest --jaxport-baseline=.jaxport/b.json "
        "--jaxport-baseline-update (from a full run), and commit the file",
    ]
    [stopped] = grown[2:]
    assert (
        failure_text([stopped], NODEID)
        .splitlines()[-1]
        .startswith(
            "to pass: make the code lower there again (the error above), or, if the change is "
            "intended, record it: "
        )
    )
    shrunk = probes(simple({NODEID: {"cuda": (1, 0)}})["tests"][0]["checks"])
    assert compare_to_baseline(baseline, NODEID, shrunk) == []
    [new] = compare_to_baseline(baseline, OTHER, shrunk)
    assert not new.fails
    assert new.message.startswith(f"{OTHER} is not in the baseline (new test)")
    assert compare_to_baseline(baseline, OTHER, []) == []
    extra = [*shrunk, *probes([check("extra", entry("cuda", present=False, vendor=1))])]
    assert [(g.fails, g.message) for g in compare_to_baseline(baseline, NODEID, extra)] == [
        (False, "check 'extra' is not in the baseline (new check): not compared")
    ]


def test_match_baseline_tells_compared_new_stale_and_not_run() -> None:
    """Each of the baseline's entries is matched, stale (only where a test of this run could
    have matched it) or not run; the tests and checks it lacks are new."""
    names = ("t.py::a", "t.py::b", "t.py::c", "t.py::d", "t.py::e", "u.py::f", "gone.py::g",
             "part.py::h", "t.py::i")  # fmt: skip
    baseline = baseline_of(typed(simple({name: {"cpu": (0, 0)} for name in names})))
    baseline["tests"]["t.py::a"]["old"] = baseline["tests"]["t.py::a"]["mlp"]
    now = simple({"t.py::a": {"cpu": (0, 0)}, "t.py::new": {"cpu": (0, 0)}})
    now["tests"][0]["checks"].append(check("extra", entry("cpu", present=False)))
    found = match_baseline(
        baseline, typed(now).tests, file="b.json",
        outcomes={"t.py::a": "passed", "t.py::new": "passed", "t.py::c": "passed",
                  "t.py::d": "skipped", "t.py::i": "failed"},
        deselected=["t.py::e"], partial_files=["part.py"],
        exists=lambda file: file != "gone.py",
    )  # fmt: skip
    assert (found.entries, found.compared, found.not_run) == (9, 1, 5)  # d, e, f, h, i
    assert found.new == ("t.py::new",)
    assert found.new_checks == (("t.py::a", "extra"),)
    assert [(e.nodeid, e.check, e.why) for e in found.stale] == [
        ("gone.py::g", None, "file-gone"),
        ("t.py::a", "old", "check-gone"),
        ("t.py::b", None, "removed"),  # t.py ran, and no test b was collected
        ("t.py::c", None, "checks-nothing"),
    ]
    assert not found.matched_nothing
    assert not found.fails  # without --jaxport-baseline-strict
    assert dataclasses.replace(found, strict=True).fails
    written = dataclasses.replace(typed(now), baseline=found).to_dict()  # the report's JSON
    assert typed(json.loads(json.dumps(written))).baseline == found
    another = typed(simple({"other.py::z": {"cpu": (0, 0)}})).tests  # another project's suite
    elsewhere = match_baseline(baseline, another, file="b.json", outcomes={"other.py::z": "passed"})
    assert elsewhere.matched_nothing


def test_load_counts_reads_reports_and_baselines(tmp_path: Path) -> None:
    report = simple({NODEID: {"cuda": (3, 0)}})
    write_json(tmp_path / "r.json", report)
    (tmp_path / "b.json").write_text(baseline_json(baseline_of(typed(report))))
    assert load_counts(tmp_path / "r.json") == load_counts(tmp_path / "b.json")
    bad = tmp_path / "bad.json"
    bad.write_text(baseline_json(baseline_of(typed(report)))[:50])
    with pytest.raises(MergeError, match=rf"^{bad}: not valid JSON \(truncated\?\)"):
        load_counts(bad)
    bad.write_text(json.dumps({**baseline_of(typed(report)), "schema_version": 7}))
    with pytest.raises(MergeError, match=rf"^{bad}: baseline schema_version 7 is not supported"):
        load_counts(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(MergeError, match=rf"^{bad}: not a pytest-jaxport report$"):
        load_counts(bad)


# -- properties -------------------------------------------------------------------------------

COUNT = st.integers(min_value=0, max_value=9)


@st.composite
def platform_probe(draw: st.DrawFn, platform: str) -> PlatformProbe:
    if draw(st.integers(0, 5)) == 0:
        return PlatformProbe(platform=platform, present=False, error="LoweringFailure: no")
    present = draw(st.booleans())
    return PlatformProbe(
        platform=platform,
        present=present,
        census=census(platform, vendor=draw(COUNT), custom=draw(COUNT)),
        executed=present and draw(st.booleans()),
    )


@st.composite
def any_report(draw: st.DrawFn) -> dict[str, Any]:
    nodeids = draw(
        st.lists(st.sampled_from([NODEID, OTHER, "t.py::a", "t.py::b[1]"]), unique=True, max_size=3)
    )
    tests = []
    for nodeid in nodeids:
        names = draw(st.lists(st.sampled_from(["mlp", "attn", "f#2"]), unique=True, max_size=2))
        checks = []
        for name in names:
            platforms = draw(
                st.lists(st.sampled_from(["cpu", "cuda", "rocm", "tpu"]), unique=True, min_size=1)
            )
            checks.append(check(name, *(draw(platform_probe(p)) for p in platforms)))
        outcome = draw(st.sampled_from(["passed", "failed", "skipped"]))
        tests.append(make_test(nodeid, *checks, outcome=outcome))
    return leg_report(tests, present=["cpu"])


def strip_provenance(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    tests = []
    for test in report["tests"]:
        checks = []
        for chk in test["checks"]:
            platforms = {
                p: {k: v for k, v in e.items() if k not in ("leg", "outputs", "numerics")}
                for p, e in chk["platforms"].items()
            }
            checks.append({"name": chk["name"], "platforms": platforms})
        tests.append({"nodeid": test["nodeid"], "outcome": test["outcome"], "checks": checks})
    return tests


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(report=any_report(), value=st.floats(-1e6, 1e6, width=32))
def test_merging_a_report_with_itself_is_consistent_and_idempotent(
    report: dict[str, Any], value: float
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        save(
            folder,
            "outputs",
            report,
            {p: np.full(3, value, np.float32) for p in ("cpu", "cuda", "rocm", "tpu")},
        )
        once = merge(
            reports([(folder / "leg-a.json", report)]), tolerance_for=defaults, outputs_root=folder
        )
        # A twin leg: the same results from another machine (the same report twice is refused)
        twin = {**report, "environment": {**report["environment"], "machine": "twin"}}
        twice = merge(
            reports([(folder / "leg-a.json", report), (folder / "leg-b.json", twin)]),
            tolerance_for=defaults,
            outputs_root=folder,
        )
        again = merge(
            reports([(folder / "merged.json", once.report)]),
            tolerance_for=defaults,
            outputs_root=folder,
        )
        assert once.ok
        assert twice.ok
        assert again.ok
        # the same content as the leg, whatever the provenance fields say
        assert strip_provenance(once.report) == strip_provenance(report)
        assert strip_provenance(twice.report) == strip_provenance(once.report)
        assert again.report["tests"] == once.report["tests"]
        assert twice.report["summary"] == once.report["summary"] == report["summary"]
        assert baseline_of(twice.document) == baseline_of(once.document)
        assert baseline_of(once.document) == baseline_of(typed(report))
        assert not diff(typed(report), twice.document).changes


def test_a_merged_report_reads_back_as_the_json_it_is(tmp_path: Path) -> None:
    legs = two_legs(tmp_path, gpu_values={"cuda": Y + 1.0})  # with a drift
    merged = merge(reports(legs), tolerance_for=defaults, outputs_root=tmp_path)
    path = tmp_path / "merged.json"
    write_json(path, merged.document)
    assert from_json(json.loads(path.read_text()), path).to_dict() == json.loads(path.read_text())
    assert json.loads(path.read_text()) == merged.report  # the typed report is its JSON
