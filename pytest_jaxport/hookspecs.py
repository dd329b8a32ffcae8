"""Hooks other plugins and ``conftest.py`` files implement to extend pytest-jaxport.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # annotations only: the tooling scan's rules load where a report scans
    from pytest_jaxport import Classification, CostModel, FormatItem, RewriteItem, ToolingRule


@pytest.hookspec(firstresult=True)
def pytest_jaxport_classify(
    platform: str, op: str, target: str | None, level: str
) -> Classification | None:
    """Classify an op or custom call that pytest-jaxport's own table gets wrong or lacks.

    :param platform: ``cpu``, ``cuda``, ``rocm``, ``tpu`` or ``oneapi``.
    :param op: the op name, e.g. ``stablehlo.custom_call`` or ``stablehlo.dot_general``; at
        the compiled level ``hlo.<opcode>`` (``hlo.custom_call``, ``hlo.fft``) or
        ``hlo.fusion:<kind>`` for a fusion (``hlo.fusion:__triton_nested_gemm_fusion``).
    :param target: the custom-call target for custom calls, else ``None``.
    :param level: ``lowered`` (StableHLO) or ``compiled`` (optimized HLO).

    Return a :class:`pytest_jaxport.Classification`, or ``None`` to fall through to
    the built-in table. The first non-``None`` result wins. Example, in ``conftest.py``::

        from pytest_jaxport import Classification

        def pytest_jaxport_classify(platform, op, target, level):
            if target == "my_fused_softmax":
                return Classification(layer="vendor", library="cudnn", kind="softmax")
            return None

    .. versionadded:: 0.1
    """


@pytest.hookspec(firstresult=True)
def pytest_jaxport_rewrite_cost(
    item: RewriteItem | FormatItem, target: str, model: CostModel
) -> float | None:
    """Price one NVIDIA-bound kernel or dispatch, or one formats-and-layout finding, for a
    move to ``target``, in days.

    :param item: what must change. A :class:`pytest_jaxport.RewriteItem` (a kernel):
        ``item.status`` is ``rewrite``, ``fallback`` or ``vendor-gap``; ``item.name``,
        ``item.kind`` and ``item.location`` say which. A :class:`pytest_jaxport.FormatItem`
        (a numeric format or a layout): ``item.cost`` is ``format_rewrite``, ``requantize``,
        ``precision_review`` or ``layout_work``; ``item.rule``, ``item.formats`` and
        ``item.location`` say which (``item.name``, ``item.kind`` and ``item.status`` are its
        rule, effect and cost key, so a hook written for kernels keeps working).
    :param target: the platform moved to (``rocm``, ``tpu``, ``oneapi`` or ``cpu``; any
        platform but the home).
    :param model: the configured cost model (``[tool.jaxport.cost]``).

    Return the days, or ``None`` to use the cost model. Example, in ``conftest.py``::

        def pytest_jaxport_rewrite_cost(item, target, model):
            if item.name == "__gpu$xla.gpu.triton" and target == "tpu":
                return 15.0  # our flash-attention port is known to be hard
            if item.status == "requantize" and target == "rocm":
                return 0.5  # our quantization script takes a --fnuz flag
            return None

    .. versionadded:: 0.1
    .. versionchanged:: Unreleased
        also called for formats-and-layout findings (:class:`pytest_jaxport.FormatItem`).
    """


def pytest_jaxport_tooling_rules(config: pytest.Config) -> Iterable[ToolingRule]:
    """Extra rules for the NVIDIA-bound tooling scan; every implementation's rules are added.

    Return :class:`pytest_jaxport.ToolingRule` values, e.g.::

        from pytest_jaxport import ToolingRule

        def pytest_jaxport_tooling_rules(config):
            return [ToolingRule(id="our-cuda-base", pattern=r"FROM ourco/cuda-base",
                                files=("Dockerfile*",), reason="our CUDA base image")]

    .. versionadded:: 0.1
    """
    return ()
