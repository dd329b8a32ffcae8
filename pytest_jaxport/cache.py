"""The compiled-level cache: parsed compiled programs, kept in pytest's cache folder.

Compiling is the expensive part of the compiled level (seconds per module for CUDA), so
what it produced is kept between runs, keyed by everything that decides it: the lowered
module text, the source line of each of its ops (:func:`source_fingerprint`), the jax and
jaxlib versions, the platform and how it was compiled (on a device of which kind, or
deviceless against which target description), the compile options and ``XLA_FLAGS``. An
unchanged suite therefore never recompiles for its census; change any of those and the
entry is simply not found.

What is stored is the parsed :class:`~census.Program` (one op site per dispatch), not the
census: classification runs on every read, so a ``pytest_jaxport_classify`` hook or a new
rule applies at once. Entries are small JSON files written atomically, one per key, in the
folder ``config.cache.mkdir("jaxport-compiled")`` gives (``.pytest_cache/d/``), so
pytest's ``--cache-clear`` drops them and ``-p no:cacheprovider`` turns the cache off.
Pure: no jax, no pytest.

Example::

    >>> key = cache_key(module="module @m {}", platform="cpu", mode="device:cpu",
    ...                 versions={"jax": "0.10.2", "jaxlib": "0.10.2"})
    >>> len(key)
    64

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_jaxport.model.census import Program, parse_location, program_from_dict, program_to_dict
from pytest_jaxport.model.devices import DEFAULT_DEVICES, Device
from pytest_jaxport.model.libtpu import (
    COMPILE_TARGETS,
    DEFAULT_COMPILE_TIME_LIMIT,
    ModuleCompiler,
)
from pytest_jaxport.version import __version__

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
"""How an entry's temporary file is opened (``O_BINARY``: Windows)."""

CACHE_NAME = "jaxport-compiled"
"""The folder's name under pytest's cache (``config.cache.mkdir(CACHE_NAME)``)."""

FORMAT = 5
"""Bumped whenever what an entry holds, or how compiled HLO is parsed, changes (3: library
calls carry the relayouts around them; 4: TPU dispatches carry their tiled layouts, the
program its entry layout and the compiler's memory count; 5: every platform's program its
compiler's memory count, with the planned peak)."""

LOWERED_CACHE_NAME = "jaxport-lowered"
"""The lowered level's folder under pytest's cache, next to :data:`CACHE_NAME`."""

LOWERED_FORMAT = 7
"""Bumped whenever a lowered entry's content, or how ``stablehlo.read_program`` reads a
module (which ops keep their location, how costs are estimated, which cases resolve, the
collectives the partitioner inserts, how host callbacks lower), changes (4: failures to
lower kept; 5: sites carry their types and the attributes format findings read; 6: what JAX
warned while lowering for a platform not present; 7: ops XLA folds into constants are not
read)."""


def cache_key(
    *,
    module: str,
    platform: str,
    mode: str,
    versions: Mapping[str, str],
    target_config: str = "",
    options: Mapping[str, object] | None = None,
    xla_flags: str = "",
) -> str:
    """A hex digest over everything that decides a compiled program."""
    parts = {
        "format": FORMAT,
        "pytest_jaxport": __version__,
        "platform": platform,
        "mode": mode,
        "versions": dict(sorted(versions.items())),
        "options": dict(sorted((options or {}).items())),
        "xla_flags": xla_flags,
        "target_config": hashlib.sha256(target_config.encode()).hexdigest(),
        "module": hashlib.sha256(module.encode()).hexdigest(),
    }
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def lowered_key(
    *,
    jaxpr: str,
    sources: str,
    platform: str,
    versions: Mapping[str, str],
    settings: str = "",
) -> str:
    """A hex digest over everything that decides a lowered program a census reads.

    ``jaxpr``: the closed jaxpr's text with its argument and result types; ``sources``: the
    source line of each of its equations (``keyparts.census_key_parts``); ``settings``: the
    JAX configuration that can change a lowering.
    """
    parts = {
        "format": LOWERED_FORMAT,
        "pytest_jaxport": __version__,
        "platform": platform,
        "versions": dict(sorted(versions.items())),
        "settings": _digest(settings),
        "jaxpr": _digest(jaxpr),
        "sources": _digest(sources),
    }
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


@functools.lru_cache(maxsize=256)
def _digest(text: str) -> str:
    """``text``'s SHA-256 in hex: a computation's jaxpr and source lines are keyed once per
    platform and once more as judged (a string keeps its hash: a repeat is one lookup)."""
    return hashlib.sha256(text.encode()).hexdigest()


def source_fingerprint(program: Program) -> str:
    """The source line a census would show for every op of ``program``, in op order.

    Part of the key next to the module text without locations: an edit that moves the
    user's lines is a miss (the cached census would point at old lines), while the rest
    of a location (the callers up the stack) never is.
    """
    lines = {
        name: [str(parse_location(site.location) or "") for site in sites]
        for name, sites in sorted(program.functions.items())
    }
    return json.dumps(lines, sort_keys=True)


@functools.cache
def code_fingerprint() -> str:
    """A digest of this package's own files (its code, rule tables and data): what reads,
    classifies and judges a program, so that a kept census is never one older code judged."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".json", ".toml") and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode())
            try:
                digest.update(path.read_bytes())
            except OSError:
                digest.update(b"?")
    return digest.hexdigest()


def judged_by(settings: CompileSettings, *, rootdir: Path, own_packages: Sequence[str]) -> str:
    """A digest of everything besides the program that decides a census as an audit judges
    it: this package's code (:func:`code_fingerprint`), the GPU a cuda census prices and
    judges for, the platforms compiled (and libtpu's release), each platform's device, the
    folder files are shown relative to, and the packages whose lines count as the user's. A
    ``pytest_jaxport_classify`` hook is not covered: with one registered, no judged census
    may be kept or read."""
    parts = {
        "code": code_fingerprint(),
        "target": settings.target,
        "target_config": hashlib.sha256(settings.target_config.encode()).hexdigest(),
        "gpu_kind": settings.gpu_kind,
        "compile": list(settings.platforms),
        "libtpu": settings.libtpu,
        "devices": sorted((p, repr(d)) for p, d in settings.devices.items()),
        "rootdir": str(rootdir),
        "own_packages": list(own_packages),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedLowering:
    """A platform a program did not lower for, and JAX's reason, kept so that a warm run
    does not lower it again to fail the same way."""

    error: str
    warnings: tuple[str, ...] = ()
    """What JAX warned while failing (``Program.warnings``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledCache:
    """Entries in ``directory``; a missing, unreadable or foreign entry is a miss.

    The same class holds the lowered level's entries (``format=LOWERED_FORMAT``, in the
    :data:`LOWERED_CACHE_NAME` folder)."""

    directory: Path
    format: int = FORMAT

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> Program | None:
        found = self.entry(key)
        return found if isinstance(found, Program) else None

    def entry(self, key: str) -> Program | FailedLowering | None:
        """The program kept under ``key``, or the failure to lower it kept there."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            if data.get("format") != self.format:
                return None
            if "failed" in data:
                warned = tuple(str(w) for w in data.get("warnings", ()))
                return FailedLowering(error=str(data["failed"]), warnings=warned)
            return program_from_dict(data["program"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, key: str, program: Program | FailedLowering) -> None:
        """Store atomically; a cache that cannot be written is no cache, never an error."""
        if isinstance(program, FailedLowering):
            entry: dict[str, object] = {"format": self.format, "failed": program.error}
            if program.warnings:
                entry["warnings"] = list(program.warnings)
        else:
            entry = {"format": self.format, "program": program_to_dict(program)}
        self._write(key, entry)

    def judged(self, key: str) -> dict[str, object] | None:
        """What :meth:`put_judged` kept under ``key`` (JSON data), or ``None``."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            if data.get("format") != self.format or not isinstance(data.get("judged"), dict):
                return None
            return data["judged"]  # type: ignore[no-any-return]
        except (OSError, ValueError, AttributeError):
            return None

    def put_judged(self, key: str, judged: Mapping[str, object]) -> None:
        """Keep a census as judged (JSON data) under ``key``: the key must then cover what
        judged it (the classification and format rules, the devices, ...), not only the
        program, as :func:`judged_by` does."""
        self._write(key, {"format": self.format, "judged": dict(judged)})

    def _write(self, key: str, entry: Mapping[str, object]) -> None:
        # A cold audit writes one entry per computation: four system calls each (creating a
        # file in a new folder costs up to half a millisecond of kernel time here); the folder
        # is made only when the first write finds it missing.
        data = json.dumps(entry).encode("utf-8")
        path = str(self._path(key))
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            try:
                fd = os.open(tmp, _CREATE, 0o666)
            except FileNotFoundError:
                self.directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(tmp, _CREATE, 0o666)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def empty(self) -> bool:
        """Whether no entry is kept (a first run, or one after ``--jaxport-cache-clear``)."""
        return not self.directory.is_dir() or next(self.directory.glob("*.json"), None) is None

    def clear(self) -> int:
        """Drop every entry; returns how many were dropped."""
        dropped = 0
        if not self.directory.is_dir():
            return 0
        for entry in self.directory.glob("*.json"):
            try:
                entry.unlink()
                dropped += 1
            except OSError:
                continue
        return dropped


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileSettings:
    """What the compiled level does in this session (``[tool.jaxport] compile`` and co.)."""

    platforms: tuple[str, ...] = ()
    target: str = "h100"
    """The GPU description's name or path, as reports show it."""
    target_config: str = ""
    """Its text; compiled against where cuda is compiled with no GPU present."""
    gpu_kind: str = ""
    """Its device kind (``NVIDIA H100 80GB HBM3``): the GPU a trace describes for cuda where
    JAX asks which GPU it lowers for (Pallas on jax 0.11+); empty for JAX's default."""
    what_if_no_vendor: bool = False
    cache: CompiledCache | None = None
    lowered_cache: CompiledCache | None = None
    """The lowered level's cache (platforms not present here); ``None`` when off."""
    compile_time_limit: float = DEFAULT_COMPILE_TIME_LIMIT
    """Seconds a compile without the device may take (``[tool.jaxport] compile_time_limit``)."""
    tpu_compiler: ModuleCompiler | None = None
    """libtpu's worker, where tpu compiles without a TPU (``compile = ["tpu"]``)."""
    libtpu: str = ""
    """The installed libtpu's version where tpu compiles (what the compiled program follows)."""
    devices: Mapping[str, Device] = field(default_factory=lambda: dict(DEFAULT_DEVICES))
    """The device each platform's formats-and-layout findings are judged for (cuda: the GPU
    ``target`` describes; rocm, tpu: ``[tool.jaxport] devices``), at every level, for checks
    and the audit alike."""

    def described_kinds(self) -> dict[str, str]:
        """The device kind a trace describes per platform, where JAX asks which device it
        lowers for and none is here: the GPU ``target`` describes, the configured TPU's
        (``TPU v6 lite`` for ``tpu = "v6e"``; only generations libtpu names have one)."""
        kinds = {"cuda": self.gpu_kind} if self.gpu_kind else {}
        tpu = self.devices.get("tpu")
        target = COMPILE_TARGETS["tpu"].get(tpu.generation) if tpu is not None else None
        if target is not None:
            kinds["tpu"] = target.device_kind
        return kinds
