"""Tracing a check's function: once per check (:func:`trace`), and again inside a device
description for a GPU or TPU that is not here, where a lowering rule asks which one it lowers
for (:class:`Trace`).

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_jaxport._jax.adapters import device_description, needs_hardware
from pytest_jaxport._jax.lowering import describe_error
from pytest_jaxport.model.probe import Untraced

if TYPE_CHECKING:
    from jax._src.interpreters.mlir import LoweringParameters
    from jax.extend.core import ClosedJaxpr
    from jax.stages import Lowered, Traced


class Untraceable(Exception):
    """JAX cannot trace the function on this machine: a lowering rule's trace-time check
    wants something absent here (cuDNN, for ``implementation="cudnn"`` attention). Not the
    user's error and not a failure to lower: ``untraced`` says what is missing."""

    def __init__(self, untraced: Untraced) -> None:
        super().__init__(f"needs {untraced.needs} ({untraced.error})")
        self.untraced = untraced


_TRACE_NEEDS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    # jax._src.cudnn checks cuDNN's version while tracing: "cuDNN is not detected." without
    # the jax CUDA plugin, "cuDNN not found." with the plugin but without cuDNN's library.
    (re.compile(r"\bcuDNN (?:is not detected|not found)"), "cuda", "cuDNN"),
)


def trace(
    fn: Callable[..., object],
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    described: Mapping[str, str] | None = None,
) -> Trace:
    """``jax.jit(fn).trace(*args, **kwargs)``: once per check, reused for every platform.

    ``described`` maps a platform to the device kind to describe where JAX asks which GPU
    (or TPU) it lowers for (default :data:`jax_adapters.DESCRIBED_GPUS`,
    :data:`jax_adapters.DESCRIBED_TPU`). Raises :class:`Untraceable`
    when tracing needs what this machine lacks; any other error is the function's own and
    propagates unchanged.
    """
    __tracebackhide__ = True  # the function's own error shows the user's frames, not ours
    import jax

    def again() -> Traced:
        __tracebackhide__ = True
        return jax.jit(fn).trace(*args, **kwargs)

    try:
        traced = again()
    except RuntimeError as e:
        for pattern, platform, needs in _TRACE_NEEDS:
            if pattern.search(str(e)):
                untraced = Untraced(platform=platform, needs=needs, error=describe_error(e))
                break
        else:
            raise
        raise Untraceable(untraced) from None
    return Trace(traced, again, described)


class Trace:
    """A traced function (``jax.stages.Traced``) that can be traced again for a GPU or TPU
    that is not here.

    Its :meth:`lower` lowers the trace; where that fails for one platform because JAX asked
    for its device (:func:`jax_adapters.needs_hardware`) and this JAX can describe one
    (:func:`jax_adapters.device_description`), it traces again inside the description and
    lowers that trace instead. JAX 0.11+ asks for a GPU in its Pallas GPU lowering rules,
    0.10+ for a TPU in some Pallas TPU rules; a described trace cannot be compiled for cpu,
    so it never replaces the first. A failure of the described trace is the platform's
    finding.
    """

    __slots__ = ("_again", "_described", "traced")

    def __init__(
        self,
        traced: Traced,
        again: Callable[[], Traced],
        described: Mapping[str, str] | None = None,
    ) -> None:
        self.traced = traced
        self._again = again
        self._described = described or {}

    @property
    def jaxpr(self) -> ClosedJaxpr:
        closed: ClosedJaxpr = self.traced.jaxpr  # untyped in JAX
        return closed

    def lower(
        self,
        *,
        lowering_platforms: tuple[str, ...] | None,
        _private_parameters: LoweringParameters | None = None,
    ) -> Lowered:
        """Lowered for ``lowering_platforms``; ``_private_parameters``: JAX's lowering
        parameters, as ``jax.stages.Traced.lower`` takes them (:func:`callbacks.inert`)."""
        lowered: Lowered
        try:
            lowered = self.traced.lower(
                lowering_platforms=lowering_platforms, _private_parameters=_private_parameters
            )
            return lowered
        except Exception as e:
            description = None
            if (
                lowering_platforms is not None
                and len(lowering_platforms) == 1
                and needs_hardware(describe_error(e))
            ):
                (platform,) = lowering_platforms
                description = device_description(platform, self._described.get(platform))
            if description is None:
                raise
        with description:
            described = self._again()
        lowered = described.lower(
            lowering_platforms=lowering_platforms, _private_parameters=_private_parameters
        )
        return lowered


def output_shapes(traced: Trace) -> object:
    """The outputs of a traced check as ``jax.ShapeDtypeStruct`` (a pytree of them), what
    ``jax.eval_shape`` gives: what ``check`` returns where nothing was run (abstract
    arguments). Read from the trace itself (``jax.stages.Traced.out_info``), nothing traced
    again."""
    import jax

    def shaped(info: object) -> object:
        shape, dtype = getattr(info, "shape", None), getattr(info, "dtype", None)
        if shape is None or dtype is None:
            return info
        sharding = getattr(info, "sharding", None)
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)  # type: ignore[no-untyped-call]

    return jax.tree_util.tree_map(shaped, traced.traced.out_info)
