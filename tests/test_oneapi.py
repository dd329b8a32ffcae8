"""Tests of pytest_jaxport.model.platforms's oneapi description, end to end.

oneapi (Intel GPUs) as a platform like the others (issue 41).

On a JAX that lowers for oneapi with its solver calls (0.12+), a check counts oneMKL,
oneDNN, oneCCL and jaxlib's oneapi kernels, a Pallas kernel is a kernel to rewrite, and
every report format and ``jaxport merge`` carry the platform. On an older JAX, asking for
oneapi is a configuration error naming the release it needs (its counts there would be
silently wrong). Each expectation about this JAX is checked against what JAX itself lowers
(``jax.jit(f).trace(x).lower(lowering_platforms=("oneapi",))``).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

from pytest_jaxport.model.platforms import DESCRIPTIONS, release
from tests.helpers import run_json

NEEDED = DESCRIPTIONS["oneapi"].requires_jax or "0"
INSTALLED = importlib.metadata.version("jax")
LOWERS_ONEAPI = release(INSTALLED) >= release(NEEDED)

needs_oneapi_jax = pytest.mark.skipif(
    not LOWERS_ONEAPI, reason=f"oneapi's counts need jax {NEEDED}+, found {INSTALLED}"
)
older_jax = pytest.mark.skipif(
    LOWERS_ONEAPI, reason=f"jax {INSTALLED} lowers for oneapi; the refusal is for older jax"
)

ONEAPI_PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "oneapi"]
"""

CENSUS_TEST = """
import jax, jax.numpy as jnp, numpy as np, pytest
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

A = jnp.eye(8) + 0.1
B = jnp.ones(8)

def conv(x, k):
    return lax.conv(x, k, (1, 1), "SAME")

CASES = {
    "solve": (jnp.linalg.solve, (A, B)),
    "eigh": (jnp.linalg.eigh, (A,)),
    "qr": (jnp.linalg.qr, (A,)),
    "svd": (jnp.linalg.svd, (A,)),
    "cholesky": (jnp.linalg.cholesky, (A,)),
    "dot": (jnp.dot, (A, A)),
    "conv": (conv, (jnp.ones((1, 3, 8, 8)), jnp.ones((4, 3, 3, 3)))),
    "fft": (jnp.fft.fft, (B,)),
}

@pytest.mark.portable
@pytest.mark.parametrize("name", list(CASES))
def test_op(jaxport, name):
    fn, args = CASES[name]
    jaxport.check(fn, *args, name=name)

def loss(params, x, y):
    h = x
    for w, b in params:
        h = jnp.tanh(h @ w + b)
    return jnp.mean((h - y) ** 2)

def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

@pytest.mark.portable
def test_sharded_step(jaxport):
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = [(jax.device_put(np.eye(8, dtype=np.float32), replicated),
               jax.device_put(np.zeros(8, np.float32), replicated)) for _ in range(3)]
    x = jax.device_put(np.ones((16, 8), np.float32), batch)
    jaxport.check(step, params, x, x, name="step")
"""


def _oneapi_targets(fn_source: str) -> list[str]:
    """The custom-call targets JAX itself emits lowering ``fn_source``'s ``CASES`` entries
    for oneapi, asked directly in a fresh interpreter (the census must agree)."""
    code = (
        fn_source
        + """
import re
found = {}
for name, (fn, args) in CASES.items():
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("oneapi",)).as_text()
    found[name] = sorted(set(re.findall(r'call_target_name = "([^"]+)"', text))
                         | set(re.findall(r"custom_call @(\\w+)", text)))
print(json.dumps(found))
"""
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + code.replace("@pytest.mark", "#")],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@needs_oneapi_jax
def test_a_oneapi_census_counts_onemkl_onednn_oneccl_and_jaxlib(
    pytester: pytest.Pytester,
) -> None:
    """solve, eigh, qr, svd and cholesky are oneMKL solver calls (jaxlib's
    ``oneapisolver_*`` targets, as JAX emits them), dot a oneDNN gemm, conv a oneDNN
    convolution, fft oneMKL's DFT, and the data-parallel step's gradient all-reduces
    (inserted by the partitioner) oneCCL collectives; the report says so per check and in
    the suite totals."""
    pytester.makepyprojecttoml(ONEAPI_PROJECT)
    pytester.makepyfile(test_intel_census=CENSUS_TEST)
    result, report = run_json(pytester)
    result.assert_outcomes(passed=9)
    checks = {c["name"]: c for t in report["tests"] for c in t["checks"]}
    emitted = _oneapi_targets(CENSUS_TEST.split("@pytest.mark.portable")[0])

    def lowered(name: str) -> dict:
        return checks[name]["platforms"]["oneapi"]["lowered"]

    for name in ("solve", "eigh", "qr", "svd", "cholesky"):
        kernels = {k["name"]: k for k in lowered(name)["kernels"]}
        solver = [t for t in emitted[name] if t.startswith("oneapisolver_")]
        assert solver, (name, emitted[name])  # JAX emits oneMKL solver calls for it
        for target in solver:
            assert (kernels[target]["library"], kernels[target]["kind"]) == ("onemkl", "solver")
    solve = {k["name"]: k["library"] for k in lowered("solve")["kernels"]}
    assert solve["oneapi_lu_pivots_to_permutation"] == "jaxlib"
    assert lowered("dot")["libraries"] == {"onednn": 1}
    assert lowered("conv")["libraries"] == {"onednn": 1}
    assert lowered("fft")["libraries"] == {"onemkl": 1}
    step = lowered("step")
    assert step["collectives"]["all-reduce"]["library"] == "oneccl"
    assert step["collectives"]["all-reduce"]["inserted"] > 0
    assert step["libraries"]["oneccl"] == step["collectives"]["all-reduce"]["count"]
    totals = report["summary"]["platforms"]["oneapi"]
    assert set(totals["libraries"]) == {"onemkl", "onednn", "oneccl", "jaxlib"}
    assert totals["lowered"] == 9
    assert totals["failed_to_lower"] == 0
    result.stdout.fnmatch_lines(["*kernels to rewrite moving off cuda*oneapi 0*"])
    assert report["config"]["platforms"] == ["cpu", "cuda", "oneapi"]


PALLAS_TEST = """
import jax, jax.numpy as jnp, pytest
from jax.experimental import pallas as pl

def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0

def double(x):
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          interpret=False)(x)

@pytest.mark.portable
def test_kernel(jaxport):
    jaxport.check(double, jnp.ones((8, 128)), name="double")
"""


@needs_oneapi_jax
def test_a_pallas_kernel_does_not_lower_for_oneapi_and_is_a_kernel_to_rewrite(
    pytester: pytest.Pytester,
) -> None:
    """jax has no pallas_call rule for oneapi: the check does not lower there, with JAX's
    own words, and the report names it for oneapi, never as if it lowered."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def _double(x_ref, o_ref):  # type: ignore[no-untyped-def]
        o_ref[...] = x_ref[...] * 2.0

    x = jnp.ones((8, 128))
    kernel = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
    with pytest.raises(NotImplementedError, match=r"pallas_call.*oneapi"):
        jax.jit(kernel).trace(x).lower(lowering_platforms=("oneapi",))

    pytester.makepyprojecttoml(ONEAPI_PROJECT)
    pytester.makepyfile(test_pallas=PALLAS_TEST)
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    oneapi = report["tests"][0]["checks"][0]["platforms"]["oneapi"]
    assert oneapi["lowered"] is None
    assert "pallas_call" in oneapi["error"]
    assert "oneapi" in oneapi["error"]
    assert report["summary"]["platforms"]["oneapi"]["failed_to_lower"] == 1
    result.stdout.fnmatch_lines(["*oneapi: does not lower*"])


@pytest.mark.slow
@needs_oneapi_jax
def test_oneapi_survives_every_format_and_a_merge(pytester: pytest.Pytester) -> None:
    """The JSON report read back, ``jaxport show`` in text, Markdown and HTML, and
    ``jaxport merge`` of two legs keep oneapi's counts."""
    pytester.makepyprojecttoml(ONEAPI_PROJECT)
    pytester.makepyfile(
        test_one="""
import jax.numpy as jnp, pytest

@pytest.mark.portable
def test_solve(jaxport):
    jaxport.check(jnp.linalg.solve, jnp.eye(4) + 1.0, jnp.ones(4))
"""
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    from pytest_jaxport.report import load

    loaded = load(pytester.path / "report.json")
    assert (
        loaded.to_dict()["summary"]["platforms"]["oneapi"]
        == (report["summary"]["platforms"]["oneapi"])
    )
    jaxport = [sys.executable, "-m", "pytest_jaxport.cli"]
    for fmt in ("text", "md", "html"):
        shown = subprocess.run(
            [*jaxport, "show", "--format", fmt, "report.json"],
            cwd=pytester.path, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert shown.returncode in (0, 1), shown.stderr
        assert "oneapi" in shown.stdout, fmt
        assert "onemkl" in shown.stdout, fmt
    second = pytester.runpytest("--jaxport-report=leg2.json", "--jaxport-platforms=cpu,oneapi")
    second.assert_outcomes(passed=1)
    merged = subprocess.run(
        [*jaxport, "merge", "-o", "merged.json", "report.json", "leg2.json"],
        cwd=pytester.path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    data = json.loads((pytester.path / "merged.json").read_text())
    assert data["summary"]["platforms"]["oneapi"]["libraries"]["onemkl"] >= 1


@older_jax
@pytest.mark.parametrize(
    ("where", "files", "args"),
    [
        ("pyproject.toml: [tool.jaxport] platforms", {"pyproject": ONEAPI_PROJECT}, ()),
        ("--jaxport-platforms", {}, ("--jaxport-platforms=cpu,oneapi",)),
        ("must_lower", {"pyproject": "[tool.jaxport.budget]\nmust_lower = ['oneapi']\n"}, ()),
    ],
)
def test_asking_for_oneapi_on_an_older_jax_is_a_configuration_error(
    pytester: pytest.Pytester, where: str, files: dict[str, str], args: tuple[str, ...]
) -> None:
    """Here JAX lowers for oneapi without its solver calls (or not at all): never counts
    that are silently wrong, a usage error naming the key and the jax release it needs."""
    if "pyproject" in files:
        pytester.makepyprojecttoml(files["pyproject"])
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stderr.str()
    assert where in said
    assert f"oneapi needs jax {NEEDED} or newer, found jax {INSTALLED}" in said
    assert "INTERNALERROR" not in said + result.stdout.str()


def test_a_project_that_does_not_name_oneapi_never_lowers_for_it(
    pytester: pytest.Pytester,
) -> None:
    """oneapi is opted into: the default platforms, the migration targets and the judged
    devices are what they were."""
    pytester.makepyfile(
        test_one="""
import jax.numpy as jnp, pytest

@pytest.mark.portable
def test_dot(jaxport):
    jaxport.check(jnp.dot, jnp.ones((4, 4)), jnp.ones((4, 4)))
"""
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    assert report["config"]["platforms"] == ["cpu", "cuda", "rocm", "tpu"]
    assert "oneapi" not in report["summary"]["platforms"]
    assert "oneapi" not in json.dumps(report["config"])


LIBRARY_TEST = """
import equinox as eqx, jax, jax.numpy as jnp, pytest
from flax import linen as nn

class ConvNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        return nn.Dense(4)(x.reshape(x.shape[0], -1))

@pytest.mark.portable
def test_flax_linen(jaxport):
    model = ConvNet()
    x = jnp.ones((2, 8, 8, 3))
    params = model.init(jax.random.key(0), x)
    jaxport.check(model.apply, params, x, name="linen")

@pytest.mark.portable
def test_equinox(jaxport):
    mlp = eqx.nn.MLP(8, 4, 16, 2, key=jax.random.key(1))
    jaxport.check(lambda m, x: jax.vmap(m)(x), mlp, jnp.ones((5, 8)), name="equinox")
"""


@needs_oneapi_jax
def test_real_library_code_is_checked_on_oneapi(pytester: pytest.Pytester) -> None:
    """A flax linen conv net and an equinox MLP, as users write them: both lower for
    oneapi, their convolutions and matrix products counted as oneDNN's."""
    pytest.importorskip("equinox", reason="equinox is not installed")
    pytest.importorskip("flax.linen", reason="flax is not installed")
    pytester.makepyprojecttoml(ONEAPI_PROJECT)
    pytester.makepyfile(test_libs=LIBRARY_TEST)
    result, report = run_json(pytester)
    result.assert_outcomes(passed=2)
    checks = {c["name"]: c for t in report["tests"] for c in t["checks"]}
    linen = checks["linen"]["platforms"]["oneapi"]["lowered"]
    assert linen["libraries"] == {"onednn": 2}  # the convolution and the dense layer
    kinds = {k["kind"] for k in linen["kernels"]}
    assert kinds == {"convolution", "gemm"}
    assert checks["equinox"]["platforms"]["oneapi"]["lowered"]["libraries"] == {"onednn": 3}


EMULATED_TEST = """
import jax.numpy as jnp, pytest
from jax import lax

def f(x):
    return lax.platform_dependent(x, oneapi=lambda y: y * 2.0, default=lambda y: y + 1.0)

@pytest.mark.portable
def test_branch(jaxport):
    jaxport.check(f, jnp.arange(4.0))
"""


@needs_oneapi_jax
def test_emulating_oneapi_takes_its_platform_dependent_branch(pytester: pytest.Pytester) -> None:
    """``emulate = ["oneapi"]`` runs the check on the CPU as oneapi computes it: its
    ``platform_dependent`` branch (``y * 2``, where the CPU takes ``y + 1``), and the report
    says which branch ran where and that its numerics are the emulation's."""
    pytester.makepyprojecttoml(ONEAPI_PROJECT + 'emulate = ["oneapi"]\n')
    pytester.makepyfile(test_branch=EMULATED_TEST)
    _, report = run_json(pytester)
    oneapi = report["tests"][0]["checks"][0]["platforms"]["oneapi"]
    assert oneapi["emulated"]["branches"] == [{"location": "test_branch.py:5", "branch": "oneapi"}]
    assert oneapi["emulated"]["dot_format"] is None  # full float32: oneDNN's strict mode
    assert oneapi["emulated_numerics"]["platform"] == "oneapi (emulated on cpu)"
    # its branch's value, not the CPU's: at x = 3, 3 * 2 against 3 + 1
    assert oneapi["emulated_numerics"]["ok"] is False
    assert oneapi["emulated_numerics"]["max_abs_err"] == 2.0


@needs_oneapi_jax
def test_a_trace_describes_a_oneapi_gpu_where_jax_asks_for_one() -> None:
    """oneapi is one of the GPUs ``_jax`` can describe to JAX (its description's device
    kind), as cuda's and rocm's: a trace inside the description sees that device and lowers
    for oneapi with its oneDNN gemm."""
    import jax
    import jax.numpy as jnp

    from pytest_jaxport._jax.adapters import gpu_description

    x = jnp.ones((4, 4))
    described = gpu_description("oneapi")
    assert described is not None
    with described:
        mesh = jax.sharding.get_abstract_mesh()
        assert mesh.abstract_device.platform == "oneapi"
        assert mesh.abstract_device.device_kind == DESCRIPTIONS["oneapi"].jax_device_kind
        traced = jax.jit(jnp.dot).trace(x, x)
    text = traced.lower(lowering_platforms=("oneapi",)).as_text()
    assert "stablehlo.dot_general" in text


@needs_oneapi_jax
def test_oneapi_named_only_in_must_lower_has_its_device_recorded(
    pytester: pytest.Pytester,
) -> None:
    """``must_lower = ["oneapi"]`` lowers for oneapi beyond ``platforms``: the device its
    findings are judged for is recorded in the report's configuration, as for a platform
    ``platforms`` names."""
    pytester.makepyprojecttoml(
        '[tool.jaxport]\nplatforms = ["cpu", "cuda"]\n'
        '[tool.jaxport.budget]\nmust_lower = ["oneapi"]\n'
    )
    pytester.makepyfile(
        test_one="""
import jax.numpy as jnp, pytest

@pytest.mark.portable
def test_dot(jaxport):
    jaxport.check(jnp.dot, jnp.ones((4, 4)), jnp.ones((4, 4)))
"""
    )
    result, report = run_json(pytester)
    result.assert_outcomes(passed=1)
    judged = report["tests"][0]["checks"][0]["platforms"]["oneapi"]["lowered"]["formats"]
    assert report["config"]["devices"]["oneapi"] == judged["device"]
