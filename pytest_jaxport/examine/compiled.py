"""The compiled level: a platform's census as XLA compiled it, here or deviceless for CUDA,
through the compiled cache (:class:`CompiledLevel`), and an op's estimated seconds
(:func:`roofline`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_jaxport._jax import callbacks, libtpu, lowering
from pytest_jaxport._jax.callbacks import INERT_TARGET
from pytest_jaxport._jax.devices import device_kind, memory_limit, versions
from pytest_jaxport._jax.execution import (
    compile_deviceless,
    compile_present,
    compiled_memory,
    compiled_text,
)
from pytest_jaxport.cache import CompileSettings, FailedLowering, cache_key, source_fingerprint
from pytest_jaxport.examine.lowered import KeyParts
from pytest_jaxport.examine.placement import Placement
from pytest_jaxport.model.census import (
    Census,
    Classifier,
    CompiledMemory,
    OpSite,
    Program,
    SourceLocation,
    is_library_file,
    parse_location,
    placed_sites,
    take_census,
)
from pytest_jaxport.model.classification import MOSAIC_TARGET
from pytest_jaxport.model.devices import described_device, device_from_gpu_description
from pytest_jaxport.model.failure import failure_at
from pytest_jaxport.model.findings import FormatCensus
from pytest_jaxport.model.gpu import gpu_capacity
from pytest_jaxport.model.hlo import parse_compiled_hlo
from pytest_jaxport.model.libtpu import Topology, compiler_said, topology_for
from pytest_jaxport.model.memory import (
    DeviceMemory,
    MemoryTarget,
    not_compiled,
    planned,
    refused,
)
from pytest_jaxport.model.platforms import Capacity
from pytest_jaxport.model.probe import PlatformProbe
from pytest_jaxport.model.roofline import kernel_seconds, peak_for

NO_VENDOR_OPTIONS: Mapping[str, object] = {"xla_gpu_experimental_disable_binary_libraries": True}
"""XLA's switch against NVIDIA's binary libraries (the what-if). With jaxlib 0.10.2 it only
turns cuDNN convolutions into XLA kernels; gemms, solvers, FFTs and collectives stay."""


@dataclass(slots=True)
class CompileStats:
    """Per test: compiled-level cache hits and misses, and what each miss cost."""

    hits: int = 0
    misses: int = 0
    compiled: int = 0
    """Modules compiled only for the census (deviceless, or present but not executed)."""
    reused: int = 0
    """Executables numerics had already built, read instead of compiling again."""

    def to_dict(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "compiled": self.compiled,
            "reused": self.reused,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class _Where:
    """Where a compiled census's kernels are placed (:meth:`Placement.relative`)."""

    caller: SourceLocation | None = None
    at_caller: bool = False
    source: SourceLocation | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Produced:
    """What one compile gave: the optimized HLO, whether it was an executable numerics had
    built (``reused``), and the compiler's memory count where it gave one."""

    text: str
    reused: bool = False
    memory: CompiledMemory | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Compiled:
    census: Census | None = None
    formats: FormatCensus | None = None
    error: str | None = None
    deviceless: bool = False
    target: str | None = None
    memory: CompiledMemory | None = None
    """The compiler's memory count, where it gave one."""
    planned_for: MemoryTarget | None = None
    """The device the memory was planned for (its capacity)."""

    def device_memory(self, platform: str, partitions: int) -> DeviceMemory:
        """The compile's memory: its plan against the device's capacity, the compiler's
        refusal for memory, or no plan (the compile failed otherwise)."""
        target = self.planned_for or MemoryTarget(platform=platform, device=platform)
        if self.error is None:
            return planned(target, self.memory, devices=partitions)
        return refused(target, self.error, devices=partitions) or not_compiled(
            platform, "the compile failed (compile_error says why)"
        )


def _has_inert_callbacks(program: Program) -> bool:
    """Whether ``program`` holds host callbacks made inert placeholders (they do not compile)."""
    return any(
        (site.target or "").startswith(INERT_TARGET)
        for sites in program.functions.values()
        for site in sites
    )


def _libtpu_target(topology: Topology, libtpu_version: str) -> str:
    """What besides the module decides a tpu compile (the cache key's ``target_config``): the
    topology, libtpu's release (the compiled program follows libtpu, not jax) and libtpu's
    own flags."""
    return "\n".join(
        (
            topology.name,
            repr(topology.host_bounds),
            f"libtpu {libtpu_version}",
            os.environ.get("LIBTPU_INIT_ARGS", ""),
            _library_file(libtpu.foreign_library() or ""),
        )
    )


def _library_file(path: str) -> str:
    """A ``libtpu.so`` named in place of the package's (``TPU_LIBRARY_PATH``): its path,
    size and time, so that another build is another key."""
    if not path:
        return ""
    try:
        found = os.stat(path)
    except OSError:
        return path
    return f"{path} {found.st_size} {found.st_mtime_ns}"


def _tpu_target(label: str, generation: str, topology: Topology) -> MemoryTarget:
    """The TPU a libtpu compile plans for: the configured generation's slice, and its
    capacity (libtpu's available HBM per device, measured: ``DeviceDescription.capacity``)."""
    described = described_device("tpu", generation)
    capacity = described.capacity if described is not None else None
    return MemoryTarget(
        platform="tpu", device=label, generation=generation, slice=topology.name,
        deviceless=True, capacity=capacity,
        unknown="" if capacity else f"capacity unknown: no measured capacity for TPU "
        f"{generation} (libtpu has no topology for it)",
    )  # fmt: skip


def _present_target(platform: str, kind: str) -> MemoryTarget:
    """A device present here: what its runtime says it holds (``bytes_limit``), where it
    says; the CPU's is the host's memory, no device's: unknown."""
    limit = memory_limit(platform) if platform != "cpu" else None
    capacity = None
    if limit is not None:
        capacity = Capacity(bytes=limit, source=f"{kind}'s memory_stats() bytes_limit, here")
    return MemoryTarget(
        platform=platform, device=kind, capacity=capacity,
        per="chip" if platform == "tpu" else "GPU" if platform != "cpu" else "device",
        unknown="" if capacity else "capacity unknown: the CPU's memory is the host's, no "
        "device's" if platform == "cpu" else f"capacity unknown: {kind} says no bytes_limit",
    )  # fmt: skip


def roofline(platform: str, settings: CompileSettings) -> Callable[[OpSite, str], float]:
    """An op's estimated seconds on ``platform`` (``roofline.kernel_seconds``; the configured
    GPU's peaks for cuda)."""

    peak = peak_for(platform, target_config=settings.target_config, target=settings.target)

    def seconds(site: OpSite, layer: str) -> float:
        return kernel_seconds(site, layer, peak)

    return seconds


class CompiledLevel:
    """Compiles a check's lowerings where ``compile`` asks and takes their census."""

    def __init__(
        self,
        compile_settings: CompileSettings,
        *,
        placement: Placement,
        classifier: Classifier | None = None,
        stats: CompileStats | None = None,
    ) -> None:
        self._compile = compile_settings
        self._placement = placement
        self._compiled_classifier = classifier
        self.stats = stats if stats is not None else CompileStats()

    def compiled(
        self,
        result: PlatformProbe,
        fn: Callable[..., object] | None,
        lowered: Any,
        program: Program,
        args: tuple[object, ...],
        kwargs: Mapping[str, object],
        built: Any,
        present: tuple[str, ...],
        keyed: KeyParts,
        *,
        traced: Any = None,
        caller: SourceLocation | None = None,
        at_caller: bool = False,
        source: SourceLocation | None = None,
    ) -> PlatformProbe:
        """``result`` with its compiled census (or why compiling failed); never raises.

        ``fn`` (with ``args`` and ``kwargs``) is the checked function, ``None`` for an
        audited computation: then only the lowered module compiles (tpu's, through libtpu).
        ``traced`` lowers the program again where its host callbacks must compile;
        ``caller``, ``at_caller`` and ``source`` place its kernels as the lowered census's
        (:meth:`Placement.relative`), and ``caller``, the check's line, is where a compile
        error that names no line of its own is said to be."""
        where = _Where(caller=caller, at_caller=at_caller, source=source)

        platform = result.platform
        try:
            # What decides the compiled program: the module without locations (they never
            # change code generation) and the source lines a census can show, so a test
            # file's unrelated edits or the caller's stack do not force a recompile. The
            # lowered program keeps locations only for ops the lowered table can classify;
            # a compiled kernel (a fusion) can sit at any op's line: the line of every
            # equation is part of the key too.
            parts = keyed.get()
            lines = "" if parts is None else parts[1]
            module = (
                lowering.module_text(lowered) + "\n" + source_fingerprint(program) + "\n" + lines
            )
        except Exception as e:  # no text, no key: record it like any compile failure
            return replace(result, compile_error=lowering.describe_error(e))
        if platform in present and fn is not None:
            found = self._here(platform, module, fn, lowered, args, kwargs, built, where)
        elif platform == "cuda" and fn is not None:
            found = self._deviceless(
                platform, module, fn, args, kwargs, {}, lowered, program, where
            )
        elif self._compile.tpu_compiler is not None and platform == "tpu":
            found = self._libtpu(platform, module, lowered, program, traced, where)
        else:
            return result
        result = replace(
            result,
            compiled=found.census,
            compiled_formats=found.formats,
            compile_error=found.error,
            deviceless=found.deviceless,
            target=found.target,
            memory=found.device_memory(platform, program.partitions),
        )
        if platform == "cuda" and self._compile.what_if_no_vendor and fn is not None:
            what_if = self._deviceless(
                platform, module, fn, args, kwargs, NO_VENDOR_OPTIONS, lowered, program, where
            )
            result = replace(result, what_if_no_vendor=what_if.census)
        return result

    def _here(
        self,
        platform: str,
        module: str,
        fn: Callable[..., object],
        lowered: Any,
        args: tuple[object, ...],
        kwargs: Mapping[str, object],
        built: Any,
        where: _Where,
    ) -> _Compiled:
        """The compiled census of ``platform``, present here: the executable numerics built
        (``built``), or a compile of its own, never run."""
        kind = device_kind(platform)

        def compile_here() -> _Produced:
            if isinstance(built, lowering.LoweringFailure):
                raise built  # numerics already failed to compile it: never try twice
            if built is not None:
                return _Produced(text=compiled_text(built), reused=True,
                                 memory=compiled_memory(built))  # fmt: skip
            made = compile_present(fn, lowered, platform, args, kwargs)
            return _Produced(text=made.text, memory=made.memory)

        found = self._census_of(platform, module, f"device:{kind}", "", {}, compile_here, where)
        return replace(found, deviceless=False, target=None if platform == "cpu" else kind,
                       planned_for=_present_target(platform, kind))  # fmt: skip

    def _deviceless(
        self,
        platform: str,
        module: str,
        fn: Callable[..., object],
        args: tuple[object, ...],
        kwargs: Mapping[str, object],
        options: Mapping[str, object],
        lowered: Any,
        program: Program,
        where: _Where,
    ) -> _Compiled:

        target_config = self._compile.target_config
        inert = _has_inert_callbacks(program)

        def compile_for_cuda() -> _Produced:
            made = compile_deviceless(
                fn, args, kwargs, target_config=target_config, options=options,
                lowered=lowered, partitions=program.partitions, inert_callbacks=inert,
            )  # fmt: skip
            return _Produced(text=made.text, memory=made.memory)

        found = self._census_of(
            platform, module, "deviceless", target_config, options, compile_for_cuda, where
        )
        return replace(found, deviceless=True, target=self._compile.target,
                       planned_for=self._gpu_target())  # fmt: skip

    def _gpu_target(self) -> MemoryTarget:
        """The GPU a deviceless cuda compile plans for: the ``target`` description's."""
        settings = self._compile
        try:
            generation = device_from_gpu_description(settings.target_config).generation
        except ValueError:  # a description without a compute capability: named as it is
            generation = ""
        capacity = gpu_capacity(settings.target_config, settings.target)
        return MemoryTarget(
            platform="cuda", device=settings.gpu_kind or settings.target, generation=generation,
            deviceless=True, capacity=capacity, per="GPU",
            unknown="" if capacity else f"capacity unknown: the GPU description "
            f"{settings.target} gives no device_memory_size",
        )  # fmt: skip

    def _libtpu(
        self,
        platform: str,
        module: str,
        lowered: Any,
        program: Program,
        traced: Any,
        where: _Where,
    ) -> _Compiled:
        """The compiled census of ``platform`` (tpu) for its configured device, compiled by
        libtpu in its worker (:mod:`pytest_jaxport._jax.libtpu`), deviceless."""

        compiler = self._compile.tpu_compiler
        assert compiler is not None
        device = self._placement.device(platform)
        try:
            topology = topology_for(
                platform, device.generation, device.topology, partitions=program.partitions
            )
        except ValueError as e:
            return _Compiled(error=str(e), deviceless=True, target=str(device))
        planned_for = _tpu_target(device.name or device.generation, device.generation, topology)
        inert = _has_inert_callbacks(program)

        def compile_libtpu() -> _Produced:
            source = lowered
            if inert and traced is not None:  # placeholders do not compile: stand-ins do
                source = lowering.lower(callbacks.inert(traced, compilable=True), platform)
            try:
                made = compiler.compile(
                    libtpu.module_bytes(source),
                    topology,
                    partitions=program.partitions,
                    settings=libtpu.jax_settings(),
                )
            except libtpu.CompileFailure as failure:
                named = re.search(r"module @([\w.$-]+)", module)
                name = named.group(1) if named else program.entry
                said = self._failure(failure, program, name, planned_for, where.caller)
                raise lowering.LoweringFailure(said, stage=failure.stage) from None
            return _Produced(text=made.hlo, memory=made.memory)

        target = _libtpu_target(topology, self._compile.libtpu)
        found = self._census_of(platform, module, "deviceless", target, {}, compile_libtpu, where)
        return replace(found, deviceless=True, target=topology.name, planned_for=planned_for)

    def _failure(
        self,
        failure: libtpu.CompileFailure,
        program: Program,
        name: str,
        planned_for: MemoryTarget,
        caller: SourceLocation | None,
    ) -> str:
        """What a tpu compile that failed says: the compiler's reason without its C++ stack,
        at the line it concerns (the kernel's, for Mosaic; the frame the compiler suspects;
        else the check's), or that it ran past the time limit, where. A refusal for memory
        says so first, at the check's line: ``does not fit on tpu (v5e:1x1): needs 18.75 GiB
        of 15.75 GiB (at test_step.py:12): <the compiler's words>``."""
        slice_name = planned_for.slice
        if failure.stage == "timeout":
            at = f" (checking at {caller})" if caller is not None else ""
            return (
                f"compile exceeded {self._compile.compile_time_limit:g} s on tpu "
                f"({slice_name}) compiling {name}{at}: the run went on without "
                "its compiled census; raise [tool.jaxport] compile_time_limit to wait longer"
            )
        if failure.stage != "compile":
            return f"{failure} [tpu {slice_name}]"
        said = compiler_said(str(failure))
        memory = refused(planned_for, said.reason, devices=program.partitions)
        if memory is not None and memory.out_of_memory is not None:
            at = f" (at {caller})" if caller is not None else ""
            return f"{memory.headline()}{at}: {said.reason}"
        line = (
            self._named_line(said.locations)
            or self._suspected_line(said.frames)
            or self._op_line(program, said.reason)
            or caller
        )
        return failure_at(said.reason, line)

    def _named_line(self, locations: Sequence[str]) -> SourceLocation | None:
        """The first user's line among the MLIR locations a compiler's error names (Mosaic
        names the kernel's op it could not compile)."""
        own = self._placement.own_packages
        for text in locations:
            found = parse_location(text, own)
            if found is not None and not is_library_file(found.file, own):
                return self._placement.shown_location(found)
        return None

    def _op_line(self, program: Program, reason: str) -> SourceLocation | None:
        """The line of the first op of ``program`` (as lowered) that the compiler's reason
        names: its custom call's target (``LuDecomposition``; a Mosaic kernel's
        ``tpu_custom_call``, which VMEM exhaustion names), or its op (``FFT``,
        ``dot_general``); a Mosaic error names none, and is its kernel's."""
        words = {word.lower() for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", reason)}
        mosaic = "Mosaic" in reason
        for site, line in placed_sites(program, self._placement.own_packages):
            custom = site.op.endswith("custom_call")
            named = (
                (custom and (site.target or "").lower() in words)
                or (not custom and site.op.rpartition(".")[2].lower() in words - {"call"})
                or (mosaic and site.target == MOSAIC_TARGET)
            )
            if named and line is not None:
                return self._placement.shown_location(line)
        return None

    def _suspected_line(self, frames: Sequence[tuple[str, int]]) -> SourceLocation | None:
        """The innermost frame the compiler suspects that is the user's code."""
        for file, line in frames:
            if not is_library_file(file, self._placement.own_packages):
                return self._placement.shown_location(SourceLocation(file=file, line=line))
        return None

    def _census_of(
        self,
        platform: str,
        module: str,
        mode: str,
        target_config: str,
        options: Mapping[str, object],
        produce: Callable[[], _Produced],
        where: _Where,
    ) -> _Compiled:
        """The compiled census: from the cache, else from ``produce()``. The compiler's
        refusal (a ``compile`` failure) is kept too: the same module fails the same way."""

        cache = self._compile.cache
        stats = self.stats
        key = cache_key(
            module=module,
            platform=platform,
            mode=mode,
            versions=versions(),
            target_config=target_config,
            options=options,
            xla_flags=os.environ.get("XLA_FLAGS", ""),
        )
        entry = cache.entry(key) if cache is not None else None
        if isinstance(entry, FailedLowering):
            stats.hits += 1
            return _Compiled(error=entry.error)
        program: Program | None = entry
        if program is not None:
            stats.hits += 1
        else:
            stats.misses += 1
            try:
                made = produce()
                program = replace(parse_compiled_hlo(made.text), memory=made.memory)
            except (lowering.LoweringFailure, ValueError) as e:
                error = (
                    str(e) if isinstance(e, lowering.LoweringFailure)
                    else lowering.describe_error(e)
                )  # fmt: skip
                if cache is not None and getattr(e, "stage", "") == "compile":
                    cache.put(key, FailedLowering(error=error))
                return _Compiled(error=error)
            if made.reused:
                stats.reused += 1
            else:
                stats.compiled += 1
            if cache is not None:
                cache.put(key, program)
        classifier = self._compiled_classifier
        census = take_census(
            program,
            platform,
            level="compiled",
            classifier=classifier,
            seconds=roofline(platform, self._compile),
            own=self._placement.own_packages,
        )
        formats = self._placement.formats(
            program, platform, level="compiled", caller=where.caller, at_caller=where.at_caller,
            source=where.source,
        )  # fmt: skip
        placed = self._placement.relative(
            census, where.caller, at_caller=where.at_caller, source=where.source
        )
        return _Compiled(census=placed, formats=formats, memory=program.memory)
