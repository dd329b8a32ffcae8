"""pytest-jaxport: backend-portability budgets for JAX code, enforced by pytest.

The names hook authors use (``pytest_jaxport_classify``, ``pytest_jaxport_rewrite_cost``,
``pytest_jaxport_tooling_rules``) and :class:`JaxportWarning`. Importing this package never
imports JAX; the plugin loads it only when a portable test runs.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# First: the package's modules load by Python's own import system, not pytest's rewriting hook.
from pytest_jaxport import loading  # noqa: F401
from pytest_jaxport.model.classification import Classification
from pytest_jaxport.model.cost import CostModel, FormatItem, RewriteItem
from pytest_jaxport.version import __version__

if TYPE_CHECKING:
    from pytest_jaxport.model.tooling_rules import ToolingRule
    from pytest_jaxport.warning import JaxportWarning


def __getattr__(name: str) -> Any:
    # JaxportWarning is a pytest warning: imported on first use, so that importing the
    # package (or its pure parts, from the `jaxport` command) never imports pytest.
    if name == "JaxportWarning":
        from pytest_jaxport.warning import JaxportWarning

        return JaxportWarning
    if name == "ToolingRule":  # the tooling scan's rules: loaded where a report scans
        from pytest_jaxport.model.tooling_rules import ToolingRule

        return ToolingRule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Classification",
    "CostModel",
    "FormatItem",
    "JaxportWarning",
    "RewriteItem",
    "ToolingRule",
    "__version__",
]
