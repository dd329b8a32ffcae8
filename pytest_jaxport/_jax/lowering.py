"""Lowering a traced computation for a platform, one platform (:func:`lower`) or several at
once (:func:`lower_together`), with no hardware for it; why a lowering failed, in a report's
words (:class:`LoweringFailure`, :func:`describe_error`); the warnings JAX gives meanwhile.

JAX is imported inside functions: the plugin's side imports this package only when a check or
the audit needs it, and a pytest run without portable tests never pays for JAX.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from pytest_jaxport._jax.adapters import (
    default_rules_shared,
    jax_release,
    missing_package,
)
from pytest_jaxport._jax.jaxprs import (
    equations,
)
from pytest_jaxport._jax.stablehlo import read_programs
from pytest_jaxport.model.census import (
    Program,
)
from pytest_jaxport.model.classification import NOT_RUNNABLE, classify

if TYPE_CHECKING:
    from jax.stages import Lowered


class LoweringFailure(Exception):
    """JAX could not lower (or compile, or run) the function for one platform.

    ``compiled`` is the executable when compiling succeeded and running failed, ``None``
    otherwise; ``stage`` says which step failed (``lower``, ``compile`` or ``run``).
    """

    def __init__(self, message: str, *, stage: str = "lower", compiled: Any = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.compiled = compiled


def describe_error(error: BaseException) -> str:
    """One line for a report: the exception type and the first line of its message, and
    what to install where a missing package caused it."""
    message = str(error).strip().splitlines()
    first = message[0] if message else ""
    text = f"{type(error).__name__}: {first}"[:500]
    hint = missing_package(text)
    return text if hint is None else f"{text} [{hint}]"


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
        with _locations_reach_user_code(), default_rules_shared(platforms):
            lowered = traced.lower(lowering_platforms=tuple(platforms))
        programs = read_programs(lowered, len(platforms))
    except Exception:  # whatever went wrong, lowering per platform says it per platform
        return None
    return dict(zip(platforms, programs, strict=True))


def module_text(lowered: Lowered) -> str:
    """The lowered module's text without locations (part of the compiled-level cache key)."""
    text: str = lowered.as_text()
    return text
