"""Shared fixtures: every pytester output is checked for INTERNALERROR."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator

# Four host devices, as JAX's own tests run sharded programs on CPU: shard_map and jit over a
# Mesh need more than one device to lower as they do on GPUs. Set before JAX starts.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()

# pytester's in-process runs drop every module imported during the run; JAX's C extensions
# cannot be imported twice in one process, so import everything the inner runs use up front.
import jax
import jax.experimental.pallas
import jax.experimental.pallas.tpu
import jax.experimental.pallas.triton
import jax.experimental.topologies
import jax.numpy
import ml_dtypes  # noqa: F401
import numpy  # noqa: F401
import pytest
from _pytest.pytester import SysModulesSnapshot

import pytest_jaxport._jax.deviceless
import pytest_jaxport._jax.devices
import pytest_jaxport.cache
import pytest_jaxport.fixture
import pytest_jaxport.model.budget
import pytest_jaxport.model.hlo
import pytest_jaxport.view.text

jax.devices()

ACCELERATORS = tuple(p for p in pytest_jaxport._jax.devices.present_platforms() if p != "cpu")
"""The accelerators JAX sees here: none on CI's machines, ``("tpu",)`` on a TPU host."""

if ACCELERATORS:
    # One process holds an accelerator at a time (a TPU admits one: libtpu's lockfile), and
    # this one does: every process a test starts (pytester's subprocess runs, pytest-xdist's
    # workers, the demo's run) runs JAX on the CPU, instead of failing to get the chip.
    os.environ["JAX_PLATFORMS"] = "cpu"
    # ... and without the host's own startup warning (jax's cloud_tpu_init, where libtpu is
    # installed: "Transparent hugepages are not enabled"), which a CPU-only machine's run,
    # the one their projects expect, does not print.
    os.environ["PYTHONWARNINGS"] = ",".join(
        filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:Transparent hugepages"])
    )

# The model libraries tests/test_libraries.py checks, where installed: imported once here so
# that in-process runs reuse them (their extension modules cannot be imported twice either).
for _library in ("flax.linen", "flax.nnx", "equinox", "haiku", "optax", "diffrax"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_library)

_PRESERVED = ("zope", "readline", "jax", "jaxlib", "ml_dtypes", "numpy", "scipy", "opt_einsum")


def _snapshot(self: pytest.Pytester) -> SysModulesSnapshot:
    """Keep JAX's modules across in-process runs, like pytester keeps zope's.

    JAX and jaxlib import some extension modules lazily (e.g. LAPACK kernels on first use,
    in older jaxlib), and an extension module cannot be loaded twice in one process.
    """
    return SysModulesSnapshot(preserve=lambda name: name.startswith(_PRESERVED))


pytest.Pytester._Pytester__take_sys_modules_snapshot = _snapshot  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """This suite's own xdist workers settle as the plugin's audited ones do
    (``session.recording.AuditRecording.settle``): the heap the in-process runs grew is
    collected and frozen before the worker reports itself finished, so its last steps fit
    pytest-xdist's 5-second exit window."""
    if hasattr(session.config, "workerinput"):
        import gc

        gc.collect()
        gc.freeze()


@pytest.fixture(scope="session")
def measured_basis() -> str:
    """The runtime-share basis executed platforms get here: ``measured`` where this jaxlib's
    profiler reports per-instruction events (0.8.3+), else the ``estimated`` fallback."""
    from pytest_jaxport._jax.profile import measure

    compiled = jax.jit(lambda x: x @ x).trace(jax.numpy.ones((4, 4))).lower().compile()
    try:
        measure(lambda: jax.block_until_ready(compiled(jax.numpy.ones((4, 4)))), runs=1)
    except (RuntimeError, AttributeError):
        return "estimated"
    return "measured"


@pytest.fixture(autouse=True)
def _no_internal_error(request: pytest.FixtureRequest) -> Iterator[None]:
    """A suite-wide guard: no pytester run in any test may print INTERNALERROR."""
    if "pytester" not in request.fixturenames:
        yield
        return
    pytester: pytest.Pytester = request.getfixturevalue("pytester")
    # Each test's models.py is new code: older JAX would otherwise reuse another test's cached
    # lowerings (and their source locations) for functions of the same name and shapes.
    jax.clear_caches()
    results: list[pytest.RunResult] = []

    def recorded(method: Callable[..., pytest.RunResult]) -> Callable[..., pytest.RunResult]:
        def run(*args: object, **kwargs: object) -> pytest.RunResult:
            result = method(*args, **kwargs)
            results.append(result)
            return result

        return run

    for name in ("runpytest", "runpytest_inprocess", "runpytest_subprocess", "run"):
        setattr(pytester, name, recorded(getattr(pytester, name)))
    yield
    for result in results:
        output = "\n".join(result.outlines + result.errlines)
        assert "INTERNALERROR" not in output, output


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cpu_only(reason): the test's projects expect what a CPU-only machine reports; on a "
        "host with an accelerator their pytest runs in a child process pinned to the CPU",
    )


@pytest.fixture(autouse=True)
def _pinned_to_the_cpu(request: pytest.FixtureRequest) -> None:
    """On a host with an accelerator (a TPU), a test marked ``cpu_only`` runs its projects'
    pytest in a child process, which sees a CPU-only machine (``JAX_PLATFORMS=cpu``, above):
    what it asserts is that machine's report. A test that runs JAX here itself is skipped,
    saying why. Nothing changes on a CPU-only machine."""
    mark = request.node.get_closest_marker("cpu_only")
    if mark is None or not ACCELERATORS:
        return
    reason = mark.args[0] if mark.args else "it expects a CPU-only machine's report"
    if "pytester" not in request.fixturenames:
        pytest.skip(f"assumes a CPU-only machine ({', '.join(ACCELERATORS)} here): {reason}")
    pytester: pytest.Pytester = request.getfixturevalue("pytester")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setattr(pytester, "runpytest", pytester.runpytest_subprocess)
