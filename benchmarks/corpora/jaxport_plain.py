"""The benchmark baseline: a ``jaxport`` fixture that just jits and runs the function.

Loaded with ``-p benchmarks.corpora.jaxport_plain`` (a generated suite holds a copy:
``suite.add_package``) together with ``-p no:jaxport``, so the very same test files run
plainly: ``jaxport.check(fn, *args)`` becomes ``jax.block_until_ready(jax.jit(fn)(*args))``
and ``@pytest.mark.portable`` is a registered no-op marker (so ``--strict-markers`` suites
still collect).
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "portable(**kwargs): ignored by the plain baseline")


class PlainCheck:
    def check(self, fn: Any, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
        import jax

        return jax.block_until_ready(jax.jit(fn)(*args, **kwargs))


@pytest.fixture
def jaxport() -> PlainCheck:
    return PlainCheck()
