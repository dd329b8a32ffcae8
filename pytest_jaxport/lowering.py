"""Trace once, lower per platform, execute where present: the only module that drives JAX.

JAX is imported inside functions, never at module import, so that a pytest run without
portable tests does not pay for it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_jaxport.census import OpSite, Program
from pytest_jaxport.cost import op_cost
from pytest_jaxport.numerics import Leaf, Outputs

# Ops whose regions are reducer computations applied per element, not kernels of their own.
_REDUCER_OPS = frozenset(
    {
        "stablehlo.reduce",
        "stablehlo.reduce_window",
        "stablehlo.sort",
        "stablehlo.scatter",
        "stablehlo.select_and_scatter",
        "stablehlo.all_reduce",
        "stablehlo.reduce_scatter",
    }
)


class LoweringFailure(Exception):
    """JAX could not lower (or compile, or run) the function for one platform.

    ``compiled`` is the executable when compiling succeeded and running failed, ``None``
    otherwise; ``stage`` says which step failed (``lower``, ``compile`` or ``run``).
    """

    def __init__(self, message: str, *, stage: str = "lower", compiled: Any = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.compiled = compiled


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """The outputs of one run: as JAX returned them, and as host arrays for comparison."""

    platform: str
    value: Any
    outputs: Outputs
    compiled: Any = None
    """The executable that produced ``value`` (a ``jax.stages.Compiled``)."""
    rerun: Callable[[], Any] | None = None
    """Runs the executable again on the same arguments and waits (for profiling)."""


def describe_error(error: BaseException) -> str:
    """One line for a report: the exception type and the first line of its message."""
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    return f"{type(error).__name__}: {first}"[:500]


@functools.cache
def present_platforms() -> tuple[str, ...]:
    """Platforms with a device on this machine, the default backend first."""
    import jax

    found: list[str] = []
    for platform in ("cpu", "cuda", "rocm", "tpu"):
        try:
            if jax.devices(platform):
                found.append(platform)
        except RuntimeError:
            continue
    default = default_platform()
    return tuple(sorted(found, key=lambda p: p != default))


@functools.cache
def default_platform() -> str:
    """The platform plain ``jax.jit`` runs on here (``cuda``/``rocm`` rather than ``gpu``)."""
    import jax

    device = jax.devices()[0]
    for platform in ("cuda", "rocm"):
        try:
            if device in jax.devices(platform):
                return platform
        except RuntimeError:
            continue
    return str(device.platform)


@functools.cache
def device_kind(platform: str) -> str:
    """The kind of this machine's first ``platform`` device (``NVIDIA H100 80GB HBM3``)."""
    import jax

    return str(jax.devices(platform)[0].device_kind)


def versions() -> dict[str, str]:
    """jax and jaxlib versions, for reports and cache keys."""
    from importlib.metadata import version

    return {"jax": version("jax"), "jaxlib": version("jaxlib")}


def trace(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``jax.jit(fn).trace(*args, **kwargs)``: once per check, reused for every platform."""
    import jax

    return jax.jit(fn).trace(*args, **kwargs)


def lower(traced: Any, platform: str) -> Any:
    """Lower a traced function for ``platform``; no hardware for it is needed."""
    try:
        return traced.lower(lowering_platforms=(platform,))
    except Exception as e:  # JAX raises many types here; each is a finding, not a crash
        raise LoweringFailure(describe_error(e)) from e


def read_program(lowered: Any) -> Program:
    """The ops of every function of the lowered StableHLO module, for the census."""
    module = lowered.compiler_ir("stablehlo")
    functions: dict[str, tuple[OpSite, ...]] = {}
    public: list[str] = []
    for func in module.body.operations:
        name = _symbol(func.attributes["sym_name"])
        sites: list[OpSite] = []
        for region in func.regions:
            _collect(region, sites)
        functions[name] = tuple(sites)
        if "sym_visibility" not in func.attributes:
            public.append(name)
    entry = "main" if "main" in functions else (public or list(functions) or ["main"])[0]
    return Program(entry=entry, functions=functions)


def _symbol(attribute: Any) -> str:
    return str(attribute).strip('"').lstrip("@").strip('"')


def _collect(region: Any, sites: list[OpSite]) -> None:
    for block in region.blocks:
        for op in block.operations:
            operation = op.operation
            name = operation.name
            target = None
            attributes = operation.attributes
            if name == "stablehlo.custom_call":
                target = _symbol(attributes["call_target_name"])
            elif name in ("func.call", "call"):
                target = _symbol(attributes["callee"])
            flops, moved = op_cost(
                name,
                target,
                [str(v.type) for v in operation.operands],
                [str(r.type) for r in operation.results],
                _cost_attributes(name, attributes),
            )
            sites.append(
                OpSite(
                    op=name,
                    target=target,
                    location=str(operation.location),
                    flops=flops,
                    bytes=moved,
                )
            )
            if name not in _REDUCER_OPS:
                for nested in operation.regions:
                    _collect(nested, sites)


def _cost_attributes(name: str, attributes: Any) -> dict[str, str]:
    keys = {"stablehlo.dot_general": "dot_dimension_numbers",
            "stablehlo.convolution": "dimension_numbers"}  # fmt: skip
    key = keys.get(name)
    if key is None or key not in attributes:
        return {}
    return {key: str(attributes[key])}


def to_outputs(value: Any) -> Outputs:
    """Flatten a pytree of arrays into host arrays keyed by their path."""
    import jax

    flat, treedef = jax.tree_util.tree_flatten_with_path(value)
    leaves = tuple(
        Leaf(path=jax.tree_util.keystr(path), array=np.asarray(leaf)) for path, leaf in flat
    )
    return Outputs(structure=str(treedef), leaves=leaves)


def _compile_on(
    fn: Callable[..., Any],
    lowered: Any,
    platform: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The executable for ``platform`` (present here) and the arguments to call it with."""
    import jax

    if platform == default_platform():
        return lowered.compile(), tuple(args), dict(kwargs)
    device = jax.devices(platform)[0]
    placed_args, placed_kwargs = jax.device_put((tuple(args), dict(kwargs)), device)
    compiled = jax.jit(fn).trace(*placed_args, **placed_kwargs).lower().compile()
    return compiled, tuple(placed_args), dict(placed_kwargs)


def execute(
    fn: Callable[..., Any],
    traced: Any,
    lowered: Any,
    platform: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Execution:
    """Compile and run on ``platform``, which must be present.

    On the default platform the lowering the census read is compiled as is, so nothing is
    lowered twice; elsewhere the arguments are committed to that platform's device and the
    function re-traced there. The executable is kept on the result (``compiled``), so the
    compiled-level census reads it instead of compiling again.
    """
    import jax

    try:
        compiled, call_args, call_kwargs = _compile_on(fn, lowered, platform, args, kwargs)
    except Exception as e:  # a failure to compile is a finding for this platform
        raise LoweringFailure(describe_error(e), stage="compile") from e
    try:
        value = compiled(*call_args, **call_kwargs)
        value = jax.block_until_ready(value)  # type: ignore[no-untyped-call]
    except Exception as e:  # so is a failure to run; the executable is still good to read
        raise LoweringFailure(describe_error(e), stage="run", compiled=compiled) from e

    def rerun() -> Any:
        return jax.block_until_ready(compiled(*call_args, **call_kwargs))  # type: ignore[no-untyped-call]

    return Execution(
        platform=platform,
        value=value,
        outputs=to_outputs(value),
        compiled=compiled,
        rerun=rerun,
    )


def instruction_times(execution: Execution, *, runs: int = 3) -> dict[str, float]:
    """Measured self time per compiled instruction (seconds per run) of an execution.

    Raises ``RuntimeError`` when the profiler cannot measure here.
    """
    from pytest_jaxport.profile import measure

    if execution.rerun is None:
        raise RuntimeError("nothing to re-run")
    return measure(execution.rerun, runs=runs, warmup=0)


def module_text(lowered: Any) -> str:
    """The lowered module's text without locations (part of the compiled-level cache key)."""
    text: str = lowered.as_text()
    return text


def compiled_text(compiled: Any) -> str:
    """The optimized HLO of an executable (``compiled.as_text()``)."""
    try:
        text: str = compiled.as_text()
    except Exception as e:  # an executable without HLO text is a finding, not a crash
        raise LoweringFailure(describe_error(e), stage="compile") from e
    return text


def compile_present(
    fn: Callable[..., Any],
    lowered: Any,
    platform: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> str:
    """Compile (without running) for ``platform``, present here; the optimized HLO text."""
    try:
        compiled, _, _ = _compile_on(fn, lowered, platform, args, kwargs)
    except Exception as e:  # compile errors are findings for this platform
        raise LoweringFailure(describe_error(e), stage="compile") from e
    return compiled_text(compiled)


def compile_deviceless(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    target_config: str,
    options: Mapping[str, object],
) -> str:
    """Compile for CUDA against ``target_config`` with no GPU; the optimized HLO text."""
    from pytest_jaxport.deviceless import deviceless_compile

    try:
        return deviceless_compile(
            fn, args, kwargs, target_config=target_config, compiler_options=options or None
        )
    except Exception as e:  # XLA raises many types here; each is a finding, not a crash
        raise LoweringFailure(describe_error(e), stage="compile") from e


def is_array_like(value: Any) -> bool:
    """Whether jit accepts ``value`` as a dynamic argument leaf."""
    import jax

    return isinstance(value, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))


def argument_leaves(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every leaf of the arguments with a readable path (``args[1]['w']``, ``kwargs['x']``)."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))
    named = []
    for path, leaf in flat:
        head, *rest = path
        root = "args" if getattr(head, "idx", 0) == 0 else "kwargs"
        named.append((root + jax.tree_util.keystr(tuple(rest)), leaf))
    return named
