"""pytest-jaxport: backend-portability budgets for JAX code, enforced by pytest.

The names hook authors use (``pytest_jaxport_classify``, ``pytest_jaxport_rewrite_cost``,
``pytest_jaxport_tooling_rules``) and :class:`JaxportWarning`. Importing this package never
imports JAX; the plugin loads it only when a portable test runs.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import pytest

from pytest_jaxport.model.cost import CostModel, RewriteItem
from pytest_jaxport.model.targets import Classification
from pytest_jaxport.model.tooling import ToolingRule
from pytest_jaxport.version import __version__


class JaxportWarning(pytest.PytestWarning):
    """A check could not do all it was asked (nothing executed, nothing to compare, a
    platform's budgets unverified on this machine)."""


__all__ = [
    "Classification",
    "CostModel",
    "JaxportWarning",
    "RewriteItem",
    "ToolingRule",
    "__version__",
]
