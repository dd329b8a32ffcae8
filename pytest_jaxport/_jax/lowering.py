"""Trace once, lower per platform (the StableHLO reader), execute where present, compile.

JAX is imported inside functions: the plugin's side imports this package only when a check or
the audit needs it, and a pytest run without portable tests never pays for JAX.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from pytest_jaxport._jax.adapters import (
    CALL_PRIMITIVES,
    KERNEL_PRIMITIVES,
    device_description,
    jax_release,
    kernel_label,
    missing_package,
    needs_hardware,
)
from pytest_jaxport._jax.arguments import FN_KEY
from pytest_jaxport._jax.callbacks import inert
from pytest_jaxport._jax.deviceless import deviceless_compile, deviceless_compile_partitioned
from pytest_jaxport._jax.jaxprs import (
    Evaluator,
    bind,
    consts_of,
    derived,
    equation_context,
    equations,
    is_jaxpr,
    opened,
    platform_branch,
    source_line,
)
from pytest_jaxport._jax.profile import measure
from pytest_jaxport.model import partitioner
from pytest_jaxport.model.census import (
    CALL_OPS,
    UNCOUNTED_OPS,
    OpSite,
    Program,
    StackFrame,
    is_library_file,
    location_text,
)
from pytest_jaxport.model.classification import CLASSIFICATION_RULES, NOT_RUNNABLE, classify
from pytest_jaxport.model.compare import Leaf, Outputs
from pytest_jaxport.model.config import TRANSFORMS
from pytest_jaxport.model.flops import FREE_OPS, op_cost
from pytest_jaxport.model.format_rules import is_notable
from pytest_jaxport.model.platforms import JAX_GPU, PLATFORMS
from pytest_jaxport.model.probe import Untraced

if TYPE_CHECKING:
    import jax
    from jax._src.interpreters.mlir import LoweringParameters
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
    from jax.stages import Lowered, Traced
    from jaxlib.mlir import ir

# Ops whose regions are reducer computations applied per element, not kernels of their own.
_REDUCER_OPS = frozenset(
    {
        "stablehlo.reduce",
        "stablehlo.reduce_window",
        "stablehlo.sort",
        "stablehlo.scatter",
        "stablehlo.select_and_scatter",
        "stablehlo.all_reduce",
        "stablehlo.reduce_scatter",
    }
)


class LoweringFailure(Exception):
    """JAX could not lower (or compile, or run) the function for one platform.

    ``compiled`` is the executable when compiling succeeded and running failed, ``None``
    otherwise; ``stage`` says which step failed (``lower``, ``compile`` or ``run``).
    """

    def __init__(self, message: str, *, stage: str = "lower", compiled: Any = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.compiled = compiled


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """The outputs of one run: as JAX returned them, and as host arrays for comparison."""

    platform: str
    value: object
    outputs: Outputs
    compiled: Any = None
    """The executable that produced ``value`` (a ``jax.stages.Compiled``)."""
    rerun: Callable[[], object] | None = None
    """Runs the executable again on the same arguments and waits (for profiling)."""
    inserted: tuple[OpSite, ...] | None = None
    """The collectives the SPMD partitioner inserted when this executable was compiled
    (``partitioner.inserted_collectives``), where :func:`execute` was asked to record them
    and could; ``None`` otherwise."""


def describe_error(error: BaseException) -> str:
    """One line for a report: the exception type and the first line of its message, and
    what to install where a missing package caused it."""
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    text = f"{type(error).__name__}: {first}"[:500]
    hint = missing_package(text)
    return text if hint is None else f"{text} [{hint}]"


@functools.cache
def present_platforms() -> tuple[str, ...]:
    """Platforms with a device on this machine, the default backend first."""
    import jax

    found: list[str] = []
    for platform in PLATFORMS:
        try:
            if jax.devices(platform):
                found.append(platform)
        except RuntimeError:
            continue
    default = default_platform()
    return tuple(sorted(found, key=lambda p: p != default))


@functools.cache
def default_platform() -> str:
    """The platform plain ``jax.jit`` runs on here (``cuda``/``rocm`` rather than ``gpu``)."""
    import jax

    device = jax.devices()[0]
    for platform in JAX_GPU:  # JAX's "gpu": cuda, rocm or oneapi
        try:
            if device in jax.devices(platform):
                return platform
        except RuntimeError:
            continue
    return str(device.platform)


@functools.cache
def device_kind(platform: str) -> str:
    """The kind of this machine's first ``platform`` device (``NVIDIA H100 80GB HBM3``)."""
    import jax

    return str(jax.devices(platform)[0].device_kind)


def versions() -> dict[str, str]:
    """jax and jaxlib versions, for reports and cache keys."""
    return dict(_versions())


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    # importlib.metadata scans sys.path on every call (about 1.5 ms): once per process
    from importlib.metadata import version

    return (("jax", version("jax")), ("jaxlib", version("jaxlib")))


class Untraceable(Exception):
    """JAX cannot trace the function on this machine: a lowering rule's trace-time check
    wants something absent here (cuDNN, for ``implementation="cudnn"`` attention). Not the
    user's error and not a failure to lower: ``untraced`` says what is missing."""

    def __init__(self, untraced: Untraced) -> None:
        super().__init__(f"needs {untraced.needs} ({untraced.error})")
        self.untraced = untraced


_TRACE_NEEDS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    # jax._src.cudnn checks cuDNN's version while tracing: "cuDNN is not detected." without
    # the jax CUDA plugin, "cuDNN not found." with the plugin but without cuDNN's library.
    (re.compile(r"\bcuDNN (?:is not detected|not found)"), "cuda", "cuDNN"),
)


def trace(
    fn: Callable[..., object],
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    described: Mapping[str, str] | None = None,
) -> Trace:
    """``jax.jit(fn).trace(*args, **kwargs)``: once per check, reused for every platform.

    ``described`` maps a platform to the device kind to describe where JAX asks which GPU
    (or TPU) it lowers for (default :data:`jax_adapters.DESCRIBED_GPUS`,
    :data:`jax_adapters.DESCRIBED_TPU`). Raises :class:`Untraceable`
    when tracing needs what this machine lacks; any other error is the function's own and
    propagates unchanged.
    """
    __tracebackhide__ = True  # the function's own error shows the user's frames, not ours
    import jax

    def again() -> Traced:
        __tracebackhide__ = True
        return jax.jit(fn).trace(*args, **kwargs)

    try:
        traced = again()
    except RuntimeError as e:
        for pattern, platform, needs in _TRACE_NEEDS:
            if pattern.search(str(e)):
                untraced = Untraced(platform=platform, needs=needs, error=describe_error(e))
                break
        else:
            raise
        raise Untraceable(untraced) from None
    return Trace(traced, again, described)


class Trace:
    """A traced function (``jax.stages.Traced``) that can be traced again for a GPU or TPU
    that is not here.

    Its :meth:`lower` lowers the trace; where that fails for one platform because JAX asked
    for its device (:func:`jax_adapters.needs_hardware`) and this JAX can describe one
    (:func:`jax_adapters.device_description`), it traces again inside the description and
    lowers that trace instead. JAX 0.11+ asks for a GPU in its Pallas GPU lowering rules,
    0.10+ for a TPU in some Pallas TPU rules; a described trace cannot be compiled for cpu,
    so it never replaces the first. A failure of the described trace is the platform's
    finding.
    """

    __slots__ = ("_again", "_described", "traced")

    def __init__(
        self,
        traced: Traced,
        again: Callable[[], Traced],
        described: Mapping[str, str] | None = None,
    ) -> None:
        self.traced = traced
        self._again = again
        self._described = described or {}

    @property
    def jaxpr(self) -> ClosedJaxpr:
        closed: ClosedJaxpr = self.traced.jaxpr  # untyped in JAX
        return closed

    def lower(
        self,
        *,
        lowering_platforms: tuple[str, ...] | None,
        _private_parameters: LoweringParameters | None = None,
    ) -> Lowered:
        """Lowered for ``lowering_platforms``; ``_private_parameters``: JAX's lowering
        parameters, as ``jax.stages.Traced.lower`` takes them (:func:`callbacks.inert`)."""
        lowered: Lowered
        try:
            lowered = self.traced.lower(
                lowering_platforms=lowering_platforms, _private_parameters=_private_parameters
            )
            return lowered
        except Exception as e:
            description = None
            if (
                lowering_platforms is not None
                and len(lowering_platforms) == 1
                and needs_hardware(describe_error(e))
            ):
                (platform,) = lowering_platforms
                description = device_description(platform, self._described.get(platform))
            if description is None:
                raise
        with description:
            described = self._again()
        lowered = described.lower(
            lowering_platforms=lowering_platforms, _private_parameters=_private_parameters
        )
        return lowered


_LOCATION_FRAMES = 100
"""Frames kept in each op's MLIR location (JAX's default in recent releases; 10 in 0.6): enough
that the user's own frame survives a deep stack inside a library (flax, diffrax)."""


@contextlib.contextmanager
def _locations_reach_user_code() -> Iterator[None]:
    """A context in which lowering keeps at least :data:`_LOCATION_FRAMES` frames, and the
    lowerings this package makes share MLIR contexts (:class:`_SharedIrContexts`)."""
    from jax._src import config

    limit = config.traceback_in_locations_limit
    with (
        _SHARED_IR_CONTEXTS,
        contextlib.nullcontext() if limit.value >= _LOCATION_FRAMES else limit(_LOCATION_FRAMES),
    ):
        yield


class _SharedIrContexts:
    """While entered, the module this package's lowering makes (the first context JAX asks
    for, ``mlir.make_ir_context``) is built in a context shared with the previous lowerings
    rather than a new one: loading every dialect costs ~3 ms, a fifth of lowering a small
    program for three platforms at once. Only the first: a lowering rule that lowers and
    compiles a program of its own while the module is being built (an eager op inside
    equinox's ``error_if``) must not share the context, whose insertion point is the outer
    module's. A context keeps every type and location it ever uniqued, so one serves
    :data:`USES` lowerings and is then dropped (the modules lowered in it keep it alive while
    they live). Other threads, and JAX's own lowerings, get their own contexts as always."""

    USES = 64

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._context: Any = None
        self._uses = 0
        self._owner: int | None = None
        self._depth = 0
        self._original: Callable[[], Any] | None = None
        self._first = False

    def __enter__(self) -> None:
        import threading

        from jax._src.interpreters import mlir

        with self._lock:
            self._depth += 1
            if self._depth > 1 or hasattr(mlir, "_thread_local_context"):
                return  # (jax 0.12+ reuses each context ten times itself)
            original = mlir.make_ir_context
            self._original, self._owner = original, threading.get_ident()
            self._first = True

            @functools.wraps(original)
            def make_ir_context() -> Any:
                if threading.get_ident() != self._owner or not self._first:
                    return original()
                self._first = False
                if self._context is None or self._uses >= self.USES:
                    self._context, self._uses = original(), 0
                self._uses += 1
                return self._context

            mlir.make_ir_context = make_ir_context

    def __exit__(self, *exc: object) -> None:
        from jax._src.interpreters import mlir

        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._original is not None:
                mlir.make_ir_context = self._original
                self._original = self._owner = None


_SHARED_IR_CONTEXTS = _SharedIrContexts()


@contextlib.contextmanager
def warnings_filtered(action: str, show: Callable[..., None] | None = None) -> Iterator[None]:
    """Every warning raised inside handled by ``action`` (``"ignore"``, or ``"always"`` with
    ``show`` in place of ``warnings.showwarning``), ahead of every filter the suite set
    (``-W error`` included), without touching what the suite sees after:
    ``warnings.catch_warnings`` would reset Python's "shown once per place" registries on
    exit, and a warning the suite's code gives at every trace (diffrax's complex-dtype
    warning) would then be shown again after each check or audited computation."""
    entry = (action, None, Warning, None, 0)
    filters = cast(list[Any], warnings.filters)
    shown = warnings.showwarning
    filters.insert(0, entry)
    if show is not None:
        warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
        for i, item in enumerate(filters):
            if item is entry:
                del filters[i]
                break


def warnings_kept(kept: list[str]) -> contextlib.AbstractContextManager[None]:
    """Every warning raised inside (JAX's, while pytest-jaxport lowers for a platform not
    present here) appended to ``kept`` as ``Category: message``, each once, instead of shown.

    That lowering is pytest-jaxport's doing, not the test's (a Pallas kernel on the tpu
    branch of a ``platform_dependent`` is lowered for cuda too, and JAX says its GPU backend
    is deprecated), so the warning belongs in the check's record, not in pytest's warnings
    summary, and never fails a run with ``-W error``."""

    def keep(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
        said = f"{category.__name__}: {message}"
        if said not in kept:
            kept.append(said)

    return warnings_filtered("always", keep)


def lower(traced: Any, platform: str) -> Any:
    """Lower a traced function for ``platform``; no hardware for it is needed."""
    try:
        with _locations_reach_user_code():
            return traced.lower(lowering_platforms=(platform,))
    except LoweringFailure:
        raise
    except Exception as e:  # JAX raises many types here; each is a finding, not a crash
        raise LoweringFailure(describe_error(e)) from e


def refuse_unrunnable(program: Program, platform: str) -> None:
    """Raise :class:`LoweringFailure` where ``program`` holds a kernel ``platform`` cannot
    run (:data:`targets.NOT_RUNNABLE`), as the JAX releases that refuse to lower it do."""
    from fnmatch import fnmatchcase

    patterns = NOT_RUNNABLE.get(platform, ())
    if not patterns:
        return
    for sites in program.functions.values():
        for site in sites:
            target = site.target if site.op == "stablehlo.custom_call" else None
            if target is not None and any(fnmatchcase(target, p) for p in patterns):
                kind = classify(platform, site.op, target).kind
                raise LoweringFailure(
                    f"ValueError: {target} ({kind}) does not run on {platform}; jax "
                    f"{jax_release()} lowers it for {platform} all the same, later releases "
                    "refuse to"
                )


PLATFORM_INDEPENDENT = frozenset(
    {
        # elementwise
        "abs", "acos", "acosh", "add", "and", "asin", "asinh", "atan", "atan2", "atanh",
        "cbrt", "ceil", "clamp", "complex", "conj", "cos", "cosh", "div", "eq", "exp",
        "exp2", "expm1", "floor", "ge", "gt", "imag", "integer_pow", "is_finite", "le",
        "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "nextafter",
        "not", "or", "pow", "real", "rem", "round", "rsqrt", "select_n", "shift_left",
        "shift_right_arithmetic", "shift_right_logical", "sign", "sin", "sinh", "sqrt",
        "square", "sub", "tan", "tanh", "xor", "convert_element_type", "bitcast_convert_type",
        "reduce_precision", "copy", "copy_p",
        # shapes and data movement
        "broadcast_in_dim", "concatenate", "dynamic_slice", "dynamic_update_slice",
        "expand_dims", "gather", "iota", "pad", "reshape", "rev", "scatter", "slice", "split",
        "squeeze", "transpose",
        # reductions
        "argmax", "argmin", "reduce_and", "reduce_max", "reduce_min", "reduce_or",
        "reduce_prod", "reduce_sum", "reduce_xor",
        # calls and control flow, whose bodies are checked too
        "pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
        "custom_vjp_call_jaxpr", "remat", "checkpoint", "cond", "while", "scan",
    }
)  # fmt: skip
"""JAX primitives whose lowering is one rule for every platform, which consults no platform:
a program of only these lowers to the same StableHLO everywhere. Each is checked against
JAX's registry of platform-specific rules as well (``dot_general`` has its own rules on cpu
and tpu, ``scatter-add`` on GPUs: those are lowered per platform, as is anything else)."""


def same_on_every_platform(traced: object, platforms: Sequence[str]) -> bool:
    """Whether ``traced``'s program lowers to the same module for every one of ``platforms``
    (only :data:`PLATFORM_INDEPENDENT` primitives, none with a platform's own rule): then one
    platform's lowering is every platform's, and the others need no lowering of their own."""
    from jax._src.interpreters import mlir

    closed = getattr(traced, "jaxpr", None)
    registry = getattr(mlir, "_platform_specific_lowerings", None)
    if closed is None or registry is None:  # (a JAX without that registry: lower each)
        return False
    specific = [registry.get(p, {}) for p in platforms]
    return all(
        eqn.primitive.name in PLATFORM_INDEPENDENT
        and not any(eqn.primitive in rules for rules in specific)
        for eqn in equations(closed)
    )


def lower_together(traced: Any, platforms: Sequence[str]) -> dict[str, Program] | None:
    """The programs of several platforms from one multi-platform lowering (about 2x faster
    than lowering for each), or ``None`` when JAX cannot lower them together: a rule that
    refuses multi-platform lowering (Python callbacks, some Pallas backends) or one
    platform's failure. Then lower for each platform: a failure is that platform's finding.
    """
    try:
        with _locations_reach_user_code():
            lowered = traced.lower(lowering_platforms=tuple(platforms))
        programs = read_programs(lowered, len(platforms))
    except Exception:  # whatever went wrong, lowering per platform says it per platform
        return None
    return dict(zip(platforms, programs, strict=True))


def lowering_settings() -> str:
    """JAX's configuration as text (flags such as the partitioner change what is lowered),
    made again only when a value changed (the text of ~130 settings costs ~0.15 ms; it is
    asked for every computation an audit identifies)."""
    import jax

    values = jax.config.values
    last = _SETTINGS[0]
    try:
        if last is not None and last[0] == values:
            return last[1]
    except Exception:  # a value that cannot be compared: make the text
        pass
    text = repr(sorted(values.items()))
    _SETTINGS[0] = (values, text)
    return text


_SETTINGS: list[tuple[dict[str, Any], str] | None] = [None]


def census_key_parts(traced: Any, own: tuple[str, ...] = ()) -> tuple[str, str]:
    """``(jaxpr text, source lines)``: what the lowered-level cache keys a census by, made
    once per jaxpr while it lives (a program JAX traced once is often called with
    arguments that differ only in what the jaxpr does not show, weak types or placement).

    The closed jaxpr's text (with its argument types) decides the lowered module's ops; it
    has no source locations, so the second part lists, for every equation (sub-jaxprs
    included, in order), the source line a census would show for it: its innermost user
    frame outside installed packages (else its innermost user frame), as JAX's own filter
    of internal frames finds them. An edit that moves any of those lines changes the key.
    """
    closed = traced.jaxpr
    key = (id(closed), own)
    found = _KEY_PARTS.get(key)
    if found is not None and found[0]() is closed:
        return found[1]
    parts = _key_parts(closed, own)
    try:
        alive = weakref.ref(closed, lambda _: _KEY_PARTS.pop(key, None))
    except TypeError:  # a jaxpr that cannot be referred to weakly: made every time
        return parts
    _KEY_PARTS[key] = (alive, parts)
    return parts


_KEY_PARTS: dict[tuple[int, tuple[str, ...]], tuple[weakref.ref[ClosedJaxpr], tuple[str, str]]] = {}


def _key_parts(closed: ClosedJaxpr, own: tuple[str, ...]) -> tuple[str, str]:
    text = f"{closed.in_avals}\n{closed.out_avals}\n{_program_text(closed)}"
    memo: dict[object, str] = {}
    lines = [source_line(e.source_info, memo, own) for e in equations(closed, repeats=True)]
    return text, "\n".join(lines)


def _program_text(closed: ClosedJaxpr) -> str:
    """The closed jaxpr as text of the key's own: per jaxpr its inputs, then per equation its
    results, primitive, every parameter (``repr``; a nested jaxpr as its own text, inline)
    and operands, then its outputs. Variables are numbered per jaxpr in order of appearance
    and shown with their types (weak types included); a scalar literal is its exact value
    and dtype.

    Not JAX's printer: that formats every literal through NumPy's array printing (about 3x
    the time of this on a diffrax solve, where an audit keys every computation it meets), and
    fails on a ``frozenset`` parameter of objects without an order. A nested jaxpr is made
    once per object but written wherever it is used, so whether JAX shares one object
    between two equations (it caches traces) does not change the text."""
    from jax._src import core

    types: dict[object, str] = {}
    texts: dict[int, str] = {}

    def literal(value: Any) -> str:
        try:
            if getattr(value, "ndim", None) == 0:
                return f"{value.item()!r}:{value.dtype}"
        except Exception:  # a scalar without a plain value: as it prints
            pass
        return repr(value)

    def value(item: object) -> str:
        if is_jaxpr(item):
            return "{" + text(item) + "}"
        if type(item) in (tuple, list):
            items = cast("Sequence[object]", item)
            if any(is_jaxpr(i) for i in items):
                return "(" + ", ".join(value(i) for i in items) + ")"
        return repr(item)

    def text(jaxpr: Jaxpr | ClosedJaxpr) -> str:
        done = texts.get(id(jaxpr))
        if done is not None:
            return done
        inner = getattr(jaxpr, "jaxpr", jaxpr)
        names: dict[Var, str] = {}

        def name(var: Var | Literal) -> str:
            if isinstance(var, core.Literal):
                return literal(var.val)
            found = names.get(var)
            if found is None:
                shown = types.get(var.aval)
                if shown is None:
                    shown = types[var.aval] = str(var.aval)
                found = names[var] = f"v{len(names)}:{shown}"
            return found

        lines = [f"in {', '.join(map(name, (*inner.constvars, *inner.invars)))}"]
        for eqn in inner.eqns:
            params = ", ".join(f"{k}={value(v)}" for k, v in sorted(eqn.params.items()))
            lines.append(
                f"{', '.join(map(name, eqn.outvars))} = {eqn.primitive.name}[{params}] "
                f"{', '.join(map(name, eqn.invars))}"
            )
        lines.append(f"out {', '.join(map(name, inner.outvars))}")
        done = texts[id(jaxpr)] = "\n".join(lines)
        return done

    return text(closed)


def sharding_text(args: Sequence[object], kwargs: Mapping[str, object]) -> str:
    """The shardings of the arguments placed on more than one device, as text (``""`` for
    an unsharded call): part of what decides a partitioned program's collectives."""
    import jax

    lines = []
    for i, leaf in enumerate(jax.tree_util.tree_leaves((tuple(args), dict(kwargs)))):
        sharding = getattr(leaf, "sharding", None)
        if sharding is not None and len(sharding.device_set) > 1:
            lines.append(f"{i}: {sharding!r}")
    return "\n".join(lines)


def read_program(lowered: Lowered) -> Program:
    """The ops of every function of the lowered StableHLO module, for the census."""
    (program,) = read_programs(lowered, 1)
    return program


def read_programs(lowered: Lowered, platforms: int) -> tuple[Program, ...]:
    """One :class:`Program` per platform of a lowering for ``platforms`` platforms at once.

    A multi-platform lowering (``traced.lower(lowering_platforms=(p0, p1, ...))``, the form
    ``jax.export`` uses) passes the platform's index to every function as an argument marked
    ``jax.global_constant = "_platform_index"``, and emits ``stablehlo.case`` only where a
    lowering rule differs per platform: cases on that index map it to a rule's index, and a
    case on the rule's index holds each rule's ops. Program ``i`` is the module as platform
    ``i`` runs it: every case whose index is known for ``i`` (the platform index, a scalar
    ``i32`` constant, or a case that returns such values) is replaced by the ops of the branch
    it takes. The module is read once; functions without such cases are shared.

    A single-platform lowering (``platforms=1``) gets the same treatment: there the index
    arrives as a constant (``lax.platform_dependent``), so both forms give the same program.
    """
    module = cast("ir.Module", lowered.compiler_ir("stablehlo"))
    funcs: dict[str, ir.OpView] = {}
    public: list[str] = []
    for func in module.body.operations:
        name = _symbol(func.attributes["sym_name"])
        funcs[name] = func
        if "sym_visibility" not in func.attributes:
            public.append(name)
    entry = "main" if "main" in funcs else (public or list(funcs) or ["main"])[0]
    reader = _Reader(platforms, funcs)
    reader.read(entry, ())  # and, call by call, every function some platform can reach
    functions: list[dict[str, tuple[OpSite, ...]]] = [{} for _ in range(platforms)]
    for name, items in reader.items.items():
        for i, sites in enumerate(_project(items, platforms)):
            functions[i][name] = sites
    count = _partition_count(module)
    return tuple(
        Program(entry=entry, functions=_reachable(entry, f), partitions=count) for f in functions
    )


def _partition_count(module: ir.Module) -> int:
    """``mhlo.num_partitions`` of a module (1 when it has none)."""
    attributes = module.operation.attributes
    if "mhlo.num_partitions" not in attributes:
        return 1
    found = re.search(r"-?\d+", str(attributes["mhlo.num_partitions"]))
    return max(int(found.group()), 1) if found else 1


def _reachable(
    entry: str, functions: dict[str, tuple[OpSite, ...]]
) -> dict[str, tuple[OpSite, ...]]:
    """``functions`` without those no call from ``entry`` reaches on this platform (a
    multi-platform module holds functions only another platform's branches call)."""
    seen = {entry}
    pending = [entry]
    while pending:
        for site in functions.get(pending.pop(), ()):
            if site.op in CALL_OPS and site.target is not None and site.target not in seen:
                seen.add(site.target)
                pending.append(site.target)
    if len(seen) >= len(functions):
        return functions
    return {name: sites for name, sites in functions.items() if name in seen}


_PLATFORM_INDEX = '"_platform_index"'
_SCALAR_INDEX = "tensor<i32>"
_DENSE_INT = re.compile(r"dense<(-?\d+)>")
_INTEGER_SCALAR = re.compile(r"tensor<u?i\d+>")


@dataclass(frozen=True, slots=True)
class _Switch:
    """A case on a platform-dependent index: per platform, the branch it takes."""

    branches: tuple[list[_Item], ...]
    taken: tuple[int, ...]


_Site = tuple[
    str, "str | None", "str | None", float, float, tuple[str, ...], tuple[str, ...],
    tuple[tuple[str, str], ...],
]  # fmt: skip
"""An op as read: ``(op, target, location, flops, bytes, operand types, result types,
attributes)``, an :class:`OpSite` to be."""
_Item = _Site | _Switch
_Known = dict["ir.Value[ir.Type]", tuple[int, ...]]
"""What the reader knows of a value: the ``i32`` it holds, per platform."""
_CostKey = tuple[str, "str | None", tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]


def _project(items: list[_Item], platforms: int) -> list[tuple[OpSite, ...]]:
    """Per platform, the sites of ``items`` with every switch resolved, identical ops grouped
    into one site with a count (in the order they first occur)."""
    if not any(isinstance(item, _Switch) for item in items):
        shared = _grouped(items)  # type: ignore[arg-type]  # no switch: sites only
        return [shared] * platforms

    def flatten(items: list[_Item], platform: int, out: list[_Site]) -> None:
        for item in items:
            if isinstance(item, _Switch):
                flatten(item.branches[item.taken[platform]], platform, out)
            else:
                out.append(item)

    projected = []
    for platform in range(platforms):
        out: list[_Site] = []
        flatten(items, platform, out)
        projected.append(_grouped(out))
    return projected


def _grouped(sites: list[_Site]) -> tuple[OpSite, ...]:
    grouped = []
    for (op, target, location, flops, moved, operands, results, attributes), n in Counter(
        sites
    ).items():
        grouped.append(
            OpSite(op=op, target=target, location=location, flops=flops, bytes=moved, count=n,
                   operand_types=operands, result_types=results, attributes=attributes)
        )  # fmt: skip
    return tuple(grouped)


class _Reader:
    """Reads op sites off MLIR regions, resolving cases on known (per-platform) indices."""

    def __init__(self, platforms: int, funcs: Mapping[str, ir.OpView]) -> None:
        self.platforms = platforms
        self.funcs = funcs
        self.index = tuple(range(platforms))
        """What the platform-index argument holds, per platform."""
        self.items: dict[str, list[_Item]] = {}
        self.types: dict[ir.Type, str] = {}  # MLIR types are uniqued: stringify each one once
        self.costs: dict[_CostKey, tuple[float, float]] = {}
        self.locations: dict[ir.Attribute, str] = {}
        self.stacks: dict[ir.Attribute, tuple[StackFrame, ...] | None] = {}  # see location_text
        self.free: dict[tuple[str, frozenset[int]], bool] = {}  # see index_free_call
        self.folded: set[ir.Value[ir.Type]] = set()  # see folds

    def read(self, name: str, index_arguments: Sequence[int]) -> None:
        """Read function ``name`` (once), knowing which arguments hold the platform index.

        Functions lowered from a jaxpr mark that argument (``jax.global_constant``); the
        functions JAX emits for cached lowering rules do not, but receive it from their
        callers: a call passes it on, so functions are read in call order from the entry.
        """
        if name in self.items or name not in self.funcs:
            return
        items: list[_Item] = []
        self.items[name] = items  # before reading: StableHLO forbids recursion, but never loop
        func = self.funcs[name]
        known: _Known = {}
        if func.regions and func.regions[0].blocks:
            arguments = func.regions[0].blocks[0].arguments
            for i in {*index_arguments, *_marked_index_arguments(func)}:
                if i < len(arguments):
                    known[arguments[i]] = self.index
        for region in func.regions:
            self.collect(region, items, known)

    def type_texts(self, values: Iterable[ir.Value[ir.Type]]) -> list[str]:
        types = self.types
        texts = []
        for value in values:
            kind = value.type
            text = types.get(kind)
            if text is None:
                text = types[kind] = str(kind)
            texts.append(text)
        return texts

    def collect(self, region: ir.Region, items: list[_Item], known: _Known) -> None:
        """Append the sites of ``region`` to ``items``; ``known`` maps values whose content
        is a known ``i32`` per platform to those values (updated as constants are read)."""
        append = items.append
        for block in region.blocks:
            for op in block.operations:
                operation = op.operation
                name = operation.name
                if name == "stablehlo.case":
                    index = known.get(operation.operands[0])
                    if index is not None:
                        self.resolve_case(operation, index, items, known)
                        continue
                    if self.platforms > 1 and _per_platform(
                        operation.operands[0], known, self.index_free_call
                    ):
                        raise ValueError(
                            "a case on a value computed from the platform index in a way the "
                            "census cannot resolve; lower for each platform instead"
                        )
                elif name == "stablehlo.convert" and self.platforms > 1:
                    value = known.get(operation.operands[0])
                    if value is not None and len(set(value)) > 1:
                        # the platform index as i32 (JAX converts it when it is i64, under
                        # x64): plumbing a single-platform lowering does not have
                        known[operation.results[0]] = value
                        continue
                target = None
                if name == "stablehlo.custom_call":
                    target = _symbol(operation.attributes["call_target_name"])
                elif name in CALL_OPS:
                    target = _symbol(operation.attributes["callee"])
                    self.read(target, [
                        i for i, value in enumerate(operation.operands)
                        if known.get(value) == self.index
                    ] if self.platforms > 1 else ())  # fmt: skip
                if name in UNCOUNTED_OPS:  # no census counts them: not even a site
                    if name == "stablehlo.constant":
                        self.constant(operation, known)
                        self.folded.update(operation.results)
                    continue
                if self.folded and self.folds(operation):
                    continue  # XLA computes it while compiling: no kernel runs it
                if name in FREE_OPS and name not in _TYPED_FREE_OPS:
                    flops, moved, operand_types, result_types, attributes = _UNTYPED
                else:
                    flops, moved, operand_types, result_types, attributes = self.cost(
                        operation, target
                    )
                keep = _keeps_location(name) or any(map(is_notable, operand_types + result_types))
                location = self.location_text(operation.location) if keep else None
                append((name, target, location, flops, moved, operand_types, result_types,
                        attributes))  # fmt: skip
                if name not in _REDUCER_OPS:
                    if self.platforms > 1:
                        _forward_known(operation, known)
                    for nested in operation.regions:
                        self.collect(nested, items, known)

    def folds(self, operation: ir.Operation) -> bool:
        """Whether XLA folds ``operation`` into a constant while compiling (its results are
        then folded too): every operand derives from constants only, through ops XLA's
        constant folding evaluates (not a custom call, a call, control flow, a collective,
        random bits or anything with effects; not a result over XLA's size limit). An
        ``iota`` is not a constant to XLA (``jnp.eye(n) @ c`` is not folded); a broadcast of a
        constant is, to the ops it feeds (``jnp.full((n, n), c) @ d`` is; checked on the
        compiled CPU program), but is itself kept and counted. A dot of a rotation matrix
        built from a bound angle with a constant centre never reaches cuBLAS: counting it
        would be a gemm and a format finding no kernel has."""
        name = operation.name
        if name in _NOT_FOLDED or not name.startswith("stablehlo."):
            return False
        operands = operation.operands
        folded = self.folded
        if not operands or not all(operand in folded for operand in operands):
            return False
        if any(_elements(t) > _FOLDED_ELEMENTS for t in self.type_texts(operation.results)):
            return False
        folded.update(operation.results)
        # XLA never folds a broadcast itself (it would make constants larger): it stays, a
        # free op fused into its users, and only what it feeds folds.
        return name != "stablehlo.broadcast_in_dim"

    def index_free_call(self, operation: ir.Operation, handed: Sequence[int]) -> bool:
        """Whether ``operation`` is a call of a function whose results cannot depend on the
        values it is handed at positions ``handed`` (the platform index: the functions JAX
        lowers from jaxprs all receive it, most only to hand it on). They must be used by
        nothing but calls that hand them on to such functions in turn (a case on one,
        arithmetic on it or returning it makes the function depend on it)."""
        if operation.name not in CALL_OPS:
            return False
        try:
            callee = _symbol(operation.attributes["callee"])
            return self._index_free(callee, frozenset(handed), set())
        except Exception:  # bindings without use lists: assume it depends on the index
            return False

    def _index_free(self, name: str, handed: frozenset[int], visiting: set[str]) -> bool:
        found = self.free.get((name, handed))
        if found is not None:
            return found
        func = self.funcs.get(name)
        if func is None or name in visiting or not func.regions or not func.regions[0].blocks:
            return False
        visiting.add(name)
        arguments = func.regions[0].blocks[0].arguments
        free = True
        for i in sorted(handed | _marked_index_arguments(func)):
            if i >= len(arguments):
                continue
            for use in arguments[i].uses:
                owner = use.owner
                owner = getattr(owner, "operation", owner)
                if owner.name not in CALL_OPS or not self._index_free(
                    _symbol(owner.attributes["callee"]),
                    frozenset({use.operand_number}),
                    visiting,
                ):
                    free = False
                    break
            if not free:
                break
        visiting.discard(name)
        self.free[(name, handed)] = free
        return free

    def location_text(self, location: ir.Location) -> str:
        """The text of an op's location, once per distinct location (a uniqued attribute: the
        ops of one equation share it): its call stack, innermost frame first, up to the first
        frame that is the user's code (``census.is_library_file``; no census looks further,
        whatever ``own_packages`` says). ``str(location)`` would print every frame (a
        callsite chain of up to :data:`_LOCATION_FRAMES`, ~6 KB under a diffrax solve: slow
        to build, large to keep); it remains for locations this reader does not take apart.
        """
        try:
            attribute = location.attr
            text = self.locations.get(attribute)
        except (AttributeError, TypeError):  # bindings without it: as text every time
            return str(location)
        if text is None:
            frames = self.stack(location)
            text = str(location) if frames is None else location_text(frames)
            self.locations[attribute] = text
        return text

    def stack(self, location: ir.Location) -> tuple[StackFrame, ...] | None:
        """``location``'s frames, innermost first, up to the first that is the user's code
        (each callsite's read once: the callers many locations share); ``None`` for a location
        of a kind other than callsite, name and file, or bindings without their parts."""
        kind = _location_kind(location)
        if kind == "callsite":  # the callee's frames, then the caller's
            callsite = cast("ir.CallSiteLoc", location)  # jaxlib < 0.10: one Location class
            key = location.attr
            if key in self.stacks:
                return self.stacks[key]
            frames = self.stack(callsite.callee)
            if frames is not None and (not frames or is_library_file(frames[-1].file)):
                rest = self.stack(callsite.caller)
                frames = None if rest is None else frames + rest
            self.stacks[key] = frames
            return frames
        if kind == "name":  # JAX names each frame by its function
            named = cast("ir.NameLoc", location)
            frames = self.stack(named.child_loc)
            if frames is not None and len(frames) == 1 and not frames[0].function:
                return (replace(frames[0], function=named.name_str),)
            return frames
        if kind == "file":
            at = cast("ir.FileLineColLoc", location)
            return (StackFrame(file=at.filename, function="", line=at.start_line,
                               column=at.start_col),)  # fmt: skip
        return None

    def cost(self, operation: ir.Operation, target: str | None) -> _Typed:
        """``flops.op_cost`` of an op (computed once per distinct op, types and attributes),
        with its operand and result types and the attributes formats read."""
        name = operation.name
        operand_types = tuple(self.type_texts(operation.operands))
        result_types = tuple(self.type_texts(operation.results))
        attributes = _site_attributes(name, operation.attributes) if name in _ATTRIBUTES else ()
        key = (name, target, operand_types, result_types, attributes)
        found = self.costs.get(key)
        if found is None:
            found = self.costs[key] = op_cost(
                name, target, list(operand_types), list(result_types), dict(attributes)
            )
        return (*found, operand_types, result_types, attributes)

    def constant(self, operation: ir.Operation, known: _Known) -> None:
        """Remember the value of a scalar ``i32`` constant (a case index, maybe)."""
        [result] = operation.results
        if self.type_texts([result]) != [_SCALAR_INDEX]:
            return
        value = _DENSE_INT.fullmatch(str(operation.attributes["value"]).split(" :")[0])
        if value is not None:
            known[result] = (int(value.group(1)),) * self.platforms

    def resolve_case(
        self,
        operation: ir.Operation,
        index: tuple[int, ...],
        items: list[_Item],
        known: _Known,
    ) -> None:
        """A case whose index is known: only the branch each platform takes, without its
        ``stablehlo.return`` (the ops run inline); its results are known where every taken
        branch returns known values."""
        regions = list(operation.regions)
        last = len(regions) - 1
        # StableHLO: an index outside [0, N) takes the last branch
        taken = tuple(i if 0 <= i <= last else last for i in index)
        branches: list[list[_Item]] = []
        returned: list[list[tuple[int, ...] | None]] = []
        for number, region in enumerate(regions):
            if number not in taken:
                branches.append([])
                returned.append([])
                continue
            branch: list[_Item] = []
            self.collect(region, branch, known)  # without its stablehlo.return (uncounted)
            terminator = _terminator(region)
            branches.append(branch)
            returned.append(
                [known.get(v) for v in terminator.operands] if terminator is not None else []
            )
        for position, result in enumerate(operation.results):
            values = []
            for platform, branch_number in enumerate(taken):
                branch_values = returned[branch_number]
                value = branch_values[position] if position < len(branch_values) else None
                if value is None:
                    break
                values.append(value[platform])
            else:
                known[result] = tuple(values)
        if not any(branches[number] for number in set(taken)):
            return  # the index plumbing of lowering rules that differ per platform
        if len(set(taken)) == 1:
            items.extend(branches[taken[0]])
        else:
            items.append(_Switch(branches=tuple(branches), taken=taken))


_LOCATION_KINDS = {"CallSiteLoc": "callsite", "NameLoc": "name", "FileLineColLoc": "file"}


class _OneLocationClass(Protocol):
    """jaxlib 0.9's ``Location``: one class for every kind, which says its own."""

    def is_a_callsite(self) -> bool: ...
    def is_a_name(self) -> bool: ...
    def is_a_file(self) -> bool: ...


def _location_kind(location: ir.Location) -> str | None:
    """``"callsite"``, ``"name"``, ``"file"`` or ``None`` (another kind, or bindings that do
    not say). Up to jaxlib 0.9 one ``Location`` class answers ``is_a_callsite()`` and the
    like, and reading a part another kind has (``callee`` of a name) crashes the process;
    from 0.10 each kind is a class of its own."""
    try:
        if hasattr(location, "is_a_callsite"):
            old = cast("_OneLocationClass", location)
            if old.is_a_callsite():
                return "callsite"
            if old.is_a_name():
                return "name"
            return "file" if old.is_a_file() else None
        return _LOCATION_KINDS.get(type(location).__name__)
    except Exception:  # bindings without the predicates: the location's whole text instead
        return None


def _forward_known(operation: ir.Operation, known: _Known) -> None:
    """Make the known operands of a region-carrying op known inside its regions too.

    ``sdy.manual_computation`` (a ``shard_map`` body under Shardy) and
    ``sdy.named_computation`` are isolated from the values around them: the platform index
    reaches their ops as the block argument at its operand's position, and so does every
    other known operand. A ``stablehlo.while`` hands its operands to its regions the same
    way, but a carried value can change from one iteration to the next: only one the body
    returns unchanged (at the same position) is known inside.
    """
    operands = operation.operands
    if not any(operand in known for operand in operands):
        return
    regions = list(operation.regions)
    unchanged: set[int] | None = None
    if operation.name == "stablehlo.while" and len(regions) == 2:
        body = regions[1]
        arguments: Sequence[ir.Value[ir.Type]] = (
            list(body.blocks[0].arguments) if body.blocks else []
        )
        terminator = _terminator(body)
        returned = list(terminator.operands) if terminator is not None else []
        unchanged = {
            i for i, (argument, value) in enumerate(zip(arguments, returned, strict=False))
            if argument == value
        }  # fmt: skip
    for region in regions:
        if not region.blocks:
            continue
        arguments = region.blocks[0].arguments
        if len(arguments) != len(operands):
            continue  # not a region fed by the op's operands (a reducer's scalars, say)
        for i, (operand, argument) in enumerate(zip(operands, arguments, strict=True)):
            value = known.get(operand)
            if value is not None and (unchanged is None or i in unchanged):
                known[argument] = value


def _marked_index_arguments(func: ir.OpView) -> set[int]:
    """The positions of ``func``'s arguments marked as the platform index (functions lowered
    from a jaxpr mark it ``jax.global_constant``)."""
    if "arg_attrs" not in func.attributes:
        return set()
    attributes = cast("Iterable[ir.Attribute]", func.attributes["arg_attrs"])  # an ArrayAttr
    return {i for i, a in enumerate(attributes) if _PLATFORM_INDEX in str(a)}


def _per_platform(
    value: ir.Value[ir.Type],
    known: Mapping[ir.Value[ir.Type], tuple[int, ...]],
    index_free_call: Callable[[ir.Operation, Sequence[int]], bool] = lambda *_: False,
    depth: int = 8,
) -> bool:
    """Whether ``value`` is computed (within ``depth`` ops, through integer scalars) from a
    value that differs per platform: a case on it would take a different branch per platform,
    so counting all its branches for every platform would be wrong. The walk stops at array
    or floating-point values: a user's ``cond`` on data computed by a function that receives
    the platform index is not an index computation; nor does it go into the operands a call
    of an index-free function (``index_free_call``) hands on unused."""
    pending = [(value, 0)]
    seen: set[ir.Value[ir.Type]] = set()
    while pending:
        current, steps = pending.pop()
        found = known.get(current)
        if found is not None and len(set(found)) > 1:
            return True
        if steps >= depth or current in seen or not _INTEGER_SCALAR.fullmatch(str(current.type)):
            continue
        seen.add(current)
        owner = current.owner
        operation = getattr(owner, "operation", owner)
        operands = getattr(operation, "operands", None)
        if operands is not None:  # an op's result
            handed = [i for i, operand in enumerate(operands)
                      if len(set(known.get(operand, ()))) > 1]  # fmt: skip
            free = bool(handed) and index_free_call(cast("ir.Operation", operation), handed)
            pending.extend(
                (operand, steps + 1)
                for i, operand in enumerate(operands)
                if not (free and i in handed)
            )
            continue
        fed = _feeding_operand(current, cast("ir.Block", owner))  # an op's result has operands
        if fed is not None:  # a region's argument, fed by the operand of its op
            pending.append((fed, steps + 1))
    return False


def _feeding_operand(argument: ir.Value[ir.Type], block: ir.Block) -> ir.Value[ir.Type] | None:
    """The operand of the op around ``block`` that its argument ``argument`` receives (as in
    ``sdy.manual_computation`` or ``stablehlo.while``), else ``None``."""
    parent: ir.Operation | None = getattr(getattr(block, "owner", None), "operation", None)
    if parent is None or parent.name == "func.func":
        return None
    operands = list(parent.operands)
    arguments: list[ir.Value[ir.Type]] = list(block.arguments)
    if len(operands) != len(arguments) or argument not in arguments:
        return None
    return operands[arguments.index(argument)]


def _terminator(region: ir.Region) -> ir.Operation | None:
    for block in region.blocks:
        operations = list(block.operations)
        if operations:
            return operations[-1].operation
    return None


def _symbol(attribute: object) -> str:
    return str(attribute).strip('"').lstrip("@").strip('"')


@functools.lru_cache(maxsize=1024)
def _keeps_location(name: str) -> bool:
    """Whether ``read_program`` records the location of ``name`` ops.

    Only calls (their callees' ops inherit the call's line) and ops that can classify as
    something other than ``xla`` (custom calls, and ops a row of ``CLASSIFICATION_RULES`` names)
    ever show a location in a census; for every other op ``str(operation.location)`` would be
    most of the cost of reading the module. A ``pytest_jaxport_classify`` hook that turns
    such an op into a kernel reports it at its caller's line (the line that called the
    function it is in; none at the top level).
    """
    from fnmatch import fnmatchcase

    if name in ("stablehlo.custom_call", "func.call", "call"):
        return True
    return any(
        not rule.custom_call and fnmatchcase(name, rule.pattern) for rule in CLASSIFICATION_RULES
    )


_ATTRIBUTES = {
    "stablehlo.dot_general": ("algorithm", "dot_dimension_numbers", "precision_config"),
    "stablehlo.convolution": ("dimension_numbers", "precision_config"),
}
"""The attributes a site keeps, per op: what ``op_cost`` (dimension numbers) and format
findings (precision, dot algorithm, convolution layout) read."""

_TYPED_FREE_OPS = frozenset({"stablehlo.bitcast_convert"})
"""Ops that cost nothing but whose types a format rule reads (a float64 bitcast does not
compile for TPU)."""

_NOT_FOLDED = frozenset(
    {
        "stablehlo.custom_call", "stablehlo.case", "stablehlo.if", "stablehlo.while",
        "stablehlo.iota", "stablehlo.rng", "stablehlo.rng_bit_generator",
        "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.all_to_all",
        "stablehlo.reduce_scatter", "stablehlo.collective_permute",
        "stablehlo.collective_broadcast", "stablehlo.infeed", "stablehlo.outfeed",
        "stablehlo.send", "stablehlo.recv", "stablehlo.after_all", "stablehlo.create_token",
        "stablehlo.partition_id", "stablehlo.replica_id", "stablehlo.optimization_barrier",
        "stablehlo.composite",
    }
)  # fmt: skip
"""StableHLO ops XLA's constant folding leaves alone, whatever their operands
(``HloConstantFolding``: side effects, random bits, custom calls, control flow; an iota has
no operand, and XLA does not fold what an iota feeds)."""

_FOLDED_ELEMENTS = 45_000_000
"""XLA folds no result (nor operands) larger than this many elements
(``HloConstantFolding``'s ``kMaximumConstantSizeElements``)."""

_SHAPE = re.compile(r"tensor<((?:\d+x)*)")


def _elements(type_text: str) -> int:
    """How many elements a ``tensor<2x3xf32>`` holds (1 for a scalar or another type)."""
    found = _SHAPE.match(type_text)
    if found is None or not found.group(1):
        return 1
    return math.prod(int(d) for d in found.group(1).split("x") if d)


_Typed = tuple[float, float, tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]
"""``(flops, bytes, operand types, result types, attributes)`` of one op."""
_UNTYPED: _Typed = (0.0, 0.0, (), (), ())


def _site_attributes(name: str, attributes: ir.OpAttributeMap) -> tuple[tuple[str, str], ...]:
    """The :data:`_ATTRIBUTES` of a ``name`` op, as hashable pairs."""
    return tuple((key, str(attributes[key])) for key in _ATTRIBUTES[name] if key in attributes)


def to_outputs(value: object) -> Outputs:
    """Flatten a pytree of arrays into host arrays keyed by their path."""
    import jax

    flat, treedef = jax.tree_util.tree_flatten_with_path(value)
    leaves = tuple(_host_leaf(jax.tree_util.keystr(path), leaf) for path, leaf in flat)
    return Outputs(structure=str(treedef), leaves=leaves)


def _host_leaf(path: str, value: object) -> Leaf:
    """One output leaf on the host; a typed PRNG key as its data and implementation."""
    impl = key_impl(value)
    if impl is None:
        return Leaf(path=path, array=np.asarray(value))
    import jax

    return Leaf(
        path=path, array=np.asarray(jax.random.key_data(cast("jax.Array", value))), key_impl=impl
    )


def key_impl(value: object) -> str | None:
    """The implementation of a typed PRNG key array (``threefry2x32``), else ``None``."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or isinstance(dtype, np.dtype):  # numpy's (and ml_dtypes'): not keys
        return None
    import jax
    import jax.numpy as jnp

    if not jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    return str(jax.random.key_impl(cast("jax.Array", value)))  # a key array: its dtype says


def _compile_on(
    fn: Callable[..., object],
    lowered: Any,
    platform: str,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    partitioned: bool = False,
) -> tuple[Any, tuple[Any, ...], dict[str, Any], tuple[OpSite, ...] | None]:
    """The executable for ``platform`` (present here), the arguments to call it with, and,
    for a ``partitioned`` program compiled as lowered, the collectives partitioning added."""
    import jax

    if platform == default_platform():
        if partitioned:
            compiled, inserted = compile_partitioned(lowered)
            return compiled, tuple(args), dict(kwargs), inserted
        return lowered.compile(), tuple(args), dict(kwargs), None
    device = jax.devices(platform)[0]
    placed_args, placed_kwargs = jax.device_put((tuple(args), dict(kwargs)), device)
    fn = _for_platform(fn, platform)
    compiled = jax.jit(fn).trace(*placed_args, **placed_kwargs).lower().compile()
    return compiled, tuple(placed_args), dict(placed_kwargs), None


def compile_partitioned(lowered: Any) -> tuple[Any, tuple[OpSite, ...] | None]:
    """Compile ``lowered`` (for a platform present here) as usual, with XLA recording the
    module before and after SPMD partitioning; the executable and the collectives the
    partitioner inserted (``None`` when the record cannot be read). Compiling a program
    costs the same with the record; only its text files are written (then removed).

    An executable served from JAX's persistent compilation cache was not compiled, so it
    leaves no record: the program is then compiled once more, past that cache, for it.
    """
    compiled, inserted = _compile_recording(lowered)
    if inserted is None:
        with _persistent_cache_off():
            _, inserted = _compile_recording(lowered)
    return compiled, inserted


def _compile_recording(lowered: Any) -> tuple[Any, tuple[OpSite, ...] | None]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="jaxport-spmd-") as directory:
        compiled = lowered.compile(partitioner.dump_options(Path(directory)))
        try:
            inserted: tuple[OpSite, ...] | None = partitioner.inserted_collectives(Path(directory))
        except (OSError, ValueError):  # no record, or an unreadable one
            inserted = None
    return compiled, inserted


@contextlib.contextmanager
def _persistent_cache_off() -> Iterator[None]:
    """JAX's persistent compilation cache off, for one compile (JAX decides whether to use
    it once per process: its state is reset on the way in and out)."""
    import jax
    from jax._src import compilation_cache

    enabled = bool(jax.config.values.get("jax_enable_compilation_cache"))
    if not enabled:
        yield
        return
    jax.config.update("jax_enable_compilation_cache", False)  # type: ignore[no-untyped-call]
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", True)  # type: ignore[no-untyped-call]
        compilation_cache.reset_cache()


def execute(
    fn: Callable[..., object],
    traced: Any,
    lowered: Any,
    platform: str,
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    partitioned: bool = False,
) -> Execution:
    """Compile and run on ``platform``, which must be present.

    On the default platform the lowering the census read is compiled as is, so nothing is
    lowered twice; elsewhere the arguments are committed to that platform's device and the
    function re-traced there. The executable is kept on the result (``compiled``), so the
    compiled-level census reads it instead of compiling again. For a ``partitioned``
    program, that compilation also records the collectives the SPMD partitioner inserts
    (``inserted``), at no extra compile.
    """
    import jax

    try:
        compiled, call_args, call_kwargs, inserted = _compile_on(
            fn, lowered, platform, args, kwargs, partitioned=partitioned
        )
    except Exception as e:  # a failure to compile is a finding for this platform
        raise LoweringFailure(describe_error(e), stage="compile") from e
    try:
        value = compiled(*call_args, **call_kwargs)
        value = jax.block_until_ready(value)  # type: ignore[no-untyped-call]
    except Exception as e:  # so is a failure to run; the executable is still good to read
        raise LoweringFailure(describe_error(e), stage="run", compiled=compiled) from e

    def rerun() -> object:
        return jax.block_until_ready(compiled(*call_args, **call_kwargs))  # type: ignore[no-untyped-call]

    return Execution(
        platform=platform,
        value=value,
        outputs=to_outputs(value),
        compiled=compiled,
        rerun=rerun,
        inserted=inserted,
    )


def instruction_times(execution: Execution, *, runs: int = 3) -> dict[str, float]:
    """Measured self time per compiled instruction (seconds per run) of an execution.

    Raises ``RuntimeError`` when the profiler cannot measure here.
    """

    if execution.rerun is None:
        raise RuntimeError("nothing to re-run")
    return measure(execution.rerun, runs=runs, warmup=0)


def module_text(lowered: Lowered) -> str:
    """The lowered module's text without locations (part of the compiled-level cache key)."""
    text: str = lowered.as_text()
    return text


def compiled_text(compiled: Any) -> str:
    """The optimized HLO of an executable (``compiled.as_text()``)."""
    try:
        text: str = compiled.as_text()
    except Exception as e:  # an executable without HLO text is a finding, not a crash
        raise LoweringFailure(describe_error(e), stage="compile") from e
    return text


def compile_present(
    fn: Callable[..., object],
    lowered: Any,
    platform: str,
    args: Sequence[object],
    kwargs: Mapping[str, object],
) -> str:
    """Compile (without running) for ``platform``, present here; the optimized HLO text."""
    try:
        compiled, _, _, _ = _compile_on(fn, lowered, platform, args, kwargs)
    except Exception as e:  # compile errors are findings for this platform
        raise LoweringFailure(describe_error(e), stage="compile") from e
    return compiled_text(compiled)


def compile_deviceless(
    fn: Callable[..., object],
    args: Sequence[object],
    kwargs: Mapping[str, object],
    *,
    target_config: str,
    options: Mapping[str, object],
    lowered: Any = None,
    partitions: int = 1,
    inert_callbacks: bool = False,
) -> str:
    """Compile for CUDA against ``target_config`` with no GPU; the optimized HLO text.

    A program partitioned over several devices compiles from its cuda ``lowered`` module
    for as many described GPUs (``deviceless.deviceless_compile_partitioned``), lowered
    again with compilable stand-ins where that module has ``inert_callbacks`` (placeholders
    do not compile); any other is traced again on one described GPU.
    """

    try:
        if partitions > 1 and lowered is not None:
            if inert_callbacks:
                traced = trace(fn, args, kwargs)
                lowered = lower(inert(traced, compilable=True), "cuda")
            return deviceless_compile_partitioned(
                lowered, partitions, target_config=target_config, compiler_options=options
            )
        return deviceless_compile(
            _for_platform(fn, "cuda"),
            args,
            kwargs,
            target_config=target_config,
            compiler_options=options or None,
        )
    except Exception as e:  # XLA raises many types here; each is a finding, not a crash
        raise LoweringFailure(describe_error(e), stage="compile") from e


def argument_leaves(
    args: Sequence[object], kwargs: Mapping[str, object]
) -> list[tuple[str, object]]:
    """Every leaf of the arguments with a readable path (``args[1]['w']``, ``kwargs['x']``)."""
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))
    named = []
    for path, leaf in flat:
        head, *rest = path
        root = "args" if getattr(head, "idx", 0) == 0 else "kwargs"
        if root == "kwargs" and rest and getattr(rest[0], "key", None) == FN_KEY:
            root, rest = "fn", rest[1:]  # the arrays of a pytree function (a model)
        named.append((root + jax.tree_util.keystr(tuple(rest)), leaf))
    return named


# -- transformations ------------------------------------------------------------------------


_RULE = {
    "grad": "VJP (reverse-mode differentiation rule)",
    "jvp": "JVP (differentiation rule)",
    "vmap": "batching rule",
}


class TransformUsage(Exception):
    """A transformation cannot be asked of these arguments or outputs (a usage error)."""


def is_floating(value: object) -> bool:
    """Whether an argument or output leaf is inexact (real or complex floating point)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return isinstance(value, (float, complex)) and not isinstance(value, bool)
    import jax.numpy as jnp

    return bool(jnp.issubdtype(dtype, jnp.inexact))


def _dtype_name(value: object) -> str:
    dtype = getattr(value, "dtype", None)
    return str(dtype) if dtype is not None else type(value).__name__


class Transformed:
    """``fn`` under one transformation, as a function of flat argument leaves.

    Calling it is the transformed program as written; :meth:`for_platform` is the same
    transformation of ``fn`` with every ``lax.platform_dependent`` resolved for one
    platform, so a kernel that exists only on cuda (and lacks a rule) fails there and
    nowhere else. ``args`` are what to call it with.
    """

    def __init__(
        self,
        fn: Callable[..., object],
        transform: str,
        args: Sequence[object],
        kwargs: Mapping[str, object],
    ) -> None:
        import jax

        self.transform = transform
        self.fn = fn
        self._args = (tuple(args), dict(kwargs))
        leaves, self._treedef = jax.tree_util.tree_flatten(self._args)
        self._paths = [path for path, _ in argument_leaves(args, kwargs)]
        self._floating = [is_floating(leaf) for leaf in leaves]
        self._leaves = leaves
        self.args: tuple[object, ...] = self._arguments(leaves)
        self.__name__ = f"{getattr(fn, '__name__', 'fn')}[{transform}]"
        self._specialized: dict[str, Callable[..., object]] = {}
        self.per_platform = False
        """Whether the whole transformation failed to trace, so each platform traces
        :meth:`for_platform` (set by :func:`trace_variant`)."""

    # what the transformed function is called with
    def _arguments(self, leaves: list[Any]) -> tuple[object, ...]:
        import jax.numpy as jnp

        if self.transform != "vmap":
            return tuple(leaves)
        stacked = []
        for leaf in leaves:
            if key_impl(leaf) is not None:
                stacked.append(_split_keys(leaf))
                continue
            x = jnp.asarray(leaf)
            if jnp.issubdtype(x.dtype, jnp.inexact):
                other = (x * 0.5 + 0.25).astype(x.dtype)
            elif x.dtype == jnp.bool_:
                other = ~x
            else:
                other = (x + 1).astype(x.dtype)
            stacked.append(jnp.stack([x, other]))
        return tuple(stacked)

    def check_usage(self) -> None:
        """Raise :class:`TransformUsage` naming the arguments or outputs the transformation
        cannot use (no floating argument or output to differentiate)."""
        import jax

        if self.transform == "vmap":
            return
        if not any(self._floating):
            pairs = zip(self._paths, self._leaves, strict=True)
            found = ", ".join(f"{p} is {_dtype_name(v)}" for p, v in pairs)
            raise TransformUsage(
                f"{self.transform} needs a floating-point argument to differentiate with "
                f"respect to; found none ({found or 'no arguments'}). Pass float arrays, "
                f"or leave {self.transform!r} out of transforms for this check"
            )
        args, kwargs = self._args
        out = jax.eval_shape(self.fn, *args, **kwargs)
        flat, _ = jax.tree_util.tree_flatten_with_path(out)
        if not any(is_floating(leaf) for _, leaf in flat):
            found = ", ".join(
                f"output{jax.tree_util.keystr(p)} is {leaf.dtype}" for p, leaf in flat
            )
            raise TransformUsage(
                f"{self.transform} needs a floating-point output to differentiate; found "
                f"none ({found or 'no outputs'}). Leave {self.transform!r} out of transforms "
                f"for this check"
            )

    def __call__(self, *leaves: object) -> object:
        __tracebackhide__ = True
        return self._build(self.fn)(*leaves)

    def for_platform(self, platform: str) -> Callable[..., object]:
        """The transformation of ``fn`` with its ``platform_dependent`` branches resolved."""
        if platform not in self._specialized:
            self._specialized[platform] = self._build(specialize(self.fn, self._args, platform))
        return self._specialized[platform]

    def _build(self, fn: Callable[..., object]) -> Callable[..., object]:
        import jax
        import jax.numpy as jnp

        treedef, floating, paths = self._treedef, self._floating, self._paths

        def call(leaves: Sequence[object]) -> object:
            __tracebackhide__ = True
            args, kwargs = jax.tree_util.tree_unflatten(treedef, list(leaves))
            return fn(*args, **kwargs)

        def merge(diff: Sequence[object], fixed: Sequence[object]) -> list[object]:
            di, fi = iter(diff), iter(fixed)
            return [next(di) if f else next(fi) for f in floating]

        def split(leaves: Sequence[object]) -> tuple[list[object], list[object]]:
            diff = [x for x, f in zip(leaves, floating, strict=True) if f]
            fixed = [x for x, f in zip(leaves, floating, strict=True) if not f]
            return diff, fixed

        def floating_outputs(out: object) -> list[jax.Array]:
            return [leaf for leaf in jax.tree_util.tree_leaves(out) if is_floating(leaf)]

        if self.transform == "grad":

            def grad(*leaves: object) -> dict[str, object]:
                diff, fixed = split(leaves)

                def loss(diff: list[object]) -> object:
                    outs = floating_outputs(call(merge(diff, fixed)))
                    return sum(jnp.sum(jnp.real(o)) for o in outs)

                grads = jax.grad(loss)(diff)
                named = [p for p, f in zip(paths, floating, strict=True) if f]
                return dict(zip(named, grads, strict=True))

            return grad
        if self.transform == "jvp":

            def jvp(*leaves: object) -> list[jax.Array]:
                diff, fixed = split(leaves)
                tangents = [jnp.ones_like(cast("jax.Array", x)) for x in diff]  # floating
                _, out = jax.jvp(lambda *d: call(merge(d, fixed)), tuple(diff), tuple(tangents))
                return floating_outputs(out)

            return jvp
        if self.transform == "vmap":
            return jax.vmap(lambda *leaves: call(leaves))
        raise ValueError(f"unknown transform {self.transform!r}")

    def explain(self, error: BaseException, platform: str | None = None) -> str:
        """Why the transformation failed, naming the custom kernels it met (a finding)."""
        kernels: list[str] = []
        try:
            fn = self.fn if platform is None else specialize(self.fn, self._args, platform)
            args, kwargs = self._args
            kernels = custom_kernels(fn, args, kwargs)
        except Exception:  # naming the kernels is best effort; the failure stands anyway
            kernels = []
        where = f" on {platform}" if platform else ""
        cause = describe_error(error)
        if kernels:
            return (
                f"no {_RULE[self.transform]} for {', '.join(kernels)}: "
                f"{self.transform} cannot be taken{where} ({cause})"
            )
        return f"{self.transform} cannot be taken{where} ({cause})"


def _split_keys(keys: jax.Array) -> jax.Array:
    """A batch of two for a typed key array: each key split in two the way
    ``jax.random.split`` splits it (keys are not numbers: no arithmetic makes a second)."""
    import jax
    import jax.numpy as jnp

    pairs = jax.vmap(lambda key: jax.random.split(key, 2))(keys.reshape(-1))
    return jnp.moveaxis(pairs, 1, 0).reshape((2, *keys.shape))


def transformed(
    fn: Callable[..., object], transform: str, args: Sequence[object], kwargs: Mapping[str, object]
) -> Transformed:
    """``fn`` under ``transform``; raises :class:`TransformUsage` for unusable arguments."""
    if transform not in TRANSFORMS:
        raise ValueError(f"unknown transform {transform!r}; known: {', '.join(TRANSFORMS)}")
    found = Transformed(fn, transform, args, kwargs)
    found.check_usage()
    return found


class PlatformTraces:
    """Stands in for a traced function where one trace cannot serve every platform: traces
    ``variant.for_platform(p)`` per platform when asked to lower for ``p``."""

    def __init__(self, variant: Transformed, described: Mapping[str, str] | None = None) -> None:
        self.variant = variant
        self.described = described

    def lower(
        self,
        *,
        lowering_platforms: tuple[str, ...],
        _private_parameters: LoweringParameters | None = None,
    ) -> Lowered:
        import jax

        (platform,) = lowering_platforms
        specialized = self.variant.for_platform(platform)
        args = self.variant.args

        def again() -> Traced:
            return jax.jit(specialized).trace(*args)

        try:
            traced = again()
        except Exception as e:  # the transformation's failure on this platform: a finding
            raise LoweringFailure(self.variant.explain(e, platform)) from e
        return Trace(traced, again, self.described).lower(
            lowering_platforms=lowering_platforms, _private_parameters=_private_parameters
        )


def trace_variant(
    variant: Transformed, *, described: Mapping[str, str] | None = None
) -> Trace | PlatformTraces:
    """Trace the transformed function once; where that fails (a kernel without a rule on
    some branch), a :class:`PlatformTraces` that traces per platform. ``described`` as for
    :func:`trace`."""
    import jax

    def again() -> Traced:
        return jax.jit(variant).trace(*variant.args)

    try:
        return Trace(again(), again, described)
    except Exception:  # retried per platform, where each failure is recorded
        variant.per_platform = True
        return PlatformTraces(variant, described)


def _for_platform(fn: Callable[..., object], platform: str) -> Callable[..., object]:
    """A transformed check's function resolved for ``platform``; other functions as they are."""
    if isinstance(fn, Transformed) and fn.per_platform:
        return fn.for_platform(platform)
    return fn


def specialize(
    fn: Callable[..., object],
    arguments: tuple[tuple[object, ...], dict[str, object]],
    platform: str,
) -> Callable[..., object]:
    """``fn`` with each ``lax.platform_dependent`` (outside custom rules and loops) resolved
    for ``platform``: the jaxpr is re-played, taking only that platform's branch."""
    import jax

    args, kwargs = arguments
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args, **kwargs)
    out_tree = jax.tree_util.tree_structure(out_shape)
    replay = _Specializer(platform)

    def specialized(*args: object, **kwargs: object) -> object:
        flat = jax.tree_util.tree_leaves((args, kwargs))
        outs = replay.run(closed.jaxpr, closed.consts, flat)
        return jax.tree_util.tree_unflatten(out_tree, outs)

    specialized.__name__ = getattr(fn, "__name__", "fn")
    return specialized


class _Specializer(Evaluator):
    """Re-binds a jaxpr with each ``platform_index`` a constant for ``platform``: a
    conditional on it takes that branch only, nested jits are inlined (to reach the
    ``platform_index`` inside), and arithmetic on it stays a constant."""

    def __init__(self, platform: str) -> None:
        self.platform = platform

    def equation(
        self, eqn: JaxprEqn, values: list[object], known: tuple[bool, ...]
    ) -> tuple[Sequence[object], bool]:
        import jax

        name = eqn.primitive.name
        if name == "platform_index":
            return [np.int32(platform_branch(eqn.params["platforms"], self.platform))], True
        if name == "cond" and eqn.invars and known[0]:
            branches = eqn.params["branches"]
            index = min(max(int(np.asarray(values[0])), 0), len(branches) - 1)
            branch = branches[index]
            return self.run(branch.jaxpr, branch.consts, values[1:]), False
        if name in CALL_PRIMITIVES and "jaxpr" in eqn.params:
            inner = eqn.params["jaxpr"]
            return self.run(opened(inner), consts_of(inner), values), False
        resolved = derived(eqn, known)
        with equation_context(eqn):
            if resolved:  # arithmetic on the platform index: keep it a constant
                with jax.ensure_compile_time_eval():
                    return bind(eqn, values), True
            return bind(eqn, values), False


def custom_kernels(
    fn: Callable[..., object], args: Sequence[object], kwargs: Mapping[str, object]
) -> list[str]:
    """The custom kernels (FFI calls, Pallas kernels) in ``fn``'s jaxpr, by name."""
    import jax

    closed = jax.make_jaxpr(fn)(*args, **kwargs)
    found = (kernel_label(e.primitive.name, e.params) for e in equations(closed)
             if e.primitive.name in KERNEL_PRIMITIVES)  # fmt: skip
    return list(dict.fromkeys(found))
