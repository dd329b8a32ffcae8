"""Hooks other plugins and ``conftest.py`` files implement to extend pytest-jaxport."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_jaxport.targets import Classification


@pytest.hookspec(firstresult=True)
def pytest_jaxport_classify(
    platform: str, op: str, target: str | None, level: str
) -> Classification | None:
    """Classify an op or custom call that pytest-jaxport's own table gets wrong or lacks.

    :param platform: ``cpu``, ``cuda``, ``rocm`` or ``tpu``.
    :param op: the op name, e.g. ``stablehlo.custom_call`` or ``stablehlo.dot_general``; at
        the compiled level ``hlo.<opcode>`` (``hlo.custom_call``, ``hlo.fft``) or
        ``hlo.fusion:<kind>`` for a fusion (``hlo.fusion:__triton_nested_gemm_fusion``).
    :param target: the custom-call target for custom calls, else ``None``.
    :param level: ``lowered`` (StableHLO) or ``compiled`` (optimized HLO).

    Return a :class:`pytest_jaxport.targets.Classification`, or ``None`` to fall through to
    the built-in table. The first non-``None`` result wins. Example, in ``conftest.py``::

        from pytest_jaxport.targets import Classification

        def pytest_jaxport_classify(platform, op, target, level):
            if target == "my_fused_softmax":
                return Classification(layer="vendor", library="cudnn", kind="softmax")
            return None

    .. versionadded:: 0.1
    """
