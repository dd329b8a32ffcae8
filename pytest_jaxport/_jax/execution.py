"""Compiling and running a check where its platform is present (:func:`execute`), compiling
without running, here or deviceless for CUDA, and the partitioner's record of a compile.

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_jaxport._jax.callbacks import inert
from pytest_jaxport._jax.deviceless import deviceless_executable, deviceless_partitioned_executable
from pytest_jaxport._jax.devices import default_platform
from pytest_jaxport._jax.lowering import LoweringFailure, describe_error, lower
from pytest_jaxport._jax.outputs import to_outputs
from pytest_jaxport._jax.profile import measure
from pytest_jaxport._jax.tracing import trace
from pytest_jaxport._jax.transforms import platform_function
from pytest_jaxport.model import partitioner
from pytest_jaxport.model.census import CompiledMemory, OpSite
from pytest_jaxport.model.compare import Outputs


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """The outputs of one run: as JAX returned them, and as host arrays for comparison."""

    platform: str
    value: object
    outputs: Outputs
    compiled: Any = None
    """The executable that produced ``value`` (a ``jax.stages.Compiled``)."""
    rerun: Callable[[], object] | None = None
    """Runs the executable again on the same arguments and waits (for profiling)."""
    inserted: tuple[OpSite, ...] | None = None
    """The collectives the SPMD partitioner inserted when this executable was compiled
    (``partitioner.inserted_collectives``), where :func:`execute` was asked to record them
    and could; ``None`` otherwise."""


def _compile_on(
    fn: Callable[..., object],
    lowered: Any,
    platform: str,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    partitioned: bool = False,
) -> tuple[Any, tuple[Any, ...], dict[str, Any], tuple[OpSite, ...] | None]:
    """The executable for ``platform`` (present here), the arguments to call it with, and,
    for a ``partitioned`` program compiled as lowered, the collectives partitioning added."""
    import jax

    if platform == default_platform():
        if partitioned:
            compiled, inserted = compile_partitioned(lowered)
            return compiled, tuple(args), dict(kwargs), inserted
        return lowered.compile(), tuple(args), dict(kwargs), None
    device = jax.devices(platform)[0]
    placed_args, placed_kwargs = jax.device_put((tuple(args), dict(kwargs)), device)
    fn = platform_function(fn, platform)
    compiled = jax.jit(fn).trace(*placed_args, **placed_kwargs).lower().compile()
    return compiled, tuple(placed_args), dict(placed_kwargs), None


def compile_partitioned(lowered: Any) -> tuple[Any, tuple[OpSite, ...] | None]:
    """Compile ``lowered`` (for a platform present here) as usual, with XLA recording the
    module before and after SPMD partitioning; the executable and the collectives the
    partitioner inserted (``None`` when the record cannot be read). Compiling a program
    costs the same with the record; only its text files are written (then removed).

    An executable served from JAX's persistent compilation cache was not compiled, so it
    leaves no record: the program is then compiled once more, past that cache, for it.
    """
    compiled, inserted = _compile_recording(lowered)
    if inserted is None:
        with _persistent_cache_off():
            _, inserted = _compile_recording(lowered)
    return compiled, inserted


def _compile_recording(lowered: Any) -> tuple[Any, tuple[OpSite, ...] | None]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="jaxport-spmd-") as directory:
        compiled = lowered.compile(partitioner.dump_options(Path(directory)))
        try:
            inserted: tuple[OpSite, ...] | None = partitioner.inserted_collectives(Path(directory))
        except (OSError, ValueError):  # no record, or an unreadable one
            inserted = None
    return compiled, inserted


@contextlib.contextmanager
def _persistent_cache_off() -> Iterator[None]:
    """JAX's persistent compilation cache off, for one compile (JAX decides whether to use
    it once per process: its state is reset on the way in and out)."""
    import jax
    from jax._src import compilation_cache

    enabled = bool(jax.config.values.get("jax_enable_compilation_cache"))
    if not enabled:
        yield
        return
    jax.config.update("jax_enable_compilation_cache", False)  # type: ignore[no-untyped-call]
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", True)  # type: ignore[no-untyped-call]
        compilation_cache.reset_cache()


def execute(
    fn: Callable[..., object],
    traced: Any,
    lowered: Any,
    platform: str,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    partitioned: bool = False,
) -> Execution:
    """Compile and run on ``platform``, which must be present.

    On the default platform the lowering the census read is compiled as is, so nothing is
    lowered twice; elsewhere the arguments are committed to that platform's device and the
    function re-traced there. The executable is kept on the result (``compiled``), so the
    compiled-level census reads it instead of compiling again. For a ``partitioned``
    program, that compilation also records the collectives the SPMD partitioner inserts
    (``inserted``), at no extra compile.
    """
    import jax

    try:
        compiled, call_args, call_kwargs, inserted = _compile_on(
            fn, lowered, platform, args, kwargs, partitioned=partitioned
        )
    except Exception as e:  # a failure to compile is a finding for this platform
        raise LoweringFailure(describe_error(e), stage="compile") from e
    try:
        value = compiled(*call_args, **call_kwargs)
        value = jax.block_until_ready(value)  # type: ignore[no-untyped-call]
    except Exception as e:  # so is a failure to run; the executable is still good to read
        raise LoweringFailure(describe_error(e), stage="run", compiled=compiled) from e

    def rerun() -> object:
        return jax.block_until_ready(compiled(*call_args, **call_kwargs))  # type: ignore[no-untyped-call]

    return Execution(
        platform=platform,
        value=value,
        outputs=to_outputs(value),
        compiled=compiled,
        rerun=rerun,
        inserted=inserted,
    )


def instruction_times(execution: Execution, *, runs: int = 3) -> dict[str, float]:
    """Measured self time per compiled instruction (seconds per run) of an execution.

    Raises ``RuntimeError`` when the profiler cannot measure here.
    """

    if execution.rerun is None:
        raise RuntimeError("nothing to re-run")
    return measure(execution.rerun, runs=runs, warmup=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledProgram:
    """What a compile without a run gave: the optimized HLO, and the compiler's memory
    count where it gave one (``memory_analysis()``)."""

    text: str
    memory: CompiledMemory | None = None


_MEMORY_STATS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
    "peak_memory_in_bytes",
)


def compiled_memory(compiled: Any) -> CompiledMemory | None:
    """The compiler's memory count of an executable (a ``jax.stages.Compiled``'s
    ``memory_analysis()``, a compile-only client's ``get_compiled_memory_stats()``);
    ``None`` where it gives none (a backend without it, an older jaxlib's fields)."""
    try:
        analysis = getattr(compiled, "memory_analysis", None)
        stats = analysis() if analysis is not None else compiled.get_compiled_memory_stats()
        found = {name: getattr(stats, name, None) for name in _MEMORY_STATS}
        return CompiledMemory.from_stats(
            {name: int(value) for name, value in found.items() if isinstance(value, int)}
        )
    except Exception:  # no count: the HLO still counts, the memory says "no plan"
        return None


def compiled_text(compiled: Any) -> str:
    """The optimized HLO of an executable (``compiled.as_text()``)."""
    try:
        text: str = compiled.as_text()
    except Exception as e:  # an executable without HLO text is a finding, not a crash
        raise LoweringFailure(describe_error(e), stage="compile") from e
    return text


def compile_present(
    fn: Callable[..., object],
    lowered: Any,
    platform: str,
    args: Sequence[object],
    kwargs: Mapping[str, object],
) -> CompiledProgram:
    """Compile (without running) for ``platform``, present here: the optimized HLO text and
    the compiler's memory count."""
    try:
        compiled, _, _, _ = _compile_on(fn, lowered, platform, args, kwargs)
    except Exception as e:  # compile errors are findings for this platform
        raise LoweringFailure(describe_error(e), stage="compile") from e
    return CompiledProgram(text=compiled_text(compiled), memory=compiled_memory(compiled))


def compile_deviceless(
    fn: Callable[..., object],
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    target_config: str,
    options: Mapping[str, object],
    lowered: Any = None,
    partitions: int = 1,
    inert_callbacks: bool = False,
) -> CompiledProgram:
    """Compile for CUDA against ``target_config`` with no GPU: the optimized HLO text (one
    device's program) and the compiler's memory count (one device's).

    A program partitioned over several devices compiles from its cuda ``lowered`` module
    for as many described GPUs (``deviceless.deviceless_compile_partitioned``), lowered
    again with compilable stand-ins where that module has ``inert_callbacks`` (placeholders
    do not compile); any other is traced again on one described GPU.
    """

    try:
        if partitions > 1 and lowered is not None:
            if inert_callbacks:
                traced = trace(fn, args, kwargs)
                lowered = lower(inert(traced, compilable=True), "cuda")
            executable = deviceless_partitioned_executable(
                lowered, partitions, target_config=target_config, compiler_options=options
            )
            text: str = executable.hlo_modules()[0].to_string()
            return CompiledProgram(text=text, memory=compiled_memory(executable))
        compiled = deviceless_executable(
            platform_function(fn, "cuda"),
            args,
            kwargs,
            target_config=target_config,
            compiler_options=options or None,
        )
        return CompiledProgram(text=compiled.as_text(), memory=compiled_memory(compiled))
    except Exception as e:  # XLA raises many types here; each is a finding, not a crash
        raise LoweringFailure(describe_error(e), stage="compile") from e
