"""The errors the report's commands raise (pure): a file that cannot be used, legs that
cannot be merged. Each message is one line that names the file.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations


class ReportError(ValueError):
    """A report file cannot be used; the message names the file and what is wrong."""


class MergeError(ValueError):
    """Legs cannot be merged, or a file cannot be used; one line naming the file."""
