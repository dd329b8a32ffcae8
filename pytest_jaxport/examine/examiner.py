"""One path for every computation: lower it per platform, add the collectives the SPMD
partitioner inserts, take each census, compile it where asked, estimate or measure where its
time goes (:class:`Examiner`). A checked function (:meth:`Examiner.check`, from
:mod:`pytest_jaxport.fixture`) and an audited computation (:meth:`Examiner.audit`, from
:mod:`pytest_jaxport.recorder`) both go down it; a check also runs the program on the platforms
present, between lowering and census (``run``), and compiles where ``compile`` asks.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_jaxport._jax.adapters import missing_package
from pytest_jaxport._jax.devices import default_platform
from pytest_jaxport._jax.execution import Execution
from pytest_jaxport.cache import CompileSettings
from pytest_jaxport.examine import stages as stage
from pytest_jaxport.examine.compiled import CompiledLevel, CompileStats, roofline
from pytest_jaxport.examine.lowered import KeyParts, LoweredLevel, LoweredPrograms, LoweredStats
from pytest_jaxport.examine.placement import Placement
from pytest_jaxport.examine.share import runtime_share
from pytest_jaxport.examine.stages import Stages, unobserved
from pytest_jaxport.model.census import (
    Classifier,
    OpSite,
    Program,
    SourceLocation,
    take_census,
)
from pytest_jaxport.model.config import COMPILE_PLATFORMS
from pytest_jaxport.model.memory import not_compiled, why_not_compiled
from pytest_jaxport.model.partitioner import with_inserted
from pytest_jaxport.model.probe import PlatformProbe


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """What running a check's lowerings on the platforms present did."""

    executions: Mapping[str, Execution] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    """Per platform that failed to compile or run, why."""
    built: Mapping[str, Any] = field(default_factory=dict)
    """Per platform, the executable numerics built, or the failure that says compiling failed
    (so the compiled level does not try a second time)."""


Runner = Callable[[LoweredPrograms, bool], Run]
"""``run(found, record_partition)``: run ``found``'s lowerings on the platforms present,
recording the partitioner's collectives when asked (a check's side of :meth:`Examiner.check`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Examined:
    """What :meth:`Examiner.check` or :meth:`Examiner.audit` found for one computation."""

    results: Mapping[str, PlatformProbe]
    """Per platform: its census, compiled census and runtime share, or why it failed."""
    executions: Mapping[str, Execution]
    """Per platform that ran, its outputs (a check compares them)."""
    programs: Mapping[str, Program]
    """Per platform that lowered, its program as the census read it."""
    unkept: Mapping[str, Program] = field(default_factory=dict)
    """The programs lowered now that ``audit(keep_programs=False)`` left out of the lowered
    cache, by key: ``LoweredLevel.keep_programs`` keeps them."""

    @property
    def keepable(self) -> bool:
        """Whether its census means the same wherever these versions run: not where a platform
        failed for want of this machine's hardware or packages or did not compile (the
        compiled cache keeps the compiler's refusals), nor a partitioned program (its
        collectives depend on whether it compiled here)."""
        return all(
            r.needs_hardware is None
            and (r.error is None or missing_package(r.error) is None)
            and r.compile_error is None  # a compile past its time limit may make it next time
            for r in self.results.values()
        ) and all(p.partitions <= 1 for p in self.programs.values())


class Examiner:
    """Lowers traced computations per platform and takes their census, through the caches.

    Two entry points over one path: :meth:`check` (a checked function: run, compiled where
    asked, measured where profiled) and :meth:`audit` (an audited computation: nothing runs).
    ``stages``: the instrumentation hook, entered around each stage
    (:mod:`pytest_jaxport.examine.stages` names them)."""

    def __init__(
        self,
        *,
        classifier: Classifier,
        rootdir: Path,
        compile_settings: CompileSettings,
        compiled_classifier: Classifier | None = None,
        profile: bool = False,
        stats: LoweredStats | None = None,
        own_packages: tuple[str, ...] = (),
        stages: Stages | None = None,
    ) -> None:
        self._classifier = classifier
        self._compiled_classifier = compiled_classifier
        self._compile = compile_settings
        self._profile = profile
        self.stage: Stages = stages if stages is not None else unobserved
        """The instrumentation hook: ``with examiner.stage("compare"): ...``."""
        self.placement = Placement(
            rootdir=rootdir, own_packages=own_packages, devices=compile_settings.devices
        )
        self.lowered = LoweredLevel(compile_settings, stats=stats, stages=self.stage)
        self.compiled = CompiledLevel(
            compile_settings, placement=self.placement, classifier=compiled_classifier
        )

    @property
    def own_packages(self) -> tuple[str, ...]:
        """Installed packages whose lines count as the user's (``[tool.jaxport]
        own_packages``)."""
        return self.placement.own_packages

    @property
    def stats(self) -> LoweredStats:
        """Lowered-level cache hits and misses."""
        return self.lowered.stats

    @property
    def compile_stats(self) -> CompileStats:
        """Compiled-level cache hits and misses, and what each miss cost."""
        return self.compiled.stats

    def shown_location(self, location: SourceLocation) -> SourceLocation:
        """``location`` with its file as reports show it."""
        return self.placement.shown_location(location)

    def check(
        self,
        traced: Any,
        keyed: KeyParts,
        platforms: Sequence[str],
        *,
        present: Collection[str],
        run: Runner,
        fn: Callable[..., object],
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
        caller: SourceLocation | None = None,
    ) -> Examined:
        """A checked function's census on each of ``platforms``: ``traced``
        (``jax.stages.Traced`` or anything with its ``.jaxpr`` and
        ``.lower(lowering_platforms=...)``) lowered per platform, ``run`` on the platforms
        present between lowering and census, with the collectives the SPMD partitioner
        inserts into a partitioned program, its compiled census where ``compile`` covers the
        platform (``fn(*args, **kwargs)`` compiled), and its runtime share (measured where it
        ran and profiling is on). The platforms it runs or compiles are lowered anew, the
        others may come from the lowered cache. ``caller``: the check call, where kernels
        without a line of the user's go (:meth:`Placement.relative`)."""
        __tracebackhide__ = True  # a user's error (a classify hook's) shows their code
        return self._examine(
            traced, keyed, platforms, present=present, caller=caller, at_caller=False,
            run=run, fn=fn, args=args, kwargs=kwargs, keep_programs=True,
        )  # fmt: skip

    def audit(
        self,
        computation: Any,
        keyed: KeyParts,
        platforms: Sequence[str],
        *,
        present: Collection[str],
        caller: SourceLocation | None = None,
        at_caller: bool = False,
        source: SourceLocation | None = None,
        keep_programs: bool = True,
    ) -> Examined:
        """An audited computation's census on each of ``platforms`` (a recorded call: its
        ``.jaxpr`` and ``.lower(lowering_platforms=...)``): nothing runs, every platform may
        come from the lowered cache, the runtime share is the estimate. ``at_caller``: every
        site at ``caller`` (an eager op: see :meth:`Placement.relative`); ``source``: the
        computation's own line, where a site without a line is placed.

        ``keep_programs``: whether the programs lowered now go to the lowered cache at once;
        the audit keeps what it judged of them instead, one entry in place of one a platform
        (a new file in a new folder costs 0.2 to 0.6 ms on ext4, a part of a cold audit's
        census), and keeps them (``LoweredLevel.keep_programs``) only where it cannot keep
        that."""
        __tracebackhide__ = True  # a classify hook's error shows the user's conftest
        return self._examine(
            computation, keyed, platforms, present=present, caller=caller,
            at_caller=at_caller, run=None, fn=None, keep_programs=keep_programs, source=source,
        )  # fmt: skip

    def _examine(
        self,
        traced: Any,
        keyed: KeyParts,
        platforms: Sequence[str],
        *,
        present: Collection[str],
        caller: SourceLocation | None,
        at_caller: bool,
        run: Runner | None,
        fn: Callable[..., object] | None,
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
        keep_programs: bool,
        source: SourceLocation | None = None,
    ) -> Examined:
        """The shared path: lower, run (a check), partitioner's collectives, census, compiled
        level (a check), runtime share."""
        __tracebackhide__ = True
        # An audited computation has no function to compile again: only a platform whose
        # lowered module compiles as it is (tpu, through libtpu) compiles for it.
        compiles = tuple(
            p for p in self._compile.platforms if fn is not None or self._compiles_module(p)
        )
        cached = [p for p in platforms
                  if not (run is not None and p in present) and p not in compiles]  # fmt: skip
        found = self.lowered.lower(traced, keyed, platforms, present=present, cached=cached)
        results: dict[str, PlatformProbe] = {
            p: found.failures.get(p) or PlatformProbe(platform=p, present=p in present)
            for p in (*found.programs, *found.failures)
        }
        ran, inserted = self._run(traced, keyed, found, run, results)
        programs = {  # what the census and the compiled level read: with the partitioner's
            p: with_inserted(program, inserted or ()) if found.partitioned else program
            for p, program in found.programs.items()
        }
        unkept: dict[str, Program] = {}
        self._census(
            found, programs, results, present=present, caller=caller, at_caller=at_caller,
            unkept=None if keep_programs else unkept, source=source,
        )  # fmt: skip
        for platform in compiles:
            if platform in found.lowered:
                with self.stage(stage.compile_stage(platform)):
                    results[platform] = self.compiled.compiled(
                        results[platform], fn, found.lowered[platform], programs[platform],
                        tuple(args), kwargs or {}, ran.built.get(platform), tuple(present), keyed,
                        traced=traced, caller=caller, at_caller=at_caller, source=source,
                    )  # fmt: skip
        if self._compile.platforms:  # memory is a topic: say where no compiler planned it
            for platform, result in results.items():
                if result.memory is None:
                    reason = why_not_compiled(
                        platform, compile=self._compile.platforms, compilable=COMPILE_PLATFORMS,
                        lowered=result.census is not None, audited=fn is None,
                    )  # fmt: skip
                    results[platform] = replace(result, memory=not_compiled(platform, reason))
        for platform, result in results.items():
            with self.stage(stage.share_stage(platform)):
                share = runtime_share(
                    result, ran.executions.get(platform), profile=self._profile,
                    classifier=self._compiled_classifier,
                )  # fmt: skip
            if share is not None:
                results[platform] = replace(result, runtime_share=share)
        return Examined(
            results=results, executions=ran.executions, programs=programs, unkept=unkept
        )

    def _run(
        self,
        traced: Any,
        keyed: KeyParts,
        found: LoweredPrograms,
        run: Runner | None,
        results: dict[str, PlatformProbe],
    ) -> tuple[Run, tuple[OpSite, ...] | None]:
        """What ``run`` (a check's) did on the platforms present, marked in ``results``, and
        the collectives the SPMD partitioner inserts into a partitioned program (``None``
        for one that is not, or that does not compile here): recorded by an earlier run,
        else by the run's own compile, else by a compile for them alone, and kept."""
        inserted = self.lowered.recorded_partition(keyed) if found.partitioned else None
        ran = run(found, found.partitioned and inserted is None) if run is not None else Run()
        for platform in ran.executions:
            results[platform] = replace(results[platform], executed=True)
        for platform, error in ran.errors.items():
            results[platform] = replace(results[platform], execution_error=error)
        if found.partitioned and inserted is None:
            execution = ran.executions.get(default_platform())
            inserted = execution.inserted if execution is not None else None
            if inserted is None:
                inserted = self.lowered.partition(traced, found.lowered)
            if inserted is not None:
                self.lowered.record_partition(keyed, inserted)
        return ran, inserted

    def _compiles_module(self, platform: str) -> bool:
        """Whether ``platform`` compiles from its lowered module alone (no function to trace
        again): tpu, through libtpu's worker."""
        return platform == "tpu" and self._compile.tpu_compiler is not None

    def _census(
        self,
        found: LoweredPrograms,
        programs: Mapping[str, Program],
        results: dict[str, PlatformProbe],
        *,
        present: Collection[str],
        caller: SourceLocation | None = None,
        at_caller: bool = False,
        unkept: dict[str, Program] | None = None,
        source: SourceLocation | None = None,
    ) -> None:
        """Each platform of ``programs`` (``found``'s, with the collectives the SPMD
        partitioner inserted into a partitioned program) with its census in ``results``; the
        programs lowered now go to the cache, or into ``unkept`` (by key) where it is given.
        ``caller``: see :meth:`Placement.relative`."""
        __tracebackhide__ = True  # a classify hook's error shows the user's conftest

        for platform, program in programs.items():
            with self.stage(stage.census_stage(platform)):
                counted = self._census_of(
                    found, platform, program, present, caller, at_caller, unkept, source
                )
            results[platform] = replace(
                results[platform],
                census=counted.census,
                formats=counted.formats,
                lowering_warnings=counted.lowering_warnings,
            )

    def _census_of(
        self,
        found: LoweredPrograms,
        platform: str,
        program: Program,
        present: Collection[str],
        caller: SourceLocation | None,
        at_caller: bool,
        unkept: dict[str, Program] | None,
        source: SourceLocation | None = None,
    ) -> PlatformProbe:
        __tracebackhide__ = True
        key = found.keys.get(platform)
        if platform in found.fresh and unkept is not None and key is not None:
            unkept[key] = program
        elif platform in found.fresh:
            self.lowered.keep(key, program)
        census = self.placement.relative(
            take_census(
                program,
                platform,
                classifier=self._classifier,
                seconds=roofline(platform, self._compile),
                own=self.own_packages,
            ),
            caller,
            at_caller=at_caller,
            source=source,
        )
        formats = self.placement.formats(
            program, platform, caller=caller, at_caller=at_caller, source=source
        )
        return PlatformProbe(
            platform=platform,
            present=platform in present,
            census=census,
            formats=formats,
            lowering_warnings=program.warnings,
        )
