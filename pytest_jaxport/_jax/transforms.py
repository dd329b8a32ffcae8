"""A check's transformations (``grad``, ``jvp``, ``vmap``): the transformed function of flat
argument leaves (:class:`Transformed`), traced once or per platform (:func:`trace_variant`),
and why one cannot be taken (the custom kernels it met).

JAX is imported inside functions (importing the plugin never imports JAX).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from pytest_jaxport._jax.adapters import KERNEL_PRIMITIVES, kernel_equation_name
from pytest_jaxport._jax.arguments import argument_leaves
from pytest_jaxport._jax.jaxprs import equations
from pytest_jaxport._jax.lowering import LoweringFailure, describe_error
from pytest_jaxport._jax.outputs import key_impl
from pytest_jaxport._jax.specialize import PlatformBranches
from pytest_jaxport._jax.tracing import Trace
from pytest_jaxport.model.config import TRANSFORMS

if TYPE_CHECKING:
    import jax
    from jax._src.interpreters.mlir import LoweringParameters
    from jax.stages import Lowered, Traced


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
        self._branches: PlatformBranches | None = None
        self.per_platform = False
        """Whether the whole transformation failed to trace, so each platform traces
        :meth:`for_platform` (set by :func:`trace_variant`)."""

    # what the transformed function is called with
    def _arguments(self, leaves: list[Any]) -> tuple[object, ...]:
        import jax.numpy as jnp

        if self.transform != "vmap":
            return tuple(leaves)
        import jax

        stacked: list[object] = []
        for leaf in leaves:
            if isinstance(leaf, jax.ShapeDtypeStruct):  # abstract: a batch of two, abstract
                batch = jax.ShapeDtypeStruct((2, *leaf.shape), leaf.dtype)  # type: ignore[no-untyped-call]
                stacked.append(batch)
                continue
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
            resolved = self._platform_branches().resolved(platform)
            self._specialized[platform] = self._build(resolved)
        return self._specialized[platform]

    def _platform_branches(self) -> PlatformBranches:
        """``fn`` traced once for every platform's :meth:`for_platform` (and explanation)."""
        if self._branches is None:
            self._branches = PlatformBranches(self.fn, self._args)
        return self._branches

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
            fn = self.fn if platform is None else self._platform_branches().resolved(platform)
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


def platform_function(fn: Callable[..., object], platform: str) -> Callable[..., object]:
    """A transformed check's function resolved for ``platform``; other functions as they are."""
    if isinstance(fn, Transformed) and fn.per_platform:
        return fn.for_platform(platform)
    return fn


def custom_kernels(
    fn: Callable[..., object], args: Sequence[object], kwargs: Mapping[str, object]
) -> list[str]:
    """The custom kernels (FFI calls, Pallas kernels) in ``fn``'s jaxpr, by name."""
    import jax

    closed = jax.make_jaxpr(fn)(*args, **kwargs)
    found = (kernel_equation_name(e.primitive.name, e.params) for e in equations(closed)
             if e.primitive.name in KERNEL_PRIMITIVES)  # fmt: skip
    return list(dict.fromkeys(found))
