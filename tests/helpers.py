"""Small helpers shared by the pytester-based test modules."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.report.build import build_report
from pytest_jaxport.report.document import Config, Environment, Report
from pytest_jaxport.report.entries import TestEntry
from pytest_jaxport.report.files import from_json
from pytest_jaxport.report.reader import record_reader
from pytest_jaxport.report.summary import Pricing


def line_of(fn: Callable[..., Any], text: str) -> str:
    """``file:line`` of the first line of ``fn``'s source holding ``text``."""
    source, first = inspect.getsourcelines(fn)
    for offset, line in enumerate(source):
        if text in line:
            return f"{inspect.getsourcefile(fn)}:{first + offset}"
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def esc(text: str) -> str:
    """Escape fnmatch's character classes: ``[tool.jaxport]`` and ``f[grad]`` match themselves."""
    return re.sub(r"[\[\]]", lambda m: f"[{m.group()}]", text)


def run_json(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run pytest in-process with a JSON report; the result and the loaded report."""
    result = pytester.runpytest("--jaxport-report=report.json", *args)
    report = json.loads((pytester.path / "report.json").read_text())
    return result, report


@contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Hold a file lock: pytest-xdist workers sharing one expensive run take turns."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: each worker runs its own copy
        yield
        return
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


LIBRARY_WITH_HIDDEN_CALLBACK = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import mlir

try:
    from jax.extend.core import Primitive
except ImportError:  # jax without jax.extend.core
    from jax.core import Primitive


def _checked_solve(a, b):
    # a host-side check inside the primitive, as equinox's error_if inside lineax's solve
    ok = jax.pure_callback(
        lambda v: np.asarray(np.isfinite(v).all()), jax.ShapeDtypeStruct((), jnp.bool_), b
    )
    return jnp.where(ok, jnp.linalg.solve(a, b), jnp.nan)


solve_p = Primitive("checked_solve")
solve_p.def_impl(_checked_solve)
solve_p.def_abstract_eval(lambda a, b: jax.core.ShapedArray(b.shape, b.dtype))
mlir.register_lowering(solve_p, mlir.lower_fun(_checked_solve, multiple_results=False))


def solve(a, b):
    return solve_p.bind(a, b) * 2
"""
"""A library module whose own primitive calls back into Python only inside its lowering (the
jaxpr shows ``checked_solve``, no callback): what lineax's ``linear_solve`` with equinox's
``error_if`` is, in twenty lines."""


def typed(data: Any, file: str = "report.json") -> Report:
    """A report's JSON as the typed :class:`Report` the view renders, checked as ``jaxport
    show`` checks a file (a test that edits the JSON renders what a reader would read)."""
    return from_json(data, Path(file))


def built_report(
    tests: Iterable[Mapping[str, Any]],
    *,
    config: Mapping[str, Any],
    environment: Mapping[str, Any] | None = None,
    pricing: Pricing | None = None,
) -> Report:
    """The report the plugin builds from tests whose entries are given as the report's JSON
    (each read as the ledger reads a worker's record), with ``config`` and ``environment``
    as the report states them."""
    entries = [TestEntry.read(record_reader(t, f"tests[{i}]")) for i, t in enumerate(tests)]
    return build_report(
        entries,
        config=Config.read(record_reader(config, "config")),
        environment=Environment.read(record_reader(environment or {}, "environment")),
        pricing=pricing,
    )
