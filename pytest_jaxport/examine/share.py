"""Where a platform's time goes: measured where it ran under the profiler, else estimated
(:func:`runtime_share`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from typing import Any

from pytest_jaxport._jax import lowering
from pytest_jaxport._jax.execution import compiled_text, instruction_times
from pytest_jaxport.model.census import Classifier
from pytest_jaxport.model.classification import Classification, classify
from pytest_jaxport.model.hlo import instruction_sites
from pytest_jaxport.model.probe import PlatformProbe
from pytest_jaxport.model.roofline import estimated_share
from pytest_jaxport.model.runtime_share import RuntimeShare, measured_share


def runtime_share(
    result: PlatformProbe,
    execution: Any,
    *,
    profile: bool = False,
    classifier: Classifier | None = None,
) -> RuntimeShare | None:
    """Measured where the platform ran and ``profile`` is on, else the estimate: from the
    compiled census where there is one (XLA's kernels as they run), else the lowered.
    A program with host callbacks is never profiled: profiling runs it again, and its
    callbacks (a print, an ``io_callback``'s side effect) with it. ``classifier``: the
    compiled level's (classify hooks), else the table's."""

    calls_back = result.census is not None and any(
        k.kind == "host-callback" for k in result.census.kernels
    )
    if execution is not None and profile and not calls_back:
        try:
            measured = _measured(result.platform, execution, classifier)
        except (RuntimeError, ValueError, lowering.LoweringFailure):
            measured = None  # the profiler is unavailable here: fall back to the estimate
        if measured is not None and measured.seconds > 0:
            return measured
    for census in (result.compiled, result.census):
        share = estimated_share(census) if census is not None else None
        if share is not None:
            return share
    return None


def _measured(platform: str, execution: Any, classifier: Classifier | None) -> RuntimeShare:
    times = instruction_times(execution)
    sites = instruction_sites(compiled_text(execution.compiled))

    def classify_op(op: str, target: str | None) -> Classification:
        if classifier is not None:
            return classifier(platform, op, target)
        return classify(platform, op, target, level="compiled")

    return measured_share(times, sites, classify_op)
