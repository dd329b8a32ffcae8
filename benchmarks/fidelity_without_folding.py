"""The fidelity harness as the census was before issue 43: ops on constants read and counted.

    python benchmarks/fidelity_without_folding.py [fidelity.py's arguments]

Runs :mod:`fidelity` with the lowered reader's constant folding turned off
(``stablehlo._Reader.folds`` answers no), so that a results file records what the lowered
census counted before folded ops were dropped, beside one recorded with it on: the
agreement that folding changed, program by program. Measurement only, never CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fidelity

from pytest_jaxport._jax import stablehlo


def _never(self: object, operation: object) -> bool:
    return False


if __name__ == "__main__":
    stablehlo._Reader.folds = _never  # type: ignore[method-assign]
    sys.exit(fidelity.main())
