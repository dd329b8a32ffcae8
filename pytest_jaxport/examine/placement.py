"""Where a census's kernels and findings are shown: their files as reports show them, at the
user's line or the caller's (:class:`Placement`), and the device formats are judged for.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pytest_jaxport.model.census import Census, Kernel, Program, SourceLocation, is_library_file
from pytest_jaxport.model.devices import DEFAULT_DEVICES, Device
from pytest_jaxport.model.findings import FormatCensus
from pytest_jaxport.model.format_census import take_format_census


class Placement:
    """Places a census's kernels and findings as reports show them (see :meth:`relative`)."""

    def __init__(
        self,
        *,
        rootdir: Path,
        own_packages: tuple[str, ...] = (),
        devices: Mapping[str, Device] | None = None,
    ) -> None:
        self._rootdir = rootdir
        self._devices = devices or {}
        self.own_packages = own_packages
        """Installed packages whose lines count as the user's (``[tool.jaxport]
        own_packages``): a kernel is placed at its innermost frame outside other libraries."""

    def relative(
        self,
        census: Census,
        caller: SourceLocation | None = None,
        *,
        at_caller: bool = False,
        source: SourceLocation | None = None,
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
        the ``caller``'s too. ``source``: the computation's own line (its function's
        definition), where a kernel without a line of its own is placed when others have one
        (as the user's line if it is: a library's function's is the ``caller``'s)."""
        if caller is not None and not at_caller and not any(k.location for k in census.kernels):
            at_caller = True
        counts: dict[Kernel, int] = {}  # kernels placed at one line add up
        for k in census.kernels:
            at = self._placed(k.location, caller, at_caller, source)
            key = replace(k, location=at, count=0)
            counts[key] = counts.get(key, 0) + k.count
        return replace(census, kernels=tuple(replace(k, count=n) for k, n in counts.items()))

    def _placed(
        self,
        location: SourceLocation | None,
        caller: SourceLocation | None,
        at_caller: bool,
        source: SourceLocation | None = None,
    ) -> SourceLocation | None:
        """``location`` as reports show it, or the ``caller``'s (see :meth:`relative`): where
        it is a library's line rather than the user's or an own package's, and with
        ``at_caller`` wherever it is not inside an own package. No location at all (an op
        whose line the reader did not keep, at the top of the program) is the computation's
        own ``source`` line, placed by the same rules."""
        if location is None:
            if at_caller or source is None:
                return caller if at_caller else None
            return self._placed(source, caller, at_caller)
        if caller is not None and (
            is_library_file(location.file, self.own_packages)
            or (at_caller and not is_library_file(location.file))
        ):
            return caller
        return self.shown_location(location)

    def device(self, platform: str) -> Device:
        """The device ``platform``'s formats-and-layout findings are judged for."""
        found = self._devices.get(platform) or DEFAULT_DEVICES.get(platform)
        return found or Device(platform=platform)

    def formats(
        self,
        program: Program,
        platform: str,
        *,
        level: Literal["lowered", "compiled"] = "lowered",
        caller: SourceLocation | None = None,
        at_caller: bool = False,
        source: SourceLocation | None = None,
    ) -> FormatCensus:
        """The formats-and-layout findings of ``program`` on ``platform``'s device, judged on
        every read like classification (the caches keep programs, never findings), their
        files as reports show them; where no finding has a line, or with ``at_caller`` (see
        :meth:`relative`), the ``caller``'s; a finding without a line where others have one,
        the computation's own ``source`` line (TPU tile padding of a gather inside
        ``map_coordinates``: its op keeps no line of its own)."""
        found = take_format_census(
            program, platform, device=self.device(platform), level=level, own=self.own_packages
        )
        eager = at_caller  # an op run eagerly: every line is its caller's
        if caller is not None and not at_caller and not any(f.location for f in found.findings):
            at_caller = True
        relocated = found.relocated(
            lambda at: self._placed(at, caller, at_caller, source),
            lines_where=lambda at: self._placed(at, caller, eager, source),  # each op's own
        )
        lines = [(f.kind, f.rule, f.level, f.location) for f in relocated.findings]
        if len(set(lines)) < len(lines):  # findings placed at one line add up
            relocated += replace(
                relocated, findings=(), formats={}, tiled_bytes=0, lines={}, memory=None
            )
        return relocated

    def shown_location(self, location: SourceLocation) -> SourceLocation:
        """``location`` with its file as reports show it."""
        file = shown_file(location.file, self._rootdir)
        return location if file is None else SourceLocation(file=file, line=location.line)


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
