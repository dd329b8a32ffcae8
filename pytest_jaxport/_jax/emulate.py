"""Run a function on the CPU as another platform would run it: the emulation engine.

:func:`emulate` replays the function's jaxpr on the CPU with three changes, each what the
emulated platform's lowering would select:

* every ``lax.platform_dependent`` takes that platform's branch (as ``lowering.specialize``
  does, also inside loops, conditionals and custom-derivative rules);
* every Pallas kernel is re-bound in the interpret mode matching the kernel kind that
  platform lowers it to (``model.emulation.interpreter_for``): Mosaic TPU kernels in TPU
  interpret mode, Mosaic GPU kernels in Mosaic GPU interpret mode, Triton kernels in the
  generic Pallas interpreter. A kernel this JAX cannot interpret, or an FFI target, stops
  the emulation with a note saying why (never an exception);
* every float32 ``dot_general`` and ``conv_general_dilated`` at the default precision gets
  its operands rounded (``lax.reduce_precision``) to the format that platform multiplies
  in (``model.emulation.default_dot_format``); products of such operands are exact in
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
from typing import TYPE_CHECKING, cast

from pytest_jaxport._jax.adapters import (
    INLINED_PRIMITIVES,
    KERNEL_PRIMITIVES,
    interpret_params,
    jax_release,
    kernel_kind,
    kernel_label,
    reset_interpreters,
    scan_operands,
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
from pytest_jaxport._jax.lowering import Trace, describe_error, to_outputs
from pytest_jaxport.model.compare import Outputs
from pytest_jaxport.model.emulation import (
    EMULATED_PLATFORMS,
    ChosenBranch,
    EmulatedKernel,
    Emulation,
    Interpreter,
    NumberFormat,
    Unemulated,
    default_dot_format,
    grouped_rounding,
    interpreter_for,
    needs_release,
)

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
    or a ``lowering.Trace``; for a trace, ``args``/``kwargs`` are what it was traced with.
    ``cuda_capability`` is the GPU generation a cuda emulation assumes (default an H100,
    ``model.emulation.DEFAULT_CUDA_CAPABILITY``). ``own``: installed packages whose lines
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
    replay = _Replay(platform, dot_format, all_pinned=_matmul_precision_pinned(), own=own)

    def emulated(*leaves: object) -> list[object]:
        return replay.run(closed.jaxpr, closed.consts, leaves)

    flat = _on_host(flat)
    try:
        with _cpu_default():
            traced = jax.jit(emulated).trace(*flat)
    except Exception as e:  # the replay met what it cannot rebuild: no outputs, say why
        cannot = Unemulated(
            what="the program",
            location="",
            reason=f"the emulation could not replay it: {describe_error(e)}",
            blocks=True,
        )  # the engine's limit, not the program's fault: a note, never a failure
        replay.unemulated.append(cannot)
        return Emulated(emulation=replay.record())
    record = replay.record()
    if not record.ran:
        return Emulated(emulation=record)
    try:
        with _cpu_default():
            compiled = traced.lower().compile()
            leaves = jax.block_until_ready(compiled(*flat))  # type: ignore[no-untyped-call]
    except Exception as e:  # an interpreted kernel's failure is the platform's finding
        reset_interpreters(replay.interpreters)
        return Emulated(emulation=replay.record(error=_run_error(e)))
    value = jax.tree_util.tree_unflatten(out_tree, list(leaves))
    return Emulated(emulation=record, value=value, outputs=to_outputs(value))


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

    traced = getattr(fn, "traced", fn)  # a lowering.Trace wraps a jax.stages.Traced
    flat = jax.tree_util.tree_leaves((tuple(args), dict(kwargs)))
    closed = getattr(traced, "jaxpr", None)
    out_info = getattr(traced, "out_info", None)
    if closed is not None and out_info is not None and hasattr(closed, "consts"):
        if len(flat) != len(closed.in_avals):
            raise ValueError(
                f"the trace takes {len(closed.in_avals)} arrays, the arguments hold "
                f"{len(flat)}: pass the arguments it was traced with"
            )
        return closed, jax.tree_util.tree_structure(out_info), flat
    function = cast("Callable[..., object]", fn)  # neither a Traced nor a Trace: a function
    closed, out_shape = jax.make_jaxpr(function, return_shape=True)(*args, **kwargs)
    return closed, jax.tree_util.tree_structure(out_shape), flat


class _Replay(Evaluator):
    """Evaluates a jaxpr under the current trace with the emulated platform's choices,
    recording each choice and where the user's code made it."""

    def __init__(
        self,
        platform: str,
        dot_format: NumberFormat | None,
        *,
        all_pinned: bool = False,
        own: tuple[str, ...] = (),
    ) -> None:
        self.platform = platform
        self.own = own
        self.dot_format = dot_format
        self.all_pinned = all_pinned
        """``jax.default_matmul_precision(...)`` chose every default dot's precision."""
        self.branches: list[ChosenBranch] = []
        self.kernels: list[EmulatedKernel] = []
        self.rounded: list[tuple[str, str, str]] = []
        self.pinned = 0
        self.unemulated: list[Unemulated] = []
        self.interpreters: set[str] = set()
        self._lines: dict[object, str] = {}
        self._outer: list[str] = []  # the lines of the equations being replayed inside
        self._touches: dict[int, bool] = {}

    def record(self, *, error: str | None = None) -> Emulation:
        return Emulation(
            platform=self.platform,
            dot_format=None if self.dot_format is None else self.dot_format.name,
            branches=tuple(dict.fromkeys(self.branches)),
            kernels=tuple(dict.fromkeys(self.kernels)),
            rounded=grouped_rounding(self.rounded),
            pinned=self.pinned,
            unemulated=tuple(dict.fromkeys(self.unemulated)),
            error=error,
        )

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
        return self.dot_format is not None and _dot_precision(eqn) is not None

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
        if name in ("dot_general", "conv_general_dilated") and self.dot_format is not None:
            precision = _dot_precision(eqn)
            if precision == "default" and not self.all_pinned:
                return self.rounded_dot(eqn, values)
            if precision is not None:
                self.pinned += 1
        if name == "cond" and (static_index or eqn.params.get("branches_platforms")):
            # platform_dependent's cond: from jax 0.7 it carries ``branches_platforms`` and
            # its lowering picks the branch by the platform it lowers for (the CPU here),
            # ignoring the index. Bound as it is, the CPU's branch would run whatever the
            # index says: the emulated platform's branch is run in its place.
            return self.cond(eqn, values, static_index=static_index)
        subs = nested(eqn.params)
        if not subs or not any(self.touches(sub) for sub in subs):
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
        inner = _inlined_jaxpr(eqn)
        if inner is not None:
            jaxpr, consts = inner
            return self.run(jaxpr, consts, values)
        self.not_replayed(eqn, subs)
        return bind(eqn, values)

    # -- the three changes --------------------------------------------------------------------

    def rounded_dot(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        fmt = self.dot_format
        assert fmt is not None
        lhs, rhs, *rest = cast("list[jax.Array]", values)  # a dot's operands, traced
        self.rounded.append((eqn.primitive.name, self.line(eqn), fmt.name))
        return bind(eqn, [_rounded(lhs, fmt), _rounded(rhs, fmt), *rest])

    def kernel(self, eqn: JaxprEqn, values: list[object]) -> list[object]:
        label = kernel_label(eqn.primitive.name, eqn.params)
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
                    what=kernel_label(name, inner.params), location=self.line(inner),
                    reason=obstacle or reason, blocks=True))  # fmt: skip
            elif name == "platform_index":
                self.unemulated.append(Unemulated(
                    what="platform_dependent", location=self.line(inner),
                    reason=reason + " (its default branch runs)", blocks=False))  # fmt: skip
            elif self.dot_format is not None and _dot_precision(inner) == "default":
                self.unemulated.append(
                    Unemulated(what=name, location=self.line(inner), reason=reason, blocks=False)
                )

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


def _inlined_jaxpr(eqn: JaxprEqn) -> tuple[Jaxpr, Sequence[object]] | None:
    """``(jaxpr, consts)`` of a primitive that runs its body once on its operands."""
    if eqn.primitive.name not in INLINED_PRIMITIVES:
        return None
    for key in _INLINED_PARAMS:
        inner = eqn.params.get(key)
        if inner is not None and hasattr(opened(inner), "eqns"):
            return opened(inner), consts_of(inner)
    return None


def _not_a_kernel(eqn: JaxprEqn) -> bool:
    """Whether to look inside ``eqn``: not into a kernel's body (it is interpreted, not
    replayed)."""
    return eqn.primitive.name not in KERNEL_PRIMITIVES


def _dot_precision(eqn: JaxprEqn) -> str | None:
    """``"default"`` for a float32 (complex64) dot or convolution at the default precision,
    ``"pinned"`` for one whose precision the user chose, ``None`` for anything else."""
    if eqn.primitive.name not in ("dot_general", "conv_general_dilated"):
        return None
    dtypes = {str(getattr(v.aval, "dtype", "")) for v in eqn.invars[:2]}
    if len(dtypes) != 1 or not dtypes <= {"float32", "complex64"}:
        return None
    (dtype,) = dtypes
    preferred = eqn.params.get("preferred_element_type")
    if preferred is not None and str(preferred) != dtype:
        return "pinned"
    return "default" if _is_default(eqn.params.get("precision")) else "pinned"


def _is_default(precision: object) -> bool:
    """Whether a dot's ``precision`` is the default: ``None``, ``Precision.DEFAULT`` for
    each operand, or the ``DotAlgorithmPreset.DEFAULT`` preset."""
    if precision is None:
        return True
    if isinstance(precision, (tuple, list)):
        return all(_is_default(p) for p in precision)
    return getattr(precision, "name", None) == "DEFAULT"


def _matmul_precision_pinned() -> bool:
    """Whether ``jax_default_matmul_precision`` (or ``jax.default_matmul_precision(...)``)
    chose a precision other than the default for every dot traced now."""
    import jax

    value = getattr(jax.config, "jax_default_matmul_precision", None)
    return value is not None and str(value).lower() not in ("default", "fastest")


def _rounded(x: jax.Array, fmt: NumberFormat) -> jax.Array:
    from jax import lax

    def narrow(part: jax.Array) -> jax.Array:
        return lax.reduce_precision(
            part, exponent_bits=fmt.exponent_bits, mantissa_bits=fmt.mantissa_bits
        )

    if str(x.dtype) == "complex64":
        return lax.complex(narrow(lax.real(x)), narrow(lax.imag(x)))
    return narrow(x)


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
