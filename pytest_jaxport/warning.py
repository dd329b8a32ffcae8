"""The warning a check gives when it could not do all it was asked.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import pytest


class JaxportWarning(pytest.PytestWarning):
    """A check could not do all it was asked (nothing executed, nothing to compare, a
    platform's budgets unverified on this machine)."""
