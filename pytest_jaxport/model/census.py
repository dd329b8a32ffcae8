"""Census of one lowered (or compiled) program: what it dispatches, counted per call.

The census is pure: it takes a :class:`Program` (the ops of each function in a module, as
``lowering.py`` reads them off StableHLO) and a classifier, and returns a :class:`Census`.
Counts are call-weighted: a private function called three times counts three times, and
ops without a source location of their own are attributed to the user's line that called
them.

Example::

    >>> program = Program(entry="main", functions={
    ...     "main": (OpSite(op="func.call", target="helper",
    ...                     location='loc("f"("model.py":3:4))'),) * 3,
    ...     "helper": (OpSite(op="stablehlo.dot_general"),),
    ... })
    >>> take_census(program, "cuda").vendor
    3

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import functools
import operator
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pytest_jaxport.model.classification import (
    INSERTED_PREFIX,
    STRENGTH_REDUCED_DOT,
    STRENGTH_REDUCING,
    ZERO_SIZE,
    Classification,
    Layer,
    Level,
    classify,
    collective_kind,
    routine,
)

CALL_OPS = frozenset({"func.call", "call"})
_Line = TypeVar("_Line", str, int)
_FRAME = re.compile(r'"([^"]+)":(\d+):\d+')
_PLUGIN_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
_LIBRARY_PATHS = ("/site-packages/", "/dist-packages/", "/lib/python3", _PLUGIN_PATH)
"""Frames in these are not the user's code: installed packages, the standard library, and
this plugin itself (even installed editable), whose frames lead to the user's check call."""
_PACKAGE_FOLDERS = ("/site-packages/", "/dist-packages/")


@functools.lru_cache(maxsize=16384)
def is_library_file(file: str, own: tuple[str, ...] = ()) -> bool:
    """Whether frames in ``file`` are a library's internals rather than the user's code: an
    installed package (unless among the ``own`` packages, whose lines the user reads as
    theirs), the standard library, this plugin, or code with no file to open (a name in
    angle brackets, as the interpreter names what ``exec``, ``dataclasses`` or ``attrs``
    compiled: a report cannot point at its line).

    >>> is_library_file("/venv/lib/python3.11/site-packages/lineax/_solve.py")
    True
    >>> is_library_file("/venv/lib/python3.11/site-packages/lineax/_solve.py", own=("lineax",))
    False
    >>> is_library_file("<string>")
    True
    """
    if file.startswith("<"):
        return True
    posix = file.replace("\\", "/")
    if own and any(f"{folder}{package.replace('.', '/')}/" in posix
                   for folder in _PACKAGE_FOLDERS for package in own):  # fmt: skip
        return False
    return any(part in file for part in _LIBRARY_PATHS)


def is_plugin_file(file: str) -> bool:
    """Whether ``file`` is this plugin's own: a frame no report shows, not even as a library's
    line (the audit's hooks wrap JAX's tracing, so a rule JAX traces inside them can have no
    frame nearer than the hook's)."""
    return _PLUGIN_PATH in file


Classifier = Callable[[str, str, "str | None"], Classification]
"""``(platform, op, custom-call target or None) -> Classification``."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class SourceLocation:
    """The user's source line that produced a dispatch."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpSite:
    """One op of a function, before classification.

    ``target`` is the custom-call target for custom calls and the callee for calls;
    ``location`` is the op's MLIR location text (``loc(...)``), or ``None``.
    """

    op: str
    target: str | None = None
    location: str | None = None
    flops: float = 0.0
    bytes: float = 0.0
    """Approximate arithmetic and memory traffic, for the roofline estimate (0 if unknown)."""
    count: int = 1
    """How many identical ops this site stands for in its function."""
    runs: int = 1
    """How many times a call site's callee runs each time the site is reached (a loop
    body's known trip count). It weights estimated time only, never counts: a loop body's
    dispatches count once, since a budget is about code, not iterations."""
    operand_types: tuple[str, ...] = ()
    result_types: tuple[str, ...] = ()
    """The op's operand and result types as StableHLO prints them (``tensor<8x100xf32>``),
    where the reader keeps them (lowered level; empty otherwise): what format and layout
    findings read (:mod:`pytest_jaxport.model.format_census`)."""
    attributes: tuple[tuple[str, str], ...] = ()
    """``(name, value)`` pairs, sorted: a dot's or convolution's ``precision_config``,
    ``algorithm`` and dimension numbers (lowered level); the ``relayouts`` and
    ``relayout_bytes`` XLA's layout assignment put around a library call (compiled level)."""

    @property
    def compiled(self) -> bool:
        """Whether the site is a compiled program's (an HLO instruction, ``hlo.*``): its
        types are HLO shapes with the layouts the compiler chose (``f32[8,128]{1,0:T(8,128)}``,
        where it tiled them), not StableHLO types."""
        return self.op.startswith("hlo.")


_TENSOR = re.compile(r"^tensor<((?:(?:\d+|\?)x)*)([a-zA-Z][\w]*(?:<[^<>]*>)?)")


@functools.lru_cache(maxsize=8192)
def tensor_type(text: str) -> tuple[tuple[int, ...] | None, str] | None:
    """``tensor<4x100xf32>`` -> ``((4, 100), "f32")``; dims ``None`` where one is dynamic;
    ``None`` for anything that is not a ranked tensor (tokens, tuples).

    >>> tensor_type("tensor<2x3xcomplex<f64>>")
    ((2, 3), 'complex<f64>')
    >>> tensor_type("tensor<f8E4M3FN>")
    ((), 'f8E4M3FN')
    """
    found = _TENSOR.match(text)
    if found is None:
        return None
    sizes = [d for d in found.group(1).split("x") if d]
    dims = None if "?" in sizes else tuple(int(d) for d in sizes)
    return dims, found.group(2)


_DOT_DIMS = re.compile(
    r"(lhs_batching|rhs_batching|lhs_contracting|rhs_contracting)_dimensions = \[([0-9, ]*)\]"
)


def dot_dimensions(attribute: str) -> dict[str, tuple[int, ...]]:
    """A ``dot_dimension_numbers`` attribute as lists of dimensions by role.

    >>> dot_dimensions("#stablehlo.dot<lhs_contracting_dimensions = [1], "
    ...                "rhs_contracting_dimensions = [0]>")["rhs_contracting"]
    (0,)
    """
    found = {
        role: tuple(int(d) for d in dims.split(",") if d.strip())
        for role, dims in _DOT_DIMS.findall(attribute)
    }
    for role in ("lhs_batching", "rhs_batching", "lhs_contracting", "rhs_contracting"):
        found.setdefault(role, ())
    return found


def census_op(site: OpSite, platform: str) -> str:
    """The op a census classifies ``site`` as on ``platform``: its own, but a product,
    convolution or FFT of nothing (:func:`zero_size`) is ``<op>:zero-size``
    (:data:`~pytest_jaxport.model.classification.ZERO_SIZE`: XLA's broadcast zero on every
    platform), and a ``dot_general`` that XLA's GPU compiler always rewrites into elementwise
    ops (:func:`strength_reduced`) is
    :data:`~pytest_jaxport.model.classification.STRENGTH_REDUCED_DOT` on a GPU platform (XLA's,
    no library call); the formats of a matrix unit do not apply to either."""
    if site.op in ZERO_SIZE_OPS and zero_size(site):
        return site.op + ZERO_SIZE
    if site.op != "stablehlo.dot_general" or platform not in STRENGTH_REDUCING:
        return site.op
    return STRENGTH_REDUCED_DOT if strength_reduced(site) else site.op


ZERO_SIZE_OPS = frozenset(
    {"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution", "stablehlo.fft"}
)
"""The library ops XLA removes when they compute nothing (:func:`zero_size`)."""


def zero_size(site: OpSite) -> bool:
    """Whether an op has an operand or a result of zero elements (a static dimension of 0):
    XLA replaces a dot or convolution of such with a broadcast zero, an empty result with a
    constant, before choosing a library (:data:`ZERO_SIZE_OPS`). Lowered level only: a
    compiled program no longer holds them.

    >>> dot = OpSite(op="stablehlo.dot_general",
    ...              operand_types=("tensor<2x0xf32>", "tensor<0xf32>"),
    ...              result_types=("tensor<2xf32>",))
    >>> zero_size(dot), zero_size(replace(dot, operand_types=("tensor<2x3xf32>",)))
    (True, False)
    """
    for text in (*site.operand_types, *site.result_types):
        parsed = tensor_type(text)
        if parsed is not None and parsed[0] is not None and 0 in parsed[0]:
            return True
    return False


def strength_reduced(site: OpSite) -> bool:
    """Whether a ``dot_general`` is one XLA's GPU compiler never hands to a gemm, whatever its
    size: once its size-1 dimensions are dropped, either both operands are vectors (every
    dimension batch or contracting: ``DotStrengthReduction`` makes it a multiply and a
    reduce) or it contracts nothing (the algebraic simplifier makes it a multiply). Numpyro's
    ``dot_general`` of two ``tensor<1xf32>``, a batched ``einsum("bk,bk->b")``, an outer
    product. A matrix-vector dot is strength-reduced below a size threshold that changed
    between XLA releases: it stays counted, as what may call the library.

    >>> dot = OpSite(op="stablehlo.dot_general",
    ...              operand_types=("tensor<1xf32>", "tensor<1xf32>"),
    ...              attributes=(("dot_dimension_numbers", "#stablehlo.dot<"
    ...                  "lhs_contracting_dimensions = [0], rhs_contracting_dimensions = [0]>"),))
    >>> strength_reduced(dot)
    True
    >>> strength_reduced(replace(dot, operand_types=("tensor<8x1xf32>", "tensor<1xf32>")))
    True
    >>> strength_reduced(replace(dot, operand_types=("tensor<8x4xf32>", "tensor<4xf32>"),
    ...     attributes=(("dot_dimension_numbers", "#stablehlo.dot<"
    ...         "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>"),)))
    False
    """
    attribute = dict(site.attributes).get("dot_dimension_numbers")
    if attribute is None or len(site.operand_types) < 2:
        return False  # not read: counted as it was lowered
    lhs, rhs = (tensor_type(t) for t in site.operand_types[:2])
    if lhs is None or rhs is None or lhs[0] is None or rhs[0] is None:
        return False  # a dynamic shape: XLA decides once it is known
    dims = dot_dimensions(attribute)
    contracted = 1
    for d in dims["lhs_contracting"]:
        contracted *= lhs[0][d] if d < len(lhs[0]) else 1

    def free(shape: tuple[int, ...], side: str) -> bool:
        taken = {*dims[f"{side}_batching"], *dims[f"{side}_contracting"]}
        return any(size != 1 for i, size in enumerate(shape) if i not in taken)

    return contracted == 1 or not (free(lhs[0], "lhs") or free(rhs[0], "rhs"))


UNCOUNTED_OPS = frozenset(
    {"func.return", "stablehlo.return", "return", "stablehlo.constant", "func.func", "module"}
)
"""Ops a census never counts (terminators, constants): a program may leave them out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompiledMemory:
    """What a compiled program holds in device memory, in bytes, as its compiler counted
    (``compiled.memory_analysis()``): its arguments, outputs (less those aliased to an
    argument), scratch (``temp``) and machine code, as laid out on the device (padded to its
    tiles)."""

    argument: int
    output: int
    temp: int
    alias: int = 0
    generated_code: int = 0
    peak: int | None = None
    """The compiler's planned peak (``peak_memory_in_bytes``), where the installed jaxlib
    gives it; ``None`` where it did not."""

    FIELDS = ("argument", "output", "temp", "alias", "generated_code")

    @classmethod
    def from_stats(cls, stats: Mapping[str, object]) -> CompiledMemory:
        """From ``CompiledMemoryStats``' fields (``argument_size_in_bytes``, ...,
        ``peak_memory_in_bytes``) or this class's own (``argument``, ..., ``peak``); raises
        ``ValueError`` for anything but whole numbers."""
        values: dict[str, int] = {}
        for name in cls.FIELDS:
            value = stats.get(name, stats.get(f"{name}_size_in_bytes", 0))
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"not a byte count: {name} = {value!r:.80}")
            values[name] = value
        peak = stats.get("peak", stats.get("peak_memory_in_bytes"))
        if peak is not None and (not isinstance(peak, int) or isinstance(peak, bool) or peak < 0):
            raise ValueError(f"not a byte count: peak = {peak!r:.80}")
        return cls(**values, peak=peak)

    def to_dict(self) -> dict[str, int]:
        data = {name: getattr(self, name) for name in self.FIELDS}
        if self.peak is not None:
            data["peak"] = self.peak
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    """The ops of every function of a module (nested regions flattened into their function).

    Identical ops of a function may be one site with a ``count``, and ops in
    :data:`UNCOUNTED_OPS` may be left out: ``lowering.read_program`` does both.
    """

    entry: str
    functions: Mapping[str, tuple[OpSite, ...]]
    partitions: int = 1
    """How many devices the module is partitioned over (``mhlo.num_partitions``)."""
    warnings: tuple[str, ...] = ()
    """What JAX warned while pytest-jaxport lowered it for a platform not present here
    (``DeprecationWarning: ...``, each once): kept with the program, so a run that reads it
    from the lowered cache says what the run that lowered it heard."""
    memory: CompiledMemory | None = None
    """A compiled program's memory as its compiler counted it, where it said (libtpu)."""
    entry_layout: str = ""
    """A compiled program's parameters and results with the layouts the compiler chose for
    them (its ``entry_computation_layout``: ``(f32[4096,100]{0,1:T(8,128)})->f32[3]{0:T(128)}``),
    where it tiled them (TPU); empty otherwise."""


def kernel_label(*, layer: str, name: str, kind: str, library: str | None) -> str:
    """What a dispatch is, as every table of sites names it: ``cublas gemm`` (its library and
    kind) for a vendor dispatch, with the routine in place of the kind where the target names
    one (``lapack getrf`` and ``lapack trsm``, not ``lapack solver`` twice;
    ``jaxlib lu_pivots``: :func:`~pytest_jaxport.model.classification.routine`); ``my_kernel (ffi)``
    for any other.

    >>> kernel_label(layer="vendor", name="lapack_strsm_ffi", kind="solver", library="lapack")
    'lapack trsm'
    >>> kernel_label(layer="custom", name="tpu_custom_call", kind="pallas-mosaic-tpu",
    ...              library=None)
    'tpu_custom_call (pallas-mosaic-tpu)'
    """
    if layer == "vendor":
        return f"{library or 'vendor'} {routine(name) or kind}"
    return f"{name} ({kind})"


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Kernel:
    """One distinct non-``xla`` dispatch: a name at a source line, with its call-weighted count."""

    layer: Layer
    name: str
    kind: str
    library: str | None = None
    location: SourceLocation | None = None
    count: int = 1

    def describe(self) -> str:
        """``__gpu$xla.gpu.triton (pallas-triton) x2 at model.py:12``."""
        what = self.library if self.library else self.kind
        where = f" at {self.location}" if self.location else ""
        times = f" x{self.count}" if self.count != 1 else ""
        return f"{self.name} ({what}){times}{where}"


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class CollectiveCount:
    """Call-weighted collectives of one kind (``all-reduce``, ``all-gather``,
    ``reduce-scatter``, ``all-to-all``, ``permute``...) in a program.

    ``inserted`` of them the SPMD partitioner added (lowered level: ``spmd.*`` ops, one per
    op that needed one); the rest the program asks for itself (``psum`` in a ``shard_map``).
    A compiled census counts what the backend runs (XLA may combine several into one) and
    says nothing about who inserted them (``inserted`` is 0).
    """

    kind: str
    count: int
    inserted: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Census:
    """What one program dispatches on one platform, at one fidelity level."""

    platform: str
    level: Level = "lowered"
    kernels: tuple[Kernel, ...] = ()
    xla_ops: int = 0
    xla_kinds: Mapping[str, int] = field(default_factory=dict)
    """``xla`` dispatches per kind (``triton-gemm``, ``fusion``, ``topk``...), summing to
    ``xla_ops``; at the lowered level every op is kind ``xla``."""
    estimated_seconds: tuple[tuple[str, str | None, float], ...] = ()
    """Roofline-estimated time per ``(layer, library)``, when the census was asked for it."""
    collectives: tuple[CollectiveCount, ...] = ()
    """Collectives by kind, whatever layer the platform puts them in (sorted by kind)."""

    def count(self, layer: Layer) -> int:
        """Call-weighted dispatches in ``layer`` (``xla`` counts every generated op)."""
        if layer == "xla":
            return self.xla_ops
        return sum(k.count for k in self.kernels if k.layer == layer)

    @property
    def vendor(self) -> int:
        return self.count("vendor")

    @property
    def custom(self) -> int:
        return self.count("custom")

    @property
    def meta(self) -> int:
        return self.count("meta")

    def libraries(self) -> dict[str, int]:
        """Vendor dispatches per library, sorted by name."""
        counts: Counter[str] = Counter()
        for k in self.kernels:
            if k.layer == "vendor" and k.library:
                counts[k.library] += k.count
        return dict(sorted(counts.items()))

    def in_layer(self, layer: Layer) -> tuple[Kernel, ...]:
        return tuple(k for k in self.kernels if k.layer == layer)

    def __add__(self, other: Census) -> Census:
        """Both programs' dispatches: each distinct site once, counts summed (a suite's census
        is the sum of its distinct computations')."""
        return self.plus((other,))

    def plus(self, others: Iterable[Census]) -> Census:
        """This census and ``others`` as one, in one pass: what adding them one by one gives
        (an audited suite adds up thousands; one by one, each sum sorts every site again)."""
        counts: dict[tuple[Layer, str, str, str | None, SourceLocation | None], int] = {}
        kinds: Counter[str] = Counter()
        collectives: dict[str, CollectiveCount] = {}
        xla_ops = 0
        for census in (self, *others):
            for k in census.kernels:
                key = (k.layer, k.name, k.kind, k.library, k.location)
                counts[key] = counts.get(key, 0) + k.count
            kinds.update(census.xla_kinds)
            xla_ops += census.xla_ops
            for c in census.collectives:
                had = collectives.get(c.kind)
                collectives[c.kind] = (
                    c
                    if had is None
                    else CollectiveCount(
                        kind=c.kind, count=had.count + c.count, inserted=had.inserted + c.inserted
                    )
                )
        kernels = [
            Kernel(layer=layer, name=name, kind=kind, library=library, location=location, count=n)
            for (layer, name, kind, library, location), n in counts.items()
        ]
        return replace(
            self,
            kernels=tuple(sorted(kernels, key=lambda k: (k.layer, k.name, str(k.location or "")))),
            xla_ops=xla_ops,
            xla_kinds=dict(+kinds),
            estimated_seconds=(),
            collectives=tuple(sorted(collectives.values())),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StackFrame:
    """One frame of an op's call stack, as a location records it."""

    file: str
    function: str
    line: int
    column: int


def location_text(frames: Sequence[StackFrame]) -> str:
    """MLIR location text for a call stack, innermost frame first (``loc(unknown)`` for none).

    >>> location_text([StackFrame(file="/src/m.py", function="f", line=7, column=8),
    ...                StackFrame(file="/src/t.py", function="t", line=12, column=4)])
    'loc(callsite("f"("/src/m.py":7:8) at "t"("/src/t.py":12:4)))'
    """
    text = ""
    for frame in reversed(frames):
        here = f"{quoted(frame.function)}({quoted(frame.file)}:{frame.line}:{frame.column})"
        text = here if not text else f"callsite({here} at {text})"
    return f"loc({text or 'unknown'})"


def quoted(value: str) -> str:
    """``value`` as an MLIR string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def location_frames(text: str) -> list[tuple[str, str]]:
    """The ``(file, line)`` frames of an MLIR location, innermost first.

    >>> location_frames('loc(callsite("f"("/src/m.py":7:8) at "t"("/src/t.py":12:4)))')
    [('/src/m.py', '7'), ('/src/t.py', '12')]
    """
    return _FRAME.findall(text)


def shown_frame(
    frames: Iterable[tuple[str, _Line]], own: tuple[str, ...] = ()
) -> tuple[str, _Line] | None:
    """The ``(file, line)`` a census shows among a call stack's frames, innermost first: the
    first that is the user's code (:func:`is_library_file`; ``own`` packages count as the
    user's); else the innermost library frame; never this plugin's (:func:`is_plugin_file`:
    the audit's hooks wrap JAX's tracing, so a rule JAX traces inside them can have no frame
    nearer than the hook's). One choice for MLIR locations and jaxpr tracebacks alike.

    >>> shown_frame([("/p/site-packages/a.py", 5), ("/src/m.py", 7)])
    ('/src/m.py', 7)
    >>> shown_frame([("/p/site-packages/a.py", 5)])
    ('/p/site-packages/a.py', 5)
    """
    fallback = None
    for frame in frames:
        if not is_library_file(frame[0], own):
            return frame
        if fallback is None and not is_plugin_file(frame[0]):
            fallback = frame
    return fallback


@functools.lru_cache(maxsize=16384)
def parse_location(text: str | None, own: tuple[str, ...] = ()) -> SourceLocation | None:
    """The line an MLIR location shows (:func:`shown_frame`), or ``None``.

    >>> parse_location('loc(callsite("f"("/src/m.py":7:8 to :17) at "t"("/src/t.py":12:4)))')
    SourceLocation(file='/src/m.py', line=7)
    """
    found = shown_frame(_FRAME.findall(text), own) if text else None
    return None if found is None else SourceLocation(file=found[0], line=int(found[1]))


_Frame = tuple[str, str]
"""A frame of an MLIR location's text: ``(file, line)``."""


@functools.lru_cache(maxsize=16384)
def innermost_frame(text: str | None) -> _Frame | None:
    """The innermost frame of an MLIR location's text (where a call op called its callee)."""
    found = _FRAME.search(text) if text else None
    return None if found is None else (found.group(1), found.group(2))


@functools.lru_cache(maxsize=16384)
def placed_location(
    text: str | None,
    inherited: SourceLocation | None,
    entry: _Frame | None = None,
    own: tuple[str, ...] = (),
) -> SourceLocation | None:
    """The line an op of a function shows where a call at ``inherited`` (the line shown for
    the call op) reached the function, the call op's own location entering it at ``entry``
    (its innermost frame): the op's innermost frame of the user's code (``own`` packages
    count as the user's) among those inside the function; else ``inherited`` (a library's
    jit or primitive, whose ops' frames stop inside the library: the call site is the line
    the user recognizes); else the library's own innermost line (:func:`shown_frame`).

    Inside the function means the op's frames before ``entry``: the frames from ``entry``
    on are the call's. jax up to 0.6 keeps in a nested jaxpr JAX traced once and reused
    (a library's inner jit called with the same types) the whole stack of the call that
    traced it first, an earlier test's line; the same op then showed that line or this
    call's depending on what the process had run before. Later releases give an op of a
    callee only its own frames and this call's, for which the cut changes nothing.

    >>> call = SourceLocation(file="/src/t.py", line=11)
    >>> lib, first = '"/p/site-packages/l.py"', '"/src/t.py"'
    >>> stale = f'loc(callsite({lib}:7:0 at callsite({lib}:12:0 at {first}:8:0)))'
    >>> placed_location(stale, call, ("/p/site-packages/l.py", "12"))
    SourceLocation(file='/src/t.py', line=11)
    >>> placed_location(stale, None)
    SourceLocation(file='/src/t.py', line=8)
    """
    frames = _FRAME.findall(text) if text else []
    if entry is not None and entry in frames:
        frames = frames[: frames.index(entry)]
    found = shown_frame(frames, own)
    if found is not None and (inherited is None or not is_library_file(found[0], own)):
        return SourceLocation(file=found[0], line=int(found[1]))
    return inherited


_Key = tuple[Classification, str, "SourceLocation | None"]
_SITE_KEY = operator.attrgetter("target", "location", "flops", "bytes", "count", "runs")
_Counts = tuple[
    "Counter[_Key]", "Counter[str]", "Counter[tuple[str, str | None]]", "Counter[tuple[str, bool]]"
]


@dataclass(slots=True)
class _Walk:
    program: Program
    platform: str
    classifier: Classifier
    seconds: Callable[[OpSite, str], float] | None = None
    own: tuple[str, ...] = ()
    memo: dict[tuple[str, SourceLocation | None, _Frame | None], _Counts] = field(
        default_factory=dict
    )
    active: set[str] = field(default_factory=set)

    def function(
        self, name: str, inherited: SourceLocation | None, entry: _Frame | None = None
    ) -> _Counts:
        """Function ``name``'s counts, called at ``inherited`` through a call op entering it
        at ``entry`` (see :func:`placed_location`)."""
        __tracebackhide__ = True  # a classify hook's error shows the user's conftest
        key = (name, inherited, entry)
        if key in self.memo:
            return self.memo[key]
        if name in self.active:  # StableHLO forbids recursion; never loop on a malformed module
            return Counter(), Counter(), Counter(), Counter()
        self.active.add(name)
        kernels: Counter[_Key] = Counter()
        xla_ops: Counter[str] = Counter()
        timed: Counter[tuple[str, str | None]] = Counter()
        collectives: Counter[tuple[str, bool]] = Counter()
        # Identical sites (same op, target, location and cost) are classified once and
        # weighted by how often they occur: big modules repeat a few hundred kinds of site
        # (read_program already groups them; programs built elsewhere may not).
        sites = self.program.functions.get(name, ())
        platform = self.platform
        for (op, target_name, location_text, flops, moved, count, runs), repeats in Counter(
            (census_op(site, platform), *_SITE_KEY(site)) for site in sites
        ).items():
            n = count * repeats
            location = placed_location(location_text, inherited, entry, self.own)
            if op in CALL_OPS and target_name is not None:
                callee_kernels, callee_ops, callee_timed, callee_collectives = self.function(
                    target_name, location, innermost_frame(location_text)
                )
                kernels.update({k: v * n for k, v in callee_kernels.items()})
                xla_ops.update({k: v * n for k, v in callee_ops.items()})
                timed.update({k: v * n * runs for k, v in callee_timed.items()})
                collectives.update({k: v * n for k, v in callee_collectives.items()})
                continue
            if op in UNCOUNTED_OPS:
                continue
            kind = collective_kind(op)
            if kind is not None:
                collectives[(kind, op.startswith(INSERTED_PREFIX))] += n
            target = target_name if op.endswith("custom_call") else None
            result = self.classifier(self.platform, op, target)
            if result.layer == "xla":
                xla_ops[result.kind] += n
            else:
                kernels[(result, target or op, location)] += n
            if self.seconds is not None:
                # (a strength-reduced dot's cost is its dot's: its flops and bytes, now xla's)
                site = OpSite(op=op.partition(":")[0], target=target_name,
                              location=location_text, flops=flops, bytes=moved)  # fmt: skip
                timed[(result.layer, result.library)] += n * self.seconds(site, result.layer)
        self.active.discard(name)
        self.memo[key] = (kernels, xla_ops, timed, collectives)
        return kernels, xla_ops, timed, collectives


def placed_sites(
    program: Program, own: tuple[str, ...] = ()
) -> Iterator[tuple[OpSite, SourceLocation | None]]:
    """Every op site reached from ``program``'s entry, in program order, with the line a
    census shows for it (:func:`placed_location`: an op of a library's function at the line
    that called it); a function called from several places is walked once per call.

    >>> program = Program(entry="main", functions={
    ...     "main": (OpSite(op="func.call", target="lib", location='loc("/s/m.py":3:0)'),),
    ...     "lib": (OpSite(op="stablehlo.custom_call", target="Lu", location='loc("lu")'),)})
    >>> [(site.target, str(at)) for site, at in placed_sites(program)]
    [('lib', '/s/m.py:3'), ('Lu', '/s/m.py:3')]
    """
    active: set[str] = set()

    def walk(
        name: str, inherited: SourceLocation | None, entry: _Frame | None
    ) -> Iterator[tuple[OpSite, SourceLocation | None]]:
        if name in active:
            return
        active.add(name)
        for site in program.functions.get(name, ()):
            location = placed_location(site.location, inherited, entry, own)
            yield site, location
            if site.op in CALL_OPS and site.target is not None:
                yield from walk(site.target, location, innermost_frame(site.location))
        active.discard(name)

    yield from walk(program.entry, None, None)


@functools.lru_cache(maxsize=16384)
def _classify_cached(platform: str, op: str, target: str | None, level: str) -> Classification:
    return classify(platform, op, target, level=level)


def _layer_library(item: tuple[tuple[str, str | None], float]) -> tuple[str, str]:
    (layer, library), _ = item
    return layer, library or ""


def take_census(
    program: Program,
    platform: str,
    *,
    level: Level = "lowered",
    classifier: Classifier | None = None,
    seconds: Callable[[OpSite, str], float] | None = None,
    own: tuple[str, ...] = (),
) -> Census:
    """Classify every op of ``program`` for ``platform``, weighting each by its call count.

    With ``seconds`` (an op's estimated run time, given the op and its layer), the census
    also sums estimated time per layer and library, call-weighted like the counts and
    weighted by the known trip counts of the loops it runs in (``OpSite.runs``). Each
    kernel is at its user's line (``own``: installed packages whose lines are the user's).
    """
    __tracebackhide__ = True  # a classify hook's error shows the user's conftest

    def default(platform: str, op: str, target: str | None) -> Classification:
        return _classify_cached(platform, op, target, level)

    walk = _Walk(
        program=program,
        platform=platform,
        classifier=classifier or default,
        seconds=seconds,
        own=tuple(own),
    )
    counts, xla_kinds, timed, collectives = walk.function(program.entry, None)
    kernels = tuple(
        sorted(
            (
                Kernel(
                    layer=c.layer,
                    name=name,
                    kind=c.kind,
                    library=c.library,
                    location=location,
                    count=n,
                )
                for (c, name, location), n in counts.items()
            ),
            key=lambda k: (k.layer, k.name, str(k.location or "")),
        )
    )
    return Census(
        platform=platform,
        level=level,
        kernels=kernels,
        xla_ops=sum(xla_kinds.values()),
        xla_kinds=dict(sorted(xla_kinds.items())),
        estimated_seconds=tuple(
            (layer, library, float(t))
            for (layer, library), t in sorted(timed.items(), key=_layer_library)
        ),
        collectives=_collective_counts(collectives),
    )


def _collective_counts(found: Counter[tuple[str, bool]]) -> tuple[CollectiveCount, ...]:
    kinds = sorted({kind for kind, _ in found})
    return tuple(
        CollectiveCount(
            kind=kind,
            count=found[(kind, False)] + found[(kind, True)],
            inserted=found[(kind, True)],
        )
        for kind in kinds
    )


def program_to_dict(program: Program) -> dict[str, Any]:
    """A JSON-ready form of ``program`` (for the compiled-level cache)."""
    return {
        "entry": program.entry,
        **({"partitions": program.partitions} if program.partitions != 1 else {}),
        **({"warnings": list(program.warnings)} if program.warnings else {}),
        **({"memory": program.memory.to_dict()} if program.memory is not None else {}),
        **({"entry_layout": program.entry_layout} if program.entry_layout else {}),
        "functions": {
            name: [[s.op, s.target, s.location, s.flops, s.bytes, *_multiplicity(s)] for s in sites]
            for name, sites in program.functions.items()
        },
    }


def _multiplicity(site: OpSite) -> list[Any]:
    if site.operand_types or site.result_types or site.attributes:
        details = {
            "in": list(site.operand_types),
            "out": list(site.result_types),
            "attributes": [list(pair) for pair in site.attributes],
        }
        return [site.count, site.runs, details]
    if site.runs != 1:
        return [site.count, site.runs]
    return [site.count] if site.count != 1 else []


def program_from_dict(data: Mapping[str, Any]) -> Program:
    """The inverse of :func:`program_to_dict`; raises ``KeyError``/``TypeError``/``ValueError``
    on anything else. Sites of three fields (no ``flops``/``bytes``: older entries) read as
    costing nothing; a sixth field is the site's ``count``, a seventh its ``runs`` (1 when
    absent) and an eighth its types and attributes (``{"in", "out", "attributes"}``)."""
    functions: dict[str, tuple[OpSite, ...]] = {}
    for name, sites in data["functions"].items():
        functions[str(name)] = tuple(_site_from_list(site) for site in sites)
    partitions = data.get("partitions", 1)
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise ValueError(f"not a partition count: {partitions!r:.80}")
    warnings = data.get("warnings", [])
    if not isinstance(warnings, list):
        raise ValueError(f"not a list of warnings: {warnings!r:.80}")
    memory = data.get("memory")
    if memory is not None and not isinstance(memory, Mapping):
        raise ValueError(f"not a memory count: {memory!r:.80}")
    return Program(
        entry=str(data["entry"]),
        functions=functions,
        partitions=partitions,
        warnings=tuple(str(w) for w in warnings),
        memory=None if memory is None else CompiledMemory.from_stats(memory),
        entry_layout=str(data.get("entry_layout", "")),
    )


def _site_from_list(site: Any) -> OpSite:
    if not isinstance(site, list) or len(site) not in (3, 5, 6, 7, 8):
        raise ValueError(f"not an op site: {site!r:.80}")
    op, target, location = site[:3]
    flops, moved = (site[3], site[4]) if len(site) >= 5 else (0.0, 0.0)
    count = site[5] if len(site) >= 6 else 1
    runs = site[6] if len(site) >= 7 else 1
    details = site[7] if len(site) == 8 else {}
    for name, value in (("count", count), ("runs", runs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"not an op site {name}: {value!r:.80}")
    if not isinstance(details, dict):
        raise ValueError(f"not an op site's types: {details!r:.80}")
    return OpSite(
        op=str(op),
        target=None if target is None else str(target),
        location=None if location is None else str(location),
        flops=float(flops),
        bytes=float(moved),
        count=count,
        runs=runs,
        operand_types=tuple(str(t) for t in details.get("in", ())),
        result_types=tuple(str(t) for t in details.get("out", ())),
        attributes=tuple((str(k), str(v)) for k, v in details.get("attributes", ())),
    )
