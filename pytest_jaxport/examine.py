"""One path for every computation: lower it per platform, add the collectives the SPMD
partitioner inserts, take each census, compile it where asked, estimate or measure where its
time goes (:class:`Examiner`). A checked function (:mod:`pytest_jaxport.fixture`) and an
audited computation (:mod:`pytest_jaxport.audit`) both go down it; a check also runs the
program on the platforms present, between lowering and census (``run``).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pytest_jaxport._jax import lowering
from pytest_jaxport._jax.adapters import jax_release, missing_package, needs_hardware
from pytest_jaxport._jax.callbacks import INERT_TARGET, inert
from pytest_jaxport.cache import (
    CompileSettings,
    FailedLowering,
    cache_key,
    lowered_key,
    source_fingerprint,
)
from pytest_jaxport.model.census import (
    Census,
    Classifier,
    Kernel,
    OpSite,
    Program,
    SourceLocation,
    is_library_file,
    take_census,
)
from pytest_jaxport.model.cost import (
    RuntimeShare,
    estimated_share,
    kernel_seconds,
    measured_share,
    peak_for,
)
from pytest_jaxport.model.formats import DEFAULT_DEVICES, Device, FormatCensus, take_format_census
from pytest_jaxport.model.hlo import instruction_sites, parse_compiled_hlo
from pytest_jaxport.model.identity import stable_text
from pytest_jaxport.model.partitioner import (
    partition_record,
    recorded_inserted,
    with_inserted,
)
from pytest_jaxport.model.probe import PlatformProbe
from pytest_jaxport.model.targets import Classification, classify

_PARTITIONER = "spmd-partitioner"
"""The lowered cache's "platform" for a program's partitioning record."""

NO_VENDOR_OPTIONS: Mapping[str, object] = {"xla_gpu_experimental_disable_binary_libraries": True}
"""XLA's switch against NVIDIA's binary libraries (the what-if). With jaxlib 0.10.2 it only
turns cuDNN convolutions into XLA kernels; gemms, solvers, FFTs and collectives stay."""


@dataclass(slots=True)
class LoweredStats:
    """Lowered-level cache hits and misses (per test for checks, per session for the audit)."""

    hits: int = 0
    misses: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}


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
class LoweredPrograms:
    """What :meth:`Examiner.lower` found for one traced computation."""

    programs: Mapping[str, Program]
    """Per platform that lowered, its program as read (without inserted collectives)."""
    failures: Mapping[str, PlatformProbe]
    """Per platform that did not lower, why."""
    lowered: Mapping[str, Any]
    """The lowerings made for one platform at a time (what a check compiles and runs)."""
    fresh: frozenset[str] = frozenset()
    """Platforms lowered now (not read from the cache): cached once their census is taken."""
    keys: Mapping[str, str | None] = field(default_factory=dict)
    """Per cached platform, its lowered-cache key."""

    @property
    def partitioned(self) -> bool:
        """Whether the program runs on several devices (the partitioner inserts collectives)."""
        return any(program.partitions > 1 for program in self.programs.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """What running a check's lowerings on the platforms present did."""

    executions: Mapping[str, lowering.Execution] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    """Per platform that failed to compile or run, why."""
    built: Mapping[str, Any] = field(default_factory=dict)
    """Per platform, the executable numerics built, or the failure that says compiling failed
    (so the compiled level does not try a second time)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Compiled:
    census: Census | None = None
    formats: FormatCensus | None = None
    error: str | None = None
    deviceless: bool = False
    target: str | None = None


Runner = Callable[[LoweredPrograms, bool], Run]
"""``run(found, record_partition)``: run ``found``'s lowerings on the platforms present,
recording the partitioner's collectives when asked (a check's side of :meth:`examine`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Examined:
    """What :meth:`Examiner.examine` found for one computation."""

    results: Mapping[str, PlatformProbe]
    """Per platform: its census, compiled census and runtime share, or why it failed."""
    executions: Mapping[str, lowering.Execution]
    """Per platform that ran, its outputs (a check compares them)."""
    programs: Mapping[str, Program]
    """Per platform that lowered, its program as the census read it."""
    unkept: Mapping[str, Program] = field(default_factory=dict)
    """The programs lowered now that ``keep_programs=False`` left out of the lowered cache,
    by key: :meth:`Examiner.keep_programs` keeps them."""


class KeyParts:
    """The lowered cache key's jaxpr-derived parts, computed once per computation, on first
    use (``None`` when the jaxpr cannot be keyed: then it is lowered as without a cache): the
    jaxpr's text with object addresses blanked, each equation's source line, JAX's config.

    The arguments' shardings (``args``/``kwargs``, where given) are part of the jaxpr's: they
    decide which collectives the SPMD partitioner inserts, and a jaxpr does not show them."""

    __slots__ = ("_arguments", "_done", "_own", "_parts", "_traced")

    def __init__(
        self,
        traced: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        own: tuple[str, ...] = (),
    ) -> None:
        self._traced = traced
        self._arguments = (tuple(args), dict(kwargs or {}))
        self._own = own
        self._parts: tuple[str, str, str] | None = None
        self._done = False

    def get(self) -> tuple[str, str, str] | None:
        if not self._done:
            self._done = True

            try:
                jaxpr, sources = lowering.census_key_parts(self._traced, self._own)
                # Object addresses (a host callback's function, printed in its parameters)
                # and the order of a frozenset's elements differ run to run and process to
                # process; nothing lowered depends on them.
                jaxpr = stable_text(jaxpr)
                if any(self._arguments):
                    jaxpr += "\n" + lowering.sharding_text(*self._arguments)
                self._parts = (jaxpr, sources, lowering.lowering_settings())
            except Exception:  # an unkeyable jaxpr is lowered every time, never an error
                self._parts = None
        return self._parts


class Examiner:
    """Lowers traced computations per platform and takes their census, through the caches."""

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
    ) -> None:
        self._classifier = classifier
        self._compiled_classifier = compiled_classifier
        self._rootdir = rootdir
        self._compile = compile_settings
        self._profile = profile
        self.stats = stats if stats is not None else LoweredStats()
        self.compile_stats = CompileStats()
        self.own_packages = own_packages
        """Installed packages whose lines count as the user's (``[tool.jaxport]
        own_packages``): a kernel is placed at its innermost frame outside other libraries."""

    def examine(
        self,
        traced: Any,
        keyed: KeyParts,
        platforms: Sequence[str],
        *,
        present: Collection[str],
        caller: SourceLocation | None = None,
        at_caller: bool = False,
        run: Runner | None = None,
        fn: Callable[..., Any] | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        keep_programs: bool = True,
    ) -> Examined:
        """Each of ``platforms``' census of ``traced`` (``jax.stages.Traced`` or anything with
        its ``.jaxpr`` and ``.lower(lowering_platforms=...)``), with the collectives the SPMD
        partitioner inserts into a partitioned program (recorded by an earlier run, by ``run``
        on the default platform, or compiled here once), its compiled census where
        ``compile`` covers the platform and ``fn`` is given (a check), and its runtime share.
        ``at_caller``: every site at ``caller`` (an eager op: see :meth:`relative`).

        ``run`` (a check's): run the lowerings on the platforms present, between lowering and
        census. Without it (the audit) every platform's program may come from the lowered
        cache and nothing runs. ``caller``: see :meth:`relative`.

        ``keep_programs``: whether the programs lowered now go to the lowered cache at once;
        the audit keeps what it judged of them instead, one entry in place of one a platform
        (a new file costs about 0.6 ms on ext4: a fifth of a cold audit's census), and keeps
        them (:meth:`keep_programs`) only where it cannot keep that.
        """
        __tracebackhide__ = True  # a user's error (a classify hook's) shows their code
        compiles = self._compile.platforms if fn is not None else ()
        cached = [p for p in platforms
                  if not (run is not None and p in present) and p not in compiles]  # fmt: skip
        found = self.lower(traced, keyed, platforms, present=present, cached=cached)
        results: dict[str, PlatformProbe] = {
            p: found.failures.get(p) or PlatformProbe(platform=p, present=p in present)
            for p in (*found.programs, *found.failures)
        }
        inserted = self.recorded_partition(keyed) if found.partitioned else None
        ran = run(found, found.partitioned and inserted is None) if run is not None else Run()
        for platform in ran.executions:
            results[platform] = replace(results[platform], executed=True)
        for platform, error in ran.errors.items():
            results[platform] = replace(results[platform], execution_error=error)
        if found.partitioned and inserted is None:
            execution = ran.executions.get(lowering.default_platform())
            inserted = execution.inserted if execution is not None else None
            if inserted is None:
                inserted = self.partition(traced, found.lowered)
            if inserted is not None:
                self.record_partition(keyed, inserted)
        unkept: dict[str, Program] = {}
        censuses = self.census(
            found,
            present=present,
            caller=caller,
            inserted=inserted,
            at_caller=at_caller,
            unkept=None if keep_programs else unkept,
        )
        for platform, counted in censuses.items():
            if counted.census is not None:
                results[platform] = replace(
                    results[platform],
                    census=counted.census,
                    formats=counted.formats,
                    lowering_warnings=counted.lowering_warnings,
                )
        programs = {  # what the compiled level keys on: with the partitioner's collectives
            p: with_inserted(program, inserted or ()) if found.partitioned else program
            for p, program in found.programs.items()
        }
        for platform in compiles:
            if fn is not None and platform in found.lowered:
                results[platform] = self.compiled(
                    results[platform], fn, found.lowered[platform], programs[platform], tuple(args),
                    kwargs or {}, ran.built.get(platform), tuple(present), keyed,
                )  # fmt: skip
        for platform, result in results.items():
            share = self.runtime_share(result, ran.executions.get(platform))
            if share is not None:
                results[platform] = replace(result, runtime_share=share)
        return Examined(
            results=results, executions=ran.executions, programs=programs, unkept=unkept
        )

    def lower(
        self,
        traced: Any,
        keyed: KeyParts,
        platforms: Sequence[str],
        *,
        present: Collection[str],
        cached: Collection[str],
    ) -> LoweredPrograms:
        """Each of ``platforms``' program of ``traced``, or why it did not lower.

        ``cached``: the platforms whose program may come from (and go to) the lowered-level
        cache; a check leaves out those it runs or compiles, which need the lowering itself.
        """

        failures: dict[str, PlatformProbe] = {}
        lowered_for: dict[str, Any] = {}
        programs: dict[str, Program] = {}
        keys: dict[str, str | None] = {}
        read: dict[str, Program] = {}
        known: dict[str, FailedLowering] = {}  # platforms an earlier run failed to lower
        for platform in platforms:
            if platform in cached:
                keys[platform] = self._key(keyed, platform)
                entry = self._cached_entry(keys[platform])
                if isinstance(entry, FailedLowering):
                    known[platform] = entry
                elif entry is not None:
                    read[platform] = entry
        missing = [p for p in keys if p not in read and p not in known and p not in present]
        # A program of ops that lower alike everywhere (an eager `add`, a reshape) is lowered
        # once, for the platform present here (JAX's own lowering where it just ran), and
        # that program is every other platform's too.
        shared: dict[str, Program] = {}
        here = next((p for p in platforms if p in present), None)
        if (
            missing
            and here is not None
            and lowering.same_on_every_platform(traced, (*missing, here))
        ):
            try:
                program = read.get(here)
                if program is None:
                    lowered_for[here] = lowering.lower(traced, here)
                    program = lowering.read_program(lowered_for[here])
                shared = {p: program for p in (*missing, here)}
                missing = []
            except lowering.LoweringFailure:
                lowered_for.pop(here, None)  # lowered below, where its failure is reported
        # Host callbacks lower only for a platform present here; for the others they become
        # inert placeholders (counted in meta), so every other op is still counted. Whether
        # a program has any is known only once lowered (a custom primitive binds its own).
        absent = inert(traced)
        # A platform present here is read from JAX's own lowering, with the real callbacks:
        # where it just ran the call (the audit) that lowering is in JAX's cache; joining it
        # to the others' would lower it again (a PRNG op: 52 ms for four, 28 for three).
        # What JAX warns while lowering for the absent ones (together, or each alone where
        # that fails) is kept with each of their programs (lowering.warnings_kept): the
        # lowering is ours, not the test's, and a warm run reads it from the cache as well.
        heard: list[str] = []
        with lowering.warnings_kept(heard):
            together = lowering.lower_together(absent, missing) if len(missing) > 1 else None
        for platform in platforms:
            if platform in known:
                failures[platform] = failed_to_lower(
                    platform, present, known[platform].error, known[platform].warnings
                )
                continue
            warned = list(heard) if platform in missing else []
            try:
                program = read.get(platform) or shared.get(platform)
                if program is None and together is not None:
                    program = together.get(platform)
                if program is None and platform in present:
                    lowered = lowering.lower(traced, platform)
                    program = lowering.read_program(lowered)
                    lowered_for[platform] = lowered
                elif program is None:
                    with lowering.warnings_kept(warned):
                        lowered = lowering.lower(absent, platform)
                    program = lowering.read_program(lowered)
                    lowered_for[platform] = lowered
                if warned:
                    program = replace(program, warnings=tuple(warned))
                lowering.refuse_unrunnable(program, platform)
            except lowering.LoweringFailure as e:
                failures[platform] = failed_to_lower(platform, present, str(e), tuple(warned))
                lowered_for.pop(platform, None)
                if platform not in read:
                    self._cache_failure(keys.get(platform), failures[platform], str(e))
                continue
            programs[platform] = program
        return LoweredPrograms(
            programs=programs,
            failures=failures,
            lowered=lowered_for,
            fresh=frozenset(p for p in programs if p not in read),
            keys=keys,
        )

    def census(
        self,
        found: LoweredPrograms,
        *,
        present: Collection[str],
        caller: SourceLocation | None = None,
        inserted: Sequence[OpSite] | None = None,
        at_caller: bool = False,
        unkept: dict[str, Program] | None = None,
    ) -> dict[str, PlatformProbe]:
        """Per platform of ``found``, its census (with the collectives the SPMD partitioner
        ``inserted`` into a partitioned program), or why it did not lower; the programs
        lowered now go to the cache, or into ``unkept`` (by key) where it is given.
        ``caller``: see :meth:`relative`."""
        __tracebackhide__ = True  # a classify hook's error shows the user's conftest

        results: dict[str, PlatformProbe] = dict(found.failures)
        for platform, program in found.programs.items():
            if found.partitioned:
                program = with_inserted(program, inserted or ())
            key = found.keys.get(platform)
            if platform in found.fresh and unkept is not None and key is not None:
                unkept[key] = program
            elif platform in found.fresh:
                self._cache_program(key, program)
            census = self.relative(
                take_census(
                    program,
                    platform,
                    classifier=self._classifier,
                    seconds=self.roofline(platform),
                    own=self.own_packages,
                ),
                caller,
                at_caller=at_caller,
            )
            results[platform] = PlatformProbe(
                platform=platform,
                present=platform in present,
                census=census,
                formats=self.formats(program, platform, caller=caller, at_caller=at_caller),
                lowering_warnings=program.warnings,
            )
        return {p: results[p] for p in (*found.programs, *found.failures) if p in results}

    # -- the partitioner's record ---------------------------------------------------------------

    def partition(
        self, traced: Any, lowered_for: Mapping[str, Any] | None = None
    ) -> tuple[OpSite, ...] | None:
        """The collectives the SPMD partitioner inserts into ``traced``'s program: compiled
        (not run) for the platform present here, from its lowering in ``lowered_for`` when
        there is one, with XLA recording the module before and after partitioning
        (:func:`lowering.compile_partitioned`); ``None`` when it does not compile here."""

        default = lowering.default_platform()
        try:
            lowered = (lowered_for or {}).get(default) or lowering.lower(traced, default)
            _, inserted = lowering.compile_partitioned(lowered)
        except Exception:  # it does not compile here: its own collectives are all it shows
            return None
        return inserted

    def recorded_partition(self, keyed: KeyParts) -> tuple[OpSite, ...] | None:
        """The inserted collectives an earlier run recorded for this program, if cached."""

        key = self._key(keyed, _PARTITIONER)
        cache = self._compile.lowered_cache
        found = cache.get(key) if key is not None and cache is not None else None
        return None if found is None else recorded_inserted(found)

    def record_partition(self, keyed: KeyParts, inserted: Sequence[OpSite]) -> None:
        """Keep ``inserted`` (the collectives partitioning added) for the next run."""

        self._cache_program(self._key(keyed, _PARTITIONER), partition_record(inserted))

    # -- the lowered-level cache ----------------------------------------------------------------

    def _key(self, keyed: KeyParts, platform: str) -> str | None:
        """The cache key of ``platform``'s lowering; ``None`` when the cache is off or the
        jaxpr cannot be keyed (then it is lowered as without a cache)."""

        if self._compile.lowered_cache is None:
            return None
        parts = keyed.get()
        if parts is None:
            return None
        jaxpr, sources, settings = parts
        if platform == "cuda":  # the GPU a trace describes where JAX asks (Pallas, jax 0.11+)
            settings += f"\ndescribed GPU: {self._compile.gpu_kind}"
        return lowered_key(
            jaxpr=jaxpr,
            sources=sources,
            platform=platform,
            versions=lowering.versions(),
            settings=settings,
        )

    def judged_key(self, keyed: KeyParts, judging: str) -> str | None:
        """The key of a census as judged (:meth:`judged`): the program's (its jaxpr, source
        lines, versions and JAX's settings) and ``judging``'s, which must cover everything
        else that decides it (``cache.judged_by``, the platforms, the call's signature)."""
        return self._key(keyed, f"judged:{judging}")

    def judged(self, key: str | None, lookups: int) -> dict[str, Any] | None:
        """The census an earlier run judged and kept under ``key`` (JSON data), counted as the
        ``lookups`` lowered-cache hits it replaces; ``None`` when there is none."""
        cache = self._compile.lowered_cache
        found = cache.judged(key) if key is not None and cache is not None else None
        if found is not None:
            self.stats.hits += lookups
        return found

    def keep_judged(self, key: str | None, judged: Mapping[str, Any]) -> None:
        cache = self._compile.lowered_cache
        if key is not None and cache is not None:
            cache.put_judged(key, judged)

    @staticmethod
    def keepable(examined: Examined) -> bool:
        """Whether a census means the same wherever these versions run: not where a platform
        failed for want of this machine's hardware or packages, nor a partitioned program
        (its collectives depend on whether it compiled here)."""
        return all(
            r.needs_hardware is None and (r.error is None or missing_package(r.error) is None)
            for r in examined.results.values()
        ) and all(p.partitions <= 1 for p in examined.programs.values())

    def _cache_failure(self, key: str | None, probe: PlatformProbe, error: str) -> None:
        """Keep a failure to lower that this program meets wherever it is lowered with these
        versions; not one that depends on this machine (JAX asked for a GPU, a package is
        missing), which may lower elsewhere or after an install."""
        if probe.needs_hardware is None and missing_package(error) is None:
            self._cache_program(key, FailedLowering(error=error, warnings=probe.lowering_warnings))

    def keep_programs(self, examined: Examined) -> None:
        """Keep the programs ``examine(keep_programs=False)`` lowered and left out."""
        for key, program in examined.unkept.items():
            self._cache_program(key, program)

    def _cache_program(self, key: str | None, program: Program | FailedLowering | None) -> None:
        if key is not None and program is not None and self._compile.lowered_cache is not None:
            self._compile.lowered_cache.put(key, program)

    def _cached_entry(self, key: str | None) -> Program | FailedLowering | None:
        """The program (or the failure to lower) an earlier run kept under ``key``."""
        cache = self._compile.lowered_cache
        if key is None or cache is None:
            return None
        entry = cache.entry(key)
        if entry is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return entry

    # -- what a census shows --------------------------------------------------------------------

    def roofline(self, platform: str) -> Callable[[OpSite, str], float]:
        """An op's estimated seconds on ``platform`` (``cost.kernel_seconds``; the configured
        GPU's peaks for cuda)."""

        peak = peak_for(
            platform, target_config=self._compile.target_config, target=self._compile.target
        )

        def seconds(site: OpSite, layer: str) -> float:
            return kernel_seconds(site, layer, peak)

        return seconds

    def relative(
        self, census: Census, caller: SourceLocation | None = None, *, at_caller: bool = False
    ) -> Census:
        """``census`` with its kernels' files as reports show them (:func:`shown_file`).
        Where no kernel has a location at all (jax 0.9 lowers a jitted library function
        checked directly, such as ``jnp.linalg.solve``, with name-only locations), they are
        the ``caller``'s: the check call, as other releases' tracebacks say. With
        ``at_caller``, every kernel is the ``caller``'s: an op executed eagerly belongs to
        the call that ran it, whereas the lines of its program can be those of an earlier
        trace JAX reused (jax 0.12 reuses a jaxpr traced inside a jit for the same op called
        eagerly later), which would depend on what the process ran before. Only a kernel
        inside an installed package (one of ``own_packages``) keeps its line. Without it, a
        kernel whose location holds no frame of the user's code (only a library's lines) is
        the ``caller``'s too."""
        if caller is not None and not at_caller and not any(k.location for k in census.kernels):
            at_caller = True
        counts: dict[Kernel, int] = {}  # kernels placed at one line add up
        for k in census.kernels:
            key = replace(k, location=self._placed(k.location, caller, at_caller), count=0)
            counts[key] = counts.get(key, 0) + k.count
        return replace(census, kernels=tuple(replace(k, count=n) for k, n in counts.items()))

    def _placed(
        self, location: SourceLocation | None, caller: SourceLocation | None, at_caller: bool
    ) -> SourceLocation | None:
        """``location`` as reports show it, or the ``caller``'s (see :meth:`relative`): where
        it is a library's line rather than the user's or an own package's, and with
        ``at_caller`` wherever it is not inside an own package."""
        if location is None:
            return caller if at_caller else None
        if caller is not None and (
            is_library_file(location.file, self.own_packages)
            or (at_caller and not is_library_file(location.file))
        ):
            return caller
        return self.shown_location(location)

    def device(self, platform: str) -> Device:
        """The device ``platform``'s formats-and-layout findings are judged for."""
        found = self._compile.devices.get(platform) or DEFAULT_DEVICES.get(platform)
        return found or Device(platform=platform)

    def formats(
        self,
        program: Program,
        platform: str,
        *,
        level: Literal["lowered", "compiled"] = "lowered",
        caller: SourceLocation | None = None,
        at_caller: bool = False,
    ) -> FormatCensus:
        """The formats-and-layout findings of ``program`` on ``platform``'s device, judged on
        every read like classification (the caches keep programs, never findings), their
        files as reports show them; where no finding has a line, or with ``at_caller`` (see
        :meth:`relative`), the ``caller``'s."""
        found = take_format_census(
            program, platform, device=self.device(platform), level=level, own=self.own_packages
        )
        if caller is not None and not at_caller and not any(f.location for f in found.findings):
            at_caller = True
        relocated = found.relocated(lambda at: self._placed(at, caller, at_caller))
        lines = [(f.kind, f.rule, f.level, f.location) for f in relocated.findings]
        if len(set(lines)) < len(lines):  # findings placed at one line add up
            relocated += replace(relocated, findings=(), formats={}, tiled_bytes=0)
        return relocated

    def shown_location(self, location: SourceLocation) -> SourceLocation:
        """``location`` with its file as reports show it."""
        file = shown_file(location.file, self._rootdir)
        return location if file is None else SourceLocation(file=file, line=location.line)

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
            seconds=self.roofline(platform),
            own=self.own_packages,
        )
        formats = self.formats(program, platform, level="compiled")
        return _Compiled(census=self.relative(census), formats=formats)

    def runtime_share(self, result: PlatformProbe, execution: Any) -> RuntimeShare | None:
        """Measured where the platform ran and profiling is on, else the estimate: from the
        compiled census where there is one (XLA's kernels as they run), else the lowered.
        A program with host callbacks is never profiled: profiling runs it again, and its
        callbacks (a print, an ``io_callback``'s side effect) with it."""

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

        times = lowering.instruction_times(execution)
        sites = instruction_sites(lowering.compiled_text(execution.compiled))
        classifier = self._compiled_classifier

        def classify_op(op: str, target: str | None) -> Classification:
            if classifier is not None:
                return classifier(platform, op, target)
            return classify(platform, op, target, level="compiled")

        return measured_share(times, sites, classify_op)

    # -- the compiled level -------------------------------------------------------------------


def failed_to_lower(
    platform: str, present: Collection[str], error: str, warnings: tuple[str, ...] = ()
) -> PlatformProbe:
    """A platform JAX did not lower for: a finding about the code, or, where JAX asked for
    hardware this machine lacks, "not lowerable here" (``needs_hardware``); with what JAX
    warned while trying (``warnings``)."""

    hardware = needs_hardware(error) if platform not in present else None
    if hardware is not None:
        error = f"not lowerable here on jax {jax_release()}: needs a {hardware} ({error})"
    return PlatformProbe(
        platform=platform,
        present=platform in present,
        error=error,
        needs_hardware=hardware,
        lowering_warnings=warnings,
    )


_PACKAGE_FOLDERS = ("/site-packages/", "/dist-packages/")


@functools.lru_cache(maxsize=4096)
def shown_file(file: str, rootdir: Path) -> str | None:
    """``file`` as a report shows it: a file of an installed package relative to its
    ``site-packages`` (``flax/nnx/nn/linear.py``, wherever the virtual env is, even inside
    ``rootdir``), any other file relative to ``rootdir``; ``None`` when it is neither (shown
    as it is). Resolving paths is slow: cached.

    >>> shown_file("/venv/lib/python3.11/site-packages/flax/nnx/nn/linear.py", Path("/src"))
    'flax/nnx/nn/linear.py'
    """
    posix = file.replace("\\", "/")
    for folder in _PACKAGE_FOLDERS:
        at = posix.rfind(folder)
        if at >= 0 and posix[at + len(folder) :]:
            return posix[at + len(folder) :]
    try:
        return Path(file).resolve().relative_to(rootdir).as_posix()
    except (ValueError, OSError):
        return None
