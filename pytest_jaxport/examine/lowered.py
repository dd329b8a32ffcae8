"""The lowered level: each platform's program of a traced computation, through the lowered
cache (:class:`LoweredLevel`), and the SPMD partitioner's record.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_jaxport._jax import execution, keyparts, lowering, stablehlo
from pytest_jaxport._jax.adapters import jax_release, missing_package, needs_hardware
from pytest_jaxport._jax.callbacks import inert
from pytest_jaxport._jax.devices import default_platform, versions
from pytest_jaxport.cache import CompileSettings, FailedLowering, lowered_key
from pytest_jaxport.examine import stages as stage
from pytest_jaxport.examine.stages import Stages, unobserved
from pytest_jaxport.model.census import OpSite, Program
from pytest_jaxport.model.identity import stable_text
from pytest_jaxport.model.partitioner import partition_record, recorded_inserted
from pytest_jaxport.model.probe import PlatformProbe

_NOTHING = nullcontext()

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
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
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
                jaxpr, sources = keyparts.census_key_parts(self._traced, self._own)
                # Object addresses (a host callback's function, printed in its parameters)
                # and the order of a frozenset's elements differ run to run and process to
                # process; nothing lowered depends on them.
                jaxpr = stable_text(jaxpr)
                if any(self._arguments):
                    jaxpr += "\n" + keyparts.sharding_text(*self._arguments)
                self._parts = (jaxpr, sources, keyparts.lowering_settings())
            except Exception:  # an unkeyable jaxpr is lowered every time, never an error
                self._parts = None
        return self._parts


class LoweredLevel:
    """Lowers traced computations per platform, through the lowered cache, and keeps what the
    cache holds: programs, failures to lower, partitioning records and judged censuses."""

    def __init__(
        self,
        compile_settings: CompileSettings,
        *,
        stats: LoweredStats | None = None,
        stages: Stages = unobserved,
    ) -> None:
        self._compile = compile_settings
        self.stats = stats if stats is not None else LoweredStats()
        self._stages = stages

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

        keys, read, known = self._read_cache(keyed, platforms, cached)
        missing = [p for p in keys if p not in read and p not in known and p not in present]
        lowered_for: dict[str, Any] = {}
        shared = self._lowered_once(traced, platforms, missing, present, read, lowered_for)
        if shared:
            missing = []
        # Host callbacks lower only for a platform present here; for the others they become
        # inert placeholders (counted in meta), so every other op is still counted. Whether
        # a program has any is known only once lowered (a custom primitive binds its own).
        absent = inert(traced)
        heard: list[str] = []
        together = self._lowered_together(absent, missing, heard)
        failures: dict[str, PlatformProbe] = {}
        programs: dict[str, Program] = {}
        for platform in platforms:
            if platform in known:
                failures[platform] = failed_to_lower(
                    platform, present, known[platform].error, known[platform].warnings
                )
                continue
            warned = list(heard) if platform in missing and together is not None else []
            program = read.get(platform) or shared.get(platform)
            if program is None and together is not None:
                program = together.get(platform)
            try:
                if program is None:
                    lowered, program = self._lowered_alone(
                        traced if platform in present else absent, platform, present, warned
                    )
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

    def _read_cache(
        self, keyed: KeyParts, platforms: Sequence[str], cached: Collection[str]
    ) -> tuple[dict[str, str | None], dict[str, Program], dict[str, FailedLowering]]:
        """Per platform in ``cached``: its key, and what an earlier run kept under it (a
        program, in the second mapping, or a failure to lower, in the third)."""
        keys: dict[str, str | None] = {}
        read: dict[str, Program] = {}
        known: dict[str, FailedLowering] = {}  # platforms an earlier run failed to lower
        with self._stages(stage.LOWERED_CACHE) if cached else _NOTHING:
            for platform in platforms:
                if platform in cached:
                    keys[platform] = self._key(keyed, platform)
                    entry = self._cached_entry(keys[platform])
                    if isinstance(entry, FailedLowering):
                        known[platform] = entry
                    elif entry is not None:
                        read[platform] = entry
        return keys, read, known

    def _lowered_once(
        self,
        traced: Any,
        platforms: Sequence[str],
        missing: Sequence[str],
        present: Collection[str],
        read: Mapping[str, Program],
        lowered_for: dict[str, Any],
    ) -> dict[str, Program]:
        """Every ``missing`` platform's program and that of the first present, where the
        program's ops lower alike everywhere (an eager ``add``, a reshape): lowered once, for
        the platform present here (JAX's own lowering where it just ran), or read; ``{}``
        where they may not (or that lowering fails: it is lowered again, and reported, with
        the others). The lowering made goes into ``lowered_for``."""
        here = next((p for p in platforms if p in present), None)
        if (
            not missing
            or here is None
            or not lowering.same_on_every_platform(traced, (*missing, here))
        ):
            return {}
        try:
            program = read.get(here)
            if program is None:
                with self._stages(stage.lower_stage(here)):
                    lowered_for[here] = lowering.lower(traced, here)
                    program = stablehlo.read_program(lowered_for[here])
        except lowering.LoweringFailure:
            lowered_for.pop(here, None)  # lowered below, where its failure is reported
            return {}
        return {p: program for p in (*missing, here)}

    def _lowered_together(
        self, absent: Any, missing: Sequence[str], heard: list[str]
    ) -> dict[str, Program] | None:
        """The programs of the platforms ``missing`` (not present here) from one lowering for
        all of them, or ``None`` where there are fewer than two or JAX cannot lower them
        together (then each is lowered alone). What JAX warns meanwhile goes into ``heard``.

        A platform present here is read from JAX's own lowering, with the real callbacks:
        where it just ran the call (the audit) that lowering is in JAX's cache; joining it to
        the others' would lower it again (a PRNG op: 52 ms for four, 28 for three). What JAX
        warns while lowering for the absent ones (together, or each alone where that fails)
        is kept with each of their programs (:func:`lowering.warnings_kept`): the lowering is
        ours, not the test's, and a warm run reads it from the cache as well. A joint
        lowering that failed warned about no program: each platform lowered alone keeps only
        what its own lowering said (a Pallas kernel on the tpu branch lowered together for
        cuda warns of Mosaic GPU; alone, it is never lowered for cuda)."""
        if len(missing) <= 1:
            return None
        with self._stages(stage.lower_stage(*missing)), lowering.warnings_kept(heard):
            return lowering.lower_together(absent, missing)

    def _lowered_alone(
        self, traced: Any, platform: str, present: Collection[str], warned: list[str]
    ) -> tuple[Any, Program]:
        """``platform``'s lowering and its program; what JAX warns while lowering for a
        platform not ``present`` goes into ``warned``."""
        with self._stages(stage.lower_stage(platform)):
            if platform in present:
                lowered = lowering.lower(traced, platform)
            else:
                with lowering.warnings_kept(warned):
                    lowered = lowering.lower(traced, platform)
            return lowered, stablehlo.read_program(lowered)

    # -- the partitioner's record ---------------------------------------------------------------

    def partition(
        self, traced: Any, lowered_for: Mapping[str, Any] | None = None
    ) -> tuple[OpSite, ...] | None:
        """The collectives the SPMD partitioner inserts into ``traced``'s program: compiled
        (not run) for the platform present here, from its lowering in ``lowered_for`` when
        there is one, with XLA recording the module before and after partitioning
        (:func:`execution.compile_partitioned`); ``None`` when it does not compile here."""

        default = default_platform()
        try:
            with self._stages(stage.PARTITION):
                lowered = (lowered_for or {}).get(default) or lowering.lower(traced, default)
                _, inserted = execution.compile_partitioned(lowered)
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

        self.keep(self._key(keyed, _PARTITIONER), partition_record(inserted))

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
        described = self._compile.described_kinds().get(platform)
        if described:  # the device a trace describes where JAX asks (Pallas)
            settings += f"\ndescribed device: {described}"
        return lowered_key(
            jaxpr=jaxpr,
            sources=sources,
            platform=platform,
            versions=versions(),
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

    def _cache_failure(self, key: str | None, probe: PlatformProbe, error: str) -> None:
        """Keep a failure to lower that this program meets wherever it is lowered with these
        versions; not one that depends on this machine (JAX asked for a GPU, a package is
        missing), which may lower elsewhere or after an install."""
        if probe.needs_hardware is None and missing_package(error) is None:
            self.keep(key, FailedLowering(error=error, warnings=probe.lowering_warnings))

    def keep_programs(self, unkept: Mapping[str, Program]) -> None:
        """Keep the programs an audit lowered and left out (``Examined.unkept``, by key)."""
        for key, program in unkept.items():
            self.keep(key, program)

    def keep(self, key: str | None, program: Program | FailedLowering | None) -> None:
        """Keep ``program`` (or the failure to lower) under ``key`` in the lowered cache."""
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
