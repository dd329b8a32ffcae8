"""The ``jaxport`` fixture: ``check()`` probes one function on every platform.

Example::

    @pytest.mark.portable(max_custom_calls=0)
    def test_mlp(jaxport):
        out = jaxport.check(mlp, params, x)   # reference (cpu) outputs
        assert out.shape == (8, 10)

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.cache import CompileSettings, cache_key, lowered_key, source_fingerprint
from pytest_jaxport.census import (
    Census,
    Classifier,
    OpSite,
    Program,
    SourceLocation,
    take_census,
)
from pytest_jaxport.config import Resolved
from pytest_jaxport.cost import RuntimeShare
from pytest_jaxport.partitioner import partition_record, recorded_inserted, with_inserted
from pytest_jaxport.report import PlatformProbe, Probe

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


@dataclass(slots=True)
class LoweredStats:
    """Per test: lowered-level cache hits and misses (platforms not present here)."""

    hits: int = 0
    misses: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Compiled:
    census: Census | None = None
    error: str | None = None
    deviceless: bool = False
    target: str | None = None


class JaxportWarning(pytest.PytestWarning):
    """A check could not do all it was asked (nothing executed, nothing to compare)."""


class Jaxport:
    """Probes functions for portability; one instance per test."""

    def __init__(
        self,
        *,
        config: Resolved,
        classifier: Classifier,
        rootdir: Path,
        compiled_classifier: Classifier | None = None,
        compile_settings: CompileSettings | None = None,
        profile: bool = False,
    ) -> None:
        self._config = config
        self._classifier = classifier
        self._compiled_classifier = compiled_classifier
        self._compile = compile_settings or CompileSettings()
        self._rootdir = rootdir
        self._profile = profile
        self.probes: list[Probe] = []
        self.outputs: dict[str, dict[str, Any]] = {}
        """Per check name, per executed platform, its ``numerics.Outputs`` (host arrays), for
        ``--jaxport-save-outputs``; never put into the report."""
        self.compile_stats = CompileStats()
        self.lowered_stats = LoweredStats()

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platforms this test's checks lower for."""
        return self._config.lowering_platforms()

    @property
    def reference(self) -> str:
        """The platform whose outputs the others are compared with."""
        return self._config.reference

    def check(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        transforms: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Lower ``fn(*args, **kwargs)`` for every platform, run it where present, compare.

        Returns the reference platform's outputs (or, when the reference did not run, the
        first platform's that did; ``None`` with a warning when none ran). Budgets are
        enforced when the test finishes.

        ``transforms`` (``("grad", "vmap", "jvp")``; default: the marker's or
        ``[tool.jaxport] transforms``) also checks those transformations of ``fn``, each as
        its own check ``name[grad]``. ``name`` and ``transforms`` are keywords of ``check``
        itself: a function taking such a keyword must be wrapped (``functools.partial``).
        """
        __tracebackhide__ = True
        from pytest_jaxport import lowering

        if not callable(fn):
            pytest.fail(
                f"jaxport.check: expected a callable as the first argument, "
                f"found {type(fn).__name__} {fn!r:.60}",
                pytrace=False,
            )
        check_name = self._unique_name(name if name is not None else _name_of(fn))
        for path, leaf in lowering.argument_leaves(args, kwargs):
            if not lowering.is_array_like(leaf):
                pytest.fail(
                    f"jaxport.check({check_name!r}): {path} is {type(leaf).__name__} "
                    f"{leaf!r:.60}, not an array; pass arrays or Python scalars, and bind "
                    f"static arguments with functools.partial",
                    pytrace=False,
                )

        variants = []
        for transform in self._transforms(check_name, transforms):
            usage = None
            try:
                variants.append(lowering.transformed(fn, transform, args, kwargs))
            except lowering.TransformUsage as e:
                usage = f"jaxport.check({check_name!r}): {e}"
            if usage is not None:  # outside the except: no chained traceback for a usage error
                pytest.fail(usage, pytrace=False)
        value = self._probe(check_name, fn, args, kwargs, lowering.trace(fn, args, kwargs))
        for variant in variants:
            self._probe(
                self._unique_name(f"{check_name}[{variant.transform}]"),
                variant, variant.args, {}, lowering.trace_variant(variant),
                variant_of=check_name, transform=variant.transform,
            )  # fmt: skip
        return value

    def _transforms(self, check_name: str, given: Sequence[str] | None) -> tuple[str, ...]:
        """``check(transforms=...)``, else the marker's, else ``[tool.jaxport]``'s."""
        from pytest_jaxport.config import ConfigError, transforms_value

        if given is None:
            return self._config.transforms()
        try:
            return transforms_value(f"jaxport.check({check_name!r}) transforms", given)
        except ConfigError as e:
            problem = str(e)
        pytest.fail(problem, pytrace=False)

    def _probe(
        self,
        check_name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        traced: Any,
        *,
        variant_of: str | None = None,
        transform: str | None = None,
    ) -> Any:
        """One check: lower ``traced`` per platform, census, run, compare; record the probe."""
        __tracebackhide__ = True
        from pytest_jaxport import lowering

        present = lowering.present_platforms()
        results: dict[str, PlatformProbe] = {}
        lowered_for: dict[str, Any] = {}
        programs: dict[str, Program] = {}
        keyed = _KeyParts(traced, args, kwargs)
        # A platform not present here (and not compiled) needs only its Program: read it from
        # the lowered-level cache when this jaxpr was lowered before, else lower all such
        # platforms together in one multi-platform lowering.
        keys: dict[str, str | None] = {}
        read: dict[str, Program] = {}
        for platform in self.platforms:
            if platform not in present and platform not in self._compile.platforms:
                keys[platform] = self._lowered_key(keyed, platform)
                program = self._cached_program(keys[platform])
                if program is not None:
                    read[platform] = program
        missing = [p for p in keys if p not in read]
        # Host callbacks lower only for a platform present here; for the others they become
        # inert placeholders (counted in meta), so every other op is still counted.
        absent = traced
        if any(p not in present and p not in read for p in self.platforms):
            absent = lowering.without_callbacks(traced, args, kwargs)
        together = lowering.lower_together(absent, missing) if len(missing) > 1 else None
        fresh: set[str] = set()  # lowered now, not read from the cache
        for platform in self.platforms:
            try:
                program = read.get(platform)
                if program is None and together is not None:
                    program = together.get(platform)
                if program is None:
                    lowered = lowering.lower(traced if platform in present else absent, platform)
                    program = lowering.read_program(lowered)
                    lowered_for[platform] = lowered
            except lowering.LoweringFailure as e:
                results[platform] = PlatformProbe(
                    platform=platform, present=platform in present, error=str(e)
                )
                continue
            if platform not in read:
                fresh.add(platform)
            programs[platform] = program
            results[platform] = PlatformProbe(platform=platform, present=platform in present)

        # A program partitioned over several devices gets the collectives XLA's SPMD
        # partitioner inserts; compiling it to run here records them (no extra compile),
        # unless the lowered cache has them from an earlier run.
        partitioned = any(program.partitions > 1 for program in programs.values())
        partition_key = self._lowered_key(keyed, _PARTITIONER) if partitioned else None
        recorded = self._recorded_partition(partition_key)
        executions: dict[str, lowering.Execution] = {}
        # What numerics' attempt to compile left behind, per platform: the executable, or
        # the failure that says compiling failed (so it is not tried a second time).
        built: dict[str, Any] = {}
        for platform in self._config.platforms:
            if platform not in present or platform not in lowered_for:
                continue
            try:
                executions[platform] = lowering.execute(
                    fn, traced, lowered_for[platform], platform, args, kwargs,
                    partitioned=partitioned and recorded is None,
                )  # fmt: skip
            except lowering.LoweringFailure as e:
                results[platform] = replace(results[platform], execution_error=str(e))
                built[platform] = e.compiled if e.stage == "run" else e
                continue
            built[platform] = executions[platform].compiled
            results[platform] = replace(results[platform], executed=True)

        if partitioned:
            inserted = recorded
            if inserted is None:
                inserted = self._inserted(traced, lowered_for, executions)
                if inserted is not None:
                    self._cache_program(partition_key, partition_record(inserted))
            programs = {
                p: with_inserted(program, inserted or ()) for p, program in programs.items()
            }
        for platform, program in programs.items():
            if platform in fresh:
                self._cache_program(keys.get(platform), program)
            census = self._relative(
                take_census(
                    program,
                    platform,
                    classifier=self._classifier,
                    seconds=self._roofline(platform),
                )
            )
            results[platform] = replace(results[platform], census=census)

        for platform in self._compile.platforms:
            if platform in lowered_for:
                results[platform] = self._compiled(
                    results[platform], fn, lowered_for[platform], programs[platform], args,
                    kwargs, built.get(platform), present, keyed,
                )  # fmt: skip

        for platform, result in results.items():
            share = self._runtime_share(result, executions.get(platform))
            if share is not None:
                results[platform] = replace(result, runtime_share=share)

        probe, value = self._compare(check_name, results, executions, transform=transform)
        if transform is not None:
            probe = replace(probe, variant_of=variant_of, transform=transform)
            self._warn_findings(probe)
        self.outputs[check_name] = {p: e.outputs for p, e in executions.items()}
        self.probes.append(probe)
        return value

    def _inserted(
        self,
        traced: Any,
        lowered_for: Mapping[str, Any],
        executions: Mapping[str, Any],
    ) -> tuple[OpSite, ...] | None:
        """The collectives the SPMD partitioner inserts into this program: recorded when it
        was compiled to run on the default platform, else by compiling it there now;
        ``None`` when it does not compile here (its own collectives are all it shows)."""
        from pytest_jaxport import lowering

        default = lowering.default_platform()
        execution = executions.get(default)
        if execution is not None and execution.inserted is not None:
            found: tuple[OpSite, ...] = execution.inserted
            return found
        try:
            lowered = lowered_for.get(default) or lowering.lower(traced, default)
            _, inserted = lowering.compile_partitioned(lowered)
        except Exception:  # it does not compile here: a finding of the numerics, if any
            return None
        return inserted

    def _recorded_partition(self, key: str | None) -> tuple[OpSite, ...] | None:
        """The inserted collectives an earlier run recorded for this program, if cached."""
        cache = self._compile.lowered_cache
        found = cache.get(key) if key is not None and cache is not None else None
        return None if found is None else recorded_inserted(found)

    # -- the lowered-level cache --------------------------------------------------------------

    def _lowered_key(self, keyed: _KeyParts, platform: str) -> str | None:
        """The cache key of ``platform``'s lowering; ``None`` when the cache is off or the
        jaxpr cannot be keyed (then it is lowered as without a cache)."""
        from pytest_jaxport import lowering

        if self._compile.lowered_cache is None:
            return None
        parts = keyed.get()
        if parts is None:
            return None
        jaxpr, sources, settings = parts
        return lowered_key(
            jaxpr=jaxpr,
            sources=sources,
            platform=platform,
            versions=lowering.versions(),
            settings=settings,
        )

    def _cache_program(self, key: str | None, program: Program | None) -> None:
        if key is not None and program is not None and self._compile.lowered_cache is not None:
            self._compile.lowered_cache.put(key, program)

    def _cached_program(self, key: str | None) -> Program | None:
        cache = self._compile.lowered_cache
        if key is None or cache is None:
            return None
        program = cache.get(key)
        if program is None:
            self.lowered_stats.misses += 1
        else:
            self.lowered_stats.hits += 1
        return program

    # -- runtime share --------------------------------------------------------------------------

    def _roofline(self, platform: str) -> Callable[[OpSite], float]:
        from pytest_jaxport.cost import DEFAULT_PEAKS, peak_from_target, roofline_seconds

        peak = DEFAULT_PEAKS.get(platform, DEFAULT_PEAKS["cpu"])
        if platform == "cuda" and self._compile.target_config:
            described = peak_from_target(self._compile.target_config, source=self._compile.target)
            peak = described or peak

        def seconds(site: OpSite) -> float:
            return roofline_seconds(site.flops, site.bytes, peak)

        return seconds

    def _runtime_share(self, result: PlatformProbe, execution: Any) -> RuntimeShare | None:
        """Measured where the platform ran and profiling is on, else the roofline estimate."""
        from pytest_jaxport import lowering
        from pytest_jaxport.cost import share_of

        if execution is not None and self._profile:
            try:
                measured = self._measured(result.platform, execution)
            except (RuntimeError, ValueError, lowering.LoweringFailure):
                measured = None  # the profiler is unavailable here: fall back to the estimate
            if measured is not None and measured.seconds > 0:
                return measured
        census = result.census
        if census is None or not census.estimated_seconds:
            return None
        return share_of(census.estimated_seconds, "estimated")

    def _measured(self, platform: str, execution: Any) -> RuntimeShare:
        from pytest_jaxport import lowering
        from pytest_jaxport.cost import share_of
        from pytest_jaxport.hlo import instruction_sites
        from pytest_jaxport.targets import classify

        times = lowering.instruction_times(execution)
        sites = instruction_sites(lowering.compiled_text(execution.compiled))
        classifier = self._compiled_classifier
        timed: list[tuple[str, str | None, float]] = []
        for name, seconds in times.items():
            site = sites.get(name)
            if site is None:  # not in the module's text (e.g. a runtime copy): XLA's own
                timed.append(("xla", None, seconds))
                continue
            target = site.target if site.op.endswith("custom_call") else None
            found = (
                classifier(platform, site.op, target)
                if classifier is not None
                else classify(platform, site.op, target, level="compiled")
            )
            timed.append((found.layer, found.library, seconds))
        return share_of(timed, "measured")

    # -- the compiled level -------------------------------------------------------------------

    def _compiled(
        self,
        result: PlatformProbe,
        fn: Callable[..., Any],
        lowered: Any,
        program: Program,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        built: Any,
        present: tuple[str, ...],
        keyed: _KeyParts,
    ) -> PlatformProbe:
        """``result`` with its compiled census (or why compiling failed); never raises."""
        from pytest_jaxport import lowering

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
        from pytest_jaxport import lowering

        target_config = self._compile.target_config

        def compile_deviceless() -> tuple[str, bool]:
            text = lowering.compile_deviceless(
                fn, args, kwargs, target_config=target_config, options=options,
                lowered=lowered, partitions=program.partitions,
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
        from pytest_jaxport import lowering
        from pytest_jaxport.hlo import parse_compiled_hlo

        cache = self._compile.cache
        stats = self.compile_stats
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
        census = take_census(program, platform, level="compiled", classifier=classifier)
        return _Compiled(census=self._relative(census))

    def _compare(
        self,
        check_name: str,
        results: dict[str, PlatformProbe],
        executions: Mapping[str, Any],
        *,
        transform: str | None = None,
    ) -> tuple[Probe, Any]:
        from pytest_jaxport.numerics import (
            Tolerance,
            compare,
            default_tolerance,
            gradient_tolerance,
        )

        # Derivatives are compared with JAX's gradient tolerances unless configured.
        defaults = gradient_tolerance if transform in ("grad", "jvp") else default_tolerance

        reference = self._config.reference
        note = None
        if not executions:
            present = [p for p in results if results[p].present]
            failures = [
                f"{p}: {results[p].error or results[p].execution_error}"
                for p in present
                if results[p].error or results[p].execution_error
            ]
            note = "not executed: " + (
                f"it failed on every platform present here ({'; '.join(failures)})"
                if failures
                else f"none of its platforms is present here (present: "
                f"{', '.join(lowering_present()) or 'none'})"
            )
            warnings.warn(JaxportWarning(f"check {check_name!r} {note}"), stacklevel=3)
            return Probe(name=check_name, reference=reference, platforms=results, note=note), None
        baseline = reference if reference in executions else next(iter(executions))
        if baseline != reference:
            note = f"reference platform {reference} did not run; compared with {baseline}"
            warnings.warn(JaxportWarning(f"check {check_name!r}: {note}"), stacklevel=3)
        elif len(executions) == 1:
            note = f"only {baseline} executed here: nothing to compare in-process"

        for platform, execution in executions.items():
            if platform == baseline:
                continue

            def tolerance(dtype: str, platform: str = platform) -> Tolerance:
                configured = self._config.tolerance(platform, dtype)
                default = defaults(dtype)
                return Tolerance(
                    rtol=default.rtol if configured.rtol is None else configured.rtol,
                    atol=default.atol if configured.atol is None else configured.atol,
                )

            comparison = compare(
                executions[baseline].outputs,
                execution.outputs,
                reference_platform=baseline,
                platform=platform,
                tolerance=tolerance,
            )
            results[platform] = replace(results[platform], numerics=comparison)
        probe = Probe(name=check_name, reference=baseline, platforms=results, note=note)
        return probe, executions[baseline].value

    def _warn_findings(self, probe: Probe) -> None:
        """Warn about a transformation that cannot be taken on a platform no ``must_lower``
        covers (where one does, the budget fails the test instead)."""
        quiet = []
        for platform, result in probe.platforms.items():
            must = self._config.budget(platform).must_lower
            if result.error is not None and not (must and platform in must.value):
                quiet.append(f"{platform}: {result.error}")
        if quiet:
            warnings.warn(
                JaxportWarning(f"check {probe.name!r}: " + "; ".join(quiet)), stacklevel=4
            )

    def _unique_name(self, name: str) -> str:
        taken = {p.name for p in self.probes}
        if name not in taken:
            return name
        n = 2
        while f"{name}#{n}" in taken:
            n += 1
        return f"{name}#{n}"

    def _relative(self, census: Census) -> Census:
        kernels = tuple(
            k if k.location is None else replace(k, location=self._relative_location(k.location))
            for k in census.kernels
        )
        return replace(census, kernels=kernels)

    def _relative_location(self, location: SourceLocation) -> SourceLocation:
        file = _relative_file(location.file, self._rootdir)
        return location if file is None else SourceLocation(file=file, line=location.line)


_PARTITIONER = "spmd-partitioner"
"""The lowered cache's "platform" for a program's partitioning record."""


class _KeyParts:
    """The lowered cache key's jaxpr-derived parts, computed once per check, on first use.

    The arguments' shardings are part of the jaxpr's: they decide which collectives the
    SPMD partitioner inserts, and a jaxpr does not show them."""

    __slots__ = ("_arguments", "_done", "_parts", "_traced")

    def __init__(self, traced: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        self._traced = traced
        self._arguments = (args, kwargs)
        self._parts: tuple[str, str, str] | None = None
        self._done = False

    def get(self) -> tuple[str, str, str] | None:
        if not self._done:
            self._done = True
            from pytest_jaxport import lowering

            try:
                jaxpr, sources = lowering.census_key_parts(self._traced)
                jaxpr += "\n" + lowering.sharding_text(*self._arguments)
                self._parts = (jaxpr, sources, lowering.lowering_settings())
            except Exception:  # an unkeyable jaxpr is lowered every time, never an error
                self._parts = None
        return self._parts


@functools.lru_cache(maxsize=4096)
def _relative_file(file: str, rootdir: Path) -> str | None:
    """``file`` relative to ``rootdir`` (``None`` when outside); resolving paths is slow."""
    try:
        return Path(file).resolve().relative_to(rootdir).as_posix()
    except (ValueError, OSError):
        return None


def lowering_present() -> tuple[str, ...]:
    from pytest_jaxport.lowering import present_platforms

    return present_platforms()


def _name_of(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None)
    if isinstance(name, str) and name != "<lambda>":
        return name
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None:
        return _name_of(inner)
    return type(fn).__name__ if name is None else "lambda"
