"""What the audit's hook records: one top-level jitted call (:class:`RecordedCall`), read
through the adapter for the installed JAX release (:data:`ADAPTERS`: what a call's arguments
are, how it lowers for other platforms, its facts for the report, :class:`CallFacts`).

:mod:`pytest_jaxport._jax.interception` installs the hook that makes them (and lists every
private JAX name either module touches, ``PATCH_POINTS``).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import builtins
import functools
import reprlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pytest_jaxport._jax.devices import default_platform
from pytest_jaxport._jax.jaxprs import HOST_CALLBACK_PRIMITIVES, equations, nested, opened
from pytest_jaxport.model.identity import stable_text

if TYPE_CHECKING:
    from jax._src.interpreters.pxla import MeshComputation, MeshExecutable
    from jax.extend.core import ClosedJaxpr, Jaxpr
    from jax.sharding import Sharding
    from jaxlib.mlir import ir

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
    bodies: bool = False
    """Whether an op run eagerly is one primitive JAX applied with functions of its caller's
    as parameters (a loop's body and condition, a branch, a custom derivative's function:
    :func:`applies_bodies`), whose equations carry the lines of the code traced for them."""


class RecordedCall:
    """One top-level call of a jitted computation that missed JAX's C++ dispatch cache.

    Quacks like ``jax.stages.Traced`` where :mod:`pytest_jaxport._jax.lowering` needs it:
    ``.jaxpr`` and ``.lower(lowering_platforms=...)``, so a recorded call is lowered and
    counted exactly as a ``jaxport.check`` trace is.
    """

    __slots__ = ("_adapter", "_signature_text", "arg_types", "fun", "jaxpr", "params", "static")

    def __init__(
        self,
        adapter: Adapter,
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
        self._signature_text: str | None = None

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
        """The signature as stable text (no object ids), for a key shared across processes
        (made once: a new computation's content key and its judged census's both read it)."""
        if self._signature_text is not None:
            return self._signature_text
        p = self.params
        parts = [
            f"args={[self._adapter.type_text(t) for t in self.arg_types]}",
            f"shardings={[self._adapter.sharding_text(t) for t in self.arg_types]}",
        ]
        for name in ("in_shardings", "out_shardings", "donated_invars", "ctx_mesh",
                     "keep_unused", "compiler_options_kvs"):  # fmt: skip
            parts.append(f"{name}={p.get(name)!r}")
        self._signature_text = stable_text("\n".join(parts))
        return self._signature_text

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
        return "eager" if is_jax_own(_defined_at(self.jaxpr)) else "jit"


# -- adapters ------------------------------------------------------------------------------------


def _abstractify(core: ModuleType, value: object) -> object:
    """The abstract value (shape, dtype, weak type) of an argument."""
    return core.shaped_abstractify(value)


def version_tuple(text: str) -> tuple[int, ...]:
    """``(0, 10, 2)`` of a release's version text (``0.10.2``): its first three numbers."""
    numbers = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers)


class Adapter:
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
            bodies=applies_bodies(jaxpr),
        )


class _ArgumentTypes(Adapter):
    """jax 0.8 and newer: the cache-miss path lowers from argument types
    (``pjit.convert_to_metaty``), which hold no device buffers."""

    name = "jit cache-miss hook (argument types, jax>=0.8)"
    oldest = (0, 8, 0)
    needs = (*Adapter.needs, "jax._src.pjit.convert_to_metaty")

    def argument_types(self, args: Sequence[object]) -> tuple[object, ...]:
        from jax._src import pjit

        return tuple(map(pjit.convert_to_metaty, args))


class _LiveArguments(Adapter):
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


ADAPTERS: tuple[Adapter, ...] = (_ArgumentTypes(), _LiveArguments())


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


def source_of(where: str | None) -> str | None:
    """``file:line`` of JAX's name of a traced function (``api_util.fun_sourceinfo``:
    ``name at file:line``); ``None`` where it has no file."""
    return where.rsplit(" at ", 1)[1] if where and " at " in where else None


def _debug_info(jaxpr: object) -> object:
    return getattr(jaxpr, "debug_info", None) or getattr(
        getattr(jaxpr, "jaxpr", None), "debug_info", None
    )


def _defined_at(jaxpr: object) -> str | None:
    """``file:line`` of the function a recorded program was traced from."""
    return source_of(getattr(_debug_info(jaxpr), "func_src_info", None))


def applies_bodies(jaxpr: Jaxpr | ClosedJaxpr) -> bool:
    """Whether ``jaxpr`` is the program of one primitive JAX applied outside jit (dispatch's
    function for an op run eagerly, ``apply_primitive``) whose equations hold programs
    traced from the caller's functions: an eager ``lax.scan``, ``lax.while_loop`` or
    ``lax.cond``, a custom derivative, a ``custom_linear_solve``. Their equations carry the
    lines of the code traced for them (that function's own frames), unlike the rest of an op
    run eagerly, whose program JAX may have traced at another call and reused."""
    source = _defined_at(jaxpr)
    if source is None or _APPLIED_PRIMITIVE not in source.replace("\\", "/"):
        return False
    return any(nested(eqn.params) for eqn in opened(jaxpr).eqns)


_APPLIED_PRIMITIVE = "/jax/_src/dispatch.py:"
"""Where JAX defines the function it jits to run one primitive outside jit (every release
the audit supports)."""


def is_jax_own(source: str | None) -> bool:
    """Whether a jitted function at ``source`` is JAX's own (a ``jnp`` function, the
    one-primitive function of an op run eagerly: a computation of kind ``eager``): inside
    JAX and not one of its wrappers of the user's program (``pmap``)."""
    if source is None or not _is_jax_internal(source):
        return False
    return not any(f in source for f in _PROGRAM_WRAPPERS)


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


def static_arguments_of(
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
