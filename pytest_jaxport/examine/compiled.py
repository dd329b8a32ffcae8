"""The compiled level: a platform's census as XLA compiled it, here or deviceless for CUDA,
through the compiled cache (:class:`CompiledLevel`), and an op's estimated seconds
(:func:`roofline`).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pytest_jaxport._jax import lowering
from pytest_jaxport._jax.callbacks import INERT_TARGET
from pytest_jaxport.cache import CompileSettings, cache_key, source_fingerprint
from pytest_jaxport.examine.lowered import KeyParts
from pytest_jaxport.examine.placement import Placement
from pytest_jaxport.model.census import Census, Classifier, OpSite, Program, take_census
from pytest_jaxport.model.cost import kernel_seconds, peak_for
from pytest_jaxport.model.formats import FormatCensus
from pytest_jaxport.model.hlo import parse_compiled_hlo
from pytest_jaxport.model.probe import PlatformProbe

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
class _Compiled:
    census: Census | None = None
    formats: FormatCensus | None = None
    error: str | None = None
    deviceless: bool = False
    target: str | None = None


def roofline(platform: str, settings: CompileSettings) -> Callable[[OpSite, str], float]:
    """An op's estimated seconds on ``platform`` (``cost.kernel_seconds``; the configured
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
        fn: Callable[..., Any],
        lowered: Any,
        program: Program,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        built: Any,
        present: tuple[str, ...],
        keyed: KeyParts,
    ) -> PlatformProbe:
        """``result`` with its compiled census (or why compiling failed); never raises."""

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
        if platform in present:
            kind = lowering.device_kind(platform)

            def compile_here() -> tuple[str, bool]:
                if isinstance(built, lowering.LoweringFailure):
                    raise built  # numerics already failed to compile it: never try twice
                if built is not None:
                    return lowering.compiled_text(built), True
                return lowering.compile_present(fn, lowered, platform, args, kwargs), False

            found = self._census_of(
                platform, module, f"device:{kind}", "", {}, compile_here,
            )  # fmt: skip
            found = replace(found, deviceless=False, target=None if platform == "cpu" else kind)
        elif platform == "cuda":
            found = self._deviceless(platform, module, fn, args, kwargs, {}, lowered, program)
        else:
            return result
        result = replace(
            result,
            compiled=found.census,
            compiled_formats=found.formats,
            compile_error=found.error,
            deviceless=found.deviceless,
            target=found.target,
        )
        if platform == "cuda" and self._compile.what_if_no_vendor:
            what_if = self._deviceless(
                platform, module, fn, args, kwargs, NO_VENDOR_OPTIONS, lowered, program
            )
            result = replace(result, what_if_no_vendor=what_if.census)
        return result

    def _deviceless(
        self,
        platform: str,
        module: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        options: Mapping[str, object],
        lowered: Any,
        program: Program,
    ) -> _Compiled:

        target_config = self._compile.target_config
        inert = any(
            (site.target or "").startswith(INERT_TARGET)
            for sites in program.functions.values()
            for site in sites
        )

        def compile_deviceless() -> tuple[str, bool]:
            text = lowering.compile_deviceless(
                fn, args, kwargs, target_config=target_config, options=options,
                lowered=lowered, partitions=program.partitions, inert_callbacks=inert,
            )  # fmt: skip
            return text, False

        found = self._census_of(
            platform, module, "deviceless", target_config, options, compile_deviceless
        )
        return replace(found, deviceless=True, target=self._compile.target)

    def _census_of(
        self,
        platform: str,
        module: str,
        mode: str,
        target_config: str,
        options: Mapping[str, object],
        produce: Callable[[], tuple[str, bool]],
    ) -> _Compiled:
        """The compiled census: from the cache, else from ``produce()`` (HLO text, reused)."""

        cache = self._compile.cache
        stats = self.stats
        key = cache_key(
            module=module,
            platform=platform,
            mode=mode,
            versions=lowering.versions(),
            target_config=target_config,
            options=options,
            xla_flags=os.environ.get("XLA_FLAGS", ""),
        )
        program: Program | None = cache.get(key) if cache is not None else None
        if program is not None:
            stats.hits += 1
        else:
            stats.misses += 1
            try:
                text, reused = produce()
                program = parse_compiled_hlo(text)
            except (lowering.LoweringFailure, ValueError) as e:
                return _Compiled(error=str(e) if isinstance(e, lowering.LoweringFailure)
                                 else lowering.describe_error(e))  # fmt: skip
            if reused:
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
        formats = self._placement.formats(program, platform, level="compiled")
        return _Compiled(census=self._placement.relative(census), formats=formats)
