"""A generated suite for the report at scale: a realistic mix of portable tests, any size.

``write_suite(folder, tests=2000)`` writes a project whose tests are mostly passing and
parametrized (dense layers, attention, linear solves, FFT filters, conv nets, a hand-written
kernel behind ``platform_dependent``), about 5 % over a cuDNN budget, a few whose function
does not lower on tpu (some of them required to by ``must_lower``), a few that raise after
their check and a few marked portable that check nothing. :data:`MIX` gives the proportions.

``replicate(report, tests)`` grows a real report of this suite to ``tests`` tests by cloning
its tests under new parametrize ids (numbers per test function, so ``[4]`` and ``[10]`` both
occur) and counting the suite again with the real summary code: how the test suite checks
the report formats at 2,000 tests without lowering 2,000 checks.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MIX: tuple[tuple[str, str, float], ...] = (
    # (file, test function, share of the suite)
    ("test_dense.py", "test_mlp", 0.24),
    ("test_dense.py", "test_attention", 0.18),
    ("test_linalg.py", "test_solve", 0.14),
    ("test_signal.py", "test_lowpass", 0.10),
    ("test_conv.py", "test_convnet", 0.14),
    ("test_conv.py", "test_convnet_tight_budget", 0.05),
    ("test_kernels.py", "test_fused", 0.10),
    ("test_linalg.py", "test_eigenvalues", 0.02),
    ("test_linalg.py", "test_eigenvalues_must_lower", 0.01),
    ("test_broken.py", "test_raises", 0.005),
    ("test_broken.py", "test_checks_nothing", 0.005),
)
"""The mix: what share of the suite each parametrized test function gets (at least one)."""

PYPROJECT = """\
[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]

[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"
migrate_to = ["rocm", "tpu"]

[tool.jaxport.budget]
max_custom_calls = 1

[tool.jaxport.budget.cuda]
max_library_calls = { cudnn = 2 }
"""

MODELS = '''\
"""Models of the generated report-scale suite."""

import jax
import jax.numpy as jnp

SIZES = (8, 16, 24, 32)


def size(i):
    return SIZES[i % len(SIZES)]


def mlp(x, w1, w2):
    return jax.nn.relu(x @ w1) @ w2


def attention(q, k, v):
    scores = q @ k.T / jnp.sqrt(q.shape[-1])
    return jax.nn.softmax(scores, axis=-1) @ v


def solve(a, b):
    return jnp.linalg.solve(a, b)


def lowpass(x):
    spectrum = jnp.fft.rfft(x)
    keep = jnp.arange(spectrum.shape[-1]) < 4
    return jnp.fft.irfft(spectrum * keep, n=x.shape[-1])


def convnet(x, k1, k2):
    dims = ("NHWC", "HWIO", "NHWC")
    y = jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dims)
    y = jax.nn.relu(y)
    return jax.lax.conv_general_dilated(y, k2, (1, 1), "SAME", dimension_numbers=dims)


def eigenvalues(a):
    return jnp.linalg.eig(a)[0]


def _fused_kernel(x):
    return jax.ffi.ffi_call("my_fused_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def fused(x):
    return jax.lax.platform_dependent(x, cuda=_fused_kernel, default=jnp.tanh)
'''

TESTS: Mapping[str, str] = {
    "test_mlp": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_mlp(jaxport, i):
    n = models.size(i)
    jaxport.check(models.mlp, jnp.ones((4, n)), jnp.ones((n, n)) * 0.1, jnp.ones((n, 2)))
""",
    "test_attention": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_attention(jaxport, i):
    q = jnp.ones((models.size(i), 8)) * 0.1
    jaxport.check(models.attention, q, q, q)
""",
    "test_solve": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_solve(jaxport, i):
    n = models.size(i)
    jaxport.check(models.solve, jnp.eye(n) * 3.0 + 0.1, jnp.ones((n,)))
""",
    "test_eigenvalues": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_eigenvalues(jaxport, i):
    jaxport.check(models.eigenvalues, jnp.eye(models.size(i)) * 2.0)
""",
    "test_eigenvalues_must_lower": """
@pytest.mark.portable(must_lower=["cpu", "tpu"])
@pytest.mark.parametrize("i", range({n}))
def test_eigenvalues_must_lower(jaxport, i):
    jaxport.check(models.eigenvalues, jnp.eye(models.size(i)) * 2.0)
""",
    "test_lowpass": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_lowpass(jaxport, i):
    jaxport.check(models.lowpass, jnp.sin(jnp.arange(4 * models.size(i)) * 0.3))
""",
    "test_convnet": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_convnet(jaxport, i):
    x = jnp.ones((1, models.size(i), models.size(i), 3))
    jaxport.check(models.convnet, x, jnp.ones((3, 3, 3, 4)) * 0.1, jnp.ones((3, 3, 4, 2)) * 0.1)
""",
    "test_convnet_tight_budget": """
@pytest.mark.portable(max_library_calls={{"cudnn": 1}})
@pytest.mark.parametrize("i", range({n}))
def test_convnet_tight_budget(jaxport, i):
    x = jnp.ones((1, models.size(i), models.size(i), 3))
    jaxport.check(models.convnet, x, jnp.ones((3, 3, 3, 4)) * 0.1, jnp.ones((3, 3, 4, 2)) * 0.1)
""",
    "test_fused": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_fused(jaxport, i):
    jaxport.check(models.fused, jnp.ones((models.size(i),)))
""",
    "test_raises": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_raises(jaxport, i):
    jaxport.check(models.mlp, jnp.ones((4, 8)), jnp.ones((8, 8)), jnp.ones((8, 2)))
    raise ValueError(f"model bug in case {{i}}")
""",
    "test_checks_nothing": """
@pytest.mark.portable
@pytest.mark.parametrize("i", range({n}))
def test_checks_nothing(jaxport, i):
    assert models.size(i) > 0
""",
}

# The generated files are the recorded reports' input (tests/test_reports_unchanged.py): their
# text, this file's old name in it included, stays as it was recorded.
HEADER = '''"""Generated by benchmarks/report_suite.py."""

import jax.numpy as jnp
import pytest

import models_report as models
'''


def counts(tests: int) -> dict[str, int]:
    """How many tests each test function gets: ``tests`` in all (every function at least
    one, so a suite smaller than ``len(MIX)`` is larger than asked)."""
    found = {name: max(1, round(share * tests)) for _, name, share in MIX}
    found["test_mlp"] = max(1, found["test_mlp"] + tests - sum(found.values()))
    return found


def write_suite(folder: Path, tests: int = 2000) -> dict[str, int]:
    """Write the project (``pyproject.toml``, ``models_report.py``, ``tests/``) into ``folder``;
    return the number of tests per test function."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    (folder / "models_report.py").write_text(MODELS)
    (folder / "tests").mkdir(exist_ok=True)
    n = counts(tests)
    files: dict[str, list[str]] = {}
    for file, name, _ in MIX:
        files.setdefault(file, []).append(TESTS[name].format(n=n[name]))
    for file, bodies in files.items():
        (folder / "tests" / file).write_text(HEADER + "".join(bodies))
    return n


_ID = re.compile(r"^(?P<base>[^\[]+)(\[(?P<id>[^\]]*)\])?$")


def replicate(report: Mapping[str, Any], tests: int) -> dict[str, Any]:
    """``report`` (of a suite :func:`write_suite` wrote) grown to ``tests`` tests in the
    proportions of :data:`MIX`: each test function's tests cloned round-robin and renumbered,
    then the suite counted again (summary, runtime share, kernels to rewrite, days)."""
    import dataclasses

    from pytest_jaxport.model.cost import CostModel
    from pytest_jaxport.report.document import SCHEMA_VERSION, TOOL_NAME
    from pytest_jaxport.report.entries import TestEntry
    from pytest_jaxport.report.reader import Reader, record_reader
    from pytest_jaxport.report.summary import Pricing, probes_of, suite_numbers, suite_summary
    from pytest_jaxport.report.totals import Tooling
    from pytest_jaxport.version import __version__

    by_function: dict[str, list[dict[str, Any]]] = {}
    for test in report["tests"]:
        match = _ID.match(test["nodeid"])
        assert match is not None, test["nodeid"]
        by_function.setdefault(match.group("base"), []).append(test)
    wanted = counts(tests)
    grown = []
    for base, originals in by_function.items():
        for k in range(wanted[base.rpartition("::")[2]]):
            test = copy.deepcopy(originals[k % len(originals)])
            old, new = test["nodeid"], f"{base}[{k}]"
            test["nodeid"] = new
            for violation in test.get("violations", ()):
                if violation.get("origin") == old:
                    violation["origin"] = new
            if test.get("error"):
                test["error"]["message"] = test["error"]["message"].replace(old, new)
            grown.append(test)
    config = dict(report["config"])
    entries = [TestEntry.read(record_reader(t)) for t in grown]
    recorded = report["summary"].get("tooling")
    tooling = Tooling.read(Reader(recorded, file="report")) if recorded is not None else None
    model = report["summary"].get("cost_model", {})
    pricing = Pricing(migrate_to=tuple(config.get("migrate_to", ())), model=CostModel(**model))
    numbers = suite_numbers(probes_of(entries), pricing, tooling=tooling)
    summary = suite_summary(
        sorted(entries, key=lambda t: t.nodeid),
        numbers=dataclasses.replace(numbers, cost_model=pricing.model),
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": TOOL_NAME, "version": __version__},
        "environment": dict(report["environment"]),
        "config": config,
        "summary": summary.to_dict(),
        "tests": sorted(grown, key=lambda t: t["nodeid"]),
    }
