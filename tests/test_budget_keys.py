"""Each budget key is declared once (``pytest_jaxport.model.budget.KEYS``), and everything
else is derived from it: the configuration's keys and their validation, the marker's
signature and ``--markers`` help, :class:`Budget`'s fields and ``evaluate``'s checks.

Adding a key is one entry in ``KEYS`` plus an example value here (``EXAMPLES``) and, where
this machine can produce it, a line of :data:`_CODE` that breaks it.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_jaxport.model.budget import (
    KEYS,
    Budget,
    BudgetKey,
    Elsewhere,
    OnCheck,
    OnPlatform,
    OnTarget,
    Setting,
)
from pytest_jaxport.model.census import Census
from pytest_jaxport.model.classification import libraries
from pytest_jaxport.model.config import BUDGET_KEYS, PROJECT_ONLY_KEYS, ConfigError
from pytest_jaxport.model.devices import DEFAULT_DEVICES
from pytest_jaxport.model.evaluation import evaluate
from pytest_jaxport.model.findings import Finding, FormatCensus
from pytest_jaxport.model.marker import (
    MARKER_KEYS,
    MARKER_OPTIONS,
    merge_marks,
    parse_marker,
    portable,
)
from pytest_jaxport.model.probe import PlatformProbe, Probe, Untraced
from pytest_jaxport.model.pyproject import parse_project

DEMO_SRC = Path(__file__).parent.parent / "examples" / "demo" / "src"

EXAMPLES: dict[str, object] = {
    "count": 3,
    "fraction": 0.25,
    "days": 1.5,
    "flag": True,
    "platforms": ["cuda"],
    "globs": ["my_kernel_*"],
    "formats": ["float8_*"],
    "rules": ["float32-*"],
    "libraries": {"cudnn": 2},
    "memory": "12 GiB",
}
"""A valid value of each kind."""
WRONG: dict[str, tuple[object, str]] = {
    "count": (-1, "expected a non-negative integer, found int -1"),
    "fraction": (1.5, "expected a fraction between 0 and 1, found float 1.5"),
    "days": ("two", "expected a non-negative number of days, found string 'two'"),
    "flag": (1, "expected true or false, found int 1"),
    "platforms": ("cuda", "expected a list of platforms (from cpu, cuda, rocm, tpu, oneapi), found "
                          "string 'cuda'"),
    "globs": ("k_*", 'expected a list of glob patterns (e.g. ["my_kernel_*"]), found string '
                     "'k_*'"),
    "formats": (["float99"], "unknown format 'float99'"),
    "rules": (["no-such-rule"], "unknown rule 'no-such-rule'"),
    "libraries": ({"cudnnn": 0}, "unknown library 'cudnnn' (did you mean 'cudnn'?)"),
    "memory": ("12", 'a size needs its unit: "12" is ambiguous; write "12 GiB" (2^30 bytes '
                     'each) or "12 GB" (10^9), or a fraction of the capacity as a number (0.9), '
                     "found string '12'"),
}  # fmt: skip
"""A wrong value of each kind, and what the error says after the key's name."""

NAMES = [k.name for k in KEYS]
JUDGED_HERE_ONLY_ON_PLAIN_DATA = {"max_relayouts", "must_trace"}
"""Keys a run on this machine cannot break: relayouts are counted where cuda is compiled
(the jax CUDA plugin), ``must_trace`` where tracing lacks what the machine lacks (cuDNN).
:func:`test_the_keys_no_run_here_breaks_are_judged_on_plain_data` judges them."""


def test_budget_and_the_configuration_name_the_declared_keys_in_their_order() -> None:
    assert [f.name for f in fields(Budget)] == ["platform", *NAMES]
    assert list(BUDGET_KEYS) == NAMES
    assert list(PROJECT_ONLY_KEYS) == [k.name for k in KEYS if k.project_only]
    assert list(MARKER_KEYS) == [
        *(k.name for k in KEYS if k.project_only is None),
        *(name for name, _ in MARKER_OPTIONS),
    ]
    assert set(EXAMPLES) == set(WRONG) == {k.kind for k in KEYS}
    assert all(isinstance(k.judged, OnPlatform | OnCheck | OnTarget | Elsewhere) for k in KEYS)


@pytest.mark.parametrize("key", KEYS, ids=NAMES)
def test_every_declared_key_is_read_from_pyproject_and_checked_by_its_kind(key: BudgetKey) -> None:
    value = EXAMPLES[key.kind]
    project = parse_project({"budget": {key.name: value}}, "pyproject.toml")
    budget = project.resolve().budget("cuda")
    assert budget.is_set(key.name)
    wrong, said = WRONG[key.kind]
    with pytest.raises(ConfigError) as info:
        parse_project({"budget": {key.name: wrong}}, "pyproject.toml")
    assert str(info.value).startswith(f"pyproject.toml: [tool.jaxport.budget] {key.name}")
    assert said in str(info.value)
    # A platform's table limits only its own libraries (issue 50: cudnn on tpu is refused).
    on_tpu = {sorted(libraries("tpu"))[0]: 2} if key.kind == "libraries" else value
    for table in (
        {"budget": {"tpu": {key.name: on_tpu}}},
        {"audit": {"fail_on": {key.name: value}}},
    ):
        if key.project_only is None:
            parse_project(table, "pyproject.toml")
            continue
        with pytest.raises(ConfigError) as info:
            parse_project(table, "pyproject.toml")
        assert str(info.value).endswith(
            f"{key.name}: expected only in [tool.jaxport.budget] ({key.project_only}), "
            "found it here"
        )


@pytest.mark.parametrize("key", KEYS, ids=NAMES)
def test_the_marker_takes_every_declared_key_but_the_project_only_ones(key: BudgetKey) -> None:
    value = EXAMPLES[key.kind]
    if key.project_only is not None:
        with pytest.raises(ConfigError, match=f"unknown keyword '{key.name}'"):
            parse_marker((), {key.name: value}, "t.py::t")
        with pytest.raises(TypeError, match=key.name):
            portable(**{key.name: value})
        return
    parsed = parse_marker((), {key.name: value}, "t.py::t")
    budget = parse_project({}, "p").resolve(merge_marks([("t.py::t", parsed)])).budget("cuda")
    assert budget.is_set(key.name)
    wrong, said = WRONG[key.kind]
    with pytest.raises(ConfigError) as info:
        parse_marker((), {key.name: wrong}, "t.py::t")
    assert str(info.value).startswith(f"@pytest.mark.portable on t.py::t: {key.name}")
    assert said in str(info.value)


def test_the_marker_signature_is_made_from_the_declaration() -> None:
    signature = inspect.signature(portable)
    assert list(signature.parameters) == list(MARKER_KEYS)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in signature.parameters.values())
    assert str(signature.parameters["max_library_calls"]) == (
        "max_library_calls: 'Mapping[str, int] | None' = None"
    )
    assert portable(max_custom_calls=0, rtol=None) == {"max_custom_calls": 0}
    with pytest.raises(TypeError, match="max_cudnn_calls"):
        portable(max_cudnn_calls=2)
    with pytest.raises(ConfigError) as info:  # the did-you-mean reads the derived keys
        parse_marker((), {"max_custum_calls": 0}, "t.py::t")
    assert "(did you mean 'max_custom_calls'?); known: max_custom_calls, " in str(info.value)


def test_markers_help_lists_every_marker_keyword_with_its_type(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    [line] = [ln for ln in result.outlines if ln.startswith("@pytest.mark.portable(")]
    for name, parameter in inspect.signature(portable).parameters.items():
        annotation = str(parameter.annotation)
        assert f"{name}: {annotation} = None" in line, name
    assert "max_tooling_assumptions" not in line


# A real run breaks every key it can: two checks on the demo's models, lowered for all four
# platforms (no hardware needed), against a budget of nothing.
_PYPROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
compile = ["cpu"]
devices = { rocm = "mi300" }

[tool.jaxport.budget]
max_custom_calls = 0
max_vendor_calls = 0
max_library_calls = { cusolver = 0 }
must_lower = ["cuda"]
max_vendor_share = 0.0
max_custom_share = 0.0
max_kernels_to_rewrite = 0
max_rewrite_days = 0
max_format_findings = 0
forbid_formats = ["float8_e4m3fn"]
max_padding_waste = 0.0
max_relayouts = 0
max_device_memory = "1 KiB"
"""
_CODE = """
import jax, jax.numpy as jnp, pytest
from demo_models import fp8_matmul, fused_bias_gelu, quantize, solve

def everything(x, b, a, y, w, z):
    qx, sx = quantize(x)
    qw, sw = quantize(w)
    return (
        fused_bias_gelu(x, b),  # custom calls on cuda and tpu, a custom share, a rewrite
        solve(a, y),  # vendor calls (cusolver on cuda, lapack on cpu), a vendor share
        fp8_matmul(qx, qw, sx, sw),  # float8: format findings, a forbidden format
        z @ jnp.ones((100, 128)),  # tpu pads 100 to 128: padding waste
    )

@pytest.mark.portable
def test_all(jaxport):
    x = jax.random.normal(jax.random.key(0), (16, 128))
    w = jax.random.normal(jax.random.key(1), (128, 7))
    jaxport.check(everything, x, jnp.ones((128,)), jnp.eye(8) * 2.0, jnp.ones((8, 3)), w,
                  jnp.ones((4096, 100)))
    # Mosaic GPU takes a multiple of 128 elements: this does not lower for cuda (must_lower)
    jaxport.check(fused_bias_gelu, jnp.ones((13, 130)), jnp.ones((130,)))
"""


@pytest.mark.slow
def test_a_real_run_breaks_each_key_a_check_is_judged_against(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject=_PYPROJECT)
    pytester.makepyfile(test_all=_CODE)
    pytester.syspathinsert(DEMO_SRC)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--jaxport-baseline=b.json", "--jaxport-baseline-update"
    )
    result.assert_outcomes(failed=1)
    said = set(re.findall(r"\((\w+)(?:\.\w+)?(?:, set in| = )", result.stdout.str()))
    judged = {k.name for k in KEYS if not isinstance(k.judged, Elsewhere)}
    assert said == judged - JUDGED_HERE_ONLY_ON_PLAIN_DATA
    # each key's ratchet is a number the baseline keeps (relayouts: cpu's compiled level)
    baseline = json.loads((pytester.path / "b.json").read_text())
    kept = {
        metric.partition(".")[0] + ("." if "." in metric else "")
        for check in baseline["tests"]["test_all.py::test_all"].values()
        for levels in check.values()
        for counts in levels.values()
        for metric in counts or {}
    }
    ratchets = {k.ratchet for k in KEYS if k.ratchet is not None}
    assert ratchets <= kept, ratchets - kept


def test_the_keys_no_run_here_breaks_are_judged_on_plain_data() -> None:
    relayout = Finding(kind="layout", rule="inserted-relayout", platform="cuda", level="compiled",
                       count=3, effect="relayout")  # fmt: skip
    compiled = FormatCensus(platform="cuda", device=DEFAULT_DEVICES["cuda"], level="compiled",
                            findings=(relayout,))  # fmt: skip
    cuda = PlatformProbe(platform="cuda", present=False, census=Census(platform="cuda"),
                         compiled=Census(platform="cuda", level="compiled"),
                         compiled_formats=compiled, deviceless=True, target="h100")  # fmt: skip
    untraced = Untraced(platform="cuda", needs="cuDNN", error="cuDNN is not found")
    probes = [
        Probe(name="conv", reference="cpu", platforms={"cuda": cuda}),
        Probe(name="attention", reference="cpu", untraced=untraced),
    ]

    def budget(platform: str) -> Budget:
        return Budget(platform=platform, max_relayouts=Setting(value=0, origin="here"),
                      must_trace=Setting(value=True, origin="here"))  # fmt: skip

    found = {v.key for probe in probes for v in evaluate(probe, budget)}
    assert found == JUDGED_HERE_ONLY_ON_PLAIN_DATA
