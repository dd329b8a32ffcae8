"""libtpu, the TPU compiler without a TPU: which jax and libtpu releases go together, the
topology a program compiles for, and what the compiler answered.

A mismatched jax/libtpu pair crashes the process that loads it (a segmentation fault, nothing
Python can catch), so the pair is judged before anything loads libtpu, from the installed
packages' versions: the libtpu jax pins for its ``tpu`` extra, the pairs measured here
(:data:`MEASURED_PAIRS`), the pairs measured to crash (:data:`CRASHING`); any other pair is
probed in a process of its own first. Pure: no jax, no pytest.

>>> pair_verdict("0.10.2", "0.0.42.1", pinned="0.0.42.*").ok
True
>>> print(pair_verdict("0.10.2", None, pinned="0.0.42.*").problem.split(" installs")[0])
libtpu is not installed: pip install "pytest-jaxport[tpu] @ git+https://github.com/pytest-jaxport/pytest-jaxport"
>>> topology_for("tpu", "v5e", "", partitions=4).name
'v5e:2x2'

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pytest_jaxport.model.census import CompiledMemory
from pytest_jaxport.model.platforms import DESCRIPTIONS, CompileTarget, release
from pytest_jaxport.version import requirement

DEFAULT_COMPILE_TIME_LIMIT = 60.0
"""Seconds one compile for a platform without its device may take (``[tool.jaxport]
compile_time_limit``): past it, the compile is a finding and the run goes on."""

MAX_COMPILE_TIME_LIMIT = 86_400.0
"""The largest ``compile_time_limit``: a day. The wait is a timeout of the operating
system's (``select``), which refuses one of about 25 days or more (``OverflowError: timeout
is too large``); no compile is worth waiting a day for."""

INSTALL = f'pip install "{requirement("tpu")}"'
"""The extra that installs the libtpu the installed jax pins (``jax[tpu]``), as pip installs
pytest-jaxport today."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair:
    """A jax release and a libtpu release measured to compile together (every program of a
    catalogue, HLO and ``memory_analysis``), and where."""

    jax: str
    libtpu: str
    source: str


_RESEARCH = "shared/research/tpu.md §1b-§1c (23 programs, 36 layout probes; 8 per crossed pair)"
_CI = "docs/compatibility.md: .ci/run's tpu legs"

MEASURED_PAIRS: tuple[Pair, ...] = (
    Pair(jax="0.6.2", libtpu="0.0.17", source=_CI),
    Pair(jax="0.6.2", libtpu="0.0.17.1", source=_RESEARCH),
    *(
        Pair(jax=jax, libtpu=libtpu, source=_RESEARCH)
        for jax in ("0.9.2", "0.10.2", "0.12.0.1", "0.12.1")
        for libtpu in ("0.0.37", "0.0.42.1", "0.0.50.1")
    ),
    *(Pair(jax=jax, libtpu="0.0.52", source=_RESEARCH) for jax in ("0.10.2", "0.12.0.1")),
    Pair(jax="0.12.1", libtpu="0.0.52", source=f"{_RESEARCH}; {_CI}"),
)
"""Pairs that compile alike: jax's own pins and the crossed pairs that did as well. A pair
jax pins is good without being listed; these are the others, and the pins measured."""

UNPUBLISHED_PINS: Mapping[str, tuple[str, str]] = {"0.12.1": ("0.0.53", "0.0.52")}
"""jax releases whose pinned libtpu is not on PyPI: the pin, and the measured libtpu to
install instead (``pip install "jax[tpu]==0.12.1"`` fails: no libtpu 0.0.53)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Crash:
    """jax releases from ``jax_from`` on crash loading a libtpu older than ``libtpu_before``."""

    jax_from: str
    libtpu_before: str
    what: str


CRASHING: tuple[Crash, ...] = (
    Crash(
        jax_from="0.9.2",
        libtpu_before="0.0.18",
        what="a segmentation fault in xla::ifrt::PjRtTopology::GetDefaultLayout() as jax.jit "
        "compiles for its topology (measured: jax 0.9.2 to 0.12.1 with libtpu 0.0.17.1)",
    ),
)
"""Pairs measured to crash the process that loads libtpu (research §1c)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PairVerdict:
    """Whether the installed jax and libtpu compile together: ``ok`` (pinned or measured),
    a ``problem`` (one message saying how to fix it), or neither: ``probe`` it first."""

    problem: str | None = None
    ok: bool = False
    known: str = ""
    """Why it is good: ``pinned by jax`` or the measurement's source."""

    @property
    def probe(self) -> bool:
        """Neither known good nor known bad: load it once in a process of its own."""
        return not self.ok and self.problem is None


def pinned_libtpu(requirements: Iterable[str]) -> str | None:
    """The libtpu version jax's ``tpu`` extra pins, from jax's requirements as package
    metadata lists them (``libtpu==0.0.42.*; extra == "tpu"``); ``None`` where there is none.

    >>> pinned_libtpu(['numpy>=1.26', 'libtpu==0.0.42.*; extra == "tpu"'])
    '0.0.42.*'
    """
    for line in requirements:
        found = re.match(r"\s*libtpu\s*==\s*([0-9][0-9.*]*)\s*;(.*)", line)
        if found and re.search(r"extra\s*==\s*['\"]tpu['\"]", found.group(2)):
            return found.group(1)
    return None


def matches_pin(version: str, pin: str) -> bool:
    """Whether ``version`` satisfies ``==pin`` (``0.0.42.*`` takes ``0.0.42`` and
    ``0.0.42.1``).

    >>> matches_pin("0.0.42.1", "0.0.42.*"), matches_pin("0.0.43", "0.0.42.*")
    (True, False)
    """
    if pin.endswith(".*"):
        prefix = release(pin[:-2])
        return release(version)[: len(prefix)] == prefix
    return release(version) == release(pin)


def install_line(jax: str, pinned: str | None) -> str:
    """What to run for the libtpu that goes with jax ``jax``."""
    unpublished = UNPUBLISHED_PINS.get(jax)
    if unpublished is not None:
        pin, instead = unpublished
        return (
            f'pip install "libtpu=={instead}" (jax {jax} pins libtpu {pin}, which is not on '
            f"PyPI; {instead} is measured with it)"
        )
    if pinned is None:
        return f"{INSTALL} (this jax pins no libtpu: upgrade jax, then install the extra)"
    return f'{INSTALL} installs the libtpu jax {jax} pins (or: pip install "libtpu=={pinned}")'


def pair_verdict(jax: str, libtpu: str | None, *, pinned: str | None) -> PairVerdict:
    """Whether jax ``jax`` and libtpu ``libtpu`` (``None``: not installed) compile together;
    ``pinned``: the libtpu jax's ``tpu`` extra pins (:func:`pinned_libtpu`)."""
    if libtpu is None:
        return PairVerdict(problem=f"libtpu is not installed: {install_line(jax, pinned)}")
    if pinned is not None and matches_pin(libtpu, pinned):
        return PairVerdict(ok=True, known=f"pinned by jax {jax}")
    for pair in MEASURED_PAIRS:
        if release(pair.jax) == release(jax) and release(pair.libtpu) == release(libtpu):
            return PairVerdict(ok=True, known=f"measured: {pair.source}")
    for crash in CRASHING:
        if release(jax) >= release(crash.jax_from) and release(libtpu) < release(
            crash.libtpu_before
        ):
            return PairVerdict(
                problem=f"libtpu {libtpu} is measured to crash jax {jax} ({crash.what}): "
                f"{install_line(jax, pinned)}"
            )
    return PairVerdict()


def probe_problem(jax: str, libtpu: str, pinned: str | None, said: str) -> str:
    """The message for a pair whose probe failed: ``said``, what the probe process said (or
    the signal that ended it)."""
    return (
        f"libtpu {libtpu} did not load with jax {jax} in a probe process ({said}); a "
        f"mismatched pair crashes the process that loads it: {install_line(jax, pinned)}"
    )


# -- topologies ------------------------------------------------------------------------------

COMPILE_TARGETS: Mapping[str, Mapping[str, CompileTarget]] = {
    p.name: {t.generation: t for t in p.compile_targets}
    for p in DESCRIPTIONS.values()
    if p.compile_targets
}
"""Per platform whose compiler runs without its device, the generations it compiles for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """What a program compiles for: ``name`` as libtpu takes it (``v5e:2x2``), its devices,
    and how many chips each host of it holds (``host_bounds``)."""

    name: str
    generation: str
    devices: int
    host_bounds: tuple[int, int, int] = (1, 1, 1)
    device_kind: str = ""


HOST_CHIPS = 2
"""Chips a host of a slice holds along each of its first two dimensions (fewer where the
slice has fewer): the host bounds a topology is made with, which libtpu requires to divide
the slice (``v5e:3x3`` is "not divisible by ... chips_per_host_bounds 2x2x1")."""


def _dims(shape: str) -> tuple[int, ...]:
    return tuple(int(part) for part in shape.split("x"))


def shape_problem(platform: str, generation: str, shape: str) -> str | None:
    """Why ``generation:shape`` is no topology the compiler takes, or ``None``: a shape of as
    many dimensions as the generation's slices (``2x2`` for v5e, ``2x2x1`` for v5p), each a
    whole number of chips from 1, no larger than the compiler allows
    (:attr:`~pytest_jaxport.model.platforms.CompileTarget.bounds`), and even above
    :data:`HOST_CHIPS` along the first two (the slice's hosts must divide it).

    >>> shape_problem("tpu", "v5p", "2x2")
    "v5p's topologies have 3 dimensions (e.g. v5p:2x2x1), found '2x2'"
    >>> shape_problem("tpu", "v5e", "0x2")
    "a topology counts chips along each dimension, 1 or more (e.g. v5e:2x2), found 0 in '0x2'"
    """
    target = compile_target(platform, generation)
    example = target.shapes[1] if len(target.shapes) > 1 else target.shapes[0]
    rank = len(_dims(example))
    eg = f"e.g. {generation}:{example}"
    if not shape:
        return (
            f"no topology after '{generation}:'; write {generation!r} alone (a program "
            f"compiles for the smallest slice with its devices) or a topology ({eg})"
        )
    parts = shape.split("x")
    if not all(part.isdigit() and part.isascii() for part in parts):
        return f"a topology is {rank} whole numbers of chips joined by 'x' ({eg}), found {shape!r}"
    dims = _dims(shape)
    if 0 in dims:
        return (
            f"a topology counts chips along each dimension, 1 or more ({eg}), found 0 in {shape!r}"
        )
    if len(dims) != rank:
        return f"{generation}'s topologies have {rank} dimensions ({eg}), found {shape!r}"
    return _bounds_problem(target, dims, shape) or _hosts_problem(target, dims, shape)


def _bounds_problem(target: CompileTarget, dims: tuple[int, ...], shape: str) -> str | None:
    over = [
        (axis, bound)
        for axis, (dim, bound) in enumerate(zip(dims, target.bounds, strict=False))
        if dim > bound
    ]
    if not over:
        return None
    largest = "x".join(map(str, target.bounds))
    axis, bound = over[0]
    return (
        f"{target.generation}'s slices are at most {largest} chips (libtpu aborts compiling for "
        f"more than {bound} along dimension {axis + 1}), found {shape!r}; name a slice of "
        f"{target.generation} up to {target.generation}:{largest}"
    )


def _hosts_problem(target: CompileTarget, dims: tuple[int, ...], shape: str) -> str | None:
    odd = [dim for dim in dims[:2] if dim > HOST_CHIPS and dim % HOST_CHIPS]
    if not odd:
        return None
    return (
        f"libtpu lays a slice out on hosts of {HOST_CHIPS}x{HOST_CHIPS} chips, so its first two "
        f"dimensions are each 1, {HOST_CHIPS} or a multiple of {HOST_CHIPS} (e.g. "
        f"{target.generation}:{target.shapes[2]}), found {odd[0]} in {shape!r}"
    )


def compile_target(platform: str, generation: str) -> CompileTarget:
    """The compile target of ``generation``; ``ValueError`` naming those there are."""
    targets = COMPILE_TARGETS.get(platform, {})
    found = targets.get(generation)
    if found is None:
        raise ValueError(
            f"{platform} compiles without a device for {', '.join(targets) or 'nothing'}; "
            f"libtpu has no topology for {generation!r}"
        )
    return found


def topology_for(platform: str, generation: str, shape: str, *, partitions: int) -> Topology:
    """The topology a program partitioned over ``partitions`` devices compiles for: the
    configured ``shape`` (``2x2``), or else the generation's smallest slice with that many
    devices. Raises ``ValueError`` where none has as many."""
    target = compile_target(platform, generation)
    shapes = (shape,) if shape else target.shapes
    for candidate in shapes:
        dims = _dims(candidate)
        chips = 1
        for dim in dims:
            chips *= dim
        devices = chips * target.devices_per_chip
        if devices >= partitions:
            padded = (*dims, 1, 1)[:3]
            bounds = (min(padded[0], HOST_CHIPS), min(padded[1], HOST_CHIPS), 1)
            return Topology(
                name=f"{target.topology}:{candidate}",
                generation=generation,
                devices=devices,
                host_bounds=bounds,
                device_kind=target.device_kind,
            )
    largest = shapes[-1]
    raise ValueError(
        f"the program is partitioned over {partitions} devices, more than "
        f"{generation}:{largest} has; name a larger topology in [tool.jaxport] devices "
        f'(e.g. tpu = "{generation}:{target.shapes[-1]}")'
    )


# -- what the compiler answered --------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledModule:
    """What a compile without the device gave: the optimized HLO, ``memory_analysis``, the
    devices' kind and the compile's own seconds."""

    hlo: str
    memory: CompiledMemory | None
    device_kind: str
    seconds: float


class ModuleCompiler(Protocol):
    """Compiles a lowered module for a topology, within ``time_limit`` seconds
    (:class:`pytest_jaxport._jax.libtpu.TpuCompiler`)."""

    time_limit: float

    def compile(
        self,
        module: bytes,
        topology: Topology,
        *,
        partitions: int,
        options: Mapping[str, object] | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> CompiledModule: ...

    def start(self) -> None: ...

    def close(self) -> None: ...

    @property
    def versions(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CompilerSaid:
    """A compiler's error, cleaned: its ``reason`` (the message without the C++ stack
    addresses, the HLO metadata and the MLIR locations it prints, and JAX's invitation to
    report a bug), the MLIR locations it names (``loc(...)``, as Mosaic names a kernel's op)
    and the Python frames it suspects (``(file, line)``, innermost first)."""

    reason: str
    locations: tuple[str, ...] = ()
    frames: tuple[tuple[str, int], ...] = field(default_factory=tuple)


_STACK_LINE = re.compile(r"^\s*@\s+0x[0-9a-fA-F]+.*$", re.MULTILINE)
_INLINE_STACK = re.compile(r":?\s+@\s+0x[0-9a-fA-F]+\s.*", re.DOTALL)
_METADATA = re.compile(r",?\s*metadata=\{[^{}]*\}")
_BUG_REPORT = re.compile(r"Please report a bug at:?\s*\S+")
_SUSPECTED = re.compile(r"^\s*(?P<file>\S.*?):(?P<line>\d+)(?::\d+)?\s+\[", re.MULTILINE)


def compiler_said(message: str) -> CompilerSaid:
    """The compiler's ``message`` as a finding shows it.

    >>> said = compiler_said('''JaxRuntimeError: UNIMPLEMENTED: Only F32 and C64 types are
    ... implemented in LuDecomposition; got shape f64[64,64]:     @     0x7f14  xla::X()
    ...     @     0x7f15  xla::Y()''')
    >>> said.reason[-62:]
    'types are implemented in LuDecomposition; got shape f64[64,64]'
    """
    head, _, suspected = message.partition("Suspected Python Code Location:")
    head = _INLINE_STACK.sub("", _STACK_LINE.sub("", head))
    head = _METADATA.sub("", _BUG_REPORT.sub("", head))
    locations: list[str] = []
    while (start := head.find("loc(")) >= 0:
        end = _closing(head, start + 3)
        locations.append(head[start:end])
        before = head[:start].rstrip()
        if before.endswith("at location:"):
            before = before.removesuffix("at location:").rstrip()
        head = f"{before} {head[end:].lstrip()}"
    reason = " ".join(head.split()).rstrip(":; ")
    frames = tuple(
        (found.group("file"), int(found.group("line"))) for found in _SUSPECTED.finditer(suspected)
    )
    return CompilerSaid(reason=reason[:1000], locations=tuple(locations), frames=frames)


def _closing(text: str, opening: int) -> int:
    """The index after the parenthesis that closes the one at ``opening`` (quoted text
    skipped); the text's end where it never closes."""
    depth = 0
    quoted = False
    for index in range(opening, len(text)):
        char = text[index]
        if char == '"' and text[index - 1] != "\\":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)
