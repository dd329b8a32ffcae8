"""pytest-jaxport's benchmarks: a package, run from the repository root as
``python -m benchmarks.<folder>.<script>`` (``benchmarks/README.md`` is the index).

Standard library only: a validation run imports it before it has installed JAX.
"""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
"""This folder."""
REPO = BENCHMARKS.parent
"""The repository's root (the working folder every script is run from)."""
RESULTS = BENCHMARKS / "results"
"""Where recorded results are kept (every file named for what and where it measured)."""
