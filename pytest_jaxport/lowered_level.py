"""The lowered level of one traced computation: per platform its program and census.

Shared by ``jaxport.check`` (:mod:`pytest_jaxport.fixture`) and the suite audit
(:mod:`pytest_jaxport.audit`), so that a function checked by a test and the same computation
recorded by ``--jaxport-audit`` get the same census, the same layers, the same source lines
and the same lowered-cache entries.

A platform's program comes from the lowered-level cache when it was lowered before; platforms
not present here that miss the cache are lowered together in one multi-platform lowering (about
twice as fast as one by one), and whatever is left is lowered for one platform at a time. A
platform that fails to lower is a :class:`~pytest_jaxport.report.PlatformProbe` with its
``error``, never an exception. Host callbacks become inert placeholders for the platforms not
present (:func:`lowering.without_callbacks`), so every other op is still counted.

Two steps, so that a check can run the program in between: :meth:`LoweredLevel.lower` reads
or lowers each platform's program, :meth:`LoweredLevel.census` adds the collectives the SPMD
partitioner inserts (known once the program compiled here, :mod:`~pytest_jaxport.partitioner`),
caches what was lowered and takes each census. :meth:`LoweredLevel.take` does both.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_jaxport.cache import CompileSettings, FailedLowering, lowered_key, stable_text
from pytest_jaxport.census import Census, Classifier, OpSite, Program, SourceLocation, take_census
from pytest_jaxport.report import PlatformProbe

_PARTITIONER = "spmd-partitioner"
"""The lowered cache's "platform" for a program's partitioning record."""


@dataclass(slots=True)
class LoweredStats:
    """Lowered-level cache hits and misses (per test for checks, per session for the audit)."""

    hits: int = 0
    misses: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}


@dataclass(frozen=True, slots=True, kw_only=True)
class LoweredPrograms:
    """What :meth:`LoweredLevel.lower` found for one traced computation."""

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
class LoweredCensus:
    """What :meth:`LoweredLevel.take` found for one traced computation."""

    results: Mapping[str, PlatformProbe]
    """Per platform: its census, or why lowering failed."""
    lowered: Mapping[str, Any]
    """The lowerings made for one platform at a time (what a check compiles and runs)."""
    programs: Mapping[str, Program]
    """Per platform that lowered, its program as the census read it."""


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
            from pytest_jaxport import lowering

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


class LoweredLevel:
    """Lowers traced computations per platform and takes their census, through the cache."""

    def __init__(
        self,
        *,
        classifier: Classifier,
        rootdir: Path,
        compile_settings: CompileSettings,
        stats: LoweredStats,
        own_packages: tuple[str, ...] = (),
    ) -> None:
        self._classifier = classifier
        self._rootdir = rootdir
        self._compile = compile_settings
        self.stats = stats
        self.own_packages = own_packages
        """Installed packages whose lines count as the user's (``[tool.jaxport]
        own_packages``): a kernel is placed at its innermost frame outside other libraries."""

    def take(
        self,
        traced: Any,
        keyed: KeyParts,
        platforms: Sequence[str],
        *,
        present: Collection[str],
        cached: Collection[str],
        caller: SourceLocation | None = None,
    ) -> LoweredCensus:
        """Each of ``platforms``' census of ``traced`` (``jax.stages.Traced`` or anything with
        its ``.jaxpr`` and ``.lower(lowering_platforms=...)``): :meth:`lower`, then
        :meth:`census`. A program partitioned over several devices gets the collectives the
        SPMD partitioner inserts: those an earlier run recorded, else :meth:`partition`'s
        (recorded for the next run); nothing is run."""
        found = self.lower(traced, keyed, platforms, present=present, cached=cached)
        inserted = None
        if found.partitioned:
            inserted = self.recorded_partition(keyed)
            if inserted is None:
                inserted = self.partition(traced, found.lowered)
                if inserted is not None:
                    self.record_partition(keyed, inserted)
        results = self.census(found, present=present, caller=caller, inserted=inserted)
        return LoweredCensus(results=results, lowered=found.lowered, programs=found.programs)

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
        from pytest_jaxport import lowering

        failures: dict[str, PlatformProbe] = {}
        lowered_for: dict[str, Any] = {}
        programs: dict[str, Program] = {}
        keys: dict[str, str | None] = {}
        read: dict[str, Program] = {}
        known: dict[str, str] = {}  # platforms an earlier run failed to lower, and why
        for platform in platforms:
            if platform in cached:
                keys[platform] = self._key(keyed, platform)
                entry = self._cached_entry(keys[platform])
                if isinstance(entry, FailedLowering):
                    known[platform] = entry.error
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
        absent = lowering.without_callbacks(traced)
        together = lowering.lower_together(absent, missing) if len(missing) > 1 else None
        for platform in platforms:
            if platform in known:
                failures[platform] = failed_to_lower(platform, present, known[platform])
                continue
            try:
                program = read.get(platform) or shared.get(platform)
                if program is None and together is not None:
                    program = together.get(platform)
                if program is None:
                    lowered = lowering.lower(traced if platform in present else absent, platform)
                    program = lowering.read_program(lowered)
                    lowered_for[platform] = lowered
                lowering.refuse_unrunnable(program, platform)
            except lowering.LoweringFailure as e:
                failures[platform] = failed_to_lower(platform, present, str(e))
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
    ) -> dict[str, PlatformProbe]:
        """Per platform of ``found``, its census (with the collectives the SPMD partitioner
        ``inserted`` into a partitioned program), or why it did not lower; the programs
        lowered now go to the cache. ``caller``: see :meth:`relative`."""
        from pytest_jaxport.partitioner import with_inserted

        results: dict[str, PlatformProbe] = dict(found.failures)
        for platform, program in found.programs.items():
            if found.partitioned:
                program = with_inserted(program, inserted or ())
            if platform in found.fresh:
                self._cache_program(found.keys.get(platform), program)
            census = self.relative(
                take_census(
                    program,
                    platform,
                    classifier=self._classifier,
                    seconds=self.roofline(platform),
                    own=self.own_packages,
                ),
                caller,
            )
            results[platform] = PlatformProbe(
                platform=platform, present=platform in present, census=census
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
        from pytest_jaxport import lowering

        default = lowering.default_platform()
        try:
            lowered = (lowered_for or {}).get(default) or lowering.lower(traced, default)
            _, inserted = lowering.compile_partitioned(lowered)
        except Exception:  # it does not compile here: its own collectives are all it shows
            return None
        return inserted

    def recorded_partition(self, keyed: KeyParts) -> tuple[OpSite, ...] | None:
        """The inserted collectives an earlier run recorded for this program, if cached."""
        from pytest_jaxport.partitioner import recorded_inserted

        key = self._key(keyed, _PARTITIONER)
        cache = self._compile.lowered_cache
        found = cache.get(key) if key is not None and cache is not None else None
        return None if found is None else recorded_inserted(found)

    def record_partition(self, keyed: KeyParts, inserted: Sequence[OpSite]) -> None:
        """Keep ``inserted`` (the collectives partitioning added) for the next run."""
        from pytest_jaxport.partitioner import partition_record

        self._cache_program(self._key(keyed, _PARTITIONER), partition_record(inserted))

    # -- the lowered-level cache ----------------------------------------------------------------

    def _key(self, keyed: KeyParts, platform: str) -> str | None:
        """The cache key of ``platform``'s lowering; ``None`` when the cache is off or the
        jaxpr cannot be keyed (then it is lowered as without a cache)."""
        from pytest_jaxport import lowering

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

    def _cache_failure(self, key: str | None, probe: PlatformProbe, error: str) -> None:
        """Keep a failure to lower that this program meets wherever it is lowered with these
        versions; not one that depends on this machine (JAX asked for a GPU, a package is
        missing), which may lower elsewhere or after an install."""
        from pytest_jaxport.jax_adapters import missing_package

        if probe.needs_hardware is None and missing_package(error) is None:
            self._cache_program(key, FailedLowering(error=error))

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
        from pytest_jaxport.cost import kernel_seconds, peak_for

        peak = peak_for(
            platform, target_config=self._compile.target_config, target=self._compile.target
        )

        def seconds(site: OpSite, layer: str) -> float:
            return kernel_seconds(site, layer, peak)

        return seconds

    def relative(self, census: Census, caller: SourceLocation | None = None) -> Census:
        """``census`` with its kernels' files as reports show them (:func:`shown_file`).
        Where no kernel has a location at all (jax 0.9 lowers a jitted library function
        checked directly, such as ``jnp.linalg.solve``, with name-only locations), they are
        the ``caller``'s: the check call, as other releases' tracebacks say."""
        if caller is not None and not any(k.location for k in census.kernels):
            return replace(
                census,
                kernels=tuple(replace(k, location=caller) for k in census.kernels),
            )
        kernels = tuple(
            k if k.location is None else replace(k, location=self.shown_location(k.location))
            for k in census.kernels
        )
        return replace(census, kernels=kernels)

    def shown_location(self, location: SourceLocation) -> SourceLocation:
        """``location`` with its file as reports show it."""
        file = shown_file(location.file, self._rootdir)
        return location if file is None else SourceLocation(file=file, line=location.line)


def failed_to_lower(platform: str, present: Collection[str], error: str) -> PlatformProbe:
    """A platform JAX did not lower for: a finding about the code, or, where JAX asked for
    hardware this machine lacks, "not lowerable here" (``needs_hardware``)."""
    from pytest_jaxport.jax_adapters import jax_release, needs_hardware

    hardware = needs_hardware(error) if platform not in present else None
    if hardware is not None:
        error = f"not lowerable here on jax {jax_release()}: needs a {hardware} ({error})"
    return PlatformProbe(
        platform=platform,
        present=platform in present,
        error=error,
        needs_hardware=hardware,
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
