"""Tests of pytest_jaxport.plugin and pytest_jaxport.session, end to end.

End-to-end behaviour through pytester: marker, fixture, budgets, report, errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers import esc, run_json

from pytest_jaxport.report.files import without_timings

# Every project here expects what a CPU-only machine reports (each check executed on cpu
# alone, "present here: cpu", numerics at JAX's float32 tolerance): on a TPU host their
# pytest runs in a child pinned to the CPU (tests/conftest.py).
pytestmark = pytest.mark.cpu_only("its projects expect a CPU-only machine's report")

PROJECT = """
[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
reference = "cpu"

[tool.jaxport.budget]
max_custom_calls = 0
"""

MODELS = """
import jax
import jax.numpy as jnp


@jax.jit
def matmul(x):
    return x @ x


def three_matmuls(a):
    return matmul(a) + matmul(a * 2.0) + matmul(a + 1.0)


def eigvals(a):
    return jnp.linalg.eigh(a)[0]


def my_kernel(x):
    return jax.ffi.ffi_call("my_kernel", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".toml", pyproject=PROJECT)
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    return pytester


def test_budget_at_true_count_passes_and_one_under_fails(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_budget="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        @pytest.mark.portable(max_library_calls={"cublas": 3})
        def test_at_count(jaxport):
            out = jaxport.check(three_matmuls, jnp.ones((4, 4)))
            assert out.shape == (4, 4)

        @pytest.mark.portable(max_library_calls={"cublas": 2})
        def test_one_under(jaxport):
            jaxport.check(three_matmuls, jnp.ones((4, 4)))
        """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cuda: 3 cublas calls > 2 (max_library_calls.cublas, set in "
            "test_budget.py::test_one_under); check 'three_matmuls', lowered",
            "*stablehlo.dot_general (cublas) x3 at models.py:7",
        ]
    )
    # The finding leads the short summary line; the progress line marks the test "P".
    result.stdout.fnmatch_lines(
        ["test_budget.py .P *", "FAILED test_budget.py::test_one_under - cuda: 3 cublas calls > 2*"]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


def test_call_weighted_counts_in_json(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_counts="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        @pytest.mark.portable
        def test_counts(jaxport):
            jaxport.check(three_matmuls, jnp.ones((4, 4)))
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1)
    assert report["schema_version"] == 2
    [test] = report["tests"]
    assert test["nodeid"] == "test_counts.py::test_counts"
    assert test["outcome"] == "passed"
    [check] = test["checks"]
    assert check["name"] == "three_matmuls"
    platforms = check["platforms"]
    assert platforms["cuda"]["lowered"]["vendor"] == 3
    assert platforms["cuda"]["lowered"]["libraries"] == {"cublas": 3}
    assert platforms["rocm"]["lowered"]["libraries"] == {"hipblas": 3}
    assert platforms["tpu"]["lowered"]["vendor"] == 0
    assert platforms["cpu"]["lowered"]["vendor"] == 0
    assert all(p["lowered"]["custom"] == 0 for p in platforms.values())
    assert platforms["cpu"]["executed"] is True
    assert platforms["cuda"]["executed"] is False
    assert report["summary"]["platforms"]["cuda"]["vendor"] == 3


def test_ffi_kernel_is_custom_and_fails_project_budget(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_ffi="""
        import jax.numpy as jnp
        import pytest
        from models import my_kernel

        @pytest.mark.portable
        def test_ffi(jaxport):
            jaxport.check(my_kernel, jnp.ones((4,)))

        @pytest.mark.portable(allow_targets=["my_*"])
        def test_ffi_allowed(jaxport):
            jaxport.check(my_kernel, jnp.ones((4,)))
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            esc(
                "cpu: 1 custom call > 0 (max_custom_calls, set in pyproject.toml "
                "[tool.jaxport.budget]); check 'my_kernel', lowered"
            ),
            "*my_kernel (ffi) at models.py:19",
        ]
    )
    failing = next(t for t in report["tests"] if t["nodeid"].endswith("test_ffi"))
    platforms = failing["checks"][0]["platforms"]
    assert {p: r["lowered"]["custom"] for p, r in platforms.items()} == dict.fromkeys(
        ["cpu", "cuda", "rocm", "tpu"], 1
    )
    # No FFI handler is registered on CPU: the execution error is recorded, not raised.
    assert "my_kernel" in platforms["cpu"]["execution_error"]
    assert {v["platform"] for v in failing["violations"]} == {"cpu", "cuda", "rocm", "tpu"}


def test_portable_test_that_checks_nothing_fails(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_nothing="""
        import pytest

        @pytest.mark.portable
        def test_forgot(jaxport):
            assert True

        @pytest.mark.portable
        def test_no_fixture():
            assert True
        """
    )
    result = project.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*test_forgot is marked portable but checked no function*"])
    result.stdout.fnmatch_lines(["*test_no_fixture is marked portable but checked no function*"])


def test_unknown_marker_keyword_fails_only_that_test(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_kw="""
        import jax.numpy as jnp
        import pytest
        from models import eigvals

        @pytest.mark.portable(max_custum_calls=0)
        def test_typo(jaxport):
            jaxport.check(eigvals, jnp.eye(3))

        @pytest.mark.portable("positional")
        def test_positional(jaxport):
            jaxport.check(eigvals, jnp.eye(3))

        @pytest.mark.portable(max_vendor_calls=-1)
        def test_negative(jaxport):
            jaxport.check(eigvals, jnp.eye(3))

        @pytest.mark.portable
        def test_fine(jaxport):
            jaxport.check(eigvals, jnp.eye(3))
        """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_typo: unknown keyword 'max_custum_calls' (did you mean 'max_custom_calls'?)*",
        ]
    )
    result.stdout.fnmatch_lines(["*keyword arguments only, found positional 'positional'*"])
    result.stdout.fnmatch_lines(
        ["*max_vendor_calls: expected a non-negative integer, found int -1"]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


def test_closest_mark_wins_per_key(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_marks="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        pytestmark = pytest.mark.portable(max_vendor_calls=0)

        def test_module_mark(jaxport):
            jaxport.check(three_matmuls, jnp.ones((2, 2)))

        @pytest.mark.portable(max_vendor_calls=3)
        class TestClass:
            def test_class_mark(self, jaxport):
                jaxport.check(three_matmuls, jnp.ones((2, 2)))

            @pytest.mark.portable(max_vendor_calls=1)
            def test_function_mark(self, jaxport):
                jaxport.check(three_matmuls, jnp.ones((2, 2)))
        """
    )
    result = project.runpytest("-v")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*3 vendor calls > 0 (max_vendor_calls, set in module test_marks.py)*",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*> 1 (max_vendor_calls, set in test_marks.py::TestClass::test_function_mark)*"]
    )
    result.stdout.fnmatch_lines(
        ["(2 portability budget violations in test_marks.py::test_module_mark)"]
    )
    result.stdout.fnmatch_lines(["*TestClass::test_class_mark PASSED*"])


def test_platform_budget_table_and_marker_precedence(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml",
        pyproject="""
        [tool.jaxport.budget]
        max_vendor_calls = 10
        [tool.jaxport.budget.rocm]
        max_vendor_calls = 0
        """,
    )
    pytester.makepyfile(models=MODELS)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_p="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        @pytest.mark.portable
        def test_rocm_table(jaxport):
            jaxport.check(three_matmuls, jnp.ones((2, 2)))

        @pytest.mark.portable(max_vendor_calls=5)
        def test_marker_beats_table(jaxport):
            jaxport.check(three_matmuls, jnp.ones((2, 2)))
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            esc(
                "rocm: 3 vendor calls > 0 (max_vendor_calls, set in pyproject.toml "
                "[tool.jaxport.budget.rocm]); check 'three_matmuls'*"
            )
        ]
    )


def test_must_lower_violation_names_platform(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_eig="""
        import jax.numpy as jnp
        import pytest

        def eig(a):
            return jnp.linalg.eig(a)[0].real

        @pytest.mark.portable(must_lower=["tpu"])
        def test_eig_on_tpu(jaxport):
            jaxport.check(eig, jnp.eye(3))

        @pytest.mark.portable
        def test_eig_recorded(jaxport):
            jaxport.check(eig, jnp.eye(3))
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["tpu: fails to lower (must_lower = [[]tpu[]], set in *test_eig_on_tpu); check 'eig'*"]
    )
    recorded = next(t for t in report["tests"] if t["nodeid"].endswith("recorded"))
    tpu = recorded["checks"][0]["platforms"]["tpu"]
    assert tpu["lowered"] is None
    assert "eig" in tpu["error"]
    # (not cuda: with the jax CUDA plugin installed, lowering eig for cuda asks cuSOLVER for
    # its version, which fails without a GPU, and is recorded like any lowering failure)
    assert recorded["checks"][0]["platforms"]["rocm"]["lowered"]["vendor"] >= 1


@pytest.mark.slow
def test_several_checks_per_test_each_budgeted(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_many="""
        import jax.numpy as jnp
        import pytest
        from models import eigvals, three_matmuls

        @pytest.mark.portable(max_vendor_calls=1)
        def test_two(jaxport):
            jaxport.check(eigvals, jnp.eye(3))
            jaxport.check(eigvals, jnp.eye(3))
            jaxport.check(three_matmuls, jnp.eye(3), name="mm")
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(failed=1)
    names = [c["name"] for c in report["tests"][0]["checks"]]
    assert names == ["eigvals", "eigvals#2", "mm"]
    assert {(v["check"], v["platform"]) for v in report["tests"][0]["violations"]} == {
        ("mm", "cuda"),
        ("mm", "rocm"),
    }


def test_check_returns_reference_outputs_pytree(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_out="""
        import jax.numpy as jnp
        import numpy as np
        import pytest

        def f(x, *, scale):
            return {"y": x * scale, "z": (x.sum(), x.astype(jnp.bfloat16))}

        @pytest.mark.portable
        def test_out(jaxport):
            out = jaxport.check(f, jnp.arange(4.0), scale=2.0)
            np.testing.assert_allclose(out["y"], [0.0, 2.0, 4.0, 6.0])
            assert out["z"][1].dtype == jnp.bfloat16
        """
    )
    project.runpytest().assert_outcomes(passed=1)


def test_argument_neither_array_nor_hashable_is_a_clear_failure(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_arg="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable
        def test_str_is_held_static(jaxport):
            out = jaxport.check(lambda x, mode: x * 2 if mode == "fast" else x, jnp.ones(2), "fast")
            assert out.tolist() == [2.0, 2.0]

        @pytest.mark.portable
        def test_set(jaxport):
            jaxport.check(lambda x, names: x, jnp.ones(2), {"a", "b"})

        @pytest.mark.portable
        def test_not_callable(jaxport):
            jaxport.check(3, jnp.ones(2))
        """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [esc("*jaxport.check('lambda'): args[1] is set {*}: neither an array (traced) nor "
             "hashable (held static)*eqx.partition(model, eqx.is_array)*functools.partial")]
    )  # fmt: skip
    result.stdout.fnmatch_lines(["*expected a callable as the first argument, found int 3*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_not_executed_anywhere_warns(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_gpu_only="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        @pytest.mark.portable(platforms=["cuda", "tpu"], reference="cuda")
        def test_gpu_only(jaxport):
            assert jaxport.check(three_matmuls, jnp.ones((2, 2))) is None
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1)
    # At the user's check call, not inside the plugin.
    result.stdout.fnmatch_lines(
        ["*test_gpu_only.py:7: JaxportWarning: check 'three_matmuls' not executed*"]
    )
    check = report["tests"][0]["checks"][0]
    assert check["note"].startswith("not executed")
    assert set(check["platforms"]) == {"cuda", "tpu"}


def test_single_platform_says_nothing_to_compare(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_one="""
        import jax.numpy as jnp
        import pytest
        from models import eigvals

        @pytest.mark.portable
        def test_one(jaxport):
            jaxport.check(eigvals, jnp.eye(3))
        """
    )
    result = project.runpytest("--jaxport-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*jaxport portability report*",
            "*note: only cpu executed here: nothing to compare in-process*",
        ]
    )


def test_classify_hook_reclassifies_target(project: pytest.Pytester) -> None:
    project.makeconftest(
        """
        from pytest_jaxport import Classification

        def pytest_jaxport_classify(platform, op, target, level):
            if target == "my_kernel":
                return Classification(layer="vendor", library="cudnn", kind="softmax")
            return None
        """
    )
    project.makepyfile(
        test_hook="""
        import jax.numpy as jnp
        import pytest
        from models import my_kernel

        @pytest.mark.portable(platforms=["cuda", "tpu"], reference="cuda")
        def test_hook(jaxport):
            jaxport.check(my_kernel, jnp.ones((4,)))
        """
    )
    result, report = run_json(project)
    result.assert_outcomes(passed=1)
    cuda = report["tests"][0]["checks"][0]["platforms"]["cuda"]["lowered"]
    assert cuda["custom"] == 0
    assert cuda["libraries"] == {"cudnn": 1}


def test_junit_xml_carries_counts(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_junit="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        @pytest.mark.portable
        def test_junit(jaxport):
            jaxport.check(three_matmuls, jnp.ones((2, 2)))
        """
    )
    project.runpytest("--junitxml=out.xml").assert_outcomes(passed=1)
    xml = (project.path / "out.xml").read_text()
    assert '<property name="jaxport.three_matmuls.cuda.vendor" value="3"' in xml
    assert '<property name="jaxport.three_matmuls.cpu.custom" value="0"' in xml


def test_report_header_shows_platforms_and_budget_sources(project: pytest.Pytester) -> None:
    project.makepyfile(test_x="def test_x(): pass")
    result = project.runpytest()
    result.stdout.fnmatch_lines(
        [
            "jaxport: platforms cpu, cuda, rocm, tpu (reference cpu); config from pyproject.toml;"
            " budgets from",
            "  pyproject.toml [[]tool.jaxport.budget[]]",
        ]
    )
    assert all(len(line) <= 100 for line in result.outlines if line.startswith(("jaxport", "  ")))


def test_markers_and_help_document_the_plugin(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.portable(*max_custom_calls: int | None = None*): check this test*"]
    )
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        ["*backend-portability budgets for JAX*", "*--jaxport-report*", "*--jaxport-platforms*"]
    )


def test_disabled_with_p_no_jaxport(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject="[tool.jaxport]\nplatfroms = 1\n")
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("-p", "no:jaxport")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("jaxport:*")


@pytest.mark.slow
def test_no_jax_import_without_portable_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_plain():
            assert "jax" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("--jaxport-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*0 portable tests, 0 checks*"])


def test_plugin_modules_skip_assertion_rewriting() -> None:
    """pytest rewrites the asserts of every module of an installed plugin's distribution on
    import (re-parsing each one when bytecode is not written, as in many CI images); the
    plugin's modules opt out, so a session imports them like any library."""
    import importlib
    import pkgutil

    from _pytest.assertion.rewrite import AssertionRewriter

    import pytest_jaxport

    names = [m.name for m in pkgutil.walk_packages(pytest_jaxport.__path__, "pytest_jaxport.")]
    assert len(names) > 20
    for name in ["pytest_jaxport", *names]:
        module = importlib.import_module(name)
        assert AssertionRewriter.is_rewrite_disabled(module.__doc__ or ""), module.__name__


def test_plugin_modules_load_without_pytests_rewriting_hook(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package found on ``sys.path``, as an installed wheel is (an editable install's
    finder already sidesteps pytest's hook), in a session that keeps no bytecode: pytest's
    assertion-rewriting hook loads the package itself and the module that puts Python's own
    finder first (``pytest_jaxport.loading``), never the rest, which it would parse into an
    AST and compile again in every session."""
    import pytest_jaxport

    monkeypatch.setenv("PYTHONPATH", str(Path(pytest_jaxport.__file__).parent.parent))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    pytester.makepyfile(
        """
        import sys

        from _pytest.assertion.rewrite import AssertionRewritingHook

        def test_loaded():
            ours = {n: m for n, m in sys.modules.items() if n.startswith("pytest_jaxport")}
            assert "pytest_jaxport.plugin" in ours and "pytest_jaxport.session.judge" in ours
            hooked = [n for n, m in ours.items()
                      if isinstance(getattr(m, "__loader__", None), AssertionRewritingHook)]
            assert sorted(hooked) == ["pytest_jaxport", "pytest_jaxport.loading"]
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


REPORT_MACHINERY = (
    "pytest_jaxport.report.build",
    "pytest_jaxport.report.document",
    "pytest_jaxport.view.html",
    "pytest_jaxport.view.viewmodel.build",
)
"""Modules only a report reads: its building, its types, its view and (HTML) renderer."""


@pytest.mark.parametrize("report", [False, True], ids=["no-report", "report"])
def test_a_check_session_loads_the_reports_machinery_only_where_one_is_read(
    pytester: pytest.Pytester, report: bool
) -> None:
    """A session of portable checks that asks for no report (nor a baseline, an audit or a
    cost hook) never imports the report's building, views or renderers (28 modules, about
    70 ms of a cold session's CPU); ``--jaxport-report`` does."""
    pytester.makeconftest(
        """
        import sys

        def pytest_unconfigure(config):
            with open("loaded.txt", "w") as f:
                f.write("\\n".join(sorted(sys.modules)))
        """
    )
    pytester.makepyfile(
        """
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable
        def test_check(jaxport):
            jaxport.check(lambda x: jnp.sin(x) @ x, jnp.ones((4, 4)))
        """
    )
    args = ["-p", "no:cacheprovider", "--jaxport-platforms=cpu,cuda"]
    result = pytester.runpytest_subprocess(*args, *(["--jaxport-report=r.html"] if report else []))
    result.assert_outcomes(passed=1)
    loaded = set((pytester.path / "loaded.txt").read_text().split())
    assert "pytest_jaxport.view.text" in loaded  # the test's own section: a check's text
    assert "pytest_jaxport.report.audit_ledger" not in loaded  # no audit: not its ledger
    if report:
        assert set(REPORT_MACHINERY) <= loaded, sorted(set(REPORT_MACHINERY) - loaded)
    else:
        assert loaded.isdisjoint(REPORT_MACHINERY), sorted(loaded & set(REPORT_MACHINERY))


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (
            "[tool.jaxport]\nplatfroms = ['cpu']\n",
            "*[[]tool.jaxport[]]: unknown key 'platfroms' (did you mean 'platforms'?)*",
        ),
        (
            "[tool.jaxport]\nplatforms = ['cpu', 'gpu']\n",
            "*platforms: unknown platform 'gpu'*expected one of cpu, cuda, rocm, tpu, oneapi",
        ),
        ("[tool.jaxport]\nplatforms = 'cpu'\n", "*platforms: expected a list of platforms*"),
        (
            "[tool.jaxport]\nreference = 'tpu'\nplatforms = ['cpu']\n",
            "*reference: expected one of*",
        ),
        (
            "[tool.jaxport.budget]\nmax_custom_calls = -1\n",
            "*[[]tool.jaxport.budget[]] max_custom_calls: expected a non-negative integer, "
            "found int -1",
        ),
        (
            "[tool.jaxport.budget]\nmax_vendor_calls = 2.5\n",
            "*max_vendor_calls: expected a non-negative integer, found float 2.5",
        ),
        (
            "[tool.jaxport.budget]\nmax_vendor_calls = '3'\n",
            "*max_vendor_calls: expected a non-negative integer, found string '3'",
        ),
        (
            "[tool.jaxport.budget]\nmax_library_calls = {cudnnn = 0}\n",
            "*unknown library 'cudnnn' (did you mean 'cudnn'?)*",
        ),
        (
            "[tool.jaxport.budget.gpu]\nmax_vendor_calls = 1\n",
            "*unknown key or platform 'gpu'*",
        ),
        (
            "[tool.jaxport.budget.cuda]\nmax_vendr_calls = 1\n",
            "*[[]tool.jaxport.budget.cuda[]]: unknown key 'max_vendr_calls' "
            "(did you mean 'max_vendor_calls'?)*",
        ),
        ("[tool.jaxport.budget]\nmust_lower = ['cpu', 'cdua']\n", "*unknown platform 'cdua'*"),
        (
            "[tool.jaxport.tolerance.float33]\nrtol = 1e-3\n",
            "*unknown dtype or platform 'float33' (did you mean 'float32'?)*",
        ),
        (
            "[tool.jaxport.tolerance.float32]\nrtol = -1e-3\n",
            "*[[]tool.jaxport.tolerance.float32[]] rtol: expected a finite non-negative number*",
        ),
        ("[tool.jaxport]\nbudget = 3\n", "*budget: expected a table*"),
    ],
)
def test_malformed_config_is_a_usage_error(
    pytester: pytest.Pytester, toml: str, expected: str
) -> None:
    pytester.makefile(".toml", pyproject=textwrap.dedent(toml))
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: jaxport: {expected}"])
    assert "Traceback" not in result.stderr.str()


def test_unparsable_toml_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject="[tool.jaxport\nplatforms = 1\n")
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # pytest parses pyproject.toml itself first; either message names the file.
    result.stderr.fnmatch_lines(["ERROR: *pyproject.toml: *"])
    assert "Traceback" not in result.stderr.str()


def test_bad_cli_values_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("--jaxport-platforms=cpu,gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jaxport-platforms: unknown platform 'gpu'*"])
    result = pytester.runpytest("--jaxport-report=report.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*expected a path ending in .json, .md, .html, .sarif or .codequality.json*"]
    )


def test_several_report_formats_in_one_run_missing_folders_created(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_several_formats="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        @pytest.mark.portable
        def test_formats(jaxport):
            jaxport.check(three_matmuls, jnp.ones((2, 2)))
        """
    )
    result = project.runpytest(
        "--jaxport-report=r.json", "--jaxport-report=out/r.md", "--jaxport-report=a/b/r.html"
    )
    result.assert_outcomes(passed=1)
    assert json.loads((project.path / "r.json").read_text())["summary"]["checks"] == 1
    assert (project.path / "out" / "r.md").read_text().startswith("## pytest-jaxport")
    assert (project.path / "a" / "b" / "r.html").read_text().startswith("<!DOCTYPE html>")
    result.stdout.fnmatch_lines(["jaxport: full report written to r.json, out/r.md, a/b/r.html"])
    assert result.stdout.str().count("jaxport portability report") == 1


@pytest.mark.parametrize("taken", ["test_x.py", "test_x.py::test_x", "tests"])
def test_report_option_taking_a_test_path_says_how_to_write_it(
    pytester: pytest.Pytester, taken: str
) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    pytester.mkdir("tests")
    result = pytester.runpytest("--jaxport-report", taken)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*: error: argument --jaxport-report: took the test path {taken!r} as its report "
        "PATH: put --jaxport-report after the test paths, or give the PATH with '=' "
        f"(--jaxport-report=report.json {taken})"
    ])  # fmt: skip
    # After the path (or with '='), the option prints the report and the path is collected.
    result = pytester.runpytest("test_x.py", "--jaxport-report")
    result.assert_outcomes(passed=1)


GPU_HINT = (
    "unknown platform 'gpu' ('gpu' is JAX's name for any GPU backend: write 'cuda' for "
    "NVIDIA, 'rocm' for AMD, 'oneapi' for Intel, or several); expected one of cpu, cuda, rocm, "
    "tpu, oneapi"
)


def test_gpu_as_a_platform_says_it_means_cuda_or_rocm(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_gpu="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable(must_lower=["gpu"])
        def test_gpu(jaxport):
            jaxport.check(jnp.tanh, jnp.ones(3))
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*portable on test_gpu.py::test_gpu: must_lower: {GPU_HINT}"])
    result = pytester.runpytest("--jaxport-platforms=cpu,gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*: error: argument --jaxport-platforms: {GPU_HINT}"])
    result = pytester.runpytest("--jaxport-report-platform=gpu")
    result.stderr.fnmatch_lines(["*found 'gpu' ('gpu' is JAX's name for any GPU backend: *"])
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "gpu"]\n')
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: jaxport: pyproject.toml: {esc('[tool.jaxport]')} "
                                 f"platforms: {GPU_HINT}"])  # fmt: skip
    assert "did you mean 'tpu'" not in result.stderr.str()


def test_a_library_or_vendor_name_is_pointed_at_the_key_or_platform_meant(
    pytester: pytest.Pytester,
) -> None:
    """``max_cudnn_calls`` is ``max_library_calls``; ``nvidia`` is ``cuda``: in the marker, in
    pyproject.toml and on the command line (issue 39, a new user's first budget)."""
    pytester.makepyfile(
        test_lib="""
        import pytest

        @pytest.mark.portable(max_cudnn_calls=2)
        def test_lib(jaxport):
            pass

        @pytest.mark.portable(must_lower=["nvidia"])
        def test_vendor(jaxport):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*@pytest.mark.portable on test_lib.py::test_lib: unknown keyword 'max_cudnn_calls' "
        "(did you mean max_library_calls={\"cudnn\": 2}?); known: *",
        "*@pytest.mark.portable on test_lib.py::test_vendor: must_lower: unknown platform "
        "'nvidia' (did you mean 'cuda', NVIDIA's platform?); expected one of cpu, cuda, rocm, "
        "tpu, oneapi",
    ])  # fmt: skip
    assert "max_custom_calls'?" not in result.stdout.str()
    result = pytester.runpytest("--jaxport-platforms=cpu,nvidia")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*: error: argument --jaxport-platforms: unknown platform 'nvidia' (did you mean 'cuda', "
        "NVIDIA's platform?); expected one of cpu, cuda, rocm, tpu, oneapi"
    ])  # fmt: skip
    result = pytester.runpytest("--jaxport-report-platform=google")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*found 'google' (did you mean 'tpu', Google's platform?)"])
    for toml, said in (
        ("[tool.jaxport.budget]\nmax_cudnn_calls = 2\n",
         "[tool.jaxport.budget]: unknown key 'max_cudnn_calls' (did you mean "
         "max_library_calls = { cudnn = 2 }?); known: "),
        ("[tool.jaxport.budget.nvidia]\nmax_vendor_calls = 2\n",
         "[tool.jaxport.budget]: unknown key or platform 'nvidia' (did you mean 'cuda', "
         "NVIDIA's platform?); known: "),
        ("[tool.jaxport.audit.fail_on]\nmax_nccl_calls = 0\n",
         "[tool.jaxport.audit.fail_on]: unknown key 'max_nccl_calls' (did you mean "
         "max_library_calls = { nccl = 0 }?); known: "),
    ):  # fmt: skip
        pytester.makefile(".toml", pyproject=toml)
        result = pytester.runpytest()
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: jaxport: pyproject.toml: {esc(said)}*"])
        result.stderr.no_fnmatch_line("*INTERNALERROR*")


def test_a_misspelt_jaxport_table_is_warned_about_at_its_line(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml",
        pyproject="[tool.pytest.ini_options]\naddopts = []\n\n[tool.jaxprot]\n"
        'platforms = ["cpu"]\n\n[tool.jaxprot.budget]\nmax_custom_calls = 0\n',
    )
    pytester.makepyfile(test_x="def test_x(): pass")
    said = (
        "pyproject.toml: [[]tool.jaxprot[]] is not read by pytest-jaxport: did you mean "
        "[[]tool.jaxport[]]? (its settings are ignored)"
    )
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1, warnings=1)  # one table, however many sub-tables
    result.stdout.fnmatch_lines(
        [f"*pyproject.toml:4: PytestConfigWarning: {said}", "    [[]tool.jaxprot[]]"]
    )
    assert "pytest_jaxport" not in result.stdout.str()
    result = pytester.runpytest("-W", "error")  # strict runs refuse it, as a usage error
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: jaxport: {said}"])
    pytester.makefile(".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu"]\n')
    pytester.runpytest("-W", "error").assert_outcomes(passed=1)


@pytest.mark.slow
def test_failures_say_what_to_do(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_todo="""
        import jax.numpy as jnp
        import pytest
        from models import my_kernel

        def eig(a):
            return jnp.linalg.eig(a)[0].real

        def test_kernel(jaxport):  # the project's max_custom_calls = 0
            jaxport.check(my_kernel, jnp.ones(3))

        @pytest.mark.portable(must_lower=["cpu", "rocm", "tpu"])
        def test_eig(jaxport):
            jaxport.check(eig, jnp.eye(3))

        @pytest.mark.portable(max_custum_calls=0)
        def test_typo(jaxport):
            jaxport.check(jnp.tanh, jnp.ones(3))
        """
    )
    (project.path / "conftest.py").write_text(
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n"
        "    items[0].add_marker(pytest.mark.portable)\n"
    )
    result = project.runpytest("--jaxport-report", "-p", "no:randomly")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines([
        "cpu: 1 custom call > 0 (max_custom_calls, set in pyproject.toml *); check 'my_kernel'*",
        "*my_kernel*",
        "to pass: remove the kernels above from the code, or raise max_custom_calls where it was "
        "set (pyproject.toml *; a marker's @pytest.mark.portable(max_custom_calls=...) "
        "overrides [[]tool.jaxport.budget[]]), or drop the limit and let a baseline keep the "
        "count from growing (--jaxport-baseline=FILE --jaxport-baseline-update)",
    ])  # fmt: skip
    result.stdout.fnmatch_lines([
        "tpu: fails to lower (must_lower = [[]cpu, rocm, tpu[]], set in *test_eig); check 'eig'*",
        "to pass: give the code a path that lowers on tpu (jax.lax.platform_dependent(..., "
        "default=<plain jnp code>)), or narrow must_lower (set in *test_eig) to the platforms it "
        "must run on: @pytest.mark.portable(must_lower=[[]'cpu', 'rocm'[]])",
    ])  # fmt: skip
    # P, the progress letter of a test its budget failed, is explained.
    result.stdout.fnmatch_lines([
        "test_todo.py PPF*",
        "jaxport: P in the progress line is a test its portability budget failed (2 tests; "
        "counted as failed)",
    ])  # fmt: skip
    # A failure's row keeps what matters: no "Failed:", no second copy of the test id, and a
    # second line rather than a cut before the suggestion.
    result = project.runpytest("--jaxport-report", "-k", "typo")
    result.stdout.fnmatch_lines([
        "    test_todo.py::test_typo  @pytest.mark.portable: unknown keyword 'max_custum_calls' *",
        "      *'max_custom_calls'?*",
    ])  # fmt: skip


def test_cli_platforms_override(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_platforms_option="""
        import jax.numpy as jnp
        import pytest
        from models import three_matmuls

        @pytest.mark.portable
        def test_cli(jaxport):
            jaxport.check(three_matmuls, jnp.ones((2, 2)))
        """
    )
    result, report = run_json(project, "--jaxport-platforms=cpu,tpu")
    result.assert_outcomes(passed=1)
    assert set(report["tests"][0]["checks"][0]["platforms"]) == {"cpu", "tpu"}
    assert report["config"]["platforms"] == ["cpu", "tpu"]


def test_cli_platforms_leave_must_lower_platforms_and_say_so(pytester: pytest.Pytester) -> None:
    """``--jaxport-platforms`` narrows ``platforms``, not the ``must_lower`` gate: cuda and rocm
    are still lowered for every check, and the header and the report say why (issue 39)."""
    pytester.makefile(
        ".toml",
        pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n\n'
        '[tool.jaxport.budget]\nmust_lower = ["cpu", "cuda", "rocm", "tpu"]\n',
    )
    pytester.makepyfile(
        test_narrow="""
        import jax.numpy as jnp
        import pytest

        def matmul(x):
            return x @ x

        @pytest.mark.portable
        def test_narrow(jaxport):
            jaxport.check(matmul, jnp.ones((4, 4)))
        """
    )
    result, report = run_json(
        pytester, "--jaxport-platforms=cpu,tpu", "--jaxport-report", "--jaxport-report-details=all"
    )
    result.assert_outcomes(passed=1)
    said = " ".join(result.stdout.str().split())
    assert (
        "jaxport: platforms cpu, tpu (reference cpu); cuda, rocm: from must_lower "
        "(pyproject.toml [tool.jaxport.budget]), checks lower for them too; config from "
        "pyproject.toml; budgets from pyproject.toml [tool.jaxport.budget]"
    ) in said
    assert "formats judged for: tpu TPU v5e (v5e), cuda NVIDIA H100 80GB HBM3 (sm90)" in said
    result.stdout.fnmatch_lines([
        "test_narrow.py::test_narrow [[]passed[]]",
        "  check 'matmul'",
        "    cpu   vendor   0  custom   0  [[]lowered[]]  numerics: reference",
        "    tpu   vendor   0  custom   0  [[]lowered[]]",
        "    cuda  vendor   1  custom   0  (cublas 1)  [[]lowered[]]",
        "    rocm  vendor   1  custom   0  (hipblas 1)  [[]lowered[]]",
    ])  # fmt: skip
    assert (
        "1 portable test, 1 check, 0 failed, 0 budget violations; platforms: cpu, tpu "
        "(reference cpu); cuda, rocm: from must_lower; present here: cpu;"
    ) in said
    assert report["config"]["platforms"] == ["cpu", "tpu"]
    assert list(report["tests"][0]["checks"][0]["platforms"]) == ["cpu", "tpu", "cuda", "rocm"]
    # Where platforms name every must_lower platform, nothing is added and nothing said.
    result = pytester.runpytest("--jaxport-platforms=cpu,cuda,rocm,tpu", "--jaxport-report")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*from must_lower*")


def test_quiet_report_keeps_its_numbers_and_claims_no_budget_nobody_set(
    pytester: pytest.Pytester,
) -> None:
    """``-q --jaxport-report`` keeps one line of what the checks counted, per platform, and
    says every test is within budget only where ``[tool.jaxport.budget]`` sets one; every
    format says the same (issue 39)."""
    pytester.makefile(
        ".toml", pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n'
    )
    pytester.makepyfile(
        test_quiet="""
        import jax.numpy as jnp
        import pytest

        def matmul(x):
            return x @ x

        @pytest.mark.portable
        def test_quiet(jaxport):
            jaxport.check(matmul, jnp.ones((4, 4)))
        """
    )
    result = pytester.runpytest(
        "-q", "--jaxport-report", "--jaxport-report=r.md", "--jaxport-report=r.html"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "problems: none (every check lowers, no limit broken; [[]tool.jaxport.budget[]] sets none)",
        "",
        "1 check; lowered: cpu 1, cuda 1, rocm 1, tpu 1; vendor calls: cpu 0, cuda 1, rocm 1, "
        "tpu 0;",
        "  custom calls: cpu 0, cuda 0, rocm 0, tpu 0; kernels to rewrite off cuda: rocm 0, tpu 0",
        "1 portable test, 1 check, 0 failed, 0 budget violations; platforms: *",
    ])  # fmt: skip
    assert "every portable test within budget" not in result.stdout.str()
    markdown = (pytester.path / "r.md").read_text()
    assert "None: every check lowers, no limit broken; [tool.jaxport.budget] sets none." in markdown
    html = (pytester.path / "r.html").read_text()
    assert "None: every check lowers, no limit broken; [tool.jaxport.budget] sets none." in html
    assert "no limit broken; [tool.jaxport.budget] sets none</span>" in html
    assert "every portable test within budget" not in markdown + html
    # A budget set: then every portable test is within it.
    pytester.makefile(
        ".toml",
        pyproject='[tool.jaxport]\nplatforms = ["cpu", "cuda", "rocm", "tpu"]\n\n'
        "[tool.jaxport.budget]\nmax_custom_calls = 0\n",
    )
    result = pytester.runpytest("-q", "--jaxport-report")
    result.stdout.fnmatch_lines(
        ["problems: none (every portable test within budget, every check lowers)", "", "1 check; *"]
    )


def test_markdown_report(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_md="""
        import jax.numpy as jnp
        import pytest
        from models import eigvals

        @pytest.mark.portable
        def test_md(jaxport):
            jaxport.check(eigvals, jnp.eye(3))
        """
    )
    project.runpytest("--jaxport-report=out.md").assert_outcomes(passed=1)
    text = (project.path / "out.md").read_text()
    # eigvals lowers to a cuSOLVER call; nothing for the format rules (no dot or conv)
    assert "| cuda | 1 | 0 | 1 | 1 | 0 | 0 | 0 | 0 | 0% | lowered | cusolver 1 |" in text
    assert "| `test_md.py::test_md` | passed | eigvals | 1 / 0 · reference | 1 / 0 |" in text


@pytest.mark.slow
def test_two_routines_of_one_library_at_one_line_read_apart_in_every_format(
    project: pytest.Pytester,
) -> None:
    """An LU solve is two LAPACK routines at one line on cpu and a jaxlib kernel beside
    cuSOLVER on cuda: each site names its routine (issue 39: ``lapack solver`` twice, and
    ``jaxlib jaxlib-kernel``), in the terminal, Markdown and HTML alike."""
    project.makepyfile(
        test_solve="""
        import jax.numpy as jnp
        import pytest

        @pytest.mark.portable
        def test_solve(jaxport):
            jaxport.check(jnp.linalg.solve, jnp.eye(4) * 3.0 + 0.1, jnp.ones(4))
        """
    )
    at = "test_solve.py:6"
    cuda = [f"  {at}  cublas triangular-solve * 2 *", f"  {at}  jaxlib lu_pivots * 1 *",
            f"  {at}  cusolver getrf * 1 *"]  # fmt: skip
    result = project.runpytest(
        "--jaxport-report=r.md", "--jaxport-report=r.html", "--jaxport-report", "-v"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["where the lock-in lives on cuda: 3 distinct sites*", "*", *cuda])
    result.stdout.no_fnmatch_line("*jaxlib-kernel*")
    markdown = (project.path / "r.md").read_text()
    for label in ("cublas triangular-solve", "jaxlib lu_pivots", "cusolver getrf"):
        assert f"| `{at}` | {label} |" in markdown
    page = (project.path / "r.html").read_text()
    for label in ("lapack getrf", "lapack trsm", "cusolver getrf", "jaxlib lu_pivots",
                  "hipsolver getrf"):  # fmt: skip
        assert f'<span class="pill vendor">vendor</span> {label}</td>' in page, label
    assert "lapack solver" not in page
    cpu = project.runpytest("--jaxport-report", "--jaxport-report-platform=cpu", "-v")
    cpu.stdout.fnmatch_lines(
        ["where the lock-in lives on cpu: 2 distinct sites*", "*",
         f"  {at}  lapack trsm * 2 *", f"  {at}  lapack getrf * 1 *"]
    )  # fmt: skip
    rocm = project.runpytest("--jaxport-report", "--jaxport-report-platform=rocm", "-v")
    rocm.stdout.fnmatch_lines(
        ["where the lock-in lives on rocm: 3 distinct sites*", "*",
         f"  {at}  hipblas triangular-solve * 2 *", f"  {at}  jaxlib lu_pivots * 1 *",
         f"  {at}  hipsolver getrf * 1 *"]
    )  # fmt: skip


@pytest.mark.slow
def test_xdist_reports_equal_serial(project: pytest.Pytester, measured_basis: str) -> None:
    project.makepyfile(
        test_par="""
        import jax.numpy as jnp
        import pytest
        from models import eigvals, my_kernel, three_matmuls

        @pytest.mark.portable
        def test_a(jaxport):
            jaxport.check(three_matmuls, jnp.ones((2, 2)))

        @pytest.mark.portable
        def test_b(jaxport):
            jaxport.check(eigvals, jnp.eye(2))

        @pytest.mark.portable
        def test_c(jaxport):
            jaxport.check(my_kernel, jnp.ones(2))

        @pytest.mark.portable
        def test_d(jaxport):
            pass

        @pytest.mark.portable
        @pytest.mark.skip(reason="not today")
        def test_e(jaxport):
            pass
        """
    )
    reports = []
    for args in ([], ["-n", "0"], ["-n", "2"]):
        result = project.runpytest_subprocess("--jaxport-report=r.json", *args)
        result.assert_outcomes(passed=2, failed=2, skipped=1)
        reports.append(json.loads((project.path / "r.json").read_text()))
        (project.path / "r.json").unlink()  # the next run's tooling scan lists the same files
    assert reports[0]["summary"]["checks"] == 3
    assert {t["nodeid"]: t["outcome"] for t in reports[0]["tests"]} == {
        "test_par.py::test_a": "passed",
        "test_par.py::test_b": "passed",
        "test_par.py::test_c": "failed",
        "test_par.py::test_d": "failed",
        "test_par.py::test_e": "skipped",
    }
    # Everything but measured run times is identical with and without xdist.
    assert without_timings(reports[1]) == without_timings(reports[0])
    assert without_timings(reports[2]) == without_timings(reports[0])
    cpu = reports[2]["tests"][0]["checks"][0]["platforms"]["cpu"]
    assert cpu["runtime_share"]["basis"] == measured_basis
