"""Tests of pytest_jaxport.report.baseline, report.files.load and session.writer.

The typed report from end to end (issue 40): the session writes the Report it built, the
commands read one with ``report.load``, a baseline keeps the numbers the budget keys declare
as their ratchets, and a broken key is said by its declared kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import built_report

from pytest_jaxport.cli import main
from pytest_jaxport.model.budget import KEYS, Violation
from pytest_jaxport.model.census import Census, Kernel
from pytest_jaxport.model.devices import DEFAULT_DEVICES
from pytest_jaxport.model.findings import Finding, FormatCensus
from pytest_jaxport.model.probe import PlatformProbe, Probe
from pytest_jaxport.report.baseline import (
    FRACTIONS,
    METRICS,
    baseline_of,
    diff,
    ratcheted,
    value_text,
)
from pytest_jaxport.report.document import Report
from pytest_jaxport.report.files import load

SUITE = """
import jax.numpy as jnp
import pytest


@pytest.mark.portable
def test_solve(jaxport):
    jaxport.check(jnp.linalg.solve, jnp.eye(3) * 2.0, jnp.ones(3))
"""


def _every_number() -> Report:
    """A report whose one check has a census of every kind at both levels: vendor and
    custom kernels, a library, lowered formats findings (padding too) and compiled
    relayouts."""
    kernels = (
        Kernel(layer="vendor", name="cublas_gemm", kind="gemm", library="cublas", count=2),
        Kernel(layer="custom", name="my_kernel", kind="ffi", count=1),
    )
    findings = (
        Finding(kind="format", rule="float64-emulated", platform="tpu", count=2,
                effect="emulated", formats=("float64",)),
        Finding(kind="layout", rule="tile-padding", platform="tpu", effect="padded",
                amount=7.0, of=64.0, unit="bytes"),
    )  # fmt: skip
    relayout = Finding(kind="layout", rule="inserted-relayout", platform="tpu",
                       level="compiled", count=3, effect="relayout")  # fmt: skip
    tpu = PlatformProbe(
        platform="tpu", present=False,
        census=Census(platform="tpu", kernels=kernels),
        formats=FormatCensus(platform="tpu", device=DEFAULT_DEVICES["tpu"], findings=findings),
        compiled=Census(platform="tpu", level="compiled", kernels=kernels),
        compiled_formats=FormatCensus(platform="tpu", device=DEFAULT_DEVICES["tpu"],
                                      level="compiled", findings=(relayout,)),
    )  # fmt: skip
    probe = Probe(name="mlp", reference="cpu", platforms={"tpu": tpu})
    test = {"nodeid": "t.py::test_mlp", "outcome": "passed", "checks": [probe.to_dict()]}
    return built_report([test], config={"platforms": ["cpu", "tpu"], "reference": "cpu"},
                        environment={})  # fmt: skip


def test_a_baselines_numbers_are_the_budget_keys_ratchets() -> None:
    """Each key's declared ratchet (and what it keeps beside it) is a number a baseline keeps,
    and a baseline keeps no number no key declares (``padding_bytes`` is not one)."""
    declared = [m for k in KEYS if k.ratchet is not None for m in (k.ratchet, *k.ratchet_also)]
    assert declared, "no budget key declares a ratchet"
    assert list(METRICS) == declared
    levels = baseline_of(_every_number())["tests"]["t.py::test_mlp"]["mlp"]["tpu"]
    kept = {metric for counts in levels.values() for metric in counts}
    for key in KEYS:
        for metric in (key.ratchet, *key.ratchet_also) if key.ratchet else ():
            found = {m for m in kept if m == metric or (metric.endswith(".") and
                                                         m.startswith(metric))}  # fmt: skip
            assert found, f"{key.name}'s ratchet {metric} is not in the baseline: {sorted(kept)}"
    assert all(ratcheted(m) for m in kept)
    assert not ratcheted("padding_bytes")
    assert levels["lowered"]["library.cublas"] == 2
    assert levels["compiled"]["relayouts"] == 3
    # A fraction key's ratchet is a share: said as a percentage wherever a baseline says it.
    shares = {k.ratchet for k in KEYS if k.kind == "fraction" and k.ratchet is not None}
    assert FRACTIONS == shares == {"padding_waste"}
    assert value_text("padding_waste", 0.109375) == "10.9%"


def test_a_broken_key_is_said_by_its_declared_kind() -> None:
    """A list key says what fails or is used, a flag what happened, a count what was found
    against its limit: the sentences a failure leads with."""

    def said(key: str, **fields: object) -> str:
        base: dict[str, object] = {"check": "c", "platform": "tpu", "key": key, "limit": 1,
                                   "origin": "pyproject.toml", "found": 2, "what": "x"}  # fmt: skip
        return Violation(**{**base, **fields}).finding()  # type: ignore[arg-type]

    assert said("must_lower", limit=["tpu"], found="fails", what="lower") == "fails to lower"
    assert said("forbid_formats", limit=["float64"], found="float64") == "uses float64"
    assert said("must_trace", limit=True, found="untraced") == "could not be traced here"
    assert said("max_vendor_calls", found=3, what="vendor calls") == "3 vendor calls > 1"
    kinds = {k.name: k.kind for k in KEYS}
    assert (kinds["must_lower"], kinds["forbid_formats"], kinds["must_trace"]) == (
        "platforms", "formats", "flag")  # fmt: skip


@pytest.mark.slow
def test_the_session_writes_the_report_it_built_and_the_commands_read_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real run writes its Report; ``jaxport baseline`` of that file gives the baseline the
    run wrote itself, and ``jaxport diff`` of the report against that baseline finds nothing."""
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n')
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--jaxport-report=r.json",
        "--jaxport-baseline=b.json", "--jaxport-baseline-update",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    path = pytester.path / "r.json"
    report = load(path)
    assert isinstance(report, Report)
    assert path.read_text() == json.dumps(report.to_dict()) + "\n"  # what load read is it
    assert [t.nodeid for t in report.tests] == ["test_suite.py::test_solve"]
    assert report.checks().__next__().probe.platforms["cuda"].census is not None
    assert main(["baseline", str(path), "-o", str(pytester.path / "again.json")]) == 0
    assert (pytester.path / "again.json").read_text() == (pytester.path / "b.json").read_text()
    capsys.readouterr()
    assert main(["diff", str(path), str(pytester.path / "b.json")]) == 0
    assert capsys.readouterr().out.startswith("jaxport diff: 0 grew, 0 shrank")
    assert not diff(report, report).changes


def test_baseline_of_refuses_a_reports_json() -> None:
    """A report's JSON is read with ``report.load`` first (checked, typed); only a baseline is
    taken as it is."""
    report = _every_number()
    with pytest.raises(TypeError, match="a Report or a baseline"):
        baseline_of(report.to_dict())
    counts = baseline_of(report)
    assert baseline_of(counts) == counts


def test_a_written_report_with_a_wrong_field_is_refused_by_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    data = _every_number().to_dict()
    data["tests"][0]["checks"][0]["platforms"]["tpu"]["lowered"]["vendor"] = "three"  # type: ignore[index,call-overload]
    path.write_text(json.dumps(data))
    assert main(["baseline", str(path), "-o", str(tmp_path / "b.json")]) == 2
    assert capsys.readouterr().err == (
        f"jaxport baseline: {path}: tests[0].checks[0].platforms.tpu.lowered.vendor: "
        'expected an integer, found "three"\n'
    )
    assert not (tmp_path / "b.json").exists()
