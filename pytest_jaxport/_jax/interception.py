"""The audit's view into JAX: every private JAX name it touches, behind version-gated adapters.

``pytest --jaxport-audit`` records the computations a suite runs without any change to the
suite. It hooks the one place every top-level jitted call passes when JAX's C++ dispatch cache
misses: ``jax._src.pjit._pjit_call_impl_python``, called with the traced program (the jaxpr)
and everything that decides its lowering (shardings, layouts, donation, mesh, compiler
options) to lower, compile and run it on the device it runs on. The hook lets JAX do that
first, then hands the recorded call to the audit (with warnings silenced: what the suite
sees is what it saw without the audit). From the same arguments :meth:`RecordedCall.lower`
lowers the computation for any other platform with ``pjit._resolve_and_lower(...,
lowering_platforms=...)``: nothing is traced or executed again, and for the platform it ran
on JAX's own cached lowering is read. A call that raises is not audited.

What passes that point: ``jax.jit``/``pjit`` calls (whenever the jit was created, before the
plugin loaded included), calls through wrappers built on them (flax ``nnx.jit``, equinox
``filter_jit``, ``jax.pmap`` on JAX that implements it with ``jit``, ``shard_map`` under jit),
and op-by-op execution outside jit (each ``jnp`` function or primitive is a small jitted
computation of its own). Calls made while tracing (a jit inside a jit, a ``jnp`` op inside a
trace) do not pass it: they are part of their caller's program. What does not pass it:
ahead-of-time ``jit(f).lower(...).compile()``, ``pmap`` where JAX still implements it
separately (before 0.7), and whatever runs with ``jax.disable_jit()``. Those are counted, not
audited: a listener on JAX's public backend-compile monitoring event counts every compilation
that happened outside a hooked call. Where a patch point is missing (a JAX release that moved
it), the listener is all the audit has, and :class:`Support` says so.

The hooked path keeps JAX's fast path untouched: a jitted function called again with the same
argument types never leaves C++, so the hook costs nothing after the first call per
signature. :meth:`Interception.clear_dispatch_caches` empties only C++ dispatch caches (not
the tracing or lowering caches) so that each test's first call of a computation passes the
hook again, cheaply, and the test is counted among its users: those of the suite's jitted
functions (every jit function that is not JAX's own, whenever it was created), or all of
them, JAX's own included (its ``jnp`` functions and the primitives it runs op by op). A jit
called under a transformation outside jit (``jax.vmap(f)(x)`` of a jitted ``f``, ``jax.grad``
of one) runs JAX's transformed copy of its program through the jit primitive's own dispatch,
whose C++ cache is keyed by that copy (cached too): while the audit is installed that
dispatch has a cache of the audit's own, emptied for every test (:class:`_PrimitiveCaches`).

Adapters, newest first; each names the JAX releases it was written for and the patch points
it needs. ``tests/test_interception.py`` runs on every JAX that CI covers.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import reprlib
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from pytest_jaxport._jax.devices import default_platform
from pytest_jaxport._jax.jaxprs import HOST_CALLBACK_PRIMITIVES, equations
from pytest_jaxport._jax.lowering import warnings_filtered
from pytest_jaxport.model.identity import stable_text

if TYPE_CHECKING:
    from jax._src.interpreters.pxla import MeshComputation, MeshExecutable
    from jax.extend.core import ClosedJaxpr, Jaxpr
    from jax.sharding import Sharding
    from jaxlib.mlir import ir

PATCH_POINTS: Mapping[str, str] = {
    "jax._src.pjit._pjit_call_impl_python": "the jit cache-miss path (what is recorded)",
    "jax._src.pjit._resolve_and_lower": "lowering a recorded call for other platforms",
    "jax._src.pjit._cpp_pjit_cache_fun_only": "the C++ dispatch cache of plain jits",
    "jax._src.pjit._cpp_pjit_cache_explicit_attributes": "the C++ dispatch cache of other jits",
    "jax._src.pjit._infer_params": "the static arguments of a call",
    "jax._src.pjit._cpp_pjit": "the jit functions the suite creates (their caches are cleared)",
    "jax._src.pjit._get_cpp_global_cache": (
        "the dispatch cache of a jit's program transformed outside jit (cleared for each test)"
    ),
    "jax._src.pjit._pjit_call_impl": "the jit primitive run outside jit (whose cache that is)",
    "jax._src.api_util.fun_sourceinfo": "whether a jit function is JAX's own (as JAX names it)",
    "jax._src.traceback_util.register_exclusion": (
        "the hook's frames left out of a suite's tracebacks, as JAX leaves out its own"
    ),
    "jax._src.interpreters.partial_eval.trace_to_jaxpr_dynamic": (
        "a lowering rule's trace, made once for a recorded call (jax < 0.12)"
    ),
    "jax._src.interpreters.partial_eval.trace_to_jaxpr": (
        "a lowering rule's trace, made once for a recorded call (jax >= 0.12)"
    ),
}
"""Every private JAX name the audit uses, with what it is used for."""

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The public monitoring event JAX records for each backend compilation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Support:
    """What the audit can see on the installed JAX (the report says it)."""

    jax: str
    adapter: str | None
    """The adapter in use (``None``: no patch point found, compile events only)."""
    hooked: bool
    """Whether top-level jitted calls are recorded (and lowered for other platforms)."""
    static_arguments: bool
    compile_events: bool
    """Whether compilations outside the hook are counted (the public monitoring event)."""
    missing: tuple[str, ...] = ()
    """Patch points the adapter needs that this JAX lacks."""
    tested: bool = True
    """Whether this JAX release is one the adapter was tested on (else: newer, untested)."""

    def notes(self) -> list[str]:
        """What the audit cannot see here, in sentences for the report."""
        notes = []
        if not self.hooked:
            found = ", ".join(self.missing) or "its patch points"
            notes.append(
                f"jax {self.jax}: {found} not found; computations are not recorded or lowered, "
                "only compilations are counted (the public backend-compile event)"
            )
        elif not self.static_arguments:
            notes.append(f"jax {self.jax}: static argument values are not recorded")
        if not self.compile_events:
            notes.append("compilations outside the hook (AOT, old pmap) are not counted")
        if self.hooked and not self.tested:
            notes.append(f"jax {self.jax} is newer than the releases the audit was tested on")
        return notes

    def to_dict(self) -> dict[str, object]:
        return {
            "jax": self.jax,
            "adapter": self.adapter,
            "hooked": self.hooked,
            "static_arguments": self.static_arguments,
            "compile_events": self.compile_events,
            "missing": list(self.missing),
            "tested": self.tested,
            "notes": self.notes(),
        }


class _PjitFunction(Protocol):
    """A function ``jax.jit`` made (JAX's ``PjitFunction``): what the audit calls of it."""

    def _clear_cache(self) -> None: ...


class _State(threading.local):
    """Per thread: whether the plugin itself is working (its own jits are not the suite's),
    how deep inside hooked calls (their compilations are audited ones), and the static
    arguments of the jit call being dispatched."""

    def __init__(self) -> None:
        self.busy = False
        self.hooked = 0
        self.static: (
            tuple[ClosedJaxpr, Callable[..., object], tuple[tuple[str, object], ...]] | None
        ) = None
        self.rule_traces: dict[Hashable, tuple[object, object]] = {}


_STATE = _State()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The plugin's own JAX work (``jaxport.check``, the audit's lowering): never recorded,
    and its compilations are not counted as the suite's."""
    before = _STATE.busy
    _STATE.busy = True
    try:
        yield
    finally:
        _STATE.busy = before


# -- what a recorded call is -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CallFacts:
    """A recorded computation described for the report (plain values)."""

    function: str
    source: str | None
    """``file:line`` of the function's definition, as JAX recorded it."""
    kind: str
    """``jit`` (the suite's or a library's jitted function) or ``eager`` (a JAX function or
    primitive executed op by op outside jit)."""
    signature: tuple[str, ...]
    """Per argument: ``name: float32[8,16]`` (``weak`` marks a weakly typed scalar)."""
    shardings: tuple[str, ...] = ()
    """Per argument, where any argument is sharded over more than one device."""
    static_arguments: str | None = None
    """``training=True, n=3``; ``None`` when not known."""
    donated: tuple[int, ...] = ()
    mesh: str | None = None
    host_callbacks: tuple[str, ...] = ()
    """The host-callback primitives in the program (``pure_callback``...)."""


class RecordedCall:
    """One top-level call of a jitted computation that missed JAX's C++ dispatch cache.

    Quacks like ``jax.stages.Traced`` where :mod:`pytest_jaxport._jax.lowering` needs it:
    ``.jaxpr`` and ``.lower(lowering_platforms=...)``, so a recorded call is lowered and
    counted exactly as a ``jaxport.check`` trace is.
    """

    __slots__ = ("_adapter", "arg_types", "fun", "jaxpr", "params", "static")

    def __init__(
        self,
        adapter: _Adapter,
        jaxpr: ClosedJaxpr,
        params: Mapping[str, Any],
        arg_types: tuple[object, ...],
        fun: Callable[..., object] | None,
        static: tuple[tuple[str, object], ...] | None,
    ) -> None:
        self._adapter = adapter
        self.jaxpr = jaxpr
        self.params = params
        self.arg_types = arg_types
        self.fun = fun
        self.static = static

    @property
    def name(self) -> str:
        return str(self.params.get("name", "?"))

    def signature(self) -> tuple[object, ...]:
        """Hashable: what, besides the jaxpr object, decides this call's lowering."""
        p = self.params
        return (
            tuple(map(self._adapter.type_key, self.arg_types)),
            p.get("in_shardings"),
            p.get("out_shardings"),
            p.get("in_layouts"),
            p.get("out_layouts"),
            p.get("donated_invars"),
            p.get("ctx_mesh"),
            p.get("keep_unused"),
            p.get("compiler_options_kvs"),
        )

    def signature_text(self) -> str:
        """The signature as stable text (no object ids), for a key shared across processes."""
        p = self.params
        parts = [
            f"args={[self._adapter.type_text(t) for t in self.arg_types]}",
            f"shardings={[self._adapter.sharding_text(t) for t in self.arg_types]}",
        ]
        for name in ("in_shardings", "out_shardings", "donated_invars", "ctx_mesh",
                     "keep_unused", "compiler_options_kvs"):  # fmt: skip
            parts.append(f"{name}={p.get(name)!r}")
        return stable_text("\n".join(parts))

    def lower(
        self, *, lowering_platforms: Sequence[str] | None, _private_parameters: object = None
    ) -> _Lowering:
        """The computation lowered for ``lowering_platforms`` (an object with
        ``compiler_ir("stablehlo")``), from the recorded jaxpr and arguments' types;
        ``_private_parameters``: JAX's lowering parameters, as ``jax.stages.Traced.lower``
        takes them (:func:`pytest_jaxport._jax.callbacks.inert`)."""
        platforms = tuple(lowering_platforms or ())
        return self._adapter.lower(self, platforms, _private_parameters)

    def facts(self) -> CallFacts:
        return self._adapter.facts(self)

    def kind(self) -> str:
        """``eager`` (JAX's own function: an op run outside jit) or ``jit``
        (:attr:`CallFacts.kind`)."""
        return "eager" if _is_jax_own(_defined_at(self.jaxpr)) else "jit"


# -- adapters ------------------------------------------------------------------------------------


def _abstractify(core: ModuleType, value: object) -> object:
    """The abstract value (shape, dtype, weak type) of an argument."""
    return core.shaped_abstractify(value)


def _version_tuple(text: str) -> tuple[int, ...]:
    numbers = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers)


class _Adapter:
    """The cache-miss hook for a range of JAX releases."""

    name = "jit cache-miss hook"
    oldest = (0, 6, 2)
    newest_tested = (0, 12, 0)
    needs: tuple[str, ...] = (
        "jax._src.pjit._pjit_call_impl_python",
        "jax._src.pjit._resolve_and_lower",
        "jax._src.pjit._cpp_pjit_cache_fun_only",
        "jax._src.pjit._cpp_pjit_cache_explicit_attributes",
    )

    def applies(self, version: tuple[int, ...]) -> bool:
        return version >= self.oldest

    def missing(self) -> tuple[str, ...]:
        from jax._src import pjit

        return tuple(n for n in self.needs if not hasattr(pjit, n.rsplit(".", 1)[1]))

    # Arguments: what the lowering is given for them, and how they read as text.
    def argument_types(self, args: Sequence[object]) -> tuple[object, ...]:
        raise NotImplementedError

    def type_key(self, arg_type: object) -> object:
        """Hashable: what of one argument decides the lowering."""
        return arg_type

    def type_text(self, arg_type: object) -> str:
        aval = getattr(arg_type, "aval", None)
        if aval is None:
            from jax._src import core

            aval = _abstractify(core, arg_type)
        text: str = aval.str_short(short_dtypes=False) if hasattr(aval, "str_short") else str(aval)
        if getattr(aval, "weak_type", False):
            text += " weak"
        return text

    def sharding_text(self, arg_type: object) -> str:
        sharding = getattr(arg_type, "sharding", None)
        if sharding is None:
            return "-"
        devices = getattr(sharding, "num_devices", None)
        if devices is None or devices <= 1:
            return "-"
        spec = getattr(sharding, "spec", None)
        return f"{type(sharding).__name__}({spec if spec is not None else sharding})"

    def lower(
        self, call: RecordedCall, platforms: tuple[str, ...], parameters: object = None
    ) -> _Lowering:
        from jax._src import pjit
        from jax._src.interpreters import mlir

        here = not platforms or (parameters is None and _runs_here(call, platforms))
        computation = pjit._resolve_and_lower(
            call.arg_types,
            **call.params,
            lowering_platforms=None if here else platforms,
            lowering_parameters=mlir.LoweringParameters() if parameters is None else parameters,
            pgle_profiler=None,
        )
        return _Lowering(computation)

    def facts(self, call: RecordedCall) -> CallFacts:
        jaxpr = call.jaxpr
        source = _defined_at(jaxpr)
        names = list(getattr(_debug_info(jaxpr), "arg_names", None) or ())
        types = [self.type_text(t) for t in call.arg_types]
        if len(names) == len(types):
            signature = tuple(f"{n}: {t}" if n else t for n, t in zip(names, types, strict=True))
        else:
            signature = tuple(types)
        shardings = tuple(self.sharding_text(t) for t in call.arg_types)
        donated = tuple(i for i, d in enumerate(call.params.get("donated_invars", ())) if d)
        mesh = call.params.get("ctx_mesh")
        mesh_text = None if mesh is None or getattr(mesh, "empty", False) else str(mesh)
        wrapper = next((w for f, w in _PROGRAM_WRAPPERS.items() if source and f in source), None)
        return CallFacts(
            function=wrapper or call.name,
            source=source,
            kind=call.kind(),
            signature=signature,
            shardings=shardings if any(s != "-" for s in shardings) else (),
            static_arguments=_static_text(call.static),
            donated=donated,
            mesh=mesh_text,
            host_callbacks=host_callbacks(jaxpr),
        )


class _ArgumentTypes(_Adapter):
    """jax 0.8 and newer: the cache-miss path lowers from argument types
    (``pjit.convert_to_metaty``), which hold no device buffers."""

    name = "jit cache-miss hook (argument types, jax>=0.8)"
    oldest = (0, 8, 0)
    needs = (*_Adapter.needs, "jax._src.pjit.convert_to_metaty")

    def argument_types(self, args: Sequence[object]) -> tuple[object, ...]:
        from jax._src import pjit

        return tuple(map(pjit.convert_to_metaty, args))


class _LiveArguments(_Adapter):
    """jax 0.6.2 to 0.7: the cache-miss path lowers from the arguments themselves (their
    shardings and layouts are still readable after a donation deleted their buffers)."""

    name = "jit cache-miss hook (arguments, jax 0.6.2-0.7)"
    oldest = (0, 6, 2)

    def applies(self, version: tuple[int, ...]) -> bool:
        return (0, 6, 2) <= version < (0, 8, 0)

    def argument_types(self, args: Sequence[object]) -> tuple[object, ...]:
        return tuple(args)

    def type_key(self, arg_type: object) -> object:
        from jax._src import core

        return (
            _abstractify(core, arg_type),
            getattr(arg_type, "sharding", None),
            getattr(arg_type, "_committed", True),
        )


ADAPTERS: tuple[_Adapter, ...] = (_ArgumentTypes(), _LiveArguments())


class _Lowering:
    """A lowered computation as :func:`pytest_jaxport._jax.stablehlo.read_programs` reads it and
    :func:`pytest_jaxport._jax.execution.compile_partitioned` compiles it (``jax.stages.Lowered``'s
    ``compiler_ir`` and ``compile``)."""

    __slots__ = ("_computation",)

    def __init__(self, computation: MeshComputation) -> None:
        self._computation = computation

    def compiler_ir(self, dialect: str = "stablehlo") -> ir.Module:
        return self._computation.stablehlo()

    def as_text(self) -> str:
        return str(self._computation.stablehlo())

    def compile(self, compiler_options: Mapping[str, object] | None = None) -> MeshExecutable:
        """Compiled (not run) for the platform it was lowered for; with ``compiler_options``
        (the partitioner's record) JAX compiles it anew and keeps the executable it runs."""
        return self._computation.compile(None if compiler_options is None else dict(
            compiler_options))  # fmt: skip


def _runs_here(call: RecordedCall, platforms: tuple[str, ...]) -> bool:
    """Whether lowering for ``platforms`` is the lowering JAX itself made to run the call
    (then JAX's lowering cache already holds it: it is read, not made again)."""
    if len(platforms) != 1:
        return False

    if platforms[0] != default_platform():
        return False
    return all(_on_default_backend(getattr(t, "sharding", None)) for t in call.arg_types)


@functools.lru_cache(maxsize=256)
def _on_default_backend(sharding: Sharding | None) -> bool:
    if sharding is None:
        return True
    import jax

    try:
        return set(sharding.device_set) <= set(jax.devices())
    except Exception:  # an abstract or unusual sharding: lower explicitly for the platform
        return False


_JAX_INTERNAL = ("/jax/_src/", "/jax/numpy/", "/jax/lax/", "/jax/nn/", "/jax/random.py")
_PROGRAM_WRAPPERS = {"/jax/_src/pmap.py": "pmap"}
"""JAX's own jitted functions that run the user's program (not an op executed eagerly)."""


def _is_jax_internal(source: str | None) -> bool:
    return source is not None and any(part in source for part in _JAX_INTERNAL)


def _source(where: str | None) -> str | None:
    """``file:line`` of JAX's name of a traced function (``api_util.fun_sourceinfo``:
    ``name at file:line``); ``None`` where it has no file."""
    return where.rsplit(" at ", 1)[1] if where and " at " in where else None


def _debug_info(jaxpr: object) -> object:
    return getattr(jaxpr, "debug_info", None) or getattr(
        getattr(jaxpr, "jaxpr", None), "debug_info", None
    )


def _defined_at(jaxpr: object) -> str | None:
    """``file:line`` of the function a recorded program was traced from."""
    return _source(getattr(_debug_info(jaxpr), "func_src_info", None))


def _is_jax_own(source: str | None) -> bool:
    """Whether a jitted function at ``source`` is JAX's own (a ``jnp`` function, the
    one-primitive function of an op run eagerly: a computation of kind ``eager``): inside
    JAX and not one of its wrappers of the user's program (``pmap``)."""
    if source is None or not _is_jax_internal(source):
        return False
    return not any(f in source for f in _PROGRAM_WRAPPERS)


def _silenced() -> contextlib.AbstractContextManager[None]:
    """Every warning ignored while the audit works, without touching what the suite sees
    (what the audit's own lowering for absent platforms warns is kept inside it, by
    ``lowering.warnings_kept``, for the computation's record)."""
    return warnings_filtered("ignore")


class _StableRepr(reprlib.Repr):
    """A short repr that reads the same in every process: what :func:`stable_text` blanks
    and sorts is blanked and sorted before the text is shortened (a frozenset deep in a long
    repr, as in a PyTreeDef of lineax's operators, would otherwise be cut at a different
    element in each process), and a set shows its first elements in sorted order, not in
    hash order."""

    def repr_instance(self, x: object, level: int) -> str:
        try:
            text = stable_text(builtins.repr(x))
        except Exception:
            return f"<{type(x).__name__}>"
        if len(text) > self.maxother:
            i = max(0, (self.maxother - 3) // 2)
            j = max(0, self.maxother - 3 - i)
            text = text[:i] + "..." + text[len(text) - j :]
        return text

    def repr_frozenset(self, x: frozenset[object], level: int) -> str:
        return f"frozenset({{{self._sorted(x, level, self.maxfrozenset)}}})" if x else "frozenset()"

    def repr_set(self, x: set[object], level: int) -> str:
        return f"{{{self._sorted(x, level, self.maxset)}}}" if x else "set()"

    def _sorted(self, x: Iterable[object], level: int, most: int) -> str:
        if level <= 0:
            return "..."
        ordered = sorted(x, key=lambda e: stable_text(builtins.repr(e)))
        shown = [self.repr1(e, level - 1) for e in ordered[:most]]
        return ", ".join(shown + (["..."] if len(ordered) > most else []))


_REPR = _StableRepr()
_REPR.maxstring = 40
_REPR.maxother = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 4


def _static_text(static: tuple[tuple[str, object], ...] | None) -> str | None:
    """The static arguments as the report shows them, shortened: the same text in every
    process (:class:`_StableRepr`: a frozenset of id-hashed tags in order, no addresses)."""
    if static is None:
        return None
    try:
        return ", ".join(f"{name}={_REPR.repr(value)}" for name, value in static)
    except Exception:  # a static argument whose repr fails is still a static argument
        return ", ".join(f"{name}=<{type(value).__name__}>" for name, value in static)


def host_callbacks(jaxpr: Jaxpr | ClosedJaxpr) -> tuple[str, ...]:
    """The host-callback primitives anywhere in ``jaxpr`` (sub-programs included)."""
    names = (e.primitive.name for e in equations(jaxpr))
    return tuple(dict.fromkeys(n for n in names if n in HOST_CALLBACK_PRIMITIVES))


def _static_arguments(
    fun: Callable[..., object], info: object, args: Sequence[object], kwargs: Mapping[str, object]
) -> tuple[tuple[str, object], ...]:
    """The static arguments of a jit call, by name (``arg2`` where no name is known)."""
    numbers = tuple(getattr(info, "static_argnums", ()) or ())
    names = tuple(getattr(info, "static_argnames", ()) or ())
    if not numbers and not (names and kwargs):
        return ()
    found: list[tuple[str, object]] = []
    if numbers:
        parameters = _parameter_names(fun)
        for i in numbers:
            if -len(args) <= i < len(args):
                index = i % len(args)
                label = parameters[index] if index < len(parameters) else f"arg{index}"
                found.append((label, args[index]))
    found += [(k, kwargs[k]) for k in names if k in kwargs]
    return tuple(found)


def _parameter_names(fun: Callable[..., object]) -> tuple[str, ...]:
    import inspect

    try:
        return tuple(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        return ()


# -- the interception ----------------------------------------------------------------------------


Listener = Callable[[RecordedCall], None]


@dataclass(slots=True)
class CompileCounts:
    """Backend compilations seen by the monitoring listener, since the last reset."""

    audited: int = 0
    """Inside a hooked call: compilations of recorded computations."""
    outside: int = 0
    """Outside any hooked call and outside the plugin: compiled, but not audited."""
    errors: list[str] = field(default_factory=list)
    """Exceptions the listener raised (recorded; the suite never sees them)."""


class Interception:
    """Installs the hook; calls ``listener`` with each recorded call, never lets it raise."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._adapter: _Adapter | None = None
        self._originals: dict[tuple[ModuleType, str], object] = {}
        self._event_listener: Callable[..., None] | None = None
        self._suite_jits: weakref.WeakSet[_PjitFunction] | None = None
        self._cleared: set[int] = set()
        self._primitive_caches: _PrimitiveCaches | None = None
        self.compiles = CompileCounts()
        self.support: Support | None = None

    def install(self) -> Support:
        """Patch JAX (once); the :class:`Support` found. Idempotent."""
        if self.support is not None:
            return self.support
        import jax
        from jax._src import pjit

        version = _version_tuple(jax.__version__)
        adapter = next((a for a in ADAPTERS if a.applies(version)), None)
        missing = adapter.missing() if adapter is not None else tuple(PATCH_POINTS)[:2]
        static = False
        if adapter is not None and not missing:
            self._adapter = adapter
            self._patch(pjit, "_pjit_call_impl_python", self._hook(pjit._pjit_call_impl_python))
            from jax._src import api_util

            if hasattr(pjit, "_cpp_pjit") and hasattr(api_util, "fun_sourceinfo"):
                self._suite_jits = _existing_suite_jits(jax)
                self._patch(
                    pjit, "_cpp_pjit", _registered(pjit._cpp_pjit, self._suite_jits, self._cleared)
                )
            if hasattr(pjit, "_get_cpp_global_cache") and hasattr(pjit, "_pjit_call_impl"):
                self._primitive_caches = _PrimitiveCaches(pjit)
                self._patch(pjit, "_get_cpp_global_cache", self._primitive_caches)
            if hasattr(pjit, "_infer_params"):
                self._patch(pjit, "_infer_params", _stash_static(pjit._infer_params))
                static = True
            from jax._src.interpreters import partial_eval

            for name in ("trace_to_jaxpr_dynamic", "trace_to_jaxpr"):
                if hasattr(partial_eval, name):
                    self._patch(partial_eval, name, _RuleTraces(getattr(partial_eval, name)))
            _hidden_from_tracebacks()
            # What JAX ran before (an earlier session in this process, a conftest.py) is in
            # its caches: its next call passes the hook, an eager op's included.
            self.clear_dispatch_caches(jax_own=True)
        events = self._listen()
        tested = adapter is None or version[:2] <= adapter.newest_tested[:2]
        self.support = Support(
            jax=jax.__version__,
            adapter=self._adapter.name if self._adapter is not None else None,
            hooked=self._adapter is not None,
            static_arguments=static,
            compile_events=events,
            missing=missing,
            tested=tested,
        )
        return self.support

    def uninstall(self) -> None:
        """Undo every patch (the in-process pytester runs of the plugin's own tests need it);
        a later :meth:`install` patches again."""
        for (module, name), original in self._originals.items():
            setattr(module, name, original)
        self._originals.clear()
        self._suite_jits = None
        self._cleared.clear()
        self._primitive_caches = None
        if self._event_listener is not None:
            _unlisten(self._event_listener)
            self._event_listener = None
        self._adapter = None
        self.support = None

    def clear_dispatch_caches(self, *, jax_own: bool = True) -> None:
        """Empty C++ dispatch caches only: the next call of each jitted function cleared takes
        the Python path through the hook again, reusing its cached trace and executable.
        Those of the suite's jit functions, and with ``jax_own`` JAX's own too (its ``jnp``
        functions and the primitives it runs op by op: all of JAX's caches emptied, as where
        this JAX does not let the audit tell them apart)."""
        if self._adapter is None:
            return
        # A function's own clearing takes it out of JAX's shared caches: emptying those does
        # not reach it again, so each of the suite's is cleared itself every time.
        for jitted in list(self._suite_jits or ()):
            jitted._clear_cache()
        self._cleared.clear()
        if self._primitive_caches is not None:
            self._primitive_caches.clear()
        if jax_own or self._suite_jits is None:
            from jax._src import pjit

            pjit._cpp_pjit_cache_fun_only.clear()
            pjit._cpp_pjit_cache_explicit_attributes.clear()

    def _patch(self, module: ModuleType, name: str, replacement: object) -> None:
        self._originals[(module, name)] = getattr(module, name)
        setattr(module, name, replacement)

    def _hook(self, original: Callable[..., object]) -> Callable[..., object]:
        adapter = self._adapter
        assert adapter is not None
        listener = self._listener
        compiles = self.compiles
        state = _STATE

        @functools.wraps(original)
        def pjit_call_impl_python(*args: object, **params: object) -> object:
            __tracebackhide__ = True  # a suite's error here shows the suite's frames
            if state.busy:
                return original(*args, **params)
            pending, state.static = state.static, None
            try:  # before the call: a donated argument is gone after it
                arg_types: tuple[object, ...] | None = adapter.argument_types(args)
            except Exception as e:  # never in the suite's way: this call is not audited
                compiles.errors.append(f"{type(e).__name__}: {e}"[:300])
                arg_types = None
            state.hooked += 1
            try:
                out = original(*args, **params)
            except BaseException:
                state.rule_traces.clear()
                raise
            finally:
                state.hooked -= 1
            # After JAX ran the call: its own lowering is cached (read, not made again), and
            # whatever the audit does cannot come before the suite's own work or warnings.
            if arg_types is not None:
                jaxpr = cast("ClosedJaxpr", params.get("jaxpr"))  # pjit's, always there
                fun, static = (pending[1], pending[2]) if pending and pending[0] is jaxpr else (
                    None, None)  # fmt: skip
                state.busy = True
                try:
                    with _silenced():
                        listener(RecordedCall(adapter, jaxpr, params, arg_types, fun, static))
                except Exception as e:  # the audit must never change what the suite sees
                    compiles.errors.append(f"{type(e).__name__}: {e}"[:300])
                finally:
                    state.busy = False
            state.rule_traces.clear()
            return out

        return pjit_call_impl_python

    def _listen(self) -> bool:
        try:
            import jax.monitoring
        except ImportError:
            return False
        compiles = self.compiles
        state = _STATE

        def on_event(event: str, duration: float, **kwargs: object) -> None:
            if event != COMPILE_EVENT or state.busy:
                return
            if state.hooked:
                compiles.audited += 1
            else:
                compiles.outside += 1

        jax.monitoring.register_event_duration_secs_listener(cast(Any, on_event))
        self._event_listener = on_event
        return True


def _hidden_from_tracebacks() -> None:
    """The hook's frames (this module's) are in the suite's call path wherever JAX traces or
    runs a jit: JAX's traceback filtering leaves them out of the suite's errors, as it leaves
    out its own frames (and equinox's), so a test that fails while JAX traces its function
    shows what it shows without the audit. (Each frame also sets ``__tracebackhide__``: the
    same under ``JAX_TRACEBACK_FILTERING=off``, where pytest shows JAX's frames.) Once per
    process: JAX keeps the exclusion, and the frames are gone with the hook."""
    try:
        from jax._src import traceback_util

        if __file__ not in traceback_util._exclude_paths:
            traceback_util.register_exclusion(__file__)
    except Exception:  # a JAX that moved it: the frames show, nothing else changes
        return


def _is_jax_function(fun: object) -> bool:
    """Whether a function JAX jits is JAX's own, named as JAX names it when it traces it
    (``api_util.fun_sourceinfo``: ``jax.jit(jax.vmap(f))`` is ``f``'s), so that a computation
    of kind ``eager`` (:meth:`_Adapter.facts`) is exactly one whose function this says is
    JAX's."""
    from jax._src.api_util import fun_sourceinfo

    try:
        return _is_jax_own(_source(fun_sourceinfo(cast("Callable[..., object]", fun))))
    except Exception:  # (a cycle of __wrapped__): the suite's, never in its way
        return False


def _existing_suite_jits(jax: ModuleType) -> weakref.WeakSet[_PjitFunction]:
    """The suite's jit functions created before the audit was installed (a ``conftest.py``
    that imported a library, a module-level ``@jax.jit`` there): found once among the
    interpreter's objects, each a JAX ``PjitFunction`` whose function is not JAX's own."""
    import gc

    kind = type(jax.jit(_is_jax_function))
    found: weakref.WeakSet[_PjitFunction] = weakref.WeakSet()
    for obj in gc.get_objects():
        if type(obj) is kind and not _is_jax_function(getattr(obj, "_fun", None)):
            found.add(cast("_PjitFunction", obj))
    return found


def _registered(
    original: Callable[..., object], found: weakref.WeakSet[_PjitFunction], cleared: set[int]
) -> Callable[..., object]:
    """``pjit._cpp_pjit`` (called once for each jit function JAX creates) that keeps the
    suite's jit functions (not JAX's own: :func:`_is_jax_function`) for
    :meth:`Interception.clear_dispatch_caches`; weakly, a jit made in a test goes with it.

    Every jit of one function shares one C++ dispatch cache entry: a test that makes a new
    ``jax.jit(f)`` of an ``f`` an earlier test jitted (that jit gone, so not cleared at this
    test's start) would find the earlier test's executable there and never pass the hook. So
    the new jit's cache is emptied when it is made, once per function in a test (``cleared``:
    the ids of those emptied since the test began; a jit made again in a loop keeps its fast
    path after the first)."""

    @functools.wraps(original)
    def cpp_pjit(fun: object, jit_info: object) -> object:
        __tracebackhide__ = True
        jitted = original(fun, jit_info)
        if not _is_jax_function(fun):
            with contextlib.suppress(TypeError):  # not weakly referable: never cleared
                found.add(cast("_PjitFunction", jitted))
            if id(fun) not in cleared:
                cleared.add(id(fun))
                with contextlib.suppress(Exception):  # never in the suite's way
                    cast("_PjitFunction", jitted)._clear_cache()
        return jitted

    return cpp_pjit


class _PrimitiveCaches:
    """``pjit._get_cpp_global_cache`` that gives the jit primitive's dispatch outside jit
    (``pjit._pjit_call_impl``: a jit called under ``jax.vmap``, ``jax.grad``... outside jit,
    a jaxpr evaluated) C++ caches of the audit's own, which
    :meth:`Interception.clear_dispatch_caches` empties for every test; every other caller
    (a jit function being created) gets JAX's.

    That dispatch keys its cache by the transformed program, which JAX caches as well (the
    same object in every test): without this each test after the first would find the
    executable there and never pass the hook. Only those programs are in these caches, so
    emptying them for every test costs each test one Python-path call per such program."""

    __slots__ = ("_caches", "_impl", "_original")

    def __init__(self, pjit: ModuleType) -> None:
        self._original: Callable[[bool], object] = pjit._get_cpp_global_cache
        self._impl = pjit._pjit_call_impl.__code__
        kind = type(pjit._cpp_pjit_cache_fun_only)
        self._caches = (kind(capacity=4096), kind(capacity=4096))

    def __call__(self, contains_explicit_attributes: bool) -> object:
        __tracebackhide__ = True
        if sys._getframe(1).f_code is self._impl:
            return self._caches[bool(contains_explicit_attributes)]
        return self._original(contains_explicit_attributes)

    def clear(self) -> None:
        for cache in self._caches:
            cache.clear()


def _stash_static(original: Callable[..., Any]) -> Callable[..., object]:
    """``pjit._infer_params`` that remembers the static arguments of the call it traces, for
    the cache-miss hook that follows (matched by the jaxpr it returns)."""
    state = _STATE

    @functools.wraps(original)
    def infer_params(
        fun: Callable[..., object], info: object, args: Sequence[object],
        kwargs: Mapping[str, object],
    ) -> object:  # fmt: skip
        __tracebackhide__ = True  # the suite's function fails while JAX traces it: its frames
        result = original(fun, info, args, kwargs)
        if not state.busy:
            try:
                jaxpr = result[0].params["jaxpr"]
                state.static = (jaxpr, fun, _static_arguments(fun, info, args, kwargs))
            except Exception:  # static arguments are a detail; never in the suite's way
                state.static = None
        return result

    return infer_params


class _RuleTraces:
    """``partial_eval.trace_to_jaxpr_dynamic`` (``trace_to_jaxpr`` from jax 0.12) that keeps
    the traces of lowering rules written as Python functions (``mlir.lower_fun``: equinox's
    primitives, TPU's SVD, PRNG bits, ...) while JAX lowers a recorded call to run it, and
    hands them back when the audit lowers the same call for the other platforms: each such
    rule is traced once per recorded call instead of twice (the trace does not depend on the
    platform; the rule and its parameters are the same objects, its argument types equal).

    Only inside a hooked call (kept) and the audit's own work on it (read); cleared when the
    hooked call returns. Anything else passes through untouched, as does a trace whose
    function cannot be identified (then it is traced again).
    """

    __slots__ = ("_original",)

    def __init__(self, original: Callable[..., object]) -> None:
        self._original = original

    def __getattr__(self, name: str) -> object:  # jax 0.12's is a cache: its methods stay
        return getattr(self._original, name)  # reachable

    def __call__(self, fun: object, *args: object, **kwargs: object) -> object:
        __tracebackhide__ = True
        state = _STATE
        if not (state.busy or state.hooked):
            return self._original(fun, *args, **kwargs)
        key = _rule_trace_key(fun, args, kwargs)
        if key is None:
            return self._original(fun, *args, **kwargs)
        if state.busy:
            kept = state.rule_traces.get(key)
            return kept[1] if kept is not None else self._original(fun, *args, **kwargs)
        traced = self._original(fun, *args, **kwargs)
        state.rule_traces[key] = (fun, traced)  # (fun: its parts' ids stay theirs)
        return traced


def _rule_trace_key(
    fun: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> Hashable | None:
    """What a lowering rule's trace depends on (the function, by the identity of its code and
    of what it closes over and is given, and the argument types), or ``None`` for any other
    trace or a function that cannot be identified so."""
    try:
        debug = getattr(fun, "debug_info", None) or kwargs.get("debug_info")
        if debug is None:
            debug = next((a for a in args if hasattr(a, "traced_for")), None)
        if getattr(debug, "traced_for", None) != "lower_fun":
            return None
        identity = _callable_identity(fun)
        if identity is None:
            return None
        rest = tuple(tuple(a) if isinstance(a, list) else a for a in args if a is not debug)
        options = tuple(sorted((k, v) for k, v in kwargs.items() if v is not debug))
        key = (identity, rest, options)
        hash(key)
        return key
    except Exception:  # never in the way: the rule is traced again
        return None


def _callable_identity(fun: Any) -> Any:
    """``fun`` (a ``lu.WrappedFun``, a ``functools.partial`` or a Python function) as a
    hashable value made of its code and the identities of what it closes over and is bound
    to; ``None`` for anything else."""
    if isinstance(fun, functools.partial):
        inner = _callable_identity(fun.func)
        if inner is None:
            return None
        bound = tuple(sorted((k, id(v)) for k, v in fun.keywords.items()))
        return ("partial", inner, tuple(id(a) for a in fun.args), bound)
    if hasattr(fun, "f") and hasattr(fun, "params") and hasattr(fun, "transforms"):
        inner = _callable_identity(fun.f)
        if inner is None:
            return None
        transforms = tuple(  # (jax < 0.7 adds one that records result paths)
            (id(transform), tuple(id(a) for a in args)) for transform, args in fun.transforms
        )
        return ("wrapped", inner, tuple((k, id(v)) for k, v in fun.params), transforms)
    code = getattr(fun, "__code__", None)
    if code is None:
        return None
    cells = tuple(id(cell.cell_contents) for cell in fun.__closure__ or ())
    return ("function", code, cells, id(fun.__defaults__), id(fun.__kwdefaults__))


def _unlisten(listener: Callable[..., None]) -> None:
    import jax.monitoring

    unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
    if unregister is None:  # jax < 0.7: only the private name
        from jax._src import monitoring as private

        module: Any = private
        unregister = module._unregister_event_duration_listener_by_callback
    with contextlib.suppress(Exception):
        unregister(listener)
