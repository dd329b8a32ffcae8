"""The ``jaxport`` fixture: ``check()`` probes one function on every platform.

Example::

    @pytest.mark.portable(max_custom_calls=0)
    def test_mlp(jaxport):
        out = jaxport.check(mlp, params, x)   # reference (cpu) outputs
        assert out.shape == (8, 10)

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from pytest_jaxport.arguments import ArgumentError, prepare
from pytest_jaxport.cache import CompileSettings, cache_key, source_fingerprint
from pytest_jaxport.census import Census, Classifier, OpSite, Program, SourceLocation, take_census
from pytest_jaxport.config import Resolved
from pytest_jaxport.cost import RuntimeShare
from pytest_jaxport.lowered_level import KeyParts, LoweredLevel, LoweredStats
from pytest_jaxport.partitioner import with_inserted
from pytest_jaxport.report import PlatformProbe, Probe, Untraced

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
    error: str | None = None
    deviceless: bool = False
    target: str | None = None


class JaxportWarning(pytest.PytestWarning):
    """A check could not do all it was asked (nothing executed, nothing to compare)."""


_PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_frame() -> tuple[FrameType, int]:
    """The first frame outside the plugin (the user's ``check`` call, however many plugin
    frames lie between) and its stack level as seen from the caller of this function."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PLUGIN_DIR):
        frame = frame.f_back
        level += 1
    return frame, level


def warn(warning: Warning) -> None:
    """Issue ``warning`` at the user's ``check`` call (as ``skip_file_prefixes`` does on
    3.12+)."""
    _, level = _user_frame()
    warnings.warn(warning, stacklevel=level)


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
        self._lowered_level = LoweredLevel(
            classifier=classifier,
            rootdir=rootdir,
            compile_settings=self._compile,
            stats=self.lowered_stats,
            own_packages=config.project.own_packages,
        )

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
        from pytest_jaxport.interception import paused

        with paused():  # the plugin's own JAX work: never part of a --jaxport-audit
            return self._check(fn, args, kwargs, name=name, transforms=transforms)

    def _check(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        name: str | None,
        transforms: Sequence[str] | None,
    ) -> Any:
        __tracebackhide__ = True
        from pytest_jaxport import lowering

        if not callable(fn):
            pytest.fail(
                f"jaxport.check: expected a callable as the first argument, "
                f"found {type(fn).__name__} {fn!r:.60}",
                pytrace=False,
            )
        check_name = self._unique_name(name if name is not None else _name_of(fn))
        problem: str | None = None
        try:
            call = prepare(fn, args, kwargs, name=check_name)
        except ArgumentError as e:
            problem = str(e)
        if problem is not None:  # outside the except: no chained traceback for a usage error
            pytest.fail(problem, pytrace=False)
        fn, args, kwargs = call.fn, call.args, call.kwargs
        wanted = self._transforms(check_name, transforms)
        gpus = {"cuda": self._compile.gpu_kind} if self._compile.gpu_kind else None
        try:
            traced = lowering.trace(fn, args, kwargs, gpus=gpus)
        except lowering.Untraceable as e:
            self._untraced(check_name, e.untraced, wanted)
            return None

        variants = []
        for transform in wanted:
            usage = None
            try:
                variants.append(lowering.transformed(fn, transform, args, kwargs))
            except lowering.TransformUsage as e:
                usage = f"jaxport.check({check_name!r}): {e}"
            if usage is not None:  # outside the except: no chained traceback for a usage error
                pytest.fail(usage, pytrace=False)
        value = self._probe(check_name, fn, args, kwargs, traced)
        for variant in variants:
            self._probe(
                self._unique_name(f"{check_name}[{variant.transform}]"),
                variant, variant.args, {}, lowering.trace_variant(variant, gpus=gpus),
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

    def _untraced(self, check_name: str, untraced: Untraced, transforms: Sequence[str]) -> None:
        """Record a check JAX could not trace here: reported, warned about, failed only
        under ``must_trace``."""
        note = (
            f"could not be traced here: needs {untraced.needs} ({untraced.error}); nothing "
            f"was lowered, counted or run on any platform"
        )
        if transforms:
            note += f", nor its {', '.join(transforms)}"
        if untraced.needs == "cuDNN":
            note += (
                "; to count it without a GPU install the jax CUDA plugin at jaxlib's version "
                "and cuDNN (jax-cuda12-plugin, nvidia-cudnn-cu12)"
            )
        warn(JaxportWarning(f"check {check_name!r} {note}"))
        self.outputs[check_name] = {}
        self.probes.append(
            Probe(name=check_name, reference=self._config.reference, note=note, untraced=untraced)
        )

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
        frame, _ = _user_frame()  # the line that called check()
        caller = self._lowered_level.shown_location(
            SourceLocation(file=frame.f_code.co_filename, line=frame.f_lineno)
        )
        keyed = KeyParts(traced, args, kwargs, own=self._lowered_level.own_packages)
        level = self._lowered_level
        # A platform not present here (and not compiled) needs only its Program: the lowered
        # level reads it from the cache, or lowers all such platforms together.
        found = level.lower(
            traced,
            keyed,
            self.platforms,
            present=present,
            cached=[p for p in self.platforms
                    if p not in present and p not in self._compile.platforms],
        )  # fmt: skip
        lowered_for: dict[str, Any] = dict(found.lowered)
        programs: dict[str, Program] = dict(found.programs)
        results: dict[str, PlatformProbe] = {
            p: found.failures.get(p) or PlatformProbe(platform=p, present=p in present)
            for p in (*programs, *found.failures)
        }

        # A program partitioned over several devices gets the collectives XLA's SPMD
        # partitioner inserts; compiling it to run here records them (no extra compile),
        # unless the lowered cache has them from an earlier run.
        partitioned = found.partitioned
        recorded = level.recorded_partition(keyed) if partitioned else None
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

        inserted = recorded
        if partitioned and inserted is None:
            inserted = self._inserted(traced, lowered_for, executions)
            if inserted is not None:
                level.record_partition(keyed, inserted)
        censuses = level.census(found, present=present, caller=caller, inserted=inserted)
        for platform, counted in censuses.items():
            if counted.census is not None:
                results[platform] = replace(results[platform], census=counted.census)
        programs = {  # what the compiled level keys on: with the partitioner's collectives
            p: with_inserted(program, inserted or ()) if partitioned else program
            for p, program in programs.items()
        }

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
        _warn_unverified(probe)
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

        execution = executions.get(lowering.default_platform())
        if execution is not None and execution.inserted is not None:
            found: tuple[OpSite, ...] = execution.inserted
            return found
        return self._lowered_level.partition(traced, lowered_for)

    # -- runtime share --------------------------------------------------------------------------

    def _runtime_share(self, result: PlatformProbe, execution: Any) -> RuntimeShare | None:
        """Measured where the platform ran and profiling is on, else the estimate: from the
        compiled census where there is one (XLA's kernels as they run), else the lowered.
        A program with host callbacks is never profiled: profiling runs it again, and its
        callbacks (a print, an ``io_callback``'s side effect) with it."""
        from pytest_jaxport import lowering
        from pytest_jaxport.cost import estimated_share

        calls_back = result.census is not None and any(
            k.kind == "host-callback" for k in result.census.kernels
        )
        if execution is not None and self._profile and not calls_back:
            try:
                measured = self._measured(result.platform, execution)
            except (RuntimeError, ValueError, lowering.LoweringFailure):
                measured = None  # the profiler is unavailable here: fall back to the estimate
            if measured is not None and measured.seconds > 0:
                return measured
        for census in (result.compiled, result.census):
            share = estimated_share(census) if census is not None else None
            if share is not None:
                return share
        return None

    def _measured(self, platform: str, execution: Any) -> RuntimeShare:
        from pytest_jaxport import lowering
        from pytest_jaxport.cost import measured_share
        from pytest_jaxport.hlo import instruction_sites
        from pytest_jaxport.targets import Classification, classify

        times = lowering.instruction_times(execution)
        sites = instruction_sites(lowering.compiled_text(execution.compiled))
        classifier = self._compiled_classifier

        def classify_op(op: str, target: str | None) -> Classification:
            if classifier is not None:
                return classifier(platform, op, target)
            return classify(platform, op, target, level="compiled")

        return measured_share(times, sites, classify_op)

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
        keyed: KeyParts,
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
        from pytest_jaxport.callbacks import INERT_TARGET

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
        census = take_census(
            program,
            platform,
            level="compiled",
            classifier=classifier,
            seconds=self._lowered_level.roofline(platform),
            own=self._lowered_level.own_packages,
        )
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
            warn(JaxportWarning(f"check {check_name!r} {note}"))
            return Probe(name=check_name, reference=reference, platforms=results, note=note), None
        baseline = reference if reference in executions else next(iter(executions))
        if baseline != reference:
            note = f"reference platform {reference} did not run; compared with {baseline}"
            warn(JaxportWarning(f"check {check_name!r}: {note}"))
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
            warn(JaxportWarning(f"check {probe.name!r}: " + "; ".join(quiet)))

    def _unique_name(self, name: str) -> str:
        taken = {p.name for p in self.probes}
        if name not in taken:
            return name
        n = 2
        while f"{name}#{n}" in taken:
            n += 1
        return f"{name}#{n}"

    def _relative(self, census: Census) -> Census:
        return self._lowered_level.relative(census)


def _warn_unverified(probe: Probe) -> None:
    """Say which platforms' budgets (``must_lower`` included) could not be checked here:
    neither a pass nor a failure, so never silent (warnings as errors make it a failure)."""
    unknown = [f"{p}: {r.error}" for p, r in probe.platforms.items() if r.needs_hardware]
    if unknown:
        warn(
            JaxportWarning(
                f"check {probe.name!r}: {'; '.join(unknown)}; its budgets for "
                f"{', '.join(p for p, r in probe.platforms.items() if r.needs_hardware)} are "
                "unverified on this machine (run it where that hardware is present)"
            )
        )


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
