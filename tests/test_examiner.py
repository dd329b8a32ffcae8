"""Tests of pytest_jaxport.examine.examiner and examine.stages.

The examiner's two entry points and its instrumentation hook, on real JAX (no mocks)."""

from __future__ import annotations

import inspect
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from pytest_jaxport.cache import CompileSettings
from pytest_jaxport.examine import Examiner, StageTimer
from pytest_jaxport.fixture import Jaxport
from pytest_jaxport.model.classification import classify
from pytest_jaxport.model.config import ProjectConfig, Setting


def _classifier(platform: str, op: str, target: str | None) -> object:
    return classify(platform, op, target)


def _solve(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    return jnp.linalg.solve(a, b) @ a  # a solver: each platform lowers it its own way


def test_the_hook_sees_every_stage_of_a_real_check(tmp_path: Path) -> None:
    """One check, cpu present: traced, lowered (cpu alone, the absent three together),
    executed, counted per platform, compiled for cpu, its share taken per platform, emulated
    as cuda, compared; each stage once, in that order."""
    timer = StageTimer()
    config = ProjectConfig(compile=("cpu",), emulate=Setting(value=("cuda",), origin="test"))
    jaxport = Jaxport(
        config=config.resolve(),
        classifier=_classifier,  # type: ignore[arg-type]
        rootdir=tmp_path,
        compile_settings=CompileSettings(platforms=("cpu",)),
        profile=True,
        stages=timer,
    )
    a = np.eye(4, dtype=np.float32) * 2.0
    b = np.ones((4, 4), dtype=np.float32)

    out = jaxport.check(_solve, a, b)

    np.testing.assert_allclose(np.asarray(out), np.ones((4, 4)), rtol=1e-6)
    platforms = ("cpu", "cuda", "rocm", "tpu")
    assert list(timer.wall) == [
        "trace",
        "lowered cache",
        "lower:cuda+rocm+tpu",
        "lower:cpu",
        "execute:cpu",
        *(f"census:{p}" for p in platforms),
        "compile:cpu",
        *(f"share:{p}" for p in platforms),
        "emulate:cuda",
        "compare",
    ]
    assert all(len(runs) == 1 for runs in timer.wall.values())
    assert all(seconds >= 0 for seconds in timer.totals().values())
    probe = jaxport.probes[-1]
    assert probe.platforms["cpu"].compiled is not None  # the stages did what they say
    assert probe.platforms["cuda"].emulated is not None


def test_a_check_without_a_hook_observes_nothing(tmp_path: Path) -> None:
    """The default hook is inert: a check runs the same without one."""
    jaxport = Jaxport(
        config=ProjectConfig(platforms=("cpu",)).resolve(),
        classifier=_classifier,  # type: ignore[arg-type]
        rootdir=tmp_path,
    )
    assert jaxport.check(lambda x: x + 1, np.zeros(2, np.float32)).tolist() == [1.0, 1.0]


def test_check_and_audit_are_the_two_entry_points() -> None:
    """A check runs and compiles; an audit neither runs nor compiles, and may keep its
    programs for later: the switches belong to one entry point each."""
    check = inspect.signature(Examiner.check).parameters
    audit = inspect.signature(Examiner.audit).parameters
    assert {"run", "fn", "args", "kwargs"} <= set(check)
    assert not {"at_caller", "keep_programs"} & set(check)
    assert {"at_caller", "keep_programs"} <= set(audit)
    assert not {"run", "fn", "args", "kwargs"} & set(audit)
    assert not hasattr(Examiner, "examine")


def test_no_class_of_the_one_path_is_over_450_lines() -> None:
    """The examiner is split by responsibility: no class of ``pytest_jaxport/examine`` grows
    back into the one it was."""
    import ast

    import pytest_jaxport.examine as package

    folder = Path(package.__file__).parent
    sizes = {
        f"{path.name}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for path in sorted(folder.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }
    assert "examiner.py:Examiner" in sizes
    assert {name: n for name, n in sizes.items() if n > 450} == {}
