"""pytest-jaxport: backend-portability budgets for JAX code, enforced by pytest.

Importing this package never imports JAX; the plugin loads it only when a portable
test runs.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
