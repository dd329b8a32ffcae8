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

The adapters (:data:`~pytest_jaxport._jax.recorded_call.ADAPTERS`, with what a recorded call
is), newest first; each names the JAX releases it was written for and the patch points it
needs. ``tests/test_interception.py`` runs on every JAX that CI covers.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from pytest_jaxport._jax.lowering import warnings_filtered
from pytest_jaxport._jax.recorded_call import (
    ADAPTERS,
    Adapter,
    RecordedCall,
    is_jax_own,
    source_of,
    static_arguments_of,
    version_tuple,
)

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr

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
    "jax._src.source_info_util.register_exclusion": (
        "the hook's frames left out of the locations of the suite's programs"
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
    whether that work is the audit's on a hooked call (``recording``), how deep inside hooked
    calls (their compilations are audited ones), and the static arguments of the jit call
    being dispatched."""

    def __init__(self) -> None:
        self.busy = False
        self.recording = False
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


def _silenced() -> contextlib.AbstractContextManager[None]:
    """Every warning ignored while the audit works, without touching what the suite sees
    (what the audit's own lowering for absent platforms warns is kept inside it, by
    ``lowering.warnings_kept``, for the computation's record)."""
    return warnings_filtered("ignore")


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
        self._adapter: Adapter | None = None
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

        version = version_tuple(jax.__version__)
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
                state.busy = state.recording = True
                try:
                    with _silenced():
                        listener(RecordedCall(adapter, jaxpr, params, arg_types, fun, static))
                except Exception as e:  # the audit must never change what the suite sees
                    compiles.errors.append(f"{type(e).__name__}: {e}"[:300])
                finally:
                    state.busy = state.recording = False
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
    runs a jit: JAX leaves them out as it leaves out its own frames (and equinox's), once per
    process (JAX keeps the exclusions, and the frames are gone with the hook):

    - out of the suite's errors (JAX's traceback filtering), so a test that fails while JAX
      traces its function shows what it shows without the audit (each frame also sets
      ``__tracebackhide__``: the same under ``JAX_TRACEBACK_FILTERING=off``, where pytest
      shows JAX's frames);
    - out of the locations of the programs the suite compiles (JAX's user frames): an eager
      op is traced inside the hook, whose frame would be its innermost, the line XLA's
      metadata names (profilers, dumps) and one more frame in every location; the audit
      leaves the suite's programs as they are.
    """
    for module in ("traceback_util", "source_info_util"):
        try:
            found: Any = importlib.import_module(f"jax._src.{module}")
            if __file__ not in found._exclude_paths:
                found.register_exclusion(__file__)
        except Exception:  # a JAX that moved it: the frames show, nothing else changes
            continue


def _is_jax_function(fun: object) -> bool:
    """Whether a function JAX jits is JAX's own, named as JAX names it when it traces it
    (``api_util.fun_sourceinfo``: ``jax.jit(jax.vmap(f))`` is ``f``'s), so that a computation
    of kind ``eager`` (:meth:`Adapter.facts`) is exactly one whose function this says is
    JAX's."""
    from jax._src.api_util import fun_sourceinfo

    try:
        return is_jax_own(source_of(fun_sourceinfo(cast("Callable[..., object]", fun))))
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
                state.static = (jaxpr, fun, static_arguments_of(fun, info, args, kwargs))
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

    Only inside a hooked call (kept) and the audit's own work on it (read, and kept too: the
    platforms it lowers together each run their rule, and where those are one function, as
    threefry's unrolled rule for cuda, rocm and tpu, the first platform's trace serves the
    others: an eager ``jax.random.normal`` lowers in three quarters of the time); cleared
    when the hooked call returns. Anything else passes through untouched (a check's lowering
    keeps nothing: nothing would clear it), as does a trace whose function cannot be
    identified (then it is traced again).
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
        kept = state.rule_traces.get(key) if state.busy else None
        if kept is not None:
            return kept[1]
        traced = self._original(fun, *args, **kwargs)
        if state.recording or not state.busy:  # (not a check's: nothing clears those)
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
