"""Run a function on the CPU as another platform would run it: the emulation engine.

:func:`emulate` replays the function's jaxpr on the CPU with three changes, each what the
emulated platform's lowering would select:

* every ``lax.platform_dependent`` takes that platform's branch (as
  ``specialize.PlatformBranches`` does, also inside loops, conditionals and
  custom-derivative rules);
* every Pallas kernel is re-bound in the interpret mode matching the kernel kind that
  platform lowers it to (``model.interpreters.interpreter_for``): Mosaic TPU kernels in TPU
  interpret mode, Mosaic GPU kernels in Mosaic GPU interpret mode, Triton kernels in the
  generic Pallas interpreter. A kernel this JAX cannot interpret, or an FFI target, stops
  the emulation with a note saying why (never an exception);
* every float32 ``dot_general`` and ``conv_general_dilated`` at the default precision gets
  its operands rounded (``lax.reduce_precision``) to the format that platform multiplies
  in (``model.arithmetic.default_dot_format``); products of such operands are exact in
  float32, so the CPU then accumulates them as the platform does, in float32. An explicit
  ``precision``, ``preferred_element_type`` or dot algorithm is left alone.

Control flow is replayed through JAX's public constructors (``lax.scan``,
``lax.while_loop``, ``lax.switch``), so the rewritten bodies type-check on every supported
release; nested jits, checkpoints and custom_jvp/custom_vjp functions are inlined (their
primal is what runs). Primitives whose bodies cannot be replayed that way (``shard_map``)
are bound as they are and the report says what inside them was not emulated.

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, cast

from pytest_jaxport._jax.adapters import (
    INLINED_PRIMITIVES,
    KERNEL_PRIMITIVES,
    interpret_params,
    jax_release,
    kernel_equation_name,
    kernel_kind,
    linear_solve_body,
    reset_interpreters,
    scan_operands,
)
from pytest_jaxport._jax.arithmetic import (
    blocked_cumsum,
    float16_as_bfloat16,
    in_format,
    is_float32,
    matmul_precision,
    moved_outputs,
    precision_of,
    product_unit,
    rounded,
    rounded_float32,
    three_passes,
)
from pytest_jaxport._jax.jaxprs import (
    Evaluator,
    bind,
    consts_of,
    derived,
    equation_context,
    equations,
    nested,
    opened,
    platform_branch,
    source_line,
)
from pytest_jaxport._jax.lowering import describe_error
from pytest_jaxport._jax.outputs import to_outputs
from pytest_jaxport._jax.tracing import Trace
from pytest_jaxport.model.arithmetic import (
    BFLOAT16,
    BLOCKED_SCANS,
    CHAIN_OPS,
    FORMATS,
    NARROW_IN_FLOAT32,
    NARROW_RULES,
    PASSED_THROUGH,
    WIDE_DTYPES,
    WIDE_RULES,
    DotRule,
    NumberFormat,
    default_dot_format,
    dot_arithmetic,
    is_narrow,
)
from pytest_jaxport.model.chip_errors import (
    EXACT_EVERYWHERE,
    FUSED_MULTIPLY_ADD,
    ChipBounds,
    OpBound,
    chip_bounds,
)
from pytest_jaxport.model.compare import Outputs
from pytest_jaxport.model.emulation import (
    EMULATED_PLATFORMS,
    BoundedOp,
    BoundedSite,
    ChosenBranch,
    EmulatedKernel,
    Emulation,
    Unemulated,
    grouped_bounds,
    grouped_rounding,
)
from pytest_jaxport.model.interpreters import Interpreter, interpreter_for, needs_release

if TYPE_CHECKING:
    import jax
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn
    from jax.stages import Traced
    from jax.tree_util import PyTreeDef


@dataclass(frozen=True, slots=True, kw_only=True)
class Emulated:
    """The outputs of a function as ``emulation.platform`` would compute them, run on the
    CPU, and what the emulation did (``value``/``outputs`` are ``None`` when it could not
    run: :attr:`Emulation.ran`)."""

    emulation: Emulation
    value: object = None
    outputs: Outputs | None = None
    bounded: Callable[[], Bounded] | None = None
    """Runs the program again with every op the emulation cannot compute as the chip does
    moved by the chip's measured error bound (``model.chip_errors.chip_bounds``): called only
    where the outputs matched (a mismatch needs no bound, and its compile is not paid);
    ``None`` where the platform has no measured bounds or the emulation did not run."""
    code_only: Callable[[], Outputs | None] | None = None
    """Runs the program again with the platform's branches and kernels but the CPU's
    arithmetic (no dot rounded, no scan blocked): called only where the outputs differ, to
    tell whether the code the platform runs or its arithmetic made them differ (``None``
    from a failed run); ``None`` where the emulation changed only one of the two."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Bounded:
    """The bounded run: the ops it moved (and those with no measured bound), and the outputs
    it gave (``None`` where it could not run: ``error`` says why)."""

    sites: tuple[BoundedOp, ...]
    outputs: Outputs | None = None
    error: str | None = None


def emulate(
    fn: Callable[..., object] | Traced | Trace,
    args: Sequence[object] = (),
    kwargs: Mapping[str, object] | None = None,
    *,
    platform: str,
    cuda_capability: tuple[int, int] | None = None,
    own: tuple[str, ...] = (),
) -> Emulated:
    """Run ``fn(*args, **kwargs)`` on the CPU as ``platform`` would (see the module).

    ``fn`` is a function, a ``jax.stages.Traced`` (``jax.jit(f).trace(*args, **kwargs)``)
    or a ``tracing.Trace``; for a trace, ``args``/``kwargs`` are what it was traced with.
    ``cuda_capability`` is the GPU generation a cuda emulation assumes (default an H100,
    ``model.arithmetic.DEFAULT_CUDA_CAPABILITY``). ``own``: installed packages whose lines
    count as the user's (``[tool.jaxport] own_packages``), as in a census.

    Example::

        emulated = emulate(fused_bias_gelu, (x, b), platform="tpu")
        emulated.emulation.kernels   # (EmulatedKernel(label='Pallas kernel ...', ...),)
        emulated.value               # what the tpu branch's kernel computes, run on the CPU
    """
    if platform not in EMULATED_PLATFORMS:
        raise ValueError(
            f"cannot emulate {platform!r}: expected one of {', '.join(EMULATED_PLATFORMS)}"
        )
    import jax

    kwargs = dict(kwargs or {})
    closed, out_tree, flat = _program(fn, args, kwargs)
    dot_format = default_dot_format(platform, cuda_capability=cuda_capability)
    pinned = matmul_precision()

    def replay_for(bounds: ChipBounds | None) -> _Replay:
        return _Replay(platform, dot_format, cuda_capability=cuda_capability,
                       matmul_precision=pinned, own=own, bounds=bounds)  # fmt: skip

    replay = replay_for(None)
    wide = _wide_sites(closed, platform, replay.line)
    if wide:  # float64 is never computed as this platform does: said, never "match"
        replay.unemulated.extend(wide)
        return Emulated(emulation=replay.record())

    def emulated(*leaves: object) -> list[object]:
        return replay.run(closed.jaxpr, closed.consts, leaves)

    flat = _on_host(flat)
    traced = _traced(emulated, flat, replay)
    if traced is None:
        return Emulated(emulation=replay.record())
    bounds = chip_bounds(platform)
    record = replay.record(bounds=bounds)
    if not record.ran:
        return Emulated(emulation=record)
    try:
        with _cpu_default():
            compiled = traced.lower().compile()
            leaves = jax.block_until_ready(compiled(*flat))  # type: ignore[no-untyped-call]
    except Exception as e:  # an interpreted kernel's failure is the platform's finding
        reset_interpreters(replay.interpreters)
        return Emulated(emulation=replay.record(error=_run_error(e), bounds=bounds))
    value = jax.tree_util.tree_unflatten(out_tree, list(leaves))
    bounded = None
    if bounds is not None:
        bounded = partial(_bounded_run, replay_for(bounds), bounds, closed, out_tree, flat)
    code_only = None
    if (record.kernels or record.branches) and record.rounded:  # a mismatch's cause
        plain = _Replay(platform, None, own=own, arithmetic=False)
        code_only = partial(_code_only_run, plain, closed, out_tree, flat)
    return Emulated(emulation=record, value=value, outputs=to_outputs(value), bounded=bounded,
                    code_only=code_only)  # fmt: skip


def _traced(
    emulated: Callable[..., list[object]], flat: list[object], replay: _Replay
) -> Traced | None:
    """``emulated`` traced on ``flat``; ``None`` where the replay met what it cannot rebuild
    (``replay`` then says why: the engine's limit, not the program's fault, a note)."""
    import jax

    try:
        with _cpu_default():
            traced: Traced = jax.jit(emulated).trace(*flat)
    except Exception as e:  # the replay met what it cannot rebuild: no outputs, say why
        replay.unemulated.append(Unemulated(
            what="the program", location="", blocks=True,
            reason=f"the emulation could not replay it: {describe_error(e)}"))  # fmt: skip
        return None
    return traced


def _bounded_run(
    moved: _Replay, bounds: ChipBounds, closed: ClosedJaxpr, out_tree: PyTreeDef, flat: list[object]
) -> Bounded:
    """The program once more, each op the emulation cannot compute as the chip does moved by
    its bound (``moved``: the bounded replay)."""
    import jax

    def run(*leaves: object) -> list[object]:
        return moved.run(closed.jaxpr, closed.consts, leaves)

    try:
        with _cpu_default():
            leaves = jax.block_until_ready(jax.jit(run)(*flat))  # type: ignore[no-untyped-call]
    except Exception as e:  # the engine's limit: said, never a failure of the program
        return Bounded(sites=grouped_bounds(moved.bounded), error=describe_error(e))
    value = jax.tree_util.tree_unflatten(out_tree, list(leaves))
    return Bounded(sites=grouped_bounds(moved.bounded), outputs=to_outputs(value))


def _code_only_run(
    plain: _Replay, closed: ClosedJaxpr, out_tree: PyTreeDef, flat: list[object]
) -> Outputs | None:
    """The program once more with the platform's branches and kernels only (``plain``: the
    replay without its arithmetic); ``None`` where it could not run."""
    import jax

    def run(*leaves: object) -> list[object]:
        return plain.run(closed.jaxpr, closed.consts, leaves)

    try:
        with _cpu_default():
            leaves = jax.block_until_ready(jax.jit(run)(*flat))  # type: ignore[no-untyped-call]
    except Exception:  # the engine's limit: the mismatch stays unattributed, never a failure
        reset_interpreters(plain.interpreters)
        return None
    return to_outputs(jax.tree_util.tree_unflatten(out_tree, list(leaves)))


_RAISED = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")


def _run_error(error: BaseException) -> str:
    """One line for a failed emulated run. An interpreted kernel fails inside a host
    callback: XLA wraps the kernel's own exception (``IndexError: Out-of-bounds block index
    ...``) in ``CpuCallback error calling callback: Traceback ...``; the last exception line
    of that text is the kernel's."""
    raised = [m for line in str(error).splitlines() if (m := _RAISED.match(line.strip()))]
    if "callback" in str(error).splitlines()[0].lower() and raised:
        kind, message = raised[-1].groups()
        return f"{kind}: {message}"[:500]
    return describe_error(error)


def _program(
    fn: Callable[..., object] | Traced | Trace,
    args: Sequence[object],
    kwargs: Mapping[str, object],
) -> tuple[ClosedJaxpr, PyTreeDef, list[object]]:
    """``(closed jaxpr, output treedef, flat arguments)`` of a function or a trace."""
    import jax

    traced = getattr(fn, "traced", fn)  # a tracing.Trace wraps a jax.stages.Traced
    flat = jax.tree_util.tree_leaves((tuple(args), dict(kwargs)))
    closed = getattr(traced, "jaxpr", None)
    if closed is not None and hasattr(traced, "out_info") and hasattr(closed, "consts"):
        # out_info is None for a function returning None: a trace all the same
        if len(flat) != len(closed.in_avals):
            raise ValueError(
                f"the trace takes {len(closed.in_avals)} arrays, the arguments hold "
                f"{len(flat)}: pass the arguments it was traced with"
            )
        return closed, jax.tree_util.tree_structure(traced.out_info), flat
    function = cast("Callable[..., object]", fn)  # neither a Traced nor a Trace: a function
    closed, out_shape = jax.make_jaxpr(function, return_shape=True)(*args, **kwargs)
    return closed, jax.tree_util.tree_structure(out_shape), flat


class _Replay(Evaluator):
    """Evaluates a jaxpr under the current trace with the emulated platform's choices,
    recording each choice and where the user's code made it. With ``bounds`` (the chip's
    measured errors) it is the *bounded* replay: the same choices, and every op the
    emulation cannot compute as the chip does moved by its bound."""

    def __init__(
        self,
        platform: str,
        dot_format: NumberFormat | None,
        *,
        cuda_capability: tuple[int, int] | None = None,
        matmul_precision: str | None = None,
        own: tuple[str, ...] = (),
        bounds: ChipBounds | None = None,
        arithmetic: bool = True,
    ) -> None:
        self.platform = platform
        self.arithmetic = arithmetic
        """``False``: the platform's branches and kernels only, every op computed as on the
        CPU (what tells a mismatch's cause: :attr:`Emulated.code_only`)."""
        self.own = own
        self.dot_format = dot_format
        self.cuda_capability = cuda_capability
        self.matmul_precision = matmul_precision
        """``jax.default_matmul_precision(...)`` around the check: the precision of every
        dot whose own is the default (``"pinned"``: one this engine leaves alone)."""
        self.bounds = bounds
        self.branches: list[ChosenBranch] = []
        self.kernels: list[EmulatedKernel] = []
        self.rounded: list[tuple[str, ...]] = []
        self.bounded: list[BoundedSite] = []
        self.pinned = 0
        self.unemulated: list[Unemulated] = []
        self.interpreters: set[str] = set()
        self._lines: dict[object, str] = {}
        self._outer: list[str] = []  # the lines of the equations being replayed inside
        self._touches: dict[int, bool] = {}
        self._salt = 0
        self._summed: list[frozenset[object]] = []
        """Per jaxpr being run, the variables an add or a subtraction reads."""
        self._wide: list[dict[object, _Wide]] = []
        """Per jaxpr being run, the float32 value the platform holds for each variable of a
        narrow format it has not stored yet (:data:`NARROW_RULES`)."""
        self._sums: list[set[object]] = []
        """Per jaxpr being run, the float32 variables that are a reduction's result (moved
        and broadcast at most)."""
        self._wide_out: list[_Wide | None] = []
        self.narrow_rule = NARROW_RULES.get(platform)

    def run(
        self,
        jaxpr: Jaxpr,
        consts: Iterable[object],
        args: Iterable[object],
        wide: Sequence[_Wide | None] = (),
    ) -> list[object]:
        """The outputs of ``jaxpr``; ``wide``: the float32 values its narrow arguments hold
        (an inlined call's, which the platform's compiler fuses across)."""
        self._summed.append(_summed_vars(jaxpr))
        held = zip(jaxpr.invars, wide, strict=False)  # (wide is empty for most jaxprs)
        self._wide.append({v: w for v, w in held if w is not None})
        self._sums.append(set())
        try:
            outs = super().run(jaxpr, consts, args)
            self._wide_out = [_held(self._wide[-1], v) for v in jaxpr.outvars]
            return outs
        finally:
            self._summed.pop()
            self._wide.pop()
            self._sums.pop()

    def record(self, *, error: str | None = None, bounds: ChipBounds | None = None) -> Emulation:
        """What this replay did (``bounds``: the chip's, where the platform has them; the
        bounded sites are the bounded run's, :class:`Bounded`)."""
        return Emulation(
            platform=self.platform,
            dot_format=None if self.dot_format is None else self.dot_format.name,
            branches=tuple(dict.fromkeys(self.branches)),
            kernels=tuple(dict.fromkeys(self.kernels)),
            rounded=grouped_rounding(self.rounded),
            pinned=self.pinned,
            unemulated=tuple(dict.fromkeys(self.unemulated)),
            error=error,
            bounds_from=None if bounds is None else str(bounds.measurement),
        )  # fmt: skip

    def line(self, eqn: JaxprEqn) -> str:
        """The user's line of ``eqn``, else that of the nearest enclosing equation (JAX keeps
        no user frame for what a library binds while tracing later, ``plgpu.kernel``'s)."""
        found = source_line(eqn.source_info, self._lines, self.own)
        return found or next((line for line in reversed(self._outer) if line), "")

    # -- what needs replaying -----------------------------------------------------------------

    def touches(self, jaxpr: Jaxpr) -> bool:
        """Whether ``jaxpr`` (or a jaxpr inside it) holds something the emulation changes."""
        key = id(jaxpr)
        found = self._touches.get(key)
        if found is None:
            found = self._touches[key] = any(map(self._changes, equations(jaxpr)))
        return found

    def _changes(self, eqn: JaxprEqn) -> bool:
        name = eqn.primitive.name
        if name == "platform_index" or name in KERNEL_PRIMITIVES:
            return True
        if not self.arithmetic:
            return False
        if self.bounds is not None and (self._inexact(eqn) or name == "mul"):
            return True  # (a product an add reads may be moved: the CPU's fused multiply-add)
        if self.narrow_rule is not None and any(
            self.narrow(v.aval) for v in (*eqn.invars, *eqn.outvars)
        ):
            return True
        if name in _PRODUCTS:
            return self._dot_plan(eqn)[0] not in ("as on cpu", "pinned")
        return name in BLOCKED_SCANS.get(self.platform, ()) and self._blocked(eqn)

    # -- evaluation -------------------------------------------------------------------------------

    def equation(
        self, eqn: JaxprEqn, values: list[object], known: tuple[bool, ...]
    ) -> tuple[Sequence[object], bool]:
        """Bound under the current trace with the emulated platform's choices (the
        :class:`~pytest_jaxport._jax.jaxprs.Evaluator`'s override)."""
        import jax

        if eqn.primitive.name == "platform_index":
            return [self.platform_index(eqn)], True
        if derived(eqn, known):  # arithmetic on the platform index: keep it a constant
            with jax.ensure_compile_time_eval(), equation_context(eqn):
                return bind(eqn, values), True
        with equation_context(eqn):
            return self.evaluate(eqn, values, static_index=bool(known) and known[0]), False

    def platform_index(self, eqn: JaxprEqn) -> object:
        import numpy as np

        platforms = eqn.params["platforms"]
        index = platform_branch(platforms, self.platform)
        names = platforms[index]
        branch = "default" if names is None else "/".join(names)
        self.branches.append(ChosenBranch(location=self.line(eqn), branch=branch))
        return np.int32(index)

    def evaluate(self, eqn: JaxprEqn, values: list[object], *, static_index: bool) -> list[object]:
        name = eqn.primitive.name
        if name in KERNEL_PRIMITIVES:
            return self.kernel(eqn, values)
        if not self.arithmetic:
            return self._as_on_cpu(eqn, values, static_index=static_index)
        if name in _PRODUCTS:
            return self.product(eqn, values)
        if name in BLOCKED_SCANS.get(self.platform, ()) and self._blocked(eqn):
            self.rounded.append((name, self.line(eqn), "blocked scan", "scan"))
            return [blocked_cumsum(values[0], axis=int(eqn.params["axis"]),
                                   reverse=bool(eqn.params.get("reverse")))]  # fmt: skip
        if self.narrow_rule is not None:
            self._track_sums(eqn)
            kind = self._narrow_kind(eqn)
            if kind is not None:
                return self.narrow_equation(eqn, values, kind)
        return self._as_on_cpu(eqn, values, static_index=static_index)

    def _as_on_cpu(
        self, eqn: JaxprEqn, values: list[object], *, static_index: bool
    ) -> list[object]:
        """``eqn`` bound as the CPU computes it, its bodies replayed where they hold what the
        emulation changes."""
        name = eqn.primitive.name
        if name == "cond" and (static_index or eqn.params.get("branches_platforms")):
            # platform_dependent's cond: from jax 0.7 it carries ``branches_platforms`` and
            # its lowering picks the branch by the platform it lowers for (the CPU here),
            # ignoring the index. Bound as it is, the CPU's branch would run whatever the
            # index says: the emulated platform's branch is run in its place.
            return self.cond(eqn, values, static_index=static_index)
        subs = nested(eqn.params)
        if not subs:
            return self.moved(eqn, values, bind(eqn, values))
        if not any(self.touches(sub) for sub in subs):
            return bind(eqn, values)
        self._outer.append(self.line(eqn))
        try:
            return self.replay_inside(eqn, values, subs, static_index=static_index)
        finally:
            self._outer.pop()

    def replay_inside(
        self, eqn: JaxprEqn, values: list[object], subs: list[Jaxpr], *, static_index: bool
    ) -> list[object]:
        """Evaluate a higher-order primitive whose bodies the emulation changes."""
        name = eqn.primitive.name
        if name == "cond":
            return self.cond(eqn, values, static_index=static_index)
        if name == "scan":
            return self.scan(eqn, values)
        if name == "while":
            return self.while_loop(eqn, values)
        inner = _inlined_jaxpr(eqn, values)
        if inner is not None:
            jaxpr, consts, operands = inner
            if len(operands) != len(eqn.invars) or not self._wide:
                return self.run(jaxpr, consts, operands)
            held = [_held(self._wide[-1], v) for v in eqn.invars]
            outs = self.run(jaxpr, consts, operands, wide=held)
            for var, found in zip(eqn.outvars, self._wide_out, strict=True):
                if found is not None:
                    self._wide[-1][var] = found
            return outs
        self.not_replayed(eqn, subs)
        return bind(eqn, values)

    # -- products: how the platform multiplies ---------------------------------------------------

    def _dot_plan(self, eqn: JaxprEqn) -> tuple[str, str]:
        """``(arithmetic, why)`` for a dot or convolution: an :data:`Arithmetic` (or
        ``float16 as bfloat16``), ``"as on cpu"`` (nothing to change), or ``"pinned"`` (its
        precision set in a way this engine leaves alone)."""
        kind = _operand_kind(eqn)
        if kind is None:
            return ("pinned" if _widened(eqn) else "as on cpu"), ""
        precision = precision_of(eqn.params.get("precision"))
        if precision == "default" and self.matmul_precision is not None:
            precision = self.matmul_precision
        if precision == "pinned":
            return "pinned", ""
        unit = product_unit(eqn)
        rule = dot_arithmetic(self.platform, operands=kind, precision=precision, unit=unit,
                              cuda_capability=self.cuda_capability)  # fmt: skip
        if isinstance(rule, DotRule):
            if rule.arithmetic == "float32" and precision != "default":
                return "pinned", ""  # what the program asked for: computed as set
            return rule.arithmetic, _why(rule, unit, precision)
        if rule is not None and rule.format is not None and precision == "default":
            return rule.format.name, ""
        return ("pinned" if precision != "default" else "as on cpu"), ""

    def product(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        """A dot or convolution as the platform multiplies it (then, bounded, moved by the
        chip's accumulation bound)."""
        arithmetic, why = self._dot_plan(eqn)
        lhs, rhs, *rest = cast("list[jax.Array]", values)  # a product's operands, traced
        if arithmetic == "pinned":
            self.pinned += 1
        elif arithmetic not in ("as on cpu", "float32") or why:
            self.rounded.append((eqn.primitive.name, self.line(eqn), arithmetic, why))
        if arithmetic == "as on cpu" and self._narrow_result(eqn):
            return self.narrow_product(eqn, values)
        if arithmetic in ("as on cpu", "pinned", "float32"):
            outs = bind(eqn, values)
        elif arithmetic == "bfloat16x3":
            outs = three_passes(eqn, lhs, rhs, rest)
        elif arithmetic == "float16 as bfloat16":
            outs = float16_as_bfloat16(eqn, lhs, rhs, rest)
        elif arithmetic == "bfloat16 input":
            outs = bind(eqn, [rounded(lhs, BFLOAT16), rhs, *rest])
        else:
            fmt = FORMATS[arithmetic]
            outs = bind(eqn, [rounded_float32(lhs, fmt), rounded_float32(rhs, fmt), *rest])
        if self.bounds is None:
            return outs
        return self.moved(eqn, [lhs, rhs, *rest], outs)

    # -- bounds: what the emulation cannot compute as the chip does ------------------------------

    def _inexact(self, eqn: JaxprEqn, *, wide: bool = False) -> bool:
        """Whether ``eqn`` computes floats in a way the chip may not (bounded or unbounded);
        ``wide``: its narrow results are computed in float32 (they count too)."""
        name = eqn.primitive.name
        if name in EXACT_EVERYWHERE or name in KERNEL_PRIMITIVES or nested(eqn.params):
            return False
        if self.bounds is not None and self.bounds.is_exact(name):
            return False
        if name in BLOCKED_SCANS.get(self.platform, ()) and self._blocked(eqn):
            return False  # computed as the chip does, bit for bit
        return any(is_float32(v.aval) or (wide and self.narrow(v.aval)) for v in eqn.outvars)

    def moved(
        self,
        eqn: JaxprEqn,
        values: list[object],
        outs: list[object],
        *,
        wide: bool = False,
        exact_product: bool = False,
    ) -> list[object]:
        """``outs`` of ``eqn``, each float32 result moved by the chip's measured bound for its
        op (in the bounded replay; as they are otherwise). The site is recorded, with no bound
        where none was measured. A product an add reads is moved by the fused multiply-add's
        bound where one was measured (the CPU fuses the two, the chip rounds the product).
        ``wide``: ``outs`` are the float32 values of a narrow op (:meth:`narrow_equation`);
        ``exact_product``: a product of stored narrow values, exact in float32 (not moved)."""
        if self.bounds is None:
            return outs
        name = eqn.primitive.name
        towards = getattr(eqn.outvars[0].aval, "dtype", None) if wide else None
        if name == "mul" and self._summed and eqn.outvars[0] in self._summed[-1]:
            fused = None if exact_product else self.bounds.bound(FUSED_MULTIPLY_ADD)
            if fused is not None and (wide or is_float32(eqn.outvars[0].aval)):
                self.bounded.append((FUSED_MULTIPLY_ADD, self.line(eqn), fused, ""))
                self._salt += 1
                return moved_outputs(eqn, values, outs, fused, salt=self._salt, towards=towards)
        if not self._inexact(eqn, wide=wide):
            return outs
        dtype = str(towards) if towards is not None else ""
        bound = self.bounds.bound(name, dtype)
        site = bound.op if bound is not None and bound.op.startswith(f"{dtype} ") else name
        found = bound.at(_measured_size(eqn, bound.size_of)) if bound is not None else None
        if not isinstance(found, OpBound):  # none measured, or not at this size: said
            self.bounded.append((site, self.line(eqn), None, found or ""))
            return outs
        self.bounded.append((site, self.line(eqn), found.shown, ""))
        self._salt += 1
        return moved_outputs(eqn, values, outs, found, salt=self._salt, towards=towards)

    # -- formats narrower than float32 (NARROW_RULES) -----------------------------------------

    def narrow(self, aval: object) -> bool:
        """Whether a value of type ``aval`` is of a format this platform computes in float32."""
        return is_narrow(str(getattr(aval, "dtype", "")), self.platform)

    def _narrow_kind(self, eqn: JaxprEqn) -> str | None:
        """What :data:`NARROW_RULES` make of ``eqn``: ``convert`` (into or out of a narrow
        format), ``chain`` (an elementwise op of a chain), ``through`` (a move a chain
        continues through), ``reduce`` (a reduction computed in float32), else ``None``."""
        name = eqn.primitive.name
        if name == "convert_element_type":
            ends = (eqn.invars[0].aval, eqn.outvars[0].aval)
            return "convert" if any(self.narrow(a) for a in ends) else None
        if not any(self.narrow(v.aval) for v in eqn.outvars):
            return None
        if name in CHAIN_OPS:
            return "chain"
        if name in PASSED_THROUGH or name == "broadcast_in_dim":
            return "through"
        return "reduce" if name in NARROW_IN_FLOAT32 else None

    def narrow_equation(self, eqn: JaxprEqn, values: list[object], kind: str) -> list[object]:
        """``eqn`` as the platform computes a narrow format: in float32, the float32 value
        kept (``self._wide``) until the compiler stores it."""
        if kind == "convert":
            return self._convert(eqn, values)
        if kind == "through":
            return self._through(eqn, values)
        if kind == "reduce":
            return self._narrow_reduction(eqn, values)
        return self._chain(eqn, values)

    def _operand(self, var: object, value: object, shape: tuple[int, ...]) -> tuple[object, bool]:
        """``(float32 operand, whether it is a value the platform kept unrounded)`` of a chain
        op whose result has ``shape``. A value broadcast into a larger one is stored first
        (the compiler does not fuse it into the larger op), unless it is a conversion of a
        reduction's float32 result (stored as float32: the conversion fuses into the op that
        reads it); the bounded run takes the other side."""
        import jax.numpy as jnp

        aval = getattr(var, "aval", None)
        if not self.narrow(aval):
            return value, False
        held = _held(self._wide[-1], var)
        broadcast = tuple(getattr(aval, "shape", ())) != shape
        if held is not None and (not broadcast or held.of_sum or self.bounds is not None):
            return held.value, True
        return jnp.asarray(value).astype(jnp.float32), False

    def _stored(self, wide: object, aval: object) -> jax.Array:
        """A float32 value stored in ``aval``'s narrow format (flushed where the rule says)."""
        dtype = getattr(aval, "dtype", None)
        rule = self.narrow_rule
        return in_format(wide, dtype, flush=rule is not None and str(dtype) in rule.flushed)

    def _chain(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        """An elementwise op on a narrow format: computed in float32 on the values the
        platform holds, its float32 result kept for the next op of the chain."""
        (out,) = eqn.outvars
        shape = tuple(getattr(out.aval, "shape", ()))
        found = [self._operand(v, x, shape) for v, x in zip(eqn.invars, values, strict=True)]
        operands = [operand for operand, _ in found]
        exact = not any(kept for _, kept in found)  # a product of stored values is exact
        wide = self.moved(eqn, operands, bind(eqn, operands), wide=True, exact_product=exact)
        self._wide[-1][out] = _Wide(value=wide[0])
        if any(kept for _, kept in found):
            self.rounded.append((eqn.primitive.name, self.line(eqn), "float32, rounded once",
                                 "narrow"))  # fmt: skip
        return [self._stored(wide[0], out.aval)]

    def _through(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        """A move of a narrow value (reshape, transpose, broadcast): the float32 value it
        holds moves with it, unless a broadcast makes it larger (stored: the bounded run
        takes the other side)."""
        import math

        outs = bind(eqn, values)
        held = _held(self._wide[-1], eqn.invars[0])
        if held is None:
            return outs
        sizes = [math.prod(getattr(v.aval, "shape", ())) for v in (eqn.invars[0], eqn.outvars[0])]
        if sizes[1] <= sizes[0] or self.bounds is not None:
            moved = bind(eqn, [held.value, *values[1:]])[0]
            self._wide[-1][eqn.outvars[0]] = _Wide(
                value=moved, converted=held.converted, of_sum=held.of_sum
            )
        return outs

    def _narrow_reduction(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        """A reduction or scan of a narrow format: summed in float32 from the stored values,
        rounded once (a cumsum in the platform's blocks, each stored)."""
        import jax.numpy as jnp

        operands = [jnp.asarray(x).astype(jnp.float32) if self.narrow(v.aval) else x
                    for v, x in zip(eqn.invars, values, strict=True)]  # fmt: skip
        out = eqn.outvars[0]
        self.rounded.append((eqn.primitive.name, self.line(eqn), "float32, rounded once",
                             "narrow"))  # fmt: skip
        if eqn.primitive.name == "cumsum":
            params = eqn.params
            dtype = getattr(out.aval, "dtype", None)
            return [in_format(blocked_cumsum(operands[0], axis=int(params["axis"]),
                                             reverse=bool(params.get("reverse")), stored=dtype),
                              dtype)]  # fmt: skip
        wide = self.moved(eqn, operands, bind(eqn, operands), wide=True)
        return [self._stored(w, v.aval) for w, v in zip(wide, eqn.outvars, strict=True)]

    def _convert(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        """A conversion into or out of a narrow format. Out of one into float32, the float32
        value the platform holds is the result (the pair of conversions is removed). Into one
        from float32, the value is rounded where stored, and held unrounded for the ops that
        read it in the same fusion, except a sum the rule stores rounded
        (``NarrowRule.stored_sums``); the bounded run takes the other side of each."""
        (var,), (out,) = eqn.invars, eqn.outvars
        source, target = (str(getattr(a.aval, "dtype", "")) for a in (var, out))
        if self.narrow(var.aval) and target == "float32":
            held = _held(self._wide[-1], var)
            if held is None:
                return bind(eqn, values)
            what = "round trip kept" if held.converted else "float32, rounded once"
            why = "round trip" if held.converted else "narrow"
            self.rounded.append((eqn.primitive.name, self.line(eqn), what, why))
            return [held.value]
        if source != "float32" or not self.narrow(out.aval):
            return bind(eqn, values)
        rule = self.narrow_rule
        of_sum = _in(var, self._sums[-1])
        stored = rule is not None and target in rule.stored_sums and of_sum
        if stored == (self.bounds is not None):
            of_sum = of_sum and self.bounds is None
            self._wide[-1][out] = _Wide(value=values[0], converted=True, of_sum=of_sum)
        return [self._stored(values[0], out.aval)]

    def _track_sums(self, eqn: JaxprEqn) -> None:
        """Keep ``self._sums``: a float32 reduction's results, and their moves."""
        name = eqn.primitive.name
        sums = self._sums[-1]
        summed = name == "reduce_sum" and is_float32(eqn.outvars[0].aval, complex_too=False)
        moved = (name in PASSED_THROUGH or name == "broadcast_in_dim") and _in(eqn.invars[0], sums)
        if summed or moved:
            sums.add(eqn.outvars[0])

    def _narrow_result(self, eqn: JaxprEqn) -> bool:
        """A product of narrow operands with a narrow result (accumulated in float32)."""
        return self.narrow_rule is not None and all(
            self.narrow(v.aval) for v in (*eqn.invars[:2], *eqn.outvars)
        )

    def narrow_product(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        """A product of narrow operands into a narrow result as the platform computes it:
        accumulated in float32, rounded once (float8's: the CPU rounds otherwise)."""
        import jax.numpy as jnp

        wide = bind(eqn, values, preferred_element_type=jnp.dtype("float32"))
        if str(getattr(eqn.outvars[0].aval, "dtype", "")) not in ("bfloat16", "float16"):
            self.rounded.append((eqn.primitive.name, self.line(eqn), "float32, rounded once",
                                 "narrow"))  # fmt: skip
        wide = self.moved(eqn, values, wide, wide=True)
        return [self._stored(w, v.aval) for w, v in zip(wide, eqn.outvars, strict=True)]

    def _blocked(self, eqn: JaxprEqn) -> bool:
        """A float32 cumulative sum (what the platform scans in blocks)."""
        (operand,) = eqn.invars
        return is_float32(operand.aval, complex_too=False)

    def kernel(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        label = kernel_equation_name(eqn.primitive.name, eqn.params)
        location = self.line(eqn)
        interpreter, interpret, obstacle = self.interpretation(eqn)
        if obstacle is not None:
            self.unemulated.append(
                Unemulated(what=label, location=location, reason=obstacle, blocks=True)
            )
            return bind(eqn, values)  # traced on, to find every reason there is
        assert interpreter is not None
        self.kernels.append(
            EmulatedKernel(label=label, location=location, interpreter=interpreter.name)
        )
        self.interpreters.add(interpreter.name)
        return bind(eqn, values, interpret=interpret)

    def interpretation(self, eqn: JaxprEqn) -> tuple[Interpreter | None, object, str | None]:
        """``(interpreter, interpret parameter, None)`` for a kernel equation the emulated
        platform runs and this JAX can interpret, else ``(.., .., why not)``."""
        name = eqn.primitive.name
        kind = kernel_kind(name, eqn.params, self.platform)
        if kind is None:
            if name in ("pallas_call", "core_map", "mpmd_map"):
                return None, None, "a kernel of a kind pytest-jaxport does not know"
            return (
                None,
                None,
                (
                    f"an FFI target: only its own implementation for {self.platform} runs it, "
                    "and that cannot run on cpu"
                ),
            )
        interpreter = interpreter_for(self.platform, kind)
        if interpreter is None:
            return None, None, f"a {kind.replace('_', ' ')} kernel does not run on {self.platform}"
        interpret = interpret_params(interpreter)
        if interpret is None:
            return interpreter, None, needs_release(interpreter, jax_release())
        return interpreter, interpret, None

    def not_replayed(self, eqn: JaxprEqn, subs: list[Jaxpr]) -> None:
        """Say what inside ``eqn`` (a primitive whose bodies are bound as they are) is not
        emulated: its kernels stop the emulation, its dots stay at full float32."""
        reason = f"inside {eqn.primitive.name}, which the emulation cannot replay"
        for inner in equations(*subs, into=_not_a_kernel):
            name = inner.primitive.name
            if name in KERNEL_PRIMITIVES:
                obstacle = self.interpretation(inner)[2]
                self.unemulated.append(Unemulated(
                    what=kernel_equation_name(name, inner.params), location=self.line(inner),
                    reason=obstacle or reason, blocks=True))  # fmt: skip
            elif name == "platform_index":
                self.unemulated.append(Unemulated(
                    what="platform_dependent", location=self.line(inner),
                    reason=reason + " (its default branch runs)", blocks=False))  # fmt: skip
            elif name in _PRODUCTS and self._dot_plan(inner)[0] not in ("as on cpu", "pinned"):
                self.unemulated.append(
                    Unemulated(what=name, location=self.line(inner), reason=reason, blocks=False)
                )
            elif self.narrow_rule is not None and self._narrow_kind(inner) in ("chain", "reduce"):
                dtype = getattr(inner.outvars[0].aval, "dtype", "")
                self.unemulated.append(Unemulated(
                    what=f"{dtype} {name}", location=self.line(inner), reason=reason,
                    blocks=False))  # fmt: skip

    # -- control flow, rebuilt with JAX's public constructors -----------------------------------

    def cond(self, eqn: JaxprEqn, values: list[object], *, static_index: bool) -> list[object]:
        import numpy as np
        from jax import lax

        index, *operands = values
        branches = eqn.params["branches"]
        if static_index:  # the platform's branch: only it runs
            taken = branches[min(max(int(np.asarray(index)), 0), len(branches) - 1)]
            return self.run(taken.jaxpr, taken.consts, operands)

        def branch(closed: ClosedJaxpr) -> Callable[..., list[object]]:
            return lambda *ops: self.run(closed.jaxpr, closed.consts, ops)

        return list(lax.switch(index, [branch(b) for b in branches], *operands))

    def scan(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        from jax import lax

        params = eqn.params
        consts, init, xs = scan_operands(params, values)
        num_carry = len(init)
        body = params["jaxpr"]
        jaxpr, body_consts = opened(body), consts_of(body)

        def step(carry: list[object], x: list[object]) -> tuple[list[object], list[object]]:
            outs = self.run(jaxpr, body_consts, [*consts, *carry, *x])
            return outs[:num_carry], outs[num_carry:]

        carry, ys = lax.scan(
            step, list(init), list(xs), length=params["length"], reverse=params["reverse"],
            unroll=params.get("unroll", 1),
        )  # fmt: skip
        return [*carry, *ys]

    def while_loop(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        from jax import lax

        params = eqn.params
        cond, body = params["cond_jaxpr"], params["body_jaxpr"]
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        cond_consts, body_consts, init = values[:nc], values[nc : nc + nb], values[nc + nb :]

        def keep_going(carry: Iterable[object]) -> object:
            (flag,) = self.run(cond.jaxpr, cond.consts, [*cond_consts, *carry])
            return flag

        def step(carry: Iterable[object]) -> list[object]:
            return self.run(body.jaxpr, body.consts, [*body_consts, *carry])

        return list(lax.while_loop(keep_going, step, list(init)))


# -- jaxpr facts (what differs by release is in _jax.adapters) -------------------------------------

_INLINED_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr", "call")
_PRODUCTS = ("dot_general", "conv_general_dilated")


def _inlined_jaxpr(
    eqn: JaxprEqn, values: Sequence[object]
) -> tuple[Jaxpr, Sequence[object], Sequence[object]] | None:
    """``(jaxpr, consts, operands)`` of a primitive that runs one body once on (some of) its
    operands: a call or custom-derivative rule (its body), a ``custom_linear_solve`` (its
    ``solve``, on the solve's constants and the right-hand side)."""
    if eqn.primitive.name == "custom_linear_solve":
        found = linear_solve_body(eqn.params, list(values))
        if found is None:
            return None
        body, operands = found
        return opened(body), consts_of(body), operands
    if eqn.primitive.name not in INLINED_PRIMITIVES:
        return None
    for key in _INLINED_PARAMS:
        inner = eqn.params.get(key)
        if inner is not None and hasattr(opened(inner), "eqns"):
            return opened(inner), consts_of(inner), values
    return None


def _not_a_kernel(eqn: JaxprEqn) -> bool:
    """Whether to look inside ``eqn``: not into a kernel's body (it is interpreted, not
    replayed)."""
    return eqn.primitive.name not in KERNEL_PRIMITIVES


def _operand_kind(eqn: JaxprEqn) -> str | None:
    """What a product multiplies, as :data:`~pytest_jaxport.model.arithmetic.DOT_RULES` reads
    it: ``float32`` (float32 or complex64 operands), ``float16`` (into float16 or float32),
    ``mixed`` (bfloat16 with float32), else ``None``."""
    dtypes = sorted(str(getattr(v.aval, "dtype", "")) for v in eqn.invars[:2])
    preferred = eqn.params.get("preferred_element_type")
    if dtypes == ["float16", "float16"] and str(preferred) in ("None", "float16", "float32"):
        return "float16"
    if _widened(eqn):
        return None
    if dtypes in (["float32", "float32"], ["complex64", "complex64"]):
        return "float32"
    if dtypes == ["float16", "float16"]:
        return "float16"
    if dtypes == ["bfloat16", "float32"]:
        return "mixed"
    return None


def _widened(eqn: JaxprEqn) -> bool:
    """A float32 (complex64, float16) product whose ``preferred_element_type`` is another
    dtype: left as the program set it (not what was measured)."""
    dtypes = {str(getattr(v.aval, "dtype", "")) for v in eqn.invars[:2]}
    preferred = eqn.params.get("preferred_element_type")
    if len(dtypes) != 1 or not dtypes <= {"float32", "complex64", "float16"}:
        return False
    return preferred is not None and str(preferred) not in dtypes


def _why(rule: DotRule, unit: str, precision: str) -> str:
    """Why a measured rule changed a product (``RoundedOp.why``: a key of
    ``model.emulation.REASON_TEXT``)."""
    if unit in ("vector", "depthwise"):
        return unit
    if rule.arithmetic == "bfloat16x3":
        return precision  # high, or highest for float16
    return rule.operands if rule.operands in ("float16", "mixed") else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Wide:
    """The float32 value a platform holds for a variable of a narrow format it has not
    stored yet (``converted``: the float32 value a conversion into the format was given;
    ``of_sum``: that value is a reduction's float32 result)."""

    value: object
    converted: bool = False
    of_sum: bool = False


def _in(atom: object, variables: set[object]) -> bool:
    """Whether ``atom`` (a variable or a literal, which is unhashable) is in ``variables``."""
    from jax._src import core as jcore

    return not isinstance(atom, jcore.Literal) and atom in variables


def _held(frame: Mapping[object, _Wide], var: object) -> _Wide | None:
    """``var``'s float32 value in ``frame`` (``None`` for a literal or a stored value)."""
    from jax._src import core as jcore  # Literal, under the same name since 0.4

    return None if isinstance(var, jcore.Literal) else frame.get(var)


def _wide_sites(
    closed: ClosedJaxpr, platform: str, line: Callable[[JaxprEqn], str]
) -> list[Unemulated]:
    """Why a program holding float64 (complex128) is not emulated for ``platform``
    (:data:`WIDE_RULES`): each op the platform's compiler refuses, then the rest as one
    entry at its first line (``[]``: none, or a platform with float64 of its own)."""
    rule = WIDE_RULES.get(platform)
    if rule is None:
        return []
    found: list[Unemulated] = []
    rest: list[tuple[JaxprEqn, str]] = []

    def walk(jaxpr: Jaxpr, outer: str) -> None:
        for eqn in jaxpr.eqns:
            at = line(eqn) or outer  # a library's op: the user's line that called it
            if nested(eqn.params):
                if _not_a_kernel(eqn):
                    for sub in nested(eqn.params):
                        walk(sub, at)
                continue
            dtypes = {str(getattr(v.aval, "dtype", "")) for v in (*eqn.invars, *eqn.outvars)}
            if not dtypes & set(WIDE_DTYPES):
                continue
            wide = "complex128" if "complex128" in dtypes else "float64"
            refusal = rule.refused.get(eqn.primitive.name)
            if refusal is None:
                rest.append((eqn, at))
                continue
            found.append(Unemulated(
                what=f"{wide} {eqn.primitive.name}", location=at, blocks=True,
                reason=f"the {platform} compiler refuses it ({refusal})"))  # fmt: skip

    walk(closed.jaxpr, "")
    if rest:
        names = ", ".join(dict.fromkeys(e.primitive.name for e, _ in rest))
        count = f"{len(rest)} op{'s' if len(rest) > 1 else ''}: {names}"
        found.append(Unemulated(what=f"float64 arithmetic ({count})", location=rest[0][1],
                                blocks=True, reason=f"float64 is not emulated on {platform}: "
                                f"{rule.otherwise}"))  # fmt: skip
    return list(dict.fromkeys(found))


def _measured_size(eqn: JaxprEqn, size_of: str) -> int:
    """The size an op's bound is measured by (``OpBound.size_of``): a matrix's order (the
    larger of its last two dimensions), a transform's length, a cumulative op's axis."""
    import math

    shape = tuple(getattr(eqn.invars[0].aval, "shape", ()))
    if size_of == "n":
        return max(shape[-2:], default=1)
    if size_of == "length":
        return math.prod(eqn.params.get("fft_lengths", ())) or max(shape[-1:], default=1)
    if size_of == "position":
        return shape[int(eqn.params.get("axis", 0))] if shape else 1
    return 0


def _summed_vars(jaxpr: Jaxpr) -> frozenset[object]:
    """The variables an add or a subtraction of ``jaxpr`` reads."""
    from jax._src import core as jcore  # Literal, under the same name since 0.4

    return frozenset(
        v
        for e in jaxpr.eqns
        if e.primitive.name in ("add", "sub", "add_any")
        for v in e.invars
        if not isinstance(v, jcore.Literal)
    )


def _cpu_default() -> contextlib.AbstractContextManager[object]:
    """A context in which jit compiles and runs on the CPU, the emulation's host, also on a
    machine whose default backend is a GPU or TPU."""
    import jax

    if _default_is_cpu():
        return contextlib.nullcontext()
    on_cpu: contextlib.AbstractContextManager[object] = jax.default_device(jax.devices("cpu")[0])
    return on_cpu


def _on_host(flat: list[object]) -> list[object]:
    """The arguments on the CPU (where they are elsewhere, the emulation copies them)."""
    import jax

    if _default_is_cpu():
        return flat
    return list(jax.device_put(flat, jax.devices("cpu")[0]))


def _default_is_cpu() -> bool:
    import jax

    return str(jax.devices()[0].platform) == "cpu"
