"""Tests of pytest_jaxport.model.classification: jaxlib's own targets.

jaxlib's own custom-call targets are jaxlib's, never hand-written kernels (issue 50, item 5).

jax 0.12.1 lowers ``lgamma`` and ``digamma`` on cpu to jaxlib's ``cpu_lgamma_ffi`` and
``cpu_digamma_ffi`` (``gammaln``, ``digamma``, and every distribution that uses them); their
cuda twins ``cu_lgamma_ffi``/``cu_digamma_ffi`` were already counted as jaxlib's. Counted as
hand-written kernels, ``[tool.jaxport.audit.fail_on] max_custom_calls = 0`` failed a suite
that has none. The rule is checked against what the installed jaxlib registers, so a jaxlib
that adds a kernel fails here until its row is written (docs/reference.md, "Classification
rules (lowered level)").
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator

import pytest

from pytest_jaxport.model.classification import classify

PROJECT_KERNELS = ("triton_kernel_call_ffi",)
"""jaxlib's targets that run a kernel the project wrote (Pallas Triton, jax-triton)."""

GPU_MODULES = ("_hybrid", "_linalg", "_math", "_prng", "_rnn", "_solver", "_sparse", "_triton")


def jaxlib_targets() -> Iterator[tuple[str, str]]:
    """``(platform, target)`` for every custom-call target the installed jaxlib registers for
    cpu, and its CUDA and ROCm plugins for their platform, where installed."""
    for name in ("jaxlib.cpu._lapack", "jaxlib.cpu._sparse", "jaxlib.cpu._math"):
        try:
            module = importlib.import_module(name)
        except ImportError:  # (jaxlib.cpu._math: jaxlib 0.12.1 and newer)
            continue
        for target in module.registrations():
            yield "cpu", target
    from jaxlib import plugin_support

    for platform in ("cuda", "rocm"):
        for name in GPU_MODULES:
            module = plugin_support.import_from_plugin(platform, name)
            for target in module.registrations() if module is not None else ():
                yield platform, target


def test_every_target_the_installed_jaxlib_registers_is_a_library_call_not_a_rewrite() -> None:
    found = list(jaxlib_targets())
    assert ("cpu", "lapack_sgetrf_ffi") in found  # the survey reached jaxlib
    wrong = []
    for platform, target in found:
        for level, op in (("lowered", "stablehlo.custom_call"), ("compiled", "hlo.custom_call")):
            got = classify(platform, op, target, level=level)
            expected = "custom" if target in PROJECT_KERNELS else "vendor"
            if got.layer != expected:
                wrong.append(f"{platform} {level} {target}: {got.layer} {got.kind}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "target", ["cpu_lgamma_ffi", "cpu_digamma_ffi", "cpu_csr_sparse_dense_ffi",
               "tridiagonal_solve_perturbed_ffi"],
)  # fmt: skip
def test_jaxlibs_cpu_kernels_are_jaxlibs_as_their_gpu_twins_are(target: str) -> None:
    for level, op in (("lowered", "stablehlo.custom_call"), ("compiled", "hlo.custom_call")):
        found = classify("cpu", op, target, level=level)
        assert (found.layer, found.library, found.kind) == ("vendor", "jaxlib", "jaxlib-kernel")
    twin = target.replace("cpu_", "cu_")
    if twin != target:
        assert classify("cuda", "stablehlo.custom_call", twin).library == "jaxlib"


def test_a_projects_own_cpu_kernel_named_like_jaxlibs_is_still_a_kernel_to_rewrite() -> None:
    found = classify("cpu", "stablehlo.custom_call", "cpu_rms_norm_ffi")
    assert (found.layer, found.kind) == ("custom", "ffi")


SPECIAL = """
import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln


def log_beta(a, b):
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def test_log_beta():
    assert jax.jit(log_beta)(jnp.ones(3), jnp.ones(3)).shape == (3,)


def test_digamma():
    assert jax.jit(digamma)(jnp.ones(3)).shape == (3,)
"""


@pytest.mark.slow
def test_a_suite_of_gammaln_and_digamma_passes_an_audit_budget_of_no_custom_calls(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(
        ".toml",
        pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n\n'
        "[tool.jaxport.audit.fail_on]\nmax_custom_calls = 0\n",
    )
    pytester.makepyfile(test_special=SPECIAL)
    result = pytester.runpytest_subprocess("--jaxport-audit", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["problems: none (every audited computation lowers on every platform, the suite within*"]
    )
    result.stdout.no_fnmatch_line("*max_custom_calls*")
    # the platform table: lowered, failed to lower, vendor calls and sites, custom calls and
    # sites, libraries
    rows = {line.split()[0]: line.split()[1:] for line in result.outlines
            if re.match(r"(cpu|cuda|rocm|tpu) +\d+ +\d+ ", line)}  # fmt: skip
    assert {p: row[4:6] for p, row in rows.items()} == {
        p: ["0", "0"] for p in ("cpu", "cuda", "rocm", "tpu")
    }
    try:
        importlib.import_module("jaxlib.cpu._math")
    except ImportError:  # jaxlib < 0.12.1 lowers both to XLA's ops on cpu
        return
    assert rows["cpu"][2:] == ["4", "2", "0", "0", "jaxlib", "4"]
